"""Run one party's partitions as Ray tasks: ``pip install 'blindjoin[ray]'``.

:func:`run` splits this party's run into ``workers`` partitions (hash-bucket ranges, the same
ones the peer cuts) and runs each as a Ray task on **this party's own** Ray cluster; the two
organisations never share one. The calling process is the coordinator: it reads and spills the
table into a work folder, connects the main link to the peer, agrees the run and the worker
endpoints, hands each partition to a task as a self-contained job (bytes in blindjoin's own
versioned encoding: paths and ids, no key material), retries failed partitions, and finally
merges the partitions' sorted runs into the one aligned output file, as ``blindjoin run
--workers W`` does in one process, or, when ``output_config.path`` names a folder (ends with
``/``), writes one part file per partition there (``docs/config.md``).

Failures: a task that dies (``kill -9``, a lost node) raises on ``ray.get``; the peer's worker of
that partition then sees its link fail too, or, if ours died before its link was up, is stopped
by a stand-in that the coordinator starts the moment it sees the task fail (it greets the peer's
worker as ours would and aborts it; without it that worker would wait out its connect timeout
and the peer's coordinator with it). After every round of tasks both coordinators swap
their failed partitions over the main link and both rerun the union, each at its next attempt
(so the two workers of a partition always greet with the same attempt, and a worker left over
from an earlier try is refused). A rerun partition resumes from its last checkpointed bucket;
the others are not redone. Rounds are bounded (``max_rounds``) and so is the time
(``timeout_s``).

Ctrl-C: while the coordinator reads its table and waits for the peer (a native call on a
thread of its own) it cancels the run at once, telling the peer, and raises
:class:`KeyboardInterrupt`; while the tasks run, it stops this party's Ray tasks and closes the
link, so the peer's run fails with a link error.

The work folder (spill shards, checkpoints, the partitions' runs) is the config's
``recovery_config.folder`` if set (then the whole run also resumes after the coordinator's
crash), else a private folder (0700) made in ``work_dir`` or the system's temporary folder and
removed when the run ends (also on failure). Tasks read and write it: on a multi-machine
Ray cluster it must be on storage every node sees at the same path. The peer must run
``blindjoin.ray`` too (the coordinators swap failed partitions after each round); a peer
running ``blindjoin run`` or ``blindjoin.run`` is refused before any work, with a message
naming both sides' runners.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import Config, Error, PathLike, _config_text, _native

__all__ = ["run"]

_log = logging.getLogger("blindjoin")

#: Ray's first release with token authentication (``RAY_AUTH_MODE=token``); the ``ray`` extra
#: requires it.
TOKEN_AUTH_RAY = (2, 52)

#: The private instance's token: one per process, because Ray's token loader caches the first
#: token it reads for the life of the process (a second instance with a new token would refuse
#: this very driver).
_token: Optional[str] = None


def _ray_version(ray: Any) -> Tuple[int, int]:
    try:
        major, minor = str(ray.__version__).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


@contextlib.contextmanager
def _private_instance(ray: Any, num_cpus: int) -> Iterator[None]:
    """A private local Ray instance for one call, stopped at the end.

    Nobody else may submit work to it: it requires a token (``RAY_AUTH_MODE=token``, a fresh
    random ``RAY_AUTH_TOKEN`` that lives only in this process's environment and is inherited
    by the instance's own processes; never written to ``~/.ray/auth_token``), and every one of
    its servers listens on 127.0.0.1 only. Ray would otherwise advertise and bind the node's
    routable address; treating the node as a single-machine one (Ray's own switch for
    Windows/macOS, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) makes it use loopback. Both are
    checked once the instance is up. Its own temporary folder, no dashboard.
    """
    global _token
    if _ray_version(ray) < TOKEN_AUTH_RAY:
        raise ImportError(
            f"blindjoin.ray needs Ray >= {TOKEN_AUTH_RAY[0]}.{TOKEN_AUTH_RAY[1]} (token "
            f"authentication for its private instance), found {ray.__version__}: "
            "pip install 'blindjoin[ray]'"
        )
    if _token is None:
        _token = secrets.token_hex(32)
    overrides = {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": _token,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    saved = {k: os.environ.get(k) for k in [*overrides, "RAY_AUTH_TOKEN_PATH"]}
    constants = ray._private.ray_constants
    cluster_mode = constants.ENABLE_RAY_CLUSTER
    # Short path: Ray's socket names must fit in 107 bytes.
    own_tmp = tempfile.mkdtemp(prefix="bjray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        os.environ.update(overrides)
        os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
        # Ray caches its config (the auth mode among it) when imported; re-read it from the
        # environment, as Ray's own `_enable_token_auth` does.
        ray._raylet.Config.initialize("")
        # Read when `ray` is imported: set for this call in case it was imported before.
        constants.ENABLE_RAY_CLUSTER = False
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            _temp_dir=own_tmp,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        try:
            ip = ray.util.get_node_ip_address()
            if not ip.startswith("127."):
                raise Error(
                    f"blindjoin.ray: the private Ray instance came up on {ip}, not on "
                    "127.0.0.1; refusing to run on an instance others can reach (pass the "
                    "address= of a cluster you trust instead)"
                )
            yield
        finally:
            ray.shutdown()
    finally:
        constants.ENABLE_RAY_CLUSTER = cluster_mode
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        ray._raylet.Config.initialize("")
        shutil.rmtree(own_tmp, ignore_errors=True)


def _partition_task(job: bytes, partition: int, attempt: int, pid_dir: str) -> str:
    """One partition, in a Ray worker process; records the process id (tests kill it)."""
    os.makedirs(pid_dir, mode=0o700, exist_ok=True)
    path = os.path.join(pid_dir, f"p{partition}-a{attempt}.pid")
    with open(path, "w", encoding="ascii") as f:
        f.write(str(os.getpid()))
    from blindjoin import _native as native

    result: str = native.run_partition(job, attempt)
    return result


def run(
    config: Config,
    workers: int = 2,
    address: Optional[str] = None,
    *,
    work_dir: Optional[PathLike] = None,
    max_rounds: int = 3,
    timeout_s: float = 3600.0,
    num_cpus: Optional[int] = None,
) -> Dict[str, Any]:
    """Run this party of a two-party launch config with ``workers`` partitions on Ray.

    ``config`` is what :func:`blindjoin.run` takes. ``address=None`` starts a private local Ray
    instance for this call (token authentication with a fresh token, bound to 127.0.0.1, its own
    temporary folder, no dashboard, ``num_cpus`` CPUs, default ``max(workers, cores)``; needs
    Ray >= 2.52) and stops it at the end, so two parties on one machine get two instances. To
    use a cluster, pass its address (``"ray://head:10001"`` or ``"auto"`` on a node of it); if
    Ray is already initialised in this process, that instance is used and left running. Such a
    cluster must be one this party trusts and no one else can reach: whoever can submit tasks
    to it sees the partition jobs, the input and the output. The cluster must be able to run all ``workers`` tasks at once: the two parties'
    workers of a partition run at the same time.

    The partition count is the smaller of the two parties' (at least 2). Returns the report
    (as :func:`blindjoin.run`'s), plus ``partition_attempts``: the last attempt of each
    partition (0: never retried).
    """
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("blindjoin.ray needs Ray: pip install 'blindjoin[ray]'") from e
    if workers < 2:
        raise ValueError("workers: a run on Ray needs at least 2 partitions")
    text, source, base = _config_text(config)

    def coordinate() -> Dict[str, Any]:
        return _coordinate(ray, text, source, base, workers, work_dir, max_rounds, timeout_s)

    if ray.is_initialized():
        return coordinate()
    if address is None:
        with _private_instance(ray, num_cpus or max(workers, os.cpu_count() or 1)):
            return coordinate()
    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    try:
        return coordinate()
    finally:
        ray.shutdown()


def _coordinate(
    ray: Any,
    text: str,
    source: str,
    base: str,
    workers: int,
    work_dir: Optional[PathLike],
    max_rounds: int,
    timeout_s: float,
) -> Dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    coord = _native.start_coordinator(
        text, source, base, workers, os.fspath(work_dir) if work_dir is not None else None
    )
    jobs: List[bytes] = coord.jobs()
    n = len(jobs)
    pid_dir = os.path.join(os.fspath(coord.work_dir), "pids")
    task = ray.remote(num_cpus=1, max_retries=0)(_partition_task)
    attempts = [0] * n
    outcomes: Dict[int, str] = {}
    pending = list(range(n))
    errors: Dict[int, str] = {}
    for _ in range(max(1, max_rounds)):
        refs = {p: task.remote(jobs[p], p, attempts[p], pid_dir) for p in pending}
        failed: List[int] = []
        # Tasks are taken as they end, so that a failed one is reported at once: the peer's
        # worker of its partition may be waiting for it (a stand-in then stops that worker).
        waiting = {ref: p for p, ref in refs.items()}
        while waiting:
            left = deadline - time.monotonic()
            done, _ = ray.wait(list(waiting), num_returns=1, timeout=max(1.0, left))
            expired = not done
            for ref in done or list(waiting):
                p = waiting.pop(ref)
                try:
                    if expired:
                        raise TimeoutError(f"the run's time ({timeout_s} s) ran out")
                    outcomes[p] = ray.get(ref)
                except Exception as e:  # the task's error, a dead worker, or the deadline
                    failed.append(p)
                    errors[p] = f"{type(e).__name__}: {e}"
                    _log.warning("partition %d attempt %d failed: %s", p, attempts[p], errors[p])
                    # Only a task past the deadline is still running. Cancelling one that has
                    # already ended (its error or its worker's death) can abort this process
                    # inside Ray 2.60 ("Tried to complete task that was not pending").
                    if expired:
                        try:
                            ray.cancel(ref, force=True)
                        except Exception:  # ended meanwhile
                            pass
                    coord.worker_failed(p)
        retry = coord.retry_round(failed)
        if not retry:
            break
        if time.monotonic() > deadline:
            raise Error(f"blindjoin.ray: out of time ({timeout_s} s) with partitions to retry")
        for p, a in retry:
            attempts[p] = a
            outcomes.pop(p, None)
        pending = [p for p, _ in retry]
    else:
        raise Error(
            f"blindjoin.ray: partitions {pending} still failed after {max_rounds} rounds; "
            f"last errors: {errors}"
        )
    report: Dict[str, Any] = json.loads(coord.finish([outcomes[p] for p in range(n)]))
    report["partition_attempts"] = attempts
    return report
