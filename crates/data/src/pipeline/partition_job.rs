//! A partitioned run driven in phases by an outside scheduler (Ray, through the Python wheel):
//! each partition runs as a task in a process of its own, possibly on another machine of the
//! party's cluster.
//!
//! 1. [`Coordinator::start`] (the calling process): reads and spills the table into the work
//!    folder, connects the main link, runs the handshake and the run terms (the partition
//!    count is agreed as for `--workers`), and exchanges the worker endpoint table. It returns
//!    one [`Coordinator::jobs`] entry per partition.
//! 2. [`run_partition_job`] (a task, anywhere that sees the work folder): connects that
//!    partition's worker link (greeting with the session, partition and attempt; the handshake
//!    again), agrees with the peer's worker where the partition resumes, and runs its buckets,
//!    checkpointing after each ([`crate::pipeline::partition_recovery`]).
//! 3. [`Coordinator::retry_round`]: after each round of tasks both coordinators swap their
//!    failed partitions over the main link and retry the union, each at its next attempt; a
//!    retried partition resumes from its checkpoint, the others are not redone.
//! 4. [`Coordinator::finish`]: merges the partitions' sorted runs (from their final
//!    checkpoints) into the output, as a one-process run does, and writes the report.
//!
//! The work folder is the recovery folder when `recovery_config` is on (the run then also
//! survives the coordinator's crash), else a private temporary folder (0700) removed at the
//! end, also when the run fails (it holds a copy of the input). Either way the run declares
//! recovery in its terms. The peer must run on a scheduler too: the retry rounds on the main
//! link are this mode's, and the run terms say so (a peer in one process is refused at once,
//! naming both sides' runners).
//!
//! A job is our own versioned encoding (a magic line, then JSON): the config text, the paths,
//! the session id, the partition, the endpoint. It holds no key material (a secret key is read
//! by the task from the key file the config names), so it can go through the scheduler's
//! object store; it still names the party's files, so it is never logged.

use crate::error::{ConfigError, DataError};
use crate::pipeline::bucket::BucketedPsi;
use crate::pipeline::join::JoinType;
use crate::pipeline::partition::{
    self, PartitionJob, SharedUnits, buckets_of, in_worker_session, partition_on, worker_link,
};
use crate::pipeline::partition_recovery::{PartitionRecovery, RecoveryAt};
use crate::pipeline::process::{Processor, ProcessorState, RunsAt, key_set_digest, key_sets_equal};
use crate::pipeline::recovery::{Checkpoint, Recovery};
use crate::pipeline::report::{PeakTracker, Report, Stages};
use crate::pipeline::runs::{Runs, SortBy};
use crate::pipeline::spill::{SpillDir, SpilledTable};
use crate::pipeline::two_party::{self, RunSoFar};
use crate::pipeline::wire::RunTerms;
use crate::session::{self, Connect};
use crate::spec::RunSpec;
use crate::spec::TableFormat;
use crate::table::private_fs;
use crate::table::writer::{Columns, RowWriter};
use blindjoin_link::wire::WireMessage;
use blindjoin_link::worker::{RetryRound, SessionId, WorkerGreeting};
use blindjoin_link::{Cancel, Link, TcpLink, TcpOptions};
use blindjoin_protocols::{HandshakeChecked, NoProgress, ProtocolError, PsiOptions, handshake};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The first line of every job.
const MAGIC: &[u8] = b"blindjoin-partition-job/2\n";
/// Jobs are small (a spec and a few paths): anything longer is refused unread.
const MAX_JOB_BYTES: usize = 4 << 20;

/// One partition's job, as [`Coordinator::jobs`] encodes it.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct Job {
    /// The run's spec as the coordinator made it (scheduled: its partition count and work
    /// folder set). Paths only: no key material (a secret key is read from its file).
    spec: RunSpec,
    /// The work folder: spill shards, checkpoints, the partitions' runs.
    work_dir: PathBuf,
    /// The run's fingerprint, checked against the work folder's checkpoint.
    fingerprint: String,
    session: SessionId,
    partition: u32,
    partitions: u32,
    /// The worker link: the listening side's worker port, and whether we listen.
    port: u16,
    listener: bool,
    /// The peer's row count from the main handshake: the worker's handshake must agree.
    peer_rows: u64,
    /// `check_hash_digest` found the key sets equal.
    all_match: bool,
}

impl Job {
    fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend(serde_json::to_vec(self).unwrap_or_default());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Job, DataError> {
        let bad = |why: String| {
            DataError::Config(ConfigError::Invalid {
                field: "partition job".into(),
                message: why,
            })
        };
        if bytes.len() > MAX_JOB_BYTES {
            return Err(bad(format!(
                "{} bytes, more than a job ever holds ({MAX_JOB_BYTES})",
                bytes.len()
            )));
        }
        let body = bytes
            .strip_prefix(MAGIC)
            .ok_or_else(|| bad("not a blindjoin partition job of this version".into()))?;
        serde_json::from_slice(body).map_err(|e| bad(format!("unreadable ({e})")))
    }
}

/// A two-party spec set up for a scheduled run: `workers` partitions, checkpoints in
/// `work_dir`.
fn scheduled_spec(mut spec: RunSpec, workers: usize, work_dir: &Path) -> RunSpec {
    spec.workers = Some(workers);
    spec.recovery = Some(work_dir.to_path_buf());
    spec
}

