//! A two-party run whose peer is an unmodified SecretFlow party (`blindjoin.peer_wire =
//! "secretflow"`): SecretFlow's link ([`blindjoin_link::secretflow`]), its PSI v2 session
//! (psi `psi/interface.cc`@242a8fa, sequence in the research brief `secretflow_wire.md` §2.1)
//! and its `PROTOCOL_ECDH` ([`blindjoin_protocols::secretflow`]), with the output written as
//! SecretFlow writes it, so either side of a SecretFlow pair can be replaced by blindjoin and
//! the files do not change.
//!
//! The session, in psi's order: the link's connect step, psi's own `ConnectToMesh`, the config
//! check, `SyncWait` around reading the input, the duplicate flags and key digest
//! (`check_hash_digest`), a barrier, the ECDH run and the post-processing (each in a
//! `SyncWait`), then `Finalize` (in a `SyncWait`: the row counts with `broadcast_result`), the
//! output, and yacl's close sequence.
//!
//! The output (SecretFlow's `JoinProcessor`): the quoted header, then each matched row as it
//! appears in the file, written once per row the peer has with that key (SecretFlow does not
//! write the SQL join's pairs, see `pipeline::join`), then, by join type, the unmatched rows
//! and `csv_null_rep` rows for the peer's unmatched ones. Rows are in the order of
//! `LC_ALL=C sort --stable -t, -k<key>,<key>…` over the file, as SecretFlow sorts it (file
//! order with `input_attr.keys_unique`, the matched rows then sorted by every column).

use crate::error::{ConfigError, DataError};
use crate::pipeline::report::{Report, Stages};
use crate::spec::{JoinType, RunSpec, SecretflowWire};
use crate::table::csv::{CsvReader, FieldSpan, field_value};
use crate::table::output::AtomicFile;
use blindjoin_link::Cancel;
use blindjoin_link::secretflow::{Context, Options, Session};
use blindjoin_protocols::secretflow::config::{self, PsiConfig};
use blindjoin_protocols::secretflow::ecdh::{self, Match, Target};
use blindjoin_protocols::{Progress, ProtocolError, Role};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long psi `Init`'s second connect step waits for the peer's connect before it sends ours
/// ([`Context::connect_to_mesh_again`]): a wheel sends its own within milliseconds of its first
/// connect step (its Python builds the config in between), seconds on a loaded machine; only a
/// peer that waits too (blindjoin on both seats of SecretFlow's wire) pays it in full.
pub(crate) const SECOND_CONNECT_FIRST_WAIT: Duration = Duration::from_secs(3);

/// Where and how this party meets the SecretFlow party.
pub(crate) struct SfLink<'a> {
    /// `link_config.id`.
    pub(crate) link_id: &'a str,
    /// This party's rank.
    pub(crate) rank: usize,
    /// The two parties' ids and addresses.
    pub(crate) parties: &'a crate::spec::Parties,
    /// How long to wait for the peer to connect.
    pub(crate) connect_timeout: Duration,
    /// How long to wait for one message.
    pub(crate) recv_timeout: Duration,
    /// `enable_ssl`.
    pub(crate) tls: Option<&'a crate::spec::SfTls>,
    /// `brpc_channel_protocol`.
    pub(crate) channel: crate::spec::SfChannel,
}

/// One run on SecretFlow's link: the connect step, then `work`, then yacl's close sequence. When
/// `work` fails the link is dropped instead: without the close sequence a wheel peer waits for
/// its receive timeout, while a peer that is gone makes it fail fast.
///
/// # Errors
/// The link's start and close, and `work`'s own.
pub(crate) fn on_secretflow_link<T, E: From<blindjoin_link::LinkError>>(
    link: &SfLink<'_>,
    cancel: &Cancel,
    work: impl FnOnce(&Session, &mut Context) -> Result<T, E>,
) -> Result<T, E> {
    let mut opts = Options::new(
        link.link_id,
        link.rank,
        &link.parties.self_addr,
        &link.parties.peer_addr,
    );
    opts.peer_name = link.parties.peer_id.clone();
    opts.connect_timeout = link.connect_timeout;
    opts.recv_timeout = link.recv_timeout;
    opts.tls = link.tls.map(crate::spec::SfTls::to_link);
    opts.channel_protocol = link.channel.to_link();
    let (session, mut ctx) = Session::start(&opts, cancel)?;
    match work(&session, &mut ctx) {
        Ok(t) => {
            session.stop()?;
            Ok(t)
        }
        Err(e) => {
            drop(session);
            Err(e)
        }
    }
}

