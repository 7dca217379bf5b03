"""`blindjoin.run` with SecretFlow's labeled-PSI configs (`apsi_sender_config` /
`apsi_receiver_config`): sender setup with `save_db_only`, sender online from the saved DB and
the receiver in two processes on 127.0.0.1, checked against a plaintext lookup; errors raise as
for other runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest

import blindjoin
from test_api import PARTY, free_ports, read_csv, run_pair, write_csv  # noqa: F401

PRESET = Path(__file__).resolve().parents[2] / "crates" / "he" / "tests" / "data" / "100-1-300.json"


def link(ports: List[int], me: str) -> Dict[str, Any]:
    return {
        "link_config": {
            "parties": [
                {"id": "sender", "host": f"127.0.0.1:{ports[0]}"},
                {"id": "receiver", "host": f"127.0.0.1:{ports[1]}"},
            ]
        },
        "self_link_party": me,
    }


def test_setup_online_and_receiver_against_a_plaintext_lookup(tmp_path: Path) -> None:
    db = {f"id{i}": f"label-{i}" for i in range(300)}
    db['a,"b"'] = 'x,"y"'
    write_csv(tmp_path / "db.csv", ["key", "value"], list(db.items()))
    query = ["id1", "nope", 'a,"b"', "id299", "id1"]
    write_csv(tmp_path / "query.csv", ["key"], [[k] for k in query])
    shutil.copy(PRESET, tmp_path / "params.json")
    setup = {
        "apsi_sender_config": {
            "source_file": str(tmp_path / "db.csv"),
            "params_file": str(tmp_path / "params.json"),
            "sdb_out_file": str(tmp_path / "sdb"),
            "save_db_only": True,
        }
    }
    out = blindjoin.run(setup)
    assert out["role"] == "sender" and out["db_items"] == 301
    assert (tmp_path / "sdb").stat().st_mode & 0o777 == 0o600

    ports = free_ports(2)
    sender = {"apsi_sender_config": {"db_file": "sdb"}, **link(ports, "sender")}
    receiver = {
        "apsi_receiver_config": {
            "query_file": "query.csv",
            "output_file": "result.csv",
            "params_file": "params.json",
            "query_batch_size": 1,
        },
        **link(ports, "receiver"),
    }
    outs = run_pair(
        [{"fn": "run", "args": [sender]}, {"fn": "run", "args": [receiver]}], tmp_path
    )
    assert all("ok" in o for o in outs), outs
    rows = read_csv(tmp_path / "result.csv")
    assert [(r["key"], r["value"]) for r in rows] == [(k, db[k]) for k in query if k in db]


def test_errors_raise_as_for_other_runs(tmp_path: Path) -> None:
    with pytest.raises(blindjoin.ConfigError, match="params_file"):
        blindjoin.run({"apsi_sender_config": {"source_file": "db.csv", "save_db_only": True}})
    (tmp_path / "sdb").write_text("not a DB\n")
    ports = free_ports(2)
    cfg = {"apsi_sender_config": {"db_file": str(tmp_path / "sdb")}, **link(ports, "sender")}
    with pytest.raises(blindjoin.InputError, match="sender DB"):
        blindjoin.run(cfg)
