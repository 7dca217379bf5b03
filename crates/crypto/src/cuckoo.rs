//! Stash-less cuckoo hashing with three hash functions, and the matching simple hashing, for
//! KKRT16-style PSI (Kolesnikov, Kumaresan, Rosulek, Trieu, CCS 2016, §5; the stash-less
//! three-function variant of Pinkas, Schneider, Weinert, Wieder, "Efficient Circuit-based PSI
//! via Cuckoo Hashing", Eurocrypt 2018, §3).
//!
//! The receiver places each of its `n` items in one of its three candidate bins
//! `h_0(x), h_1(x), h_2(x)` of a table with `m` bins, at most one item per bin, and no stash. The
//! sender, which cannot know which of the three bins an item went to, evaluates every item at
//! all three ("simple hashing"): [`CuckooHasher::positions`] gives both sides the same bins.
//!
//! # Hash functions
//!
//! `h_k(x) = ⌊w_k · m / 2^64⌋` where `w_0 ‖ w_1 = AES_{K_0}(x)` and `w_2` is the low half of
//! `AES_{K_1}(x)`, with `K_0, K_1` expanded from a 16-byte seed by AES under the seed. A
//! failed insertion is retried with a fresh random seed.
//!
//! # Table size (failure probability ≤ 2^-40)
//!
//! [`cuckoo_bins`] takes the larger of two bounds:
//!
//! * **Large `n`: the fitted failure rate.** For stash-less cuckoo hashing with three hash
//!   functions, Pinkas–Schneider–Zohner ("Scalable Private Set Intersection Based on OT
//!   Extension", ACM TOPS 2018) and Pinkas–Rosulek–Trieu–Yanai ("SpOT-Light", CRYPTO 2019)
//!   fit the experimental failure rate as `2^-λ` with `λ = a_n·e + b_n`, `e = m/n` the
//!   expansion. We use the fit as cryptoTools' `CuckooIndex::selectParams` and SecretFlow's
//!   `CuckooIndex::SelectParams` state it, `a_n = 240`, `b_n = −log2 n − 256`
//!   ([`fit_security_bits`]), and take the least `m` with `λ ≥ 40`:
//!   `e = (40 + log2 n + 256)/240`, so 1.317·n at `n = 2^20`, 1.333·n at 2^24 and 1.358·n at
//!   2^30. The often-quoted expansion 1.27 gives only `λ ≈ 28.8` at 2^20 by this fit (24.8
//!   at 2^24). cryptoTools' later fit (`a_n → 123.5`, `b_n → −130 − log2 n`)
//!   is more conservative still (≈ 1.54·n at 2^20); insertion here retries with a fresh seed
//!   before failing, so a failure costs time, never correctness or privacy.
//! * **Small `n`**, where the fit was not measured and the dominant failure is a handful of
//!   items whose `3k` hash values fall into fewer than `k` bins (Hall's condition): the union
//!   bound `Σ_{k=2..8} C(n,k)·C(m,k−1)·((k−1)/m)^{3k} ≤ 2^-40`, with `m` grown until it holds
//!   (`m ≈ 4n` at `n = 1000`; irrelevant above `n ≈ 10^4`).
//!
//! The table size is computed with `f64` on the receiver only and sent to the sender, which
//! checks it against [`max_cuckoo_bins`], so the two parties never need bit-identical floats.

use crate::ItemDigest;
use aes::Aes128;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use rayon::prelude::*;
use thiserror::Error;

/// Number of hash functions.
pub const CUCKOO_HASHES: usize = 3;

/// Marks an empty bin in [`CuckooTable::slots`].
pub const EMPTY_BIN: u32 = u32::MAX;

/// Most items a table may hold (bins are `u32`, and [`EMPTY_BIN`] is reserved).
pub const MAX_CUCKOO_ITEMS: usize = 1 << 30;

