//! 8-lane AVX-512 IFMA kernels for X25519 and for hashing to Curve25519.
//!
//! # Representation
//!
//! A field element of GF(p), p = 2^255 − 19, is kept in radix 2^51 as five 64-bit limbs,
//! `v = l0 + l1·2^51 + l2·2^102 + l3·2^153 + l4·2^204`. Eight independent elements ("lanes") are
//! packed limb-wise into five `__m512i` registers: register `i` holds limb `i` of all eight lanes,
//! so one instruction stream performs eight independent field operations.
//!
//! Radix 2^51 (rather than 2^52) leaves one bit of headroom under the 52-bit multiplier inputs of
//! `vpmadd52{lo,hi}uq`, and 2^255 lands exactly on a limb boundary so the wrap-around factor is
//! 19. The working invariant ("loose") is: every limb < 2^51 + 2^18 (< 2^52, so a valid IFMA
//! input); the value is only congruent to the element, not reduced.
//!
//! # Multiplication and reduction
//!
//! A product `a·b` accumulates the 25 partial products with `madd52lo` (bits 0..51 of `ai·bj`,
//! weight 2^(51(i+j))) and `madd52hi` (bits 52..103, weight 2^(51(i+j)+52) = 2·2^(51(i+j+1))) into
//! ten column sums `c_k = lo_k + 2·hi_k < 15·2^52`. Columns 5..9 wrap with 2^255 ≡ 19:
//! `r_k = c_k + 19·c_{k+5} < 2^61` (19h = 16h + 2h + h; an empty inline-asm barrier keeps LLVM
//! from turning that into an emulated 64-bit multiply). These "wide" limbs are accepted by
//! additions and subtractions only; one *parallel* carry round (every limb at once:
//! `l_k = (r_k mod 2^51) + (r_{k−1} >> 51)`, with `19·(r_4 >> 51)` folded into limb 0 by one more
//! `madd52lo`) makes them loose again. Additions and subtractions (`a + 2^11·p − b`, the bias
//! exceeding any wide limb) end with such a carry round, so every operand that reaches a
//! multiplier is loose. A *sequential* carry instead gives "tight" limbs (limbs 1..4 < 2^51);
//! squaring a tight value takes its cross products as `a_i · (2·a_j)` (2·a_j < 2^52 since j ≥ 1), so
//! it needs 15 products and no extra doubling. Squares of other values compute the 15 products
//! and double the cross-term columns. Only when a canonical value is needed (output bytes,
//! equality tests, `sgn0`) is a full sequential carry plus a conditional subtraction of p done.
//!
//! # Ladder
//!
//! `x25519_batch` runs the RFC 7748 §5 Montgomery ladder (255 steps, `a24 = 121665`) for eight
//! u-coordinates per instruction stream with the same clamped scalar. The conditional swap is
//! a pair of `vpblendmq` per limb under a lane mask `m ∈ {0x00, 0xff}` computed arithmetically
//! (`−bit`) from the key bit; no branch and no memory index depends on the key or on u. The
//! final `x2 / z2` uses Montgomery's simultaneous-inversion trick across up to [`CHUNK`]
//! vectors (one Fermat inversion `z^(p−2)` per chunk); lanes whose `z2 ≡ 0` (low-order u) are
//! replaced by 1 before the product and their result is forced to 0 by mask, matching
//! `0^(p−2) = 0` in RFC 7748. The top bit of u is masked and u ≥ p is accepted (it is simply reduced by the arithmetic).
//!
//! # Hash to curve
//!
//! `hash_to_montgomery_batch` implements `edwards25519_XMD:SHA-512_ELL2_RO_` (RFC 9380) exactly
//! as curve25519-dalek's `EdwardsPoint::hash_to_curve::<Sha512>` followed by `to_montgomery`:
//! `expand_message_xmd` (SHA-512, 96 bytes) and the reduction of the two 48-byte big-endian
//! strings mod p run serially; then, eight lanes wide: the straight-line
//! `map_to_curve_elligator2_curve25519` of RFC 9380 App. G.2.1 (one `(p−5)/8` exponentiation per
//! map; all choices by `CMOV` = mask blend, `sgn0` from the canonical value), the rational map to
//! edwards25519 of App. G.2.2 (including its exceptional case), the complete twisted-Edwards
//! addition `add-2008-hwcd-3`, three doublings `dbl-2008-hwcd` (cofactor 8), and
//! `u = (Z + Y)/(Z − Y)` with a batched inversion (identity → u = 0, as dalek). A DST longer than
//! 255 bytes is first replaced by `SHA-512("H2C-OVERSIZE-DST-" ‖ DST)` (RFC 9380 §5.3.3); an empty
//! DST, which RFC 9380 forbids, yields all-zero outputs.
//!
//! # Run-time selection and SAFETY
//!
//! The kernels are compiled with `#[target_feature(enable = "avx512f,avx512ifma,avx512vl")]` and
//! only entered after `is_x86_feature_detected!` confirmed all three features (see
//! [`available`]); without them (or off x86-64) both entry points fall back to curve25519-dalek's
//! serial code. Besides entering the kernels, the only `unsafe` operations are unaligned vector
//! loads and stores from/to local `[u64; 8]` arrays (always in bounds) and an empty `asm!` optimisation
//! barrier that only names one vector register. The kernels never index memory with secret data
//! and never branch on it: the key bits drive lane masks, the Elligator choices are mask blends,
//! equality tests and zero tests are computed as masks.
#![allow(unsafe_code)] // with a `// SAFETY:` comment on every unsafe block
#![allow(clippy::needless_range_loop)]

use curve25519_dalek::EdwardsPoint;
use sha2::{Digest, Sha512};

/// Number of 8-lane vectors whose final inversions are batched together (stack buffers only).
const CHUNK: usize = 32;

