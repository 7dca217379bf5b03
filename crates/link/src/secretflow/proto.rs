//! A minimal protobuf codec for the five messages SecretFlow's link puts on the wire: brpc's
//! `RpcMeta` (with `RpcRequestMeta` / `RpcResponseMeta`, `src/brpc/policy/baidu_rpc_meta.proto`)
//! and interconnection's `PushRequest`, `ChunkInfo`, `PushResponse`
//! (`interconnection/link/transport.proto`, `common/header.proto`).
//!
//! Decoding borrows from one frame that [`super::frame`] has already read under its size bound,
//! and checks every varint and length prefix against the bytes that are left, so a hostile length
//! can never make it read out of bounds or allocate more than the frame holds. Unknown fields are
//! skipped, as protobuf requires; groups (wire types 3 and 4) are refused, no message here has one.
//! Encoding writes the fields the way the spu 0.9.5 wheel does (proto3: zero values omitted,
//! except `RpcMeta.compress_type`, which brpc writes explicitly).

use std::fmt;

/// The longest varint: 10 bytes carry 64 bits.
pub const MAX_VARINT_LEN: usize = 10;

/// A protobuf message from the peer did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError {
    /// Which message.
    pub what: &'static str,
    /// What was wrong.
    pub reason: String,
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed {}: {}", self.what, self.reason)
    }
}

impl std::error::Error for ProtoError {}

fn err(what: &'static str, reason: impl Into<String>) -> ProtoError {
    ProtoError {
        what,
        reason: reason.into(),
    }
}

/// Appends `v` as a base-128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*at`, advancing it. `None` if it runs past the end or past 10 bytes, or
/// if the 10th byte carries bits beyond 64.
pub fn read_varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..MAX_VARINT_LEN {
        let b = *buf.get(*at + i)?;
        if i == MAX_VARINT_LEN - 1 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *at += i + 1;
            return Some(v);
        }
    }
    None
}

const WIRE_VARINT: u64 = 0;
const WIRE_I64: u64 = 1;
const WIRE_LEN: u64 = 2;
const WIRE_I32: u64 = 5;

fn put_tag(out: &mut Vec<u8>, field: u32, wire: u64) {
    put_varint(out, (u64::from(field) << 3) | wire);
}

/// Appends field `field` as a varint.
pub fn put_varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    put_tag(out, field, WIRE_VARINT);
    put_varint(out, v);
}

/// Appends field `field` as length-delimited bytes.
pub fn put_bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_tag(out, field, WIRE_LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// One field's value, borrowed from the message bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// Walks the fields of one message, bounds-checking each against what is left.
pub struct Fields<'a> {
    buf: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Fields<'a> {
    /// Starts on `buf`, one whole `what` message (the name goes into errors).
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Fields { buf, at: 0, what }
    }

    /// The next `(field number, value)`, or `None` at the end of the message.
    ///
    /// # Errors
    /// A truncated or overlong varint, a length past the end, field number 0, or a group.
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, ProtoError> {
        if self.at >= self.buf.len() {
            return Ok(None);
        }
        let what = self.what;
        let tag = read_varint(self.buf, &mut self.at)
            .ok_or_else(|| err(what, "truncated or overlong field tag"))?;
        let field = u32::try_from(tag >> 3)
            .ok()
            .filter(|f| *f != 0 && *f < (1 << 29))
            .ok_or_else(|| err(what, format!("invalid field number in tag {tag}")))?;
        let value = match tag & 7 {
            WIRE_VARINT => Value::Varint(
                read_varint(self.buf, &mut self.at)
                    .ok_or_else(|| err(what, format!("field {field}: truncated varint")))?,
            ),
            WIRE_I64 => {
                let b = self.take(8, field)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Value::Fixed64(u64::from_le_bytes(a))
            }
            WIRE_LEN => {
                let len = read_varint(self.buf, &mut self.at)
                    .ok_or_else(|| err(what, format!("field {field}: truncated length")))?;
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                Value::Bytes(self.take(len, field)?)
            }
            WIRE_I32 => {
                let b = self.take(4, field)?;
                let mut a = [0u8; 4];
                a.copy_from_slice(b);
                Value::Fixed32(u32::from_le_bytes(a))
            }
            other => {
                return Err(err(
                    what,
                    format!("field {field}: unsupported wire type {other}"),
                ));
            }
        };
        Ok(Some((field, value)))
    }

    fn take(&mut self, n: usize, field: u32) -> Result<&'a [u8], ProtoError> {
        let left = self.buf.len() - self.at;
        if n > left {
            return Err(err(
                self.what,
                format!("field {field}: needs {n} bytes, only {left} left"),
            ));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
}

