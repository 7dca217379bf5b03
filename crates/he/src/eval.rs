//! Homomorphic evaluation: additions, ct×pt and its multiply-accumulate, ct×ct, relinearization
//! and modulus switching.
//!
//! * **ct×ct** follows Halevi–Polyakov–Shoup (eprint 2018/117, §4, "Multiplication"): both
//!   ciphertexts are extended exactly from Q to Q∪P (P an auxiliary basis with P > t·N·Q), the
//!   tensor (c0c0', c0c1' + c1c0', c1c1') is taken in NTT form in every prime of Q∪P, scaled
//!   by t/Q with rounding straight into the basis P, and brought back to Q by one more exact
//!   extension. We chose HPS over BEHZ (Bajard et al., 2016/510) because its steps are exact
//!   (the lift is the centered one, the rounding is a true rounding) so the noise is FV's own
//!   and there is no Montgomery correction or Shenoy–Kumaresan extra modulus to carry; the
//!   price, floating point in the extensions, we bound in [`crate::rns`] (and replace it by
//!   128-bit fixed point in the scaling, where a double would not be precise enough).
//! * **Relinearization**: key switching of c2 with the RNS digits \[c2\]_{q_i} against
//!   [`RelinKeys`], in Q·P_special, then division by the special prime with rounding.
//! * **Modulus switching** (for BFV it is a rescaling of the whole ciphertext by q_last^{-1}):
//!   c ↦ round(c / q_last) in the remaining primes. Δ_Q/q_last = Δ_{Q'} up to the rounding, and
//!   the noise becomes v/q_last + (1 + ‖s‖₁)/2, so it shrinks the ciphertext at little cost to
//!   the budget once the noise exceeds about N bits: APSI switches its responses to the last
//!   data level before sending them.
//! * **ct×pt multiply-accumulate** Σ_j pt_j ⊙ ct_j in NTT form, the hot loop of APSI's sender:
//!   products of residues < 2^62 are < 2^124, so up to 15 of them are summed in 128 bits
//!   before one Barrett reduction; for primes below 2^50 on a CPU with AVX-512 IFMA, eight
//!   coefficients at a time in [`crate::mac_ifma`]. The tensors of ct×ct use the same sums.

use crate::cipher::{Ciphertext, add_scaled_plain};
use crate::context::Context;
use crate::encoder::{NttPlaintext, Plaintext};
use crate::error::{HeError, Result};
use crate::keys::RelinKeys;
use crate::mac_ifma;
use crate::modarith::Modulus;
use crate::ntt::NttTables;
use crate::poly::RnsPoly;
use crate::rns::{divide_round_last, round_frac_sum};

/// Products summed in 128 bits before a reduction: 15·(2^62)² < 2^128.
const LAZY_TERMS: usize = 15;

fn same_shape(ctx: &Context, a: &Ciphertext, b: &Ciphertext) -> Result<()> {
    ctx.check_ct(a)?;
    ctx.check_ct(b)?;
    if a.level != b.level {
        return Err(HeError::Mismatch("ciphertexts at different levels"));
    }
    if a.ntt_form != b.ntt_form {
        return Err(HeError::Mismatch("one ciphertext in NTT form, one not"));
    }
    Ok(())
}

/// a + b (sizes may differ: the longer one's extra polynomials are kept).
///
/// # Errors
/// [`HeError::Mismatch`] on different levels or forms.
pub fn add(ctx: &Context, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
    same_shape(ctx, a, b)?;
    let moduli = ctx.level_moduli(a.level);
    let (long, short) = if a.size() >= b.size() { (a, b) } else { (b, a) };
    let mut out = long.clone();
    for (x, y) in out.polys.iter_mut().zip(&short.polys) {
        x.add_assign(y, moduli);
    }
    Ok(out)
}

/// a − b.
///
/// # Errors
/// [`HeError::Mismatch`] on different levels or forms.
pub fn sub(ctx: &Context, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
    let nb = negate(ctx, b)?;
    add(ctx, a, &nb)
}

/// −a.
///
/// # Errors
/// [`HeError::Mismatch`] for a ciphertext of other parameters.
pub fn negate(ctx: &Context, a: &Ciphertext) -> Result<Ciphertext> {
    ctx.check_ct(a)?;
    let mut out = a.clone();
    let moduli = ctx.level_moduli(a.level);
    for p in out.polys.iter_mut() {
        p.neg_assign(moduli);
    }
    Ok(out)
}

