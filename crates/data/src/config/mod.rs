//! SecretFlow PSI v2 launch configs (`psi_config` / `link_config` / `self_link_party`), read
//! unchanged, plus our documented extensions in a top-level `blindjoin` object. See
//! `docs/config.md` for every field.
//!
//! Rules: unknown fields are errors (as in SecretFlow, which parses with
//! `ignore_unknown_fields=false`); a field for a feature we have not built is an error that says
//! "not supported yet", unless it holds its default or disabled value; a trailing comma (which
//! SecretFlow's own docs contain) is accepted with a warning.

use crate::error::ConfigError;
use crate::plan::Plan;
pub use crate::spec::DEFAULT_BUCKET_SIZE;
use crate::spec::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_RECV_TIMEOUT, JoinSpec, JoinType, Parties, PeerLink, RunSpec,
    SpillMode, TableFormat,
};
use blindjoin_crypto::Curve;
use blindjoin_link::{DEFAULT_SILENCE_TIMEOUT, TlsConfig};
use blindjoin_protocols::rr22::Rr22Mode;
use blindjoin_protocols::{Protocol, ProtocolChoice, ProtocolError, Reveal, Role};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LaunchConfig {
    psi_config: Option<PsiConfig>,
    link_config: Option<LinkConfig>,
    self_link_party: Option<String>,
    blindjoin: Option<Extensions>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PsiConfig {
    protocol_config: ProtocolConfig,
    input_config: IoConfig,
    output_config: Option<IoConfig>,
    keys: Vec<String>,
    debug_options: Option<DebugOptions>,
    skip_duplicates_check: Option<bool>,
    disable_alignment: Option<bool>,
    recovery_config: Option<RecoveryConfig>,
    advanced_join_type: Option<String>,
    left_side: Option<String>,
    check_hash_digest: Option<bool>,
    input_attr: Option<InputAttr>,
    output_attr: Option<OutputAttr>,
    intersection_threshold: Option<u64>,
    count_path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProtocolConfig {
    protocol: String,
    role: String,
    broadcast_result: Option<bool>,
    ecdh_config: Option<EcdhConfig>,
    kkrt_config: Option<BucketConfig>,
    rr22_config: Option<Rr22Config>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EcdhConfig {
    curve: Option<String>,
    batch_size: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BucketConfig {
    bucket_size: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rr22Config {
    bucket_size: Option<Value>,
    low_comm_mode: Option<bool>,
    /// Ours, not SecretFlow's: RR22's malicious variant (SecretFlow cannot switch it on).
    malicious: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IoConfig {
    #[serde(rename = "type")]
    kind: Option<String>,
    path: String,
}

/// Checked here for its shape only; `crate::ops::Ops::from_config` reads its values.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct DebugOptions {
    logging_level: Option<String>,
    trace_path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecoveryConfig {
    enabled: Option<bool>,
    folder: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputAttr {
    #[allow(dead_code)] // A promise we do not need: duplicates are always handled.
    keys_unique: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputAttr {
    csv_null_rep: Option<String>,
}

/// yacl's `ContextDescProto`. Transport-tuning fields of brpc have no meaning for our transport
/// and are accepted and ignored; `enable_ssl: true` switches on mutual TLS (see [`tls_config`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkConfig {
    parties: Vec<PartyConfig>,
    id: Option<Value>,
    connect_retry_times: Option<Value>,
    connect_retry_interval_ms: Option<Value>,
    recv_timeout_ms: Option<Value>,
    http_max_payload_size: Option<Value>,
    http_timeout_ms: Option<Value>,
    throttle_window_size: Option<Value>,
    chunk_parallel_send_size: Option<Value>,
    brpc_channel_protocol: Option<Value>,
    brpc_channel_connection_type: Option<Value>,
    enable_ssl: Option<bool>,
    client_ssl_opts: Option<SslOpts>,
    server_ssl_opts: Option<SslOpts>,
    retry_opts: Option<Value>,
}

/// yacl's `SSLOptionsProto`, spelled as SecretFlow spells it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SslOpts {
    certificate_path: Option<String>,
    private_key_path: Option<String>,
    ca_file_path: Option<String>,
    /// Accepted and ignored: webpki bounds chain building itself (see docs/config.md).
    verify_depth: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartyConfig {
    id: String,
    host: String,
}

/// Our own fields, under the top-level `blindjoin` key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Extensions {
    report_path: Option<String>,
    secret_key_path: Option<String>,
    connect_timeout_ms: Option<Value>,
    peer_silence_timeout_ms: Option<Value>,
    spill: Option<String>,
    spill_dir: Option<String>,
    cardinality_only: Option<bool>,
    min_intersection: Option<u64>,
    /// Read by [`crate::ops::Ops::from_config`].
    #[allow(dead_code)]
    threads: Option<Value>,
    check_intersection_digest: Option<bool>,
    /// Partitions (see [`crate::pipeline::partition`]).
    workers: Option<u64>,
    /// The workers' listening ports, `"A-B"`.
    worker_ports: Option<String>,
    /// `"blindjoin"` (default) or `"secretflow"`: which wire the peer speaks.
    peer_wire: Option<String>,
}

/// Parses a launch config from `text`; `source` names it in errors.
///
/// # Errors
/// Syntax errors (with the field path, line and column), unknown fields, invalid values, and
/// features not built yet.
pub fn parse_launch_config(
    text: &str,
    source: &str,
    base_dir: &Path,
) -> Result<RunSpec, ConfigError> {
    two_party(&Envelope::parse(text, source, base_dir)?)
}

/// A two-party run from a parsed launch config.
///
/// # Errors
/// As [`parse_launch_config`].
pub(crate) fn two_party(env: &Envelope) -> Result<RunSpec, ConfigError> {
    let cfg = env.typed_kind::<LaunchConfig>(&["psi_config"])?;
    let mut warnings = env.warnings().to_vec();
    let resolve = |p: &str| resolve_path(env.base_dir(), p);

    let psi = cfg
        .psi_config
        .ok_or_else(|| invalid("psi_config", "missing; it holds the PSI run's settings"))?;
    let link = cfg.link_config.ok_or_else(|| {
        invalid(
            "link_config",
            "missing; it lists the two parties' addresses",
        )
    })?;
    let self_id = cfg.self_link_party.ok_or_else(|| {
        invalid(
            "self_link_party",
            "missing; set it to this party's id from link_config.parties",
        )
    })?;

    // Protocol, role, curve.
    let pc = &psi.protocol_config;
    let protocol: Protocol = match pc.protocol.trim() {
        other if three_party::THREE_PARTY_PROTOCOLS.contains(&other) => {
            return Err(invalid(
                "psi_config.protocol_config.protocol",
                &format!(
                    "{other} is the three-party protocol; it needs three link_config.parties and \
                     protocol_config.receiver"
                ),
            ));
        }
        // SecretFlow's spellings only: `PROTOCOL_ECDH`, `PROTOCOL_RR22`, `PROTOCOL_KKRT`.
        other if other.starts_with("PROTOCOL_") && other.parse::<Protocol>().is_ok() => {
            other.parse().map_err(|e: ProtocolError| {
                invalid("psi_config.protocol_config.protocol", &e.to_string())
            })?
        }
        other => {
            return Err(invalid(
                "psi_config.protocol_config.protocol",
                &format!(
                    "unknown protocol {other:?}; use PROTOCOL_RR22, PROTOCOL_KKRT or PROTOCOL_ECDH"
                ),
            ));
        }
    };
    let role = match pc.role.trim() {
        "ROLE_RECEIVER" => Role::Receiver,
        "ROLE_SENDER" => Role::Sender,
        other => {
            return Err(invalid(
                "psi_config.protocol_config.role",
                &format!("{other:?} is not a balanced-PSI role; use ROLE_RECEIVER or ROLE_SENDER"),
            ));
        }
    };
    let ecdh = pc.ecdh_config.as_ref();
    let curve = match ecdh.and_then(|e| e.curve.as_deref()) {
        _ if protocol != Protocol::Ecdh => None,
        None | Some("") | Some("CURVE_INVALID_TYPE") => {
            return Err(invalid(
                "psi_config.protocol_config.ecdh_config.curve",
                "required for PROTOCOL_ECDH; e.g. \"CURVE_25519\" (fastest), CURVE_RISTRETTO255, CURVE_SECP256K1, CURVE_SM2, CURVE_P256",
            ));
        }
        Some(name) => Some(parse_curve(name)?),
    };
    if protocol == Protocol::Ecdh && name_is_elligator(ecdh) {
        warnings.push(
            "CURVE_25519_ELLIGATOR2 runs as CURVE_25519: blindjoin's Curve25519 always hashes with RFC 9380 Elligator 2"
                .into(),
        );
    }
    let batch_size = match ecdh.and_then(|e| e.batch_size.as_ref()) {
        None => 4096,
        Some(v) => lenient_u64(v, "psi_config.protocol_config.ecdh_config.batch_size")? as usize,
    };
    if batch_size == 0 || batch_size > blindjoin_protocols::MAX_BATCH_SIZE {
        return Err(invalid(
            "psi_config.protocol_config.ecdh_config.batch_size",
            &format!(
                "must be between 1 and {}",
                blindjoin_protocols::MAX_BATCH_SIZE
            ),
        ));
    }
    let (choice, bucket_size) = match (protocol, curve) {
        (Protocol::Rr22, _) => rr22_settings(pc.rr22_config.as_ref())?,
        (Protocol::Kkrt, _) => (
            ProtocolChoice::Kkrt,
            kkrt_settings(pc.kkrt_config.as_ref())?,
        ),
        (_, Some(curve)) => (ProtocolChoice::Ecdh { curve }, DEFAULT_BUCKET_SIZE),
        (_, None) => {
            return Err(invalid(
                "psi_config.protocol_config.protocol",
                &format!("{protocol} is not a two-party protocol of this build"),
            ));
        }
    };

    // Input and output.
    let input_format = io_type(
        "psi_config.input_config.type",
        psi.input_config.kind.as_deref(),
    )?;
    if psi.input_config.path.is_empty() {
        return Err(invalid(
            "psi_config.input_config.path",
            "empty; give the input CSV or Parquet file",
        ));
    }
    let broadcast_result = pc.broadcast_result.unwrap_or(false);
    let mut output_format = TableFormat::Csv;
    let output = match &psi.output_config {
        Some(o) => {
            output_format = io_type("psi_config.output_config.type", o.kind.as_deref())?;
            if o.path.is_empty() {
                None
            } else {
                Some(resolve(&o.path))
            }
        }
        None => None,
    };
    if output.is_none()
        && (role == Role::Receiver || broadcast_result)
        && cfg
            .blindjoin
            .as_ref()
            .is_none_or(|e| e.cardinality_only != Some(true))
    {
        return Err(invalid(
            "psi_config.output_config.path",
            "missing; this party receives the intersection and needs a file to write it to",
        ));
    }
    if psi.keys.is_empty() {
        return Err(invalid(
            "psi_config.keys",
            "empty; list the key column(s), e.g. [\"id\"]",
        ));
    }
    for (i, k) in psi.keys.iter().enumerate() {
        if psi.keys[..i].contains(k) {
            return Err(invalid(
                "psi_config.keys",
                &format!("{k:?} is listed twice"),
            ));
        }
    }

    // Fields of features not built yet: accepted only at their default/disabled value.
    let recovery = match &psi.recovery_config {
        Some(RecoveryConfig {
            enabled: Some(true),
            folder,
        }) => match folder.as_deref().map(str::trim) {
            Some(f) if !f.is_empty() => Some(resolve(f)),
            _ => {
                return Err(invalid(
                    "psi_config.recovery_config.folder",
                    "missing; give a folder for the checkpoints when recovery is enabled",
                ));
            }
        },
        _ => None,
    };
    let join_name = psi
        .advanced_join_type
        .as_deref()
        .unwrap_or("ADVANCED_JOIN_TYPE_UNSPECIFIED");
    let join_type = JoinType::parse(join_name).ok_or_else(|| {
        invalid(
            "psi_config.advanced_join_type",
            &format!(
                "unknown join type {join_name:?}; use ADVANCED_JOIN_TYPE_UNSPECIFIED, _INNER_JOIN, _LEFT_JOIN, _RIGHT_JOIN, _FULL_JOIN or _DIFFERENCE"
            ),
        )
    })?;
    let left_side = match psi.left_side.as_deref().unwrap_or("") {
        "" | "ROLE_RECEIVER" => Role::Receiver,
        "ROLE_SENDER" => Role::Sender,
        side => {
            return Err(invalid(
                "psi_config.left_side",
                &format!("{side:?}; use ROLE_RECEIVER or ROLE_SENDER"),
            ));
        }
    };
    if join_type != JoinType::Inner && !broadcast_result {
        return Err(invalid(
            "psi_config.advanced_join_type",
            &format!(
                "{join_name} needs psi_config.protocol_config.broadcast_result = true on both \
                 parties: each side's output is padded for the other's unmatched rows"
            ),
        ));
    }
    let check_hash_digest = psi.check_hash_digest.unwrap_or(false);
    let check_intersection_digest = cfg
        .blindjoin
        .as_ref()
        .and_then(|e| e.check_intersection_digest)
        .unwrap_or(false);
    if check_intersection_digest && !broadcast_result {
        return Err(invalid(
            "blindjoin.check_intersection_digest",
            "needs psi_config.protocol_config.broadcast_result = true: both parties must know \
             the intersection to compare its digest",
        ));
    }
    let null_rep = psi
        .output_attr
        .as_ref()
        .and_then(|a| a.csv_null_rep.clone())
        .unwrap_or_else(|| "NULL".into());
    let join = JoinSpec {
        join: join_type,
        left_side,
        null_rep,
        check_hash_digest,
        check_intersection_digest,
    };
    let cardinality_only = cfg
        .blindjoin
        .as_ref()
        .and_then(|e| e.cardinality_only)
        .unwrap_or(false);
    let (reveal, reveal_field) = match (psi.intersection_threshold.unwrap_or(0), cardinality_only) {
        (0, false) => (Reveal::Intersection, ""),
        (0, true) => (Reveal::Cardinality, "blindjoin.cardinality_only"),
        (t, false) => (Reveal::UpTo(t), "psi_config.intersection_threshold"),
        (_, true) => {
            return Err(invalid(
                "blindjoin.cardinality_only",
                "cannot be combined with psi_config.intersection_threshold; choose one",
            ));
        }
    };
    let count_path = psi
        .count_path
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(resolve);
    if output.is_some() && reveal == Reveal::Cardinality {
        warnings.push(
            "psi_config.output_config: not written; blindjoin.cardinality_only reveals only the \
             intersection's size (in the report and count_path)"
                .into(),
        );
    }
    if count_path.is_some() && reveal == Reveal::Intersection {
        warnings.push(
            "psi_config.count_path: ignored; it is written only with intersection_threshold or \
             blindjoin.cardinality_only"
                .into(),
        );
    }
    let _ = (&psi.skip_duplicates_check, &psi.input_attr);
    // `debug_options` is process-wide: `crate::ops::Ops::from_config` reads it.
    let _ = &psi.debug_options;

    // Link.
    let _ = (
        &link.id,
        &link.http_max_payload_size,
        &link.http_timeout_ms,
        &link.throttle_window_size,
        &link.chunk_parallel_send_size,
        &link.brpc_channel_protocol,
        &link.brpc_channel_connection_type,
        &link.retry_opts,
    );
    if link.parties.len() != 2 {
        return Err(invalid(
            "link_config.parties",
            &format!(
                "has {} parties; two-party PSI needs exactly 2 (three parties: protocol \
                 PROTOCOL_ECDH_3PC with protocol_config.receiver)",
                link.parties.len()
            ),
        ));
    }
    let me = link
        .parties
        .iter()
        .position(|p| p.id == self_id)
        .ok_or_else(|| {
            invalid(
                "self_link_party",
                &format!("{self_id:?} is not one of the ids in link_config.parties"),
            )
        })?;
    let peer = &link.parties[1 - me];
    if peer.id == self_id {
        return Err(invalid(
            "link_config.parties",
            "both parties have the same id",
        ));
    }
    let sf_requested =
        cfg.blindjoin.as_ref().and_then(|e| e.peer_wire.as_deref()) == Some("secretflow");
    let tls = if link.enable_ssl.unwrap_or(false) && !sf_requested {
        let listener = blindjoin_link::TcpLink::listens(&self_id, &peer.id);
        Some(tls_config(
            link.client_ssl_opts.as_ref(),
            link.server_ssl_opts.as_ref(),
            listener,
            &resolve,
        )?)
    } else {
        None
    };
    let ext = cfg.blindjoin;
    let sf_wire = match ext.as_ref().and_then(|e| e.peer_wire.as_deref()) {
        None | Some("blindjoin") => None,
        Some("secretflow") => Some(peer_wire::secretflow(&psi, &link, me, &resolve)?),
        Some(other) => {
            return Err(invalid(
                "blindjoin.peer_wire",
                &format!("{other:?}; use \"blindjoin\" (the default) or \"secretflow\""),
            ));
        }
    };
    let connect_timeout = match (
        ext.as_ref().and_then(|e| e.connect_timeout_ms.as_ref()),
        &link.connect_retry_times,
        &link.connect_retry_interval_ms,
    ) {
        (Some(ms), _, _) => Duration::from_millis(lenient_u64(ms, "blindjoin.connect_timeout_ms")?),
        (None, None, None) => DEFAULT_CONNECT_TIMEOUT,
        (None, times, interval) => {
            let times = times.as_ref().map_or(Ok(10), |v| {
                lenient_u64(v, "link_config.connect_retry_times")
            })?;
            let interval = interval.as_ref().map_or(Ok(1000), |v| {
                lenient_u64(v, "link_config.connect_retry_interval_ms")
            })?;
            Duration::from_millis(times.saturating_mul(interval)).max(Duration::from_secs(1))
        }
    };
    let recv_timeout = match &link.recv_timeout_ms {
        None => DEFAULT_RECV_TIMEOUT,
        Some(v) => Duration::from_millis(lenient_u64(v, "link_config.recv_timeout_ms")?.max(1)),
    };
    let silence_timeout = match ext
        .as_ref()
        .and_then(|e| e.peer_silence_timeout_ms.as_ref())
    {
        None => DEFAULT_SILENCE_TIMEOUT,
        // The link enforces its minimum (100 ms) for config and flags alike.
        Some(v) => Duration::from_millis(lenient_u64(v, "blindjoin.peer_silence_timeout_ms")?),
    };

    let workers = match ext.as_ref().and_then(|e| e.workers) {
        None => None,
        Some(w @ 1..=1024) => Some(w as usize),
        Some(w) => {
            return Err(ConfigError::Invalid {
                field: "blindjoin.workers".into(),
                message: format!("{w}: 1 to 1024"),
            });
        }
    };
    let worker_ports = ext
        .as_ref()
        .and_then(|e| e.worker_ports.as_deref())
        .map(parse_port_range)
        .transpose()?;
    Ok(RunSpec {
        workers,
        worker_ports,
        parties: Parties {
            self_id: self_id.clone(),
            self_addr: link.parties[me].host.clone(),
            peer_id: peer.id.clone(),
            peer_addr: peer.host.clone(),
        },
        protocol: choice,
        bucket_size,
        role,
        broadcast_result,
        input: resolve(&psi.input_config.path),
        output,
        keys: psi.keys,
        align: !psi.disable_alignment.unwrap_or(false),
        join,
        report: ext
            .as_ref()
            .and_then(|e| e.report_path.as_deref())
            .map(resolve),
        batch_size,
        secret_key_path: ext
            .as_ref()
            .and_then(|e| e.secret_key_path.as_deref())
            .map(resolve),
        connect_timeout,
        recv_timeout,
        silence_timeout,
        tls,
        link_shape: None,
        spill: match ext.as_ref().and_then(|e| e.spill.as_deref()) {
            None => SpillMode::Auto,
            Some(v) => SpillMode::parse(v)
                .ok_or_else(|| invalid("blindjoin.spill", "must be auto, always or never"))?,
        },
        spill_dir: ext
            .as_ref()
            .and_then(|e| e.spill_dir.as_deref())
            .map(resolve),
        recovery,
        reveal,
        count_path,
        min_intersection: ext
            .as_ref()
            .and_then(|e| e.min_intersection)
            .filter(|&m| m > 0),
        input_format,
        output_format,
        warnings,
        peer_wire: sf_wire,
    })
    .and_then(|mut spec: RunSpec| {
        spec.check_reveal()
            .map_err(|why| invalid(reveal_field, &why))?;
        spec.note_trust_boundary();
        peer_wire::check(&spec)?;
        Ok(spec)
    })
}

/// The link settings of a run with one peer (unbalanced and labeled PSI): the parties, TLS and
/// receive timeout from `link_config` (`None` for a run that talks to no one), and the
/// `blindjoin` extensions' connect and silence timeouts in milliseconds.
pub(super) fn peer_link(
    link: Option<(Parties, Option<TlsConfig>, Duration)>,
    connect_timeout_ms: Option<&Value>,
    peer_silence_timeout_ms: Option<&Value>,
) -> Result<PeerLink, ConfigError> {
    let ms = |v: Option<&Value>, field: &str, default: Duration| -> Result<Duration, ConfigError> {
        v.map_or(Ok(default), |v| {
            Ok(Duration::from_millis(lenient_u64(v, field)?))
        })
    };
    let (parties, tls, recv_timeout) = match link {
        Some((p, tls, recv)) => (Some(p), tls, recv),
        None => (None, None, DEFAULT_RECV_TIMEOUT),
    };
    Ok(PeerLink {
        parties,
        connect_timeout: ms(
            connect_timeout_ms,
            "blindjoin.connect_timeout_ms",
            DEFAULT_CONNECT_TIMEOUT,
        )?,
        recv_timeout,
        silence_timeout: ms(
            peer_silence_timeout_ms,
            "blindjoin.peer_silence_timeout_ms",
            DEFAULT_SILENCE_TIMEOUT,
        )?,
        tls,
        shape: None,
    })
}

/// The peer of a run with exactly two parties that is not read from `psi_config` (unbalanced
/// and labeled PSI): this party and its peer from `link_config` and `self_link_party`, the TLS
/// files when `enable_ssl`, and the receive timeout. `what` names the run in the party-count
/// error ("unbalanced PSI").
/// `ours_tls` false: `enable_ssl` is for SecretFlow's link ([`secretflow_tls`]), not ours.
fn two_party_link(
    link: &LinkConfig,
    self_id: &str,
    what: &str,
    resolve: &dyn Fn(&str) -> PathBuf,
    ours_tls: bool,
) -> Result<(Parties, Option<TlsConfig>, Duration), ConfigError> {
    if link.parties.len() != 2 {
        return Err(invalid(
            "link_config.parties",
            &format!("has {} parties; {what} needs exactly 2", link.parties.len()),
        ));
    }
    let me = link
        .parties
        .iter()
        .position(|p| p.id == self_id)
        .ok_or_else(|| {
            invalid(
                "self_link_party",
                &format!("{self_id:?} is not one of the ids in link_config.parties"),
            )
        })?;
    let peer = &link.parties[1 - me];
    if peer.id == self_id {
        return Err(invalid(
            "link_config.parties",
            "both parties have the same id",
        ));
    }
    let tls = if link.enable_ssl.unwrap_or(false) && ours_tls {
        let listener = blindjoin_link::TcpLink::listens(self_id, &peer.id);
        Some(tls_config(
            link.client_ssl_opts.as_ref(),
            link.server_ssl_opts.as_ref(),
            listener,
            resolve,
        )?)
    } else {
        None
    };
    let recv_timeout = match &link.recv_timeout_ms {
        None => DEFAULT_RECV_TIMEOUT,
        Some(v) => Duration::from_millis(lenient_u64(v, "link_config.recv_timeout_ms")?.max(1)),
    };
    let parties = Parties {
        self_id: self_id.to_owned(),
        self_addr: link.parties[me].host.clone(),
        peer_id: peer.id.clone(),
        peer_addr: peer.host.clone(),
    };
    Ok((parties, tls, recv_timeout))
}

/// The TLS files for this party. As in SecretFlow, a party uses `server_ssl_opts` where it
/// listens and `client_ssl_opts` where it connects; we have one connection, so the listener (the
/// party whose id sorts first) uses `server_ssl_opts` and the other `client_ssl_opts`. If only one
/// of the two is given, it is used either way.
/// `link_config.enable_ssl` on SecretFlow's link: both halves' options as the config gives
/// them (the link checks the files when it starts).
///
/// # Errors
/// A `verify_depth` that is not a number.
fn secretflow_tls(
    link: &LinkConfig,
    resolve: &dyn Fn(&str) -> PathBuf,
) -> Result<Option<crate::spec::SfTls>, ConfigError> {
    if !link.enable_ssl.unwrap_or(false) {
        return Ok(None);
    }
    let path = |p: &Option<String>| {
        p.as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(resolve)
    };
    let one = |o: Option<&SslOpts>, name: &str| -> Result<crate::spec::SfSsl, ConfigError> {
        let Some(o) = o else {
            return Ok(crate::spec::SfSsl::default());
        };
        let depth = match &o.verify_depth {
            None => 0,
            Some(v) => lenient_u64(v, &format!("link_config.{name}.verify_depth"))?,
        };
        Ok(crate::spec::SfSsl {
            certificate_path: path(&o.certificate_path),
            private_key_path: path(&o.private_key_path),
            verify: depth > 0,
            ca_file_path: path(&o.ca_file_path),
        })
    };
    Ok(Some(crate::spec::SfTls {
        server: one(link.server_ssl_opts.as_ref(), "server_ssl_opts")?,
        client: one(link.client_ssl_opts.as_ref(), "client_ssl_opts")?,
    }))
}

/// `link_config.brpc_channel_protocol` on SecretFlow's link.
///
/// # Errors
/// A value that is not a string, or a protocol SecretFlow's link does not use here.
fn secretflow_channel(link: &LinkConfig) -> Result<crate::spec::SfChannel, ConfigError> {
    const FIELD: &str = "link_config.brpc_channel_protocol";
    let name = match &link.brpc_channel_protocol {
        None | Some(Value::Null) => return Ok(crate::spec::SfChannel::BaiduStd),
        Some(Value::String(s)) => s.trim(),
        Some(other) => {
            return Err(invalid(
                FIELD,
                &format!("{other} is not a string; use \"baidu_std\" or \"h2:grpc\""),
            ));
        }
    };
    match blindjoin_link::secretflow::ChannelProtocol::parse(name) {
        Ok(blindjoin_link::secretflow::ChannelProtocol::BaiduStd) => {
            Ok(crate::spec::SfChannel::BaiduStd)
        }
        Ok(blindjoin_link::secretflow::ChannelProtocol::H2Grpc) => {
            Ok(crate::spec::SfChannel::H2Grpc)
        }
        Err(message) => Err(invalid(FIELD, &message)),
    }
}

fn tls_config(
    client: Option<&SslOpts>,
    server: Option<&SslOpts>,
    listener: bool,
    resolve: &dyn Fn(&str) -> PathBuf,
) -> Result<TlsConfig, ConfigError> {
    let (opts, name) = match (client, server, listener) {
        (_, Some(s), true) | (None, Some(s), false) => (s, "server_ssl_opts"),
        (Some(c), _, false) | (Some(c), None, true) => (c, "client_ssl_opts"),
        (None, None, _) => {
            return Err(invalid(
                "link_config.enable_ssl",
                "true, but neither link_config.server_ssl_opts nor client_ssl_opts is given; \
                 give certificate_path, private_key_path and ca_file_path",
            ));
        }
    };
    let path = |field: &str, value: &Option<String>| -> Result<PathBuf, ConfigError> {
        match value.as_deref().map(str::trim) {
            Some(p) if !p.is_empty() => Ok(resolve(p)),
            _ => Err(invalid(
                &format!("link_config.{name}.{field}"),
                "missing or empty; mutual TLS (enable_ssl) needs this party's certificate, its \
                 private key and the CA certificate, as PEM files",
            )),
        }
    };
    if let Some(v) = &opts.verify_depth {
        lenient_i64(v, &format!("link_config.{name}.verify_depth"))?;
    }
    Ok(TlsConfig {
        cert_path: path("certificate_path", &opts.certificate_path)?,
        key_path: path("private_key_path", &opts.private_key_path)?,
        ca_path: path("ca_file_path", &opts.ca_file_path)?,
    })
}

/// `verify_depth` is an `int32` in SecretFlow's proto (and may be negative there).
fn lenient_i64(v: &Value, field: &str) -> Result<i64, ConfigError> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| invalid(field, &format!("expected an integer, got {v}")))
}

/// `bucket_size` from `kkrt_config` (SecretFlow's `KkrtConfig` has only this field).
fn kkrt_settings(cfg: Option<&BucketConfig>) -> Result<u64, ConfigError> {
    bucket_size(
        cfg.and_then(|c| c.bucket_size.as_ref()),
        "psi_config.protocol_config.kkrt_config.bucket_size",
    )
}

/// A protocol's `bucket_size`: [`DEFAULT_BUCKET_SIZE`] when absent, else a positive integer.
fn bucket_size(value: Option<&Value>, field: &str) -> Result<u64, ConfigError> {
    let bucket_size = match value {
        None => DEFAULT_BUCKET_SIZE,
        Some(v) => lenient_u64(v, field)?,
    };
    if bucket_size == 0 {
        return Err(invalid(
            field,
            "must be at least 1 (default 1048576 keys per bucket)",
        ));
    }
    Ok(bucket_size)
}

/// `(RR22 in its mode, bucket_size)` from `rr22_config`.
fn rr22_settings(cfg: Option<&Rr22Config>) -> Result<(ProtocolChoice, u64), ConfigError> {
    let low_comm = cfg.and_then(|c| c.low_comm_mode).unwrap_or(false);
    let malicious = cfg.and_then(|c| c.malicious).unwrap_or(false);
    let mode = match (low_comm, malicious) {
        (false, false) => Rr22Mode::Fast,
        (true, false) => Rr22Mode::LowComm,
        (false, true) => Rr22Mode::Malicious,
        (true, true) => {
            return Err(invalid(
                "psi_config.protocol_config.rr22_config",
                "rr22_config.low_comm_mode and rr22_config.malicious cannot both be true: RR22's \
                 low-communication (subfield VOLE) mode has no malicious variant; pick one",
            ));
        }
    };
    let bucket_size = bucket_size(
        cfg.and_then(|c| c.bucket_size.as_ref()),
        "psi_config.protocol_config.rr22_config.bucket_size",
    )?;
    Ok((ProtocolChoice::Rr22 { mode }, bucket_size))
}

/// The protocol a user names outside a config file (CLI flags, the demo, the Python API's
/// short names): `protocol` as `rr22` / `PROTOCOL_RR22` (likewise kkrt, ecdh), ECDH's `curve`,
/// RR22's `mode`; the other protocols ignore `curve` and `mode`.
///
/// # Errors
/// An unknown protocol or curve, naming `field` (the flag or argument).
pub fn protocol_choice(
    protocol: &str,
    curve: &str,
    mode: Rr22Mode,
    field: &str,
) -> Result<ProtocolChoice, ConfigError> {
    let protocol: Protocol = protocol
        .parse()
        .map_err(|e: ProtocolError| invalid(field, &e.to_string()))?;
    let curve = match protocol {
        Protocol::Ecdh => Some(parse_curve(curve)?),
        _ => None,
    };
    ProtocolChoice::new(protocol, curve, mode).map_err(|e| invalid(field, &e.to_string()))
}

fn name_is_elligator(ecdh: Option<&EcdhConfig>) -> bool {
    ecdh.and_then(|e| e.curve.as_deref())
        .is_some_and(|c| c.eq_ignore_ascii_case("CURVE_25519_ELLIGATOR2"))
}

/// Parses a curve name for the config; a curve this build cannot run is refused by name.
///
/// # Errors
/// Unknown or not-yet-supported curve.
pub fn parse_curve(name: &str) -> Result<Curve, ConfigError> {
    let field = "psi_config.protocol_config.ecdh_config.curve";
    let curve: Curve = name
        .parse()
        .map_err(|e: blindjoin_crypto::CryptoError| invalid(field, &e.to_string()))?;
    if !curve.is_supported() {
        return Err(not_yet(
            field,
            name,
            "use CURVE_25519 (fastest here), CURVE_FOURQ, CURVE_SECP256K1, CURVE_SM2 or CURVE_P256",
        ));
    }
    Ok(curve)
}

fn io_type(field: &str, kind: Option<&str>) -> Result<TableFormat, ConfigError> {
    match kind {
        None | Some("IO_TYPE_FILE_CSV") => Ok(TableFormat::Csv),
        Some("IO_TYPE_FILE_PARQUET") => Ok(TableFormat::Parquet),
        Some(other) => Err(invalid(
            field,
            &format!("unknown type {other:?}; use IO_TYPE_FILE_CSV or IO_TYPE_FILE_PARQUET"),
        )),
    }
}

/// Protobuf's JSON mapping writes 64-bit integers as strings; accept both forms.
fn lenient_u64(v: &Value, field: &str) -> Result<u64, ConfigError> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| invalid(field, &format!("expected a non-negative integer, got {v}")))
}

/// A worker port range, `A-B` (inclusive), as in `--worker-ports` and
/// `blindjoin.worker_ports`.
///
/// # Errors
/// Not two ports in order, or port 0.
pub fn parse_port_range(s: &str) -> Result<(u16, u16), ConfigError> {
    let bad = |message: String| ConfigError::Invalid {
        field: "blindjoin.worker_ports (--worker-ports)".into(),
        message,
    };
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| bad(format!("{s:?}: expected FIRST-LAST, e.g. 9100-9131")))?;
    let port = |t: &str| {
        t.trim()
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| bad(format!("{t:?} is not a port (1 to 65535)")))
    };
    let (a, b) = (port(a)?, port(b)?);
    if a > b {
        return Err(bad(format!("{s:?}: the first port is after the last")));
    }
    Ok((a, b))
}

