//! `blindjoin._native`: the PyO3 extension module behind the `blindjoin` Python package.
//!
//! Thin by design: it parses a SecretFlow PSI v2 launch config with
//! [`blindjoin_data::parse_launch_config`] and runs it with [`blindjoin_data::run`], exactly as
//! `blindjoin run --config` does. Everything else (dicts, `psi_csv`, in-memory tables) lives in
//! `python/blindjoin/__init__.py`.
//!
//! The run happens on its own thread; the calling thread releases the GIL and wakes every
//! 100 ms to check for signals, so Ctrl-C raises `KeyboardInterrupt` promptly. The run thread is
//! then left to finish or fail on its own (its peer sees the connection close or time out).

mod error;

use blindjoin_data::{Progress, RunSpec};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// As the CLI: huge pages for the protocols' large buffers.
#[global_allocator]
static ALLOC: blindjoin_alloc::HugePageAlloc = blindjoin_alloc::HugePageAlloc;

/// How often the waiting thread checks for Ctrl-C.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// Forwards stage starts to a Python callable `(stage, total, elapsed_ms)`. The GIL is taken only
/// when a stage starts, never per item.
struct PyProgress {
    callback: Option<Py<PyAny>>,
    start: Instant,
}

impl Progress for PyProgress {
    fn stage(&self, name: &'static str, total: u64) {
        if let Some(cb) = &self.callback {
            let elapsed_ms = self.start.elapsed().as_millis() as u64;
            Python::attach(|py| {
                if let Err(e) = cb.call1(py, (name, total, elapsed_ms)) {
                    // A broken callback must not kill the run; report it like Python would.
                    e.write_unraisable(py, Some(cb.bind(py)));
                }
            });
        }
    }

    fn advance(&self, _: u64) {}
}

/// Parses a launch config (JSON text) and returns the warnings and the validated spec.
fn parse(
    config_json: &str,
    source: &str,
    base_dir: PathBuf,
    report_path: Option<PathBuf>,
) -> PyResult<RunSpec> {
    let mut spec = blindjoin_data::parse_launch_config(config_json, source, &base_dir)
        .map_err(|e| error::config_err(&e))?;
    if report_path.is_some() {
        spec.report = report_path;
    }
    Ok(spec)
}

/// Validates a SecretFlow PSI v2 launch config without running it; returns its warnings.
#[pyfunction]
#[pyo3(signature = (config_json, source, base_dir))]
fn check_config(config_json: &str, source: &str, base_dir: PathBuf) -> PyResult<Vec<String>> {
    Ok(parse(config_json, source, base_dir, None)?.warnings)
}

/// Runs one party from a SecretFlow PSI v2 launch config (JSON text).
///
/// Returns `(report_json, warnings)`. Relative paths in the config resolve against `base_dir`.
#[pyfunction]
#[pyo3(signature = (config_json, source, base_dir, report_path=None, progress=None, on_warning=None))]
fn run_config(
    py: Python<'_>,
    config_json: &str,
    source: &str,
    base_dir: PathBuf,
    report_path: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
    on_warning: Option<Py<PyAny>>,
) -> PyResult<String> {
    let spec = parse(config_json, source, base_dir, report_path)?;
    if let Some(cb) = &on_warning {
        for w in &spec.warnings {
            cb.call1(py, (w.as_str(),))?;
        }
    }
    let progress = PyProgress {
        callback: progress,
        start: Instant::now(),
    };
    let (tx, mut rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("blindjoin-run".into())
        .spawn(move || {
            let result = blindjoin_data::run(&spec, &progress);
            let _ = tx.send(result);
        })
        .map_err(|e| error::Error::new_err(format!("cannot start the run thread: {e}")))?;
    loop {
        // `Receiver` is not `Sync`, so it moves into the detached closure and back out.
        let (received, back) = py.detach(move || (rx.recv_timeout(SIGNAL_POLL), rx));
        rx = back;
        match received {
            Ok(Ok(report)) => {
                return serde_json::to_string(&report).map_err(|e| {
                    error::Error::new_err(format!("internal error: cannot encode the report: {e}"))
                });
            }
            Ok(Err(e)) => return Err(error::data_err(&e)),
            Err(mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(error::Error::new_err(
                    "internal error: the run thread ended without a result; please report this bug",
                ));
            }
        }
    }
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_config, m)?)?;
    m.add_function(wrap_pyfunction!(check_config, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    error::register(m)
}
