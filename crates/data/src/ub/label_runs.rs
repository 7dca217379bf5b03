//! The cache sort's runs when the cache carries labels ([`super::gen_cache`]): one record per
//! ROW of the server's table, not per key, because a key's label is all its rows' label cells
//! in file order and those rows may fall in different chunks of the sort.
//!
//! A chunk holds rows as read (key digest, row number, the row's encoded label cells). Sorting
//! it groups the rows by key, evaluates each of its distinct keys once (`H(y)^k`, kept for
//! sealing, and the 16-byte tag) and orders the rows by (tag, digest, row number). The k-way
//! merge keeps that order, so on the last merge a key's rows arrive adjacent and in file order
//! wherever they were read: [`Sealer`] concatenates their cells into the key's label
//! ([`super::labels::encode`]'s format), seals it under the key's point and hands it to the
//! cache's sections. Joining the rows of equal keys is what deduplication was without labels.
//!
//! A run record: 16-byte tag, 16-byte digest, row number (`u64` LE), a point flag (0 or 1),
//! the 32-byte point if the flag is 1, the cells' length (`u32` LE) and the cells. The point
//! is written with the first row of each key in a run only: the first row of a key over all
//! runs is the first of that key in its own run, so the merge always meets the point first and
//! the later rows need none. The point is the label's key material; it sits next to the label
//! cells it protects, in the sort's private folder (0700, files 0600), removed when the sort
//! ends.
//!
//! The run files are our own; a reader still checks what it reads (a truncated run, a bad
//! flag, cells longer than any label) and reports it as an error naming the file, never a
//! panic.

use super::sort_runs::{MergeOut, RunFile, RunWriter, TAG, Tag, io, merge_sorted};
use crate::error::{ConfigError, DataError};
use blindjoin_crypto::ItemDigest;
use blindjoin_crypto::oprf::{OprfScalar, POINT_LEN, tag};
use blindjoin_protocols::ub_oprf::labels::{LabelKey, MAC_LEN, MAX_SEALED_LEN, SALT_LEN, seal};
use blindjoin_protocols::{Progress, ProtocolError};
use rayon::prelude::*;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// An evaluated point `H(y)^k`.
pub(super) type Point = [u8; POINT_LEN];

/// Memory one row of a labelled chunk takes besides its cells, rounded up: its entry (digest,
/// row number, end of its cells: 32 B), its place in the key order (4 B) and, at most once per
/// row, its key's group (tag, point, first and last place: 56 B); the derivation is tested.
pub const CHUNK_BYTES_PER_ROW: usize = 128;

/// Distinct keys evaluated at once (bounds the batch of digests and points in memory).
const OPRF_BATCH: usize = 1 << 16;

/// The bytes of the row-count prefix of an encoded label.
const COUNT_LEN: usize = 4;

/// The error for a key whose label would exceed [`MAX_SEALED_LEN`] sealed; `at_least` when
/// only a part of its rows was counted.
pub(super) fn label_too_long(sealed_len: u64, at_least: bool) -> DataError {
    DataError::Config(ConfigError::Invalid {
        field: "blindjoin.label_columns".into(),
        message: format!(
            "one key's rows hold {}{sealed_len} bytes of labels; the most one key may carry is \
             {MAX_SEALED_LEN} (choose fewer columns)",
            if at_least { "at least " } else { "" }
        ),
    })
}

/// A chunk of rows being gathered: per row its key digest, its row number in the file and
/// where its cells end in `cells`. The sort's own vectors (`order`, `groups`) are kept empty
/// between chunks, so every chunk reuses the first one's memory instead of allocating anew.
#[derive(Default)]
pub(super) struct RowChunk {
    rows: Vec<(ItemDigest, u64, usize)>,
    cells: Vec<u8>,
    order: Vec<u32>,
    groups: Vec<Group>,
}

impl RowChunk {
    /// Rows held.
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    /// The memory the chunk is charged, with `more` rows of `cells` bytes added.
    pub(super) fn bytes_with(&self, more: usize, cells: usize) -> usize {
        (self.rows.len() + more)
            .saturating_mul(CHUNK_BYTES_PER_ROW)
            .saturating_add(self.cells.len())
            .saturating_add(cells)
    }

    /// Adds one row; a row whose cells alone make a label past [`MAX_SEALED_LEN`] is refused.
    pub(super) fn push(&mut self, d: ItemDigest, row: u64, cells: &[u8]) -> Result<(), DataError> {
        let sealed = (COUNT_LEN + MAC_LEN) as u64 + cells.len() as u64;
        if sealed > MAX_SEALED_LEN as u64 {
            return Err(label_too_long(sealed, true));
        }
        self.cells.extend_from_slice(cells);
        self.rows.push((d, row, self.cells.len()));
        Ok(())
    }

