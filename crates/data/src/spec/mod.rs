//! [`RunSpec`]: one party's fully validated run, whatever it was written in (SecretFlow v2 JSON,
//! our flags, or the Python API).

use serde::{Deserialize, Serialize};

mod multi_party;
pub use multi_party::{NPartyProtocol, NPartySpec, ThreePartySpec};

use blindjoin_link::LinkShape;
use blindjoin_link::TlsConfig;
use blindjoin_protocols::{Protocol, ProtocolChoice, Reveal, Role};
use std::path::PathBuf;
use std::time::Duration;

/// Default connect deadline: the peer may start up to a minute later.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default receive timeout: long, because a party may compute for many minutes between messages
/// on a 10M-row input (SecretFlow's 30 s default kills such runs).
pub const DEFAULT_RECV_TIMEOUT: Duration = Duration::from_secs(3600);

/// Who is who on the network.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Parties {
    /// This party's id.
    pub self_id: String,
    /// This party's `HOST:PORT`.
    pub self_addr: String,
    /// The peer's id.
    pub peer_id: String,
    /// The peer's `HOST:PORT`.
    pub peer_addr: String,
}

/// How a run with one peer and a single connection (unbalanced PSI, labeled PSI) reaches it;
/// `parties` is `None` for a run that talks to no one (generating a cache, `save_db_only`).
#[derive(Clone, Debug)]
pub struct PeerLink {
    /// Network identities.
    pub parties: Option<Parties>,
    /// How long to wait for the peer to connect.
    pub connect_timeout: Duration,
    /// How long to wait for one message.
    pub recv_timeout: Duration,
    /// How long the peer may be silent.
    pub silence_timeout: Duration,
    /// Mutual TLS.
    pub tls: Option<TlsConfig>,
    /// Simulated WAN (bandwidth, latency) on this party's receive side, for benchmarks; only
    /// `blindjoin run --bandwidth/--latency` sets it (the config has no such field).
    pub shape: Option<LinkShape>,
}

impl PeerLink {
    /// This party's id, or "" for a run without a peer.
    pub fn self_id(&self) -> String {
        self.parties
            .as_ref()
            .map(|p| p.self_id.clone())
            .unwrap_or_default()
    }

    /// This party's id, or "" for a run without a peer, borrowed.
    pub fn party(&self) -> &str {
        self.parties.as_ref().map_or("", |p| p.self_id.as_str())
    }

    /// The settings `blindjoin run`'s link flags override: the three timeouts, the shape and
    /// the TLS settings.
    pub(crate) fn settings_mut(&mut self) -> LinkSettings<'_> {
        LinkSettings {
            connect_timeout: &mut self.connect_timeout,
            recv_timeout: &mut self.recv_timeout,
            silence_timeout: &mut self.silence_timeout,
            shape: &mut self.shape,
            tls: vec![&mut self.tls],
        }
    }

    /// The TCP link's options, for a run with a peer.
    pub fn tcp_options(&self) -> Option<blindjoin_link::TcpOptions> {
        let p = self.parties.as_ref()?;
        Some(blindjoin_link::TcpOptions {
            self_id: p.self_id.clone(),
            self_addr: p.self_addr.clone(),
            peer_id: p.peer_id.clone(),
            peer_addr: p.peer_addr.clone(),
            connect_timeout: self.connect_timeout,
            recv_timeout: self.recv_timeout,
            silence_timeout: self.silence_timeout,
            tls: self.tls.clone(),
            shape: self.shape,
        })
    }
}

