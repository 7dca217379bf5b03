//! Both n-party variants against a plaintext n-way intersection, over a full mesh of in-memory
//! links (one thread per party).

use super::*;
use crate::{Curve, NoProgress};
use blindjoin_crypto::item_digest;
use blindjoin_link::{MemLink, mem_pair};
use std::collections::HashSet;
use std::time::Instant;

const ECDH: NpcVariant = NpcVariant::Iterated(ProtocolChoice::Ecdh {
    curve: Curve::Curve25519,
});
const KKRT: NpcVariant = NpcVariant::Iterated(ProtocolChoice::Kkrt);
const ZERO: NpcVariant = NpcVariant::ZeroShare(Curve::Ristretto255);

#[allow(clippy::needless_range_loop)]
fn mesh(n: usize) -> Vec<Vec<Option<MemLink>>> {
    let mut links: Vec<Vec<Option<MemLink>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    for i in 0..n {
        for j in i + 1..n {
            let (a, b) = mem_pair();
            links[i][j] = Some(a);
            links[j][i] = Some(b);
        }
    }
    links
}

type Outputs = Vec<Result<Option<Vec<usize>>, ProtocolError>>;

/// Runs all parties; returns each party's output and the total bytes sent.
fn run_all(
    variant: NpcVariant,
    receiver: usize,
    sets: &[Vec<ItemDigest>],
    contexts: &[[u8; 16]],
) -> (Outputs, u64) {
    let links = mesh(sets.len());
    let handles: Vec<_> = links
        .into_iter()
        .enumerate()
        .map(|(me, mut mine)| {
            let items = sets[me].clone();
            let context = contexts[me];
            std::thread::spawn(move || {
                let mut refs: Vec<Option<&mut dyn Link>> = mine
                    .iter_mut()
                    .map(|l| l.as_mut().map(|l| l as &mut dyn Link))
                    .collect();
                let out = run_npc(
                    &mut refs,
                    me,
                    receiver,
                    variant,
                    context,
                    &PsiOptions::default(),
                    &items,
                    &NoProgress,
                )
                .map(|o| o.intersection);
                let sent: u64 = mine.iter().flatten().map(|l| l.stats().bytes_sent).sum();
                (out, sent)
            })
        })
        .collect();
    let mut outs = Vec::new();
    let mut bytes = 0;
    for h in handles {
        let (o, b) = h.join().unwrap();
        outs.push(o);
        bytes += b;
    }
    (outs, bytes)
}

fn plaintext(sets: &[Vec<ItemDigest>], receiver: usize) -> Vec<usize> {
    let others: Vec<HashSet<&ItemDigest>> = sets.iter().map(|s| s.iter().collect()).collect();
    (0..sets[receiver].len())
        .filter(|&i| others.iter().all(|s| s.contains(&sets[receiver][i])))
        .collect()
}

/// n parties: `common` items everyone holds, then for each party j an item missing only at j
/// (so every (n−1)-way intersection is bigger than the n-way one), and `own` items of its own.
fn sets(n: usize, common: usize, own: usize, salt: &str) -> Vec<Vec<ItemDigest>> {
    let d = |s: String| item_digest(format!("{salt}/{s}").as_bytes());
    (0..n)
        .map(|p| {
            let mut v: Vec<ItemDigest> = (0..common).map(|i| d(format!("c{i}"))).collect();
            v.extend(
                (0..n)
                    .filter(|&j| j != p)
                    .map(|j| d(format!("all-but-{j}"))),
            );
            v.extend((0..own).map(|i| d(format!("own{p}/{i}"))));
            // The data path hands items over sorted by key.
            v.sort_unstable();
            v
        })
        .collect()
}

fn check(variant: NpcVariant, sets: &[Vec<ItemDigest>], receiver: usize) {
    let contexts = vec![[7u8; 16]; sets.len()];
    let (outs, _) = run_all(variant, receiver, sets, &contexts);
    for (p, o) in outs.into_iter().enumerate() {
        let o = o.unwrap_or_else(|e| panic!("{variant:?} party {p}: {e}"));
        if p == receiver {
            assert_eq!(
                o,
                Some(plaintext(sets, receiver)),
                "{variant:?} n {}",
                sets.len()
            );
        } else {
            assert_eq!(o, None, "{variant:?}: only the receiver learns the result");
        }
    }
}

