//! What three-party and n-party runs share around their protocol: the bucket loop (load a
//! unit of the table, group each bucket's rows by key, run the protocol on the unique keys,
//! keep the matched rows in sorted runs), then the output and the report.
//!
//! The protocol is a closure, called once per bucket with the bucket's unique key digests; it
//! swaps the bucket's key counts with the others as its protocol requires and returns the
//! indices of the digests in the result (`None` at a party that learns nothing) and how many
//! keys the other parties had in the bucket.

use crate::error::DataError;
use crate::pipeline::process::key_groups;
use crate::pipeline::report::{Report, Stages, peak_rss_bytes};
use crate::pipeline::runs::{Runs, SortBy};
use crate::pipeline::spill::{GroupBucket, SpilledTable};
use crate::pipeline::three_party::ThreePartyOutcome;
use crate::pipeline::two_party::{Prepared, prepare};
use crate::session::{self, Connect, Links};
use crate::spec::RunSpec;
use crate::table::writer::RowWriter;
use blindjoin_link::{Cancel, LinkError, LinkStats, TcpOptions};
use blindjoin_protocols::{ItemDigest, Phases, Progress, ProtocolError, PsiOptions, Unit};
use std::path::PathBuf;
use std::time::Instant;

/// Reads and keys this party's input while `establish` brings up its links to the others (both
/// take time, and neither needs the other), then hands both to `run`, in a
/// [`session`](crate::session) (its abort and cancel policy); `addr` (ours) and `others` (who
/// we wait for) name a connect timeout.
///
/// # Errors
/// The input's, the connection's or `run`'s error; a cancelled run.
pub(crate) fn connect_and_run<Ls: Links>(
    spec: &RunSpec,
    addr: &str,
    others: &str,
    establish: impl FnOnce(TcpOptions, Cancel) -> Result<Ls, LinkError> + Send + 'static,
    progress: &dyn Progress,
    cancel: &Cancel,
    run: impl FnOnce(Prepared, &mut Ls) -> Result<ThreePartyOutcome, DataError>,
) -> Result<ThreePartyOutcome, DataError> {
    let base = TcpOptions {
        self_id: String::new(),
        self_addr: String::new(),
        peer_id: String::new(),
        peer_addr: String::new(),
        connect_timeout: spec.connect_timeout,
        recv_timeout: spec.recv_timeout,
        silence_timeout: spec.silence_timeout,
        tls: None,
        shape: spec.link_shape,
    };
    let connect = Connect::with(
        others.into(),
        addr.into(),
        spec.connect_timeout,
        move |cancel: &Cancel| establish(base, cancel.clone()).map_err(DataError::from),
    );
    session::run(Some(connect), cancel, &spec.input, |s| {
        let prepared = prepare(spec, progress)?;
        let links = {
            let _span = crate::trace::span("connect");
            s.ready()?
        };
        run(prepared, links)
    })
}

/// One bucket's result: the indices of its digests in the intersection (when this party
/// learns it) and the other parties' key count in the bucket.
pub(crate) type BucketResult = (Option<Vec<usize>>, u64);

/// What the bucket loop produced, for the output and the report.
pub(crate) struct Buckets {
    b: usize,
    output: Option<PathBuf>,
    runs: Option<Runs>,
    keys: u64,
    matched_keys: u64,
    peer_keys: u64,
    bucket_s: Vec<f64>,
}

/// Runs the protocol on each of `b` buckets of `table`; `learns` says whether this party
/// writes the intersection (then the spec must name an output). Matched rows go to sorted
/// runs named `runs_name` beside a spilled table, else in memory.
///
/// # Errors
/// A missing output path, the protocol's errors, run-file errors.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_buckets(
    spec: &RunSpec,
    table: &mut SpilledTable,
    b: usize,
    learns: bool,
    runs_name: &str,
    stages: &mut Stages,
    progress: &dyn Progress,
    mut protocol: impl FnMut(
        usize,
        &[ItemDigest],
        &PsiOptions,
        &dyn Progress,
    ) -> Result<BucketResult, DataError>,
) -> Result<Buckets, DataError> {
    let output = match (learns, &spec.output) {
        (false, _) => None,
        (true, Some(out)) => Some(out.clone()),
        (true, None) => {
            return Err(DataError::Config(crate::error::ConfigError::Invalid {
                field: "psi_config.output_config.path".into(),
                message: "missing; this party receives the intersection".into(),
            }));
        }
    };
    let sort = if spec.align {
        SortBy::Key
    } else {
        SortBy::Bytes
    };
    let mut runs = match (&output, table.dir()) {
        (None, _) => None,
        (Some(_), Some(dir)) => Some(Runs::on_disk(dir.join(runs_name), sort)?),
        (Some(_), None) => Some(Runs::in_memory(sort)),
    };
    // ⌈log2 B⌉ more tag bits, as bucketed two-party runs add, so 2^-40 holds for the whole run.
    let opts = PsiOptions {
        batch_size: spec.batch_size,
        extra_stat_bits: usize::BITS - (b - 1).leading_zeros(),
        ..PsiOptions::default()
    };
    if b > 1 {
        progress.stage_in("running the protocol (buckets)", b as u64, Unit::Buckets);
    }
    let phases = Phases(progress);
    let bucket_progress: &dyn Progress = if b > 1 { &phases } else { progress };
    let (mut keys, mut matched_keys, mut peer_keys) = (0u64, 0u64, 0u64);
    let mut bucket_s = Vec::with_capacity(b);
    let m = b.min(table.shards());
    let per = b / m;
    let _buckets_span = crate::trace::span("buckets");
    for unit in 0..m {
        let t_load = Instant::now();
        let group = table.load_unit(unit, b)?;
        stages.join_s += t_load.elapsed().as_secs_f64();
        for k in unit * per..(unit + 1) * per {
            let _bucket_span = crate::trace::bucket_span("bucket", k);
            let t_bucket = Instant::now();
            let rows = group.bucket(k, b);
            let (ends, digests) = key_groups(&rows);
            keys += digests.len() as u64;
            let t_psi = Instant::now();
            let protocol_span = crate::trace::bucket_span("protocol", k);
            let (found, theirs) = protocol(k, &digests, &opts, bucket_progress)?;
            drop(protocol_span);
            let _join_span = crate::trace::bucket_span("join", k);
            peer_keys += theirs;
            let psi_s = t_psi.elapsed().as_secs_f64();
            stages.protocol_s += psi_s;
            if let (Some(mut found), Some(runs)) = (found, runs.as_mut()) {
                found.sort_unstable();
                found.dedup();
                if found.last().is_some_and(|&g| g >= digests.len()) {
                    return Err(DataError::Protocol(ProtocolError::Unreachable(
                        "the protocol returned an item index out of range",
                    )));
                }
                matched_keys += found.len() as u64;
                push_matches(runs, &rows, &ends, &found, spec.align)?;
                runs.end_run();
            }
            if b > 1 {
                progress.advance(1);
            }
            let took = t_bucket.elapsed().as_secs_f64();
            stages.join_s += (took - psi_s).max(0.0);
            bucket_s.push(took);
        }
    }
    Ok(Buckets {
        b,
        output,
        runs,
        keys,
        matched_keys,
        peer_keys,
        bucket_s,
    })
}

