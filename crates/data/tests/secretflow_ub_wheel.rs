//! SecretFlow's unbalanced-PSI OPRF checked against an unmodified SecretFlow party (PyPI
//! `spu==0.9.5`, run by `crates/cli/tests/secretflow/ub_peer.py`): the wheel's server computes
//! its cache (`MODE_OFFLINE_GEN_CACHE`) with a known key, and every value it stores must be our
//! F_k of the item it names. Then our protocol code (`blindjoin_protocols::secretflow::ub`) on
//! SecretFlow's link plays each role of `MODE_FULL` against the wheel in the other.
//!
//! The Python comes from `BLINDJOIN_SPU_PYTHON` (default `target/spuenv/bin/python`, the venv
//! `scripts/test.sh` builds). Without spu this test FAILS, saying how to install it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use blindjoin_crypto::secretflow_oprf::{OPRF_LEN, OprfKey};
use blindjoin_link::Cancel;
use blindjoin_link::secretflow::{Context, Options, Session};
use blindjoin_protocols::secretflow::ub;
use std::collections::{BTreeSet, HashMap};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    let p = std::env::var_os("BLINDJOIN_SPU_PYTHON").map_or_else(
        || workspace().join("target/spuenv/bin/python"),
        PathBuf::from,
    );
    let ok = Command::new(&p)
        .args(["-c", "import spu.psi"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "this test needs a Python with spu 0.9.5, not found at {}. Install it: python3 -m venv \
         target/spuenv && target/spuenv/bin/pip install spu==0.9.5 (or point \
         BLINDJOIN_SPU_PYTHON at a python that has it)",
        p.display()
    );
    p
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One 44-byte record of the server's `ub_psi_cache.bin` (psi `UbPsiCacheItem`):
/// `origin_index` is the record's position in the cache (what a client names as a cache
/// index), `shuffle_index` the row it was computed from, in the order the server read its
/// input (`SimpleShuffledBatchProvider` shuffles each read batch before it is evaluated).
struct Record {
    origin_index: u32,
    shuffle_index: u32,
    value: [u8; OPRF_LEN],
}

fn read_cache(path: &Path) -> Vec<Record> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(
        bytes.len() % 44,
        0,
        "{} is not 44-byte records",
        path.display()
    );
    bytes
        .chunks_exact(44)
        .map(|r| {
            let dup = u32::from_le_bytes(r[8..12].try_into().unwrap());
            assert_eq!(dup, 0, "no duplicates in the input");
            assert!(
                r[24..].iter().all(|&b| b == 0),
                "only 12 of 32 data bytes are used"
            );
            Record {
                origin_index: u32::from_le_bytes(r[..4].try_into().unwrap()),
                shuffle_index: u32::from_le_bytes(r[4..8].try_into().unwrap()),
                value: r[12..24].try_into().unwrap(),
            }
        })
        .collect()
}

