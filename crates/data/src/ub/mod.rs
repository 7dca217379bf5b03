//! Unbalanced PSI (SecretFlow's `ub_psi_config`): the server's key file ([`key`]), the two cache
//! files ([`cache`]), the cap on what one key may evaluate for clients ([`budget`]) and the modes
//! ([`run_ub`]: gen cache, transfer cache, offline, online, full).
//! The protocol itself is [`blindjoin_protocols::ub_oprf`]; this module reads tables, keeps
//! files and maps the protocol's indices back to rows, as the balanced data path does.

pub mod budget;
pub mod cache;
pub mod gen_cache;
pub mod key;
mod label_runs;
pub mod labels;
mod run;
pub mod serve;
mod server_rows;
mod sort_runs;

pub use run::run_ub;

use crate::error::{ConfigError, DataError};
use crate::spec::{PeerLink, TableFormat};
use blindjoin_crypto::{CryptoError, Curve};
use blindjoin_link::LinkError;
use blindjoin_protocols::ProtocolError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use thiserror::Error;

/// SecretFlow's `UbPsiConfig.Mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UbMode {
    /// Server only: evaluate the OPRF on the input and write the server cache. No network.
    GenCache,
    /// Server sends its cache; the client stores it.
    TransferCache,
    /// [`UbMode::GenCache`] then [`UbMode::TransferCache`].
    Offline,
    /// The client's query against the transferred cache.
    Online,
    /// Everything in one run (one connection).
    Full,
}

impl UbMode {
    /// SecretFlow's spelling.
    pub fn config_name(self) -> &'static str {
        match self {
            UbMode::GenCache => "MODE_OFFLINE_GEN_CACHE",
            UbMode::TransferCache => "MODE_OFFLINE_TRANSFER_CACHE",
            UbMode::Offline => "MODE_OFFLINE",
            UbMode::Online => "MODE_ONLINE",
            UbMode::Full => "MODE_FULL",
        }
    }

    /// Accepts SecretFlow's names with or without the `MODE_` prefix, case-insensitively.
    pub fn parse(s: &str) -> Option<UbMode> {
        let t = s.trim().to_ascii_uppercase();
        Some(match t.strip_prefix("MODE_").unwrap_or(&t) {
            "OFFLINE_GEN_CACHE" => UbMode::GenCache,
            "OFFLINE_TRANSFER_CACHE" => UbMode::TransferCache,
            "OFFLINE" => UbMode::Offline,
            "ONLINE" => UbMode::Online,
            "FULL" => UbMode::Full,
            _ => return None,
        })
    }

    /// Whether the server makes a new cache in this mode.
    pub fn generates(self) -> bool {
        matches!(self, UbMode::GenCache | UbMode::Offline | UbMode::Full)
    }

    /// Whether the cache is transferred in this mode.
    pub fn transfers(self) -> bool {
        matches!(self, UbMode::TransferCache | UbMode::Offline | UbMode::Full)
    }

    /// Whether the online query runs in this mode.
    pub fn queries(self) -> bool {
        matches!(self, UbMode::Online | UbMode::Full)
    }
}

/// `ROLE_SERVER` (the large set, holds the key) or `ROLE_CLIENT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UbRole {
    /// Large set; owns the key and the server cache.
    Server,
    /// Small set; holds a copy of the evaluated cache.
    Client,
}

impl UbRole {
    /// SecretFlow's spelling.
    pub fn config_name(self) -> &'static str {
        match self {
            UbRole::Server => "ROLE_SERVER",
            UbRole::Client => "ROLE_CLIENT",
        }
    }
}

/// Which of the server's columns its cache carries as labels (`blindjoin.label_columns`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LabelChoice {
    /// None (the default: the client's output is its own rows, as SecretFlow's).
    #[default]
    None,
    /// Every non-key column, in the table's order (`true`).
    AllNonKey,
    /// These columns, in this order (a list).
    Columns(Vec<String>),
}

