//! Scalar multiplication on the order-N subgroup, constant time in the scalar.
//!
//! `mul_simple` (compiled for tests only) is the fixed-window method (paper §5 describes the signed odd-digit recoding;
//! the "no endomorphism" variant of FourQlib): make k odd by adding N, recode it into 62 odd
//! digits in ±{1, 3, …, 15}, then 4 doublings and one table addition per digit, with the table
//! entry fetched by a full constant-time scan. It is the reference the fast path is tested
//! against. [`mul_endo`], the method in force, uses the four-dimensional decomposition.
//!
//! Both methods are only valid for points of order dividing N (adding N to k, and the
//! endomorphisms' eigenvalues, assume it): callers clear the cofactor first.

use super::endo;
use super::field::Fq2;
use super::point::{Cached, Point};
use super::scalar::Scalar;
#[cfg(test)]
use super::scalar::{N, add_limbs};
use subtle::{Choice, ConditionallySelectable};

#[cfg(test)]
/// Number of base-16 digits of the simple method: 61 recoded digits plus the remainder.
const SIMPLE_DIGITS: usize = 62;

#[cfg(test)]
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

#[cfg(test)]
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

#[cfg(test)]
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

/// `table[index]`, scanning every entry so the memory trace does not depend on the index: each
/// entry is AND-ed with an all-ones or all-zero mask and OR-ed in. The index passes through
/// `black_box` so the optimizer cannot turn the mask back into a branch.
pub(crate) fn ct_lookup(table: &[Cached], index: u8) -> Cached {
    let index = std::hint::black_box(index as u64);
    let mut r = [0u128; 8];
    for (i, entry) in table.iter().enumerate() {
        // (i ^ index) − 1 borrows into bit 63 exactly when i = index (both are small).
        let eq = ((i as u64 ^ index).wrapping_sub(1) >> 63) as u128;
        let mask = 0u128.wrapping_sub(eq);
        for (acc, v) in r.iter_mut().zip(entry.limbs()) {
            *acc |= v & mask;
        }
    }
    Cached::from_limbs(r)
}

#[cfg(test)]
/// `sign(d)·table[(|d| − 1)/2]` for an odd digit d, in constant time.
fn signed_lookup(table: &[Cached; 8], d: i8) -> Cached {
    let neg = (d >> 7) as u8 & 1; // 1 iff d < 0
    let abs = ((d as i16 ^ -(neg as i16)) + neg as i16) as u8;
    let mut r = ct_lookup(table, (abs - 1) >> 1);
    r.conditional_negate(Choice::from(neg));
    r
}

#[cfg(test)]
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

/// ⌊2^256·l_i/N⌉-style rounding constants l1…l4 of the decomposition (paper §5).
const ELL: [[u64; 4]; 4] = [
    [
        0x259686e09d1a7d4f,
        0xf75682ace6a6bd66,
        0xfc5bb5c5ea2be5df,
        0x07,
    ],
    [
        0xd1ba1d84dd627afb,
        0x2bd235580f468d8d,
        0x8fd4b04caa6c0f8a,
        0x03,
    ],
    [
        0x9b291a33678c203c,
        0xc42bd6c965dca902,
        0xd038bf8d0bffbaf6,
        0x00,
    ],
    [
        0x12e5666b77e7fdc0,
        0x81cbdc3714983d82,
        0x1b073877a22d8410,
        0x03,
    ],
];

/// The reduced lattice basis b1…b4 (rows) of the decomposition (paper §5).
const BASIS: [[i64; 4]; 4] = [
    [
        650487742939046294,
        -1397215820276968864,
        523086274270593807,
        -598824378691085905,
    ],
    [2110318963211420372, -1, 1, 2727991412926801872],
    [
        1705647224544756482,
        199320682881407569,
        -3336360048424633503,
        765171327772315031,
    ],
    [
        1400113754146392127,
        3540637644719456050,
        -471270406870313397,
        -1789345740969872106,
    ],
];

/// Offsets that make every coordinate non-negative (paper §5, Prop. 5): the lattice vector
/// c = 5·b2 − 3·b3 + 2·b4 (FourQlib's constants), or c′ = c + b4 when a1 + c1 is even — b4's first
/// coordinate is odd, so exactly one of them gives an odd a1, which the recoding needs. (The
/// formula "2b1 − b2 + 5b3 + 2b4" in draft-ladd-cfrg-4q does not give a non-negative vector.)
const OFFSET: [u64; 4] = offset(2);
const OFFSET_PRIME: [u64; 4] = offset(3);

/// 5·b2 − 3·b3 + w4·b4, computed in i128 and kept modulo 2^64 (every coordinate is in
/// [0, 2^63) for w4 ∈ {2, 3}).
const fn offset(w4: i128) -> [u64; 4] {
    let mut c = [0u64; 4];
    let mut j = 0;
    while j < 4 {
        let (b2, b3, b4) = (
            BASIS[1][j] as i128,
            BASIS[2][j] as i128,
            BASIS[3][j] as i128,
        );
        c[j] = (5 * b2 - 3 * b3 + w4 * b4) as u64;
        j += 1;
    }
    c
}

