//! Generating the server cache in bounded memory: an external sort of the OPRF values.
//!
//! Without labels, the server's keys arrive as a stream of item digests (file order,
//! duplicates included, [`CacheSorter::push`]). They are gathered in chunks of at most
//! [`SortLimits::memory`]` / `[`CHUNK_BYTES_PER_ITEM`] items; each chunk is deduplicated,
//! evaluated (`F_k(y)`, keeping the full 16-byte tag), sorted by (tag, digest) and written as a
//! run (`sort_runs.rs`) to a private temporary folder. The runs are then merged k-way, at most
//! [`SortLimits::fan_in`] at a time, and a key that was in two chunks is dropped on the merge:
//! its two records are equal (same digest, so same tag) and adjacent after sorting. The last
//! chunk is never written: it joins the final merge from memory, so a set that fits one chunk
//! touches no temporary file.
//!
//! With labels, a key's label is all its rows' label cells in file order, and its rows may fall
//! in different chunks, so no chunk can seal a label alone. The stream is then of rows
//! ([`CacheSorter::push_row`]: digest, row number, encoded cells) and so are the runs
//! (`label_runs.rs`): a chunk closes when its rows ([`CHUNK_BYTES_PER_ROW`] each) and their
//! cells reach [`SortLimits::memory`] (a single row larger than that is a chunk alone); each
//! distinct key of a chunk is evaluated once, and the rows are sorted by (tag, digest, row
//! number). On the final merge a key's rows arrive adjacent and in file order, and are joined
//! into its label and sealed there.
//!
//! The final merge writes each of the cache's sections (values, digests, label lengths, labels)
//! to its own temporary file, because the count of unique keys, and with it ℓ
//! ([`blindjoin_protocols::ub_oprf::tag_len`]) and the header, are known only when it ends. One
//! streaming pass then assembles the cache ([`super::cache`]'s format): header, values cut to
//! ℓ bytes, digests, label lengths, labels, SHA-256 over everything.
//!
//! Why order by the full 16-byte tag: ordering by it orders the ℓ-byte prefixes too, so the file
//! equals what sorting the ℓ-byte values in memory gives, byte for byte (the test below
//! compares the two). The only case where the two could differ is two different keys whose
//! values agree on their first ℓ bytes; ℓ is chosen so that a collision among the server's own
//! values is far rarer than the 2^-40 false-match bound, and there the in-memory sort's order
//! was arbitrary anyway.
//!
//! Memory: one chunk (at most [`SortLimits::memory`], or one row), the merge's read buffers (at
//! most [`SortLimits::memory`] / 2 over all runs), with labels one key's label being joined (at
//! most `MAX_SEALED_LEN`, 16 MiB); fixed buffers. Nothing grows with the server's set. Disk:
//! runs of 32 bytes per key (with labels 45 bytes per row plus its cells, and the 32-byte point
//! once per key and run), then sections of 32 bytes per key plus the sealed labels, then the
//! cache. The temporary folder is made next to the cache (same file system, and the cache's
//! folder is the one the user chose for the server's data), mode 0700 with files 0600, and is
//! removed when the sort ends, whether it succeeded or not: its files map the server's keys to
//! their OPRF values, as the cache does, and with labels hold the label cells in clear.

use super::cache;
pub use super::label_runs::CHUNK_BYTES_PER_ROW;
use super::label_runs::{self, RowChunk, RowIn, RowRunWriter, Sealer, SortedChunk};
use super::sort_runs::{
    MergeOut, Record, RunFile, RunIn, RunWriter, TAG, Tag, io, merge, merge_counted, open_runs,
    write_run,
};
use crate::error::DataError;
use crate::table::output::AtomicFile;
use crate::table::private_fs;
use blindjoin_crypto::oprf::{OprfScalar, POINT_LEN, tag};
use blindjoin_crypto::{Curve, ItemDigest};
use blindjoin_protocols::ub_oprf::labels::SALT_LEN;
use blindjoin_protocols::ub_oprf::{CacheMeta, LabelMeta, MAX_SERVER_ITEMS, tag_len};
use blindjoin_protocols::{NoProgress, Progress, ProtocolError};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Memory one chunk item takes while its chunk is evaluated and sorted (without labels): the
/// 16-byte digest as read, then its record (16-byte tag, 16-byte digest), rounded up.
pub const CHUNK_BYTES_PER_ITEM: usize = 64;

