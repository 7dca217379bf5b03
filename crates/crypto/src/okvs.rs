//! Random-band oblivious key-value store (RB-OKVS).
//!
//! An OKVS encodes `n` key/value pairs into a vector `P` of `m ≈ (1+ε)·n` field
//! elements such that, for every encoded key `k`,
//!
//! ```text
//! decode(P, k) = Σ_{j < w} band(k)_j · P[start(k) + j] = value(k)
//! ```
//!
//! where `start(k) ∈ [0, m − w]` and the `w`-bit `band(k)` are pseudo-random
//! functions of the key. The band coefficients live in GF(2), so decoding is an
//! XOR of the selected entries of `P`, and decoding is GF(2)-linear in `P`
//! (`decode(A + Δ·B, k) = decode(A, k) + Δ·decode(B, k)` for `Δ ∈ GF(2^128)`), which
//! is exactly what RR22 needs to decode VOLE-correlated vectors.
//!
//! This is the construction of Bienstock, Patranabis, Wang, Yang, Zhao, *Near-Optimal
//! Oblivious Key-Value Stores for Efficient PSI, PSU and Volume-Hiding Multi-Maps*
//! (USENIX Security 2023): rows sorted by `start`, Gaussian elimination whose pivot
//! search never leaves a row's `w`-column window, then back substitution.
//!
//! # Hashing
//!
//! With `E` = AES-128 keyed by the 16-byte public `seed` (fixed-key AES, batched):
//! `h = E(key)`, `start = ⌊lo64(h) · (m − w + 1) / 2^64⌋`,
//! band bits `0..128 = E(h ⊕ 1)`, bits `128..256 = E(h ⊕ 2)` (truncated to `w` bits).
//!
//! # Parameters (see [`OkvsParams`])
//!
//! Default `ε = 0.1`, `w = 224`. The RB-OKVS paper's experimental parameter study
//! fits the statistical security of RB-OKVS for `ε = 0.1` as the linear function
//! `λ ≈ 0.2691·w − 15.21`; `λ = 40` needs `w ≥ 206`. We take `w = 224`
//! (`λ ≈ 45`, about 5 bits of margin over 2^-40 to absorb fitting error across `n`).
//! See [`DEFAULT_BAND_WIDTH`] and the tests for the measured failure rates.
//!
//! Small sets: the number of columns is `m = max(⌈(1+ε)·n⌉, n + 48)` and the band
//! width is `min(w, m)`. When `m ≤ w` the matrix is a dense uniformly random
//! `n × m` GF(2) matrix, which is singular with probability `≤ 2^(n−m) = 2^-48`.
//!
//! # Free variables
//!
//! [`encode`] sets the unconstrained entries of `P` to zero. That is fine in RR22
//! (the receiver only ever sends `P` masked by a uniform VOLE vector); if an
//! application publishes `P` directly and needs the OKVS obliviousness/randomness
//! property, use [`encode_randomized`], which fills them pseudo-randomly.

use crate::gf128::Gf128;
use aes::Aes128;
use aes::cipher::{Array, BlockCipherEncrypt, KeyInit};

/// Default overhead: `m ≈ (1 + ε)·n`.
pub const DEFAULT_EPSILON: f64 = 0.1;

/// Default band width (bits). RB-OKVS paper's fit for ε = 0.1: `λ ≈ 0.2691·w − 15.21`,
/// so `w = 224` gives `λ ≈ 45 ≥ 40`.
pub const DEFAULT_BAND_WIDTH: usize = 224;

/// Largest supported band width (rows are stored as 256-bit bitsets).
pub const MAX_BAND_WIDTH: usize = 256;

/// Minimum number of spare columns (`m ≥ n + SMALL_SET_SLACK`), which bounds the
/// failure probability of the dense small-set regime by `2^-48`.
pub const SMALL_SET_SLACK: usize = 48;

/// Number of 64-bit words in a row bitset.
const WORDS: usize = MAX_BAND_WIDTH / 64;

/// Keys are hashed in batches of this many blocks.
const BATCH: usize = 256;

type Bits = [u64; WORDS];

/// Batches at least this large are decoded in cache-friendly (start-grouped) order.
const SORTED_DECODE_MIN: usize = 1 << 14;

/// Granularity (log2 columns) of the start-grouping in large batch decodes.
const DECODE_BUCKET_SHIFT: u32 = 8;

