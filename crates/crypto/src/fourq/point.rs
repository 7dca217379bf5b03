//! FourQ points (paper §2): the twisted Edwards curve E: −x² + y² = 1 + d·x²·y² over GF(p²), with
//! #E = 392·N. Arithmetic uses extended coordinates (Hisil–Wong–Carter–Dawson) in the variants of
//! the paper's §5 / FourQlib: R1 = (X, Y, Z, Ta, Tb) with T = Ta·Tb = XY/Z, and the cached form
//! R2 = (X + Y, Y − X, 2Z, 2d·T) for the second operand of an addition. Because a = −1 is a square
//! and d is not a square in GF(p²), the addition law is complete: no exceptional cases.
//!
//! Encoding (FourQlib `encode`): the 32 bytes of y = y0 ‖ y1 with bit 255 set to the sign of x
//! (bit 126 of x0, or of x1 when x0 = 0).

use super::field::{Fp, Fp2, Fq2};
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

/// The curve constant d.
pub(crate) const D: Fp2 = Fp2::new(0xe40000000000000142, 0x5e472f846657e0fcb3821488f1fc0c8d);
/// 2·d, used by the cached form.
const D2: Fp2 = Fp2::new(0x1c80000000000000284, 0x3c8e5f08ccafc1f967042911e3f8191b);

/// The generator G of the order-N subgroup (affine).
#[cfg(test)]
pub(crate) const GENERATOR: Affine = Affine {
    x: Fp2::new(
        0x1a3472237c2fb305286592ad7b3833aa,
        0x1e1f553f2878aa9c96869fb360ac77f6,
    ),
    y: Fp2::new(
        0x0e3fee9ba120785ab924a2462bcbb287,
        0x6e1c4af8630e024249a7c344844c8b5c,
    ),
};

/// An affine point (x, y).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Affine {
    /// x.
    pub(crate) x: Fp2,
    /// y.
    pub(crate) y: Fp2,
}

/// A point in extended coordinates R1 = (X, Y, Z, Ta, Tb), T = Ta·Tb (eight points at once when
/// `F` is the IFMA lane vector).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Point<F = Fp2> {
    pub(crate) x: F,
    pub(crate) y: F,
    pub(crate) z: F,
    pub(crate) ta: F,
    pub(crate) tb: F,
}

/// A point in the cached form R2 = (X + Y, Y − X, 2Z, 2d·T): an addition operand.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cached<F = Fp2> {
    pub(crate) n: F,
    pub(crate) d: F,
    pub(crate) e: F,
    pub(crate) f: F,
}

impl Affine {
    /// The neutral element (0, 1).
    pub(crate) const IDENTITY: Affine = Affine {
        x: Fp2::ZERO,
        y: Fp2::ONE,
    };

    /// Whether −x² + y² = 1 + d·x²·y².
    pub(crate) fn is_on_curve(&self) -> bool {
        let x2 = self.x.sqr();
        let y2 = self.y.sqr();
        let lhs = y2.sub(x2);
        let rhs = Fp2::ONE.add(D.mul(x2).mul(y2));
        lhs.ct_eq(&rhs).into()
    }

    /// FourQlib's encoding: y0 ‖ y1 with the sign of x in bit 255.
    pub(crate) fn encode(&self) -> [u8; 32] {
        let mut out = self.y.to_bytes();
        out[31] |= self.x.sign_bit() << 7;
        out
    }

