//! BFV ciphertexts, symmetric-key encryption, decryption and the noise budget (Fan–Vercauteren,
//! eprint 2012/144, §3 "SymEnc"-style with the secret key, and §4 for the noise).
//!
//! **Encryption** of m ∈ R_t at level ℓ: c = (c0, c1) = ([−a·s + e + Δ·m]_Q, a) with a uniform
//! in R_Q and e from the error distribution. Δ·m is taken as round(Q·m/t) = ⌊Q/t⌋·m +
//! round((Q mod t)·m/t), exact rather than ⌊Q/t⌋·m, so the encoding itself adds no error.
//! `a` is expanded from a 32-byte seed, so a fresh ciphertext travels as (c0, seed), half the
//! size: APSI's receiver sends its query powers this way. `a` is drawn directly as an NTT-form
//! polynomial (a uniform polynomial is uniform in either form).
//!
//! **Decryption**: [c0 + c1·s (+ c2·s²)]_Q = Δ·m + v, and m = round(t/Q · (Δm + v)) mod t
//! whenever ‖v‖∞ < Q/(2t) − (Q mod t)/2, computed in RNS by HPS's scale-and-round
//! ([`crate::rns`]).
//!
//! **Noise budget** (SEAL's definition): with w = [t·(c0 + c1·s)]_Q centered, ‖w‖ ≈ t·‖v‖, and
//! the budget is log2 Q − log2 ‖w‖ − 1 bits (clamped at 0): decryption is correct while it is
//! positive, and each operation's cost is read off as the drop in bits.

use zeroize::Zeroize;

use crate::context::Context;
use crate::encoder::Plaintext;
use crate::error::{HeError, Result};
use crate::keys::{SecretKey, expand_uniform, zero_sample};
use crate::poly::RnsPoly;
use crate::prng::{Prng, SEED_BYTES, fresh_seed};
use crate::rns::{big, round_frac_sum};

/// A BFV ciphertext: 2 (or 3, after a multiplication before relinearization) polynomials at
/// one data level, in coefficient or NTT form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ciphertext {
    pub(crate) level: usize,
    pub(crate) ntt_form: bool,
    pub(crate) polys: Vec<RnsPoly>,
}

impl Ciphertext {
    /// The data level (number of primes).
    pub fn level(&self) -> usize {
        self.level
    }

    /// Number of polynomials (2, or 3 before relinearization).
    pub fn size(&self) -> usize {
        self.polys.len()
    }

    /// Whether the polynomials are in NTT form.
    pub fn is_ntt_form(&self) -> bool {
        self.ntt_form
    }
}

/// A fresh ciphertext as sent: c0 and the seed of c1 (coefficient form, top level).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeededCiphertext {
    pub(crate) level: usize,
    pub(crate) c0: RnsPoly,
    pub(crate) seed: [u8; SEED_BYTES],
}

impl SeededCiphertext {
    /// The full ciphertext: c1 re-expanded from the seed.
    ///
    /// # Errors
    /// [`HeError::Mismatch`] if the level does not exist in `ctx`.
    pub fn expand(&self, ctx: &Context) -> Result<Ciphertext> {
        ctx.level_data(self.level)?;
        if self.c0.degree() != ctx.n || self.c0.rows() != self.level {
            return Err(HeError::Mismatch("seeded ciphertext of other parameters"));
        }
        let mut a = expand_uniform(ctx, self.level, &self.seed);
        a.intt(ctx.level_tables(self.level));
        Ok(Ciphertext {
            level: self.level,
            ntt_form: false,
            polys: vec![self.c0.clone(), a],
        })
    }
}

/// Adds round(Q_ℓ·m/t) to `poly` (coefficient form, level ℓ rows).
pub(crate) fn add_scaled_plain(
    ctx: &Context,
    level: usize,
    poly: &mut RnsPoly,
    pt: &Plaintext,
) -> Result<()> {
    let lv = ctx.level_data(level)?;
    let t = ctx.t.value();
    let half = t >> 1;
    let fix: Vec<u64> = pt
        .coeffs
        .iter()
        .map(|&m| {
            ((u128::from(m) * u128::from(lv.q_mod_t) + u128::from(half)) / u128::from(t)) as u64
        })
        .collect();
    for (i, m) in ctx.level_moduli(level).iter().enumerate() {
        let d = lv.delta[i];
        let ds = m.shoup(d);
        for ((x, &c), &f) in poly.row_mut(i).iter_mut().zip(&pt.coeffs).zip(&fix) {
            let v = m.add(m.mul_shoup(c, d, ds), m.reduce(f));
            *x = m.add(*x, v);
        }
    }
    Ok(())
}

