//! Operations end to end, real `blindjoin` processes on 127.0.0.1: `debug_options.trace_path`
//! writes a trace-event JSON of the run's stages (two-party, three-party, unbalanced) that
//! Perfetto opens; `logging_level` / `--log-level` decide what stderr shows while the report on
//! stdout stays the same; `--threads` / `blindjoin.threads`; and `check_hash_digest` with
//! SecretFlow's meaning (equal key sets skip the protocol; unequal ones run it).

use crate::support::{BIN, free_port, tmp, wait};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

/// Waits at most [`LIMIT`], then kills: no test can hang.
fn finish(mut c: Child) -> Output {
    let deadline = Instant::now() + LIMIT;
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = c.kill();
            panic!("a blindjoin process hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

fn spawn(dir: &Path, args: &[&str]) -> Child {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A two-party SecretFlow v2 config for `me` (RR22 in buckets of 200 rows, so a run has
/// several), with `psi` lines added to `psi_config` and `top` lines at the top level.
fn two_party_config(dir: &Path, me: &str, ports: (u16, u16), psi: &str, top: &str) -> String {
    let role = if me == "receiver" {
        "ROLE_RECEIVER"
    } else {
        "ROLE_SENDER"
    };
    let text = format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{
      "protocol": "PROTOCOL_RR22",
      "rr22_config": {{ "bucket_size": "200" }},
      "role": "{role}",
      "broadcast_result": true
    }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}_out.csv" }},
    "keys": ["id"],
    {psi}
    "advanced_join_type": "ADVANCED_JOIN_TYPE_UNSPECIFIED"
  }},
  "link_config": {{
    "parties": [
      {{ "id": "receiver", "host": "127.0.0.1:{}" }},
      {{ "id": "sender", "host": "127.0.0.1:{}" }}
    ]
  }},
  {top}
  "self_link_party": "{me}"
}}"#,
        ports.0, ports.1
    );
    let name = format!("{me}.json");
    std::fs::write(dir.join(&name), text).unwrap();
    name
}

/// `receiver.csv` and `sender.csv`: keys `r_keys` and `s_keys`, each row `id,val`.
fn tables(dir: &Path, r_keys: &[String], s_keys: &[String]) {
    for (name, keys) in [("receiver", r_keys), ("sender", s_keys)] {
        let mut t = String::from("id,val\n");
        for (i, k) in keys.iter().enumerate() {
            t += &format!("{k},{name}{i}\n");
        }
        std::fs::write(dir.join(format!("{name}.csv")), t).unwrap();
    }
}

fn keys(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("k{i}")).collect()
}

