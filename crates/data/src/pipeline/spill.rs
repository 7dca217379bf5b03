//! Tables too big for memory: one streaming pass over the input writes every row, with its key
//! and digest, into `P` on-disk shards by the same portable hash the buckets use
//! ([`crate::pipeline::bucket`]); the run then loads one shard group at a time, so peak memory follows
//! the shard size and not the table.
//!
//! A shard holds the rows whose digest's bucket hash (the top bits of [`order_key`]) starts with
//! its `log2 P` bits. `P` is a power of two picked from the file size before reading, and the
//! protocol's bucket count `B` is a power of two agreed later from both parties' row counts, so
//! a unit of `max(P, B) / min(P, B)` shards or buckets always lines up: a shard splits into
//! whole buckets, or a bucket is a run of whole shards.
//!
//! The shards are our own temporary files, deleted when the [`SpilledTable`] drops; they are
//! still checked on load, and a bad one is an error, never a panic.
//!
//! A row in a shard file is its order key (16 bytes, little endian), then three LEB128 varints
//! — the row number's gap from the shard's previous row (from 0 for its first), the key's
//! length, the raw row's length — then the key and the raw row. A 17-byte id line spills in
//! 16 + 3 + 20 + 16 = 55 bytes (fixed-width fields would take 68).

use crate::error::DataError;
use crate::spec::TableFormat;
use crate::table::csv::{CsvError, CsvReader, FieldSpan, RecordSpan};
use crate::table::keys::{KeyColumns, SETTLE_BY_COMPARISON, cmp_keys, key_prefix, sort_by_key};
use crate::table::parquet_io::{ParquetRows, RowBatch};
use crate::table::private_fs;
use crate::table::rows::order_key;
use crate::table::writer::Columns;
use blindjoin_crypto::{ITEM_DIGEST_LANES, ItemDigest, item_digest, item_digests};
use blindjoin_link::{MAX_VARINT_LEN, MAX_VARINT64_LEN, read_varint_u64, varint_bytes};
use blindjoin_protocols::{Progress, ProtocolError, Unit};
use rayon::prelude::*;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Input bytes parsed per block.
const BLOCK_BYTES: usize = 32 << 20;
/// Input bytes per shard; a shard's spill is about twice that (key and digest per row).
const SHARD_INPUT_BYTES: u64 = 64 << 20;
/// Most shards (each has an open file and a write buffer during the spill).
const MAX_SHARDS: usize = 4096;
/// Most bytes of a spilled row's head: order key, then varints of the row gap (u64), the key
/// length and the raw length (u32 each); see the module docs.
const HEAD_MAX: usize = 16 + MAX_VARINT64_LEN + 2 * MAX_VARINT_LEN;
/// Fewest bytes of a spilled row: its head with one-byte varints, a one-field key (length word
/// and one byte) and one raw byte.
const ROW_MIN: usize = 16 + 3 + 4 + 1 + 1;

/// A table split into hash shards, on disk or in memory.
pub struct SpilledTable {
    /// The columns, and how rows are carried.
    pub columns: Columns,
    /// Data rows.
    pub rows: u64,
    store: Store,
    shards: usize,
}

/// Where a table's shards are kept.
enum Store {
    Disk(SpillDir),
    /// Shards in memory, each taken out (`None`) while its unit is loaded, until it is given
    /// back: a second load of a taken unit is an error, never an empty unit.
    Memory(Vec<Option<MemShard>>),
}

/// A shard in memory: its rows already indexed (no row heads to write and parse again).
#[derive(Default)]
struct MemShard {
    /// Each row's key, then its raw bytes.
    bytes: Vec<u8>,
    rows: Vec<SpillRow>,
}

/// Where [`spill`] puts the shards.
pub enum SpillTo {
    /// Files in this directory (bounded memory).
    Disk(SpillDir),
    /// Memory: the same layout, for inputs that fit (buckets stay compact, so this is faster
    /// than working on the parsed file in place).
    Memory,
}

/// A shard being written.
enum Sink {
    /// A shard file, and the last row written to it (rows are written as gaps from it).
    File(PathBuf, BufWriter<File>, u64),
    Memory(MemShard),
}

impl Sink {
    fn write_row(
        &mut self,
        order: u128,
        row: u64,
        key: &[u8],
        raw: &[u8],
    ) -> Result<(), DataError> {
        // Lengths are kept as `u32` (shard heads, `SpillRow`).
        if u32::try_from(key.len().max(raw.len())).is_err() {
            return Err(DataError::Io {
                path: match self {
                    Sink::File(path, ..) => path.clone(),
                    Sink::Memory(_) => PathBuf::from("<memory>"),
                },
                action: "keeping a row (rows of 4 GiB or more are not supported)",
                source: std::io::Error::from(std::io::ErrorKind::InvalidData),
            });
        }
        match self {
            Sink::Memory(m) => {
                m.rows.push(SpillRow::new(
                    order,
                    row,
                    m.bytes.len(),
                    key,
                    raw.len() as u32,
                ));
                m.bytes.extend_from_slice(key);
                m.bytes.extend_from_slice(raw);
                Ok(())
            }
            Sink::File(path, w, last) => {
                // `scan_blocks` hands rows over in file order.
                let gap = row.checked_sub(*last).ok_or(DataError::Protocol(
                    ProtocolError::Unreachable("spill rows out of order"),
                ))?;
                *last = row;
                let mut h = [0u8; HEAD_MAX];
                let len = head(order, gap, key, raw, &mut h);
                w.write_all(&h[..len])
                    .and_then(|()| w.write_all(key))
                    .and_then(|()| w.write_all(raw))
                    .map_err(|source| DataError::Io {
                        path: path.clone(),
                        action: "writing a spill shard (is the disk full?)",
                        source,
                    })
            }
        }
    }
}

/// Writes a spilled row's head (see the module docs) into `h`; returns its length.
fn head(order: u128, gap: u64, key: &[u8], raw: &[u8], h: &mut [u8; HEAD_MAX]) -> usize {
    h[..16].copy_from_slice(&order.to_le_bytes());
    let mut at = 16;
    for v in [gap, key.len() as u64, raw.len() as u64] {
        let (bytes, len) = varint_bytes(v);
        h[at..at + len].copy_from_slice(&bytes[..len]);
        at += len;
    }
    at
}

