//! Two blindjoin parties speaking SecretFlow's link to each other on 127.0.0.1 (the wheel
//! interop test is `tests/secretflow_interop.rs`).

use super::*;
use std::net::TcpListener;
use std::thread;
use std::time::Instant;

pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(super) fn pair_opts() -> (Options, Options) {
    let (p0, p1) = (free_port(), free_port());
    let a = format!("127.0.0.1:{p0}");
    let b = format!("127.0.0.1:{p1}");
    let mut o0 = Options::new("t", 0, &a, &b);
    let mut o1 = Options::new("t", 1, &b, &a);
    for o in [&mut o0, &mut o1] {
        o.connect_timeout = Duration::from_secs(20);
        o.recv_timeout = Duration::from_secs(10);
        o.close_timeout = Duration::from_secs(10);
    }
    (o0, o1)
}

pub(super) fn big(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn two_rust_parties_exchange_p2p_collectives_chunks_and_close() {
    let (mut o0, mut o1) = pair_opts();
    // Small chunks so chunking and the parallel window are exercised on small values.
    o0.http_max_payload_size = 1000;
    o1.http_max_payload_size = 1000;
    let peer = thread::spawn(move || {
        // Starts late on purpose: the other side's connect retries.
        thread::sleep(Duration::from_millis(700));
        let (s, mut ctx) = Session::start(&o1, &Cancel::new()).unwrap();
        assert_eq!(ctx.recv().unwrap(), b"hello");
        assert_eq!(ctx.recv().unwrap(), big(10_500, 1));
        ctx.send(&big(7_777, 2)).unwrap();
        let g = ctx.all_gather(b"one").unwrap();
        assert_eq!(g, vec![b"zero".to_vec(), b"one".to_vec()]);
        ctx.barrier().unwrap();
        assert_eq!(ctx.broadcast(b"ignored", 0).unwrap(), b"from root");
        let mut sub = ctx.spawn();
        assert_eq!(sub.id(), "t-0");
        assert_eq!(sub.recv().unwrap(), b"sub");
        let mut named = ctx.spawn_named("read").unwrap();
        assert_eq!(named.id(), "t-read");
        named.send(b"named").unwrap();
        ctx.send(b"unread at close").unwrap();
        s.stop().unwrap();
    });
    let (s, mut ctx) = Session::start(&o0, &Cancel::new()).unwrap();
    ctx.send(b"hello").unwrap();
    ctx.send(&big(10_500, 1)).unwrap();
    assert_eq!(ctx.recv().unwrap(), big(7_777, 2));
    let g = ctx.all_gather(b"zero").unwrap();
    assert_eq!(g, vec![b"zero".to_vec(), b"one".to_vec()]);
    ctx.barrier().unwrap();
    assert_eq!(ctx.broadcast(b"from root", 0).unwrap(), b"from root");
    let mut sub = ctx.spawn();
    sub.send(b"sub").unwrap();
    let mut named = ctx.spawn_named("read").unwrap();
    assert_eq!(named.recv().unwrap(), b"named");
    // "unread at close" is never read: close must ACK it so the peer's close finishes.
    s.stop().unwrap();
    peer.join().unwrap();
}

#[test]
fn sync_wait_rounds_until_both_are_finished() {
    let (o0, o1) = pair_opts();
    let peer = thread::spawn(move || {
        let (s, mut ctx) = Session::start(&o1, &Cancel::new()).unwrap();
        let r = ctx
            .sync_wait_every(Duration::from_millis(200), |_| {
                thread::sleep(Duration::from_millis(700));
                41
            })
            .unwrap();
        assert_eq!(r, 41);
        assert_eq!(ctx.all_gather(b"after").unwrap()[0], b"after0");
        s.stop().unwrap();
    });
    let (s, mut ctx) = Session::start(&o0, &Cancel::new()).unwrap();
    let r = ctx
        .sync_wait_every(Duration::from_millis(200), |_| 7)
        .unwrap();
    assert_eq!(r, 7);
    // Both sides' next collective agrees on the counter after the rounds.
    assert_eq!(ctx.all_gather(b"after0").unwrap()[1], b"after");
    s.stop().unwrap();
    peer.join().unwrap();
}

#[test]
fn a_peer_that_dies_gives_a_typed_error_not_a_hang() {
    let (o0, o1) = pair_opts();
    let peer = thread::spawn(move || {
        let (s, mut ctx) = Session::start(&o1, &Cancel::new()).unwrap();
        ctx.send(b"one").unwrap();
        // Dropped without stop: its server and connections close, as when a process dies.
        drop(s);
    });
    let (_s, mut ctx) = Session::start(&o0, &Cancel::new()).unwrap();
    assert_eq!(ctx.recv().unwrap(), b"one");
    peer.join().unwrap();
    let t = Instant::now();
    let err = ctx.recv().unwrap_err();
    assert!(matches!(err, LinkError::PeerClosed { .. }), "{err}");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    // Sending to it: the retries find its port shut, and say the peer is gone.
    let err = ctx.send(b"anyone?").unwrap_err();
    assert!(matches!(err, LinkError::PeerClosed { .. }), "{err}");
    assert!(t.elapsed() < Duration::from_secs(16), "{:?}", t.elapsed());
}

#[test]
fn a_peer_that_never_comes_times_out_and_cancel_stops_a_wait() {
    let (mut o0, _) = pair_opts();
    o0.connect_timeout = Duration::from_millis(1500);
    let t = Instant::now();
    let err = Session::start(&o0, &Cancel::new()).err().unwrap();
    assert!(matches!(err, LinkError::ConnectTimeout { .. }), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5));

    let (o0, o1) = pair_opts();
    let cancel = Cancel::new();
    let c2 = cancel.clone();
    let peer = thread::spawn(move || {
        let (s, _ctx) = Session::start(&o1, &Cancel::new()).unwrap();
        thread::sleep(Duration::from_millis(1500));
        drop(s);
    });
    let (_s, mut ctx) = Session::start(&o0, &cancel).unwrap();
    thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        c2.cancel("test");
    });
    let err = ctx.recv().unwrap_err();
    assert!(matches!(err, LinkError::Cancelled { .. }), "{err}");
    peer.join().unwrap();
}

