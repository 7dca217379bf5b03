//! Mutual TLS on 127.0.0.1 with certificates made by rcgen: the right certificates work; a wrong
//! CA, a certificate for another party and an expired certificate fail on *both* sides, quickly,
//! with errors that say why.

use crate::tests::{exchange, free_port, opts};
use crate::{Cancel, Link, LinkError, TcpLink, TlsConfig};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, date_time_ymd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A CA: its certificate file and what it needs to sign.
struct Ca {
    pem_path: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bj-tls-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ca(dir: &Path, name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    let cert = params.self_signed(&key).unwrap();
    let pem_path = dir.join(format!("{name}.crt"));
    std::fs::write(&pem_path, cert.pem()).unwrap();
    Ca {
        pem_path,
        issuer: Issuer::new(params, key),
    }
}

/// How a party's certificate names it.
enum Names<'a> {
    /// A DNS subject-alternative name (and the same CN).
    San(&'a str),
    /// Only the subject common name.
    CnOnly(&'a str),
}

/// Writes `<file>.crt` / `<file>.key` signed by `signer`; `trust` is the CA file the party uses.
fn party(
    dir: &Path,
    file: &str,
    names: Names<'_>,
    signer: &Ca,
    trust: &Ca,
    expired: bool,
) -> TlsConfig {
    let key = KeyPair::generate().unwrap();
    let (sans, cn) = match names {
        Names::San(n) => (vec![n.to_string()], n),
        Names::CnOnly(n) => (Vec::new(), n),
    };
    let mut params = CertificateParams::new(sans).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    if expired {
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2021, 1, 1);
    }
    let cert = params.signed_by(&key, &signer.issuer).unwrap();
    let cfg = TlsConfig {
        cert_path: dir.join(format!("{file}.crt")),
        key_path: dir.join(format!("{file}.key")),
        ca_path: trust.pem_path.clone(),
    };
    std::fs::write(&cfg.cert_path, cert.pem()).unwrap();
    std::fs::write(&cfg.key_path, key.serialize_pem()).unwrap();
    cfg
}

type Est = Result<TcpLink, LinkError>;

/// Certificates for "alice" and "bob" from one CA, in a directory named after `name`.
pub(crate) fn pair_configs(name: &str) -> (TlsConfig, TlsConfig) {
    let dir = tmp(name);
    let ca = ca(&dir, "main");
    let alice = party(&dir, "alice", Names::San("alice"), &ca, &ca, false);
    let bob = party(&dir, "bob", Names::San("bob"), &ca, &ca, false);
    (alice, bob)
}

/// Runs "receiver" (the listener: TLS server) and "sender" (the connector: TLS client).
fn pair(receiver: Option<TlsConfig>, sender: Option<TlsConfig>) -> (Est, Est, Duration) {
    let (pr, ps) = (free_port(), free_port());
    let mut r = opts("receiver", pr, "sender", ps);
    r.tls = receiver;
    let mut s = opts("sender", ps, "receiver", pr);
    s.tls = sender;
    let start = Instant::now();
    let t = std::thread::spawn(move || TcpLink::establish(&s));
    let r = TcpLink::establish(&r);
    let s = t.join().unwrap();
    (r, s, start.elapsed())
}

fn err(e: Est) -> LinkError {
    match e {
        Ok(_) => panic!("expected the link to fail"),
        Err(e) => e,
    }
}

#[test]
fn tls_with_right_certificates_moves_messages_both_ways() {
    let dir = tmp("ok");
    let ca = ca(&dir, "main");
    // The receiver is named by a DNS SAN, the sender only by its CN: both are accepted.
    let r = party(&dir, "receiver", Names::San("receiver"), &ca, &ca, false);
    let s = party(&dir, "sender", Names::CnOnly("sender"), &ca, &ca, false);
    let (r, s, _) = pair(Some(r), Some(s));
    let (mut r, mut s) = (r.unwrap(), s.unwrap());
    exchange(&mut r, &mut s);
    s.send(b"back").unwrap();
    assert_eq!(r.recv().unwrap(), b"back");
    s.abort("nothing wrong, testing");
    assert!(matches!(r.recv(), Err(LinkError::PeerAborted { .. })));
    let t = std::thread::spawn(move || s.close());
    // The sender aborted, so our close sees no close frame from it; both ends still finish.
    let _ = r.close();
    let _ = t.join().unwrap();
}

#[test]
fn tls_close_is_clean_on_both_sides() {
    let dir = tmp("close");
    let ca = ca(&dir, "main");
    let r = party(&dir, "receiver", Names::San("receiver"), &ca, &ca, false);
    let s = party(&dir, "sender", Names::San("sender"), &ca, &ca, false);
    let (r, s, _) = pair(Some(r), Some(s));
    let (mut r, mut s) = (r.unwrap(), s.unwrap());
    r.send(b"hi").unwrap();
    assert_eq!(s.recv().unwrap(), b"hi");
    assert_eq!(r.stats().bytes_sent, crate::frame::OVERHEAD as u64 + 2);
    let t = std::thread::spawn(move || s.close().unwrap());
    r.close().unwrap();
    t.join().unwrap();
}

fn assert_fast(elapsed: Duration) {
    assert!(
        elapsed < Duration::from_secs(8),
        "took {elapsed:?}: a refused handshake must not wait for a timeout"
    );
}

#[test]
fn tls_certificate_from_another_ca_fails_on_both_sides() {
    let dir = tmp("ca");
    let (ca, other) = (ca(&dir, "main"), ca(&dir, "other"));
    let r = party(&dir, "receiver", Names::San("receiver"), &ca, &ca, false);
    let s = party(&dir, "sender", Names::San("sender"), &other, &ca, false);
    let (r, s, took) = pair(Some(r), Some(s));
    assert_fast(took);
    let (r, s) = (err(r), err(s));
    assert!(
        matches!(&r, LinkError::TlsPeerCertificate { reason, .. } if reason.contains("not signed by a CA")),
        "{r}"
    );
    assert!(
        matches!(&s, LinkError::TlsRefusedByPeer { alert, .. } if alert == "UnknownCA"),
        "{s}"
    );
    assert!(s.to_string().contains("refused the TLS handshake"), "{s}");
}

#[test]
fn tls_certificate_for_another_party_id_fails_on_both_sides() {
    let dir = tmp("id");
    let ca = ca(&dir, "main");
    // The connector shows a valid certificate for "carol": the listener refuses it.
    let r = party(&dir, "receiver", Names::San("receiver"), &ca, &ca, false);
    let s = party(&dir, "carol", Names::San("carol"), &ca, &ca, false);
    let (r, s, took) = pair(Some(r.clone()), Some(s));
    assert_fast(took);
    let (r_err, s_err) = (err(r), err(s));
    assert!(
        matches!(&r_err, LinkError::TlsPeerCertificate { reason, .. }
            if reason.contains("not a certificate for party \"sender\"") && reason.contains("carol")),
        "{r_err}"
    );
    assert!(
        matches!(s_err, LinkError::TlsRefusedByPeer { .. }),
        "{s_err}"
    );

    // The listener shows one: the connector refuses it.
    let bad = party(&dir, "carol2", Names::CnOnly("carol"), &ca, &ca, false);
    let s = party(&dir, "sender", Names::San("sender"), &ca, &ca, false);
    let (r, s, took) = pair(Some(bad), Some(s));
    assert_fast(took);
    let (r_err, s_err) = (err(r), err(s));
    assert!(
        matches!(&s_err, LinkError::TlsPeerCertificate { reason, .. }
            if reason.contains("not a certificate for party \"receiver\"")),
        "{s_err}"
    );
    assert!(
        matches!(&r_err, LinkError::TlsRefusedByPeer { hint, .. } if hint.contains("party's id")),
        "{r_err}"
    );
}

#[test]
fn tls_expired_certificate_fails_on_both_sides() {
    let dir = tmp("expired");
    let ca = ca(&dir, "main");
    let r = party(&dir, "receiver", Names::San("receiver"), &ca, &ca, true);
    let s = party(&dir, "sender", Names::San("sender"), &ca, &ca, false);
    let (r, s, took) = pair(Some(r), Some(s));
    assert_fast(took);
    let (r, s) = (err(r), err(s));
    assert!(
        matches!(&s, LinkError::TlsPeerCertificate { reason, .. } if reason.contains("expired")),
        "{s}"
    );
    assert!(
        matches!(&r, LinkError::TlsRefusedByPeer { alert, .. } if alert == "CertificateExpired"),
        "{r}"
    );
}

#[test]
fn tls_missing_or_bad_files_are_named_before_connecting() {
    let dir = tmp("files");
    let ca = ca(&dir, "main");
    let good = party(&dir, "sender", Names::San("sender"), &ca, &ca, false);
    let check = |cfg: TlsConfig, what: &str, path: &Path, why: &str| {
        let mut o = opts("sender", free_port(), "receiver", free_port());
        o.tls = Some(cfg);
        let start = Instant::now();
        let e = err(TcpLink::establish(&o));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "must fail before waiting"
        );
        match &e {
            LinkError::TlsFile {
                what: w,
                path: p,
                reason,
            } => {
                assert_eq!(*w, what);
                assert_eq!(p, path);
                assert!(reason.contains(why), "{e}");
            }
            other => panic!("expected TlsFile, got {other}"),
        }
        assert!(e.to_string().contains(&path.display().to_string()));
    };
    let missing = dir.join("nope.crt");
    let cfg = TlsConfig {
        cert_path: missing.clone(),
        ..good.clone()
    };
    check(cfg, "certificate", &missing, "no such file");
    let cfg = TlsConfig {
        key_path: good.cert_path.clone(),
        ..good.clone()
    };
    check(
        cfg,
        "private key",
        &good.cert_path,
        "no usable PEM private key",
    );
    let cfg = TlsConfig {
        ca_path: good.key_path.clone(),
        ..good.clone()
    };
    check(
        cfg,
        "CA",
        &good.key_path,
        "no `-----BEGIN CERTIFICATE-----`",
    );
}