/// Default memory for one chunk: 256 MiB, about 4 million keys per run, so a 2^30-key server
/// makes 256 runs, merged in two passes of at most [`DEFAULT_FAN_IN`].
pub const DEFAULT_SORT_MEMORY: usize = 256 << 20;

/// Default number of runs merged at once: each holds an open file and a read buffer.
pub const DEFAULT_FAN_IN: usize = 128;

/// Items evaluated at once inside a chunk (bounds the 32-byte points in memory).
const OPRF_BATCH: usize = 1 << 16;

/// Bytes moved at once when assembling the cache.
const COPY_CHUNK: usize = 1 << 20;

/// How much the sort may hold in memory, and how many runs it merges at once.
#[derive(Clone, Copy, Debug)]
pub struct SortLimits {
    /// Bytes for one chunk (see [`CHUNK_BYTES_PER_ITEM`], and with labels
    /// [`CHUNK_BYTES_PER_ROW`] plus the cells); at least one item or row.
    pub memory: usize,
    /// Runs merged at once (at least 2).
    pub fan_in: usize,
}

impl Default for SortLimits {
    fn default() -> Self {
        SortLimits {
            memory: DEFAULT_SORT_MEMORY,
            fan_in: DEFAULT_FAN_IN,
        }
    }
}

/// What the cache's labels are made of (its [`LabelMeta`]): the salt and the column names. The
/// rows' cells come through [`CacheSorter::push_row`].
pub struct LabelSource {
    /// The per-cache salt of the label keys.
    pub salt: [u8; SALT_LEN],
    /// The label columns, in order.
    pub columns: Vec<String>,
}

/// The server cache made by an external sort: push every key's digest (or with labels every
/// row), then [`finish`].
///
/// [`finish`]: CacheSorter::finish
pub struct CacheSorter<'a> {
    path: PathBuf,
    key: &'a OprfScalar,
    curve: Curve,
    labels: Option<&'a LabelSource>,
    limits: SortLimits,
    chunk: Vec<ItemDigest>,
    /// With labels: the rows gathered.
    rows: RowChunk,
    cap: usize,
    dir: Option<TempDir>,
    runs: Vec<RunFile>,
    names: u64,
}

