//! Three `blindjoin run` processes on 127.0.0.1 with SecretFlow-style three-party configs
//! (`PROTOCOL_ECDH_3PC`): the receiver's output holds exactly its rows whose key all three
//! tables hold; the helpers write nothing; a party configured with another receiver makes every
//! party fail, in bounded time; mutual TLS from the config (`enable_ssl`) or from the command
//! line's `--tls-*` flags reaches all three links, and a certificate from another CA stops all
//! three with errors that say so.

use crate::support::{BIN, free_port, tmp, wait, write_ca, write_cert};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const IDS: [&str; 3] = ["alice", "bob", "carol"];

fn config(dir: &Path, me: &str, receiver: &str, ports: &[u16; 3], curve: &str) -> String {
    config_as(dir, me, receiver, ports, curve, "csv")
}

/// [`config`] with tables of the given extension (`csv` or `parquet`), in and out.
fn config_as(
    dir: &Path,
    me: &str,
    receiver: &str,
    ports: &[u16; 3],
    curve: &str,
    ext: &str,
) -> String {
    let kind = if ext == "parquet" {
        "IO_TYPE_FILE_PARQUET"
    } else {
        "IO_TYPE_FILE_CSV"
    };
    let parties: Vec<String> = IDS
        .iter()
        .zip(ports)
        .map(|(id, p)| format!(r#"{{ "id": "{id}", "host": "127.0.0.1:{p}" }}"#))
        .collect();
    let text = format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{
      "protocol": "PROTOCOL_ECDH_3PC",
      "receiver": "{receiver}",
      "ecdh_config": {{ "curve": "{curve}" }},
      "broadcast_result": false
    }},
    "input_config": {{ "type": "{kind}", "path": "{me}.{ext}" }},
    "output_config": {{ "type": "{kind}", "path": "{me}_out.{ext}" }},
    "keys": ["id"],
    "disable_alignment": true
  }},
  "link_config": {{ "parties": [{}], "connect_retry_times": 30 }},
  "self_link_party": "{me}"
}}"#,
        parties.join(", ")
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
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|&h| h == "id").unwrap();
    lines
        .map(|l| l.split(',').nth(col).unwrap().to_string())
        .collect()
}

