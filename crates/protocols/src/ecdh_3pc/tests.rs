//! The three-party protocol against the plaintext three-way intersection, over three in-memory
//! links on three threads.

use super::*;
use crate::{NoProgress, PsiOptions};
use blindjoin_crypto::item_digest;
use blindjoin_link::{MemLink, mem_pair};
use std::collections::HashSet;

const IDS: [&str; 3] = ["alice", "bob", "carol"];

fn d(i: usize) -> ItemDigest {
    item_digest(format!("item/{i}").as_bytes())
}

/// Items whose numbers are in `r`.
fn set(r: impl IntoIterator<Item = usize>) -> Vec<ItemDigest> {
    r.into_iter().map(d).collect()
}

/// Indices of `mine` that the two other sets both hold.
fn plaintext(mine: &[ItemDigest], b: &[ItemDigest], c: &[ItemDigest]) -> Vec<usize> {
    let (b, c): (HashSet<_>, HashSet<_>) = (b.iter().collect(), c.iter().collect());
    (0..mine.len())
        .filter(|&i| b.contains(&mine[i]) && c.contains(&mine[i]))
        .collect()
}

/// Runs the three parties `alice`, `bob`, `carol` (inputs by party) with `receiver` and returns
/// each party's output, by party.
fn run3(
    inputs: [Vec<ItemDigest>; 3],
    receiver: &str,
    curve: Curve,
    batch: usize,
) -> [Result<Option<Vec<usize>>, String>; 3] {
    run3_extra(inputs, receiver, curve, batch, 0)
}

/// [`run3`] with `extra` statistical-security bits for the tags (a bucketed run's ⌈log2 B⌉).
fn run3_extra(
    inputs: [Vec<ItemDigest>; 3],
    receiver: &str,
    curve: Curve,
    batch: usize,
    extra: u32,
) -> [Result<Option<Vec<usize>>, String>; 3] {
    let ids: Vec<String> = IDS.iter().map(|s| s.to_string()).collect();
    let seat_of = seats(&ids, receiver).unwrap();
    // links[i][j]: party i's end of the link to party j.
    let (ab, ba) = mem_pair();
    let (ac, ca) = mem_pair();
    let (bc, cb) = mem_pair();
    let mut ends: Vec<Vec<Option<MemLink>>> = vec![
        vec![None, Some(ab), Some(ac)],
        vec![Some(ba), None, Some(bc)],
        vec![Some(ca), Some(cb), None],
    ];
    let setup = format!("alice,bob,carol>{receiver}");
    let mut handles = Vec::new();
    for (party, items) in inputs.into_iter().enumerate() {
        let pos = seat_of.iter().position(|&p| p == party).unwrap();
        let seat = Seat::ALL[pos];
        let others = seat.others().map(|s| seat_of[s.index()]);
        let mut l0 = ends[party][others[0]].take().unwrap();
        let mut l1 = ends[party][others[1]].take().unwrap();
        let setup = setup.clone();
        handles.push(std::thread::spawn(move || {
            let opts = PsiOptions {
                batch_size: batch,
                extra_stat_bits: extra,
                ..PsiOptions::default()
            };
            let agreed = handshake_3pc(
                [&mut l0, &mut l1],
                seat,
                curve,
                1,
                &setup,
                items.len() as u64,
            )
            .map_err(|e| e.to_string())?;
            let out = run_3pc([&mut l0, &mut l1], &agreed, &opts, &items, &NoProgress)
                .map_err(|e| e.to_string())?;
            l0.close().map_err(|e| e.to_string())?;
            l1.close().map_err(|e| e.to_string())?;
            Ok(out)
        }));
    }
    let mut outs = handles.into_iter().map(|h| h.join().unwrap());
    [
        outs.next().unwrap(),
        outs.next().unwrap(),
        outs.next().unwrap(),
    ]
}

/// Runs every receiver choice on `inputs` and checks the receiver against the plaintext and the
/// helpers learn nothing.
fn check_all_receivers(inputs: [Vec<ItemDigest>; 3], curve: Curve, batch: usize) {
    for (r, receiver) in IDS.iter().enumerate() {
        let outs = run3(inputs.clone(), receiver, curve, batch);
        for (i, out) in outs.into_iter().enumerate() {
            let out = out.unwrap_or_else(|e| panic!("party {i} failed: {e}"));
            if i == r {
                let (b, c) = ((r + 1) % 3, (r + 2) % 3);
                let want = plaintext(&inputs[r], &inputs[b], &inputs[c]);
                assert_eq!(out, Some(want), "receiver {receiver}");
            } else {
                assert_eq!(out, None, "helper {i} must learn nothing");
            }
        }
    }
}

#[test]
fn seats_follow_the_party_list() {
    let ids: Vec<String> = IDS.iter().map(|s| s.to_string()).collect();
    assert_eq!(seats(&ids, "alice").unwrap(), [0, 1, 2]);
    assert_eq!(seats(&ids, "bob").unwrap(), [1, 0, 2]);
    assert_eq!(seats(&ids, "carol").unwrap(), [2, 0, 1]);
    assert!(seats(&ids, "dave").is_err());
    assert!(seats(&ids[..2], "alice").is_err());
    let dup: Vec<String> = ["a", "a", "b"].iter().map(|s| s.to_string()).collect();
    assert!(seats(&dup, "a").is_err());
}

