//! GF(p) and GF(p²) for p = 2^127 − 1 (FourQ paper §2: the base field is the Mersenne prime
//! p = 2^127 − 1 and the curve lives over GF(p²) = GF(p)\[i\]/(i² + 1)).
//!
//! An [`Fp`] holds a `u128` below 2^127; the value p itself (the "unreduced zero") may appear in
//! intermediate results and is only folded to 0 by [`Fp::canonical`]. Reduction uses
//! 2^127 ≡ 1 (mod p), so a wide value folds as `lo + hi`. Every operation is branch-free in its
//! inputs: the only data-dependent work is arithmetic and masking.

use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

/// 2^127 − 1, also the mask of the low 127 bits.
const P: u128 = (1u128 << 127) - 1;

/// An element of GF(p), held as a `u128` in `[0, 2^127)` (p itself stands for 0).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Fp(pub(crate) u128);

impl Fp {
    /// Zero.
    pub(crate) const ZERO: Fp = Fp(0);
    /// One.
    pub(crate) const ONE: Fp = Fp(1);

    /// A constant below 2^127 (the constants of the paper and of the hash map are all canonical).
    pub(crate) const fn new(v: u128) -> Fp {
        Fp(v & P)
    }

    /// Folds a value below 2^128 to below 2^127: 2^127 ≡ 1.
    #[inline(always)]
    pub(crate) fn fold(s: u128) -> Fp {
        Fp((s & P) + (s >> 127))
    }

    /// a + b.
    #[inline(always)]
    pub(crate) fn add(self, b: Fp) -> Fp {
        Fp::fold(self.0 + b.0)
    }

    /// a − b: a wrapping subtraction, then + p under an all-ones mask when it borrowed
    /// (2^128 + a − b + p ≡ a − b + p mod 2^128, which lies in [0, p) since a, b < 2^127).
    #[inline(always)]
    pub(crate) fn sub(self, b: Fp) -> Fp {
        let (d, borrow) = self.0.overflowing_sub(b.0);
        Fp(d.wrapping_add(P & 0u128.wrapping_sub(borrow as u128)))
    }

    /// −a.
    #[inline(always)]
    pub(crate) fn neg(self) -> Fp {
        Fp(P - self.0)
    }

    /// a · b: a 254-bit schoolbook product on 64-bit halves, then two folds.
    #[inline(always)]
    pub(crate) fn mul(self, b: Fp) -> Fp {
        let (a0, a1) = (self.0 as u64 as u128, self.0 >> 64);
        let (b0, b1) = (b.0 as u64 as u128, b.0 >> 64);
        let lo = a0 * b0;
        let mid = a0 * b1 + a1 * b0; // each term < 2^127, so the sum fits
        let hi = a1 * b1;
        Fp::reduce_wide(lo, mid, hi)
    }

    /// a².
    #[inline(always)]
    pub(crate) fn sqr(self) -> Fp {
        let (a0, a1) = (self.0 as u64 as u128, self.0 >> 64);
        let lo = a0 * a0;
        let mid = (a0 * a1) << 1; // a0·a1 < 2^127
        let hi = a1 * a1;
        Fp::reduce_wide(lo, mid, hi)
    }

    /// Reduces lo + mid·2^64 + hi·2^128 (< 2^254) using 2^128 ≡ 2 and 2^127 ≡ 1.
    #[inline(always)]
    fn reduce_wide(lo: u128, mid: u128, hi: u128) -> Fp {
        let (low, carry) = lo.overflowing_add(mid << 64);
        let high = hi + (mid >> 64) + carry as u128; // < 2^126: the product is < 2^254
        let s = (low & P) + (low >> 127) + (high << 1);
        Fp::fold(s)
    }

    /// a / 2: adds p first when a is odd, so the halving is exact.
    pub(crate) fn half(self) -> Fp {
        let a = self.canonical().0;
        Fp((a + (a & 1) * P) >> 1)
    }

    /// a^(2^125 − 1) = a^((p − 3)/4) (see [`pow_p_minus_3_over_4`]): it yields the inverse, the
    /// square root and the inverse square root.
    pub(crate) fn pow_p_minus_3_over_4(self) -> Fp {
        pow_p_minus_3_over_4(self)
    }

