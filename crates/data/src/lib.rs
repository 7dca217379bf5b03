//! # blindjoin-data — the data path
//!
//! Reads a party's table, canonicalises and deduplicates its keys, hands their digests to the
//! protocol its spec names (it never knows which one runs), joins the result back onto the
//! rows, aligns and writes them atomically, and reports. The CLI and the Python API both parse
//! a config once ([`Envelope`]; SecretFlow's launch configs, or flags) into a [`Plan`] and call
//! [`Plan::run`].
//!
//! Laid out in layers, each importing only those below it:
//!
//! | layer | module | what |
//! |---|---|---|
//! | top | `config` | SecretFlow's JSON (v2, v1, three-party, n-party, unbalanced, labeled PSI) and our `blindjoin` block, parsed once → specs and a [`Plan`] |
//! | | [`Plan`], `run_kind` | the run a config asked for: one [`RunKind`] implementation per kind (its name, warnings, link settings, run, summary) |
//! | | `pipeline`, [`ub`], [`apsi`] | one party's run of each kind: read and spill, buckets, the protocol, join, sorted runs, recovery, partitions, report |
//! | | `session` | what every run does around its protocol: connect while working, abort, cancel → stopped, timeouts |
//! | middle | `spec` | typed, validated runs ([`RunSpec`], [`ThreePartySpec`], [`NPartySpec`]); no parsing |
//! | below | `table` | tables: CSV, Parquet, key encoding, parts, atomic and private files |
//! | base | `error`, `log`, `trace` | typed errors sorted by who must act ([`Fault`]), messages, traces |
//!
//! The pipeline never imports `config` or [`Plan`]; a Ray task gets a serialised [`RunSpec`],
//! not config text. Depends on `blindjoin-protocols`, `blindjoin-apsi` and `blindjoin-link`.

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
mod run_kind;
mod secretflow_ub;
mod secretflow_wire;
pub mod serving;
mod session;
mod spec;
mod table;
pub mod trace;
pub mod ub;

pub use pipeline::{bucket, join, partition, partition_job};
pub use table::{csv, parquet_io};

pub use config::Envelope;
pub use config::{
    DEFAULT_BUCKET_SIZE, PsiCsvCall, THREE_PARTY_PROTOCOLS, ThreePartySpec,
    parse_apsi_launch_config, parse_curve, parse_launch_config, parse_legacy_launch_config,
    parse_port_range, parse_three_party_config, parse_ub_launch_config, protocol_choice,
    psi_csv_plan, psi_csv_protocol, psi_csv_spec,
};
pub use config::{KUSCIA_SECRETFLOW_WIRE, KusciaTask, parse_kuscia_task};
pub use config::{N_PARTY_PROTOCOLS, NPartyProtocol, NPartySpec, parse_n_party_config};
pub use error::{ConfigError, DataError, Fault};
pub use pipeline::n_party::run_n_party;
pub use pipeline::report::{Report, Stages, peak_rss_bytes};
pub use pipeline::three_party::{ThreePartyOutcome, run_three_party};
pub use pipeline::two_party::{
    AUTO_SPILL_BYTES, Prepared, prepare, run, run_on_link, run_with_cancel,
};
pub use plan::{LinkOverrides, Outcome, Plan, RunError};
pub use run_kind::{LinkSettings, RunKind};
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
