//! One party's run: read (or spill to disk) → key → connect → handshake → per bucket: dedupe,
//! protocol, join → merge the sorted runs → write → report. The protocol is whatever [`RunSpec::protocol`] names; this module only hands it
//! digests and gets back indices.

use crate::error::DataError;
use crate::pipeline::bucket::BucketedPsi;
use crate::pipeline::partition;
use crate::pipeline::partition_recovery::RecoveryAt;
use crate::pipeline::process::{Processor, RunsAt, key_groups, key_set_digest, key_sets_equal};
use crate::pipeline::recovery::{Checkpoint, Recovery};
use crate::pipeline::report::{PeakTracker, Report, Stages};
use crate::pipeline::spill::{SpillDir, SpillTo, SpilledTable, spill, table_bytes};
use crate::pipeline::wire::RunTerms;
use crate::session::{self, Connect};
use crate::spec::{RunSpec, SpillMode, TableFormat};
use crate::table::output::write_atomic;
use crate::table::writer::Columns;
use crate::table::{parts, private_fs};
use blindjoin_link::{Cancel, Link, TcpLink, TcpOptions};
use blindjoin_protocols::{Hello, Progress, ProtocolChoice, PsiOptions, Reveal, Unit, handshake};
use std::path::Path;
use std::time::Instant;
use zeroize::Zeroizing;

/// Runs one party over TCP as `spec` says.
///
/// # Errors
/// Any [`DataError`]; the peer is told about our failure when the link is up.
pub fn run(spec: &RunSpec, progress: &dyn Progress) -> Result<Report, DataError> {
    run_with_cancel(spec, progress, &Cancel::new())
}

/// [`run`] that another thread can stop with `cancel` (Ctrl-C in the Python API). Cancelling
/// stops the connect loop or wakes a blocked receive; the peer gets an abort frame carrying
/// [`Cancel::reason`] (so it stops at once, naming the cause) and no output is written.
/// Local computation between two messages is not interrupted: the run stops at its next receive.
///
/// # Errors
/// As [`run`]; a cancelled run returns `DataError::Link(LinkError::Cancelled)`.
pub fn run_with_cancel(
    spec: &RunSpec,
    progress: &dyn Progress,
    cancel: &Cancel,
) -> Result<Report, DataError> {
    let start = Instant::now();
    let opts = link_options(spec);
    // A partition count this run refuses fails before anything else.
    wanted_workers(spec, true)?;
    // Connect while reading the input: both take time, and neither needs the other.
    session::run(Some(Connect::tcp(opts.clone())), cancel, &spec.input, |s| {
        let prepared = prepare(spec, progress)?;
        let link = {
            let _span = crate::trace::span("connect");
            s.ready()?
        };
        run_on_link_with(spec, prepared, link, Some((&opts, cancel)), progress, start)
    })
}

/// The main link's options.
pub(crate) fn link_options(spec: &RunSpec) -> TcpOptions {
    TcpOptions {
        self_id: spec.parties.self_id.clone(),
        self_addr: spec.parties.self_addr.clone(),
        peer_id: spec.parties.peer_id.clone(),
        peer_addr: spec.parties.peer_addr.clone(),
        connect_timeout: spec.connect_timeout,
        recv_timeout: spec.recv_timeout,
        silence_timeout: spec.silence_timeout,
        tls: spec.tls.clone(),
        shape: spec.link_shape,
    }
}

/// The protocol options of a run, with its secret key (if any).
pub(crate) fn psi_options(spec: &RunSpec, secret_key: Option<Zeroizing<Vec<u8>>>) -> PsiOptions {
    PsiOptions {
        batch_size: spec.batch_size,
        secret_key,
        reveal: spec.reveal,
        ..PsiOptions::default()
    }
}

/// The hello this party announces in the run's handshake (and on every worker link).
pub(crate) fn hello(spec: &RunSpec, rows: u64) -> Hello {
    Hello::new(spec.protocol, spec.role, spec.broadcast_result, rows).with_reveal(spec.reveal)
}

