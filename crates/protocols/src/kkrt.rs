//! KKRT16 PSI — Kolesnikov, Kumaresan, Rosulek, Trieu, "Efficient Batched Oblivious PRF with
//! Applications to Private Set Intersection" (CCS 2016), §5 (PSI from the BaRK-OPRF), with the
//! stash-less three-function cuckoo hashing of Pinkas–Schneider–Weinert–Wieder (Eurocrypt 2018).
//! Model: semi-honest.
//!
//! Receiver R holds X (and learns X ∩ Y); sender S holds Y.
//! 1. R places X in a cuckoo table of `m ≈ 1.32·|X|` bins (at 2^20; see `blindjoin_crypto::cuckoo`) with three hash functions and no
//!    stash ([`blindjoin_crypto::cuckoo`]; a fresh seed is tried if insertion fails, then a
//!    typed error), and sends S the hash seed and `m`.
//! 2. One OPRF instance per bin ([`blindjoin_ot::kkrt_oprf`]): R's input in bin `b` is the item
//!    there (a dummy for an empty bin); R gets `F(b, x_b)`, S gets the key of every instance.
//! 3. S sends, for each y ∈ Y in a secret random order, the three tags `T(F(h_k(y), y))`,
//!    k = 0, 1, 2 (a random tag instead where `h_k(y)` repeats an earlier `h_j(y)`, so equal
//!    bins never produce equal tags R could spot).
//! 4. R outputs the x whose tag `T(F(b, x))` is among S's. With `broadcast_result`, R then sends
//!    S the positions (in S's shuffled order) of the matching y.
//!
//! `T` truncates to ℓ = max(64, 40 + ⌈log2(n_R · 3·n_S)⌉) bits (+⌈log2 B⌉ with B buckets), so
//! the expected number of false matches over the whole run is ≤ 2^-40.
//!
//! Leakage: R learns X ∩ Y and |Y|; S learns |X| (through `m`), and X ∩ Y with
//! `broadcast_result`. A failed first cuckoo seed (probability ≤ 2^-40) is visible to S only as
//! time.
//!
//! Cost: 512 base OTs, then 512 bits per bin (`≈ 650·n_R` bits) from R and `3ℓ` bits per item
//! from S (`≈ 264·n_S` bits at 2^20): about 900 bits per element for equal sets of 2^20.
//! Computation is AES only (code, PRG, hash), spread over all cores with rayon.

use crate::ecdh::{expect_type, tag_len_with};
use crate::shuffle::random_permutation;
use crate::{HandshakeChecked, ItemDigest, Progress, ProtocolError, PsiOptions, PsiOutput, Role};
use blindjoin_crypto::cuckoo::{
    CUCKOO_HASHES, CuckooError, CuckooHasher, EMPTY_BIN, cuckoo_insert_with_retry, max_cuckoo_bins,
};
use blindjoin_crypto::random_bytes;
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{Link, Reader, put_u64};
use blindjoin_ot::kkrt_oprf::{kkrt_oprf_receive, kkrt_oprf_send};
use rayon::prelude::*;

/// Seeds tried for the cuckoo table before giving up (each fails with probability ≤ 2^-40).
const CUCKOO_TRIES: u32 = 3;

/// Sender items per tag message (3 tags each).
const OUT_CHUNK: usize = 1 << 16;

/// Tags looked up per parallel task.
const TASK: usize = 1 << 12;

const MSG_SEED: u8 = wire::byte(ids::KKRT_SEED);
const MSG_TAGS: u8 = wire::byte(ids::KKRT_TAGS);

/// Runs KKRT16 PSI after a successful handshake.
pub(crate) fn run(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<PsiOutput, ProtocolError> {
    let (n_r, n_s) = crate::sizes_within(hs, u64::from(u32::MAX), "KKRT", "; use smaller buckets")?;
    let ctx = Ctx {
        n_r: n_r as usize,
        n_s: n_s as usize,
        tag_len: tag_len_with(
            n_r,
            n_s.saturating_mul(CUCKOO_HASHES as u64),
            opts.extra_stat_bits,
        ),
        progress,
        broadcast: hs.broadcast_result(),
    };
    // With an empty side the intersection is empty; both parties know both sizes, so neither
    // sends anything.
    if ctx.n_r == 0 || ctx.n_s == 0 {
        let learns = hs.role() == Role::Receiver || ctx.broadcast;
        return Ok(PsiOutput::intersection(learns.then(Vec::new)));
    }
    match hs.role() {
        Role::Receiver => receiver(link, &ctx, items),
        Role::Sender => sender(link, &ctx, items),
    }
}

struct Ctx<'a> {
    n_r: usize,
    n_s: usize,
    tag_len: usize,
    progress: &'a dyn Progress,
    broadcast: bool,
}

fn cuckoo_error(e: CuckooError) -> ProtocolError {
    ProtocolError::Config(format!("KKRT: {e}"))
}

