"""SecretFlow-style calls (one process running every party, `blindjoin.SPU`), every protocol in
two processes, pyarrow tables, and cancellation (Ctrl-C and CancelToken).

Every network run is on 127.0.0.1 and every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

import blindjoin
from test_api import (
    CONNECT_TIMEOUT_MS,
    RUN_TIMEOUT_S,
    check_outputs,
    free_ports,
    read_csv,
    run_pair,
    start_party,
    tables,  # noqa: F401  (a fixture)
    v2_config,
)

REPO = Path(__file__).resolve().parents[2]


def seed_args(tmp_path: Path, alice: Any, bob: Any, **overrides: Any) -> Dict[str, Any]:
    """The seed script's spu.psi_csv(...) arguments, with dict keys `alice`/`bob` (names or PYUs)."""
    args: Dict[str, Any] = dict(
        key={alice: ["id"], bob: ["uid"]},
        input_path={alice: str(tmp_path / "alice.csv"), bob: str(tmp_path / "bob.csv")},
        output_path={alice: str(tmp_path / "a_out.csv"), bob: str(tmp_path / "b_out.csv")},
        receiver="alice",
        protocol="KKRT_PSI_2PC",
        precheck_input=False,
        sort=False,
        broadcast_result=False,
    )
    args.update(overrides)
    return args


def test_psi_csv_one_process_seed_arguments(tables, tmp_path: Path) -> None:  # noqa: F811
    _, _, expected = tables
    # No parties given: both run here on free 127.0.0.1 ports.
    reports = blindjoin.psi_csv(**seed_args(tmp_path, "alice", "bob"), connect_timeout_ms=CONNECT_TIMEOUT_MS)
    assert isinstance(reports, list) and [r["party"] for r in reports] == ["alice", "bob"]
    assert reports[0]["intersection_count"] == len(expected)
    assert reports[1]["intersection_count"] == -1  # broadcast_result=False: bob learns nothing
    assert reports[0]["protocol"] == "PROTOCOL_KKRT"
    assert sorted(r["id"] for r in read_csv(tmp_path / "a_out.csv")) == expected
    assert not (tmp_path / "b_out.csv").exists()


def test_one_process_sender_may_omit_its_output_path(tables, tmp_path: Path) -> None:  # noqa: F811
    _, _, expected = tables
    args = seed_args(tmp_path, "alice", "bob", output_path={"alice": str(tmp_path / "a_out.csv")})
    reports = blindjoin.psi_csv(**args, connect_timeout_ms=CONNECT_TIMEOUT_MS)
    assert [r["intersection_count"] for r in reports] == [len(expected), -1]
    # broadcast_result=True: bob learns the result, so his missing output path is an error.
    args["broadcast_result"] = True
    with pytest.raises(blindjoin.ConfigError, match="output"):
        blindjoin.psi_csv(**args, connect_timeout_ms=CONNECT_TIMEOUT_MS)


@pytest.mark.parametrize("protocol", ["ECDH_PSI_2PC", "RR22_PSI_2PC"])
def test_spu_cluster_def_with_pyu_keys(tables, tmp_path: Path, protocol: str) -> None:  # noqa: F811
    _, _, expected = tables
    ports = free_ports(2)
    cluster_def = {
        "nodes": [
            {"party": "alice", "address": f"127.0.0.1:{ports[0]}", "listen_address": f"127.0.0.1:{ports[0]}"},
            {"party": "bob", "address": f"127.0.0.1:{ports[1]}"},
        ],
        "runtime_config": {"protocol": 1, "field": 3},  # SecretFlow's SPU settings: ignored
    }
    spu = blindjoin.SPU(cluster_def, connect_timeout_ms=CONNECT_TIMEOUT_MS)
    assert spu.parties == ["alice", "bob"]
    alice, bob = blindjoin.PYU("alice"), blindjoin.PYU("bob")
    reports = spu.psi_csv(**seed_args(tmp_path, alice, bob, protocol=protocol, sort=True, broadcast_result=True))
    assert [r["party"] for r in reports] == ["alice", "bob"]
    assert reports[0]["intersection_count"] == reports[1]["intersection_count"] == len(expected)
    check_outputs(tmp_path / "a_out.csv", tmp_path / "b_out.csv", expected)


def test_listen_address_is_where_the_listener_binds(tables, tmp_path: Path) -> None:  # noqa: F811
    _, _, expected = tables
    ports = free_ports(3)
    # alice (sorts first) listens: on her listen_address, not on her (unreachable) address.
    cluster_def = {"nodes": [
        {"party": "alice", "address": f"127.0.0.1:{ports[0]}", "listen_address": f"0.0.0.0:{ports[0]}"},
        {"party": "bob", "address": f"127.0.0.1:{ports[1]}", "listen_address": f"127.0.0.1:{ports[2]}"},
    ]}
    reports = blindjoin.SPU(cluster_def, connect_timeout_ms=CONNECT_TIMEOUT_MS).psi_csv(
        **seed_args(tmp_path, "alice", "bob"))
    assert reports[0]["intersection_count"] == len(expected)


