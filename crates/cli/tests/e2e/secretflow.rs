//! blindjoin against an unmodified SecretFlow party (PyPI `spu==0.9.5`, `spu.psi.psi_execute`,
//! run by `tests/secretflow/psi_peer.py`) on 127.0.0.1: `PROTOCOL_ECDH` on every curve, both
//! ranks and roles, `broadcast_result` on and off, inner, left and full joins over keys with
//! duplicates. Each blindjoin output must be byte-identical to what a SecretFlow party writes
//! in the same seat of a SecretFlow ↔ SecretFlow run on the same inputs, and its row count must
//! be the plaintext answer. Then the failures: a differing config, a peer killed mid-run, a
//! peer that sends garbage, and a peer on the other wire.
//!
//! The Python comes from `BLINDJOIN_SPU_PYTHON` (default `target/spuenv/bin/python`, the venv
//! `scripts/test.sh` builds). Without spu these tests FAIL, saying how to install it.

use crate::support::{BIN, free_port, tmp, wait};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

pub(crate) fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn python() -> PathBuf {
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
        "the SecretFlow interop tests need a Python with spu 0.9.5, not found at {}. Install \
         it: python3 -m venv target/spuenv && target/spuenv/bin/pip install spu==0.9.5 (or \
         point BLINDJOIN_SPU_PYTHON at a python that has it)",
        p.display()
    );
    p
}

/// One setting of a run, the same on both sides.
#[derive(Clone, Copy)]
struct Case {
    curve: &'static str,
    broadcast: bool,
    /// `inner`, `left` or `full`.
    join: &'static str,
    receiver_rank: usize,
    left_rank: usize,
    /// `link_config.brpc_channel_protocol` ("": SecretFlow's default, baidu_std).
    channel: &'static str,
}

impl Case {
    fn v2_join(&self) -> &'static str {
        match self.join {
            "left" => "ADVANCED_JOIN_TYPE_LEFT_JOIN",
            "full" => "ADVANCED_JOIN_TYPE_FULL_JOIN",
            _ => "ADVANCED_JOIN_TYPE_INNER_JOIN",
        }
    }

    fn role(&self, rank: usize) -> &'static str {
        if rank == self.receiver_rank {
            "ROLE_RECEIVER"
        } else {
            "ROLE_SENDER"
        }
    }

    fn learns(&self, rank: usize) -> bool {
        self.broadcast || rank == self.receiver_rank
    }
}

/// Two tables with shared keys, keys repeated on both sides, and keys only one side has; the key
/// is not the first column on one side.
fn inputs(dir: &Path) -> [PathBuf; 2] {
    let mut a = String::from("id,score\n");
    let mut b = String::from("city,id\n");
    for i in 0..120u32 {
        // Rank 0: ids 0..120, every 7th twice, every 11th three times.
        let copies = 1 + u32::from(i % 7 == 0) + 2 * u32::from(i % 11 == 0);
        for c in 0..copies {
            a.push_str(&format!("u{:04},{}\n", (i * 37) % 120, i * 10 + c));
        }
    }
    for i in 60..200u32 {
        let copies = 1 + u32::from(i % 5 == 0);
        for c in 0..copies {
            b.push_str(&format!("c{c}{},u{:04}\n", i % 3, i));
        }
    }
    let pa = dir.join("in0.csv");
    let pb = dir.join("in1.csv");
    std::fs::write(&pa, a).unwrap();
    std::fs::write(&pb, b).unwrap();
    [pa, pb]
}

