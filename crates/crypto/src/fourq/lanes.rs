//! Eight FourQ scalar multiplications at once with AVX-512 IFMA (all by the same scalar, as in
//! ECDH-PSI and the OPRF, where one key multiplies a whole batch).
//!
//! # Representation
//!
//! An element of GF(p), p = 2^127 − 1, is held in radix 2^43 as three 64-bit limbs
//! `l0 + l1·2^43 + l2·2^86`, a value below 2^130 that is only congruent to the element. Since
//! 2^129 = 4·2^127 ≡ 4 (mod p), the limb above the top one folds back with a factor 4. Eight
//! elements are limb-sliced into three `__m512i` (register `i` holds limb `i` of every lane);
//! [`Fp2x8`] pairs two of them for GF(p²). After a carry round a limb is below 2^43 + 1.
//!
//! # Multiplication
//!
//! `vpmadd52luq` / `vpmadd52huq` give bits 0..51 and 52..103 of a 52 × 52-bit product. The nine
//! partial products `a_i·b_j` of a product are placed at column `i + j`; columns 3 and 4
//! (weights 2^129 and 2^172) are folded into columns 0 and 1 by multiplying `b_j` by 4 beforehand
//! (4·b_j < 2^52), so every product is computed once. A high half lands 2^52 = 2^9·2^43 above its
//! column, i.e. at the next column shifted left by 9, and the high halves of column 2 land at
//! column 3 ≡ 4·column 0, shifted left by 11. Column sums stay below 2^56; one carry round
//! (with `4·(l2 >> 43)` folded into limb 0) makes the result loose again. GF(p²) products use
//! Karatsuba (three GF(p) products), squares `(a + b)(a − b) + 2ab·i` (two).
//!
//! # Bounds
//!
//! A multiplier input may be a sum of up to eight loose values (< 2^46 per limb, and 4·b_j < 2^52
//! for the factor-4 trick). Additions do not carry. A subtraction adds the limb-wise bias
//! `B = 8·(2^129 − 4) = 32·p ≡ 0` (limbs 2^46 − 32, 2^46 − 8, 2^46 − 8, each above any subtrahend
//! the formulas produce) and then carries, as does negation `B − a`.
//!
//! # Constant time, selection and SAFETY
//!
//! The scalar is decomposed and recoded once per batch with the constant-time code of `mul`; the
//! table scan reads all eight entries and selects with an all-ones or all-zero mask derived
//! arithmetically from the (secret) digit, and the sign is applied with masks, exactly as the
//! serial path does. The kernel is compiled with `#[target_feature(enable = "avx512f,avx512ifma")]`
//! and only entered after `is_x86_feature_detected!` confirmed both (see [`available`]). The field
//! helpers are `#[inline(always)]` functions *without* target features (so that, through the `Fq2`
//! trait methods, which cannot declare features, they are flattened into `mul8` and their
//! intrinsics inlined there) and wrap their intrinsics in `unsafe`: their values (`Fpx8`,
//! `Fp2x8`, private to this module) exist only inside `mul8`, so they only ever run on a CPU with
//! both features.
#![allow(unsafe_code)] // with a `// SAFETY:` comment on every unsafe block
#![allow(clippy::needless_range_loop)] // limb loops read clearest indexed

#[cfg(test)]
use super::field::Fp;
use super::field::Fp2;
use super::mul::{decompose, recode_endo};
use super::point::Point;
use super::scalar::Scalar;
use crate::{CryptoError, ItemDigest};

/// Whether this CPU runs the 8-lane kernel (avx512f + avx512ifma, detected at run time), unless
/// `BLINDJOIN_FOURQ_BACKEND=serial` asks for the serial code (benchmarks, checking the fallback).
pub(crate) fn available() -> bool {
    static CHOSEN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let serial_wanted =
            std::env::var("BLINDJOIN_FOURQ_BACKEND").is_ok_and(|v| v.trim() == "serial");
        cpu_has_ifma() && !serial_wanted
    })
}

fn cpu_has_ifma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512ifma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The name of the scalar-multiplication backend in force (reports and benchmarks).
pub fn backend_name() -> &'static str {
    if available() {
        "avx512ifma-8way"
    } else {
        "serial"
    }
}

