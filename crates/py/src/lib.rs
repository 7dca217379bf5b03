//! `blindjoin._native`: the PyO3 extension module behind the `blindjoin` Python package.
//!
//! Thin by design: it builds a [`blindjoin_data::Plan`] from a launch config
//! ([`blindjoin_data::Plan::from_config`]) or from the arguments of SecretFlow's `psi_csv`
//! ([`blindjoin_data::psi_csv_plan`]), and runs it with [`blindjoin_data::Plan::run`], as
//! `blindjoin run` does. Everything else (dicts, which parties run in this process, in-memory
//! tables) lives in `python/blindjoin/__init__.py`.
//!
//! The run happens on its own thread; the calling thread releases the GIL and wakes every
//! 100 ms to check for signals. On Ctrl-C it cancels the run ([`blindjoin_data::Cancel`]): the
//! run thread sends the peer an abort naming the cancel and drops its link, the calling thread
//! waits for that (bounded by [`CANCEL_GRACE`]) and then raises `KeyboardInterrupt`.

mod error;

use blindjoin_data::ops::Ops;
use blindjoin_data::{Envelope, Outcome, Plan, Progress, RunError};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// As the CLI: large blocks reused (given back after each run), huge pages opt-in.
#[global_allocator]
static ALLOC: blindjoin_alloc::HugePageAlloc = blindjoin_alloc::HugePageAlloc;

/// How often the waiting thread checks for Ctrl-C.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// How long a cancelled run gets to tell its peer and close, before its sockets are severed.
const CANCEL_GRACE: Duration = Duration::from_secs(3);

/// How long to wait after severing; a run thread stuck in local computation is then left behind.
const SEVER_GRACE: Duration = Duration::from_secs(1);

/// The abort reason the peer sees when this party is interrupted.
const CTRL_C_REASON: &str = "the peer cancelled the run (Ctrl-C)";

/// A handle that cancels a run from another Python thread (`blindjoin._native.CancelToken`).
/// `blindjoin.psi_csv` uses it to stop every party of a one-process run on Ctrl-C.
#[pyclass(frozen)]
struct CancelToken {
    cancel: blindjoin_data::Cancel,
}

#[pymethods]
impl CancelToken {
    #[new]
    fn new() -> Self {
        CancelToken {
            cancel: blindjoin_data::Cancel::new(),
        }
    }

    /// Cancels the run(s) using this token; `reason` is sent to the peer in the abort.
    #[pyo3(signature = (reason=None))]
    fn cancel(&self, reason: Option<&str>) {
        self.cancel.cancel(reason.unwrap_or(CTRL_C_REASON));
    }

    /// Whether `cancel` was called.
    #[getter]
    fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

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

/// Parses a launch config (JSON text) of any kind, once, into its plan and its process-wide
/// settings; `report_path` overrides its report path.
fn parse(
    config_json: &str,
    source: &str,
    base_dir: PathBuf,
    report_path: Option<PathBuf>,
) -> PyResult<(Plan, Ops)> {
    let env = Envelope::parse(config_json, source, &base_dir).map_err(|e| error::config_err(&e))?;
    let mut parsed = Plan::from_envelope(&env).map_err(|e| error::config_err(&e))?;
    let ops = Ops::of(&env).map_err(|e| error::config_err(&e))?;
    if let Some(p) = report_path {
        parsed.set_report(p);
    }
    Ok((parsed, ops))
}

/// A run plan built in Rust (`blindjoin._native.Plan`): from a launch config
/// ([`plan_from_config`]) or from a `psi_csv` call ([`psi_csv_plan`]); run it with [`run_plan`].
#[pyclass(frozen, name = "Plan")]
struct PyPlan {
    plan: Plan,
}

#[pymethods]
impl PyPlan {
    /// `"two-party"`, `"three-party"`, `"n-party"` (n-party PSI and DP-PSI), `"unbalanced"` or
    /// `"labeled-psi"`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.plan.kind()
    }

    /// The plan's warnings.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.plan.warnings().to_vec()
    }
}

/// The plan of a launch config (JSON text); `report_path` overrides its report path.
#[pyfunction]
#[pyo3(signature = (config_json, source, base_dir, report_path=None))]
fn plan_from_config(
    config_json: &str,
    source: &str,
    base_dir: PathBuf,
    report_path: Option<PathBuf>,
) -> PyResult<PyPlan> {
    Ok(PyPlan {
        plan: parse(config_json, source, base_dir, report_path)?.0,
    })
}

