//! The TCP link. Of the two parties, the one whose id sorts first listens on its own address and
//! the other connects to it, retrying until the connect deadline — so either may start first.
//! After the connection is up, both exchange a greeting (see [`crate::greet`]).
//!
//! A reader thread drains the socket into a channel. That keeps both directions flowing when both
//! parties send large batches at once (no TCP deadlock), and lets `recv` wait with a timeout. What
//! it may hold is bounded (see [`crate::budget`]), and a frame's buffer grows as its bytes arrive
//! ([`read_payload`]), so neither a flood nor a large announced length costs unbounded memory.
//!
//! With [`TcpOptions::tls`] set, the greeting says so and is followed by a mutual TLS handshake
//! (see [`crate::tls`]); frames, timeouts, counters and aborts are the same on top of it. Byte
//! counters count frame bytes, not TLS record overhead.

use crate::budget::{Budget, Credit, INBOX_BOUND, READ_CHUNK};
use crate::cancel::Cancel;
use crate::frame::{HEADER_LEN, Kind, MAX_FRAME_LEN, OVERHEAD, TRAILER_LEN, header, trailer};
use crate::greet::{GreetError, accept_peer, greet_as_connector};
use crate::heartbeat::{Liveness, MIN_SILENCE_TIMEOUT, Touching, Watch, heartbeat_interval};
use crate::inbox::{Inbox, Incoming};
use crate::patience::{Patience, PatientSocket};
use crate::shape::{LinkShape, Shaper, delay_line, sleep_until};
use crate::tls::{Shared, TlsConfig, TlsContext, TlsReader, TlsWriter};
use crate::{Link, LinkError, LinkStats, truncate_reason};
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Where the two parties are and how long to wait.
#[derive(Clone, Debug)]
pub struct TcpOptions {
    /// This party's id.
    pub self_id: String,
    /// This party's address (`HOST:PORT`): where it listens if it is the listener.
    pub self_addr: String,
    /// The peer's id.
    pub peer_id: String,
    /// The peer's address.
    pub peer_addr: String,
    /// How long to wait for the peer to show up.
    pub connect_timeout: Duration,
    /// How long `recv` waits for a message.
    pub recv_timeout: Duration,
    /// How long the peer may send nothing at all, not even a heartbeat, before it counts as
    /// dead ([`crate::DEFAULT_SILENCE_TIMEOUT`] unless configured, at least
    /// [`crate::heartbeat::MIN_SILENCE_TIMEOUT`]; see [`crate::heartbeat`]).
    pub silence_timeout: Duration,
    /// Mutual TLS with these files; `None` for plain TCP.
    pub tls: Option<TlsConfig>,
    /// A simulated WAN on our receive side (benchmarks); `None` for the real network only.
    pub shape: Option<LinkShape>,
}

/// Where frames go: the socket, or the TLS connection over it.
enum Out {
    Plain(PatientSocket),
    Tls(TlsWriter),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Out::Plain(s) => s.write(buf),
            Out::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::Plain(s) => s.flush(),
            Out::Tls(t) => t.flush(),
        }
    }
}

/// Frames out, from the protocol thread and the heartbeat thread.
struct FrameWriter {
    out: BufWriter<Out>,
    sent: LinkStats,
    peer: String,
    /// How long a blocked write waited, and whether the peer was still heard from meanwhile.
    patience: Arc<Patience>,
    /// Credited with every frame sent, so the reader may hold that much more (see
    /// [`crate::budget`]).
    budget: Arc<Budget>,
}

