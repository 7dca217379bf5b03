use super::*;
use std::net::TcpListener;
use std::time::Duration;

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn opts(self_id: &str, self_port: u16, peer_id: &str, peer_port: u16) -> TcpOptions {
    TcpOptions {
        self_id: self_id.into(),
        self_addr: format!("127.0.0.1:{self_port}"),
        peer_id: peer_id.into(),
        peer_addr: format!("127.0.0.1:{peer_port}"),
        connect_timeout: Duration::from_secs(10),
        recv_timeout: Duration::from_secs(10),
        silence_timeout: DEFAULT_SILENCE_TIMEOUT,
        tls: None,
        shape: None,
    }
}

fn tcp_pair() -> (TcpLink, TcpLink) {
    let (pa, pb) = (free_port(), free_port());
    let b = std::thread::spawn(move || TcpLink::establish(&opts("bob", pb, "alice", pa)).unwrap());
    // The connector (bob) may start first: alice starts late on purpose.
    std::thread::sleep(Duration::from_millis(300));
    let a = TcpLink::establish(&opts("alice", pa, "bob", pb)).unwrap();
    (a, b.join().unwrap())
}

pub(crate) fn exchange(a: &mut dyn Link, b: &mut dyn Link) {
    // Both send large batches at once before reading: must not deadlock.
    let big = vec![7u8; 4 << 20];
    for _ in 0..4 {
        a.send(&big).unwrap();
        b.send(&big).unwrap();
    }
    for _ in 0..4 {
        assert_eq!(a.recv().unwrap().len(), big.len());
        assert_eq!(b.recv().unwrap().len(), big.len());
    }
    a.send(b"").unwrap();
    assert_eq!(b.recv().unwrap(), b"");
    let sent = a.stats().bytes_sent;
    // Each frame costs its payload plus `frame::OVERHEAD` (9: length, kind, CRC-32).
    let f = crate::frame::OVERHEAD as u64;
    assert_eq!(sent, 4 * (f + (4 << 20)) + f);
    assert_eq!(b.stats().bytes_received, sent);
}

#[test]
fn tcp_moves_messages_both_ways_and_counts_bytes() {
    let (mut a, mut b) = tcp_pair();
    exchange(&mut a, &mut b);
    let t = std::thread::spawn(move || b.close().unwrap());
    a.close().unwrap();
    t.join().unwrap();
}

#[test]
fn mem_moves_messages_both_ways_and_counts_bytes() {
    let (mut a, mut b) = mem_pair();
    exchange(&mut a, &mut b);
    let t = std::thread::spawn(move || b.close().unwrap());
    a.close().unwrap();
    t.join().unwrap();
}

#[test]
fn abort_reaches_the_peer_with_its_reason() {
    let (mut a, mut b) = tcp_pair();
    a.abort("input file has no column `id`");
    match b.recv() {
        Err(LinkError::PeerAborted { peer, reason }) => {
            assert_eq!(peer, "alice");
            assert!(reason.contains("no column"));
        }
        other => panic!("expected abort, got {other:?}"),
    }
}

#[test]
fn silent_peer_times_out() {
    let (mut a, _b) = mem_pair_with_timeout(Duration::from_millis(100));
    assert!(matches!(a.recv(), Err(LinkError::RecvTimeout { .. })));
}

#[test]
fn missing_peer_is_a_connect_timeout() {
    let (pa, pb) = (free_port(), free_port());
    let mut o = opts("bob", pb, "alice", pa);
    o.connect_timeout = Duration::from_millis(600);
    assert!(matches!(
        TcpLink::establish(&o),
        Err(LinkError::ConnectTimeout { .. })
    ));
    let mut o = opts("alice", pa, "bob", pb);
    o.connect_timeout = Duration::from_millis(300);
    assert!(matches!(
        TcpLink::establish(&o),
        Err(LinkError::ConnectTimeout { .. })
    ));
}

#[test]
fn wrong_party_id_is_refused() {
    let (pa, pb) = (free_port(), free_port());
    let b = std::thread::spawn(move || TcpLink::establish(&opts("carol", pb, "alice", pa)));
    let a = TcpLink::establish(&opts("alice", pa, "bob", pb));
    assert!(matches!(a, Err(LinkError::WrongPeer(_))));
    assert!(matches!(b.join().unwrap(), Err(LinkError::WrongPeer(_))));
}