/// The plan of one party of SecretFlow's `psi_csv(...)` call: `parties` lists every party with
/// the address this party uses for it, in the call's order. Every protocol name SecretFlow's
/// `psi_csv` takes is mapped in Rust ([`blindjoin_data::psi_csv_plan`]): two-party, three-party
/// and n-party (the receiver is `receiver`), DP-PSI (with `dppsi_*`) and unbalanced (with
/// `preprocess_path`, `ecdh_secret_key_path`).
#[pyfunction]
#[pyo3(signature = (self_party, parties, receiver, keys, input_path, output_path, protocol, curve, broadcast_result, sort, bucket_size=None, connect_timeout_ms=None, recv_timeout_ms=None, report_path=None, rr22_mode=None, precheck=false, preprocess_path=None, ecdh_secret_key_path=None, dppsi_bob_sub_sampling=None, dppsi_epsilon=None))]
#[allow(clippy::too_many_arguments)] // the Python signature: psi_csv's arguments
fn psi_csv_plan(
    self_party: String,
    parties: Vec<(String, String)>,
    receiver: String,
    keys: Vec<String>,
    input_path: PathBuf,
    output_path: Option<PathBuf>,
    protocol: String,
    curve: String,
    broadcast_result: bool,
    sort: bool,
    bucket_size: Option<u64>,
    connect_timeout_ms: Option<u64>,
    recv_timeout_ms: Option<u64>,
    report_path: Option<PathBuf>,
    rr22_mode: Option<&str>,
    precheck: bool,
    preprocess_path: Option<PathBuf>,
    ecdh_secret_key_path: Option<PathBuf>,
    dppsi_bob_sub_sampling: Option<f64>,
    dppsi_epsilon: Option<f64>,
) -> PyResult<PyPlan> {
    let rr22_mode = match rr22_mode {
        None => None,
        Some("fast") => Some(blindjoin_data::Rr22Mode::Fast),
        Some("low_comm") => Some(blindjoin_data::Rr22Mode::LowComm),
        Some("malicious") => Some(blindjoin_data::Rr22Mode::Malicious),
        Some(other) => {
            return Err(error::ConfigError::new_err(format!(
                "rr22_mode: {other:?}; use 'fast', 'low_comm' or 'malicious'"
            )));
        }
    };
    let plan = blindjoin_data::psi_csv_plan(blindjoin_data::PsiCsvCall {
        self_party,
        parties,
        receiver,
        keys,
        input: input_path,
        output: output_path,
        protocol,
        curve,
        rr22_mode,
        broadcast_result,
        sort,
        bucket_size,
        connect_timeout: connect_timeout_ms.map(Duration::from_millis),
        recv_timeout: recv_timeout_ms.map(Duration::from_millis),
        report: report_path,
        precheck,
        preprocess_path,
        ecdh_secret_key_path,
        dppsi_bob_sub_sampling,
        dppsi_epsilon,
    })
    .map_err(|e| error::config_err(&e))?;
    Ok(PyPlan { plan })
}

/// Validates a launch config of any kind without running it; returns its kind (`"two-party"`,
/// `"three-party"`, `"n-party"`, `"unbalanced"` or `"labeled-psi"`) and its warnings.
#[pyfunction]
#[pyo3(signature = (config_json, source, base_dir))]
fn check_config(
    config_json: &str,
    source: &str,
    base_dir: PathBuf,
) -> PyResult<(&'static str, Vec<String>)> {
    let (parsed, _) = parse(config_json, source, base_dir, None)?;
    Ok((parsed.kind(), parsed.warnings().to_vec()))
}

/// Runs one party from a launch config (JSON text) of any kind: two-party, three-party, n-party
/// or DP-PSI, unbalanced, labeled PSI.
///
/// Returns the report as JSON text. Relative paths in the config resolve against `base_dir`.
/// `cancel` lets another thread stop the run (it then raises `KeyboardInterrupt`).
#[pyfunction]
#[pyo3(signature = (config_json, source, base_dir, report_path=None, progress=None, on_warning=None, cancel=None, threads=None, logging_level=None))]
#[allow(clippy::too_many_arguments)] // the Python signature: keyword arguments with defaults
fn run_config(
    py: Python<'_>,
    config_json: &str,
    source: &str,
    base_dir: PathBuf,
    report_path: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
    on_warning: Option<Py<PyAny>>,
    cancel: Option<Py<CancelToken>>,
    threads: Option<usize>,
    logging_level: Option<&str>,
) -> PyResult<String> {
    let (plan, ops) = parse(config_json, source, base_dir, report_path)?;
    let ops = with_kwargs(ops, threads, logging_level)?;
    run_owned(py, plan, ops, progress, on_warning, cancel)
}

