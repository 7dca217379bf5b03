//! blindjoin's unbalanced PSI against an unmodified SecretFlow party (PyPI `spu==0.9.5`,
//! `spu.psi.ub_psi_execute`, run by `tests/secretflow/ub_peer.py`) on 127.0.0.1, with the
//! user's SecretFlow launch config plus `"blindjoin": {"peer_wire": "secretflow"}`:
//! `MODE_FULL` in both roles and every result setting (the shuffled variant included), inner,
//! left, right and full joins over keys repeated on both sides, the split modes
//! (`MODE_OFFLINE_GEN_CACHE`, `MODE_OFFLINE_TRANSFER_CACHE`, `MODE_OFFLINE`, `MODE_ONLINE`)
//! with each side's cache directory used by the other implementation, `server_secret_key_path`,
//! and the failures. Each blindjoin output must be byte-identical to what a SecretFlow party
//! writes in the same seat of a SecretFlow ↔ SecretFlow run on the same inputs, and its row
//! count the plaintext answer.

use super::secretflow::{bj_party, garbage_peer, python, tail, wait_sf};
use crate::support::{BIN, free_port, tmp, wait};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// One setting of a run, the same on both sides.
#[derive(Clone, Copy, Debug)]
struct Case {
    server_learns: bool,
    client_learns: bool,
    /// `inner`, `left`, `right`, `full` or `difference`.
    join: &'static str,
    /// The rank of `left_side`.
    left_rank: usize,
    /// The server's rank.
    server_rank: usize,
}

impl Case {
    fn role(&self, rank: usize) -> &'static str {
        if rank == self.server_rank {
            "server"
        } else {
            "client"
        }
    }

    fn learns(&self, rank: usize) -> bool {
        if rank == self.server_rank {
            self.server_learns
        } else {
            self.client_learns
        }
    }

    fn v2_join(&self) -> String {
        match self.join {
            "difference" => "ADVANCED_JOIN_TYPE_DIFFERENCE".into(),
            j => format!("ADVANCED_JOIN_TYPE_{}_JOIN", j.to_uppercase()),
        }
    }
}

/// The server's table (keys repeated, the key not the first column) and the client's.
fn inputs(dir: &Path, case: &Case) -> [PathBuf; 2] {
    let mut server = String::from("name,id\n");
    for i in 0..600u32 {
        let copies = 1 + u32::from(i % 9 == 0);
        for c in 0..copies {
            server.push_str(&format!("s{c}-{i},k{:04}\n", (i * 7) % 600));
        }
    }
    let mut client = String::from("id,score\n");
    for i in 550..640u32 {
        let copies = 1 + u32::from(i % 4 == 0);
        for c in 0..copies {
            client.push_str(&format!("k{i:04},{}\n", i * 10 + c));
        }
    }
    let s = dir.join("server.csv");
    let c = dir.join("client.csv");
    std::fs::write(&s, server).unwrap();
    std::fs::write(&c, client).unwrap();
    if case.server_rank == 0 {
        [s, c]
    } else {
        [c, s]
    }
}

/// A wheel party in `mode`.
fn sf_party(rank: usize, ports: [u16; 2], mode: &str, io: &Io, case: &Case) -> Child {
    sf_party_with(rank, ports, mode, io, case, &[])
}

