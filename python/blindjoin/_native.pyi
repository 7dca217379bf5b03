"""Type stubs for the Rust extension module ``blindjoin._native`` (crates/py)."""

from typing import Callable, List, Optional

__version__: str

class Error(Exception):
    """Base class of every error blindjoin raises (except FileNotFoundError for a missing input)."""

class ConfigError(Error):
    """The config or arguments are wrong; the message names the field."""

class InputError(Error):
    """The input table is malformed or lacks a key column; the message names file, line and column."""

class LinkError(Error):
    """The network link failed: cannot listen, peer not reachable in time, connection lost, timeout."""

class PeerError(Error):
    """The peer failed (it aborted with a reason), disagrees on settings, or misbehaved."""

class ProtocolError(Error):
    """The protocol failed locally (curve error, unsupported option, internal error)."""

def check_config(config_json: str, source: str, base_dir: str) -> List[str]:
    """Validate a SecretFlow PSI v2 launch config; return its warnings or raise ConfigError."""

def run_config(
    config_json: str,
    source: str,
    base_dir: str,
    report_path: Optional[str] = None,
    progress: Optional[Callable[[str, int, int], None]] = None,
    on_warning: Optional[Callable[[str], None]] = None,
) -> str:
    """Run one party from a launch config (JSON text); return the report as JSON text.

    Relative paths in the config resolve against ``base_dir``. ``progress(stage, total,
    elapsed_ms)`` is called when a stage starts; ``on_warning(message)`` once per config warning.
    Releases the GIL; Ctrl-C raises KeyboardInterrupt within 100 ms (the native run thread is left
    to finish or fail on its own).
    """