/// ct + pt (ct in coefficient form).
///
/// # Errors
/// [`HeError::Mismatch`] if `ct` is in NTT form or empty.
pub fn add_plain(ctx: &Context, ct: &Ciphertext, pt: &Plaintext) -> Result<Ciphertext> {
    ctx.check_ct(ct)?;
    ctx.check_pt(pt)?;
    if ct.ntt_form {
        return Err(HeError::Mismatch("add_plain needs coefficient form"));
    }
    let mut out = ct.clone();
    let c0 = out
        .polys
        .first_mut()
        .ok_or(HeError::Mismatch("empty ciphertext"))?;
    add_scaled_plain(ctx, ct.level, c0, pt)?;
    Ok(out)
}

/// Puts `ct` in NTT form (no-op if it is).
///
/// # Errors
/// [`HeError::Mismatch`] for a ciphertext of other parameters.
pub fn to_ntt(ctx: &Context, ct: &mut Ciphertext) -> Result<()> {
    ctx.check_ct(ct)?;
    if !ct.ntt_form {
        let tables = ctx.level_tables(ct.level);
        ct.polys.iter_mut().for_each(|p| p.ntt(tables));
        ct.ntt_form = true;
    }
    Ok(())
}

/// Puts `ct` in coefficient form (no-op if it is).
///
/// # Errors
/// [`HeError::Mismatch`] for a ciphertext of other parameters.
pub fn from_ntt(ctx: &Context, ct: &mut Ciphertext) -> Result<()> {
    ctx.check_ct(ct)?;
    if ct.ntt_form {
        let tables = ctx.level_tables(ct.level);
        ct.polys.iter_mut().for_each(|p| p.intt(tables));
        ct.ntt_form = false;
    }
    Ok(())
}

/// ct × pt, both in NTT form at the same level; the result is in NTT form.
///
/// # Errors
/// [`HeError::Mismatch`] on a level or form mismatch.
pub fn multiply_plain(ctx: &Context, ct: &Ciphertext, pt: &NttPlaintext) -> Result<Ciphertext> {
    multiply_plain_accumulate(ctx, &[(ct, pt)])
}

/// Σ_j ct_j × pt_j, all in NTT form at one level, with lazy reduction; the result is in NTT form.
///
/// # Errors
/// [`HeError::Mismatch`] on an empty list or a level, size or form mismatch.
pub fn multiply_plain_accumulate(
    ctx: &Context,
    terms: &[(&Ciphertext, &NttPlaintext)],
) -> Result<Ciphertext> {
    let (first, _) = terms.first().ok_or(HeError::Mismatch("no terms"))?;
    let (level, size) = (first.level, first.size());
    ctx.level_data(level)?;
    for (ct, pt) in terms {
        ctx.check_ct(ct)?;
        ctx.check_ntt_pt(pt)?;
        if ct.level != level || pt.level != level {
            return Err(HeError::Mismatch("terms at different levels"));
        }
        if !ct.ntt_form {
            return Err(HeError::Mismatch("ct×pt needs the ciphertext in NTT form"));
        }
        if ct.size() != size {
            return Err(HeError::Mismatch("ciphertexts of different sizes"));
        }
    }
    let n = ctx.n;
    let moduli = ctx.level_moduli(level);
    let mut polys = vec![RnsPoly::zero(n, level); size];
    for (k, out) in polys.iter_mut().enumerate() {
        for (i, m) in moduli.iter().enumerate() {
            let xs: Vec<&[u64]> = terms.iter().map(|(ct, _)| ct.polys[k].row(i)).collect();
            let ys: Vec<&[u64]> = terms.iter().map(|(_, pt)| pt.poly.row(i)).collect();
            multiply_accumulate_row(m, out.row_mut(i), &xs, &ys);
        }
    }
    Ok(Ciphertext {
        level,
        ntt_form: true,
        polys,
    })
}