/// What a partition task reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PartitionOutcome {
    /// The partition.
    pub partition: u32,
    /// The attempt.
    pub attempt: u32,
    /// Buckets taken from the checkpoints rather than run.
    pub resumed_buckets: u64,
    /// The worker link's traffic.
    pub bytes_sent: u64,
    /// The worker link's traffic.
    pub bytes_received: u64,
}

/// Runs one partition job (attempt `attempt`, which both coordinators agreed on) in this
/// process.
///
/// # Errors
/// A malformed job; link, protocol, checkpoint and file errors; a worker link that greets for
/// another session, partition or attempt.
pub fn run_partition_job(
    job: &[u8],
    attempt: u32,
    cancel: &Cancel,
) -> Result<PartitionOutcome, DataError> {
    let job = Job::decode(job)?;
    let spec = job.spec.clone();
    let (rec, cp) = Recovery::open(&spec, &job.work_dir)?;
    let cp = match cp {
        Some(cp) if rec.fingerprint() == job.fingerprint => cp,
        _ => {
            return Err(DataError::Config(ConfigError::Invalid {
                field: "partition job".into(),
                message: format!(
                    "the work folder {} does not hold this run's spill (another run, or a \
                     changed input)",
                    job.work_dir.display()
                ),
            }));
        }
    };
    let columns = two_party::resumed_columns(&spec, cp.header.clone())?;
    let mut table = SpilledTable::reopen(
        SpillDir::persistent(rec.shard_dir())?,
        columns,
        cp.rows,
        cp.shards,
    )?;
    let opts = two_party::psi_options(&spec, two_party::secret_key(&spec)?);
    let main = two_party::link_options(&spec);
    let greeting = WorkerGreeting {
        session: job.session,
        partition: job.partition,
        partitions: job.partitions,
        attempt,
    };
    let link_opts = worker_link(&main, job.listener, job.port);
    let hello = two_party::hello(&spec, cp.rows);
    let path = spec.input.clone();
    let done = in_worker_session(
        link_opts.clone(),
        job.listener,
        greeting,
        hello,
        cancel,
        &path,
        |link, hs| {
            if hs.theirs().item_count != job.peer_rows {
                return Err(DataError::Protocol(ProtocolError::PeerMisbehaved(format!(
                    "the peer's worker announced {} rows, its coordinator {}",
                    hs.theirs().item_count,
                    job.peer_rows
                ))));
            }
            let b = BucketedPsi::new(hs, &opts, spec.bucket_size)?.buckets();
            let parts = job.partitions as usize;
            let units = SharedUnits::new(&mut table, b, parts);
            let pjob = PartitionJob {
                spec: &spec,
                hs,
                opts: &opts,
                link: link_opts.clone(),
                listener: job.listener,
                greeting,
                runs_dir: None,
                all_match: job.all_match,
                recovery: Some(RecoveryAt {
                    folder: job.work_dir.clone(),
                    fingerprint: job.fingerprint.clone(),
                }),
            };
            let done = partition_on(&pjob, &units, link)?;
            Ok((done.resumed, done.stats))
        },
    )?;
    let (resumed, stats) = done;
    Ok(PartitionOutcome {
        partition: job.partition,
        attempt,
        resumed_buckets: resumed as u64,
        bytes_sent: stats.bytes_sent,
        bytes_received: stats.bytes_received,
    })
}

/// Most rounds of partition tasks a coordinator accepts from its caller: bounds how long two
/// coordinators can keep retrying.
pub const MAX_ROUNDS: u32 = 16;

/// One party's side of a scheduled partitioned run: the main link, the spilled table and what
/// the handshake settled, between [`Coordinator::start`] and [`Coordinator::finish`].
pub struct Coordinator {
    spec: RunSpec,
    link: TcpLink,
    table: SpilledTable,
    recovery: (Recovery, Checkpoint),
    hs: HandshakeChecked,
    opts: PsiOptions,
    parts: usize,
    jobs: Vec<Vec<u8>>,
    /// Each partition's worker link, the run's session and our side of it: what a stand-in for
    /// a failed worker needs ([`partition::stand_in`]).
    worker_links: Vec<TcpOptions>,
    session: SessionId,
    listener: bool,
    /// Stand-ins for this round's failed workers ([`Coordinator::worker_failed`]), stopped once
    /// the peer has reported its round.
    stand_ins: StandIns,
    attempts: Vec<u32>,
    round: u32,
    /// A work folder we made, not the user's recovery folder: removed when the coordinator
    /// goes, finished or failed (it holds a copy of the input, and cannot be resumed from).
    temporary: Option<WorkFolder>,
    stages: Stages,
    start: Instant,
    t: Instant,
    equal_sets: bool,
}

