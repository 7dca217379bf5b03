#!/usr/bin/env bash
# Builds the fuzz targets in fuzz/ (libFuzzer via libfuzzer-sys, on the *stable* toolchain: no
# nightly, no cargo-fuzz) and runs each for SECONDS_PER_TARGET seconds (default 30). Fails on the
# first crash, panic, timeout (>10 s for one input) or out-of-memory (>2048 MB). See
# docs/fuzzing.md.
#
#   bash scripts/fuzz.sh              # every target, 30 s each
#   bash scripts/fuzz.sh 600          # every target, 10 minutes each
#   bash scripts/fuzz.sh 60 psi_rr22  # named targets only
#   FUZZ_JOBS=2 bash scripts/fuzz.sh 600   # libFuzzer -fork=2 per target (uses 2 cores)
#   FUZZ_NO_SEEDS=1 bash scripts/fuzz.sh 10 # CI smoke: skip the seed generator (half the build)
#
# Outputs: corpora grow in fuzz/corpus/<target>/ (reused by the next run), crashing inputs land
# in fuzz/artifacts/<target>/, logs in fuzz/logs/<target>.log. All three are git-ignored; seeds
# are regenerated into fuzz/seeds/ on every run. Reproduce a crash with
#   fuzz/run.sh <target> fuzz/artifacts/<target>/crash-…   (or the binary path printed below)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

secs="${1:-30}"
shift || true
all=(link_frames link_reader link_bulk link_greeting link_secretflow link_secretflow_h2 secretflow_psi hello positions join_counts
    bucket_count resume_point check_digest key_sets_equal psi_rr22 psi_kkrt psi_ecdh psi_3pc ub_oprf
    apsi dp_psi npc worker_messages apsi_rounds config_v1)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

triple="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/../target/fuzz}"
bin="$CARGO_TARGET_DIR/$triple/release"

# 1. Seeds, from an uninstrumented build (the generator runs honest protocol sessions). The CI
#    smoke skips them (FUZZ_NO_SEEDS=1): that build compiles every dependency a second time.
rm -rf seeds
if [ -z "${FUZZ_NO_SEEDS:-}" ]; then
    cargo build --release --locked --no-default-features --bin gen_seeds
    "$CARGO_TARGET_DIR/release/gen_seeds" seeds
fi

# 2. The targets, instrumented for libFuzzer with SanitizerCoverage by fuzz/rustc-sancov.sh (our
#    crates only; see there). `--target` keeps build scripts and proc macros (not linked with
#    libFuzzer) apart. The curve25519 backend cfg repeats .cargo/config.toml, which RUSTFLAGS
#    overrides.
#    Only the data-path targets need crates/data (feature `data`).
export RUSTFLAGS='--cfg curve25519_dalek_backend="avx512" --cfg fuzzing'
features=--no-default-features
for t in join_counts bucket_count resume_point check_digest key_sets_equal worker_messages \
    apsi_rounds config_v1; do
    case " ${targets[*]} " in *" $t "*) features= ;; esac
done
RUSTC_WRAPPER="$PWD/rustc-sancov.sh" cargo build --release --locked --target "$triple" \
    $features $(printf -- '--bin %s ' "${targets[@]}")

# 3. Run.
mkdir -p logs
jobs="${FUZZ_JOBS:-1}"
failed=()
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t" "seeds/$t"
    extra=()
    [ "$jobs" -gt 1 ] && extra+=("-fork=$jobs")
    [ -d "regressions/$t" ] && extra+=("regressions/$t")
    echo "== $t: ${secs}s"
    if "$bin/$t" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="artifacts/$t/" "corpus/$t" "seeds/$t" \
        "${extra[@]+"${extra[@]}"}" > "logs/$t.log" 2>&1; then
        grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "logs/$t.log" |
            tr -s ' \n' ' '
        echo
        grep -E '^#[0-9]+[[:space:]]+DONE' "logs/$t.log" | tail -1 || true
    else
        echo "!! $t FAILED — see fuzz/logs/$t.log and fuzz/artifacts/$t/"
        grep -E 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written' "logs/$t.log" | head -5 || true
        failed+=("$t")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
    exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${secs}s without a crash"
