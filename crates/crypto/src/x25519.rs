//! Curve25519 as X25519 (RFC 7748) with an RFC 9380 hash: `edwards25519_XMD:SHA-512_ELL2_RO_`
//! (two Elligator 2 maps, added, cofactor cleared), taken to its Montgomery u-coordinate. Points
//! travel as 32-byte canonical u-coordinates. Scalars are clamped (a multiple of 8), so a peer's
//! twist or low-order point cannot reveal bits of our key; a low-order input, whose product is
//! the all-zero u, is rejected as RFC 7748 §6.1 advises. Masking commutes:
//! `u([a]·[b]·P) = u([b]·[a]·P)`.
//!
//! Unlike SecretFlow's `CURVE_25519`, which uses SHA-256(item) as the u-coordinate directly (so
//! about half of all items land on the twist and the twist bit of each hash leaks), every hashed
//! item here is a uniformly distributed point of the prime-order subgroup.
//!
//! Backends ([`Backend`], chosen at run time by CPU detection): an 8-lane AVX-512 IFMA kernel
//! (module `x25519_ifma`, ladder and hash), else a 4-lane AVX2 ladder (module `x25519_avx2`), else
//! curve25519-dalek's serial code. All give identical bytes; tests check each one the CPU runs.

use crate::{
    CryptoError, Curve, EcdhCipher, ItemDigest, check_len, check_remask_buffers, random_bytes,
};
use curve25519_dalek::{edwards::EdwardsPoint, montgomery::MontgomeryPoint};
use sha2::Sha512;
use zeroize::Zeroize;

/// Encoded point length (a u-coordinate).
pub const POINT_LEN: usize = 32;

/// Domain separation tag of our hash-to-curve suite (RFC 9380 §3.1).
pub const DST: &[u8] = b"BLINDJOIN-V01-CS01-with-edwards25519_XMD:SHA-512_ELL2_RO_";

/// 2^255 - 19, little-endian, to check encodings are canonical.
const P_LE: [u8; 32] = {
    let mut p = [0xffu8; 32];
    p[0] = 0xed;
    p[31] = 0x7f;
    p
};

/// Whether `u` (little-endian) is below p, with the top bit clear.
fn is_canonical(u: &[u8; 32]) -> bool {
    for i in (0..32).rev() {
        if u[i] != P_LE[i] {
            return u[i] < P_LE[i];
        }
    }
    false
}

/// Serial reference: the u-coordinate of the RFC 9380 hash of each message (curve25519-dalek).
pub(crate) fn hash_to_montgomery_serial(dst: &[u8], msgs: &[ItemDigest], out: &mut [[u8; 32]]) {
    for (mc, oc) in msgs.chunks(256).zip(out.chunks_mut(256)) {
        let points: Vec<EdwardsPoint> = mc
            .iter()
            .map(|m| EdwardsPoint::hash_to_curve::<Sha512>(&[m.as_slice()], &[dst]))
            .collect();
        for (o, m) in oc
            .iter_mut()
            .zip(EdwardsPoint::to_montgomery_batch(&points))
        {
            *o = m.0;
        }
    }
}

/// Serial reference: X25519(k, u) for each u (curve25519-dalek's ladder).
pub(crate) fn x25519_serial(k: &[u8; 32], us: &[[u8; 32]], out: &mut [[u8; 32]]) {
    for (o, u) in out.iter_mut().zip(us) {
        *o = MontgomeryPoint(*u).mul_clamped(*k).0;
    }
}

/// The X25519 implementations this build carries; [`backend`] picks one per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// 8 lanes, AVX-512 IFMA (`vpmadd52luq`), radix 2^51: ladder and hash to curve.
    Ifma8,
    /// 4 lanes, AVX2 (`vpmuludq`), radix 2^25.5: ladder; the hash to curve is serial.
    Avx2x4,
    /// curve25519-dalek's serial code: any CPU.
    Serial,
}

impl Backend {
    /// Name used in reports, benchmarks and `BLINDJOIN_X25519_BACKEND`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ifma8 => "avx512ifma-8way",
            Backend::Avx2x4 => "avx2-4way",
            Backend::Serial => "serial",
        }
    }

    /// Whether this CPU can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Ifma8 => crate::x25519_ifma::available(),
            Backend::Avx2x4 => crate::x25519_avx2::available(),
            Backend::Serial => true,
        }
    }

    /// `out[i] = X25519(k, us[i])` with this backend (the serial one if the CPU lacks it).
    pub fn x25519(self, k: &[u8; 32], us: &[[u8; 32]], out: &mut [[u8; 32]]) {
        match self {
            Backend::Ifma8 => crate::x25519_ifma::x25519_batch(k, us, out),
            Backend::Avx2x4 => crate::x25519_avx2::x25519_batch(k, us, out),
            Backend::Serial => x25519_serial(k, us, out),
        }
    }

    /// The u-coordinates of the RFC 9380 hashes of `msgs` with this backend.
    fn hash_to_montgomery(self, dst: &[u8], msgs: &[ItemDigest], out: &mut [[u8; 32]]) {
        match self {
            Backend::Ifma8 => crate::x25519_ifma::hash_to_montgomery_batch(dst, msgs, out),
            Backend::Avx2x4 | Backend::Serial => hash_to_montgomery_serial(dst, msgs, out),
        }
    }
}