    fn cells_of(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.rows[i - 1].2 };
        &self.cells[start..self.rows[i].2]
    }

    /// Groups the rows by key, evaluates each distinct key once and orders the rows by (tag,
    /// digest, row number), leaving `self` empty.
    ///
    /// # Errors
    /// The OPRF evaluation failed.
    pub(super) fn sort(&mut self, key: &OprfScalar) -> Result<SortedChunk, DataError> {
        let mut chunk = std::mem::take(self);
        let _span = crate::trace::span("evaluate OPRF");
        let mut order = std::mem::take(&mut chunk.order);
        let mut groups = std::mem::take(&mut chunk.groups);
        order.clear();
        groups.clear();
        order.extend(0..chunk.rows.len() as u32);
        order.par_sort_unstable_by_key(|&i| (chunk.rows[i as usize].0, chunk.rows[i as usize].1));
        // Groups of equal digests in `order`, in digest order.
        let mut start = 0usize;
        while start < order.len() {
            let d = chunk.rows[order[start] as usize].0;
            let mut end = start + 1;
            while end < order.len() && chunk.rows[order[end] as usize].0 == d {
                end += 1;
            }
            groups.push(Group {
                tag: [0; TAG],
                point: [0; POINT_LEN],
                start: start as u32,
                end: end as u32,
            });
            start = end;
        }
        let mut digests: Vec<ItemDigest> = Vec::with_capacity(OPRF_BATCH.min(groups.len()));
        let mut points = vec![0u8; OPRF_BATCH.min(groups.len()) * POINT_LEN];
        for batch in groups.chunks_mut(OPRF_BATCH) {
            digests.clear();
            digests.extend(
                batch
                    .iter()
                    .map(|g| chunk.rows[order[g.start as usize] as usize].0),
            );
            let pts = &mut points[..batch.len() * POINT_LEN];
            key.hash_and_mul(&digests, pts)
                .map_err(|e| DataError::Protocol(ProtocolError::Crypto(e)))?;
            batch
                .par_iter_mut()
                .zip(pts.par_chunks(POINT_LEN))
                .for_each(|(g, p)| {
                    g.tag.copy_from_slice(&tag(p)[..TAG]);
                    g.point.copy_from_slice(p);
                });
        }
        drop(digests);
        drop(points);
        // Groups are in digest order and `start` grows with it, so (tag, start) orders as
        // (tag, digest) does.
        groups.par_sort_unstable_by_key(|g| (g.tag, g.start));
        Ok(SortedChunk {
            chunk,
            order,
            groups,
            group: 0,
            at: 0,
            current: None,
        })
    }
}

/// One distinct key of a chunk: its tag and point, and its rows' places in the key order.
struct Group {
    tag: Tag,
    point: Point,
    start: u32,
    end: u32,
}

/// A sorted chunk, read as a run: rows in (tag, digest, row number) order.
pub(super) struct SortedChunk {
    chunk: RowChunk,
    order: Vec<u32>,
    groups: Vec<Group>,
    /// The next row: its group, and its place in that group.
    group: usize,
    at: u32,
    /// The row last returned: (group, row index in the chunk, whether it is its key's first).
    current: Option<(usize, usize, bool)>,
}

impl SortedChunk {
    /// Rows held.
    pub(super) fn rows(&self) -> usize {
        self.chunk.rows.len()
    }

    /// Hands every row to `out` in order (the point with each key's first row).
    pub(super) fn write_to(&self, out: &mut dyn RowOut) -> Result<(), DataError> {
        for g in &self.groups {
            let rows = self
                .order
                .get(g.start as usize..g.end as usize)
                .unwrap_or_default();
            for (j, &i) in rows.iter().enumerate() {
                let (d, row, _) = self.chunk.rows[i as usize];
                let point = (j == 0).then_some(&g.point);
                out.row(&g.tag, &d, row, point, self.chunk.cells_of(i as usize))?;
            }
        }
        Ok(())
    }

    /// The chunk's vectors, emptied, for the next chunk.
    pub(super) fn recycle(self) -> RowChunk {
        let SortedChunk {
            mut chunk,
            mut order,
            mut groups,
            ..
        } = self;
        chunk.rows.clear();
        chunk.cells.clear();
        order.clear();
        groups.clear();
        chunk.order = order;
        chunk.groups = groups;
        chunk
    }
}

/// One run being merged: a file, or a chunk in memory.
pub(super) enum RowIn {
    File {
        path: PathBuf,
        r: BufReader<File>,
        left: u64,
        point: Option<Point>,
        cells: Vec<u8>,
    },
    Memory(Box<SortedChunk>),
}

