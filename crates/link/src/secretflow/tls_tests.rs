//! Two blindjoin parties speaking SecretFlow's link over TLS on 127.0.0.1 (certificates from
//! rcgen). The wheel interop case is `tests/secretflow_interop.rs`.

use super::tests::{big, pair_opts};
use super::*;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

/// A scratch directory with CA and party certificates, removed on drop.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new(name: &str) -> Certs {
        let dir = std::env::temp_dir().join(format!("sf-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Certs { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// A CA `<name>.ca.pem`.
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

    /// `<name>.pem` and `<name>.key`, signed by `ca`.
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

    /// Both sides present `<name>`'s certificate; both verify against `ca` when given.
    fn opts(&self, name: &str, ca: Option<&str>) -> TlsOptions {
        let side = |present: bool| SslOptions {
            certificate_path: present.then(|| self.path(&format!("{name}.pem"))),
            private_key_path: present.then(|| self.path(&format!("{name}.key"))),
            verify: ca.is_some(),
            ca_file_path: ca.map(|c| self.path(&format!("{c}.ca.pem"))),
        };
        TlsOptions {
            server_ssl_opts: side(true),
            client_ssl_opts: side(true),
        }
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `f` on a thread and waits for it at most `limit` (a hang fails the test).
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(e) => panic!("{what}: no result within {limit:?} ({e})"),
    }
}

/// Where a party's whole run (start, one AllGather, stop) reports.
type Outcome = mpsc::Receiver<Result<(), LinkError>>;

/// Starts both parties, each on its own thread.
fn start_both(o0: Options, o1: Options) -> (Outcome, Outcome) {
    let run = |o: Options| {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let r = Session::start(&o, &Cancel::new()).and_then(|(s, mut ctx)| {
                let me = ctx.rank();
                let g = ctx.all_gather(format!("r{me}").as_bytes())?;
                assert_eq!(g, vec![b"r0".to_vec(), b"r1".to_vec()]);
                s.stop()
            });
            let _ = tx.send(r);
        });
        rx
    };
    (run(o0), run(o1))
}

#[test]
fn two_parties_over_mutual_tls_exchange_chunks_collectives_and_close() {
    let certs = Certs::new("mutual");
    let ca = certs.ca("one");
    certs.leaf("alice", &ca);
    certs.leaf("bob", &ca);
    let (mut o0, mut o1) = pair_opts();
    o0.tls = Some(certs.opts("alice", Some("one")));
    o1.tls = Some(certs.opts("bob", Some("one")));
    o0.http_max_payload_size = 1000;
    o1.http_max_payload_size = 100_000;
    let peer = thread::spawn(move || -> Result<(), LinkError> {
        thread::sleep(Duration::from_millis(500));
        let (s, mut ctx) = Session::start(&o1, &Cancel::new())?;
        assert_eq!(ctx.recv()?, b"hello over tls");
        assert_eq!(ctx.recv()?, big(10_500, 1));
        ctx.send(&big(3_000_000, 2))?;
        let g = ctx.all_gather(b"one")?;
        assert_eq!(g, vec![b"zero".to_vec(), b"one".to_vec()]);
        ctx.barrier()?;
        let mut sub = ctx.spawn();
        assert_eq!(sub.recv()?, b"sub");
        s.stop()
    });
    let result = within(Duration::from_secs(60), "TLS exchange", move || {
        let (s, mut ctx) = Session::start(&o0, &Cancel::new())?;
        ctx.send(b"hello over tls")?;
        ctx.send(&big(10_500, 1))?;
        assert_eq!(ctx.recv()?, big(3_000_000, 2));
        let g = ctx.all_gather(b"zero")?;
        assert_eq!(g, vec![b"zero".to_vec(), b"one".to_vec()]);
        ctx.barrier()?;
        let mut sub = ctx.spawn();
        sub.send(b"sub")?;
        let traffic = s.traffic();
        s.stop()?;
        Ok::<_, LinkError>(traffic)
    });
    let (sent, received) = result.unwrap();
    assert!(sent > 10_500 && received > 3_000_000, "{sent} {received}");
    peer.join().unwrap().unwrap();
}

