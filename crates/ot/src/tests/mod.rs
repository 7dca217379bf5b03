#![allow(clippy::needless_range_loop)] // index loops read clearer in the checks

use crate::transpose::{naive_transpose_rows, transpose_rows, transpose128};
use crate::*;
use blindjoin_link::{Link, MemLink, mem_pair, put_u32, put_u64};
use curve25519_dalek::constants::RISTRETTO_BASEPOINT_POINT;
use std::thread;

fn random_choices(n: usize) -> Vec<bool> {
    let mut b = vec![0u8; n];
    blindjoin_crypto::random_bytes(&mut b).unwrap();
    b.iter().map(|x| x & 1 == 1).collect()
}

/// Runs `a` on a new thread and `b` here, each with one end of a mem link.
pub(crate) fn run2<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce(&mut MemLink) -> RA + Send + 'static,
    RA: Send + 'static,
    B: FnOnce(&mut MemLink) -> RB,
{
    let (mut la, mut lb) = mem_pair();
    let h = thread::spawn(move || {
        let r = a(&mut la);
        (r, la)
    });
    let rb = b(&mut lb);
    let (ra, _la) = h.join().unwrap();
    (ra, rb)
}

#[test]
fn base_ot_correct() {
    for k in [0usize, 1, 128, 1000] {
        let choices = random_choices(k);
        let c2 = choices.clone();
        let (pairs, got) = run2(
            move |l| base_ot_send(l, k).unwrap(),
            move |l| base_ot_receive(l, &c2).unwrap(),
        );
        assert_eq!(pairs.len(), k);
        assert_eq!(got.len(), k);
        for i in 0..k {
            let c = usize::from(choices[i]);
            assert_eq!(got[i], pairs[i][c], "k={k} i={i}");
            assert_ne!(got[i], pairs[i][1 - c], "k={k} i={i}");
            assert_ne!(pairs[i][0], pairs[i][1], "k={k} i={i}");
        }
        // No key repeats within the batch (index binding).
        let mut all: Vec<[u8; 16]> = pairs.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 2 * k);
    }
}

#[test]
fn base_ot_all_zero_and_all_one_choices() {
    // Both branches of the receiver's swap, across a whole batch.
    for bit in [false, true] {
        let choices = vec![bit; 64];
        let c2 = choices.clone();
        let (pairs, got) = run2(
            |l| base_ot_send(l, 64).unwrap(),
            move |l| base_ot_receive(l, &c2).unwrap(),
        );
        for i in 0..64 {
            assert_eq!(got[i], pairs[i][usize::from(bit)]);
            assert_ne!(got[i], pairs[i][usize::from(!bit)]);
        }
    }
}

#[test]
fn base_ot_sessions_are_independent() {
    let choices = random_choices(128);
    let run = |c: Vec<bool>| {
        run2(
            |l| base_ot_send(l, 128).unwrap(),
            move |l| base_ot_receive(l, &c).unwrap(),
        )
    };
    let (s1, r1) = run(choices.clone());
    let (s2, r2) = run(choices);
    for i in 0..128 {
        assert_ne!(r1[i], r2[i], "i={i}");
        assert_ne!(s1[i][0], s2[i][0], "i={i}");
        assert_ne!(s1[i][1], s2[i][1], "i={i}");
    }
}

#[test]
fn base_ot_zero_and_too_many() {
    let (pairs, got) = run2(
        |l| base_ot_send(l, 0).unwrap(),
        |l| base_ot_receive(l, &[]).unwrap(),
    );
    assert!(pairs.is_empty() && got.is_empty());
    let (mut l, _r) = mem_pair();
    assert!(matches!(
        base_ot_send(&mut l, MAX_BASE_OTS + 1),
        Err(OtError::Usage(_))
    ));
    assert!(matches!(
        base_ot_receive(&mut l, &vec![false; MAX_BASE_OTS + 1]),
        Err(OtError::Usage(_))
    ));
}

