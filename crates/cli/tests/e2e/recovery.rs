//! Resume after `kill -9`: two real processes with `--recovery-dir`, one of them killed at
//! random moments again and again; the final rerun must write exactly the bytes of an
//! uninterrupted run. `BJ_KILLS=20 cargo test --release -p blindjoin-cli --test e2e recovery::`
//! runs the acceptance's 20 kills (default 4).

use crate::support::{free_port, gen_tables, party as spawn_party, tmp, wait};
use std::time::Duration;

/// A cheap deterministic sequence for kill times and victims.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A party of this test: RR22 in buckets of 400 rows, so there are many checkpoints to land on.
fn party(
    dir: &std::path::Path,
    role: &str,
    me: u16,
    peer: u16,
    out: &str,
    extra: &[&str],
) -> std::process::Child {
    let mut args = vec![
        "--protocol",
        "rr22",
        "--bucket-size",
        "400",
        "--connect-timeout",
        "5",
    ];
    args.extend_from_slice(extra);
    spawn_party(dir, role, me, peer, out, &args)
}

#[test]
fn kill_9_and_resume_gives_identical_output() {
    let dir = tmp("rec", "kill");
    gen_tables(&dir, "24000,20000", "9000", &["--duplicates", "0.2"]);

    // The reference: one uninterrupted run without recovery.
    let (pr, ps) = (free_port(), free_port());
    let r = party(&dir, "receiver", pr, ps, "ref", &[]);
    let s = party(&dir, "sender", ps, pr, "ref", &[]);
    let (ok_r, err_r) = wait(r, Duration::from_secs(120));
    let (ok_s, err_s) = wait(s, Duration::from_secs(120));
    assert!(ok_r && ok_s, "{err_r}\n{err_s}");

    let rec = |role: &str| dir.join(format!("recovery-{role}"));
    let args = |role: &str| {
        vec![
            "--recovery-dir".to_string(),
            rec(role).display().to_string(),
        ]
    };
    let kills: u64 = std::env::var("BJ_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let mut rng = Lcg(0x5eed);
    let mut resumed = 0;
    let mut done = 0;
    while done < kills {
        let (pr, ps) = (free_port(), free_port());
        let (ar, as_) = (args("receiver"), args("sender"));
        let ar: Vec<&str> = ar.iter().map(String::as_str).collect();
        let as_: Vec<&str> = as_.iter().map(String::as_str).collect();
        let mut r = party(&dir, "receiver", pr, ps, "rec", &ar);
        let mut s = party(&dir, "sender", ps, pr, "rec", &as_);
        std::thread::sleep(Duration::from_millis(50 + rng.below(700)));
        let victim = if rng.below(2) == 0 { &mut r } else { &mut s };
        let killed = victim.try_wait().unwrap().is_none() && victim.kill().is_ok();
        let (_, _) = wait(r, Duration::from_secs(120));
        let (_, _) = wait(s, Duration::from_secs(120));
        if !killed {
            // Both had finished: start over so every kill lands mid-run.
            std::fs::remove_dir_all(rec("receiver")).ok();
            std::fs::remove_dir_all(rec("sender")).ok();
            continue;
        }
        done += 1;
        let at = |role: &str| -> String {
            std::fs::read(rec(role).join("checkpoint.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .map_or("none".into(), |v| v["current"]["buckets_done"].to_string())
        };
        eprintln!(
            "kill {done}: checkpoints at bucket {} / {}",
            at("receiver"),
            at("sender")
        );
    }
    // A changed setting is refused, naming the folder.
    let (pr, ps) = (free_port(), free_port());
    let mut changed = args("receiver");
    changed.extend(["--no-align".to_string()]);
    let changed: Vec<&str> = changed.iter().map(String::as_str).collect();
    let r = party(&dir, "receiver", pr, ps, "rec", &changed);
    let (ok, err) = wait(r, Duration::from_secs(60));
    assert!(
        !ok && err.contains("recovery") && err.contains("changed"),
        "{err}"
    );

    // The final, uninterrupted rerun resumes and finishes.
    let (pr, ps) = (free_port(), free_port());
    let (ar, as_) = (args("receiver"), args("sender"));
    let ar: Vec<&str> = ar.iter().map(String::as_str).collect();
    let as_: Vec<&str> = as_.iter().map(String::as_str).collect();
    let r = party(&dir, "receiver", pr, ps, "rec", &ar);
    let s = party(&dir, "sender", ps, pr, "rec", &as_);
    let (ok_r, err_r) = wait(r, Duration::from_secs(120));
    let (ok_s, err_s) = wait(s, Duration::from_secs(120));
    assert!(ok_r && ok_s, "{err_r}\n{err_s}");
    for role in ["receiver", "sender"] {
        let a = std::fs::read(dir.join(format!("{role}_ref.csv"))).unwrap();
        let b = std::fs::read(dir.join(format!("{role}_rec.csv"))).unwrap();
        assert!(
            a == b,
            "{role}: the resumed output differs from the uninterrupted one"
        );
        let report: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join(format!("{role}_rec.csv.report.json"))).unwrap(),
        )
        .unwrap();
        if report["resumed_at_bucket"].as_u64().unwrap() > 0 {
            resumed += 1;
        }
    }
    assert!(resumed > 0, "the final run resumed from a checkpoint");
}