fn sf_party(
    py: &Path,
    rank: usize,
    ports: [u16; 2],
    input: &Path,
    output: &Path,
    case: &Case,
    extra: &[&str],
) -> Child {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/secretflow/psi_peer.py");
    Command::new(py)
        .arg(script)
        .args(["--rank", &rank.to_string()])
        .args(["--ports", &format!("{},{}", ports[0], ports[1])])
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(["--keys", "id", "--curve", case.curve])
        .args(["--broadcast", if case.broadcast { "1" } else { "0" }])
        .args(["--join", case.join])
        .args(["--receiver-rank", &case.receiver_rank.to_string()])
        .args(["--left-rank", &case.left_rank.to_string()])
        .args(["--channel", case.channel])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The launch config a SecretFlow user writes for the same settings as the wheel's (whose
/// `PsiConfig` fills `kkrt_config` and `rr22_config` too), plus our one setting.
fn bj_config(
    dir: &Path,
    rank: usize,
    ports: [u16; 2],
    input: &Path,
    output: &Path,
    case: &Case,
) -> PathBuf {
    let left = case.role(case.left_rank);
    let mut link = serde_json::json!({"parties": [
        {"id": "party0", "host": format!("127.0.0.1:{}", ports[0])},
        {"id": "party1", "host": format!("127.0.0.1:{}", ports[1])}
    ]});
    if !case.channel.is_empty() {
        link["brpc_channel_protocol"] = serde_json::json!(case.channel);
    }
    let cfg = serde_json::json!({
        "psi_config": {
            "protocol_config": {
                "protocol": "PROTOCOL_ECDH",
                "role": case.role(rank),
                "broadcast_result": case.broadcast,
                "ecdh_config": {"curve": case.curve, "batch_size": 4096},
                "kkrt_config": {"bucket_size": 1048576},
                "rr22_config": {"bucket_size": 1048576}
            },
            "input_config": {"type": "IO_TYPE_FILE_CSV", "path": input},
            "output_config": {"type": "IO_TYPE_FILE_CSV", "path": output},
            "keys": ["id"],
            "advanced_join_type": case.v2_join(),
            "left_side": left,
            "check_hash_digest": true,
            "output_attr": {"csv_null_rep": "NULL"}
        },
        "link_config": link,
        "self_link_party": format!("party{rank}"),
        "blindjoin": {"peer_wire": "secretflow"}
    });
    let p = dir.join(format!("bj{rank}.json"));
    std::fs::write(&p, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    p
}

pub(crate) fn bj_party(config: &Path) -> Child {
    Command::new(BIN)
        .args(["run", "--quiet", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub(crate) fn wait_sf(c: Child) -> (bool, String) {
    let out = c.wait_with_output().unwrap();
    let text = format!(
        "{}{}[the SecretFlow party ended: {}]",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.status
    );
    (out.status.success() && text.contains("PEER OK"), text)
}

/// The last 3000 bytes of `s` or a little more (from a character boundary).
pub(crate) fn tail(s: &str) -> &str {
    let mut at = s.len().saturating_sub(3000);
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[at..]
}

/// Runs the case with SecretFlow in both seats (`bj = None`) or blindjoin in seat `bj`; returns
/// each seat's output bytes (`None`: it wrote none).
fn run(case: &Case, bj: Option<usize>, tag: &str) -> [Option<Vec<u8>>; 2] {
    let py = python();
    let dir = tmp("sf", tag);
    let ins = inputs(&dir);
    let ports = [free_port(), free_port()];
    let outs = [dir.join("out0.csv"), dir.join("out1.csv")];
    let mut sf = Vec::new();
    let mut ours = None;
    for rank in 0..2 {
        if bj == Some(rank) {
            let cfg = bj_config(&dir, rank, ports, &ins[rank], &outs[rank], case);
            ours = Some(bj_party(&cfg));
        } else {
            sf.push(sf_party(
                &py,
                rank,
                ports,
                &ins[rank],
                &outs[rank],
                case,
                &[],
            ));
        }
    }
    let ours = ours.map(|c| wait(c, LIMIT));
    for c in sf {
        let (ok, text) = wait_sf(c);
        assert!(ok, "{tag}: the SecretFlow party failed:\n{}", tail(&text));
    }
    if let Some((ok, err)) = ours {
        assert!(ok, "{tag}: blindjoin failed:\n{err}");
    }
    outs.map(|p| std::fs::read(&p).ok())
}

/// The data rows each seat must write, from the inputs in plaintext (SecretFlow's rule: each
/// matched row once per peer row with its key, then the join's padding).
fn plaintext_rows(case: &Case, dir_tag: &str) -> [usize; 2] {
    let dir = tmp("sf-plain", dir_tag);
    let ins = inputs(&dir);
    let count = |p: &Path, col: usize| -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for line in std::fs::read_to_string(p).unwrap().lines().skip(1) {
            *m.entry(line.split(',').nth(col).unwrap().to_string())
                .or_default() += 1;
        }
        m
    };
    let c = [count(&ins[0], 0), count(&ins[1], 1)];
    let mut rows = [0usize; 2];
    for me in 0..2 {
        let (mine, theirs) = (&c[me], &c[1 - me]);
        let matched: usize = mine
            .iter()
            .filter_map(|(k, n)| theirs.get(k).map(|m| n * m))
            .sum();
        let own_unmatched: usize = mine
            .iter()
            .filter(|(k, _)| !theirs.contains_key(*k))
            .map(|(_, n)| n)
            .sum();
        let their_unmatched: usize = theirs
            .iter()
            .filter(|(k, _)| !mine.contains_key(*k))
            .map(|(_, n)| n)
            .sum();
        let left = me == case.left_rank;
        rows[me] = matched
            + match (case.join, left) {
                ("left", true) => own_unmatched,
                ("left", false) => their_unmatched,
                ("full", _) => own_unmatched + their_unmatched,
                _ => 0,
            };
    }
    rows
}

fn check(case: Case, tag: &str) {
    let reference = run(&case, None, &format!("{tag}-sf"));
    let want = plaintext_rows(&case, tag);
    for rank in 0..2 {
        match &reference[rank] {
            Some(bytes) if case.learns(rank) => {
                let lines = bytes.iter().filter(|&&b| b == b'\n').count();
                assert_eq!(lines - 1, want[rank], "{tag}: SecretFlow's own rank {rank}");
            }
            None if !case.learns(rank) => {}
            other => panic!(
                "{tag}: rank {rank} wrote {:?}",
                other.as_ref().map(Vec::len)
            ),
        }
    }
    for bj in 0..2 {
        let got = run(&case, Some(bj), &format!("{tag}-bj{bj}"));
        for rank in 0..2 {
            assert!(
                got[rank] == reference[rank],
                "{tag}: blindjoin in seat {bj}: rank {rank}'s output differs from SecretFlow \
                 ↔ SecretFlow's:\n--- got\n{}\n--- want\n{}",
                String::from_utf8_lossy(got[rank].as_deref().unwrap_or(b"(none)")),
                String::from_utf8_lossy(reference[rank].as_deref().unwrap_or(b"(none)"))
            );
        }
    }
}

#[test]
fn curve25519_broadcast_inner_join() {
    check(
        Case {
            curve: "CURVE_25519",
            broadcast: true,
            join: "inner",
            receiver_rank: 0,
            left_rank: 0,
            channel: "",
        },
        "25519",
    );
}

/// `brpc_channel_protocol` h2:grpc in both launch configs (HTTP/2 with gRPC framing each way).
#[test]
fn curve25519_over_h2_grpc() {
    check(
        Case {
            curve: "CURVE_25519",
            broadcast: true,
            join: "full",
            receiver_rank: 1,
            left_rank: 0,
            channel: "h2:grpc",
        },
        "h2grpc",
    );
}

#[test]
fn fourq_broadcast_left_join_with_the_receiver_on_rank_1() {
    check(
        Case {
            curve: "CURVE_FOURQ",
            broadcast: true,
            join: "left",
            receiver_rank: 1,
            left_rank: 0,
            channel: "",
        },
        "fourq",
    );
}

#[test]
fn sm2_without_broadcast_only_the_receiver_learns() {
    check(
        Case {
            curve: "CURVE_SM2",
            broadcast: false,
            join: "inner",
            receiver_rank: 1,
            left_rank: 1,
            channel: "",
        },
        "sm2",
    );
}

#[test]
fn secp256k1_broadcast_full_join() {
    check(
        Case {
            curve: "CURVE_SECP256K1",
            broadcast: true,
            join: "full",
            receiver_rank: 0,
            left_rank: 1,
            channel: "",
        },
        "k1",
    );
}

#[test]
fn elligator2_without_broadcast_receiver_on_rank_0() {
    check(
        Case {
            curve: "CURVE_25519_ELLIGATOR2",
            broadcast: false,
            join: "inner",
            receiver_rank: 0,
            left_rank: 0,
            channel: "",
        },
        "ell2",
    );
}

const CASE: Case = Case {
    curve: "CURVE_25519",
    broadcast: true,
    join: "inner",
    receiver_rank: 0,
    left_rank: 0,
    channel: "",
};

/// blindjoin in seat 0 against a SecretFlow party given `sf_extra`; returns blindjoin's
/// success, stderr, exit code and whether it wrote an output.
fn failing(tag: &str, sf_extra: &[&str], big: bool) -> (String, i32, bool, String) {
    let py = python();
    let dir = tmp("sf-fail", tag);
    let ins = inputs(&dir);
    if big {
        // 300,000 keys a side, half shared: long enough to be cut in the middle.
        let mut a = String::from("id\n");
        let mut b = String::from("city,id\n");
        for i in 0..300_000 {
            a.push_str(&format!("x{i}\n"));
            b.push_str(&format!("c,x{}\n", i + 150_000));
        }
        std::fs::write(&ins[0], a).unwrap();
        std::fs::write(&ins[1], b).unwrap();
    }
    let ports = [free_port(), free_port()];
    let outs = [dir.join("out0.csv"), dir.join("out1.csv")];
    let cfg = bj_config(&dir, 0, ports, &ins[0], &outs[0], &CASE);
    let sf = sf_party(&py, 1, ports, &ins[1], &outs[1], &CASE, sf_extra);
    let child = bj_party(&cfg);
    let (code, err) = {
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (_, sf_text) = wait_sf(sf);
    (err, code, outs[0].exists(), sf_text)
}

/// Whether the differing `field` was named: by us, or, when the wheel closed before its own
/// config had left (it sends asynchronously and throws as soon as it has ours), by the wheel,
/// while we say it was the config check.
fn named(err: &str, sf: &str, field: &str) -> bool {
    err.contains(field)
        || (err.contains("config check") && sf.contains("PSI configs are not consistent"))
}

#[test]
fn a_differing_config_is_named_before_any_item_is_sent() {
    let (err, code, wrote, sf) = failing("batch", &["--batch", "1000"], false);
    assert!(
        named(
            &err,
            &sf,
            "psi_config.protocol_config.ecdh_config.batch_size"
        ),
        "{err}\n{}",
        tail(&sf)
    );
    assert_eq!(code, 1, "{err}");
    assert!(!wrote);
    let (err, _, wrote, sf) = failing("curve", &["--curve", "CURVE_FOURQ"], false);
    assert!(
        named(&err, &sf, "ecdh_config.curve"),
        "{err}\n{}",
        tail(&sf)
    );
    assert!(!wrote);
    let (err, _, _, sf) = failing("bcast", &["--broadcast", "0"], false);
    assert!(named(&err, &sf, "broadcast_result"), "{err}\n{}", tail(&sf));
    let (err, _, _, sf) = failing("join", &["--join", "left"], false);
    assert!(
        named(&err, &sf, "advanced_join_type"),
        "{err}\n{}",
        tail(&sf)
    );
    assert!(sf.contains("ADVANCED_JOIN_TYPE_LEFT_JOIN"), "{}", tail(&sf));
}

#[test]
fn a_secretflow_peer_killed_mid_run_is_a_clear_link_error() {
    let (err, code, wrote, sf) = failing("killed", &["--die-after", "2"], true);
    assert!(
        sf.contains("PEER dying"),
        "the peer did not die mid-run:\n{}",
        tail(&sf)
    );
    assert_eq!(code, 1, "{err}");
    assert!(!wrote, "an output after a failed run");
    assert!(
        err.contains("peer") || err.contains("closed") || err.contains("connection"),
        "{err}"
    );
}

/// A peer listening at `port` that answers the first connection's bytes with a baidu_std header
/// announcing a huge body, then noise.
pub(crate) fn garbage_peer(port: u16) -> std::thread::JoinHandle<()> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        listener.set_nonblocking(false).unwrap();
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"PRPC\xff\xff\xff\xf0\x00\x00\x00\x10garbage-garbage");
            std::thread::sleep(Duration::from_millis(500));
        }
    })
}