/// Errors from OKVS encoding / decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OkvsError {
    /// `keys.len() != values.len()` (or an output buffer has the wrong length).
    #[error("length mismatch: {left} vs {right}")]
    LengthMismatch {
        /// Length of the first argument (keys).
        left: usize,
        /// Length of the second argument (values / output / vector).
        right: usize,
    },
    /// The same key occurs twice in the input (`index_a < index_b`).
    #[error("duplicate key at input indices {index_a} and {index_b}")]
    DuplicateKey {
        /// Smaller input index of the duplicated key.
        index_a: usize,
        /// Larger input index of the duplicated key.
        index_b: usize,
    },
    /// The band matrix was singular for this seed; retry with a fresh seed
    /// (see [`encode_with_retry`]).
    #[error("OKVS encoding failed (linearly dependent rows); retry with a new seed")]
    EncodingFailed,
    /// Invalid parameters (ε, band width, vector length, retry count).
    #[error("invalid OKVS parameters: {0}")]
    InvalidParameters(&'static str),
    /// The requested size does not fit in memory / `usize`.
    #[error("OKVS too large to allocate")]
    TooLarge,
}

/// Tunable OKVS parameters (`ε` and band width `w`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OkvsParams {
    epsilon: f64,
    band_width: usize,
}

impl Default for OkvsParams {
    fn default() -> Self {
        OkvsParams {
            epsilon: DEFAULT_EPSILON,
            band_width: DEFAULT_BAND_WIDTH,
        }
    }
}

impl OkvsParams {
    /// Custom parameters: `0 ≤ ε ≤ 16`, `1 ≤ band_width ≤ MAX_BAND_WIDTH`.
    ///
    /// Parameters other than the default are **not** covered by the 2^-40 failure
    /// analysis; they exist for experiments and tests.
    pub fn new(epsilon: f64, band_width: usize) -> Result<Self, OkvsError> {
        if !(epsilon.is_finite() && (0.0..=16.0).contains(&epsilon)) {
            return Err(OkvsError::InvalidParameters("epsilon must be in [0, 16]"));
        }
        if band_width == 0 || band_width > MAX_BAND_WIDTH {
            return Err(OkvsError::InvalidParameters(
                "band width must be in [1, MAX_BAND_WIDTH]",
            ));
        }
        Ok(OkvsParams {
            epsilon,
            band_width,
        })
    }

    /// The overhead ε.
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The (maximum) band width `w` in bits.
    pub fn band_width(&self) -> usize {
        self.band_width
    }

    /// `(m, w)` used for `n` items: `m = max(⌈(1+ε)n⌉, n + SMALL_SET_SLACK)`,
    /// `w = min(band_width, m)`.
    pub fn size_for(&self, n: usize) -> Result<(usize, usize), OkvsError> {
        let scaled = ((1.0 + self.epsilon) * n as f64).ceil();
        // `as` saturates for huge floats; guard explicitly.
        if !scaled.is_finite() || scaled >= (usize::MAX / 2) as f64 {
            return Err(OkvsError::TooLarge);
        }
        let m_eps = scaled as usize;
        let m_min = n.checked_add(SMALL_SET_SLACK).ok_or(OkvsError::TooLarge)?;
        let m = m_eps.max(m_min);
        Ok((m, self.band_width.min(m)))
    }
}

/// The public, seed-determined shape of an OKVS: number of columns `m`, band width
/// `w` and the keyed row hash. Both PSI parties build the same `OkvsLayout`, so it
/// can decode *any* length-`m` vector (e.g. RR22's VOLE vectors), not just `P`.
#[derive(Clone)]
pub struct OkvsLayout {
    cipher: Aes128,
    seed: [u8; 16],
    m: usize,
    w: usize,
}

impl core::fmt::Debug for OkvsLayout {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OkvsLayout")
            .field("seed", &self.seed)
            .field("m", &self.m)
            .field("w", &self.w)
            .finish()
    }
}

/// Allocate `len` copies of `v`, reporting allocation failure instead of aborting.
fn try_vec<T: Clone>(len: usize, v: T) -> Result<Vec<T>, OkvsError> {
    let mut out = Vec::new();
    out.try_reserve_exact(len)
        .map_err(|_| OkvsError::TooLarge)?;
    out.resize(len, v);
    Ok(out)
}

#[inline]
fn xor_bits(a: &mut Bits, b: &Bits) {
    for k in 0..WORDS {
        a[k] ^= b[k];
    }
}

/// `bits >> d` (towards lower indices) for `d < 256`.
#[inline]
fn shr_bits(b: &Bits, d: usize) -> Bits {
    let q = d / 64;
    let r = (d % 64) as u32;
    let mut out = [0u64; WORDS];
    for (k, o) in out.iter_mut().enumerate() {
        let lo = b.get(k + q).copied().unwrap_or(0);
        let hi = b.get(k + q + 1).copied().unwrap_or(0);
        *o = if r == 0 {
            lo
        } else {
            (lo >> r) | (hi << (64 - r))
        };
    }
    out
}

#[inline]
fn first_bit(b: &Bits) -> Option<usize> {
    for (k, &word) in b.iter().enumerate() {
        if word != 0 {
            return Some(k * 64 + word.trailing_zeros() as usize);
        }
    }
    None
}

