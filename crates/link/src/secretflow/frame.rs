//! brpc's baidu_std framing (`src/brpc/policy/baidu_rpc_protocol.cpp`): a 12-byte header —
//! ASCII `PRPC`, `body_size` (u32 big-endian), `meta_size` (u32 big-endian) — then the body:
//! `meta_size` bytes of [`RpcMeta`], the protobuf payload, and `attachment_size` bytes of
//! attachment (always 0 on SecretFlow's link).
//!
//! [`read_frame`] refuses a body above its bound before reading it, and grows its buffer only as
//! bytes actually arrive, so a header that lies about its size costs at most what was sent.

use super::proto::{ProtoError, RpcMeta};
use std::fmt;
use std::io::{self, Read};

/// The magic that starts every baidu_std frame.
pub const MAGIC: [u8; 4] = *b"PRPC";
/// Magic, body size, meta size.
pub const HEADER_LEN: usize = 12;
/// Buffer growth step while a body arrives: the first allocation is at most this.
const READ_STEP: usize = 64 * 1024;

/// A frame that could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The connection failed (or closed in the middle of a frame).
    Io(io::Error),
    /// The bytes are not a baidu_std frame, or its meta does not decode.
    Malformed(String),
    /// The header announces a body above the bound.
    TooLarge {
        /// What the header says.
        body_size: u64,
        /// The bound in force.
        max: usize,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::Malformed(m) => write!(f, "{m}"),
            FrameError::TooLarge { body_size, max } => write!(
                f,
                "baidu_std frame of {body_size} bytes exceeds the limit of {max} bytes (raise max_push_body if the peer's http_max_payload_size is larger)"
            ),
        }
    }
}

impl From<ProtoError> for FrameError {
    fn from(e: ProtoError) -> Self {
        FrameError::Malformed(e.to_string())
    }
}

/// One decoded frame: its meta and the body bytes it describes.
#[derive(Debug)]
pub struct Frame {
    /// The decoded `RpcMeta`.
    pub meta: RpcMeta,
    body: Vec<u8>,
    meta_len: usize,
    payload_end: usize,
}

impl Frame {
    /// The protobuf payload (the request or response message).
    pub fn payload(&self) -> &[u8] {
        &self.body[self.meta_len..self.payload_end]
    }

    /// Bytes allocated for the body (tests check the read bound).
    #[cfg(test)]
    pub fn body_capacity(&self) -> usize {
        self.body.capacity()
    }

    /// Bytes this frame took on the wire.
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.body.len()
    }
}

/// Reads one frame whose body is at most `max_body` bytes. `Ok(None)`: the peer closed the
/// connection cleanly between frames.
///
/// # Errors
/// I/O failure or a close mid-frame ([`FrameError::Io`]), a bad magic, sizes or meta
/// ([`FrameError::Malformed`]), a body over `max_body` ([`FrameError::TooLarge`]).
pub fn read_frame(r: &mut impl Read, max_body: usize) -> Result<Option<Frame>, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(FrameError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of a baidu_std header",
                )));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let (body_size, meta_size) = parse_header(&header, max_body)?;
    let mut body = Vec::with_capacity(body_size.min(READ_STEP));
    while body.len() < body_size {
        let want = (body_size - body.len()).min(READ_STEP);
        let n = r
            .by_ref()
            .take(want as u64)
            .read_to_end(&mut body)
            .map_err(FrameError::Io)?;
        if n == 0 {
            return Err(FrameError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "connection closed after {} of {body_size} body bytes",
                    body.len()
                ),
            )));
        }
    }
    decode_body(body, meta_size).map(Some)
}

/// Checks a header: the magic, `body_size <= max_body`, `meta_size <= body_size`.
///
/// # Errors
/// As [`read_frame`].
pub fn parse_header(
    header: &[u8; HEADER_LEN],
    max_body: usize,
) -> Result<(usize, usize), FrameError> {
    if header.starts_with(b"BLNDJ") {
        return Err(FrameError::Malformed(
            "the peer speaks blindjoin's own link, not SecretFlow's: it is a blindjoin party; \
             remove \"peer_wire\": \"secretflow\" from this party's config (both blindjoin \
             parties then use blindjoin's wire)"
                .into(),
        ));
    }
    if header[..4] != MAGIC {
        return Err(FrameError::Malformed(format!(
            "not a baidu_std frame: starts with {:02x?} instead of \"PRPC\" (is the peer configured with brpc_channel_protocol baidu_std?)",
            &header[..4]
        )));
    }
    let body_size = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let meta_size = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let body = usize::try_from(body_size).unwrap_or(usize::MAX);
    if body > max_body {
        return Err(FrameError::TooLarge {
            body_size: u64::from(body_size),
            max: max_body,
        });
    }
    if meta_size > body_size {
        return Err(FrameError::Malformed(format!(
            "baidu_std meta_size {meta_size} exceeds body_size {body_size}"
        )));
    }
    Ok((body, meta_size as usize))
}

