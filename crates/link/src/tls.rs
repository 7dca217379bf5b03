//! Mutual TLS over the TCP link (rustls, ring provider, TLS 1.3 only: both ends are blindjoin).
//!
//! The TCP connection and the plaintext greeting happen exactly as without TLS (the greeting's
//! magic says whether this party wants TLS, so a mismatch is reported on both sides). Then the
//! party that connected runs a TLS client, the listener a TLS server, and both present their
//! certificate chain and verify the peer's against their CA file. Besides the chain, the peer's
//! certificate must *name the peer's party id*: a DNS subject-alternative name (compared
//! case-insensitively) or the subject common name (compared exactly) equal to the id in the
//! config. A certificate for another party is refused even when the CA signed it.
//!
//! After the handshake the listener sends a short confirmation inside TLS. In TLS 1.3 the client
//! finishes its side of the handshake before the server has checked the client's certificate; the
//! confirmation makes the client wait for that check, so a refusal reaches it as a TLS alert
//! during connection set-up instead of as a broken link later.
//!
//! Data path: one [`rustls::Connection`] behind a mutex, shared by the reader thread (decrypts
//! what the socket delivers) and the writer (encrypts frames). Neither holds the connection lock
//! across socket I/O, so both directions keep flowing when both parties send large batches at once.
//! A second mutex orders the writes of TLS records onto the socket.

use crate::LinkError;
use crate::patience::PatientSocket;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, ClientConnection, Connection,
    DigitallySignedStruct, DistinguishedName, OtherError, RootCertStore, ServerConfig,
    ServerConnection, SignatureScheme,
};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The certificate files of one party.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlsConfig {
    /// PEM file with this party's certificate, then any intermediate certificates.
    pub cert_path: PathBuf,
    /// PEM file with the private key of that certificate (PKCS#8, PKCS#1 or SEC1).
    pub key_path: PathBuf,
    /// PEM file with the CA certificate(s) the peer's chain must lead to.
    pub ca_path: PathBuf,
}

/// How long the TLS handshake and the confirmation may take once the greeting is done.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Sent by the listener inside TLS once it has accepted the connector's certificate.
const CONFIRM: &[u8; 8] = b"BLNDJOK1";

/// Plaintext written into rustls per lock, which bounds the ciphertext buffered per write.
const WRITE_CHUNK: usize = 1 << 16;

/// A TLS configuration loaded from files, for the side this party plays.
pub(crate) struct TlsContext {
    side: Side,
    ca_path: PathBuf,
    peer_id: String,
}

enum Side {
    Client(Arc<ClientConfig>),
    Server(Arc<ServerConfig>),
}

