//! n-party and DP-PSI configs: the SecretFlow v2 launch config with `link_config.parties` of n
//! entries, `protocol_config.receiver` = the receiver's party id, and `protocol_config.protocol`:
//!
//! | protocol | runs | parties |
//! |---|---|---|
//! | `PROTOCOL_NPC` (blindjoin's) | the zero-sharing OPPRF protocol: the receiver learns only the n-way intersection (`blindjoin_protocols::npc::zero_share`); OPRF curve `CURVE_FOURQ` (default) or `CURVE_RISTRETTO255` | n ≥ 2 |
//! | `PROTOCOL_ECDH_NPC` / `ECDH_PSI_NPC` | SecretFlow's tree of two-party ECDH runs, leaking intermediate intersections (`npc::iterated`) | n ≥ 2 |
//! | `PROTOCOL_KKRT_NPC` / `KKRT_PSI_NPC` | the same with KKRT | n ≥ 2 |
//! | `PROTOCOL_DP` / `DP_PSI_2PC` | DP-PSI (`blindjoin_protocols::dp_psi`), `protocol_config.dppsi_params` (`bob_sub_sampling` 0.9, `epsilon` 3 by default) | 2 |
//!
//! The shared settings are parsed by the two-party parser on a rewritten copy, as for three
//! parties ([`super::three_party`]); refused, each with the reason: join types other than inner,
//! `broadcast_result` for DP-PSI (only Bob learns), recovery, cardinality-only,
//! thresholds, `min_intersection`, `check_hash_digest`, and a user secret key.

use super::multi_party::{
    NOT_INNER, Parties, check_receiver_only, named_protocol, receiver_id, self_and_parties,
};
use super::{Envelope, invalid};
use crate::error::ConfigError;
use crate::spec::JoinType;
use crate::spec::RunSpec;
pub use crate::spec::{NPartyProtocol, NPartySpec};
use blindjoin_protocols::dp_psi::DpParams;
use blindjoin_protocols::npc::NpcVariant;
use blindjoin_protocols::{Curve, ProtocolChoice, Reveal};
use serde_json::Value;
use std::path::Path;

/// The `protocol_config.protocol` names this module parses.
pub const N_PARTY_PROTOCOLS: [&str; 7] = [
    "PROTOCOL_NPC",
    "PROTOCOL_ECDH_NPC",
    "ECDH_PSI_NPC",
    "PROTOCOL_KKRT_NPC",
    "KKRT_PSI_NPC",
    "PROTOCOL_DP",
    "DP_PSI_2PC",
];

/// Parses `text` as an n-party or DP-PSI config, or returns `Ok(None)` when it names none of
/// [`N_PARTY_PROTOCOLS`].
///
/// # Errors
/// As [`super::parse_launch_config`], plus the checks in the module doc.
pub fn parse_n_party_config(
    text: &str,
    source: &str,
    base_dir: &Path,
) -> Result<Option<NPartySpec>, ConfigError> {
    n_party(&Envelope::parse(text, source, base_dir)?)
}