/// A hand-driven "bob" that greets `alice` (listening with options `o`) with `magic` and then
/// does whatever the test says: returns alice's side (or its error) and bob's raw socket.
pub(crate) fn raw_bob(
    o: TcpOptions,
    magic: &[u8; 8],
) -> (Result<TcpLink, LinkError>, std::net::TcpStream) {
    use std::io::Write;
    let port: u16 = o.self_addr.rsplit(':').next().unwrap().parse().unwrap();
    let t = std::thread::spawn(move || TcpLink::establish(&o));
    std::thread::sleep(Duration::from_millis(200));
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut g = magic.to_vec();
    put_bytes_u16(&mut g, b"bob");
    put_bytes_u16(&mut g, b"alice");
    s.write_all(&g).unwrap();
    (t.join().unwrap(), s)
}

#[test]
fn oversized_frame_header_is_rejected_without_allocating() {
    use std::io::Write;
    let (a, mut s) = raw_bob(opts("alice", free_port(), "bob", 1), b"BLNDJN03");
    let mut a = a.unwrap();
    s.write_all(&[0xff, 0xff, 0xff, 0xff, 0]).unwrap();
    assert!(matches!(a.recv(), Err(LinkError::BadFrame { .. })));
}

#[test]
fn an_older_release_is_named_not_ignored() {
    for old in [b"BLNDJN01", b"BLNDJN02"] {
        let (a, _s) = raw_bob(opts("alice", free_port(), "bob", 1), old);
        match a {
            Err(LinkError::WrongPeer(why)) => {
                assert!(why.contains("older blindjoin release"), "{why}")
            }
            other => panic!("expected WrongPeer, got {:?}", other.map(|_| ())),
        }
    }
}

/// A frame whose bytes changed on the way (any one bit, in header, payload or CRC) is refused
/// as damaged; the same frame undamaged arrives.
#[test]
fn a_damaged_frame_is_refused_and_an_intact_one_arrives() {
    use crate::frame::{Kind, encode};
    use std::io::Write;
    let good = encode(Kind::Data, b"H(x)^a for four items");
    let (a, mut s) = raw_bob(opts("alice", free_port(), "bob", 1), b"BLNDJN03");
    let mut a = a.unwrap();
    s.write_all(&good).unwrap();
    assert_eq!(a.recv().unwrap(), b"H(x)^a for four items");
    // Bits in the payload and in the CRC; the length byte is covered by the unit tests (a
    // changed length waits for bytes that never come).
    for bit in [5 * 8 + 3, 12 * 8, (good.len() - 1) * 8 + 7] {
        let mut bad = good.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let (a, mut s) = raw_bob(opts("alice", free_port(), "bob", 1), b"BLNDJN03");
        let mut a = a.unwrap();
        s.write_all(&bad).unwrap();
        match a.recv() {
            Err(e @ LinkError::BadFrame { .. }) => {
                assert!(e.to_string().contains("arrived damaged"), "{e}")
            }
            other => panic!("bit {bit}: expected BadFrame, got {other:?}"),
        }
    }
}

