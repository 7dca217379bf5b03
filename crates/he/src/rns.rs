//! RNS tools: exact base extension, scale-and-round by t/Q, division by the last prime with
//! rounding, and CRT composition into multi-word integers. These are the steps of the
//! Halevi–Polyakov–Shoup RNS variant of BFV (eprint 2018/117, "An improved RNS variant of the
//! BFV homomorphic encryption scheme"), §2.2–2.4 and §4:
//!
//! * **Base extension A → B** (HPS §2.2, "CRT basis extension"): with y_i = [x_i·(A/a_i)^{-1}]_{a_i},
//!   x = Σ y_i·(A/a_i) − v·A where v = round(Σ y_i / a_i); the sum of the y_i/a_i ∈ [0,1) is taken
//!   in floating point (error below (k² + k)·2^-53), which yields the centered representative of
//!   x mod A except when x/A is within that error of 1/2. There the result is the other
//!   representative, x − A instead of x or the reverse, which is as small (|·| ≤ A/2 plus the
//!   error): for BFV's tensor any lift of that size is as good, so this is not a failure. The
//!   lift back P → Q after scaling never comes near the ambiguity, as the value is below P/8 in
//!   absolute value there ([`crate::context`] sizes P so).
//! * **Scale and round** (HPS §2.3): round(t·x/Q) mod m from the residues of x mod Q (and mod m
//!   when m is in the extended basis) as Σ x_i·ω_i + round(Σ x_i·θ_i), with t·(Q/q_i)^{-1}/q_i
//!   split into an integer part ω_i (kept mod m) and a fraction θ_i. We keep θ_i as a 128-bit
//!   fixed-point fraction rather than a double (HPS use doubles and "long doubles"): x_i has up
//!   to 62 bits, so a double's 53 bits would make x_i·θ_i wrong by up to 2^9 and put that error
//!   into the noise; 128 bits make it below 2^-63 per term, so the rounding is exact except at
//!   ties.
//! * **Divide and round by the last prime** (modulus switching, and the special prime after key
//!   switching): round(x / q_last) = (x − [x + ⌊q_last/2⌋]_{q_last} + ⌊q_last/2⌋) / q_last,
//!   computed in the other primes by a multiplication with q_last^{-1}.

use crate::modarith::Modulus;

/// Exact (centered) base extension from basis A to basis B.
#[derive(Clone, Debug)]
pub struct BaseConverter {
    from: Vec<Modulus>,
    to: Vec<Modulus>,
    /// (A/a_i)^{-1} mod a_i with its Shoup constant.
    a_hat_inv: Vec<(u64, u64)>,
    /// 1 / a_i.
    a_inv: Vec<f64>,
    /// (A/a_i) mod b_j, indexed [j][i].
    a_hat_mod_b: Vec<Vec<u64>>,
    /// −A mod b_j.
    neg_a_mod_b: Vec<u64>,
}

/// Π of `ms` except index `skip`, mod `m`.
fn product_except(ms: &[Modulus], skip: Option<usize>, m: &Modulus) -> u64 {
    ms.iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .fold(1 % m.value(), |acc, (_, x)| m.mul(acc, x.value()))
}

impl BaseConverter {
    /// A converter between two bases of pairwise coprime primes; `None` if they share a prime.
    pub fn new(from: &[Modulus], to: &[Modulus]) -> Option<Self> {
        let mut a_hat_inv = Vec::with_capacity(from.len());
        for (i, m) in from.iter().enumerate() {
            let inv = m.inv(product_except(from, Some(i), m))?;
            a_hat_inv.push((inv, m.shoup(inv)));
        }
        let a_hat_mod_b = to
            .iter()
            .map(|b| {
                (0..from.len())
                    .map(|i| product_except(from, Some(i), b))
                    .collect()
            })
            .collect();
        let a_mod_b: Vec<u64> = to.iter().map(|b| product_except(from, None, b)).collect();
        if a_mod_b.contains(&0) {
            return None;
        }
        Some(Self {
            from: from.to_vec(),
            to: to.to_vec(),
            a_hat_inv,
            a_inv: from.iter().map(|m| 1.0 / m.value() as f64).collect(),
            a_hat_mod_b,
            neg_a_mod_b: a_mod_b.iter().zip(to).map(|(&a, b)| b.neg(a)).collect(),
        })
    }

