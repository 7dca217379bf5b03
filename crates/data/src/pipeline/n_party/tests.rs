//! Whole n-party and DP-PSI runs over in-memory links, from config text to the receiver's
//! output file, against the plaintext intersection.

use super::*;
use crate::config::parse_n_party_config;
use crate::pipeline::report::Report;
use crate::pipeline::two_party::prepare;
use blindjoin_link::{MemLink, mem_pair};
use blindjoin_protocols::NoProgress;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bj-npc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn config(
    ids: &[String],
    me: &str,
    receiver: &str,
    protocol: &str,
    extra: &str,
    broadcast: bool,
) -> String {
    let ps: Vec<String> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| format!(r#"{{ "id": "{id}", "host": "127.0.0.1:{}" }}"#, i + 1))
        .collect();
    format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{
      "protocol": "{protocol}",
      "receiver": "{receiver}",
      {extra}
      "broadcast_result": {broadcast}
    }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.out" }},
    "keys": ["id"]
  }},
  "link_config": {{ "parties": [{}] }},
  "self_link_party": "{me}"
}}"#,
        ps.join(", ")
    )
}

/// Runs all parties; returns the receiver's output keys (sorted) and every report.
fn run_n(
    d: &Path,
    keys: &[Vec<String>],
    receiver: usize,
    protocol: &str,
    extra: &str,
    bucket_size: Option<u64>,
) -> (Vec<String>, Vec<Report>) {
    let (mut outs, reports) = run_all(d, keys, receiver, protocol, extra, bucket_size, false);
    (outs.swap_remove(receiver), reports)
}

/// Output keys of every party's output (sorted; empty for a party that writes none).
fn output_keys(path: &Path) -> Vec<String> {
    let Ok(out) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("id,payload"));
    let mut got: Vec<String> = lines
        .map(|l| l.split(',').next().unwrap_or_default().to_string())
        .collect();
    got.sort();
    got
}

/// Runs all parties; returns every party's output keys (sorted) and every report.
#[allow(clippy::too_many_arguments)]
fn run_all(
    d: &Path,
    keys: &[Vec<String>],
    receiver: usize,
    protocol: &str,
    extra: &str,
    bucket_size: Option<u64>,
    broadcast: bool,
) -> (Vec<Vec<String>>, Vec<Report>) {
    let n = keys.len();
    let ids: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
    for (i, ks) in keys.iter().enumerate() {
        let mut s = String::from("id,payload\n");
        for (j, k) in ks.iter().enumerate() {
            s.push_str(&format!("{k},{}-{j}\n", ids[i]));
        }
        std::fs::write(d.join(format!("{}.csv", ids[i])), s).unwrap();
        let _ = std::fs::remove_file(d.join(format!("{}.out", ids[i])));
    }
    let mut ends: Vec<Vec<Option<MemLink>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    for (i, j) in (0..n).flat_map(|i| (i + 1..n).map(move |j| (i, j))) {
        let (a, b) = mem_pair();
        ends[i][j] = Some(a);
        ends[j][i] = Some(b);
    }
    let handles: Vec<_> = ends
        .into_iter()
        .enumerate()
        .map(|(i, mut links)| {
            let text = config(&ids, &ids[i], &ids[receiver], protocol, extra, broadcast);
            let d = d.to_path_buf();
            std::thread::spawn(move || {
                let mut t = parse_n_party_config(&text, "t.json", &d).unwrap().unwrap();
                if let Some(b) = bucket_size {
                    t.spec.bucket_size = b;
                }
                let p = prepare(&t.spec, &NoProgress).unwrap();
                run_on_links(&t, p, &mut links, &NoProgress, Instant::now())
            })
        })
        .collect();
    let mut reports = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        let out = h
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("party {i}: {e}"));
        assert_eq!(out.links.len(), n - 1);
        if i != receiver && !broadcast {
            assert_eq!(out.report.intersection_count, -1);
            assert!(!d.join(format!("{}.out", ids[i])).exists());
        }
        reports.push(out.report);
    }
    let outs = ids
        .iter()
        .map(|id| output_keys(&d.join(format!("{id}.out"))))
        .collect();
    (outs, reports)
}

