#!/usr/bin/env bash
# Three-party ECDH-PSI (PROTOCOL_ECDH_3PC, Curve25519) benchmark: three `blindjoin run`
# processes on 127.0.0.1, ROWS rows each (default 100000), half of them in all three tables;
# alice receives. Prints each party's wall time, peak RSS and bytes sent (from its report), and
# checks alice's output against the plaintext three-way intersection.
# Usage: scripts/bench_3pc.sh [BIN] [ROWS]
set -euo pipefail
bin=$(realpath "${1:-target/release/blindjoin}")
rows=${2:-100000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
"$bin" gen --parties 3 -n "$rows" --overlap $((rows / 2)) --out-dir . > /dev/null
ports=()
for _ in 0 1 2; do
  ports+=("$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')")
done
for me in alice bob carol; do
  cat > "$me.json" <<JSON
{
  "psi_config": {
    "protocol_config": { "protocol": "PROTOCOL_ECDH_3PC", "receiver": "alice",
                         "ecdh_config": { "curve": "CURVE_25519" } },
    "input_config": { "type": "IO_TYPE_FILE_CSV", "path": "$me.csv" },
    "output_config": { "type": "IO_TYPE_FILE_CSV", "path": "${me}_out.csv" },
    "keys": ["id"]
  },
  "link_config": { "parties": [
    { "id": "alice", "host": "127.0.0.1:${ports[0]}" },
    { "id": "bob", "host": "127.0.0.1:${ports[1]}" },
    { "id": "carol", "host": "127.0.0.1:${ports[2]}" } ] },
  "self_link_party": "$me",
  "blindjoin": { "report_path": "$me.report.json" }
}
JSON
done
pids=()
for me in alice bob carol; do
  /usr/bin/time -f "$me: %e s wall, %M KiB peak RSS" -o "$me.time" "$bin" run --quiet --config "$me.json" > /dev/null &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for me in alice bob carol; do
  sent=$(python3 -c "import json; r=json.load(open('$me.report.json')); print(r.get('bytes_sent', '?'))")
  echo "$(cat "$me.time"), sent $sent bytes"
done
python3 - <<'PY'
import csv
keys = [set(r["id"] for r in csv.DictReader(open(f"{p}.csv"))) for p in ("alice", "bob", "carol")]
want = keys[0] & keys[1] & keys[2]
got = set(r["id"] for r in csv.DictReader(open("alice_out.csv")))
print(f"intersection {len(got)} rows, {'correct' if got == want else 'WRONG: expected %d' % len(want)}")
PY