/// Runs both parties of a two-party config pair with `extra` flags; returns their outputs
/// (receiver, sender).
fn run_pair(dir: &Path, extra: &[&str]) -> (Output, Output) {
    let mut args = vec!["run", "--config", "receiver.json"];
    args.extend(extra);
    let r = spawn(dir, &args);
    args[2] = "sender.json";
    let s = spawn(dir, &args);
    (finish(r), finish(s))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn report(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Reads a trace file and checks what every trace must be: JSON with a `traceEvents` array
/// whose complete events start in order with non-negative durations, mode 0600. Returns the
/// events' names in order.
fn trace_names(path: &Path) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    assert_eq!(events[0]["ph"], "M", "the process name comes first");
    let mut last = 0.0;
    let mut names = Vec::new();
    for e in &events[1..] {
        assert_eq!(e["ph"], "X");
        let ts = e["ts"].as_f64().unwrap();
        let dur = e["dur"].as_f64().unwrap();
        assert!(ts >= last && dur >= 0.0, "{e}");
        last = ts;
        names.push(e["name"].as_str().unwrap().to_string());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
    names
}

/// Whether `want` appear in `names` in this order (other names may come between).
fn in_order(names: &[String], want: &[&str]) -> bool {
    let mut it = names.iter();
    want.iter().all(|w| it.any(|n| n == w))
}

#[test]
fn a_two_party_trace_has_every_stage_in_order_and_debug_logs_them() {
    let dir = tmp("ops", "trace2");
    tables(&dir, &keys(0..700), &keys(300..1000));
    let p = (free_port(), free_port());
    for me in ["receiver", "sender"] {
        two_party_config(
            &dir,
            me,
            p,
            &format!(
                r#""debug_options": {{ "logging_level": "DEBUG", "trace_path": "{me}.trace" }},"#
            ),
            r#""blindjoin": { "threads": 1 },"#,
        );
    }
    let (r, s) = run_pair(&dir, &[]);
    assert!(
        r.status.success() && s.status.success(),
        "{}{}",
        stderr(&r),
        stderr(&s)
    );
    for (me, out) in [("receiver", &r), ("sender", &s)] {
        let names = trace_names(&dir.join(format!("{me}.trace")));
        assert!(
            in_order(
                &names,
                &[
                    "run",
                    "read input",
                    "connect",
                    "handshake",
                    "buckets",
                    "bucket",
                    "protocol",
                    "join",
                    "bucket",
                    "finish (totals and checks with the peer)",
                    "merge and write output",
                ]
            ),
            "{me}: {names:?}"
        );
        let buckets = names.iter().filter(|n| *n == "bucket").count() as u64;
        assert_eq!(buckets, report(out)["buckets"].as_u64().unwrap(), "{me}");
        assert!(buckets > 1);
        // `debug`: each stage's time on stderr, besides the summary.
        let err = stderr(out);
        assert!(err.contains("[debug] handshake:"), "{err}");
        assert!(!err.contains("[trace]"), "{err}");
    }
    assert_eq!(report(&r)["intersection_count"], 400);
}

#[test]
fn logging_levels_change_stderr_only() {
    let dir = tmp("ops", "levels");
    tables(&dir, &keys(0..50), &keys(25..75));
    let p = (free_port(), free_port());
    for me in ["receiver", "sender"] {
        two_party_config(&dir, me, p, "", "");
    }
    let strip = |o: &Output| {
        // The report minus what differs between any two runs.
        let mut v = report(o);
        for k in [
            "stages",
            "bucket_s",
            "peak_rss_bytes",
            "bucket_peak_rss_bytes",
        ] {
            v.as_object_mut().unwrap().remove(k);
        }
        v
    };
    let (base, _) = run_pair(&dir, &[]);
    assert!(base.status.success());
    // `info` (the default): the summary, no stage times.
    let info = stderr(&base);
    assert!(info.contains("intersection: 25 keys"), "{info}");
    assert!(!info.contains("[debug]"), "{info}");
    for (flags, check) in [
        (&["--log-level", "off"][..], "empty"),
        (&["--log-level", "warn"][..], "no summary"),
        (&["--log-level", "info", "--quiet"][..], "no summary"),
        (&["--log-level", "trace"][..], "buckets"),
    ] {
        let (r, s) = run_pair(&dir, flags);
        assert!(r.status.success() && s.status.success(), "{flags:?}");
        assert_eq!(strip(&r), strip(&base), "{flags:?}: the report changed");
        let err = stderr(&r);
        match check {
            "empty" => assert!(err.is_empty(), "{flags:?}: {err}"),
            "no summary" => assert!(!err.contains("intersection:"), "{flags:?}: {err}"),
            _ => assert!(
                err.contains("[trace] protocol of bucket 0:") && err.contains("intersection:"),
                "{flags:?}: {err}"
            ),
        }
    }
    // A failed run: `off` prints nothing but the exit code still says it; `err` prints the
    // error only; a bad level is a usage error.
    let missing = ["run", "--config", "nowhere.json"];
    let off = finish(spawn(
        &dir,
        &[&missing[..], &["--log-level", "off"]].concat(),
    ));
    assert_eq!(off.status.code(), Some(2));
    assert!(stderr(&off).is_empty(), "{}", stderr(&off));
    let err = finish(spawn(
        &dir,
        &[&missing[..], &["--log-level", "err"]].concat(),
    ));
    assert_eq!(err.status.code(), Some(2));
    assert!(
        stderr(&err).starts_with("blindjoin: error:"),
        "{}",
        stderr(&err)
    );
    let bad = finish(spawn(
        &dir,
        &[&missing[..], &["--log-level", "loud"]].concat(),
    ));
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("critical"), "{}", stderr(&bad));
}

#[test]
fn threads_flag_and_config_field_are_checked_and_a_run_with_one_thread_is_right() {
    let dir = tmp("ops", "threads");
    tables(&dir, &keys(0..300), &keys(100..400));
    let p = (free_port(), free_port());
    for me in ["receiver", "sender"] {
        two_party_config(&dir, me, p, "", r#""blindjoin": { "threads": 2 },"#);
    }
    // The flag overrides the config's 2.
    let (r, s) = run_pair(&dir, &["--threads", "1", "--log-level", "debug"]);
    assert!(r.status.success() && s.status.success(), "{}", stderr(&r));
    assert_eq!(report(&r)["intersection_count"], 200);
    assert!(
        stderr(&r).contains("[debug] thread pool: 1 threads"),
        "{}",
        stderr(&r)
    );
    let (r, _) = run_pair(&dir, &["--log-level", "debug"]);
    assert!(
        stderr(&r).contains("[debug] thread pool: 2 threads"),
        "{}",
        stderr(&r)
    );
    for bad in ["0", "1025", "many"] {
        let o = finish(spawn(
            &dir,
            &["run", "--config", "receiver.json", "--threads", bad],
        ));
        assert_eq!(o.status.code(), Some(2), "--threads {bad}");
    }
    two_party_config(
        &dir,
        "receiver",
        p,
        "",
        r#""blindjoin": { "threads": -3 },"#,
    );
    let o = finish(spawn(&dir, &["run", "--config", "receiver.json"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("blindjoin.threads"), "{}", stderr(&o));
}

/// The rows of a CSV output, header dropped, sorted.
fn sorted_rows(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows: Vec<String> = text.lines().skip(1).map(str::to_string).collect();
    rows.sort();
    rows
}

#[test]
fn check_hash_digest_skips_the_protocol_on_equal_key_sets_and_runs_it_otherwise() {
    let dir = tmp("ops", "digest");
    let p = (free_port(), free_port());
    for me in ["receiver", "sender"] {
        two_party_config(&dir, me, p, r#""check_hash_digest": true,"#, "");
    }
    // Equal sets: the sender's rows in another order, one key twice.
    let r_keys = keys(0..500);
    let mut s_keys: Vec<String> = keys(0..500).into_iter().rev().collect();
    s_keys.push("k42".into());
    tables(&dir, &r_keys, &s_keys);
    let (r, s) = run_pair(&dir, &[]);
    assert!(
        r.status.success() && s.status.success(),
        "{}{}",
        stderr(&r),
        stderr(&s)
    );
    let (rr, sr) = (report(&r), report(&s));
    assert_eq!(
        (&rr["key_sets_equal"], &sr["key_sets_equal"]),
        (&true.into(), &true.into())
    );
    // Every row of each side (the inner join pairs k42's two sender rows with the receiver's
    // one, so the receiver writes that row twice).
    assert_eq!(rr["intersection_count"], 501);
    assert_eq!(sr["intersection_count"], 501);
    let mut want: Vec<String> = (0..500).map(|i| format!("k{i},receiver{i}")).collect();
    want.push("k42,receiver42".into());
    want.sort();
    assert_eq!(sorted_rows(&dir.join("receiver_out.csv")), want);
    let mut want: Vec<String> = s_keys
        .iter()
        .enumerate()
        .map(|(i, k)| format!("{k},sender{i}"))
        .collect();
    want.sort();
    assert_eq!(sorted_rows(&dir.join("sender_out.csv")), want);
    let equal_bytes = rr["bytes_sent"].as_u64().unwrap();

    // One key differs: the protocol runs and finds the true intersection.
    let mut s_keys = keys(0..500);
    s_keys[7] = "other".into();
    tables(&dir, &r_keys, &s_keys);
    let (r, s) = run_pair(&dir, &[]);
    assert!(
        r.status.success() && s.status.success(),
        "{}{}",
        stderr(&r),
        stderr(&s)
    );
    let (rr, sr) = (report(&r), report(&s));
    assert_eq!(
        (&rr["key_sets_equal"], &sr["key_sets_equal"]),
        (&false.into(), &false.into())
    );
    assert_eq!(rr["intersection_count"], 499);
    let got = sorted_rows(&dir.join("receiver_out.csv"));
    assert_eq!(got.len(), 499);
    assert!(!got.iter().any(|r| r.starts_with("k7,")));
    // Skipping the protocol sent far less.
    assert!(equal_bytes * 4 < rr["bytes_sent"].as_u64().unwrap());
}

/// A three-party config (ECDH_3PC) with a trace.
fn three_party_config(dir: &Path, me: &str, ports: &[u16; 3]) {
    let parties: Vec<String> = ["alice", "bob", "carol"]
        .iter()
        .zip(ports)
        .map(|(id, p)| format!(r#"{{ "id": "{id}", "host": "127.0.0.1:{p}" }}"#))
        .collect();
    let text = format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{
      "protocol": "PROTOCOL_ECDH_3PC",
      "receiver": "alice",
      "ecdh_config": {{ "curve": "CURVE_25519" }},
      "broadcast_result": false
    }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "{me}_out.csv" }},
    "keys": ["id"],
    "debug_options": {{ "trace_path": "{me}.trace" }}
  }},
  "link_config": {{ "parties": [{}], "connect_retry_times": 30 }},
  "self_link_party": "{me}"
}}"#,
        parties.join(", ")
    );
    std::fs::write(dir.join(format!("{me}.json")), text).unwrap();
}