/// A peer whose process hangs or whose machine dies sends no FIN: the connection stays open and
/// silent. Without heartbeats `recv` would wait the whole receive timeout (an hour by default).
#[test]
fn a_dead_peer_that_keeps_the_connection_open_is_noticed_within_the_silence_timeout() {
    let mut o = opts("alice", free_port(), "bob", 1);
    o.recv_timeout = Duration::from_secs(60);
    o.silence_timeout = Duration::from_millis(800);
    let (a, _silent_bob) = raw_bob(o, b"BLNDJN03");
    let mut a = a.unwrap();
    let t = std::time::Instant::now();
    match a.recv() {
        Err(e @ LinkError::PeerSilent { .. }) => {
            assert!(e.to_string().contains("not even a heartbeat"), "{e}")
        }
        other => panic!("expected PeerSilent, got {other:?}"),
    }
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(800), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// The same peer, when we are the one sending: once the socket buffers are full a blocked write
/// fails after the silence timeout instead of waiting for TCP to give up (many minutes).
#[test]
fn sending_to_a_peer_that_stopped_reading_fails_within_the_silence_timeout() {
    let mut o = opts("alice", free_port(), "bob", 1);
    o.silence_timeout = Duration::from_millis(800);
    let (a, _deaf_bob) = raw_bob(o, b"BLNDJN03");
    let mut a = a.unwrap();
    let t = std::time::Instant::now();
    let big = vec![1u8; 4 << 20];
    let err = loop {
        if let Err(e) = a.send(&big) {
            break e;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "sends never blocked");
    };
    assert!(matches!(err, LinkError::PeerSilent { .. }), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(20));
}

/// A live peer that computes for longer than the silence timeout keeps the link up: its
/// heartbeat thread speaks for it.
#[test]
fn a_slow_peer_is_kept_alive_by_its_heartbeats() {
    let (pa, pb) = (free_port(), free_port());
    let quick = |mut o: TcpOptions| {
        o.silence_timeout = Duration::from_millis(400);
        o
    };
    let b = std::thread::spawn(move || {
        let mut b = TcpLink::establish(&quick(opts("bob", pb, "alice", pa))).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        b.send(b"done thinking").unwrap();
        b.recv().unwrap()
    });
    let mut a = TcpLink::establish(&quick(opts("alice", pa, "bob", pb))).unwrap();
    assert_eq!(a.recv().unwrap(), b"done thinking");
    a.send(b"ok").unwrap();
    assert_eq!(b.join().unwrap(), b"ok");
    // Heartbeats are liveness, not traffic: the counters hold only the two messages.
    let f = crate::frame::OVERHEAD as u64;
    assert_eq!(a.stats().bytes_received, f + 13);
    assert_eq!(a.stats().bytes_sent, f + 2);
}

#[test]
fn peer_gone_is_reported() {
    let (mut a, b) = tcp_pair();
    drop(b);
    assert!(matches!(a.recv(), Err(LinkError::PeerClosed { .. })));
}

#[test]
fn reader_rejects_lies() {
    let mut out = Vec::new();
    put_u32(&mut out, 1_000_000);
    out.extend_from_slice(&[0u8; 64]);
    let mut r = Reader::new(&out, "batch");
    assert!(r.records(32, 4096).is_err());
    let mut r = Reader::new(&out, "batch");
    assert!(
        r.records(32, 2_000_000).is_err(),
        "count beyond the bytes left"
    );
    let mut ok = Vec::new();
    put_u32(&mut ok, 2);
    ok.extend_from_slice(&[1u8; 64]);
    let mut r = Reader::new(&ok, "batch");
    assert_eq!(r.records(32, 4096).unwrap().0, 2);
    r.finish().unwrap();
    let mut r = Reader::new(b"\x05\x00ab", "hello");
    assert!(r.str_u16(64).is_err());
}

/// A shaped pair: 8 Mbit/s and 30 ms one way. A 500 kB message takes ≥ 0.5 s + 30 ms to arrive,
/// and a ping-pong of small messages costs ≥ 2 × 30 ms.
#[test]
fn shaped_links_delay_by_bandwidth_and_latency() {
    let shape = crate::LinkShape::parse(Some("8mbit"), Some("30ms")).unwrap();
    let (pa, pb) = (free_port(), free_port());
    let b = std::thread::spawn(move || {
        let mut o = opts("bob", pb, "alice", pa);
        o.shape = shape;
        let mut b = TcpLink::establish(&o).unwrap();
        let big = b.recv().unwrap();
        b.send(b"pong").unwrap();
        big.len()
    });
    let mut o = opts("alice", pa, "bob", pb);
    o.shape = shape;
    let mut a = TcpLink::establish(&o).unwrap();
    let t = std::time::Instant::now();
    a.send(&vec![7u8; 500_000]).unwrap();
    assert_eq!(a.recv().unwrap(), b"pong");
    let took = t.elapsed();
    assert_eq!(b.join().unwrap(), 500_000);
    assert!(took >= Duration::from_millis(560), "{took:?}");
}

/// The latency is a pipe's, not a per-frame pause: while the first frame of a burst waits out
/// its latency, the reader goes on reading the frames behind it (with one stage it slept the
/// latency before reading each next frame, so a burst of `k` frames paid `k` latencies). With a
/// 20 s latency, all 50 frames of a burst are read — held by the reader — long before the first
/// one is due.
#[test]
fn a_shaped_burst_is_read_on_while_its_first_frame_waits_out_the_latency() {
    let shape = crate::LinkShape::parse(None, Some("20s")).unwrap();
    let (pa, pb) = (free_port(), free_port());
    let a = std::thread::spawn(move || {
        let mut a = TcpLink::establish(&opts("alice", pa, "bob", pb)).unwrap();
        for i in 0..50u8 {
            a.send(&[i; 1000]).unwrap();
        }
        a
    });
    let mut o = opts("bob", pb, "alice", pa);
    o.shape = shape;
    let b = TcpLink::establish(&o).unwrap();
    let a = a.join().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while b.held().0 < 50 * 1000 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(b.held().0 >= 50 * 1000, "held {:?}", b.held());
    drop((a, b));
}

/// A shaped burst of many frames arrives intact and in order, and no sooner than its bytes
/// take at the bandwidth plus one latency (a lower bound only).
#[test]
fn a_shaped_burst_arrives_in_order_after_its_bytes_time() {
    let shape = crate::LinkShape::parse(Some("8mbit"), Some("30ms")).unwrap();
    let (pa, pb) = (free_port(), free_port());
    let a = std::thread::spawn(move || {
        let mut a = TcpLink::establish(&opts("alice", pa, "bob", pb)).unwrap();
        let t = std::time::Instant::now();
        for i in 0..100u32 {
            a.send(&vec![i as u8; 1000 + i as usize]).unwrap();
        }
        a.send(b"end").unwrap();
        (a, t)
    });
    let mut o = opts("bob", pb, "alice", pa);
    o.shape = shape;
    let mut b = TcpLink::establish(&o).unwrap();
    for i in 0..100u32 {
        assert_eq!(b.recv().unwrap(), vec![i as u8; 1000 + i as usize]);
    }
    assert_eq!(b.recv().unwrap(), b"end");
    let (a, t) = a.join().unwrap();
    let took = t.elapsed();
    let bytes: u64 = (0..100u64).map(|i| 5 + 1000 + i).sum::<u64>() + 8;
    let floor = Duration::from_secs_f64(bytes as f64 * 8.0 / 8e6) + Duration::from_millis(30);
    assert!(took >= floor, "{took:?} < {floor:?}");
    drop((a, b));
}

#[test]
fn varints_round_trip_and_reject_bad_encodings() {
    let values = [0u32, 1, 127, 128, 300, 1 << 21, u32::MAX];
    let mut buf = Vec::new();
    for &v in &values {
        crate::put_varint(&mut buf, v);
    }
    let back: Vec<u32> = crate::varints(&buf, "t").map(Result::unwrap).collect();
    assert_eq!(back, values);
    assert!(crate::varints(&[], "t").next().is_none());
    for bad in [
        &[0x80u8][..],
        &[0xff; 6][..],
        &[0xff, 0xff, 0xff, 0xff, 0x7f][..],
    ] {
        assert!(crate::varints(bad, "t").any(|r| r.is_err()), "{bad:?}");
    }
}

#[test]
fn u64_varints_round_trip_and_reject_bad_encodings() {
    let values = [
        0u64,
        1,
        127,
        128,
        1 << 35,
        u64::from(u32::MAX) + 1,
        u64::MAX,
    ];
    let mut buf = Vec::new();
    for &v in &values {
        let (bytes, len) = crate::varint_bytes(v);
        buf.extend_from_slice(&bytes[..len]);
    }
    let mut at = 0;
    let back: Vec<u64> = values
        .iter()
        .map(|_| crate::read_varint_u64(&buf, &mut at).unwrap())
        .collect();
    assert_eq!((back.as_slice(), at), (&values[..], buf.len()));
    assert_eq!(crate::read_varint_u64(&buf, &mut at), None, "past the end");
    for bad in [
        &[0x80u8][..],
        &[0xff; 11][..],
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02][..],
    ] {
        let mut at = 0;
        assert_eq!(crate::read_varint_u64(bad, &mut at), None, "{bad:?}");
        assert_eq!(at, 0);
    }
}

