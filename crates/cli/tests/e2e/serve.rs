//! `blindjoin serve` for unbalanced PSI: one server process answering several `blindjoin run`
//! clients at once, each with its unchanged `MODE_ONLINE` client config — client ids that sort
//! before the server's and after it — every answer checked against the plain intersection; the
//! key's query budget shared across sessions; and a clean stop on SIGTERM.

use crate::support::{BIN, free_port, signal, tmp, wait};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

/// The server's table: ids 0..2000.
fn server_table(dir: &Path) {
    let mut s = String::from("id,s_val\n");
    for i in 0..2000 {
        s += &format!("{i},s{i}\n");
    }
    std::fs::write(dir.join("server.csv"), s).unwrap();
}

/// Client `n`'s table: 100 ids from `1950 - 40 n` on, some of them the server's.
fn client_table(dir: &Path, n: usize) -> Vec<String> {
    let first = 1950 - 40 * n;
    let mut c = String::from("c_val,id\n");
    let mut shared = Vec::new();
    for i in first..first + 100 {
        c += &format!("c{i},{i}\n");
        if i < 2000 {
            shared.push(i.to_string());
        }
    }
    std::fs::write(dir.join(format!("client{n}.csv")), c).unwrap();
    shared.sort();
    shared
}

/// A `ub_psi_config` launch: the server (id "server") at `server_port`, the client `client`.
fn config(
    dir: &Path,
    name: &str,
    me: &str,
    client: &str,
    mode: &str,
    ports: (u16, u16),
    body: &str,
) {
    let role = if me == "server" {
        "ROLE_SERVER"
    } else {
        "ROLE_CLIENT"
    };
    let text = format!(
        r#"{{
  "ub_psi_config": {{
    "mode": "{mode}", "role": "{role}",
    "server_get_result": false, "client_get_result": true,
    {body}
  }},
  "link_config": {{
    "parties": [
      {{"id": "server", "host": "127.0.0.1:{}"}},
      {{"id": "{client}", "host": "127.0.0.1:{}"}}
    ],
    "connect_retry_times": 30, "connect_retry_interval_ms": 1000
  }},
  "self_link_party": "{me}"
}}"#,
        ports.0, ports.1
    );
    std::fs::write(dir.join(name), text).unwrap();
}

const SERVER: &str = r#""input_config": {"type": "IO_TYPE_FILE_CSV", "path": "server.csv"},
    "keys": ["id"], "server_secret_key_path": "server.key", "cache_path": "server_cache""#;

fn client_body(n: usize) -> String {
    format!(
        r#""input_config": {{"type": "IO_TYPE_FILE_CSV", "path": "client{n}.csv"}},
    "keys": ["id"], "cache_path": "client{n}_cache",
    "output_config": {{"type": "IO_TYPE_FILE_CSV", "path": "client{n}_out.csv"}}"#
    )
}

fn start(dir: &Path, args: &[&str]) -> Child {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn ids(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().to_string())
        .collect()
}

/// The server's cache and key (gen cache), and client 0's copy of the cache (transfer),
/// which every client shares: `n` clients' tables and cache copies.
fn offline(dir: &Path, n: usize) -> Vec<Vec<String>> {
    server_table(dir);
    let p = (free_port(), free_port());
    config(
        dir,
        "gen.json",
        "server",
        "client",
        "MODE_OFFLINE_GEN_CACHE",
        p,
        SERVER,
    );
    let (ok, err) = wait(
        start(dir, &["run", "--quiet", "--config", "gen.json"]),
        LIMIT,
    );
    assert!(ok, "gen cache: {err}");
    config(
        dir,
        "ts.json",
        "server",
        "client",
        "MODE_OFFLINE_TRANSFER_CACHE",
        p,
        SERVER,
    );
    config(
        dir,
        "tc.json",
        "client",
        "client",
        "MODE_OFFLINE_TRANSFER_CACHE",
        p,
        &client_body(0),
    );
    let s = start(dir, &["run", "--quiet", "--config", "ts.json"]);
    let c = start(dir, &["run", "--quiet", "--config", "tc.json"]);
    let ((ok_s, err_s), (ok_c, err_c)) = (wait(s, LIMIT), wait(c, LIMIT));
    assert!(ok_s && ok_c, "transfer:\n{err_s}\n{err_c}");
    (0..n)
        .map(|i| {
            if i > 0 {
                std::fs::copy(
                    dir.join("client0_cache"),
                    dir.join(format!("client{i}_cache")),
                )
                .unwrap();
            }
            client_table(dir, i)
        })
        .collect()
}

