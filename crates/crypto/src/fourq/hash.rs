//! Hashing to the order-N subgroup of FourQ.
//!
//! [`fourqlib_map`] reproduces FourQlib's `HashToCurve(r)` (added to FourQlib in 2021, not part
//! of the FourQ paper): a deterministic, constant-time map from r ∈ GF(p²) to a curve point,
//! written as a straight-line GF(p) program with two constant-time selections (each picks between
//! the two candidate square roots of an Elligator-style map onto an isomorphic model, then maps to
//! the Edwards curve), followed by cofactor clearing (·392). It depends on r only through r², so
//! H(−r) = H(r), and H(0) = −2·G. The map is not a standardized suite; its constants (A0, A1,
//! con1, con2, b0, b1) are FourQlib's and the vectors in `vectors.json` pin its output.
//!
//! [`hash_to_subgroup`] is our item hash, RFC 9380's random-oracle construction (§3,
//! `hash_to_curve`) with FourQlib's map as `map_to_curve`: `expand_message_xmd` (§5.3.1) with
//! SHA-512 and the DST [`DST`] to 128 bytes; each 32-byte quarter, read little-endian and reduced
//! modulo p (statistical distance about 2^-129), gives one GF(p) coordinate of two field elements
//! u0, u1 ∈ GF(p²); the result is `392·(map(u0) + map(u1))`. One map call alone would be an
//! *encoding* (its image is a fraction of the group, each point has few preimages); the sum of
//! two is indifferentiable from a random oracle (Brier et al., Farashahi et al.; RFC 9380 §10),
//! which DDH-based PSI assumes of its hash. It costs one extra map and one point addition.
//!
//! Constant time: the map is straight-line GF(p) arithmetic with masked selections; the cofactor
//! multiplication is a fixed double-and-add chain. Items are secret, so nothing here branches on
//! them.

use super::field::{Fp, Fp2, Fq, pow_p_minus_3_over_4};
use super::point::{Affine, Point};
use crate::{CryptoError, ItemDigest};

/// Domain separation tag of our hash-to-FourQ construction (RFC 9380 §3.1 style).
pub const DST: &[u8] = b"BLINDJOIN-V01-CS01-with-FourQ_XMD:SHA-512_FOURQLIB_RO_";

const CON1: Fp = Fp::new(0x7fffffffffb83cc00000000000657ce3);
const CON2: Fp = Fp::new(0x2a2705c484a0065c6684cee066da6a72);
const B0: Fp = Fp::new(0x4aa740eb230586529ecaa6d9decdf034);
const B1: Fp = Fp::new(0x7ffffffffffffff40000000000000011);
const A0: Fp = Fp::new(0x7ffffffffffffc700000000000000509);
const A1: Fp = Fp::new(0x637a835bf687a14faadcb5733c136818);

/// a^(2^125 − 1).
#[inline(always)]
fn exp1251<F: Fq>(a: F) -> F {
    pow_p_minus_3_over_4(a)
}

/// (a·b − c·d, a·d + c·b): a GF(p²)-style product written on parts, as the map uses it.
#[inline(always)]
fn cmul<F: Fq>(a: F, c: F, b: F, d: F) -> (F, F) {
    (a.mul(b).sub(c.mul(d)), a.mul(d).add(c.mul(b)))
}

/// FourQlib's `HashToCurve(r)` before cofactor clearing: an affine curve point.
pub(crate) fn fourqlib_map_raw(r: Fp2) -> Affine {
    let [x0, x1, y0, y1] = fourqlib_map_parts(r.a, r.b);
    Affine {
        x: Fp2 { a: x0, b: x1 }.canonical(),
        y: Fp2 { a: y0, b: y1 }.canonical(),
    }
}

