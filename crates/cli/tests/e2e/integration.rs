//! End-to-end: the real `blindjoin` binary as two processes on 127.0.0.1, configured with
//! SecretFlow PSI v2 JSON, checked against a plaintext join; and every kind of bad input.

use crate::support::{BIN, free_port, read_scores, tmp, write_ca, write_cert, write_scores};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `protocol_config` lines for a test "curve": a real curve runs ECDH; `RR22`, `RR22_LOW`
/// and `RR22_MAL` run RR22's fast, low-communication and malicious modes with small buckets (so
/// bucketing is exercised too); `KKRT` runs KKRT16 in buckets of 500 and `KKRT_ONE` with
/// SecretFlow's default `kkrt_config` (one bucket).
fn protocol_lines(curve: &str) -> String {
    let rr22 = |extra: &str| {
        format!(
            r#""protocol": "PROTOCOL_RR22",
      "rr22_config": {{ "bucket_size": "500"{extra} }},"#
        )
    };
    match curve {
        "RR22" => rr22(r#", "low_comm_mode": false"#),
        "RR22_LOW" => rr22(r#", "low_comm_mode": true"#),
        "RR22_MAL" => rr22(r#", "malicious": true"#),
        "KKRT" => r#""protocol": "PROTOCOL_KKRT",
      "kkrt_config": { "bucket_size": 500 },"#
            .to_string(),
        "KKRT_ONE" => r#""protocol": "PROTOCOL_KKRT","#.to_string(),
        _ => format!(
            r#""protocol": "PROTOCOL_ECDH",
      "ecdh_config": {{ "curve": "{curve}" }},"#
        ),
    }
}

/// The seed's v2 config (with its trailing comma), protocol switched to ECDH plus a curve (or
/// RR22, see [`protocol_lines`]).
fn sf_config(
    dir: &Path,
    me: &str,
    role: &str,
    curve: &str,
    broadcast: bool,
    key: &str,
    ports: (u16, u16),
) -> PathBuf {
    let text = format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{
      {proto}
      "role": "{role}",
      "broadcast_result": {broadcast}
    }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}_out.csv" }},
    "keys": [
      "{key}",
    ],
    "debug_options": {{ "trace_path": "{me}.trace" }},
    "skip_duplicates_check": false,
    "disable_alignment": false,
    "advanced_join_type": "ADVANCED_JOIN_TYPE_UNSPECIFIED",
    "left_side": "ROLE_RECEIVER",
    "check_hash_digest": false,
    "recovery_config": {{ "enabled": false }}
  }},
  "link_config": {{
    "recv_timeout_ms": 60000,
    "parties": [
      {{ "id": "receiver", "host": "127.0.0.1:{}" }},
      {{ "id": "sender", "host": "127.0.0.1:{}" }}
    ]
  }},
  "self_link_party": "{me}"
}}"#,
        ports.0,
        ports.1,
        proto = protocol_lines(curve)
    );
    let p = dir.join(format!("{me}.json"));
    std::fs::write(&p, text).unwrap();
    p
}

