//! Strangers on the listener's port before the real peer: their greetings run beside the peer's
//! instead of ahead of it. All on 127.0.0.1, every wait bounded by a deadline.

use super::*;
use crate::greet::{GREETING_TIMEOUT, MAX_GREETINGS};
use crate::tests::{free_port, opts};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Connects to `port` on 127.0.0.1 as soon as something listens there (bounded).
fn connect_when_listening(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(e) => assert!(Instant::now() < deadline, "nobody listens on {port}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The strangers connect first: one silent, one stopping halfway through a greeting, then
/// [`MAX_GREETINGS`] idle ones, so the peer's connection finds every greeting slot taken. The
/// real peer is still accepted within a connect deadline
/// shorter than one greeting's timeout, so the test passes only if no stranger's greeting is
/// waited out before the peer's.
fn strangers_then_the_peer(tls: Option<(TlsConfig, TlsConfig)>) {
    let connect_within = Duration::from_secs(4);
    assert!(connect_within < GREETING_TIMEOUT);
    let (pa, pb) = (free_port(), free_port());
    let (tls_a, tls_b) = tls.unzip();
    let mut oa = opts("alice", pa, "bob", pb);
    oa.connect_timeout = connect_within;
    oa.tls = tls_a;
    let alice = std::thread::spawn(move || TcpLink::establish(&oa));
    let silent = connect_when_listening(pa);
    let mut partial = connect_when_listening(pa);
    partial.write_all(b"BLNDJN03\x03\x00bo").unwrap();
    let idle: Vec<TcpStream> = (0..MAX_GREETINGS)
        .map(|_| connect_when_listening(pa))
        .collect();
    let mut ob = opts("bob", pb, "alice", pa);
    ob.connect_timeout = connect_within;
    ob.tls = tls_b;
    let mut bob = TcpLink::establish(&ob).unwrap();
    let mut alice = alice.join().unwrap().unwrap();
    bob.send(b"past the strangers").unwrap();
    assert_eq!(alice.recv().unwrap(), b"past the strangers");
    drop((silent, partial, idle));
}

#[test]
fn strangers_holding_connections_open_do_not_delay_the_real_peer() {
    strangers_then_the_peer(None);
}

#[test]
fn strangers_do_not_delay_the_real_peer_with_tls() {
    strangers_then_the_peer(Some(crate::tests::tls::pair_configs("greet")));
}

/// A stranger trickling a byte at a time cannot stretch its greeting: each byte arrives well
/// inside one read's timeout, yet the listener's greeting gives up once [`GREETING_TIMEOUT`] has
/// passed in all (a timeout per read would restart with every byte: a 524-byte greeting could
/// take hours).
#[test]
fn a_trickled_greeting_ends_at_the_greeting_timeout() {
    let port = free_port();
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let o = opts("alice", port, "bob", 1);
    let mut stranger = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (theirs, _) = listener.accept().unwrap();
    let t = std::thread::spawn(move || match crate::greet::greet_as_listener(theirs, &o) {
        Err(crate::greet::GreetError::NotBlindjoin(why)) => why,
        Err(crate::greet::GreetError::Fatal(e)) => panic!("fatal: {e}"),
        Ok(_) => panic!("greeted"),
    });
    // A greeting that would take 52 s at this pace; the stranger trickles for at most 3 greeting
    // timeouts (15 s), so the greeting must end on its own deadline while bytes still arrive.
    let mut greeting = b"BLNDJN03\xfa\x00".to_vec();
    greeting.resize(greeting.len() + 250, b'b');
    let until = Instant::now() + 3 * GREETING_TIMEOUT;
    let mut bytes = greeting.into_iter();
    let greeting_ended = loop {
        // A failed write means the greeting thread has closed the connection.
        let sent = bytes
            .next()
            .is_some_and(|b| stranger.write_all(&[b]).is_ok());
        if t.is_finished() || !sent {
            break true;
        }
        if Instant::now() > until {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(greeting_ended, "the greeting outlived the trickle");
    let why = t.join().unwrap();
    assert!(
        why.contains("timed out") || why.contains("temporarily"),
        "{why}"
    );
}
