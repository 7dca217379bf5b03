//! AVX-512 IFMA butterflies for the NTT of primes below 2^50, eight coefficients per instruction.
//!
//! IFMA multiplies the low 52 bits of 64-bit lanes and returns the low or high 52 bits of the
//! 104-bit product (`vpmadd52luq` / `vpmadd52huq`). That is Harvey's butterfly with a 52-bit
//! word: the Shoup constant of a twiddle w is w' = ⌊w·2^52/q⌋, and for any y < 2^52,
//! w·y − ⌊w'·y/2^52⌋·q lies in [0, 2q) (Harvey 2014, §2, with β = 2^52), so it is recovered
//! exactly from the low 52 bits of the two products. The lazy values of the transform stay
//! below 4q, which fits 52 bits when q < 2^50: that is the condition for this path (HEXL's, too).
//!
//! Only the layers whose half-groups hold at least 8 coefficients are vectorised (all but the
//! last three of the forward transform, all but the first three of the inverse); the others run
//! the portable butterflies of [`crate::ntt`], which accept the same lazy ranges, and give the
//! same canonical result (tested against the portable transform).
//!
//! # Run-time selection and SAFETY
//!
//! The kernels are compiled with `#[target_feature(enable = "avx512f,avx512ifma")]` and entered
//! only after `is_x86_feature_detected!` confirmed both features ([`available`]). Besides
//! entering the kernels, the only `unsafe` operations are unaligned 64-byte loads and stores of
//! `chunks_exact(8)` slices of u64, which are in bounds by construction.
#![allow(unsafe_code)] // with a `// SAFETY:` comment on every unsafe block

use crate::modarith::Modulus;

/// Largest prime size for the IFMA path: 4q < 2^52.
pub const MAX_BITS: u32 = 50;

/// Whether this CPU has avx512f and avx512ifma (detected at run time).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512ifma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Twiddles with 52-bit Shoup constants.
#[derive(Clone, Debug)]
pub(crate) struct Twiddles52 {
    pub roots: Vec<(u64, u64)>,
    pub inv_roots: Vec<(u64, u64)>,
    pub n_inv: (u64, u64),
    pub last_inv: (u64, u64),
}

fn shoup52(w: u64, q: u64) -> u64 {
    ((u128::from(w) << 52) / u128::from(q)) as u64
}

impl Twiddles52 {
    /// From the 64-bit tables' twiddles; `None` if q has more than [`MAX_BITS`] bits.
    pub fn new(
        m: &Modulus,
        roots: &[(u64, u64)],
        inv_roots: &[(u64, u64)],
        n_inv: u64,
        last_inv: u64,
    ) -> Option<Self> {
        if m.bits() > MAX_BITS {
            return None;
        }
        let q = m.value();
        let conv = |v: &[(u64, u64)]| v.iter().map(|&(w, _)| (w, shoup52(w, q))).collect();
        Some(Self {
            roots: conv(roots),
            inv_roots: conv(inv_roots),
            n_inv: (n_inv, shoup52(n_inv, q)),
            last_inv: (last_inv, shoup52(last_inv, q)),
        })
    }
}

/// Runs the forward layers whose half-groups hold ≥ 8 coefficients; returns the number of
/// groups m of the next layer (1 if nothing was done), for the portable code to continue.
pub(crate) fn forward_layers(tw: &Twiddles52, q: u64, a: &mut [u64]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if available() && a.len() >= 16 && a.len().is_power_of_two() {
        // SAFETY: `available()` just confirmed avx512f and avx512ifma, the target features
        // `imp::forward` is compiled for.
        return unsafe { imp::forward(tw, q, a) };
    }
    let _ = (tw, q);
    1
}

