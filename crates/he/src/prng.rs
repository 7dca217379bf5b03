//! Randomness: AES-256 in counter mode expands a 32-byte seed into a word stream, from which the
//! public uniform polynomial `a` of an encryption (so a ciphertext can travel as (c0, seed)),
//! the ternary secret and the errors are drawn. Fresh seeds come from the operating system.
//!
//! * Uniform mod q: rejection sampling of words masked to the bit length of q (acceptance > 1/2),
//!   so the residues are exactly uniform.
//! * Ternary secret: uniform in {−1, 0, 1} by rejection from 2-bit draws (the HE standard's
//!   "uniform ternary" distribution that its security table assumes).
//! * Errors: centered binomial with η = 21, i.e. Σ_{i<21} (b_i − b'_i): variance η/2 = 10.5,
//!   standard deviation 3.24, the HE standard's σ ≈ 3.2 (as fhe.rs and lattice KEMs do instead of
//!   a discrete Gaussian), bounded by 21 in absolute value, which the noise analysis uses.

use aes::Aes256;
use aes::cipher::{Array, BlockCipherEncrypt, KeyInit};
use zeroize::Zeroize;

use crate::error::{HeError, Result};
use crate::modarith::Modulus;

/// Size of an expansion seed.
pub const SEED_BYTES: usize = 32;

/// η of the centered binomial error distribution.
pub const CBD_ETA: u32 = 21;

const BATCH: usize = 16;

/// A deterministic word stream from a 32-byte seed (AES-256-CTR).
pub struct Prng {
    cipher: Aes256,
    counter: u128,
    blocks: [[u8; 16]; BATCH],
    idx: usize,
}

impl Drop for Prng {
    fn drop(&mut self) {
        self.blocks.zeroize();
    }
}

/// 32 fresh bytes from the operating system.
///
/// # Errors
/// [`HeError::Rng`] if the OS refuses.
pub fn fresh_seed() -> Result<[u8; SEED_BYTES]> {
    let mut seed = [0u8; SEED_BYTES];
    getrandom::fill(&mut seed).map_err(|e| HeError::Rng(e.to_string()))?;
    Ok(seed)
}

impl Prng {
    /// The stream of `seed`.
    pub fn new(seed: &[u8; SEED_BYTES]) -> Self {
        Self {
            cipher: Aes256::new(&Array::from(*seed)),
            counter: 0,
            blocks: [[0; 16]; BATCH],
            idx: 2 * BATCH,
        }
    }

    /// A stream from a fresh OS seed.
    ///
    /// # Errors
    /// [`HeError::Rng`] if the OS refuses.
    pub fn from_os() -> Result<Self> {
        let mut seed = fresh_seed()?;
        let p = Self::new(&seed);
        seed.zeroize();
        Ok(p)
    }

    fn refill(&mut self) {
        for b in self.blocks.iter_mut() {
            *b = self.counter.to_le_bytes();
            self.counter = self.counter.wrapping_add(1);
        }
        self.cipher
            .encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut self.blocks));
        self.idx = 0;
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        if self.idx >= 2 * BATCH {
            self.refill();
        }
        let block = &self.blocks[self.idx / 2];
        let off = (self.idx % 2) * 8;
        let mut w = [0u8; 8];
        w.copy_from_slice(&block[off..off + 8]);
        self.idx += 1;
        u64::from_le_bytes(w)
    }

    /// Uniform in [0, q).
    pub fn uniform(&mut self, m: &Modulus) -> u64 {
        let q = m.value();
        let mask = if q.is_power_of_two() {
            q - 1
        } else {
            u64::MAX >> q.leading_zeros()
        };
        loop {
            let x = self.next_u64() & mask;
            if x < q {
                return x;
            }
        }
    }

    /// Uniform in {−1, 0, 1}.
    pub fn ternary(&mut self) -> i64 {
        loop {
            let mut w = self.next_u64();
            for _ in 0..32 {
                let v = w & 3;
                w >>= 2;
                if v < 3 {
                    return v as i64 - 1;
                }
            }
        }
    }

    /// Centered binomial with η = [`CBD_ETA`].
    pub fn cbd(&mut self) -> i64 {
        let w = self.next_u64();
        let mask = (1u64 << CBD_ETA) - 1;
        i64::from((w & mask).count_ones()) - i64::from(((w >> 32) & mask).count_ones())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_from_seed_and_in_range() {
        let seed = [7u8; 32];
        let (mut a, mut b) = (Prng::new(&seed), Prng::new(&seed));
        let m = Modulus::new(40961).unwrap();
        for _ in 0..1000 {
            let x = a.uniform(&m);
            assert_eq!(x, b.uniform(&m));
            assert!(x < 40961);
        }
        let mut c = Prng::new(&[8u8; 32]);
        assert_ne!(a.next_u64(), c.next_u64());
    }

    #[test]
    fn distributions_have_the_stated_support_and_moments() {
        let mut p = Prng::new(&[1u8; 32]);
        let n = 200_000;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            counts[(p.ternary() + 1) as usize] += 1;
        }
        for c in counts {
            assert!((c as f64 / n as f64 - 1.0 / 3.0).abs() < 0.01, "{counts:?}");
        }
        let (mut sum, mut sq, mut max) = (0f64, 0f64, 0i64);
        for _ in 0..n {
            let e = p.cbd();
            sum += e as f64;
            sq += (e * e) as f64;
            max = max.max(e.abs());
        }
        assert!((sum / n as f64).abs() < 0.05);
        assert!(
            (sq / n as f64 - 10.5).abs() < 0.3,
            "variance {}",
            sq / n as f64
        );
        assert!(max <= i64::from(CBD_ETA));
    }
}