impl FrameWriter {
    fn write_frame(&mut self, kind: Kind, payload: &[u8]) -> Result<(), LinkError> {
        if payload.len() > MAX_FRAME_LEN {
            return Err(LinkError::MessageTooLarge { len: payload.len() });
        }
        let (peer, patience) = (&self.peer, &self.patience);
        let failed = |source: std::io::Error| match source.kind() {
            // A write blocked past its patience (see `crate::patience`): a peer still heard
            // from took none of our data for the receive timeout; one not heard from is gone.
            ErrorKind::WouldBlock | ErrorKind::TimedOut if patience.peer_heard() => {
                LinkError::RecvTimeout {
                    peer: peer.clone(),
                    waited: patience.most(),
                }
            }
            ErrorKind::WouldBlock | ErrorKind::TimedOut => LinkError::PeerSilent {
                peer: peer.clone(),
                silent_for: patience.silence(),
            },
            _ => LinkError::Io {
                peer: peer.clone(),
                source,
            },
        };
        let head = header(kind, payload.len());
        self.out.write_all(&head).map_err(failed)?;
        self.out.write_all(payload).map_err(failed)?;
        self.out
            .write_all(&trailer(&head, payload))
            .map_err(failed)?;
        self.out.flush().map_err(failed)?;
        if kind != Kind::Heartbeat {
            self.sent.bytes_sent += (OVERHEAD + payload.len()) as u64;
            self.budget.credit(OVERHEAD + payload.len());
        }
        Ok(())
    }
}

fn lock(writer: &Mutex<FrameWriter>) -> MutexGuard<'_, FrameWriter> {
    // A panicking writer leaves at worst a torn frame, which the peer reports as malformed.
    writer.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A link over one TCP connection.
pub struct TcpLink {
    writer: Arc<Mutex<FrameWriter>>,
    /// For shutting the connection down on drop.
    socket: TcpStream,
    inbox: Inbox,
    /// Dropping it stops the heartbeat thread.
    _stop_heartbeats: Sender<()>,
    /// Ended on drop, so the last flush does not wait for a slow reader.
    patience: Arc<Patience>,
}

impl TcpLink {
    /// Whether this party listens (its id sorts before the peer's) rather than connects.
    pub fn is_listener(opts: &TcpOptions) -> bool {
        Self::listens(&opts.self_id, &opts.peer_id)
    }

    /// Whether the party `self_id` listens (and is the TLS server) when its peer is `peer_id`.
    pub fn listens(self_id: &str, peer_id: &str) -> bool {
        self_id < peer_id
    }

    /// Connects to the peer (or waits for it), greets, and starts the reader and heartbeat
    /// threads.
    ///
    /// # Errors
    /// Bad addresses, a port in use, no peer before the deadline, or a wrong peer; with TLS also
    /// unusable certificate files and a refused handshake (on either side).
    pub fn establish(opts: &TcpOptions) -> Result<TcpLink, LinkError> {
        Self::establish_with_cancel(opts, &Cancel::new())
    }

    /// [`TcpLink::establish`] that gives up with [`LinkError::Cancelled`] once `cancel` is
    /// cancelled, and registers the connection with it so a cancel wakes a blocked `recv`.
    ///
    /// # Errors
    /// As [`TcpLink::establish`], plus [`LinkError::Cancelled`].
    ///
    /// The listener also dials the peer's address meanwhile ([`TcpLink::establish_listening`]),
    /// so it reaches a peer that always listens: a serving sender (`blindjoin serve`).
    pub fn establish_with_cancel(opts: &TcpOptions, cancel: &Cancel) -> Result<TcpLink, LinkError> {
        if Self::is_listener(opts) {
            Self::establish_listening(opts, cancel)
        } else {
            Self::establish_as(opts, false, cancel)
        }
    }

