//! The decoders of a partitioned run's coordination messages: the worker greeting, the worker
//! endpoint table and the retry round (`crates/link/src/worker.rs`), all from the peer's
//! coordinator or workers, and the partition job a worker decodes from its coordinator
//! (`crates/data/src/pipeline/partition_job.rs`, magic then JSON, at most 4 MiB). Input:
//! `sel u8 | message`; `sel` mod 4 picks the decoder.
#![no_main]

use blindjoin_data::fuzzing::partition_job;
use blindjoin_link::wire::WireMessage;
use blindjoin_link::worker::{MAX_PARTITIONS, RetryRound, WorkerGreeting, WorkerTable};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, msg)) = data.split_first() else {
        return;
    };
    match sel % 4 {
        0 => {
            if let Ok(g) = WorkerGreeting::decode(msg) {
                assert!(g.partition < g.partitions && g.partitions <= MAX_PARTITIONS);
            }
        }
        1 => {
            if let Ok(t) = WorkerTable::decode(msg) {
                assert!(!t.ports.is_empty() && t.ports.len() <= MAX_PARTITIONS as usize);
            }
        }
        2 => {
            if let Ok(r) = RetryRound::decode(msg) {
                assert!(r.failed.len() <= MAX_PARTITIONS as usize);
            }
        }
        _ => {
            let _ = partition_job(msg);
        }
    }
});
