use thiserror::Error;

/// Errors from the crypto layer.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CryptoError {
    /// The curve name is not one we know.
    #[error(
        "unknown curve {0:?}; expected one of CURVE_25519, CURVE_RISTRETTO255, CURVE_SECP256K1, CURVE_P256, CURVE_SM2, CURVE_FOURQ"
    )]
    UnknownCurve(String),
    /// A feature that exists by name but is not built yet.
    #[error("{what} is not supported yet: {hint}")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// A peer's point failed to decode (non-canonical, off-curve, or identity).
    #[error("the peer sent an invalid curve point at index {index}: {reason}")]
    InvalidPoint {
        /// Index of the point within its batch.
        index: usize,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A user-supplied secret key is unusable.
    #[error("invalid secret key: {0}")]
    InvalidSecretKey(&'static str),
    /// A caller passed buffers of the wrong size (a bug in the caller, not in peer data).
    #[error(
        "internal error: {what} buffer has {got} bytes, expected {want}; please report this bug"
    )]
    BufferLength {
        /// Which buffer.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length it should have.
        want: usize,
    },
    /// The OS random number generator failed.
    #[error("the operating system's random number generator failed: {0}")]
    Rng(String),
    /// Hash-to-curve failed (cannot happen with our fixed DSTs).
    #[error("hash-to-curve failed: {0}")]
    HashToCurve(&'static str),
}
