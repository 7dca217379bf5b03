//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; not a stable API): the
//! decoders that otherwise sit behind a socket.

use crate::LinkError;
use crate::frame::{HEADER_LEN, OVERHEAD, TRAILER_LEN, trailer};
use crate::inbox::Inbox;
use std::sync::mpsc::channel;
use std::time::Duration;

/// Runs the TCP link's frame reader over `stream` (bytes as they came off the socket) and
/// returns what [`crate::Link::recv`] would have returned for each frame, ending with the first
/// error (a malformed frame, an abort, a close, or the end of the stream). `max_frames` bounds
/// the number of results.
pub fn read_frames(stream: &[u8], max_frames: usize) -> Vec<Result<Vec<u8>, LinkError>> {
    let (tx, rx) = channel();
    // Unbounded here: the whole stream is in memory already, and this thread reads every frame
    // before the inbox below takes any (the bound is tested where a thread consumes).
    let source = crate::tcp::FrameSource {
        live: crate::heartbeat::Liveness::new(),
        shape: None,
        budget: crate::budget::Budget::new(usize::MAX, crate::budget::Credit::new()),
    };
    crate::tcp::read_frames(stream, "fuzz-peer", &tx, source);
    drop(tx);
    let mut inbox = Inbox::new(rx, Duration::from_secs(1), "fuzz-peer", None, None);
    let mut out = Vec::new();
    while out.len() < max_frames {
        let got = inbox.recv();
        let end = got.is_err();
        out.push(got);
        if end {
            break;
        }
    }
    // Every byte counted was part of a whole frame that arrived.
    debug_assert!(inbox.stats.bytes_received <= stream.len() as u64);
    debug_assert!(out.len() <= stream.len() / OVERHEAD + 1);
    out
}

/// `stream` with each frame's CRC trailer rewritten to match its header and payload, as far as
/// the announced lengths fit, so a fuzzer gets past the checksum to the decoding behind it.
pub fn seal_frames(stream: &[u8]) -> Vec<u8> {
    let mut s = stream.to_vec();
    let mut at = 0;
    while at + HEADER_LEN <= s.len() {
        let head: [u8; HEADER_LEN] = s[at..at + HEADER_LEN].try_into().expect("5 bytes");
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let Some(end) = (at + HEADER_LEN).checked_add(len) else {
            break;
        };
        if end + TRAILER_LEN > s.len() {
            break;
        }
        let crc = trailer(&head, &s[at + HEADER_LEN..end]);
        s[end..end + TRAILER_LEN].copy_from_slice(&crc);
        at = end + TRAILER_LEN;
    }
    s
}

/// Decodes bytes as the other side's TCP greeting (magic, its id, the id it expects), as
/// [`crate::TcpLink::establish`] does before anything else: `Ok((their_id, they_expect, tls))`,
/// or why the bytes were refused.
pub fn read_greeting(bytes: &[u8]) -> Result<(String, String, bool), String> {
    let mut r = bytes;
    match crate::greet::read_greeting(&mut r) {
        Ok(g) => Ok((g.their_id, g.they_expect, g.tls)),
        Err(crate::greet::GreetError::NotBlindjoin(why)) => Err(why),
        Err(crate::greet::GreetError::Fatal(e)) => Err(e.to_string()),
    }
}

/// What [`secretflow_pushes`] saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SecretflowOutcome {
    /// baidu_std frames read.
    pub frames: usize,
    /// Pushes the channel answered OK.
    pub accepted: usize,
    /// Bytes the channel held at the end (unread messages and partial chunks).
    pub buffered: usize,
}

/// Runs the SecretFlow link's server side over `stream` (bytes as they came off the peer's
/// connection): the baidu_std frame reader (bodies up to 64 KiB), the `PushRequest` decoder and
/// the yacl channel that stores messages, reassembles chunks (messages up to 4 KiB, 16 KiB held
/// at most) and records ACKs and FIN. Stops at the first frame that does not read.
pub fn secretflow_pushes(stream: &[u8]) -> SecretflowOutcome {
    crate::secretflow::fuzz_pushes(stream, 64 << 10, 4 << 10, 16 << 10)
}

/// What [`secretflow_h2`] saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SecretflowH2Outcome {
    /// Pushes whose request (headers, gRPC prefix and body) was complete and well formed.
    pub pushes: usize,
    /// Pushes the channel answered OK.
    pub accepted: usize,
    /// Bytes the server wrote back (SETTINGS, acknowledgements, answers, GOAWAY).
    pub written: usize,
}

/// Runs the SecretFlow link's HTTP/2 (`h2:grpc`) server side over `stream`, bytes as they came
/// off the peer's connection (the client preface first): frames, HPACK, flow-control windows,
/// the gRPC length prefix and the `PushRequest` decoder, each Push handed to the yacl channel
/// (bodies up to 64 KiB, messages up to 4 KiB, 16 KiB held at most). Stops where the
/// connection would be closed.
pub fn secretflow_h2(stream: &[u8]) -> SecretflowH2Outcome {
    crate::secretflow::fuzz_h2(stream, 64 << 10, 4 << 10, 16 << 10)
}

/// The bytes an `h2:grpc` client sends to push each of `requests` (encoded `PushRequest`s),
/// one stream each, for fuzz seeds.
pub fn secretflow_h2_conversation(requests: &[Vec<u8>]) -> Vec<u8> {
    crate::secretflow::h2::client_conversation(requests)
}
