"""blindjoin.run(..., peer_wire="secretflow") against an unmodified SecretFlow party (PyPI
spu==0.9.5 in target/spuenv, or BLINDJOIN_SPU_PYTHON), on 127.0.0.1: the output must be what a
SecretFlow party writes in the same seat of a SecretFlow-to-SecretFlow run. Without spu this
test FAILS, saying how to install it (a skipped interop test is a failed one).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import List

import blindjoin

ROOT = Path(__file__).resolve().parents[2]
PEER = ROOT / "crates/cli/tests/secretflow/psi_peer.py"
TIMEOUT_S = 180


def spu_python() -> str:
    p = os.environ.get("BLINDJOIN_SPU_PYTHON", str(ROOT / "target/spuenv/bin/python"))
    ok = Path(p).exists() and subprocess.run([p, "-c", "import spu.psi"], capture_output=True).returncode == 0
    assert ok, (
        f"the SecretFlow interop test needs a Python with spu 0.9.5, not found at {p}: "
        "python3 -m venv target/spuenv && target/spuenv/bin/pip install spu==0.9.5"
    )
    return p


def ports() -> List[int]:
    out = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        out.append(s.getsockname()[1])
        s.close()
    return out


def sf(py: str, rank: int, p: List[int], inp: Path, out: Path) -> "subprocess.Popen[bytes]":
    return subprocess.Popen(
        [py, str(PEER), "--rank", str(rank), "--ports", f"{p[0]},{p[1]}", "--input", str(inp),
         "--output", str(out), "--curve", "CURVE_FOURQ"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def config(p: List[int], inp: Path, out: Path) -> dict:
    return {
        "psi_config": {
            "protocol_config": {
                "protocol": "PROTOCOL_ECDH", "role": "ROLE_RECEIVER", "broadcast_result": True,
                "ecdh_config": {"curve": "CURVE_FOURQ", "batch_size": 4096},
                "kkrt_config": {"bucket_size": 1048576}, "rr22_config": {"bucket_size": 1048576},
            },
            "input_config": {"type": "IO_TYPE_FILE_CSV", "path": str(inp)},
            "output_config": {"type": "IO_TYPE_FILE_CSV", "path": str(out)},
            "keys": ["id"], "advanced_join_type": "ADVANCED_JOIN_TYPE_INNER_JOIN",
            "left_side": "ROLE_RECEIVER", "check_hash_digest": True,
            "output_attr": {"csv_null_rep": "NULL"},
        },
        "link_config": {"parties": [{"id": "party0", "host": f"127.0.0.1:{p[0]}"},
                                    {"id": "party1", "host": f"127.0.0.1:{p[1]}"}]},
        "self_link_party": "party0",
    }


def test_a_python_party_runs_against_secretflow_and_writes_what_secretflow_writes(tmp_path: Path) -> None:
    py = spu_python()
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("id,x\n" + "".join(f"k{i % 40},{i}\n" for i in range(60)))
    b.write_text("id,y\n" + "".join(f"k{i},{i}\n" for i in range(20, 90)))
    # SecretFlow in both seats: the reference.
    p = ports()
    ref = [tmp_path / "ref0.csv", tmp_path / "ref1.csv"]
    peers = [sf(py, r, p, [a, b][r], ref[r]) for r in range(2)]
    for q in peers:
        out, _ = q.communicate(timeout=TIMEOUT_S)
        assert q.returncode == 0, out.decode(errors="replace")[-3000:]
    # blindjoin from Python in seat 0.
    p = ports()
    got = [tmp_path / "bj0.csv", tmp_path / "sf1.csv"]
    peer = sf(py, 1, p, b, got[1])
    report = blindjoin.run(config(p, a, got[0]), peer_wire="secretflow")
    out, _ = peer.communicate(timeout=TIMEOUT_S)
    assert peer.returncode == 0, out.decode(errors="replace")[-3000:]
    assert got[0].read_bytes() == ref[0].read_bytes()
    assert got[1].read_bytes() == ref[1].read_bytes()
    assert report["protocol"] == "PROTOCOL_ECDH" and report["curve"] == "CURVE_FOURQ"
    assert report["bytes_sent"] > 0 and report["bytes_received"] > 0


UB_PEER = ROOT / "crates/cli/tests/secretflow/ub_peer.py"


def ub_sf(py: str, rank: int, p: List[int], role: str, inp: Path, out: Path, cache: Path) -> "subprocess.Popen[bytes]":
    """A SecretFlow party of unbalanced PSI, MODE_FULL, both parties learning the result."""
    return subprocess.Popen(
        [py, str(UB_PEER), "--rank", str(rank), "--ports", f"{p[0]},{p[1]}", "--mode", "MODE_FULL",
         "--role", role, "--input", str(inp), "--output", str(out), "--cache", str(cache),
         "--server-result", "1", "--client-result", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def ub_config(p: List[int], inp: Path, out: Path, cache: Path) -> dict:
    """blindjoin's seat 0: the unbalanced server, as the wheel's `ub_peer.py` runs it."""
    return {
        "ub_psi_config": {
            "mode": "MODE_FULL", "role": "ROLE_SERVER",
            "input_config": {"type": "IO_TYPE_FILE_CSV", "path": str(inp)},
            "output_config": {"type": "IO_TYPE_FILE_CSV", "path": str(out)},
            "keys": ["id"], "cache_path": str(cache),
            "server_get_result": True, "client_get_result": True,
            "advanced_join_type": "ADVANCED_JOIN_TYPE_INNER_JOIN", "left_side": "ROLE_SERVER",
        },
        "link_config": {"parties": [{"id": "party0", "host": f"127.0.0.1:{p[0]}"},
                                    {"id": "party1", "host": f"127.0.0.1:{p[1]}"}]},
        "self_link_party": "party0",
    }


def test_a_python_unbalanced_server_runs_against_a_secretflow_client(tmp_path: Path) -> None:
    py = spu_python()
    server_in, client_in = tmp_path / "server.csv", tmp_path / "client.csv"
    server_in.write_text("id,x\n" + "".join(f"k{i},{i}\n" for i in range(500)))
    client_in.write_text("id,y\n" + "".join(f"k{i * 7 % 900},{i}\n" for i in range(60)))
    # SecretFlow in both seats: the reference (each seat its own cache folder).
    p = ports()
    ref = [tmp_path / "ref0.csv", tmp_path / "ref1.csv"]
    peers = [
        ub_sf(py, 0, p, "server", server_in, ref[0], tmp_path / "ref_cache0"),
        ub_sf(py, 1, p, "client", client_in, ref[1], tmp_path / "ref_cache1"),
    ]
    for q in peers:
        out, _ = q.communicate(timeout=TIMEOUT_S)
        assert q.returncode == 0, out.decode(errors="replace")[-3000:]
    # blindjoin from Python as the server in seat 0, a SecretFlow client in seat 1.
    p = ports()
    got = [tmp_path / "bj0.csv", tmp_path / "sf1.csv"]
    peer = ub_sf(py, 1, p, "client", client_in, got[1], tmp_path / "sf_cache1")
    report = blindjoin.run(ub_config(p, server_in, got[0], tmp_path / "bj_cache0"), peer_wire="secretflow")
    out, _ = peer.communicate(timeout=TIMEOUT_S)
    assert peer.returncode == 0, out.decode(errors="replace")[-3000:]
    assert got[0].read_bytes() == ref[0].read_bytes()
    assert got[1].read_bytes() == ref[1].read_bytes()
    assert report["role"] == "ROLE_SERVER" and report["mode"] == "MODE_FULL"
    # Shared keys k0, k7, …: the client's 60 rows hit 0..500 where i*7 % 900 < 500.
    want = sum(1 for i in range(60) if i * 7 % 900 < 500)
    assert report["intersection_count"] == want
