//! Keys: the ternary secret s (FV §3, "SecretKeyGen"; the HE standard's uniform ternary
//! distribution) and the relinearization key, a key-switching key from s² to s in SEAL's RNS
//! form: one RLWE sample modulo Q·P (P the special prime) per data prime q_i,
//!
//!   rk_i = (b_i, a_i),  b_i = −a_i·s + e_i + P·s²·δ_i,   δ_i ≡ 1 (mod q_i), ≡ 0 (mod q_j, j ≠ i, and P),
//!
//! so that Σ_i \[d\]_{q_i}·rk_i encrypts P·d·s² plus an error Σ \[d\]_{q_i}·e_i, both divided by P
//! when the special prime is dropped (Gentry–Halevi–Smart's special-modulus key switching, in
//! its RNS-digit form; Bajard et al. 2016/510 §4 and SEAL's `KSwitchKeys`). The digits \[d\]_{q_i}
//! are below q_i, so the error after division is about Σ q_i·N·|e|/P: P at least as large as the
//! data primes keeps it a few bits.
//!
//! The secret key is zeroized on drop and has no `Debug`.

use zeroize::Zeroize;

use crate::context::Context;
use crate::error::{HeError, Result};
use crate::poly::RnsPoly;
use crate::prng::{Prng, fresh_seed};

/// The secret key s, stored in NTT form modulo every prime (special prime included).
#[derive(Clone)]
pub struct SecretKey {
    pub(crate) ntt: RnsPoly,
}

impl Drop for SecretKey {
    fn drop(&mut self) {
        self.ntt.zeroize();
    }
}

impl SecretKey {
    /// A fresh uniform ternary secret from the OS random source.
    ///
    /// # Errors
    /// [`HeError::Rng`] if the OS refuses.
    pub fn generate(ctx: &Context) -> Result<Self> {
        let mut prng = Prng::from_os()?;
        let mut coeffs: Vec<i64> = (0..ctx.n).map(|_| prng.ternary()).collect();
        let mut ntt = RnsPoly::from_signed(&coeffs, &ctx.q);
        coeffs.zeroize();
        ntt.ntt(&ctx.q_ntt);
        Ok(Self { ntt })
    }
}

/// Relinearization keys: one pair of NTT-form polynomials over all primes per data prime. Each
/// `a_i` is expanded from a 32-byte seed, kept so the keys travel as (b_i, seed_i), half the
/// size (APSI's receiver sends its relinearization keys to the sender).
#[derive(Clone, PartialEq, Eq)]
pub struct RelinKeys {
    pub(crate) keys: Vec<(RnsPoly, RnsPoly)>,
    pub(crate) seeds: Vec<[u8; 32]>,
}

impl std::fmt::Debug for RelinKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RelinKeys({} components)", self.keys.len())
    }
}

/// The uniform polynomial of `seed` over the first `rows` primes, in NTT form (row after row,
/// rejection-sampled from the AES-CTR stream): the `a` of a seeded ciphertext or key.
pub(crate) fn expand_uniform(ctx: &Context, rows: usize, seed: &[u8; 32]) -> RnsPoly {
    let mut a = RnsPoly::zero(ctx.n, rows);
    let mut prng = Prng::new(seed);
    for (i, m) in ctx.q.iter().enumerate().take(rows) {
        for x in a.row_mut(i).iter_mut() {
            *x = prng.uniform(m);
        }
    }
    a
}

/// A fresh RLWE sample of zero modulo every prime: (−a·s + e, a), NTT form, `a` from `seed`.
pub(crate) fn zero_sample(
    ctx: &Context,
    sk: &SecretKey,
    rows: usize,
    seed: &[u8; 32],
    noise: &mut Prng,
) -> (RnsPoly, RnsPoly) {
    let moduli = &ctx.q[..rows];
    let a = expand_uniform(ctx, rows, seed);
    // e and a·s each reveal s given (b, a): both are wiped.
    let mut e: Vec<i64> = (0..ctx.n).map(|_| noise.cbd()).collect();
    let mut b = RnsPoly::from_signed(&e, moduli);
    e.zeroize();
    b.ntt(&ctx.q_ntt[..rows]);
    let mut a_s = a.clone();
    a_s.mul_assign(&sk.ntt, moduli);
    b.sub_assign(&a_s, moduli);
    a_s.zeroize();
    (b, a)
}

impl RelinKeys {
    /// Keys switching s² to s.
    ///
    /// # Errors
    /// [`HeError::Unsupported`] with a single prime (no special prime), [`HeError::Rng`].
    pub fn generate(ctx: &Context, sk: &SecretKey) -> Result<Self> {
        let Some((sp, _)) = ctx.special else {
            return Err(HeError::Unsupported(
                "relinearization needs at least two coeff_modulus primes",
            ));
        };
        let rows = ctx.q.len();
        if sk.ntt.degree() != ctx.n || sk.ntt.rows() != rows {
            return Err(HeError::Mismatch("secret key of other parameters"));
        }
        let mut s2 = sk.ntt.clone();
        s2.mul_assign(&sk.ntt, &ctx.q);
        let mut noise = Prng::from_os()?;
        let p = ctx.q[sp].value();
        let mut keys = Vec::with_capacity(sp);
        let mut seeds = Vec::with_capacity(sp);
        for i in 0..sp {
            let seed = fresh_seed()?;
            seeds.push(seed);
            let (mut b, a) = zero_sample(ctx, sk, rows, &seed, &mut noise);
            let m = ctx.q[i];
            let pm = m.reduce(p);
            for (x, &s) in b.row_mut(i).iter_mut().zip(s2.row(i)) {
                *x = m.add(*x, m.mul(pm, s));
            }
            keys.push((b, a));
        }
        s2.zeroize();
        Ok(Self { keys, seeds })
    }
}
