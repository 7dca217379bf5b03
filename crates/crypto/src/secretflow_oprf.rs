//! SecretFlow's FourQ OPRF, as its unbalanced ECDH-OPRF PSI (`ub_psi_config`, psi
//! `psi/algorithm/ecdh/ub_psi/basic_ecdh_oprf.cc`@242a8fa) computes it, for a party that runs
//! that protocol against an unmodified SecretFlow peer.
//!
//! F_k(x) = BLAKE3(encode(k·P(x)))[0..12], where P(x) is FourQlib's `HashToCurve` of
//! BLAKE3(x) (bytes 0..16 and 16..32, each read little-endian and reduced modulo 2^127 − 1) and
//! k is the server's raw 32-byte key read little-endian (any 256-bit value; SecretFlow does not
//! reduce it, and since P(x) is in the order-N subgroup only k mod N matters).
//!
//! The client blinds every item with one random r, `encode(r·P(x))`; the server returns
//! `encode(k·B)` for each blinded point B; the client multiplies by r⁻¹ mod N and hashes.
//!
//! **Weaker than our own OPRF** ([`crate::oprf`]): P is a single FourQlib map call (an encoding,
//! not a random oracle), the output is 96 bits, and one r blinds all of a client's items. Used
//! only because the peer does.
//!
//! Peer points: every point from the peer is decoded strictly, its cofactor cleared and the
//! identity (or a small-order point) refused ([`crate::fourq::mul_encoded`]); on honest
//! (subgroup) points this equals SecretFlow's plain `ecc_mul`, and on hostile ones it leaks
//! nothing about the key modulo the cofactor.

use crate::fourq::{self, Scalar};
use crate::{CryptoError, random_bytes};
use rayon::prelude::*;
use zeroize::Zeroize;

/// Encoded FourQ point length.
pub const POINT_LEN: usize = fourq::POINT_LEN;
/// Bytes of an OPRF value SecretFlow keeps and sends (`kEccKeySize`-truncated, "itemLen 12").
pub const OPRF_LEN: usize = 12;
/// Length of a server key file (`server_secret_key_path`).
pub const KEY_LEN: usize = 32;

/// One OPRF value.
pub type OprfValue = [u8; OPRF_LEN];

/// Items per parallel work unit.
const CHUNK: usize = 256;

/// `encode(P(x))`: FourQlib's `HashToCurve` of BLAKE3(x).
pub fn hash_to_point_encoded(item: &[u8]) -> [u8; POINT_LEN] {
    let h: [u8; 32] = *blake3::hash(item).as_bytes();
    fourq::fourqlib_hash_of_digest(&h)
}

/// BLAKE3 of an encoded point, truncated to [`OPRF_LEN`]: the last step of F_k.
fn finish(point: &[u8]) -> OprfValue {
    let h = blake3::hash(point);
    let mut v = [0u8; OPRF_LEN];
    v.copy_from_slice(&h.as_bytes()[..OPRF_LEN]);
    v
}

/// Hashes `items` to points and multiplies them all by `s` (writes `encode(s·P(x))`).
fn hash_and_mul<T: AsRef<[u8]> + Sync>(s: &Scalar, items: &[T]) -> Result<Vec<u8>, CryptoError> {
    let mut out = vec![0u8; items.len() * POINT_LEN];
    items
        .par_chunks(CHUNK)
        .zip(out.par_chunks_mut(CHUNK * POINT_LEN))
        .try_for_each(|(chunk, slots)| {
            let mut hashed = Vec::with_capacity(chunk.len() * POINT_LEN);
            for item in chunk {
                hashed.extend_from_slice(&hash_to_point_encoded(item.as_ref()));
            }
            fourq::mul_encoded(s, &hashed, slots)
        })?;
    Ok(out)
}