/// Inputs larger than this are spilled to disk when [`SpillMode::Auto`]. Both paths use the
/// same shard layout; in memory it needs about four times the file size (10M rows, 247 MiB:
/// 19.8 s and 1.1 GiB in memory, 23.7 s and 0.5 GiB spilled).
pub const AUTO_SPILL_BYTES: u64 = 256 << 20;

/// The input, read and keyed (in memory, or spilled into shards on disk), before any network
/// traffic.
pub struct Prepared {
    source: SpilledTable,
    recovery: Option<(Recovery, Checkpoint)>,
    secret_key: Option<Zeroizing<Vec<u8>>>,
    read_s: f64,
}

/// `min_intersection`'s first pass: ECDH-PSI in cardinality-only mode over the same buckets (its
/// own handshake; the curve is the run's, or Curve25519 for the other protocols), with the count
/// sent to both parties. Returns |X ∩ Y| in unique keys.
fn cardinality_pass(
    spec: &RunSpec,
    table: &mut SpilledTable,
    link: &mut dyn Link,
    progress: &dyn Progress,
) -> Result<u64, DataError> {
    let curve = spec
        .protocol
        .curve()
        .unwrap_or(blindjoin_crypto::Curve::Curve25519);
    let hello = Hello::new(ProtocolChoice::Ecdh { curve }, spec.role, true, table.rows)
        .with_reveal(Reveal::Cardinality);
    let hs = handshake(link, hello)?;
    let opts = PsiOptions {
        batch_size: spec.batch_size,
        reveal: Reveal::Cardinality,
        ..PsiOptions::default()
    };
    let mut psi = BucketedPsi::new(&hs, &opts, spec.bucket_size)?;
    let b = psi.buckets();
    let m = b.min(table.shards());
    let per = b / m;
    progress.stage_in(
        "learning the intersection's size (min_intersection)",
        b as u64,
        Unit::Buckets,
    );
    for unit in 0..m {
        let group = table.load_unit(unit, b)?;
        for k in unit * per..(unit + 1) * per {
            let (_, digests) = key_groups(&group.bucket(k, b));
            psi.run_next(link, &digests, &blindjoin_protocols::Phases(progress))?;
            progress.advance(1);
        }
        // The main pass loads the unit again: an in-memory table must get its rows back.
        table.give_back(unit, b, group);
    }
    Ok(psi.counts().cardinality.unwrap_or(0))
}

/// Whether the run spills its input to disk.
fn spills(spec: &RunSpec, input: &Path) -> bool {
    match spec.spill {
        SpillMode::Always => true,
        SpillMode::Never => false,
        SpillMode::Auto => table_bytes(input, spec.input_format) > AUTO_SPILL_BYTES,
    }
}

/// The columns of a table spilled by an earlier run, from its checkpoint's header; a Parquet
/// input's schema is read from its footer again (the recovery checks that the input is the
/// one the checkpoint was made from).
pub(crate) fn resumed_columns(spec: &RunSpec, header: Vec<String>) -> Result<Columns, DataError> {
    // A folder of Parquet parts was spilled from the concatenation kept beside the shards.
    let schema_from = match (&spec.recovery, spec.input.is_dir()) {
        (Some(folder), true) => folder.join(parts::KEPT_PARQUET),
        _ => spec.input.clone(),
    };
    Ok(Columns {
        header,
        schema: match spec.input_format {
            TableFormat::Parquet => Some(crate::table::parquet_io::read_schema(&schema_from)?),
            TableFormat::Csv => None,
        },
    })
}

/// A prepared input's parts: the table, its recovery folder and checkpoint, the secret key,
/// and the seconds reading took.
pub(crate) type PreparedParts = (
    SpilledTable,
    Option<(Recovery, Checkpoint)>,
    Option<Zeroizing<Vec<u8>>>,
    f64,
);

impl Prepared {
    /// Its parts, for a run driven in phases ([`crate::pipeline::partition_job`]).
    pub(crate) fn into_parts(self) -> PreparedParts {
        (self.source, self.recovery, self.secret_key, self.read_s)
    }