#[inline]
fn test_bit(b: &Bits, i: usize) -> bool {
    match b.get(i / 64) {
        Some(word) => (word >> (i % 64)) & 1 == 1,
        None => false,
    }
}

/// XOR of `window[j]` over the set bits `j` of `band`.
#[inline]
fn xor_selected(window: &[Gf128], band: &Bits) -> Gf128 {
    let mut acc = 0u128;
    for (k, &word) in band.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            let idx = k * 64 + bits.trailing_zeros() as usize;
            if let Some(v) = window.get(idx) {
                acc ^= v.0;
            }
            bits &= bits - 1;
        }
    }
    Gf128(acc)
}

impl OkvsLayout {
    /// A layout with `m` columns and band width `w` (`1 ≤ w ≤ min(m, MAX_BAND_WIDTH)`).
    pub fn new(seed: [u8; 16], m: usize, w: usize) -> Result<Self, OkvsError> {
        if w == 0 || w > MAX_BAND_WIDTH || w > m {
            return Err(OkvsError::InvalidParameters(
                "need 1 <= w <= min(m, MAX_BAND_WIDTH)",
            ));
        }
        Ok(OkvsLayout {
            cipher: Aes128::new(&Array::from(seed)),
            seed,
            m,
            w,
        })
    }

    /// The layout used to encode `n` items with `params`.
    pub fn for_items(n: usize, seed: [u8; 16], params: OkvsParams) -> Result<Self, OkvsError> {
        let (m, w) = params.size_for(n)?;
        Self::new(seed, m, w)
    }

    /// Number of columns (length of the encoded vector).
    pub fn m(&self) -> usize {
        self.m
    }

    /// Band width in bits.
    pub fn w(&self) -> usize {
        self.w
    }

    /// The public hash seed.
    pub fn seed(&self) -> [u8; 16] {
        self.seed
    }

    /// Hash a batch of keys (any length) to `(start, band)` rows.
    fn rows_into(&self, keys: &[[u8; 16]], starts: &mut [usize], bands: &mut [Bits]) {
        let range = (self.m - self.w + 1) as u128;
        let band_mask = {
            let mut mask = [0u64; WORDS];
            for (k, word) in mask.iter_mut().enumerate() {
                let lo = k * 64;
                *word = if self.w >= lo + 64 {
                    u64::MAX
                } else if self.w > lo {
                    (1u64 << (self.w - lo)) - 1
                } else {
                    0
                };
            }
            mask
        };
        let two_blocks = self.w > 128;
        let mut h = [Array::<u8, _>::default(); BATCH];
        let mut b1 = [Array::<u8, _>::default(); BATCH];
        let mut b2 = [Array::<u8, _>::default(); BATCH];
        let chunks = keys
            .chunks(BATCH)
            .zip(starts.chunks_mut(BATCH))
            .zip(bands.chunks_mut(BATCH));
        for ((kc, sc), bc) in chunks {
            let len = kc.len();
            for (dst, key) in h.iter_mut().zip(kc) {
                *dst = Array::from(*key);
            }
            let h = &mut h[..len];
            self.cipher.encrypt_blocks(h);
            for (i, hv) in h.iter().enumerate() {
                let x = u128::from_le_bytes(hv.0);
                b1[i] = Array::from((x ^ 1).to_le_bytes());
                b2[i] = Array::from((x ^ 2).to_le_bytes());
            }
            self.cipher.encrypt_blocks(&mut b1[..len]);
            if two_blocks {
                self.cipher.encrypt_blocks(&mut b2[..len]);
            }
            for i in 0..len {
                let x = u128::from_le_bytes(h[i].0);
                sc[i] = (((x as u64) as u128 * range) >> 64) as usize;
                let y = u128::from_le_bytes(b1[i].0);
                let z = if two_blocks {
                    u128::from_le_bytes(b2[i].0)
                } else {
                    0
                };
                let raw = [y as u64, (y >> 64) as u64, z as u64, (z >> 64) as u64];
                for k in 0..WORDS {
                    bc[i][k] = raw[k] & band_mask[k];
                }
            }
        }
    }

    /// The row of `key`: its start column and its band as a bit vector
    /// (`band[j / 64] >> (j % 64) & 1` is the coefficient of column `start + j`).
    pub fn row(&self, key: &[u8; 16]) -> (usize, [u64; 4]) {
        let mut s = [0usize];
        let mut b = [[0u64; WORDS]];
        self.rows_into(core::slice::from_ref(key), &mut s, &mut b);
        (s[0], b[0])
    }

