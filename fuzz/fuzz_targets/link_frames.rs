//! The TCP link's frame decoder (`len u32 LE | kind u8 | payload | crc32 u32 LE`) and the
//! receive side that turns frames into messages, aborts and closes: the fuzz input is the byte
//! stream off the socket, read once as it is (nearly always a CRC mismatch, which must end the
//! stream cleanly) and once with every frame's CRC made right, so the decoding behind the
//! checksum is reached too. A frame may claim up to MAX_FRAME_LEN (64 MiB) bytes, which bounds
//! what is allocated.
#![no_main]

use blindjoin_link::{
    MAX_FRAME_LEN,
    fuzzing::{read_frames, seal_frames},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for stream in [data.to_vec(), seal_frames(data)] {
        let got = read_frames(&stream, 1 << 16);
        let mut payload_bytes = 0;
        for (i, r) in got.iter().enumerate() {
            match r {
                Ok(m) => {
                    assert!(m.len() <= MAX_FRAME_LEN);
                    payload_bytes += m.len() + 9;
                }
                Err(_) => assert_eq!(i, got.len() - 1, "an error ends the stream"),
            }
        }
        assert!(payload_bytes <= stream.len());
    }
});
