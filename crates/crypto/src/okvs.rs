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
//!
//! # Implementation notes
//!
//! Large inputs are memory-bound (each key's row touches a random `w`-column window),
//! so both directions first partition keys by start column into a few dozen coarse
//! buckets (a scatter into few enough output streams to stay sequential), then work
//! bucket by bucket in cache. Everything is safe Rust; the hot loops are written so
//! that LLVM keeps 128-bit values in SSE registers.
//!
//! * **Decoding** (`decode_batch`, `par_decode_batch`) uses the method of four
//!   Russians: for each 512-column fine bucket it builds, for every 4-column block of
//!   the vector that the bucket's windows cover, the 16 XOR combinations of the block,
//!   so a key costs `⌈(w+3)/4⌉ = 57` table lookups instead of `~w/2` XORs.
//! * **Encoding** builds 64-byte rows stored in absolute 64-column alignment (a row
//!   XOR is a word-offset XOR, no bit shifts), sorts each coarse bucket by start while
//!   it is cache-resident and eliminates it right away (branch-free masked row XORs),
//!   then back-substitutes in reverse row order with the same 4-column tables over
//!   `P`, patched as pivot entries are assigned. The result is bit-for-bit the `P` of
//!   textbook RB-OKVS elimination (same pivots, same free entries).
//! * **Threads**: hashing/row building, bucket sorting (overlapped with elimination)
//!   and the allocation of `P` use the current rayon pool; elimination and back
//!   substitution are sequential. [`OkvsLayout::par_decode_batch`] splits the keys
//!   into one chunk per thread.

use crate::gf128::Gf128;
use aes::Aes128;
use aes::cipher::{Array, BlockCipherEncrypt, KeyInit};
use rayon::prelude::*;

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

/// Columns per lookup table (a 4-bit "nibble" of a band; method of four Russians).
const TBL_COLS: usize = 4;

/// A 128-bit value as two words. LLVM keeps `[u64; 2]` XORs in SSE registers
/// (`u128` arithmetic is split into general-purpose register pairs).
type W2 = [u64; 2];

/// A table entry: a 128-bit value, 16-byte aligned so that SSE XORs can take it as a
/// memory operand.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Entry(W2);

/// A lookup table for `TBL_COLS` consecutive columns: entry `x` is the XOR of the
/// columns selected by the bits of `x`.
type Table = [Entry; 1 << TBL_COLS];

/// The all-zero table.
const ZERO_TABLE: Table = [Entry([0; 2]); 1 << TBL_COLS];

/// Batches at least this large (and at least `m / SORTED_DECODE_DENSITY`) are decoded
/// through per-bucket lookup tables.
const SORTED_DECODE_MIN: usize = 1 << 12;

/// See [`SORTED_DECODE_MIN`]: below one key per this many columns, building tables
/// costs more than it saves.
const SORTED_DECODE_DENSITY: usize = 8;

/// log2 of the number of columns per (fine) bucket of the table decoder. A bucket's
/// tables (`2^9/4 + 57` tables of 256 bytes, 47 KB) stay in L1.
const DECODE_BUCKET_SHIFT: u32 = 9;

/// Decoding first partitions the keys into at most this many coarse buckets by start
/// column. Partitioning is a scatter into one output stream per bucket; with more
/// streams than L1 DTLB entries it gets several times slower (measured on a
/// Sapphire Rapids VM, 2^20 16-byte records: 32 streams 6.5 ms, 128 streams 16 ms;
/// a fully random scatter 30 ms).
const DECODE_STREAMS: usize = 32;

// Decoding records each key's coarse bucket in a byte.
const _: () = assert!(DECODE_STREAMS <= 1 << 8);

/// Encoding partitions whole 64-byte rows into at most this many coarse buckets
/// (measured: 64 streams 6.6 ms per 2^20 rows, 128 streams 33 ms).
const ENCODE_STREAMS: usize = 64;

/// Minimum width (columns) of the coarse buckets when encoding.
const ENCODE_MIN_WIDTH: usize = 1 << 12;

/// Keys per rayon task when hashing / building rows.
const PAR_CHUNK: usize = 1 << 14;

/// Tables in back substitution's sliding window buffer (128 KB).
const BACKSUB_TABLES: usize = 512;

/// Words of a row stored aligned to absolute 64-column boundaries: a band of
/// `w ≤ 256` bits starting anywhere in a word spans at most 5 words.
const ROW_WORDS: usize = 5;

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

/// Lowest set bit of a bitset.
#[inline]
fn first_bit(b: &[u64]) -> Option<usize> {
    for (k, &word) in b.iter().enumerate() {
        if word != 0 {
            return Some(k * 64 + word.trailing_zeros() as usize);
        }
    }
    None
}

/// XOR of `window[j]` over the set bits `j` of `band` (single-key decoding).
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

/// `u128` → two little-endian words.
#[inline(always)]
fn to_w2(x: u128) -> W2 {
    [x as u64, (x >> 64) as u64]
}

/// Two little-endian words → `u128`.
#[inline(always)]
fn from_w2(x: W2) -> u128 {
    u128::from(x[0]) | (u128::from(x[1]) << 64)
}

/// `a ^= b`.
#[inline(always)]
fn xor_w2(a: &mut W2, b: &W2) {
    a[0] ^= b[0];
    a[1] ^= b[1];
}

/// The table of four columns `v`: `t[x] = ⊕_{i : x_i = 1} v[i]`.
#[inline]
fn build_table(v: [W2; TBL_COLS]) -> Table {
    let x = |a: W2, b: W2| Entry([a[0] ^ b[0], a[1] ^ b[1]]);
    let v01 = [v[0][0] ^ v[1][0], v[0][1] ^ v[1][1]];
    let lo = [[0u64; 2], v[0], v[1], v01];
    let mut t = ZERO_TABLE;
    for (k, &l) in lo.iter().enumerate() {
        t[k] = Entry(l);
        t[k + 4] = x(l, v[2]);
    }
    for k in 0..8 {
        t[k + 8] = x(t[k].0, v[3]);
    }
    t
}

