//! Faults between two real `blindjoin` processes on 127.0.0.1: a peer that starts late, one
//! killed mid-run, one frozen mid-run (alive but silent, as a hung or unplugged machine is), and
//! one that sends garbage. Each must end in success or in a clear error within its deadline;
//! every wait here is bounded.

use crate::support::{free_port, gen_tables, party, signal, tmp, wait, wait_timed};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// RR22 in many small buckets: a run of a few seconds with traffic throughout.
const LONG_RUN: [&str; 4] = ["--protocol", "rr22", "--bucket-size", "2000"];

/// Starts both parties on tables big enough to be mid-run after `after`, and returns them.
fn start_long_run(
    dir: &std::path::Path,
    receiver_extra: &[&str],
    after: Duration,
) -> (std::process::Child, std::process::Child) {
    gen_tables(dir, "400000", "200000", &[]);
    let (pr, ps) = (free_port(), free_port());
    let mut args: Vec<&str> = LONG_RUN.to_vec();
    args.extend_from_slice(receiver_extra);
    let r = party(dir, "receiver", pr, ps, "out", &args);
    let s = party(dir, "sender", ps, pr, "out", &LONG_RUN);
    std::thread::sleep(after);
    (r, s)
}

#[test]
fn a_peer_that_starts_20_s_late_is_waited_for() {
    let dir = tmp("faults", "late");
    gen_tables(&dir, "2000", "700", &[]);
    let (pr, ps) = (free_port(), free_port());
    // The sender connects and retries; the receiver (the listener) starts 20 s later.
    let s = party(&dir, "sender", ps, pr, "out", &["--connect-timeout", "60"]);
    std::thread::sleep(Duration::from_secs(20));
    let r = party(
        &dir,
        "receiver",
        pr,
        ps,
        "out",
        &["--connect-timeout", "60"],
    );
    let (ok_r, err_r) = wait(r, Duration::from_secs(60));
    let (ok_s, err_s) = wait(s, Duration::from_secs(60));
    assert!(ok_r && ok_s, "{err_r}\n{err_s}");
    let rows = std::fs::read_to_string(dir.join("receiver_out.csv")).unwrap();
    assert_eq!(rows.lines().count(), 1 + 700);
}

#[test]
fn a_peer_killed_mid_run_is_reported_at_once() {
    let dir = tmp("faults", "killed");
    let (r, mut s) = start_long_run(&dir, &[], Duration::from_millis(1500));
    assert!(s.try_wait().unwrap().is_none(), "the run ended too soon");
    s.kill().unwrap();
    let _ = s.wait();
    let (ok, err) = wait(r, Duration::from_secs(30));
    assert!(!ok);
    assert!(err.contains("\"sender\""), "{err}");
    // "At once" is the cause the receiver names: the closed connection, not a silence timeout.
    assert!(
        err.contains("closed the connection") || err.contains("connection to peer"),
        "{err}"
    );
    assert!(!err.contains("heartbeat"), "{err}");
    assert!(!dir.join("receiver_out.csv").exists());
}

#[test]
fn a_frozen_peer_is_reported_within_the_silence_timeout() {
    let dir = tmp("faults", "frozen");
    let silence = ["--peer-silence-timeout", "2"];
    let (r, mut s) = start_long_run(&dir, &silence, Duration::from_millis(1500));
    assert!(s.try_wait().unwrap().is_none(), "the run ended too soon");
    // SIGSTOP: the process keeps its socket open but sends nothing, not even heartbeats.
    signal(&s, "-STOP");
    let frozen_at = Instant::now();
    let (ok, err, _) = wait_timed(r, Duration::from_secs(60));
    let noticed = frozen_at.elapsed();
    s.kill().unwrap();
    let _ = s.wait();
    assert!(!ok);
    assert!(err.contains("not even a heartbeat"), "{err}");
    // Bounded, not timed: the last heartbeat arrived before the SIGSTOP, so the silence can end
    // a little before two seconds after it.
    assert!(noticed < Duration::from_secs(10), "{noticed:?}");
    assert!(!dir.join("receiver_out.csv").exists());
}

/// Plays "sender" by hand: the right greeting, then `payload` instead of a handshake.
fn fake_sender_sends(payload: &[u8]) -> String {
    let dir = tmp("faults", &format!("garbage{}", payload.len()));
    gen_tables(&dir, "100", "50", &[]);
    let (pr, ps) = (free_port(), free_port());
    let r = party(
        &dir,
        "receiver",
        pr,
        ps,
        "out",
        &["--connect-timeout", "20"],
    );
    let t = Instant::now();
    let mut sock = loop {
        match std::net::TcpStream::connect(("127.0.0.1", pr)) {
            Ok(s) => break s,
            Err(_) if t.elapsed() < Duration::from_secs(15) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("receiver never listened: {e}"),
        }
    };
    let mut greeting = b"BLNDJN03".to_vec();
    for id in [&b"sender"[..], b"receiver"] {
        greeting.extend_from_slice(&(id.len() as u16).to_le_bytes());
        greeting.extend_from_slice(id);
    }
    sock.write_all(&greeting).unwrap();
    let mut theirs = [0u8; 8 + 2 + 8 + 2 + 6];
    sock.read_exact(&mut theirs).unwrap();
    assert_eq!(&theirs[..8], b"BLNDJN03");
    sock.write_all(payload).unwrap();
    let (ok, err, took) = wait_timed(r, Duration::from_secs(30));
    assert!(!ok);
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(!dir.join("receiver_out.csv").exists());
    err
}

#[test]
fn garbage_from_the_peer_is_a_clear_error() {
    // A frame of an unknown kind.
    let err = fake_sender_sends(&[3, 0, 0, 0, 9, 1, 2, 3]);
    assert!(err.contains("malformed frame"), "{err}");
    // A frame announcing 4 GiB.
    let err = fake_sender_sends(&[0xff, 0xff, 0xff, 0xff, 0]);
    assert!(err.contains("malformed frame"), "{err}");
    // A well-formed data frame whose content is not a handshake.
    let mut junk = vec![64, 0, 0, 0, 0];
    junk.extend((0..64u8).map(|i| i.wrapping_mul(37)));
    let crc = crc32fast::hash(&junk).to_le_bytes();
    let err = fake_sender_sends(&[&junk[..], &crc].concat());
    assert!(err.contains("\"sender\"") || err.contains("peer"), "{err}");
    assert!(!err.contains("damaged"), "{err}");
    // The same frame with one byte changed on the way: refused by its CRC, naming TLS.
    junk[20] ^= 0x10;
    let err = fake_sender_sends(&[&junk[..], &crc].concat());
    assert!(
        err.contains("arrived damaged") && err.contains("TLS"),
        "{err}"
    );
}

#[test]
fn ctrl_c_stops_the_run_and_tells_the_peer_why() {
    let dir = tmp("faults", "sigint");
    let (r, mut s) = start_long_run(&dir, &[], Duration::from_millis(1500));
    assert!(s.try_wait().unwrap().is_none(), "the run ended too soon");
    signal(&s, "-INT");
    let (ok_s, err_s) = wait(s, Duration::from_secs(30));
    let (ok_r, err_r) = wait(r, Duration::from_secs(30));
    assert!(!ok_s && !ok_r);
    assert!(err_s.contains("cancelled"), "{err_s}");
    assert!(
        err_r.contains("cancelled the run (Ctrl-C or SIGTERM)"),
        "{err_r}"
    );
    assert!(!dir.join("receiver_out.csv").exists());
    assert!(!dir.join("sender_out.csv").exists());
}
