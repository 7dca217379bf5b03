//! The client half of baidu_std: one TCP connection to the peer's brpc server (brpc's default
//! `single` connection type), requests pipelined on it, responses matched by correlation id by
//! a reader thread. [`RpcClient::start`] writes a request and [`RpcClient::wait`] waits for its
//! response, so several requests (chunks, ACKs) can be in flight at once.
//!
//! The connection is dialled lazily, on the first request, like brpc's channel; if it breaks it is
//! dialled again on the next request. A broken connection fails every request still waiting on it.

use super::ChannelProtocol;
use super::frame::{FrameError, encode_frame, read_frame};
use super::h2::{self, ClientReader, H2Conn};
use super::proto::{PushRequest, PushResponse, RpcMeta};
use super::tls::{Tls, TlsFailure};
use crate::tls::{Shared, TlsReader, TlsWriter};
use crate::{Cancel, LinkError};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Why a request failed, kept cloneable so one broken connection can fail many waiters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The connection closed or broke (the peer is gone or restarted).
    Closed(String),
    /// The peer answered with an error code.
    Refused { code: i32, message: String },
    /// The peer sent something that is not a valid baidu_std response.
    Malformed(String),
    /// The connection could not be made.
    Dial(String),
    /// TLS failed: a certificate was refused (by either side) or the peer speaks no TLS.
    Tls(TlsFailure),
}

impl Failure {
    pub(crate) fn into_link_error(self, peer: &str) -> LinkError {
        match self {
            Failure::Closed(_) => LinkError::PeerClosed { peer: peer.into() },
            Failure::Refused { code, message } => LinkError::PeerRefused {
                peer: peer.into(),
                code,
                message,
            },
            Failure::Malformed(reason) => LinkError::BadFrame {
                peer: peer.into(),
                reason,
            },
            Failure::Dial(reason) => LinkError::Io {
                peer: peer.into(),
                source: std::io::Error::new(std::io::ErrorKind::NotConnected, reason),
            },
            Failure::Tls(t) => t.into_link_error(peer),
        }
    }

    /// What happened, for error messages.
    pub(crate) fn text(&self) -> String {
        match self {
            Failure::Closed(t) | Failure::Malformed(t) | Failure::Dial(t) => t.clone(),
            Failure::Refused { code, message } => format!("error {code}: {message}"),
            Failure::Tls(t) => t.text(),
        }
    }

    /// Worth trying again after a pause (the connect step and send retries).
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, Failure::Closed(_) | Failure::Dial(_))
    }
}

/// What a request waits on.
type Outcome = Option<Result<(), Failure>>;

#[derive(Default)]
struct Calls {
    /// Requests in flight: correlation id -> (connection generation, outcome).
    waiting: HashMap<u64, (u64, Outcome)>,
}

/// Where requests are written: the socket (or TLS on it) for baidu_std; under h2:grpc the
/// HTTP/2 connection, which the response reader writes on too, and the next stream id.
enum Writer {
    Baidu(Box<dyn Write + Send>),
    H2 { conn: Arc<H2Conn>, next_stream: u32 },
}

/// The last client stream id HTTP/2 allows (odd, below 2^31); past it the link redials.
const LAST_STREAM_ID: u32 = (1 << 31) - 1;

struct Conn {
    out: Writer,
    /// The socket, to shut down.
    stream: TcpStream,
    generation: u64,
}

struct Inner {
    peer: String,
    addr: SocketAddr,
    max_body: usize,
    write_timeout: Duration,
    cancel: Cancel,
    protocol: ChannelProtocol,
    /// TLS on every connection (yacl `enable_ssl`), or plaintext.
    tls: Option<Arc<Tls>>,
    conn: Mutex<Option<Conn>>,
    calls: Mutex<Calls>,
    answered: Condvar,
    next_id: AtomicU64,
    generation: AtomicU64,
    /// When the last connection broke (`None` while one is up or none was ever made).
    lost_at: Mutex<Option<Instant>>,
    /// Bytes written to and read from the peer on both connections (the server counts its own
    /// through [`RpcClient::count`]), for the report.
    sent: AtomicU64,
    received: AtomicU64,
}

/// A baidu_std client for `ReceiverService.Push`.
#[derive(Clone)]
pub(crate) struct RpcClient {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RpcClient {
    /// Adds bytes sent and received to the link's totals.
    pub(crate) fn count(&self, sent: u64, received: u64) {
        self.inner.sent.fetch_add(sent, Ordering::Relaxed);
        self.inner.received.fetch_add(received, Ordering::Relaxed);
    }

