//! The Diffie–Hellman OPRF of unbalanced PSI ("2HashDH": Jarecki–Liu, "Fast Secure Computation
//! of Set Intersection", SCN 2010; as used for unbalanced PSI by Resende–Aranha, "Faster
//! Unbalanced Private Set Intersection", FC 2018): `F_k(y) = T(H(y)^k)` in a prime-order
//! group, with `H` a hash to the group (RFC 9380 style) and `T` SHA-256 (see [`tag`]).
//!
//! `T` hashes the point alone, not `(y, point)` as JL10's 2HashDH does: in the shuffle variant
//! the client gets `H(x)^k` in an order it cannot relate to its items, so it cannot supply `x`.
//! `H` is collision resistant, so equal points still mean equal items (as in ECDH-PSI).
//!
//! The client blinds `H(x)^r` with a fresh `r`, the server raises to its key `k`, the client
//! unblinds with `1/r` and gets `H(x)^k` without the server seeing `x` (the blinded point is
//! uniform in the group) and without learning `k` (one-more-DH). Only prime-order groups
//! qualify — in a group with a cofactor, unblinding would not be exact for points outside the
//! subgroup, and `H(x)^r` could leak `x`'s cofactor component — so the curves are
//! [`Curve::FourQ`] (cofactor cleared on every peer point, see [`crate::fourq`]),
//! [`Curve::Ristretto255`], and the cofactor-1 Weierstrass curves [`Curve::Secp256k1`],
//! [`Curve::P256`] and [`Curve::Sm2`] (points as 32-byte x-coordinates, see
//! [`crate::oprf_weierstrass`]). Curve25519 (X25519) is not a prime-order group (cofactor 8)
//! and is refused.

use crate::fourq::FourQCipher;
use crate::oprf_weierstrass::{P256Oprf, Secp256k1Oprf, Sm2Oprf};
use crate::ristretto::RistrettoCipher;
use crate::{CryptoError, Curve, EcdhCipher, ItemDigest};
use rayon::prelude::*;
use sha2::{Digest, Sha256, Sha512};
use zeroize::Zeroize;

/// Encoded point length of every OPRF group.
pub const POINT_LEN: usize = 32;

/// Domain of the key derivation from a key file's bytes.
const KEY_DOMAIN: &[u8] = b"blindjoin/v1/ub-oprf/key-from-file\0";
/// Domain of the output hash `T`.
const TAG_DOMAIN: &[u8] = b"blindjoin/v1/ub-oprf/output\0";
/// The public item whose OPRF value identifies a key (the key-check value).
const KCV_ITEM: &[u8] = b"blindjoin/v1/ub-oprf/key-check";

/// Items per parallel work unit.
const CHUNK: usize = 1024;

/// Whether the OPRF runs on `curve` (a prime-order group).
pub fn supports(curve: Curve) -> bool {
    matches!(
        curve,
        Curve::FourQ | Curve::Ristretto255 | Curve::Secp256k1 | Curve::P256 | Curve::Sm2
    )
}

enum Inner {
    FourQ(FourQCipher),
    Ristretto(RistrettoCipher),
    Secp256k1(Secp256k1Oprf),
    P256(P256Oprf),
    Sm2(Sm2Oprf),
}

/// A scalar of the OPRF group: the server's key `k`, or the client's blinding factor `r`.
/// Zeroized on drop (by the ciphers it wraps); never printed.
pub struct OprfScalar {
    curve: Curve,
    inner: Inner,
}

impl std::fmt::Debug for OprfScalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OprfScalar")
            .field("curve", &self.curve)
            .finish_non_exhaustive()
    }
}

fn unsupported() -> CryptoError {
    CryptoError::Unsupported {
        what: "unbalanced PSI on this curve",
        hint: "the OPRF needs a prime-order group and CURVE_25519 has cofactor 8: use \
               CURVE_FOURQ (default), CURVE_RISTRETTO255, CURVE_SECP256K1, CURVE_SM2 or \
               CURVE_P256",
    }
}

impl OprfScalar {
    /// A fresh random scalar (the client's blinding factor, or a server key made on the spot).
    ///
    /// # Errors
    /// A curve without a prime-order group; an RNG failure.
    pub fn random(curve: Curve) -> Result<Self, CryptoError> {
        Self::build(curve, None)
    }

