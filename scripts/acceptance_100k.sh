#!/usr/bin/env bash
# Acceptance run of the foundation issue: two `blindjoin` processes with SecretFlow v2 JSON configs
# (the seed's, protocol switched to ECDH plus a curve) on 100,000 x 100,000 rows with 50% overlap,
# for every curve, with broadcast_result true and false; each output is compared with a plaintext
# join (sorted by key, so alignment is checked too). Usage: scripts/acceptance_100k.sh [ROWS] [CURVES...]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-100000}; shift || true
curves=${*:-CURVE_25519 CURVE_RISTRETTO255 CURVE_SECP256K1 CURVE_SM2 CURVE_P256}
cargo build --release -q -p blindjoin-cli
bin=$PWD/target/release/blindjoin
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" gen -n "$rows" --overlap $((rows / 2)) --seed 7 --payload-columns 2 --out-dir "$dir" 2>/dev/null
mv "$dir/alice.csv" "$dir/receiver.csv"; mv "$dir/bob.csv" "$dir/sender.csv"
# Plaintext join: rows of each side whose id the other has, sorted by id (C locale, like ours).
expected() { awk -F, 'NR==FNR { if (FNR > 1) k[$1] = 1; next } FNR > 1 && ($1 in k)' "$2" "$1" | LC_ALL=C sort -t, -k1,1 -s; }
expected "$dir/receiver.csv" "$dir/sender.csv" > "$dir/want_receiver"
expected "$dir/sender.csv" "$dir/receiver.csv" > "$dir/want_sender"
config() { # me role curve broadcast
  cat > "$dir/$1.json" <<JSON
{
  "psi_config": {
    "protocol_config": { "protocol": "PROTOCOL_ECDH", "ecdh_config": { "curve": "$3" }, "role": "$2", "broadcast_result": $4 },
    "input_config": { "type": "IO_TYPE_FILE_CSV", "path": "$1.csv" },
    "output_config": { "type": "IO_TYPE_FILE_CSV", "path": "$1_out.csv" },
    "keys": [ "id", ],
    "skip_duplicates_check": false, "disable_alignment": false,
    "advanced_join_type": "ADVANCED_JOIN_TYPE_UNSPECIFIED", "left_side": "ROLE_RECEIVER",
    "check_hash_digest": false, "recovery_config": { "enabled": false }
  },
  "link_config": { "parties": [ { "id": "receiver", "host": "127.0.0.1:5300" }, { "id": "sender", "host": "127.0.0.1:5400" } ] },
  "self_link_party": "$1"
}
JSON
}
for curve in $curves; do
  for broadcast in true false; do
    rm -f "$dir"/*_out.csv*
    config receiver ROLE_RECEIVER "$curve" "$broadcast"; config sender ROLE_SENDER "$curve" "$broadcast"
    start=$(date +%s%N)
    "$bin" run --quiet --config "$dir/receiver.json" > "$dir/r.json" & r=$!
    "$bin" run --quiet --config "$dir/sender.json" > "$dir/s.json" & s=$!
    wait $r; wait $s
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    tail -n +2 "$dir/receiver_out.csv" | cmp -s - "$dir/want_receiver" || { echo "FAIL $curve broadcast=$broadcast: receiver output differs"; exit 1; }
    if [ "$broadcast" = true ]; then
      tail -n +2 "$dir/sender_out.csv" | cmp -s - "$dir/want_sender" || { echo "FAIL $curve: sender output differs"; exit 1; }
      cut -d, -f1 "$dir/receiver_out.csv" | cmp -s - <(cut -d, -f1 "$dir/sender_out.csv") || { echo "FAIL $curve: not aligned"; exit 1; }
    else
      [ ! -e "$dir/sender_out.csv" ] || { echo "FAIL $curve: sender got an output without broadcast"; exit 1; }
      grep -q '"intersection_count": -1' "$dir/s.json" || { echo "FAIL $curve: sender report"; exit 1; }
    fi
    printf 'ok %-20s broadcast=%-5s rows=%s intersection=%s  %d ms\n' "$curve" "$broadcast" "$rows" "$(wc -l < "$dir/want_receiver")" "$ms"
  done
done
