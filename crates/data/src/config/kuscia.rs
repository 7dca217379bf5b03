//! Kuscia task files: what SecretFlow's launcher reads with `--kuscia FILE` when Kuscia, the
//! platform SecretFlow deployments run on, starts a PSI task (psi `psi/apps/psi_launcher/
//! kuscia_adapter.cc` and `psi/proto/kuscia.proto`, copied there from Kuscia's
//! `appconfig/app_config.proto`).
//!
//! The file is one JSON object whose fields hold JSON *as strings*, as Kuscia writes them:
//!
//! * `task_id`: a name for the logs;
//! * `task_cluster_def`: `ClusterDefine` — `parties` (`name`, `role`, `services` with
//!   `port_name` and `endpoints`) and `self_party_idx`, which party this process is;
//! * `allocated_ports`: `AllocatedPorts` — the `ports` (`name`, `port`) Kuscia gave this party;
//! * `task_input_config`: `TaskInputConfig` — `sf_psi_config_map`, each party's SecretFlow
//!   launch config by party name.
//!
//! This party's launch config is taken from the map and given the link Kuscia set up, as
//! SecretFlow's adapter does: `link_config.parties` is every party of the cluster in name
//! order, this one at `0.0.0.0:<allocated port>` and each other at its service's first
//! endpoint, and `self_link_party` is this party. Protobuf's JSON names in lowerCamelCase
//! (`protocolConfig`, `linkConfig`, `selfLinkParty`), which Kuscia's tooling writes and
//! SecretFlow reads, are read as their snake_case fields.
//!
//! Between two blindjoin parties the transport is blindjoin's own link through Kuscia's gateway.
//! SecretFlow's adapter switches its link to brpc's `http` protocol for that gateway, which
//! blindjoin's SecretFlow link does not speak, so `peer_wire: "secretflow"` is refused here.

use super::{Envelope, invalid};
use crate::error::ConfigError;
use serde_json::{Map, Value};
use std::path::Path;

/// The task's id and this party's launch config, ready for [`crate::Plan::from_envelope`].
pub struct KusciaTask {
    /// `task_id`, for the logs.
    pub task_id: String,
    /// This party's name in the cluster (its `self_link_party`).
    pub self_party: String,
    /// The launch config with Kuscia's parties filled in.
    pub envelope: Envelope,
}

/// Why a Kuscia task cannot meet a SecretFlow party on its wire.
pub const KUSCIA_SECRETFLOW_WIRE: &str = "a Kuscia task cannot use peer_wire \"secretflow\": \
     SecretFlow's launcher under Kuscia talks brpc's \"http\" protocol through Kuscia's \
     gateway, which blindjoin's SecretFlow link does not speak (it speaks baidu_std and \
     h2:grpc); run both parties as blindjoin under Kuscia, or the SecretFlow partner outside \
     Kuscia with its launch config";