/// `out = Σ_j xs[j] ⊙ ys[j]` mod m, rows of one length with residues below m: with IFMA when
/// the prime allows ([`mac_ifma`]), else in 128 bits with one reduction every [`LAZY_TERMS`]
/// products, in blocks of coefficients so the accumulators stay in the L1 cache while every
/// term streams through them. Both give the canonical residues.
fn multiply_accumulate_row(m: &Modulus, out: &mut [u64], xs: &[&[u64]], ys: &[&[u64]]) {
    if mac_ifma::multiply_accumulate(m, out, xs, ys) {
        return;
    }
    const BLOCK: usize = 256;
    let mut acc = [0u128; BLOCK];
    for (b, o_block) in out.chunks_mut(BLOCK).enumerate() {
        let (lo, w) = (b * BLOCK, o_block.len());
        let acc = &mut acc[..w];
        acc.iter_mut().for_each(|a| *a = 0);
        for (j, (x, y)) in xs.iter().zip(ys).enumerate() {
            let (x, y) = (&x[lo..lo + w], &y[lo..lo + w]);
            for ((a, &x), &y) in acc.iter_mut().zip(x).zip(y) {
                *a += u128::from(x) * u128::from(y);
            }
            if (j + 1) % LAZY_TERMS == 0 {
                acc.iter_mut()
                    .for_each(|a| *a = u128::from(m.reduce_u128(*a)));
            }
        }
        for (o, &a) in o_block.iter_mut().zip(acc.iter()) {
            *o = m.reduce_u128(a);
        }
    }
}

/// The P rows of coefficient-form `poly` (its first `level` rows, of Q), in NTT form: the exact
/// base extension to P, then a forward NTT per auxiliary prime.
fn p_rows_ntt(ctx: &Context, level: usize, poly: &RnsPoly) -> Result<RnsPoly> {
    let mt = &ctx.level_data(level)?.mul;
    let mut rows = RnsPoly::zero(ctx.n, mt.p.len());
    {
        let input: Vec<&[u64]> = (0..level).map(|i| poly.row(i)).collect();
        mt.q_to_p.convert(&input, &mut rows.rows_mut());
    }
    for (i, t) in mt.p_ntt.iter().enumerate() {
        t.forward(rows.row_mut(i));
    }
    Ok(rows)
}

/// What [`extend`] (`ntt` false) and [`extend_ntt`] (`ntt` true) require of a ciphertext.
fn check_extendable(ctx: &Context, ct: &Ciphertext, ntt: bool) -> Result<()> {
    ctx.check_ct(ct)?;
    if ct.ntt_form != ntt {
        return Err(HeError::Mismatch(if ntt {
            "extend_ntt needs NTT form"
        } else {
            "ct×ct needs coefficient form"
        }));
    }
    if ct.size() != 2 {
        return Err(HeError::Mismatch("ct×ct needs ciphertexts of size 2"));
    }
    if ct.level > 14 {
        return Err(HeError::Unsupported("more than 14 primes in a level"));
    }
    Ok(())
}

fn qp_tables(ctx: &Context, level: usize) -> Result<Vec<&NttTables>> {
    let mt = &ctx.level_data(level)?.mul;
    Ok(ctx.level_tables(level).iter().chain(&mt.p_ntt).collect())
}

fn qp_moduli(ctx: &Context, level: usize) -> Result<Vec<Modulus>> {
    let mt = &ctx.level_data(level)?.mul;
    Ok(ctx
        .level_moduli(level)
        .iter()
        .chain(&mt.p)
        .copied()
        .collect())
}

/// round(t/Q · d) back in Q, for a tensor component `d` in NTT form over Q∪P.
fn scale_down(ctx: &Context, level: usize, mut d: RnsPoly) -> Result<RnsPoly> {
    let lv = ctx.level_data(level)?;
    let mt = &lv.mul;
    for (i, t) in qp_tables(ctx, level)?.iter().enumerate() {
        t.inverse(d.row_mut(i));
    }
    let mut out = RnsPoly::zero(ctx.n, level);
    let mut rows = d.rows_mut();
    let (q_rows, p_rows) = rows.split_at_mut(level);
    // The P rows are overwritten in place: coefficient c of the result needs only
    // coefficient c of d.
    for c in 0..ctx.n {
        let r = round_frac_sum(q_rows.iter().zip(&mt.theta).map(|(row, &th)| (row[c], th)));
        for (j, (pj, prow)) in mt.p.iter().zip(p_rows.iter_mut()).enumerate() {
            let mut acc = r + u128::from(prow[c]) * u128::from(mt.t_q_inv[j]);
            // ℓ ≤ 14 terms of < 2^124 each, plus the two above: no overflow.
            for (row, &w) in q_rows.iter().zip(&mt.omega[j]) {
                acc += u128::from(row[c]) * u128::from(w);
            }
            prow[c] = pj.reduce_u128(acc);
        }
    }
    let input: Vec<&[u64]> = p_rows.iter().map(|r| &**r).collect();
    mt.p_to_q.convert(&input, &mut out.rows_mut());
    Ok(out)
}

