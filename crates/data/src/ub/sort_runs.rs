//! The cache sort's runs ([`super::gen_cache`]): records of a 16-byte OPRF tag, a 16-byte item
//! digest and, in a cache with labels, the item's sealed label (`u32` length, LE, then the
//! bytes), in (tag, digest) order; and their k-way merge, which keeps each distinct record once
//! (a key read twice gives two equal records, adjacent once sorted).
//!
//! The run files are our own, in the sort's private folder; a reader still checks what it reads
//! (a truncated run, a label longer than any sealed label) and reports it as an error naming the
//! file, never a panic.

use crate::error::DataError;
use crate::table::private_fs;
use blindjoin_crypto::ItemDigest;
use blindjoin_protocols::Progress;
use blindjoin_protocols::ub_oprf::MAX_TAG_LEN;
use blindjoin_protocols::ub_oprf::labels::MAX_SEALED_LEN;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Bytes of the full OPRF tag kept while sorting (the longest ℓ).
pub(super) const TAG: usize = MAX_TAG_LEN;
pub(super) type Tag = [u8; TAG];
/// A sorted chunk's records: (tag, digest, index of its label in the chunk's labels).
pub(super) type Record = (Tag, ItemDigest, u32);

/// A run on disk: its file and how many records it holds.
pub(super) struct RunFile {
    pub(super) path: PathBuf,
    pub(super) records: u64,
}

pub(super) fn io(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> DataError {
    let path = path.to_path_buf();
    move |source| DataError::Io {
        path,
        action,
        source,
    }
}

/// Where a merge puts each unique record, in order.
pub(super) trait MergeOut {
    fn put(&mut self, t: &Tag, d: &ItemDigest, label: &[u8]) -> Result<(), DataError>;
}

/// One run being merged: a file, or the last chunk in memory.
pub(super) enum RunIn {
    File {
        path: PathBuf,
        r: BufReader<File>,
        left: u64,
        labels: bool,
        label: Vec<u8>,
    },
    Memory {
        records: std::vec::IntoIter<Record>,
        labels: Vec<Vec<u8>>,
    },
}

impl RunIn {
    /// The next record; its label is then [`RunIn::label`].
    fn next(&mut self) -> Result<Option<(Tag, ItemDigest, u32)>, DataError> {
        match self {
            RunIn::Memory { records, .. } => Ok(records.next()),
            RunIn::File {
                path,
                r,
                left,
                labels,
                label,
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
                let mut rec = [0u8; 32];
                r.read_exact(&mut rec).map_err(|_| bad("truncated run"))?;
                let mut t = [0u8; TAG];
                let mut d = [0u8; 16];
                t.copy_from_slice(&rec[..16]);
                d.copy_from_slice(&rec[16..]);
                if *labels {
                    let mut l4 = [0u8; 4];
                    r.read_exact(&mut l4).map_err(|_| bad("truncated run"))?;
                    let n = u32::from_le_bytes(l4) as usize;
                    if n > MAX_SEALED_LEN {
                        return Err(bad("a label longer than any sealed label"));
                    }
                    label.clear();
                    label.resize(n, 0);
                    r.read_exact(label).map_err(|_| bad("truncated run"))?;
                }
                Ok(Some((t, d, 0)))
            }
        }
    }

    /// The label of the record `next` returned (with index `i`).
    fn label(&self, i: u32) -> &[u8] {
        match self {
            RunIn::Memory { labels, .. } => labels.get(i as usize).map_or(&[][..], |l| &l[..]),
            RunIn::File { label, .. } => label,
        }
    }
}

/// Opens `runs` for merging, sharing half of `memory` among their read buffers.
pub(super) fn open_runs(
    runs: &[RunFile],
    labels: bool,
    memory: usize,
) -> Result<Vec<RunIn>, DataError> {
    let buf = (memory / 2 / runs.len().max(1)).clamp(4 << 10, 1 << 20);
    runs.iter()
        .map(|run| {
            let f =
                File::open(&run.path).map_err(io(&run.path, "opening a run of the cache sort"))?;
            Ok(RunIn::File {
                path: run.path.clone(),
                r: BufReader::with_capacity(buf, f),
                left: run.records,
                labels,
                label: Vec::new(),
            })
        })
        .collect()
}

/// k-way merge of `inputs` into `out`, each distinct (tag, digest) once.
pub(super) fn merge(inputs: Vec<RunIn>, out: &mut dyn MergeOut) -> Result<(), DataError> {
    merge_counted(inputs, out, &blindjoin_protocols::NoProgress)
}

pub(super) fn merge_counted(
    mut inputs: Vec<RunIn>,
    out: &mut dyn MergeOut,
    progress: &dyn Progress,
) -> Result<(), DataError> {
    let mut heap = BinaryHeap::with_capacity(inputs.len());
    for (k, run) in inputs.iter_mut().enumerate() {
        if let Some((t, d, i)) = run.next()? {
            heap.push(Reverse((t, d, k, i)));
        }
    }
    let mut last: Option<(Tag, ItemDigest)> = None;
    let mut done = 0u64;
    while let Some(Reverse((t, d, k, i))) = heap.pop() {
        if last != Some((t, d)) {
            out.put(&t, &d, inputs[k].label(i))?;
            last = Some((t, d));
        }
        done += 1;
        if done.is_multiple_of(1 << 16) {
            progress.advance(1 << 16);
        }
        if let Some((t, d, i)) = inputs[k].next()? {
            heap.push(Reverse((t, d, k, i)));
        }
    }
    progress.advance(done % (1 << 16));
    Ok(())
}

/// A run file being written.
pub(super) struct RunWriter {
    path: PathBuf,
    w: BufWriter<File>,
    labels: bool,
    records: u64,
}

impl RunWriter {
    pub(super) fn create(path: &Path, labels: bool) -> Result<RunWriter, DataError> {
        let f =
            private_fs::create_new(path).map_err(io(path, "creating a run of the cache sort"))?;
        Ok(RunWriter {
            path: path.to_path_buf(),
            w: BufWriter::with_capacity(1 << 20, f),
            labels,
            records: 0,
        })
    }

    pub(super) fn finish(self) -> Result<u64, DataError> {
        let path = self.path.clone();
        self.w
            .into_inner()
            .map_err(|e| io(&path, "writing a run of the cache sort")(e.into_error()))?;
        Ok(self.records)
    }
}

impl MergeOut for RunWriter {
    fn put(&mut self, t: &Tag, d: &ItemDigest, label: &[u8]) -> Result<(), DataError> {
        let mut put = || -> std::io::Result<()> {
            self.w.write_all(t)?;
            self.w.write_all(d)?;
            if self.labels {
                self.w.write_all(&(label.len() as u32).to_le_bytes())?;
                self.w.write_all(label)?;
            }
            Ok(())
        };
        put().map_err(io(&self.path, "writing a run of the cache sort"))?;
        self.records += 1;
        Ok(())
    }
}

/// Writes a sorted chunk as a run; returns its record count.
pub(super) fn write_run(
    path: &Path,
    records: &[Record],
    labels: &[Vec<u8>],
    with_labels: bool,
) -> Result<u64, DataError> {
    let mut w = RunWriter::create(path, with_labels)?;
    for (t, d, i) in records {
        let l = labels.get(*i as usize).map_or(&[][..], |l| &l[..]);
        w.put(t, d, l)?;
    }
    w.finish()
}
