//! n-party PSI revealing only the final intersection to the receiver: an oblivious programmable
//! PRF (OPPRF) per helper, programmed with shares of zero, after Kolesnikov, Matania, Pinkas,
//! Rosulek and Trieu, "Practical Multi-party Private Set Intersection from Symmetric-Key
//! Techniques" (CCS 2017), with the OPPRF built as in Nevo, Trieu and Yanai, "Simple, Fast
//! Malicious Multiparty Private Set Intersection" (CCS 2021): an OKVS over OPRF values. Here the
//! OPRF is the 2HashDH OPRF of [`blindjoin_crypto::oprf`] (as in [`crate::ub_oprf`]) and the
//! OKVS the random-band OKVS of [`blindjoin_crypto::okvs`] (as in [`crate::rr22`]).
//!
//! # Protocol
//! The receiver R holds X; the m = n − 1 helpers H_1 … H_m (the other parties in index order)
//! hold Y_1 … Y_m.
//! 1. **Zero shares.** The helpers form a cycle (for m ≥ 3; one edge for m = 2; none for m = 1).
//!    For each edge the first helper draws a 32-byte seed `s_e` and sends it to the second. Helper
//!    i's share of an item y is `v_i(y) = ⊕_{e ∋ i} F(s_e, y)`, F = SHA-256 truncated to 128
//!    bits. Every edge touches exactly two helpers, so `⊕_i v_i(y) = 0` for every y.
//! 2. **OPPRF.** Each helper draws an OPRF key k_i and encodes an OKVS D_i holding, for each
//!    y ∈ Y_i, key `K_i(y)` ↦ value `M_i(y) ⊕ v_i(y)`, where `(K_i(y), M_i(y))` are the two halves
//!    of `T(H(y)^{k_i})`; the free entries are random. It sends D_i to R.
//! 3. R blinds once, `H(x)^r` for x ∈ X, and sends the points to every helper; helper i returns
//!    `H(x)^{r·k_i}` in R's order; R unblinds to `H(x)^{k_i}`, computes `K_i(x), M_i(x)` and
//!    `w_i(x) = Decode(D_i, K_i(x)) ⊕ M_i(x)`.
//! 4. R outputs the x with `⊕_i w_i(x) = 0`.
//!
//! If x ∈ Y_i then `w_i(x) = v_i(x)`; if all helpers hold x the XOR is 0. Otherwise some
//! `w_i(x)` is the decoding of D_i at a key not encoded in it, pseudo-random to R, and the XOR is
//! 0 with probability 2^-128 per x: false positives are at most |X|·2^-128.
//!
//! # Security (semi-honest, no two parties colluding)
//! - R sees, per helper, D_i and `H(x)^{r·k_i}`. For x in fewer than all Y_i it sees `v_i(x)` for
//!   the helpers holding x: each such set of shares misses an edge of the cycle leaving it, so
//!   they are jointly pseudo-random (F under a seed R does not know); the decodings at the other
//!   helpers are pseudo-random too (the OPRF values of items R does not hold hide D_i's encoded
//!   values, and the free entries are random). So R learns X ∩ Y_1 ∩ … ∩ Y_m and the set sizes
//!   (|Y_i| from the size of D_i and the hello) — not which helpers hold a non-member.
//! - Helper i sees R's blinded points (uniform group elements), and a seed per incident edge:
//!   it learns |X| and the other set sizes (from the hello), nothing about items.
//! - Collusion breaks it: R with one helper learns (the other helper's) shares; two helpers
//!   together learn nothing about R's items but the zero sharing no longer hides partial
//!   intersections from a colluding R. No two parties may pool what they see.
//!
//! # Cost
//! R: one hash-to-curve and one scalar multiplication per item, plus (n − 1) multiplications by
//! an inverse and (n − 1) OKVS decodings per item. Helper i: |Y_i| hash-to-curve and
//! multiplications, |X| multiplications, one OKVS encoding of |Y_i| items, 2 SHA-256 per own
//! item (one per incident edge). Bytes per helper: 32·|X| each way plus 16·m(|Y_i|) for D_i
//! (m(n) ≈ 1.1·n, [`blindjoin_crypto::okvs::OkvsParams::size_for`]) plus 32 per edge.

