//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; not a stable API): the data
//! path's decoders of peer bytes that are private to this crate. Each runs the real decoder
//! against whatever `link` delivers; the fuzz target plays the peer.

use crate::error::DataError;
use crate::pipeline::bucket::{BucketedPsi, RevealCounts};
use crate::pipeline::process::ProcessorState;
use crate::pipeline::recovery::Checkpoint;
use blindjoin_crypto::ItemDigest;
use blindjoin_link::Link;
use blindjoin_protocols::{HandshakeChecked, ProtocolError, PsiOptions};

/// The bucket-count exchange before bucket `k` of the run `hs` agreed, in buckets of
/// `bucket_size` keys: this party
/// holds `ours` unique keys in the bucket, and the peer had `peer_keys` in the buckets before
/// it. Returns the peer's count for bucket `k` once it has passed every check.
///
/// # Errors
/// `k` past the last bucket, a link error, or the peer's reply refused.
pub fn bucket_count(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    bucket_size: u64,
    k: usize,
    peer_keys: u64,
    ours: u64,
) -> Result<u64, DataError> {
    let mut psi = BucketedPsi::new(hs, &PsiOptions::default(), bucket_size)?;
    psi.resume_at(k, peer_keys, RevealCounts::default())?;
    psi.exchange_count(link, k, ours)
}

/// The resume handshake ([`Checkpoint::agree`]) of a run with `buckets` buckets, from a
/// checkpoint made with `checkpoint_buckets` buckets whose last two states finished `current`
/// and `previous` buckets (`None`: no such state). Returns the agreed state's finished buckets.
///
/// # Errors
/// A link error, or the peer's resume point refused or irreconcilable with ours.
pub fn resume_point(
    link: &mut dyn Link,
    checkpoint_buckets: usize,
    current: Option<usize>,
    previous: Option<usize>,
    buckets: usize,
) -> Result<usize, DataError> {
    // The checkpoint's fields are the recovery module's own; build it as a checkpoint file
    // would, through its serialised form.
    let state = |done: Option<usize>| {
        done.map(|buckets_done| ProcessorState {
            buckets_done,
            ..ProcessorState::default()
        })
    };
    let bad = |e: serde_json::Error| {
        DataError::Protocol(ProtocolError::Config(format!("fuzz checkpoint: {e}")))
    };
    let json = serde_json::json!({
        "format": 0,
        "fingerprint": "",
        "header": [],
        "rows": 0,
        "shards": 1,
        "buckets": checkpoint_buckets,
        "current": serde_json::to_value(state(current)).map_err(bad)?,
        "previous": serde_json::to_value(state(previous)).map_err(bad)?,
    });
    let cp: Checkpoint = serde_json::from_value(json).map_err(bad)?;
    cp.agree(link, buckets).map(|s| s.buckets_done)
}

/// `check_hash_digest` (SecretFlow's meaning): the private test of whether the peer's key set
/// digest equals `ours`, this party in `role`. Returns what this party concluded.
///
/// # Errors
/// A link error, or a peer message refused.
pub fn key_sets_equal(
    link: &mut dyn Link,
    role: blindjoin_protocols::Role,
    ours: &ItemDigest,
) -> Result<bool, DataError> {
    crate::pipeline::process::key_sets_equal(link, role, ours)
}

/// `blindjoin.check_intersection_digest`'s comparison: sends `ours` and checks the peer's digest
/// equals it.
///
/// # Errors
/// A link error, or a digest that differs.
pub fn check_digest(link: &mut dyn Link, ours: &ItemDigest) -> Result<(), DataError> {
    crate::pipeline::process::check_digest(link, ours)
}

/// The labeled-PSI sender's decoder of the receiver's round plan (`APSI_ROUNDS`: bucket count,
/// query count, then each query's bucket and unique-key count), checked against this sender's
/// `bucket_count`. Returns the planned buckets.
///
/// # Errors
/// The plan refused (truncated, too long, out of range or order, another bucket count).
pub fn apsi_rounds(msg: &[u8], bucket_count: usize) -> Result<Vec<usize>, DataError> {
    crate::apsi::run::decode_rounds(msg, bucket_count)
        .map(|rounds| rounds.into_iter().map(|(bucket, _)| bucket).collect())
}

/// A partition worker's decoder of the job its coordinator hands it (magic, then JSON, at most
/// 4 MiB).
///
/// # Errors
/// The job refused (too long, another magic, unreadable JSON).
pub fn partition_job(bytes: &[u8]) -> Result<(), DataError> {
    crate::pipeline::partition_job::Job::decode(bytes).map(|_| ())
}
