"""SecretFlow's balanced-PSI benchmark script, with `spu` replaced by `blindjoin`.

The original (SecretFlow docs, "平衡PSI Benchmark脚本") starts ray, builds `sf.SPU(cluster_def)`
and calls `spu.psi_csv(...)` with per-party dicts keyed by `sf.PYU` objects. Here there is no ray
and no secretflow: `blindjoin.SPU(cluster_def)` runs the parties itself.

One process, both parties (the default; generates two small CSVs when none are given):

    python seed_benchmark.py
    python seed_benchmark.py --alice /data/psi_1.csv --bob /data/psi_2.csv --out-dir /data

Two terminals or two machines (same script; each process runs the party it is told to, on the
addresses in cluster_def — edit them, or pass --alice-addr/--bob-addr):

    BLINDJOIN_SELF_PARTY=alice python seed_benchmark.py --alice psi_1.csv --bob psi_2.csv
    BLINDJOIN_SELF_PARTY=bob   python seed_benchmark.py --alice psi_1.csv --bob psi_2.csv
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import random
import sys
import tempfile
import time

import blindjoin

# init log
logging.basicConfig(stream=sys.stdout, level=logging.INFO)


def make_inputs(out_dir: str, n: int, overlap: int, seed: int = 1) -> "tuple[str, str]":
    """Two shuffled CSVs with an `id` column (n rows each, `overlap` ids in common)."""
    rng = random.Random(seed)
    shared = [f"id{i:08d}" for i in range(overlap)]
    paths = []
    for party, offset in (("alice", 10**7), ("bob", 2 * 10**7)):
        ids = shared + [f"id{offset + i:08d}" for i in range(n - overlap)]
        rng.shuffle(ids)
        path = os.path.join(out_dir, f"psi_{party}.csv")
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["id", "value"])
            w.writerows([k, rng.randrange(1000)] for k in ids)
        paths.append(path)
    return paths[0], paths[1]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--alice", help="alice's input CSV (default: generated)")
    p.add_argument("--bob", help="bob's input CSV (default: generated)")
    p.add_argument("--out-dir", help="where outputs (and generated inputs) go (default: a temp dir)")
    p.add_argument("-n", type=int, default=10_000, help="rows per generated input")
    p.add_argument("--overlap", type=int, default=5_000, help="ids in common in generated inputs")
    p.add_argument("--alice-addr", default="127.0.0.1:12945")
    p.add_argument("--bob-addr", default="127.0.0.1:12946")
    p.add_argument("--protocol", default="KKRT_PSI_2PC",
                   help="ECDH_PSI_2PC, KKRT_PSI_2PC, RR22_PSI_2PC or RR22_LOWCOMM_PSI_2PC")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="blindjoin-seed-")
    os.makedirs(out_dir, exist_ok=True)
    if not (args.alice and args.bob):
        args.alice, args.bob = make_inputs(out_dir, args.n, args.overlap)

    # SPU settings
    cluster_def = {
        'nodes': [
            # replace with alice's node address; listen_address is where alice binds
            {'party': 'alice', 'address': args.alice_addr, 'listen_address': args.alice_addr},
            # replace with bob's node address
            {'party': 'bob', 'address': args.bob_addr, 'listen_address': args.bob_addr},
        ],
    }

    alice = blindjoin.PYU('alice')
    bob = blindjoin.PYU('bob')

    input_path = {
        alice: args.alice,
        bob: args.bob,
    }
    output_path = {
        alice: os.path.join(out_dir, 'psi_output_alice.csv'),
        bob: os.path.join(out_dir, 'psi_output_bob.csv'),
    }
    select_keys = {
        alice: ['id'],
        bob: ['id'],
    }
    spu = blindjoin.SPU(cluster_def)

    # prepare data
    start = time.time()

    reports = spu.psi_csv(
        key=select_keys,
        input_path=input_path,
        output_path=output_path,
        receiver='alice',  # if `broadcast_result=False`, only receiver can get output file.
        protocol=args.protocol,  # psi protocol
        precheck_input=False,  # will cost ext time if set True
        sort=False,  # will cost ext time if set True
        broadcast_result=False,  # will cost ext time if set True
    )
    print(f"psi reports: {reports}")
    logging.info(f"cost time: {time.time() - start}")


if __name__ == '__main__':
    main()