fn file_err(what: &'static str, path: &Path, reason: impl Into<String>) -> LinkError {
    LinkError::TlsFile {
        what,
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>, LinkError> {
    std::fs::read(path).map_err(|e| {
        let reason = match e.kind() {
            ErrorKind::NotFound => "no such file".to_string(),
            ErrorKind::PermissionDenied => "permission denied".to_string(),
            _ => e.to_string(),
        };
        file_err(what, path, format!("cannot read it: {reason}"))
    })
}

pub(crate) fn read_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, LinkError> {
    let pem = read_file(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(what, path, format!("not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_err(
            what,
            path,
            "holds no `-----BEGIN CERTIFICATE-----` block",
        ));
    }
    Ok(certs)
}

/// The private key in `path`. The file's bytes are wiped once parsed; the key itself is handed
/// to rustls, which owns it from then on.
pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, LinkError> {
    let pem = zeroize::Zeroizing::new(read_file("private key", path)?);
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        file_err(
            "private key",
            path,
            format!("holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
        )
    })
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsContext {
    /// Loads the files and builds the client (connector) or server (listener) configuration.
    pub(crate) fn load(
        cfg: &TlsConfig,
        peer_id: &str,
        listener: bool,
    ) -> Result<TlsContext, LinkError> {
        let chain = read_certs("certificate", &cfg.cert_path)?;
        let key = read_key(&cfg.key_path)?;
        let mut roots = RootCertStore::empty();
        for ca in read_certs("CA", &cfg.ca_path)? {
            roots.add(ca).map_err(|e| {
                file_err(
                    "CA",
                    &cfg.ca_path,
                    format!("holds a certificate that is not a usable CA: {e}"),
                )
            })?;
        }
        let roots = Arc::new(roots);
        let provider = provider();
        let setup = |e: rustls::Error| {
            LinkError::TlsSetup(format!(
                "certificate {} with key {}: {e}; check that the key belongs to the certificate",
                cfg.cert_path.display(),
                cfg.key_path.display()
            ))
        };
        let side = if listener {
            let inner = WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| file_err("CA", &cfg.ca_path, e.to_string()))?;
            let verifier = Arc::new(ClientVerifier {
                inner,
                peer_id: peer_id.to_string(),
            });
            let mut config = ServerConfig::builder_with_provider(provider)
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(setup)?
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
                .map_err(setup)?;
            // No resumption: one connection per run.
            config.send_tls13_tickets = 0;
            Side::Server(Arc::new(config))
        } else {
            let verifier = Arc::new(ServerVerifier {
                roots,
                algs: provider.signature_verification_algorithms,
                peer_id: Some(peer_id.to_string()),
            });
            let mut config = ClientConfig::builder_with_provider(provider)
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(setup)?
                .dangerous() // Only to add the party-id check; the chain check is webpki's.
                .with_custom_certificate_verifier(verifier)
                .with_client_auth_cert(chain, key)
                .map_err(setup)?;
            config.resumption = rustls::client::Resumption::disabled();
            // The peer is identified by its party id, which need not be a DNS name.
            config.enable_sni = false;
            Side::Client(Arc::new(config))
        };
        Ok(TlsContext {
            side,
            ca_path: cfg.ca_path.clone(),
            peer_id: peer_id.to_string(),
        })
    }

    /// Runs the handshake (and the confirmation) on `stream`, bounded by [`HANDSHAKE_TIMEOUT`].
    pub(crate) fn handshake(&self, stream: &mut TcpStream) -> Result<Connection, LinkError> {
        let peer = &self.peer_id;
        let io = |source| LinkError::Io {
            peer: peer.clone(),
            source,
        };
        stream
            .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(io)?;
        stream
            .set_write_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(io)?;
        let mut conn: Connection = match &self.side {
            Side::Client(cfg) => {
                // Not sent (SNI is off) and not checked against (the verifier checks the id).
                let name = ServerName::try_from("blindjoin-peer").map_err(|e| {
                    LinkError::TlsSetup(format!("internal error: placeholder server name: {e}"))
                })?;
                ClientConnection::new(cfg.clone(), name)
                    .map_err(|e| self.failed(e))?
                    .into()
            }
            Side::Server(cfg) => ServerConnection::new(cfg.clone())
                .map_err(|e| self.failed(e))?
                .into(),
        };
        while conn.is_handshaking() {
            conn.complete_io(stream).map_err(|e| self.io_failed(e))?;
        }
        match &self.side {
            Side::Server(_) => {
                conn.writer().write_all(CONFIRM).map_err(io)?;
                while conn.wants_write() {
                    conn.write_tls(stream).map_err(|e| self.io_failed(e))?;
                }
            }
            Side::Client(_) => self.await_confirmation(&mut conn, stream)?,
        }
        stream.set_read_timeout(None).map_err(io)?;
        stream.set_write_timeout(None).map_err(io)?;
        Ok(conn)
    }

    fn await_confirmation(
        &self,
        conn: &mut Connection,
        stream: &mut TcpStream,
    ) -> Result<(), LinkError> {
        let mut got = [0u8; CONFIRM.len()];
        let mut n = 0;
        while n < got.len() {
            match conn.reader().read(&mut got[n..]) {
                Ok(0) => return Err(self.closed_during_handshake()),
                Ok(k) => n += k,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if conn.read_tls(stream).map_err(|e| self.io_failed(e))? == 0 {
                        return Err(self.closed_during_handshake());
                    }
                    conn.process_new_packets().map_err(|e| self.failed(e))?;
                }
                Err(e) => return Err(self.io_failed(e)),
            }
        }
        if &got != CONFIRM {
            return Err(LinkError::TlsHandshake {
                peer: self.peer_id.clone(),
                reason: "the peer's confirmation after the handshake is wrong".into(),
            });
        }
        Ok(())
    }

    fn closed_during_handshake(&self) -> LinkError {
        LinkError::TlsHandshake {
            peer: self.peer_id.clone(),
            reason: "the peer closed the connection during the TLS handshake; it most likely \
                     refused the handshake, see its own error output"
                .into(),
        }
    }

    /// An I/O error from rustls's stream helpers: a TLS error inside, a timeout, or EOF.
    fn io_failed(&self, e: std::io::Error) -> LinkError {
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return self.failed(tls.clone());
        }
        match e.kind() {
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => self.closed_during_handshake(),
            ErrorKind::WouldBlock | ErrorKind::TimedOut => LinkError::TlsHandshake {
                peer: self.peer_id.clone(),
                reason: format!(
                    "no answer within {HANDSHAKE_TIMEOUT:?}; is the peer configured for TLS too?"
                ),
            },
            _ => LinkError::TlsHandshake {
                peer: self.peer_id.clone(),
                reason: e.to_string(),
            },
        }
    }

    /// Sorts a rustls error into: we refused the peer, the peer refused us, or anything else.
    fn failed(&self, e: rustls::Error) -> LinkError {
        let peer = self.peer_id.clone();
        match e {
            rustls::Error::InvalidCertificate(c) => LinkError::TlsPeerCertificate {
                peer,
                reason: self.certificate_problem(&c),
            },
            rustls::Error::AlertReceived(alert) => LinkError::TlsRefusedByPeer {
                peer,
                alert: format!("{alert:?}"),
                hint: alert_hint(alert).to_string(),
            },
            e => LinkError::TlsHandshake {
                peer,
                reason: e.to_string(),
            },
        }
    }

    fn certificate_problem(&self, c: &CertificateError) -> String {
        let ca = self.ca_path.display();
        match c {
            CertificateError::UnknownIssuer => format!(
                "it is not signed by a CA in {ca}; give both parties certificates from the same CA, and that CA's certificate as ca_file_path"
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => format!(
                "it has expired ({c}); the peer needs a new certificate (or this machine's clock is wrong)"
            ),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("it is not valid yet ({c}); check both machines' clocks")
            }
            CertificateError::Other(OtherError(inner)) => inner.to_string(),
            other => other.to_string(),
        }
    }
}

