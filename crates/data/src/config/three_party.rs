//! Three-party configs (`ECDH_PSI_3PC`, see `blindjoin_protocols::ecdh_3pc`): the SecretFlow v2
//! launch config with three `link_config.parties`, `protocol_config.protocol` =
//! `PROTOCOL_ECDH_3PC` (SecretFlow's v2 API name; its v1 name `ECDH_PSI_3PC` is accepted too),
//! the curve in `ecdh_config.curve`, and `protocol_config.receiver` = the receiver's party id.
//!
//! Everything else means what it means for two parties, so the shared settings are parsed by the
//! two-party parser on a rewritten copy (protocol `PROTOCOL_ECDH`, this party and one peer);
//! only what differs is checked here. Refused, each with the reason: join types other than
//! inner (only the receiver learns anything, so nobody could pad or pair rows for it),
//! `broadcast_result` (the helpers would learn the three-way intersection), recovery,
//! cardinality-only, thresholds and `min_intersection` (not built for three parties), and a
//! user secret key (each party's key is random per run).

use super::{LinkConfig, invalid, strip_trailing_commas, tls_config};
use crate::error::ConfigError;
use crate::pipeline::join::JoinType;
use crate::spec::RunSpec;
use blindjoin_link::{PartyAddr, TlsConfig};
use blindjoin_protocols::{Reveal, Role};
use serde_json::Value;
use std::path::Path;

/// The `protocol_config.protocol` names that select the three-party protocol.
pub const THREE_PARTY_PROTOCOLS: [&str; 2] = ["PROTOCOL_ECDH_3PC", "ECDH_PSI_3PC"];

/// One party's three-party run.
#[derive(Clone, Debug)]
pub struct ThreePartySpec {
    /// The settings shared with two-party runs (input, output, keys, curve, timeouts, ...).
    /// `parties` holds this party and one peer only; the three are in [`Self::parties`].
    pub spec: RunSpec,
    /// The three parties, in `link_config.parties` order (which fixes the helpers' seats).
    pub parties: Vec<PartyAddr>,
    /// This party's index in `parties`.
    pub me: usize,
    /// The receiver's index in `parties`.
    pub receiver: usize,
    /// TLS files where this party listens (`server_ssl_opts`), with `enable_ssl`.
    pub tls_server: Option<TlsConfig>,
    /// TLS files where this party connects (`client_ssl_opts`), with `enable_ssl`.
    pub tls_client: Option<TlsConfig>,
}

impl ThreePartySpec {
    /// The string all three parties must agree on: the ids in order, then the receiver.
    pub fn setup(&self) -> String {
        let ids: Vec<&str> = self.parties.iter().map(|p| p.id.as_str()).collect();
        format!("{}>{}", ids.join(","), self.parties[self.receiver].id)
    }

    /// Whether this party is the receiver.
    pub fn is_receiver(&self) -> bool {
        self.me == self.receiver
    }
}

