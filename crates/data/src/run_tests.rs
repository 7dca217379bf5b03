//! Whole runs of both parties on the in-memory link, checked against a join computed in plain
//! code: every join type, duplicate keys, awkward CSV, empty and one-row sides, in memory and
//! spilled to disk (which must write the same bytes).

use crate::csv::{CsvReader, field_value};
use crate::join::JoinType;
use crate::spec::{JoinSpec, Parties, RunSpec, SpillMode};
use crate::{prepare, run_on_link};
use blindjoin_link::mem_pair;
use blindjoin_protocols::{NoProgress, Protocol, Role};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A table: row `i` has key `keys[i]` and payload `"{tag}{i}"`.
struct Side {
    tag: &'static str,
    keys: Vec<String>,
}

impl Side {
    fn csv(&self) -> String {
        let mut s = "payload,id\n".to_string();
        for (i, k) in self.keys.iter().enumerate() {
            s.push_str(&format!("{}{i},{}\n", self.tag, quote(k)));
        }
        s
    }
}

fn quote(k: &str) -> String {
    if k.contains([',', '"', '\n']) {
        format!("\"{}\"", k.replace('"', "\"\""))
    } else {
        k.to_string()
    }
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bj-runs-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn spec(
    d: &Path,
    role: Role,
    join: JoinType,
    align: bool,
    spill: SpillMode,
    protocol: Protocol,
) -> RunSpec {
    let me = if role == Role::Receiver { "r" } else { "s" };
    RunSpec {
        parties: Parties {
            self_id: me.into(),
            self_addr: String::new(),
            peer_id: String::new(),
            peer_addr: String::new(),
        },
        protocol,
        curve: (protocol == Protocol::Ecdh).then_some(blindjoin_crypto::Curve::Curve25519),
        variant: if protocol == Protocol::Rr22 {
            "fast".into()
        } else {
            String::new()
        },
        bucket_size: 40,
        role,
        broadcast_result: true,
        input: d.join(format!("{me}.csv")),
        output: Some(d.join(format!("{me}.out"))),
        keys: vec!["id".into()],
        align,
        report: Some(d.join(format!("{me}.json"))),
        batch_size: 4096,
        secret_key_path: None,
        connect_timeout: Duration::from_secs(10),
        recv_timeout: Duration::from_secs(60),
        tls: None,
        link_shape: None,
        join: JoinSpec {
            join,
            ..JoinSpec::default()
        },
        spill,
        spill_dir: Some(d.to_path_buf()),
        recovery: None,
        warnings: Vec::new(),
    }
}

/// Runs both parties; returns the two output files' bytes (receiver, sender).
fn run_both(
    name: &str,
    left: &Side,
    right: &Side,
    join: JoinType,
    align: bool,
    spill: SpillMode,
    protocol: Protocol,
) -> (Vec<u8>, Vec<u8>) {
    let d = dir(name);
    std::fs::write(d.join("r.csv"), left.csv()).unwrap();
    std::fs::write(d.join("s.csv"), right.csv()).unwrap();
    let (mut lr, mut ls) = mem_pair();
    let ss = spec(&d, Role::Sender, join, align, spill, protocol);
    let t = std::thread::spawn(move || {
        let p = prepare(&ss, &NoProgress).unwrap();
        run_on_link(&ss, p, &mut ls, &NoProgress, Instant::now()).unwrap();
    });
    let rs = spec(&d, Role::Receiver, join, align, spill, protocol);
    let p = prepare(&rs, &NoProgress).unwrap();
    run_on_link(&rs, p, &mut lr, &NoProgress, Instant::now()).unwrap();
    t.join().unwrap();
    let out = (
        std::fs::read(d.join("r.out")).unwrap(),
        std::fs::read(d.join("s.out")).unwrap(),
    );
    let leftovers: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "spill files left behind: {leftovers:?}"
    );
    out
}

