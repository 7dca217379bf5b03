//! Prime-order short-Weierstrass curves through RustCrypto: secp256k1 (k256), P-256 (p256) and
//! SM2 (sm2). Points travel as 33-byte SEC1 compressed encodings; hash-to-curve is RFC 9380
//! (`secp256k1_XMD:SHA-256_SSWU_RO_`, `P256_XMD:SHA-256_SSWU_RO_`; SM2 uses our SSWU in
//! [`crate::sm2_h2c`]). All three have cofactor 1, so a decoded point is in the group.

use crate::{
    CryptoError, Curve, EcdhCipher, ItemDigest, check_len, check_remask_buffers, random_bytes,
};
use zeroize::Zeroize;

/// Encoded (SEC1 compressed) point length.
pub const POINT_LEN: usize = 33;

/// Stamps out one cipher type per curve crate; the crates share traits (`group`, `ff`,
/// `elliptic_curve::sec1`) but expose hash-to-curve differently, hence `$hash`.
macro_rules! weierstrass_cipher {
    ($name:ident, $krate:ident, $curve:expr, $dst:expr, $hash:expr) => {
        #[doc = concat!("An ECDH key on ", stringify!($krate), "; zeroized on drop.")]
        pub struct $name {
            key: $krate::Scalar,
        }

        impl $name {
            /// A fresh random key, or the 32-byte big-endian scalar in `secret`.
            ///
            /// # Errors
            /// A secret that is not a canonical non-zero scalar, or an RNG failure.
            pub fn new(secret: Option<&[u8]>) -> Result<Self, CryptoError> {
                use elliptic_curve::ff::PrimeField;
                let from_bytes = |bytes: [u8; 32]| -> Option<$krate::Scalar> {
                    let repr = $krate::FieldBytes::from(bytes);
                    Option::<$krate::Scalar>::from($krate::Scalar::from_repr(repr))
                        .filter(|s| !bool::from(elliptic_curve::ff::Field::is_zero(s)))
                };
                let key = match secret {
                    Some(bytes) => {
                        let arr: [u8; 32] = bytes.try_into().map_err(|_| {
                            CryptoError::InvalidSecretKey("a key file must hold exactly 32 bytes")
                        })?;
                        from_bytes(arr).ok_or(CryptoError::InvalidSecretKey(
                            "the 32 bytes are zero or not below the group order",
                        ))?
                    }
                    None => loop {
                        // Rejection sampling: the orders are within 2^-32 of 2^256, so this
                        // loops more than once with negligible probability.
                        let mut buf = [0u8; 32];
                        random_bytes(&mut buf)?;
                        let s = from_bytes(buf);
                        buf.zeroize();
                        if let Some(s) = s {
                            break s;
                        }
                    },
                };
                Ok(Self { key })
            }

            fn encode(p: &$krate::ProjectivePoint, slot: &mut [u8]) {
                use elliptic_curve::group::GroupEncoding;
                let affine = p.to_affine();
                slot.copy_from_slice(&affine.to_bytes());
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                self.key.zeroize();
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }

        impl EcdhCipher for $name {
            fn curve(&self) -> Curve {
                $curve
            }

            fn point_len(&self) -> usize {
                POINT_LEN
            }

            fn hash_and_mask(
                &self,
                items: &[ItemDigest],
                out: &mut [u8],
            ) -> Result<(), CryptoError> {
                check_len("hash_and_mask output", out.len(), items.len() * POINT_LEN)?;
                for (item, slot) in items.iter().zip(out.chunks_exact_mut(POINT_LEN)) {
                    let h: $krate::ProjectivePoint = $hash(item.as_slice(), $dst)?;
                    Self::encode(&(h * self.key), slot);
                }
                Ok(())
            }

            fn remask(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
                use elliptic_curve::group::GroupEncoding;
                check_remask_buffers(points, out, POINT_LEN)?;
                for (index, (chunk, slot)) in points
                    .chunks_exact(POINT_LEN)
                    .zip(out.chunks_exact_mut(POINT_LEN))
                    .enumerate()
                {
                    let invalid = |reason| CryptoError::InvalidPoint { index, reason };
                    let mut repr = <$krate::AffinePoint as GroupEncoding>::Repr::default();
                    if repr.len() != POINT_LEN {
                        return Err(invalid("unexpected encoding length"));
                    }
                    repr.copy_from_slice(chunk);
                    // Only 0x02/0x03 compressed encodings of on-curve x decode; identity is
                    // rejected separately (its SEC1 form is a single 0x00 byte).
                    let p =
                        Option::<$krate::AffinePoint>::from($krate::AffinePoint::from_bytes(&repr))
                            .ok_or(invalid("not a valid compressed point on the curve"))?;
                    let p = $krate::ProjectivePoint::from(p);
                    if bool::from(elliptic_curve::group::Group::is_identity(&p)) {
                        return Err(invalid("the identity element"));
                    }
                    Self::encode(&(p * self.key), slot);
                }
                Ok(())
            }
        }
    };
}

pub(crate) fn hash_k256(msg: &[u8], dst: &[u8]) -> Result<k256::ProjectivePoint, CryptoError> {
    use hash2curve::GroupDigest;
    k256::Secp256k1::hash_from_bytes(&[msg], &[dst])
        .map_err(|_| CryptoError::HashToCurve("secp256k1 expand_message_xmd failed"))
}

pub(crate) fn hash_p256(msg: &[u8], dst: &[u8]) -> Result<p256::ProjectivePoint, CryptoError> {
    use hash2curve::GroupDigest;
    p256::NistP256::hash_from_bytes(&[msg], &[dst])
        .map_err(|_| CryptoError::HashToCurve("P-256 expand_message_xmd failed"))
}

pub(crate) fn hash_sm2(msg: &[u8], dst: &[u8]) -> Result<sm2::ProjectivePoint, CryptoError> {
    crate::sm2_h2c::hash_to_curve(&[msg], dst).map_err(CryptoError::HashToCurve)
}

/// Hash-to-curve domain separation tags (RFC 9380 §3.1), shared with the OPRF
/// ([`crate::oprf_weierstrass`]).
pub(crate) const DST_SECP256K1: &[u8] = b"BLINDJOIN-V01-CS01-with-secp256k1_XMD:SHA-256_SSWU_RO_";
/// See [`DST_SECP256K1`].
pub(crate) const DST_P256: &[u8] = b"BLINDJOIN-V01-CS01-with-P256_XMD:SHA-256_SSWU_RO_";
/// See [`DST_SECP256K1`].
pub(crate) const DST_SM2: &[u8] = b"BLINDJOIN-V01-CS01-with-SM2_XMD:SHA-256_SSWU_RO_";

weierstrass_cipher!(
    Secp256k1Cipher,
    k256,
    Curve::Secp256k1,
    DST_SECP256K1,
    hash_k256
);
weierstrass_cipher!(P256Cipher, p256, Curve::P256, DST_P256, hash_p256);
weierstrass_cipher!(Sm2Cipher, sm2, Curve::Sm2, DST_SM2, hash_sm2);
