"""Tests of the blindjoin Python API: two parties in two processes on 127.0.0.1.

Every party runs in its own `python -c` subprocess (the same installed package), every wait is
bounded, and every result is checked against a plaintext intersection computed here.
"""

from __future__ import annotations

import csv
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

import blindjoin

RUN_TIMEOUT_S = 120  # bound on every two-party run (the runs themselves take well under 5 s)
CONNECT_TIMEOUT_MS = 30_000

# One party: call blindjoin.<fn>(*args, **kwargs) and print the outcome as one JSON line.
# Ctrl-C is restored first: a test runner started in the background by a non-interactive shell
# inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored, so the Ctrl-C tests would
# wait for an interrupt that never comes.
PARTY = r"""
import json, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
import blindjoin
req = json.loads(sys.argv[1])
kwargs = dict(req.get("kwargs", {}))
stages = []
args = list(req.get("args", []))
if req.get("as_dataframe"):
    import pandas as pd
    df = pd.DataFrame(args[0])
    df.index = range(10, 10 + len(df))
    args[0] = df
if req.get("as_arrow"):
    import pyarrow as pa
    args[0] = pa.table(args[0], schema=pa.schema([(n, getattr(pa, t)()) for n, t in req["as_arrow"]]))
if req.get("record_progress"):
    kwargs["progress"] = lambda stage, total, ms: stages.append([stage, total])
if req.get("stall_at"):
    # Hold the run thread at a stage until the test creates the release file (bounded), to
    # catch the run in a known state; the link's reader thread keeps reading meanwhile.
    import os, time
    def stall(stage, total, ms):
        if stage.startswith(req["stall_at"]):
            open(req["stalled_file"], "w").close()
            t = time.monotonic()
            while not os.path.exists(req["release_file"]) and time.monotonic() - t < 30:
                time.sleep(0.05)
    kwargs["progress"] = stall
try:
    res = getattr(blindjoin, req["fn"])(*args, **kwargs)
    if type(res).__name__ == "DataFrame":
        res = {"type": "DataFrame", "index": [int(i) for i in res.index], "records": res.to_dict("records")}
    if type(res).__name__ == "Table":
        res = {"type": "Table", "schema": [[f.name, str(f.type)] for f in res.schema], "records": res.to_pylist()}
    out = {"ok": res, "stages": stages}
except BaseException as e:
    out = {"error": type(e).__name__, "message": str(e)}
print(json.dumps(out))
"""


def free_ports(n: int) -> List[int]:
    """n distinct free TCP ports in [12000, 32768) (below the Linux ephemeral range)."""
    rng = random.SystemRandom()
    ports: List[int] = []
    while len(ports) < n:
        p = rng.randrange(12000, 32768)
        if p in ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
        ports.append(p)
    return ports


