//! `h2:grpc`: brpc's HTTP/2 with gRPC framing, the transport a SecretFlow party uses when its
//! `link_config.brpc_channel_protocol` says `"h2:grpc"` (RFC 9113 for HTTP/2, RFC 7541 for
//! HPACK, gRPC's `PROTOCOL-HTTP2.md` for the message framing; brpc `src/brpc/policy/
//! http2_rpc_protocol.cpp`, yacl `yacl/link/transport/brpc_link.cc`).
//!
//! One stream per `ReceiverService.Push`: the request's HEADERS (`:method POST`, `:path
//! /org.interconnection.link.ReceiverService/Push`, `content-type application/grpc`), then
//! DATA holding a 5-byte gRPC prefix (flag 0, u32 BE length) and the `PushRequest`; the
//! response's HEADERS (`:status 200`), DATA with the prefixed `PushResponse` and trailers
//! (`grpc-status 0`). Both directions honour flow control; both sides bound what the peer can
//! make them hold (frame size, header block size, streams open at once, each body).
//!
//! Our HPACK encoder sends every field as a literal without indexing and without Huffman
//! coding (valid for any decoder, and what brpc itself sends); the decoder is `loona-hpack`'s,
//! one per connection and direction as HPACK's dynamic table requires.

use super::client::Failure;
use super::proto::{PushResponse, decode_push_request};
use super::server::PushHandler;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The request path of `ReceiverService.Push`.
pub(crate) const PUSH_PATH: &str = "/org.interconnection.link.ReceiverService/Push";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

const SETTINGS_ENABLE_PUSH: u16 = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

/// RFC 9113 error codes we send in RST_STREAM and GOAWAY.
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const FRAME_SIZE_ERROR: u32 = 0x6;
const REFUSED_STREAM: u32 = 0x7;
const COMPRESSION_ERROR: u32 = 0x9;

/// The frame size every endpoint accepts; we never raise ours, so the peer's frames are at
/// most this long.
pub(crate) const DEFAULT_MAX_FRAME: usize = 16_384;
/// The largest frame size a peer may announce (RFC 9113 §6.5.2).
const LARGEST_MAX_FRAME: u32 = (1 << 24) - 1;
/// The window every stream and the connection start with (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: i64 = 65_535;
/// The largest flow-control window (RFC 9113 §6.9.1).
const MAX_WINDOW: i64 = (1 << 31) - 1;
/// The frame header's length.
const FRAME_HEADER: usize = 9;
/// Largest header block (HEADERS plus CONTINUATIONs) accepted: brpc's are ~200 bytes.
const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// Most streams a peer may have open on one of our server connections (brpc's client keeps
/// `chunk_parallel_send_size` chunks, 8 by default, in flight plus the ACKs).
pub(crate) const MAX_STREAMS: u32 = 128;
/// The gRPC message prefix: compressed flag, u32 BE length.
const GRPC_PREFIX: usize = 5;
/// gRPC's `UNIMPLEMENTED`: the request names a method this server does not have.
const GRPC_UNIMPLEMENTED: i32 = 12;
/// gRPC's `INVALID_ARGUMENT`: the message does not parse.
const GRPC_INVALID_ARGUMENT: i32 = 3;
/// The connection window our client and server keep open for the peer: what it may send
/// before we replenish it (we do as soon as the bytes are stored).
const CONN_WINDOW: i64 = 16 << 20;
/// Our client's stream window: responses are 7-byte messages.
const CLIENT_STREAM_WINDOW: i64 = 1 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One HTTP/2 frame as read.
pub(crate) struct RawFrame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl RawFrame {
    pub(crate) fn wire_len(&self) -> usize {
        FRAME_HEADER + self.payload.len()
    }
}

/// Why reading a frame stopped.
pub(crate) enum ReadError {
    /// The connection failed or closed mid-frame.
    Io(io::Error),
    /// The peer broke HTTP/2 (the error code to send it, and what happened).
    Protocol(u32, String),
}

fn protocol(code: u32, what: impl Into<String>) -> ReadError {
    ReadError::Protocol(code, what.into())
}

