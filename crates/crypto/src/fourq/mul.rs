//! Scalar multiplication on the order-N subgroup, constant time in the scalar.
//!
//! [`mul_simple`] is the fixed-window method (paper §5 describes the signed odd-digit recoding;
//! the "no endomorphism" variant of FourQlib): make k odd by adding N, recode it into 62 odd
//! digits in ±{1, 3, …, 15}, then 4 doublings and one table addition per digit, with the table
//! entry fetched by a full constant-time scan. It is the reference the fast path is tested
//! against.
//!
//! Both methods are only valid for points of order dividing N (adding N to k, and the
//! endomorphisms' eigenvalues, assume it): callers clear the cofactor first.

use super::point::{Cached, Point};
use super::scalar::{N, Scalar, add_limbs};
use subtle::{Choice, ConditionallySelectable};

/// Number of base-16 digits of the simple method: 61 recoded digits plus the remainder.
const SIMPLE_DIGITS: usize = 62;

/// The table [P, 3P, 5P, …, 15P] in cached form.
fn odd_multiples(p: &Point) -> [Cached; 8] {
    let p2 = p.double().cached();
    let mut t = [Cached::default(); 8];
    let mut acc = *p;
    t[0] = acc.cached();
    for entry in t.iter_mut().skip(1) {
        acc = acc.add(&p2);
        *entry = acc.cached();
    }
    t
}

/// k or k + N, whichever is odd (N is odd), selected without branching.
pub(crate) fn make_odd(k: &Scalar) -> [u64; 4] {
    let plus_n = add_limbs(&k.0, &N);
    let even = Choice::from((!k.0[0] & 1) as u8);
    let mut r = [0u64; 4];
    for i in 0..4 {
        r[i] = u64::conditional_select(&k.0[i], &plus_n[i], even);
    }
    r
}

/// Signed odd base-16 digits of an odd m < 2^247: d_i = (m mod 32) − 16 and m ← (m − d_i)/16,
/// which keeps m odd; the last digit is what remains (odd, at most 15).
fn recode_simple(mut m: [u64; 4]) -> [i8; SIMPLE_DIGITS] {
    let mut d = [0i8; SIMPLE_DIGITS];
    for digit in d.iter_mut().take(SIMPLE_DIGITS - 1) {
        *digit = (m[0] & 31) as i8 - 16;
        // (m − d)/16 = (m >> 4) | 1: clearing the low five bits and adding 16 sets bit 4.
        for i in 0..3 {
            m[i] = (m[i] >> 4) | (m[i + 1] << 60);
        }
        m[3] >>= 4;
        m[0] |= 1;
    }
    d[SIMPLE_DIGITS - 1] = m[0] as i8;
    d
}

/// `table[index]`, scanning every entry so the memory trace does not depend on the index.
pub(crate) fn ct_lookup(table: &[Cached], index: u8) -> Cached {
    let mut r = Cached::default();
    for (i, entry) in table.iter().enumerate() {
        r.conditional_assign(entry, Choice::from((i as u8 == index) as u8));
    }
    r
}

/// `sign(d)·table[(|d| − 1)/2]` for an odd digit d, in constant time.
fn signed_lookup(table: &[Cached; 8], d: i8) -> Cached {
    let neg = (d >> 7) as u8 & 1; // 1 iff d < 0
    let abs = ((d as i16 ^ -(neg as i16)) + neg as i16) as u8;
    let mut r = ct_lookup(table, (abs - 1) >> 1);
    r.conditional_negate(Choice::from(neg));
    r
}

/// k·P for P of order dividing N, by the fixed-window method (see the module doc).
pub(crate) fn mul_simple(p: &Point, k: &Scalar) -> Point {
    let table = odd_multiples(p);
    let digits = recode_simple(make_odd(k));
    let mut q = Point::identity().add(&signed_lookup(&table, digits[SIMPLE_DIGITS - 1]));
    for &d in digits[..SIMPLE_DIGITS - 1].iter().rev() {
        for _ in 0..4 {
            q = q.double();
        }
        q = q.add(&signed_lookup(&table, d));
    }
    q
}

/// k·P for P of order dividing N: the method in force.
pub(crate) fn mul(p: &Point, k: &Scalar) -> Point {
    mul_simple(p, k)
}
