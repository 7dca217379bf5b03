#!/usr/bin/env python3
"""RR22 side by side with SecretFlow's, in one run (issue #3's acceptance comparison).

Alternates `blindjoin bench --protocol rr22 --json` with SecretFlow's benchmark script
(`../shared/peers/spu_psi_bench.py`, the `spu` wheel's PSI v2 engine) on the same sizes, mode
by mode, and prints each pair and the ratio. The machine is shared and its timings drift by
±20 % within minutes, so only runs made next to each other are compared: each SecretFlow run is
divided by the blindjoin run just before it, and the table gives the range of those ratios.

What is compared is each party's time for the whole job, CSV in to aligned CSV out, the slower
party of the two: blindjoin's `stages.total_s` (from the start of `blindjoin run`, connection
included) against SecretFlow's `psi_execute` time (its link is set up before the clock starts).
`--payload-columns 0` (the default) gives blindjoin the id-only files SecretFlow's script
makes, so both read the same bytes.

    cargo build --release -p blindjoin-cli --locked
    python3 -m venv ~/.peers/spu && ~/.peers/spu/bin/pip install spu==0.9.5
    python3 scripts/rr22_vs_secretflow.py --rounds 3 --n 1048576
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SF_PROTOCOL = {"fast": "rr22", "low-comm": "rr22-lowcomm"}


def run_json(cmd, what):
    """Runs `cmd` and parses its stdout (one JSON object, or JSON as its last line)."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout.strip()
    if p.returncode != 0 or not out:
        sys.exit(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{out[-2000:]}\n{p.stderr[-2000:]}")
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return json.loads(out.splitlines()[-1])


def ours(args, mode):
    d = run_json(
        [args.blindjoin, "bench", "--protocol", "rr22", "--rr22-mode", mode, "-n", str(args.n),
         "--payload-columns", str(args.payload_columns), "--json"],
        "blindjoin bench",
    )
    parties = (d["receiver"], d["sender"])
    return {
        "correct": bool(d["correct"]),
        "seconds": max(p["stages"]["total_s"] for p in parties),
        "protocol_s": max(p["stages"]["protocol_s"] for p in parties),
        "bits": (d["bytes_receiver_to_sender"] + d["bytes_sender_to_receiver"]) * 8 / args.n,
        "rss_mib": [p["peak_rss_bytes"] / 2**20 for p in parties],
    }


def secretflow(args, mode):
    d = run_json(
        [args.sf_python, args.sf_script, "--protocol", SF_PROTOCOL[mode], "--n", str(args.n), "--json"],
        "SecretFlow's benchmark",
    )
    return {
        "correct": bool(d["correct"]),
        "seconds": max(p["seconds"] for p in d["parties"]),
        "bits": d["comm_bytes"] * 8 / args.n,
        "rss_mib": [u["max_rss_mib"] for u in d["usage"]],
    }


def span(xs, fmt="{:.2f}"):
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="pairs of runs per mode")
    ap.add_argument("--n", type=int, default=1 << 20, help="rows per party")
    ap.add_argument("--modes", default="fast,low-comm", help="comma-separated: fast, low-comm")
    ap.add_argument("--payload-columns", type=int, default=0, help="blindjoin input columns besides the id (0 = SecretFlow's inputs)")
    ap.add_argument("--blindjoin", default=os.path.join(ROOT, "target", "release", "blindjoin"))
    ap.add_argument("--sf-python", default=os.path.expanduser("~/.peers/spu/bin/python"))
    ap.add_argument("--sf-script", default=os.path.join(ROOT, "..", "shared", "peers", "spu_psi_bench.py"))
    ap.add_argument("--json", action="store_true", help="print every run as one JSON object")
    args = ap.parse_args()

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in SF_PROTOCOL:
            sys.exit(f"--modes: unknown mode {m!r}; use fast and/or low-comm (SecretFlow has no malicious RR22 switch)")
    for path, fix in (
        (args.blindjoin, "build it: cargo build --release -p blindjoin-cli --locked"),
        (args.sf_python, "install SecretFlow's wheel: python3 -m venv ~/.peers/spu && ~/.peers/spu/bin/pip install spu==0.9.5"),
        (args.sf_script, "pass --sf-script with the path of spu_psi_bench.py"),
    ):
        if not os.path.exists(path):
            sys.exit(f"{path} does not exist; {fix}")

    results = {m: [] for m in modes}
    for r in range(args.rounds):
        for m in modes:
            a = ours(args, m)
            b = secretflow(args, m)
            results[m].append({"blindjoin": a, "secretflow": b, "ratio": b["seconds"] / a["seconds"]})
            print(f"round {r + 1} {m:8} blindjoin {a['seconds']:.3f} s (protocol {a['protocol_s']:.3f} s)"
                  f"  SecretFlow {b['seconds']:.3f} s  ratio {b['seconds'] / a['seconds']:.1f}x"
                  f"  correct {a['correct'] and b['correct']}", file=sys.stderr, flush=True)

    if args.json:
        print(json.dumps({"n": args.n, "payload_columns": args.payload_columns, "results": results}))
        return
    print(f"\nRR22, n = {args.n} per party, {args.rounds} alternating pairs per mode, slower party's time\n")
    print("| mode | blindjoin total | blindjoin protocol | SecretFlow | ratio (median) | 10× needs | bits/elt ours / SF | peak RSS MiB ours / SF | correct |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for m, runs in results.items():
        a = [x["blindjoin"] for x in runs]
        b = [x["secretflow"] for x in runs]
        ratios = [x["ratio"] for x in runs]
        ok = all(x["correct"] for x in a + b)
        print(f"| {m} | {span([x['seconds'] for x in a])} s | {span([x['protocol_s'] for x in a])} s"
              f" | {span([x['seconds'] for x in b])} s | {span(ratios, '{:.1f}')}× ({statistics.median(ratios):.1f}×)"
              f" | ≤ {statistics.median(x['seconds'] for x in b) / 10:.2f} s"
              f" | {a[0]['bits']:.1f} / {b[0]['bits']:.1f}"
              f" | {span([max(x['rss_mib']) for x in a], '{:.0f}')} / {span([max(x['rss_mib']) for x in b], '{:.0f}')}"
              f" | {'yes' if ok else 'NO'} |")


if __name__ == "__main__":
    main()