fn want_varint(v: Value<'_>, what: &'static str, field: u32) -> Result<u64, ProtoError> {
    match v {
        Value::Varint(x) => Ok(x),
        _ => Err(err(what, format!("field {field}: expected a varint"))),
    }
}

fn want_bytes<'a>(v: Value<'a>, what: &'static str, field: u32) -> Result<&'a [u8], ProtoError> {
    match v {
        Value::Bytes(b) => Ok(b),
        _ => Err(err(
            what,
            format!("field {field}: expected length-delimited bytes"),
        )),
    }
}

fn want_string(v: Value<'_>, what: &'static str, field: u32) -> Result<String, ProtoError> {
    let b = want_bytes(v, what, field)?;
    String::from_utf8(b.to_vec()).map_err(|_| err(what, format!("field {field}: not UTF-8")))
}

/// protobuf `int32`: negative values travel sign-extended to 64 bits; keep the low 32.
fn as_int32(v: u64) -> i32 {
    v as i64 as i32
}

/// brpc's service for the link (`org.interconnection.link.ReceiverService`).
pub const SERVICE_NAME: &str = "org.interconnection.link.ReceiverService";
/// Its one method.
pub const METHOD_NAME: &str = "Push";

/// brpc `RpcMeta`: the header of every baidu_std frame. Only the fields the link uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RpcMeta {
    /// Field 1: present on requests.
    pub request: Option<RpcRequestMeta>,
    /// Field 2: present on responses.
    pub response: Option<RpcResponseMeta>,
    /// Field 3: 0 = none. The link never compresses.
    pub compress_type: i32,
    /// Field 4: echoed by the response.
    pub correlation_id: u64,
    /// Field 5: bytes at the end of the body outside the protobuf payload.
    pub attachment_size: u64,
}

/// brpc `RpcRequestMeta`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RpcRequestMeta {
    /// Field 1.
    pub service_name: String,
    /// Field 2.
    pub method_name: String,
}

/// brpc `RpcResponseMeta`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RpcResponseMeta {
    /// Field 1: 0 = the call reached the method.
    pub error_code: i32,
    /// Field 2.
    pub error_text: String,
}

impl RpcMeta {
    /// The meta of a `Push` request, as the wheel writes it.
    pub fn push_request(correlation_id: u64) -> RpcMeta {
        RpcMeta {
            request: Some(RpcRequestMeta {
                service_name: SERVICE_NAME.into(),
                method_name: METHOD_NAME.into(),
            }),
            correlation_id,
            ..RpcMeta::default()
        }
    }

    /// The meta of a response to `correlation_id`.
    pub fn response(correlation_id: u64, error_code: i32, error_text: &str) -> RpcMeta {
        RpcMeta {
            response: Some(RpcResponseMeta {
                error_code,
                error_text: error_text.into(),
            }),
            correlation_id,
            ..RpcMeta::default()
        }
    }

    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Some(r) = &self.request {
            let mut m = Vec::with_capacity(64);
            put_bytes_field(&mut m, 1, r.service_name.as_bytes());
            put_bytes_field(&mut m, 2, r.method_name.as_bytes());
            put_bytes_field(out, 1, &m);
        }
        if let Some(r) = &self.response {
            let mut m = Vec::with_capacity(16 + r.error_text.len());
            // proto2 `optional`: brpc writes error_code even when 0 (bytes 12 02 08 00).
            put_varint_field(&mut m, 1, i64::from(r.error_code) as u64);
            if !r.error_text.is_empty() {
                put_bytes_field(&mut m, 2, r.error_text.as_bytes());
            }
            put_bytes_field(out, 2, &m);
        }
        put_varint_field(out, 3, i64::from(self.compress_type) as u64);
        put_varint_field(out, 4, self.correlation_id);
        if self.attachment_size != 0 {
            put_varint_field(out, 5, self.attachment_size);
        }
    }

    /// Decodes one meta.
    ///
    /// # Errors
    /// Malformed protobuf or a field of the wrong type.
    pub fn decode(buf: &[u8]) -> Result<RpcMeta, ProtoError> {
        const W: &str = "brpc RpcMeta";
        let mut meta = RpcMeta::default();
        let mut f = Fields::new(buf, W);
        while let Some((n, v)) = f.next_field()? {
            match n {
                1 => meta.request = Some(decode_request_meta(want_bytes(v, W, n)?)?),
                2 => meta.response = Some(decode_response_meta(want_bytes(v, W, n)?)?),
                3 => meta.compress_type = as_int32(want_varint(v, W, n)?),
                4 => meta.correlation_id = want_varint(v, W, n)?,
                5 => {
                    let a = as_int32(want_varint(v, W, n)?);
                    meta.attachment_size = u64::try_from(a)
                        .map_err(|_| err(W, format!("negative attachment_size {a}")))?;
                }
                _ => {}
            }
        }
        Ok(meta)
    }
}

