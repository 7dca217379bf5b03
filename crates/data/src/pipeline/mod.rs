//! One party's run, stage by stage: read and key the table (in memory or spilled to disk in
//! hash shards), agree the run's terms with the peer, run the protocol bucket by bucket, join
//! the result back onto the rows, merge the sorted runs into the output, checkpoint for
//! recovery, and report. [`two_party`] and [`three_party`] are the two pipelines built from
//! these stages; unbalanced PSI has its own in [`crate::ub`].

pub mod bucket;
pub mod join;
pub(crate) mod multi_party;
pub(crate) mod n_party;
pub mod partition;
pub mod partition_job;
pub(crate) mod partition_recovery;
pub(crate) mod process;
pub(crate) mod recovery;
pub(crate) mod report;
pub(crate) mod runs;
pub(crate) mod spill;
pub(crate) mod three_party;
pub(crate) mod two_party;
pub(crate) mod wire;