/// As [`parse_n_party_config`], from a parsed launch config.
///
/// # Errors
/// As [`parse_n_party_config`].
pub(crate) fn n_party(env: &Envelope) -> Result<Option<NPartySpec>, ConfigError> {
    let mut v = env.value().clone();
    let Some(named) = named_protocol(&v, &N_PARTY_PROTOCOLS) else {
        return Ok(None);
    };
    let named = named.as_str();
    let pc = &v["psi_config"]["protocol_config"];
    let field = |f: &str| format!("psi_config.protocol_config.{f}");
    let receiver_id = receiver_id(&v, named, "the result")?;
    let curve_name = pc["ecdh_config"]["curve"]
        .as_str()
        .map(str::trim)
        .filter(|c| !c.is_empty() && *c != "CURVE_INVALID_TYPE")
        .map(str::to_string);
    let curve = |default: Option<Curve>| -> Result<Curve, ConfigError> {
        match (&curve_name, default) {
            (Some(c), _) => c
                .parse::<Curve>()
                .map_err(|e| invalid(&field("ecdh_config.curve"), &e.to_string())),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(invalid(
                &field("ecdh_config.curve"),
                &format!("required for {named}; e.g. \"CURVE_FOURQ\" or \"CURVE_25519\""),
            )),
        }
    };
    let protocol = match named {
        "PROTOCOL_NPC" => {
            let c = curve(Some(Curve::FourQ))?;
            if !blindjoin_crypto::oprf::supports(c) {
                return Err(invalid(
                    &field("ecdh_config.curve"),
                    &format!(
                        "{named} needs a prime-order group for its OPRF: CURVE_FOURQ or \
                         CURVE_RISTRETTO255, not {c}"
                    ),
                ));
            }
            NPartyProtocol::Npc(NpcVariant::ZeroShare(c))
        }
        "PROTOCOL_ECDH_NPC" | "ECDH_PSI_NPC" => {
            NPartyProtocol::Npc(NpcVariant::Iterated(ProtocolChoice::Ecdh {
                curve: curve(None)?,
            }))
        }
        "PROTOCOL_KKRT_NPC" | "KKRT_PSI_NPC" => {
            NPartyProtocol::Npc(NpcVariant::Iterated(ProtocolChoice::Kkrt))
        }
        _ => {
            let d = &pc["dppsi_params"];
            let num = |k: &str, default: f64| -> Result<f64, ConfigError> {
                match &d[k] {
                    Value::Null => Ok(default),
                    x => x.as_f64().ok_or_else(|| {
                        invalid(
                            &field(&format!("dppsi_params.{k}")),
                            &format!("expected a number, got {x}"),
                        )
                    }),
                }
            };
            let dflt = DpParams::default();
            let params = DpParams {
                bob_sub_sampling: num("bob_sub_sampling", dflt.bob_sub_sampling)?,
                epsilon: num("epsilon", dflt.epsilon)?,
            };
            params
                .validate()
                .map_err(|e| invalid(&field("dppsi_params"), &e.to_string()))?;
            NPartyProtocol::Dp {
                curve: curve(Some(Curve::Curve25519))?,
                params,
            }
        }
    };
    let Parties {
        self_id,
        parties,
        tls_server,
        tls_client,
    } = self_and_parties(&v, env.source(), env.base_dir())?;
    let n = parties.len();
    let dp = matches!(protocol, NPartyProtocol::Dp { .. });
    if (dp && n != 2) || n < 2 {
        return Err(invalid(
            "link_config.parties",
            &format!(
                "has {n} parties; {named} needs {}",
                if dp { "exactly 2" } else { "at least 2" }
            ),
        ));
    }
    let ids: Vec<String> = parties.iter().map(|p| p.id.clone()).collect();
    for (i, id) in ids.iter().enumerate() {
        if ids[i + 1..].contains(id) {
            return Err(invalid(
                "link_config.parties",
                &format!("the id {id:?} appears twice; give each party its own id"),
            ));
        }
    }
    let find = |id: &str, f: &str| {
        ids.iter().position(|x| x == id).ok_or_else(|| {
            invalid(
                f,
                &format!("{id:?} is not one of the ids in link_config.parties {ids:?}"),
            )
        })
    };
    let me = find(&self_id, "self_link_party")?;
    let receiver = find(&receiver_id, &field("receiver"))?;
    let role = if me == receiver {
        blindjoin_protocols::Role::Receiver
    } else {
        blindjoin_protocols::Role::Sender
    };
    check_receiver_only(&v, named, role, &receiver_id, &self_id, "the result")?;
    if pc["broadcast_result"].as_bool() == Some(true)
        && matches!(protocol, NPartyProtocol::Dp { .. })
    {
        return Err(invalid(
            &field("broadcast_result"),
            &format!("{named}: {NO_BROADCAST}"),
        ));
    }

    // The two-party parser reads the rest, on a copy that names two-party ECDH (or KKRT) and one
    // peer.
    let peer = (me + 1) % n;
    if let Some(pc) = v["psi_config"]["protocol_config"].as_object_mut() {
        pc.remove("receiver");
        pc.remove("dppsi_params");
        match protocol {
            NPartyProtocol::Npc(NpcVariant::Iterated(ProtocolChoice::Kkrt)) => {
                pc.insert("protocol".into(), "PROTOCOL_KKRT".into());
                pc.remove("ecdh_config");
            }
            NPartyProtocol::Npc(NpcVariant::ZeroShare(c))
            | NPartyProtocol::Npc(NpcVariant::Iterated(ProtocolChoice::Ecdh { curve: c }))
            | NPartyProtocol::Dp { curve: c, .. } => {
                pc.insert("protocol".into(), "PROTOCOL_ECDH".into());
                pc.insert(
                    "ecdh_config".into(),
                    serde_json::json!({ "curve": c.config_name() }),
                );
            }
            NPartyProtocol::Npc(NpcVariant::Iterated(_)) => {
                pc.insert("protocol".into(), "PROTOCOL_RR22".into());
            }
        }
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

    let mut spec = spec;
    if let NPartyProtocol::Npc(NpcVariant::Iterated(_)) = protocol {
        spec.warnings.push(format!(
            "{named} runs SecretFlow's tree of two-party runs: some parties learn intermediate \
             intersections (docs/protocols.md); PROTOCOL_NPC reveals only the final one"
        ));
    }
    Ok(Some(NPartySpec {
        spec,
        parties,
        me,
        receiver,
        protocol,
        tls_server,
        tls_client,
    }))
}

const NO_BROADCAST: &str = "must be false; DP-PSI's guarantee is for what Bob (the receiver) \
                            learns, and Alice is to learn only the sizes";

/// The two-party features that have no meaning, or no implementation, here.
fn refuse_unsupported(spec: &RunSpec, named: &str) -> Result<(), ConfigError> {
    let no = |field: &str, why: &str| Err(invalid(field, &format!("{named}: {why}")));
    if spec.join.join != JoinType::Inner {
        return no("psi_config.advanced_join_type", NOT_INNER);
    }
    if spec.recovery.is_some() {
        return no(
            "psi_config.recovery_config",
            "recovery is not built for these runs; set enabled = false",
        );
    }
    if spec.reveal != Reveal::Intersection {
        return no(
            "psi_config.intersection_threshold / blindjoin.cardinality_only",
            "not available for this protocol",
        );
    }
    if spec.min_intersection.is_some() {
        return no("blindjoin.min_intersection", "not built for these runs");
    }
    if spec.secret_key_path.is_some() {
        return no(
            "blindjoin.secret_key_path",
            "every party's key is random per run in this protocol",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
