//! The negacyclic number-theoretic transform mod one prime q ≡ 1 (mod 2N), q < 2^62.
//!
//! Forward: Cooley–Tukey butterflies over the powers of a primitive 2N-th root ψ in
//! bit-reversed order, which folds the "multiply by ψ^i" twist of the negacyclic convolution
//! into the butterflies (Longa–Naehrig, "Speeding up the NTT for RLWE", CANS 2016, Alg. 1);
//! inverse: Gentleman–Sande with ψ^{-1} (Alg. 2), then a scaling by N^{-1}. The output order is
//! bit-reversed, which is harmless: only dyadic products are taken in that domain.
//!
//! Butterflies are Harvey's lazy ones (Harvey 2014, §3, Alg. 4): twiddle factors carry Shoup
//! constants, so a product costs two multiplications and no division, and values stay in
//! [0, 4q) (forward) or [0, 2q) (inverse) between layers, with one correction per layer instead
//! of one per operation. 4q < 2^64 is why q < 2^62.
//!
//! For primes below 2^50 on CPUs with AVX-512 IFMA (detected at run time), the wide layers run
//! eight butterflies per instruction ([`crate::ntt_ifma`]); the results are the same.

use crate::modarith::Modulus;
use crate::ntt_ifma::{self, Twiddles52};

/// Twiddle tables for one prime and one degree.
#[derive(Clone, Debug)]
pub struct NttTables {
    modulus: Modulus,
    n: usize,
    /// ψ^{bitrev(i)} and their Shoup constants.
    roots: Vec<(u64, u64)>,
    /// ψ^{-bitrev(i)} and their Shoup constants (Longa–Naehrig's inverse indexing).
    inv_roots: Vec<(u64, u64)>,
    /// N^{-1} mod q and its Shoup constant.
    n_inv: (u64, u64),
    /// ψ^{-bitrev(1)}·N^{-1}, the last inverse layer's twiddle with the final scaling folded in.
    last_inv_root_scaled: (u64, u64),
    /// The IFMA twiddles, when q < 2^50 and the CPU has AVX-512 IFMA.
    ifma: Option<Twiddles52>,
}

/// x − m if x ≥ m, else x; for x < 2m ≤ 2^63 too. Branch-free (a compare and a conditional
/// move): the NTT's values are random, so a branch would be mispredicted half the time.
#[inline(always)]
fn sub_if_ge(x: u64, m: u64) -> u64 {
    x.min(x.wrapping_sub(m))
}

fn bit_reverse(x: usize, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        x.reverse_bits() >> (usize::BITS - bits)
    }
}

/// The smallest primitive 2N-th root of unity mod prime q found by trying g^((q−1)/2N) for
/// g = 2, 3, …; `None` if 2N ∤ q − 1.
pub fn primitive_root_2n(m: &Modulus, n: usize) -> Option<u64> {
    let q = m.value();
    let two_n = 2 * n as u64;
    if n == 0 || !(q - 1).is_multiple_of(two_n) {
        return None;
    }
    let e = (q - 1) / two_n;
    // ψ has order exactly 2N iff ψ^N = −1 (2N is a power of two).
    (2..q.min(1 << 20))
        .map(|g| m.pow(g, e))
        .find(|&psi| m.pow(psi, n as u64) == q - 1)
}

impl NttTables {
    /// Tables for degree `n` (a power of two ≥ 2) mod `modulus`; `None` if no 2N-th root exists.
    /// Uses the IFMA butterflies when q < 2^50 and the CPU has them.
    pub fn new(modulus: Modulus, n: usize) -> Option<Self> {
        Self::build(modulus, n, ntt_ifma::available())
    }

    /// Tables that always use the portable butterflies.
    pub fn new_portable(modulus: Modulus, n: usize) -> Option<Self> {
        Self::build(modulus, n, false)
    }

    /// Whether the IFMA butterflies are in use.
    pub fn uses_ifma(&self) -> bool {
        self.ifma.is_some()
    }

