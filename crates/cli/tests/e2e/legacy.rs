//! SecretFlow v1 launches (`legacy_psi_config`, as the v1 quick start writes them) run by real
//! `blindjoin run --config` processes on 127.0.0.1: ECDH_PSI_2PC and RR22_FAST_PSI_2PC (receiver
//! only, and broadcast), ECDH_PSI_3PC on three processes with the receiver by `receiver_rank`,
//! and unbalanced PSI's ECDH_OPRF_UB_PSI_2PC_* steps (offline, online, shuffle online; gen cache,
//! transfer cache, online); each output against the plain intersection. BC22_PSI_2PC exits 2
//! naming RR22.

use crate::support::{BIN, free_port, tmp, wait};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// Each party's ids: alice 0..400, bob 200..700 (and 250 twice), carol 100..260 and 600..650.
fn tables(dir: &Path) -> Vec<(&'static str, BTreeSet<u32>)> {
    let sets = [
        ("alice", (0..400).collect::<Vec<u32>>()),
        ("bob", (200..700).chain([250]).collect()),
        ("carol", (100..260).chain(600..650).collect()),
    ];
    sets.into_iter()
        .map(|(who, ids)| {
            let mut text = format!("{who}_val,id\n");
            for i in &ids {
                text += &format!("{who}{i},{i}\n");
            }
            std::fs::write(dir.join(format!("{who}.csv")), text).unwrap();
            (who, ids.into_iter().collect())
        })
        .collect()
}

