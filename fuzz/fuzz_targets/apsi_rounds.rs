//! The labeled-PSI sender's decoder of the receiver's round plan (`APSI_ROUNDS`, decoded by
//! hand in `crates/data/src/apsi/run.rs`): bucket count, query count, one bucket index per
//! query. A plan that is accepted names only buckets of ours, in order. Input: `b u8 | message`;
//! this sender has `b + 1` buckets.
#![no_main]

use blindjoin_data::fuzzing::apsi_rounds;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&b, msg)) = data.split_first() else {
        return;
    };
    let buckets = usize::from(b) + 1;
    if let Ok(plan) = apsi_rounds(msg, buckets) {
        assert!(plan.iter().all(|&k| k < buckets), "bucket out of range");
        assert!(plan.windows(2).all(|w| w[0] <= w[1]), "out of order");
        assert!(8 + 4 * plan.len() < msg.len(), "more queries than bytes");
    }
});
