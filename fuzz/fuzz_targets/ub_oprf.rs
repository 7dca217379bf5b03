//! Unbalanced PSI (`ub_oprf`): this party runs one step honestly — the client receiving the
//! cache, the client's online phase, or the server's online phase (every result-sharing option,
//! FourQ and Ristretto255) — while the fuzz input is every message the peer sends. See
//! [`fuzz_support::run_hostile_ub`] for the input layout.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzz_support::run_hostile_ub(data);
});