/// [`sf_party`] with more arguments for `ub_peer.py`.
fn sf_party_with(
    rank: usize,
    ports: [u16; 2],
    mode: &str,
    io: &Io,
    case: &Case,
    extra: &[&str],
) -> Child {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/secretflow/ub_peer.py");
    let mut c = Command::new(python());
    c.arg(script)
        .args(["--rank", &rank.to_string()])
        .args(["--ports", &format!("{},{}", ports[0], ports[1])])
        .args(["--mode", mode, "--role", case.role(rank)])
        .args([
            "--server-result",
            if case.server_learns { "1" } else { "0" },
        ])
        .args([
            "--client-result",
            if case.client_learns { "1" } else { "0" },
        ])
        .args([
            "--join",
            case.join,
            "--left-rank",
            &case.left_rank.to_string(),
        ])
        .arg("--input")
        .arg(&io.input)
        .arg("--output")
        .arg(&io.output)
        .arg("--cache")
        .arg(&io.cache);
    if let Some(k) = &io.key {
        c.arg("--key-file").arg(k);
    }
    c.args(extra);
    if let Some(ch) = io.channel {
        c.args(["--channel", ch]);
    }
    if let Some(t) = &io.tls {
        c.arg("--tls-cert").arg(&t.cert);
        c.arg("--tls-key").arg(&t.key);
        c.arg("--tls-ca").arg(&t.ca);
    }
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One seat's files.
struct Io {
    input: PathBuf,
    output: PathBuf,
    cache: PathBuf,
    key: Option<PathBuf>,
    tls: Option<Tls>,
    /// `link_config.brpc_channel_protocol` (`None`: SecretFlow's default, baidu_std).
    channel: Option<&'static str>,
}

/// A seat's certificate, key and the CA it checks its peer against.
#[derive(Clone)]
struct Tls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

/// A CA and a certificate for each rank, signed by it.
fn tls_files(dir: &Path) -> [Tls; 2] {
    let ca = crate::support::write_ca(dir, "ca");
    [0, 1].map(|r| {
        let name = format!("party{r}");
        crate::support::write_cert(dir, &name, &ca);
        Tls {
            cert: dir.join(format!("certs/{name}.crt")),
            key: dir.join(format!("certs/{name}.key")),
            ca: dir.join("certs/ca.crt"),
        }
    })
}

/// The launch config a SecretFlow user writes for the same settings, plus our one setting.
fn bj_config(
    dir: &Path,
    rank: usize,
    ports: [u16; 2],
    mode: &str,
    io: &Io,
    case: &Case,
) -> PathBuf {
    let role = |r: usize| {
        if r == case.server_rank {
            "ROLE_SERVER"
        } else {
            "ROLE_CLIENT"
        }
    };
    let mut ub = serde_json::json!({
        "mode": mode,
        "role": role(rank),
        "input_config": {"type": "IO_TYPE_FILE_CSV", "path": io.input},
        "output_config": {"type": "IO_TYPE_FILE_CSV", "path": io.output},
        "keys": ["id"],
        "cache_path": io.cache,
        "server_get_result": case.server_learns,
        "client_get_result": case.client_learns,
        "advanced_join_type": case.v2_join(),
        "left_side": role(case.left_rank),
    });
    if let Some(k) = &io.key {
        ub["server_secret_key_path"] = serde_json::json!(k);
    }
    let mut link = serde_json::json!({"parties": [
        {"id": "party0", "host": format!("127.0.0.1:{}", ports[0])},
        {"id": "party1", "host": format!("127.0.0.1:{}", ports[1])}
    ]});
    if let Some(t) = &io.tls {
        let opts = serde_json::json!({
            "certificate_path": t.cert,
            "private_key_path": t.key,
            "ca_file_path": t.ca,
            "verify_depth": 1
        });
        link["enable_ssl"] = serde_json::json!(true);
        link["server_ssl_opts"] = opts.clone();
        link["client_ssl_opts"] = opts;
    }
    if let Some(ch) = io.channel {
        link["brpc_channel_protocol"] = serde_json::json!(ch);
    }
    let cfg = serde_json::json!({
        "ub_psi_config": ub,
        "link_config": link,
        "self_link_party": format!("party{rank}"),
        "blindjoin": {"peer_wire": "secretflow"}
    });
    let p = dir.join(format!("bj{rank}-{mode}.json"));
    std::fs::write(&p, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    p
}

/// A seat: SecretFlow's wheel or blindjoin.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Seat {
    Sf,
    Bj,
}

/// Runs `mode` with `seats[r]` at rank r over the seats' files; panics naming the seat that
/// failed.
fn run_mode(dir: &Path, mode: &str, seats: [Seat; 2], io: &[Io; 2], case: &Case, tag: &str) {
    let ports = [free_port(), free_port()];
    let mut sf = Vec::new();
    let mut ours = Vec::new();
    for rank in 0..2 {
        match seats[rank] {
            Seat::Bj => {
                let cfg = bj_config(dir, rank, ports, mode, &io[rank], case);
                ours.push(bj_party(&cfg));
            }
            Seat::Sf => sf.push(sf_party(rank, ports, mode, &io[rank], case)),
        }
    }
    let ours: Vec<_> = ours.into_iter().map(|c| wait(c, LIMIT)).collect();
    for c in sf {
        let (ok, text) = wait_sf(c);
        assert!(
            ok,
            "{tag} {mode}: the SecretFlow party failed:\n{}",
            tail(&text)
        );
    }
    for (ok, err) in ours {
        assert!(ok, "{tag} {mode}: blindjoin failed:\n{err}");
    }
}

fn seat_files(dir: &Path, ins: &[PathBuf; 2], key: bool, tls: bool) -> [Io; 2] {
    let certs = tls.then(|| tls_files(dir));
    [0, 1].map(|r| Io {
        input: ins[r].clone(),
        output: dir.join(format!("out{r}.csv")),
        cache: dir.join(format!("cache{r}")),
        key: key.then(|| dir.join(format!("key{r}.bin"))),
        tls: certs.as_ref().map(|c| c[r].clone()),
        channel: None,
    })
}

/// `MODE_FULL` with `seats`; returns each seat's output bytes (`None`: it wrote none).
fn run_full(case: &Case, seats: [Seat; 2], tag: &str) -> [Option<Vec<u8>>; 2] {
    run_full_with(case, seats, tag, false, None)
}

/// [`run_full`], over TLS when `tls`, with `brpc_channel_protocol` `channel` in both configs.
fn run_full_with(
    case: &Case,
    seats: [Seat; 2],
    tag: &str,
    tls: bool,
    channel: Option<&'static str>,
) -> [Option<Vec<u8>>; 2] {
    let dir = tmp("sfub", tag);
    let ins = inputs(&dir, case);
    let mut io = seat_files(&dir, &ins, false, tls);
    for s in &mut io {
        s.channel = channel;
    }
    run_mode(&dir, "MODE_FULL", seats, &io, case, tag);
    io.map(|s| std::fs::read(&s.output).ok())
}

/// The data rows each seat must write, from the inputs in plaintext (SecretFlow's rule: each
/// matched row once per peer row with its key, then the join's padding).
fn plaintext_rows(case: &Case, tag: &str) -> [usize; 2] {
    let dir = tmp("sfub-plain", tag);
    let ins = inputs(&dir, case);
    let count = |p: &Path| -> HashMap<String, usize> {
        let text = std::fs::read_to_string(p).unwrap();
        let mut lines = text.lines();
        let col = lines
            .next()
            .unwrap()
            .split(',')
            .position(|c| c == "id")
            .unwrap();
        let mut m = HashMap::new();
        for line in lines {
            *m.entry(line.split(',').nth(col).unwrap().to_string())
                .or_default() += 1;
        }
        m
    };
    let c = [count(&ins[0]), count(&ins[1])];
    let mut rows = [0usize; 2];
    for me in 0..2 {
        let (mine, theirs) = (&c[me], &c[1 - me]);
        let matched: usize = mine
            .iter()
            .filter_map(|(k, n)| theirs.get(k).map(|m| n * m))
            .sum();
        let unmatched = |a: &HashMap<String, usize>, b: &HashMap<String, usize>| -> usize {
            a.iter()
                .filter(|(k, _)| !b.contains_key(*k))
                .map(|(_, n)| n)
                .sum()
        };
        let (own, their) = (unmatched(mine, theirs), unmatched(theirs, mine));
        let left = me == case.left_rank;
        rows[me] = match (case.join, left) {
            ("inner", _) => matched,
            ("left", true) | ("right", false) => matched + own,
            ("left", false) | ("right", true) => matched + their,
            ("full", _) => matched + own + their,
            _ => own + their,
        };
    }
    rows
}

/// SecretFlow in both seats, then blindjoin in each seat: the same bytes in every seat that
/// learns, the plaintext row count, and no file where nobody learns.
fn check_full(case: Case, tag: &str) {
    let reference = run_full(&case, [Seat::Sf, Seat::Sf], &format!("{tag}-sf"));
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
        let mut seats = [Seat::Sf, Seat::Sf];
        seats[bj] = Seat::Bj;
        let got = run_full(&case, seats, &format!("{tag}-bj{bj}"));
        for rank in 0..2 {
            assert!(
                got[rank] == reference[rank],
                "{tag}: blindjoin in seat {bj}: rank {rank}'s output differs from SecretFlow ↔ \
                 SecretFlow's:\n--- got\n{}\n--- want\n{}",
                String::from_utf8_lossy(got[rank].as_deref().unwrap_or(b"(none)")),
                String::from_utf8_lossy(reference[rank].as_deref().unwrap_or(b"(none)"))
            );
        }
    }
}

