//! Arithmetic in the binary field GF(2^128).
//!
//! # Representation
//!
//! An element is a polynomial over GF(2) of degree < 128, stored in a `u128`:
//! **bit `i` of the `u128` is the coefficient of `x^i`** (so `Gf128(1)` is the
//! multiplicative identity and `Gf128(2)` is `x`). The byte encoding
//! ([`Gf128::from_bytes`] / [`Gf128::to_bytes`]) is the little-endian encoding of
//! that `u128`: bit `j` of byte `k` is the coefficient of `x^(8k + j)`. This is the
//! "natural" (non bit-reflected) convention used by libOTe / RR22's `block`
//! arithmetic, *not* the bit-reflected GHASH convention of AES-GCM.
//!
//! Multiplication is reduction modulo the irreducible polynomial
//! `x^128 + x^7 + x^2 + x + 1`.
//!
//! # Implementations
//!
//! * On `x86_64` a carry-less multiply (`PCLMULQDQ`, Karatsuba with three
//!   `_mm_clmulepi64_si128`) is used when the CPU supports it (detected at run
//!   time with `is_x86_feature_detected!`).
//! * A portable constant-time fallback ([`Gf128::mul_portable`]) is always
//!   compiled: a 128-step shift-and-xor with masks derived from the multiplier's
//!   bits (no secret-dependent branches or table lookups).
//!
//! Both paths share the same branch-free reduction.
#![allow(unsafe_code)]

use core::ops::{Add, AddAssign, Mul, MulAssign, Neg, Sub, SubAssign};

/// An element of GF(2^128) = GF(2)\[x\] / (x^128 + x^7 + x^2 + x + 1).
///
/// Bit `i` of the inner `u128` is the coefficient of `x^i`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Gf128(pub u128);

impl core::fmt::Debug for Gf128 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Gf128({:#034x})", self.0)
    }
}

/// Reduce a 256-bit carry-less product `hi·x^128 + lo` modulo
/// `x^128 + x^7 + x^2 + x + 1`. Branch-free.
#[inline(always)]
const fn reduce(lo: u128, hi: u128) -> u128 {
    // x^128 ≡ x^7 + x^2 + x + 1, so hi·x^128 ≡ hi·(x^7 + x^2 + x + 1), a polynomial of
    // degree < 135. The bits shifted out above x^127 form `c` (degree < 7), which
    // is folded once more; c·(x^7+x^2+x+1) has degree < 14 and cannot overflow.
    let c = (hi >> 127) ^ (hi >> 126) ^ (hi >> 121);
    let folded = hi ^ (hi << 1) ^ (hi << 2) ^ (hi << 7);
    lo ^ folded ^ c ^ (c << 1) ^ (c << 2) ^ (c << 7)
}

/// Portable constant-time 128×128 → 256-bit carry-less multiplication.
/// Returns `(lo, hi)`.
#[inline]
fn clmul_portable(a: u128, b: u128) -> (u128, u128) {
    // Bit 0 of b: only contributes to the low half.
    let mask0 = 0u128.wrapping_sub(b & 1);
    let mut lo = a & mask0;
    let mut hi = 0u128;
    // The loop counter is public; the data-dependent part is only the mask.
    for i in 1..128u32 {
        let mask = 0u128.wrapping_sub((b >> i) & 1);
        lo ^= (a << i) & mask;
        hi ^= (a >> (128 - i)) & mask;
    }
    (lo, hi)
}

#[cfg(target_arch = "x86_64")]
mod clmul_x86 {
    use core::arch::x86_64::{
        __m128i, _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_set_epi64x, _mm_unpackhi_epi64,
    };

    #[inline]
    #[target_feature(enable = "sse2")]
    fn to_m128(x: u128) -> __m128i {
        _mm_set_epi64x((x >> 64) as u64 as i64, x as u64 as i64)
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn from_m128(x: __m128i) -> u128 {
        let lo = _mm_cvtsi128_si64(x) as u64 as u128;
        let hi = _mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x)) as u64 as u128;
        lo | (hi << 64)
    }

    /// 128×128 → 256-bit carry-less product (Karatsuba, three PCLMULQDQ), `(lo, hi)`.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) fn clmul(a: u128, b: u128) -> (u128, u128) {
        let va = to_m128(a);
        let vb = to_m128(b);
        let a_mid = to_m128((a ^ (a >> 64)) & u64::MAX as u128);
        let b_mid = to_m128((b ^ (b >> 64)) & u64::MAX as u128);
        let ll = from_m128(_mm_clmulepi64_si128::<0x00>(va, vb));
        let hh = from_m128(_mm_clmulepi64_si128::<0x11>(va, vb));
        let mid = from_m128(_mm_clmulepi64_si128::<0x00>(a_mid, b_mid)) ^ ll ^ hh;
        (ll ^ (mid << 64), hh ^ (mid >> 64))
    }

    /// Field multiplication using PCLMULQDQ.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) fn mul(a: u128, b: u128) -> u128 {
        let (lo, hi) = clmul(a, b);
        super::reduce(lo, hi)
    }

    /// `Σ a[i]·b[i]`, accumulating unreduced products and reducing once.
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) fn inner_product(a: &[super::Gf128], b: &[super::Gf128]) -> u128 {
        let (mut lo, mut hi) = (0u128, 0u128);
        for (x, y) in a.iter().zip(b) {
            let (l, h) = clmul(x.0, y.0);
            lo ^= l;
            hi ^= h;
        }
        super::reduce(lo, hi)
    }

    /// `acc[i] ^= a[i]·b` for all `i < min(len)`, using PCLMULQDQ.
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) fn mul_add_slices(acc: &mut [super::Gf128], a: &[super::Gf128], b: u128) {
        for (x, y) in acc.iter_mut().zip(a.iter()) {
            x.0 ^= mul(y.0, b);
        }
    }
}

