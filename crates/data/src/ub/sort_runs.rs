//! The cache sort's runs without labels ([`super::gen_cache`]): records of a 16-byte OPRF tag
//! and a 16-byte item digest, in (tag, digest) order; and their k-way merge, which keeps each
//! distinct record once (a key read twice gives two equal records, adjacent once sorted). With
//! labels the runs hold rows instead ([`super::label_runs`]).
//!
//! The run files are our own, in the sort's private folder; a reader still checks what it reads
//! (a truncated run) and reports it as an error naming the file, never a panic.

use crate::error::DataError;
use crate::table::private_fs;
use blindjoin_crypto::ItemDigest;
use blindjoin_protocols::Progress;
use blindjoin_protocols::ub_oprf::MAX_TAG_LEN;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Bytes of the full OPRF tag kept while sorting (the longest ℓ).
pub(super) const TAG: usize = MAX_TAG_LEN;
pub(super) type Tag = [u8; TAG];
/// A sorted chunk's records: (tag, digest).
pub(super) type Record = (Tag, ItemDigest);

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

/// Where a merge puts each unique key, in order, with its sealed label (empty without labels).
pub(super) trait MergeOut {
    fn put(&mut self, t: &Tag, d: &ItemDigest, label: &[u8]) -> Result<(), DataError>;
}

/// One run being merged: a file, or the last chunk in memory.
pub(super) enum RunIn {
    File {
        path: PathBuf,
        r: BufReader<File>,
        left: u64,
    },
    Memory(std::vec::IntoIter<Record>),
}

impl RunIn {
    /// The next record.
    fn next(&mut self) -> Result<Option<Record>, DataError> {
        match self {
            RunIn::Memory(records) => Ok(records.next()),
            RunIn::File { path, r, left } => {
                if *left == 0 {
                    return Ok(None);
                }
                *left -= 1;
                let mut rec = [0u8; 32];
                r.read_exact(&mut rec).map_err(|_| DataError::Io {
                    path: path.clone(),
                    action: "reading a run of the cache sort",
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "truncated run (the temporary folder was changed during the run)",
                    ),
                })?;
                let mut t = [0u8; TAG];
                let mut d = [0u8; 16];
                t.copy_from_slice(&rec[..16]);
                d.copy_from_slice(&rec[16..]);
                Ok(Some((t, d)))
            }
        }
    }
}

/// Opens `runs` for merging, sharing half of `memory` among their read buffers.
pub(super) fn open_runs(runs: &[RunFile], memory: usize) -> Result<Vec<RunIn>, DataError> {
    let buf = (memory / 2 / runs.len().max(1)).clamp(4 << 10, 1 << 20);
    runs.iter()
        .map(|run| {
            let f =
                File::open(&run.path).map_err(io(&run.path, "opening a run of the cache sort"))?;
            Ok(RunIn::File {
                path: run.path.clone(),
                r: BufReader::with_capacity(buf, f),
                left: run.records,
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
    let mut last: Option<Record> = None;
    merge_sorted(
        &mut inputs,
        RunIn::next,
        |&(t, d), _| {
            if last != Some((t, d)) {
                out.put(&t, &d, &[])?;
                last = Some((t, d));
            }
            Ok(())
        },
        progress,
    )
}

/// The k-way merge both kinds of run use: `emit(key, source)` for every key of the sorted
/// `inputs` in order (equal keys in input order), the source still positioned on that key;
/// `progress` advances once per key.
pub(super) fn merge_sorted<S, K: Ord>(
    inputs: &mut [S],
    mut next: impl FnMut(&mut S) -> Result<Option<K>, DataError>,
    mut emit: impl FnMut(&K, &S) -> Result<(), DataError>,
    progress: &dyn Progress,
) -> Result<(), DataError> {
    let mut heap = BinaryHeap::with_capacity(inputs.len());
    for (k, input) in inputs.iter_mut().enumerate() {
        if let Some(key) = next(input)? {
            heap.push(Reverse((key, k)));
        }
    }
    let mut done = 0u64;
    while let Some(Reverse((key, k))) = heap.pop() {
        emit(&key, &inputs[k])?;
        done += 1;
        if done.is_multiple_of(1 << 16) {
            progress.advance(1 << 16);
        }
        if let Some(key) = next(&mut inputs[k])? {
            heap.push(Reverse((key, k)));
        }
    }
    progress.advance(done % (1 << 16));
    Ok(())
}

/// A run file being written.
pub(super) struct RunWriter {
    path: PathBuf,
    w: BufWriter<File>,
    records: u64,
}

impl RunWriter {
    pub(super) fn create(path: &Path) -> Result<RunWriter, DataError> {
        let f =
            private_fs::create_new(path).map_err(io(path, "creating a run of the cache sort"))?;
        Ok(RunWriter {
            path: path.to_path_buf(),
            w: BufWriter::with_capacity(1 << 20, f),
            records: 0,
        })
    }

    /// Flushes the run; returns its record count.
    pub(super) fn finish(self) -> Result<u64, DataError> {
        let path = self.path.clone();
        self.w
            .into_inner()
            .map_err(|e| io(&path, "writing a run of the cache sort")(e.into_error()))?;
        Ok(self.records)
    }

    /// Writes one record through `put` and counts it (the row runs' writer uses it too).
    pub(super) fn record(
        &mut self,
        put: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
    ) -> Result<(), DataError> {
        put(&mut self.w).map_err(io(&self.path, "writing a run of the cache sort"))?;
        self.records += 1;
        Ok(())
    }

    /// The run's file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

impl MergeOut for RunWriter {
    fn put(&mut self, t: &Tag, d: &ItemDigest, _label: &[u8]) -> Result<(), DataError> {
        self.record(|w| {
            w.write_all(t)?;
            w.write_all(d)
        })
    }
}

/// Writes a sorted chunk as a run; returns its record count.
pub(super) fn write_run(path: &Path, records: &[Record]) -> Result<u64, DataError> {
    let mut w = RunWriter::create(path)?;
    for (t, d) in records {
        w.put(t, d, &[])?;
    }
    w.finish()
}