/// `dir/ME.json`: `legacy_psi_config` with `fields`, the `parties` at their ports, `me` itself.
fn config(dir: &Path, me: &str, fields: &str, parties: &[(&str, u16)]) -> String {
    let parties: Vec<String> = parties
        .iter()
        .map(|(id, p)| format!(r#"{{ "id": "{id}", "host": "127.0.0.1:{p}" }}"#))
        .collect();
    let text = format!(
        r#"{{
  "legacy_psi_config": {{
    {fields},
    "input_params": {{ "path": "{me}.csv", "select_fields": ["id"], "precheck": false }},
    "output_params": {{ "path": "{me}_out.csv", "need_sort": true }}
  }},
  "link_config": {{ "parties": [{}], "connect_retry_times": 60, "connect_retry_interval_ms": 1000 }},
  "self_link_party": "{me}"
}}"#,
        parties.join(", ")
    );
    let path = dir.join(format!("{me}.json"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// alice (in `dirs[0]`) and bob (in `dirs[1]`) run `fields` against each other; both must
/// succeed. Their stderr.
fn run_pair(dirs: [&Path; 2], fields: &str) -> (String, String) {
    let ports = [("alice", free_port()), ("bob", free_port())];
    let a = start(&config(dirs[0], "alice", fields, &ports));
    let b = start(&config(dirs[1], "bob", fields, &ports));
    let (ok_a, err_a) = wait(a, LIMIT);
    let (ok_b, err_b) = wait(b, LIMIT);
    assert!(ok_a && ok_b, "{fields}\nalice: {err_a}\nbob: {err_b}");
    (err_a, err_b)
}

fn start(config: &str) -> Child {
    Command::new(BIN)
        .args(["run", "--quiet", "--config", config])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The `id` column of an output CSV, in file order.
fn out_ids(path: &Path) -> Vec<u32> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|&h| h == "id").unwrap();
    lines
        .map(|l| l.split(',').nth(col).unwrap().parse().unwrap())
        .collect()
}

/// The rows `who` holds whose key every set in `others` holds too (duplicates kept).
fn expected(dir: &Path, who: &str, others: &[&BTreeSet<u32>]) -> Vec<u32> {
    let mut want: Vec<u32> = out_ids(&dir.join(format!("{who}.csv")))
        .into_iter()
        .filter(|k| others.iter().all(|s| s.contains(k)))
        .collect();
    want.sort_unstable();
    want
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

#[test]
fn two_party_v1_types_give_the_plain_intersection() {
    let dir = tmp("legacy", "2pc");
    let sets = tables(&dir);
    let (alice, bob) = (&sets[0].1, &sets[1].1);
    for (fields, broadcast) in [
        (
            r#""psi_type": "ECDH_PSI_2PC", "curve_type": "CURVE_25519", "receiver_rank": 0"#,
            false,
        ),
        (
            r#""psi_type": "RR22_FAST_PSI_2PC", "receiver_rank": 0, "broadcast_result": true, "bucket_size": 1000"#,
            true,
        ),
        (
            r#""psi_type": 1, "curve_type": 2, "receiver_rank": 1, "broadcast_result": true"#,
            true,
        ),
    ] {
        run_pair([&dir, &dir], fields);
        let got_a = out_ids(&dir.join("alice_out.csv"));
        let mut unique_a = sorted(got_a.clone());
        unique_a.dedup();
        assert_eq!(unique_a, expected(&dir, "alice", &[bob]), "{fields}");
        let bob_out = dir.join("bob_out.csv");
        if broadcast {
            // bob has 250 twice: both rows are in his output, and need_sort lines the outputs
            // up row by row (alice's 250 row pairs with each of bob's).
            let got_b = out_ids(&bob_out);
            assert_eq!(sorted(got_b.clone()), expected(&dir, "bob", &[alice]));
            assert_eq!(got_b.len(), 201);
            assert_eq!(got_a, got_b, "{fields}: aligned outputs");
        } else {
            assert_eq!(got_a.len(), 200, "{fields}");
            assert!(!bob_out.exists(), "{fields}: the sender wrote output");
        }
        let _ = std::fs::remove_file(dir.join("alice_out.csv"));
        let _ = std::fs::remove_file(bob_out);
    }
}

#[test]
fn ecdh_3pc_v1_config_runs_on_three_processes() {
    let dir = tmp("legacy", "3pc");
    let sets = tables(&dir);
    let ports: Vec<(&str, u16)> = sets.iter().map(|(w, _)| (*w, free_port())).collect();
    // carol (rank 2) receives.
    let fields = r#""psi_type": "ECDH_PSI_3PC", "curve_type": "CURVE_FOURQ", "receiver_rank": 2"#;
    let children: Vec<Child> = sets
        .iter()
        .map(|(who, _)| start(&config(&dir, who, fields, &ports)))
        .collect();
    for ((who, _), c) in sets.iter().zip(children) {
        let (ok, err) = wait(c, LIMIT);
        assert!(ok, "{who}: {err}");
    }
    let got = sorted(out_ids(&dir.join("carol_out.csv")));
    let want = expected(&dir, "carol", &[&sets[0].1, &sets[1].1]);
    assert_eq!(want, (200..260).collect::<Vec<u32>>());
    assert_eq!(got, want);
    assert!(!dir.join("alice_out.csv").exists() && !dir.join("bob_out.csv").exists());
}

#[test]
fn unbalanced_offline_then_online_from_v1_configs() {
    let dir = tmp("legacy", "ub");
    let sets = tables(&dir);
    // bob holds the large set (the server); alice, at receiver_rank 0, is the client.
    let ub = |step: &str| {
        format!(
            r#""psi_type": "{step}", "receiver_rank": 0, "curve_type": "CURVE_FOURQ",
    "preprocess_path": "cache", "ecdh_secret_key_path": "bob.key", "bucket_size": 100000000"#
        )
    };
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::copy(dir.join("alice.csv"), dir.join("a/alice.csv")).unwrap();
    std::fs::copy(dir.join("bob.csv"), dir.join("b/bob.csv")).unwrap();
    for step in [
        "ECDH_OPRF_UB_PSI_2PC_OFFLINE",
        "ECDH_OPRF_UB_PSI_2PC_ONLINE",
    ] {
        let (_, err_b) = run_pair([&dir.join("a"), &dir.join("b")], &ub(step));
        // Each keeps its own cache: the client the transferred copy at preprocess_path, the
        // server its own beside it.
        assert!(
            dir.join("a/cache").exists() && dir.join("b/cache.server").exists(),
            "{step}"
        );
        assert!(!dir.join("b/cache").exists(), "{step}");
        if step.ends_with("OFFLINE") {
            assert!(!dir.join("a/alice_out.csv").exists());
            // bucket_size has no meaning here, and says so.
            assert!(err_b.contains("bucket_size"), "{err_b}");
        }
    }
    let got = sorted(out_ids(&dir.join("a/alice_out.csv")));
    assert_eq!(got, expected(&dir, "alice", &[&sets[1].1]));
    assert_eq!(got.len(), 200);
    assert!(
        !dir.join("b/bob_out.csv").exists(),
        "the server learns nothing"
    );

    // Shuffle online on the same caches: the receiver (rank 1) is the server, bob, and he gets
    // his matching rows (250 twice); alice, the client, writes nothing.
    std::fs::remove_file(dir.join("a/alice_out.csv")).unwrap();
    let shuffle = ub("ECDH_OPRF_UB_PSI_2PC_SHUFFLE_ONLINE")
        .replace(r#""receiver_rank": 0"#, r#""receiver_rank": 1"#);
    let ports = [("alice", free_port()), ("bob", free_port())];
    let a = start(&config(&dir.join("a"), "alice", &shuffle, &ports));
    let b = start(&config(&dir.join("b"), "bob", &shuffle, &ports));
    let (ok_a, err_a) = wait(a, LIMIT);
    let (ok_b, err_b) = wait(b, LIMIT);
    assert!(ok_a && ok_b, "shuffle online\nalice: {err_a}\nbob: {err_b}");
    let got = sorted(out_ids(&dir.join("b/bob_out.csv")));
    assert_eq!(got, expected(&dir, "bob", &[&sets[0].1]));
    assert_eq!(got.len(), 201);
    assert!(
        !dir.join("a/alice_out.csv").exists(),
        "the client gets no rows"
    );
}

#[test]
fn unbalanced_gen_cache_transfer_cache_then_online_from_v1_configs() {
    let dir = tmp("legacy", "ub-steps");
    let sets = tables(&dir);
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::copy(dir.join("alice.csv"), dir.join("a/alice.csv")).unwrap();
    std::fs::copy(dir.join("bob.csv"), dir.join("b/bob.csv")).unwrap();
    let ub = |step: &str| {
        format!(
            r#""psi_type": "{step}", "receiver_rank": 0, "curve_type": "CURVE_FOURQ",
    "preprocess_path": "cache", "ecdh_secret_key_path": "bob.key""#
        )
    };
    // Gen cache: bob alone, no peer.
    let ports = [("alice", free_port()), ("bob", free_port())];
    let gen_cache = config(
        &dir.join("b"),
        "bob",
        &ub("ECDH_OPRF_UB_PSI_2PC_GEN_CACHE"),
        &ports,
    );
    let (ok, err) = wait(start(&gen_cache), LIMIT);
    assert!(ok, "gen cache: {err}");
    assert!(dir.join("b/cache.server").exists() && !dir.join("a/cache").exists());
    for step in [
        "ECDH_OPRF_UB_PSI_2PC_TRANSFER_CACHE",
        "ECDH_OPRF_UB_PSI_2PC_ONLINE",
    ] {
        run_pair([&dir.join("a"), &dir.join("b")], &ub(step));
    }
    let got = sorted(out_ids(&dir.join("a/alice_out.csv")));
    assert_eq!(got, expected(&dir, "alice", &[&sets[1].1]));
    assert_eq!(got.len(), 200);
}

/// The whitepaper's unbalanced scripts give both parties one `preprocess_path`; SecretFlow's
/// server writes nothing there, so both can run on one machine in one folder. Ours keeps its
/// cache beside it (`cache.server`), so offline then online (and shuffle online) work there too.
#[test]
fn unbalanced_scripts_sharing_one_preprocess_path_on_one_machine() {
    let dir = tmp("legacy", "ub-one-machine");
    let sets = tables(&dir);
    let ub = |step: &str, receiver: u32| {
        format!(
            r#""psi_type": "{step}", "receiver_rank": {receiver}, "curve_type": "CURVE_FOURQ",
    "preprocess_path": "offline_out/offline_psi.csv", "ecdh_secret_key_path": "secret_key.bin""#
        )
    };
    std::fs::create_dir_all(dir.join("offline_out")).unwrap();
    let run = |fields: &str| run_pair([&dir, &dir], fields).1;
    let said = run(&ub("ECDH_OPRF_UB_PSI_2PC_OFFLINE", 0));
    assert!(
        said.contains("offline_psi.csv.server"),
        "the server says where its cache is: {said}"
    );
    assert!(dir.join("offline_out/offline_psi.csv").exists());
    assert!(dir.join("offline_out/offline_psi.csv.server").exists());
    run(&ub("ECDH_OPRF_UB_PSI_2PC_ONLINE", 0));
    let got = sorted(out_ids(&dir.join("alice_out.csv")));
    assert_eq!(got, expected(&dir, "alice", &[&sets[1].1]));
    assert!(
        !dir.join("bob_out.csv").exists(),
        "the server learns nothing"
    );
    // Shuffle online from the same files: bob, the receiver, is the server and learns.
    std::fs::remove_file(dir.join("alice_out.csv")).unwrap();
    run(&ub("ECDH_OPRF_UB_PSI_2PC_SHUFFLE_ONLINE", 1));
    let got = sorted(out_ids(&dir.join("bob_out.csv")));
    assert_eq!(got, expected(&dir, "bob", &[&sets[0].1]));
    assert!(
        !dir.join("alice_out.csv").exists(),
        "the client gets no rows"
    );
}

#[test]
fn bc22_exits_2_naming_rr22() {
    let dir = tmp("legacy", "bc22");
    tables(&dir);
    let ports = [("alice", free_port()), ("bob", free_port())];
    for t in [r#""BC22_PSI_2PC""#, "3"] {
        let out = Command::new(BIN)
            .args(["run", "--quiet", "--config"])
            .arg(config(
                &dir,
                "alice",
                &format!(r#""psi_type": {t}"#),
                &ports,
            ))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("legacy_psi_config.psi_type")
                && err.contains("withdrawn")
                && err.contains("RR22_FAST_PSI_2PC"),
            "{err}"
        );
    }
    // An n-party type with two parties is a config error naming the field.
    let out = Command::new(BIN)
        .args(["run", "--quiet", "--config"])
        .arg(config(
            &dir,
            "alice",
            r#""psi_type": "ECDH_PSI_NPC""#,
            &ports,
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("link_config.parties") && err.contains("at least 3"),
        "{err}"
    );
}