/// `encode(s·B)` for each point B of a peer's batch `points`, refusing a partial point at the
/// end and every point [`fourq::mul_encoded`] refuses.
fn mul_peer_points(s: &Scalar, points: &[u8]) -> Result<Vec<u8>, CryptoError> {
    if !points.len().is_multiple_of(POINT_LEN) {
        return Err(CryptoError::InvalidPoint {
            index: points.len() / POINT_LEN,
            reason: "a partial point at the end of the batch",
        });
    }
    let mut out = vec![0u8; points.len()];
    fourq::mul_encoded(s, points, &mut out)?;
    Ok(out)
}

/// The server's key k.
pub struct OprfKey {
    raw: [u8; KEY_LEN],
    k: Scalar,
}

impl Drop for OprfKey {
    fn drop(&mut self) {
        self.raw.zeroize();
        self.k.zeroize();
    }
}

impl OprfKey {
    /// The key from the raw bytes of a key file: exactly 32 bytes, read little-endian, any
    /// value whose residue modulo N is not zero (SecretFlow does not reduce or check it).
    ///
    /// # Errors
    /// [`CryptoError::InvalidSecretKey`] for a wrong length or a key ≡ 0 (mod N).
    pub fn from_bytes(raw: &[u8]) -> Result<Self, CryptoError> {
        let raw: [u8; KEY_LEN] = raw.try_into().map_err(|_| {
            CryptoError::InvalidSecretKey(
                "a SecretFlow unbalanced-PSI key must be exactly 32 bytes",
            )
        })?;
        let k = Scalar::from_bytes_reduced(&raw);
        if bool::from(k.is_zero()) {
            return Err(CryptoError::InvalidSecretKey(
                "the key is a multiple of the FourQ group order N",
            ));
        }
        Ok(Self { raw, k })
    }

    /// A fresh key of 32 random bytes (as SecretFlow draws one when no key file is given).
    ///
    /// # Errors
    /// [`CryptoError::Rng`] if the OS RNG fails.
    pub fn random() -> Result<Self, CryptoError> {
        loop {
            let mut raw = [0u8; KEY_LEN];
            random_bytes(&mut raw)?;
            let key = Self::from_bytes(&raw);
            raw.zeroize();
            if let Ok(key) = key {
                return Ok(key);
            }
        }
    }

    /// The raw 32 bytes (for the server's cache meta, as SecretFlow stores them).
    pub fn raw_bytes(&self) -> &[u8; KEY_LEN] {
        &self.raw
    }

    /// F_k(x) for each item, computed directly (the server's cache).
    ///
    /// # Errors
    /// Only on an internal buffer mismatch, which cannot happen.
    pub fn evaluate<T: AsRef<[u8]> + Sync>(
        &self,
        items: &[T],
    ) -> Result<Vec<OprfValue>, CryptoError> {
        let points = hash_and_mul(&self.k, items)?;
        Ok(points.par_chunks(POINT_LEN).map(finish).collect())
    }

    /// `encode(k·B)` for each 32-byte blinded point B in `blinded` (the server's online step).
    ///
    /// # Errors
    /// [`CryptoError::InvalidPoint`] with the index of the first point that is not a canonical
    /// encoding of a curve point, or is the identity or of small order, or is a partial point
    /// at the end of `blinded`.
    pub fn evaluate_blinded(&self, blinded: &[u8]) -> Result<Vec<u8>, CryptoError> {
        mul_peer_points(&self.k, blinded)
    }
}

/// The client's blinding factor r (one for all its items, as SecretFlow's client uses).
pub struct Blinder {
    r: Scalar,
    r_inv: Scalar,
}

impl Drop for Blinder {
    fn drop(&mut self) {
        self.r.zeroize();
        self.r_inv.zeroize();
    }
}

impl Blinder {
    /// A fresh random non-zero r.
    ///
    /// # Errors
    /// [`CryptoError::Rng`] if the OS RNG fails.
    pub fn random() -> Result<Self, CryptoError> {
        let r = Scalar::random()?;
        Ok(Self {
            r,
            r_inv: r.invert(),
        })
    }

