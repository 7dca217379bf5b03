//! SecretFlow's link over `h2:grpc`, server side: the HTTP/2 connection loop (preface,
//! frames, HPACK header blocks, SETTINGS, WINDOW_UPDATE and the windows we give, the gRPC
//! length prefix) with each Push decoded and handed to the yacl channel. Whatever arrives,
//! nothing panics, no stream takes more than its window and the channel holds no more than
//! its byte budget (checked inside the hook).
#![no_main]

use blindjoin_link::fuzzing::secretflow_h2;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let out = secretflow_h2(data);
    assert!(out.accepted <= out.pushes);
    // A Push needs at least a 9-byte HEADERS frame and one byte of header block.
    assert!(out.pushes * 10 <= data.len());
});
