"""SecretFlow's v1 names through the Python shim: every protocol name SecretFlow's ``psi_csv``
and the benchmark whitepaper's scripts use, ``SPU(cluster_def, link_desc)`` positionally and by
keyword, and the whitepaper's unbalanced offline / online scripts with only paths and addresses
changed. All parties run in this process (SecretFlow's one-process simulation) on 127.0.0.1;
every run's connect and receive waits are bounded, and every result is checked against a
plaintext intersection computed here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest

import blindjoin
from test_api import CONNECT_TIMEOUT_MS, free_ports, read_csv, write_csv

# As the whitepaper's scripts, with a bound on the connect wait (yacl's retry fields).
LINK_DESC = {
    "recv_timeout_ms": 3600000,
    "connect_retry_times": CONNECT_TIMEOUT_MS // 1000,
    "connect_retry_interval_ms": 1000,
}


def cluster_def(parties: List[str]) -> Dict[str, Any]:
    """The whitepaper's cluster_def on free 127.0.0.1 ports (runtime_config kept: it is ignored)."""
    ports = free_ports(len(parties))
    return {
        "nodes": [
            {"party": p, "address": f"127.0.0.1:{port}", "listen_address": f"127.0.0.1:{port}"}
            for p, port in zip(parties, ports)
        ],
        "runtime_config": {"protocol": "SEMI2K", "field": "FM128"},
    }


def tables(tmp_path: Path, sizes: Dict[str, range]) -> Dict[str, Set[str]]:
    """`<party>.csv` with key column `id` (and a payload) for each party's id range."""
    sets: Dict[str, Set[str]] = {}
    for party, ids in sizes.items():
        keys = [f"id{i:05d}" for i in ids]
        write_csv(tmp_path / f"{party}.csv", ["id", f"{party}_val"], [[k, f"{party}-{k}"] for k in keys])
        sets[party] = set(keys)
    return sets


def out_ids(path: Path) -> List[str]:
    return [r["id"] for r in read_csv(path)]


def test_spu_link_desc_positionally_and_by_keyword() -> None:
    cd = cluster_def(["alice", "bob"])
    for spu in (blindjoin.SPU(cd, LINK_DESC), blindjoin.SPU(cd, link_desc=LINK_DESC)):
        assert spu.recv_timeout_ms == 3600000
        assert spu.connect_timeout_ms == CONNECT_TIMEOUT_MS
        assert spu.parties == ["alice", "bob"]
    # Explicit keywords win; yacl's defaults fill the retry field not given (10 x 1000 ms).
    spu = blindjoin.SPU(cd, {"connect_retry_interval_ms": 200, "recv_timeout_ms": 5}, recv_timeout_ms=7)
    assert (spu.connect_timeout_ms, spu.recv_timeout_ms) == (2000, 7)
    with pytest.raises(blindjoin.ConfigError, match="link_desc.recv_timeout_ms"):
        blindjoin.SPU(cd, {"recv_timeout_ms": "soon"})
    with pytest.raises(blindjoin.ConfigError, match="link_desc"):
        blindjoin.SPU(cd, ["not", "a", "dict"])  # type: ignore[arg-type]


def test_link_desc_connect_deadline_reaches_the_run(tmp_path: Path) -> None:
    tables(tmp_path, {"alice": range(10)})
    # bob never starts: alice gives up after link_desc's 2 x 600 ms, not the 60 s default.
    spu = blindjoin.SPU(cluster_def(["alice", "bob"]), {"connect_retry_times": 2, "connect_retry_interval_ms": 600})
    with pytest.raises(blindjoin.LinkError, match="did not connect within 1"):
        spu.psi_csv(
            {"alice": ["id"]}, {"alice": str(tmp_path / "alice.csv")}, {"alice": str(tmp_path / "o.csv")},
            "alice", protocol="ECDH_PSI_2PC",
        )


