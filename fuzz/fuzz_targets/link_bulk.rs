//! [`recv_bulk`]: the chunked transfer behind the result positions and the join counts. Input:
//! `kind u8 | byte_len u32 LE | messages` (see `fuzz_support::messages`); byte_len is the
//! caller-announced length, which may be anything up to 4 GiB: memory must grow only with the
//! bytes that actually arrive.
#![no_main]

use blindjoin_link::{mem_pair, recv_bulk};
use fuzz_support::{feed, messages};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let kind = data[0];
    let byte_len = u32::from_le_bytes([data[1], data[2], data[3], data[4]]) as usize;
    let (mut me, mut peer) = mem_pair();
    feed(&mut peer, &messages(&data[5..], 1 << 12));
    if let Ok(bytes) = recv_bulk(&mut me, kind, byte_len, "fuzz") {
        assert_eq!(bytes.len(), byte_len);
    }
});