/// Tables of consecutive 4-column blocks of `src` starting at block `first`, one per
/// element of `out` (columns beyond the end of `src` count as zero).
fn build_tables(src: &[Gf128], first: usize, out: &mut [Table]) {
    let cols = src.get(first * TBL_COLS..).unwrap_or(&[]);
    let mut chunks = cols.chunks_exact(TBL_COLS);
    let mut it = out.iter_mut();
    // `chunks` first: `zip` must not consume an output slot when the input runs out.
    for (c, t) in (&mut chunks).zip(&mut it) {
        *t = build_table([to_w2(c[0].0), to_w2(c[1].0), to_w2(c[2].0), to_w2(c[3].0)]);
    }
    let mut tail = [[0u64; 2]; TBL_COLS];
    for (d, x) in tail.iter_mut().zip(chunks.remainder()) {
        *d = to_w2(x.0);
    }
    if let Some(t) = it.next() {
        *t = build_table(tail);
    }
    for t in it {
        *t = ZERO_TABLE;
    }
}

/// `⊕_t tables[t][nibble t of words]` for `t < tables.len() ≤ 16·8`: the decode of
/// a nibble-aligned band against the tables of the blocks it covers. Whole words
/// use constant shifts and two SSE accumulators.
#[inline(always)]
fn table_lookup(tables: &[Table], words: &[u64; 8]) -> W2 {
    let mut a = [0u64; 2];
    let mut b = [0u64; 2];
    let (full, rest) = tables.as_chunks::<16>();
    for (tc, &w) in full.iter().zip(words.iter()) {
        for j in 0..8 {
            xor_w2(&mut a, &tc[2 * j][((w >> (8 * j)) & 15) as usize].0);
            xor_w2(&mut b, &tc[2 * j + 1][((w >> (8 * j + 4)) & 15) as usize].0);
        }
    }
    let mut w = words[full.len() % 8];
    for t in rest {
        xor_w2(&mut a, &t[(w & 15) as usize].0);
        w >>= 4;
    }
    xor_w2(&mut a, &b);
    a
}

/// The band shifted left by `off < 64` bits, into `WORDS + 1` words (padded to 8).
#[inline]
fn shl_band(b: &Bits, off: usize) -> [u64; 8] {
    let off = (off % 64) as u32;
    let mut a = [0u64; 8];
    let mut carry = 0u64;
    for (dst, &word) in a.iter_mut().zip(b.iter()) {
        *dst = (word << off) | carry;
        // `word >> (64 − off)` without the undefined shift by 64 when `off = 0`.
        carry = (word >> 1) >> (63 - off);
    }
    a[WORDS] = carry;
    a
}

/// In-place AES of 128-bit blocks (little-endian byte order).
fn encrypt_u128s(cipher: &Aes128, xs: &mut [u128]) {
    let mut buf = [[0u8; 16]; BATCH];
    for chunk in xs.chunks_mut(BATCH) {
        let blocks = &mut buf[..chunk.len()];
        for (b, x) in blocks.iter_mut().zip(chunk.iter()) {
            *b = x.to_le_bytes();
        }
        cipher.encrypt_blocks(Array::cast_slice_from_core_mut(blocks));
        for (x, b) in chunk.iter_mut().zip(blocks.iter()) {
            *x = u128::from_le_bytes(*b);
        }
    }
}

/// One equation during elimination, in one cache line. `bits` holds the band in
/// absolute alignment: bit `c mod 64` of word `⌊c/64⌋ − ⌊start/64⌋` is the
/// coefficient of column `c`, so XORing two rows needs only a word offset.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Row {
    bits: [u64; ROW_WORDS],
    val: W2,
    start: usize,
}

impl Row {
    /// The row of a band (relative to `start`) and its right-hand side.
    #[inline]
    fn new(start: usize, band: &Bits, val: u128) -> Row {
        let a = shl_band(band, start % 64);
        Row {
            bits: [a[0], a[1], a[2], a[3], a[4]],
            val: to_w2(val),
            start,
        }
    }

    /// The pivot column (lowest set column), if the row is nonzero.
    #[inline]
    fn pivot(&self) -> Option<usize> {
        first_bit(&self.bits).map(|p| (self.start & !63) + p)
    }
}

/// Forward elimination (the RB-OKVS elimination) of rows `from..` of `rows`, which
/// are sorted by `start`, stopping before the first row with `start > limit`;
/// returns the index of that row (or `rows.len()`). The caller guarantees that all
/// rows a processed row can reach (`start_j ≤ start_i + w − 1`) are in `rows`.
///
/// Row `i`'s pivot is its lowest set column `c`; it is XORed into every later row
/// `j` with `start_j ≤ c` whose bit at `c` is set. Because rows are sorted by start
/// and row `i` has no bits below `c ≥ start_j`, the XOR stays inside row `j`'s
/// window; with absolute alignment it is a XOR of words at offset
/// `⌊start_j/64⌋ − ⌊start_i/64⌋ ≤ 4`. The XOR is branch-free (masked by row `j`'s
/// bit at `c`): the bit is a coin flip, so a branch would mispredict half the time.
fn eliminate(rows: &mut [Row], from: usize, limit: usize) -> Result<usize, OkvsError> {
    for i in from..rows.len() {
        let (head, tail) = rows.split_at_mut(i + 1);
        let Some(ri) = head.last() else {
            continue;
        };
        if ri.start > limit {
            return Ok(i);
        }
        let c = ri.pivot().ok_or(OkvsError::EncodingFailed)?;
        let si_word = ri.start / 64;
        let vi = ri.val;
        // Row i's words followed by zeros: the words to XOR into a row whose first
        // word is `delta` words later are `ext[delta..delta + ROW_WORDS]`.
        let mut ext = [0u64; 2 * ROW_WORDS];
        ext[..ROW_WORDS].copy_from_slice(&ri.bits);
        let (c_word, c_bit) = (c / 64, (c % 64) as u32);
        for rj in tail.iter_mut() {
            if rj.start > c {
                break;
            }
            let sj_word = rj.start / 64;
            // start_i ≤ start_j ≤ c < start_i + 256: both offsets are ≤ 4.
            let delta = (sj_word - si_word).min(ROW_WORDS - 1);
            let c_rel = (c_word - sj_word).min(ROW_WORDS - 1);
            let bit = (rj.bits[c_rel] >> c_bit) & 1;
            let mask = bit.wrapping_neg();
            let src = ext[delta..]
                .first_chunk::<ROW_WORDS>()
                .unwrap_or(&[0; ROW_WORDS]);
            for (word, &x) in rj.bits.iter_mut().zip(src) {
                *word ^= x & mask;
            }
            rj.val[0] ^= vi[0] & mask;
            rj.val[1] ^= vi[1] & mask;
        }
    }
    Ok(rows.len())
}

