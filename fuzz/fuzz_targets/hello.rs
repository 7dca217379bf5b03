//! The session handshake: the fuzz input is the peer's hello message; this party sends its own,
//! decodes the peer's and checks the two agree (the version, the protocol with its curve or mode,
//! what the run reveals, broadcast, the context, the roles). Our hello is chosen by the first
//! input byte so both roles and every protocol are checked against hostile hellos.
#![no_main]

use blindjoin_link::{Link, mem_pair};
use blindjoin_protocols::Role;
use blindjoin_protocols::handshake;
use fuzz_support::target_hellos;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, theirs)) = data.split_first() else {
        return;
    };
    let role = if sel & 1 == 0 {
        Role::Receiver
    } else {
        Role::Sender
    };
    let hellos = target_hellos(role);
    let ours = hellos[usize::from(sel >> 1) % hellos.len()].clone();
    let (mut me, mut peer) = mem_pair();
    let _ = peer.send(theirs);
    if let Ok(hs) = handshake(&mut me, ours.clone()) {
        // Agreement means every checked field is equal and the roles differ.
        assert_eq!(hs.ours(), &ours);
        assert_eq!(hs.theirs().choice, ours.choice);
        assert_eq!(hs.theirs().reveal, ours.reveal);
        assert_eq!(hs.theirs().broadcast_result, ours.broadcast_result);
        assert_eq!(hs.theirs().context, ours.context);
        assert_ne!(hs.theirs().role, ours.role);
    }
});
