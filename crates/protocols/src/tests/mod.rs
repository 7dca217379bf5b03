//! Every protocol against a plaintext intersection, over the in-memory link on two threads.

/// The same allocator as the CLI, so these runs exercise the allocator the binary uses.
#[global_allocator]
static ALLOC: blindjoin_alloc::HugePageAlloc = blindjoin_alloc::HugePageAlloc;

use super::*;
use blindjoin_crypto::item_digest;
use blindjoin_link::mem_pair;
use std::collections::HashSet;

struct Case {
    n_r: usize,
    n_s: usize,
    overlap: usize,
}

/// Receiver items are r0.., sender items share `overlap` of them.
fn sets(c: &Case, salt: u64) -> (Vec<ItemDigest>, Vec<ItemDigest>) {
    let d = |tag: &str, i: usize| item_digest(format!("{salt}/{tag}/{i}").as_bytes());
    let xs: Vec<_> = (0..c.n_r).map(|i| d("x", i)).collect();
    let ys: Vec<_> = (0..c.n_s)
        .map(|i| {
            if i < c.overlap {
                xs[c.n_r - 1 - i]
            } else {
                d("y", i)
            }
        })
        .collect();
    (xs, ys)
}

fn plaintext(mine: &[ItemDigest], theirs: &[ItemDigest]) -> Vec<usize> {
    let set: HashSet<_> = theirs.iter().collect();
    (0..mine.len())
        .filter(|&i| set.contains(&mine[i]))
        .collect()
}

/// What runs: protocol, curve, mode.
type Proto = ProtocolChoice;

fn ecdh(curve: Curve) -> Proto {
    ProtocolChoice::Ecdh { curve }
}

fn rr22(mode: rr22::Rr22Mode) -> Proto {
    ProtocolChoice::Rr22 { mode }
}

fn run_pair(
    p: Proto,
    xs: Vec<ItemDigest>,
    ys: Vec<ItemDigest>,
    broadcast: bool,
    batch: usize,
) -> (PsiOutput, PsiOutput) {
    let opts = PsiOptions {
        batch_size: batch,
        ..PsiOptions::default()
    };
    let (r, s) = run_pair_with(p, xs, ys, broadcast, opts.clone(), opts);
    (r.unwrap(), s.unwrap())
}

/// Runs receiver (`xs`, `opts_r`) against sender (`ys`, `opts_s`); returns both results.
fn run_pair_with(
    p: Proto,
    xs: Vec<ItemDigest>,
    ys: Vec<ItemDigest>,
    broadcast: bool,
    opts: PsiOptions,
    o2: PsiOptions,
) -> (
    Result<PsiOutput, ProtocolError>,
    Result<PsiOutput, ProtocolError>,
) {
    let (mut la, mut lb) = mem_pair();
    // Both announce the receiver's reveal mode; each runs with its own options (a test may give
    // the sender a lower threshold than the receiver uses).
    let reveal = opts.reveal;
    let hello = move |role, n: usize| Hello::new(p, role, broadcast, n as u64).with_reveal(reveal);
    let t = std::thread::spawn(move || {
        let hs = handshake(&mut lb, hello(Role::Sender, ys.len())).unwrap();
        let out = run_psi(&mut lb, &hs, &o2, &ys, &NoProgress);
        if out.is_ok() {
            lb.close().unwrap();
        }
        out
    });
    let hs = handshake(&mut la, hello(Role::Receiver, xs.len())).unwrap();
    let out = run_psi(&mut la, &hs, &opts, &xs, &NoProgress);
    if out.is_ok() {
        la.close().unwrap();
    }
    (out, t.join().unwrap())
}

fn check(curve: Proto, c: Case, batch: usize) {
    let (xs, ys) = sets(&c, c.n_r as u64 * 31 + c.n_s as u64);
    for broadcast in [true, false] {
        let (r, s) = run_pair(curve, xs.clone(), ys.clone(), broadcast, batch);
        let want_r = plaintext(&xs, &ys);
        assert_eq!(want_r.len(), c.overlap);
        assert_eq!(
            r.intersection.as_ref(),
            Some(&want_r),
            "{curve:?} receiver n_r={} n_s={}",
            c.n_r,
            c.n_s
        );
        if broadcast {
            assert_eq!(
                s.intersection,
                Some(plaintext(&ys, &xs)),
                "{curve:?} sender"
            );
        } else {
            assert_eq!(s.intersection, None);
        }
    }
}

