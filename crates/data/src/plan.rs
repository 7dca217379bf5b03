//! [`Plan`]: one party's whole run, of whichever kind its config describes, and the one
//! [`Plan::run`] the CLI and the Python API both call. A new kind of run (labeled PSI, n-party)
//! is one config module, one variant here and one pipeline.

use crate::apsi::{ApsiReport, ApsiSpec};
use crate::config::{NPartySpec, ThreePartySpec};
use crate::error::{ConfigError, DataError, Fault};
use crate::pipeline::report::Report;
use crate::pipeline::three_party::ThreePartyOutcome;
use crate::spec::RunSpec;
use crate::ub::{UbError, UbMode, UbReport, UbSpec};
use blindjoin_link::{Cancel, LinkShape, TlsConfig};
use blindjoin_protocols::Progress;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One party's run.
#[derive(Clone, Debug)]
pub enum Plan {
    /// Two parties, `psi_config` (ECDH, KKRT, RR22).
    TwoParty(Box<RunSpec>),
    /// Three parties, `psi_config` with `PROTOCOL_ECDH_3PC`.
    ThreeParty(Box<ThreePartySpec>),
    /// Unbalanced PSI, `ub_psi_config`.
    Unbalanced(Box<UbSpec>),
    /// n parties (`PROTOCOL_NPC`, `ECDH_PSI_NPC`, `KKRT_PSI_NPC`) or DP-PSI (`DP_PSI_2PC`).
    NParty(Box<NPartySpec>),
    /// Labeled PSI, `apsi_sender_config` / `apsi_receiver_config`.
    Apsi(Box<ApsiSpec>),
}

/// Link settings given apart from the config (the CLI's `--connect-timeout`, `--recv-timeout`,
/// `--peer-silence-timeout`, `--bandwidth/--latency`, `--tls-*`), which override the config's
/// for every kind of run.
#[derive(Clone, Debug, Default)]
pub struct LinkOverrides {
    /// How long to wait for the peer to connect.
    pub connect_timeout: Option<Duration>,
    /// How long to wait for any one message.
    pub recv_timeout: Option<Duration>,
    /// How long the peer may be silent before it counts as dead.
    pub silence_timeout: Option<Duration>,
    /// A simulated WAN, for benchmarks.
    pub shape: Option<LinkShape>,
    /// Mutual TLS files (for a three-party run: where it listens and where it connects).
    pub tls: Option<TlsConfig>,
}

