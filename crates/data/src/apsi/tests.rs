//! Labeled PSI through `Plan::from_config` and `Plan::run`, both parties in threads over
//! 127.0.0.1, against a plaintext lookup; the 100-1-300 preset (N = 2048) keeps it fast.

use crate::apsi::source::tests::tempdir;
use crate::plan::{Outcome, Plan};
use crate::{Cancel, NoProgress};
use std::collections::HashMap;
use std::path::Path;

/// SecretFlow's `100-1-300.json`.
const PRESET: &str = r#"{
    "table_params": {"hash_func_count": 1, "table_size": 256, "max_items_per_bin": 6},
    "item_params": {"felts_per_item": 8},
    "query_params": {"ps_low_degree": 0, "query_powers": [1, 2, 3, 4, 5, 6]},
    "seal_params": {"plain_modulus": 65537, "poly_modulus_degree": 2048, "coeff_modulus_bits": [48]}
}"#;

fn port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20000 + (std::process::id() % 500) as u16 * 20;
    for _ in 0..2000 {
        let p = base + NEXT.fetch_add(1, Ordering::Relaxed) % 2000;
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
    panic!("no free port");
}

fn link(ports: (u16, u16), me: &str) -> String {
    format!(
        r#""link_config": {{"parties": [{{"id": "sender", "host": "127.0.0.1:{}"}},
        {{"id": "receiver", "host": "127.0.0.1:{}"}}]}}, "self_link_party": "{me}""#,
        ports.0, ports.1
    )
}

fn plan(dir: &Path, text: &str) -> Plan {
    Plan::from_config(text, "test.json", dir).unwrap()
}

fn run(p: &Plan) -> Result<Outcome, crate::RunError> {
    p.run(&NoProgress, &Cancel::new())
}

type Outcomes = (
    Result<Outcome, crate::RunError>,
    Result<Outcome, crate::RunError>,
);

/// Runs a sender with `sender_body` and a receiver with `receiver_body` together.
fn pair(dir: &Path, sender_body: &str, receiver_body: &str) -> Outcomes {
    pair_with(dir, sender_body, "", receiver_body)
}

/// [`pair`] with `sender_top` (`"blindjoin": {...}, `) at the top of the sender's config.
fn pair_with(dir: &Path, sender_body: &str, sender_top: &str, receiver_body: &str) -> Outcomes {
    let ports = (port(), port());
    let s = plan(
        dir,
        &format!(
            "{{\"apsi_sender_config\": {{{sender_body}}}, {sender_top}{}}}",
            link(ports, "sender")
        ),
    );
    let r = plan(
        dir,
        &format!(
            "{{\"apsi_receiver_config\": {{{receiver_body}}}, {}}}",
            link(ports, "receiver")
        ),
    );
    std::thread::scope(|sc| {
        let hs = sc.spawn(|| run(&s));
        let hr = sc.spawn(|| run(&r));
        (hs.join().unwrap(), hr.join().unwrap())
    })
}

fn csv_cell(v: &str) -> String {
    let mut out = Vec::new();
    crate::table::csv::write_field(&mut out, v.as_bytes());
    String::from_utf8(out).unwrap()
}

/// Writes the source (labels when `labels`), the query and the preset.
fn setup(dir: &Path, db: &[(String, String)], labels: bool, query: &[String]) {
    let mut s = String::from(if labels { "key,value\n" } else { "key\n" });
    for (k, v) in db {
        if labels {
            s += &format!("{},{}\n", csv_cell(k), csv_cell(v));
        } else {
            s += &format!("{}\n", csv_cell(k));
        }
    }
    std::fs::write(dir.join("db.csv"), s).unwrap();
    let mut q = String::from("key\n");
    for k in query {
        q += &format!("{}\n", csv_cell(k));
    }
    std::fs::write(dir.join("query.csv"), q).unwrap();
    std::fs::write(dir.join("params.json"), PRESET).unwrap();
}

/// The result file's rows.
fn result(dir: &Path) -> Vec<(String, String)> {
    let bytes = std::fs::read(dir.join("out.csv")).unwrap();
    let mut r = crate::table::csv::CsvReader::new(&bytes, Path::new("out.csv")).unwrap();
    assert_eq!(r.header(), ["key", "value"]);
    let mut f = Vec::new();
    let mut out = Vec::new();
    while r.next_record(&mut f).unwrap().is_some() {
        let cell = |i: usize| {
            String::from_utf8(crate::table::csv::field_value(&bytes, &f[i]).into_owned()).unwrap()
        };
        out.push((cell(0), cell(1)));
    }
    out
}

