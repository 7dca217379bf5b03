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
//! * **Serialization** ([`SenderDb::write_to`], [`SenderDb::read_from`]): magic, version, the
//!   parameters, label and nonce sizes, the OPRF key seed, the item count, then per bundle its
//!   degree and the plaintexts the online phase multiplies by, as they sit in memory (NTT form,
//!   one u64 per residue) with the few it adds in coefficient form, and a SHA-256 checksum of
//!   all of it. Loading is a streamed read: the version is checked first (older files are
//!   refused: re-run setup), every count is bounded by the parameters and by the bytes left
//!   before anything is allocated, every residue must be below its prime and every
//!   coefficient below t, and the checksum is compared before the DB is returned. No
//!   polynomial is rebuilt, so loading costs about what reading the file does; the file is
//!   about the size of the DB in memory. The bytes hold the OPRF key: whoever stores them must
//!   keep the file private.

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
use std::io::{Read, Write};
use zeroize::{Zeroize, Zeroizing};

const MAGIC: &[u8; 8] = b"BJAPSIDB";
/// Version 2 stores the bundles' plaintexts; version 1 stored the entries.
const VERSION: u16 = 2;
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

    /// The serialized DB (see the module doc); it holds the OPRF key.
    pub fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::new());
        // Writing to a Vec cannot fail.
        let _ = self.write_to(&mut *out);
        out
    }

    /// Writes the serialized DB (see the module doc) to `w`, streamed: no copy of the DB is
    /// made in memory. It holds the OPRF key.
    ///
    /// # Errors
    /// Those of `w`.
    pub fn write_to(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let mut out = HashWriter {
            w,
            hash: Sha256::new(),
            buf: Vec::new(),
        };
        out.put(MAGIC)?;
        out.put(&VERSION.to_le_bytes())?;
        let pb = self.params.to_bytes();
        out.put(&(pb.len() as u32).to_le_bytes())?;
        out.put(&pb)?;
        out.put(&(self.label_len as u32).to_le_bytes())?;
        out.put(&[self.nonce_len as u8])?;
        out.put(self.seed.as_ref())?;
        out.put(&(self.items as u64).to_le_bytes())?;
        out.put(&(self.bundles.len() as u32).to_le_bytes())?;
        let low = self.params.query.ps_low_degree;
        for idx in &self.bundles {
            out.put(&(idx.len() as u32).to_le_bytes())?;
            for b in idx {
                out.put(&(b.degree as u32).to_le_bytes())?;
                for c in std::iter::once(&b.matching).chain(&b.labels) {
                    for pt in &c.ntt {
                        out.words(pt.residues())?;
                    }
                    for (d, p) in c.plain.iter().enumerate() {
                        match p {
                            Some(p) if keep_plain(low, d) => out.words(p.coeffs())?,
                            _ => {}
                        }
                    }
                }
            }
        }
        let sum = out.hash.finalize();
        out.w.write_all(&sum)
    }

    /// Loads a DB written by [`SenderDb::to_bytes`] (hostile input: see the module doc).
    ///
    /// # Errors
    /// [`ApsiError::Db`] naming what is wrong.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = bytes;
        Self::read_from(&mut r, bytes.len() as u64)
    }

    /// Loads a DB of `len` bytes written by [`SenderDb::write_to`] from `r`, streamed
    /// (hostile input: see the module doc).
    ///
    /// # Errors
    /// [`ApsiError::Db`] naming what is wrong, including a failed read.
    pub fn read_from(r: &mut dyn Read, len: u64) -> Result<Self> {
        let db = |s: String| ApsiError::Db(s);
        if len < (MAGIC.len() + 2 + 32) as u64 {
            return Err(db("not a blindjoin APSI sender DB (too short)".into()));
        }
        let mut r = HashReader {
            r,
            left: len - 32,
            hash: Sha256::new(),
            buf: Vec::new(),
        };
        if r.take(8)? != MAGIC {
            return Err(db("not a blindjoin APSI sender DB (magic bytes)".into()));
        }
        let version = r.u16()?;
        if version != VERSION {
            return Err(db(format!(
                "format version {version}; this build reads version {VERSION}: re-run setup \
                 (source_file with save_db_only) to make the DB again"
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
        let items = usize::try_from(items).map_err(|_| db(format!("{items} items")))?;
        let ctx = params.context()?;
        let parts = if label_len == 0 {
            0
        } else {
            item::label_parts(
                label_len,
                nonce_len,
                params.bits_per_felt(),
                params.felts_per_item,
            )
        };
        if parts > crate::wire::MAX_LABEL_PARTS {
            return Err(db(format!("labels of {parts} parts")));
        }
        let mut bundles = Vec::with_capacity(nidx);
        let (n, level) = (ctx.degree(), ctx.top_level());
        let max = params.table.max_items_per_bin;
        let low = params.query.ps_low_degree;
        let t = params.plain_modulus();
        // Bytes of the smallest bundle (degree 1), which bounds a claimed bundle count.
        let pt_bytes = 8 * n * level;
        let min_bundle = 4 + (2 + parts * label_coeff_count(1)) * pt_bytes;
        for b in 0..nidx {
            let nb = r.u32()? as usize;
            if nb as u64 > r.left / min_bundle as u64 {
                return Err(db(format!("bundle index {b} claims {nb} bundles")));
            }
            let mut list = Vec::with_capacity(nb);
            for _ in 0..nb {
                let degree = r.u32()? as usize;
                if degree == 0 || degree > max {
                    return Err(db(format!(
                        "a bundle of index {b} has degree {degree}; max_items_per_bin is {max}"
                    )));
                }
                let mut coeffs = |count: usize| -> Result<Coeffs> {
                    let ntt = (0..count)
                        .map(|_| {
                            let words = r.words(n * level)?;
                            NttPlaintext::from_residues(&ctx, level, words)
                                .map_err(|e| db(format!("a plaintext of bundle index {b}: {e}")))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let plain = (0..count)
                        .map(|d| {
                            if !keep_plain(low, d) {
                                return Ok(None);
                            }
                            let words = r.words(n)?;
                            if words.iter().any(|&c| c >= t) {
                                return Err(db(format!(
                                    "a coefficient of bundle index {b} is not below t"
                                )));
                            }
                            Plaintext::from_coeffs(&ctx, &words)
                                .map(Some)
                                .map_err(|e| db(format!("a plaintext of bundle index {b}: {e}")))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    Ok(Coeffs { ntt, plain })
                };
                let matching = coeffs(degree + 1)?;
                let labels = (0..parts)
                    .map(|_| coeffs(label_coeff_count(degree)))
                    .collect::<Result<Vec<_>>>()?;
                list.push(Bundle {
                    degree,
                    matching,
                    labels,
                });
            }
            bundles.push(list);
        }
        if r.left != 0 {
            return Err(db("trailing bytes".into()));
        }
        let want = std::mem::take(&mut r.hash).finalize();
        let mut sum = [0u8; 32];
        r.r.read_exact(&mut sum)
            .map_err(|e| db(format!("cannot read its checksum: {e}")))?;
        if want.as_slice() != sum {
            return Err(db(
                "checksum mismatch: the DB is damaged or truncated".into()
            ));
        }
        let oprf = OprfScalar::from_seed(OPRF_CURVE, seed.as_ref())?;
        Ok(Self {
            params,
            ctx,
            seed,
            oprf,
            label_len,
            nonce_len,
            items,
            bundles,
        })
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

/// Writes and hashes; u64 words go out little-endian through a reused buffer.
struct HashWriter<'a> {
    w: &'a mut dyn Write,
    hash: Sha256,
    buf: Vec<u8>,
}

impl HashWriter<'_> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.hash.update(b);
        self.w.write_all(b)
    }
    fn words(&mut self, v: &[u64]) -> std::io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        let r = self.put(&buf);
        self.buf = buf;
        r
    }
}

impl Drop for HashReader<'_> {
    /// The buffer held the OPRF key seed at one point.
    fn drop(&mut self) {
        self.buf.zeroize();
    }
}

/// Reads and hashes at most `left` bytes (the body, without the checksum).
struct HashReader<'a> {
    r: &'a mut dyn Read,
    left: u64,
    hash: Sha256,
    buf: Vec<u8>,
}

impl HashReader<'_> {
    /// The next `n` bytes; refused before reading (or allocating) past the body.
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if n as u64 > self.left {
            return Err(ApsiError::Db("truncated".into()));
        }
        self.buf.resize(n, 0);
        self.r
            .read_exact(&mut self.buf)
            .map_err(|e| ApsiError::Db(format!("cannot read it: {e}")))?;
        self.left -= n as u64;
        self.hash.update(&self.buf);
        Ok(&self.buf)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
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
    /// `count` little-endian u64 words.
    fn words(&mut self, count: usize) -> Result<Vec<u64>> {
        let bytes = count
            .checked_mul(8)
            .ok_or_else(|| ApsiError::Db("truncated".into()))?;
        let s = self.take(bytes)?;
        Ok(s.chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect())
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