/// Stable counting sort of `rows` (all with `first_col ≤ start < first_col + width`)
/// by start. The permutation is computed on 4-byte indices; rows are then gathered
/// from a copy (random reads, sequential writes: cheaper than scattering them).
fn sort_bucket(
    rows: &mut [Row],
    first_col: usize,
    width: usize,
    scratch: &mut Vec<Row>,
    counts: &mut Vec<u32>,
    order: &mut Vec<u32>,
) {
    counts.clear();
    counts.resize(width + 1, 0);
    for r in rows.iter() {
        counts[r.start - first_col + 1] += 1;
    }
    for k in 0..width {
        counts[k + 1] += counts[k];
    }
    order.clear();
    order.resize(rows.len(), 0);
    for (i, r) in rows.iter().enumerate() {
        let c = &mut counts[r.start - first_col];
        order[*c as usize] = i as u32;
        *c += 1;
    }
    scratch.clear();
    scratch.extend_from_slice(rows);
    for (dst, &i) in rows.iter_mut().zip(order.iter()) {
        *dst = scratch[i as usize];
    }
}

/// Adds `delta` to column `COL` of a 4-column table (to the 8 entries containing it).
#[inline(always)]
fn patch_table<const COL: usize>(table: &mut Table, delta: &W2) {
    for (x, entry) in table.iter_mut().enumerate() {
        if (x >> COL) & 1 == 1 {
            xor_w2(&mut entry.0, delta);
        }
    }
}

/// Back substitution in reverse row order.
///
/// After [`eliminate`], row `i` is zero on the pivot columns of all rows `j < i`, so
/// processing rows `n−1, …, 0` only ever reads final entries of `p` (free entries keep
/// their initial value). The XOR over a row's band uses 4-column lookup tables over
/// `p`, kept in a sliding window buffer: tables are built (from the current `p`) when
/// the window's low edge reaches them and patched (8 entries) whenever a pivot entry
/// in them is assigned. A row costs `⌈(w+3)/4⌉` table lookups instead of `~w/2` XORs.
fn back_substitute(rows: &[Row], p: &mut [Gf128], w: usize) -> Result<(), OkvsError> {
    let span = (w + 3).div_ceil(TBL_COLS);
    let mut buf = try_vec(BACKSUB_TABLES, ZERO_TABLE)?;
    // `buf[k]` holds the table of block `org + k`; blocks `lo .. org + BACKSUB_TABLES`
    // are initialised.
    let mut org = usize::MAX;
    let mut lo = usize::MAX;
    for row in rows.iter().rev() {
        let base = row.start / TBL_COLS;
        if base < org || org == usize::MAX {
            let new_org = (base + span).saturating_sub(BACKSUB_TABLES);
            if org != usize::MAX && lo < base + span {
                let keep_hi = (base + span).min(org + BACKSUB_TABLES);
                buf.copy_within(lo - org..keep_hi - org, lo - new_org);
            } else {
                lo = base + span;
            }
            org = new_org;
        }
        // Blocks above the window are never read again (only after a gap in starts).
        lo = lo.min(base + span);
        while lo > base {
            lo -= 1;
            build_tables(p, lo, core::slice::from_mut(&mut buf[lo - org]));
        }
        let Some(col) = row.pivot() else {
            continue;
        };
        let mut bits = row.bits;
        let rel = col - (row.start & !63);
        bits[(rel / 64).min(ROW_WORDS - 1)] &= !(1u64 << (rel % 64));
        // Nibble-align: drop the `start mod 64` rounded down to 4 low bits.
        let r = (row.start % 64) & !(TBL_COLS - 1);
        let mut words = [0u64; 8];
        for (k, dst) in words.iter_mut().take(ROW_WORDS).enumerate() {
            let hi = bits.get(k + 1).copied().unwrap_or(0);
            *dst = (bits[k] >> r) | ((hi << 1) << (63 - r));
        }
        let tables = &buf[base - org..base - org + span];
        let mut acc = table_lookup(tables, &words);
        xor_w2(&mut acc, &row.val);
        if let Some(slot) = p.get_mut(col) {
            let old = to_w2(slot.0);
            *slot = Gf128(from_w2(acc));
            let mut delta = acc;
            xor_w2(&mut delta, &old);
            let table = &mut buf[col / TBL_COLS - org];
            match col % TBL_COLS {
                0 => patch_table::<0>(table, &delta),
                1 => patch_table::<1>(table, &delta),
                2 => patch_table::<2>(table, &delta),
                _ => patch_table::<3>(table, &delta),
            }
        }
    }
    Ok(())
}

/// Partition of the start columns `0..span` into `count` buckets of `width`
/// consecutive columns (the last one possibly shorter).
struct Partition {
    width: usize,
    count: usize,
    /// `⌈2^64 / width⌉` when `span ≤ 2^32`: then `⌊s·magic / 2^64⌋ = ⌊s / width⌋`
    /// exactly (both operands < 2^32), which is much cheaper than a division.
    magic: Option<u64>,
}

impl Partition {
    /// At most `max_buckets` buckets of at least `min_width` columns.
    fn new(span: usize, max_buckets: usize, min_width: usize) -> Partition {
        let width = span.div_ceil(max_buckets).max(min_width).max(1);
        let magic = (span <= 1 << 32).then(|| u64::MAX / width as u64 + 1);
        Partition {
            width,
            count: span.div_ceil(width),
            magic,
        }
    }

    /// The bucket of start column `start`: `⌊start / width⌋`.
    #[inline]
    fn bucket(&self, start: usize) -> usize {
        match self.magic {
            Some(magic) => ((u128::from(magic) * start as u128) >> 64) as usize,
            None => start / self.width,
        }
    }
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

    /// Tables (4-column blocks) a nibble-aligned band covers: `⌈(w + 3)/4⌉ ≤ 65`.
    fn nib_tables(&self) -> usize {
        (self.w + 3).div_ceil(TBL_COLS)
    }

    /// Shift of a coarse partition: buckets of `2^shift ≥ 2^min_shift` columns, at
    /// most `max_buckets` of them.
    fn coarse_shift(&self, min_shift: u32, max_buckets: usize) -> u32 {
        let last_start = self.m - self.w;
        let mut shift = min_shift;
        while (last_start >> shift) >= max_buckets {
            shift += 1;
        }
        shift
    }

    /// Mask of the low `w` bits of a band.
    fn band_mask(&self) -> Bits {
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
    }

