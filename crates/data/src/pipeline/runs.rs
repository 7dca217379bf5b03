//! Sorted runs of output rows, one per bucket, in memory or in a file, and their k-way merge
//! into the output — the external merge sort behind aligned output. Rows are kept as parsed
//! bytes with explicit lengths, so quoted fields with commas or newlines sort and merge intact
//! (SecretFlow pipes its CSV through `sort`, which splits such rows).
//!
//! A record is one output group: a sort key (a canonical key, or a big-endian row number), the
//! group's own rows, and how many times to repeat them for the join's pairs (see
//! [`crate::pipeline::join`]): the left side writes each row `times` times in a row, the right side its
//! whole run `times` times over.

use crate::error::DataError;
use crate::table::keys::{cmp_keys, key_prefix};
use crate::table::output::Sink;
use crate::table::private_fs;
use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

/// Record header: sort length, times, row count, left flag, payload length.
const HEAD: usize = 4 + 4 + 4 + 1 + 4;

/// How run records compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// Canonical keys, in [`cmp_keys`] order.
    Key,
    /// Plain bytes (big-endian row numbers).
    Bytes,
}

enum Store {
    Memory(Vec<u8>),
    Disk {
        path: PathBuf,
        out: Option<BufWriter<File>>,
        file: Option<File>,
        len: u64,
        /// Recovery keeps the file for a resumed run.
        keep: bool,
    },
}

/// Where a run file stands after a bucket: its length and its runs (for a checkpoint).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunsState {
    /// Bytes written.
    pub len: u64,
    /// `(start, end)` of each run.
    pub bounds: Vec<(u64, u64)>,
}

/// Runs appended one after another into one store.
pub struct Runs {
    store: Store,
    bounds: Vec<(u64, u64)>,
    open: u64,
    sort_by: SortBy,
    scratch: Vec<u8>,
}

impl Runs {
    /// Runs kept in memory. Nothing is reserved up front: a reservation here, before the
    /// protocol, would take a recycled block whose pages are already resident, leaving the
    /// protocol to fault in fresh ones (an inner join's unmatched runs stay empty). Aligned
    /// output reserves each bucket's records once its protocol is done ([`Runs::reserve`]);
    /// unaligned output grows record by record.
    pub fn in_memory(sort_by: SortBy) -> Self {
        Self::with(Store::Memory(Vec::new()), sort_by)
    }

    /// Runs in a new file at `path` (0600, removed on drop).
    ///
    /// # Errors
    /// The file cannot be created, or something (a symlink included) is already at `path`.
    pub fn on_disk(path: PathBuf, sort_by: SortBy) -> Result<Self, DataError> {
        Self::open_at(path, sort_by, &RunsState::default(), false)
    }

    /// Runs in the file at `path`, kept after the run, continuing from `state` (a checkpoint;
    /// anything written after it is cut off).
    ///
    /// # Errors
    /// The file cannot be opened, or is shorter than the checkpoint says.
    pub fn resumed(path: PathBuf, sort_by: SortBy, state: &RunsState) -> Result<Self, DataError> {
        Self::open_at(path, sort_by, state, true)
    }

