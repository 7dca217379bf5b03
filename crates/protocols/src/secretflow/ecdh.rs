//! `PROTOCOL_ECDH` as psi runs it (`psi/algorithm/ecdh/ecdh_psi.cc`@242a8fa), for one party
//! against a SecretFlow party on its link:
//!
//! 1. **Sanity** (`ECDHPSI:SANITY`): AllGather `target_rank=<t>,curve=<n>`; they must be equal.
//! 2. Three flows at once, as psi's three threads:
//!    * **MaskSelf**: our items as `encode(a·H(x))`, batches of [`BATCH_ITEMS`] of type `enc`
//!      on the main context, with our duplicate counts when the peer learns the result; then
//!      the end batch;
//!    * **MaskPeer**: the peer's batches, each point raised to our key and cut to its last 12
//!      bytes, kept (with the peer's duplicate counts) if we learn the result, sent back as
//!      `dual.enc` on the spawned dual-mask context if the peer does;
//!    * **RecvDualMaskedSelf**: if we learn the result, our own points masked by the peer, in
//!      our order.
//! 3. Our item `i` is in the intersection when its doubly masked tail is among the peer's.
//!
//! `target` is who learns the result: the receiver's rank, or both (`broadcast_result`). No
//! plaintext ever crosses; each party learns the other's set size, and a party that learns the
//! result also learns the peer's extra-copy count for each shared item (which a join needs).

use super::batch::Batch;
use crate::ProtocolError;
use blindjoin_crypto::secretflow::{COMPARE_BYTES, SfCipher, SfCurve, compare_tail};
use blindjoin_link::secretflow::Context;
use std::collections::HashMap;

/// Items per batch: psi's key provider's `kBatchSize` (`psi/utils/table_utils.h`); the
/// config's `ecdh_config.batch_size` is only compared, never used on the wire.
pub const BATCH_ITEMS: usize = 1 << 16;

/// Most items we accept from the peer in all (a bound on the memory its claims can cost):
/// 2^32, SecretFlow's own index width.
pub const MAX_PEER_ITEMS: u64 = 1 << 32;

/// Who learns the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Only the party of this rank (the receiver).
    Rank(usize),
    /// Both (`broadcast_result`); psi's `yacl::link::kAllRank`.
    All,
}

impl Target {
    fn sanity(self) -> String {
        match self {
            Target::Rank(r) => r.to_string(),
            Target::All => u64::MAX.to_string(),
        }
    }

    fn includes(self, rank: usize) -> bool {
        match self {
            Target::All => true,
            Target::Rank(r) => r == rank,
        }
    }
}

/// One shared item, from our side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    /// Index of the item in our list.
    pub index: u32,
    /// The peer's extra copies of it (0 when it is unique there, or when the peer did not say).
    pub peer_extra: u32,
}

/// What the run found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EcdhOutcome {
    /// Our items in the intersection, by index (empty if we do not learn the result).
    pub matched: Vec<Match>,
    /// How many (unique) items the peer sent.
    pub peer_items: u64,
}

/// Runs the protocol on `ctx` (which must have carried no P2P message yet) for our unique
/// `items`, of which `extra[i]` more copies exist in our table.
///
/// # Errors
/// Link failures; a peer whose sanity string differs ([`ProtocolError::Mismatch`]), whose
/// batches are malformed or out of order, or whose points are invalid.
pub fn run<T: AsRef<[u8]> + Sync>(
    ctx: &mut Context,
    curve: SfCurve,
    target: Target,
    items: &[T],
    extra: &[u32],
) -> Result<EcdhOutcome, ProtocolError> {
    if extra.len() != items.len() {
        return Err(ProtocolError::Config(format!(
            "{} duplicate counts for {} items",
            extra.len(),
            items.len()
        )));
    }
    let mine = format!(
        "target_rank={},curve={}",
        target.sanity(),
        curve.sanity_value()
    );
    let both = ctx.all_gather(mine.as_bytes())?;
    let theirs = &both[ctx.peer_rank()];
    if theirs.as_slice() != mine.as_bytes() {
        return Err(ProtocolError::Mismatch {
            field: "protocol_config.broadcast_result / receiver / ecdh_config.curve (ECDH sanity check)",
            ours: mine,
            theirs: String::from_utf8_lossy(theirs).into_owned(),
            our_role: format!("rank {}", ctx.rank()),
            their_role: format!("rank {}", ctx.peer_rank()),
        });
    }
    let dual = ctx.spawn();
    let cipher = SfCipher::new(curve)?;
    let (me, peer) = (ctx.rank(), ctx.peer_rank());
    let self_learns = target.includes(me);
    let peer_learns = target.includes(peer);
    let main: &Context = ctx;
    let dual = &dual;
    let cipher = &cipher;

    let (sent, peer_side, own) = std::thread::scope(|s| {
        let sender = s.spawn(move || mask_self(main, cipher, items, extra, peer_learns));
        let masker = s.spawn(move || mask_peer(main, dual, cipher, self_learns, peer_learns));
        let own = if self_learns {
            recv_dual_self(dual, items.len())
        } else {
            Ok(Vec::new())
        };
        let panicked = || ProtocolError::Unreachable("an ECDH thread panicked");
        (
            sender.join().unwrap_or_else(|_| Err(panicked())),
            masker.join().unwrap_or_else(|_| Err(panicked())),
            own,
        )
    });
    // The first error in psi's order: MaskSelf, MaskPeer, RecvDualMaskedSelf.
    sent?;
    let (peer_tails, peer_items) = peer_side?;
    let own = own?;
    let mut matched = Vec::new();
    if self_learns {
        for (i, t) in own.iter().enumerate() {
            if let Some(&e) = peer_tails.get(t) {
                matched.push(Match {
                    index: i as u32,
                    peer_extra: e,
                });
            }
        }
    }
    Ok(EcdhOutcome {
        matched,
        peer_items,
    })
}