impl Coordinator {
    /// Starts a scheduled run of a launch config with `workers` partitions: reads the table
    /// into the work folder (`recovery_config`'s folder, else a private folder made in
    /// `work_parent`, else in the system's temporary folder), connects, and agrees the run
    /// and the worker endpoints with the peer.
    ///
    /// # Errors
    /// Config, input and link errors; a peer that agreed to a single partition; runs that are
    /// never split.
    pub fn start(
        spec: RunSpec,
        workers: usize,
        work_parent: Option<&Path>,
        cancel: &Cancel,
    ) -> Result<Coordinator, DataError> {
        let start = Instant::now();
        let user_folder = spec.recovery.clone();
        let (work_dir, temporary) = match user_folder {
            Some(f) => (f, None),
            None => {
                let parent = work_parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
                let d = private_fs::create_private_dir_in(&parent, "work").map_err(|source| {
                    DataError::Io {
                        path: parent.clone(),
                        action: "creating the partitions' work folder",
                        source,
                    }
                })?;
                (d.clone(), Some(WorkFolder(d)))
            }
        };
        let mut spec = scheduled_spec(spec, workers.max(2), &work_dir);
        check_output(&spec)?;
        // A folder output's report goes beside the folder, not into it.
        if let (None, Some(out)) = (&spec.report, &spec.output)
            && output_folder(out)
        {
            let name = out.as_os_str().to_string_lossy();
            spec.report = Some(PathBuf::from(format!(
                "{}.report.json",
                name.trim_end_matches('/')
            )));
        }
        partition::check_splittable(workers.max(2), spec.reveal, spec.min_intersection)?;
        let main = two_party::link_options(&spec);
        // Connect while reading the table, in a session (its abort and cancel policy); the
        // coordinator keeps the main link for the retry rounds and the finish.
        let (link, table, recovery, read_s, t, (hs, opts, parts, equal_sets, session, links)) =
            session::run(Some(Connect::tcp(main.clone())), cancel, &spec.input, |s| {
                let prepared = two_party::prepare(&spec, &NoProgress)?;
                let (mut table, recovery, secret_key, read_s) = prepared.into_parts();
                let Some(mut recovery) = recovery else {
                    return Err(internal("a scheduled run without its work folder"));
                };
                let link = s.ready()?;
                let t = Instant::now();
                let hs = handshake(link, two_party::hello(&spec, table.rows))?;
                let mut terms = RunTerms::of(&spec);
                terms.scheduled = true;
                terms.workers =
                    workers.clamp(2, blindjoin_link::worker::MAX_PARTITIONS as usize) as u32;
                let theirs = terms.agree(link, spec.role)?;
                let parts = partition::agreed(terms.workers, theirs.workers) as usize;
                if parts < 2 {
                    return Err(DataError::Config(ConfigError::Invalid {
                        field: "workers".into(),
                        message: "the peer asked for 1 worker; a run on a scheduler needs \
                                      at least 2 partitions on both sides (the peer's \
                                      blindjoin.workers)"
                            .into(),
                    }));
                }
                let opts = two_party::psi_options(&spec, secret_key);
                let b = BucketedPsi::new(&hs, &opts, spec.bucket_size)?.buckets();
                let equal_sets = if spec.join.check_hash_digest {
                    let digest = key_set_digest(&mut table, b)?;
                    key_sets_equal(link, spec.role, &digest)?
                } else {
                    false
                };
                let (rec, cp) = &mut recovery;
                if cp.use_partitions(parts)? {
                    rec.save(cp)?;
                }
                let (session, links) = partition::exchange_endpoints(link, &spec, &main, parts)?;
                let link = s.take_link()?;
                Ok((
                    link,
                    table,
                    recovery,
                    read_s,
                    t,
                    (hs, opts, parts, equal_sets, session, links),
                ))
            })?;
        let listener = TcpLink::is_listener(&main);
        let jobs = links
            .iter()
            .enumerate()
            .map(|(p, l)| {
                let port = if listener { &l.self_addr } else { &l.peer_addr };
                let port = port
                    .rsplit_once(':')
                    .and_then(|(_, p)| p.parse().ok())
                    .unwrap_or(0);
                Job {
                    spec: spec.clone(),
                    work_dir: work_dir.clone(),
                    fingerprint: recovery.0.fingerprint().to_string(),
                    session,
                    partition: p as u32,
                    partitions: parts as u32,
                    port,
                    listener,
                    peer_rows: hs.theirs().item_count,
                    all_match: equal_sets,
                }
                .encode()
            })
            .collect();
        let stages = Stages {
            read_input_s: read_s,
            connect_s: t.elapsed().as_secs_f64(),
            ..Stages::default()
        };
        Ok(Coordinator {
            spec,
            link,
            table,
            recovery,
            hs,
            opts,
            parts,
            jobs,
            worker_links: links,
            session,
            listener,
            stand_ins: StandIns::default(),
            attempts: vec![0; parts],
            round: 0,
            temporary,
            stages,
            start,
            t: Instant::now(),
            equal_sets,
        })
    }

    /// One job per partition, in partition order, to hand to [`run_partition_job`].
    pub fn jobs(&self) -> &[Vec<u8>] {
        &self.jobs
    }

    /// The work folder (checkpoints, shards, the partitions' runs).
    pub fn work_dir(&self) -> &Path {
        self.recovery.0.folder()
    }

    /// Says that this party's worker of partition `p` failed in this round (its task raised,
    /// its process was killed, its node lost), as soon as that is known, so that the peer's
    /// worker of `p` stops too.
    ///
    /// A worker that died before its worker link was up leaves the peer's worker of that
    /// partition connecting or listening for a connection that never comes, until its connect
    /// timeout; the peer's coordinator waits for that worker before it reports its round, and
    /// ours, waiting in [`Coordinator::retry_round`], could time out on the main link first: the
    /// run would fail instead of retrying (issue #39's soak). So a stand-in takes the failed
    /// worker's end of its link, greets the peer's worker as the dead one would (same session,
    /// partition and attempt) and aborts it ([`partition::stand_in`]); that worker fails at
    /// once, as a retryable partition. It must start at once, not when our round ends: our own
    /// live workers may be waiting for the peer's dead ones, and the peer's round for ours.
    /// A second call for the same partition in a round does nothing.
    ///
    /// # Errors
    /// A partition out of range.
    pub fn worker_failed(&mut self, p: u32) -> Result<(), DataError> {
        let Some(opts) = self.worker_links.get(p as usize) else {
            return Err(internal("a failed partition out of range"));
        };
        if self.stand_ins.has(p) {
            return Ok(());
        }
        let greeting = WorkerGreeting {
            session: self.session,
            partition: p,
            partitions: self.parts as u32,
            attempt: self.attempts[p as usize],
        };
        self.stand_ins.start(opts.clone(), self.listener, greeting);
        Ok(())
    }