/// Everything one party needs to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSpec {
    /// Network identities and addresses.
    pub parties: Parties,
    /// The protocol, with its curve (ECDH) or mode (RR22).
    pub protocol: ProtocolChoice,
    /// Items per hash bucket (0: one bucket). See [`crate::pipeline::bucket`].
    pub bucket_size: u64,
    /// This party's role.
    pub role: Role,
    /// Whether the sender also receives the result.
    pub broadcast_result: bool,
    /// Input CSV.
    pub input: PathBuf,
    /// Output CSV (required when this party learns the result).
    pub output: Option<PathBuf>,
    /// Key column names in this party's file.
    pub keys: Vec<String>,
    /// Sort the output by key so both parties' rows line up (default true).
    pub align: bool,
    /// Where to write the JSON report (default: `<output>.report.json`, or none).
    pub report: Option<PathBuf>,
    /// Items per protocol message.
    pub batch_size: usize,
    /// A file with this party's 32-byte secret key (random per run otherwise).
    pub secret_key_path: Option<PathBuf>,
    /// How long to wait for the peer to connect.
    pub connect_timeout: Duration,
    /// How long to wait for any one message.
    pub recv_timeout: Duration,
    /// How long the peer may be completely silent (no data, no heartbeat) before it counts as
    /// dead; see [`blindjoin_link::heartbeat`].
    pub silence_timeout: Duration,
    /// Mutual TLS on the link (`link_config.enable_ssl`); `None` for plain TCP.
    pub tls: Option<TlsConfig>,
    /// A simulated WAN on this party's receive side, for benchmarks (`--bandwidth`,
    /// `--latency`); `None` normally.
    pub link_shape: Option<LinkShape>,
    /// The join written to the output; see [`crate::pipeline::join`].
    pub join: JoinSpec,
    /// Partitions run at once, each on its own thread and connection (`blindjoin.workers`,
    /// `--workers`); `None`: [`crate::pipeline::partition::default_workers`]. The run uses
    /// the smaller of the two parties' counts.
    pub workers: Option<usize>,
    /// The ports the workers listen on when this party listens (`blindjoin.worker_ports`,
    /// `--worker-ports A-B`); `None`: the main link's port + 1, + 2, ….
    pub worker_ports: Option<(u16, u16)>,
    /// Whether to spill the input to disk (bounded memory for large tables).
    pub spill: SpillMode,
    /// Where spill shards and sorted runs go (default: the system's temporary directory).
    pub spill_dir: Option<PathBuf>,
    /// `recovery_config.folder` when `enabled`: checkpoint every bucket there and resume from
    /// it (see [`crate::pipeline::recovery`]). The input is then always spilled, into this folder.
    pub recovery: Option<PathBuf>,
    /// What the run reveals: the intersection (default), only its size
    /// (`blindjoin.cardinality_only`), or at most `intersection_threshold` of its keys. The last
    /// two need `PROTOCOL_ECDH` and an inner join.
    pub reveal: Reveal,
    /// `count_path`: where a party that learns the intersection's size writes
    /// `real_count,final_count` (the size, and the keys revealed).
    pub count_path: Option<PathBuf>,
    /// `blindjoin.min_intersection`: first learn only the intersection's size (an ECDH
    /// cardinality pass, both parties learn it) and stop, revealing nothing more, when it is
    /// below this.
    pub min_intersection: Option<u64>,
    /// The input file's format (`input_config.type`).
    pub input_format: TableFormat,
    /// The output file's format (`output_config.type`).
    pub output_format: TableFormat,
    /// Non-fatal notes from config parsing, printed before the run.
    pub warnings: Vec<String>,
    /// `blindjoin.peer_wire = "secretflow"`: the peer is an unmodified SecretFlow party, met on
    /// SecretFlow's link and protocol ([`crate::secretflow_wire`]); `None`: our own wire.
    #[serde(default)]
    pub peer_wire: Option<SecretflowWire>,
}

/// What a run against a SecretFlow party needs beyond the rest of the spec: its link's names
/// and the config values exactly as the launch config gives them, because SecretFlow's config
/// check compares the serialized `PsiConfig` (an absent field is not its default).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SecretflowWire {
    /// `link_config.id` (yacl's default `"root"`): the prefix of every message key.
    pub link_id: String,
    /// This party's index in `link_config.parties`: its rank on the link.
    pub self_rank: usize,
    /// The group (`ecdh_config.curve`, told apart from the 25519 variants).
    pub curve: blindjoin_crypto::secretflow::SfCurve,
    /// `ecdh_config.batch_size` as given (0: absent).
    pub ecdh_batch_size: u64,
    /// `kkrt_config.bucket_size` as given (0: absent).
    pub kkrt_bucket_size: u64,
    /// `rr22_config.bucket_size` as given (0: absent).
    pub rr22_bucket_size: u64,
    /// `rr22_config.low_comm_mode`.
    pub rr22_low_comm: bool,
    /// `advanced_join_type` as `psi.v2` numbers it (0: absent).
    pub join_type: u64,
    /// `left_side` as a `psi.v2.Role` number (0: absent).
    pub left_side: u64,
    /// `output_attr.csv_null_rep` as given ("": absent).
    pub csv_null_rep: String,
    /// `input_attr.keys_unique`: the input is streamed in file order (no sort), and the output
    /// sorted by every column, as SecretFlow does.
    pub keys_unique: bool,
    /// `link_config.enable_ssl`: TLS on SecretFlow's link.
    pub tls: Option<SfTls>,
    /// `link_config.brpc_channel_protocol`.
    #[serde(default)]
    pub channel: SfChannel,
}

