//! Partitioned runs: how a run's buckets split into `P` partitions, each run by its own worker
//! over its own connection (see [`blindjoin_link::worker`] for the connection's greeting).
//!
//! Partition `p` of `P` takes the contiguous buckets `[p·B/P, (p+1)·B/P)` of the run's `B`
//! buckets. Both parties know `B` (it comes from both row counts in the handshake) and `P`
//! (agreed in the run terms), so both cut the same ranges, whatever their own shard counts.
//! Every security parameter stays the whole run's: the bucket count, the padded bucket size
//! and the extra statistical bits for `B` buckets come from the handshake's totals, and each
//! partition's buckets are run with exactly those (a partition is a set of buckets of the one
//! run, never a smaller run with smaller parameters).
//!
//! The partition count is the minimum of the two parties' (so each party's default, chosen
//! from its own machine, works with any peer); cardinality-only and threshold runs are never
//! split, because each partition would have to learn and report its own count, and the
//! per-partition counts reveal how the intersection falls across hash ranges — more than the
//! one total those modes promise.

use crate::error::{ConfigError, DataError};
use crate::pipeline::bucket::{BucketedPsi, RevealCounts};
use crate::pipeline::partition_recovery::{PartitionRecovery, RecoveryAt};
use crate::pipeline::process::{Processor, RunsAt};
use crate::pipeline::spill::{LoadedGroup, SpilledTable};
use crate::session::{self, Connect, Links};
use crate::spec::RunSpec;
use blindjoin_link::wire::WireMessage;
use blindjoin_link::worker::{
    MAX_PARTITIONS, SessionId, WorkerGreeting, WorkerTable, greet_worker,
};
use blindjoin_link::{Cancel, Link, LinkStats, TcpLink, TcpOptions};
use blindjoin_protocols::{
    HandshakeChecked, Hello, NoProgress, ProtocolError, PsiOptions, Reveal, handshake,
};
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The memory one worker may use: a worker holds one bucket's rows, protocol state and
/// output runs at a time, as a one-worker run does; the default partition count keeps
/// `workers × WORKER_MEMORY` within the memory available.
pub const WORKER_MEMORY: u64 = 1 << 30;

/// The buckets partition `p` of `parts` runs, of `buckets` in all.
pub fn buckets_of(p: usize, parts: usize, buckets: usize) -> Range<usize> {
    let parts = parts.max(1);
    let at = |i: usize| (i as u128 * buckets as u128 / parts as u128) as usize;
    at(p)..at(p + 1)
}

/// The partition count both parties use: the smaller of the two asked for (at least 1).
pub fn agreed(ours: u32, theirs: u32) -> u32 {
    ours.min(theirs).max(1)
}

/// Refuses to split a run that reveals only the intersection's size (or at most a threshold
/// of its keys), or that first checks `min_intersection`.
///
/// # Errors
/// [`ConfigError::Invalid`] on `blindjoin.workers`, saying why.
pub fn check_splittable(
    workers: usize,
    reveal: Reveal,
    min_intersection: Option<u64>,
) -> Result<(), ConfigError> {
    if workers <= 1 {
        return Ok(());
    }
    let why = match (reveal, min_intersection) {
        (Reveal::Cardinality, _) => "a cardinality-only run",
        (Reveal::UpTo(_), _) => "a threshold run (intersection_threshold)",
        (Reveal::Intersection, Some(_)) => "a run with blindjoin.min_intersection",
        (Reveal::Intersection, None) => return Ok(()),
    };
    Err(ConfigError::Invalid {
        field: "blindjoin.workers (--workers)".into(),
        message: format!(
            "{workers} workers asked for {why}; such runs are never split: each partition \
             would learn its own count, and the per-partition counts reveal how the \
             intersection falls across hash ranges, more than the one total the run \
             promises. Use 1 worker"
        ),
    })
}

/// The default partition count: one per core, no more than the memory available holds at
/// [`WORKER_MEMORY`] each, no more than the configured worker ports (`ports`; none
/// configured: 1, since workers need ports a firewall between the organisations lets
/// through), and at least 1.
pub fn default_workers(cores: usize, mem_available: Option<u64>, ports: usize) -> usize {
    let by_memory = mem_available.map_or(1, |m| (m / WORKER_MEMORY) as usize);
    cores
        .min(by_memory)
        .min(ports)
        .clamp(1, MAX_PARTITIONS as usize)
}

