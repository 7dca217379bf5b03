//! `ub_psi_config` (SecretFlow's `psi.v2.UbPsiConfig`) with `link_config` and
//! `self_link_party`, into a [`UbSpec`]. Every SecretFlow field is accepted; the ones for
//! features we lack are refused by name unless they hold their default. Ours live in the
//! top-level `blindjoin` object: `curve` (default `CURVE_FOURQ`, SecretFlow's fixed choice),
//! `report_path`, `connect_timeout_ms`, `peer_silence_timeout_ms`, `max_cache_bytes`,
//! `max_query_items` (the server's cap on client items per key, [`crate::ub::budget`]).

use super::{
    DebugOptions, Envelope, InputAttr, IoConfig, LinkConfig, OutputAttr, invalid, io_type,
    lenient_u64, not_yet, peer_link, two_party_link,
};
use crate::error::ConfigError;
use crate::spec::TableFormat;
use crate::ub::budget::{DEFAULT_MAX_QUERY_ITEMS, FIELD as MAX_QUERY_ITEMS};
use crate::ub::{DEFAULT_MAX_CACHE_BYTES, LabelChoice, SfUbWire, UbMode, UbRole, UbSpec};
use blindjoin_crypto::Curve;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UbLaunch {
    ub_psi_config: UbPsiConfig,
    link_config: Option<LinkConfig>,
    self_link_party: Option<String>,
    blindjoin: Option<UbExtensions>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UbPsiConfig {
    mode: Option<String>,
    role: Option<String>,
    input_config: Option<IoConfig>,
    keys: Option<Vec<String>>,
    server_secret_key_path: Option<String>,
    cache_path: Option<String>,
    server_get_result: Option<bool>,
    client_get_result: Option<bool>,
    disable_alignment: Option<bool>,
    output_config: Option<IoConfig>,
    debug_options: Option<DebugOptions>,
    advanced_join_type: Option<String>,
    left_side: Option<String>,
    input_attr: Option<InputAttr>,
    output_attr: Option<OutputAttr>,
    intersection_threshold: Option<u64>,
    count_path: Option<String>,
}

/// Ours, for unbalanced runs (also checked by the v1 parser, `legacy`, for its unbalanced types).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UbExtensions {
    curve: Option<String>,
    report_path: Option<String>,
    connect_timeout_ms: Option<Value>,
    peer_silence_timeout_ms: Option<Value>,
    max_cache_bytes: Option<Value>,
    max_query_items: Option<Value>,
    /// Read by [`crate::ops::Ops::from_config`].
    #[allow(dead_code)]
    threads: Option<Value>,
    label_columns: Option<Value>,
    /// `"secretflow"`: the peer is an unmodified SecretFlow party (`crate::secretflow_ub`).
    peer_wire: Option<Value>,
}

/// Parses an unbalanced-PSI launch config; `source` names it in errors, relative paths resolve
/// against `base_dir`.
///
/// # Errors
/// Syntax errors, unknown fields, invalid values, features not built yet.
pub fn parse_ub_launch_config(
    text: &str,
    source: &str,
    base_dir: &Path,
) -> Result<UbSpec, ConfigError> {
    unbalanced(&Envelope::parse(text, source, base_dir)?)
}