    /// Decode `key` against an arbitrary length-`m` vector.
    pub fn decode(&self, vector: &[Gf128], key: &[u8; 16]) -> Result<Gf128, OkvsError> {
        if vector.len() != self.m {
            return Err(OkvsError::LengthMismatch {
                left: self.m,
                right: vector.len(),
            });
        }
        let (start, band) = self.row(key);
        let window = vector.get(start..).unwrap_or(&[]);
        Ok(xor_selected(window, &band))
    }

    /// Decode many keys against a length-`m` vector: `out[i] = decode(vector, keys[i])`.
    pub fn decode_batch(
        &self,
        vector: &[Gf128],
        keys: &[[u8; 16]],
        out: &mut [Gf128],
    ) -> Result<(), OkvsError> {
        if vector.len() != self.m {
            return Err(OkvsError::LengthMismatch {
                left: self.m,
                right: vector.len(),
            });
        }
        if keys.len() != out.len() {
            return Err(OkvsError::LengthMismatch {
                left: keys.len(),
                right: out.len(),
            });
        }
        if keys.len() >= SORTED_DECODE_MIN && self.decode_batch_sorted(vector, keys, out).is_some()
        {
            return Ok(());
        }
        let mut starts = [0usize; BATCH];
        let mut bands = [[0u64; WORDS]; BATCH];
        for (kc, oc) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let len = kc.len();
            self.rows_into(kc, &mut starts[..len], &mut bands[..len]);
            for i in 0..len {
                let window = vector.get(starts[i]..).unwrap_or(&[]);
                oc[i] = xor_selected(window, &bands[i]);
            }
        }
        Ok(())
    }

    /// Large-batch decode: hash everything, then visit rows grouped by
    /// `start >> DECODE_BUCKET_SHIFT` so that the windows read from `vector` are
    /// cache-resident (the straightforward order is DRAM-bound: each row touches
    /// `w·16` bytes at a random place). Returns `None` if scratch allocation fails
    /// (the caller then falls back to the streaming path).
    fn decode_batch_sorted(
        &self,
        vector: &[Gf128],
        keys: &[[u8; 16]],
        out: &mut [Gf128],
    ) -> Option<()> {
        let n = keys.len();
        let mut starts = try_vec(n, 0usize).ok()?;
        let mut bands = try_vec(n, [0u64; WORDS]).ok()?;
        self.rows_into(keys, &mut starts, &mut bands);
        let buckets = (self.m >> DECODE_BUCKET_SHIFT) + 1;
        let mut offsets = try_vec(buckets + 1, 0usize).ok()?;
        for &s in &starts {
            if let Some(c) = offsets.get_mut((s >> DECODE_BUCKET_SHIFT) + 1) {
                *c += 1;
            }
        }
        for b in 0..buckets {
            offsets[b + 1] += offsets[b];
        }
        let mut order = try_vec(n, 0usize).ok()?;
        for (i, &s) in starts.iter().enumerate() {
            if let Some(c) = offsets.get_mut(s >> DECODE_BUCKET_SHIFT) {
                if let Some(slot) = order.get_mut(*c) {
                    *slot = i;
                }
                *c += 1;
            }
        }
        for &i in &order {
            let window = vector.get(starts[i]..).unwrap_or(&[]);
            if let Some(o) = out.get_mut(i) {
                *o = xor_selected(window, &bands[i]);
            }
        }
        Some(())
    }

    /// Solve for a vector `P` of length `m` with `decode(P, keys[i]) = values[i]`.
    ///
    /// Free (unconstrained) entries are taken from `fill` (zero if `None`).
    fn solve(
        &self,
        keys: &[[u8; 16]],
        values: &[Gf128],
        fill: Option<[u8; 16]>,
    ) -> Result<Vec<Gf128>, OkvsError> {
        let n = keys.len();
        if values.len() != n {
            return Err(OkvsError::LengthMismatch {
                left: n,
                right: values.len(),
            });
        }
        let (m, w) = (self.m, self.w);
        // Rows must fit: n ≤ m is necessary for solvability.
        if n > m {
            return Err(OkvsError::EncodingFailed);
        }

        // 1. Hash every key.
        let mut starts_in = try_vec(n, 0usize)?;
        let mut bands_in = try_vec(n, [0u64; WORDS])?;
        self.rows_into(keys, &mut starts_in, &mut bands_in);

        // 2. Counting sort by start (stable).
        let buckets = m - w + 1;
        let mut offsets = try_vec(buckets + 1, 0usize)?;
        for &s in &starts_in {
            if let Some(c) = offsets.get_mut(s + 1) {
                *c += 1;
            }
        }
        for b in 0..buckets {
            offsets[b + 1] += offsets[b];
        }
        let mut order = try_vec(n, 0usize)?;
        {
            let mut cursor = offsets.clone();
            for (i, &s) in starts_in.iter().enumerate() {
                if let Some(c) = cursor.get_mut(s) {
                    if let Some(slot) = order.get_mut(*c) {
                        *slot = i;
                    }
                    *c += 1;
                }
            }
        }

        // 3. Duplicate detection (before elimination): equal keys have equal rows, so
        //    they share a bucket; sort each multi-element bucket by key.
        for b in 0..buckets {
            let (lo, hi) = (offsets[b], offsets[b + 1]);
            if hi - lo < 2 {
                continue;
            }
            let bucket = &mut order[lo..hi];
            bucket.sort_unstable_by(|&x, &y| keys[x].cmp(&keys[y]).then(x.cmp(&y)));
            for pair in bucket.windows(2) {
                if keys[pair[0]] == keys[pair[1]] {
                    return Err(OkvsError::DuplicateKey {
                        index_a: pair[0].min(pair[1]),
                        index_b: pair[0].max(pair[1]),
                    });
                }
            }
        }

        // 4. Rows in sorted order.
        let mut starts = try_vec(n, 0usize)?;
        let mut bits = try_vec(n, [0u64; WORDS])?;
        let mut vals = try_vec(n, Gf128::ZERO)?;
        for (r, &i) in order.iter().enumerate() {
            starts[r] = starts_in[i];
            bits[r] = bands_in[i];
            vals[r] = values[i];
        }
        drop(starts_in);
        drop(bands_in);
        drop(order);

        // 5. Forward elimination. Row i's pivot is its lowest set column c; it is
        //    eliminated from every later row whose window contains c. Because rows are
        //    sorted by start and row i has no bits below c ≥ start_j, the XOR stays
        //    inside row j's window.
        let mut pivot_offset = try_vec(n, 0usize)?;
        for i in 0..n {
            let row = bits[i];
            let lead = first_bit(&row).ok_or(OkvsError::EncodingFailed)?;
            pivot_offset[i] = lead;
            let si = starts[i];
            let c = si + lead;
            let vi = vals[i];
            let mut j = i + 1;
            while j < n && starts[j] <= c {
                let sj = starts[j];
                if test_bit(&bits[j], c - sj) {
                    let shifted = shr_bits(&row, sj - si);
                    xor_bits(&mut bits[j], &shifted);
                    vals[j] += vi;
                }
                j += 1;
            }
        }

        // 6. Back substitution in decreasing pivot column order.
        let mut p = try_vec(m, Gf128::ZERO)?;
        if let Some(fill_seed) = fill {
            let fill_cipher = Aes128::new(&Array::from(fill_seed));
            let mut buf = [Array::<u8, _>::default(); BATCH];
            let mut counter = 0u128;
            for chunk in p.chunks_mut(BATCH) {
                for b in buf.iter_mut() {
                    *b = Array::from(counter.to_le_bytes());
                    counter = counter.wrapping_add(1);
                }
                fill_cipher.encrypt_blocks(&mut buf);
                for (dst, b) in chunk.iter_mut().zip(buf.iter()) {
                    *dst = Gf128(u128::from_le_bytes(b.0));
                }
            }
        }
        const NONE: usize = usize::MAX;
        let mut row_of_col = try_vec(m, NONE)?;
        for r in 0..n {
            if let Some(slot) = row_of_col.get_mut(starts[r] + pivot_offset[r]) {
                *slot = r;
            }
        }
        for col in (0..m).rev() {
            let r = row_of_col[col];
            if r == NONE {
                continue;
            }
            let mut band = bits[r];
            let lead = pivot_offset[r];
            band[lead / 64] &= !(1u64 << (lead % 64));
            let window = p.get(starts[r]..).unwrap_or(&[]);
            let v = vals[r] + xor_selected(window, &band);
            p[col] = v;
        }
        Ok(p)
    }
}