/// The input, read as SecretFlow reads it.
pub(crate) struct Table {
    bytes: Vec<u8>,
    /// The header line as the file has it (SecretFlow copies it into its sorted input).
    header_line: Vec<u8>,
    header: Vec<String>,
    /// Each row's raw text (`bytes[start..end]`) and its raw fields.
    rows: Vec<RawRow>,
    /// Unique items in protocol order, each with its rows (indices into `rows`, output order).
    pub(crate) groups: Vec<Group>,
}

struct RawRow {
    start: usize,
    end: usize,
    /// Each column's raw bytes (with any quotes), what `sort -t,` compares.
    fields: Vec<(usize, usize)>,
}

pub(crate) struct Group {
    pub(crate) item: Vec<u8>,
    pub(crate) rows: Vec<usize>,
}

impl Table {
    fn raw<'a>(&'a self, r: &RawRow) -> &'a [u8] {
        &self.bytes[r.start..r.end]
    }

    fn field<'a>(&'a self, r: &RawRow, c: usize) -> &'a [u8] {
        let (s, e) = r.fields[c];
        &self.bytes[s..e]
    }

    /// Rows in the file.
    pub(crate) fn row_count(&self) -> usize {
        self.rows.len()
    }

    /// The file as SecretFlow's `MultiKeySort` writes it (`join_sorted_input.csv`): the header
    /// line, then the rows in protocol order.
    pub(crate) fn sorted_csv(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + 1);
        out.extend_from_slice(&self.header_line);
        out.push(b'\n');
        for g in &self.groups {
            for &r in &g.rows {
                out.extend_from_slice(self.raw(&self.rows[r]));
                out.push(b'\n');
            }
        }
        out
    }
}

fn raw_span(f: &FieldSpan) -> (usize, usize) {
    if f.quoted {
        (f.start.saturating_sub(1), f.end + 1)
    } else {
        (f.start, f.end)
    }
}

