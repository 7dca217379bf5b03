//! Three-party ECDH-PSI (`ECDH_PSI_3PC`): one receiver learns R ∩ P ∩ Q, built on the
//! commutative-masking idea of Meadows (IEEE S&P 1986) and Huberman, Franklin and Hogg (EC 1999)
//! — the same DDH-in-the-random-oracle-model masking as the two-party [`crate::ecdh`], with a
//! different message flow that hides |P ∩ Q| from the receiver.
//!
//! # Seats
//! The receiver R is named in the config (`receiver`); the other two take the seats P and Q in
//! the order they appear in `link_config.parties` (P first). [`seats`] is that rule. Each party
//! has a fresh random scalar per run (kR, kP, kQ; zeroized on drop by the cipher).
//!
//! # Protocol
//! 1. P sends `H(p)^kP` for p ∈ P, in a secret random order, to Q; Q raises them to kQ: the
//!    set A = {H(p)^(kP·kQ)}, whose positions Q cannot tie to P's items.
//! 2. Q sends `H(q)^kQ` (shuffled) to P; P raises them to kP, shuffles them again and returns
//!    them: B = {H(q)^(kP·kQ)}, which Q cannot tie to its own q either. Q computes A ∩ B, i.e. the
//!    masked P ∩ Q, and so learns |P ∩ Q| — the protocol's one pairwise leak, to a helper.
//! 3. Q sends R the set S = A ∩ B padded with `H(u)^kQ` for fresh random u (uniform group
//!    elements) to exactly min(|P|, |Q|) elements, shuffled. Under DDH the real elements look
//!    random to R (it does not know kP·kQ), so R learns only min(|P|, |Q|), which every set size
//!    it learns anyway gives it.
//! 4. R sends `H(r)^kR` in its own order to P; P raises them to kP and forwards them (order kept)
//!    to Q; Q raises them to kQ and returns the match tags `T(H(r)^(kR·kP·kQ))` to R in R's order.
//!    R raises S to kR, tags it, and marks its r whose tag is among S's.
//!
//! `T` is the truncated hash of [`crate::ecdh::tag_len_with`], sized for n_R × min(n_P, n_Q)
//! comparisons (expected false matches ≤ 2^-40), plus ⌈log2 B⌉ bits when the run is split into
//! B buckets ([`PsiOptions::extra_stat_bits`]), so the bound holds for the whole run. Q's own comparison of A and B (step 3) uses
//! 128-bit tags of the full points, so a false match there cannot put a non-member into S.
//!
//! # Leakage (semi-honest, no two parties colluding)
//! - R learns R ∩ P ∩ Q and |P|, |Q|.
//! - Q learns |P ∩ Q| and |R|, |P|.
//! - P learns |R|, |Q|.
//!
//! SecretFlow's `ECDH_PSI_3PC` (`ecdh_3pc_psi.cc`) instead reveals |A ∩ B| of the first two
//! parties to the third party C; here the receiver learns nothing beyond the
//! three-way intersection and the set sizes, and the one pairwise count goes to a helper that
//! learns no items. The guarantee is against any one semi-honest party; parties that pool what
//! they see are not covered, as in SecretFlow's.
//!
//! # Cost
//! Scalar multiplications: R n_R + m, P n_P + n_Q + n_R, Q n_Q + n_P + n_R + (m − |P ∩ Q|)
//! (hashing the padding), with m = min(n_P, n_Q). Bytes: points of n_P + 2·n_Q + 2·n_R + m, plus
//! n_R tags. The padding costs (m − |P ∩ Q|) hashes and multiplications at Q, m − |P ∩ Q|
//! multiplications at R and that many points on the Q→R link — at most one more multiplication
//! per item of the smaller helper set.
//!
//! Everything a peer sends is bounded by the set sizes agreed in [`handshake_3pc`] (each ≤ 2^32
//! − 1); a peer that sends more, less, or bytes that are not points is a typed error naming it.

use crate::ecdh::{
    Ctx, MSG_POINTS, expect_type, matching, peer_tags, receive_group, receive_tags, send_masked,
    tag_bytes, tag_len_with, tag_message,
};
use crate::shuffle::random_permutation;
use crate::{
    Curve, Hello, ItemDigest, Progress, ProtocolChoice, ProtocolError, PsiOptions, Role, handshake,
};
use blindjoin_crypto::{item_digest, new_cipher, random_bytes, tag_of};
use blindjoin_link::{Link, Reader, put_u32};
use std::collections::HashSet;

/// SecretFlow's name of the protocol (v1 `psi_type`); its v2 API spells it `PROTOCOL_ECDH_3PC`.
pub const NAME: &str = "ECDH_PSI_3PC";