/// Evictions one insertion may cause before the table is declared a failure. At load ≤ 0.79 a
/// random-walk insertion needs a handful of steps on average; 2000 is far in the tail.
const MAX_EVICTIONS: usize = 2000;

/// Items hashed per parallel task.
const TASK: usize = 1 << 12;

/// Failures of cuckoo hashing.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CuckooError {
    /// No placement was found with any of the seeds tried.
    #[error(
        "cuckoo hashing of {items} items into {bins} bins failed with {tries} different seeds \
         (expected probability below 2^-40 each); this is not a problem with the data — run again"
    )]
    InsertionFailed {
        /// Items to place.
        items: usize,
        /// Bins in the table.
        bins: usize,
        /// Seeds tried.
        tries: u32,
    },
    /// More items than a table can index.
    #[error(
        "{0} items are too many for one cuckoo table (at most {MAX_CUCKOO_ITEMS}); use buckets"
    )]
    TooManyItems(usize),
    /// Fewer bins than items, or more than [`max_cuckoo_bins`] (an inconsistent request).
    #[error("a cuckoo table for {items} items cannot have {bins} bins")]
    BadTableSize {
        /// Items to place.
        items: usize,
        /// Bins requested.
        bins: usize,
    },
    /// The OS random number generator failed.
    #[error("random number generator failed: {0}")]
    Rng(String),
}

/// `log2 C(n, k)`.
fn log2_binomial(n: f64, k: u32) -> f64 {
    (0..k)
        .map(|i| ((n - f64::from(i)) / f64::from(i + 1)).log2())
        .sum()
}

/// Statistical security of the table (bits): failure probability at most `2^-40`.
pub const CUCKOO_STAT_SEC: f64 = 40.0;

/// Slope `a_n` of the fitted failure rate `λ = a_n·e + b_n` (module docs).
const FIT_SLOPE: f64 = 240.0;

/// `b_n = −log2 n − FIT_OFFSET` (module docs).
const FIT_OFFSET: f64 = 256.0;

/// `λ = 240·(m/n) − log2 n − 256`: the fitted `−log2` of the probability that `n` items do not
/// fit `m` bins, for large `n` (PSZ18 / PRTY19; module docs). `+∞` for `n = 0`.
pub fn fit_security_bits(n: usize, m: usize) -> f64 {
    if n == 0 {
        return f64::INFINITY;
    }
    let nf = n as f64;
    FIT_SLOPE * (m as f64 / nf) - nf.log2() - FIT_OFFSET
}

/// `log2` of the small-set union bound `Σ_{k=2..8} C(n,k)·C(m,k−1)·((k−1)/m)^{3k}` (module
/// docs); `−∞` below two items.
pub fn union_bound_log2(n: usize, m: usize) -> f64 {
    if n < 2 {
        return f64::NEG_INFINITY;
    }
    let (nf, mf) = (n as f64, m as f64);
    let ts: Vec<f64> = (2..=8u32.min(n as u32))
        .map(|k| {
            log2_binomial(nf, k)
                + log2_binomial(mf, k - 1)
                + f64::from(3 * k) * (f64::from(k - 1) / mf).log2()
        })
        .collect();
    // log2 of the sum of 2^t, computed stably.
    let top = ts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    top + ts.iter().map(|t| (t - top).exp2()).sum::<f64>().log2()
}

/// Bins for `n` items: failure probability ≤ 2^-40 by both the fit and the small-set bound (see
/// the module doc). `0` for `n = 0`.
///
/// # Errors
/// [`CuckooError::TooManyItems`] above [`MAX_CUCKOO_ITEMS`].
pub fn cuckoo_bins(n: usize) -> Result<usize, CuckooError> {
    if n > MAX_CUCKOO_ITEMS {
        return Err(CuckooError::TooManyItems(n));
    }
    if n == 0 {
        return Ok(0);
    }
    let nf = n as f64;
    let expansion = (CUCKOO_STAT_SEC + nf.log2() + FIT_OFFSET) / FIT_SLOPE;
    let mut m = ((nf * expansion).ceil() as usize).max(n + 1);
    // Floating-point rounding at the boundary: a few bins more, never fewer.
    while fit_security_bits(n, m) < CUCKOO_STAT_SEC {
        m += 1;
    }
    while union_bound_log2(n, m) > -CUCKOO_STAT_SEC {
        m += m.div_ceil(32);
    }
    Ok(m)
}