/// The plaintext answer: each query row found, in query order, with its label.
fn expected(db: &[(String, String)], labels: bool, query: &[String]) -> Vec<(String, String)> {
    let m: HashMap<&str, &str> = db.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    query
        .iter()
        .filter_map(|k| {
            m.get(k.as_str()).map(|v| {
                (
                    k.clone(),
                    if labels {
                        (*v).to_string()
                    } else {
                        String::new()
                    },
                )
            })
        })
        .collect()
}

const SENDER_FULL: &str = r#""source_file": "db.csv", "params_file": "params.json""#;
/// One key per query: the preset's single hash function puts two keys in one bin with
/// probability 1/256, which one query cannot hold (the all-in-one default is tested with a
/// table too small on purpose below).
const RECEIVER: &str = r#""query_file": "query.csv", "output_file": "out.csv",
    "params_file": "params.json", "query_batch_size": 1"#;

fn check(db: &[(String, String)], labels: bool, query: &[String]) {
    let dir = tempdir();
    setup(&dir, db, labels, query);
    let (s, r) = pair(&dir, SENDER_FULL, RECEIVER);
    s.unwrap();
    r.unwrap();
    assert_eq!(result(&dir), expected(db, labels, query));
}

fn db_of(n: usize, label: impl Fn(usize) -> String) -> Vec<(String, String)> {
    (0..n).map(|i| (format!("id{i}"), label(i))).collect()
}

#[test]
fn labeled_mixed_query_with_duplicates_commas_and_quotes() {
    let mut db = db_of(300, |i| format!("label {i}"));
    db.push(("a,\"b\"".into(), "x,\"y\"".into()));
    let query: Vec<String> = ["id3", "nope", "a,\"b\"", "id299", "id3", "zz"]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
    check(&db, true, &query);
}

#[test]
fn unlabeled_and_no_match_and_empty_query() {
    let db = db_of(50, |_| String::new());
    check(&db, false, &["id1".into(), "id2".into(), "x".into()]);
    check(&db, false, &["x".into(), "y".into()]);
    check(&db, false, &[]);
}

#[test]
fn all_match_one_row_db_and_label_sizes_1_and_300() {
    let db = db_of(40, |i| format!("{}", i % 10));
    let all: Vec<String> = db.iter().map(|(k, _)| k.clone()).collect();
    check(&db, true, &all);
    check(
        &[("only".into(), "v".into())],
        true,
        &["only".into(), "other".into()],
    );
    let long = db_of(20, |i| format!("{i:0>300}"));
    check(&long, true, &["id0".into(), "id19".into(), "id20".into()]);
}