impl LinkOverrides {
    /// The names of the settings given, for a refusal.
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("--connect-timeout", self.connect_timeout.is_some()),
            ("--recv-timeout", self.recv_timeout.is_some()),
            ("--peer-silence-timeout", self.silence_timeout.is_some()),
            ("--bandwidth/--latency", self.shape.is_some()),
            ("--tls-cert/--tls-key/--tls-ca", self.tls.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
}

/// What a run did: its report, by kind.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// A two-party run's report.
    TwoParty(Report),
    /// A three-party run's report and per-link traffic.
    ThreeParty(ThreePartyOutcome),
    /// An unbalanced run's report.
    Unbalanced(UbReport),
    /// An n-party or DP-PSI run's report and per-link traffic.
    NParty(ThreePartyOutcome),
    /// A labeled-PSI run's report.
    Apsi(ApsiReport),
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A two- or three-party run.
    #[error(transparent)]
    Data(#[from] DataError),
    /// An unbalanced run.
    #[error(transparent)]
    Unbalanced(#[from] UbError),
}

impl RunError {
    /// Who must act; see [`Fault`].
    pub fn fault(&self) -> Fault {
        match self {
            RunError::Data(e) => e.fault(),
            RunError::Unbalanced(e) => e.fault(),
        }
    }
}

impl Plan {
    /// Parses a launch config of any kind: a SecretFlow v1 one (`legacy_psi_config`), a
    /// three-party config (`psi_config` naming `PROTOCOL_ECDH_3PC`), an unbalanced one (with
    /// `ub_psi_config`), else a two-party one.
    /// `source` names it in errors; relative paths resolve against `base_dir`.
    ///
    /// # Errors
    /// The config's first problem, naming the field.
    pub fn from_config(text: &str, source: &str, base_dir: &Path) -> Result<Plan, ConfigError> {
        crate::config::parse_any_launch_config(text, source, base_dir)
    }

    /// The config's warnings, for the user.
    pub fn warnings(&self) -> &[String] {
        match self {
            Plan::TwoParty(s) => &s.warnings,
            Plan::ThreeParty(t) => &t.spec.warnings,
            Plan::Unbalanced(u) => &u.warnings,
            Plan::NParty(t) => &t.spec.warnings,
            Plan::Apsi(a) => &a.warnings,
        }
    }

    /// What kind of run it is, for messages: "two-party", "three-party" or "unbalanced".
    pub fn kind(&self) -> &'static str {
        match self {
            Plan::TwoParty(_) => "two-party",
            Plan::ThreeParty(_) => "three-party",
            Plan::Unbalanced(_) => "unbalanced",
            Plan::NParty(_) => "n-party",
            Plan::Apsi(_) => "labeled PSI",
        }
    }

    /// This party's id (empty for an unbalanced run without a link: generating the cache).
    pub fn party(&self) -> &str {
        match self {
            Plan::TwoParty(s) => &s.parties.self_id,
            Plan::ThreeParty(t) => &t.spec.parties.self_id,
            Plan::Unbalanced(u) => u.link.parties.as_ref().map_or("", |p| p.self_id.as_str()),
            Plan::NParty(t) => &t.spec.parties.self_id,
            Plan::Apsi(a) => a.link.parties.as_ref().map_or("", |p| p.self_id.as_str()),
        }
    }

    /// Overrides where the JSON report goes.
    pub fn set_report(&mut self, path: PathBuf) {
        match self {
            Plan::TwoParty(s) => s.report = Some(path),
            Plan::ThreeParty(t) => t.spec.report = Some(path),
            Plan::Unbalanced(u) => u.report = Some(path),
            Plan::NParty(t) => t.spec.report = Some(path),
            Plan::Apsi(a) => a.report = Some(path),
        }
    }

    /// Applies link settings given apart from the config.
    ///
    /// # Errors
    /// Settings for a run that opens no connection (`MODE_OFFLINE_GEN_CACHE`) are refused rather
    /// than ignored.
    pub fn override_link(&mut self, o: LinkOverrides) -> Result<(), ConfigError> {
        let (connect, recv, silence, shape, tls): (_, _, _, _, Vec<&mut Option<TlsConfig>>) =
            match self {
                Plan::TwoParty(s) => (
                    &mut s.connect_timeout,
                    &mut s.recv_timeout,
                    &mut s.silence_timeout,
                    &mut s.link_shape,
                    vec![&mut s.tls],
                ),
                Plan::ThreeParty(t) => (
                    &mut t.spec.connect_timeout,
                    &mut t.spec.recv_timeout,
                    &mut t.spec.silence_timeout,
                    &mut t.spec.link_shape,
                    vec![&mut t.tls_server, &mut t.tls_client],
                ),
                Plan::NParty(t) => (
                    &mut t.spec.connect_timeout,
                    &mut t.spec.recv_timeout,
                    &mut t.spec.silence_timeout,
                    &mut t.spec.link_shape,
                    vec![&mut t.tls_server, &mut t.tls_client],
                ),
                Plan::Unbalanced(u) if u.mode == UbMode::GenCache => {
                    let given = o.given();
                    if given.is_empty() {
                        return Ok(());
                    }
                    let (it, them) = if given.len() == 1 {
                        ("it", "it")
                    } else {
                        ("them", "them")
                    };
                    return Err(ConfigError::Invalid {
                        field: given.join(", "),
                        message: format!(
                            "cannot apply: {} runs alone and opens no connection; drop {it} \
                             here and give {them} to the run that talks to the peer (transfer \
                             cache, online or full)",
                            UbMode::GenCache.config_name()
                        ),
                    });
                }
                Plan::Apsi(a) if a.link.parties.is_none() => {
                    let given = o.given();
                    if given.is_empty() {
                        return Ok(());
                    }
                    return Err(ConfigError::Invalid {
                        field: given.join(", "),
                        message: "cannot apply: a sender with save_db_only runs alone and opens                                   no connection"
                            .into(),
                    });
                }
                Plan::Apsi(a) => a.link.settings_mut(),
                Plan::Unbalanced(u) => u.link.settings_mut(),
            };
        if let Some(t) = o.connect_timeout {
            *connect = t;
        }
        if let Some(t) = o.recv_timeout {
            *recv = t;
        }
        if let Some(t) = o.silence_timeout {
            *silence = t;
        }
        if o.shape.is_some() {
            *shape = o.shape;
        }
        if let Some(files) = o.tls {
            for slot in tls {
                *slot = Some(files.clone());
            }
        }
        Ok(())
    }

    /// Sets the partition count and the workers' ports (`--workers`, `--worker-ports`), over
    /// the config's `blindjoin.workers` / `blindjoin.worker_ports`.
    ///
    /// # Errors
    /// The plan is not a two-party run (the only kind that is partitioned).
    pub fn set_workers(
        &mut self,
        workers: Option<usize>,
        ports: Option<(u16, u16)>,
    ) -> Result<(), ConfigError> {
        if workers.is_none() && ports.is_none() {
            return Ok(());
        }
        let Plan::TwoParty(spec) = self else {
            return Err(ConfigError::Invalid {
                field: "--workers/--worker-ports".into(),
                message: "apply to two-party runs only".into(),
            });
        };
        if workers.is_some() {
            spec.workers = workers;
        }
        if ports.is_some() {
            spec.worker_ports = ports;
        }
        Ok(())
    }

    /// Sets how many client keys one server key may evaluate over all online queries
    /// (`blindjoin.max_query_items`, `--max-query-items`).
    ///
    /// # Errors
    /// The plan is not an unbalanced server that answers queries, or `n` is 0.
    pub fn set_max_query_items(&mut self, n: u64) -> Result<(), ConfigError> {
        let field = "--max-query-items".to_string();
        let Plan::Unbalanced(spec) = self else {
            return Err(ConfigError::Invalid {
                field,
                message: "applies to unbalanced PSI (a config with ub_psi_config) only".into(),
            });
        };
        if spec.role != crate::ub::UbRole::Server || !spec.mode.queries() {
            return Err(ConfigError::Invalid {
                field,
                message: format!(
                    "bounds the client keys a server evaluates online; this run is {} {}, \
                     which evaluates none",
                    spec.role.config_name(),
                    spec.mode.config_name()
                ),
            });
        }
        if n == 0 {
            return Err(ConfigError::Invalid {
                field,
                message: "0 would refuse every query; use 1 or more".into(),
            });
        }
        spec.max_query_items = n;
        Ok(())
    }

    /// Runs the plan; `cancel` lets another thread stop it (the peer is told why and no output
    /// is written).
    ///
    /// # Errors
    /// Why the run failed; [`RunError::fault`] says who must act.
    pub fn run(&self, progress: &dyn Progress, cancel: &Cancel) -> Result<Outcome, RunError> {
        Ok(match self {
            Plan::TwoParty(s) => Outcome::TwoParty(crate::run_with_cancel(s, progress, cancel)?),
            Plan::ThreeParty(t) => {
                Outcome::ThreeParty(crate::run_three_party(t, progress, cancel)?)
            }
            Plan::Unbalanced(u) => Outcome::Unbalanced(crate::ub::run_ub(u, progress, cancel)?),
            Plan::NParty(t) => Outcome::NParty(crate::run_n_party(t, progress, cancel)?),
            Plan::Apsi(a) => Outcome::Apsi(crate::apsi::run_apsi(a, progress, cancel)?),
        })
    }

    /// What the user should know after a failed run, beyond the error: a recovery checkpoint
    /// that is kept for the rerun.
    pub fn after_failure(&self) -> Option<String> {
        match self {
            Plan::TwoParty(s) => s
                .recovery
                .as_ref()
                .filter(|dir| dir.join(crate::pipeline::recovery::FILE).exists())
                .map(|dir| {
                    format!(
                        "the checkpoint in {} is kept; rerun the same command on both sides to \
                         resume",
                        dir.display()
                    )
                }),
            _ => None,
        }
    }

    /// What the user should know after a successful run: an output file left from an earlier
    /// run that this run did not write.
    pub fn after_success(&self, outcome: &Outcome) -> Option<String> {
        match (self, outcome) {
            (Plan::TwoParty(s), Outcome::TwoParty(r)) if r.output_path.is_none() => {
                s.output.as_ref().filter(|p| p.exists()).map(|stale| {
                    format!(
                        "{} is from an earlier run; this run wrote no output there",
                        stale.display()
                    )
                })
            }
            _ => None,
        }
    }
}

impl Outcome {
    /// The report as pretty JSON (what `blindjoin run` prints on stdout).
    ///
    /// # Errors
    /// The report cannot be encoded (a bug).
    pub fn report_json(&self) -> serde_json::Result<String> {
        match self {
            Outcome::TwoParty(r) => serde_json::to_string_pretty(r),
            Outcome::ThreeParty(o) => serde_json::to_string_pretty(&o.report),
            Outcome::Unbalanced(r) => serde_json::to_string_pretty(r),
            Outcome::NParty(o) => serde_json::to_string_pretty(&o.report),
            Outcome::Apsi(r) => serde_json::to_string_pretty(r),
        }
    }