#[test]
fn wheel_cache_values_are_our_oprf() {
    let py = python();
    let dir = std::env::temp_dir().join(format!("bj-sfub-oprf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key: Vec<u8> = (1u8..=32).collect();
    std::fs::write(dir.join("key.bin"), &key).unwrap();
    // Items of several lengths, in no sorted order, one non-ASCII.
    let mut items: Vec<String> = (0..300).rev().map(|i| format!("user-{i}@x")).collect();
    items.push("z".into());
    items.push("éclair 𝄞".into());
    items.push("a-much-longer-item-of-more-than-sixty-four-bytes-so-blake3-uses-two-blocks".into());
    let csv: String = std::iter::once("id".to_string())
        .chain(items.iter().cloned())
        .map(|l| l + "\n")
        .collect();
    // One copy per wheel: two wheel servers started together on one input file have failed to
    // read it ("Empty CSV file").
    std::fs::write(dir.join("in0.csv"), &csv).unwrap();
    std::fs::write(dir.join("in1.csv"), &csv).unwrap();

    // GEN_CACHE talks to no one but still connects: a second wheel server is the peer.
    let ports = format!("{},{}", free_port(), free_port());
    let script = workspace().join("crates/cli/tests/secretflow/ub_peer.py");
    let spawn = |rank: usize| {
        Command::new(&py)
            .arg(&script)
            .args(["--rank", &rank.to_string(), "--ports", &ports])
            .args(["--mode", "MODE_OFFLINE_GEN_CACHE", "--role", "server"])
            .arg("--input")
            .arg(dir.join(format!("in{rank}.csv")))
            .arg("--cache")
            .arg(dir.join(format!("cache{rank}")))
            .arg("--key-file")
            .arg(dir.join("key.bin"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(0), spawn(1));
    for c in [a, b] {
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("PEER OK"),
            "wheel failed: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let records = read_cache(&dir.join("cache0/ub_psi_cache.bin"));
    assert_eq!(records.len(), items.len());
    // shuffle_index counts the keys in SecretFlow's sorted order (bytewise).
    let mut sorted = items.clone();
    sorted.sort();
    let ours = OprfKey::from_bytes(&key)
        .unwrap()
        .evaluate(&sorted)
        .unwrap();
    let mut seen = BTreeSet::new();
    for (at, r) in records.iter().enumerate() {
        assert_eq!(
            r.origin_index as usize, at,
            "origin_index is the cache position"
        );
        let i = r.shuffle_index as usize;
        assert!(seen.insert(i), "shuffle_index {i} twice");
        assert_eq!(
            r.value, ours[i],
            "F_k({:?}) differs from the wheel's cache value",
            sorted[i]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bj-sfub-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_csv(path: &Path, items: &[String]) {
    let mut s = String::from("id,v\n");
    for (i, x) in items.iter().enumerate() {
        s.push_str(&format!("{x},{i}\n"));
    }
    std::fs::write(path, s).unwrap();
}

/// Who learns the intersection (`client_get_result`, `server_get_result`).
#[derive(Clone, Copy, Debug)]
struct Learn {
    client: bool,
    server: bool,
}

/// Every setting the wheel accepts (it refuses a run where no one learns).
const LEARN: [Learn; 3] = [
    Learn {
        client: true,
        server: true,
    },
    Learn {
        client: true,
        server: false,
    },
    Learn {
        client: false,
        server: true,
    },
];

/// The wheel in `role` and `MODE_FULL` at `rank`, against our party at the other port.
fn wheel(rank: usize, ports: &str, role: &str, dir: &Path, input: &Path, learn: Learn) -> Child {
    Command::new(python())
        .arg(workspace().join("crates/cli/tests/secretflow/ub_peer.py"))
        .args(["--rank", &rank.to_string(), "--ports", ports, "--id", "ubt"])
        .args(["--mode", "MODE_FULL", "--role", role])
        .args(["--server-result", if learn.server { "1" } else { "0" }])
        .args(["--client-result", if learn.client { "1" } else { "0" }])
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(dir.join("wheel_out.csv"))
        .arg("--cache")
        .arg(dir.join("wheel_cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish_wheel(c: Child) -> String {
    let out = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains("PEER OK"),
        "wheel failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn our_session(rank: usize, p: [u16; 2]) -> (Session, Context) {
    let mut o = Options::new(
        "ubt",
        rank,
        &format!("127.0.0.1:{}", p[rank]),
        &format!("127.0.0.1:{}", p[1 - rank]),
    );
    o.peer_name = "spu wheel".into();
    o.connect_timeout = Duration::from_secs(90);
    let (session, ctx) = Session::start(&o, &Cancel::new()).unwrap();
    // psi's party Init: ConnectToMesh again, then the online context (`<id>-0`).
    ctx.connect_to_mesh_again(Duration::from_secs(90), Duration::from_secs(3))
        .unwrap();
    (session, ctx)
}

/// The wheel's output rows (without the header), sorted.
fn wheel_rows(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("wheel_out.csv")).unwrap();
    let mut rows: Vec<String> = text.lines().skip(1).map(str::to_string).collect();
    rows.sort();
    rows
}

fn sets() -> (Vec<String>, Vec<String>) {
    let server: Vec<String> = (0..500).map(|i| format!("k{i}")).collect();
    let client: Vec<String> = (400..460)
        .chain(1000..1040)
        .map(|i| format!("k{i}"))
        .collect();
    (server, client)
}

/// The keys both sides hold.
fn shared<'a>(server: &[String], client: &'a [String]) -> BTreeSet<&'a str> {
    client
        .iter()
        .filter(|x| server.contains(x))
        .map(String::as_str)
        .collect()
}

/// The rows a wheel party holding `table` writes for the keys `want`: `key,row`, sorted.
fn rows_of(want: &BTreeSet<&str>, table: &[String]) -> Vec<String> {
    let index: HashMap<&str, usize> = table
        .iter()
        .enumerate()
        .map(|(i, x)| (x.as_str(), i))
        .collect();
    let mut rows: Vec<String> = want.iter().map(|x| format!("{x},{}", index[x])).collect();
    rows.sort();
    rows
}

#[test]
fn our_client_against_the_wheel_server_mode_full() {
    for learn in LEARN {
        client_against_wheel(learn);
    }
}

fn client_against_wheel(learn: Learn) {
    let dir = scratch(&format!("client-{}{}", learn.client, learn.server));
    let (server, client) = sets();
    write_csv(&dir.join("server.csv"), &server);
    let p = [free_port(), free_port()];
    let ports = format!("{},{}", p[0], p[1]);
    let w = wheel(0, &ports, "server", &dir, &dir.join("server.csv"), learn);
    let (session, mut ctx) = our_session(1, p);
    let mut online = ctx.spawn();
    // MODE_FULL: Offline (SyncWait{TransferCache}), then Online (SyncWait{...}).
    let cache = ctx
        .sync_wait_with(|c| ub::recv_cache(c, 1 << 20))
        .unwrap()
        .unwrap();
    assert_eq!(cache.values.len(), server.len());
    let extra = vec![0u32; client.len()];
    let matches = ctx
        .sync_wait(|| ub::client_online(&mut online, &client, &extra, &cache, learn.server))
        .unwrap()
        .unwrap();
    session.stop().unwrap();
    finish_wheel(w);
    let want = shared(&server, &client);
    assert_eq!(matches.len(), want.len(), "{learn:?}");
    if learn.client {
        let got: BTreeSet<&str> = matches
            .iter()
            .map(|m| client[m.index as usize].as_str())
            .collect();
        assert_eq!(got, want, "{learn:?}");
    }
    if learn.server {
        // The wheel server learned the same rows.
        assert_eq!(wheel_rows(&dir), rows_of(&want, &server), "{learn:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn our_server_against_the_wheel_client_mode_full() {
    for learn in LEARN {
        server_against_wheel(learn);
    }
}

fn server_against_wheel(learn: Learn) {
    let dir = scratch(&format!("server-{}{}", learn.client, learn.server));
    let (server, client) = sets();
    write_csv(&dir.join("client.csv"), &client);
    let p = [free_port(), free_port()];
    let ports = format!("{},{}", p[0], p[1]);
    let w = wheel(1, &ports, "client", &dir, &dir.join("client.csv"), learn);
    let (session, mut ctx) = our_session(0, p);
    let mut online = ctx.spawn();
    // GenCache: F_k of every item, stored in reverse order (any order will do).
    let key = OprfKey::random().unwrap();
    let order: Vec<usize> = (0..server.len()).rev().collect();
    let stored: Vec<&String> = order.iter().map(|&i| &server[i]).collect();
    let values = key.evaluate(&stored).unwrap();
    let extra = vec![0u32; values.len()];
    ctx.sync_wait_with(|c| ub::send_cache(c, &values, &extra))
        .unwrap()
        .unwrap();
    let outcome = ctx
        .sync_wait(|| {
            ub::server_online(
                &mut online,
                &key,
                learn.client,
                learn.server,
                values.len(),
                u64::MAX,
            )
        })
        .unwrap()
        .unwrap();
    session.stop().unwrap();
    finish_wheel(w);
    assert_eq!(outcome.peer_unique, client.len() as u64);
    let want = shared(&server, &client);
    assert_eq!(outcome.matches.is_some(), learn.server, "{learn:?}");
    if let Some(matches) = outcome.matches {
        let got: BTreeSet<&str> = matches
            .iter()
            .map(|m| server[order[m.cache_index as usize]].as_str())
            .collect();
        assert_eq!(got, want, "{learn:?}");
    }
    if learn.client {
        assert_eq!(wheel_rows(&dir), rows_of(&want, &client), "{learn:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
