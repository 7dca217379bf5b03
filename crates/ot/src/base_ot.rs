//! Random base OT: Chou–Orlandi, "The Simplest Protocol for Oblivious Transfer" (LATINCRYPT
//! 2015, ePrint 2015/267), over Ristretto255, with transcript-bound key
//! derivation.
//!
//! # Protocol (batch of `k` random OTs, one sender key `a`)
//!
//! ```text
//! Sender                                   Receiver (choices c_0..c_{k-1})
//! a <- Z_q,  A = a·G
//!            ---- A (32 bytes) ------------->
//!                                          for each i: b_i <- Z_q,
//!                                            B_i = b_i·G + c_i·A
//!            <--- u32 k | B_0..B_{k-1} -----
//! for each i:                              m_{c_i} = H(A, B_i, i, b_i·A)
//!   m0_i = H(A, B_i, i, a·B_i)
//!   m1_i = H(A, B_i, i, a·B_i − a·A)
//! ```
//!
//! `H` is SHA-256 over `"blindjoin-ot/base-ot/v1" | A | B_i | i (u64 LE) | P`, truncated to
//! 16 bytes (all points in their canonical 32-byte Ristretto encoding).
//!
//! # Security notes
//!
//! * The original CO15 UC-security proof was shown to be flawed (Genç, Iovino, Rial, "'The
//!   Simplest Protocol for Oblivious Transfer' Revisited", ePrint 2017/370); corrected variants
//!   and analyses (Hauck–Loss, ePrint 2017/1011; the discussion of CO15-style OT in
//!   Masny–Rindal, "Endemic Oblivious Transfer", CCS 2019) derive each key from a hash over the
//!   transcript. We do that: every key hashes the sender's `A`, the receiver's own `B_i`, the
//!   index `i` and a domain tag, so keys of different OTs in a batch, and of different sessions
//!   (fresh `A`), are domain separated even when the shared points coincide. We implement no
//!   other change from CO15 (one `A` per batch, as in the paper).
//! * **Security model: semi-honest (passive) adversaries only**, random-oracle model, CDH in
//!   Ristretto255. We do *not* claim malicious security (no proof of knowledge of `a`, no
//!   check-phase); the sender's keys are uniformly random from the receiver's view only if the
//!   receiver follows the protocol.
//! * Every peer point is decoded canonically (`CompressedRistretto::decompress` rejects
//!   non-canonical encodings) and the identity is rejected; `B_i = A` (which would make
//!   `m1_i` the hash of the identity) is rejected too.
//! * The receiver forms `B_i` with a constant-time multiscalar multiplication, so the choice bit
//!   does not select a code path.