    fn open_at(
        path: PathBuf,
        sort_by: SortBy,
        state: &RunsState,
        keep: bool,
    ) -> Result<Self, DataError> {
        let io = |source| DataError::Io {
            path: path.clone(),
            action: "opening a sorted-run file in the spill directory",
            source,
        };
        // The runs are the output's rows: a private file (0600, no symlink followed) that is
        // new, or, resumed past a checkpoint, ours from the crashed run. A resumed run with
        // nothing checkpointed starts the file over.
        let mut f = match (keep, state.len) {
            (false, _) => private_fs::create_new(&path),
            (true, 0) => private_fs::replace(&path),
            (true, _) => private_fs::open_existing(&path),
        }
        .map_err(io)?;
        if f.metadata().map_err(io)?.len() < state.len {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "shorter than the checkpoint says; delete the recovery folder to start over",
            )));
        }
        f.set_len(state.len).map_err(io)?;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(state.len)).map_err(io)?;
        let mut runs = Self::with(
            Store::Disk {
                out: Some(BufWriter::with_capacity(1 << 20, f)),
                file: None,
                len: state.len,
                keep,
                path,
            },
            sort_by,
        );
        runs.bounds = state.bounds.clone();
        runs.open = state.len;
        Ok(runs)
    }

    /// The runs so far (call after [`Runs::end_run`]).
    pub fn state(&self) -> RunsState {
        RunsState {
            len: self.len(),
            bounds: self.bounds.clone(),
        }
    }

    /// Makes everything written so far durable (before a checkpoint names it).
    ///
    /// # Errors
    /// The flush or sync failed.
    pub fn sync(&mut self) -> Result<(), DataError> {
        if let Store::Disk {
            path, out: Some(w), ..
        } = &mut self.store
        {
            let io = |source| DataError::Io {
                path: path.clone(),
                action: "writing a sorted-run file (is the disk full?)",
                source,
            };
            w.flush().map_err(io)?;
            w.get_ref().sync_data().map_err(io)?;
        }
        Ok(())
    }

    fn with(store: Store, sort_by: SortBy) -> Self {
        Runs {
            store,
            bounds: Vec::new(),
            open: 0,
            sort_by,
            scratch: Vec::new(),
        }
    }

    fn len(&self) -> u64 {
        match &self.store {
            Store::Memory(v) => v.len() as u64,
            Store::Disk { len, .. } => *len,
        }
    }

    /// Appends one record to the current run; records must come in sort order.
    ///
    /// # Errors
    /// Writing the run file failed.
    pub fn push<'r>(
        &mut self,
        sort: &[u8],
        times: u32,
        left: bool,
        rows: impl Iterator<Item = &'r [u8]>,
    ) -> Result<(), DataError> {
        // In memory the record is built in place; on disk in a scratch buffer, then written.
        let in_memory = matches!(self.store, Store::Memory(_));
        let mut rec = match &mut self.store {
            Store::Memory(v) => std::mem::take(v),
            Store::Disk { .. } => {
                let mut r = std::mem::take(&mut self.scratch);
                r.clear();
                r
            }
        };
        let at = rec.len();
        rec.extend_from_slice(&[0u8; HEAD]);
        rec.extend_from_slice(sort);
        let mut n = 0u32;
        for r in rows {
            rec.extend_from_slice(&(r.len() as u32).to_le_bytes());
            rec.extend_from_slice(r);
            n += 1;
        }
        let payload = (rec.len() - at - HEAD - sort.len()) as u32;
        let head = &mut rec[at..at + HEAD];
        head[0..4].copy_from_slice(&(sort.len() as u32).to_le_bytes());
        head[4..8].copy_from_slice(&times.to_le_bytes());
        head[8..12].copy_from_slice(&n.to_le_bytes());
        head[12] = u8::from(left);
        head[13..17].copy_from_slice(&payload.to_le_bytes());
        if in_memory {
            if let Store::Memory(v) = &mut self.store {
                *v = rec;
            }
            return Ok(());
        }
        let r = self.append(&rec);
        self.scratch = rec;
        r
    }

    /// Writes a record to the run file (in memory, [`Runs::push`] builds it in place).
    fn append(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        if let Store::Disk { path, out, len, .. } = &mut self.store {
            if let Some(out) = out {
                out.write_all(bytes).map_err(|source| DataError::Io {
                    path: path.clone(),
                    action: "writing a sorted-run file (is the disk full?)",
                    source,
                })?;
            }
            *len += bytes.len() as u64;
        }
        Ok(())
    }

    /// Makes room for about `records` more records holding `bytes` of sort keys and rows in
    /// memory (on disk: nothing). Called after a bucket's protocol, when its buffers are back
    /// in the allocator's pool: the run then takes one of those, already resident, where
    /// growing by doubling would map fresh pages (each a page fault) for every record.
    pub fn reserve(&mut self, records: usize, bytes: usize) {
        if let Store::Memory(v) = &mut self.store {
            v.reserve(records.saturating_mul(HEAD + 4).saturating_add(bytes));
        }
    }

    /// Ends the current run (each bucket makes one).
    pub fn end_run(&mut self) {
        let end = self.len();
        if end > self.open {
            self.bounds.push((self.open, end));
        }
        self.open = end;
    }

    /// Merges every run into `out`, expanding each record's rows; returns the rows written.
    ///
    /// # Errors
    /// Reading the runs or writing the output failed.
    pub fn merge_into(&mut self, out: &mut dyn Sink) -> Result<u64, DataError> {
        Self::merge_all(&mut [self], out)
    }

    /// Ends the open run and hands a run file's writer over to reading.
    fn close_for_reading(&mut self) -> Result<(), DataError> {
        self.end_run();
        if let Store::Disk {
            path, out: w, file, ..
        } = &mut self.store
            && let Some(w) = w.take()
        {
            let f = w.into_inner().map_err(|e| DataError::Io {
                path: path.clone(),
                action: "writing a sorted-run file (is the disk full?)",
                source: e.into_error(),
            })?;
            *file = Some(f);
        }
        Ok(())
    }

    /// Merges every run of every store in `all` (the partitions of a partitioned run, each
    /// with its own runs, sorted the same way) into `out`; returns the rows written. Records
    /// compare only by their sort keys, which are unique across the run's buckets, so the
    /// result does not depend on how the runs are spread over the stores.
    ///
    /// # Errors
    /// Reading the runs or writing the output failed.
    pub fn merge_all(all: &mut [&mut Runs], out: &mut dyn Sink) -> Result<u64, DataError> {
        for r in all.iter_mut() {
            r.close_for_reading()?;
        }
        let Some(sort_by) = all.first().map(|r| r.sort_by) else {
            return Ok(0);
        };
        let nonempty: Vec<usize> = (0..all.len())
            .filter(|&i| !all[i].bounds.is_empty())
            .collect();
        if let [only] = nonempty.as_slice()
            && let (Store::Memory(v), [(start, end)]) =
                (&all[*only].store, all[*only].bounds.as_slice())
        {
            // One run in memory (a single bucket): its records are already in order, so they
            // are expanded straight from the store, without cursors or a heap.
            let run = usize::try_from(*start)
                .ok()
                .zip(usize::try_from(*end).ok())
                .and_then(|(s, e)| v.get(s..e))
                .ok_or_else(|| corrupt("a run lies outside its store"))?;
            return expand_all(run, out);
        }
        let runs: usize = all.iter().map(|r| r.bounds.len()).sum();
        let chunk = ((64usize << 20) / runs.max(1)).clamp(4 << 10, 256 << 10);
        let mut cursors = Vec::with_capacity(runs);
        for (src, r) in all.iter().enumerate() {
            for &(start, end) in &r.bounds {
                let mut c = Cursor {
                    src,
                    pos: start,
                    end,
                    buf: Vec::new(),
                    at: 0,
                    chunk,
                    rec: Vec::new(),
                    sort_len: 0,
                    prefix: 0,
                };
                if c.advance(&r.store, sort_by)? {
                    cursors.push(c);
                }
            }
        }
        let less = |a: &Cursor, b: &Cursor| match a.prefix.cmp(&b.prefix) {
            Ordering::Equal => match sort_by {
                SortBy::Key => cmp_keys(a.sort(), b.sort()) == Ordering::Less,
                SortBy::Bytes => a.sort() < b.sort(),
            },
            order => order == Ordering::Less,
        };
        let mut heap = MinHeap::new(cursors, less);
        let mut written = 0u64;
        while let Some(top) = heap.top() {
            written += top.expand(out)?;
            let more = match heap.top_mut() {
                Some(c) => {
                    let store = &all
                        .get(c.src)
                        .ok_or_else(|| corrupt("a run of an unknown store"))?
                        .store;
                    c.advance(store, sort_by)?
                }
                None => false,
            };
            heap.after_top_changed(more);
        }
        Ok(written)
    }
}

