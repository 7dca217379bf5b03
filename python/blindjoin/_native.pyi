"""Type stubs for the Rust extension module ``blindjoin._native`` (crates/py)."""

from typing import Callable, List, Optional, Tuple

__version__: str

class Error(Exception):
    """Base class of every error blindjoin raises (except FileNotFoundError for a missing input)."""

class ConfigError(Error):
    """The config or arguments are wrong; the message names the field."""

class InputError(Error):
    """The input table is malformed or lacks a key column; the message names file, line and column."""

class OutputError(Error):
    """An output could not be written (disk full, permissions, a value the output format cannot hold)."""

class LinkError(Error):
    """The network link failed: cannot listen, peer not reachable in time, connection lost, timeout."""

class PeerError(Error):
    """The peer failed (it aborted with a reason), disagrees on settings, or misbehaved."""

class ProtocolError(Error):
    """The protocol failed locally (curve error, unsupported option, internal error)."""

class CacheError(Error):
    """An unbalanced-PSI cache or key file is missing, damaged, stale or unsafe, or the server's
    input changed since its cache was made; the message names the file and the fix."""

class CancelToken:
    """Cancels the runs it is passed to (``cancel=``) from another thread.

    A cancelled run stops connecting or wakes from its blocked receive, sends the peer an abort
    carrying the reason, writes no output, and its call raises KeyboardInterrupt. Local
    computation between two messages is not interrupted: the run stops at its next receive.
    """

    def __init__(self) -> None: ...
    def cancel(self, reason: Optional[str] = None) -> None:
        """Cancel; ``reason`` (default "the peer cancelled the run (Ctrl-C)") goes to the peer."""
    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""

def check_config(config_json: str, source: str, base_dir: str) -> Tuple[str, List[str]]:
    """Validate a launch config of any kind; return its kind ("two-party", "three-party" or
    "unbalanced") and its warnings, or raise ConfigError."""

def run_config(
    config_json: str,
    source: str,
    base_dir: str,
    report_path: Optional[str] = None,
    progress: Optional[Callable[[str, int, int], None]] = None,
    on_warning: Optional[Callable[[str], None]] = None,
    cancel: Optional[CancelToken] = None,
    threads: Optional[int] = None,
    logging_level: Optional[str] = None,
) -> str:
    """Run one party from a launch config (JSON text); return the report as JSON text.

    The config is told apart as ``blindjoin run --config`` does: three-party
    (``PROTOCOL_ECDH_3PC``), unbalanced (``ub_psi_config``), else two-party.

    Relative paths in the config resolve against ``base_dir``. ``progress(stage, total,
    elapsed_ms)`` is called when a stage starts; ``on_warning(message)`` once per config warning.
    Releases the GIL. Ctrl-C cancels the run (the peer gets an abort naming the cancel, no output
    is written) and raises KeyboardInterrupt once the run thread has closed its link (at most
    about 4 s). ``cancel.cancel()`` from another thread does the same.
    """

class Plan:
    """One party's run, built in Rust (from a launch config or from a ``psi_csv`` call)."""

    @property
    def kind(self) -> str:
        """"two-party", "three-party" or "unbalanced"."""
    @property
    def warnings(self) -> List[str]:
        """The plan's warnings."""

def plan_from_config(
    config_json: str, source: str, base_dir: str, report_path: Optional[str] = None
) -> Plan:
    """The plan of a launch config (JSON text), or raise ConfigError."""

def psi_csv_plan(
    self_party: str,
    parties: List[Tuple[str, str]],
    receiver: str,
    keys: List[str],
    input_path: str,
    output_path: Optional[str],
    protocol: str,
    curve: str,
    broadcast_result: bool,
    sort: bool,
    bucket_size: Optional[int] = None,
    connect_timeout_ms: Optional[int] = None,
    recv_timeout_ms: Optional[int] = None,
    report_path: Optional[str] = None,
    rr22_mode: Optional[str] = None,
) -> Plan:
    """The plan of one party of SecretFlow's ``psi_csv`` call (SecretFlow's protocol names are
    mapped in Rust), or raise ConfigError."""

def run_plan(
    plan: Plan,
    progress: Optional[Callable[[str, int, int], None]] = None,
    on_warning: Optional[Callable[[str], None]] = None,
    cancel: Optional[CancelToken] = None,
    threads: Optional[int] = None,
    logging_level: Optional[str] = None,
) -> str:
    """Run a plan; return the report as JSON text. Raises as run_config."""
