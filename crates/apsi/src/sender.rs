//! The sender's online phase: answer the OPRF, compute every power the evaluation needs from
//! the receiver's source powers ([`PowersDag`], the products of one depth in parallel), then per
//! bundle evaluate the matching and label polynomials by one [`SplitPlan`], switch each result
//! to the last data level and send it. Bundles are evaluated a batch of 2× the thread count at
//! a time and sent in order, so the receiver decrypts while the sender computes.
//!
//! The plan is the parameters' Paterson–Stockmeyer when ps_low_degree L > 0 (CMDGJLTW21 §4.3,
//! H = L + 1: Σ_d c_d y^d = Σ_j c_{jH} y^{jH} + Σ_{i ≤ L} c_i y^i + Σ_{j ≥ 1} y^{jH}·Σ_{i=1..L}
//! c_{jH+i} y^i), else the sender's own split into powers of depth ≤ 1 when it is cheaper, else
//! the plain sum Σ c_d·y^d over every power. In each, the products y^b·(inner sum) have their
//! tensors summed and scaled down together ([`eval::multiply_extended_sum`]) and are
//! relinearized once.

use crate::error::{ApsiError, Result, peer};
use crate::powers::{Node, PowersDag};
use crate::sender_db::{Coeffs, SenderDb};
use crate::split_plan::SplitPlan;
use crate::wire::{self, BundleResult};
use blindjoin_crypto::oprf::POINT_LEN;
use blindjoin_he::eval::{self, ExtendedCiphertext};
use blindjoin_he::{Ciphertext, Context, RelinKeys};
use blindjoin_link::Link;
use rayon::prelude::*;

/// A computed power of the query, in the forms its uses need. Every power is a ct×pt operand
/// (its NTT form); a power that is also a ct×ct operand — a factor of a later power, or a
/// Paterson–Stockmeyer high power — is kept extended to Q∪P, whose Q rows are that NTT form.
/// Extending the rest would be wasted: at 1M-1-32 only 36 of the 220 products' results are
/// factors of others, and skipping the extension saves about 15 % of each other product
/// (2.8 → 2.4 ms at N = 8192, `cargo bench -p blindjoin-he --bench bfv -- 8192`).
pub(crate) enum Power {
    /// Extended to Q∪P (a ct×ct operand).
    Extended(ExtendedCiphertext),
    /// In NTT form only (a ct×pt operand).
    Ntt(Ciphertext),
}

impl Power {
    fn make(ctx: &Context, coeff: Ciphertext, extend: bool) -> Result<Self> {
        Ok(if extend {
            Power::Extended(eval::extend(ctx, &coeff)?)
        } else {
            let mut ct = coeff;
            eval::to_ntt(ctx, &mut ct)?;
            Power::Ntt(ct)
        })
    }

    fn ntt(&self) -> &Ciphertext {
        match self {
            Power::Extended(e) => e.ntt(),
            Power::Ntt(c) => c,
        }
    }

    fn ext(&self) -> Result<&ExtendedCiphertext> {
        match self {
            Power::Extended(e) => Ok(e),
            Power::Ntt(_) => Err(ApsiError::Input(
                "a power used in ct×ct was not extended".into(),
            )),
        }
    }
}

/// What one query cost the sender.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// Unique items the receiver queried.
    pub queried: usize,
    /// Results sent (bundles).
    pub results: usize,
}