#[test]
fn three_party_and_unbalanced_runs_write_traces_too() {
    let dir = tmp("ops", "trace3");
    let ports = [free_port(), free_port(), free_port()];
    for (i, me) in ["alice", "bob", "carol"].iter().enumerate() {
        let mut t = String::from("id,v\n");
        for k in (i as u32 * 10)..(100 + i as u32 * 10) {
            t += &format!("k{k},{me}\n");
        }
        std::fs::write(dir.join(format!("{me}.csv")), t).unwrap();
        three_party_config(&dir, me, &ports);
    }
    let kids: Vec<Child> = ["alice", "bob", "carol"]
        .iter()
        .map(|me| spawn(&dir, &["run", "--quiet", "--config", &format!("{me}.json")]))
        .collect();
    for k in kids {
        let (ok, err) = wait(k, LIMIT);
        assert!(ok, "{err}");
    }
    for me in ["alice", "bob", "carol"] {
        let names = trace_names(&dir.join(format!("{me}.trace")));
        assert!(
            in_order(
                &names,
                &[
                    "run",
                    "read input",
                    "connect",
                    "handshake",
                    "buckets",
                    "bucket",
                    "protocol",
                    "join"
                ]
            ),
            "{me}: {names:?}"
        );
    }
    assert!(trace_names(&dir.join("alice.trace")).contains(&"merge and write output".into()));

    // Unbalanced, full mode: the phases it reports.
    let dir = tmp("ops", "trace-ub");
    let mut s = String::from("id,s\n");
    for i in 0..300 {
        s += &format!("{i},s{i}\n");
    }
    std::fs::write(dir.join("server.csv"), s).unwrap();
    std::fs::write(dir.join("client.csv"), "id,c\n5,a\n299,b\n1000,c\n").unwrap();
    let (ps, pc) = (free_port(), free_port());
    for (me, role, body) in [
        (
            "server",
            "ROLE_SERVER",
            r#""input_config": {"type": "IO_TYPE_FILE_CSV", "path": "server.csv"},
    "keys": ["id"], "server_secret_key_path": "server.key", "cache_path": "server_cache",
    "server_get_result": false, "client_get_result": true"#,
        ),
        (
            "client",
            "ROLE_CLIENT",
            r#""input_config": {"type": "IO_TYPE_FILE_CSV", "path": "client.csv"},
    "keys": ["id"], "cache_path": "client_cache",
    "output_config": {"type": "IO_TYPE_FILE_CSV", "path": "client_out.csv"},
    "server_get_result": false, "client_get_result": true"#,
        ),
    ] {
        let text = format!(
            r#"{{
  "ub_psi_config": {{
    "mode": "MODE_FULL", "role": "{role}",
    "debug_options": {{ "trace_path": "{me}.trace" }},
    {body}
  }},
  "link_config": {{ "parties": [
    {{"id": "server", "host": "127.0.0.1:{ps}"}}, {{"id": "client", "host": "127.0.0.1:{pc}"}} ] }},
  "self_link_party": "{me}"
}}"#
        );
        std::fs::write(dir.join(format!("{me}.json")), text).unwrap();
    }
    let s = spawn(&dir, &["run", "--quiet", "--config", "server.json"]);
    let c = spawn(&dir, &["run", "--quiet", "--config", "client.json"]);
    let (ok_s, err_s) = wait(s, LIMIT);
    let (ok_c, err_c) = wait(c, LIMIT);
    assert!(ok_s && ok_c, "{err_s}{err_c}");
    for me in ["server", "client"] {
        let names = trace_names(&dir.join(format!("{me}.trace")));
        assert_eq!(
            names.first().map(String::as_str),
            Some("run"),
            "{me}: {names:?}"
        );
        assert!(names.contains(&"online".to_string()), "{me}: {names:?}");
    }
}