fn check_cot(n: usize) -> (u128, Vec<u128>) {
    let choices = random_choices(n);
    let c2 = choices.clone();
    let (s, r) = run2(
        move |l| iknp_cot_send(l, n).unwrap(),
        move |l| iknp_cot_receive(l, &c2).unwrap(),
    );
    assert_ne!(s.delta(), 0);
    assert_eq!(s.len(), n);
    assert_eq!(r.len(), n);
    assert_eq!(r.choices(), &choices[..]);
    for i in 0..n {
        let mask = if choices[i] { s.delta() } else { 0 };
        assert_eq!(r.t()[i], s.q()[i] ^ mask, "n={n} i={i}");
    }
    // Random OTs derived from the COTs agree on the chosen element only.
    let so = s.random_ots();
    let ro = r.random_ots();
    for i in 0..n {
        let c = usize::from(choices[i]);
        assert_eq!(ro[i], so[i][c]);
        assert_ne!(ro[i], so[i][1 - c]);
    }
    (s.delta(), s.q().to_vec())
}

#[test]
fn iknp_cot_correct_all_sizes() {
    for n in [0usize, 1, 127, 128, 129, 10_000, 100_000] {
        let (d1, q1) = check_cot(n);
        let (d2, q2) = check_cot(n);
        assert_ne!(d1, d2, "Δ repeats across runs");
        if n > 0 {
            assert_ne!(q1, q2, "q repeats across runs");
        }
    }
}

#[test]
fn iknp_chunk_boundaries() {
    for n in [CHUNK_OTS - 1, CHUNK_OTS, CHUNK_OTS + 1, 2 * CHUNK_OTS + 129] {
        check_cot(n);
    }
}

#[test]
fn cot_outputs_look_random() {
    // q_i must not be constant or structured: no two equal among 10,000, and bits balanced.
    let (_, q) = check_cot(10_000);
    let mut sorted = q.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), q.len());
    let ones: u32 = q.iter().map(|x| x.count_ones()).sum();
    let total = 128 * q.len() as u32;
    assert!(ones > total * 49 / 100 && ones < total * 51 / 100);
}

#[test]
fn transpose128_matches_naive() {
    for _ in 0..20 {
        let mut bytes = [0u8; 16 * 128];
        blindjoin_crypto::random_bytes(&mut bytes).unwrap();
        let mut m = [0u128; 128];
        for (j, w) in m.iter_mut().enumerate() {
            *w = u128::from_le_bytes(bytes[16 * j..16 * j + 16].try_into().unwrap());
        }
        let orig = m;
        transpose128(&mut m);
        for i in 0..128 {
            for j in 0..128 {
                assert_eq!((m[i] >> j) & 1, (orig[j] >> i) & 1);
            }
        }
        transpose128(&mut m);
        assert_eq!(m, orig, "transpose is an involution");
    }
}

#[test]
fn transpose_rows_matches_naive() {
    for cols in [128usize, 256, 1024, 128 * 37] {
        let mut rows = vec![0u8; 16 * cols];
        blindjoin_crypto::random_bytes(&mut rows).unwrap();
        let mut out = vec![0u128; cols];
        transpose_rows(&rows, cols, &mut out);
        assert_eq!(out, naive_transpose_rows(&rows, cols));
    }
    // A single set bit lands where expected.
    let cols = 256;
    let mut rows = vec![0u8; 16 * cols];
    rows[5 * (cols / 8) + 200 / 8] = 1 << (200 % 8); // row 5, column 200
    let mut out = vec![0u128; cols];
    transpose_rows(&rows, cols, &mut out);
    for (i, w) in out.iter().enumerate() {
        assert_eq!(*w, if i == 200 { 1 << 5 } else { 0 });
    }
}

// ---- hostile peers -------------------------------------------------------------------------

fn point_bytes(p: &curve25519_dalek::ristretto::RistrettoPoint) -> [u8; 32] {
    p.compress().to_bytes()
}