/// One row in a loaded shard group. The order key is kept as two words so the row is 48 bytes
/// (a `u128` would align it to 64): a million of them are sorted per bucket.
#[derive(Clone, Copy, Debug)]
struct SpillRow {
    order_hi: u64,
    order_lo: u64,
    row: u64,
    /// Offset of the key in the group's bytes; the raw row follows it.
    at: usize,
    key_len: u32,
    raw_len: u32,
    /// The first 8 bytes of the key's order-preserving encoding ([`key_prefix`]): what the
    /// rows are sorted by before any key is read again.
    prefix: u64,
}

impl SpillRow {
    fn new(order: u128, row: u64, at: usize, key: &[u8], raw_len: u32) -> Self {
        SpillRow {
            order_hi: (order >> 64) as u64,
            order_lo: order as u64,
            row,
            at,
            key_len: key.len() as u32,
            raw_len,
            prefix: (key_prefix(key) >> 64) as u64,
        }
    }

    fn order(&self) -> u128 {
        (u128::from(self.order_hi) << 64) | u128::from(self.order_lo)
    }
}

/// Sorts a unit's rows by bucket among `b`, then by key ([`cmp_keys`]), then by input row.
///
/// Sorting by key here, by the prefix each row carries, is what lets the per-bucket work take
/// matched and unmatched groups in key order for free: sorting them by key after the protocol
/// reaches each key at random. Equal keys end up next to each other, as key groups need (equal
/// keys have equal digests).
fn sort_rows(bytes: &[u8], mut rows: Vec<SpillRow>, b: usize) -> Vec<SpillRow> {
    let bucket = |r: &SpillRow| crate::table::rows::bucket_of_order(r.order(), b);
    if b == 1 {
        // One bucket (every run up to `bucket_size` keys): no bucket to compute per comparison.
        rows.par_sort_unstable_by_key(|r| (r.prefix, r.row));
    } else {
        rows.par_sort_unstable_by_key(|r| (bucket(r), r.prefix, r.row));
    }
    let key = |r: &SpillRow| &bytes[r.at..r.at + r.key_len as usize];
    let mut i = 0;
    while i < rows.len() {
        let tie = (bucket(&rows[i]), rows[i].prefix);
        let len = rows[i..]
            .iter()
            .position(|r| (bucket(r), r.prefix) != tie)
            .unwrap_or(rows.len() - i);
        let run = &mut rows[i..i + len];
        // Short runs by full comparisons; long ones (keys sharing a long prefix) by
        // `sort_by_key`, which reads each key once per 16 bytes, not once per comparison: the
        // same split, at the same length, as `sort_by_key`'s own settling.
        if len < SETTLE_BY_COMPARISON {
            run.sort_unstable_by(|x, y| cmp_keys(key(x), key(y)).then(x.row.cmp(&y.row)));
        } else {
            // Positions in the run are in row order already: ties go by position.
            let mut at: Vec<usize> = (0..len).collect();
            sort_by_key(&mut at, |p| key(&run[p]));
            let sorted: Vec<SpillRow> = at.iter().map(|&p| run[p]).collect();
            run.copy_from_slice(&sorted);
        }
        i += len;
    }
    rows
}

/// The rows of some whole buckets, loaded from their shards and sorted by bucket, key and row
/// ([`sort_rows`]).
pub struct LoadedGroup {
    bytes: Vec<u8>,
    rows: Vec<SpillRow>,
}

/// The rows of one bucket in a [`LoadedGroup`], sorted by key and row: what the
/// per-bucket work ([`crate::pipeline::process`]) reads.
pub struct GroupBucket<'a> {
    bytes: &'a [u8],
    rows: &'a [SpillRow],
}

impl GroupBucket<'_> {
    /// Rows in the bucket.
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    /// The order key of the `i`-th row (see [`order_key`]).
    pub fn order(&self, i: usize) -> u128 {
        self.rows[i].order()
    }
    /// Its row number in the input (0-based, header excluded).
    pub fn row(&self, i: usize) -> u64 {
        self.rows[i].row
    }
    /// Its canonical key.
    pub fn key(&self, i: usize) -> &[u8] {
        let r = &self.rows[i];
        &self.bytes[r.at..r.at + r.key_len as usize]
    }
    /// Its bytes as in the input, without the line terminator.
    pub fn raw(&self, i: usize) -> &[u8] {
        let r = &self.rows[i];
        let start = r.at + r.key_len as usize;
        &self.bytes[start..start + r.raw_len as usize]
    }

    /// The key group of rows `start..end` (consecutive, equal keys), with where its first row
    /// lies. Taken in a first walk over the row entries (in order), it lets the walk that
    /// writes the groups reach each group's key and bytes with one cache miss instead of two
    /// (the row entry, then the bytes it points at).
    pub fn group(&self, start: usize, end: usize) -> GroupRef {
        let r = &self.rows[start];
        GroupRef {
            start,
            end,
            at: r.at,
            key_len: r.key_len,
            raw_len: r.raw_len,
        }
    }
    /// A group's canonical key.
    pub fn group_key(&self, g: &GroupRef) -> &[u8] {
        &self.bytes[g.at..g.at + g.key_len as usize]
    }
    /// A group's rows as in the input: the first from the group's own record of it, the others
    /// (duplicates of the key, next to it in the bucket) from their entries.
    pub fn group_rows<'s>(&'s self, g: &GroupRef) -> impl Iterator<Item = &'s [u8]> + 's {
        let first = g.at + g.key_len as usize;
        std::iter::once(&self.bytes[first..first + g.raw_len as usize])
            .chain((g.start + 1..g.end).map(|i| self.raw(i)))
    }

    /// Loads the groups' first rows (a short list, at most [`WARM_BATCH`]) into the cache
    /// before they are read in that order. Rows sit in the bucket in key order and their
    /// bytes in file order, so a key-ordered walk misses the cache once per group; a loop
    /// that does nothing but load lets the CPU run dozens of those misses at once, where the
    /// copy loop that follows would run two or three.
    pub fn warm<'g>(&self, groups: impl Iterator<Item = &'g GroupRef>) {
        let mut acc = 0u8;
        let byte = |i: usize| self.bytes.get(i).copied().unwrap_or(0);
        for g in groups.take(WARM_BATCH) {
            // The row's first and last byte: its one or two cache lines.
            let end = g.at + g.key_len as usize + g.raw_len as usize;
            acc ^= byte(g.at) ^ byte(end.saturating_sub(1));
        }
        std::hint::black_box(acc);
    }
}

