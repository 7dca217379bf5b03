//! `blindjoin serve`: a long-running server that answers many clients (unbalanced PSI online,
//! labeled PSI from a saved DB).

use crate::UserError;
use crate::run_cmd::{cancel_on_signal, read_envelope};
use anyhow::{Context, Result};
use blindjoin_data::Plan;
use blindjoin_data::apsi::serve::serve_apsi;
use blindjoin_data::log::{self, Level};
use blindjoin_data::serving::{DEFAULT_DRAIN, ServeOptions, default_max_sessions};
use blindjoin_data::ub::serve::serve_ub;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// The server's launch config: `ub_psi_config` with role ROLE_SERVER in MODE_ONLINE (its
    /// cache_path and server_secret_key_path), or `apsi_sender_config` loading its saved DB
    /// (db_file); link_config names this server's address. Clients run `blindjoin run` with
    /// their usual client / receiver configs.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Sessions answered at once (default: one per core, at least 2); further clients wait in
    /// the listen backlog until one ends.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_sessions: Option<u32>,
    /// After SIGTERM or Ctrl-C, how long sessions in flight may finish before they are aborted.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_DRAIN.as_secs_f64())]
    drain: f64,
    /// Stop after this many sessions (for scripts and benchmarks).
    #[arg(long, value_name = "N")]
    sessions: Option<u64>,
    /// Print only warnings and errors (not the line per session).
    #[arg(long, short)]
    quiet: bool,
}

pub(crate) fn run(args: ServeArgs) -> Result<()> {
    let path = &args.config;
    let env = read_envelope(path, false)?;
    let plan = Plan::from_envelope(&env).context(UserError)?;
    match &plan {
        Plan::Unbalanced(_) | Plan::Apsi(_) => {}
        other => {
            return Err(anyhow::anyhow!(
                "{}: blindjoin serve answers unbalanced-PSI clients (a ub_psi_config server in                  MODE_ONLINE) and labeled-PSI receivers (an apsi_sender_config that loads its                  saved DB); this config is {}",
                path.display(),
                other.kind()
            ))
            .context(UserError);
        }
    }
    if !(args.drain.is_finite() && args.drain >= 0.0) {
        return Err(anyhow::anyhow!("--drain must be 0 or more seconds")).context(UserError);
    }
    if args.quiet {
        log::set_level(Level::Warn);
    }
    for w in plan.warnings() {
        log::emit(Level::Warn, &format!("warning: {w}"));
    }
    let opts = ServeOptions {
        max_sessions: args
            .max_sessions
            .map_or_else(default_max_sessions, |n| n as usize),
        drain: Duration::from_secs_f64(args.drain),
        max_total_sessions: args.sessions,
    };
    let stop = cancel_on_signal();
    let log_line = |line: &str| log::emit(Level::Info, line);
    let summary = match &plan {
        Plan::Unbalanced(spec) => serve_ub(spec, &opts, &stop, &log_line)?,
        Plan::Apsi(spec) => serve_apsi(spec, &opts, &stop, &log_line)?,
        _ => unreachable!("refused above"),
    };
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}
