//! The per-bucket work of a run: group a bucket's rows by key, run the protocol on the unique
//! digests, swap the matched keys' row counts with the peer (for the join's pairs), and append
//! the bucket's output groups to sorted runs; at the end, swap the unmatched totals and the
//! intersection digest, and merge the runs into the output file. Also `check_hash_digest`'s
//! test of whether the two key sets are equal, which lets both parties skip the protocol.
//!
//! Every bucket's output is sorted on its own; merging the runs (by key when aligned, by row
//! number when not) gives exactly the order of one global sort, so a spilled run and an
//! in-memory run write the same bytes (see [`crate::pipeline::join`] for the layout).

use crate::error::DataError;
use crate::pipeline::bucket::{BucketedPsi, RevealCounts};
use crate::pipeline::join::{JoinType, MAX_OUTPUT_ROWS, exchange_counts};
use crate::pipeline::runs::{Runs, SortBy};
use crate::pipeline::spill::{GroupBucket, GroupRef, SpilledTable, WARM_BATCH};
use crate::pipeline::wire::{DigestCheck, DigestShare};
use crate::spec::RunSpec;
use crate::table::rows::digest_of_order;
use crate::table::writer::{Columns, RowWriter};
use blindjoin_crypto::{ItemDigest, item_digest};
use blindjoin_link::Link;
use blindjoin_link::wire::WireMessage;
use blindjoin_protocols::{Phases, Progress, ProtocolError, Role};
use std::path::Path;

/// What a finished run found.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    /// Our unique keys.
    pub keys: u64,
    /// Unique keys in the intersection (when we learn it).
    pub matched_keys: u64,
    /// Rows written to the output.
    pub output_rows: u64,
    /// Seconds per bucket.
    pub bucket_s: Vec<f64>,
    /// Seconds in the protocol itself, all buckets.
    #[serde(default)]
    pub protocol_s: f64,
}

/// Where the output runs live.
pub enum RunsAt<'a> {
    /// In memory.
    Memory,
    /// In files in this directory, removed at the end.
    Disk(&'a Path),
    /// In files in this directory named for partition `.1`, removed at the end.
    Partition(&'a Path, usize),
    /// In files in this recovery folder, kept, continuing from a checkpoint's state.
    Recovery(&'a Path, &'a ProcessorState),
}

/// Everything a checkpoint must hold to resume after bucket `buckets_done`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProcessorState {
    /// Buckets finished.
    pub buckets_done: usize,
    /// The peer's unique keys in them.
    pub peer_keys: u64,
    /// What they revealed (cardinality and threshold modes).
    #[serde(default)]
    pub counts: RevealCounts,
    /// The matched (or kept) runs.
    pub matched: crate::pipeline::runs::RunsState,
    /// The unmatched runs.
    pub unmatched: crate::pipeline::runs::RunsState,
    /// Our unmatched rows so far.
    pub own_unmatched_rows: u64,
    /// The chained intersection digest so far.
    pub intersection_digest: ItemDigest,
    /// Counts and timings so far.
    pub totals: Totals,
    /// Set only on the state a resume agreement hands back one bucket behind this party's
    /// checkpoint: the peer's key count in that next bucket when it first ran, which the redo
    /// must announce again ([`crate::pipeline::recovery::redo_of`]). Not stored: the
    /// checkpoint's two states already give it.
    #[serde(skip)]
    pub redo_peer_keys: Option<u64>,
}

/// One party's bucket-by-bucket run.
pub struct Processor<'a> {
    spec: &'a RunSpec,
    psi: BucketedPsi<'a>,
    learns: bool,
    /// Both parties learn the result, so the join can pair and pad rows.
    joined: bool,
    am_left: bool,
    /// Matched groups (aligned), or every kept row (not aligned).
    matched: Runs,
    /// Our unmatched groups, when the join keeps them and the output is aligned.
    unmatched: Runs,
    own_unmatched_rows: u64,
    intersection_digest: ItemDigest,
    totals: Totals,
    /// `check_hash_digest` found the two key sets equal: every key matches, no protocol runs.
    all_match: bool,
    /// The other partitions' matched and unmatched runs, after [`Processor::merged`].
    others: Vec<(Runs, Runs)>,
}