/// Where a party sits in the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Seat {
    /// R: learns R ∩ P ∩ Q.
    Receiver,
    /// P: the first helper in `link_config.parties` order; learns only set sizes.
    P,
    /// Q: the second helper; learns set sizes and |P ∩ Q|.
    Q,
}

impl Seat {
    /// The seats in protocol order.
    pub const ALL: [Seat; 3] = [Seat::Receiver, Seat::P, Seat::Q];

    fn index(self) -> usize {
        match self {
            Seat::Receiver => 0,
            Seat::P => 1,
            Seat::Q => 2,
        }
    }

    /// The other two seats, in protocol order: the order [`run_3pc`] takes its links in.
    pub fn others(self) -> [Seat; 2] {
        match self {
            Seat::Receiver => [Seat::P, Seat::Q],
            Seat::P => [Seat::Receiver, Seat::Q],
            Seat::Q => [Seat::Receiver, Seat::P],
        }
    }
}

/// The party index (into `parties`) of R, P and Q: R is `receiver`, P and Q the others in list
/// order.
///
/// # Errors
/// Not exactly three distinct ids, or `receiver` not among them.
pub fn seats(parties: &[String], receiver: &str) -> Result<[usize; 3], ProtocolError> {
    if parties.len() != 3 {
        return Err(ProtocolError::Config(format!(
            "{NAME} needs exactly 3 parties, got {}",
            parties.len()
        )));
    }
    if parties[0] == parties[1] || parties[0] == parties[2] || parties[1] == parties[2] {
        return Err(ProtocolError::Config(format!(
            "{NAME}: the three party ids must differ, got {parties:?}"
        )));
    }
    let r = parties.iter().position(|p| p == receiver).ok_or_else(|| {
        ProtocolError::Config(format!(
            "{NAME}: the receiver {receiver:?} is not one of the parties {parties:?}"
        ))
    })?;
    let mut helpers = (0..3).filter(|&i| i != r);
    match (helpers.next(), helpers.next()) {
        (Some(p), Some(q)) => Ok([r, p, q]),
        _ => Err(ProtocolError::Unreachable("three parties have two helpers")),
    }
}

/// What the three parties agreed on: our seat, the curve, and every party's set size.
#[derive(Clone, Debug)]
pub struct Agreed3 {
    /// Our seat.
    pub seat: Seat,
    /// The curve.
    pub curve: Curve,
    /// Unique items of R, P and Q (in that order).
    pub sizes: [u64; 3],
}

impl Agreed3 {
    /// The number of elements R receives in step 3: min(|P|, |Q|).
    pub fn padded_len(&self) -> u64 {
        self.sizes[1].min(self.sizes[2])
    }

    fn size(&self, s: Seat) -> usize {
        self.sizes[s.index()] as usize
    }
}

/// Greets the two other parties (`links` in [`Seat::others`] order) with the two-party
/// [`Hello`], so a mismatched version, curve, key-column count or party setup is reported by both
/// ends of a link, and learns their set sizes. `setup` names the run's parties and receiver
/// (e.g. `alice,bob,carol>alice`); every party must pass the same one. On each link the party
/// with the earlier seat announces `ROLE_RECEIVER`, the other `ROLE_SENDER`.
///
/// # Errors
/// A mismatch, a malformed hello, a size above 2^32 − 1, or a link failure.
pub fn handshake_3pc(
    links: [&mut dyn Link; 2],
    seat: Seat,
    curve: Curve,
    key_columns: u32,
    setup: &str,
    items: u64,
) -> Result<Agreed3, ProtocolError> {
    // The hello's context binds the setup and the key-column count.
    let context = item_digest(format!("ecdh-3pc\0{setup}\0{key_columns}").as_bytes());
    let mut sizes = [0u64; 3];
    sizes[seat.index()] = items;
    for (link, other) in links.into_iter().zip(seat.others()) {
        let role = if seat.index() < other.index() {
            Role::Receiver
        } else {
            Role::Sender
        };
        let hello =
            Hello::new(ProtocolChoice::Ecdh { curve }, role, false, items).with_context(context);
        let hs = handshake(link, hello)?;
        let theirs = hs.theirs().item_count;
        if theirs > u64::from(u32::MAX) {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "party {:?} announced {theirs} items; {NAME} takes at most 2^32 - 1 per party",
                link.peer_id(),
            )));
        }
        sizes[other.index()] = theirs;
    }
    if items > u64::from(u32::MAX) {
        return Err(ProtocolError::Config(format!(
            "{NAME} takes at most 2^32 - 1 unique keys per party"
        )));
    }
    Ok(Agreed3 { seat, curve, sizes })
}

