//! [`RunKind`]: what each kind of run (two-party, three-party, n-party and DP-PSI, unbalanced,
//! labeled PSI) provides to the [`Plan`](crate::Plan) that holds it — its name, warnings,
//! link settings, run and summary — in one implementation per kind, here. A new family is one
//! more implementation and one arm in [`Plan::kind`](crate::Plan::kind); nothing else
//! matches on the kinds.

use crate::apsi::{ApsiReport, ApsiSpec};
use crate::pipeline::report::Report;
use crate::pipeline::three_party::ThreePartyOutcome;
use crate::plan::{Outcome, RunError};
pub use crate::spec::LinkSettings;
use crate::spec::RunSpec;
use crate::spec::{NPartySpec, ThreePartySpec};
use crate::ub::{UbMode, UbReport, UbSpec};
use blindjoin_link::{Cancel, TlsConfig};
use blindjoin_protocols::Progress;
use std::path::PathBuf;

/// One kind of run.
pub trait RunKind {
    /// For messages: "two-party", "three-party", "n-party", "unbalanced" or "labeled-psi".
    fn name(&self) -> &'static str;
    /// This party's id (empty for a run alone: generating a cache, saving a DB).
    fn party(&self) -> &str;
    /// The config's warnings, for the user.
    fn warnings(&self) -> &[String];
    /// The same, to add to or rename (a v1 config's parse).
    fn warnings_mut(&mut self) -> &mut Vec<String>;
    /// Where the JSON report goes.
    fn report_slot(&mut self) -> &mut Option<PathBuf>;
    /// The link settings, or why this run has none (it runs alone and opens no connection).
    ///
    /// # Errors
    /// The run opens no connection: the message says so.
    fn link_settings(&mut self) -> Result<LinkSettings<'_>, String>;
    /// Runs it.
    ///
    /// # Errors
    /// Why the run failed.
    fn run(&self, progress: &dyn Progress, cancel: &Cancel) -> Result<Outcome, RunError>;
    /// The cap on the queries this run's key evaluates (`max_query_items`), or why it has none
    /// (`None`: this kind never evaluates queries).
    ///
    /// # Errors
    /// This run evaluates no queries.
    fn query_cap(&mut self) -> Result<&mut u64, Option<String>> {
        Err(None)
    }
    /// What the user should know after a failed run, beyond the error.
    fn after_failure(&self) -> Option<String> {
        None
    }
    /// What the user should know after a successful run.
    fn after_success(&self, _outcome: &Outcome) -> Option<String> {
        None
    }
    /// One line for a person: what was learned, the time and the traffic.
    fn summary(&self, outcome: &Outcome) -> String;
}

fn settings_of<'a>(spec: &'a mut RunSpec, tls: Vec<&'a mut Option<TlsConfig>>) -> LinkSettings<'a> {
    LinkSettings {
        connect_timeout: &mut spec.connect_timeout,
        recv_timeout: &mut spec.recv_timeout,
        silence_timeout: &mut spec.silence_timeout,
        shape: &mut spec.link_shape,
        tls,
    }
}

impl RunKind for RunSpec {
    fn name(&self) -> &'static str {
        "two-party"
    }
    fn party(&self) -> &str {
        &self.parties.self_id
    }
    fn warnings(&self) -> &[String] {
        &self.warnings
    }
    fn warnings_mut(&mut self) -> &mut Vec<String> {
        &mut self.warnings
    }
    fn report_slot(&mut self) -> &mut Option<PathBuf> {
        &mut self.report
    }
    fn link_settings(&mut self) -> Result<LinkSettings<'_>, String> {
        let RunSpec {
            connect_timeout,
            recv_timeout,
            silence_timeout,
            link_shape,
            tls,
            ..
        } = self;
        Ok(LinkSettings {
            connect_timeout,
            recv_timeout,
            silence_timeout,
            shape: link_shape,
            tls: vec![tls],
        })
    }
    fn run(&self, progress: &dyn Progress, cancel: &Cancel) -> Result<Outcome, RunError> {
        // The peer's wire decides the link and the protocol's variant; the rest is shared.
        let report = match &self.peer_wire {
            Some(_) => crate::secretflow_wire::run(self, progress, cancel)?,
            None => crate::run_with_cancel(self, progress, cancel)?,
        };
        Ok(Outcome::TwoParty(report))
    }
    fn after_failure(&self) -> Option<String> {
        self.recovery
            .as_ref()
            .filter(|dir| dir.join(crate::pipeline::recovery::FILE).exists())
            .map(|dir| {
                format!(
                    "the checkpoint in {} is kept; rerun the same command on both sides to resume",
                    dir.display()
                )
            })
    }
    fn after_success(&self, outcome: &Outcome) -> Option<String> {
        match outcome {
            Outcome::TwoParty(r) if r.output_path.is_none() => {
                self.output.as_ref().filter(|p| p.exists()).map(|stale| {
                    format!(
                        "{} is from an earlier run; this run wrote no output there",
                        stale.display()
                    )
                })
            }
            _ => None,
        }
    }
    fn summary(&self, outcome: &Outcome) -> String {
        match outcome {
            Outcome::TwoParty(r) => two_party_summary(r, self.report_path().as_deref()),
            other => other_summary(other),
        }
    }
}