/// The fastest backend this CPU runs (detected once per process). `BLINDJOIN_X25519_BACKEND` =
/// `avx512ifma-8way` / `avx2-4way` / `serial` asks for a slower one (benchmarks, and checking the
/// fallbacks on a fast machine); a backend the CPU lacks is never chosen. All give identical bytes.
pub fn backend() -> Backend {
    static CHOSEN: std::sync::OnceLock<Backend> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let best = [Backend::Ifma8, Backend::Avx2x4, Backend::Serial]
            .into_iter()
            .find(|b| b.is_available())
            .unwrap_or(Backend::Serial);
        let wanted = std::env::var("BLINDJOIN_X25519_BACKEND").ok();
        [Backend::Ifma8, Backend::Avx2x4, Backend::Serial]
            .into_iter()
            .find(|b| wanted.as_deref() == Some(b.name()) && b.is_available())
            .unwrap_or(best)
    })
}

fn hash_to_montgomery(dst: &[u8], msgs: &[ItemDigest], out: &mut [[u8; 32]]) {
    backend().hash_to_montgomery(dst, msgs, out);
}

fn x25519(k: &[u8; 32], us: &[[u8; 32]], out: &mut [[u8; 32]]) {
    backend().x25519(k, us, out);
}

/// Which X25519 backend this process uses (for reports and benchmarks).
pub fn backend_name() -> &'static str {
    backend().name()
}

/// An X25519 key: 32 secret bytes, clamped at use; zeroized on drop.
pub struct X25519Cipher {
    key: [u8; 32],
}

impl X25519Cipher {
    /// A fresh random key, or the 32 bytes in `secret` (clamped as RFC 7748 says).
    ///
    /// # Errors
    /// A secret of the wrong length, or an RNG failure.
    pub fn new(secret: Option<&[u8]>) -> Result<Self, CryptoError> {
        let mut key = [0u8; 32];
        match secret {
            Some(bytes) => {
                if bytes.len() != 32 {
                    return Err(CryptoError::InvalidSecretKey(
                        "a CURVE_25519 key file must hold exactly 32 bytes",
                    ));
                }
                key.copy_from_slice(bytes);
            }
            None => random_bytes(&mut key)?,
        }
        Ok(Self { key })
    }
}

impl Drop for X25519Cipher {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

impl std::fmt::Debug for X25519Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X25519Cipher").finish_non_exhaustive()
    }
}

fn as_points(bytes: &[u8]) -> Vec<[u8; 32]> {
    bytes
        .chunks_exact(POINT_LEN)
        .map(|c| {
            let mut a = [0u8; 32];
            a.copy_from_slice(c);
            a
        })
        .collect()
}

fn write_points(points: &[[u8; 32]], out: &mut [u8]) {
    for (slot, p) in out.chunks_exact_mut(POINT_LEN).zip(points) {
        slot.copy_from_slice(p);
    }
}

impl EcdhCipher for X25519Cipher {
    fn curve(&self) -> Curve {
        Curve::Curve25519
    }

    fn point_len(&self) -> usize {
        POINT_LEN
    }

    fn hash_and_mask(&self, items: &[ItemDigest], out: &mut [u8]) -> Result<(), CryptoError> {
        check_len("hash_and_mask output", out.len(), items.len() * POINT_LEN)?;
        let mut hashed = vec![[0u8; 32]; items.len()];
        hash_to_montgomery(DST, items, &mut hashed);
        let mut masked = vec![[0u8; 32]; items.len()];
        x25519(&self.key, &hashed, &mut masked);
        write_points(&masked, out);
        Ok(())
    }

    fn remask(&self, points: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
        check_remask_buffers(points, out, POINT_LEN)?;
        let us = as_points(points);
        if let Some(index) = us.iter().position(|u| !is_canonical(u)) {
            return Err(CryptoError::InvalidPoint {
                index,
                reason: "not a canonical u-coordinate (must be below 2^255 - 19)",
            });
        }
        let mut masked = vec![[0u8; 32]; us.len()];
        x25519(&self.key, &us, &mut masked);
        if let Some(index) = masked.iter().position(|m| m == &[0u8; 32]) {
            return Err(CryptoError::InvalidPoint {
                index,
                reason: "a low-order point",
            });
        }
        write_points(&masked, out);
        Ok(())
    }
}