#[test]
fn full_mode_both_learn_inner_join() {
    check_full(
        Case {
            server_learns: true,
            client_learns: true,
            join: "inner",
            left_rank: 0,
            server_rank: 0,
        },
        "both-inner",
    );
}

#[test]
fn full_mode_only_the_client_learns_left_join_with_the_server_on_rank_1() {
    check_full(
        Case {
            server_learns: false,
            client_learns: true,
            join: "left",
            left_rank: 0,
            server_rank: 1,
        },
        "client-left",
    );
}

#[test]
fn full_mode_only_the_server_learns_shuffled_left_join() {
    check_full(
        Case {
            server_learns: true,
            client_learns: false,
            join: "left",
            left_rank: 0,
            server_rank: 0,
        },
        "server-left",
    );
}

/// In the shuffled variant a SecretFlow server counts the client's rows without its unique keys
/// (`RecvBlindAndShuffleSendEvaluate` adds only the extra copies), so the padding of an outer
/// join underflows a u32 and it writes about 2^32 rows of NULL. Ours pads with the right count:
/// checked against the plaintext answer, the SecretFlow client in the other seat.
#[test]
fn shuffled_outer_join_pads_with_the_clients_true_row_count() {
    let case = Case {
        server_learns: true,
        client_learns: false,
        join: "full",
        left_rank: 1,
        server_rank: 0,
    };
    let got = run_full(&case, [Seat::Bj, Seat::Sf], "server-full-bj0");
    let want = plaintext_rows(&case, "server-full");
    let out = got[0].as_ref().expect("the server learns");
    assert_eq!(out.iter().filter(|&&b| b == b'\n').count() - 1, want[0]);
    assert!(got[1].is_none(), "the client learns nothing");
}

