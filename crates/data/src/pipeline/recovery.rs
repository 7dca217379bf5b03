//! Resume after a crash (`recovery_config`): the input is spilled into the recovery folder, and
//! after every bucket the sorted runs are synced and a checkpoint (`checkpoint.json`, replaced
//! atomically) records where they end and what the run has counted so far. Rerunning the same
//! command on both sides after `kill -9` at any moment picks up at the last bucket both parties
//! finished and writes the same bytes an uninterrupted run would.
//!
//! The parties run buckets in lockstep, so their checkpoints differ by at most one bucket: each
//! keeps its previous state too, and both resume from the smaller count. A checkpoint is bound
//! to a fingerprint of the run's settings and the input file (size and modification time); a
//! rerun with anything changed is refused. No secret is stored: every bucket's protocol draws
//! fresh randomness, and a user-supplied ECDH key stays in the user's own file.
//!
//! The folder holds a copy of the input and of the output's rows: folders we make in it are
//! 0700 and files 0600 ([`crate::table::private_fs`]).

use crate::error::{ConfigError, DataError};
use crate::pipeline::process::ProcessorState;
use crate::pipeline::wire::ResumePoint;
use crate::spec::RunSpec;
use crate::table::output::write_atomic;
use crate::table::private_fs;
use blindjoin_crypto::item_digest;
use blindjoin_link::Link;
use blindjoin_link::wire::WireMessage;
use blindjoin_protocols::ProtocolError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The checkpoint's file name in the recovery folder.
pub(crate) const FILE: &str = "checkpoint.json";
/// Version of the checkpoint and of the spill shards it names (2: shard row heads are varints).
const FORMAT: u32 = 2;

/// What the recovery folder says about the run so far.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Checkpoint {
    format: u32,
    fingerprint: String,
    /// The input's header.
    pub header: Vec<String>,
    /// The input's rows.
    pub rows: u64,
    /// Spill shards.
    pub shards: usize,
    /// Buckets agreed with the peer (0 before the first bucket).
    pub buckets: usize,
    /// The state after the last finished bucket.
    pub current: Option<ProcessorState>,
    /// The state one bucket earlier, in case the peer is one behind.
    pub previous: Option<ProcessorState>,
    /// The partition count of a partitioned run (each partition then keeps its own
    /// checkpoint, [`crate::pipeline::partition_recovery`]); 0 until one starts.
    #[serde(default)]
    pub partitions: usize,
}

/// A run's recovery folder.
pub struct Recovery {
    folder: PathBuf,
    fingerprint: String,
}

impl Recovery {
    /// Opens (creating) `folder` for `spec`; returns the checkpoint of an earlier run of the
    /// same command, if there is one.
    ///
    /// # Errors
    /// The folder is not writable; its checkpoint is unreadable or from a different command or
    /// input.
    pub fn open(
        spec: &RunSpec,
        folder: &Path,
    ) -> Result<(Recovery, Option<Checkpoint>), DataError> {
        // The folder keeps a copy of the input (its shards) and the output's runs: made 0700
        // when we make it, and the user is told when theirs is open to group or others.
        let existed = private_fs::ensure_user_dir(folder).map_err(|source| DataError::Io {
            path: folder.to_path_buf(),
            action: "creating the recovery folder",
            source,
        })?;
        if existed {
            private_fs::warn_if_shared(folder, "the recovery folder");
        }
        let rec = Recovery {
            folder: folder.to_path_buf(),
            fingerprint: fingerprint(spec)?,
        };
        let cp = read_checkpoint(
            &folder.join(FILE),
            "reading the checkpoint",
            FORMAT,
            &rec.fingerprint,
        )?;
        Ok((rec, cp))
    }

    /// The first checkpoint, right after the spill.
    pub fn fresh(&self, header: Vec<String>, rows: u64, shards: usize) -> Checkpoint {
        Checkpoint {
            format: FORMAT,
            fingerprint: self.fingerprint.clone(),
            header,
            rows,
            shards,
            buckets: 0,
            current: None,
            previous: None,
            partitions: 0,
        }
    }

    /// Replaces the checkpoint atomically.
    ///
    /// # Errors
    /// The write failed.
    pub fn save(&self, cp: &Checkpoint) -> Result<(), DataError> {
        let json = serde_json::to_vec(cp).unwrap_or_default();
        write_atomic(&self.folder.join(FILE), &json)
    }

    /// The folder.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Where the spill shards live.
    pub fn shard_dir(&self) -> PathBuf {
        self.folder.join("shards")
    }