fn tag_mask(bytes: usize) -> u128 {
    if bytes >= 16 {
        u128::MAX
    } else {
        (1u128 << (8 * bytes)) - 1
    }
}

fn receiver(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
) -> Result<PsiOutput, ProtocolError> {
    // Step 1: cuckoo hashing.
    ctx.progress.stage("KKRT: cuckoo hashing", 0);
    let table = cuckoo_insert_with_retry(items, CUCKOO_TRIES).map_err(cuckoo_error)?;
    let m = table.bins();
    let mut msg = vec![MSG_SEED];
    msg.extend_from_slice(&table.seed());
    put_u64(&mut msg, m as u64);
    link.send(&msg)?;

    // Step 2: one OPRF per bin.
    ctx.progress.stage("KKRT: OPRF", 0);
    let inputs: Vec<ItemDigest> = table
        .slots()
        .iter()
        .map(|&s| items.get(s as usize).copied().unwrap_or([0u8; 16]))
        .collect();
    let outs = kkrt_oprf_receive(link, &inputs)?;
    drop(inputs);
    let mask = tag_mask(ctx.tag_len);
    let entries: Vec<(u128, u32)> = table
        .slots()
        .iter()
        .zip(&outs)
        .filter(|(s, _)| **s != EMPTY_BIN)
        .map(|(&s, o)| (o & mask, s))
        .collect();
    drop(outs);
    let lookup = TagTable::new(entries);

    // Step 4: the sender's tags, three per item, looked up as they arrive.
    ctx.progress.stage("KKRT: matching", ctx.n_s as u64);
    let tl = ctx.tag_len;
    let rec = CUCKOO_HASHES * tl;
    let mut mine = Vec::new();
    let mut theirs = Vec::new();
    let mut received = 0usize;
    while received < ctx.n_s {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "KKRT tags");
        expect_type(&mut r, MSG_TAGS)?;
        let (count, bytes) = r.records(rec, (ctx.n_s - received).min(OUT_CHUNK))?;
        r.finish()?;
        if count == 0 {
            return Err(ProtocolError::PeerMisbehaved("empty KKRT tag batch".into()));
        }
        // Probed in ascending slot order, so the walk through the table stays local.
        let mut probes: Vec<(u128, u32)> = bytes
            .chunks_exact(tl)
            .enumerate()
            .map(|(j, t)| {
                let mut b = [0u8; 16];
                b[..tl].copy_from_slice(t);
                (
                    u128::from_le_bytes(b),
                    (received + j / CUCKOO_HASHES) as u32,
                )
            })
            .collect();
        probes.par_sort_unstable_by_key(|&(t, _)| lookup.slot(t));
        let found: Vec<Vec<(u32, u32)>> = probes
            .par_chunks(TASK)
            .map(|chunk| {
                chunk
                    .iter()
                    .filter_map(|&(t, y)| lookup.get(t).map(|x| (y, x)))
                    .collect()
            })
            .collect();
        for (y, x) in found.into_iter().flatten() {
            theirs.push(y);
            mine.push(x as usize);
        }
        received += count;
        ctx.progress.advance(count as u64);
    }
    crate::positions::finish_receiver(link, mine, items.len(), theirs, ctx.n_s, ctx.broadcast)
}

fn sender(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
) -> Result<PsiOutput, ProtocolError> {
    // Step 1: the receiver's hash seed and table size, bounded before anything is allocated.
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "KKRT cuckoo seed");
    expect_type(&mut r, MSG_SEED)?;
    let mut seed = [0u8; 16];
    seed.copy_from_slice(r.take(16)?);
    let m = r.u64()?;
    r.finish()?;
    let max = max_cuckoo_bins(ctx.n_r) as u64;
    if m < ctx.n_r as u64 || m > max {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "KKRT: a cuckoo table of {m} bins for {} items (expected {} to {max})",
            ctx.n_r, ctx.n_r
        )));
    }
    let m = m as usize;

    // Step 2: the OPRF keys.
    ctx.progress.stage("KKRT: OPRF", 0);
    let oprf = kkrt_oprf_send(link, m)?;

    // Step 3: three tags per item, in a secret random order.
    ctx.progress.stage("KKRT: sending tags", ctx.n_s as u64);
    let order = random_permutation(items.len())?;
    let hasher = CuckooHasher::new(seed, m);
    let tl = ctx.tag_len;
    let mask = tag_mask(tl);
    for chunk in order.chunks(OUT_CHUNK) {
        let msg = tag_message(&oprf, &hasher, items, chunk, tl, mask)?;
        link.send(&msg)?;
        ctx.progress.advance(chunk.len() as u64);
    }
    drop(oprf);

    if !ctx.broadcast {
        return Ok(PsiOutput::intersection(None));
    }
    let positions = crate::positions::receive(link, items.len())?;
    let mut mine: Vec<usize> = positions.into_iter().map(|p| order[p]).collect();
    mine.sort_unstable();
    Ok(PsiOutput::intersection(Some(mine)))
}

