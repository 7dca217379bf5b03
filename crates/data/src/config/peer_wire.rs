//! `"blindjoin": {"peer_wire": "secretflow"}`: the peer is an unmodified SecretFlow party. The
//! launch config is SecretFlow's own; this reads what SecretFlow's config check compares, as
//! the config gives it, and refuses at start what this wire does not carry yet, naming what
//! works.

use super::{LinkConfig, PsiConfig, invalid, lenient_u64};
use crate::error::ConfigError;
use crate::spec::{RunSpec, SecretflowWire, TableFormat};
use blindjoin_crypto::secretflow::SfCurve;
use blindjoin_protocols::{Protocol, Reveal};

const WHAT_WORKS: &str = "against a SecretFlow party this build runs PROTOCOL_ECDH on CURVE_25519, \
     CURVE_25519_ELLIGATOR2, CURVE_FOURQ, CURVE_SM2 and CURVE_SECP256K1";

/// The SecretFlow-side settings of a two-party launch config; `me` is this party's index in
/// `link_config.parties`.
pub(super) fn secretflow(
    psi: &PsiConfig,
    link: &LinkConfig,
    me: usize,
    resolve: &dyn Fn(&str) -> std::path::PathBuf,
) -> Result<SecretflowWire, ConfigError> {
    let pc = &psi.protocol_config;
    let protocol: Option<Protocol> = pc.protocol.trim().parse().ok();
    if protocol != Some(Protocol::Ecdh) {
        return Err(invalid(
            "psi_config.protocol_config.protocol",
            &format!(
                "{} is not built for blindjoin.peer_wire = \"secretflow\" yet; {WHAT_WORKS} (use \
                 PROTOCOL_ECDH on both sides, or our own wire with a blindjoin peer)",
                pc.protocol
            ),
        ));
    }
    let curve_name = pc
        .ecdh_config
        .as_ref()
        .and_then(|e| e.curve.as_deref())
        .unwrap_or("");
    let curve = SfCurve::parse(curve_name).ok_or_else(|| {
        invalid(
            "psi_config.protocol_config.ecdh_config.curve",
            &format!("{curve_name:?} with a SecretFlow peer; {WHAT_WORKS}"),
        )
    })?;
    let num = |v: Option<&serde_json::Value>, field: &str| -> Result<u64, ConfigError> {
        v.map_or(Ok(0), |v| lenient_u64(v, field))
    };
    let join_type = match psi.advanced_join_type.as_deref().unwrap_or("") {
        "" | "ADVANCED_JOIN_TYPE_UNSPECIFIED" => 0,
        "ADVANCED_JOIN_TYPE_INNER_JOIN" => 1,
        "ADVANCED_JOIN_TYPE_LEFT_JOIN" => 2,
        "ADVANCED_JOIN_TYPE_RIGHT_JOIN" => 3,
        "ADVANCED_JOIN_TYPE_FULL_JOIN" => 4,
        "ADVANCED_JOIN_TYPE_DIFFERENCE" => 5,
        other => {
            return Err(invalid(
                "psi_config.advanced_join_type",
                &format!(
                    "{other:?} with a SecretFlow peer: use SecretFlow's full names, e.g. ADVANCED_JOIN_TYPE_INNER_JOIN"
                ),
            ));
        }
    };
    let left_side = match psi.left_side.as_deref().unwrap_or("") {
        "" => 0,
        "ROLE_RECEIVER" => 1,
        _ => 2,
    };
    Ok(SecretflowWire {
        link_id: match &link.id {
            Some(serde_json::Value::String(s)) if !s.is_empty() => s.clone(),
            _ => "root".into(),
        },
        self_rank: me,
        curve,
        ecdh_batch_size: num(
            pc.ecdh_config.as_ref().and_then(|e| e.batch_size.as_ref()),
            "psi_config.protocol_config.ecdh_config.batch_size",
        )?,
        kkrt_bucket_size: num(
            pc.kkrt_config.as_ref().and_then(|e| e.bucket_size.as_ref()),
            "psi_config.protocol_config.kkrt_config.bucket_size",
        )?,
        rr22_bucket_size: num(
            pc.rr22_config.as_ref().and_then(|e| e.bucket_size.as_ref()),
            "psi_config.protocol_config.rr22_config.bucket_size",
        )?,
        rr22_low_comm: pc
            .rr22_config
            .as_ref()
            .and_then(|r| r.low_comm_mode)
            .unwrap_or(false),
        join_type,
        left_side,
        csv_null_rep: psi
            .output_attr
            .as_ref()
            .and_then(|a| a.csv_null_rep.clone())
            .unwrap_or_default(),
        keys_unique: psi
            .input_attr
            .as_ref()
            .and_then(|a| a.keys_unique)
            .unwrap_or(false),
        tls: super::secretflow_tls(link, resolve)?,
        channel: super::secretflow_channel(link)?,
    })
}

/// Refuses, at start, what a run against a SecretFlow party does not do, each naming its field.
pub(super) fn check(spec: &RunSpec) -> Result<(), ConfigError> {
    if spec.peer_wire.is_none() {
        return Ok(());
    }
    let refuse = |field: &str, what: &str| {
        Err(invalid(
            field,
            &format!(
                "{what} is not available with blindjoin.peer_wire = \"secretflow\"; remove it"
            ),
        ))
    };
    if spec.recovery.is_some() {
        return refuse("psi_config.recovery_config", "recovery");
    }
    if spec.workers.is_some() || spec.worker_ports.is_some() {
        return refuse("blindjoin.workers", "partitioned runs");
    }
    if spec.reveal != Reveal::Intersection {
        return refuse(
            "psi_config.intersection_threshold / blindjoin.cardinality_only",
            "revealing less than the intersection",
        );
    }
    if spec.min_intersection.is_some() {
        return refuse("blindjoin.min_intersection", "min_intersection");
    }
    if spec.secret_key_path.is_some() {
        return refuse("blindjoin.secret_key_path", "a fixed ECDH key");
    }
    if spec.join.check_intersection_digest {
        return refuse(
            "blindjoin.check_intersection_digest",
            "the intersection digest",
        );
    }
    if spec.input_format != TableFormat::Csv || spec.output_format != TableFormat::Csv {
        return refuse(
            "psi_config.input_config.type / output_config.type",
            "Parquet (SecretFlow reads and writes CSV only)",
        );
    }
    if spec.input.is_dir() {
        return refuse("psi_config.input_config.path", "a folder of parts");
    }
    Ok(())
}
