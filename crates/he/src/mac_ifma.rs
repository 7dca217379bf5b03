//! AVX-512 IFMA multiply-accumulate Σ_j x_j ⊙ y_j mod q of NTT-form rows, for primes below 2^50:
//! the ct×pt inner product of APSI's sender ([`crate::eval::multiply_plain_accumulate`]).
//!
//! For residues x, y < q < 2^50 the product is below 2^100 and IFMA returns it in two parts,
//! the low 52 bits (`vpmadd52luq`, < 2^52) and the rest (`vpmadd52huq`, < 2^48), each added
//! into a 64-bit lane. Summing the two parts separately, lane by lane, cannot overflow for up
//! to [`MAX_TERMS`] terms (4096 · 2^52 = 2^64); the sum is then hi·2^52 + lo < 2^116 and one
//! 128-bit Barrett reduction per coefficient gives the result, the same value the portable
//! path's 128-bit accumulation gives (tested). Eight coefficients per instruction, against one
//! 64×64 multiplication and a 128-bit addition each on the portable path.
//!
//! # Run-time selection and SAFETY
//!
//! The kernel is compiled with `#[target_feature(enable = "avx512f,avx512ifma")]` and entered
//! only after [`crate::ntt_ifma::available`] confirmed both features. Its only other `unsafe`
//! operations are unaligned 64-byte loads and stores at offsets checked against the slices'
//! lengths beforehand (every slice has the output's length, a multiple of [`BLOCK`]).
#![allow(unsafe_code)] // with a `// SAFETY:` comment on every unsafe block

use crate::modarith::Modulus;
use crate::ntt_ifma;

/// Largest prime size for this path: residues must fit IFMA's 52-bit operands.
pub const MAX_BITS: u32 = 50;

/// Most terms summed before the 64-bit lanes could overflow: 2^64 / 2^52.
pub const MAX_TERMS: usize = 1 << 12;

/// Coefficients one pass keeps in registers: 8 vectors of 8, twice (low and high parts).
pub const BLOCK: usize = 64;