/// An encoded OKVS: the layout plus the vector `P`.
#[derive(Clone, Debug)]
pub struct Okvs {
    layout: OkvsLayout,
    p: Vec<Gf128>,
}

impl Okvs {
    /// Rebuild from parts received over the wire (checks `p.len() == m` and `w`).
    pub fn from_parts(seed: [u8; 16], w: usize, p: Vec<Gf128>) -> Result<Self, OkvsError> {
        let layout = OkvsLayout::new(seed, p.len(), w)?;
        Ok(Okvs { layout, p })
    }

    /// The layout (seed, `m`, `w`).
    pub fn layout(&self) -> &OkvsLayout {
        &self.layout
    }

    /// The seed that was used (after retries, the successful one).
    pub fn seed(&self) -> [u8; 16] {
        self.layout.seed
    }

    /// The encoded vector `P`.
    pub fn as_slice(&self) -> &[Gf128] {
        &self.p
    }

    /// Consume into the encoded vector `P`.
    pub fn into_vec(self) -> Vec<Gf128> {
        self.p
    }

    /// Number of entries `m` of `P`.
    pub fn len(&self) -> usize {
        self.p.len()
    }

    /// `true` iff `P` is empty (never the case for a successfully built OKVS).
    pub fn is_empty(&self) -> bool {
        self.p.is_empty()
    }

