//! One party's run: read → key → deduplicate → connect → handshake → protocol → join → align →
//! write → report. The protocol is whatever [`RunSpec::protocol`] names; this module only hands it
//! digests and gets back indices.

use crate::bucket::run_bucketed;
use crate::csv::write_record;
use crate::error::DataError;
use crate::join::{JoinInput, JoinPlan, JoinType, exchange_counts};
use crate::output::{AtomicFile, write_atomic};
use crate::report::{Report, Stages, peak_rss_bytes};
use crate::spec::RunSpec;
use crate::table::{Table, UniqueKeys, sort_rows_by_key};
use blindjoin_crypto::item_digest;
use blindjoin_link::{Link, LinkError, TcpLink, TcpOptions};
use blindjoin_protocols::{Hello, Progress, ProtocolError, PsiOptions, handshake};
use rayon::prelude::*;
use std::path::Path;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// How long a party whose input is bad keeps trying to reach the peer to tell it so.
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// Runs one party over TCP as `spec` says.
///
/// # Errors
/// Any [`DataError`]; the peer is told about our failure when the link is up.
pub fn run(spec: &RunSpec, progress: &dyn Progress) -> Result<Report, DataError> {
    let start = Instant::now();
    let opts = TcpOptions {
        self_id: spec.parties.self_id.clone(),
        self_addr: spec.parties.self_addr.clone(),
        peer_id: spec.parties.peer_id.clone(),
        peer_addr: spec.parties.peer_addr.clone(),
        connect_timeout: spec.connect_timeout,
        recv_timeout: spec.recv_timeout,
        tls: spec.tls.clone(),
        shape: spec.link_shape,
    };
    // Connect while reading the input: both take time, and neither needs the other.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("connect".into())
        .spawn(move || {
            let _ = tx.send(TcpLink::establish(&opts));
        })
        .map_err(|source| DataError::Io {
            path: spec.input.clone(),
            action: "starting the connect thread",
            source,
        })?;

    let prepared = prepare(spec, progress);
    let wait = if prepared.is_ok() {
        spec.connect_timeout + Duration::from_secs(5)
    } else {
        ABORT_GRACE
    };
    let connected = match rx.recv_timeout(wait) {
        Ok(r) => r,
        Err(_) => Err(LinkError::ConnectTimeout {
            peer: spec.parties.peer_id.clone(),
            addr: spec.parties.peer_addr.clone(),
            waited: wait,
            last: "the connect attempt did not finish".into(),
        }),
    };
    let (prepared, mut link) = match (prepared, connected) {
        (Ok(prepared), Ok(link)) => (prepared, link),
        (Err(e), Ok(mut link)) => {
            link.abort(&e.to_string());
            return Err(e);
        }
        (Err(e), Err(_)) => return Err(e),
        (Ok(_), Err(e)) => return Err(e.into()),
    };
    match run_on_link(spec, prepared, &mut link, progress, start) {
        Ok(report) => Ok(report),
        Err(e) => {
            if !matches!(
                e,
                DataError::Link(_)
                    | DataError::Protocol(blindjoin_protocols::ProtocolError::Link(_))
            ) {
                link.abort(&e.to_string());
            }
            Err(e)
        }
    }
}

/// The input, read and keyed, before any network traffic.
pub struct Prepared {
    table: Table,
    unique: crate::table::UniqueKeys,
    secret_key: Option<Zeroizing<Vec<u8>>>,
    read_s: f64,
}

