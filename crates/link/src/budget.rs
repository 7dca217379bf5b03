//! How much the TCP link's reader thread may hold for the protocol thread before it stops
//! reading the socket (back-pressure).
//!
//! The reader queues whole frames for `recv`. Unbounded, a peer that sends faster than we consume
//! — or floods frames on purpose — makes us hold everything it sends. So the reader admits the
//! next frame only while the bytes it holds (frames queued for `recv` plus the frame being read,
//! counted by allocated capacity) stay within
//!
//! `INBOX_BOUND + bytes this party has sent on all its links` (heartbeats excepted),
//!
//! and otherwise stops reading until `recv` takes frames; TCP flow control then stalls the peer's
//! sends. An empty inbox always admits a frame (one frame never exceeds [`MAX_FRAME_LEN`]).
//!
//! **Why the credit for bytes sent.** Protocols may send a whole set before reading the peer's
//! (ECDH-PSI does, both parties at once; in three-party ECDH each party may be sending to the
//! next round the ring). With a plain bound every reader on such a cycle could stop while every
//! protocol thread blocks in `send`: a deadlock. With the credit they cannot. Write
//! `B` = [`INBOX_BOUND`], `M` = [`MAX_FRAME_LEN`], `S_i` = frame bytes party `i` has sent on all
//! its links, and take a cycle of parties, each blocked sending to the next, whose reader for
//! that link has stopped. Party `i`'s reader stops only when it holds `h_i` with
//! `h_i + len > B + S_i`, so `h_i > B − M + S_i`; and `h_i` ≤ what its predecessor sent,
//! ≤ `S_pred(i)`. Summed round a cycle of `k` parties: `Σ S_i ≥ Σ h_i > k(B − M) + Σ S_i`,
//! impossible since `B ≥ M`. So some reader on the cycle always drains, and no set of parties
//! deadlocks on the bound — for two parties, one of the pair always reads.
//!
//! **The memory bound.** A peer can make a link hold at most `INBOX_BOUND` (128 MiB) plus the
//! bytes this party has sent — our own traffic, which the protocols bound by our input — and a
//! frame it announces but does not send costs at most twice the bytes that did arrive plus one
//! [`READ_CHUNK`] (see [`crate::tcp`]), never the announced length.
//!
//! A reader that waits here tells the silence watchdog it is holding back on purpose
//! ([`crate::heartbeat::Liveness::set_holding`]): the peer's heartbeats sit unread in the socket
//! buffer, which is our doing, not the peer's silence. It wakes when `recv` takes a frame, when
//! this link sends, when the link is dropped, and every [`CREDIT_POLL`] for credit from the
//! party's other links.

use crate::frame::MAX_FRAME_LEN;
use crate::heartbeat::Liveness;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The reader's allowance before any credit: two maximal frames (128 MiB), so one whole frame
/// can wait in the inbox while the next is read, and the deadlock argument's `B ≥ M` holds.
pub(crate) const INBOX_BOUND: usize = 2 * MAX_FRAME_LEN;

/// A frame's payload is read (and its buffer grown) at most this many bytes at a time: 1 MiB,
/// large enough that reading a 64 MiB frame takes 64 reads, small enough that an announced but
/// unsent frame costs little.
pub(crate) const READ_CHUNK: usize = 1 << 20;

/// How often a waiting reader looks at credit earned on the party's other links (its own link's
/// sends and `recv` wake it at once).
const CREDIT_POLL: Duration = Duration::from_millis(50);

const _: () = assert!(INBOX_BOUND >= MAX_FRAME_LEN && READ_CHUNK <= MAX_FRAME_LEN);

/// Frame bytes a party has sent on all its links, heartbeats excepted: every one of its readers'
/// credit. One per two-party link; one shared by a party's three-party links.
#[derive(Debug, Default)]
pub(crate) struct Credit {
    sent: AtomicU64,
}