/// An output file's rows as (payload, key), `None` for the null row.
fn rows_of(bytes: &[u8]) -> Vec<Option<(String, String)>> {
    let mut r = CsvReader::new(bytes, Path::new("out")).unwrap();
    assert_eq!(r.header(), ["payload", "id"]);
    let mut fields = Vec::new();
    let mut out = Vec::new();
    while r.next_record(&mut fields).unwrap().is_some() {
        let v: Vec<String> = fields
            .iter()
            .map(|f| String::from_utf8(field_value(bytes, f).into_owned()).unwrap())
            .collect();
        out.push(if v[0] == "NULL" {
            None
        } else {
            Some((v[0].clone(), v[1].clone()))
        });
    }
    out
}

type Pair = (Option<String>, Option<String>);

/// The SQL join of the two tables as (left payload, right payload) pairs.
fn reference(join: JoinType, left: &Side, right: &Side) -> Vec<Pair> {
    let mut out = Vec::new();
    let in_right = |k: &String| right.keys.contains(k);
    let in_left = |k: &String| left.keys.contains(k);
    if join != JoinType::Difference {
        for (i, k) in left.keys.iter().enumerate() {
            for (j, k2) in right.keys.iter().enumerate() {
                if k == k2 {
                    out.push((Some(format!("L{i}")), Some(format!("R{j}"))));
                }
            }
        }
    }
    if matches!(join, JoinType::Left | JoinType::Full | JoinType::Difference) {
        for (i, k) in left.keys.iter().enumerate() {
            if !in_right(k) {
                out.push((Some(format!("L{i}")), None));
            }
        }
    }
    if matches!(
        join,
        JoinType::Right | JoinType::Full | JoinType::Difference
    ) {
        for (j, k) in right.keys.iter().enumerate() {
            if !in_left(k) {
                out.push((None, Some(format!("R{j}"))));
            }
        }
    }
    out
}

fn sorted(mut v: Vec<Pair>) -> Vec<Pair> {
    v.sort();
    v
}

fn check_join(name: &str, left: &Side, right: &Side, protocol: Protocol) {
    for join in JoinType::ALL {
        let (lo, ro) = run_both(
            &format!("{name}-{join:?}-m"),
            left,
            right,
            join,
            true,
            SpillMode::Never,
            protocol,
        );
        let (l, r) = (rows_of(&lo), rows_of(&ro));
        assert_eq!(
            l.len(),
            r.len(),
            "{name} {join:?}: outputs differ in length"
        );
        let mut got = Vec::new();
        for (a, b) in l.iter().zip(&r) {
            if let (Some(a), Some(b)) = (a, b) {
                assert_eq!(a.1, b.1, "{name} {join:?}: a row pairs different keys");
            }
            got.push((a.clone().map(|x| x.0), b.clone().map(|x| x.0)));
        }
        assert_eq!(
            sorted(got),
            sorted(reference(join, left, right)),
            "{name} {join:?}"
        );
        // Spilled, with more and fewer shards than buckets: the same bytes.
        for shards in [1, 4, 64] {
            crate::spill::TEST_SHARDS.store(shards, Ordering::Relaxed);
            let disk = run_both(
                &format!("{name}-{join:?}-d{shards}"),
                left,
                right,
                join,
                true,
                SpillMode::Always,
                protocol,
            );
            assert!(
                disk == (lo.clone(), ro.clone()),
                "{name} {join:?} spilled/{shards}"
            );
        }
        // Unaligned: each party's kept rows, in input order.
        let (lu, ru) = run_both(
            &format!("{name}-{join:?}-u"),
            left,
            right,
            join,
            false,
            SpillMode::Always,
            protocol,
        );
        let want = reference(join, left, right);
        for (out, side, pick) in [(&lu, left, 0), (&ru, right, 1)] {
            let mut ids: Vec<usize> = want
                .iter()
                .filter_map(|p| if pick == 0 { p.0.clone() } else { p.1.clone() })
                .map(|s| s[1..].parse().unwrap())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let got: Vec<usize> = rows_of(out)
                .into_iter()
                .map(|r| r.unwrap().0[1..].parse().unwrap())
                .collect();
            assert_eq!(got, ids, "{name} {join:?} unaligned {}", side.tag);
        }
    }
}