impl<'a> Processor<'a> {
    /// Prepares the runs.
    ///
    /// # Errors
    /// A run file cannot be created.
    pub fn new(spec: &'a RunSpec, psi: BucketedPsi<'a>, at: RunsAt<'_>) -> Result<Self, DataError> {
        let sort = if spec.align {
            SortBy::Key
        } else {
            SortBy::Bytes
        };
        let resume = match at {
            RunsAt::Recovery(_, state) => Some(state),
            _ => None,
        };
        let runs = |name: &str, state: Option<&crate::pipeline::runs::RunsState>| match (&at, state)
        {
            (RunsAt::Memory, _) => Ok(Runs::in_memory(sort)),
            (RunsAt::Disk(dir), _) => Runs::on_disk(dir.join(name), sort),
            (RunsAt::Partition(dir, p), _) => Runs::on_disk(dir.join(format!("{name}-p{p}")), sort),
            (RunsAt::Recovery(dir, _), Some(st)) => Runs::resumed(dir.join(name), sort, st),
            (RunsAt::Recovery(dir, _), None) => {
                Runs::resumed(dir.join(name), sort, &Default::default())
            }
        };
        let mut psi = psi;
        if let Some(st) = resume {
            psi.resume_from(st)?;
        }
        Ok(Processor {
            learns: spec.learns_result(),
            joined: spec.learns_result() && spec.broadcast_result,
            am_left: spec.role == spec.join.left_side,
            matched: runs("matched-runs", resume.map(|s| &s.matched))?,
            unmatched: runs("unmatched-runs", resume.map(|s| &s.unmatched))?,
            own_unmatched_rows: resume.map_or(0, |s| s.own_unmatched_rows),
            intersection_digest: resume.map_or_else(
                || item_digest(b"blindjoin/intersection-digest/v2"),
                |s| s.intersection_digest,
            ),
            totals: resume.map(|s| s.totals.clone()).unwrap_or_default(),
            all_match: false,
            others: Vec::new(),
            spec,
            psi,
        })
    }

    /// One processor for the whole run from its partitions' (each having run its own buckets,
    /// in partition order): the counts add up, the runs are kept apart for the final merge,
    /// and the intersection digest is the hash of the partitions' digests in order (both
    /// parties cut the same partitions, so they compare like for like).
    ///
    /// # Errors
    /// No partitions; a total out of bounds.
    pub fn merged(parts: Vec<Processor<'a>>) -> Result<Self, DataError> {
        let mut parts = parts.into_iter();
        let mut base = parts.next().ok_or_else(|| {
            DataError::Protocol(ProtocolError::Config("internal: no partitions".into()))
        })?;
        let mut digests = base.intersection_digest.to_vec();
        let mut peer_keys = base.psi.peer_keys();
        for p in parts {
            digests.extend_from_slice(&p.intersection_digest);
            peer_keys += p.psi.peer_keys();
            base.own_unmatched_rows += p.own_unmatched_rows;
            base.totals.keys += p.totals.keys;
            base.totals.matched_keys += p.totals.matched_keys;
            grow(&mut base.totals.output_rows, p.totals.output_rows)?;
            base.totals.bucket_s.extend_from_slice(&p.totals.bucket_s);
            base.totals.protocol_s += p.totals.protocol_s;
            base.others.push((p.matched, p.unmatched));
            base.others.extend(p.others);
        }
        base.intersection_digest = item_digest(&digests);
        let b = base.psi.buckets();
        base.psi.resume_at(b, peer_keys, RevealCounts::default())?;
        Ok(base)
    }

    /// Runs every bucket from here on as if the protocol had found all our keys in the
    /// intersection: `check_hash_digest` found the key sets equal, so it would have. The joins
    /// then proceed as usual (the aligned output still swaps row counts for duplicate keys).
    pub fn all_keys_match(&mut self) {
        self.all_match = true;
    }

    /// Buckets finished so far.
    pub fn buckets_done(&self) -> usize {
        self.psi.next_bucket()
    }

