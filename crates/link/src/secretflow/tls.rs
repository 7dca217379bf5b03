//! TLS on SecretFlow's link: yacl's `enable_ssl` with `server_ssl_opts` / `client_ssl_opts`
//! (`yacl/link/transport/brpc_link.cc`), as brpc 1.11 does it (`src/brpc/details/ssl_helper.cpp`):
//!
//! - The brpc frames are unchanged, just inside TLS, on the same port as plaintext (brpc's
//!   server peeks at the first bytes of each connection and accepts both; this party, when TLS
//!   is on, accepts TLS only and names a plaintext peer in its error).
//! - `verify_depth` 0 means no verification at all (`SSL_VERIFY_NONE`: a brpc server then does not
//!   even ask for a client certificate); above 0 the peer must present a certificate chaining to
//!   `ca_file_path` (`SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT`). brpc checks no name
//!   in the certificate, and neither does this party.
//! - No SNI and no ALPN: yacl sets neither. TLS 1.3 (see [`VERSIONS`]); yacl's `ciphers`
//!   (e.g. the GM suites) is not supported.
//!
//! The handshake runs on the connection's own thread (the server's per-connection thread, the
//! client's dial), bounded in time.

use super::client::Failure;
use crate::LinkError;
use crate::tls::{ServerVerifier, provider, read_certs, read_key};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    AlertDescription, CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct,
    OtherError, RootCertStore, ServerConfig, ServerConnection, SignatureScheme,
};
use std::io::{ErrorKind, Read};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One side's TLS files and checks: yacl's `SSLOptions` (`cert.certificate_path`,
/// `cert.private_key_path`, `verify.verify_depth`, `verify.ca_file_path`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SslOptions {
    /// `cert.certificate_path`: PEM file with this party's certificate, then any intermediates.
    /// Required for the serving side; for the dialing side, `None` presents no client
    /// certificate (as brpc does with an empty path), which a verifying peer refuses.
    pub certificate_path: Option<PathBuf>,
    /// `cert.private_key_path`: PEM file with that certificate's key (PKCS#8, PKCS#1 or SEC1).
    /// Given exactly when `certificate_path` is.
    pub private_key_path: Option<PathBuf>,
    /// `verify.verify_depth > 0`: the peer must present a certificate that chains to
    /// `ca_file_path`. `false` (`verify_depth == 0`, yacl's default) checks nothing about the
    /// peer; the serving side then asks for no client certificate. The depth number itself is
    /// not enforced (webpki bounds the chain it builds).
    pub verify: bool,
    /// `verify.ca_file_path`: PEM file with the CA certificate(s) the peer's chain must lead to.
    /// Required when `verify` is on (brpc would fall back to the system's CA file; this party
    /// does not), ignored otherwise.
    pub ca_file_path: Option<PathBuf>,
}

/// yacl's `enable_ssl = true`: both halves of the link use TLS. In yacl each party is a brpc
/// server (its own address, `server_ssl_opts`) and a brpc client of the peer's server
/// (`client_ssl_opts`), so both are needed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// `server_ssl_opts`: the certificate this party's server presents, and whether (and
    /// against which CA) it verifies the peer's client certificate.
    pub server_ssl_opts: SslOptions,
    /// `client_ssl_opts`: the client certificate this party presents when it dials the peer's
    /// server, and whether (and against which CA) it verifies the peer's server certificate.
    pub client_ssl_opts: SslOptions,
}

impl TlsOptions {
    /// Checks which files are given (not their contents: [`Tls::load`] reads them).
    pub(crate) fn validate(&self) -> Result<(), LinkError> {
        let bad = |field, reason: &str| {
            Err(LinkError::InvalidOption {
                field,
                reason: reason.into(),
            })
        };
        let s = &self.server_ssl_opts;
        if s.certificate_path.is_none() {
            return bad(
                "tls.server_ssl_opts.certificate_path",
                "required with TLS on: this party's server must present a certificate",
            );
        }
        if s.private_key_path.is_none() {
            return bad(
                "tls.server_ssl_opts.private_key_path",
                "required with TLS on (the key of server_ssl_opts.certificate_path)",
            );
        }
        if s.verify && s.ca_file_path.is_none() {
            return bad(
                "tls.server_ssl_opts.ca_file_path",
                "required when verifying the peer (verify_depth > 0)",
            );
        }
        let c = &self.client_ssl_opts;
        if c.certificate_path.is_some() != c.private_key_path.is_some() {
            return bad(
                "tls.client_ssl_opts.private_key_path",
                "a client certificate and its private key go together: give both or neither",
            );
        }
        if c.verify && c.ca_file_path.is_none() {
            return bad(
                "tls.client_ssl_opts.ca_file_path",
                "required when verifying the peer (verify_depth > 0)",
            );
        }
        Ok(())
    }
}

