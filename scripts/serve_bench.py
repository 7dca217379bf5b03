#!/usr/bin/env python3
"""`blindjoin serve` under load: one unbalanced-PSI server (a cache of --server-n keys), and
--queries client runs, --concurrency at a time, each an unchanged `blindjoin run` MODE_ONLINE
client asking about --client-n keys (half of them the server's). Prints queries per second,
p50/p99 latency of a client run (process start to exit), and the server's resident memory
after the first queries and at the end (VmRSS) and its peak (VmHWM); every answer is checked.

usage: python3 scripts/serve_bench.py [--server-n 1048576] [--client-n 16] [--queries 1000]
                                      [--concurrency 8] [--blindjoin target/release/blindjoin]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_load import drive, free_port, pct  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))




def config(d, name, me, client, mode, server_port, body, client_port=None):
    role = "ROLE_SERVER" if me == "server" else "ROLE_CLIENT"
    cfg = {
        "ub_psi_config": {"mode": mode, "role": role, "server_get_result": False,
                          "client_get_result": True, **body},
        "link_config": {"parties": [{"id": "server", "host": f"127.0.0.1:{server_port}"},
                                    {"id": client,
                                     "host": f"127.0.0.1:{client_port if client_port is not None else free_port()}"}],
                        "connect_retry_times": 60, "connect_retry_interval_ms": 1000},
        "self_link_party": me,
    }
    if me == "server":
        cfg["blindjoin"] = {"max_query_items": 1 << 40}
    p = os.path.join(d, name)
    with open(p, "w") as f:
        json.dump(cfg, f)
    return p


def server_body():
    return {"input_config": {"type": "IO_TYPE_FILE_CSV", "path": "server.csv"}, "keys": ["id"],
            "server_secret_key_path": "server.key", "cache_path": "server_cache"}


def client_body(n):
    return {"input_config": {"type": "IO_TYPE_FILE_CSV", "path": f"q{n}.csv"}, "keys": ["id"],
            "cache_path": "client_cache",
            "output_config": {"type": "IO_TYPE_FILE_CSV", "path": f"out{n}.csv"}}


def run(bj, d, cfg):
    p = subprocess.run([bj, "run", "--quiet", "--config", cfg], cwd=d, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"{cfg} failed:\n{p.stderr[-3000:]}")




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-n", type=int, default=1 << 20)
    ap.add_argument("--client-n", type=int, default=16)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--blindjoin", default=os.path.join(ROOT, "target/release/blindjoin"))
    a = ap.parse_args()
    bj = a.blindjoin
    d = tempfile.mkdtemp(prefix="serve-bench-")
    with open(os.path.join(d, "server.csv"), "w") as f:
        f.write("id\n")
        f.writelines(f"{i}\n" for i in range(a.server_n))
    port = free_port()
    t = time.perf_counter()
    run(bj, d, config(d, "gen.json", "server", "client", "MODE_OFFLINE_GEN_CACHE", port,
                      server_body()))
    cport = free_port()
    ts = config(d, "ts.json", "server", "client", "MODE_OFFLINE_TRANSFER_CACHE", port,
                server_body(), cport)
    tc = config(d, "tc.json", "client", "client", "MODE_OFFLINE_TRANSFER_CACHE", port,
                client_body(0), cport)
    s = subprocess.Popen([bj, "run", "--quiet", "--config", ts], cwd=d)
    run(bj, d, tc)
    s.wait(timeout=600)
    print(f"offline (gen cache + transfer) {time.perf_counter() - t:.1f} s", flush=True)
    # Query n: client_n keys, half in the server's set.
    want = {}
    for n in range(a.queries):
        base = (n * 7919) % max(1, a.server_n - a.client_n)
        keys = [base + i for i in range(a.client_n // 2)]
        keys += [a.server_n + n * a.client_n + i for i in range(a.client_n - len(keys))]
        with open(os.path.join(d, f"q{n}.csv"), "w") as f:
            f.write("id\n")
            f.writelines(f"{k}\n" for k in keys)
        want[n] = sorted(str(k) for k in keys if k < a.server_n)
        # Port 0: a client of a serving server is never connected to, so it listens anywhere
        # (its id sorts before "server", so it listens while it dials the server).
        config(d, f"c{n}.json", f"client{n:05}", f"client{n:05}", "MODE_ONLINE", port,
               client_body(n), 0)
    serve_cfg = config(d, "serve.json", "server", "client", "MODE_ONLINE", port, server_body())

    def one(n):
        t0 = time.perf_counter()
        run(bj, d, os.path.join(d, f"c{n}.json"))
        secs = time.perf_counter() - t0
        with open(os.path.join(d, f"out{n}.csv")) as f:
            got = sorted(line.strip().strip('"') for line in f.readlines()[1:])
        if got != want[n]:
            sys.exit(f"query {n}: wrong answer ({len(got)} keys, want {len(want[n])})")
        return secs

    lat, wall, mem_early, mem_end, summary = drive(bj, d, serve_cfg, port, a.queries,
                                                   a.concurrency, one)
    print(f"{a.queries} queries of {a.client_n} keys against {a.server_n} keys, "
          f"{a.concurrency} at a time, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"  {a.queries / wall:.1f} queries/s; client run latency p50 {pct(lat, 0.5) * 1000:.0f} ms, "
          f"p99 {pct(lat, 0.99) * 1000:.0f} ms, mean {statistics.mean(lat) * 1000:.0f} ms")
    print(f"  server RSS after {4 * a.concurrency} queries {mem_early['VmRSS']:.1f} MiB, "
          f"at the end {mem_end['VmRSS']:.1f} MiB, peak {mem_end['VmHWM']:.1f} MiB")
    print(f"  server summary: {summary}")
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