/// `threads=` and `logging_level=` over the config's settings.
fn with_kwargs(mut ops: Ops, threads: Option<usize>, logging_level: Option<&str>) -> PyResult<Ops> {
    if let Some(n) = threads {
        if n == 0 || n > blindjoin_data::ops::MAX_THREADS {
            return Err(error::config_err(&blindjoin_data::ConfigError::Invalid {
                field: "threads".into(),
                message: format!(
                    "expected 1 to {}, got {n}",
                    blindjoin_data::ops::MAX_THREADS
                ),
            }));
        }
        ops.threads = Some(n);
    }
    if let Some(l) = logging_level {
        ops.logging_level = Some(
            blindjoin_data::ops::parse_level(l, "logging_level")
                .map_err(|e| error::config_err(&e))?,
        );
    }
    Ok(ops)
}

/// Runs a plan from [`plan_from_config`] or [`psi_csv_plan`]; the report as JSON text. As
/// [`run_config`] otherwise.
#[pyfunction]
#[pyo3(signature = (plan, progress=None, on_warning=None, cancel=None, threads=None, logging_level=None))]
#[allow(clippy::too_many_arguments)] // the Python signature: keyword arguments with defaults
fn run_plan(
    py: Python<'_>,
    plan: &PyPlan,
    progress: Option<Py<PyAny>>,
    on_warning: Option<Py<PyAny>>,
    cancel: Option<Py<CancelToken>>,
    threads: Option<usize>,
    logging_level: Option<&str>,
) -> PyResult<String> {
    let ops = with_kwargs(Ops::default(), threads, logging_level)?;
    run_owned(py, plan.plan.clone(), ops, progress, on_warning, cancel)
}

/// Reports the plan's warnings, then runs it on its own thread while this one waits without
/// the GIL (see the module docs).
fn run_owned(
    py: Python<'_>,
    parsed: Plan,
    ops: Ops,
    progress: Option<Py<PyAny>>,
    on_warning: Option<Py<PyAny>>,
    cancel: Option<Py<CancelToken>>,
) -> PyResult<String> {
    // Process-wide settings, before the run's thread starts any parallel work.
    let pool = blindjoin_data::ops::apply_threads(ops.threads);
    if let Some(level) = ops.logging_level {
        blindjoin_data::log::set_level(level);
    }
    if let Some(cb) = &on_warning {
        for w in parsed.warnings().iter().chain(pool.as_ref()) {
            cb.call1(py, (w.as_str(),))?;
        }
    }
    let progress = PyProgress {
        callback: progress,
        start: Instant::now(),
    };
    let cancel = match &cancel {
        Some(token) => token.get().cancel.clone(),
        None => blindjoin_data::Cancel::new(),
    };
    let (tx, rx) = mpsc::channel();
    let run_cancel = cancel.clone();
    std::thread::Builder::new()
        .name("blindjoin-run".into())
        .spawn(move || {
            let result = run_parsed(&parsed, &ops, &progress, &run_cancel);
            // This process lives on: give back the large blocks the allocator kept for reuse.
            blindjoin_alloc::trim_pool();
            let _ = tx.send(result);
        })
        .map_err(|e| error::Error::new_err(format!("cannot start the run thread: {e}")))?;
    wait_cancellable(py, rx, &cancel).and_then(finish)
}

/// Runs a plan with its settings (threads, level, trace), as `blindjoin run --config` does; the
/// report as JSON. A trace that cannot be written is a warning on stderr (this thread cannot
/// call Python).
fn run_parsed(
    plan: &Plan,
    ops: &Ops,
    progress: &dyn Progress,
    cancel: &blindjoin_data::Cancel,
) -> RunResult {
    let (result, notes) = blindjoin_data::ops::run_plan(plan, ops, progress, cancel);
    for n in notes {
        blindjoin_data::log::emit(blindjoin_data::log::Level::Warn, &format!("warning: {n}"));
    }
    let json = match result.map_err(Failure::Run)? {
        Outcome::TwoParty(r) => serde_json::to_string(&r),
        Outcome::ThreeParty(o) => serde_json::to_string(&o.report),
        Outcome::NParty(o) => serde_json::to_string(&o.report),
        Outcome::Unbalanced(r) => serde_json::to_string(&r),
        Outcome::Apsi(r) => serde_json::to_string(&r),
    };
    encoded(json)
}

