//! The modes of unbalanced PSI, for one party: gen cache (server, no network), transfer cache,
//! offline (both), online, full (all on one connection). The protocol sees digests and the
//! link; this module reads the tables, keeps the files and maps results back to rows.

use super::cache::{self, ClientCache};
use super::gen_cache::{CacheSorter, LabelSource, SortLimits};
use super::labels::{self as lab, LabelRows};
use super::{
    LabelChoice, UbError, UbMode, UbPhase, UbReport, UbRole, UbSpec, budget, key, server_rows,
};
use crate::error::ConfigError;
use crate::error::DataError;
use crate::session::{self, Connect, Session};
use crate::spec::TableFormat;
use crate::table::keys::{Table, cmp_keys};
use crate::table::output::{Sink, write_atomic};
use crate::table::writer::RowWriter;
use blindjoin_crypto::oprf::OprfScalar;
use blindjoin_crypto::{ItemDigest, item_digest};
use blindjoin_link::{Cancel, Link, TcpLink};
use blindjoin_protocols::ub_oprf::LabelMeta;
use blindjoin_protocols::ub_oprf::labels::{LabelKey, SALT_LEN, open};
use blindjoin_protocols::ub_oprf::{
    CacheMeta, OnlineOptions, online_client_with, online_server_hello, online_server_serve,
    recv_cache_into, send_cache_from,
};
use blindjoin_protocols::{Progress, ProtocolError};
use rayon::prelude::*;
use std::collections::HashMap;
use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

/// Runs one party's unbalanced-PSI mode as `spec` says, in a [`session`](crate::session):
/// connecting starts as soon as the run does, so a server that spends minutes generating its
/// cache in `MODE_FULL` does not leave the client's connect deadline to run out.
///
/// # Errors
/// Any [`UbError`]; the peer is told about our failure when the link is up.
pub fn run_ub(
    spec: &UbSpec,
    progress: &dyn Progress,
    cancel: &Cancel,
) -> Result<UbReport, UbError> {
    let start = Instant::now();
    let mut report = UbReport::begin(spec, spec.curve.config_name());
    let connect = match spec.mode {
        UbMode::GenCache => None,
        _ => Some(Connect::tcp(spec.link.tcp_options().ok_or(
            ProtocolError::Unreachable("a mode that talks to the peer has no link_config"),
        )?)),
    };
    session::run(connect, cancel, &spec.cache_path, |peer| {
        match spec.role {
            UbRole::Server => server(spec, progress, peer, &mut report)?,
            UbRole::Client => client(spec, progress, peer, &mut report)?,
        }
        if let Some(l) = peer.connected() {
            l.close()?;
        }
        Ok::<(), UbError>(())
    })?;
    report.finish(spec, start)
}

/// The run's link to its peer.
type Peer = Session<TcpLink>;

/// A phase's time and the link traffic it caused.
struct PhaseClock {
    start: Instant,
    sent: u64,
    received: u64,
}

impl PhaseClock {
    fn start(link: Option<&TcpLink>) -> Self {
        let s = link.map(|l| l.stats()).unwrap_or_default();
        Self {
            start: Instant::now(),
            sent: s.bytes_sent,
            received: s.bytes_received,
        }
    }

    fn stop(self, link: Option<&TcpLink>) -> UbPhase {
        let s = link.map(|l| l.stats()).unwrap_or_default();
        UbPhase {
            seconds: self.start.elapsed().as_secs_f64(),
            bytes_sent: s.bytes_sent - self.sent.min(s.bytes_sent),
            bytes_received: s.bytes_received - self.received.min(s.bytes_received),
        }
    }
}

/// A table with each row's digest and the sorted unique digests.
struct Keyed {
    table: Table,
    row_digests: Vec<ItemDigest>,
    unique: Vec<ItemDigest>,
}

