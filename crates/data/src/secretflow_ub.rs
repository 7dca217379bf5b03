//! An unbalanced-PSI run (`ub_psi_config`) whose peer is an unmodified SecretFlow party
//! (`blindjoin.peer_wire = "secretflow"`): SecretFlow's link, its ECDH-OPRF messages
//! ([`blindjoin_protocols::secretflow::ub`]), its session (psi
//! `psi/algorithm/ecdh/ub_psi/{server,client}.cc`@242a8fa) and its files, so either side of a
//! SecretFlow pair can be replaced by blindjoin and its cache directory and output do not
//! change.
//!
//! The session: the link's connect step, `Init`'s second `ConnectToMesh` and its spawned online
//! context, then by mode — `MODE_OFFLINE_TRANSFER_CACHE` alone, `MODE_OFFLINE` (the server
//! generates then transfers, the client receives) in one `SyncWait`, `MODE_ONLINE` in one
//! `SyncWait`, `MODE_FULL` as both. `MODE_OFFLINE_GEN_CACHE` talks to no one.
//!
//! `cache_path` is a directory, as SecretFlow's:
//! * the server's `ub_psi_cache.bin` (44-byte records: u32 `origin_index` = the record's
//!   position, u32 `shuffle_index` = the key's position in sorted order, u32 extra copies,
//!   32 bytes of which the first 12 are the OPRF value), `ub_psi_cache.meta` (JSON
//!   `UBPsiCacheMeta`, which holds the key when no `server_secret_key_path` is given) and
//!   `join_sorted_input.csv` (its input sorted by key: what `MODE_ONLINE` writes its rows
//!   from). Records are shuffled within windows of 10^6 as `SimpleShuffledBatchProvider` does.
//! * the client's `server_cache` (36-byte records: 32 bytes of which 12 are the value, u32
//!   extra copies) and `server_cache.meta` (u32 values, server keys, server rows, 12).
//!
//! Every file we write is 0600 in a 0700 directory we make, and written atomically; every file
//! we read is checked (sizes, counts, lengths) before anything is allocated from it.

use crate::error::DataError;
use crate::secretflow_wire::{
    JoinOutput, SECOND_CONNECT_FIRST_WAIT, SfLink, Table, on_secretflow_link, read_table,
    write_join,
};
use crate::table::output::write_atomic;
use crate::ub::{SfUbWire, UbError, UbMode, UbPhase, UbReport, UbRole, UbSpec};
use base64::Engine;
use blindjoin_crypto::secretflow_oprf::{OPRF_LEN, OprfKey, OprfValue};
use blindjoin_link::Cancel;
use blindjoin_link::secretflow::{Context, Session};
use blindjoin_protocols::secretflow::ecdh::Match;
use blindjoin_protocols::secretflow::ub::{self, PeerCache};
use blindjoin_protocols::{Progress, ProtocolError};
use std::path::Path;
use std::time::Instant;
use zeroize::Zeroizing;

/// The server's cache records.
pub(crate) const SERVER_CACHE: &str = "ub_psi_cache.bin";
/// Their meta (JSON).
pub(crate) const SERVER_META: &str = "ub_psi_cache.meta";
/// The server's input, sorted by key (`JoinProcessor`'s `sorted_input_path_`).
pub(crate) const SORTED_INPUT: &str = "join_sorted_input.csv";
/// SecretFlow's key index of the sorted input; it reuses one whose meta gives the sorted file's
/// size, so we remove it whenever we write a new sorted input.
const KEY_INFO: [&str; 2] = [
    "join_sorted_input_key_info.csv",
    "join_sorted_input_key_info.csv.meta",
];
/// The client's copy of the server's values.
pub(crate) const CLIENT_CACHE: &str = "server_cache";
/// Its meta (three u32).
pub(crate) const CLIENT_META: &str = "server_cache.meta";

/// A server record's length (`UbPsiCacheItem`).
const SERVER_RECORD: usize = 44;
/// A client record's length (`UbPsiClientCacheFileStore::CacheItem`).
const CLIENT_RECORD: usize = 36;
/// `SimpleShuffledBatchProvider`'s window: records are shuffled within each.
const SHUFFLE_WINDOW: usize = 1_000_000;
/// `UBPsiCacheMeta.version`.
const META_VERSION: &str = "0.0.1";
/// Largest meta file we read.
const MAX_META_BYTES: u64 = 1 << 20;