/// Who this party is and what it ran, for its report.
pub(crate) struct RunLabel {
    pub party: String,
    pub receiver: bool,
    pub protocol: String,
    pub curve: Option<String>,
    pub mode: Option<String>,
}

/// After the links are closed: merges the matched runs into the output (a party that learns
/// the result), then writes the report (bytes summed over `per_link`).
///
/// # Errors
/// Output and report errors.
pub(crate) fn write_and_report(
    spec: &RunSpec,
    table: &SpilledTable,
    done: Buckets,
    label: RunLabel,
    mut stages: Stages,
    start: Instant,
    per_link: Vec<(String, LinkStats)>,
) -> Result<ThreePartyOutcome, DataError> {
    let t_write = Instant::now();
    let mut written = (-1i64, -1i64, None);
    if let (Some(out), Some(mut runs)) = (done.output, done.runs) {
        let _span = crate::trace::span("merge and write output");
        let mut w = RowWriter::create(
            &out,
            spec.output_format,
            &table.columns,
            &spec.join.null_rep,
        )?;
        let n = runs.merge_into(&mut w)?;
        w.commit()?;
        written = (
            n as i64,
            done.matched_keys as i64,
            Some(out.display().to_string()),
        );
    }
    stages.write_output_s = t_write.elapsed().as_secs_f64();
    stages.total_s = start.elapsed().as_secs_f64();
    let (sent, received) = per_link.iter().fold((0, 0), |(s, r), (_, st)| {
        (s + st.bytes_sent, r + st.bytes_received)
    });
    let report = Report {
        version: env!("CARGO_PKG_VERSION").to_string(),
        party: label.party,
        role: if label.receiver {
            "ROLE_RECEIVER"
        } else {
            "ROLE_SENDER"
        }
        .into(),
        protocol: label.protocol,
        curve: label.curve,
        mode: label.mode,
        buckets: done.b as u64,
        spilled: table.dir().is_some(),
        resumed_at_bucket: 0,
        original_count: table.rows as i64,
        original_key_count: done.keys as i64,
        intersection_count: written.0,
        intersection_key_count: written.1,
        peer_key_count: done.peer_keys as i64,
        output_path: written.2,
        aligned: spec.align,
        bytes_sent: sent,
        bytes_received: received,
        stages,
        bucket_s: done.bucket_s,
        peak_rss_bytes: peak_rss_bytes(),
        bucket_peak_rss_bytes: Vec::new(),
        cardinality: None,
        revealed_key_count: None,
        key_sets_equal: None,
        warnings: spec.warnings.clone(),
    };
    if let Some(p) = spec.report_path() {
        let mut json = serde_json::to_vec_pretty(&report).unwrap_or_default();
        json.push(b'\n');
        crate::table::output::write_atomic(&p, &json)?;
    }
    Ok(ThreePartyOutcome {
        report,
        links: per_link,
    })
}

/// Appends a bucket's matched groups (`found`, indices into `ends`) to `runs`: by key when
/// aligned, else by row number, so merging the buckets' runs gives one global order.
pub(crate) fn push_matches(
    runs: &mut Runs,
    rows: &GroupBucket<'_>,
    ends: &[usize],
    found: &[usize],
    align: bool,
) -> Result<(), DataError> {
    let range = |g: usize| (if g == 0 { 0 } else { ends[g - 1] }, ends[g]);
    if align {
        // Groups in index order are in key order (the bucket's rows are).
        for (a, b) in found.iter().map(|&g| range(g)) {
            runs.push(rows.key(a), 1, true, (a..b).map(|i| rows.raw(i)))?;
        }
    } else {
        let mut keep: Vec<usize> = found
            .iter()
            .flat_map(|&g| {
                let (a, b) = range(g);
                a..b
            })
            .collect();
        keep.sort_unstable_by_key(|&i| rows.row(i));
        for i in keep {
            runs.push(
                &rows.row(i).to_be_bytes(),
                1,
                true,
                std::iter::once(rows.raw(i)),
            )?;
        }
    }
    Ok(())
}