/// Runs the protocol; `links` go to the two other seats in [`Seat::others`] order. Returns the
/// sorted indices into `items` of R ∩ P ∩ Q for the receiver, `None` for the helpers.
///
/// # Errors
/// Link failures, a misbehaving peer (named), or crypto failures.
pub fn run_3pc(
    links: [&mut dyn Link; 2],
    agreed: &Agreed3,
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<Option<Vec<usize>>, ProtocolError> {
    if items.len() != agreed.size(agreed.seat) {
        return Err(ProtocolError::Unreachable(
            "item count differs from the handshake",
        ));
    }
    if opts.batch_size == 0 || opts.batch_size > crate::MAX_BATCH_SIZE {
        return Err(ProtocolError::Config(format!(
            "batch_size must be between 1 and {}, got {}",
            crate::MAX_BATCH_SIZE,
            opts.batch_size
        )));
    }
    let cipher = new_cipher(agreed.curve, None)?;
    let ctx = Ctx {
        cipher: &*cipher,
        batch: opts.batch_size,
        tag_len: match_tag_len(agreed, opts),
        progress,
    };
    let [a, b] = links;
    match agreed.seat {
        Seat::Receiver => receiver(a, b, &ctx, agreed, items).map(Some),
        Seat::P => helper_p(a, b, &ctx, agreed, items).map(|()| None),
        Seat::Q => helper_q(a, b, &ctx, agreed, items).map(|()| None),
    }
}

/// Bytes of R's match tags: 40 bits of statistical security over n_R × min(n_P, n_Q)
/// comparisons, plus `opts.extra_stat_bits` (⌈log2 B⌉ with B buckets, so the bound holds for the
/// whole run, as in two-party runs).
fn match_tag_len(agreed: &Agreed3, opts: &PsiOptions) -> usize {
    tag_len_with(agreed.sizes[0], agreed.padded_len(), opts.extra_stat_bits)
}

/// Names the party behind `link` in errors that would otherwise say only "the peer".
fn blame(link: &dyn Link, e: ProtocolError) -> ProtocolError {
    match e {
        ProtocolError::PeerMisbehaved(m) => {
            ProtocolError::PeerMisbehaved(format!("party {:?}: {m}", link.peer_id()))
        }
        ProtocolError::InvalidMessage(d) => ProtocolError::PeerMisbehaved(format!(
            "party {:?} sent a bad message: {d}",
            link.peer_id()
        )),
        ProtocolError::Crypto(c) => ProtocolError::PeerMisbehaved(format!(
            "party {:?} sent bad points: {c}",
            link.peer_id()
        )),
        other => other,
    }
}

/// R: step 4's first message, then S (step 3) and the tags of its own items (step 4).
fn receiver(
    to_p: &mut dyn Link,
    to_q: &mut dyn Link,
    ctx: &Ctx<'_>,
    agreed: &Agreed3,
    items: &[ItemDigest],
) -> Result<Vec<usize>, ProtocolError> {
    let order: Vec<usize> = (0..items.len()).collect();
    send_masked(to_p, ctx, items, &order)?;
    let s_tags = peer_tags(to_q, ctx, agreed.padded_len() as usize).map_err(|e| blame(to_q, e))?;
    let mut ours = Vec::new();
    receive_tags(to_q, ctx, items.len(), |i, tag| {
        if !matching(&s_tags, tag).is_empty() {
            ours.push(i);
        }
    })
    .map_err(|e| blame(to_q, e))?;
    Ok(ours)
}

/// P: steps 1 and 2, then forwards R's masked items to Q raised to kP.
fn helper_p(
    to_r: &mut dyn Link,
    to_q: &mut dyn Link,
    ctx: &Ctx<'_>,
    agreed: &Agreed3,
    items: &[ItemDigest],
) -> Result<(), ProtocolError> {
    // Step 1.
    let order = random_permutation(items.len())?;
    send_masked(to_q, ctx, items, &order)?;

    // Step 2: Q's items raised to kP, returned in a fresh random order.
    let n = ctx.cipher.point_len();
    let n_q = agreed.size(Seat::Q);
    let mut theirs = Vec::with_capacity(n_q.min(1 << 16) * n);
    let mut received = 0;
    while let Some((_, batches)) =
        receive_group(to_q, ctx, n_q, &mut received).map_err(|e| blame(to_q, e))?
    {
        for b in batches {
            theirs.extend_from_slice(&b);
        }
    }
    let perm = random_permutation(n_q)?;
    for idx in perm.chunks(ctx.batch) {
        let mut msg = points_header(idx.len(), n);
        for &i in idx {
            msg.extend_from_slice(theirs.get(i * n..(i + 1) * n).unwrap_or_default());
        }
        to_q.send(&msg)?;
    }
    drop(theirs);

    // Step 4: R's items, raised to kP, forwarded to Q in R's order.
    let n_r = agreed.size(Seat::Receiver);
    let mut received = 0;
    while let Some((_, batches)) =
        receive_group(to_r, ctx, n_r, &mut received).map_err(|e| blame(to_r, e))?
    {
        for b in batches {
            let mut msg = points_header(b.len() / n, n);
            msg.extend_from_slice(&b);
            to_q.send(&msg)?;
        }
    }
    Ok(())
}

/// Q: steps 1–3, then turns R's items (forwarded by P) into match tags for R.
fn helper_q(
    to_r: &mut dyn Link,
    to_p: &mut dyn Link,
    ctx: &Ctx<'_>,
    agreed: &Agreed3,
    items: &[ItemDigest],
) -> Result<(), ProtocolError> {
    let n = ctx.cipher.point_len();
    // Step 1: A = P's items under kP·kQ, in P's secret order.
    let n_p = agreed.size(Seat::P);
    let mut a = Vec::with_capacity(n_p.min(1 << 16) * n);
    let mut received = 0;
    while let Some((_, batches)) =
        receive_group(to_p, ctx, n_p, &mut received).map_err(|e| blame(to_p, e))?
    {
        for b in batches {
            a.extend_from_slice(&b);
        }
    }

    // Step 2: our items to P; B comes back under kP·kQ, re-shuffled by P.
    let order = random_permutation(items.len())?;
    send_masked(to_p, ctx, items, &order)?;
    let b_tags = receive_points_tags(to_p, n, items.len()).map_err(|e| blame(to_p, e))?;

    // Step 3: S = A ∩ B, padded to min(|P|, |Q|) with random elements, shuffled.
    let mut s: Vec<u8> = Vec::with_capacity(agreed.padded_len() as usize * n);
    for p in a.chunks_exact(n) {
        if b_tags.contains(&tag_of(p, 16)) {
            s.extend_from_slice(p);
        }
    }
    drop(a);
    let real = s.len() / n;
    let want = agreed.padded_len() as usize;
    if real > want {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "party {:?} returned more matching points than it has items",
            to_p.peer_id()
        )));
    }
    let mut pad = vec![[0u8; 16]; want - real];
    for u in pad.iter_mut() {
        random_bytes(u)?;
    }
    let at = s.len();
    s.resize(want * n, 0);
    hash_and_mask_par(ctx, &pad, &mut s[at..])?;
    let perm = random_permutation(want)?;
    for idx in perm.chunks(ctx.batch) {
        let mut msg = points_header(idx.len(), n);
        for &i in idx {
            msg.extend_from_slice(s.get(i * n..(i + 1) * n).unwrap_or_default());
        }
        to_r.send(&msg)?;
    }
    drop(s);

    // Step 4: R's items under kR·kP (from P) raised to kQ, returned to R as tags in R's order.
    let n_r = agreed.size(Seat::Receiver);
    let mut received = 0;
    while let Some((_, batches)) =
        receive_group(to_p, ctx, n_r, &mut received).map_err(|e| blame(to_p, e))?
    {
        for b in batches {
            to_r.send(&tag_message(&tag_bytes(&b, n, ctx.tag_len), ctx.tag_len))?;
        }
    }
    Ok(())
}

