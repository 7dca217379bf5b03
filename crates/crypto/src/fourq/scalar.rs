//! Integers modulo the subgroup order N (246 bits, paper §2), on four 64-bit limbs with
//! Montgomery multiplication (R = 2^256). Scalars are secret: reduction, multiplication and
//! inversion run the same instructions whatever the values (inversion is an exponentiation by the
//! public exponent N − 2).

use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};
use zeroize::Zeroize;

/// N, little-endian limbs.
pub(crate) const N: [u64; 4] = [
    0x2fb2540ec7768ce7,
    0xdfbd004dfe0f7999,
    0xf05397829cbc14e5,
    0x0029cbc14e5e0a72,
];
/// R² mod N = 2^512 mod N, to enter the Montgomery domain.
const R2: [u64; 4] = [
    0xc81db8795ff3d621,
    0x173ea5aaea6b387d,
    0x3d01b7c72136f61c,
    0x0006a5f16ac8f9d3,
];
/// −N⁻¹ mod 2^64.
const N_PRIME: u64 = 0xe12fe5f079bc3929;
const ONE: [u64; 4] = [1, 0, 0, 0];

/// An integer modulo N, always canonical (below N). Zeroized on drop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scalar(pub(crate) [u64; 4]);

impl Zeroize for Scalar {
    fn zeroize(&mut self) {
        self.0.zeroize();
    }
}

/// a − b and the final borrow (0 or 1).
fn sub_borrow(a: &[u64; 4], b: &[u64; 4]) -> ([u64; 4], u64) {
    let mut r = [0u64; 4];
    let mut borrow = 0u64;
    for i in 0..4 {
        let (d, b1) = a[i].overflowing_sub(b[i]);
        let (d, b2) = d.overflowing_sub(borrow);
        r[i] = d;
        borrow = (b1 | b2) as u64;
    }
    (r, borrow)
}

/// a + b (no overflow for our operands, which are below 2^255).
pub(crate) fn add_limbs(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
    let mut r = [0u64; 4];
    let mut carry = 0u64;
    for i in 0..4 {
        let s = a[i] as u128 + b[i] as u128 + carry as u128;
        r[i] = s as u64;
        carry = (s >> 64) as u64;
    }
    r
}

/// `a − N` if `a ≥ N` (given `hi:a < 2N`), in constant time.
fn sub_n_if_ge(a: &[u64; 4], hi: u64) -> [u64; 4] {
    let (d, borrow) = sub_borrow(a, &N);
    // Keep a only when the subtraction borrowed and there is no high word to absorb it.
    let keep = Choice::from((borrow & !hi & 1) as u8);
    let mut r = [0u64; 4];
    for i in 0..4 {
        r[i] = u64::conditional_select(&d[i], &a[i], keep);
    }
    r
}

/// a·b·R⁻¹ mod N (CIOS Montgomery multiplication); valid for a < 2^256, b < N.
fn mont_mul(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
    let mut t = [0u64; 6];
    for &bi in b {
        let mut c = 0u128;
        for j in 0..4 {
            let s = t[j] as u128 + a[j] as u128 * bi as u128 + c;
            t[j] = s as u64;
            c = s >> 64;
        }
        let s = t[4] as u128 + c;
        t[4] = s as u64;
        t[5] = (s >> 64) as u64;
        let m = t[0].wrapping_mul(N_PRIME);
        let mut c = (t[0] as u128 + m as u128 * N[0] as u128) >> 64;
        for j in 1..4 {
            let s = t[j] as u128 + m as u128 * N[j] as u128 + c;
            t[j - 1] = s as u64;
            c = s >> 64;
        }
        let s = t[4] as u128 + c;
        t[3] = s as u64;
        t[4] = t[5] + (s >> 64) as u64;
    }
    sub_n_if_ge(&[t[0], t[1], t[2], t[3]], t[4])
}

fn limbs_from_le(b: &[u8]) -> [u64; 4] {
    let mut r = [0u64; 4];
    for (i, chunk) in b.chunks_exact(8).take(4).enumerate() {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        r[i] = u64::from_le_bytes(w);
    }
    r
}

impl Scalar {
    /// Zero.
    pub const ZERO: Scalar = Scalar([0; 4]);
    /// One.
    pub const ONE: Scalar = Scalar(ONE);

    /// Parses 32 little-endian bytes; `None` unless the value is below N.
    pub fn from_canonical_bytes(bytes: &[u8; 32]) -> Option<Scalar> {
        let v = limbs_from_le(bytes);
        let (_, borrow) = sub_borrow(&v, &N);
        (borrow == 1).then_some(Scalar(v))
    }

    /// Any 256-bit little-endian integer, reduced modulo N (FourQlib's scalar convention).
    pub fn from_bytes_reduced(bytes: &[u8; 32]) -> Scalar {
        let v = limbs_from_le(bytes);
        Scalar(mont_mul(&mont_mul(&v, &R2), &ONE))
    }

    /// A 512-bit little-endian integer reduced modulo N (bias below 2^-266): for random keys.
    pub fn from_bytes_wide(bytes: &[u8; 64]) -> Scalar {
        let lo = Scalar::from_bytes_reduced(&{
            let mut b = [0u8; 32];
            b.copy_from_slice(&bytes[..32]);
            b
        });
        let hi = limbs_from_le(&bytes[32..]);
        // hi·2^256 mod N = mont_mul(hi, R²).
        let hi_r = Scalar(mont_mul(&hi, &R2));
        lo.add(&hi_r)
    }

    /// 32 little-endian bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, w) in self.0.iter().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// a + b mod N.
    pub fn add(&self, o: &Scalar) -> Scalar {
        Scalar(sub_n_if_ge(&add_limbs(&self.0, &o.0), 0))
    }

    /// a · b mod N.
    pub fn mul(&self, o: &Scalar) -> Scalar {
        Scalar(mont_mul(&mont_mul(&self.0, &o.0), &R2))
    }

    /// 1/a mod N (Fermat: a^(N − 2)); 0 for 0. The exponent is public, so its bits may steer the
    /// square-and-multiply loop.
    pub fn invert(&self) -> Scalar {
        let (e, _) = sub_borrow(&N, &[2, 0, 0, 0]);
        let base = mont_mul(&self.0, &R2);
        let mut acc = mont_mul(&ONE, &R2);
        for i in (0..256).rev() {
            acc = mont_mul(&acc, &acc);
            if (e[i / 64] >> (i % 64)) & 1 == 1 {
                acc = mont_mul(&acc, &base);
            }
        }
        Scalar(mont_mul(&acc, &ONE))
    }

    /// Whether the scalar is zero.
    pub fn is_zero(&self) -> Choice {
        self.0.ct_eq(&[0u64; 4])
    }
}