    /// The listener's side of a two-party link: it listens on `self_addr` and at the same time
    /// dials `peer_addr`, and the first connection to greet as the peer is the link. A peer
    /// run by `blindjoin run` never listens when its id sorts second, so the dial finds a closed
    /// port until that peer's own connection arrives; a serving sender (`blindjoin serve`)
    /// always listens and answers every client, so a client reaches it whatever the order of
    /// their ids, with no setting of its own. On a dialled connection this party is the TLS
    /// client (presenting the same certificate). A blindjoin party at the peer's address with
    /// other ids is the same configuration error as on the listening side.
    ///
    /// # Errors
    /// As [`TcpLink::establish`].
    fn establish_listening(opts: &TcpOptions, cancel: &Cancel) -> Result<TcpLink, LinkError> {
        check_distinct_ids(opts)?;
        let deadline = Instant::now() + opts.connect_timeout;
        let (tls_listen, tls_dial) = match &opts.tls {
            Some(cfg) => (
                Some(TlsContext::load(cfg, &opts.peer_id, true)?),
                Some(TlsContext::load(cfg, &opts.peer_id, false)?),
            ),
            None => (None, None),
        };
        let listener = bind(opts)?;
        // Cancelled when the caller cancels, when the dial wins, or when the wait ends.
        let local = Cancel::new();
        let done = Arc::new(AtomicBool::new(false));
        let dialled: Arc<Mutex<Option<Result<TcpStream, LinkError>>>> = Arc::default();
        spawn_forwarder(cancel, &local, &done)?;
        {
            let (o, local, dialled) = (opts.clone(), local.clone(), Arc::clone(&dialled));
            std::thread::Builder::new()
                .name("link-dial".into())
                .spawn(move || match connect_peer(&o, deadline, &local) {
                    Ok(stream) => {
                        *lock_slot(&dialled) = Some(Ok(stream));
                        local.cancel("the peer answered at its address");
                    }
                    // A blindjoin party there with other ids: the configuration error.
                    Err(e @ LinkError::WrongPeer(_)) => {
                        *lock_slot(&dialled) = Some(Err(e));
                        local.cancel("the party at the peer's address has other ids");
                    }
                    // Nothing (or no blindjoin party) there: the listening side reports.
                    Err(_) => {}
                })
                .map_err(|e| io(opts, e))?;
        }
        let accepted = accept_peer(&listener, opts, deadline, &local);
        done.store(true, Ordering::SeqCst);
        local.cancel("the link is up");
        let credit = Credit::new();
        match accepted {
            Ok(stream) => Self::from_greeted(stream, opts, tls_listen, cancel, credit),
            Err(LinkError::Cancelled { reason }) => match lock_slot(&dialled).take() {
                Some(Ok(stream)) => Self::from_greeted(stream, opts, tls_dial, cancel, credit),
                Some(Err(e)) => Err(e),
                None => Err(LinkError::Cancelled {
                    reason: if cancel.is_cancelled() {
                        cancel.reason()
                    } else {
                        reason
                    },
                }),
            },
            Err(e) => Err(e),
        }
    }

    /// [`TcpLink::establish_with_cancel`] with the side given: `listener` listens on
    /// `self_addr` (and is the TLS server), the other connects. Both ends must agree; the
    /// three-party links ([`crate::establish_three`]) choose it by a rule of their own.
    ///
    /// # Errors
    /// As [`TcpLink::establish_with_cancel`].
    pub fn establish_as(
        opts: &TcpOptions,
        listener: bool,
        cancel: &Cancel,
    ) -> Result<TcpLink, LinkError> {
        Self::establish_crediting(opts, listener, cancel, Credit::new())
    }

    /// [`TcpLink::establish_as`] whose reader is credited with `credit`: the bytes this party
    /// sends on all the links that share it (see [`crate::budget`]).
    pub(crate) fn establish_crediting(
        opts: &TcpOptions,
        listener: bool,
        cancel: &Cancel,
        credit: Arc<Credit>,
    ) -> Result<TcpLink, LinkError> {
        check_distinct_ids(opts)?;
        let deadline = Instant::now() + opts.connect_timeout;
        // Certificate problems are reported before any waiting for the peer.
        let tls = match &opts.tls {
            Some(cfg) => Some(TlsContext::load(cfg, &opts.peer_id, listener)?),
            None => None,
        };
        let stream = if listener {
            let listener = bind(opts)?;
            accept_peer(&listener, opts, deadline, cancel)?
        } else {
            connect_peer(opts, deadline, cancel)?
        };
        Self::from_greeted(stream, opts, tls, cancel, credit)
    }

