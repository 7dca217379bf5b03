//! # blindjoin-ot — oblivious transfer over a [`Link`](blindjoin_link::Link)
//!
//! Layer: depends on `blindjoin-crypto` (OS randomness, error types) and `blindjoin-link`
//! (messages, bounded decoding); used by the protocol crate for OT-based PSI (KKRT16, RR22).
//!
//! * [`base_ot_send`] / [`base_ot_receive`]: a batch of random OTs, Masny–Rindal "Endemic OT"
//!   (CCS 2019) over Ristretto255, malicious-secure in the random-oracle model ([`base_ot`]
//!   module doc).
//! * [`iknp_cot_send`] / [`iknp_cot_receive`]: IKNP (CRYPTO 2003) OT extension producing `n`
//!   correlated OTs with a global `Δ` — sender holds `Δ, q_i`, receiver holds
//!   `t_i = q_i ⊕ c_i·Δ` — and random OTs derived from them by a fixed-key-AES tweakable
//!   correlation-robust hash ([`iknp`] module doc).
//!
//! * [`kkrt_oprf_send`] / [`kkrt_oprf_receive`]: the KKRT16 batched OPRF (1-out-of-∞ OT from a
//!   512-bit IKNP extension with a pseudorandom code), for KKRT PSI ([`kkrt_oprf`] module doc).
//!
//! * [`softspoken`]: SoftSpokenOT (Roy, CRYPTO 2022), the same correlated OTs at 128/k bits per
//!   OT, with an optional consistency check against a cheating receiver.
//! * [`pprf`]: GGM punctured PRF → multi-point COT / VOLE; [`vole`]: silent random VOLE over
//!   GF(2^128) (ExAcc7 dual LPN), with an optional consistency check against a cheating sender.
//!
//! **Security model: semi-honest** unless a module says otherwise (SoftSpokenOT's and the VOLE's
//! checks; the base OTs are malicious-secure). Beyond those checks nothing detects a malicious
//! peer's deviations (other than rejecting malformed messages and invalid points). Every peer message is treated as untrusted bytes: lengths and counts are checked
//! before allocation and failures are typed [`OtError`]s, never panics. On an error the caller
//! should [`abort`](blindjoin_link::Link::abort) the link.
//!
//! ```
//! use blindjoin_link::mem_pair;
//! let (mut a, mut b) = mem_pair();
//! let choices = vec![true, false, true];
//! let sender = std::thread::spawn(move || blindjoin_ot::iknp_cot_send(&mut a, 3).unwrap());
//! let recv = blindjoin_ot::iknp_cot_receive(&mut b, &choices).unwrap();
//! let send = sender.join().unwrap();
//! for i in 0..3 {
//!     let c = if choices[i] { send.delta() } else { 0 };
//!     assert_eq!(recv.t()[i], send.q()[i] ^ c);
//! }
//! ```

pub mod base_ot;
pub mod iknp;
pub mod kkrt_oprf;
pub mod pprf;
pub mod softspoken;
pub mod transpose;
pub mod vole;

#[cfg(test)]
mod tests;

pub use base_ot::{MAX_BASE_OTS, base_ot_receive, base_ot_send};
pub use iknp::{
    CHUNK_OTS, CotReceiver, CotSender, KAPPA, MAX_COTS, iknp_cot_receive, iknp_cot_send,
};
pub use kkrt_oprf::{OprfSender, kkrt_oprf_receive, kkrt_oprf_send};
pub use softspoken::{SoftSpokenParams, softspoken_cot_receive, softspoken_cot_send};

use blindjoin_crypto::CryptoError;
use blindjoin_link::{DecodeError, LinkError};
use thiserror::Error;

/// Everything that can go wrong in an OT run.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OtError {
    /// The link failed (peer gone, timeout, abort, oversized frame).
    #[error(transparent)]
    Link(#[from] LinkError),
    /// A peer message did not decode (truncated, oversized, wrong count, trailing bytes).
    #[error(transparent)]
    InvalidMessage(#[from] DecodeError),
    /// The peer's message decoded but contradicts the protocol (wrong count, wrong parameters).
    #[error("the peer deviated from the OT protocol: {0}")]
    PeerMisbehaved(String),
    /// A crypto failure: an invalid peer point or an RNG failure.
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    /// The caller asked for something out of range (a bug in the caller, not the peer).
    #[error("invalid OT request: {0}")]
    Usage(String),
}
