//! The TCP link's frame decoder (`len u32 LE | kind u8 | payload`) and the receive side that
//! turns frames into messages, aborts and closes: the fuzz input is the byte stream off the
//! socket. A frame may claim up to MAX_FRAME_LEN (64 MiB) bytes, which bounds what is allocated.
#![no_main]

use blindjoin_link::{MAX_FRAME_LEN, fuzzing::read_frames};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let got = read_frames(data, 1 << 16);
    let mut payload_bytes = 0;
    for (i, r) in got.iter().enumerate() {
        match r {
            Ok(m) => {
                assert!(m.len() <= MAX_FRAME_LEN);
                payload_bytes += m.len() + 5;
            }
            Err(_) => assert_eq!(i, got.len() - 1, "an error ends the stream"),
        }
    }
    assert!(payload_bytes <= data.len());
});
