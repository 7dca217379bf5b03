"""blindjoin: private set intersection between organisations.

Thin Python layer over the Rust ``blindjoin`` engine. Each party calls one of these functions in
its own process (usually on its own machine); the two calls meet over TCP.

- :func:`run` -- a SecretFlow PSI v2 launch config (dict, JSON text or file), as
  ``blindjoin run --config``.
- :func:`psi_csv` -- SecretFlow's ``spu.psi_csv(...)`` arguments, for one party.
- :func:`intersect` -- in-memory rows (list of dicts, or a pandas DataFrame).

Errors: :class:`Error` and its subclasses :class:`ConfigError`, :class:`InputError`,
:class:`LinkError`, :class:`PeerError`, :class:`ProtocolError`; a missing input file raises
:class:`FileNotFoundError`. Messages are the ones the CLI prints.

Progress: pass ``progress=callable(stage: str, total: int, elapsed_ms: int)``, called when a stage
starts (never per item), or enable INFO logging on the ``"blindjoin"`` logger. Config warnings go
to that logger at WARNING level.

Ctrl-C: the run happens on a native thread while the calling thread waits with the GIL released
and checks for signals every 100 ms, so Ctrl-C raises :class:`KeyboardInterrupt` promptly. The
native run thread is *not* cancelled: it keeps going until it finishes or fails on its own (the
peer sees the run end at its receive timeout, or when this process exits). Exit the process after
an interrupt if you need the ports freed at once.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _native
from ._native import (
    ConfigError,
    Error,
    InputError,
    LinkError,
    PeerError,
    ProtocolError,
)

__all__ = [
    "run",
    "check_config",
    "psi_csv",
    "intersect",
    "Error",
    "ConfigError",
    "InputError",
    "LinkError",
    "PeerError",
    "ProtocolError",
    "__version__",
]

__version__: str = _native.__version__

_log = logging.getLogger("blindjoin")

ProgressCallback = Callable[[str, int, int], None]
PathLike = Union[str, "os.PathLike[str]"]
Config = Union[Mapping[str, Any], str, "os.PathLike[str]"]


def _config_text(config: Config) -> "tuple[str, str, str]":
    """(json_text, source_name, base_dir) for a dict, JSON text or a path to a JSON file."""
    if isinstance(config, Mapping):
        return json.dumps(config), "<config dict>", os.getcwd()
    if isinstance(config, str) and config.lstrip().startswith("{"):
        return config, "<config string>", os.getcwd()
    if isinstance(config, (str, os.PathLike)):
        path = Path(config)
        text = path.read_text(encoding="utf-8")  # FileNotFoundError if missing
        return text, str(path), str(path.resolve().parent)
    raise TypeError(
        f"config must be a dict, a JSON string or a path to a JSON file, not {type(config).__name__}"
    )


def _log_progress(stage: str, total: int, elapsed_ms: int) -> None:
    _log.info("%s (%d items) at %.2f s", stage, total, elapsed_ms / 1000)


def run(
    config: Config,
    *,
    report_path: Optional[PathLike] = None,
    progress: Optional[ProgressCallback] = None,
) -> Dict[str, Any]:
    """Run this party of a two-party PSI from a SecretFlow PSI v2 launch config.

    ``config`` is a dict, a JSON string, or a path to a JSON file (the format of
    ``blindjoin run --config``; see ``docs/config.md``). Relative paths inside it resolve against
    the current directory (dict or string) or the file's directory (path).

    ``report_path`` overrides where the JSON report is written (default: ``<output>.report.json``
    or ``blindjoin.report_path``). Returns the report as a dict: SecretFlow's ``original_count``,
    ``intersection_count`` (-1 if this party does not receive the result), plus blindjoin's fields.

    Blocks until the run ends; the GIL is released meanwhile. Raises :class:`Error` subclasses.
    """
    text, source, base = _config_text(config)
    if progress is None and _log.isEnabledFor(logging.INFO):
        progress = _log_progress
    report = _native.run_config(
        text,
        source,
        base,
        report_path=os.fspath(report_path) if report_path is not None else None,
        progress=progress,
        on_warning=_log.warning,
    )
    result: Dict[str, Any] = json.loads(report)
    return result


def check_config(config: Config) -> List[str]:
    """Validate a launch config without running it. Returns its warnings; raises ConfigError."""
    text, source, base = _config_text(config)
    return list(_native.check_config(text, source, base))


# SecretFlow `psi_csv` protocol names -> PSI v2 `protocol_config.protocol`. Names not listed pass
# through unchanged, so the Rust config parser reports them.
_SF_PROTOCOLS = {
    "ECDH_PSI_2PC": "PROTOCOL_ECDH",
    "PROTOCOL_ECDH": "PROTOCOL_ECDH",
    "KKRT_PSI_2PC": "PROTOCOL_KKRT",
    "PROTOCOL_KKRT": "PROTOCOL_KKRT",
    "RR22_PSI_2PC": "PROTOCOL_RR22",
    "RR22_FAST_PSI_2PC": "PROTOCOL_RR22",
    "RR22_LOWCOMM_PSI_2PC": "PROTOCOL_RR22",
    "PROTOCOL_RR22": "PROTOCOL_RR22",
}


def _for_party(value: Any, self_party: str) -> Any:
    """SecretFlow passes per-party dicts ({party: value}); take this party's entry."""
    if isinstance(value, Mapping):
        if self_party not in value:
            raise ConfigError(f"no entry for self_party {self_party!r} in {dict(value)!r}")
        return value[self_party]
    return value