/// The sort's private folder, removed with everything in it when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl<'a> CacheSorter<'a> {
    /// A sorter for the server cache at `path` under `key`.
    pub fn new(
        path: &Path,
        key: &'a OprfScalar,
        curve: Curve,
        labels: Option<&'a LabelSource>,
        limits: SortLimits,
    ) -> CacheSorter<'a> {
        let cap = (limits.memory / CHUNK_BYTES_PER_ITEM).max(1);
        CacheSorter {
            path: path.to_path_buf(),
            key,
            curve,
            labels,
            limits: SortLimits {
                memory: limits.memory,
                fan_in: limits.fan_in.max(2),
            },
            chunk: Vec::new(),
            rows: RowChunk::default(),
            cap,
            dir: None,
            runs: Vec::new(),
            names: 0,
        }
    }

    /// Takes one key's digest (in any order, repeats allowed), for a cache without labels.
    ///
    /// # Errors
    /// Writing a full chunk's run failed, or evaluating it did; the sorter makes a cache with
    /// labels (use [`CacheSorter::push_row`]).
    pub fn push(&mut self, d: ItemDigest) -> Result<(), DataError> {
        if self.labels.is_some() {
            return Err(DataError::Protocol(ProtocolError::Unreachable(
                "a key without its row pushed to a cache sort with labels",
            )));
        }
        if self.chunk.capacity() == 0 {
            self.chunk.reserve_exact(self.cap);
        }
        self.chunk.push(d);
        if self.chunk.len() >= self.cap {
            let records = self.evaluate_chunk()?;
            let _span = crate::trace::span("write run");
            let run = self.new_run_path()?;
            let n = write_run(&run, &records)?;
            self.runs.push(RunFile {
                path: run,
                records: n,
            });
        }
        Ok(())
    }

    /// Takes one row of the table, for a cache with labels: its key's digest, its number in
    /// the file (rows must come in file order) and its label cells encoded as one row of
    /// [`super::labels::encode`] (per label column a `u32` LE length and the bytes).
    ///
    /// # Errors
    /// A row whose cells alone exceed the largest label (field `blindjoin.label_columns`);
    /// writing a full chunk's run failed, or evaluating it did; the sorter makes a cache
    /// without labels.
    pub fn push_row(&mut self, d: ItemDigest, row: u64, cells: &[u8]) -> Result<(), DataError> {
        if self.labels.is_none() {
            return Err(DataError::Protocol(ProtocolError::Unreachable(
                "a row pushed to a cache sort without labels",
            )));
        }
        // Close the chunk before a row that would take it past the budget (a row larger than
        // the budget is a chunk alone).
        if self.rows.len() > 0 && self.rows.bytes_with(1, cells.len()) > self.limits.memory {
            let sorted = self.rows.sort(self.key)?;
            let _span = crate::trace::span("write run");
            let run = self.new_run_path()?;
            let mut w = RowRunWriter::create(&run)?;
            sorted.write_to(&mut w)?;
            let records = w.finish()?;
            self.runs.push(RunFile { path: run, records });
            self.rows = sorted.recycle();
        }
        self.rows.push(d, row, cells)
    }

    /// The folder the cache goes into.
    fn folder(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// A fresh file name in the private folder (made on first use).
    fn new_run_path(&mut self) -> Result<PathBuf, DataError> {
        if self.dir.is_none() {
            let folder = self.folder();
            let d = private_fs::create_private_dir_in(&folder, "ub-sort").map_err(io(
                &folder,
                "creating the cache sort's temporary folder next to the cache",
            ))?;
            self.dir = Some(TempDir(d));
        }
        self.names += 1;
        let dir = self
            .dir
            .as_ref()
            .map_or_else(|| self.folder(), |d| d.0.clone());
        Ok(dir.join(format!("run-{:06}", self.names)))
    }

    /// Deduplicates, evaluates and sorts the current chunk, leaving it empty.
    fn evaluate_chunk(&mut self) -> Result<Vec<Record>, DataError> {
        let mut items = std::mem::take(&mut self.chunk);
        let oprf_span = crate::trace::span("evaluate OPRF");
        items.par_sort_unstable();
        items.dedup();
        let mut records: Vec<Record> = Vec::with_capacity(items.len());
        let mut points = vec![0u8; OPRF_BATCH.min(items.len()) * POINT_LEN];
        for batch in items.chunks(OPRF_BATCH) {
            let pts = &mut points[..batch.len() * POINT_LEN];
            self.key
                .hash_and_mul(batch, pts)
                .map_err(|e| DataError::Protocol(ProtocolError::Crypto(e)))?;
            records.par_extend(
                pts.par_chunks(POINT_LEN)
                    .zip(batch.par_iter())
                    .map(|(p, d)| {
                        let mut t = [0u8; TAG];
                        t.copy_from_slice(&tag(p)[..TAG]);
                        (t, *d)
                    }),
            );
        }
        drop(items);
        drop(points);
        drop(oprf_span);
        let _sort = crate::trace::span("sort run");
        records.par_sort_unstable();
        Ok(records)
    }

    /// Merges the runs into the cache at the sorter's path and returns its metadata and
    /// the number of runs written to disk.
    ///
    /// # Errors
    /// I/O on the temporary files or the cache; more unique keys than a cache holds.
    pub fn finish(mut self, progress: &dyn Progress) -> Result<(CacheMeta, usize), DataError> {
        let labels = self.labels;
        let memory = self.limits.memory;
        // The last chunk is kept in memory for the final merge.
        let last = match labels {
            None => Last::Keys(self.evaluate_chunk()?),
            Some(_) => Last::Rows(Box::new(self.rows.sort(self.key)?)),
        };
        let spilled = self.runs.len();
        // Merge runs on disk in passes until one last merge (with the chunk in memory) is
        // within the fan-in.
        while self.runs.len() + 1 > self.limits.fan_in {
            let _span = crate::trace::span("merge runs (pass)");
            let take = self.limits.fan_in.min(self.runs.len());
            let group: Vec<RunFile> = self.runs.drain(..take).collect();
            let out = self.new_run_path()?;
            let records = if labels.is_none() {
                let mut w = RunWriter::create(&out)?;
                merge(open_runs(&group, memory)?, &mut w)?;
                w.finish()?
            } else {
                let mut w = RowRunWriter::create(&out)?;
                let inputs = label_runs::open_runs(&group, memory)?;
                label_runs::merge(inputs, &mut w, &NoProgress)?;
                w.finish()?
            };
            for g in &group {
                let _ = std::fs::remove_file(&g.path);
            }
            self.runs.push(RunFile { path: out, records });
        }
        let _span = crate::trace::span("merge runs");
        let in_memory = match &last {
            Last::Keys(r) => r.len(),
            Last::Rows(s) => s.rows(),
        };
        let total: u64 = self.runs.iter().map(|r| r.records).sum::<u64>() + in_memory as u64;
        progress.stage("merging the sorted runs", total);
        // A set that fit one chunk stays in memory to the end.
        let on_disk = !self.runs.is_empty();
        let runs = std::mem::take(&mut self.runs);
        let folder = self
            .dir
            .as_ref()
            .map_or_else(|| self.folder(), |d| d.0.clone());
        let mut sections = Sections::create(self, on_disk)?;
        match (last, labels) {
            (Last::Keys(records), _) => {
                let mut inputs = open_runs(&runs, memory)?;
                inputs.push(RunIn::Memory(records.into_iter()));
                merge_counted(inputs, &mut sections, progress)?;
            }
            (Last::Rows(sorted), Some(src)) => {
                let mut inputs = label_runs::open_runs(&runs, memory)?;
                inputs.push(RowIn::Memory(sorted));
                let mut sealer = Sealer::new(&mut sections, src.salt, &folder);
                label_runs::merge(inputs, &mut sealer, progress)?;
                sealer.finish()?;
            }
            (Last::Rows(_), None) => {
                return Err(DataError::Protocol(ProtocolError::Unreachable(
                    "rows sorted for a cache without labels",
                )));
            }
        }
        // The runs' disk is free again before the cache is written.
        for r in &runs {
            let _ = std::fs::remove_file(&r.path);
        }
        drop(_span);
        let _span = crate::trace::span("write cache");
        let meta = sections.assemble(progress)?;
        Ok((meta, spilled))
    }
}