fn mask_self<T: AsRef<[u8]> + Sync>(
    ctx: &Context,
    cipher: &SfCipher,
    items: &[T],
    extra: &[u32],
    with_counts: bool,
) -> Result<(), ProtocolError> {
    let (me, peer) = (ctx.rank(), ctx.peer_rank());
    let width = cipher.point_len();
    let mut n = 0u64;
    for (b, (chunk, ex)) in items
        .chunks(BATCH_ITEMS)
        .zip(extra.chunks(BATCH_ITEMS))
        .enumerate()
    {
        let mut batch = Batch::items(cipher.hash_and_mask(chunk)?, width, b as u32, "enc");
        if with_counts {
            batch.duplicates = ex
                .iter()
                .enumerate()
                .filter(|(_, e)| **e > 0)
                .map(|(i, e)| (i as u32, *e))
                .collect();
        }
        n += 1;
        ctx.send_key(&ctx.p2p_key(n, me, peer), &batch.encode())?;
    }
    n += 1;
    let end = Batch::end((n - 1) as u32, "enc");
    ctx.send_key(&ctx.p2p_key(n, me, peer), &end.encode())?;
    Ok(())
}

type PeerTails = HashMap<[u8; COMPARE_BYTES], u32>;

fn mask_peer(
    main: &Context,
    dual: &Context,
    cipher: &SfCipher,
    keep: bool,
    send_back: bool,
) -> Result<(PeerTails, u64), ProtocolError> {
    let (me, peer) = (main.rank(), main.peer_rank());
    let width = cipher.point_len();
    let mut tails = PeerTails::new();
    let mut total = 0u64;
    for b in 0u32.. {
        let n = u64::from(b) + 1;
        let msg = main.recv_key(&main.p2p_key(n, peer, me))?;
        let batch = Batch::decode(&msg, width)?;
        check_index(&batch, b, "enc")?;
        let last = batch.item_num == 0;
        total += u64::from(batch.item_num);
        if total > MAX_PEER_ITEMS {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "the SecretFlow peer sent more than {MAX_PEER_ITEMS} items"
            )));
        }
        let mut masked = vec![0u8; batch.flatten.len()];
        cipher.remask(&batch.flatten, &mut masked)?;
        let mut back = Vec::with_capacity(batch.item_num as usize * COMPARE_BYTES);
        let mut dups = batch.duplicates.iter().peekable();
        for (i, p) in masked.chunks_exact(width).enumerate() {
            let t = compare_tail(p);
            if keep {
                let e = match dups.peek() {
                    Some(&&(j, e)) if j as usize == i => {
                        dups.next();
                        e
                    }
                    _ => 0,
                };
                tails.insert(t, e);
            }
            back.extend_from_slice(&t);
        }
        if send_back {
            let reply = if last {
                Batch::end(b, "dual.enc")
            } else {
                Batch::items(back, COMPARE_BYTES, b, "dual.enc")
            };
            dual.send_key(&dual.p2p_key(n, me, peer), &reply.encode())?;
        }
        if last {
            break;
        }
    }
    Ok((tails, total))
}

fn recv_dual_self(
    dual: &Context,
    expected: usize,
) -> Result<Vec<[u8; COMPARE_BYTES]>, ProtocolError> {
    let (me, peer) = (dual.rank(), dual.peer_rank());
    let mut own = Vec::with_capacity(expected);
    for b in 0u32.. {
        let msg = dual.recv_key(&dual.p2p_key(u64::from(b) + 1, peer, me))?;
        let batch = Batch::decode(&msg, COMPARE_BYTES)?;
        check_index(&batch, b, "dual.enc")?;
        if batch.item_num == 0 {
            break;
        }
        if own.len() + batch.item_num as usize > expected {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "the SecretFlow peer returned more than our {expected} masked items"
            )));
        }
        for t in batch.flatten.chunks_exact(COMPARE_BYTES) {
            own.push(compare_tail(t));
        }
    }
    if own.len() != expected {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "the SecretFlow peer returned {} of our {expected} masked items",
            own.len()
        )));
    }
    Ok(own)
}

fn check_index(batch: &Batch, want: u32, kind: &str) -> Result<(), ProtocolError> {
    if batch.index != want {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "expected {kind} batch {want}, got batch {}",
            batch.index
        )));
    }
    Ok(())
}
