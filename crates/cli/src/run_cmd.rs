//! `blindjoin run`: one party, from a SecretFlow v2 config or from flags.

use crate::UserError;
use crate::progress::Bars;
use anyhow::{Context, Result};
use blindjoin_data::Rr22Mode;
use blindjoin_data::{
    Cancel, DEFAULT_BUCKET_SIZE, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RECV_TIMEOUT,
    DEFAULT_SILENCE_TIMEOUT, LinkShape, ParsedConfig, Parties, Protocol, Report, Reveal, Role,
    RunSpec, SpillMode, TableFormat, TlsConfig, parse_any_launch_config, parse_curve,
};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
#[command(after_long_help = crate::three_party::HELP)]
pub(crate) struct RunArgs {
    /// A SecretFlow PSI v2 launch config (JSON). Mutually exclusive with the run flags below.
    /// With three `link_config.parties` and protocol PROTOCOL_ECDH_3PC it runs three-party
    /// ECDH-PSI (see the end of `--help` for who learns what).
    /// The link flags (timeouts, `--bandwidth/--latency`, `--tls-*`) and `--report` override
    /// the config's settings, for every kind of config; the other run flags are refused with it
    /// (the config says those things).
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "role", "input", "output", "keys", "self_addr", "peer_addr", "self_id", "peer_id",
        "protocol", "curve", "rr22_mode", "bucket_size", "spill", "spill_dir", "recovery_dir",
        "cardinality_only", "intersection_threshold", "count_path", "min_intersection",
        "broadcast_result", "no_align", "batch_size", "secret_key",
    ])]
    pub(crate) config: Option<PathBuf>,
    /// This party's role.
    #[arg(long, value_enum)]
    role: Option<RoleArg>,
    /// This party's address, HOST:PORT (where it listens if its id sorts first).
    #[arg(long = "self", value_name = "HOST:PORT")]
    self_addr: Option<String>,
    /// The peer's address, HOST:PORT.
    #[arg(long = "peer", value_name = "HOST:PORT")]
    peer_addr: Option<String>,
    /// This party's id (default: its role, `receiver` or `sender`).
    #[arg(long)]
    self_id: Option<String>,
    /// The peer's id (default: the other role).
    #[arg(long)]
    peer_id: Option<String>,
    /// The protocol: rr22, kkrt or ecdh.
    #[arg(long, default_value = "ecdh")]
    protocol: String,
    /// The curve for ECDH: 25519, ristretto255, secp256k1, sm2, p256.
    #[arg(long, default_value = "25519")]
    curve: String,
    /// RR22's mode (both parties must agree).
    #[arg(long, value_enum, default_value_t = Rr22ModeArg::Fast)]
    rr22_mode: Rr22ModeArg,
    /// Rows per hash bucket: the protocol runs bucket by bucket (both parties must agree).
    #[arg(long, default_value_t = DEFAULT_BUCKET_SIZE)]
    bucket_size: u64,
    /// Spill the input to hash shards on disk so memory stays bounded: auto (inputs over
    /// 256 MiB), always or never.
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = parse_spill)]
    spill: SpillMode,
    /// Directory for spill shards and sorted runs (default: the system's temporary directory).
    #[arg(long, value_name = "DIR")]
    spill_dir: Option<PathBuf>,
    /// Checkpoint after every bucket into DIR; rerunning the same command on both sides after
    /// a crash resumes there (`recovery_config`). Both parties must use it.
    #[arg(long, value_name = "DIR")]
    recovery_dir: Option<PathBuf>,
    /// Learn only the size of the intersection, nothing else (ECDH, inner join; no output file).
    /// Both parties must use it.
    #[arg(long, conflicts_with = "intersection_threshold")]
    cardinality_only: bool,
    /// Reveal at most N keys of the intersection, chosen at random, and its size
    /// (SecretFlow's `intersection_threshold`; ECDH, inner join). Both parties must agree.
    #[arg(long, value_name = "N")]
    intersection_threshold: Option<u64>,
    /// Write `real_count,final_count` here in the cardinality and threshold modes.
    #[arg(long, value_name = "FILE")]
    count_path: Option<PathBuf>,
    /// Stop, revealing only the intersection's size (to both parties), when it has fewer than N
    /// keys; otherwise run as usual. Both parties must agree.
    #[arg(long, value_name = "N")]
    min_intersection: Option<u64>,
    /// Input table: CSV, or Parquet when the name ends in .parquet or .pq.
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Key column(s), comma-separated or repeated.
    #[arg(long, value_delimiter = ',')]
    keys: Vec<String>,
    /// Output file (this party's rows in the intersection): CSV, or Parquet when the name ends
    /// in .parquet or .pq.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Send the result to the sender too.
    #[arg(long)]
    broadcast_result: bool,
    /// Keep input order instead of sorting by key (the outputs then do not line up row by row).
    #[arg(long)]
    no_align: bool,
    /// Items per protocol message.
    #[arg(long, default_value_t = 4096)]
    batch_size: usize,
    /// A file holding this party's 32-byte secret key (random per run otherwise).
    #[arg(long, value_name = "FILE")]
    secret_key: Option<PathBuf>,
    /// Seconds to wait for the peer to connect.
    #[arg(long, value_name = "SECS")]
    pub(crate) connect_timeout: Option<f64>,
    /// Seconds to wait for any one message from the peer.
    #[arg(long, value_name = "SECS")]
    pub(crate) recv_timeout: Option<f64>,
    /// Seconds the peer may send nothing at all, not even a heartbeat, before this party stops
    /// with "peer silent" (a dead process or machine, or a network down). Default 20.
    #[arg(long, value_name = "SECS")]
    pub(crate) peer_silence_timeout: Option<f64>,
    /// Where to write the JSON report (default: OUTPUT.report.json). Also overrides the config's.
    #[arg(long, value_name = "FILE")]
    pub(crate) report: Option<PathBuf>,
    /// Benchmarks: simulate a WAN of this bandwidth on this party's receive side, e.g. 100mbit.
    #[arg(long, value_name = "RATE")]
    bandwidth: Option<String>,
    /// Benchmarks: add this one-way latency to every message received, e.g. 10ms.
    #[arg(long, value_name = "DELAY")]
    latency: Option<String>,
    /// Mutual TLS: this party's certificate chain (PEM). Needs --tls-key and --tls-ca; with
    /// --config it overrides link_config's TLS settings.
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// Mutual TLS: the private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_ca"])]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: the CA certificate(s) the peer's certificate must chain to (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// Unbalanced PSI server (`ub_psi_config`, with --config): the most client keys its key
    /// may evaluate over all online queries (`blindjoin.max_query_items`; default 1,000,000).
    #[arg(long, value_name = "N", requires = "config")]
    pub(crate) max_query_items: Option<u64>,
    /// No progress bars and no summary on stderr.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