/// Why a TLS handshake or a TLS connection failed, cloneable like [`Failure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TlsFailure {
    /// This party refused the peer's certificate.
    PeerCertificate(String),
    /// The peer refused the handshake with an alert.
    RefusedByPeer { alert: String, hint: String },
    /// A TLS protocol failure (the peer speaks no TLS, or something else broke).
    Handshake(String),
    /// The connection closed or timed out during the handshake (worth trying again).
    Io(String),
}

impl TlsFailure {
    pub(crate) fn into_link_error(self, peer: &str) -> LinkError {
        let peer = peer.to_string();
        match self {
            TlsFailure::PeerCertificate(reason) => LinkError::TlsPeerCertificate { peer, reason },
            TlsFailure::RefusedByPeer { alert, hint } => {
                LinkError::TlsRefusedByPeer { peer, alert, hint }
            }
            TlsFailure::Handshake(reason) | TlsFailure::Io(reason) => {
                LinkError::TlsHandshake { peer, reason }
            }
        }
    }

    pub(crate) fn text(&self) -> String {
        match self {
            TlsFailure::PeerCertificate(r) => format!("refused the peer's TLS certificate: {r}"),
            TlsFailure::RefusedByPeer { alert, hint } => {
                format!("the peer refused the TLS handshake (alert {alert}): {hint}")
            }
            TlsFailure::Handshake(r) | TlsFailure::Io(r) => format!("TLS handshake failed: {r}"),
        }
    }

    /// As a client request failure: a closed or silent handshake is retried like a failed dial.
    pub(crate) fn into_failure(self) -> Failure {
        match self {
            TlsFailure::Io(r) => Failure::Dial(r),
            other => Failure::Tls(other),
        }
    }

    /// The TLS failure inside an I/O error from a TLS stream, if there is one.
    pub(crate) fn inside(e: &std::io::Error, ca: Option<&Path>) -> Option<TlsFailure> {
        e.get_ref()
            .and_then(|i| i.downcast_ref::<rustls::Error>())
            .map(|t| from_rustls(t, ca))
    }
}

fn from_rustls(e: &rustls::Error, ca: Option<&Path>) -> TlsFailure {
    match e {
        rustls::Error::InvalidCertificate(c) => {
            TlsFailure::PeerCertificate(certificate_problem(c, ca))
        }
        rustls::Error::NoCertificatesPresented => TlsFailure::PeerCertificate(
            "the peer presented no certificate, but this party verifies it (verify_depth > 0); \
             give the peer's client_ssl_opts a certificate, or turn verification off here"
                .into(),
        ),
        rustls::Error::AlertReceived(alert) => TlsFailure::RefusedByPeer {
            alert: format!("{alert:?}"),
            hint: alert_hint(*alert).into(),
        },
        rustls::Error::InvalidMessage(_) => TlsFailure::Handshake(format!(
            "{e}; the peer does not speak TLS (is enable_ssl on at the peer?)"
        )),
        other => TlsFailure::Handshake(other.to_string()),
    }
}

fn certificate_problem(c: &CertificateError, ca: Option<&Path>) -> String {
    let ca = ca.map_or_else(|| "the CA file".to_string(), |p| p.display().to_string());
    match c {
        CertificateError::UnknownIssuer => format!(
            "it is not signed by a CA in {ca}; give both parties certificates from the CA in the \
             other's ca_file_path"
        ),
        CertificateError::BadSignature => format!(
            "its signature does not verify against the CA in {ca} (a certificate from another CA \
             with the same name?)"
        ),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => format!(
            "it has expired ({c}); the peer needs a new certificate (or this machine's clock is \
             wrong)"
        ),
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            format!("it is not valid yet ({c}); check both machines' clocks")
        }
        CertificateError::Other(OtherError(inner)) => inner.to_string(),
        other => other.to_string(),
    }
}

