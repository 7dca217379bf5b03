//! ECDH-PSI — Meadows (IEEE S&P 1986); Huberman, Franklin and Hogg (EC 1999), "Enhancing privacy
//! and trust in electronic communities", §3. Model: semi-honest. Security: DDH in the random-oracle
//! model, with an RFC 9380 hash-to-curve (see `blindjoin_crypto`).
//!
//! Receiver R holds X and secret `a`; sender S holds Y and secret `b`:
//! 1. R sends `H(x)^a` for x ∈ X in its own order; S sends `H(y)^b` for y ∈ Y in a secret random
//!    order (so R cannot relate positions to S's input).
//! 2. S raises each `H(x)^a` to `b` and returns the tag `T(H(x)^ab)` in R's order.
//! 3. R raises each `H(y)^b` to `a`, computes `T(H(y)^ba)`, and marks its own x whose tag is among
//!    them. With `broadcast_result`, R then sends S the (shuffled) positions of the matching `H(y)^b`.
//!
//! `T` is a hash of the point truncated to ℓ = max(64, λ + ⌈log2(n_R·n_S)⌉) bits, λ = 40, so the
//! expected number of false matches is at most 2^-40.
//!
//! Leakage: R learns X ∩ Y and |Y|; S learns |X| (and X ∩ Y with `broadcast_result`).
//! Cost per item, each party: one hash-to-curve, two variable-base scalar multiplications.
//! Communication: (|pt|)·(n_R + n_S) + ℓ/8·n_R bytes, plus 4 bytes per match if broadcast.

use crate::shuffle::random_permutation;
use crate::{
    Curve, HandshakeChecked, ItemDigest, Progress, ProtocolError, PsiOptions, PsiOutput, Reveal,
    Role,
};
use blindjoin_crypto::{EcdhCipher, new_cipher, tag_of};
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{Link, Reader, put_u32};
use rayon::prelude::*;

/// Statistical security parameter λ.
const STAT_SEC: u32 = 40;

pub(crate) const MSG_POINTS: u8 = wire::byte(ids::ECDH_POINTS);
pub(crate) const MSG_TAGS: u8 = wire::byte(ids::ECDH_TAGS);

/// Batches processed in parallel per step: enough to keep every core busy.
fn batches_in_flight() -> usize {
    rayon::current_num_threads().max(1) * 4
}

/// Match-tag length in bytes: ⌈(λ + ⌈log2(n_r·n_s)⌉)/8⌉, at least 8, at most 16.
pub fn tag_len(n_r: u64, n_s: u64) -> usize {
    tag_len_with(n_r, n_s, 0)
}

/// [`tag_len`] with `extra` more bits of statistical security (bucketed runs).
pub fn tag_len_with(n_r: u64, n_s: u64, extra: u32) -> usize {
    let product = (n_r.max(1) as u128) * (n_s.max(1) as u128);
    let log = 128 - (product.saturating_sub(1)).leading_zeros();
    (((STAT_SEC + extra.min(24) + log).div_ceil(8)) as usize).clamp(8, 16)
}

/// Runs ECDH-PSI after a successful handshake.
pub(crate) fn run(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    curve: Curve,
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<PsiOutput, ProtocolError> {
    let cipher = new_cipher(curve, opts.secret_key.as_ref().map(|k| k.as_slice()))?;
    let (n_r, n_s) = crate::sizes_within(hs, u64::from(u32::MAX), "ECDH-PSI", "")?;
    let ctx = Ctx {
        cipher: &*cipher,
        batch: opts.batch_size,
        tag_len: tag_len_with(n_r, n_s, opts.extra_stat_bits),
        progress,
    };
    let broadcast = hs.broadcast_result();
    match (hs.role(), opts.reveal) {
        (Role::Receiver, Reveal::Intersection) => {
            receiver(link, &ctx, items, n_s as usize, broadcast)
        }
        (Role::Sender, Reveal::Intersection) => sender(link, &ctx, items, n_r as usize, broadcast),
        (Role::Receiver, reveal) => {
            crate::ecdh_shuffled::receiver(link, &ctx, items, n_s as usize, broadcast, reveal)
        }
        (Role::Sender, reveal) => {
            crate::ecdh_shuffled::sender(link, &ctx, items, n_r as usize, broadcast, reveal)
        }
    }
}

pub(crate) struct Ctx<'a> {
    pub(crate) cipher: &'a dyn EcdhCipher,
    pub(crate) batch: usize,
    pub(crate) tag_len: usize,
    pub(crate) progress: &'a dyn Progress,
}

