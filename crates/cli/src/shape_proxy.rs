//! `blindjoin bench-proxy`: a TCP proxy that puts a simulated wide-area link between two
//! programs on 127.0.0.1, for benchmarking a peer system that cannot be shaped in-process
//! (Microsoft APSI's CLI over ZeroMQ) on the same link as ours. The kernel here has no `netem`.
//!
//! Each direction of each connection is one FIFO pipe, the model of `blindjoin-link`'s shaper
//! (`crates/link/src/shape.rs`) applied to byte chunks instead of frames: a chunk of `b_i`
//! bytes read at `a_i` has been sent by the pipe at `e_i = max(a_i, e_{i−1}) + 8·b_i / bandwidth`
//! and is written to the other side at `e_i + latency`. The reader reads on while earlier
//! chunks wait (so latency is paid once per trip, not once per chunk) until [`ProxyConfig::buffer`]
//! bytes are in flight; then it stops reading, the kernel's buffers fill, and the sender blocks,
//! as behind a real bottleneck. A chunk is at most [`CHUNK`] bytes, so the pipe hands data on
//! in pieces of at most 1.3 ms at 100 Mbit/s rather than message by message.
//!
//! An end of stream travels the pipe behind the data (`shutdown(Write)` on the other side: a
//! half-close), a reset or a failed write closes both sides. Connections are independent (a
//! ZeroMQ peer may open several); their bytes and the span from the first byte read to the
//! last byte written are printed as one JSON line each when they end, and in total on Ctrl-C.
//!
//! `--fault cut|stall|corrupt` turns it into a faulty link for the soak tests
//! (`scripts/soak.sh`): once the proxy has read `--fault-at` bytes (over all connections and
//! both directions, in the order it reads them; or an offset drawn from `--fault-seed` below
//! `--fault-within`), it cuts that connection (both sides closed, the bytes before the offset
//! delivered), stalls every connection (nothing more is delivered either way, but the sockets
//! stay open, as a dead route does), or flips one bit of the byte at that offset. It prints one
//! JSON line, `{"fault": ..., "at": ...}`, when it does.

use anyhow::{Context, Result};
use blindjoin_data::LinkShape;
use clap::Args;
use serde::Serialize;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest chunk read at once: 16 KiB, 1.3 ms on the wire at 100 Mbit/s.
pub(crate) const CHUNK: usize = 16 << 10;

/// How long the accept loop sleeps between non-blocking accepts (and so how soon it sees a stop).
const ACCEPT_POLL: Duration = Duration::from_millis(2);

/// How long connecting to the target may take before the client's connection is dropped.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Args)]
pub(crate) struct ProxyArgs {
    /// Where to accept connections, e.g. 127.0.0.1:7000.
    #[arg(long)]
    listen: String,
    /// Where to forward each connection, e.g. 127.0.0.1:7001.
    #[arg(long)]
    to: String,
    /// Bandwidth of each direction of each connection, e.g. 100mbit (omit: unlimited).
    #[arg(long, value_name = "RATE")]
    bandwidth: Option<String>,
    /// One-way latency added to each direction, e.g. 10ms.
    #[arg(long, value_name = "DELAY")]
    latency: Option<String>,
    /// Bytes in flight per direction before the proxy stops reading (back-pressure), in KiB.
    #[arg(long, default_value_t = 4096)]
    buffer_kib: usize,
    /// Inject one fault: cut the connection, stall every connection, or corrupt one byte.
    #[arg(long, value_enum)]
    fault: Option<FaultKind>,
    /// The byte offset of the fault, counted over everything the proxy reads.
    #[arg(
        long,
        value_name = "BYTES",
        requires = "fault",
        conflicts_with = "fault_within"
    )]
    fault_at: Option<u64>,
    /// Draw the offset uniformly below BYTES from --fault-seed instead.
    #[arg(long, value_name = "BYTES", requires = "fault")]
    fault_within: Option<u64>,
    /// Seed for the drawn offset and for the bit a corruption flips (default 0).
    #[arg(long, default_value_t = 0)]
    fault_seed: u64,
}

/// What an injected fault does to the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FaultKind {
    /// Close both sides of the connection the offset falls in.
    Cut,
    /// Deliver nothing more on any connection, keeping the sockets open.
    Stall,
    /// Flip one bit of the byte at the offset.
    Corrupt,
}