/// Whether this CPU can run the kernel (avx512f + avx512ifma + avx512vl, detected at run time).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512ifma")
            && std::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[i] = X25519(k, u[i])` exactly as RFC 7748 §5 (k clamped; u's top bit masked; non-canonical
/// u (>= p) accepted and reduced; output canonical little-endian), equal to
/// `curve25519_dalek::MontgomeryPoint(u[i]).mul_clamped(*k).0`.
///
/// Processes eight lanes per instruction stream with AVX-512 IFMA when [`available`], otherwise
/// falls back to dalek's serial ladder. Only the first `min(u.len(), out.len())` entries are
/// processed; extra entries of `out` are left untouched. Never panics.
pub(crate) fn x25519_batch(k: &[u8; 32], u: &[[u8; 32]], out: &mut [[u8; 32]]) {
    let n = u.len().min(out.len());
    let (u, out) = (&u[..n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: `available()` just confirmed avx512f, avx512ifma and avx512vl, the exact target
        // features `imp::x25519_batch` is compiled for.
        unsafe { imp::x25519_batch(k, u, out) };
        return;
    }
    crate::x25519::x25519_serial(k, u, out);
}

/// `out[i]` = the Montgomery u-coordinate (canonical little-endian bytes) of RFC 9380
/// `hash_to_curve` with suite `edwards25519_XMD:SHA-512_ELL2_RO_` applied to `msgs[i]` with domain
/// separation tag `dst`; equal to
/// `EdwardsPoint::hash_to_curve::<Sha512>(&[&msgs[i]], &[dst]).to_montgomery().0` (cofactor
/// cleared). The hash-to-field step is serial; the maps, the addition, the cofactor clearing and
/// the batched inversion run eight lanes wide when [`available`], otherwise dalek is used.
///
/// Only the first `min(msgs.len(), out.len())` entries are processed. A `dst` longer than 255 bytes
/// is reduced as RFC 9380 §5.3.3 prescribes; an empty `dst` (forbidden by RFC 9380) gives all-zero
/// outputs. Never panics.
pub(crate) fn hash_to_montgomery_batch(dst: &[u8], msgs: &[[u8; 16]], out: &mut [[u8; 32]]) {
    hash_to_montgomery_impl(dst, msgs, out);
}

/// [`hash_to_montgomery_batch`] for messages of any length.
fn hash_to_montgomery_impl<M: AsRef<[u8]>>(dst: &[u8], msgs: &[M], out: &mut [[u8; 32]]) {
    let n = msgs.len().min(out.len());
    let (msgs, out) = (&msgs[..n], &mut out[..n]);
    if dst.is_empty() {
        out.iter_mut().for_each(|o| *o = [0u8; 32]);
        return;
    }
    let long_dst: [u8; 64];
    let dst: &[u8] = if dst.len() > 255 {
        let mut h = Sha512::new();
        h.update(b"H2C-OVERSIZE-DST-");
        h.update(dst);
        long_dst = h.finalize().into();
        &long_dst
    } else {
        dst
    };
    #[cfg(target_arch = "x86_64")]
    if available() {
        let xmd = Xmd::new(dst);
        // SAFETY: `available()` just confirmed avx512f, avx512ifma and avx512vl, the exact target
        // features `imp::hash_batch` is compiled for.
        unsafe { imp::hash_batch(&xmd, msgs, out) };
        return;
    }
    for (mc, oc) in msgs.chunks(256).zip(out.chunks_mut(256)) {
        let pts: Vec<EdwardsPoint> = mc
            .iter()
            .map(|m| EdwardsPoint::hash_to_curve::<Sha512>(&[m.as_ref()], &[dst]))
            .collect();
        for (o, m) in oc.iter_mut().zip(EdwardsPoint::to_montgomery_batch(&pts)) {
            *o = m.0;
        }
    }
}

const MASK51: u64 = (1 << 51) - 1;

/// `expand_message_xmd` (RFC 9380 §5.3.1) with SHA-512 for 96 output bytes, turned into the two
/// field elements of `hash_to_field` (L = 48, big-endian, reduced mod p). Serial code.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Xmd {
    /// SHA-512 state after absorbing `Z_pad` (one 128-byte block of zeros).
    zpad: Sha512,
    /// `DST_prime = DST ‖ I2OSP(len(DST), 1)`.
    dst_prime: [u8; 256],
    dst_prime_len: usize,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl Xmd {
    /// `dst` must be 1..=255 bytes (longer tags are truncated; callers reduce them first).
    fn new(dst: &[u8]) -> Self {
        let len = dst.len().min(255);
        let mut dst_prime = [0u8; 256];
        dst_prime[..len].copy_from_slice(&dst[..len]);
        dst_prime[len] = len as u8;
        let mut zpad = Sha512::new();
        zpad.update([0u8; 128]);
        Xmd {
            zpad,
            dst_prime,
            dst_prime_len: len + 1,
        }
    }

    /// The two field elements, as radix-2^51 limbs each below 2^56 (not yet carried).
    fn hash_to_field(&self, msg: &[u8]) -> [[u64; 5]; 2] {
        let dstp = &self.dst_prime[..self.dst_prime_len];
        let mut h = self.zpad.clone();
        h.update(msg);
        h.update([0u8, 96, 0]); // I2OSP(96, 2) ‖ I2OSP(0, 1)
        h.update(dstp);
        let b0: [u8; 64] = h.finalize().into();
        let mut h = Sha512::new();
        h.update(b0);
        h.update([1u8]);
        h.update(dstp);
        let b1: [u8; 64] = h.finalize().into();
        let mut x = [0u8; 64];
        for i in 0..64 {
            x[i] = b0[i] ^ b1[i];
        }
        let mut h = Sha512::new();
        h.update(x);
        h.update([2u8]);
        h.update(dstp);
        let b2: [u8; 64] = h.finalize().into();
        let mut e0 = [0u8; 48];
        let mut e1 = [0u8; 48];
        e0.copy_from_slice(&b1[..48]);
        e1[..16].copy_from_slice(&b1[48..]);
        e1[16..].copy_from_slice(&b2[..32]);
        [limbs_from_be48(&e0), limbs_from_be48(&e1)]
    }
}

/// A 384-bit big-endian integer as five radix-2^51 limbs of a congruent value (each < 2^56).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn limbs_from_be48(b: &[u8; 48]) -> [u64; 5] {
    // Little-endian 64-bit words w[0] (least significant) ..= w[5].
    let mut w = [0u64; 7];
    for i in 0..6 {
        let mut v = 0u64;
        for j in 0..8 {
            v = (v << 8) | u64::from(b[48 - 8 * (i + 1) + j]);
        }
        w[i] = v;
    }
    let bits = |start: usize| -> u64 {
        let (q, r) = (start / 64, start % 64);
        let lo = w[q] >> r;
        let hi = if r == 0 { 0 } else { w[q + 1] << (64 - r) };
        (lo | hi) & MASK51
    };
    let l: [u64; 8] = core::array::from_fn(|j| bits(51 * j));
    // 2^255 ≡ 19: limbs 5..7 fold onto limbs 0..2.
    [
        l[0] + 19 * l[5],
        l[1] + 19 * l[6],
        l[2] + 19 * l[7],
        l[3],
        l[4],
    ]
}

/// 32 little-endian bytes (top bit ignored) as five radix-2^51 limbs, each < 2^51.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn limbs_from_bytes(b: &[u8; 32]) -> [u64; 5] {
    let mut w = [0u64; 4];
    for i in 0..4 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[8 * i..8 * i + 8]);
        w[i] = u64::from_le_bytes(v);
    }
    w[3] &= (1 << 63) - 1;
    [
        w[0] & MASK51,
        ((w[0] >> 51) | (w[1] << 13)) & MASK51,
        ((w[1] >> 38) | (w[2] << 26)) & MASK51,
        ((w[2] >> 25) | (w[3] << 39)) & MASK51,
        w[3] >> 12,
    ]
}

/// Canonical radix-2^51 limbs (each < 2^51, value < p) to 32 little-endian bytes.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn bytes_from_limbs(l: &[u64; 5]) -> [u8; 32] {
    let w = [
        l[0] | (l[1] << 51),
        (l[1] >> 13) | (l[2] << 38),
        (l[2] >> 26) | (l[3] << 25),
        (l[3] >> 39) | (l[4] << 12),
    ];
    let mut out = [0u8; 32];
    for i in 0..4 {
        out[8 * i..8 * i + 8].copy_from_slice(&w[i].to_le_bytes());
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::{CHUNK, MASK51, Xmd, bytes_from_limbs, limbs_from_bytes};
    use core::arch::x86_64::*;
    use zeroize::Zeroize;

    /// Eight field elements, limb-sliced: `self.0[i]` holds limb `i` of every lane.
    #[derive(Clone, Copy)]
    struct Fe([__m512i; 5]);

    /// 2^11·p in radix 2^51 (limb-wise larger than any wide limb < 2^61), the subtraction bias.
    const BIAS: [u64; 5] = [
        ((1 << 51) - 19) << 11,
        MASK51 << 11,
        MASK51 << 11,
        MASK51 << 11,
        MASK51 << 11,
    ];
    /// sqrt(−1) (the root with sgn0 = 0).
    const SQRT_M1: [u64; 5] = [
        0x61b274a0ea0b0,
        0xd5a5fc8f189d,
        0x7ef5e9cbd0c60,
        0x78595a6804c9e,
        0x2b8324804fc1d,
    ];
    /// c2 = 2^((p+3)/8) of RFC 9380 G.2.1.
    const ELL2_C2: [u64; 5] = [
        0x61b274a0ea0b1,
        0xd5a5fc8f189d,
        0x7ef5e9cbd0c60,
        0x78595a6804c9e,
        0x2b8324804fc1d,
    ];
    /// −J = −486662 mod p.
    const NEG_J: [u64; 5] = [0x7fffffff892e7, MASK51, MASK51, MASK51, MASK51];
    /// c1 = sqrt(−486664) of RFC 9380 G.2.2 (sgn0 = 0).
    const SQRT_AM2: [u64; 5] = [
        0x604aaff457e06,
        0x2296fa350598d,
        0x7f13dfb16874f,
        0x35de93d846e01,
        0xf26edf460a00,
    ];
    /// 2d for edwards25519, d = −121665/121666.
    const EDWARDS_D2: [u64; 5] = [
        0x69b9426b2f159,
        0x35050762add7a,
        0x3cf44c0038052,
        0x6738cc7407977,
        0x2406d9dc56dff,
    ];

    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn splat(x: u64) -> __m512i {
        _mm512_set1_epi64(x as i64)
    }

    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn konst(l: [u64; 5]) -> Fe {
        Fe([
            splat(l[0]),
            splat(l[1]),
            splat(l[2]),
            splat(l[3]),
            splat(l[4]),
        ])
    }

    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn small(x: u64) -> Fe {
        konst([x, 0, 0, 0, 0])
    }

    /// Transposes eight lanes of limbs into a vector element.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn load(lanes: &[[u64; 5]; 8]) -> Fe {
        let mut v = [_mm512_setzero_si512(); 5];
        for i in 0..5 {
            let col: [u64; 8] = core::array::from_fn(|j| lanes[j][i]);
            // SAFETY: `col` is a live local array of 8 u64 = 64 bytes; the load is unaligned.
            v[i] = unsafe { _mm512_loadu_epi64(col.as_ptr().cast::<i64>()) };
        }
        Fe(v)
    }

    /// Transposes a vector element back into eight lanes of limbs.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn store(a: &Fe) -> [[u64; 5]; 8] {
        let mut out = [[0u64; 5]; 8];
        for i in 0..5 {
            let mut col = [0u64; 8];
            // SAFETY: `col` is a live local array of 8 u64 = 64 bytes; the store is unaligned.
            unsafe { _mm512_storeu_epi64(col.as_mut_ptr().cast::<i64>(), a.0[i]) };
            for j in 0..8 {
                out[j][i] = col[j];
            }
        }
        out
    }

    /// One parallel carry round: limbs of any size < 2^64 in, loose limbs (< 2^51 + 2^18) out.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn carry(r: [__m512i; 5]) -> Fe {
        let m = splat(MASK51);
        let c: [__m512i; 5] = core::array::from_fn(|i| _mm512_srli_epi64::<51>(r[i]));
        Fe([
            _mm512_madd52lo_epu64(_mm512_and_si512(r[0], m), c[4], splat(19)),
            _mm512_add_epi64(_mm512_and_si512(r[1], m), c[0]),
            _mm512_add_epi64(_mm512_and_si512(r[2], m), c[1]),
            _mm512_add_epi64(_mm512_and_si512(r[3], m), c[2]),
            _mm512_add_epi64(_mm512_and_si512(r[4], m), c[3]),
        ])
    }

    /// Sequential carry: limbs < 2^63 in; limbs 1..4 < 2^51 and limb 0 < 2^51 + 2^18 out ("tight").
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn carry_seq(mut r: [__m512i; 5]) -> Fe {
        let m = splat(MASK51);
        for i in 0..4 {
            let c = _mm512_srli_epi64::<51>(r[i]);
            r[i] = _mm512_and_si512(r[i], m);
            r[i + 1] = _mm512_add_epi64(r[i + 1], c);
        }
        let c = _mm512_srli_epi64::<51>(r[4]);
        r[4] = _mm512_and_si512(r[4], m);
        r[0] = _mm512_madd52lo_epu64(r[0], c, splat(19));
        Fe(r)
    }

    /// Tight sum (see [`carry_seq`]), an input for [`sqr_tight_wide`].
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn add_tight(a: &Fe, b: &Fe) -> Fe {
        carry_seq(core::array::from_fn(|i| _mm512_add_epi64(a.0[i], b.0[i])))
    }

    /// Tight difference (see [`carry_seq`]), an input for [`sqr_tight_wide`].
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn sub_tight(a: &Fe, b: &Fe) -> Fe {
        carry_seq(core::array::from_fn(|i| {
            _mm512_sub_epi64(_mm512_add_epi64(a.0[i], splat(BIAS[i])), b.0[i])
        }))
    }

    /// Square of a tight element (limbs 1..4 < 2^51), wide limbs out. Since 2·a_j < 2^52 for
    /// j >= 1, the cross products are taken as `a_i · (2 a_j)` and need no extra doubling.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn sqr_tight_wide(a: &Fe) -> Fe {
        let z = _mm512_setzero_si512();
        let d: [__m512i; 5] = core::array::from_fn(|j| _mm512_add_epi64(a.0[j], a.0[j]));
        let mut lo = [z; 10];
        let mut hi = [z; 10];
        for i in 0..5 {
            lo[2 * i] = _mm512_madd52lo_epu64(lo[2 * i], a.0[i], a.0[i]);
            hi[2 * i + 1] = _mm512_madd52hi_epu64(hi[2 * i + 1], a.0[i], a.0[i]);
            for j in i + 1..5 {
                lo[i + j] = _mm512_madd52lo_epu64(lo[i + j], a.0[i], d[j]);
                hi[i + j + 1] = _mm512_madd52hi_epu64(hi[i + j + 1], a.0[i], d[j]);
            }
        }
        let mut c = [z; 10];
        c[0] = lo[0];
        for k in 1..9 {
            c[k] = _mm512_add_epi64(lo[k], _mm512_slli_epi64::<1>(hi[k]));
        }
        c[9] = _mm512_slli_epi64::<1>(hi[9]);
        fold(c)
    }

    /// Folds ten column sums (each < 2^57) mod p, without carrying: "wide" limbs < 2^61.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn fold(c: [__m512i; 10]) -> Fe {
        Fe(core::array::from_fn(|k| {
            let h = c[k + 5];
            // 19h = 16h + 2h + h; `opaque` stops LLVM from turning this into a 64-bit multiply,
            // which without AVX512DQ it would emulate with a longer vpmuludq sequence.
            let h2 = opaque(_mm512_add_epi64(h, h));
            let h16 = opaque(_mm512_slli_epi64::<4>(h));
            let h19 = _mm512_add_epi64(_mm512_add_epi64(h16, h2), h);
            _mm512_add_epi64(c[k], h19)
        }))
    }

    /// The identity, hidden from the optimiser (an empty inline-asm barrier, no instruction).
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn opaque(mut x: __m512i) -> __m512i {
        // SAFETY: the assembly is empty: it reads and writes only the register holding `x`,
        // touches no memory, stack or flags.
        unsafe {
            core::arch::asm!(
                "/* {0} */",
                inout(zmm_reg) x,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        x
    }

    /// Loose product.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn mul(a: &Fe, b: &Fe) -> Fe {
        carry(mul_wide(a, b).0)
    }

    /// Loose square.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn sqr(a: &Fe) -> Fe {
        carry(sqr_wide(a).0)
    }

    /// Product with wide limbs (< 2^61): valid only as an input of `add`/`sub`/`carry`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn mul_wide(a: &Fe, b: &Fe) -> Fe {
        let z = _mm512_setzero_si512();
        let mut lo = [z; 10];
        let mut hi = [z; 10];
        for i in 0..5 {
            for j in 0..5 {
                lo[i + j] = _mm512_madd52lo_epu64(lo[i + j], a.0[i], b.0[j]);
                hi[i + j + 1] = _mm512_madd52hi_epu64(hi[i + j + 1], a.0[i], b.0[j]);
            }
        }
        let mut c = [z; 10];
        c[0] = lo[0];
        for k in 1..9 {
            c[k] = _mm512_add_epi64(lo[k], _mm512_slli_epi64::<1>(hi[k]));
        }
        c[9] = _mm512_slli_epi64::<1>(hi[9]);
        fold(c)
    }

    /// Square with wide limbs (< 2^61): valid only as an input of `add`/`sub`/`carry`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn sqr_wide(a: &Fe) -> Fe {
        let z = _mm512_setzero_si512();
        // Column sums by coefficient: d ×1 (square lo), e ×2 (cross lo, square hi), f ×4 (cross hi).
        let mut d = [z; 10];
        let mut e = [z; 10];
        let mut f = [z; 10];
        for i in 0..5 {
            d[2 * i] = _mm512_madd52lo_epu64(d[2 * i], a.0[i], a.0[i]);
            e[2 * i + 1] = _mm512_madd52hi_epu64(e[2 * i + 1], a.0[i], a.0[i]);
            for j in i + 1..5 {
                e[i + j] = _mm512_madd52lo_epu64(e[i + j], a.0[i], a.0[j]);
                f[i + j + 1] = _mm512_madd52hi_epu64(f[i + j + 1], a.0[i], a.0[j]);
            }
        }
        let c: [__m512i; 10] = core::array::from_fn(|k| {
            let t = _mm512_add_epi64(e[k], _mm512_slli_epi64::<1>(f[k]));
            _mm512_add_epi64(d[k], _mm512_slli_epi64::<1>(t))
        });
        fold(c)
    }

    /// `a · c + b` for a small constant `c < 2^20`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn mul_small_add(a: &Fe, c: u64, b: &Fe) -> Fe {
        let cv = splat(c);
        let z = _mm512_setzero_si512();
        let lo: [__m512i; 5] = core::array::from_fn(|i| _mm512_madd52lo_epu64(b.0[i], a.0[i], cv));
        let hi: [__m512i; 5] = core::array::from_fn(|i| _mm512_madd52hi_epu64(z, a.0[i], cv));
        carry([
            _mm512_madd52lo_epu64(lo[0], hi[4], splat(38)),
            _mm512_add_epi64(lo[1], _mm512_slli_epi64::<1>(hi[0])),
            _mm512_add_epi64(lo[2], _mm512_slli_epi64::<1>(hi[1])),
            _mm512_add_epi64(lo[3], _mm512_slli_epi64::<1>(hi[2])),
            _mm512_add_epi64(lo[4], _mm512_slli_epi64::<1>(hi[3])),
        ])
    }

    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn add(a: &Fe, b: &Fe) -> Fe {
        carry(core::array::from_fn(|i| _mm512_add_epi64(a.0[i], b.0[i])))
    }

    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn sub(a: &Fe, b: &Fe) -> Fe {
        carry(core::array::from_fn(|i| {
            _mm512_sub_epi64(_mm512_add_epi64(a.0[i], splat(BIAS[i])), b.0[i])
        }))
    }

    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn neg(a: &Fe) -> Fe {
        carry(core::array::from_fn(|i| {
            _mm512_sub_epi64(splat(BIAS[i]), a.0[i])
        }))
    }

    /// Squares `k` times.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn sqr_n(a: &Fe, k: usize) -> Fe {
        let mut x = *a;
        for _ in 0..k {
            x = sqr(&x);
        }
        x
    }

    /// Returns `(a^(2^250 − 1), a^11)`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    fn pow_2_250_1(a: &Fe) -> (Fe, Fe) {
        let a2 = sqr(a);
        let a9 = mul(&sqr_n(&a2, 2), a);
        let a11 = mul(&a9, &a2);
        let e5 = mul(&sqr(&a11), &a9); // 2^5 − 1
        let e10 = mul(&sqr_n(&e5, 5), &e5);
        let e20 = mul(&sqr_n(&e10, 10), &e10);
        let e40 = mul(&sqr_n(&e20, 20), &e20);
        let e50 = mul(&sqr_n(&e40, 10), &e10);
        let e100 = mul(&sqr_n(&e50, 50), &e50);
        let e200 = mul(&sqr_n(&e100, 100), &e100);
        let e250 = mul(&sqr_n(&e200, 50), &e50);
        (e250, a11)
    }

    /// `a^(p−2)` (so 0 ↦ 0).
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    fn invert(a: &Fe) -> Fe {
        let (e250, a11) = pow_2_250_1(a);
        mul(&sqr_n(&e250, 5), &a11)
    }

    /// `a^((p−5)/8) = a^(2^252 − 3)`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    fn pow_p58(a: &Fe) -> Fe {
        let (e250, _) = pow_2_250_1(a);
        mul(&sqr_n(&e250, 2), a)
    }

    /// Fully reduced limbs (each < 2^51, value in [0, p)).
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn canon(a: &Fe) -> Fe {
        let m = splat(MASK51);
        let mut l = a.0;
        for i in 0..4 {
            let c = _mm512_srli_epi64::<51>(l[i]);
            l[i] = _mm512_and_si512(l[i], m);
            l[i + 1] = _mm512_add_epi64(l[i + 1], c);
        }
        let c = _mm512_srli_epi64::<51>(l[4]);
        l[4] = _mm512_and_si512(l[4], m);
        l[0] = _mm512_madd52lo_epu64(l[0], c, splat(19));
        // Now v < 2^255 + 2^18 < 2p: subtract p iff v + 19 >= 2^255.
        let mut q = _mm512_srli_epi64::<51>(_mm512_add_epi64(l[0], splat(19)));
        for i in 1..5 {
            q = _mm512_srli_epi64::<51>(_mm512_add_epi64(l[i], q));
        }
        l[0] = _mm512_madd52lo_epu64(l[0], q, splat(19));
        for i in 0..4 {
            let c = _mm512_srli_epi64::<51>(l[i]);
            l[i] = _mm512_and_si512(l[i], m);
            l[i + 1] = _mm512_add_epi64(l[i + 1], c);
        }
        l[4] = _mm512_and_si512(l[4], m);
        Fe(l)
    }

    /// Lane mask of `a ≡ 0 (mod p)`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn is_zero(a: &Fe) -> __mmask8 {
        let c = canon(a);
        let o = _mm512_or_si512(
            _mm512_or_si512(c.0[0], c.0[1]),
            _mm512_or_si512(_mm512_or_si512(c.0[2], c.0[3]), c.0[4]),
        );
        _mm512_cmpeq_epi64_mask(o, _mm512_setzero_si512())
    }

    /// Lane mask of `a ≡ b (mod p)`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn ct_eq(a: &Fe, b: &Fe) -> __mmask8 {
        is_zero(&sub(a, b))
    }

    /// RFC 9380 `CMOV(a, b, c)`: per lane, `b` where `c` is set, else `a`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn cmov(a: &Fe, b: &Fe, c: __mmask8) -> Fe {
        Fe(core::array::from_fn(|i| {
            _mm512_mask_blend_epi64(c, a.0[i], b.0[i])
        }))
    }

    /// Swaps `a` and `b` in the lanes whose bit is set in `m` (a mask register value computed
    /// arithmetically from the key bit, consumed by `vpblendmq`: no branch, no memory index).
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn cswap(m: __mmask8, a: &mut Fe, b: &mut Fe) {
        for i in 0..5 {
            let (x, y) = (a.0[i], b.0[i]);
            a.0[i] = _mm512_mask_blend_epi64(m, x, y);
            b.0[i] = _mm512_mask_blend_epi64(m, y, x);
        }
    }

    /// The ladder's state for one vector of eight lanes: (x2, z2, x3, z3).
    type LadderState = (Fe, Fe, Fe, Fe);

    /// One RFC 7748 §5 ladder step (after the conditional swap) on one vector.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    #[inline]
    fn ladder_step(st: &mut LadderState, x1: &Fe) {
        let (x2, z2, x3, z3) = *st;
        let a = add_tight(&x2, &z2);
        let b = sub_tight(&x2, &z2);
        let c = add(&x3, &z3);
        let d = sub(&x3, &z3);
        let aa = carry(sqr_tight_wide(&a).0);
        let bb = carry(sqr_tight_wide(&b).0);
        // Values that only feed `add`/`sub` (or the final `carry`) stay wide.
        let da = mul_wide(&d, &a);
        let cb = mul_wide(&c, &b);
        let x3 = sqr_tight_wide(&add_tight(&da, &cb));
        let z3 = mul_wide(x1, &carry(sqr_tight_wide(&sub_tight(&da, &cb)).0));
        let x2 = mul_wide(&aa, &bb);
        let e = sub(&aa, &bb);
        let z2 = mul_wide(&e, &mul_small_add(&e, 121_665, &aa));
        *st = (x2, z2, x3, z3);
    }

    /// RFC 7748 §5 ladder for `V` vectors of eight u-coordinates each, one clamped scalar; returns
    /// `(x2, z2)` per vector. Running two vectors in one loop lets the CPU overlap their
    /// independent multiplier chains (each step is latency-bound on its own).
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    fn ladder<const V: usize>(k: &[u8; 32], x1: &[Fe; V]) -> [(Fe, Fe); V] {
        let mut st: [LadderState; V] =
            core::array::from_fn(|v| (small(1), small(0), x1[v], small(1)));
        let mut swap = 0u64;
        for t in (0..255usize).rev() {
            let kt = u64::from((k[t >> 3] >> (t & 7)) & 1);
            swap ^= kt;
            let m = (swap as u8).wrapping_neg();
            for s in st.iter_mut() {
                cswap(m, &mut s.0, &mut s.2);
                cswap(m, &mut s.1, &mut s.3);
            }
            swap = kt;
            for (s, x) in st.iter_mut().zip(x1) {
                ladder_step(s, x);
            }
        }
        let m = (swap as u8).wrapping_neg();
        core::array::from_fn(|v| {
            let (mut x2, mut z2, mut x3, mut z3) = st[v];
            cswap(m, &mut x2, &mut x3);
            cswap(m, &mut z2, &mut z3);
            (carry(x2.0), carry(z2.0))
        })
    }

    /// Computes `num[i] / den[i]` for every vector (0 where `den ≡ 0`), canonical, in place of `num`.
    /// One Fermat inversion for the whole slice (Montgomery's trick across vectors).
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    fn batch_divide(num: &mut [Fe], den: &[Fe]) {
        let n = num.len().min(den.len()).min(CHUNK);
        let one = small(1);
        let mut zero_mask = [0 as __mmask8; CHUNK];
        let mut prefix = [one; CHUNK];
        let mut acc = one;
        for i in 0..n {
            zero_mask[i] = is_zero(&den[i]);
            let d = cmov(&den[i], &one, zero_mask[i]);
            prefix[i] = acc;
            acc = mul(&acc, &d);
        }
        let mut inv = invert(&acc);
        for i in (0..n).rev() {
            let d = cmov(&den[i], &one, zero_mask[i]);
            let di = mul(&inv, &prefix[i]);
            inv = mul(&inv, &d);
            let q = canon(&mul(&num[i], &di));
            let z = _mm512_setzero_si512();
            num[i] = Fe(core::array::from_fn(|j| {
                _mm512_mask_blend_epi64(zero_mask[i], q.0[j], z)
            }));
        }
    }

    /// Kernel of [`super::x25519_batch`]; `u.len() == out.len()`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    pub(super) fn x25519_batch(k: &[u8; 32], u: &[[u8; 32]], out: &mut [[u8; 32]]) {
        let mut ks = *k;
        ks[0] &= 248;
        ks[31] &= 127;
        ks[31] |= 64;
        for (uc, oc) in u.chunks(8 * CHUNK).zip(out.chunks_mut(8 * CHUNK)) {
            let nv = uc.len().div_ceil(8);
            let mut xs = [small(0); CHUNK];
            let mut zs = [small(0); CHUNK];
            let vector = |v: usize| {
                let mut lanes = [[0u64; 5]; 8];
                for (l, b) in lanes.iter_mut().zip(uc.iter().skip(8 * v)) {
                    *l = limbs_from_bytes(b);
                }
                load(&lanes)
            };
            let mut v = 0;
            while v + 2 <= nv {
                let r = ladder(&ks, &[vector(v), vector(v + 1)]);
                (xs[v], zs[v]) = r[0];
                (xs[v + 1], zs[v + 1]) = r[1];
                v += 2;
            }
            if v < nv {
                (xs[v], zs[v]) = ladder(&ks, &[vector(v)])[0];
            }
            batch_divide(&mut xs[..nv], &zs[..nv]);
            for v in 0..nv {
                let lanes = store(&xs[v]);
                for (o, l) in oc.iter_mut().skip(8 * v).take(8).zip(lanes.iter()) {
                    *o = bytes_from_limbs(l);
                }
            }
        }
        ks.zeroize();
    }

    /// RFC 9380 G.2.1 `map_to_curve_elligator2_curve25519`: returns `(xn, xd, y)` with `yd = 1`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    fn elligator2_curve25519(u: &Fe) -> (Fe, Fe, Fe) {
        let one = small(1);
        let c3 = konst(SQRT_M1);
        let x1n = konst(NEG_J);
        let usq = sqr(u);
        let tv1 = add(&usq, &usq); // 2u^2
        let xd = add(&tv1, &one);
        let tv2 = sqr(&xd);
        let gxd = mul(&tv2, &xd);
        let gx1 = mul_small_add(&tv1, 486_662, &small(0)); // J * tv1
        let gx1 = mul(&gx1, &x1n);
        let gx1 = add(&gx1, &tv2);
        let gx1 = mul(&gx1, &x1n);
        let tv3 = sqr(&gxd);
        let tv2 = sqr(&tv3);
        let tv3 = mul(&tv3, &gxd);
        let tv3 = mul(&tv3, &gx1);
        let tv2 = mul(&tv2, &tv3);
        let y11 = pow_p58(&tv2);
        let y11 = mul(&y11, &tv3);
        let y12 = mul(&y11, &c3);
        let tv2 = mul(&sqr(&y11), &gxd);
        let e1 = ct_eq(&tv2, &gx1);
        let y1 = cmov(&y12, &y11, e1);
        let x2n = mul(&x1n, &tv1);
        let y21 = mul(&mul(&y11, u), &konst(ELL2_C2));
        let y22 = mul(&y21, &c3);
        let gx2 = mul(&gx1, &tv1);
        let tv2 = mul(&sqr(&y21), &gxd);
        let e2 = ct_eq(&tv2, &gx2);
        let y2 = cmov(&y22, &y21, e2);
        let tv2 = mul(&sqr(&y1), &gxd);
        let e3 = ct_eq(&tv2, &gx1);
        let xn = cmov(&x2n, &x1n, e3);
        let y = cmov(&y2, &y1, e3);
        let yc = canon(&y);
        let e4 = _mm512_test_epi64_mask(yc.0[0], splat(1)); // sgn0(y) == 1
        let y = cmov(&yc, &neg(&yc), e3 ^ e4);
        (xn, xd, y)
    }

    /// An edwards25519 point in extended coordinates (x = X/Z, y = Y/Z, xy = T/Z).
    #[derive(Clone, Copy)]
    struct Ed {
        x: Fe,
        y: Fe,
        z: Fe,
        t: Fe,
    }

    /// RFC 9380 G.2.2 `map_to_curve_elligator2_edwards25519`, as an extended point.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    fn map_to_edwards(u: &Fe) -> Ed {
        let one = small(1);
        let (xmn, xmd, ymn) = elligator2_curve25519(u);
        let xn = mul(&xmn, &konst(SQRT_AM2)); // yMd = 1
        let xd = mul(&xmd, &ymn);
        let yn = sub(&xmn, &xmd);
        let yd = add(&xmn, &xmd);
        let e = is_zero(&mul(&xd, &yd));
        let xn = cmov(&xn, &small(0), e);
        let xd = cmov(&xd, &one, e);
        let yn = cmov(&yn, &one, e);
        let yd = cmov(&yd, &one, e);
        Ed {
            x: mul(&xn, &yd),
            y: mul(&xd, &yn),
            z: mul(&xd, &yd),
            t: mul(&xn, &yn),
        }
    }

    /// Complete addition on −x² + y² = 1 + d x² y² (add-2008-hwcd-3); T of the result is omitted.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    fn ed_add(p: &Ed, q: &Ed) -> (Fe, Fe, Fe) {
        let a = mul(&sub(&p.y, &p.x), &sub(&q.y, &q.x));
        let b = mul(&add(&p.y, &p.x), &add(&q.y, &q.x));
        let c = mul(&mul(&p.t, &q.t), &konst(EDWARDS_D2));
        let zz = mul(&p.z, &q.z);
        let d = add(&zz, &zz);
        let e = sub(&b, &a);
        let f = sub(&d, &c);
        let g = add(&d, &c);
        let h = add(&b, &a);
        (mul(&e, &f), mul(&g, &h), mul(&f, &g))
    }

    /// Doubling (dbl-2008-hwcd with a = −1), projective (X, Y, Z).
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    fn ed_double(x: &Fe, y: &Fe, z: &Fe) -> (Fe, Fe, Fe) {
        let a = sqr(x);
        let b = sqr(y);
        let zz = sqr(z);
        let c = add(&zz, &zz);
        let e = sub(&sub(&sqr(&add(x, y)), &a), &b);
        let g = sub(&b, &a); // D + B with D = −A
        let f = sub(&g, &c);
        let h = neg(&add(&a, &b)); // D − B
        (mul(&e, &f), mul(&g, &h), mul(&f, &g))
    }

    /// Kernel of [`super::hash_to_montgomery_batch`]; `msgs.len() == out.len()`.
    #[target_feature(enable = "avx512f,avx512ifma,avx512vl")]
    pub(super) fn hash_batch<M: AsRef<[u8]>>(xmd: &Xmd, msgs: &[M], out: &mut [[u8; 32]]) {
        for (mc, oc) in msgs.chunks(8 * CHUNK).zip(out.chunks_mut(8 * CHUNK)) {
            let nv = mc.len().div_ceil(8);
            let mut us = [small(0); CHUNK];
            let mut ws = [small(0); CHUNK];
            for v in 0..nv {
                let mut f0 = [[0u64; 5]; 8];
                let mut f1 = [[0u64; 5]; 8];
                for ((a, b), m) in f0.iter_mut().zip(f1.iter_mut()).zip(mc.iter().skip(8 * v)) {
                    let [x, y] = xmd.hash_to_field(m.as_ref());
                    *a = x;
                    *b = y;
                }
                let u0 = load(&f0);
                let u1 = load(&f1);
                let p0 = map_to_edwards(&carry(u0.0));
                let p1 = map_to_edwards(&carry(u1.0));
                let (mut x, mut y, mut z) = ed_add(&p0, &p1);
                for _ in 0..3 {
                    (x, y, z) = ed_double(&x, &y, &z);
                }
                us[v] = add(&z, &y);
                ws[v] = sub(&z, &y);
            }
            batch_divide(&mut us[..nv], &ws[..nv]);
            for v in 0..nv {
                let lanes = store(&us[v]);
                for (o, l) in oc.iter_mut().skip(8 * v).take(8).zip(lanes.iter()) {
                    *o = bytes_from_limbs(l);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_rng::Rng;
    impl Rng {
        fn bytes32(&mut self) -> [u8; 32] {
            let mut b = [0u8; 32];
            for c in b.chunks_mut(8) {
                c.copy_from_slice(&self.next_u64().to_le_bytes());
            }
            b
        }
    }

    fn hex32(s: &str) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, o) in b.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        b
    }

    fn dalek_x(k: &[u8; 32], u: &[u8; 32]) -> [u8; 32] {
        curve25519_dalek::MontgomeryPoint(*u).mul_clamped(*k).0
    }

    fn dalek_h(dst: &[u8], m: &[u8]) -> [u8; 32] {
        EdwardsPoint::hash_to_curve::<Sha512>(&[m], &[dst])
            .to_montgomery()
            .0
    }

    fn x1(k: &[u8; 32], u: &[u8; 32]) -> [u8; 32] {
        let mut o = [[0u8; 32]; 1];
        x25519_batch(k, &[*u], &mut o);
        o[0]
    }

    const DST: &[u8] = b"QUUX-V01-CS02-with-edwards25519_XMD:SHA-512_ELL2_RO_";

    #[test]
    fn rfc7748_vectors() {
        if !available() {
            return;
        }
        let cases = [
            (
                "a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4",
                "e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c",
                "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552",
            ),
            (
                "4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d",
                "e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493",
                "95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957",
            ),
        ];
        for (k, u, r) in cases {
            assert_eq!(x1(&hex32(k), &hex32(u)), hex32(r));
        }
    }

    #[test]
    fn rfc7748_iterated() {
        if !available() {
            return;
        }
        let mut k = [0u8; 32];
        k[0] = 9;
        let mut u = k;
        for i in 1..=1000 {
            let r = x1(&k, &u);
            u = k;
            k = r;
            if i == 1 {
                assert_eq!(
                    k,
                    hex32("422c8e7a6227d7bca1350b3e2bb7279f7897b87bb6854b783c60e80311ae3079")
                );
            }
        }
        assert_eq!(
            k,
            hex32("684cf59ba83309552800ef566f2f4d3c1c3887c49360e3875f2eb94d99532c51")
        );
    }

    #[test]
    fn random_vs_dalek() {
        if !available() {
            return;
        }
        let mut rng = Rng(1);
        // 10,000 (k, u) pairs: 625 keys x 16 points, every lane different.
        for _ in 0..625 {
            let k = rng.bytes32();
            let u: Vec<[u8; 32]> = (0..16).map(|_| rng.bytes32()).collect();
            let mut out = vec![[0u8; 32]; 16];
            x25519_batch(&k, &u, &mut out);
            for (o, ui) in out.iter().zip(&u) {
                assert_eq!(*o, dalek_x(&k, ui));
            }
        }
    }

    /// Little-endian 256-bit addition of a small list of values (wrapping).
    fn add_bytes(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
        let mut o = [0u8; 32];
        let mut c = 0u16;
        for i in 0..32 {
            let s = u16::from(a[i]) + u16::from(b[i]) + c;
            o[i] = s as u8;
            c = s >> 8;
        }
        o
    }

    #[test]
    fn edge_inputs() {
        if !available() {
            return;
        }
        let p = hex32("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f");
        let mut one = [0u8; 32];
        one[0] = 1;
        let pm1 = hex32("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f");
        let bases = [
            [0u8; 32],
            one,
            hex32("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
            hex32("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
            pm1,
            p,
            add_bytes(&p, &one),
            [0xff; 32],
            {
                let mut m = [0xff; 32];
                m[31] = 0x7f;
                m
            },
            {
                let mut n = [0u8; 32];
                n[0] = 9;
                n
            },
        ];
        let mut us = Vec::new();
        for b in bases {
            for v in [b, add_bytes(&b, &p)] {
                us.push(v);
                let mut t = v;
                t[31] |= 0x80;
                us.push(t);
                let mut t = v;
                t[31] &= 0x7f;
                us.push(t);
            }
        }
        let mut rng = Rng(7);
        let keys = [[0u8; 32], [0xff; 32], rng.bytes32(), rng.bytes32()];
        for k in keys {
            let mut out = vec![[0u8; 32]; us.len()];
            x25519_batch(&k, &us, &mut out);
            for (o, u) in out.iter().zip(&us) {
                assert_eq!(*o, dalek_x(&k, u), "k={k:02x?} u={u:02x?}");
            }
            for u in &us {
                assert_eq!(x1(&k, u), dalek_x(&k, u));
            }
        }
    }

    #[test]
    fn batch_sizes() {
        if !available() {
            return;
        }
        let mut rng = Rng(3);
        for n in [0usize, 1, 7, 8, 9, 17, 255, 256, 257, 300] {
            let k = rng.bytes32();
            let u: Vec<[u8; 32]> = (0..n).map(|_| rng.bytes32()).collect();
            let mut out = vec![[0u8; 32]; n];
            x25519_batch(&k, &u, &mut out);
            for (o, ui) in out.iter().zip(&u) {
                assert_eq!(*o, dalek_x(&k, ui));
            }
            let mut h = vec![[0u8; 32]; n];
            let msgs: Vec<[u8; 16]> = u.iter().map(|x| core::array::from_fn(|i| x[i])).collect();
            hash_to_montgomery_batch(DST, &msgs, &mut h);
            for (o, m) in h.iter().zip(&msgs) {
                assert_eq!(*o, dalek_h(DST, m));
            }
        }
        // Mismatched lengths: only the common prefix is written.
        let k = rng.bytes32();
        let u = [rng.bytes32(), rng.bytes32()];
        let mut out = [[7u8; 32]; 3];
        x25519_batch(&k, &u, &mut out);
        assert_eq!(out[1], dalek_x(&k, &u[1]));
        assert_eq!(out[2], [7u8; 32]);
    }

    #[test]
    fn hash_rfc9380_vectors() {
        if !available() {
            return;
        }
        let q128 = format!("q128_{}", "q".repeat(128));
        let a512 = format!("a512_{}", "a".repeat(512));
        let msgs: [&[u8]; 5] = [
            b"",
            b"abc",
            b"abcdef0123456789",
            q128.as_bytes(),
            a512.as_bytes(),
        ];
        let expect = [
            "493a48fe2bc158f31a32ff26b5472d8d0031176b3189edb03af8a8d47a7e8766",
            "d95136a0c803d4140ba1e3eebb7068b270fab21865f100a1ab59300522750466",
            "ec55c3f46f46badef68892474b7915a364dfb615583617c25fbcb9283b92712a",
            "42bb22cd4122885768c08fc85ef3363c353aae31d73c2119d1241d32af90485b",
            "176f8215271d1850282d744dcde3a915d91d1494dcb8ece011e992eddf37656c",
        ];
        let mut out = [[0u8; 32]; 5];
        hash_to_montgomery_impl(DST, &msgs, &mut out);
        for i in 0..5 {
            assert_eq!(out[i], hex32(expect[i]), "vector {i}");
            assert_eq!(out[i], dalek_h(DST, msgs[i]));
        }
        let m16: [u8; 16] = *b"abcdef0123456789";
        let mut o = [[0u8; 32]; 1];
        hash_to_montgomery_batch(DST, &[m16], &mut o);
        assert_eq!(o[0], hex32(expect[2]));
    }

    #[test]
    fn hash_random_vs_dalek() {
        if !available() {
            return;
        }
        let mut rng = Rng(11);
        let msgs: Vec<[u8; 16]> = (0..2000)
            .map(|_| {
                let b = rng.bytes32();
                core::array::from_fn(|i| b[i])
            })
            .collect();
        let mut out = vec![[0u8; 32]; msgs.len()];
        let dst = b"blindjoin-test-dst";
        hash_to_montgomery_batch(dst, &msgs, &mut out);
        for (o, m) in out.iter().zip(&msgs) {
            assert_eq!(*o, dalek_h(dst, m));
        }
        // Oversize DST (RFC 9380 §5.3.3) and empty DST.
        let long = [0x5a_u8; 300];
        let mut h = Sha512::new();
        h.update(b"H2C-OVERSIZE-DST-");
        h.update(long);
        let reduced: [u8; 64] = h.finalize().into();
        let mut o = [[0u8; 32]; 3];
        hash_to_montgomery_batch(&long, &msgs[..3], &mut o);
        for (x, m) in o.iter().zip(&msgs) {
            assert_eq!(*x, dalek_h(&reduced, m));
        }
        hash_to_montgomery_batch(b"", &msgs[..3], &mut o);
        assert_eq!(o, [[0u8; 32]; 3]);
    }

    /// The IFMA kernel against dalek per item: the ladder, and the hash to the curve. A test
    /// rather than a bench target because the kernel is private (the ladder of every backend
    /// is in `cargo bench -p blindjoin-crypto --bench ecdh_ops -- x25519`): `cargo test
    /// --release -p blindjoin-crypto --lib x25519_ifma::tests::bench -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing of the private kernel: run by hand in release mode"]
    fn bench() {
        use std::time::Instant;
        if !available() {
            println!("no AVX-512 IFMA on this CPU");
            return;
        }
        let mut rng = Rng(5);
        let n = 4096;
        let k = rng.bytes32();
        let u: Vec<[u8; 32]> = (0..n).map(|_| rng.bytes32()).collect();
        let msgs: Vec<[u8; 16]> = u.iter().map(|x| core::array::from_fn(|i| x[i])).collect();
        let mut out = vec![[0u8; 32]; n];
        let dst = b"blindjoin-bench";
        // The machine is shared: report the best of several rounds.
        let (mut a, mut b, mut c, mut d) = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..8 {
            let t = Instant::now();
            x25519_batch(&k, &u, &mut out);
            a = a.min(t.elapsed().as_secs_f64() * 1e6 / n as f64);
            let t = Instant::now();
            hash_to_montgomery_batch(dst, &msgs, &mut out);
            b = b.min(t.elapsed().as_secs_f64() * 1e6 / n as f64);
            let m = 256;
            let t = Instant::now();
            for (o, ui) in out.iter_mut().zip(&u[..m]) {
                *o = dalek_x(&k, ui);
            }
            c = c.min(t.elapsed().as_secs_f64() * 1e6 / m as f64);
            let t = Instant::now();
            let pts: Vec<EdwardsPoint> = msgs[..m]
                .iter()
                .map(|x| EdwardsPoint::hash_to_curve::<Sha512>(&[x], &[dst]))
                .collect();
            let mm = EdwardsPoint::to_montgomery_batch(&pts);
            d = d.min(t.elapsed().as_secs_f64() * 1e6 / m as f64);
            out[1] = mm[0].0;
        }
        let xmd = Xmd::new(dst);
        let mut e = f64::MAX;
        for _ in 0..8 {
            let t = Instant::now();
            let mut acc = 0u64;
            for m in &msgs {
                acc ^= xmd.hash_to_field(m)[1][0];
            }
            e = e.min(t.elapsed().as_secs_f64() * 1e6 / n as f64);
            out[2][0] = acc as u8;
        }
        println!("  (of which serial hash_to_field: {e:.2} us/op)");
        println!(
            "x25519_batch (n={n}): {a:.2} us/op; dalek MontgomeryPoint::mul_clamped: {c:.2} us/op"
        );
        println!(
            "hash_to_montgomery_batch (n={n}): {b:.2} us/op; dalek hash_to_curve + to_montgomery_batch: {d:.2} us/op"
        );
    }
}