/// One party's validated unbalanced-PSI run.
#[derive(Clone, Debug)]
pub struct UbSpec {
    /// What to do.
    pub mode: UbMode,
    /// Which side.
    pub role: UbRole,
    /// The OPRF group (ours: `blindjoin.curve`; FourQ by default, as SecretFlow's fixed choice).
    pub curve: Curve,
    /// The input table (server: gen modes, and online with `server_get_result`; client: online).
    pub input: Option<PathBuf>,
    /// The input's format (`input_config.type`).
    pub input_format: TableFormat,
    /// The output's format (`output_config.type`).
    pub output_format: TableFormat,
    /// Key columns.
    pub keys: Vec<String>,
    /// The server's key file (see [`key`]).
    pub secret_key_path: Option<PathBuf>,
    /// The cache file: the server's own cache on the server, the transferred copy on the client.
    pub cache_path: PathBuf,
    /// The server learns the result.
    pub server_get_result: bool,
    /// The client learns the result.
    pub client_get_result: bool,
    /// Sort the output by key (default true).
    pub align: bool,
    /// Output file, for the parties that learn the result.
    pub output: Option<PathBuf>,
    /// The peer and the link's settings; no parties in gen-cache mode, which needs no peer.
    pub link: PeerLink,
    /// Where to write the JSON report.
    pub report: Option<PathBuf>,
    /// Largest cache the client accepts in transfer (bytes).
    pub max_cache_bytes: u64,
    /// Server: the most client items its key may evaluate over all online runs
    /// ([`budget`]; `blindjoin.max_query_items`).
    pub max_query_items: u64,
    /// Server: the label columns its cache carries (`blindjoin.label_columns`, [`labels`]).
    pub label_columns: LabelChoice,
    /// Threshold mode: at most this many keys of the intersection are revealed
    /// (`intersection_threshold`; online and full only).
    pub threshold: Option<u64>,
    /// Where the parties that learn the count write `real_count,final_count` in threshold mode.
    pub count_path: Option<PathBuf>,
    /// `blindjoin.peer_wire = "secretflow"`: the peer is an unmodified SecretFlow party.
    pub peer_wire: Option<SfUbWire>,
    /// Warnings for the user.
    pub warnings: Vec<String>,
}

/// The SecretFlow side of an unbalanced run (`crate::secretflow_ub`): SecretFlow's link, its
/// ECDH-OPRF messages, its cache directory and its join output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SfUbWire {
    /// `link_config.id` (yacl's default `"root"`).
    pub link_id: String,
    /// This party's index in `link_config.parties`.
    pub self_rank: usize,
    /// `advanced_join_type`.
    pub join: crate::spec::JoinType,
    /// `left_side` is `ROLE_SERVER` (the default).
    pub left_is_server: bool,
    /// `output_attr.csv_null_rep` ("": SecretFlow's `NULL`).
    pub csv_null_rep: String,
    /// `link_config.enable_ssl`: TLS on SecretFlow's link.
    pub tls: Option<crate::spec::SfTls>,
    /// `link_config.brpc_channel_protocol`.
    pub channel: crate::spec::SfChannel,
}

impl UbReport {
    /// A report for `spec`'s run on `curve`, every count "not known yet" (-1).
    pub(crate) fn begin(spec: &UbSpec, curve: &str) -> Self {
        UbReport {
            version: env!("CARGO_PKG_VERSION").into(),
            party: spec.link.self_id(),
            role: spec.role.config_name().into(),
            mode: spec.mode.config_name().into(),
            curve: curve.into(),
            original_count: -1,
            original_key_count: -1,
            intersection_key_count: -1,
            intersection_count: -1,
            ..UbReport::default()
        }
    }

    /// The wall time since `start` and the peak memory, then the report file if `spec` names
    /// one.
    pub(crate) fn finish(
        mut self,
        spec: &UbSpec,
        start: std::time::Instant,
    ) -> Result<Self, UbError> {
        self.total_s = start.elapsed().as_secs_f64();
        self.peak_rss_bytes = crate::pipeline::report::peak_rss_bytes();
        if let Some(p) = &spec.report {
            crate::pipeline::report::write_json(p, &self)?;
        }
        Ok(self)
    }
}

/// Largest client cache accepted by default: 16 GiB (2^30 server items at 16 bytes).
pub const DEFAULT_MAX_CACHE_BYTES: u64 = 16 << 30;