fn alert_hint(alert: AlertDescription) -> &'static str {
    match alert {
        AlertDescription::UnknownCA => {
            "it does not trust the CA that signed this party's certificate; the peer's \
             ca_file_path must hold the CA of this party's certificate"
        }
        AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure => {
            "it wants a certificate this party did not present, or shares no cipher with it; \
             give this party's client_ssl_opts a certificate"
        }
        AlertDescription::CertificateExpired => {
            "a certificate is expired or not yet valid (this party's, or a clock is off)"
        }
        AlertDescription::BadCertificate
        | AlertDescription::CertificateUnknown
        | AlertDescription::UnsupportedCertificate => {
            "it does not accept this party's certificate; see its own log"
        }
        AlertDescription::DecryptError => {
            "a signature did not verify; check that this party's key belongs to its certificate"
        }
        _ => "see the peer's own log for the reason",
    }
}

/// Accepts any server certificate but still checks the handshake's signatures: the client side
/// of `verify_depth == 0`.
#[derive(Debug)]
struct NoVerification {
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
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

/// The loaded TLS configuration of both halves of the link.
pub(crate) struct Tls {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    /// The CA each side verifies against (for error messages).
    server_ca: Option<PathBuf>,
    client_ca: Option<PathBuf>,
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>, LinkError> {
    let mut roots = RootCertStore::empty();
    for ca in read_certs("CA", path)? {
        roots.add(ca).map_err(|e| LinkError::TlsFile {
            what: "CA",
            path: path.to_path_buf(),
            reason: format!("holds a certificate that is not a usable CA: {e}"),
        })?;
    }
    Ok(Arc::new(roots))
}

/// The CA path of a side that verifies (validated: present when `verify`).
fn verifying(o: &SslOptions) -> Option<&Path> {
    if o.verify {
        o.ca_file_path.as_deref()
    } else {
        None
    }
}

/// TLS 1.3 only (the workspace builds rustls without TLS 1.2). brpc never turns 1.3 off (its
/// `protocols` option only knows SSLv3..TLSv1.2 and `SetSSLOptions` sets no `SSL_OP_NO_TLSv1_3`),
/// so an OpenSSL 1.1.1+ peer, like the wheel's OpenSSL 3, negotiates it.
const VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

impl Tls {
    /// Reads the files of both sides and builds the rustls configurations.
    pub(crate) fn load(opts: &TlsOptions) -> Result<Tls, LinkError> {
        opts.validate()?;
        let provider = provider();
        let setup = |which: &str, cert: &Path, key: &Path| {
            let (cert, key) = (cert.display().to_string(), key.display().to_string());
            let which = which.to_string();
            move |e: rustls::Error| {
                LinkError::TlsSetup(format!(
                    "{which}: certificate {cert} with key {key}: {e}; check that the key \
                     belongs to the certificate"
                ))
            }
        };

        let s = &opts.server_ssl_opts;
        let (Some(cert), Some(key)) = (&s.certificate_path, &s.private_key_path) else {
            return Err(LinkError::TlsSetup(
                "server_ssl_opts needs a certificate and a key".into(),
            ));
        };
        let err = setup("server_ssl_opts", cert, key);
        let chain = read_certs("certificate", cert)?;
        let private = read_key(key)?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(VERSIONS)
            .map_err(&err)?;
        let builder = match verifying(s) {
            Some(ca) => {
                let v = WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider.clone())
                    .build()
                    .map_err(|e| LinkError::TlsFile {
                        what: "CA",
                        path: ca.to_path_buf(),
                        reason: e.to_string(),
                    })?;
                builder.with_client_cert_verifier(v)
            }
            None => builder.with_no_client_auth(),
        };
        let mut server = builder.with_single_cert(chain, private).map_err(&err)?;
        server.send_tls13_tickets = 0;

        let c = &opts.client_ssl_opts;
        let algs = provider.signature_verification_algorithms;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(VERSIONS)
            .map_err(|e| LinkError::TlsSetup(format!("client_ssl_opts: {e}")))?
            .dangerous(); // brpc checks the chain only, no name: so do we.
        let verifier: Arc<dyn ServerCertVerifier> = match verifying(c) {
            Some(ca) => Arc::new(ServerVerifier::chain_only(roots(ca)?, algs)),
            None => Arc::new(NoVerification { algs }),
        };
        let builder = builder.with_custom_certificate_verifier(verifier);
        let mut client = match (&c.certificate_path, &c.private_key_path) {
            (Some(cert), Some(key)) => {
                let chain = read_certs("certificate", cert)?;
                let private = read_key(key)?;
                builder
                    .with_client_auth_cert(chain, private)
                    .map_err(setup("client_ssl_opts", cert, key))?
            }
            _ => builder.with_no_client_auth(),
        };
        client.enable_sni = false;
        client.resumption = rustls::client::Resumption::disabled();