    /// The keyed table and the seconds reading it took (the three-party run uses neither
    /// recovery nor a secret key).
    pub(crate) fn into_table(self) -> (SpilledTable, f64) {
        (self.source, self.read_s)
    }
}

/// Reads and keys the input (spilling it to disk when large) and loads the secret key, if any.
///
/// # Errors
/// Bad input or key file; a spill directory that cannot be written.
pub fn prepare(spec: &RunSpec, progress: &dyn Progress) -> Result<Prepared, DataError> {
    let _span = crate::trace::span("read input");
    let t = Instant::now();
    if spec.learns_result() && spec.output.is_none() {
        return Err(DataError::Config(crate::error::ConfigError::Invalid {
            field: "psi_config.output_config.path".into(),
            message: "missing; this party receives the intersection".into(),
        }));
    }
    // The ECDH key file is checked as the unbalanced server's key file is: a regular file of
    // 32 bytes (a scalar, on every curve) that group and others cannot read; refused
    // otherwise, naming `chmod 600`. Read before the input, so a bad key file fails the run
    // at once, not after a long spill.
    let secret_key = secret_key(spec)?;
    let mut recovery = None;
    let source = if let Some(folder) = &spec.recovery {
        let (rec, cp) = Recovery::open(spec, folder)?;
        let dir = SpillDir::persistent(rec.shard_dir())?;
        let (table, cp) = match cp {
            Some(cp) => {
                let columns = resumed_columns(spec, cp.header.clone())?;
                let t = SpilledTable::reopen(dir, columns, cp.rows, cp.shards)?;
                (t, cp)
            }
            None => {
                let to = SpillTo::Disk(dir);
                // A folder of parts is read as their concatenation, made beside the shards.
                let keep = folder.join(parts::KEPT_PARQUET);
                let (input, _parts) =
                    parts::resolve(&spec.input, spec.input_format, folder, Some(&keep))?;
                let t = spill(&input, spec.input_format, &spec.keys, to, progress)?;
                let cp = rec.fresh(t.columns.header.clone(), t.rows, t.shards());
                rec.save(&cp)?;
                (t, cp)
            }
        };
        recovery = Some((rec, cp));
        table
    } else {
        let dir = spec.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
        let (input, _parts) = parts::resolve(&spec.input, spec.input_format, &dir, None)?;
        let to = if spills(spec, &input) {
            SpillTo::Disk(SpillDir::temporary(&dir)?)
        } else {
            SpillTo::Memory
        };
        spill(&input, spec.input_format, &spec.keys, to, progress)?
    };
    Ok(Prepared {
        source,
        recovery,
        secret_key,
        read_s: t.elapsed().as_secs_f64(),
    })
}

/// The ECDH key file, checked as the unbalanced server's key file is: a regular file of 32
/// bytes (a scalar, on every curve) that group and others cannot read; refused otherwise,
/// naming `chmod 600`.
///
/// # Errors
/// A bad key file.
pub(crate) fn secret_key(spec: &RunSpec) -> Result<Option<Zeroizing<Vec<u8>>>, DataError> {
    let Some(p) = &spec.secret_key_path else {
        return Ok(None);
    };
    private_fs::read_key_file(p, 32, " bytes: a scalar of the curve")
        .map(Some)
        .map_err(|problem| {
            DataError::Config(crate::error::ConfigError::Invalid {
                field: "blindjoin.secret_key_path (--secret-key)".into(),
                message: format!("{}: {problem}", p.display()),
            })
        })
}

/// Runs everything after the connection is up, on any link (tests use the in-memory one).
///
/// # Errors
/// Protocol, link and output errors.
pub fn run_on_link(
    spec: &RunSpec,
    prepared: Prepared,
    link: &mut dyn Link,
    progress: &dyn Progress,
    start: Instant,
) -> Result<Report, DataError> {
    run_on_link_with(spec, prepared, link, None, progress, start)
}

