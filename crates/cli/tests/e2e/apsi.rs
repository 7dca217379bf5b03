//! Labeled PSI end to end: real `blindjoin run --config` processes on 127.0.0.1 with
//! SecretFlow's `apsi_*` example configs (paths and ports changed): sender setup with
//! `save_db_only`, sender online from the saved DB, receiver; labeled and unlabeled; bucket
//! mode; the result checked against a plaintext lookup.

use crate::support::{BIN, free_port, tmp, wait};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// SecretFlow's `100-1-300.json` preset (N = 2048: fast).
const PRESET: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../he/tests/data/100-1-300.json"
);

fn start(dir: &Path, config: &str) -> Child {
    Command::new(BIN)
        .current_dir(dir)
        .args(["run", "--quiet", "--config"])
        .arg(dir.join(config))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn link(ports: (u16, u16), me: &str) -> String {
    format!(
        r#""link_config": {{"parties": [{{"id": "sender", "host": "127.0.0.1:{}"}},
    {{"id": "receiver", "host": "127.0.0.1:{}"}}]}}, "self_link_party": "{me}""#,
        ports.0, ports.1
    )
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// db.csv (ids 0..500, labels unless `unlabeled`, one key with a comma and quotes), query.csv
/// (hits, misses, a duplicate), params.json.
fn tables(dir: &Path, labeled: bool) -> HashMap<String, String> {
    let mut db = HashMap::new();
    let mut s = String::from(if labeled { "key,value\n" } else { "key\n" });
    for i in 0..500 {
        let v = format!("score-{}", i * 7 % 101);
        if labeled {
            s += &format!("id{i},{v}\n");
        } else {
            s += &format!("id{i}\n");
        }
        db.insert(format!("id{i}"), if labeled { v } else { String::new() });
    }
    if labeled {
        s += "\"x,\"\"y\"\"\",\"l,1\"\n";
        db.insert("x,\"y\"".into(), "l,1".into());
    }
    write(dir, "db.csv", &s);
    write(
        dir,
        "query.csv",
        "key\nid3\nnope\nid499\n\"x,\"\"y\"\"\"\nid3\nid250\nother\n",
    );
    std::fs::copy(PRESET, dir.join("params.json")).unwrap();
    db
}

fn check(dir: &Path, db: &HashMap<String, String>) {
    check_file(dir, db, "result.csv");
}

/// The receiver's output `name` against a plaintext lookup of the query in `db`.
fn check_file(dir: &Path, db: &HashMap<String, String>, name: &str) {
    let got = std::fs::read_to_string(dir.join(name)).unwrap();
    let mut want = String::from("key,value\n");
    for k in ["id3", "nope", "id499", "x,\"y\"", "id3", "id250", "other"] {
        if let Some(v) = db.get(k) {
            let cell = |s: &str| {
                if s.contains(',') || s.contains('"') {
                    format!("\"{}\"", s.replace('"', "\"\""))
                } else {
                    s.to_string()
                }
            };
            want += &format!("{},{}\n", cell(k), cell(v));
        }
    }
    assert_eq!(got, want);
}

const RECEIVER: &str = r#""threads": 1, "query_file": "query.csv", "output_file": "result.csv",
    "params_file": "params.json", "log_level": "info", "query_batch_size": 1"#;

fn setup_online_receiver(labeled: bool) {
    let dir = tmp("apsi", if labeled { "labeled" } else { "unlabeled" });
    let db = tables(&dir, labeled);
    write(
        &dir,
        "setup.json",
        r#"{"apsi_sender_config": {"source_file": "db.csv", "params_file": "params.json",
        "sdb_out_file": "sdb", "save_db_only": true}}"#,
    );
    let (ok, err) = wait(start(&dir, "setup.json"), LIMIT);
    assert!(ok, "{err}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("sdb"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let p = (free_port(), free_port());
    write(
        &dir,
        "online.json",
        &format!(
            r#"{{"apsi_sender_config": {{"threads": 1, "db_file": "sdb", "log_level": "info"}},
            {}}}"#,
            link(p, "sender")
        ),
    );
    write(
        &dir,
        "receiver.json",
        &format!(
            r#"{{"apsi_receiver_config": {{{RECEIVER}}}, {}}}"#,
            link(p, "receiver")
        ),
    );
    let s = start(&dir, "online.json");
    let r = start(&dir, "receiver.json");
    let (sok, serr) = wait(s, LIMIT);
    let (rok, rerr) = wait(r, LIMIT);
    assert!(sok && rok, "sender: {serr}\nreceiver: {rerr}");
    check(&dir, &db);
}

#[test]
fn setup_then_online_then_receiver_labeled() {
    setup_online_receiver(true);
}

#[test]
fn setup_then_online_then_receiver_unlabeled() {
    setup_online_receiver(false);
}