/// A size-2 ciphertext extended to Q∪P and in NTT form: an operand of ct×ct ready for any
/// number of products ([`multiply_extended`]), so a value multiplied several times (a power in
/// APSI's powers DAG) is extended once. Its Q rows are the ciphertext's NTT form
/// ([`ExtendedCiphertext::ntt`], for ct×pt), so no other copy is needed.
#[derive(Clone, Debug)]
pub struct ExtendedCiphertext {
    /// The ciphertext in NTT form (the Q rows).
    q: Ciphertext,
    /// The P rows of c0 and c1, in NTT form.
    p: [RnsPoly; 2],
}

impl ExtendedCiphertext {
    /// The ciphertext in NTT form.
    pub fn ntt(&self) -> &Ciphertext {
        &self.q
    }

    /// Row `r` of Q∪P of polynomial `k`.
    fn row(&self, k: usize, r: usize) -> &[u64] {
        let level = self.q.level;
        if r < level {
            self.q.polys[k].row(r)
        } else {
            self.p[k].row(r - level)
        }
    }
}

/// Extends `ct` (size 2, coefficient form) to Q∪P in NTT form (see [`ExtendedCiphertext`]).
///
/// # Errors
/// [`HeError::Mismatch`] for another size or form, or a ciphertext of other parameters.
pub fn extend(ctx: &Context, ct: &Ciphertext) -> Result<ExtendedCiphertext> {
    check_extendable(ctx, ct, false)?;
    let p = [
        p_rows_ntt(ctx, ct.level, &ct.polys[0])?,
        p_rows_ntt(ctx, ct.level, &ct.polys[1])?,
    ];
    let mut q = ct.clone();
    to_ntt(ctx, &mut q)?;
    Ok(ExtendedCiphertext { q, p })
}

/// [`extend`] of a ciphertext given in NTT form (size 2): the same extension, with its Q rows
/// taken as they are instead of transformed back; only the P rows are made (from the
/// coefficient form, which the exact base extension needs). Saves the Q rows' forward NTTs
/// when the value comes out of a ct×pt sum, as APSI's inner sums do.
///
/// # Errors
/// [`HeError::Mismatch`] for another size or form, or a ciphertext of other parameters.
pub fn extend_ntt(ctx: &Context, ct: Ciphertext) -> Result<ExtendedCiphertext> {
    check_extendable(ctx, &ct, true)?;
    let mut coeff = ct.clone();
    from_ntt(ctx, &mut coeff)?;
    let p = [
        p_rows_ntt(ctx, ct.level, &coeff.polys[0])?,
        p_rows_ntt(ctx, ct.level, &coeff.polys[1])?,
    ];
    Ok(ExtendedCiphertext { q: ct, p })
}

/// a × b from their extensions (same level): a size-3 ciphertext in coefficient form, to be
/// relinearized; the same result as [`multiply`] of the ciphertexts.
///
/// # Errors
/// [`HeError::Mismatch`] on a level mismatch or extensions of other parameters.
pub fn multiply_extended(
    ctx: &Context,
    a: &ExtendedCiphertext,
    b: &ExtendedCiphertext,
) -> Result<Ciphertext> {
    multiply_extended_sum(ctx, &[(a, b)])
}

/// Σ_j a_j × b_j from extensions at one level: a size-3 ciphertext in coefficient form, to be
/// relinearized. The tensors are summed in Q∪P and scaled down once (by up to the level's
/// `sum_terms` at a time, which [`Context`] derives from the room its auxiliary basis leaves),
/// instead of once a product: the scale-down (inverse NTTs of every Q∪P row, the rounding and
/// the base extension back) is most of a product's cost. Rounding once also adds less noise
/// than rounding each product. One pair gives exactly [`multiply_extended`]'s result.
///
/// # Errors
/// [`HeError::Mismatch`] on no pairs, a level mismatch or extensions of other parameters.
pub fn multiply_extended_sum(
    ctx: &Context,
    pairs: &[(&ExtendedCiphertext, &ExtendedCiphertext)],
) -> Result<Ciphertext> {
    let (first, _) = pairs.first().ok_or(HeError::Mismatch("no products"))?;
    let level = first.q.level;
    let moduli = qp_moduli(ctx, level)?;
    let n = ctx.n;
    for x in pairs.iter().flat_map(|(a, b)| [*a, *b]) {
        if x.q.level != level {
            return Err(HeError::Mismatch("ciphertexts at different levels"));
        }
        ctx.check_ct(&x.q)?;
        if x.p
            .iter()
            .any(|p| p.degree() != n || p.rows() + level != moduli.len())
        {
            return Err(HeError::Mismatch("extended ciphertext of other parameters"));
        }
    }
    let batch = ctx.level_data(level)?.mul.sum_terms.max(1);
    let mut out: Option<Ciphertext> = None;
    for group in pairs.chunks(batch) {
        let part = scaled_tensor_sum(ctx, level, &moduli, group)?;
        out = Some(match out {
            None => part,
            Some(acc) => add(ctx, &acc, &part)?,
        });
    }
    out.ok_or(HeError::Mismatch("no products"))
}