/// A report encoded as JSON text.
fn encoded(json: serde_json::Result<String>) -> RunResult {
    json.map_err(|e| Failure::Encode(e.to_string()))
}

/// Why a run failed.
enum Failure {
    /// The run.
    Run(RunError),
    /// The report could not be encoded (a bug).
    Encode(String),
}

/// What the run thread sends back: the report as JSON text, or why it failed.
type RunResult = Result<String, Failure>;

/// Waits for a run thread's result without the GIL, checking for signals every
/// [`SIGNAL_POLL`]. On Ctrl-C (or any exception a signal handler raises) cancels the run, lets
/// it tell the peer, and re-raises the exception.
fn wait_cancellable<T: Send>(
    py: Python<'_>,
    mut rx: mpsc::Receiver<T>,
    cancel: &blindjoin_data::Cancel,
) -> PyResult<T> {
    loop {
        // `Receiver` is not `Sync`, so it moves into the detached closure and back out.
        let (received, back) = py.detach(move || (rx.recv_timeout(SIGNAL_POLL), rx));
        rx = back;
        match received {
            Ok(result) => return Ok(result),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(interrupt) = py.check_signals() {
                    cancel.cancel(CTRL_C_REASON);
                    let cancel = cancel.clone();
                    py.detach(move || drain_cancelled(&rx, &cancel));
                    return Err(interrupt);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(error::Error::new_err(
                    "internal error: the run thread ended without a result; please report this bug",
                ));
            }
        }
    }
}

/// After a cancel: gives the run thread [`CANCEL_GRACE`] to send its abort and close the link,
/// then severs the connection and waits [`SEVER_GRACE`] more. Bounded, so Ctrl-C always returns.
fn drain_cancelled<T>(rx: &mpsc::Receiver<T>, cancel: &blindjoin_data::Cancel) {
    if rx.recv_timeout(CANCEL_GRACE).is_err() {
        cancel.sever();
        let _ = rx.recv_timeout(SEVER_GRACE);
    }
}

/// The report as JSON text, or the run's error as a Python exception.
fn finish(result: RunResult) -> PyResult<String> {
    match result {
        Ok(json) => Ok(json),
        Err(Failure::Run(RunError::Data(e))) => Err(error::data_err(&e)),
        Err(Failure::Run(RunError::Unbalanced(e))) => Err(error::ub_err(&e)),
        Err(Failure::Encode(e)) => Err(error::Error::new_err(format!(
            "internal error: cannot encode the report: {e}"
        ))),
    }
}

/// One party's coordinator of a run whose partitions run as tasks of a scheduler (Ray):
/// `blindjoin.ray.run` drives it. See [`blindjoin_data::partition_job`].
#[pyclass(name = "Coordinator")]
struct PyCoordinator {
    inner: std::sync::Mutex<Option<blindjoin_data::partition_job::Coordinator>>,
}

type CoordinatorGuard<'a> =
    std::sync::MutexGuard<'a, Option<blindjoin_data::partition_job::Coordinator>>;

impl PyCoordinator {
    fn lock(&self) -> CoordinatorGuard<'_> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn finished_err() -> PyErr {
    error::Error::new_err("the coordinator has finished")
}

#[pymethods]
impl PyCoordinator {
    /// One job (bytes) per partition, for `run_partition`. They name the party's files:
    /// never log them.
    fn jobs(&self) -> PyResult<Vec<Vec<u8>>> {
        let g = self.lock();
        Ok(g.as_ref().ok_or_else(finished_err)?.jobs().to_vec())
    }

    /// The work folder (checkpoints, spill shards, the partitions' runs).
    #[getter]
    fn work_dir(&self) -> PyResult<PathBuf> {
        let g = self.lock();
        Ok(g.as_ref()
            .ok_or_else(finished_err)?
            .work_dir()
            .to_path_buf())
    }

    /// Says at once that this side's task of partition `p` failed, so that the peer's worker
    /// of `p` is stopped instead of waiting out its connect timeout (a stand-in greets it and
    /// aborts it; `retry_round` stops the stand-ins).
    fn worker_failed(&self, py: Python<'_>, p: u32) -> PyResult<()> {
        let mut g = self.lock();
        let c = g.as_mut().ok_or_else(finished_err)?;
        py.detach(|| c.worker_failed(p))
            .map_err(|e| error::data_err(&e))
    }