#[test]
fn tls_on_one_side_only_fails_on_both_sides() {
    let dir = tmp("mixed");
    let ca = ca(&dir, "main");
    let s = party(&dir, "sender", Names::San("sender"), &ca, &ca, false);
    let (r, s, took) = pair(None, Some(s));
    assert_fast(took);
    for e in [err(r), err(s)] {
        assert!(
            matches!(&e, LinkError::WrongPeer(m) if m.contains("enable_ssl")),
            "{e}"
        );
    }
}

/// The n-party mesh carries TLS on every link: four parties, each with its own certificate from
/// one CA, all connect (listeners as TLS servers, connectors as clients) and exchange messages.
#[test]
fn tls_reaches_every_link_of_an_n_party_mesh() {
    use crate::{Cancel, PartyAddr, establish_many};
    let dir = tmp("mesh");
    let ca = ca(&dir, "main");
    let ids = ["p0", "p1", "p2", "p3"];
    let parties: Vec<PartyAddr> = ids
        .iter()
        .map(|id| PartyAddr {
            id: id.to_string(),
            addr: format!("127.0.0.1:{}", free_port()),
        })
        .collect();
    let handles: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(me, id)| {
            let cfg = party(&dir, id, Names::San(id), &ca, &ca, false);
            let parties = parties.clone();
            std::thread::spawn(move || {
                let base = opts("x", 0, "y", 0);
                let mut links = establish_many(
                    &parties,
                    me,
                    &base,
                    Some(cfg.clone()),
                    Some(cfg),
                    &Cancel::new(),
                )
                .unwrap();
                for l in links.iter_mut().flatten() {
                    l.send(format!("from {me}").as_bytes()).unwrap();
                }
                for (p, l) in links.iter_mut().enumerate() {
                    if let Some(l) = l {
                        assert_eq!(l.recv().unwrap(), format!("from {p}").into_bytes());
                    }
                }
                let mut order: Vec<usize> = (0..4).filter(|&p| p != me).collect();
                order.sort_by_key(|&p| (p.min(me), p.max(me)));
                for p in order {
                    links[p].as_mut().unwrap().close().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Over TLS, a listener that reaches an always-listening peer by dialling is the TLS client,
/// with the same certificate, and the peer's name is still checked.
#[test]
fn tls_to_a_peer_that_always_listens() {
    let (alice, bob) = pair_configs("serving");
    let (pa, pb) = (free_port(), free_port());
    let mut server = opts("bob", pb, "alice", pa);
    server.tls = Some(bob);
    let t = std::thread::spawn(move || TcpLink::establish_as(&server, true, &Cancel::new()));
    std::thread::sleep(Duration::from_millis(100));
    let mut client = opts("alice", pa, "bob", pb);
    client.tls = Some(alice);
    let mut c = TcpLink::establish(&client).unwrap();
    let mut s = t.join().unwrap().unwrap();
    exchange(&mut c, &mut s);
    let t = std::thread::spawn(move || s.close());
    let _ = c.close();
    let _ = t.join().unwrap();
}
