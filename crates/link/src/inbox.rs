//! The receiving half shared by both link kinds: frames arrive on a channel (filled by a reader
//! thread for TCP, by the peer directly in memory) and are turned into messages or errors here.

use crate::budget::Budget;
use crate::frame::{Kind, OVERHEAD};
use crate::heartbeat::Watch;
use crate::{LinkError, LinkStats};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How often a waiting `recv` looks at the silence watchdog.
const WATCH_POLL: Duration = Duration::from_millis(250);

/// One frame as delivered to the inbox, or the reason the stream ended.
pub(crate) type Incoming = Result<(Kind, Vec<u8>), LinkError>;

/// A frame that matters to the caller (heartbeats are consumed by the inbox).
enum Delivered {
    Data(Vec<u8>),
    Abort(Vec<u8>),
    Close,
}

pub(crate) struct Inbox {
    pub(crate) rx: Receiver<Incoming>,
    pub(crate) timeout: Duration,
    pub(crate) peer: String,
    pub(crate) stats: LinkStats,
    pub(crate) peer_closed: bool,
    /// The silence watchdog (TCP links, which get heartbeats); `None` in memory.
    pub(crate) watch: Option<Watch>,
    /// What the reader thread may hold (TCP links, see [`crate::budget`]); `None` in memory,
    /// where the sender is the peer's protocol thread itself.
    pub(crate) budget: Option<Arc<Budget>>,
}

impl Inbox {
    pub(crate) fn new(
        rx: Receiver<Incoming>,
        timeout: Duration,
        peer: &str,
        watch: Option<Watch>,
        budget: Option<Arc<Budget>>,
    ) -> Inbox {
        Inbox {
            rx,
            timeout,
            peer: peer.to_string(),
            stats: LinkStats::default(),
            peer_closed: false,
            watch,
            budget,
        }
    }

    /// The next frame off the channel; its bytes leave the reader's budget.
    fn take(&mut self, wait: Duration) -> Result<Incoming, RecvTimeoutError> {
        let got = self.rx.recv_timeout(wait)?;
        if let (Ok((_, payload)), Some(b)) = (&got, &self.budget) {
            b.release(payload.capacity());
        }
        Ok(got)
    }

    /// The next frame that is not a heartbeat, waiting at most the receive timeout — or less, if
    /// the peer falls completely silent (see [`crate::heartbeat`]).
    fn next(&mut self) -> Result<Delivered, LinkError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = match &self.watch {
                Some(_) => left.min(WATCH_POLL),
                None => left,
            };
            match self.take(wait) {
                Ok(Ok((kind, payload))) => {
                    let len = (OVERHEAD + payload.len()) as u64;
                    let delivered = match kind {
                        Kind::Heartbeat => continue,
                        Kind::Data => Delivered::Data(payload),
                        Kind::Abort => Delivered::Abort(payload),
                        Kind::Close => Delivered::Close,
                    };
                    self.stats.bytes_received += len;
                    return Ok(delivered);
                }
                Ok(Err(e)) => return Err(e),
                Err(RecvTimeoutError::Timeout) => self.check_silence(deadline)?,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(LinkError::PeerClosed {
                        peer: self.peer.clone(),
                    });
                }
            }
        }
    }

    /// After a wait with nothing delivered: the receive timeout, or a dead peer.
    fn check_silence(&self, deadline: Instant) -> Result<(), LinkError> {
        if Instant::now() >= deadline {
            return Err(LinkError::RecvTimeout {
                peer: self.peer.clone(),
                waited: self.timeout,
            });
        }
        if let Some(w) = &self.watch {
            let silent = w.live.silent_for();
            if silent >= w.limit {
                return Err(LinkError::PeerSilent {
                    peer: self.peer.clone(),
                    silent_for: silent,
                });
            }
        }
        Ok(())
    }

    fn aborted(&self, payload: &[u8]) -> LinkError {
        LinkError::PeerAborted {
            peer: self.peer.clone(),
            reason: String::from_utf8_lossy(payload).into_owned(),
        }
    }

    pub(crate) fn recv(&mut self) -> Result<Vec<u8>, LinkError> {
        match self.next()? {
            Delivered::Data(payload) => {
                self.stats.messages_received += 1;
                Ok(payload)
            }
            Delivered::Abort(reason) => Err(self.aborted(&reason)),
            Delivered::Close => {
                self.peer_closed = true;
                Err(LinkError::PeerClosed {
                    peer: self.peer.clone(),
                })
            }
        }
    }

    /// Waits for the peer's close frame (after ours was sent).
    pub(crate) fn await_close(&mut self) -> Result<(), LinkError> {
        if self.peer_closed {
            return Ok(());
        }
        match self.next()? {
            Delivered::Close => {
                self.peer_closed = true;
                Ok(())
            }
            Delivered::Abort(reason) => Err(self.aborted(&reason)),
            Delivered::Data(_) => Err(LinkError::UnexpectedData {
                peer: self.peer.clone(),
            }),
        }
    }
}

/// How long a failed send waits for the reader thread to deliver an abort already in flight.
const ABORT_LOOKUP: Duration = Duration::from_millis(200);

impl Inbox {
    /// After a failed send: the peer's abort, if it sent one before closing. Its reason (e.g.
    /// "cancelled the run (Ctrl-C)") explains the failure, where the write error says only
    /// "broken pipe". Frames other than an abort are dropped: the session is over either way.
    pub(crate) fn abort_after_failure(&mut self) -> Option<LinkError> {
        let deadline = Instant::now() + ABORT_LOOKUP;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.take(left) {
                Ok(Ok((Kind::Abort, reason))) => return Some(self.aborted(&reason)),
                Ok(Ok(_)) => {}
                _ => return None,
            }
        }
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // A reader waiting for room would otherwise wait for good.
        if let Some(b) = &self.budget {
            b.close();
        }
    }
}
