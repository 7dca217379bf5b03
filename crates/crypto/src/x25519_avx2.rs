//! 4-lane AVX2 kernel for X25519 (RFC 7748 §5), for x86-64 CPUs without AVX-512 IFMA.
//!
//! # Representation
//!
//! A field element of GF(p), p = 2^255 − 19, is kept in the "radix 2^25.5" form of Bernstein's
//! ref10 / curve25519-donna: ten limbs of alternately 26 and 25 bits,
//! `v = Σ l_i · 2^⌈25.5·i⌉`. Four independent elements ("lanes") are packed limb-wise into ten
//! `__m256i` registers (one 64-bit lane per element), so one `vpmuludq` (32 × 32 → 64 bits, four
//! lanes) does one partial product of four field multiplications. A multiplication takes the
//! 100 partial products of the schoolbook method (55 for a square), folding the columns above
//! 2^255 back with 19, exactly as ref10's `fe_mul` / `fe_sq` do per element.
//!
//! # Bounds (why no carry is needed after an addition or subtraction)
//!
//! After a carry round every even limb is < 2^26 and every odd limb < 2^25 + 2^15 ("reduced").
//! `add` of two reduced values gives limbs < 2^27.1; `sub` computes `f + 2p − g` with the limb-wise
//! bias 2p (even limbs ≈ 2^27, odd ≈ 2^26, each above a reduced limb), giving limbs < 3·2^26. A
//! multiplier input is scaled by at most 2 (odd × odd columns) on one side and by 19 on the other:
//! 19·3·2^26 = 57·2^26 < 2^32, a valid `vpmuludq` input, and ten products of
//! 2·3·2^26 · 57·2^26 sum below 2^63, so the 64-bit column sums never overflow. `mul_a24` carries
//! at once because its factor 121665 is 17 bits wide.
//!
//! # Ladder and constant time
//!
//! `x25519_batch` runs the RFC 7748 §5 ladder (bits 254 … 0 of the clamped scalar) for four
//! u-coordinates per instruction stream. All lanes share the scalar, so the conditional swap is one
//! mask `−bit` broadcast to every lane and applied with xor/and: no branch and no memory index
//! depends on the key or on u. The final `x2 / z2` is `x2 · z2^(p−2)` (ref10's addition chain),
//! which maps `z2 = 0` (low-order u) to 0, as RFC 7748 requires. u's top bit is masked and
//! u ≥ p is accepted (the arithmetic reduces it). The canonical output encoding is computed per
//! lane with masked (branch-free) subtraction of p.
//!
//! # Run-time selection and SAFETY
//!
//! The kernel is compiled with `#[target_feature(enable = "avx2")]` and only entered after
//! `is_x86_feature_detected!("avx2")` (see [`available`]). Its intrinsics are all register-only
//! (no loads or stores through pointers); the single `unsafe` block is the call into the kernel.
#![allow(unsafe_code)] // one call into a `#[target_feature]` function, with its SAFETY note
#![allow(clippy::needless_range_loop)]

