//! Two blindjoin parties speaking SecretFlow's ECDH to each other over SecretFlow's link on
//! 127.0.0.1, against the plaintext answer (the wheel itself is met in the interop tests).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::ecdh::{self, Match, Target};
use blindjoin_crypto::secretflow::SfCurve;
use blindjoin_link::Cancel;
use blindjoin_link::secretflow::{Options, Session};
use std::collections::HashMap;
use std::net::TcpListener;

fn port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

type Side = (Vec<String>, Vec<u32>);

fn both(curve: SfCurve, target: Target, a: Side, b: Side) -> [ecdh::EcdhOutcome; 2] {
    let (p0, p1) = (port(), port());
    let addr = |p: u16| format!("127.0.0.1:{p}");
    let run = move |rank: usize, side: Side| {
        let (me, peer) = if rank == 0 { (p0, p1) } else { (p1, p0) };
        move || {
            let opts = Options::new("t", rank, &addr(me), &addr(peer));
            let (session, mut ctx) = Session::start(&opts, &Cancel::new()).unwrap();
            let out = ecdh::run(&mut ctx, curve, target, &side.0, &side.1).unwrap();
            session.stop().unwrap();
            out
        }
    };
    let t = std::thread::spawn(run(1, b));
    let r0 = run(0, a)();
    [r0, t.join().unwrap()]
}

fn side(keys: &[&str], extra: &[u32]) -> Side {
    (keys.iter().map(|s| s.to_string()).collect(), extra.to_vec())
}

fn plain(a: &Side, b: &Side) -> Vec<Match> {
    let theirs: HashMap<&String, u32> = b.0.iter().zip(&b.1).map(|(k, e)| (k, *e)).collect();
    a.0.iter()
        .enumerate()
        .filter_map(|(i, k)| {
            theirs.get(k).map(|&e| Match {
                index: i as u32,
                peer_extra: e,
            })
        })
        .collect()
}

#[test]
fn every_curve_and_target_matches_the_plaintext_answer() {
    let a = side(&["k1", "k3", "k5", "k7"], &[0, 2, 0, 1]);
    let b = side(&["k0", "k3", "k4", "k7", "k9"], &[0, 1, 0, 0, 4]);
    for curve in SfCurve::ALL {
        let [ra, rb] = both(curve, Target::All, a.clone(), b.clone());
        assert_eq!(ra.matched, plain(&a, &b), "{curve:?}");
        assert_eq!(rb.matched, plain(&b, &a), "{curve:?}");
        assert_eq!((ra.peer_items, rb.peer_items), (5, 4));
    }
    // Only the receiver (rank 1 here) learns, and the sender's counts still reach it.
    let [ra, rb] = both(SfCurve::Curve25519, Target::Rank(1), a.clone(), b.clone());
    assert!(ra.matched.is_empty());
    assert_eq!(rb.matched, plain(&b, &a));
}

#[test]
fn edge_sets_empty_one_disjoint_full_and_many_batches() {
    let cases: Vec<(Side, Side)> = vec![
        (side(&[], &[]), side(&["x"], &[0])),
        (side(&[], &[]), side(&[], &[])),
        (side(&["only"], &[3]), side(&["only"], &[0])),
        (side(&["a", "b"], &[0, 0]), side(&["c", "d"], &[0, 0])),
        (
            side(&["a", "b", "c"], &[0, 0, 0]),
            side(&["a", "b", "c"], &[1, 1, 1]),
        ),
    ];
    for (a, b) in cases {
        let [ra, rb] = both(SfCurve::FourQ, Target::All, a.clone(), b.clone());
        assert_eq!(ra.matched, plain(&a, &b));
        assert_eq!(rb.matched, plain(&b, &a));
    }
    // More than one 65,536-item batch each way.
    let n = ecdh::BATCH_ITEMS + 1000;
    let a: Side = ((0..n).map(|i| format!("a{i}")).collect(), vec![0; n]);
    let b: Side = (
        (0..n).map(|i| format!("a{}", i + n / 2)).collect(),
        vec![0; n],
    );
    let [ra, _] = both(SfCurve::Curve25519, Target::Rank(0), a.clone(), b.clone());
    assert_eq!(ra.matched, plain(&a, &b));
    assert_eq!(ra.matched.len(), n - n / 2);
}

#[test]
fn a_different_curve_is_named_before_any_item_is_sent() {
    let (p0, p1) = (port(), port());
    let addr = |p: u16| format!("127.0.0.1:{p}");
    let t = std::thread::spawn(move || {
        let opts = Options::new("t", 1, &addr(p1), &addr(p0));
        let (_s, mut ctx) = Session::start(&opts, &Cancel::new()).unwrap();
        ecdh::run(&mut ctx, SfCurve::Sm2, Target::All, &["a"], &[0]).unwrap_err()
    });
    let opts = Options::new("t", 0, &addr(p0), &addr(p1));
    let (_s, mut ctx) = Session::start(&opts, &Cancel::new()).unwrap();
    let e = ecdh::run(&mut ctx, SfCurve::FourQ, Target::All, &["a"], &[0]).unwrap_err();
    assert!(e.to_string().contains("curve"), "{e}");
    assert!(t.join().unwrap().to_string().contains("curve"));
}
