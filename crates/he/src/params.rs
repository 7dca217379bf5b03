//! BFV parameters as SEAL and APSI's presets state them: the ring degree N, the plaintext
//! modulus t (a value, or a bit size to pick a batching prime of), and the bit sizes of the
//! coefficient-modulus primes q_0 … q_{k−1}.
//!
//! * **Primes.** Each q_i is a prime ≡ 1 (mod 2N), so the negacyclic NTT of degree N exists mod
//!   q_i (a primitive 2N-th root of unity lives in Z_q exactly when 2N | q − 1). As SEAL's
//!   `CoeffModulus::Create` does, the primes of one bit size b are taken downward from
//!   2^b − 2N + 1 in steps of 2N while above 2^(b−1), so a q_i has exactly b bits and the choice
//!   is deterministic (both parties derive the same primes from the preset).
//! * **Batching.** t must be a prime ≡ 1 (mod 2N): then X^N + 1 splits into N linear factors
//!   mod t and Z_t\[X\]/(X^N+1) ≅ Z_t^N (the slots). `plain_modulus_bits` picks the largest such
//!   prime of that size (SEAL's `PlainModulus::Batching`). t must differ from every q_i.
//! * **Security.** The Homomorphic Encryption Standard (Albrecht et al., 2018,
//!   homomorphicencryption.org, Table 1, uniform ternary secret, classical attacks, 128 bits)
//!   bounds log Q = Σ log q_i by 27, 54, 109, 218, 438, 881 bits for N = 1024 … 32768 (each
//!   doubling of N roughly doubles the bound, as the LWE hardness depends on N / log Q). The
//!   sum is taken over all primes, the special (key-switching) prime included, since the
//!   relinearization key is an RLWE sample modulo the full product. Parameters above the bound
//!   are refused.

use crate::error::{HeError, Result};
use crate::modarith::{Modulus, is_prime};

/// The HE standard's 128-bit classical bound on log Q for a ternary secret, per N.
pub const SECURITY_128: [(usize, u32); 6] = [
    (1024, 27),
    (2048, 54),
    (4096, 109),
    (8192, 218),
    (16384, 438),
    (32768, 881),
];

/// The largest Σ log q_i allowed at 128-bit security for degree `n`; `None` for other degrees.
pub fn max_secure_bits(n: usize) -> Option<u32> {
    SECURITY_128.iter().find(|(d, _)| *d == n).map(|(_, b)| *b)
}

/// How the plaintext modulus is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlainModulus {
    /// t itself (`seal_params.plain_modulus`).
    Value(u64),
    /// A bit size: the largest batching prime of that size (`seal_params.plain_modulus_bits`).
    Bits(u32),
}

/// Checked BFV parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parameters {
    degree: usize,
    plain_modulus: u64,
    coeff_modulus: Vec<u64>,
}

/// Largest prime size accepted for q_i (SEAL's limit; the NTT needs < 62).
pub const MAX_PRIME_BITS: u32 = 60;

/// `count` distinct primes of exactly `bits` bits, ≡ 1 (mod `factor`), downward from 2^bits.
pub fn ntt_primes(bits: u32, factor: u64, count: usize) -> Result<Vec<u64>> {
    let fail = || HeError::NoPrimes {
        bits,
        count,
        modulus: factor,
    };
    if !(2..=62).contains(&bits) || factor == 0 || factor >= (1u64 << bits) {
        return Err(fail());
    }
    let lower = 1u64 << (bits - 1);
    let mut value = (1u64 << bits) - factor + 1;
    let mut out = Vec::with_capacity(count);
    while out.len() < count && value > lower {
        if is_prime(value) {
            out.push(value);
        }
        match value.checked_sub(factor) {
            Some(v) => value = v,
            None => break,
        }
    }
    if out.len() < count {
        return Err(fail());
    }
    Ok(out)
}