    /// Strict decoding: rejects a non-canonical y (bit 127 of y0 set, or y0 or y1 ≥ p), a y with
    /// no curve point, and x = 0 with the sign bit set. FourQlib accepts that last case
    /// (`decode_lenient` vectors) and returns the point with the bit cleared; we reject it so that
    /// every point has exactly one accepted encoding — a peer cannot re-send one masked point
    /// under two different byte strings. Runs on public peer data, so it may branch.
    pub(crate) fn decode(bytes: &[u8; 32]) -> Option<Affine> {
        let sign = bytes[31] >> 7;
        let mut ybytes = *bytes;
        ybytes[31] &= 0x7f;
        let y = Fp2::from_canonical_bytes(&ybytes)?;
        let y2 = y.sqr();
        let u = y2.sub(Fp2::ONE);
        let v = D.mul(y2).add(Fp2::ONE);
        // x = √(u/v) = u/√(u·v): one inverse square root, no inversion. u = 0 (y = ±1) gives
        // x = 0. v ≠ 0 for every y, since −1/d would have to be a square.
        let mut x = if bool::from(u.is_zero()) {
            Fp2::ZERO
        } else {
            u.mul(u.mul(v).inv_sqrt()?).canonical()
        };
        if !bool::from(v.mul(x.sqr()).ct_eq(&u)) {
            return None;
        }
        if bool::from(x.is_zero()) {
            return (sign == 0).then_some(Affine { x: Fp2::ZERO, y });
        }
        if x.sign_bit() != sign {
            x = x.neg().canonical();
        }
        let p = Affine { x, y };
        p.is_on_curve().then_some(p)
    }

    /// The R1 form (X, Y, 1, x, y).
    pub(crate) fn to_point(self) -> Point {
        Point {
            x: self.x,
            y: self.y,
            z: Fp2::ONE,
            ta: self.x,
            tb: self.y,
        }
    }
}

impl<F: Fq2> Point<F> {
    /// 2·P from (X, Y, Z) only (FourQlib's DBL: 4 squarings, 3 multiplications). The formula is
    /// the a = −1 doubling of Hisil et al. with every output negated (the same projective point).
    #[inline(always)]
    pub(crate) fn double(&self) -> Point<F> {
        let a = self.x.sqr();
        let b = self.y.sqr();
        let zz = self.z.sqr();
        let c = zz.add(zz);
        let d = a.add(b);
        let e = self.x.add(self.y).sqr().sub(d);
        let f = b.sub(a);
        let g = c.sub(f);
        Point {
            x: e.mul(g),
            y: d.mul(f),
            z: f.mul(g),
            ta: e,
            tb: d,
        }
    }

    /// P + Q for Q cached (1 + 8 multiplications): the unified a = −1 addition of Hisil et al.
    #[inline(always)]
    pub(crate) fn add(&self, q: &Cached<F>) -> Point<F> {
        let t = self.ta.mul(self.tb);
        let n = self.x.add(self.y);
        let d = self.y.sub(self.x);
        add_core(n, d, self.z, t, q)
    }

    /// 392·P = ((2P + P)·16 + P)·8, the cofactor clearing of FourQlib (not secret).
    #[inline(always)]
    pub(crate) fn mul_by_cofactor(&self) -> Point<F> {
        let pc = self.cached();
        let mut q = self.double().add(&pc); // 3P
        for _ in 0..4 {
            q = q.double();
        }
        q = q.add(&pc); // 49P
        for _ in 0..3 {
            q = q.double();
        }
        q
    }

    /// The cached form of P (2 multiplications).
    #[inline(always)]
    pub(crate) fn cached(&self) -> Cached<F> {
        let t = self.ta.mul(self.tb);
        Cached {
            n: self.x.add(self.y),
            d: self.y.sub(self.x),
            e: self.z.add(self.z),
            f: F::konst(D2).mul(t),
        }
    }
}

impl Point {
    /// The neutral element.
    pub(crate) fn identity() -> Point {
        Affine::IDENTITY.to_point()
    }

    /// −P.
    #[cfg(test)]
    pub(crate) fn neg(&self) -> Point {
        Point {
            x: self.x.neg(),
            ta: self.ta.neg(),
            ..*self
        }
    }