/// The last chunk, which joins the final merge from memory.
enum Last {
    Keys(Vec<Record>),
    Rows(Box<SortedChunk>),
}

/// The final merge's output: the cache's sections, each in its own temporary file (or, for a
/// set that fit one chunk, in memory), then assembled into the cache.
struct Sections<'a> {
    sorter: CacheSorter<'a>,
    values: SectionOut,
    digests: SectionOut,
    lens: SectionOut,
    data: SectionOut,
    count: u64,
    label_bytes: u64,
}

/// One section: appended to, then read back once.
enum SectionOut {
    Memory(Vec<u8>),
    File(PathBuf, BufWriter<File>),
}

impl SectionOut {
    fn create(sorter: &mut CacheSorter<'_>, on_disk: bool) -> Result<SectionOut, DataError> {
        if !on_disk {
            return Ok(SectionOut::Memory(Vec::new()));
        }
        let p = sorter.new_run_path()?;
        let f =
            private_fs::create_new(&p).map_err(io(&p, "creating a section of the cache sort"))?;
        Ok(SectionOut::File(p, BufWriter::with_capacity(1 << 20, f)))
    }

    fn put(&mut self, b: &[u8]) -> Result<(), DataError> {
        match self {
            SectionOut::Memory(v) => {
                v.extend_from_slice(b);
                Ok(())
            }
            SectionOut::File(p, w) => w
                .write_all(b)
                .map_err(io(p, "writing a section of the cache sort")),
        }
    }

    /// Hands the section's bytes to `f` in pieces of whole `unit`-byte records.
    fn replay(
        self,
        unit: usize,
        f: &mut dyn FnMut(&[u8]) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        match self {
            SectionOut::Memory(v) => {
                for c in v.chunks(COPY_CHUNK / unit * unit) {
                    f(c)?;
                }
                Ok(())
            }
            SectionOut::File(p, w) => {
                let file = w
                    .into_inner()
                    .map_err(|e| io(&p, "writing a section of the cache sort")(e.into_error()))?;
                drop(file);
                let mut r =
                    File::open(&p).map_err(io(&p, "reading a section of the cache sort"))?;
                let mut buf = vec![0u8; COPY_CHUNK / unit * unit];
                loop {
                    let mut got = 0;
                    while got < buf.len() {
                        let n = r
                            .read(&mut buf[got..])
                            .map_err(io(&p, "reading a section of the cache sort"))?;
                        if n == 0 {
                            break;
                        }
                        got += n;
                    }
                    if got == 0 {
                        break;
                    }
                    f(&buf[..got])?;
                    if got < buf.len() {
                        break;
                    }
                }
                let _ = std::fs::remove_file(&p);
                Ok(())
            }
        }
    }
}