fn invalid(field: &str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        message: message.to_string(),
    }
}

fn not_yet(field: &str, value: &str, hint: &str) -> ConfigError {
    ConfigError::NotYetSupported {
        field: field.to_string(),
        value: value.to_string(),
        hint: hint.to_string(),
    }
}

/// A path from a config: as given when absolute, else relative to the config file's folder.
pub(crate) fn resolve_path(base_dir: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

/// Blanks out commas that directly precede `]` or `}` (outside strings), keeping every other byte
/// in place so serde's line/column numbers still point into the user's file. Returns the cleaned
/// text and the 1-based lines where commas were removed.
fn strip_trailing_commas(text: &str) -> (String, Vec<usize>) {
    let mut bytes = text.as_bytes().to_vec();
    let mut lines = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    let mut last_comma: Option<usize> = None;
    for i in 0..bytes.len() {
        let b = bytes[i];
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                last_comma = None;
            }
            b',' => last_comma = Some(i),
            b']' | b'}' => {
                if let Some(c) = last_comma.take() {
                    bytes[c] = b' ';
                    lines.push(text.as_bytes()[..c].iter().filter(|&&b| b == b'\n').count() + 1);
                }
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ => last_comma = None,
        }
    }
    // Only ASCII commas were replaced by ASCII spaces, so the text is still UTF-8.
    (
        String::from_utf8(bytes).unwrap_or_else(|_| text.to_string()),
        lines,
    )
}

