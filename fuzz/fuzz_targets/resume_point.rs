//! The resume handshake of a run restarted from its recovery folder (`blindjoin_data`'s
//! `Checkpoint::agree`): each party sends the bucket its checkpoint reached and both resume from
//! the smaller. This party sends its point honestly; the fuzz input is the peer's. Input:
//! `cb u8 | cur u8 | prev u8 | b u8 | messages`: the checkpoint was made with `cb mod 8`
//! buckets (0: none agreed yet), its last state finished `cur − 1` buckets and the one before
//! `prev − 1` (0: no such state), and this run has `b mod 8` buckets.
#![no_main]

use blindjoin_data::fuzzing::resume_point;
use blindjoin_link::mem_pair;
use fuzz_support::{feed, messages};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let state = |b: u8| b.checked_sub(1).map(|d| usize::from(d % 8));
    let (current, previous) = (state(data[1]), state(data[2]));
    let (mut me, mut peer) = mem_pair();
    feed(&mut peer, &messages(&data[4..], 1 << 12));
    let got = resume_point(
        &mut me,
        usize::from(data[0] % 8),
        current,
        previous,
        usize::from(data[3] % 8),
    );
    if let Ok(done) = got {
        // Never past our own point, and always a state we hold (or the start).
        assert!(done <= current.unwrap_or(0), "resumed past our checkpoint");
        assert!(
            done == 0 || Some(done) == current || Some(done) == previous,
            "resumed at a state we do not hold"
        );
    }
});
