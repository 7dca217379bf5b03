//! `blindjoin.check_intersection_digest` (`blindjoin_data`'s `check_digest`): after the last
//! bucket both parties
//! swap a Diffie–Hellman share, then a digest of the matched keys keyed by the shared secret,
//! and stop if they differ. This party runs honestly; the fuzz input is the peer's messages (see
//! `fuzz_support::messages`): shares that are not points, truncated or oversized messages, wrong
//! ids. A peer that does not know this party's ephemeral secret cannot produce the right tag, so
//! no input may pass.
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
    assert!(
        check_digest(&mut me, &ours).is_err(),
        "a peer without the shared key passed the digest check"
    );
});