/// round(t/Q · Σ tensors) in Q for pairs already checked, at most `sum_terms` of them.
fn scaled_tensor_sum(
    ctx: &Context,
    level: usize,
    moduli: &[Modulus],
    pairs: &[(&ExtendedCiphertext, &ExtendedCiphertext)],
) -> Result<Ciphertext> {
    let rows = moduli.len();
    let n = ctx.n;
    let (mut d0, mut d1, mut d2) = (
        RnsPoly::zero(n, rows),
        RnsPoly::zero(n, rows),
        RnsPoly::zero(n, rows),
    );
    for (r, m) in moduli.iter().enumerate() {
        let a0: Vec<&[u64]> = pairs.iter().map(|(a, _)| a.row(0, r)).collect();
        let a1: Vec<&[u64]> = pairs.iter().map(|(a, _)| a.row(1, r)).collect();
        let b0: Vec<&[u64]> = pairs.iter().map(|(_, b)| b.row(0, r)).collect();
        let b1: Vec<&[u64]> = pairs.iter().map(|(_, b)| b.row(1, r)).collect();
        multiply_accumulate_row(m, d0.row_mut(r), &a0, &b0);
        let (a01, b10) = ([&a0[..], &a1[..]].concat(), [&b1[..], &b0[..]].concat());
        multiply_accumulate_row(m, d1.row_mut(r), &a01, &b10);
        multiply_accumulate_row(m, d2.row_mut(r), &a1, &b1);
    }
    Ok(Ciphertext {
        level,
        ntt_form: false,
        polys: vec![
            scale_down(ctx, level, d0)?,
            scale_down(ctx, level, d1)?,
            scale_down(ctx, level, d2)?,
        ],
    })
}

/// a × b (both of size 2, coefficient form, same level): a size-3 ciphertext in coefficient
/// form, to be relinearized.
///
/// # Errors
/// [`HeError::Mismatch`] on a level, size or form mismatch.
pub fn multiply(ctx: &Context, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
    same_shape(ctx, a, b)?;
    let ea = extend(ctx, a)?;
    if std::ptr::eq(a, b) {
        multiply_extended(ctx, &ea, &ea)
    } else {
        multiply_extended(ctx, &ea, &extend(ctx, b)?)
    }
}

/// a² (a cheaper [`multiply`] of a by itself).
///
/// # Errors
/// As [`multiply`].
pub fn square(ctx: &Context, a: &Ciphertext) -> Result<Ciphertext> {
    multiply(ctx, a, a)
}

