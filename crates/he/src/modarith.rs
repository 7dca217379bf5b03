//! Word-sized modular arithmetic for the RNS primes (all below 2^62): Barrett reduction of
//! 128-bit values with a precomputed ⌊2^128 / q⌋, Shoup's multiplication by a fixed operand with
//! a precomputed ⌊w·2^64 / q⌋ (Harvey, "Faster arithmetic for number-theoretic transforms",
//! J. Symb. Comp. 2014, §2), and a deterministic Miller–Rabin primality test for 64-bit words.
//!
//! Barrett: for z < 2^128 the estimate ⌊z·⌊2^128/q⌋ / 2^128⌋ is at most 2 below ⌊z/q⌋, so
//! z − estimate·q < 3q < 2^64 and two conditional subtractions finish the reduction.

/// A modulus q with 2 ≤ q < 2^62 and its Barrett constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modulus {
    value: u64,
    /// ⌊2^128 / q⌋ (q ≥ 2, so it fits 128 bits when q is not a power of two; for powers of two
    /// it is stored as 2^128/q − 1, which keeps the estimate a lower bound).
    ratio: u128,
}

/// The largest modulus the lazy NTT accepts: 4q must fit a word.
pub const MAX_MODULUS_BITS: u32 = 62;

impl Modulus {
    /// The modulus `q`; `None` unless 2 ≤ q < 2^62.
    pub fn new(q: u64) -> Option<Self> {
        if !(2..(1u64 << MAX_MODULUS_BITS)).contains(&q) {
            return None;
        }
        // ⌊(2^128 − 1) / q⌋ equals ⌊2^128 / q⌋ unless q divides 2^128; a lower bound either way.
        let ratio = u128::MAX / u128::from(q);
        Some(Self { value: q, ratio })
    }

    /// q.
    #[inline]
    pub fn value(&self) -> u64 {
        self.value
    }

    /// Number of bits of q.
    pub fn bits(&self) -> u32 {
        64 - self.value.leading_zeros()
    }

    /// z mod q for any z < 2^128.
    #[inline]
    pub fn reduce_u128(&self, z: u128) -> u64 {
        let z0 = z as u64 as u128;
        let z1 = z >> 64;
        let r0 = self.ratio as u64 as u128;
        let r1 = self.ratio >> 64;
        const M: u128 = u64::MAX as u128;
        let p00 = z0 * r0;
        let p01 = z0 * r1;
        let p10 = z1 * r0;
        let mid = (p00 >> 64) + (p01 & M) + (p10 & M);
        let top = z1
            .wrapping_mul(r1)
            .wrapping_add(p01 >> 64)
            .wrapping_add(p10 >> 64)
            .wrapping_add(mid >> 64);
        let q = self.value;
        let mut r = (z as u64).wrapping_sub((top as u64).wrapping_mul(q));
        if r >= q {
            r -= q;
        }
        if r >= q {
            r -= q;
        }
        r
    }

    /// x mod q for any word x.
    #[inline]
    pub fn reduce(&self, x: u64) -> u64 {
        if x < self.value {
            x
        } else {
            self.reduce_u128(u128::from(x))
        }
    }

    /// a·b mod q for any words a, b.
    #[inline]
    pub fn mul(&self, a: u64, b: u64) -> u64 {
        self.reduce_u128(u128::from(a) * u128::from(b))
    }

    /// a + b mod q for a, b < q.
    #[inline]
    pub fn add(&self, a: u64, b: u64) -> u64 {
        let s = a + b;
        if s >= self.value { s - self.value } else { s }
    }

    /// a − b mod q for a, b < q.
    #[inline]
    pub fn sub(&self, a: u64, b: u64) -> u64 {
        if a >= b { a - b } else { a + self.value - b }
    }

    /// −a mod q for a < q.
    #[inline]
    pub fn neg(&self, a: u64) -> u64 {
        if a == 0 { 0 } else { self.value - a }
    }

    /// a^e mod q.
    pub fn pow(&self, a: u64, mut e: u64) -> u64 {
        let mut base = self.reduce(a);
        let mut acc = 1 % self.value;
        while e > 0 {
            if e & 1 == 1 {
                acc = self.mul(acc, base);
            }
            base = self.mul(base, base);
            e >>= 1;
        }
        acc
    }

    /// a^{-1} mod q for prime q; `None` when a ≡ 0.
    pub fn inv(&self, a: u64) -> Option<u64> {
        let a = self.reduce(a);
        if a == 0 {
            return None;
        }
        // Extended Euclid (q need not be prime for this path).
        let (mut r0, mut r1) = (i128::from(self.value), i128::from(a));
        let (mut t0, mut t1) = (0i128, 1i128);
        while r1 != 0 {
            let quo = r0 / r1;
            (r0, r1) = (r1, r0 - quo * r1);
            (t0, t1) = (t1, t0 - quo * t1);
        }
        if r0 != 1 {
            return None;
        }
        Some(t0.rem_euclid(i128::from(self.value)) as u64)
    }

