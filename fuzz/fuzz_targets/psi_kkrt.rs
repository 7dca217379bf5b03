//! Whole-protocol target for KKRT: this party runs the protocol honestly (either role, with or
//! without broadcast) while the fuzz input is every message the peer sends
//! after a valid hello. See [`fuzz_support::run_hostile_peer`] for the input layout.
#![no_main]

use blindjoin_protocols::Protocol;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzz_support::run_hostile_peer(Protocol::Kkrt, data);
});