fn cache_err(path: &Path, problem: impl Into<String>, fix: &'static str) -> UbError {
    UbError::Cache {
        path: path.to_path_buf(),
        problem: problem.into(),
        fix,
    }
}

const REGENERATE: &str = "run MODE_OFFLINE_GEN_CACHE (or MODE_OFFLINE) on the server again";
const RETRANSFER: &str = "run MODE_OFFLINE_TRANSFER_CACHE (or MODE_OFFLINE) again";

/// The server's cache as read back.
struct ServerCache {
    key: OprfKey,
    /// Per record (in stored order): the value, the sorted-order key position and extra copies.
    values: Vec<OprfValue>,
    shuffle_index: Vec<u32>,
    extra: Vec<u32>,
}

/// Runs this party against a SecretFlow party as `spec` says.
///
/// # Errors
/// Input, cache, key, link and protocol errors, and output errors.
pub(crate) fn run(
    spec: &UbSpec,
    wire: &SfUbWire,
    progress: &dyn Progress,
    cancel: &Cancel,
) -> Result<UbReport, UbError> {
    let start = Instant::now();
    let mut report = UbReport {
        cache_value_bytes: OPRF_LEN as u64,
        ..UbReport::begin(spec, "CURVE_FOURQ")
    };
    crate::log::emit(
        crate::log::Level::Warn,
        "blindjoin.peer_wire = \"secretflow\": unbalanced PSI runs SecretFlow's ECDH-OPRF \
         (FourQ, BLAKE3, 96-bit values) and keeps SecretFlow's cache files; the server's query \
         cap applies per run, not over the key's life (docs/protocols.md, \"SecretFlow's \
         unbalanced PSI\")",
    );
    if spec.mode == UbMode::GenCache {
        // SecretFlow's launcher runs gen cache without a link.
        let t = Instant::now();
        progress.stage("generating the cache", 0);
        gen_cache(spec, &mut report)?;
        report.gen_cache = Some(UbPhase {
            seconds: t.elapsed().as_secs_f64(),
            ..UbPhase::default()
        });
    } else {
        let parties = spec
            .link
            .parties
            .as_ref()
            .ok_or(ProtocolError::Unreachable(
                "a mode that talks to the peer has no link_config",
            ))?;
        let local = load_local(spec, &mut report)?;
        progress.stage("connecting to the SecretFlow party", 0);
        let link = SfLink {
            link_id: &wire.link_id,
            rank: wire.self_rank,
            parties,
            connect_timeout: spec.link.connect_timeout,
            recv_timeout: spec.link.recv_timeout,
            tls: wire.tls.as_ref(),
            channel: wire.channel,
        };
        let done = on_secretflow_link(&link, cancel, |session, ctx| -> Result<_, UbError> {
            ctx.connect_to_mesh_again(spec.link.connect_timeout, SECOND_CONNECT_FIRST_WAIT)?;
            let mut online = ctx.spawn();
            let run = Run {
                spec,
                session,
                progress,
            };
            run.steps(ctx, &mut online, &mut report, local)
        })?;
        // Written once the session has closed: a peer that fails at the end leaves no cache
        // and no output behind.
        if let Some(cache) = &done.client_cache {
            write_client_cache(&spec.cache_path, cache)?;
        }
        if let (Some(r), Some(out)) = (&done.result, &spec.output) {
            progress.stage("writing output", 0);
            write_result(spec, wire, r, out, &mut report)?;
        }
    }
    report.finish(spec, start)
}

/// What a run reads from its own files, read before it connects so a bad file fails at once.
#[derive(Default)]
struct Local {
    /// The server's cache (transfer and online) and, online, its sorted input.
    server: Option<(ServerCache, Option<Table>)>,
    /// The client's input (online and full).
    client_table: Option<Table>,
    /// The client's copy of the cache and the server's row count (online; full receives it).
    client_cache: Option<(PeerCache, u64)>,
}