#[test]
fn every_variant_matches_the_plaintext_intersection() {
    for variant in [ECDH, KKRT, ZERO] {
        for n in 2..=5 {
            for receiver in [0, n - 1, n / 2] {
                check(variant, &sets(n, 20, 15, "mixed"), receiver);
            }
        }
    }
}

#[test]
fn empty_one_all_none() {
    let d = |s: &str| item_digest(s.as_bytes());
    for variant in [ECDH, KKRT, ZERO] {
        // One party empty: nothing.
        let mut s = sets(4, 5, 3, "empty");
        s[2].clear();
        check(variant, &s, 0);
        check(variant, &s, 2);
        // One element everywhere.
        check(variant, &vec![vec![d("x")]; 4], 1);
        // All equal: all.
        let all: Vec<_> = (0..30).map(|i| d(&format!("a{i}"))).collect();
        check(variant, &vec![all; 5], 3);
        // Disjoint: none.
        check(variant, &sets(5, 0, 10, "none"), 0);
    }
}

#[test]
fn zero_share_edges_cancel() {
    for m in 0..8 {
        let es = super::zero_share::edges(m);
        let mut degree = vec![0; m];
        for (a, b) in es {
            assert_ne!(a, b);
            degree[a] += 1;
            degree[b] += 1;
        }
        // Every helper on an edge when there are two or more, so each share is keyed.
        assert!(m < 2 || degree.iter().all(|&d| d >= 1), "m {m}");
    }
}

#[test]
fn sfs_schedule_pairs_front_with_back() {
    // Receiver 2; others by size: 3 (1), 0 (5), 4 (7), 1 (9).
    let order = iterated::schedule_order(&[5, 9, 100, 1, 7], 2);
    assert_eq!(order, vec![2, 3, 0, 4, 1]);
    assert_eq!(iterated::partner(&order, 2), Some((1, true)));
    assert_eq!(iterated::partner(&order, 1), Some((2, false)));
    assert_eq!(iterated::partner(&order, 3), Some((4, true)));
    assert_eq!(iterated::partner(&order, 0), None);
}

#[test]
fn a_party_with_another_setup_is_named() {
    let s = sets(3, 4, 2, "ctx");
    let (outs, _) = run_all(ZERO, 0, &s, &[[1; 16], [1; 16], [2; 16]]);
    assert!(outs.iter().any(
        |o| matches!(o, Err(ProtocolError::Config(m)) if m.contains("another n-party setup"))
    ));
}

/// 5 parties × 100,000 keys (80,000 common): time and bytes of both variants. Run with
/// `cargo test -p blindjoin-protocols --lib npc::tests::five_by_100k -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark: minutes in a debug build"]
fn five_by_100k() {
    let n = 5;
    let s: Vec<Vec<ItemDigest>> = (0..n)
        .map(|p| {
            let mut v: Vec<ItemDigest> = (0..80_000)
                .map(|i| item_digest(format!("c{i}").as_bytes()))
                .collect();
            v.extend((0..20_000).map(|i| item_digest(format!("own{p}/{i}").as_bytes())));
            v.sort_unstable();
            v
        })
        .collect();
    let want = plaintext(&s, 0);
    assert_eq!(want.len(), 80_000);
    for variant in [ZERO, ECDH, KKRT] {
        let t = Instant::now();
        let (outs, bytes) = run_all(variant, 0, &s, &[[0; 16]; 5]);
        let secs = t.elapsed().as_secs_f64();
        let got = outs.into_iter().next().unwrap().unwrap();
        assert_eq!(got, Some(want.clone()));
        println!(
            "{variant:?}: 5 x 100,000: {secs:.1} s, {:.1} MB sent in total",
            bytes as f64 / 1e6
        );
    }
}