/// Client `n` named `id`, reaching the server at `server_port`.
fn client(dir: &Path, n: usize, id: &str, server_port: u16) -> Child {
    let name = format!("oc{n}.json");
    config(
        dir,
        &name,
        id,
        id,
        "MODE_ONLINE",
        (server_port, free_port()),
        &client_body(n),
    );
    start(dir, &["run", "--quiet", "--config", &name])
}

#[test]
fn one_server_answers_clients_at_once_whatever_their_ids() {
    let dir = tmp("serve", "many");
    // "alice" and "bob" sort before "server" (they would listen by the ids' order), "zoe" and
    // "zz" after it.
    let names = ["alice", "zoe", "bob", "zz"];
    let want = offline(&dir, names.len());
    let port = free_port();
    config(
        &dir,
        "serve.json",
        "server",
        "client",
        "MODE_ONLINE",
        (port, free_port()),
        SERVER,
    );
    let server = start(
        &dir,
        &[
            "serve",
            "--config",
            "serve.json",
            "--max-sessions",
            "2",
            "--sessions",
            "4",
        ],
    );
    // A port probe (a health check: connect, close) is not a client and not a failure.
    let probed = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(probed.elapsed() < LIMIT, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let clients: Vec<Child> = names
        .iter()
        .enumerate()
        .map(|(n, id)| client(&dir, n, id, port))
        .collect();
    for (n, c) in clients.into_iter().enumerate() {
        let (ok, err) = wait(c, LIMIT);
        assert!(ok, "client {}: {err}", names[n]);
        assert_eq!(
            ids(&dir.join(format!("client{n}_out.csv"))),
            want[n],
            "client {n}"
        );
    }
    let out = server.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["sessions_ok"], 4, "{stderr}");
    assert_eq!(summary["sessions_failed"], 0, "{stderr}");
    assert_eq!(summary["items"], 400);
    for id in names {
        assert!(
            stderr.contains(&format!("client {id:?}, 100 items")),
            "{stderr}"
        );
    }
    // The server learns nothing: no output of its own.
    assert!(!dir.join("server_out.csv").exists());
}

