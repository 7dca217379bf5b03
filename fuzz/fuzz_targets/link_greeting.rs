//! The TCP greeting, the first bytes a peer (or anything that connects to the port) sends:
//! magic, its party id and the id it expects, each length-prefixed. Whatever arrives, decoding
//! ends in a greeting or a refusal, reads no further than the bytes given, and bounds the ids.
#![no_main]

use blindjoin_link::fuzzing::read_greeting;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((theirs, expected, _tls)) = read_greeting(data) {
        // Two ids of at most 256 bytes each, after 8 bytes of magic and two u16 lengths.
        assert!(theirs.len() <= 256 && expected.len() <= 256);
        assert!(8 + 2 + theirs.len() + 2 + expected.len() <= data.len());
    }
});
