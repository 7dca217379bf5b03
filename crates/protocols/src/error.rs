use blindjoin_crypto::CryptoError;
use blindjoin_link::{DecodeError, LinkError};
use thiserror::Error;

/// Errors from running a protocol, sorted by who is at fault.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The connection failed, timed out, or the peer aborted.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The peer sent bytes that do not decode.
    #[error("the peer sent a bad message: {0}")]
    InvalidMessage(#[from] DecodeError),
    /// The peer sent well-formed but wrong data (counts, indices, points).
    #[error("the peer misbehaved: {0}")]
    PeerMisbehaved(String),
    /// The two parties' settings disagree; both sides report this with the same text.
    #[error(
        "the parties' settings disagree on {field}: this party ({our_role}) has {ours}, the peer ({their_role}) has {theirs}; make both configs agree"
    )]
    Mismatch {
        /// The config field.
        field: &'static str,
        /// Our value.
        ours: String,
        /// Their value.
        theirs: String,
        /// Our role, for the message.
        our_role: String,
        /// Their role.
        their_role: String,
    },
    /// A curve operation failed (including invalid peer points).
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    /// A protocol or option that exists by name only.
    #[error("{what} is not supported yet: {hint}")]
    Unsupported {
        /// What was asked for.
        what: String,
        /// What to do instead.
        hint: String,
    },
    /// A local option is out of range.
    #[error("invalid option: {0}")]
    Config(String),
    /// A state that cannot happen; please report it.
    #[error("internal error: {0}; please report this bug")]
    Unreachable(&'static str),
}

impl From<blindjoin_link::BulkError> for ProtocolError {
    fn from(e: blindjoin_link::BulkError) -> Self {
        match e {
            blindjoin_link::BulkError::Link(l) => ProtocolError::Link(l),
            blindjoin_link::BulkError::Decode(d) => ProtocolError::InvalidMessage(d),
        }
    }
}

impl From<blindjoin_ot::OtError> for ProtocolError {
    fn from(e: blindjoin_ot::OtError) -> Self {
        use blindjoin_ot::OtError;
        match e {
            OtError::Link(l) => ProtocolError::Link(l),
            OtError::InvalidMessage(d) => ProtocolError::InvalidMessage(d),
            OtError::PeerMisbehaved(s) => ProtocolError::PeerMisbehaved(s),
            OtError::Crypto(c) => ProtocolError::Crypto(c),
            other => ProtocolError::Config(other.to_string()),
        }
    }
}
