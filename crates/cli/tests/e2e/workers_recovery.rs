//! Resume after `kill -9` with 2 workers per party (`--recovery-dir` and `--workers 2`): each
//! partition keeps its own checkpoint, a party killed at random moments (either one) is started
//! again with the same command, and the final rerun writes exactly the bytes of an
//! uninterrupted one-worker run without recovery. `BJ_KILLS=20` runs 20 kills (default 3).

use super::workers::worker_flags;
use crate::support::{free_port, gen_tables, party as spawn_party, tmp, wait};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// A party of this test: RR22 in buckets of 400 rows, so each partition has many checkpoints
/// to land on.
fn party(
    dir: &Path,
    role: &str,
    me: u16,
    peer: u16,
    out: &str,
    extra: &[String],
) -> std::process::Child {
    let mut args: Vec<&str> = vec![
        "--protocol",
        "rr22",
        "--bucket-size",
        "400",
        "--connect-timeout",
        "5",
    ];
    args.extend(extra.iter().map(String::as_str));
    spawn_party(dir, role, me, peer, out, &args)
}

/// Where partition `p`'s checkpoint of `role` stands ("none" without one).
fn partition_at(rec: &Path, p: usize) -> String {
    std::fs::read(
        rec.join("partitions")
            .join(format!("p{p}"))
            .join("checkpoint.json"),
    )
    .ok()
    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    .map_or("none".into(), |v| v["current"]["buckets_done"].to_string())
}

#[test]
fn two_workers_kill_9_and_resume_gives_identical_output() {
    let dir = tmp("wrec", "kill");
    gen_tables(&dir, "24000,20000", "9000", &["--duplicates", "0.2"]);

    // The reference: one worker, no recovery, never killed.
    let (pr, ps) = (free_port(), free_port());
    let r = party(&dir, "receiver", pr, ps, "ref", &[]);
    let s = party(&dir, "sender", ps, pr, "ref", &[]);
    let (ok_r, err_r) = wait(r, LIMIT);
    let (ok_s, err_s) = wait(s, LIMIT);
    assert!(ok_r && ok_s, "{err_r}\n{err_s}");

    let rec = |role: &str| dir.join(format!("recovery-{role}"));
    let args = |role: &str, workers: &[String]| -> Vec<String> {
        let mut a = vec![
            "--recovery-dir".to_string(),
            rec(role).display().to_string(),
        ];
        a.extend_from_slice(workers);
        a
    };
    let kills: u64 = std::env::var("BJ_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut seed = 0x5eed_u64;
    let mut below = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut done = 0;
    // Bounded: every round either kills a running party or starts over, and at most
    // 4 × kills rounds run.
    for _ in 0..4 * kills {
        if done == kills {
            break;
        }
        let (pr, ps) = (free_port(), free_port());
        let w = worker_flags(2);
        let mut r = party(&dir, "receiver", pr, ps, "rec", &args("receiver", &w));
        let mut s = party(&dir, "sender", ps, pr, "rec", &args("sender", &w));
        std::thread::sleep(Duration::from_millis(150 + below(900)));
        let victim = if below(2) == 0 { &mut r } else { &mut s };
        // `Child::kill` is SIGKILL: no handler runs, nothing is flushed.
        let killed = victim.try_wait().unwrap().is_none() && victim.kill().is_ok();
        let _ = wait(r, LIMIT);
        let _ = wait(s, LIMIT);
        if !killed {
            // Both had finished: start over so every kill lands mid-run.
            std::fs::remove_dir_all(rec("receiver")).ok();
            std::fs::remove_dir_all(rec("sender")).ok();
            continue;
        }
        done += 1;
        eprintln!(
            "kill {done}: partitions at buckets {}/{} (receiver), {}/{} (sender)",
            partition_at(&rec("receiver"), 0),
            partition_at(&rec("receiver"), 1),
            partition_at(&rec("sender"), 0),
            partition_at(&rec("sender"), 1),
        );
    }
    assert_eq!(done, kills, "every kill landed mid-run");

    // The final, uninterrupted rerun resumes and finishes.
    let (pr, ps) = (free_port(), free_port());
    let w = worker_flags(2);
    let r = party(&dir, "receiver", pr, ps, "rec", &args("receiver", &w));
    let s = party(&dir, "sender", ps, pr, "rec", &args("sender", &w));
    let (ok_r, err_r) = wait(r, LIMIT);
    let (ok_s, err_s) = wait(s, LIMIT);
    assert!(ok_r && ok_s, "{err_r}\n{err_s}");
    let mut resumed = 0;
    for role in ["receiver", "sender"] {
        let a = std::fs::read(dir.join(format!("{role}_ref.csv"))).unwrap();
        let b = std::fs::read(dir.join(format!("{role}_rec.csv"))).unwrap();
        assert!(a.len() > 20, "{role}: the output is nearly empty");
        assert!(
            a == b,
            "{role}: the resumed 2-worker output differs from the uninterrupted one"
        );
        let report: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join(format!("{role}_rec.csv.report.json"))).unwrap(),
        )
        .unwrap();
        resumed += report["resumed_at_bucket"].as_u64().unwrap();
        for p in 0..2 {
            assert_ne!(partition_at(&rec(role), p), "none", "{role} p{p}");
        }
    }
    assert!(resumed > 0, "the final run took buckets from checkpoints");

    // Run again with both partitions finished on both sides: nothing is redone, same bytes.
    for role in ["receiver", "sender"] {
        std::fs::remove_file(dir.join(format!("{role}_rec.csv"))).unwrap();
    }
    let (pr, ps) = (free_port(), free_port());
    let w = worker_flags(2);
    let r = party(&dir, "receiver", pr, ps, "rec", &args("receiver", &w));
    let s = party(&dir, "sender", ps, pr, "rec", &args("sender", &w));
    let (ok_r, err_r) = wait(r, LIMIT);
    let (ok_s, err_s) = wait(s, LIMIT);
    assert!(ok_r && ok_s, "{err_r}\n{err_s}");
    for role in ["receiver", "sender"] {
        let a = std::fs::read(dir.join(format!("{role}_ref.csv"))).unwrap();
        let b = std::fs::read(dir.join(format!("{role}_rec.csv"))).unwrap();
        assert!(a == b, "{role}: the rerun of a finished run differs");
        let report: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join(format!("{role}_rec.csv.report.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(
            report["resumed_at_bucket"].as_u64(),
            report["buckets"].as_u64(),
            "{role}: every bucket came from the checkpoints"
        );
    }

    // The folders hold 2-worker progress: a one-worker rerun is refused on both sides.
    let (pr, ps) = (free_port(), free_port());
    let one = worker_flags(1);
    let r = party(&dir, "receiver", pr, ps, "rec", &args("receiver", &one));
    let s = party(&dir, "sender", ps, pr, "rec", &args("sender", &one));
    let (ok_r, err_r) = wait(r, LIMIT);
    let (ok_s, _) = wait(s, LIMIT);
    assert!(!ok_r && !ok_s);
    assert!(
        err_r.contains("2 worker(s)") && err_r.contains("--workers 2"),
        "{err_r}"
    );
}