/// The partitions this party asks for: `blindjoin.workers` when set (refused for runs that are
/// never split), else [`partition::default_workers`] for the runs that may be split. Over a
/// link with no TCP options to open more connections by (tests' in-memory links): 1.
fn wanted_workers(spec: &RunSpec, net: bool) -> Result<usize, DataError> {
    if !net {
        return Ok(1);
    }
    // With recovery the default is 1: a rerun must use the interrupted run's count, which a
    // default taken from the machine's free memory would not promise.
    let splittable = spec.reveal == Reveal::Intersection
        && spec.min_intersection.is_none()
        && spec.recovery.is_none();
    let w = match spec.workers {
        Some(w) => w.max(1),
        None if !splittable => 1,
        None => {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            let mem = std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|t| partition::mem_available(&t));
            let ports = spec.worker_ports.map_or(0, |(a, b)| usize::from(b - a) + 1);
            partition::default_workers(cores, mem, ports)
        }
    };
    partition::check_splittable(w, spec.reveal, spec.min_intersection)?;
    Ok(w.min(blindjoin_link::worker::MAX_PARTITIONS as usize))
}

/// [`run_on_link`], with the main link's TCP options when the run may open partition workers'
/// connections.
fn run_on_link_with(
    spec: &RunSpec,
    prepared: Prepared,
    link: &mut dyn Link,
    net: Option<(&TcpOptions, &Cancel)>,
    progress: &dyn Progress,
    start: Instant,
) -> Result<Report, DataError> {
    let Prepared {
        source: mut table,
        mut recovery,
        secret_key,
        read_s,
    } = prepared;
    let mut stages = Stages {
        read_input_s: read_s,
        ..Stages::default()
    };

    let t = Instant::now();
    let handshake_span = crate::trace::span("handshake");
    let hs = handshake(link, hello(spec, table.rows))?;
    let mut terms = RunTerms::of(spec);
    terms.workers = wanted_workers(spec, net.is_some())? as u32;
    let theirs = terms.agree(link, spec.role)?;
    let parts = partition::agreed(terms.workers, theirs.workers) as usize;
    drop(handshake_span);
    stages.connect_s = (start.elapsed().as_secs_f64() - read_s).max(t.elapsed().as_secs_f64());
    let mut min_check = None;
    if let Some(min) = spec.min_intersection {
        let t = Instant::now();
        let _span = crate::trace::span("cardinality pass (min_intersection)");
        let found = cardinality_pass(spec, &mut table, link, progress)?;
        stages.cardinality_s = Some(t.elapsed().as_secs_f64());
        if found < min {
            // Both parties learn the size, so both stop here with the same message.
            link.close()?;
            return Err(DataError::IntersectionTooSmall { found, min });
        }
        min_check = Some(found);
    }

    let t = Instant::now();
    let opts = psi_options(spec, secret_key);
    let psi = BucketedPsi::new(&hs, &opts, spec.bucket_size)?;
    let b = psi.buckets();
    let equal_sets = if spec.join.check_hash_digest {
        let _span = crate::trace::span("check_hash_digest (equal key sets?)");
        let digest = key_set_digest(&mut table, b)?;
        key_sets_equal(link, spec.role, &digest)?
    } else {
        false
    };
    // A partitioned run's partitions each agree where they resume, on their own links.
    let resume = match &mut recovery {
        Some((rec, cp)) => {
            if cp.use_partitions(parts)? {
                rec.save(cp)?;
            }
            if parts > 1 {
                None
            } else {
                Some(cp.agree(link, b)?)
            }
        }
        None => None,
    };
    let runs_at = match (&recovery, &resume, table.dir()) {
        (Some((rec, _)), Some(state), _) => RunsAt::Recovery(rec.folder(), state),
        (_, _, Some(dir)) => RunsAt::Disk(dir),
        _ => RunsAt::Memory,
    };
    if equal_sets {
        crate::log::emit(
            crate::log::Level::Debug,
            "check_hash_digest: the two key sets are equal; the protocol is skipped and every \
             key is in the intersection",
        );
    }
    let mut peak = PeakTracker::default();
    let mut bucket_peaks = Vec::new();
    let mut worker_stats = blindjoin_link::LinkStats::default();
    let (work, first) = if parts > 1 {
        let (main, cancel) = net.ok_or_else(|| {
            DataError::Protocol(blindjoin_protocols::ProtocolError::Config(
                "internal: partitions agreed over a link that cannot open more".into(),
            ))
        })?;
        drop(psi);
        let (session, links) = partition::exchange_endpoints(link, spec, main, parts)?;
        progress.stage("running the protocol (partitions)", 0);
        let _span = crate::trace::span("partitions");
        let listener = TcpLink::is_listener(main);
        let checkpoints = recovery.as_ref().map(|(rec, _)| RecoveryAt {
            folder: rec.folder().to_path_buf(),
            fingerprint: rec.fingerprint().to_string(),
        });
        let (work, stats, resumed) = partition::run_partitions(
            spec,
            &hs,
            &opts,
            &mut table,
            session,
            links,
            listener,
            equal_sets,
            checkpoints,
            cancel,
        )?;
        worker_stats = stats;
        (work, resumed)
    } else {
        let mut work = Processor::new(spec, psi, runs_at)?;
        if equal_sets {
            work.all_keys_match();
        }
        let first = work.buckets_done();
        run_buckets(
            b,
            &mut table,
            &mut work,
            &mut recovery,
            link,
            progress,
            &mut peak,
            &mut bucket_peaks,
        )?;
        (work, first)
    };
    finish_run(
        spec,
        work,
        link,
        &table,
        progress,
        RunSoFar {
            stages,
            t,
            start,
            first,
            worker_stats,
            peak,
            bucket_peaks,
            min_check,
            equal_sets,
        },
        None,
    )
}