impl Parameters {
    /// Checks and builds parameters: N a power of two in 1024..=32768, 1..=16 primes of 2..=60
    /// bits, t a batching prime distinct from the q_i, and Σ bits within the 128-bit bound.
    ///
    /// # Errors
    /// A [`HeError`] naming the failing number.
    pub fn new(degree: usize, plain: PlainModulus, coeff_bits: &[u32]) -> Result<Self> {
        let max_bits = max_secure_bits(degree).ok_or(HeError::Degree(degree))?;
        if coeff_bits.is_empty() || coeff_bits.len() > 16 {
            return Err(HeError::PrimeCount(coeff_bits.len()));
        }
        if let Some(&bits) = coeff_bits
            .iter()
            .find(|&&b| !(2..=MAX_PRIME_BITS).contains(&b))
        {
            return Err(HeError::PrimeBits { bits });
        }
        let total_bits: u32 = coeff_bits.iter().sum();
        if total_bits > max_bits {
            return Err(HeError::Insecure {
                degree,
                total_bits,
                max_bits,
            });
        }
        let two_n = 2 * degree as u64;
        // One downward run per distinct size, handed out in the order the sizes are listed.
        let mut sizes: Vec<u32> = coeff_bits.to_vec();
        sizes.sort_unstable();
        sizes.dedup();
        let mut pools = Vec::new();
        for &b in &sizes {
            let count = coeff_bits.iter().filter(|&&x| x == b).count();
            let mut primes = ntt_primes(b, two_n, count)?;
            primes.reverse(); // pop() hands out the largest first
            pools.push((b, primes));
        }
        let mut coeff_modulus = Vec::with_capacity(coeff_bits.len());
        for &b in coeff_bits {
            let prime = pools
                .iter_mut()
                .find(|(size, _)| *size == b)
                .and_then(|(_, p)| p.pop())
                .ok_or(HeError::NoPrimes {
                    bits: b,
                    count: 1,
                    modulus: two_n,
                })?;
            coeff_modulus.push(prime);
        }
        let t = match plain {
            PlainModulus::Value(t) => t,
            PlainModulus::Bits(b) => {
                if !(2..=MAX_PRIME_BITS).contains(&b) {
                    return Err(HeError::PrimeBits { bits: b });
                }
                ntt_primes(b, two_n, 1)?[0]
            }
        };
        let bad = |reason| Err(HeError::PlainModulus { t, reason });
        if t < 3 || !is_prime(t) {
            return bad("not a prime (batching needs a prime t)");
        }
        if t % two_n != 1 {
            return bad("not congruent to 1 mod 2N (batching needs it)");
        }
        if t >= 1u64 << MAX_PRIME_BITS {
            return bad("larger than 60 bits");
        }
        if coeff_modulus.contains(&t) {
            return bad("equal to a coeff_modulus prime");
        }
        if coeff_modulus.iter().all(|&q| q <= t) {
            return bad("not smaller than the coefficient modulus");
        }
        Ok(Self {
            degree,
            plain_modulus: t,
            coeff_modulus,
        })
    }

    /// N, the ring degree and number of slots.
    pub fn degree(&self) -> usize {
        self.degree
    }

    /// t.
    pub fn plain_modulus(&self) -> u64 {
        self.plain_modulus
    }

    /// q_0 … q_{k−1}; the last is the special prime when k > 1.
    pub fn coeff_modulus(&self) -> &[u64] {
        &self.coeff_modulus
    }

    /// Σ log q_i as bit sizes.
    pub fn total_coeff_bits(&self) -> u32 {
        self.coeff_modulus
            .iter()
            .filter_map(|&q| Modulus::new(q))
            .map(|m| m.bits())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes_are_ntt_friendly_distinct_and_sized() {
        let p = Parameters::new(8192, PlainModulus::Value(65537), &[56, 48, 48]).unwrap();
        let q = p.coeff_modulus();
        assert_eq!(q.len(), 3);
        for (&qi, bits) in q.iter().zip([56u32, 48, 48]) {
            assert!(is_prime(qi));
            assert_eq!(qi % 16384, 1);
            assert_eq!(64 - qi.leading_zeros(), bits);
        }
        assert_ne!(q[1], q[2]);
        assert!(q[1] > q[2], "downward from 2^48, in order");
        // The first 48-bit prime is the largest one ≡ 1 mod 2N below 2^48.
        let mut v = (1u64 << 48) - 16384 + 1;
        while !is_prime(v) {
            v -= 16384;
        }
        assert_eq!(q[1], v);
        assert_eq!(p.total_coeff_bits(), 152);
    }

    #[test]
    fn plain_modulus_checks() {
        let n = 4096;
        let bits = [40, 32, 32];
        assert!(Parameters::new(n, PlainModulus::Value(40961), &bits).is_ok());
        let err = Parameters::new(n, PlainModulus::Value(65539), &bits).unwrap_err();
        assert!(
            matches!(err, HeError::PlainModulus { t: 65539, .. }),
            "{err}"
        );
        let err = Parameters::new(n, PlainModulus::Value(65536), &bits).unwrap_err();
        assert!(matches!(err, HeError::PlainModulus { .. }));
        let p = Parameters::new(8192, PlainModulus::Bits(21), &[56, 56, 56, 50]).unwrap();
        let t = p.plain_modulus();
        assert!(is_prime(t) && t % 16384 == 1 && 64 - t.leading_zeros() == 21);
    }

    #[test]
    fn security_bound_refuses_with_numbers() {
        let err = Parameters::new(4096, PlainModulus::Value(40961), &[40, 40, 30]).unwrap_err();
        assert_eq!(
            err,
            HeError::Insecure {
                degree: 4096,
                total_bits: 110,
                max_bits: 109
            }
        );
        assert!(err.to_string().contains("110 bits > 109 bits"));
        assert!(Parameters::new(4096, PlainModulus::Value(40961), &[40, 40, 29]).is_ok());
        assert!(matches!(
            Parameters::new(3000, PlainModulus::Value(40961), &[40]),
            Err(HeError::Degree(3000))
        ));
        assert!(matches!(
            Parameters::new(4096, PlainModulus::Value(40961), &[61]),
            Err(HeError::PrimeBits { bits: 61 })
        ));
        assert!(matches!(
            Parameters::new(4096, PlainModulus::Value(40961), &[]),
            Err(HeError::PrimeCount(0))
        ));
    }

    #[test]
    fn security_table_doubles_with_degree() {
        // The bound grows slightly faster than N (log Q / N shrinks as N grows), as the HE
        // standard's table does; this pins the table against typos.
        for w in SECURITY_128.windows(2) {
            assert_eq!(w[1].0, 2 * w[0].0);
            assert!(w[1].1 >= 2 * w[0].1 && w[1].1 <= 2 * w[0].1 + 5);
        }
    }
}
