//! SecretFlow's ECDH-PSI groups, hashed to and encoded exactly as an unmodified SecretFlow party
//! does (psi `psi/cryptor/*`@242a8fa, yacl `crypto/ecc/*`@f724366, the wheel `spu==0.9.5`), so a
//! blindjoin party can run `PROTOCOL_ECDH` against it. The research brief
//! `secretflow_wire.md` §2.5 records each choice and how it was checked against the wheel.
//!
//! | curve | H(item) | point on the wire |
//! |---|---|---|
//! | `CURVE_25519` | SHA-256(item) used directly as the X25519 u-coordinate | 32-byte u |
//! | `CURVE_25519_ELLIGATOR2` | RFC 9380 `curve25519_XMD:SHA-512_ELL2_RO_` with SecretFlow's DST; the u-coordinate written big-endian, then read little-endian by X25519 | 32-byte u |
//! | `CURVE_FOURQ` | SHA-512(item): bytes 0..16 and 16..32 as two GF(p) elements (little-endian, reduced), FourQlib's `HashToCurve` (map, then cofactor) | FourQlib encoding, 32 |
//! | `CURVE_SM2`, `CURVE_SECP256K1` | both on the SM2 curve (SecretFlow's `Sm2Cryptor` always builds `"sm2"`): x = SHA-256(item) mod p, the point with even y; if x is not on the curve, SHA-256 of the previous digest, at most 100 times | SEC1 compressed, 33 |
//!
//! **These hashes are weaker than ours** and are used only because the peer does: with
//! `CURVE_25519` about half of all items land on the twist (X25519 still commutes there, but the
//! point is no longer a uniform element of the prime-order group, and the twist bit of each
//! hash is visible to anyone holding the masked point's preimage candidates); try-and-increment
//! on SM2 is not constant time in the item. `docs/protocols.md` says what this costs.
//!
//! Masking is plain scalar multiplication by this party's random key; SecretFlow's own key
//! choice (raw bytes, clamped or not) does not matter to us because only `k_a·k_b·H(x)` is
//! compared and both products commute.

use crate::{CryptoError, check_remask_buffers, fourq, random_bytes, x25519};
use rayon::prelude::*;
use sha2::{Digest, Sha256, Sha512};
use zeroize::Zeroize;

/// SecretFlow's domain separation tag for `CURVE_25519_ELLIGATOR2`
/// (`yacl/crypto/hash/hash_to_curve/curve25519.cc`).
pub const ELLIGATOR2_DST: &[u8] = b"SECRETFLOW-V01-CS02-with-curve25519_XMD:SHA-512_ELL2_RO_";

/// How many times SecretFlow rehashes an SM2 x-coordinate that is not on the curve
/// (`TryAndRehash_SHA2`, yacl `hash_to_curve_util.cc`); the chance of needing more is 2^-100.
pub const SM2_MAX_REHASH: usize = 100;

/// SecretFlow's `kFinalCompareBytes`: the doubly masked points are compared (and sent) as the
/// last 12 bytes of their encoding.
pub const COMPARE_BYTES: usize = 12;

/// The SM2 prime p, big-endian (GB/T 32918.5).
const SM2_P: [u8; 32] = [
    0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
];

/// The group a SecretFlow ECDH run uses, named by its `ecdh_config.curve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SfCurve {
    /// `CURVE_25519` (config value 1).
    Curve25519,
    /// `CURVE_FOURQ` (2).
    FourQ,
    /// `CURVE_SM2` (3).
    Sm2,
    /// `CURVE_SECP256K1` (4): on the wire the same group and hash as SM2.
    Secp256k1,
    /// `CURVE_25519_ELLIGATOR2` (5).
    Curve25519Elligator2,
}

impl SfCurve {
    /// Every curve, in the config's order.
    pub const ALL: [SfCurve; 5] = [
        SfCurve::Curve25519,
        SfCurve::FourQ,
        SfCurve::Sm2,
        SfCurve::Secp256k1,
        SfCurve::Curve25519Elligator2,
    ];