/// `link_config.brpc_channel_protocol` on SecretFlow's link
/// ([`blindjoin_link::secretflow::ChannelProtocol`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SfChannel {
    /// `baidu_std` (SecretFlow's default).
    #[default]
    BaiduStd,
    /// `h2:grpc`.
    H2Grpc,
}

impl SfChannel {
    /// The link's form.
    pub fn to_link(self) -> blindjoin_link::secretflow::ChannelProtocol {
        match self {
            SfChannel::BaiduStd => blindjoin_link::secretflow::ChannelProtocol::BaiduStd,
            SfChannel::H2Grpc => blindjoin_link::secretflow::ChannelProtocol::H2Grpc,
        }
    }
}

/// `link_config.enable_ssl` with `server_ssl_opts` / `client_ssl_opts` on SecretFlow's link
/// (brpc's TLS, [`blindjoin_link::secretflow::TlsOptions`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SfTls {
    /// What this party's server presents and how it checks the peer's client.
    pub server: SfSsl,
    /// What this party presents when it dials the peer, and how it checks the peer's server.
    pub client: SfSsl,
}

/// One of yacl's `SSLOptionsProto`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SfSsl {
    /// `certificate_path`.
    pub certificate_path: Option<PathBuf>,
    /// `private_key_path`.
    pub private_key_path: Option<PathBuf>,
    /// `verify_depth` above 0: the peer's chain must lead to `ca_file_path`.
    pub verify: bool,
    /// `ca_file_path`.
    pub ca_file_path: Option<PathBuf>,
}

impl SfTls {
    /// The link's form.
    pub fn to_link(&self) -> blindjoin_link::secretflow::TlsOptions {
        let one = |s: &SfSsl| blindjoin_link::secretflow::SslOptions {
            certificate_path: s.certificate_path.clone(),
            private_key_path: s.private_key_path.clone(),
            verify: s.verify,
            ca_file_path: s.ca_file_path.clone(),
        };
        blindjoin_link::secretflow::TlsOptions {
            server_ssl_opts: one(&self.server),
            client_ssl_opts: one(&self.client),
        }
    }
}

/// A table file's format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TableFormat {
    /// CSV (RFC 4180), `IO_TYPE_FILE_CSV`.
    #[default]
    Csv,
    /// Apache Parquet, `IO_TYPE_FILE_PARQUET`.
    Parquet,
}

impl TableFormat {
    /// The format a file name suggests: Parquet for `.parquet`/`.pq`, CSV otherwise.
    pub fn from_path(path: &std::path::Path) -> TableFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("parquet") || e.eq_ignore_ascii_case("pq") => {
                TableFormat::Parquet
            }
            _ => TableFormat::Csv,
        }
    }
}

/// Whether a run holds its table in memory or spills it into hash shards on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpillMode {
    /// Spill inputs larger than [`crate::AUTO_SPILL_BYTES`].
    #[default]
    Auto,
    /// Always spill.
    Always,
    /// Never spill (memory grows with the table).
    Never,
}

impl SpillMode {
    /// Parses `auto`, `always`/`on`, `never`/`off`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "auto" => SpillMode::Auto,
            "always" | "on" => SpillMode::Always,
            "never" | "off" => SpillMode::Never,
            _ => return None,
        })
    }
}

/// How the intersection is joined back onto the rows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinSpec {
    /// `advanced_join_type`.
    pub join: JoinType,
    /// `left_side`: the role whose rows are the join's left side (default the receiver).
    pub left_side: Role,
    /// `output_attr.csv_null_rep`: the text of every column of a padding row (default `NULL`).
    pub null_rep: String,
    /// `check_hash_digest` (SecretFlow's meaning): before the protocol, test privately whether
    /// the two key sets are equal; if they are, both skip the protocol and every key matches.
    pub check_hash_digest: bool,
    /// `blindjoin.check_intersection_digest`: after the run, compare a keyed digest of the
    /// intersection with the peer's and write no output if they differ.
    pub check_intersection_digest: bool,
}

impl Default for JoinSpec {
    fn default() -> Self {
        Self {
            join: JoinType::Inner,
            left_side: Role::Receiver,
            null_rep: "NULL".into(),
            check_hash_digest: false,
            check_intersection_digest: false,
        }
    }
}

