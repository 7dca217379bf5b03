//! Unbalanced PSI end to end: two real `blindjoin` processes on 127.0.0.1 with SecretFlow-style
//! `ub_psi_config` files, through gen cache → transfer cache → online (twice, the cache reused),
//! the shuffle variant, and full; plus the refusals a user meets first (key file permissions,
//! a stale client cache); full mode over mutual TLS from the command line's link flags; and the
//! server's cap on the client keys one key evaluates (`blindjoin.max_query_items`).

use crate::support::{BIN, free_port, tmp, wait, write_ca, write_cert};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// Server: ids 0..3000 (id 7 twice); client: ids 2900..3100 and a few strays.
fn tables(dir: &Path) {
    let mut s = String::from("id,s_val\n");
    for i in 0..3000 {
        s += &format!("{i},s{i}\n");
    }
    s += "7,dup\n";
    std::fs::write(dir.join("server.csv"), s).unwrap();
    let mut c = String::from("c_val,id\n");
    for i in (2900..3100).rev() {
        c += &format!("c{i},{i}\n");
    }
    c += "x,7\nx,abc\n";
    std::fs::write(dir.join("client.csv"), c).unwrap();
}

fn config(dir: &Path, name: &str, role: &str, mode: &str, ports: (u16, u16), body: &str) {
    let me = if role == "ROLE_SERVER" {
        "server"
    } else {
        "client"
    };
    let text = format!(
        r#"{{
  "ub_psi_config": {{
    "mode": "{mode}",
    "role": "{role}",
    {body}
  }},
  "link_config": {{
    "parties": [
      {{"id": "server", "host": "127.0.0.1:{}"}},
      {{"id": "client", "host": "127.0.0.1:{}"}}
    ]
  }},
  "self_link_party": "{me}"
}}"#,
        ports.0, ports.1
    );
    std::fs::write(dir.join(name), text).unwrap();
}

const SERVER: &str = r#""input_config": {"type": "IO_TYPE_FILE_CSV", "path": "server.csv"},
    "keys": ["id"],
    "server_secret_key_path": "server.key",
    "cache_path": "server_cache",
    "output_config": {"type": "IO_TYPE_FILE_CSV", "path": "server_out.csv"}"#;
const CLIENT: &str = r#""input_config": {"type": "IO_TYPE_FILE_CSV", "path": "client.csv"},
    "keys": ["id"],
    "cache_path": "client_cache",
    "output_config": {"type": "IO_TYPE_FILE_CSV", "path": "client_out.csv"}"#;

fn start(dir: &Path, config: &str) -> Child {
    start_with(dir, config, &[])
}

