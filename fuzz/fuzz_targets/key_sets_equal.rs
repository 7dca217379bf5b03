//! `check_hash_digest` (`blindjoin_data`'s `key_sets_equal`): before the protocol both parties
//! swap their key-set digests masked on Curve25519, then role-bound tags of the peer's point
//! masked again. This party runs honestly; the fuzz input is the peer's messages (see
//! `fuzz_support::messages`): points that are not points or of low order, truncated or oversized
//! messages, wrong ids, our own messages reflected. Without this party's set the peer cannot
//! make it conclude "equal", so no input may return `Ok(true)`; nothing may panic.
#![no_main]

use blindjoin_crypto::item_digest;
use blindjoin_data::fuzzing::key_sets_equal;
use blindjoin_link::mem_pair;
use blindjoin_protocols::Role;
use fuzz_support::{feed, messages};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ours = item_digest(b"blindjoin fuzz key_sets_equal");
    let msgs = messages(data, 1 << 12);
    let (mut me, mut peer) = mem_pair();
    feed(&mut peer, &msgs);
    assert!(
        !matches!(key_sets_equal(&mut me, Role::Receiver, &ours), Ok(true)),
        "a peer without this party's key set passed the equality test"
    );
});