/// A helper whose OKVS is not the size its announced set gives is named, and nothing is
/// allocated for what it claims.
#[test]
fn a_helper_with_a_wrong_okvs_is_named() {
    let (mut lr, mut lh) = mem_pair();
    let items: Vec<ItemDigest> = (0..10u32).map(|i| item_digest(&i.to_le_bytes())).collect();
    let fake = std::thread::spawn(move || {
        let mut links: Vec<Option<&mut dyn Link>> = vec![Some(&mut lh), None];
        let ctx = [3u8; 16];
        // The same context derivation as run_npc.
        let context = item_digest(
            [&ctx[..], ZERO.name().as_bytes(), &0usize.to_le_bytes()]
                .concat()
                .as_slice(),
        );
        hello_all(&mut links, 1, context, 10).unwrap();
        // An OKVS head claiming 2^40 entries.
        let mut head = vec![wire::byte(ids::NPC_OKVS)];
        head.extend_from_slice(&[0u8; 16]);
        put_u32_le(&mut head, 8);
        head.extend_from_slice(&(1u64 << 40).to_le_bytes());
        lh.send(&head).unwrap();
    });
    let mut links: Vec<Option<&mut dyn Link>> = vec![None, Some(&mut lr)];
    let err = run_npc(
        &mut links,
        0,
        0,
        ZERO,
        [3; 16],
        &PsiOptions::default(),
        &items,
        &NoProgress,
    )
    .unwrap_err();
    fake.join().unwrap();
    assert!(
        matches!(&err, ProtocolError::PeerMisbehaved(m) if m.contains("OKVS")),
        "{err}"
    );
}

/// A party announcing a current set larger than its inputs (iterated variant) is named.
#[test]
fn an_inflated_current_size_is_refused() {
    // Order: R (0), A (1, 3 keys), B (2, 5 keys). Level 1: R runs with B, A sits out; then R
    // and A swap current sizes, and A lies.
    let mut m = mesh(3);
    let d = |i: u32| item_digest(&i.to_le_bytes());
    let (r_items, b_items): (Vec<ItemDigest>, Vec<ItemDigest>) =
        ((0..6).map(d).collect(), (0..5).map(d).collect());
    let mut b_links = std::mem::take(&mut m[2]);
    let honest_b = std::thread::spawn(move || {
        let mut refs: Vec<Option<&mut dyn Link>> = b_links
            .iter_mut()
            .map(|l| l.as_mut().map(|l| l as &mut dyn Link))
            .collect();
        run_npc(
            &mut refs,
            2,
            0,
            ECDH,
            [5; 16],
            &PsiOptions::default(),
            &b_items,
            &NoProgress,
        )
        .map(|o| o.intersection)
    });
    let mut a_links = std::mem::take(&mut m[1]);
    let liar_a = std::thread::spawn(move || {
        let mut refs: Vec<Option<&mut dyn Link>> = a_links
            .iter_mut()
            .map(|l| l.as_mut().map(|l| l as &mut dyn Link))
            .collect();
        let context = item_digest(
            [
                &[5u8; 16][..],
                ECDH.name().as_bytes(),
                &0usize.to_le_bytes(),
            ]
            .concat()
            .as_slice(),
        );
        hello_all(&mut refs, 1, context, 3).unwrap();
        let mut msg = vec![wire::byte(ids::NPC_SIZE)];
        msg.extend_from_slice(&1000u64.to_le_bytes());
        refs[0].as_deref_mut().unwrap().send(&msg).unwrap();
        // Keep the link open until the receiver has read it.
        let _ = refs[0].as_deref_mut().unwrap().recv();
    });
    let mut refs: Vec<Option<&mut dyn Link>> = m[0]
        .iter_mut()
        .map(|l| l.as_mut().map(|l| l as &mut dyn Link))
        .collect();
    let err = run_npc(
        &mut refs,
        0,
        0,
        ECDH,
        [5; 16],
        &PsiOptions::default(),
        &r_items,
        &NoProgress,
    )
    .unwrap_err();
    drop(refs);
    drop(m);
    assert_eq!(honest_b.join().unwrap().unwrap(), None);
    let _ = liar_a.join();
    assert!(
        matches!(&err, ProtocolError::PeerMisbehaved(msg) if msg.contains("1000 keys")),
        "{err}"
    );
}

fn put_u32_le(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

use blindjoin_link::wire::{self, ids};
