//! Generating the server cache in bounded memory: an external sort of the OPRF values.
//!
//! The server's keys arrive as a stream of item digests (file order, duplicates included,
//! [`CacheSorter::push`]). They are gathered in chunks of at most
//! [`SortLimits::memory`]` / `[`CHUNK_BYTES_PER_ITEM`] items; each chunk is deduplicated,
//! evaluated (`F_k(y)`, keeping the full 16-byte tag, and with labels the item's sealed label),
//! sorted by (tag, digest) and written as a run (`sort_runs.rs`) to a private temporary
//! folder. The runs are then
//! merged k-way, at most [`SortLimits::fan_in`] at a time, and a key that was in two chunks is
//! dropped on the merge: its two records are equal (same digest, so same tag and label) and
//! adjacent after sorting. The last chunk is never written: it joins the final merge from
//! memory, so a set that fits one chunk touches no temporary file.
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
//! Memory: one chunk ([`CHUNK_BYTES_PER_ITEM`] bytes per item: its digest, then its record),
//! plus with labels the chunk's sealed labels; the merge's read buffers (at most
//! [`SortLimits::memory`] / 2 over all runs); fixed buffers. Nothing grows with the server's
//! set. Disk: runs of 32 bytes per key (plus labels), then sections of 32 bytes per key, then
//! the cache. The temporary folder is made next to the cache (same file system, and the cache's
//! folder is the one the user chose for the server's data), mode 0700 with files 0600, and is
//! removed when the sort ends, whether it succeeded or not: its files map the server's keys to
//! their OPRF values, as the cache does.

use super::cache;
use super::sort_runs::{
    MergeOut, Record, RunFile, RunIn, RunWriter, TAG, Tag, io, merge, merge_counted, open_runs,
    write_run,
};
use crate::error::{ConfigError, DataError};
use crate::table::output::AtomicFile;
use crate::table::private_fs;
use blindjoin_crypto::oprf::{OprfScalar, POINT_LEN, tag};
use blindjoin_crypto::{Curve, ItemDigest};
use blindjoin_protocols::ub_oprf::labels::{LabelKey, MAX_SEALED_LEN, SALT_LEN, seal};
use blindjoin_protocols::ub_oprf::{CacheMeta, LabelMeta, MAX_SERVER_ITEMS, tag_len};
use blindjoin_protocols::{Progress, ProtocolError};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Memory one chunk item takes while its chunk is evaluated and sorted: the 16-byte digest as
/// read, then its record (16-byte tag, 16-byte digest, 4-byte label index), rounded up.
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
    /// Bytes for one chunk (see [`CHUNK_BYTES_PER_ITEM`]); at least one item.
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

/// What the cache's labels are made of: the salt and column names (its [`LabelMeta`]), and each
/// key's encoded label rows ([`super::labels::encode`]), sealed as the key's chunk is evaluated.
pub struct LabelSource<'a> {
    /// The per-cache salt of the label keys.
    pub salt: [u8; SALT_LEN],
    /// The label columns, in order.
    pub columns: Vec<String>,
    /// The plaintext label of a key of the table.
    pub plain: &'a (dyn Fn(&ItemDigest) -> Result<Vec<u8>, DataError> + Sync),
}