impl Drop for Runs {
    fn drop(&mut self) {
        if let Store::Disk {
            path,
            out,
            file,
            keep,
            ..
        } = &mut self.store
        {
            drop(out.take());
            drop(file.take());
            if !*keep {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// A read position in one run; holds its current record.
struct Cursor {
    /// Which store (of [`Runs::merge_all`]'s) the run is in.
    src: usize,
    pos: u64,
    end: u64,
    buf: Vec<u8>,
    at: usize,
    chunk: usize,
    rec: Vec<u8>,
    sort_len: usize,
    /// An order-preserving 128-bit prefix of the record's sort key: the merge compares these
    /// and reads the keys only on a tie (a full comparison per heap step made the merge of
    /// 16 runs of 2^24 rows take a second).
    prefix: u128,
}

/// The first 16 bytes of `bytes`, zero-padded, as a big-endian integer: a shorter string that
/// ties with a longer one on them is its prefix or equal there, so the order never contradicts
/// plain byte order.
fn bytes_prefix(bytes: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = bytes.len().min(16);
    b[..n].copy_from_slice(&bytes[..n]);
    u128::from_be_bytes(b)
}

impl Cursor {
    fn sort(&self) -> &[u8] {
        &self.rec[HEAD..HEAD + self.sort_len]
    }

    /// Copies the next `n` bytes of the run to the end of `self.rec`.
    fn take(&mut self, store: &Store, mut n: usize) -> Result<(), DataError> {
        while n > 0 {
            if self.at == self.buf.len() {
                let want = (self.end - self.pos).min(self.chunk.max(n) as u64) as usize;
                if want == 0 {
                    return Err(corrupt("a record runs past its run's end"));
                }
                self.buf.resize(want, 0);
                read_at(store, self.pos, &mut self.buf)?;
                self.pos += want as u64;
                self.at = 0;
            }
            let k = n.min(self.buf.len() - self.at);
            self.rec.extend_from_slice(&self.buf[self.at..self.at + k]);
            self.at += k;
            n -= k;
        }
        Ok(())
    }

    /// Loads the next record; false at the run's end.
    fn advance(&mut self, store: &Store, sort_by: SortBy) -> Result<bool, DataError> {
        if self.at == self.buf.len() && self.pos == self.end {
            return Ok(false);
        }
        self.rec.clear();
        self.take(store, HEAD)?;
        let sort_len = le32(&self.rec[0..4]) as usize;
        let payload = le32(&self.rec[13..17]) as usize;
        self.take(store, sort_len + payload)?;
        self.sort_len = sort_len;
        self.prefix = match sort_by {
            SortBy::Key => key_prefix(self.sort()),
            SortBy::Bytes => bytes_prefix(self.sort()),
        };
        Ok(true)
    }

    /// Appends the record's expanded rows to `out`; returns how many.
    fn expand(&self, out: &mut dyn Sink) -> Result<u64, DataError> {
        expand_record(&self.rec, self.sort_len, out)
    }
}

/// Expands every record of one run (whole records, in order) into `out`; returns the rows
/// written.
fn expand_all(mut run: &[u8], out: &mut dyn Sink) -> Result<u64, DataError> {
    let mut written = 0u64;
    while !run.is_empty() {
        let head = run
            .get(..HEAD)
            .ok_or_else(|| corrupt("a truncated record header"))?;
        let sort_len = le32(&head[0..4]) as usize;
        let payload = le32(&head[13..17]) as usize;
        let (rec, rest) = run
            .split_at_checked(HEAD.saturating_add(sort_len).saturating_add(payload))
            .ok_or_else(|| corrupt("a record runs past its run's end"))?;
        written += expand_record(rec, sort_len, out)?;
        run = rest;
    }
    Ok(written)
}

/// Appends the rows of one whole record (header, sort key of `sort_len` bytes, then
/// length-prefixed rows) to `out`, each repeated as its `times` and side say; returns how many.
/// Nothing is allocated per record: the rows are walked once per repetition.
fn expand_record(rec: &[u8], sort_len: usize, out: &mut dyn Sink) -> Result<u64, DataError> {
    let times = le32(&rec[4..8]) as usize;
    let n = le32(&rec[8..12]) as usize;
    let left = rec[12] != 0;
    let payload = rec
        .get(HEAD + sort_len..)
        .ok_or_else(|| corrupt("a record's sort key runs past its end"))?;
    // Checks the lengths once, before anything is written.
    let mut count = 0usize;
    for_each_row(payload, |_| {
        count += 1;
        Ok(())
    })?;
    if count != n {
        return Err(corrupt("a record's row count is wrong"));
    }
    if left {
        for_each_row(payload, |row| {
            for _ in 0..times {
                out.row(row)?;
            }
            Ok(())
        })?;
    } else {
        for _ in 0..times {
            for_each_row(payload, |row| out.row(row))?;
        }
    }
    Ok((n * times) as u64)
}

/// Calls `f` on each length-prefixed row of a record's payload.
fn for_each_row(
    mut p: &[u8],
    mut f: impl FnMut(&[u8]) -> Result<(), DataError>,
) -> Result<(), DataError> {
    while let Some((len, rest)) = p.split_first_chunk::<4>() {
        let (row, rest) = rest
            .split_at_checked(u32::from_le_bytes(*len) as usize)
            .ok_or_else(|| corrupt("a row runs past its record"))?;
        f(row)?;
        p = rest;
    }
    if p.is_empty() {
        Ok(())
    } else {
        Err(corrupt("a record ends inside a row length"))
    }
}

fn le32(b: &[u8]) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[..4]);
    u32::from_le_bytes(w)
}

fn read_at(store: &Store, pos: u64, buf: &mut [u8]) -> Result<(), DataError> {
    match store {
        Store::Memory(v) => {
            let src = usize::try_from(pos)
                .ok()
                .and_then(|p| v.get(p..p + buf.len()))
                .ok_or_else(|| corrupt("a run lies outside its store"))?;
            buf.copy_from_slice(src);
            Ok(())
        }
        Store::Disk { path, file, .. } => {
            use std::os::unix::fs::FileExt;
            let f = file
                .as_ref()
                .ok_or_else(|| corrupt("a run file was read before it was written"))?;
            f.read_exact_at(buf, pos).map_err(|source| DataError::Io {
                path: path.clone(),
                action: "reading a sorted-run file",
                source,
            })
        }
    }
}

fn corrupt(what: &str) -> DataError {
    DataError::Io {
        path: PathBuf::from("<sorted runs>"),
        action: "merging the sorted runs",
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string()),
    }
}

/// A binary min-heap of cursors under a comparison closure (ties: lower run first, which keeps
/// the merge deterministic).
struct MinHeap<F> {
    items: Vec<(usize, Cursor)>,
    less: F,
}

impl<F: Fn(&Cursor, &Cursor) -> bool> MinHeap<F> {
    fn new(cursors: Vec<Cursor>, less: F) -> Self {
        let mut h = MinHeap {
            items: cursors.into_iter().enumerate().collect(),
            less,
        };
        for i in (0..h.items.len() / 2).rev() {
            h.sift_down(i);
        }
        h
    }