/// One key group of a [`GroupBucket`]: its rows `start..end`, and where the first one's key
/// and bytes lie (see [`GroupBucket::group`]). Orders by `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupRef {
    /// The group's first row in the bucket.
    pub start: usize,
    /// One past its last row.
    pub end: usize,
    at: usize,
    key_len: u32,
    raw_len: u32,
}

impl GroupRef {
    /// Rows in the group (one unless the key repeats).
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Bytes of its key and first row.
    pub fn bytes(&self) -> usize {
        self.key_len as usize + self.raw_len as usize
    }
}

/// Rows per [`GroupBucket::warm`] call: their lines (two per row plus the row entries) stay
/// well inside a core's L2.
pub const WARM_BATCH: usize = 512;

impl LoadedGroup {
    /// The rows of bucket `k` of `b` (which must be among this group's buckets; others are
    /// empty).
    pub fn bucket(&self, k: usize, b: usize) -> GroupBucket<'_> {
        // Rows are sorted by order key, whose top bits are the bucket.
        let bucket = |r: &SpillRow| crate::table::rows::bucket_of_order(r.order(), b);
        let start = self.rows.partition_point(|r| bucket(r) < k);
        let end = self.rows.partition_point(|r| bucket(r) <= k);
        GroupBucket {
            bytes: &self.bytes,
            rows: &self.rows[start..end],
        }
    }
}

/// Tests set this to force a shard count (0: by size).
#[cfg(test)]
pub(crate) static TEST_SHARDS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Shards for an input of `size` bytes: the power of two at or above `size / 64 MiB`.
fn shard_count(size: u64) -> usize {
    #[cfg(test)]
    {
        let forced = TEST_SHARDS.load(std::sync::atomic::Ordering::Relaxed);
        if forced > 0 {
            return forced;
        }
    }
    (size.div_ceil(SHARD_INPUT_BYTES).max(1) as usize)
        .next_power_of_two()
        .min(MAX_SHARDS)
}

/// Streams the table at `path` (CSV or Parquet, as `format` says) into shards, in memory or
/// under a new directory.
///
/// # Errors
/// Unreadable or malformed input (named by line and column, or row and column for Parquet), a
/// missing key column, an empty or non-UTF-8 key, or a full disk.
pub fn spill(
    path: &Path,
    format: TableFormat,
    keys: &[String],
    to: SpillTo,
    progress: &dyn Progress,
) -> Result<SpilledTable, DataError> {
    match format {
        TableFormat::Csv => spill_in_blocks(path, keys, to, progress, BLOCK_BYTES),
        TableFormat::Parquet => spill_parquet(path, keys, to, progress),
    }
}

/// The bytes a table takes decoded: a CSV file's size, or what a Parquet file's footer says
/// its row groups take uncompressed (what sizes shards and decides whether to spill).
pub fn table_bytes(path: &Path, format: TableFormat) -> u64 {
    match format {
        TableFormat::Csv => std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        TableFormat::Parquet => ParquetRows::open(path, &[])
            .map(|t| t.decoded_bytes())
            .unwrap_or(0),
    }
}

fn spill_in_blocks(
    path: &Path,
    keys: &[String],
    to: SpillTo,
    progress: &dyn Progress,
    block_bytes: usize,
) -> Result<SpilledTable, DataError> {
    let io = |action: &'static str| io_error(path, action);
    let mut file = File::open(path).map_err(io("reading the input"))?;
    let size = file.metadata().map_err(io("reading the input"))?.len();
    let shards = shard_count(size);
    let mut writers = shard_writers(&to, size, shards)?;
    progress.stage_in(stage_name(&to), size, Unit::Bytes);
    let (header, rows) = scan_blocks(
        path,
        &mut file,
        keys,
        shards,
        progress,
        block_bytes,
        &mut writers,
    )?;
    finish_shards(writers, to, Columns::csv(header), rows, shards)
}

/// [`spill`] of a Parquet table, record batch by record batch.
fn spill_parquet(
    path: &Path,
    keys: &[String],
    to: SpillTo,
    progress: &dyn Progress,
) -> Result<SpilledTable, DataError> {
    let mut table = ParquetRows::open(path, keys)?;
    let size = table.decoded_bytes();
    let shards = shard_count(size);
    let mut writers = shard_writers(&to, size, shards)?;
    progress.stage_in(stage_name(&to), table.total_rows(), Unit::Rows);
    let rows = scan_parquet(&mut table, shards, progress, &mut writers)?;
    let columns = Columns {
        header: table.header(),
        schema: Some(table.schema().clone()),
    };
    finish_shards(writers, to, columns, rows, shards)
}

fn stage_name(to: &SpillTo) -> &'static str {
    match to {
        SpillTo::Memory => "reading input",
        SpillTo::Disk(_) => "spilling input to disk",
    }
}

/// The shard writers for a table of about `size` bytes.
fn shard_writers(to: &SpillTo, size: u64, shards: usize) -> Result<Vec<Sink>, DataError> {
    let buffer = ((64usize << 20) / shards).clamp(64 << 10, 1 << 20);
    (0..shards)
        .map(|s| match to {
            // A row takes its raw bytes and its key (about as long as a field): reserve twice
            // the input's share up front (only touched pages cost memory), so the shard rarely
            // grows by copying.
            SpillTo::Memory => Ok(Sink::Memory(MemShard {
                bytes: Vec::with_capacity(
                    usize::try_from(size / shards as u64 * 2).unwrap_or(0) + (64 << 10),
                ),
                rows: Vec::new(),
            })),
            SpillTo::Disk(dir) => {
                let p = dir.shard(s);
                dir.new_file(&p)
                    .map(|f| Sink::File(p.clone(), BufWriter::with_capacity(buffer, f), 0))
                    .map_err(|source| DataError::Io {
                        path: p,
                        action: "creating a spill shard (is the spill directory writable?)",
                        source,
                    })
            }
        })
        .collect()
}