fn load_local(spec: &UbSpec, report: &mut UbReport) -> Result<Local, UbError> {
    let mut local = Local::default();
    match (spec.role, spec.mode) {
        (UbRole::Server, UbMode::TransferCache) => {
            local.server = Some((
                read_server_cache(&spec.cache_path, spec.secret_key_path.as_deref())?,
                None,
            ));
        }
        (UbRole::Server, UbMode::Online) => local.server = Some(server_state(spec, report)?),
        (UbRole::Client, UbMode::Online | UbMode::Full) => {
            let input = spec.input.as_ref().ok_or(ProtocolError::Unreachable(
                "a client that queries has no input",
            ))?;
            let table = read_table(input, &spec.keys, false)?;
            report.original_count = table.row_count() as i64;
            report.original_key_count = table.groups.len() as i64;
            local.client_table = Some(table);
            if spec.mode == UbMode::Online {
                let c = read_client_cache(&spec.cache_path, spec.max_cache_bytes)?;
                report.cache_count = c.0.values.len() as u64;
                local.client_cache = Some(c);
            }
        }
        _ => {}
    }
    Ok(local)
}

/// What a run writes after its session has closed.
#[derive(Default)]
struct Done {
    /// The client's copy of the server's cache (modes that transfer).
    client_cache: Option<PeerCache>,
    /// This party's matched keys (online, when it learns the result).
    result: Option<Matched>,
}

/// This party's matched keys, with its table and the peer's row count for an outer join.
struct Matched {
    table: Table,
    matched: Vec<Match>,
    peer_rows: u64,
}

/// A run's fixed parts.
struct Run<'a> {
    spec: &'a UbSpec,
    session: &'a Session,
    progress: &'a dyn Progress,
}

impl Run<'_> {
    /// The modes that talk to the peer, in psi's order.
    fn steps(
        &self,
        ctx: &mut Context,
        online: &mut Context,
        report: &mut UbReport,
        mut local: Local,
    ) -> Result<Done, UbError> {
        let mut done = Done::default();
        let (spec, session, progress) = (self.spec, self.session, self.progress);
        let clock = |session: &Session| (Instant::now(), session.traffic());
        let phase = |session: &Session, (t, (s0, r0)): (Instant, (u64, u64))| {
            let (s, r) = session.traffic();
            UbPhase {
                seconds: t.elapsed().as_secs_f64(),
                bytes_sent: s.saturating_sub(s0),
                bytes_received: r.saturating_sub(r0),
            }
        };
        let transfer =
            |ctx: &mut Context, report: &mut UbReport, local: &mut Local| -> Result<(), UbError> {
                progress.stage("transferring the cache", 0);
                match spec.role {
                    UbRole::Server => {
                        let cache = match local.server.take() {
                            Some((c, _)) => c,
                            None => read_server_cache(
                                &spec.cache_path,
                                spec.secret_key_path.as_deref(),
                            )?,
                        };
                        ub::send_cache(ctx, &cache.values, &cache.extra)?;
                        report.cache_count = cache.values.len() as u64;
                    }
                    UbRole::Client => {
                        let max = spec.max_cache_bytes / OPRF_LEN as u64;
                        let cache = ub::recv_cache(ctx, max)?;
                        report.cache_count = cache.values.len() as u64;
                        let rows = cache.extra.iter().map(|&e| u64::from(e) + 1).sum();
                        local.client_cache = Some((cache, rows));
                    }
                }
                Ok(())
            };
        match spec.mode {
            UbMode::TransferCache => {
                let c = clock(session);
                transfer(ctx, report, &mut local)?;
                report.transfer_cache = Some(phase(session, c));
            }
            UbMode::Offline | UbMode::Full => {
                let c = clock(session);
                ctx.sync_wait_with(|ctx| -> Result<(), UbError> {
                    if spec.role == UbRole::Server {
                        progress.stage("generating the cache", 0);
                        gen_cache(spec, report)?;
                    }
                    transfer(ctx, report, &mut local)
                })??;
                report.transfer_cache = Some(phase(session, c));
            }
            UbMode::Online | UbMode::GenCache => {}
        }
        if spec.mode.queries() {
            let c = clock(session);
            progress.stage("querying with the SecretFlow party", 0);
            done.result = ctx.sync_wait(|| match spec.role {
                UbRole::Server => {
                    let state = match local.server.take() {
                        Some(s) => s,
                        None => server_state(spec, report)?,
                    };
                    server_online(spec, online, report, state)
                }
                UbRole::Client => {
                    let (Some(table), Some(cache)) =
                        (local.client_table.take(), local.client_cache.as_ref())
                    else {
                        return Err(UbError::from(ProtocolError::Unreachable(
                            "a client query without its input or cache",
                        )));
                    };
                    client_online(spec, online, report, table, cache)
                }
            })??;
            report.online = Some(phase(session, c));
        }
        if spec.role == UbRole::Client && spec.mode.transfers() {
            done.client_cache = local.client_cache.take().map(|(c, _)| c);
        }
        Ok(done)
    }
}