    /// The link on a connection whose greeting matched `opts`: the TLS handshake (with `tls`,
    /// loaded from `opts.tls`), then the reader and heartbeat threads.
    pub(crate) fn from_greeted(
        mut stream: TcpStream,
        opts: &TcpOptions,
        tls: Option<TlsContext>,
        cancel: &Cancel,
        credit: Arc<Credit>,
    ) -> Result<TcpLink, LinkError> {
        stream.set_nodelay(true).map_err(|e| io(opts, e))?;
        let reader = stream.try_clone().map_err(|e| io(opts, e))?;
        let socket = stream.try_clone().map_err(|e| io(opts, e))?;
        cancel.watch(socket.try_clone().map_err(|e| io(opts, e))?);
        let (tx, rx) = channel();
        let peer = opts.peer_id.clone();
        let live = Liveness::new();
        let budget = Budget::new(INBOX_BOUND, credit);
        let silence = opts.silence_timeout.max(MIN_SILENCE_TIMEOUT);
        let patience = Patience::new(live.clone(), silence, opts.recv_timeout);
        let patient = |stream| PatientSocket {
            stream,
            patience: Arc::clone(&patience),
        };
        let frames = FrameSource {
            live: live.clone(),
            shape: opts.shape,
            budget: Arc::clone(&budget),
        };
        let out = match tls {
            None => {
                std::thread::Builder::new()
                    .name(format!("link-reader-{peer}"))
                    .spawn(move || read_frames(reader, &peer, &tx, frames))
                    .map_err(|e| io(opts, e))?;
                Out::Plain(patient(stream))
            }
            Some(ctx) => {
                let conn = ctx.handshake(&mut stream)?;
                let shared = Shared::new(conn, patient(stream));
                let tls_reader = TlsReader::new(shared.clone(), reader);
                std::thread::Builder::new()
                    .name(format!("link-reader-{peer}"))
                    .spawn(move || read_frames(tls_reader, &peer, &tx, frames))
                    .map_err(|e| io(opts, e))?;
                Out::Tls(TlsWriter { shared })
            }
        };
        // Set after the TLS handshake, which has deadlines of its own.
        socket
            .set_write_timeout(Some(silence))
            .map_err(|e| io(opts, e))?;
        let writer = Arc::new(Mutex::new(FrameWriter {
            out: BufWriter::with_capacity(1 << 16, out),
            sent: LinkStats::default(),
            peer: opts.peer_id.clone(),
            patience: Arc::clone(&patience),
            budget: Arc::clone(&budget),
        }));
        let stop_heartbeats = start_heartbeats(&writer, &opts.peer_id, heartbeat_interval(silence))
            .map_err(|e| io(opts, e))?;
        let watch = Watch {
            live,
            limit: silence,
        };
        Ok(TcpLink {
            writer,
            socket,
            inbox: Inbox::new(
                rx,
                opts.recv_timeout,
                &opts.peer_id,
                Some(watch),
                Some(budget),
            ),
            _stop_heartbeats: stop_heartbeats,
            patience,
        })
    }

    fn write_frame(&mut self, kind: Kind, payload: &[u8]) -> Result<(), LinkError> {
        lock(&self.writer).write_frame(kind, payload)
    }

    /// `(bytes the reader holds now, the most it ever held)`: the test hook for the bound.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (u64, u64) {
        self.inbox.budget.as_ref().map_or((0, 0), |b| b.held())
    }

    /// Whether the reader is holding frames back (waiting for room): a test hook.
    #[cfg(test)]
    pub(crate) fn holding(&self) -> bool {
        self.inbox
            .watch
            .as_ref()
            .is_some_and(|w| w.live.is_holding())
    }

    /// The reader's budget, which the reader thread holds while it runs: a test hook.
    #[cfg(test)]
    pub(crate) fn budget(&self) -> Option<Arc<Budget>> {
        self.inbox.budget.clone()
    }
}

/// Sends a heartbeat every [`heartbeat_interval`] until the returned sender is dropped (or the
/// connection fails, which the protocol thread will notice on its own).
fn start_heartbeats(
    writer: &Arc<Mutex<FrameWriter>>,
    peer: &str,
    every: Duration,
) -> std::io::Result<Sender<()>> {
    let (stop, stopped) = channel::<()>();
    let writer = Arc::clone(writer);
    std::thread::Builder::new()
        .name(format!("link-heartbeat-{peer}"))
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                if lock(&writer).write_frame(Kind::Heartbeat, &[]).is_err() {
                    return;
                }
            }
        })?;
    Ok(stop)
}

