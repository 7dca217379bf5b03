//! # blindjoin-data — the data path
//!
//! Reads a party's table, canonicalises and deduplicates its keys, hands their digests to the
//! protocol named in the [`RunSpec`] (it never knows which one runs), joins the result back onto
//! the rows, aligns and writes them atomically, and reports. The CLI and the Python API both call
//! [`run`] with a [`RunSpec`] built from a SecretFlow v2 config ([`parse_launch_config`]) or from
//! flags.
//!
//! Layering: depends on `blindjoin-protocols` and `blindjoin-link`; nothing above it.

pub mod bucket;
mod config;
pub mod csv;
mod error;
/// Entry points for the fuzz targets (feature `fuzzing`; not a stable API).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod generate;
pub mod join;
mod output;
#[cfg(feature = "parquet")]
pub mod parquet_io;
#[cfg(not(feature = "parquet"))]
#[path = "parquet_off.rs"]
pub mod parquet_io;
mod process;
mod recovery;
mod report;
mod rows;
mod run;
#[cfg(test)]
mod run_tests;
mod runs;
mod spec;
mod spill;
mod table;
mod three_party;

pub use config::{THREE_PARTY_PROTOCOLS, ThreePartySpec, parse_three_party_config};
pub use three_party::{ThreePartyOutcome, run_three_party};
// Unbalanced PSI (ub_psi_config): key file, caches, modes.
pub mod ub;

pub use config::{DEFAULT_BUCKET_SIZE, parse_curve, parse_launch_config};
pub use config::{ParsedConfig, parse_any_launch_config};
pub use config::{is_ub_launch_config, parse_ub_launch_config};
pub use error::{ConfigError, DataError};
pub use output::{AtomicFile, write_atomic};
pub use report::{Report, Stages, peak_rss_bytes};
pub use run::{AUTO_SPILL_BYTES, Prepared, prepare, run, run_on_link, run_with_cancel};
pub use spec::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_RECV_TIMEOUT, Parties, RunSpec, SpillMode, TableFormat,
};
pub use table::{Table, cmp_keys};

pub use blindjoin_crypto::Curve;
pub use blindjoin_link::{Cancel, DEFAULT_SILENCE_TIMEOUT, LinkShape, TlsConfig};
pub use blindjoin_protocols::Reveal;
pub use blindjoin_protocols::rr22::Rr22Mode;
pub use blindjoin_protocols::{NoProgress, Progress, Protocol, Role};
