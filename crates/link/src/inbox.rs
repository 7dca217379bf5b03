//! The receiving half shared by both link kinds: frames arrive on a channel (filled by a reader
//! thread for TCP, by the peer directly in memory) and are turned into messages or errors here.

use crate::frame::{HEADER_LEN, Kind};
use crate::{LinkError, LinkStats};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// One frame as delivered to the inbox, or the reason the stream ended.
pub(crate) type Incoming = Result<(Kind, Vec<u8>), LinkError>;

pub(crate) struct Inbox {
    pub(crate) rx: Receiver<Incoming>,
    pub(crate) timeout: Duration,
    pub(crate) peer: String,
    pub(crate) stats: LinkStats,
    pub(crate) peer_closed: bool,
}

impl Inbox {
    fn next(&mut self) -> Result<(Kind, Vec<u8>), LinkError> {
        match self.rx.recv_timeout(self.timeout) {
            Ok(Ok((kind, payload))) => {
                self.stats.bytes_received += (HEADER_LEN + payload.len()) as u64;
                Ok((kind, payload))
            }
            Ok(Err(e)) => Err(e),
            Err(RecvTimeoutError::Timeout) => Err(LinkError::RecvTimeout {
                peer: self.peer.clone(),
                waited: self.timeout,
            }),
            Err(RecvTimeoutError::Disconnected) => Err(LinkError::PeerClosed {
                peer: self.peer.clone(),
            }),
        }
    }

    fn aborted(&self, payload: &[u8]) -> LinkError {
        LinkError::PeerAborted {
            peer: self.peer.clone(),
            reason: String::from_utf8_lossy(payload).into_owned(),
        }
    }

    pub(crate) fn recv(&mut self) -> Result<Vec<u8>, LinkError> {
        match self.next()? {
            (Kind::Data, payload) => {
                self.stats.messages_received += 1;
                Ok(payload)
            }
            (Kind::Abort, reason) => Err(self.aborted(&reason)),
            (Kind::Close, _) => {
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
            (Kind::Close, _) => {
                self.peer_closed = true;
                Ok(())
            }
            (Kind::Abort, reason) => Err(self.aborted(&reason)),
            (Kind::Data, _) => Err(LinkError::UnexpectedData {
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
            match self.rx.recv_timeout(left) {
                Ok(Ok((Kind::Abort, reason))) => return Some(self.aborted(&reason)),
                Ok(Ok(_)) => {}
                _ => return None,
            }
        }
    }
}