/// The output's layout for this party.
fn join_output<'a>(spec: &UbSpec, wire: &'a SfUbWire) -> JoinOutput<'a> {
    JoinOutput {
        join: wire.join,
        left: (spec.role == UbRole::Server) == wire.left_is_server,
        // SecretFlow's unbalanced JoinProcessor always sorts its input.
        keys_unique: false,
        align: spec.align,
        null_rep: &wire.csv_null_rep,
    }
}

/// `OfflineGenCache`: F_k of each unique key in sorted order, shuffled within windows, with its
/// sorted input beside it.
fn gen_cache(spec: &UbSpec, report: &mut UbReport) -> Result<(), UbError> {
    let input = spec.input.as_ref().ok_or(ProtocolError::Unreachable(
        "a server that generates its cache has no input",
    ))?;
    let table = read_table(input, &spec.keys, false)?;
    report.original_count = table.row_count() as i64;
    report.original_key_count = table.groups.len() as i64;
    let raw = match &spec.secret_key_path {
        Some(p) => crate::ub::key::load_or_create_raw(p, true)?.0,
        None => {
            let mut k = Zeroizing::new(vec![0u8; blindjoin_crypto::secretflow_oprf::KEY_LEN]);
            blindjoin_crypto::random_bytes(&mut k)?;
            k
        }
    };
    let key = OprfKey::from_bytes(&raw)?;
    let n = table.groups.len();
    if n > u32::MAX as usize {
        return Err(UbError::Data(DataError::Protocol(ProtocolError::Config(
            format!("{n} unique keys; SecretFlow's cache holds at most 2^32 - 1"),
        ))));
    }
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for w in 0..n.div_ceil(SHUFFLE_WINDOW) {
        let base = w * SHUFFLE_WINDOW;
        let len = SHUFFLE_WINDOW.min(n - base);
        order.extend(ub::random_permutation(len)?.into_iter().map(|i| base + i));
    }
    let items: Vec<&[u8]> = order
        .iter()
        .map(|&i| table.groups[i].item.as_slice())
        .collect();
    let values = key.evaluate(&items)?;
    let mut bin = Vec::with_capacity(n * SERVER_RECORD);
    for (pos, (&g, v)) in order.iter().zip(&values).enumerate() {
        bin.extend_from_slice(&(pos as u32).to_le_bytes());
        bin.extend_from_slice(&(g as u32).to_le_bytes());
        let extra = table.groups[g].rows.len().saturating_sub(1) as u32;
        bin.extend_from_slice(&extra.to_le_bytes());
        bin.extend_from_slice(v);
        bin.extend_from_slice(&[0u8; 32 - OPRF_LEN]);
    }
    let dir = &spec.cache_path;
    prepare_dir(dir)?;
    for f in KEY_INFO {
        remove_if_present(&dir.join(f))?;
    }
    write_atomic(&dir.join(SORTED_INPUT), &table.sorted_csv())?;
    write_atomic(&dir.join(SERVER_CACHE), &bin)?;
    // With a key file the meta still carries the key, as SecretFlow's does; it is 0600.
    let meta = serde_json::json!({
        "version": META_VERSION,
        "itemLen": OPRF_LEN,
        "privKey": base64::engine::general_purpose::STANDARD.encode(key.raw_bytes()),
        "keyCols": spec.keys,
        "itemCount": n,
    });
    let text = Zeroizing::new(meta.to_string());
    write_atomic(&dir.join(SERVER_META), text.as_bytes())?;
    report.cache_count = n as u64;
    Ok(())
}