/// What can stop an unbalanced-PSI run.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum UbError {
    /// The input, output, config or link, as in a balanced run.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A cache file is missing, damaged, from another version, or made under another key.
    #[error("{path}: {problem}; {fix}")]
    Cache {
        /// The cache file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
        /// How to fix it.
        fix: &'static str,
    },
    /// The key file is unusable (permissions, size, missing).
    #[error("{path}: {problem}")]
    KeyFile {
        /// The key file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// The server's key has evaluated as many client items as its cap allows ([`budget`]).
    #[error(
        "refusing the client's query of {asked} items: the server's key has already evaluated \
         {used} client items and {field} allows {cap} (count file: {count_file}); make a new key \
         and cache (docs/config.md, key rotation) or raise {field}"
    )]
    QueryCap {
        /// The config field that sets the cap.
        field: &'static str,
        /// The cap.
        cap: u64,
        /// Items evaluated under this key before this query.
        used: u64,
        /// Items this query announced.
        asked: u64,
        /// Where the count is kept.
        count_file: String,
    },
    /// The server's input no longer holds a key that its cache holds.
    #[error(
        "{path}: the input changed since its cache was generated ({problem}); run \
         MODE_OFFLINE_GEN_CACHE (and the transfer) again"
    )]
    InputChanged {
        /// The input.
        path: PathBuf,
        /// What differs.
        problem: String,
    },
}

impl crate::session::SessionError for UbError {
    fn is_link_failure(&self) -> bool {
        matches!(self, UbError::Data(e) if crate::session::SessionError::is_link_failure(e))
    }
}

impl From<ProtocolError> for UbError {
    fn from(e: ProtocolError) -> Self {
        UbError::Data(DataError::Protocol(e))
    }
}

impl From<LinkError> for UbError {
    fn from(e: LinkError) -> Self {
        UbError::Data(DataError::Link(e))
    }
}

impl From<ConfigError> for UbError {
    fn from(e: ConfigError) -> Self {
        UbError::Data(DataError::Config(e))
    }
}

impl From<CryptoError> for UbError {
    fn from(e: CryptoError) -> Self {
        UbError::Data(DataError::Protocol(ProtocolError::Crypto(e)))
    }
}

impl UbError {
    /// Who must act: a cache, key or input of the user's for the unbalanced-PSI errors, else as
    /// [`DataError::fault`].
    pub fn fault(&self) -> crate::Fault {
        match self {
            UbError::Data(d) => d.fault(),
            UbError::Cache { .. } | UbError::KeyFile { .. } | UbError::InputChanged { .. } => {
                crate::Fault::Input
            }
            // The server's own limit: rotating the key or raising the cap is its user's call.
            UbError::QueryCap { .. } => crate::Fault::Config,
        }
    }

    /// Whether the user's config, files or input are at fault (exit code 2).
    pub fn is_user_error(&self) -> bool {
        self.fault().exit_code() == 2
    }
}

/// Time and traffic of one phase.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct UbPhase {
    /// Wall seconds.
    pub seconds: f64,
    /// Bytes sent to the peer (framing included; 0 without a link).
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
}

/// What an unbalanced-PSI run did (printed as JSON, and written to the report path).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct UbReport {
    /// blindjoin version.
    pub version: String,
    /// This party's id (empty in gen-cache mode).
    pub party: String,
    /// `ROLE_SERVER` / `ROLE_CLIENT`.
    pub role: String,
    /// `MODE_...`.
    pub mode: String,
    /// The OPRF group.
    pub curve: String,
    /// Rows in this party's input (-1 when no input was read).
    pub original_count: i64,
    /// Unique keys in it (-1 when no input was read).
    pub original_key_count: i64,
    /// Values in the cache (the server's unique keys).
    pub cache_count: u64,
    /// Bytes per cache value (ℓ).
    pub cache_value_bytes: u64,
    /// The client's unique keys (online; known to both parties).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key_count: Option<u64>,
    /// Server: the client items its key has evaluated so far, this query included, against
    /// the cap `blindjoin.max_query_items` ([`budget`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_query_items: Option<u64>,
    /// Keys of the intersection this party learned (at most the threshold in threshold mode;
    /// -1 when it learns none).
    pub intersection_key_count: i64,
    /// Threshold mode: |X ∩ Y| in unique keys, before the threshold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_intersection_key_count: Option<u64>,
    /// Rows of this party's output (-1 when it writes none).
    pub intersection_count: i64,
    /// The output file.
    pub output_path: Option<String>,
    /// Generating the cache (server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gen_cache: Option<UbPhase>,
    /// Transferring it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer_cache: Option<UbPhase>,
    /// The online query, from the hello to the result (protocol only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub online: Option<UbPhase>,
    /// Client: reading its input and checking the cache before the online query. The server
    /// reads nothing before its query (its table, with `server_get_result`, streams by after
    /// it to write the matched rows), so it reports none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub online_prepare_s: Option<f64>,
    /// Wall time of the whole run.
    pub total_s: f64,
    /// Peak resident memory (Linux; 0 elsewhere).
    pub peak_rss_bytes: u64,
}