def _protocol_config(
    protocol: str,
    role: str,
    broadcast_result: bool,
    *,
    curve: str,
    low_comm: bool = False,
    malicious: bool = False,
    bucket_size: Optional[int] = None,
) -> Dict[str, Any]:
    """``protocol_config`` of a v2 config: the curve for ECDH, the mode and buckets for RR22, the
    buckets for KKRT."""
    pc: Dict[str, Any] = {"protocol": protocol, "role": role, "broadcast_result": broadcast_result}
    if protocol == "PROTOCOL_RR22":
        rr22: Dict[str, Any] = {"low_comm_mode": low_comm}
        if malicious:
            rr22["malicious"] = True
        if bucket_size is not None:
            rr22["bucket_size"] = bucket_size
        pc["rr22_config"] = rr22
    elif protocol == "PROTOCOL_KKRT":
        if bucket_size is not None:
            pc["kkrt_config"] = {"bucket_size": bucket_size}
    else:
        pc["ecdh_config"] = {"curve": curve}
    return pc


def psi_csv(
    key: Union[str, Sequence[str], Mapping[str, Any]],
    input_path: Union[PathLike, Mapping[str, PathLike]],
    output_path: Union[PathLike, Mapping[str, PathLike], None],
    receiver: str,
    *,
    self_party: str,
    parties: Mapping[str, str],
    protocol: str = "ECDH_PSI_2PC",
    curve_type: str = "CURVE_25519",
    broadcast_result: bool = True,
    sort: bool = True,
    precheck_input: Optional[bool] = None,
    bucket_size: Optional[int] = None,
    report_path: Optional[PathLike] = None,
    progress: Optional[ProgressCallback] = None,
    **ignored_legacy: Any,
) -> Dict[str, Any]:
    """One party's side of SecretFlow's ``spu.psi_csv(...)``.

    ``parties`` maps each party id to its ``"host:port"``; ``self_party`` is this process's id and
    ``receiver`` the id of the party that receives the result. ``key``, ``input_path`` and
    ``output_path`` are this party's (a SecretFlow-style ``{party: value}`` dict also works).
    ``sort=True`` aligns both outputs row by row. ``protocol`` takes SecretFlow's names
    (``ECDH_PSI_2PC``, ``RR22_PSI_2PC`` / ``RR22_FAST_PSI_2PC``, ``RR22_LOWCOMM_PSI_2PC``) or the
    v2 ones; ``bucket_size`` sets RR22's keys per bucket (default 2^20). ``precheck_input`` is
    accepted for compatibility and ignored (the input is always validated); other legacy keyword
    arguments are ignored with a warning on the ``"blindjoin"`` logger.

    Builds the PSI v2 launch config and calls :func:`run`; returns the report dict.
    """
    if ignored_legacy:
        _log.warning("psi_csv: ignoring unsupported arguments: %s", ", ".join(sorted(ignored_legacy)))
    _ = precheck_input
    keys = _for_party(key, self_party)
    keys = [keys] if isinstance(keys, str) else list(keys)
    inp = os.fspath(_for_party(input_path, self_party))
    out = _for_party(output_path, self_party)
    if self_party not in parties:
        raise ConfigError(f"self_party {self_party!r} is not one of the parties {sorted(parties)}")
    if receiver not in parties:
        raise ConfigError(f"receiver {receiver!r} is not one of the parties {sorted(parties)}")
    role = "ROLE_RECEIVER" if self_party == receiver else "ROLE_SENDER"
    psi: Dict[str, Any] = {
        "protocol_config": _protocol_config(
            _SF_PROTOCOLS.get(protocol, protocol),
            role,
            broadcast_result,
            curve=curve_type,
            low_comm=protocol == "RR22_LOWCOMM_PSI_2PC",
            bucket_size=bucket_size,
        ),
        "input_config": {"type": "IO_TYPE_FILE_CSV", "path": inp},
        "keys": keys,
        "disable_alignment": not sort,
    }
    if out is not None:
        psi["output_config"] = {"type": "IO_TYPE_FILE_CSV", "path": os.fspath(out)}
    config = {
        "psi_config": psi,
        "link_config": {"parties": [{"id": p, "host": h} for p, h in parties.items()]},
        "self_link_party": self_party,
    }
    return run(config, report_path=report_path, progress=progress)