/// Three-party and n-party runs share their shape: a two-party spec inside, the TLS files
/// where they listen and where they connect, and a report per link.
macro_rules! multi_party_kind {
    ($spec:ty, $name:literal, $variant:ident, $run:path, $what:literal) => {
        impl RunKind for $spec {
            fn name(&self) -> &'static str {
                $name
            }
            fn party(&self) -> &str {
                &self.spec.parties.self_id
            }
            fn warnings(&self) -> &[String] {
                &self.spec.warnings
            }
            fn warnings_mut(&mut self) -> &mut Vec<String> {
                &mut self.spec.warnings
            }
            fn report_slot(&mut self) -> &mut Option<PathBuf> {
                &mut self.spec.report
            }
            fn link_settings(&mut self) -> Result<LinkSettings<'_>, String> {
                Ok(settings_of(
                    &mut self.spec,
                    vec![&mut self.tls_server, &mut self.tls_client],
                ))
            }
            fn run(&self, progress: &dyn Progress, cancel: &Cancel) -> Result<Outcome, RunError> {
                Ok(Outcome::$variant($run(self, progress, cancel)?))
            }
            fn summary(&self, outcome: &Outcome) -> String {
                match outcome {
                    Outcome::$variant(o) => multi_party_summary(o, $what),
                    other => other_summary(other),
                }
            }
        }
    };
}

multi_party_kind!(
    ThreePartySpec,
    "three-party",
    ThreeParty,
    crate::run_three_party,
    "three-way"
);
multi_party_kind!(NPartySpec, "n-party", NParty, crate::run_n_party, "n-way");

impl RunKind for UbSpec {
    fn name(&self) -> &'static str {
        "unbalanced"
    }
    fn party(&self) -> &str {
        self.link.party()
    }
    fn warnings(&self) -> &[String] {
        &self.warnings
    }
    fn warnings_mut(&mut self) -> &mut Vec<String> {
        &mut self.warnings
    }
    fn report_slot(&mut self) -> &mut Option<PathBuf> {
        &mut self.report
    }
    fn link_settings(&mut self) -> Result<LinkSettings<'_>, String> {
        if self.mode == UbMode::GenCache {
            return Err(format!(
                "{} runs alone and opens no connection (transfer cache, online and full talk \
                 to the peer)",
                UbMode::GenCache.config_name()
            ));
        }
        Ok(self.link.settings_mut())
    }
    fn query_cap(&mut self) -> Result<&mut u64, Option<String>> {
        if self.role != crate::ub::UbRole::Server || !self.mode.queries() {
            return Err(Some(format!(
                "bounds the client keys a server evaluates online; this run is {} {}, which \
                 evaluates none",
                self.role.config_name(),
                self.mode.config_name()
            )));
        }
        Ok(&mut self.max_query_items)
    }
    fn run(&self, progress: &dyn Progress, cancel: &Cancel) -> Result<Outcome, RunError> {
        Ok(Outcome::Unbalanced(match &self.peer_wire {
            None => crate::ub::run_ub(self, progress, cancel)?,
            Some(w) => crate::secretflow_ub::run(self, w, progress, cancel)?,
        }))
    }
    fn summary(&self, outcome: &Outcome) -> String {
        match outcome {
            Outcome::Unbalanced(r) => unbalanced_summary(r),
            other => other_summary(other),
        }
    }
}

impl RunKind for ApsiSpec {
    fn name(&self) -> &'static str {
        "labeled-psi"
    }
    fn party(&self) -> &str {
        self.link.party()
    }
    fn warnings(&self) -> &[String] {
        &self.warnings
    }
    fn warnings_mut(&mut self) -> &mut Vec<String> {
        &mut self.warnings
    }
    fn report_slot(&mut self) -> &mut Option<PathBuf> {
        &mut self.report
    }
    fn link_settings(&mut self) -> Result<LinkSettings<'_>, String> {
        if self.link.parties.is_none() {
            return Err("a sender with save_db_only runs alone and opens no connection".into());
        }
        Ok(self.link.settings_mut())
    }
    fn query_cap(&mut self) -> Result<&mut u64, Option<String>> {
        match self.role {
            crate::apsi::ApsiRole::Sender(_) => Ok(&mut self.max_query_items),
            crate::apsi::ApsiRole::Receiver { .. } => Err(Some(
                "bounds the keys a labeled-PSI sender evaluates; a receiver evaluates none".into(),
            )),
        }
    }
    fn run(&self, progress: &dyn Progress, cancel: &Cancel) -> Result<Outcome, RunError> {
        Ok(Outcome::Apsi(crate::apsi::run_apsi(
            self, progress, cancel,
        )?))
    }
    fn summary(&self, outcome: &Outcome) -> String {
        match outcome {
            Outcome::Apsi(r) => apsi_summary(r),
            other => other_summary(other),
        }
    }
}

/// An outcome another kind of run produced (a bug): its report, as JSON.
fn other_summary(outcome: &Outcome) -> String {
    outcome.report_json().unwrap_or_default()
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

fn two_party_summary(r: &Report, report_path: Option<&std::path::Path>) -> String {
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

/// A three-party or n-party run's line; `what` names the intersection ("three-way").
fn multi_party_summary(out: &ThreePartyOutcome, what: &str) -> String {
    let r = &out.report;
    let learned = if r.intersection_count < 0 {
        "this party is a helper and learns no items; no output written".to_string()
    } else {
        format!(
            "{what} intersection: {} keys, {} of {} rows -> {}",
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
        "blindjoin: {learned}; {:.2} s; links {}",
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
