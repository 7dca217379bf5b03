//! Everything derived from [`Parameters`] once: NTT tables for every prime and for t, and per
//! data level the constants of encryption (Δ = ⌊Q/t⌋), decryption (HPS scale-and-round to t),
//! the noise budget (CRT composition), modulus switching and HPS multiplication (an auxiliary
//! basis P and the converters Q → P, QP → P scaled by t/Q, P → Q).
//!
//! **Levels.** As in SEAL, when there are k ≥ 2 primes the last one is the *special prime* of
//! key switching: ciphertexts live modulo the first k − 1 ("data primes") and drop them from
//! the end by modulus switching, so a ciphertext at level ℓ is modulo Q_ℓ = q_0 ⋯ q_{ℓ−1},
//! ℓ = k − 1 … 1. With a single prime there is no special prime, the data level is q_0 alone,
//! and relinearization is unavailable (APSI's one-prime presets never multiply ciphertexts).

use crate::error::{HeError, Result};
use crate::modarith::Modulus;
use crate::ntt::NttTables;
use crate::params::{Parameters, ntt_primes};
use crate::rns::{BaseConverter, big, frac128};

/// Size of the auxiliary primes of multiplication: 61 bits, distinct from every q_i (at most
/// 60 bits); or, on CPUs with AVX-512 IFMA, 50 bits so that their NTTs take the IFMA path (more
/// of them, but each transform about three times faster). P is internal to a multiplication,
/// whose result is the same either way, so the two parties need not agree on it.
fn aux_prime_bits() -> u32 {
    if crate::ntt_ifma::available() {
        crate::ntt_ifma::MAX_BITS
    } else {
        61
    }
}

/// Constants of one data level.
#[derive(Debug)]
pub(crate) struct Level {
    /// ⌊Q/t⌋ mod q_i.
    pub delta: Vec<u64>,
    /// Q mod t.
    pub q_mod_t: u64,
    /// (Q/q_i)^{-1} mod q_i.
    pub q_hat_inv: Vec<u64>,
    /// Decryption: ⌊t·(Q/q_i)^{-1} / q_i⌋ mod t.
    pub dec_omega: Vec<u64>,
    /// Decryption: the fraction of t·(Q/q_i)^{-1} / q_i.
    pub dec_theta: Vec<(u64, u64)>,
    /// Q as a multi-word integer, and the Q/q_i.
    pub q_big: Vec<u64>,
    pub q_hat_big: Vec<Vec<u64>>,
    /// q_{ℓ−1}^{-1} mod q_i for i < ℓ − 1 (modulus switching); empty at level 1.
    pub inv_last: Vec<(u64, u64)>,
    /// HPS multiplication.
    pub mul: MulTables,
}

/// The auxiliary basis P of HPS multiplication at one level and its converters.
#[derive(Debug)]
pub(crate) struct MulTables {
    pub p: Vec<Modulus>,
    pub p_ntt: Vec<NttTables>,
    pub q_to_p: BaseConverter,
    pub p_to_q: BaseConverter,
    /// ⌊t·P·((Q/q_i)·P)^{-1}_{q_i} / q_i⌋ mod p_j, indexed [j][i].
    pub omega: Vec<Vec<u64>>,
    /// The matching fractions, per i.
    pub theta: Vec<(u64, u64)>,
    /// t·Q^{-1} mod p_j.
    pub t_q_inv: Vec<u64>,
    /// Most tensors one scale-down may take summed ([`crate::eval::multiply_extended_sum`]).
    pub sum_terms: usize,
}

/// Precomputed BFV context.
#[derive(Debug)]
pub struct Context {
    params: Parameters,
    pub(crate) n: usize,
    pub(crate) t: Modulus,
    pub(crate) t_ntt: NttTables,
    /// All primes, the special one last (when there are ≥ 2).
    pub(crate) q: Vec<Modulus>,
    pub(crate) q_ntt: Vec<NttTables>,
    pub(crate) levels: Vec<Level>,
    /// Key switching: special prime index and its inverse mod each data prime.
    pub(crate) special: Option<(usize, Vec<(u64, u64)>)>,
}