/// `true` if the PCLMULQDQ fast path is usable on this CPU.
#[inline]
pub fn has_clmul() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl Gf128 {
    /// The additive identity.
    pub const ZERO: Gf128 = Gf128(0);
    /// The multiplicative identity.
    pub const ONE: Gf128 = Gf128(1);

    /// Decode from 16 little-endian bytes (bit `j` of byte `k` = coefficient of `x^(8k+j)`).
    #[inline]
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Gf128(u128::from_le_bytes(bytes))
    }

    /// Encode as 16 little-endian bytes (inverse of [`Gf128::from_bytes`]).
    #[inline]
    pub const fn to_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }

    /// `true` iff this is the zero element.
    #[inline]
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Multiplication with the portable constant-time implementation (always available).
    #[inline]
    pub fn mul_portable(self, rhs: Gf128) -> Gf128 {
        let (lo, hi) = clmul_portable(self.0, rhs.0);
        Gf128(reduce(lo, hi))
    }

    /// Multiplication with PCLMULQDQ, or `None` if the CPU (or architecture) lacks it.
    #[inline]
    pub fn mul_clmul(self, rhs: Gf128) -> Option<Gf128> {
        #[cfg(target_arch = "x86_64")]
        {
            if has_clmul() {
                // SAFETY: `clmul_x86::mul` only requires the `pclmulqdq` and `sse2`
                // target features; `pclmulqdq` was detected at run time just above and
                // `sse2` is part of the x86_64 baseline.
                return Some(Gf128(unsafe { clmul_x86::mul(self.0, rhs.0) }));
            }
        }
        let _ = rhs;
        None
    }

    /// `self²`.
    #[inline]
    pub fn square(self) -> Gf128 {
        self * self
    }

    /// `self^e` by square-and-multiply (the exponent is treated as public).
    pub fn pow(self, e: u128) -> Gf128 {
        let mut r = Gf128::ONE;
        for i in (0..128).rev() {
            r = r * r;
            if (e >> i) & 1 == 1 {
                r *= self;
            }
        }
        r
    }

    /// Multiplicative inverse `self^(2^128 − 2)`; returns zero for zero.
    ///
    /// Runs in time independent of `self`.
    pub fn inverse(self) -> Gf128 {
        // 2^128 - 2 = 0xffff...fffe.
        self.pow(u128::MAX - 1)
    }
}

impl From<u128> for Gf128 {
    #[inline]
    fn from(v: u128) -> Self {
        Gf128(v)
    }
}

impl From<[u8; 16]> for Gf128 {
    #[inline]
    fn from(b: [u8; 16]) -> Self {
        Gf128::from_bytes(b)
    }
}

impl From<Gf128> for [u8; 16] {
    #[inline]
    fn from(v: Gf128) -> Self {
        v.to_bytes()
    }
}

impl Add for Gf128 {
    type Output = Gf128;
    #[inline]
    #[allow(clippy::suspicious_arithmetic_impl)]
    fn add(self, rhs: Gf128) -> Gf128 {
        Gf128(self.0 ^ rhs.0)
    }
}

impl AddAssign for Gf128 {
    #[inline]
    #[allow(clippy::suspicious_op_assign_impl)]
    fn add_assign(&mut self, rhs: Gf128) {
        self.0 ^= rhs.0;
    }
}

impl Sub for Gf128 {
    type Output = Gf128;
    #[inline]
    #[allow(clippy::suspicious_arithmetic_impl)]
    fn sub(self, rhs: Gf128) -> Gf128 {
        Gf128(self.0 ^ rhs.0)
    }
}

impl SubAssign for Gf128 {
    #[inline]
    #[allow(clippy::suspicious_op_assign_impl)]
    fn sub_assign(&mut self, rhs: Gf128) {
        self.0 ^= rhs.0;
    }
}