    /// Extends coefficient-form rows `input` (one per prime of A, each of length n) to rows of
    /// B written into `out` (one per prime of B). Row by row: first y_i = [x_i·(A/a_i)^{-1}]_{a_i}
    /// and v = round(Σ y_i/a_i) for all coefficients, then each output row as one 128-bit sum
    /// Σ y_i·(A/a_i) − v·A per coefficient (k + 1 products < 2^124) and one reduction.
    pub fn convert(&self, input: &[&[u64]], out: &mut [&mut [u64]]) {
        let k = self.from.len();
        if input.len() != k || out.len() != self.to.len() {
            return;
        }
        let n = input.first().map_or(0, |r| r.len());
        if input.iter().any(|r| r.len() != n) || out.iter().any(|r| r.len() != n) {
            return;
        }
        let mut y = vec![0u64; k * n];
        let mut v = vec![0f64; n];
        for (i, (row, yrow)) in input.iter().zip(y.chunks_exact_mut(n)).enumerate() {
            let (w, ws) = self.a_hat_inv[i];
            let (m, inv) = (&self.from[i], self.a_inv[i]);
            for ((yc, &x), vc) in yrow.iter_mut().zip(row.iter()).zip(v.iter_mut()) {
                *yc = m.mul_shoup(x, w, ws);
                *vc += *yc as f64 * inv;
            }
        }
        // v ≥ 0, so adding 1/2 and truncating rounds it (f64::round is a libm call).
        let vi: Vec<u64> = v.iter().map(|&x| (x + 0.5) as u64).collect();
        let mut acc = vec![0u128; n];
        for (j, (b, orow)) in self.to.iter().zip(out.iter_mut()).enumerate() {
            let neg_a = u128::from(self.neg_a_mod_b[j]);
            for (a, &vc) in acc.iter_mut().zip(&vi) {
                *a = u128::from(vc) * neg_a;
            }
            for (yrow, &h) in y.chunks_exact(n).zip(&self.a_hat_mod_b[j]) {
                let h = u128::from(h);
                for (a, &yc) in acc.iter_mut().zip(yrow) {
                    *a += u128::from(yc) * h;
                }
            }
            for (o, &a) in orow.iter_mut().zip(&acc) {
                *o = b.reduce_u128(a);
            }
        }
    }
}

/// ⌊r·2^128 / q⌋ for r < q, as (high word, low word).
pub fn frac128(r: u64, q: u64) -> (u64, u64) {
    let num = u128::from(r) << 64;
    let q = u128::from(q);
    let hi = num / q;
    let lo = ((num % q) << 64) / q;
    (hi as u64, lo as u64)
}

/// Σ_i x_i·θ_i rounded to the nearest integer, θ_i as 128-bit fractions.
#[inline]
pub fn round_frac_sum(xs: impl Iterator<Item = (u64, (u64, u64))>) -> u128 {
    const M: u128 = u64::MAX as u128;
    let (mut int, mut frac) = (0u128, 0u128);
    for (x, (hi, lo)) in xs {
        let t = u128::from(x) * u128::from(hi) + ((u128::from(x) * u128::from(lo)) >> 64);
        int += t >> 64;
        frac += t & M;
    }
    int + ((frac + (1u128 << 63)) >> 64)
}

/// Divides by the last row's prime with rounding: rows `0..k−1` of `rows` become
/// round(x / q_last) mod q_i; the last row is left as is (the caller drops it).
/// `inv_last[i]` is q_last^{-1} mod q_i with its Shoup constant.
pub fn divide_round_last(
    rows: &mut [&mut [u64]],
    moduli: &[Modulus],
    last: &Modulus,
    inv_last: &[(u64, u64)],
) {
    let Some((last_row, others)) = rows.split_last_mut() else {
        return;
    };
    let half = last.value() >> 1;
    for x in last_row.iter_mut() {
        *x = last.add(*x, half);
    }
    for ((row, m), &(inv, inv_shoup)) in others.iter_mut().zip(moduli).zip(inv_last) {
        let half_mod = m.reduce(half);
        for (x, &l) in row.iter_mut().zip(last_row.iter()) {
            let l = m.sub(m.reduce(l), half_mod);
            *x = m.mul_shoup(m.sub(*x, l), inv, inv_shoup);
        }
    }
}

