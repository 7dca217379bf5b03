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
//! * **Serialization** ([`SenderDb::to_bytes`]): magic, version, the parameters, label and
//!   nonce sizes, the OPRF key seed, then per bundle its entries (bin, hashed item, encrypted
//!   label), and a SHA-256 checksum of all of it. Loading checks the checksum first, then
//!   every count against the bytes left and every entry against the parameters, and rebuilds
//!   the polynomials (the encoded plaintexts are not stored: they are 20–60× larger than the
//!   entries). The bytes hold the OPRF key: whoever stores them must keep the file private.

use crate::error::{ApsiError, Result};
use crate::interp;
use crate::item::{self, HashedItem, MAX_LABEL_LEN, MAX_NONCE_LEN};
use crate::params::ApsiParams;
use blindjoin_crypto::oprf::{OprfScalar, POINT_LEN, tag};
use blindjoin_crypto::{Curve, ItemDigest};
use blindjoin_he::modarith::Modulus;
use blindjoin_he::{BatchEncoder, Context, NttPlaintext, Plaintext};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

const MAGIC: &[u8; 8] = b"BJAPSIDB";
const VERSION: u16 = 1;
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
    pub bins: Vec<Vec<Entry>>,
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
        let high = p.query.ps_low_degree + 1;
        let encode = |get: &(dyn Fn(usize, usize, usize) -> Option<u64> + Sync), count: usize| {
            let enc = BatchEncoder::new(&self.ctx);
            let level = self.ctx.top_level();
            (0..count)
                .into_par_iter()
                .map(|d| {
                    let slots = slot_value(&|j, c| get(j, c, d));
                    let pt = enc.encode(&slots)?;
                    let ntt = enc.to_ntt(&pt, level)?;
                    Ok((ntt, (d % high == 0).then_some(pt)))
                })
                .collect::<Result<Vec<_>>>()
                .map(|v: Vec<(NttPlaintext, Option<Plaintext>)>| {
                    let (ntt, plain) = v.into_iter().unzip();
                    Coeffs { ntt, plain }
                })
        };
        let matching = encode(&|j, c, d| polys[j][c].0.get(d).copied(), degree + 1)?;
        let labels = (0..parts)
            .map(|q| encode(&|j, c, d| polys[j][c].1[q].get(d).copied(), degree.max(2)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Bundle {
            bins,
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
            .flat_map(|b| b.bins.iter().map(Vec::len))
            .max()
            .unwrap_or(0)
    }

    /// Bundles per bundle index.
    pub fn bundle_counts(&self) -> Vec<usize> {
        self.bundles.iter().map(Vec::len).collect()
    }

    /// The serialized DB (see the module doc); it holds the OPRF key.
    pub fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::new());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let pb = self.params.to_bytes();
        out.extend_from_slice(&(pb.len() as u32).to_le_bytes());
        out.extend_from_slice(&pb);
        out.extend_from_slice(&(self.label_len as u32).to_le_bytes());
        out.push(self.nonce_len as u8);
        out.extend_from_slice(self.seed.as_ref());
        out.extend_from_slice(&(self.items as u64).to_le_bytes());
        out.extend_from_slice(&(self.bundles.len() as u32).to_le_bytes());
        for idx in &self.bundles {
            out.extend_from_slice(&(idx.len() as u32).to_le_bytes());
            for b in idx {
                let n: usize = b.bins.iter().map(Vec::len).sum();
                out.extend_from_slice(&(n as u32).to_le_bytes());
                for (j, bin) in b.bins.iter().enumerate() {
                    for e in bin {
                        out.extend_from_slice(&(j as u32).to_le_bytes());
                        out.extend_from_slice(&e.item);
                        out.extend_from_slice(&e.label);
                    }
                }
            }
        }
        let sum = Sha256::digest(out.as_slice());
        out.extend_from_slice(&sum);
        out
    }

    /// Loads a DB written by [`SenderDb::to_bytes`] (hostile input: see the module doc).
    ///
    /// # Errors
    /// [`ApsiError::Db`] naming what is wrong.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let db = |s: String| ApsiError::Db(s);
        if bytes.len() < MAGIC.len() + 2 + 32 || &bytes[..8] != MAGIC {
            return Err(db("not a blindjoin APSI sender DB (magic bytes)".into()));
        }
        let (body, sum) = bytes.split_at(bytes.len() - 32);
        if Sha256::digest(body).as_slice() != sum {
            return Err(db(
                "checksum mismatch: the DB is damaged or truncated".into()
            ));
        }
        let mut r = Cursor { b: body, at: 8 };
        let version = u16::from_le_bytes([r.u8()?, r.u8()?]);
        if version != VERSION {
            return Err(db(format!(
                "format version {version}; this build reads version {VERSION}"
            )));
        }
        let plen = r.u32()? as usize;
        let (params, used) = ApsiParams::from_bytes(r.take(plen)?)
            .map_err(|e| db(format!("its parameters: {e}")))?;
        if used != plen {
            return Err(db("trailing bytes after the parameters".into()));
        }
        let label_len = r.u32()? as usize;
        let nonce_len = r.u8()? as usize;
        check_sizes(label_len, nonce_len).map_err(|e| db(e.to_string()))?;
        let enc_len = if label_len == 0 {
            0
        } else {
            label_len + nonce_len
        };
        let mut seed = Zeroizing::new([0u8; 32]);
        seed.copy_from_slice(r.take(32)?);
        let items = r.u64()?;
        let nidx = r.u32()? as usize;
        if nidx != params.bundle_idx_count() {
            return Err(db(format!(
                "{nidx} bundle indices; the parameters give {}",
                params.bundle_idx_count()
            )));
        }
        let bpb = params.bins_per_bundle();
        let max = params.table.max_items_per_bin;
        let entry_len = 4 + 16 + enc_len;
        let mut layouts = Vec::with_capacity(nidx);
        let mut total = 0u64;
        for b in 0..nidx {
            let nb = r.u32()? as usize;
            // Every bundle takes at least its 4-byte count.
            if nb > r.left() / 4 {
                return Err(db(format!("bundle index {b} claims {nb} bundles")));
            }
            let mut list = Vec::with_capacity(nb);
            for _ in 0..nb {
                let ne = r.u32()? as usize;
                if ne > r.left() / entry_len || ne > bpb * max {
                    return Err(db(format!("a bundle of index {b} claims {ne} entries")));
                }
                let mut bins: Vec<Vec<Entry>> = vec![Vec::new(); bpb];
                for _ in 0..ne {
                    let j = r.u32()? as usize;
                    let mut it = [0u8; 16];
                    it.copy_from_slice(r.take(16)?);
                    let label = r.take(enc_len)?.to_vec();
                    let loc = b * bpb + j;
                    if j >= bpb
                        || !item::locations(
                            &it,
                            params.table.hash_func_count,
                            params.table.table_size,
                        )
                        .contains(&loc)
                    {
                        return Err(db(format!(
                            "an entry of bundle index {b} is not at one of its item's locations"
                        )));
                    }
                    let bin = &mut bins[j];
                    if bin.len() >= max {
                        return Err(db(format!("a bin of bundle index {b} is over-full")));
                    }
                    bin.push(Entry { item: it, label });
                    total += 1;
                }
                list.push(bins);
            }
            layouts.push(list);
        }
        if r.left() != 0 {
            return Err(db("trailing bytes".into()));
        }
        let h = params.table.hash_func_count as u64;
        if total > items.saturating_mul(h) || total < items {
            return Err(db(format!(
                "{total} entries for {items} items and {h} hash functions"
            )));
        }
        let oprf = OprfScalar::from_seed(OPRF_CURVE, seed.as_ref())?;
        let mut out = Self {
            ctx: params.context()?,
            params,
            seed,
            oprf,
            label_len,
            nonce_len,
            items: items as usize,
            bundles: Vec::new(),
        };
        out.bundles = out
            .make_bundles(layouts)
            .map_err(|e| db(format!("cannot rebuild its polynomials: {e}")))?;
        Ok(out)
    }
}