/// `MemAvailable` from the text of `/proc/meminfo`, in bytes.
pub fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The ports the listening side's `parts` workers use: the first `parts` of `range`.
///
/// # Errors
/// The range holds fewer ports than partitions.
pub fn ports_for(range: (u16, u16), parts: usize) -> Result<Vec<u16>, ConfigError> {
    let have = usize::from(range.1 - range.0) + 1;
    if parts > have {
        return Err(ConfigError::Invalid {
            field: "blindjoin.worker_ports (--worker-ports)".into(),
            message: format!(
                "{}-{} holds {have} ports for {parts} workers; widen the range or use fewer \
                 workers",
                range.0, range.1
            ),
        });
    }
    Ok((0..parts).map(|i| range.0 + i as u16).collect())
}

/// Where partition `p`'s worker connects: the main link's options with the worker's port in
/// place of the listening side's main port.
pub fn worker_link(main: &TcpOptions, listener: bool, port: u16) -> TcpOptions {
    let with_port = |addr: &str| match addr.rsplit_once(':') {
        Some((host, _)) => format!("{host}:{port}"),
        None => format!("{addr}:{port}"),
    };
    let mut opts = main.clone();
    if listener {
        opts.self_addr = with_port(&main.self_addr);
    } else {
        opts.peer_addr = with_port(&main.peer_addr);
    }
    opts
}

/// The ports the listening side's workers use: the configured range's first `parts`, or the
/// main link's port + 1, + 2, … when none is configured.
fn listening_ports(
    spec: &RunSpec,
    main: &TcpOptions,
    parts: usize,
) -> Result<Vec<u16>, ConfigError> {
    if let Some(range) = spec.worker_ports {
        return ports_for(range, parts);
    }
    let main_port = main
        .self_addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .unwrap_or(0);
    let first = main_port.checked_add(1).filter(|&p| p > 1);
    match first {
        Some(first) if usize::from(u16::MAX - first) + 1 >= parts => {
            ports_for((first, u16::MAX), parts)
        }
        _ => Err(ConfigError::Invalid {
            field: "blindjoin.worker_ports (--worker-ports)".into(),
            message: format!(
                "no room for {parts} worker ports after the main link's address {}; configure \
                 a range",
                main.self_addr
            ),
        }),
    }
}

/// The coordinators' exchange over the main link: the listening side makes the session id and
/// picks its workers' ports, and sends them; the other side reads and checks them. Returns the
/// session and each partition's link options.
///
/// # Errors
/// Link errors; a table for another partition count; no ports for the workers.
pub(crate) fn exchange_endpoints(
    link: &mut dyn Link,
    spec: &RunSpec,
    main: &TcpOptions,
    parts: usize,
) -> Result<(SessionId, Vec<TcpOptions>), DataError> {
    let listener = TcpLink::is_listener(main);
    let table = if listener {
        let ports = listening_ports(spec, main, parts)?;
        let mut session = [0u8; 16];
        blindjoin_crypto::random_bytes(&mut session).map_err(ProtocolError::from)?;
        let table = WorkerTable { session, ports };
        link.send(&table.encode()).map_err(ProtocolError::from)?;
        table
    } else {
        let bytes = link.recv().map_err(ProtocolError::from)?;
        let table = WorkerTable::decode(&bytes).map_err(ProtocolError::from)?;
        if table.ports.len() != parts {
            return Err(DataError::Protocol(ProtocolError::PeerMisbehaved(format!(
                "the peer's worker table has {} endpoints for {parts} agreed partitions",
                table.ports.len()
            ))));
        }
        table
    };
    let links = table
        .ports
        .iter()
        .map(|&port| worker_link(main, listener, port))
        .collect();
    Ok((table.session, links))
}

/// The table's units, shared by the workers: each loads a unit once and keeps it while some
/// partition still has buckets in it, so a unit that spans two partitions is read once.
pub(crate) struct SharedUnits<'t> {
    inner: Mutex<UnitsInner<'t>>,
    /// Buckets per unit.
    per: usize,
    b: usize,
}

struct UnitsInner<'t> {
    table: &'t mut SpilledTable,
    loaded: HashMap<usize, (Arc<LoadedGroup>, usize)>,
    /// Per unit, the partitions with buckets in it.
    users: Vec<usize>,
}