#[test]
fn base_ot_receiver_rejects_bad_sender_point() {
    let g = point_bytes(&RISTRETTO_BASEPOINT_POINT);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (g[..31].to_vec(), "truncated"),
        ([&g[..], &[0]].concat(), "oversized"),
        (vec![], "empty"),
        (vec![0u8; 32], "identity"),
        (vec![0xff; 32], "non-canonical"),
    ];
    for (msg, what) in cases {
        let expect_crypto = what == "identity" || what == "non-canonical";
        let (_, r) = run2(
            move |l| l.send(&msg).unwrap(),
            |l| base_ot_receive(l, &[true, false]),
        );
        match r {
            Err(OtError::Crypto(_)) if expect_crypto => {}
            Err(OtError::InvalidMessage(_)) if !expect_crypto => {}
            other => panic!("{what}: unexpected {other:?}"),
        }
    }
}

#[test]
fn base_ot_sender_rejects_bad_receiver_points() {
    let g = point_bytes(&RISTRETTO_BASEPOINT_POINT);
    let g2 = point_bytes(&(RISTRETTO_BASEPOINT_POINT + RISTRETTO_BASEPOINT_POINT));
    let good: [u8; 64] = [g, g2].concat().try_into().unwrap();
    let msg_with = |count: u32, records: &[[u8; 64]]| {
        let mut m = Vec::new();
        put_u32(&mut m, count);
        for p in records {
            m.extend_from_slice(p);
        }
        m
    };
    let with_point = |pos: usize, p: [u8; 32]| {
        // Four good records with point `pos` (= 2i + j, r_{i,j}) replaced.
        let mut m = msg_with(4, &[good; 4]);
        m[4 + 32 * pos..4 + 32 * (pos + 1)].copy_from_slice(&p);
        m
    };
    // (message, expected error kind, expected point index for "crypto")
    let cases: Vec<(Vec<u8>, &str, usize)> = vec![
        (msg_with(3, &[good; 3]), "misbehaved", 0),
        (msg_with(5, &[good; 5]), "invalid", 0),
        (msg_with(u32::MAX, &[good; 2]), "invalid", 0),
        (msg_with(4, &[good; 3]), "invalid", 0),
        (
            msg_with(4, &[good; 4])[..4 + 64 * 4 - 1].to_vec(),
            "invalid",
            0,
        ),
        ([msg_with(4, &[good; 4]), vec![1]].concat(), "invalid", 0),
        // The Chou–Orlandi shape (one point per OT) is no longer accepted.
        (
            {
                let mut m = Vec::new();
                put_u32(&mut m, 4);
                m.extend_from_slice(&[g; 4].concat());
                m
            },
            "invalid",
            0,
        ),
        (vec![1, 2], "invalid", 0),
        (vec![], "invalid", 0),
        (with_point(4, [0; 32]), "crypto", 4),
        (with_point(0, [0; 32]), "crypto", 0),
        (with_point(3, [0xee; 32]), "crypto", 3),
        (with_point(7, [0xff; 32]), "crypto", 7),
        // 2·G with the sign bit set: a non-canonical encoding of a valid point.
        (
            with_point(6, {
                let mut p = g2;
                p[31] |= 0x80;
                p
            }),
            "crypto",
            6,
        ),
    ];
    for (i, (msg, kind, want_index)) in cases.into_iter().enumerate() {
        let (_, r) = run2(
            move |l| {
                let _a = l.recv().unwrap();
                l.send(&msg).unwrap();
            },
            |l| base_ot_send(l, 4),
        );
        let ok = match (&r, kind) {
            (Err(OtError::PeerMisbehaved(_)), "misbehaved")
            | (Err(OtError::InvalidMessage(_)), "invalid") => true,
            (
                Err(OtError::Crypto(blindjoin_crypto::CryptoError::InvalidPoint { index, .. })),
                "crypto",
            ) => *index == want_index,
            _ => false,
        };
        assert!(
            ok,
            "case {i}: expected {kind}, got {:?}",
            r.map(|v| v.len())
        );
    }
}