    /// (bytes sent, bytes received) so far, TCP payload with baidu_std framing.
    pub(crate) fn traffic(&self) -> (u64, u64) {
        (
            self.inner.sent.load(Ordering::Relaxed),
            self.inner.received.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn new(
        peer: &str,
        addr: SocketAddr,
        max_body: usize,
        write_timeout: Duration,
        cancel: Cancel,
        tls: Option<Arc<Tls>>,
        protocol: ChannelProtocol,
    ) -> RpcClient {
        RpcClient {
            inner: Arc::new(Inner {
                peer: peer.into(),
                addr,
                max_body,
                write_timeout,
                cancel,
                protocol,
                tls,
                conn: Mutex::new(None),
                calls: Mutex::new(Calls::default()),
                answered: Condvar::new(),
                // brpc uses bthread ids here; any distinct value does.
                next_id: AtomicU64::new(1),
                generation: AtomicU64::new(0),
                lost_at: Mutex::new(None),
                sent: AtomicU64::new(0),
                received: AtomicU64::new(0),
            }),
        }
    }

    /// The peer's server address.
    /// Whether requests go inside TLS.
    pub(crate) fn has_tls(&self) -> bool {
        self.inner.tls.is_some()
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// How long the connection has been down after it broke (`None`: up, or never dialled).
    pub(crate) fn down_for(&self) -> Option<Duration> {
        lock(&self.inner.lost_at).map(|t| t.elapsed())
    }

    /// Sends `req` and waits for its response, at most `timeout`.
    pub(crate) fn call(
        &self,
        req: &PushRequest<'_>,
        dial_timeout: Duration,
        timeout: Duration,
    ) -> Result<Result<(), Failure>, LinkError> {
        let id = match self.start(req, dial_timeout) {
            Ok(id) => id,
            Err(f) => return Ok(Err(f)),
        };
        self.wait(id, timeout)
    }

    /// Writes `req` and returns its correlation id without waiting for the response.
    pub(crate) fn start(
        &self,
        req: &PushRequest<'_>,
        dial_timeout: Duration,
    ) -> Result<u64, Failure> {
        let mut conn = lock(&self.inner.conn);
        if conn.is_none() {
            *conn = Some(self.dial(dial_timeout)?);
        }
        let Some(c) = conn.as_mut() else {
            return Err(Failure::Closed("not connected".into()));
        };
        let generation = c.generation;
        let register = |id: u64| {
            lock(&self.inner.calls)
                .waiting
                .insert(id, (generation, None));
        };
        let (id, written) = match &mut c.out {
            Writer::Baidu(out) => {
                let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
                let frame =
                    encode_frame(&RpcMeta::push_request(id), req.encoded_len_bound(), |o| {
                        req.encode(o)
                    });
                register(id);
                (id, out.write_all(&frame).map(|()| frame.len()))
            }
            Writer::H2 {
                conn: h,
                next_stream,
            } => {
                let stream = *next_stream;
                if stream > LAST_STREAM_ID {
                    if let Some(c) = conn.take() {
                        let _ = c.stream.shutdown(Shutdown::Both);
                    }
                    return Err(Failure::Closed(
                        "HTTP/2 stream ids used up; the connection is dialled again".into(),
                    ));
                }
                *next_stream += 2;
                let id = h2_call_id(generation, stream);
                register(id);
                let body = h2::grpc_message(|o| req.encode(o), req.encoded_len_bound());
                let deadline = Instant::now() + self.inner.write_timeout;
                let cancel = &self.inner.cancel;
                (
                    id,
                    h.send(stream, &body, deadline, &|| cancel.is_cancelled()),
                )
            }
        };
        let written = written.map(|n| self.count(n as u64, 0));
        if let Err(e) = written {
            if let Some(c) = conn.take() {
                let _ = c.stream.shutdown(Shutdown::Both);
            }
            drop(conn);
            let mut calls = lock(&self.inner.calls);
            calls.waiting.remove(&id);
            return Err(Failure::Closed(format!("write failed: {e}")));
        }
        Ok(id)
    }

    /// Waits for the response to request `id`. The outer error is local (timeout, cancel); the
    /// inner one is what the request met.
    pub(crate) fn wait(
        &self,
        id: u64,
        timeout: Duration,
    ) -> Result<Result<(), Failure>, LinkError> {
        let deadline = Instant::now() + timeout;
        let mut calls = lock(&self.inner.calls);
        loop {
            if let Some((_, Some(_))) = calls.waiting.get(&id)
                && let Some((_, Some(r))) = calls.waiting.remove(&id)
            {
                return Ok(r);
            }
            if !calls.waiting.contains_key(&id) {
                return Ok(Err(Failure::Closed("request lost".into())));
            }
            if self.inner.cancel.is_cancelled() {
                calls.waiting.remove(&id);
                return Err(LinkError::Cancelled {
                    reason: self.inner.cancel.reason(),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                calls.waiting.remove(&id);
                return Err(LinkError::RpcTimeout {
                    peer: self.inner.peer.clone(),
                    waited: timeout,
                });
            }
            let slice = (deadline - now).min(Duration::from_millis(100));
            calls = self
                .inner
                .answered
                .wait_timeout(calls, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Drops the slots of requests nobody will wait for any more (a send that failed part way).
    pub(crate) fn forget(&self, ids: impl IntoIterator<Item = u64>) {
        let mut calls = lock(&self.inner.calls);
        for id in ids {
            calls.waiting.remove(&id);
        }
    }

    /// Closes the connection; waiting requests fail.
    pub(crate) fn shutdown(&self) {
        if let Some(c) = lock(&self.inner.conn).take() {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }

    fn dial(&self, timeout: Duration) -> Result<Conn, Failure> {
        let mut stream =
            TcpStream::connect_timeout(&self.inner.addr, timeout.max(Duration::from_millis(10)))
                .map_err(|e| {
                    Failure::Dial(format!("cannot connect to {}: {e}", self.inner.addr))
                })?;
        let dial_err = |e: std::io::Error| Failure::Dial(e.to_string());
        stream.set_nodelay(true).map_err(dial_err)?;
        if let Ok(watched) = stream.try_clone() {
            self.inner.cancel.watch(watched);
        }
        let tls = match &self.inner.tls {
            Some(tls) => {
                let t = timeout.max(Duration::from_secs(2));
                let conn = tls.connect(&mut stream, t).map_err(|f| {
                    let _ = stream.shutdown(Shutdown::Both);
                    f.into_failure()
                })?;
                Some(conn)
            }
            None => None,
        };
        stream
            .set_write_timeout(Some(self.inner.write_timeout))
            .map_err(dial_err)?;
        let reader_socket = stream.try_clone().map_err(dial_err)?;
        let (out, reader): (Box<dyn Write + Send>, Box<dyn Read + Send>) = match tls {
            Some(conn) => {
                let writer = stream.try_clone().map_err(dial_err)?;
                let shared = Shared::new(conn.into(), writer);
                (
                    Box::new(TlsWriter {
                        shared: Arc::clone(&shared),
                    }),
                    Box::new(TlsReader::new(
                        shared,
                        reader_socket.try_clone().map_err(dial_err)?,
                    )),
                )
            }
            None => (
                Box::new(stream.try_clone().map_err(dial_err)?),
                Box::new(reader_socket.try_clone().map_err(dial_err)?),
            ),
        };
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let out = match self.inner.protocol {
            ChannelProtocol::BaiduStd => Writer::Baidu(out),
            ChannelProtocol::H2Grpc => {
                let (conn, n) =
                    H2Conn::open(out, self.inner.addr.to_string(), self.inner.write_timeout)
                        .map_err(|e| Failure::Closed(format!("HTTP/2 preface: {e}")))?;
                self.count(n as u64, 0);
                Writer::H2 {
                    conn: Arc::new(conn),
                    next_stream: 1,
                }
            }
        };
        *lock(&self.inner.lost_at) = None;
        let inner = Arc::clone(&self.inner);
        let h2 = match &out {
            Writer::H2 { conn, .. } => Some(Arc::clone(conn)),
            Writer::Baidu(_) => None,
        };
        std::thread::Builder::new()
            .name("sf-link-client".into())
            .spawn(move || match h2 {
                None => read_responses(&inner, reader, &reader_socket, generation),
                Some(h2) => read_h2_responses(&inner, reader, &reader_socket, generation, &h2),
            })
            .map_err(|e| Failure::Dial(format!("cannot start the response reader: {e}")))?;
        Ok(Conn {
            out,
            stream,
            generation,
        })
    }
}

fn read_responses(
    inner: &Inner,
    mut stream: Box<dyn Read + Send>,
    socket: &TcpStream,
    generation: u64,
) {
    let ca = inner.tls.as_ref().and_then(|t| t.client_ca());
    let end = loop {
        let frame = match read_frame(&mut stream, inner.max_body) {
            Ok(Some(f)) => {
                inner
                    .received
                    .fetch_add(f.wire_len() as u64, Ordering::Relaxed);
                f
            }
            Ok(None) => break Failure::Closed("the peer closed the connection".into()),
            Err(FrameError::Io(e)) => match TlsFailure::inside(&e, ca) {
                Some(t) => break Failure::Tls(t),
                None => break Failure::Closed(e.to_string()),
            },
            Err(e) => break Failure::Malformed(e.to_string()),
        };
        let Some(meta) = frame.meta.response.as_ref() else {
            break Failure::Malformed("a baidu_std request arrived on a client connection".into());
        };
        let outcome = if meta.error_code != 0 {
            Err(Failure::Refused {
                code: meta.error_code,
                message: meta.error_text.clone(),
            })
        } else {
            match PushResponse::decode(frame.payload()) {
                Ok(r) if r.error_code == 0 => Ok(()),
                Ok(r) => Err(Failure::Refused {
                    code: r.error_code,
                    message: r.error_msg,
                }),
                Err(e) => Err(Failure::Malformed(e.to_string())),
            }
        };
        let id = frame.meta.correlation_id;
        let mut calls = lock(&inner.calls);
        if let Some((_, slot)) = calls.waiting.get_mut(&id) {
            *slot = Some(outcome);
        }
        // A response to a request that already timed out is dropped, as brpc does.
        drop(calls);
        inner.answered.notify_all();
    };
    connection_ended(inner, socket, generation, end);
}

/// A request's id under h2:grpc: its connection's generation and its stream.
fn h2_call_id(generation: u64, stream: u32) -> u64 {
    (generation << 32) | u64::from(stream)
}

/// The response reader under h2:grpc: one frame at a time, each finished stream's outcome to
/// its waiter.
fn read_h2_responses(
    inner: &Inner,
    mut stream: Box<dyn Read + Send>,
    socket: &TcpStream,
    generation: u64,
    h2: &H2Conn,
) {
    let ca = inner.tls.as_ref().and_then(|t| t.client_ca());
    let mut reader = ClientReader::new(inner.max_body);
    let end = loop {
        let step = reader.next(&mut stream, h2);
        inner
            .sent
            .fetch_add(h2.take_control_sent(), Ordering::Relaxed);
        match step {
            Ok(Some((len, done))) => {
                inner.received.fetch_add(len as u64, Ordering::Relaxed);
                if let Some((s, outcome)) = done {
                    let mut calls = lock(&inner.calls);
                    if let Some((_, slot)) = calls.waiting.get_mut(&h2_call_id(generation, s)) {
                        *slot = Some(outcome);
                    }
                    drop(calls);
                    inner.answered.notify_all();
                }
            }
            Ok(None) => break Failure::Closed("the peer closed the connection".into()),
            Err(h2::ReadError::Io(e)) => match TlsFailure::inside(&e, ca) {
                Some(t) => break Failure::Tls(t),
                None => break Failure::Closed(e.to_string()),
            },
            Err(h2::ReadError::Protocol(_, what)) => {
                break Failure::Malformed(format!("HTTP/2: {what}"));
            }
        }
    };
    h2.close();
    connection_ended(inner, socket, generation, end);
}

/// Fails the requests still waiting on a connection that ended, and marks it gone.
fn connection_ended(inner: &Inner, socket: &TcpStream, generation: u64, end: Failure) {
    let _ = socket.shutdown(Shutdown::Both);
    {
        let mut conn = lock(&inner.conn);
        if conn.as_ref().is_some_and(|c| c.generation == generation) {
            *conn = None;
        }
    }
    if inner.generation.load(Ordering::Relaxed) == generation {
        *lock(&inner.lost_at) = Some(Instant::now());
    }
    let mut calls = lock(&inner.calls);
    for (g, slot) in calls.waiting.values_mut() {
        if *g == generation && slot.is_none() {
            *slot = Some(Err(end.clone()));
        }
    }
    drop(calls);
    inner.answered.notify_all();
}