fn every_case(curve: Proto) {
    let edge = [
        Case {
            n_r: 0,
            n_s: 0,
            overlap: 0,
        },
        Case {
            n_r: 0,
            n_s: 5,
            overlap: 0,
        },
        Case {
            n_r: 5,
            n_s: 0,
            overlap: 0,
        },
        Case {
            n_r: 1,
            n_s: 1,
            overlap: 1,
        },
        Case {
            n_r: 1,
            n_s: 1,
            overlap: 0,
        },
        Case {
            n_r: 200,
            n_s: 150,
            overlap: 0,
        },
        Case {
            n_r: 200,
            n_s: 200,
            overlap: 200,
        },
        Case {
            n_r: 37,
            n_s: 300,
            overlap: 20,
        },
    ];
    for c in edge {
        check(curve, c, 64);
    }
    for n in [4095, 4096, 4097] {
        check(
            curve,
            Case {
                n_r: n,
                n_s: n,
                overlap: n / 2,
            },
            4096,
        );
    }
}

#[test]
fn ecdh_curve25519_matches_plaintext() {
    every_case(ecdh(Curve::Curve25519));
}

#[test]
fn ecdh_ristretto255_matches_plaintext() {
    every_case(ecdh(Curve::Ristretto255));
}

#[test]
fn ecdh_secp256k1_matches_plaintext() {
    every_case(ecdh(Curve::Secp256k1));
}

#[test]
fn ecdh_p256_matches_plaintext() {
    every_case(ecdh(Curve::P256));
}

#[test]
fn ecdh_sm2_matches_plaintext() {
    every_case(ecdh(Curve::Sm2));
}

#[test]
fn ecdh_unbalanced_and_small_batches() {
    check(
        ecdh(Curve::Curve25519),
        Case {
            n_r: 3000,
            n_s: 17,
            overlap: 17,
        },
        100,
    );
    check(
        ecdh(Curve::Curve25519),
        Case {
            n_r: 17,
            n_s: 3000,
            overlap: 9,
        },
        1,
    );
}

#[test]
fn rr22_fast_matches_plaintext() {
    every_case(rr22(rr22::Rr22Mode::Fast));
}

#[test]
fn rr22_low_comm_matches_plaintext() {
    every_case(rr22(rr22::Rr22Mode::LowComm));
}

#[test]
fn rr22_malicious_matches_plaintext() {
    every_case(rr22(rr22::Rr22Mode::Malicious));
}

#[test]
fn rr22_larger_and_unbalanced_sets() {
    for mode in [
        rr22::Rr22Mode::Fast,
        rr22::Rr22Mode::LowComm,
        rr22::Rr22Mode::Malicious,
    ] {
        for (n_r, n_s, overlap) in [
            (2, 2, 1),
            (1000, 1000, 0),
            (1000, 1000, 1000),
            (1 << 10, 1 << 16, 500),
            (1 << 16, 1 << 10, 1 << 10),
            (100_000, 100_000, 33_333),
        ] {
            check(rr22(mode), Case { n_r, n_s, overlap }, 4096);
        }
    }
}

#[test]
fn rr22_sizes_follow_the_set_sizes() {
    use rr22::{Rr22Mode, Rr22Sizes};
    let s = Rr22Sizes::new(Rr22Mode::Fast, 1 << 20, 1 << 20, 0);
    assert_eq!((s.value_bytes, s.out_bytes), (16, 10));
    let s = Rr22Sizes::new(Rr22Mode::LowComm, 1 << 20, 1 << 20, 0);
    assert_eq!((s.value_bytes, s.out_bytes), (8, 10)); // 40 + 20 bits → 8 bytes
    let s = Rr22Sizes::new(Rr22Mode::LowComm, 1 << 30, 1 << 30, 0);
    assert_eq!((s.value_bytes, s.out_bytes), (9, 13));
    let s = Rr22Sizes::new(Rr22Mode::Malicious, 10, 10, 0);
    assert_eq!((s.value_bytes, s.out_bytes), (16, 16));
}