#[test]
fn base_ot_degenerate_receiver_record_still_gives_distinct_keys() {
    // A malicious receiver may send r_{i,0} = r_{i,1}: well-formed, so accepted, but the sender's
    // two keys still differ (the slot j is hashed in) and look unrelated.
    let g = point_bytes(&RISTRETTO_BASEPOINT_POINT);
    let (_, r) = run2(
        move |l| {
            let _a = l.recv().unwrap();
            let mut m = Vec::new();
            put_u32(&mut m, 2);
            m.extend_from_slice(&[g; 4].concat());
            l.send(&m).unwrap();
        },
        |l| base_ot_send(l, 2),
    );
    let pairs = r.unwrap();
    assert_ne!(pairs[0][0], pairs[0][1]);
    assert_ne!(pairs[1][0], pairs[1][1]);
    assert_ne!(pairs[0][0], pairs[1][0]);
}

#[test]
fn iknp_sender_rejects_bad_header() {
    let with_n = |magic: &[u8], n: u64| {
        let mut h = magic.to_vec();
        put_u64(&mut h, n);
        h
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (with_n(b"IKNP", 999), "misbehaved"),
        (with_n(b"KKRT", 1000), "misbehaved"),
        (b"IKN".to_vec(), "invalid"),
        ([with_n(b"IKNP", 1000), vec![0]].concat(), "invalid"),
        (with_n(b"IKNP", 1000)[..10].to_vec(), "invalid"),
    ];
    for (msg, kind) in cases {
        let (_, r) = run2(move |l| l.send(&msg).unwrap(), |l| iknp_cot_send(l, 1000));
        let ok = matches!(
            (&r, kind),
            (Err(OtError::PeerMisbehaved(_)), "misbehaved")
                | (Err(OtError::InvalidMessage(_)), "invalid")
        );
        assert!(ok, "expected {kind}, got {:?}", r.map(|s| s.len()));
    }
}

#[test]
fn iknp_sender_rejects_bad_matrix() {
    // A receiver that runs the header and base OTs honestly, then sends a wrong-size matrix.
    let n = 1000usize;
    let expected = KAPPA * n.div_ceil(128) * 128 / 8;
    for len in [0usize, expected - 1, expected + 1, expected + (1 << 20)] {
        let (_, r) = run2(
            move |l| {
                let mut h = b"IKNP".to_vec();
                put_u64(&mut h, n as u64);
                l.send(&h).unwrap();
                base_ot_send(l, KAPPA).unwrap();
                l.send(&vec![0u8; len]).unwrap();
            },
            move |l| iknp_cot_send(l, n),
        );
        assert!(
            matches!(r, Err(OtError::InvalidMessage(_))),
            "len {len}: {:?}",
            r.map(|s| s.len())
        );
    }
}

#[test]
fn iknp_receiver_rejects_bad_base_ot_reply() {
    // A sender that answers the base-OT point with the wrong number of points.
    for count in [0u32, 127, 129, u32::MAX] {
        let (_, r) = run2(
            move |l| {
                let _header = l.recv().unwrap();
                let _a = l.recv().unwrap();
                let mut m = Vec::new();
                put_u32(&mut m, count);
                m.extend_from_slice(&[7u8; 64]);
                l.send(&m).unwrap();
            },
            |l| iknp_cot_receive(l, &[true; 300]),
        );
        assert!(
            matches!(
                r,
                Err(OtError::InvalidMessage(_)) | Err(OtError::PeerMisbehaved(_))
            ),
            "count {count}: {:?}",
            r.map(|s| s.len())
        );
    }
}

#[test]
fn peer_gone_is_a_link_error() {
    let (la, mut lb) = mem_pair();
    drop(la);
    assert!(matches!(iknp_cot_send(&mut lb, 10), Err(OtError::Link(_))));
    let (la, mut lb) = mem_pair();
    drop(la);
    assert!(matches!(
        iknp_cot_receive(&mut lb, &[true]),
        Err(OtError::Link(_))
    ));
}

mod softspoken;
