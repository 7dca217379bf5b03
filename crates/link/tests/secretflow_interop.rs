//! The acid test of `blindjoin_link::secretflow`: a real SecretFlow party (PyPI `spu==0.9.5`,
//! `tests/secretflow/peer.py`) and the blindjoin party exchange a scripted sequence on
//! 127.0.0.1 — connect, P2P small and chunked values both ways, a burst past the wheel's
//! throttle window, AllGather, Barrier, Broadcast, spawned contexts, SyncWait, stop_link. The
//! same exchange runs over TLS (the wheel with `desc.enable_ssl = True`, certificates from rcgen),
//! and a certificate from the wrong CA is refused by either side with a TLS error.
//!
//! The Python comes from `BLINDJOIN_SPU_PYTHON` (default `target/spuenv/bin/python`, the venv
//! `scripts/test.sh` builds). Without spu these tests FAIL, saying how to install it.

#![allow(clippy::unwrap_used, clippy::panic)]

use blindjoin_link::secretflow::{
    ChannelProtocol, Context, Options, Session, SslOptions, TlsOptions,
};
use blindjoin_link::{Cancel, LinkError};
use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on the whole wheel process (import, connect, exchange with a 5 s SyncWait round, close).
const PEER_DEADLINE: Duration = Duration::from_secs(150);

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    let p = match std::env::var_os("BLINDJOIN_SPU_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => workspace().join("target/spuenv/bin/python"),
    };
    let ok = Command::new(&p)
        .args(["-c", "from spu import link"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the SecretFlow interop test needs a Python with spu 0.9.5, not found at {}. Install it: \
         python3 -m venv target/spuenv && target/spuenv/bin/pip install spu==0.9.5 \
         (or point BLINDJOIN_SPU_PYTHON at a python that has it)",
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

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_add(seed)).collect()
}

struct Peer {
    child: Child,
    log: PathBuf,
}

