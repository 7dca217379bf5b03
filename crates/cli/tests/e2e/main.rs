//! The end-to-end tests: real `blindjoin` processes on 127.0.0.1. One test binary (one link)
//! for all of them; each module is one area, and `cargo test -p blindjoin-cli --test e2e
//! MODULE::` runs one (e.g. `recovery::`, `faults::`, `ub::`).

// Test code and its helpers: failing loudly is what a test should do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod apsi;
mod faults;
#[cfg(unix)]
mod file_modes;
mod integration;
mod kuscia;
mod legacy;
mod n_party;
mod ops;
mod recovery;
mod secretflow;
mod secretflow_ub;
mod serve;
#[cfg(unix)]
mod soak;
mod three_party;
mod ub;
mod workers;
mod workers_recovery;