/// All target powers from the sources (`sources[k]` is y^{query_powers[k]}); `plan` says which
/// powers the evaluation multiplies by a ciphertext (kept extended).
pub(crate) fn compute_powers(
    ctx: &Context,
    dag: &PowersDag,
    sources: Vec<Ciphertext>,
    rk: Option<&RelinKeys>,
    plan: &SplitPlan,
) -> Result<Vec<Option<Power>>> {
    let operand = |p: usize| dag.is_operand(p) || plan.is_high(p);
    let mut out: Vec<Option<Power>> = (0..=dag.max_power()).map(|_| None).collect();
    let mut src = sources.into_iter();
    for &(p, node, _) in dag.nodes() {
        if node == Node::Source {
            let ct = src
                .next()
                .ok_or(ApsiError::Input("too few source powers".into()))?;
            out[p] = Some(Power::make(ctx, ct, operand(p))?);
        }
    }
    for d in 1..=dag.depth() {
        let level: Vec<(usize, usize, usize)> = dag
            .nodes()
            .iter()
            .filter_map(|&(p, n, dp)| match n {
                Node::Product(a, b) if dp == d => Some((p, a, b)),
                _ => None,
            })
            .collect();
        let rk = rk.ok_or_else(|| peer("sent no relinearization keys, which the powers need"))?;
        let made: Vec<(usize, Power)> = level
            .par_iter()
            .map(|&(p, a, b)| {
                let (Some(x), Some(y)) = (&out[a], &out[b]) else {
                    return Err(ApsiError::Input("powers DAG out of order".into()));
                };
                let prod =
                    eval::relinearize(ctx, &eval::multiply_extended(ctx, x.ext()?, y.ext()?)?, rk)?;
                Ok((p, Power::make(ctx, prod, operand(p))?))
            })
            .collect::<Result<Vec<_>>>()?;
        for (p, pw) in made {
            out[p] = Some(pw);
        }
    }
    Ok(out)
}

fn power(powers: &[Option<Power>], p: usize) -> Result<&Power> {
    powers
        .get(p)
        .and_then(Option::as_ref)
        .ok_or(ApsiError::Input(format!("power {p} was not computed")))
}

/// Σ_d coeffs_d · y^d by `plan`, at the last data level: the direct degrees as one ct×pt sum
/// (plus the constant), each high power's inner sum multiplied by it, the products' tensors
/// summed and scaled down once and relinearized once.
pub(crate) fn evaluate(
    ctx: &Context,
    coeffs: &Coeffs,
    powers: &[Option<Power>],
    plan: &SplitPlan,
    rk: Option<&RelinKeys>,
) -> Result<Ciphertext> {
    let count = coeffs.ntt.len();
    let plain0 = coeffs
        .plain
        .first()
        .and_then(Option::as_ref)
        .ok_or(ApsiError::Input("constant coefficient missing".into()))?;
    let direct = (1..count)
        .filter(|&d| plan.is_direct(d))
        .map(|d| Ok((power(powers, d)?.ntt(), &coeffs.ntt[d])))
        .collect::<Result<Vec<_>>>()?;
    let mut covered = direct.len();
    let mut s = eval::multiply_plain_accumulate(ctx, &direct)?;
    eval::from_ntt(ctx, &mut s)?;
    let mut acc = eval::add_plain(ctx, &s, plain0)?;
    let mut inner: Vec<(ExtendedCiphertext, usize)> = Vec::new();
    for (b, lows) in plan.high() {
        let terms = lows
            .iter()
            .filter(|&&a| a + b < count)
            .map(|&a| Ok((power(powers, a)?.ntt(), &coeffs.ntt[a + b])))
            .collect::<Result<Vec<_>>>()?;
        if terms.is_empty() {
            continue;
        }
        covered += terms.len();
        let s = eval::multiply_plain_accumulate(ctx, &terms)?;
        inner.push((eval::extend_ntt(ctx, s)?, *b));
    }
    if covered + 1 != count {
        return Err(ApsiError::Input(format!(
            "the evaluation plan covers {covered} of the {} degrees",
            count - 1
        )));
    }
    if !inner.is_empty() {
        let pairs = inner
            .iter()
            .map(|(s, b)| Ok((s, power(powers, *b)?.ext()?)))
            .collect::<Result<Vec<_>>>()?;
        let products = eval::multiply_extended_sum(ctx, &pairs)?;
        let rk =
            rk.ok_or_else(|| peer("sent no relinearization keys, which the evaluation needs"))?;
        acc = eval::relinearize(ctx, &eval::add(ctx, &acc, &products)?, rk)?;
    }
    Ok(eval::mod_switch_to(ctx, &acc, 1)?)
}

