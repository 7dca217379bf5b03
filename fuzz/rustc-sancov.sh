#!/bin/sh
# RUSTC_WRAPPER for scripts/fuzz.sh: adds libFuzzer's SanitizerCoverage instrumentation, debug
# assertions and overflow checks to blindjoin's own crates and the fuzz targets only. Third-party
# crates (curve25519-dalek, RustCrypto, rustls, rayon, …) are compiled plainly: instrumenting
# their arithmetic made the whole-protocol targets several times slower without guiding the
# fuzzer anywhere useful (their inputs are our decoders' outputs).
rustc="$1"
shift
ours=no
prev=
for a in "$@"; do
    if [ "$prev" = "--crate-name" ]; then
        case "$a" in
        blindjoin_* | fuzz_support | link_frames | link_reader | link_bulk | link_greeting | \
            hello | positions | join_counts | bucket_count | resume_point | check_digest | \
            psi_rr22 | psi_kkrt | psi_ecdh | psi_3pc | ub_oprf) ours=yes ;;
        esac
    fi
    prev="$a"
done
if [ "$ours" = yes ]; then
    exec "$rustc" "$@" -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
        -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
        -Cllvm-args=-sanitizer-coverage-pc-table \
        -Cllvm-args=-sanitizer-coverage-trace-compares \
        -Cdebug-assertions=on -Coverflow-checks=on
fi
exec "$rustc" "$@"