/// Reads a Kuscia task file: this party's launch config with the cluster's parties and its
/// allocated port as its link.
///
/// `source` names the file in errors; relative paths in the launch config are relative to
/// `base_dir`, the file's folder.
///
/// # Errors
/// The file or one of its embedded JSON strings does not parse, a field is missing or of the
/// wrong type, `self_party_idx` is out of range, no port was allocated, a party has no
/// endpoint, this party has no entry in `sf_psi_config_map`, or its config asks for
/// `peer_wire: "secretflow"` — each naming the field.
pub fn parse_kuscia_task(
    text: &str,
    source: &str,
    base_dir: &Path,
) -> Result<KusciaTask, ConfigError> {
    let root: Value = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
        path: source.to_string(),
        message: format!("not a Kuscia task file: {e}"),
    })?;
    let Value::Object(root) = root else {
        return Err(ConfigError::Syntax {
            path: source.to_string(),
            message: "expected a JSON object (a Kuscia task file) at line 1 column 1".into(),
        });
    };
    let task_id = match root.get("task_id") {
        Some(Value::String(s)) => s.clone(),
        None => String::new(),
        Some(_) => return Err(invalid("task_id", "must be a string")),
    };
    let cluster = embedded(&root, "task_cluster_def")?;
    let ports = embedded(&root, "allocated_ports")?;
    let input = embedded(&root, "task_input_config")?;

    let parties = parties(&cluster)?;
    let self_idx = match field(&cluster, &["self_party_idx", "selfPartyIdx"]) {
        // proto3 leaves 0 out of its JSON.
        None => 0,
        Some(v) => proto_int(v)
            .filter(|&i| i >= 0)
            .ok_or_else(|| invalid("task_cluster_def.self_party_idx", "must be an index ≥ 0"))?
            as usize,
    };
    let Some(me) = parties.get(self_idx) else {
        return Err(invalid(
            "task_cluster_def.self_party_idx",
            &format!(
                "is {self_idx}, but the cluster has {} parties (indices from 0)",
                parties.len()
            ),
        ));
    };
    let self_party = me.name.clone();
    let port = allocated_port(&ports, me)?;

    let map = field(&input, &["sf_psi_config_map", "sfPsiConfigMap"]).ok_or_else(|| {
        invalid(
            "task_input_config.sf_psi_config_map",
            "missing: it holds each party's SecretFlow launch config by party name",
        )
    })?;
    let Value::Object(map) = map else {
        return Err(invalid(
            "task_input_config.sf_psi_config_map",
            "must be an object of launch configs by party name",
        ));
    };
    let Some(mine) = map.get(&self_party) else {
        let mut names: Vec<&str> = map.keys().map(String::as_str).collect();
        names.sort_unstable();
        return Err(invalid(
            &format!("task_input_config.sf_psi_config_map.{self_party}"),
            &format!(
                "missing: this party (task_cluster_def.parties[{self_idx}]) has no launch config; \
                 the map has {names:?}"
            ),
        ));
    };
    let mut launch = snake_keys(mine.clone());
    let Value::Object(obj) = &mut launch else {
        return Err(invalid(
            &format!("task_input_config.sf_psi_config_map.{self_party}"),
            "must be a launch config (a JSON object)",
        ));
    };
    if obj
        .get("blindjoin")
        .and_then(|b| b.get("peer_wire"))
        .and_then(Value::as_str)
        == Some("secretflow")
    {
        return Err(invalid(
            &format!("task_input_config.sf_psi_config_map.{self_party}.blindjoin.peer_wire"),
            KUSCIA_SECRETFLOW_WIRE,
        ));
    }
    // Every party in name order, as SecretFlow's adapter lists them (its rank order).
    let mut hosts: Vec<(String, String)> = Vec::with_capacity(parties.len());
    for (i, p) in parties.iter().enumerate() {
        let host = if i == self_idx {
            format!("0.0.0.0:{port}")
        } else {
            p.endpoint(i)?
        };
        hosts.push((p.name.clone(), host));
    }
    hosts.sort();
    if let Some(w) = hosts.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(invalid(
            "task_cluster_def.parties",
            &format!("party {:?} is listed twice", w[0].0),
        ));
    }
    let link = obj
        .entry("link_config")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(link) = link else {
        return Err(invalid(
            &format!("task_input_config.sf_psi_config_map.{self_party}.link_config"),
            "must be an object",
        ));
    };
    let mut warnings = Vec::new();
    if link.contains_key("parties") {
        warnings.push(format!(
            "task_input_config.sf_psi_config_map.{self_party}.link_config.parties: replaced by \
             Kuscia's task_cluster_def"
        ));
    }
    link.insert(
        "parties".into(),
        Value::Array(
            hosts
                .into_iter()
                .map(|(id, host)| serde_json::json!({"id": id, "host": host}))
                .collect(),
        ),
    );
    obj.insert("self_link_party".into(), Value::String(self_party.clone()));
    let text = serde_json::to_string_pretty(&launch).map_err(|e| ConfigError::Syntax {
        path: source.to_string(),
        message: e.to_string(),
    })?;
    let label = format!("{source} (task_input_config.sf_psi_config_map.{self_party})");
    let mut envelope = Envelope::parse(&text, &label, base_dir)?;
    for w in warnings {
        envelope.warn(w);
    }
    Ok(KusciaTask {
        task_id,
        self_party,
        envelope,
    })
}

/// A field that Kuscia writes as a string holding JSON (an object is read as well).
fn embedded(root: &Map<String, Value>, name: &str) -> Result<Value, ConfigError> {
    match root.get(name) {
        None => Err(invalid(
            name,
            "missing (Kuscia writes it into every task file)",
        )),
        Some(Value::String(s)) => {
            serde_json::from_str(s).map_err(|e| invalid(name, &format!("holds no valid JSON: {e}")))
        }
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(_) => Err(invalid(name, "must be a string holding JSON")),
    }
}

/// A field by its proto name or its lowerCamelCase JSON name.
fn field<'a>(v: &'a Value, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|n| v.get(*n))
}