    /// From the config's name (`CURVE_25519`, …; the `CURVE_` prefix may be left out).
    pub fn parse(name: &str) -> Option<SfCurve> {
        let t = name.trim().to_ascii_uppercase();
        let t = t.strip_prefix("CURVE_").unwrap_or(&t);
        Some(match t {
            "25519" => SfCurve::Curve25519,
            "FOURQ" => SfCurve::FourQ,
            "SM2" => SfCurve::Sm2,
            "SECP256K1" => SfCurve::Secp256k1,
            "25519_ELLIGATOR2" => SfCurve::Curve25519Elligator2,
            _ => return None,
        })
    }

    /// SecretFlow's name.
    pub fn config_name(self) -> &'static str {
        match self {
            SfCurve::Curve25519 => "CURVE_25519",
            SfCurve::FourQ => "CURVE_FOURQ",
            SfCurve::Sm2 => "CURVE_SM2",
            SfCurve::Secp256k1 => "CURVE_SECP256K1",
            SfCurve::Curve25519Elligator2 => "CURVE_25519_ELLIGATOR2",
        }
    }

    /// The `CurveType` enum value in `psi.proto` (what the config carries).
    pub fn config_value(self) -> u64 {
        match self {
            SfCurve::Curve25519 => 1,
            SfCurve::FourQ => 2,
            SfCurve::Sm2 => 3,
            SfCurve::Secp256k1 => 4,
            SfCurve::Curve25519Elligator2 => 5,
        }
    }

    /// The number in the ECDH sanity check (`curve=<n>`): the cryptor's own curve type, which is
    /// `CURVE_25519` for both 25519 variants.
    pub fn sanity_value(self) -> u64 {
        match self {
            SfCurve::Curve25519Elligator2 => 1,
            other => other.config_value(),
        }
    }

    /// Length of one encoded point.
    pub fn point_len(self) -> usize {
        match self {
            SfCurve::Sm2 | SfCurve::Secp256k1 => 33,
            _ => 32,
        }
    }
}

enum Key {
    X25519([u8; 32]),
    FourQ(fourq::Scalar),
    Sm2(sm2::Scalar),
}

/// A random ECDH key on one SecretFlow group; zeroized on drop, never printed.
pub struct SfCipher {
    curve: SfCurve,
    key: Key,
}

impl std::fmt::Debug for SfCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SfCipher")
            .field("curve", &self.curve)
            .finish_non_exhaustive()
    }
}

impl Drop for SfCipher {
    fn drop(&mut self) {
        match &mut self.key {
            Key::X25519(k) => k.zeroize(),
            Key::FourQ(k) => k.zeroize(),
            Key::Sm2(k) => k.zeroize(),
        }
    }
}

/// Items per parallel task.
const CHUNK: usize = 1024;

impl SfCipher {
    /// A fresh random key on `curve`.
    ///
    /// # Errors
    /// [`CryptoError::Rng`] if the OS RNG fails.
    pub fn new(curve: SfCurve) -> Result<SfCipher, CryptoError> {
        let key = match curve {
            SfCurve::Curve25519 | SfCurve::Curve25519Elligator2 => {
                let mut k = [0u8; 32];
                random_bytes(&mut k)?;
                Key::X25519(k)
            }
            SfCurve::FourQ => Key::FourQ(fourq::Scalar::random()?),
            SfCurve::Sm2 | SfCurve::Secp256k1 => Key::Sm2(random_sm2_scalar()?),
        };
        Ok(SfCipher { curve, key })
    }

    /// The group.
    pub fn curve(&self) -> SfCurve {
        self.curve
    }

    /// Length of one encoded point.
    pub fn point_len(&self) -> usize {
        self.curve.point_len()
    }