    /// `encode(r·P(x))` for each item, concatenated (32 bytes each).
    ///
    /// # Errors
    /// Only on an internal buffer mismatch, which cannot happen.
    pub fn blind<T: AsRef<[u8]> + Sync>(&self, items: &[T]) -> Result<Vec<u8>, CryptoError> {
        hash_and_mul(&self.r, items)
    }

    /// F_k(x) from the server's `encode(k·r·P(x))` values: multiply by r⁻¹, hash, truncate.
    ///
    /// # Errors
    /// [`CryptoError::InvalidPoint`] for a peer point that is not canonical, off the curve, the
    /// identity or of small order, or a partial point.
    pub fn finalize(&self, evaluated: &[u8]) -> Result<Vec<OprfValue>, CryptoError> {
        let out = mul_peer_points(&self.r_inv, evaluated)?;
        Ok(out.par_chunks(POINT_LEN).map(finish).collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("item-{i}")).collect()
    }

    fn test_key() -> OprfKey {
        let raw: Vec<u8> = (1u8..=32).collect();
        OprfKey::from_bytes(&raw).unwrap()
    }

    #[test]
    fn blind_evaluate_unblind_equals_direct_evaluation() {
        let key = test_key();
        let xs = items(300);
        let direct = key.evaluate(&xs).unwrap();
        let b = Blinder::random().unwrap();
        let blinded = b.blind(&xs).unwrap();
        let evaluated = key.evaluate_blinded(&blinded).unwrap();
        assert_eq!(b.finalize(&evaluated).unwrap(), direct);
        // Blinding hides the item: the blinded point is not the evaluation's input point.
        assert_ne!(&blinded[..POINT_LEN], &hash_to_point_encoded(b"item-0")[..]);
    }

    #[test]
    fn different_keys_give_different_values() {
        let xs = items(4);
        let a = test_key().evaluate(&xs).unwrap();
        let b = OprfKey::random().unwrap().evaluate(&xs).unwrap();
        assert_ne!(a, b);
        // Distinct items give distinct values.
        assert_ne!(a[0], a[1]);
    }

