//! Polynomials of Z_Q\[X\]/(X^N+1) in RNS form: one row of N residues per prime q_i of the basis
//! (Q = Π q_i; the Chinese remainder theorem makes the rows independent), stored row after row.
//! Whether a polynomial is in coefficient or NTT form is tracked by its owner (a ciphertext or
//! a plaintext), since the operations here do not depend on it, except multiplication, which
//! is dyadic and so only means the ring product in NTT form.

use zeroize::Zeroize;

use crate::modarith::Modulus;
use crate::ntt::NttTables;

/// An RNS polynomial: `rows` rows of `n` residues.
#[derive(Clone, PartialEq, Eq)]
pub struct RnsPoly {
    n: usize,
    data: Vec<u64>,
}

impl std::fmt::Debug for RnsPoly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RnsPoly(n = {}, rows = {})", self.n, self.rows())
    }
}

impl Zeroize for RnsPoly {
    fn zeroize(&mut self) {
        self.data.zeroize();
    }
}

impl RnsPoly {
    /// The zero polynomial with `rows` rows of degree `n`.
    pub fn zero(n: usize, rows: usize) -> Self {
        Self {
            n,
            data: vec![0; n * rows],
        }
    }

    /// The polynomial whose rows, one after the other, are `data` (a multiple of `n` long).
    pub(crate) fn from_data(n: usize, data: Vec<u64>) -> Self {
        Self { n, data }
    }

    /// N.
    pub fn degree(&self) -> usize {
        self.n
    }