/// One tag message for the items at `chunk` (positions in the shuffled order, `chunk[j]` is the
/// item sent `j`-th): `MSG_TAGS | u32 count | count × 3 tags`.
///
/// The work is done in an order that keeps memory access local (random access into the
/// 64-byte-per-bin OPRF table and the item list otherwise dominates, each one a cache and TLB
/// miss): items are read in ascending index order, OPRF instances are evaluated in ascending
/// bin order, and each tag is then written to its place in the (cache-resident) message.
fn tag_message(
    oprf: &blindjoin_ot::OprfSender,
    hasher: &CuckooHasher,
    items: &[ItemDigest],
    chunk: &[usize],
    tl: usize,
    mask: u128,
) -> Result<Vec<u8>, ProtocolError> {
    let l = chunk.len();
    // Items in ascending index order, each with its place in the message.
    let mut by_item: Vec<(u32, u32)> = chunk
        .iter()
        .enumerate()
        .map(|(j, &i)| (i as u32, j as u32))
        .collect();
    by_item.par_sort_unstable();
    let ys: Vec<ItemDigest> = by_item.iter().map(|&(i, _)| items[i as usize]).collect();
    let pos = hasher.positions(&ys);
    // (bin, slot) with slot = 3·t + k for the k-th hash of ys[t], sorted by bin.
    let mut keys: Vec<u64> = pos
        .iter()
        .enumerate()
        .flat_map(|(t, p)| {
            (0..CUCKOO_HASHES)
                .map(move |k| (u64::from(p[k]) << 32) | (CUCKOO_HASHES * t + k) as u64)
        })
        .collect();
    keys.par_sort_unstable();
    let instances: Vec<u32> = keys.iter().map(|&key| (key >> 32) as u32).collect();
    let inputs: Vec<ItemDigest> = keys
        .iter()
        .map(|&key| ys[(key as u32 as usize) / CUCKOO_HASHES])
        .collect();
    let mut vals = vec![0u128; keys.len()];
    oprf.eval(&instances, &inputs, &mut vals)?;
    drop((instances, inputs));

    let body = 5;
    let rec = CUCKOO_HASHES * tl;
    let mut msg = vec![0u8; body + l * rec];
    msg[0] = MSG_TAGS;
    msg[1..5].copy_from_slice(&(l as u32).to_le_bytes());
    for (&key, v) in keys.iter().zip(&vals) {
        let slot = key as u32 as usize;
        let (t, k) = (slot / CUCKOO_HASHES, slot % CUCKOO_HASHES);
        let at = body + by_item[t].1 as usize * rec + k * tl;
        msg[at..at + tl].copy_from_slice(&(v & mask).to_le_bytes()[..tl]);
    }
    // Where h_k(y) repeats an earlier h_j(y), a random tag instead (equal tags would show R that
    // two of y's bins coincide).
    for (t, p) in pos.iter().enumerate() {
        for k in 1..CUCKOO_HASHES {
            if p[..k].contains(&p[k]) {
                let at = body + by_item[t].1 as usize * rec + k * tl;
                random_bytes(&mut msg[at..at + tl])?;
            }
        }
    }
    Ok(msg)
}

/// Open-addressing table from a receiver's tag to its item index. Tags are pseudorandom, so
/// their low bits pick the slot; callers probe in ascending slot order (sorted with
/// [`TagTable::slot`]) to keep memory access local.
struct TagTable {
    slots: Vec<(u128, u32)>,
    mask: usize,
}

impl TagTable {
    const EMPTY: u32 = u32::MAX;

    fn new(mut entries: Vec<(u128, u32)>) -> Self {
        let cap = (2 * entries.len()).next_power_of_two().max(16);
        let mask = cap - 1;
        entries.par_sort_unstable_by_key(|&(t, _)| (t as usize) & mask);
        let mut slots = vec![(0u128, Self::EMPTY); cap];
        for (t, x) in entries {
            let mut s = (t as usize) & mask;
            while slots[s].1 != Self::EMPTY {
                s = (s + 1) & mask;
            }
            slots[s] = (t, x);
        }
        TagTable { slots, mask }
    }

    /// The home slot of tag `t`.
    fn slot(&self, t: u128) -> usize {
        (t as usize) & self.mask
    }

    /// The item whose tag is `t`, if any (tags of distinct items collide with probability
    /// ≤ 2^-40 over the run; the first is returned).
    fn get(&self, t: u128) -> Option<u32> {
        let mut s = self.slot(t);
        loop {
            let (full, x) = self.slots[s];
            if x == Self::EMPTY {
                return None;
            }
            if full == t {
                return Some(x);
            }
            s = (s + 1) & self.mask;
        }
    }
}