fn plaintext(keys: &[Vec<String>], receiver: usize) -> Vec<String> {
    let sets: Vec<HashSet<&String>> = keys.iter().map(|k| k.iter().collect()).collect();
    let mut v: Vec<String> = keys[receiver]
        .iter()
        .filter(|k| sets.iter().all(|s| s.contains(k)))
        .cloned()
        .collect();
    v.sort();
    v
}

fn sets(n: usize, salt: &str) -> Vec<Vec<String>> {
    (0..n)
        .map(|p| {
            let mut v: Vec<String> = (0..50).map(|i| format!("{salt}c{i}")).collect();
            v.extend(
                (0..n)
                    .filter(|&j| j != p)
                    .map(|j| format!("{salt}all-but-{j}")),
            );
            v.extend((0..20).map(|i| format!("{salt}own{p}-{i}")));
            v
        })
        .collect()
}

#[test]
fn five_parties_both_variants_match_the_plaintext_intersection() {
    let d = dir("five");
    let keys = sets(5, "k");
    for (protocol, extra) in [
        ("PROTOCOL_NPC", ""),
        (
            "ECDH_PSI_NPC",
            r#""ecdh_config": { "curve": "CURVE_25519" },"#,
        ),
        ("KKRT_PSI_NPC", ""),
    ] {
        for receiver in [0, 3] {
            let (got, reports) = run_n(&d, &keys, receiver, protocol, extra, None);
            assert_eq!(got, plaintext(&keys, receiver), "{protocol}");
            assert_eq!(reports[receiver].intersection_key_count, 50);
            assert_eq!(reports[receiver].protocol, protocol);
        }
    }
}

/// With `broadcast_result`, every party writes its own rows of the n-way intersection (the
/// iterated and the zero-sharing protocols, in buckets, a duplicate row at a non-receiver).
#[test]
fn broadcast_gives_every_party_its_rows_of_the_intersection() {
    let d = dir("broadcast");
    let mut keys = sets(4, "x");
    keys[2].push("xc9".into());
    for (protocol, extra) in [
        ("PROTOCOL_NPC", ""),
        (
            "ECDH_PSI_NPC",
            r#""ecdh_config": { "curve": "CURVE_25519" },"#,
        ),
        ("KKRT_PSI_NPC", ""),
    ] {
        let (outs, reports) = run_all(&d, &keys, 1, protocol, extra, Some(16), true);
        for (p, got) in outs.iter().enumerate() {
            assert_eq!(got, &plaintext(&keys, p), "{protocol}, party {p}");
            assert_eq!(
                reports[p].intersection_key_count, 50,
                "{protocol}, party {p}"
            );
        }
        assert_eq!(outs[2].iter().filter(|k| *k == "xc9").count(), 2);
    }
}

#[test]
fn buckets_and_duplicates_keep_the_result() {
    let d = dir("buckets");
    let mut keys = sets(3, "b");
    keys[0].push("bc7".into()); // a duplicate row at the receiver
    let (got, reports) = run_n(&d, &keys, 0, "PROTOCOL_NPC", "", Some(16));
    // The receiver's two rows of bc7 are both in the output.
    assert_eq!(got.iter().filter(|k| *k == "bc7").count(), 2);
    assert_eq!(got, plaintext(&keys, 0));
    assert!(reports[0].buckets > 1);
}

#[test]
fn dp_psi_with_negligible_noise_gives_the_intersection() {
    let d = dir("dp");
    let keys = sets(2, "d");
    let extra = r#""dppsi_params": { "bob_sub_sampling": 1.0, "epsilon": 60 },"#;
    for receiver in [0, 1] {
        let (got, reports) = run_n(&d, &keys, receiver, "DP_PSI_2PC", extra, None);
        assert_eq!(got, plaintext(&keys, receiver));
        assert_eq!(reports[receiver].protocol, "DP_PSI_2PC");
    }
    // With the defaults the output is a noised subset-and-superset: every key is the receiver's.
    let (got, _) = run_n(&d, &keys, 1, "DP_PSI_2PC", "", None);
    assert!(got.iter().all(|k| keys[1].contains(k)));
}