#[test]
fn save_db_only_then_online_from_the_saved_db() {
    let dir = tempdir();
    let db = db_of(100, |i| format!("v{i}"));
    let query: Vec<String> = vec!["id5".into(), "id99".into(), "no".into()];
    setup(&dir, &db, true, &query);
    let setup_plan = plan(
        &dir,
        r#"{"apsi_sender_config": {"source_file": "db.csv", "params_file": "params.json",
            "sdb_out_file": "sdb", "save_db_only": true}}"#,
    );
    run(&setup_plan).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("sdb"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (s, r) = pair(&dir, r#""db_file": "sdb""#, RECEIVER);
    s.unwrap();
    r.unwrap();
    assert_eq!(result(&dir), expected(&db, true, &query));
    // Without params_file the receiver takes the sender's.
    let (s, r) = pair(
        &dir,
        r#""db_file": "sdb""#,
        r#""query_file": "query.csv", "output_file": "out.csv", "query_batch_size": 1"#,
    );
    s.unwrap();
    r.unwrap();
    assert_eq!(result(&dir), expected(&db, true, &query));
    // A damaged DB is refused naming the file.
    let mut bytes = std::fs::read(dir.join("sdb")).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    write_private(&dir.join("bad.sdb"), &bytes);
    write_private(&dir.join("foreign.sdb"), b"key,value\na,b\n");
    // A DB of an older format version (the version field follows the 8 magic bytes).
    let mut old = std::fs::read(dir.join("sdb")).unwrap();
    old[8..10].copy_from_slice(&1u16.to_le_bytes());
    write_private(&dir.join("old.sdb"), &old);
    for name in ["bad.sdb", "foreign.sdb", "missing.sdb", "old.sdb"] {
        let p = plan(
            &dir,
            &format!(
                "{{\"apsi_sender_config\": {{\"db_file\": \"{name}\"}}, {}}}",
                link((port(), port()), "sender")
            ),
        );
        let e = run(&p).err().unwrap();
        assert!(e.to_string().contains(name), "{e}");
        assert_eq!(e.fault(), crate::Fault::Input, "{e}");
        if name == "old.sdb" {
            assert!(e.to_string().contains("re-run setup"), "{e}");
        }
    }
}

/// `bytes` at `path`, mode 0600 (a sender DB must be private).
fn write_private(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// The count of OPRF evaluations recorded beside the DB file at `db`.
fn evaluations(db: &Path) -> u64 {
    let text = std::fs::read_to_string(crate::ub::budget::count_path(db)).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("oprf_evaluations "))
        .unwrap()
        .parse()
        .unwrap()
}

const CAP_5: &str = r#""blindjoin": {"max_query_items": 5}, "#;

/// The DB's key answers at most `max_query_items` OPRF evaluations over all its sessions: the
/// plan that would pass the cap is refused before anything is evaluated (a peer fault on the
/// sender, the same reason on the receiver) and not charged; a missing count file is refused,
/// an empty one starts the count deliberately.
#[test]
fn a_saved_db_answers_at_most_max_query_items_over_its_sessions() {
    let dir = tempdir();
    let db = db_of(50, |i| format!("v{i}"));
    let query: Vec<String> = vec!["id1".into(), "id2".into(), "no".into(), "id1".into()];
    setup(&dir, &db, true, &query);
    let setup_plan = plan(
        &dir,
        r#"{"apsi_sender_config": {"source_file": "db.csv", "params_file": "params.json",
            "sdb_out_file": "sdb", "save_db_only": true}}"#,
    );
    run(&setup_plan).unwrap();
    let sdb = dir.join("sdb");
    assert_eq!(evaluations(&sdb), 0, "saving a DB starts its key's count");
    // Three unique keys: 3 of 5.
    let (s, r) = pair_with(&dir, r#""db_file": "sdb""#, CAP_5, RECEIVER);
    s.unwrap();
    r.unwrap();
    assert_eq!(result(&dir), expected(&db, true, &query));
    assert_eq!(evaluations(&sdb), 3);
    // Three more would make 6.
    let (s, r) = pair_with(&dir, r#""db_file": "sdb""#, CAP_5, RECEIVER);
    let e = s.err().unwrap();
    assert_eq!(e.fault(), crate::Fault::Peer, "{e}");
    let m = e.to_string();
    assert!(
        m.contains("refusing the receiver's plan of 3 OPRF evaluations")
            && m.contains("already evaluated 3")
            && m.contains("blindjoin.max_query_items allows 5"),
        "{m}"
    );
    let e = r.err().unwrap().to_string();
    assert!(
        e.contains("refusing the receiver's plan") && e.contains("max_query_items"),
        "{e}"
    );
    assert_eq!(evaluations(&sdb), 3, "a refused plan is not charged");
    // Two fit.
    std::fs::write(dir.join("query.csv"), "key\nid7\nzz\n").unwrap();
    let (s, r) = pair_with(&dir, r#""db_file": "sdb""#, CAP_5, RECEIVER);
    s.unwrap();
    r.unwrap();
    assert_eq!(evaluations(&sdb), 5);
    // Deleting the count file does not reset the budget.
    let count = crate::ub::budget::count_path(&sdb);
    std::fs::remove_file(&count).unwrap();
    let (s, r) = pair(&dir, r#""db_file": "sdb""#, RECEIVER);
    let e = s.err().unwrap();
    assert_eq!(e.fault(), crate::Fault::Input, "{e}");
    assert!(
        e.to_string().contains("missing") && e.to_string().contains("install -m 600"),
        "{e}"
    );
    assert!(r.is_err());
    // An empty one is a deliberate new start.
    std::fs::File::create(&count).unwrap();
    let (s, r) = pair_with(&dir, r#""db_file": "sdb""#, CAP_5, RECEIVER);
    s.unwrap();
    r.unwrap();
    assert_eq!(evaluations(&sdb), 2);
}

/// A DB built and served without being saved has a fresh key: only its own session counts,
/// and a plan past the cap is still refused.
#[test]
fn an_unsaved_db_caps_its_one_session() {
    let dir = tempdir();
    let db = db_of(20, |i| format!("v{i}"));
    let query: Vec<String> = (0..6).map(|i| format!("id{i}")).collect();
    setup(&dir, &db, true, &query);
    let (s, r) = pair_with(&dir, SENDER_FULL, CAP_5, RECEIVER);
    assert_eq!(s.err().unwrap().fault(), crate::Fault::Peer);
    assert!(r.err().unwrap().to_string().contains("refusing"));
    std::fs::write(dir.join("query.csv"), "key\nid1\nid2\nid3\nid4\nid5\n").unwrap();
    let (s, r) = pair_with(&dir, SENDER_FULL, CAP_5, RECEIVER);
    s.unwrap();
    r.unwrap();
}

/// Each bucket's DB has its own key and count; a plan past a bucket's cap is refused before
/// that bucket's first query.
#[test]
fn bucket_dbs_keep_a_count_each() {
    let dir = tempdir();
    let db = db_of(60, |i| format!("b{i}"));
    let query: Vec<String> = (0..12).map(|i| format!("id{i}")).collect();
    setup(&dir, &db, true, &query);
    let bucket = r#""experimental_enable_bucketize": true, "experimental_bucket_cnt": 2"#;
    std::fs::create_dir_all(dir.join("buckets")).unwrap();
    let setup_plan = plan(
        &dir,
        &format!(
            r#"{{"apsi_sender_config": {{"source_file": "db.csv", "params_file": "params.json",
            "save_db_only": true, {bucket}, "experimental_bucket_folder": "buckets"}}}}"#
        ),
    );
    run(&setup_plan).unwrap();
    let sender = format!(r#"{bucket}, "experimental_bucket_folder": "buckets""#);
    let receiver = format!(r#"{RECEIVER}, {bucket}"#);
    let (s, r) = pair(&dir, &sender, &receiver);
    s.unwrap();
    r.unwrap();
    let per_bucket: Vec<u64> = (0..2)
        .map(|b| evaluations(&crate::apsi::db_file::bucket_path(&dir.join("buckets"), b)))
        .collect();
    assert_eq!(per_bucket.iter().sum::<u64>(), 12, "{per_bucket:?}");
    // With a cap below the larger bucket's share, the next session is refused.
    let cap = per_bucket.iter().max().unwrap() + 1;
    let top = format!(r#""blindjoin": {{"max_query_items": {cap}}}, "#);
    let (s, _) = pair_with(&dir, &sender, &top, &receiver);
    let e = s.err().unwrap();
    assert_eq!(e.fault(), crate::Fault::Peer, "{e}");
}

/// A DB file readable by group or others is refused, as key files are.
#[cfg(unix)]
#[test]
fn a_db_file_readable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let db = db_of(10, |i| format!("v{i}"));
    setup(&dir, &db, true, &["id1".to_string()]);
    let setup_plan = plan(
        &dir,
        r#"{"apsi_sender_config": {"source_file": "db.csv", "params_file": "params.json",
            "sdb_out_file": "sdb", "save_db_only": true}}"#,
    );
    run(&setup_plan).unwrap();
    std::fs::set_permissions(dir.join("sdb"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let p = plan(
        &dir,
        &format!(
            "{{\"apsi_sender_config\": {{\"db_file\": \"sdb\"}}, {}}}",
            link((port(), port()), "sender")
        ),
    );
    let e = run(&p).err().unwrap();
    assert_eq!(e.fault(), crate::Fault::Input, "{e}");
    let want = format!("chmod 600 {}", dir.join("sdb").display());
    assert!(e.to_string().contains(&want), "{e}");
}

#[test]
fn bucket_mode_setup_then_online() {
    let dir = tempdir();
    let db = db_of(200, |i| format!("b{i}"));
    let query: Vec<String> = (0..30).map(|i| format!("id{}", i * 9)).collect();
    setup(&dir, &db, true, &query);
    let bucket = r#""experimental_enable_bucketize": true, "experimental_bucket_cnt": 5"#;
    let setup_plan = plan(
        &dir,
        &format!(
            r#"{{"apsi_sender_config": {{"source_file": "db.csv", "params_file": "params.json",
            "save_db_only": true, {bucket}, "experimental_bucket_folder": "buckets",
            "experimental_db_generating_process_num": 16, "experimental_bucket_group_cnt": 512}}}}"#
        ),
    );
    std::fs::create_dir_all(dir.join("buckets")).unwrap();
    run(&setup_plan).unwrap();
    let (s, r) = pair(
        &dir,
        &format!(r#"{bucket}, "experimental_bucket_folder": "buckets""#),
        &format!(r#"{RECEIVER}, {bucket}"#),
    );
    s.unwrap();
    r.unwrap();
    assert_eq!(result(&dir), expected(&db, true, &query));
    // Bucket counts that differ are a config error.
    let (s, r) = pair(
        &dir,
        &format!(r#"{bucket}, "experimental_bucket_folder": "buckets""#),
        &format!(
            r#"{RECEIVER}, "experimental_enable_bucketize": true, "experimental_bucket_cnt": 6"#
        ),
    );
    assert_eq!(s.err().unwrap().fault(), crate::Fault::Config);
    assert!(r.is_err());
}

#[test]
fn config_refusals_name_the_field() {
    let dir = tempdir();
    let l = link((1, 2), "sender");
    let cases = [
        (
            format!(r#"{{"apsi_sender_config": {{"source_file": "db.csv"}}, {l}}}"#),
            "params_file",
        ),
        (
            format!(r#"{{"apsi_sender_config": {{"db_file": "x", "bogus": 1}}, {l}}}"#),
            "bogus",
        ),
        (
            r#"{"apsi_sender_config": {"source_file": "a", "params_file": "p", "save_db_only": true}}"#
                .to_string(),
            "sdb_out_file",
        ),
        (
            format!(r#"{{"apsi_sender_config": {{"db_file": "x", "nonce_byte_count": 17}}, {l}}}"#),
            "nonce_byte_count",
        ),
        (
            format!(r#"{{"apsi_sender_config": {{"db_file": "x", "log_level": "loud"}}, {l}}}"#),
            "log_level",
        ),
        (
            format!(
                r#"{{"apsi_sender_config": {{"db_file": "x", "experimental_enable_bucketize": true}}, {l}}}"#
            ),
            "experimental_bucket_cnt",
        ),
        (
            r#"{"apsi_receiver_config": {"query_file": "q.csv"}}"#.to_string(),
            "output_file",
        ),
        (
            format!(
                r#"{{"apsi_sender_config": {{"db_file": "x"}}, "blindjoin": {{"max_query_items": 0}}, {l}}}"#
            ),
            "blindjoin.max_query_items",
        ),
        (
            format!(
                r#"{{"apsi_receiver_config": {{"query_file": "q", "output_file": "o"}},
                "blindjoin": {{"max_query_items": 9}}, {}}}"#,
                link((1, 2), "receiver")
            ),
            "blindjoin.max_query_items",
        ),
        (
            r#"{"apsi_receiver_config": {"query_file": "q.csv", "output_file": "o.csv"}}"#
                .to_string(),
            "link_config",
        ),
    ];
    for (text, field) in cases {
        let e = Plan::from_config(&text, "t.json", &dir)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
    // SecretFlow's own example configs parse unchanged.
    let ex = r#"{"apsi_sender_config": {"threads": 1, "db_file": "/tmp/sdb", "log_level": "info"},
      "link_config": {"parties": [{"id": "sender", "host": "127.0.0.1:5300"},
      {"id": "receiver", "host": "127.0.0.1:5400"}]}, "self_link_party": "sender"}"#;
    assert!(matches!(
        Plan::from_config(ex, "t", &dir).unwrap(),
        Plan::Apsi(_)
    ));
}

#[test]
fn a_label_the_preset_cannot_hold_and_a_too_small_table() {
    let dir = tempdir();
    // A label over APSI's 1024-byte bound names the source line.
    let db = vec![("k".to_string(), "x".repeat(1025))];
    setup(&dir, &db, true, &["k".into()]);
    let p = plan(
        &dir,
        r#"{"apsi_sender_config": {"source_file": "db.csv", "params_file": "params.json",
            "sdb_out_file": "sdb", "save_db_only": true}}"#,
    );
    let e = run(&p).err().unwrap();
    assert!(e.to_string().contains("line 2"), "{e}");
    // More unique query keys than the table's 256 bins: a config error saying what to do.
    let db = db_of(10, |i| i.to_string());
    let query: Vec<String> = (0..300).map(|i| format!("q{i}")).collect();
    setup(&dir, &db, true, &query);
    let (_, r) = pair(
        &dir,
        SENDER_FULL,
        r#""query_file": "query.csv", "output_file": "out.csv""#,
    );
    let e = r.err().unwrap();
    assert_eq!(e.fault(), crate::Fault::Config, "{e}");
    assert!(e.to_string().contains("table_size"), "{e}");
}