/// The largest table size a peer may announce for `n` items: what [`cuckoo_bins`] gives, with
/// headroom, so the check never depends on floating point details.
pub fn max_cuckoo_bins(n: usize) -> usize {
    n.saturating_mul(8).saturating_add(1024)
}

/// The three hash functions for one seed and table size.
pub struct CuckooHasher {
    keys: [Aes128; 2],
    bins: usize,
}

impl CuckooHasher {
    /// Hash functions for `seed` into `bins` bins.
    pub fn new(seed: [u8; 16], bins: usize) -> Self {
        let expand = Aes128::new(&seed.into());
        let mut k = [[0u8; 16]; 2];
        k[0][0] = 1;
        k[1][0] = 2;
        expand.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut k));
        CuckooHasher {
            keys: [Aes128::new(&k[0].into()), Aes128::new(&k[1].into())],
            bins,
        }
    }

    /// Number of bins.
    pub fn bins(&self) -> usize {
        self.bins
    }

    /// `[h_0(x), h_1(x), h_2(x)]` for each item (all `0` when the table has no bins).
    pub fn positions(&self, items: &[ItemDigest]) -> Vec<[u32; CUCKOO_HASHES]> {
        let mut out = vec![[0u32; CUCKOO_HASHES]; items.len()];
        if self.bins == 0 {
            return out;
        }
        let m = self.bins as u128;
        out.par_chunks_mut(TASK)
            .zip(items.par_chunks(TASK))
            .for_each(|(dst, src)| {
                let mut a: Vec<[u8; 16]> = src.to_vec();
                let mut b: Vec<[u8; 16]> = src.to_vec();
                self.keys[0].encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut a));
                self.keys[1].encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut b));
                for ((d, a), b) in dst.iter_mut().zip(&a).zip(&b) {
                    let a = u128::from_le_bytes(*a);
                    let b = u128::from_le_bytes(*b);
                    let reduce = |w: u64| ((u128::from(w) * m) >> 64) as u32;
                    *d = [reduce(a as u64), reduce((a >> 64) as u64), reduce(b as u64)];
                }
            });
        out
    }
}

/// A filled table: which item sits in each bin.
#[derive(Clone, Debug)]
pub struct CuckooTable {
    seed: [u8; 16],
    slots: Vec<u32>,
}

impl CuckooTable {
    /// The seed of the hash functions that worked.
    pub fn seed(&self) -> [u8; 16] {
        self.seed
    }

    /// For each bin, the index of the item in it, or [`EMPTY_BIN`].
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// Number of bins.
    pub fn bins(&self) -> usize {
        self.slots.len()
    }
}