impl Drop for TcpLink {
    fn drop(&mut self) {
        self.patience.end();
        let mut w = lock(&self.writer);
        let _ = w.out.flush();
        if let Out::Tls(t) = w.out.get_mut() {
            t.close_notify();
        }
        // Wakes the reader thread so it exits.
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

impl Link for TcpLink {
    fn send(&mut self, payload: &[u8]) -> Result<(), LinkError> {
        let mut w = lock(&self.writer);
        if let Err(e) = w.write_frame(Kind::Data, payload) {
            drop(w);
            // A peer that aborted and hung up makes our write fail: report its reason instead.
            return Err(match e {
                LinkError::Io { .. } => self.inbox.abort_after_failure().unwrap_or(e),
                e => e,
            });
        }
        w.sent.messages_sent += 1;
        Ok(())
    }

    fn recv(&mut self) -> Result<Vec<u8>, LinkError> {
        self.inbox.recv()
    }

    fn abort(&mut self, reason: &str) {
        let _ = self.write_frame(Kind::Abort, truncate_reason(reason).as_bytes());
    }

    fn close(&mut self) -> Result<(), LinkError> {
        // If the peer closed first and is gone, our close frame may not be deliverable.
        let sent = self.write_frame(Kind::Close, &[]);
        self.inbox.await_close()?;
        if self.inbox.peer_closed { Ok(()) } else { sent }
    }

    fn stats(&self) -> LinkStats {
        let sent = lock(&self.writer).sent;
        LinkStats {
            bytes_sent: sent.bytes_sent,
            messages_sent: sent.messages_sent,
            ..self.inbox.stats
        }
    }

    fn peer_id(&self) -> &str {
        &self.inbox.peer
    }
}

pub(crate) fn io(opts: &TcpOptions, source: std::io::Error) -> LinkError {
    LinkError::Io {
        peer: opts.peer_id.clone(),
        source,
    }
}

/// Two parties with one id cannot tell each other apart.
fn check_distinct_ids(opts: &TcpOptions) -> Result<(), LinkError> {
    if opts.self_id == opts.peer_id {
        return Err(LinkError::WrongPeer(format!(
            "both parties have the id {:?}; give each party its own id in link_config.parties",
            opts.self_id
        )));
    }
    Ok(())
}

fn lock_slot<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How often the forwarder looks at the caller's cancel while a link comes up.
const FORWARD_POLL: Duration = Duration::from_millis(5);

/// Cancels `local` when `outer` is cancelled, until `done`.
fn spawn_forwarder(
    outer: &Cancel,
    local: &Cancel,
    done: &Arc<AtomicBool>,
) -> Result<(), LinkError> {
    let (outer, local, done) = (outer.clone(), local.clone(), Arc::clone(done));
    std::thread::Builder::new()
        .name("link-cancel".into())
        .spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if outer.is_cancelled() {
                    local.cancel(&outer.reason());
                    return;
                }
                std::thread::sleep(FORWARD_POLL);
            }
        })
        .map(|_| ())
        .map_err(|e| LinkError::Io {
            peer: String::new(),
            source: e,
        })
}

/// `Err(Cancelled)` once `cancel` is cancelled: the connect loops poll it between attempts.
pub(crate) fn cancelled(cancel: &Cancel) -> Result<(), LinkError> {
    if cancel.is_cancelled() {
        return Err(LinkError::Cancelled {
            reason: cancel.reason(),
        });
    }
    Ok(())
}

fn resolve(party: &str, addr: &str) -> Result<Vec<SocketAddr>, LinkError> {
    let bad = |reason: String| LinkError::BadAddress {
        party: party.to_string(),
        addr: addr.to_string(),
        reason,
    };
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(bad("it resolves to no address".to_string()));
    }
    Ok(addrs)
}

pub(crate) fn bind(opts: &TcpOptions) -> Result<TcpListener, LinkError> {
    let addrs = resolve(&opts.self_id, &opts.self_addr)?;
    let listener = TcpListener::bind(&addrs[..]).map_err(|source| LinkError::Bind {
        addr: opts.self_addr.clone(),
        source,
    })?;
    listener.set_nonblocking(true).map_err(|e| io(opts, e))?;
    Ok(listener)
}