/// `blindjoin run --config dir/CONFIG` with `extra` flags (run in `dir`, so relative paths work).
fn start_with(dir: &Path, config: &str, extra: &[&str]) -> Child {
    Command::new(BIN)
        .current_dir(dir)
        .args(["run", "--quiet", "--config"])
        .arg(dir.join(config))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn run_alone(dir: &Path, config: &str) -> (bool, String) {
    wait(start(dir, config), LIMIT)
}

fn run_pair(dir: &Path, server: &str, client: &str) -> ((bool, String), (bool, String)) {
    let s = start(dir, server);
    let c = start(dir, client);
    (wait(s, LIMIT), wait(c, LIMIT))
}

fn ids(path: &Path, col: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').nth(col).unwrap().to_string())
        .collect()
}

/// The keys both tables share, sorted as the aligned output sorts them (by the key's text).
fn expected() -> Vec<String> {
    let mut v: Vec<String> = (2900..3000).map(|i: u32| i.to_string()).collect();
    v.push("7".into());
    v.sort();
    v
}

fn ports() -> (u16, u16) {
    (free_port(), free_port())
}

#[test]
fn gen_transfer_online_and_full_with_secretflow_configs() {
    let dir = tmp("ub", "modes");
    tables(&dir);
    let p = ports();
    let both = r#","server_get_result": true, "client_get_result": true"#;
    config(
        &dir,
        "gen.json",
        "ROLE_SERVER",
        "MODE_OFFLINE_GEN_CACHE",
        p,
        SERVER,
    );
    let (ok, err) = run_alone(&dir, "gen.json");
    assert!(ok, "{err}");
    // The key file was created 0600; the cache holds no copy of it.
    let key = std::fs::read(dir.join("server.key")).unwrap();
    assert_eq!(key.len(), 32);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("server.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let cache = std::fs::read(dir.join("server_cache")).unwrap();
    assert!(!cache.windows(32).any(|w| w == key.as_slice()));

    config(
        &dir,
        "ts.json",
        "ROLE_SERVER",
        "MODE_OFFLINE_TRANSFER_CACHE",
        p,
        SERVER,
    );
    config(
        &dir,
        "tc.json",
        "ROLE_CLIENT",
        "OFFLINE_TRANSFER_CACHE",
        p,
        CLIENT,
    );
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "ts.json", "tc.json");
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    assert!(dir.join("client_cache").exists());

    config(
        &dir,
        "os.json",
        "ROLE_SERVER",
        "MODE_ONLINE",
        p,
        &(SERVER.to_string() + both),
    );
    config(
        &dir,
        "oc.json",
        "ROLE_CLIENT",
        "MODE_ONLINE",
        p,
        &(CLIENT.to_string() + both),
    );
    for _ in 0..2 {
        let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "os.json", "oc.json");
        assert!(ok_s && ok_c, "{err_s}\n{err_c}");
        assert_eq!(ids(&dir.join("client_out.csv"), 1), expected());
        // The server's rows: 7 twice (its duplicate), aligned with the client's keys.
        let mut want = expected();
        want.push("7".into());
        assert_eq!(ids(&dir.join("server_out.csv"), 0), want);
        std::fs::remove_file(dir.join("client_out.csv")).unwrap();
        std::fs::remove_file(dir.join("server_out.csv")).unwrap();
    }

    // The shuffle variant: only the server learns the result.
    let shuffle = r#","server_get_result": true, "client_get_result": false"#;
    config(
        &dir,
        "ss.json",
        "ROLE_SERVER",
        "MODE_ONLINE",
        p,
        &(SERVER.to_string() + shuffle),
    );
    config(
        &dir,
        "sc.json",
        "ROLE_CLIENT",
        "MODE_ONLINE",
        p,
        &(CLIENT.to_string() + shuffle),
    );
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "ss.json", "sc.json");
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    assert_eq!(ids(&dir.join("server_out.csv"), 0).len(), 102);
    assert!(!dir.join("client_out.csv").exists());

    // Full, on Ristretto255 (our curve field), client only, fresh caches.
    let client_only = r#","server_get_result": false, "client_get_result": true"#;
    let fs = SERVER
        .replace("server_cache", "server_cache2")
        .replace("server.key", "server2.key")
        + client_only;
    let fc = CLIENT.replace("client_cache", "client_cache2") + client_only;
    config(&dir, "fs.json", "ROLE_SERVER", "MODE_FULL", p, &fs);
    config(&dir, "fc.json", "ROLE_CLIENT", "MODE_FULL", p, &fc);
    let ours = |name: &str, ext: &str| {
        let text = std::fs::read_to_string(dir.join(name)).unwrap().replacen(
            "\"self_link_party\"",
            &format!("\"blindjoin\": {{{ext}}}, \"self_link_party\""),
            1,
        );
        std::fs::write(dir.join(name), text).unwrap();
    };
    ours("fs.json", r#""curve": "CURVE_RISTRETTO255""#);
    ours(
        "fc.json",
        r#""curve": "CURVE_RISTRETTO255", "report_path": "full_report.json""#,
    );
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "fs.json", "fc.json");
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    assert_eq!(ids(&dir.join("client_out.csv"), 1), expected());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("full_report.json")).unwrap()).unwrap();
    assert_eq!(report["curve"], "CURVE_RISTRETTO255");
    assert_eq!(report["intersection_key_count"], 101);
    assert!(report["online"]["bytes_sent"].as_u64().unwrap() > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn wide_key_permissions_and_stale_caches_are_refused() {
    let dir = tmp("ub", "refusals");
    tables(&dir);
    let p = ports();
    config(
        &dir,
        "gen.json",
        "ROLE_SERVER",
        "MODE_OFFLINE_GEN_CACHE",
        p,
        SERVER,
    );
    std::fs::write(dir.join("server.key"), [3u8; 32]).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("server.key"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let (ok, err) = run_alone(&dir, "gen.json");
        assert!(!ok && err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(
            dir.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    let (ok, err) = run_alone(&dir, "gen.json");
    assert!(ok, "{err}");
    config(
        &dir,
        "ts.json",
        "ROLE_SERVER",
        "MODE_OFFLINE_TRANSFER_CACHE",
        p,
        SERVER,
    );
    config(
        &dir,
        "tc.json",
        "ROLE_CLIENT",
        "MODE_OFFLINE_TRANSFER_CACHE",
        p,
        CLIENT,
    );
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "ts.json", "tc.json");
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    // A new key and cache on the server: the client's copy is stale, and both sides say so.
    std::fs::remove_file(dir.join("server.key")).unwrap();
    let (ok, err) = run_alone(&dir, "gen.json");
    assert!(ok, "{err}");
    let both = r#","server_get_result": true, "client_get_result": true"#;
    config(
        &dir,
        "os.json",
        "ROLE_SERVER",
        "MODE_ONLINE",
        p,
        &(SERVER.to_string() + both),
    );
    config(
        &dir,
        "oc.json",
        "ROLE_CLIENT",
        "MODE_ONLINE",
        p,
        &(CLIENT.to_string() + both),
    );
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "os.json", "oc.json");
    assert!(!ok_s && !ok_c);
    assert!(err_c.contains("MODE_OFFLINE_TRANSFER_CACHE"), "{err_c}");
    assert!(err_s.contains("cache"), "{err_s}");
    // A damaged client cache names the file and the fix, with exit code 2.
    let mut b = std::fs::read(dir.join("client_cache")).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1;
    std::fs::write(dir.join("client_cache"), b).unwrap();
    let o = Command::new(BIN)
        .args(["run", "--quiet", "--config"])
        .arg(dir.join("oc.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("client_cache") && err.contains("checksum"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--tls-cert/--tls-key/--tls-ca` (the CLI's), `--recv-timeout` and `--connect-timeout` apply
/// to unbalanced configs: full mode over mutual TLS gives the client the exact intersection, a
/// certificate from another CA is refused by both sides (so the flags really reached the link),
/// and gen cache, which has no link, refuses link flags instead of ignoring them.
#[test]
fn full_mode_over_mutual_tls_from_cli_flags() {
    let dir = tmp("ub", "tls");
    tables(&dir);
    let ca = write_ca(&dir, "ca");
    write_cert(&dir, "server", &ca);
    write_cert(&dir, "client", &ca);
    let other = write_ca(&dir, "other");
    write_cert(&dir, "impostor", &other);
    let client_only = r#","server_get_result": false, "client_get_result": true"#;
    let tls = |name: &'static str| -> [&'static str; 10] {
        let (crt, key): (&'static str, &'static str) = match name {
            "server" => ("certs/server.crt", "certs/server.key"),
            "client" => ("certs/client.crt", "certs/client.key"),
            _ => ("certs/impostor.crt", "certs/impostor.key"),
        };
        [
            "--tls-cert",
            crt,
            "--tls-key",
            key,
            "--tls-ca",
            "certs/ca.crt",
            "--recv-timeout",
            "60",
            "--connect-timeout",
            "30",
        ]
    };

    let p = ports();
    let fs = SERVER.to_string() + client_only;
    let fc = CLIENT.to_string() + client_only;
    config(&dir, "fs.json", "ROLE_SERVER", "MODE_FULL", p, &fs);
    config(&dir, "fc.json", "ROLE_CLIENT", "MODE_FULL", p, &fc);
    let s = start_with(&dir, "fs.json", &tls("server"));
    let c = start_with(&dir, "fc.json", &tls("client"));
    let ((ok_s, err_s), (ok_c, err_c)) = (wait(s, LIMIT), wait(c, LIMIT));
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    assert_eq!(ids(&dir.join("client_out.csv"), 1), expected());
    assert!(!dir.join("server_out.csv").exists());
    std::fs::remove_file(dir.join("client_out.csv")).unwrap();

    // The client shows a certificate from another CA: both stop, each saying why.
    let p = ports();
    config(&dir, "fs.json", "ROLE_SERVER", "MODE_FULL", p, &fs);
    config(&dir, "fc.json", "ROLE_CLIENT", "MODE_FULL", p, &fc);
    let s = start_with(&dir, "fs.json", &tls("server"));
    let c = start_with(&dir, "fc.json", &tls("impostor"));
    let ((ok_s, err_s), (ok_c, err_c)) = (wait(s, LIMIT), wait(c, LIMIT));
    assert!(!ok_s && !ok_c, "{err_s}\n{err_c}");
    let both = format!("{err_s}\n{err_c}");
    assert!(both.contains("not signed by a CA"), "{both}");
    assert!(!dir.join("client_out.csv").exists());

    // Gen cache opens no connection: a link flag there is refused, naming it (exit code 2).
    config(
        &dir,
        "gen.json",
        "ROLE_SERVER",
        "MODE_OFFLINE_GEN_CACHE",
        p,
        SERVER,
    );
    let o = Command::new(BIN)
        .current_dir(&dir)
        .args([
            "run",
            "--quiet",
            "--recv-timeout",
            "5",
            "--config",
            "gen.json",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--recv-timeout") && err.contains("MODE_OFFLINE_GEN_CACHE"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Parquet in and out (`IO_TYPE_FILE_PARQUET`), full mode, both parties learning the result:
/// each writes exactly its matching rows, as Parquet, with the input's column types.
#[test]
fn full_mode_reads_and_writes_parquet() {
    let dir = tmp("ub", "parquet");
    crate::support::write_scores(&dir.join("server.parquet"), 0..3000);
    crate::support::write_scores(&dir.join("client.parquet"), 2900..3100);
    let to_parquet = |body: &str, me: &str| {
        body.replace("IO_TYPE_FILE_CSV", "IO_TYPE_FILE_PARQUET")
            .replace(&format!("\"{me}.csv\""), &format!("\"{me}.parquet\""))
            .replace(
                &format!("\"{me}_out.csv\""),
                &format!("\"{me}_out.parquet\""),
            )
            + r#","server_get_result": true, "client_get_result": true"#
    };
    let p = ports();
    let (fs, fc) = (to_parquet(SERVER, "server"), to_parquet(CLIENT, "client"));
    config(&dir, "fs.json", "ROLE_SERVER", "MODE_FULL", p, &fs);
    config(&dir, "fc.json", "ROLE_CLIENT", "MODE_FULL", p, &fc);
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "fs.json", "fc.json");
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    let want: Vec<(i64, f64)> = (2900..3000).map(|i| (i, i as f64 * 1.5)).collect();
    for me in ["server", "client"] {
        let got = crate::support::read_scores(&dir.join(format!("{me}_out.parquet")));
        assert_eq!(got, want, "{me}: the matching rows, by key, types kept");
    }
    // Nothing but the cache is made beside it (no CSV copy of a Parquet input).
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".blindjoin-parquet"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The query cap (`--max-query-items`, `blindjoin.max_query_items`): the client's 202 unique
/// keys fit a cap of 300 once, the count is kept beside the key file (0600), a second query
/// that would pass the cap is refused by the server before it evaluates anything (exit code 2,
/// naming the field; the client is told why), and a new key (rotation) starts from 0.
#[test]
fn the_server_refuses_queries_past_the_cap_until_the_key_is_rotated() {
    let dir = tmp("ub", "cap");
    tables(&dir);
    let client_only = r#","server_get_result": false, "client_get_result": true"#;
    let fs = SERVER.to_string() + client_only;
    let fc = CLIENT.to_string() + client_only;
    let cap = ["--max-query-items", "300"];
    let full = |dir: &Path| {
        let p = ports();
        config(dir, "fs.json", "ROLE_SERVER", "MODE_FULL", p, &fs);
        config(dir, "fc.json", "ROLE_CLIENT", "MODE_FULL", p, &fc);
        let s = start_with(dir, "fs.json", &cap);
        let c = start(dir, "fc.json");
        (wait(s, LIMIT), wait(c, LIMIT))
    };
    let count_file = dir.join("server.key.queries");

    let ((ok_s, err_s), (ok_c, err_c)) = full(&dir);
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    assert_eq!(ids(&dir.join("client_out.csv"), 1), expected());
    std::fs::remove_file(dir.join("client_out.csv")).unwrap();
    let counted = std::fs::read_to_string(&count_file).unwrap();
    assert!(counted.contains("client_items 202\n"), "{counted}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&count_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let ((ok_s, err_s), (ok_c, err_c)) = full(&dir);
    assert!(!ok_s && !ok_c, "{err_s}\n{err_c}");
    assert!(
        err_s.contains("blindjoin.max_query_items") && err_s.contains("202"),
        "{err_s}"
    );
    assert!(err_c.contains("blindjoin.max_query_items"), "{err_c}");
    assert!(!dir.join("client_out.csv").exists());
    assert_eq!(std::fs::read_to_string(&count_file).unwrap(), counted);

    // Rotation: a new key file (and so a new cache) starts a new count.
    std::fs::remove_file(dir.join("server.key")).unwrap();
    let ((ok_s, err_s), (ok_c, err_c)) = full(&dir);
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    assert_eq!(ids(&dir.join("client_out.csv"), 1), expected());

    // The flag means nothing to a client: refused, not ignored.
    let o = Command::new(BIN)
        .current_dir(&dir)
        .args([
            "run",
            "--quiet",
            "--max-query-items",
            "5",
            "--config",
            "fc.json",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--max-query-items"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Labels over unbalanced PSI: the server generates its cache with two label columns (chosen
/// and ordered by `blindjoin.label_columns`, one holding commas and quotes), transfers it,
/// and the client's online output is its own matching rows joined with those columns, once
/// per server row of the key (key 7 has two); the same query again as Parquet. The expected
/// output is the plaintext join computed here.
#[test]
fn labels_join_the_servers_columns_to_the_clients_rows() {
    let dir = tmp("ub", "labels");
    let mut s = String::from("id,s_val,score\n");
    for i in 0..500 {
        s += &format!("{i},s{i},\"{i},\"\"5\"\"\"\n");
    }
    s += "7,dup,d\n";
    std::fs::write(dir.join("server.csv"), &s).unwrap();
    let mut c = String::from("c_val,id\n");
    for i in (450..600).rev() {
        c += &format!("c{i},{i}\n");
    }
    c += "x,7\nx,abc\n";
    std::fs::write(dir.join("client.csv"), &c).unwrap();
    let p = ports();
    let client_only = r#","server_get_result": false, "client_get_result": true"#;
    let ext = |name: &str, ext: &str| {
        let text = std::fs::read_to_string(dir.join(name)).unwrap().replacen(
            "\"self_link_party\"",
            &format!("\"blindjoin\": {{{ext}}}, \"self_link_party\""),
            1,
        );
        std::fs::write(dir.join(name), text).unwrap();
    };
    config(
        &dir,
        "gen.json",
        "ROLE_SERVER",
        "MODE_OFFLINE_GEN_CACHE",
        p,
        SERVER,
    );
    ext("gen.json", r#""label_columns": ["score", "s_val"]"#);
    let (ok, err) = run_alone(&dir, "gen.json");
    assert!(ok, "{err}");
    // The labels are sealed: no label text appears in the server's cache.
    let cache = std::fs::read(dir.join("server_cache")).unwrap();
    assert!(!cache.windows(4).any(|w| w == b"s499"));
    config(
        &dir,
        "ts.json",
        "ROLE_SERVER",
        "MODE_OFFLINE_TRANSFER_CACHE",
        p,
        SERVER,
    );
    config(
        &dir,
        "tc.json",
        "ROLE_CLIENT",
        "MODE_OFFLINE_TRANSFER_CACHE",
        p,
        CLIENT,
    );
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "ts.json", "tc.json");
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    let client_cache = std::fs::read(dir.join("client_cache")).unwrap();
    assert!(!client_cache.windows(4).any(|w| w == b"s499"));

    // Plaintext join: the client's rows sorted by key text (ties in file order), each with the
    // server rows of its key in file order.
    let mut keys: Vec<String> = (450..500).map(|i: u32| i.to_string()).collect();
    keys.push("7".into());
    keys.sort();
    let mut want = vec!["c_val,id,score,s_val".to_string()];
    for k in &keys {
        if k == "7" {
            want.push("x,7,\"7,\"\"5\"\"\",s7".into());
            want.push("x,7,d,dup".into());
        } else {
            want.push(format!("c{k},{k},\"{k},\"\"5\"\"\",s{k}"));
        }
    }
    config(
        &dir,
        "os.json",
        "ROLE_SERVER",
        "MODE_ONLINE",
        p,
        &(SERVER.to_string() + client_only),
    );
    config(
        &dir,
        "oc.json",
        "ROLE_CLIENT",
        "MODE_ONLINE",
        p,
        &(CLIENT.to_string() + client_only),
    );
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "os.json", "oc.json");
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    let got = std::fs::read_to_string(dir.join("client_out.csv")).unwrap();
    assert_eq!(got.lines().collect::<Vec<_>>(), want);

    // Parquet output of the same join: the same number of rows.
    let pq = CLIENT.replace(
        r#""output_config": {"type": "IO_TYPE_FILE_CSV", "path": "client_out.csv"}"#,
        r#""output_config": {"type": "IO_TYPE_FILE_PARQUET", "path": "client_out.parquet"}"#,
    ) + client_only;
    config(&dir, "oc.json", "ROLE_CLIENT", "MODE_ONLINE", p, &pq);
    ext("oc.json", r#""report_path": "labels_report.json""#);
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "os.json", "oc.json");
    assert!(ok_s && ok_c, "{err_s}\n{err_c}");
    assert!(dir.join("client_out.parquet").exists());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("labels_report.json")).unwrap()).unwrap();
    assert_eq!(report["intersection_key_count"], 51);
    assert_eq!(report["intersection_count"], want.len() as u64 - 1);

    // A labelled cache refuses the shuffle variant, on the server, naming the field.
    let shuffle = r#","server_get_result": true, "client_get_result": false"#;
    config(
        &dir,
        "ss.json",
        "ROLE_SERVER",
        "MODE_ONLINE",
        p,
        &(SERVER.to_string() + shuffle),
    );
    config(
        &dir,
        "sc.json",
        "ROLE_CLIENT",
        "MODE_ONLINE",
        p,
        &(CLIENT.to_string() + shuffle),
    );
    let ((ok_s, err_s), (ok_c, _)) = run_pair(&dir, "ss.json", "sc.json");
    assert!(!ok_s && !ok_c);
    assert!(err_s.contains("blindjoin.label_columns"), "{err_s}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Threshold unbalanced PSI (SecretFlow's `intersection_threshold` / `count_path`), full mode,
/// both parties learning the result: at most T keys are revealed, all in the intersection, the
/// server's revealed keys are the client's, and both write `real_count,final_count`; with T
/// above the intersection's size, all of it.
#[test]
fn threshold_reveals_at_most_t_keys_and_writes_the_counts() {
    let dir = tmp("ub", "threshold");
    tables(&dir);
    let p = ports();
    let both = r#","server_get_result": true, "client_get_result": true"#;
    for (t, want) in [(10u64, 10usize), (1000, 101)] {
        let th = format!(r#", "intersection_threshold": {t}, "count_path": "count_ME.csv""#);
        let fs = SERVER.replace("server_cache", "server_cache_t") + both + &th.replace("ME", "s");
        let fc = CLIENT.replace("client_cache", "client_cache_t") + both + &th.replace("ME", "c");
        config(&dir, "ts.json", "ROLE_SERVER", "MODE_FULL", p, &fs);
        config(&dir, "tc.json", "ROLE_CLIENT", "MODE_FULL", p, &fc);
        let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "ts.json", "tc.json");
        assert!(ok_s && ok_c, "{err_s}\n{err_c}");
        let mut got = ids(&dir.join("client_out.csv"), 1);
        got.dedup();
        assert_eq!(got.len(), want, "T = {t}");
        let all = expected();
        assert!(got.iter().all(|k| all.contains(k)), "{got:?}");
        let mut theirs = ids(&dir.join("server_out.csv"), 0);
        theirs.dedup();
        assert_eq!(theirs, got);
        for side in ["s", "c"] {
            let counts = std::fs::read_to_string(dir.join(format!("count_{side}.csv"))).unwrap();
            assert_eq!(
                counts,
                format!("real_count,final_count\n101,{want}\n"),
                "{side}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Unbalanced PSI on SM2 and secp256k1 (prime-order groups, points as x-coordinates): full
/// mode, both parties learning the result, against the plaintext intersection.
#[test]
fn full_mode_on_sm2_and_secp256k1() {
    let dir = tmp("ub", "curves");
    tables(&dir);
    let both = r#","server_get_result": true, "client_get_result": true"#;
    for curve in ["CURVE_SM2", "CURVE_SECP256K1"] {
        let p = ports();
        let fs = SERVER
            .replace("server_cache", "sc")
            .replace("server.key", "k.key")
            + both;
        let fc = CLIENT.replace("client_cache", "cc") + both;
        config(&dir, "fs.json", "ROLE_SERVER", "MODE_FULL", p, &fs);
        config(&dir, "fc.json", "ROLE_CLIENT", "MODE_FULL", p, &fc);
        for name in ["fs.json", "fc.json"] {
            let text = std::fs::read_to_string(dir.join(name)).unwrap().replacen(
                "\"self_link_party\"",
                &format!("\"blindjoin\": {{\"curve\": \"{curve}\"}}, \"self_link_party\""),
                1,
            );
            std::fs::write(dir.join(name), text).unwrap();
        }
        let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "fs.json", "fc.json");
        assert!(ok_s && ok_c, "{curve}\n{err_s}\n{err_c}");
        assert_eq!(ids(&dir.join("client_out.csv"), 1), expected(), "{curve}");
        let mut want = expected();
        want.push("7".into());
        assert_eq!(ids(&dir.join("server_out.csv"), 0), want, "{curve}");
        std::fs::remove_file(dir.join("k.key")).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The stage names in a trace file, in start order.
fn trace_stages(path: &Path) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn unbalanced_traces_show_the_stages_of_each_mode() {
    let dir = tmp("ub", "trace");
    tables(&dir);
    let p = ports();
    let trace = |me: &str| format!(r#""debug_options": {{"trace_path": "{me}.trace"}},"#);
    let both = r#","server_get_result": true, "client_get_result": true"#;
    config(
        &dir,
        "s.json",
        "ROLE_SERVER",
        "MODE_FULL",
        p,
        &format!("{}{SERVER}{both}", trace("server")),
    );
    config(
        &dir,
        "c.json",
        "ROLE_CLIENT",
        "MODE_FULL",
        p,
        &format!("{}{CLIENT}{both}", trace("client")),
    );
    let ((ok_s, err_s), (ok_c, err_c)) = run_pair(&dir, "s.json", "c.json");
    assert!(ok_s && ok_c, "{err_s}{err_c}");
    assert_eq!(ids(&dir.join("client_out.csv"), 1), expected());
    let has = |who: &str, want: &[&str]| {
        let got = trace_stages(&dir.join(format!("{who}.trace")));
        assert_eq!(
            got.first().map(String::as_str),
            Some("run"),
            "{who}: {got:?}"
        );
        // Each stage once at least, the top-level ones in the order they ran.
        for w in want {
            assert!(got.iter().any(|g| g == w), "{who}: no {w:?} in {got:?}");
        }
        let at = |w: &str| got.iter().position(|g| g == w).unwrap();
        for pair in want.windows(2) {
            assert!(at(pair[0]) <= at(pair[1]), "{who}: {pair:?} in {got:?}");
        }
    };
    has(
        "server",
        &[
            "generate cache",
            "read input",
            "evaluate OPRF",
            "sort run",
            "merge runs",
            "write cache",
            "check cache",
            "connect",
            "transfer cache",
            "online",
            "query",
            "match",
            "write output",
        ],
    );
    has(
        "client",
        &[
            "connect",
            "transfer cache",
            "check cache",
            "read input",
            "online",
            "query",
            "write output",
        ],
    );
}