/// Places `items` into `bins` bins with the hash functions of `seed`.
///
/// # Errors
/// [`CuckooError::InsertionFailed`] (`tries = 1`) if some insertion needs more than
/// [`MAX_EVICTIONS`] evictions; [`CuckooError::BadTableSize`] if `bins < items.len()` or
/// `bins` does not fit a `u32`.
pub fn cuckoo_insert(
    items: &[ItemDigest],
    seed: [u8; 16],
    bins: usize,
) -> Result<CuckooTable, CuckooError> {
    let n = items.len();
    if n > MAX_CUCKOO_ITEMS {
        return Err(CuckooError::TooManyItems(n));
    }
    if bins < n || bins >= EMPTY_BIN as usize {
        return Err(CuckooError::BadTableSize { items: n, bins });
    }
    let hasher = CuckooHasher::new(seed, bins);
    let pos = hasher.positions(items);
    let mut slots = vec![EMPTY_BIN; bins];
    let mut used = vec![0u8; bins]; // which hash function placed the bin's item
    // A small xorshift PRNG picks the hash function of an evicted item; it only needs to break
    // cycles, not to be unpredictable.
    let mut rng = u64::from_le_bytes([seed[0], seed[1], seed[2], seed[3], seed[4], seed[5], 7, 1]);
    let fail = CuckooError::InsertionFailed {
        items: n,
        bins,
        tries: 1,
    };
    for (i, p) in pos.iter().enumerate() {
        // A free candidate bin first.
        if let Some(k) = (0..CUCKOO_HASHES).find(|&k| slots[p[k] as usize] == EMPTY_BIN) {
            slots[p[k] as usize] = i as u32;
            used[p[k] as usize] = k as u8;
            continue;
        }
        let mut cur = i as u32;
        let mut k = (rng % 3) as usize;
        let mut placed = false;
        for _ in 0..MAX_EVICTIONS {
            let b = pos[cur as usize][k] as usize;
            let evicted = slots[b];
            let evicted_k = used[b];
            slots[b] = cur;
            used[b] = k as u8;
            if evicted == EMPTY_BIN {
                placed = true;
                break;
            }
            cur = evicted;
            // The evicted item moves to one of its two other bins, at random.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let step = 1 + (rng & 1) as usize;
            k = (usize::from(evicted_k) + step) % CUCKOO_HASHES;
            let ep = &pos[cur as usize];
            if let Some(free) = (0..CUCKOO_HASHES).find(|&j| slots[ep[j] as usize] == EMPTY_BIN) {
                k = free;
            }
        }
        if !placed {
            return Err(fail);
        }
    }
    Ok(CuckooTable { seed, slots })
}