#[test]
fn a_peer_that_sends_garbage_is_refused_without_a_panic() {
    let dir = tmp("sf-garbage", "g");
    let ins = inputs(&dir);
    let ports = [free_port(), free_port()];
    let t = garbage_peer(ports[1]);
    let out = dir.join("out0.csv");
    let cfg = bj_config(&dir, 0, ports, &ins[0], &out, &CASE);
    let (ok, err) = wait(bj_party(&cfg), LIMIT);
    let _ = t.join();
    assert!(!ok);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists());
}

#[test]
fn a_party_on_the_other_wire_is_told_to_set_peer_wire() {
    // blindjoin on SecretFlow's wire (seat 0) meets blindjoin on its own wire (seat 1).
    let dir = tmp("sf-wire", "w");
    let ins = inputs(&dir);
    let ports = [free_port(), free_port()];
    let cfg = bj_config(&dir, 0, ports, &ins[0], &dir.join("o0.csv"), &CASE);
    let own = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(
            "\"peer_wire\": \"secretflow\"",
            "\"peer_wire\": \"blindjoin\"",
        )
        .replace("ROLE_RECEIVER", "ROLE_SENDER")
        .replace(
            "\"self_link_party\": \"party0\"",
            "\"self_link_party\": \"party1\"",
        )
        .replace(&ins[0].display().to_string(), &ins[1].display().to_string());
    let cfg1 = dir.join("own.json");
    std::fs::write(&cfg1, own).unwrap();
    let a = bj_party(&cfg);
    let b = Command::new(BIN)
        .args(["run", "--quiet", "--connect-timeout", "20s", "--config"])
        .arg(&cfg1)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (ok_b, err_b) = wait(b, LIMIT);
    let (ok_a, err_a) = wait(a, LIMIT);
    assert!(!ok_a && !ok_b);
    assert!(
        err_b.contains("peer_wire") || err_a.contains("peer_wire"),
        "neither names the setting:\n{err_a}\n{err_b}"
    );
}

#[test]
fn the_flag_sets_the_wire_and_what_is_not_built_is_refused_at_start() {
    let dir = tmp("sf-flag", "f");
    let ins = inputs(&dir);
    let ports = [free_port(), free_port()];
    let cfg = bj_config(&dir, 0, ports, &ins[0], &dir.join("o.csv"), &CASE);
    // The file without the setting, RR22: `--peer-wire secretflow` refuses it by name.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("blindjoin");
    v["psi_config"]["protocol_config"]["protocol"] = "PROTOCOL_RR22".into();
    let text = serde_json::to_string(&v).unwrap();
    std::fs::write(&cfg, text).unwrap();
    let out = Command::new(BIN)
        .args(["run", "--quiet", "--peer-wire", "secretflow", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("PROTOCOL_RR22")
            && err.contains("PROTOCOL_ECDH")
            && err.contains("CURVE_FOURQ"),
        "{err}"
    );
    // Without a launch config there is no psi_config to check.
    let out = Command::new(BIN)
        .args(["run", "--peer-wire", "secretflow", "--role", "receiver"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--config"), "{err}");
}
