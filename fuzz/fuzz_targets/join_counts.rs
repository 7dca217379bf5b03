//! The join-counts exchange (`blindjoin_data::join::exchange_counts`): after the PSI, each
//! party sends how many rows each matched key has. This party sends its counts honestly; the
//! fuzz input is the peer's reply. Input: `k u8 | c u8 | messages` — we have `k % 64` matched
//! keys whose counts are 1 (`c` even) or vary (`c` odd).
#![no_main]

use blindjoin_data::join::exchange_counts;
use blindjoin_link::mem_pair;
use fuzz_support::{feed, messages};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let k = usize::from(data[0] % 64);
    let counts: Vec<u32> = (0..k as u32)
        .map(|i| if data[1] & 1 == 0 { 1 } else { 1 + i * 37 })
        .collect();
    let (mut me, mut peer) = mem_pair();
    feed(&mut peer, &messages(&data[2..], 1 << 12));
    if let Ok((theirs, _unmatched)) = exchange_counts(&mut me, &counts, 3) {
        assert_eq!(theirs.len(), counts.len());
        assert!(theirs.iter().all(|&c| c >= 1));
    }
});