fn spawn_config(cfg: &Path) -> Child {
    Command::new(BIN)
        .args(["run", "--config"])
        .arg(cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits at most 120 s, then kills: no test can hang.
fn finish(mut c: Child) -> Output {
    let deadline = Instant::now() + Duration::from_secs(120);
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = c.kill();
            panic!("a blindjoin process hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Reads a CSV written by blindjoin/gen (no quoted commas in these fixtures).
fn rows(path: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

fn run_pair(dir: &Path, curve: &str, broadcast: bool, keys: (&str, &str)) -> (Output, Output) {
    let ports = (free_port(), free_port());
    let r = sf_config(
        dir,
        "receiver",
        "ROLE_RECEIVER",
        curve,
        broadcast,
        keys.0,
        ports,
    );
    let s = sf_config(
        dir,
        "sender",
        "ROLE_SENDER",
        curve,
        broadcast,
        keys.1,
        ports,
    );
    let (cr, cs) = (spawn_config(&r), spawn_config(&s));
    (finish(cr), finish(cs))
}

fn gen_tables(dir: &Path, rows: &str, overlap: usize, dups: f64) {
    let o = Command::new(BIN)
        .args([
            "gen",
            "--rows",
            rows,
            "--overlap",
            &overlap.to_string(),
            "--seed",
            "9",
            "--payload-columns",
            "2",
        ])
        .args(["--duplicates", &dups.to_string(), "--out-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::rename(dir.join("alice.csv"), dir.join("receiver.csv")).unwrap();
    std::fs::rename(dir.join("bob.csv"), dir.join("sender.csv")).unwrap();
}

/// Plaintext SQL inner join, one party's side: for each shared key (sorted), the `a·b` pairs
/// in left-major order — the left party repeats each of its rows `b` times, the right party
/// repeats its run of rows `a` times.
fn expected(own: &Path, other: &Path, own_is_left: bool) -> Vec<Vec<String>> {
    let mut other_count: BTreeMap<String, usize> = BTreeMap::new();
    for r in rows(other).into_iter().skip(1) {
        *other_count.entry(r[0].clone()).or_default() += 1;
    }
    let mut by_key: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    for r in rows(own).into_iter().skip(1) {
        if other_count.contains_key(&r[0]) {
            by_key.entry(r[0].clone()).or_default().push(r);
        }
    }
    let mut out = Vec::new();
    for (key, own_rows) in by_key {
        let b = other_count[&key];
        if own_is_left {
            for r in own_rows {
                out.extend(std::iter::repeat_n(r, b));
            }
        } else {
            for _ in 0..b {
                out.extend(own_rows.iter().cloned());
            }
        }
    }
    out
}

fn check_pair(dir: &Path, curve: &str, dups: f64) {
    gen_tables(dir, "1500,1200", 600, dups);
    let (r, s) = run_pair(dir, curve, true, ("id", "id"));
    assert!(
        r.status.success() && s.status.success(),
        "{}\n{}",
        stderr(&r),
        stderr(&s)
    );
    let out_r = rows(&dir.join("receiver_out.csv"));
    let out_s = rows(&dir.join("sender_out.csv"));
    assert_eq!(out_r[0], vec!["id", "payload1", "payload2"]);
    assert_eq!(
        out_r[1..],
        expected(&dir.join("receiver.csv"), &dir.join("sender.csv"), true)[..],
        "{curve}"
    );
    assert_eq!(
        out_s[1..],
        expected(&dir.join("sender.csv"), &dir.join("receiver.csv"), false)[..],
        "{curve}"
    );
    // Aligned, duplicates or not: row i has the same key on both sides.
    let keys = |o: &[Vec<String>]| o.iter().map(|r| r[0].clone()).collect::<Vec<_>>();
    assert_eq!(keys(&out_r), keys(&out_s));
    if dups == 0.0 {
        assert_eq!(out_r.len(), 601);
    }
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("receiver_out.csv.report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["intersection_key_count"], 600);
    let protocol = if curve.starts_with("RR22") {
        "PROTOCOL_RR22"
    } else if curve.starts_with("KKRT") {
        "PROTOCOL_KKRT"
    } else {
        "PROTOCOL_ECDH"
    };
    assert_eq!(report["protocol"], protocol);
    if curve.starts_with("RR22") || curve == "KKRT" {
        assert_eq!(
            report["buckets"], 4,
            "1500+ rows in buckets of 500: the power of two at or above 3"
        );
    }
    if curve == "KKRT_ONE" {
        assert_eq!(report["buckets"], 1, "default bucket_size 2^20");
    }
    assert!(report["bytes_sent"].as_u64().unwrap() > 0);
    assert!(
        stderr(&r).contains("trailing comma"),
        "the seed's trailing comma is accepted with a warning"
    );
}

#[test]
fn secretflow_configs_curve25519() {
    check_pair(&tmp("e2e", "c25519"), "CURVE_25519", 0.0);
}

#[test]
fn secretflow_configs_secp256k1() {
    check_pair(&tmp("e2e", "k256"), "CURVE_SECP256K1", 0.0);
}

#[test]
fn secretflow_configs_fourq() {
    check_pair(&tmp("e2e", "fourq"), "CURVE_FOURQ", 0.1);
}

#[test]
fn secretflow_configs_sm2() {
    check_pair(&tmp("e2e", "sm2"), "CURVE_SM2", 0.0);
}

#[test]
fn secretflow_configs_p256() {
    check_pair(&tmp("e2e", "p256"), "CURVE_P256", 0.0);
}

#[test]
fn secretflow_configs_rr22_fast_bucketed() {
    check_pair(&tmp("e2e", "rr22"), "RR22", 0.0);
}

#[test]
fn secretflow_configs_rr22_low_comm_bucketed() {
    check_pair(&tmp("e2e", "rr22low"), "RR22_LOW", 0.0);
}

#[test]
fn secretflow_configs_rr22_malicious_bucketed_with_duplicates() {
    check_pair(&tmp("e2e", "rr22mal"), "RR22_MAL", 0.3);
}

#[test]
fn secretflow_configs_kkrt_bucketed() {
    check_pair(&tmp("e2e", "kkrt"), "KKRT", 0.0);
}

#[test]
fn secretflow_configs_kkrt_default_config_with_duplicates() {
    check_pair(&tmp("e2e", "kkrt1"), "KKRT_ONE", 0.3);
}

#[test]
fn duplicate_keys_output_every_matching_row() {
    check_pair(&tmp("e2e", "dups"), "CURVE_25519", 0.3);
}

#[test]
fn without_broadcast_only_the_receiver_gets_a_result() {
    let dir = tmp("e2e", "nobroadcast");
    gen_tables(&dir, "300", 100, 0.0);
    let (r, s) = run_pair(&dir, "CURVE_25519", false, ("id", "id"));
    assert!(
        r.status.success() && s.status.success(),
        "{}\n{}",
        stderr(&r),
        stderr(&s)
    );
    assert_eq!(rows(&dir.join("receiver_out.csv")).len(), 101);
    assert!(!dir.join("sender_out.csv").exists());
    let report: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(report["intersection_count"], -1);
    assert!(stderr(&s).contains("does not receive the result"));
}

#[test]
fn key_columns_may_have_different_names_and_multi_column_keys_are_unambiguous() {
    let dir = tmp("e2e", "multikey");
    std::fs::write(
        dir.join("receiver.csv"),
        "a,b,v\n\"x,y\",z,1\nx,\"y,z\",2\nq,r,3\n",
    )
    .unwrap();
    std::fs::write(dir.join("sender.csv"), "k2,w,k1\nz,10,\"x,y\"\nr,11,nope\n").unwrap();
    let ports = (free_port(), free_port());
    let cfg = |me: &str, role: &str, keys: &str| {
        let p = sf_config(&dir, me, role, "CURVE_25519", true, "K", ports);
        let t = std::fs::read_to_string(&p).unwrap().replace("\"K\",", keys);
        std::fs::write(&p, t).unwrap();
        p
    };
    let r = spawn_config(&cfg("receiver", "ROLE_RECEIVER", "\"a\", \"b\""));
    let s = spawn_config(&cfg("sender", "ROLE_SENDER", "\"k1\", \"k2\""));
    let (r, s) = (finish(r), finish(s));
    assert!(
        r.status.success() && s.status.success(),
        "{}\n{}",
        stderr(&r),
        stderr(&s)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("receiver_out.csv")).unwrap(),
        "a,b,v\n\"x,y\",z,1\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("sender_out.csv")).unwrap(),
        "k2,w,k1\nz,10,\"x,y\"\n"
    );
}

#[test]
fn header_only_input_is_an_empty_table() {
    let dir = tmp("e2e", "headeronly");
    std::fs::write(dir.join("receiver.csv"), "id,v\n").unwrap();
    std::fs::write(dir.join("sender.csv"), "id,v\na,1\n").unwrap();
    let (r, s) = run_pair(&dir, "CURVE_25519", true, ("id", "id"));
    assert!(
        r.status.success() && s.status.success(),
        "{}\n{}",
        stderr(&r),
        stderr(&s)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("receiver_out.csv")).unwrap(),
        "id,v\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("sender_out.csv")).unwrap(),
        "id,v\n"
    );
}

/// The receiver's input is bad: it exits 2 naming the problem, writes no output, and the sender
/// is told why (exit 1, "aborted") instead of waiting for a timeout.
fn bad_receiver_input(name: &str, content: Option<&[u8]>, key: &str, expect: &[&str]) {
    let dir = tmp("e2e", name);
    if let Some(c) = content {
        std::fs::write(dir.join("receiver.csv"), c).unwrap();
    }
    std::fs::write(dir.join("sender.csv"), "id,v\na,1\n").unwrap();
    let t = Instant::now();
    let (r, s) = run_pair(&dir, "CURVE_25519", true, (key, "id"));
    let err = stderr(&r);
    assert_eq!(r.status.code(), Some(2), "{name}: {err}");
    for e in expect {
        assert!(err.contains(e), "{name}: expected {e:?} in: {err}");
    }
    assert!(!dir.join("receiver_out.csv").exists() && !dir.join("sender_out.csv").exists());
    assert_eq!(s.status.code(), Some(1), "{name}: {}", stderr(&s));
    assert!(stderr(&s).contains("aborted"), "{name}: {}", stderr(&s));
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "{name} took {:?}",
        t.elapsed()
    );
}

#[test]
fn bad_inputs_are_clear_errors() {
    bad_receiver_input("missing", None, "id", &["receiver.csv", "No such file"]);
    bad_receiver_input("empty", Some(b""), "id", &["receiver.csv", "empty"]);
    bad_receiver_input(
        "nokey",
        Some(b"id,v\na,1\n"),
        "ID",
        &["no column named \"ID\"", "\"id\""],
    );
    bad_receiver_input(
        "quote",
        Some(b"id,v\na,1\n\"b,2\n"),
        "id",
        &["receiver.csv:3:1", "unterminated"],
    );
    bad_receiver_input(
        "fields",
        Some(b"id,v\na,1\nb,2,3\n"),
        "id",
        &["receiver.csv:3", "field"],
    );
    bad_receiver_input(
        "emptykey",
        Some(b"id,v\na,1\n,2\n"),
        "id",
        &["receiver.csv:3", "empty"],
    );
    bad_receiver_input(
        "utf8",
        Some(b"id,v\na\xff,1\n"),
        "id",
        &["receiver.csv:2", "UTF-8"],
    );
}

fn run_config_alone(name: &str, edit: impl Fn(String) -> String) -> Output {
    let dir = tmp("e2e", name);
    std::fs::write(dir.join("receiver.csv"), "id\na\n").unwrap();
    let p = sf_config(
        &dir,
        "receiver",
        "ROLE_RECEIVER",
        "CURVE_25519",
        true,
        "id",
        (free_port(), free_port()),
    );
    std::fs::write(&p, edit(std::fs::read_to_string(&p).unwrap())).unwrap();
    finish(spawn_config(&p))
}

#[test]
fn bad_configs_name_the_field() {
    let o = run_config_alone("unknownfield", |t| {
        t.replace("\"disable_alignment\"", "\"disable_alignmnt\"")
    });
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("disable_alignmnt") && stderr(&o).contains("line"),
        "{}",
        stderr(&o)
    );
    let o = run_config_alone("kkrt", |t| {
        t.replace(
            r#""protocol": "PROTOCOL_ECDH","#,
            r#""protocol": "PROTOCOL_KKRT", "kkrt_config": { "bucket_size": 0 },"#,
        )
    });
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("kkrt_config.bucket_size"),
        "{}",
        stderr(&o)
    );
    let o = run_config_alone("dk_pir", |t| {
        t.replacen(
            "\"psi_config\": {",
            "\"dk_pir_sender_config\": {}, \"psi_config\": {",
            1,
        )
    });
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("dk_pir_sender_config") && stderr(&o).contains("not supported yet"),
        "{}",
        stderr(&o)
    );
}

/// Runs the receiver with `ours` and the sender with `theirs`; both must fail with exit code 1
/// and an error containing every string in `expect`.
fn mismatch_fails_on_both_sides(name: &str, ours: &str, theirs: &str, expect: &[&str]) {
    let dir = tmp("e2e", name);
    gen_tables(&dir, "50", 10, 0.0);
    let ports = (free_port(), free_port());
    let r = sf_config(&dir, "receiver", "ROLE_RECEIVER", ours, true, "id", ports);
    let s = sf_config(&dir, "sender", "ROLE_SENDER", theirs, true, "id", ports);
    let (r, s) = (spawn_config(&r), spawn_config(&s));
    let (r, s) = (finish(r), finish(s));
    for o in [&r, &s] {
        assert_eq!(o.status.code(), Some(1));
        let e = stderr(o);
        assert!(expect.iter().all(|x| e.contains(x)), "{e}");
    }
}

#[test]
fn mismatched_curves_fail_on_both_sides() {
    mismatch_fails_on_both_sides(
        "mismatch",
        "CURVE_25519",
        "CURVE_SECP256K1",
        &["curve", "CURVE_25519", "CURVE_SECP256K1"],
    );
}

#[test]
fn mismatched_rr22_modes_fail_on_both_sides() {
    mismatch_fails_on_both_sides(
        "mismatch-rr22",
        "RR22",
        "RR22_LOW",
        &["low_comm_mode", "fast", "low_comm"],
    );
}

#[test]
fn flags_work_without_a_config_and_demo_and_bench_run() {
    let dir = tmp("e2e", "flags");
    gen_tables(&dir, "200", 50, 0.0);
    let (pr, ps) = (free_port(), free_port());
    let party = |role: &str, me: u16, peer: u16| {
        Command::new(BIN)
            .args([
                "run",
                "--role",
                role,
                "--self",
                &format!("127.0.0.1:{me}"),
                "--peer",
                &format!("127.0.0.1:{peer}"),
            ])
            .args(["--keys", "id", "--curve", "secp256k1"])
            .arg("--input")
            .arg(dir.join(format!("{role}.csv")))
            .arg("--output")
            .arg(dir.join(format!("{role}_flags.csv")))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (r, s) = (party("receiver", pr, ps), party("sender", ps, pr));
    let (r, s) = (finish(r), finish(s));
    assert!(
        r.status.success() && s.status.success(),
        "{}\n{}",
        stderr(&r),
        stderr(&s)
    );
    assert_eq!(rows(&dir.join("receiver_flags.csv")).len(), 51);
    let report: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(report["curve"], "CURVE_SECP256K1");

    let demo = Command::new(BIN)
        .args(["demo", "-n", "2000"])
        .output()
        .unwrap();
    assert!(demo.status.success(), "{}", stderr(&demo));
    let text = String::from_utf8_lossy(&demo.stdout);
    assert!(
        text.contains("intersection size: 1000") && text.contains("time:"),
        "{text}"
    );

    let bench = Command::new(BIN)
        .args(["bench", "-n", "3000", "--json"])
        .output()
        .unwrap();
    assert!(bench.status.success(), "{}", stderr(&bench));
    let b: serde_json::Value = serde_json::from_slice(&bench.stdout).unwrap();
    assert_eq!(b["correct"], true);
    assert_eq!(b["intersection"], 1500);
    assert_eq!(b["payload_columns"], 1);

    // SecretFlow's benchmark input shape: the id column alone.
    let kept = std::env::temp_dir().join(format!("bj-bench-ids-{}", std::process::id()));
    let ids = Command::new(BIN)
        .args([
            "bench",
            "-n",
            "3000",
            "--json",
            "--payload-columns",
            "0",
            "--keep",
        ])
        .arg(&kept)
        .output()
        .unwrap();
    assert!(ids.status.success(), "{}", stderr(&ids));
    let b: serde_json::Value = serde_json::from_slice(&ids.stdout).unwrap();
    assert_eq!(
        (b["correct"].clone(), b["payload_columns"].clone()),
        (true.into(), 0.into())
    );
    let input = std::fs::read_to_string(kept.join("alice.csv")).unwrap();
    assert!(input.starts_with("id\n") && input.lines().nth(1).unwrap().len() == 16);
    let _ = std::fs::remove_dir_all(&kept);

    // A simulated WAN: same result, slower by at least the round trips' latency.
    let shaped = Command::new(BIN)
        .args(["bench", "-n", "3000", "--json", "--protocol", "rr22"])
        .args(["--bandwidth", "50mbit", "--latency", "20ms"])
        .output()
        .unwrap();
    assert!(shaped.status.success(), "{}", stderr(&shaped));
    let s: serde_json::Value = serde_json::from_slice(&shaped.stdout).unwrap();
    assert_eq!(s["correct"], true);
    assert_eq!(s["link"][0], "50mbit");
    assert!(
        s["receiver"]["stages"]["protocol_s"].as_f64().unwrap() > 0.2,
        "{s}"
    );
    let bad = Command::new(BIN)
        .args(["bench", "--bandwidth", "fast"])
        .output()
        .unwrap();
    assert!(!bad.status.success() && stderr(&bad).contains("bandwidth"));
}

/// SecretFlow's join cases (psi_test.cc): receiver keys {3,1,3,3,5}, sender {3,1,6,1,3}, the
/// receiver on the left. Both outputs line up row by row with SQL's pairs and null padding.
#[test]
fn joins_pair_duplicates_and_pad_like_sql() {
    let cases: [(&str, &[&str], &[&str]); 5] = [
        ("INNER_JOIN", &[], &[]),
        ("LEFT_JOIN", &["5"], &["NA"]),
        ("RIGHT_JOIN", &["NA"], &["6"]),
        ("FULL_JOIN", &["5", "NA"], &["NA", "6"]),
        ("DIFFERENCE", &["5", "NA"], &["NA", "6"]),
    ];
    for (join, tail_r, tail_s) in cases {
        let dir = tmp("e2e", &format!("join_{join}"));
        std::fs::write(dir.join("receiver.csv"), "id,x\n3,a\n1,b\n3,c\n3,d\n5,e\n").unwrap();
        std::fs::write(dir.join("sender.csv"), "id,y\n3,p\n1,q\n6,r\n1,s\n3,t\n").unwrap();
        let ports = (free_port(), free_port());
        let mut children = Vec::new();
        for (me, role) in [("receiver", "ROLE_RECEIVER"), ("sender", "ROLE_SENDER")] {
            let p = sf_config(&dir, me, role, "RR22", true, "id", ports);
            let text = std::fs::read_to_string(&p)
                .unwrap()
                .replace("TYPE_UNSPECIFIED", &format!("TYPE_{join}"))
                .replace(
                    "\"check_hash_digest\": false",
                    "\"check_hash_digest\": true, \"output_attr\": { \"csv_null_rep\": \"NA\" }",
                );
            std::fs::write(&p, text).unwrap();
            children.push(spawn_config(&p));
        }
        let s = finish(children.pop().unwrap());
        let r = finish(children.pop().unwrap());
        assert!(
            r.status.success() && s.status.success(),
            "{join}: {}\n{}",
            stderr(&r),
            stderr(&s)
        );
        let out_r = rows(&dir.join("receiver_out.csv"));
        let out_s = rows(&dir.join("sender_out.csv"));
        let pairs = |o: &[Vec<String>]| -> Vec<String> { o.iter().map(|r| r.join(",")).collect() };
        let mut want_r: Vec<&str> = Vec::new();
        let mut want_s: Vec<&str> = Vec::new();
        if join != "DIFFERENCE" {
            want_r.extend(["1,b", "1,b", "3,a", "3,a", "3,c", "3,c", "3,d", "3,d"]);
            want_s.extend(["1,q", "1,s", "3,p", "3,t", "3,p", "3,t", "3,p", "3,t"]);
        }
        let pad = |v: &mut Vec<&str>, tail: &[&str], own: &'static str| {
            for t in tail {
                v.push(if *t == "NA" { "NA,NA" } else { own });
            }
        };
        pad(&mut want_r, tail_r, "5,e");
        pad(&mut want_s, tail_s, "6,r");
        assert_eq!(pairs(&out_r[1..]), want_r, "{join}: receiver");
        assert_eq!(pairs(&out_s[1..]), want_s, "{join}: sender");
    }
}

/// SecretFlow-style `enable_ssl` with both option blocks, paths relative to the config file.
fn add_ssl(cfg: &Path, cert: &str) {
    let ssl = format!(
        r#""enable_ssl": true,
    "client_ssl_opts": {{ "certificate_path": "certs/{cert}.crt", "private_key_path": "certs/{cert}.key",
                          "ca_file_path": "certs/ca.crt", "verify_depth": 1 }},
    "server_ssl_opts": {{ "certificate_path": "certs/{cert}.crt", "private_key_path": "certs/{cert}.key",
                          "ca_file_path": "certs/ca.crt", "verify_depth": 1 }},
    "recv_timeout_ms": 60000,"#
    );
    let text = std::fs::read_to_string(cfg).unwrap();
    std::fs::write(cfg, text.replace(r#""recv_timeout_ms": 60000,"#, &ssl)).unwrap();
}

#[test]
fn secretflow_configs_with_mutual_tls() {
    let dir = tmp("e2e", "tls");
    gen_tables(&dir, "300", 120, 0.0);
    let ca = write_ca(&dir, "ca");
    write_cert(&dir, "receiver", &ca);
    write_cert(&dir, "sender", &ca);
    let other = write_ca(&dir, "other");
    write_cert(&dir, "impostor", &other);

    let ports = (free_port(), free_port());
    let r = sf_config(&dir, "receiver", "ROLE_RECEIVER", "RR22", true, "id", ports);
    let s = sf_config(&dir, "sender", "ROLE_SENDER", "RR22", true, "id", ports);
    add_ssl(&r, "receiver");
    add_ssl(&s, "sender");
    let (cr, cs) = (spawn_config(&r), spawn_config(&s));
    let (or, os) = (finish(cr), finish(cs));
    assert!(or.status.success(), "{}", stderr(&or));
    assert!(os.status.success(), "{}", stderr(&os));
    let (ro, so) = (
        rows(&dir.join("receiver_out.csv")),
        rows(&dir.join("sender_out.csv")),
    );
    assert_eq!(
        ro[1..],
        expected(&dir.join("receiver.csv"), &dir.join("sender.csv"), true)[..]
    );
    assert_eq!(ro.len(), 121);
    assert_eq!(ro.len(), so.len());

    // The sender shows a certificate from another CA: both fail at once, each saying why.
    let ports = (free_port(), free_port());
    let r = sf_config(&dir, "receiver", "ROLE_RECEIVER", "RR22", true, "id", ports);
    let s = sf_config(&dir, "sender", "ROLE_SENDER", "RR22", true, "id", ports);
    add_ssl(&r, "receiver");
    add_ssl(&s, "impostor");
    let start = Instant::now();
    let (cr, cs) = (spawn_config(&r), spawn_config(&s));
    let (or, os) = (finish(cr), finish(cs));
    assert!(start.elapsed() < Duration::from_secs(30));
    assert_eq!(or.status.code(), Some(1), "{}", stderr(&or));
    assert_eq!(os.status.code(), Some(1), "{}", stderr(&os));
    assert!(
        stderr(&or).contains("not signed by a CA"),
        "{}",
        stderr(&or)
    );
    assert!(
        stderr(&os).contains("refused the TLS handshake"),
        "{}",
        stderr(&os)
    );
}

/// Two processes with `--spill always` (rows streamed into disk shards, bucket by bucket, then
/// an external merge) write the same bytes as the in-memory path, and leave no spill files.
#[test]
fn spilled_runs_match_in_memory_runs_byte_for_byte() {
    let dir = tmp("e2e", "spill");
    gen_tables(&dir, "3000,2000", 900, 0.2);
    let spill_dir = dir.join("spill");
    std::fs::create_dir_all(&spill_dir).unwrap();
    let run = |spill: &str| {
        let (pr, ps) = (free_port(), free_port());
        let party = |role: &str, me: u16, peer: u16| {
            Command::new(BIN)
                .args(["run", "--role", role, "--protocol", "rr22", "--keys", "id"])
                .args(["--self", &format!("127.0.0.1:{me}")])
                .args(["--peer", &format!("127.0.0.1:{peer}")])
                .args([
                    "--broadcast-result",
                    "--bucket-size",
                    "700",
                    "--spill",
                    spill,
                ])
                .arg("--spill-dir")
                .arg(&spill_dir)
                .arg("--input")
                .arg(dir.join(format!("{role}.csv")))
                .arg("--output")
                .arg(dir.join(format!("{role}_{spill}.csv")))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (r, s) = (party("receiver", pr, ps), party("sender", ps, pr));
        let (r, s) = (finish(r), finish(s));
        assert!(
            r.status.success() && s.status.success(),
            "{}\n{}",
            stderr(&r),
            stderr(&s)
        );
        let report: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(report["spilled"], spill == "always");
        assert_eq!(report["buckets"], 8, "3600 rows in buckets of 700");
    };
    run("never");
    run("always");
    for role in ["receiver", "sender"] {
        let a = std::fs::read(dir.join(format!("{role}_never.csv"))).unwrap();
        let b = std::fs::read(dir.join(format!("{role}_always.csv"))).unwrap();
        assert!(a == b, "{role}: spilled and in-memory outputs differ");
    }
    assert_eq!(
        rows(&dir.join("receiver_always.csv"))[1..],
        expected(&dir.join("receiver.csv"), &dir.join("sender.csv"), true)[..]
    );
    assert_eq!(std::fs::read_dir(&spill_dir).unwrap().count(), 0);
}

/// Both parties' SecretFlow configs (ECDH, broadcast), each edited by `edit(me, text)`, run to
/// the end.
fn run_pair_edited(dir: &Path, edit: &dyn Fn(&str, String) -> String) -> (Output, Output) {
    let ports = (free_port(), free_port());
    let mut children = Vec::new();
    for (me, role) in [("receiver", "ROLE_RECEIVER"), ("sender", "ROLE_SENDER")] {
        let p = sf_config(dir, me, role, "CURVE_25519", true, "id", ports);
        let text = edit(me, std::fs::read_to_string(&p).unwrap());
        std::fs::write(&p, text).unwrap();
        children.push(spawn_config(&p));
    }
    let s = children.pop().unwrap();
    let r = children.pop().unwrap();
    (finish(r), finish(s))
}

/// Adds `fields` to a config's `psi_config`.
fn with_psi_fields(text: String, fields: &str) -> String {
    text.replace(
        "\"check_hash_digest\": false,",
        &format!("\"check_hash_digest\": false, {fields}"),
    )
}

#[test]
fn secretflow_threshold_config_reveals_at_most_the_threshold() {
    let dir = tmp("e2e", "threshold");
    gen_tables(&dir, "900,700", 300, 0.0);
    let (r, s) = run_pair_edited(&dir, &|me, text| {
        with_psi_fields(
            text,
            &format!("\"intersection_threshold\": 120, \"count_path\": \"{me}.count\","),
        )
    });
    assert!(
        r.status.success() && s.status.success(),
        "{}\n{}",
        stderr(&r),
        stderr(&s)
    );
    for me in ["receiver", "sender"] {
        let count = std::fs::read_to_string(dir.join(format!("{me}.count"))).unwrap();
        assert_eq!(count, "real_count,final_count\n300,120\n", "{me}");
    }
    assert!(
        stderr(&r).contains("revealed 120 of the 300 shared keys"),
        "{}",
        stderr(&r)
    );
    let out_r = rows(&dir.join("receiver_out.csv"));
    let out_s = rows(&dir.join("sender_out.csv"));
    assert_eq!(out_r.len(), 121);
    let keys = |o: &[Vec<String>]| o.iter().map(|r| r[0].clone()).collect::<Vec<_>>();
    assert_eq!(keys(&out_r), keys(&out_s));
    let shared: std::collections::HashSet<Vec<String>> =
        expected(&dir.join("receiver.csv"), &dir.join("sender.csv"), true)
            .into_iter()
            .collect();
    assert!(out_r[1..].iter().all(|row| shared.contains(row)));
}

#[test]
fn cardinality_only_prints_the_size_and_writes_no_output() {
    let dir = tmp("e2e", "cardinality");
    gen_tables(&dir, "900,700", 300, 0.0);
    let (r, s) = run_pair_edited(&dir, &|me, text| {
        with_psi_fields(text, &format!("\"count_path\": \"{me}.count\",")).replace(
            "\"self_link_party\"",
            "\"blindjoin\": { \"cardinality_only\": true }, \"self_link_party\"",
        )
    });
    assert!(
        r.status.success() && s.status.success(),
        "{}\n{}",
        stderr(&r),
        stderr(&s)
    );
    for (me, o) in [("receiver", &r), ("sender", &s)] {
        assert!(
            stderr(o).contains("intersection size: 300 keys (cardinality only"),
            "{}",
            stderr(o)
        );
        assert!(
            !dir.join(format!("{me}_out.csv")).exists(),
            "{me} wrote an output"
        );
        let count = std::fs::read_to_string(dir.join(format!("{me}.count"))).unwrap();
        assert_eq!(count, "real_count,final_count\n300,0\n");
    }
}

#[test]
fn secretflow_parquet_configs_keep_the_column_types() {
    let dir = tmp("e2e", "parquet");
    write_scores(&dir.join("receiver.parquet"), 0..900);
    write_scores(&dir.join("sender.parquet"), 600..1300);
    let (r, s) = run_pair_edited(&dir, &|me, text| {
        text.replace("IO_TYPE_FILE_CSV", "IO_TYPE_FILE_PARQUET")
            .replace(&format!("\"{me}.csv\""), &format!("\"{me}.parquet\""))
            .replace(
                &format!("\"{me}_out.csv\""),
                &format!("\"{me}_out.parquet\""),
            )
    });
    assert!(
        r.status.success() && s.status.success(),
        "{}\n{}",
        stderr(&r),
        stderr(&s)
    );
    let (out_r, out_s) = (
        read_scores(&dir.join("receiver_out.parquet")),
        read_scores(&dir.join("sender_out.parquet")),
    );
    assert_eq!(out_r, out_s, "aligned outputs differ");
    let mut ids: Vec<i64> = out_r.iter().map(|&(i, _)| i).collect();
    ids.sort_unstable();
    assert_eq!(ids, (600..900).collect::<Vec<_>>());
    assert!(out_r.iter().all(|&(i, s)| s == i as f64 * 1.5));
}

#[test]
fn min_intersection_met_still_joins_every_row() {
    // The size pass reads the table first; the join after it must see every row again (an
    // in-memory table once came back empty and the run wrote a header only).
    let dir = tmp("e2e", "min-intersection-met");
    gen_tables(&dir, "900,700", 300, 0.0);
    let (r, s) = run_pair_edited(&dir, &|_, text| {
        text.replace(
            "\"self_link_party\"",
            "\"blindjoin\": { \"min_intersection\": 300 }, \"self_link_party\"",
        )
    });
    for (me, o) in [("receiver", &r), ("sender", &s)] {
        assert!(o.status.success(), "{me}: {}", stderr(o));
        let out = std::fs::read_to_string(dir.join(format!("{me}_out.csv"))).unwrap();
        assert_eq!(out.lines().count(), 301, "{me}: header and 300 rows");
    }
    let ids = |me: &str| -> Vec<String> {
        std::fs::read_to_string(dir.join(format!("{me}_out.csv")))
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(ids("receiver"), ids("sender"), "aligned outputs");
}

#[test]
fn min_intersection_stops_both_parties_with_the_size() {
    let dir = tmp("e2e", "min-intersection");
    gen_tables(&dir, "900,700", 300, 0.0);
    let (r, s) = run_pair_edited(&dir, &|_, text| {
        text.replace(
            "\"self_link_party\"",
            "\"blindjoin\": { \"min_intersection\": 301 }, \"self_link_party\"",
        )
    });
    for (me, o) in [("receiver", &r), ("sender", &s)] {
        assert!(!o.status.success(), "{me} succeeded");
        assert!(
            stderr(o).contains("the intersection has 300 keys, fewer than the 301"),
            "{me}: {}",
            stderr(o)
        );
        assert!(!dir.join(format!("{me}_out.csv")).exists());
    }
}