    #[test]
    fn unreduced_keys_act_modulo_n() {
        // k and k + N give the same function (SecretFlow does not reduce the raw key).
        let n: [u8; 32] = {
            // N = 0x0029CBC14E5E0A72F05397829CBC14E5DFBD004DFE0F79992FB2540EC7768CE7
            let hex = "0029CBC14E5E0A72F05397829CBC14E5DFBD004DFE0F79992FB2540EC7768CE7";
            let mut be = [0u8; 32];
            for (i, b) in be.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
            }
            be.reverse();
            be
        };
        assert!(OprfKey::from_bytes(&n).is_err(), "k = N is zero mod N");
        let mut k_plus_n = n;
        k_plus_n[0] = k_plus_n[0].wrapping_add(5);
        assert!(n[0] <= 0xff - 5);
        let mut five = [0u8; 32];
        five[0] = 5;
        let xs = items(3);
        assert_eq!(
            OprfKey::from_bytes(&k_plus_n)
                .unwrap()
                .evaluate(&xs)
                .unwrap(),
            OprfKey::from_bytes(&five).unwrap().evaluate(&xs).unwrap()
        );
        assert!(OprfKey::from_bytes(&[0u8; 32]).is_err());
        assert!(OprfKey::from_bytes(&[1u8; 31]).is_err());
    }

    #[test]
    fn hostile_points_are_refused() {
        let key = test_key();
        let b = Blinder::random().unwrap();
        let good = b.blind(&items(2)).unwrap();
        // The identity: x = 0, y = 1.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        // A non-canonical encoding: byte 15's top bit set.
        let mut high = [0u8; 32];
        high.copy_from_slice(&good[..32]);
        high[15] |= 0x80;
        // Not on the curve (or a non-canonical field element): all 0xff.
        let junk = [0xffu8; 32];
        for bad in [&identity[..], &high[..], &junk[..]] {
            let mut batch = good.clone();
            batch.extend_from_slice(bad);
            match key.evaluate_blinded(&batch) {
                Err(CryptoError::InvalidPoint { index, .. }) => assert_eq!(index, 2),
                other => panic!("expected InvalidPoint, got {:?}", other.map(|_| ())),
            }
            match b.finalize(&batch) {
                Err(CryptoError::InvalidPoint { index, .. }) => assert_eq!(index, 2),
                other => panic!("expected InvalidPoint, got {:?}", other.map(|_| ())),
            }
        }
        assert!(key.evaluate_blinded(&good[..33]).is_err());
        assert!(b.finalize(&good[..31]).is_err());
        assert!(key.evaluate_blinded(&[]).unwrap().is_empty());
    }

    /// The 50 values an unmodified SecretFlow server (spu 0.9.5, `MODE_OFFLINE_GEN_CACHE`)
    /// stored in `ub_psi_cache.bin` (bytes 12..24 of each 44-byte record) for the items `u0` ..
    /// `u49` with the key file of bytes 0x01..0x20, sorted: ours must be the same set.
    const WHEEL_CACHE_U0_U49: [&str; 50] = [
        "08d1128d0da6fb75723574d7",
        "0f5aac2d5a08d082365ed48b",
        "1805d41280a525a10b261895",
        "1830001dad8481a15af18197",
        "2f00cd90af08002faac76841",
        "357f37cf31c45c4552445805",
        "36472b4810eda3be54251377",
        "460bdc82f6b47c62de19f661",
        "466bb08a51721e805e462e57",
        "47f4b88474b66c75adf1ef27",
        "587e73350ff0e7e2ac267a72",
        "6006f9e4d5ae3a007eb63168",
        "6805ba666014f5012f2ec89d",
        "687fa4d5b74955330420d86b",
        "6ad561bbb3f485db04df3d4d",
        "6ae9f4a413f7f88b2d6b8525",
        "6d8c3f1083ef6ec4aa81160e",
        "6f178ea841e78fca6f32eec2",
        "75ca1b388e1e2f93231b4d70",
        "7cd054e510f6791e79491f20",
        "8272c108911ddb7765d8cc4e",
        "82be475c2000a3fd1e91c0ec",
        "86a369f021481d27919d5087",
        "89e72f2fe5726fef7ece602f",
        "8a771f6eae4c44b1cfd977ab",
        "8b8a89af2188990625a57d3b",
        "8ddfb269ba8678492eada7aa",
        "907e2c1eb4094acb31d9f868",
        "91932c7301b6ac2b6ee2f435",
        "94a9e1fadc985e803a4246a5",
        "94e486f5c5e20ecca1bd5ce7",
        "a0253f9b880759b8bd3d576a",
        "a07e228133c5ab05ad1c66af",
        "a7c179971e1ea123810787ed",
        "acaeaf64be75db8d7f9a315b",
        "ae1fa28948d7a2df01381d6e",
        "b7a1a981f192f704067eaae0",
        "c0e7f3da2141aaf7d2664d1a",
        "c729b5157c5cb585d2576eda",
        "c973f7fea2bb2240d859feac",
        "cc175a691f6d217fc12afdc4",
        "d46680ece8da3fea70673269",
        "d4d7a4e503c53ad237879bb5",
        "d860769b60ca23f8e9b44e9d",
        "df73d5be135bb218d4ec4cf9",
        "e2a5bfbd12254beeeee7ea11",
        "e6745d18402c9cf1bd896776",
        "ecbc22d65a6b0c86fa63c3a9",
        "f77a75f2bf0d601e8ae66522",
        "fc543286e8fc3a0e7e6346ef",
    ];

    #[test]
    fn our_values_are_the_wheels_cache() {
        let xs: Vec<String> = (0..50).map(|i| format!("u{i}")).collect();
        let mut ours: Vec<String> = test_key()
            .evaluate(&xs)
            .unwrap()
            .iter()
            .map(|v| v.iter().map(|b| format!("{b:02x}")).collect())
            .collect();
        ours.sort();
        assert_eq!(ours, WHEEL_CACHE_U0_U49);
    }
}
