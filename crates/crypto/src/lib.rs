//! # blindjoin-crypto — the bottom layer
//!
//! Curve arithmetic for ECDH-PSI through vetted crates (curve25519-dalek, RustCrypto k256 / p256 /
//! sm2), with RFC 9380 hash-to-curve on every curve, and the item digest every protocol consumes.
//! This crate depends on nothing else in blindjoin. It also holds the non-interactive building
//! blocks of the OT/VOLE protocols: [`gf128`] (GF(2^128) with PCLMULQDQ) and [`okvs`] (a random
//! band OKVS, Bienstock et al., eprint 2023/903), and of KKRT16: [`cuckoo`] (stash-less
//! three-function cuckoo hashing).
//!
//! The central type is [`EcdhCipher`]: a secret scalar `k` bound to a group, which maps private
//! items to `H(x)^k` and re-masks peer points `P ↦ P^k`. Both operations work on whole batches so a
//! backend can amortise field inversions (see [`ristretto`]).
//!
//! ```
//! use blindjoin_crypto::{Curve, new_cipher, item_digest};
//! let a = new_cipher(Curve::Curve25519, None).unwrap();
//! let b = new_cipher(Curve::Curve25519, None).unwrap();
//! let x = [item_digest(b"alice@example.com")];
//! let mut xa = vec![0u8; a.point_len()];
//! a.hash_and_mask(&x, &mut xa).unwrap();
//! let mut xab = vec![0u8; b.point_len()];
//! b.remask(&xa, &mut xab).unwrap();
//! let mut xb = vec![0u8; b.point_len()];
//! b.hash_and_mask(&x, &mut xb).unwrap();
//! let mut xba = vec![0u8; a.point_len()];
//! a.remask(&xb, &mut xba).unwrap();
//! assert_eq!(xab, xba); // (H(x)^a)^b == (H(x)^b)^a
//! ```

pub mod cuckoo;
mod digest;
mod error;
pub mod exacc;
pub mod fourq;
pub mod gf128;
pub mod okvs;
pub mod oprf;
mod oprf_weierstrass;
pub mod ristretto;
pub mod secretflow;
pub mod secretflow_oprf;
mod sha256_ni_lanes;
mod sm2_h2c;
mod weierstrass;
pub mod x25519;
mod x25519_avx2;
mod x25519_ifma;

pub use digest::{ITEM_DIGEST_LANES, ItemDigest, item_digest, item_digests, tag_of};
pub use error::CryptoError;

use std::fmt;
use std::str::FromStr;

/// The curves ECDH-PSI can run on. Names follow SecretFlow's `CurveType` enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Curve {
    /// Curve25519 as X25519 (RFC 7748), hashed to with `edwards25519_XMD:SHA-512_ELL2_RO_`
    /// (RFC 9380 §6.7.1, Elligator 2 twice), u-coordinates on the wire.
    Curve25519,
    /// The prime-order Ristretto255 group (RFC 9496) over Curve25519, hashed to with
    /// `ristretto255_XMD:SHA-512_R255MAP_RO_` (RFC 9496 §4.3.4). Our extension.
    Ristretto255,
    /// secp256k1 with `secp256k1_XMD:SHA-256_SSWU_RO_` (RFC 9380 §8.7).
    Secp256k1,
    /// NIST P-256 with `P256_XMD:SHA-256_SSWU_RO_` (RFC 9380 §8.2).
    P256,
    /// SM2 (GB/T 32918) with Simplified SWU over SHA-256 (RFC 9380 §6.6.2; no official suite).
    Sm2,
    /// FourQ (Costello–Longa 2015) with FourQlib's 32-byte encoding, hashed to with FourQlib's
    /// `HashToCurve` map fed by `expand_message_xmd` (SHA-512), see [`fourq`]. Our own
    /// implementation (no vetted crate exists); every point on the wire is in the order-N
    /// subgroup.
    FourQ,
}

impl Curve {
    /// Every curve, in the order the docs list them.
    pub const ALL: [Curve; 6] = [
        Curve::Curve25519,
        Curve::Ristretto255,
        Curve::Secp256k1,
        Curve::P256,
        Curve::Sm2,
        Curve::FourQ,
    ];

    /// SecretFlow's spelling (`CURVE_25519`, ...), used in configs, the handshake and reports.
    pub fn config_name(self) -> &'static str {
        match self {
            Curve::Curve25519 => "CURVE_25519",
            Curve::Ristretto255 => "CURVE_RISTRETTO255",
            Curve::Secp256k1 => "CURVE_SECP256K1",
            Curve::P256 => "CURVE_P256",
            Curve::Sm2 => "CURVE_SM2",
            Curve::FourQ => "CURVE_FOURQ",
        }
    }

    /// Whether this build can run ECDH-PSI on the curve (all of them since FourQ landed; kept so
    /// callers need not change when a curve is added by name first).
    pub fn is_supported(self) -> bool {
        true
    }
}

impl fmt::Display for Curve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.config_name())
    }
}

impl FromStr for Curve {
    type Err = CryptoError;