impl RunSpec {
    /// A run of `protocol` between `parties` on `input`'s `keys`, with every other setting at
    /// its default (as a config that names only these would have it): no output, aligned,
    /// buckets of [`crate::DEFAULT_BUCKET_SIZE`], no broadcast, inner join, default timeouts,
    /// plain TCP, spill `auto`, no recovery. The CLI's flags and the demo start from here.
    pub fn new(
        parties: Parties,
        protocol: ProtocolChoice,
        role: Role,
        input: PathBuf,
        keys: Vec<String>,
    ) -> Self {
        RunSpec {
            parties,
            protocol,
            bucket_size: crate::DEFAULT_BUCKET_SIZE,
            role,
            broadcast_result: false,
            input_format: TableFormat::from_path(&input),
            input,
            output: None,
            keys,
            align: true,
            report: None,
            batch_size: 4096,
            secret_key_path: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            recv_timeout: DEFAULT_RECV_TIMEOUT,
            silence_timeout: blindjoin_link::DEFAULT_SILENCE_TIMEOUT,
            tls: None,
            link_shape: None,
            join: JoinSpec::default(),
            workers: None,
            worker_ports: None,
            spill: SpillMode::Auto,
            spill_dir: None,
            recovery: None,
            reveal: Reveal::Intersection,
            count_path: None,
            min_intersection: None,
            output_format: TableFormat::Csv,
            warnings: Vec::new(),
            peer_wire: None,
        }
    }

    /// The same run writing its result to `output` (its format from the file name).
    pub fn with_output(mut self, output: PathBuf) -> Self {
        self.output_format = TableFormat::from_path(&output);
        self.output = Some(output);
        self
    }

    /// Whether this party learns the intersection (its rows), and so writes an output.
    pub fn learns_result(&self) -> bool {
        self.reveal != Reveal::Cardinality && self.learns_count_or_result()
    }

    /// Whether this party learns the intersection's size, in the modes that reveal it apart.
    pub fn learns_count(&self) -> bool {
        self.reveal != Reveal::Intersection && self.learns_count_or_result()
    }

    fn learns_count_or_result(&self) -> bool {
        self.role == Role::Receiver || self.broadcast_result
    }

    /// Checks that the reveal mode fits the protocol and the join; `field` names the setting
    /// that chose the mode in errors.
    ///
    /// # Errors
    /// A message naming what to change.
    pub fn check_reveal(&self) -> Result<(), String> {
        if self.reveal == Reveal::Intersection {
            return Ok(());
        }
        if self.protocol.protocol() != Protocol::Ecdh {
            return Err(format!(
                "needs PROTOCOL_ECDH (got {}): only the ECDH protocol can hide which items match",
                self.protocol.protocol()
            ));
        }
        if self.join.join != JoinType::Inner {
            return Err("needs an inner join (advanced_join_type unset or INNER_JOIN)".into());
        }
        if self.join.check_hash_digest {
            // Equal sets would skip the protocol and reveal the whole intersection.
            return Err(
                "cannot be combined with check_hash_digest, which on equal key sets \
                        reveals the whole intersection"
                    .into(),
            );
        }
        Ok(())
    }

    /// Adds the warnings a run's settings call for, whatever the run was written in: RR22's
    /// malicious mode protects the receiver's output only; the sender's (with
    /// `broadcast_result`, a join that pads for the receiver's rows, or
    /// `check_intersection_digest`) is whatever positions the receiver sends, checked only for
    /// range, order and count.
    pub fn note_trust_boundary(&mut self) {
        let malicious = matches!(
            self.protocol,
            ProtocolChoice::Rr22 {
                mode: blindjoin_protocols::rr22::Rr22Mode::Malicious
            }
        );
        if malicious
            && (self.broadcast_result
                || self.join.join != crate::join::JoinType::Inner
                || self.join.check_intersection_digest)
        {
            self.warnings.push(
                "RR22's malicious mode protects the receiver's result only: the sender's output \
                 (broadcast_result, joins, check_intersection_digest) is whatever positions the receiver \
                 sends back, checked for range, order and count but not for truth (see \
                 docs/protocols.md)"
                    .into(),
            );
        }
    }

    /// The report path in force: the configured one, else beside the output.
    pub fn report_path(&self) -> Option<PathBuf> {
        self.report.clone().or_else(|| {
            self.output.as_ref().map(|o| {
                let mut s = o.clone().into_os_string();
                s.push(".report.json");
                PathBuf::from(s)
            })
        })
    }
}

/// `advanced_join_type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JoinType {
    /// Matched pairs only (also `ADVANCED_JOIN_TYPE_UNSPECIFIED`).
    #[default]
    Inner,
    /// Matched pairs, then the left side's unmatched rows.
    Left,
    /// Matched pairs, then the right side's unmatched rows.
    Right,
    /// Matched pairs, then both sides' unmatched rows.
    Full,
    /// Both sides' unmatched rows only.
    Difference,
}