#[test]
fn bulk_bytes_cross_in_chunks_and_overruns_are_refused() {
    let (mut a, mut b) = mem_pair();
    let data: Vec<u8> = (0..(crate::BULK_CHUNK + 10)).map(|i| i as u8).collect();
    crate::send_bulk(&mut a, 9, &data).unwrap();
    assert_eq!(crate::recv_bulk(&mut b, 9, data.len(), "t").unwrap(), data);
    crate::send_bulk(&mut a, 9, &[1, 2, 3]).unwrap();
    assert!(crate::recv_bulk(&mut b, 9, 2, "t").is_err());
    crate::send_bulk(&mut a, 8, &[1]).unwrap();
    assert!(crate::recv_bulk(&mut b, 9, 1, "t").is_err());
}

mod bounds;
mod cancel;
mod greet;
mod tls;

/// A peer that always listens (as `blindjoin serve` does), reached by a party whose id sorts
/// first and so listens itself: its dial of the peer's address is the link, both ways.
#[test]
fn a_listener_reaches_a_peer_that_always_listens() {
    let (pa, pz) = (free_port(), free_port());
    // "z-server" would connect by the ids' order; it listens instead, on its own address.
    let server = std::thread::spawn(move || {
        TcpLink::establish_as(&opts("z-server", pz, "a-client", pa), true, &Cancel::new()).unwrap()
    });
    std::thread::sleep(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let mut client = TcpLink::establish(&opts("a-client", pa, "z-server", pz)).unwrap();
    let mut server = server.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    client.send(b"query").unwrap();
    assert_eq!(server.recv().unwrap(), b"query");
    server.send(b"answer").unwrap();
    assert_eq!(client.recv().unwrap(), b"answer");
    let t = std::thread::spawn(move || server.close().unwrap());
    client.close().unwrap();
    t.join().unwrap();
}

/// The ordinary case with the dial in place: the listener's dial finds the connector's port
/// closed, and the connector's own connection is the link, whichever party starts first.
#[test]
fn the_connectors_closed_port_leaves_the_listener_waiting_for_it() {
    for connector_first in [false, true] {
        let (pa, pb) = (free_port(), free_port());
        let late = move || {
            std::thread::sleep(Duration::from_millis(300));
        };
        let b = std::thread::spawn(move || {
            if !connector_first {
                late();
            }
            TcpLink::establish(&opts("bob", pb, "alice", pa)).unwrap()
        });
        if connector_first {
            late();
        }
        let mut a = TcpLink::establish(&opts("alice", pa, "bob", pb)).unwrap();
        let mut b = b.join().unwrap();
        exchange(&mut a, &mut b);
        let t = std::thread::spawn(move || b.close().unwrap());
        a.close().unwrap();
        t.join().unwrap();
    }
}

/// A blindjoin party listening at the peer's address with other ids is the configuration
/// error, found by the dial at once rather than at the connect deadline.
#[test]
fn a_listening_party_with_other_ids_at_the_peers_address_is_a_wrong_peer() {
    let (pa, pz) = (free_port(), free_port());
    let stranger = std::thread::spawn(move || {
        TcpLink::establish_as(&opts("z-other", pz, "someone", pa), true, &Cancel::new())
    });
    std::thread::sleep(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let e = TcpLink::establish(&opts("a-client", pa, "z-server", pz))
        .err()
        .expect("a wrong peer");
    assert!(matches!(e, LinkError::WrongPeer(_)), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "found by the dial"
    );
    assert!(stranger.join().unwrap().is_err());
}

/// A cancel while the listener also dials ends it with the caller's reason.
#[test]
fn a_cancel_while_listening_and_dialling_gives_the_callers_reason() {
    let (pa, pz) = (free_port(), free_port());
    let cancel = Cancel::new();
    let c = cancel.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        c.cancel("the user pressed Ctrl-C");
    });
    let e = TcpLink::establish_with_cancel(&opts("a-client", pa, "z-server", pz), &cancel)
        .err()
        .expect("cancelled");
    t.join().unwrap();
    match e {
        LinkError::Cancelled { reason } => assert!(reason.contains("Ctrl-C"), "{reason}"),
        other => panic!("{other}"),
    }
}