    /// The digest of the run's settings and input that every checkpoint is bound to.
    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

impl Checkpoint {
    /// Agrees with the peer on the bucket to resume from and returns the state to resume with.
    ///
    /// # Errors
    /// Link errors; checkpoints more than one bucket apart, or from runs with different bucket
    /// counts.
    pub fn agree(&self, link: &mut dyn Link, buckets: usize) -> Result<ProcessorState, DataError> {
        if self.buckets != 0 && self.buckets != buckets {
            return Err(peer_error(format!(
                "the checkpoint was made with {} buckets, this run has {buckets} (the peer's input \
                 changed?); delete both recovery folders to start over",
                self.buckets
            )));
        }
        let ours = self.current.as_ref().map_or(0, |s| s.buckets_done);
        let theirs = swap_resume_points(link, ours)?;
        let at = ours.min(theirs);
        let state = [&self.current, &self.previous]
            .into_iter()
            .flatten()
            .find(|s| s.buckets_done == at)
            .cloned();
        match state {
            Some(s) => Ok(redo_of(s, &self.current)),
            None if at == 0 => Ok(redo_of(ProcessorState::default(), &self.current)),
            None => Err(peer_error(format!(
                "this party's checkpoint is at bucket {ours}, the peer's at {theirs}; they cannot \
                 be reconciled, delete both recovery folders to start over"
            ))),
        }
    }

