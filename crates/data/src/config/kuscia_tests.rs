use super::*;
use crate::plan::Plan;
use serde_json::json;
use std::path::PathBuf;

/// A party's launch config in protobuf's lowerCamelCase JSON, as Kuscia's tooling writes it
/// (the shape of SecretFlow's own `kuscia_adapter_test.cc`).
fn launch(role: &str, input: &str, output: &str) -> Value {
    json!({
        "psi_config": {
            "protocolConfig": {
                "protocol": "PROTOCOL_ECDH",
                "ecdhConfig": {"curve": "CURVE_25519"},
                "role": role,
                "broadcastResult": true
            },
            "inputConfig": {"type": "IO_TYPE_FILE_CSV", "path": input},
            "outputConfig": {"type": "IO_TYPE_FILE_CSV", "path": output},
            "keys": ["id0", "id1"],
            "debugOptions": {"tracePath": "/tmp/receiver.trace"}
        },
        "linkConfig": {"recv_timeout_ms": 180000, "http_timeout_ms": 120000}
    })
}

/// A task file with its three embedded configs as JSON strings, as Kuscia writes them.
fn task(self_idx: Value, input: Value, ports: Value) -> String {
    let mut cluster = json!({
        "parties": [
            {"name": "bob", "services": [{"portName": "psi", "endpoints": ["1.2.3.5:1235"]}]},
            {"name": "alice", "services": [{"portName": "psi", "endpoints": ["http://1.2.3.4"]}]}
        ]
    });
    if !self_idx.is_null() {
        cluster["self_party_idx"] = self_idx;
    }
    json!({
        "task_id": "task_id_1234",
        "task_cluster_def": cluster.to_string(),
        "allocated_ports": ports.to_string(),
        "task_input_config": input.to_string(),
    })
    .to_string()
}

fn both() -> Value {
    json!({"sf_psi_config_map": {
        "alice": launch("ROLE_RECEIVER", "alice.csv", "/tmp/alice_out.csv"),
        "bob": launch("ROLE_SENDER", "bob.csv", "/tmp/bob_out.csv"),
    }})
}

fn ports(port: u16) -> Value {
    json!({"ports": [{"name": "psi", "port": port, "scope": "Cluster", "protocol": "HTTP"}]})
}

fn two_party(text: &str) -> crate::RunSpec {
    let t = parse_kuscia_task(text, "task.json", Path::new("/base")).unwrap();
    match Plan::from_envelope(&t.envelope).unwrap() {
        Plan::TwoParty(s) => *s,
        other => panic!("expected a two-party plan, got {}", other.kind()),
    }
}