def test_spu_two_processes_self_party_from_env(tables, tmp_path: Path) -> None:  # noqa: F811
    """The multi-machine case: the same call in two processes, each told its party by env var."""
    _, _, expected = tables
    ports = free_ports(2)
    cluster_def = {"nodes": [{"party": "alice", "address": f"127.0.0.1:{ports[0]}"},
                             {"party": "bob", "address": f"127.0.0.1:{ports[1]}"}]}
    kwargs = seed_args(tmp_path, "alice", "bob", sort=True, broadcast_result=True)
    kwargs["parties"] = cluster_def
    kwargs["connect_timeout_ms"] = CONNECT_TIMEOUT_MS
    a, b = run_pair([{"fn": "psi_csv", "kwargs": kwargs}] * 2, tmp_path,
                    envs=[{blindjoin.SELF_PARTY_ENV: "alice"}, {blindjoin.SELF_PARTY_ENV: "bob"}])
    assert "ok" in a and "ok" in b, (a, b)
    assert [r["party"] for r in a["ok"]] == ["alice"] and [r["party"] for r in b["ok"]] == ["bob"]
    check_outputs(tmp_path / "a_out.csv", tmp_path / "b_out.csv", expected)


def test_one_process_input_error_raises_the_first_hand_error(tables, tmp_path: Path) -> None:  # noqa: F811
    args = seed_args(tmp_path, "alice", "bob", key={"alice": ["nope"], "bob": ["uid"]})
    with pytest.raises(blindjoin.InputError, match="nope"):
        blindjoin.psi_csv(**args, connect_timeout_ms=CONNECT_TIMEOUT_MS)
    assert not (tmp_path / "a_out.csv").exists()


def test_psi_csv_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(blindjoin.ConfigError, match="self_party"):
        blindjoin.psi_csv("id", "a.csv", "o.csv", "alice", parties={"alice": "127.0.0.1:1", "bob": "127.0.0.1:2"})
    with pytest.raises(blindjoin.ConfigError, match="parties"):
        blindjoin.psi_csv({"alice": "id"}, {"alice": "a.csv"}, {"alice": "o.csv"}, "alice")
    with pytest.raises(blindjoin.ConfigError, match="carol"):
        blindjoin.psi_csv("id", {"carol": "c.csv"}, None, "alice", parties={"alice": "127.0.0.1:1", "bob": "127.0.0.1:2"})
    with pytest.raises(blindjoin.ConfigError, match="nodes"):
        blindjoin.SPU({"nodes": [{"party": "alice"}]})


# Every protocol that has landed, two processes against the plaintext intersection.
ALL_PROTOCOLS = [
    ("ECDH_PSI_2PC", "CURVE_25519"),
    ("ECDH_PSI_2PC", "CURVE_RISTRETTO255"),
    ("ECDH_PSI_2PC", "CURVE_SECP256K1"),
    ("ECDH_PSI_2PC", "CURVE_P256"),
    ("ECDH_PSI_2PC", "CURVE_SM2"),
    ("RR22_PSI_2PC", None),
    ("RR22_LOWCOMM_PSI_2PC", None),
    ("KKRT_PSI_2PC", None),
]


@pytest.mark.parametrize("protocol,curve", ALL_PROTOCOLS)
def test_every_protocol_two_processes(tables, tmp_path: Path, protocol: str, curve: Any) -> None:  # noqa: F811
    _, _, expected = tables
    ports = free_ports(2)
    kwargs = seed_args(tmp_path, "alice", "bob", protocol=protocol, sort=True, broadcast_result=True)
    kwargs.update(parties={"alice": f"127.0.0.1:{ports[0]}", "bob": f"127.0.0.1:{ports[1]}"},
                  connect_timeout_ms=CONNECT_TIMEOUT_MS)
    if curve:
        kwargs["curve_type"] = curve
    a, b = run_pair([{"fn": "psi_csv", "kwargs": {**kwargs, "self_party": p}} for p in ("alice", "bob")], tmp_path)
    assert "ok" in a and "ok" in b, (a, b)
    assert a["ok"]["intersection_count"] == b["ok"]["intersection_count"] == len(expected)
    if curve:
        assert a["ok"]["curve"] == curve
    check_outputs(tmp_path / "a_out.csv", tmp_path / "b_out.csv", expected)