#[test]
fn full_mode_both_learn_right_join_and_difference() {
    for (join, tag) in [("right", "both-right"), ("difference", "both-diff")] {
        check_full(
            Case {
                server_learns: true,
                client_learns: true,
                join,
                left_rank: 1,
                server_rank: 0,
            },
            tag,
        );
    }
}

/// Mutual TLS on SecretFlow's link (`enable_ssl` with both option blocks, verify_depth 1): the
/// same bytes as SecretFlow ↔ SecretFlow without TLS, blindjoin in each seat.
#[test]
fn full_mode_over_mutual_tls_in_each_seat() {
    let case = Case {
        server_learns: true,
        client_learns: true,
        join: "inner",
        left_rank: 0,
        server_rank: 0,
    };
    let reference = run_full(&case, [Seat::Sf, Seat::Sf], "tls-sf");
    for (bj, seats) in [(0, [Seat::Bj, Seat::Sf]), (1, [Seat::Sf, Seat::Bj])] {
        let got = run_full_with(&case, seats, &format!("tls-bj{bj}"), true, None);
        assert!(got == reference, "blindjoin in seat {bj} over TLS differs");
    }
}

/// `brpc_channel_protocol` h2:grpc in both launch configs: HTTP/2 with gRPC framing each way,
/// blindjoin in each seat, outputs byte-identical to SecretFlow ↔ SecretFlow's.
#[test]
fn full_mode_over_h2_grpc_in_each_seat() {
    let case = Case {
        server_learns: true,
        client_learns: true,
        join: "left",
        left_rank: 1,
        server_rank: 0,
    };
    let reference = run_full_with(&case, [Seat::Sf, Seat::Sf], "h2-sf", false, Some("h2:grpc"));
    for (bj, seats) in [(0, [Seat::Bj, Seat::Sf]), (1, [Seat::Sf, Seat::Bj])] {
        let got = run_full_with(&case, seats, &format!("h2-bj{bj}"), false, Some("h2:grpc"));
        assert!(
            got == reference,
            "blindjoin in seat {bj} over h2:grpc differs"
        );
    }
}