fn receiver(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
    n_s: usize,
    broadcast: bool,
) -> Result<PsiOutput, ProtocolError> {
    // Step 1: our masked items, in our order.
    let order: Vec<usize> = (0..items.len()).collect();
    send_masked(link, ctx, items, &order)?;

    // Step 3a: the peer's masked items, raised to our key, as (tag, peer position), sorted.
    let peer_tags = peer_tags(link, ctx, n_s)?;

    // Step 3b: tags of our items, in our order, from the peer; look each up.
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    receive_tags(link, ctx, items.len(), |i, tag| {
        let matches = matching(&peer_tags, tag);
        if !matches.is_empty() {
            ours.push(i);
            theirs.extend(matches.iter().map(|&(_, pos)| pos));
        }
    })?;

    if broadcast {
        theirs.sort_unstable();
        theirs.dedup();
        crate::positions::send(link, &theirs, n_s)?;
    }
    Ok(PsiOutput::intersection(Some(ours)))
}

fn sender(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
    n_r: usize,
    broadcast: bool,
) -> Result<PsiOutput, ProtocolError> {
    // Step 1: our masked items, in a secret random order.
    let order = random_permutation(items.len())?;
    send_masked(link, ctx, items, &order)?;

    // Step 2: the receiver's masked items, raised to our key, returned as tags in its order.
    ctx.progress
        .stage("ECDH: masking the peer's items", n_r as u64);
    let (n, tag_len) = (ctx.cipher.point_len(), ctx.tag_len);
    let mut received = 0;
    while let Some((_, remasked)) = receive_group(link, ctx, n_r, &mut received)? {
        // One tag message per received batch, so the receiver sees our batching mirrored.
        for out in remasked {
            link.send(&tag_message(&tag_bytes(&out, n, tag_len), tag_len))?;
        }
    }

    if !broadcast {
        return Ok(PsiOutput::intersection(None));
    }
    let positions = crate::positions::receive(link, items.len())?;
    let mut mine: Vec<usize> = positions.into_iter().map(|p| order[p]).collect();
    mine.sort_unstable();
    Ok(PsiOutput::intersection(Some(mine)))
}

/// The peer's masked items raised to our key, as `(tag, peer position)` sorted by tag.
pub(crate) fn peer_tags(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    n_s: usize,
) -> Result<Vec<(u128, u32)>, ProtocolError> {
    ctx.progress
        .stage("ECDH: masking the peer's items", n_s as u64);
    let n = ctx.cipher.point_len();
    // Grows with what actually arrives: the peer-announced count only caps it.
    let mut peer_tags: Vec<(u128, u32)> = Vec::with_capacity(n_s.min(1 << 16));
    let mut received = 0;
    while let Some((first, remasked)) = receive_group(link, ctx, n_s, &mut received)? {
        let all = remasked.iter().flat_map(|out| out.chunks_exact(n));
        peer_tags.extend(
            all.enumerate()
                .map(|(i, p)| (tag_of(p, ctx.tag_len), (first + i) as u32)),
        );
    }
    peer_tags.par_sort_unstable();
    Ok(peer_tags)
}

/// The entries of sorted `peer_tags` with tag `tag` (empty when none).
pub(crate) fn matching(peer_tags: &[(u128, u32)], tag: u128) -> &[(u128, u32)] {
    let lo = peer_tags.partition_point(|&(pt, _)| pt < tag);
    let len = peer_tags[lo..].partition_point(|&(pt, _)| pt == tag);
    &peer_tags[lo..lo + len]
}

