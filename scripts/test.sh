#!/usr/bin/env bash
# The whole test suite: formatting, lints (warnings are errors), every Rust test in the workspace
# (unit tests, protocol-vs-plaintext tests, end-to-end tests that run two `blindjoin` processes on
# 127.0.0.1), then the Python package: build the wheel with maturin and run its pytest suite
# (two Python processes on 127.0.0.1) in a throwaway virtualenv. The virtualenvs are made first:
# the SecretFlow interop tests run an unmodified spu 0.9.5 party from target/spuenv.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings

# The venv comes first: `cargo test` needs it for the SecretFlow interop test.
venv=target/pyenv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# pandas and pyarrow: so the DataFrame and Table tests run instead of being skipped; absl-py and
# multiprocess: the whitepaper's scripts import them (test_whitepaper.py); ray: partitioned runs
# on Ray (test_ray.py, about 45 s with its four Ray start-ups). Binary wheels; a no-op once
# installed, about a minute on a first, uncached download.
"$venv/bin/pip" install -q "maturin==1.16.0" "pytest>=8" pandas pyarrow absl-py multiprocess ray
# The unmodified SecretFlow party (PyPI spu 0.9.5) that crates/link/tests/secretflow_interop.rs
# talks to, in a venv of its own: it pins numpy<2 and brings jax, which must not move the main
# venv's pandas/pyarrow/ray. The test finds it there, or at BLINDJOIN_SPU_PYTHON.
spuenv=target/spuenv
[ -x "$spuenv/bin/python" ] || python3 -m venv "$spuenv"
"$spuenv/bin/pip" install -q "spu==0.9.5"

cargo test --workspace --locked

rm -rf target/wheels
# The test wheel is a dev-profile build: crates/py is a workspace member, so it reuses the
# dependencies `cargo test` just compiled (arrow, parquet, rustls, …) instead of building them
# again with release LTO; `pip install .` (README) still builds the optimised release wheel.
"$venv/bin/maturin" build -q --locked --profile dev -o target/wheels
"$venv/bin/pip" install -q --force-reinstall target/wheels/blindjoin-*.whl
"$venv/bin/pytest" -q python/tests
