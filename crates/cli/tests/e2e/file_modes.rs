//! The files a run makes hold the user's rows: two real `blindjoin run` processes on 127.0.0.1,
//! watched while they run, must make every folder 0700 and every file 0600 (spill shards,
//! sorted runs, the recovery folder, the outputs), and refuse
//! an ECDH key file that others can read.

use crate::support::{BIN, free_port, tmp, write_scores};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a watched pair may run.
const LIMIT: Duration = Duration::from_secs(240);

/// What was seen at a path: a folder or not, and its permission bits.
type Seen = BTreeMap<PathBuf, (bool, u32)>;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Starts `blindjoin run` for `role` in buckets of 20000 keys, reading `dir/ROLE.parquet` and
/// writing `dir/ROLE_out.csv`, with `extra` flags.
fn party(dir: &Path, role: &str, me: u16, peer: u16, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args(["run", "--role", role, "--keys", "id"])
        .args(["--self", &format!("127.0.0.1:{me}")])
        .args(["--peer", &format!("127.0.0.1:{peer}")])
        .args(["--broadcast-result", "--quiet", "--bucket-size", "20000"])
        .args(["--connect-timeout", "30"])
        .args(extra)
        .arg("--input")
        .arg(dir.join(format!("{role}.parquet")))
        .arg("--output")
        .arg(dir.join(format!("{role}_out.csv")))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Everything under `root` right now (entries that vanish while it is walked are skipped).
fn walk(root: &Path, seen: &mut Seen) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        seen.insert(p.clone(), (m.is_dir(), m.permissions().mode() & 0o7777));
        if m.is_dir() {
            walk(&p, seen);
        }
    }
}