/// One fault to inject: what, where, and (for a corruption) which bits to flip.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FaultPlan {
    pub kind: FaultKind,
    /// Offset in the bytes the proxy reads, over all connections and directions.
    pub at: u64,
    /// XOR mask for [`FaultKind::Corrupt`]; never 0.
    pub mask: u8,
}

impl FaultPlan {
    /// The plan for `kind` at `at`, or at an offset drawn below `within` from `seed`.
    pub(crate) fn new(kind: FaultKind, at: Option<u64>, within: Option<u64>, seed: u64) -> Self {
        let r = splitmix64(seed);
        let at = at.unwrap_or_else(|| within.map_or(0, |w| r % w.max(1)));
        let mask = 1u8 << (splitmix64(r) % 8);
        FaultPlan { kind, at, mask }
    }
}

/// One step of SplitMix64: a seeded, well-mixed draw.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The proxy's fault state: bytes read so far and whether the stall has begun.
struct Faults {
    plan: Option<FaultPlan>,
    read: AtomicU64,
    stalled: AtomicBool,
    /// Called once with the plan and the connection when the fault fires.
    fired: Box<dyn Fn(FaultPlan, u64) + Send + Sync>,
}

/// What the reader does with a chunk after [`Faults::on_read`].
enum Verdict {
    Forward,
    /// Forward the first bytes, then cut the connection.
    CutAfter(usize),
    /// Forward the first bytes; the link is stalled from here on.
    StallAfter(usize),
    /// The link is stalled: drop the chunk.
    Drop,
}

impl Faults {
    fn on_read(&self, buf: &mut [u8], conn: u64) -> Verdict {
        if self.stalled.load(Ordering::Relaxed) {
            return Verdict::Drop;
        }
        let Some(plan) = self.plan else {
            return Verdict::Forward;
        };
        let before = self.read.fetch_add(buf.len() as u64, Ordering::Relaxed);
        if plan.at < before || plan.at - before >= buf.len() as u64 {
            return Verdict::Forward;
        }
        let i = (plan.at - before) as usize;
        (self.fired)(plan, conn);
        match plan.kind {
            FaultKind::Corrupt => {
                buf[i] ^= plan.mask;
                Verdict::Forward
            }
            FaultKind::Cut => Verdict::CutAfter(i),
            FaultKind::Stall => {
                self.stalled.store(true, Ordering::Relaxed);
                Verdict::StallAfter(i)
            }
        }
    }
}

/// What the proxy does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProxyConfig {
    /// The link; `bits_per_second == 0` is unlimited.
    pub shape: LinkShape,
    /// Bytes in flight per direction (read, not yet written) before reading stops.
    pub buffer: usize,
    /// A fault to inject, if any.
    pub fault: Option<FaultPlan>,
}

/// Bytes and times of one connection, or of all of them.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub(crate) struct ConnStats {
    /// The connection's number (from 1); in the totals, how many reached the target.
    pub conn: u64,
    /// Bytes from the connecting client to the target.
    pub client_to_server_bytes: u64,
    /// Bytes from the target back to the client.
    pub server_to_client_bytes: u64,
    /// Seconds since the proxy started: first byte read, last byte written (0 if none).
    pub first_byte_s: f64,
    pub last_byte_s: f64,
}

/// Counters shared by a connection's threads (and the proxy's totals).
#[derive(Default)]
struct Counters {
    /// The connection to the target was made.
    connected: AtomicBool,
    up: AtomicU64,
    down: AtomicU64,
    /// Microseconds since the proxy's start, plus one (0: not yet).
    first_us: AtomicU64,
    last_us: AtomicU64,
}

