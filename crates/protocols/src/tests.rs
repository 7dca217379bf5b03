//! Every protocol against a plaintext intersection, over the in-memory link on two threads.

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

fn run_pair(
    curve: Curve,
    xs: Vec<ItemDigest>,
    ys: Vec<ItemDigest>,
    broadcast: bool,
    batch: usize,
) -> (PsiOutput, PsiOutput) {
    let (mut la, mut lb) = mem_pair();
    let opts = PsiOptions {
        batch_size: batch,
        secret_key: None,
    };
    let o2 = opts.clone();
    let hello = move |role, n: usize| {
        Hello::new(
            Protocol::Ecdh,
            Some(curve),
            role,
            1,
            "INNER",
            broadcast,
            n as u64,
        )
    };
    let t = std::thread::spawn(move || {
        let hs = handshake(&mut lb, hello(Role::Sender, ys.len())).unwrap();
        let out = run_psi(&mut lb, &hs, &o2, &ys, &NoProgress).unwrap();
        lb.close().unwrap();
        out
    });
    let hs = handshake(&mut la, hello(Role::Receiver, xs.len())).unwrap();
    let out = run_psi(&mut la, &hs, &opts, &xs, &NoProgress).unwrap();
    la.close().unwrap();
    (out, t.join().unwrap())
}

fn check(curve: Curve, c: Case, batch: usize) {
    let (xs, ys) = sets(&c, c.n_r as u64 * 31 + c.n_s as u64);
    for broadcast in [true, false] {
        let (r, s) = run_pair(curve, xs.clone(), ys.clone(), broadcast, batch);
        let want_r = plaintext(&xs, &ys);
        assert_eq!(want_r.len(), c.overlap);
        assert_eq!(
            r.intersection.as_ref(),
            Some(&want_r),
            "{curve} receiver n_r={} n_s={}",
            c.n_r,
            c.n_s
        );
        if broadcast {
            assert_eq!(s.intersection, Some(plaintext(&ys, &xs)), "{curve} sender");
        } else {
            assert_eq!(s.intersection, None);
        }
    }
}

fn every_case(curve: Curve) {
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
    every_case(Curve::Curve25519);
}

#[test]
fn ecdh_ristretto255_matches_plaintext() {
    every_case(Curve::Ristretto255);
}

#[test]
fn ecdh_secp256k1_matches_plaintext() {
    every_case(Curve::Secp256k1);
}

#[test]
fn ecdh_p256_matches_plaintext() {
    every_case(Curve::P256);
}

#[test]
fn ecdh_sm2_matches_plaintext() {
    every_case(Curve::Sm2);
}

#[test]
fn ecdh_unbalanced_and_small_batches() {
    check(
        Curve::Curve25519,
        Case {
            n_r: 3000,
            n_s: 17,
            overlap: 17,
        },
        100,
    );
    check(
        Curve::Curve25519,
        Case {
            n_r: 17,
            n_s: 3000,
            overlap: 9,
        },
        1,
    );
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
    let base = |role| {
        Hello::new(
            Protocol::Ecdh,
            Some(Curve::Curve25519),
            role,
            1,
            "INNER",
            true,
            10,
        )
    };
    let mut other_curve = base(Role::Sender);
    other_curve.curve = Curve::Secp256k1.to_string();
    let (a, b) = mismatch(base(Role::Receiver), other_curve);
    for e in [&a, &b] {
        assert!(
            e.contains("curve") && e.contains("CURVE_25519") && e.contains("CURVE_SECP256K1"),
            "{e}"
        );
    }
    let (a, b) = mismatch(base(Role::Receiver), base(Role::Receiver));
    assert!(a.contains("role") && b.contains("role"), "{a} / {b}");
    let mut keys = base(Role::Sender);
    keys.key_columns = 2;
    let (a, b) = mismatch(base(Role::Receiver), keys);
    assert!(
        a.contains("key columns") && b.contains("key columns"),
        "{a} / {b}"
    );
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
            Hello::new(
                Protocol::Ecdh,
                Some(Curve::Curve25519),
                Role::Sender,
                1,
                "INNER",
                false,
                2,
            ),
        )
        .unwrap();
        let _ = hs;
        // Claims 1000 points in a 2-item session, then garbage points.
        let mut msg = vec![1u8];
        msg.extend_from_slice(&1000u32.to_le_bytes());
        lb.send(&msg).unwrap();
        let _ = lb.recv();
    });
    let xs = vec![item_digest(b"a"), item_digest(b"b")];
    let hs = handshake(
        &mut la,
        Hello::new(
            Protocol::Ecdh,
            Some(Curve::Curve25519),
            Role::Receiver,
            1,
            "INNER",
            false,
            2,
        ),
    )
    .unwrap();
    let err = run_psi(&mut la, &hs, &PsiOptions::default(), &xs, &NoProgress).unwrap_err();
    assert!(matches!(err, ProtocolError::InvalidMessage(_)), "{err}");
    t.join().unwrap();
}