/// Whether two items share a felt in some slot.
fn clash(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).any(|(x, y)| x == y)
}

/// Places a bundle index's entries into bundles, first fit (see the module doc). In labeled
/// mode an item that fits no bundle only because of felt clashes first tries a swap: in some
/// bundle whose bin it would fit without one entry x (the one clash, or any entry of a full
/// bin), x moves to another bundle where it fits and the item takes its place. Without the
/// swap a handful of clashing items open a bundle of their own: at 1M-1-32's shape (2^20
/// items) 5 bundles of which the last held 3 entries, each bundle costing the receiver
/// 1 + label-parts ciphertexts.
fn first_fit(
    list: Vec<(usize, Entry)>,
    bins: usize,
    max: usize,
    f: usize,
    bits: u32,
    labeled: bool,
) -> Vec<Vec<Vec<Entry>>> {
    let mut bundles: Vec<Vec<Vec<Entry>>> = Vec::new();
    // Felts of the entries already placed, per bundle and bin, for the labeled check.
    let mut felts: Vec<Vec<Vec<Vec<u64>>>> = Vec::new();
    for (j, e) in list {
        let ef = item::item_felts(&e.item, bits, f);
        let fits = |fl: &Vec<Vec<Vec<u64>>>, ef: &[u64]| {
            fl[j].len() < max && (!labeled || fl[j].iter().all(|o| !clash(o, ef)))
        };
        if let Some(k) = (0..bundles.len()).find(|&k| fits(&felts[k], &ef)) {
            bundles[k][j].push(e);
            felts[k][j].push(ef);
            continue;
        }
        let mut swap = None;
        if labeled {
            'search: for k in 0..bundles.len() {
                let bin = &felts[k][j];
                let clashes: Vec<usize> = (0..bin.len()).filter(|&i| clash(&bin[i], &ef)).collect();
                let candidates: Vec<usize> = match clashes.len() {
                    0 => (0..bin.len()).collect(),
                    1 => clashes,
                    _ => continue,
                };
                for x in candidates {
                    let xf = &felts[k][j][x];
                    if let Some(k2) = (0..bundles.len()).find(|&k2| k2 != k && fits(&felts[k2], xf))
                    {
                        swap = Some((k, x, k2));
                        break 'search;
                    }
                }
            }
        }
        match swap {
            Some((k, x, k2)) => {
                let moved = std::mem::replace(&mut bundles[k][j][x], e);
                let moved_f = std::mem::replace(&mut felts[k][j][x], ef);
                bundles[k2][j].push(moved);
                felts[k2][j].push(moved_f);
            }
            None => {
                let mut b = vec![Vec::new(); bins];
                let mut fl = vec![Vec::new(); bins];
                b[j].push(e);
                fl[j].push(ef);
                bundles.push(b);
                felts.push(fl);
            }
        }
    }
    bundles
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(ApsiError::Db("truncated".into()));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    /// Every entry once, bins within bounds, no two entries of a bin sharing a felt in a slot.
    fn assert_layout(b: &[Vec<Vec<Entry>>], max: usize, f: usize, bits: u32, total: usize) {
        let mut n = 0;
        for bundle in b {
            for bin in bundle {
                assert!(bin.len() <= max);
                n += bin.len();
                for (i, x) in bin.iter().enumerate() {
                    for y in &bin[..i] {
                        assert!(!clash(
                            &item::item_felts(&x.item, bits, f),
                            &item::item_felts(&y.item, bits, f)
                        ));
                    }
                }
            }
        }
        assert_eq!(n, total);
    }

    /// Small felts (4 bits, 2 per item) force many clashes: the swap keeps the layout valid.
    #[test]
    fn swaps_keep_bins_valid() {
        let mut state = 7u64;
        let list: Vec<(usize, Entry)> = (0..3000)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let mut item = [0u8; 16];
                item[..8].copy_from_slice(&(state >> 11).to_le_bytes());
                (
                    (state >> 40) as usize % 10,
                    Entry {
                        item,
                        label: Vec::new(),
                    },
                )
            })
            .collect();
        let b = first_fit(list, 10, 6, 2, 4, true);
        assert_layout(&b, 6, 2, 4, 3000);
    }

    /// Bundle fill at 1M-1-32's shape (1 hash function, 1638 bins, 228 per bin, 5 × 16-bit
    /// felts, labeled) for 2^20 pseudorandom items: `--ignored --nocapture` prints it.
    #[test]
    #[ignore]
    fn fill_at_2_20() {
        let mut state = 1u64;
        let list: Vec<(usize, Entry)> = (0..1usize << 20)
            .map(|_| {
                let mut item = [0u8; 16];
                for c in item.chunks_mut(8) {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    c.copy_from_slice(&(state ^ (state >> 29)).to_le_bytes());
                }
                (
                    item::location(&item, 0, 1638),
                    Entry {
                        item,
                        label: Vec::new(),
                    },
                )
            })
            .collect();
        let b = first_fit(list, 1638, 228, 5, 16, true);
        let fill: Vec<usize> = b.iter().map(|x| x.iter().map(Vec::len).sum()).collect();
        let maxload: Vec<usize> = b
            .iter()
            .map(|x| x.iter().map(Vec::len).max().unwrap_or(0))
            .collect();
        println!(
            "bundles {}, entries {fill:?}, fullest bins {maxload:?}",
            b.len()
        );
        assert_layout(&b, 228, 5, 16, 1 << 20);
    }
}