/// Runs the inverse layers from the layer with m groups of half-size t (t ≥ 8) to the end,
/// including the N^{-1} scaling; returns false (doing nothing) when the CPU lacks IFMA.
pub(crate) fn inverse_layers(tw: &Twiddles52, q: u64, a: &mut [u64], m: usize, t: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if available() && t >= 8 && t.is_power_of_two() && m * 2 * t == a.len() {
        // SAFETY: `available()` just confirmed avx512f and avx512ifma, the target features
        // `imp::inverse` is compiled for.
        unsafe { imp::inverse(tw, q, a, m, t) };
        return true;
    }
    let _ = (tw, q, a, m, t);
    false
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::Twiddles52;
    use core::arch::x86_64::*;

    const MASK52: u64 = (1 << 52) - 1;

    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn splat(x: u64) -> __m512i {
        _mm512_set1_epi64(x as i64)
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn load(s: &[u64]) -> __m512i {
        // SAFETY: callers pass `chunks_exact(8)` slices: 64 readable bytes; the load is unaligned.
        unsafe { _mm512_loadu_epi64(s.as_ptr().cast::<i64>()) }
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn store(s: &mut [u64], v: __m512i) {
        // SAFETY: callers pass `chunks_exact_mut(8)` slices: 64 writable bytes; unaligned store.
        unsafe { _mm512_storeu_epi64(s.as_mut_ptr().cast::<i64>(), v) }
    }

    /// w·y mod q in [0, 2q) for y < 2^52, from w and its 52-bit Shoup constant.
    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn mul_shoup52(y: __m512i, w: __m512i, w52: __m512i, q: __m512i) -> __m512i {
        let zero = _mm512_setzero_si512();
        let quo = _mm512_madd52hi_epu64(zero, w52, y);
        let lo = _mm512_madd52lo_epu64(zero, w, y);
        let sub = _mm512_madd52lo_epu64(zero, quo, q);
        _mm512_and_si512(_mm512_sub_epi64(lo, sub), splat(MASK52))
    }

    /// min(x, x − m): x − m when x ≥ m (lanes below 2^63).
    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn sub_if_ge(x: __m512i, m: __m512i) -> __m512i {
        _mm512_min_epu64(x, _mm512_sub_epi64(x, m))
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(super) fn forward(tw: &Twiddles52, q: u64, a: &mut [u64]) -> usize {
        let n = a.len();
        let (qv, two_q) = (splat(q), splat(2 * q));
        let (mut t, mut m) = (n, 1);
        while t / 2 >= 8 {
            t >>= 1;
            for (chunk, &(w, w52)) in a.chunks_exact_mut(2 * t).zip(&tw.roots[m..2 * m]) {
                let (wv, w52v) = (splat(w), splat(w52));
                let (lo, hi) = chunk.split_at_mut(t);
                for (xs, ys) in lo.chunks_exact_mut(8).zip(hi.chunks_exact_mut(8)) {
                    let x = sub_if_ge(load(xs), two_q);
                    let r = mul_shoup52(load(ys), wv, w52v, qv);
                    store(xs, _mm512_add_epi64(x, r));
                    store(ys, _mm512_sub_epi64(_mm512_add_epi64(x, two_q), r));
                }
            }
            m <<= 1;
        }
        m
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(super) fn inverse(tw: &Twiddles52, q: u64, a: &mut [u64], mut m: usize, mut t: usize) {
        let (qv, two_q) = (splat(q), splat(2 * q));
        while m > 1 {
            for (chunk, &(w, w52)) in a.chunks_exact_mut(2 * t).zip(&tw.inv_roots[m..2 * m]) {
                let (wv, w52v) = (splat(w), splat(w52));
                let (lo, hi) = chunk.split_at_mut(t);
                for (xs, ys) in lo.chunks_exact_mut(8).zip(hi.chunks_exact_mut(8)) {
                    let (x, y) = (load(xs), load(ys));
                    store(xs, sub_if_ge(_mm512_add_epi64(x, y), two_q));
                    let d = _mm512_sub_epi64(_mm512_add_epi64(x, two_q), y);
                    store(ys, mul_shoup52(d, wv, w52v, qv));
                }
            }
            t <<= 1;
            m >>= 1;
        }
        let (ni, ni52) = (splat(tw.n_inv.0), splat(tw.n_inv.1));
        let (wn, wn52) = (splat(tw.last_inv.0), splat(tw.last_inv.1));
        let (lo, hi) = a.split_at_mut(t);
        for (xs, ys) in lo.chunks_exact_mut(8).zip(hi.chunks_exact_mut(8)) {
            let (x, y) = (load(xs), load(ys));
            let s = mul_shoup52(_mm512_add_epi64(x, y), ni, ni52, qv);
            store(xs, sub_if_ge(s, qv));
            let d = _mm512_sub_epi64(_mm512_add_epi64(x, two_q), y);
            store(ys, sub_if_ge(mul_shoup52(d, wn, wn52, qv), qv));
        }
    }
}