    /// One line for a person: what was learned, the time and the traffic.
    pub fn summary(&self, plan: &Plan) -> String {
        match self {
            Outcome::TwoParty(r) => {
                let report_path = match plan {
                    Plan::TwoParty(s) => s.report_path(),
                    _ => None,
                };
                two_party_summary(r, report_path.as_deref())
            }
            Outcome::ThreeParty(o) => three_party_summary(o),
            Outcome::Unbalanced(r) => unbalanced_summary(r),
            Outcome::NParty(o) => three_party_summary(o).replace("three-way", "n-way"),
            Outcome::Apsi(r) => apsi_summary(r),
        }
    }
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

fn two_party_summary(r: &Report, report_path: Option<&Path>) -> String {
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
    let report = report_path
        .map(|p| format!("; report {}", p.display()))
        .unwrap_or_default();
    format!(
        "blindjoin: {what}; {:.2} s, sent {:.2} MB, received {:.2} MB{report}",
        r.stages.total_s,
        mb(r.bytes_sent),
        mb(r.bytes_received)
    )
}

fn three_party_summary(out: &ThreePartyOutcome) -> String {
    let r = &out.report;
    let what = if r.intersection_count < 0 {
        "this party is a helper and learns no items; no output written".to_string()
    } else {
        format!(
            "three-way intersection: {} keys, {} of {} rows -> {}",
            r.intersection_key_count,
            r.intersection_count,
            r.original_count,
            r.output_path.as_deref().unwrap_or("-")
        )
    };
    let links: Vec<String> = out
        .links
        .iter()
        .map(|(peer, s)| {
            format!(
                "{peer}: sent {:.2} MB, received {:.2} MB",
                mb(s.bytes_sent),
                mb(s.bytes_received)
            )
        })
        .collect();
    format!(
        "blindjoin: {what}; {:.2} s; links {}",
        r.stages.total_s,
        links.join("; ")
    )
}

fn unbalanced_summary(r: &UbReport) -> String {
    let mut parts = vec![format!("{} {}", r.role, r.mode)];
    if let Some(p) = &r.gen_cache {
        parts.push(format!(
            "cache of {} keys generated in {:.2} s",
            r.cache_count, p.seconds
        ));
    }
    if let Some(p) = &r.transfer_cache {
        parts.push(format!(
            "cache transferred in {:.2} s (sent {:.2} MB, received {:.2} MB)",
            p.seconds,
            mb(p.bytes_sent),
            mb(p.bytes_received)
        ));
    }
    if let Some(p) = &r.online {
        parts.push(format!(
            "online {:.3} s (sent {:.3} MB, received {:.3} MB)",
            p.seconds,
            mb(p.bytes_sent),
            mb(p.bytes_received)
        ));
        parts.push(match &r.output_path {
            Some(o) => format!(
                "intersection: {} keys, {} rows -> {o}",
                r.intersection_key_count, r.intersection_count
            ),
            None if r.intersection_key_count >= 0 => format!(
                "intersection size {} (this party gets no rows)",
                r.intersection_key_count
            ),
            None => "this party does not receive the result".into(),
        });
    }
    format!("blindjoin: {}; total {:.2} s", parts.join("; "), r.total_s)
}

fn apsi_summary(r: &ApsiReport) -> String {
    let what = match (r.role.as_str(), &r.output_path) {
        ("receiver", Some(o)) => format!(
            "labeled PSI receiver: {} of {} query rows found -> {o}",
            r.intersection_count, r.original_count
        ),
        _ if r.online_s == 0.0 => format!(
            "labeled PSI sender: DB of {} items saved to {}",
            r.db_items,
            r.db_path.as_deref().unwrap_or("-")
        ),
        _ => format!("labeled PSI sender: served a DB of {} items", r.db_items),
    };
    format!(
        "blindjoin: {what}; setup {:.2} s, online {:.3} s, sent {:.3} MB, received {:.3} MB",
        r.setup_s,
        r.online_s,
        mb(r.bytes_sent),
        mb(r.bytes_received)
    )
}