/// Flushes the shard writers and makes the table.
fn finish_shards(
    writers: Vec<Sink>,
    to: SpillTo,
    columns: Columns,
    rows: u64,
    shards: usize,
) -> Result<SpilledTable, DataError> {
    // Shards a checkpoint will name (recovery) must be on disk before it does; a private
    // directory dies with the run, so its shards only need to reach the page cache (syncing
    // them wrote the whole table to the disk and waited for it: ≈ 1 GiB at 2^24 rows).
    let durable = matches!(&to, SpillTo::Disk(dir) if !dir.remove_on_drop);
    let mut in_memory = Vec::new();
    for w in writers {
        match w {
            Sink::Memory(v) => in_memory.push(v),
            Sink::File(p, w, _) => {
                w.into_inner()
                    .map_err(|e| e.into_error())
                    .and_then(|f| if durable { f.sync_data() } else { Ok(()) })
                    .map_err(|source| DataError::Io {
                        path: p,
                        action: "writing a spill shard (is the disk full?)",
                        source,
                    })?;
            }
        }
    }
    let store = match to {
        SpillTo::Memory => Store::Memory(in_memory.into_iter().map(Some).collect()),
        SpillTo::Disk(dir) => Store::Disk(dir),
    };
    Ok(SpilledTable {
        columns,
        rows,
        store,
        shards,
    })
}

/// One row as [`scan_blocks`] read it.
struct ScannedRow<'a> {
    order: u128,
    shard: usize,
    row: u64,
    /// The canonical key.
    key: &'a [u8],
    /// The row as in the file, without its line end.
    raw: &'a [u8],
}

/// Where [`scan_blocks`] hands the rows it reads.
trait RowSink {
    /// The file likely holds about `rows` rows (said once, after the first block).
    fn reserve(&mut self, rows: usize);
    /// One row, in file order.
    fn row(&mut self, r: ScannedRow<'_>) -> Result<(), DataError>;
}

/// The spill's shard writers.
impl RowSink for Vec<Sink> {
    fn reserve(&mut self, rows: usize) {
        let shards = self.len().max(1);
        for w in self.iter_mut() {
            if let Sink::Memory(m) = w {
                m.rows.reserve(rows / shards + 1);
            }
        }
    }

    fn row(&mut self, r: ScannedRow<'_>) -> Result<(), DataError> {
        // `scan_blocks` computes `shard` below the shard count it was given (ours).
        self[r.shard].write_row(r.order, r.row, r.key, r.raw)
    }
}

/// Key digests only, in file order.
/// Streams `file` (the CSV at `path`) in blocks of about `block_bytes`: parses each block's whole
/// records, keys and hashes them (on all cores) and hands every row to `emit` in file order as
/// (order key, shard of `shards`, row number, canonical key, raw bytes). Returns the header and
/// the row count. Memory stays at about two blocks whatever the file's size.
fn scan_blocks(
    path: &Path,
    file: &mut File,
    keys: &[String],
    shards: usize,
    progress: &dyn Progress,
    block_bytes: usize,
    sink: &mut dyn RowSink,
) -> Result<(Vec<String>, u64), DataError> {
    let io = |action: &'static str| io_error(path, action);
    let mut block = Vec::with_capacity(block_bytes + (1 << 20));
    let mut eof = fill(file, &mut block, block_bytes).map_err(io("reading the input"))?;
    // The header must be whole in the first block: grow it until the header line ends.
    let (header, key_cols, mut consumed, mut line) = loop {
        let ends_line = |r: &CsvReader<'_>| r.offset() < block.len() || block.ends_with(b"\n");
        match CsvReader::new(&block, path) {
            Ok(reader) if eof || ends_line(&reader) => {
                let key_cols = KeyColumns::find(&reader, keys)?;
                break (
                    reader.header().to_vec(),
                    key_cols,
                    reader.offset(),
                    reader.line(),
                );
            }
            Err(e) if eof || !matches!(e, CsvError::UnterminatedQuote { .. }) => {
                return Err(e.into());
            }
            _ => {
                let target = block.len() * 2;
                eof = fill(file, &mut block, target).map_err(io("reading the input"))?;
            }
        }
    };
    let mut rows = 0u64;
    let mut want = block_bytes;
    let mut parsed = ParsedBlock::default();
    loop {
        let tail = &block[consumed..];
        // Parse up to the last line end (or everything at the end of the file); a quoted field
        // that spans the cut shows up as an unterminated quote and waits for the next block.
        let limit = if eof {
            tail.len()
        } else {
            tail.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1)
        };
        let (used, next_line) =
            parsed.parse(&tail[..limit], path, &header, line, &key_cols, eof)?;
        if rows == 0 && used > 0 {
            // Rows the whole file likely holds, from the first block's bytes per row (10 %
            // over): the row vectors are sized once instead of doubling (each doubling copies
            // them and touches fresh pages).
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            let per_row = (used / parsed.records.len().max(1)).max(1) as u64;
            sink.reserve(usize::try_from(size / per_row + size / per_row / 10).unwrap_or(0));
        }
        let orders = parsed.hash();
        for (i, order) in orders.into_iter().enumerate() {
            let shard = crate::table::rows::bucket_of_order(order, shards);
            let rec = parsed.records[i];
            let key = parsed.key(i);
            let raw = &tail[rec.start..rec.end];
            sink.row(ScannedRow {
                order,
                shard,
                row: rows + i as u64,
                key,
                raw,
            })?;
        }
        rows += parsed.records.len() as u64;
        progress.advance(used as u64);
        consumed += used;
        line = next_line;
        if eof && consumed == block.len() {
            break;
        }
        // Keep the unparsed tail, then top the block up; a record longer than the block
        // doubles it.
        block.drain(..consumed);
        if used == 0 {
            want = want.saturating_mul(2);
        }
        consumed = 0;
        let target = want.max(block.len() + block_bytes / 2);
        eof = fill(file, &mut block, target).map_err(io("reading the input"))?;
    }
    Ok((header, rows))
}

/// One row of a table streamed by [`for_each_row`]; borrowed from the reader's block, so a
/// caller that keeps it copies what it needs.
pub struct StreamedRow<'a> {
    /// The key's item digest.
    pub digest: ItemDigest,
    /// The row's number in the file, from 0.
    pub row: u64,
    /// The canonical key.
    pub key: &'a [u8],
    /// The row as in a CSV file without its line end, or a Parquet table's typed row (what
    /// [`crate::table::writer::RowWriter`] takes).
    pub raw: &'a [u8],
}