fn decode_request_meta(buf: &[u8]) -> Result<RpcRequestMeta, ProtoError> {
    const W: &str = "brpc RpcRequestMeta";
    let mut m = RpcRequestMeta::default();
    let mut f = Fields::new(buf, W);
    while let Some((n, v)) = f.next_field()? {
        match n {
            1 => m.service_name = want_string(v, W, n)?,
            2 => m.method_name = want_string(v, W, n)?,
            _ => {}
        }
    }
    Ok(m)
}

fn decode_response_meta(buf: &[u8]) -> Result<RpcResponseMeta, ProtoError> {
    const W: &str = "brpc RpcResponseMeta";
    let mut m = RpcResponseMeta::default();
    let mut f = Fields::new(buf, W);
    while let Some((n, v)) = f.next_field()? {
        match n {
            1 => m.error_code = as_int32(want_varint(v, W, n)?),
            2 => m.error_text = want_string(v, W, n)?,
            _ => {}
        }
    }
    Ok(m)
}

/// `TransType.MONO`: the whole value in one Push.
pub const TRANS_MONO: i32 = 0;
/// `TransType.CHUNKED`: one slice, placed by its `ChunkInfo`.
pub const TRANS_CHUNKED: i32 = 1;

/// interconnection `ChunkInfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkInfo {
    /// Field 1: the whole message's length.
    pub message_length: u64,
    /// Field 2: where this slice starts.
    pub chunk_offset: u64,
}

/// interconnection `PushRequest`, borrowing its key and value from the frame.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PushRequest<'a> {
    /// Field 1.
    pub sender_rank: u64,
    /// Field 2: channel key (`<msg_key>\x01\x02<seq>`, or `ACK\x01\x02` / `FIN\x01\x02`).
    pub key: &'a [u8],
    /// Field 3.
    pub value: &'a [u8],
    /// Field 4: [`TRANS_MONO`] or [`TRANS_CHUNKED`].
    pub trans_type: i32,
    /// Field 5: present for chunked slices.
    pub chunk_info: Option<ChunkInfo>,
}

impl PushRequest<'_> {
    /// Appends the encoding (proto3: zero values omitted, as the wheel does).
    pub fn encode(&self, out: &mut Vec<u8>) {
        if self.sender_rank != 0 {
            put_varint_field(out, 1, self.sender_rank);
        }
        if !self.key.is_empty() {
            put_bytes_field(out, 2, self.key);
        }
        if !self.value.is_empty() {
            put_bytes_field(out, 3, self.value);
        }
        if self.trans_type != 0 {
            put_varint_field(out, 4, i64::from(self.trans_type) as u64);
        }
        if let Some(c) = &self.chunk_info {
            let mut m = Vec::with_capacity(2 * (1 + MAX_VARINT_LEN));
            if c.message_length != 0 {
                put_varint_field(&mut m, 1, c.message_length);
            }
            if c.chunk_offset != 0 {
                put_varint_field(&mut m, 2, c.chunk_offset);
            }
            put_bytes_field(out, 5, &m);
        }
    }

    /// An upper bound of the encoded size (for preallocation).
    pub fn encoded_len_bound(&self) -> usize {
        self.key.len() + self.value.len() + 6 * (1 + MAX_VARINT_LEN) + 2 * (1 + MAX_VARINT_LEN)
    }
}