#[test]
fn tls_without_verification_needs_no_ca_and_no_client_certificate() {
    let certs = Certs::new("noverify");
    let ca = certs.ca("one");
    certs.leaf("alice", &ca);
    let other = certs.ca("two");
    certs.leaf("bob", &other);
    let (mut o0, mut o1) = pair_opts();
    // verify_depth 0 on both sides: any certificate is fine, and a client need present none.
    o0.tls = Some(certs.opts("alice", None));
    let mut t1 = certs.opts("bob", None);
    t1.client_ssl_opts.certificate_path = None;
    t1.client_ssl_opts.private_key_path = None;
    o1.tls = Some(t1);
    let (r0, r1) = start_both(o0, o1);
    let limit = Duration::from_secs(40);
    r0.recv_timeout(limit).unwrap().unwrap();
    r1.recv_timeout(limit).unwrap().unwrap();
}

fn is_tls_error(e: &LinkError) -> bool {
    matches!(
        e,
        LinkError::TlsPeerCertificate { .. }
            | LinkError::TlsRefusedByPeer { .. }
            | LinkError::TlsHandshake { .. }
    )
}

#[test]
fn a_peer_certificate_from_another_ca_is_a_tls_error_on_both_sides_without_a_hang() {
    let certs = Certs::new("wrongca");
    let ca = certs.ca("one");
    certs.leaf("alice", &ca);
    let rogue = certs.ca("rogue");
    certs.leaf("mallory", &rogue);
    let (mut o0, mut o1) = pair_opts();
    // Long connect timeouts: the errors must come from the refusal, not from a timeout.
    o0.connect_timeout = Duration::from_secs(60);
    o1.connect_timeout = Duration::from_secs(60);
    o0.tls = Some(certs.opts("alice", Some("one")));
    // mallory trusts alice's CA, but its own certificate is from another CA.
    o1.tls = Some(certs.opts("mallory", Some("one")));
    let started = Instant::now();
    let (r0, r1) = start_both(o0, o1);
    let limit = Duration::from_secs(20);
    let e0 = r0.recv_timeout(limit).unwrap().unwrap_err();
    let e1 = r1.recv_timeout(limit).unwrap().unwrap_err();
    assert!(started.elapsed() < limit, "took {:?}", started.elapsed());
    // alice refuses mallory's certificate (as client and as server) and says why.
    match &e0 {
        LinkError::TlsPeerCertificate { reason, .. } => assert!(
            reason.contains("not signed by a CA in") && reason.contains("one.ca.pem"),
            "{e0}"
        ),
        other => panic!("alice: expected TlsPeerCertificate, got {other}"),
    }
    // mallory hears the refusal (an alert, or alice's server closing on it).
    assert!(is_tls_error(&e1), "mallory: expected a TLS error, got {e1}");
}

#[test]
fn a_verifying_server_refuses_a_client_without_a_certificate() {
    let certs = Certs::new("nocert");
    let ca = certs.ca("one");
    certs.leaf("alice", &ca);
    certs.leaf("bob", &ca);
    let (mut o0, mut o1) = pair_opts();
    o0.tls = Some(certs.opts("alice", Some("one")));
    let mut t1 = certs.opts("bob", Some("one"));
    t1.client_ssl_opts.certificate_path = None;
    t1.client_ssl_opts.private_key_path = None;
    o1.tls = Some(t1);
    let (r0, r1) = start_both(o0, o1);
    let limit = Duration::from_secs(20);
    let e0 = r0.recv_timeout(limit).unwrap().unwrap_err();
    let e1 = r1.recv_timeout(limit).unwrap().unwrap_err();
    match &e0 {
        LinkError::TlsPeerCertificate { reason, .. } => {
            assert!(reason.contains("presented no certificate"), "{e0}");
        }
        other => panic!("alice: expected TlsPeerCertificate, got {other}"),
    }
    assert!(is_tls_error(&e1), "bob: expected a TLS error, got {e1}");
}

