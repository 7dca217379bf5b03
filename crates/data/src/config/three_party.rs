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

use super::multi_party::{
    NOT_INNER, Parties, check_receiver_only, named_protocol, receiver_id, self_and_parties,
};
use super::{Envelope, invalid};
use crate::error::ConfigError;
use crate::spec::JoinType;
use crate::spec::RunSpec;
pub use crate::spec::ThreePartySpec;
use blindjoin_protocols::{Reveal, Role};
use std::path::Path;

/// The `protocol_config.protocol` names that select the three-party protocol.
pub const THREE_PARTY_PROTOCOLS: [&str; 2] = ["PROTOCOL_ECDH_3PC", "ECDH_PSI_3PC"];

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
    three_party(&Envelope::parse(text, source, base_dir)?)
}

/// As [`parse_three_party_config`], from a parsed launch config.
///
/// # Errors
/// As [`parse_three_party_config`].
pub(crate) fn three_party(env: &Envelope) -> Result<Option<ThreePartySpec>, ConfigError> {
    let mut v = env.value().clone();
    let Some(named) = named_protocol(&v, &THREE_PARTY_PROTOCOLS) else {
        return Ok(None);
    };
    let named = named.as_str();
    let receiver_id = receiver_id(&v, named, "the three-way intersection")?;
    let Parties {
        self_id,
        parties,
        tls_server,
        tls_client,
    } = self_and_parties(&v, env.source(), env.base_dir())?;
    if parties.len() != 3 {
        return Err(invalid(
            "link_config.parties",
            &format!(
                "has {} parties; {named} needs exactly 3 (the receiver and two helpers)",
                parties.len()
            ),
        ));
    }
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
    // Refused before the two-party parser, whose reasons (e.g. "an outer join needs
    // broadcast_result") do not apply here.
    check_receiver_only(&v, named, role, &receiver_id, &self_id, "the intersection")?;
    if v["psi_config"]["protocol_config"]["broadcast_result"].as_bool() == Some(true) {
        return Err(invalid(
            "psi_config.protocol_config.broadcast_result",
            &format!("{named}: {NO_BROADCAST}"),
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
    let spec = super::two_party(&env.derived(v))?;
    refuse_unsupported(&spec, named)?;

    Ok(Some(ThreePartySpec {
        spec,
        parties,
        me,
        receiver,
        tls_server,
        tls_client,
    }))
}

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