#[test]
fn tag_length_follows_the_set_sizes() {
    assert_eq!(ecdh::tag_len(0, 0), 8);
    assert_eq!(ecdh::tag_len(1 << 20, 1 << 20), 10); // 40 + 40 bits
    assert_eq!(ecdh::tag_len(1 << 30, 1 << 30), 13); // 40 + 60 bits
    assert_eq!(ecdh::tag_len(u32::MAX as u64, u32::MAX as u64), 13); // 40 + 64 bits
}

fn mismatch(a: Hello, b: Hello) -> (String, String) {
    let (mut la, mut lb) = mem_pair();
    let t = std::thread::spawn(move || handshake(&mut lb, b).unwrap_err().to_string());
    let ea = handshake(&mut la, a).unwrap_err().to_string();
    (ea, t.join().unwrap())
}

#[test]
fn handshake_mismatch_is_reported_on_both_sides() {
    let base = |role| Hello::new(ecdh(Curve::Curve25519), role, true, 10);
    let mut other_curve = base(Role::Sender);
    other_curve.choice = ecdh(Curve::Secp256k1);
    let (a, b) = mismatch(base(Role::Receiver), other_curve);
    for e in [&a, &b] {
        assert!(
            e.contains("curve") && e.contains("CURVE_25519") && e.contains("CURVE_SECP256K1"),
            "{e}"
        );
    }
    let (a, b) = mismatch(base(Role::Receiver), base(Role::Receiver));
    assert!(a.contains("role") && b.contains("role"), "{a} / {b}");
    let mut bc = base(Role::Sender);
    bc.broadcast_result = false;
    let (a, b) = mismatch(base(Role::Receiver), bc);
    assert!(
        a.contains("broadcast_result") && b.contains("broadcast_result"),
        "{a} / {b}"
    );
}

#[test]
fn a_lying_peer_gets_a_typed_error() {
    use blindjoin_link::Link as _;
    let (mut la, mut lb) = mem_pair();
    let t = std::thread::spawn(move || {
        let hs = handshake(
            &mut lb,
            Hello::new(ecdh(Curve::Curve25519), Role::Sender, false, 2),
        )
        .unwrap();
        let _ = hs;
        // Claims 1000 points in a 2-item session, then garbage points.
        let mut msg = blindjoin_link::wire::ids::ECDH_POINTS.to_vec();
        msg.extend_from_slice(&1000u32.to_le_bytes());
        lb.send(&msg).unwrap();
        let _ = lb.recv();
    });
    let xs = vec![item_digest(b"a"), item_digest(b"b")];
    let hs = handshake(
        &mut la,
        Hello::new(ecdh(Curve::Curve25519), Role::Receiver, false, 2),
    )
    .unwrap();
    let err = run_psi(&mut la, &hs, &PsiOptions::default(), &xs, &NoProgress).unwrap_err();
    assert!(matches!(err, ProtocolError::InvalidMessage(_)), "{err}");
    t.join().unwrap();
}

#[test]
fn rr22_hostile_receiver_gets_a_typed_error() {
    use blindjoin_link::Link as _;
    let (mut la, mut lb) = mem_pair();
    let p = rr22(rr22::Rr22Mode::Fast);
    let hello = move |role, n: u64| Hello::new(p, role, false, n);
    let ys = vec![item_digest(b"a"), item_digest(b"b")];
    let t = std::thread::spawn(move || {
        let hs = handshake(&mut lb, hello(Role::Sender, 2)).unwrap();
        run_psi(&mut lb, &hs, &PsiOptions::default(), &ys, &NoProgress).unwrap_err()
    });
    let _ = handshake(&mut la, hello(Role::Receiver, 2)).unwrap();
    // An honest VOLE of the agreed length (the OKVS size for 2 keys), then a masked-OKVS message
    // claiming more entries than the OKVS has.
    let (m, _) = blindjoin_crypto::okvs::OkvsParams::default()
        .size_for(2)
        .unwrap();
    let _vole = blindjoin_ot::vole::vole_receive(&mut la, m, 128, false).unwrap();
    let mut msg = vec![0x22u8];
    msg.extend_from_slice(&[7u8; 16]);
    msg.extend_from_slice(&((m + 5) as u32).to_le_bytes());
    msg.extend(std::iter::repeat_n(0u8, (m + 5) * 16));
    la.send(&msg).unwrap();
    let err = t.join().unwrap();
    assert!(matches!(err, ProtocolError::InvalidMessage(_)), "{err}");
}