@pytest.mark.parametrize("protocol", ["RR22_MALICIOUS_PSI_2PC", "RR22_FAST_PSI_2PC", "ECDH_PSI_2PC"])
def test_v1_two_party_names(tmp_path: Path, protocol: str) -> None:
    sets = tables(tmp_path, {"alice": range(0, 300), "bob": range(200, 600)})
    spu = blindjoin.SPU(cluster_def(["alice", "bob"]), LINK_DESC)
    reports = spu.psi_csv(
        key={"alice": ["id"], "bob": ["id"]},
        input_path={p: str(tmp_path / f"{p}.csv") for p in sets},
        output_path={p: str(tmp_path / f"{p}_out.csv") for p in sets},
        receiver="alice",
        protocol=protocol,
        precheck_input=False,
        sort=True,
        broadcast_result=False,
        curve_type="CURVE_FOURQ",
    )
    want = sorted(sets["alice"] & sets["bob"])
    assert [r["intersection_count"] for r in reports] == [len(want), -1]
    assert sorted(out_ids(tmp_path / "alice_out.csv")) == want
    assert not (tmp_path / "bob_out.csv").exists()


def test_ecdh_3pc_names_the_receiver_by_secretflow_argument(tmp_path: Path) -> None:
    sets = tables(tmp_path, {"alice": range(0, 300), "bob": range(100, 400), "carol": range(150, 250)})
    spu = blindjoin.SPU(cluster_def(["alice", "bob", "carol"]), LINK_DESC)
    reports = spu.psi_csv(
        key={p: ["id"] for p in sets},
        input_path={p: str(tmp_path / f"{p}.csv") for p in sets},
        output_path={p: str(tmp_path / f"{p}_out.csv") for p in sets},
        receiver="alice",  # no blindjoin-only field: SecretFlow's receiver names it
        protocol="ECDH_PSI_3PC",
        precheck_input=False,
        sort=False,
        broadcast_result=False,
        curve_type="CURVE_FOURQ",
    )
    want = sets["alice"] & sets["bob"] & sets["carol"]
    assert len(want) == 100
    assert sorted(out_ids(tmp_path / "alice_out.csv")) == sorted(want)
    assert reports[0]["intersection_count"] == len(want)
    assert not (tmp_path / "bob_out.csv").exists() and not (tmp_path / "carol_out.csv").exists()


@pytest.mark.parametrize("protocol", ["ECDH_PSI_NPC", "KKRT_PSI_NPC"])
def test_npc_names_reach_the_engine(tmp_path: Path, protocol: str) -> None:
    parties = ["alice", "bob", "carol", "dave"]
    sets = tables(
        tmp_path,
        {"alice": range(0, 300), "bob": range(100, 400), "carol": range(150, 260), "dave": range(140, 250)},
    )
    spu = blindjoin.SPU(cluster_def(parties), LINK_DESC)
    reports = spu.psi_csv(
        key={p: ["id"] for p in sets},
        input_path={p: str(tmp_path / f"{p}.csv") for p in sets},
        output_path={p: str(tmp_path / f"{p}_out.csv") for p in sets},
        receiver="carol",
        protocol=protocol,
        precheck_input=False,
        sort=False,
        broadcast_result=False,
        curve_type="CURVE_FOURQ",
    )
    want = sets["alice"] & sets["bob"] & sets["carol"] & sets["dave"]
    assert len(want) == 100
    assert sorted(out_ids(tmp_path / "carol_out.csv")) == sorted(want)
    assert [r["intersection_count"] for r in reports] == [-1, -1, len(want), -1]
    assert not any((tmp_path / f"{p}_out.csv").exists() for p in parties if p != "carol")