_ROW_COLUMN = "__blindjoin_row__"


def _is_dataframe(obj: Any) -> bool:
    try:
        import pandas as pd  # type: ignore[import-not-found]
    except ImportError:
        return False
    return isinstance(obj, pd.DataFrame)


def _key_text(value: Any) -> str:
    return "" if value is None else str(value)


def intersect(
    rows_or_table: Any,
    *,
    keys: Union[str, Sequence[str]],
    role: str,
    self_addr: str,
    peer_addr: str,
    curve: str = "CURVE_25519",
    protocol: str = "PROTOCOL_ECDH",
    rr22_mode: str = "fast",
    broadcast_result: bool = True,
    self_id: Optional[str] = None,
    peer_id: Optional[str] = None,
    connect_timeout_ms: Optional[int] = None,
    recv_timeout_ms: Optional[int] = None,
    progress: Optional[ProgressCallback] = None,
    return_report: bool = False,
) -> Any:
    """Private intersection of in-memory rows with the peer's.

    ``rows_or_table`` is a list of dicts, or a pandas DataFrame (pandas is optional). ``role`` is
    ``"receiver"`` or ``"sender"``; ``self_addr``/``peer_addr`` are ``"host:port"``. ``protocol``
    is ``"PROTOCOL_ECDH"`` (with ``curve``), ``"PROTOCOL_RR22"`` (with ``rr22_mode`` ``"fast"``,
    ``"low_comm"`` or ``"malicious"``) or ``"PROTOCOL_KKRT"``; both parties must pass the same. Party ids
    default to the role names (``"receiver"``/``"sender"``); both sides must agree on them.

    Only the key columns leave Python: they are written as text (``str(value)``, ``None`` -> empty,
    which is an error) to a temporary CSV together with a row number, the run is the same as
    :func:`run`, and the rows of the intersection are picked from the input by row number. So the
    result is the same type as the input with the original values and dtypes: the input's rows whose
    keys are in the intersection, sorted by key. With ``broadcast_result`` (the default) the two
    results are the SQL inner join row by row: a row whose key the peer holds ``b`` times appears
    ``b`` times, so ``zip(mine, theirs)`` gives every matching pair. Without it the receiver gets
    each matching row once. Keys compare as text, so both parties must format them the same way
    (``1`` and ``1.0`` differ).

    Returns ``None`` for a sender with ``broadcast_result=False`` (it learns nothing). With
    ``return_report=True`` returns ``(result, report)``.
    """
    key_list = [keys] if isinstance(keys, str) else list(keys)
    if not key_list:
        raise ConfigError("keys: empty; name the key column(s)")
    if role not in ("receiver", "sender"):
        raise ConfigError(f"role: {role!r}; use 'receiver' or 'sender'")
    if rr22_mode not in ("fast", "low_comm", "malicious"):
        raise ConfigError(f"rr22_mode: {rr22_mode!r}; use 'fast', 'low_comm' or 'malicious'")
    if _ROW_COLUMN in key_list:
        raise ConfigError(f"keys: {_ROW_COLUMN!r} is reserved")
    other = "sender" if role == "receiver" else "receiver"
    me, peer = self_id or role, peer_id or other
    is_df = _is_dataframe(rows_or_table)
    if is_df:
        df = rows_or_table
        missing = [k for k in key_list if k not in df.columns]
        key_columns = [[_key_text(v) for v in df[k].tolist()] for k in key_list] if not missing else []
        n = len(df)
    else:
        rows = list(rows_or_table)
        n = len(rows)
        present = set().union(*(r.keys() for r in rows)) if rows else set()
        missing = [k for k in key_list if k not in present]
        key_columns = [[_key_text(r.get(k)) for r in rows] for k in key_list] if not missing else []
    learns = role == "receiver" or broadcast_result

    with tempfile.TemporaryDirectory(prefix="blindjoin-") as tmp:
        inp = os.path.join(tmp, "input.csv")
        out = os.path.join(tmp, "output.csv")
        with open(inp, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            # A missing key column stays missing in the file, so Rust reports it by name.
            w.writerow([k for k in key_list if k not in missing] + [_ROW_COLUMN])
            for i in range(n):
                w.writerow([col[i] for col in key_columns] + [i])
        psi: Dict[str, Any] = {
            "protocol_config": _protocol_config(
                _SF_PROTOCOLS.get(protocol, protocol),
                "ROLE_RECEIVER" if role == "receiver" else "ROLE_SENDER",
                broadcast_result,
                curve=curve,
                low_comm=rr22_mode == "low_comm",
                malicious=rr22_mode == "malicious",
            ),
            "input_config": {"type": "IO_TYPE_FILE_CSV", "path": inp},
            "keys": key_list,
        }
        if learns:
            psi["output_config"] = {"type": "IO_TYPE_FILE_CSV", "path": out}
        link: Dict[str, Any] = {"parties": [{"id": me, "host": self_addr}, {"id": peer, "host": peer_addr}]}
        if recv_timeout_ms is not None:
            link["recv_timeout_ms"] = recv_timeout_ms
        config: Dict[str, Any] = {"psi_config": psi, "link_config": link, "self_link_party": me}
        if connect_timeout_ms is not None:
            config["blindjoin"] = {"connect_timeout_ms": connect_timeout_ms}
        report = run(config, report_path=os.path.join(tmp, "report.json"), progress=progress)
        result: Any = None
        if learns:
            with open(out, newline="", encoding="utf-8") as f:
                picked = [int(r[_ROW_COLUMN]) for r in csv.DictReader(f)]
            if is_df:
                result = rows_or_table.iloc[picked]  # keeps the original index
            else:
                result = [rows[i] for i in picked]
    report["output_path"] = None  # the temporary file is gone
    return (result, report) if return_report else result