#[test]
fn the_query_budget_is_the_keys_across_sessions_and_sigterm_stops_cleanly() {
    let dir = tmp("serve", "budget");
    let want = offline(&dir, 3);
    let port = free_port();
    // 250 client items for the key: two clients of 100 fit, the third is refused.
    config(
        &dir,
        "serve.json",
        "server",
        "client",
        "MODE_ONLINE",
        (port, free_port()),
        SERVER,
    );
    let text = std::fs::read_to_string(dir.join("serve.json")).unwrap();
    let text = text.replacen(
        "\"self_link_party\"",
        "\"blindjoin\": {\"max_query_items\": 250},\n  \"self_link_party\"",
        1,
    );
    std::fs::write(dir.join("serve.json"), text).unwrap();
    let server = start(
        &dir,
        &["serve", "--config", "serve.json", "--max-sessions", "1"],
    );
    for (n, want) in want.iter().enumerate().take(2) {
        let (ok, err) = wait(client(&dir, n, &format!("c{n}"), port), LIMIT);
        assert!(ok, "client {n}: {err}");
        assert_eq!(&ids(&dir.join(format!("client{n}_out.csv"))), want);
    }
    let (ok, err) = wait(client(&dir, 2, "c2", port), LIMIT);
    assert!(!ok, "the third client is over the key's budget");
    assert!(err.contains("max_query_items"), "{err}");
    assert!(!dir.join("client2_out.csv").exists());
    // SIGTERM: the server stops at once (nothing in flight), exits 0 with its summary, and
    // its port is closed.
    let t = Instant::now();
    signal(&server, "-TERM");
    let out = server.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(t.elapsed() < Duration::from_secs(10));
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(
        (
            summary["sessions_ok"].as_u64(),
            summary["sessions_failed"].as_u64()
        ),
        (Some(2), Some(1))
    );
    assert!(
        stderr.contains("failed") && stderr.contains("max_query_items"),
        "{stderr}"
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn configs_that_cannot_serve_exit_2_naming_why() {
    let dir = tmp("serve", "refusals");
    server_table(&dir);
    let p = (free_port(), free_port());
    config(
        &dir,
        "gen.json",
        "server",
        "client",
        "MODE_OFFLINE_GEN_CACHE",
        p,
        SERVER,
    );
    config(
        &dir,
        "client.json",
        "client",
        "client",
        "MODE_ONLINE",
        p,
        &client_body(0),
    );
    let with_output = SERVER.to_string()
        + r#", "output_config": {"type": "IO_TYPE_FILE_CSV", "path": "server_out.csv"}"#;
    config(
        &dir,
        "shuffle.json",
        "server",
        "client",
        "MODE_ONLINE",
        p,
        &with_output,
    );
    let text = std::fs::read_to_string(dir.join("shuffle.json")).unwrap();
    let text = text.replace(
        r#""server_get_result": false, "client_get_result": true"#,
        r#""server_get_result": true, "client_get_result": false"#,
    );
    std::fs::write(dir.join("shuffle.json"), text).unwrap();
    for (file, says) in [
        ("gen.json", "MODE_ONLINE"),
        ("client.json", "ROLE_SERVER"),
        ("shuffle.json", "client_get_result"),
    ] {
        let out = Command::new(BIN)
            .current_dir(&dir)
            .args(["serve", "--config", file])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {err}");
        assert!(err.contains(says), "{file}: {err}");
    }
}

/// `link_config` TLS for `me`: its certificate `certs/<cert>` for both ssl opts, the CA's.
fn with_tls(dir: &Path, name: &str, cert: &str) {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let opts = format!(
        r#"{{"certificate_path": "certs/{cert}.crt", "private_key_path": "certs/{cert}.key",
        "ca_file_path": "certs/ca.crt"}}"#
    );
    let text = text.replacen(
        "\"connect_retry_times\"",
        &format!(
            "\"enable_ssl\": true, \"server_ssl_opts\": {opts}, \"client_ssl_opts\": {opts},\n    \"connect_retry_times\""
        ),
        1,
    );
    std::fs::write(path, text).unwrap();
}

/// Over mutual TLS each client's certificate must name the id it greets with: a client with
/// its own certificate is answered (its id sorts before the server's, so it reaches the server
/// by dialling, as the TLS client), one presenting another party's certificate is refused, and
/// the server serves on.
#[test]
fn over_tls_each_client_is_checked_against_its_certificate() {
    let dir = tmp("serve", "tls");
    let want = offline(&dir, 2);
    let ca = crate::support::write_ca(&dir, "ca");
    for name in ["server", "alice", "mallory"] {
        crate::support::write_cert(&dir, name, &ca);
    }
    let port = free_port();
    config(
        &dir,
        "serve.json",
        "server",
        "client",
        "MODE_ONLINE",
        (port, free_port()),
        SERVER,
    );
    with_tls(&dir, "serve.json", "server");
    let server = start(
        &dir,
        &["serve", "--config", "serve.json", "--sessions", "2"],
    );
    let tls_client = |n: usize, id: &str, cert: &str| {
        let name = format!("oc{n}.json");
        config(
            &dir,
            &name,
            id,
            id,
            "MODE_ONLINE",
            (port, free_port()),
            &client_body(n),
        );
        with_tls(&dir, &name, cert);
        start(&dir, &["run", "--quiet", "--config", &name])
    };
    let (ok, err) = wait(tls_client(0, "alice", "alice"), LIMIT);
    assert!(ok, "alice: {err}");
    assert_eq!(ids(&dir.join("client0_out.csv")), want[0]);
    // "bob" shows mallory's certificate: the server refuses it.
    let (ok, err) = wait(tls_client(1, "bob", "mallory"), LIMIT);
    assert!(
        !ok,
        "a client with another party's certificate was answered"
    );
    assert!(!dir.join("client1_out.csv").exists(), "{err}");
    let out = server.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(
        (
            summary["sessions_ok"].as_u64(),
            summary["sessions_failed"].as_u64()
        ),
        (Some(1), Some(1)),
        "{stderr}"
    );
}