/// Limb 4 of the 512-bit product l·m, i.e. ⌊l·m / 2^256⌋ mod 2^64 — all the decomposition needs,
/// since the final coordinates fit in 64 bits.
fn mul_shift_256(l: &[u64; 4], m: &[u64; 4]) -> u64 {
    let mut prod = [0u64; 8];
    for i in 0..4 {
        let mut carry = 0u128;
        for j in 0..4 {
            let s = prod[i + j] as u128 + l[i] as u128 * m[j] as u128 + carry;
            prod[i + j] = s as u64;
            carry = s >> 64;
        }
        prod[i + 4] = carry as u64;
    }
    prod[4]
}

/// The four-dimensional decomposition of k (paper §5): a = (k, 0, 0, 0) − Σ ti·bi with
/// ti = ⌊li·k / 2^256⌋, plus the offset that makes a1 odd. Arithmetic mod 2^64, branch-free.
pub(crate) fn decompose(k: &Scalar) -> [u64; 4] {
    let mut a = [k.0[0], 0, 0, 0];
    for (l, b) in ELL.iter().zip(BASIS.iter()) {
        let t = mul_shift_256(l, &k.0);
        for j in 0..4 {
            a[j] = a[j].wrapping_sub(t.wrapping_mul(b[j] as u64));
        }
    }
    let use_prime = Choice::from((a[0].wrapping_add(OFFSET[0]) & 1 ^ 1) as u8);
    for j in 0..4 {
        let c = u64::conditional_select(&OFFSET[j], &OFFSET_PRIME[j], use_prime);
        a[j] = a[j].wrapping_add(c);
    }
    a
}

/// GLV-SAC recoding of the decomposed scalar (paper §5, Alg. 1 of Faz-Hernández et al.):
/// v1 (odd) becomes 65 signs s_i = ±1 (s_64 = +1); each other vj becomes bits aligned with
/// those signs, so that k·P = Σ s_i·2^i·T[d_i] with T[u] = P + u0·φ(P) + u1·ψ(P) + u2·ψφ(P).
/// Returns the digits d_i ∈ [0, 8) and whether s_i = −1.
pub(crate) fn recode_endo(v: [u64; 4]) -> ([u8; 65], [u8; 65]) {
    let mut v = v;
    let mut digits = [0u8; 65];
    let mut negative = [0u8; 65];
    for i in 0..64 {
        let b = ((v[0] as u128 >> (i + 1)) & 1) as u64;
        negative[i] = (b ^ 1) as u8;
        let mut d = 0u64;
        for (j, vj) in v.iter_mut().enumerate().skip(1) {
            let bj = *vj & 1;
            d |= bj << (j - 1);
            let carry = (b | bj) ^ b;
            *vj = (*vj >> 1) + carry;
        }
        digits[i] = d as u8;
    }
    digits[64] = (v[1] + 2 * v[2] + 4 * v[3]) as u8;
    (digits, negative)
}

/// The table T[u] = P + u0·φ(P) + u1·ψ(P) + u2·ψ(φ(P)), u ∈ [0, 8), cached.
#[inline(always)]
pub(crate) fn endo_table<F: Fq2>(p: &Point<F>) -> [Cached<F>; 8] {
    let q = endo::phi(p);
    let r = endo::psi(p);
    let s = endo::psi(&q);
    let (qc, rc, sc) = (q.cached(), r.cached(), s.cached());
    let mut t = [*p; 8];
    t[1] = t[0].add(&qc);
    t[2] = t[0].add(&rc);
    t[3] = t[1].add(&rc);
    for u in 4..8 {
        t[u] = t[u - 4].add(&sc);
    }
    // A loop rather than `map(closure)`: closures are not inlined by force, and the IFMA kernel
    // needs everything flattened into its target-feature function.
    let mut cached = [qc; 8];
    for (c, x) in cached.iter_mut().zip(&t) {
        *c = x.cached();
    }
    cached
}

/// k·P for P of order dividing N with the four-dimensional decomposition: 64 doublings and 65
/// additions after an 8-point table (paper §5).
pub(crate) fn mul_endo(p: &Point, k: &Scalar) -> Point {
    let table = endo_table(p);
    let (digits, negative) = recode_endo(decompose(k));
    let mut q = Point::identity().add(&ct_lookup(&table, digits[64]));
    for i in (0..64).rev() {
        q = q.double();
        let mut t = ct_lookup(&table, digits[i]);
        t.conditional_negate(Choice::from(negative[i]));
        q = q.add(&t);
    }
    q
}

/// k·P for P of order dividing N: the method in force.
pub(crate) fn mul(p: &Point, k: &Scalar) -> Point {
    mul_endo(p, k)
}