impl<'a> Sections<'a> {
    fn create(mut sorter: CacheSorter<'a>, on_disk: bool) -> Result<Sections<'a>, DataError> {
        let values = SectionOut::create(&mut sorter, on_disk)?;
        let digests = SectionOut::create(&mut sorter, on_disk)?;
        let labels = sorter.labels.is_some();
        let lens = SectionOut::create(&mut sorter, on_disk && labels)?;
        let data = SectionOut::create(&mut sorter, on_disk && labels)?;
        Ok(Sections {
            sorter,
            values,
            digests,
            lens,
            data,
            count: 0,
            label_bytes: 0,
        })
    }

    /// Writes the cache from the sections: header, values cut to ℓ, digests, label lengths,
    /// labels, checksum; atomically and 0600 as [`cache::write_server`].
    fn assemble(self, progress: &dyn Progress) -> Result<CacheMeta, DataError> {
        let Sections {
            sorter,
            values,
            digests,
            lens,
            data,
            count,
            label_bytes,
        } = self;
        if count > MAX_SERVER_ITEMS {
            return Err(DataError::Protocol(ProtocolError::Config(format!(
                "unbalanced PSI caches at most {MAX_SERVER_ITEMS} unique keys"
            ))));
        }
        let tl = tag_len(count);
        let meta = CacheMeta {
            curve: sorter.curve,
            count,
            tag_len: tl,
            key_check: sorter
                .key
                .key_check_value()
                .map_err(|e| DataError::Protocol(ProtocolError::Crypto(e)))?,
            labels: sorter.labels.map(|l| LabelMeta {
                salt: l.salt,
                columns: l.columns.clone(),
                bytes: label_bytes,
            }),
        };
        progress.stage("writing the server cache", count);
        crate::table::private_fs::warn_if_shared(&sorter.folder(), "the cache's folder");
        let mut f = AtomicFile::create(&sorter.path)?;
        let mut hash = Sha256::new();
        let mut put = |b: &[u8]| -> Result<(), DataError> {
            hash.update(b);
            f.write_all(b)
        };
        put(&cache::header_of_server(&meta))?;
        let mut cut = Vec::with_capacity(COPY_CHUNK);
        values.replay(TAG, &mut |c| {
            cut.clear();
            for v in c.chunks_exact(TAG) {
                cut.extend_from_slice(&v[..tl]);
            }
            progress.advance((c.len() / TAG) as u64);
            put(&cut)
        })?;
        digests.replay(16, &mut put)?;
        lens.replay(4, &mut put)?;
        data.replay(1, &mut put)?;
        let sum = hash.finalize();
        f.write_all(&sum)?;
        f.commit()?;
        drop(sorter);
        Ok(meta)
    }
}

impl MergeOut for Sections<'_> {
    fn put(&mut self, t: &Tag, d: &ItemDigest, label: &[u8]) -> Result<(), DataError> {
        self.values.put(t)?;
        self.digests.put(d)?;
        if self.sorter.labels.is_some() {
            self.lens.put(&(label.len() as u32).to_le_bytes())?;
            self.data.put(label)?;
            self.label_bytes += label.len() as u64;
        }
        self.count += 1;
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::error::ConfigError;
    use crate::ub::cache::write_server;
    use crate::ub::labels::encode;
    use blindjoin_crypto::item_digest;
    use blindjoin_protocols::NoProgress;
    use blindjoin_protocols::ub_oprf::evaluate_server_set;
    use blindjoin_protocols::ub_oprf::labels::{LabelKey, MAX_SEALED_LEN, SealedLabels, seal};

    pub(in crate::ub) fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bj-ub-gen-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A key's plaintext label, for the reference.
    pub(in crate::ub) type Plain<'a> = &'a dyn Fn(&ItemDigest) -> Vec<u8>;

    /// The in-memory generation this module replaces (as it ran before the external sort):
    /// unique digests sorted, evaluated and ordered by their ℓ-byte values, each key's whole
    /// label sealed in position order, one write.
    pub(in crate::ub) fn write_in_memory(
        path: &Path,
        key: &OprfScalar,
        rows: &[ItemDigest],
        labels: Option<(&LabelSource, Plain<'_>)>,
    ) {
        let mut unique = rows.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let tl = tag_len(unique.len() as u64);
        let set = evaluate_server_set(key, &unique, tl, labels.is_some(), &NoProgress).unwrap();
        let mut label_meta = None;
        let mut sealed = None;
        if let (Some(points), Some((src, plain))) = (set.points, labels) {
            let mut s = SealedLabels::default();
            s.offsets.push(0);
            for &u in &set.order {
                let d = unique[u as usize];
                s.push(&seal(
                    &LabelKey::derive(&points[u as usize], &src.salt),
                    &plain(&d),
                ));
            }
            label_meta = Some(LabelMeta {
                salt: src.salt,
                columns: src.columns.clone(),
                bytes: s.data.len() as u64,
            });
            sealed = Some(s);
        }
        let digests: Vec<ItemDigest> = set.order.iter().map(|&i| unique[i as usize]).collect();
        let meta = CacheMeta {
            curve: Curve::FourQ,
            count: digests.len() as u64,
            tag_len: tl,
            key_check: key.key_check_value().unwrap(),
            labels: label_meta,
        };
        write_server(path, &meta, &set.values, &digests, sealed.as_ref()).unwrap();
    }

    fn sorted(path: &Path, key: &OprfScalar, rows: &[ItemDigest], limits: SortLimits) -> usize {
        let mut s = CacheSorter::new(path, key, Curve::FourQ, None, limits);
        for d in rows {
            s.push(*d).unwrap();
        }
        s.finish(&NoProgress).unwrap().1
    }

    /// The sort with labels over rows of (digest, cells), numbered in order.
    fn sorted_rows(
        path: &Path,
        key: &OprfScalar,
        rows: &[(ItemDigest, Vec<u8>)],
        src: &LabelSource,
        limits: SortLimits,
    ) -> Result<usize, DataError> {
        let mut s = CacheSorter::new(path, key, Curve::FourQ, Some(src), limits);
        for (i, (d, cells)) in rows.iter().enumerate() {
            s.push_row(*d, i as u64, cells)?;
        }
        Ok(s.finish(&NoProgress)?.1)
    }

    /// Server rows: keys `k0 … k(n−1)`, every seventh repeated (once right away, once at the
    /// end, so repeats fall in the same chunk and in other chunks), and `k3` again every 50
    /// rows (a key in many chunks).
    fn rows(n: usize) -> Vec<ItemDigest> {
        let key = |i: usize| item_digest(format!("k{i}").as_bytes());
        let mut r: Vec<ItemDigest> = Vec::new();
        for i in 0..n {
            r.push(key(i));
            if i % 7 == 0 {
                r.push(key(i));
            }
            if n > 3 && i % 50 == 49 {
                r.push(key(3));
            }
        }
        r.extend((0..n).step_by(7).map(key));
        r
    }

    /// One row's label cells (two columns): a part of its key that varies in length (empty for
    /// some keys) and its row number (so the order of a key's rows shows in its label).
    fn cells(d: &ItemDigest, row: usize) -> Vec<u8> {
        let a = d[..(d[0] % 9) as usize].repeat(3);
        let b = row.to_string().into_bytes();
        let r = [a, b];
        let mut e = encode(&[&r[..]]);
        e.drain(..4);
        e
    }

    /// Every key's label as the whole-table gathering made it: its rows' cells in file order.
    fn plain_of(rows: &[(ItemDigest, Vec<u8>)]) -> impl Fn(&ItemDigest) -> Vec<u8> + '_ {
        move |d| {
            let mine: Vec<&Vec<u8>> = rows.iter().filter(|r| r.0 == *d).map(|r| &r.1).collect();
            let mut out = (mine.len() as u32).to_le_bytes().to_vec();
            for c in mine {
                out.extend_from_slice(c);
            }
            out
        }
    }

    fn left_in(d: &Path) -> Vec<String> {
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        left
    }

    fn src() -> LabelSource {
        LabelSource {
            salt: [3; SALT_LEN],
            columns: vec!["a".into(), "b".into()],
        }
    }

    #[test]
    fn the_external_sort_writes_the_in_memory_file_byte_for_byte() {
        let key = OprfScalar::from_seed(Curve::FourQ, &[7u8; 32]).unwrap();
        let d = dir("same");
        let tiny = SortLimits {
            memory: 5 * CHUNK_BYTES_PER_ITEM,
            fan_in: 3,
        };
        for n in [0usize, 1, 2, 40, 1000] {
            let r = rows(n);
            let (a, b, c) = (d.join("mem"), d.join("ext"), d.join("one"));
            write_in_memory(&a, &key, &r, None);
            let runs = sorted(&b, &key, &r, tiny);
            let one = sorted(&c, &key, &r, SortLimits::default());
            let want = std::fs::read(&a).unwrap();
            assert_eq!(std::fs::read(&b).unwrap(), want, "n={n}");
            assert_eq!(std::fs::read(&c).unwrap(), want, "n={n}");
            // Multi-run (and for 1000 keys multi-pass) merges were exercised; one chunk
            // spills nothing.
            assert_eq!(runs, r.len() / 5, "n={n}");
            assert_eq!(one, 0, "n={n}");
            // The file reads back as a cache with each unique key once.
            let f = cache::open_server(&b).unwrap();
            let mut u = r.clone();
            u.sort_unstable();
            u.dedup();
            assert_eq!(f.meta.count, u.len() as u64, "n={n}");
            assert!(f.meta.labels.is_none());
        }
        assert_eq!(left_in(&d), ["ext", "mem", "one"]);
    }

    #[test]
    fn with_labels_the_rows_sort_writes_the_in_memory_file_byte_for_byte() {
        let key = OprfScalar::from_seed(Curve::FourQ, &[7u8; 32]).unwrap();
        let d = dir("same-labels");
        let src = src();
        // About five rows a chunk; and a budget below one row (every row a chunk alone).
        let five = SortLimits {
            memory: 5 * (CHUNK_BYTES_PER_ROW + 16),
            fan_in: 3,
        };
        let alone = SortLimits {
            memory: 1,
            fan_in: 2,
        };
        for n in [0usize, 1, 2, 40, 1000] {
            let r: Vec<(ItemDigest, Vec<u8>)> = rows(n)
                .into_iter()
                .enumerate()
                .map(|(i, d)| (d, cells(&d, i)))
                .collect();
            let digests: Vec<ItemDigest> = r.iter().map(|x| x.0).collect();
            let plain = plain_of(&r);
            let (a, b, c, e) = (d.join("mem"), d.join("ext"), d.join("one"), d.join("alone"));
            write_in_memory(&a, &key, &digests, Some((&src, &plain)));
            let want = std::fs::read(&a).unwrap();
            let runs = sorted_rows(&b, &key, &r, &src, five).unwrap();
            assert_eq!(std::fs::read(&b).unwrap(), want, "n={n}");
            let one = sorted_rows(&c, &key, &r, &src, SortLimits::default()).unwrap();
            assert_eq!(std::fs::read(&c).unwrap(), want, "n={n}");
            assert_eq!(one, 0, "n={n}");
            if n >= 40 {
                // Chunks of four or five rows, k3's rows in many of them; for 1000 keys more
                // runs than the fan-in, so several merge passes.
                assert!(
                    runs >= r.len() / 5 && runs < r.len() / 3,
                    "n={n} runs={runs}"
                );
            }
            if n <= 40 {
                let runs = sorted_rows(&e, &key, &r, &src, alone).unwrap();
                assert_eq!(std::fs::read(&e).unwrap(), want, "n={n}");
                assert_eq!(runs, r.len().saturating_sub(1), "n={n}");
            }
            let f = cache::open_server(&b).unwrap();
            let mut u = digests.clone();
            u.sort_unstable();
            u.dedup();
            assert_eq!(f.meta.count, u.len() as u64, "n={n}");
            assert_eq!(f.meta.labels.map(|l| l.columns), Some(src.columns.clone()));
        }
        assert_eq!(left_in(&d), ["alone", "ext", "mem", "one"]);
    }

    fn is_label_error(e: &DataError) -> bool {
        matches!(e, DataError::Config(ConfigError::Invalid { field, .. })
            if field == "blindjoin.label_columns")
    }

    #[test]
    fn too_long_labels_and_failed_sorts_leave_no_temporary_files() {
        let key = OprfScalar::from_seed(Curve::FourQ, &[1u8; 32]).unwrap();
        let d = dir("fail");
        let tiny = SortLimits {
            memory: 2 * CHUNK_BYTES_PER_ITEM,
            fan_in: 2,
        };
        // One key 50 times, over 25 chunks: one value in the cache.
        let same = vec![item_digest(b"x"); 50];
        let (a, b) = (d.join("mem"), d.join("ext"));
        write_in_memory(&a, &key, &same, None);
        sorted(&b, &key, &same, tiny);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert_eq!(cache::open_server(&b).unwrap().meta.count, 1);
        let src = src();
        let small = SortLimits {
            memory: 4 * CHUNK_BYTES_PER_ROW,
            fan_in: 2,
        };
        // One key whose rows, each well under the bound, add up past it: found on the
        // merge, after runs were written.
        let big = vec![7u8; MAX_SEALED_LEN / 3];
        let x = item_digest(b"x");
        let mut r: Vec<(ItemDigest, Vec<u8>)> = (0..20)
            .map(|i| {
                (
                    item_digest(format!("k{i}").as_bytes()),
                    vec![1, 0, 0, 0, b'v'],
                )
            })
            .collect();
        for at in [2, 9, 17] {
            r.insert(at, (x, big.clone()));
        }
        let e = sorted_rows(&d.join("sum"), &key, &r, &src, small).unwrap_err();
        assert!(is_label_error(&e), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("{} bytes", 4 + 3 * big.len() + 16)),
            "{e}"
        );
        // Two rows of it fit.
        r.remove(17);
        sorted_rows(&d.join("two"), &key, &r, &src, small).unwrap();
        // One row alone past the bound: refused as it is pushed.
        let mut s = CacheSorter::new(&d.join("row"), &key, Curve::FourQ, Some(&src), small);
        for (i, (dg, c)) in r.iter().enumerate().take(10) {
            s.push_row(*dg, i as u64, c).unwrap();
        }
        let e = s.push_row(x, 10, &vec![0u8; MAX_SEALED_LEN]).unwrap_err();
        assert!(is_label_error(&e), "{e}");
        drop(s);
        // Keys and rows mixed up are refused.
        let mut s = CacheSorter::new(&d.join("mix"), &key, Curve::FourQ, Some(&src), small);
        assert!(s.push(x).is_err());
        let mut s = CacheSorter::new(&d.join("mix"), &key, Curve::FourQ, None, small);
        assert!(s.push_row(x, 0, &[]).is_err());
        assert_eq!(left_in(&d), ["ext", "mem", "two"]);
    }

