//! The crate's error type. Each variant says who is at fault: the caller's parameters or
//! inputs, the peer (hostile input on the link), a stored DB (a damaged or foreign file), or
//! the local HE / crypto / link layers.

use thiserror::Error;

/// Everything that can go wrong in `blindjoin-apsi`.
#[derive(Debug, Error)]
pub enum ApsiError {
    /// A parameter breaks one of APSI's rules; `field` is the JSON path of the culprit.
    #[error("APSI parameter {field}: {reason}")]
    Params {
        /// The field, as APSI's JSON names it (e.g. `table_params.table_size`).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The caller's input cannot be processed (too many items, a label too long, …).
    #[error("invalid input: {0}")]
    Input(String),
    /// The peer sent something malformed, out of bounds or inconsistent.
    #[error("the peer misbehaved: {0}")]
    PeerMisbehaved(String),
    /// The peer runs with other parameters than ours.
    #[error("the peer uses other APSI parameters ({0}); both sides need the same preset")]
    ParamsMismatch(String),
    /// The sender's parameters, which the receiver was to adopt, would make it encrypt more
    /// query ciphertexts than it takes unasked ([`crate::receiver::MAX_ADOPTED_QUERY_CTS`]).
    #[error(
        "the sender's parameters need {ciphertexts} query ciphertexts ({bundle_indices} bundle \
         indices × {powers} query powers), more than the {cap} a receiver adopts from a sender \
         unasked; if that preset is intended, give it as the receiver's params_file"
    )]
    PeerParamsTooCostly {
        /// bundle_idx_count × |query_powers|.
        ciphertexts: usize,
        /// The sender's bundle indices.
        bundle_indices: usize,
        /// The sender's query powers.
        powers: usize,
        /// The cap.
        cap: usize,
    },
    /// A serialized sender DB is damaged, truncated or not ours.
    #[error("sender DB: {0}")]
    Db(String),
    /// The receiver's items do not fit its cuckoo table.
    #[error(
        "cuckoo hashing of {items} query items into {table_size} bins failed; use a preset with a \
         larger table_size or query fewer items at once"
    )]
    Cuckoo {
        /// Unique query items.
        items: usize,
        /// Bins.
        table_size: usize,
    },
    /// The homomorphic-encryption layer refused (local, or a peer's ciphertext).
    #[error("homomorphic encryption: {0}")]
    He(#[from] blindjoin_he::HeError),
    /// The OPRF layer refused.
    #[error("OPRF: {0}")]
    Crypto(#[from] blindjoin_crypto::CryptoError),
    /// The link failed.
    #[error("link: {0}")]
    Link(#[from] blindjoin_link::LinkError),
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, ApsiError>;

pub(crate) fn peer(reason: impl Into<String>) -> ApsiError {
    ApsiError::PeerMisbehaved(reason.into())
}