/// Reads one frame whose payload is at most `max_payload`; `None` at a clean end.
fn read_frame(r: &mut impl Read, max_payload: usize) -> Result<Option<RawFrame>, ReadError> {
    let mut h = [0u8; FRAME_HEADER];
    let mut got = 0;
    while got < FRAME_HEADER {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(ReadError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of an HTTP/2 frame header",
                )));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
    if len > max_payload {
        return Err(protocol(
            FRAME_SIZE_ERROR,
            format!("an HTTP/2 frame of {len} bytes exceeds the agreed maximum of {max_payload}"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).map_err(ReadError::Io)?;
    Ok(Some(RawFrame {
        kind: h[3],
        flags: h[4],
        stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        payload,
    }))
}

/// Appends one frame.
fn put_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

fn put_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    let mut p = Vec::with_capacity(6 * settings.len());
    for (id, v) in settings {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    put_frame(out, SETTINGS, 0, 0, &p);
}

fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_frame(out, WINDOW_UPDATE, 0, stream, &increment.to_be_bytes());
}

fn put_goaway(out: &mut Vec<u8>, last_stream: u32, code: u32) {
    let mut p = Vec::with_capacity(8);
    p.extend_from_slice(&last_stream.to_be_bytes());
    p.extend_from_slice(&code.to_be_bytes());
    put_frame(out, GOAWAY, 0, 0, &p);
}

/// An HPACK integer with an `n`-bit prefix whose high bits are `first` (RFC 7541 §5.1).
fn put_hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A header block of literal fields without indexing, new names, no Huffman (RFC 7541 §6.2.2).
pub(crate) fn encode_headers(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    for (name, value) in fields {
        out.push(0x00);
        put_hpack_int(&mut out, 0, 7, name.len());
        out.extend_from_slice(name.as_bytes());
        put_hpack_int(&mut out, 0, 7, value.len());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// A message with its gRPC prefix.
pub(crate) fn grpc_message(body: impl FnOnce(&mut Vec<u8>), capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(GRPC_PREFIX + capacity);
    out.extend_from_slice(&[0; GRPC_PREFIX]);
    body(&mut out);
    let len = (out.len() - GRPC_PREFIX) as u32;
    out[1..GRPC_PREFIX].copy_from_slice(&len.to_be_bytes());
    out
}

/// The message inside one gRPC-framed body (exactly one, uncompressed, as brpc sends).
fn grpc_unwrap(body: &[u8]) -> Result<&[u8], String> {
    if body.len() < GRPC_PREFIX {
        return Err(format!(
            "a gRPC body of {} bytes is shorter than its prefix",
            body.len()
        ));
    }
    if body[0] != 0 {
        return Err("a compressed gRPC message (no compression was agreed)".into());
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if len != body.len() - GRPC_PREFIX {
        return Err(format!(
            "a gRPC prefix announces {len} bytes but the body holds {}",
            body.len() - GRPC_PREFIX
        ));
    }
    Ok(&body[GRPC_PREFIX..])
}

/// A frame's content without its padding (and a HEADERS' priority fields).
fn unpad(f: &RawFrame) -> Result<&[u8], ReadError> {
    let mut p = f.payload.as_slice();
    let mut pad = 0usize;
    if f.flags & PADDED != 0 {
        let (&n, rest) = p
            .split_first()
            .ok_or_else(|| protocol(PROTOCOL_ERROR, "a padded frame without its pad length"))?;
        pad = usize::from(n);
        p = rest;
    }
    if f.kind == HEADERS && f.flags & PRIORITY_FLAG != 0 {
        if p.len() < 5 {
            return Err(protocol(
                PROTOCOL_ERROR,
                "a HEADERS frame cut in its priority",
            ));
        }
        p = &p[5..];
    }
    if pad > p.len() {
        return Err(protocol(PROTOCOL_ERROR, "padding longer than the frame"));
    }
    Ok(&p[..p.len() - pad])
}

/// A header block being gathered from HEADERS and CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    bytes: Vec<u8>,
}

/// Gathers header blocks and decodes them in arrival order (HPACK state is per connection).
struct Headers {
    decoder: loona_hpack::Decoder<'static>,
    open: Option<Block>,
}

impl Headers {
    fn new() -> Headers {
        Headers {
            decoder: loona_hpack::Decoder::new(),
            open: None,
        }
    }

    /// Takes a HEADERS or CONTINUATION frame; returns the stream, the decoded fields and
    /// whether the stream ends once the block is whole.
    #[allow(clippy::type_complexity)]
    fn on_frame(
        &mut self,
        f: &RawFrame,
    ) -> Result<Option<(u32, Vec<(Vec<u8>, Vec<u8>)>, bool)>, ReadError> {
        match (f.kind, self.open.as_mut()) {
            (HEADERS, None) => {
                if f.stream == 0 {
                    return Err(protocol(PROTOCOL_ERROR, "HEADERS on stream 0"));
                }
                self.open = Some(Block {
                    stream: f.stream,
                    end_stream: f.flags & END_STREAM != 0,
                    bytes: unpad(f)?.to_vec(),
                });
            }
            (CONTINUATION, Some(b)) if b.stream == f.stream => {
                if b.bytes.len() + f.payload.len() > MAX_HEADER_BLOCK {
                    return Err(protocol(
                        PROTOCOL_ERROR,
                        format!("a header block over {MAX_HEADER_BLOCK} bytes"),
                    ));
                }
                b.bytes.extend_from_slice(&f.payload);
            }
            _ => {
                return Err(protocol(
                    PROTOCOL_ERROR,
                    "a header block interleaved with other frames",
                ));
            }
        }
        if f.flags & END_HEADERS == 0 {
            return Ok(None);
        }
        let Some(b) = self.open.take() else {
            return Ok(None);
        };
        let fields = self
            .decoder
            .decode(&b.bytes)
            .map_err(|e| protocol(COMPRESSION_ERROR, format!("HPACK: {e}")))?;
        Ok(Some((b.stream, fields, b.end_stream)))
    }

    fn in_block(&self) -> bool {
        self.open.is_some()
    }
}

fn field<'a>(fields: &'a [(Vec<u8>, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(n, _)| n.as_slice() == name.as_bytes())
        .map(|(_, v)| v.as_slice())
}

fn text(v: Option<&[u8]>) -> String {
    v.map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

/// A SETTINGS frame's entries.
fn parse_settings(f: &RawFrame) -> Result<Vec<(u16, u32)>, ReadError> {
    if f.stream != 0 || !f.payload.len().is_multiple_of(6) {
        return Err(protocol(FRAME_SIZE_ERROR, "a malformed SETTINGS frame"));
    }
    Ok(f.payload
        .chunks_exact(6)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
        .collect())
}

fn window_increment(f: &RawFrame) -> Result<i64, ReadError> {
    let p = &f.payload;
    if p.len() != 4 {
        return Err(protocol(
            FRAME_SIZE_ERROR,
            "a WINDOW_UPDATE that is not 4 bytes",
        ));
    }
    let inc = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
    if inc == 0 {
        return Err(protocol(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0"));
    }
    Ok(i64::from(inc))
}

/// What the peer allows us to send.
struct SendWindows {
    conn: i64,
    /// Each open stream's window.
    streams: HashMap<u32, i64>,
    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE, each new stream's window.
    initial: i64,
    /// The peer's SETTINGS_MAX_FRAME_SIZE.
    max_frame: usize,
}

impl SendWindows {
    fn new() -> SendWindows {
        SendWindows {
            conn: DEFAULT_WINDOW,
            streams: HashMap::new(),
            initial: DEFAULT_WINDOW,
            max_frame: DEFAULT_MAX_FRAME,
        }
    }

    /// Applies the peer's SETTINGS (RFC 9113 §6.5.2, §6.9.2).
    fn apply(&mut self, settings: &[(u16, u32)]) -> Result<(), ReadError> {
        for &(id, v) in settings {
            match id {
                SETTINGS_INITIAL_WINDOW_SIZE => {
                    let v = i64::from(v);
                    if v > MAX_WINDOW {
                        return Err(protocol(
                            FLOW_CONTROL_ERROR,
                            "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
                        ));
                    }
                    let delta = v - self.initial;
                    for w in self.streams.values_mut() {
                        *w += delta;
                        if *w > MAX_WINDOW {
                            return Err(protocol(FLOW_CONTROL_ERROR, "a stream window overflowed"));
                        }
                    }
                    self.initial = v;
                }
                SETTINGS_MAX_FRAME_SIZE => {
                    if !(DEFAULT_MAX_FRAME as u32..=LARGEST_MAX_FRAME).contains(&v) {
                        return Err(protocol(
                            PROTOCOL_ERROR,
                            format!("SETTINGS_MAX_FRAME_SIZE {v} is out of range"),
                        ));
                    }
                    self.max_frame = v as usize;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn update(&mut self, stream: u32, inc: i64) -> Result<(), ReadError> {
        let w = if stream == 0 {
            &mut self.conn
        } else {
            match self.streams.get_mut(&stream) {
                Some(w) => w,
                // A stream already closed: RFC 9113 §6.9 says ignore.
                None => return Ok(()),
            }
        };
        *w += inc;
        if *w > MAX_WINDOW {
            return Err(protocol(
                FLOW_CONTROL_ERROR,
                "a flow-control window overflowed",
            ));
        }
        Ok(())
    }

    /// How many bytes of `stream` may go now.
    fn room(&self, stream: u32) -> usize {
        let s = self.streams.get(&stream).copied().unwrap_or(0);
        self.conn.min(s).max(0) as usize
    }

    fn spend(&mut self, stream: u32, n: usize) {
        self.conn -= n as i64;
        if let Some(w) = self.streams.get_mut(&stream) {
            *w -= n as i64;
        }
    }
}

/// What the peer may still send us on the connection, replenished as bytes are stored.
struct RecvWindow {
    left: i64,
    /// Consumed bytes not yet given back.
    owed: i64,
}

impl RecvWindow {
    fn new() -> RecvWindow {
        RecvWindow {
            left: CONN_WINDOW,
            owed: 0,
        }
    }

    /// Takes `n` bytes of DATA; fails if the peer sent past the window.
    fn take(&mut self, n: usize) -> Result<(), ReadError> {
        self.left -= n as i64;
        if self.left < 0 {
            return Err(protocol(
                FLOW_CONTROL_ERROR,
                "the peer sent past the connection's flow-control window",
            ));
        }
        self.owed += n as i64;
        Ok(())
    }

    /// A WINDOW_UPDATE for the connection once a quarter of the window is owed.
    fn give_back(&mut self, out: &mut Vec<u8>) {
        if self.owed >= CONN_WINDOW / 4 {
            put_window_update(out, 0, self.owed as u32);
            self.left += self.owed;
            self.owed = 0;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Client.

/// The writing half of one client connection: the socket writer, and the windows the reader
/// thread updates.
pub(crate) struct H2Conn {
    out: Mutex<Box<dyn Write + Send>>,
    /// Bytes the reader thread wrote (SETTINGS and PING acks, WINDOW_UPDATEs), for the report.
    control_sent: AtomicU64,
    windows: Mutex<(SendWindows, bool)>,
    changed: Condvar,
    authority: String,
    timeout: String,
}

impl H2Conn {
    /// Writes the connection preface and our SETTINGS on `out`.
    ///
    /// # Errors
    /// Write failures.
    pub(crate) fn open(
        mut out: Box<dyn Write + Send>,
        authority: String,
        rpc_timeout: Duration,
    ) -> io::Result<(H2Conn, usize)> {
        let mut hello = PREFACE.to_vec();
        put_settings(
            &mut hello,
            &[
                (SETTINGS_ENABLE_PUSH, 0),
                (SETTINGS_INITIAL_WINDOW_SIZE, CLIENT_STREAM_WINDOW as u32),
            ],
        );
        put_window_update(&mut hello, 0, (CONN_WINDOW - DEFAULT_WINDOW) as u32);
        out.write_all(&hello)?;
        out.flush()?;
        Ok((
            H2Conn {
                out: Mutex::new(out),
                control_sent: AtomicU64::new(0),
                windows: Mutex::new((SendWindows::new(), false)),
                changed: Condvar::new(),
                authority,
                timeout: format!("{}m", rpc_timeout.as_millis()),
            },
            hello.len(),
        ))
    }

    fn write(&self, bytes: &[u8]) -> io::Result<()> {
        let mut out = lock(&self.out);
        out.write_all(bytes)?;
        out.flush()
    }

    /// A control frame from the reader thread, counted apart.
    fn write_control(&self, bytes: &[u8]) -> io::Result<()> {
        self.write(bytes)?;
        self.control_sent
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The control bytes written since the last call.
    pub(crate) fn take_control_sent(&self) -> u64 {
        self.control_sent.swap(0, Ordering::Relaxed)
    }

    /// Marks the connection gone: senders waiting for window give up.
    pub(crate) fn close(&self) {
        lock(&self.windows).1 = true;
        self.changed.notify_all();
    }

    /// Sends one request on `stream`: HEADERS, then the gRPC-framed `body` in DATA frames as
    /// the peer's windows allow, waiting for them at most until `deadline`. Returns the bytes
    /// written.
    ///
    /// # Errors
    /// Write failures, the connection gone, or no window before the deadline.
    pub(crate) fn send(
        &self,
        stream: u32,
        body: &[u8],
        deadline: Instant,
        cancelled: &dyn Fn() -> bool,
    ) -> io::Result<usize> {
        let block = encode_headers(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", PUSH_PATH),
            (":authority", &self.authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", &self.timeout),
        ]);
        {
            let mut w = lock(&self.windows);
            let initial = w.0.initial;
            w.0.streams.insert(stream, initial);
        }
        let mut out = Vec::with_capacity(block.len() + FRAME_HEADER);
        put_frame(&mut out, HEADERS, END_HEADERS, stream, &block);
        self.write(&out)?;
        let mut written = out.len();
        let mut sent = 0;
        while sent < body.len() {
            let n = {
                let mut w = lock(&self.windows);
                loop {
                    if w.1 {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "the HTTP/2 connection closed",
                        ));
                    }
                    let room = w.0.room(stream).min(w.0.max_frame);
                    if room > 0 {
                        let n = room.min(body.len() - sent);
                        w.0.spend(stream, n);
                        break n;
                    }
                    let now = Instant::now();
                    if now >= deadline || cancelled() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "the peer's HTTP/2 flow-control window stayed closed",
                        ));
                    }
                    let slice = (deadline - now).min(Duration::from_millis(100));
                    w = self
                        .changed
                        .wait_timeout(w, slice)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            };
            let last = sent + n == body.len();
            let mut frame = Vec::with_capacity(FRAME_HEADER + n);
            let flags = if last { END_STREAM } else { 0 };
            put_frame(&mut frame, DATA, flags, stream, &body[sent..sent + n]);
            self.write(&frame)?;
            written += frame.len();
            sent += n;
        }
        Ok(written)
    }

    /// Forgets a finished stream's window.
    fn finished(&self, stream: u32) {
        lock(&self.windows).0.streams.remove(&stream);
    }
}

/// One response being read.
#[derive(Default)]
struct Response {
    status: Option<Vec<u8>>,
    grpc_status: Option<Vec<u8>>,
    grpc_message: Option<Vec<u8>>,
    data: Vec<u8>,
}

impl Response {
    fn take_fields(&mut self, fields: &[(Vec<u8>, Vec<u8>)]) {
        if let Some(s) = field(fields, ":status") {
            self.status = Some(s.to_vec());
        }
        if let Some(s) = field(fields, "grpc-status") {
            self.grpc_status = Some(s.to_vec());
        }
        if let Some(s) = field(fields, "grpc-message") {
            self.grpc_message = Some(s.to_vec());
        }
    }

    fn outcome(self) -> Result<(), Failure> {
        if self.status.as_deref() != Some(b"200") {
            return Err(Failure::Malformed(format!(
                "an HTTP/2 response with :status {:?}",
                text(self.status.as_deref())
            )));
        }
        let code = text(self.grpc_status.as_deref());
        if code != "0" {
            return Err(Failure::Refused {
                code: code.parse().unwrap_or(-1),
                message: format!("grpc-status {code}: {}", text(self.grpc_message.as_deref())),
            });
        }
        let msg = grpc_unwrap(&self.data).map_err(Failure::Malformed)?;
        match PushResponse::decode(msg) {
            Ok(r) if r.error_code == 0 => Ok(()),
            Ok(r) => Err(Failure::Refused {
                code: r.error_code,
                message: r.error_msg,
            }),
            Err(e) => Err(Failure::Malformed(e.to_string())),
        }
    }
}

/// A stream and how the call on it ended.
type Answer = (u32, Result<(), Failure>);

/// The reading half of one client connection: answers SETTINGS and PING, applies
/// WINDOW_UPDATE, and gathers each stream's response.
pub(crate) struct ClientReader {
    headers: Headers,
    responses: HashMap<u32, Response>,
    recv: RecvWindow,
    max_response: usize,
}

impl ClientReader {
    pub(crate) fn new(max_response: usize) -> ClientReader {
        ClientReader {
            headers: Headers::new(),
            responses: HashMap::new(),
            recv: RecvWindow::new(),
            max_response,
        }
    }

    /// Reads and handles one frame; returns its wire length and any stream it finished with
    /// its outcome, `None` at a clean end.
    ///
    /// # Errors
    /// The connection broke ([`ReadError::Io`]), or the peer broke HTTP/2 (GOAWAY is sent to
    /// it; [`ReadError::Protocol`]).
    pub(crate) fn next(
        &mut self,
        r: &mut impl Read,
        conn: &H2Conn,
    ) -> Result<Option<(usize, Option<Answer>)>, ReadError> {
        let f = match read_frame(r, DEFAULT_MAX_FRAME) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.fail(conn, e)),
        };
        let len = f.wire_len();
        match self.on_frame(&f, conn) {
            Ok(done) => Ok(Some((len, done))),
            Err(e) => Err(self.fail(conn, e)),
        }
    }

    fn fail(&self, conn: &H2Conn, e: ReadError) -> ReadError {
        if let ReadError::Protocol(code, _) = &e {
            let mut g = Vec::new();
            put_goaway(&mut g, 0, *code);
            let _ = conn.write_control(&g);
        }
        e
    }

    fn on_frame(&mut self, f: &RawFrame, conn: &H2Conn) -> Result<Option<Answer>, ReadError> {
        if self.headers.in_block() && f.kind != CONTINUATION {
            return Err(protocol(
                PROTOCOL_ERROR,
                "a header block interleaved with other frames",
            ));
        }
        match f.kind {
            SETTINGS => {
                if f.flags & ACK == 0 {
                    let s = parse_settings(f)?;
                    lock(&conn.windows).0.apply(&s)?;
                    conn.changed.notify_all();
                    let mut ack = Vec::new();
                    put_frame(&mut ack, SETTINGS, ACK, 0, &[]);
                    conn.write_control(&ack).map_err(ReadError::Io)?;
                }
                Ok(None)
            }
            WINDOW_UPDATE => {
                let inc = window_increment(f)?;
                lock(&conn.windows).0.update(f.stream, inc)?;
                conn.changed.notify_all();
                Ok(None)
            }
            PING => {
                if f.flags & ACK == 0 && f.payload.len() == 8 {
                    let mut pong = Vec::new();
                    put_frame(&mut pong, PING, ACK, 0, &f.payload);
                    conn.write_control(&pong).map_err(ReadError::Io)?;
                }
                Ok(None)
            }
            GOAWAY => Err(ReadError::Io(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the peer ended the HTTP/2 connection (GOAWAY)",
            ))),
            RST_STREAM => {
                self.responses.remove(&f.stream);
                conn.finished(f.stream);
                let code = f
                    .payload
                    .get(..4)
                    .map_or(0, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                let failure = if code == REFUSED_STREAM {
                    Failure::Closed("the peer refused the HTTP/2 stream".into())
                } else {
                    Failure::Refused {
                        code: code as i32,
                        message: format!("the peer reset the HTTP/2 stream (error {code})"),
                    }
                };
                Ok(Some((f.stream, Err(failure))))
            }
            HEADERS | CONTINUATION => {
                let Some((stream, fields, end)) = self.headers.on_frame(f)? else {
                    return Ok(None);
                };
                self.responses
                    .entry(stream)
                    .or_default()
                    .take_fields(&fields);
                Ok(if end { self.finish(stream, conn) } else { None })
            }
            DATA => {
                self.recv.take(f.payload.len())?;
                let data = unpad(f)?;
                let r = self.responses.entry(f.stream).or_default();
                if r.data.len() + data.len() > self.max_response {
                    return Err(protocol(
                        PROTOCOL_ERROR,
                        "a response larger than any Push's",
                    ));
                }
                r.data.extend_from_slice(data);
                let mut wu = Vec::new();
                self.recv.give_back(&mut wu);
                if !wu.is_empty() {
                    conn.write_control(&wu).map_err(ReadError::Io)?;
                }
                Ok(if f.flags & END_STREAM != 0 {
                    self.finish(f.stream, conn)
                } else {
                    None
                })
            }
            PUSH_PROMISE => Err(protocol(PROTOCOL_ERROR, "PUSH_PROMISE, which we disabled")),
            _ => Ok(None),
        }
    }

    fn finish(&mut self, stream: u32, conn: &H2Conn) -> Option<Answer> {
        conn.finished(stream);
        let r = self.responses.remove(&stream)?;
        Some((stream, r.outcome()))
    }
}

// ---------------------------------------------------------------------------------------------
// Server.

/// One request stream on a server connection.
#[derive(Default)]
struct Request {
    /// Why this stream gets an error instead of a dispatch (gRPC status and message).
    refused: Option<(i32, String)>,
    body: Vec<u8>,
    /// Its receive window left (we never replenish a stream: one Push fits the initial one).
    window: i64,
}

/// A response whose DATA waits for the peer's window.
struct Pending {
    stream: u32,
    data: Vec<u8>,
}

/// Serves one HTTP/2 connection whose first bytes were the preface; returns when it closes.
pub(crate) fn serve(stream: &mut (impl Read + Write), max_body: usize, handler: &dyn PushHandler) {
    if let Err(what) = serve_inner(stream, max_body, handler) {
        handler.on_bad_frame(format!("HTTP/2: {what}"));
    }
}

/// The stream window we give each request: a Push body and its prefix.
fn request_window(max_body: usize) -> i64 {
    ((max_body + GRPC_PREFIX) as i64).clamp(DEFAULT_WINDOW, MAX_WINDOW)
}

fn serve_inner(
    stream: &mut (impl Read + Write),
    max_body: usize,
    handler: &dyn PushHandler,
) -> Result<(), String> {
    let mut preface = [0u8; PREFACE.len()];
    if stream.read_exact(&mut preface).is_err() {
        return Ok(());
    }
    if &preface != PREFACE {
        return Err("the connection does not open with the HTTP/2 preface".into());
    }
    handler.on_traffic(preface.len(), 0);
    let window = request_window(max_body);
    let mut out = Vec::new();
    put_settings(
        &mut out,
        &[
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS),
            (SETTINGS_INITIAL_WINDOW_SIZE, window as u32),
        ],
    );
    put_window_update(&mut out, 0, (CONN_WINDOW - DEFAULT_WINDOW) as u32);
    let mut s = Server {
        headers: Headers::new(),
        requests: HashMap::new(),
        last_stream: 0,
        windows: SendWindows::new(),
        recv: RecvWindow::new(),
        pending: VecDeque::new(),
        max_body,
        window,
        handler,
    };
    loop {
        if !out.is_empty() {
            if stream
                .write_all(&out)
                .and_then(|()| stream.flush())
                .is_err()
            {
                return Ok(());
            }
            handler.on_traffic(0, out.len());
            out.clear();
        }
        let f = match read_frame(stream, DEFAULT_MAX_FRAME) {
            Ok(Some(f)) => f,
            Ok(None) | Err(ReadError::Io(_)) => return Ok(()),
            Err(ReadError::Protocol(code, what)) => {
                return Err(goodbye(stream, s.last_stream, code, what));
            }
        };
        handler.on_traffic(f.wire_len(), 0);
        match s.on_frame(&f, &mut out) {
            Ok(true) => {}
            Ok(false) => {
                let _ = stream.write_all(&out);
                return Ok(());
            }
            Err(ReadError::Io(_)) => return Ok(()),
            Err(ReadError::Protocol(code, what)) => {
                let _ = stream.write_all(&out);
                return Err(goodbye(stream, s.last_stream, code, what));
            }
        }
    }
}

fn goodbye(stream: &mut impl Write, last: u32, code: u32, what: String) -> String {
    let mut g = Vec::new();
    put_goaway(&mut g, last, code);
    let _ = stream.write_all(&g).and_then(|()| stream.flush());
    what
}

struct Server<'a> {
    headers: Headers,
    requests: HashMap<u32, Request>,
    last_stream: u32,
    windows: SendWindows,
    recv: RecvWindow,
    pending: VecDeque<Pending>,
    max_body: usize,
    window: i64,
    handler: &'a dyn PushHandler,
}

impl Server<'_> {
    /// Handles one frame, appending what to send to `out`; `false` when the peer ends.
    fn on_frame(&mut self, f: &RawFrame, out: &mut Vec<u8>) -> Result<bool, ReadError> {
        if self.headers.in_block() && f.kind != CONTINUATION {
            return Err(protocol(
                PROTOCOL_ERROR,
                "a header block interleaved with other frames",
            ));
        }
        match f.kind {
            SETTINGS if f.flags & ACK == 0 => {
                let s = parse_settings(f)?;
                self.windows.apply(&s)?;
                put_frame(out, SETTINGS, ACK, 0, &[]);
                self.flush_pending(out);
            }
            WINDOW_UPDATE => {
                let inc = window_increment(f)?;
                self.windows.update(f.stream, inc)?;
                self.flush_pending(out);
            }
            PING if f.flags & ACK == 0 && f.payload.len() == 8 => {
                put_frame(out, PING, ACK, 0, &f.payload);
            }
            GOAWAY => return Ok(false),
            RST_STREAM => {
                self.requests.remove(&f.stream);
                self.windows.streams.remove(&f.stream);
                self.pending.retain(|p| p.stream != f.stream);
            }
            HEADERS | CONTINUATION => {
                let new = f.kind == HEADERS && !self.requests.contains_key(&f.stream);
                if new {
                    if f.stream.is_multiple_of(2) || f.stream <= self.last_stream {
                        return Err(protocol(
                            PROTOCOL_ERROR,
                            format!("a new stream {} out of order", f.stream),
                        ));
                    }
                    self.last_stream = f.stream;
                }
                let Some((stream, fields, end)) = self.headers.on_frame(f)? else {
                    return Ok(true);
                };
                if !self.requests.contains_key(&stream) {
                    if self.requests.len() >= MAX_STREAMS as usize {
                        let mut p = Vec::new();
                        p.extend_from_slice(&REFUSED_STREAM.to_be_bytes());
                        put_frame(out, RST_STREAM, 0, stream, &p);
                        return Ok(true);
                    }
                    let mut req = Request {
                        window: self.window,
                        ..Request::default()
                    };
                    req.refused = check_request(&fields);
                    self.requests.insert(stream, req);
                    let initial = self.windows.initial;
                    self.windows.streams.insert(stream, initial);
                }
                if end {
                    self.complete(stream, out);
                }
            }
            DATA => {
                self.recv.take(f.payload.len())?;
                let data = unpad(f)?;
                let Some(req) = self.requests.get_mut(&f.stream) else {
                    // A stream we reset or never saw: its bytes still count for the
                    // connection (taken above).
                    self.recv.give_back(out);
                    return Ok(true);
                };
                req.window -= f.payload.len() as i64;
                if req.window < 0 {
                    return Err(protocol(
                        FLOW_CONTROL_ERROR,
                        "the peer sent past a stream's flow-control window",
                    ));
                }
                if req.body.len() + data.len() > self.max_body + GRPC_PREFIX {
                    return Err(protocol(
                        PROTOCOL_ERROR,
                        format!(
                            "a Push body over {} bytes (raise max_push_body if the peer's \
                             http_max_payload_size is larger)",
                            self.max_body
                        ),
                    ));
                }
                req.body.extend_from_slice(data);
                self.recv.give_back(out);
                if f.flags & END_STREAM != 0 {
                    self.complete(f.stream, out);
                }
            }
            PUSH_PROMISE => {
                return Err(protocol(PROTOCOL_ERROR, "PUSH_PROMISE from a client"));
            }
            _ => {}
        }
        Ok(true)
    }

    /// Answers a request whose stream the peer has ended.
    fn complete(&mut self, stream: u32, out: &mut Vec<u8>) {
        let Some(req) = self.requests.remove(&stream) else {
            return;
        };
        let answer = match req.refused {
            Some(r) => Err(r),
            None => match grpc_unwrap(&req.body) {
                Err(e) => Err((GRPC_INVALID_ARGUMENT, e)),
                Ok(msg) => match decode_push_request(msg) {
                    Ok(push) => Ok(self.handler.on_push(&push)),
                    Err(e) => Err((GRPC_INVALID_ARGUMENT, e.to_string())),
                },
            },
        };
        match answer {
            Ok(resp) => {
                let block =
                    encode_headers(&[(":status", "200"), ("content-type", "application/grpc")]);
                put_frame(out, HEADERS, END_HEADERS, stream, &block);
                let data = grpc_message(|o| resp.encode(o), 16 + resp.error_msg.len());
                self.pending.push_back(Pending { stream, data });
                self.flush_pending(out);
            }
            Err((code, message)) => {
                let code = code.to_string();
                let message: String = message
                    .chars()
                    .filter(char::is_ascii_graphic)
                    .take(200)
                    .collect();
                let block = encode_headers(&[
                    (":status", "200"),
                    ("content-type", "application/grpc"),
                    ("grpc-status", &code),
                    ("grpc-message", &message),
                ]);
                put_frame(out, HEADERS, END_HEADERS | END_STREAM, stream, &block);
                self.windows.streams.remove(&stream);
            }
        }
    }

    /// Sends the responses the peer's windows now admit, in order, each whole (they are a few
    /// bytes), then their trailers.
    fn flush_pending(&mut self, out: &mut Vec<u8>) {
        while let Some(p) = self.pending.front() {
            let n = p.data.len();
            if self.windows.room(p.stream) < n {
                break;
            }
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            self.windows.spend(p.stream, n);
            put_frame(out, DATA, 0, p.stream, &p.data);
            let trailers = encode_headers(&[("grpc-status", "0")]);
            put_frame(out, HEADERS, END_HEADERS | END_STREAM, p.stream, &trailers);
            self.windows.streams.remove(&p.stream);
        }
    }
}

/// Why a request's headers do not name `ReceiverService.Push` over gRPC, if they do not.
fn check_request(fields: &[(Vec<u8>, Vec<u8>)]) -> Option<(i32, String)> {
    let path = field(fields, ":path");
    if path != Some(PUSH_PATH.as_bytes()) {
        return Some((
            GRPC_UNIMPLEMENTED,
            format!("no method {:?} here", text(path)),
        ));
    }
    if field(fields, ":method") != Some(b"POST") {
        return Some((GRPC_UNIMPLEMENTED, "Push takes POST".into()));
    }
    let ct = field(fields, "content-type").unwrap_or_default();
    if !ct.starts_with(b"application/grpc") {
        return Some((
            GRPC_INVALID_ARGUMENT,
            format!("content-type {:?} is not gRPC", text(Some(ct))),
        ));
    }
    None
}

#[cfg(test)]
#[path = "h2_tests.rs"]
mod tests;

/// A client's side of a connection as the fuzz seeds start it: the preface, SETTINGS, then
/// each encoded `PushRequest` on its own stream (HEADERS, then DATA with END_STREAM).
#[cfg(feature = "fuzzing")]
pub(crate) fn client_conversation(requests: &[Vec<u8>]) -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    put_settings(&mut out, &[(SETTINGS_ENABLE_PUSH, 0)]);
    for (i, req) in requests.iter().enumerate() {
        let stream = 1 + 2 * i as u32;
        let block = encode_headers(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", PUSH_PATH),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]);
        put_frame(&mut out, HEADERS, END_HEADERS, stream, &block);
        let body = grpc_message(|o| o.extend_from_slice(req), req.len());
        put_frame(&mut out, DATA, END_STREAM, stream, &body);
    }
    out
}
