//! Polynomials over Z_t for the sender's bins: the matching polynomial Π (X − x_i), whose roots
//! are a bin's item felts, and Newton interpolation of the label felts, L(x_i) = ℓ_i (CHLR18
//! §4: a match evaluates the label polynomial at the item's own felt). Coefficients are in
//! increasing degree. Interpolation needs the x_i distinct, which the sender DB guarantees per
//! slot in labeled mode.
//!
//! Newton's divided differences need k(k−1)/2 inverses; for each order j the k − j
//! denominators x_i − x_{i−j} are inverted together (Montgomery's trick: one inversion and
//! three products each), and shared by every label part of the slot, since they depend on the
//! x_i only.

use blindjoin_he::modarith::Modulus;

/// Π (X − r) over `roots`, degree |roots| (the constant 1 for no roots).
pub fn from_roots(t: &Modulus, roots: &[u64]) -> Vec<u64> {
    let mut p = Vec::with_capacity(roots.len() + 1);
    p.push(1u64);
    for &r in roots {
        let nr = t.neg(t.reduce(r));
        p.push(0);
        for i in (0..p.len()).rev() {
            let lower = if i > 0 { p[i - 1] } else { 0 };
            p[i] = t.add(lower, t.mul(p[i], nr));
        }
    }
    p
}

/// Inverts every element of `v` in place (all nonzero), with one modular inversion.
/// Returns false if one is zero.
fn batch_invert(t: &Modulus, v: &mut [u64]) -> bool {
    let mut prefix = Vec::with_capacity(v.len());
    let mut acc = 1u64;
    for &x in v.iter() {
        prefix.push(acc);
        acc = t.mul(acc, x);
    }
    let Some(mut inv) = t.inv(acc) else {
        return false;
    };
    for i in (0..v.len()).rev() {
        let x = v[i];
        v[i] = t.mul(inv, prefix[i]);
        inv = t.mul(inv, x);
    }
    true
}

/// For each `ys[p]` (one value per x), the coefficients of the polynomial of degree < |xs|
/// through (xs[i], ys[p][i]); `None` if two xs are equal (mod t).
pub fn interpolate_many(t: &Modulus, xs: &[u64], ys: &[Vec<u64>]) -> Option<Vec<Vec<u64>>> {
    let k = xs.len();
    let mut cs: Vec<Vec<u64>> = ys
        .iter()
        .map(|y| y.iter().map(|&v| t.reduce(v)).collect())
        .collect();
    let mut den = Vec::with_capacity(k);
    for j in 1..k {
        den.clear();
        den.extend((j..k).map(|i| t.sub(t.reduce(xs[i]), t.reduce(xs[i - j]))));
        if !batch_invert(t, &mut den) {
            return None;
        }
        for c in cs.iter_mut() {
            for i in (j..k).rev() {
                c[i] = t.mul(t.sub(c[i], c[i - 1]), den[i - j]);
            }
        }
    }
    // Newton form to monomials: p = c_{k−1}; p = p·(X − x_i) + c_i downward.
    Some(
        cs.into_iter()
            .map(|c| {
                let mut p = vec![0u64; k];
                if k == 0 {
                    return p;
                }
                p[0] = c[k - 1];
                let mut deg = 0;
                for i in (0..k - 1).rev() {
                    let nx = t.neg(t.reduce(xs[i]));
                    deg += 1;
                    for d in (0..=deg).rev() {
                        let lower = if d > 0 { p[d - 1] } else { 0 };
                        p[d] = t.add(lower, t.mul(p[d], nx));
                    }
                    p[0] = t.add(p[0], c[i]);
                }
                p
            })
            .collect(),
    )
}

/// Σ c_d x^d.
pub fn eval(t: &Modulus, coeffs: &[u64], x: u64) -> u64 {
    coeffs
        .iter()
        .rev()
        .fold(0u64, |acc, &c| t.add(t.mul(acc, t.reduce(x)), c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_vanish_and_interpolation_hits_every_point() {
        let t = Modulus::new(65537).unwrap();
        let xs: Vec<u64> = (0..40u64).map(|i| (i * 7919 + 3) % 65537).collect();
        let p = from_roots(&t, &xs);
        assert_eq!(p.len(), 41);
        assert_eq!(p[40], 1);
        for &x in &xs {
            assert_eq!(eval(&t, &p, x), 0);
        }
        assert_ne!(eval(&t, &p, 1), 0);
        assert_eq!(from_roots(&t, &[]), vec![1]);
        let ys = vec![
            xs.iter().map(|x| (x * x + 5) % 65537).collect::<Vec<_>>(),
            vec![9; 40],
        ];
        let ls = interpolate_many(&t, &xs, &ys).unwrap();
        for (l, y) in ls.iter().zip(&ys) {
            assert_eq!(l.len(), 40);
            for (&x, &v) in xs.iter().zip(y) {
                assert_eq!(eval(&t, l, x), v);
            }
        }
        // One point: the constant; none: the empty polynomial.
        assert_eq!(
            interpolate_many(&t, &[5], &[vec![77]]).unwrap(),
            vec![vec![77]]
        );
        assert_eq!(
            interpolate_many(&t, &[], &[vec![]]).unwrap(),
            vec![Vec::<u64>::new()]
        );
        assert!(interpolate_many(&t, &[5, 5], &[vec![1, 2]]).is_none());
    }
}
