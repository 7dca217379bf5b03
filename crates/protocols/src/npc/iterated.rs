//! SecretFlow's n-party PSI (`ECDH_PSI_NPC`, `KKRT_PSI_NPC`): a tree of two-party runs, with
//! SecretFlow's schedule (`nparty_psi.cc`), so the same parties learn the same things.
//!
//! # Schedule
//! The parties are ordered: the receiver first, then the others by ascending set size (ties by
//! index in `link_config.parties`). In each level, with L parties left, the party at position
//! k < ⌊L/2⌋ runs the two-party protocol as receiver with the party at position L − 1 − k as
//! sender, on their *current* sets (at first their inputs, later what earlier levels left them);
//! the middle party of an odd L sits the level out. The senders (positions k ≥ ⌈L/2⌉) then
//! drop out, and every remaining party sends every other remaining party the size of its current
//! set; if any is 0, all stop and the receiver's result is empty. After ⌈log2 n⌉ levels only the
//! receiver is left, holding the n-way intersection.
//!
//! # Leakage (semi-honest)
//! Beyond what each two-party run reveals to its receiver ([`crate::ecdh`], [`crate::kkrt`]):
//! - the front party of each pair learns, **as items**, the intersection of its current set with
//!   its partner's: at level 1 the pairwise intersection of its input with one other party's
//!   input, at later levels intersections of more parties (with 5 parties ordered R, A, B, C, D:
//!   level 1 R learns R ∩ D and A learns A ∩ C, B sits out; level 2 R learns R ∩ D ∩ B, A sits
//!   out; level 3 R learns R ∩ D ∩ B ∩ A ∩ C);
//! - every party learns every party's set size (the first exchange), and after each level every
//!   remaining party learns the size of every remaining party's current set (|A ∩ C| to R and B
//!   in the example);
//! - the senders of a level learn the size of their partner's current set.
//!
//! [`super::zero_share`] reveals only the final intersection to the receiver.

use super::{Links, blame};
use crate::ecdh::expect_type;
use crate::{
    Hello, ItemDigest, Progress, ProtocolChoice, ProtocolError, PsiOptions, Role, handshake,
    run_psi,
};
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{Reader, put_u64};

const MSG_SIZE: u8 = wire::byte(ids::NPC_SIZE);

/// SecretFlow's party order: the receiver, then the others by (size, index).
pub fn schedule_order(sizes: &[u64], receiver: usize) -> Vec<usize> {
    let mut rest: Vec<usize> = (0..sizes.len()).filter(|&j| j != receiver).collect();
    rest.sort_by_key(|&j| (sizes[j], j));
    let mut order = vec![receiver];
    order.extend(rest);
    order
}

/// Our partner in a level with `order` still in play: `Some((peer, we_receive))`, or `None`
/// when we sit the level out.
pub fn partner(order: &[usize], me: usize) -> Option<(usize, bool)> {
    let l = order.len();
    let k = order.iter().position(|&p| p == me)?;
    if l % 2 == 1 && k == l / 2 {
        return None;
    }
    let peer = order[l - 1 - k];
    Some((peer, k < l / 2))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    links: &mut Links<'_>,
    me: usize,
    receiver: usize,
    choice: ProtocolChoice,
    context: [u8; 16],
    sizes: &[u64],
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<Option<Vec<usize>>, ProtocolError> {
    let mut order = schedule_order(sizes, receiver);
    // Our current set, as indices into `items`.
    let mut current: Vec<usize> = (0..items.len()).collect();
    let mut level = 0u32;
    while order.len() > 1 {
        if let Some((peer, we_receive)) = partner(&order, me) {
            let link = links
                .get_mut(peer)
                .and_then(|l| l.as_deref_mut())
                .ok_or(ProtocolError::Unreachable("no link to a scheduled peer"))?;
            let role = if we_receive {
                Role::Receiver
            } else {
                Role::Sender
            };
            let level_context = blindjoin_crypto::item_digest(
                [&context[..], &level.to_le_bytes()].concat().as_slice(),
            );
            let hello =
                Hello::new(choice, role, false, current.len() as u64).with_context(level_context);
            let hs = handshake(link, hello).map_err(|e| blame(link, e))?;
            let sub: Vec<ItemDigest> = current.iter().map(|&i| items[i]).collect();
            let out = run_psi(link, &hs, opts, &sub, progress).map_err(|e| blame(link, e))?;
            if !we_receive {
                // Senders drop out after their run.
                return Ok(None);
            }
            let kept = out.intersection.ok_or(ProtocolError::Unreachable(
                "a two-party receiver learns the result",
            ))?;
            current = kept.into_iter().map(|i| current[i]).collect();
        }
        order.truncate(order.len().div_ceil(2));
        level += 1;

        // Everyone left learns everyone left's current size; an empty one ends the run.
        let mut msg = vec![MSG_SIZE];
        put_u64(&mut msg, current.len() as u64);
        let others: Vec<usize> = order.iter().copied().filter(|&p| p != me).collect();
        for &p in &others {
            if let Some(l) = links.get_mut(p).and_then(|l| l.as_deref_mut()) {
                l.send(&msg)?;
            }
        }
        let mut any_empty = current.is_empty();
        for &p in &others {
            let l = links
                .get_mut(p)
                .and_then(|l| l.as_deref_mut())
                .ok_or(ProtocolError::Unreachable("no link to a remaining party"))?;
            let got = l.recv()?;
            let mut r = Reader::new(&got, "n-party current size");
            expect_type(&mut r, MSG_SIZE).map_err(|e| blame(l, e))?;
            let n = r.u64()?;
            r.finish()?;
            if n > sizes[p] {
                return Err(blame(
                    l,
                    ProtocolError::PeerMisbehaved(format!(
                        "announced a current set of {n} keys, more than its {} inputs",
                        sizes[p]
                    )),
                ));
            }
            any_empty |= n == 0;
        }
        if any_empty {
            current.clear();
            break;
        }
    }
    Ok((me == receiver).then_some(current))
}