fn kkrt() -> Proto {
    ProtocolChoice::Kkrt
}

#[test]
fn kkrt_matches_plaintext() {
    every_case(kkrt());
}

#[test]
fn kkrt_larger_and_unbalanced_sets() {
    for (n_r, n_s, overlap) in [
        (2, 2, 1),
        (1000, 1000, 0),
        (1000, 1000, 1000),
        (1000, 1000, 500),
        (1 << 10, 1 << 16, 500),
        (1 << 16, 1 << 10, 1 << 10),
        (100_000, 100_000, 0),
        (100_000, 100_000, 100_000),
        (100_000, 100_000, 33_333),
    ] {
        check(kkrt(), Case { n_r, n_s, overlap }, 4096);
    }
}

#[test]
fn kkrt_tags_cover_three_hashes() {
    // ℓ = 40 + ⌈log2(n_r · 3 n_s)⌉ bits: 82 bits → 11 bytes at 2^20 × 2^20.
    assert_eq!(ecdh::tag_len_with(1 << 20, 3 << 20, 0), 11);
    assert_eq!(ecdh::tag_len_with(1, 3, 0), 8);
}

#[test]
fn kkrt_hostile_receiver_gets_a_typed_error() {
    use blindjoin_link::Link as _;
    let (mut la, mut lb) = mem_pair();
    let p = kkrt();
    let hello = move |role, n: u64| Hello::new(p, role, false, n);
    let ys = vec![item_digest(b"a"), item_digest(b"b")];
    let t = std::thread::spawn(move || {
        let hs = handshake(&mut lb, hello(Role::Sender, 2)).unwrap();
        run_psi(&mut lb, &hs, &PsiOptions::default(), &ys, &NoProgress).unwrap_err()
    });
    let _ = handshake(&mut la, hello(Role::Receiver, 2)).unwrap();
    // A cuckoo table far larger than 2 items can need: refused before any allocation.
    let mut msg = vec![0x31u8];
    msg.extend_from_slice(&[7u8; 16]);
    msg.extend_from_slice(&(1u64 << 40).to_le_bytes());
    la.send(&msg).unwrap();
    let err = t.join().unwrap();
    assert!(matches!(err, ProtocolError::PeerMisbehaved(_)), "{err}");
}

/// Digests of the items at `idx`.
fn picked(items: &[ItemDigest], idx: &[usize]) -> HashSet<ItemDigest> {
    idx.iter().map(|&i| items[i]).collect()
}

fn reveal_opts(reveal: Reveal, batch: usize) -> PsiOptions {
    PsiOptions {
        batch_size: batch,
        reveal,
        ..PsiOptions::default()
    }
}

#[test]
fn ecdh_cardinality_reveals_only_the_count() {
    let cases = [
        (0, 0, 0),
        (1, 0, 0),
        (0, 1, 0),
        (1, 1, 1),
        (2, 2, 0),
        (1000, 700, 300),
    ];
    for (n_r, n_s, overlap) in cases {
        for broadcast in [false, true] {
            let c = Case { n_r, n_s, overlap };
            let (xs, ys) = sets(&c, 7);
            let opts = reveal_opts(Reveal::Cardinality, 64);
            let (r, s) = run_pair_with(
                ecdh(Curve::Curve25519),
                xs,
                ys,
                broadcast,
                opts.clone(),
                opts,
            );
            let (r, s) = (r.unwrap(), s.unwrap());
            assert_eq!(r.intersection, None, "{n_r}/{n_s}");
            assert_eq!(r.cardinality, Some(overlap as u64), "{n_r}/{n_s}/{overlap}");
            assert_eq!(s.intersection, None);
            assert_eq!(s.cardinality, broadcast.then_some(overlap as u64));
        }
    }
}