pub(crate) fn connect_peer(
    opts: &TcpOptions,
    deadline: Instant,
    cancel: &Cancel,
) -> Result<TcpStream, LinkError> {
    let addrs = resolve(&opts.peer_id, &opts.peer_addr)?;
    let mut last = String::from("no attempt finished");
    let mut attempt = 0u32;
    loop {
        cancelled(cancel)?;
        for addr in &addrs {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(50));
            match TcpStream::connect_timeout(addr, left.min(Duration::from_secs(2))) {
                Ok(stream) => match greet_as_connector(stream, opts) {
                    Ok(s) => return Ok(s),
                    Err(GreetError::NotBlindjoin(why)) => last = why,
                    Err(GreetError::Fatal(e)) => return Err(e),
                },
                Err(e) => last = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            return Err(LinkError::ConnectTimeout {
                peer: opts.peer_id.clone(),
                addr: opts.peer_addr.clone(),
                waited: opts.connect_timeout,
                last,
            });
        }
        std::thread::sleep(retry_delay(attempt));
        attempt = attempt.saturating_add(1);
    }
}

/// The connector's pause after its `attempt`-th refused round (0-based): 5 ms, doubling to
/// 200 ms. The listener is usually up within milliseconds of the connector's first try (both
/// are started together), so a fixed 200 ms pause cost most runs that lost the race up to
/// 200 ms of waiting; a peer started minutes later is still polled only five times a second.
fn retry_delay(attempt: u32) -> Duration {
    Duration::from_millis(5u64 << attempt.min(6)).min(Duration::from_millis(200))
}

/// What the reader thread reports to besides the inbox: signs of life, the simulated WAN, and
/// the bytes it holds.
pub(crate) struct FrameSource {
    pub(crate) live: Arc<Liveness>,
    pub(crate) shape: Option<LinkShape>,
    pub(crate) budget: Arc<Budget>,
}

/// Reads a payload of `len` bytes, growing its buffer as the bytes arrive: [`READ_CHUNK`] at a
/// time, the capacity doubling (so copying stays linear) but never past `len`. A peer that
/// announces `len` and sends `k` bytes costs at most `max(2k, k + READ_CHUNK)`, not `len`. Every
/// allocation is charged to `budget`; on failure the partial buffer's charge is released.
fn read_payload(r: &mut impl Read, len: usize, budget: &Budget) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    while buf.len() < len {
        let have = buf.len();
        let step = (len - have).min(READ_CHUNK);
        if buf.capacity() < have + step {
            let before = buf.capacity();
            let target = (2 * have).max(have + step).min(len);
            buf.reserve_exact(target - have);
            budget.charge(buf.capacity() - before);
        }
        buf.resize(have + step, 0);
        if let Err(e) = r.read_exact(&mut buf[have..]) {
            budget.release(buf.capacity());
            return Err(e);
        }
    }
    Ok(buf)
}

/// Feeds the bytes of a skipped heartbeat payload to its CRC.
struct CrcSink(crc32fast::Hasher);

impl Write for CrcSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where the reader thread hands what it read: the inbox, or (shaped) the pipe's delay line in
/// front of it (see [`crate::shape`]).
struct Outlet<'a> {
    inbox: &'a Sender<Incoming>,
    pipe: Option<(Shaper, Sender<(Instant, Incoming)>)>,
}

impl Outlet<'_> {
    /// Passes `item` on, due at `due` if shaped; gives it back if nobody takes it any more.
    fn pass(&self, item: Incoming, due: Instant) -> Result<(), Incoming> {
        match &self.pipe {
            None => self.inbox.send(item).map_err(|e| e.0),
            Some((_, line)) => line.send((due, item)).map_err(|e| e.0.1),
        }
    }
}