    /// After a round of partition tasks: swaps this side's failed partitions with the peer's
    /// over the main link and returns the partitions both retry, each with its next attempt
    /// (the same on both sides). Empty: every partition finished on both sides.
    ///
    /// Every failed partition gets a stand-in ([`Coordinator::worker_failed`]) if it has none
    /// yet, while we wait for the peer's report. Once both reports are in, the stand-ins are
    /// stopped, and if anything is retried both sides confirm the partitions they retry before
    /// either starts them, so that no stand-in of ours is still about when the peer's retried
    /// worker comes up (it would meet the stand-in and refuse its earlier attempt).
    ///
    /// # Errors
    /// Link errors; a peer in another round, naming partitions out of range or confirming
    /// other partitions; more than [`MAX_ROUNDS`] rounds.
    pub fn retry_round(&mut self, failed: &[u32]) -> Result<Vec<(u32, u32)>, DataError> {
        let mut ours: Vec<u32> = failed.to_vec();
        ours.sort_unstable();
        ours.dedup();
        if ours.iter().any(|&p| p as usize >= self.parts) {
            return Err(internal("a failed partition out of range"));
        }
        for &p in &ours {
            self.worker_failed(p)?;
        }
        let msg = RetryRound {
            round: self.round,
            failed: ours.clone(),
        };
        let theirs = swap(&mut self.link, &msg);
        // Every worker of the peer has ended once it reports (one that had connected to a
        // worker of ours saw that connection close when ours died).
        self.stand_ins
            .stop("the peer's coordinator reported its round");
        let theirs = theirs?;
        if theirs.failed.iter().any(|&p| p as usize >= self.parts) {
            return Err(peer_error(format!(
                "the peer names a failed partition out of 0..{}",
                self.parts
            )));
        }
        ours.extend(theirs.failed);
        ours.sort_unstable();
        ours.dedup();
        if !ours.is_empty() {
            // Every stand-in of ours has ended: say so, and wait for the peer's to have.
            let confirm = RetryRound {
                round: self.round,
                failed: ours.clone(),
            };
            let confirmed = swap(&mut self.link, &confirm)?;
            if confirmed.failed != ours {
                return Err(peer_error(format!(
                    "the peer's coordinator retries partitions {:?}, ours {ours:?}",
                    confirmed.failed
                )));
            }
        }
        self.round += 1;
        if !ours.is_empty() && self.round >= MAX_ROUNDS {
            return Err(DataError::Config(ConfigError::Invalid {
                field: "partition retries".into(),
                message: format!(
                    "partitions {ours:?} still fail after {MAX_ROUNDS} rounds; the run stops"
                ),
            }));
        }
        Ok(ours
            .into_iter()
            .map(|p| {
                let a = &mut self.attempts[p as usize];
                *a += 1;
                (p, *a)
            })
            .collect())
    }

    /// Merges the finished partitions' runs into the output over the main link, as a
    /// one-process partitioned run does, closes the link and writes the report. A work folder
    /// we made is removed.
    ///
    /// # Errors
    /// A partition that has not finished; link, check and output errors.
    pub fn finish(self, outcomes: &[PartitionOutcome]) -> Result<Report, DataError> {
        let Coordinator {
            spec,
            mut link,
            table,
            recovery,
            hs,
            opts,
            parts,
            temporary,
            stages,
            start,
            t,
            equal_sets,
            ..
        } = self;
        let report = (|| {
            let b = BucketedPsi::new(&hs, &opts, spec.bucket_size)?.buckets();
            let at = RecoveryAt {
                folder: recovery.0.folder().to_path_buf(),
                fingerprint: recovery.0.fingerprint().to_string(),
            };
            let mut works = Vec::with_capacity(parts);
            let mut finals = Vec::with_capacity(parts);
            for p in 0..parts {
                let range = buckets_of(p, parts, b);
                let rec = PartitionRecovery::open(&at, p, parts, b)?;
                let state = rec.finished(&range)?;
                finals.push((rec.dir().to_path_buf(), state.clone()));
                let mut psi = BucketedPsi::new(&hs, &opts, spec.bucket_size)?;
                psi.resume_at(range.start, 0, Default::default())?;
                let mut work = Processor::new(&spec, psi, RunsAt::Recovery(rec.dir(), &state))?;
                if equal_sets {
                    work.all_keys_match();
                }
                works.push(work);
            }
            let work = Processor::merged(works)?;
            let parts_out = spec.output.as_deref().is_some_and(output_folder);
            let write_parts =
                |columns: &Columns, out: &Path| write_parts(&spec, &finals, columns, out);
            let mut worker_stats = blindjoin_link::LinkStats::default();
            for o in outcomes {
                worker_stats.bytes_sent += o.bytes_sent;
                worker_stats.bytes_received += o.bytes_received;
            }
            let resumed = outcomes.iter().map(|o| o.resumed_buckets as usize).sum();
            two_party::finish_run(
                &spec,
                work,
                &mut link,
                &table,
                &NoProgress,
                RunSoFar {
                    stages,
                    t,
                    start,
                    first: resumed,
                    worker_stats,
                    peak: PeakTracker::default(),
                    bucket_peaks: Vec::new(),
                    min_check: None,
                    equal_sets,
                },
                parts_out.then_some(&write_parts as two_party::WriteOutput<'_>),
            )
        })();
        if let Err(e) = &report
            && !matches!(
                e,
                DataError::Link(_) | DataError::Protocol(ProtocolError::Link(_))
            )
        {
            link.abort(&e.to_string());
        }
        drop(table);
        drop(temporary);
        report
    }
}

/// The running stand-ins of one round, each a thread with its own cancel; dropping stops and
/// joins them.
#[derive(Default)]
struct StandIns(Vec<(u32, Cancel, std::thread::JoinHandle<()>)>);

impl StandIns {
    fn has(&self, p: u32) -> bool {
        self.0.iter().any(|(q, _, _)| *q == p)
    }

