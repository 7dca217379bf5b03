//! Whole three-party runs over in-memory links, from SecretFlow-style config text to the
//! receiver's output file, against the plaintext three-way intersection.

use super::*;
use crate::config::parse_three_party_config;
use crate::pipeline::two_party::prepare;
use blindjoin_link::{MemLink, mem_pair};
use blindjoin_protocols::NoProgress;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

const IDS: [&str; 3] = ["alice", "bob", "carol"];

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bj-3pc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The config of party `me` with `receiver`, inputs `{id}.csv` and outputs `{id}.out` in `d`.
fn config(me: &str, receiver: &str, align: bool) -> String {
    format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{
      "protocol": "PROTOCOL_ECDH_3PC",
      "receiver": "{receiver}",
      "ecdh_config": {{ "curve": "CURVE_25519", "batch_size": 64 }},
      "broadcast_result": false
    }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.out" }},
    "keys": ["id"],
    "disable_alignment": {}
  }},
  "link_config": {{
    "parties": [
      {{ "id": "alice", "host": "127.0.0.1:1" }},
      {{ "id": "bob", "host": "127.0.0.1:2" }},
      {{ "id": "carol", "host": "127.0.0.1:3" }}
    ]
  }},
  "self_link_party": "{me}"
}}"#,
        !align
    )
}

/// Writes party inputs (keys, with a payload column and duplicate rows where asked), runs the
/// three parties, and returns the receiver's output lines after the header.
fn run3(d: &Path, keys: [Vec<String>; 3], receiver: &str, align: bool) -> Vec<String> {
    run3_with(d, keys, receiver, align, None)
}

/// [`run3`] with every party's `bucket_size` and spill mode set (`Some((bucket_size, spill))`).
fn run3_with(
    d: &Path,
    keys: [Vec<String>; 3],
    receiver: &str,
    align: bool,
    buckets: Option<(u64, crate::spec::SpillMode)>,
) -> Vec<String> {
    for (i, ks) in keys.iter().enumerate() {
        let mut s = String::from("id,payload\n");
        for (j, k) in ks.iter().enumerate() {
            s.push_str(&format!("{k},{}{j}\n", IDS[i]));
        }
        std::fs::write(d.join(format!("{}.csv", IDS[i])), s).unwrap();
    }
    for id in IDS {
        let _ = std::fs::remove_file(d.join(format!("{id}.out")));
    }
    // links[i][j]: party i's end of its link to party j.
    let (ab, ba) = mem_pair();
    let (ac, ca) = mem_pair();
    let (bc, cb) = mem_pair();
    let ends: [[Option<MemLink>; 3]; 3] = [
        [None, Some(ab), Some(ac)],
        [Some(ba), None, Some(bc)],
        [Some(ca), Some(cb), None],
    ];
    let handles: Vec<_> = ends
        .into_iter()
        .enumerate()
        .map(|(i, mut links)| {
            let text = config(IDS[i], receiver, align);
            let d = d.to_path_buf();
            std::thread::spawn(move || {
                let mut t = parse_three_party_config(&text, "t.json", &d)
                    .unwrap()
                    .unwrap();
                if let Some((size, spill)) = buckets {
                    t.spec.bucket_size = size;
                    t.spec.spill = spill;
                    t.spec.spill_dir = Some(d.join(format!("spill-{i}")));
                    std::fs::create_dir_all(d.join(format!("spill-{i}"))).unwrap();
                }
                let p = prepare(&t.spec, &NoProgress).unwrap();
                run_on_links(&t, p, &mut links, &NoProgress, Instant::now())
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let out = h.join().unwrap().unwrap();
        assert_eq!(out.links.len(), 2);
        if let Some((size, _)) = buckets {
            let want = (keys.iter().map(Vec::len).max().unwrap_or(0) as u64)
                .div_ceil(size)
                .max(1)
                .next_power_of_two();
            assert_eq!(out.report.buckets, want, "party {i}");
        }
        if IDS[i] != receiver {
            assert_eq!(out.report.intersection_count, -1);
            assert!(!d.join(format!("{}.out", IDS[i])).exists());
        }
    }
    let out = std::fs::read_to_string(d.join(format!("{receiver}.out"))).unwrap();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("id,payload"));
    lines.map(str::to_string).collect()
}

fn keys(r: impl IntoIterator<Item = usize>) -> Vec<String> {
    r.into_iter().map(|i| format!("k{i}")).collect()
}

#[test]
fn receiver_writes_exactly_its_rows_in_all_three_tables() {
    let d = dir("basic");
    // Duplicates at alice (k5 twice); bob and carol share 50..60 that alice lacks.
    let mut a = keys(0..40);
    a.push("k5".into());
    let b = keys((0..30).chain(50..60));
    let c = keys((10..35).chain(50..60));
    for (receiver, align) in [
        ("alice", false),
        ("alice", true),
        ("bob", true),
        ("carol", false),
    ] {
        let got = run3(&d, [a.clone(), b.clone(), c.clone()], receiver, align);
        let r = IDS.iter().position(|&x| x == receiver).unwrap();
        let inputs = [&a, &b, &c];
        let (s1, s2): (HashSet<_>, HashSet<_>) = (
            inputs[(r + 1) % 3].iter().collect(),
            inputs[(r + 2) % 3].iter().collect(),
        );
        let want: Vec<String> = inputs[r]
            .iter()
            .enumerate()
            .filter(|(_, k)| s1.contains(k) && s2.contains(k))
            .map(|(j, k)| format!("{k},{receiver}{j}"))
            .collect();
        let mut sorted_got = got.clone();
        let mut sorted_want = want.clone();
        sorted_got.sort();
        sorted_want.sort();
        assert_eq!(sorted_got, sorted_want, "receiver {receiver}");
        if !align {
            assert_eq!(got, want, "unaligned output keeps input order");
        }
    }
}

#[test]
fn empty_tables_and_no_overlap() {
    let d = dir("empty");
    assert!(run3(&d, [keys(0..10), vec![], keys(0..10)], "alice", true).is_empty());
    assert!(run3(&d, [vec![], keys(0..10), keys(0..10)], "alice", true).is_empty());
    assert!(run3(&d, [keys(0..10), keys(10..20), keys(0..20)], "carol", true).is_empty());
}

/// Small buckets (in memory, and spilled to disk shards): the same rows as one bucket, in the
/// same order, for every receiver, aligned or not.
#[test]
fn buckets_give_the_same_output_as_one_bucket() {
    use crate::spec::SpillMode;
    let d = dir("buckets");
    let mut a = keys(0..300);
    a.extend(keys(7..12)); // duplicates
    let b = keys((0..200).chain(400..450));
    let c = keys((50..260).chain(400..430));
    for (receiver, align) in [("alice", true), ("bob", false), ("carol", true)] {
        let inputs = [a.clone(), b.clone(), c.clone()];
        let whole = run3(&d, inputs.clone(), receiver, align);
        assert!(!whole.is_empty());
        for spill in [SpillMode::Never, SpillMode::Always] {
            let got = run3_with(&d, inputs.clone(), receiver, align, Some((16, spill)));
            assert_eq!(got, whole, "receiver {receiver}, align {align}, {spill:?}");
        }
    }
    // The spill folders hold nothing once the runs are over.
    for i in 0..3 {
        let left = std::fs::read_dir(d.join(format!("spill-{i}")))
            .unwrap()
            .count();
        assert_eq!(left, 0, "party {i} left spill files");
    }
}