/// [`cuckoo_insert`] into [`cuckoo_bins`]`(items.len())` bins, with a fresh random seed for
/// each of up to `tries` attempts.
///
/// # Errors
/// [`CuckooError::InsertionFailed`] after `tries` failures; [`CuckooError::Rng`].
pub fn cuckoo_insert_with_retry(
    items: &[ItemDigest],
    tries: u32,
) -> Result<CuckooTable, CuckooError> {
    let bins = cuckoo_bins(items.len())?;
    for _ in 0..tries {
        let mut seed = [0u8; 16];
        crate::random_bytes(&mut seed).map_err(|e| CuckooError::Rng(e.to_string()))?;
        match cuckoo_insert(items, seed, bins) {
            Ok(t) => return Ok(t),
            Err(CuckooError::InsertionFailed { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(CuckooError::InsertionFailed {
        items: items.len(),
        bins,
        tries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize, salt: u64) -> Vec<ItemDigest> {
        (0..n)
            .map(|i| crate::item_digest(format!("{salt}/{i}").as_bytes()))
            .collect()
    }

    fn check_table(xs: &[ItemDigest], t: &CuckooTable) {
        let pos = CuckooHasher::new(t.seed(), t.bins()).positions(xs);
        let mut seen = vec![false; xs.len()];
        for (b, &s) in t.slots().iter().enumerate() {
            if s != EMPTY_BIN {
                let s = s as usize;
                assert!(!seen[s], "item {s} placed twice");
                seen[s] = true;
                assert!(
                    pos[s].contains(&(b as u32)),
                    "item {s} in a bin it does not hash to"
                );
            }
        }
        assert!(seen.iter().all(|&x| x), "an item is missing");
    }

    #[test]
    fn table_sizes() {
        assert_eq!(cuckoo_bins(0).unwrap(), 0);
        assert!(cuckoo_bins(1).unwrap() >= 2);
        for n in [1usize, 2, 3, 10, 1000, 4097, 100_000, 1 << 20] {
            let m = cuckoo_bins(n).unwrap();
            assert!(m > n && m <= max_cuckoo_bins(n), "n={n} m={m}");
        }
        assert!(cuckoo_bins(MAX_CUCKOO_ITEMS + 1).is_err());
    }

    /// The table size reaches 2^-40 by the fit and by the small-set bound for every size, up to
    /// the largest table; the often-quoted 1.27·n does not at 2^20 (λ ≈ 28.8).
    #[test]
    fn table_size_reaches_the_failure_bound() {
        let mut ns: Vec<usize> = (1..=MAX_CUCKOO_ITEMS.trailing_zeros())
            .flat_map(|k| {
                let p = 1usize << k;
                [p - 1, p, p + 1, 3 * (p / 2) + 1]
            })
            .chain([1000, 12_345, 1_000_000])
            .filter(|&n| n <= MAX_CUCKOO_ITEMS)
            .collect();
        ns.push(MAX_CUCKOO_ITEMS);
        for n in ns {
            let m = cuckoo_bins(n).unwrap();
            assert!(fit_security_bits(n, m) >= CUCKOO_STAT_SEC, "n={n} m={m}");
            assert!(union_bound_log2(n, m) <= -CUCKOO_STAT_SEC, "n={n} m={m}");
            assert!(m <= max_cuckoo_bins(n), "n={n} m={m}");
        }
        let n = 1usize << 20;
        let at_127 = fit_security_bits(n, (n * 127).div_ceil(100));
        assert!((28.0..30.0).contains(&at_127), "{at_127}");
        // The fit's own expansion at 2^20: (40 + 20 + 256)/240 = 1.3167.
        let m = cuckoo_bins(n).unwrap();
        assert!(
            m.abs_diff((n as f64 * 316.0 / 240.0).ceil() as usize) <= 1,
            "{m}"
        );
    }

    #[test]
    fn insertion_succeeds_over_many_seeds() {
        for (n, seeds) in [
            (1usize, 200u64),
            (2, 200),
            (7, 200),
            (1000, 500),
            (4097, 100),
        ] {
            let xs = items(n, n as u64);
            let bins = cuckoo_bins(n).unwrap();
            for s in 0..seeds {
                let mut seed = [0u8; 16];
                seed[..8].copy_from_slice(&s.to_le_bytes());
                let t = cuckoo_insert(&xs, seed, bins).unwrap();
                check_table(&xs, &t);
            }
        }
        // At the fitted size, a few large tables.
        for (n, seeds) in [(1usize << 16, 20u64), (1 << 20, 2)] {
            let xs = items(n, 99);
            let bins = cuckoo_bins(n).unwrap();
            for s in 0..seeds {
                let mut seed = [9u8; 16];
                seed[..8].copy_from_slice(&s.to_le_bytes());
                let t = cuckoo_insert(&xs, seed, bins).unwrap();
                check_table(&xs, &t);
            }
        }
    }

    #[test]
    fn retry_and_errors() {
        let xs = items(5000, 3);
        let t = cuckoo_insert_with_retry(&xs, 2).unwrap();
        check_table(&xs, &t);
        // Too few bins: a typed error, never a panic.
        assert!(matches!(
            cuckoo_insert(&xs, [0; 16], 10),
            Err(CuckooError::BadTableSize { .. })
        ));
        // A full table (bins = n) at this size essentially never works: a clean failure.
        let e = cuckoo_insert(&xs, [1; 16], xs.len()).unwrap_err();
        assert!(matches!(e, CuckooError::InsertionFailed { .. }), "{e}");
        assert!(e.to_string().contains("run again"));
    }

    #[test]
    fn positions_are_deterministic_and_in_range() {
        let xs = items(1000, 1);
        let h = CuckooHasher::new([5; 16], 1234);
        let p = h.positions(&xs);
        assert_eq!(p, CuckooHasher::new([5; 16], 1234).positions(&xs));
        assert!(p.iter().flatten().all(|&b| b < 1234));
        assert_ne!(p, CuckooHasher::new([6; 16], 1234).positions(&xs));
    }
}
