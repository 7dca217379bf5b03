//! `blindjoin run`: one party, from a SecretFlow v2 config or from flags.

use crate::UserError;
use crate::progress::Bars;
use anyhow::{Context, Result};
use blindjoin_data::Rr22Mode;
use blindjoin_data::log::{self, Level};
use blindjoin_data::ops::Ops;
use blindjoin_data::{
    Cancel, DEFAULT_BUCKET_SIZE, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RECV_TIMEOUT,
    DEFAULT_SILENCE_TIMEOUT, Envelope, LinkOverrides, LinkShape, Parties, Plan, Reveal, Role,
    RunSpec, SpillMode, TlsConfig, protocol_choice,
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
    /// A Kuscia task file (what Kuscia gives SecretFlow's launcher as `--kuscia`): runs this
    /// party's launch config from its `task_input_config`, with the parties of
    /// `task_cluster_def` and the port in `allocated_ports` as the link. Takes the same
    /// overriding flags as --config.
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "config", "role", "input", "output", "keys", "self_addr", "peer_addr", "self_id",
        "peer_id", "protocol", "curve", "rr22_mode", "bucket_size", "spill", "spill_dir",
        "recovery_dir", "cardinality_only", "intersection_threshold", "count_path",
        "min_intersection", "broadcast_result", "no_align", "batch_size", "secret_key",
    ])]
    pub(crate) kuscia: Option<PathBuf>,
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
    /// The protocol: rr22, kkrt or ecdh. Default: rr22 (fast mode), the one we recommend (as
    /// `demo` uses): about 25 times faster than ECDH on 2M x 2M rows. ECDH when a flag only ECDH
    /// has is given (--curve, --cardinality-only, --intersection-threshold, --secret-key).
    #[arg(long)]
    protocol: Option<String>,
    /// The curve for ECDH: 25519 (default), ristretto255, secp256k1, sm2, p256. Implies
    /// `--protocol ecdh` when --protocol is not given.
    #[arg(long)]
    curve: Option<String>,
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
    /// Run the buckets in W partitions, each on its own thread and connection (the run uses
    /// the smaller of the two parties' W; `blindjoin.workers`). Default: one per core while
    /// each has 1 GiB of available memory and a port in --worker-ports (1 without a range).
    /// Also applies with --config.
    #[arg(long, value_name = "W", value_parser = clap::value_parser!(u16).range(1..=1024))]
    workers: Option<u16>,
    /// The ports the workers listen on when this party listens, FIRST-LAST (a firewall
    /// between the parties must let them through; `blindjoin.worker_ports`). Default: the
    /// ports after --self's. Also applies with --config.
    #[arg(long, value_name = "A-B")]
    worker_ports: Option<String>,
    /// Which wire the peer speaks: `blindjoin` (default) or `secretflow` (an unmodified
    /// SecretFlow party; `blindjoin.peer_wire`, docs/config.md "Running against SecretFlow").
    /// With --config only.
    #[arg(long, value_name = "WIRE", value_parser = ["blindjoin", "secretflow"])]
    peer_wire: Option<String>,
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
    /// Unbalanced PSI server or labeled PSI sender (with --config): the most client keys its
    /// key may evaluate over all online queries (`blindjoin.max_query_items`; default
    /// 1,000,000).
    #[arg(long, value_name = "N", requires = "config")]
    pub(crate) max_query_items: Option<u64>,
    /// No progress bars and no summary on stderr (the level is at most `warn`).
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// Threads for the protocol's parallel work (default: `blindjoin.threads` in the config,
    /// else the RAYON_NUM_THREADS environment variable, else one per logical CPU). Overrides
    /// the config's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) threads: Option<u64>,
    /// What to print on stderr: trace, debug, info (default), warn, err, critical or off
    /// (SecretFlow's `debug_options.logging_level`; see docs/config.md). Overrides the config's.
    #[arg(long, value_name = "LEVEL", value_parser = parse_level)]
    pub(crate) log_level: Option<Level>,
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
    // The level first: the config's own warnings are printed at `warn`.
    if let Some(level) = args.log_level {
        log::set_level(level);
    }
    if args.kuscia.is_some() && args.peer_wire.as_deref() == Some("secretflow") {
        return Err(anyhow::anyhow!(
            "--peer-wire secretflow with --kuscia: {}",
            blindjoin_data::KUSCIA_SECRETFLOW_WIRE
        ))
        .context(UserError);
    }
    if args.config.is_none()
        && args.kuscia.is_none()
        && args.peer_wire.as_deref() == Some("secretflow")
    {
        return Err(anyhow::anyhow!(
            "--peer-wire secretflow needs --config with SecretFlow's launch config (the peer \
             checks the whole psi_config); see docs/config.md, \"Running against SecretFlow\""
        ))
        .context(UserError);
    }
    let envelope = match (&args.config, &args.kuscia) {
        (Some(path), _) => Some(read_envelope(path, false)?),
        (None, Some(path)) => Some(read_envelope(path, true)?),
        (None, None) => None,
    };
    let (plan, mut ops) = match envelope {
        None => (
            Plan::TwoParty(Box::new(spec_from_args(&args).context(UserError)?)),
            Ops::default(),
        ),
        Some(mut env) => {
            if let Some(w) = &args.peer_wire {
                env.set_extension("peer_wire", w.clone().into())
                    .context(UserError)?;
            }
            let mut plan = Plan::from_envelope(&env).context(UserError)?;
            let ops = Ops::of(&env).context(UserError)?;
            if let Some(r) = &args.report {
                plan.set_report(r.clone());
            }
            plan.override_link(link_overrides(&args).context(UserError)?)
                .context(UserError)?;
            if let Some(n) = args.max_query_items {
                plan.set_max_query_items(n).context(UserError)?;
            }
            plan.set_workers(args.workers.map(usize::from), worker_ports(&args)?)
                .context(UserError)?;
            (plan, ops)
        }
    };
    if let Some(n) = args.threads {
        ops.threads = Some(n as usize);
    }
    // The flag wins over the config's level; `--quiet` caps either at `warn`.
    ops.logging_level = args.log_level.or(ops.logging_level);
    let level = ops.logging_level.unwrap_or(Level::Info);
    ops.logging_level = Some(if args.quiet {
        level.max(Level::Warn)
    } else {
        level
    });
    run_plan(&plan, &ops)
}