use crate::OtError;
use blindjoin_crypto::{CryptoError, random_bytes};
use blindjoin_link::{Link, Reader, put_u32};
use curve25519_dalek::constants::RISTRETTO_BASEPOINT_POINT;
use curve25519_dalek::ristretto::{CompressedRistretto, RistrettoPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{Identity, MultiscalarMul};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use zeroize::Zeroize;

/// Largest batch of base OTs one call may run (bounds what a peer can make us allocate).
pub const MAX_BASE_OTS: usize = 1 << 16;

const POINT_LEN: usize = 32;
const DOMAIN: &[u8] = b"blindjoin-ot/base-ot/v1";

/// A secret scalar, zeroized on drop on every path (including early error returns).
struct SecretScalar(Scalar);

impl Drop for SecretScalar {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

fn random_scalar() -> Result<SecretScalar, OtError> {
    let mut wide = [0u8; 64];
    random_bytes(&mut wide)?;
    let s = Scalar::from_bytes_mod_order_wide(&wide);
    wide.zeroize();
    Ok(SecretScalar(s))
}

/// Decodes a peer's point: canonical encoding, valid Ristretto element, not the identity.
fn decode_point(bytes: &[u8], index: usize) -> Result<RistrettoPoint, OtError> {
    let compressed = CompressedRistretto::from_slice(bytes).map_err(|_| {
        OtError::Crypto(CryptoError::InvalidPoint {
            index,
            reason: "wrong length",
        })
    })?;
    let point = compressed
        .decompress()
        .ok_or(OtError::Crypto(CryptoError::InvalidPoint {
            index,
            reason: "not a canonical Ristretto255 encoding",
        }))?;
    if point == RistrettoPoint::identity() {
        return Err(OtError::Crypto(CryptoError::InvalidPoint {
            index,
            reason: "the identity element",
        }));
    }
    Ok(point)
}

/// `H(A, B_i, i, P)`, 16 bytes.
fn derive_key(a: &[u8; 32], b: &[u8; 32], index: usize, p: &RistrettoPoint) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update(a);
    h.update(b);
    h.update((index as u64).to_le_bytes());
    let mut shared = p.compress().to_bytes();
    h.update(shared);
    shared.zeroize();
    let digest = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

fn check_count(k: usize) -> Result<(), OtError> {
    if k > MAX_BASE_OTS {
        return Err(OtError::Usage(format!(
            "{k} base OTs requested; at most {MAX_BASE_OTS} per batch"
        )));
    }
    Ok(())
}

/// Runs `k` random OTs as the sender. Returns `k` pairs `[m0, m1]` of 16-byte keys; the
/// receiver learns `m_c` for its choice bit `c` and nothing about the other.
///
/// Messages: sends `A` (32 bytes), receives `u32 k | k × 32-byte B_i`.
///
/// # Errors
/// Link failure; a malformed reply (wrong count or length → [`OtError::InvalidMessage`]); an
/// invalid, identity, or `= A` point ([`OtError::Crypto`]); `k > MAX_BASE_OTS`
/// ([`OtError::Usage`]); RNG failure.
pub fn base_ot_send(link: &mut dyn Link, k: usize) -> Result<Vec<[[u8; 16]; 2]>, OtError> {
    check_count(k)?;
    let secret = random_scalar()?;
    let a = &secret.0;
    let big_a = RistrettoPoint::mul_base(a);
    let a_bytes = big_a.compress().to_bytes();
    link.send(&a_bytes)?;
    let a_times_a = a * big_a;

    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "base-OT receiver points");
    let (count, body) = r.records(POINT_LEN, k)?;
    r.finish()?;
    if count != k {
        return Err(OtError::PeerMisbehaved(format!(
            "base OT: expected {k} receiver points, got {count}"
        )));
    }

    body.par_chunks_exact(POINT_LEN)
        .enumerate()
        .map(|(i, chunk)| {
            let b = decode_point(chunk, i)?;
            if b == big_a {
                return Err(OtError::Crypto(CryptoError::InvalidPoint {
                    index: i,
                    reason: "equals the sender's point A",
                }));
            }
            let mut b_bytes = [0u8; 32];
            b_bytes.copy_from_slice(chunk);
            let p0 = a * b;
            let p1 = p0 - a_times_a;
            Ok([
                derive_key(&a_bytes, &b_bytes, i, &p0),
                derive_key(&a_bytes, &b_bytes, i, &p1),
            ])
        })
        .collect()
}

/// Runs `choices.len()` random OTs as the receiver. Returns `m_{c_i}` for each choice bit.
///
/// # Errors
/// Link failure; a malformed or invalid `A` from the sender; more than [`MAX_BASE_OTS`]
/// choices; RNG failure.
pub fn base_ot_receive(link: &mut dyn Link, choices: &[bool]) -> Result<Vec<[u8; 16]>, OtError> {
    let k = choices.len();
    check_count(k)?;
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "base-OT sender point");
    let a_slice = r.take(POINT_LEN)?;
    r.finish()?;
    let big_a = decode_point(a_slice, 0)?;
    let mut a_bytes = [0u8; 32];
    a_bytes.copy_from_slice(a_slice);

    let secrets = (0..k)
        .map(|_| random_scalar())
        .collect::<Result<Vec<_>, _>>()?;
    let points: Vec<[u8; 32]> = secrets
        .par_iter()
        .zip(choices.par_iter())
        .map(|(b, &c)| {
            let c = Scalar::from(u8::from(c));
            RistrettoPoint::multiscalar_mul([b.0, c], [RISTRETTO_BASEPOINT_POINT, big_a])
                .compress()
                .to_bytes()
        })
        .collect();
    let mut out = Vec::with_capacity(4 + k * POINT_LEN);
    put_u32(&mut out, k as u32);
    for p in &points {
        out.extend_from_slice(p);
    }
    link.send(&out)?;

    let keys = secrets
        .par_iter()
        .zip(points.par_iter())
        .enumerate()
        .map(|(i, (b, b_bytes))| derive_key(&a_bytes, b_bytes, i, &(b.0 * big_a)))
        .collect();
    drop(secrets);
    Ok(keys)
}