/// The reader thread: frames in, until EOF, an error, or the receiver is dropped.
pub(crate) fn read_frames(
    stream: impl Read,
    peer: &str,
    tx: &Sender<Incoming>,
    source: FrameSource,
) {
    let (live, budget) = (source.live, source.budget);
    let touching = Touching {
        inner: stream,
        live: live.clone(),
    };
    let mut r = BufReader::with_capacity(1 << 18, touching);
    let mut out = Outlet {
        inbox: tx,
        pipe: None,
    };
    if let Some(shape) = source.shape {
        let held = Arc::clone(&budget);
        let line = delay_line(format!("link-pipe-{peer}"), tx.clone(), move |item| {
            if let Ok((_, payload)) = item {
                held.release(payload.capacity());
            }
        });
        match line {
            Ok(line) => out.pipe = Some((Shaper::new(shape), line)),
            Err(source) => {
                let _ = tx.send(Err(LinkError::Io {
                    peer: peer.to_string(),
                    source,
                }));
                return;
            }
        }
    }
    loop {
        let mut head = [0u8; HEADER_LEN];
        match r.read_exact(&mut head) {
            Ok(()) => {}
            // EOF or reset between frames: the channel closes and `recv` reports PeerClosed.
            Err(_) => return,
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let bad = |reason: String| {
            Err(LinkError::BadFrame {
                peer: peer.to_string(),
                reason,
            })
        };
        let Some(kind) = Kind::from_byte(head[4]) else {
            let _ = out.pass(
                bad(format!("unknown frame kind {}", head[4])),
                Instant::now(),
            );
            return;
        };
        if len > MAX_FRAME_LEN {
            let _ = out.pass(
                bad(format!(
                    "frame of {len} bytes exceeds the {MAX_FRAME_LEN}-byte limit"
                )),
                Instant::now(),
            );
            return;
        }
        let io_failed = |source| {
            let _ = out.pass(
                Err(LinkError::Io {
                    peer: peer.to_string(),
                    source,
                }),
                Instant::now(),
            );
        };
        let damaged = |got: [u8; TRAILER_LEN], want: [u8; TRAILER_LEN]| {
            bad(format!(
                "a {len}-byte frame arrived damaged (CRC-32 {:08x}, expected {:08x}): bytes \
                 were changed between the peer and us; check the network path, and use TLS \
                 (tls_config) on links you do not control",
                u32::from_le_bytes(got),
                u32::from_le_bytes(want)
            ))
        };
        if kind == Kind::Heartbeat {
            // A sign of life (already recorded by `Touching`), nothing for `recv`: checked
            // and skipped without a buffer or a place in the inbox.
            let mut sink = CrcSink(crc32fast::Hasher::new());
            sink.0.update(&head);
            let skipped = std::io::copy(&mut (&mut r).take(len as u64), &mut sink);
            let mut crc = [0u8; TRAILER_LEN];
            match skipped.and_then(|n| r.read_exact(&mut crc).map(|()| n)) {
                Ok(n) if n == len as u64 => {
                    let want = sink.0.finalize().to_le_bytes();
                    if crc == want {
                        continue;
                    }
                    let _ = out.pass(damaged(crc, want), Instant::now());
                }
                Ok(_) => io_failed(ErrorKind::UnexpectedEof.into()),
                Err(e) => io_failed(e),
            }
            return;
        }
        if !budget.admit(len, &live) {
            return;
        }
        let payload = match read_payload(&mut r, len, &budget) {
            Ok(p) => p,
            Err(e) => return io_failed(e),
        };
        let mut crc = [0u8; TRAILER_LEN];
        if let Err(e) = r.read_exact(&mut crc) {
            budget.release(payload.capacity());
            return io_failed(e);
        }
        let want = trailer(&head, &payload);
        if crc != want {
            budget.release(payload.capacity());
            let _ = out.pass(damaged(crc, want), Instant::now());
            return;
        }
        let mut due = Instant::now();
        if let Some((shaper, _)) = &mut out.pipe {
            // Read nothing more until the pipe has sent this frame; its latency is the delay
            // line's.
            let (sent, delivered) = shaper.stamp(due, OVERHEAD + len);
            live.set_holding(true);
            sleep_until(sent);
            live.set_holding(false);
            due = delivered;
        }
        let cap = payload.capacity();
        if out.pass(Ok((kind, payload)), due).is_err() {
            budget.release(cap);
            return;
        }
    }
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    #[test]
    fn the_connector_retries_soon_then_backs_off_to_200_ms() {
        let ms = |a| retry_delay(a).as_millis();
        assert_eq!(
            (0..8).map(ms).collect::<Vec<_>>(),
            [5, 10, 20, 40, 80, 160, 200, 200]
        );
        assert_eq!(ms(u32::MAX), 200);
    }
}