/// The distinct digests of `digests`, sorted.
fn sorted_unique(mut digests: Vec<ItemDigest>) -> Vec<ItemDigest> {
    digests.par_sort_unstable();
    digests.dedup();
    digests
}

/// Reads and keys the input table.
fn read_keyed(spec: &UbSpec, path: &Path, progress: &dyn Progress) -> Result<Keyed, UbError> {
    progress.stage("reading the input", 0);
    let table = Table::read_any(path, spec.input_format, &spec.keys)?;
    let row_digests: Vec<ItemDigest> = (0..table.len())
        .into_par_iter()
        .map(|i| item_digest(table.key(i)))
        .collect();
    let unique = sorted_unique(row_digests.clone());
    Ok(Keyed {
        table,
        row_digests,
        unique,
    })
}

fn input<'a>(spec: &'a UbSpec, why: &str) -> Result<&'a Path, UbError> {
    spec.input.as_deref().ok_or_else(|| {
        UbError::Data(DataError::Config(crate::error::ConfigError::Invalid {
            field: "ub_psi_config.input_config.path".into(),
            message: format!("missing; {why}"),
        }))
    })
}

fn server(
    spec: &UbSpec,
    progress: &dyn Progress,
    peer: &mut Peer,
    report: &mut UbReport,
) -> Result<(), UbError> {
    let mut key: Option<OprfScalar> = None;
    if spec.mode.generates() {
        let _span = crate::trace::span("generate cache");
        let clock = PhaseClock::start(None);
        let k = match &spec.secret_key_path {
            Some(p) => {
                let (k, created) = key::load_or_create(p, spec.curve, true)?;
                // A new key's count starts at 0; so does that of a key brought from elsewhere
                // (SecretFlow's `server_secret_key_path`, the whitepaper's scripts) at its
                // first cache here. From then on a missing count file is an error, not a reset
                // ([`budget`]).
                let counted = std::fs::symlink_metadata(budget::count_path(p)).is_ok();
                if created || !counted {
                    budget::start(&budget::UB, p, &k.key_check_value()?)?;
                }
                if !created && !counted {
                    crate::log::emit(
                        crate::log::Level::Warn,
                        &format!(
                            "{}: no query count beside this key; counting its queries from 0 \
                             in {} (blindjoin.max_query_items)",
                            p.display(),
                            budget::count_path(p).display()
                        ),
                    );
                }
                k
            }
            None => OprfScalar::random(spec.curve)?,
        };
        let (rows, meta) = generate(spec, &k, progress)?;
        report.original_count = rows as i64;
        report.original_key_count = meta.count as i64;
        report.cache_count = meta.count;
        report.cache_value_bytes = meta.tag_len as u64;
        report.gen_cache = Some(clock.stop(None));
        key = Some(k);
    }
    if spec.mode == UbMode::GenCache {
        return Ok(());
    }
    // Every later phase reads the cache in place (checked whole by one streaming pass): the
    // server's memory does not grow with its set.
    let file = {
        let _span = crate::trace::span("check cache");
        cache::open_server(&spec.cache_path)?
    };
    if !spec.mode.generates() {
        if let Some(p) = &spec.secret_key_path {
            let k = key::load_or_create(p, spec.curve, false)?.0;
            cache::check_key(&spec.cache_path, &file.meta, &k.key_check_value()?, p)?;
            key = Some(k);
        }
        check_curve(spec, &file.meta)?;
    }
    let meta = &file.meta;
    report.cache_count = meta.count;
    report.cache_value_bytes = meta.tag_len as u64;
    // The table is read only after the query, one row at a time, to write the matched rows:
    // asked for now, so a missing path fails before the link is used.
    let table = if spec.mode.queries() && spec.server_get_result {
        Some(input(
            spec,
            "the server learns the result (server_get_result) and writes its rows, so it \
             needs the table the cache was generated from",
        )?)
    } else {
        None
    };
    let l = {
        let _span = crate::trace::span("connect");
        peer.link()?
    };
    if spec.mode.transfers() {
        let _span = crate::trace::span("transfer cache");
        let clock = PhaseClock::start(Some(l));
        progress.stage("sending the cache", 0);
        // Read from the file one message at a time.
        send_cache_from(l, meta, &mut file.transfer_source())?;
        report.transfer_cache = Some(clock.stop(Some(l)));
    }
    if !spec.mode.queries() {
        return Ok(());
    }
    let online_span = crate::trace::span("online");
    let key = key.ok_or_else(|| UbError::KeyFile {
        path: Default::default(),
        problem: "ub_psi_config.server_secret_key_path is required on the server in MODE_ONLINE \
                  (the key the cache was generated with)"
            .into(),
    })?;
    let opts = OnlineOptions {
        client_get_result: spec.client_get_result,
        server_get_result: spec.server_get_result,
        threshold: spec.threshold,
    };
    if meta.labels.is_some() && opts.shuffled() {
        return Err(UbError::Data(DataError::Config(ConfigError::Invalid {
            field: "blindjoin.label_columns".into(),
            message: "the cache carries sealed labels, and with client_get_result false (the \
                      shuffle variant) or intersection_threshold the client could open the \
                      labels of every matched position though it must not learn those keys; \
                      regenerate the cache without label_columns for this mode"
                .into(),
        })));
    }
    let query_span = crate::trace::span("query");
    let clock = PhaseClock::start(Some(l));
    // The client's announced count is charged to the key before anything is evaluated.
    let n_client = online_server_hello(l, meta, opts)?;
    report.key_query_items = Some(budget::charge(
        spec.secret_key_path.as_deref(),
        &key.key_check_value()?,
        spec.max_query_items,
        n_client,
    )?);
    let out = online_server_serve(l, &key, meta, opts, n_client, progress)?;
    report.online = Some(clock.stop(Some(l)));
    drop(query_span);
    // The session ends before the output is written: a failed close leaves no result.
    peer.close()?;
    report.client_key_count = Some(out.peer_count);
    if let (Some(t), Some(real)) = (spec.threshold, out.count) {
        let revealed = out
            .intersection
            .as_ref()
            .map_or(t.min(real), |p| p.len() as u64);
        report.real_intersection_key_count = Some(real);
        write_counts(spec, real, revealed)?;
    }
    if let (Some(positions), Some(table)) = (out.intersection, table) {
        let matched: HashSet<ItemDigest> = {
            let _span = crate::trace::span("match");
            positions
                .iter()
                .map(|&p| file.digest_at(p))
                .collect::<Result<_, _>>()?
        };
        report.intersection_key_count = matched.len() as i64;
        let _span = crate::trace::span("write output");
        let rows = server_rows::write_matched_rows(
            table,
            spec.input_format,
            &spec.keys,
            &matched,
            spec.output.as_deref().map(|path| server_rows::RowsOut {
                path,
                format: spec.output_format,
                align: spec.align,
            }),
            progress,
        )?;
        if let Some(p) = &spec.output {
            report.intersection_count = rows as i64;
            report.output_path = Some(p.display().to_string());
        }
    }
    drop(online_span);
    Ok(())
}