    fn start(&mut self, opts: TcpOptions, listener: bool, greeting: WorkerGreeting) {
        let p = greeting.partition;
        let stop = Cancel::new();
        let why = format!(
            "its worker of partition {p} (attempt {}) failed; its coordinator ends this try of \
             the partition so that both sides retry it",
            greeting.attempt
        );
        let cancel = stop.clone();
        // Best effort: without the thread the peer's worker still ends, on its connect timeout.
        if let Ok(t) = std::thread::Builder::new()
            .name(format!("stand-in-{p}"))
            .spawn(move || {
                let _ = partition::stand_in(&opts, listener, &greeting, &why, &cancel);
            })
        {
            self.0.push((p, stop, t));
        }
    }

    fn stop(&mut self, why: &str) {
        for (_, stop, _) in &self.0 {
            stop.cancel(why);
        }
        for (_, _, t) in self.0.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        self.stop("the coordinator ended");
    }
}

/// Sends `msg` on the main link and returns the peer's message of the same round.
fn swap(link: &mut TcpLink, msg: &RetryRound) -> Result<RetryRound, DataError> {
    link.send(&msg.encode()).map_err(ProtocolError::from)?;
    let reply = link.recv().map_err(ProtocolError::from)?;
    let theirs = RetryRound::decode(&reply).map_err(ProtocolError::from)?;
    if theirs.round != msg.round {
        return Err(peer_error(format!(
            "the peer's coordinator is in retry round {}, ours in {}",
            theirs.round, msg.round
        )));
    }
    Ok(theirs)
}

/// Whether `output_config.path` names a folder (ends with `/`, or is one): the output is then
/// one part file per partition.
fn output_folder(out: &Path) -> bool {
    out.is_dir() || out.as_os_str().as_encoded_bytes().ends_with(b"/")
}

/// Refuses a folder output where parts could not line up with the peer's: an aligned outer
/// join pads with the peer's unmatched rows, whose split over partitions we do not learn.
fn check_output(spec: &RunSpec) -> Result<(), DataError> {
    let folder = spec.output.as_deref().is_some_and(output_folder);
    if folder && spec.align && spec.join.join != JoinType::Inner {
        return Err(DataError::Config(ConfigError::Invalid {
            field: "psi_config.output_config.path".into(),
            message: "a folder output (one part per partition) is written for inner joins and \
                      unaligned outputs; an aligned outer join pads with the peer's unmatched \
                      rows, whose split over partitions is not exchanged. Name a file"
                .into(),
        }));
    }
    Ok(())
}

/// Writes one part per partition into the folder `out` (made 0700 if missing), in partition
/// order: `part-00000.csv` (or `.parquet`), …, each with the header and that partition's rows
/// as the one-file output orders them within the partition (by key when aligned, by row
/// number when not), each written atomically.
fn write_parts(
    spec: &RunSpec,
    finals: &[(PathBuf, ProcessorState)],
    columns: &Columns,
    out: &Path,
) -> Result<u64, DataError> {
    private_fs::ensure_user_dir(out).map_err(|source| DataError::Io {
        path: out.to_path_buf(),
        action: "creating the output folder",
        source,
    })?;
    let sort = if spec.align {
        SortBy::Key
    } else {
        SortBy::Bytes
    };
    let ext = match spec.output_format {
        TableFormat::Csv => "csv",
        TableFormat::Parquet => "parquet",
    };
    let mut total = 0;
    for (p, (dir, st)) in finals.iter().enumerate() {
        let path = out.join(format!("part-{p:05}.{ext}"));
        let mut w = RowWriter::create(&path, spec.output_format, columns, &spec.join.null_rep)?;
        let mut matched = Runs::resumed(dir.join("matched-runs"), sort, &st.matched)?;
        let mut unmatched = Runs::resumed(dir.join("unmatched-runs"), sort, &st.unmatched)?;
        Runs::merge_all(&mut [&mut matched], &mut w)?;
        Runs::merge_all(&mut [&mut unmatched], &mut w)?;
        total += w.commit()?;
    }
    Ok(total)
}

/// A private work folder, removed with everything in it when dropped.
struct WorkFolder(PathBuf);

impl Drop for WorkFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn internal(what: &str) -> DataError {
    DataError::Protocol(ProtocolError::Config(format!("internal: {what}")))
}

fn peer_error(message: String) -> DataError {
    DataError::Protocol(ProtocolError::PeerMisbehaved(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Plan;

    fn job() -> Job {
        let cfg = config("receiver", 9000, 9100, "job");
        let spec = crate::Plan::from_config(&cfg, "c.json", Path::new("/tmp"))
            .and_then(crate::Plan::scheduled)
            .unwrap();
        Job {
            spec,
            work_dir: "/tmp/w".into(),
            fingerprint: "f".into(),
            session: [4; 16],
            partition: 1,
            partitions: 2,
            port: 9100,
            listener: true,
            peer_rows: 7,
            all_match: false,
        }
    }

    /// `n` contiguous free ports on 127.0.0.1.
    fn free_range(n: u16, seed: u16) -> u16 {
        for i in 0..500u16 {
            let base = 20000 + (std::process::id() as u16 % 97) * 100 + seed * 7 + i * 13 % 9000;
            let all =
                (base..base + n).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
            if all {
                return base;
            }
        }
        panic!("no free ports");
    }

    fn write_tables(d: &Path) {
        let mut r = String::from("id,a\n");
        for i in 0..700 {
            r.push_str(&format!("k{i:05},{i}\n"));
        }
        for i in 0..40 {
            r.push_str(&format!("k{i:05},dup{i}\n"));
        }
        let mut s = String::from("id,b\n");
        for i in 400..1000 {
            s.push_str(&format!("k{i:05},x{i}\n"));
        }
        std::fs::write(d.join("receiver.csv"), r).unwrap();
        std::fs::write(d.join("sender.csv"), s).unwrap();
    }

    fn config(me: &str, main: u16, workers: u16, tag: &str) -> String {
        config_with(me, main, workers, tag, "FULL_JOIN", true, false)
    }

    fn config_with(
        me: &str,
        main: u16,
        workers: u16,
        tag: &str,
        join: &str,
        align: bool,
        folder: bool,
    ) -> String {
        let out = if folder {
            format!("{me}_{tag}/")
        } else {
            format!("{me}_{tag}.csv")
        };
        let role = if me == "receiver" {
            "ROLE_RECEIVER"
        } else {
            "ROLE_SENDER"
        };
        format!(
            r#"{{
  "psi_config": {{
    "protocol_config": {{ "protocol": "PROTOCOL_RR22", "role": "{role}", "broadcast_result": true,
      "rr22_config": {{ "bucket_size": "60" }} }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{out}" }},
    "keys": ["id"],
    "disable_alignment": {no_align},
    "advanced_join_type": "ADVANCED_JOIN_TYPE_{join}",
    "left_side": "ROLE_RECEIVER"
  }},
  "link_config": {{ "recv_timeout_ms": 30000, "parties": [
    {{ "id": "receiver", "host": "127.0.0.1:{main}" }},
    {{ "id": "sender", "host": "127.0.0.1:{}" }} ] }},
  "self_link_party": "{me}",
  "blindjoin": {{ "connect_timeout_ms": 20000, "worker_ports": "{workers}-{}" }}
}}"#,
            main + 1,
            workers + 1,
            no_align = !align,
        )
    }

    /// One party's coordinator, as `blindjoin.ray` drives it, with each round's tasks on
    /// threads; `first_attempts` are round 0's attempts per partition.
    fn coordinate(
        d: &Path,
        me: &str,
        main: u16,
        workers: u16,
        first_attempts: [u32; 2],
    ) -> (Report, Vec<u32>, usize) {
        coordinate_config(d, me, &config(me, main, workers, "job"), first_attempts)
    }

    /// The scheduled spec of a test config, as `blindjoin.ray` gets it.
    fn spec_of(cfg: &str, d: &Path) -> RunSpec {
        crate::Plan::from_config(cfg, "test", d)
            .and_then(crate::Plan::scheduled)
            .unwrap()
    }

    fn coordinate_config(
        d: &Path,
        me: &str,
        cfg: &str,
        first_attempts: [u32; 2],
    ) -> (Report, Vec<u32>, usize) {
        let c = coordinate_with(d, me, cfg, first_attempts, &[]);
        (c.report, c.attempts, c.rounds)
    }

    /// What [`coordinate_with`] saw.
    struct Coordinated {
        report: Report,
        attempts: Vec<u32>,
        rounds: usize,
        /// Round 0's failed tasks: partition, error, how long the task ran.
        first_errors: Vec<(u32, String, std::time::Duration)>,
    }

    /// [`coordinate_config`] whose round-0 workers of the partitions in `dead` die before
    /// they connect (as a task killed at once): they never run, and count as failed.
    fn coordinate_with(
        d: &Path,
        me: &str,
        cfg: &str,
        first_attempts: [u32; 2],
        dead: &[u32],
    ) -> Coordinated {
        let mut c = Coordinator::start(spec_of(cfg, d), 2, Some(d), &Cancel::new()).unwrap();
        let jobs = c.jobs().to_vec();
        assert_eq!(jobs.len(), 2);
        let mut attempts = first_attempts.to_vec();
        let mut outcomes: Vec<Option<PartitionOutcome>> = vec![None, None];
        let mut pending = vec![0u32, 1];
        let mut rounds = 0;
        let mut first_errors = Vec::new();
        loop {
            rounds += 1;
            let run: Vec<u32> = pending
                .iter()
                .copied()
                .filter(|p| rounds > 1 || !dead.contains(p))
                .collect();
            // As the Ray driver does the moment a task dies.
            for &p in pending.iter().filter(|p| !run.contains(p)) {
                c.worker_failed(p).unwrap();
            }
            let results: Vec<(u32, Result<PartitionOutcome, String>, std::time::Duration)> =
                std::thread::scope(|s| {
                    let hs: Vec<_> = run
                        .iter()
                        .map(|&p| {
                            let job = &jobs[p as usize];
                            let a = attempts[p as usize];
                            s.spawn(move || {
                                let t = Instant::now();
                                let r = run_partition_job(job, a, &Cancel::new());
                                (p, r.map_err(|e| e.to_string()), t.elapsed())
                            })
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap()).collect()
                });
            let mut failed: Vec<u32> = pending
                .iter()
                .copied()
                .filter(|p| !run.contains(p))
                .collect();
            for (p, r, took) in results {
                match r {
                    Ok(o) => outcomes[p as usize] = Some(o),
                    Err(e) => {
                        if attempts[p as usize] != first_attempts[p as usize] || rounds > 1 {
                            panic!("{me} p{p}: {e}");
                        }
                        first_errors.push((p, e, took));
                        failed.push(p);
                    }
                }
            }
            let retry = c
                .retry_round(&failed)
                .unwrap_or_else(|e| panic!("{me}: retry round {rounds}: {e}"));
            if retry.is_empty() {
                break;
            }
            pending = retry.iter().map(|&(p, _)| p).collect();
            for (p, a) in retry {
                attempts[p as usize] = a;
            }
        }
        let work = c.work_dir().to_path_buf();
        let outcomes: Vec<PartitionOutcome> = outcomes.into_iter().map(Option::unwrap).collect();
        let report = c.finish(&outcomes).unwrap();
        assert!(!work.exists(), "the private work folder is removed");
        Coordinated {
            report,
            attempts,
            rounds,
            first_errors,
        }
    }

    /// The reference: both parties' one-worker run in one process (`<me>_ref.csv`).
    fn reference_run(d: &Path, main: u16) {
        let one = |me: &'static str, d: PathBuf| {
            move || {
                let cfg = config(me, main, 1, "ref");
                let Plan::TwoParty(mut spec) = Plan::from_config(&cfg, "test", &d).unwrap() else {
                    panic!("two-party");
                };
                spec.workers = Some(1);
                crate::pipeline::two_party::run(&spec, &NoProgress).unwrap()
            }
        };
        let t = std::thread::spawn(one("sender", d.to_path_buf()));
        one("receiver", d.to_path_buf())();
        t.join().unwrap();
    }

    /// Both parties' scheduled outputs (`<me>_job.csv`) are the reference's bytes.
    fn same_as_reference(d: &Path) {
        for me in ["receiver", "sender"] {
            let a = std::fs::read(d.join(format!("{me}_ref.csv"))).unwrap();
            let b = std::fs::read(d.join(format!("{me}_job.csv"))).unwrap();
            assert!(a.len() > 100);
            assert!(
                a == b,
                "{me}: the scheduled run's output differs from one worker's"
            );
        }
    }

    #[test]
    fn a_scheduled_run_matches_one_worker_and_a_refused_attempt_is_retried() {
        let d = std::env::temp_dir().join(format!("bj-pjob-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        write_tables(&d);
        reference_run(&d, free_range(2, 1));

        // Scheduled, 2 partitions; the receiver's first try of partition 0 greets with
        // attempt 1, the sender's with 0: both refuse it, swap it as failed, and both rerun it
        // at attempt 1 while partition 1 is not redone.
        let (main, workers) = (free_range(2, 2), free_range(2, 3));
        let d2 = d.clone();
        let t = std::thread::spawn(move || coordinate(&d2, "sender", main, workers, [0, 0]));
        let (rr, ar, nr) = coordinate(&d, "receiver", main, workers, [1, 0]);
        let (rs, as_, ns) = t.join().unwrap();
        assert_eq!((nr, ns), (2, 2), "one retry round");
        assert_eq!(ar, vec![1, 0]);
        assert_eq!(as_, vec![1, 0]);
        same_as_reference(&d);
        assert_eq!(rr.buckets, rs.buckets);
        assert!(rr.buckets >= 4, "{}", rr.buckets);
    }

    /// Issue #39: a worker killed before its worker link is up left the peer's worker of that
    /// partition connecting (or listening) until its connect timeout, and our coordinator's
    /// retry round timed out on the main link waiting for the peer's; the run failed instead of
    /// retrying. Here the receiver's (listening) worker of partition 0 and the sender's
    /// (connecting) worker of partition 1 die before they connect, with the connect timeout
    /// (60 s) above the receive timeout (30 s): the peer's workers must fail promptly, aborted
    /// by the coordinators' stand-ins, and both partitions are retried.
    #[test]
    fn a_worker_that_dies_before_it_connects_ends_the_peers_worker_and_both_retry() {
        let d = std::env::temp_dir().join(format!("bj-pjob-dead-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        write_tables(&d);
        reference_run(&d, free_range(2, 7));

        let (main, workers) = (free_range(2, 8), free_range(2, 9));
        let cfg = |me: &str| {
            let c = config(me, main, workers, "job");
            assert!(c.contains(r#""connect_timeout_ms": 20000"#));
            c.replace(
                r#""connect_timeout_ms": 20000"#,
                r#""connect_timeout_ms": 60000"#,
            )
        };
        let (d2, cs) = (d.clone(), cfg("sender"));
        let t = std::thread::spawn(move || coordinate_with(&d2, "sender", &cs, [0, 0], &[1]));
        let r = coordinate_with(&d, "receiver", &cfg("receiver"), [0, 0], &[0]);
        let s = t.join().unwrap();
        for (me, c, p) in [("receiver", &r, 1), ("sender", &s, 0)] {
            assert_eq!((c.rounds, c.attempts.clone()), (2, vec![1, 1]), "{me}");
            // The one worker that ran in round 0 was aborted by the peer's stand-in (not
            // ended by its own 60 s connect timeout, which would say so).
            let [(failed, e, took)] = c.first_errors.as_slice() else {
                panic!("{me}: {:?}", c.first_errors);
            };
            assert_eq!(*failed, p, "{me}");
            assert!(
                e.contains("aborted") && e.contains("its coordinator ends this try"),
                "{me} p{p} after {took:?}: {e}"
            );
        }
        same_as_reference(&d);
        assert_eq!(r.report.buckets, s.report.buckets);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The data lines of a CSV file (after its header).
    fn lines(path: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines().skip(1).map(str::to_string).collect()
    }

    #[test]
    fn a_folder_output_holds_one_part_per_partition() {
        let d = std::env::temp_dir().join(format!("bj-pjob-parts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        write_tables(&d);
        for (join, align) in [("INNER_JOIN", true), ("FULL_JOIN", false)] {
            let tag = format!("{join}{align}");
            // The reference: one file, one worker.
            let main = free_range(2, 4);
            let one = |me: &'static str, d: PathBuf, tag: String| {
                move || {
                    let cfg = config_with(me, main, 1, &tag, join, align, false);
                    let Plan::TwoParty(mut spec) = Plan::from_config(&cfg, "test", &d).unwrap()
                    else {
                        panic!("two-party");
                    };
                    spec.workers = Some(1);
                    crate::pipeline::two_party::run(&spec, &NoProgress).unwrap()
                }
            };
            let t = std::thread::spawn(one("sender", d.clone(), tag.clone()));
            one("receiver", d.clone(), tag.clone())();
            t.join().unwrap();
            let (main, workers) = (free_range(2, 5), free_range(2, 6));
            let cfg = |me: &str| config_with(me, main, workers, &tag, join, align, true);
            let (d2, cs) = (d.clone(), cfg("sender"));
            let t = std::thread::spawn(move || coordinate_config(&d2, "sender", &cs, [0, 0]));
            let (rr, _, _) = coordinate_config(&d, "receiver", &cfg("receiver"), [0, 0]);
            t.join().unwrap();
            let folder = |me: &str| d.join(format!("{me}_{tag}"));
            assert_eq!(
                rr.output_path.as_deref(),
                Some(format!("{}/", folder("receiver").display()).as_str())
            );
            assert!(d.join(format!("receiver_{tag}.report.json")).exists());
            let mut part_rows = Vec::new();
            for me in ["receiver", "sender"] {
                let mut all = Vec::new();
                let mut sizes = Vec::new();
                for p in 0..2 {
                    let part = folder(me).join(format!("part-{p:05}.csv"));
                    let header = std::fs::read_to_string(&part).unwrap();
                    let one = std::fs::read_to_string(d.join(format!("{me}_{tag}.csv"))).unwrap();
                    assert_eq!(header.lines().next(), one.lines().next(), "{me} p{p}");
                    let rows = lines(&part);
                    sizes.push(rows.len());
                    all.extend(rows);
                }
                let mut one = lines(&d.join(format!("{me}_{tag}.csv")));
                assert!(one.len() > 100);
                // The parts hold the one file's rows, each exactly once.
                all.sort();
                one.sort();
                assert_eq!(all, one, "{me} {tag}");
                part_rows.push(sizes);
            }
            if align {
                // Aligned: part p of one party lines up with part p of the other.
                assert_eq!(part_rows[0], part_rows[1]);
            }
        }
        // An aligned outer join's parts could not line up: refused before connecting.
        let cfg = config_with("receiver", 1, 2, "outer", "FULL_JOIN", true, true);
        let e = Coordinator::start(spec_of(&cfg, &d), 2, Some(&d), &Cancel::new())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("inner joins and unaligned"), "{e}");
    }

    #[test]
    fn jobs_round_trip_and_foreign_or_huge_bytes_are_refused() {
        let j = job();
        let back = Job::decode(&j.encode()).unwrap();
        assert_eq!(back.session, j.session);
        assert_eq!((back.partition, back.port, back.peer_rows), (1, 9100, 7));
        // The spec travels whole, not as config text to parse again.
        assert_eq!(back.spec.input, j.spec.input);
        assert_eq!(back.spec.protocol, j.spec.protocol);
        assert_eq!(back.spec.workers, j.spec.workers);
        assert_eq!(back.spec.bucket_size, j.spec.bucket_size);
        assert!(Job::decode(b"{}").is_err());
        // A job of the format that carried config text.
        let mut other = b"blindjoin-partition-job/1\n".to_vec();
        other.extend_from_slice(&j.encode()[MAGIC.len()..]);
        let e = Job::decode(&other).err().unwrap().to_string();
        assert!(e.contains("this version"), "{e}");
        let mut bad = MAGIC.to_vec();
        bad.extend_from_slice(b"{\"spec\":");
        assert!(Job::decode(&bad).is_err());
        let huge = vec![b' '; MAX_JOB_BYTES + 1];
        let e = Job::decode(&huge).err().unwrap().to_string();
        assert!(e.contains("more than a job"), "{e}");
    }
}