impl Counters {
    fn read_at(&self, epoch: Instant) {
        let us = epoch.elapsed().as_micros() as u64 + 1;
        let _ = self
            .first_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                (f == 0 || us < f).then_some(us)
            });
    }

    fn wrote(&self, epoch: Instant, up: bool, n: usize) {
        let us = epoch.elapsed().as_micros() as u64 + 1;
        self.last_us.fetch_max(us, Ordering::Relaxed);
        let c = if up { &self.up } else { &self.down };
        c.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn stats(&self, conn: u64) -> ConnStats {
        let s = |us: u64| us.saturating_sub(1) as f64 / 1e6;
        ConnStats {
            conn,
            client_to_server_bytes: self.up.load(Ordering::Relaxed),
            server_to_client_bytes: self.down.load(Ordering::Relaxed),
            first_byte_s: s(self.first_us.load(Ordering::Relaxed)),
            last_byte_s: s(self.last_us.load(Ordering::Relaxed)),
        }
    }

    fn add(&self, other: &Counters) {
        self.up
            .fetch_add(other.up.load(Ordering::Relaxed), Ordering::Relaxed);
        self.down
            .fetch_add(other.down.load(Ordering::Relaxed), Ordering::Relaxed);
        let f = other.first_us.load(Ordering::Relaxed);
        if f != 0 {
            let _ = self
                .first_us
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| {
                    (x == 0 || f < x).then_some(f)
                });
        }
        self.last_us
            .fetch_max(other.last_us.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// What travels one direction's pipe.
enum Piece {
    Data(Vec<u8>),
    /// The sender closed its side cleanly (a half-close).
    End,
    /// The sender's side failed or was reset.
    Reset,
}

/// One direction's chunks in flight, each with the time it is due on the other side.
struct Pipe {
    state: Mutex<PipeState>,
    changed: Condvar,
    buffer: usize,
}

#[derive(Default)]
struct PipeState {
    queue: VecDeque<(Instant, Piece)>,
    bytes: usize,
    /// The writing side is gone: the reader should stop.
    closed: bool,
}

impl Pipe {
    fn lock(&self) -> MutexGuard<'_, PipeState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a piece, waiting while the pipe is full. `false`: the writer is gone.
    fn push(&self, due: Instant, piece: Piece) -> bool {
        let n = match &piece {
            Piece::Data(d) => d.len(),
            _ => 0,
        };
        let mut s = self.lock();
        while !s.closed && s.bytes > 0 && s.bytes + n > self.buffer {
            s = self
                .changed
                .wait_timeout(s, Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if s.closed {
            return false;
        }
        s.bytes += n;
        s.queue.push_back((due, piece));
        self.changed.notify_all();
        true
    }

    /// The next piece, waiting for one.
    fn pop(&self) -> (Instant, Piece) {
        let mut s = self.lock();
        loop {
            if let Some((due, piece)) = s.queue.pop_front() {
                if let Piece::Data(d) = &piece {
                    s.bytes -= d.len();
                }
                self.changed.notify_all();
                return (due, piece);
            }
            s = self.changed.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.queue.clear();
        s.bytes = 0;
        self.changed.notify_all();
    }
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// Reads `src` into `pipe`, stamping each chunk with its delivery time.
fn read_side(
    mut src: TcpStream,
    pipe: &Pipe,
    shape: LinkShape,
    epoch: Instant,
    c: &Counters,
    faults: &Faults,
    conn: u64,
) {
    let mut wire_free: Option<Instant> = None;
    let mut stamp = |bytes: usize| {
        let now = Instant::now();
        let tx = if shape.bits_per_second == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(bytes as f64 * 8.0 / shape.bits_per_second as f64)
        };
        let done = wire_free.map_or(now, |w| w.max(now)) + tx;
        wire_free = Some(done);
        done + shape.latency
    };
    loop {
        let mut buf = vec![0u8; CHUNK];
        let piece = match src.read(&mut buf) {
            // A stalled link never passes an end on: the other side must notice the silence.
            Ok(0) | Err(_) if faults.stalled.load(Ordering::Relaxed) => return,
            Ok(0) => Piece::End,
            Ok(n) => {
                c.read_at(epoch);
                buf.truncate(n);
                match faults.on_read(&mut buf, conn) {
                    Verdict::Forward => Piece::Data(buf),
                    Verdict::Drop => continue,
                    Verdict::StallAfter(keep) => {
                        buf.truncate(keep);
                        if keep > 0 && !pipe.push(stamp(keep), Piece::Data(buf)) {
                            return;
                        }
                        continue;
                    }
                    Verdict::CutAfter(keep) => {
                        buf.truncate(keep);
                        let due = stamp(keep);
                        if keep > 0 && !pipe.push(due, Piece::Data(buf)) {
                            return;
                        }
                        let _ = pipe.push(due, Piece::Reset);
                        return;
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => Piece::Reset,
        };
        let due = match &piece {
            Piece::Data(d) => stamp(d.len()),
            _ => stamp(0),
        };
        let last = !matches!(piece, Piece::Data(_));
        if !pipe.push(due, piece) || last {
            return;
        }
    }
}

/// Writes what comes out of `pipe` to `dst` when it is due; `src` is the other end, closed if
/// `dst` fails so the sender learns of it.
fn write_side(
    mut dst: TcpStream,
    src: &TcpStream,
    pipe: &Pipe,
    epoch: Instant,
    up: bool,
    c: &Counters,
) {
    loop {
        let (due, piece) = pipe.pop();
        sleep_until(due);
        match piece {
            Piece::Data(d) => {
                if dst.write_all(&d).is_err() {
                    pipe.close();
                    let _ = src.shutdown(Shutdown::Both);
                    let _ = dst.shutdown(Shutdown::Both);
                    return;
                }
                c.wrote(epoch, up, d.len());
            }
            Piece::End => {
                let _ = dst.shutdown(Shutdown::Write);
                return;
            }
            Piece::Reset => {
                let _ = dst.shutdown(Shutdown::Both);
                let _ = src.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

/// Shapes one direction, `src` → `dst`, on two threads.
fn direction(
    src: &TcpStream,
    dst: &TcpStream,
    cfg: ProxyConfig,
    epoch: Instant,
    up: bool,
    c: &Arc<Counters>,
    (faults, conn): (&Arc<Faults>, u64),
) -> std::io::Result<[JoinHandle<()>; 2]> {
    let pipe = Arc::new(Pipe {
        state: Mutex::new(PipeState::default()),
        changed: Condvar::new(),
        buffer: cfg.buffer.max(CHUNK),
    });
    let (r, w, s2) = (src.try_clone()?, dst.try_clone()?, src.try_clone()?);
    let (p1, c1, f1) = (Arc::clone(&pipe), Arc::clone(c), Arc::clone(faults));
    let reader = std::thread::Builder::new()
        .name("proxy-read".into())
        .spawn(move || read_side(r, &p1, cfg.shape, epoch, &c1, &f1, conn))?;
    let c2 = Arc::clone(c);
    let writer = std::thread::Builder::new()
        .name("proxy-write".into())
        .spawn(move || write_side(w, &s2, &pipe, epoch, up, &c2))?;
    Ok([reader, writer])
}

/// Serves one accepted connection until both directions have ended.
fn serve_conn(
    client: TcpStream,
    to: &[SocketAddr],
    cfg: ProxyConfig,
    epoch: Instant,
    c: &Arc<Counters>,
    faults: &Arc<Faults>,
    conn: u64,
) -> Result<()> {
    let server = to
        .iter()
        .find_map(|a| TcpStream::connect_timeout(a, CONNECT_TIMEOUT).ok())
        .context("connecting to the target")?;
    c.connected.store(true, Ordering::Relaxed);
    for s in [&client, &server] {
        s.set_nodelay(true)?;
    }
    let mut threads = Vec::with_capacity(4);
    threads.extend(direction(
        &client,
        &server,
        cfg,
        epoch,
        true,
        c,
        (faults, conn),
    )?);
    threads.extend(direction(
        &server,
        &client,
        cfg,
        epoch,
        false,
        c,
        (faults, conn),
    )?);
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

/// A running proxy.
pub(crate) struct Proxy {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<ConnStats>>,
}

impl Proxy {
    /// Stops accepting and returns the totals so far (connections still open are counted as
    /// they stand).
    pub(crate) fn stop(self) -> Result<ConnStats> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the proxy's accept thread failed"))?
    }
}

/// Starts a proxy on `listen` forwarding to `to`. `report`: called with each connection's
/// figures when it ends.
#[cfg(test)]
pub(crate) fn start(
    listen: &str,
    to: &str,
    cfg: ProxyConfig,
    report: impl Fn(&ConnStats) + Send + Sync + 'static,
) -> Result<Proxy> {
    start_with_faults(listen, to, cfg, report, |_, _| {})
}

/// [`start`], calling `fired` with the plan and the connection's number when
/// [`ProxyConfig::fault`] fires.
pub(crate) fn start_with_faults(
    listen: &str,
    to: &str,
    cfg: ProxyConfig,
    report: impl Fn(&ConnStats) + Send + Sync + 'static,
    fired: impl Fn(FaultPlan, u64) + Send + Sync + 'static,
) -> Result<Proxy> {
    let faults = Arc::new(Faults {
        plan: cfg.fault,
        read: AtomicU64::new(0),
        stalled: AtomicBool::new(false),
        fired: Box::new(fired),
    });
    let to: Vec<SocketAddr> = to
        .to_socket_addrs()
        .with_context(|| format!("--to {to}"))?
        .collect();
    anyhow::ensure!(!to.is_empty(), "--to resolves to no address");
    let listener = TcpListener::bind(listen).with_context(|| format!("listening on {listen}"))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let report = Arc::new(report);
    let thread = std::thread::Builder::new()
        .name("proxy-accept".into())
        .spawn(move || -> Result<ConnStats> {
            let epoch = Instant::now();
            let mut conns: Vec<Arc<Counters>> = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                let client = match listener.accept() {
                    Ok((s, _)) => s,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(ACCEPT_POLL);
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e).context("accepting"),
                };
                client.set_nonblocking(false)?;
                let id = conns.len() as u64 + 1;
                let c = Arc::new(Counters::default());
                conns.push(Arc::clone(&c));
                let (to, report) = (to.clone(), Arc::clone(&report));
                let faults = Arc::clone(&faults);
                std::thread::Builder::new()
                    .name(format!("proxy-conn-{id}"))
                    .spawn(move || {
                        if let Err(e) = serve_conn(client, &to, cfg, epoch, &c, &faults, id) {
                            eprintln!("bench-proxy: connection {id}: {e:#}");
                        }
                        report(&c.stats(id));
                    })?;
            }
            let all = Counters::default();
            for c in &conns {
                all.add(c);
            }
            let reached = conns
                .iter()
                .filter(|c| c.connected.load(Ordering::Relaxed))
                .count();
            Ok(all.stats(reached as u64))
        })?;
    Ok(Proxy { addr, stop, thread })
}

fn print_json<T: Serialize>(v: &T) {
    if let Ok(line) = serde_json::to_string(v) {
        println!("{line}");
    }
}

/// `blindjoin bench-proxy`: runs until Ctrl-C (or SIGTERM), then prints the totals.
pub(crate) fn run(a: ProxyArgs) -> Result<()> {
    let shape = LinkShape::parse(a.bandwidth.as_deref(), a.latency.as_deref())
        .map_err(|e| anyhow::anyhow!(e).context(crate::UserError))?
        .unwrap_or(LinkShape {
            bits_per_second: 0,
            latency: Duration::ZERO,
        });
    let fault = a
        .fault
        .map(|k| FaultPlan::new(k, a.fault_at, a.fault_within, a.fault_seed));
    let cfg = ProxyConfig {
        shape,
        buffer: a.buffer_kib.saturating_mul(1024),
        fault,
    };
    #[derive(Serialize)]
    struct Fired {
        fault: FaultKind,
        at: u64,
        conn: u64,
    }
    let proxy = start_with_faults(&a.listen, &a.to, cfg, print_json::<ConnStats>, |p, conn| {
        print_json(&Fired {
            fault: p.kind,
            at: p.at,
            conn,
        })
    })?;
    #[derive(Serialize)]
    struct Listening<'a> {
        listening: String,
        to: &'a str,
        bits_per_second: u64,
        latency_us: u128,
    }
    print_json(&Listening {
        listening: proxy.addr.to_string(),
        to: &a.to,
        bits_per_second: shape.bits_per_second,
        latency_us: shape.latency.as_micros(),
    });
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
    let _ = rx.recv();
    #[derive(Serialize)]
    struct Total {
        total: ConnStats,
    }
    print_json(&Total {
        total: proxy.stop()?,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic test bytes (xorshift64).
    fn payload(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn timed(s: &TcpStream) {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    }

    /// A target that, per connection, reads the client's bytes up to its half-close, then
    /// answers with its own payload and closes: what it got is sent back on `got`.
    fn target(conns: usize) -> (SocketAddr, std::sync::mpsc::Receiver<(u64, Vec<u8>)>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..conns {
                let (mut s, _) = l.accept().unwrap();
                let tx = tx.clone();
                std::thread::spawn(move || {
                    timed(&s);
                    let mut seed = [0u8; 8];
                    s.read_exact(&mut seed).unwrap();
                    let mut got = seed.to_vec();
                    s.read_to_end(&mut got).unwrap();
                    let seed = u64::from_le_bytes(seed);
                    s.write_all(&payload(seed ^ 0xabcd, 200_000 + seed as usize))
                        .unwrap();
                    drop(s);
                    tx.send((seed, got)).unwrap();
                });
            }
        });
        (addr, rx)
    }

    fn collect() -> (
        Arc<Mutex<Vec<ConnStats>>>,
        impl Fn(&ConnStats) + Send + Sync + 'static,
    ) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = Arc::clone(&seen);
        (seen, move |c: &ConnStats| {
            s2.lock().unwrap().push(c.clone())
        })
    }

    #[test]
    fn bytes_cross_intact_both_ways_on_several_connections_with_half_close() {
        let conns = 4u64;
        let (to, got) = target(conns as usize);
        let shape = LinkShape::parse(Some("1gbit"), Some("1ms"))
            .unwrap()
            .unwrap();
        let cfg = ProxyConfig {
            shape,
            buffer: 64 << 10,
            fault: None,
        };
        let (seen, report) = collect();
        let proxy = start("127.0.0.1:0", &to.to_string(), cfg, report).unwrap();
        let addr = proxy.addr;
        let clients: Vec<_> = (1..=conns)
            .map(|seed| {
                std::thread::spawn(move || {
                    let mut s = TcpStream::connect(addr).unwrap();
                    timed(&s);
                    let mut sent = seed.to_le_bytes().to_vec();
                    sent.extend(payload(seed, 300_000 + 1000 * seed as usize));
                    s.write_all(&sent).unwrap();
                    // The half-close must reach the target, which answers only after it.
                    s.shutdown(Shutdown::Write).unwrap();
                    let mut back = Vec::new();
                    s.read_to_end(&mut back).unwrap();
                    assert_eq!(back, payload(seed ^ 0xabcd, 200_000 + seed as usize));
                    (seed, sent)
                })
            })
            .collect();
        let mut sent: Vec<(u64, Vec<u8>)> =
            clients.into_iter().map(|c| c.join().unwrap()).collect();
        let mut received: Vec<(u64, Vec<u8>)> = (0..conns)
            .map(|_| got.recv_timeout(Duration::from_secs(60)).unwrap())
            .collect();
        sent.sort();
        received.sort();
        assert_eq!(sent, received);
        // Every connection reports its bytes once both directions have ended.
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.lock().unwrap().len() < conns as usize && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let total = proxy.stop().unwrap();
        let up: u64 = sent.iter().map(|(_, s)| s.len() as u64).sum();
        let down: u64 = (1..=conns).map(|s| 200_000 + s).sum();
        assert_eq!(
            (
                total.conn,
                total.client_to_server_bytes,
                total.server_to_client_bytes
            ),
            (conns, up, down)
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), conns as usize);
        assert_eq!(
            seen.iter().map(|c| c.client_to_server_bytes).sum::<u64>(),
            up
        );
        assert!(seen.iter().all(|c| c.last_byte_s >= c.first_byte_s));
    }

    /// 2 MB at 10 Mbit/s and 5 ms take at least 1.6 s + 5 ms to cross (a lower bound only).
    #[test]
    fn a_transfer_takes_at_least_its_bytes_time() {
        let (to, got) = target(1);
        let shape = LinkShape::parse(Some("10mbit"), Some("5ms"))
            .unwrap()
            .unwrap();
        let cfg = ProxyConfig {
            shape,
            buffer: 4 << 20,
            fault: None,
        };
        let proxy = start("127.0.0.1:0", &to.to_string(), cfg, |_| {}).unwrap();
        let mut s = TcpStream::connect(proxy.addr).unwrap();
        timed(&s);
        let mut sent = 0u64.to_le_bytes().to_vec();
        sent.extend(payload(9, 2_000_000 - 8));
        let t = Instant::now();
        s.write_all(&sent).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let (_, arrived) = got.recv_timeout(Duration::from_secs(60)).unwrap();
        let took = t.elapsed();
        assert_eq!(arrived, sent);
        let floor = Duration::from_secs_f64(2e6 * 8.0 / 1e7) + Duration::from_millis(5);
        assert!(took >= floor, "{took:?} < {floor:?}");
        let mut back = Vec::new();
        s.read_to_end(&mut back).unwrap();
        assert_eq!(back.len(), 200_000);
        proxy.stop().unwrap();
    }

    #[test]
    fn a_refused_target_closes_the_client() {
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let cfg = ProxyConfig {
            shape: LinkShape {
                bits_per_second: 0,
                latency: Duration::ZERO,
            },
            buffer: 1 << 20,
            fault: None,
        };
        let proxy = start("127.0.0.1:0", &free.to_string(), cfg, |_| {}).unwrap();
        let mut s = TcpStream::connect(proxy.addr).unwrap();
        timed(&s);
        let mut buf = [0u8; 1];
        assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
        assert_eq!(proxy.stop().unwrap().conn, 0);
    }

    /// A proxy with `kind` at byte `at` in front of a target that echoes what it reads.
    fn faulty_echo(kind: FaultKind, at: u64) -> (Proxy, Arc<Mutex<Vec<u64>>>, Arc<AtomicU64>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let got = Arc::new(AtomicU64::new(0));
        let got2 = Arc::clone(&got);
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            timed(&s);
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                got2.fetch_add(n as u64, Ordering::Relaxed);
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
        let cfg = ProxyConfig {
            shape: LinkShape {
                bits_per_second: 0,
                latency: Duration::ZERO,
            },
            buffer: 1 << 20,
            fault: Some(FaultPlan::new(kind, Some(at), None, 7)),
        };
        let fired = Arc::new(Mutex::new(Vec::new()));
        let f2 = Arc::clone(&fired);
        let proxy = start_with_faults(
            "127.0.0.1:0",
            &to.to_string(),
            cfg,
            |_| {},
            move |p, _| f2.lock().unwrap().push(p.at),
        )
        .unwrap();
        (proxy, fired, got)
    }

    /// Sends `sent` in one write and reads the echo until the proxy closes, or for `quiet`.
    fn echo_of(addr: SocketAddr, sent: &[u8], quiet: Duration) -> (Vec<u8>, bool) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(quiet)).unwrap();
        s.write_all(sent).unwrap();
        let mut back = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return (back, true),
                Ok(n) => back.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return (back, false);
                }
                Err(_) => return (back, true),
            }
        }
    }

    #[test]
    fn a_corruption_flips_one_bit_of_the_byte_at_its_offset() {
        let (proxy, fired, _) = faulty_echo(FaultKind::Corrupt, 1000);
        let sent = payload(3, 5000);
        let (back, _) = echo_of(proxy.addr, &sent, Duration::from_millis(500));
        assert_eq!(back.len(), sent.len());
        let diff: Vec<usize> = (0..sent.len()).filter(|&i| back[i] != sent[i]).collect();
        assert_eq!(diff, [1000]);
        assert_eq!((back[1000] ^ sent[1000]).count_ones(), 1);
        assert_eq!(*fired.lock().unwrap(), [1000]);
        proxy.stop().unwrap();
    }

    #[test]
    fn a_cut_delivers_the_bytes_before_it_then_closes() {
        let (proxy, fired, got) = faulty_echo(FaultKind::Cut, 777);
        let sent = payload(4, 5000);
        let (back, closed) = echo_of(proxy.addr, &sent, Duration::from_secs(10));
        assert!(closed);
        // The echo of what got through may or may not beat the close back.
        assert!(back.len() <= 777 && back == sent[..back.len()]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.load(Ordering::Relaxed) < 777 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(got.load(Ordering::Relaxed), 777);
        assert_eq!(*fired.lock().unwrap(), [777]);
        proxy.stop().unwrap();
    }

    #[test]
    fn a_stall_delivers_nothing_more_and_keeps_the_socket_open() {
        let (proxy, fired, got) = faulty_echo(FaultKind::Stall, 300);
        let sent = payload(5, 5000);
        let (back, closed) = echo_of(proxy.addr, &sent, Duration::from_millis(700));
        assert!(!closed, "a stalled link must not close");
        // The target got the bytes before the offset; its echo of them is not delivered.
        assert_eq!(got.load(Ordering::Relaxed), 300);
        assert!(back.is_empty());
        assert_eq!(*fired.lock().unwrap(), [300]);
        proxy.stop().unwrap();
    }

    #[test]
    fn a_drawn_offset_is_below_its_bound_and_fixed_by_the_seed() {
        let a = FaultPlan::new(FaultKind::Cut, None, Some(1000), 42);
        let b = FaultPlan::new(FaultKind::Cut, None, Some(1000), 42);
        assert!(a.at < 1000);
        assert_eq!((a.at, a.mask), (b.at, b.mask));
        assert_eq!(a.mask.count_ones(), 1);
        let offsets: std::collections::HashSet<u64> = (0..50)
            .map(|s| FaultPlan::new(FaultKind::Cut, None, Some(1000), s).at)
            .collect();
        assert!(offsets.len() > 40);
    }
}
