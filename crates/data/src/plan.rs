//! [`Plan`]: one party's whole run, of whichever kind its config describes, and the one
//! [`Plan::run`] the CLI and the Python API both call. A new kind of run is one config module,
//! one [`RunKind`] implementation (`run_kind.rs`), one variant here and its arm in
//! [`Plan::kind`].

use crate::apsi::{ApsiReport, ApsiSpec};
use crate::error::{ConfigError, DataError, Fault};
use crate::pipeline::report::Report;
use crate::pipeline::three_party::ThreePartyOutcome;
use crate::run_kind::RunKind;
use crate::spec::RunSpec;
use crate::spec::{NPartySpec, ThreePartySpec};
use crate::ub::{UbError, UbReport, UbSpec};
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

    /// As [`Plan::from_config`], from a config parsed once ([`crate::Envelope::parse`]), which
    /// [`crate::ops::Ops::of`] reads too.
    ///
    /// # Errors
    /// As [`Plan::from_config`].
    pub fn from_envelope(env: &crate::Envelope) -> Result<Plan, ConfigError> {
        crate::config::plan_of(env)
    }

    /// The run's kind: the one place a plan's variant becomes its implementation.
    pub fn kind_of(&self) -> &dyn RunKind {
        match self {
            Plan::TwoParty(s) => s.as_ref(),
            Plan::ThreeParty(t) => t.as_ref(),
            Plan::Unbalanced(u) => u.as_ref(),
            Plan::NParty(t) => t.as_ref(),
            Plan::Apsi(a) => a.as_ref(),
        }
    }

    pub(crate) fn kind_of_mut(&mut self) -> &mut dyn RunKind {
        match self {
            Plan::TwoParty(s) => s.as_mut(),
            Plan::ThreeParty(t) => t.as_mut(),
            Plan::Unbalanced(u) => u.as_mut(),
            Plan::NParty(t) => t.as_mut(),
            Plan::Apsi(a) => a.as_mut(),
        }
    }

    /// The config's warnings, for the user.
    pub fn warnings(&self) -> &[String] {
        self.kind_of().warnings()
    }

    /// What kind of run it is, for messages: "two-party", "three-party", "n-party",
    /// "unbalanced" or "labeled-psi".
    pub fn kind(&self) -> &'static str {
        self.kind_of().name()
    }

    /// This party's id (empty for a run without a link: generating the cache, saving a DB).
    pub fn party(&self) -> &str {
        self.kind_of().party()
    }

    /// Overrides where the JSON report goes.
    pub fn set_report(&mut self, path: PathBuf) {
        *self.kind_of_mut().report_slot() = Some(path);
    }

    /// Applies link settings given apart from the config.
    ///
    /// # Errors
    /// Settings for a run that opens no connection (`MODE_OFFLINE_GEN_CACHE`, a sender with
    /// `save_db_only`) are refused rather than ignored.
    pub fn override_link(&mut self, o: LinkOverrides) -> Result<(), ConfigError> {
        let given = o.given();
        let settings = match self.kind_of_mut().link_settings() {
            Ok(s) => s,
            Err(_) if given.is_empty() => return Ok(()),
            Err(why) => {
                let (it, them) = if given.len() == 1 {
                    ("it", "it")
                } else {
                    ("them", "them")
                };
                return Err(ConfigError::Invalid {
                    field: given.join(", "),
                    message: format!(
                        "cannot apply: {why}; drop {it} here and give {them} to the run that \
                         talks to the peer"
                    ),
                });
            }
        };
        if let Some(t) = o.connect_timeout {
            *settings.connect_timeout = t;
        }
        if let Some(t) = o.recv_timeout {
            *settings.recv_timeout = t;
        }
        if let Some(t) = o.silence_timeout {
            *settings.silence_timeout = t;
        }
        if o.shape.is_some() {
            *settings.shape = o.shape;
        }
        if let Some(files) = o.tls {
            for slot in settings.tls {
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

    /// The two-party spec of a plan that runs on a scheduler (partitioned, on Ray), the only
    /// kind that is partitioned.
    ///
    /// # Errors
    /// Another kind of run.
    pub fn scheduled(self) -> Result<RunSpec, ConfigError> {
        match self {
            Plan::TwoParty(spec) => Ok(*spec),
            other => Err(ConfigError::Invalid {
                field: "psi_config".into(),
                message: format!(
                    "a {} run cannot run on a scheduler; only two-party runs are partitioned",
                    other.kind()
                ),
            }),
        }
    }

    /// Sets how many client keys one server key may evaluate over all online queries
    /// (`blindjoin.max_query_items`, `--max-query-items`): unbalanced PSI's server, labeled PSI's
    /// sender.
    ///
    /// # Errors
    /// The plan evaluates no queries, or `n` is 0.
    pub fn set_max_query_items(&mut self, n: u64) -> Result<(), ConfigError> {
        let field = "--max-query-items".to_string();
        if n == 0 {
            return Err(ConfigError::Invalid {
                field,
                message: "0 would refuse every query; use 1 or more".into(),
            });
        }
        let kind = self.kind_of_mut();
        let name = kind.name();
        match kind.query_cap() {
            Ok(cap) => {
                *cap = n;
                Ok(())
            }
            Err(None) => Err(ConfigError::Invalid {
                field,
                message: format!(
                    "applies to unbalanced PSI and labeled PSI servers only; this is a {name} run"
                ),
            }),
            Err(Some(why)) => Err(ConfigError::Invalid {
                field,
                message: why,
            }),
        }
    }

    /// Runs the plan; `cancel` lets another thread stop it (the peer is told why and no output
    /// is written).
    ///
    /// # Errors
    /// Why the run failed; [`RunError::fault`] says who must act.
    pub fn run(&self, progress: &dyn Progress, cancel: &Cancel) -> Result<Outcome, RunError> {
        self.kind_of().run(progress, cancel)
    }

    /// What the user should know after a failed run, beyond the error: a recovery checkpoint
    /// that is kept for the rerun.
    pub fn after_failure(&self) -> Option<String> {
        self.kind_of().after_failure()
    }

    /// What the user should know after a successful run: an output file left from an earlier
    /// run that this run did not write.
    pub fn after_success(&self, outcome: &Outcome) -> Option<String> {
        self.kind_of().after_success(outcome)
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
        plan.kind_of().summary(self)
    }
}