/// An int32 as protobuf's JSON writes it: a number or a decimal string.
fn proto_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// One `ClusterDefine` party.
struct Party {
    name: String,
    /// `(port_name, endpoints)` of each service.
    services: Vec<(String, Vec<String>)>,
}

impl Party {
    /// Where the other parties reach this one: its first service's first endpoint (what
    /// SecretFlow's adapter takes), without the `http://` a gateway address may carry, with
    /// port 80 (the gateway's HTTP port) when it names none.
    fn endpoint(&self, i: usize) -> Result<String, ConfigError> {
        let Some(e) = self.services.first().and_then(|(_, e)| e.first()) else {
            return Err(invalid(
                &format!("task_cluster_def.parties[{i}].services"),
                &format!("party {:?} has no endpoint to reach it at", self.name),
            ));
        };
        let bare = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"))
            .unwrap_or(e)
            .trim_end_matches('/');
        if bare.is_empty() || bare.contains('/') {
            return Err(invalid(
                &format!("task_cluster_def.parties[{i}].services[0].endpoints[0]"),
                &format!("{e:?} is not HOST or HOST:PORT"),
            ));
        }
        let has_port = match bare.rsplit_once(':') {
            Some((host, port)) => {
                !port.is_empty()
                    && port.bytes().all(|b| b.is_ascii_digit())
                    && (!host.contains(':') || host.ends_with(']'))
            }
            None => false,
        };
        Ok(if has_port {
            bare.to_string()
        } else {
            format!("{bare}:80")
        })
    }
}

fn parties(cluster: &Value) -> Result<Vec<Party>, ConfigError> {
    let Some(Value::Array(list)) = field(cluster, &["parties"]) else {
        return Err(invalid(
            "task_cluster_def.parties",
            "missing or not a list of parties",
        ));
    };
    if list.len() < 2 {
        return Err(invalid(
            "task_cluster_def.parties",
            &format!("has {} party; a PSI task needs at least 2", list.len()),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, p)| {
            let name = match p.get("name") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => {
                    return Err(invalid(
                        &format!("task_cluster_def.parties[{i}].name"),
                        "missing or not a non-empty string",
                    ));
                }
            };
            let services = match p.get("services") {
                None => Vec::new(),
                Some(Value::Array(s)) => s
                    .iter()
                    .map(|s| {
                        let port_name = field(s, &["port_name", "portName"])
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string();
                        let endpoints = s
                            .get("endpoints")
                            .and_then(Value::as_array)
                            .map(|e| {
                                e.iter()
                                    .filter_map(Value::as_str)
                                    .map(str::to_string)
                                    .collect()
                            })
                            .unwrap_or_default();
                        (port_name, endpoints)
                    })
                    .collect(),
                Some(_) => {
                    return Err(invalid(
                        &format!("task_cluster_def.parties[{i}].services"),
                        "must be a list",
                    ));
                }
            };
            Ok(Party { name, services })
        })
        .collect()
}

/// The port Kuscia allocated to this party: the one named as this party's first service
/// (Kuscia names both after the app's port), else the first, as SecretFlow's adapter takes.
fn allocated_port(ports: &Value, me: &Party) -> Result<u16, ConfigError> {
    let Some(Value::Array(list)) = field(ports, &["ports"]) else {
        return Err(invalid(
            "allocated_ports.ports",
            "missing or not a list: Kuscia allocates this party's port there",
        ));
    };
    let wanted = me.services.first().map(|(n, _)| n.as_str());
    let chosen = list
        .iter()
        .find(|p| wanted.is_some() && p.get("name").and_then(Value::as_str) == wanted)
        .or_else(|| list.first());
    let Some(p) = chosen else {
        return Err(invalid(
            "allocated_ports.ports",
            "is empty: no port to listen on",
        ));
    };
    p.get("port")
        .and_then(proto_int)
        .and_then(|n| u16::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            invalid(
                "allocated_ports.ports[].port",
                "must be a port number 1–65535",
            )
        })
}

/// `v` with every object key in lowerCamelCase rewritten to snake_case, as protobuf's JSON
/// parser reads either spelling (`protocolConfig` is `protocol_config`).
fn snake_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (snake(&k), snake_keys(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(snake_keys).collect()),
        other => other,
    }
}

fn snake(k: &str) -> String {
    if !k.bytes().any(|b| b.is_ascii_uppercase()) {
        return k.to_string();
    }
    let mut out = String::with_capacity(k.len() + 4);
    for c in k.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
#[path = "kuscia_tests.rs"]
mod tests;