fn rng(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

fn random_side(tag: &'static str, n: usize, range: u64, seed: &mut u64) -> Side {
    let odd = ["a,b", "q\"x", "line\nbreak", "é"];
    Side {
        tag,
        keys: (0..n)
            .map(|_| {
                let k = rng(seed) % range;
                match odd.get(k as usize) {
                    Some(o) => o.to_string(),
                    None => format!("k{k}"),
                }
            })
            .collect(),
    }
}

#[test]
fn joins_match_sql_in_memory_and_spilled() {
    let mut seed = 7;
    // Many-to-many keys: ~300 rows over 200 keys each side.
    let left = random_side("L", 300, 200, &mut seed);
    let right = random_side("R", 250, 200, &mut seed);
    check_join("dups", &left, &right, Protocol::Rr22);
}

#[test]
fn edge_cases_join_right() {
    let side = |tag, keys: &[&str]| Side {
        tag,
        keys: keys.iter().map(|s| s.to_string()).collect(),
    };
    for (name, l, r) in [
        ("empty", side("L", &[]), side("R", &["a", "b"])),
        ("both-empty", side("L", &[]), side("R", &[])),
        ("one", side("L", &["a"]), side("R", &["a"])),
        ("none", side("L", &["a", "b"]), side("R", &["c"])),
        ("full", side("L", &["a", "b", "b"]), side("R", &["b", "a"])),
        (
            "all-dups",
            side("L", &["z", "z", "z"]),
            side("R", &["z", "z"]),
        ),
    ] {
        check_join(name, &l, &r, Protocol::Rr22);
    }
}

#[test]
fn other_protocols_bucket_and_spill_too() {
    let mut seed = 11;
    let left = random_side("L", 120, 100, &mut seed);
    let right = random_side("R", 90, 100, &mut seed);
    for protocol in [Protocol::Ecdh, Protocol::Kkrt] {
        let (lo, ro) = run_both(
            &format!("{protocol}-m"),
            &left,
            &right,
            JoinType::Full,
            true,
            SpillMode::Never,
            protocol,
        );
        let disk = run_both(
            &format!("{protocol}-d"),
            &left,
            &right,
            JoinType::Full,
            true,
            SpillMode::Always,
            protocol,
        );
        assert!(disk == (lo.clone(), ro), "{protocol}");
        assert_eq!(
            rows_of(&lo).len(),
            reference(JoinType::Full, &left, &right).len()
        );
    }
}

#[test]
fn reports_count_keys_and_buckets() {
    let mut seed = 3;
    let left = random_side("L", 200, 150, &mut seed);
    let right = random_side("R", 100, 150, &mut seed);
    run_both(
        "report",
        &left,
        &right,
        JoinType::Inner,
        true,
        SpillMode::Always,
        Protocol::Rr22,
    );
    let d = dir("report");
    let r: crate::Report =
        serde_json::from_slice(&std::fs::read(d.join("r.json")).unwrap()).unwrap();
    let uniq = |s: &Side| {
        s.keys
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len() as i64
    };
    assert_eq!(r.original_count, 200);
    assert_eq!(r.original_key_count, uniq(&left));
    assert_eq!(r.peer_key_count, uniq(&right));
    assert_eq!(r.buckets, 8);
    assert_eq!(r.bucket_s.len(), 8);
    assert!(r.spilled);
    let shared: HashMap<&String, ()> = left
        .keys
        .iter()
        .filter(|k| right.keys.contains(k))
        .map(|k| (k, ()))
        .collect();
    assert_eq!(r.intersection_key_count, shared.len() as i64);
}