#[test]
fn ecdh_threshold_reveals_at_most_the_cap() {
    for (n_r, n_s, overlap) in [
        (0, 5, 0),
        (1, 1, 1),
        (50, 40, 0),
        (300, 200, 120),
        (64, 64, 64),
    ] {
        for cap in [0u64, 1, 60, 1000] {
            for broadcast in [false, true] {
                let c = Case { n_r, n_s, overlap };
                let (xs, ys) = sets(&c, cap);
                let opts = reveal_opts(Reveal::UpTo(cap), 32);
                let p = ecdh(Curve::Curve25519);
                let (r, s) =
                    run_pair_with(p, xs.clone(), ys.clone(), broadcast, opts.clone(), opts);
                let (r, s) = (r.unwrap(), s.unwrap());
                let want = cap.min(overlap as u64);
                let mine = r.intersection.unwrap();
                assert_eq!(mine.len() as u64, want, "{n_r}/{n_s}/{overlap} cap {cap}");
                assert!(mine.windows(2).all(|w| w[0] < w[1]));
                let truth: HashSet<usize> = plaintext(&xs, &ys).into_iter().collect();
                assert!(mine.iter().all(|i| truth.contains(i)));
                assert_eq!(r.cardinality, Some(overlap as u64));
                assert_eq!((r.revealed, s.revealed), (Some(want), Some(want)));
                assert_eq!(s.cardinality, broadcast.then_some(overlap as u64));
                match s.intersection {
                    Some(theirs) => {
                        assert!(broadcast);
                        assert_eq!(picked(&ys, &theirs), picked(&xs, &mine));
                    }
                    None => assert!(!broadcast),
                }
            }
        }
    }
}

#[test]
fn ecdh_threshold_revealed_items_vary_between_runs() {
    let c = Case {
        n_r: 200,
        n_s: 200,
        overlap: 200,
    };
    let (xs, ys) = sets(&c, 3);
    let opts = reveal_opts(Reveal::UpTo(10), 4096);
    let run = || {
        let (r, _) = run_pair_with(
            ecdh(Curve::Curve25519),
            xs.clone(),
            ys.clone(),
            false,
            opts.clone(),
            opts.clone(),
        );
        r.unwrap().intersection.unwrap()
    };
    assert_ne!(
        run(),
        run(),
        "the revealed subset must be random, not the first items"
    );
}

#[test]
fn ecdh_threshold_sender_enforces_its_cap() {
    let c = Case {
        n_r: 20,
        n_s: 20,
        overlap: 20,
    };
    let (xs, ys) = sets(&c, 9);
    let p = ecdh(Curve::Curve25519);
    let (_, s) = run_pair_with(
        p,
        xs,
        ys,
        true,
        reveal_opts(Reveal::UpTo(10), 8),
        reveal_opts(Reveal::UpTo(2), 8),
    );
    assert!(
        matches!(s, Err(ProtocolError::PeerMisbehaved(ref m)) if m.contains("threshold allows 2")),
        "{s:?}"
    );
}

#[test]
fn cardinality_needs_ecdh() {
    let c = Case {
        n_r: 3,
        n_s: 3,
        overlap: 1,
    };
    let (xs, ys) = sets(&c, 1);
    let opts = reveal_opts(Reveal::Cardinality, 8);
    let (r, s) = run_pair_with(
        rr22(rr22::Rr22Mode::Fast),
        xs,
        ys,
        false,
        opts.clone(),
        opts,
    );
    for out in [r, s] {
        assert!(
            matches!(out, Err(ProtocolError::Config(ref m)) if m.contains("PROTOCOL_ECDH")),
            "{out:?}"
        );
    }
}

pub(crate) mod hostile;
mod progress;
