//! The OPRF of [`crate::oprf`] on the prime-order short-Weierstrass curves: secp256k1, P-256 and
//! SM2 (all of cofactor 1, so every decoded point is in the prime-order group).
//!
//! Points travel as their 32-byte x-coordinate alone, so every OPRF group keeps
//! [`crate::oprf::POINT_LEN`] = 32 bytes. x determines a point up to its sign, and the OPRF
//! is well defined on that quotient: `x(k·(±P)) = x(k·P)`, so blinding (`r`), evaluation (`k`)
//! and unblinding (`1/r`) commute with the sign as with the point, and `F_k(y) = T(x(k·H(y)))`
//! is a function of `y` (the lift a decoder picks does not matter). The blinded value
//! `x(r·H(x))` is uniform over the x-coordinates for uniform `r`, and the one-more-Gap-DH
//! assumption on the group carries over to ±-classes (as for X25519's x-only arithmetic).
//! Hash-to-curve is RFC 9380 with the ECDH-PSI tags ([`crate::weierstrass`]).
//!
//! A decoder lifts x with the even y (SEC1 `0x02 ‖ x`), which fails for an x that is not on the
//! curve; the identity has no x and is never produced or accepted.

use crate::weierstrass::{DST_P256, DST_SECP256K1, DST_SM2, hash_k256, hash_p256, hash_sm2};
use crate::{CryptoError, ItemDigest, random_bytes};
use zeroize::Zeroize;

/// Bytes of one x-only point.
const X_LEN: usize = 32;

macro_rules! oprf_curve {
    ($name:ident, $krate:ident, $dst:expr, $hash:expr) => {
        /// A scalar of this curve's OPRF (the server key or the client's blinding factor) and
        /// its inverse; zeroized on drop, never printed.
        pub(crate) struct $name {
            key: $krate::Scalar,
            inv: $krate::Scalar,
        }

        impl $name {
            /// A fresh random scalar, or the 32-byte big-endian scalar in `secret` (non-zero,
            /// below the order).
            pub(crate) fn new(secret: Option<&[u8]>) -> Result<Self, CryptoError> {
                use elliptic_curve::ff::{Field, PrimeField};
                let from_bytes = |bytes: [u8; 32]| -> Option<$krate::Scalar> {
                    let repr = $krate::FieldBytes::from(bytes);
                    Option::<$krate::Scalar>::from($krate::Scalar::from_repr(repr))
                        .filter(|s| !bool::from(Field::is_zero(s)))
                };
                let key = match secret {
                    Some(bytes) => {
                        let arr: [u8; 32] = bytes.try_into().map_err(|_| {
                            CryptoError::InvalidSecretKey("an OPRF scalar is 32 bytes")
                        })?;
                        from_bytes(arr).ok_or(CryptoError::InvalidSecretKey(
                            "the 32 bytes are zero or not below the group order",
                        ))?
                    }
                    None => loop {
                        // The orders are within 2^-32 of 2^256: rejection almost never loops.
                        let mut buf = [0u8; 32];
                        random_bytes(&mut buf)?;
                        let s = from_bytes(buf);
                        buf.zeroize();
                        if let Some(s) = s {
                            break s;
                        }
                    },
                };
                let inv = Option::<$krate::Scalar>::from(Field::invert(&key)).ok_or(
                    CryptoError::InvalidSecretKey("the scalar has no inverse (it is zero)"),
                )?;
                Ok(Self { key, inv })
            }

            fn encode(p: &$krate::ProjectivePoint, slot: &mut [u8]) {
                use elliptic_curve::group::GroupEncoding;
                let bytes = p.to_affine().to_bytes();
                // SEC1 compressed: the sign byte, then x.
                slot.copy_from_slice(&bytes[1..]);
            }

            fn decode(x: &[u8], index: usize) -> Result<$krate::ProjectivePoint, CryptoError> {
                use elliptic_curve::group::GroupEncoding;
                let invalid = |reason| CryptoError::InvalidPoint { index, reason };
                let mut repr = <$krate::AffinePoint as GroupEncoding>::Repr::default();
                if repr.len() != X_LEN + 1 || x.len() != X_LEN {
                    return Err(invalid("unexpected encoding length"));
                }
                repr[0] = 0x02;
                repr[1..].copy_from_slice(x);
                let p = Option::<$krate::AffinePoint>::from($krate::AffinePoint::from_bytes(&repr))
                    .ok_or(invalid("not the x-coordinate of a point on the curve"))?;
                let p = $krate::ProjectivePoint::from(p);
                if bool::from(elliptic_curve::group::Group::is_identity(&p)) {
                    return Err(invalid("the identity element"));
                }
                Ok(p)
            }

            /// `x(s·H(item))` for each item, into consecutive 32-byte slots.
            pub(crate) fn hash_and_mul(
                &self,
                items: &[ItemDigest],
                out: &mut [u8],
            ) -> Result<(), CryptoError> {
                crate::check_len("oprf hash output", out.len(), items.len() * X_LEN)?;
                for (item, slot) in items.iter().zip(out.chunks_exact_mut(X_LEN)) {
                    let h: $krate::ProjectivePoint = $hash(item.as_slice(), $dst)?;
                    Self::encode(&(h * self.key), slot);
                }
                Ok(())
            }

            /// `x(s·P)` (or `x(P/s)` when `inverse`) for each untrusted x-only point.
            pub(crate) fn mul(
                &self,
                points: &[u8],
                out: &mut [u8],
                inverse: bool,
            ) -> Result<(), CryptoError> {
                crate::check_remask_buffers(points, out, X_LEN)?;
                let s = if inverse { &self.inv } else { &self.key };
                for (index, (x, slot)) in points
                    .chunks_exact(X_LEN)
                    .zip(out.chunks_exact_mut(X_LEN))
                    .enumerate()
                {
                    let p = Self::decode(x, index)?;
                    Self::encode(&(p * s), slot);
                }
                Ok(())
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                self.key.zeroize();
                self.inv.zeroize();
            }
        }
    };
}

oprf_curve!(Secp256k1Oprf, k256, DST_SECP256K1, hash_k256);
oprf_curve!(P256Oprf, p256, DST_P256, hash_p256);
oprf_curve!(Sm2Oprf, sm2, DST_SM2, hash_sm2);