def test_dp_psi_takes_dppsi_arguments(tmp_path: Path) -> None:
    sets = tables(tmp_path, {"alice": range(0, 300), "bob": range(200, 600)})
    spu = blindjoin.SPU(cluster_def(["alice", "bob"]), LINK_DESC)
    common: Dict[str, Any] = dict(
        key={"alice": ["id"], "bob": ["id"]},
        input_path={p: str(tmp_path / f"{p}.csv") for p in sets},
        output_path={p: str(tmp_path / f"{p}_out.csv") for p in sets},
        receiver="bob",
        protocol="DP_PSI_2PC",
        precheck_input=False,
        sort=False,
        broadcast_result=False,
    )
    # Noise made negligible (every item kept, q = 1/(1+e^60)): the plaintext intersection.
    reports = spu.psi_csv(dppsi_bob_sub_sampling=1.0, dppsi_epsilon=60.0, **common)
    want = sets["alice"] & sets["bob"]
    assert sorted(out_ids(tmp_path / "bob_out.csv")) == sorted(want)
    assert reports[1]["intersection_count"] == len(want)
    assert reports[1]["protocol"] == "DP_PSI_2PC"
    assert not (tmp_path / "alice_out.csv").exists()
    # An invalid epsilon reaches the engine's check.
    with pytest.raises(blindjoin.ConfigError, match="epsilon"):
        spu.psi_csv(dppsi_epsilon=-1.0, **common)