/// Generates the server cache at `spec.cache_path` under `k` by the external sort
/// ([`gen_cache`]); returns the table's row count and the cache's metadata. The table streams
/// into the sort (its key digests, and with labels each row's label cells), so memory does not
/// grow with it.
fn generate(
    spec: &UbSpec,
    k: &OprfScalar,
    progress: &dyn Progress,
) -> Result<(u64, CacheMeta), UbError> {
    let table = input(spec, "the server reads its table to generate the cache")?;
    let want_labels = spec.label_columns != LabelChoice::None;
    if want_labels && spec.input_format == TableFormat::Parquet {
        return Err(UbError::Data(DataError::Config(ConfigError::Invalid {
            field: "blindjoin.label_columns".into(),
            message: "labels are read from a CSV server table; this one is Parquet (convert \
                      it, or leave label_columns out)"
                .into(),
        })));
    }
    let label_cols = if want_labels {
        let header = lab::csv_header(table)?;
        lab::choose_columns(&header, &spec.keys, &spec.label_columns)?
    } else {
        Vec::new()
    };
    let limits = SortLimits::default();
    // Each chunk is evaluated, sorted and written inside the read span as it fills.
    if label_cols.is_empty() {
        let mut sorter = CacheSorter::new(&spec.cache_path, k, spec.curve, None, limits);
        let read_span = crate::trace::span("read input");
        let rows = crate::pipeline::spill::for_each_key_digest(
            table,
            spec.input_format,
            &spec.keys,
            progress,
            &mut |d| sorter.push(d),
        )?;
        drop(read_span);
        let (meta, _) = sorter.finish(progress)?;
        return Ok((rows, meta));
    }
    let mut salt = [0u8; SALT_LEN];
    blindjoin_crypto::random_bytes(&mut salt)?;
    let src = LabelSource {
        salt,
        columns: label_cols,
    };
    let mut sorter = CacheSorter::new(&spec.cache_path, k, spec.curve, Some(&src), limits);
    let read_span = crate::trace::span("read input");
    let rows = lab::for_each_label_row(
        table,
        &spec.keys,
        &src.columns,
        progress,
        &mut |d, row, cells| sorter.push_row(d, row, cells),
    )?;
    drop(read_span);
    let (meta, _) = sorter.finish(progress)?;
    Ok((rows, meta))
}