    fn build(modulus: Modulus, n: usize, ifma: bool) -> Option<Self> {
        if n < 2 || !n.is_power_of_two() {
            return None;
        }
        let psi = primitive_root_2n(&modulus, n)?;
        let psi_inv = modulus.inv(psi)?;
        let log_n = n.trailing_zeros();
        let mut roots = vec![(0, 0); n];
        let mut inv_roots = vec![(0, 0); n];
        let (mut p, mut pi) = (1u64, 1u64);
        for i in 0..n {
            let r = bit_reverse(i, log_n);
            roots[r] = (p, modulus.shoup(p));
            inv_roots[r] = (pi, modulus.shoup(pi));
            p = modulus.mul(p, psi);
            pi = modulus.mul(pi, psi_inv);
        }
        let n_inv = modulus.inv(n as u64)?;
        let scaled = modulus.mul(inv_roots[1].0, n_inv);
        let ifma = if ifma {
            Twiddles52::new(&modulus, &roots, &inv_roots, n_inv, scaled)
        } else {
            None
        };
        Some(Self {
            modulus,
            n,
            roots,
            inv_roots,
            n_inv: (n_inv, modulus.shoup(n_inv)),
            last_inv_root_scaled: (scaled, modulus.shoup(scaled)),
            ifma,
        })
    }

    /// The prime.
    pub fn modulus(&self) -> &Modulus {
        &self.modulus
    }

    /// N.
    pub fn degree(&self) -> usize {
        self.n
    }