#[test]
fn mixed_overlaps_every_receiver() {
    // 0..40 in all three; 40..60 only alice and bob; 60..80 bob and carol; 80..100 alice, carol.
    let a = set((0..60).chain(80..100).chain(200..210));
    let b = set((0..80).chain(300..305));
    let c = set((0..40).chain(60..100).chain(400..401));
    check_all_receivers([a, b, c], Curve::Curve25519, 7);
}

#[test]
fn empty_sets_in_turn_and_all_empty() {
    let full = || set(0..50);
    for empty in 0..3 {
        let mut inputs = [full(), full(), full()];
        inputs[empty] = Vec::new();
        check_all_receivers(inputs, Curve::Curve25519, 16);
    }
    check_all_receivers([vec![], vec![], vec![]], Curve::Curve25519, 16);
}

#[test]
fn single_items_no_overlap_and_full_overlap() {
    check_all_receivers([set([1]), set([1]), set([1])], Curve::Curve25519, 4);
    check_all_receivers([set([1]), set([2]), set([1])], Curve::Curve25519, 4);
    check_all_receivers(
        [set(0..100), set(100..200), set(200..300)],
        Curve::Curve25519,
        32,
    );
    check_all_receivers(
        [set(0..100), set(0..100), set(0..100)],
        Curve::Ristretto255,
        32,
    );
}

#[test]
fn pairwise_only_overlaps_reveal_nothing_to_the_receiver() {
    // P ∩ Q is large, R meets neither: R gets an empty result (and min(|P|,|Q|) padded points).
    let outs = run3(
        [set(1000..1100), set(0..500), set(0..400)],
        "alice",
        Curve::Curve25519,
        64,
    );
    let [a, b, c] = outs;
    assert_eq!(a.unwrap(), Some(vec![]));
    assert_eq!(b.unwrap(), None);
    assert_eq!(c.unwrap(), None);
}

#[test]
fn batch_boundaries() {
    for n in [4095usize, 4096, 8193] {
        let a = set(0..n);
        let b = set(n / 3..n + 100);
        let c = set((0..n).filter(|i| i % 2 == 0));
        let outs = run3(
            [a.clone(), b.clone(), c.clone()],
            "alice",
            Curve::Curve25519,
            4096,
        );
        assert_eq!(
            outs[0].as_ref().unwrap(),
            &Some(plaintext(&a, &b, &c)),
            "n = {n}"
        );
    }
}

#[test]
fn every_curve() {
    for curve in Curve::ALL {
        let outs = run3([set(0..30), set(10..40), set(20..50)], "bob", curve, 8);
        let want: Vec<usize> = (10..20).collect();
        assert_eq!(outs[1].as_ref().unwrap(), &Some(want), "{curve}");
    }
}