/// The cache directory, made 0700 when missing.
fn prepare_dir(dir: &Path) -> Result<(), UbError> {
    crate::table::private_fs::ensure_user_dir(dir).map_err(|e| {
        cache_err(
            dir,
            format!("cannot use it as the cache directory: {e}"),
            "give ub_psi_config.cache_path a directory this user can write",
        )
    })?;
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<(), UbError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(cache_err(
            path,
            format!("cannot remove the stale file: {e}"),
            "remove it by hand",
        )),
        _ => Ok(()),
    }
}

/// Reads a file of at most `max` bytes, or says which cache file is missing or too large.
fn read_bounded(path: &Path, max: u64, fix: &'static str) -> Result<Vec<u8>, UbError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| cache_err(path, format!("cannot read it: {e}"), fix))?;
    if meta.len() > max {
        return Err(cache_err(
            path,
            format!("{} bytes, more than the {max} allowed", meta.len()),
            fix,
        ));
    }
    std::fs::read(path).map_err(|e| cache_err(path, format!("cannot read it: {e}"), fix))
}

/// The server's cache directory: meta, key (the key file when given, else the meta's) and
/// records, checked against each other.
fn read_server_cache(dir: &Path, key_path: Option<&Path>) -> Result<ServerCache, UbError> {
    let meta_path = dir.join(SERVER_META);
    let text = Zeroizing::new(read_bounded(&meta_path, MAX_META_BYTES, REGENERATE)?);
    let meta: serde_json::Value = serde_json::from_slice(&text).map_err(|e| {
        cache_err(
            &meta_path,
            format!("not SecretFlow's cache meta: {e}"),
            REGENERATE,
        )
    })?;
    let field = |name: &str| meta.get(name);
    let num = |name: &str| -> Option<u64> {
        match field(name)? {
            serde_json::Value::Number(n) => n.as_u64(),
            // Protobuf's JSON writes 64-bit numbers as strings.
            serde_json::Value::String(s) => s.parse().ok(),
            _ => None,
        }
    };
    if field("version").and_then(|v| v.as_str()) != Some(META_VERSION) {
        return Err(cache_err(
            &meta_path,
            format!("version {:?}, not {META_VERSION:?}", field("version")),
            REGENERATE,
        ));
    }
    if num("itemLen") != Some(OPRF_LEN as u64) {
        return Err(cache_err(
            &meta_path,
            format!("itemLen {:?}, not {OPRF_LEN}", field("itemLen")),
            REGENERATE,
        ));
    }
    let count = num("itemCount").unwrap_or(0);
    let key = match key_path {
        Some(p) => OprfKey::from_bytes(&crate::ub::key::load_or_create_raw(p, false)?.0)?,
        None => {
            let b64 = field("privKey").and_then(|v| v.as_str()).unwrap_or("");
            let raw = Zeroizing::new(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|_| cache_err(&meta_path, "its privKey is not base64", REGENERATE))?,
            );
            OprfKey::from_bytes(&raw)
                .map_err(|e| cache_err(&meta_path, format!("its privKey: {e}"), REGENERATE))?
        }
    };
    let bin_path = dir.join(SERVER_CACHE);
    let bin = read_bounded(
        &bin_path,
        count.saturating_mul(SERVER_RECORD as u64),
        REGENERATE,
    )?;
    if bin.len() as u64 != count * SERVER_RECORD as u64 {
        return Err(cache_err(
            &bin_path,
            format!(
                "{} bytes, but its meta says {count} records of {SERVER_RECORD}",
                bin.len()
            ),
            REGENERATE,
        ));
    }
    let n = count as usize;
    let mut cache = ServerCache {
        key,
        values: Vec::with_capacity(n),
        shuffle_index: Vec::with_capacity(n),
        extra: Vec::with_capacity(n),
    };
    for (pos, r) in bin.chunks_exact(SERVER_RECORD).enumerate() {
        if le_u32(r, 0) as usize != pos {
            return Err(cache_err(
                &bin_path,
                format!("record {pos} names position {}", le_u32(r, 0)),
                REGENERATE,
            ));
        }
        cache.shuffle_index.push(le_u32(r, 4));
        cache.extra.push(le_u32(r, 8));
        let mut v = [0u8; OPRF_LEN];
        v.copy_from_slice(&r[12..12 + OPRF_LEN]);
        cache.values.push(v);
    }
    Ok(cache)
}