/// `H(u)^k` for each `u` into `out`, in parallel batches.
fn hash_and_mask_par(
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
    out: &mut [u8],
) -> Result<(), ProtocolError> {
    use rayon::prelude::*;
    let n = ctx.cipher.point_len();
    items
        .par_chunks(ctx.batch)
        .zip(out.par_chunks_mut(ctx.batch * n))
        .try_for_each(|(us, o)| ctx.cipher.hash_and_mask(us, o))?;
    Ok(())
}

/// The type byte and count of a point message for `count` points of `n` bytes.
fn points_header(count: usize, n: usize) -> Vec<u8> {
    let mut msg = Vec::with_capacity(5 + count * n);
    msg.push(MSG_POINTS);
    put_u32(&mut msg, count as u32);
    msg
}

/// Receives exactly `total` points of `n` bytes (not re-masked) and returns their 128-bit tags.
fn receive_points_tags(
    link: &mut dyn Link,
    n: usize,
    total: usize,
) -> Result<HashSet<u128>, ProtocolError> {
    let mut tags = HashSet::with_capacity(total.min(1 << 16));
    let mut got = 0;
    while got < total {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "masked points");
        expect_type(&mut r, MSG_POINTS)?;
        let (count, bytes) = r.records(n, total - got)?;
        r.finish()?;
        if count == 0 {
            return Err(ProtocolError::PeerMisbehaved("empty point batch".into()));
        }
        tags.extend(bytes.chunks_exact(n).map(|p| tag_of(p, 16)));
        got += count;
    }
    Ok(tags)
}

#[cfg(test)]
mod tests;