impl RowIn {
    /// The next row's (tag, digest, row number); its point and cells are then
    /// [`RowIn::point`] and [`RowIn::cells`].
    fn next(&mut self) -> Result<Option<(Tag, ItemDigest, u64)>, DataError> {
        match self {
            RowIn::Memory(s) => {
                let Some(g) = s.groups.get(s.group) else {
                    s.current = None;
                    return Ok(None);
                };
                let i = s.order[(g.start + s.at) as usize] as usize;
                let (d, row, _) = s.chunk.rows[i];
                let t = g.tag;
                s.current = Some((s.group, i, s.at == 0));
                s.at += 1;
                if g.start + s.at >= g.end {
                    s.group += 1;
                    s.at = 0;
                }
                Ok(Some((t, d, row)))
            }
            RowIn::File {
                path,
                r,
                left,
                point,
                cells,
            } => {
                if *left == 0 {
                    return Ok(None);
                }
                *left -= 1;
                let bad = |what: &str| DataError::Io {
                    path: path.clone(),
                    action: "reading a run of the cache sort",
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{what} (the temporary folder was changed during the run)"),
                    ),
                };
                let mut rec = [0u8; TAG + 16 + 8 + 1];
                r.read_exact(&mut rec).map_err(|_| bad("truncated run"))?;
                let mut t = [0u8; TAG];
                let mut d = [0u8; 16];
                let mut row = [0u8; 8];
                t.copy_from_slice(&rec[..TAG]);
                d.copy_from_slice(&rec[TAG..TAG + 16]);
                row.copy_from_slice(&rec[TAG + 16..TAG + 24]);
                *point = match rec[TAG + 24] {
                    0 => None,
                    1 => {
                        let mut p = [0u8; POINT_LEN];
                        r.read_exact(&mut p).map_err(|_| bad("truncated run"))?;
                        Some(p)
                    }
                    _ => return Err(bad("a bad point flag")),
                };
                let mut l4 = [0u8; 4];
                r.read_exact(&mut l4).map_err(|_| bad("truncated run"))?;
                let n = u32::from_le_bytes(l4) as usize;
                if n > MAX_SEALED_LEN {
                    return Err(bad("cells longer than any label"));
                }
                cells.clear();
                cells.resize(n, 0);
                r.read_exact(cells).map_err(|_| bad("truncated run"))?;
                Ok(Some((t, d, u64::from_le_bytes(row))))
            }
        }
    }

    /// The point of the row `next` returned, if it carries one.
    fn point(&self) -> Option<&Point> {
        match self {
            RowIn::Memory(s) => match s.current {
                Some((g, _, true)) => s.groups.get(g).map(|g| &g.point),
                _ => None,
            },
            RowIn::File { point, .. } => point.as_ref(),
        }
    }

    /// The label cells of the row `next` returned.
    fn cells(&self) -> &[u8] {
        match self {
            RowIn::Memory(s) => s.current.map_or(&[][..], |(_, i, _)| s.chunk.cells_of(i)),
            RowIn::File { cells, .. } => cells,
        }
    }
}

/// Opens `runs` for merging, sharing half of `memory` among their read buffers.
pub(super) fn open_runs(runs: &[RunFile], memory: usize) -> Result<Vec<RowIn>, DataError> {
    let buf = (memory / 2 / runs.len().max(1)).clamp(4 << 10, 1 << 20);
    runs.iter()
        .map(|run| {
            let f =
                File::open(&run.path).map_err(io(&run.path, "opening a run of the cache sort"))?;
            Ok(RowIn::File {
                path: run.path.clone(),
                r: BufReader::with_capacity(buf, f),
                left: run.records,
                point: None,
                cells: Vec::new(),
            })
        })
        .collect()
}

/// Where a merge puts each row, in (tag, digest, row number) order.
pub(super) trait RowOut {
    fn row(
        &mut self,
        t: &Tag,
        d: &ItemDigest,
        row: u64,
        point: Option<&Point>,
        cells: &[u8],
    ) -> Result<(), DataError>;
}

/// k-way merge of `inputs` into `out`, every row kept; `progress` advances once per row.
pub(super) fn merge(
    mut inputs: Vec<RowIn>,
    out: &mut dyn RowOut,
    progress: &dyn Progress,
) -> Result<(), DataError> {
    merge_sorted(
        &mut inputs,
        RowIn::next,
        |(t, d, row), input| out.row(t, d, *row, input.point(), input.cells()),
        progress,
    )
}

/// The error for a key whose first row in the merge carries no point.
fn no_point(path: &Path) -> DataError {
    DataError::Io {
        path: path.to_path_buf(),
        action: "merging the runs of the cache sort",
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a key's first row carries no point (the temporary folder was changed during the run)",
        ),
    }
}

/// A run file being written: the point goes with the first row of each key.
pub(super) struct RowRunWriter {
    run: RunWriter,
    last: Option<(Tag, ItemDigest)>,
}

