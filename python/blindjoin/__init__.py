"""blindjoin: private set intersection between organisations.

Thin Python layer over the Rust ``blindjoin`` engine. Each party calls one of these functions in
its own process (usually on its own machine); the two calls meet over TCP.

- :func:`run` -- a SecretFlow PSI launch config (dict, JSON text or file), as
  ``blindjoin run --config``: two-party (``psi_config``), three-party (``psi_config`` with
  ``PROTOCOL_ECDH_3PC``), unbalanced PSI (``ub_psi_config``), or SecretFlow's v1 form
  (``legacy_psi_config``, whose ``psi_type`` picks one of these).
- :func:`psi_csv` -- SecretFlow's ``spu.psi_csv(...)`` arguments: one party, or every party
  from this one process when the per-party dicts name them all.
- :class:`SPU` -- ``blindjoin.SPU(cluster_def, link_desc).psi_csv(...)``, SecretFlow's call
  with ``spu`` replaced by ``blindjoin``.
- :func:`intersect` -- in-memory rows (list of dicts, a pandas DataFrame or a pyarrow Table).

Errors: :class:`Error` and its subclasses :class:`ConfigError`, :class:`InputError`,
:class:`OutputError`, :class:`LinkError`, :class:`PeerError`, :class:`ProtocolError` (a bug),
:class:`CacheError` (unbalanced PSI's cache and key files); a missing input file raises
:class:`FileNotFoundError`. Messages are the ones the CLI prints.

Progress: pass ``progress=callable(stage: str, total: int, elapsed_ms: int)``, called when a stage
starts (never per item), or enable INFO logging on the ``"blindjoin"`` logger. Config warnings go
to that logger at WARNING level.

Ctrl-C: the run happens on a native thread while the calling thread waits with the GIL released
and checks for signals every 100 ms. Ctrl-C cancels the run: the peer gets an abort saying "the
peer cancelled the run (Ctrl-C)" and stops at once, no output file is written, the connection is
closed, and then :class:`KeyboardInterrupt` is raised (within about a second; at most ~4 s if the
native thread is stuck). A :class:`CancelToken` passed as ``cancel=`` does the same from another
thread (the cancelled call raises :class:`KeyboardInterrupt`).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _native
from ._native import (
    CacheError,
    CancelToken,
    ConfigError,
    Error,
    InputError,
    LinkError,
    OutputError,
    PeerError,
    ProtocolError,
)

__all__ = [
    "run",
    "check_config",
    "config_kind",
    "psi_csv",
    "SPU",
    "PYU",
    "intersect",
    "CancelToken",
    "Error",
    "ConfigError",
    "InputError",
    "OutputError",
    "LinkError",
    "PeerError",
    "ProtocolError",
    "CacheError",
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
    cancel: Optional[CancelToken] = None,
    threads: Optional[int] = None,
    logging_level: Optional[str] = None,
    peer_wire: Optional[str] = None,
) -> Dict[str, Any]:
    """Run this party of a PSI from a SecretFlow PSI v2 launch config, as ``blindjoin run --config``.

    ``config`` is a dict, a JSON string, or a path to a JSON file (the format of
    ``blindjoin run --config``; see ``docs/config.md``). Relative paths inside it resolve against
    the current directory (dict or string) or the file's directory (path). Any kind the CLI runs:

    - two-party (``psi_config`` with ECDH, KKRT or RR22);
    - three-party (``psi_config`` with ``protocol_config.protocol = "PROTOCOL_ECDH_3PC"``, three
      ``link_config.parties`` and ``protocol_config.receiver``): only the receiver learns the
      three-way intersection; the helpers' reports have ``intersection_count`` -1;
    - unbalanced PSI (``ub_psi_config``, SecretFlow's modes ``MODE_OFFLINE_GEN_CACHE``,
      ``MODE_OFFLINE_TRANSFER_CACHE``, ``MODE_OFFLINE``, ``MODE_ONLINE``, ``MODE_FULL``): the
      report has ``role``, ``mode``, ``cache_count``, ``intersection_key_count`` and per-phase
      ``gen_cache`` / ``transfer_cache`` / ``online`` times and bytes.

    ``report_path`` overrides where the JSON report is written (default: ``<output>.report.json``
    or ``blindjoin.report_path``). Returns the report as a dict: SecretFlow's ``original_count``,
    ``intersection_count`` (-1 if this party does not receive the result), plus blindjoin's fields.

    ``threads`` (the CLI's ``--threads``; the config's ``blindjoin.threads``) sets the size of the
    process's thread pool, which is built once: a later different count is a warning.
    ``logging_level`` (``debug_options.logging_level``: trace, debug, info, warn, err, critical,
    off) sets what the native code prints on stderr; ``debug_options.trace_path`` in the config
    writes a Perfetto trace of the run (``docs/config.md``).

    ``peer_wire="secretflow"`` (the CLI's ``--peer-wire``; the config's ``blindjoin.peer_wire``)
    runs against an unmodified SecretFlow party, on SecretFlow's link and protocol
    (``docs/config.md``, "Running against SecretFlow"); the default is blindjoin's own wire.

    Blocks until the run ends; the GIL is released meanwhile. Raises :class:`Error` subclasses.
    Ctrl-C, or ``cancel.cancel()`` from another thread, cancels the run (the peer is told) and
    raises :class:`KeyboardInterrupt`.
    """
    text, source, base = _config_text(config)
    if peer_wire is not None:
        if peer_wire not in ("blindjoin", "secretflow"):
            raise ValueError(f'peer_wire: {peer_wire!r}; use "blindjoin" or "secretflow"')
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{source}: peer_wire needs strict JSON to set it in: {e}") from e
        if not isinstance(obj, dict) or not isinstance(obj.setdefault("blindjoin", {}), dict):
            raise ValueError(f"{source}: peer_wire needs a JSON object with a blindjoin object")
        obj["blindjoin"]["peer_wire"] = peer_wire
        text = json.dumps(obj)
    if progress is None and _log.isEnabledFor(logging.INFO):
        progress = _log_progress
    report = _native.run_config(
        text,
        source,
        base,
        report_path=os.fspath(report_path) if report_path is not None else None,
        progress=progress,
        on_warning=_log.warning,
        cancel=cancel,
        threads=threads,
        logging_level=logging_level,
    )
    result: Dict[str, Any] = json.loads(report)
    return result


def check_config(config: Config) -> List[str]:
    """Validate a launch config of any kind (two-party, three-party, unbalanced, or v1
    ``legacy_psi_config``) without running it. Returns its warnings; raises
    :class:`ConfigError` naming the field that is wrong."""
    text, source, base = _config_text(config)
    _, warnings = _native.check_config(text, source, base)
    return list(warnings)


def config_kind(config: Config) -> str:
    """Validate a launch config and say which kind of run it is: ``"two-party"``,
    ``"three-party"``, ``"n-party"`` (n-party PSI and DP-PSI), ``"unbalanced"`` or
    ``"labeled-psi"``. Raises
    :class:`ConfigError` like :func:`check_config`."""
    text, source, base = _config_text(config)
    kind, _ = _native.check_config(text, source, base)
    return str(kind)


class PYU:
    """A party name, as SecretFlow's ``sf.PYU('alice')``: usable as a key of the per-party dicts.

    Any object with a ``party`` attribute works the same (SecretFlow's own PYU included)."""

    __slots__ = ("party",)

    def __init__(self, party: str) -> None:
        self.party = party

    def __repr__(self) -> str:
        return f"PYU({self.party!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PYU) and other.party == self.party

    def __hash__(self) -> int:
        return hash(("PYU", self.party))


def _party_name(key: Any) -> str:
    """A per-party dict's key as a party name: a string, or an object with ``.party`` (a PYU)."""
    if isinstance(key, str):
        return key
    name = getattr(key, "party", None)
    if isinstance(name, str):
        return name
    raise ConfigError(f"a per-party dict key must be a party name or have a .party attribute, not {key!r}")


def _by_party(value: Any) -> Optional[Dict[str, Any]]:
    """A SecretFlow per-party dict ({party: value}) keyed by party names; None if not a dict."""
    if isinstance(value, Mapping):
        return {_party_name(k): v for k, v in value.items()}
    return None


def _for_party(value: Any, self_party: str) -> Any:
    """SecretFlow passes per-party dicts ({party: value}); take this party's entry."""
    named = _by_party(value)
    if named is not None:
        if self_party not in named:
            raise ConfigError(f"no entry for self_party {self_party!r} in {dict(value)!r}")
        return named[self_party]
    return value


#: Environment variable naming this process's party when the per-party dicts name every party
#: but each party runs on its own machine (the same script started once per party).
SELF_PARTY_ENV = "BLINDJOIN_SELF_PARTY"


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cluster_hosts(cluster_def: Any) -> "tuple[Dict[str, str], Dict[str, str]]":
    """(party -> address, party -> listen_address) from a SecretFlow ``cluster_def`` (its
    ``nodes`` list) or a plain ``{party: "host:port"}`` mapping, in the given order."""
    if isinstance(cluster_def, Mapping) and "nodes" in cluster_def:
        hosts: Dict[str, str] = {}
        listen: Dict[str, str] = {}
        for i, node in enumerate(cluster_def["nodes"]):
            if not isinstance(node, Mapping) or "party" not in node or "address" not in node:
                raise ConfigError(f"cluster_def.nodes[{i}]: needs 'party' and 'address', got {node!r}")
            hosts[str(node["party"])] = str(node["address"])
            if node.get("listen_address"):
                listen[str(node["party"])] = str(node["listen_address"])
        return hosts, listen
    if isinstance(cluster_def, Mapping):
        return {_party_name(k): str(v) for k, v in cluster_def.items()}, {}
    raise ConfigError(f"parties: expected {{party: 'host:port'}} or a cluster_def with 'nodes', got {cluster_def!r}")


def _party_plan(
    me: str,
    key: Any,
    input_path: Any,
    output_path: Any,
    receiver: str,
    hosts: Mapping[str, str],
    *,
    protocol: str,
    curve_type: str,
    broadcast_result: bool,
    sort: bool,
    bucket_size: Optional[int],
    connect_timeout_ms: Optional[int] = None,
    recv_timeout_ms: Optional[int] = None,
    report_path: Optional[PathLike] = None,
    precheck: bool = False,
    preprocess_path: Any = None,
    ecdh_secret_key_path: Any = None,
    dppsi_bob_sub_sampling: Optional[float] = None,
    dppsi_epsilon: Optional[float] = None,
) -> Any:
    """The run plan of party ``me`` for a ``psi_csv`` call, built in Rust (SecretFlow's protocol
    names are mapped there, the receiver's rank included). ``hosts`` holds every party's address
    as *this* party uses it (its own may be a listen address). ``preprocess_path`` and
    ``ecdh_secret_key_path`` are one path or per-party dicts (a party without an entry has
    none)."""
    if me not in hosts:
        raise ConfigError(f"self_party {me!r} is not one of the parties {sorted(hosts)}")
    if receiver not in hosts:
        raise ConfigError(f"receiver {receiver!r} is not one of the parties {sorted(hosts)}")
    keys = _for_party(key, me)
    keys = [keys] if isinstance(keys, str) else list(keys)
    # A party without an output_path entry writes none (SecretFlow omits the sender's at times);
    # if it learns the result, the plan names the missing output path.
    outs = _by_party(output_path)
    out = outs.get(me) if outs is not None else output_path
    return _native.psi_csv_plan(
        me,
        list(hosts.items()),
        receiver,
        keys,
        os.path.abspath(os.fspath(_for_party(input_path, me))),
        os.path.abspath(os.fspath(out)) if out is not None else None,
        protocol,
        curve_type,
        broadcast_result,
        sort,
        bucket_size=bucket_size,
        connect_timeout_ms=connect_timeout_ms,
        recv_timeout_ms=recv_timeout_ms,
        report_path=os.fspath(report_path) if report_path is not None else None,
        precheck=precheck,
        preprocess_path=_own_path(preprocess_path, me),
        ecdh_secret_key_path=_own_path(ecdh_secret_key_path, me),
        dppsi_bob_sub_sampling=dppsi_bob_sub_sampling,
        dppsi_epsilon=dppsi_epsilon,
    )


def _own_path(value: Any, me: str) -> Optional[str]:
    """This party's entry of a path argument (one path, or a per-party dict without an entry
    for parties that have none), absolute."""
    named = _by_party(value)
    mine = named.get(me) if named is not None else value
    return os.path.abspath(os.fspath(mine)) if mine is not None else None


def _link_desc_timeouts(link_desc: Optional[Mapping[str, Any]]) -> "tuple[Optional[int], Optional[int]]":
    """(connect_timeout_ms, recv_timeout_ms) from SecretFlow's ``link_desc`` (yacl's
    ``ContextDesc``): ``recv_timeout_ms`` as given; the connect deadline is
    ``connect_retry_times`` x ``connect_retry_interval_ms`` (yacl's defaults 10 and 1000 ms for the
    one not given; at least 1 s), as a ``link_config`` with those fields. Transport tuning of
    brpc's has no meaning here and is accepted; any other key is ignored with a warning."""
    if link_desc is None:
        return None, None
    if not isinstance(link_desc, Mapping):
        raise ConfigError(f"link_desc: expected a dict such as {{'recv_timeout_ms': 3600000}}, got {link_desc!r}")
    tuning = {
        "id", "http_max_payload_size", "http_timeout_ms", "throttle_window_size",
        "chunk_parallel_send_size", "brpc_channel_protocol", "brpc_channel_connection_type",
        "retry_opts", "exit_if_async_error", "link_type",
    }
    used = {"recv_timeout_ms", "connect_retry_times", "connect_retry_interval_ms"}
    unknown = sorted(k for k in link_desc if k not in tuning | used)
    if unknown:
        _log.warning("SPU: link_desc: ignoring %s (no counterpart in blindjoin's link)", ", ".join(unknown))

    def ms(name: str) -> Optional[int]:
        v = link_desc.get(name)
        if v is None:
            return None
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise ConfigError(f"link_desc.{name}: expected a non-negative integer, got {v!r}") from None
        if n < 0:
            raise ConfigError(f"link_desc.{name}: expected a non-negative integer, got {v!r}")
        return n

    recv = ms("recv_timeout_ms")
    times, interval = ms("connect_retry_times"), ms("connect_retry_interval_ms")
    connect = None
    if times is not None or interval is not None:
        connect = max((10 if times is None else times) * (1000 if interval is None else interval), 1000)
    return connect, recv


def _run_plan(
    plan: Any,
    progress: Optional[ProgressCallback],
    cancel: Optional[CancelToken],
    **ops: Any,
) -> Dict[str, Any]:
    """Runs a plan from :func:`_party_plan`; the report as a dict (as :func:`run`). ``ops``:
    ``threads`` and ``logging_level``, as :func:`run` takes them."""
    if progress is None and _log.isEnabledFor(logging.INFO):
        progress = _log_progress
    report = _native.run_plan(plan, progress=progress, on_warning=_log.warning, cancel=cancel, **ops)
    result: Dict[str, Any] = json.loads(report)
    return result


def _local_parties(
    self_party: Optional[str], input_path: Any, hosts: Optional[Mapping[str, str]]
) -> List[str]:
    """Which parties this process runs: ``self_party`` if given, else ``$BLINDJOIN_SELF_PARTY``,
    else every party the ``input_path`` dict names (all of them: one-process mode; one: that
    party, the others run elsewhere)."""
    if self_party is None:
        self_party = os.environ.get(SELF_PARTY_ENV) or None
    if self_party is not None:
        return [_party_name(self_party)]
    named = _by_party(input_path)
    if named is None:
        raise ConfigError(
            f"self_party: missing; pass self_party=, set ${SELF_PARTY_ENV}, or give input_path as "
            "a per-party dict"
        )
    local = [p for p in named if named[p] is not None]
    if hosts is not None:
        unknown = [p for p in local if p not in hosts]
        if unknown:
            raise ConfigError(f"input_path names {unknown}, which are not among the parties {sorted(hosts)}")
    if not local:
        raise ConfigError("input_path: the per-party dict is empty")
    return local


def _run_together(
    plans: List["tuple[str, Any]"],
    progress: Optional[ProgressCallback],
    cancel: Optional[CancelToken],
    **ops: Any,
) -> List[Dict[str, Any]]:
    """Runs several parties' plans at once, each on its own thread (the native runs release the
    GIL, so they proceed in parallel). Ctrl-C, or ``cancel``, cancels them all; so does a party's
    failure (a party that fails before connecting would otherwise leave the others waiting out
    their connect timeout). Raises the error of the party that failed first-hand, not the
    PeerError or cancellation the others saw because of it."""
    token = CancelToken()  # our own, so a failure here never cancels the caller's token
    reports: Dict[str, Dict[str, Any]] = {}
    errors: Dict[str, BaseException] = {}

    def one(name: str, plan: Any) -> None:
        prog = progress
        if prog is None and _log.isEnabledFor(logging.INFO):
            # Several parties log here: say whose stage it is.
            def prog(stage: str, total: int, elapsed_ms: int) -> None:
                _log.info("%s: %s (%d items) at %.2f s", name, stage, total, elapsed_ms / 1000)
        try:
            reports[name] = _run_plan(plan, prog, token, **ops)
        except BaseException as e:  # handed to the calling thread below
            errors.setdefault(name, e)
            token.cancel(f"party {name!r} of the same process failed: {e}")

    threads = [
        threading.Thread(target=one, args=(name, plan), name=f"blindjoin-{name}", daemon=True)
        for name, plan in plans
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.1)  # short joins so Ctrl-C reaches this thread
                if cancel is not None and cancel.cancelled and not token.cancelled:
                    token.cancel()
    except KeyboardInterrupt:
        token.cancel()
        for t in threads:
            t.join(5.0)
        raise
    if errors:
        ranked = sorted(errors.values(), key=lambda e: isinstance(e, (PeerError, KeyboardInterrupt)))
        raise ranked[0]
    return [reports[name] for name, _ in plans]


def psi_csv(
    key: Union[str, Sequence[str], Mapping[Any, Any]],
    input_path: Union[PathLike, Mapping[Any, PathLike]],
    output_path: Union[PathLike, Mapping[Any, Optional[PathLike]], None],
    receiver: Any,
    *,
    self_party: Optional[str] = None,
    parties: Optional[Mapping[Any, Any]] = None,
    protocol: str = "ECDH_PSI_2PC",
    curve_type: str = "CURVE_25519",
    broadcast_result: bool = True,
    sort: bool = True,
    precheck_input: Optional[bool] = None,
    bucket_size: Optional[int] = None,
    preprocess_path: Any = None,
    ecdh_secret_key_path: Any = None,
    dppsi_bob_sub_sampling: Optional[float] = None,
    dppsi_epsilon: Optional[float] = None,
    report_path: Optional[PathLike] = None,
    progress: Optional[ProgressCallback] = None,
    connect_timeout_ms: Optional[int] = None,
    recv_timeout_ms: Optional[int] = None,
    cancel: Optional[CancelToken] = None,
    threads: Optional[int] = None,
    logging_level: Optional[str] = None,
    **ignored_legacy: Any,
) -> Union[Dict[str, Any], List[Dict[str, Any]]]:
    """SecretFlow's ``spu.psi_csv(...)``: one party, or every party from this process.

    ``key``, ``input_path`` and ``output_path`` are SecretFlow-style per-party dicts
    (``{party: value}``; a key may be a party name or an object with ``.party`` such as
    :class:`PYU`), or plain values for a single party. ``receiver`` is the party that receives the
    result. ``parties`` maps each party to its ``"host:port"``, or is a SecretFlow ``cluster_def``
    (``{"nodes": [{"party", "address", "listen_address"}]}``; a party binds its
    ``listen_address`` when it listens).

    Which parties run here:

    - ``self_party="alice"`` (or ``$BLINDJOIN_SELF_PARTY``): that party only, the peer runs
      elsewhere. With ``self_party=`` the report dict is returned (the original signature);
      otherwise a one-element list.
    - Otherwise every party named in the ``input_path`` dict. If it names all parties they run in
      this process, each on its own thread, on free 127.0.0.1 ports when ``parties`` is not
      given; the result is the list of per-party reports in the dict's order (SecretFlow's
      ``reports``). If it names one party, that party runs here.

    ``sort=True`` aligns both outputs row by row. ``protocol`` takes every name SecretFlow's
    ``psi_csv`` takes, mapped in Rust: ``ECDH_PSI_2PC``, ``KKRT_PSI_2PC``, ``RR22_PSI_2PC`` /
    ``RR22_FAST_PSI_2PC``, ``RR22_LOWCOMM_PSI_2PC``, ``RR22_MALICIOUS_PSI_2PC`` (or the v2
    names); ``ECDH_PSI_3PC`` with three parties, ``receiver`` receiving, the two others helping;
    ``ECDH_PSI_NPC`` / ``KKRT_PSI_NPC`` with three or more parties (SecretFlow's tree of
    two-party runs, which shows some parties intermediate intersections; see docs/protocols.md);
    ``DP_PSI_2PC`` (DP-PSI: ``receiver`` gets a noised intersection, with
    ``dppsi_bob_sub_sampling``, default 0.9, and ``dppsi_epsilon``, default 3);
    and unbalanced PSI, ``ECDH_OPRF_UB_PSI_2PC_GEN_CACHE`` / ``_TRANSFER_CACHE`` / ``_OFFLINE``
    / ``_ONLINE`` / ``_SHUFFLE_ONLINE``, where ``receiver`` is the client (small set) except in
    shuffle online (the server, which then gets the result), ``preprocess_path`` is each party's
    cache (one path, or a per-party dict) and ``ecdh_secret_key_path`` the server's key file.
    ``curve_type`` is the curve of ECDH and unbalanced PSI; ``bucket_size`` the RR22/KKRT keys per
    bucket. A sender with ``broadcast_result=False`` writes no output. ``precheck_input`` is
    SecretFlow's duplicate-key check: blindjoin accepts duplicates (every row of a matching key is
    written) and says so in a warning. ``dppsi_*`` are read by ``DP_PSI_2PC`` only. Other legacy
    keyword arguments are ignored with a warning on the
    ``"blindjoin"`` logger. ``report_path`` applies to a single-party call only.
    """
    if ignored_legacy:
        _log.warning("psi_csv: ignoring unsupported arguments: %s", ", ".join(sorted(ignored_legacy)))
    receiver = _party_name(receiver)
    hosts, listen = _cluster_hosts(parties) if parties is not None else (None, {})
    local = _local_parties(self_party, input_path, hosts)
    if hosts is None:
        if len(local) < 2:
            raise ConfigError("parties: missing; give every party's 'host:port' (or a cluster_def)")
        hosts = {p: f"127.0.0.1:{_free_port()}" for p in local}
    common = dict(
        protocol=protocol, curve_type=curve_type, broadcast_result=broadcast_result, sort=sort,
        bucket_size=bucket_size, connect_timeout_ms=connect_timeout_ms, recv_timeout_ms=recv_timeout_ms,
        precheck=bool(precheck_input), preprocess_path=preprocess_path,
        ecdh_secret_key_path=ecdh_secret_key_path, dppsi_bob_sub_sampling=dppsi_bob_sub_sampling,
        dppsi_epsilon=dppsi_epsilon,
    )
    if protocol.strip() == "ECDH_OPRF_UB_PSI_2PC_GEN_CACHE":
        # As SecretFlow's psi_csv: the server (named as receiver) generates its cache alone; the
        # other parties have nothing to do.
        idle = [p for p in local if p != receiver]
        local = [p for p in local if p == receiver]
        if not local:
            skipped = [{"party": p, "original_count": 0, "intersection_count": -1} for p in idle]
            return skipped[0] if self_party is not None else skipped

    def plan_of(me: str, report: Optional[PathLike] = None) -> Any:
        own = {p: (listen.get(p, h) if p == me else h) for p, h in hosts.items()}
        return _party_plan(me, key, input_path, output_path, receiver, own, report_path=report, **common)  # type: ignore[arg-type]

    ops = dict(threads=threads, logging_level=logging_level)
    if len(local) == 1:
        report = _run_plan(plan_of(local[0], report_path), progress, cancel, **ops)
        return report if self_party is not None else [report]
    return _run_together([(me, plan_of(me)) for me in local], progress, cancel, **ops)


class SPU:
    """SecretFlow's ``sf.SPU(cluster_def)`` for PSI: ``blindjoin.SPU(cluster_def).psi_csv(...)``.

    ``cluster_def["nodes"]`` lists ``{"party", "address", "listen_address"}`` (``listen_address``
    optional: where a party binds when it listens; SecretFlow's ``runtime_config`` and other keys
    are ignored). ``link_desc`` (second argument, or keyword), as SecretFlow's: its
    ``recv_timeout_ms`` is how long a party waits for one message, and ``connect_retry_times`` x
    ``connect_retry_interval_ms`` how long it waits for the peer to connect. ``self_party`` (or ``$BLINDJOIN_SELF_PARTY``) makes every call run only that
    party, for one process per machine; without it, the parties the per-party dicts name run here.
    """

    def __init__(
        self,
        cluster_def: Mapping[str, Any],
        link_desc: Optional[Mapping[str, Any]] = None,
        *,
        self_party: Optional[str] = None,
        connect_timeout_ms: Optional[int] = None,
        recv_timeout_ms: Optional[int] = None,
        **ignored: Any,
    ) -> None:
        if ignored:
            _log.warning("SPU: ignoring unsupported arguments: %s", ", ".join(sorted(ignored)))
        _cluster_hosts(cluster_def)  # validate now, not at the first call
        connect, recv = _link_desc_timeouts(link_desc)
        self.cluster_def = cluster_def
        self.link_desc = link_desc
        self.self_party = self_party
        # Explicit keyword arguments win over link_desc.
        self.connect_timeout_ms = connect_timeout_ms if connect_timeout_ms is not None else connect
        self.recv_timeout_ms = recv_timeout_ms if recv_timeout_ms is not None else recv

    @property
    def parties(self) -> List[str]:
        """The party names, in cluster_def order."""
        return list(_cluster_hosts(self.cluster_def)[0])

    def psi_csv(
        self,
        key: Union[str, Sequence[str], Mapping[Any, Any]],
        input_path: Union[PathLike, Mapping[Any, PathLike]],
        output_path: Union[PathLike, Mapping[Any, Optional[PathLike]], None],
        receiver: Any,
        protocol: str = "KKRT_PSI_2PC",
        precheck_input: bool = True,
        sort: bool = True,
        broadcast_result: bool = True,
        bucket_size: Optional[int] = None,
        curve_type: str = "CURVE_25519",
        preprocess_path: Any = None,
        ecdh_secret_key_path: Any = None,
        dppsi_bob_sub_sampling: float = 0.9,
        dppsi_epsilon: float = 3,
        *,
        progress: Optional[ProgressCallback] = None,
        cancel: Optional[CancelToken] = None,
        **ignored_legacy: Any,
    ) -> List[Dict[str, Any]]:
        """SecretFlow's ``SPU.psi_csv`` (same arguments and defaults; ``bucket_size=None`` is
        SecretFlow's 2^20); returns the list of the reports of the parties run here (every party
        in one-process mode). See :func:`psi_csv`."""
        kwargs: Dict[str, Any] = dict(
            parties=self.cluster_def, protocol=protocol, curve_type=curve_type,
            broadcast_result=broadcast_result, sort=sort, precheck_input=precheck_input,
            bucket_size=bucket_size, preprocess_path=preprocess_path,
            ecdh_secret_key_path=ecdh_secret_key_path, dppsi_bob_sub_sampling=dppsi_bob_sub_sampling,
            dppsi_epsilon=dppsi_epsilon, progress=progress, connect_timeout_ms=self.connect_timeout_ms,
            recv_timeout_ms=self.recv_timeout_ms, cancel=cancel, **ignored_legacy,
        )
        if self.self_party is not None:
            return [psi_csv(key, input_path, output_path, receiver, self_party=self.self_party, **kwargs)]  # type: ignore[list-item]
        result = psi_csv(key, input_path, output_path, receiver, **kwargs)
        return result if isinstance(result, list) else [result]


_ROW_COLUMN = "__blindjoin_row__"


def _is_dataframe(obj: Any) -> bool:
    try:
        import pandas as pd  # type: ignore[import-not-found]
    except ImportError:
        return False
    return isinstance(obj, pd.DataFrame)


def _is_arrow_table(obj: Any) -> bool:
    """Whether ``obj`` is a pyarrow Table (pyarrow is optional and imported only if loaded)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(obj, pa.Table)


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
    cancel: Optional[CancelToken] = None,
) -> Any:
    """Private intersection of in-memory rows with the peer's.

    ``rows_or_table`` is a list of dicts, a pandas DataFrame or a pyarrow Table (pandas and
    pyarrow are optional). ``role`` is
    ``"receiver"`` or ``"sender"``; ``self_addr``/``peer_addr`` are ``"host:port"``. ``protocol``
    is ``"PROTOCOL_ECDH"`` (with ``curve``), ``"PROTOCOL_RR22"`` (with ``rr22_mode`` ``"fast"``,
    ``"low_comm"`` or ``"malicious"``) or ``"PROTOCOL_KKRT"``; both parties must pass the same. Party ids
    default to the role names (``"receiver"``/``"sender"``); both sides must agree on them.

    Only the key columns leave Python: they are written as text (``str(value)``, ``None`` -> empty,
    which is an error) to a temporary CSV together with a row number, the run is the same as
    :func:`run`, and the rows of the intersection are picked from the input by row number. So the
    result is the same type as the input with the original values and dtypes (a Table keeps its
    schema and column types): the input's rows whose
    keys are in the intersection, sorted by key. With ``broadcast_result`` (the default) the two
    results are the SQL inner join row by row: a row whose key the peer holds ``b`` times appears
    ``b`` times, so ``zip(mine, theirs)`` gives every matching pair. Without it the receiver gets
    each matching row once. Keys compare as text, so both parties must format them the same way
    (``1`` and ``1.0`` differ).

    Returns ``None`` for a sender with ``broadcast_result=False`` (it learns nothing). With
    ``return_report=True`` returns ``(result, report)``. ``cancel``: see :func:`run`.
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
    is_arrow = _is_arrow_table(rows_or_table)
    if is_df:
        df = rows_or_table
        missing = [k for k in key_list if k not in df.columns]
        key_columns = [[_key_text(v) for v in df[k].tolist()] for k in key_list] if not missing else []
        n = len(df)
    elif is_arrow:
        table = rows_or_table
        missing = [k for k in key_list if k not in table.column_names]
        # to_pylist() gives Python values, so keys format exactly as a list of dicts would.
        key_columns = [[_key_text(v) for v in table.column(k).to_pylist()] for k in key_list] if not missing else []
        n = table.num_rows
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
        plan = _native.psi_csv_plan(
            me,
            [(me, self_addr), (peer, peer_addr)],
            me if role == "receiver" else peer,
            key_list,
            inp,
            out if learns else None,
            protocol,
            curve,
            broadcast_result,
            True,
            connect_timeout_ms=connect_timeout_ms,
            recv_timeout_ms=recv_timeout_ms,
            report_path=os.path.join(tmp, "report.json"),
            rr22_mode=rr22_mode,
        )
        report = _run_plan(plan, progress, cancel)
        result: Any = None
        if learns:
            with open(out, newline="", encoding="utf-8") as f:
                picked = [int(r[_ROW_COLUMN]) for r in csv.DictReader(f)]
            if is_df:
                result = rows_or_table.iloc[picked]  # keeps the original index
            elif is_arrow:
                import pyarrow as pa  # type: ignore[import-not-found]

                result = rows_or_table.take(pa.array(picked, type=pa.int64()))  # same schema
            else:
                result = [rows[i] for i in picked]
    report["output_path"] = None  # the temporary file is gone
    return (result, report) if return_report else result