    /// In-place forward transform; input coefficients in [0, q) (any value < 4q works), output
    /// in [0, q), bit-reversed order. `a.len()` must be N (other lengths are left untouched).
    pub fn forward(&self, a: &mut [u64]) {
        let n = self.n;
        if a.len() != n || n < 2 {
            return;
        }
        let md = self.modulus;
        let q = md.value();
        let two_q = 2 * q;
        if let Some(tw) = &self.ifma
            && ntt_ifma::forward(tw, q, a)
        {
            return;
        }
        let (mut t, mut m) = (n, 1);
        // All layers but the last: groups of 2t with one twiddle each.
        while m < n / 2 {
            t >>= 1;
            for (chunk, &(w, ws)) in a.chunks_exact_mut(2 * t).zip(&self.roots[m..2 * m]) {
                let (lo, hi) = chunk.split_at_mut(t);
                for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
                    let u = sub_if_ge(*x, two_q);
                    let v = md.mul_shoup_lazy(*y, w, ws);
                    *x = u + v;
                    *y = u + two_q - v;
                }
            }
            m <<= 1;
        }
        // Last layer (t = 1), with the final reduction from [0, 4q) to [0, q) folded in.
        let full = |v: u64| sub_if_ge(sub_if_ge(v, two_q), q);
        for (pair, &(w, ws)) in a.chunks_exact_mut(2).zip(&self.roots[n / 2..]) {
            if let [x, y] = pair {
                let u = sub_if_ge(*x, two_q);
                let v = md.mul_shoup_lazy(*y, w, ws);
                *x = full(u + v);
                *y = full(u + two_q - v);
            }
        }
    }

    /// In-place inverse transform; input in [0, 2q) in bit-reversed order, output in [0, q).
    pub fn inverse(&self, a: &mut [u64]) {
        let n = self.n;
        if a.len() != n || n < 2 {
            return;
        }
        let md = self.modulus;
        let q = md.value();
        let two_q = 2 * q;
        if let Some(tw) = &self.ifma
            && ntt_ifma::inverse(tw, q, a)
        {
            return;
        }
        let mut t = 1;
        let mut m = n >> 1;
        // All layers but the last.
        while m > 1 {
            for (chunk, &(w, ws)) in a.chunks_exact_mut(2 * t).zip(&self.inv_roots[m..2 * m]) {
                let (lo, hi) = chunk.split_at_mut(t);
                for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
                    let (u, v) = (*x, *y);
                    let mut s = u + v;
                    if s >= two_q {
                        s -= two_q;
                    }
                    *x = s;
                    *y = md.mul_shoup_lazy(u + two_q - v, w, ws);
                }
            }
            t <<= 1;
            m >>= 1;
        }
        // Last layer with the scaling by N^{-1} folded into its two products.
        let (ni, ni_shoup) = self.n_inv;
        let (wn, wn_shoup) = self.last_inv_root_scaled;
        let (lo, hi) = a.split_at_mut(n / 2);
        for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
            let (u, v) = (*x, *y);
            *x = md.mul_shoup(u + v, ni, ni_shoup);
            *y = md.mul_shoup(u + two_q - v, wn, wn_shoup);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::ntt_primes;

    /// The negacyclic product mod q by the schoolbook definition: X^N = −1.
    pub(crate) fn schoolbook(m: &Modulus, a: &[u64], b: &[u64]) -> Vec<u64> {
        let n = a.len();
        let mut out = vec![0u64; n];
        for (i, &x) in a.iter().enumerate() {
            for (j, &y) in b.iter().enumerate() {
                let p = m.mul(x, y);
                let k = i + j;
                if k < n {
                    out[k] = m.add(out[k], p);
                } else {
                    out[k - n] = m.sub(out[k - n], p);
                }
            }
        }
        out
    }

    fn rand_poly(state: &mut u64, n: usize, q: u64) -> Vec<u64> {
        (0..n)
            .map(|_| {
                *state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (*state >> 1) % q
            })
            .collect()
    }

    #[test]
    fn ntt_product_matches_schoolbook() {
        let mut s = 1u64;
        for (n, bits) in [(8usize, 17u32), (64, 30), (256, 50), (1024, 60), (32, 61)] {
            let q = ntt_primes(bits, 2 * n as u64, 1).unwrap()[0];
            let m = Modulus::new(q).unwrap();
            let tables = NttTables::new(m, n).unwrap();
            let a = rand_poly(&mut s, n, q);
            let b = rand_poly(&mut s, n, q);
            let want = schoolbook(&m, &a, &b);
            let (mut fa, mut fb) = (a.clone(), b.clone());
            tables.forward(&mut fa);
            tables.forward(&mut fb);
            let mut prod: Vec<u64> = fa.iter().zip(&fb).map(|(&x, &y)| m.mul(x, y)).collect();
            tables.inverse(&mut prod);
            assert_eq!(prod, want, "n={n} q={q}");
            tables.inverse(&mut fa);
            assert_eq!(fa, a, "round trip");
        }
    }

    /// The IFMA butterflies (when this CPU has them) give the portable transform's results, for
    /// inputs over the whole lazy range.
    #[test]
    fn ifma_path_agrees_with_the_portable_one() {
        let mut s = 3u64;
        for (n, bits) in [
            (16usize, 30u32),
            (64, 40),
            (1024, 49),
            (4096, 50),
            (8192, 48),
            (4096, 56),
        ] {
            let q = ntt_primes(bits, 2 * n as u64, 1).unwrap()[0];
            let m = Modulus::new(q).unwrap();
            let fast = NttTables::new(m, n).unwrap();
            let port = NttTables::new_portable(m, n).unwrap();
            assert!(!port.uses_ifma());
            assert_eq!(
                fast.uses_ifma(),
                ntt_ifma::available() && bits <= ntt_ifma::MAX_BITS
            );
            // Forward accepts [0, 4q), inverse [0, 2q).
            let a = rand_poly(&mut s, n, 4 * q);
            let (mut x, mut y) = (a.clone(), a.clone());
            fast.forward(&mut x);
            port.forward(&mut y);
            assert_eq!(x, y, "forward n={n} bits={bits}");
            let b = rand_poly(&mut s, n, 2 * q);
            let (mut x, mut y) = (b.clone(), b.clone());
            fast.inverse(&mut x);
            port.inverse(&mut y);
            assert_eq!(x, y, "inverse n={n} bits={bits}");
            let mut top = vec![4 * q - 1; n];
            let mut top2 = top.clone();
            fast.forward(&mut top);
            port.forward(&mut top2);
            assert_eq!(top, top2);
        }
        if !ntt_ifma::available() {
            eprintln!("no AVX-512 IFMA on this CPU: only the portable path was run");
        }
    }

    #[test]
    fn edge_inputs() {
        let n = 16;
        let q = ntt_primes(40, 32, 1).unwrap()[0];
        let m = Modulus::new(q).unwrap();
        let tables = NttTables::new(m, n).unwrap();
        let mut zero = vec![0u64; n];
        tables.forward(&mut zero);
        assert!(zero.iter().all(|&x| x == 0));
        let mut top = vec![q - 1; n];
        let want = top.clone();
        tables.forward(&mut top);
        tables.inverse(&mut top);
        assert_eq!(top, want);
        // X · X^{N−1} = X^N = −1.
        let mut x = vec![0u64; n];
        x[1] = 1;
        let mut y = vec![0u64; n];
        y[n - 1] = 1;
        tables.forward(&mut x);
        tables.forward(&mut y);
        let mut p: Vec<u64> = x.iter().zip(&y).map(|(&a, &b)| m.mul(a, b)).collect();
        tables.inverse(&mut p);
        let mut want = vec![0u64; n];
        want[0] = q - 1;
        assert_eq!(p, want);
        assert!(NttTables::new(Modulus::new(65539).unwrap(), 16).is_none());
    }
}
