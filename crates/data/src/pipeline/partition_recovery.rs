//! Checkpoints of a partitioned run (`recovery_config` with more than one worker).
//!
//! Each partition keeps its own checkpoint beside the run's: `partitions/p<P>/checkpoint.json`
//! in the recovery folder, with the partition's sorted runs (`matched-runs`, `unmatched-runs`)
//! in the same folder. After every bucket the partition syncs its runs and replaces its
//! checkpoint atomically, exactly as a one-worker run does for the whole run
//! ([`crate::pipeline::recovery`]); the run's own `checkpoint.json` keeps the spill (header,
//! rows, shards) and records the partition count.
//!
//! On a rerun every partition's worker connects to the peer's worker of the same partition
//! (a fresh session: the coordinators make a new one per run), and the two agree on where the
//! partition resumes: each sends the bucket its checkpoint reached, both take the smaller. Two
//! workers of a partition run its buckets in lockstep, so their checkpoints differ by at most
//! one bucket, and each keeps the state one bucket back. A partition both parties finished
//! runs no bucket again; one that was cut resumes at its last bucket both finished; one with no
//! checkpoint on either side starts at its first bucket. A peer's resume point outside the
//! partition's buckets is refused as misbehaviour.
//!
//! A checkpoint is bound to the run's fingerprint (its settings and its input file, as the
//! one-worker checkpoint is), to its partition index and count, and to the run's bucket count:
//! a rerun with another worker count, other settings or a changed input is refused, naming
//! what to do. No secret is stored (every bucket draws fresh randomness). Folders are 0700 and
//! files 0600 ([`crate::table::private_fs`]).

use crate::error::DataError;
use crate::pipeline::process::ProcessorState;
use crate::pipeline::recovery::{read_checkpoint, redo_of, refused_checkpoint, swap_resume_points};
use crate::table::output::write_atomic;
use crate::table::private_fs;
use blindjoin_link::Link;
use blindjoin_protocols::ProtocolError;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The folder of the partitions' checkpoints, in the recovery folder.
pub(crate) const DIR: &str = "partitions";
/// A partition's checkpoint file, in its folder.
const FILE: &str = "checkpoint.json";
/// Version of the partition checkpoint.
const FORMAT: u32 = 1;

/// Where a partitioned run keeps its checkpoints: the recovery folder and the run's
/// fingerprint, handed to each partition's worker.
#[derive(Clone, Debug)]
pub(crate) struct RecoveryAt {
    /// The recovery folder.
    pub folder: PathBuf,
    /// The run's fingerprint ([`crate::pipeline::recovery::Recovery::fingerprint`]).
    pub fingerprint: String,
}

/// What a partition's folder says about its progress.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct PartitionCheckpoint {
    format: u32,
    fingerprint: String,
    partition: usize,
    partitions: usize,
    /// The whole run's bucket count.
    buckets: usize,
    /// The state after the partition's last finished bucket.
    current: Option<ProcessorState>,
    /// The state one bucket earlier, in case the peer's worker is one behind.
    previous: Option<ProcessorState>,
}

/// One partition's checkpoint, open for the run.
pub(crate) struct PartitionRecovery {
    dir: PathBuf,
    cp: PartitionCheckpoint,
}

impl PartitionRecovery {
    /// Opens (creating) partition `p`'s folder of `parts` for a run of `buckets` buckets and
    /// reads its checkpoint, if an earlier run left one.
    ///
    /// # Errors
    /// The folder cannot be made; a checkpoint that is unreadable or from another run, another
    /// partition count or another bucket count.
    pub(crate) fn open(
        at: &RecoveryAt,
        p: usize,
        parts: usize,
        buckets: usize,
    ) -> Result<Self, DataError> {
        let root = at.folder.join(DIR);
        let dir = root.join(format!("p{p}"));
        for d in [&root, &dir] {
            private_fs::ensure_own_dir(d).map_err(|source| DataError::Io {
                path: d.clone(),
                action: "creating a partition's recovery folder",
                source,
            })?;
        }
        let fresh = PartitionCheckpoint {
            format: FORMAT,
            fingerprint: at.fingerprint.clone(),
            partition: p,
            partitions: parts,
            buckets,
            current: None,
            previous: None,
        };
        let path = dir.join(FILE);
        let read = read_checkpoint(
            &path,
            "reading a partition's checkpoint",
            FORMAT,
            &at.fingerprint,
        )?;
        let Some(cp): Option<PartitionCheckpoint> = read else {
            return Ok(PartitionRecovery { dir, cp: fresh });
        };
        let refuse = |why: String| refused_checkpoint(&path, &why);
        if (cp.partition, cp.partitions) != (p, parts) {
            return Err(refuse(format!(
                "the checkpoint is partition {} of {} workers, this run has {parts} (use the \
                 same --workers as the interrupted run)",
                cp.partition, cp.partitions
            )));
        }
        if cp.buckets != buckets {
            return Err(refuse(format!(
                "the checkpoint was made with {} buckets, this run has {buckets} (the peer's \
                 input changed?)",
                cp.buckets
            )));
        }
        Ok(PartitionRecovery { dir, cp })
    }