    /// `encode(k·H(item))` for each item, concatenated (SecretFlow's `HashInputs`, `EccMask`,
    /// `SerializeEcPoints`).
    ///
    /// # Errors
    /// An SM2 item whose hash found no point in [`SM2_MAX_REHASH`] tries (probability 2^-100).
    pub fn hash_and_mask<T: AsRef<[u8]> + Sync>(
        &self,
        items: &[T],
    ) -> Result<Vec<u8>, CryptoError> {
        let len = self.point_len();
        let mut out = vec![0u8; items.len() * len];
        items
            .par_chunks(CHUNK)
            .zip(out.par_chunks_mut(CHUNK * len))
            .try_for_each(|(chunk, slots)| self.hash_and_mask_chunk(chunk, slots))?;
        Ok(out)
    }

    fn hash_and_mask_chunk<T: AsRef<[u8]>>(
        &self,
        items: &[T],
        out: &mut [u8],
    ) -> Result<(), CryptoError> {
        match &self.key {
            Key::X25519(k) => {
                let us: Vec<[u8; 32]> = items
                    .iter()
                    .map(|i| match self.curve {
                        SfCurve::Curve25519Elligator2 => elligator2_u(i.as_ref()),
                        _ => Sha256::digest(i.as_ref()).into(),
                    })
                    .collect();
                let mut masked = vec![[0u8; 32]; us.len()];
                x25519::backend().x25519(k, &us, &mut masked);
                for (slot, m) in out.chunks_exact_mut(32).zip(&masked) {
                    slot.copy_from_slice(m);
                }
                Ok(())
            }
            Key::FourQ(k) => {
                let mut hashed = Vec::with_capacity(items.len() * 32);
                for i in items {
                    hashed.extend_from_slice(&fourq::secretflow_hash_encoded(i.as_ref()));
                }
                fourq::mul_encoded(k, &hashed, out)
            }
            Key::Sm2(k) => {
                for (i, slot) in items.iter().zip(out.chunks_exact_mut(33)) {
                    let p = sm2_hash(i.as_ref())?;
                    encode_sm2(&(p * *k), slot);
                }
                Ok(())
            }
        }
    }

    /// `encode(k·P)` for each of the peer's points (untrusted bytes), which are checked first:
    /// on the curve (and in FourQ's subgroup), canonical, not the identity.
    ///
    /// # Errors
    /// [`CryptoError::InvalidPoint`] naming the first bad point; mismatched buffers.
    pub fn remask(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        let len = self.point_len();
        check_remask_buffers(points, out, len)?;
        points
            .par_chunks(CHUNK * len)
            .zip(out.par_chunks_mut(CHUNK * len))
            .enumerate()
            .try_for_each(|(c, (inp, outp))| self.remask_chunk(c * CHUNK, inp, outp))
    }

    fn remask_chunk(&self, first: usize, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        match &self.key {
            Key::X25519(k) => {
                let us: Vec<[u8; 32]> = points
                    .chunks_exact(32)
                    .map(|c| {
                        let mut u = [0u8; 32];
                        u.copy_from_slice(c);
                        u
                    })
                    .collect();
                let mut masked = vec![[0u8; 32]; us.len()];
                x25519::backend().x25519(k, &us, &mut masked);
                for (j, (slot, m)) in out.chunks_exact_mut(32).zip(&masked).enumerate() {
                    // A low-order u gives the all-zero product (RFC 7748 §6.1): not a hash.
                    if m.iter().all(|&b| b == 0) {
                        return Err(CryptoError::InvalidPoint {
                            index: first + j,
                            reason: "a point of small order",
                        });
                    }
                    slot.copy_from_slice(m);
                }
                Ok(())
            }
            Key::FourQ(k) => fourq::mul_encoded(k, points, out).map_err(|e| match e {
                CryptoError::InvalidPoint { index, reason } => CryptoError::InvalidPoint {
                    index: first + index,
                    reason,
                },
                other => other,
            }),
            Key::Sm2(k) => {
                use elliptic_curve::group::GroupEncoding;
                for (j, (chunk, slot)) in points
                    .chunks_exact(33)
                    .zip(out.chunks_exact_mut(33))
                    .enumerate()
                {
                    let invalid = |reason| CryptoError::InvalidPoint {
                        index: first + j,
                        reason,
                    };
                    let mut repr = <sm2::AffinePoint as GroupEncoding>::Repr::default();
                    repr.copy_from_slice(chunk);
                    let p = Option::<sm2::AffinePoint>::from(sm2::AffinePoint::from_bytes(&repr))
                        .ok_or(invalid("not a compressed SM2 point on the curve"))?;
                    let p = sm2::ProjectivePoint::from(p);
                    if bool::from(elliptic_curve::group::Group::is_identity(&p)) {
                        return Err(invalid("the identity element"));
                    }
                    encode_sm2(&(p * *k), slot);
                }
                Ok(())
            }
        }
    }
}

