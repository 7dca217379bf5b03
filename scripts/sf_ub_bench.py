#!/usr/bin/env python3
"""blindjoin's unbalanced PSI against an unmodified SecretFlow party, timed beside SecretFlow
against itself (issue #40's acceptance): a server of N rows, a client of M rows (half of them
the server's), SecretFlow's ECDH-OPRF unbalanced PSI with both parties learning the result.

Three pairs, each with its own cache directories:
  SF <-> SF        (crates/cli/tests/secretflow/ub_peer.py in both seats)
  BJ srv <-> SF    (blindjoin server on rank 0, SecretFlow client on rank 1)
  SF srv <-> BJ    (SecretFlow server on rank 0, blindjoin client on rank 1)
Each pair's server generates its cache (MODE_OFFLINE_GEN_CACHE; timed alone), the pair
transfers it (MODE_OFFLINE_TRANSFER_CACHE), then runs MODE_ONLINE `--rounds` times, the pairs
alternating. Time: wall time from starting both processes until both exited (Python's start-up
and `import spu` are inside every pair with a SecretFlow party). Bytes: both directions, counted
by a relay this script puts between the parties (each party dials the relay, which forwards to
the peer), so all three pairs are counted the same way.

    cargo build --release -p blindjoin-cli --locked
    python3 scripts/sf_ub_bench.py --server-n 1048576 --client-n 1024 --rounds 3
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "crates/cli/tests/secretflow/ub_peer.py")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Relay:
    """Accepts on `port` and forwards every connection to `target`, counting bytes."""

    def __init__(self, target):
        self.target = target
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.bytes = [0, 0]  # to target, from target
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        for _ in range(600):
            try:
                t = socket.create_connection(("127.0.0.1", self.target))
                break
            except OSError:
                time.sleep(0.1)
        else:
            c.close()
            return
        for s in (c, t):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def pump(a, b, i):
            try:
                while True:
                    data = a.recv(1 << 16)
                    if not data:
                        break
                    b.sendall(data)
                    with self.lock:
                        self.bytes[i] += len(data)
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        threading.Thread(target=pump, args=(c, t, 0), daemon=True).start()
        threading.Thread(target=pump, args=(t, c, 1), daemon=True).start()

    def total(self):
        with self.lock:
            return sum(self.bytes)


def gen(d, n, m, seed=40):
    rng = random.Random(seed)
    server = [f"{rng.getrandbits(64):016x}" for _ in range(n)]
    client = rng.sample(server, m // 2) + [f"{rng.getrandbits(64):016x}" for _ in range(m - m // 2)]
    rng.shuffle(client)
    paths = []
    for name, rows in (("server", server), ("client", client)):
        p = os.path.join(d, f"{name}.csv")
        with open(p, "w") as f:
            f.write("id\n" + "\n".join(rows) + "\n")
        paths.append(p)
    return paths


def bj_config(d, rank, ports, mode, io, key):
    role = "ROLE_SERVER" if rank == 0 else "ROLE_CLIENT"
    ub = {
        "mode": mode,
        "role": role,
        "input_config": {"type": "IO_TYPE_FILE_CSV", "path": io["input"]},
        "output_config": {"type": "IO_TYPE_FILE_CSV", "path": io["output"]},
        "keys": ["id"],
        "cache_path": io["cache"],
        "server_get_result": True,
        "client_get_result": True,
    }
    if rank == 0:
        ub["server_secret_key_path"] = key
    cfg = {
        "ub_psi_config": ub,
        "link_config": {
            "parties": [
                {"id": "party0", "host": f"127.0.0.1:{ports[0]}"},
                {"id": "party1", "host": f"127.0.0.1:{ports[1]}"},
            ]
        },
        "self_link_party": f"party{rank}",
        "blindjoin": {"peer_wire": "secretflow", "report_path": io["report"]},
    }
    p = os.path.join(d, f"bj{rank}-{mode}.json")
    with open(p, "w") as f:
        json.dump(cfg, f)
    return [args_bin(), "run", "--quiet", "--config", p]


BIN = [None]


def args_bin():
    return BIN[0]


def sf_cmd(py, rank, ports, mode, io, key, role=None):
    role = role or ("server" if rank == 0 else "client")
    c = [py, PEER, "--rank", str(rank), "--ports", f"{ports[0]},{ports[1]}", "--mode", mode,
         "--role", role, "--server-result", "1", "--client-result", "1",
         "--input", io["input"], "--output", io["output"], "--cache", io["cache"]]
    if role == "server":
        c += ["--key-file", key]
    return c


def run_cmds(cmds):
    t = time.time()
    ps = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in cmds]
    outs = [p.communicate(timeout=1800) for p in ps]
    dt = time.time() - t
    for p, (o, e) in zip(ps, outs):
        if p.returncode != 0:
            sys.exit(f"failed: {p.args}\n{o.decode()[-2000:]}\n{e.decode()[-3000:]}")
    return dt


def pair(args, d, kind, mode, ios, key):
    """Runs `mode` for `kind` through relays; returns (seconds, bytes both ways)."""
    listen = [free_port(), free_port()]
    relays = [Relay(listen[0]), Relay(listen[1])]
    # Each party listens on its own port and dials the relay in front of the peer.
    views = [[listen[0], relays[1].port], [relays[0].port, listen[1]]]
    cmds = []
    for rank in (0, 1):
        bj = (kind == "bj-server" and rank == 0) or (kind == "bj-client" and rank == 1)
        if bj:
            cmds.append(bj_config(d, rank, views[rank], mode, ios[rank], key))
        else:
            cmds.append(sf_cmd(args.python, rank, views[rank], mode, ios[rank], key))
    dt = run_cmds(cmds)
    time.sleep(0.2)
    return dt, relays[0].total() + relays[1].total()


def gen_cache(args, d, kind, ios, key):
    if kind == "bj-server":
        cfg = bj_config(d, 0, [free_port(), free_port()], "MODE_OFFLINE_GEN_CACHE", ios[0], key)
        return run_cmds([cfg])
    ports = [free_port(), free_port()]
    dummy = dict(ios[0], cache=os.path.join(d, "dummy_cache"), output=os.path.join(d, "dummy.csv"))
    return run_cmds([
        sf_cmd(args.python, 0, ports, "MODE_OFFLINE_GEN_CACHE", ios[0], key, "server"),
        sf_cmd(args.python, 1, ports, "MODE_OFFLINE_GEN_CACHE", dummy, key, "server"),
    ])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-n", type=int, default=1 << 20)
    ap.add_argument("--client-n", type=int, default=1 << 10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default=os.path.join(ROOT, "target/spuenv/bin/python"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/blindjoin"))
    args = ap.parse_args()
    BIN[0] = args.bin
    root = tempfile.mkdtemp(prefix="bj-sfub-bench-")
    ins = gen(root, args.server_n, args.client_n)
    key = os.path.join(root, "server.key")
    with open(key, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(key, 0o600)
    kinds = ["sf-sf", "bj-server", "bj-client"]
    dirs, ios = {}, {}
    results = {k: {"online": []} for k in kinds}
    for k in kinds:
        d = os.path.join(root, k)
        os.makedirs(d)
        dirs[k] = d
        ios[k] = [
            {"input": ins[r], "output": os.path.join(d, f"out{r}.csv"),
             "cache": os.path.join(d, f"cache{r}"), "report": os.path.join(d, f"report{r}.json")}
            for r in (0, 1)
        ]
        results[k]["gen_cache_s"] = gen_cache(args, d, k, ios[k], key)
        results[k]["transfer"] = pair(args, d, k, "MODE_OFFLINE_TRANSFER_CACHE", ios[k], key)
    for _ in range(args.rounds):
        for k in kinds:
            results[k]["online"].append(pair(args, dirs[k], k, "MODE_ONLINE", ios[k], key))
    outs = {k: [open(io["output"]).read() for io in ios[k]] for k in kinds}
    same = all(outs[k] == outs["sf-sf"] for k in kinds)
    print(f"server {args.server_n} rows, client {args.client_n} rows, half of them shared; "
          f"outputs identical to SF<->SF: {same}")
    base = results["sf-sf"]
    b_on = min(t for t, _ in base["online"])
    for k in kinds:
        r = results[k]
        on = min(t for t, _ in r["online"])
        on_b = r["online"][0][1]
        tr_t, tr_b = r["transfer"]
        print(f"{k:10} gen_cache {r['gen_cache_s']:6.1f} s | transfer {tr_t:5.1f} s "
              f"{tr_b / 1e6:7.2f} MB ({tr_b / base['transfer'][1]:.3f}x) | online best of "
              f"{args.rounds} {on:5.2f} s ({on / b_on:.2f}x) {on_b / 1e3:8.1f} kB "
              f"({on_b / base['online'][0][1]:.3f}x) | all online: "
              + ", ".join(f"{t:.2f}" for t, _ in r["online"]))
    if not same:
        sys.exit("the outputs differ")


if __name__ == "__main__":
    main()
