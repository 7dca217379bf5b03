#!/usr/bin/env python3
"""Measures every protocol and run kind with one release build, in one session, and prints
the figures `docs/performance.md` quotes (one markdown row per case, with its command), so
the document's tables are of one build on one machine on one date.

    cargo build --release -p blindjoin-cli --locked
    python3 scripts/perf_today.py [--quick] [--only SUBSTRING] [--log DIR]

Each case is one `blindjoin bench` (two processes on 127.0.0.1, outputs checked against the
plaintext intersection) or one of the repository's own benchmark scripts (three-party, n-party,
unbalanced), or a peer's benchmark (SecretFlow's `spu` from `target/spuenv`, APSI's CLI from
`../shared/peers/apsi`) run right after ours, alternating. `--quick` runs the small sizes only
(a smoke of this script, not figures). Raw output of every case goes to the log folder.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "target" / "release" / "blindjoin"
PEERS = ROOT.parent / "shared" / "peers"
PRESETS = ROOT / "crates" / "he" / "tests" / "data"
SPU = Path(os.environ.get("BLINDJOIN_SPU_PYTHON", ROOT / "target" / "spuenv" / "bin" / "python"))


def sh(cmd, log, timeout=1800, env=None):
    """Runs `cmd` (a list), appends its output to `log`, returns (seconds, stdout)."""
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                       env=dict(os.environ, **(env or {})))
    took = time.monotonic() - t
    with open(log, "a") as f:
        f.write(f"$ {' '.join(map(str, cmd))}\n{p.stdout}{p.stderr}\n(exit {p.returncode}, {took:.1f} s)\n\n")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr[-800:]}")
    return took, p.stdout


def bench(args, log):
    """One `blindjoin bench --json`: its markdown row."""
    cmd = [str(BIN), "bench", "--json"] + args
    _, out = sh(cmd, log)
    r = json.loads(out.strip().splitlines()[-1])
    if r["protocol"] == "apsi":
        mb = (r["bytes_receiver_to_sender"] + r["bytes_sender_to_receiver"]) / 1e6
        ok = "yes" if r["correct"] else "**NO**"
        return (f"| `blindjoin bench {' '.join(args)}` | setup {r['setup_s']:.2f} s, online "
                f"{r['online_s']:.3f} s (of which the sender's DB load {r['sender_load_s']:.3f} s) | "
                f"serve {r['sender_serve_s']:.3f} s | {mb:.2f} | DB file "
                f"{r['db_file_bytes'] / 1e6:.1f} MB | setup {r['setup_peak_rss_bytes'] >> 20}, "
                f"online sender {r['sender_online_peak_rss_bytes'] >> 20}, receiver "
                f"{r['receiver_peak_rss_bytes'] >> 20} | {ok} |")
    rx, tx = r["receiver"], r["sender"]
    mb = (r["bytes_receiver_to_sender"] + r["bytes_sender_to_receiver"]) / 1e6
    total = f"{rx['stages']['total_s']:.2f} / {tx['stages']['total_s']:.2f} s"
    proto = f"{rx['stages']['protocol_s']:.2f} s"
    rss = f"{rx['peak_rss_bytes'] >> 20} / {tx['peak_rss_bytes'] >> 20}"
    ok = "yes" if r["correct"] else "**NO**"
    return (f"| `blindjoin bench {' '.join(args)}` | {total} | {proto} | {mb:.1f} | "
            f"{r['bits_per_element']:.1f} | {rss} | {ok} |")


def dp_psi(log_dir, n):
    """DP-PSI (SecretFlow's v1 `DP_PSI_2PC`, default ε and sub-sampling), two `blindjoin run`
    processes on `blindjoin gen` tables: one line with each party's time, bytes and peak RSS."""
    import socket
    d = log_dir / "dp"
    d.mkdir(exist_ok=True)
    sh([str(BIN), "gen", "-n", str(n), "--out-dir", str(d)], log_dir / "raw.log")
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    procs = []
    for me in ("alice", "bob"):
        cfg = {
            "legacy_psi_config": {
                "psi_type": "DP_PSI_2PC", "receiver_rank": 0, "curve_type": "CURVE_25519",
                "input_params": {"path": f"{me}.csv", "select_fields": ["id"], "precheck": False},
                "output_params": {"path": f"{me}_out.csv", "need_sort": False},
            },
            "link_config": {"parties": [{"id": "alice", "host": f"127.0.0.1:{ports[0]}"},
                                        {"id": "bob", "host": f"127.0.0.1:{ports[1]}"}]},
            "self_link_party": me,
            "blindjoin": {"report_path": f"{me}.report.json"},
        }
        (d / f"{me}.json").write_text(json.dumps(cfg))
        procs.append(subprocess.Popen(["/usr/bin/time", "-f", "%e %M", "-o", f"{me}.time", str(BIN),
                                       "run", "--quiet", "--config", f"{me}.json"], cwd=d,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for p in procs:
        p.wait(timeout=600)
    parts = []
    for me in ("alice", "bob"):
        wall, kib = (d / f"{me}.time").read_text().split()[-2:]
        rep = json.loads((d / f"{me}.report.json").read_text())
        parts.append(f"{me} {float(wall):.2f} s, sent {rep.get('bytes_sent', 0) / 1e6:.2f} MB, "
                     f"peak RSS {int(kib) >> 10} MiB")
    got = sum(1 for _ in open(d / "alice_out.csv")) - 1
    return (f"\n## dp-psi: two `blindjoin run` processes, v1 `DP_PSI_2PC` configs, {n} rows a side, "
            f"{n // 2} shared\n{'; '.join(parts)}; alice's output {got} rows (noisy by design)")


def cases(quick):
    big = 1 << (14 if quick else 20)
    slow = 1 << (10 if quick else 14)
    huge = 1 << (16 if quick else 24)
    out = []
    for mode in ("fast", "low-comm", "malicious"):
        out.append(("rr22 " + mode, ["--protocol", "rr22", "--rr22-mode", mode, "-n", str(big)]))
    out.append(("rr22 2^24", ["--protocol", "rr22", "-n", str(huge)]))
    out.append(("kkrt", ["--protocol", "kkrt", "-n", str(big)]))
    for curve in ("25519", "fourq"):
        out.append(("ecdh " + curve, ["--protocol", "ecdh", "--curve", curve, "-n", str(big)]))
    for curve in ("ristretto255", "secp256k1", "p256", "sm2"):
        out.append(("ecdh " + curve, ["--protocol", "ecdh", "--curve", curve, "-n", str(slow)]))
    for proto in (["--protocol", "rr22"], ["--protocol", "ecdh", "--curve", "25519"]):
        out.append(("wan " + proto[1], proto + ["-n", str(big), "--bandwidth", "100mbit",
                                                  "--latency", "10ms"]))
    for preset, labels, queries in (("1M-1024-cmp", 0, 1024), ("1M-1-32", 32, 1)):
        out.append((f"apsi {preset}", ["--protocol", "apsi", "--apsi-preset",
                                       str(PRESETS / f"{preset}.json"), "-n", str(big),
                                       "--label-bytes", str(labels), "--queries", str(queries)]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--log", default="/tmp/bj-perf")
    a = ap.parse_args()
    log_dir = Path(a.log)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "raw.log"
    if not BIN.exists():
        sys.exit(f"{BIN} is missing: cargo build --release -p blindjoin-cli --locked")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = open("/proc/cpuinfo").read()
    print(f"# {datetime.date.today()}, {BIN.relative_to(ROOT)}, {os.cpu_count()} cores, {cpu}, "
          f"avx512ifma={'avx512ifma' in flags}, vaes={'vaes' in flags}")
    print("| command | time per party, receiver / sender | protocol | MB | bits / element | "
          "peak RSS MiB, receiver / sender | checked |")
    print("|---|---:|---:|---:|---:|---:|---|")
    big = 1 << (14 if a.quick else 20)
    for name, args in cases(a.quick):
        if a.only and a.only not in name:
            continue
        try:
            print(bench(args, log), flush=True)
        except Exception as e:  # noqa: BLE001 - keep measuring the rest, say which failed
            print(f"| `blindjoin bench {' '.join(args)}` | failed: {e} |||||", flush=True)

    if not a.only or a.only in "dp-psi":
        print(dp_psi(log_dir, 10_000 if a.quick else 100_000), flush=True)

    # The run kinds with scripts of their own: their printed lines, verbatim.
    scripts = [
        ("three-party", ["bash", "scripts/bench_3pc.sh", str(BIN), str(100_000 if not a.quick else 2000)]),
        ("n-party", ["bash", "scripts/bench_npc.sh", str(BIN), "5", str(100_000 if not a.quick else 2000)]),
        ("unbalanced", ["bash", "scripts/bench_ub.sh", "20" if not a.quick else "14", "14" if not a.quick else "10",
                        str(log_dir / "ub")]),
    ]
    if SPU.exists() and (PEERS / "spu_psi_bench.py").exists():
        # SecretFlow beside ours, alternating: its figures, then ours again is in the table above.
        for proto in ("rr22", "kkrt", "ecdh-25519", "ecdh-fourq"):
            scripts.append((f"secretflow {proto}", [str(SPU), str(PEERS / "spu_psi_bench.py"),
                                                    "--protocol", proto, "--n", str(big), "--json"]))
        scripts.append(("secretflow ub", [str(SPU), str(PEERS / "spu_psi_bench.py"), "--protocol",
                                          "ub-ecdh-oprf", "--server-n", str(big), "--client-n",
                                          str(1 << 14 if not a.quick else 1 << 10), "--json"]))
    # APSI's prebuilt CLI needs two shared libraries: apt-get install liblog4cplus-2.0.5 libzmq5
    if (PEERS / "apsi_cli_bench.py").exists() and (PEERS / "apsi" / "bin" / "sender_cli").exists():
        for preset, client_n, labels in (("1M-1024-cmp", 1024, 0), ("1M-1-32", 1, 32)):
            scripts.append((f"apsi-cli {preset}", ["python3", str(PEERS / "apsi_cli_bench.py"),
                                                   "--server-n", str(big), "--client-n", str(client_n),
                                                   "--label-bytes", str(labels), "--params", preset,
                                                   "--json"]))
    for name, cmd in scripts:
        if a.only and a.only not in name:
            continue
        print(f"\n## {name}: `{' '.join(cmd)}`", flush=True)
        try:
            took, out = sh(cmd, log)
            print(out.strip()[-3000:])
            print(f"(wall {took:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"failed: {e}", flush=True)


if __name__ == "__main__":
    main()
