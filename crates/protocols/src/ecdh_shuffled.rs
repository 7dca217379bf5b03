//! ECDH-PSI that reveals only the size of the intersection (PSI-CA), or its size and at most `c`
//! of its items (threshold PSI). The cardinality part is the shuffled Diffie–Hellman construction
//! of De Cristofaro, Gasti and Tsudik, "Fast and Private Computation of Cardinality of Set
//! Intersection and Union" (CANS 2012), §4; the threshold part follows SecretFlow's threshold
//! ECDH-PSI (its `intersection_threshold`), steps 5–7. Model: semi-honest, DDH in the ROM.
//!
//! Receiver R holds X and key `a`; sender S holds Y and key `b`:
//! 1. R sends `H(x)^a` in a secret random order σ; S sends `H(y)^b` in a secret random order.
//! 2. S raises every `H(x)^a` to `b` and, only once all have arrived, returns their tags in a
//!    fresh secret random order π — so R cannot tell which of its items a tag belongs to.
//! 3. R counts the returned tags that are among the tags of `H(y)^ba`: that is |X ∩ Y|. With
//!    `broadcast_result` R sends S the count.
//! 4. Threshold with cap `c`: R sends the π-positions of the first `min(c, |X ∩ Y|)` matching
//!    tags (the first in a uniformly random order, so a random subset). S refuses more than `c`,
//!    maps them through π to R's send positions and returns those; R maps them through σ to its
//!    items. With `broadcast_result` R then sends S the positions of the same matches in S's
//!    order, as plain ECDH-PSI does.
//!
//! Leakage: R learns |X ∩ Y| and |Y| (and the revealed items); S learns |X|, how many items were
//! revealed, and with `broadcast_result` |X ∩ Y| and the revealed items. The σ-positions S sees
//! are positions in R's secret random order: they say nothing about R's items.
//! Cost: as [`crate::ecdh`], plus S holds the `ℓ/8 · |X|` tag bytes until all have arrived.

use crate::ecdh::{
    Ctx, expect_type, matching, peer_tags, receive_group, receive_tags, send_masked, tag_bytes,
    tag_message,
};
use crate::shuffle::random_permutation;
use crate::{ItemDigest, ProtocolError, PsiOutput, Reveal};
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{Link, Reader, put_u64};

/// R → S: the intersection's size.
const MSG_COUNT: u8 = wire::byte(ids::ECDH_COUNT);

/// R's side; `reveal` is [`Reveal::Cardinality`] or [`Reveal::UpTo`].
pub(crate) fn receiver(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
    n_s: usize,
    broadcast: bool,
    reveal: Reveal,
) -> Result<PsiOutput, ProtocolError> {
    let sigma = random_permutation(items.len())?;
    send_masked(link, ctx, items, &sigma)?;
    let peer_tags = peer_tags(link, ctx, n_s)?;
    // (π-position, S's position) of every match, in π order.
    let mut matches: Vec<(u32, u32)> = Vec::new();
    receive_tags(link, ctx, items.len(), |j, tag| {
        if let Some(&(_, pos)) = matching(&peer_tags, tag).first() {
            matches.push((j as u32, pos));
        }
    })?;
    let count = matches.len() as u64;
    if broadcast {
        let mut msg = vec![MSG_COUNT];
        put_u64(&mut msg, count);
        link.send(&msg)?;
    }
    let cap = match reveal {
        Reveal::UpTo(cap) => cap,
        Reveal::Cardinality | Reveal::Intersection => {
            return Ok(PsiOutput {
                intersection: None,
                cardinality: Some(count),
                revealed: None,
            });
        }
    };
    matches.truncate(cap.min(count) as usize);
    let picked: Vec<u32> = matches.iter().map(|&(j, _)| j).collect();
    crate::positions::send(link, &picked, items.len())?;
    let back = crate::positions::receive(link, items.len())?;
    if back.len() != picked.len() {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "returned {} positions for the {} revealed items",
            back.len(),
            picked.len()
        )));
    }
    let mut ours: Vec<usize> = back.into_iter().map(|p| sigma[p]).collect();
    ours.sort_unstable();
    if broadcast {
        let mut theirs: Vec<u32> = matches.iter().map(|&(_, pos)| pos).collect();
        theirs.sort_unstable();
        theirs.dedup();
        crate::positions::send(link, &theirs, n_s)?;
    }
    Ok(PsiOutput {
        intersection: Some(ours),
        cardinality: Some(count),
        revealed: Some(picked.len() as u64),
    })
}

/// S's side; `reveal` is [`Reveal::Cardinality`] or [`Reveal::UpTo`].
pub(crate) fn sender(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
    n_r: usize,
    broadcast: bool,
    reveal: Reveal,
) -> Result<PsiOutput, ProtocolError> {
    let order = random_permutation(items.len())?;
    send_masked(link, ctx, items, &order)?;

    // All of R's tags, in R's order, before any leaves: the shuffle must span all of them.
    ctx.progress
        .stage("ECDH: masking the peer's items", n_r as u64);
    let (n, tag_len) = (ctx.cipher.point_len(), ctx.tag_len);
    let mut tags = Vec::new();
    let mut received = 0;
    while let Some((_, remasked)) = receive_group(link, ctx, n_r, &mut received)? {
        for out in remasked {
            tags.extend_from_slice(&tag_bytes(&out, n, tag_len));
        }
    }
    let pi = random_permutation(n_r)?;
    for chunk in pi.chunks(ctx.batch) {
        let mut shuffled = Vec::with_capacity(chunk.len() * tag_len);
        for &i in chunk {
            shuffled.extend_from_slice(&tags[i * tag_len..(i + 1) * tag_len]);
        }
        link.send(&tag_message(&shuffled, tag_len))?;
    }
    drop(tags);

    let cardinality = if broadcast {
        Some(receive_count(link, n_r.min(items.len()))?)
    } else {
        None
    };
    let cap = match reveal {
        Reveal::UpTo(cap) => cap,
        Reveal::Cardinality | Reveal::Intersection => {
            return Ok(PsiOutput {
                intersection: None,
                cardinality,
                revealed: None,
            });
        }
    };
    let picked = crate::positions::receive(link, n_r)?;
    if picked.len() as u64 > cap.min(items.len() as u64)
        || cardinality.is_some_and(|c| picked.len() as u64 > c)
    {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "asks to reveal {} items; the threshold allows {cap} and this party has {}",
            picked.len(),
            items.len()
        )));
    }
    let mut back: Vec<u32> = picked.iter().map(|&j| pi[j] as u32).collect();
    back.sort_unstable();
    crate::positions::send(link, &back, n_r)?;
    let intersection = if broadcast {
        let positions = crate::positions::receive(link, items.len())?;
        if positions.len() != picked.len() {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "sent {} of this party's positions for {} revealed items",
                positions.len(),
                picked.len()
            )));
        }
        let mut mine: Vec<usize> = positions.into_iter().map(|p| order[p]).collect();
        mine.sort_unstable();
        Some(mine)
    } else {
        None
    };
    Ok(PsiOutput {
        intersection,
        cardinality,
        revealed: Some(picked.len() as u64),
    })
}

/// Reads R's count of the intersection, which cannot exceed `most`.
fn receive_count(link: &mut dyn Link, most: usize) -> Result<u64, ProtocolError> {
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "intersection size");
    expect_type(&mut r, MSG_COUNT)?;
    let count = r.u64()?;
    r.finish()?;
    if count > most as u64 {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "claims an intersection of {count} items; at most {most} are possible"
        )));
    }
    Ok(count)
}
