//! AVX-512 IFMA butterflies for the NTT of primes below 2^50, eight coefficients per instruction.
//!
//! IFMA multiplies the low 52 bits of 64-bit lanes and returns the low or high 52 bits of the
//! 104-bit product (`vpmadd52luq` / `vpmadd52huq`). That is Harvey's butterfly with a 52-bit
//! word: the Shoup constant of a twiddle w is w' = ⌊w·2^52/q⌋, and for any y < 2^52,
//! w·y − ⌊w'·y/2^52⌋·q lies in [0, 2q) (Harvey 2014, §2, with β = 2^52), so it is recovered
//! exactly from the low 52 bits of the two products. The lazy values of the transform stay
//! below 4q, which fits 52 bits when q < 2^50: that is the condition for this path (HEXL's, too).
//!
//! Layers whose half-groups hold at least 8 coefficients take whole vectors with one twiddle per
//! group; the three layers with half-groups of 4, 2 and 1 work on blocks of 16 coefficients,
//! gathering the butterflies' operands into two vectors with `vpermt2q` and the twiddles with
//! `vpermq` (the scheme of Intel HEXL's AVX-512 NTT). Results are canonical and equal the
//! portable transform's (tested).
//!
//! # Run-time selection and SAFETY
//!
//! The kernels are compiled with `#[target_feature(enable = "avx512f,avx512ifma")]` and entered
//! only after `is_x86_feature_detected!` confirmed both features ([`available`]). Besides
//! entering the kernels, the only `unsafe` operations are unaligned 64-byte loads and stores of
//! slices first cut to exactly 8 u64 (a bounds-checked slicing), and loads of 8-entry index arrays.
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

/// Twiddles with 52-bit Shoup constants, as separate arrays so eight consecutive ones load as
/// one vector.
#[derive(Clone, Debug)]
pub(crate) struct Twiddles52 {
    pub w: Vec<u64>,
    pub w52: Vec<u64>,
    pub iw: Vec<u64>,
    pub iw52: Vec<u64>,
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
        let w: Vec<u64> = roots.iter().map(|&(w, _)| w).collect();
        let iw: Vec<u64> = inv_roots.iter().map(|&(w, _)| w).collect();
        Some(Self {
            w52: w.iter().map(|&x| shoup52(x, q)).collect(),
            iw52: iw.iter().map(|&x| shoup52(x, q)).collect(),
            w,
            iw,
            n_inv: (n_inv, shoup52(n_inv, q)),
            last_inv: (last_inv, shoup52(last_inv, q)),
        })
    }
}

/// The whole forward transform (output in [0, q)); false, doing nothing, when the CPU lacks
/// IFMA or N < 16 or the tables do not match `a`.
pub(crate) fn forward(tw: &Twiddles52, q: u64, a: &mut [u64]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if available() && usable(tw, a) {
        // SAFETY: `available()` just confirmed avx512f and avx512ifma, the target features
        // `imp::forward` is compiled for.
        unsafe { imp::forward(tw, q, a) };
        return true;
    }
    let _ = (tw, q, a);
    false
}

/// The whole inverse transform (input in [0, 2q), output in [0, q)); false as [`forward`].
pub(crate) fn inverse(tw: &Twiddles52, q: u64, a: &mut [u64]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if available() && usable(tw, a) {
        // SAFETY: `available()` just confirmed avx512f and avx512ifma, the target features
        // `imp::inverse` is compiled for.
        unsafe { imp::inverse(tw, q, a) };
        return true;
    }
    let _ = (tw, q, a);
    false
}

