//! Partitioned runs (`--workers`): the buckets run in W partitions over W connections per
//! party, and the outputs are byte-identical to a one-worker run's — aligned and not, every
//! join type, RR22 / KKRT / ECDH, in memory and spilled.

use super::support::{BIN, free_port, party, tmp, wait};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// `receiver.csv` and `sender.csv` with duplicate keys, so the joins' pairs and pads show.
fn tables(dir: &Path) {
    let o = Command::new(BIN)
        .args([
            "gen",
            "--rows",
            "1500,1200",
            "--overlap",
            "600",
            "--seed",
            "11",
        ])
        .args(["--payload-columns", "2", "--duplicates", "0.1", "--out-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::rename(dir.join("alice.csv"), dir.join("receiver.csv")).unwrap();
    std::fs::rename(dir.join("bob.csv"), dir.join("sender.csv")).unwrap();
}

/// A v2 config for `me` with `protocol_lines`, the join, alignment and spill mode, writing
/// `me_<tag>.csv`.
#[allow(clippy::too_many_arguments)]
fn config(
    dir: &Path,
    me: &str,
    proto: &str,
    join: &str,
    align: bool,
    spill: &str,
    ports: (u16, u16),
    tag: &str,
) -> PathBuf {
    let role = if me == "receiver" {
        "ROLE_RECEIVER"
    } else {
        "ROLE_SENDER"
    };
    let text = format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{ {proto}, "role": "{role}", "broadcast_result": true }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}_{tag}.csv" }},
    "keys": ["id"],
    "disable_alignment": {no_align},
    "advanced_join_type": "ADVANCED_JOIN_TYPE_{join}",
    "left_side": "ROLE_RECEIVER"
  }},
  "link_config": {{
    "recv_timeout_ms": 60000,
    "parties": [
      {{ "id": "receiver", "host": "127.0.0.1:{}" }},
      {{ "id": "sender", "host": "127.0.0.1:{}" }}
    ]
  }},
  "self_link_party": "{me}",
  "blindjoin": {{ "spill": "{spill}" }}
}}"#,
        ports.0,
        ports.1,
        no_align = !align,
    );
    let p = dir.join(format!("{me}_{tag}.json"));
    std::fs::write(&p, text).unwrap();
    p
}

fn spawn(cfg: &Path, extra: &[String]) -> Child {
    Command::new(BIN)
        .args(["run", "--quiet", "--config"])
        .arg(cfg)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The flags for `w` workers: the receiver listens (its id sorts first), on a fresh range of
/// `w` contiguous free ports (taken from the shared counter, so no other test gets them).
pub(super) fn worker_flags(w: usize) -> Vec<String> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..100 {
        let ports: Vec<u16> = (0..w).map(|_| free_port()).collect();
        if ports.windows(2).all(|p| p[1] == p[0] + 1) {
            return vec![
                "--workers".into(),
                w.to_string(),
                "--worker-ports".into(),
                format!("{}-{}", ports[0], ports[w - 1]),
            ];
        }
    }
    panic!("no {w} contiguous free ports");
}

fn run_config_pair(dir: &Path, proto: &str, join: &str, align: bool, spill: &str, w: usize) {
    let ports = (free_port(), free_port());
    let tag = format!("w{w}");
    let flags = worker_flags(w);
    let r = config(dir, "receiver", proto, join, align, spill, ports, &tag);
    let s = config(dir, "sender", proto, join, align, spill, ports, &tag);
    let (cr, cs) = (spawn(&r, &flags), spawn(&s, &flags));
    let (okr, er) = wait(cr, LIMIT);
    let (oks, es) = wait(cs, LIMIT);
    assert!(okr && oks, "{proto} {join} w{w}: {er}\n{es}");
}

fn same_bytes(dir: &Path, what: &str) {
    for me in ["receiver", "sender"] {
        let one = std::fs::read(dir.join(format!("{me}_w1.csv"))).unwrap();
        let four = std::fs::read(dir.join(format!("{me}_w4.csv"))).unwrap();
        assert!(one.len() > 20, "{what}: {me}'s output is nearly empty");
        assert!(one == four, "{what}: {me}'s output differs with 4 workers");
    }
}

fn check_config(proto: &str, name: &str, joins: &[&str], align: bool, spill: &str) {
    let dir = tmp("workers", name);
    tables(&dir);
    for join in joins {
        for w in [1, 4] {
            run_config_pair(&dir, proto, join, align, spill, w);
        }
        same_bytes(&dir, &format!("{name} {join}"));
    }
}

const JOINS: [&str; 5] = [
    "INNER_JOIN",
    "LEFT_JOIN",
    "RIGHT_JOIN",
    "FULL_JOIN",
    "DIFFERENCE",
];
const RR22: &str = r#""protocol": "PROTOCOL_RR22", "rr22_config": { "bucket_size": "150" }"#;
const KKRT: &str = r#""protocol": "PROTOCOL_KKRT", "kkrt_config": { "bucket_size": 150 }"#;

#[test]
fn rr22_every_join_aligned_in_memory_matches_one_worker() {
    check_config(RR22, "rr22-mem", &JOINS, true, "never");
}

#[test]
fn rr22_spilled_and_unaligned_match_one_worker() {
    check_config(
        RR22,
        "rr22-spill",
        &["FULL_JOIN", "INNER_JOIN"],
        true,
        "always",
    );
    check_config(
        RR22,
        "rr22-unaligned",
        &["INNER_JOIN", "LEFT_JOIN"],
        false,
        "always",
    );
}