/// Threshold mode: writes `real_count,final_count` (the intersection's unique keys, and those
/// revealed) to `count_path` when one is set, as the balanced threshold run does.
fn write_counts(spec: &UbSpec, real: u64, revealed: u64) -> Result<(), UbError> {
    if let Some(p) = &spec.count_path {
        write_atomic(
            p,
            format!("real_count,final_count\n{real},{revealed}\n").as_bytes(),
        )?;
    }
    Ok(())
}

fn client(
    spec: &UbSpec,
    progress: &dyn Progress,
    peer: &mut Peer,
    report: &mut UbReport,
) -> Result<(), UbError> {
    let mut client_file: Option<cache::CacheFile> = None;
    let cache: ClientCache = if spec.mode.transfers() {
        let l = {
            let _span = crate::trace::span("connect");
            peer.link()?
        };
        let transfer_span = crate::trace::span("transfer cache");
        let clock = PhaseClock::start(Some(l));
        progress.stage("receiving the cache", 0);
        // Streamed into the file as it arrives: the client's memory does not grow with the
        // cache.
        let mut w = cache::ClientCacheWriter::new(&spec.cache_path);
        let meta = match recv_cache_into(l, spec.max_cache_bytes, &mut w) {
            Ok(m) => m,
            Err(e) => return Err(w.error.take().unwrap_or_else(|| e.into())),
        };
        if meta.curve != spec.curve {
            return Err(ProtocolError::Mismatch {
                field: "blindjoin.curve",
                ours: spec.curve.to_string(),
                theirs: meta.curve.to_string(),
                our_role: "ROLE_CLIENT".into(),
                their_role: "ROLE_SERVER".into(),
            }
            .into());
        }
        report.transfer_cache = Some(clock.stop(Some(l)));
        drop(transfer_span);
        // A transfer-only run ends its session before the cache appears: a failed close (the
        // server gone at the end) leaves no cache behind, as a failed online run leaves no
        // output. MODE_FULL keeps the link for its query and closes before its output.
        if !spec.mode.queries() {
            peer.close()?;
        }
        w.commit()?;
        // MODE_FULL goes on to query: from the file, in place, as MODE_ONLINE.
        if spec.mode.queries() {
            let _span = crate::trace::span("check cache");
            client_file = Some(cache::open_client(&spec.cache_path)?);
        }
        ClientCache {
            meta,
            values: Vec::new(),
            labels: None,
        }
    } else {
        // Read in place (checked whole by one streaming pass, looked up by another): the
        // client's memory does not grow with the server's set.
        let prep = Instant::now();
        let _span = crate::trace::span("check cache");
        let f = cache::open_client(&spec.cache_path)?;
        report.online_prepare_s = Some(prep.elapsed().as_secs_f64());
        let c = ClientCache {
            meta: f.meta.clone(),
            values: Vec::new(),
            labels: None,
        };
        client_file = Some(f);
        c
    };
    report.cache_count = cache.meta.count;
    report.cache_value_bytes = cache.meta.tag_len as u64;
    if !spec.mode.queries() {
        return Ok(());
    }
    let prep = Instant::now();
    let read_span = crate::trace::span("read input");
    let kd = read_keyed(
        spec,
        input(
            spec,
            "the client's table is queried in MODE_ONLINE and MODE_FULL",
        )?,
        progress,
    )?;
    drop(read_span);
    report.original_count = kd.table.len() as i64;
    report.original_key_count = kd.unique.len() as i64;
    report.client_key_count = Some(kd.unique.len() as u64);
    *report.online_prepare_s.get_or_insert(0.0) += prep.elapsed().as_secs_f64();
    let with_labels = spec.client_get_result && cache.meta.labels.is_some();
    if with_labels && kd.table.columns.schema.is_some() {
        return Err(UbError::Data(DataError::Config(ConfigError::Invalid {
            field: "ub_psi_config.input_config.type".into(),
            message: "the server's cache carries label columns, which are joined to a CSV \
                      client table only; give the client's table as CSV, or have the server \
                      generate its cache with blindjoin.label_columns []"
                .into(),
        })));
    }
    let l = {
        let _span = crate::trace::span("connect");
        peer.link()?
    };
    let opts = OnlineOptions {
        client_get_result: spec.client_get_result,
        server_get_result: spec.server_get_result,
        threshold: spec.threshold,
    };
    let _online_span = crate::trace::span("online");
    let query_span = crate::trace::span("query");
    let clock = PhaseClock::start(Some(l));
    let file = client_file.as_mut().ok_or(ProtocolError::Unreachable(
        "the client queries without its cache file",
    ))?;
    let out = online_client_with(l, &cache.meta, file, &kd.unique, opts, progress)?;
    report.online = Some(clock.stop(Some(l)));
    drop(query_span);
    // The session ends before the output is written: a failed close leaves no result.
    peer.close()?;
    if let (Some(_), Some(real), Some(revealed)) =
        (spec.threshold, out.count, out.intersection.as_ref())
    {
        report.real_intersection_key_count = Some(real);
        write_counts(spec, real, revealed.len() as u64)?;
    }
    if let Some(mine) = out.intersection {
        let matched: HashSet<ItemDigest> = mine.iter().map(|&i| kd.unique[i]).collect();
        report.intersection_key_count = matched.len() as i64;
        let opened = match &cache.meta.labels {
            Some(m) => {
                let _span = crate::trace::span("open labels");
                let at: Vec<u32> = out
                    .hits
                    .iter()
                    .flat_map(|h| h.positions.iter().copied())
                    .collect();
                let sealed = file.labels_at(&at)?;
                Some((m, open_labels(&kd, &out.hits, m, &sealed)?))
            }
            None => None,
        };
        let labels = opened.as_ref().map(|(m, rows)| (&m.columns[..], rows));
        let _span = crate::trace::span("write output");
        write_matches(spec, &kd, &matched, labels, report)?;
    } else if let Some(c) = out.count {
        // The client always learns the count (see the protocol's leakage); report it.
        report.intersection_key_count = c as i64;
    }
    Ok(())
}