/// Relinearizes a size-3 ciphertext (coefficient form) to size 2.
///
/// # Errors
/// [`HeError::Mismatch`] on a wrong size or form or keys of other parameters;
/// [`HeError::Unsupported`] without a special prime.
pub fn relinearize(ctx: &Context, ct: &Ciphertext, rk: &RelinKeys) -> Result<Ciphertext> {
    let Some((sp, inv_sp)) = &ctx.special else {
        return Err(HeError::Unsupported(
            "relinearization needs a special prime",
        ));
    };
    if ct.size() != 3 {
        return Err(HeError::Mismatch("relinearization needs size 3"));
    }
    if ct.ntt_form {
        return Err(HeError::Mismatch("relinearization needs coefficient form"));
    }
    ctx.check_ct(ct)?;
    let level = ct.level;
    if rk.keys.len() != *sp
        || rk.keys.iter().any(|(b, a)| {
            b.rows() != sp + 1 || a.rows() != sp + 1 || b.degree() != ctx.n || a.degree() != ctx.n
        })
    {
        return Err(HeError::Mismatch(
            "relinearization keys of other parameters",
        ));
    }
    let n = ctx.n;
    // Rows of the key-switching basis: the level's primes, then the special prime.
    let idx: Vec<usize> = (0..level).chain(std::iter::once(*sp)).collect();
    let moduli: Vec<Modulus> = idx.iter().map(|&r| ctx.q[r]).collect();
    let mut acc0 = RnsPoly::zero(n, idx.len());
    let mut acc1 = RnsPoly::zero(n, idx.len());
    let c2 = &ct.polys[2];
    let mut tmp = vec![0u64; n];
    // Per target prime, the digit products are summed in 128 bits and reduced once every
    // LAZY_TERMS digits (each product < 2^124).
    let (mut wide0, mut wide1) = (vec![0u128; n], vec![0u128; n]);
    for (r, &row) in idx.iter().enumerate() {
        let m = &moduli[r];
        wide0.iter_mut().for_each(|x| *x = 0);
        wide1.iter_mut().for_each(|x| *x = 0);
        for (i, (kb, ka)) in rk.keys.iter().enumerate().take(level) {
            for (x, &d) in tmp.iter_mut().zip(c2.row(i)) {
                *x = m.reduce(d);
            }
            ctx.q_ntt[row].forward(&mut tmp);
            for (((w0, w1), &x), (&b, &a)) in wide0
                .iter_mut()
                .zip(wide1.iter_mut())
                .zip(&tmp)
                .zip(kb.row(row).iter().zip(ka.row(row)))
            {
                *w0 += u128::from(x) * u128::from(b);
                *w1 += u128::from(x) * u128::from(a);
            }
            if (i + 1) % LAZY_TERMS == 0 {
                for w in wide0.iter_mut().chain(wide1.iter_mut()) {
                    *w = u128::from(m.reduce_u128(*w));
                }
            }
        }
        for (o, &w) in acc0.row_mut(r).iter_mut().zip(&wide0) {
            *o = m.reduce_u128(w);
        }
        for (o, &w) in acc1.row_mut(r).iter_mut().zip(&wide1) {
            *o = m.reduce_u128(w);
        }
    }
    let mut out = Ciphertext {
        level,
        ntt_form: false,
        polys: vec![ct.polys[0].clone(), ct.polys[1].clone()],
    };
    for (acc, dst) in [acc0, acc1].iter_mut().zip(out.polys.iter_mut()) {
        for (r, &row) in idx.iter().enumerate() {
            ctx.q_ntt[row].inverse(acc.row_mut(r));
        }
        {
            let mut rows: Vec<&mut [u64]> = acc_rows(acc, n);
            divide_round_last(&mut rows, &moduli[..level], &ctx.q[*sp], &inv_sp[..level]);
        }
        acc.truncate_rows(level);
        dst.add_assign(acc, &moduli[..level]);
    }
    Ok(out)
}

fn acc_rows(p: &mut RnsPoly, n: usize) -> Vec<&mut [u64]> {
    let rows = p.rows();
    let mut out = Vec::with_capacity(rows);
    let mut rest: &mut [u64] = p.data_mut();
    for _ in 0..rows {
        let (head, tail) = rest.split_at_mut(n);
        out.push(head);
        rest = tail;
    }
    out
}

/// Drops the last prime of `ct`'s level with rounding (any size, either form).
///
/// # Errors
/// [`HeError::Unsupported`] at level 1.
pub fn mod_switch_to_next(ctx: &Context, ct: &Ciphertext) -> Result<Ciphertext> {
    ctx.check_ct(ct)?;
    let level = ct.level;
    let lv = ctx.level_data(level)?;
    if level < 2 {
        return Err(HeError::Unsupported("no lower level to switch to"));
    }
    let was_ntt = ct.ntt_form;
    let mut out = ct.clone();
    from_ntt(ctx, &mut out)?;
    let n = ctx.n;
    let moduli = ctx.level_moduli(level);
    for p in out.polys.iter_mut() {
        {
            let mut rows = acc_rows(p, n);
            divide_round_last(
                &mut rows,
                &moduli[..level - 1],
                &moduli[level - 1],
                &lv.inv_last,
            );
        }
        p.truncate_rows(level - 1);
    }
    out.level = level - 1;
    if was_ntt {
        to_ntt(ctx, &mut out)?;
    }
    Ok(out)
}

