//! FourQ (Costello–Longa, "FourQ: four-dimensional decompositions on a Q-curve over the Mersenne
//! prime", ASIACRYPT 2015, eprint 2015/565) for ECDH-PSI.
//!
//! - `field`: GF(p) and GF(p²), p = 2^127 − 1 (paper §2).
//! - `point`: the twisted Edwards curve −x² + y² = 1 + d·x²·y², #E = 392·N (paper §2),
//!   extended coordinates, FourQlib's 32-byte encoding and a strict decoder.
//! - `scalar`: arithmetic modulo the 246-bit prime N, with inversion.
//! - `mul`: constant-time scalar multiplication (fixed-window reference; the four-dimensional
//!   decomposition with the endomorphisms φ and ψ of paper §3–§5; the fixed-window method is
//!   kept as the test reference).
//! - `endo`: the endomorphisms φ, ψ (paper §3, §4).
//! - `hash`: FourQlib's `HashToCurve` map, fed by RFC 9380 `expand_message_xmd`.
//!
//! Wire format: every point this module writes is in the order-N subgroup. A peer's point is
//! decoded strictly, multiplied by the cofactor 392 (so a point outside the subgroup is forced
//! into it) and rejected if that gives the identity (the identity itself and the small-order
//! points). To keep `remask` equal to plain `k·P` on honest (subgroup) points, the cipher
//! multiplies the cleared point by `k/392 mod N`: `(k/392)·(392·P) = k·P`. Hence
//! `(H(x)^a)^b = (H(x)^b)^a` and unblinding by `1/r` is exact.
//!
//! Side channels: scalar multiplication, hashing, encoding and inversion are constant time in
//! their secret inputs (fixed operation sequences, masked table scans and selections). Decoding
//! branches, but only on public peer bytes. This is our own implementation from the paper, the
//! FourQlib vectors and the public constants of draft-ladd-cfrg-4q; it has not been audited.

mod endo;
mod field;
mod hash;
mod lanes;
mod mul;
mod point;
mod scalar;

pub use hash::DST;
pub use lanes::backend_name;
pub use scalar::Scalar;

use crate::{
    CryptoError, Curve, EcdhCipher, ItemDigest, check_len, check_remask_buffers, random_bytes,
};
use point::{Affine, Point, batch_to_affine};
use rayon::prelude::*;
use zeroize::Zeroize;

/// Encoded point length.
pub const POINT_LEN: usize = 32;

/// Points per parallel work unit: one shared inversion per chunk (Montgomery's trick).
const CHUNK: usize = 64;

/// 1/392 mod N (checked by a test), so that `(k/392)·(392·P) = k·P`.
const COFACTOR_INV: Scalar = Scalar([
    0x19fbeb877b2691f3,
    0x5b1f37c5a96f4350,
    0xa61e1145d66ad5e2,
    0x0023ee839264702a,
]);

impl Scalar {
    /// A uniformly random non-zero scalar from the OS RNG (64 bytes reduced modulo N).
    ///
    /// # Errors
    /// [`CryptoError::Rng`] if the OS RNG fails.
    pub fn random() -> Result<Scalar, CryptoError> {
        loop {
            let mut wide = [0u8; 64];
            random_bytes(&mut wide)?;
            let s = Scalar::from_bytes_wide(&wide);
            wide.zeroize();
            if !bool::from(s.is_zero()) {
                return Ok(s);
            }
        }
    }
}

/// `encode(H(item))`: the hash of one item to the order-N subgroup (see the module doc), e.g. for an
/// OPRF client that blinds it next with [`mul_encoded`].
///
/// # Errors
/// Only if `expand_message_xmd` rejects its fixed parameters, which cannot happen.
pub fn hash_to_subgroup_encoded(item: &ItemDigest) -> Result<[u8; POINT_LEN], CryptoError> {
    let p = hash::hash_to_subgroup(item)?;
    Ok(p.affine_with(p.z.invert()).encode())
}

/// SecretFlow's `CURVE_FOURQ` hash (psi `psi/cryptor/fourq_cryptor.cc`@242a8fa), for a party
/// that runs ECDH-PSI against a SecretFlow one: SHA-512(item); bytes 0..16 and 16..32, each read
/// little-endian and reduced modulo p (FourQlib's `mod1271`), are r = r0 + r1·i; FourQlib's
/// `HashToCurve(r)` (the map, then the cofactor). A single map call is an encoding, not a random
/// oracle (see [`hash_to_subgroup_encoded`] for ours); used only because the peer does.
pub fn secretflow_hash_encoded(item: &[u8]) -> [u8; POINT_LEN] {
    use sha2::{Digest, Sha512};
    let h = Sha512::digest(item);
    let mut first = [0u8; 32];
    first.copy_from_slice(&h[..32]);
    fourqlib_hash_of_digest(&first)
}

/// FourQlib's `HashToCurve(r)` (the map, then the cofactor) of r = r0 + r1·i, where r0 and r1
/// are bytes 0..16 and 16..32 of `h`, each read little-endian and reduced modulo p (`mod1271`).
/// SecretFlow feeds it SHA-512 (ECDH-PSI, [`secretflow_hash_encoded`]) or BLAKE3 (its
/// unbalanced PSI's OPRF, [`crate::secretflow_oprf`]).
pub(crate) fn fourqlib_hash_of_digest(h: &[u8; 32]) -> [u8; POINT_LEN] {
    let half = |i: usize| {
        let mut b = [0u8; 16];
        b.copy_from_slice(&h[16 * i..16 * i + 16]);
        field::Fp::fold(u128::from_le_bytes(b))
    };
    let r = field::Fp2 {
        a: half(0),
        b: half(1),
    };
    let p = hash::fourqlib_map_raw(r).to_point().mul_by_cofactor();
    p.affine_with(p.z.invert()).encode()
}