/// Tensors one HPS scale-down may sum when P has at least `p_bits` bits and one product needs
/// `need` (see [`Context::mul_tables`]).
fn sum_terms(p_bits: u32, need: u32) -> usize {
    1usize << p_bits.saturating_sub(need).min(20)
}

fn moduli(values: &[u64]) -> Result<Vec<Modulus>> {
    values
        .iter()
        .map(|&q| Modulus::new(q).ok_or(HeError::Unsupported("prime of 62 bits or more")))
        .collect()
}

fn tables(ms: &[Modulus], n: usize) -> Result<Vec<NttTables>> {
    ms.iter()
        .map(|&m| NttTables::new(m, n).ok_or(HeError::Unsupported("prime without a 2N-th root")))
        .collect()
}

impl Context {
    /// Precomputes the context of `params`.
    ///
    /// # Errors
    /// Only if the parameters were not made by [`Parameters::new`] (which checks them).
    pub fn new(params: &Parameters) -> Result<Self> {
        Self::with_aux_bits(params, aux_prime_bits())
    }

    /// As [`Context::new`] with auxiliary primes of `aux_bits` bits (tests cover both sizes).
    pub(crate) fn with_aux_bits(params: &Parameters, aux_bits: u32) -> Result<Self> {
        let n = params.degree();
        let t = Modulus::new(params.plain_modulus()).ok_or(HeError::PlainModulus {
            t: params.plain_modulus(),
            reason: "out of range",
        })?;
        let t_ntt = NttTables::new(t, n).ok_or(HeError::PlainModulus {
            t: t.value(),
            reason: "no 2N-th root of unity",
        })?;
        let q = moduli(params.coeff_modulus())?;
        let q_ntt = tables(&q, n)?;
        let data = if q.len() > 1 { q.len() - 1 } else { 1 };
        let mut levels = Vec::with_capacity(data);
        for l in 1..=data {
            levels.push(Self::level(&q[..l], t, n, aux_bits)?);
        }
        let special = if q.len() > 1 {
            let sp = q.len() - 1;
            let inv = q[..sp]
                .iter()
                .map(|m| {
                    let i = m
                        .inv(q[sp].value())
                        .ok_or(HeError::Unsupported("equal primes"))?;
                    Ok((i, m.shoup(i)))
                })
                .collect::<Result<Vec<_>>>()?;
            Some((sp, inv))
        } else {
            None
        };
        Ok(Self {
            params: params.clone(),
            n,
            t,
            t_ntt,
            q,
            q_ntt,
            levels,
            special,
        })
    }

