#!/usr/bin/env python3
"""Runs one fixed matrix of blindjoin runs with a given binary and keeps every output file, so
two builds (before and after a refactor) can be compared byte for byte.

    python3 scripts/same_outputs.py run  --bin OLD/blindjoin --out /tmp/before
    python3 scripts/same_outputs.py run  --bin target/debug/blindjoin --out /tmp/after
    python3 scripts/same_outputs.py diff /tmp/before /tmp/after

The matrix: two-party ECDH (Curve25519, FourQ, P-256), RR22 (fast, low-comm, malicious) and KKRT,
one bucket and many, in memory and spilled, aligned and in input order, every join type, the
cardinality-only count file; Parquet in and out (also spilled, in input order, a full join, and
Parquet in with CSV out, CSV in with Parquet out); partitioned runs (`--workers 2`); three-party
ECDH (CSV, and Parquet in); n-party (`PROTOCOL_NPC`, `ECDH_PSI_NPC`); unbalanced PSI (gen cache,
transfer, online; a full run with Parquet in and out; a full run with labels); labeled PSI (DB
setup, then online); DP-PSI with its noise made negligible (every item kept, epsilon 60, output
sorted), so its output is the intersection and comparable. Inputs are made by the binary's own
seeded `gen`, so they are the same for both builds. Reports are not compared (they hold times).
"""