impl RowRunWriter {
    pub(super) fn create(path: &Path) -> Result<RowRunWriter, DataError> {
        Ok(RowRunWriter {
            run: RunWriter::create(path)?,
            last: None,
        })
    }

    /// Flushes the run; returns its record count.
    pub(super) fn finish(self) -> Result<u64, DataError> {
        self.run.finish()
    }
}

impl RowOut for RowRunWriter {
    fn row(
        &mut self,
        t: &Tag,
        d: &ItemDigest,
        row: u64,
        point: Option<&Point>,
        cells: &[u8],
    ) -> Result<(), DataError> {
        let first = self.last != Some((*t, *d));
        let point = match (first, point) {
            (true, None) => return Err(no_point(self.run.path())),
            (true, Some(p)) => Some(p),
            (false, _) => None,
        };
        self.run.record(|w| {
            w.write_all(t)?;
            w.write_all(d)?;
            w.write_all(&row.to_le_bytes())?;
            match point {
                Some(p) => {
                    w.write_all(&[1])?;
                    w.write_all(p)?;
                }
                None => w.write_all(&[0])?,
            }
            w.write_all(&(cells.len() as u32).to_le_bytes())?;
            w.write_all(cells)
        })?;
        self.last = Some((*t, *d));
        Ok(())
    }
}

/// The last merge's output: joins each key's rows into its label, seals it under the key's
/// point and puts (tag, digest, sealed label) to `out`. Call [`Sealer::finish`] at the end.
pub(super) struct Sealer<'o> {
    out: &'o mut dyn MergeOut,
    /// The sort's folder, for errors.
    folder: PathBuf,
    salt: [u8; SALT_LEN],
    /// The key being joined: tag, digest, point.
    key: Option<(Tag, ItemDigest, Point)>,
    /// Its label so far: the row count's 4 bytes (filled in at the end), then the rows' cells;
    /// left empty once the label is too long (its length still counted).
    plain: Vec<u8>,
    rows: u32,
    /// The label's length when sealed (row count, cells, MAC).
    sealed_len: u64,
}

impl<'o> Sealer<'o> {
    pub(super) fn new(
        out: &'o mut dyn MergeOut,
        salt: [u8; SALT_LEN],
        folder: &Path,
    ) -> Sealer<'o> {
        Sealer {
            out,
            folder: folder.to_path_buf(),
            salt,
            key: None,
            plain: Vec::new(),
            rows: 0,
            sealed_len: 0,
        }
    }

    /// Seals and puts the key being joined, if any.
    fn flush(&mut self) -> Result<(), DataError> {
        let Some((t, d, p)) = self.key.take() else {
            return Ok(());
        };
        if self.sealed_len > MAX_SEALED_LEN as u64 {
            return Err(label_too_long(self.sealed_len, false));
        }
        if let Some(count) = self.plain.get_mut(..COUNT_LEN) {
            count.copy_from_slice(&self.rows.to_le_bytes());
        }
        let sealed = seal(&LabelKey::derive(&p, &self.salt), &self.plain);
        self.out.put(&t, &d, &sealed)
    }

    /// Puts the last key.
    pub(super) fn finish(mut self) -> Result<(), DataError> {
        self.flush()
    }
}

impl RowOut for Sealer<'_> {
    fn row(
        &mut self,
        t: &Tag,
        d: &ItemDigest,
        _row: u64,
        point: Option<&Point>,
        cells: &[u8],
    ) -> Result<(), DataError> {
        if self.key.as_ref().is_none_or(|k| (k.0, k.1) != (*t, *d)) {
            self.flush()?;
            let Some(p) = point else {
                return Err(no_point(&self.folder));
            };
            self.key = Some((*t, *d, *p));
            self.plain.clear();
            self.plain.extend_from_slice(&[0; COUNT_LEN]);
            self.rows = 0;
            self.sealed_len = (COUNT_LEN + MAC_LEN) as u64;
        }
        self.rows = self.rows.saturating_add(1);
        self.sealed_len += cells.len() as u64;
        if self.sealed_len <= MAX_SEALED_LEN as u64 {
            self.plain.extend_from_slice(cells);
        } else if !self.plain.is_empty() {
            // Too long: the error comes when the key ends (with its full length); stop
            // holding its cells now.
            self.plain = Vec::new();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derivation in [`CHUNK_BYTES_PER_ROW`]'s doc.
    #[test]
    fn a_row_fits_its_share_of_the_chunk() {
        let entry = std::mem::size_of::<(ItemDigest, u64, usize)>();
        let place = std::mem::size_of::<u32>();
        let group = std::mem::size_of::<Group>();
        assert_eq!((entry, place, group), (32, 4, 56));
        assert!(entry + place + group <= CHUNK_BYTES_PER_ROW);
    }
}