impl Peer {
    fn start(
        py: &PathBuf,
        rank: usize,
        self_port: u16,
        peer_port: u16,
        id: &str,
        mode: &str,
        extra: &[&str],
    ) -> Peer {
        let log = std::env::temp_dir().join(format!("sf-peer-{id}-{}.log", std::process::id()));
        let out = File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/secretflow/peer.py");
        let child = Command::new(py)
            .arg(script)
            .args(["--rank", &rank.to_string()])
            .args(["--self-port", &self_port.to_string()])
            .args(["--peer-port", &peer_port.to_string()])
            .args(["--id", id, "--mode", mode])
            .args(extra)
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        Peer { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) for the wheel to exit; kills it past the deadline.
    fn finish(mut self, started: Instant) -> (Option<i32>, String) {
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return (s.code(), self.log());
            }
            if started.elapsed() > PEER_DEADLINE {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return (
                    None,
                    format!("killed after {PEER_DEADLINE:?}\n{}", self.log()),
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Kept when the test fails, for a look at the wheel's own log.
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

fn opts(id: &str, rank: usize, self_port: u16, peer_port: u16) -> Options {
    let mut o = Options::new(
        id,
        rank,
        &format!("127.0.0.1:{self_port}"),
        &format!("127.0.0.1:{peer_port}"),
    );
    o.peer_name = "spu wheel".into();
    o.connect_timeout = Duration::from_secs(90);
    o
}

/// The blindjoin half of peer.py's script.
fn exchange(ctx: &mut Context) -> Result<(), LinkError> {
    let me = ctx.rank();
    if me == 0 {
        ctx.send(b"small from blindjoin")?;
        assert_eq!(ctx.recv()?, b"small from wheel");
    } else {
        assert_eq!(ctx.recv()?, b"small from wheel");
        ctx.send(b"small from blindjoin")?;
    }
    ctx.send(&pattern(3 * (1 << 20) + 5, 2))?;
    assert_eq!(ctx.recv()?, pattern(2_500_000, 1));
    assert_eq!(ctx.recv()?, pattern(1 << 20, 3));
    ctx.send(&pattern(1 << 20, 4))?;
    for i in 0..25 {
        assert_eq!(ctx.recv()?, format!("burst {i}").as_bytes());
        ctx.send(format!("reply {i}").as_bytes())?;
    }
    let g = ctx.all_gather(format!("gather from {me}").as_bytes())?;
    assert_eq!(
        g,
        vec![b"gather from 0".to_vec(), b"gather from 1".to_vec()]
    );
    ctx.barrier()?;
    let root_value: &[u8] = if me == 1 { b"bcast from 1" } else { b"" };
    assert_eq!(ctx.broadcast(root_value, 1)?, b"bcast from 1");
    let mut sub = ctx.spawn();
    assert_eq!(sub.id(), format!("{}-0", ctx.id()));
    assert_eq!(sub.recv()?, b"sub from wheel");
    sub.send(b"sub from blindjoin")?;
    let g = sub.all_gather(format!("s{me}").as_bytes())?;
    assert_eq!(g, vec![b"s0".to_vec(), b"s1".to_vec()]);
    // Longer than one 5 s period: the wheel sees p_unfinished, then p_finished.
    let r = ctx.sync_wait(|| {
        std::thread::sleep(Duration::from_millis(6500));
        "done"
    })?;
    assert_eq!(r, "done");
    // The wheel's "never read" stays unread: stop() must ACK it or the wheel hangs in stop_link.
    ctx.send(b"last from blindjoin")?;
    Ok(())
}

fn run_full(id: &str, rust_rank: usize, rust_first: bool, rust_chunk: usize, wheel_args: &[&str]) {
    run_full_with(
        id,
        rust_rank,
        rust_first,
        rust_chunk,
        wheel_args,
        None,
        ChannelProtocol::BaiduStd,
    );
}

fn run_full_with(
    id: &str,
    rust_rank: usize,
    rust_first: bool,
    rust_chunk: usize,
    wheel_args: &[&str],
    tls: Option<TlsOptions>,
    protocol: ChannelProtocol,
) {
    let py = python();
    let (rust_port, py_port) = (free_port(), free_port());
    let started = Instant::now();
    let mut peer = None;
    if !rust_first {
        peer = Some(Peer::start(
            &py,
            1 - rust_rank,
            py_port,
            rust_port,
            id,
            "full",
            wheel_args,
        ));
        std::thread::sleep(Duration::from_secs(3));
    }
    let mut o = opts(id, rust_rank, rust_port, py_port);
    o.http_max_payload_size = rust_chunk;
    o.tls = tls;
    o.channel_protocol = protocol;
    let rust = std::thread::spawn(move || -> Result<(), LinkError> {
        let (session, mut ctx) = Session::start(&o, &Cancel::new())?;
        exchange(&mut ctx)?;
        session.stop()
    });
    if rust_first {
        std::thread::sleep(Duration::from_secs(3));
        peer = Some(Peer::start(
            &py,
            1 - rust_rank,
            py_port,
            rust_port,
            id,
            "full",
            wheel_args,
        ));
    }
    let Some(peer) = peer else { unreachable!() };
    let (code, log) = peer.finish(started);
    let rust = rust.join();
    assert!(
        code == Some(0) && log.contains("PEER OK"),
        "wheel peer failed (exit {code:?}):\n{log}\nblindjoin side: {rust:?}"
    );
    match rust {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("blindjoin side failed: {e}\nwheel log:\n{log}"),
        Err(_) => panic!("blindjoin side panicked\nwheel log:\n{log}"),
    }
    assert!(
        log.contains("sync_rounds=2"),
        "SyncWait took other than 2 rounds:\n{log}"
    );
}

#[test]
fn wheel_starts_first_and_blindjoin_is_rank0() {
    run_full("wheelfirst", 0, false, 1 << 20, &[]);
}

#[test]
fn blindjoin_starts_first_and_is_rank1() {
    run_full("rustfirst", 1, true, 1 << 20, &[]);
}

/// 16 KiB chunks from the wheel over brpc's `pooled` connections (several TCP connections, so
/// its 8 parallel chunks really arrive out of order), 100 kB chunks from blindjoin.
#[test]
fn other_chunk_sizes_and_pooled_connections() {
    run_full(
        "pooled",
        0,
        false,
        100_000,
        &["--payload", "16384", "--connection-type", "pooled"],
    );
}

/// `brpc_channel_protocol` h2:grpc on both sides: HTTP/2 with gRPC framing each way, with 16
/// KiB wheel payloads (12 KiB h2 chunks, as yacl keeps 4 KiB for headers) and 100 kB of ours,
/// so values are chunked, spread over many DATA frames and held back by flow control.
#[test]
fn the_full_exchange_over_h2_grpc_with_the_wheel() {
    run_full_with(
        "h2both",
        0,
        false,
        100_000,
        &["--protocol", "h2:grpc", "--payload", "16384"],
        None,
        ChannelProtocol::H2Grpc,
    );
}

/// Each side frames its requests its own way and serves the other's: the wheel sends h2:grpc
/// to our server, we send baidu_std to its; then the other way round. Blindjoin starts first.
#[test]
fn mixed_protocols_each_way_with_the_wheel() {
    run_full_with(
        "h2mixed",
        1,
        true,
        1 << 20,
        &["--protocol", "h2:grpc"],
        None,
        ChannelProtocol::BaiduStd,
    );
    run_full_with(
        "h2mixed2",
        0,
        false,
        1 << 20,
        &[],
        None,
        ChannelProtocol::H2Grpc,
    );
}

/// h2:grpc inside mutual TLS, both sides.
#[test]
fn h2_grpc_over_mutual_tls_with_the_wheel() {
    let certs = Certs::new("h2tls");
    let ca = certs.ca("shared");
    certs.leaf("wheel", &ca);
    certs.leaf("blindjoin", &ca);
    let mut args = certs.wheel("wheel", "shared");
    args.extend(["--protocol".to_string(), "h2:grpc".to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_full_with(
        "h2tls",
        0,
        false,
        1 << 20,
        &args,
        Some(certs.ours("blindjoin", "shared")),
        ChannelProtocol::H2Grpc,
    );
}

#[test]
fn a_wheel_that_dies_mid_exchange_gives_a_typed_error_within_the_timeout() {
    let py = python();
    let (rust_port, py_port) = (free_port(), free_port());
    let started = Instant::now();
    let peer = Peer::start(&py, 1, py_port, rust_port, "dies", "die", &[]);
    let (session, mut ctx) = Session::start(&opts("dies", 0, rust_port, py_port), &Cancel::new())
        .unwrap_or_else(|e| panic!("connect failed: {e}\n{}", peer.log()));
    ctx.send(b"small from blindjoin").unwrap();
    assert_eq!(ctx.recv().unwrap(), b"small from wheel");
    let t = Instant::now();
    // The wheel exits here (os._exit) without stop_link; the next receive must not hang.
    let err = ctx.recv().unwrap_err();
    assert!(
        matches!(err, LinkError::PeerClosed { .. }),
        "expected PeerClosed, got {err}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
    let (code, log) = peer.finish(started);
    assert_eq!(code, Some(3), "{log}");
    drop(session);
}

/// A scratch directory of rcgen certificates, removed on drop (kept if the test fails).
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new(name: &str) -> Certs {
        let dir = std::env::temp_dir().join(format!("sf-wheel-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Certs { dir }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// `<name>.ca.pem`.
    fn ca(&self, name: &str) -> rcgen::Issuer<'static, rcgen::KeyPair> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} CA"));
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(self.path(&format!("{name}.ca.pem")), cert.pem()).unwrap();
        rcgen::Issuer::new(params, key)
    }

    /// `<name>.pem` and `<name>.key` signed by `ca`.
    fn leaf(&self, name: &str, ca: &rcgen::Issuer<'_, rcgen::KeyPair>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.signed_by(&key, ca).unwrap();
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{name}.key")), key.serialize_pem()).unwrap();
    }

    /// Our TLS options: `name`'s certificate on both sides, both verifying against `ca`.
    fn ours(&self, name: &str, ca: &str) -> TlsOptions {
        let side = SslOptions {
            certificate_path: Some(self.path(&format!("{name}.pem")).into()),
            private_key_path: Some(self.path(&format!("{name}.key")).into()),
            verify: true,
            ca_file_path: Some(self.path(&format!("{ca}.ca.pem")).into()),
        };
        TlsOptions {
            server_ssl_opts: side.clone(),
            client_ssl_opts: side,
        }
    }

    /// peer.py's arguments: `name`'s certificate, verifying against `ca` with verify_depth 1.
    fn wheel(&self, name: &str, ca: &str) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.path(&format!("{name}.pem")),
            "--tls-key".into(),
            self.path(&format!("{name}.key")),
            "--tls-ca".into(),
            self.path(&format!("{ca}.ca.pem")),
            "--verify-depth".into(),
            "1".into(),
        ]
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The full exchange over mutual TLS: the wheel with `enable_ssl`, its server and client both
/// presenting a certificate and verifying ours (verify_depth 1), and ours verifying its.
#[test]
fn the_full_exchange_over_mutual_tls_with_the_wheel() {
    let certs = Certs::new("mutual");
    let ca = certs.ca("shared");
    certs.leaf("wheel", &ca);
    certs.leaf("blindjoin", &ca);
    let args = certs.wheel("wheel", "shared");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_full_with(
        "tlsfull",
        0,
        false,
        1 << 20,
        &args,
        Some(certs.ours("blindjoin", "shared")),
        ChannelProtocol::BaiduStd,
    );
}

/// yacl's default `verify_depth` 0 on both sides: nobody checks anything, so certificates from
/// unrelated CAs are fine and our client presents none (brpc's server, not verifying, asks for
/// none). Here blindjoin starts first, as rank 1.
#[test]
fn the_full_exchange_over_tls_without_verification_with_the_wheel() {
    let certs = Certs::new("noverify");
    let one = certs.ca("one");
    let two = certs.ca("two");
    certs.leaf("wheel", &one);
    certs.leaf("blindjoin", &two);
    let mut args = certs.wheel("wheel", "one");
    if let Some(depth) = args.last_mut() {
        *depth = "0".into();
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut ours = certs.ours("blindjoin", "two");
    for side in [&mut ours.server_ssl_opts, &mut ours.client_ssl_opts] {
        side.verify = false;
        side.ca_file_path = None;
    }
    ours.client_ssl_opts.certificate_path = None;
    ours.client_ssl_opts.private_key_path = None;
    run_full_with(
        "tlsnoverify",
        1,
        true,
        1 << 20,
        &args,
        Some(ours),
        ChannelProtocol::BaiduStd,
    );
}

/// Starts the wheel with `wheel_args` and our party with `tls`, both verifying; returns our
/// error (the link must not come up), bounded in time, and the wheel's log.
fn refused(id: &str, wheel_args: &[String], tls: TlsOptions) -> (LinkError, String) {
    let py = python();
    let (rust_port, py_port) = (free_port(), free_port());
    let args: Vec<&str> = wheel_args.iter().map(String::as_str).collect();
    let peer = Peer::start(&py, 1, py_port, rust_port, id, "full", &args);
    let mut o = opts(id, 0, rust_port, py_port);
    o.tls = Some(tls);
    let t = Instant::now();
    let r = Session::start(&o, &Cancel::new());
    let waited = t.elapsed();
    let log = peer.log();
    let err = match r {
        Ok(_) => panic!("the link came up despite the wrong CA\nwheel log:\n{log}"),
        Err(e) => e,
    };
    // The wheel needs a few seconds to import and listen; the refusal itself is immediate.
    assert!(
        waited < Duration::from_secs(45),
        "took {waited:?} (a timeout, not a refusal): {err}\nwheel log:\n{log}"
    );
    eprintln!("refused after {waited:?}: {err}");
    drop(peer);
    (err, log)
}

/// The wheel's certificate is from a CA we do not trust: we refuse it (as its client, and as
/// the server its client dials) with a TLS certificate error naming our CA file, at once.
#[test]
fn a_wheel_certificate_from_another_ca_is_refused_with_a_tls_error() {
    let certs = Certs::new("wheelrogue");
    let ca = certs.ca("shared");
    let rogue = certs.ca("rogue");
    certs.leaf("wheel", &rogue);
    certs.leaf("blindjoin", &ca);
    let (err, log) = refused(
        "tlsrogue",
        &certs.wheel("wheel", "shared"),
        certs.ours("blindjoin", "shared"),
    );
    match &err {
        LinkError::TlsPeerCertificate { reason, .. } => assert!(
            reason.contains("not signed by a CA in") && reason.contains("shared.ca.pem"),
            "{err}"
        ),
        other => panic!("expected TlsPeerCertificate, got {other}\nwheel log:\n{log}"),
    }
}

/// Our certificate is from a CA the wheel does not trust: the wheel's OpenSSL refuses it, and
/// we report that as a TLS error (its alert), not as a connect timeout.
#[test]
fn the_wheel_refusing_our_certificate_is_a_tls_error() {
    let certs = Certs::new("oursrogue");
    let ca = certs.ca("shared");
    let rogue = certs.ca("rogue");
    certs.leaf("wheel", &ca);
    certs.leaf("blindjoin", &rogue);
    let (err, log) = refused(
        "tlsours",
        &certs.wheel("wheel", "shared"),
        certs.ours("blindjoin", "shared"),
    );
    assert!(
        matches!(
            err,
            LinkError::TlsRefusedByPeer { .. } | LinkError::TlsHandshake { .. }
        ),
        "expected the wheel's refusal as a TLS error, got {err}\nwheel log:\n{log}"
    );
}
