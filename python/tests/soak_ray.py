"""Soak of partitioned runs on Ray (issue #39): BJ_SOAK_RUNS times (default 10), a partition
worker of either party is killed with SIGKILL at a random moment of its run; Ray retries the
partition (from its checkpoint if it made one) and both parties' outputs must be byte-identical
to a one-process run's, with the private work folders gone. Not collected by the suite (the file
name does not start with ``test_``; ``test_ray.py`` kills one worker there): ``scripts/soak.sh``
runs it, or ``pytest python/tests/soak_ray.py``. BJ_SOAK_SEED picks the victims and moments.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed: pip install 'blindjoin[ray]'")

from test_ray import RUN_TIMEOUT_S, finish, free_range, reference, same_bytes, start  # noqa: E402,F401

RUNS = int(os.environ.get("BJ_SOAK_RUNS", "10"))
SEED = int(os.environ.get("BJ_SOAK_SEED", "39"))


@pytest.mark.parametrize("i", range(RUNS))
def test_a_worker_killed_at_a_random_moment_is_retried_and_nothing_changes(reference: Path, i: int) -> None:
    rng = random.Random(SEED * 1000 + i)
    d = reference
    tag = f"soak{i}"
    victim_side = rng.choice(["receiver", "sender"])
    partition = rng.choice([0, 1])
    delay = rng.uniform(0.0, 2.0)
    ports, workers = free_range(2), free_range(2)
    pr, work_r, outr = start(d, "receiver", tag, ports, workers)
    ps, work_s, outs = start(d, "sender", tag, ports, workers)
    work = work_r if victim_side == "receiver" else work_s
    deadline = time.monotonic() + RUN_TIMEOUT_S
    killed = False
    pid_glob = str(work / ".blindjoin-work-*" / "pids" / f"p{partition}-a0.pid")
    while time.monotonic() < deadline and pr.poll() is None and ps.poll() is None:
        pids = glob.glob(pid_glob)
        if pids:
            time.sleep(delay)
            try:
                os.kill(int(Path(pids[0]).read_text()), signal.SIGKILL)
                killed = True
            except (ProcessLookupError, ValueError, FileNotFoundError):
                pass  # the worker had finished: a missed kill, the run must still be right
            break
        time.sleep(0.02)
    reports = finish([pr, ps], [outr, outs])
    same_bytes(d, tag)
    for w in (work_r, work_s):
        assert not glob.glob(str(w / ".blindjoin-work-*")), f"{w}: private work folder left"
    victim = reports[0] if victim_side == "receiver" else reports[1]
    attempts = victim["partition_attempts"][partition]
    print(f"soak ray run {i}: killed {victim_side} p{partition} after {delay:.2f} s: "
          f"{'landed' if killed and attempts > 0 else 'missed'}, attempts {victim['partition_attempts']}")
    if not killed:
        assert attempts == 0