    /// Decode one key. For a key that was not encoded the result is an unrelated
    /// (pseudo-random looking, if `P` has random free entries) field element.
    pub fn decode(&self, key: &[u8; 16]) -> Gf128 {
        let (start, band) = self.layout.row(key);
        let window = self.p.get(start..).unwrap_or(&[]);
        xor_selected(window, &band)
    }

    /// `out[i] = decode(keys[i])`; batched AES hashing. Errors only if
    /// `keys.len() != out.len()`.
    pub fn decode_batch(&self, keys: &[[u8; 16]], out: &mut [Gf128]) -> Result<(), OkvsError> {
        self.layout.decode_batch(&self.p, keys, out)
    }
}

/// Encode with explicit parameters and an optional seed for the free entries.
pub fn encode_with_params(
    keys: &[[u8; 16]],
    values: &[Gf128],
    seed: [u8; 16],
    params: OkvsParams,
    fill_seed: Option<[u8; 16]>,
) -> Result<Okvs, OkvsError> {
    let layout = OkvsLayout::for_items(keys.len(), seed, params)?;
    let p = layout.solve(keys, values, fill_seed)?;
    Ok(Okvs { layout, p })
}

/// Encode `keys[i] ↦ values[i]` with the default parameters; free entries are zero.
///
/// Fails with [`OkvsError::EncodingFailed`] with probability ≲ 2^-40 (retry with a
/// new seed, or use [`encode_with_retry`]), with [`OkvsError::DuplicateKey`] if a key
/// repeats, and with [`OkvsError::LengthMismatch`] if the slices differ in length.
pub fn encode(keys: &[[u8; 16]], values: &[Gf128], seed: [u8; 16]) -> Result<Okvs, OkvsError> {
    encode_with_params(keys, values, seed, OkvsParams::default(), None)
}

/// Like [`encode`] but the free entries of `P` are pseudo-random (AES-CTR under
/// `fill_seed`, which should be secret and fresh).
pub fn encode_randomized(
    keys: &[[u8; 16]],
    values: &[Gf128],
    seed: [u8; 16],
    fill_seed: [u8; 16],
) -> Result<Okvs, OkvsError> {
    encode_with_params(keys, values, seed, OkvsParams::default(), Some(fill_seed))
}

/// The seed used for attempt `attempt` of [`encode_with_retry`] (attempt 0 uses
/// `first_seed` itself; later ones `AES_{first_seed}(attempt)`).
pub fn retry_seed(first_seed: [u8; 16], attempt: u64) -> [u8; 16] {
    if attempt == 0 {
        return first_seed;
    }
    let cipher = Aes128::new(&Array::from(first_seed));
    let mut block = Array::from((attempt as u128).to_le_bytes());
    cipher.encrypt_block(&mut block);
    block.0
}

/// Encode, retrying with fresh seeds (see [`retry_seed`]) when elimination fails.
/// The seed that worked is available via [`Okvs::seed`]. Duplicate keys and length
/// errors are returned immediately.
pub fn encode_with_retry(
    keys: &[[u8; 16]],
    values: &[Gf128],
    first_seed: [u8; 16],
    max_tries: u32,
) -> Result<Okvs, OkvsError> {
    encode_with_retry_params(keys, values, first_seed, max_tries, OkvsParams::default())
}