/// The server's cache: blindjoin's `MODE_OFFLINE_GEN_CACHE` alone, or a wheel pair's
/// `MODE_OFFLINE`.
fn gen_cache(dir: &Path, seat: Seat, io: &[Io; 2], case: &Case, tag: &str) {
    let r = case.server_rank;
    match seat {
        Seat::Bj => {
            let cfg = bj_config(
                dir,
                r,
                [free_port(), free_port()],
                "MODE_OFFLINE_GEN_CACHE",
                &io[r],
                case,
            );
            let (ok, err) = wait(bj_party(&cfg), LIMIT);
            assert!(ok, "{tag}: blindjoin's gen cache failed:\n{err}");
        }
        // A wheel server makes its cache in MODE_OFFLINE with a wheel client (gen cache alone
        // needs a second wheel server to connect to, and two wheel servers started together on
        // one input have failed to read it).
        Seat::Sf => run_mode(dir, "MODE_OFFLINE", [Seat::Sf, Seat::Sf], io, case, tag),
    }
}

/// A 32-byte key file, mode 0600.
fn key_file(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, (1u8..=32).rev().collect::<Vec<u8>>()).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A mode and who sits in each seat.
type Step = (&'static str, [Seat; 2]);

/// The split modes with each side's cache directory written by one implementation and read by
/// the other: every output byte-identical to SecretFlow ↔ SecretFlow's `MODE_FULL`.
#[test]
fn split_modes_with_caches_made_by_the_other_implementation() {
    let case = Case {
        server_learns: true,
        client_learns: true,
        join: "left",
        left_rank: 1,
        server_rank: 0,
    };
    let reference = run_full(&case, [Seat::Sf, Seat::Sf], "split-sf");
    use Seat::{Bj, Sf};
    // (server seat of gen cache, then (mode, seats) in turn).
    let plans: [(Seat, &[Step], bool); 3] = [
        // Our cache files read by the wheel, the wheel's client cache read by us.
        (
            Bj,
            &[
                ("MODE_OFFLINE_TRANSFER_CACHE", [Sf, Bj]),
                ("MODE_ONLINE", [Bj, Sf]),
            ],
            true,
        ),
        // The wheel's cache files read by us (key from the meta: no key file).
        (
            Sf,
            &[
                ("MODE_OFFLINE_TRANSFER_CACHE", [Bj, Sf]),
                ("MODE_ONLINE", [Sf, Bj]),
            ],
            false,
        ),
        // The wheel's cache, key file given; we serve the query.
        (
            Sf,
            &[
                ("MODE_OFFLINE_TRANSFER_CACHE", [Sf, Bj]),
                ("MODE_ONLINE", [Bj, Sf]),
            ],
            true,
        ),
    ];
    for (i, (gen_seat, steps, with_key)) in plans.iter().enumerate() {
        let tag = format!("split{i}");
        let dir = tmp("sfub", &tag);
        let ins = inputs(&dir, &case);
        let io = seat_files(&dir, &ins, *with_key, false);
        if let Some(k) = &io[case.server_rank].key {
            key_file(k);
        }
        gen_cache(&dir, *gen_seat, &io, &case, &tag);
        for (mode, seats) in steps.iter() {
            run_mode(&dir, mode, *seats, &io, &case, &tag);
        }
        let got = io.each_ref().map(|s| std::fs::read(&s.output).ok());
        assert!(
            got == reference,
            "{tag}: the outputs differ from SecretFlow ↔ SecretFlow's MODE_FULL"
        );
    }
}

/// `MODE_OFFLINE` (gen cache and transfer in one `SyncWait`) then `MODE_ONLINE`, blindjoin in
/// each seat in turn.
#[test]
fn offline_then_online_in_each_seat() {
    let case = Case {
        server_learns: true,
        client_learns: true,
        join: "inner",
        left_rank: 0,
        server_rank: 1,
    };
    let reference = run_full(&case, [Seat::Sf, Seat::Sf], "offline-sf");
    for (i, seats) in [[Seat::Bj, Seat::Sf], [Seat::Sf, Seat::Bj]]
        .iter()
        .enumerate()
    {
        let tag = format!("offline{i}");
        let dir = tmp("sfub", &tag);
        let ins = inputs(&dir, &case);
        let io = seat_files(&dir, &ins, true, false);
        key_file(io[case.server_rank].key.as_ref().unwrap());
        run_mode(&dir, "MODE_OFFLINE", *seats, &io, &case, &tag);
        let flipped = [seats[1], seats[0]];
        run_mode(&dir, "MODE_ONLINE", flipped, &io, &case, &tag);
        let got = io.each_ref().map(|s| std::fs::read(&s.output).ok());
        assert!(got == reference, "{tag}: the outputs differ");
    }
}

const BOTH: Case = Case {
    server_learns: true,
    client_learns: true,
    join: "inner",
    left_rank: 0,
    server_rank: 0,
};

/// blindjoin's client in `mode` against a wheel server given `sf_extra`; returns blindjoin's
/// exit code, stderr, whether it wrote an output, and the wheel's text.
fn client_against(
    dir: &Path,
    io: &[Io; 2],
    mode: &str,
    sf_extra: &[&str],
) -> (i32, String, bool, String) {
    let ports = [free_port(), free_port()];
    let sf = sf_party_with(0, ports, mode, &io[0], &BOTH, sf_extra);
    let cfg = bj_config(dir, 1, ports, mode, &io[1], &BOTH);
    let out = bj_party(&cfg).wait_with_output().unwrap();
    let (_, sf_text) = wait_sf(sf);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        io[1].output.exists(),
        sf_text,
    )
}