    /// Swaps this side's failed partitions with the peer's; returns `[(partition, attempt)]`
    /// to run again (empty: all finished on both sides).
    fn retry_round(&self, py: Python<'_>, failed: Vec<u32>) -> PyResult<Vec<(u32, u32)>> {
        let mut g = self.lock();
        let c = g.as_mut().ok_or_else(finished_err)?;
        py.detach(|| c.retry_round(&failed))
            .map_err(|e| error::data_err(&e))
    }

    /// Merges the partitions into the output and closes the link; the report as JSON text.
    /// `outcomes` are the tasks' JSON results.
    fn finish(&self, py: Python<'_>, outcomes: Vec<String>) -> PyResult<String> {
        let c = self.lock().take().ok_or_else(finished_err)?;
        let outcomes = outcomes
            .iter()
            .map(|o| serde_json::from_str(o))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| error::Error::new_err(format!("a partition's outcome: {e}")))?;
        let report = py
            .detach(move || c.finish(&outcomes))
            .map_err(|e| error::data_err(&e))?;
        encoded(serde_json::to_string(&report))
            .map_err(|_| error::Error::new_err("internal error: cannot encode the report"))
    }
}

/// Starts a scheduled run of a two-party launch config with `workers` partitions: reads the
/// table into the work folder, connects to the peer, agrees the run and the worker
/// endpoints. `work_parent`: where to make the private work folder when the config has no
/// `recovery_config`. Runs on a thread of its own, so Ctrl-C cancels it (the peer is told) as
/// it does a run.
#[pyfunction]
#[pyo3(signature = (config_json, source, base_dir, workers, work_parent=None))]
fn start_coordinator(
    py: Python<'_>,
    config_json: &str,
    source: &str,
    base_dir: PathBuf,
    workers: usize,
    work_parent: Option<PathBuf>,
) -> PyResult<PyCoordinator> {
    let (plan, _) = parse(config_json, source, base_dir, None)?;
    let spec = plan.scheduled().map_err(|e| error::config_err(&e))?;
    let cancel = blindjoin_data::Cancel::new();
    let (tx, rx) = mpsc::channel();
    let start_cancel = cancel.clone();
    std::thread::Builder::new()
        .name("blindjoin-coordinator".into())
        .spawn(move || {
            let _ = tx.send(blindjoin_data::partition_job::Coordinator::start(
                spec,
                workers,
                work_parent.as_deref(),
                &start_cancel,
            ));
        })
        .map_err(|e| {
            error::Error::new_err(format!("cannot start the coordinator's thread: {e}"))
        })?;
    let c = wait_cancellable(py, rx, &cancel)?.map_err(|e| error::data_err(&e))?;
    Ok(PyCoordinator {
        inner: std::sync::Mutex::new(Some(c)),
    })
}

/// Runs one partition job (from `Coordinator.jobs`) at `attempt` in this process; its outcome
/// as JSON text (for `Coordinator.finish`).
#[pyfunction]
fn run_partition(py: Python<'_>, job: Vec<u8>, attempt: u32) -> PyResult<String> {
    let outcome = py
        .detach(|| {
            let r = blindjoin_data::partition_job::run_partition_job(
                &job,
                attempt,
                &blindjoin_data::Cancel::new(),
            );
            blindjoin_alloc::trim_pool();
            r
        })
        .map_err(|e| error::data_err(&e))?;
    serde_json::to_string(&outcome)
        .map_err(|e| error::Error::new_err(format!("internal error: {e}")))
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    blindjoin_alloc::tune_system_allocator();
    m.add_function(wrap_pyfunction!(run_config, m)?)?;
    m.add_function(wrap_pyfunction!(check_config, m)?)?;
    m.add_function(wrap_pyfunction!(plan_from_config, m)?)?;
    m.add_function(wrap_pyfunction!(psi_csv_plan, m)?)?;
    m.add_function(wrap_pyfunction!(run_plan, m)?)?;
    m.add_class::<PyPlan>()?;
    m.add_class::<PyCoordinator>()?;
    m.add_function(wrap_pyfunction!(start_coordinator, m)?)?;
    m.add_function(wrap_pyfunction!(run_partition, m)?)?;
    m.add_class::<CancelToken>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    error::register(m)
}