    /// Accepts SecretFlow's names (`CURVE_25519`, `CURVE_25519_ELLIGATOR2`, `CURVE_SECP256K1`,
    /// `CURVE_SM2`, `CURVE_FOURQ`), our `CURVE_P256` and `CURVE_RISTRETTO255`, and short forms
    /// (`25519`, `ristretto255`, `secp256k1`, `p256`, `sm2`, `fourq`), case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_uppercase();
        let t = t.strip_prefix("CURVE_").unwrap_or(&t);
        Ok(match t {
            // Our 25519 path *is* an RFC 9380 Elligator 2 hash, so SecretFlow's
            // ELLIGATOR2 variant names the same security level.
            "25519" | "X25519" | "25519_ELLIGATOR2" => Curve::Curve25519,
            "RISTRETTO255" | "RISTRETTO" => Curve::Ristretto255,
            "SECP256K1" => Curve::Secp256k1,
            "P256" | "P-256" | "SECP256R1" | "NISTP256" => Curve::P256,
            "SM2" => Curve::Sm2,
            "FOURQ" => Curve::FourQ,
            _ => return Err(CryptoError::UnknownCurve(s.to_string())),
        })
    }
}

/// A secret ECDH scalar bound to its group. Implementations zeroize the scalar on drop and never
/// print it.
pub trait EcdhCipher: Send + Sync {
    /// The curve this cipher works on.
    fn curve(&self) -> Curve;

    /// Length in bytes of one encoded point on the wire.
    fn point_len(&self) -> usize;

    /// Writes `encode(H(item)^k)` for each item into consecutive `point_len()` slots of `out`.
    ///
    /// # Errors
    /// [`CryptoError::BufferLength`] if `out.len() != items.len() * point_len()`.
    fn hash_and_mask(&self, items: &[ItemDigest], out: &mut [u8]) -> Result<(), CryptoError>;

    /// Decodes each point of `points` (untrusted peer bytes), multiplies it by `k`, and writes the
    /// encodings into `out` (same length as `points`).
    ///
    /// # Errors
    /// [`CryptoError::InvalidPoint`] with the point's index if an encoding is not canonical, not on
    /// the curve, or the identity; [`CryptoError::BufferLength`] on mismatched buffers.
    fn remask(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError>;
}

/// Builds a cipher for `curve` with a fresh random scalar, or with `secret` (the raw 32 bytes of a
/// user-supplied key file: big-endian for the Weierstrass curves, little-endian for Ristretto255,
/// little-endian and below N for FourQ, any 32 bytes for Curve25519, which clamps them as RFC 7748
/// does).
///
/// # Errors
/// [`CryptoError::InvalidSecretKey`] for a key that is not a
/// canonical non-zero scalar; [`CryptoError::Rng`] if the OS RNG fails.
pub fn new_cipher(curve: Curve, secret: Option<&[u8]>) -> Result<Box<dyn EcdhCipher>, CryptoError> {
    Ok(match curve {
        Curve::Curve25519 => Box::new(x25519::X25519Cipher::new(secret)?),
        Curve::Ristretto255 => Box::new(ristretto::RistrettoCipher::new(secret)?),
        Curve::Secp256k1 => Box::new(weierstrass::Secp256k1Cipher::new(secret)?),
        Curve::P256 => Box::new(weierstrass::P256Cipher::new(secret)?),
        Curve::Sm2 => Box::new(weierstrass::Sm2Cipher::new(secret)?),
        Curve::FourQ => Box::new(fourq::FourQCipher::new(secret)?),
    })
}

/// Fills `buf` from the operating system's CSPRNG.
///
/// # Errors
/// [`CryptoError::Rng`] if the OS refuses.
pub fn random_bytes(buf: &mut [u8]) -> Result<(), CryptoError> {
    getrandom::fill(buf).map_err(|e| CryptoError::Rng(e.to_string()))
}

/// RFC 9380 §5.3.1 `expand_message_xmd` with SHA-512 (k = 128): fills `out` (at most 255·64
/// bytes) with uniform bytes for `msg` under `dst`. The hashes to Ristretto255 and FourQ start here.
pub(crate) fn expand_xmd_sha512(msg: &[u8], dst: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
    use hash2curve::{ExpandMsg, ExpandMsgXmd, Expander};
    let len = u16::try_from(out.len())
        .ok()
        .and_then(std::num::NonZero::new)
        .ok_or(CryptoError::HashToCurve(
            "expand_message_xmd output length out of range",
        ))?;
    let (msgs, dsts) = ([msg], [dst]);
    let mut expander =
        <ExpandMsgXmd<sha2::Sha512> as ExpandMsg<elliptic_curve::consts::U16>>::expand_message(
            &msgs, &dsts, len,
        )
        .map_err(|_| CryptoError::HashToCurve("expand_message_xmd rejected its parameters"))?;
    expander
        .fill_bytes(out)
        .map_err(|_| CryptoError::HashToCurve("expand_message_xmd ran short"))?;
    Ok(())
}

pub(crate) fn check_len(what: &'static str, got: usize, want: usize) -> Result<(), CryptoError> {
    if got == want {
        Ok(())
    } else {
        Err(CryptoError::BufferLength { what, got, want })
    }
}

/// `remask` takes whole points and writes as many bytes as it reads.
pub(crate) fn check_remask_buffers(
    points: &[u8],
    out: &[u8],
    point_len: usize,
) -> Result<(), CryptoError> {
    check_len("remask output", out.len(), points.len())?;
    if points.len().is_multiple_of(point_len) {
        Ok(())
    } else {
        Err(CryptoError::BufferLength {
            what: "remask input (not a whole number of points)",
            got: points.len(),
            want: points.len() / point_len * point_len,
        })
    }
}

#[cfg(test)]
mod test_rng;
#[cfg(test)]
mod tests;
