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

/// Arithmetic mod t as the polynomial code uses it: reductions of products of two residues
/// and multiplication by a fixed operand with a precomputed constant.
trait Field: Copy {
    fn add(&self, a: u64, b: u64) -> u64;
    fn sub(&self, a: u64, b: u64) -> u64;
    fn neg(&self, a: u64) -> u64;
    fn mul(&self, a: u64, b: u64) -> u64;
    fn reduce(&self, a: u64) -> u64;
    fn inv(&self, a: u64) -> Option<u64>;
    /// The constant that makes [`Field::mul_fixed`] by `w` cheap.
    fn fixed(&self, w: u64) -> u64;
    fn mul_fixed(&self, y: u64, w: u64, w_pre: u64) -> u64;
}

impl Field for Modulus {
    fn add(&self, a: u64, b: u64) -> u64 {
        Modulus::add(self, a, b)
    }
    fn sub(&self, a: u64, b: u64) -> u64 {
        Modulus::sub(self, a, b)
    }
    fn neg(&self, a: u64) -> u64 {
        Modulus::neg(self, a)
    }
    fn mul(&self, a: u64, b: u64) -> u64 {
        Modulus::mul(self, a, b)
    }
    fn reduce(&self, a: u64) -> u64 {
        Modulus::reduce(self, a)
    }
    fn inv(&self, a: u64) -> Option<u64> {
        Modulus::inv(self, a)
    }
    fn fixed(&self, w: u64) -> u64 {
        self.shoup(w)
    }
    fn mul_fixed(&self, y: u64, w: u64, w_pre: u64) -> u64 {
        self.mul_shoup(y, w, w_pre)
    }
}

/// A plain modulus below 2^32 (every APSI preset's t has at most 26 bits), in 64-bit words:
/// a product of two residues is below 2^64, so Barrett's reduction needs one 64×64 high
/// product with r = ⌊2^64/t⌋ (the estimate ⌊x·r/2^64⌋ is at most 1 below ⌊x/t⌋, one
/// correction), and Shoup's multiplication by a fixed w takes w' = ⌊w·2^32/t⌋ and only low
/// 64-bit products (for y < 2^32, w·y − ⌊w'·y/2^32⌋·t ∈ [0, 2t)). Several times faster than
/// the 128-bit Barrett of [`Modulus`] in the O(k²) loops below, the bulk of building a
/// sender DB.
#[derive(Clone, Copy)]
struct Small {
    t: u64,
    ratio: u64,
}

impl Small {
    fn new(m: &Modulus) -> Option<Self> {
        let t = m.value();
        (t < 1 << 32).then(|| Self {
            t,
            ratio: u64::MAX / t,
        })
    }
}

impl Field for Small {
    #[inline(always)]
    fn add(&self, a: u64, b: u64) -> u64 {
        let s = a + b;
        s.min(s.wrapping_sub(self.t))
    }
    #[inline(always)]
    fn sub(&self, a: u64, b: u64) -> u64 {
        let d = a.wrapping_sub(b);
        d.min(d.wrapping_add(self.t))
    }
    #[inline(always)]
    fn neg(&self, a: u64) -> u64 {
        if a == 0 { 0 } else { self.t - a }
    }
    #[inline(always)]
    fn mul(&self, a: u64, b: u64) -> u64 {
        self.reduce(a * b)
    }
    #[inline(always)]
    fn reduce(&self, x: u64) -> u64 {
        let q = ((u128::from(x) * u128::from(self.ratio)) >> 64) as u64;
        // x − q·t < 3t for any word x (2t for x < t², the products): two corrections.
        let r = x - q * self.t;
        let r = r.min(r.wrapping_sub(self.t));
        r.min(r.wrapping_sub(self.t))
    }
    fn inv(&self, a: u64) -> Option<u64> {
        Modulus::new(self.t).and_then(|m| m.inv(a))
    }
    #[inline(always)]
    fn fixed(&self, w: u64) -> u64 {
        (w << 32) / self.t
    }
    #[inline(always)]
    fn mul_fixed(&self, y: u64, w: u64, w_pre: u64) -> u64 {
        let q = (w_pre * y) >> 32;
        let r = (w * y).wrapping_sub(q * self.t);
        r.min(r.wrapping_sub(self.t))
    }
}