impl<'t> SharedUnits<'t> {
    /// The units of `table` for `b` buckets run in `parts` partitions.
    pub(crate) fn new(table: &'t mut SpilledTable, b: usize, parts: usize) -> Self {
        let m = b.min(table.shards()).max(1);
        let per = (b / m).max(1);
        let mut users = vec![0usize; m];
        for p in 0..parts {
            let r = buckets_of(p, parts, b);
            if r.is_empty() {
                continue;
            }
            for u in r.start / per..=(r.end - 1) / per {
                if let Some(n) = users.get_mut(u) {
                    *n += 1;
                }
            }
        }
        SharedUnits {
            inner: Mutex::new(UnitsInner {
                table,
                loaded: HashMap::new(),
                users,
            }),
            per,
            b,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, UnitsInner<'t>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The unit holding bucket `k`.
    fn unit_of(&self, k: usize) -> usize {
        k / self.per
    }

    fn get(&self, unit: usize) -> Result<Arc<LoadedGroup>, DataError> {
        let mut inner = self.lock();
        if let Some((g, _)) = inner.loaded.get(&unit) {
            return Ok(Arc::clone(g));
        }
        let g = Arc::new(inner.table.load_unit(unit, self.b)?);
        let users = inner.users.get(unit).copied().unwrap_or(1);
        inner.loaded.insert(unit, (Arc::clone(&g), users));
        Ok(g)
    }

    /// A partition is done with `unit`: the last one frees it. A partition that resumes past
    /// a unit (its buckets there were checkpointed) releases it without loading it, so the
    /// partitions still to use it free it when they are done.
    fn release(&self, unit: usize) {
        let mut inner = self.lock();
        let last = match inner.loaded.get_mut(&unit) {
            Some((_, n)) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            None => {
                if let Some(n) = inner.users.get_mut(unit) {
                    *n = n.saturating_sub(1);
                }
                false
            }
        };
        if last {
            inner.loaded.remove(&unit);
        }
    }
}

/// What partition `p` of a run needs besides its rows: the run's handshake and options (the
/// whole run's parameters), its connection, and its greeting.
pub(crate) struct PartitionJob<'a> {
    pub spec: &'a RunSpec,
    pub hs: &'a HandshakeChecked,
    pub opts: &'a PsiOptions,
    pub link: TcpOptions,
    pub listener: bool,
    pub greeting: WorkerGreeting,
    /// Where the partition's runs go (`None`: in memory).
    pub runs_dir: Option<std::path::PathBuf>,
    /// `check_hash_digest` found the key sets equal.
    pub all_match: bool,
    /// With recovery: where the partition keeps its checkpoint and runs (they then live
    /// there, not in `runs_dir`).
    pub recovery: Option<RecoveryAt>,
}

/// What a partition's worker did.
pub(crate) struct PartitionDone<'a> {
    /// Its processor, for [`Processor::merged`].
    pub work: Processor<'a>,
    /// Its connection's traffic.
    pub stats: LinkStats,
    /// Buckets not run again because both parties' checkpoints had them.
    pub resumed: usize,
}

/// Runs one partition (of this process's coordinator) over its own worker link: the peer's
/// worker must announce the same run as its coordinator did.
///
/// # Errors
/// Link, protocol, checkpoint and run-file errors; a connection refused by the greeting.
pub(crate) fn run_partition<'a>(
    job: PartitionJob<'a>,
    units: &SharedUnits<'_>,
    cancel: &Cancel,
) -> Result<PartitionDone<'a>, DataError> {
    let hello = job.hs.ours().clone();
    let (opts, listener, greeting) = (job.link.clone(), job.listener, job.greeting);
    in_worker_session(
        opts,
        listener,
        greeting,
        hello,
        cancel,
        &job.spec.input,
        |link, hs| {
            if hs.theirs() != job.hs.theirs() {
                return Err(DataError::Protocol(ProtocolError::PeerMisbehaved(
                    "the peer's worker announced another run than its coordinator did (the worker \
                 link's handshake differs from the main link's)"
                        .into(),
                )));
            }
            partition_on(&job, units, link)
        },
    )
}

/// Runs `body` on a partition's worker link in a [`session`](crate::session) (its abort and
/// cancel policy): connects it, checks the greeting and runs the handshake again with `hello`
/// (the main link's), so every worker link is bound to the run's session and attempt and
/// re-checks the run's parameters, whichever process it runs in.
///
/// # Errors
/// Link errors; a refused greeting; a handshake mismatch; `body`'s error.
pub(crate) fn in_worker_session<T>(
    opts: TcpOptions,
    listener: bool,
    greeting: WorkerGreeting,
    hello: Hello,
    cancel: &Cancel,
    path: &Path,
    body: impl FnOnce(&mut TcpLink, &HandshakeChecked) -> Result<T, DataError>,
) -> Result<T, DataError> {
    let connect = Connect::with(
        opts.peer_id.clone(),
        opts.peer_addr.clone(),
        opts.connect_timeout,
        move |cancel: &Cancel| connect_worker(&opts, listener, &greeting, &hello, cancel),
    );
    session::run(Some(connect), cancel, path, |s| {
        let WorkerLink(link, hs) = s.link()?;
        body(link, hs)
    })
}