fn alert_hint(alert: AlertDescription) -> &'static str {
    match alert {
        AlertDescription::UnknownCA => {
            "it does not trust the CA that signed this party's certificate; both parties need certificates from the CA in the other's ca_file_path"
        }
        AlertDescription::CertificateExpired => {
            "a certificate is expired or not yet valid (this party's, or the peer's clock is off); renew this party's certificate"
        }
        AlertDescription::CertificateUnknown | AlertDescription::BadCertificate => {
            "it does not accept this party's certificate; most often the certificate does not name this party's id (as a DNS name or the common name)"
        }
        AlertDescription::DecryptError => {
            "a signature did not verify; check that this party's key belongs to its certificate"
        }
        _ => "see the peer's own error output for the reason",
    }
}

/// The names a certificate gives its subject: DNS subject-alternative names, then common names.
fn subject_names(der: &CertificateDer<'_>) -> Result<(Vec<String>, Vec<String>), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| format!("cannot parse the certificate: {e}"))?;
    let mut dns = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(n) = name {
                dns.push((*n).to_string());
            }
        }
    }
    let cns = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    Ok((dns, cns))
}

/// The certificate names the party `expected`, or an error that says what it names instead.
fn check_identity(end_entity: &CertificateDer<'_>, expected: &str) -> Result<(), rustls::Error> {
    let fail = |reason: String| {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
            IdentityMismatch(reason),
        ))))
    };
    let (dns, cns) = subject_names(end_entity).map_err(fail)?;
    if dns.iter().any(|n| n.eq_ignore_ascii_case(expected)) || cns.iter().any(|n| n == expected) {
        return Ok(());
    }
    Err(fail(format!(
        "it is not a certificate for party {expected:?}: it names DNS {dns:?} and common name {cns:?}; \
         the peer's certificate must have its party id (from link_config.parties) as a DNS \
         subject-alternative name or as the subject CN"
    )))
}

#[derive(Debug)]
struct IdentityMismatch(String);

impl std::fmt::Display for IdentityMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for IdentityMismatch {}

/// The connector's check of the listener: webpki's chain check, then the party id (when there is
/// one to check: SecretFlow's link checks the chain only, as brpc does).
#[derive(Debug)]
pub(crate) struct ServerVerifier {
    roots: Arc<RootCertStore>,
    algs: WebPkiSupportedAlgorithms,
    peer_id: Option<String>,
}

impl ServerVerifier {
    /// A verifier of the chain alone (no name check).
    pub(crate) fn chain_only(roots: Arc<RootCertStore>, algs: WebPkiSupportedAlgorithms) -> Self {
        ServerVerifier {
            roots,
            algs,
            peer_id: None,
        }
    }
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algs.all,
        )?;
        if let Some(id) = &self.peer_id {
            check_identity(end_entity, id)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The listener's check of the connector: webpki's client verifier, then the party id.
#[derive(Debug)]
struct ClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    peer_id: String,
}