#[test]
fn a_plaintext_peer_of_a_tls_party_is_named_as_such() {
    let certs = Certs::new("plain");
    let ca = certs.ca("one");
    certs.leaf("alice", &ca);
    let (mut o0, o1) = pair_opts();
    o0.tls = Some(certs.opts("alice", Some("one")));
    let (r0, r1) = start_both(o0, o1);
    let limit = Duration::from_secs(20);
    let e0 = r0.recv_timeout(limit).unwrap().unwrap_err();
    let e1 = r1.recv_timeout(limit).unwrap().unwrap_err();
    assert!(
        matches!(&e0, LinkError::TlsHandshake { reason, .. } if reason.contains("plaintext")),
        "TLS side: {e0}"
    );
    // The plaintext side sees a TLS ClientHello where a baidu_std frame should be.
    assert!(
        matches!(&e1, LinkError::TlsHandshake { reason, .. } if reason.contains("TLS is on at the peer")),
        "plaintext side: {e1}"
    );
}

#[test]
fn tls_options_are_checked_before_anything_is_bound() {
    let certs = Certs::new("opts");
    let ca = certs.ca("one");
    certs.leaf("alice", &ca);
    let (mut o0, _) = pair_opts();
    let field = |o: &Options| match o.validate() {
        Err(LinkError::InvalidOption { field, .. }) => field,
        other => panic!("expected InvalidOption, got {other:?}"),
    };
    let mut t = certs.opts("alice", Some("one"));
    t.server_ssl_opts.certificate_path = None;
    o0.tls = Some(t);
    assert_eq!(field(&o0), "tls.server_ssl_opts.certificate_path");
    let mut t = certs.opts("alice", Some("one"));
    t.client_ssl_opts.ca_file_path = None;
    o0.tls = Some(t);
    assert_eq!(field(&o0), "tls.client_ssl_opts.ca_file_path");
    let mut t = certs.opts("alice", Some("one"));
    t.client_ssl_opts.private_key_path = None;
    o0.tls = Some(t);
    assert_eq!(field(&o0), "tls.client_ssl_opts.private_key_path");

    // Files that exist but are not what they should be: TlsFile / TlsSetup, no panic.
    let garbage = certs.path("garbage.pem");
    std::fs::write(&garbage, b"\x00\xffnot pem at all-----BEGIN").unwrap();
    let start = |t: TlsOptions| {
        let mut o = o0.clone();
        o.tls = Some(t);
        o.connect_timeout = Duration::from_millis(200);
        Session::start(&o, &Cancel::new()).map(|_| ()).unwrap_err()
    };
    let mut t = certs.opts("alice", Some("one"));
    t.server_ssl_opts.certificate_path = Some(garbage.clone());
    assert!(matches!(
        start(t),
        LinkError::TlsFile {
            what: "certificate",
            ..
        }
    ));
    let mut t = certs.opts("alice", Some("one"));
    t.client_ssl_opts.ca_file_path = Some(garbage.clone());
    assert!(matches!(start(t), LinkError::TlsFile { what: "CA", .. }));
    let mut t = certs.opts("alice", Some("one"));
    t.server_ssl_opts.private_key_path = Some(Path::new("/nonexistent/key.pem").into());
    assert!(matches!(
        start(t),
        LinkError::TlsFile {
            what: "private key",
            ..
        }
    ));
    // A key that does not belong to the certificate.
    certs.leaf("bob", &ca);
    let mut t = certs.opts("alice", Some("one"));
    t.server_ssl_opts.private_key_path = Some(certs.path("bob.key"));
    assert!(matches!(start(t), LinkError::TlsSetup(_)));
}
