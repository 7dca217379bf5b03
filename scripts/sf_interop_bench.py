#!/usr/bin/env python3
"""blindjoin against an unmodified SecretFlow party, timed beside SecretFlow against itself
(issue #40's acceptance): PROTOCOL_ECDH, N rows a side, half shared, for each curve.

Each round runs, back to back and alternating, the three pairs
  SF <-> SF          (crates/cli/tests/secretflow/psi_peer.py in both seats)
  BJ recv <-> SF     (blindjoin receiver on rank 0, SecretFlow sender on rank 1)
  SF recv <-> BJ     (SecretFlow receiver on rank 0, blindjoin sender on rank 1)
with broadcast_result and an inner join, and prints each pair's wall time (both processes
started together until both exited: Python's start-up and `import spu` are inside every pair
that has a SecretFlow party) and its ratio to the SF <-> SF pair of the same round. Bytes: the
blindjoin party's report counts both connections of its pair (TCP payload, baidu_std framing);
SecretFlow <-> SecretFlow's come from the peers' benchmark script (`../shared/peers/
spu_psi_bench.py`, the kernel's socket counters) at the same size, run once per curve.

    cargo build --release -p blindjoin-cli --locked
    python3 scripts/sf_interop_bench.py --n 1048576 --rounds 2
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "crates/cli/tests/secretflow/psi_peer.py")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def gen(d, n, seed=40):
    rng = random.Random(seed)
    ids = [f"{rng.getrandbits(64):016x}" for _ in range(n + n // 2)]
    a, b = ids[:n], ids[n // 2:]
    rng.shuffle(a)
    rng.shuffle(b)
    paths = []
    for i, rows in enumerate((a, b)):
        p = os.path.join(d, f"in{i}.csv")
        with open(p, "w") as f:
            f.write("id\n" + "\n".join(rows) + "\n")
        paths.append(p)
    return paths


def bj_config(d, rank, ports, inp, out, curve, batch, channel):
    role = "ROLE_RECEIVER" if rank == 0 else "ROLE_SENDER"
    cfg = {
        "psi_config": {
            "protocol_config": {
                "protocol": "PROTOCOL_ECDH", "role": role, "broadcast_result": True,
                "ecdh_config": {"curve": curve, "batch_size": batch},
                "kkrt_config": {"bucket_size": 1 << 20}, "rr22_config": {"bucket_size": 1 << 20},
            },
            "input_config": {"type": "IO_TYPE_FILE_CSV", "path": inp},
            "output_config": {"type": "IO_TYPE_FILE_CSV", "path": out},
            "keys": ["id"], "advanced_join_type": "ADVANCED_JOIN_TYPE_INNER_JOIN",
            "left_side": "ROLE_RECEIVER", "check_hash_digest": True,
            "output_attr": {"csv_null_rep": "NULL"},
        },
        "link_config": {"parties": [{"id": "party0", "host": f"127.0.0.1:{ports[0]}"},
                                    {"id": "party1", "host": f"127.0.0.1:{ports[1]}"}],
                        "recv_timeout_ms": 3600000,
                        **({"brpc_channel_protocol": channel} if channel else {})},
        "self_link_party": f"party{rank}",
        "blindjoin": {"peer_wire": "secretflow", "report_path": out + ".report.json"},
    }
    p = os.path.join(d, f"bj{rank}.json")
    with open(p, "w") as f:
        json.dump(cfg, f)
    return p


def sf_cmd(py, rank, ports, inp, out, curve, batch, channel):
    return [py, PEER, "--rank", str(rank), "--ports", f"{ports[0]},{ports[1]}", "--input", inp,
            "--output", out, "--curve", curve, "--batch", str(batch),
            "--recv-timeout-ms", "3600000", "--channel", channel]


def sf_bytes(args, curve):
    """SecretFlow <-> SecretFlow's bytes at this size: the peers' benchmark script reads them
    from the kernel's socket counters (`ss -ti`) before the links close."""
    proto = {"CURVE_25519": "ecdh-25519", "CURVE_FOURQ": "ecdh-fourq"}[curve]
    script = os.path.join(ROOT, "..", "shared", "peers", "spu_psi_bench.py")
    p = subprocess.run([args.python, script, "--protocol", proto, "--n", str(args.n), "--json"],
                       capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"spu_psi_bench.py failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["comm_bytes"]


def run_pair(args, d, kind, curve, ins):
    outs = [os.path.join(d, f"{kind}-out{r}.csv") for r in range(2)]
    for o in outs:
        if os.path.exists(o):
            os.remove(o)
    ports = [free_port(), free_port()]
    procs = []
    t0 = time.perf_counter()
    for rank in range(2):
        bj = (kind == "bj-recv" and rank == 0) or (kind == "bj-send" and rank == 1)
        if bj:
            cfg = bj_config(d, rank, ports, ins[rank], outs[rank], curve, args.batch,
                            args.channel)
            cmd = [args.blindjoin, "run", "--quiet", "--config", cfg]
        else:
            cmd = sf_cmd(args.python, rank, ports, ins[rank], outs[rank], curve, args.batch,
                         args.channel)
        procs.append((bj, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
    report = None
    for bj, p in procs:
        out, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            sys.exit(f"{kind} {curve}: a party failed ({p.returncode}):\n{out[-2000:]}\n{err[-2000:]}")
        if bj:
            with open(outs[0 if kind == "bj-recv" else 1] + ".report.json") as f:
                report = json.load(f)
    secs = time.perf_counter() - t0
    with open(outs[0], "rb") as f:
        lines = f.read().count(b"\n") - 1
    if lines != args.n // 2:
        sys.exit(f"{kind} {curve}: {lines} rows in the intersection, want {args.n // 2}")
    b = report["bytes_sent"] + report["bytes_received"] if report else 0
    return secs, b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--curves", default="CURVE_25519,CURVE_FOURQ")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--blindjoin", default=os.path.join(ROOT, "target/release/blindjoin"))
    ap.add_argument("--python", default=os.path.join(ROOT, "target/spuenv/bin/python"))
    # link_config.brpc_channel_protocol for every party ("": baidu_std). SecretFlow <->
    # SecretFlow's bytes always come from the peers' script, which runs baidu_std.
    ap.add_argument("--channel", default="")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="sf-bench-")
    ins = gen(d, args.n)
    print(f"n = {args.n} a side, half shared; {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}")
    for curve in args.curves.split(","):
        sf_b = sf_bytes(args, curve)
        rows = {"sf-sf": [], "bj-recv": [], "bj-send": []}
        byts = {"sf-sf": sf_b}
        for r in range(args.rounds):
            order = ["sf-sf", "bj-recv", "bj-send"] if r % 2 == 0 else ["bj-send", "bj-recv", "sf-sf"]
            for kind in order:
                s, b = run_pair(args, d, kind, curve, ins)
                rows[kind].append(s)
                if kind != "sf-sf":
                    byts[kind] = b
        for kind in ("sf-sf", "bj-recv", "bj-send"):
            ratios = [s / t for s, t in zip(rows[kind], rows["sf-sf"])]
            print(f"{curve:24} {kind:8} s: {' '.join(f'{x:6.2f}' for x in rows[kind])}  "
                  f"vs SF<->SF {min(ratios):.2f}-{max(ratios):.2f}x  "
                  f"bytes {byts[kind] / 2**20:8.1f} MiB ({byts[kind] / sf_b:.3f}x)")


if __name__ == "__main__":
    main()
