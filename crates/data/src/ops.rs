//! The process-wide settings of a run, apart from what it computes: how many threads it uses
//! (`blindjoin.threads`, the CLI's `--threads`, Python's `threads=`), what it prints on stderr
//! (`debug_options.logging_level`, [`crate::log`]) and where its trace goes
//! (`debug_options.trace_path`, [`crate::trace`]); and [`run_plan`], which applies them around
//! [`Plan::run`] for the CLI and the Python API alike.
//!
//! Threads: the protocols' parallel work runs on rayon's global pool, which a process builds
//! once. [`apply_threads`] builds it with the count asked for before any parallel work; without
//! a count, rayon builds it on first use with `RAYON_NUM_THREADS` threads if that environment
//! variable is set (rayon's own setting, honoured as rayon documents it), else one per logical
//! CPU. The run's own thread, the link's reader and writer and the connect thread are not in the
//! pool, so a run with `threads = 1` still has a few threads, of which one computes at a time.

use crate::config::{Envelope, resolve_path};
use crate::error::ConfigError;
use crate::log::Level;
use crate::plan::{Outcome, Plan, RunError};
use blindjoin_link::Cancel;
use blindjoin_protocols::Progress;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The most threads a setting may ask for (a bound on a config's number, far above any machine
/// this runs on; rayon would spawn them all).
pub const MAX_THREADS: usize = 1024;

/// A run's process-wide settings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ops {
    /// Threads in rayon's pool; `None`: `RAYON_NUM_THREADS`, else one per logical CPU.
    pub threads: Option<usize>,
    /// What is printed on stderr; `None`: `info`.
    pub logging_level: Option<Level>,
    /// Where the run's trace goes; `None`: no trace.
    pub trace_path: Option<PathBuf>,
}

impl Ops {
    /// Reads the settings from a launch config of any kind: `debug_options` in `psi_config` or
    /// `ub_psi_config` (SecretFlow's place), and `blindjoin.threads`. The config's own parser
    /// checks everything else ([`Plan::from_config`]); relative paths resolve against
    /// `base_dir`. An empty `trace_path` writes no trace (SecretFlow documents a default of
    /// /tmp/psi.trace; a file in a shared folder nobody asked for is not a default we take).
    ///
    /// # Errors
    /// Bad JSON; an unknown `logging_level`; a `threads` that is not an integer in 0..=1024
    /// (0: the default).
    pub fn from_config(text: &str, source: &str, base_dir: &Path) -> Result<Ops, ConfigError> {
        Ops::of(&Envelope::parse(text, source, base_dir)?)
    }

    /// As [`Ops::from_config`], from a parsed launch config (the one the plan is made from).
    ///
    /// # Errors
    /// As [`Ops::from_config`], but for bad JSON.
    pub fn of(env: &Envelope) -> Result<Ops, ConfigError> {
        let (v, base_dir) = (env.value(), env.base_dir());
        let mut ops = Ops::default();
        for section in ["psi_config", "ub_psi_config"] {
            let d = &v[section]["debug_options"];
            let field = |name: &str| format!("{section}.debug_options.{name}");
            if let Some(l) = d.get("logging_level").filter(|l| !l.is_null()) {
                let name = field("logging_level");
                let text = l
                    .as_str()
                    .ok_or_else(|| invalid(&name, "expected a string"))?;
                ops.logging_level = Some(parse_level(text, &name)?);
            }
            if let Some(p) = d.get("trace_path").filter(|p| !p.is_null()) {
                let name = field("trace_path");
                let p = p
                    .as_str()
                    .ok_or_else(|| invalid(&name, "expected a string"))?;
                if !p.is_empty() {
                    ops.trace_path = Some(resolve_path(base_dir, p));
                }
            }
        }
        if let Some(t) = v["blindjoin"].get("threads").filter(|t| !t.is_null()) {
            ops.threads = parse_threads(t, "blindjoin.threads")?;
        }
        Ok(ops)
    }
}

/// A level from a config or a flag; `field` names it in the error.
///
/// # Errors
/// Not one of SecretFlow's level names.
pub fn parse_level(text: &str, field: &str) -> Result<Level, ConfigError> {
    Level::parse(text).ok_or_else(|| {
        invalid(
            field,
            &format!("unknown level {text:?}; use trace, debug, info, warn, err, critical or off"),
        )
    })
}

/// A thread count (a number, or a string as protobuf's JSON writes 64-bit integers); 0 means
/// the default.
fn parse_threads(v: &Value, field: &str) -> Result<Option<usize>, ConfigError> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|&n| n <= MAX_THREADS as u64)
    .ok_or_else(|| {
        invalid(
            field,
            &format!("expected an integer from 0 (all cores) to {MAX_THREADS}, got {v}"),
        )
    })?;
    Ok((n > 0).then_some(n as usize))
}