/// log2 of the chance that two different items of sets of `n` and `m` give equal
/// [`COMPARE_BYTES`]-byte tails: the tails of distinct points are uniform, so by the union bound
/// over the n·m pairs it is at most n·m·2^-(8·COMPARE_BYTES) = n·m·2^-96.
pub fn false_match_log2(n: u64, m: u64) -> f64 {
    (n as f64).log2() + (m as f64).log2() - (8 * COMPARE_BYTES) as f64
}

/// The last [`COMPARE_BYTES`] bytes of an encoded point: what SecretFlow compares.
pub fn compare_tail(point: &[u8]) -> [u8; COMPARE_BYTES] {
    let mut t = [0u8; COMPARE_BYTES];
    let n = point.len().min(COMPARE_BYTES);
    t[COMPARE_BYTES - n..].copy_from_slice(&point[point.len() - n..]);
    t
}

/// `CURVE_25519_ELLIGATOR2`'s input to X25519: the RFC 9380 hash's u-coordinate (equal for the
/// curve25519 and edwards25519 suites, whose maps differ only in v), byte-reversed as
/// SecretFlow writes it big-endian and X25519 reads it little-endian.
fn elligator2_u(item: &[u8]) -> [u8; 32] {
    let p = curve25519_dalek::edwards::EdwardsPoint::hash_to_curve::<Sha512>(
        &[item],
        &[ELLIGATOR2_DST],
    );
    let mut u = p.to_montgomery().0;
    u.reverse();
    u
}

/// SecretFlow's SM2 hash (see the module doc).
fn sm2_hash(item: &[u8]) -> Result<sm2::ProjectivePoint, CryptoError> {
    use elliptic_curve::group::GroupEncoding;
    let mut digest: [u8; 32] = Sha256::digest(item).into();
    for _ in 0..SM2_MAX_REHASH {
        let mut x = digest;
        reduce_once_sm2(&mut x);
        let mut repr = <sm2::AffinePoint as GroupEncoding>::Repr::default();
        repr[0] = 0x02;
        repr[1..].copy_from_slice(&x);
        if let Some(p) = Option::<sm2::AffinePoint>::from(sm2::AffinePoint::from_bytes(&repr)) {
            return Ok(sm2::ProjectivePoint::from(p));
        }
        digest = Sha256::digest(digest).into();
    }
    Err(CryptoError::HashToCurve(
        "no SM2 point after 100 rehashes (probability 2^-100)",
    ))
}

/// x mod p for x < 2^256 < 2p: subtracts p once when x ≥ p (big-endian).
fn reduce_once_sm2(x: &mut [u8; 32]) {
    if x.as_slice() < SM2_P.as_slice() {
        return;
    }
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let d = i16::from(x[i]) - i16::from(SM2_P[i]) - borrow;
        borrow = i16::from(d < 0);
        x[i] = (d + 256 * borrow) as u8;
    }
}

fn encode_sm2(p: &sm2::ProjectivePoint, slot: &mut [u8]) {
    use elliptic_curve::group::GroupEncoding;
    slot.copy_from_slice(&p.to_affine().to_bytes());
}