/// Stands in for this party's worker of a partition that failed (its process killed, its node
/// lost) before its worker link was up, so that the peer's worker of the partition stops at
/// once instead of waiting out its connect timeout for a connection that will never come: takes
/// the dead worker's end of the link (`opts`, listening or connecting as it would), greets as
/// it would (`greeting`: the same session, partition and attempt, so no other run's or try's
/// worker is touched), and aborts the link with `why`. The peer's worker then fails with the
/// link error [`blindjoin_link::LinkError::PeerAborted`], a failed partition like any other, and
/// both coordinators retry it.
///
/// Runs until it has aborted the peer's worker or `cancel` fires: the coordinator cancels it
/// once the peer's coordinator has reported its round, since every worker of the peer has
/// ended by then (one that had connected to ours saw its connection close when ours died).
///
/// # Errors
/// The link could not be taken over (a port still held, the peer's worker already gone, the
/// cancel); a refused greeting. None of them matters to the run: the peer's worker has ended,
/// or ends on its own timeout.
pub(crate) fn stand_in(
    opts: &TcpOptions,
    listener: bool,
    greeting: &WorkerGreeting,
    why: &str,
    cancel: &Cancel,
) -> Result<(), DataError> {
    let mut link = TcpLink::establish_as(opts, listener, cancel)?;
    greet_worker(&mut link, greeting)?;
    link.abort(why);
    Ok(())
}

/// Runs `job`'s buckets on its connected worker link and closes it.
///
/// # Errors
/// As [`run_partition`].
pub(crate) fn partition_on<'a>(
    job: &PartitionJob<'a>,
    units: &SharedUnits<'_>,
    link: &mut TcpLink,
) -> Result<PartitionDone<'a>, DataError> {
    let p = job.greeting.partition as usize;
    let parts = job.greeting.partitions as usize;
    let (work, resumed) = partition_buckets(job, units, link, p, parts)?;
    link.close()?;
    Ok(PartitionDone {
        work,
        stats: link.stats(),
        resumed,
    })
}

/// A partition's worker link and the handshake run on it.
pub(crate) struct WorkerLink(TcpLink, HandshakeChecked);

impl Links for WorkerLink {
    fn abort_all(&mut self, why: &str, link_failed: bool) {
        self.0.abort_all(why, link_failed);
    }
}

/// Connects partition `greeting.partition`'s worker link, checks the greeting, and runs the
/// handshake on it again with `hello` (the main link's): every worker link is bound to the
/// run's session and attempt, and re-checks the run's parameters, whichever process it
/// runs in.
///
/// # Errors
/// Link errors; a refused greeting; a handshake mismatch.
fn connect_worker(
    opts: &TcpOptions,
    listener: bool,
    greeting: &WorkerGreeting,
    hello: &Hello,
    cancel: &Cancel,
) -> Result<WorkerLink, DataError> {
    let mut link = TcpLink::establish_as(opts, listener, cancel)?;
    greet_worker(&mut link, greeting)?;
    let hs = handshake(&mut link, hello.clone())?;
    Ok(WorkerLink(link, hs))
}