    /// Makes the runs durable and returns the state a checkpoint records.
    ///
    /// # Errors
    /// Syncing the run files failed.
    pub fn checkpoint(&mut self) -> Result<ProcessorState, DataError> {
        self.matched.sync()?;
        self.unmatched.sync()?;
        Ok(ProcessorState {
            buckets_done: self.psi.next_bucket(),
            peer_keys: self.psi.peer_keys(),
            counts: self.psi.counts(),
            matched: self.matched.state(),
            unmatched: self.unmatched.state(),
            own_unmatched_rows: self.own_unmatched_rows,
            intersection_digest: self.intersection_digest,
            totals: self.totals.clone(),
            redo_peer_keys: None,
        })
    }

    /// Runs the next bucket on its rows (sorted by order key and row).
    ///
    /// # Errors
    /// Protocol, link and run-file errors; a peer whose join counts do not line up.
    pub fn bucket(
        &mut self,
        link: &mut dyn Link,
        rows: &GroupBucket<'_>,
        progress: &dyn Progress,
    ) -> Result<(), DataError> {
        let t = std::time::Instant::now();
        let (ends, digests) = key_groups(rows);
        self.totals.keys += digests.len() as u64;
        let group = |g: usize| group_range(&ends, g);

        // Several buckets: the protocol's stages are phases of the bucket stage, which goes on.
        let phases = Phases(progress);
        let proto_progress: &dyn Progress = if self.psi.buckets() > 1 {
            &phases
        } else {
            progress
        };
        let bucket = self.psi.next_bucket();
        let t_psi = std::time::Instant::now();
        let protocol_span = crate::trace::bucket_span("protocol", bucket);
        let found = if self.all_match {
            // Equal sets: the peer has exactly our keys in this bucket.
            self.psi.skip_next(digests.len() as u64)?;
            self.learns.then(|| (0..digests.len()).collect())
        } else {
            self.psi.run_next(link, &digests, proto_progress)?
        };
        drop(protocol_span);
        self.totals.protocol_s += t_psi.elapsed().as_secs_f64();
        let _join_span = crate::trace::bucket_span("join", bucket);
        if let (true, Some(mut found)) = (self.learns, found) {
            found.sort_unstable();
            found.dedup();
            if found.last().is_some_and(|&g| g >= digests.len()) {
                return Err(DataError::Protocol(ProtocolError::PeerMisbehaved(
                    "the protocol returned an item index out of range".into(),
                )));
            }
            self.totals.matched_keys += found.len() as u64;
            if self.spec.join.check_intersection_digest {
                let mut all = self.intersection_digest.to_vec();
                for &g in &found {
                    all.extend_from_slice(&digests[g]);
                }
                self.intersection_digest = item_digest(&all);
            }
            let mut is_matched = vec![false; digests.len()];
            for &g in &found {
                is_matched[g] = true;
            }
            let unmatched: Vec<usize> = (0..digests.len()).filter(|&g| !is_matched[g]).collect();
            self.own_unmatched_rows += unmatched
                .iter()
                .map(|&g| group(g).len() as u64)
                .sum::<u64>();
            if self.spec.align {
                self.aligned(link, rows, &ends, found, unmatched)?;
            } else {
                self.unaligned(rows, &ends, &found, &unmatched)?;
            }
        }
        self.matched.end_run();
        self.unmatched.end_run();
        progress.advance(1);
        self.totals.bucket_s.push(t.elapsed().as_secs_f64());
        Ok(())
    }