#[test]
fn bucket_mode_and_sender_full() {
    let dir = tmp("apsi", "bucket");
    let db = tables(&dir, true);
    std::fs::create_dir_all(dir.join("buckets")).unwrap();
    let bucket = r#""experimental_enable_bucketize": true, "experimental_bucket_cnt": 16"#;
    write(
        &dir,
        "setup.json",
        &format!(
            r#"{{"apsi_sender_config": {{"threads": 1, "log_level": "info",
        "source_file": "db.csv", "params_file": "params.json", "save_db_only": true, {bucket},
        "experimental_bucket_folder": "buckets", "experimental_db_generating_process_num": 16,
        "experimental_bucket_group_cnt": 512}}}}"#
        ),
    );
    let (ok, err) = wait(start(&dir, "setup.json"), LIMIT);
    assert!(ok, "{err}");
    let p = (free_port(), free_port());
    write(
        &dir,
        "online.json",
        &format!(
            r#"{{"apsi_sender_config": {{{bucket}, "experimental_bucket_folder": "buckets"}}, {}}}"#,
            link(p, "sender")
        ),
    );
    write(
        &dir,
        "receiver.json",
        &format!(
            r#"{{"apsi_receiver_config": {{{RECEIVER}, {bucket}}}, {}}}"#,
            link(p, "receiver")
        ),
    );
    let s = start(&dir, "online.json");
    let r = start(&dir, "receiver.json");
    let (sok, serr) = wait(s, LIMIT);
    let (rok, rerr) = wait(r, LIMIT);
    assert!(sok && rok, "sender: {serr}\nreceiver: {rerr}");
    check(&dir, &db);
    // Sender full: setup then serve, in one run.
    std::fs::remove_file(dir.join("result.csv")).unwrap();
    let p = (free_port(), free_port());
    write(
        &dir,
        "full.json",
        &format!(
            r#"{{"apsi_sender_config": {{"source_file": "db.csv", "params_file": "params.json"}},
            {}}}"#,
            link(p, "sender")
        ),
    );
    write(
        &dir,
        "receiver.json",
        &format!(
            r#"{{"apsi_receiver_config": {{{RECEIVER}}}, {}}}"#,
            link(p, "receiver")
        ),
    );
    let s = start(&dir, "full.json");
    let r = start(&dir, "receiver.json");
    let (sok, serr) = wait(s, LIMIT);
    let (rok, rerr) = wait(r, LIMIT);
    assert!(sok && rok, "sender: {serr}\nreceiver: {rerr}");
    check(&dir, &db);
}

#[test]
fn a_damaged_db_file_is_refused_naming_it() {
    let dir = tmp("apsi", "damaged");
    write(&dir, "sdb", "not a DB\n");
    let p = (free_port(), free_port());
    write(
        &dir,
        "online.json",
        &format!(
            r#"{{"apsi_sender_config": {{"db_file": "sdb"}}, {}}}"#,
            link(p, "sender")
        ),
    );
    let out = Command::new(BIN)
        .current_dir(&dir)
        .args(["run", "--quiet", "--config", "online.json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("sdb") && err.contains("sender DB"), "{err}");
}

/// `blindjoin serve` with the sender's online config: one sender process, its saved DB loaded
/// once, answers three unchanged `blindjoin run` receivers (ids sorting before and after
/// "sender"), two at a time; every result against the plaintext lookup.
#[test]
fn serve_answers_receivers_from_the_saved_db() {
    let dir = tmp("apsi", "serve");
    let db = tables(&dir, true);
    write(
        &dir,
        "setup.json",
        r#"{"apsi_sender_config": {"source_file": "db.csv", "params_file": "params.json",
        "sdb_out_file": "sdb", "save_db_only": true}}"#,
    );
    let (ok, err) = wait(start(&dir, "setup.json"), LIMIT);
    assert!(ok, "{err}");
    let port = free_port();
    write(
        &dir,
        "online.json",
        &format!(
            r#"{{"apsi_sender_config": {{"db_file": "sdb"}}, {}}}"#,
            link((port, free_port()), "sender")
        ),
    );
    let server = Command::new(BIN)
        .current_dir(&dir)
        .args([
            "serve",
            "--config",
            "online.json",
            "--max-sessions",
            "2",
            "--sessions",
            "3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let names = ["receiver", "r2", "zed"];
    let receivers: Vec<Child> = names
        .iter()
        .map(|id| {
            let cfg = format!(
                r#"{{"apsi_receiver_config": {{"query_file": "query.csv",
                "output_file": "result-{id}.csv", "params_file": "params.json"}},
                "link_config": {{"parties": [{{"id": "sender", "host": "127.0.0.1:{port}"}},
                {{"id": "{id}", "host": "127.0.0.1:0"}}]}}, "self_link_party": "{id}"}}"#
            );
            write(&dir, &format!("{id}.json"), &cfg);
            start(&dir, &format!("{id}.json"))
        })
        .collect();
    for (id, r) in names.iter().zip(receivers) {
        let (ok, err) = wait(r, LIMIT);
        assert!(ok, "{id}: {err}");
        check_file(&dir, &db, &format!("result-{id}.csv"));
    }
    let out = server.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(summary["sessions_ok"], 3, "{stderr}");
    assert!(stderr.contains("serving labeled PSI"), "{stderr}");
}