fn partition_buckets<'a>(
    job: &PartitionJob<'a>,
    units: &SharedUnits<'_>,
    link: &mut TcpLink,
    p: usize,
    parts: usize,
) -> Result<(Processor<'a>, usize), DataError> {
    let mut psi = BucketedPsi::new(job.hs, job.opts, job.spec.bucket_size)?;
    let b = psi.buckets();
    let range = buckets_of(p, parts, b);
    psi.resume_at(range.start, 0, RevealCounts::default())?;
    let (mut work, mut recovery) = match &job.recovery {
        Some(at) => {
            let rec = PartitionRecovery::open(at, p, parts, b)?;
            let state = rec.agree(link, range.clone())?;
            let work = Processor::new(job.spec, psi, RunsAt::Recovery(rec.dir(), &state))?;
            (work, Some(rec))
        }
        None => {
            let at = match &job.runs_dir {
                Some(dir) => RunsAt::Partition(dir, p),
                None => RunsAt::Memory,
            };
            (Processor::new(job.spec, psi, at)?, None)
        }
    };
    if job.all_match {
        work.all_keys_match();
    }
    let from = work.buckets_done().clamp(range.start, range.end);
    // The units holding only buckets done before the crash are released unloaded.
    if !range.is_empty() {
        let last = units.unit_of(range.end - 1);
        let skipped_to = if from < range.end {
            units.unit_of(from)
        } else {
            last + 1
        };
        for unit in units.unit_of(range.start)..skipped_to {
            units.release(unit);
        }
    }
    let mut k = from;
    while k < range.end {
        let unit = units.unit_of(k);
        let group = units.get(unit)?;
        while k < range.end && units.unit_of(k) == unit {
            let _span = crate::trace::bucket_span("bucket", k);
            work.bucket(link, &group.bucket(k, b), &NoProgress)?;
            if let Some(rec) = recovery.as_mut() {
                rec.advance(work.checkpoint()?)?;
            }
            k += 1;
        }
        drop(group);
        units.release(unit);
    }
    Ok((work, from - range.start))
}