/// The little-endian u32 at `at` in a record (its length checked by the caller).
fn le_u32(r: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([r[at], r[at + 1], r[at + 2], r[at + 3]])
}

/// The client's copy of the server's cache, replacing any older one.
fn write_client_cache(dir: &Path, cache: &PeerCache) -> Result<(), UbError> {
    prepare_dir(dir)?;
    let n = cache.values.len();
    let mut bin = Vec::with_capacity(n * CLIENT_RECORD);
    let mut rows: u64 = 0;
    for (v, &e) in cache.values.iter().zip(&cache.extra) {
        bin.extend_from_slice(v);
        bin.extend_from_slice(&[0u8; 32 - OPRF_LEN]);
        bin.extend_from_slice(&e.to_le_bytes());
        rows += u64::from(e) + 1;
    }
    let too_many = |what: &str| {
        cache_err(
            &dir.join(CLIENT_META),
            format!("the server's {what} exceed SecretFlow's 32-bit count"),
            "the server's table is too large for SecretFlow's client cache",
        )
    };
    let n32 = u32::try_from(n).map_err(|_| too_many("keys"))?;
    let rows32 = u32::try_from(rows).map_err(|_| too_many("rows"))?;
    let mut meta = Vec::with_capacity(12);
    meta.extend_from_slice(&n32.to_le_bytes());
    meta.extend_from_slice(&rows32.to_le_bytes());
    meta.extend_from_slice(&(OPRF_LEN as u32).to_le_bytes());
    // The records first: a reader checks them against the meta, which lands last.
    remove_if_present(&dir.join(CLIENT_META))?;
    write_atomic(&dir.join(CLIENT_CACHE), &bin)?;
    write_atomic(&dir.join(CLIENT_META), &meta)?;
    Ok(())
}

/// The client's cache and the server's row count.
fn read_client_cache(dir: &Path, max_bytes: u64) -> Result<(PeerCache, u64), UbError> {
    let meta_path = dir.join(CLIENT_META);
    let meta = read_bounded(&meta_path, 12, RETRANSFER)?;
    if meta.len() != 12 {
        return Err(cache_err(
            &meta_path,
            format!("{} bytes, not SecretFlow's 12", meta.len()),
            RETRANSFER,
        ));
    }
    let (count, rows, len) = (le_u32(&meta, 0), le_u32(&meta, 4), le_u32(&meta, 8));
    if len as usize != OPRF_LEN {
        return Err(cache_err(
            &meta_path,
            format!("values of {len} bytes, not {OPRF_LEN}"),
            RETRANSFER,
        ));
    }
    let bin_path = dir.join(CLIENT_CACHE);
    let want = u64::from(count) * CLIENT_RECORD as u64;
    if want > max_bytes.saturating_mul(3) {
        return Err(cache_err(
            &bin_path,
            format!("{count} values, more than blindjoin.max_cache_bytes allows"),
            "raise blindjoin.max_cache_bytes",
        ));
    }
    let bin = read_bounded(&bin_path, want, RETRANSFER)?;
    if bin.len() as u64 != want {
        return Err(cache_err(
            &bin_path,
            format!("{} bytes, but its meta says {count} records", bin.len()),
            RETRANSFER,
        ));
    }
    let mut cache = PeerCache::default();
    for r in bin.chunks_exact(CLIENT_RECORD) {
        let mut v = [0u8; OPRF_LEN];
        v.copy_from_slice(&r[..OPRF_LEN]);
        cache.values.push(v);
        cache.extra.push(le_u32(r, 32));
    }
    Ok((cache, u64::from(rows)))
}