/// Serves one query of the receiver on `link` from `db`, evaluating the OPRF on at most
/// `max_items` points: the count the caller has charged to the DB's key (each evaluation lets
/// the receiver test one guess against the whole DB, so the caller bounds them over the key's
/// life; `blindjoin-data`'s query cap). A query of more points is refused before any is
/// evaluated.
///
/// # Errors
/// Link failures; [`ApsiError::PeerMisbehaved`] for anything malformed from the receiver, or a
/// query of more than `max_items` (or table_size) items.
pub fn serve(link: &mut dyn Link, db: &SenderDb, max_items: usize) -> Result<ServeStats> {
    let params = db.params();
    let ctx = db.context();
    link.send(&wire::encode_params(params, db.label_len(), db.nonce_len()))?;
    let msg = link.recv()?;
    let blinded = wire::decode_oprf_query(&msg, params.table.table_size)?;
    if blinded.len() / POINT_LEN > max_items {
        return Err(peer(format!(
            "queries {} items, more than the {max_items} it announced (each is an OPRF \
             evaluation charged to the sender's key)",
            blinded.len() / POINT_LEN
        )));
    }
    let mut evaluated = vec![0u8; blinded.len()];
    db.oprf_key()
        .mul(&blinded, &mut evaluated)
        .map_err(|e| peer(format!("sent an invalid blinded point: {e}")))?;
    let mut reply = Vec::with_capacity(1 + evaluated.len());
    reply.push(wire::APSI_OPRF_REPLY);
    reply.extend_from_slice(&evaluated);
    link.send(&reply)?;
    let queried = blinded.len() / POINT_LEN;
    if queried == 0 {
        return Ok(ServeStats::default());
    }
    // Only the powers the fullest bundle needs (a small DB needs far fewer than D).
    let full = PowersDag::new(params)?;
    let low = params.query.ps_low_degree;
    let degree = db.max_degree().max(1);
    let polynomials: usize = db
        .bundles
        .iter()
        .flatten()
        .map(|b| 1 + b.labels.len())
        .sum();
    let dag = PowersDag::plan(
        &params.query.query_powers,
        &crate::powers::target_powers(degree, low),
    )?;
    let split = match low {
        0 => SplitPlan::choose(
            &params.query.query_powers,
            degree,
            dag.depth(),
            params.bundle_idx_count(),
            polynomials,
        ),
        _ => None,
    };
    let (plan, dag) = match split {
        Some(plan) => {
            let dag = PowersDag::plan(&params.query.query_powers, plan.powers())?;
            (plan, dag)
        }
        None if low > 0 => (SplitPlan::paterson_stockmeyer(degree, low), dag),
        None => (SplitPlan::plain(degree), dag),
    };
    let np = params.query.query_powers.len();
    let nidx = params.bundle_idx_count();
    let head = link.recv()?;
    let (rk, count) = wire::decode_query_head(ctx, &head, nidx * np)?;
    if rk.is_none() && params.needs_products(&full) {
        return Err(peer(
            "sent no relinearization keys, which these parameters need",
        ));
    }
    let mut sources: Vec<Vec<Ciphertext>> = (0..nidx).map(|_| Vec::with_capacity(np)).collect();
    for k in 0..count {
        let msg = link.recv()?;
        sources[k / np].push(wire::decode_query_ct(ctx, &msg)?);
    }
    let powers: Vec<Vec<Option<Power>>> = sources
        .into_par_iter()
        .map(|s| compute_powers(ctx, &dag, s, rk.as_ref(), &plan))
        .collect::<Result<Vec<_>>>()?;
    let jobs: Vec<(usize, usize)> = db
        .bundles
        .iter()
        .enumerate()
        .flat_map(|(i, l)| (0..l.len()).map(move |k| (i, k)))
        .collect();
    link.send(&wire::encode_result_head(jobs.len()))?;
    let batch = 2 * rayon::current_num_threads().max(1);
    for chunk in jobs.chunks(batch) {
        let msgs = chunk
            .par_iter()
            .map(|&(i, k)| {
                let b = &db.bundles[i][k];
                let pw = &powers[i];
                let matching = evaluate(ctx, &b.matching, pw, &plan, rk.as_ref())?;
                let labels = b
                    .labels
                    .par_iter()
                    .map(|c| evaluate(ctx, c, pw, &plan, rk.as_ref()))
                    .collect::<Result<Vec<_>>>()?;
                Ok(wire::encode_result(
                    ctx,
                    &BundleResult {
                        index: i,
                        matching,
                        labels,
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        for m in msgs {
            link.send(&m)?;
        }
    }
    Ok(ServeStats {
        queried,
        results: jobs.len(),
    })
}
