//! Liveness: heartbeats out, a silence watchdog in.
//!
//! A peer whose process or machine dies without closing the connection (power loss, a hung
//! kernel, a cable pulled, `kill -STOP`) sends no FIN or RST, so without heartbeats the other
//! party would wait for the whole receive timeout (1 h by default) — the "hang with no error" that
//! SecretFlow's users report. Each TCP link therefore sends an empty heartbeat frame every
//! [`heartbeat_interval`] from a thread of its own, whatever the protocol thread is doing, and
//! every byte that arrives from the peer (data, heartbeat, or part of a large frame) counts as a
//! sign of life. A peer that sends *nothing at all* for the silence timeout is reported dead
//! within about a second of that; a peer that is merely slow (long local computation, a saturated
//! WAN) keeps sending heartbeats and is never killed by this.
//!
//! Back-pressure is not silence: while our reader holds back on purpose (a full inbox, see
//! `budget.rs`, or the WAN shaper) the watchdog is paused, and a write blocked by a peer
//! that holds back is retried as long as that peer's heartbeats still arrive (see
//! `patience.rs`).
//!
//! Heartbeats are 5 bytes each and are not counted in [`crate::LinkStats`], which reports the
//! protocol's own traffic.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Default for how long a peer may be completely silent before it counts as dead.
pub const DEFAULT_SILENCE_TIMEOUT: Duration = Duration::from_secs(20);

/// The shortest silence timeout a link accepts: below it, scheduling hiccups would look like death.
pub const MIN_SILENCE_TIMEOUT: Duration = Duration::from_millis(100);

/// How often to send a heartbeat for a given silence timeout: often enough that several are
/// missed before the peer gives up on us, rarely enough to cost nothing.
pub fn heartbeat_interval(silence_timeout: Duration) -> Duration {
    (silence_timeout / 8).clamp(Duration::from_millis(50), Duration::from_secs(2))
}

/// When the peer was last heard from. Shared by the reader thread (which touches it) and the
/// receiving side (which checks it).
#[derive(Debug)]
pub(crate) struct Liveness {
    base: Instant,
    /// Milliseconds since `base` at the last sign of life.
    last_ms: AtomicU64,
    /// The reader is holding back frames on purpose (the benchmark's WAN shaper): the peer is
    /// not silent, we are.
    holding: AtomicBool,
}

impl Liveness {
    pub(crate) fn new() -> Arc<Liveness> {
        Arc::new(Liveness {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
            holding: AtomicBool::new(false),
        })
    }

    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    /// Records a sign of life now.
    pub(crate) fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Marks the start or the end of a deliberate hold (the shaper's sleep).
    pub(crate) fn set_holding(&self, holding: bool) {
        self.holding.store(holding, Ordering::Relaxed);
        self.touch();
    }

    /// Whether a byte arrived within `limit` (or a hold began or ended then), whether or not
    /// the reader is holding now: a reader that holds back reads nothing, so it cannot vouch for
    /// the peer (see [`crate::patience`]).
    pub(crate) fn heard_within(&self, limit: Duration) -> bool {
        let last = self.last_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(last)) < limit
    }

    /// Whether the reader is holding frames back now: a test hook.
    #[cfg(test)]
    pub(crate) fn is_holding(&self) -> bool {
        self.holding.load(Ordering::Relaxed)
    }

    /// How long the peer has been silent; zero while the reader holds frames back.
    pub(crate) fn silent_for(&self) -> Duration {
        if self.holding.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        let last = self.last_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }
}

/// The receiving side's view: the shared clock and the limit to enforce.
#[derive(Clone, Debug)]
pub(crate) struct Watch {
    pub(crate) live: Arc<Liveness>,
    pub(crate) limit: Duration,
}

/// A reader that records a sign of life for every byte that arrives.
pub(crate) struct Touching<R> {
    pub(crate) inner: R,
    pub(crate) live: Arc<Liveness>,
}

impl<R: Read> Read for Touching<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.live.touch();
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_grows_until_touched_and_holding_is_not_silence() {
        let live = Liveness::new();
        std::thread::sleep(Duration::from_millis(30));
        assert!(live.silent_for() >= Duration::from_millis(25));
        live.touch();
        assert!(live.silent_for() < Duration::from_millis(25));
        live.set_holding(true);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(live.silent_for(), Duration::ZERO);
        live.set_holding(false);
        assert!(live.silent_for() < Duration::from_millis(25));
    }

    #[test]
    fn touching_reader_touches_only_on_bytes() {
        let live = Liveness::new();
        std::thread::sleep(Duration::from_millis(30));
        let mut r = Touching {
            inner: &b""[..],
            live: live.clone(),
        };
        let mut buf = [0u8; 4];
        assert_eq!(r.read(&mut buf).unwrap(), 0);
        assert!(live.silent_for() >= Duration::from_millis(25));
        let mut r = Touching {
            inner: &b"ab"[..],
            live: live.clone(),
        };
        assert_eq!(r.read(&mut buf).unwrap(), 2);
        assert!(live.silent_for() < Duration::from_millis(25));
    }

    #[test]
    fn interval_is_a_fraction_of_the_timeout_within_bounds() {
        assert_eq!(
            heartbeat_interval(Duration::from_secs(20)),
            Duration::from_secs(2)
        );
        assert_eq!(
            heartbeat_interval(Duration::from_secs(4)),
            Duration::from_millis(500)
        );
        assert_eq!(
            heartbeat_interval(Duration::from_millis(10)),
            Duration::from_millis(50)
        );
    }
}