/// Writes the output another way than one merged file (a folder of parts): given the
/// columns and the output path, returns the rows written.
pub(crate) type WriteOutput<'w> = &'w dyn Fn(&Columns, &Path) -> Result<u64, DataError>;

/// What a run measured and decided before its last stage ([`finish_run`]).
pub(crate) struct RunSoFar {
    pub stages: Stages,
    /// When the protocol stage started.
    pub t: Instant,
    /// When the run started.
    pub start: Instant,
    /// Buckets taken from checkpoints.
    pub first: usize,
    pub worker_stats: blindjoin_link::LinkStats,
    pub peak: PeakTracker,
    pub bucket_peaks: Vec<u64>,
    pub min_check: Option<u64>,
    pub equal_sets: bool,
}

/// The last stage of a run, after every bucket: totals and checks with the peer over the main
/// link, close it, merge the sorted runs into the output, write the count and the report.
///
/// # Errors
/// Link, check and output errors.
pub(crate) fn finish_run(
    spec: &RunSpec,
    work: Processor<'_>,
    link: &mut dyn Link,
    table: &SpilledTable,
    progress: &dyn Progress,
    so_far: RunSoFar,
    write_output: Option<WriteOutput<'_>>,
) -> Result<Report, DataError> {
    let RunSoFar {
        mut stages,
        t,
        start,
        first,
        worker_stats,
        peak,
        bucket_peaks,
        min_check,
        equal_sets,
    } = so_far;
    let finish_span = crate::trace::span("finish (totals and checks with the peer)");
    let mut finished = work.finish(link)?;
    drop(finish_span);
    stages.protocol_s = finished.totals.protocol_s;
    stages.join_s = (t.elapsed().as_secs_f64() - stages.protocol_s).max(0.0);
    link.close()?;

    let t = Instant::now();
    let (intersection_count, intersection_key_count, output_path) =
        match (spec.learns_result(), &spec.output) {
            (true, Some(out)) => {
                progress.stage("writing output", 0);
                let _span = crate::trace::span("merge and write output");
                let written = match write_output {
                    Some(w) => w(&table.columns, out)?,
                    None => finished.write(&table.columns, out)?,
                };
                (
                    written as i64,
                    finished.totals.matched_keys as i64,
                    Some(out.display().to_string()),
                )
            }
            _ => (-1, -1, None),
        };
    stages.write_output_s = t.elapsed().as_secs_f64();
    let counts = finished.counts;
    if let (true, Some(path), Some(cardinality)) =
        (spec.learns_count(), &spec.count_path, counts.cardinality)
    {
        let revealed = match spec.reveal {
            Reveal::UpTo(_) => counts.revealed,
            _ => 0,
        };
        write_atomic(
            path,
            format!("real_count,final_count\n{cardinality},{revealed}\n").as_bytes(),
        )?;
    }
    stages.total_s = start.elapsed().as_secs_f64();

    let mut stats = link.stats();
    stats.bytes_sent += worker_stats.bytes_sent;
    stats.bytes_received += worker_stats.bytes_received;
    let report = Report {
        version: env!("CARGO_PKG_VERSION").to_string(),
        party: spec.parties.self_id.clone(),
        role: spec.role.to_string(),
        protocol: spec.protocol.protocol().to_string(),
        curve: spec.protocol.curve().map(|c| c.to_string()),
        mode: spec.protocol.mode().map(str::to_string),
        buckets: finished.buckets as u64,
        spilled: table.dir().is_some(),
        resumed_at_bucket: first as u64,
        original_count: table.rows as i64,
        original_key_count: finished.totals.keys as i64,
        intersection_count,
        intersection_key_count,
        peer_key_count: finished.peer_keys as i64,
        output_path,
        aligned: spec.align,
        bytes_sent: stats.bytes_sent,
        bytes_received: stats.bytes_received,
        stages,
        bucket_s: std::mem::take(&mut finished.totals.bucket_s),
        peak_rss_bytes: peak.overall(),
        bucket_peak_rss_bytes: bucket_peaks,
        cardinality: counts
            .cardinality
            .filter(|_| spec.learns_count())
            .or(min_check),
        key_sets_equal: spec.join.check_hash_digest.then_some(equal_sets),
        warnings: spec.warnings.clone(),
        revealed_key_count: match spec.reveal {
            Reveal::UpTo(_) => Some(counts.revealed),
            _ => None,
        },
    };
    if let Some(p) = spec.report_path() {
        let mut json = serde_json::to_vec_pretty(&report).unwrap_or_default();
        json.push(b'\n');
        write_atomic(&p, &json)?;
    }
    Ok(report)
}