/// Reads and keys the input and loads the secret key, if any.
///
/// # Errors
/// Bad input or key file.
pub fn prepare(spec: &RunSpec, progress: &dyn Progress) -> Result<Prepared, DataError> {
    let t = Instant::now();
    progress.stage("reading input", 0);
    let table = Table::read(&spec.input, &spec.keys)?;
    let unique = table.unique_keys();
    let secret_key = match &spec.secret_key_path {
        None => None,
        Some(p) => Some(Zeroizing::new(std::fs::read(p).map_err(|source| {
            DataError::Io {
                path: p.clone(),
                action: "reading the secret key file",
                source,
            }
        })?)),
    };
    Ok(Prepared {
        table,
        unique,
        secret_key,
        read_s: t.elapsed().as_secs_f64(),
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
    let Prepared {
        table,
        unique,
        secret_key,
        read_s,
    } = prepared;
    let mut stages = Stages {
        read_input_s: read_s,
        ..Stages::default()
    };

    let t = Instant::now();
    let hello = Hello::new(
        spec.protocol,
        spec.curve,
        spec.role,
        spec.keys.len() as u32,
        &spec.join.handshake_name(),
        spec.broadcast_result,
        unique.digests.len() as u64,
    )
    .with_variant(&spec.variant)
    .with_bucket_size(spec.bucket_size);
    let hs = handshake(link, hello)?;
    stages.connect_s = (start.elapsed().as_secs_f64() - read_s).max(t.elapsed().as_secs_f64());

    let t = Instant::now();
    let opts = PsiOptions {
        batch_size: spec.batch_size,
        secret_key,
        ..PsiOptions::default()
    };
    let result = run_bucketed(link, &hs, &opts, &unique.digests, progress)?;
    stages.protocol_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    // With the result on both sides, the join needs the peer's counts (and the digest check
    // its digest) before the link closes.
    let layout = match &result.intersection {
        Some(keys) if spec.broadcast_result => {
            Some(joined_layout(spec, &table, &unique, keys, link)?)
        }
        _ => None,
    };
    link.close()?;
    let (intersection_count, intersection_key_count, output_path) =
        match (&result.intersection, &spec.output) {
            (Some(keys), Some(out)) => {
                let plan = match layout {
                    Some(plan) => plan,
                    // Receiver only (inner join, checked by the config): its own matched rows.
                    None => {
                        let mut rows: Vec<u32> = keys
                            .iter()
                            .flat_map(|&k| unique.rows_of(k).iter().copied())
                            .collect();
                        order_rows(spec, &table, &mut rows);
                        JoinPlan::own_rows(rows)
                    }
                };
                progress.stage("writing output", plan.len());
                write_rows(&table, &plan, &spec.join.null_rep, out)?;
                (
                    plan.len() as i64,
                    keys.len() as i64,
                    Some(out.display().to_string()),
                )
            }
            (Some(_), None) => {
                return Err(DataError::Config(crate::error::ConfigError::Invalid {
                    field: "psi_config.output_config.path".into(),
                    message: "missing; this party receives the intersection".into(),
                }));
            }
            (None, _) => (-1, -1, None),
        };
    stages.write_output_s = t.elapsed().as_secs_f64();
    stages.total_s = start.elapsed().as_secs_f64();

    let stats = link.stats();
    let report = Report {
        version: env!("CARGO_PKG_VERSION").to_string(),
        party: spec.parties.self_id.clone(),
        role: spec.role.to_string(),
        protocol: spec.protocol.to_string(),
        curve: spec.curve.map(|c| c.to_string()),
        mode: Some(spec.variant.clone()).filter(|v| !v.is_empty()),
        buckets: crate::bucket::bucket_count(
            hs.ours.item_count,
            hs.theirs.item_count,
            spec.bucket_size,
        )? as u64,
        original_count: table.len() as i64,
        original_key_count: unique.digests.len() as i64,
        intersection_count,
        intersection_key_count,
        peer_key_count: hs.theirs.item_count as i64,
        output_path,
        aligned: spec.align,
        bytes_sent: stats.bytes_sent,
        bytes_received: stats.bytes_received,
        stages,
        peak_rss_bytes: peak_rss_bytes(),
    };
    if let Some(p) = spec.report_path() {
        let mut json = serde_json::to_vec_pretty(&report).unwrap_or_default();
        json.push(b'\n');
        write_atomic(&p, &json)?;
    }
    Ok(report)
}

/// Sorts rows by key when aligning (stable for equal keys), else into input order.
fn order_rows(spec: &RunSpec, table: &Table, rows: &mut [u32]) {
    if spec.align {
        sort_rows_by_key(table, rows);
    } else {
        rows.par_sort_unstable();
    }
}

/// Both parties know the intersection: check its digest if asked, exchange row counts, and lay
/// out this party's side of the join (see [`crate::join`]).
fn joined_layout(
    spec: &RunSpec,
    table: &Table,
    unique: &UniqueKeys,
    keys: &[usize],
    link: &mut dyn Link,
) -> Result<JoinPlan, DataError> {
    if spec.join.check_hash_digest {
        check_intersection_digest(link, unique, keys)?;
    }
    let mut matched_flag = vec![false; unique.digests.len()];
    for &k in keys {
        if let Some(f) = matched_flag.get_mut(k) {
            *f = true;
        }
    }
    let mut unmatched: Vec<u32> = (0..unique.digests.len())
        .filter(|&k| !matched_flag[k])
        .flat_map(|k| unique.rows_of(k).iter().copied())
        .collect();
    order_rows(spec, table, &mut unmatched);
    if !spec.align {
        // Unaligned: our own rows of the join, in input order, with no pairs or padding.
        let am_left = spec.role == spec.join.left_side;
        let keep_unmatched = match spec.join.join {
            JoinType::Inner => false,
            JoinType::Left => am_left,
            JoinType::Right => !am_left,
            JoinType::Full | JoinType::Difference => true,
        };
        let mut rows: Vec<u32> = if spec.join.join == JoinType::Difference {
            Vec::new()
        } else {
            keys.iter()
                .flat_map(|&k| unique.rows_of(k).iter().copied())
                .collect()
        };
        if keep_unmatched {
            rows.extend_from_slice(&unmatched);
        }
        rows.par_sort_unstable();
        return Ok(JoinPlan::own_rows(rows));
    }
    // Matched keys in key order (the order both parties share): sort their first rows by key,
    // then map each first row back to its key.
    let mut key_of_first = vec![u32::MAX; table.len()];
    let mut firsts: Vec<u32> = Vec::with_capacity(keys.len());
    for &k in keys {
        let first = first_row(unique, k);
        key_of_first[first] = k as u32;
        firsts.push(first as u32);
    }
    sort_rows_by_key(table, &mut firsts);
    let mut matched_rows = Vec::new();
    let mut matched_ends = Vec::with_capacity(keys.len());
    let mut counts = Vec::with_capacity(keys.len());
    for &f in &firsts {
        let rows = unique.rows_of(key_of_first[f as usize] as usize);
        matched_rows.extend_from_slice(rows);
        matched_ends.push(matched_rows.len());
        // DIFFERENCE writes no pairs: send 1 for every key rather than reveal the counts.
        counts.push(if spec.join.join == JoinType::Difference {
            1
        } else {
            rows.len() as u32
        });
    }
    drop(key_of_first);
    let (peer_counts, peer_unmatched) = exchange_counts(link, &counts, unmatched.len() as u64)?;
    JoinPlan::new(JoinInput {
        join: spec.join.join,
        am_left: spec.role == spec.join.left_side,
        matched_rows,
        matched_ends,
        peer_counts,
        unmatched,
        peer_unmatched,
    })
}

fn first_row(unique: &UniqueKeys, k: usize) -> usize {
    unique.rows_of(k).first().copied().unwrap_or(0) as usize
}

/// `check_hash_digest`: both parties hash their intersection's key digests (sorted) and compare.
fn check_intersection_digest(
    link: &mut dyn Link,
    unique: &UniqueKeys,
    keys: &[usize],
) -> Result<(), DataError> {
    let mut all = Vec::with_capacity(16 * keys.len() + 32);
    all.extend_from_slice(b"blindjoin/intersection-digest/v1");
    for &k in keys {
        all.extend_from_slice(&unique.digests[k]);
    }
    let ours = item_digest(&all);
    link.send(&ours)?;
    let theirs = link.recv()?;
    if theirs.as_slice() != ours.as_slice() {
        return Err(DataError::Protocol(ProtocolError::PeerMisbehaved(
            "check_hash_digest: the two parties' intersections differ (a bug, a corrupted run, \
             or a dishonest peer); no output was written"
                .into(),
        )));
    }
    Ok(())
}

/// Header (normalised quoting), then the plan's rows: ours byte-for-byte as in the input, and
/// the null row (`null_rep` in every column) for padding.
fn write_rows(table: &Table, plan: &JoinPlan, null_rep: &str, out: &Path) -> Result<(), DataError> {
    let mut f = AtomicFile::create(out)?;
    let mut header = Vec::new();
    write_record(&mut header, table.header.iter().map(|h| h.as_bytes()));
    f.write_all(&header)?;
    let mut null_row = Vec::new();
    write_record(
        &mut null_row,
        table.header.iter().map(|_| null_rep.as_bytes()),
    );
    let mut buf = Vec::with_capacity(1 << 20);
    for row in plan.rows() {
        match row {
            Some(r) => {
                buf.extend_from_slice(table.raw_row(r as usize));
                buf.push(b'\n');
            }
            None => buf.extend_from_slice(&null_row),
        }
        if buf.len() >= 1 << 20 {
            f.write_all(&buf)?;
            buf.clear();
        }
    }
    f.write_all(&buf)?;
    f.commit()
}
