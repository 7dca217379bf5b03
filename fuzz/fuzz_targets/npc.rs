//! Whole-protocol target for n-party PSI (`crates/protocols/src/npc.rs`, `run_npc`): this party
//! is one of three, running honestly (the receiver or a helper; the leak-free zero-share
//! protocol or SecretFlow's iterated tree of ECDH runs) while the fuzz input is every message
//! both other parties send, hellos included. Input: `sel u8 | ours u8 | messages`; `sel` picks
//! our index (mod 3), the receiver's (÷3 mod 3) and the variant (bit 7); the first byte of each
//! message picks the party it comes from (bit 0), the rest is the message.
#![no_main]

use blindjoin_link::{Link, MemLink, mem_pair};
use blindjoin_protocols::npc::{NpcVariant, run_npc};
use blindjoin_protocols::{Curve, NoProgress, ProtocolChoice, PsiOptions};
use fuzz_support::{feed, items, messages};
use libfuzzer_sys::fuzz_target;

const PARTIES: usize = 3;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let sel = data[0];
    let me = usize::from(sel) % PARTIES;
    let receiver = usize::from(sel / 3) % PARTIES;
    let variant = if sel & 0x80 == 0 {
        NpcVariant::ZeroShare(Curve::Ristretto255)
    } else {
        NpcVariant::Iterated(ProtocolChoice::Ecdh {
            curve: Curve::Curve25519,
        })
    };
    let ours = items("ours", usize::from(data[1] % 16));
    // Each other party's messages, in the order they arrive from it.
    let mut from: [Vec<&[u8]>; 2] = [Vec::new(), Vec::new()];
    for m in messages(&data[2..], 1 << 12) {
        if let Some((&who, body)) = m.split_first() {
            from[usize::from(who & 1)].push(body);
        }
    }
    let mut peers = Vec::new();
    let mut ends = Vec::new();
    for msgs in &from {
        let (end, mut peer) = mem_pair();
        feed(&mut peer, msgs);
        peers.push(peer);
        ends.push(end);
    }
    // Slot `me` is empty; the two others take our ends in order.
    let mut ends = ends.into_iter();
    let mut owned: Vec<Option<MemLink>> = (0..PARTIES)
        .map(|j| if j == me { None } else { ends.next() })
        .collect();
    let mut links: Vec<Option<&mut dyn Link>> = owned
        .iter_mut()
        .map(|l| l.as_mut().map(|l| l as &mut dyn Link))
        .collect();
    let opts = PsiOptions {
        batch_size: 4,
        ..PsiOptions::default()
    };
    if let Ok(out) = run_npc(
        &mut links,
        me,
        receiver,
        variant,
        [0u8; 16],
        &opts,
        &ours,
        &NoProgress,
    ) {
        if let Some(idx) = out.intersection {
            assert!(idx.windows(2).all(|w| w[0] < w[1]), "unsorted {idx:?}");
            assert!(idx.iter().all(|&i| i < ours.len()), "out of range {idx:?}");
        }
        assert_eq!(out.sizes.len(), PARTIES);
    }
    drop(peers);
});