/// Encrypts `pt` under `sk` at the top data level, as (c0, seed).
///
/// # Errors
/// [`HeError::Rng`] if the OS random source fails.
pub fn encrypt_seeded(ctx: &Context, sk: &SecretKey, pt: &Plaintext) -> Result<SeededCiphertext> {
    ctx.check_pt(pt)?;
    if sk.ntt.degree() != ctx.n || sk.ntt.rows() != ctx.q.len() {
        return Err(HeError::Mismatch("secret key of other parameters"));
    }
    let level = ctx.top_level();
    let seed = fresh_seed()?;
    let mut noise = Prng::from_os()?;
    let (mut c0, _) = zero_sample(ctx, sk, level, &seed, &mut noise);
    c0.intt(ctx.level_tables(level));
    add_scaled_plain(ctx, level, &mut c0, pt)?;
    Ok(SeededCiphertext { level, c0, seed })
}

/// Encrypts `pt` under `sk` at the top data level (coefficient form).
///
/// # Errors
/// [`HeError::Rng`] if the OS random source fails.
pub fn encrypt(ctx: &Context, sk: &SecretKey, pt: &Plaintext) -> Result<Ciphertext> {
    encrypt_seeded(ctx, sk, pt)?.expand(ctx)
}

/// [c0 + c1·s + c2·s² …]_Q in coefficient form.
fn phase(ctx: &Context, sk: &SecretKey, ct: &Ciphertext) -> Result<RnsPoly> {
    ctx.check_ct(ct)?;
    if sk.ntt.degree() != ctx.n || sk.ntt.rows() != ctx.q.len() {
        return Err(HeError::Mismatch("secret key of other parameters"));
    }
    let level = ct.level;
    let moduli = ctx.level_moduli(level);
    let tables = ctx.level_tables(level);
    let mut s = sk.ntt.clone();
    s.truncate_rows(level);
    let mut s_pow = s.clone();
    // In NTT form: c0 + c1·s + c2·s² + …
    let to_ntt = |p: &RnsPoly| {
        let mut p = p.clone();
        if !ct.ntt_form {
            p.ntt(tables);
        }
        p
    };
    let mut acc = to_ntt(&ct.polys[0]);
    for c in &ct.polys[1..] {
        acc.mul_add_assign(&to_ntt(c), &s_pow, moduli);
        s_pow.mul_assign(&s, moduli);
    }
    s.zeroize();
    s_pow.zeroize();
    acc.intt(tables);
    Ok(acc)
}

/// Decrypts `ct` to its plaintext polynomial.
///
/// # Errors
/// [`HeError::Mismatch`] if the ciphertext's level does not exist in `ctx`.
pub fn decrypt(ctx: &Context, sk: &SecretKey, ct: &Ciphertext) -> Result<Plaintext> {
    let x = phase(ctx, sk, ct)?;
    let lv = ctx.level_data(ct.level)?;
    let t = &ctx.t;
    let rows: Vec<&[u64]> = (0..ct.level).map(|i| x.row(i)).collect();
    let coeffs = (0..ctx.n)
        .map(|c| {
            let mut acc = 0u128;
            for (i, r) in rows.iter().enumerate() {
                acc += u128::from(r[c]) * u128::from(lv.dec_omega[i]);
            }
            let round = round_frac_sum(rows.iter().zip(&lv.dec_theta).map(|(r, &th)| (r[c], th)));
            t.add(t.reduce_u128(acc), t.reduce_u128(round))
        })
        .collect();
    Ok(Plaintext { coeffs })
}

/// The invariant noise budget in bits (0 when decryption may fail).
///
/// # Errors
/// [`HeError::Mismatch`] if the ciphertext's level does not exist in `ctx`.
pub fn noise_budget(ctx: &Context, sk: &SecretKey, ct: &Ciphertext) -> Result<u32> {
    let mut x = phase(ctx, sk, ct)?;
    let lv = ctx.level_data(ct.level)?;
    let moduli = ctx.level_moduli(ct.level);
    let tv = ctx.t.value();
    for (i, m) in moduli.iter().enumerate() {
        let tm = m.reduce(tv);
        let qinv = lv.q_hat_inv[i];
        for v in x.row_mut(i).iter_mut() {
            *v = m.mul(m.mul(*v, tm), qinv);
        }
    }
    let limbs = lv.q_big.len() + 1;
    let mut max_bits = 0;
    let mut acc = vec![0u64; limbs];
    let mut twice = vec![0u64; limbs];
    for c in 0..ctx.n {
        acc.iter_mut().for_each(|w| *w = 0);
        for i in 0..ct.level {
            big::mul_add_word(&mut acc, &lv.q_hat_big[i], x.row(i)[c]);
        }
        while big::cmp(&acc, &lv.q_big) != std::cmp::Ordering::Less {
            big::sub_assign(&mut acc, &lv.q_big);
        }
        // Centered: min(acc, Q − acc).
        twice.copy_from_slice(&acc);
        big::mul_add_word(&mut twice, &acc, 1);
        if big::cmp(&twice, &lv.q_big) == std::cmp::Ordering::Greater {
            big::rsub_assign(&mut acc, &lv.q_big);
        }
        max_bits = max_bits.max(big::bits(&acc));
    }
    x.zeroize();
    Ok(big::bits(&lv.q_big)
        .saturating_sub(max_bits)
        .saturating_sub(1))
}