fn err(text: &str) -> String {
    match parse_kuscia_task(text, "task.json", Path::new("/base")) {
        Ok(t) => Plan::from_envelope(&t.envelope)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| "parsed".into()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn this_partys_config_runs_with_kuscias_parties_and_port() {
    // self_party_idx 1 is alice (the cluster lists bob first).
    let t = parse_kuscia_task(
        &task(json!(1), both(), ports(1234)),
        "task.json",
        Path::new("/base"),
    )
    .unwrap();
    assert_eq!(
        (t.task_id.as_str(), t.self_party.as_str()),
        ("task_id_1234", "alice")
    );
    let s = two_party(&task(json!(1), both(), ports(1234)));
    assert_eq!(s.parties.self_id, "alice");
    assert_eq!(s.parties.self_addr, "0.0.0.0:1234");
    assert_eq!(s.parties.peer_id, "bob");
    assert_eq!(s.parties.peer_addr, "1.2.3.5:1235");
    assert_eq!(s.role, blindjoin_protocols::Role::Receiver);
    assert_eq!(s.keys, ["id0", "id1"]);
    // camelCase fields read as their snake_case names; relative paths from the file's folder.
    assert_eq!(s.input, PathBuf::from("/base/alice.csv"));
    assert!(s.broadcast_result);
    assert_eq!(s.recv_timeout, std::time::Duration::from_millis(180_000));

    // bob, at index 0 (also proto3's default when the field is left out): alice's gateway
    // address loses its http:// and gets port 80.
    for idx in [json!(0), json!("0"), Value::Null] {
        let s = two_party(&task(idx, both(), ports(2000)));
        assert_eq!(s.parties.self_id, "bob");
        assert_eq!(s.parties.self_addr, "0.0.0.0:2000");
        assert_eq!(s.parties.peer_addr, "1.2.3.4:80");
        assert_eq!(s.role, blindjoin_protocols::Role::Sender);
    }
}

#[test]
fn a_port_named_after_the_partys_service_is_taken_over_the_first() {
    let p = json!({"ports": [{"name": "other", "port": 7}, {"name": "psi", "port": 9100}]});
    let s = two_party(&task(json!(1), both(), p));
    assert_eq!(s.parties.self_addr, "0.0.0.0:9100");
    let p = json!({"ports": [{"name": "spu", "port": 9200}]});
    assert_eq!(
        two_party(&task(json!(1), both(), p)).parties.self_addr,
        "0.0.0.0:9200"
    );
}

#[test]
fn parties_given_in_the_launch_config_are_replaced_with_a_warning() {
    let mut input = both();
    input["sf_psi_config_map"]["alice"]["linkConfig"]["parties"] =
        json!([{"id": "x", "host": "9.9.9.9:1"}]);
    let t = parse_kuscia_task(
        &task(json!(1), input, ports(1234)),
        "task.json",
        Path::new("/base"),
    )
    .unwrap();
    assert!(
        t.envelope
            .warnings()
            .iter()
            .any(|w| w.contains("replaced by Kuscia's task_cluster_def"))
    );
    let Plan::TwoParty(s) = Plan::from_envelope(&t.envelope).unwrap() else {
        panic!("not two-party")
    };
    assert_eq!(s.parties.peer_addr, "1.2.3.5:1235");
}

#[test]
fn broken_task_files_name_the_field() {
    let cases: Vec<(String, &str)> = vec![
        ("[]".into(), "expected a JSON object"),
        ("{".into(), "not a Kuscia task file"),
        (
            json!({"task_id": "t", "allocated_ports": "{}", "task_input_config": "{}"}).to_string(),
            "task_cluster_def: missing",
        ),
        (
            json!({"task_id": "t", "task_cluster_def": "{nope", "allocated_ports": "{}",
                   "task_input_config": "{}"})
            .to_string(),
            "task_cluster_def: holds no valid JSON",
        ),
        (
            task(json!(2), both(), ports(1)),
            "task_cluster_def.self_party_idx: is 2, but the cluster has 2 parties",
        ),
        (
            task(json!(-1), both(), ports(1)),
            "task_cluster_def.self_party_idx: must be an index",
        ),
        (
            task(json!(1), both(), json!({"ports": []})),
            "allocated_ports.ports: is empty",
        ),
        (
            task(
                json!(1),
                both(),
                json!({"ports": [{"name": "psi", "port": 70000}]}),
            ),
            "allocated_ports.ports[].port: must be a port number",
        ),
        (
            task(
                json!(1),
                json!({"sf_psi_config_map": {"carol": {}}}),
                ports(1),
            ),
            "task_input_config.sf_psi_config_map.alice: missing",
        ),
        (
            task(json!(1), json!({}), ports(1)),
            "task_input_config.sf_psi_config_map: missing",
        ),
    ];
    for (text, want) in cases {
        let e = err(&text);
        assert!(e.contains(want), "want {want:?} in {e:?}");
    }
    // A party without an endpoint, and the launch config's own errors (with the party's
    // entry named as the source).
    let text = json!({
        "task_cluster_def": json!({"parties": [{"name": "alice"}, {"name": "bob"}],
                                   "self_party_idx": 0}).to_string(),
        "allocated_ports": ports(1).to_string(),
        "task_input_config": both().to_string(),
    })
    .to_string();
    assert!(
        err(&text).contains("task_cluster_def.parties[1].services: party \"bob\" has no endpoint"),
        "{}",
        err(&text)
    );
    let mut input = both();
    input["sf_psi_config_map"]["alice"]["psi_config"]["keys"] = json!([]);
    let e = err(&task(json!(1), input, ports(1)));
    assert!(e.contains("psi_config.keys"), "{e}");
    let mut input = both();
    input["sf_psi_config_map"]["alice"]["psi_config"]["noSuchField"] = json!(1);
    let e = err(&task(json!(1), input, ports(1)));
    assert!(
        e.contains("task.json (task_input_config.sf_psi_config_map.alice)")
            && e.contains("no_such_field"),
        "{e}"
    );
}

#[test]
fn secretflows_wire_is_refused_under_kuscia() {
    let mut input = both();
    input["sf_psi_config_map"]["alice"]["blindjoin"] = json!({"peer_wire": "secretflow"});
    let e = err(&task(json!(1), input, ports(1)));
    assert!(
        e.contains("blindjoin.peer_wire") && e.contains("\"http\""),
        "{e}"
    );
}

#[test]
fn camel_case_keys_become_snake_case() {
    assert_eq!(snake("protocolConfig"), "protocol_config");
    assert_eq!(snake("selfLinkParty"), "self_link_party");
    assert_eq!(snake("recv_timeout_ms"), "recv_timeout_ms");
    assert_eq!(
        snake_keys(json!({"aB": [{"cD": 1}], "e": "fG"})),
        json!({"a_b": [{"c_d": 1}], "e": "fG"})
    );
}
