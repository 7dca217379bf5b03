//! `check_hash_digest` (`blindjoin_data`'s `check_digest`): after each bucket both parties
//! swap a chained hash of the matched keys and stop if they differ. This party sends its digest
//! honestly; the fuzz input is the peer's messages (see `fuzz_support::messages`). Whatever
//! arrives, only the exact digest passes.
#![no_main]

use blindjoin_crypto::item_digest;
use blindjoin_data::fuzzing::check_digest;
use blindjoin_link::mem_pair;
use fuzz_support::{feed, messages};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ours = item_digest(b"blindjoin fuzz check_digest");
    let msgs = messages(data, 1 << 12);
    let (mut me, mut peer) = mem_pair();
    feed(&mut peer, &msgs);
    if check_digest(&mut me, &ours).is_ok() {
        assert_eq!(
            msgs.first().copied(),
            Some(&ours[..]),
            "a wrong digest passed"
        );
    }
});