fn decode_body(body: Vec<u8>, meta_len: usize) -> Result<Frame, FrameError> {
    let meta = RpcMeta::decode(&body[..meta_len])?;
    let rest = body.len() - meta_len;
    let attachment = usize::try_from(meta.attachment_size).unwrap_or(usize::MAX);
    if attachment > rest {
        return Err(FrameError::Malformed(format!(
            "attachment_size {attachment} exceeds the {rest} bytes after the meta"
        )));
    }
    if meta.compress_type != 0 {
        return Err(FrameError::Malformed(format!(
            "compress_type {} is not supported (SecretFlow's link does not compress)",
            meta.compress_type
        )));
    }
    let payload_end = body.len() - attachment;
    Ok(Frame {
        meta,
        body,
        meta_len,
        payload_end,
    })
}

/// Encodes one frame: `meta` then the payload that `payload` appends.
pub fn encode_frame(
    meta: &RpcMeta,
    payload_hint: usize,
    payload: impl FnOnce(&mut Vec<u8>),
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 96 + payload_hint);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[0; 8]);
    meta.encode(&mut out);
    let meta_len = out.len() - HEADER_LEN;
    payload(&mut out);
    let body_len = out.len() - HEADER_LEN;
    // Bodies are bounded by the chunk size (<= u32::MAX by Options::validate); saturate anyway.
    let body32 = u32::try_from(body_len).unwrap_or(u32::MAX);
    let meta32 = u32::try_from(meta_len).unwrap_or(u32::MAX);
    out[4..8].copy_from_slice(&body32.to_be_bytes());
    out[8..12].copy_from_slice(&meta32.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::super::proto::{PushRequest, PushResponse, decode_push_request};
    use super::*;
    use std::io::Cursor;

    fn push_frame(corr: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
        let req = PushRequest {
            sender_rank: 1,
            key,
            value,
            ..PushRequest::default()
        };
        encode_frame(&RpcMeta::push_request(corr), req.encoded_len_bound(), |o| {
            req.encode(o)
        })
    }

    #[test]
    fn frames_round_trip_back_to_back() {
        let mut wire = push_frame(1, b"a\x01\x021", b"hello");
        wire.extend(push_frame(2, b"b\x01\x022", &[7u8; 100_000]));
        let mut c = Cursor::new(wire);
        let f1 = read_frame(&mut c, 1 << 20).unwrap().unwrap();
        assert_eq!(f1.meta.correlation_id, 1);
        assert_eq!(decode_push_request(f1.payload()).unwrap().value, b"hello");
        let f2 = read_frame(&mut c, 1 << 20).unwrap().unwrap();
        assert_eq!(f2.meta.correlation_id, 2);
        assert_eq!(
            decode_push_request(f2.payload()).unwrap().value.len(),
            100_000
        );
        assert!(read_frame(&mut c, 1 << 20).unwrap().is_none());
    }

    #[test]
    fn header_is_big_endian_with_meta_size() {
        let f = encode_frame(&RpcMeta::response(9, 0, ""), 2, |o| {
            PushResponse::default().encode(o)
        });
        assert_eq!(&f[..4], b"PRPC");
        let body = u32::from_be_bytes([f[4], f[5], f[6], f[7]]) as usize;
        let meta = u32::from_be_bytes([f[8], f[9], f[10], f[11]]) as usize;
        assert_eq!(body, f.len() - HEADER_LEN);
        assert_eq!(meta, body - 2);
    }

    #[test]
    fn bad_headers_are_refused_before_reading_the_body() {
        let mut wire = push_frame(1, b"k", b"v");
        wire[0] = b'H';
        assert!(matches!(
            read_frame(&mut Cursor::new(&wire), 1 << 20),
            Err(FrameError::Malformed(_))
        ));
        let mut big = Vec::from(MAGIC);
        big.extend_from_slice(&u32::MAX.to_be_bytes());
        big.extend_from_slice(&0u32.to_be_bytes());
        assert!(matches!(
            read_frame(&mut Cursor::new(&big), 1 << 20),
            Err(FrameError::TooLarge { .. })
        ));
        let mut meta_over = Vec::from(MAGIC);
        meta_over.extend_from_slice(&4u32.to_be_bytes());
        meta_over.extend_from_slice(&5u32.to_be_bytes());
        meta_over.extend_from_slice(&[0; 4]);
        assert!(matches!(
            read_frame(&mut Cursor::new(&meta_over), 1 << 20),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn truncation_anywhere_is_an_error_not_a_frame() {
        let wire = push_frame(3, b"key\x01\x021", b"value");
        for cut in 1..wire.len() {
            let r = read_frame(&mut Cursor::new(&wire[..cut]), 1 << 20);
            assert!(matches!(r, Err(FrameError::Io(_))), "cut {cut}: {r:?}");
        }
    }
}