    fn level(q: &[Modulus], t: Modulus, n: usize, aux_bits: u32) -> Result<Level> {
        let bad = || HeError::Unsupported("non-coprime moduli");
        let l = q.len();
        let tv = t.value();
        let q_vals: Vec<u64> = q.iter().map(|m| m.value()).collect();
        let q_big = big::product(&q_vals);
        let q_mod_t = q.iter().fold(1u64, |acc, m| t.mul(acc, m.value()));
        // ⌊Q/t⌋ mod q_i = (Q − (Q mod t)) · t^{-1} mod q_i, and Q ≡ 0 mod q_i.
        let delta = q
            .iter()
            .map(|m| {
                let t_inv = m.inv(tv).ok_or_else(bad)?;
                Ok(m.mul(m.neg(m.reduce(q_mod_t)), t_inv))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut q_hat_inv = Vec::with_capacity(l);
        let mut q_hat_big = Vec::with_capacity(l);
        let mut dec_omega = Vec::with_capacity(l);
        let mut dec_theta = Vec::with_capacity(l);
        for (i, m) in q.iter().enumerate() {
            let hat = q
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .fold(1u64, |acc, (_, x)| m.mul(acc, x.value()));
            let inv = m.inv(hat).ok_or_else(bad)?;
            q_hat_inv.push(inv);
            let others: Vec<u64> = q_vals
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, &v)| v)
                .collect();
            q_hat_big.push(big::product(&others));
            let prod = u128::from(inv) * u128::from(tv);
            let qi = u128::from(m.value());
            dec_omega.push(((prod / qi) % u128::from(tv)) as u64);
            dec_theta.push(frac128((prod % qi) as u64, m.value()));
        }
        let inv_last = if l >= 2 {
            let last = q[l - 1].value();
            q[..l - 1]
                .iter()
                .map(|m| {
                    let i = m.inv(last).ok_or_else(bad)?;
                    Ok((i, m.shoup(i)))
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        Ok(Level {
            delta,
            q_mod_t,
            q_hat_inv,
            dec_omega,
            dec_theta,
            q_big,
            q_hat_big,
            inv_last,
            mul: Self::mul_tables(q, t, n, aux_bits)?,
        })
    }

    /// HPS's auxiliary basis: |t·d/Q| ≤ t·N·Q/2 for a tensor coefficient d, and the result must
    /// be recovered exactly (centered) from its residues mod P, so P > t·N·Q; we take
    /// P ≥ 2^(bits(Q) + bits(t) + log N + 2) > 4·t·N·Q, which keeps the result below P/8, far
    /// from the ±P/2 where the floating-point lift back to Q could pick the other
    /// representative. (The tensor itself, |d| ≤ N·Q²/2, needs only P > N·Q.)
    ///
    /// A sum of k tensors scaled at once is k times larger, so it keeps that margin while
    /// k·4·t·N·Q ≤ P. Each auxiliary prime has exactly `aux_bits` bits, so P ≥
    /// 2^(count·(aux_bits − 1)) and the primes taken leave s = count·(aux_bits − 1) − need bits
    /// of room: up to 2^s tensors ([`sum_terms`], capped at 2^20). Rounding the count of primes
    /// up leaves 11–45 bits at SecretFlow's presets.
    fn mul_tables(q: &[Modulus], t: Modulus, n: usize, aux_bits: u32) -> Result<MulTables> {
        let bad = || HeError::Unsupported("non-coprime moduli");
        let log_q: u32 = q.iter().map(|m| m.bits()).sum();
        let need = log_q + t.bits() + n.trailing_zeros() + 2;
        let count = need.div_ceil(aux_bits - 1) as usize;
        // Skip any prime that is also a q_i (possible with 50-bit aux primes) or t.
        let p = moduli(
            &ntt_primes(aux_bits, 2 * n as u64, count + q.len() + 1)?
                .into_iter()
                .filter(|p| q.iter().all(|m| m.value() != *p) && *p != t.value())
                .take(count)
                .collect::<Vec<_>>(),
        )?;
        let p_ntt = tables(&p, n)?;
        let q_to_p = BaseConverter::new(q, &p).ok_or_else(bad)?;
        let p_to_q = BaseConverter::new(&p, q).ok_or_else(bad)?;
        let tv = t.value();
        let mut theta = Vec::with_capacity(q.len());
        let mut rho = Vec::with_capacity(q.len());
        for (i, m) in q.iter().enumerate() {
            // ĉ_i = ((Q/q_i)·P)^{-1} mod q_i; ρ_i = ĉ_i·t·P mod q_i.
            let qp_hat = q
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, x)| x.value())
                .chain(p.iter().map(|x| x.value()))
                .fold(1u64, |acc, v| m.mul(acc, v));
            let c = m.inv(qp_hat).ok_or_else(bad)?;
            let p_mod = p.iter().fold(1u64, |acc, x| m.mul(acc, x.value()));
            let r = m.mul(m.mul(c, tv), p_mod);
            rho.push(r);
            theta.push(frac128(r, m.value()));
        }
        let mut omega = Vec::with_capacity(p.len());
        let mut t_q_inv = Vec::with_capacity(p.len());
        for pj in &p {
            // ω_i ≡ (ĉ_i·t·P − ρ_i) / q_i ≡ −ρ_i · q_i^{-1} (mod p_j), as P ≡ 0.
            let row = q
                .iter()
                .zip(&rho)
                .map(|(m, &r)| {
                    let inv = pj.inv(m.value()).ok_or_else(bad)?;
                    Ok(pj.mul(pj.neg(pj.reduce(r)), inv))
                })
                .collect::<Result<Vec<_>>>()?;
            omega.push(row);
            let q_mod = q.iter().fold(1u64, |acc, x| pj.mul(acc, x.value()));
            t_q_inv.push(pj.mul(pj.reduce(tv), pj.inv(q_mod).ok_or_else(bad)?));
        }
        let sum_terms = sum_terms(p.len() as u32 * (aux_bits - 1), need);
        Ok(MulTables {
            p,
            p_ntt,
            q_to_p,
            p_to_q,
            omega,
            theta,
            t_q_inv,
            sum_terms,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &Parameters {
        &self.params
    }

    /// N.
    pub fn degree(&self) -> usize {
        self.n
    }

    /// t.
    pub fn plain_modulus(&self) -> u64 {
        self.t.value()
    }

    /// The highest data level (number of data primes): fresh ciphertexts are made there.
    pub fn top_level(&self) -> usize {
        self.levels.len()
    }

    /// Whether relinearization keys exist for these parameters (k ≥ 2 primes).
    pub fn has_special_prime(&self) -> bool {
        self.special.is_some()
    }

    pub(crate) fn level_data(&self, level: usize) -> Result<&Level> {
        level
            .checked_sub(1)
            .and_then(|i| self.levels.get(i))
            .ok_or(HeError::Mismatch("level out of range"))
    }

    /// The primes of data level ℓ.
    pub fn level_moduli(&self, level: usize) -> &[Modulus] {
        &self.q[..level.min(self.levels.len())]
    }

    pub(crate) fn level_tables(&self, level: usize) -> &[NttTables] {
        &self.q_ntt[..level.min(self.levels.len())]
    }

    /// Checks that `ct` belongs to this context: an existing level, N coefficients and one row
    /// per prime of its level in every polynomial, size 2 or 3.
    pub(crate) fn check_ct(&self, ct: &crate::cipher::Ciphertext) -> Result<()> {
        self.level_data(ct.level)?;
        if !(2..=3).contains(&ct.polys.len()) {
            return Err(HeError::Mismatch("ciphertext size is not 2 or 3"));
        }
        if ct
            .polys
            .iter()
            .any(|p| p.degree() != self.n || p.rows() != ct.level)
        {
            return Err(HeError::Mismatch("ciphertext of other parameters"));
        }
        Ok(())
    }

    /// Checks that `pt` belongs to this context.
    pub(crate) fn check_ntt_pt(&self, pt: &crate::encoder::NttPlaintext) -> Result<()> {
        self.level_data(pt.level)?;
        if pt.poly.degree() != self.n || pt.poly.rows() != pt.level {
            return Err(HeError::Mismatch("plaintext of other parameters"));
        }
        Ok(())
    }

    /// Checks that `pt` belongs to this context (N coefficients, each below t).
    pub(crate) fn check_pt(&self, pt: &crate::encoder::Plaintext) -> Result<()> {
        if pt.coeffs.len() != self.n || pt.coeffs.iter().any(|&c| c >= self.t.value()) {
            return Err(HeError::Mismatch("plaintext of other parameters"));
        }
        Ok(())
    }

    /// log2 Q_ℓ as the bit size of the product.
    pub fn level_bits(&self, level: usize) -> u32 {
        self.level_data(level).map_or(0, |l| big::bits(&l.q_big))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::PlainModulus;

    #[test]
    fn delta_is_floor_q_over_t() {
        let p = Parameters::new(4096, PlainModulus::Value(40961), &[40, 32, 32]).unwrap();
        let ctx = Context::new(&p).unwrap();
        assert_eq!(ctx.top_level(), 2);
        let l = ctx.level_data(2).unwrap();
        let (q0, q1) = (
            u128::from(p.coeff_modulus()[0]),
            u128::from(p.coeff_modulus()[1]),
        );
        let q = q0 * q1;
        let delta = q / 40961;
        assert_eq!(u128::from(l.delta[0]), delta % q0);
        assert_eq!(u128::from(l.delta[1]), delta % q1);
        assert_eq!(u128::from(l.q_mod_t), q % 40961);
        assert_eq!(ctx.level_bits(2), 72);
        // P covers t·N·Q with margin.
        let p_bits: u32 = l.mul.p.iter().map(|m| m.bits()).sum();
        assert!(p_bits >= 72 + 16 + 12 + 2);
        assert!(ctx.level_data(3).is_err() && ctx.level_data(0).is_err());
    }
}