/// Every row of the table at `path`, handed to `each` in file order as the table streams by;
/// returns the table's columns (a Parquet table's with its schema, for writing its rows) and
/// the row count. Nothing grows with the table: the reader holds about two 32 MiB blocks (CSV)
/// or one record batch (Parquet).
///
/// # Errors
/// As [`spill`], without the disk; and `each`'s.
pub fn for_each_row(
    path: &Path,
    format: TableFormat,
    keys: &[String],
    progress: &dyn Progress,
    each: &mut dyn FnMut(StreamedRow<'_>) -> Result<(), DataError>,
) -> Result<(Columns, u64), DataError> {
    let mut sink = EachRow(each);
    if format == TableFormat::Parquet {
        let mut table = ParquetRows::open(path, keys)?;
        progress.stage_in("reading input", table.total_rows(), Unit::Rows);
        let rows = scan_parquet(&mut table, 1, progress, &mut sink)?;
        let columns = Columns {
            header: table.header(),
            schema: Some(table.schema().clone()),
        };
        return Ok((columns, rows));
    }
    let mut file = File::open(path).map_err(io_error(path, "reading the input"))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    progress.stage_in("reading input", size, Unit::Bytes);
    let (header, rows) = scan_blocks(path, &mut file, keys, 1, progress, BLOCK_BYTES, &mut sink)?;
    Ok((Columns::csv(header), rows))
}

/// [`for_each_row`]'s sink: each row to a callback, nothing kept.
struct EachRow<'a>(&'a mut dyn FnMut(StreamedRow<'_>) -> Result<(), DataError>);

impl RowSink for EachRow<'_> {
    fn reserve(&mut self, _rows: usize) {}

    fn row(&mut self, r: ScannedRow<'_>) -> Result<(), DataError> {
        (self.0)(StreamedRow {
            digest: crate::table::rows::digest_of_order(r.order),
            row: r.row,
            key: r.key,
            raw: r.raw,
        })
    }
}

/// Every row's key digest of the table at `path`, handed to `each` in file order as the table
/// streams by ([`for_each_row`]); returns the row count. Nothing grows with the table: the
/// unbalanced-PSI server sorts the digests externally (`crate::ub::gen_cache`).
///
/// # Errors
/// As [`spill`], without the disk; and `each`'s.
pub fn for_each_key_digest(
    path: &Path,
    format: TableFormat,
    keys: &[String],
    progress: &dyn Progress,
    each: &mut dyn FnMut(ItemDigest) -> Result<(), DataError>,
) -> Result<u64, DataError> {
    for_each_row(path, format, keys, progress, &mut |r| each(r.digest)).map(|(_, rows)| rows)
}

/// Streams a Parquet table batch by batch, hashing each batch's keys on all cores, and hands
/// every row to `sink` in file order (as [`scan_blocks`] does for CSV); returns the row count.
fn scan_parquet(
    table: &mut ParquetRows,
    shards: usize,
    progress: &dyn Progress,
    sink: &mut dyn RowSink,
) -> Result<u64, DataError> {
    sink.reserve(usize::try_from(table.total_rows()).unwrap_or(0));
    let mut batch = RowBatch::default();
    let mut rows = 0u64;
    while table.next_batch(&mut batch)? {
        let orders = order_keys(batch.len(), |i| batch.key(i));
        for (i, order) in orders.into_iter().enumerate() {
            sink.row(ScannedRow {
                order,
                shard: crate::table::rows::bucket_of_order(order, shards),
                row: rows + i as u64,
                key: batch.key(i),
                raw: batch.row(i),
            })?;
        }
        rows += batch.len() as u64;
        progress.advance(batch.len() as u64);
    }
    Ok(rows)
}

/// Maps an I/O error on `path` while doing `action` to a [`DataError`].
fn io_error(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> DataError {
    let path = path.to_path_buf();
    move |source| DataError::Io {
        path,
        action,
        source,
    }
}

/// Appends to `block` until it holds `target` bytes or the file ends; returns whether it ended.
/// (`read_to_end` reads into the spare capacity without zeroing it first.)
fn fill(file: &mut File, block: &mut Vec<u8>, target: usize) -> std::io::Result<bool> {
    let want = target.saturating_sub(block.len()) as u64;
    if want == 0 {
        return Ok(false);
    }
    let got = Read::by_ref(file).take(want).read_to_end(block)?;
    Ok((got as u64) < want)
}

/// One block's records and canonical keys; reused from block to block.
#[derive(Default)]
struct ParsedBlock {
    records: Vec<RecordSpan>,
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    fields: Vec<FieldSpan>,
}

impl ParsedBlock {
    /// Parses the whole records in `bytes` (starting on `line`); returns the bytes used and
    /// the line after them.
    fn parse(
        &mut self,
        bytes: &[u8],
        path: &Path,
        header: &[String],
        line: u64,
        key_cols: &KeyColumns,
        eof: bool,
    ) -> Result<(usize, u64), DataError> {
        self.records.clear();
        self.keys.clear();
        self.key_ends.clear();
        let mut reader = CsvReader::resume(bytes, path, header, line);
        loop {
            let (at, at_line) = (reader.offset(), reader.line());
            match reader.next_record(&mut self.fields) {
                Ok(Some(rec)) => {
                    key_cols.append_key(bytes, &self.fields, rec.line, path, &mut self.keys)?;
                    self.key_ends.push(self.keys.len());
                    self.records.push(rec);
                }
                Ok(None) => return Ok((bytes.len(), reader.line())),
                Err(CsvError::UnterminatedQuote { .. }) if !eof => return Ok((at, at_line)),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.key_ends[i - 1] };
        &self.keys[start..self.key_ends[i]]
    }

    /// Each record's order key.
    fn hash(&self) -> Vec<u128> {
        order_keys(self.records.len(), |i| self.key(i))
    }
}

/// The order keys of `n` keys (`key(i)`), computed on all cores, [`ITEM_DIGEST_LANES`] keys at a
/// time.
fn order_keys<'k>(n: usize, key: impl Fn(usize) -> &'k [u8] + Sync) -> Vec<u128> {
    let mut orders = vec![0u128; n];
    orders
        .par_chunks_mut(ITEM_DIGEST_LANES)
        .with_min_len(256)
        .enumerate()
        .for_each(|(c, out)| {
            let first = c * ITEM_DIGEST_LANES;
            if out.len() == ITEM_DIGEST_LANES {
                let keys = std::array::from_fn(|l| key(first + l));
                for (o, d) in out.iter_mut().zip(item_digests(keys)) {
                    *o = order_key(&d);
                }
            } else {
                for (l, o) in out.iter_mut().enumerate() {
                    *o = order_key(&item_digest(key(first + l)));
                }
            }
        });
    orders
}

impl SpilledTable {
    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// A table spilled by an earlier run into `dir` (recovery), described by its checkpoint.
    ///
    /// # Errors
    /// A shard file is missing.
    pub fn reopen(
        dir: SpillDir,
        columns: Columns,
        rows: u64,
        shards: usize,
    ) -> Result<Self, DataError> {
        if !shards.is_power_of_two() || shards > MAX_SHARDS {
            return Err(DataError::Io {
                path: dir.path.clone(),
                action: "resuming from the recovery folder",
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the checkpoint names {shards} shards"),
                ),
            });
        }
        for s in 0..shards {
            let p = dir.shard(s);
            if !p.is_file() {
                return Err(DataError::Io {
                    path: p,
                    action: "resuming from the recovery folder",
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "a spill shard is missing; delete the recovery folder to start over",
                    ),
                });
            }
        }
        Ok(SpilledTable {
            columns,
            rows,
            store: Store::Disk(dir),
            shards,
        })
    }

    /// The directory holding the shards (and the output's sorted runs), if on disk.
    pub fn dir(&self) -> Option<&Path> {
        match &self.store {
            Store::Disk(d) => Some(&d.path),
            Store::Memory(_) => None,
        }
    }

    /// Loads the rows of buckets `unit·B/m .. (unit+1)·B/m` of `b` (`m = min(b, shards)`),
    /// sorted by order key and row.
    ///
    /// # Errors
    /// A shard that cannot be read or does not parse.
    pub fn load_unit(&mut self, unit: usize, b: usize) -> Result<LoadedGroup, DataError> {
        let units = self.unit_shards(unit, b);
        if let Store::Memory(shards) = &mut self.store {
            // Each shard belongs to one unit: move it out rather than copy it.
            let mut group = MemShard::default();
            for s in units {
                let shard = match shards.get_mut(s) {
                    Some(slot) => slot.take().ok_or_else(|| {
                        DataError::Protocol(ProtocolError::Config(format!(
                            "internal: in-memory unit {unit} loaded again before it was given \
                             back"
                        )))
                    })?,
                    None => MemShard::default(),
                };
                if group.rows.is_empty() {
                    group = shard;
                } else {
                    let base = group.bytes.len();
                    group.bytes.extend_from_slice(&shard.bytes);
                    group.rows.extend(shard.rows.iter().map(|r| SpillRow {
                        at: r.at + base,
                        ..*r
                    }));
                }
            }
            let MemShard { bytes, rows } = group;
            let rows = sort_rows(&bytes, rows, b);
            return Ok(LoadedGroup { bytes, rows });
        }
        let mut bytes = Vec::new();
        // Where each shard starts in `bytes`: row numbers are gaps from the previous row of the
        // same shard.
        let mut starts = Vec::new();
        for s in units {
            let Store::Disk(dir) = &self.store else {
                break;
            };
            let p = dir.shard(s);
            let mut f = File::open(&p).map_err(|source| DataError::Io {
                path: p.clone(),
                action: "reading a spill shard",
                source,
            })?;
            starts.push(bytes.len());
            f.read_to_end(&mut bytes).map_err(|source| DataError::Io {
                path: p.clone(),
                action: "reading a spill shard",
                source,
            })?;
        }
        starts.push(bytes.len());
        // Sized once for the most rows the bytes can hold: the vector never grows by copying
        // (only the entries written touch memory).
        let mut rows = Vec::with_capacity(bytes.len() / ROW_MIN);
        for shard in starts.windows(2) {
            let (mut at, end) = (shard[0], shard[1]);
            let shard_bytes = &bytes[..end];
            let mut last = 0u64;
            while at < end {
                let mut order = [0u8; 16];
                order.copy_from_slice(
                    shard_bytes
                        .get(at..at + 16)
                        .ok_or_else(|| self.corrupt("a truncated row header"))?,
                );
                let mut p = at + 16;
                let mut next = || {
                    read_varint_u64(shard_bytes, &mut p)
                        .ok_or_else(|| self.corrupt("a truncated or malformed row header"))
                };
                let gap = next()?;
                let key_len = next()?;
                let raw_len = next()?;
                let (Ok(key_len), Ok(raw_len)) = (u32::try_from(key_len), u32::try_from(raw_len))
                else {
                    return Err(self.corrupt("a row length past 4 GiB"));
                };
                let row = last
                    .checked_add(gap)
                    .ok_or_else(|| self.corrupt("a row number past 2^64"))?;
                last = row;
                let row_end = p
                    .checked_add(key_len as usize + raw_len as usize)
                    .filter(|&e| e <= end)
                    .ok_or_else(|| self.corrupt("a row running past the end"))?;
                rows.push(SpillRow::new(
                    u128::from_le_bytes(order),
                    row,
                    p,
                    &bytes[p..p + key_len as usize],
                    raw_len,
                ));
                at = row_end;
            }
        }
        let rows = sort_rows(&bytes, rows, b);
        Ok(LoadedGroup { bytes, rows })
    }

    /// Hands a unit loaded by [`SpilledTable::load_unit`] back, so that the unit can be loaded
    /// again (a pass before the main one, such as `min_intersection`'s). An in-memory unit's
    /// rows are moved out when it loads; they go back into its first shard (its other shards
    /// stay empty, which loads the same). A unit read from disk is still on disk: nothing to do.
    pub fn give_back(&mut self, unit: usize, b: usize, group: LoadedGroup) {
        let units = self.unit_shards(unit, b);
        if let Store::Memory(shards) = &mut self.store {
            let mut group = Some(MemShard {
                bytes: group.bytes,
                rows: group.rows,
            });
            for slot in shards.get_mut(units).into_iter().flatten() {
                *slot = Some(group.take().unwrap_or_default());
            }
        }
    }

    /// The shards that make up unit `unit` when the table runs in `b` buckets
    /// (`min(b, shards)` units of `shards / units` shards each).
    fn unit_shards(&self, unit: usize, b: usize) -> Range<usize> {
        let per = self.shards / b.min(self.shards).max(1);
        unit * per..(unit + 1) * per
    }

    fn corrupt(&self, what: &str) -> DataError {
        DataError::Io {
            path: self
                .dir()
                .map_or_else(|| PathBuf::from("<memory>"), Path::to_path_buf),
            action: "reading a spill shard",
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{what} (the spill directory was changed during the run)"),
            ),
        }
    }
}

