//! The TCP link's memory bounds (see [`crate::budget`]): a peer that announces large frames and
//! sends slowly, and one that floods frames we do not read, are held to the stated bounds,
//! counted by the reader's budget (bytes allocated for queued and partial frames). All on
//! 127.0.0.1, every wait bounded by a deadline.

use super::*;
use crate::budget::{INBOX_BOUND, READ_CHUNK};
use crate::frame::{Kind, encode, header, trailer};
use crate::tests::{free_port, opts, raw_bob};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Polls `cond` every 10 ms until it holds; fails the test after `limit`.
fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

const MIB: u64 = 1 << 20;

/// A 64 MiB announcement followed by 2 MiB costs at most `2 × 2 MiB + READ_CHUNK`, not 64 MiB;
/// the frame still arrives whole once the rest is sent.
#[test]
fn an_announced_frame_costs_what_arrived_not_what_was_announced() {
    let (a, mut bob) = raw_bob(opts("alice", free_port(), "bob", 1), b"BLNDJN03");
    let mut a = a.unwrap();
    let payload: Vec<u8> = (0..MAX_FRAME_LEN).map(|i| (i % 251) as u8).collect();
    let sent = 2 << 20;
    bob.write_all(&header(Kind::Data, MAX_FRAME_LEN)).unwrap();
    for piece in payload[..sent].chunks(64 << 10) {
        bob.write_all(piece).unwrap();
    }
    wait_until("the reader to take 2 MiB", Duration::from_secs(20), || {
        a.held().0 >= sent as u64
    });
    // Settle: the reader may still be taking bytes already in the socket buffer.
    std::thread::sleep(Duration::from_millis(200));
    let bound = 2 * sent as u64 + READ_CHUNK as u64;
    let (held, peak) = a.held();
    assert!(peak <= bound, "held {held}, peak {peak} > {bound}");
    bob.write_all(&payload[sent..]).unwrap();
    bob.write_all(&trailer(&header(Kind::Data, MAX_FRAME_LEN), &payload))
        .unwrap();
    assert!(a.recv().unwrap() == payload, "the frame arrives whole");
    assert_eq!(a.held().0, 0, "recv took it out of the budget");
    assert!(a.held().1 <= MAX_FRAME_LEN as u64);
}

/// A peer that floods 1 MiB frames we do not read: the reader stops at [`INBOX_BOUND`] (the peer's
/// writes then block in TCP), and resumes when `recv` takes frames.
#[test]
fn a_flood_we_do_not_read_is_held_to_the_inbox_bound() {
    let (a, bob) = raw_bob(opts("alice", free_port(), "bob", 1), b"BLNDJN03");
    let mut a = a.unwrap();
    let frame = encode(Kind::Data, &vec![7; MIB as usize]);
    // Three times the bound, if it were all taken in.
    let frames = 3 * INBOX_BOUND / MIB as usize;
    let flood = std::thread::spawn(move || {
        let mut bob = bob;
        bob.set_write_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut written = 0usize;
        while written < frames && bob.write_all(&frame).is_ok() {
            written += 1;
        }
        written
    });
    let near = INBOX_BOUND as u64 - MIB;
    wait_until("the inbox to fill", Duration::from_secs(60), || {
        a.held().0 >= near
    });
    // Settle, then check that nothing more was taken in.
    std::thread::sleep(Duration::from_millis(500));
    let (held, peak) = a.held();
    assert!(peak <= INBOX_BOUND as u64, "held {held}, peak {peak}");
    // Taking frames makes room; the reader resumes.
    for _ in 0..200 {
        assert_eq!(a.recv().unwrap().len(), MIB as usize);
    }
    assert!(a.held().1 <= INBOX_BOUND as u64);
    drop(a);
    assert!(flood.join().unwrap() < frames, "the flood was stalled");
}

/// A reader stopped on a full inbox ends when the link is dropped (the dropped inbox wakes it),
/// instead of waiting for room that never comes.
#[test]
fn a_reader_held_back_by_a_full_inbox_ends_when_the_link_is_dropped() {
    let (a, mut bob) = raw_bob(opts("alice", free_port(), "bob", 1), b"BLNDJN03");
    let a = a.unwrap();
    let frame = encode(Kind::Data, &vec![9; MAX_FRAME_LEN]);
    // Two maximal frames fill the inbox; the third waits for room.
    let flood = std::thread::spawn(move || {
        for _ in 0..3 {
            if bob.write_all(&frame).is_err() {
                break;
            }
        }
        bob
    });
    wait_until(
        "the reader to wait for room",
        Duration::from_secs(60),
        || a.holding(),
    );
    assert_eq!(a.held().0, INBOX_BOUND as u64);
    let budget = a.budget().unwrap();
    drop(a);
    // Left holding the budget: this test only, once the reader and writer threads are gone.
    wait_until("the reader thread to end", Duration::from_secs(20), || {
        Arc::strong_count(&budget) == 1
    });
    drop(flood.join().unwrap());
}