import argparse
import filecmp
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_parties(cmds, cwd, timeout=300):
    procs = [
        subprocess.Popen(c, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for c in cmds
    ]
    for c, p in zip(cmds, procs):
        out, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            sys.exit(f"failed: {' '.join(map(str, c))}\n{err.decode()}")


def run_linked(binary, work, tag, ids, runtime_of):
    """One `blindjoin run --config` process per party in `ids`, all linked on free ports:
    `runtime_of(me)` gives each party's runtime config (e.g. `{"psi_config": ...}`), to which
    the shared `link_config` and the party's `self_link_party` are added; `TAG.ME.json`."""
    ports = [free_port() for _ in ids]
    cmds = []
    for me in ids:
        cfg = dict(runtime_of(me))
        cfg["link_config"] = {"parties": [{"id": i, "host": f"127.0.0.1:{p}"}
                                          for i, p in zip(ids, ports)]}
        cfg["self_link_party"] = me
        path = work / f"{tag}.{me}.json"
        path.write_text(json.dumps(cfg))
        cmds.append([binary, "run", "--quiet", "--config", str(path)])
    run_parties(cmds, work)


def two_party_flags(binary, work, name, common, receiver_extra=(), sender_extra=(), both_out=False,
                    inputs=("alice.csv", "bob.csv"), out_ext="csv"):
    pr, ps = free_port(), free_port()
    base = [binary, "run", "--quiet", "--keys", "id"] + list(common)
    r = base + ["--role", "receiver", "--self", f"127.0.0.1:{pr}", "--peer", f"127.0.0.1:{ps}",
                "--input", inputs[0], "--output", f"{name}.receiver.{out_ext}",
                "--report", f"{name}.receiver.report.json"] + list(receiver_extra)
    s = base + ["--role", "sender", "--self", f"127.0.0.1:{ps}", "--peer", f"127.0.0.1:{pr}",
                "--input", inputs[1], "--report", f"{name}.sender.report.json"] + list(sender_extra)
    if both_out:
        s += ["--output", f"{name}.sender.{out_ext}"]
    run_parties([r, s], work)


def config_pair(binary, work, name, psi_extra, proto, parquet=False):
    pr, ps = free_port(), free_port()
    cmds = []
    kind, ext, folder = ("IO_TYPE_FILE_PARQUET", "parquet", "pq/") if parquet else \
        ("IO_TYPE_FILE_CSV", "csv", "")
    for me, role in (("alice", "ROLE_RECEIVER"), ("bob", "ROLE_SENDER")):
        cfg = {
            "psi_config": {
                "protocol_config": dict(proto, role=role, broadcast_result=True),
                "input_config": {"type": kind, "path": f"{folder}{me}.{ext}"},
                "output_config": {"type": kind, "path": f"{name}.{me}.{ext}"},
                "keys": ["id"],
                **psi_extra,
            },
            "link_config": {"parties": [{"id": "alice", "host": f"127.0.0.1:{pr}"},
                                        {"id": "bob", "host": f"127.0.0.1:{ps}"}]},
            "self_link_party": me,
            "blindjoin": {"report_path": f"{name}.{me}.report.json"},
        }
        path = work / f"{name}.{me}.json"
        path.write_text(json.dumps(cfg, indent=1))
        cmds.append([binary, "run", "--quiet", "--config", str(path)])
    run_parties(cmds, work)


def matrix(binary, out):
    binary = str(Path(binary).resolve())
    if out.exists():
        shutil.rmtree(out)
    work = out / "work"
    work.mkdir(parents=True)
    subprocess.run([binary, "gen", "-n", "4000", "--overlap", "1500", "--seed", "11",
                    "--parties", "3", "--out-dir", str(work)], check=True,
                   stdout=subprocess.DEVNULL)
    # Duplicate keys on both sides (many-to-many joins).
    for who in ("alice", "bob"):
        lines = (work / f"{who}.csv").read_text().splitlines()
        (work / f"{who}.csv").write_text("\n".join(lines + lines[1:40:3]) + "\n")

    protos = {
        "ecdh25519": ["--protocol", "ecdh", "--curve", "25519"],
        "ecdhfourq": ["--protocol", "ecdh", "--curve", "fourq"],
        "ecdhp256": ["--protocol", "ecdh", "--curve", "p256"],
        "rr22fast": ["--protocol", "rr22", "--rr22-mode", "fast"],
        "rr22lowcomm": ["--protocol", "rr22", "--rr22-mode", "low-comm"],
        "rr22mal": ["--protocol", "rr22", "--rr22-mode", "malicious"],
        "kkrt": ["--protocol", "kkrt"],
    }
    for name, flags in protos.items():
        two_party_flags(binary, work, f"{name}.plain", flags)
        two_party_flags(binary, work, f"{name}.buckets", flags + ["--bucket-size", "700",
                                                                   "--broadcast-result"],
                        both_out=True)
    two_party_flags(binary, work, "rr22.spilled", protos["rr22fast"] +
                    ["--bucket-size", "1000", "--spill", "always", "--spill-dir", str(work)])
    two_party_flags(binary, work, "kkrt.noalign", protos["kkrt"] +
                    ["--no-align", "--broadcast-result"], both_out=True)
    two_party_flags(binary, work, "ecdh.cardinality", ["--cardinality-only", "--count-path",
                                                       "ecdh.cardinality.count"],
                    receiver_extra=[])
    subprocess.run([binary, "gen", "-n", "3000", "--overlap", "1000", "--seed", "12",
                    "--parties", "3", "--format", "parquet", "--out-dir", str(work / "pq")],
                   check=True, stdout=subprocess.DEVNULL)
    pq_inputs = ("pq/alice.parquet", "pq/bob.parquet")
    two_party_flags(binary, work, "rr22.parquet", protos["rr22fast"] + ["--broadcast-result"],
                    inputs=pq_inputs, out_ext="parquet", both_out=True)
    # Parquet in, CSV out (the cell text); Parquet spilled in many buckets; in input order.
    two_party_flags(binary, work, "kkrt.parquet-to-csv", protos["kkrt"] +
                    ["--bucket-size", "700", "--broadcast-result"], inputs=pq_inputs,
                    both_out=True)
    two_party_flags(binary, work, "rr22.parquet-spilled", protos["rr22fast"] +
                    ["--bucket-size", "800", "--spill", "always", "--spill-dir", str(work),
                     "--broadcast-result"], inputs=pq_inputs, out_ext="parquet", both_out=True)
    two_party_flags(binary, work, "ecdh.parquet-noalign", protos["ecdh25519"] +
                    ["--no-align", "--broadcast-result"], inputs=pq_inputs, out_ext="parquet",
                    both_out=True)
    two_party_flags(binary, work, "rr22.csv-to-parquet", protos["rr22fast"] +
                    ["--broadcast-result"], out_ext="parquet", both_out=True)
    config_pair(binary, work, "join.parquet.FULL_JOIN",
                {"advanced_join_type": "ADVANCED_JOIN_TYPE_FULL_JOIN"},
                {"protocol": "PROTOCOL_RR22", "rr22_config": {"bucket_size": 700}}, parquet=True)
    for join in ("LEFT_JOIN", "RIGHT_JOIN", "FULL_JOIN", "DIFFERENCE"):
        config_pair(binary, work, f"join.{join}",
                    {"advanced_join_type": f"ADVANCED_JOIN_TYPE_{join}",
                     "check_hash_digest": True},
                    {"protocol": "PROTOCOL_RR22", "rr22_config": {"bucket_size": 900}})

    # Three parties (CSV; Parquet in, CSV out).
    for tag, kind, folder, ext in (("3pc", "IO_TYPE_FILE_CSV", "", "csv"),
                                   ("3pc.parquet-in", "IO_TYPE_FILE_PARQUET", "pq/", "parquet")):
        run_linked(binary, work, tag, ["alice", "bob", "carol"], lambda me: {
            "psi_config": {
                "protocol_config": {"protocol": "PROTOCOL_ECDH_3PC", "receiver": "carol",
                                    "ecdh_config": {"curve": "CURVE_25519"},
                                    "broadcast_result": False},
                "input_config": {"type": kind, "path": f"{folder}{me}.{ext}"},
                "output_config": {"type": "IO_TYPE_FILE_CSV", "path": f"{tag}.{me}.csv"},
                "keys": ["id"],
            }})

    # Unbalanced: gen cache, transfer, online.
    pr = (free_port(), free_port())
    link = {"parties": [{"id": "server", "host": f"127.0.0.1:{pr[0]}"},
                        {"id": "client", "host": f"127.0.0.1:{pr[1]}"}]}
    server = {"input_config": {"type": "IO_TYPE_FILE_CSV", "path": "bob.csv"}, "keys": ["id"],
              "server_secret_key_path": "ub.key", "cache_path": "ub_server_cache",
              "output_config": {"type": "IO_TYPE_FILE_CSV", "path": "ub.server.csv"},
              "server_get_result": True, "client_get_result": True}
    client = {"input_config": {"type": "IO_TYPE_FILE_CSV", "path": "alice.csv"}, "keys": ["id"],
              "cache_path": "ub_client_cache",
              "output_config": {"type": "IO_TYPE_FILE_CSV", "path": "ub.client.csv"},
              "server_get_result": True, "client_get_result": True}

    def ub(me, mode, role, body):
        path = work / f"ub.{me}.{mode}.json"
        path.write_text(json.dumps({"ub_psi_config": dict(body, mode=mode, role=role),
                                    "link_config": link, "self_link_party": me}))
        return [binary, "run", "--quiet", "--config", str(path)]

    run_parties([ub("server", "MODE_OFFLINE_GEN_CACHE", "ROLE_SERVER", server)], work)
    for mode in ("MODE_OFFLINE_TRANSFER_CACHE", "MODE_ONLINE"):
        run_parties([ub("server", mode, "ROLE_SERVER", server),
                     ub("client", mode, "ROLE_CLIENT", client)], work)
    # Unbalanced with Parquet in and out, in one full run each side.
    pq = {"type": "IO_TYPE_FILE_PARQUET"}
    server_pq = dict(server, input_config=dict(pq, path="pq/bob.parquet"),
                     cache_path="ubpq_server_cache", server_secret_key_path="ubpq.key",
                     output_config=dict(pq, path="ub.parquet.server.parquet"))
    client_pq = dict(client, input_config=dict(pq, path="pq/alice.parquet"),
                     cache_path="ubpq_client_cache",
                     output_config=dict(pq, path="ub.parquet.client.parquet"))
    run_parties([ub("server", "MODE_FULL", "ROLE_SERVER", server_pq),
                 ub("client", "MODE_FULL", "ROLE_CLIENT", client_pq)], work)

    # Partitioned: two workers a side (RR22, and ECDH from flags).
    two_party_flags(binary, work, "rr22.workers2", protos["rr22fast"] +
                    ["--bucket-size", "700", "--workers", "2", "--broadcast-result"],
                    both_out=True)
    two_party_flags(binary, work, "ecdh.workers2", protos["ecdh25519"] +
                    ["--bucket-size", "700", "--workers", "2"])

    # n parties: the zero-sharing protocol and SecretFlow's tree of ECDH runs, three parties.
    for tag, proto in (("npc", "PROTOCOL_NPC"), ("npc.ecdh", "ECDH_PSI_NPC")):
        pc = {"protocol": proto, "receiver": "carol"}
        if proto == "ECDH_PSI_NPC":
            pc["ecdh_config"] = {"curve": "CURVE_25519"}
        run_linked(binary, work, tag, ["alice", "bob", "carol"], lambda me: {
            "psi_config": {
                "protocol_config": pc,
                "input_config": {"type": "IO_TYPE_FILE_CSV", "path": f"{me}.csv"},
                "output_config": {"type": "IO_TYPE_FILE_CSV", "path": f"{tag}.{me}.csv"},
                "keys": ["id"],
            }})

    # DP-PSI (SecretFlow's v1 DP_PSI_2PC): fresh coins every run, so its noise is made
    # negligible (Bob keeps every item, epsilon 60) and the output sorted (Bob's shuffle).
    run_linked(binary, work, "dp", ["alice", "bob"], lambda me: {
        "legacy_psi_config": {
            "psi_type": "DP_PSI_2PC", "receiver_rank": 1, "curve_type": "CURVE_25519",
            "dppsi_params": {"bob_sub_sampling": 1.0, "epsilon": 60},
            "input_params": {"path": f"{me}.csv", "select_fields": ["id"], "precheck": False},
            "output_params": {"path": f"dp.{me}.csv", "need_sort": True},
        }})

    # Unbalanced with labels: every non-key server column, opened by the client.
    server_lab = dict(server, cache_path="ublab_server_cache", server_secret_key_path="ublab.key",
                      output_config={"type": "IO_TYPE_FILE_CSV", "path": "ub.labels.server.csv"})
    client_lab = dict(client, cache_path="ublab_client_cache",
                      output_config={"type": "IO_TYPE_FILE_CSV", "path": "ub.labels.client.csv"})

    def ub_lab(me, role, body):
        path = work / f"ublab.{me}.json"
        cfg = {"ub_psi_config": dict(body, mode="MODE_FULL", role=role),
               "link_config": link, "self_link_party": me}
        if me == "server":
            cfg["blindjoin"] = {"label_columns": True}
        path.write_text(json.dumps(cfg))
        return [binary, "run", "--quiet", "--config", str(path)]

    run_parties([ub_lab("server", "ROLE_SERVER", server_lab),
                 ub_lab("client", "ROLE_CLIENT", client_lab)], work)

    # Labeled PSI: a key,value DB saved once, then one receiver's online run.
    keys = dict.fromkeys(r.split(",")[0] for r in (work / "bob.csv").read_text().splitlines()[1:])
    # SecretFlow's smallest preset (100 items, one query item at a time): quick in a dev build.
    (work / "apsi_db.csv").write_text(
        "key,value\n" + "".join(f"{k},v{i}\n" for i, k in enumerate(list(keys)[:100])))
    query = (work / "bob.csv").read_text().splitlines()[90:110]
    (work / "apsi_query.csv").write_text("key\n" + "".join(r.split(",")[0] + "\n" for r in query))
    params = Path(__file__).resolve().parent.parent / "crates/he/tests/data/100-1-300.json"
    (work / "apsi_setup.json").write_text(json.dumps({"apsi_sender_config": {
        "source_file": "apsi_db.csv", "params_file": str(params), "sdb_out_file": "apsi.sdb",
        "save_db_only": True}}))
    run_parties([[binary, "run", "--quiet", "--config", str(work / "apsi_setup.json")]], work)
    pa = (free_port(), free_port())
    alink = {"parties": [{"id": "sender", "host": f"127.0.0.1:{pa[0]}"},
                         {"id": "receiver", "host": f"127.0.0.1:{pa[1]}"}]}
    (work / "apsi_sender.json").write_text(json.dumps({
        "apsi_sender_config": {"db_file": "apsi.sdb"}, "link_config": alink,
        "self_link_party": "sender"}))
    (work / "apsi_receiver.json").write_text(json.dumps({
        "apsi_receiver_config": {"query_file": "apsi_query.csv",
                                 "output_file": "apsi.receiver.csv", "params_file": str(params),
                                 "query_batch_size": 1},
        "link_config": alink, "self_link_party": "receiver"}))
    run_parties([[binary, "run", "--quiet", "--config", str(work / "apsi_sender.json")],
                 [binary, "run", "--quiet", "--config", str(work / "apsi_receiver.json")]], work)

    # Keep the outputs (not the inputs, configs, reports, caches or keys).
    kept = 0
    for f in sorted(work.iterdir()):
        if f.is_file() and (f.suffix in (".csv", ".parquet", ".count")) and \
                f.name not in ("alice.csv", "bob.csv", "carol.csv", "apsi_db.csv",
                               "apsi_query.csv"):
            shutil.copy(f, out / f.name)
            kept += 1
    shutil.rmtree(work)
    print(f"{kept} output files in {out}")


def diff(a, b):
    names = sorted({f.name for f in a.iterdir()} | {f.name for f in b.iterdir()})
    bad = [n for n in names
           if not ((a / n).exists() and (b / n).exists()
                   and filecmp.cmp(a / n, b / n, shallow=False))]
    for n in bad:
        print(f"DIFFERENT: {n}")
    print(f"{len(names) - len(bad)} of {len(names)} output files byte-identical")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--bin", required=True)
    r.add_argument("--out", required=True, type=Path)
    d = sub.add_parser("diff")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "run":
        matrix(args.bin, args.out)
    else:
        sys.exit(diff(args.a, args.b))


if __name__ == "__main__":
    main()