    /// The partition's folder: its sorted runs live here.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Agrees with the peer's worker of this partition (whose buckets are `range`) on the
    /// bucket to resume from, and returns the state to resume with.
    ///
    /// # Errors
    /// Link errors; a peer resume point outside `range`; checkpoints more than one bucket apart.
    pub(crate) fn agree(
        &self,
        link: &mut dyn Link,
        range: Range<usize>,
    ) -> Result<ProcessorState, DataError> {
        let ours = self
            .cp
            .current
            .as_ref()
            .map_or(range.start, |s| s.buckets_done);
        let theirs = swap_resume_points(link, ours)?;
        if !(range.start..=range.end).contains(&theirs) {
            return Err(peer_error(format!(
                "the peer's worker of partition {} resumes at bucket {theirs}, outside the \
                 partition's buckets {}..{}",
                self.cp.partition, range.start, range.end
            )));
        }
        let at = ours.min(theirs);
        let state = [&self.cp.current, &self.cp.previous]
            .into_iter()
            .flatten()
            .find(|s| s.buckets_done == at)
            .cloned();
        match state {
            Some(s) => Ok(redo_of(s, &self.cp.current)),
            None if at == range.start => Ok(redo_of(
                ProcessorState {
                    buckets_done: range.start,
                    ..ProcessorState::default()
                },
                &self.cp.current,
            )),
            None => Err(peer_error(format!(
                "partition {}: this party's checkpoint is at bucket {ours}, the peer's at \
                 {theirs}; they cannot be reconciled, delete both recovery folders to start over",
                self.cp.partition
            ))),
        }
    }

    /// The state after the partition's last bucket (`range.end`), for the final merge.
    ///
    /// # Errors
    /// The partition has not finished.
    pub(crate) fn finished(&self, range: &Range<usize>) -> Result<ProcessorState, DataError> {
        match &self.cp.current {
            Some(s) if s.buckets_done == range.end => Ok(s.clone()),
            None if range.is_empty() => Ok(ProcessorState {
                buckets_done: range.start,
                ..ProcessorState::default()
            }),
            other => Err(DataError::Protocol(ProtocolError::Config(format!(
                "partition {} has not finished: its checkpoint is at bucket {} of {}..{}",
                self.cp.partition,
                other.as_ref().map_or(range.start, |s| s.buckets_done),
                range.start,
                range.end
            )))),
        }
    }

    /// Records a finished bucket (the runs already synced) and replaces the checkpoint.
    ///
    /// # Errors
    /// The write failed.
    pub(crate) fn advance(&mut self, state: ProcessorState) -> Result<(), DataError> {
        self.cp.previous = self.cp.current.take();
        self.cp.current = Some(state);
        let json = serde_json::to_vec(&self.cp).unwrap_or_default();
        write_atomic(&self.dir.join(FILE), &json)
    }
}