    fn lt(&self, i: usize, j: usize) -> bool {
        let (a, b) = (&self.items[i], &self.items[j]);
        (self.less)(&a.1, &b.1) || (!(self.less)(&b.1, &a.1) && a.0 < b.0)
    }

    fn top(&self) -> Option<&Cursor> {
        self.items.first().map(|x| &x.1)
    }

    fn top_mut(&mut self) -> Option<&mut Cursor> {
        self.items.first_mut().map(|x| &mut x.1)
    }

    /// Restores the heap after the top cursor advanced (`more`) or ran out.
    fn after_top_changed(&mut self, more: bool) {
        if self.items.is_empty() {
            return;
        }
        if !more {
            self.items.swap_remove(0);
        }
        if !self.items.is_empty() {
            self.sift_down(0);
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < self.items.len() && self.lt(l, m) {
                m = l;
            }
            if r < self.items.len() && self.lt(r, m) {
                m = r;
            }
            if m == i {
                return;
            }
            self.items.swap(i, m);
            i = m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    fn merged(mut runs: Runs) -> String {
        let mut lines = Vec::new();
        runs.merge_into(&mut lines).unwrap();
        String::from_utf8(lines).unwrap()
    }

    fn fill(runs: &mut Runs) {
        // Two runs, interleaving keys; one group repeated for pairs on each side.
        runs.push(&key("a"), 1, true, [b"a,1".as_slice()].into_iter())
            .unwrap();
        runs.push(&key("c"), 2, true, [b"c,1".as_slice(), b"c,2"].into_iter())
            .unwrap();
        runs.end_run();
        runs.push(
            &key("b"),
            2,
            false,
            [b"\"b\nx\",1".as_slice(), b"b,2"].into_iter(),
        )
        .unwrap();
        runs.push(&key("d"), 1, false, std::iter::empty()).unwrap();
        runs.end_run();
    }

    #[test]
    fn merges_runs_in_key_order_and_expands_pairs() {
        let want = "a,1\n\"b\nx\",1\nb,2\n\"b\nx\",1\nb,2\nc,1\nc,1\nc,2\nc,2\n";
        let mut mem = Runs::in_memory(SortBy::Key);
        fill(&mut mem);
        assert_eq!(merged(mem), want);
        let dir = std::env::temp_dir().join(format!("bj-runs-{}-disk", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("runs");
        let mut disk = Runs::on_disk(path.clone(), SortBy::Key).unwrap();
        fill(&mut disk);
        assert_eq!(merged(disk), want);
        assert!(!path.exists(), "the run file is removed");
    }

    /// A partitioned run's runs, spread over several stores (memory and disk mixed, one
    /// empty), merge to the same bytes as all of them in one store.
    #[test]
    fn runs_spread_over_stores_merge_like_one_store() {
        let want = "a,1\n\"b\nx\",1\nb,2\n\"b\nx\",1\nb,2\nc,1\nc,1\nc,2\nc,2\n";
        let dir = std::env::temp_dir().join(format!("bj-runs-{}-spread", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut first = Runs::in_memory(SortBy::Key);
        first
            .push(&key("a"), 1, true, [b"a,1".as_slice()].into_iter())
            .unwrap();
        first
            .push(&key("c"), 2, true, [b"c,1".as_slice(), b"c,2"].into_iter())
            .unwrap();
        first.end_run();
        let mut empty = Runs::in_memory(SortBy::Key);
        let mut second = Runs::on_disk(dir.join("second"), SortBy::Key).unwrap();
        second
            .push(
                &key("b"),
                2,
                false,
                [b"\"b\nx\",1".as_slice(), b"b,2"].into_iter(),
            )
            .unwrap();
        second
            .push(&key("d"), 1, false, std::iter::empty())
            .unwrap();
        second.end_run();
        let mut out = Vec::new();
        let n = Runs::merge_all(&mut [&mut first, &mut empty, &mut second], &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), want);
        assert_eq!(n, 9);
        let mut none = Vec::new();
        assert_eq!(Runs::merge_all(&mut [], &mut none).unwrap(), 0);
        // One store of one run in memory takes the direct path, with the same result.
        let mut single = Runs::in_memory(SortBy::Key);
        single
            .push(&key("a"), 1, true, [b"a,1".as_slice()].into_iter())
            .unwrap();
        let mut also_empty = Runs::in_memory(SortBy::Key);
        let mut one = Vec::new();
        Runs::merge_all(&mut [&mut also_empty, &mut single], &mut one).unwrap();
        assert_eq!(one, b"a,1\n");
    }

    /// A run file holds output rows: 0600, never written through a planted file or symlink; a
    /// resumed one is reopened (narrowed to 0600), or started over when nothing was checkpointed.
    #[cfg(unix)]
    #[test]
    fn run_files_are_private_and_never_follow_a_planted_path() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| {
            std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
        };
        let dir = std::env::temp_dir().join(format!("bj-runs-{}-private", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("runs");
        let mut disk = Runs::on_disk(path.clone(), SortBy::Key).unwrap();
        assert_eq!(mode(&path), 0o600);
        fill(&mut disk);
        disk.sync().unwrap();
        assert!(Runs::on_disk(path.clone(), SortBy::Key).is_err(), "in use");
        drop(disk);
        let theirs = dir.join("theirs");
        std::fs::write(&theirs, b"keep").unwrap();
        std::os::unix::fs::symlink(&theirs, &path).unwrap();
        assert!(Runs::on_disk(path.clone(), SortBy::Key).is_err());
        let state = RunsState {
            len: 4,
            bounds: vec![(0, 4)],
        };
        assert!(Runs::resumed(path.clone(), SortBy::Key, &state).is_err());
        assert_eq!(std::fs::read(&theirs).unwrap(), b"keep");
        // Nothing checkpointed: the link is replaced by a file of ours.
        drop(Runs::resumed(path.clone(), SortBy::Key, &RunsState::default()).unwrap());
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read(&theirs).unwrap(), b"keep");
        std::fs::write(&path, b"0123456789").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let resumed = Runs::resumed(path.clone(), SortBy::Key, &state).unwrap();
        assert_eq!((mode(&path), resumed.state()), (0o600, state));
        drop(resumed);
        assert_eq!(std::fs::read(&path).unwrap(), b"0123");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_run_in_memory_expands_like_the_merge() {
        // A single in-memory run takes the direct path; on disk the same run goes through the
        // cursors. Both must expand pairs, quoted newlines and empty groups alike.
        let one = |runs: &mut Runs| {
            runs.push(&key("a"), 3, true, [b"a,1".as_slice(), b"a,2"].into_iter())
                .unwrap();
            runs.push(
                &key("b"),
                2,
                false,
                [b"\"b\nx\",1".as_slice(), b"b,2"].into_iter(),
            )
            .unwrap();
            runs.push(&key("c"), 1, true, std::iter::empty()).unwrap();
            runs.push(&key("d"), 1, false, [b"d,1".as_slice()].into_iter())
                .unwrap();
            runs.end_run();
        };
        let want = "a,1\na,1\na,1\na,2\na,2\na,2\n\"b\nx\",1\nb,2\n\"b\nx\",1\nb,2\nd,1\n";
        let mut mem = Runs::in_memory(SortBy::Key);
        one(&mut mem);
        assert_eq!(merged(mem), want);
        let dir = std::env::temp_dir().join(format!("bj-runs-{}-one-disk", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut disk = Runs::on_disk(dir.join("runs"), SortBy::Key).unwrap();
        one(&mut disk);
        assert_eq!(merged(disk), want);
        assert_eq!(merged(Runs::in_memory(SortBy::Key)), "");
    }

    #[test]
    fn a_corrupt_record_is_an_error_not_a_panic() {
        for cut in [1, HEAD, HEAD + 3, HEAD + 5, HEAD + 9] {
            let mut runs = Runs::in_memory(SortBy::Key);
            runs.push(&key("a"), 1, true, [b"a,1".as_slice()].into_iter())
                .unwrap();
            runs.end_run();
            if let Store::Memory(v) = &mut runs.store {
                v.truncate(cut);
            }
            runs.bounds = vec![(0, cut as u64)];
            struct Discard;
            impl Sink for Discard {
                fn row(&mut self, _: &[u8]) -> Result<(), DataError> {
                    Ok(())
                }
            }
            assert!(runs.merge_into(&mut Discard).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_reserved_run_holds_its_records_without_growing() {
        // One row per group: the reservation is exact, so the pushes never reallocate (each
        // reallocation of a large run would map fresh pages), and the run reads back the same.
        let rows: Vec<(Vec<u8>, Vec<u8>)> = (0..1000)
            .map(|i| {
                (
                    key(&format!("k{i:04}")),
                    format!("k{i:04},{i}").into_bytes(),
                )
            })
            .collect();
        let mut runs = Runs::in_memory(SortBy::Key);
        let bytes = rows.iter().map(|(k, r)| k.len() + r.len()).sum();
        runs.reserve(rows.len(), bytes);
        let Store::Memory(v) = &runs.store else {
            unreachable!("an in-memory run")
        };
        let (capacity, at) = (v.capacity(), v.as_ptr());
        for (k, r) in &rows {
            runs.push(k, 1, true, std::iter::once(r.as_slice()))
                .unwrap();
        }
        runs.end_run();
        let Store::Memory(v) = &runs.store else {
            unreachable!("an in-memory run")
        };
        assert_eq!((v.capacity(), v.as_ptr()), (capacity, at));
        assert_eq!(v.len(), bytes + rows.len() * (HEAD + 4));
        let want: String = rows
            .iter()
            .map(|(_, r)| format!("{}\n", String::from_utf8_lossy(r)))
            .collect();
        assert_eq!(merged(runs), want);
    }

    #[test]
    fn merge_order_holds_past_the_cached_prefix() {
        // Keys that tie on their first 16 bytes (a long shared prefix, a key that is another's
        // prefix, two-field keys sharing a first field) spread over runs: the merge settles
        // the ties by full comparison and matches one global sort.
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for i in 0..200u32 {
            keys.push(key(&format!("customer-0000000000-{:05}", i * 7919 % 200)));
            keys.push([key("US"), key(&format!("{}", i * 31 % 200))].concat());
        }
        keys.extend([key("customer-0000000000"), key("c"), key("customer-00000")]);
        keys.sort_by(|a, b| cmp_keys(a, b));
        keys.dedup();
        let text = |k: &[u8]| format!("{}", keys.iter().position(|x| x == k).unwrap());
        for (name, mut runs) in [
            ("prefix-mem", Runs::in_memory(SortBy::Key)),
            (
                "prefix-disk",
                Runs::on_disk(
                    std::env::temp_dir().join(format!("bj-runs-prefix-{}", std::process::id())),
                    SortBy::Key,
                )
                .unwrap(),
            ),
        ] {
            for r in 0..7 {
                for k in keys.iter().skip(r).step_by(7) {
                    let t = text(k);
                    runs.push(k, 1, true, [t.as_bytes()].into_iter()).unwrap();
                }
                runs.end_run();
            }
            let want: String = (0..keys.len()).map(|i| format!("{i}\n")).collect();
            assert_eq!(merged(runs), want, "{name}");
        }
        // Plain bytes: a shorter string that ties on the padded prefix sorts first.
        assert!(bytes_prefix(b"ab") < bytes_prefix(b"ab\0\x01"));
        assert_eq!(bytes_prefix(b"ab"), bytes_prefix(b"ab\0"));
        assert!(bytes_prefix(&[7; 20]) == bytes_prefix(&[7; 16]));
    }

    #[test]
    fn many_runs_merge_by_bytes() {
        let mut runs = Runs::in_memory(SortBy::Bytes);
        for r in 0..300u64 {
            for i in 0..5u64 {
                let row = i * 300 + r;
                let text = row.to_string();
                runs.push(&row.to_be_bytes(), 1, true, [text.as_bytes()].into_iter())
                    .unwrap();
            }
            runs.end_run();
        }
        let want: String = (0..1500).map(|i| format!("{i}\n")).collect();
        assert_eq!(merged(runs), want);
    }
}