    /// 1/a = a^(p − 2) = (a^(2^125 − 1))^4 · a (and 0 for 0).
    pub(crate) fn invert(self) -> Fp {
        sqr_n(self.pow_p_minus_3_over_4(), 2).mul(self)
    }

    /// a^((p + 1)/4): a square root of a when a is a square (p ≡ 3 mod 4).
    #[cfg(test)]
    pub(crate) fn sqrt_candidate(self) -> Fp {
        self.pow_p_minus_3_over_4().mul(self)
    }

    /// The representative in `[0, p)`.
    #[inline(always)]
    pub(crate) fn canonical(self) -> Fp {
        // Only p itself needs folding; p + 1 = 2^127 is the only case setting bit 127.
        Fp((self.0 + ((self.0 + 1) >> 127)) & P)
    }

    /// Whether a ≡ 0.
    pub(crate) fn is_zero(self) -> Choice {
        self.canonical().0.ct_eq(&0)
    }

    /// Bit 126 of the canonical value: FourQ's "sign" (set iff a > (p − 1)/2).
    pub(crate) fn sign_bit(self) -> u8 {
        (self.canonical().0 >> 126) as u8 & 1
    }

    /// 16 little-endian bytes of the canonical value.
    pub(crate) fn to_bytes(self) -> [u8; 16] {
        self.canonical().0.to_le_bytes()
    }

    /// Parses 16 little-endian bytes; `None` unless the value is canonical (below p).
    pub(crate) fn from_canonical_bytes(b: &[u8; 16]) -> Option<Fp> {
        let v = u128::from_le_bytes(*b);
        (v < P).then_some(Fp(v))
    }

    /// Reduces 32 little-endian bytes (a 256-bit value) modulo p: the bias is below 2^-127.
    pub(crate) fn from_bytes_wide(b: &[u8; 32]) -> Fp {
        let mut lo = [0u8; 16];
        let mut hi = [0u8; 16];
        lo.copy_from_slice(&b[..16]);
        hi.copy_from_slice(&b[16..]);
        let (lo, hi) = (u128::from_le_bytes(lo), u128::from_le_bytes(hi));
        // v = lo + hi·2^128 ≡ lo + 2·hi, since 2^128 ≡ 2.
        // A double fold takes any u128 below 2^127 (one fold alone maps 2^128 − 1 to 2^127).
        let h = Fp::fold(Fp::fold(hi).0);
        Fp::fold(Fp::fold(lo).0).add(h.add(h))
    }
}

impl ConstantTimeEq for Fp {
    fn ct_eq(&self, other: &Fp) -> Choice {
        self.canonical().0.ct_eq(&other.canonical().0)
    }
}

impl ConditionallySelectable for Fp {
    fn conditional_select(a: &Fp, b: &Fp, choice: Choice) -> Fp {
        Fp(u128::conditional_select(&a.0, &b.0, choice))
    }
}

/// An element a + b·i of GF(p²), i² = −1.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Fp2 {
    /// Real part.
    pub(crate) a: Fp,
    /// Imaginary part.
    pub(crate) b: Fp,
}

impl Fp2 {
    /// Zero.
    pub(crate) const ZERO: Fp2 = Fp2::new(0, 0);
    /// One.
    pub(crate) const ONE: Fp2 = Fp2::new(1, 0);

    /// a + b·i from two canonical integers.
    pub(crate) const fn new(a: u128, b: u128) -> Fp2 {
        Fp2 {
            a: Fp::new(a),
            b: Fp::new(b),
        }
    }

    /// x + y.
    #[inline(always)]
    pub(crate) fn add(self, o: Fp2) -> Fp2 {
        Fp2 {
            a: self.a.add(o.a),
            b: self.b.add(o.b),
        }
    }

    /// x − y.
    #[inline(always)]
    pub(crate) fn sub(self, o: Fp2) -> Fp2 {
        Fp2 {
            a: self.a.sub(o.a),
            b: self.b.sub(o.b),
        }
    }

