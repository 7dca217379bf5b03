//! Curve25519 as the prime-order group Ristretto255 (RFC 9496), through curve25519-dalek.
//!
//! Hash to group: `ristretto255_XMD:SHA-512_R255MAP_RO_` — RFC 9380 §5.3.1 `expand_message_xmd`
//! with SHA-512 to 64 bytes, then RFC 9496 §4.3.4 `element_derivation_function` (two Elligator 2
//! maps, added), which is dalek's `RistrettoPoint::from_uniform_bytes`. Unlike "SHA-256 as the
//! X25519 u-coordinate" (SecretFlow's CURVE_25519), no twist bit of `H(x)` leaks.
//!
//! Speed: compressing a point costs a field inversion (~5 µs). We store `k/2` instead of `k` and
//! encode with `double_and_compress_batch`, which doubles and compresses a whole batch with one
//! shared inversion: `compress(2·(k/2)·P) = compress(k·P)` at ~0.5 µs per point.

use crate::{
    CryptoError, Curve, EcdhCipher, ItemDigest, check_len, check_remask_buffers, random_bytes,
};
use curve25519_dalek::ristretto::{CompressedRistretto, RistrettoPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::Identity;
use zeroize::Zeroize;

/// Encoded point length.
pub const POINT_LEN: usize = 32;

/// Domain separation tag of our hash-to-group suite (RFC 9380 §3.1).
pub const DST: &[u8] = b"BLINDJOIN-V01-CS01-with-ristretto255_XMD:SHA-512_R255MAP_RO_";

/// Hashes an item to Ristretto255 (`hash_to_ristretto255`, RFC 9496 §4.3.4 with RFC 9380 XMD).
///
/// # Errors
/// Only if XMD rejects its parameters, which cannot happen for our fixed 64-byte output and DST.
pub fn hash_to_group(msg: &[u8]) -> Result<RistrettoPoint, CryptoError> {
    let mut uniform = [0u8; 64];
    crate::expand_xmd_sha512(msg, DST, &mut uniform)?;
    Ok(RistrettoPoint::from_uniform_bytes(&uniform))
}

/// An ECDH key on Ristretto255. Holds `k/2` (see the module doc); zeroized on drop.
pub struct RistrettoCipher {
    half_key: Scalar,
    /// `(1/k)/2`, for [`RistrettoCipher::remask_inverse`] (the OPRF client's unblinding).
    half_inv_key: Scalar,
}

impl RistrettoCipher {
    /// A fresh random key, or the 32-byte little-endian scalar in `secret`.
    ///
    /// # Errors
    /// A secret that is not a canonical non-zero scalar, or an RNG failure.
    pub fn new(secret: Option<&[u8]>) -> Result<Self, CryptoError> {
        let mut key = match secret {
            Some(bytes) => {
                let arr: [u8; 32] = bytes.try_into().map_err(|_| {
                    CryptoError::InvalidSecretKey(
                        "a CURVE_25519 key file must hold exactly 32 bytes",
                    )
                })?;
                Option::<Scalar>::from(Scalar::from_canonical_bytes(arr)).ok_or(
                    CryptoError::InvalidSecretKey(
                        "the 32 bytes are not a canonical scalar modulo the group order",
                    ),
                )?
            }
            None => {
                let mut wide = [0u8; 64];
                random_bytes(&mut wide)?;
                let s = Scalar::from_bytes_mod_order_wide(&wide);
                wide.zeroize();
                s
            }
        };
        if key == Scalar::ZERO {
            return Err(CryptoError::InvalidSecretKey("the scalar is zero"));
        }
        let half = Scalar::from(2u8).invert();
        let half_key = key * half;
        let half_inv_key = key.invert() * half;
        key.zeroize();
        Ok(Self {
            half_key,
            half_inv_key,
        })
    }

    /// Like [`EcdhCipher::remask`] but multiplies by 1/k: `remask_inverse(remask(P)) = P`. The
    /// OPRF client (`oprf`) unblinds with it.
    ///
    /// # Errors
    /// As [`EcdhCipher::remask`].
    pub fn remask_inverse(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        self.remask_with(&self.half_inv_key, points, out)
    }

    fn mul_and_encode(&self, points: &mut [RistrettoPoint], out: &mut [u8]) {
        Self::mul_and_encode_with(&self.half_key, points, out)
    }

    fn mul_and_encode_with(half: &Scalar, points: &mut [RistrettoPoint], out: &mut [u8]) {
        for p in points.iter_mut() {
            *p *= half;
        }
        let encoded = RistrettoPoint::double_and_compress_batch(points.iter());
        for (slot, c) in out.chunks_exact_mut(POINT_LEN).zip(encoded) {
            slot.copy_from_slice(c.as_bytes());
        }
    }
}

impl RistrettoCipher {
    /// Decodes untrusted peer points strictly and writes `encode(2·half·P)`.
    fn remask_with(&self, half: &Scalar, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        check_remask_buffers(points, out, POINT_LEN)?;
        let identity = RistrettoPoint::identity();
        let mut decoded = Vec::with_capacity(points.len() / POINT_LEN);
        for (index, chunk) in points.chunks_exact(POINT_LEN).enumerate() {
            let invalid = |reason| CryptoError::InvalidPoint { index, reason };
            let compressed =
                CompressedRistretto::from_slice(chunk).map_err(|_| invalid("wrong length"))?;
            // `decompress` rejects non-canonical encodings (RFC 9496 §4.3.1).
            let p = compressed
                .decompress()
                .ok_or(invalid("not a canonical Ristretto255 encoding"))?;
            if p == identity {
                return Err(invalid("the identity element"));
            }
            decoded.push(p);
        }
        Self::mul_and_encode_with(half, &mut decoded, out);
        Ok(())
    }
}

impl Drop for RistrettoCipher {
    fn drop(&mut self) {
        self.half_key.zeroize();
        self.half_inv_key.zeroize();
    }
}

impl std::fmt::Debug for RistrettoCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RistrettoCipher").finish_non_exhaustive()
    }
}

impl EcdhCipher for RistrettoCipher {
    fn curve(&self) -> Curve {
        Curve::Ristretto255
    }

    fn point_len(&self) -> usize {
        POINT_LEN
    }

    fn hash_and_mask(&self, items: &[ItemDigest], out: &mut [u8]) -> Result<(), CryptoError> {
        check_len("hash_and_mask output", out.len(), items.len() * POINT_LEN)?;
        let mut points = items
            .iter()
            .map(|item| hash_to_group(item))
            .collect::<Result<Vec<_>, _>>()?;
        self.mul_and_encode(&mut points, out);
        Ok(())
    }

    fn remask(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        self.remask_with(&self.half_key, points, out)
    }
}