    /// Aligned output: matched groups in key order (with the peer's counts for pairs), and our
    /// unmatched groups in key order when the join keeps them.
    fn aligned(
        &mut self,
        link: &mut dyn Link,
        rows: &GroupBucket<'_>,
        ends: &[usize],
        found: Vec<usize>,
        unmatched: Vec<usize>,
    ) -> Result<(), DataError> {
        // The bucket's rows are in key order ([`crate::pipeline::spill`]), so groups in index order are in
        // key order. Each with where its first row lies, gathered in that order (reads in
        // order): the writes below then touch each group's bytes once, at random, instead of
        // also its row entry and `ends`.
        let ranges = |gs: &[usize]| -> Vec<GroupRef> {
            gs.iter()
                .map(|&g| {
                    let r = group_range(ends, g);
                    rows.group(r.start, r.end)
                })
                .collect()
        };
        let found = ranges(&found);
        let join = self.spec.join.join;
        let pairs = join.has_pairs();
        let times: Vec<u32> = if self.joined && pairs {
            let counts: Vec<u32> = found.iter().map(|g| g.len() as u32).collect();
            let (peer, _) = exchange_counts(link, &counts, 0)?;
            if peer.contains(&0) {
                return Err(peer_error(
                    "the peer sent a zero row count for a matched key",
                ));
            }
            peer
        } else {
            vec![1; found.len()]
        };
        if pairs {
            reserve_for(&mut self.matched, &found);
            let total = &mut self.totals.output_rows;
            push_groups(&mut self.matched, total, rows, &found, &times, self.am_left)?;
        }
        if self.joined && self.keeps_own_unmatched() {
            let unmatched = ranges(&unmatched);
            reserve_for(&mut self.unmatched, &unmatched);
            let ones = vec![1; unmatched.len()];
            let total = &mut self.totals.output_rows;
            push_groups(&mut self.unmatched, total, rows, &unmatched, &ones, true)?;
        }
        Ok(())
    }

    /// Unaligned output: the rows we keep, in input order.
    fn unaligned(
        &mut self,
        rows: &GroupBucket<'_>,
        ends: &[usize],
        found: &[usize],
        unmatched: &[usize],
    ) -> Result<(), DataError> {
        let group = |g: usize| group_range(ends, g);
        let join = self.spec.join.join;
        let mut keep: Vec<usize> = Vec::new();
        if !self.joined || join != JoinType::Difference {
            keep.extend(found.iter().flat_map(|&g| group(g)));
        }
        if self.joined && self.keeps_own_unmatched() {
            keep.extend(unmatched.iter().flat_map(|&g| group(g)));
        }
        keep.sort_unstable_by_key(|&i| rows.row(i));
        self.grow(keep.len() as u64)?;
        for i in keep {
            self.matched.push(
                &rows.row(i).to_be_bytes(),
                1,
                true,
                std::iter::once(rows.raw(i)),
            )?;
        }
        Ok(())
    }

    fn keeps_own_unmatched(&self) -> bool {
        let join = self.spec.join.join;
        if self.am_left {
            join.keeps_left_unmatched()
        } else {
            join.keeps_right_unmatched()
        }
    }

    fn grow(&mut self, rows: u64) -> Result<(), DataError> {
        grow(&mut self.totals.output_rows, rows)
    }

    /// After the last bucket: checks the intersection digest if asked, swaps the unmatched
    /// totals the outer joins pad for, and returns the layout of the output.
    ///
    /// # Errors
    /// Link errors; the intersections differ; a peer whose counts are implausible.
    pub fn finish(mut self, link: &mut dyn Link) -> Result<Finished<'a>, DataError> {
        if !self.psi.done() {
            return Err(DataError::Protocol(ProtocolError::Config(
                "internal: the run ended before its last bucket".into(),
            )));
        }
        let mut nulls = (0, 0);
        if self.joined {
            if self.spec.join.check_intersection_digest {
                check_digest(link, &self.intersection_digest)?;
            }
            let join = self.spec.join.join;
            if self.spec.align && join != JoinType::Inner {
                let (_, peer_unmatched) = exchange_counts(link, &[], self.own_unmatched_rows)?;
                // Nulls before our unmatched part (we are right) or after it (we are left).
                let pads = if self.am_left {
                    join.keeps_right_unmatched()
                } else {
                    join.keeps_left_unmatched()
                };
                if pads {
                    self.grow(peer_unmatched)?;
                    nulls = if self.am_left {
                        (0, peer_unmatched)
                    } else {
                        (peer_unmatched, 0)
                    };
                }
            }
        }
        let (mut matched, mut unmatched) = (vec![self.matched], vec![self.unmatched]);
        for (m, u) in self.others {
            matched.push(m);
            unmatched.push(u);
        }
        Ok(Finished {
            spec: self.spec,
            matched,
            unmatched,
            nulls_before: nulls.0,
            nulls_after: nulls.1,
            totals: self.totals,
            peer_keys: self.psi.peer_keys(),
            counts: self.psi.counts(),
            buckets: self.psi.buckets(),
        })
    }
}