/// The server's cache and, when it is there, its sorted input, checked against each other.
fn server_state(
    spec: &UbSpec,
    report: &mut UbReport,
) -> Result<(ServerCache, Option<Table>), UbError> {
    let cache = read_server_cache(&spec.cache_path, spec.secret_key_path.as_deref())?;
    report.cache_count = cache.values.len() as u64;
    let sorted = spec.cache_path.join(SORTED_INPUT);
    let table = match (std::fs::metadata(&sorted), spec.server_get_result) {
        (Ok(_), _) => Some(read_table(&sorted, &spec.keys, false)?),
        (Err(_), true) => {
            return Err(cache_err(
                &sorted,
                "missing: with server_get_result the server writes its rows from the sorted \
                 input its cache was generated with",
                REGENERATE,
            ));
        }
        (Err(_), false) => None,
    };
    if let Some(t) = &table {
        report.original_count = t.row_count() as i64;
        report.original_key_count = t.groups.len() as i64;
        if t.groups.len() != cache.values.len() {
            return Err(UbError::InputChanged {
                path: sorted.clone(),
                problem: format!(
                    "{} keys, but the cache holds {}",
                    t.groups.len(),
                    cache.values.len()
                ),
            });
        }
        if cache
            .shuffle_index
            .iter()
            .any(|&i| i as usize >= t.groups.len())
        {
            return Err(cache_err(
                &spec.cache_path.join(SERVER_CACHE),
                "a record names a key outside the sorted input",
                REGENERATE,
            ));
        }
    }
    Ok((cache, table))
}

/// The server's `Online`: evaluate, then (with `server_get_result`) map the matched cache
/// positions to its sorted input's keys and write its rows.
fn server_online(
    spec: &UbSpec,
    online: &mut Context,
    report: &mut UbReport,
    (cache, table): (ServerCache, Option<Table>),
) -> Result<Option<Matched>, UbError> {
    let outcome = ub::server_online(
        online,
        &cache.key,
        spec.client_get_result,
        spec.server_get_result,
        cache.values.len(),
        spec.max_query_items,
    )?;
    report.client_key_count = Some(outcome.peer_unique);
    let (Some(matches), Some(table), Some(_)) = (outcome.matches, table, &spec.output) else {
        return Ok(None);
    };
    let matched: Vec<Match> = matches
        .iter()
        .map(|m| Match {
            index: cache.shuffle_index[m.cache_index as usize],
            peer_extra: m.peer_extra,
        })
        .collect();
    if matched
        .iter()
        .any(|m| m.index as usize >= table.groups.len())
    {
        return Err(cache_err(
            &spec.cache_path.join(SERVER_CACHE),
            "a record names a key outside the sorted input",
            REGENERATE,
        ));
    }
    Ok(Some(Matched {
        table,
        matched,
        peer_rows: outcome.peer_total,
    }))
}

/// The client's `Online`: query with its sorted unique keys, then (with `client_get_result`)
/// write its rows.
fn client_online(
    spec: &UbSpec,
    online: &mut Context,
    report: &mut UbReport,
    table: Table,
    (cache, server_rows): &(PeerCache, u64),
) -> Result<Option<Matched>, UbError> {
    let items: Vec<&[u8]> = table.groups.iter().map(|g| g.item.as_slice()).collect();
    let extra: Vec<u32> = table
        .groups
        .iter()
        .map(|g| g.rows.len().saturating_sub(1) as u32)
        .collect();
    let found = ub::client_online(online, &items, &extra, cache, spec.server_get_result)?;
    report.client_key_count = Some(items.len() as u64);
    if spec.output.is_none() || !spec.client_get_result {
        return Ok(None);
    }
    let matched: Vec<Match> = found
        .iter()
        .map(|m| Match {
            index: m.index,
            peer_extra: m.peer_extra,
        })
        .collect();
    Ok(Some(Matched {
        table,
        matched,
        peer_rows: *server_rows,
    }))
}

fn write_result(
    spec: &UbSpec,
    wire: &SfUbWire,
    Matched {
        table,
        matched,
        peer_rows,
    }: &Matched,
    out: &Path,
    report: &mut UbReport,
) -> Result<(), UbError> {
    let how = join_output(spec, wire);
    write_join(table, matched, Some(*peer_rows), out, &how)?;
    // SecretFlow's report: this party's matched rows and keys.
    report.intersection_key_count = matched.len() as i64;
    report.intersection_count = matched
        .iter()
        .map(|m| table.groups[m.index as usize].rows.len() as i64)
        .sum();
    report.output_path = Some(out.display().to_string());
    Ok(())
}
