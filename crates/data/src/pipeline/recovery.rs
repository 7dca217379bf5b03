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
        let path = folder.join(FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((rec, None)),
            Err(source) => {
                return Err(DataError::Io {
                    path,
                    action: "reading the checkpoint",
                    source,
                });
            }
        };
        let refuse = |why: &str| {
            DataError::Config(ConfigError::Invalid {
                field: "psi_config.recovery_config.folder".into(),
                message: format!(
                    "{}: {why}; rerun the original command, or delete the folder to start over",
                    path.display()
                ),
            })
        };
        let cp: Checkpoint =
            serde_json::from_slice(&bytes).map_err(|e| refuse(&format!("unreadable ({e})")))?;
        if cp.format != FORMAT {
            return Err(refuse("written by another blindjoin version"));
        }
        if cp.fingerprint != rec.fingerprint {
            return Err(refuse(
                "the checkpoint is from a run with other settings or another input file (the \
                 config or the input changed since the crash)",
            ));
        }
        Ok((rec, Some(cp)))
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
        let msg = ResumePoint {
            buckets_done: ours as u32,
        };
        link.send(&msg.encode()).map_err(ProtocolError::from)?;
        let reply = link.recv().map_err(ProtocolError::from)?;
        let theirs = ResumePoint::decode(&reply)
            .map_err(ProtocolError::from)?
            .buckets_done as usize;
        let at = ours.min(theirs);
        let state = [&self.current, &self.previous]
            .into_iter()
            .flatten()
            .find(|s| s.buckets_done == at)
            .cloned();
        match state {
            Some(s) => Ok(s),
            None if at == 0 => Ok(ProcessorState::default()),
            None => Err(peer_error(format!(
                "this party's checkpoint is at bucket {ours}, the peer's at {theirs}; they cannot \
                 be reconciled, delete both recovery folders to start over"
            ))),
        }
    }

    /// Records a finished bucket.
    pub fn advance(&mut self, buckets: usize, state: ProcessorState) {
        self.buckets = buckets;
        self.previous = self.current.take();
        self.current = Some(state);
    }
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
    );
    let d = item_digest(text.as_bytes());
    Ok(d.iter().map(|b| format!("{b:02x}")).collect())
}