    /// Shoup's constant ⌊w·2^64 / q⌋ for a fixed operand w < q.
    #[inline]
    pub fn shoup(&self, w: u64) -> u64 {
        ((u128::from(w) << 64) / u128::from(self.value)) as u64
    }

    /// w·y mod q in [0, 2q) from Shoup's constant `w_shoup` of w < q, for any word y.
    #[inline]
    pub fn mul_shoup_lazy(&self, y: u64, w: u64, w_shoup: u64) -> u64 {
        let hi = ((u128::from(w_shoup) * u128::from(y)) >> 64) as u64;
        w.wrapping_mul(y).wrapping_sub(hi.wrapping_mul(self.value))
    }

    /// w·y mod q in [0, q) from Shoup's constant of w < q.
    #[inline]
    pub fn mul_shoup(&self, y: u64, w: u64, w_shoup: u64) -> u64 {
        let r = self.mul_shoup_lazy(y, w, w_shoup);
        if r >= self.value { r - self.value } else { r }
    }

    /// The centered representative of a < q, in (−q/2, q/2].
    #[inline]
    pub fn center(&self, a: u64) -> i64 {
        if a > self.value / 2 {
            a as i64 - self.value as i64
        } else {
            a as i64
        }
    }

    /// a mod q for a signed a.
    #[inline]
    pub fn from_i64(&self, a: i64) -> u64 {
        if a >= 0 {
            self.reduce(a as u64)
        } else {
            self.neg(self.reduce(a.unsigned_abs()))
        }
    }
}

/// Deterministic Miller–Rabin for 64-bit n: the first 12 primes as bases are a proof for
/// n < 3.3·10^24 (Sorenson–Webster 2015), which covers every word.
pub fn is_prime(n: u64) -> bool {
    const BASES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    for p in BASES {
        if n.is_multiple_of(p) {
            return n == p;
        }
    }
    let d_s = (n - 1).trailing_zeros();
    let d = (n - 1) >> d_s;
    let mulmod = |a: u64, b: u64| ((u128::from(a) * u128::from(b)) % u128::from(n)) as u64;
    'bases: for a in BASES {
        let mut x = 1u64;
        let (mut base, mut e) = (a % n, d);
        while e > 0 {
            if e & 1 == 1 {
                x = mulmod(x, base);
            }
            base = mulmod(base, base);
            e >>= 1;
        }
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..d_s {
            x = mulmod(x, x);
            if x == n - 1 {
                continue 'bases;
            }
        }
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn splitmix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[test]
    fn barrett_and_shoup_match_u128_remainder() {
        let mut s = 7u64;
        for q in [
            2u64,
            3,
            65537,
            40961,
            (1 << 61) - 1,
            (1 << 62) - 57,
            1 << 40,
            0x3fff_ffff_ffff_ffff,
        ] {
            let m = Modulus::new(q).unwrap();
            for _ in 0..2000 {
                let z = (u128::from(splitmix(&mut s)) << 64) | u128::from(splitmix(&mut s));
                assert_eq!(u128::from(m.reduce_u128(z)), z % u128::from(q));
                let (a, b) = (splitmix(&mut s) % q, splitmix(&mut s));
                let want = (u128::from(a) * u128::from(b) % u128::from(q)) as u64;
                assert_eq!(m.mul(a, b), want);
                let lazy = m.mul_shoup_lazy(b, a, m.shoup(a));
                assert!(lazy < 2 * q);
                assert_eq!(lazy % q, want);
            }
            assert_eq!(m.reduce_u128(u128::MAX), (u128::MAX % u128::from(q)) as u64);
        }
        assert!(Modulus::new(1).is_none());
        assert!(Modulus::new(1 << 62).is_none());
    }

    #[test]
    fn inverse_and_power() {
        let m = Modulus::new(65537).unwrap();
        for a in 1..500u64 {
            let i = m.inv(a).unwrap();
            assert_eq!(m.mul(a, i), 1);
        }
        assert_eq!(m.inv(0), None);
        assert_eq!(m.pow(3, 65536), 1);
        assert_eq!(m.pow(5, 0), 1);
    }

    #[test]
    fn primality_against_trial_division() {
        let trial = |n: u64| {
            n >= 2
                && (2..)
                    .take_while(|d| d * d <= n)
                    .all(|d| !n.is_multiple_of(d))
        };
        for n in 0..5000u64 {
            assert_eq!(is_prime(n), trial(n), "{n}");
        }
        assert!(is_prime(65537));
        assert!(is_prime((1 << 61) - 1));
        assert!(!is_prime(3_215_031_751)); // strong pseudoprime to bases 2, 3, 5, 7
        assert!(!is_prime(((1u64 << 31) - 1) * 65537));
    }
}