/// The server cache made by an external sort: push every key's digest, then [`finish`].
///
/// [`finish`]: CacheSorter::finish
pub struct CacheSorter<'a> {
    path: PathBuf,
    key: &'a OprfScalar,
    curve: Curve,
    labels: Option<&'a LabelSource<'a>>,
    limits: SortLimits,
    chunk: Vec<ItemDigest>,
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
        labels: Option<&'a LabelSource<'a>>,
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
            cap,
            dir: None,
            runs: Vec::new(),
            names: 0,
        }
    }

    /// Takes one key's digest (in any order, repeats allowed).
    ///
    /// # Errors
    /// Writing a full chunk's run failed, or evaluating or sealing it did.
    pub fn push(&mut self, d: ItemDigest) -> Result<(), DataError> {
        if self.chunk.capacity() == 0 {
            self.chunk.reserve_exact(self.cap);
        }
        self.chunk.push(d);
        if self.chunk.len() >= self.cap {
            let (records, labels) = self.evaluate_chunk()?;
            let _span = crate::trace::span("write run");
            let run = self.new_run_path()?;
            let n = write_run(&run, &records, &labels, self.labels.is_some())?;
            self.runs.push(RunFile {
                path: run,
                records: n,
            });
        }
        Ok(())
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

    /// Deduplicates, evaluates, seals and sorts the current chunk, leaving it empty.
    fn evaluate_chunk(&mut self) -> Result<(Vec<Record>, Vec<Vec<u8>>), DataError> {
        let mut items = std::mem::take(&mut self.chunk);
        let oprf_span = crate::trace::span("evaluate OPRF");
        items.par_sort_unstable();
        items.dedup();
        let mut records: Vec<Record> = Vec::with_capacity(items.len());
        let mut labels: Vec<Vec<u8>> = Vec::new();
        let mut points = vec![0u8; OPRF_BATCH.min(items.len()) * POINT_LEN];
        for batch in items.chunks(OPRF_BATCH) {
            let pts = &mut points[..batch.len() * POINT_LEN];
            self.key
                .hash_and_mul(batch, pts)
                .map_err(|e| DataError::Protocol(ProtocolError::Crypto(e)))?;
            let first = records.len() as u32;
            records.par_extend(
                pts.par_chunks(POINT_LEN)
                    .zip(batch.par_iter())
                    .enumerate()
                    .map(|(i, (p, d))| {
                        let mut t = [0u8; TAG];
                        t.copy_from_slice(&tag(p)[..TAG]);
                        (t, *d, first + i as u32)
                    }),
            );
            if let Some(src) = self.labels {
                let sealed: Vec<Vec<u8>> = pts
                    .par_chunks(POINT_LEN)
                    .zip(batch.par_iter())
                    .map(|(p, d)| {
                        let blob = seal(&LabelKey::derive(p, &src.salt), &(src.plain)(d)?);
                        if blob.len() > MAX_SEALED_LEN {
                            return Err(DataError::Config(ConfigError::Invalid {
                                field: "blindjoin.label_columns".into(),
                                message: format!(
                                    "one key's rows hold {} bytes of labels; the most one key \
                                     may carry is {MAX_SEALED_LEN} (choose fewer columns)",
                                    blob.len()
                                ),
                            }));
                        }
                        Ok(blob)
                    })
                    .collect::<Result<_, _>>()?;
                labels.extend(sealed);
            }
        }
        drop(items);
        drop(points);
        drop(oprf_span);
        let _sort = crate::trace::span("sort run");
        records.par_sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        Ok((records, labels))
    }

    /// Merges the runs into the cache at the sorter's path and returns its metadata and
    /// the number of runs written to disk.
    ///
    /// # Errors
    /// I/O on the temporary files or the cache; more unique keys than a cache holds.
    pub fn finish(mut self, progress: &dyn Progress) -> Result<(CacheMeta, usize), DataError> {
        let with_labels = self.labels.is_some();
        let (last, last_labels) = self.evaluate_chunk()?;
        let spilled = self.runs.len();
        // Merge runs on disk in passes until one last merge (with the chunk in memory) is
        // within the fan-in.
        while self.runs.len() + 1 > self.limits.fan_in {
            let _span = crate::trace::span("merge runs (pass)");
            let take = self.limits.fan_in.min(self.runs.len());
            let group: Vec<RunFile> = self.runs.drain(..take).collect();
            let out = self.new_run_path()?;
            let mut w = RunWriter::create(&out, with_labels)?;
            let inputs = open_runs(&group, with_labels, self.limits.memory)?;
            merge(inputs, &mut w)?;
            let records = w.finish()?;
            for g in &group {
                let _ = std::fs::remove_file(&g.path);
            }
            self.runs.push(RunFile { path: out, records });
        }
        let _span = crate::trace::span("merge runs");
        let total: u64 = self.runs.iter().map(|r| r.records).sum::<u64>() + last.len() as u64;
        progress.stage("merging the sorted runs", total);
        let mut inputs = open_runs(&self.runs, with_labels, self.limits.memory)?;
        inputs.push(RunIn::Memory {
            records: last.into_iter(),
            labels: last_labels,
        });
        // A set that fit one chunk stays in memory to the end.
        let on_disk = !self.runs.is_empty();
        let runs: Vec<PathBuf> = self.runs.drain(..).map(|r| r.path).collect();
        let mut sections = Sections::create(self, on_disk)?;
        merge_counted(inputs, &mut sections, progress)?;
        // The runs' disk is free again before the cache is written.
        for r in &runs {
            let _ = std::fs::remove_file(r);
        }
        drop(_span);
        let _span = crate::trace::span("write cache");
        let meta = sections.assemble(progress)?;
        Ok((meta, spilled))
    }
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
mod tests {
    use super::*;
    use crate::ub::cache::write_server;
    use blindjoin_crypto::item_digest;
    use blindjoin_protocols::NoProgress;
    use blindjoin_protocols::ub_oprf::evaluate_server_set;
    use blindjoin_protocols::ub_oprf::labels::SealedLabels;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bj-ub-gen-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The in-memory generation this module replaces (as it ran before the external sort):
    /// unique digests sorted, evaluated and ordered by their ℓ-byte values, labels sealed in
    /// position order, one write.
    fn write_in_memory(
        path: &Path,
        key: &OprfScalar,
        rows: &[ItemDigest],
        labels: Option<&LabelSource<'_>>,
    ) {
        let mut unique = rows.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let tl = tag_len(unique.len() as u64);
        let set = evaluate_server_set(key, &unique, tl, labels.is_some(), &NoProgress).unwrap();
        let mut label_meta = None;
        let mut sealed = None;
        if let (Some(points), Some(src)) = (set.points, labels) {
            let mut s = SealedLabels::default();
            s.offsets.push(0);
            for &u in &set.order {
                let d = unique[u as usize];
                s.push(&seal(
                    &LabelKey::derive(&points[u as usize], &src.salt),
                    &(src.plain)(&d).unwrap(),
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

    fn sorted(
        path: &Path,
        key: &OprfScalar,
        rows: &[ItemDigest],
        labels: Option<&LabelSource<'_>>,
        limits: SortLimits,
    ) -> usize {
        let mut s = CacheSorter::new(path, key, Curve::FourQ, labels, limits);
        for d in rows {
            s.push(*d).unwrap();
        }
        s.finish(&NoProgress).unwrap().1
    }

    /// Server rows: keys `k0 … k(n−1)`, every seventh repeated (once right away, once at the
    /// end, so repeats fall in the same chunk and in other chunks).
    fn rows(n: usize) -> Vec<ItemDigest> {
        let key = |i: usize| item_digest(format!("k{i}").as_bytes());
        let mut r: Vec<ItemDigest> = Vec::new();
        for i in 0..n {
            r.push(key(i));
            if i % 7 == 0 {
                r.push(key(i));
            }
        }
        r.extend((0..n).step_by(7).map(key));
        r
    }

    fn label_of(d: &ItemDigest) -> Result<Vec<u8>, DataError> {
        // A label that varies in length with the key.
        Ok(d[..(d[0] % 9) as usize].repeat(3))
    }

    #[test]
    fn the_external_sort_writes_the_in_memory_file_byte_for_byte() {
        let key = OprfScalar::from_seed(Curve::FourQ, &[7u8; 32]).unwrap();
        let d = dir("same");
        let src = LabelSource {
            salt: [3; SALT_LEN],
            columns: vec!["a".into(), "b".into()],
            plain: &label_of,
        };
        let tiny = SortLimits {
            memory: 5 * CHUNK_BYTES_PER_ITEM,
            fan_in: 3,
        };
        for n in [0usize, 1, 2, 40, 1000] {
            for labels in [None, Some(&src)] {
                let r = rows(n);
                let (a, b, c) = (d.join("mem"), d.join("ext"), d.join("one"));
                write_in_memory(&a, &key, &r, labels);
                let runs = sorted(&b, &key, &r, labels, tiny);
                let one = sorted(&c, &key, &r, labels, SortLimits::default());
                let want = std::fs::read(&a).unwrap();
                let tag = format!("n={n} labels={}", labels.is_some());
                assert_eq!(std::fs::read(&b).unwrap(), want, "{tag}");
                assert_eq!(std::fs::read(&c).unwrap(), want, "{tag}");
                // Multi-run (and for 1000 keys multi-pass) merges were exercised; one chunk
                // spills nothing.
                assert_eq!(runs, r.len() / 5, "{tag}");
                assert_eq!(one, 0, "{tag}");
                // The file reads back as a cache with each unique key once.
                let f = cache::open_server(&b).unwrap();
                let mut u = r.clone();
                u.sort_unstable();
                u.dedup();
                assert_eq!(f.meta.count, u.len() as u64, "{tag}");
                assert_eq!(f.meta.labels.is_some(), labels.is_some());
            }
        }
        // Nothing is left behind but the caches.
        let mut left: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["ext", "mem", "one"]);
    }

    #[test]
    fn all_duplicates_and_a_failed_sort_leave_no_temporary_files() {
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
        sorted(&b, &key, &same, None, tiny);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert_eq!(cache::open_server(&b).unwrap().meta.count, 1);
        // A label source that fails on the 30th key: the error comes back, the folder is gone.
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let failing = |d: &ItemDigest| {
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 30 {
                Err(DataError::Config(ConfigError::Invalid {
                    field: "x".into(),
                    message: "stop".into(),
                }))
            } else {
                label_of(d)
            }
        };
        let src = LabelSource {
            salt: [0; SALT_LEN],
            columns: vec!["c".into()],
            plain: &failing,
        };
        let c = d.join("failed");
        let mut s = CacheSorter::new(&c, &key, Curve::FourQ, Some(&src), tiny);
        let mut failed = false;
        for r in rows(100) {
            if s.push(r).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed);
        drop(s);
        let mut left: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["ext", "mem"]);
    }

    #[cfg(unix)]
    #[test]
    fn the_temporary_folder_and_runs_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let key = OprfScalar::from_seed(Curve::FourQ, &[2u8; 32]).unwrap();
        let d = dir("modes");
        let mut s = CacheSorter::new(
            &d.join("c"),
            &key,
            Curve::FourQ,
            None,
            SortLimits {
                memory: 3 * CHUNK_BYTES_PER_ITEM,
                fan_in: 2,
            },
        );
        for r in rows(10) {
            s.push(r).unwrap();
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