fn invalid(field: &str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_string(),
        message: message.to_string(),
    }
}

/// Builds rayon's global pool with `threads` threads (nothing when `None`). The pool is the
/// process's and is built once: a later different count cannot apply, and the warning returned
/// says so (the Python module running twice in one process).
pub fn apply_threads(threads: Option<usize>) -> Option<String> {
    let n = threads?;
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("blindjoin-{i}"))
        .build_global()
    {
        Ok(()) => None,
        Err(_) if rayon::current_num_threads() == n => None,
        Err(_) => Some(format!(
            "threads = {n} not applied: this process's thread pool was already built with {} \
             threads (it is built once per process)",
            rayon::current_num_threads()
        )),
    }
}

/// Runs `plan` with `ops` applied: the thread count first, then the logging level, then the run
/// with its trace recorded. Returns the run's result and what the user should be warned of (a
/// thread count that could not apply, a trace that could not be written).
pub fn run_plan(
    plan: &Plan,
    ops: &Ops,
    progress: &dyn Progress,
    cancel: &Cancel,
) -> (Result<Outcome, RunError>, Vec<String>) {
    let mut warnings: Vec<String> = apply_threads(ops.threads).into_iter().collect();
    if let Some(level) = ops.logging_level {
        crate::log::set_level(level);
    }
    if crate::log::enabled(Level::Debug) {
        // Asking builds the pool (with its default count) if nothing has yet: the run would.
        crate::log::emit(
            Level::Debug,
            &format!("thread pool: {} threads", rayon::current_num_threads()),
        );
    }
    let name = match plan.party() {
        "" => format!("blindjoin ({})", plan.kind()),
        party => format!("blindjoin {party} ({})", plan.kind()),
    };
    let (result, traced) = crate::trace::record(ops.trace_path.as_deref(), &name, || {
        plan.run(progress, cancel)
    });
    if let (Err(e), Some(p)) = (traced, &ops.trace_path) {
        warnings.push(format!(
            "debug_options.trace_path: {} not written: {e}",
            p.display()
        ));
    }
    (result, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(text: &str) -> Result<Ops, ConfigError> {
        Ops::from_config(text, "test.json", Path::new("/cfg"))
    }

    #[test]
    fn settings_are_read_from_both_debug_options_and_blindjoin_threads() {
        let o = ops(
            r#"{"psi_config": {"debug_options": {"logging_level": "DEBUG",
            "trace_path": "run.trace"}}, "blindjoin": {"threads": 3}}"#,
        )
        .unwrap();
        assert_eq!(
            o,
            Ops {
                threads: Some(3),
                logging_level: Some(Level::Debug),
                trace_path: Some(PathBuf::from("/cfg/run.trace")),
            }
        );
        let o = ops(
            r#"{"ub_psi_config": {"debug_options": {"logging_level": "err",
            "trace_path": "/t/x.trace"}}, "blindjoin": {"threads": "2"},}"#,
        )
        .unwrap();
        assert_eq!(o.logging_level, Some(Level::Error));
        assert_eq!(o.trace_path, Some(PathBuf::from("/t/x.trace")));
        assert_eq!(o.threads, Some(2));
        assert_eq!(ops("{}").unwrap(), Ops::default());
        let o = ops(r#"{"psi_config": {"debug_options": {"trace_path": ""}},
            "blindjoin": {"threads": 0}}"#)
        .unwrap();
        assert_eq!(o, Ops::default());
    }

    #[test]
    fn bad_settings_name_their_field() {
        for (text, field) in [
            (
                r#"{"psi_config": {"debug_options": {"logging_level": "loud"}}}"#,
                "psi_config.debug_options.logging_level",
            ),
            (
                r#"{"ub_psi_config": {"debug_options": {"trace_path": 5}}}"#,
                "ub_psi_config.debug_options.trace_path",
            ),
            (r#"{"blindjoin": {"threads": -1}}"#, "blindjoin.threads"),
            (r#"{"blindjoin": {"threads": 1025}}"#, "blindjoin.threads"),
            (r#"{"blindjoin": {"threads": "many"}}"#, "blindjoin.threads"),
        ] {
            let e = ops(text).unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
    }

    #[test]
    fn the_pool_takes_the_count_asked_for_once_and_warns_on_a_different_one() {
        // The global pool is the process's: this is the only test in the crate that builds it
        // explicitly. Another test may have built it first (with the default count): then the
        // first call warns unless the counts agree, and either way a second count is refused.
        let first = apply_threads(Some(2));
        if first.is_none() {
            assert_eq!(rayon::current_num_threads(), 2);
        }
        let n = rayon::current_num_threads();
        assert!(apply_threads(Some(n)).is_none());
        let w = apply_threads(Some(n + 1)).unwrap();
        assert!(w.contains("already built"), "{w}");
        assert!(apply_threads(None).is_none());
    }
}