/// Switches `ct` down to data level `level` (≤ its own).
///
/// # Errors
/// [`HeError::Mismatch`] if `level` is 0 or above the ciphertext's.
pub fn mod_switch_to(ctx: &Context, ct: &Ciphertext, level: usize) -> Result<Ciphertext> {
    if level == 0 || level > ct.level {
        return Err(HeError::Mismatch("target level not below the ciphertext's"));
    }
    let mut out = ct.clone();
    while out.level > level {
        out = mod_switch_to_next(ctx, &out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{Parameters, PlainModulus};

    /// HPS's scale step against exact integer arithmetic: for signed d with |d| < 2^110 given
    /// by its residues in Q ∪ P, the result mod each q_i is round(t·d/Q) (ties cannot occur for
    /// these d, as Q is odd and t·d/Q is never a half-integer).
    #[test]
    fn scale_down_is_the_exact_rounding_of_t_d_over_q() {
        for aux_bits in [50, 61] {
            scale_down_exact(aux_bits);
        }
    }

    fn scale_down_exact(aux_bits: u32) {
        let params = Parameters::new(4096, PlainModulus::Value(40961), &[40, 32, 32]).unwrap();
        let ctx = Context::with_aux_bits(&params, aux_bits).unwrap();
        let level = 2;
        let moduli = qp_moduli(&ctx, level).unwrap();
        let tables = qp_tables(&ctx, level).unwrap();
        let q: i128 = params.coeff_modulus()[..2]
            .iter()
            .map(|&x| i128::from(x))
            .product();
        let t = 40961i128;
        let n = ctx.degree();
        let mut state = 9u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state
        };
        let mut ds: Vec<i128> = (0..n)
            .map(|i| {
                let mag = ((i128::from(next()) << 64) | i128::from(next())) >> (18 + i % 100);
                if next() & 1 == 1 { -mag } else { mag }
            })
            .collect();
        ds[0] = 0;
        ds[1] = 1;
        ds[2] = -1;
        ds[3] = (1i128 << 110) - 1;
        ds[4] = -(1i128 << 110) + 1;
        ds[5] = q / 2;
        let mut d = RnsPoly::zero(n, moduli.len());
        for (i, m) in moduli.iter().enumerate() {
            for (x, &v) in d.row_mut(i).iter_mut().zip(&ds) {
                *x = v.rem_euclid(i128::from(m.value())) as u64;
            }
            tables[i].forward(d.row_mut(i));
        }
        let out = scale_down(&ctx, level, d).unwrap();
        for (c, &v) in ds.iter().enumerate() {
            let want = (2 * t * v + q).div_euclid(2 * q);
            for (i, m) in ctx.level_moduli(level).iter().enumerate() {
                assert_eq!(
                    i128::from(out.row(i)[c]),
                    want.rem_euclid(i128::from(m.value())),
                    "d = {v}, {aux_bits}-bit P"
                );
            }
        }
    }
}

#[cfg(test)]
mod aux_tests {
    use super::*;
    use crate::cipher::{decrypt, encrypt};
    use crate::params::{Parameters, PlainModulus};
    use crate::{BatchEncoder, SecretKey};

    /// ct×ct+relin decrypts right with either size of auxiliary primes (the one not chosen for
    /// this CPU is otherwise untested here).
    #[test]
    fn multiplication_with_50_and_61_bit_auxiliary_primes() {
        let params = Parameters::new(8192, PlainModulus::Value(65537), &[56, 48, 48]).unwrap();
        for aux_bits in [50, 61] {
            let ctx = Context::with_aux_bits(&params, aux_bits).unwrap();
            let sk = SecretKey::generate(&ctx).unwrap();
            let rk = RelinKeys::generate(&ctx, &sk).unwrap();
            let e = BatchEncoder::new(&ctx);
            let x: Vec<u64> = (0..8192u64).map(|i| (i * i + 7) % 65537).collect();
            let y: Vec<u64> = (0..8192u64).map(|i| (65536 - i * 3) % 65537).collect();
            let cx = encrypt(&ctx, &sk, &e.encode(&x).unwrap()).unwrap();
            let cy = encrypt(&ctx, &sk, &e.encode(&y).unwrap()).unwrap();
            let p = relinearize(&ctx, &multiply(&ctx, &cx, &cy).unwrap(), &rk).unwrap();
            let want: Vec<u64> = x.iter().zip(&y).map(|(a, b)| a * b % 65537).collect();
            assert_eq!(
                e.decode(&decrypt(&ctx, &sk, &p).unwrap()),
                want,
                "{aux_bits}-bit P"
            );
        }
    }
}

#[cfg(test)]
mod sum_tests {
    use super::*;
    use crate::cipher::{decrypt, encrypt};
    use crate::params::{Parameters, PlainModulus};
    use crate::rns::big;
    use crate::{BatchEncoder, SecretKey};

    /// At every level of SecretFlow's three shapes, the auxiliary basis holds `sum_terms` tensors
    /// with the scale-down's margin: k·4·t·N·Q ≤ P, checked on the actual primes.
    #[test]
    fn sum_terms_keeps_the_scale_down_margin() {
        for (n, t, bits) in [
            (4096, PlainModulus::Value(40961), vec![40, 32, 32]),
            (8192, PlainModulus::Value(65537), vec![56, 48, 48]),
            (8192, PlainModulus::Bits(21), vec![56, 56, 56, 50]),
            (8192, PlainModulus::Bits(22), vec![56, 56, 56, 32]),
        ] {
            let params = Parameters::new(n, t, &bits).unwrap();
            let ctx = Context::new(&params).unwrap();
            for level in 1..=ctx.top_level() {
                let mt = &ctx.level_data(level).unwrap().mul;
                let k = mt.sum_terms;
                assert!(k.is_power_of_two() && k >= 2, "{bits:?} level {level}: {k}");
                let p: Vec<u64> = mt.p.iter().map(|m| m.value()).collect();
                let q: Vec<u64> = ctx.level_moduli(level).iter().map(|m| m.value()).collect();
                let p_bits = big::bits(&big::product(&p));
                let q_bits = big::bits(&big::product(&q));
                let t_bits = 64 - ctx.plain_modulus().leading_zeros();
                // P ≥ 2^(p_bits − 1) and k·4·t·N·Q < 2^(log k + 2 + t_bits + log N + q_bits).
                assert!(
                    p_bits > k.trailing_zeros() + 2 + t_bits + n.trailing_zeros() + q_bits,
                    "{bits:?} level {level}: {k} tensors"
                );
            }
        }
    }

    /// Σ x_j·y_j over 5 products decrypts right, scaled at once or (a basis with room for
    /// only 2 tensors) in groups; one pair is `multiply_extended` bit for bit.
    #[test]
    fn a_sum_of_products_decrypts_to_the_sum() {
        let params = Parameters::new(4096, PlainModulus::Value(40961), &[40, 32, 32]).unwrap();
        let ctx = Context::new(&params).unwrap();
        let sk = SecretKey::generate(&ctx).unwrap();
        let rk = RelinKeys::generate(&ctx, &sk).unwrap();
        let e = BatchEncoder::new(&ctx);
        let t = 40961u64;
        let slots = |seed: u64| -> Vec<u64> {
            (0..4096u64).map(|i| (i * seed + seed * seed) % t).collect()
        };
        let xs: Vec<Vec<u64>> = (1..=5).map(slots).collect();
        let ys: Vec<Vec<u64>> = (11..=15).map(slots).collect();
        let ext = |ctx: &Context, v: &[u64]| {
            extend(ctx, &encrypt(ctx, &sk, &e.encode(v).unwrap()).unwrap()).unwrap()
        };
        let want: Vec<u64> = (0..4096)
            .map(|c| {
                xs.iter()
                    .zip(&ys)
                    .map(|(x, y)| x[c] * y[c] % t)
                    .sum::<u64>()
                    % t
            })
            .collect();
        let ex: Vec<_> = xs.iter().map(|v| ext(&ctx, v)).collect();
        let ey: Vec<_> = ys.iter().map(|v| ext(&ctx, v)).collect();
        let pairs: Vec<_> = ex.iter().zip(&ey).collect();
        for room in [None, Some(2)] {
            // The same primes, with room for `room` tensors a scale-down.
            let mut c2 = Context::new(&params).unwrap();
            if let Some(k) = room {
                let level = c2.top_level();
                c2.levels[level - 1].mul.sum_terms = k;
            }
            let sum = multiply_extended_sum(&c2, &pairs).unwrap();
            let got =
                e.decode(&decrypt(&ctx, &sk, &relinearize(&ctx, &sum, &rk).unwrap()).unwrap());
            assert_eq!(got, want, "room {room:?}");
            let one = multiply_extended_sum(&c2, &pairs[..1]).unwrap();
            assert_eq!(one, multiply_extended(&ctx, &ex[0], &ey[0]).unwrap());
        }
        assert!(multiply_extended_sum(&ctx, &[]).is_err());
        // An NTT-form ciphertext extends to exactly what its coefficient form does.
        let ct = encrypt(&ctx, &sk, &e.encode(&xs[0]).unwrap()).unwrap();
        let mut nt = ct.clone();
        to_ntt(&ctx, &mut nt).unwrap();
        let (a, b) = (extend(&ctx, &ct).unwrap(), extend_ntt(&ctx, nt).unwrap());
        assert_eq!((a.q, a.p), (b.q, b.p));
        assert!(extend_ntt(&ctx, ct).is_err());
    }
}