fn random_sm2_scalar() -> Result<sm2::Scalar, CryptoError> {
    use elliptic_curve::ff::PrimeField;
    loop {
        let mut buf = [0u8; 32];
        random_bytes(&mut buf)?;
        let s = Option::<sm2::Scalar>::from(sm2::Scalar::from_repr(sm2::FieldBytes::from(buf)));
        buf.zeroize();
        if let Some(s) = s.filter(|s| !bool::from(s.is_zero())) {
            return Ok(s);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Masking commutes on every group: k_a·(k_b·H(x)) = k_b·(k_a·H(x)), the property the
    /// protocol relies on (the wheel's side is checked end to end by the interop tests).
    #[test]
    fn masking_commutes_and_equal_items_meet_on_every_curve() {
        let items: Vec<Vec<u8>> = (0..300).map(|i| format!("id{i}").into_bytes()).collect();
        for curve in SfCurve::ALL {
            let a = SfCipher::new(curve).unwrap();
            let b = SfCipher::new(curve).unwrap();
            let xa = a.hash_and_mask(&items).unwrap();
            let xb = b.hash_and_mask(&items).unwrap();
            let mut xab = vec![0u8; xa.len()];
            let mut xba = vec![0u8; xb.len()];
            b.remask(&xa, &mut xab).unwrap();
            a.remask(&xb, &mut xba).unwrap();
            assert_eq!(xab, xba, "{curve:?}");
            let len = curve.point_len();
            let tails: std::collections::HashSet<_> = xab.chunks(len).map(compare_tail).collect();
            assert_eq!(
                tails.len(),
                items.len(),
                "{curve:?}: distinct items collide"
            );
        }
    }

    /// SM2's hash is the first SHA-256 iterate whose value (mod p) is an x on the curve, with
    /// even y.
    #[test]
    fn sm2_hash_is_try_and_rehash_with_even_y() {
        use elliptic_curve::group::GroupEncoding;
        for i in 0..50 {
            let item = format!("item{i}");
            let p = sm2_hash(item.as_bytes()).unwrap().to_affine().to_bytes();
            assert_eq!(p[0], 0x02, "even y");
            // x is SHA-256^j(item) mod p for the first j that lands on the curve.
            let mut d: [u8; 32] = Sha256::digest(item.as_bytes()).into();
            loop {
                let mut x = d;
                reduce_once_sm2(&mut x);
                let mut repr = <sm2::AffinePoint as GroupEncoding>::Repr::default();
                repr[0] = 2;
                repr[1..].copy_from_slice(&x);
                if bool::from(sm2::AffinePoint::from_bytes(&repr).is_some()) {
                    assert_eq!(&p[1..], &x);
                    break;
                }
                d = Sha256::digest(d).into();
            }
        }
    }

    #[test]
    fn the_false_match_bound_is_the_documented_one() {
        assert_eq!(false_match_log2(1 << 20, 1 << 20), -56.0);
        assert_eq!(false_match_log2(1 << 30, 1 << 30), -36.0);
    }

    #[test]
    fn reduction_subtracts_p_once() {
        // 2^256 - 1 - p = 2^224 + 2^96 - 2^64 (p = 2^256 - 2^224 - 2^96 + 2^64 - 1).
        let mut x = [0xffu8; 32];
        reduce_once_sm2(&mut x);
        let mut expected = [0u8; 32];
        expected[3] = 0x01;
        expected[20..24].copy_from_slice(&[0xff; 4]);
        assert_eq!(x, expected);
        let mut small = [1u8; 32];
        reduce_once_sm2(&mut small);
        assert_eq!(small, [1u8; 32]);
    }

    #[test]
    fn peer_garbage_is_an_error_not_a_panic() {
        for curve in SfCurve::ALL {
            let a = SfCipher::new(curve).unwrap();
            let len = curve.point_len();
            let bad = vec![0u8; len * 3];
            let mut out = vec![0u8; bad.len()];
            assert!(a.remask(&bad, &mut out).is_err(), "{curve:?}");
            assert!(a.remask(&bad[..len + 1], &mut out[..len + 1]).is_err());
        }
    }
}
