//! Writes that a live peer's back-pressure does not fail.
//!
//! The socket's send timeout is the silence timeout. A write blocked that long does not by itself
//! mean the peer is dead: a live peer's reader stops reading on purpose while its protocol
//! thread is busy and its inbox full (see [`crate::budget`]). So a timed-out write is
//! retried as long as the peer is still *heard from* — a byte (data or heartbeat) arrived within
//! the silence timeout — and the write has not waited longer than the receive timeout, the same
//! patience `recv` has with a peer that is alive but sends nothing useful. A dead or hung peer
//! sends no heartbeats either, so it is still reported within about the silence timeout.
//!
//! A timed-out `write` transferred nothing (a partial transfer returns its count), so retrying it
//! neither loses nor repeats bytes — which also keeps TLS records, written below rustls, intact.

use crate::heartbeat::Liveness;
use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a blocked write may keep waiting, shared by the link's writers.
#[derive(Debug)]
pub(crate) struct Patience {
    live: Arc<Liveness>,
    /// The peer counts as heard from if a byte arrived within this (the silence timeout).
    silence: Duration,
    /// The longest one write waits in all (the receive timeout).
    most: Duration,
    /// The link is being dropped: no more retries.
    over: AtomicBool,
}

impl Patience {
    pub(crate) fn new(live: Arc<Liveness>, silence: Duration, most: Duration) -> Arc<Patience> {
        Arc::new(Patience {
            live,
            silence,
            most,
            over: AtomicBool::new(false),
        })
    }

    /// Ends all patience (the link is dropped: its last flush must not wait for a slow reader).
    pub(crate) fn end(&self) {
        self.over.store(true, Ordering::Relaxed);
    }

    /// Whether the peer was heard from within the silence timeout.
    pub(crate) fn peer_heard(&self) -> bool {
        self.live.heard_within(self.silence)
    }

    /// The silence timeout.
    pub(crate) fn silence(&self) -> Duration {
        self.silence
    }

    /// The longest one write waits (the receive timeout).
    pub(crate) fn most(&self) -> Duration {
        self.most
    }

    /// Whether a write blocked since `since` should try again.
    fn retry(&self, since: Instant) -> bool {
        !self.over.load(Ordering::Relaxed) && since.elapsed() < self.most && self.peer_heard()
    }
}

/// The link's socket as its writers use it.
pub(crate) struct PatientSocket {
    pub(crate) stream: TcpStream,
    pub(crate) patience: Arc<Patience>,
}

impl Write for PatientSocket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let since = Instant::now();
        loop {
            match self.stream.write(buf) {
                Err(e)
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
                        && self.patience.retry(since) => {}
                done => return done,
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}
