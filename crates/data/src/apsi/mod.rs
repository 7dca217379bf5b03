//! Labeled PSI (SecretFlow's `apsi_sender_config` / `apsi_receiver_config`): the sender's
//! source table and DB file ([`source`], [`db_file`]), the receiver's query table and result,
//! and the runs ([`run_apsi`]). The protocol is [`blindjoin_apsi`]; this module reads tables,
//! keeps files and maps the protocol's answers back to query rows.
//!
//! Bucket mode (`experimental_enable_bucketize`) splits the sender's table by a hash of the
//! key into `experimental_bucket_cnt` buckets, one DB file each in
//! `experimental_bucket_folder`; the receiver routes each key to its bucket with the same hash
//! and queries only the buckets its keys fall in ([`bucket_of`]). The sender learns which
//! buckets were queried (as in SecretFlow).

pub mod db_file;
pub(crate) mod run;
pub mod source;

pub use run::run_apsi;
pub mod serve;

use crate::spec::PeerLink;
use blindjoin_apsi::sender_db::DbForm;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// APSI's default nonce size in labeled mode (bytes): `nonce_byte_count` when 0 or absent.
pub const DEFAULT_NONCE_BYTES: usize = 16;

/// The bucket of a key in bucket mode: the first 8 bytes of its item digest (SHA-256 based,
/// so uniform) modulo the bucket count. Both parties compute it from the key alone.
pub fn bucket_of(digest: &blindjoin_crypto::ItemDigest, buckets: usize) -> usize {
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    (u64::from_le_bytes(b) % buckets.max(1) as u64) as usize
}

/// Bucket mode's settings (both parties must agree on `count`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// `experimental_bucket_cnt`.
    pub count: usize,
    /// `experimental_bucket_folder` (sender only).
    pub folder: Option<PathBuf>,
}

/// What the sender does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SenderTask {
    /// Build the DB from `source_file` with `params_file`; save it to `sdb_out_file` (or the
    /// bucket folder) when given; serve one query unless `save_db_only`.
    Build {
        /// The source table (`key` or `key,value` header).
        source: PathBuf,
        /// APSI's parameter JSON.
        params_file: PathBuf,
        /// Where to save the DB.
        sdb_out: Option<PathBuf>,
        /// Save and stop, without a link.
        save_db_only: bool,
        /// Nonce bytes per label.
        nonce_len: usize,
        /// How the saved DB stores its plaintexts (`compress`).
        form: DbForm,
    },
    /// Load the DB saved by an earlier `Build` from `db_file` (or the bucket folder) and serve.
    Load {
        /// The saved DB (unused in bucket mode, whose DBs are in the bucket folder).
        db_file: Option<PathBuf>,
    },
}

/// The sender or the receiver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApsiRole {
    /// Holds the table and its labels.
    Sender(SenderTask),
    /// Holds the query keys; learns matches and labels.
    Receiver {
        /// Query table (a `key` column).
        query: PathBuf,
        /// Result file (`key,value`, or `key` for an unlabeled DB).
        output: PathBuf,
        /// The preset it expects; `None` takes the sender's.
        params_file: Option<PathBuf>,
    },
}

/// One party's labeled-PSI run.
#[derive(Clone, Debug)]
pub struct ApsiSpec {
    /// What this party does.
    pub role: ApsiRole,
    /// Bucket mode.
    pub buckets: Option<Buckets>,
    /// Receiver: most unique keys per APSI query (`query_batch_size`; 0 or absent: all keys
    /// of a bucket in one query).
    pub query_batch_size: usize,
    /// Sender: the most OPRF evaluations one DB key may serve over all its sessions
    /// (`blindjoin.max_query_items`, [`crate::ub::budget`]).
    pub max_query_items: u64,
    /// `threads`: the size of the run's thread pool (`None`: all cores).
    pub threads: Option<usize>,
    /// The peer and the link's settings; no parties for a sender with `save_db_only`.
    pub link: PeerLink,
    /// Where to write the JSON report.
    pub report: Option<PathBuf>,
    /// Warnings for the user.
    pub warnings: Vec<String>,
}

impl ApsiSpec {
    /// `"sender"` or `"receiver"`.
    pub fn role_name(&self) -> &'static str {
        match self.role {
            ApsiRole::Sender(_) => "sender",
            ApsiRole::Receiver { .. } => "receiver",
        }
    }
}

/// What a labeled-PSI run did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ApsiReport {
    /// blindjoin version.
    pub version: String,
    /// This party's id (empty without a link).
    pub party: String,
    /// `sender` or `receiver`.
    pub role: String,
    /// Rows of this party's table (source or query; -1 when none was read).
    pub original_count: i64,
    /// Items in the sender's DB(s) (sender; -1 on the receiver).
    pub db_items: i64,
    /// Label bytes per item in the DB (0: unlabeled).
    pub label_bytes: u64,
    /// Buckets queried or served (1 without bucket mode).
    pub buckets_used: u64,
    /// Query rows found (receiver; -1 on the sender).
    pub intersection_count: i64,
    /// The result file (receiver).
    pub output_path: Option<String>,
    /// The DB file(s) written or read (sender).
    pub db_path: Option<String>,
    /// Seconds to read the source and build the DB (or load it).
    pub setup_s: f64,
    /// Seconds of the online exchange.
    pub online_s: f64,
    /// Bytes sent to the peer (framing included).
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Wall time of the whole run.
    pub total_s: f64,
    /// Peak resident memory (Linux; 0 elsewhere).
    pub peak_rss_bytes: u64,
}

#[cfg(test)]
mod tests;
