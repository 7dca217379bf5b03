//! The session handshake: the fuzz input is the peer's hello message; this party sends its own,
//! decodes the peer's and checks the two agree (every field, the roles, the protocol and curve
//! names). Our hello is chosen by the first input byte so both roles and every protocol are
//! checked against hostile hellos.
#![no_main]

use blindjoin_link::{Link, mem_pair};
use blindjoin_protocols::{Curve, Hello, Protocol, Role, handshake};
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
    let ours = match (sel >> 1) % 3 {
        0 => Hello::new(
            Protocol::Ecdh,
            Some(Curve::Curve25519),
            role,
            1,
            "INNER",
            true,
            10,
        ),
        1 => Hello::new(Protocol::Rr22, None, role, 2, "LEFT", false, 0).with_variant("fast"),
        _ => Hello::new(Protocol::Kkrt, None, role, 1, "INNER", true, 7).with_bucket_size(1 << 20),
    };
    let (mut me, mut peer) = mem_pair();
    let _ = peer.send(theirs);
    if let Ok(hs) = handshake(&mut me, ours.clone()) {
        // Agreement means every checked field is equal and the roles differ.
        assert_eq!(hs.ours, ours);
        assert_eq!(hs.theirs.protocol, ours.protocol);
        assert_eq!(hs.theirs.curve, ours.curve);
        assert_eq!(hs.theirs.variant, ours.variant);
        assert_eq!(hs.theirs.bucket_size, ours.bucket_size);
        assert_ne!(hs.theirs.role, ours.role);
    }
});
