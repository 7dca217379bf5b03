//! The crate's one error type. Parameter errors name the numbers that failed; decoding errors
//! name the field, since serialized ciphertexts and keys come from a peer or a file and are
//! hostile input.

use thiserror::Error;

/// Everything that can go wrong in `blindjoin-he`.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum HeError {
    /// The ring degree is not a power of two in the supported range.
    #[error("poly_modulus_degree {0} is not a power of two in 1024..=32768")]
    Degree(usize),
    /// A coefficient-modulus prime size cannot be used.
    #[error("coeff_modulus_bits entry {bits} is outside 2..=60")]
    PrimeBits {
        /// The requested size.
        bits: u32,
    },
    /// No coeff_modulus list given, or too many primes.
    #[error("coeff_modulus_bits has {0} entries; 1..=16 are supported")]
    PrimeCount(usize),
    /// Not enough primes ≡ 1 mod 2N of that size exist.
    #[error("no {count} distinct primes of {bits} bits congruent to 1 mod {modulus}")]
    NoPrimes {
        /// Bit size.
        bits: u32,
        /// How many were needed.
        count: usize,
        /// 2N.
        modulus: u64,
    },
    /// Σ log q_i exceeds the HE standard's 128-bit bound for this N.
    #[error(
        "insecure: total coeff_modulus {total_bits} bits > {max_bits} bits, the 128-bit bound of \
         the HE standard for poly_modulus_degree {degree} (ternary secret, classical)"
    )]
    Insecure {
        /// N.
        degree: usize,
        /// Σ of the prime sizes.
        total_bits: u32,
        /// The bound.
        max_bits: u32,
    },
    /// The plaintext modulus does not allow batching.
    #[error("plain_modulus {t}: {reason}")]
    PlainModulus {
        /// t.
        t: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Operands at different levels, in different forms, or of a wrong size.
    #[error("operands do not match: {0}")]
    Mismatch(&'static str),
    /// An operation needs a level or key that the parameters do not have.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// The operating system's random source failed.
    #[error("random source: {0}")]
    Rng(String),
    /// Serialized input is malformed (from the peer or a file).
    #[error("malformed {what}: {reason}")]
    Decode {
        /// Which object was being decoded.
        what: &'static str,
        /// What was wrong.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, HeError>;
