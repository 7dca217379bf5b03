//! Ciphertexts rounded to fewer bits for the trip back to the key holder (the "modulus
//! switching to a power of two" of Spiral, eprint 2022/368 §2, and Respire, 2024/1165).
//!
//! A size-2 coefficient-form ciphertext (c0, c1) modulo one prime q (the last data level) is
//! sent as c0' = round(2^b0·c0/q) mod 2^b0 and c1' = round(2^b1·c1/q) mod 2^b1, b0 + b1 bits a
//! coefficient instead of 2·bits(q). The key holder lifts them back to ĉ_i = round(q·c_i'/2^b_i)
//! (always below q) and decrypts as usual.
//!
//! **Error.** Decryption rounds t·(c0 + c1·s)/q = m + t·v/q (mod t); it is right while the
//! total error in that expression is below 1/2. Rounding to 2^b and back changes c_i/q by
//! ε_i + δ_i with |ε_i| ≤ 2^−(b_i+1) and |δ_i| ≤ 1/(2q), modulo 1 (the wrap of c_i' mod 2^b_i
//! and of ĉ_i mod q change c_i/q by an integer, which s, an integer polynomial, keeps integral).
//! s is ternary, so each coefficient of (ε1 + δ1)·s is at most N·(|ε1| + |δ1|), and the added
//! error is at most
//!
//!   E = t·2^−(b0+1) + t·N·2^−(b1+1) + t·(N + 1)/(2q).
//!
//! **Bits.** With τ = ⌈log2 t⌉ (t ≤ 2^τ): b0 = τ + 5 makes the first term ≤ 2^−6, b1 = τ +
//! log2 N + 3 the second ≤ 2^−4, and requiring bits(q) ≥ b1 + 2 (q > 2^(b1+1)) the third ≤
//! 2^−5·(N+1)/N. So E < 1/8, worst case over every secret and every ciphertext (no
//! probability). A ciphertext whose noise budget (SEAL's definition, [`crate::cipher`]) is at
//! least 2 bits has t·‖v‖ < q/4, so its error stays below 1/4 + 1/8 < 1/2 and it decrypts
//! correctly after rounding; one with at least 3 bits (t·‖v‖ < q/8) keeps at least 1 bit.
//! Rounding thus costs at most one bit of the budget. Otherwise (a last prime too small)
//! [`rounding_bits`] is `None` and nothing is rounded.
//!
//! For APSI's presets: N = 8192, t = 65537 (τ = 17): b0 = 22, b1 = 33, 55 bits instead of
//! 2 × 56; N = 4096, t = 40961 (τ = 16): b0 = 21, b1 = 31, 52 bits instead of 2 × 40.
//!
//! Rounding reveals nothing new: c0', c1' are a deterministic function of the ciphertext.

use crate::cipher::Ciphertext;
use crate::context::Context;
use crate::error::{HeError, Result};
use crate::poly::RnsPoly;

/// b0 − τ: c0's error term t·2^−(b0+1) ≤ 2^−6.
const C0_MARGIN: u32 = 5;
/// b1 − τ − log2 N: c1's error term t·N·2^−(b1+1) ≤ 2^−4.
const C1_MARGIN: u32 = 3;

/// (b0, b1) for the one-prime level 1 of `ctx`, or `None` when rounding does not apply (the
/// last prime has fewer than b1 + 2 bits). See the module documentation for the derivation.
pub fn rounding_bits(ctx: &Context) -> Option<(u32, u32)> {
    let q = ctx.level_moduli(1).first()?;
    let tau = 64 - (ctx.t.value() - 1).leading_zeros();
    let log_n = ctx.n.trailing_zeros();
    let b0 = tau + C0_MARGIN;
    let b1 = tau + log_n + C1_MARGIN;
    (q.bits() >= b1 + 2).then_some((b0, b1))
}

/// The bound E on the error rounding adds to t·phase/q (module documentation), as a float.
pub fn rounding_error_bound(ctx: &Context) -> Option<f64> {
    let (b0, b1) = rounding_bits(ctx)?;
    let q = ctx.level_moduli(1).first()?.value() as f64;
    let t = ctx.t.value() as f64;
    let n = ctx.n as f64;
    Some(
        t / 2f64.powi(b0 as i32 + 1) + t * n / 2f64.powi(b1 as i32 + 1) + t * (n + 1.0) / (2.0 * q),
    )
}

/// A level-1 ciphertext rounded to (b0, b1) bits per coefficient.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundedCiphertext {
    pub(crate) c0: Vec<u64>,
    pub(crate) c1: Vec<u64>,
}

fn round_row(row: &[u64], q: u64, b: u32) -> Vec<u64> {
    let mask = (1u64 << b) - 1;
    row.iter()
        .map(|&c| (((u128::from(c) << b) + u128::from(q >> 1)) / u128::from(q)) as u64 & mask)
        .collect()
}

fn lift_row(row: &[u64], q: u64, b: u32) -> Vec<u64> {
    // (c'·q + 2^(b−1)) >> b < q for c' < 2^b, as 2^(b−1) < q.
    row.iter()
        .map(|&c| ((u128::from(c) * u128::from(q) + (1u128 << (b - 1))) >> b) as u64)
        .collect()
}

impl RoundedCiphertext {
    /// Rounds `ct`, which must be of size 2 at level 1 (coefficient or NTT form).
    ///
    /// # Errors
    /// [`HeError::Unsupported`] when rounding does not apply to `ctx`; [`HeError::Mismatch`]
    /// for a ciphertext of another level or size.
    pub fn round(ctx: &Context, ct: &Ciphertext) -> Result<Self> {
        let (b0, b1) = rounding_bits(ctx).ok_or(HeError::Unsupported(
            "rounding needs a last prime of at least log2(t·N) + 5 bits",
        ))?;
        ctx.check_ct(ct)?;
        if ct.level != 1 || ct.polys.len() != 2 {
            return Err(HeError::Mismatch(
                "only a size-2 ciphertext at level 1 is rounded",
            ));
        }
        let mut polys = ct.polys.clone();
        if ct.ntt_form {
            for p in &mut polys {
                p.intt(ctx.level_tables(1));
            }
        }
        let q = ctx.level_moduli(1)[0].value();
        Ok(Self {
            c0: round_row(polys[0].row(0), q, b0),
            c1: round_row(polys[1].row(0), q, b1),
        })
    }

    /// The level-1 ciphertext (ĉ0, ĉ1) the key holder decrypts.
    ///
    /// # Errors
    /// [`HeError::Unsupported`] when rounding does not apply to `ctx`; [`HeError::Mismatch`]
    /// for rows of another degree.
    pub fn lift(&self, ctx: &Context) -> Result<Ciphertext> {
        let (b0, b1) = rounding_bits(ctx).ok_or(HeError::Unsupported(
            "rounding needs a last prime of at least log2(t·N) + 5 bits",
        ))?;
        if self.c0.len() != ctx.n || self.c1.len() != ctx.n {
            return Err(HeError::Mismatch("rounded ciphertext of other parameters"));
        }
        let q = ctx.level_moduli(1)[0].value();
        let mut p0 = RnsPoly::zero(ctx.n, 1);
        p0.row_mut(0).copy_from_slice(&lift_row(&self.c0, q, b0));
        let mut p1 = RnsPoly::zero(ctx.n, 1);
        p1.row_mut(0).copy_from_slice(&lift_row(&self.c1, q, b1));
        Ok(Ciphertext {
            level: 1,
            ntt_form: false,
            polys: vec![p0, p1],
        })
    }
}