    /// `start = ⌊lo64(h) · (m − w + 1) / 2^64⌋`.
    #[inline]
    fn start_of(&self, h: u128) -> usize {
        let range = (self.m - self.w + 1) as u128;
        ((u128::from(h as u64) * range) >> 64) as usize
    }

    /// `hs[i] = E(keys[i])`.
    fn hash_keys(&self, keys: &[[u8; 16]], hs: &mut [u128]) {
        let mut buf = [[0u8; 16]; BATCH];
        for (kc, hc) in keys.chunks(BATCH).zip(hs.chunks_mut(BATCH)) {
            let blocks = &mut buf[..kc.len()];
            blocks.copy_from_slice(kc);
            self.cipher
                .encrypt_blocks(Array::cast_slice_from_core_mut(blocks));
            for (h, b) in hc.iter_mut().zip(blocks.iter()) {
                *h = u128::from_le_bytes(*b);
            }
        }
    }

    /// Bands from the key hashes: bits `0..128 = E(h ⊕ 1)`, `128..256 = E(h ⊕ 2)`,
    /// truncated to `w` bits.
    fn bands_from_h(&self, hs: &[u128], bands: &mut [Bits]) {
        let mask = self.band_mask();
        let two_blocks = self.w > 128;
        let mut buf = [[[0u8; 16]; 2]; BATCH];
        for (hc, bc) in hs.chunks(BATCH).zip(bands.chunks_mut(BATCH)) {
            let blocks = &mut buf[..hc.len()];
            for (b, &h) in blocks.iter_mut().zip(hc) {
                *b = [(h ^ 1).to_le_bytes(), (h ^ 2).to_le_bytes()];
            }
            // (For w ≤ 128 the second block is computed and discarded.)
            self.cipher
                .encrypt_blocks(Array::cast_slice_from_core_mut(blocks.as_flattened_mut()));
            for (band, pair) in bc.iter_mut().zip(blocks.iter()) {
                let y = u128::from_le_bytes(pair[0]);
                let z = if two_blocks {
                    u128::from_le_bytes(pair[1])
                } else {
                    0
                };
                let raw = [y as u64, (y >> 64) as u64, z as u64, (z >> 64) as u64];
                for k in 0..WORDS {
                    band[k] = raw[k] & mask[k];
                }
            }
        }
    }