/// Runs all `links.len()` partitions on threads of their own and merges them into one
/// processor; returns it with the workers' traffic added up, and the buckets taken from
/// checkpoints (with `recovery`) rather than run again.
///
/// # Errors
/// The first partition's error (in partition order).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_partitions<'a>(
    spec: &'a RunSpec,
    hs: &'a HandshakeChecked,
    opts: &'a PsiOptions,
    table: &mut SpilledTable,
    session: SessionId,
    links: Vec<TcpOptions>,
    listener: bool,
    all_match: bool,
    recovery: Option<RecoveryAt>,
    cancel: &Cancel,
) -> Result<(Processor<'a>, LinkStats, usize), DataError> {
    let parts = links.len();
    let runs_dir = table.dir().map(Path::to_path_buf);
    let b = BucketedPsi::new(hs, opts, spec.bucket_size)?.buckets();
    let units = SharedUnits::new(table, b, parts);
    let results: Vec<Result<PartitionDone<'a>, DataError>> = std::thread::scope(|s| {
        let handles: Vec<_> = links
            .into_iter()
            .enumerate()
            .map(|(p, link)| {
                let job = PartitionJob {
                    spec,
                    hs,
                    opts,
                    link,
                    listener,
                    greeting: WorkerGreeting {
                        session,
                        partition: p as u32,
                        partitions: parts as u32,
                        attempt: 0,
                    },
                    runs_dir: runs_dir.clone(),
                    all_match,
                    recovery: recovery.clone(),
                };
                let units = &units;
                std::thread::Builder::new()
                    .name(format!("partition-{p}"))
                    .spawn_scoped(s, move || run_partition(job, units, cancel))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(DataError::Protocol(ProtocolError::Config(
                        "internal: a partition's thread panicked".into(),
                    )))
                }),
                Err(source) => Err(DataError::Io {
                    path: spec.input.clone(),
                    action: "starting a partition's thread",
                    source,
                }),
            })
            .collect()
    });
    let mut works = Vec::with_capacity(parts);
    let mut stats = LinkStats::default();
    let mut resumed = 0;
    for r in results {
        let done = r?;
        let st = done.stats;
        stats.bytes_sent += st.bytes_sent;
        stats.bytes_received += st.bytes_received;
        stats.messages_sent += st.messages_sent;
        stats.messages_received += st.messages_received;
        resumed += done.resumed;
        works.push(done.work);
    }
    Ok((Processor::merged(works)?, stats, resumed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Two workers over real TCP on 127.0.0.1 (the listener at `worker_link`'s port), each
    /// greeting as given; returns both results.
    fn connect_workers(
        ours: WorkerGreeting,
        theirs: WorkerGreeting,
    ) -> (Result<(), DataError>, Result<(), DataError>) {
        let main = |me: &str, peer: &str, port: u16, peer_port: u16| TcpOptions {
            self_id: me.into(),
            self_addr: format!("127.0.0.1:{port}"),
            peer_id: peer.into(),
            peer_addr: format!("127.0.0.1:{peer_port}"),
            connect_timeout: std::time::Duration::from_secs(10),
            recv_timeout: std::time::Duration::from_secs(10),
            silence_timeout: blindjoin_link::DEFAULT_SILENCE_TIMEOUT,
            tls: None,
            shape: None,
        };
        let (pa, pb, worker) = (free_port(), free_port(), free_port());
        let a = worker_link(&main("alice", "bob", pa, pb), true, worker);
        let b = worker_link(&main("bob", "alice", pb, pa), false, worker);
        assert_eq!(a.self_addr, format!("127.0.0.1:{worker}"));
        assert_eq!(b.peer_addr, format!("127.0.0.1:{worker}"));
        let go = |opts: TcpOptions, listener: bool, g: WorkerGreeting| {
            move || -> Result<(), DataError> {
                let mut link = TcpLink::establish_as(&opts, listener, &Cancel::new())?;
                greet_worker(&mut link, &g)?;
                link.close()?;
                Ok(())
            }
        };
        let t = std::thread::spawn(go(b, false, theirs));
        let ra = go(a, true, ours)();
        (ra, t.join().unwrap())
    }

    #[test]
    fn worker_connections_from_another_session_or_attempt_are_refused_over_tcp() {
        let g = WorkerGreeting {
            session: [7; 16],
            partition: 1,
            partitions: 2,
            attempt: 0,
        };
        let (a, b) = connect_workers(g, g);
        assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
        let other_session = WorkerGreeting {
            session: [8; 16],
            ..g
        };
        let (a, b) = connect_workers(g, other_session);
        let e = a.unwrap_err().to_string();
        assert!(e.contains("another run"), "{e}");
        assert!(b.is_err());
        let retried = WorkerGreeting { attempt: 1, ..g };
        let (a, b) = connect_workers(retried, g);
        let e = a.unwrap_err().to_string();
        assert!(e.contains("attempt 0") && e.contains("earlier try"), "{e}");
        assert!(b.is_err());
    }

    #[test]
    fn partitions_cover_every_bucket_once_in_order() {
        for buckets in [1usize, 2, 3, 7, 16, 1000] {
            for parts in 1..=9 {
                let mut next = 0;
                for p in 0..parts {
                    let r = buckets_of(p, parts, buckets);
                    assert_eq!(r.start, next, "{buckets} buckets, {parts} parts");
                    // Sizes differ by at most one.
                    assert!(r.len() <= buckets / parts + 1);
                    next = r.end;
                }
                assert_eq!(next, buckets);
            }
        }
        assert_eq!(buckets_of(0, 4, 2), 0..0);
        assert_eq!(buckets_of(3, 4, 2), 1..2);
    }

    #[test]
    fn the_agreed_count_is_the_minimum() {
        assert_eq!(agreed(4, 2), 2);
        assert_eq!(agreed(1, 8), 1);
        assert_eq!(agreed(0, 3), 1);
        assert_eq!(agreed(3, 3), 3);
    }

    #[test]
    fn counting_runs_are_never_split() {
        assert!(check_splittable(4, Reveal::Intersection, None).is_ok());
        assert!(check_splittable(1, Reveal::Cardinality, None).is_ok());
        for (reveal, min) in [
            (Reveal::Cardinality, None),
            (Reveal::UpTo(10), None),
            (Reveal::Intersection, Some(5)),
        ] {
            let e = check_splittable(2, reveal, min).unwrap_err().to_string();
            assert!(
                e.contains("never split") && e.contains("per-partition"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_default_follows_cores_memory_and_ports() {
        let gib = 1u64 << 30;
        assert_eq!(default_workers(8, Some(64 * gib), 32), 8);
        assert_eq!(default_workers(8, Some(3 * gib + 5), 32), 3);
        assert_eq!(default_workers(8, Some(64 * gib), 2), 2);
        assert_eq!(default_workers(8, Some(64 * gib), 0), 1);
        assert_eq!(default_workers(2, None, 8), 1);
        assert_eq!(default_workers(0, Some(gib / 2), 8), 1);
    }

    #[test]
    fn mem_available_is_read_from_meminfo() {
        let text = "MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(mem_available(text), Some(8_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: x kB\n"), None);
    }

    #[test]
    fn port_ranges_bound_the_workers() {
        assert_eq!(ports_for((9100, 9131), 3).unwrap(), vec![9100, 9101, 9102]);
        assert_eq!(ports_for((65534, 65535), 2).unwrap(), vec![65534, 65535]);
        let e = ports_for((9100, 9101), 3).unwrap_err().to_string();
        assert!(e.contains("2 ports for 3 workers"), "{e}");
    }
}
