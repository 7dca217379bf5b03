#!/usr/bin/env python3
"""`blindjoin serve` for labeled PSI under load: one sender with a saved DB of --db-n keys and
--label-bytes-byte labels (preset --params), and --queries receiver runs, --concurrency at a
time, each an unchanged `blindjoin run` receiver asking about one key (--query-n keys, half
of them in the DB). Prints queries per second, p50/p99 latency of a receiver run, and the
sender's resident memory after the first queries and at the end (VmRSS) and its peak (VmHWM);
every label is checked.

usage: python3 scripts/serve_apsi_bench.py [--db-n 1048576] [--label-bytes 32]
           [--params 1M-1-32] [--query-n 1] [--queries 1000] [--concurrency 8]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_load import drive, free_port, pct  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = os.path.join(ROOT, "..", "shared", "research", "secretflow_reference", "apsi_parameters")






def label(i, n):
    return (f"L{i:09d}" * (n // 10 + 1))[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db-n", type=int, default=1 << 20)
    ap.add_argument("--label-bytes", type=int, default=32)
    ap.add_argument("--params", default="1M-1-32")
    ap.add_argument("--query-n", type=int, default=1)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--blindjoin", default=os.path.join(ROOT, "target/release/blindjoin"))
    a = ap.parse_args()
    bj = a.blindjoin
    params = a.params if os.path.exists(a.params) else os.path.join(PRESETS, a.params + ".json")
    d = tempfile.mkdtemp(prefix="serve-apsi-bench-")
    shutil.copy(params, os.path.join(d, "params.json"))
    with open(os.path.join(d, "db.csv"), "w") as f:
        f.write("key,value\n")
        f.writelines(f"k{i},{label(i, a.label_bytes)}\n" for i in range(a.db_n))
    with open(os.path.join(d, "setup.json"), "w") as f:
        json.dump({"apsi_sender_config": {"source_file": "db.csv", "params_file": "params.json",
                                          "sdb_out_file": "sdb", "save_db_only": True}}, f)
    t = time.perf_counter()
    p = subprocess.run([bj, "run", "--quiet", "--config", "setup.json"], cwd=d,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stderr[-3000:])
    print(f"setup {time.perf_counter() - t:.1f} s", flush=True)
    port = free_port()
    link = lambda me: {"parties": [{"id": "sender", "host": f"127.0.0.1:{port}"},
                                   {"id": me, "host": "127.0.0.1:0"}]}
    with open(os.path.join(d, "online.json"), "w") as f:
        json.dump({"apsi_sender_config": {"db_file": "sdb"}, "link_config": link("receiver"),
                   "self_link_party": "sender",
                   "blindjoin": {"max_query_items": 1 << 40}}, f)
    want = {}
    for n in range(a.queries):
        keys = [(n * 7919 + i) % a.db_n for i in range(max(1, a.query_n // 2))]
        qs = [f"k{k}" for k in keys] + [f"miss{n}-{i}" for i in range(a.query_n - len(keys))]
        with open(os.path.join(d, f"q{n}.csv"), "w") as f:
            f.write("key\n")
            f.writelines(f"{q}\n" for q in qs)
        want[n] = sorted(f"k{k},{label(k, a.label_bytes)}" for k in keys)
        me = f"r{n:05}"
        with open(os.path.join(d, f"r{n}.json"), "w") as f:
            json.dump({"apsi_receiver_config": {"query_file": f"q{n}.csv",
                                                "output_file": f"out{n}.csv",
                                                "params_file": "params.json"},
                       "link_config": link(me), "self_link_party": me}, f)

    def one(n):
        t0 = time.perf_counter()
        p = subprocess.run([bj, "run", "--quiet", "--config", f"r{n}.json"], cwd=d,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            sys.exit(f"receiver {n} failed:\n{p.stderr[-3000:]}")
        secs = time.perf_counter() - t0
        with open(os.path.join(d, f"out{n}.csv")) as f:
            got = sorted(line.strip() for line in f.readlines()[1:])
        if got != want[n]:
            sys.exit(f"query {n}: wrong answer {got[:2]} want {want[n][:2]}")
        return secs

    lat, wall, mem_early, mem_end, summary = drive(bj, d, "online.json", port, a.queries,
                                                   a.concurrency, one)
    print(f"{a.queries} queries of {a.query_n} keys, DB {a.db_n} x {a.label_bytes}-byte labels "
          f"({a.params}), {a.concurrency} at a time, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print(f"  {a.queries / wall:.2f} queries/s; receiver run p50 {pct(lat, 0.5) * 1000:.0f} ms, "
          f"p99 {pct(lat, 0.99) * 1000:.0f} ms")
    print(f"  sender RSS after {min(a.queries, 4 * a.concurrency)} queries "
          f"{mem_early['VmRSS']:.0f} MiB, at the end {mem_end['VmRSS']:.0f} MiB, "
          f"peak {mem_end['VmHWM']:.0f} MiB")
    print(f"  sender summary: {summary}")
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