fn usable(tw: &Twiddles52, a: &[u64]) -> bool {
    let n = a.len();
    n >= 16
        && n.is_power_of_two()
        && tw.w.len() == n
        && tw.w52.len() == n
        && tw.iw.len() == n
        && tw.iw52.len() == n
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::Twiddles52;
    use core::arch::x86_64::*;

    const MASK52: u64 = (1 << 52) - 1;

    /// For butterflies of half-size t ∈ {1, 2, 4} inside a block of 16 coefficients (vectors
    /// A = 0..8, B = 8..16): the positions of the first (X) and second (Y) operands, the group
    /// of each X lane (which twiddle it takes), and the inverse maps putting X and Y back into
    /// A and B. Indices as `vpermt2q` reads them: 0..8 from the first vector, 8..16 the second.
    struct Shuffle {
        x: [i64; 8],
        y: [i64; 8],
        group: [i64; 8],
        a: [i64; 8],
        b: [i64; 8],
    }

    const fn shuffle(t: usize) -> Shuffle {
        let mut s = Shuffle {
            x: [0; 8],
            y: [0; 8],
            group: [0; 8],
            a: [0; 8],
            b: [0; 8],
        };
        let (mut nx, mut ny, mut p) = (0, 0, 0);
        while p < 16 {
            if p % (2 * t) < t {
                s.x[nx] = p as i64;
                s.group[nx] = (p / (2 * t)) as i64;
                if p < 8 {
                    s.a[p] = nx as i64;
                } else {
                    s.b[p - 8] = nx as i64;
                }
                nx += 1;
            } else {
                s.y[ny] = p as i64;
                if p < 8 {
                    s.a[p] = 8 + ny as i64;
                } else {
                    s.b[p - 8] = 8 + ny as i64;
                }
                ny += 1;
            }
            p += 1;
        }
        s
    }

    const SHUFFLES: [Shuffle; 3] = [shuffle(1), shuffle(2), shuffle(4)];

    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn splat(x: u64) -> __m512i {
        _mm512_set1_epi64(x as i64)
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn load(s: &[u64]) -> __m512i {
        let s = &s[..8];
        // SAFETY: `s` has exactly 8 u64 = 64 readable bytes; the load is unaligned.
        unsafe { _mm512_loadu_epi64(s.as_ptr().cast::<i64>()) }
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn store(s: &mut [u64], v: __m512i) {
        let s = &mut s[..8];
        // SAFETY: `s` has exactly 8 u64 = 64 writable bytes; the store is unaligned.
        unsafe { _mm512_storeu_epi64(s.as_mut_ptr().cast::<i64>(), v) }
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn idx(v: &[i64; 8]) -> __m512i {
        // SAFETY: `v` is a live array of 8 i64 = 64 bytes; the load is unaligned.
        unsafe { _mm512_loadu_epi64(v.as_ptr()) }
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

    /// Forward butterfly: (x, y) ↦ (x + w·y, x − w·y), inputs < 4q, outputs < 4q.
    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn ct(x: __m512i, y: __m512i, w: __m512i, w52: __m512i, q: __m512i) -> (__m512i, __m512i) {
        let two_q = _mm512_add_epi64(q, q);
        let x = sub_if_ge(x, two_q);
        let r = mul_shoup52(y, w, w52, q);
        (
            _mm512_add_epi64(x, r),
            _mm512_sub_epi64(_mm512_add_epi64(x, two_q), r),
        )
    }

    /// Inverse butterfly: (x, y) ↦ (x + y, w·(x − y)), inputs < 2q, outputs < 2q.
    #[target_feature(enable = "avx512f,avx512ifma")]
    #[inline]
    fn gs(x: __m512i, y: __m512i, w: __m512i, w52: __m512i, q: __m512i) -> (__m512i, __m512i) {
        let two_q = _mm512_add_epi64(q, q);
        let s = sub_if_ge(_mm512_add_epi64(x, y), two_q);
        let d = _mm512_sub_epi64(_mm512_add_epi64(x, two_q), y);
        (s, mul_shoup52(d, w, w52, q))
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(super) fn forward(tw: &Twiddles52, q: u64, a: &mut [u64]) {
        let n = a.len();
        let qv = splat(q);
        let (mut t, mut m) = (n, 1);
        // Layers with half-groups of ≥ 8: whole vectors, one twiddle per group.
        while t / 2 >= 8 {
            t >>= 1;
            for (g, chunk) in a.chunks_exact_mut(2 * t).enumerate() {
                let (wv, w52v) = (splat(tw.w[m + g]), splat(tw.w52[m + g]));
                let (lo, hi) = chunk.split_at_mut(t);
                for (xs, ys) in lo.chunks_exact_mut(8).zip(hi.chunks_exact_mut(8)) {
                    let (x, y) = ct(load(xs), load(ys), wv, w52v, qv);
                    store(xs, x);
                    store(ys, y);
                }
            }
            m <<= 1;
        }
        // t = 4, 2, 1: butterflies inside 16-coefficient blocks, gathered by permutations.
        for sh in [&SHUFFLES[2], &SHUFFLES[1], &SHUFFLES[0]] {
            t >>= 1;
            let last = t == 1;
            let (ix, iy, ig, ia, ib) = (
                idx(&sh.x),
                idx(&sh.y),
                idx(&sh.group),
                idx(&sh.a),
                idx(&sh.b),
            );
            for (blk, chunk) in a.chunks_exact_mut(16).enumerate() {
                let g0 = m + blk * 8 / t;
                let wv = _mm512_permutexvar_epi64(ig, load(&tw.w[g0..]));
                let w52v = _mm512_permutexvar_epi64(ig, load(&tw.w52[g0..]));
                let (lo, hi) = chunk.split_at_mut(8);
                let (va, vb) = (load(lo), load(hi));
                let x = _mm512_permutex2var_epi64(va, ix, vb);
                let y = _mm512_permutex2var_epi64(va, iy, vb);
                let (mut x, mut y) = ct(x, y, wv, w52v, qv);
                if last {
                    let two_q = _mm512_add_epi64(qv, qv);
                    x = sub_if_ge(sub_if_ge(x, two_q), qv);
                    y = sub_if_ge(sub_if_ge(y, two_q), qv);
                }
                store(lo, _mm512_permutex2var_epi64(x, ia, y));
                store(hi, _mm512_permutex2var_epi64(x, ib, y));
            }
            m <<= 1;
        }
    }

    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(super) fn inverse(tw: &Twiddles52, q: u64, a: &mut [u64]) {
        let n = a.len();
        let qv = splat(q);
        let (mut t, mut m) = (1, n >> 1);
        // t = 1, 2, 4 inside 16-coefficient blocks.
        for sh in &SHUFFLES {
            let (ix, iy, ig, ia, ib) = (
                idx(&sh.x),
                idx(&sh.y),
                idx(&sh.group),
                idx(&sh.a),
                idx(&sh.b),
            );
            for (blk, chunk) in a.chunks_exact_mut(16).enumerate() {
                let g0 = m + blk * 8 / t;
                let wv = _mm512_permutexvar_epi64(ig, load(&tw.iw[g0..]));
                let w52v = _mm512_permutexvar_epi64(ig, load(&tw.iw52[g0..]));
                let (lo, hi) = chunk.split_at_mut(8);
                let (va, vb) = (load(lo), load(hi));
                let x = _mm512_permutex2var_epi64(va, ix, vb);
                let y = _mm512_permutex2var_epi64(va, iy, vb);
                let (x, y) = gs(x, y, wv, w52v, qv);
                store(lo, _mm512_permutex2var_epi64(x, ia, y));
                store(hi, _mm512_permutex2var_epi64(x, ib, y));
            }
            t <<= 1;
            m >>= 1;
        }
        // Half-groups of ≥ 8, all but the last layer.
        while m > 1 {
            for (g, chunk) in a.chunks_exact_mut(2 * t).enumerate() {
                let (wv, w52v) = (splat(tw.iw[m + g]), splat(tw.iw52[m + g]));
                let (lo, hi) = chunk.split_at_mut(t);
                for (xs, ys) in lo.chunks_exact_mut(8).zip(hi.chunks_exact_mut(8)) {
                    let (x, y) = gs(load(xs), load(ys), wv, w52v, qv);
                    store(xs, x);
                    store(ys, y);
                }
            }
            t <<= 1;
            m >>= 1;
        }
        // Last layer with N^{-1} folded in, reduced to [0, q).
        let two_q = _mm512_add_epi64(qv, qv);
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