    /// −x.
    #[inline(always)]
    pub(crate) fn neg(self) -> Fp2 {
        Fp2 {
            a: self.a.neg(),
            b: self.b.neg(),
        }
    }

    /// The Frobenius conjugate a − b·i (used by the endomorphisms, paper §3).
    #[inline(always)]
    pub(crate) fn conj(self) -> Fp2 {
        Fp2 {
            a: self.a,
            b: self.b.neg(),
        }
    }

    /// x · y by Karatsuba: three GF(p) products.
    #[inline(always)]
    pub(crate) fn mul(self, o: Fp2) -> Fp2 {
        let t0 = self.a.mul(o.a);
        let t1 = self.b.mul(o.b);
        let t2 = self.a.add(self.b).mul(o.a.add(o.b));
        Fp2 {
            a: t0.sub(t1),
            b: t2.sub(t0.add(t1)),
        }
    }

    /// x² = (a + b)(a − b) + 2ab·i: two GF(p) products.
    #[inline(always)]
    pub(crate) fn sqr(self) -> Fp2 {
        let re = self.a.add(self.b).mul(self.a.sub(self.b));
        let ab = self.a.mul(self.b);
        Fp2 {
            a: re,
            b: ab.add(ab),
        }
    }

    /// x · s for s in GF(p).
    pub(crate) fn mul_fp(self, s: Fp) -> Fp2 {
        Fp2 {
            a: self.a.mul(s),
            b: self.b.mul(s),
        }
    }

    /// 1/x = conj(x) / (a² + b²) (and 0 for 0).
    pub(crate) fn invert(self) -> Fp2 {
        let n = self.a.sqr().add(self.b.sqr()).invert();
        self.conj().mul_fp(n)
    }

    /// Both parts in `[0, p)`.
    pub(crate) fn canonical(self) -> Fp2 {
        Fp2 {
            a: self.a.canonical(),
            b: self.b.canonical(),
        }
    }

    /// Whether x = 0.
    pub(crate) fn is_zero(self) -> Choice {
        self.a.is_zero() & self.b.is_zero()
    }

    /// FourQ's sign of x (the encoding's bit 255): bit 126 of a, or of b when a = 0.
    pub(crate) fn sign_bit(self) -> u8 {
        let a0 = self.a.is_zero();
        u8::conditional_select(&self.a.sign_bit(), &self.b.sign_bit(), a0)
    }

    /// a ‖ b, 16 little-endian bytes each, canonical.
    pub(crate) fn to_bytes(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out[..16].copy_from_slice(&self.a.to_bytes());
        out[16..].copy_from_slice(&self.b.to_bytes());
        out
    }

    /// Parses a ‖ b; `None` unless both halves are canonical.
    pub(crate) fn from_canonical_bytes(bytes: &[u8; 32]) -> Option<Fp2> {
        let mut a = [0u8; 16];
        let mut b = [0u8; 16];
        a.copy_from_slice(&bytes[..16]);
        b.copy_from_slice(&bytes[16..]);
        Some(Fp2 {
            a: Fp::from_canonical_bytes(&a)?,
            b: Fp::from_canonical_bytes(&b)?,
        })
    }