    /// The server key derived from a key file's bytes (any length ≥ 16; SecretFlow's key file
    /// is 32 bytes from `openssl rand 32`). The bytes are hashed with SHA-512 and reduced
    /// modulo the group order, so every 32-byte file is a valid key (a raw 256-bit value is
    /// usually above FourQ's 246-bit order) and the key is uniform. On the Weierstrass curves,
    /// whose orders lie within 2^-32 of 2^256, the first 32 bytes of the hash are taken when
    /// they are a non-zero scalar below the order, else the hash is redone with the separator
    /// byte counting up (deterministic; uniform on the scalars; a second try has probability
    /// below 2^-32).
    ///
    /// # Errors
    /// Fewer than 16 bytes, a curve without a prime-order group.
    pub fn from_seed(curve: Curve, seed: &[u8]) -> Result<Self, CryptoError> {
        if seed.len() < 16 {
            return Err(CryptoError::InvalidSecretKey(
                "a key file must hold at least 16 random bytes (SecretFlow's: openssl rand 32)",
            ));
        }
        let mut wide = [0u8; 64];
        wide.copy_from_slice(
            &Sha512::new()
                .chain_update(KEY_DOMAIN)
                .chain_update(curve.config_name().as_bytes())
                .chain_update([0u8])
                .chain_update(seed)
                .finalize(),
        );
        let mut bytes = match curve {
            Curve::FourQ => crate::fourq::Scalar::from_bytes_wide(&wide).to_bytes(),
            Curve::Ristretto255 => {
                curve25519_dalek::scalar::Scalar::from_bytes_mod_order_wide(&wide).to_bytes()
            }
            Curve::Secp256k1 | Curve::P256 | Curve::Sm2 => {
                wide.zeroize();
                return Self::from_seed_rejection(curve, seed);
            }
            _ => {
                wide.zeroize();
                return Err(unsupported());
            }
        };
        wide.zeroize();
        let r = Self::build(curve, Some(&bytes));
        bytes.zeroize();
        r
    }

    /// [`Self::from_seed`] on a curve of order just below 2^256: rejection with a counter.
    fn from_seed_rejection(curve: Curve, seed: &[u8]) -> Result<Self, CryptoError> {
        for counter in 0u8..=255 {
            let mut wide = [0u8; 64];
            wide.copy_from_slice(
                &Sha512::new()
                    .chain_update(KEY_DOMAIN)
                    .chain_update(curve.config_name().as_bytes())
                    .chain_update([counter])
                    .chain_update(seed)
                    .finalize(),
            );
            let r = Self::build(curve, Some(&wide[..32]));
            wide.zeroize();
            match r {
                Err(CryptoError::InvalidSecretKey(_)) => continue,
                other => return other,
            }
        }
        Err(CryptoError::InvalidSecretKey(
            "no scalar below the group order in 256 tries (probability below 2^-8000)",
        ))
    }

    fn build(curve: Curve, secret: Option<&[u8]>) -> Result<Self, CryptoError> {
        let inner = match curve {
            Curve::FourQ => Inner::FourQ(FourQCipher::new(secret)?),
            Curve::Ristretto255 => Inner::Ristretto(RistrettoCipher::new(secret)?),
            Curve::Secp256k1 => Inner::Secp256k1(Secp256k1Oprf::new(secret)?),
            Curve::P256 => Inner::P256(P256Oprf::new(secret)?),
            Curve::Sm2 => Inner::Sm2(Sm2Oprf::new(secret)?),
            _ => return Err(unsupported()),
        };
        Ok(Self { curve, inner })
    }

    /// The group.
    pub fn curve(&self) -> Curve {
        self.curve
    }

    /// Writes `encode(H(item)^s)` for each item into consecutive [`POINT_LEN`] slots of `out`
    /// (in parallel).
    ///
    /// # Errors
    /// [`CryptoError::BufferLength`] on a wrong `out`.
    pub fn hash_and_mul(&self, items: &[ItemDigest], out: &mut [u8]) -> Result<(), CryptoError> {
        crate::check_len("oprf hash output", out.len(), items.len() * POINT_LEN)?;
        items
            .par_chunks(CHUNK)
            .zip(out.par_chunks_mut(CHUNK * POINT_LEN))
            .try_for_each(|(its, o)| match &self.inner {
                Inner::FourQ(c) => c.hash_and_mask(its, o),
                Inner::Ristretto(c) => c.hash_and_mask(its, o),
                Inner::Secp256k1(c) => c.hash_and_mul(its, o),
                Inner::P256(c) => c.hash_and_mul(its, o),
                Inner::Sm2(c) => c.hash_and_mul(its, o),
            })
    }

    /// Decodes each untrusted peer point strictly and writes `encode(P^s)`.
    ///
    /// # Errors
    /// [`CryptoError::InvalidPoint`] (index within its chunk) for a bad point.
    pub fn mul(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        self.mul_points(points, out, false)
    }

    /// Like [`OprfScalar::mul`] with `1/s`: the client's unblinding.
    ///
    /// # Errors
    /// As [`OprfScalar::mul`].
    pub fn mul_inverse(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        self.mul_points(points, out, true)
    }

