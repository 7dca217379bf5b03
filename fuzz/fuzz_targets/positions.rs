//! The result-positions decoder (`crates/protocols/src/positions.rs`): the receiver's broadcast
//! of which of our items matched. Input: `n u16 LE | mode u8 | rest`. Mode bit 0 picks the
//! direct decoder (rest = `total u16 LE | format u8 | bytes`) or the full receive over the
//! in-memory link (rest = messages, see `fuzz_support::messages`, starting with the head).
#![no_main]

use blindjoin_link::mem_pair;
use blindjoin_protocols::fuzzing::{positions_decode, positions_receive};
use fuzz_support::{feed, messages};
use libfuzzer_sys::fuzz_target;

fn check(out: &[usize], n: usize) {
    assert!(
        out.windows(2).all(|w| w[0] < w[1]),
        "not strictly increasing"
    );
    assert!(out.iter().all(|&p| p < n), "out of range");
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    // Mostly small n (so the bitmap format is reachable), sometimes huge (up to 2^32 - 1).
    let mut n = usize::from(u16::from_le_bytes([data[0], data[1]]));
    let mode = data[2];
    if mode & 2 != 0 {
        n = n.wrapping_mul(65_537) | 0xffff;
    }
    let rest = &data[3..];
    if mode & 1 == 0 {
        if rest.len() < 3 {
            return;
        }
        let total = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        if let Ok(out) = positions_decode(rest[2], &rest[3..], total, n) {
            assert_eq!(out.len(), total);
            check(&out, n);
        }
    } else {
        let (mut me, mut peer) = mem_pair();
        feed(&mut peer, &messages(rest, 1 << 12));
        if let Ok(out) = positions_receive(&mut me, n) {
            check(&out, n);
        }
    }
});