/// Where the shards go: a private directory removed with everything in it on drop, or (with
/// recovery) a fixed directory that outlives the run. Either way the directory is 0700 and
/// each file in it 0600 ([`crate::table::private_fs`]): the shards are a plaintext copy of the input.
pub struct SpillDir {
    path: PathBuf,
    remove_on_drop: bool,
}

impl SpillDir {
    /// A new private directory under `parent` (made, 0700, when missing), with a random name,
    /// removed on drop. A `parent` other than the system's temporary directory is the user's
    /// `spill_dir`: they are warned when group or others have access to it.
    ///
    /// # Errors
    /// `parent` is not writable.
    pub fn temporary(parent: &Path) -> Result<SpillDir, DataError> {
        let err = |source| DataError::Io {
            path: parent.to_path_buf(),
            action: "creating the spill directory (set --spill-dir to a writable directory)",
            source,
        };
        private_fs::ensure_user_dir(parent).map_err(err)?;
        if parent != std::env::temp_dir() {
            private_fs::warn_if_shared(parent, "spill_dir");
        }
        let path = private_fs::create_private_dir_in(parent, "spill").map_err(err)?;
        Ok(SpillDir {
            path,
            remove_on_drop: true,
        })
    }

    /// `path` itself (made 0700 when missing), kept after the run (recovery).
    ///
    /// # Errors
    /// It cannot be created, or a symlink or a file is in its place.
    pub fn persistent(path: PathBuf) -> Result<SpillDir, DataError> {
        private_fs::ensure_own_dir(&path).map_err(|source| DataError::Io {
            path: path.clone(),
            action: "creating the spill directory in the recovery folder",
            source,
        })?;
        Ok(SpillDir {
            path,
            remove_on_drop: false,
        })
    }