    fn mul_points(&self, points: &[u8], out: &mut [u8], inverse: bool) -> Result<(), CryptoError> {
        crate::check_remask_buffers(points, out, POINT_LEN)?;
        points
            .par_chunks(CHUNK * POINT_LEN)
            .zip(out.par_chunks_mut(CHUNK * POINT_LEN))
            .try_for_each(|(p, o)| match (&self.inner, inverse) {
                (Inner::FourQ(c), false) => c.remask(p, o),
                (Inner::FourQ(c), true) => c.remask_inverse(p, o),
                (Inner::Ristretto(c), false) => c.remask(p, o),
                (Inner::Ristretto(c), true) => c.remask_inverse(p, o),
                (Inner::Secp256k1(c), inv) => c.mul(p, o, inv),
                (Inner::P256(c), inv) => c.mul(p, o, inv),
                (Inner::Sm2(c), inv) => c.mul(p, o, inv),
            })
    }

    /// A key-check value: 16 bytes that identify this key (to catch a cache made under another
    /// key file) without revealing it — `T` of the OPRF of a fixed public item, a value any
    /// client could obtain by querying that item, so publishing it in a cache header is safe.
    ///
    /// # Errors
    /// Only if hashing to the group fails, which cannot happen.
    pub fn key_check_value(&self) -> Result<[u8; 16], CryptoError> {
        let item = crate::item_digest(KCV_ITEM);
        let mut p = [0u8; POINT_LEN];
        self.hash_and_mul(std::slice::from_ref(&item), &mut p)?;
        let mut out = [0u8; 16];
        out.copy_from_slice(&tag(&p)[..16]);
        Ok(out)
    }
}

/// The OPRF output `T(P) = SHA-256(domain ‖ P)` of an evaluated point `P = H(y)^k` (see the
/// module doc for why `y` is not hashed in); callers truncate it (the `ub_oprf` protocol).
/// Hashing makes every output bit uniform, whatever the group's encoding looks like.
pub fn tag(point: &[u8]) -> [u8; 32] {
    Sha256::new()
        .chain_update(TAG_DOMAIN)
        .chain_update(point)
        .finalize()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item_digest;

    #[test]
    fn blind_eval_unblind_equals_direct_evaluation() {
        // On the Weierstrass curves a decoder lifts x with the even y: across 2,100 items both
        // signs occur at every step, and the results must still agree.
        for curve in [
            Curve::FourQ,
            Curve::Ristretto255,
            Curve::Secp256k1,
            Curve::P256,
            Curve::Sm2,
        ] {
            assert!(supports(curve));
            let k = OprfScalar::from_seed(curve, &[7u8; 32]).unwrap();
            let r = OprfScalar::random(curve).unwrap();
            let items: Vec<_> = (0..2100u32)
                .map(|i| item_digest(&i.to_le_bytes()))
                .collect();
            let n = items.len() * POINT_LEN;
            let (mut direct, mut blinded, mut evald, mut unbl) =
                (vec![0; n], vec![0; n], vec![0; n], vec![0; n]);
            k.hash_and_mul(&items, &mut direct).unwrap();
            r.hash_and_mul(&items, &mut blinded).unwrap();
            k.mul(&blinded, &mut evald).unwrap();
            r.mul_inverse(&evald, &mut unbl).unwrap();
            assert_eq!(direct, unbl, "{curve}");
            assert_ne!(blinded, direct);
            // Same seed, same key; another seed, another key-check value.
            let k2 = OprfScalar::from_seed(curve, &[7u8; 32]).unwrap();
            let k3 = OprfScalar::from_seed(curve, &[8u8; 32]).unwrap();
            assert_eq!(k.key_check_value().unwrap(), k2.key_check_value().unwrap());
            assert_ne!(k.key_check_value().unwrap(), k3.key_check_value().unwrap());
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(OprfScalar::random(Curve::Curve25519).is_err());
        assert!(!supports(Curve::Curve25519));
        assert!(OprfScalar::from_seed(Curve::Curve25519, &[1; 32]).is_err());
        // Any 32 bytes are a key file on every supported curve.
        for curve in [Curve::Secp256k1, Curve::P256, Curve::Sm2] {
            for seed in [[0u8; 32], [0xff; 32]] {
                OprfScalar::from_seed(curve, &seed).unwrap();
            }
            let k = OprfScalar::random(curve).unwrap();
            let mut out = [0u8; 32];
            // x ≥ p, and a wrong length.
            assert!(k.mul(&[0xffu8; 32], &mut out).is_err(), "{curve}");
            assert!(k.mul_inverse(&[0xffu8; 32], &mut out).is_err(), "{curve}");
            assert!(k.mul(&[0u8; 33], &mut [0u8; 33]).is_err(), "{curve}");
        }
        assert!(OprfScalar::from_seed(Curve::FourQ, &[1; 8]).is_err());
        let k = OprfScalar::random(Curve::FourQ).unwrap();
        let mut out = [0u8; 32];
        assert!(k.mul(&[0xffu8; 32], &mut out).is_err());
        assert!(k.mul(&[0u8; 31], &mut [0u8; 31]).is_err());
        let r = OprfScalar::random(Curve::Ristretto255).unwrap();
        assert!(r.mul(&[0xffu8; 32], &mut out).is_err());
        assert!(r.mul_inverse(&[0u8; 32], &mut out).is_err()); // the identity
    }
}