/// Decodes a `PushRequest` borrowing from `buf`.
///
/// # Errors
/// Malformed protobuf or a field of the wrong type.
pub fn decode_push_request(buf: &[u8]) -> Result<PushRequest<'_>, ProtoError> {
    const W: &str = "interconnection PushRequest";
    let mut r = PushRequest::default();
    let mut f = Fields::new(buf, W);
    while let Some((n, v)) = f.next_field()? {
        match n {
            1 => r.sender_rank = want_varint(v, W, n)?,
            2 => r.key = want_bytes(v, W, n)?,
            3 => r.value = want_bytes(v, W, n)?,
            4 => r.trans_type = as_int32(want_varint(v, W, n)?),
            5 => {
                const C: &str = "interconnection ChunkInfo";
                let mut c = ChunkInfo::default();
                let mut cf = Fields::new(want_bytes(v, W, n)?, C);
                while let Some((cn, cv)) = cf.next_field()? {
                    match cn {
                        1 => c.message_length = want_varint(cv, C, cn)?,
                        2 => c.chunk_offset = want_varint(cv, C, cn)?,
                        _ => {}
                    }
                }
                r.chunk_info = Some(c);
            }
            _ => {}
        }
    }
    Ok(r)
}

/// interconnection `ErrorCode.OK`.
pub const IC_OK: i32 = 0;
/// `ErrorCode.UNEXPECTED_ERROR`: what yacl answers for an unknown sender rank.
pub const IC_UNEXPECTED_ERROR: i32 = 31_100_001;
/// `ErrorCode.INVALID_REQUEST`: what yacl answers for an unknown `trans_type`.
pub const IC_INVALID_REQUEST: i32 = 31_100_100;

/// interconnection `PushResponse` (its `ResponseHeader` flattened).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PushResponse {
    /// `header.error_code`.
    pub error_code: i32,
    /// `header.error_msg`.
    pub error_msg: String,
}

