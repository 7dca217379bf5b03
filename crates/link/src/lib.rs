//! # blindjoin-link — how two parties talk
//!
//! A [`Link`] carries whole messages (frames) between two parties, counts the bytes each way, and
//! turns every failure into a [`LinkError`] that says what happened and what to do: a peer that
//! never showed up, one that went silent past the receive timeout, one that aborted (its reason is
//! forwarded), one that sent a frame larger than [`MAX_FRAME_LEN`].
//!
//! Two implementations: [`TcpLink`] (either party may start first; one listens, the other
//! connects with retries until a deadline; optionally mutual TLS, see [`TlsConfig`]) and
//! [`mem_pair`] for tests. Message *contents* are the
//! protocols' business; [`Reader`] is the bounded cursor they decode with.
//!
//! Wire format of a frame: `len: u32 LE | kind: u8 | payload: len bytes | crc: u32 LE` (the
//! CRC-32 of header and payload, see `frame.rs`), where kind is
//! 0 = data, 1 = abort (payload: UTF-8 reason), 2 = close (clean end of session), 3 = heartbeat
//! (empty; TCP links send one every second or two so a dead peer is noticed within the silence
//! timeout, see [`heartbeat`]).
//!
//! ```
//! use blindjoin_link::{Link, mem_pair};
//! let (mut a, mut b) = mem_pair();
//! a.send(b"hello").unwrap();
//! assert_eq!(b.recv().unwrap(), b"hello");
//! assert_eq!(a.stats().bytes_sent, 9 + 5); // 9 framing bytes: length, kind, CRC-32
//! ```

mod budget;
mod cancel;
mod codec;
mod error;
mod frame;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod greet;
pub mod heartbeat;
mod inbox;
mod many;
mod mem;
mod patience;
pub mod secretflow;
mod serve;
pub use serve::{Incoming, ServeListener};
mod shape;
mod tcp;
mod three;
pub use many::{establish_many, n_party_listens};
pub mod wire;
pub use three::{PartyAddr, establish_three, three_party_listens};
mod tls;
pub mod worker;

pub use cancel::Cancel;
pub use codec::{
    BULK_CHUNK, BulkError, DecodeError, MAX_VARINT_LEN, MAX_VARINT64_LEN, Reader, put_bytes_u16,
    put_u32, put_u64, put_varint, read_varint_u64, recv_bulk, send_bulk, varint_bytes, varints,
};
pub use error::LinkError;
pub use frame::MAX_FRAME_LEN;
pub use heartbeat::DEFAULT_SILENCE_TIMEOUT;
pub use mem::{MemLink, mem_pair, mem_pair_with_timeout};
pub use shape::LinkShape;
pub use tcp::{TcpLink, TcpOptions};
pub use tls::TlsConfig;

/// Bytes and messages moved over a link, each way, framing included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Bytes written to the peer.
    pub bytes_sent: u64,
    /// Bytes read from the peer.
    pub bytes_received: u64,
    /// Data messages sent.
    pub messages_sent: u64,
    /// Data messages received.
    pub messages_received: u64,
}

/// A message channel to exactly one peer.
pub trait Link: Send {
    /// Sends one message.
    ///
    /// # Errors
    /// The connection broke, or `payload` exceeds [`MAX_FRAME_LEN`] (a caller bug).
    fn send(&mut self, payload: &[u8]) -> Result<(), LinkError>;

    /// Waits for the next message, at most the receive timeout.
    ///
    /// # Errors
    /// Timeout, peer abort, peer gone, or a malformed frame.
    fn recv(&mut self) -> Result<Vec<u8>, LinkError>;

    /// Tells the peer this party failed, so it stops at once instead of waiting for a timeout.
    /// Best effort: errors are ignored because we are already failing.
    fn abort(&mut self, reason: &str);

    /// Ends the session cleanly: announces the end and waits (bounded) for the peer to do the same,
    /// so neither side closes while the other still expects data.
    ///
    /// # Errors
    /// The peer sent data instead of closing, aborted, or went away.
    fn close(&mut self) -> Result<(), LinkError>;

    /// Bytes and messages so far.
    fn stats(&self) -> LinkStats;

    /// The peer's party id (for error messages).
    fn peer_id(&self) -> &str;
}

/// Longest abort reason forwarded to the peer.
pub(crate) const MAX_ABORT_REASON: usize = 1024;

pub(crate) fn truncate_reason(reason: &str) -> &str {
    if reason.len() <= MAX_ABORT_REASON {
        return reason;
    }
    let mut end = MAX_ABORT_REASON;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

#[cfg(test)]
mod tests;