/// A run whose protocol and exchanges are done; only writing remains (the link may close).
pub struct Finished<'a> {
    spec: &'a RunSpec,
    /// One store per partition (one in all for an unpartitioned run).
    matched: Vec<Runs>,
    unmatched: Vec<Runs>,
    nulls_before: u64,
    nulls_after: u64,
    /// What the run found.
    pub totals: Totals,
    /// The peer's unique keys.
    pub peer_keys: u64,
    /// What the run revealed in the cardinality and threshold modes.
    pub counts: RevealCounts,
    /// Buckets run.
    pub buckets: usize,
}

impl Finished<'_> {
    /// Writes the output atomically, as CSV or Parquet (`output_config.type`): header, matched
    /// part, then our unmatched rows and the null rows in the join's order (see
    /// [`crate::pipeline::join`]).
    ///
    /// # Errors
    /// Run or output I/O errors; a CSV cell that does not fit a Parquet column.
    pub fn write(&mut self, columns: &Columns, out: &Path) -> Result<u64, DataError> {
        let mut w = RowWriter::create(
            out,
            self.spec.output_format,
            columns,
            &self.spec.join.null_rep,
        )?;
        let mut matched: Vec<&mut Runs> = self.matched.iter_mut().collect();
        let mut written = Runs::merge_all(&mut matched, &mut w)?;
        w.nulls(self.nulls_before)?;
        written += self.nulls_before;
        let mut unmatched: Vec<&mut Runs> = self.unmatched.iter_mut().collect();
        written += Runs::merge_all(&mut unmatched, &mut w)?;
        w.nulls(self.nulls_after)?;
        written += self.nulls_after;
        w.commit()?;
        Ok(written)
    }
}

/// A bucket's rows grouped by key: where each group ends (`ends[g]`), and each group's digest.
pub(crate) fn key_groups(rows: &GroupBucket<'_>) -> (Vec<usize>, Vec<ItemDigest>) {
    // Keys are nearly always unique: size for one group per row, once.
    let mut ends = Vec::with_capacity(rows.len());
    let mut digests = Vec::with_capacity(rows.len());
    for i in 0..rows.len() {
        if i + 1 == rows.len() || rows.order(i + 1) != rows.order(i) {
            ends.push(i + 1);
            digests.push(digest_of_order(rows.order(i)));
        }
    }
    (ends, digests)
}

/// Adds `rows` to the output's row count, refusing an implausible total.
fn grow(total: &mut u64, rows: u64) -> Result<(), DataError> {
    *total = total
        .checked_add(rows)
        .filter(|&n| n <= MAX_OUTPUT_ROWS)
        .ok_or_else(|| {
            peer_error(&format!(
                "the join would have more than {MAX_OUTPUT_ROWS} rows; the peer's duplicate \
                 counts are implausible"
            ))
        })?;
    Ok(())
}

/// Pushes each group `(start, end)` of `rows`, in the given (key) order, repeated `times[i]`
/// times by the peer's count. The rows are warmed a batch ahead ([`GroupBucket::warm`]): in key
/// order every row is a cache miss, and the copy loop alone would wait for them one by one.
fn push_groups(
    runs: &mut Runs,
    total: &mut u64,
    rows: &GroupBucket<'_>,
    groups: &[GroupRef],
    times: &[u32],
    left: bool,
) -> Result<(), DataError> {
    for (groups, times) in groups.chunks(WARM_BATCH).zip(times.chunks(WARM_BATCH)) {
        rows.warm(groups.iter());
        for (g, &t) in groups.iter().zip(times) {
            grow(total, g.len() as u64 * u64::from(t))?;
            runs.push(rows.group_key(g), t, left, rows.group_rows(g))?;
        }
    }
    Ok(())
}

/// Reserves room in `runs` for `groups` (exactly, when each holds one row; duplicates' extra
/// rows grow the run as they come).
fn reserve_for(runs: &mut Runs, groups: &[GroupRef]) {
    let bytes = groups.iter().map(GroupRef::bytes).sum();
    runs.reserve(groups.len(), bytes);
}

