//! Whole runs of both parties on the in-memory link, checked against a join computed in plain
//! code: every join type, duplicate keys, awkward CSV, empty and one-row sides, in memory and
//! spilled to disk (which must write the same bytes).

use crate::pipeline::join::JoinType;
use crate::spec::{JoinSpec, Parties, RunSpec, SpillMode};
use crate::table::csv::{CsvReader, field_value};
use crate::{prepare, run_on_link};
use blindjoin_link::mem_pair;
use blindjoin_protocols::{NoProgress, Protocol, ProtocolChoice, Role};
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
        workers: None,
        worker_ports: None,
        parties: Parties {
            self_id: me.into(),
            self_addr: String::new(),
            peer_id: String::new(),
            peer_addr: String::new(),
        },
        protocol: match protocol {
            Protocol::Ecdh => ProtocolChoice::Ecdh {
                curve: blindjoin_crypto::Curve::Curve25519,
            },
            Protocol::Rr22 => ProtocolChoice::Rr22 {
                mode: blindjoin_protocols::rr22::Rr22Mode::Fast,
            },
            _ => ProtocolChoice::Kkrt,
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
        silence_timeout: blindjoin_link::DEFAULT_SILENCE_TIMEOUT,
        tls: None,
        link_shape: None,
        join: JoinSpec {
            join,
            ..JoinSpec::default()
        },
        spill,
        spill_dir: Some(d.to_path_buf()),
        recovery: None,
        reveal: Default::default(),
        count_path: None,
        min_intersection: None,
        input_format: Default::default(),
        output_format: Default::default(),
        warnings: Vec::new(),
        peer_wire: None,
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
        // Spilled, and in memory, with more and fewer shards than buckets (a unit then merges
        // several shards): the same bytes.
        for shards in [1, 4, 64] {
            crate::pipeline::spill::TEST_SHARDS.store(shards, Ordering::Relaxed);
            for (mode, tag) in [(SpillMode::Always, "d"), (SpillMode::Never, "m")] {
                let out = run_both(
                    &format!("{name}-{join:?}-{tag}{shards}"),
                    left,
                    right,
                    join,
                    true,
                    mode,
                    protocol,
                );
                assert!(
                    out == (lo.clone(), ro.clone()),
                    "{name} {join:?} {mode:?}/{shards}"
                );
            }
        }
        // Unaligned, spilled and in memory: each party's kept rows, in input order.
        let (lu, ru) = run_both(
            &format!("{name}-{join:?}-u"),
            left,
            right,
            join,
            false,
            SpillMode::Always,
            protocol,
        );
        let in_memory = run_both(
            &format!("{name}-{join:?}-um"),
            left,
            right,
            join,
            false,
            SpillMode::Never,
            protocol,
        );
        assert!(
            in_memory == (lu.clone(), ru.clone()),
            "{name} {join:?} unaligned in memory"
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
    // Eight buckets: every bucket is padded to the same size, dummies included.
    assert!(r.peer_key_count >= uniq(&right));
    assert_eq!(
        r.peer_key_count as u64,
        8 * crate::bucket::padded_bucket_size(100, 8)
    );
    assert_eq!(r.buckets, 8);
    assert_eq!(r.bucket_s.len(), 8);
    assert_eq!(r.bucket_peak_rss_bytes.len(), 8);
    assert!(
        r.bucket_peak_rss_bytes
            .iter()
            .all(|&b| b > 0 && b <= r.peak_rss_bytes)
    );
    assert!(r.spilled);
    let shared: HashMap<&String, ()> = left
        .keys
        .iter()
        .filter(|k| right.keys.contains(k))
        .map(|k| (k, ()))
        .collect();
    assert_eq!(r.intersection_key_count, shared.len() as i64);
}

/// Runs both parties in a reveal mode (ECDH, inner join, broadcast); returns their reports and
/// outputs, and the receiver's `count_path` file.
fn run_reveal(
    name: &str,
    left: &Side,
    right: &Side,
    reveal: blindjoin_protocols::Reveal,
    spill: SpillMode,
) -> [(crate::Report, Option<Vec<u8>>, Option<String>); 2] {
    let d = dir(name);
    std::fs::write(d.join("r.csv"), left.csv()).unwrap();
    std::fs::write(d.join("s.csv"), right.csv()).unwrap();
    let spec_for = |role| {
        let mut s = spec(&d, role, JoinType::Inner, true, spill, Protocol::Ecdh);
        s.reveal = reveal;
        s.count_path = Some(d.join(format!("{role}.count")));
        s
    };
    let (mut lr, mut ls) = mem_pair();
    let ss = spec_for(Role::Sender);
    let t = std::thread::spawn(move || {
        let p = prepare(&ss, &NoProgress).unwrap();
        run_on_link(&ss, p, &mut ls, &NoProgress, Instant::now()).unwrap()
    });
    let rs = spec_for(Role::Receiver);
    let p = prepare(&rs, &NoProgress).unwrap();
    let r = run_on_link(&rs, p, &mut lr, &NoProgress, Instant::now()).unwrap();
    let s = t.join().unwrap();
    let read = |f: &str| std::fs::read(d.join(f)).ok();
    let count = |role: Role| std::fs::read_to_string(d.join(format!("{role}.count"))).ok();
    [
        (r, read("r.out"), count(Role::Receiver)),
        (s, read("s.out"), count(Role::Sender)),
    ]
}

#[test]
fn cardinality_only_reveals_the_size_and_writes_no_output() {
    let mut seed = 11;
    let left = random_side("L", 300, 200, &mut seed);
    let right = random_side("R", 250, 200, &mut seed);
    let shared = shared_keys(&left, &right);
    for spill in [SpillMode::Never, SpillMode::Always] {
        let name = format!("card-{spill:?}");
        for (report, out, count) in run_reveal(
            &name,
            &left,
            &right,
            blindjoin_protocols::Reveal::Cardinality,
            spill,
        ) {
            assert_eq!(report.cardinality, Some(shared));
            assert_eq!(report.intersection_key_count, -1);
            assert_eq!(report.revealed_key_count, None);
            assert!(report.buckets > 1);
            assert!(out.is_none(), "cardinality-only mode wrote an output");
            assert_eq!(
                count.as_deref(),
                Some(format!("real_count,final_count\n{shared},0\n").as_str())
            );
        }
    }
}

#[test]
fn threshold_reveals_at_most_t_keys_across_buckets() {
    let mut seed = 5;
    let left = random_side("L", 300, 200, &mut seed);
    let right = random_side("R", 250, 200, &mut seed);
    let shared: std::collections::HashSet<&String> = left
        .keys
        .iter()
        .filter(|k| right.keys.contains(k))
        .collect();
    assert!(shared.len() > 40, "{}", shared.len());
    for t in [0u64, 1, 17, 40, 10_000] {
        let name = format!("thr-{t}");
        let [r, s] = run_reveal(
            &name,
            &left,
            &right,
            blindjoin_protocols::Reveal::UpTo(t),
            SpillMode::Always,
        );
        let want = t.min(shared.len() as u64);
        let keys_of = |out: &[u8]| -> Vec<String> {
            rows_of(out)
                .into_iter()
                .map(|r| r.unwrap().1)
                .collect::<Vec<_>>()
        };
        let (r_rows, s_rows) = (keys_of(&r.1.unwrap()), keys_of(&s.1.unwrap()));
        assert_eq!(r_rows, s_rows, "aligned outputs differ at threshold {t}");
        let distinct: std::collections::HashSet<&String> = r_rows.iter().collect();
        assert_eq!(distinct.len() as u64, want, "threshold {t}");
        assert!(distinct.iter().all(|k| shared.contains(k)));
        for (report, _, count) in [(r.0, (), r.2), (s.0, (), s.2)] {
            assert_eq!(report.cardinality, Some(shared.len() as u64));
            assert_eq!(report.revealed_key_count, Some(want));
            assert_eq!(report.intersection_key_count, want as i64);
            assert_eq!(
                count.as_deref(),
                Some(format!("real_count,final_count\n{},{want}\n", shared.len()).as_str())
            );
        }
    }
}

/// A side whose keys are integers, for typed Parquet columns.
#[cfg(feature = "parquet")]
fn int_side(tag: &'static str, n: usize, range: u64, seed: &mut u64) -> Side {
    Side {
        tag,
        keys: (0..n).map(|_| (rng(seed) % range).to_string()).collect(),
    }
}

/// `side` as Parquet: `payload` (string), `id` (int64).
#[cfg(feature = "parquet")]
fn write_parquet(path: &Path, side: &Side) {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    let payload: ArrayRef = std::sync::Arc::new(StringArray::from_iter_values(
        (0..side.keys.len()).map(|i| format!("{}{i}", side.tag)),
    ));
    let id: ArrayRef = std::sync::Arc::new(Int64Array::from_iter_values(
        side.keys.iter().map(|k| k.parse::<i64>().unwrap()),
    ));
    let batch = RecordBatch::try_from_iter([("payload", payload), ("id", id)]).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// A Parquet output's rows as (payload, id), `None` for an all-null padding row; checks the
/// column types survived.
#[cfg(feature = "parquet")]
fn parquet_rows(path: &Path) -> Vec<Option<(String, String)>> {
    use arrow_array::{Array, Int64Array, StringArray};
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let payload = batch
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let id = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        for i in 0..batch.num_rows() {
            assert_eq!(payload.is_null(i), id.is_null(i));
            out.push(
                (!id.is_null(i)).then(|| (payload.value(i).to_string(), id.value(i).to_string())),
            );
        }
    }
    out
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_in_and_out_give_the_csv_run_s_rows_with_types_kept() {
    let mut seed = 21;
    let left = int_side("L", 300, 200, &mut seed);
    let right = int_side("R", 250, 200, &mut seed);
    for join in JoinType::ALL {
        for spill in [SpillMode::Never, SpillMode::Always] {
            let name = format!("pq-{join:?}-{spill:?}");
            let (csv_r, csv_s) = run_both(&name, &left, &right, join, true, spill, Protocol::Rr22);
            let d = dir(&name);
            write_parquet(&d.join("r.parquet"), &left);
            write_parquet(&d.join("s.parquet"), &right);
            let (mut lr, mut ls) = mem_pair();
            let spec_for = |role| {
                let mut s = spec(&d, role, join, true, spill, Protocol::Rr22);
                let me = if role == Role::Receiver { "r" } else { "s" };
                s.input = d.join(format!("{me}.parquet"));
                s.output = Some(d.join(format!("{me}.out.parquet")));
                s.input_format = crate::TableFormat::Parquet;
                s.output_format = crate::TableFormat::Parquet;
                s
            };
            let ss = spec_for(Role::Sender);
            let t = std::thread::spawn(move || {
                let p = prepare(&ss, &NoProgress).unwrap();
                run_on_link(&ss, p, &mut ls, &NoProgress, Instant::now()).unwrap();
            });
            let rs = spec_for(Role::Receiver);
            let p = prepare(&rs, &NoProgress).unwrap();
            run_on_link(&rs, p, &mut lr, &NoProgress, Instant::now()).unwrap();
            t.join().unwrap();
            assert_eq!(
                parquet_rows(&d.join("r.out.parquet")),
                rows_of(&csv_r),
                "{name}"
            );
            assert_eq!(
                parquet_rows(&d.join("s.out.parquet")),
                rows_of(&csv_s),
                "{name}"
            );
            let leftovers: Vec<_> = std::fs::read_dir(&d)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
        }
    }
}

#[test]
fn min_intersection_stops_below_the_minimum_and_runs_at_it() {
    let mut seed = 31;
    let left = random_side("L", 300, 200, &mut seed);
    let right = random_side("R", 250, 200, &mut seed);
    let shared = shared_keys(&left, &right);
    for (min, spill) in [
        (shared + 1, SpillMode::Never),
        (shared, SpillMode::Always),
        (shared, SpillMode::Never),
    ] {
        let name = format!("min-{min}-{spill:?}");
        let d = dir(&name);
        std::fs::write(d.join("r.csv"), left.csv()).unwrap();
        std::fs::write(d.join("s.csv"), right.csv()).unwrap();
        let spec_for = |role| {
            let mut s = spec(&d, role, JoinType::Inner, true, spill, Protocol::Rr22);
            s.min_intersection = Some(min);
            s
        };
        let (mut lr, mut ls) = mem_pair();
        let ss = spec_for(Role::Sender);
        let t = std::thread::spawn(move || {
            let p = prepare(&ss, &NoProgress).unwrap();
            run_on_link(&ss, p, &mut ls, &NoProgress, Instant::now())
        });
        let rs = spec_for(Role::Receiver);
        let p = prepare(&rs, &NoProgress).unwrap();
        let r = run_on_link(&rs, p, &mut lr, &NoProgress, Instant::now());
        let s = t.join().unwrap();
        if min > shared {
            for out in [r, s] {
                assert!(
                    matches!(out, Err(crate::DataError::IntersectionTooSmall { found, min: m })
                        if found == shared && m == min),
                    "{out:?}"
                );
            }
            assert!(!d.join("r.out").exists() && !d.join("s.out").exists());
        } else {
            for report in [r.unwrap(), s.unwrap()] {
                assert_eq!(report.cardinality, Some(shared));
                assert_eq!(report.intersection_key_count, shared as i64);
                assert!(report.stages.cardinality_s.is_some());
            }
        }
    }
}

/// How many distinct keys both sides hold.
fn shared_keys(left: &Side, right: &Side) -> u64 {
    left.keys
        .iter()
        .filter(|k| right.keys.contains(k))
        .collect::<std::collections::HashSet<_>>()
        .len() as u64
}

/// `run_with_cancel` while waiting for a peer that never comes: the cancel ends the run at once
/// with the cancel's error, and nothing is written.
#[test]
fn cancel_stops_a_run_waiting_for_its_peer() {
    let d = dir("cancel");
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let mut s = spec(
        &d,
        Role::Receiver,
        JoinType::Inner,
        true,
        SpillMode::Never,
        Protocol::Ecdh,
    );
    s.parties = Parties {
        self_id: "alice".into(),
        self_addr: format!("127.0.0.1:{}", free()),
        peer_id: "bob".into(),
        peer_addr: format!("127.0.0.1:{}", free()),
    };
    std::fs::write(&s.input, "id\n1\n2\n").unwrap();
    let cancel = blindjoin_link::Cancel::new();
    let c = cancel.clone();
    let run_spec = s.clone();
    let t = std::thread::spawn(move || crate::run_with_cancel(&run_spec, &NoProgress, &c));
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    cancel.cancel("the peer cancelled the run (test)");
    let err = t.join().unwrap().unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(3));
    assert!(
        matches!(&err, crate::DataError::Link(blindjoin_link::LinkError::Cancelled { reason }) if reason.contains("(test)")),
        "{err}"
    );
    assert!(!s.output.as_ref().unwrap().exists());
}

/// A party's output, if it wrote one, and its report.
type PartyResult = (Option<Vec<u8>>, crate::Report);

/// Runs both parties with `edit` applied to each spec; returns each party's output (if written)
/// and report.
fn run_edited(
    name: &str,
    left: &Side,
    right: &Side,
    edit: impl Fn(&mut RunSpec) + Send + Copy + 'static,
) -> (PartyResult, PartyResult) {
    let d = dir(name);
    std::fs::write(d.join("r.csv"), left.csv()).unwrap();
    std::fs::write(d.join("s.csv"), right.csv()).unwrap();
    for f in ["r.out", "s.out"] {
        let _ = std::fs::remove_file(d.join(f));
    }
    let (mut lr, mut ls) = mem_pair();
    let mk = |role| {
        let mut s = spec(
            &d,
            role,
            JoinType::Inner,
            true,
            SpillMode::Never,
            Protocol::Ecdh,
        );
        edit(&mut s);
        s
    };
    let ss = mk(Role::Sender);
    let t = std::thread::spawn(move || {
        let p = prepare(&ss, &NoProgress).unwrap();
        run_on_link(&ss, p, &mut ls, &NoProgress, Instant::now()).unwrap()
    });
    let rs = mk(Role::Receiver);
    let p = prepare(&rs, &NoProgress).unwrap();
    let rr = run_on_link(&rs, p, &mut lr, &NoProgress, Instant::now()).unwrap();
    let sr = t.join().unwrap();
    (
        (std::fs::read(d.join("r.out")).ok(), rr),
        (std::fs::read(d.join("s.out")).ok(), sr),
    )
}

fn pairs_of(l: &[u8], r: &[u8]) -> Vec<Pair> {
    let (l, r) = (rows_of(l), rows_of(r));
    assert_eq!(l.len(), r.len());
    sorted(
        l.into_iter()
            .zip(r)
            .map(|(a, b)| (a.map(|x| x.0), b.map(|x| x.0)))
            .collect(),
    )
}

#[test]
fn check_hash_digest_skips_the_protocol_on_equal_key_sets_with_every_join() {
    let side = |tag, keys: &[&str]| Side {
        tag,
        keys: keys.iter().map(|s| s.to_string()).collect(),
    };
    // Equal key sets in other orders, with duplicates on both sides (they still pair up), over
    // several buckets (bucket_size 40); then sets that differ in one key; then empty and
    // one-key sets.
    let many: Vec<String> = (0..150).map(|i| format!("k{i}")).collect();
    let mut rev = many.clone();
    rev.reverse();
    rev.extend(["k3".to_string(), "k77".to_string()]);
    let mut dup = many.clone();
    dup.push("k3".into());
    let mut off = many.clone();
    off[10] = "other".into();
    let many_refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let cases: Vec<(&str, Side, Side, bool)> = vec![
        (
            "eq",
            side("L", &many_refs),
            Side {
                tag: "R",
                keys: rev,
            },
            true,
        ),
        (
            "dup",
            Side {
                tag: "L",
                keys: dup,
            },
            side("R", &many_refs),
            true,
        ),
        (
            "off",
            side("L", &many_refs),
            Side {
                tag: "R",
                keys: off,
            },
            false,
        ),
        ("empty", side("L", &[]), side("R", &[]), true),
        ("one", side("L", &["x"]), side("R", &["x", "x"]), true),
        ("one-off", side("L", &["x"]), side("R", &["y"]), false),
    ];
    for (name, left, right, equal) in cases {
        for join in JoinType::ALL {
            let tag = format!("chd-{name}-{join:?}");
            let on = move |s: &mut RunSpec| {
                s.join.join = join;
                s.join.check_hash_digest = true;
            };
            let off = move |s: &mut RunSpec| s.join.join = join;
            let ((lo, lr), (ro, sr)) = run_edited(&tag, &left, &right, on);
            let ((plain_l, plain_lr), (plain_r, _)) =
                run_edited(&format!("{tag}-plain"), &left, &right, off);
            let (lo, ro) = (lo.unwrap(), ro.unwrap());
            assert_eq!(
                pairs_of(&lo, &ro),
                sorted(reference(join, &left, &right)),
                "{tag}"
            );
            // The same bytes as the run without the check.
            assert!(
                Some(&lo) == plain_l.as_ref() && Some(&ro) == plain_r.as_ref(),
                "{tag}"
            );
            assert_eq!(lr.key_sets_equal, Some(equal), "{tag}");
            assert_eq!(sr.key_sets_equal, Some(equal), "{tag}");
            assert_eq!(plain_lr.key_sets_equal, None);
            if equal {
                // No bucket ran with dummies: the peer's true unique keys.
                assert_eq!(lr.peer_key_count, sr.original_key_count, "{tag}");
            } else {
                assert_eq!(lr.peer_key_count, plain_lr.peer_key_count, "{tag}");
            }
            assert_eq!(lr.intersection_key_count, plain_lr.intersection_key_count);
            if equal && left.keys.len() > 100 {
                // No protocol ran: far fewer bytes than ECDH-PSI over 150 keys a side.
                assert!(lr.bytes_sent * 4 < plain_lr.bytes_sent, "{tag}");
            }
        }
    }
}

#[test]
fn check_hash_digest_without_broadcast_gives_the_receiver_all_its_rows() {
    let left = Side {
        tag: "L",
        keys: vec!["a".into(), "b".into(), "a".into()],
    };
    let right = Side {
        tag: "R",
        keys: vec!["b".into(), "a".into()],
    };
    let ((lo, lr), (so, sr)) = run_edited("chd-receiver-only", &left, &right, |s| {
        s.broadcast_result = false;
        s.join.check_hash_digest = true;
        if s.role == Role::Sender {
            s.output = None;
        }
    });
    let rows: Vec<String> = rows_of(&lo.unwrap())
        .into_iter()
        .map(|r| r.unwrap().0)
        .collect();
    let mut rows = rows;
    rows.sort();
    assert_eq!(rows, ["L0", "L1", "L2"]);
    assert!(so.is_none());
    // The sender learns that the sets are equal (as SecretFlow's check tells it), no rows.
    assert_eq!(
        (lr.key_sets_equal, sr.key_sets_equal),
        (Some(true), Some(true))
    );
    assert_eq!(sr.intersection_count, -1);
}

#[test]
fn the_key_set_digest_ignores_row_order_and_duplicates_and_sees_one_key_changed() {
    use crate::pipeline::process::key_set_digest;
    let digest = |name: &str, keys: &[&str], b: usize| {
        let d = dir(&format!("ksd-{name}"));
        let side = Side {
            tag: "L",
            keys: keys.iter().map(|s| s.to_string()).collect(),
        };
        std::fs::write(d.join("r.csv"), side.csv()).unwrap();
        let s = spec(
            &d,
            Role::Receiver,
            JoinType::Inner,
            true,
            SpillMode::Never,
            Protocol::Ecdh,
        );
        let (mut table, _) = prepare(&s, &NoProgress).unwrap().into_table();
        let first = key_set_digest(&mut table, b).unwrap();
        // The table is whole again afterwards (the run reads it next).
        assert_eq!(key_set_digest(&mut table, b).unwrap(), first);
        first
    };
    for b in [1, 4] {
        let a = digest("a", &["x", "y", "z"], b);
        assert_eq!(a, digest("b", &["z", "x", "y", "x"], b));
        assert_ne!(a, digest("c", &["x", "y", "w"], b));
        assert_ne!(a, digest("d", &["x", "y"], b));
        assert_ne!(digest("e", &[], b), a);
    }
    // The bucket count is part of what is hashed: both parties use the agreed one.
    assert_ne!(digest("f", &["x"], 1), digest("g", &["x"], 2));
}

/// A folder of Parquet parts (same schema, `_SUCCESS` skipped) gives the bytes the one Parquet
/// file gives, in memory, spilled and with recovery (which keeps the concatenation for a
/// resumed run's schema); a part with another schema is refused, naming it.
#[cfg(feature = "parquet")]
#[test]
fn a_folder_of_parquet_parts_reads_as_the_one_file() {
    let mut seed = 77;
    let left = int_side("L", 300, 200, &mut seed);
    let right = int_side("R", 250, 200, &mut seed);
    let halves = [
        Side {
            tag: "L",
            keys: left.keys[..120].to_vec(),
        },
        Side {
            tag: "M",
            keys: left.keys[120..].to_vec(),
        },
    ];
    // The receiver's output row counts, one per case: all equal.
    let mut one = Vec::new();
    for recovery in [false, true] {
        for spill in [SpillMode::Never, SpillMode::Always] {
            let name = format!("pq-parts-{spill:?}-{recovery}");
            let d = dir(&name);
            let _ = std::fs::remove_dir_all(d.join("rec-r"));
            let _ = std::fs::remove_dir_all(d.join("rec-s"));
            let folder = d.join("r-parts");
            let _ = std::fs::remove_dir_all(&folder);
            std::fs::create_dir_all(&folder).unwrap();
            write_parquet(&folder.join("part-0.parquet"), &halves[0]);
            write_parquet(&folder.join("part-1.parquet"), &halves[1]);
            std::fs::write(folder.join("_SUCCESS"), "").unwrap();
            write_parquet(&d.join("s.parquet"), &right);
            let run = |input: PathBuf, tag: &str| {
                let (mut lr, mut ls) = mem_pair();
                let spec_for = |role, input: PathBuf| {
                    let mut s = spec(&d, role, JoinType::Full, true, spill, Protocol::Rr22);
                    let me = if role == Role::Receiver { "r" } else { "s" };
                    s.input = input;
                    s.output = Some(d.join(format!("{me}.{tag}.parquet")));
                    s.input_format = crate::TableFormat::Parquet;
                    s.output_format = crate::TableFormat::Parquet;
                    if recovery {
                        s.recovery = Some(d.join(format!("rec-{me}-{tag}")));
                    }
                    s
                };
                let ss = spec_for(Role::Sender, d.join("s.parquet"));
                let t = std::thread::spawn(move || {
                    let p = prepare(&ss, &NoProgress).unwrap();
                    run_on_link(&ss, p, &mut ls, &NoProgress, Instant::now()).unwrap();
                });
                let rs = spec_for(Role::Receiver, input);
                let p = prepare(&rs, &NoProgress).unwrap();
                run_on_link(&rs, p, &mut lr, &NoProgress, Instant::now()).unwrap();
                t.join().unwrap();
                (
                    std::fs::read(d.join(format!("r.{tag}.parquet"))).unwrap(),
                    std::fs::read(d.join(format!("s.{tag}.parquet"))).unwrap(),
                )
            };
            // The reference: the parts' rows as one file, written with arrow (not by our own
            // concatenation, so the check is independent).
            let joined = d.join("r-one.parquet");
            {
                use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
                let payloads: Vec<String> = halves
                    .iter()
                    .flat_map(|h| (0..h.keys.len()).map(move |i| format!("{}{i}", h.tag)))
                    .collect();
                let ids: Vec<i64> = halves
                    .iter()
                    .flat_map(|h| h.keys.iter().map(|k| k.parse::<i64>().unwrap()))
                    .collect();
                let payload: ArrayRef =
                    std::sync::Arc::new(StringArray::from_iter_values(payloads));
                let id: ArrayRef = std::sync::Arc::new(Int64Array::from_iter_values(ids));
                let batch = RecordBatch::try_from_iter([("payload", payload), ("id", id)]).unwrap();
                let file = std::fs::File::create(&joined).unwrap();
                let mut w =
                    parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
                w.write(&batch).unwrap();
                w.close().unwrap();
            }
            let a = run(joined, "one");
            let b = run(folder.clone(), "parts");
            assert_eq!(
                parquet_rows(&d.join("r.one.parquet")),
                parquet_rows(&d.join("r.parts.parquet")),
                "{name}"
            );
            assert!(a.1 == b.1, "{name}: the sender's output differs");
            if recovery {
                assert!(d.join("rec-r-parts").join("input.parquet").exists());
                // Rerun: resumes from the checkpoints, the schema from the kept concatenation.
                let again = run(folder.clone(), "parts");
                assert!(again == b, "{name}: the resumed run's outputs differ");
            }
            one.push(parquet_rows(&d.join("r.parts.parquet")).len());
            // A part with another schema is refused, naming it.
            let other = &right;
            {
                use arrow_array::{ArrayRef, RecordBatch, StringArray};
                let id: ArrayRef =
                    std::sync::Arc::new(StringArray::from_iter_values(other.keys.iter().cloned()));
                let batch = RecordBatch::try_from_iter([("id", id)]).unwrap();
                let file = std::fs::File::create(folder.join("part-2.parquet")).unwrap();
                let mut w =
                    parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
                w.write(&batch).unwrap();
                w.close().unwrap();
            }
            let mut s = spec(
                &d,
                Role::Receiver,
                JoinType::Full,
                true,
                spill,
                Protocol::Rr22,
            );
            s.input = folder.clone();
            s.input_format = crate::TableFormat::Parquet;
            let e = prepare(&s, &NoProgress).err().unwrap().to_string();
            assert!(e.contains("part-2.parquet") && e.contains("schema"), "{e}");
        }
    }
    assert!(one.iter().all(|&n| n == one[0] && n > 100));
}
