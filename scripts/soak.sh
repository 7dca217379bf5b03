#!/usr/bin/env bash
# Soak (issue #39): for every run kind (two-party, --workers 2, three-party, n-party, DP-PSI,
# unbalanced gen-cache / transfer-cache / online / full, labeled PSI setup / online), N runs with
# either party killed (kill -9) at a random moment and N runs with the link cut, stalled or
# corrupted at a random byte offset by `blindjoin bench-proxy --fault`, plus the bad-file corpus.
# Prints per kind: runs, kills, faults injected, outcomes by class and every violation (a
# result-looking file left, a wrong exit code, a hang, a panic, a file left readable by others,
# a resumed output that differs); exits non-zero on any violation. Ray: python/tests/soak_ray.py
# ($N partition workers killed at random moments), when target/pyenv has the package.
#
#   scripts/soak.sh [--runs-per-kind N] [--seed S]      (defaults: 10 and 39)
#
# The runs are `cargo test --test e2e soak::` with BJ_SOAK_RUNS / BJ_SOAK_SEED, one kind at a
# time (--test-threads 1) so timings stay those of an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=10
seed=39
while [ $# -gt 0 ]; do
  case "$1" in
    --runs-per-kind) runs="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
case "$runs$seed" in *[!0-9]*) echo "soak.sh: --runs-per-kind and --seed take integers" >&2; exit 2 ;; esac
cargo test --workspace --locked --no-run -q
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
BJ_SOAK_RUNS="$runs" BJ_SOAK_SEED="$seed" cargo test --workspace --locked -q --test e2e soak:: \
  -- --include-ignored --test-threads 1 --nocapture >"$log" 2>&1 || status=$?
# The tally lines (the test harness's own output is in $log when something else failed).
# (-q prints a dot per test, which may open a tally line.)
sed -E 's/^\.+//' "$log" | grep -E '^(soak |  )' || true
if [ "$status" -ne 0 ]; then
  grep -E 'panicked at|^failures:|^    soak::' "$log" | sort -u || true
  echo "soak: VIOLATIONS (or a failed run): see above; seed $seed, $runs runs per kind" >&2
  exit 1
fi
# Ray (partitioned runs with a private Ray instance per party): a partition worker killed at a
# random moment, $runs times; needs the Python package in target/pyenv (scripts/test.sh).
py=target/pyenv/bin/python
if [ -x "$py" ] && "$py" -c 'import blindjoin, ray' 2>/dev/null; then
  if BJ_SOAK_RUNS="$runs" BJ_SOAK_SEED="$seed" "$py" -m pytest -q -s python/tests/soak_ray.py >"$log" 2>&1; then
    grep -E '^soak ray' "$log" | sed -E 's/^.*(soak ray)/\1/' | sort | uniq -c | sed 's/^/  /' || true
    echo "soak ray: $runs killed workers, outputs identical"
  else
    tail -30 "$log"
    echo "soak ray: VIOLATIONS (or a failed run): see above" >&2
    exit 1
  fi
else
  echo "soak ray: skipped (no target/pyenv with blindjoin and ray; run scripts/test.sh first)" >&2
fi
echo "soak: no violations; seed $seed, $runs kills and $runs link faults per kind"