/// `k·P` for every point (each of order dividing N), eight at a time with AVX-512 IFMA when
/// [`available`], else one by one with the serial code. Identical results either way.
pub(crate) fn mul_many(points: &[Point], k: &Scalar) -> Vec<Point> {
    #[cfg(target_arch = "x86_64")]
    if available() {
        let (digits, negative) = recode_endo(decompose(k));
        let all: Result<_, std::convert::Infallible> = in_groups_of_eight(
            points,
            |p| Ok(super::mul::mul(p, k)),
            // SAFETY: `available()` confirmed avx512f and avx512ifma, the features `imp::mul8`
            // is compiled for.
            |group| Ok(unsafe { imp::mul8(group, &digits, &negative) }),
        );
        let Ok(all) = all;
        return all;
    }
    points.iter().map(|p| super::mul::mul(p, k)).collect()
}

/// `hash::hash_to_subgroup` for every item, eight at a time with AVX-512 IFMA when [`available`]
/// (the SHA-512 expansion stays serial), else one by one. Identical results either way.
///
/// # Errors
/// Only if `expand_message_xmd` rejects its fixed parameters, which cannot happen.
pub(crate) fn hash_many(items: &[ItemDigest]) -> Result<Vec<Point>, CryptoError> {
    #[cfg(target_arch = "x86_64")]
    if available() {
        return in_groups_of_eight(items, super::hash::hash_to_subgroup, |group| {
            let mut fields = [[Fp2::ZERO; 2]; 8];
            for (f, it) in fields.iter_mut().zip(group) {
                *f = super::hash::item_to_fields(it)?;
            }
            // SAFETY: `available()` confirmed avx512f and avx512ifma, the features `imp::hash8`
            // is compiled for.
            Ok(unsafe { imp::hash8(&fields) })
        });
    }
    items.iter().map(super::hash::hash_to_subgroup).collect()
}

/// Runs `kernel` on the items eight at a time (the last group padded with copies of its first
/// item, whose results are dropped); a group of one or two items takes `one` per item instead,
/// since eight lanes cost about three serial evaluations.
#[cfg(target_arch = "x86_64")]
fn in_groups_of_eight<T: Copy, R: Copy, E>(
    items: &[T],
    one: impl Fn(&T) -> Result<R, E>,
    kernel: impl Fn(&[T; 8]) -> Result<[R; 8], E>,
) -> Result<Vec<R>, E> {
    let mut out = Vec::with_capacity(items.len());
    for chunk in items.chunks(8) {
        if chunk.len() <= 2 {
            for it in chunk {
                out.push(one(it)?);
            }
            continue;
        }
        let mut group = [chunk[0]; 8];
        group[..chunk.len()].copy_from_slice(chunk);
        out.extend_from_slice(&kernel(&group)?[..chunk.len()]);
    }
    Ok(out)
}