impl Neg for Gf128 {
    type Output = Gf128;
    #[inline]
    fn neg(self) -> Gf128 {
        self
    }
}

impl Mul for Gf128 {
    type Output = Gf128;
    #[inline]
    fn mul(self, rhs: Gf128) -> Gf128 {
        match self.mul_clmul(rhs) {
            Some(p) => p,
            None => self.mul_portable(rhs),
        }
    }
}

impl MulAssign for Gf128 {
    #[inline]
    fn mul_assign(&mut self, rhs: Gf128) {
        *self = *self * rhs;
    }
}

impl core::iter::Sum for Gf128 {
    fn sum<I: Iterator<Item = Gf128>>(iter: I) -> Gf128 {
        iter.fold(Gf128::ZERO, |a, b| a + b)
    }
}

/// `acc[i] += a[i] · b` for every `i` (the VOLE inner loop).
///
/// Processes `min(acc.len(), a.len())` elements; callers should pass equal lengths.
/// Uses PCLMULQDQ when available (feature detection is done once per call).
pub fn mul_add_slices(acc: &mut [Gf128], a: &[Gf128], b: Gf128) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_clmul() {
            // SAFETY: `clmul_x86::mul_add_slices` only requires `pclmulqdq` and `sse2`;
            // `pclmulqdq` was detected at run time just above and `sse2` is baseline on
            // x86_64. The function itself performs only safe slice iteration.
            unsafe { clmul_x86::mul_add_slices(acc, a, b.0) };
            return;
        }
    }
    mul_add_slices_portable(acc, a, b);
}

/// `Σ a[i]·b[i]` over `min(a.len(), b.len())` elements (one reduction at the end). Uses
/// PCLMULQDQ when available.
pub fn inner_product(a: &[Gf128], b: &[Gf128]) -> Gf128 {
    #[cfg(target_arch = "x86_64")]
    {
        if has_clmul() {
            // SAFETY: as in `mul_add_slices`: `pclmulqdq` was detected just above, `sse2` is
            // baseline on x86_64, and the function only iterates safe slices.
            return Gf128(unsafe { clmul_x86::inner_product(a, b) });
        }
    }
    a.iter().zip(b).map(|(x, y)| x.mul_portable(*y)).sum()
}