    /// 1/√x for a non-zero square x, or `None` (x = 0 or not a square) — with two
    /// exponentiations and no inversion (the inverse-square-root method of draft-ladd-cfrg-4q,
    /// after Hamburg). For x = a + b·i with b ≠ 0: the norm n = a² + b² has c = √n = n·s with
    /// s = n^((p−3)/4) = 1/√n; δ = (a + c)/2 is then a square (√x = δg + (b/2)g·i, g = δ^((p−3)/4))
    /// or −δ is ((√x = (b/2)g − δg·i)); finally 1/√x = conj(√x)/N(√x) with N(√x) = ±c and 1/c = s.
    /// Branches only on public facts (used by the decoder on peer data).
    pub(crate) fn inv_sqrt(self) -> Option<Fp2> {
        if bool::from(self.is_zero()) {
            return None;
        }
        let (a, b) = (self.a, self.b);
        if bool::from(b.is_zero()) {
            // a is a square in GF(p) (t = 1/√a) or −a is (then 1/√a = t·i up to sign).
            let t = a.pow_p_minus_3_over_4();
            let square = bool::from(a.mul(t.sqr()).ct_eq(&Fp::ONE));
            return Some(if square {
                Fp2 { a: t, b: Fp::ZERO }
            } else {
                Fp2 { a: Fp::ZERO, b: t }
            });
        }
        let n = a.sqr().add(b.sqr());
        let s = n.pow_p_minus_3_over_4();
        if !bool::from(n.mul(s.sqr()).ct_eq(&Fp::ONE)) {
            return None;
        }
        let c = n.mul(s);
        let delta = a.add(c).half();
        let g = delta.pow_p_minus_3_over_4();
        let half_b_g = b.half().mul(g);
        let (root, norm_inv) = if bool::from(delta.mul(g.sqr()).ct_eq(&Fp::ONE)) {
            (
                Fp2 {
                    a: delta.mul(g),
                    b: half_b_g,
                },
                s,
            )
        } else {
            (
                Fp2 {
                    a: half_b_g,
                    b: delta.mul(g).neg(),
                },
                s.neg(),
            )
        };
        Some(root.conj().mul_fp(norm_inv))
    }

    /// A square root of x, or `None` if x is not a square in GF(p²) (test reference for
    /// [`Fp2::inv_sqrt`]).
    ///
    /// Method: the norm n = a² + b² must be a square s² in GF(p); then x = (x0 + x1·i)² with
    /// x0² = (a ± s)/2 (one of the two signs gives a square) and x1 = b/(2·x0). Branches only on
    /// whether values are squares; used on public data (peer points), never on secrets.
    #[cfg(test)]
    pub(crate) fn sqrt(self) -> Option<Fp2> {
        let n = self.a.sqr().add(self.b.sqr());
        let s = n.sqrt_candidate();
        if !bool::from(s.sqr().ct_eq(&n)) {
            return None;
        }
        let mut delta = self.a.add(s).half();
        let mut x0 = delta.sqrt_candidate();
        if !bool::from(x0.sqr().ct_eq(&delta)) {
            delta = self.a.sub(s).half();
            x0 = delta.sqrt_candidate();
        }
        let root = if bool::from(x0.is_zero()) {
            // delta = 0 only when b = 0 and −a is a square: the root is purely imaginary.
            Fp2 {
                a: Fp::ZERO,
                b: self.a.neg().sqrt_candidate(),
            }
        } else {
            Fp2 {
                a: x0,
                b: self.b.mul(x0.add(x0).invert()),
            }
        };
        bool::from(root.sqr().ct_eq(&self)).then_some(root)
    }
}

impl ConstantTimeEq for Fp2 {
    fn ct_eq(&self, other: &Fp2) -> Choice {
        self.a.ct_eq(&other.a) & self.b.ct_eq(&other.b)
    }
}

impl ConditionallySelectable for Fp2 {
    fn conditional_select(x: &Fp2, y: &Fp2, choice: Choice) -> Fp2 {
        Fp2 {
            a: Fp::conditional_select(&x.a, &y.a, choice),
            b: Fp::conditional_select(&x.b, &y.b, choice),
        }
    }
}

/// The GF(p²) operations the point formulas use, so that doubling, addition, φ and ψ are written
/// once: [`Fp2`] implements it for one element, and `lanes::Fp2x8` (AVX-512 IFMA) for eight
/// independent elements at a time.
pub(crate) trait Fq2: Copy {
    /// x + y.
    fn add(self, o: Self) -> Self;
    /// x − y.
    fn sub(self, o: Self) -> Self;
    /// −x.
    fn neg(self) -> Self;
    /// a − b·i.
    fn conj(self) -> Self;
    /// x · y.
    fn mul(self, o: Self) -> Self;
    /// x².
    fn sqr(self) -> Self;
    /// A constant (in every lane).
    fn konst(c: Fp2) -> Self;
}