def start_party(req: Dict[str, Any], cwd: Path, env: Optional[Dict[str, str]] = None) -> "subprocess.Popen[str]":
    """Starts one party process running `req` (see PARTY); `env` adds environment variables."""
    return subprocess.Popen(
        [sys.executable, "-c", PARTY, json.dumps(req)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def run_pair(
    reqs: Sequence[Dict[str, Any]], cwd: Path, envs: Optional[Sequence[Dict[str, str]]] = None
) -> List[Dict[str, Any]]:
    """Runs each request in its own process at the same time; returns their JSON outcomes."""
    procs = [start_party(r, cwd, envs[i] if envs else None) for i, r in enumerate(reqs)]
    outs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=RUN_TIMEOUT_S)
            lines = stdout.strip().splitlines()
            assert lines, f"party printed nothing; stderr:\n{stderr}"
            outs.append(json.loads(lines[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    return outs


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def read_csv(path: Path) -> List[Dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture()
def tables(tmp_path: Path) -> Tuple[Path, Path, List[str]]:
    """alice.csv (key `id`) and bob.csv (key `uid`), shuffled, with the plaintext intersection."""
    rng = random.Random(7)
    a_ids = [f"u{i:05d}" for i in range(0, 400)]
    b_ids = [f"u{i:05d}" for i in range(250, 700)] + ["only-bob", "é,\"quoted\""]
    a_ids.append("é,\"quoted\"")
    rng.shuffle(a_ids)
    rng.shuffle(b_ids)
    write_csv(tmp_path / "alice.csv", ["id", "age"], [[k, rng.randrange(90)] for k in a_ids])
    write_csv(tmp_path / "bob.csv", ["score", "uid"], [[rng.random(), k] for k in b_ids])
    expected = sorted(set(a_ids) & set(b_ids))
    return tmp_path / "alice.csv", tmp_path / "bob.csv", expected


def v2_config(
    self_id: str, role: str, inp: str, out: str, keys: List[str], ports: List[int], curve: str
) -> Dict[str, Any]:
    """A SecretFlow PSI v2 launch config, as in SecretFlow's docs (alice receives)."""
    return {
        "psi_config": {
            "protocol_config": {
                "protocol": "PROTOCOL_ECDH",
                "role": role,
                "broadcast_result": True,
                "ecdh_config": {"curve": curve},
            },
            "input_config": {"type": "IO_TYPE_FILE_CSV", "path": inp},
            "output_config": {"type": "IO_TYPE_FILE_CSV", "path": out},
            "keys": keys,
            "skip_duplicates_check": False,
            "disable_alignment": False,
            "advanced_join_type": "ADVANCED_JOIN_TYPE_INNER_JOIN",
        },
        "self_link_party": self_id,
        "link_config": {
            "parties": [
                {"id": "alice", "host": f"127.0.0.1:{ports[0]}"},
                {"id": "bob", "host": f"127.0.0.1:{ports[1]}"},
            ],
            "recv_timeout_ms": 60_000,
        },
        "blindjoin": {"connect_timeout_ms": CONNECT_TIMEOUT_MS},
    }


def check_outputs(a_out: Path, b_out: Path, expected: List[str]) -> None:
    a_rows, b_rows = read_csv(a_out), read_csv(b_out)
    assert sorted(r["id"] for r in a_rows) == expected
    # Aligned: row i of alice's output has the same key as row i of bob's.
    assert [r["id"] for r in a_rows] == [r["uid"] for r in b_rows]
    assert set(a_rows[0]) == {"id", "age"} and set(b_rows[0]) == {"score", "uid"}


@pytest.mark.parametrize("curve", ["CURVE_25519", "CURVE_SECP256K1"])
def test_run_dict_two_processes(tables, tmp_path: Path, curve: str) -> None:
    _, _, expected = tables
    ports = free_ports(2)
    # Relative paths: resolved against each process's current directory (tmp_path).
    ra = {"fn": "run", "args": [v2_config("alice", "ROLE_RECEIVER", "alice.csv", "a_out.csv", ["id"], ports, curve)]}
    rb = {"fn": "run", "args": [v2_config("bob", "ROLE_SENDER", "bob.csv", "b_out.csv", ["uid"], ports, curve)]}
    ra["record_progress"] = True
    a, b = run_pair([ra, rb], tmp_path)
    assert "ok" in a and "ok" in b, (a, b)
    ra_rep, rb_rep = a["ok"], b["ok"]
    assert ra_rep["intersection_count"] == len(expected) == rb_rep["intersection_count"]
    assert ra_rep["original_count"] == 401 and rb_rep["original_count"] == 452
    assert ra_rep["protocol"] == "PROTOCOL_ECDH" and ra_rep["curve"] == curve
    assert ra_rep["peer_key_count"] == 452
    assert (tmp_path / "a_out.csv.report.json").exists()
    check_outputs(tmp_path / "a_out.csv", tmp_path / "b_out.csv", expected)
    assert [s[0] for s in a["stages"]][0] == "reading input"
    assert "writing output" in [s[0] for s in a["stages"]]


def test_run_config_file_paths_resolve_against_its_directory(tables, tmp_path: Path) -> None:
    _, _, expected = tables
    ports = free_ports(2)
    cfg_dir = tmp_path / "configs"
    cfg_dir.mkdir()
    for who, role, inp, out, key in [
        ("alice", "ROLE_RECEIVER", "../alice.csv", "../a_out.csv", "id"),
        ("bob", "ROLE_SENDER", "../bob.csv", "../b_out.csv", "uid"),
    ]:
        cfg = v2_config(who, role, inp, out, [key], ports, "CURVE_25519")
        (cfg_dir / f"{who}.json").write_text(json.dumps(cfg, indent=2))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    a, b = run_pair(
        [
            {"fn": "run", "args": [str(cfg_dir / "alice.json")], "kwargs": {"report_path": "rep.json"}},
            {"fn": "run", "args": [str(cfg_dir / "bob.json")]},
        ],
        elsewhere,
    )
    assert "ok" in a and "ok" in b, (a, b)
    check_outputs(tmp_path / "a_out.csv", tmp_path / "b_out.csv", expected)
    # report_path= is relative to the current directory, like any argument.
    assert json.loads((elsewhere / "rep.json").read_text())["intersection_count"] == len(expected)


def test_psi_csv_secretflow_style(tables, tmp_path: Path) -> None:
    _, _, expected = tables
    ports = free_ports(2)
    parties = {"alice": f"127.0.0.1:{ports[0]}", "bob": f"127.0.0.1:{ports[1]}"}
    common = {
        # SecretFlow style: per-party dicts for key / input_path / output_path.
        "key": {"alice": ["id"], "bob": "uid"},
        "input_path": {"alice": str(tmp_path / "alice.csv"), "bob": str(tmp_path / "bob.csv")},
        "output_path": {"alice": str(tmp_path / "a_out.csv"), "bob": None},
        "receiver": "alice",
        "parties": parties,
        "protocol": "ECDH_PSI_2PC",
        "curve_type": "CURVE_25519",
        "precheck_input": False,
        "sort": True,
        "broadcast_result": False,
    }
    a, b = run_pair(
        [
            {"fn": "psi_csv", "kwargs": {**common, "self_party": "alice"}},
            {"fn": "psi_csv", "kwargs": {**common, "self_party": "bob"}},
        ],
        tmp_path,
    )
    assert "ok" in a and "ok" in b, (a, b)
    assert a["ok"]["intersection_count"] == len(expected)
    assert a["ok"]["role"] == "ROLE_RECEIVER" and b["ok"]["role"] == "ROLE_SENDER"
    assert b["ok"]["intersection_count"] == -1  # broadcast_result=False: bob learns nothing
    rows = read_csv(tmp_path / "a_out.csv")
    assert [r["id"] for r in rows] == expected  # sort=True: sorted by key


@pytest.mark.parametrize("protocol", ["RR22_PSI_2PC", "RR22_LOWCOMM_PSI_2PC", "KKRT_PSI_2PC"])
def test_psi_csv_rr22(tables, tmp_path: Path, protocol: str) -> None:
    _, _, expected = tables
    ports = free_ports(2)
    common = {
        "key": {"alice": ["id"], "bob": "uid"},
        "input_path": {"alice": str(tmp_path / "alice.csv"), "bob": str(tmp_path / "bob.csv")},
        "output_path": {"alice": str(tmp_path / "a_out.csv"), "bob": str(tmp_path / "b_out.csv")},
        "receiver": "alice",
        "parties": {"alice": f"127.0.0.1:{ports[0]}", "bob": f"127.0.0.1:{ports[1]}"},
        "protocol": protocol,
        "bucket_size": 64,
        "broadcast_result": True,
    }
    a, b = run_pair(
        [
            {"fn": "psi_csv", "kwargs": {**common, "self_party": "alice"}},
            {"fn": "psi_csv", "kwargs": {**common, "self_party": "bob"}},
        ],
        tmp_path,
    )
    assert "ok" in a and "ok" in b, (a, b)
    if protocol == "KKRT_PSI_2PC":
        assert a["ok"]["protocol"] == "PROTOCOL_KKRT"
        assert a["ok"].get("mode") is None
    else:
        assert a["ok"]["protocol"] == "PROTOCOL_RR22"
        assert a["ok"]["mode"] == ("low_comm" if "LOWCOMM" in protocol else "fast")
    assert a["ok"]["buckets"] > 1
    check_outputs(tmp_path / "a_out.csv", tmp_path / "b_out.csv", expected)


def test_intersect_lists_of_dicts(tmp_path: Path) -> None:
    alice = [{"id": i, "name": f"a{i}", "tag": None} for i in [5, 1, 9, 3, 3, 12, 7]]
    bob = [{"id": i, "amount": i * 10} for i in [3, 7, 8, 5, 100, 5]]
    ports = free_ports(2)
    common = {"keys": "id", "protocol": "PROTOCOL_RR22", "rr22_mode": "malicious",
              "connect_timeout_ms": CONNECT_TIMEOUT_MS}
    a, b = run_pair(
        [
            {"fn": "intersect", "args": [alice], "kwargs": {**common, "role": "receiver",
             "self_addr": f"127.0.0.1:{ports[0]}", "peer_addr": f"127.0.0.1:{ports[1]}"}},
            {"fn": "intersect", "args": [bob], "kwargs": {**common, "role": "sender",
             "self_addr": f"127.0.0.1:{ports[1]}", "peer_addr": f"127.0.0.1:{ports[0]}"}},
        ],
        tmp_path,
    )
    assert "ok" in a and "ok" in b, (a, b)
    common_ids = {r["id"] for r in alice} & {r["id"] for r in bob}

    def count(rows, k):
        return sum(r["id"] == k for r in rows)

    # Original rows, values and types kept; SQL join pairs: each matching row once per matching
    # peer row (alice's 5 twice, bob's 3 twice); sorted by key text; zipped they pair up.
    want_a = [json.dumps(r) for r in alice if r["id"] in common_ids for _ in range(count(bob, r["id"]))]
    want_b = [json.dumps(r) for r in bob if r["id"] in common_ids for _ in range(count(alice, r["id"]))]
    assert sorted(map(json.dumps, a["ok"])) == sorted(want_a)
    assert sorted(map(json.dumps, b["ok"])) == sorted(want_b)
    assert [r["id"] for r in a["ok"]] == sorted((r["id"] for r in a["ok"]), key=str)
    assert [r["id"] for r in a["ok"]] == [r["id"] for r in b["ok"]]
    assert {r["id"] for r in a["ok"]} == common_ids == {3, 5, 7}


def test_intersect_pandas_if_available(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    ports = free_ports(2)
    common = {"keys": ["k"], "connect_timeout_ms": CONNECT_TIMEOUT_MS}
    a, b = run_pair(
        [
            # The party script turns args[0] into a DataFrame (index 10, 11, ...) and back.
            {"fn": "intersect", "as_dataframe": True,
             "args": [{"k": ["x", "y", "z", "x"], "v": [1.5, 2.5, 3.5, 4.5]}],
             "kwargs": {**common, "role": "receiver",
                        "self_addr": f"127.0.0.1:{ports[0]}", "peer_addr": f"127.0.0.1:{ports[1]}"}},
            {"fn": "intersect", "as_dataframe": True,
             "args": [{"k": ["z", "x", "w"], "n": [1, 2, 3]}],
             "kwargs": {**common, "role": "sender",
                        "self_addr": f"127.0.0.1:{ports[1]}", "peer_addr": f"127.0.0.1:{ports[0]}"}},
        ],
        tmp_path,
    )
    assert "ok" in a and "ok" in b, (a, b)
    assert a["ok"] == {"type": "DataFrame", "index": [10, 13, 12],
                       "records": [{"k": "x", "v": 1.5}, {"k": "x", "v": 4.5}, {"k": "z", "v": 3.5}]}
    # SQL join pairs (broadcast_result): bob's "x" row once per alice "x" row, so the two zip up.
    assert b["ok"] == {"type": "DataFrame", "index": [11, 11, 10],
                       "records": [{"k": "x", "n": 2}, {"k": "x", "n": 2}, {"k": "z", "n": 1}]}


def test_unknown_config_field_is_config_error(tmp_path: Path) -> None:
    cfg = v2_config("alice", "ROLE_RECEIVER", "alice.csv", "out.csv", ["id"], [12001, 12002], "CURVE_25519")
    cfg["psi_config"]["no_such_field"] = 1
    with pytest.raises(blindjoin.ConfigError, match="no_such_field"):
        blindjoin.run(cfg)
    with pytest.raises(blindjoin.Error):  # the base class catches it too
        blindjoin.run(json.dumps(cfg))


def test_unsupported_protocol_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(blindjoin.ConfigError, match="unknown two-party protocol"):
        blindjoin.psi_csv(
            "id", tmp_path / "a.csv", tmp_path / "o.csv", "alice", self_party="alice",
            parties={"alice": "127.0.0.1:12001", "bob": "127.0.0.1:12002"}, protocol="NO_SUCH_PSI_2PC",
        )


def test_missing_input_file_is_file_not_found(tmp_path: Path) -> None:
    ports = free_ports(2)
    cfg = v2_config("alice", "ROLE_RECEIVER", str(tmp_path / "nope.csv"), str(tmp_path / "o.csv"), ["id"], ports, "CURVE_25519")
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        blindjoin.run(cfg)  # no peer: gives up after a short grace period
    assert not (tmp_path / "o.csv").exists()


def test_missing_key_column_is_input_error_and_peer_error(tables, tmp_path: Path) -> None:
    ports = free_ports(2)
    ra = v2_config("alice", "ROLE_RECEIVER", "alice.csv", "a_out.csv", ["customer_id"], ports, "CURVE_25519")
    rb = v2_config("bob", "ROLE_SENDER", "bob.csv", "b_out.csv", ["uid"], ports, "CURVE_25519")
    a, b = run_pair([{"fn": "run", "args": [ra]}, {"fn": "run", "args": [rb]}], tmp_path)
    assert a.get("error") == "InputError", a
    assert "customer_id" in a["message"]
    # Bob learns why alice stopped (she aborts with her message).
    assert b.get("error") == "PeerError", b
    assert "customer_id" in b["message"]
    assert not (tmp_path / "a_out.csv").exists() and not (tmp_path / "b_out.csv").exists()


def test_exception_hierarchy() -> None:
    for cls in (blindjoin.ConfigError, blindjoin.InputError, blindjoin.LinkError,
                blindjoin.PeerError, blindjoin.ProtocolError, blindjoin.CacheError):
        assert issubclass(cls, blindjoin.Error)
        assert cls.__module__ == "blindjoin"
    assert issubclass(blindjoin.Error, Exception)


COORDINATOR = r"""
import json, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from blindjoin import _config_text, _native
text, source, base = _config_text(json.loads(sys.argv[1]))
try:
    _native.start_coordinator(text, source, base, 2, sys.argv[2])
    print(json.dumps({"ok": True}))
except BaseException as e:
    print(json.dumps({"error": type(e).__name__}))
"""


def test_ctrl_c_cancels_a_ray_coordinator_waiting_for_its_peer(tables, tmp_path: Path) -> None:
    """blindjoin.ray's coordinator (no Ray needed for this phase) waits for its peer on a
    thread of its own: Ctrl-C ends the wait at once and removes its private work folder."""
    import signal
    import time

    ports = free_ports(2)
    cfg = v2_config("alice", "ROLE_RECEIVER", "alice.csv", "a_out.csv", ["id"], ports, "CURVE_25519")
    work = tmp_path / "work"
    work.mkdir()
    p = subprocess.Popen(
        [sys.executable, "-c", COORDINATOR, json.dumps(cfg), str(work)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(2.0)  # let it import, spill and start waiting for the peer
        assert p.poll() is None
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        stdout, _ = p.communicate(timeout=10)
        assert time.monotonic() - t < 5
        assert json.loads(stdout.strip().splitlines()[-1])["error"] == "KeyboardInterrupt"
        assert list(work.iterdir()) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def test_ctrl_c_raises_keyboard_interrupt_promptly(tables, tmp_path: Path) -> None:
    import signal
    import time

    ports = free_ports(2)
    cfg = v2_config("alice", "ROLE_RECEIVER", "alice.csv", "a_out.csv", ["id"], ports, "CURVE_25519")
    # No peer: the run would wait CONNECT_TIMEOUT_MS for it. Ctrl-C must end the call long before.
    p = subprocess.Popen(
        [sys.executable, "-c", PARTY, json.dumps({"fn": "run", "args": [cfg]})],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(2.0)  # let it import and start waiting for the peer
        assert p.poll() is None
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        stdout, _ = p.communicate(timeout=10)
        assert time.monotonic() - t < 5
        assert json.loads(stdout.strip().splitlines()[-1])["error"] == "KeyboardInterrupt"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def test_threads_logging_level_and_trace_path(tables, tmp_path: Path) -> None:
    _, _, expected = tables
    ports = free_ports(2)
    ca = v2_config("alice", "ROLE_RECEIVER", "alice.csv", "a_out.csv", ["id"], ports, "CURVE_25519")
    cb = v2_config("bob", "ROLE_SENDER", "bob.csv", "b_out.csv", ["uid"], ports, "CURVE_25519")
    ca["psi_config"]["debug_options"] = {"trace_path": "alice.trace", "logging_level": "info"}
    a, b = run_pair(
        [
            # The keyword arguments win over the config's level.
            {"fn": "run", "args": [ca], "kwargs": {"threads": 1, "logging_level": "debug"}},
            {"fn": "run", "args": [cb], "kwargs": {"threads": 2, "logging_level": "off"}},
        ],
        tmp_path,
    )
    assert "ok" in a and "ok" in b, (a, b)
    check_outputs(tmp_path / "a_out.csv", tmp_path / "b_out.csv", expected)
    trace = json.loads((tmp_path / "alice.trace").read_text())
    names = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"]
    assert names[:2] == ["run", "read input"] and "handshake" in names, names
    assert all(e["dur"] >= 0 for e in trace["traceEvents"] if e["ph"] == "X")
    assert (tmp_path / "alice.trace").stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "bob.trace").exists()
    for kwargs, match in [({"threads": 0}, "threads"), ({"logging_level": "loud"}, "logging_level")]:
        with pytest.raises(blindjoin.ConfigError, match=match):
            blindjoin.run(ca, **kwargs)