/// Decodes one peer point strictly and clears its cofactor; rejects the identity afterwards.
fn decode_peer(bytes: &[u8], index: usize) -> Result<Point, CryptoError> {
    let invalid = |reason| CryptoError::InvalidPoint { index, reason };
    let arr: &[u8; 32] = bytes.try_into().map_err(|_| invalid("wrong length"))?;
    let p =
        Affine::decode(arr).ok_or(invalid("not a canonical FourQ encoding of a curve point"))?;
    let q = p.to_point().mul_by_cofactor();
    if bool::from(q.is_identity()) {
        return Err(invalid("the identity or a point of small order"));
    }
    Ok(q)
}

/// Writes the encodings of `points` into `out` with one inversion.
fn encode_batch(points: &[Point], out: &mut [u8]) {
    for (slot, a) in out.chunks_exact_mut(POINT_LEN).zip(batch_to_affine(points)) {
        slot.copy_from_slice(&a.encode());
    }
}

/// For each 32-byte peer point P in `points`: decode strictly, clear the cofactor, reject the
/// identity, and write `encode((s/392)·(392·P))` — equal to `s·P` for P in the subgroup. This is
/// the primitive of the OPRF-style protocols: blind with a random `s`, unblind with
/// `s.invert()`.
///
/// # Errors
/// [`CryptoError::InvalidPoint`] with the index of the first bad point;
/// [`CryptoError::BufferLength`] on mismatched buffers.
pub fn mul_encoded(s: &Scalar, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
    let mut eff = s.mul(&COFACTOR_INV);
    let result = mul_cleared(&eff, points, out);
    eff.zeroize();
    result
}

/// [`mul_encoded`] with the factor 1/392 already folded into `eff`.
fn mul_cleared(eff: &Scalar, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
    check_remask_buffers(points, out, POINT_LEN)?;
    points
        .par_chunks(POINT_LEN * CHUNK)
        .zip(out.par_chunks_mut(POINT_LEN * CHUNK))
        .enumerate()
        .try_for_each(|(c, (inp, outp))| {
            let mut batch = Vec::with_capacity(CHUNK);
            for (j, enc) in inp.chunks_exact(POINT_LEN).enumerate() {
                batch.push(decode_peer(enc, c * CHUNK + j)?);
            }
            encode_batch(&lanes::mul_many(&batch, eff), outp);
            Ok(())
        })
}

/// An ECDH key on FourQ: a non-zero scalar k modulo N, with k/392 and (1/k)/392 precomputed for
/// `remask` and [`FourQCipher::remask_inverse`]. Zeroized on drop.
pub struct FourQCipher {
    key: Scalar,
    remask_key: Scalar,
    unmask_key: Scalar,
}

impl FourQCipher {
    /// A fresh random key, or the 32-byte little-endian scalar in `secret`, which must be
    /// canonical (below N) and non-zero — we do not reduce, so a key file has one meaning.
    ///
    /// # Errors
    /// [`CryptoError::InvalidSecretKey`] for a bad secret, [`CryptoError::Rng`] if the RNG fails.
    pub fn new(secret: Option<&[u8]>) -> Result<Self, CryptoError> {
        let key = match secret {
            Some(bytes) => {
                let arr: [u8; 32] = bytes.try_into().map_err(|_| {
                    CryptoError::InvalidSecretKey(
                        "a CURVE_FOURQ key file must hold exactly 32 bytes",
                    )
                })?;
                let k = Scalar::from_canonical_bytes(&arr).ok_or(CryptoError::InvalidSecretKey(
                    "the 32 bytes are not a canonical little-endian scalar below the FourQ order N",
                ))?;
                if bool::from(k.is_zero()) {
                    return Err(CryptoError::InvalidSecretKey("the scalar is zero"));
                }
                k
            }
            None => Scalar::random()?,
        };
        Ok(Self {
            key,
            remask_key: key.mul(&COFACTOR_INV),
            unmask_key: key.invert().mul(&COFACTOR_INV),
        })
    }

    /// Like [`EcdhCipher::remask`] but multiplies by 1/k: undoes this cipher's mask on subgroup
    /// points, `remask_inverse(remask(P)) = P`.
    ///
    /// # Errors
    /// As [`EcdhCipher::remask`].
    pub fn remask_inverse(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        mul_cleared(&self.unmask_key, points, out)
    }
}

impl Drop for FourQCipher {
    fn drop(&mut self) {
        self.key.zeroize();
        self.remask_key.zeroize();
        self.unmask_key.zeroize();
    }
}

impl std::fmt::Debug for FourQCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FourQCipher").finish_non_exhaustive()
    }
}

impl EcdhCipher for FourQCipher {
    fn curve(&self) -> Curve {
        Curve::FourQ
    }

    fn point_len(&self) -> usize {
        POINT_LEN
    }

    fn hash_and_mask(&self, items: &[ItemDigest], out: &mut [u8]) -> Result<(), CryptoError> {
        check_len("hash_and_mask output", out.len(), items.len() * POINT_LEN)?;
        items
            .par_chunks(CHUNK)
            .zip(out.par_chunks_mut(POINT_LEN * CHUNK))
            .try_for_each(|(its, outp)| {
                let hashed = lanes::hash_many(its)?;
                encode_batch(&lanes::mul_many(&hashed, &self.key), outp);
                Ok(())
            })
    }

    fn remask(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        mul_cleared(&self.remask_key, points, out)
    }
}

#[cfg(test)]
mod tests;