/// Both parties send more than the bound before reading (ECDH-PSI's pattern): the credit for
/// bytes sent keeps both readers draining, so neither blocks for good.
#[test]
fn both_sending_more_than_the_bound_before_reading_does_not_deadlock() {
    let (pa, pb) = (free_port(), free_port());
    let n = INBOX_BOUND / (4 << 20) + 8;
    let talk = move |mut l: TcpLink| {
        let big = vec![3u8; 4 << 20];
        for _ in 0..n {
            l.send(&big).unwrap();
        }
        for _ in 0..n {
            assert_eq!(l.recv().unwrap().len(), big.len());
        }
        l.held().1
    };
    let b = std::thread::spawn(move || {
        talk(TcpLink::establish(&opts("bob", pb, "alice", pa)).unwrap())
    });
    let peak_a = talk(TcpLink::establish(&opts("alice", pa, "bob", pb)).unwrap());
    let peak_b = b.join().unwrap();
    // Each held at most the bound plus what it had sent.
    let most = INBOX_BOUND as u64 + n as u64 * (5 + (4 << 20));
    assert!(peak_a <= most && peak_b <= most, "{peak_a} {peak_b}");
}

/// Back-pressure is not death: alice does not read for five silence timeouts while bob sends
/// more than her bound. Bob's sends block that long; they wait because alice's heartbeats still
/// arrive, and alice's watchdog does not count the time her reader held back.
#[test]
fn a_live_peer_that_holds_back_for_longer_than_the_silence_timeout_is_not_dead() {
    let (pa, pb) = (free_port(), free_port());
    let quick = |mut o: TcpOptions| {
        o.silence_timeout = Duration::from_millis(400);
        o
    };
    let n = INBOX_BOUND / (4 << 20) + 8;
    let b = std::thread::spawn(move || {
        let mut b = TcpLink::establish(&quick(opts("bob", pb, "alice", pa))).unwrap();
        let big = vec![5u8; 4 << 20];
        for _ in 0..n {
            b.send(&big).unwrap();
        }
        b.recv().unwrap()
    });
    let mut a = TcpLink::establish(&quick(opts("alice", pa, "bob", pb))).unwrap();
    wait_until("alice's inbox to fill", Duration::from_secs(60), || {
        a.held().0 >= INBOX_BOUND as u64 - (4 << 20)
    });
    std::thread::sleep(Duration::from_secs(2));
    for _ in 0..n {
        assert_eq!(a.recv().unwrap().len(), 4 << 20);
    }
    a.send(b"all here").unwrap();
    assert_eq!(b.join().unwrap(), b"all here");
}

/// Three parties round a ring, each sending more than the bound to the next before reading from
/// the previous: every link's receiver sends nothing back on that link, so only the party-wide
/// credit (bytes sent on the party's other link) keeps the readers draining.
#[test]
fn a_ring_of_three_each_sending_more_than_the_bound_before_reading_does_not_deadlock() {
    use crate::{PartyAddr, establish_three};
    let parties: Vec<PartyAddr> = ["p0", "p1", "p2"]
        .iter()
        .map(|id| PartyAddr {
            id: id.to_string(),
            addr: format!("127.0.0.1:{}", free_port()),
        })
        .collect();
    let base = opts("", 0, "", 0);
    let n = INBOX_BOUND / (4 << 20) + 8;
    let handles: Vec<_> = (0..3)
        .map(|me| {
            let (parties, base) = (parties.clone(), base.clone());
            std::thread::spawn(move || {
                let mut links =
                    establish_three(&parties, me, &base, None, None, &crate::Cancel::new())
                        .unwrap();
                let big = vec![me as u8; 4 << 20];
                let next = links[(me + 1) % 3].as_mut().unwrap();
                for _ in 0..n {
                    next.send(&big).unwrap();
                }
                let prev = links[(me + 2) % 3].as_mut().unwrap();
                for _ in 0..n {
                    assert_eq!(prev.recv().unwrap()[0], ((me + 2) % 3) as u8);
                }
                prev.held().1
            })
        })
        .collect();
    for h in handles {
        let peak = h.join().unwrap();
        assert!(peak <= INBOX_BOUND as u64 + n as u64 * (5 + (4 << 20)));
    }
}

/// Patience has an end: a peer that keeps sending heartbeats but never reads our data makes a
/// send fail after the receive timeout, as a receive timeout (it is alive, not silent).
#[test]
fn a_live_peer_that_never_reads_fails_a_send_after_the_receive_timeout() {
    let mut o = opts("alice", free_port(), "bob", 1);
    o.silence_timeout = Duration::from_millis(400);
    o.recv_timeout = Duration::from_secs(1);
    let (a, bob) = raw_bob(o, b"BLNDJN03");
    let mut a = a.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beating = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut bob = bob;
            let until = Instant::now() + Duration::from_secs(60);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until {
                if bob.write_all(&encode(Kind::Heartbeat, b"")).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let big = vec![1u8; 4 << 20];
    let deadline = Instant::now() + Duration::from_secs(30);
    let err = loop {
        if let Err(e) = a.send(&big) {
            break e;
        }
        assert!(Instant::now() < deadline, "sends never blocked");
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    beating.join().unwrap();
    assert!(matches!(err, LinkError::RecvTimeout { .. }), "{err:?}");
}
