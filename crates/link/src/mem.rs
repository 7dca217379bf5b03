//! An in-memory link pair for tests: the same framing limits, counters and timeouts as TCP.

use crate::frame::{Kind, MAX_FRAME_LEN, OVERHEAD};
use crate::inbox::{Inbox, Incoming};
use crate::{Link, LinkError, LinkStats, truncate_reason};
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

/// One end of an in-memory link.
pub struct MemLink {
    tx: Sender<Incoming>,
    inbox: Inbox,
    sent: LinkStats,
}

/// Two connected in-memory links, with a 60 s receive timeout.
pub fn mem_pair() -> (MemLink, MemLink) {
    mem_pair_with_timeout(Duration::from_secs(60))
}

/// Two connected in-memory links with the given receive timeout.
pub fn mem_pair_with_timeout(timeout: Duration) -> (MemLink, MemLink) {
    let (tx_a, rx_a) = channel();
    let (tx_b, rx_b) = channel();
    let end = |tx, rx, peer: &str| MemLink {
        tx,
        inbox: Inbox::new(rx, timeout, peer, None, None),
        sent: LinkStats::default(),
    };
    (end(tx_b, rx_a, "b"), end(tx_a, rx_b, "a"))
}

impl MemLink {
    fn push(&mut self, kind: Kind, payload: Vec<u8>) -> Result<(), LinkError> {
        if payload.len() > MAX_FRAME_LEN {
            return Err(LinkError::MessageTooLarge { len: payload.len() });
        }
        self.sent.bytes_sent += (OVERHEAD + payload.len()) as u64;
        self.tx
            .send(Ok((kind, payload)))
            .map_err(|_| LinkError::PeerClosed {
                peer: self.inbox.peer.clone(),
            })
    }
}

impl Link for MemLink {
    fn send(&mut self, payload: &[u8]) -> Result<(), LinkError> {
        self.push(Kind::Data, payload.to_vec())?;
        self.sent.messages_sent += 1;
        Ok(())
    }

    fn recv(&mut self) -> Result<Vec<u8>, LinkError> {
        self.inbox.recv()
    }

    fn abort(&mut self, reason: &str) {
        let _ = self.push(Kind::Abort, truncate_reason(reason).as_bytes().to_vec());
    }

    fn close(&mut self) -> Result<(), LinkError> {
        // The peer may already be gone after sending its own close; that is fine.
        let _ = self.push(Kind::Close, Vec::new());
        self.inbox.await_close()
    }

    fn stats(&self) -> LinkStats {
        LinkStats {
            bytes_sent: self.sent.bytes_sent,
            messages_sent: self.sent.messages_sent,
            ..self.inbox.stats
        }
    }

    fn peer_id(&self) -> &str {
        &self.inbox.peer
    }
}
