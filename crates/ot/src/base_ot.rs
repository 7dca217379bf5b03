//! Random base OT: Masny–Rindal, "Endemic Oblivious Transfer" (CCS 2019, ePrint 2019/706),
//! §4, Fig. 4 ("OT from key agreement"), instantiated with Diffie–Hellman over Ristretto255 —
//! the protocol libOTe ships as `MasnyRindal`. **Model: malicious**, programmable random-oracle
//! model (see *Security* below).
//!
//! # Protocol (batch of `k` random OTs, one sender key `a`)
//!
//! ```text
//! Sender                                   Receiver (choices c_0..c_{k-1})
//! 1. a <- Z_q,  A = a·G
//!            ---- A (32 bytes) ------------->
//!                                          2. for each i: b_i <- Z_q, pk_i = b_i·G,
//!                                               r_{i,1−c_i} <- G uniform (random point),
//!                                               r_{i,c_i}   = pk_i − H(i, r_{i,1−c_i})
//!            <--- u32 k | (r_{i,0} | r_{i,1}) for i = 0..k-1
//! 3. for each i, j ∈ {0, 1}:               4. m_{i,c_i} = KDF(i, c_i, b_i·A)
//!      pk_{i,j} = r_{i,j} + H(i, r_{i,1−j})
//!      m_{i,j}  = KDF(i, j, a·pk_{i,j})
//! ```
//!
//! Correctness: `pk_{i,c_i} = r_{i,c_i} + H(i, r_{i,1−c_i}) = pk_i`, so
//! `a·pk_{i,c_i} = a·b_i·G = b_i·A`.
//!
//! * `H(i, r)` is hash-to-group: SHA-512 over `"blindjoin-ot/base-ot/mr19/h2g/v2" | A | i (u64 LE)
//!   | r`, mapped with [`RistrettoPoint::from_uniform_bytes`] (two Elligator maps, RFC 9496
//!   §4.3.4). It is the random oracle the proof programs.
//! * `KDF(i, j, P)` is SHA-256 over `"blindjoin-ot/base-ot/mr19/kdf/v2" | A | r_{i,0} | r_{i,1} |
//!   i (u64 LE) | j (1 byte) | P`, truncated to 16 bytes.
//! * All points are in their canonical 32-byte Ristretto encoding. Both hashes bind the session
//!   (the sender's fresh `A`) and the index, so a batch's OTs and different sessions use
//!   independent oracles; the KDF also binds the whole receiver message for OT `i`.
//!
//! Cost: R → S `4 + 64·k` bytes, S → R 32 bytes, one round trip. Sender: `1 + 2k` scalar
//! multiplications and `2k` hash-to-group; receiver: `2k` scalar multiplications (one fixed-base,
//! one with a per-batch table for `A`) and `2k` hash-to-group (one is the random point).
//!
//! # Security
//!
//! * **Malicious (active) adversaries**, in the *programmable* random-oracle model (for `H` and
//!   the KDF), relying on the security of Diffie–Hellman key agreement over the prime-order
//!   group Ristretto255 (a DH-type assumption; MR19 give the exact statement for their DH
//!   instantiation; keys are only ever used through the KDF). MR19 prove *endemic* security,
//!   which is what OT extension with a consistency check needs: a corrupt receiver learns at most
//!   one key of each pair and its choice bit is extractable; a corrupt sender learns nothing about
//!   the choice bits (the receiver's pair `(r_{i,0}, r_{i,1})` is two independent uniform points
//!   whatever `c_i` is). "Endemic" means a corrupt party may *influence its own* outputs: keys are
//!   uniform to the honest party only if the peer is honest, and callers must not rely on a
//!   malicious peer's keys being random — only on the other key being hidden.
//! * The sender uses one `a` for the whole batch, as libOTe does; the index `i` in `H` and the
//!   KDF separates the OTs.
//! * Every peer point is decoded canonically (`CompressedRistretto::decompress` rejects
//!   non-canonical encodings) and the identity is rejected. Counts are checked before any
//!   allocation the peer controls ([`MAX_BASE_OTS`], and the message must hold exactly `k` pairs).
//! * The receiver's choice bit never selects a code path: both candidate points are computed and
//!   placed into slots `0` and `1` by a masked (branch-free) swap, and `c_i` enters the KDF as
//!   data. Secret scalars and Diffie–Hellman results are zeroized after use.
//!
//! This replaces the earlier Chou–Orlandi (LATINCRYPT 2015) base OT, which we only claimed
//! semi-honest security for; the two are not wire-compatible (domain tags `v1` → `v2`).

