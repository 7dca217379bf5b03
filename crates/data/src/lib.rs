//! # blindjoin-data — the data path
//!
//! Reads a party's table, canonicalises and deduplicates its keys, hands their digests to the
//! protocol the [`Plan`] names (it never knows which one runs), joins the result back onto the
//! rows, aligns and writes them atomically, and reports. The CLI and the Python API both parse a
//! config (SecretFlow's launch configs, or flags) into a [`Plan`] and call [`Plan::run`].
//!
//! Laid out by concern:
//!
//! | module | what |
//! |---|---|
//! | [`plan`](Plan), `spec` | the typed run: [`Plan`], [`RunSpec`], and the outcome |
//! | `config` | SecretFlow's JSON (two-party, three-party, unbalanced) and our extensions → a plan |
//! | `table` | tables: CSV, Parquet, key encoding, atomic and private files |
//! | `pipeline` | one party's run: read and spill, buckets, the protocol, join, sorted runs, recovery, report, the data path's messages; one module per kind of run |
//! | [`ub`] | unbalanced PSI: key file, caches, modes |
//!
//! Layering: depends on `blindjoin-protocols` and `blindjoin-link`; nothing above it.

pub mod apsi;
mod config;
mod error;
/// Entry points for the fuzz targets (feature `fuzzing`; not a stable API).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod generate;
pub mod log;
pub mod ops;
mod pipeline;
mod plan;
mod spec;
mod table;
pub mod trace;
pub mod ub;

pub use pipeline::{bucket, join, partition, partition_job};
pub use table::{csv, parquet_io};

pub use config::{
    DEFAULT_BUCKET_SIZE, PsiCsvCall, THREE_PARTY_PROTOCOLS, ThreePartySpec,
    is_legacy_launch_config, is_ub_launch_config, parse_curve, parse_launch_config,
    parse_legacy_launch_config, parse_three_party_config, parse_ub_launch_config, protocol_choice,
    psi_csv_plan, psi_csv_protocol, psi_csv_spec,
};
pub use config::{N_PARTY_PROTOCOLS, NPartyProtocol, NPartySpec, parse_n_party_config};
pub use error::{ConfigError, DataError, Fault};
pub use pipeline::n_party::run_n_party;
pub use pipeline::report::{Report, Stages, peak_rss_bytes};
pub use pipeline::three_party::{ThreePartyOutcome, run_three_party};
pub use pipeline::two_party::{
    AUTO_SPILL_BYTES, Prepared, prepare, run, run_on_link, run_with_cancel,
};
pub use plan::{LinkOverrides, Outcome, Plan, RunError};
pub use spec::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_RECV_TIMEOUT, Parties, RunSpec, SpillMode, TableFormat,
};
pub use table::keys::{Table, cmp_keys};
pub use table::output::{AtomicFile, write_atomic};

pub use blindjoin_crypto::Curve;
pub use blindjoin_link::{Cancel, DEFAULT_SILENCE_TIMEOUT, LinkShape, TlsConfig};
pub use blindjoin_protocols::Reveal;
pub use blindjoin_protocols::rr22::Rr22Mode;
pub use blindjoin_protocols::{NoProgress, Phases, Progress, Protocol, ProtocolChoice, Role, Unit};