#[test]
fn a_secretflow_server_killed_mid_run_is_a_clear_link_error() {
    let dir = tmp("sfub", "killed");
    let ins = inputs(&dir, &BOTH);
    // 400,000 server keys: the wheel is still at its cache when it dies.
    let mut big = String::from("name,id\n");
    for i in 0..400_000 {
        big.push_str(&format!("n,k{i:07}\n"));
    }
    std::fs::write(&ins[0], big).unwrap();
    let io = seat_files(&dir, &ins, false, false);
    let (code, err, wrote, sf) = client_against(&dir, &io, "MODE_FULL", &["--die-after", "2"]);
    assert!(
        sf.contains("PEER dying"),
        "the wheel did not die:\n{}",
        tail(&sf)
    );
    assert_eq!(code, 1, "{err}");
    assert!(!wrote, "an output after a failed run");
    assert!(
        err.contains("peer") || err.contains("closed") || err.contains("connection"),
        "{err}"
    );
}

#[test]
fn a_damaged_client_cache_is_refused_before_connecting_naming_the_file() {
    let dir = tmp("sfub", "damaged");
    let ins = inputs(&dir, &BOTH);
    let io = seat_files(&dir, &ins, false, false);
    std::fs::create_dir_all(&io[1].cache).unwrap();
    // A meta announcing 5 records over a file of 2.
    let mut meta = Vec::new();
    for w in [5u32, 5, 12] {
        meta.extend_from_slice(&w.to_le_bytes());
    }
    std::fs::write(io[1].cache.join("server_cache.meta"), meta).unwrap();
    std::fs::write(io[1].cache.join("server_cache"), [0u8; 72]).unwrap();
    let ports = [free_port(), free_port()];
    let cfg = bj_config(&dir, 1, ports, "MODE_ONLINE", &io[1], &BOTH);
    let (ok, err) = wait(bj_party(&cfg), Duration::from_secs(30));
    assert!(!ok);
    assert!(err.contains("server_cache"), "{err}");
    assert!(err.contains("MODE_OFFLINE_TRANSFER_CACHE"), "{err}");
    assert!(!io[1].output.exists());
    let out = Command::new(BIN)
        .args(["run", "--quiet", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a damaged cache is the user's to fix"
    );
}

#[test]
fn a_peer_that_sends_garbage_is_refused_without_a_panic() {
    let dir = tmp("sfub", "garbage");
    let ins = inputs(&dir, &BOTH);
    let io = seat_files(&dir, &ins, false, false);
    let ports = [free_port(), free_port()];
    let t = garbage_peer(ports[0]);
    let cfg = bj_config(&dir, 1, ports, "MODE_FULL", &io[1], &BOTH);
    let (ok, err) = wait(bj_party(&cfg), LIMIT);
    let _ = t.join();
    assert!(!ok);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!io[1].output.exists());
}
