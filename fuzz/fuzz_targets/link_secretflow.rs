//! SecretFlow's link, server side: baidu_std frames (`PRPC`, sizes u32 BE, RpcMeta) off the
//! peer's connection, each Push decoded and handed to the yacl channel (seq keys, ACK, FIN,
//! chunk reassembly). Whatever arrives, nothing panics, bodies stay under the 64 KiB bound and
//! the channel holds no more than its byte budget (checked inside the hook).
#![no_main]

use blindjoin_link::fuzzing::secretflow_pushes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let out = secretflow_pushes(data);
    assert!(out.accepted <= out.frames);
    // Every frame has a 12-byte header.
    assert!(out.frames * 12 <= data.len());
});