impl JoinType {
    /// Every join type, for help texts and tests.
    pub const ALL: [JoinType; 5] = [
        JoinType::Inner,
        JoinType::Left,
        JoinType::Right,
        JoinType::Full,
        JoinType::Difference,
    ];

    /// SecretFlow's spelling.
    pub fn config_name(self) -> &'static str {
        match self {
            JoinType::Inner => "ADVANCED_JOIN_TYPE_INNER_JOIN",
            JoinType::Left => "ADVANCED_JOIN_TYPE_LEFT_JOIN",
            JoinType::Right => "ADVANCED_JOIN_TYPE_RIGHT_JOIN",
            JoinType::Full => "ADVANCED_JOIN_TYPE_FULL_JOIN",
            JoinType::Difference => "ADVANCED_JOIN_TYPE_DIFFERENCE",
        }
    }

    /// The join's code in the run terms (its place in [`JoinType::ALL`]).
    pub(crate) fn wire_code(self) -> u8 {
        JoinType::ALL
            .iter()
            .position(|&j| j == self)
            .map_or(u8::MAX, |i| i as u8)
    }

    /// The join [`JoinType::wire_code`] names.
    pub(crate) fn from_wire_code(code: u8) -> Option<Self> {
        JoinType::ALL.get(usize::from(code)).copied()
    }

    /// Parses SecretFlow's names (`ADVANCED_JOIN_TYPE_UNSPECIFIED` is inner) and the short
    /// forms `inner`, `left`, `right`, `full`, `difference`.
    pub fn parse(s: &str) -> Option<Self> {
        let t = s.trim().to_ascii_uppercase();
        let short = t.strip_prefix("ADVANCED_JOIN_TYPE_").unwrap_or(&t);
        Some(match short.strip_suffix("_JOIN").unwrap_or(short) {
            "UNSPECIFIED" | "INNER" => JoinType::Inner,
            "LEFT" => JoinType::Left,
            "RIGHT" => JoinType::Right,
            "FULL" => JoinType::Full,
            "DIFFERENCE" => JoinType::Difference,
            _ => return None,
        })
    }

    pub(crate) fn has_pairs(self) -> bool {
        self != JoinType::Difference
    }

    pub(crate) fn keeps_left_unmatched(self) -> bool {
        matches!(self, JoinType::Left | JoinType::Full | JoinType::Difference)
    }

    pub(crate) fn keeps_right_unmatched(self) -> bool {
        matches!(
            self,
            JoinType::Right | JoinType::Full | JoinType::Difference
        )
    }
}

/// SecretFlow's default `bucket_size` for KKRT and RR22 (`kkrt_config` / `rr22_config`): 2^20.
pub const DEFAULT_BUCKET_SIZE: u64 = 1 << 20;

/// The link settings `blindjoin run`'s flags override (`--connect-timeout`, `--recv-timeout`,
/// `--peer-silence-timeout`, `--bandwidth/--latency`, `--tls-*`).
pub struct LinkSettings<'a> {
    /// How long to wait for the peer to connect.
    pub connect_timeout: &'a mut Duration,
    /// How long to wait for any one message.
    pub recv_timeout: &'a mut Duration,
    /// How long the peer may be silent before it counts as dead.
    pub silence_timeout: &'a mut Duration,
    /// A simulated WAN.
    pub shape: &'a mut Option<LinkShape>,
    /// The TLS settings (a mesh: where it listens and where it connects).
    pub tls: Vec<&'a mut Option<TlsConfig>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use blindjoin_protocols::rr22::Rr22Mode;

    fn spec(mode: Rr22Mode, broadcast: bool) -> RunSpec {
        let parties = Parties {
            self_id: "a".into(),
            self_addr: String::new(),
            peer_id: "b".into(),
            peer_addr: String::new(),
        };
        let mut s = RunSpec::new(
            parties,
            ProtocolChoice::Rr22 { mode },
            Role::Sender,
            "in.csv".into(),
            vec!["id".into()],
        );
        s.broadcast_result = broadcast;
        s.note_trust_boundary();
        s
    }

    #[test]
    fn malicious_mode_warns_when_the_sender_gets_an_output() {
        assert!(spec(Rr22Mode::Malicious, true).warnings[0].contains("malicious mode"));
        assert!(spec(Rr22Mode::Malicious, false).warnings.is_empty());
        assert!(spec(Rr22Mode::Fast, true).warnings.is_empty());
    }
}
