//! What the three-party and n-party config parsers read alike: which protocol the config
//! names, the receiver, this party and the parties' addresses, and the settings no multi-party
//! run takes (a role that contradicts the receiver, outer joins, `check_hash_digest`).

use super::{LinkConfig, invalid, tls_config};
use crate::error::ConfigError;
use blindjoin_link::{PartyAddr, TlsConfig};
use blindjoin_protocols::Role;
use serde_json::Value;
use std::path::Path;

/// Why only inner joins: see [`check_receiver_only`].
pub(super) const NOT_INNER: &str = "only the inner join; only the receiver learns anything, so no \
                                    party could pad or pair rows for an outer join or a difference";

/// The `protocol_config.protocol` the config names, trimmed, when it is one of `accepted`.
pub(super) fn named_protocol(v: &Value, accepted: &[&str]) -> Option<String> {
    let named = v["psi_config"]["protocol_config"]["protocol"]
        .as_str()
        .map(str::trim)
        .unwrap_or_default();
    accepted.contains(&named).then(|| named.to_string())
}

/// `protocol_config.receiver`: the id of the party that receives `what`.
pub(super) fn receiver_id(v: &Value, named: &str, what: &str) -> Result<String, ConfigError> {
    match &v["psi_config"]["protocol_config"]["receiver"] {
        Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        _ => Err(invalid(
            "psi_config.protocol_config.receiver",
            &format!(
                "missing; {named} needs the id of the party that receives {what} (one of \
                 link_config.parties)"
            ),
        )),
    }
}

/// This party and the others, from `self_link_party` and `link_config`.
pub(super) struct Parties {
    /// `self_link_party`.
    pub self_id: String,
    /// `link_config.parties`, in their order.
    pub parties: Vec<PartyAddr>,
    /// TLS files where this party listens (`server_ssl_opts`), with `enable_ssl`.
    pub tls_server: Option<TlsConfig>,
    /// TLS files where this party connects (`client_ssl_opts`), with `enable_ssl`.
    pub tls_client: Option<TlsConfig>,
}

/// `self_link_party` and `link_config` (parties and TLS files; relative paths resolve against
/// `base_dir`).
pub(super) fn self_and_parties(
    v: &Value,
    source: &str,
    base_dir: &Path,
) -> Result<Parties, ConfigError> {
    let self_id = v["self_link_party"]
        .as_str()
        .ok_or_else(|| {
            invalid(
                "self_link_party",
                "missing; set it to this party's id from link_config.parties",
            )
        })?
        .to_string();
    let link: LinkConfig =
        serde_json::from_value(v["link_config"].clone()).map_err(|e| ConfigError::Syntax {
            path: source.to_string(),
            message: format!("field `link_config`: {e}"),
        })?;
    let parties = link
        .parties
        .iter()
        .map(|p| PartyAddr {
            id: p.id.clone(),
            addr: p.host.clone(),
        })
        .collect();
    let resolve = |p: &str| super::resolve_path(base_dir, p);
    let (tls_server, tls_client) = if link.enable_ssl.unwrap_or(false) {
        let (c, s) = (link.client_ssl_opts.as_ref(), link.server_ssl_opts.as_ref());
        (
            Some(tls_config(c, s, true, &resolve)?),
            Some(tls_config(c, s, false, &resolve)?),
        )
    } else {
        (None, None)
    };
    Ok(Parties {
        self_id,
        parties,
        tls_server,
        tls_client,
    })
}

/// Refuses what no multi-party run takes: a `role` that contradicts the receiver, a join
/// other than inner (only the receiver learns anything, so nobody could pad or pair rows for
/// it) and `check_hash_digest` (nobody else holds `what` to compare).
pub(super) fn check_receiver_only(
    v: &Value,
    named: &str,
    role: Role,
    receiver_id: &str,
    self_id: &str,
    what: &str,
) -> Result<(), ConfigError> {
    let pc = &v["psi_config"]["protocol_config"];
    if let Some(given) = pc["role"].as_str().map(str::trim).filter(|r| !r.is_empty())
        && given != role.config_name()
        && given != "ROLE_UNSPECIFIED"
    {
        return Err(invalid(
            "psi_config.protocol_config.role",
            &format!(
                "{given} contradicts receiver = {receiver_id:?} for party {self_id:?}; it must \
                 be {role} (or left out)"
            ),
        ));
    }
    if let Some(j) = v["psi_config"]["advanced_join_type"]
        .as_str()
        .map(str::trim)
        && !matches!(
            j,
            "" | "ADVANCED_JOIN_TYPE_UNSPECIFIED" | "ADVANCED_JOIN_TYPE_INNER_JOIN"
        )
    {
        return Err(invalid(
            "psi_config.advanced_join_type",
            &format!("{named}: {j} is not available; {NOT_INNER}"),
        ));
    }
    if v["psi_config"]["check_hash_digest"].as_bool() == Some(true) {
        return Err(invalid(
            "psi_config.check_hash_digest",
            &format!(
                "{named}: only the receiver learns {what}, so there is nothing to compare; set \
                 it to false"
            ),
        ));
    }
    Ok(())
}