/// Both parties' success and stderr, and every path seen under `root` while they ran (polled
/// until both exit, at most [`LIMIT`]).
fn watch(root: &Path, parties: [Child; 2]) -> (Seen, Vec<(bool, String)>) {
    let t = Instant::now();
    let mut seen = Seen::new();
    let mut running: Vec<Option<Child>> = parties.into_iter().map(Some).collect();
    let mut done = vec![None, None];
    while done.iter().any(Option::is_none) {
        walk(root, &mut seen);
        for (i, slot) in running.iter_mut().enumerate() {
            let exited = slot
                .as_mut()
                .is_some_and(|c| c.try_wait().unwrap().is_some());
            if exited {
                let out = slot.take().unwrap().wait_with_output().unwrap();
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                done[i] = Some((out.status.success(), err));
            }
        }
        if t.elapsed() > LIMIT {
            for c in running.iter_mut().flatten() {
                let _ = c.kill();
            }
            panic!("a party did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    walk(root, &mut seen);
    (seen, done.into_iter().flatten().collect())
}

/// Every folder seen is 0700 and every file 0600.
fn assert_private(seen: &Seen) {
    for (p, &(is_dir, m)) in seen {
        let want = if is_dir { 0o700 } else { 0o600 };
        assert_eq!(m, want, "{} has mode {m:04o}", p.display());
    }
}

fn named<'a>(seen: &'a Seen, f: impl Fn(&str) -> bool + 'a) -> impl Iterator<Item = &'a PathBuf> {
    seen.keys()
        .filter(move |p| p.file_name().is_some_and(|n| f(&n.to_string_lossy())))
}

/// The required end-to-end check: `--spill always` into a `--spill-dir` the user left open to
/// others (0755, warned about), on Parquet inputs (whose rows are spilled as typed values; no
/// CSV copy of them is made).
#[test]
fn spill_files_are_private_while_the_run_lasts() {
    let dir = tmp("modes", "spill");
    write_scores(&dir.join("receiver.parquet"), 0..300_000);
    write_scores(&dir.join("sender.parquet"), 150_000..450_000);
    let spill = dir.join("spill");
    std::fs::create_dir(&spill).unwrap();
    chmod(&spill, 0o755);
    let (pr, ps) = (free_port(), free_port());
    let flags = [
        "--protocol",
        "rr22",
        "--spill",
        "always",
        "--spill-dir",
        spill.to_str().unwrap(),
    ];
    let r = party(&dir, "receiver", pr, ps, &flags);
    let s = party(&dir, "sender", ps, pr, &flags);
    let (seen, done) = watch(&spill, [r, s]);
    for (ok, err) in &done {
        assert!(ok, "{err}");
    }
    assert_private(&seen);
    for (_, err) in &done {
        assert!(
            err.contains("warning") && err.contains("spill_dir") && err.contains("0755"),
            "the open spill_dir is warned about: {err}"
        );
    }
    // What there was to see: each party's run folder, its shards and its sorted runs, and no
    // CSV copy of the Parquet input.
    let spill_dirs = named(&seen, |n| n.starts_with(".blindjoin-spill-")).count();
    let parquet_dirs = named(&seen, |n| n.starts_with(".blindjoin-parquet-")).count();
    assert_eq!((spill_dirs, parquet_dirs), (2, 0), "{seen:#?}");
    assert!(
        named(&seen, |n| n.starts_with("shard-")).count() >= 2,
        "{seen:#?}"
    );
    assert!(
        named(&seen, |n| n.ends_with("-runs")).count() >= 2,
        "{seen:#?}"
    );
    assert_eq!(
        named(&seen, |n| n.ends_with(".csv")).count(),
        0,
        "{seen:#?}"
    );
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0, "all removed");
    // The outputs and reports hold the user's rows too.
    for role in ["receiver", "sender"] {
        for f in [
            format!("{role}_out.csv"),
            format!("{role}_out.csv.report.json"),
        ] {
            assert_eq!(mode(&dir.join(&f)), 0o600, "{f}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A recovery folder we create (with its missing parent) is 0700 and everything in it private.
#[test]
fn the_recovery_folder_is_private() {
    let dir = tmp("modes", "recovery");
    write_scores(&dir.join("receiver.parquet"), 0..60_000);
    write_scores(&dir.join("sender.parquet"), 30_000..90_000);
    let rec = dir.join("rec");
    let (pr, ps) = (free_port(), free_port());
    let folder = |role: &str| rec.join(role).join("folder");
    let flags = |role: &str| {
        ["--protocol", "rr22", "--recovery-dir"]
            .map(String::from)
            .into_iter()
            .chain([folder(role).display().to_string()])
            .collect::<Vec<_>>()
    };
    let (fr, fs) = (flags("receiver"), flags("sender"));
    let (fr, fs): (Vec<&str>, Vec<&str>) = (
        fr.iter().map(String::as_str).collect(),
        fs.iter().map(String::as_str).collect(),
    );
    let r = party(&dir, "receiver", pr, ps, &fr);
    let s = party(&dir, "sender", ps, pr, &fs);
    let (seen, done) = watch(&rec, [r, s]);
    for (ok, err) in &done {
        assert!(ok, "{err}");
    }
    assert_private(&seen);
    for role in ["receiver", "sender"] {
        let f = folder(role);
        assert!(seen.contains_key(&f.join("shards")), "{seen:#?}");
        assert!(seen.contains_key(&f.join("checkpoint.json")), "{seen:#?}");
        assert!(seen.contains_key(&f.join("matched-runs")), "{seen:#?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--secret-key` (ECDH's `secret_key_path`) is refused, before any input is read, when group
/// or others can read it; the error names the fix.
#[test]
fn an_ecdh_key_file_others_can_read_is_refused() {
    let dir = tmp("modes", "key");
    write_scores(&dir.join("receiver.parquet"), 0..10);
    let key = dir.join("ecdh.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    chmod(&key, 0o644);
    let (me, peer) = (free_port(), free_port());
    let flags = ["--protocol", "ecdh", "--secret-key", key.to_str().unwrap()];
    let c = party(&dir, "receiver", me, peer, &flags);
    let (ok, err) = crate::support::wait(c, Duration::from_secs(60));
    assert!(!ok);
    assert!(
        err.contains(&format!("chmod 600 {}", key.display())) && err.contains("0644"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