impl Credit {
    pub(crate) fn new() -> Arc<Credit> {
        Arc::new(Credit::default())
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// Whether a reader holding `held` bytes may take a frame of `len` more.
fn fits(held: u64, len: u64, bound: u64, sent: u64) -> bool {
    held == 0 || held.saturating_add(len) <= bound.saturating_add(sent)
}

/// Shared by the reader thread (charges), the inbox (releases), and the frame writer (credits).
#[derive(Debug)]
pub(crate) struct Budget {
    state: Mutex<State>,
    changed: Condvar,
    bound: u64,
    credit: Arc<Credit>,
}

#[derive(Debug, Default)]
struct State {
    /// Bytes allocated for frames the reader has queued or is reading.
    held: u64,
    /// The most `held` has been (a test hook for the bound).
    peak: u64,
    /// The inbox is gone: the reader should stop.
    closed: bool,
}

impl Budget {
    /// A budget of `bound` bytes plus `credit`.
    pub(crate) fn new(bound: usize, credit: Arc<Credit>) -> Arc<Budget> {
        Arc::new(Budget {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            bound: bound as u64,
            credit,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The counters stay meaningful whatever a panicking holder was doing.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fits(&self, s: &State, len: usize) -> bool {
        fits(s.held, len as u64, self.bound, self.credit.sent())
    }

    /// Blocks the reader until a frame of `len` payload bytes fits. `false`: the inbox is gone
    /// and the reader should stop.
    pub(crate) fn admit(&self, len: usize, live: &Liveness) -> bool {
        let mut s = self.lock();
        if s.closed || self.fits(&s, len) {
            return !s.closed;
        }
        live.set_holding(true);
        while !s.closed && !self.fits(&s, len) {
            s = self
                .changed
                .wait_timeout(s, CREDIT_POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        live.set_holding(false);
        !s.closed
    }

    /// The reader allocated `bytes` more for a frame.
    pub(crate) fn charge(&self, bytes: usize) {
        let mut s = self.lock();
        s.held = s.held.saturating_add(bytes as u64);
        s.peak = s.peak.max(s.held);
    }

    /// A frame's `bytes` left the reader's hands: taken by `recv`, or dropped.
    pub(crate) fn release(&self, bytes: usize) {
        let mut s = self.lock();
        s.held = s.held.saturating_sub(bytes as u64);
        self.changed.notify_all();
    }

    /// This link sent a frame of `bytes` (header included).
    pub(crate) fn credit(&self, bytes: usize) {
        self.credit.sent.fetch_add(bytes as u64, Ordering::Relaxed);
        // Taking the lock orders this after a waiting reader's check, so the wake is not lost.
        let _s = self.lock();
        self.changed.notify_all();
    }

    /// The inbox is dropped: wakes the reader for good.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// `(held now, the most ever held)`, for tests.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (u64, u64) {
        let s = self.lock();
        (s.held, s.peak)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_two_maximal_frames_and_a_chunk_is_one_mib() {
        assert_eq!(INBOX_BOUND, 128 << 20);
        assert_eq!(INBOX_BOUND, 2 * MAX_FRAME_LEN);
        assert_eq!(READ_CHUNK, 1 << 20);
    }

    /// The deadlock argument of the module doc, checked exhaustively on small numbers: with
    /// `B ≥ M` two readers that each received no more than the other sent never both stop; with
    /// `B < M` they can.
    #[test]
    fn two_readers_never_both_stop_when_the_bound_is_at_least_a_frame() {
        let both_can_stop = |bound: u64, max_frame: u64| {
            let stops = |held: u64, len: u64, sent: u64| !fits(held, len, bound, sent);
            let r = 0..7u64;
            let frames = 0..=max_frame;
            r.clone().any(|sa| {
                r.clone().any(|sb| {
                    // Each side received at most what the other sent, and holds at most that.
                    (0..=sb).any(|ha| {
                        (0..=sa).any(|hb| {
                            frames.clone().any(|la| {
                                frames
                                    .clone()
                                    .any(|lb| stops(ha, la, sa) && stops(hb, lb, sb))
                            })
                        })
                    })
                })
            })
        };
        for m in 1..4 {
            for b in m..2 * m + 2 {
                assert!(!both_can_stop(b, m), "B = {b}, M = {m}");
            }
            assert!(both_can_stop(m - 1, m), "B < M deadlocks (M = {m})");
        }
    }

    /// The same round a ring of three parties (`S_i` = party i's bytes sent on all its links;
    /// party i holds at most what party i − 1 sent): never all three stopped when `B ≥ M`.
    #[test]
    fn three_readers_round_a_ring_never_all_stop() {
        let all_can_stop = |bound: u64, max_frame: u64| {
            let stops = |held: u64, len: u64, sent: u64| !fits(held, len, bound, sent);
            // The longest frame is the worst case for "stops".
            let m = max_frame;
            let r = 0..5u64;
            r.clone().any(|s0| {
                r.clone().any(|s1| {
                    r.clone().any(|s2| {
                        (0..=s2).any(|h0| {
                            (0..=s0).any(|h1| {
                                (0..=s1).any(|h2| {
                                    stops(h0, m, s0) && stops(h1, m, s1) && stops(h2, m, s2)
                                })
                            })
                        })
                    })
                })
            })
        };
        for m in 1..4 {
            for b in m..2 * m + 2 {
                assert!(!all_can_stop(b, m), "B = {b}, M = {m}");
            }
            assert!(all_can_stop(m - 1, m), "B < M deadlocks (M = {m})");
        }
    }

    #[test]
    fn an_empty_budget_admits_any_frame_and_a_full_one_waits_for_release_or_credit() {
        let live = Liveness::new();
        let b = Budget::new(100, Credit::new());
        assert!(b.admit(1000, &live), "empty: admitted");
        b.charge(90);
        assert!(b.admit(10, &live));
        b.charge(10);
        // Full: the next frame waits until recv takes one.
        let b2 = Arc::clone(&b);
        let l2 = Arc::clone(&live);
        let t = std::thread::spawn(move || b2.admit(50, &l2));
        b.release(60);
        assert!(t.join().unwrap());
        // Credit for bytes sent admits more, too.
        b.charge(50);
        let b3 = Arc::clone(&b);
        let l3 = Arc::clone(&live);
        let t = std::thread::spawn(move || b3.admit(100, &l3));
        b.credit(200);
        assert!(t.join().unwrap());
        assert_eq!(b.held(), (90, 100));
    }

    /// The peer's heartbeats wait unread while the reader holds back: that is not the peer's
    /// silence, so the watchdog sees none.
    #[test]
    fn a_waiting_reader_pauses_the_silence_watchdog() {
        use std::time::{Duration, Instant};
        let live = Liveness::new();
        let b = Budget::new(10, Credit::new());
        b.charge(10);
        std::thread::sleep(Duration::from_millis(30));
        assert!(live.silent_for() >= Duration::from_millis(25));
        let (b2, l2) = (Arc::clone(&b), Arc::clone(&live));
        let t = std::thread::spawn(move || b2.admit(5, &l2));
        let deadline = Instant::now() + Duration::from_secs(10);
        while live.silent_for() != Duration::ZERO {
            assert!(
                Instant::now() < deadline,
                "the reader never reported holding"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(live.silent_for(), Duration::ZERO, "still holding");
        b.release(10);
        assert!(t.join().unwrap());
        assert!(
            live.silent_for() < Duration::from_millis(50),
            "resumed: counted anew"
        );
    }

    #[test]
    fn closing_wakes_a_waiting_reader_with_stop() {
        let live = Liveness::new();
        let b = Budget::new(10, Credit::new());
        b.charge(10);
        let b2 = Arc::clone(&b);
        let t = std::thread::spawn(move || b2.admit(5, &live));
        b.close();
        assert!(!t.join().unwrap());
        assert!(!b.admit(0, &Liveness::new()), "closed: stop at once");
    }
}
