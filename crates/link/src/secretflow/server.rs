//! The server half of baidu_std: listens on this party's address, accepts the peer's
//! connections (one with brpc's `single` connection type, several with `pooled`), and answers
//! every `ReceiverService.Push` request on the connection it came on, as soon as the request is
//! stored (yacl's `Channel::OnRequest` fills the OK response before it dispatches).

use super::frame::{FrameError, encode_frame, read_frame};
use super::proto::{METHOD_NAME, PushResponse, RpcMeta, SERVICE_NAME, decode_push_request};
use super::tls::{Tls, TlsFailure, linger_close};
use crate::LinkError;
use crate::tls::HANDSHAKE_TIMEOUT;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// brpc's `ENOSERVICE`: the request names a service this server does not have.
const BRPC_ENOSERVICE: i32 = 1001;
/// brpc's `ENOMETHOD`.
const BRPC_ENOMETHOD: i32 = 1002;
/// brpc's `EREQUEST`: the request does not parse.
const BRPC_EREQUEST: i32 = 1003;
/// More simultaneous connections than any brpc connection type opens (`pooled` opened 6).
const MAX_CONNECTIONS: usize = 32;
/// How often the accept loop looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// What the server hands each request to.
pub(crate) trait PushHandler: Send + Sync + 'static {
    /// Stores one Push and says what to answer.
    fn on_push(&self, req: &super::proto::PushRequest<'_>) -> PushResponse;
    /// A peer connection opened (`true`) or ended (`false`).
    fn on_connection(&self, open: bool);
    /// A connection sent bytes that are not baidu_std; it was closed.
    fn on_bad_frame(&self, reason: String);
    /// A connection's TLS handshake failed (a certificate refused, or no TLS); it was closed.
    fn on_tls_failure(&self, _failure: TlsFailure) {}
    /// Bytes read from and written to a peer connection.
    fn on_traffic(&self, _received: usize, _sent: usize) {}
}

/// The accepted connections still open, so `stop` can close them.
#[derive(Default)]
struct Conns {
    next: u64,
    open: HashMap<u64, TcpStream>,
}

/// A running server; [`RpcServer::stop`] (or drop) closes the port and every connection.
pub(crate) struct RpcServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Conns>>,
    accept: Option<JoinHandle<()>>,
}