    /// Hash a batch of keys (any length) to `(start, band)` rows.
    fn rows_into(&self, keys: &[[u8; 16]], starts: &mut [usize], bands: &mut [Bits]) {
        let mut h = [0u128; BATCH];
        let chunks = keys
            .chunks(BATCH)
            .zip(starts.chunks_mut(BATCH))
            .zip(bands.chunks_mut(BATCH));
        for ((kc, sc), bc) in chunks {
            let h = &mut h[..kc.len()];
            self.hash_keys(kc, h);
            for (s, &hv) in sc.iter_mut().zip(h.iter()) {
                *s = self.start_of(hv);
            }
            self.bands_from_h(h, bc);
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

    /// Length checks shared by the batch decoders.
    fn check_decode_args(
        &self,
        vector: &[Gf128],
        keys: &[[u8; 16]],
        out: &[Gf128],
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
        Ok(())
    }

    /// Decode many keys against a length-`m` vector: `out[i] = decode(vector, keys[i])`.
    ///
    /// Single-threaded; see [`OkvsLayout::par_decode_batch`] for the rayon version.
    /// Large batches are decoded bucket by bucket (keys grouped by start column)
    /// through 4-column lookup tables over `vector`, so each key costs
    /// `16·⌈(w+3)/64⌉` cache-resident lookups.
    pub fn decode_batch(
        &self,
        vector: &[Gf128],
        keys: &[[u8; 16]],
        out: &mut [Gf128],
    ) -> Result<(), OkvsError> {
        self.check_decode_args(vector, keys, out)?;
        self.decode_chunk(vector, keys, out);
        Ok(())
    }

    /// [`OkvsLayout::decode_batch`] on the current rayon thread pool: the keys are
    /// split into one contiguous chunk per thread, each decoded like `decode_batch`.
    /// Results are identical to `decode_batch`.
    pub fn par_decode_batch(
        &self,
        vector: &[Gf128],
        keys: &[[u8; 16]],
        out: &mut [Gf128],
    ) -> Result<(), OkvsError> {
        self.check_decode_args(vector, keys, out)?;
        let threads = rayon::current_num_threads().max(1);
        // Each chunk should keep the table decoder worthwhile.
        let min_chunk = SORTED_DECODE_MIN.max(self.m / SORTED_DECODE_DENSITY);
        let chunk = keys.len().div_ceil(threads).max(min_chunk).max(1);
        out.par_chunks_mut(chunk)
            .zip(keys.par_chunks(chunk))
            .for_each(|(o, k)| self.decode_chunk(vector, k, o));
        Ok(())
    }

    /// Decode `keys` into `out` (lengths already checked).
    fn decode_chunk(&self, vector: &[Gf128], keys: &[[u8; 16]], out: &mut [Gf128]) {
        let dense = keys.len() >= SORTED_DECODE_MIN
            && keys.len().saturating_mul(SORTED_DECODE_DENSITY) >= self.m;
        if dense && self.decode_batch_tables(vector, keys, out).is_some() {
            return;
        }
        let mut starts = [0usize; BATCH];
        let mut bands = [[0u64; WORDS]; BATCH];
        for (kc, oc) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let len = kc.len();
            self.rows_into(kc, &mut starts[..len], &mut bands[..len]);
            for ((o, &s), band) in oc.iter_mut().zip(&starts).zip(&bands) {
                let window = vector.get(s..).unwrap_or(&[]);
                *o = xor_selected(window, band);
            }
        }
    }

    /// Large-batch decode, in four passes that avoid random 16-byte stores:
    ///
    /// 1. count keys per coarse bucket (`start >> shift`, ≤ [`DECODE_STREAMS`]);
    /// 2. scatter the key hashes into their coarse buckets (stable; each key's bucket
    ///    is recorded in one byte);
    /// 3. per coarse bucket (cache-resident): group by `start >> DECODE_BUCKET_SHIFT`,
    ///    build the 4-column tables of each group's windows and decode, writing each
    ///    result over its key's hash;
    /// 4. gather the results back into input order (`out[i]` is the next unread
    ///    result of key `i`'s bucket).
    ///
    /// Returns `None` if scratch allocation fails (the caller then falls back to the
    /// streaming path).
    fn decode_batch_tables(
        &self,
        vector: &[Gf128],
        keys: &[[u8; 16]],
        out: &mut [Gf128],
    ) -> Option<()> {
        let n = keys.len();
        let last_start = self.m - self.w;
        let shift = self.coarse_shift(DECODE_BUCKET_SHIFT, DECODE_STREAMS);
        let ncoarse = (last_start >> shift) + 1;
        let mut h = [0u128; BATCH];

        // 1. Counts.
        let mut offsets = try_vec(ncoarse + 1, 0usize).ok()?;
        for kc in keys.chunks(BATCH) {
            let h = &mut h[..kc.len()];
            self.hash_keys(kc, h);
            for &x in h.iter() {
                offsets[(self.start_of(x) >> shift) + 1] += 1;
            }
        }
        for c in 0..ncoarse {
            offsets[c + 1] += offsets[c];
        }

        // 2. Scatter hashes (hashing again is cheaper than storing them). The scatter
        //    is stable, so recording each key's bucket (one byte) is enough to find
        //    it again in step 4.
        let mut slots = try_vec(n, [0u64; 2]).ok()?;
        let mut bucket_of = try_vec(n, 0u8).ok()?;
        {
            let mut cursor = try_vec(ncoarse, 0usize).ok()?;
            cursor.copy_from_slice(&offsets[..ncoarse]);
            for (kc, bc) in keys.chunks(BATCH).zip(bucket_of.chunks_mut(BATCH)) {
                let h = &mut h[..kc.len()];
                self.hash_keys(kc, h);
                for (&x, b) in h.iter().zip(bc.iter_mut()) {
                    let c = self.start_of(x) >> shift;
                    let slot = &mut cursor[c];
                    slots[*slot] = to_w2(x);
                    *slot += 1;
                    *b = c as u8;
                }
            }
        }

        // 3. Decode coarse bucket by coarse bucket.
        let span = self.nib_tables();
        let fine_per_coarse = 1usize << (shift - DECODE_BUCKET_SHIFT);
        let max_tables = ((1usize << DECODE_BUCKET_SHIFT) - 1) / TBL_COLS + span;
        let mut tables = try_vec(max_tables, ZERO_TABLE).ok()?;
        let max_bucket = (0..ncoarse)
            .map(|c| offsets[c + 1] - offsets[c])
            .max()
            .unwrap_or(0);
        // (Positions inside a coarse bucket are stored as `u32`.)
        u32::try_from(max_bucket).ok()?;
        let mut order = try_vec(max_bucket, 0u32).ok()?;
        let mut fine = try_vec(fine_per_coarse + 1, 0usize).ok()?;
        let mut bands = [[0u64; WORDS]; BATCH];
        for c in 0..ncoarse {
            let region = &mut slots[offsets[c]..offsets[c + 1]];
            if region.is_empty() {
                continue;
            }
            let first_fine = (c << shift) >> DECODE_BUCKET_SHIFT;
            let fine_of = |x: &W2| (self.start_of(from_w2(*x)) >> DECODE_BUCKET_SHIFT) - first_fine;
            fine.fill(0);
            for x in region.iter() {
                fine[fine_of(x) + 1] += 1;
            }
            for f in 0..fine_per_coarse {
                fine[f + 1] += fine[f];
            }
            let order = &mut order[..region.len()];
            {
                let mut cursor = fine.clone();
                for (k, x) in region.iter().enumerate() {
                    let cf = &mut cursor[fine_of(x)];
                    order[*cf] = k as u32;
                    *cf += 1;
                }
            }
            for f in 0..fine_per_coarse {
                let group = &order[fine[f]..fine[f + 1]];
                if group.is_empty() {
                    continue;
                }
                // Tables for the blocks of every window starting in this group.
                let first_col = (first_fine + f) << DECODE_BUCKET_SHIFT;
                let b0 = first_col / TBL_COLS;
                let max_start = (first_col + (1usize << DECODE_BUCKET_SHIFT) - 1).min(last_start);
                let count = max_start / TBL_COLS + span - b0;
                build_tables(vector, b0, &mut tables[..count]);
                for chunk in group.chunks(BATCH) {
                    let len = chunk.len();
                    for (hv, &k) in h.iter_mut().zip(chunk) {
                        *hv = from_w2(region[k as usize]);
                    }
                    self.bands_from_h(&h[..len], &mut bands[..len]);
                    for ((&k, &hv), band) in chunk.iter().zip(&h).zip(&bands) {
                        let start = self.start_of(hv);
                        let base = start / TBL_COLS - b0;
                        let a = shl_band(band, start % TBL_COLS);
                        region[k as usize] = table_lookup(&tables[base..base + span], &a);
                    }
                }
            }
        }

        // 4. Back to input order.
        let mut cursor = offsets;
        for (o, &c) in out.iter_mut().zip(&bucket_of) {
            let slot = &mut cursor[usize::from(c)];
            *o = Gf128(from_w2(slots[*slot]));
            *slot += 1;
        }
        Some(())
    }

    /// The initial `P`: zero, or AES-CTR under `fill` (`P[k] = E_fill(k)`), which is
    /// what the free (non-pivot) entries keep.
    fn initial_vector(&self, fill: Option<[u8; 16]>) -> Result<Vec<Gf128>, OkvsError> {
        let mut p = try_vec(self.m, Gf128::ZERO)?;
        if let Some(fill_seed) = fill {
            let fill_cipher = Aes128::new(&Array::from(fill_seed));
            p.par_chunks_mut(PAR_CHUNK)
                .enumerate()
                .for_each(|(c, chunk)| {
                    let mut buf = [0u128; BATCH];
                    for (b, sub) in chunk.chunks_mut(BATCH).enumerate() {
                        let first = (c * PAR_CHUNK + b * BATCH) as u128;
                        let buf = &mut buf[..sub.len()];
                        for (j, x) in buf.iter_mut().enumerate() {
                            *x = first.wrapping_add(j as u128);
                        }
                        encrypt_u128s(&fill_cipher, buf);
                        for (dst, &x) in sub.iter_mut().zip(buf.iter()) {
                            *dst = Gf128(x);
                        }
                    }
                });
        }
        Ok(p)
    }

    /// Looks for duplicate keys (only called after elimination failed). Equal keys
    /// have equal rows, so they share a start. Reports exactly what sorting each
    /// start bucket by `(key, index)` and scanning buckets in start order does: the
    /// first bucket with a repeated key, its smallest such key, its two smallest
    /// indices. `None` if there are no duplicates (or scratch allocation fails).
    fn find_duplicate(&self, keys: &[[u8; 16]]) -> Option<OkvsError> {
        let n = keys.len();
        let mut by_start = try_vec(n, (0usize, 0usize)).ok()?;
        let mut h = [0u128; BATCH];
        for (c, (kc, bc)) in keys
            .chunks(BATCH)
            .zip(by_start.chunks_mut(BATCH))
            .enumerate()
        {
            let h = &mut h[..kc.len()];
            self.hash_keys(kc, h);
            for (j, (b, &x)) in bc.iter_mut().zip(h.iter()).enumerate() {
                *b = (self.start_of(x), c * BATCH + j);
            }
        }
        by_start.sort_unstable();
        for run in by_start.chunk_by(|a, b| a.0 == b.0) {
            if run.len() < 2 {
                continue;
            }
            let mut bucket: Vec<usize> = run.iter().map(|&(_, i)| i).collect();
            bucket.sort_unstable_by(|&x, &y| keys[x].cmp(&keys[y]).then(x.cmp(&y)));
            for pair in bucket.windows(2) {
                if keys[pair[0]] == keys[pair[1]] {
                    return Some(OkvsError::DuplicateKey {
                        index_a: pair[0].min(pair[1]),
                        index_b: pair[0].max(pair[1]),
                    });
                }
            }
        }
        None
    }

    /// The rows of all keys, sorted by start column (and, within a start, by input
    /// index, as a stable sort would order them) and eliminated.
    ///
    /// 1. Count keys per coarse bucket (`⌊start / width⌋`, ≤ [`ENCODE_STREAMS`] buckets
    ///    of ~1 MB of rows at n = 2^20), per piece of the input (pieces run in
    ///    parallel).
    /// 2. Hash again, build each row and append it to its bucket: every piece writes
    ///    its own sub-range of each bucket sequentially.
    /// 3. Bucket by bucket: stable counting sort by start while the bucket is
    ///    cache-resident, then eliminate the rows whose reach (`start + w − 1`) is
    ///    already sorted.
    fn eliminated_rows(&self, keys: &[[u8; 16]], values: &[Gf128]) -> Result<Vec<Row>, OkvsError> {
        let n = keys.len();
        let part = Partition::new(self.m - self.w + 1, ENCODE_STREAMS, ENCODE_MIN_WIDTH);
        let nb = part.count;
        let pieces = rayon::current_num_threads().clamp(1, 64);
        let piece_len = n.div_ceil(pieces).max(PAR_CHUNK);

        // 1. Counts per (piece, bucket).
        let counts: Vec<Vec<usize>> = keys
            .par_chunks(piece_len)
            .map(|kc| {
                let mut c = vec![0usize; nb];
                let mut h = [0u128; BATCH];
                for kb in kc.chunks(BATCH) {
                    let h = &mut h[..kb.len()];
                    self.hash_keys(kb, h);
                    for &x in h.iter() {
                        c[part.bucket(self.start_of(x))] += 1;
                    }
                }
                c
            })
            .collect();

        // 2. Split `rows` into per-(piece, bucket) ranges and fill them in parallel.
        let mut rows = try_vec(n, Row::default())?;
        let mut offsets = vec![0usize; nb + 1];
        {
            let mut per_piece: Vec<Vec<&mut [Row]>> =
                counts.iter().map(|_| Vec::with_capacity(nb)).collect();
            let mut rest: &mut [Row] = &mut rows;
            for b in 0..nb {
                let mut total = 0;
                for (slices, c) in per_piece.iter_mut().zip(&counts) {
                    let (head, tail) = rest.split_at_mut(c[b]);
                    slices.push(head);
                    rest = tail;
                    total += c[b];
                }
                offsets[b + 1] = offsets[b] + total;
            }
            per_piece
                .into_par_iter()
                .zip(keys.par_chunks(piece_len))
                .zip(values.par_chunks(piece_len))
                .for_each(|((mut slices, kc), vc)| {
                    let mut fill = vec![0usize; nb];
                    let mut h = [0u128; BATCH];
                    let mut bands = [[0u64; WORDS]; BATCH];
                    for (kb, vb) in kc.chunks(BATCH).zip(vc.chunks(BATCH)) {
                        let len = kb.len();
                        let h = &mut h[..len];
                        self.hash_keys(kb, h);
                        self.bands_from_h(h, &mut bands[..len]);
                        for ((&x, band), v) in h.iter().zip(&bands).zip(vb) {
                            let start = self.start_of(x);
                            let b = part.bucket(start);
                            slices[b][fill[b]] = Row::new(start, band, v.0);
                            fill[b] += 1;
                        }
                    }
                });
        }

        // (Positions inside a bucket are sorted as `u32`.)
        if (0..nb).any(|b| u32::try_from(offsets[b + 1] - offsets[b]).is_err()) {
            return Err(OkvsError::TooLarge);
        }

        // 3. Sort and eliminate bucket by bucket. Sorting bucket b + 1 and eliminating
        //    the rows of bucket b that cannot reach it touch disjoint rows, so they
        //    run in parallel (sequentially on a one-thread pool).
        let width = part.width;
        let mut scratch = (Vec::new(), Vec::new(), Vec::new());
        let mut sort = |bucket: &mut [Row], b: usize| {
            let (rows_tmp, counts, order) = &mut scratch;
            sort_bucket(bucket, b * width, width, rows_tmp, counts, order);
        };
        sort(&mut rows[..offsets[1]], 0);
        let mut next = 0;
        for b in 0..nb {
            // Rows starting at or before `limit` only reach sorted rows.
            let limit = if b + 1 == nb {
                Some(usize::MAX)
            } else {
                ((b + 1) * width).checked_sub(self.w)
            };
            let (sorted, rest) = rows.split_at_mut(offsets[b + 1]);
            let next_bucket = if b + 1 < nb {
                rest.get_mut(..offsets[b + 2] - offsets[b + 1])
            } else {
                None
            };
            let (eliminated, ()) = rayon::join(
                || match limit {
                    Some(limit) => eliminate(sorted, next, limit),
                    None => Ok(next),
                },
                || {
                    if let Some(bucket) = next_bucket {
                        sort(bucket, b + 1);
                    }
                },
            );
            next = eliminated?;
        }
        Ok(rows)
    }

    /// Solve for a vector `P` of length `m` with `decode(P, keys[i]) = values[i]`.
    ///
    /// Free (unconstrained) entries are taken from `fill` (zero if `None`). Hashing
    /// and row construction run on the rayon pool; sorting, elimination and back
    /// substitution are sequential. The result is the same as textbook RB-OKVS elimination in
    /// start order followed by back substitution with zero/`fill` free variables.
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
        // Rows must fit: n ≤ m is necessary for solvability.
        if n > self.m {
            return Err(OkvsError::EncodingFailed);
        }
        if n == 0 {
            return self.initial_vector(fill);
        }
        // 1. Rows sorted by start (stable in the input index), eliminated. Duplicate
        //    keys give identical rows and hence always make elimination fail, so
        //    they are only looked for on failure.
        // (The output vector is allocated, and its pages faulted in, meanwhile.)
        let (p, rows) = rayon::join(
            || self.initial_vector(fill),
            || self.eliminated_rows(keys, values),
        );
        let rows = match rows {
            Ok(rows) => rows,
            Err(OkvsError::EncodingFailed) => {
                return Err(self
                    .find_duplicate(keys)
                    .unwrap_or(OkvsError::EncodingFailed));
            }
            Err(e) => return Err(e),
        };
        let mut p = p?;

        // 2. Back substitution.
        back_substitute(&rows, &mut p, self.w)?;
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

    /// [`Okvs::decode_batch`] on the current rayon thread pool (same results).
    pub fn par_decode_batch(&self, keys: &[[u8; 16]], out: &mut [Gf128]) -> Result<(), OkvsError> {
        self.layout.par_decode_batch(&self.p, keys, out)
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

    /// The original (pre-optimisation) solver, kept as a reference: rows sorted by
    /// start with a counting sort, branchy elimination, back substitution in
    /// decreasing pivot-column order with sparse XORs.
    fn reference_solve(
        layout: &OkvsLayout,
        keys: &[[u8; 16]],
        values: &[Gf128],
        fill: Option<[u8; 16]>,
    ) -> Result<Vec<Gf128>, OkvsError> {
        fn shr_bits(b: &Bits, d: usize) -> Bits {
            let (q, r) = (d / 64, (d % 64) as u32);
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
        let test_bit = |b: &Bits, i: usize| (b[i / 64] >> (i % 64)) & 1 == 1;
        let n = keys.len();
        let (m, w) = (layout.m, layout.w);
        if n > m {
            return Err(OkvsError::EncodingFailed);
        }
        let mut starts_in = vec![0usize; n];
        let mut bands_in = vec![[0u64; WORDS]; n];
        layout.rows_into(keys, &mut starts_in, &mut bands_in);
        let buckets = m - w + 1;
        let mut offsets = vec![0usize; buckets + 1];
        for &s in &starts_in {
            offsets[s + 1] += 1;
        }
        for b in 0..buckets {
            offsets[b + 1] += offsets[b];
        }
        let mut order = vec![0usize; n];
        let mut cursor = offsets.clone();
        for (i, &s) in starts_in.iter().enumerate() {
            order[cursor[s]] = i;
            cursor[s] += 1;
        }
        for b in 0..buckets {
            let bucket = &mut order[offsets[b]..offsets[b + 1]];
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
        let starts: Vec<usize> = order.iter().map(|&i| starts_in[i]).collect();
        let mut bits: Vec<Bits> = order.iter().map(|&i| bands_in[i]).collect();
        let mut vals: Vec<Gf128> = order.iter().map(|&i| values[i]).collect();
        let mut pivot = vec![0usize; n];
        for i in 0..n {
            let row = bits[i];
            let lead = first_bit(&row).ok_or(OkvsError::EncodingFailed)?;
            pivot[i] = lead;
            let c = starts[i] + lead;
            let mut j = i + 1;
            while j < n && starts[j] <= c {
                if test_bit(&bits[j], c - starts[j]) {
                    let shifted = shr_bits(&row, starts[j] - starts[i]);
                    for k in 0..WORDS {
                        bits[j][k] ^= shifted[k];
                    }
                    let vi = vals[i];
                    vals[j] += vi;
                }
                j += 1;
            }
        }
        let mut p = vec![Gf128::ZERO; m];
        if let Some(fill_seed) = fill {
            let cipher = Aes128::new(&Array::from(fill_seed));
            for (k, x) in p.iter_mut().enumerate() {
                let mut block = Array::from((k as u128).to_le_bytes());
                cipher.encrypt_block(&mut block);
                *x = Gf128(u128::from_le_bytes(block.0));
            }
        }
        let mut row_of_col = vec![usize::MAX; m];
        for r in 0..n {
            row_of_col[starts[r] + pivot[r]] = r;
        }
        for col in (0..m).rev() {
            let r = row_of_col[col];
            if r == usize::MAX {
                continue;
            }
            let mut band = bits[r];
            band[pivot[r] / 64] &= !(1u64 << (pivot[r] % 64));
            p[col] = vals[r] + xor_selected(&p[starts[r]..], &band);
        }
        Ok(p)
    }

    /// The optimised solver produces exactly the reference vector (same pivots, same
    /// free entries), for default and unusual parameters, with and without fill.
    #[test]
    fn matches_reference_solver() {
        let cases: &[(usize, f64, usize)] = &[
            (0, 0.1, 224),
            (1, 0.1, 224),
            (5, 0.1, 224),
            (100, 0.1, 224),
            (176, 0.1, 224),
            (177, 0.1, 224),
            (1000, 0.1, 224),
            (20_000, 0.1, 224),
            // Coarse buckets of a non-power-of-two width (5153 columns).
            (300_000, 0.1, 224),
            (20_000, 0.1, 256),
            (20_000, 0.15, 192),
            (5000, 0.1, 130),
            (5000, 0.2, 128),
            (5000, 0.3, 100),
            (5000, 0.5, 64),
            (3000, 1.0, 33),
            (2000, 0.1, 32),
            (2000, 0.0, 8),
        ];
        for (t, &(n, eps, w)) in cases.iter().enumerate() {
            let params = OkvsParams::new(eps, w).unwrap();
            let (keys, vals) = data(n, 1000 + t as u64);
            for s in 0..3u64 {
                let layout = OkvsLayout::for_items(n, seed(s * 77 + t as u64), params).unwrap();
                for fill in [None, Some([s as u8; 16])] {
                    let fast = layout.solve(&keys, &vals, fill);
                    let slow = reference_solve(&layout, &keys, &vals, fill);
                    assert_eq!(fast, slow, "n={n} eps={eps} w={w} seed={s} fill={fill:?}");
                }
            }
        }
    }

    #[test]
    fn duplicates_match_reference() {
        // Several duplicate groups; the reported pair must match the reference.
        let (mut keys, vals) = data(30_000, 17);
        for (a, b) in [(5, 29_000), (7, 9), (7, 20_000), (12_345, 3), (100, 101)] {
            keys[b] = keys[a];
        }
        for s in 0..4 {
            let layout = OkvsLayout::for_items(keys.len(), seed(s), OkvsParams::default()).unwrap();
            let fast = layout.solve(&keys, &vals, None).unwrap_err();
            let slow = reference_solve(&layout, &keys, &vals, None).unwrap_err();
            assert_eq!(fast, slow);
        }
        // Many copies of one key (long run of equal starts).
        let (mut keys, vals) = data(5000, 18);
        for i in (1000..1040).rev() {
            keys[i] = keys[4999];
        }
        let layout = OkvsLayout::for_items(keys.len(), seed(9), OkvsParams::default()).unwrap();
        assert_eq!(
            layout.solve(&keys, &vals, None).unwrap_err(),
            OkvsError::DuplicateKey {
                index_a: 1000,
                index_b: 1001
            }
        );
    }

    /// Table decoder, streaming decoder, single-key decoder and the parallel decoder
    /// agree on an arbitrary vector, for encoded and unrelated keys.
    #[test]
    fn batch_decoders_agree() {
        // m = 55_000, 33_002 (m mod 4 = 2), 30_001 (m mod 4 = 1).
        for (n, eps, w) in [
            (50_000usize, 0.1, 224),
            (30_001, 0.1, 256),
            (20_000, 0.50005, 61),
        ] {
            let params = OkvsParams::new(eps, w).unwrap();
            let layout = OkvsLayout::for_items(n, seed(n as u64), params).unwrap();
            assert!(n == 50_000 || !layout.m().is_multiple_of(4));
            let mut rng = Rng(n as u64);
            let vector: Vec<Gf128> = (0..layout.m()).map(|_| rng.gf()).collect();
            for count in [0usize, 1, 100, SORTED_DECODE_MIN, n, 2 * n + 3] {
                let keys: Vec<[u8; 16]> = (0..count).map(|_| rng.key()).collect();
                let single: Vec<Gf128> = keys
                    .iter()
                    .map(|k| layout.decode(&vector, k).unwrap())
                    .collect();
                let mut batch = vec![Gf128::ZERO; count];
                layout.decode_batch(&vector, &keys, &mut batch).unwrap();
                assert_eq!(batch, single, "n={n} w={w} count={count}");
                for threads in [1, 2, 3] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    let mut par = vec![Gf128::ZERO; count];
                    pool.install(|| layout.par_decode_batch(&vector, &keys, &mut par))
                        .unwrap();
                    assert_eq!(par, single, "n={n} w={w} count={count} threads={threads}");
                }
            }
        }
    }

    #[test]
    fn par_decode_equals_serial_decode() {
        let n = 1 << 17;
        let (keys, vals) = data(n, 71);
        let okvs = encode(&keys, &vals, seed(71)).unwrap();
        let mut serial = vec![Gf128::ZERO; n];
        okvs.decode_batch(&keys, &mut serial).unwrap();
        assert_eq!(serial, vals);
        let mut par = vec![Gf128::ZERO; n];
        okvs.par_decode_batch(&keys, &mut par).unwrap();
        assert_eq!(par, serial);
        let mut short = vec![Gf128::ZERO; n - 1];
        assert!(okvs.par_decode_batch(&keys, &mut short).is_err());
        assert!(
            okvs.layout()
                .par_decode_batch(&vals[..3], &keys, &mut par)
                .is_err()
        );
    }

    #[test]
    fn encode_independent_of_thread_count() {
        let n = 100_000;
        let (keys, vals) = data(n, 81);
        let reference = encode_randomized(&keys, &vals, seed(81), [3u8; 16]).unwrap();
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let o = pool
                .install(|| encode_randomized(&keys, &vals, seed(81), [3u8; 16]))
                .unwrap();
            assert_eq!(o.as_slice(), reference.as_slice());
        }
    }

    /// On-CPU time of the current thread in ms (Linux; excludes time spent
    /// descheduled, which matters on a shared machine). Falls back to wall time.
    fn cpu_ms() -> f64 {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
            .map(|ns| ns / 1e6)
            .unwrap_or_else(|| {
                use std::sync::OnceLock;
                static T0: OnceLock<Instant> = OnceLock::new();
                T0.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3
            })
    }

    /// Per-phase on-CPU times of encode / decode at 2^20, one thread (min of 7 runs). A timing
    /// diagnostic, kept here rather than in `benches/codes.rs` (where encode and decode are
    /// timed) because the phases are private: `cargo test --release -p blindjoin-crypto --lib
    /// phase_breakdown_2_20 -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing of private phases: run by hand in release mode"]
    fn phase_breakdown_2_20() {
        let n = 1 << 20;
        let (keys, vals) = data(n, 61);
        let layout = OkvsLayout::for_items(n, seed(61), OkvsParams::default()).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        pool.install(|| {
            let mut best = [f64::MAX; 4];
            for _ in 0..7 {
                let mut t = cpu_ms();
                let mut lap = |i: usize, best: &mut [f64; 4]| {
                    let now = cpu_ms();
                    best[i] = best[i].min(now - t);
                    t = now;
                };
                let rows = layout.eliminated_rows(&keys, &vals).unwrap();
                lap(0, &mut best);
                let mut p = layout.initial_vector(None).unwrap();
                lap(1, &mut best);
                back_substitute(&rows, &mut p, layout.w).unwrap();
                lap(2, &mut best);
                let mut out = vec![Gf128::ZERO; n];
                layout.decode_batch(&p, &keys, &mut out).unwrap();
                lap(3, &mut best);
                assert_eq!(out, vals);
            }
            println!(
                "hash+partition+sort+eliminate {:.1} | allocate P {:.1} | back-substitute \
                 {:.1} | decode_batch {:.1} (ms on-CPU)",
                best[0], best[1], best[2], best[3]
            );
        });
    }
}
#[cfg(test)]
mod empirical {
    use super::*;
    /// Empirical failure rates: reduced band widths (to show the trend) and the
    /// default parameters in the small-n regime. Slow, and it prints the rates rather than
    /// asserting them: `cargo test --release -p blindjoin-crypto --lib
    /// empirical_failure_rates -- --ignored --nocapture`.
    #[test]
    #[ignore = "slow measurement of failure rates, not a timing: run by hand in release mode"]
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
