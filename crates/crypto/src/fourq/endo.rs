//! The endomorphisms φ and ψ of FourQ and the four-dimensional scalar decomposition (paper §3–§5).
//!
//! FourQ is a degree-2 Q-curve with complex multiplication: φ comes from the CM (GLV-style) and ψ
//! from the Frobenius twisted through a 2-isogeny to the conjugate curve (GLS-style), §3. Both are
//! evaluated through an isogeny τ to a related curve and its dual τ̂ (§4, Appendix A of the paper):
//! φ = τ̂ ∘ υ ∘ τ and ψ = τ̂ ∘ χ ∘ τ, where υ and χ are endomorphisms of the intermediate curve.
//! On the order-N subgroup they act as multiplication by eigenvalues, so
//! k·P = a1·P + a2·φ(P) + a3·ψ(P) + a4·ψ(φ(P)) with |ai| < 2^62 (§5: the decomposition with the
//! lattice basis b1…b4 and Babai rounding via the precomputed li = ⌊2^256·(row of the adjugate)/N⌉).
//! The constants are those of the paper and of draft-ladd-cfrg-4q's appendix; tests check the
//! fast multiplication against the fixed-window reference.

use super::field::{Fp2, Fq2};
use super::point::Point;

pub(crate) const CTAU1: Fp2 = Fp2::new(
    0x1964de2c3afad20c74dcd57cebce74c3,
    0x000000000000000c0000000000000012,
);
pub(crate) const CTAUDUAL1: Fp2 = Fp2::new(
    0x4aa740eb230586529ecaa6d9decdf034,
    0x7ffffffffffffff40000000000000011,
);
const CPHI0: Fp2 = Fp2::new(
    0x0000000000000005fffffffffffffff7,
    0x2553a0759182c3294f65536cef66f81a,
);
const CPHI1: Fp2 = Fp2::new(
    0x00000000000000050000000000000007,
    0x62c8caa0c50c62cf334d90e9e28296f9,
);
const CPHI2: Fp2 = Fp2::new(
    0x000000000000000f0000000000000015,
    0x78df262b6c9b5c982c2cb7154f1df391,
);
const CPHI3: Fp2 = Fp2::new(
    0x00000000000000020000000000000003,
    0x5084c6491d76342a92440457a7962ea4,
);
const CPHI4: Fp2 = Fp2::new(
    0x00000000000000030000000000000003,
    0x12440457a7962ea4a1098c923aec6855,
);
const CPHI5: Fp2 = Fp2::new(
    0x000000000000000a000000000000000f,
    0x459195418a18c59e669b21d3c5052df3,
);
const CPHI6: Fp2 = Fp2::new(
    0x00000000000000120000000000000018,
    0x0b232a8314318b3ccd3643a78a0a5be7,
);
const CPHI7: Fp2 = Fp2::new(
    0x00000000000000180000000000000023,
    0x3963bc1c99e2ea1a66c183035f48781a,
);
const CPHI8: Fp2 = Fp2::new(
    0x00000000000000aa00000000000000f0,
    0x1f529f860316cbe544e251582b5d0ef0,
);
const CPHI9: Fp2 = Fp2::new(
    0x00000000000008700000000000000bef,
    0x0fd52e9cfe00375b014d3e48976e2505,
);
const CPSI1: Fp2 = Fp2::new(
    0x2af99e9a83d54a02edf07f4767e346ef,
    0x00000000000000de000000000000013a,
);
const CPSI2: Fp2 = Fp2::new(
    0x00000000000000e40000000000000143,
    0x21b8d07b99a81f034c7deb770e03f372,
);
const CPSI3: Fp2 = Fp2::new(
    0x00000000000000060000000000000009,
    0x4cb26f161d7d69063a6e6abe75e73a61,
);
const CPSI4: Fp2 = Fp2::new(
    0x7ffffffffffffff9fffffffffffffff6,
    0x334d90e9e28296f9c59195418a18c59e,
);

/// Projective (X : Y : Z) on the intermediate curve of τ.
#[derive(Clone, Copy, Debug)]
struct Proj<F> {
    x: F,
    y: F,
    z: F,
}

/// τ: the isogeny from E to the intermediate curve.
#[inline(always)]
fn tau<F: Fq2>(p: &Point<F>) -> Proj<F> {
    let a = p.x.sqr();
    let b = p.y.sqr();
    let c = a.add(b);
    let d = a.sub(b);
    let zz = p.z.sqr();
    Proj {
        x: F::konst(CTAU1).mul(p.x).mul(p.y).mul(d),
        y: zz.add(zz).add(d).mul(c).neg(),
        z: c.mul(d),
    }
}

/// τ̂: the dual isogeny back to E, output in R1 (T = Ta·Tb).
#[inline(always)]
fn tau_dual<F: Fq2>(p: &Proj<F>) -> Point<F> {
    let a = p.x.sqr();
    let b = p.y.sqr();
    let c = a.add(b);
    let ta = b.sub(a);
    let zz = p.z.sqr();
    let d = zz.add(zz).sub(ta);
    let tb = F::konst(CTAUDUAL1).mul(p.x).mul(p.y);
    Point {
        x: tb.mul(c),
        y: d.mul(ta),
        z: d.mul(c),
        ta,
        tb,
    }
}

/// υ: the CM endomorphism on the intermediate curve (gives φ).
#[inline(always)]
fn upsilon<F: Fq2>(p: &Proj<F>) -> Proj<F> {
    let a = F::konst(CPHI0).mul(p.x).mul(p.y);
    let b = p.y.mul(p.z);
    let c = p.y.sqr();
    let d = p.z.sqr();
    let f = d.sqr();
    let g = b.sqr();
    let h = c.sqr();
    let i = F::konst(CPHI1).mul(b);
    let j = c.add(F::konst(CPHI2).mul(d));
    let k = F::konst(CPHI8).mul(g).add(h).add(F::konst(CPHI9).mul(f));
    let x = a.mul(k).mul(i.add(j)).mul(i.sub(j)).conj();
    let l = c.add(F::konst(CPHI4).mul(d));
    let m = F::konst(CPHI3).mul(b);
    let n = l.add(m).mul(l.sub(m));
    let y = F::konst(CPHI5)
        .mul(d)
        .mul(n)
        .mul(h.add(F::konst(CPHI6).mul(g)).add(F::konst(CPHI7).mul(f)))
        .conj();
    let z = b.mul(k).mul(n).conj();
    Proj { x, y, z }
}

/// χ: the Frobenius-based endomorphism on the intermediate curve (gives ψ).
#[inline(always)]
fn chi<F: Fq2>(p: &Proj<F>) -> Proj<F> {
    let a = p.x.conj();
    let b = p.y.conj();
    let c = p.z.conj().sqr();
    let d = a.sqr();
    let g = b.mul(d.add(F::konst(CPSI2).mul(c)));
    let h = d.add(F::konst(CPSI4).mul(c)).neg();
    Proj {
        x: F::konst(CPSI1).mul(a).mul(c).mul(h),
        y: g.mul(d.add(F::konst(CPSI3).mul(c))),
        z: g.mul(h),
    }
}

/// φ(P) = τ̂(υ(τ(P))).
#[inline(always)]
pub(crate) fn phi<F: Fq2>(p: &Point<F>) -> Point<F> {
    tau_dual(&upsilon(&tau(p)))
}

/// ψ(P) = τ̂(χ(τ(P))).
#[inline(always)]
pub(crate) fn psi<F: Fq2>(p: &Point<F>) -> Point<F> {
    tau_dual(&chi(&tau(p)))
}