/// Opens the labels of the client's matched keys: each key's sealed label at its cache
/// position, under the key derived from its evaluated point.
fn open_labels(
    kd: &Keyed,
    hits: &[blindjoin_protocols::ub_oprf::Hit],
    meta: &LabelMeta,
    sealed: &HashMap<u32, Vec<u8>>,
) -> Result<HashMap<ItemDigest, LabelRows>, UbError> {
    hits.par_iter()
        .map(|h| {
            let key = LabelKey::derive(&h.point, &meta.salt);
            let plain = h
                .positions
                .iter()
                .find_map(|&p| sealed.get(&p).and_then(|s| open(&key, s)))
                .ok_or_else(|| {
                    ProtocolError::PeerMisbehaved(
                        "sent a cache whose label for a matched key does not open (damaged or \
                         forged; run MODE_OFFLINE_TRANSFER_CACHE again)"
                            .into(),
                    )
                })?;
            let rows = lab::decode(&plain, meta.columns.len())?;
            Ok((kd.unique[h.item], rows))
        })
        .collect()
}

/// Writes the rows whose key matched (all rows of a key, duplicates included), sorted by key
/// when aligned (ties in file order), else in file order. With `labels` (the client's output
/// over a labelled cache), each row is followed by the label columns, once per server row of
/// its key (see [`super::labels`]).
fn write_matches(
    spec: &UbSpec,
    kd: &Keyed,
    matched: &HashSet<ItemDigest>,
    labels: Option<(&[String], &HashMap<ItemDigest, LabelRows>)>,
    report: &mut UbReport,
) -> Result<(), UbError> {
    let Some(path) = &spec.output else {
        return Ok(());
    };
    let mut rows: Vec<usize> = (0..kd.table.len())
        .into_par_iter()
        .filter(|&i| matched.contains(&kd.row_digests[i]))
        .collect();
    if spec.align {
        rows.par_sort_by(|&a, &b| cmp_keys(kd.table.key(a), kd.table.key(b)).then(a.cmp(&b)));
    }
    let Some((names, by_key)) = labels else {
        let mut out = RowWriter::create(path, spec.output_format, &kd.table.columns, "NULL")?;
        for &i in &rows {
            out.row(kd.table.raw_row(i))?;
        }
        out.commit()?;
        report.intersection_count = rows.len() as i64;
        report.output_path = Some(path.display().to_string());
        return Ok(());
    };
    let mut header = kd.table.columns.header.clone();
    header.extend(lab::output_names(&header, names));
    let mut out = RowWriter::create(
        path,
        spec.output_format,
        &crate::table::writer::Columns::csv(header),
        "NULL",
    )?;
    let mut line = Vec::new();
    let mut written = 0i64;
    for &i in &rows {
        let Some(label_rows) = by_key.get(&kd.row_digests[i]) else {
            return Err(ProtocolError::Unreachable("a matched key has no opened label").into());
        };
        for lr in label_rows {
            line.clear();
            line.extend_from_slice(kd.table.raw_row(i));
            if !lr.is_empty() {
                line.push(b',');
                crate::table::csv::write_record(&mut line, lr.iter());
                line.pop(); // write_record's newline
            }
            out.row(&line)?;
            written += 1;
        }
    }
    out.commit()?;
    report.intersection_count = written;
    report.output_path = Some(path.display().to_string());
    Ok(())
}

/// A cache made on another curve than the config's is refused, naming both.
///
/// # Errors
/// [`UbError::Cache`] when they differ.
pub(super) fn check_curve(spec: &UbSpec, meta: &CacheMeta) -> Result<(), UbError> {
    if meta.curve == spec.curve {
        return Ok(());
    }
    Err(UbError::Cache {
        path: spec.cache_path.clone(),
        problem: format!(
            "the cache was generated on {}, this run asks for {}",
            meta.curve, spec.curve
        ),
        fix: "set blindjoin.curve to the cache's curve, or regenerate the cache",
    })
}