#[test]
fn bad_options_are_refused_by_name() {
    let mut o = Options::new("root", 2, "127.0.0.1:1", "127.0.0.1:2");
    assert!(matches!(
        o.validate(),
        Err(LinkError::InvalidOption {
            field: "self_rank",
            ..
        })
    ));
    o.self_rank = 0;
    o.id = "a\u{1}\u{2}b".into();
    assert!(matches!(
        o.validate(),
        Err(LinkError::InvalidOption { field: "id", .. })
    ));
    o.id = "root".into();
    o.http_max_payload_size = o.max_push_body;
    assert!(matches!(
        o.validate(),
        Err(LinkError::InvalidOption {
            field: "http_max_payload_size",
            ..
        })
    ));
}

#[test]
fn the_connect_step_runs_again_as_psi_does_even_when_rounds_overlap() {
    let (o0, o1) = pair_opts();
    let peer = thread::spawn(move || {
        let (s, mut ctx) = Session::start(&o1, &Cancel::new()).unwrap();
        // psi's party Init connects a second time (and here a third): seq-0 messages under one
        // key may queue up before the other side reads them.
        ctx.connect_to_mesh(Duration::from_secs(10)).unwrap();
        ctx.connect_to_mesh(Duration::from_secs(10)).unwrap();
        ctx.send(b"after").unwrap();
        s.stop().unwrap();
    });
    let (s, mut ctx) = Session::start(&o0, &Cancel::new()).unwrap();
    thread::sleep(Duration::from_millis(300));
    ctx.connect_to_mesh(Duration::from_secs(10)).unwrap();
    ctx.connect_to_mesh(Duration::from_secs(10)).unwrap();
    assert_eq!(ctx.recv().unwrap(), b"after");
    s.stop().unwrap();
    peer.join().unwrap();
}

/// yacl drops a second unread seq-0 message under one key, so psi `Init`'s connect must not
/// reach the peer before the peer has read the first: `connect_to_mesh_again` waits for the
/// peer's second connect before it sends, and still completes against a peer that waits too.
#[test]
fn the_second_connect_waits_for_the_peers_so_yacl_cannot_drop_it() {
    let (o0, o1) = pair_opts();
    let peer = thread::spawn(move || {
        let (s, ctx) = Session::start(&o1, &Cancel::new()).unwrap();
        // As a slow wheel between create_brpc and Init: nothing of the other side's second
        // connect may be here yet.
        thread::sleep(Duration::from_millis(800));
        assert_eq!(ctx.unread("connect_0"), 0);
        ctx.connect_to_mesh(Duration::from_secs(10)).unwrap();
        s.stop().unwrap();
    });
    let (s, ctx) = Session::start(&o0, &Cancel::new()).unwrap();
    ctx.connect_to_mesh_again(Duration::from_secs(10), Duration::from_secs(5))
        .unwrap();
    s.stop().unwrap();
    peer.join().unwrap();

    // Both sides wait first: each sends after its wait, and both finish.
    let (o0, o1) = pair_opts();
    let peer = thread::spawn(move || {
        let (s, ctx) = Session::start(&o1, &Cancel::new()).unwrap();
        ctx.connect_to_mesh_again(Duration::from_secs(10), Duration::from_millis(300))
            .unwrap();
        s.stop().unwrap();
    });
    let (s, ctx) = Session::start(&o0, &Cancel::new()).unwrap();
    ctx.connect_to_mesh_again(Duration::from_secs(10), Duration::from_millis(300))
        .unwrap();
    s.stop().unwrap();
    peer.join().unwrap();
}