/// The rows of group `g`, given where each group ends.
fn group_range(ends: &[usize], g: usize) -> std::ops::Range<usize> {
    (if g == 0 { 0 } else { ends[g - 1] })..ends[g]
}

fn peer_error(message: &str) -> DataError {
    DataError::Protocol(ProtocolError::PeerMisbehaved(message.to_string()))
}

/// `blindjoin.check_intersection_digest`: both parties chain a hash over each bucket's matched
/// digests (in key order) and compare the results after the run, so a bug or a corrupted run
/// that left the two outputs with different keys stops before either is written. Keyed so that
/// an observer of the link cannot confirm a guess of the intersection: each party sends a fresh
/// Diffie–Hellman share `a·G` on Curve25519 (`G` hashed to the curve from a fixed label, so the
/// key is CDH-hard to anyone without `a` or `b`), and each sends
/// `H(label, ab·G, the two shares in order, digest)`. Both parties know the intersection
/// already; the tags tell them only whether the two digests are equal.
pub(crate) fn check_digest(link: &mut dyn Link, ours: &ItemDigest) -> Result<(), DataError> {
    const LABEL: &[u8] = b"blindjoin/check_hash_digest/v1";
    let cipher = blindjoin_crypto::new_cipher(blindjoin_crypto::Curve::Curve25519, None)
        .map_err(ProtocolError::from)?;
    let mut mine = [0u8; 32];
    cipher
        .hash_and_mask(&[item_digest(LABEL)], &mut mine)
        .map_err(ProtocolError::from)?;
    link.send(&DigestShare { share: mine }.encode())?;
    let theirs = DigestShare::decode(&link.recv()?).map_err(ProtocolError::from)?;
    let mut shared = [0u8; 32];
    cipher
        .remask(&theirs.share, &mut shared)
        .map_err(ProtocolError::from)?;
    let (lo, hi) = if mine <= theirs.share {
        (mine, theirs.share)
    } else {
        (theirs.share, mine)
    };
    let mut keyed = LABEL.to_vec();
    for part in [&shared[..], &lo[..], &hi[..], &ours[..]] {
        keyed.extend_from_slice(part);
    }
    let tag = item_digest(&keyed);
    link.send(&DigestCheck { digest: tag }.encode())?;
    let their_tag = DigestCheck::decode(&link.recv()?).map_err(ProtocolError::from)?;
    if their_tag.digest != tag {
        return Err(peer_error(
            "check_intersection_digest: the two parties' intersections differ (a bug, a \
             corrupted run, or a dishonest peer); no output was written",
        ));
    }
    Ok(())
}

/// The digest of our key set for `check_hash_digest`: SHA-256 over each bucket's unique key
/// digests, sorted, bucket by bucket, under a domain label. `b` is the agreed bucket count, so
/// both parties cut their keys the same way and equal sets give equal digests, whatever the
/// row order or duplicates. One pass over the table (spilled: reading its shards once more).
///
/// # Errors
/// A spilled shard that cannot be read.
pub(crate) fn key_set_digest(table: &mut SpilledTable, b: usize) -> Result<ItemDigest, DataError> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"blindjoin/check_hash_digest/key-set/v1");
    h.update((b as u64).to_be_bytes());
    let m = b.min(table.shards());
    let per = b / m;
    for unit in 0..m {
        let group = table.load_unit(unit, b)?;
        for k in unit * per..(unit + 1) * per {
            let (_, mut digests) = key_groups(&group.bucket(k, b));
            digests.sort_unstable();
            h.update((digests.len() as u64).to_be_bytes());
            for d in &digests {
                h.update(d);
            }
        }
        // The run loads the unit again: an in-memory table must get its rows back.
        table.give_back(unit, b, group);
    }
    let full = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    Ok(out)
}