        Ok(Tls {
            server: Arc::new(server),
            client: Arc::new(client),
            server_ca: verifying(s).map(Path::to_path_buf),
            client_ca: verifying(c).map(Path::to_path_buf),
        })
    }

    /// The CA the client side verifies against, for errors met after the handshake.
    pub(crate) fn client_ca(&self) -> Option<&Path> {
        self.client_ca.as_deref()
    }

    /// The client handshake on a fresh connection to the peer's server, bounded by `timeout`.
    pub(crate) fn connect(
        &self,
        stream: &mut TcpStream,
        timeout: Duration,
    ) -> Result<ClientConnection, TlsFailure> {
        // Neither sent (SNI is off) nor checked (brpc checks no name).
        let name = ServerName::try_from("secretflow-peer")
            .map_err(|e| TlsFailure::Handshake(format!("internal error: server name: {e}")))?;
        let mut conn = ClientConnection::new(self.client.clone(), name)
            .map_err(|e| from_rustls(&e, self.client_ca()))?;
        handshake(&mut conn, stream, timeout, self.client_ca())?;
        Ok(conn)
    }

    /// The server handshake on an accepted connection, bounded by `timeout`. A peer that
    /// starts in plaintext baidu_std is named as such.
    pub(crate) fn accept(
        &self,
        stream: &mut TcpStream,
        timeout: Duration,
    ) -> Result<ServerConnection, TlsFailure> {
        let ca = self.server_ca.as_deref();
        set_timeouts(stream, Some(timeout))?;
        let mut first = [0u8; 4];
        if let Ok(n) = stream.peek(&mut first)
            && n > 0
            && first[..n] == b"PRPC"[..n]
        {
            return Err(TlsFailure::Handshake(
                "the peer sent plaintext baidu_std: TLS is off at the peer (enable_ssl) but on \
                 here"
                    .into(),
            ));
        }
        let mut conn =
            ServerConnection::new(self.server.clone()).map_err(|e| from_rustls(&e, ca))?;
        handshake(&mut conn, stream, timeout, ca)?;
        Ok(conn)
    }
}

fn set_timeouts(stream: &TcpStream, t: Option<Duration>) -> Result<(), TlsFailure> {
    let io = |e: std::io::Error| TlsFailure::Io(e.to_string());
    stream.set_read_timeout(t).map_err(io)?;
    stream.set_write_timeout(t).map_err(io)
}

fn handshake<D>(
    conn: &mut rustls::ConnectionCommon<D>,
    stream: &mut TcpStream,
    timeout: Duration,
    ca: Option<&Path>,
) -> Result<(), TlsFailure> {
    let deadline = Instant::now() + timeout;
    set_timeouts(stream, Some(timeout))?;
    while conn.is_handshaking() {
        if Instant::now() >= deadline {
            return Err(TlsFailure::Io(format!(
                "no TLS handshake within {timeout:?}"
            )));
        }
        if let Err(e) = conn.complete_io(stream) {
            if let Some(f) = TlsFailure::inside(&e, ca) {
                return Err(f);
            }
            return Err(TlsFailure::Io(match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                    format!("no TLS answer within {timeout:?}; is enable_ssl on at the peer?")
                }
                ErrorKind::UnexpectedEof
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe => "the peer closed the connection during the TLS \
                                            handshake (is enable_ssl on at the peer? did it \
                                            refuse this party's certificate? see its log)"
                    .into(),
                _ => e.to_string(),
            }));
        }
    }
    set_timeouts(stream, None)
}

/// After a refused handshake: lets the alert reach the peer before the socket closes (closing
/// with unread bytes would send a reset, which can overtake the alert), at most `within`.
pub(crate) fn linger_close(stream: &mut TcpStream, within: Duration) {
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + within;
    let mut sink = [0u8; 4096];
    let mut total = 0usize;
    while total < (256 << 10) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}
