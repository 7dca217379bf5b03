use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

/// Everything that can go wrong on a link. Peer faults and local faults are separate variants.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LinkError {
    /// Could not listen on our own address.
    #[error(
        "cannot listen on {addr} ({source}); is another process using the port, or is the address not this machine's?"
    )]
    Bind {
        /// The address from the link config.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An address in the link config does not parse or resolve.
    #[error(
        "invalid address {addr:?} for party {party:?}: {reason}; expected HOST:PORT, e.g. 127.0.0.1:5300"
    )]
    BadAddress {
        /// The party it belongs to.
        party: String,
        /// The address text.
        addr: String,
        /// Why it failed.
        reason: String,
    },
    /// The peer did not connect or accept within the deadline.
    #[error(
        "peer {peer:?} at {addr} did not connect within {waited:?} (last error: {last}); start the peer, check its address and firewall, or raise the connect timeout"
    )]
    ConnectTimeout {
        /// The peer's id.
        peer: String,
        /// Where we tried.
        addr: String,
        /// How long we tried.
        waited: Duration,
        /// The last OS error seen, if any.
        last: String,
    },
    /// Something connected that is not the blindjoin peer we expect.
    #[error("the process at the other end is not the expected blindjoin peer: {0}")]
    WrongPeer(String),
    /// No message arrived within the receive timeout.
    #[error(
        "no message from peer {peer:?} for {waited:?}; it may have stopped or be far slower than this party. Raise link_config.recv_timeout_ms (or --recv-timeout) if it is just slow"
    )]
    RecvTimeout {
        /// The peer's id.
        peer: String,
        /// The timeout in force.
        waited: Duration,
    },
    /// Nothing at all — not even a heartbeat — arrived from the peer for the silence timeout:
    /// its process or machine is gone without closing the connection, or the network is down.
    #[error(
        "peer {peer:?} has sent nothing, not even a heartbeat, for {silent_for:.1?}: its process or machine has probably died, or the network between the parties is down. Check the peer; with recovery on, rerunning both sides resumes. Raise blindjoin.peer_silence_timeout_ms (or --peer-silence-timeout) if the network really stalls this long"
    )]
    PeerSilent {
        /// The peer's id.
        peer: String,
        /// How long it has been silent.
        silent_for: Duration,
    },
    /// The peer reported a failure of its own.
    #[error("peer {peer:?} aborted: {reason}")]
    PeerAborted {
        /// The peer's id.
        peer: String,
        /// The reason it sent.
        reason: String,
    },
    /// The connection closed before the session ended.
    #[error(
        "peer {peer:?} closed the connection before the session finished; see the peer's own error output"
    )]
    PeerClosed {
        /// The peer's id.
        peer: String,
    },
    /// A frame header announced more than [`crate::MAX_FRAME_LEN`] bytes, or had an unknown kind.
    #[error("peer {peer:?} sent a malformed frame: {reason}")]
    BadFrame {
        /// The peer's id.
        peer: String,
        /// What was wrong.
        reason: String,
    },
    /// This party's run was cancelled through a [`crate::Cancel`] (Ctrl-C); the peer was told.
    #[error("the run was cancelled: {reason}")]
    Cancelled {
        /// The reason given to [`crate::Cancel::cancel`].
        reason: String,
    },
    /// The peer sent a data message when the session should have ended.
    #[error(
        "peer {peer:?} sent data after this party finished; both sides disagree on the protocol state"
    )]
    UnexpectedData {
        /// The peer's id.
        peer: String,
    },
    /// An OS-level I/O error on an established connection.
    #[error("connection to peer {peer:?} failed: {source}")]
    Io {
        /// The peer's id.
        peer: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A local message too large to frame (a bug in the caller).
    #[error(
        "internal error: message of {len} bytes exceeds the frame limit; please report this bug"
    )]
    MessageTooLarge {
        /// Its size.
        len: usize,
    },
    /// A TLS file (certificate, private key or CA) is missing, unreadable or holds no usable
    /// PEM block. A local configuration fault.
    #[error("TLS {what} file {path}: {reason}")]
    TlsFile {
        /// Which file: `certificate`, `private key` or `CA`.
        what: &'static str,
        /// The path as configured.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The TLS files cannot be used together (e.g. the key does not belong to the certificate).
    #[error("TLS setup failed: {0}")]
    TlsSetup(String),
    /// This party refused the peer's certificate: wrong CA, expired, or not naming the peer's id.
    #[error("refused the TLS certificate of peer {peer:?}: {reason}")]
    TlsPeerCertificate {
        /// The peer's id.
        peer: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The peer refused the TLS handshake with an alert (it did not accept our certificate).
    #[error("peer {peer:?} refused the TLS handshake (TLS alert {alert}): {hint}")]
    TlsRefusedByPeer {
        /// The peer's id.
        peer: String,
        /// The TLS alert it sent, e.g. `UnknownCA`.
        alert: String,
        /// What the alert usually means here.
        hint: String,
    },
    /// The TLS handshake failed otherwise (the peer hung up, timed out, or spoke no TLS).
    #[error("TLS handshake with peer {peer:?} failed: {reason}")]
    TlsHandshake {
        /// The peer's id.
        peer: String,
        /// What happened.
        reason: String,
    },
    /// A SecretFlow peer answered a message with an error (brpc or interconnection error code).
    #[error(
        "peer {peer:?} refused a message with error {code}: {message}; check that both parties use the same link id, ranks and addresses"
    )]
    PeerRefused {
        /// The peer's id.
        peer: String,
        /// The brpc or interconnection `ErrorCode`.
        code: i32,
        /// Its error text.
        message: String,
    },
    /// A SecretFlow peer did not answer one message within the RPC timeout.
    #[error(
        "peer {peer:?} did not answer a message within {waited:?}; it may be overloaded or stuck. Raise the RPC timeout (SecretFlow's http_timeout_ms) if it is just slow"
    )]
    RpcTimeout {
        /// The peer's id.
        peer: String,
        /// The timeout in force.
        waited: Duration,
    },
    /// A message key this party was asked to use is not allowed (a bug in the caller).
    #[error("internal error: invalid link message key {key:?}: {reason}; please report this bug")]
    InvalidKey {
        /// The key (lossy UTF-8).
        key: String,
        /// Why.
        reason: String,
    },
    /// A link option is out of range (a local configuration fault).
    #[error("invalid link option {field}: {reason}")]
    InvalidOption {
        /// The option's name.
        field: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
}