impl Fq2 for Fp2 {
    #[inline(always)]
    fn add(self, o: Fp2) -> Fp2 {
        Fp2::add(self, o)
    }
    #[inline(always)]
    fn sub(self, o: Fp2) -> Fp2 {
        Fp2::sub(self, o)
    }
    #[inline(always)]
    fn neg(self) -> Fp2 {
        Fp2::neg(self)
    }
    #[inline(always)]
    fn conj(self) -> Fp2 {
        Fp2::conj(self)
    }
    #[inline(always)]
    fn mul(self, o: Fp2) -> Fp2 {
        Fp2::mul(self, o)
    }
    #[inline(always)]
    fn sqr(self) -> Fp2 {
        Fp2::sqr(self)
    }
    #[inline(always)]
    fn konst(c: Fp2) -> Fp2 {
        c
    }
}

/// The GF(p) operations FourQlib's hash map uses, so the map is written once for [`Fp`] and for
/// the 8-lane IFMA vector (`lanes`). `Mask` is a per-element (per-lane) truth value.
pub(crate) trait Fq: Copy {
    /// A per-lane condition: [`Choice`] for one element.
    type Mask: Copy;
    /// a + b.
    fn add(self, o: Self) -> Self;
    /// a − b.
    fn sub(self, o: Self) -> Self;
    /// −a.
    fn neg(self) -> Self;
    /// a · b.
    fn mul(self, o: Self) -> Self;
    /// a².
    fn sqr(self) -> Self;
    /// a / 2.
    fn half(self) -> Self;
    /// A constant (in every lane).
    fn konst(c: Fp) -> Self;
    /// a = b (as field elements).
    fn eq_mask(self, o: Self) -> Self::Mask;
    /// `b` where `m` holds, else `a`.
    fn select(a: Self, b: Self, m: Self::Mask) -> Self;
}

/// a^(2^k) by k squarings.
#[inline(always)]
fn sqr_n<F: Fq>(a: F, k: u32) -> F {
    let mut r = a;
    for _ in 0..k {
        r = r.sqr();
    }
    r
}

/// a^(2^125 − 1) = a^((p − 3)/4), by an addition chain on exponents 2^k − 1 (124 squarings,
/// 11 multiplications).
#[inline(always)]
pub(crate) fn pow_p_minus_3_over_4<F: Fq>(a: F) -> F {
    let e1 = a;
    let e2 = e1.sqr().mul(e1);
    let e4 = sqr_n(e2, 2).mul(e2);
    let e8 = sqr_n(e4, 4).mul(e4);
    let e16 = sqr_n(e8, 8).mul(e8);
    let e32 = sqr_n(e16, 16).mul(e16);
    let e64 = sqr_n(e32, 32).mul(e32);
    let e96 = sqr_n(e64, 32).mul(e32);
    let e112 = sqr_n(e96, 16).mul(e16);
    let e120 = sqr_n(e112, 8).mul(e8);
    let e124 = sqr_n(e120, 4).mul(e4);
    e124.sqr().mul(e1)
}

impl Fq for Fp {
    type Mask = Choice;
    #[inline(always)]
    fn add(self, o: Fp) -> Fp {
        Fp::add(self, o)
    }
    #[inline(always)]
    fn sub(self, o: Fp) -> Fp {
        Fp::sub(self, o)
    }
    #[inline(always)]
    fn neg(self) -> Fp {
        Fp::neg(self)
    }
    #[inline(always)]
    fn mul(self, o: Fp) -> Fp {
        Fp::mul(self, o)
    }
    #[inline(always)]
    fn sqr(self) -> Fp {
        Fp::sqr(self)
    }
    #[inline(always)]
    fn half(self) -> Fp {
        Fp::half(self)
    }
    #[inline(always)]
    fn konst(c: Fp) -> Fp {
        c
    }
    #[inline(always)]
    fn eq_mask(self, o: Fp) -> Choice {
        self.ct_eq(&o)
    }
    #[inline(always)]
    fn select(a: Fp, b: Fp, m: Choice) -> Fp {
        Fp::conditional_select(&a, &b, m)
    }
}