#[test]
fn kkrt_every_join_aligned_matches_one_worker() {
    check_config(KKRT, "kkrt-mem", &JOINS, true, "never");
    check_config(KKRT, "kkrt-spill", &["DIFFERENCE"], true, "always");
}

/// ECDH always runs in buckets of 2^20 from a config: from flags, with a small
/// `--bucket-size`, in memory and spilled, aligned and not.
#[test]
fn ecdh_from_flags_matches_one_worker() {
    let dir = tmp("workers", "ecdh");
    tables(&dir);
    for (spill, align) in [("never", true), ("always", true), ("always", false)] {
        for w in [1usize, 4] {
            let (pr, ps) = (free_port(), free_port());
            let mut extra: Vec<String> = ["--protocol", "ecdh", "--bucket-size", "150"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            extra.extend(["--spill".into(), spill.into()]);
            if !align {
                extra.push("--no-align".into());
            }
            extra.extend(worker_flags(w));
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let tag = format!("w{w}");
            let cr = party(&dir, "receiver", pr, ps, &tag, &extra);
            let cs = party(&dir, "sender", ps, pr, &tag, &extra);
            let (okr, er) = wait(cr, LIMIT);
            let (oks, es) = wait(cs, LIMIT);
            assert!(okr && oks, "ecdh {spill} w{w}: {er}\n{es}");
        }
        same_bytes(&dir, &format!("ecdh {spill} align={align}"));
    }
}

/// The parties ask for different counts: the run uses the smaller, and still matches.
#[test]
fn the_smaller_worker_count_wins() {
    let dir = tmp("workers", "min");
    tables(&dir);
    let ports = (free_port(), free_port());
    for (tag, wr, ws) in [("w1", 1usize, 1usize), ("w4", 3, 2)] {
        let r = config(
            &dir,
            "receiver",
            RR22,
            "FULL_JOIN",
            true,
            "never",
            ports,
            tag,
        );
        let s = config(&dir, "sender", RR22, "FULL_JOIN", true, "never", ports, tag);
        let (cr, cs) = (spawn(&r, &worker_flags(wr)), spawn(&s, &worker_flags(ws)));
        let (okr, er) = wait(cr, LIMIT);
        let (oks, es) = wait(cs, LIMIT);
        assert!(okr && oks, "{er}\n{es}");
    }
    same_bytes(&dir, "3 vs 2 workers");
}

#[test]
fn counting_runs_are_never_split() {
    let dir = tmp("workers", "count");
    tables(&dir);
    let o = Command::new(BIN)
        .args([
            "run",
            "--role",
            "receiver",
            "--keys",
            "id",
            "--cardinality-only",
        ])
        .args([
            "--self",
            "127.0.0.1:1",
            "--peer",
            "127.0.0.1:2",
            "--workers",
            "2",
        ])
        .args(["--connect-timeout", "1"])
        .arg("--input")
        .arg(dir.join("receiver.csv"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("never split") && err.contains("per-partition"),
        "{err}"
    );
}

/// `--input` naming a folder of CSV parts (in name order, one header each, `_SUCCESS` skipped)
/// gives the bytes the one file gives, with 1 and 2 workers, aligned and not.
#[test]
fn a_folder_of_csv_parts_reads_as_the_one_file() {
    let dir = tmp("workers", "parts");
    tables(&dir);
    // The same tables, the receiver's as a folder named receiver.csv holding three parts.
    let split = dir.join("split");
    let folder = split.join("receiver.csv");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::copy(dir.join("sender.csv"), split.join("sender.csv")).unwrap();
    let text = std::fs::read_to_string(dir.join("receiver.csv")).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let rows: Vec<&str> = lines.collect();
    let third = rows.len() / 3;
    for (i, chunk) in [&rows[..third], &rows[third..2 * third], &rows[2 * third..]]
        .iter()
        .enumerate()
    {
        let mut part = format!("{header}\n");
        for r in chunk.iter() {
            part.push_str(r);
            part.push('\n');
        }
        // Names sort in row order; the last part has no final newline.
        if i == 2 {
            part.pop();
        }
        std::fs::write(folder.join(format!("part-{i:05}.csv")), part).unwrap();
    }
    std::fs::write(folder.join("_SUCCESS"), "").unwrap();
    for (w, align) in [(1usize, true), (2, true), (2, false)] {
        let tag = format!("w{w}{}", if align { "" } else { "u" });
        for d in [&dir, &split] {
            let (pr, ps) = (free_port(), free_port());
            let mut extra: Vec<String> = ["--protocol", "rr22", "--bucket-size", "150"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            if !align {
                extra.push("--no-align".into());
            }
            extra.extend(worker_flags(w));
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let cr = party(d, "receiver", pr, ps, &tag, &extra);
            let cs = party(d, "sender", ps, pr, &tag, &extra);
            let (okr, er) = wait(cr, LIMIT);
            let (oks, es) = wait(cs, LIMIT);
            assert!(okr && oks, "parts {tag}: {er}\n{es}");
        }
        for me in ["receiver", "sender"] {
            let one = std::fs::read(dir.join(format!("{me}_{tag}.csv"))).unwrap();
            let parts = std::fs::read(split.join(format!("{me}_{tag}.csv"))).unwrap();
            assert!(one.len() > 20);
            assert!(
                one == parts,
                "{tag}: {me}'s output differs with a folder of parts"
            );
        }
    }
}