    /// Number of primes the polynomial has rows for.
    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.n).unwrap_or(0)
    }

    /// Row i (residues mod q_i).
    pub fn row(&self, i: usize) -> &[u64] {
        &self.data[i * self.n..(i + 1) * self.n]
    }

    /// Row i, mutable.
    pub fn row_mut(&mut self, i: usize) -> &mut [u64] {
        &mut self.data[i * self.n..(i + 1) * self.n]
    }

    /// All rows as one slice.
    pub fn data(&self) -> &[u64] {
        &self.data
    }

    /// All rows as one mutable slice.
    pub fn data_mut(&mut self) -> &mut [u64] {
        &mut self.data
    }

    /// The rows as separate mutable slices.
    pub fn rows_mut(&mut self) -> Vec<&mut [u64]> {
        self.data.chunks_exact_mut(self.n.max(1)).collect()
    }

    /// Drops the rows from `rows` on.
    pub fn truncate_rows(&mut self, rows: usize) {
        self.data.truncate(rows * self.n);
    }

    /// A polynomial with small signed coefficients `c`, reduced mod each prime.
    pub fn from_signed(c: &[i64], moduli: &[Modulus]) -> Self {
        let n = c.len();
        let mut p = Self::zero(n, moduli.len());
        for (i, m) in moduli.iter().enumerate() {
            for (x, &v) in p.row_mut(i).iter_mut().zip(c) {
                *x = m.from_i64(v);
            }
        }
        p
    }

    /// self += other, row by row.
    pub fn add_assign(&mut self, other: &Self, moduli: &[Modulus]) {
        for (i, m) in moduli
            .iter()
            .enumerate()
            .take(self.rows().min(other.rows()))
        {
            let n = self.n;
            let b = &other.data[i * n..(i + 1) * n];
            for (x, &y) in self.row_mut(i).iter_mut().zip(b) {
                *x = m.add(*x, y);
            }
        }
    }

    /// self −= other.
    pub fn sub_assign(&mut self, other: &Self, moduli: &[Modulus]) {
        for (i, m) in moduli
            .iter()
            .enumerate()
            .take(self.rows().min(other.rows()))
        {
            let n = self.n;
            let b = &other.data[i * n..(i + 1) * n];
            for (x, &y) in self.row_mut(i).iter_mut().zip(b) {
                *x = m.sub(*x, y);
            }
        }
    }

    /// self = −self.
    pub fn neg_assign(&mut self, moduli: &[Modulus]) {
        for (i, m) in moduli.iter().enumerate().take(self.rows()) {
            for x in self.row_mut(i).iter_mut() {
                *x = m.neg(*x);
            }
        }
    }

    /// self ⊙= other (dyadic: the ring product when both are in NTT form).
    pub fn mul_assign(&mut self, other: &Self, moduli: &[Modulus]) {
        for (i, m) in moduli
            .iter()
            .enumerate()
            .take(self.rows().min(other.rows()))
        {
            let n = self.n;
            let b = &other.data[i * n..(i + 1) * n];
            for (x, &y) in self.row_mut(i).iter_mut().zip(b) {
                *x = m.mul(*x, y);
            }
        }
    }

    /// self += a ⊙ b.
    pub fn mul_add_assign(&mut self, a: &Self, b: &Self, moduli: &[Modulus]) {
        let rows = self.rows().min(a.rows()).min(b.rows());
        for (i, m) in moduli.iter().enumerate().take(rows) {
            let n = self.n;
            let (ra, rb) = (&a.data[i * n..(i + 1) * n], &b.data[i * n..(i + 1) * n]);
            for ((x, &y), &z) in self.row_mut(i).iter_mut().zip(ra).zip(rb) {
                *x = m.reduce_u128(u128::from(*x) + u128::from(y) * u128::from(z));
            }
        }
    }

    /// Forward NTT of every row (tables in row order).
    pub fn ntt(&mut self, tables: &[NttTables]) {
        for (i, t) in tables.iter().enumerate().take(self.rows()) {
            t.forward(self.row_mut(i));
        }
    }

    /// Inverse NTT of every row.
    pub fn intt(&mut self, tables: &[NttTables]) {
        for (i, t) in tables.iter().enumerate().take(self.rows()) {
            t.inverse(self.row_mut(i));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::ntt_primes;

    #[test]
    fn rns_ring_operations_match_schoolbook_per_prime() {
        let n = 32;
        let primes = ntt_primes(45, 64, 3).unwrap();
        let moduli: Vec<Modulus> = primes.iter().map(|&q| Modulus::new(q).unwrap()).collect();
        let tables: Vec<NttTables> = moduli
            .iter()
            .map(|&m| NttTables::new(m, n).unwrap())
            .collect();
        let a_signed: Vec<i64> = (0..n as i64).map(|i| (i * 7919) % 1001 - 500).collect();
        let b_signed: Vec<i64> = (0..n as i64).map(|i| 3 - (i * i) % 13).collect();
        let a = RnsPoly::from_signed(&a_signed, &moduli);
        let b = RnsPoly::from_signed(&b_signed, &moduli);
        // Integer negacyclic product, then reduced: the RNS result must agree on every row.
        let mut want = vec![0i64; n];
        for i in 0..n {
            for j in 0..n {
                let p = a_signed[i] * b_signed[j];
                if i + j < n {
                    want[i + j] += p;
                } else {
                    want[i + j - n] -= p;
                }
            }
        }
        let want = RnsPoly::from_signed(&want, &moduli);
        let (mut fa, mut fb) = (a.clone(), b.clone());
        fa.ntt(&tables);
        fb.ntt(&tables);
        let mut prod = fa.clone();
        prod.mul_assign(&fb, &moduli);
        prod.intt(&tables);
        assert_eq!(prod, want);
        let mut acc = RnsPoly::zero(n, 3);
        acc.mul_add_assign(&fa, &fb, &moduli);
        acc.mul_add_assign(&fa, &fb, &moduli);
        acc.intt(&tables);
        let mut twice = want.clone();
        twice.add_assign(&want, &moduli);
        assert_eq!(acc, twice);

        let mut s = a.clone();
        s.add_assign(&b, &moduli);
        let sum: Vec<i64> = a_signed.iter().zip(&b_signed).map(|(x, y)| x + y).collect();
        assert_eq!(s, RnsPoly::from_signed(&sum, &moduli));
        s.sub_assign(&b, &moduli);
        assert_eq!(s, a);
        s.neg_assign(&moduli);
        let neg: Vec<i64> = a_signed.iter().map(|x| -x).collect();
        assert_eq!(s, RnsPoly::from_signed(&neg, &moduli));
    }
}
