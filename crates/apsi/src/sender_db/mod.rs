//! The sender's database, in memory: the OPRF key, every item inserted at all of its
//! hash_func_count locations, bins grouped into bundles of N / felts_per_item bins, and per
//! bundle the matching polynomial and the label polynomials, encoded as plaintexts in NTT form
//! ready for ct×pt (APSI's `SenderDB` with `BinBundle`s, CLR17 §5, CHLR18 §4).
//!
//! * **Insertion.** Location ℓ lies in bundle index ⌊ℓ / bins_per_bundle⌋ and bin
//!   ℓ mod bins_per_bundle; the item's felts take slots bin·f .. bin·f + f − 1. A bundle index
//!   holds a list of bundles; an item goes into the first bundle whose bin has room
//!   (< max_items_per_bin) and, in labeled mode, none of whose entries shares a felt with it in
//!   the same slot (interpolation needs distinct x per slot); otherwise a new bundle is opened.
//!   So the number of bundles, and with it the sender's work and the response size, grows with
//!   the DB and the receiver learns it (as in APSI).
//! * **Polynomials.** Slot (bin j, felt c) of a bundle gets Π (X − x_{i,c}) over its entries i,
//!   and per label part p the interpolation of (x_{i,c}, ℓ_{i,p·f+c}). The bundle's degree D
//!   is its fullest bin's load; coefficient d of every slot makes plaintext d.
//! * **Storage** ([`file`]): the DB file, with the plaintexts in NTT form or bit-packed
//!   coefficient form ([`DbForm`]).

use crate::error::{ApsiError, Result};
use crate::interp;
use crate::item::{self, HashedItem, MAX_LABEL_LEN, MAX_NONCE_LEN};
use crate::params::ApsiParams;
use blindjoin_crypto::oprf::{OprfScalar, POINT_LEN, tag};
use blindjoin_crypto::{Curve, ItemDigest};
use blindjoin_he::modarith::Modulus;
use blindjoin_he::{BatchEncoder, Context, NttPlaintext, Plaintext};
use layout::first_fit;
use rayon::prelude::*;
use zeroize::Zeroizing;

pub mod file;
mod layout;
mod packing;
#[cfg(test)]
mod tests;

pub use file::DbForm;

/// The OPRF group of the DB (FourQ, as `ub_oprf`'s default).
pub const OPRF_CURVE: Curve = Curve::FourQ;

/// One item in one bin.
#[derive(Clone)]
pub(crate) struct Entry {
    pub item: HashedItem,
    /// nonce ‖ encrypted label (empty in unlabeled mode).
    pub label: Vec<u8>,
}

/// Coefficient plaintexts of one polynomial per slot: `ntt[d]` for every degree, and `plain[d]`
/// for the degrees Paterson–Stockmeyer adds as plaintexts (multiples of L + 1).
pub(crate) struct Coeffs {
    pub ntt: Vec<NttPlaintext>,
    pub plain: Vec<Option<Plaintext>>,
}

pub(crate) struct Bundle {
    /// The fullest bin's load: the matching polynomial's degree.
    pub degree: usize,
    pub matching: Coeffs,
    pub labels: Vec<Coeffs>,
}

/// The sender's database. Holds the OPRF key (no `Debug`).
pub struct SenderDb {
    params: ApsiParams,
    ctx: Context,
    seed: Zeroizing<[u8; 32]>,
    oprf: OprfScalar,
    label_len: usize,
    nonce_len: usize,
    items: usize,
    pub(crate) bundles: Vec<Vec<Bundle>>,
}

fn input(s: impl Into<String>) -> ApsiError {
    ApsiError::Input(s.into())
}

fn check_sizes(label_len: usize, nonce_len: usize) -> Result<()> {
    if label_len > MAX_LABEL_LEN {
        return Err(input(format!(
            "labels of {label_len} bytes; at most {MAX_LABEL_LEN}"
        )));
    }
    if nonce_len > MAX_NONCE_LEN {
        return Err(input(format!(
            "a nonce of {nonce_len} bytes; at most {MAX_NONCE_LEN}"
        )));
    }
    Ok(())
}