mod envelope;
mod kuscia;
pub use kuscia::{KUSCIA_SECRETFLOW_WIRE, KusciaTask, parse_kuscia_task};
mod legacy;
mod multi_party;
pub use envelope::Envelope;
pub use legacy::parse_legacy_launch_config;

mod peer_wire;
mod psi_csv;
pub use psi_csv::{PsiCsvCall, psi_csv_plan, psi_csv_protocol, psi_csv_spec};

mod n_party;
pub use n_party::{N_PARTY_PROTOCOLS, NPartyProtocol, NPartySpec, parse_n_party_config};

mod three_party;
pub use three_party::{THREE_PARTY_PROTOCOLS, ThreePartySpec, parse_three_party_config};

#[cfg(test)]
mod tests;

mod ub;
pub use apsi::parse_apsi_launch_config;
pub use ub::parse_ub_launch_config;

mod apsi;

/// Parses a launch config of any kind: SecretFlow's v1 form (`legacy_psi_config`, whose
/// `psi_type` picks the plan), else a three-party config (`psi_config` naming
/// `PROTOCOL_ECDH_3PC`), else an unbalanced one (with `ub_psi_config`), else a two-party one.
/// `source` names it in errors; relative paths resolve against `base_dir`.
///
/// # Errors
/// As [`parse_three_party_config`], [`parse_ub_launch_config`] or [`parse_launch_config`],
/// whichever parser the config's kind selects.
pub(crate) fn parse_any_launch_config(
    text: &str,
    source: &str,
    base_dir: &Path,
) -> Result<Plan, ConfigError> {
    plan_of(&Envelope::parse(text, source, base_dir)?)
}

/// The plan of a parsed launch config: its runtime config picks the parser (a `psi_config`
/// naming a three-party or n-party protocol is read by theirs).
///
/// # Errors
/// As [`parse_any_launch_config`].
pub fn plan_of(env: &Envelope) -> Result<Plan, ConfigError> {
    // SecretFlow's `oneof runtime_config` (and DK-PIR, not built yet), for every kind.
    env.runtime_config()?;
    if env.has(legacy::KEY) {
        return legacy::legacy(env);
    }
    if let Some(t) = three_party::three_party(env)? {
        return Ok(Plan::ThreeParty(Box::new(t)));
    }
    if let Some(t) = n_party::n_party(env)? {
        return Ok(Plan::NParty(Box::new(t)));
    }
    if env.has("ub_psi_config") {
        return ub::unbalanced(env).map(|u| Plan::Unbalanced(Box::new(u)));
    }
    if env.has("apsi_sender_config") || env.has("apsi_receiver_config") {
        return apsi::labeled_psi(env).map(|a| Plan::Apsi(Box::new(a)));
    }
    two_party(env).map(|s| Plan::TwoParty(Box::new(s)))
}