/// Receives `total` match tags in batches and calls `f(position, tag)` for each, in order.
pub(crate) fn receive_tags(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    total: usize,
    mut f: impl FnMut(usize, u128),
) -> Result<(), ProtocolError> {
    ctx.progress.stage("ECDH: matching", total as u64);
    let mut next = 0usize;
    while next < total {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "tags");
        expect_type(&mut r, MSG_TAGS)?;
        let (count, bytes) = r.records(ctx.tag_len, total - next)?;
        r.finish()?;
        if count == 0 {
            return Err(ProtocolError::PeerMisbehaved("empty tag batch".into()));
        }
        for (i, t) in bytes.chunks_exact(ctx.tag_len).enumerate() {
            let mut b = [0u8; 16];
            b[..ctx.tag_len].copy_from_slice(t);
            f(next + i, u128::from_be_bytes(b));
        }
        next += count;
        ctx.progress.advance(count as u64);
    }
    Ok(())
}

/// The `tag_len`-byte tags of the `n`-byte points in `points`, concatenated.
pub(crate) fn tag_bytes(points: &[u8], n: usize, tag_len: usize) -> Vec<u8> {
    let mut tags = Vec::with_capacity(points.len() / n * tag_len);
    for p in points.chunks_exact(n) {
        tags.extend_from_slice(&tag_of(p, tag_len).to_be_bytes()[..tag_len]);
    }
    tags
}

/// One tag message: `tags` (each `tag_len` bytes), after the type and count.
pub(crate) fn tag_message(tags: &[u8], tag_len: usize) -> Vec<u8> {
    let mut msg = Vec::with_capacity(5 + tags.len());
    msg.push(MSG_TAGS);
    put_u32(&mut msg, (tags.len() / tag_len) as u32);
    msg.extend_from_slice(tags);
    msg
}

pub(crate) fn expect_type(r: &mut Reader<'_>, want: u8) -> Result<(), ProtocolError> {
    let got = r.u8()?;
    if got == want {
        Ok(())
    } else {
        Err(ProtocolError::PeerMisbehaved(format!(
            "expected message type {want}, got {got}"
        )))
    }
}

/// Sends `H(items[order[i]])^k` for all i, in batches, computing several batches in parallel.
pub(crate) fn send_masked(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
    order: &[usize],
) -> Result<(), ProtocolError> {
    ctx.progress
        .stage("ECDH: masking own items", items.len() as u64);
    let n = ctx.cipher.point_len();
    for group in order.chunks(ctx.batch * batches_in_flight()) {
        let msgs = group
            .par_chunks(ctx.batch)
            .map(|idx| {
                let batch: Vec<ItemDigest> = idx.iter().map(|&i| items[i]).collect();
                let mut msg = vec![0u8; 5 + batch.len() * n];
                msg[0] = MSG_POINTS;
                msg[1..5].copy_from_slice(&(batch.len() as u32).to_le_bytes());
                ctx.cipher.hash_and_mask(&batch, &mut msg[5..])?;
                Ok(msg)
            })
            .collect::<Result<Vec<_>, ProtocolError>>()?;
        for msg in msgs {
            link.send(&msg)?;
            ctx.progress.advance(((msg.len() - 5) / n) as u64);
        }
    }
    Ok(())
}

/// The index of a group's first point, and each of its batches re-masked.
pub(crate) type RemaskedGroup = (usize, Vec<Vec<u8>>);

/// Receives the next group of peer point batches (up to [`batches_in_flight`]) out of `total`,
/// re-masks them in parallel, and returns the index of the group's first point with the re-masked
/// bytes of each batch; `None` once `total` points have arrived.
pub(crate) fn receive_group(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    total: usize,
    received: &mut usize,
) -> Result<Option<RemaskedGroup>, ProtocolError> {
    let n = ctx.cipher.point_len();
    let first = *received;
    let mut group: Vec<Vec<u8>> = Vec::new();
    while *received < total && group.len() < batches_in_flight() {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "masked points");
        expect_type(&mut r, MSG_POINTS)?;
        let (count, _) = r.records(n, total - *received)?;
        r.finish()?;
        if count == 0 {
            return Err(ProtocolError::PeerMisbehaved("empty point batch".into()));
        }
        *received += count;
        group.push(msg);
    }
    if group.is_empty() {
        return Ok(None);
    }
    let remasked = group
        .par_iter()
        .map(|msg| {
            let points = msg.get(5..).unwrap_or_default();
            let mut out = vec![0u8; points.len()];
            ctx.cipher.remask(points, &mut out)?;
            Ok(out)
        })
        .collect::<Result<Vec<_>, ProtocolError>>()?;
    ctx.progress.advance((*received - first) as u64);
    Ok(Some((first, remasked)))
}