impl PushResponse {
    /// Appends the encoding: the header is always present (`0a 00` when OK).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut h = Vec::with_capacity(16 + self.error_msg.len());
        if self.error_code != 0 {
            put_varint_field(&mut h, 1, i64::from(self.error_code) as u64);
        }
        if !self.error_msg.is_empty() {
            put_bytes_field(&mut h, 2, self.error_msg.as_bytes());
        }
        put_bytes_field(out, 1, &h);
    }

    /// Decodes one response.
    ///
    /// # Errors
    /// Malformed protobuf or a field of the wrong type.
    pub fn decode(buf: &[u8]) -> Result<PushResponse, ProtoError> {
        const W: &str = "interconnection PushResponse";
        const H: &str = "interconnection ResponseHeader";
        let mut r = PushResponse::default();
        let mut f = Fields::new(buf, W);
        while let Some((n, v)) = f.next_field()? {
            if n == 1 {
                let mut hf = Fields::new(want_bytes(v, W, n)?, H);
                while let Some((hn, hv)) = hf.next_field()? {
                    match hn {
                        1 => r.error_code = as_int32(want_varint(hv, H, hn)?),
                        2 => r.error_msg = want_string(hv, H, hn)?,
                        _ => {}
                    }
                }
            }
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn varint_round_trips_and_bounds() {
        for v in [0u64, 1, 127, 128, 300, 8_589_934_594, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut at = 0;
            assert_eq!(read_varint(&b, &mut at), Some(v));
            assert_eq!(at, b.len());
            // Every strict prefix is truncated.
            for cut in 0..b.len() {
                let mut at = 0;
                assert_eq!(read_varint(&b[..cut], &mut at), None);
            }
        }
        // 11 continuation bytes, and a 10th byte with more than one bit: both refused.
        let mut at = 0;
        assert_eq!(read_varint(&[0xff; 11], &mut at), None);
        let mut over = vec![0xff; 9];
        over.push(0x02);
        let mut at = 0;
        assert_eq!(read_varint(&over, &mut at), None);
    }

    #[test]
    fn request_meta_matches_the_wheel_bytes() {
        // §1.2 of the wire brief: 0a30 0a28 <service> 1204 "Push" 1800 20<corr>.
        let mut b = Vec::new();
        RpcMeta::push_request(8_589_934_594).encode(&mut b);
        let mut want = hex("0a30 0a28");
        want.extend_from_slice(SERVICE_NAME.as_bytes());
        want.extend_from_slice(&hex("1204"));
        want.extend_from_slice(b"Push");
        want.extend_from_slice(&hex("1800 20"));
        put_varint(&mut want, 8_589_934_594);
        assert_eq!(b, want);
        let back = RpcMeta::decode(&b).unwrap();
        assert_eq!(back, RpcMeta::push_request(8_589_934_594));
    }

    #[test]
    fn response_meta_and_payload_match_the_wheel_bytes() {
        let mut b = Vec::new();
        RpcMeta::response(7, 0, "").encode(&mut b);
        assert_eq!(b, hex("12020800 1800 2007"));
        let back = RpcMeta::decode(&b).unwrap();
        assert_eq!(back.response.unwrap().error_code, 0);
        assert_eq!(back.correlation_id, 7);
        let mut p = Vec::new();
        PushResponse::default().encode(&mut p);
        assert_eq!(p, hex("0a00"));
        assert_eq!(PushResponse::decode(&p).unwrap(), PushResponse::default());
    }

    #[test]
    fn negative_int32_and_error_text_round_trip() {
        let mut b = Vec::new();
        RpcMeta::response(1, -1, "bad").encode(&mut b);
        let r = RpcMeta::decode(&b).unwrap().response.unwrap();
        assert_eq!((r.error_code, r.error_text.as_str()), (-1, "bad"));
        let resp = PushResponse {
            error_code: IC_UNEXPECTED_ERROR,
            error_msg: "no such rank".into(),
        };
        let mut p = Vec::new();
        resp.encode(&mut p);
        assert_eq!(PushResponse::decode(&p).unwrap(), resp);
    }

    #[test]
    fn push_request_omits_zero_fields_like_the_wheel() {
        let r = PushRequest {
            sender_rank: 0,
            key: b"connect_0\x01\x020",
            ..PushRequest::default()
        };
        let mut b = Vec::new();
        r.encode(&mut b);
        let mut want = vec![0x12, 12];
        want.extend_from_slice(b"connect_0\x01\x020");
        assert_eq!(b, want);
        assert_eq!(decode_push_request(&b).unwrap(), r);
    }

    #[test]
    fn chunked_push_request_round_trips() {
        let value = vec![9u8; 300];
        let r = PushRequest {
            sender_rank: 1,
            key: b"k\x01\x025",
            value: &value,
            trans_type: TRANS_CHUNKED,
            chunk_info: Some(ChunkInfo {
                message_length: 2_097_166,
                chunk_offset: 1 << 20,
            }),
        };
        let mut b = Vec::new();
        r.encode(&mut b);
        assert!(b.len() <= r.encoded_len_bound());
        assert_eq!(decode_push_request(&b).unwrap(), r);
        // First chunk: offset 0 is omitted but chunk_info is still there.
        let first = PushRequest {
            chunk_info: Some(ChunkInfo {
                message_length: 5,
                chunk_offset: 0,
            }),
            ..r.clone()
        };
        let mut b = Vec::new();
        first.encode(&mut b);
        assert_eq!(decode_push_request(&b).unwrap(), first);
    }

    #[test]
    fn unknown_fields_are_skipped_and_bad_ones_refused() {
        let mut b = Vec::new();
        put_varint_field(&mut b, 15, 3);
        put_varint(&mut b, (16 << 3) | 1); // fixed64
        b.extend_from_slice(&[0; 8]);
        put_varint(&mut b, (17 << 3) | 5); // fixed32
        b.extend_from_slice(&[0; 4]);
        put_bytes_field(&mut b, 2, b"key");
        assert_eq!(decode_push_request(&b).unwrap().key, b"key");
        // Wrong wire type for a known field.
        let mut w = Vec::new();
        put_bytes_field(&mut w, 1, b"x");
        assert!(decode_push_request(&w).is_err());
        // A group.
        assert!(decode_push_request(&[(3 << 3) | 3]).is_err());
        // Field number 0.
        assert!(decode_push_request(&[0x00, 0x00]).is_err());
        // A length past the end.
        assert!(decode_push_request(&[0x1a, 0x05, 1, 2]).is_err());
        // A length near u64::MAX.
        let mut huge = vec![0x1a];
        put_varint(&mut huge, u64::MAX);
        assert!(decode_push_request(&huge).is_err());
        // Non-UTF-8 service name.
        let mut m = Vec::new();
        put_bytes_field(&mut m, 1, &[0xff, 0xfe]);
        let mut meta = Vec::new();
        put_bytes_field(&mut meta, 1, &m);
        assert!(RpcMeta::decode(&meta).is_err());
    }
}
