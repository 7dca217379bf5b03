"""The load driver shared by serve_bench.py and serve_apsi_bench.py: start `blindjoin serve`,
wait for its port, run the client runs so many at a time, stop it with SIGTERM, and measure."""

import concurrent.futures as cf
import json
import signal
import socket
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def mem(pid):
    """The process's VmRSS and VmHWM, in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) / 1024
    return out


def drive(bj, d, serve_config, port, queries, concurrency, one):
    """Serves `serve_config` and runs `one(n)` (a checked client run, returning its seconds)
    for n in range(queries), `concurrency` at a time. Returns the sorted latencies, the wall
    time, the server's memory after the first 4 x concurrency queries and at the end, and its
    summary."""
    server = subprocess.Popen([bj, "serve", "--quiet", "--config", serve_config,
                               "--max-sessions", str(concurrency)], cwd=d,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Up when its port accepts (a probe, not counted); a server that failed to start says why.
    for _ in range(600):
        if server.poll() is not None:
            sys.exit(f"serve failed to start:\n{server.stderr.read()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    lat, early = [], None
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        for i, secs in enumerate(ex.map(one, range(queries))):
            lat.append(secs)
            if i == min(queries, 4 * concurrency) - 1:
                early = mem(server.pid)
    wall = time.perf_counter() - t0
    end = mem(server.pid)
    server.send_signal(signal.SIGTERM)
    out, err = server.communicate(timeout=120)
    if server.returncode != 0:
        sys.exit(f"serve failed:\n{err[-3000:]}")
    lat.sort()
    return lat, wall, early, end, json.loads(out.strip().splitlines()[-1])


def pct(lat, q):
    """The q-quantile of sorted latencies."""
    return lat[min(len(lat) - 1, int(q * len(lat)))]
