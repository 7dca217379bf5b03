//! Three-party ECDH-PSI (`ecdh_3pc`): this party takes one seat (the receiver R or a helper P or
//! Q, every curve) and runs the protocol honestly; the other two seats pass the real handshake
//! and then send the fuzz input's messages. See [`fuzz_support::run_hostile_3pc`] for the input
//! layout.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzz_support::run_hostile_3pc(data);
});