/// Π (X − r) over `roots`, degree |roots| (the constant 1 for no roots).
pub fn from_roots(t: &Modulus, roots: &[u64]) -> Vec<u64> {
    match Small::new(t) {
        Some(s) => from_roots_in(&s, roots),
        None => from_roots_in(t, roots),
    }
}

fn from_roots_in<F: Field>(t: &F, roots: &[u64]) -> Vec<u64> {
    let mut p = Vec::with_capacity(roots.len() + 1);
    p.push(1u64);
    for &r in roots {
        let nr = t.neg(t.reduce(r));
        let pre = t.fixed(nr);
        p.push(0);
        for i in (1..p.len()).rev() {
            p[i] = t.add(p[i - 1], t.mul_fixed(p[i], nr, pre));
        }
        p[0] = t.mul_fixed(p[0], nr, pre);
    }
    p
}

/// Inverts every element of `v` in place (all nonzero), with one modular inversion.
/// Returns false if one is zero.
fn batch_invert<F: Field>(t: &F, v: &mut [u64]) -> bool {
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
    match Small::new(t) {
        Some(s) => interpolate_in(&s, xs, ys),
        None => interpolate_in(t, xs, ys),
    }
}

fn interpolate_in<F: Field>(t: &F, xs: &[u64], ys: &[Vec<u64>]) -> Option<Vec<Vec<u64>>> {
    let k = xs.len();
    let xs: Vec<u64> = xs.iter().map(|&x| t.reduce(x)).collect();
    let mut cs: Vec<Vec<u64>> = ys
        .iter()
        .map(|y| y.iter().map(|&v| t.reduce(v)).collect())
        .collect();
    let mut den = Vec::with_capacity(k);
    for j in 1..k {
        den.clear();
        den.extend((j..k).map(|i| t.sub(xs[i], xs[i - j])));
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
                    let nx = t.neg(xs[i]);
                    let pre = t.fixed(nx);
                    deg += 1;
                    for d in (1..=deg).rev() {
                        p[d] = t.add(p[d - 1], t.mul_fixed(p[d], nx, pre));
                    }
                    p[0] = t.add(t.mul_fixed(p[0], nx, pre), c[i]);
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

    /// The word-sized path and the 128-bit one give the same polynomials, at the largest
    /// preset-sized t (26 bits) and at t just below 2^32, the bound of the word path.
    #[test]
    fn small_modulus_path_matches_the_generic_one() {
        for tv in [65537u64, 67043329, 4294967291] {
            let m = Modulus::new(tv).unwrap();
            let s = Small::new(&m).unwrap();
            let mut state = tv;
            let mut next = || {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                state >> 7
            };
            let xs: Vec<u64> = (0..60).map(|_| next() % tv).collect();
            let ys: Vec<Vec<u64>> = (0..3).map(|_| (0..60).map(|_| next()).collect()).collect();
            assert_eq!(from_roots_in(&s, &xs), from_roots_in(&m, &xs));
            assert_eq!(interpolate_in(&s, &xs, &ys), interpolate_in(&m, &xs, &ys));
            for _ in 0..10_000 {
                let (a, b, x) = (next() % tv, next() % tv, next() << 7 | next());
                assert_eq!(Field::mul(&s, a, b), Field::mul(&m, a, b));
                assert_eq!(Field::reduce(&s, x), x % tv);
                assert_eq!(Field::mul_fixed(&s, b, a, s.fixed(a)), Field::mul(&m, a, b));
            }
        }
        assert!(Small::new(&Modulus::new(1 << 33).unwrap()).is_none());
    }
}