#[test]
fn mismatched_setup_fails_on_every_link_it_touches() {
    // carol was configured with another receiver: both ends of each of her links fail, and
    // nobody hangs (a party that fails drops its links, which its peers see as closed).
    let (ab, ba) = mem_pair();
    let (ac, ca) = mem_pair();
    let (bc, cb) = mem_pair();
    let good = "alice,bob,carol>alice";
    // Each thread owns its links, so they drop (and close) when its handshake fails.
    let go = |seat, setup: &'static str, mut l0: MemLink, mut l1: MemLink| {
        std::thread::spawn(move || {
            handshake_3pc([&mut l0, &mut l1], seat, Curve::Curve25519, 1, setup, 3)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    };
    let a = go(Seat::Receiver, good, ab, ac);
    let b = go(Seat::P, good, ba, bc);
    let c = go(Seat::Q, "alice,bob,carol>bob", ca, cb);
    let (a, b, c) = (a.join().unwrap(), b.join().unwrap(), c.join().unwrap());
    let a = a.unwrap_err();
    assert!(a.contains("disagree"), "{a}");
    assert!(b.is_err() && c.is_err());
}

/// One party of three whose link to one peer mangles one outgoing message: the honest parties
/// end within a bound, never panic, and a truncated or padded message is an error to someone
/// (a replaced one may go unnoticed: the protocol is semi-honest).
#[test]
fn a_hostile_party_ends_the_run_with_typed_errors() {
    use crate::tests::hostile::{Hostile, Mangle};
    use blindjoin_link::mem_pair_with_timeout;
    use std::sync::mpsc;
    use std::time::Duration;

    let inputs = [set(0..24), set(8..30), set(12..40)];
    let setup = "alice,bob,carol>alice";
    let ids: Vec<String> = IDS.iter().map(|s| s.to_string()).collect();
    let seat_of = seats(&ids, "alice").unwrap();
    let mut cases = 0;
    for hostile in 0..3 {
        for hostile_link in 0..2 {
            // Each party sends its hello and at most two messages per link at these sizes.
            for target in 0..3 {
                for mangle in [Mangle::Truncate, Mangle::Pad, Mangle::Replace] {
                    // Short: a party whose peer failed waits at most this long.
                    let t = Duration::from_millis(700);
                    let (ab, ba) = mem_pair_with_timeout(t);
                    let (ac, ca) = mem_pair_with_timeout(t);
                    let (bc, cb) = mem_pair_with_timeout(t);
                    let mut ends: Vec<Vec<Option<MemLink>>> = vec![
                        vec![None, Some(ab), Some(ac)],
                        vec![Some(ba), None, Some(bc)],
                        vec![Some(ca), Some(cb), None],
                    ];
                    let (tx, rx) = mpsc::channel();
                    for (party, items) in inputs.iter().cloned().enumerate() {
                        let pos = seat_of.iter().position(|&p| p == party).unwrap();
                        let seat = Seat::ALL[pos];
                        let others = seat.others().map(|s| seat_of[s.index()]);
                        let l0 = ends[party][others[0]].take().unwrap();
                        let l1 = ends[party][others[1]].take().unwrap();
                        let tx = tx.clone();
                        std::thread::spawn(move || {
                            let outcome = if party == hostile {
                                let (mut h, mut o) = (
                                    Hostile::new(l0, target, mangle, 0),
                                    Hostile::new(l1, usize::MAX, mangle, 0),
                                );
                                if hostile_link == 1 {
                                    std::mem::swap(&mut h, &mut o);
                                }
                                let _ = party_run(&mut h, &mut o, seat, setup, &items);
                                Outcome::Hostile {
                                    struck: h.struck() || o.struck(),
                                }
                            } else {
                                let (mut l0, mut l1) = (l0, l1);
                                Outcome::Honest(party_run(&mut l0, &mut l1, seat, setup, &items))
                            };
                            let _ = tx.send(outcome);
                        });
                    }
                    drop(tx);
                    let mut honest_errors = 0;
                    let mut struck = false;
                    for _ in 0..3 {
                        let outcome = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| {
                            panic!("hang: party {hostile} link {hostile_link} msg {target} {mangle:?}")
                        });
                        match outcome {
                            Outcome::Honest(Err(_)) => honest_errors += 1,
                            Outcome::Honest(Ok(_)) => {}
                            Outcome::Hostile { struck: s } => struck = s,
                        }
                    }
                    if struck && !matches!(mangle, Mangle::Replace) {
                        assert!(
                            honest_errors > 0,
                            "party {hostile} link {hostile_link} msg {target} {mangle:?} went unnoticed"
                        );
                    }
                    cases += usize::from(struck);
                }
            }
        }
    }
    assert!(cases >= 24, "only {cases} messages were mangled");
}

/// How a party of [`a_hostile_party_ends_the_run_with_typed_errors`] ended.
enum Outcome {
    Honest(Result<Option<Vec<usize>>, ProtocolError>),
    /// Whether the mangled message was sent at all.
    Hostile {
        struck: bool,
    },
}

/// One party's handshake and run; links are closed on success and dropped either way.
fn party_run(
    l0: &mut dyn Link,
    l1: &mut dyn Link,
    seat: Seat,
    setup: &str,
    items: &[ItemDigest],
) -> Result<Option<Vec<usize>>, ProtocolError> {
    let agreed = handshake_3pc(
        [&mut *l0, &mut *l1],
        seat,
        Curve::Curve25519,
        1,
        setup,
        items.len() as u64,
    )?;
    let out = run_3pc(
        [&mut *l0, &mut *l1],
        &agreed,
        &PsiOptions::default(),
        items,
        &NoProgress,
    )?;
    l0.close()?;
    l1.close()?;
    Ok(out)
}

/// The receiver's match tags grow by ⌈log2 B⌉ bits with B buckets, as two-party tags do, and the
/// three parties still agree on them.
#[test]
fn tag_length_grows_with_the_bucket_count() {
    let agreed = Agreed3 {
        seat: Seat::Receiver,
        curve: Curve::Curve25519,
        sizes: [1 << 12, 1 << 12, 1 << 13],
    };
    let len = |buckets: u32| {
        let opts = PsiOptions {
            extra_stat_bits: buckets.next_power_of_two().trailing_zeros(),
            ..PsiOptions::default()
        };
        match_tag_len(&agreed, &opts)
    };
    // 40 + log2(2^12 · 2^12) = 64 bits with one bucket; each doubling adds a bit.
    assert_eq!(len(1), 8);
    assert_eq!(len(2), 9);
    assert_eq!(len(256), 9);
    assert_eq!(len(512), 10);
    let mut last = 0;
    for b in [1u32, 2, 4, 1 << 10, 1 << 20] {
        assert!(len(b) >= last);
        last = len(b);
    }
    assert!(last > len(1));

    let r = set(0..40);
    let p = set(20..70);
    let q = set(10..30);
    let want = plaintext(&r, &p, &q);
    let outs = run3_extra([r, p, q], "alice", Curve::Curve25519, 16, 10);
    assert_eq!(outs[0].as_ref().unwrap().as_deref(), Some(&want[..]));
}