    /// Projective equality: X1·Z2 = X2·Z1 and Y1·Z2 = Y2·Z1.
    #[cfg(test)]
    pub(crate) fn ct_eq(&self, o: &Point) -> Choice {
        self.x.mul(o.z).ct_eq(&o.x.mul(self.z)) & self.y.mul(o.z).ct_eq(&o.y.mul(self.z))
    }

    /// Whether P is the neutral element (X = 0 and Y = Z).
    pub(crate) fn is_identity(&self) -> Choice {
        self.x.is_zero() & self.y.ct_eq(&self.z)
    }

    /// Affine form given 1/Z.
    pub(crate) fn affine_with(&self, zinv: Fp2) -> Affine {
        Affine {
            x: self.x.mul(zinv).canonical(),
            y: self.y.mul(zinv).canonical(),
        }
    }

    /// Affine form (one inversion).
    #[cfg(test)]
    pub(crate) fn affine(&self) -> Affine {
        self.affine_with(self.z.invert())
    }
}

/// The core addition: P in the form (X + Y, Y − X, Z, T), Q cached; output in R1.
#[inline(always)]
pub(crate) fn add_core<F: Fq2>(n1: F, d1: F, z1: F, t1: F, q: &Cached<F>) -> Point<F> {
    let a = d1.mul(q.d);
    let b = n1.mul(q.n);
    let c = t1.mul(q.f);
    let d = z1.mul(q.e);
    let e = b.sub(a);
    let f = d.sub(c);
    let g = d.add(c);
    let h = b.add(a);
    Point {
        x: e.mul(f),
        y: g.mul(h),
        z: f.mul(g),
        ta: e,
        tb: h,
    }
}

impl Cached {
    /// The eight GF(p) words, for masked table scans.
    #[inline(always)]
    pub(crate) fn limbs(&self) -> [u128; 8] {
        [
            self.n.a.0, self.n.b.0, self.d.a.0, self.d.b.0, self.e.a.0, self.e.b.0, self.f.a.0,
            self.f.b.0,
        ]
    }

    /// Inverse of [`Cached::limbs`].
    #[inline(always)]
    pub(crate) fn from_limbs(w: [u128; 8]) -> Cached {
        let f = |a, b| Fp2 { a: Fp(a), b: Fp(b) };
        Cached {
            n: f(w[0], w[1]),
            d: f(w[2], w[3]),
            e: f(w[4], w[5]),
            f: f(w[6], w[7]),
        }
    }

    /// −Q: swap X + Y and Y − X, negate 2d·T.
    pub(crate) fn conditional_negate(&mut self, neg: Choice) {
        let (n, d) = (self.n, self.d);
        self.n = Fp2::conditional_select(&n, &d, neg);
        self.d = Fp2::conditional_select(&d, &n, neg);
        self.f = Fp2::conditional_select(&self.f, &self.f.neg(), neg);
    }
}

impl ConditionallySelectable for Cached {
    fn conditional_select(x: &Cached, y: &Cached, c: Choice) -> Cached {
        Cached {
            n: Fp2::conditional_select(&x.n, &y.n, c),
            d: Fp2::conditional_select(&x.d, &y.d, c),
            e: Fp2::conditional_select(&x.e, &y.e, c),
            f: Fp2::conditional_select(&x.f, &y.f, c),
        }
    }
}

/// Affine forms of a batch of points with one field inversion (Montgomery's trick): the
/// prefix products of the Z's, one inversion, then a backward pass.
pub(crate) fn batch_to_affine(points: &[Point]) -> Vec<Affine> {
    let mut prefix = Vec::with_capacity(points.len());
    let mut acc = Fp2::ONE;
    for p in points {
        prefix.push(acc);
        acc = acc.mul(p.z);
    }
    let mut inv = acc.invert();
    let mut out = vec![Affine::IDENTITY; points.len()];
    for (i, p) in points.iter().enumerate().rev() {
        let zinv = inv.mul(prefix[i]);
        inv = inv.mul(p.z);
        out[i] = p.affine_with(zinv);
    }
    out
}