/// Portable constant-time version of [`mul_add_slices`].
pub fn mul_add_slices_portable(acc: &mut [Gf128], a: &[Gf128], b: Gf128) {
    for (x, y) in acc.iter_mut().zip(a.iter()) {
        *x += y.mul_portable(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_rng::Rng;

    /// Naive reference: schoolbook with reduction one bit at a time (mul by x).
    fn mul_reference(a: Gf128, b: Gf128) -> Gf128 {
        let mut r = 0u128;
        let mut cur = a.0;
        for i in 0..128 {
            if (b.0 >> i) & 1 == 1 {
                r ^= cur;
            }
            let carry = cur >> 127;
            cur <<= 1;
            if carry == 1 {
                cur ^= 0x87;
            }
        }
        Gf128(r)
    }

    fn xpow(i: u32) -> Gf128 {
        Gf128(1u128 << i)
    }

    #[test]
    fn known_products() {
        // x^127 · x = x^128 = x^7 + x^2 + x + 1
        assert_eq!(xpow(127) * xpow(1), Gf128(0x87));
        assert_eq!(xpow(127).mul_portable(xpow(1)), Gf128(0x87));
        // x^127 · x^127 = x^254 = x^126·(x^7+x^2+x+1)
        //   = x^133 + x^128 + x^127 + x^126
        //   = x^5(x^7+x^2+x+1) + (x^7+x^2+x+1) + x^127 + x^126
        //   = x^127 + x^126 + x^12 + x^6 + x^5 + x^2 + x + 1
        let expect = Gf128(
            (1u128 << 127) | (1 << 126) | (1 << 12) | (1 << 6) | (1 << 5) | (1 << 2) | (1 << 1) | 1,
        );
        assert_eq!(xpow(127) * xpow(127), expect);
        assert_eq!(xpow(127).mul_portable(xpow(127)), expect);
        // (x + 1)(x + 1) = x^2 + 1 (no reduction)
        assert_eq!(Gf128(3) * Gf128(3), Gf128(5));
        // x^64 · x^64 = x^128 ≡ 0x87
        assert_eq!(xpow(64) * xpow(64), Gf128(0x87));
        // x^100 · x^35 = x^135 = x^7·x^128 ≡ x^14 + x^9 + x^8 + x^7
        assert_eq!(
            xpow(100) * xpow(35),
            Gf128((1 << 14) | (1 << 9) | (1 << 8) | (1 << 7))
        );
    }

    #[test]
    fn byte_convention() {
        let mut b = [0u8; 16];
        b[0] = 2; // x
        assert_eq!(Gf128::from_bytes(b), Gf128(2));
        b = [0u8; 16];
        b[15] = 0x80; // x^127
        assert_eq!(Gf128::from_bytes(b), xpow(127));
        assert_eq!(xpow(127).to_bytes(), b);
    }

    #[test]
    fn portable_matches_fast_and_reference() {
        println!("pclmulqdq available: {}", has_clmul());
        let mut rng = Rng(1);
        for i in 0..100_000 {
            let a = rng.gf();
            let b = rng.gf();
            let p = a.mul_portable(b);
            if let Some(f) = a.mul_clmul(b) {
                assert_eq!(p, f, "mismatch at {i}: {a:?} * {b:?}");
            }
            assert_eq!(p, a * b);
            if i < 2_000 {
                assert_eq!(p, mul_reference(a, b));
            }
        }
        // Edge patterns.
        for a in [
            0u128,
            1,
            u128::MAX,
            1 << 127,
            (1 << 64) | 1,
            u64::MAX as u128,
        ] {
            for b in [0u128, 1, u128::MAX, 1 << 127, 0x87, u64::MAX as u128] {
                let (a, b) = (Gf128(a), Gf128(b));
                assert_eq!(a.mul_portable(b), mul_reference(a, b));
                assert_eq!(a * b, mul_reference(a, b));
            }
        }
    }

    #[test]
    fn field_axioms() {
        let mut rng = Rng(2);
        for _ in 0..2_000 {
            let (a, b, c) = (rng.gf(), rng.gf(), rng.gf());
            assert_eq!((a * b) * c, a * (b * c));
            assert_eq!(a * b, b * a);
            assert_eq!(a * (b + c), a * b + a * c);
            assert_eq!(a * Gf128::ONE, a);
            assert_eq!(a * Gf128::ZERO, Gf128::ZERO);
            assert_eq!(a + a, Gf128::ZERO);
            assert_eq!(a - b, a + b);
        }
        for _ in 0..200 {
            let a = rng.gf();
            if a.is_zero() {
                continue;
            }
            let inv = a.inverse();
            assert_eq!(a * inv, Gf128::ONE);
            assert_eq!(inv.mul_portable(a), Gf128::ONE);
        }
        assert_eq!(Gf128::ONE.inverse(), Gf128::ONE);
        assert_eq!(Gf128::ZERO.inverse(), Gf128::ZERO);
        // x^-1 = x^127 + x^6 + x + 1 since x·(x^127 + x^6 + x + 1) = x^128 + x^7 + x^2 + x = 1.
        assert_eq!(
            Gf128(2).inverse(),
            Gf128((1 << 127) | (1 << 6) | (1 << 1) | 1)
        );
    }

    #[test]
    fn pow_small() {
        let mut rng = Rng(3);
        let a = rng.gf();
        assert_eq!(a.pow(0), Gf128::ONE);
        assert_eq!(a.pow(1), a);
        assert_eq!(a.pow(3), a * a * a);
        assert_eq!(a.square(), a * a);
        // Frobenius: a^(2^128) = a.
        let mut s = a;
        for _ in 0..128 {
            s = s.square();
        }
        assert_eq!(s, a);
    }

    #[test]
    fn inner_product_matches_the_sum_of_products() {
        let mut rng = Rng(5);
        for n in [0usize, 1, 2, 1000] {
            let a: Vec<Gf128> = (0..n).map(|_| rng.gf()).collect();
            let b: Vec<Gf128> = (0..n).map(|_| rng.gf()).collect();
            let want: Gf128 = a.iter().zip(&b).map(|(x, y)| x.mul_portable(*y)).sum();
            assert_eq!(inner_product(&a, &b), want, "n={n}");
        }
    }

    #[test]
    fn mul_add_slices_matches() {
        let mut rng = Rng(4);
        let a: Vec<Gf128> = (0..1000).map(|_| rng.gf()).collect();
        let acc0: Vec<Gf128> = (0..1000).map(|_| rng.gf()).collect();
        let b = rng.gf();
        let mut acc1 = acc0.clone();
        let mut acc2 = acc0.clone();
        mul_add_slices(&mut acc1, &a, b);
        mul_add_slices_portable(&mut acc2, &a, b);
        for i in 0..1000 {
            let expect = acc0[i] + mul_reference(a[i], b);
            assert_eq!(acc1[i], expect);
            assert_eq!(acc2[i], expect);
        }
        // Length mismatch: processes the common prefix, no panic.
        let mut short = acc0[..10].to_vec();
        mul_add_slices(&mut short, &a, b);
        assert_eq!(short[9], acc0[9] + a[9] * b);
    }
}