/// As [`parse_ub_launch_config`], from a parsed launch config.
///
/// # Errors
/// As [`parse_ub_launch_config`].
pub(crate) fn unbalanced(env: &Envelope) -> Result<UbSpec, ConfigError> {
    let cfg = env.typed_kind::<UbLaunch>(&["ub_psi_config"])?;
    let mut warnings = env.warnings().to_vec();
    let resolve = |p: &str| super::resolve_path(env.base_dir(), p);
    let ub = cfg.ub_psi_config;
    let f = |name: &str| format!("ub_psi_config.{name}");

    let mode_name = ub.mode.as_deref().unwrap_or("");
    let mode = UbMode::parse(mode_name).ok_or_else(|| {
        invalid(
            &f("mode"),
            &format!(
                "{mode_name:?}; use MODE_OFFLINE_GEN_CACHE, MODE_OFFLINE_TRANSFER_CACHE, \
                 MODE_OFFLINE, MODE_ONLINE or MODE_FULL"
            ),
        )
    })?;
    let role = match ub.role.as_deref().map(str::trim).unwrap_or("") {
        "ROLE_SERVER" => UbRole::Server,
        "ROLE_CLIENT" => UbRole::Client,
        other => {
            return Err(invalid(
                &f("role"),
                &format!("{other:?}; use ROLE_SERVER (the large set) or ROLE_CLIENT"),
            ));
        }
    };
    if mode == UbMode::GenCache && role == UbRole::Client {
        return Err(invalid(
            &f("mode"),
            "MODE_OFFLINE_GEN_CACHE runs on the server only; the client takes part from \
             MODE_OFFLINE_TRANSFER_CACHE on",
        ));
    }
    let ext = cfg.blindjoin;
    let sf = match ext.as_ref().and_then(|e| e.peer_wire.as_ref()) {
        None => false,
        Some(Value::String(w)) if w == "blindjoin" => false,
        Some(Value::String(w)) if w == "secretflow" => true,
        Some(other) => {
            return Err(invalid(
                "blindjoin.peer_wire",
                &format!("{other}; use \"blindjoin\" (the default) or \"secretflow\""),
            ));
        }
    };
    if sf {
        let sf_refuse = |field: &str, what: &str| {
            invalid(
                field,
                &format!(
                    "{what} with blindjoin.peer_wire = \"secretflow\": a SecretFlow party runs \
                     its unbalanced PSI on CURVE_FOURQ over CSV files, with no labels and no \
                     threshold; remove it"
                ),
            )
        };
        if let Some(c) = ext.as_ref().and_then(|e| e.curve.as_deref())
            && c.trim() != "CURVE_FOURQ"
        {
            return Err(sf_refuse("blindjoin.curve", c));
        }
        if ext.as_ref().is_some_and(|e| {
            !matches!(
                e.label_columns,
                None | Some(Value::Null) | Some(Value::Bool(false))
            )
        }) {
            return Err(sf_refuse("blindjoin.label_columns", "label columns"));
        }
        if ub.intersection_threshold.is_some_and(|t| t > 0) {
            return Err(sf_refuse(
                &f("intersection_threshold"),
                "threshold mode (blindjoin's own)",
            ));
        }
        for (field, io) in [
            ("input_config.type", &ub.input_config),
            ("output_config.type", &ub.output_config),
        ] {
            if let Some(io) = io
                && io_type(&f(field), io.kind.as_deref())? != TableFormat::Csv
            {
                return Err(sf_refuse(&f(field), "Parquet"));
            }
        }
    }
    let curve = match ext.as_ref().and_then(|e| e.curve.as_deref()) {
        None => Curve::FourQ,
        Some(name) => {
            let c: Curve = name.parse().map_err(|e: blindjoin_crypto::CryptoError| {
                invalid("blindjoin.curve", &e.to_string())
            })?;
            if !blindjoin_crypto::oprf::supports(c) {
                return Err(invalid(
                    "blindjoin.curve",
                    &format!(
                        "{name}: the OPRF of unbalanced PSI needs a prime-order group, and \
                         Curve25519 has cofactor 8; use CURVE_FOURQ (default), \
                         CURVE_RISTRETTO255, CURVE_SECP256K1, CURVE_SM2 or CURVE_P256"
                    ),
                ));
            }
            c
        }
    };

    // Input: the server's in the gen modes (and online when it learns the result), the
    // client's in online and full.
    let needs_input = match role {
        UbRole::Server => mode.generates(),
        UbRole::Client => mode.queries(),
    };
    let mut input_format = TableFormat::Csv;
    let input = match &ub.input_config {
        Some(io) if !io.path.trim().is_empty() => {
            input_format = io_type(&f("input_config.type"), io.kind.as_deref())?;
            Some(resolve(&io.path))
        }
        _ if needs_input => {
            return Err(invalid(
                &f("input_config.path"),
                &format!(
                    "missing; the {} needs its table in {}",
                    if role == UbRole::Server {
                        "server"
                    } else {
                        "client"
                    },
                    mode.config_name()
                ),
            ));
        }
        _ => None,
    };
    let keys = ub.keys.unwrap_or_default();
    if input.is_some() && keys.is_empty() {
        return Err(invalid(
            &f("keys"),
            "empty; list the key column(s), e.g. [\"id\"]",
        ));
    }
    for (i, k) in keys.iter().enumerate() {
        if keys[..i].contains(k) {
            return Err(invalid(&f("keys"), &format!("{k:?} is listed twice")));
        }
    }
    let cache_path = match ub.cache_path.as_deref().map(str::trim) {
        Some(p) if !p.is_empty() => resolve(p),
        _ => {
            return Err(invalid(
                &f("cache_path"),
                "missing; the server keeps its cache there, the client its copy",
            ));
        }
    };
    let secret_key_path = ub
        .server_secret_key_path
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(resolve);
    if role == UbRole::Server && secret_key_path.is_none() && sf && mode.generates() {
        warnings.push(
            "ub_psi_config.server_secret_key_path: not given, so the server draws a fresh key and \
             keeps it in the cache's ub_psi_cache.meta, as SecretFlow does (mode 0600); give a \
             key file to keep the key apart from the cache"
                .into(),
        );
    }
    if role == UbRole::Server && secret_key_path.is_none() && !sf {
        match mode {
            UbMode::GenCache | UbMode::Offline | UbMode::Online => {
                return Err(invalid(
                    &f("server_secret_key_path"),
                    "missing; the server's key must outlive the run so the cache stays usable. \
                     Give a path: an existing 32-byte key file (mode 0600, e.g. `openssl rand \
                     32 > server.key && chmod 600 server.key`), or a new path, where \
                     blindjoin creates one",
                ));
            }
            UbMode::Full => warnings.push(
                "ub_psi_config.server_secret_key_path: not given, so MODE_FULL uses a fresh key \
                 and the cache it writes cannot be reused by later MODE_ONLINE runs"
                    .into(),
            ),
            UbMode::TransferCache => {}
        }
    }
    if role == UbRole::Client && secret_key_path.is_some() {
        warnings.push(
            "ub_psi_config.server_secret_key_path: ignored on the client (the key is the server's)"
                .into(),
        );
    }
    let server_get_result = ub.server_get_result.unwrap_or(false);
    let client_get_result = ub.client_get_result.unwrap_or(false);
    if mode.queries() && !server_get_result && !client_get_result {
        return Err(invalid(
            &f("client_get_result"),
            "and server_get_result are both false: nobody would learn the result; set one (both \
             parties must agree)",
        ));
    }
    let learns = mode.queries()
        && match role {
            UbRole::Server => server_get_result,
            UbRole::Client => client_get_result,
        };
    let mut output_format = TableFormat::Csv;
    let output = match &ub.output_config {
        Some(io) if !io.path.trim().is_empty() => {
            output_format = io_type(&f("output_config.type"), io.kind.as_deref())?;
            Some(resolve(&io.path))
        }
        _ => None,
    };
    if learns && output.is_none() {
        return Err(invalid(
            &f("output_config.path"),
            "missing; this party learns the intersection and needs a file to write it to",
        ));
    }
    if role == UbRole::Server && learns && input.is_none() && !sf {
        return Err(invalid(
            &f("input_config.path"),
            "missing; with server_get_result the server writes its matching rows, so MODE_ONLINE \
             needs the table the cache was generated from",
        ));
    }
    let join_name = ub
        .advanced_join_type
        .as_deref()
        .unwrap_or("ADVANCED_JOIN_TYPE_UNSPECIFIED");
    let join = crate::spec::JoinType::parse(join_name).ok_or_else(|| {
        invalid(
            &f("advanced_join_type"),
            &format!(
                "{join_name:?}; use ADVANCED_JOIN_TYPE_INNER_JOIN, _LEFT_JOIN, _RIGHT_JOIN, \
                 _FULL_JOIN or _DIFFERENCE"
            ),
        )
    })?;
    if join != crate::spec::JoinType::Inner && !sf {
        return Err(not_yet(
            &f("advanced_join_type"),
            join_name,
            "blindjoin's own unbalanced PSI writes the inner join \
             (ADVANCED_JOIN_TYPE_INNER_JOIN); use psi_config for left, right, full and \
             difference joins, or blindjoin.peer_wire \"secretflow\" against a SecretFlow party",
        ));
    }
    let left_is_server = match ub.left_side.as_deref().unwrap_or("") {
        "" if join != crate::spec::JoinType::Inner => {
            return Err(invalid(
                &f("left_side"),
                &format!("missing; {join_name} needs it: ROLE_SERVER or ROLE_CLIENT"),
            ));
        }
        "" | "ROLE_SERVER" => true,
        "ROLE_CLIENT" => false,
        side => {
            return Err(invalid(
                &f("left_side"),
                &format!("{side:?}; use ROLE_SERVER or ROLE_CLIENT"),
            ));
        }
    };
    // Threshold mode (SecretFlow's threshold UB-PSI): at most T keys of the intersection are
    // revealed, to the client (and to the server with server_get_result).
    let threshold = ub.intersection_threshold.filter(|&t| t > 0);
    if let Some(t) = threshold {
        if !mode.queries() {
            warnings.push(format!(
                "ub_psi_config.intersection_threshold: {t} is ignored in {} (it applies to the \
                 online query: MODE_ONLINE, MODE_FULL)",
                mode.config_name()
            ));
        } else if !client_get_result {
            return Err(invalid(
                &f("intersection_threshold"),
                &format!(
                    "{t} with client_get_result false: threshold mode reveals at most {t} keys \
                     of the intersection to the client; set client_get_result true (both \
                     parties)"
                ),
            ));
        }
    }
    let threshold = threshold.filter(|_| mode.queries());
    let count_path = match ub
        .count_path
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        Some(p) if threshold.is_some() => Some(resolve(p)),
        Some(p) => {
            warnings.push(format!(
                "ub_psi_config.count_path: {p:?} is ignored: it is written in threshold mode \
                 (intersection_threshold above 0, MODE_ONLINE or MODE_FULL)"
            ));
            None
        }
        None => None,
    };
    let peer_wire = sf.then(|| SfUbWire {
        link_id: match cfg.link_config.as_ref().and_then(|l| l.id.as_ref()) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => "root".into(),
        },
        self_rank: cfg
            .link_config
            .as_ref()
            .zip(cfg.self_link_party.as_ref())
            .and_then(|(l, me)| l.parties.iter().position(|p| &p.id == me))
            .unwrap_or(0),
        join,
        left_is_server,
        csv_null_rep: ub
            .output_attr
            .as_ref()
            .and_then(|a| a.csv_null_rep.clone())
            .unwrap_or_default(),
        tls: None,
        channel: crate::spec::SfChannel::BaiduStd,
    });
    let peer_wire = match (peer_wire, &cfg.link_config) {
        (Some(mut w), Some(l)) => {
            w.tls = super::secretflow_tls(l, &resolve)?;
            w.channel = super::secretflow_channel(l)?;
            Some(w)
        }
        (w, _) => w,
    };
    let _ = &ub.input_attr;
    // `debug_options` is process-wide: `crate::ops::Ops::from_config` reads it.
    let _ = &ub.debug_options;

    // Link: none for gen cache alone.
    let needs_link = mode != UbMode::GenCache;
    let link = match (&cfg.link_config, &cfg.self_link_party) {
        (Some(link), Some(self_id)) if needs_link => Some(two_party_link(
            link,
            self_id,
            "unbalanced PSI",
            &resolve,
            !sf,
        )?),
        (_, _) if needs_link => {
            return Err(invalid(
                if cfg.link_config.is_none() {
                    "link_config"
                } else {
                    "self_link_party"
                },
                &format!(
                    "missing; {} talks to the peer (only MODE_OFFLINE_GEN_CACHE runs alone)",
                    mode.config_name()
                ),
            ));
        }
        _ => None,
    };
    let max_query_items = match ext.as_ref().and_then(|e| e.max_query_items.as_ref()) {
        None => DEFAULT_MAX_QUERY_ITEMS,
        Some(v) => match lenient_u64(v, MAX_QUERY_ITEMS)? {
            0 => {
                return Err(invalid(
                    MAX_QUERY_ITEMS,
                    "0 would refuse every query; use 1 or more",
                ));
            }
            n => n,
        },
    };
    if role == UbRole::Server && mode.queries() {
        warnings.push(format!(
            "unbalanced PSI: the client learns which of its keys your table holds, so a client \
             whose table enumerates a small key space (phone numbers, national ids) learns which \
             of them you hold; {MAX_QUERY_ITEMS} (--max-query-items) bounds how many client \
             keys this server key evaluates over all queries (docs/config.md, key rotation)"
        ));
    }
    let e = ext.as_ref();
    let label_columns = match e.and_then(|e| e.label_columns.as_ref()) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => LabelChoice::None,
        Some(Value::Bool(true)) => LabelChoice::AllNonKey,
        Some(Value::Array(items)) => {
            let mut cols: Vec<String> = Vec::with_capacity(items.len());
            for v in items {
                let Some(c) = v.as_str() else {
                    return Err(invalid(
                        "blindjoin.label_columns",
                        &format!("{v} is not a column name; give a list of names, or true"),
                    ));
                };
                if cols.iter().any(|x| x == c) {
                    return Err(invalid(
                        "blindjoin.label_columns",
                        &format!("{c:?} is listed twice"),
                    ));
                }
                cols.push(c.to_string());
            }
            if cols.is_empty() {
                LabelChoice::None
            } else {
                LabelChoice::Columns(cols)
            }
        }
        Some(other) => {
            return Err(invalid(
                "blindjoin.label_columns",
                &format!(
                    "{other}; give true (every non-key column), false, or a list of column names"
                ),
            ));
        }
    };
    if label_columns != LabelChoice::None
        && role == UbRole::Server
        && mode.generates()
        && mode.queries()
        && (!client_get_result || threshold.is_some())
    {
        return Err(invalid(
            "blindjoin.label_columns",
            "set with client_get_result false (the shuffle variant) or intersection_threshold: \
             the client could open the labels of every matched position though it must not \
             learn those keys; leave label_columns out",
        ));
    }
    if label_columns != LabelChoice::None {
        if role == UbRole::Client {
            warnings.push(
                "blindjoin.label_columns: ignored on the client (the server chooses the label \
                 columns when it generates its cache)"
                    .into(),
            );
        } else if !mode.generates() {
            warnings.push(
                "blindjoin.label_columns: ignored in this mode (the labels are chosen when the \
                 cache is generated: MODE_OFFLINE_GEN_CACHE, MODE_OFFLINE, MODE_FULL)"
                    .into(),
            );
        }
    }
    Ok(UbSpec {
        mode,
        role,
        curve,
        input,
        input_format,
        output_format,
        keys,
        secret_key_path,
        cache_path,
        server_get_result,
        client_get_result,
        align: !ub.disable_alignment.unwrap_or(false),
        output: if learns { output } else { None },
        link: peer_link(
            link,
            e.and_then(|e| e.connect_timeout_ms.as_ref()),
            e.and_then(|e| e.peer_silence_timeout_ms.as_ref()),
        )?,
        report: e.and_then(|e| e.report_path.as_deref()).map(resolve),
        max_cache_bytes: match e.and_then(|e| e.max_cache_bytes.as_ref()) {
            None => DEFAULT_MAX_CACHE_BYTES,
            Some(v) => lenient_u64(v, "blindjoin.max_cache_bytes")?,
        },
        max_query_items,
        label_columns,
        threshold,
        count_path,
        peer_wire,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ub: &str, extra: &str) -> String {
        format!(
            r#"{{"ub_psi_config": {{{ub}}},
  "link_config": {{"parties": [{{"id": "server", "host": "127.0.0.1:1"}}, {{"id": "client", "host": "127.0.0.1:2"}}]}},
  "self_link_party": "server"{extra}}}"#
        )
    }

    fn parse(text: &str) -> Result<UbSpec, ConfigError> {
        parse_ub_launch_config(text, "ub.json", Path::new("/base"))
    }

    const SERVER_GEN: &str = r#""mode": "MODE_OFFLINE_GEN_CACHE", "role": "ROLE_SERVER",
        "input_config": {"path": "server.csv"}, "keys": ["id"],
        "server_secret_key_path": "server.key", "cache_path": "server_cache""#;

    #[test]
    fn peer_wire_secretflow_parses_and_refuses_what_secretflow_lacks_by_name() {
        let sf = r#", "blindjoin": {"peer_wire": "secretflow"}"#;
        let s = parse(&cfg(SERVER_GEN, sf)).unwrap();
        let w = s.peer_wire.expect("the SecretFlow wire");
        assert_eq!((w.link_id.as_str(), w.self_rank), ("root", 0));
        assert!(w.left_is_server && w.tls.is_none());
        // Outer joins are SecretFlow's too on this wire, and need left_side.
        let online = r#""mode": "MODE_ONLINE", "role": "ROLE_CLIENT",
            "input_config": {"path": "c.csv"}, "keys": ["id"], "cache_path": "cc",
            "client_get_result": true, "output_config": {"path": "o.csv"},
            "advanced_join_type": "ADVANCED_JOIN_TYPE_LEFT_JOIN""#;
        let e = parse(&cfg(online, sf)).err().unwrap().to_string();
        assert!(e.contains("ub_psi_config.left_side"), "{e}");
        let with_left = format!(r#"{online}, "left_side": "ROLE_CLIENT""#);
        let c = parse(&cfg(&with_left, sf)).unwrap();
        assert!(!c.peer_wire.unwrap().left_is_server);
        // Without the wire, blindjoin's own unbalanced PSI keeps to the inner join.
        let e = parse(&cfg(&with_left, "")).err().unwrap().to_string();
        assert!(e.contains("advanced_join_type"), "{e}");
        for (extra, field) in [
            (r#""curve": "CURVE_SM2""#, "blindjoin.curve"),
            (r#""label_columns": true"#, "blindjoin.label_columns"),
        ] {
            let text = cfg(
                SERVER_GEN,
                &format!(r#", "blindjoin": {{"peer_wire": "secretflow", {extra}}}"#),
            );
            let e = parse(&text).err().unwrap().to_string();
            assert!(e.contains(field) && e.contains("peer_wire"), "{e}");
        }
        let e = parse(&cfg(SERVER_GEN, r#", "blindjoin": {"peer_wire": "grpc"}"#))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("blindjoin.peer_wire"), "{e}");
    }

    #[test]
    fn secretflow_configs_parse_in_every_mode() {
        let s = parse(&cfg(SERVER_GEN, "")).unwrap();
        assert_eq!(
            (s.mode, s.role, s.curve),
            (UbMode::GenCache, UbRole::Server, Curve::FourQ)
        );
        assert_eq!(s.cache_path, Path::new("/base/server_cache"));
        assert_eq!(
            s.secret_key_path.as_deref(),
            Some(Path::new("/base/server.key"))
        );
        assert!(s.link.parties.is_none());
        for m in [
            "MODE_OFFLINE_TRANSFER_CACHE",
            "OFFLINE_TRANSFER_CACHE",
            "offline",
            "MODE_OFFLINE",
        ] {
            let s = parse(&cfg(&SERVER_GEN.replace("MODE_OFFLINE_GEN_CACHE", m), "")).unwrap();
            assert!(s.link.parties.is_some(), "{m}");
        }
        let online = r#""mode": "MODE_ONLINE", "role": "ROLE_CLIENT",
            "input_config": {"type": "IO_TYPE_FILE_CSV", "path": "client.csv"}, "keys": ["id"],
            "cache_path": "client_cache", "server_get_result": true, "client_get_result": true,
            "disable_alignment": false, "output_config": {"type": "IO_TYPE_FILE_CSV", "path": "out.csv"},
            "advanced_join_type": "ADVANCED_JOIN_TYPE_INNER_JOIN", "left_side": "ROLE_SERVER",
            "input_attr": {"keys_unique": false}, "output_attr": {"csv_null_rep": "NULL"},
            "debug_options": {"logging_level": "INFO"}, "intersection_threshold": 0, "count_path": """#;
        let s = parse(&cfg(online, "")).unwrap();
        assert_eq!(s.mode, UbMode::Online);
        assert_eq!(s.output.as_deref(), Some(Path::new("/base/out.csv")));
        let s = parse(&cfg(
            &online.replace("MODE_ONLINE", "FULL"),
            r#", "blindjoin": {"curve": "CURVE_RISTRETTO255", "report_path": "r.json"}"#,
        ))
        .unwrap();
        assert_eq!((s.mode, s.curve), (UbMode::Full, Curve::Ristretto255));
        for (name, curve) in [
            ("CURVE_SM2", Curve::Sm2),
            ("CURVE_SECP256K1", Curve::Secp256k1),
            ("CURVE_P256", Curve::P256),
        ] {
            let s = parse(&cfg(
                online,
                &format!(r#", "blindjoin": {{"curve": "{name}"}}"#),
            ))
            .unwrap();
            assert_eq!(s.curve, curve);
        }
        let has = |t: &str| {
            super::Envelope::parse(t, "t.json", Path::new("."))
                .unwrap()
                .has("ub_psi_config")
        };
        assert!(has(&cfg(online, "")));
        assert!(!has(r#"{"psi_config": {}}"#));
    }

    #[test]
    fn threshold_and_count_path() {
        let online = r#""mode": "MODE_ONLINE", "role": "ROLE_CLIENT",
            "input_config": {"path": "client.csv"}, "keys": ["id"], "cache_path": "c",
            "client_get_result": true, "output_config": {"path": "out.csv"}"#;
        let s = parse(&cfg(
            &(online.to_string() + r#", "intersection_threshold": 10, "count_path": "n.csv""#),
            "",
        ))
        .unwrap();
        assert_eq!(s.threshold, Some(10));
        assert_eq!(s.count_path.as_deref(), Some(Path::new("/base/n.csv")));
        // 0 is SecretFlow's "not configured"; count_path alone is ignored with a warning.
        let s = parse(&cfg(
            &(online.to_string() + r#", "intersection_threshold": 0, "count_path": "n.csv""#),
            "",
        ))
        .unwrap();
        assert_eq!((s.threshold, s.count_path), (None, None));
        assert!(s.warnings.iter().any(|w| w.contains("count_path")));
        // In a mode without a query: ignored, with a warning.
        let s = parse(&cfg(
            &(SERVER_GEN.to_string() + r#", "intersection_threshold": 3"#),
            "",
        ))
        .unwrap();
        assert_eq!(s.threshold, None);
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("intersection_threshold"))
        );
    }

    #[test]
    fn label_columns_parse() {
        let with = |v: &str| {
            cfg(
                SERVER_GEN,
                &format!(r#", "blindjoin": {{"label_columns": {v}}}"#),
            )
        };
        assert_eq!(
            parse(&cfg(SERVER_GEN, "")).unwrap().label_columns,
            LabelChoice::None
        );
        assert_eq!(
            parse(&with("true")).unwrap().label_columns,
            LabelChoice::AllNonKey
        );
        for none in ["false", "[]", "null"] {
            assert_eq!(parse(&with(none)).unwrap().label_columns, LabelChoice::None);
        }
        assert_eq!(
            parse(&with(r#"["b", "a"]"#)).unwrap().label_columns,
            LabelChoice::Columns(vec!["b".into(), "a".into()])
        );
        for bad in [r#"["a", "a"]"#, "[1]", "\"a\"", "3"] {
            let e = parse(&with(bad)).unwrap_err().to_string();
            assert!(e.contains("blindjoin.label_columns"), "{bad}: {e}");
        }
        // Labels with the shuffle variant in one run: refused.
        let full_shuffle = SERVER_GEN.replace("MODE_OFFLINE_GEN_CACHE", "MODE_FULL")
            + r#", "server_get_result": true, "output_config": {"path": "o.csv"}"#;
        let e = parse(&cfg(
            &full_shuffle,
            r#", "blindjoin": {"label_columns": true}"#,
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("shuffle"), "{e}");
    }

    #[test]
    fn the_query_cap_defaults_and_the_online_server_is_warned() {
        let online = SERVER_GEN.replace("MODE_OFFLINE_GEN_CACHE", "MODE_ONLINE")
            + r#", "client_get_result": true"#;
        let s = parse(&cfg(&online, "")).unwrap();
        assert_eq!(s.max_query_items, DEFAULT_MAX_QUERY_ITEMS);
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("phone numbers") && w.contains(MAX_QUERY_ITEMS)),
            "{:?}",
            s.warnings
        );
        let s = parse(&cfg(
            &online,
            r#", "blindjoin": {"max_query_items": "5000"}"#,
        ))
        .unwrap();
        assert_eq!(s.max_query_items, 5000);
        // Gen cache serves no query: no warning.
        let s = parse(&cfg(SERVER_GEN, "")).unwrap();
        assert!(!s.warnings.iter().any(|w| w.contains(MAX_QUERY_ITEMS)));
    }

    #[test]
    fn bad_configs_name_the_field() {
        let cases = [
            (
                SERVER_GEN.replace("MODE_OFFLINE_GEN_CACHE", "MODE_X"),
                "",
                "ub_psi_config.mode",
            ),
            (
                SERVER_GEN.replace("ROLE_SERVER", "ROLE_RECEIVER"),
                "",
                "ub_psi_config.role",
            ),
            (
                SERVER_GEN.replace("ROLE_SERVER", "ROLE_CLIENT"),
                "",
                "ub_psi_config.mode",
            ),
            (
                SERVER_GEN.replace(r#""server_secret_key_path": "server.key","#, ""),
                "",
                "server_secret_key_path",
            ),
            (
                SERVER_GEN.replace(r#""cache_path": "server_cache""#, r#""cache_path": """#),
                "",
                "cache_path",
            ),
            (
                SERVER_GEN.replace(r#""input_config": {"path": "server.csv"},"#, ""),
                "",
                "input_config.path",
            ),
            (
                SERVER_GEN.to_string(),
                r#", "blindjoin": {"curve": "CURVE_25519"}"#,
                "blindjoin.curve",
            ),
            (
                SERVER_GEN.to_string()
                    + r#", "advanced_join_type": "ADVANCED_JOIN_TYPE_LEFT_JOIN""#,
                "",
                "advanced_join_type",
            ),
            (
                SERVER_GEN.replace("MODE_OFFLINE_GEN_CACHE", "MODE_ONLINE")
                    + r#", "intersection_threshold": 5, "server_get_result": true, "output_config": {"path": "o.csv"}"#,
                "",
                "intersection_threshold",
            ),
            (SERVER_GEN.to_string() + r#", "bogus": 1"#, "", "bogus"),
            (
                SERVER_GEN.to_string(),
                r#", "blindjoin": {"max_query_items": 0}"#,
                "blindjoin.max_query_items",
            ),
            (
                SERVER_GEN.replace("MODE_OFFLINE_GEN_CACHE", "MODE_ONLINE")
                    + r#", "server_get_result": false, "client_get_result": false"#,
                "",
                "client_get_result",
            ),
            (
                SERVER_GEN.replace("MODE_OFFLINE_GEN_CACHE", "MODE_ONLINE")
                    + r#", "server_get_result": true"#,
                "",
                "output_config.path",
            ),
            (
                SERVER_GEN.to_string(),
                r#", "psi_config": {}"#,
                "psi_config",
            ),
        ];
        for (ub, extra, field) in cases {
            let e = parse(&cfg(&ub, extra)).unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
        let no_link = format!(
            "{{\"ub_psi_config\": {{{}}}}}",
            SERVER_GEN.replace("MODE_OFFLINE_GEN_CACHE", "MODE_OFFLINE")
        );
        assert!(
            parse(&no_link)
                .unwrap_err()
                .to_string()
                .contains("link_config")
        );
        // Gen cache alone needs no link.
        let alone = format!("{{\"ub_psi_config\": {{{SERVER_GEN}}}}}");
        assert!(parse(&alone).is_ok());
    }
}
