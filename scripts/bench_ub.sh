#!/usr/bin/env bash
# Unbalanced PSI (ub_psi_config) benchmark on loopback: server 2^S rows, client 2^C rows.
# Runs gen cache (server alone), transfer cache, then the online query (twice, to show the cache
# is reused), each through `blindjoin run --config`, and prints each phase's report line:
# time, bytes each way and peak memory (the reports are kept in DIR).
#
#   scripts/bench_ub.sh [S=24] [C=14] [DIR=/tmp/bj-ub-bench] [CURVE=CURVE_FOURQ]
#
# The tables come from `blindjoin gen -n 2^S,2^C --overlap 2^(C-1) --seed 7`, or from
# SERVER_CSV / CLIENT_CSV when set (to run the same client against servers of several sizes).
# Needs a release build: cargo build --release -p blindjoin-cli
set -euo pipefail
S=${1:-24}
C=${2:-14}
DIR=${3:-/tmp/bj-ub-bench}
CURVE=${4:-CURVE_FOURQ}
BIN=${BIN:-$(dirname "$0")/../target/release/blindjoin}
BIN=$(realpath "$BIN")
mkdir -p "$DIR"
cd "$DIR"
NS=$((1 << S))
NC=$((1 << C))
SHARED=$((NC / 2))
if [ -n "${SERVER_CSV:-}" ]; then
  ln -sf "$(realpath "$SERVER_CSV")" "server_$S.csv"
  ln -sf "$(realpath "$CLIENT_CSV")" "client_$S.csv"
elif [ ! -f "server_$S.csv" ]; then
  "$BIN" gen -n "$NS,$NC" --overlap "$SHARED" --seed 7 --out-dir gen >/dev/null
  mv gen/alice.csv "server_$S.csv"
  mv gen/bob.csv "client_$S.csv"
fi
P1=$((20000 + RANDOM % 20000))
P2=$((P1 + 1))
conf() { # name role mode body
  cat >"$1" <<JSON
{
  "ub_psi_config": {
    "mode": "$3",
    "role": "$2",
    $4
  },
  "link_config": {"parties": [{"id": "server", "host": "127.0.0.1:$P1"},
                              {"id": "client", "host": "127.0.0.1:$P2"}]},
  "self_link_party": "$( [ "$2" = ROLE_SERVER ] && echo server || echo client )",
  "blindjoin": {"curve": "$CURVE"}
}
JSON
}
SRV="\"input_config\": {\"path\": \"server_$S.csv\"}, \"keys\": [\"id\"],
    \"server_secret_key_path\": \"server_$S.key\", \"cache_path\": \"server_cache_$S\",
    \"output_config\": {\"path\": \"server_out_$S.csv\"},
    \"server_get_result\": true, \"client_get_result\": true"
CLI="\"input_config\": {\"path\": \"client_$S.csv\"}, \"keys\": [\"id\"],
    \"cache_path\": \"client_cache_$S\",
    \"output_config\": {\"path\": \"client_out_$S.csv\"},
    \"server_get_result\": true, \"client_get_result\": true"
conf gen.json ROLE_SERVER MODE_OFFLINE_GEN_CACHE "$SRV"
conf ts.json ROLE_SERVER MODE_OFFLINE_TRANSFER_CACHE "$SRV"
conf tc.json ROLE_CLIENT MODE_OFFLINE_TRANSFER_CACHE "$CLI"
conf os.json ROLE_SERVER MODE_ONLINE "$SRV"
conf oc.json ROLE_CLIENT MODE_ONLINE "$CLI"
rm -f "server_$S.key"
echo "== server 2^$S rows, client 2^$C rows, $CURVE"
/usr/bin/time -f "gen cache wall %e s, max RSS %M KiB" "$BIN" run --quiet --config gen.json >"gen_$S.json"
"$BIN" run --quiet --config ts.json >"ts_$S.json" &
"$BIN" run --quiet --config tc.json >"tc_$S.json"
wait
for i in 1 2; do
  "$BIN" run --quiet --config os.json >"os_$S.json" &
  "$BIN" run --quiet --config oc.json >"oc_$S.json"
  wait
done
python3 - "$S" <<'PY'
import json, sys
s = sys.argv[1]
r = {k: json.load(open(f"{k}_{s}.json")) for k in ["gen", "ts", "tc", "os", "oc"]}
g = r["gen"]["gen_cache"]
print(f"gen cache:  {g['seconds']:.2f} s, {r['gen']['cache_count']} values of {r['gen']['cache_value_bytes']} B, peak RSS {r['gen']['peak_rss_bytes']/2**20:.0f} MiB")
t = r["ts"]["transfer_cache"]
print(f"transfer:   {t['seconds']:.2f} s, server sent {t['bytes_sent']} B, received {t['bytes_received']} B; client peak RSS {r['tc']['peak_rss_bytes']/2**20:.0f} MiB")
for k, who in [("os", "server"), ("oc", "client")]:
    o = r[k]["online"]
    print(f"online ({who}): {o['seconds']:.3f} s, sent {o['bytes_sent']} B, received {o['bytes_received']} B; "
          f"prepare {r[k].get('online_prepare_s', 0):.2f} s; intersection {r[k]['intersection_key_count']} keys; peak RSS {r[k]['peak_rss_bytes']/2**20:.0f} MiB")
PY