    /// Checks that the folder's progress was made with `parts` partitions (a one-worker run's
    /// progress cannot resume partitioned, nor the other way round, nor with another count:
    /// the buckets' runs are laid out per partition), and records `parts`. Returns whether the
    /// checkpoint changed (and must be saved).
    ///
    /// # Errors
    /// The folder holds progress made with another worker count.
    pub fn use_partitions(&mut self, parts: usize) -> Result<bool, DataError> {
        let made_with = match (self.partitions, self.buckets) {
            (0, 0) => None,
            (0, _) => Some(1),
            (n, _) => Some(n),
        };
        let asked = if parts > 1 { parts } else { 1 };
        match made_with {
            Some(n) if n != asked => Err(DataError::Config(ConfigError::Invalid {
                field: "blindjoin.workers (--workers)".into(),
                message: format!(
                    "the recovery folder (psi_config.recovery_config.folder) holds the progress \
                     of a run with {n} worker(s), this run has {asked}; rerun with --workers {n} \
                     on both sides, or delete both recovery folders to start over"
                ),
            })),
            _ if parts > 1 && self.partitions != parts => {
                self.partitions = parts;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Records a finished bucket.
    pub fn advance(&mut self, buckets: usize, state: ProcessorState) {
        self.buckets = buckets;
        self.previous = self.current.take();
        self.current = Some(state);
    }
}

/// The first fields of every checkpoint file of ours.
#[derive(Deserialize)]
struct Stamp {
    format: u32,
    fingerprint: String,
}

/// Reads the checkpoint at `path` (`None` when there is none yet), refusing one that is
/// unreadable, of another `format` or of another run (`fingerprint`: the settings and input).
///
/// # Errors
/// The read failed; the refusals above ([`refused_checkpoint`]).
pub(crate) fn read_checkpoint<T: serde::de::DeserializeOwned>(
    path: &Path,
    action: &'static str,
    format: u32,
    fingerprint: &str,
) -> Result<Option<T>, DataError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(DataError::Io {
                path: path.to_path_buf(),
                action,
                source,
            });
        }
    };
    let unreadable = |e: serde_json::Error| refused_checkpoint(path, &format!("unreadable ({e})"));
    let stamp: Stamp = serde_json::from_slice(&bytes).map_err(unreadable)?;
    if stamp.format != format {
        return Err(refused_checkpoint(
            path,
            "written by another blindjoin version",
        ));
    }
    if stamp.fingerprint != fingerprint {
        return Err(refused_checkpoint(
            path,
            "the checkpoint is from a run with other settings or another input file (the \
             config or the input changed since the crash)",
        ));
    }
    serde_json::from_slice(&bytes).map(Some).map_err(unreadable)
}

/// `state`, marked with the peer's key count in its next bucket when this party's checkpoint
/// (`current`) is one bucket past it: the peer announced `current.peer_keys − state.peer_keys`
/// keys in that bucket, and must announce as many when it is redone (a different count would be
/// a second query on this party's bucket with other rows). Both states are cumulative and
/// consecutive, so the checkpoint records the count without a field of its own, and checkpoints
/// written before this check get it too.
pub(crate) fn redo_of(
    mut state: ProcessorState,
    current: &Option<ProcessorState>,
) -> ProcessorState {
    state.redo_peer_keys = current
        .as_ref()
        .filter(|c| c.buckets_done == state.buckets_done + 1)
        .map(|c| c.peer_keys.saturating_sub(state.peer_keys));
    state
}

/// Tells the peer the bucket this party's checkpoint resumes at and returns the peer's.
pub(crate) fn swap_resume_points(link: &mut dyn Link, ours: usize) -> Result<usize, DataError> {
    let msg = ResumePoint {
        buckets_done: ours as u32,
    };
    link.send(&msg.encode()).map_err(ProtocolError::from)?;
    let reply = link.recv().map_err(ProtocolError::from)?;
    Ok(ResumePoint::decode(&reply)
        .map_err(ProtocolError::from)?
        .buckets_done as usize)
}

/// A checkpoint this run cannot resume from, saying `why` and what to do.
pub(crate) fn refused_checkpoint(path: &Path, why: &str) -> DataError {
    DataError::Config(ConfigError::Invalid {
        field: "psi_config.recovery_config.folder".into(),
        message: format!(
            "{}: {why}; rerun the original command, or delete the folder to start over",
            path.display()
        ),
    })
}

fn peer_error(message: String) -> DataError {
    DataError::Protocol(ProtocolError::PeerMisbehaved(message))
}

/// A digest of everything that shapes the output: the settings both parties checked in the
/// handshake, the files, and the input's size and modification time.
fn fingerprint(spec: &RunSpec) -> Result<String, DataError> {
    let meta = std::fs::metadata(&spec.input).map_err(|source| DataError::Io {
        path: spec.input.clone(),
        action: "reading the input",
        source,
    })?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    // A folder of parts: its own metadata misses a part rewritten in place.
    let parts = if meta.is_dir() {
        crate::table::parts::parts_fingerprint(&spec.input)?
    } else {
        String::new()
    };
    let text = format!(
        "{:?}",
        (
            (
                &spec.protocol,
                &spec.reveal,
                &spec.min_intersection,
                spec.bucket_size
            ),
            (&spec.role, spec.broadcast_result, spec.align, &spec.join),
            (&spec.input, &spec.output, &spec.keys),
            (&spec.parties.self_id, &spec.parties.peer_id),
            (meta.len(), modified),
        )
    ) + &parts;
    let d = item_digest(text.as_bytes());
    Ok(d.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(partitions: usize, buckets: usize) -> Checkpoint {
        Checkpoint {
            format: FORMAT,
            fingerprint: "f".into(),
            header: vec!["id".into()],
            rows: 1,
            shards: 1,
            buckets,
            current: None,
            previous: None,
            partitions,
        }
    }

    #[test]
    fn progress_resumes_only_with_the_worker_count_it_was_made_with() {
        // A fresh folder takes any count, and records a partitioned one.
        let mut fresh = cp(0, 0);
        assert!(fresh.use_partitions(3).unwrap());
        assert_eq!(fresh.partitions, 3);
        assert!(!fresh.use_partitions(3).unwrap());
        assert!(!cp(0, 0).use_partitions(1).unwrap());
        // A one-worker run's progress resumes with one worker only.
        assert!(!cp(0, 8).use_partitions(1).unwrap());
        let e = cp(0, 8).use_partitions(2).unwrap_err().to_string();
        assert!(
            e.contains("1 worker(s)") && e.contains("--workers 1"),
            "{e}"
        );
        // A partitioned run's, with the same count only.
        assert!(!cp(2, 0).use_partitions(2).unwrap());
        for other in [1, 4] {
            let e = cp(2, 0).use_partitions(other).unwrap_err().to_string();
            assert!(
                e.contains("2 worker(s)") && e.contains("--workers 2"),
                "{e}"
            );
        }
    }

    fn done(buckets_done: usize, peer_keys: u64) -> ProcessorState {
        ProcessorState {
            buckets_done,
            peer_keys,
            ..ProcessorState::default()
        }
    }

    /// Both parties' checkpoints, one bucket apart: the one ahead resumes with the peer's key
    /// count in the bucket it redoes; at the same point neither has a count to hold.
    #[test]
    fn the_party_one_ahead_resumes_with_the_peer_s_count_in_the_redone_bucket() {
        let mut ahead = cp(0, 4);
        ahead.advance(4, done(2, 30));
        ahead.advance(4, done(3, 42));
        let mut behind = cp(0, 4);
        behind.advance(4, done(1, 10));
        behind.advance(4, done(2, 30));
        let (mut la, mut lb) = blindjoin_link::mem_pair();
        let t = std::thread::spawn(move || behind.agree(&mut lb, 4).unwrap());
        let a = ahead.agree(&mut la, 4).unwrap();
        let b = t.join().unwrap();
        assert_eq!((a.buckets_done, a.redo_peer_keys), (2, Some(12)));
        assert_eq!((b.buckets_done, b.redo_peer_keys), (2, None));
        // One bucket in, the other side with none: the count is the whole first bucket's.
        let mut first = cp(0, 4);
        first.advance(4, done(1, 9));
        let (mut la, mut lb) = blindjoin_link::mem_pair();
        let t = std::thread::spawn(move || cp(0, 0).agree(&mut lb, 4).unwrap());
        let a = first.agree(&mut la, 4).unwrap();
        assert_eq!((a.buckets_done, a.redo_peer_keys), (0, Some(9)));
        assert_eq!(t.join().unwrap().redo_peer_keys, None);
    }

    /// The count never reaches the checkpoint file (it is derived from the two states).
    #[test]
    fn the_redo_count_is_not_written() {
        let s = ProcessorState {
            redo_peer_keys: Some(5),
            ..done(1, 5)
        };
        let v = serde_json::to_value(&s).unwrap();
        assert!(v.get("redo_peer_keys").is_none(), "{v}");
    }

    #[test]
    fn checkpoints_without_a_partition_count_still_read() {
        let mut v = serde_json::to_value(cp(0, 4)).unwrap();
        v.as_object_mut().unwrap().remove("partitions");
        let back: Checkpoint = serde_json::from_value(v).unwrap();
        assert_eq!(back.partitions, 0);
    }
}
