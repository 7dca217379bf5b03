//! Resume after `kill -9`: two real processes with `--recovery-dir`, one of them killed at
//! random moments again and again; the final rerun must write exactly the bytes of an
//! uninterrupted run. `BJ_KILLS=20 cargo test --release -p blindjoin-cli --test recovery`
//! runs the acceptance's 20 kills (default 4).

// Test helpers outside `#[test]` functions: failing loudly is what a test should do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_blindjoin");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bj-rec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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

fn party(dir: &Path, role: &str, me: u16, peer: u16, out: &str, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args(["run", "--role", role, "--protocol", "rr22", "--keys", "id"])
        .args(["--self", &format!("127.0.0.1:{me}")])
        .args(["--peer", &format!("127.0.0.1:{peer}")])
        .args(["--broadcast-result", "--connect-timeout", "5", "--quiet"])
        .args(["--bucket-size", "400"])
        .args(extra)
        .arg("--input")
        .arg(dir.join(format!("{role}.csv")))
        .arg("--output")
        .arg(dir.join(format!("{role}_{out}.csv")))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait(mut c: Child, limit: Duration) -> (bool, String) {
    let t = Instant::now();
    loop {
        if let Some(status) = c.try_wait().unwrap() {
            let out = c.wait_with_output().unwrap();
            return (
                status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            panic!("a party did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn kill_9_and_resume_gives_identical_output() {
    let dir = tmp("kill");
    let gen_out = Command::new(BIN)
        .args([
            "gen",
            "--rows",
            "24000,20000",
            "--overlap",
            "9000",
            "--seed",
            "5",
        ])
        .args(["--duplicates", "0.2", "--out-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(gen_out.status.success());
    std::fs::rename(dir.join("alice.csv"), dir.join("receiver.csv")).unwrap();
    std::fs::rename(dir.join("bob.csv"), dir.join("sender.csv")).unwrap();

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