/// Reads the CSV at `path` keyed by `keys` as SecretFlow does: the rows sorted by key
/// (`keys_unique` false), or in file order with every key checked to be unique.
pub(crate) fn read_table(
    path: &Path,
    key_names: &[String],
    keys_unique: bool,
) -> Result<Table, DataError> {
    let path = &path.to_path_buf();
    let bytes = std::fs::read(path).map_err(|source| DataError::Io {
        path: path.clone(),
        action: "reading the input",
        source,
    })?;
    let mut reader = CsvReader::new(&bytes, path)?;
    let header = reader.header().to_vec();
    let mut keys = Vec::with_capacity(key_names.len());
    for k in key_names {
        let c = reader
            .column_index(k)
            .ok_or_else(|| DataError::MissingKeyColumn {
                path: path.clone(),
                column: k.clone(),
                available: header.join(", "),
            })?;
        keys.push(c);
    }
    let mut rows = Vec::new();
    let mut items = Vec::new();
    let mut spans = Vec::new();
    while let Some(rec) = reader.next_record(&mut spans)? {
        let mut item = Vec::new();
        for (j, &c) in keys.iter().enumerate() {
            if j > 0 {
                item.push(b',');
            }
            let v = field_value(&bytes, &spans[c]);
            if v.is_empty() {
                return Err(DataError::EmptyKey {
                    path: path.clone(),
                    line: rec.line,
                    field: key_names[j].clone(),
                });
            }
            item.extend_from_slice(&v);
        }
        rows.push(RawRow {
            start: rec.start,
            end: rec.end,
            fields: spans.iter().map(raw_span).collect(),
        });
        items.push(item);
    }
    drop(reader);
    let header_end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(bytes.len());
    let header_line = bytes[..header_end]
        .strip_suffix(b"\r")
        .unwrap_or(&bytes[..header_end])
        .to_vec();
    let mut table = Table {
        bytes: Vec::new(),
        header_line,
        header,
        rows,
        groups: Vec::new(),
    };
    table.bytes = bytes;
    let mut order: Vec<usize> = (0..table.rows.len()).collect();
    if !keys_unique {
        // `sort --stable -t, -k<c>,<c>` for each key in turn, in the C locale: bytes.
        order.sort_by(|&a, &b| {
            keys.iter()
                .map(|&c| {
                    table
                        .field(&table.rows[a], c)
                        .cmp(table.field(&table.rows[b], c))
                })
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    }
    let mut groups: Vec<Group> = Vec::new();
    for i in order {
        match groups.last_mut() {
            Some(g) if !keys_unique && g.item == items[i] => g.rows.push(i),
            _ => groups.push(Group {
                item: std::mem::take(&mut items[i]),
                rows: vec![i],
            }),
        }
    }
    if keys_unique {
        let mut seen = std::collections::HashSet::with_capacity(groups.len());
        for g in &groups {
            if !seen.insert(g.item.as_slice()) {
                return Err(DataError::Config(ConfigError::Invalid {
                    field: "psi_config.input_attr.keys_unique".into(),
                    message: format!(
                        "true, but the key {:?} repeats in {}; set it to false",
                        String::from_utf8_lossy(&g.item),
                        path.display()
                    ),
                }));
            }
        }
    }
    table.groups = groups;
    Ok(table)
}

fn role_number(r: Role) -> u64 {
    match r {
        Role::Receiver => config::ROLE_RECEIVER,
        Role::Sender => config::ROLE_SENDER,
    }
}

/// The `PsiConfig` SecretFlow would send for this launch config.
fn psi_config(spec: &RunSpec, w: &SecretflowWire) -> PsiConfig {
    PsiConfig {
        protocol: config::PROTOCOL_ECDH,
        role: role_number(spec.role),
        broadcast_result: spec.broadcast_result,
        curve: w.curve.config_value(),
        ecdh_batch_size: w.ecdh_batch_size,
        kkrt_bucket_size: w.kkrt_bucket_size,
        rr22_bucket_size: w.rr22_bucket_size,
        rr22_low_comm: w.rr22_low_comm,
        join_type: w.join_type,
        left_side: w.left_side,
        check_hash_digest: spec.join.check_hash_digest,
        csv_null_rep: w.csv_null_rep.clone(),
        recovery: false,
    }
}

/// psi's `SizeProto{1: n}` (`utils::SerializeSize`).
fn size_proto(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    if n != 0 {
        blindjoin_link::secretflow::proto::put_varint_field(&mut out, 1, n);
    }
    out
}

fn parse_size(buf: &[u8]) -> Result<u64, ProtocolError> {
    use blindjoin_link::secretflow::proto::{Fields, Value};
    let mut f = Fields::new(buf, "SizeProto");
    let mut n = 0;
    while let Some((field, v)) = f
        .next_field()
        .map_err(|e| ProtocolError::PeerMisbehaved(e.to_string()))?
    {
        if let (1, Value::Varint(x)) = (field, v) {
            n = x;
        }
    }
    Ok(n)
}

/// What the protocol stage found.
struct Found {
    matched: Vec<Match>,
    peer_keys: u64,
    digest_equal: bool,
}

/// Runs this party against a SecretFlow party as `spec` says.
///
/// # Errors
/// Input, link, protocol (including a config mismatch, naming the field) and output errors.
pub fn run(spec: &RunSpec, progress: &dyn Progress, cancel: &Cancel) -> Result<Report, DataError> {
    let start = Instant::now();
    let w = spec
        .peer_wire
        .as_ref()
        .ok_or(DataError::Protocol(ProtocolError::Unreachable(
            "a SecretFlow-wire run without its settings",
        )))?;
    crate::log::emit(
        crate::log::Level::Warn,
        &format!(
            "blindjoin.peer_wire = \"secretflow\": {} is hashed as SecretFlow hashes it, which is \
             weaker than blindjoin's own hash-to-curve (docs/protocols.md, \"Running against \
             SecretFlow\")",
            w.curve.config_name()
        ),
    );
    progress.stage("reading input", 0);
    let table = read_table(&spec.input, &spec.keys, w.keys_unique)?;
    let read_s = start.elapsed().as_secs_f64();

    progress.stage("connecting to the SecretFlow party", 0);
    let link = SfLink {
        link_id: &w.link_id,
        rank: w.self_rank,
        parties: &spec.parties,
        connect_timeout: spec.connect_timeout,
        recv_timeout: spec.recv_timeout,
        tls: w.tls.as_ref(),
        channel: w.channel,
    };
    let (found, peer_rows, protocol_s, connect_s, (bytes_sent, bytes_received)) =
        on_secretflow_link(&link, cancel, |session, ctx| {
            let connect_s = start.elapsed().as_secs_f64() - read_s;
            let (found, peer_rows, protocol_s) = session_steps(spec, w, &table, ctx, progress)?;
            // The close sequence's few bytes (ACKs and FIN) are left out.
            Ok::<_, DataError>((found, peer_rows, protocol_s, connect_s, session.traffic()))
        })?;

    let t = Instant::now();
    let learns = spec.role == Role::Receiver || spec.broadcast_result;
    let (written, out_path) = match (&spec.output, learns) {
        (Some(out), true) => {
            progress.stage("writing output", 0);
            let how = JoinOutput {
                join: spec.join.join,
                left: spec.role == spec.join.left_side,
                keys_unique: w.keys_unique,
                align: spec.align,
                null_rep: &w.csv_null_rep,
            };
            (
                Some(write_join(&table, &found.matched, peer_rows, out, &how)?),
                Some(out.display().to_string()),
            )
        }
        _ => (None, None),
    };
    let (intersection_count, intersection_key_count) = match written {
        Some(_) => {
            let rows: usize = found
                .matched
                .iter()
                .map(|m| table.groups[m.index as usize].rows.len())
                .sum();
            (rows as i64, found.matched.len() as i64)
        }
        None => (-1, -1),
    };
    let stages = Stages {
        read_input_s: read_s,
        connect_s,
        protocol_s,
        write_output_s: t.elapsed().as_secs_f64(),
        total_s: start.elapsed().as_secs_f64(),
        ..Stages::default()
    };
    let report = Report {
        version: env!("CARGO_PKG_VERSION").to_string(),
        party: spec.parties.self_id.clone(),
        role: spec.role.to_string(),
        protocol: "PROTOCOL_ECDH".into(),
        curve: Some(w.curve.config_name().into()),
        mode: None,
        buckets: 1,
        spilled: false,
        resumed_at_bucket: 0,
        original_count: table.rows.len() as i64,
        original_key_count: table.groups.len() as i64,
        intersection_count,
        intersection_key_count,
        peer_key_count: found.peer_keys as i64,
        output_path: out_path,
        aligned: true,
        bytes_sent,
        bytes_received,
        stages,
        bucket_s: Vec::new(),
        peak_rss_bytes: crate::pipeline::report::peak_rss_bytes(),
        bucket_peak_rss_bytes: Vec::new(),
        cardinality: None,
        key_sets_equal: spec.join.check_hash_digest.then_some(found.digest_equal),
        warnings: spec.warnings.clone(),
        revealed_key_count: None,
    };
    if let Some(p) = spec.report_path() {
        let mut json = serde_json::to_vec_pretty(&report).unwrap_or_default();
        json.push(b'\n');
        crate::table::output::write_atomic(&p, &json)?;
    }
    Ok(report)
}

/// psi's `Init` to `Finalize` on the link; returns what was found, the peer's row count (with
/// `broadcast_result`) and the protocol's seconds.
fn session_steps(
    spec: &RunSpec,
    w: &SecretflowWire,
    table: &Table,
    ctx: &mut Context,
    progress: &dyn Progress,
) -> Result<(Found, Option<u64>, f64), DataError> {
    // psi's party `Init` runs ConnectToMesh once more; we wait for the peer's first, so that
    // ours cannot reach it while its first is still unread (yacl would drop it).
    ctx.connect_to_mesh_again(spec.connect_timeout, SECOND_CONNECT_FIRST_WAIT)?;
    let ours = psi_config(spec, w).encode();
    // A wheel peer that finds our config different throws at once and closes, often before its
    // own config (sent asynchronously) has left: say what that most likely means.
    let both = ctx.all_gather(&ours).map_err(|e| match e {
        blindjoin_link::LinkError::PeerClosed { peer } => {
            DataError::Link(blindjoin_link::LinkError::PeerAborted {
                peer,
                reason: "it closed the connection during SecretFlow's config check, which a \
                         SecretFlow party does when the two psi_config differ; its own error \
                         output (\"PSI configs are not consistent\") names the field"
                    .into(),
            })
        }
        other => DataError::Link(other),
    })?;
    config::check_peer(&ours, &both[ctx.peer_rank()], &spec.role.to_string())?;
    // The input is read already; the peer still sees psi's SyncWait around its reading.
    ctx.sync_wait(|| ())?;
    let mut digest_equal = false;
    if spec.join.check_hash_digest {
        let unique = table.groups.len() == table.rows.len();
        let flags = ctx.all_gather(&[u8::from(unique)])?;
        if flags.iter().all(|f| f.first() == Some(&1)) {
            let mut h = Sha256::new();
            for g in &table.groups {
                h.update(&g.item);
            }
            let digest = h.finalize();
            let digests = ctx.all_gather(&digest)?;
            digest_equal = digests[0] == digests[1];
        }
    }
    let t = Instant::now();
    let me = ctx.rank();
    let target = if spec.broadcast_result {
        Target::All
    } else if spec.role == Role::Receiver {
        Target::Rank(me)
    } else {
        Target::Rank(ctx.peer_rank())
    };
    let found = if digest_equal {
        Found {
            matched: (0..table.groups.len() as u32)
                .map(|index| Match {
                    index,
                    peer_extra: 0,
                })
                .collect(),
            peer_keys: table.groups.len() as u64,
            digest_equal,
        }
    } else {
        ctx.barrier()?;
        progress.stage("running PROTOCOL_ECDH with the SecretFlow party", 0);
        let items: Vec<&[u8]> = table.groups.iter().map(|g| g.item.as_slice()).collect();
        let extra: Vec<u32> = table
            .groups
            .iter()
            .map(|g| (g.rows.len() - 1) as u32)
            .collect();
        let curve = w.curve;
        let outcome = ctx.sync_wait_with(|c| ecdh::run(c, curve, target, &items, &extra))??;
        // PostProcess: psi computes the indices inside a SyncWait; ours are computed already.
        ctx.sync_wait(|| ())?;
        Found {
            matched: outcome.matched,
            peer_keys: outcome.peer_items,
            digest_equal,
        }
    };
    let protocol_s = t.elapsed().as_secs_f64();
    // Finalize: with broadcast, both AllGather their row counts inside the SyncWait.
    let rows = table.rows.len() as u64;
    let broadcast = spec.broadcast_result;
    let peer_rows = ctx.sync_wait_with(|c| -> Result<Option<u64>, DataError> {
        if !broadcast {
            return Ok(None);
        }
        let sizes = c.all_gather(&size_proto(rows))?;
        Ok(Some(parse_size(&sizes[c.peer_rank()])?))
    })??;
    Ok((found, peer_rows, protocol_s))
}

/// How SecretFlow's `JoinProcessor` writes one party's output.
pub(crate) struct JoinOutput<'a> {
    /// `advanced_join_type`.
    pub(crate) join: JoinType,
    /// This party is `left_side`.
    pub(crate) left: bool,
    /// `input_attr.keys_unique` (the matched rows are then sorted by every column).
    pub(crate) keys_unique: bool,
    /// Not `disable_alignment`.
    pub(crate) align: bool,
    /// `output_attr.csv_null_rep` ("": SecretFlow's `NULL`).
    pub(crate) null_rep: &'a str,
}

/// SecretFlow's `GenerateResult`: `matched` names our groups and the peer's extra copies of
/// each, `peer_rows` is the peer's row count where we know it (the padding of outer joins).
/// Returns the rows written.
pub(crate) fn write_join(
    table: &Table,
    matched: &[Match],
    peer_rows: Option<u64>,
    out: &Path,
    how: &JoinOutput<'_>,
) -> Result<u64, DataError> {
    let join = how.join;
    let left = how.left;
    let mut matched_group = vec![None; table.groups.len()];
    let mut peer_matched_rows = 0u64;
    for m in matched {
        let g = matched_group
            .get_mut(m.index as usize)
            .ok_or(DataError::Protocol(ProtocolError::Unreachable(
                "a matched index outside our items",
            )))?;
        *g = Some(m.peer_extra);
        peer_matched_rows += u64::from(m.peer_extra) + 1;
    }
    let peer_except = peer_rows.map_or(0, |p| p.saturating_sub(peer_matched_rows));
    let null_rep = if how.null_rep.is_empty() {
        "NULL"
    } else {
        how.null_rep
    };
    let mut f = AtomicFile::create(out)?;
    let quoted: Vec<String> = table.header.iter().map(|h| format!("\"{h}\"")).collect();
    f.write_all(format!("{}\n", quoted.join(",")).as_bytes())?;
    let mut written = 0u64;
    if join != JoinType::Difference {
        let mut inter: Vec<(usize, u32)> = Vec::new();
        for (g, peer) in table.groups.iter().zip(&matched_group) {
            if let Some(e) = peer {
                inter.extend(g.rows.iter().map(|&r| (r, *e)));
            }
        }
        if how.keys_unique && how.align {
            // psi sorts the matched rows by every column (`SortInplace(Columns())`).
            let cols = table.header.len();
            inter.sort_by(|&(a, _), &(b, _)| {
                (0..cols)
                    .map(|c| {
                        table
                            .field(&table.rows[a], c)
                            .cmp(table.field(&table.rows[b], c))
                    })
                    .find(|o| o.is_ne())
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
        }
        for (r, e) in inter {
            let line = table.raw(&table.rows[r]);
            for _ in 0..=e {
                f.write_all(line)?;
                f.write_all(b"\n")?;
                written += 1;
            }
        }
    }
    let na = |f: &mut AtomicFile, n: u64| -> Result<u64, DataError> {
        let mut line = vec![null_rep; table.header.len()].join(",");
        line.push('\n');
        for _ in 0..n {
            f.write_all(line.as_bytes())?;
        }
        Ok(n)
    };
    let pads = matches!(join, JoinType::Left | JoinType::Difference | JoinType::Full);
    if !left && pads {
        written += na(&mut f, peer_except)?;
    }
    let keeps_own = match join {
        JoinType::Difference | JoinType::Full => true,
        JoinType::Left => left,
        JoinType::Right => !left,
        JoinType::Inner => false,
    };
    if keeps_own {
        for (g, peer) in table.groups.iter().zip(&matched_group) {
            if peer.is_none() {
                for &r in &g.rows {
                    f.write_all(table.raw(&table.rows[r]))?;
                    f.write_all(b"\n")?;
                    written += 1;
                }
            }
        }
    }
    if left
        && matches!(
            join,
            JoinType::Right | JoinType::Difference | JoinType::Full
        )
    {
        written += na(&mut f, peer_except)?;
    }
    f.commit()?;
    Ok(written)
}