/// [`encode_with_retry`] with explicit parameters.
pub fn encode_with_retry_params(
    keys: &[[u8; 16]],
    values: &[Gf128],
    first_seed: [u8; 16],
    max_tries: u32,
    params: OkvsParams,
) -> Result<Okvs, OkvsError> {
    if max_tries == 0 {
        return Err(OkvsError::InvalidParameters("max_tries must be >= 1"));
    }
    let mut last = OkvsError::EncodingFailed;
    for attempt in 0..max_tries {
        let seed = retry_seed(first_seed, u64::from(attempt));
        match encode_with_params(keys, values, seed, params, None) {
            Ok(o) => return Ok(o),
            Err(OkvsError::EncodingFailed) => last = OkvsError::EncodingFailed,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    use crate::test_rng::Rng;
    impl Rng {
        fn key(&mut self) -> [u8; 16] {
            self.u128().to_le_bytes()
        }
    }

    fn data(n: usize, s: u64) -> (Vec<[u8; 16]>, Vec<Gf128>) {
        let mut rng = Rng(s);
        let keys = (0..n).map(|_| rng.key()).collect();
        let vals = (0..n).map(|_| rng.gf()).collect();
        (keys, vals)
    }

    fn seed(s: u64) -> [u8; 16] {
        Rng(s ^ 0xabcdef).key()
    }

    fn check_roundtrip(n: usize) {
        let (keys, vals) = data(n, n as u64 + 7);
        let okvs = encode_with_retry(&keys, &vals, seed(n as u64), 4).unwrap();
        let (m, _) = OkvsParams::default().size_for(n).unwrap();
        assert_eq!(okvs.len(), m);
        for (k, v) in keys.iter().zip(&vals) {
            assert_eq!(okvs.decode(k), *v);
        }
        let mut out = vec![Gf128::ZERO; n];
        okvs.decode_batch(&keys, &mut out).unwrap();
        assert_eq!(out, vals);
    }

    #[test]
    fn roundtrip_sizes() {
        for n in [0usize, 1, 2, 3, 10, 100, 175, 176, 177, 300, 1000, 1 << 16] {
            check_roundtrip(n);
        }
    }

    #[test]
    fn randomized_fill_roundtrip() {
        let (keys, vals) = data(5000, 99);
        let a = encode_randomized(&keys, &vals, seed(1), [9u8; 16]).unwrap();
        let b = encode(&keys, &vals, seed(1)).unwrap();
        for (k, v) in keys.iter().zip(&vals) {
            assert_eq!(a.decode(k), *v);
        }
        // Free entries differ (zero vs pseudo-random).
        assert_ne!(a.as_slice(), b.as_slice());
        let zeros = b.as_slice().iter().filter(|x| x.is_zero()).count();
        assert!(zeros >= b.len() - keys.len());
    }

    #[test]
    fn unrelated_keys_decode_unrelated() {
        let n = 1000;
        let (keys, vals) = data(n, 5);
        let okvs = encode_randomized(&keys, &vals, seed(5), [1u8; 16]).unwrap();
        let zero_fill = encode(&keys, &vals, seed(5)).unwrap();
        let mut rng = Rng(12345);
        let set: std::collections::HashSet<u128> = vals.iter().map(|v| v.0).collect();
        for _ in 0..1000 {
            let k = rng.key();
            assert!(!set.contains(&okvs.decode(&k).0));
            assert!(!set.contains(&zero_fill.decode(&k).0));
        }
    }

    #[test]
    fn duplicate_keys_rejected() {
        let (mut keys, vals) = data(1000, 11);
        keys[700] = keys[123];
        let err = encode(&keys, &vals, seed(0)).unwrap_err();
        assert_eq!(
            err,
            OkvsError::DuplicateKey {
                index_a: 123,
                index_b: 700
            }
        );
        assert_eq!(
            encode_with_retry(&keys, &vals, seed(0), 5).unwrap_err(),
            err
        );
        // n = 2, identical keys.
        let keys2 = [[7u8; 16], [7u8; 16]];
        let vals2 = [Gf128(1), Gf128(2)];
        assert_eq!(
            encode(&keys2, &vals2, seed(0)).unwrap_err(),
            OkvsError::DuplicateKey {
                index_a: 0,
                index_b: 1
            }
        );
    }

    #[test]
    fn length_mismatch_and_bad_params() {
        let (keys, vals) = data(10, 1);
        assert!(matches!(
            encode(&keys, &vals[..9], seed(0)),
            Err(OkvsError::LengthMismatch { .. })
        ));
        assert!(OkvsParams::new(f64::NAN, 10).is_err());
        assert!(OkvsParams::new(0.1, 0).is_err());
        assert!(OkvsParams::new(0.1, 257).is_err());
        assert!(OkvsLayout::new(seed(0), 10, 11).is_err());
        assert!(Okvs::from_parts(seed(0), 4, vec![]).is_err());
        assert!(encode_with_retry(&keys, &vals, seed(0), 0).is_err());
        let okvs = encode(&keys, &vals, seed(0)).unwrap();
        let mut out = vec![Gf128::ZERO; 3];
        assert!(okvs.decode_batch(&keys, &mut out).is_err());
        assert!(okvs.layout().decode(&[Gf128::ZERO; 3], &keys[0]).is_err());
    }

    #[test]
    fn from_parts_and_linearity() {
        let n = 3000;
        let (keys, vals) = data(n, 21);
        let okvs = encode(&keys, &vals, seed(21)).unwrap();
        let w = okvs.layout().w();
        let rebuilt = Okvs::from_parts(okvs.seed(), w, okvs.as_slice().to_vec()).unwrap();
        let mut rng = Rng(3);
        let delta = rng.gf();
        let r: Vec<Gf128> = (0..okvs.len()).map(|_| rng.gf()).collect();
        // decode(R + Δ·P) = decode(R) + Δ·decode(P)
        let combo: Vec<Gf128> = r
            .iter()
            .zip(okvs.as_slice())
            .map(|(a, b)| *a + delta * *b)
            .collect();
        for (k, v) in keys.iter().zip(&vals).take(200) {
            assert_eq!(rebuilt.decode(k), *v);
            let lhs = okvs.layout().decode(&combo, k).unwrap();
            let rhs = okvs.layout().decode(&r, k).unwrap() + delta * *v;
            assert_eq!(lhs, rhs);
        }
    }

    #[test]
    fn forced_failures_and_retry() {
        // Tiny band width + zero overhead: elimination fails often.
        let n = 2000;
        let (keys, vals) = data(n, 31);
        let weak = OkvsParams::new(0.0, 8).unwrap();
        let mut failures = 0;
        for s in 0..20 {
            match encode_with_params(&keys, &vals, seed(s), weak, None) {
                Err(OkvsError::EncodingFailed) => failures += 1,
                Ok(o) => {
                    for (k, v) in keys.iter().zip(&vals) {
                        assert_eq!(o.decode(k), *v);
                    }
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert!(failures > 0, "weak params never failed");
        assert!(matches!(
            encode_with_retry_params(&keys, &vals, seed(0), 3, weak),
            Err(OkvsError::EncodingFailed)
        ));
        // Moderately weak parameters: single attempts fail sometimes, retries succeed.
        // (Measured: w = 32, ε = 0.1, n = 2000 fails ~23% of single attempts.)
        let (keys, vals) = data(2000, 41);
        let medium = OkvsParams::new(0.1, 32).unwrap();
        let mut single_failures = 0;
        let mut retry_needed = false;
        for s in 0..30u64 {
            if encode_with_params(&keys, &vals, seed(s), medium, None).is_err() {
                single_failures += 1;
                let o = encode_with_retry_params(&keys, &vals, seed(s), 64, medium).unwrap();
                assert_ne!(o.seed(), seed(s));
                assert_eq!(o.seed(), {
                    let mut t = 0;
                    while retry_seed(seed(s), t) != o.seed() {
                        t += 1;
                    }
                    retry_seed(seed(s), t)
                });
                for (k, v) in keys.iter().zip(&vals) {
                    assert_eq!(o.decode(k), *v);
                }
                retry_needed = true;
            }
        }
        println!("w=32, eps=0.1, n=2000: {single_failures}/30 single-attempt failures");
        assert!(retry_needed);
    }

    #[test]
    fn zero_failures_200_seeds_n1000() {
        let (keys, vals) = data(1000, 51);
        for s in 0..200 {
            let o = encode(&keys, &vals, seed(1000 + s)).unwrap();
            assert_eq!(o.decode(&keys[s as usize]), vals[s as usize]);
        }
    }

    #[test]
    #[ignore]
    fn timing_2_20() {
        let n = 1 << 20;
        let (keys, vals) = data(n, 61);
        let t = Instant::now();
        let okvs = encode(&keys, &vals, seed(61)).unwrap();
        let enc = t.elapsed();
        let mut out = vec![Gf128::ZERO; n];
        let t = Instant::now();
        okvs.decode_batch(&keys, &mut out).unwrap();
        let dec = t.elapsed();
        assert_eq!(out, vals);
        println!(
            "n = 2^20, m = {}, w = {}: encode {:.3} s, decode_batch {:.3} s",
            okvs.len(),
            okvs.layout().w(),
            enc.as_secs_f64(),
            dec.as_secs_f64()
        );
    }
}
#[cfg(test)]
mod empirical {
    use super::*;
    /// Empirical failure rates: reduced band widths (to show the trend) and the
    /// default parameters in the small-n regime. Run with `--ignored --nocapture`.
    #[test]
    #[ignore]
    fn empirical_failure_rates() {
        let mk = |n: usize, s: u64| -> (Vec<[u8; 16]>, Vec<Gf128>) {
            let k = (0..n as u128)
                .map(|i| (((i + 1) * 0x9e3779b97f4a7c15) ^ ((s as u128) << 70)).to_le_bytes())
                .collect();
            (k, vec![Gf128(1); n])
        };
        for (eps, w) in [(0.1, 12usize), (0.1, 16), (0.1, 20), (0.1, 24), (0.1, 32)] {
            let p = OkvsParams::new(eps, w).unwrap();
            let mut f = 0;
            for s in 0..100 {
                let (k, v) = mk(2000, s);
                if encode_with_params(&k, &v, [s as u8; 16], p, None).is_err() {
                    f += 1;
                }
            }
            println!("n=2000 eps={eps} w={w}: {f}/100 failures");
        }
        for n in [180usize, 200, 250, 300, 400, 480, 1000] {
            let mut f = 0;
            let trials = 3000;
            for s in 0..trials {
                let (k, v) = mk(n, s);
                if encode(&k, &v, (s as u128).to_le_bytes()).is_err() {
                    f += 1;
                }
            }
            println!("default n={n}: {f}/{trials} failures");
        }
    }
}