def test_whitepaper_unbalanced_offline_then_online(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # alice: the small set (client, receiver); bob: the large set (server).
    sets = tables(tmp_path, {"alice": range(900, 1100), "bob": range(0, 1000)})
    cd = cluster_def(["alice", "bob"])
    spu = blindjoin.SPU(cd, LINK_DESC)
    select_keys = {"alice": ["id"], "bob": ["id"]}
    # Both parties share this folder and, as in the whitepaper, one preprocess_path: the client
    # keeps its cache there, the server its own beside it.
    preprocess_path = str(tmp_path / "offline_psi.csv")
    secret_key_path = str(tmp_path / "secret_key.bin")
    with open(secret_key_path, "wb") as f:  # as the script writes it: mode 0644
        f.write(bytes.fromhex("000102030405060708090a0b0c0d0e0ff0e0d0c0b0a090807060504030201000"))
    os.chmod(secret_key_path, 0o644)

    def offline() -> List[Dict[str, Any]]:
        return spu.psi_csv(
            key=select_keys,
            input_path={"alice": str(tmp_path / "dummyalice.csv"), "bob": str(tmp_path / "bob.csv")},
            output_path={"alice": str(tmp_path / "a_off.csv"), "bob": str(tmp_path / "b_off.csv")},
            receiver="alice",
            protocol="ECDH_OPRF_UB_PSI_2PC_OFFLINE",
            precheck_input=False,
            sort=False,
            broadcast_result=False,
            bucket_size=10000000,
            curve_type="CURVE_FOURQ",
            preprocess_path=preprocess_path,
            ecdh_secret_key_path=secret_key_path,
        )

    # A key file others can read is refused, naming the fix (docs/config.md, key files).
    with pytest.raises(blindjoin.CacheError, match="chmod 600"):
        offline()
    os.chmod(secret_key_path, 0o600)
    offline()
    assert (tmp_path / "offline_psi.csv").exists()
    assert (tmp_path / "offline_psi.csv.server").exists()
    assert any("offline_psi.csv.server" in r.getMessage() for r in caplog.records)
    assert not (tmp_path / "a_off.csv").exists()
    assert any("bucket_size" in r.getMessage() for r in caplog.records)

    reports = spu.psi_csv(
        key=select_keys,
        input_path={"alice": str(tmp_path / "alice.csv"), "bob": str(tmp_path / "dummy.bob.csv")},
        output_path={"alice": str(tmp_path / "online_out.csv"), "bob": str(tmp_path / "online_out_b.csv")},
        receiver="alice",
        protocol="ECDH_OPRF_UB_PSI_2PC_ONLINE",
        precheck_input=True,
        sort=True,
        broadcast_result=False,
        bucket_size=100000000,
        curve_type="CURVE_FOURQ",
        preprocess_path=preprocess_path,
        ecdh_secret_key_path=secret_key_path,
    )
    want = sorted(sets["alice"] & sets["bob"])
    assert len(want) == 100
    assert out_ids(tmp_path / "online_out.csv") == want  # sort=True
    assert reports[0]["intersection_count"] == len(want)
    assert not (tmp_path / "online_out_b.csv").exists()


def test_v1_refusals_name_the_protocol(tmp_path: Path) -> None:
    common: Dict[str, Any] = dict(
        self_party="alice", parties={"alice": "127.0.0.1:12001", "bob": "127.0.0.1:12002"},
    )
    with pytest.raises(blindjoin.ConfigError, match="withdrawn.*RR22_FAST_PSI_2PC"):
        blindjoin.psi_csv("id", tmp_path / "a.csv", tmp_path / "o.csv", "alice", protocol="BC22_PSI_2PC", **common)
    for name in ("ECDH_PSI_NPC", "KKRT_PSI_NPC"):
        with pytest.raises(blindjoin.ConfigError, match=f"{name} needs at least 3"):
            blindjoin.psi_csv("id", tmp_path / "a.csv", tmp_path / "o.csv", "alice", protocol=name, **common)
    # The unbalanced client needs its cache path; the error names psi_csv's argument.
    with pytest.raises(blindjoin.ConfigError, match="preprocess_path: missing"):
        blindjoin.psi_csv(
            "id", tmp_path / "a.csv", tmp_path / "o.csv", "alice", protocol="ECDH_OPRF_UB_PSI_2PC_ONLINE", **common
        )


def test_run_and_check_config_read_legacy_psi_config(tmp_path: Path) -> None:
    sets = tables(tmp_path, {"alice": range(0, 50), "bob": range(25, 80)})
    ports = free_ports(2)

    def cfg(me: str, **fields: Any) -> Dict[str, Any]:
        return {
            "legacy_psi_config": {
                "input_params": {"path": str(tmp_path / f"{me}.csv"), "select_fields": ["id"], "precheck": True},
                "output_params": {"path": str(tmp_path / f"{me}_v1.csv"), "need_sort": True},
                **fields,
            },
            "link_config": {
                "parties": [{"id": "alice", "host": f"127.0.0.1:{ports[0]}"}, {"id": "bob", "host": f"127.0.0.1:{ports[1]}"}],
                "recv_timeout_ms": 60_000,
            },
            "self_link_party": me,
            "blindjoin": {"connect_timeout_ms": CONNECT_TIMEOUT_MS},
        }

    assert blindjoin.config_kind(cfg("alice", psi_type="KKRT_PSI_2PC")) == "two-party"
    assert blindjoin.config_kind(cfg("alice", psi_type=10, preprocess_path="c")) == "unbalanced"
    warnings = blindjoin.check_config(cfg("alice", psi_type="RR22_FAST_PSI_2PC"))
    assert any("input_params.precheck" in w for w in warnings), warnings
    with pytest.raises(blindjoin.ConfigError, match="legacy_psi_config.bogus"):
        blindjoin.check_config(cfg("alice", psi_type="KKRT_PSI_2PC", bogus=1))

    # blindjoin.run: both parties from this process, each on its own thread.
    import threading

    reports: Dict[str, Any] = {}
    threads = [
        threading.Thread(target=lambda me=me: reports.__setitem__(me, blindjoin.run(cfg(me, psi_type="RR22_LOWCOMM_PSI_2PC"))))
        for me in ("alice", "bob")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    want = sorted(sets["alice"] & sets["bob"])
    assert reports["alice"]["intersection_count"] == len(want) == 25
    assert out_ids(tmp_path / "alice_v1.csv") == want
    assert reports["bob"]["intersection_count"] == -1