    #[cfg(unix)]
    #[test]
    fn the_temporary_folder_and_runs_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let key = OprfScalar::from_seed(Curve::FourQ, &[2u8; 32]).unwrap();
        let d = dir("modes");
        let src = src();
        for labels in [None, Some(&src)] {
            let mut s = CacheSorter::new(
                &d.join("c"),
                &key,
                Curve::FourQ,
                labels,
                SortLimits {
                    memory: 3 * CHUNK_BYTES_PER_ITEM,
                    fan_in: 2,
                },
            );
            for (i, r) in rows(10).into_iter().enumerate() {
                match labels {
                    None => s.push(r).unwrap(),
                    Some(_) => s.push_row(r, i as u64, &cells(&r, i)).unwrap(),
                }
            }
            let tmp = s.dir.as_ref().unwrap().0.clone();
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&tmp), 0o700);
            for e in std::fs::read_dir(&tmp).unwrap() {
                assert_eq!(mode(&e.unwrap().path()), 0o600);
            }
            s.finish(&NoProgress).unwrap();
            assert!(!tmp.exists());
            assert_eq!(mode(&d.join("c")), 0o600);
            std::fs::remove_file(d.join("c")).unwrap();
        }
    }

    /// The derivation in [`DEFAULT_SORT_MEMORY`]'s doc.
    #[test]
    fn the_default_budget_sorts_a_billion_keys_in_two_passes() {
        let per_run = (DEFAULT_SORT_MEMORY / CHUNK_BYTES_PER_ITEM) as u64;
        assert_eq!(per_run, 1 << 22);
        let runs = (1u64 << 30).div_ceil(per_run);
        assert_eq!(runs, 256);
        // First pass: groups of the fan-in; second: the merged groups and the last chunk.
        assert!(runs.div_ceil(DEFAULT_FAN_IN as u64) < DEFAULT_FAN_IN as u64);
        // A record of a chunk fits its share.
        assert!(std::mem::size_of::<Record>() + 16 <= CHUNK_BYTES_PER_ITEM);
    }
}