/// Serial-path reference for tests: `k·P` for each point without the kernel.
#[cfg(test)]
pub(crate) fn mul_many_serial(points: &[Point], k: &Scalar) -> Vec<Point> {
    points.iter().map(|p| super::mul::mul(p, k)).collect()
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::super::field::{Fp, Fp2, Fq, Fq2};
    use super::super::hash::fourqlib_map_parts;
    use super::super::mul::endo_table;
    use super::super::point::{Cached, Point};
    use core::arch::x86_64::*;

    const M43: u64 = (1 << 43) - 1;
    /// 8·(2^129 − 4) = 32·p in radix 2^43: the subtraction bias.
    const BIAS: [u64; 3] = [(1 << 46) - 32, (1 << 46) - 8, (1 << 46) - 8];

    /// Eight GF(p) elements, limb-sliced.
    #[derive(Clone, Copy)]
    struct Fpx8([__m512i; 3]);

    /// Eight GF(p²) elements a + b·i.
    #[derive(Clone, Copy)]
    pub(crate) struct Fp2x8 {
        a: Fpx8,
        b: Fpx8,
    }

    impl std::fmt::Debug for Fp2x8 {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Fp2x8(..)")
        }
    }

    #[inline(always)]
    fn splat(x: u64) -> __m512i {
        // SAFETY: only reached from `mul8`, on a CPU with avx512f and avx512ifma (module doc).
        unsafe { _mm512_set1_epi64(x as i64) }
    }

    /// The three radix-2^43 limbs of a value below 2^128.
    fn limbs(v: u128) -> [u64; 3] {
        [(v as u64) & M43, ((v >> 43) as u64) & M43, (v >> 86) as u64]
    }

    /// The GF(p) element with limbs `l` (each below 2^45): l0 + l1·2^43 + l2·2^86 with
    /// 2^127 ≡ 1 applied to the bits of l2 above 41.
    fn from_limbs(l: [u64; 3]) -> Fp {
        let s = l[0] as u128
            + ((l[1] as u128) << 43)
            + (((l[2] & ((1 << 41) - 1)) as u128) << 86)
            + (l[2] >> 41) as u128;
        Fp::fold(s)
    }

    #[inline(always)]
    fn fp_konst(v: u128) -> Fpx8 {
        let l = limbs(v);
        Fpx8([splat(l[0]), splat(l[1]), splat(l[2])])
    }

    #[inline(always)]
    fn fp_load(v: [Fp; 8]) -> Fpx8 {
        // SAFETY: only reached from `mul8`, on a CPU with avx512f and avx512ifma (module doc).
        unsafe {
            let l = v.map(|x| limbs(x.0));
            let limb = |i: usize| {
                _mm512_set_epi64(
                    l[7][i] as i64,
                    l[6][i] as i64,
                    l[5][i] as i64,
                    l[4][i] as i64,
                    l[3][i] as i64,
                    l[2][i] as i64,
                    l[1][i] as i64,
                    l[0][i] as i64,
                )
            };
            Fpx8([limb(0), limb(1), limb(2)])
        }
    }

    #[inline(always)]
    fn fp_store(x: Fpx8) -> [Fp; 8] {
        let mut w = [[0u64; 8]; 3];
        for (wi, xi) in w.iter_mut().zip(x.0) {
            // SAFETY: `wi` is 64 bytes, exactly one unaligned 512-bit store.
            unsafe { _mm512_storeu_si512(wi.as_mut_ptr().cast(), xi) };
        }
        std::array::from_fn(|j| from_limbs([w[0][j], w[1][j], w[2][j]]))
    }

    /// One carry round over column sums below 2^60: limbs below 2^43 (limb 1 below 2^43 + 1).
    #[inline(always)]
    fn carry(c: [__m512i; 3]) -> Fpx8 {
        // SAFETY: only reached from `mul8`, on a CPU with avx512f and avx512ifma (module doc).
        unsafe {
            let m = splat(M43);
            let [mut c0, mut c1, mut c2] = c;
            c1 = _mm512_add_epi64(c1, _mm512_srli_epi64::<43>(c0));
            c0 = _mm512_and_si512(c0, m);
            c2 = _mm512_add_epi64(c2, _mm512_srli_epi64::<43>(c1));
            c1 = _mm512_and_si512(c1, m);
            let top = _mm512_srli_epi64::<43>(c2);
            c2 = _mm512_and_si512(c2, m);
            c0 = _mm512_add_epi64(c0, _mm512_slli_epi64::<2>(top)); // 2^129 ≡ 4
            c1 = _mm512_add_epi64(c1, _mm512_srli_epi64::<43>(c0));
            c0 = _mm512_and_si512(c0, m);
            Fpx8([c0, c1, c2])
        }
    }

    #[inline(always)]
    fn fp_add(x: Fpx8, y: Fpx8) -> Fpx8 {
        // SAFETY: only reached from `mul8`, on a CPU with avx512f and avx512ifma (module doc).
        unsafe {
            Fpx8([
                _mm512_add_epi64(x.0[0], y.0[0]),
                _mm512_add_epi64(x.0[1], y.0[1]),
                _mm512_add_epi64(x.0[2], y.0[2]),
            ])
        }
    }

    #[inline(always)]
    fn fp_sub(x: Fpx8, y: Fpx8) -> Fpx8 {
        // SAFETY: only reached from `mul8`, on a CPU with avx512f and avx512ifma (module doc).
        unsafe {
            let s = |i: usize| _mm512_sub_epi64(_mm512_add_epi64(x.0[i], splat(BIAS[i])), y.0[i]);
            carry([s(0), s(1), s(2)])
        }
    }

    #[inline(always)]
    fn fp_neg(x: Fpx8) -> Fpx8 {
        // SAFETY: only reached from `mul8`, on a CPU with avx512f and avx512ifma (module doc).
        unsafe {
            let s = |i: usize| _mm512_sub_epi64(splat(BIAS[i]), x.0[i]);
            carry([s(0), s(1), s(2)])
        }
    }

    /// x·y (see the module doc for the column layout).
    #[inline(always)]
    fn fp_mul(x: Fpx8, y: Fpx8) -> Fpx8 {
        // SAFETY: only reached from `mul8`, on a CPU with avx512f and avx512ifma (module doc).
        unsafe {
            let [a0, a1, a2] = x.0;
            let [b0, b1, b2] = y.0;
            let b1x4 = _mm512_slli_epi64::<2>(b1);
            let b2x4 = _mm512_slli_epi64::<2>(b2);
            let z = _mm512_setzero_si512();
            // Column 0: a0·b0 and the folded a1·b2, a2·b1 (weight 2^129 ≡ 4).
            let lo0 = _mm512_madd52lo_epu64(z, a0, b0);
            let lo0 = _mm512_madd52lo_epu64(lo0, a1, b2x4);
            let lo0 = _mm512_madd52lo_epu64(lo0, a2, b1x4);
            let hi0 = _mm512_madd52hi_epu64(z, a0, b0);
            let hi0 = _mm512_madd52hi_epu64(hi0, a1, b2x4);
            let hi0 = _mm512_madd52hi_epu64(hi0, a2, b1x4);
            // Column 1: a0·b1, a1·b0 and the folded a2·b2 (weight 2^172 ≡ 4·2^43).
            let lo1 = _mm512_madd52lo_epu64(z, a0, b1);
            let lo1 = _mm512_madd52lo_epu64(lo1, a1, b0);
            let lo1 = _mm512_madd52lo_epu64(lo1, a2, b2x4);
            let hi1 = _mm512_madd52hi_epu64(z, a0, b1);
            let hi1 = _mm512_madd52hi_epu64(hi1, a1, b0);
            let hi1 = _mm512_madd52hi_epu64(hi1, a2, b2x4);
            // Column 2: a0·b2, a1·b1, a2·b0; their high halves land at column 3 ≡ 4·column 0.
            let lo2 = _mm512_madd52lo_epu64(z, a0, b2);
            let lo2 = _mm512_madd52lo_epu64(lo2, a1, b1);
            let lo2 = _mm512_madd52lo_epu64(lo2, a2, b0);
            let hi2 = _mm512_madd52hi_epu64(z, a0, b2);
            let hi2 = _mm512_madd52hi_epu64(hi2, a1, b1);
            let hi2 = _mm512_madd52hi_epu64(hi2, a2, b0);
            carry([
                _mm512_add_epi64(lo0, _mm512_slli_epi64::<11>(hi2)),
                _mm512_add_epi64(lo1, _mm512_slli_epi64::<9>(hi0)),
                _mm512_add_epi64(lo2, _mm512_slli_epi64::<9>(hi1)),
            ])
        }
    }

    #[inline(always)]
    fn fp2_mul(x: Fp2x8, y: Fp2x8) -> Fp2x8 {
        let t0 = fp_mul(x.a, y.a);
        let t1 = fp_mul(x.b, y.b);
        let t2 = fp_mul(fp_add(x.a, x.b), fp_add(y.a, y.b));
        Fp2x8 {
            a: fp_sub(t0, t1),
            b: fp_sub(t2, fp_add(t0, t1)),
        }
    }

    #[inline(always)]
    fn fp2_sqr(x: Fp2x8) -> Fp2x8 {
        let re = fp_mul(fp_add(x.a, x.b), fp_sub(x.a, x.b));
        let ab = fp_mul(x.a, x.b);
        Fp2x8 {
            a: re,
            b: fp_add(ab, ab),
        }
    }

    #[inline(always)]
    fn fp2_konst(c: Fp2) -> Fp2x8 {
        Fp2x8 {
            a: fp_konst(c.a.0),
            b: fp_konst(c.b.0),
        }
    }

    /// The canonical representative of every lane (in [0, p)): a full carry, the bits from 2^127
    /// up folded back (2^127 ≡ 1) twice, and p itself mapped to 0.
    #[inline(always)]
    fn fp_canonical(x: Fpx8) -> Fpx8 {
        // SAFETY: only reached from `mul8` / `hash8`, on a CPU with avx512f and avx512ifma.
        unsafe {
            let m = splat(M43);
            let m41 = splat((1 << 41) - 1);
            let Fpx8([mut l0, mut l1, mut l2]) = carry(x.0);
            l2 = _mm512_add_epi64(l2, _mm512_srli_epi64::<43>(l1));
            l1 = _mm512_and_si512(l1, m);
            for _ in 0..2 {
                let top = _mm512_srli_epi64::<41>(l2);
                l2 = _mm512_and_si512(l2, m41);
                l0 = _mm512_add_epi64(l0, top);
                l1 = _mm512_add_epi64(l1, _mm512_srli_epi64::<43>(l0));
                l0 = _mm512_and_si512(l0, m);
                l2 = _mm512_add_epi64(l2, _mm512_srli_epi64::<43>(l1));
                l1 = _mm512_and_si512(l1, m);
            }
            let is_p = _mm512_cmpeq_epi64_mask(l0, m)
                & _mm512_cmpeq_epi64_mask(l1, m)
                & _mm512_cmpeq_epi64_mask(l2, m41);
            let z = _mm512_setzero_si512();
            Fpx8([
                _mm512_mask_blend_epi64(is_p, l0, z),
                _mm512_mask_blend_epi64(is_p, l1, z),
                _mm512_mask_blend_epi64(is_p, l2, z),
            ])
        }
    }

    /// Lane-wise GF(p) for FourQlib's hash map; every value lives inside `hash8`.
    impl Fq for Fpx8 {
        type Mask = __mmask8;
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            fp_add(self, o)
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            fp_sub(self, o)
        }
        #[inline(always)]
        fn neg(self) -> Self {
            fp_neg(self)
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            fp_mul(self, o)
        }
        #[inline(always)]
        fn sqr(self) -> Self {
            fp_mul(self, self)
        }
        #[inline(always)]
        fn half(self) -> Self {
            // SAFETY: only reached from `hash8`, on a CPU with avx512f and avx512ifma.
            unsafe {
                let m = splat(M43);
                let Fpx8([l0, l1, l2]) = fp_canonical(self);
                // Odd lanes add p first, so the halving is exact (v + p < 2^128).
                let odd = _mm512_test_epi64_mask(l0, splat(1));
                let l0 = _mm512_mask_add_epi64(l0, odd, l0, m);
                let l1 = _mm512_mask_add_epi64(l1, odd, l1, m);
                let l2 = _mm512_mask_add_epi64(l2, odd, l2, splat((1 << 41) - 1));
                let l1 = _mm512_add_epi64(l1, _mm512_srli_epi64::<43>(l0));
                let l0 = _mm512_and_si512(l0, m);
                let l2 = _mm512_add_epi64(l2, _mm512_srli_epi64::<43>(l1));
                let l1 = _mm512_and_si512(l1, m);
                let one = splat(1);
                Fpx8([
                    _mm512_or_si512(
                        _mm512_srli_epi64::<1>(l0),
                        _mm512_slli_epi64::<42>(_mm512_and_si512(l1, one)),
                    ),
                    _mm512_or_si512(
                        _mm512_srli_epi64::<1>(l1),
                        _mm512_slli_epi64::<42>(_mm512_and_si512(l2, one)),
                    ),
                    _mm512_srli_epi64::<1>(l2),
                ])
            }
        }
        #[inline(always)]
        fn konst(c: Fp) -> Self {
            fp_konst(c.0)
        }
        #[inline(always)]
        fn eq_mask(self, o: Self) -> __mmask8 {
            // SAFETY: only reached from `hash8`, on a CPU with avx512f and avx512ifma.
            unsafe {
                let (a, b) = (fp_canonical(self), fp_canonical(o));
                _mm512_cmpeq_epi64_mask(a.0[0], b.0[0])
                    & _mm512_cmpeq_epi64_mask(a.0[1], b.0[1])
                    & _mm512_cmpeq_epi64_mask(a.0[2], b.0[2])
            }
        }
        #[inline(always)]
        fn select(a: Self, b: Self, m: __mmask8) -> Self {
            // SAFETY: only reached from `hash8`, on a CPU with avx512f and avx512ifma.
            unsafe {
                Fpx8([
                    _mm512_mask_blend_epi64(m, a.0[0], b.0[0]),
                    _mm512_mask_blend_epi64(m, a.0[1], b.0[1]),
                    _mm512_mask_blend_epi64(m, a.0[2], b.0[2]),
                ])
            }
        }
    }

    /// Lane-wise GF(p²) for the shared point formulas; every value of this type lives inside
    /// `mul8` (see the module doc).
    impl Fq2 for Fp2x8 {
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            Fp2x8 {
                a: fp_add(self.a, o.a),
                b: fp_add(self.b, o.b),
            }
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            Fp2x8 {
                a: fp_sub(self.a, o.a),
                b: fp_sub(self.b, o.b),
            }
        }
        #[inline(always)]
        fn neg(self) -> Self {
            Fp2x8 {
                a: fp_neg(self.a),
                b: fp_neg(self.b),
            }
        }
        #[inline(always)]
        fn conj(self) -> Self {
            Fp2x8 {
                a: self.a,
                b: fp_neg(self.b),
            }
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            fp2_mul(self, o)
        }
        #[inline(always)]
        fn sqr(self) -> Self {
            fp2_sqr(self)
        }
        #[inline(always)]
        fn konst(c: Fp2) -> Self {
            fp2_konst(c)
        }
    }

    #[inline(always)]
    fn fp2_load(v: [Fp2; 8]) -> Fp2x8 {
        Fp2x8 {
            a: fp_load(v.map(|x| x.a)),
            b: fp_load(v.map(|x| x.b)),
        }
    }

    #[inline(always)]
    fn fp2_store(x: Fp2x8) -> [Fp2; 8] {
        let (a, b) = (fp_store(x.a), fp_store(x.b));
        std::array::from_fn(|j| Fp2 { a: a[j], b: b[j] })
    }

    /// The 24 registers of a cached point, for masked scans.
    #[inline(always)]
    fn regs(c: &Cached<Fp2x8>) -> [__m512i; 24] {
        // SAFETY: only reached from `mul8`, on a CPU with avx512f and avx512ifma (module doc).
        unsafe {
            let mut r = [_mm512_setzero_si512(); 24];
            for (k, f) in [c.n, c.d, c.e, c.f].iter().enumerate() {
                r[6 * k..6 * k + 3].copy_from_slice(&f.a.0);
                r[6 * k + 3..6 * k + 6].copy_from_slice(&f.b.0);
            }
            r
        }
    }

    #[inline(always)]
    fn from_regs(r: [__m512i; 24]) -> Cached<Fp2x8> {
        let f = |k: usize| Fp2x8 {
            a: Fpx8([r[6 * k], r[6 * k + 1], r[6 * k + 2]]),
            b: Fpx8([r[6 * k + 3], r[6 * k + 4], r[6 * k + 5]]),
        };
        Cached {
            n: f(0),
            d: f(1),
            e: f(2),
            f: f(3),
        }
    }

    /// `table[index]` by a full masked scan (the index is secret; it is the same in every lane).
    #[inline(always)]
    fn lookup(table: &[[__m512i; 24]; 8], index: u8) -> [__m512i; 24] {
        // SAFETY: only reached from `mul8`, on a CPU with avx512f and avx512ifma (module doc).
        unsafe {
            let index = std::hint::black_box(index as u64);
            let mut acc = [_mm512_setzero_si512(); 24];
            for (i, entry) in table.iter().enumerate() {
                // (i ^ index) − 1 borrows into bit 63 exactly when i = index (both are small).
                let eq = (i as u64 ^ index).wrapping_sub(1) >> 63;
                let mask = splat(0u64.wrapping_sub(eq));
                for (a, e) in acc.iter_mut().zip(entry) {
                    *a = _mm512_or_si512(*a, _mm512_and_si512(*e, mask));
                }
            }
            acc
        }
    }

    /// −Q when `negative` is 1 (swap X + Y and Y − X, negate 2d·T), by masks.
    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn conditional_negate(q: Cached<Fp2x8>, negative: u8) -> Cached<Fp2x8> {
        let bit = std::hint::black_box(u64::from(negative & 1));
        let m = splat(0u64.wrapping_sub(bit));
        let sel = |x: Fpx8, y: Fpx8| {
            let mut r = x.0;
            for i in 0..3 {
                r[i] = _mm512_or_si512(_mm512_andnot_si512(m, x.0[i]), _mm512_and_si512(m, y.0[i]));
            }
            Fpx8(r)
        };
        let sel2 = |x: Fp2x8, y: Fp2x8| Fp2x8 {
            a: sel(x.a, y.a),
            b: sel(x.b, y.b),
        };
        let neg_f = Fp2x8 {
            a: fp_neg(q.f.a),
            b: fp_neg(q.f.b),
        };
        Cached {
            n: sel2(q.n, q.d),
            d: sel2(q.d, q.n),
            e: q.e,
            f: sel2(q.f, neg_f),
        }
    }

    /// `k·P_j` for eight points given k's recoded digits (see `mul::mul_endo`, which this mirrors
    /// lane-wise: the table of φ/ψ combinations, then 64 doublings and 65 additions).
    ///
    /// # Safety
    /// The CPU must support avx512f and avx512ifma.
    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(super) unsafe fn mul8(
        p: &[Point; 8],
        digits: &[u8; 65],
        negative: &[u8; 65],
    ) -> [Point; 8] {
        let lanes = |f: fn(&Point) -> Fp2| fp2_load(std::array::from_fn(|j| f(&p[j])));
        let pv = Point {
            x: lanes(|q| q.x),
            y: lanes(|q| q.y),
            z: lanes(|q| q.z),
            ta: lanes(|q| q.ta),
            tb: lanes(|q| q.tb),
        };
        let table = endo_table(&pv).map(|c| regs(&c));
        let identity = Point {
            x: fp2_konst(Fp2::ZERO),
            y: fp2_konst(Fp2::ONE),
            z: fp2_konst(Fp2::ONE),
            ta: fp2_konst(Fp2::ZERO),
            tb: fp2_konst(Fp2::ONE),
        };
        let mut q = identity.add(&from_regs(lookup(&table, digits[64])));
        for i in (0..64).rev() {
            q = q.double();
            let t = conditional_negate(from_regs(lookup(&table, digits[i])), negative[i]);
            q = q.add(&t);
        }
        store_points(&q)
    }

    /// Stores eight lane points as serial points.
    #[inline(always)]
    fn store_points(q: &Point<Fp2x8>) -> [Point; 8] {
        let (x, y, z, ta, tb) = (
            fp2_store(q.x),
            fp2_store(q.y),
            fp2_store(q.z),
            fp2_store(q.ta),
            fp2_store(q.tb),
        );
        std::array::from_fn(|j| Point {
            x: x[j],
            y: y[j],
            z: z[j],
            ta: ta[j],
            tb: tb[j],
        })
    }

    /// `392·(map(u0) + map(u1))` for eight items' field pairs (`hash::hash_to_subgroup`, lane-wise).
    ///
    /// # Safety
    /// The CPU must support avx512f and avx512ifma.
    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(super) unsafe fn hash8(u: &[[Fp2; 2]; 8]) -> [Point; 8] {
        let part = |i: usize, real: bool| {
            fp_load(std::array::from_fn(|j| {
                if real { u[j][i].a } else { u[j][i].b }
            }))
        };
        let map = |i: usize| {
            let [x0, x1, y0, y1] = fourqlib_map_parts(part(i, true), part(i, false));
            let (x, y) = (Fp2x8 { a: x0, b: x1 }, Fp2x8 { a: y0, b: y1 });
            Point {
                x,
                y,
                z: fp2_konst(Fp2::ONE),
                ta: x,
                tb: y,
            }
        };
        let (q0, q1) = (map(0), map(1));
        store_points(&q0.add(&q1.cached()).mul_by_cofactor())
    }

    /// Lane-wise GF(p) operations against the serial ones, on random and edge values (0, 1,
    /// p − 1, and p itself, the unreduced zero the serial code may carry).
    #[cfg(test)]
    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(super) unsafe fn check_field_ops(a: [Fp; 8], b: [Fp; 8]) {
        use subtle::ConstantTimeEq;
        let (x, y) = (fp_load(a), fp_load(b));
        let same = |v: [Fp; 8], w: [Fp; 8], what: &str| {
            for j in 0..8 {
                assert!(bool::from(v[j].ct_eq(&w[j])), "{what}, lane {j}");
            }
        };
        same(
            fp_store(x.mul(y)),
            std::array::from_fn(|j| a[j].mul(b[j])),
            "mul",
        );
        same(
            fp_store(x.sqr()),
            std::array::from_fn(|j| a[j].sqr()),
            "sqr",
        );
        same(
            fp_store(x.add(y)),
            std::array::from_fn(|j| a[j].add(b[j])),
            "add",
        );
        same(
            fp_store(x.sub(y)),
            std::array::from_fn(|j| a[j].sub(b[j])),
            "sub",
        );
        same(
            fp_store(x.neg()),
            std::array::from_fn(|j| a[j].neg()),
            "neg",
        );
        same(
            fp_store(x.half()),
            std::array::from_fn(|j| a[j].half()),
            "half",
        );
        let c = fp_store(fp_canonical(x));
        for j in 0..8 {
            assert_eq!(c[j].0, a[j].canonical().0, "canonical, lane {j}");
        }
        let eq = x.eq_mask(y);
        for j in 0..8 {
            assert_eq!(
                eq >> j & 1 == 1,
                bool::from(a[j].ct_eq(&b[j])),
                "eq, lane {j}"
            );
        }
        let sel = fp_store(Fpx8::select(x, y, 0b1010_0101));
        for j in 0..8 {
            let want = if (0b1010_0101u8 >> j) & 1 == 1 {
                b[j]
            } else {
                a[j]
            };
            assert_eq!(sel[j].0, want.0, "select, lane {j}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::item_digest;
    use crate::test_rng::Rng;

    #[test]
    fn lane_field_ops_match_the_serial_field() {
        if !cpu_has_ifma() {
            eprintln!("no AVX-512 IFMA on this CPU: lane kernel not tested here");
            return;
        }
        let p = (1u128 << 127) - 1;
        let mut rng = Rng(31);
        let edge = [0, 1, 2, p - 1, p, p - 2, 1 << 126, (1 << 126) + 1];
        for round in 0..200 {
            let pick = |r: &mut Rng| {
                std::array::from_fn(|j| {
                    if round % 4 == 0 {
                        Fp(edge[(j + round / 4) % 8])
                    } else {
                        Fp::new(r.u128())
                    }
                })
            };
            let a = pick(&mut rng);
            let mut b = pick(&mut rng);
            if round % 3 == 0 {
                b[1] = a[1];
                b[5] = a[5];
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `cpu_has_ifma()` confirmed avx512f and avx512ifma.
            unsafe {
                imp::check_field_ops(a, b)
            };
        }
    }

    #[test]
    fn lane_hash_matches_the_serial_hash() {
        for n in [0usize, 1, 2, 3, 8, 13] {
            let items: Vec<_> = (0..n as u32)
                .map(|i| item_digest(&i.to_le_bytes()))
                .collect();
            let fast = hash_many(&items).unwrap();
            assert_eq!(fast.len(), n);
            for (it, f) in items.iter().zip(&fast) {
                let s = super::super::hash::hash_to_subgroup(it).unwrap();
                assert!(bool::from(f.ct_eq(&s)), "n = {n}");
            }
        }
    }
}