/// `--rr22-mode`.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Rr22ModeArg {
    /// Semi-honest, GF(2^128) VOLE: the fastest.
    Fast,
    /// Semi-honest, subfield VOLE: about 40% less traffic, somewhat slower.
    LowComm,
    /// RS21 malicious-model outputs (see docs/protocols.md for what is still semi-honest).
    Malicious,
}

impl Rr22ModeArg {
    pub(crate) fn mode(self) -> Rr22Mode {
        match self {
            Rr22ModeArg::Fast => Rr22Mode::Fast,
            Rr22ModeArg::LowComm => Rr22Mode::LowComm,
            Rr22ModeArg::Malicious => Rr22Mode::Malicious,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum RoleArg {
    Receiver,
    Sender,
}

pub(crate) fn run(args: RunArgs) -> Result<()> {
    let Some(path) = &args.config else {
        let spec = spec_from_args(&args).context(UserError)?;
        return run_two_party(&args, spec);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the config file {}", path.display()))
        .context(UserError)?;
    let base = path.parent().map(PathBuf::from).unwrap_or_default();
    let mut parsed = parse_any_launch_config(&text, &path.display().to_string(), &base)
        .map_err(anyhow::Error::from)
        .context(UserError)?;
    if let Some(r) = &args.report {
        parsed.set_report(r.clone());
    }
    let link = LinkFlags::from_args(&args).context(UserError)?;
    if args.max_query_items.is_some() && !matches!(parsed, ParsedConfig::Unbalanced(_)) {
        return Err(anyhow::anyhow!(
            "--max-query-items applies to unbalanced PSI (a config with ub_psi_config) only"
        )
        .context(UserError));
    }
    match parsed {
        ParsedConfig::TwoParty(mut spec) => {
            link.apply(
                &mut spec.connect_timeout,
                &mut spec.recv_timeout,
                &mut spec.silence_timeout,
                &mut spec.link_shape,
                &mut [&mut spec.tls],
            );
            run_two_party(&args, *spec)
        }
        ParsedConfig::ThreeParty(mut t) => {
            let s = &mut t.spec;
            link.apply(
                &mut s.connect_timeout,
                &mut s.recv_timeout,
                &mut s.silence_timeout,
                &mut s.link_shape,
                &mut [&mut t.tls_server, &mut t.tls_client],
            );
            crate::three_party::run(&args, *t)
        }
        ParsedConfig::Unbalanced(mut u) => {
            crate::ub_cmd::apply_link_flags(&mut u, link).context(UserError)?;
            crate::ub_cmd::apply_max_query_items(&mut u, args.max_query_items)
                .context(UserError)?;
            crate::ub_cmd::run(*u, args.quiet)
        }
    }
}

fn run_two_party(args: &RunArgs, spec: RunSpec) -> Result<()> {
    for w in &spec.warnings {
        eprintln!("blindjoin: warning: {w}");
    }
    let bars = Bars::new(args.quiet);
    let cancel = cancel_on_signal();
    let result = blindjoin_data::run_with_cancel(&spec, &bars, &cancel);
    bars.finish();
    if result.is_err()
        && let Some(dir) = &spec.recovery
        && dir.join("checkpoint.json").exists()
    {
        eprintln!(
            "blindjoin: the checkpoint in {} is kept; rerun the same command on both sides to \
             resume",
            dir.display()
        );
    }
    let report = result?;
    if !args.quiet {
        eprintln!("{}", summary(&spec, &report));
    }
    if report.output_path.is_none()
        && let Some(stale) = spec.output.as_ref().filter(|p| p.exists())
    {
        eprintln!(
            "blindjoin: warning: {} is from an earlier run; this run wrote no output there",
            stale.display()
        );
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// The link flags that override a config's settings: `--connect-timeout`, `--recv-timeout`,
/// `--peer-silence-timeout`, `--bandwidth/--latency` and `--tls-cert/--tls-key/--tls-ca`.
pub(crate) struct LinkFlags {
    connect_timeout: Option<Duration>,
    recv_timeout: Option<Duration>,
    silence_timeout: Option<Duration>,
    shape: Option<LinkShape>,
    tls: Option<TlsConfig>,
}

impl LinkFlags {
    /// The flags given, checked (positive timeouts, a valid rate and delay).
    pub(crate) fn from_args(a: &RunArgs) -> Result<LinkFlags> {
        let opt = |v: Option<f64>, flag: &str| -> Result<Option<Duration>> {
            v.map(|s| secs(Some(s), Duration::ZERO, flag)).transpose()
        };
        Ok(LinkFlags {
            connect_timeout: opt(a.connect_timeout, "--connect-timeout")?,
            recv_timeout: opt(a.recv_timeout, "--recv-timeout")?,
            silence_timeout: opt(a.peer_silence_timeout, "--peer-silence-timeout")?,
            shape: shape_from_args(a)?,
            tls: tls_from_args(a),
        })
    }

    /// The names of the flags given, for a refusal.
    pub(crate) fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for (flag, present) in [
            ("--connect-timeout", self.connect_timeout.is_some()),
            ("--recv-timeout", self.recv_timeout.is_some()),
            ("--peer-silence-timeout", self.silence_timeout.is_some()),
            ("--bandwidth/--latency", self.shape.is_some()),
            ("--tls-cert/--tls-key/--tls-ca", self.tls.is_some()),
        ] {
            if present {
                v.push(flag);
            }
        }
        v
    }

    /// Overrides the timeouts, the link shaping and the TLS files the flags give; `tls` holds
    /// every place a config kind keeps its TLS files (a three-party party has two: where it
    /// listens and where it connects).
    pub(crate) fn apply(
        self,
        connect: &mut Duration,
        recv: &mut Duration,
        silence: &mut Duration,
        shape: &mut Option<LinkShape>,
        tls: &mut [&mut Option<TlsConfig>],
    ) {
        if let Some(t) = self.connect_timeout {
            *connect = t;
        }
        if let Some(t) = self.recv_timeout {
            *recv = t;
        }
        if let Some(t) = self.silence_timeout {
            *silence = t;
        }
        if self.shape.is_some() {
            *shape = self.shape;
        }
        if let Some(files) = self.tls {
            for slot in tls {
                **slot = Some(files.clone());
            }
        }
    }
}

/// What the peer is told when this party is interrupted.
const INTERRUPTED: &str = "the peer cancelled the run (Ctrl-C or SIGTERM)";
/// How long the run gets to tell the peer and stop before its connection is cut.
const CANCEL_GRACE: Duration = Duration::from_secs(3);

/// A cancel handle that Ctrl-C (SIGINT) and SIGTERM trigger: the run stops at its next wait,
/// tells the peer why, and writes no output. If it has not stopped within [`CANCEL_GRACE`] (busy
/// writing to a peer that stopped reading) the connection is cut; a second signal exits at once.
/// Without a handler (one could not be installed) the signal kills the process, as before: the
/// peer then sees the connection close.
pub(crate) fn cancel_on_signal() -> Cancel {
    let cancel = Cancel::new();
    let handle = cancel.clone();
    let installed = ctrlc::set_handler(move || {
        if handle.is_cancelled() {
            std::process::exit(130);
        }
        eprintln!("blindjoin: interrupted; stopping the run and telling the peer");
        handle.cancel(INTERRUPTED);
        let last_resort = handle.clone();
        std::thread::spawn(move || {
            std::thread::sleep(CANCEL_GRACE);
            last_resort.sever();
        });
    });
    if let Err(e) = installed {
        eprintln!("blindjoin: warning: cannot catch Ctrl-C ({e}); an interrupt will kill the run");
    }
    cancel
}

fn summary(spec: &RunSpec, r: &Report) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    let what = if let Some(c) = r.cardinality.filter(|_| r.intersection_count < 0) {
        format!("intersection size: {c} keys (cardinality only; no output written)")
    } else if r.intersection_count < 0 {
        "this party does not receive the result (broadcast_result is false); no output written"
            .to_string()
    } else {
        format!(
            "intersection: {} keys, {} of {} rows -> {}",
            r.intersection_key_count,
            r.intersection_count,
            r.original_count,
            r.output_path.as_deref().unwrap_or("-")
        ) + &match (r.cardinality, r.revealed_key_count) {
            (Some(c), Some(k)) => format!(" (revealed {k} of the {c} shared keys: threshold)"),
            _ => String::new(),
        }
    };
    let report = spec
        .report_path()
        .map(|p| format!("; report {}", p.display()))
        .unwrap_or_default();
    format!(
        "blindjoin: {what}; {:.2} s, sent {:.2} MB, received {:.2} MB{report}",
        r.stages.total_s,
        mb(r.bytes_sent),
        mb(r.bytes_received)
    )
}

pub(crate) fn secs(s: Option<f64>, default: Duration, flag: &str) -> Result<Duration> {
    match s {
        None => Ok(default),
        Some(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v)),
        Some(v) => anyhow::bail!("{flag} must be a positive number of seconds, got {v}"),
    }
}

/// `--bandwidth` / `--latency`.
pub(crate) fn shape_from_args(a: &RunArgs) -> Result<Option<LinkShape>> {
    LinkShape::parse(a.bandwidth.as_deref(), a.latency.as_deref()).map_err(|e| anyhow::anyhow!(e))
}

/// `--tls-cert/--tls-key/--tls-ca` (clap makes sure all three or none are given).
pub(crate) fn tls_from_args(a: &RunArgs) -> Option<TlsConfig> {
    Some(TlsConfig {
        cert_path: a.tls_cert.clone()?,
        key_path: a.tls_key.clone()?,
        ca_path: a.tls_ca.clone()?,
    })
}

/// A two-party run from flags (no `--config`).
fn spec_from_args(a: &RunArgs) -> Result<RunSpec> {
    let missing = |flag: &str| anyhow::anyhow!("{flag} is required (or give --config FILE)");
    let role = match a.role.ok_or_else(|| missing("--role"))? {
        RoleArg::Receiver => Role::Receiver,
        RoleArg::Sender => Role::Sender,
    };
    let (me, other) = match role {
        Role::Receiver => ("receiver", "sender"),
        Role::Sender => ("sender", "receiver"),
    };
    let protocol: Protocol = a.protocol.parse()?;
    if !protocol.is_supported() {
        anyhow::bail!(
            "--protocol {}: not supported yet; use rr22, kkrt or ecdh",
            a.protocol
        );
    }
    if a.bucket_size == 0 {
        anyhow::bail!("--bucket-size must be at least 1");
    }
    let (curve, variant, bucket_size) = match protocol {
        Protocol::Ecdh => (Some(parse_curve(&a.curve)?), String::new(), a.bucket_size),
        Protocol::Kkrt => (None, String::new(), a.bucket_size),
        _ => (
            None,
            a.rr22_mode.mode().variant().to_string(),
            a.bucket_size,
        ),
    };
    if a.keys.is_empty() {
        return Err(missing("--keys"));
    }
    let reveal = match (a.cardinality_only, a.intersection_threshold) {
        (true, _) => Reveal::Cardinality,
        (false, Some(t)) if t > 0 => Reveal::UpTo(t),
        _ => Reveal::Intersection,
    };
    let learns = role == Role::Receiver || a.broadcast_result;
    if learns && reveal != Reveal::Cardinality && a.output.is_none() {
        return Err(missing("--output (this party receives the intersection)"));
    }
    Ok(RunSpec {
        parties: Parties {
            self_id: a.self_id.clone().unwrap_or_else(|| me.to_string()),
            self_addr: a.self_addr.clone().ok_or_else(|| missing("--self"))?,
            peer_id: a.peer_id.clone().unwrap_or_else(|| other.to_string()),
            peer_addr: a.peer_addr.clone().ok_or_else(|| missing("--peer"))?,
        },
        protocol,
        curve,
        variant,
        bucket_size,
        role,
        broadcast_result: a.broadcast_result,
        input: a.input.clone().ok_or_else(|| missing("--input"))?,
        output: a.output.clone(),
        keys: a.keys.clone(),
        align: !a.no_align,
        report: a.report.clone(),
        batch_size: a.batch_size,
        secret_key_path: a.secret_key.clone(),
        connect_timeout: secs(
            a.connect_timeout,
            DEFAULT_CONNECT_TIMEOUT,
            "--connect-timeout",
        )?,
        recv_timeout: secs(a.recv_timeout, DEFAULT_RECV_TIMEOUT, "--recv-timeout")?,
        silence_timeout: secs(
            a.peer_silence_timeout,
            DEFAULT_SILENCE_TIMEOUT,
            "--peer-silence-timeout",
        )?,
        join: Default::default(),
        tls: tls_from_args(a),
        link_shape: shape_from_args(a)?,
        spill: a.spill,
        spill_dir: a.spill_dir.clone(),
        recovery: a.recovery_dir.clone(),
        reveal,
        count_path: a.count_path.clone(),
        min_intersection: a.min_intersection.filter(|&m| m > 0),
        input_format: a
            .input
            .as_deref()
            .map(TableFormat::from_path)
            .unwrap_or_default(),
        output_format: a
            .output
            .as_deref()
            .map(TableFormat::from_path)
            .unwrap_or_default(),
        warnings: Vec::new(),
    })
    .and_then(|spec| {
        let flag = if a.cardinality_only {
            "--cardinality-only"
        } else {
            "--intersection-threshold"
        };
        spec.check_reveal()
            .map_err(|why| anyhow::anyhow!("{flag} {why}"))?;
        Ok(spec)
    })
}

fn parse_spill(s: &str) -> Result<SpillMode, String> {
    SpillMode::parse(s).ok_or_else(|| format!("{s:?}: use auto, always or never"))
}