#[test]
fn three_processes_give_the_exact_three_way_intersection() {
    let dir = tmp("3pc", "exact");
    let st = Command::new(BIN)
        .args([
            "gen",
            "--parties",
            "3",
            "--rows",
            "3000,2500,2000",
            "--overlap",
            "700",
        ])
        .args(["--seed", "9", "--out-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(st.status.success());
    // Pairwise-only overlaps as well: bob and carol share 300 keys alice lacks.
    let extra: Vec<String> = (0..300).map(|i| format!("pairwise{i:04}")).collect();
    for (who, tail) in [("bob", ",x"), ("carol", ",y")] {
        let mut text = std::fs::read_to_string(dir.join(format!("{who}.csv"))).unwrap();
        let header = text.lines().next().unwrap().to_string();
        assert!(header.starts_with("id,"), "{header}");
        let cols = header.split(',').count();
        for k in &extra {
            text.push_str(k);
            text.push_str(&tail.repeat(cols - 1));
            text.push('\n');
        }
        std::fs::write(dir.join(format!("{who}.csv")), text).unwrap();
    }
    let ports = [free_port(), free_port(), free_port()];
    for (receiver, curve) in [("alice", "CURVE_25519"), ("carol", "CURVE_FOURQ")] {
        let children: Vec<Child> = IDS
            .iter()
            .map(|me| start(&config(&dir, me, receiver, &ports, curve)))
            .collect();
        for (me, c) in IDS.iter().zip(children) {
            let (ok, err) = wait(c, Duration::from_secs(120));
            assert!(ok, "{me}: {err}");
        }
        let sets: Vec<HashSet<String>> = IDS
            .iter()
            .map(|p| ids(&dir.join(format!("{p}.csv"))).into_iter().collect())
            .collect();
        let r = IDS.iter().position(|&p| p == receiver).unwrap();
        let want: Vec<String> = ids(&dir.join(format!("{receiver}.csv")))
            .into_iter()
            .filter(|k| sets.iter().all(|s| s.contains(k)))
            .collect();
        assert_eq!(want.len(), 700);
        let got = ids(&dir.join(format!("{receiver}_out.csv")));
        assert_eq!(
            got, want,
            "receiver {receiver}: input order, exactly the three-way rows"
        );
        for (i, p) in IDS.iter().enumerate() {
            let out = dir.join(format!("{p}_out.csv"));
            if i != r {
                assert!(!out.exists(), "helper {p} wrote output");
            }
        }
        let _ = std::fs::remove_file(dir.join(format!("{receiver}_out.csv")));
    }
}

/// Parquet in and out: the receiver's output keeps its input's column types, with exactly its
/// rows whose key all three tables hold.
#[test]
fn three_parties_with_parquet_tables() {
    let dir = tmp("3pc", "parquet");
    for (who, ids) in [
        ("alice", 0..3000),
        ("bob", 1000..4000),
        ("carol", 2500..6000),
    ] {
        crate::support::write_scores(&dir.join(format!("{who}.parquet")), ids);
    }
    let ports = [free_port(), free_port(), free_port()];
    let children: Vec<Child> = IDS
        .iter()
        .map(|me| {
            start(&config_as(
                &dir,
                me,
                "bob",
                &ports,
                "CURVE_25519",
                "parquet",
            ))
        })
        .collect();
    for (me, c) in IDS.iter().zip(children) {
        let (ok, err) = wait(c, Duration::from_secs(120));
        assert!(ok, "{me}: {err}");
    }
    let got = crate::support::read_scores(&dir.join("bob_out.parquet"));
    let want: Vec<(i64, f64)> = (2500..3000).map(|i| (i, i as f64 * 1.5)).collect();
    assert_eq!(got, want, "input order, types kept");
    assert!(!dir.join("alice_out.parquet").exists() && !dir.join("carol_out.parquet").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_party_with_another_receiver_makes_all_three_fail() {
    let dir = tmp("3pc", "mismatch");
    let st = Command::new(BIN)
        .args(["gen", "--parties", "3", "--rows", "100", "--out-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(st.status.success());
    let ports = [free_port(), free_port(), free_port()];
    let children: Vec<Child> = IDS
        .iter()
        .map(|me| {
            let receiver = if *me == "carol" { "bob" } else { "alice" };
            start(&config(&dir, me, receiver, &ports, "CURVE_25519"))
        })
        .collect();
    for (me, c) in IDS.iter().zip(children) {
        let (ok, err) = wait(c, Duration::from_secs(60));
        assert!(!ok, "{me} succeeded with a mismatched setup");
        assert!(!err.contains("panicked"), "{me}: {err}");
    }
    assert!(!dir.join("alice_out.csv").exists());
}

/// Turns on mutual TLS in a three-party config: this party's certificate (`certs/<cert>.crt`)
/// both where it listens and where it connects, every peer checked against `certs/ca.crt`.
fn with_tls(config: &str, cert: &str) {
    let ssl = format!(
        r#""enable_ssl": true,
    "client_ssl_opts": {{ "certificate_path": "certs/{cert}.crt", "private_key_path": "certs/{cert}.key",
                          "ca_file_path": "certs/ca.crt" }},
    "server_ssl_opts": {{ "certificate_path": "certs/{cert}.crt", "private_key_path": "certs/{cert}.key",
                          "ca_file_path": "certs/ca.crt" }},
    "connect_retry_times": 30"#
    );
    let text = std::fs::read_to_string(config).unwrap();
    assert!(text.contains(r#""connect_retry_times": 30"#));
    std::fs::write(config, text.replace(r#""connect_retry_times": 30"#, &ssl)).unwrap();
}

/// Mutual TLS on all three links of the ring, turned on in the config (`enable_ssl` with both
/// option blocks) or by `--tls-cert/--tls-key/--tls-ca` (with `--recv-timeout`): with every
/// party's certificate from one CA the receiver gets exactly the three-way rows; with one party
/// showing a certificate from another CA every party fails, saying so (so TLS was really on).
#[test]
fn three_parties_over_mutual_tls_from_config_or_flags() {
    let dir = tmp("3pc", "tls");
    let st = Command::new(BIN)
        .args(["gen", "--parties", "3", "--rows", "400", "--overlap", "120"])
        .args(["--seed", "4", "--out-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(st.status.success());
    let ca = write_ca(&dir, "ca");
    for id in IDS {
        write_cert(&dir, id, &ca);
    }
    let other = write_ca(&dir, "other");
    write_cert(&dir, "impostor", &other);
    let run = |from_flags: bool, cert_of: &dyn Fn(&str) -> String| -> Vec<(bool, String)> {
        let ports = [free_port(), free_port(), free_port()];
        let children: Vec<Child> = IDS
            .iter()
            .map(|me| {
                let cert = cert_of(me);
                let config = config(&dir, me, "alice", &ports, "CURVE_25519");
                let mut cmd = Command::new(BIN);
                cmd.current_dir(&dir)
                    .args(["run", "--quiet", "--config", &config]);
                if from_flags {
                    cmd.args(["--recv-timeout", "60"])
                        .args(["--tls-cert", &format!("certs/{cert}.crt")])
                        .args(["--tls-key", &format!("certs/{cert}.key")])
                        .args(["--tls-ca", "certs/ca.crt"]);
                } else {
                    with_tls(&config, &cert);
                }
                cmd.stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        children
            .into_iter()
            .map(|c| wait(c, Duration::from_secs(60)))
            .collect()
    };
    let sets: Vec<HashSet<String>> = IDS
        .iter()
        .map(|p| ids(&dir.join(format!("{p}.csv"))).into_iter().collect())
        .collect();
    let want: Vec<String> = ids(&dir.join("alice.csv"))
        .into_iter()
        .filter(|k| sets.iter().all(|s| s.contains(k)))
        .collect();
    assert_eq!(want.len(), 120);
    for from_flags in [true, false] {
        let outcomes = run(from_flags, &|me| me.to_string());
        for (me, (ok, err)) in IDS.iter().zip(&outcomes) {
            assert!(ok, "{me} (flags: {from_flags}): {err}");
        }
        assert_eq!(ids(&dir.join("alice_out.csv")), want, "flags: {from_flags}");
        std::fs::remove_file(dir.join("alice_out.csv")).unwrap();

        let impostor = |me: &str| {
            if me == "carol" {
                "impostor".to_string()
            } else {
                me.to_string()
            }
        };
        let outcomes = run(from_flags, &impostor);
        for (me, (ok, err)) in IDS.iter().zip(&outcomes) {
            assert!(
                !ok,
                "{me} succeeded though carol showed another CA's certificate"
            );
            assert!(!err.contains("panicked"), "{me}: {err}");
        }
        let all: String = outcomes.iter().map(|(_, e)| e.as_str()).collect();
        assert!(all.contains("not signed by a CA"), "{all}");
        assert!(!dir.join("alice_out.csv").exists());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
