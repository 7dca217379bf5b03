#!/usr/bin/env python3
"""Predicts a partitioned RR22 run's wall time from constants measured on this machine.

The model (docs/performance.md, "Cost model"): each party's run is bounded by the largest of
its CPU work spread over its cores, the bytes that cross the link between the organisations,
and the work that stays on one machine (the aligned output's merge), plus the per-bucket round
trips that the partitions overlap:

    T ≈ max(n·(c − m) / (N·k·η),  n·w / B,  n·d / (N·D))  +  n·m / M  +  (n / 2^20)·2·r·L / (N·W)

n rows a party; c CPU-seconds a row (the slower party: the receiver), of which m is the
single-threaded merge into one aligned file, done on M = 1 machine (M = N when the output is a
directory of part files, one per partition); N machines of k cores a
party with parallel efficiency η; w bytes a row in the heavier direction and B the link's bytes
per second each way; d disk bytes a row (read, spill write and read, output) at D bytes per
second per machine; m seconds a row of single-threaded merge into one aligned file, on M = 1
machine (M = N when the output is a directory of part files, one per partition); r round trips
a bucket of 2^20 rows at one-way latency L, with W workers a machine.

Usage: python3 scripts/cost_model.py            # the table in docs/performance.md
       python3 scripts/cost_model.py --check    # the prediction for this machine's runs
"""

from __future__ import annotations

import argparse
import math

# Measured here (docs/performance.md, "Cost model"): release build, RR22 fast, `blindjoin gen`
# tables (26-byte rows), CSV in and aligned CSV out, --broadcast-result.
CPU_S_PER_ROW = 0.71e-6  # receiver, user + sys, 100M rows (0.54 at 2^24): read, spill, protocol, join, write
SENDER_CPU_S_PER_ROW = 0.63e-6  # sender, the same (0.45 at 2^24)
MERGE_S_PER_ROW = 0.10e-6  # the aligned output's single-threaded merge and write (100M: 10.6 s)
DISK_BYTES_PER_ROW = 26 * 4  # input read, spill written and read back, output written (26 B rows)
ROUND_TRIPS_PER_BUCKET = 6  # RR22 fast: OT/VOLE set-up, OKVS, tags, result


def bits_per_row(n: float) -> float:
    """Bits on the wire a row, both directions: 237.2 at one bucket, +4.8 a doubling of buckets
    (the tags' ⌈log2 B⌉ extra bits and the padding): 247.1 at 16 buckets, 261.6 at 128."""
    buckets = max(1.0, n / 2**20)
    return 237.2 + 4.8 * math.log2(buckets) if buckets > 1 else 237.2


def heavier_share() -> float:
    """The receiver → sender direction carries 62 % of the bytes (20.27 of 32.70 B a row at 100M)."""
    return 20.27 / 32.70


def predict(n: float, machines: int, cores: int, link_bits: float, latency_s: float,
            eta: float = 0.7, disk_bps: float = 1e9, part_files: bool = False,
            workers: int | None = None) -> dict:
    w = bits_per_row(n) / 8 * heavier_share()
    workers = workers or cores
    cpu = n * (CPU_S_PER_ROW - MERGE_S_PER_ROW) / (machines * cores * eta)
    wire = n * w / (link_bits / 8)
    disk = n * DISK_BYTES_PER_ROW / (machines * disk_bps)
    merge = n * MERGE_S_PER_ROW / (machines if part_files else 1)
    rtt = (n / 2**20) * ROUND_TRIPS_PER_BUCKET * 2 * latency_s / (machines * workers)
    bound = max(("cpu", cpu), ("wire", wire), ("disk", disk), key=lambda x: x[1])
    return {"cpu": cpu, "wire": wire, "disk": disk, "merge": merge, "rtt": rtt,
            "total": bound[1] + merge + rtt, "bound": bound[0]}


def fmt(s: float) -> str:
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 120 else f"{s:.0f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="predict this machine's measured runs")
    a = ap.parse_args()
    if a.check:
        # This machine: both parties share its 2 cores over loopback, so a party's wall time is
        # the pair's CPU time over 2 (the runs keep both cores busy; docs/performance.md).
        for n in (2**22, 2**24, 100e6):
            t = n * (CPU_S_PER_ROW + SENDER_CPU_S_PER_ROW) / 2
            print(f"n={n:>11,.0f}  predicted {t:6.1f} s a party, both parties on 2 cores")
        return
    print("| rows a party | machines a party (cores) | link | predicted | bound |")
    print("|---|---|---|---|---|")
    for n, label in ((1e9, "1B"), (1e10, "10B")):
        for machines in (1, 4, 16):
            for bits, lat, link in ((10e9, 0.0005, "10 Gbit/s LAN"), (100e6, 0.010, "100 Mbit/s, 10 ms")):
                for part in ((False, True) if n >= 1e10 else (False,)):
                    p = predict(n, machines, 32, bits, lat, part_files=part)
                    out = " (part files)" if part else ""
                    print(f"| {label}{out} | {machines} × 32 | {link} | {fmt(p['total'])} | {p['bound']} |")


if __name__ == "__main__":
    main()