fn peer_error(message: String) -> DataError {
    DataError::Protocol(ProtocolError::PeerMisbehaved(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::wire::ResumePoint;
    use blindjoin_link::mem_pair;
    use blindjoin_link::wire::WireMessage;

    fn folder(name: &str) -> RecoveryAt {
        let folder = std::env::temp_dir().join(format!("bj-partrec-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).unwrap();
        RecoveryAt {
            folder,
            fingerprint: "f".into(),
        }
    }

    fn state(done: usize) -> ProcessorState {
        ProcessorState {
            buckets_done: done,
            peer_keys: done as u64 * 10,
            ..ProcessorState::default()
        }
    }

    /// Partition `p` of 2 over 8 buckets with its checkpoint advanced to each of `done`.
    fn at(rec: &RecoveryAt, p: usize, done: &[usize]) -> PartitionRecovery {
        let mut r = PartitionRecovery::open(rec, p, 2, 8).unwrap();
        for &d in done {
            r.advance(state(d)).unwrap();
        }
        PartitionRecovery::open(rec, p, 2, 8).unwrap()
    }

    fn agree_both(
        a: PartitionRecovery,
        b: PartitionRecovery,
        range: Range<usize>,
    ) -> (
        Result<ProcessorState, DataError>,
        Result<ProcessorState, DataError>,
    ) {
        let (mut la, mut lb) = mem_pair();
        let r2 = range.clone();
        let t = std::thread::spawn(move || b.agree(&mut lb, r2));
        let ra = a.agree(&mut la, range);
        (ra, t.join().unwrap())
    }

    #[test]
    fn no_checkpoint_on_either_side_starts_at_the_partition_s_first_bucket() {
        let (ra, rb) = (folder("none-a"), folder("none-b"));
        let (a, b) = agree_both(at(&ra, 1, &[]), at(&rb, 1, &[]), 4..8);
        assert_eq!(a.unwrap().buckets_done, 4);
        assert_eq!(b.unwrap().buckets_done, 4);
    }

    #[test]
    fn both_resume_at_the_smaller_point_one_bucket_apart() {
        let (ra, rb) = (folder("one-a"), folder("one-b"));
        let (a, b) = agree_both(at(&ra, 1, &[5, 6, 7]), at(&rb, 1, &[5, 6]), 4..8);
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.buckets_done, b.buckets_done), (6, 6));
        // The party one ahead redoes bucket 6 and knows the peer's count in it then (70 − 60);
        // the other has nothing to compare.
        assert_eq!(
            a,
            ProcessorState {
                redo_peer_keys: Some(10),
                ..state(6)
            }
        );
        assert_eq!(b, state(6));
    }

    /// The party one ahead at a partition's first bucket (no earlier state) knows the peer's
    /// count in it too, from the partition's start at 0 keys.
    #[test]
    fn one_ahead_at_the_partition_s_first_bucket_keeps_the_peer_s_count() {
        let (ra, rb) = (folder("first-a"), folder("first-b"));
        let (a, b) = agree_both(at(&ra, 1, &[5]), at(&rb, 1, &[]), 4..8);
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.buckets_done, a.redo_peer_keys), (4, Some(50)));
        assert_eq!((b.buckets_done, b.redo_peer_keys), (4, None));
    }

    #[test]
    fn a_partition_both_finished_runs_no_bucket_again() {
        let (ra, rb) = (folder("done-a"), folder("done-b"));
        let (a, b) = agree_both(at(&ra, 0, &[1, 2, 3, 4]), at(&rb, 0, &[3, 4]), 0..4);
        assert_eq!(a.unwrap().buckets_done, 4);
        assert_eq!(b.unwrap().buckets_done, 4);
    }

    #[test]
    fn one_side_without_a_checkpoint_makes_both_start_over() {
        let (ra, rb) = (folder("lost-a"), folder("lost-b"));
        let (a, b) = agree_both(at(&ra, 1, &[5, 6]), at(&rb, 1, &[]), 4..8);
        assert_eq!(a.unwrap().buckets_done, 4);
        assert_eq!(b.unwrap().buckets_done, 4);
    }

    #[test]
    fn checkpoints_far_apart_or_out_of_range_are_refused() {
        let (ra, rb) = (folder("far-a"), folder("far-b"));
        let (a, _) = agree_both(at(&ra, 1, &[5, 6, 7]), at(&rb, 1, &[5]), 4..8);
        let e = a.unwrap_err().to_string();
        assert!(e.contains("cannot be reconciled"), "{e}");
        // A peer naming a bucket of another partition.
        let rc = folder("far-c");
        let mine = at(&rc, 1, &[]);
        let (mut la, mut lb) = mem_pair();
        let t = std::thread::spawn(move || {
            lb.send(&ResumePoint { buckets_done: 2 }.encode()).unwrap();
            lb.recv().unwrap()
        });
        let e = mine.agree(&mut la, 4..8).unwrap_err().to_string();
        t.join().unwrap();
        assert!(e.contains("outside the partition's buckets 4..8"), "{e}");
    }

    #[test]
    fn a_checkpoint_of_another_worker_count_run_or_bucket_count_is_refused() {
        let rec = folder("other");
        at(&rec, 1, &[5]);
        let e = PartitionRecovery::open(&rec, 1, 3, 8)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("same --workers"), "{e}");
        let e = PartitionRecovery::open(&rec, 1, 2, 16)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("buckets"), "{e}");
        let other = RecoveryAt {
            fingerprint: "g".into(),
            ..rec.clone()
        };
        let e = PartitionRecovery::open(&other, 1, 2, 8)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("other settings"), "{e}");
        std::fs::write(rec.folder.join(DIR).join("p1").join(FILE), b"{").unwrap();
        let e = PartitionRecovery::open(&rec, 1, 2, 8)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unreadable"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn partition_folders_and_checkpoints_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let rec = folder("private");
        let r = at(&rec, 0, &[1]);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&rec.folder.join(DIR)), 0o700);
        assert_eq!(mode(r.dir()), 0o700);
        assert_eq!(mode(&r.dir().join(FILE)), 0o600);
    }
}
