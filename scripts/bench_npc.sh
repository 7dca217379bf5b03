#!/usr/bin/env bash
# n-party PSI benchmark: N parties (default 5) x ROWS rows (default 100000), COMMON keys in every
# table (default 80% of ROWS), one `blindjoin run` process per party on 127.0.0.1, for each of
# PROTOCOL_NPC (zero-sharing), ECDH_PSI_NPC and KKRT_PSI_NPC. Prints each party's wall time,
# peak RSS and bytes, and checks the receiver's output against the plaintext intersection.
# Usage: scripts/bench_npc.sh [BIN] [N] [ROWS]
set -euo pipefail
bin=${1:-target/release/blindjoin}
n=${2:-5}
rows=${3:-100000}
common=$((rows * 8 / 10))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" "$n" "$rows" "$common" <<'PY'
import random, sys
d, n, rows, common = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for p in range(n):
    keys = [f"c{i:08d}" for i in range(common)] + [f"p{p}-{i:08d}" for i in range(rows - common)]
    random.Random(p).shuffle(keys)
    with open(f"{d}/p{p}.csv", "w") as f:
        f.write("id,payload\n")
        f.writelines(f"{k},{p}\n" for k in keys)
PY
base=$((20000 + RANDOM % 20000))
parties=$(for p in $(seq 0 $((n - 1))); do printf '{"id":"p%d","host":"127.0.0.1:%d"},' "$p" $((base + p)); done)
parties=${parties%,}
for proto in PROTOCOL_NPC ECDH_PSI_NPC KKRT_PSI_NPC; do
  for p in $(seq 0 $((n - 1))); do
    cat > "$dir/p$p.json" <<JSON
{"psi_config": {"protocol_config": {"protocol": "$proto", "receiver": "p0",
   "ecdh_config": {"curve": "CURVE_FOURQ"}},
  "input_config": {"type": "IO_TYPE_FILE_CSV", "path": "p$p.csv"},
  "output_config": {"type": "IO_TYPE_FILE_CSV", "path": "p${p}_out.csv"},
  "keys": ["id"], "disable_alignment": true},
 "link_config": {"parties": [$parties]}, "self_link_party": "p$p"}
JSON
  done
  start=$(date +%s.%N)
  for p in $(seq 0 $((n - 1))); do
    /usr/bin/time -f "%e s %M KiB" -o "$dir/p$p.time" "$bin" run --quiet --config "$dir/p$p.json" \
      --report "$dir/p$p.report.json" > /dev/null 2> "$dir/p$p.err" &
  done
  wait
  end=$(date +%s.%N)
  got=$(($(wc -l < "$dir/p0_out.csv") - 1))
  [ "$got" -eq "$common" ] || { echo "$proto: receiver got $got rows, want $common" >&2; exit 1; }
  python3 - "$dir" "$n" "$proto" "$start" "$end" <<'PY'
import json, sys
d, n, proto, start, end = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
sent = 0
for p in range(n):
    r = json.load(open(f"{d}/p{p}.report.json"))
    t = open(f"{d}/p{p}.time").read().split()
    sent += r["bytes_sent"]
    print(f"{proto} p{p}: {t[0]} s, peak RSS {int(t[2]) / 1024:.0f} MiB, sent {r['bytes_sent'] / 1e6:.2f} MB, protocol {r['stages']['protocol_s']:.2f} s")
print(f"{proto}: all {n} done in {end - start:.2f} s; {sent / 1e6:.1f} MB sent in all; receiver output checked")
PY
  rm -f "$dir"/p*_out.csv
done