/// Parses `text` as a three-party config, or returns `Ok(None)` when it does not name the
/// three-party protocol (then [`super::parse_launch_config`] is the parser, and reports any
/// syntax error itself).
///
/// # Errors
/// As [`super::parse_launch_config`], plus the three-party checks (three distinct parties,
/// a receiver among them, a matching `role` if given) and the refusals in the module doc.
pub fn parse_three_party_config(
    text: &str,
    source: &str,
    base_dir: &Path,
) -> Result<Option<ThreePartySpec>, ConfigError> {
    let (cleaned, _) = strip_trailing_commas(text);
    let Ok(mut v) = serde_json::from_str::<Value>(&cleaned) else {
        return Ok(None);
    };
    let pc = &v["psi_config"]["protocol_config"];
    let named = pc["protocol"]
        .as_str()
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let named = named.as_str();
    if !THREE_PARTY_PROTOCOLS.contains(&named) {
        return Ok(None);
    }
    let receiver_id = match &pc["receiver"] {
        Value::String(s) if !s.trim().is_empty() => s.trim().to_string(),
        _ => {
            return Err(invalid(
                "psi_config.protocol_config.receiver",
                &format!(
                    "missing; {named} needs the id of the party that receives the three-way \
                     intersection (one of link_config.parties)"
                ),
            ));
        }
    };
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
    if link.parties.len() != 3 {
        return Err(invalid(
            "link_config.parties",
            &format!(
                "has {} parties; {named} needs exactly 3 (the receiver and two helpers)",
                link.parties.len()
            ),
        ));
    }
    let parties: Vec<PartyAddr> = link
        .parties
        .iter()
        .map(|p| PartyAddr {
            id: p.id.clone(),
            addr: p.host.clone(),
        })
        .collect();
    let ids: Vec<String> = parties.iter().map(|p| p.id.clone()).collect();
    let seats = blindjoin_protocols::ecdh_3pc::seats(&ids, &receiver_id)
        .map_err(|e| invalid("psi_config.protocol_config.receiver", &e.to_string()))?;
    let me = ids.iter().position(|id| *id == self_id).ok_or_else(|| {
        invalid(
            "self_link_party",
            &format!("{self_id:?} is not one of the ids in link_config.parties {ids:?}"),
        )
    })?;
    let receiver = seats[0];
    let role = if me == receiver {
        Role::Receiver
    } else {
        Role::Sender
    };
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

    // Refused before the two-party parser, whose reasons (e.g. "an outer join needs
    // broadcast_result") do not apply here.
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
    let broadcast = pc["broadcast_result"].as_bool() == Some(true);
    if broadcast {
        return Err(invalid(
            "psi_config.protocol_config.broadcast_result",
            &format!("{named}: {NO_BROADCAST}"),
        ));
    }

    if v["psi_config"]["check_hash_digest"].as_bool() == Some(true) {
        return Err(invalid(
            "psi_config.check_hash_digest",
            &format!(
                "{named}: only the receiver learns the intersection, so there is nothing to \
                 compare; set it to false"
            ),
        ));
    }

    // The two-party parser reads the rest, on a copy that names two-party ECDH and one peer.
    let peer = (me + 1) % 3;
    if let Some(pc) = v["psi_config"]["protocol_config"].as_object_mut() {
        pc.remove("receiver");
        pc.insert("protocol".into(), "PROTOCOL_ECDH".into());
        pc.insert("role".into(), role.config_name().into());
    }
    if let Some(lc) = v["link_config"].as_object_mut() {
        let two = serde_json::json!([
            {"id": parties[me].id, "host": parties[me].addr},
            {"id": parties[peer].id, "host": parties[peer].addr},
        ]);
        lc.insert("parties".into(), two);
    }
    let spec = super::parse_launch_config(&v.to_string(), source, base_dir)?;
    refuse_unsupported(&spec, named)?;

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
    Ok(Some(ThreePartySpec {
        spec,
        parties,
        me,
        receiver,
        tls_server,
        tls_client,
    }))
}

const NOT_INNER: &str = "only the inner join; only the receiver learns anything, so no party \
                         could pad or pair rows for an outer join or a difference";
const NO_BROADCAST: &str = "must be false; the helpers learn only set sizes (and one helper \
                            |P ∩ Q|), and broadcasting would hand them the three-way intersection";

/// The two-party features that have no meaning, or no implementation, with three parties.
fn refuse_unsupported(spec: &RunSpec, named: &str) -> Result<(), ConfigError> {
    let no = |field: &str, why: &str| Err(invalid(field, &format!("{named}: {why}")));
    if spec.join.join != JoinType::Inner {
        return no("psi_config.advanced_join_type", NOT_INNER);
    }
    if spec.broadcast_result {
        return no("psi_config.protocol_config.broadcast_result", NO_BROADCAST);
    }
    if spec.recovery.is_some() {
        return no(
            "psi_config.recovery_config",
            "recovery is not built for three parties (a three-party run is a single pass); \
             set enabled = false",
        );
    }
    if spec.reveal != Reveal::Intersection {
        return no(
            "psi_config.intersection_threshold / blindjoin.cardinality_only",
            "the three-party protocol reveals the intersection itself only",
        );
    }
    if spec.min_intersection.is_some() {
        return no("blindjoin.min_intersection", "not built for three parties");
    }
    if spec.secret_key_path.is_some() {
        return no(
            "blindjoin.secret_key_path",
            "every party's key is random per run in the three-party protocol",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