    /// A new shard file at `p` (0600). A kept directory may hold the shards of a run that
    /// crashed before its first checkpoint: those are replaced; in a fresh temporary directory
    /// anything already there is an error.
    fn new_file(&self, p: &Path) -> std::io::Result<File> {
        if self.remove_on_drop {
            private_fs::create_new(p)
        } else {
            private_fs::replace(p)
        }
    }

    fn shard(&self, s: usize) -> PathBuf {
        self.path.join(format!("shard-{s:05}"))
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::keys::Table;
    use blindjoin_protocols::NoProgress;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bj-spill-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Every row of a spilled table, as (row, key, raw), in row order; checks on the way that
    /// each loaded bucket holds its own rows, sorted by key and then row.
    fn spilled_rows(t: &mut SpilledTable, b: usize) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let m = b.min(t.shards());
        for unit in 0..m {
            let g = t.load_unit(unit, b).unwrap();
            for k in unit * (b / m)..(unit + 1) * (b / m) {
                let rows = g.bucket(k, b);
                for i in 0..rows.len() {
                    assert_eq!(crate::table::rows::bucket_of_order(rows.order(i), b), k);
                    if i > 0 {
                        let order = crate::table::keys::cmp_keys(rows.key(i - 1), rows.key(i))
                            .then(rows.row(i - 1).cmp(&rows.row(i)));
                        assert_eq!(order, std::cmp::Ordering::Less, "bucket {k}, row {i}");
                        // Equal keys, and only they, share an order key (a digest).
                        let same_key = rows.key(i - 1) == rows.key(i);
                        assert_eq!(rows.order(i - 1) == rows.order(i), same_key);
                    }
                    out.push((rows.row(i), rows.key(i).to_vec(), rows.raw(i).to_vec()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn an_in_memory_unit_loads_again_only_after_it_is_given_back() {
        let d = dir("give-back");
        let p = d.join("t.csv");
        let text: String = std::iter::once("id,v\n".to_string())
            .chain((0..500).map(|i| format!("k{},{i}\n", i % 300)))
            .collect();
        std::fs::write(&p, text).unwrap();
        let keys = ["id".to_string()];
        let mut t = spill(&p, TableFormat::Csv, &keys, SpillTo::Memory, &NoProgress).unwrap();
        let b = 4;
        let want = spilled_rows(&mut t, b);
        assert_eq!(want.len(), 500);
        // Every unit is out now: loading one again is an error, not an empty unit.
        assert!(t.load_unit(0, b).is_err());
        // Loaded and given back, every unit loads again with the same rows.
        let mut t = spill(&p, TableFormat::Csv, &keys, SpillTo::Memory, &NoProgress).unwrap();
        for unit in 0..b.min(t.shards()) {
            let g = t.load_unit(unit, b).unwrap();
            t.give_back(unit, b, g);
        }
        assert_eq!(spilled_rows(&mut t, b), want);
    }

    #[test]
    fn loaded_buckets_are_in_key_order_even_past_a_long_shared_prefix() {
        // Two key columns; most first columns share 20 bytes (past the 16-byte sort prefix),
        // some keys repeat, and the row order of the file is unrelated to the key order.
        let d = dir("key-order");
        let p = d.join("t.csv");
        let mut text = "a,b,v\n".to_string();
        for i in 0..3000u64 {
            let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54;
            let a = match i % 3 {
                0 => format!("customer-00000000000{x:04}"),
                1 => format!("c{x}"),
                _ => "customer-0000000000".to_string(),
            };
            text.push_str(&format!("{a},{},{i}\n", x % 7));
        }
        std::fs::write(&p, &text).unwrap();
        let keys = ["a".to_string(), "b".to_string()];
        for (shards, b) in [(1, 1), (1, 8), (4, 2), (4, 16)] {
            TEST_SHARDS.store(shards, std::sync::atomic::Ordering::Relaxed);
            for to in [
                SpillTo::Disk(SpillDir::temporary(&d).unwrap()),
                SpillTo::Memory,
            ] {
                let mut t = spill(&p, TableFormat::Csv, &keys, to, &NoProgress).unwrap();
                assert_eq!(
                    spilled_rows(&mut t, b).len(),
                    3000,
                    "{shards} shards, {b} buckets"
                );
            }
        }
    }

    #[test]
    fn key_digests_are_the_tables_digests_in_file_order() {
        let d = dir("digests");
        let p = d.join("t.csv");
        let mut text = "v,id\n".to_string();
        for i in 0..5000 {
            text.push_str(&format!("x{i},\"k{}\"\n", i % 4000));
        }
        std::fs::write(&p, &text).unwrap();
        let digests = |p: &Path| {
            let mut got = Vec::new();
            let rows =
                for_each_key_digest(p, TableFormat::Csv, &["id".into()], &NoProgress, &mut |d| {
                    got.push(d);
                    Ok(())
                })?;
            assert_eq!(rows, got.len() as u64);
            Ok::<_, DataError>(got)
        };
        let got = digests(&p).unwrap();
        let t = Table::read(&p, &["id".into()]).unwrap();
        let want: Vec<ItemDigest> = (0..t.len()).map(|i| item_digest(t.key(i))).collect();
        assert_eq!(got, want);
        std::fs::write(&p, "v,id\nx,\n").unwrap();
        assert!(digests(&p).is_err(), "an empty key");
    }

    #[test]
    fn tiny_blocks_split_quoted_newlines_and_keep_every_row() {
        let d = dir("blocks");
        let p = d.join("t.csv");
        let mut text = "\u{feff}id,note\r\n".to_string();
        for i in 0..300 {
            match i % 4 {
                0 => text.push_str(&format!("k{i},\"multi\nline\n{}\"\r\n", "x".repeat(i % 90))),
                1 => text.push_str(&format!("\"k,{i}\",plain\n")),
                2 => text.push_str(&format!("k{i},\"q\"\"{i}\"\n\n")),
                _ => text.push_str(&format!("k{},dup\n", i - 1)),
            }
        }
        text.push_str("last,row");
        std::fs::write(&p, &text).unwrap();
        let table = Table::read(&p, &["id".into()]).unwrap();
        let want: Vec<(u64, Vec<u8>, Vec<u8>)> = (0..table.len())
            .map(|i| (i as u64, table.key(i).to_vec(), table.raw_row(i).to_vec()))
            .collect();
        for (block, shards, b) in [(7, 1, 1), (64, 4, 16), (100, 8, 2), (1 << 20, 2, 2)] {
            TEST_SHARDS.store(shards, std::sync::atomic::Ordering::Relaxed);
            for to in [
                SpillTo::Disk(SpillDir::temporary(&d).unwrap()),
                SpillTo::Memory,
            ] {
                let mut t = spill_in_blocks(&p, &["id".into()], to, &NoProgress, block).unwrap();
                assert_eq!(t.rows, want.len() as u64);
                assert_eq!(t.columns.header, ["id", "note"]);
                assert_eq!(spilled_rows(&mut t, b), want, "block {block}");
            }
        }
    }

    /// Shard heads are varints now: a cut or malformed one is an error, never a panic or a row
    /// past the shard's end.
    #[test]
    fn a_damaged_shard_is_an_error() {
        let d = dir("damaged");
        let p = d.join("t.csv");
        let text: String = std::iter::once("id,v\n".to_string())
            .chain((0..400).map(|i| format!("k{i},{i}\n")))
            .collect();
        std::fs::write(&p, text).unwrap();
        TEST_SHARDS.store(2, std::sync::atomic::Ordering::Relaxed);
        let spill_dir = |d: &Path| SpillDir::temporary(d).unwrap();
        type Damage<'a> = &'a dyn Fn(&mut Vec<u8>);
        let damage: [Damage; 4] = [
            // Cut inside the last row.
            &|b| b.truncate(b.len() - 3),
            // Cut inside the first head's varints.
            &|b| b.truncate(17),
            // A varint that never ends.
            &|b| b[16..27].fill(0xff),
            // A key length running past the end.
            &|b| b[17..22].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for (i, damage) in damage.iter().enumerate() {
            let mut t = spill(
                &p,
                TableFormat::Csv,
                &["id".into()],
                SpillTo::Disk(spill_dir(&d)),
                &NoProgress,
            )
            .unwrap();
            let Store::Disk(dir) = &t.store else {
                panic!("spilled to memory")
            };
            let shard = dir.shard(0);
            let mut bytes = std::fs::read(&shard).unwrap();
            damage(&mut bytes);
            std::fs::write(&shard, &bytes).unwrap();
            let e = t.load_unit(0, 2).err().map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains("spill shard")),
                "damage {i}: {e:?}"
            );
        }
    }

    /// The shards are a plaintext copy of the input: a 0700 folder with a random name, 0600
    /// files, gone after the drop.
    #[cfg(unix)]
    #[test]
    fn disk_shards_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let d = dir("private");
        let p = d.join("t.csv");
        std::fs::write(&p, "id\na\nb\nc\n").unwrap();
        TEST_SHARDS.store(4, std::sync::atomic::Ordering::Relaxed);
        let (a, b) = (
            SpillDir::temporary(&d).unwrap(),
            SpillDir::temporary(&d).unwrap(),
        );
        assert_ne!(a.path, b.path);
        let t = spill(
            &p,
            TableFormat::Csv,
            &["id".into()],
            SpillTo::Disk(a),
            &NoProgress,
        )
        .unwrap();
        let at = t.dir().unwrap().to_path_buf();
        assert_eq!(mode(&at), 0o700);
        for s in 0..t.shards() {
            assert_eq!(mode(&at.join(format!("shard-{s:05}"))), 0o600);
        }
        drop(t);
        assert!(!at.exists());
    }

    #[test]
    fn errors_name_the_line_across_blocks() {
        let d = dir("errors");
        let p = d.join("t.csv");
        let mut text = "id,v\n".to_string();
        for i in 0..50 {
            text.push_str(&format!("\"a\nb{i}\",1\n"));
        }
        text.push_str(",2\n");
        std::fs::write(&p, &text).unwrap();
        for block in [5, 40, 1 << 16] {
            let e = spill_in_blocks(
                &p,
                &["id".into()],
                SpillTo::Disk(SpillDir::temporary(&d).unwrap()),
                &NoProgress,
                block,
            )
            .err()
            .unwrap()
            .to_string();
            assert!(e.contains(":102:") && e.contains("empty"), "{e}");
        }
        std::fs::write(&p, "id,v\n\"open,1\nx,2\n").unwrap();
        let e = spill_in_blocks(
            &p,
            &["id".into()],
            SpillTo::Disk(SpillDir::temporary(&d).unwrap()),
            &NoProgress,
            4,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("unterminated"), "{e}");
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".blindjoin-spill")
            })
            .collect();
        assert!(left.is_empty(), "a failed spill removes its shards");
    }
}