impl SenderDb {
    /// Builds the DB from item digests and, in labeled mode, one label per item (at most
    /// `label_len` bytes each; `labels = None` is unlabeled mode and needs `label_len = 0`).
    /// A fresh OPRF key is drawn. Uses all of rayon's threads.
    ///
    /// # Errors
    /// [`ApsiError::Input`] for duplicate items, labels of the wrong count or size, sizes out of
    /// range; OPRF, HE or RNG failures.
    pub fn build(
        params: ApsiParams,
        items: &[ItemDigest],
        labels: Option<&[Vec<u8>]>,
        label_len: usize,
        nonce_len: usize,
    ) -> Result<Self> {
        check_sizes(label_len, nonce_len)?;
        match labels {
            None if label_len != 0 => {
                return Err(input("unlabeled mode (no labels) needs label_len 0"));
            }
            Some(_) if label_len == 0 => {
                return Err(input("labeled mode needs label_len ≥ 1"));
            }
            Some(l) if l.len() != items.len() => {
                return Err(input(format!(
                    "{} labels for {} items",
                    l.len(),
                    items.len()
                )));
            }
            _ => {}
        }
        if let Some(i) = labels.and_then(|l| l.iter().position(|x| x.len() > label_len)) {
            return Err(input(format!(
                "the label of item {i} is longer than label_len {label_len}"
            )));
        }
        let mut seed = Zeroizing::new([0u8; 32]);
        getrandom::fill(seed.as_mut()).map_err(|e| input(format!("random source: {e}")))?;
        let oprf = OprfScalar::from_seed(OPRF_CURVE, seed.as_ref())?;
        // OPRF outputs, then hashed items and label keys.
        let mut points = vec![0u8; items.len() * POINT_LEN];
        oprf.hash_and_mul(items, &mut points)?;
        let mut nonces = Zeroizing::new(vec![0u8; items.len() * nonce_len]);
        if nonce_len > 0 && labels.is_some() {
            getrandom::fill(nonces.as_mut()).map_err(|e| input(format!("random source: {e}")))?;
        }
        let entries: Vec<Entry> = points
            .par_chunks(POINT_LEN)
            .enumerate()
            .map(|(i, p)| {
                let (item, key) = item::split(&tag(p));
                let label = match labels {
                    Some(l) => item::encrypt_label(
                        &key,
                        &nonces[i * nonce_len..(i + 1) * nonce_len],
                        &l[i],
                        label_len,
                    ),
                    None => Vec::new(),
                };
                Entry { item, label }
            })
            .collect();
        drop(points);
        let mut sorted: Vec<&HashedItem> = entries.iter().map(|e| &e.item).collect();
        sorted.par_sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(input(
                "duplicate items: each item may appear once in the sender's DB",
            ));
        }
        drop(sorted);
        // (location, entry) pairs, sorted by location, split by bundle index.
        let ts = params.table.table_size;
        let h = params.table.hash_func_count;
        let mut placed: Vec<(u32, u32)> = entries
            .par_iter()
            .enumerate()
            .flat_map_iter(|(i, e)| {
                item::locations(&e.item, h, ts)
                    .into_iter()
                    .map(move |l| (l as u32, i as u32))
            })
            .collect();
        placed.par_sort_unstable();
        let bpb = params.bins_per_bundle();
        let per_index: Vec<Vec<(usize, Entry)>> = (0..params.bundle_idx_count())
            .into_par_iter()
            .map(|b| {
                let lo = placed.partition_point(|&(l, _)| (l as usize) < b * bpb);
                let hi = placed.partition_point(|&(l, _)| (l as usize) < (b + 1) * bpb);
                placed[lo..hi]
                    .iter()
                    .map(|&(l, i)| (l as usize % bpb, entries[i as usize].clone()))
                    .collect()
            })
            .collect();
        drop(placed);
        drop(entries);
        let mut db = Self {
            ctx: params.context()?,
            params,
            seed,
            oprf,
            label_len,
            nonce_len,
            items: items.len(),
            bundles: Vec::new(),
        };
        let labeled = labels.is_some();
        let bins = db.params.bins_per_bundle();
        let max = db.params.table.max_items_per_bin;
        let f = db.params.felts_per_item;
        let bits = db.params.bits_per_felt();
        let layouts: Vec<Vec<Vec<Vec<Entry>>>> = per_index
            .into_par_iter()
            .map(|list| first_fit(list, bins, max, f, bits, labeled))
            .collect();
        db.bundles = db.make_bundles(layouts)?;
        Ok(db)
    }

    fn make_bundles(&self, layouts: Vec<Vec<Vec<Vec<Entry>>>>) -> Result<Vec<Vec<Bundle>>> {
        layouts
            .into_par_iter()
            .map(|idx| {
                idx.into_par_iter()
                    .map(|bins| self.bundle(bins))
                    .collect::<Result<Vec<_>>>()
            })
            .collect()
    }

    /// Label parts per item (0 in unlabeled mode).
    pub fn label_parts(&self) -> usize {
        if self.label_len == 0 {
            0
        } else {
            item::label_parts(
                self.label_len,
                self.nonce_len,
                self.params.bits_per_felt(),
                self.params.felts_per_item,
            )
        }
    }

    /// Polynomials of one bundle.
    fn bundle(&self, bins: Vec<Vec<Entry>>) -> Result<Bundle> {
        let p = &self.params;
        let t =
            Modulus::new(p.plain_modulus()).ok_or_else(|| input("plain modulus out of range"))?;
        let (f, bits) = (p.felts_per_item, p.bits_per_felt());
        let parts = self.label_parts();
        let degree = bins.iter().map(Vec::len).max().unwrap_or(0);
        // Per bin: per felt column, the matching coefficients and per part the label ones.
        type BinPolys = Vec<(Vec<u64>, Vec<Vec<u64>>)>;
        let polys: Vec<BinPolys> = bins
            .par_iter()
            .map(|bin| {
                let felts: Vec<Vec<u64>> = bin
                    .iter()
                    .map(|e| item::item_felts(&e.item, bits, f))
                    .collect();
                let lfelts: Vec<Vec<u64>> = bin
                    .iter()
                    .map(|e| item::to_felts(&e.label, bits, parts * f))
                    .collect();
                (0..f)
                    .map(|c| {
                        let xs: Vec<u64> = felts.iter().map(|x| x[c]).collect();
                        let m = interp::from_roots(&t, &xs);
                        let ls = if parts > 0 {
                            let ys: Vec<Vec<u64>> = (0..parts)
                                .map(|q| lfelts.iter().map(|l| l[q * f + c]).collect())
                                .collect();
                            interp::interpolate_many(&t, &xs, &ys).ok_or_else(|| {
                                input("two entries of a bin share a felt (labeled mode)")
                            })?
                        } else {
                            Vec::new()
                        };
                        Ok((m, ls))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let slot_value = |coeffs: &dyn Fn(usize, usize) -> Option<u64>| -> Vec<u64> {
            let mut v = vec![0u64; p.degree()];
            for j in 0..bins.len() {
                for c in 0..f {
                    v[j * f + c] = coeffs(j, c).unwrap_or(0);
                }
            }
            v
        };
        let low = p.query.ps_low_degree;
        let encode = |get: &(dyn Fn(usize, usize, usize) -> Option<u64> + Sync), count: usize| {
            let enc = BatchEncoder::new(&self.ctx);
            let level = self.ctx.top_level();
            (0..count)
                .into_par_iter()
                .map(|d| {
                    let slots = slot_value(&|j, c| get(j, c, d));
                    let pt = enc.encode(&slots)?;
                    let ntt = enc.to_ntt(&pt, level)?;
                    Ok((ntt, keep_plain(low, d).then_some(pt)))
                })
                .collect::<Result<Vec<_>>>()
                .map(|v: Vec<(NttPlaintext, Option<Plaintext>)>| {
                    let (ntt, plain) = v.into_iter().unzip();
                    Coeffs { ntt, plain }
                })
        };
        let matching = encode(&|j, c, d| polys[j][c].0.get(d).copied(), degree + 1)?;
        let labels = (0..parts)
            .map(|q| {
                encode(
                    &|j, c, d| polys[j][c].1[q].get(d).copied(),
                    label_coeff_count(degree),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Bundle {
            degree,
            matching,
            labels,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &ApsiParams {
        &self.params
    }

    /// The BFV context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The OPRF key.
    pub fn oprf_key(&self) -> &OprfScalar {
        &self.oprf
    }

    /// Label bytes (0: unlabeled).
    pub fn label_len(&self) -> usize {
        self.label_len
    }

    /// Nonce bytes per label.
    pub fn nonce_len(&self) -> usize {
        self.nonce_len
    }

    /// Items in the DB.
    pub fn item_count(&self) -> usize {
        self.items
    }

    /// The largest bin load of any bundle (the highest polynomial degree).
    pub fn max_degree(&self) -> usize {
        self.bundles
            .iter()
            .flatten()
            .map(|b| b.degree)
            .max()
            .unwrap_or(0)
    }

    /// Bundles per bundle index.
    pub fn bundle_counts(&self) -> Vec<usize> {
        self.bundles.iter().map(Vec::len).collect()
    }
}

/// Whether coefficient `d` is also kept in coefficient form: the evaluation adds as plaintexts
/// only the constant term and, with Paterson–Stockmeyer of low degree L, the coefficients of
/// degree j(L + 1).
fn keep_plain(low: usize, d: usize) -> bool {
    d == 0 || (low > 0 && d.is_multiple_of(low + 1))
}

/// Coefficient plaintexts per polynomial of a bundle of degree D: D + 1 for matching, and
/// max(D, 2) per label part (the interpolant has degree < D; two keep the evaluation's
/// constant-plus-one-power shape for one-entry bins).
fn label_coeff_count(degree: usize) -> usize {
    degree.max(2)
}