/// `out[c] = Σ_j xs[j][c]·ys[j][c] mod q`; false, doing nothing, when the CPU lacks IFMA, q has
/// more than [`MAX_BITS`] bits, there are more than [`MAX_TERMS`] terms, or the lengths do not
/// all equal `out`'s (a multiple of [`BLOCK`]). Inputs must be below q.
pub(crate) fn multiply_accumulate(
    m: &Modulus,
    out: &mut [u64],
    xs: &[&[u64]],
    ys: &[&[u64]],
) -> bool {
    let n = out.len();
    let usable = m.bits() <= MAX_BITS
        && !xs.is_empty()
        && xs.len() == ys.len()
        && xs.len() <= MAX_TERMS
        && n.is_multiple_of(BLOCK)
        && xs.iter().chain(ys).all(|r| r.len() == n);
    #[cfg(target_arch = "x86_64")]
    if usable && ntt_ifma::available() {
        // SAFETY: `available()` just confirmed avx512f and avx512ifma, the target features
        // `imp::multiply_accumulate` is compiled for; the lengths were checked above.
        unsafe { imp::multiply_accumulate(m, out, xs, ys) };
        return true;
    }
    let _ = (usable, m, out, xs, ys);
    false
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::BLOCK;
    use crate::modarith::Modulus;
    use core::arch::x86_64::*;

    /// See [`super::multiply_accumulate`]; the caller checked the features and that every
    /// slice has `out.len()` elements, a multiple of [`BLOCK`].
    #[target_feature(enable = "avx512f,avx512ifma")]
    pub(super) unsafe fn multiply_accumulate(
        m: &Modulus,
        out: &mut [u64],
        xs: &[&[u64]],
        ys: &[&[u64]],
    ) {
        let mut lo_words = [0u64; BLOCK];
        let mut hi_words = [0u64; BLOCK];
        for start in (0..out.len()).step_by(BLOCK) {
            let mut lo = [_mm512_setzero_si512(); BLOCK / 8];
            let mut hi = [_mm512_setzero_si512(); BLOCK / 8];
            for (x, y) in xs.iter().zip(ys) {
                let (x, y) = (&x[start..start + BLOCK], &y[start..start + BLOCK]);
                for v in 0..BLOCK / 8 {
                    // SAFETY: `x` and `y` were just cut to BLOCK elements, so 8 u64 from
                    // offset 8·v < BLOCK are inside them.
                    let (xv, yv) = unsafe {
                        (
                            _mm512_loadu_si512(x.as_ptr().add(8 * v).cast()),
                            _mm512_loadu_si512(y.as_ptr().add(8 * v).cast()),
                        )
                    };
                    lo[v] = _mm512_madd52lo_epu64(lo[v], xv, yv);
                    hi[v] = _mm512_madd52hi_epu64(hi[v], xv, yv);
                }
            }
            for v in 0..BLOCK / 8 {
                // SAFETY: the word arrays hold BLOCK u64, so 8 from offset 8·v fit.
                unsafe {
                    _mm512_storeu_si512(lo_words.as_mut_ptr().add(8 * v).cast(), lo[v]);
                    _mm512_storeu_si512(hi_words.as_mut_ptr().add(8 * v).cast(), hi[v]);
                }
            }
            for ((o, &l), &h) in out[start..start + BLOCK]
                .iter_mut()
                .zip(&lo_words)
                .zip(&hi_words)
            {
                *o = m.reduce_u128((u128::from(h) << 52) + u128::from(l));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::ntt_primes;

    fn portable(m: &Modulus, xs: &[Vec<u64>], ys: &[Vec<u64>], n: usize) -> Vec<u64> {
        (0..n)
            .map(|c| {
                xs.iter()
                    .zip(ys)
                    .fold(0u64, |acc, (x, y)| m.add(acc, m.mul(x[c], y[c])))
            })
            .collect()
    }

    /// Equals the portable sum for 1 to 4096 terms, random residues and all-(q − 1) ones (the
    /// largest lane sums), at 30, 48 and 50 bits; declines 51-bit primes and 4097 terms.
    #[test]
    fn ifma_sum_equals_the_portable_sum() {
        if !ntt_ifma::available() {
            return;
        }
        let n = 256;
        let mut state = 5u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 7
        };
        for bits in [30, 48, 50] {
            let m = Modulus::new(ntt_primes(bits, 2 * n as u64, 1).unwrap()[0]).unwrap();
            let q = m.value();
            for terms in [1, 2, 15, 300, MAX_TERMS] {
                for extreme in [false, true] {
                    let mut rows = |_: usize| -> Vec<u64> {
                        (0..n)
                            .map(|_| if extreme { q - 1 } else { next() % q })
                            .collect()
                    };
                    let xs: Vec<Vec<u64>> = (0..terms).map(&mut rows).collect();
                    let ys: Vec<Vec<u64>> = (0..terms).map(&mut rows).collect();
                    let xr: Vec<&[u64]> = xs.iter().map(Vec::as_slice).collect();
                    let yr: Vec<&[u64]> = ys.iter().map(Vec::as_slice).collect();
                    let mut out = vec![0u64; n];
                    assert!(multiply_accumulate(&m, &mut out, &xr, &yr));
                    assert_eq!(out, portable(&m, &xs, &ys, n), "{bits} bits, {terms} terms");
                }
            }
        }
        let m51 = Modulus::new(ntt_primes(51, 2 * n as u64, 1).unwrap()[0]).unwrap();
        let row = vec![1u64; n];
        let mut out = vec![0u64; n];
        assert!(!multiply_accumulate(&m51, &mut out, &[&row], &[&row]));
        let m = Modulus::new(ntt_primes(40, 2 * n as u64, 1).unwrap()[0]).unwrap();
        let many: Vec<&[u64]> = (0..=MAX_TERMS).map(|_| row.as_slice()).collect();
        assert!(!multiply_accumulate(&m, &mut out, &many, &many));
        assert!(!multiply_accumulate(
            &m,
            &mut out[..8],
            &[&row[..8]],
            &[&row[..8]]
        ));
    }
}