impl RpcServer {
    /// Binds `addr` and starts accepting.
    pub(crate) fn start(
        addr: SocketAddr,
        max_body: usize,
        handler: Arc<dyn PushHandler>,
        tls: Option<Arc<Tls>>,
    ) -> Result<RpcServer, LinkError> {
        let bind_err = |source| LinkError::Bind {
            addr: addr.to_string(),
            source,
        };
        let listener = TcpListener::bind(addr).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let bound = listener.local_addr().map_err(bind_err)?;
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Conns::default()));
        let (s, c) = (Arc::clone(&stop), Arc::clone(&conns));
        let accept = std::thread::Builder::new()
            .name("sf-link-accept".into())
            .spawn(move || accept_loop(&listener, &s, &c, max_body, &handler, tls.as_ref()))
            .map_err(bind_err)?;
        Ok(RpcServer {
            addr: bound,
            stop,
            conns,
            accept: Some(accept),
        })
    }

    /// The address it listens on (with the real port when bound to port 0).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes every connection.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        for c in conns.open.values() {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(
    listener: &TcpListener,
    stop: &AtomicBool,
    conns: &Arc<Mutex<Conns>>,
    max_body: usize,
    handler: &Arc<dyn PushHandler>,
    tls: Option<&Arc<Tls>>,
) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                workers.retain(|w| !w.is_finished());
                if workers.len() >= MAX_CONNECTIONS || stream.set_nonblocking(false).is_err() {
                    let _ = stream.shutdown(Shutdown::Both);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let Ok(watch) = stream.try_clone() else {
                    continue;
                };
                let id = {
                    let mut c = conns.lock().unwrap_or_else(PoisonError::into_inner);
                    c.next += 1;
                    let id = c.next;
                    c.open.insert(id, watch);
                    id
                };
                let h = Arc::clone(handler);
                let cs = Arc::clone(conns);
                let tls = tls.cloned();
                handler.on_connection(true);
                match std::thread::Builder::new()
                    .name("sf-link-serve".into())
                    .spawn(move || {
                        serve_connection(stream, max_body, h.as_ref(), tls.as_deref());
                        cs.lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .open
                            .remove(&id);
                        h.on_connection(false);
                    }) {
                    Ok(w) => workers.push(w),
                    Err(_) => handler.on_connection(false),
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                std::thread::sleep(ACCEPT_POLL);
            }
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
    {
        let c = conns.lock().unwrap_or_else(PoisonError::into_inner);
        for s in c.open.values() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
    for w in workers {
        let _ = w.join();
    }
}

/// Runs the TLS handshake if TLS is on, then answers requests until the connection closes.
fn serve_connection(
    mut stream: TcpStream,
    max_body: usize,
    handler: &dyn PushHandler,
    tls: Option<&Tls>,
) {
    match tls {
        None => {
            // A TLS record (handshake, TLS 1.x) where a baidu_std frame should start.
            let mut first = [0u8; 2];
            if let Ok(2) = stream.peek(&mut first)
                && first == [0x16, 0x03]
            {
                handler.on_tls_failure(TlsFailure::Handshake(
                    "the peer started a TLS handshake: TLS is on at the peer (enable_ssl) but \
                     off here"
                        .into(),
                ));
            } else {
                serve_any(&mut stream, max_body, handler);
            }
        }
        Some(tls) => match tls.accept(&mut stream, HANDSHAKE_TIMEOUT) {
            Ok(conn) => {
                let mut tls_stream = rustls::StreamOwned::new(conn, stream);
                serve_any(&mut tls_stream, max_body, handler);
                stream = tls_stream.sock;
            }
            Err(failure) => {
                // A connection that just closed or stayed silent is not the peer's verdict
                // (a port probe, a peer that gave up); anything else is reported.
                if !matches!(failure, TlsFailure::Io(_)) {
                    handler.on_tls_failure(failure);
                }
                linger_close(&mut stream, Duration::from_secs(1));
                return;
            }
        },
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Answers requests on one connection until it closes, in the protocol its first bytes show:
/// HTTP/2's preface (`h2:grpc`) or baidu_std's `PRPC`.
fn serve_any(stream: &mut (impl Read + Write), max_body: usize, handler: &dyn PushHandler) {
    let mut first = [0u8; 4];
    if stream.read_exact(&mut first).is_err() {
        return;
    }
    let mut s = Prefixed {
        prefix: first,
        at: 0,
        inner: stream,
    };
    if &first == b"PRI " {
        super::h2::serve(&mut s, max_body, handler);
    } else {
        serve(&mut s, max_body, handler);
    }
}

/// A stream whose first bytes were already read: they come back first.
struct Prefixed<'a, S> {
    prefix: [u8; 4],
    at: usize,
    inner: &'a mut S,
}

impl<S: Read> Read for Prefixed<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at < self.prefix.len() {
            let n = buf.len().min(self.prefix.len() - self.at);
            buf[..n].copy_from_slice(&self.prefix[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.inner.read(buf)
    }
}

impl<S: Write> Write for Prefixed<'_, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Answers baidu_std requests on one connection until it closes.
fn serve(stream: &mut (impl Read + Write), max_body: usize, handler: &dyn PushHandler) {
    loop {
        let frame = match read_frame(stream, max_body) {
            Ok(Some(f)) => {
                handler.on_traffic(f.wire_len(), 0);
                f
            }
            Ok(None) | Err(FrameError::Io(_)) => break,
            Err(e) => {
                handler.on_bad_frame(e.to_string());
                break;
            }
        };
        let corr = frame.meta.correlation_id;
        let Some(req_meta) = frame.meta.request.as_ref() else {
            handler.on_bad_frame("a baidu_std response arrived on a server connection".into());
            break;
        };
        let (code, text, response) = if req_meta.service_name != SERVICE_NAME {
            let t = format!("no service {:?} here", req_meta.service_name);
            (BRPC_ENOSERVICE, t, None)
        } else if req_meta.method_name != METHOD_NAME {
            let t = format!("no method {:?} in {SERVICE_NAME}", req_meta.method_name);
            (BRPC_ENOMETHOD, t, None)
        } else {
            match decode_push_request(frame.payload()) {
                Ok(req) => (0, String::new(), Some(handler.on_push(&req))),
                Err(e) => (BRPC_EREQUEST, e.to_string(), None),
            }
        };
        let out = encode_frame(&RpcMeta::response(corr, code, &text), 16, |o| {
            if let Some(r) = &response {
                r.encode(o);
            }
        });
        if stream
            .write_all(&out)
            .and_then(|()| stream.flush())
            .is_err()
        {
            break;
        }
        handler.on_traffic(0, out.len());
    }
}