/// `check_hash_digest` (SecretFlow's meaning): whether the two parties' key sets are equal, so
/// both may skip the protocol. SecretFlow swaps the plain hashes of the two key sets, which lets
/// the peer test any guess of our whole set offline. Here the digests are compared by a
/// private equality test built on one-element ECDH-PSI on Curve25519, with fresh keys `a`, `b`:
///
/// 1. each sends its digest hashed to the curve and masked: `a·H(d_A)`, `b·H(d_B)`;
/// 2. each masks the peer's point again, `a·b·H(d_B)` at A and `a·b·H(d_A)` at B, and sends a
///    tag of it bound to its own role and both shares: `T = H(label, role, shares, point)`;
/// 3. each computes the tag the peer's role should send over its own doubly masked point, and
///    compares: equal exactly when `d_A = d_B`.
///
/// Each party learns whether the sets are equal and nothing else (under DDH, neither point
/// tells anything of a digest that differs), and can test only the one set it holds, once per
/// run. A dishonest peer can make the test fail (the run then runs the protocol as usual), but
/// cannot make it pass without our set's digest: passing needs `a·Q` for a point `Q` it sent,
/// and `a` is never revealed (CDH); reflecting our own tag back fails because the tag names the
/// role that sent it.
///
/// # Errors
/// Link errors; a malformed or low-order point from the peer.
pub(crate) fn key_sets_equal(
    link: &mut dyn Link,
    role: Role,
    ours: &ItemDigest,
) -> Result<bool, DataError> {
    const LABEL: &[u8] = b"blindjoin/check_hash_digest/pet/v1";
    let cipher = blindjoin_crypto::new_cipher(blindjoin_crypto::Curve::Curve25519, None)
        .map_err(ProtocolError::from)?;
    let mut labelled = LABEL.to_vec();
    labelled.extend_from_slice(ours);
    let mut mine = [0u8; 32];
    cipher
        .hash_and_mask(&[item_digest(&labelled)], &mut mine)
        .map_err(ProtocolError::from)?;
    link.send(&DigestShare { share: mine }.encode())?;
    let theirs = DigestShare::decode(&link.recv()?).map_err(ProtocolError::from)?;
    let mut doubled = [0u8; 32];
    cipher
        .remask(&theirs.share, &mut doubled)
        .map_err(ProtocolError::from)?;
    // The shares in the receiver's-then-sender's order, the same at both parties.
    let (r_share, s_share) = match role {
        Role::Receiver => (mine, theirs.share),
        Role::Sender => (theirs.share, mine),
    };
    let tag = |from: Role| {
        let mut t = LABEL.to_vec();
        t.push(from.wire_code());
        for part in [&r_share[..], &s_share[..], &doubled[..]] {
            t.extend_from_slice(part);
        }
        item_digest(&t)
    };
    link.send(&DigestCheck { digest: tag(role) }.encode())?;
    let their_tag = DigestCheck::decode(&link.recv()?).map_err(ProtocolError::from)?;
    Ok(their_tag.digest == tag(role.other()))
}

#[cfg(test)]
mod digest_check_tests {
    use super::*;
    use blindjoin_link::mem_pair;

    fn both(a: ItemDigest, b: ItemDigest) -> (Result<(), DataError>, Result<(), DataError>) {
        let (mut la, mut lb) = mem_pair();
        let t = std::thread::spawn(move || check_digest(&mut lb, &b));
        let ra = check_digest(&mut la, &a);
        (ra, t.join().unwrap())
    }

    #[test]
    fn equal_digests_pass_and_different_ones_fail_on_both_sides() {
        let (a, b) = both([1; 16], [1; 16]);
        assert!(a.is_ok() && b.is_ok());
        let (a, b) = both([1; 16], [2; 16]);
        assert!(a.is_err() && b.is_err());
    }

    #[test]
    fn the_digest_is_never_sent_in_clear_and_its_tag_changes_every_run() {
        // A peer that records what this party sends: neither message may hold the digest, and
        // the tag of the same digest differs between runs (fresh shares).
        let digest = [7u8; 16];
        let mut tags = Vec::new();
        for _ in 0..2 {
            let (mut la, mut lb) = mem_pair();
            let t = std::thread::spawn(move || {
                let share = lb.recv().unwrap_or_default();
                let mut peer_share = [0u8; 32];
                if let Ok(c) =
                    blindjoin_crypto::new_cipher(blindjoin_crypto::Curve::Curve25519, None)
                {
                    let _ = c.hash_and_mask(&[[3u8; 16]], &mut peer_share);
                }
                let _ = lb.send(&DigestShare { share: peer_share }.encode());
                let tag = lb.recv().unwrap_or_default();
                (share, tag)
            });
            let _ = check_digest(&mut la, &digest);
            let (share, tag) = t.join().unwrap();
            assert_eq!(share.len(), 33);
            assert_eq!(tag.len(), 17);
            for m in [&share, &tag] {
                assert!(!m.windows(16).any(|w| w == digest), "digest sent in clear");
            }
            tags.push(tag);
        }
        assert_ne!(tags[0], tags[1]);
    }
}

