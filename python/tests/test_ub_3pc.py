"""`blindjoin.run` and `blindjoin.check_config` with the other config kinds the CLI runs:
unbalanced PSI (`ub_psi_config`) and three-party ECDH-PSI (`PROTOCOL_ECDH_3PC`).

Every party runs in its own `python -c` subprocess (see test_api.PARTY) on 127.0.0.1, every wait
is bounded, and every result is checked against a plaintext intersection computed here.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import blindjoin
from test_api import CONNECT_TIMEOUT_MS, PARTY, free_ports, read_csv, run_pair, write_csv


# --- unbalanced PSI --------------------------------------------------------------------------


def ub_tables(tmp_path: Path) -> List[str]:
    """server.csv (key `id`, a large side with a duplicate key) and client.csv (key `id`, a few
    keys, some the server lacks); returns the sorted plaintext intersection of the keys."""
    rng = random.Random(11)
    server = [f"k{i:05d}" for i in range(2000)] + ["k00007", "é,\"quoted\""]
    client = [f"k{i:05d}" for i in range(1900, 2100)] + ["k00007", "stray", "é,\"quoted\""]
    rng.shuffle(server)
    rng.shuffle(client)
    write_csv(tmp_path / "server.csv", ["id", "s_val"], [[k, f"s-{k}"] for k in server])
    write_csv(tmp_path / "client.csv", ["c_val", "id"], [[f"c-{k}", k] for k in client])
    return sorted(set(server) & set(client))


def ub_config(
    role: str,
    mode: str,
    ports: Optional[List[int]],
    server_gets: bool = False,
    client_gets: bool = True,
    **extra: Any,
) -> Dict[str, Any]:
    """A SecretFlow `ub_psi_config` launch config for `role` ("server" or "client") in `mode`."""
    me = role
    ub: Dict[str, Any] = {
        "mode": mode,
        "role": "ROLE_SERVER" if role == "server" else "ROLE_CLIENT",
        "input_config": {"type": "IO_TYPE_FILE_CSV", "path": f"{me}.csv"},
        "output_config": {"type": "IO_TYPE_FILE_CSV", "path": f"{me}_out.csv"},
        "keys": ["id"],
        "cache_path": f"{me}_cache",
        "server_get_result": server_gets,
        "client_get_result": client_gets,
    }
    if role == "server":
        ub["server_secret_key_path"] = "server.key"
    ub.update(extra)
    cfg: Dict[str, Any] = {"ub_psi_config": ub}
    if ports is not None:
        cfg["link_config"] = {
            "parties": [
                {"id": "server", "host": f"127.0.0.1:{ports[0]}"},
                {"id": "client", "host": f"127.0.0.1:{ports[1]}"},
            ],
            "recv_timeout_ms": 60_000,
        }
        cfg["self_link_party"] = me
        cfg["blindjoin"] = {"connect_timeout_ms": CONNECT_TIMEOUT_MS}
    return cfg


def ub_pair(tmp_path: Path, mode: str, **kw: Any) -> List[Dict[str, Any]]:
    """Runs the server and the client of `mode` in two processes; returns their outcomes."""
    ports = free_ports(2)
    reqs = [
        {"fn": "run", "args": [ub_config(role, mode, ports, **kw)], "record_progress": True}
        for role in ("server", "client")
    ]
    return run_pair(reqs, tmp_path)


def test_ub_full_mode_client_learns_the_exact_intersection(tmp_path: Path) -> None:
    expected = ub_tables(tmp_path)
    s, c = ub_pair(tmp_path, "MODE_FULL")
    assert "ok" in s and "ok" in c, (s, c)
    srep, crep = s["ok"], c["ok"]
    assert srep["role"] == "ROLE_SERVER" and crep["role"] == "ROLE_CLIENT"
    assert srep["mode"] == crep["mode"] == "MODE_FULL"
    assert srep["cache_count"] == 2001  # distinct server keys
    assert crep["intersection_key_count"] == len(expected)
    rows = read_csv(tmp_path / "client_out.csv")
    assert sorted(r["id"] for r in rows) == expected
    assert all(r["c_val"] == f"c-{r['id']}" for r in rows)
    # The server does not learn the result here.
    assert srep["intersection_count"] == -1
    assert not (tmp_path / "server_out.csv").exists()
    # Progress reached Python from both parties.
    assert s["stages"] and c["stages"]


def test_ub_gen_cache_transfer_online_both_learn(tmp_path: Path) -> None:
    expected = ub_tables(tmp_path)
    # Gen cache runs alone (no link_config): in this process.
    gen = ub_config("server", "MODE_OFFLINE_GEN_CACHE", None)
    assert blindjoin.config_kind(gen) == "unbalanced"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        rep = blindjoin.run(gen)
    finally:
        os.chdir(cwd)
    assert rep["mode"] == "MODE_OFFLINE_GEN_CACHE" and rep["cache_count"] == 2001
    assert (tmp_path / "server_cache").exists() and (tmp_path / "server.key").exists()

    s, c = ub_pair(tmp_path, "MODE_OFFLINE_TRANSFER_CACHE")
    assert "ok" in s and "ok" in c, (s, c)
    assert c["ok"]["transfer_cache"]["bytes_received"] > 0
    assert (tmp_path / "client_cache").exists()

    s, c = ub_pair(tmp_path, "MODE_ONLINE", server_gets=True, client_gets=True)
    assert "ok" in s and "ok" in c, (s, c)
    c_rows = read_csv(tmp_path / "client_out.csv")
    s_rows = read_csv(tmp_path / "server_out.csv")
    assert sorted(r["id"] for r in c_rows) == expected
    # The server's rows: its duplicate k00007 twice.
    assert sorted(r["id"] for r in s_rows) == sorted(expected + ["k00007"])
    assert all(r["s_val"] == f"s-{r['id']}" for r in s_rows)

    # A damaged client cache is a CacheError naming the file.
    data = bytearray((tmp_path / "client_cache").read_bytes())
    data[-1] ^= 1
    (tmp_path / "client_cache").write_bytes(bytes(data))
    ports = free_ports(2)
    cfg = ub_config("client", "MODE_ONLINE", ports, server_gets=True, client_gets=True)
    (out,) = run_pair([{"fn": "run", "args": [cfg]}], tmp_path)
    assert out.get("error") == "CacheError", out
    assert "client_cache" in out["message"]


def test_ub_ctrl_c_raises_keyboard_interrupt_promptly(tmp_path: Path) -> None:
    ub_tables(tmp_path)
    cfg = ub_config("client", "MODE_FULL", free_ports(2))
    # No server: the client would wait CONNECT_TIMEOUT_MS for it. Ctrl-C must end the call first.
    p = subprocess.Popen(
        [sys.executable, "-c", PARTY, json.dumps({"fn": "run", "args": [cfg]})],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(2.0)  # let it import and start waiting for the peer
        assert p.poll() is None
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        stdout, _ = p.communicate(timeout=15)
        assert time.monotonic() - t < 10
        assert json.loads(stdout.strip().splitlines()[-1])["error"] == "KeyboardInterrupt"
        assert not (tmp_path / "client_out.csv").exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def test_check_config_unbalanced(tmp_path: Path) -> None:
    cfg = ub_config("client", "MODE_ONLINE", [1, 2])
    assert blindjoin.check_config(cfg) == []
    assert blindjoin.config_kind(cfg) == "unbalanced"
    # debug_options are honoured (a trace is written, the level applies): no warning.
    cfg["ub_psi_config"]["debug_options"] = {"trace_path": "t.json", "logging_level": "warn"}
    assert blindjoin.check_config(cfg) == []
    cfg["ub_psi_config"]["debug_options"] = {"logging_level": "loud"}
    with pytest.raises(blindjoin.ConfigError, match="logging_level"):
        blindjoin.check_config(cfg)
    bad = ub_config("client", "MODE_ONLINE", [1, 2])
    bad["link_config"]["parties"].append({"id": "carol", "host": "127.0.0.1:3"})
    with pytest.raises(blindjoin.ConfigError, match="exactly 2"):
        blindjoin.check_config(bad)
    bad = ub_config("client", "MODE_NO_SUCH_MODE", [1, 2])
    with pytest.raises(blindjoin.ConfigError, match="mode"):
        blindjoin.run(bad)


# --- three parties ---------------------------------------------------------------------------

IDS = ["alice", "bob", "carol"]


def three_party_config(me: str, receiver: str, ports: List[int]) -> Dict[str, Any]:
    """A three-party (`PROTOCOL_ECDH_3PC`) launch config for `me`; `receiver` learns the result."""
    return {
        "psi_config": {
            "protocol_config": {
                "protocol": "PROTOCOL_ECDH_3PC",
                "receiver": receiver,
                "ecdh_config": {"curve": "CURVE_25519"},
                "broadcast_result": False,
            },
            "input_config": {"type": "IO_TYPE_FILE_CSV", "path": f"{me}.csv"},
            "output_config": {"type": "IO_TYPE_FILE_CSV", "path": f"{me}_out.csv"},
            "keys": ["id"],
        },
        "link_config": {
            "parties": [{"id": i, "host": f"127.0.0.1:{p}"} for i, p in zip(IDS, ports)],
            "recv_timeout_ms": 60_000,
        },
        "self_link_party": me,
        "blindjoin": {"connect_timeout_ms": CONNECT_TIMEOUT_MS},
    }


def test_three_parties_receiver_learns_the_exact_three_way_intersection(tmp_path: Path) -> None:
    rng = random.Random(3)
    sets = {
        "alice": {f"x{i:04d}" for i in range(0, 600)},
        "bob": {f"x{i:04d}" for i in range(300, 900)},
        "carol": {f"x{i:04d}" for i in range(450, 1000)},
    }
    # bob and carol share keys alice lacks; alice and bob share keys carol lacks.
    for who in ("bob", "carol"):
        sets[who] |= {f"pair{i}" for i in range(50)}
    for who in sets:
        keys = sorted(sets[who])
        rng.shuffle(keys)
        write_csv(tmp_path / f"{who}.csv", ["id", f"{who}_val"], [[k, f"{who}-{k}"] for k in keys])
    expected = sorted(sets["alice"] & sets["bob"] & sets["carol"])
    assert len(expected) == 150

    ports = free_ports(3)
    assert blindjoin.config_kind(three_party_config("alice", "alice", ports)) == "three-party"
    reqs = [{"fn": "run", "args": [three_party_config(me, "alice", ports)]} for me in IDS]
    outs = run_pair(reqs, tmp_path)
    assert all("ok" in o for o in outs), outs
    a, b, c = (o["ok"] for o in outs)
    assert a["intersection_count"] == len(expected)
    assert b["intersection_count"] == -1 and c["intersection_count"] == -1
    rows = read_csv(tmp_path / "alice_out.csv")
    assert sorted(r["id"] for r in rows) == expected
    assert all(r["alice_val"] == f"alice-{r['id']}" for r in rows)
    assert not (tmp_path / "bob_out.csv").exists() and not (tmp_path / "carol_out.csv").exists()


def test_check_config_three_party_and_two_party(tmp_path: Path) -> None:
    ports = [1, 2, 3]
    cfg = three_party_config("bob", "alice", ports)
    assert blindjoin.check_config(cfg) == []
    assert blindjoin.config_kind(cfg) == "three-party"
    del cfg["psi_config"]["protocol_config"]["receiver"]
    with pytest.raises(blindjoin.ConfigError, match="receiver"):
        blindjoin.check_config(cfg)
    cfg = three_party_config("bob", "alice", ports)
    cfg["link_config"]["parties"].pop()
    with pytest.raises(blindjoin.ConfigError, match="exactly 3"):
        blindjoin.check_config(cfg)
    # A two-party config is still a two-party config.
    two = three_party_config("bob", "alice", ports)
    two["psi_config"]["protocol_config"] = {
        "protocol": "PROTOCOL_ECDH",
        "role": "ROLE_SENDER",
        "broadcast_result": True,
        "ecdh_config": {"curve": "CURVE_25519"},
    }
    two["link_config"]["parties"].pop()
    assert blindjoin.config_kind(two) == "two-party"
    assert blindjoin.check_config(two) == []