/// Little-endian multi-word unsigned integers, just what CRT composition needs.
pub mod big {
    use std::cmp::Ordering;

    /// acc += a·y (acc must have room for the carry).
    pub fn mul_add_word(acc: &mut [u64], a: &[u64], y: u64) {
        let mut carry = 0u128;
        for (i, slot) in acc.iter_mut().enumerate() {
            let prod = u128::from(a.get(i).copied().unwrap_or(0)) * u128::from(y);
            let s = u128::from(*slot) + prod + carry;
            *slot = s as u64;
            carry = s >> 64;
        }
    }

    /// a vs b (same length or padded with zeros).
    pub fn cmp(a: &[u64], b: &[u64]) -> Ordering {
        let len = a.len().max(b.len());
        for i in (0..len).rev() {
            let (x, y) = (
                a.get(i).copied().unwrap_or(0),
                b.get(i).copied().unwrap_or(0),
            );
            match x.cmp(&y) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        Ordering::Equal
    }

    /// a −= b, for a ≥ b.
    pub fn sub_assign(a: &mut [u64], b: &[u64]) {
        let mut borrow = 0u64;
        for (i, slot) in a.iter_mut().enumerate() {
            let y = b.get(i).copied().unwrap_or(0);
            let (d1, o1) = slot.overflowing_sub(y);
            let (d2, o2) = d1.overflowing_sub(borrow);
            *slot = d2;
            borrow = u64::from(o1 || o2);
        }
    }

    /// b − a into a, for b ≥ a.
    pub fn rsub_assign(a: &mut [u64], b: &[u64]) {
        let mut tmp = b.to_vec();
        tmp.resize(a.len().max(b.len()), 0);
        sub_assign(&mut tmp, a);
        a.copy_from_slice(&tmp[..a.len()]);
    }

    /// Number of significant bits.
    pub fn bits(a: &[u64]) -> u32 {
        for i in (0..a.len()).rev() {
            if a[i] != 0 {
                return 64 * i as u32 + 64 - a[i].leading_zeros();
            }
        }
        0
    }

    /// Product of words.
    pub fn product(ws: &[u64]) -> Vec<u64> {
        let mut acc = vec![0u64; ws.len() + 1];
        acc[0] = 1;
        for &w in ws {
            let prev = acc.clone();
            acc.iter_mut().for_each(|x| *x = 0);
            mul_add_word(&mut acc, &prev, w);
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::ntt_primes;

    fn moduli(bits: u32, count: usize) -> Vec<Modulus> {
        ntt_primes(bits, 64, count)
            .unwrap()
            .into_iter()
            .map(|q| Modulus::new(q).unwrap())
            .collect()
    }

    #[test]
    fn base_extension_gives_the_centered_value() {
        // A = two 30-bit primes; values in i64 range so the truth is easy to compute.
        let a = moduli(30, 2);
        let b = moduli(50, 2);
        let conv = BaseConverter::new(&a, &b).unwrap();
        let big_a = i128::from(a[0].value()) * i128::from(a[1].value());
        // Up to 1/1000 of A from ±A/2: beyond the float error (at ±A/2 either representative is
        // returned, as documented).
        let xs: Vec<i128> = vec![
            0,
            1,
            -1,
            big_a / 2 - big_a / 1000,
            -(big_a / 2) + big_a / 1000,
            123_456_789_012,
            -987_654_321,
        ];
        let rows_a: Vec<Vec<u64>> = a
            .iter()
            .map(|m| {
                xs.iter()
                    .map(|&x| x.rem_euclid(i128::from(m.value())) as u64)
                    .collect()
            })
            .collect();
        let mut out = vec![vec![0u64; xs.len()]; 2];
        {
            let input: Vec<&[u64]> = rows_a.iter().map(|r| r.as_slice()).collect();
            let mut o: Vec<&mut [u64]> = out.iter_mut().map(|r| r.as_mut_slice()).collect();
            conv.convert(&input, &mut o);
        }
        for (j, m) in b.iter().enumerate() {
            for (c, &x) in xs.iter().enumerate() {
                assert_eq!(
                    out[j][c],
                    x.rem_euclid(i128::from(m.value())) as u64,
                    "x={x}"
                );
            }
        }
    }

    #[test]
    fn base_extension_at_half_a_returns_one_of_the_two_lifts() {
        let a = moduli(30, 2);
        let b = moduli(50, 2);
        let conv = BaseConverter::new(&a, &b).unwrap();
        let big_a = i128::from(a[0].value()) * i128::from(a[1].value());
        // Residues x in [0, A) next to A/2: the lift is x or x − A, both about A/2 in size.
        let xs: Vec<i128> = (-3..=3).map(|d| big_a / 2 + d).collect();
        let rows_a: Vec<Vec<u64>> = a
            .iter()
            .map(|m| {
                xs.iter()
                    .map(|&x| (x % i128::from(m.value())) as u64)
                    .collect()
            })
            .collect();
        let mut out = vec![vec![0u64; xs.len()]; 2];
        {
            let input: Vec<&[u64]> = rows_a.iter().map(|r| r.as_slice()).collect();
            let mut o: Vec<&mut [u64]> = out.iter_mut().map(|r| r.as_mut_slice()).collect();
            conv.convert(&input, &mut o);
        }
        for (c, &x) in xs.iter().enumerate() {
            let lifts: Vec<Vec<u64>> = [x, x - big_a]
                .iter()
                .map(|&l| {
                    b.iter()
                        .map(|m| l.rem_euclid(i128::from(m.value())) as u64)
                        .collect()
                })
                .collect();
            let got: Vec<u64> = (0..2).map(|j| out[j][c]).collect();
            assert!(lifts.contains(&got), "x = {x}");
        }
    }

    #[test]
    fn divide_round_last_rounds() {
        let ms = moduli(40, 3);
        let last = ms[2];
        let inv: Vec<(u64, u64)> = ms[..2]
            .iter()
            .map(|m| {
                let i = m.inv(last.value()).unwrap();
                (i, m.shoup(i))
            })
            .collect();
        let ql = i128::from(last.value());
        let xs: Vec<i128> = vec![
            0,
            ql / 2,
            ql / 2 + 1,
            -ql / 2,
            5 * ql + 7,
            -(3 * ql) - ql / 2 - 1,
            ql * ql,
        ];
        let mut rows: Vec<Vec<u64>> = ms
            .iter()
            .map(|m| {
                xs.iter()
                    .map(|&x| x.rem_euclid(i128::from(m.value())) as u64)
                    .collect()
            })
            .collect();
        {
            let mut r: Vec<&mut [u64]> = rows.iter_mut().map(|r| r.as_mut_slice()).collect();
            divide_round_last(&mut r, &ms[..2], &last, &inv);
        }
        for (c, &x) in xs.iter().enumerate() {
            // round half up of x / ql
            let want = (2 * x + ql).div_euclid(2 * ql);
            for i in 0..2 {
                let qi = i128::from(ms[i].value());
                let got = i128::from(rows[i][c]);
                let diff = (got - want).rem_euclid(qi);
                assert!(diff == 0 || diff == 1 || diff == qi - 1, "x={x}");
            }
        }
    }

    #[test]
    fn frac_and_bigint_helpers() {
        let (hi, lo) = frac128(1, 3);
        assert_eq!(hi, 0x5555_5555_5555_5555);
        assert_eq!(lo, 0x5555_5555_5555_5555);
        // 3 · (1/3) rounds to 1; 1 · (1/3) rounds to 0; 2 · (1/3) rounds to 1.
        assert_eq!(round_frac_sum([(3u64, (hi, lo))].into_iter()), 1);
        assert_eq!(round_frac_sum([(1u64, (hi, lo))].into_iter()), 0);
        assert_eq!(round_frac_sum([(2u64, (hi, lo))].into_iter()), 1);
        let p = big::product(&[u64::MAX, u64::MAX]);
        // (2^64−1)^2 = 2^128 − 2^65 + 1
        assert_eq!(p, vec![1, u64::MAX - 1, 0]);
        assert_eq!(big::bits(&p), 128);
        let mut x = p.clone();
        big::sub_assign(&mut x, &[2]);
        assert_eq!(x, vec![u64::MAX, u64::MAX - 2, 0]);
        big::rsub_assign(&mut x, &p);
        assert_eq!(x, vec![2, 0, 0]);
    }
}
