"""blindjoin.ray: two parties, each a separate Python process with its own local Ray instance
and 2 partition workers, on 127.0.0.1; the outputs must be byte-identical to a one-process,
one-worker run's, also when a partition's worker process is killed with SIGKILL mid-run (it is
retried from its checkpoint).

Skipped when Ray is not installed (``pip install 'blindjoin[ray]'``).
"""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'blindjoin[ray]'")

import blindjoin  # noqa: E402

# Bounds every wait; Ray's start-up on a busy 2-core machine takes 5-20 s per instance.
RUN_TIMEOUT_S = 240

PARTY = r"""
import json, sys
import blindjoin.ray
cfg, work, out = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    r = blindjoin.ray.run(cfg, workers=2, work_dir=work, num_cpus=2, timeout_s=180)
    res = {"ok": r}
except BaseException as e:
    res = {"error": type(e).__name__, "message": str(e)}
with open(out, "w") as f:
    json.dump(res, f)
"""


def free_range(n: int) -> List[int]:
    """n contiguous free ports in [20000, 32000)."""
    rng = random.SystemRandom()
    for _ in range(200):
        base = rng.randrange(20000, 32000 - n)
        ok = True
        for p in range(base, base + n):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return list(range(base, base + n))
    raise RuntimeError("no free port range")


def write_tables(d: Path) -> None:
    """receiver.csv and sender.csv: 40000 and 36000 rows, 15000 keys shared, some duplicated."""
    rng = random.Random(31)
    r_keys = [f"k{i:07d}" for i in range(40000)]
    s_keys = [f"k{i:07d}" for i in range(25000, 61000)]
    r_keys += r_keys[:800]
    s_keys += s_keys[:500]
    rng.shuffle(r_keys)
    rng.shuffle(s_keys)
    with open(d / "receiver.csv", "w", encoding="utf-8") as f:
        f.write("id,a\n")
        for i, k in enumerate(r_keys):
            f.write(f"{k},{i}\n")
    with open(d / "sender.csv", "w", encoding="utf-8") as f:
        f.write("id,b\n")
        for i, k in enumerate(s_keys):
            f.write(f"{k},x{i}\n")


def config(d: Path, me: str, ports: List[int], tag: str, workers: List[int]) -> Path:
    role = "ROLE_RECEIVER" if me == "receiver" else "ROLE_SENDER"
    cfg: Dict[str, Any] = {
        "psi_config": {
            "protocol_config": {
                "protocol": "PROTOCOL_RR22",
                "role": role,
                "broadcast_result": True,
                "rr22_config": {"bucket_size": "500"},
            },
            "input_config": {"type": "IO_TYPE_FILE_CSV", "path": f"{me}.csv"},
            "output_config": {"type": "IO_TYPE_FILE_CSV", "path": f"{me}_{tag}.csv"},
            "keys": ["id"],
            "advanced_join_type": "ADVANCED_JOIN_TYPE_FULL_JOIN",
            "left_side": "ROLE_RECEIVER",
        },
        "self_link_party": me,
        "link_config": {
            "parties": [
                {"id": "receiver", "host": f"127.0.0.1:{ports[0]}"},
                {"id": "sender", "host": f"127.0.0.1:{ports[1]}"},
            ],
            "recv_timeout_ms": 60_000,
        },
        "blindjoin": {"connect_timeout_ms": 120_000},
    }
    if workers:
        cfg["blindjoin"]["worker_ports"] = f"{workers[0]}-{workers[-1]}"
    p = d / f"{me}_{tag}.json"
    p.write_text(json.dumps(cfg), encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tables and a one-process, one-worker run's outputs (`ROLE_ref.csv`)."""
    d = tmp_path_factory.mktemp("ray")
    write_tables(d)
    ports = free_range(2)
    errors: List[BaseException] = []

    def one(me: str) -> None:
        try:
            blindjoin.run(config(d, me, ports, "ref", []))
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=one, args=(me,)) for me in ("receiver", "sender")]
    for t in ts:
        t.start()
    for t in ts:
        t.join(RUN_TIMEOUT_S)
    assert not errors, errors
    return d


def start(d: Path, me: str, tag: str, ports: List[int], workers: List[int]) -> Tuple["subprocess.Popen[bytes]", Path, Path]:
    work = d / f"work-{me}-{tag}"
    work.mkdir()
    out = d / f"{me}_{tag}.result.json"
    cfg = config(d, me, ports, tag, workers)
    p = subprocess.Popen([sys.executable, "-c", PARTY, str(cfg), str(work), str(out)], cwd=d)
    return p, work, out


def finish(procs: List["subprocess.Popen[bytes]"], outs: List[Path]) -> List[Dict[str, Any]]:
    try:
        for p in procs:
            p.wait(timeout=RUN_TIMEOUT_S)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    results = [json.loads(o.read_text()) for o in outs]
    for r in results:
        assert "ok" in r, r
    return [r["ok"] for r in results]


def same_bytes(d: Path, tag: str) -> None:
    for me in ("receiver", "sender"):
        ref = (d / f"{me}_ref.csv").read_bytes()
        got = (d / f"{me}_{tag}.csv").read_bytes()
        assert len(ref) > 1000
        assert got == ref, f"{me}: the Ray run's output differs from the one-process run's"


def test_two_ray_parties_match_a_one_process_run(reference: Path) -> None:
    d = reference
    ports, workers = free_range(2), free_range(2)
    pr, work_r, outr = start(d, "receiver", "ray", ports, workers)
    ps, work_s, outs = start(d, "sender", "ray", ports, workers)
    reports = finish([pr, ps], [outr, outs])
    same_bytes(d, "ray")
    # The private work folders (copies of the inputs) are gone.
    for w in (work_r, work_s):
        assert not glob.glob(str(w / ".blindjoin-work-*")), w
    for r in reports:
        assert r["partition_attempts"] == [0, 0]
        assert r["resumed_at_bucket"] == 0


def test_a_killed_partition_worker_is_retried_and_the_output_is_identical(reference: Path) -> None:
    d = reference
    ports, workers = free_range(2), free_range(2)
    pr, work_r, outr = start(d, "receiver", "kill", ports, workers)
    ps, _, outs = start(d, "sender", "kill", ports, workers)
    # Wait for the receiver's partition 0 to checkpoint a bucket, then SIGKILL its worker.
    deadline = time.monotonic() + RUN_TIMEOUT_S
    killed = None
    while time.monotonic() < deadline and pr.poll() is None:
        pids = glob.glob(str(work_r / ".blindjoin-work-*" / "pids" / "p0-a0.pid"))
        cps = glob.glob(str(work_r / ".blindjoin-work-*" / "partitions" / "p0" / "checkpoint.json"))
        if pids and cps:
            pid = int(Path(pids[0]).read_text())
            os.kill(pid, signal.SIGKILL)
            killed = pid
            break
        time.sleep(0.05)
    assert killed is not None, "the partition never started"
    reports = finish([pr, ps], [outr, outs])
    same_bytes(d, "kill")
    for r in reports:
        assert r["partition_attempts"][0] == 1, r["partition_attempts"]
        assert r["partition_attempts"][1] == 0
    # The retried partition resumed from its checkpoint rather than from its first bucket.
    assert reports[0]["resumed_at_bucket"] > 0