/// The launch config in `path` (`kuscia`: a Kuscia task file, this party's config in it),
/// parsed once: the plan and the process-wide settings read the same value.
pub(crate) fn read_envelope(path: &std::path::Path, kuscia: bool) -> Result<Envelope> {
    let what = if kuscia {
        "Kuscia task file"
    } else {
        "config file"
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the {what} {}", path.display()))
        .context(UserError)?;
    let base = path.parent().map(PathBuf::from).unwrap_or_default();
    let source = path.display().to_string();
    if !kuscia {
        return Envelope::parse(&text, &source, &base).context(UserError);
    }
    let task = blindjoin_data::parse_kuscia_task(&text, &source, &base).context(UserError)?;
    log::emit(
        Level::Info,
        &format!(
            "Kuscia task {:?}: running party {:?}",
            task.task_id, task.self_party
        ),
    );
    Ok(task.envelope)
}

/// Runs `plan` with `ops` applied (threads, level, trace): its warnings, then progress bars and
/// Ctrl-C handling, then a summary on stderr (at level `info`) and the report on stdout.
fn run_plan(plan: &Plan, ops: &Ops) -> Result<()> {
    if let Some(level) = ops.logging_level {
        log::set_level(level);
    }
    for w in plan.warnings() {
        log::emit(Level::Warn, &format!("warning: {w}"));
    }
    let bars = Bars::new(!log::enabled(Level::Info));
    let cancel = cancel_on_signal();
    let (result, notes) = blindjoin_data::ops::run_plan(plan, ops, &bars, &cancel);
    bars.finish();
    for n in notes {
        log::emit(Level::Warn, &format!("warning: {n}"));
    }
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(e) => {
            if let Some(note) = plan.after_failure() {
                log::emit(Level::Warn, &note);
            }
            return Err(e.into());
        }
    };
    if log::enabled(Level::Info) {
        eprintln!("{}", outcome.summary(plan));
    }
    if let Some(note) = plan.after_success(&outcome) {
        log::emit(Level::Warn, &format!("warning: {note}"));
    }
    println!("{}", outcome.report_json()?);
    Ok(())
}

/// The link flags that override a config's settings: `--connect-timeout`, `--recv-timeout`,
/// `--peer-silence-timeout`, `--bandwidth/--latency` and `--tls-cert/--tls-key/--tls-ca`,
/// checked (positive timeouts, a valid rate and delay).
fn link_overrides(a: &RunArgs) -> Result<LinkOverrides> {
    let opt = |v: Option<f64>, flag: &str| -> Result<Option<Duration>> {
        v.map(|s| secs(Some(s), Duration::ZERO, flag)).transpose()
    };
    Ok(LinkOverrides {
        connect_timeout: opt(a.connect_timeout, "--connect-timeout")?,
        recv_timeout: opt(a.recv_timeout, "--recv-timeout")?,
        silence_timeout: opt(a.peer_silence_timeout, "--peer-silence-timeout")?,
        shape: shape_from_args(a)?,
        tls: tls_from_args(a),
    })
}

