//! Kuscia task files (`blindjoin run --kuscia FILE`) shaped as Kuscia writes them: the three
//! embedded configs as JSON strings, the launch configs in protobuf's lowerCamelCase, each
//! party's own `self_party_idx` and allocated port. Two real processes on 127.0.0.1 (the
//! endpoints stand where Kuscia's gateway would), outputs against the plain intersection; and
//! the refusals, exit code 2 naming the field.

use crate::support::{BIN, free_port, tmp, wait};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// `dir/NAME.csv` with ids `ids` (and a value column), returning the id set.
fn table(dir: &Path, name: &str, ids: impl Iterator<Item = u32>) -> BTreeSet<u32> {
    let mut text = format!("id,{name}_val\n");
    let mut set = BTreeSet::new();
    for i in ids {
        text += &format!("{i},{name}{i}\n");
        set.insert(i);
    }
    std::fs::write(dir.join(format!("{name}.csv")), text).unwrap();
    set
}

/// One party's launch config as Kuscia's tooling writes it (lowerCamelCase).
fn launch(role: &str, name: &str, protocol: &str) -> Value {
    json!({
        "psiConfig": {
            "protocolConfig": {
                "protocol": protocol,
                "role": role,
                "broadcastResult": true,
                "ecdhConfig": {"curve": "CURVE_25519"}
            },
            "inputConfig": {"type": "IO_TYPE_FILE_CSV", "path": format!("{name}.csv")},
            "outputConfig": {"type": "IO_TYPE_FILE_CSV", "path": format!("{name}_out.csv")},
            "keys": ["id"],
            "advancedJoinType": "ADVANCED_JOIN_TYPE_INNER_JOIN"
        },
        "linkConfig": {"recvTimeoutMs": 60000, "connectRetryTimes": 60,
                       "connectRetryIntervalMs": 1000}
    })
}

/// `dir/NAME.task.json` for party `idx` of (alice, bob) listening on `ports[idx]`.
fn task_file(dir: &Path, idx: usize, ports: [u16; 2], map: &Value) -> PathBuf {
    let names = ["alice", "bob"];
    let parties: Vec<Value> = (0..2)
        .map(|i| {
            json!({
                "name": names[i],
                "role": "",
                "services": [{"portName": "psi",
                              "endpoints": [format!("127.0.0.1:{}", ports[i])]}]
            })
        })
        .collect();
    let cluster = json!({"parties": parties, "selfPartyIdx": idx, "selfEndpointIdx": 0});
    let task = json!({
        "task_id": "secretflow-task-psi",
        "task_cluster_def": cluster.to_string(),
        "allocated_ports": json!({"ports": [{"name": "psi", "port": ports[idx],
                                             "scope": "Cluster", "protocol": "HTTP"}]})
            .to_string(),
        "task_input_config": json!({"sf_psi_config_map": map}).to_string(),
    });
    let path = dir.join(format!("{}.task.json", names[idx]));
    std::fs::write(&path, serde_json::to_string_pretty(&task).unwrap()).unwrap();
    path
}

fn ids(path: &Path) -> BTreeSet<u32> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let col = lines
        .next()
        .unwrap()
        .split(',')
        .position(|c| c.trim_matches('"') == "id")
        .unwrap();
    lines
        .map(|l| {
            l.split(',')
                .nth(col)
                .unwrap()
                .trim_matches('"')
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn two_parties_run_from_their_kuscia_task_files() {
    for protocol in ["PROTOCOL_RR22", "PROTOCOL_ECDH"] {
        let dir = tmp("kuscia", protocol);
        let a = table(&dir, "alice", 0..3000);
        let b = table(&dir, "bob", 2000..6000);
        let map = json!({
            "alice": launch("ROLE_RECEIVER", "alice", protocol),
            "bob": launch("ROLE_SENDER", "bob", protocol),
        });
        let ports = [free_port(), free_port()];
        let children: Vec<_> = (0..2)
            .map(|i| {
                Command::new(BIN)
                    .args(["run", "--kuscia"])
                    .arg(task_file(&dir, i, ports, &map))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let want: BTreeSet<u32> = a.intersection(&b).copied().collect();
        for (name, c) in ["alice", "bob"].into_iter().zip(children) {
            let (ok, err) = wait(c, LIMIT);
            assert!(ok, "{protocol} {name}: {err}");
            assert!(
                err.contains("Kuscia task \"secretflow-task-psi\": running party"),
                "{err}"
            );
            assert_eq!(ids(&dir.join(format!("{name}_out.csv"))), want, "{name}");
        }
        assert_eq!(want.len(), 1000);
    }
}

#[test]
fn broken_task_files_and_secretflows_wire_exit_2_naming_why() {
    let dir = tmp("kuscia", "refusals");
    table(&dir, "alice", 0..10);
    let map = json!({
        "alice": launch("ROLE_RECEIVER", "alice", "PROTOCOL_RR22"),
        "bob": launch("ROLE_SENDER", "bob", "PROTOCOL_RR22"),
    });
    let ports = [free_port(), free_port()];
    let good = task_file(&dir, 0, ports, &map);
    let run = |extra: &[&str], file: &Path| {
        let out = Command::new(BIN)
            .args(["run", "--quiet", "--kuscia"])
            .arg(file)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["--peer-wire", "secretflow"], &good);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("Kuscia") && err.contains("\"http\""), "{err}");

    let mut sf = map.clone();
    sf["alice"]["blindjoin"] = json!({"peer_wire": "secretflow"});
    let (code, err) = run(&[], &task_file(&dir, 0, ports, &sf));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("blindjoin.peer_wire"), "{err}");

    let mut missing = map.clone();
    missing.as_object_mut().unwrap().remove("alice");
    let (code, err) = run(&[], &task_file(&dir, 0, ports, &missing));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("task_input_config.sf_psi_config_map.alice: missing"),
        "{err}"
    );

    let bad = dir.join("bad.task.json");
    std::fs::write(&bad, r#"{"task_id": "t", "task_cluster_def": "{oops"}"#).unwrap();
    let (code, err) = run(&[], &bad);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("task_cluster_def: holds no valid JSON"),
        "{err}"
    );

    let (code, err) = run(&[], &dir.join("absent.task.json"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("reading the Kuscia task file"), "{err}");
}