def test_intersect_pyarrow_table(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    ports = free_ports(2)
    common = {"keys": ["k"], "connect_timeout_ms": CONNECT_TIMEOUT_MS}
    a, b = run_pair(
        [
            {"fn": "intersect", "as_arrow": [["k", "int64"], ["v", "float32"], ["s", "string"]],
             "args": [{"k": [7, 3, 9, 3], "v": [0.5, 1.5, 2.5, 3.5], "s": ["a", None, "c", "d"]}],
             "kwargs": {**common, "role": "receiver",
                        "self_addr": f"127.0.0.1:{ports[0]}", "peer_addr": f"127.0.0.1:{ports[1]}"}},
            {"fn": "intersect", "as_arrow": [["k", "int64"], ["n", "int32"]],
             "args": [{"k": [9, 3, 1], "n": [1, 2, 3]}],
             "kwargs": {**common, "role": "sender",
                        "self_addr": f"127.0.0.1:{ports[1]}", "peer_addr": f"127.0.0.1:{ports[0]}"}},
        ],
        tmp_path,
    )
    assert "ok" in a and "ok" in b, (a, b)
    assert a["ok"]["schema"] == [["k", "int64"], ["v", "float"], ["s", "string"]]
    assert a["ok"]["records"] == [{"k": 3, "v": 1.5, "s": None}, {"k": 3, "v": 3.5, "s": "d"},
                                  {"k": 9, "v": 2.5, "s": "c"}]
    assert b["ok"]["schema"] == [["k", "int64"], ["n", "int32"]]
    assert b["ok"]["records"] == [{"k": 3, "n": 2}, {"k": 3, "n": 2}, {"k": 9, "n": 1}]


def test_cancel_token_stops_a_waiting_run_and_frees_its_port(tables, tmp_path: Path) -> None:  # noqa: F811
    ports = free_ports(2)
    cfg = v2_config("alice", "ROLE_RECEIVER", "alice.csv", "a_out.csv", ["id"], ports, "CURVE_25519")
    cfg["psi_config"]["input_config"]["path"] = str(tmp_path / "alice.csv")
    cfg["psi_config"]["output_config"]["path"] = str(tmp_path / "a_out.csv")
    token = blindjoin.CancelToken()
    outcome: List[BaseException] = []

    def party() -> None:
        try:
            blindjoin.run(cfg, cancel=token)
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=party, daemon=True)
    t.start()
    time.sleep(1.0)  # alice (sorts first) is listening on ports[0], waiting for bob
    assert t.is_alive() and not token.cancelled
    start = time.monotonic()
    token.cancel()
    t.join(5.0)
    assert not t.is_alive() and time.monotonic() - start < 2.0
    assert isinstance(outcome[0], KeyboardInterrupt) and "cancelled" in str(outcome[0])
    with socket.socket() as s:  # the listening port is free again
        s.bind(("127.0.0.1", ports[0]))
    assert not (tmp_path / "a_out.csv").exists()


def test_ctrl_c_cancels_the_run_and_the_peer_learns_why(tables, tmp_path: Path) -> None:  # noqa: F811
    """SIGINT to alice mid-run: alice raises KeyboardInterrupt at once, and bob — held at a stage
    by the test, so the run is in a known state — fails with PeerError naming the cancel as soon
    as it continues, instead of at its receive timeout."""
    ports = free_ports(2)
    kwargs = seed_args(tmp_path, "alice", "bob", sort=True, broadcast_result=True, bucket_size=64)
    kwargs.update(parties={"alice": f"127.0.0.1:{ports[0]}", "bob": f"127.0.0.1:{ports[1]}"},
                  connect_timeout_ms=CONNECT_TIMEOUT_MS, recv_timeout_ms=60_000)
    stalled, release = tmp_path / "bob_stalled", tmp_path / "release"
    a = start_party({"fn": "psi_csv", "kwargs": {**kwargs, "self_party": "alice"}}, tmp_path)
    b = start_party({"fn": "psi_csv", "kwargs": {**kwargs, "self_party": "bob"},
                     "stall_at": "running the protocol", "stalled_file": str(stalled),
                     "release_file": str(release)}, tmp_path)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not stalled.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stalled.exists(), "bob never reached the protocol stage"
        time.sleep(0.5)  # alice is now waiting for bob's first protocol message
        assert a.poll() is None
        t = time.monotonic()
        a.send_signal(signal.SIGINT)
        out_a, _ = a.communicate(timeout=10)
        assert time.monotonic() - t < 5
        res_a = json.loads(out_a.strip().splitlines()[-1])
        assert res_a["error"] == "KeyboardInterrupt", res_a
        release.touch()
        t = time.monotonic()
        out_b, err_b = b.communicate(timeout=10)
        assert time.monotonic() - t < 5, "bob should stop at once, not at its receive timeout"
        res_b = json.loads(out_b.strip().splitlines()[-1])
        assert res_b.get("error") == "PeerError", (res_b, err_b)
        assert "cancelled the run (Ctrl-C)" in res_b["message"]
        assert not (tmp_path / "a_out.csv").exists() and not (tmp_path / "b_out.csv").exists()
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def test_seed_benchmark_example_runs(tmp_path: Path) -> None:
    ports = free_ports(2)
    script = REPO / "python" / "examples" / "seed_benchmark.py"
    proc = subprocess.run(
        [sys.executable, str(script), "-n", "2000", "--overlap", "700", "--out-dir", str(tmp_path),
         "--alice-addr", f"127.0.0.1:{ports[0]}", "--bob-addr", f"127.0.0.1:{ports[1]}"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        env={k: v for k, v in os.environ.items() if k != blindjoin.SELF_PARTY_ENV},
    )
    assert proc.returncode == 0, proc.stderr
    assert "psi reports: [" in proc.stdout and "'intersection_count': 700" in proc.stdout
    assert "cost time:" in proc.stdout
    rows = read_csv(tmp_path / "psi_output_alice.csv")
    assert len(rows) == 700 and not (tmp_path / "psi_output_bob.csv").exists()
