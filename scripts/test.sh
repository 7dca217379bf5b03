#!/usr/bin/env bash
# The whole test suite: formatting, lints (warnings are errors), and every test in the workspace
# (unit tests, protocol-vs-plaintext tests, and end-to-end tests that run two `blindjoin`
# processes on 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
