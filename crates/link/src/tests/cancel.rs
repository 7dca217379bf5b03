//! Tests of [`crate::Cancel`] on the TCP link: it ends the connect loops and wakes a blocked
//! `recv`, and the cancelling party's abort reaches the peer. All on 127.0.0.1, all bounded.

use super::*;
use crate::tests::{free_port, opts};
use std::time::{Duration, Instant};

/// A connected pair where alice's link watches `cancel`.
fn pair_with_cancel(cancel: &Cancel) -> (TcpLink, TcpLink) {
    let (pa, pb) = (free_port(), free_port());
    let b = std::thread::spawn(move || TcpLink::establish(&opts("bob", pb, "alice", pa)).unwrap());
    let a = TcpLink::establish_with_cancel(&opts("alice", pa, "bob", pb), cancel).unwrap();
    (a, b.join().unwrap())
}

#[test]
fn cancel_ends_the_wait_for_a_peer_that_never_comes() {
    for (me, peer) in [("alice", "bob"), ("bob", "alice")] {
        // alice listens, bob connects: both loops must notice.
        let cancel = Cancel::new();
        let c = cancel.clone();
        let o = opts(me, free_port(), peer, free_port());
        let t = std::thread::spawn(move || TcpLink::establish_with_cancel(&o, &c));
        std::thread::sleep(Duration::from_millis(300));
        let start = Instant::now();
        cancel.cancel("stop (test)");
        let err = t.join().unwrap().err().unwrap();
        assert!(start.elapsed() < Duration::from_secs(3), "{me}");
        assert!(matches!(&err, LinkError::Cancelled { reason } if reason == "stop (test)"));
        assert!(err.to_string().contains("cancelled"));
    }
}

#[test]
fn cancel_wakes_a_blocked_recv_and_the_abort_reaches_the_peer() {
    let cancel = Cancel::new();
    let (mut a, mut b) = pair_with_cancel(&cancel);
    a.send(b"before").unwrap();
    assert_eq!(b.recv().unwrap(), b"before");
    let waiting = std::thread::spawn(move || {
        let start = Instant::now();
        let err = a.recv().unwrap_err();
        // What the run does on a cancel: tell the peer why, then drop the link.
        a.abort(&format!("cancelled after {:?}: ctrl-c", start.elapsed()));
        err
    });
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    cancel.cancel("ctrl-c");
    let err = waiting.join().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "recv was not woken: {err}"
    );
    assert!(cancel.is_cancelled() && cancel.reason() == "ctrl-c");
    match b.recv() {
        Err(LinkError::PeerAborted { reason, .. }) => assert!(reason.ends_with("ctrl-c")),
        other => panic!("expected the abort, got {other:?}"),
    }
}

#[test]
fn a_send_to_a_peer_that_aborted_and_left_reports_its_reason() {
    let (mut a, mut b) = pair_with_cancel(&Cancel::new());
    a.abort("the peer cancelled the run (test)");
    drop(a);
    // The first writes may still succeed (the kernel buffers them); a later one fails, and the
    // error is the abort, not "broken pipe".
    let chunk = vec![0u8; 1 << 16];
    let err = (0..10_000)
        .find_map(|_| b.send(&chunk).err())
        .expect("writes to a closed peer must fail");
    assert!(
        matches!(&err, LinkError::PeerAborted { reason, .. } if reason.contains("cancelled")),
        "{err}"
    );
}

#[test]
fn sever_and_cancel_before_watch_are_safe() {
    let cancel = Cancel::new();
    cancel.cancel("early");
    cancel.cancel("second reason is ignored");
    cancel.sever();
    assert_eq!(cancel.reason(), "early");
    let o = opts("alice", free_port(), "bob", free_port());
    assert!(matches!(
        TcpLink::establish_with_cancel(&o, &cancel),
        Err(LinkError::Cancelled { .. })
    ));
}