/// Runs the buckets from the first not yet done, one after another over the main link,
/// checkpointing after each with recovery; records each bucket's peak memory.
#[allow(clippy::too_many_arguments)]
fn run_buckets(
    b: usize,
    table: &mut SpilledTable,
    work: &mut Processor<'_>,
    recovery: &mut Option<(Recovery, Checkpoint)>,
    link: &mut dyn Link,
    progress: &dyn Progress,
    peak: &mut PeakTracker,
    bucket_peaks: &mut Vec<u64>,
) -> Result<(), DataError> {
    let first = work.buckets_done();
    if b > 1 {
        progress.stage_in(
            "running the protocol (buckets)",
            (b - first) as u64,
            Unit::Buckets,
        );
    }
    // After each bucket, with recovery: sync the runs, then replace the checkpoint.
    let mut checkpoint = |work: &mut Processor<'_>| -> Result<(), DataError> {
        if let Some((rec, cp)) = recovery.as_mut() {
            cp.advance(b, work.checkpoint()?);
            rec.save(cp)?;
        }
        Ok(())
    };
    let m = b.min(table.shards());
    let per = b / m;
    let buckets_span = crate::trace::span("buckets");
    for unit in first / per..m {
        peak.restart();
        let group = table.load_unit(unit, b)?;
        for k in (unit * per).max(first)..(unit + 1) * per {
            let _span = crate::trace::bucket_span("bucket", k);
            work.bucket(link, &group.bucket(k, b), progress)?;
            checkpoint(work)?;
            bucket_peaks.push(peak.window_peak());
            peak.restart();
        }
    }
    drop(buckets_span);
    Ok(())
}

#[cfg(test)]
mod tests;
