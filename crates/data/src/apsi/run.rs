//! One party's labeled-PSI run. The sender reads its source and builds the DB(s) (or loads
//! them), saves them when asked, and serves the receiver's queries; the receiver reads its
//! query table, sends its plan of queries (which bucket each is for), runs each query and
//! writes the rows found with their labels.
//!
//! The plan ([`ids::APSI_ROUNDS`]): the bucket count, then per query its bucket index (in
//! non-decreasing order) and its number of unique keys. A bucket may take several queries when
//! the receiver has more keys in it than `query_batch_size`. The sender checks the count
//! against its own and every index against it before serving, and charges each bucket's keys
//! to that bucket's DB key before evaluating any of them ([`crate::ub::budget`]: each OPRF
//! evaluation lets the receiver test one key against the DB, and the key serves every later
//! session); each query may then evaluate at most the keys it announced.

use super::{ApsiReport, ApsiRole, ApsiSpec, SenderTask, bucket_of, db_file, source};
use crate::error::{ConfigError, DataError};
use crate::session::{self, Connect, Session};
use crate::table::csv::write_record;
use crate::table::output::AtomicFile;
use crate::ub::budget;
use blindjoin_apsi::item::MAX_LABEL_LEN;
use blindjoin_apsi::{ApsiParams, SenderDb};
use blindjoin_crypto::ItemDigest;
use blindjoin_link::wire::ids;
use blindjoin_link::{Cancel, Link, TcpLink};
use blindjoin_protocols::Progress;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Most queries one run may plan: a bucket count of 2^20 (far above SecretFlow's examples)
/// with one query each.
pub const MAX_ROUNDS: usize = 1 << 20;

/// Runs one party's labeled-PSI task as `spec` says.
///
/// # Errors
/// Any [`DataError`]; the peer is told about our failure when the link is up.
pub fn run_apsi(
    spec: &ApsiSpec,
    progress: &dyn Progress,
    cancel: &Cancel,
) -> Result<ApsiReport, DataError> {
    match spec.threads {
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map_err(|e| {
                DataError::Config(ConfigError::Invalid {
                    field: "threads".into(),
                    message: format!("cannot start {n} threads: {e}"),
                })
            })?
            .install(|| run_inner(spec, progress, cancel)),
        None => run_inner(spec, progress, cancel),
    }
}

fn run_inner(
    spec: &ApsiSpec,
    _progress: &dyn Progress,
    cancel: &Cancel,
) -> Result<ApsiReport, DataError> {
    let start = Instant::now();
    let mut report = ApsiReport {
        version: env!("CARGO_PKG_VERSION").into(),
        party: spec.link.self_id(),
        role: spec.role_name().into(),
        original_count: -1,
        db_items: -1,
        intersection_count: -1,
        ..ApsiReport::default()
    };
    let connect = spec.link.tcp_options().map(Connect::tcp);
    session::run(connect, cancel, Path::new("."), |peer| {
        match &spec.role {
            ApsiRole::Sender(task) => sender(spec, task, peer, &mut report)?,
            ApsiRole::Receiver {
                query,
                output,
                params_file,
            } => receiver(
                spec,
                query,
                output,
                params_file.as_deref(),
                peer,
                &mut report,
            )?,
        }
        if let Some(l) = peer.connected() {
            let s = l.stats();
            report.bytes_sent = s.bytes_sent;
            report.bytes_received = s.bytes_received;
            l.close()?;
        }
        Ok::<(), DataError>(())
    })?;
    report.total_s = start.elapsed().as_secs_f64();
    report.peak_rss_bytes = crate::pipeline::report::peak_rss_bytes();
    if let Some(p) = &spec.report {
        crate::pipeline::report::write_json(p, &report)?;
    }
    Ok(report)
}

/// The run's link to its peer.
type Peer = Session<TcpLink>;

/// Reads APSI's parameter JSON at `path`; `field` names the config field in errors.
pub(crate) fn read_params(path: &Path, field: &str) -> Result<ApsiParams, DataError> {
    let text = std::fs::read_to_string(path).map_err(|e| DataError::ApsiInput {
        path: path.to_path_buf(),
        problem: format!("cannot read the parameters ({field}): {e}"),
    })?;
    ApsiParams::from_json(&text).map_err(|e| {
        DataError::Config(ConfigError::Invalid {
            field: field.to_string(),
            message: format!("{}: {e}", path.display()),
        })
    })
}

/// Splits `items` (and their labels) into `count` buckets by [`bucket_of`].
type Split = Vec<(Vec<ItemDigest>, Option<Vec<Vec<u8>>>)>;

fn split(items: Vec<ItemDigest>, labels: Option<Vec<Vec<u8>>>, count: usize) -> Split {
    let mut out: Split = (0..count)
        .map(|_| (Vec::new(), labels.as_ref().map(|_| Vec::new())))
        .collect();
    let mut labels = labels.map(Vec::into_iter);
    for d in items {
        let b = bucket_of(&d, count);
        let label = labels.as_mut().and_then(Iterator::next);
        if let Some(slot) = out.get_mut(b) {
            slot.0.push(d);
            if let (Some(l), Some(v)) = (slot.1.as_mut(), label) {
                l.push(v);
            }
        }
    }
    out
}

fn sender(
    spec: &ApsiSpec,
    task: &SenderTask,
    peer: &mut Peer,
    report: &mut ApsiReport,
) -> Result<(), DataError> {
    let setup = Instant::now();
    let bucket_count = spec.buckets.as_ref().map_or(1, |b| b.count);
    let folder = spec.buckets.as_ref().and_then(|b| b.folder.clone());
    // In memory: one DB per bucket (built), or loaded one at a time when served.
    let mut built: Vec<Option<SenderDb>> = Vec::new();
    let mut db_path_single = None;
    match task {
        SenderTask::Build {
            source,
            params_file,
            sdb_out,
            save_db_only,
            nonce_len,
            form,
        } => {
            let params = read_params(params_file, "apsi_sender_config.params_file")?;
            let src = source::read_source(source, MAX_LABEL_LEN)?;
            report.original_count = src.items.len() as i64;
            report.db_items = src.items.len() as i64;
            report.label_bytes = src.label_len as u64;
            let nonce = if src.labels.is_some() { *nonce_len } else { 0 };
            let label_len = src.label_len;
            for (i, (items, labels)) in split(src.items, src.labels, bucket_count)
                .into_iter()
                .enumerate()
            {
                let db =
                    SenderDb::build(params.clone(), &items, labels.as_deref(), label_len, nonce)
                        .map_err(|e| match e {
                            blindjoin_apsi::ApsiError::Input(m) => DataError::ApsiInput {
                                path: source.clone(),
                                problem: format!(
                                    "does not fit the preset in {}: {m}",
                                    params_file.display()
                                ),
                            },
                            other => DataError::Apsi(other),
                        })?;
                match (&folder, sdb_out) {
                    (Some(f), _) => db_file::save(&db, &db_file::bucket_path(f, i), *form)?,
                    (None, Some(p)) => db_file::save(&db, p, *form)?,
                    (None, None) => {}
                }
                built.push(if *save_db_only { None } else { Some(db) });
            }
            report.db_path = folder
                .as_ref()
                .or(sdb_out.as_ref())
                .map(|p| p.display().to_string());
            if *save_db_only {
                report.setup_s = setup.elapsed().as_secs_f64();
                return Ok(());
            }
        }
        SenderTask::Load { db_file: path } => {
            if folder.is_none() {
                let p = path.as_ref().ok_or(DataError::Protocol(
                    blindjoin_protocols::ProtocolError::Unreachable("no db_file"),
                ))?;
                let db = db_file::load(p)?;
                report.db_items = db.item_count() as i64;
                report.label_bytes = db.label_len() as u64;
                built.push(Some(db));
                db_path_single = Some(p.display().to_string());
            }
            report.db_path = folder
                .as_ref()
                .map(|f| f.display().to_string())
                .or(db_path_single);
        }
    }
    report.setup_s = setup.elapsed().as_secs_f64();
    let link = peer.link()?;
    let online = Instant::now();
    let rounds = decode_rounds(&link.recv()?, bucket_count)?;
    let asked = evaluations_per_bucket(&rounds);
    let cap = spec.max_query_items;
    // Where each bucket's DB (and so its key's count) is kept; `None`: a fresh key.
    let key_file = |b: usize| -> Option<PathBuf> {
        match (&folder, task) {
            (Some(f), _) => Some(db_file::bucket_path(f, b)),
            (None, SenderTask::Build { sdb_out, .. }) => sdb_out.clone(),
            (None, SenderTask::Load { db_file: path }) => path.clone(),
        }
    };
    let charge = |b: usize, db: &SenderDb| -> Result<(), DataError> {
        let n = asked.get(&b).copied().unwrap_or(0);
        let path = key_file(b);
        budget::charge_to(
            &budget::APSI,
            path.as_deref(),
            &db_file::key_check(db)?,
            cap,
            n,
        )
        .map(drop)
        .map_err(db_file::refusal)
    };
    // The DBs in memory are charged before anything is evaluated; one loaded from the bucket
    // folder as soon as it is loaded, before its first query.
    for &b in asked.keys() {
        if let Some(db) = built.get(b).and_then(Option::as_ref) {
            charge(b, db)?;
        }
    }
    let mut loaded: Option<(usize, SenderDb)> = None;
    let mut used = 0u64;
    for (b, items) in rounds {
        let db = match built.get(b).and_then(Option::as_ref) {
            Some(db) => db,
            None => {
                if loaded.as_ref().map(|(i, _)| *i) != Some(b) {
                    let f = folder.as_ref().ok_or(DataError::Protocol(
                        blindjoin_protocols::ProtocolError::Unreachable("no DB for a bucket"),
                    ))?;
                    let db = db_file::load(&db_file::bucket_path(f, b))?;
                    charge(b, &db)?;
                    loaded = Some((b, db));
                    used += 1;
                }
                match &loaded {
                    Some((_, db)) => db,
                    None => continue,
                }
            }
        };
        blindjoin_apsi::serve(link, db, items)?;
    }
    report.buckets_used = if folder.is_some() && built.is_empty() {
        used
    } else {
        bucket_count as u64
    };
    report.online_s = online.elapsed().as_secs_f64();
    Ok(())
}

/// One planned query: its bucket and its number of unique keys.
type Round = (usize, usize);

fn encode_rounds(bucket_count: usize, rounds: &[Round]) -> Vec<u8> {
    let mut m = Vec::with_capacity(1 + 8 + 8 * rounds.len());
    m.extend_from_slice(ids::APSI_ROUNDS);
    m.extend_from_slice(&(bucket_count as u32).to_le_bytes());
    m.extend_from_slice(&(rounds.len() as u32).to_le_bytes());
    for &(b, items) in rounds {
        m.extend_from_slice(&(b as u32).to_le_bytes());
        m.extend_from_slice(&(items as u32).to_le_bytes());
    }
    m
}

/// The OPRF evaluations the plan asks of each bucket's key.
pub(crate) fn evaluations_per_bucket(rounds: &[Round]) -> BTreeMap<usize, u64> {
    let mut out = BTreeMap::new();
    for &(b, items) in rounds {
        *out.entry(b).or_insert(0u64) += items as u64;
    }
    out
}

fn peer(m: String) -> DataError {
    DataError::Apsi(blindjoin_apsi::ApsiError::PeerMisbehaved(m))
}

/// The receiver's plan, checked against our bucket count (hostile input).
pub(crate) fn decode_rounds(msg: &[u8], bucket_count: usize) -> Result<Vec<Round>, DataError> {
    let body = msg
        .strip_prefix(ids::APSI_ROUNDS)
        .ok_or_else(|| peer("sent another message where its plan of queries was due".into()))?;
    let u32_at = |i: usize| -> Option<usize> {
        let b = body.get(i..i + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let (Some(count), Some(n)) = (u32_at(0), u32_at(4)) else {
        return Err(peer("sent a truncated plan of queries".into()));
    };
    if count != bucket_count {
        return Err(DataError::Config(ConfigError::Invalid {
            field: "experimental_bucket_cnt".into(),
            message: format!(
                "the receiver uses {count} bucket(s), this sender {bucket_count}; both must \
                 give the same experimental_enable_bucketize and experimental_bucket_cnt"
            ),
        }));
    }
    if n > MAX_ROUNDS || body.len() != 8 + 8 * n {
        return Err(peer(format!(
            "sent a plan of {n} queries in {} bytes (at most {MAX_ROUNDS})",
            body.len()
        )));
    }
    let mut out: Vec<Round> = Vec::with_capacity(n);
    for i in 0..n {
        let b = u32_at(8 + 8 * i).unwrap_or(usize::MAX);
        let items = u32_at(12 + 8 * i).unwrap_or(usize::MAX);
        if b >= bucket_count || out.last().is_some_and(|&(l, _)| b < l) {
            return Err(peer(format!(
                "planned a query for bucket {b} out of order or out of 0..{bucket_count}"
            )));
        }
        out.push((b, items));
    }
    Ok(out)
}

fn receiver(
    spec: &ApsiSpec,
    query: &Path,
    output: &Path,
    params_file: Option<&Path>,
    peer: &mut Peer,
    report: &mut ApsiReport,
) -> Result<(), DataError> {
    let setup = Instant::now();
    let params = params_file
        .map(|p| read_params(p, "apsi_receiver_config.params_file"))
        .transpose()?;
    let q = source::read_query(query)?;
    report.original_count = q.keys.len() as i64;
    let bucket_count = spec.buckets.as_ref().map_or(1, |b| b.count);
    let batch = spec.query_batch_size.max(1);
    // Unique items per bucket, in bucket order; with a batch size, a bucket with more than
    // `batch` items takes several queries.
    let mut per_bucket: Vec<Vec<ItemDigest>> = vec![Vec::new(); bucket_count];
    let mut uniq = q.items.clone();
    uniq.sort_unstable();
    uniq.dedup();
    for d in uniq {
        if let Some(v) = per_bucket.get_mut(bucket_of(&d, bucket_count)) {
            v.push(d);
        }
    }
    let mut rounds: Vec<(usize, &[ItemDigest])> = Vec::new();
    for (b, items) in per_bucket.iter().enumerate() {
        if spec.query_batch_size >= 1 {
            for c in items.chunks(batch) {
                rounds.push((b, c));
            }
        } else if !items.is_empty() {
            rounds.push((b, items));
        }
    }
    report.buckets_used = per_bucket.iter().filter(|v| !v.is_empty()).count() as u64;
    report.setup_s = setup.elapsed().as_secs_f64();
    let link = peer.link()?;
    let online = Instant::now();
    let plan: Vec<Round> = rounds.iter().map(|(b, items)| (*b, items.len())).collect();
    link.send(&encode_rounds(bucket_count, &plan))?;
    let mut found: std::collections::HashMap<ItemDigest, Vec<u8>> =
        std::collections::HashMap::new();
    for (_, items) in &rounds {
        let answers = blindjoin_apsi::query(link, params.as_ref(), items).map_err(|e| match e {
            e @ blindjoin_apsi::ApsiError::PeerParamsTooCostly { .. } => {
                DataError::Config(ConfigError::Invalid {
                    field: "apsi_receiver_config.params_file".into(),
                    message: e.to_string(),
                })
            }
            other => DataError::Apsi(other),
        })?;
        for (d, a) in items.iter().zip(answers) {
            if let Some(label) = a {
                found.insert(*d, label);
            }
        }
    }
    report.online_s = online.elapsed().as_secs_f64();
    // The session ends before the output is written: a failed close leaves no result.
    let stats = link.stats();
    report.bytes_sent = stats.bytes_sent;
    report.bytes_received = stats.bytes_received;
    peer.close()?;
    // Always `key,value`: the value is the label, empty for an unlabeled DB.
    let mut out = Vec::new();
    write_record(&mut out, ["key", "value"]);
    let mut rows = 0i64;
    for (k, d) in q.keys.iter().zip(&q.items) {
        if let Some(label) = found.get(d) {
            write_record(&mut out, [k.as_slice(), source::unpad(label)]);
            rows += 1;
        }
    }
    let mut f = AtomicFile::create(output)?;
    f.write_all(&out)?;
    f.commit()?;
    report.intersection_count = rows;
    report.output_path = Some(output.display().to_string());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_round_trip_and_refusals() {
        let plan = [(0, 5), (0, 1), (2, 7), (3, 0)];
        let m = encode_rounds(4, &plan);
        assert_eq!(decode_rounds(&m, 4).unwrap(), plan.to_vec());
        assert_eq!(
            evaluations_per_bucket(&plan)
                .into_iter()
                .collect::<Vec<_>>(),
            vec![(0, 6), (2, 7), (3, 0)]
        );
        assert!(matches!(
            decode_rounds(&m, 5),
            Err(DataError::Config(ConfigError::Invalid { .. }))
        ));
        let bad = encode_rounds(4, &[(2, 1), (1, 1)]);
        assert!(matches!(decode_rounds(&bad, 4), Err(DataError::Apsi(_))));
        let out_of_range = encode_rounds(4, &[(4, 1)]);
        assert!(decode_rounds(&out_of_range, 4).is_err());
        assert!(decode_rounds(&m[..m.len() - 1], 4).is_err());
        assert!(decode_rounds(&[0xa8, 1], 4).is_err());
        assert!(decode_rounds(&[0x01], 4).is_err());
        // A count that claims more than the bytes hold allocates nothing.
        let mut lie = encode_rounds(4, &[]);
        lie[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_rounds(&lie, 4).is_err());
    }

    #[test]
    fn split_routes_every_item_with_its_label() {
        let items: Vec<ItemDigest> = (0u8..50)
            .map(|i| blindjoin_crypto::item_digest(&[i]))
            .collect();
        let labels: Vec<Vec<u8>> = (0u8..50).map(|i| vec![i]).collect();
        let parts = split(items.clone(), Some(labels), 7);
        let mut n = 0;
        for (b, (its, ls)) in parts.iter().enumerate() {
            let ls = ls.as_ref().unwrap();
            assert_eq!(its.len(), ls.len());
            for (d, l) in its.iter().zip(ls) {
                assert_eq!(bucket_of(d, 7), b);
                assert_eq!(items[l[0] as usize], *d);
                n += 1;
            }
        }
        assert_eq!(n, 50);
    }
}