impl ClientCertVerifier for ClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)?;
        check_identity(end_entity, &self.peer_id)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The connection state shared by the reader thread and the writer. Lock order: `socket` before
/// `conn`; nobody holds `conn` during socket I/O. `S` is the writing half of the socket (our
/// link's [`PatientSocket`]; SecretFlow's link writes to a plain `TcpStream`).
pub(crate) struct Shared<S = PatientSocket> {
    conn: Mutex<Connection>,
    /// The writing half of the socket; held while records are drained from `conn` and written,
    /// so records reach the socket in the order rustls produced them.
    socket: Mutex<S>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere cannot leave rustls's state half-updated in a way we could detect;
    // the next TLS operation reports any inconsistency as an error.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: Write> Shared<S> {
    pub(crate) fn new(conn: Connection, socket: S) -> Arc<Shared<S>> {
        Arc::new(Shared {
            conn: Mutex::new(conn),
            socket: Mutex::new(socket),
        })
    }

    /// Drains every pending TLS record and writes it (the caller holds the socket lock).
    fn flush_records(&self, socket: &mut S) -> std::io::Result<()> {
        let mut records = Vec::new();
        {
            let mut conn = lock(&self.conn);
            while conn.wants_write() {
                conn.write_tls(&mut records)?;
            }
        }
        socket.write_all(&records)
    }
}

/// The encrypting writer under the link's `BufWriter`.
pub(crate) struct TlsWriter<S = PatientSocket> {
    pub(crate) shared: Arc<Shared<S>>,
}

impl<S: Write> TlsWriter<S> {
    /// Sends TLS's close_notify; best effort.
    pub(crate) fn close_notify(&mut self) {
        let mut socket = lock(&self.shared.socket);
        lock(&self.shared.conn).send_close_notify();
        let _ = self.shared.flush_records(&mut socket);
    }
}

impl<S: Write> Write for TlsWriter<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let chunk = &buf[..buf.len().min(WRITE_CHUNK)];
        let mut socket = lock(&self.shared.socket);
        loop {
            let n = lock(&self.shared.conn).writer().write(chunk)?;
            self.shared.flush_records(&mut socket)?;
            // 0 only when rustls's outgoing buffer was full; it is empty now.
            if n > 0 {
                return Ok(n);
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let mut socket = lock(&self.shared.socket);
        self.shared.flush_records(&mut socket)?;
        socket.flush()
    }
}

/// The decrypting reader the reader thread frames from.
pub(crate) struct TlsReader<S = PatientSocket> {
    pub(crate) shared: Arc<Shared<S>>,
    pub(crate) socket: TcpStream,
    raw: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
}

impl<S: Write> TlsReader<S> {
    pub(crate) fn new(shared: Arc<Shared<S>>, socket: TcpStream) -> TlsReader<S> {
        TlsReader {
            shared,
            socket,
            raw: vec![0u8; 1 << 16],
            start: 0,
            end: 0,
            eof: false,
        }
    }
}

fn tls_to_io(e: rustls::Error) -> std::io::Error {
    std::io::Error::new(ErrorKind::InvalidData, e)
}

impl<S: Write> Read for TlsReader<S> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let mut conn = lock(&self.shared.conn);
            match conn.reader().read(out) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if self.eof {
                // rustls reports EOF itself above; this only guards against a busy loop.
                return Ok(0);
            }
            if self.start < self.end {
                let mut rest = &self.raw[self.start..self.end];
                let before = rest.len();
                conn.read_tls(&mut rest)?;
                self.start += before - rest.len();
                conn.process_new_packets().map_err(tls_to_io)?;
                let wants_write = conn.wants_write();
                drop(conn);
                if wants_write {
                    // A key update to answer, say. If the writer holds the socket it drains
                    // these records with its own next write.
                    if let Ok(mut socket) = self.shared.socket.try_lock() {
                        let _ = self.shared.flush_records(&mut socket);
                    }
                }
                continue;
            }
            drop(conn);
            let n = self.socket.read(&mut self.raw)?;
            (self.start, self.end) = (0, n);
            if n == 0 {
                self.eof = true;
                let mut conn = lock(&self.shared.conn);
                conn.read_tls(&mut &[][..])?;
                conn.process_new_packets().map_err(tls_to_io)?;
            }
        }
    }
}
