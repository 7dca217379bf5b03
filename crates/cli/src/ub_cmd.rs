//! `blindjoin run --config` with a `ub_psi_config`: unbalanced PSI in SecretFlow's modes (gen
//! cache, transfer cache, offline, online, full). The work is `blindjoin_data::ub`.

use crate::UserError;
use crate::progress::Bars;
use anyhow::{Context, Result};
use blindjoin_data::ub::{UbReport, run_ub};
use blindjoin_data::{is_ub_launch_config, parse_ub_launch_config};
use std::path::{Path, PathBuf};

/// Runs the config at `path` if it is an unbalanced-PSI config; `None` if it is not (the
/// balanced path takes it). `report` overrides the config's report path.
pub(crate) fn run_if_ub(path: &Path, quiet: bool, report: Option<&Path>) -> Option<Result<()>> {
    let text = std::fs::read_to_string(path).ok()?;
    if !is_ub_launch_config(&text) {
        return None;
    }
    Some(run(path, &text, quiet, report))
}

fn run(path: &Path, text: &str, quiet: bool, report: Option<&Path>) -> Result<()> {
    let base = path.parent().map(PathBuf::from).unwrap_or_default();
    let mut spec = parse_ub_launch_config(text, &path.display().to_string(), &base)
        .map_err(anyhow::Error::from)
        .context(UserError)?;
    if let Some(r) = report {
        spec.report = Some(r.to_path_buf());
    }
    for w in &spec.warnings {
        eprintln!("blindjoin: warning: {w}");
    }
    let bars = Bars::new(quiet);
    let cancel = crate::run_cmd::cancel_on_signal();
    let result = run_ub(&spec, &bars, &cancel);
    bars.finish();
    let report = match result {
        Ok(r) => r,
        Err(e) if e.is_user_error() => return Err(anyhow::Error::from(e).context(UserError)),
        Err(e) => return Err(e.into()),
    };
    if !quiet {
        eprintln!("{}", summary(&report));
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn summary(r: &UbReport) -> String {
    let mb = |b: u64| b as f64 / 1e6;
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