/// `--worker-ports`, parsed.
fn worker_ports(a: &RunArgs) -> Result<Option<(u16, u16)>> {
    a.worker_ports
        .as_deref()
        .map(blindjoin_data::parse_port_range)
        .transpose()
        .context(UserError)
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
        log::emit(
            Level::Warn,
            "interrupted; stopping the run and telling the peer",
        );
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

/// `--curve` when not given.
const DEFAULT_CURVE: &str = "25519";

/// The protocol of a run from flags without `--protocol`: RR22, the fastest and the one we
/// recommend, unless a flag that only ECDH has asks for ECDH.
fn default_protocol(a: &RunArgs) -> &'static str {
    let wants_ecdh = a.curve.is_some()
        || a.cardinality_only
        || a.intersection_threshold.is_some()
        || a.secret_key.is_some();
    if wants_ecdh { "ecdh" } else { "rr22" }
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
    let protocol = protocol_choice(
        a.protocol.as_deref().unwrap_or(default_protocol(a)),
        a.curve.as_deref().unwrap_or(DEFAULT_CURVE),
        a.rr22_mode.mode(),
        "--protocol",
    )?;
    if a.bucket_size == 0 {
        anyhow::bail!("--bucket-size must be at least 1");
    }
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
    let parties = Parties {
        self_id: a.self_id.clone().unwrap_or_else(|| me.to_string()),
        self_addr: a.self_addr.clone().ok_or_else(|| missing("--self"))?,
        peer_id: a.peer_id.clone().unwrap_or_else(|| other.to_string()),
        peer_addr: a.peer_addr.clone().ok_or_else(|| missing("--peer"))?,
    };
    let input = a.input.clone().ok_or_else(|| missing("--input"))?;
    let mut spec = RunSpec::new(parties, protocol, role, input, a.keys.clone());
    if let Some(out) = &a.output {
        spec = spec.with_output(out.clone());
    }
    spec.bucket_size = a.bucket_size;
    spec.broadcast_result = a.broadcast_result;
    spec.align = !a.no_align;
    spec.report = a.report.clone();
    spec.batch_size = a.batch_size;
    spec.secret_key_path = a.secret_key.clone();
    spec.connect_timeout = secs(
        a.connect_timeout,
        DEFAULT_CONNECT_TIMEOUT,
        "--connect-timeout",
    )?;
    spec.recv_timeout = secs(a.recv_timeout, DEFAULT_RECV_TIMEOUT, "--recv-timeout")?;
    spec.silence_timeout = secs(
        a.peer_silence_timeout,
        DEFAULT_SILENCE_TIMEOUT,
        "--peer-silence-timeout",
    )?;
    spec.tls = tls_from_args(a);
    spec.link_shape = shape_from_args(a)?;
    spec.spill = a.spill;
    spec.spill_dir = a.spill_dir.clone();
    spec.recovery = a.recovery_dir.clone();
    spec.reveal = reveal;
    spec.count_path = a.count_path.clone();
    spec.min_intersection = a.min_intersection.filter(|&m| m > 0);
    spec.workers = a.workers.map(usize::from);
    spec.worker_ports = worker_ports(a)?;
    let flag = if a.cardinality_only {
        "--cardinality-only"
    } else {
        "--intersection-threshold"
    };
    spec.check_reveal()
        .map_err(|why| anyhow::anyhow!("{flag} {why}"))?;
    spec.note_trust_boundary();
    Ok(spec)
}

fn parse_level(s: &str) -> Result<Level, String> {
    Level::parse(s)
        .ok_or_else(|| format!("{s:?}: use trace, debug, info, warn, err, critical or off"))
}

fn parse_spill(s: &str) -> Result<SpillMode, String> {
    SpillMode::parse(s).ok_or_else(|| format!("{s:?}: use auto, always or never"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use blindjoin_data::ProtocolChoice;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        run: RunArgs,
    }

    /// The protocol a flag-only receiver run with `extra` flags gets.
    fn protocol_of(extra: &[&str]) -> ProtocolChoice {
        let mut argv = vec![
            "run",
            "--role",
            "receiver",
            "--keys",
            "id",
            "--input",
            "in.csv",
            "--output",
            "out.csv",
            "--self",
            "127.0.0.1:1",
            "--peer",
            "127.0.0.1:2",
        ];
        argv.extend_from_slice(extra);
        let flags = Flags::try_parse_from(argv).unwrap();
        spec_from_args(&flags.run).unwrap().protocol
    }

    #[test]
    fn flags_default_to_rr22_fast() {
        assert_eq!(
            protocol_of(&[]),
            ProtocolChoice::Rr22 {
                mode: Rr22Mode::Fast
            }
        );
        assert_eq!(
            protocol_of(&["--rr22-mode", "low-comm"]),
            ProtocolChoice::Rr22 {
                mode: Rr22Mode::LowComm
            }
        );
    }

    #[test]
    fn flags_only_ecdh_has_choose_ecdh() {
        use blindjoin_data::Curve;
        let ecdh = |curve| ProtocolChoice::Ecdh { curve };
        assert_eq!(
            protocol_of(&["--curve", "secp256k1"]),
            ecdh(Curve::Secp256k1)
        );
        assert_eq!(
            protocol_of(&["--cardinality-only"]),
            ecdh(Curve::Curve25519)
        );
        assert_eq!(
            protocol_of(&["--intersection-threshold", "5"]),
            ecdh(Curve::Curve25519)
        );
        assert_eq!(protocol_of(&["--secret-key", "k"]), ecdh(Curve::Curve25519));
        // An explicit protocol wins.
        assert_eq!(protocol_of(&["--protocol", "kkrt"]), ProtocolChoice::Kkrt);
        assert_eq!(
            protocol_of(&["--protocol", "ecdh"]),
            ecdh(Curve::Curve25519)
        );
    }
}