use crate::OtError;
use blindjoin_crypto::{CryptoError, random_bytes};
use blindjoin_link::{Link, Reader, put_u32};
use curve25519_dalek::ristretto::{CompressedRistretto, RistrettoBasepointTable, RistrettoPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::Identity;
use rayon::prelude::*;
use sha2::{Digest, Sha256, Sha512};
use zeroize::Zeroize;

/// Largest batch of base OTs one call may run (bounds what a peer can make us allocate: the
/// receiver's message is then at most `4 + 64 · 2^16` bytes ≈ 4 MiB).
pub const MAX_BASE_OTS: usize = 1 << 16;

const POINT_LEN: usize = 32;
/// One receiver record: `r_{i,0} | r_{i,1}`.
const PAIR_LEN: usize = 2 * POINT_LEN;
const DOMAIN_H2G: &[u8] = b"blindjoin-ot/base-ot/mr19/h2g/v2";
const DOMAIN_KDF: &[u8] = b"blindjoin-ot/base-ot/mr19/kdf/v2";

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
/// Returns the point and its (canonical) encoding.
fn decode_point(bytes: &[u8], index: usize) -> Result<(RistrettoPoint, [u8; 32]), OtError> {
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
    Ok((point, compressed.to_bytes()))
}

/// `H(i, r)`: the random oracle into the group, bound to the session `A` and the index `i`.
fn hash_to_group(a: &[u8; 32], index: usize, r: &[u8; 32]) -> RistrettoPoint {
    let mut h = Sha512::new();
    h.update(DOMAIN_H2G);
    h.update(a);
    h.update((index as u64).to_le_bytes());
    h.update(r);
    RistrettoPoint::from_hash(h)
}

/// `KDF(i, j, P)`, 16 bytes, bound to `A` and the receiver's record `r_{i,0} | r_{i,1}`.
fn derive_key(
    a: &[u8; 32],
    r0: &[u8; 32],
    r1: &[u8; 32],
    index: usize,
    j: u8,
    p: &RistrettoPoint,
) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(DOMAIN_KDF);
    h.update(a);
    h.update(r0);
    h.update(r1);
    h.update((index as u64).to_le_bytes());
    h.update([j]);
    let mut shared = p.compress().to_bytes();
    h.update(shared);
    shared.zeroize();
    let digest = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// Returns `(x, y)` if `c == 0` and `(y, x)` if `c == 1`, by masking rather than branching.
///
/// (`subtle::ConditionallySelectable` would do this on points, but `subtle` is not a dependency
/// of this crate; the swap is on the encodings we send anyway. `black_box` keeps the compiler
/// from turning the mask back into a branch, as `subtle` itself does.)
fn ct_swap(c: bool, x: [u8; 32], y: [u8; 32]) -> ([u8; 32], [u8; 32]) {
    let mask = std::hint::black_box(0u8.wrapping_sub(u8::from(c)));
    let (mut s0, mut s1) = (x, y);
    for (u, v) in s0.iter_mut().zip(s1.iter_mut()) {
        let t = mask & (*u ^ *v);
        *u ^= t;
        *v ^= t;
    }
    (s0, s1)
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
/// Messages: sends `A` (32 bytes), receives `u32 k | k × (r_{i,0} | r_{i,1})` (64 bytes each).
///
/// # Errors
/// Link failure; a malformed reply (truncated, trailing bytes, or a count other than `k` →
/// [`OtError::InvalidMessage`] / [`OtError::PeerMisbehaved`]); an invalid or identity point
/// ([`OtError::Crypto`], `index` = `2i + j` for `r_{i,j}`); `k > MAX_BASE_OTS`
/// ([`OtError::Usage`]); RNG failure.
pub fn base_ot_send(link: &mut dyn Link, k: usize) -> Result<Vec<[[u8; 16]; 2]>, OtError> {
    check_count(k)?;
    // Step 1.
    let secret = random_scalar()?;
    let a = &secret.0;
    let a_bytes = RistrettoPoint::mul_base(a).compress().to_bytes();
    link.send(&a_bytes)?;

    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "base-OT receiver points");
    // `records` checks the claimed count against `k` and the bytes present before we slice.
    let (count, body) = r.records(PAIR_LEN, k)?;
    r.finish()?;
    if count != k {
        return Err(OtError::PeerMisbehaved(format!(
            "base OT: expected {k} receiver point pairs, got {count}"
        )));
    }

    // Step 3.
    body.par_chunks_exact(PAIR_LEN)
        .enumerate()
        .map(|(i, record)| {
            // `record` is exactly PAIR_LEN bytes; `decode_point` rechecks each half's length.
            let (r0_slice, r1_slice) = record.split_at(POINT_LEN);
            let (r0, r0_bytes) = decode_point(r0_slice, 2 * i)?;
            let (r1, r1_bytes) = decode_point(r1_slice, 2 * i + 1)?;
            // No identity check on pk_{i,j}: a receiver that forces pk_{i,j} = O merely knows
            // its discrete log (0), as an honest receiver knows b_i. That gains nothing on the
            // other key: pk_{i,1−j} = r_{i,1−j} + H(i, r_{i,j}) is still an oracle output
            // shifted by a point the receiver had to fix before seeing it.
            let pk0 = r0 + hash_to_group(&a_bytes, i, &r1_bytes);
            let pk1 = r1 + hash_to_group(&a_bytes, i, &r0_bytes);
            let mut p0 = a * pk0;
            let mut p1 = a * pk1;
            let keys = [
                derive_key(&a_bytes, &r0_bytes, &r1_bytes, i, 0, &p0),
                derive_key(&a_bytes, &r0_bytes, &r1_bytes, i, 1, &p1),
            ];
            p0.zeroize();
            p1.zeroize();
            Ok(keys)
        })
        .collect()
}

/// Runs `choices.len()` random OTs as the receiver. Returns `m_{c_i}` for each choice bit.
///
/// Messages: receives `A` (32 bytes), sends `u32 k | k × (r_{i,0} | r_{i,1})`.
///
/// # Errors
/// Link failure; a malformed ([`OtError::InvalidMessage`]) or invalid / identity
/// ([`OtError::Crypto`]) `A` from the sender; more than [`MAX_BASE_OTS`] choices
/// ([`OtError::Usage`]); RNG failure.
pub fn base_ot_receive(link: &mut dyn Link, choices: &[bool]) -> Result<Vec<[u8; 16]>, OtError> {
    let k = choices.len();
    check_count(k)?;
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "base-OT sender point");
    let a_slice = r.take(POINT_LEN)?;
    r.finish()?;
    let (big_a, a_bytes) = decode_point(a_slice, 0)?;

    // Step 2. Randomness is drawn up front (one OS call for all the random points; their seeds
    // are not secret, the points are sent).
    let secrets = (0..k)
        .map(|_| random_scalar())
        .collect::<Result<Vec<_>, _>>()?;
    let mut seeds = vec![0u8; k * 64];
    random_bytes(&mut seeds)?;
    let pairs: Vec<([u8; 32], [u8; 32])> = secrets
        .par_iter()
        .zip(seeds.par_chunks_exact(64))
        .zip(choices.par_iter())
        .enumerate()
        .map(|(i, ((b, seed), &c))| {
            let mut wide = [0u8; 64];
            wide.copy_from_slice(seed);
            // A uniform point whose discrete log nobody knows.
            let other = RistrettoPoint::from_uniform_bytes(&wide)
                .compress()
                .to_bytes();
            let pk = RistrettoPoint::mul_base(&b.0);
            let mine = (pk - hash_to_group(&a_bytes, i, &other))
                .compress()
                .to_bytes();
            // Slot c_i gets `mine`, slot 1 − c_i the random point.
            ct_swap(c, mine, other)
        })
        .collect();
    let mut out = Vec::with_capacity(4 + k * PAIR_LEN);
    put_u32(&mut out, k as u32); // k ≤ MAX_BASE_OTS < 2^32 (check_count)
    for (r0, r1) in &pairs {
        out.extend_from_slice(r0);
        out.extend_from_slice(r1);
    }
    link.send(&out)?;

    // Step 4, while the sender works on step 3.
    let a_table = RistrettoBasepointTable::create(&big_a);
    let keys = secrets
        .par_iter()
        .zip(pairs.par_iter())
        .zip(choices.par_iter())
        .enumerate()
        .map(|(i, ((b, (r0, r1)), &c))| {
            let mut shared = &b.0 * &a_table;
            let key = derive_key(&a_bytes, r0, r1, i, u8::from(c), &shared);
            shared.zeroize();
            key
        })
        .collect();
    drop(secrets);
    Ok(keys)
}
