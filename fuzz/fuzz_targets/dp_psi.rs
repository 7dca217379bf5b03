//! Whole-protocol target for DP-PSI (`crates/protocols/src/dp_psi.rs`): this party runs DP-PSI
//! honestly as Bob (the receiver) or Alice while the fuzz input is every message the peer sends
//! after a valid hello: the sub-sample size, masked points, tags and result positions. Input:
//! `sel u8 | ours u8 | theirs u8 | messages`; `sel` bit 0 picks our role, bit 1 the sub-sampling
//! (1 or 0.9).
#![no_main]

use blindjoin_link::mem_pair;
use blindjoin_protocols::dp_psi::{self, DpParams};
use blindjoin_protocols::fuzzing::hello_encode;
use blindjoin_protocols::{
    Curve, Hello, NoProgress, ProtocolChoice, PsiOptions, PsiOutput, Role, handshake,
};
use fuzz_support::{feed, items, messages};
use libfuzzer_sys::fuzz_target;

const CURVE: Curve = Curve::Curve25519;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (role, peer_role) = if data[0] & 1 == 0 {
        (Role::Receiver, Role::Sender)
    } else {
        (Role::Sender, Role::Receiver)
    };
    let params = DpParams {
        bob_sub_sampling: if data[0] & 2 == 0 { 1.0 } else { 0.9 },
        epsilon: 3.0,
    };
    let ours = items("ours", usize::from(data[1] % 32));
    let theirs = u64::from(data[2] % 32);
    let choice = ProtocolChoice::Ecdh { curve: CURVE };
    let hello = |role, n| Hello::new(choice, role, false, n).with_context(params.context());
    let peer_hello = hello_encode(&hello(peer_role, theirs));
    let mut msgs = vec![peer_hello.as_slice()];
    msgs.extend(messages(&data[3..], 1 << 12));
    let (mut me, mut peer) = mem_pair();
    feed(&mut peer, &msgs);
    let Ok(hs) = handshake(&mut me, hello(role, ours.len() as u64)) else {
        return;
    };
    let opts = PsiOptions {
        batch_size: 4,
        ..PsiOptions::default()
    };
    if let Ok(PsiOutput {
        intersection: Some(idx),
        ..
    }) = dp_psi::run(&mut me, &hs, CURVE, params, &opts, &ours, &NoProgress)
    {
        assert_eq!(role, Role::Receiver, "Alice learns no items");
        assert!(idx.windows(2).all(|w| w[0] < w[1]), "unsorted {idx:?}");
        assert!(idx.iter().all(|&i| i < ours.len()), "out of range {idx:?}");
    }
    drop(peer);
});
