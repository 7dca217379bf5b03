//! `blindjoin run` processes on 127.0.0.1 for n-party PSI and DP-PSI: five processes with our
//! own config (`PROTOCOL_NPC`, the zero-sharing protocol) and with SecretFlow's v1
//! `legacy_psi_config` (`ECDH_PSI_NPC`, `KKRT_PSI_NPC`, the receiver by `receiver_rank`), and
//! two with `DP_PSI_2PC`: the receiver's output holds exactly its rows whose key every table
//! holds (DP-PSI: with its noise made negligible), and the others write nothing.

use crate::support::{BIN, free_port, tmp, wait};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const IDS: [&str; 5] = ["p0", "p1", "p2", "p3", "p4"];

/// Party `p`'s keys: 400 everyone holds, one "all but j" key per other party j, 300 of its own.
fn keys(p: usize, n: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..400).map(|i| format!("common{i:04}")).collect();
    v.extend((0..n).filter(|&j| j != p).map(|j| format!("all-but-{j}")));
    v.extend((0..300).map(|i| format!("own{p}-{i:04}")));
    v
}

fn write_inputs(dir: &Path, n: usize) {
    for (p, id) in IDS.iter().enumerate().take(n) {
        let mut s = String::from("id,payload\n");
        for (i, k) in keys(p, n).iter().enumerate() {
            s.push_str(&format!("{k},{id}-{i}\n"));
        }
        std::fs::write(dir.join(format!("{id}.csv")), s).unwrap();
    }
}

fn parties(ports: &[u16]) -> String {
    IDS.iter()
        .zip(ports)
        .map(|(id, p)| format!(r#"{{ "id": "{id}", "host": "127.0.0.1:{p}" }}"#))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Our own v2 config.
fn v2(dir: &Path, me: &str, receiver: &str, ports: &[u16], protocol: &str) -> String {
    let text = format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{ "protocol": "{protocol}", "receiver": "{receiver}",
      "ecdh_config": {{ "curve": "CURVE_FOURQ" }} }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}_out.csv" }},
    "keys": ["id"],
    "disable_alignment": true
  }},
  "link_config": {{ "parties": [{}], "connect_retry_times": 30 }},
  "self_link_party": "{me}"
}}"#,
        parties(ports)
    );
    let path = dir.join(format!("{me}.json"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// SecretFlow's v1 launch.
fn v1(dir: &Path, me: &str, rank: usize, ports: &[u16], psi_type: &str, extra: &str) -> String {
    let text = format!(
        r#"{{
  "legacy_psi_config": {{
    "psi_type": "{psi_type}", "receiver_rank": {rank}, "curve_type": "CURVE_25519", {extra}
    "input_params": {{ "path": "{me}.csv", "select_fields": ["id"], "precheck": false }},
    "output_params": {{ "path": "{me}_out.csv", "need_sort": false }}
  }},
  "link_config": {{ "parties": [{}], "connect_retry_times": 30 }},
  "self_link_party": "{me}"
}}"#,
        parties(ports)
    );
    let path = dir.join(format!("{me}.json"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn start(config: &str) -> Child {
    Command::new(BIN)
        .args(["run", "--quiet", "--config", config])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The `id` column of a CSV file.
fn ids(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().to_string())
        .collect()
}

/// Runs the configs, then checks the receiver's output against the plaintext intersection.
fn run_and_check(dir: &Path, configs: Vec<String>, receiver: usize) {
    let n = configs.len();
    let children: Vec<Child> = configs.iter().map(|c| start(c)).collect();
    for (me, c) in IDS.iter().zip(children) {
        let (ok, err) = wait(c, Duration::from_secs(180));
        assert!(ok, "{me}: {err}");
    }
    let sets: Vec<HashSet<String>> = (0..n).map(|p| keys(p, n).into_iter().collect()).collect();
    let want: Vec<String> = keys(receiver, n)
        .into_iter()
        .filter(|k| sets.iter().all(|s| s.contains(k)))
        .collect();
    assert_eq!(want.len(), 400);
    let got = ids(&dir.join(format!("{}_out.csv", IDS[receiver])));
    assert_eq!(got, want, "receiver {}", IDS[receiver]);
    for (i, p) in IDS.iter().enumerate().take(n) {
        let out = dir.join(format!("{p}_out.csv"));
        if i != receiver {
            assert!(!out.exists(), "{p} wrote output");
        }
    }
    let _ = std::fs::remove_file(dir.join(format!("{}_out.csv", IDS[receiver])));
}

#[test]
fn five_processes_zero_sharing_npc() {
    let dir = tmp("npc", "zero");
    write_inputs(&dir, 5);
    let ports: Vec<u16> = (0..5).map(|_| free_port()).collect();
    let configs = IDS
        .iter()
        .map(|me| v2(&dir, me, "p3", &ports, "PROTOCOL_NPC"))
        .collect();
    run_and_check(&dir, configs, 3);
}

#[test]
fn five_processes_legacy_ecdh_and_kkrt_npc() {
    let dir = tmp("npc", "legacy");
    write_inputs(&dir, 5);
    for (t, rank) in [("ECDH_PSI_NPC", 0), ("KKRT_PSI_NPC", 2)] {
        let ports: Vec<u16> = (0..5).map(|_| free_port()).collect();
        let configs = IDS
            .iter()
            .map(|me| v1(&dir, me, rank, &ports, t, ""))
            .collect();
        run_and_check(&dir, configs, rank);
    }
}

/// A v1 launch with `broadcast_result: true`: every party writes its own rows of the n-way
/// intersection.
#[test]
fn legacy_npc_with_broadcast_writes_every_party_its_rows() {
    let dir = tmp("npc", "broadcast");
    write_inputs(&dir, 4);
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let children: Vec<Child> = IDS
        .iter()
        .take(4)
        .map(|me| {
            start(&v1(
                &dir,
                me,
                1,
                &ports,
                "ECDH_PSI_NPC",
                r#""broadcast_result": true,"#,
            ))
        })
        .collect();
    for (me, c) in IDS.iter().zip(children) {
        let (ok, err) = wait(c, Duration::from_secs(180));
        assert!(ok, "{me}: {err}");
    }
    let sets: Vec<HashSet<String>> = (0..4).map(|p| keys(p, 4).into_iter().collect()).collect();
    for (p, id) in IDS.iter().enumerate().take(4) {
        let want: Vec<String> = keys(p, 4)
            .into_iter()
            .filter(|k| sets.iter().all(|s| s.contains(k)))
            .collect();
        assert_eq!(want.len(), 400);
        assert_eq!(ids(&dir.join(format!("{id}_out.csv"))), want, "party {id}");
    }
}

#[test]
fn two_processes_dp_psi_with_negligible_noise() {
    let dir = tmp("npc", "dp");
    write_inputs(&dir, 2);
    let ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
    let extra = r#""dppsi_params": { "bob_sub_sampling": 1.0, "epsilon": 60 },"#;
    let configs = IDS[..2]
        .iter()
        .map(|me| v1(&dir, me, 1, &ports, "DP_PSI_2PC", extra))
        .collect();
    run_and_check(&dir, configs, 1);
}