/// Whether this CPU can run the kernel (AVX2, detected at run time).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[i] = X25519(k, u[i])` exactly as RFC 7748 §5 (k clamped; u's top bit masked; u ≥ p
/// accepted; canonical output), equal to
/// `curve25519_dalek::MontgomeryPoint(u[i]).mul_clamped(*k).0`.
///
/// Four lanes per instruction stream with AVX2 when [`available`], else curve25519-dalek's serial
/// ladder. Only the first `min(u.len(), out.len())` entries are processed. Never panics.
pub(crate) fn x25519_batch(k: &[u8; 32], u: &[[u8; 32]], out: &mut [[u8; 32]]) {
    let n = u.len().min(out.len());
    let (u, out) = (&u[..n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: `available()` just confirmed AVX2, the only target feature `imp::x25519_batch`
        // is compiled for.
        unsafe { imp::x25519_batch(k, u, out) };
        return;
    }
    crate::x25519::x25519_serial(k, u, out);
}

/// Bit offset of each limb: ⌈25.5·i⌉.
const OFFSET: [u32; 10] = [0, 26, 51, 77, 102, 128, 153, 179, 204, 230];
/// Width of each limb.
const WIDTH: [u32; 10] = [26, 25, 26, 25, 26, 25, 26, 25, 26, 25];

/// The ten limbs of a 255-bit little-endian value (top bit of byte 31 ignored).
fn limbs_from_bytes(b: &[u8; 32]) -> [u64; 10] {
    let mut w = [0u64; 4];
    for (i, wi) in w.iter_mut().enumerate() {
        let mut chunk = [0u8; 8];
        chunk.copy_from_slice(&b[8 * i..8 * i + 8]);
        *wi = u64::from_le_bytes(chunk);
    }
    w[3] &= (1 << 63) - 1;
    let mut l = [0u64; 10];
    for i in 0..10 {
        let (word, bit) = ((OFFSET[i] / 64) as usize, OFFSET[i] % 64);
        let mut v = w[word] >> bit;
        if bit + WIDTH[i] > 64 && word + 1 < 4 {
            v |= w[word + 1] << (64 - bit);
        }
        l[i] = v & ((1 << WIDTH[i]) - 1);
    }
    l
}

/// Canonical little-endian bytes of a value given by limbs, each below 2^27 or so (the output of
/// a carry round). Branch-free: the final subtraction of p is selected by a mask.
fn bytes_from_limbs(limbs: &[u64; 10]) -> [u8; 32] {
    let mut l = *limbs;
    // Two sequential carry rounds: limbs within width, value < 2^255 + 2^26·19.
    for _ in 0..2 {
        for i in 0..9 {
            l[i + 1] += l[i] >> WIDTH[i];
            l[i] &= (1 << WIDTH[i]) - 1;
        }
        l[0] += 19 * (l[9] >> 25);
        l[9] &= (1 << 25) - 1;
    }
    // Now every limb is within its width except possibly limb 0 by a few units, so v < 2^255 + 2^6:
    // one more carry pass keeps it exact.
    for i in 0..9 {
        l[i + 1] += l[i] >> WIDTH[i];
        l[i] &= (1 << WIDTH[i]) - 1;
    }
    // v < 2^255 (limb 9 < 2^25 after its own carry is folded); reduce v mod p by subtracting p once
    // when v ≥ p, i.e. when v + 19 ≥ 2^255.
    let mut w = [0u64; 4];
    for i in 0..10 {
        let (word, bit) = ((OFFSET[i] / 64) as usize, OFFSET[i] % 64);
        w[word] |= l[i] << bit;
        if bit + WIDTH[i] > 64 && word + 1 < 4 {
            w[word + 1] |= l[i] >> (64 - bit);
        }
    }
    // t = v + 19; if bit 255 of t is set, v ≥ p and the result is t − 2^255.
    let mut t = [0u64; 4];
    let mut carry = 19u128;
    for i in 0..4 {
        let s = w[i] as u128 + carry;
        t[i] = s as u64;
        carry = s >> 64;
    }
    let ge = 0u64.wrapping_sub(t[3] >> 63); // all ones when v ≥ p
    t[3] &= (1 << 63) - 1;
    let mut out = [0u8; 32];
    for i in 0..4 {
        let r = (t[i] & ge) | (w[i] & !ge);
        out[8 * i..8 * i + 8].copy_from_slice(&r.to_le_bytes());
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::{WIDTH, bytes_from_limbs, limbs_from_bytes};
    use core::arch::x86_64::*;
    use zeroize::Zeroize;

    /// Four field elements, limb-sliced: `self.0[i]` holds limb `i` of every lane.
    #[derive(Clone, Copy)]
    struct Fe([__m256i; 10]);

    /// 2p, limb-wise: the subtraction bias (each limb above any reduced limb).
    const TWO_P: [u64; 10] = [
        2 * ((1 << 26) - 19),
        2 * ((1 << 25) - 1),
        2 * ((1 << 26) - 1),
        2 * ((1 << 25) - 1),
        2 * ((1 << 26) - 1),
        2 * ((1 << 25) - 1),
        2 * ((1 << 26) - 1),
        2 * ((1 << 25) - 1),
        2 * ((1 << 26) - 1),
        2 * ((1 << 25) - 1),
    ];

    #[target_feature(enable = "avx2")]
    #[inline]
    fn splat(x: u64) -> __m256i {
        _mm256_set1_epi64x(x as i64)
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn lane(v: __m256i, i: usize) -> u64 {
        (match i {
            0 => _mm256_extract_epi64::<0>(v),
            1 => _mm256_extract_epi64::<1>(v),
            2 => _mm256_extract_epi64::<2>(v),
            _ => _mm256_extract_epi64::<3>(v),
        }) as u64
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn from_lanes(l: [[u64; 10]; 4]) -> Fe {
        let mut f = [_mm256_setzero_si256(); 10];
        for i in 0..10 {
            f[i] = _mm256_set_epi64x(
                l[3][i] as i64,
                l[2][i] as i64,
                l[1][i] as i64,
                l[0][i] as i64,
            );
        }
        Fe(f)
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn to_lanes(f: &Fe) -> [[u64; 10]; 4] {
        let mut l = [[0u64; 10]; 4];
        for i in 0..10 {
            for (j, lj) in l.iter_mut().enumerate() {
                lj[i] = lane(f.0[i], j);
            }
        }
        l
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn konst(x: u64) -> Fe {
        let mut f = [_mm256_setzero_si256(); 10];
        f[0] = splat(x);
        Fe(f)
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn add(f: &Fe, g: &Fe) -> Fe {
        let mut h = f.0;
        for i in 0..10 {
            h[i] = _mm256_add_epi64(f.0[i], g.0[i]);
        }
        Fe(h)
    }

    /// `f + 2p − g`; `g` must be reduced.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sub(f: &Fe, g: &Fe) -> Fe {
        let mut h = f.0;
        for i in 0..10 {
            h[i] = _mm256_sub_epi64(_mm256_add_epi64(f.0[i], splat(TWO_P[i])), g.0[i]);
        }
        Fe(h)
    }

    /// `19·c` for a 64-bit lane value (c may exceed 32 bits, so no `vpmuludq`).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn times19(c: __m256i) -> __m256i {
        _mm256_add_epi64(
            _mm256_add_epi64(_mm256_slli_epi64::<4>(c), _mm256_slli_epi64::<1>(c)),
            c,
        )
    }

    /// One carry round over column sums below 2^63 (ref10's interleaved order): afterwards even
    /// limbs < 2^26, odd limbs < 2^25 + 2^15.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn carry(mut h: [__m256i; 10]) -> Fe {
        let m26 = splat((1 << 26) - 1);
        let m25 = splat((1 << 25) - 1);
        macro_rules! step {
            ($i:expr) => {{
                if WIDTH[$i] == 26 {
                    let c = _mm256_srli_epi64::<26>(h[$i]);
                    h[$i] = _mm256_and_si256(h[$i], m26);
                    c
                } else {
                    let c = _mm256_srli_epi64::<25>(h[$i]);
                    h[$i] = _mm256_and_si256(h[$i], m25);
                    c
                }
            }};
        }
        let c = step!(0);
        h[1] = _mm256_add_epi64(h[1], c);
        let c = step!(4);
        h[5] = _mm256_add_epi64(h[5], c);
        let c = step!(1);
        h[2] = _mm256_add_epi64(h[2], c);
        let c = step!(5);
        h[6] = _mm256_add_epi64(h[6], c);
        let c = step!(2);
        h[3] = _mm256_add_epi64(h[3], c);
        let c = step!(6);
        h[7] = _mm256_add_epi64(h[7], c);
        let c = step!(3);
        h[4] = _mm256_add_epi64(h[4], c);
        let c = step!(7);
        h[8] = _mm256_add_epi64(h[8], c);
        let c = step!(4);
        h[5] = _mm256_add_epi64(h[5], c);
        let c = step!(8);
        h[9] = _mm256_add_epi64(h[9], c);
        let c = step!(9);
        h[0] = _mm256_add_epi64(h[0], times19(c));
        let c = step!(0);
        h[1] = _mm256_add_epi64(h[1], c);
        Fe(h)
    }

    /// One partial product of four lanes: the low 32 bits of each 64-bit lane, multiplied.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn m(a: __m256i, b: __m256i) -> __m256i {
        _mm256_mul_epu32(a, b)
    }

    /// The sum of a column's partial products.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sum<const N: usize>(t: [__m256i; N]) -> __m256i {
        let mut acc = t[0];
        for x in &t[1..] {
            acc = _mm256_add_epi64(acc, *x);
        }
        acc
    }

    /// `f · g` (ref10 `fe_mul`, four lanes): h_k = Σ_{i+j≡k (mod 10)} f_i·g_j, doubled when i and j
    /// are both odd (two half-limb offsets make a whole bit), times 19 when i + j ≥ 10.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn mul(f: &Fe, g: &Fe) -> Fe {
        let n19 = splat(19);
        let [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9] = f.0;
        let [g0, g1, g2, g3, g4, g5, g6, g7, g8, g9] = g.0;
        let f1_2 = _mm256_add_epi64(f1, f1);
        let f3_2 = _mm256_add_epi64(f3, f3);
        let f5_2 = _mm256_add_epi64(f5, f5);
        let f7_2 = _mm256_add_epi64(f7, f7);
        let f9_2 = _mm256_add_epi64(f9, f9);
        let g1_19 = _mm256_mul_epu32(g1, n19);
        let g2_19 = _mm256_mul_epu32(g2, n19);
        let g3_19 = _mm256_mul_epu32(g3, n19);
        let g4_19 = _mm256_mul_epu32(g4, n19);
        let g5_19 = _mm256_mul_epu32(g5, n19);
        let g6_19 = _mm256_mul_epu32(g6, n19);
        let g7_19 = _mm256_mul_epu32(g7, n19);
        let g8_19 = _mm256_mul_epu32(g8, n19);
        let g9_19 = _mm256_mul_epu32(g9, n19);
        let h0 = sum([
            m(f0, g0),
            m(f1_2, g9_19),
            m(f2, g8_19),
            m(f3_2, g7_19),
            m(f4, g6_19),
            m(f5_2, g5_19),
            m(f6, g4_19),
            m(f7_2, g3_19),
            m(f8, g2_19),
            m(f9_2, g1_19),
        ]);
        let h1 = sum([
            m(f0, g1),
            m(f1, g0),
            m(f2, g9_19),
            m(f3, g8_19),
            m(f4, g7_19),
            m(f5, g6_19),
            m(f6, g5_19),
            m(f7, g4_19),
            m(f8, g3_19),
            m(f9, g2_19),
        ]);
        let h2 = sum([
            m(f0, g2),
            m(f1_2, g1),
            m(f2, g0),
            m(f3_2, g9_19),
            m(f4, g8_19),
            m(f5_2, g7_19),
            m(f6, g6_19),
            m(f7_2, g5_19),
            m(f8, g4_19),
            m(f9_2, g3_19),
        ]);
        let h3 = sum([
            m(f0, g3),
            m(f1, g2),
            m(f2, g1),
            m(f3, g0),
            m(f4, g9_19),
            m(f5, g8_19),
            m(f6, g7_19),
            m(f7, g6_19),
            m(f8, g5_19),
            m(f9, g4_19),
        ]);
        let h4 = sum([
            m(f0, g4),
            m(f1_2, g3),
            m(f2, g2),
            m(f3_2, g1),
            m(f4, g0),
            m(f5_2, g9_19),
            m(f6, g8_19),
            m(f7_2, g7_19),
            m(f8, g6_19),
            m(f9_2, g5_19),
        ]);
        let h5 = sum([
            m(f0, g5),
            m(f1, g4),
            m(f2, g3),
            m(f3, g2),
            m(f4, g1),
            m(f5, g0),
            m(f6, g9_19),
            m(f7, g8_19),
            m(f8, g7_19),
            m(f9, g6_19),
        ]);
        let h6 = sum([
            m(f0, g6),
            m(f1_2, g5),
            m(f2, g4),
            m(f3_2, g3),
            m(f4, g2),
            m(f5_2, g1),
            m(f6, g0),
            m(f7_2, g9_19),
            m(f8, g8_19),
            m(f9_2, g7_19),
        ]);
        let h7 = sum([
            m(f0, g7),
            m(f1, g6),
            m(f2, g5),
            m(f3, g4),
            m(f4, g3),
            m(f5, g2),
            m(f6, g1),
            m(f7, g0),
            m(f8, g9_19),
            m(f9, g8_19),
        ]);
        let h8 = sum([
            m(f0, g8),
            m(f1_2, g7),
            m(f2, g6),
            m(f3_2, g5),
            m(f4, g4),
            m(f5_2, g3),
            m(f6, g2),
            m(f7_2, g1),
            m(f8, g0),
            m(f9_2, g9_19),
        ]);
        let h9 = sum([
            m(f0, g9),
            m(f1, g8),
            m(f2, g7),
            m(f3, g6),
            m(f4, g5),
            m(f5, g4),
            m(f6, g3),
            m(f7, g2),
            m(f8, g1),
            m(f9, g0),
        ]);
        carry([h0, h1, h2, h3, h4, h5, h6, h7, h8, h9])
    }

    /// `f²` with the 55 distinct products (ref10 `fe_sq`).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn square(f: &Fe) -> Fe {
        let n19 = splat(19);
        let [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9] = f.0;
        let f0_2 = _mm256_add_epi64(f0, f0);
        let f1_2 = _mm256_add_epi64(f1, f1);
        let f2_2 = _mm256_add_epi64(f2, f2);
        let f3_2 = _mm256_add_epi64(f3, f3);
        let f4_2 = _mm256_add_epi64(f4, f4);
        let f5_2 = _mm256_add_epi64(f5, f5);
        let f6_2 = _mm256_add_epi64(f6, f6);
        let f7_2 = _mm256_add_epi64(f7, f7);
        let f8_2 = _mm256_add_epi64(f8, f8);
        let f9_2 = _mm256_add_epi64(f9, f9);
        let f1_4 = _mm256_add_epi64(f1_2, f1_2);
        let f3_4 = _mm256_add_epi64(f3_2, f3_2);
        let f5_4 = _mm256_add_epi64(f5_2, f5_2);
        let f7_4 = _mm256_add_epi64(f7_2, f7_2);
        let f5_19 = _mm256_mul_epu32(f5, n19);
        let f6_19 = _mm256_mul_epu32(f6, n19);
        let f7_19 = _mm256_mul_epu32(f7, n19);
        let f8_19 = _mm256_mul_epu32(f8, n19);
        let f9_19 = _mm256_mul_epu32(f9, n19);
        let h0 = sum([
            m(f0, f0),
            m(f1_4, f9_19),
            m(f2_2, f8_19),
            m(f3_4, f7_19),
            m(f4_2, f6_19),
            m(f5_2, f5_19),
        ]);
        let h1 = sum([
            m(f0_2, f1),
            m(f2_2, f9_19),
            m(f3_2, f8_19),
            m(f4_2, f7_19),
            m(f5_2, f6_19),
        ]);
        let h2 = sum([
            m(f0_2, f2),
            m(f1_2, f1),
            m(f3_4, f9_19),
            m(f4_2, f8_19),
            m(f5_4, f7_19),
            m(f6, f6_19),
        ]);
        let h3 = sum([
            m(f0_2, f3),
            m(f1_2, f2),
            m(f4_2, f9_19),
            m(f5_2, f8_19),
            m(f6_2, f7_19),
        ]);
        let h4 = sum([
            m(f0_2, f4),
            m(f1_4, f3),
            m(f2, f2),
            m(f5_4, f9_19),
            m(f6_2, f8_19),
            m(f7_2, f7_19),
        ]);
        let h5 = sum([
            m(f0_2, f5),
            m(f1_2, f4),
            m(f2_2, f3),
            m(f6_2, f9_19),
            m(f7_2, f8_19),
        ]);
        let h6 = sum([
            m(f0_2, f6),
            m(f1_4, f5),
            m(f2_2, f4),
            m(f3_2, f3),
            m(f7_4, f9_19),
            m(f8, f8_19),
        ]);
        let h7 = sum([
            m(f0_2, f7),
            m(f1_2, f6),
            m(f2_2, f5),
            m(f3_2, f4),
            m(f8_2, f9_19),
        ]);
        let h8 = sum([
            m(f0_2, f8),
            m(f1_4, f7),
            m(f2_2, f6),
            m(f3_4, f5),
            m(f4, f4),
            m(f9_2, f9_19),
        ]);
        let h9 = sum([
            m(f0_2, f9),
            m(f1_2, f8),
            m(f2_2, f7),
            m(f3_2, f6),
            m(f4_2, f5),
        ]);
        carry([h0, h1, h2, h3, h4, h5, h6, h7, h8, h9])
    }

    /// `f · 121665` (a24 of RFC 7748), carried.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn mul_a24(f: &Fe) -> Fe {
        let mut h = f.0;
        let a24 = splat(121_665);
        for i in 0..10 {
            h[i] = _mm256_mul_epu32(f.0[i], a24);
        }
        carry(h)
    }

    /// `f^(2^n)`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn square_n(f: &Fe, n: u32) -> Fe {
        let mut t = square(f);
        for _ in 1..n {
            t = square(&t);
        }
        t
    }

    /// `z^(p−2)` (ref10's addition chain: 254 squarings, 11 multiplications); 0 ↦ 0.
    #[target_feature(enable = "avx2")]
    fn invert(z: &Fe) -> Fe {
        let t0 = square(z); // 2
        let t1 = square_n(&t0, 2); // 8
        let t1 = mul(z, &t1); // 9
        let t0 = mul(&t0, &t1); // 11
        let t2 = square(&t0); // 22
        let t1 = mul(&t1, &t2); // 31 = 2^5 − 1
        let t2 = square_n(&t1, 5);
        let t1 = mul(&t2, &t1); // 2^10 − 1
        let t2 = square_n(&t1, 10);
        let t2 = mul(&t2, &t1); // 2^20 − 1
        let t3 = square_n(&t2, 20);
        let t2 = mul(&t3, &t2); // 2^40 − 1
        let t2 = square_n(&t2, 10);
        let t1 = mul(&t2, &t1); // 2^50 − 1
        let t2 = square_n(&t1, 50);
        let t2 = mul(&t2, &t1); // 2^100 − 1
        let t3 = square_n(&t2, 100);
        let t2 = mul(&t3, &t2); // 2^200 − 1
        let t2 = square_n(&t2, 50);
        let t1 = mul(&t2, &t1); // 2^250 − 1
        let t1 = square_n(&t1, 5); // 2^255 − 32
        mul(&t1, &t0) // 2^255 − 21 = p − 2
    }

    /// Swaps `a` and `b` in every lane when `mask` is all ones; leaves them when it is zero.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn cswap(a: &mut Fe, b: &mut Fe, mask: __m256i) {
        for i in 0..10 {
            let t = _mm256_and_si256(_mm256_xor_si256(a.0[i], b.0[i]), mask);
            a.0[i] = _mm256_xor_si256(a.0[i], t);
            b.0[i] = _mm256_xor_si256(b.0[i], t);
        }
    }

    /// The RFC 7748 §5 ladder on four u-coordinates (given as limbs) with one clamped scalar.
    #[target_feature(enable = "avx2")]
    fn ladder(k: &[u8; 32], x1: &Fe) -> Fe {
        let mut x2 = konst(1);
        let mut z2 = konst(0);
        let mut x3 = *x1;
        let mut z3 = konst(1);
        let mut swap = 0u64;
        for t in (0..255).rev() {
            let bit = u64::from((k[t / 8] >> (t % 8)) & 1);
            let mask = splat(0u64.wrapping_sub(swap ^ bit));
            cswap(&mut x2, &mut x3, mask);
            cswap(&mut z2, &mut z3, mask);
            swap = bit;
            let a = add(&x2, &z2);
            let aa = square(&a);
            let b = sub(&x2, &z2);
            let bb = square(&b);
            let e = sub(&aa, &bb);
            let c = add(&x3, &z3);
            let d = sub(&x3, &z3);
            let da = mul(&d, &a);
            let cb = mul(&c, &b);
            x3 = square(&add(&da, &cb));
            z3 = mul(x1, &square(&sub(&da, &cb)));
            x2 = mul(&aa, &bb);
            z2 = mul(&e, &add(&aa, &mul_a24(&e)));
        }
        let mask = splat(0u64.wrapping_sub(swap));
        cswap(&mut x2, &mut x3, mask);
        cswap(&mut z2, &mut z3, mask);
        mul(&x2, &invert(&z2))
    }

    /// Entry point.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn x25519_batch(k: &[u8; 32], u: &[[u8; 32]], out: &mut [[u8; 32]]) {
        let mut key = *k;
        key[0] &= 248;
        key[31] &= 127;
        key[31] |= 64;
        for (us, os) in u.chunks(4).zip(out.chunks_mut(4)) {
            let mut lanes = [[0u64; 10]; 4];
            for (l, ui) in lanes.iter_mut().zip(us) {
                *l = limbs_from_bytes(ui);
            }
            let x = ladder(&key, &from_lanes(lanes));
            let res = to_lanes(&x);
            for (o, l) in os.iter_mut().zip(res.iter()) {
                *o = bytes_from_limbs(l);
            }
        }
        key.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;
    use curve25519_dalek::MontgomeryPoint;

    fn bytes32(rng: &mut Rng) -> [u8; 32] {
        let mut b = [0u8; 32];
        for c in b.chunks_exact_mut(8) {
            c.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        b
    }

    fn dalek(k: &[u8; 32], u: &[u8; 32]) -> [u8; 32] {
        MontgomeryPoint(*u).mul_clamped(*k).0
    }

    #[test]
    fn limbs_round_trip_canonical_values() {
        let mut rng = Rng(7);
        for _ in 0..1000 {
            let mut b = bytes32(&mut rng);
            b[31] &= 0x7f;
            let mut p_le = [0xffu8; 32];
            p_le[0] = 0xed;
            p_le[31] = 0x7f;
            // Reduce non-canonical samples (≥ p) the way the encoder would: skip them here.
            if b.iter().rev().cmp(p_le.iter().rev()) != std::cmp::Ordering::Less {
                continue;
            }
            assert_eq!(bytes_from_limbs(&limbs_from_bytes(&b)), b);
        }
    }

    #[test]
    fn encoding_reduces_values_at_and_above_p() {
        // p ↦ 0, p + 1 ↦ 1, 2^255 − 1 ↦ 18.
        let mut p = [0xffu8; 32];
        p[0] = 0xed;
        p[31] = 0x7f;
        assert_eq!(bytes_from_limbs(&limbs_from_bytes(&p)), [0u8; 32]);
        let mut p1 = p;
        p1[0] = 0xee;
        let mut one = [0u8; 32];
        one[0] = 1;
        assert_eq!(bytes_from_limbs(&limbs_from_bytes(&p1)), one);
        let mut top = [0xffu8; 32];
        top[31] = 0x7f;
        let mut eighteen = [0u8; 32];
        eighteen[0] = 18;
        assert_eq!(bytes_from_limbs(&limbs_from_bytes(&top)), eighteen);
    }

    /// The kernel (whichever path this CPU takes) against dalek on random keys and points, batch
    /// lengths that are not multiples of four included.
    #[test]
    fn matches_dalek_on_random_inputs() {
        let mut rng = Rng(11);
        for n in [0usize, 1, 3, 4, 5, 8, 13] {
            let k = bytes32(&mut rng);
            let us: Vec<[u8; 32]> = (0..n).map(|_| bytes32(&mut rng)).collect();
            let mut out = vec![[0u8; 32]; n];
            x25519_batch(&k, &us, &mut out);
            for (u, o) in us.iter().zip(&out) {
                assert_eq!(*o, dalek(&k, u), "n = {n}");
            }
        }
    }

    /// Edge inputs: zero, one, the low-order points, values ≥ p, the top bit set; edge keys.
    #[test]
    fn matches_dalek_on_edge_inputs() {
        let mut edge: Vec<[u8; 32]> = Vec::new();
        let hex = |s: &str| {
            let mut b = [0u8; 32];
            for (i, byte) in b.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0);
            }
            b
        };
        // The low-order u-coordinates listed by Bernstein (cr.yp.to/ecdh.html#validate).
        for s in [
            "0000000000000000000000000000000000000000000000000000000000000000",
            "0100000000000000000000000000000000000000000000000000000000000000",
            "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
            "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
            "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
            "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
            "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
            "cdeb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b880",
            "4c9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f11d7",
            "d9ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
            "daffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
            "dbffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
            "0900000000000000000000000000000000000000000000000000000000000000",
            "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        ] {
            edge.push(hex(s));
        }
        let keys = [[0u8; 32], [0xffu8; 32], {
            let mut k = [0u8; 32];
            k[0] = 1;
            k
        }];
        for k in &keys {
            let mut out = vec![[0u8; 32]; edge.len()];
            x25519_batch(k, &edge, &mut out);
            for (u, o) in edge.iter().zip(&out) {
                assert_eq!(*o, dalek(k, u));
            }
        }
    }

    /// RFC 7748 §5.2 test vector 1.
    #[test]
    fn rfc7748_vector() {
        let hex = |s: &str| {
            let mut b = [0u8; 32];
            for (i, byte) in b.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0);
            }
            b
        };
        let k = hex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4");
        let u = hex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c");
        let want = hex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552");
        let mut out = [[0u8; 32]];
        x25519_batch(&k, &[u], &mut out);
        assert_eq!(out[0], want);
    }
}