#[cfg(test)]
mod key_set_tests {
    use super::*;
    use blindjoin_link::mem_pair;

    fn both(a: ItemDigest, b: ItemDigest) -> (bool, bool) {
        let (mut la, mut lb) = mem_pair();
        let t = std::thread::spawn(move || key_sets_equal(&mut lb, Role::Sender, &b).unwrap());
        let ra = key_sets_equal(&mut la, Role::Receiver, &a).unwrap();
        (ra, t.join().unwrap())
    }

    #[test]
    fn both_parties_learn_equal_or_not() {
        assert_eq!(both([1; 16], [1; 16]), (true, true));
        assert_eq!(both([1; 16], [2; 16]), (false, false));
        assert_eq!(both([0; 16], [0; 16]), (true, true));
    }

    /// A peer that sends our own messages back, or a point it made up: our side must not
    /// conclude "equal" (it would then output all its rows as the intersection).
    #[test]
    fn a_peer_that_reflects_or_invents_messages_cannot_make_the_test_pass() {
        for strategy in 0..3 {
            let (mut la, mut lb) = mem_pair();
            let t = std::thread::spawn(move || {
                let ours = DigestShare::decode(&lb.recv().unwrap()).unwrap().share;
                let first = if strategy == 2 {
                    let c = blindjoin_crypto::new_cipher(blindjoin_crypto::Curve::Curve25519, None)
                        .unwrap();
                    let mut p = [0u8; 32];
                    c.hash_and_mask(&[[9u8; 16]], &mut p).unwrap();
                    p
                } else {
                    ours
                };
                lb.send(&DigestShare { share: first }.encode()).unwrap();
                let their_tag = DigestCheck::decode(&lb.recv().unwrap()).unwrap();
                let reply = if strategy == 1 {
                    DigestCheck { digest: [0; 16] }
                } else {
                    their_tag
                };
                lb.send(&reply.encode()).unwrap();
            });
            let r = key_sets_equal(&mut la, Role::Receiver, &[4; 16]);
            t.join().unwrap();
            assert!(!r.unwrap(), "strategy {strategy}");
        }
    }

    #[test]
    fn the_digest_is_never_sent_in_clear_and_each_run_sends_fresh_points() {
        let digest = [7u8; 16];
        let mut sent = Vec::new();
        for _ in 0..2 {
            let (mut la, mut lb) = mem_pair();
            let t = std::thread::spawn(move || {
                let first = lb.recv().unwrap();
                let peer = blindjoin_crypto::new_cipher(blindjoin_crypto::Curve::Curve25519, None)
                    .unwrap();
                let mut share = [0u8; 32];
                peer.hash_and_mask(&[[3u8; 16]], &mut share).unwrap();
                lb.send(&DigestShare { share }.encode()).unwrap();
                let second = lb.recv().unwrap();
                lb.send(&DigestCheck { digest: [1; 16] }.encode()).unwrap();
                (first, second)
            });
            let _ = key_sets_equal(&mut la, Role::Sender, &digest);
            let (first, second) = t.join().unwrap();
            assert_eq!((first.len(), second.len()), (33, 17));
            for m in [&first, &second] {
                assert!(!m.windows(16).any(|w| w == digest), "digest sent in clear");
            }
            sent.push(first);
        }
        assert_ne!(sent[0], sent[1]);
    }

    #[test]
    fn a_low_order_point_from_the_peer_is_an_error() {
        let (mut la, mut lb) = mem_pair();
        let t = std::thread::spawn(move || {
            let _ = lb.recv();
            let _ = lb.send(&DigestShare { share: [0; 32] }.encode());
        });
        assert!(key_sets_equal(&mut la, Role::Receiver, &[1; 16]).is_err());
        t.join().unwrap();
    }
}