use super::{Links, blame};
use crate::ecdh::expect_type;
use crate::{Curve, ItemDigest, Progress, ProtocolError, PsiOptions};
use blindjoin_crypto::gf128::Gf128;
use blindjoin_crypto::okvs::{Okvs, OkvsError, OkvsParams, encode_with_params};
use blindjoin_crypto::oprf::{self, OprfScalar, POINT_LEN, tag};
use blindjoin_crypto::random_bytes;
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{Link, Reader, put_u32, put_u64, recv_bulk, send_bulk};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

const MSG_SEED: u8 = wire::byte(ids::NPC_SEED);
const MSG_BLINDED: u8 = wire::byte(ids::NPC_BLINDED);
const MSG_EVALUATED: u8 = wire::byte(ids::NPC_EVALUATED);
const MSG_OKVS: u8 = wire::byte(ids::NPC_OKVS);
/// Attempts at encoding the OKVS (each with a fresh seed) before giving up; one fails with
/// probability below 2^-40 ([`blindjoin_crypto::okvs`]).
const OKVS_TRIES: u32 = 8;

/// The edges of the helpers' zero-sharing graph, as pairs of positions in the helper list:
/// a cycle for m ≥ 3, one edge for m = 2, none for m = 1. The first of each pair sends the seed.
pub fn edges(m: usize) -> Vec<(usize, usize)> {
    match m {
        0 | 1 => Vec::new(),
        2 => vec![(0, 1)],
        _ => (0..m).map(|j| (j, (j + 1) % m)).collect(),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    links: &mut Links<'_>,
    me: usize,
    receiver: usize,
    curve: Curve,
    sizes: &[u64],
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<Option<Vec<usize>>, ProtocolError> {
    if !oprf::supports(curve) {
        return Err(ProtocolError::Config(format!(
            "the zero-sharing n-party PSI needs a prime-order group for its OPRF: FourQ or \
             Ristretto255, not {curve}"
        )));
    }
    let helpers: Vec<usize> = (0..links.len()).filter(|&j| j != receiver).collect();
    if me == receiver {
        receive(links, &helpers, curve, sizes, opts, items, progress).map(Some)
    } else {
        help(links, me, receiver, &helpers, curve, sizes, items, progress).map(|()| None)
    }
}

fn link_to<'a, 'b>(
    links: &'a mut Links<'b>,
    j: usize,
) -> Result<&'a mut (dyn Link + 'b), ProtocolError> {
    links
        .get_mut(j)
        .and_then(|l| l.as_deref_mut())
        .ok_or(ProtocolError::Unreachable("no link to a party of the run"))
}

/// `F(s, y)`: SHA-256 of the seed and the item, truncated to 128 bits.
fn prf(seed: &[u8; 32], y: &ItemDigest) -> u128 {
    let mut h = Sha256::new();
    h.update(b"blindjoin/v1/npc/zero-share\0");
    h.update(seed);
    h.update(y);
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    u128::from_le_bytes(b)
}

/// The OKVS key and mask of an evaluated point `H(y)^k`.
fn key_and_mask(point: &[u8]) -> ([u8; 16], u128) {
    let t = tag(point);
    let mut key = [0u8; 16];
    key.copy_from_slice(&t[..16]);
    let mut mask = [0u8; 16];
    mask.copy_from_slice(&t[16..]);
    (key, u128::from_le_bytes(mask))
}

#[allow(clippy::too_many_arguments)]
fn help(
    links: &mut Links<'_>,
    me: usize,
    receiver: usize,
    helpers: &[usize],
    curve: Curve,
    sizes: &[u64],
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<(), ProtocolError> {
    let pos = helpers
        .iter()
        .position(|&h| h == me)
        .ok_or(ProtocolError::Unreachable("a helper is in the helper list"))?;
    // Step 1: seeds on our edges (send ours first, then read the ones sent to us).
    let es = edges(helpers.len());
    let mut seeds: Vec<Zeroizing<[u8; 32]>> = Vec::new();
    for &(a, b) in &es {
        if a == pos {
            let mut s = Zeroizing::new([0u8; 32]);
            random_bytes(&mut s[..])?;
            let mut msg = Zeroizing::new(vec![MSG_SEED]);
            msg.extend_from_slice(&s[..]);
            link_to(links, helpers[b])?.send(&msg)?;
            seeds.push(s);
        }
    }
    for &(a, b) in &es {
        if b == pos {
            let l = link_to(links, helpers[a])?;
            let got = Zeroizing::new(l.recv()?);
            let mut r = Reader::new(&got, "zero-share seed");
            expect_type(&mut r, MSG_SEED).map_err(|e| blame(l, e))?;
            let mut s = Zeroizing::new([0u8; 32]);
            s.copy_from_slice(r.take(32)?);
            r.finish()?;
            seeds.push(s);
        }
    }

    // Step 2: the OKVS of our items.
    let key = OprfScalar::random(curve)?;
    progress.stage("n-party: encoding our items", items.len() as u64);
    let mut points = vec![0u8; items.len() * POINT_LEN];
    key.hash_and_mul(items, &mut points)?;
    let (keys, values): (Vec<[u8; 16]>, Vec<Gf128>) = points
        .par_chunks_exact(POINT_LEN)
        .zip(items.par_iter())
        .map(|(p, y)| {
            let (k, mask) = key_and_mask(p);
            let share = seeds.iter().fold(0u128, |acc, s| acc ^ prf(s, y));
            (k, Gf128(mask ^ share))
        })
        .unzip();
    drop(points);
    let okvs = encode(&keys, &values)?;
    drop((keys, values));
    let l = link_to(links, receiver)?;
    let mut head = vec![MSG_OKVS];
    head.extend_from_slice(&okvs.seed());
    put_u32(&mut head, okvs.layout().w() as u32);
    put_u64(&mut head, okvs.len() as u64);
    l.send(&head)?;
    let bytes: Vec<u8> = okvs
        .as_slice()
        .iter()
        .flat_map(|g| g.0.to_le_bytes())
        .collect();
    drop(okvs);
    send_bulk(l, MSG_OKVS, &bytes)?;
    drop(bytes);
    progress.advance(items.len() as u64);

    // Step 3: evaluate the receiver's blinded points, batch by batch, in its order.
    let n_r = sizes[receiver] as usize;
    progress.stage("n-party: evaluating the receiver's points", n_r as u64);
    let mut done = 0usize;
    while done < n_r {
        let msg = l.recv()?;
        let mut r = Reader::new(&msg, "blinded points");
        expect_type(&mut r, MSG_BLINDED).map_err(|e| blame(l, e))?;
        let (count, pts) = r.records(POINT_LEN, n_r - done)?;
        r.finish()?;
        if count == 0 {
            return Err(blame(
                l,
                ProtocolError::PeerMisbehaved("empty batch of blinded points".into()),
            ));
        }
        let mut out = vec![0u8; 5 + pts.len()];
        out[0] = MSG_EVALUATED;
        out[1..5].copy_from_slice(&(count as u32).to_le_bytes());
        key.mul(pts, &mut out[5..])
            .map_err(|e| blame(l, e.into()))?;
        l.send(&out)?;
        done += count;
        progress.advance(count as u64);
    }
    Ok(())
}

/// Encodes with fresh random layout seeds until the banded system solves, and random free
/// entries (which the OPPRF's hiding of non-members needs).
fn encode(keys: &[[u8; 16]], values: &[Gf128]) -> Result<Okvs, ProtocolError> {
    let mut last = OkvsError::EncodingFailed;
    for _ in 0..OKVS_TRIES {
        let mut seed = [0u8; 16];
        let mut fill = Zeroizing::new([0u8; 16]);
        random_bytes(&mut seed)?;
        random_bytes(&mut fill[..])?;
        match encode_with_params(keys, values, seed, OkvsParams::default(), Some(*fill)) {
            Ok(o) => return Ok(o),
            Err(OkvsError::EncodingFailed) => last = OkvsError::EncodingFailed,
            Err(e) => return Err(ProtocolError::Config(format!("OKVS: {e}"))),
        }
    }
    Err(ProtocolError::Config(format!("OKVS: {last}")))
}

fn receive(
    links: &mut Links<'_>,
    helpers: &[usize],
    curve: Curve,
    sizes: &[u64],
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<Vec<usize>, ProtocolError> {
    let blind = OprfScalar::random(curve)?;
    progress.stage("n-party: blinding our items", items.len() as u64);
    let mut blinded = vec![0u8; items.len() * POINT_LEN];
    blind.hash_and_mul(items, &mut blinded)?;
    progress.advance(items.len() as u64);
    let batch = opts.batch_size.max(1);

    // One thread per helper; each returns w_i(x) for all x, in our order.
    let mut per_helper: Vec<(usize, &mut (dyn Link + '_))> = Vec::new();
    for (j, l) in links.iter_mut().enumerate() {
        if let Some(l) = l.as_deref_mut()
            && helpers.contains(&j)
        {
            per_helper.push((j, l));
        }
    }
    let results: Vec<Result<Vec<u128>, ProtocolError>> = std::thread::scope(|s| {
        let handles: Vec<_> = per_helper
            .into_iter()
            .map(|(j, l)| {
                let (blind, blinded) = (&blind, &blinded);
                let n_h = sizes[j] as usize;
                s.spawn(move || with_helper(l, blind, blinded, n_h, batch).map_err(|e| blame(l, e)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or(Err(ProtocolError::Unreachable(
                    "an n-party helper thread panicked",
                )))
            })
            .collect()
    });
    let mut acc = vec![0u128; items.len()];
    for r in results {
        for (a, w) in acc.iter_mut().zip(r?) {
            *a ^= w;
        }
    }
    Ok((0..items.len()).filter(|&i| acc[i] == 0).collect())
}

/// The receiver's side with one helper: the OKVS, then the OPRF in lockstep batches; returns
/// `w_i(x)` for each of our items.
fn with_helper(
    l: &mut dyn Link,
    blind: &OprfScalar,
    blinded: &[u8],
    n_helper: usize,
    batch: usize,
) -> Result<Vec<u128>, ProtocolError> {
    // The OKVS: its size must be what the helper's announced set size gives.
    let (m_want, w_want) = OkvsParams::default()
        .size_for(n_helper)
        .map_err(|e| ProtocolError::Config(format!("OKVS: {e}")))?;
    let head = l.recv()?;
    let mut r = Reader::new(&head, "OKVS head");
    expect_type(&mut r, MSG_OKVS)?;
    let mut seed = [0u8; 16];
    seed.copy_from_slice(r.take(16)?);
    let w = r.u32()? as usize;
    let m = r.u64()?;
    r.finish()?;
    if m != m_want as u64 || w != w_want {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "sent an OKVS of {m} entries and band {w}; {n_helper} keys give {m_want} and \
             {w_want}"
        )));
    }
    let bytes = recv_bulk(l, MSG_OKVS, m_want * 16, "OKVS")?;
    let p: Vec<Gf128> = bytes
        .chunks_exact(16)
        .map(|c| {
            let mut b = [0u8; 16];
            b.copy_from_slice(c);
            Gf128(u128::from_le_bytes(b))
        })
        .collect();
    drop(bytes);
    let okvs = Okvs::from_parts(seed, w, p)
        .map_err(|e| ProtocolError::PeerMisbehaved(format!("sent a bad OKVS: {e}")))?;

    let n = blinded.len() / POINT_LEN;
    let mut out = Vec::with_capacity(n);
    for chunk in blinded.chunks(batch * POINT_LEN) {
        let count = chunk.len() / POINT_LEN;
        let mut msg = Vec::with_capacity(5 + chunk.len());
        msg.push(MSG_BLINDED);
        put_u32(&mut msg, count as u32);
        msg.extend_from_slice(chunk);
        l.send(&msg)?;
        let reply = l.recv()?;
        let mut r = Reader::new(&reply, "evaluated points");
        expect_type(&mut r, MSG_EVALUATED)?;
        let (got, pts) = r.records(POINT_LEN, count)?;
        r.finish()?;
        if got != count {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "returned {got} evaluated points for {count}"
            )));
        }
        let mut unblinded = vec![0u8; pts.len()];
        blind.mul_inverse(pts, &mut unblinded)?;
        let (keys, masks): (Vec<[u8; 16]>, Vec<u128>) = unblinded
            .par_chunks_exact(POINT_LEN)
            .map(key_and_mask)
            .unzip();
        let mut decoded = vec![Gf128::default(); keys.len()];
        okvs.par_decode_batch(&keys, &mut decoded)
            .map_err(|e| ProtocolError::Config(format!("OKVS: {e}")))?;
        out.extend(decoded.iter().zip(masks).map(|(d, mask)| d.0 ^ mask));
    }
    Ok(out)
}