/// The map on the two parts of r, over any [`Fq`] (one element, or eight lanes): the affine
/// coordinates [x0, x1, y0, y1], not canonical.
#[inline(always)]
pub(crate) fn fourqlib_map_parts<F: Fq>(r0: F, r1: F) -> [F; 4] {
    let one = F::konst(Fp::ONE);
    let (a0, a1) = (F::konst(A0), F::konst(A1));
    let (con1, con2) = (F::konst(CON1), F::konst(CON2));
    let (b0, b1) = (F::konst(B0), F::konst(B1));
    // FourQlib's straight-line program, step for step (names follow its temporaries). The
    // first lines only use r0² − r1² and r0·r1, i.e. r², which is why H(−r) = H(r).
    let t0 = r0.add(r1).mul(r0.sub(r1)); // r0² − r1²
    let t1 = r0.mul(r1).add(r0.mul(r1)); // 2·r0·r1
    let t2 = t0.add(t1.add(t1)); // (r0² − r1²) + 4·r0·r1
    let t0 = t0.add(t0); // 2·(r0² − r1²)
    let t3 = t0.sub(t1);
    let t0 = t3.add(one);
    let t4 = a1.mul(t2).sub(a0.mul(t0));
    let t1 = a0.mul(t2).add(a1.mul(t0));
    let t6 = t0.add(t2).mul(t0.sub(t2));
    let t5 = t2.mul(t0);
    let t5 = t5.add(t5);
    let t8 = t6.sub(con1.mul(t3)).add(con2.mul(t2));
    let t9 = t5.sub(con1.mul(t2)).sub(con2.mul(t3));
    let t7 = t4.mul(t8).add(t1.mul(t9));
    let t10 = t4.mul(t9).sub(t1.mul(t8));
    // Quadratic-character test of t7² + t10² (a norm): t7' = n^((p−1)/2).
    let n = t7.sqr().add(t10.sqr());
    let chi = exp1251(n).sqr().mul(n);
    let is_square = chi.eq_mask(one);
    let t3 = F::select(a0.add(t4), a0.neg(), is_square);
    let t10 = F::select(a1.sub(t1), a1.neg(), is_square);

    let t8 = t0.mul(t3).sub(t2.mul(t10));
    let t9 = t2.mul(t3).add(t0.mul(t10));
    let t5 = t3.add(t10).mul(t3.sub(t10));
    let t11 = t3.mul(t10);
    let t11 = t11.add(t11);
    let t13 = t3.mul(t4).add(t1.mul(t10));
    let t12 = t4.mul(t10).sub(t1.mul(t3));
    let t5 = t5.sub(t13).add(t6);
    let t6 = t0.mul(t2);
    let t11 = t11.sub(t12).add(t6.add(t6));
    let t6 = t5.mul(t8).sub(t9.mul(t11));
    let t12 = t5.mul(t9).add(t8.mul(t11));
    let t6 = mul16(t6);
    let t12 = mul16(t12);
    let t14 = t0.add(t3);
    let t14 = t14.add(t14);
    let t8 = t2.add(t10);
    let t8 = t8.add(t8);
    let t4 = t6.mul(t14).sub(t8.mul(t12));
    let t1 = t6.mul(t8).add(t12.mul(t14));
    let t9 = t12.sqr().add(t6.sqr());
    let t11 = t1.sqr().add(t4.sqr());
    let t5 = t11.sqr().mul(t9);
    let t7 = exp1251(t5);
    let t13 = t7.sqr().sqr().mul(t11).mul(t9).mul(t5);
    let t7 = t13.mul(t7).mul(t5);
    let t5 = t6.add(t7).half();
    let t9 = exp1251(t5);
    let t11 = t9.sqr().sqr().mul(t5).mul(t12);
    let t9 = t5.mul(t9);
    let t7 = t9.sqr();
    let two = one.add(one);
    let root_ok = t5.eq_mask(t7);
    let t7 = F::select(t11, two, root_ok);
    let t11 = F::select(two.neg(), t11, root_ok);

    let t13 = t13.add(t13);
    let y0 = t3.sub(t0);
    let y1 = t10.sub(t2);
    let (t15, t16) = cmul(y0, y1, t6, t12);
    let y0 = t15.mul(t4).add(t1.mul(t16)).mul(t13);
    let y1 = t4.mul(t16).sub(t1.mul(t15)).mul(t13);
    let (t15, t16) = cmul(b0, b1, t3, t10);
    let x0 = t15.mul(t4).add(t1.mul(t16));
    let x1 = t4.mul(t16).sub(t1.mul(t15));
    let (t15, t16) = cmul(x0, x1, t0, t2);
    let x0 = t15.mul(t14).sub(t16.mul(t8));
    let x1 = t15.mul(t8).add(t16.mul(t14));
    let t15 = x0.mul(t7).sub(x1.mul(t11));
    let t16 = x0.mul(t11).add(x1.mul(t7));
    let t13 = t13.mul(t9);
    [t15.mul(t13), t16.mul(t13), y0, y1]
}

/// 16·a.
#[inline(always)]
fn mul16<F: Fq>(a: F) -> F {
    let a = a.add(a);
    let a = a.add(a);
    let a = a.add(a);
    a.add(a)
}

/// FourQlib's `HashToCurve(r)`: the map, then the cofactor (the result is in the subgroup).
/// Kept for the known-answer vectors, which pin the map.
#[cfg(test)]
pub(crate) fn fourqlib_map(r: Fp2) -> Point {
    fourqlib_map_raw(r).to_point().mul_by_cofactor()
}

/// The two field elements our item hash feeds to the map (see the module doc).
pub(crate) fn item_to_fields(item: &[u8]) -> Result<[Fp2; 2], CryptoError> {
    let mut uniform = [0u8; 128];
    crate::expand_xmd_sha512(item, DST, &mut uniform)?;
    let fp = |i: usize| {
        let mut h = [0u8; 32];
        h.copy_from_slice(&uniform[32 * i..32 * i + 32]);
        Fp::from_bytes_wide(&h)
    };
    Ok([Fp2 { a: fp(0), b: fp(1) }, Fp2 { a: fp(2), b: fp(3) }])
}

/// H(item): an element of the order-N subgroup (projective).
pub(crate) fn hash_to_subgroup(item: &ItemDigest) -> Result<Point, CryptoError> {
    let [u0, u1] = item_to_fields(item)?;
    let q0 = fourqlib_map_raw(u0).to_point();
    let q1 = fourqlib_map_raw(u1).to_point();
    Ok(q0.add(&q1.cached()).mul_by_cofactor())
}
