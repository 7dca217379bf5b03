//! RR22 PSI — Raghuraman and Rindal, "Blazing Fast PSI from Improved OKVS and Subfield VOLE"
//! (CCS 2022), Fig. 11 (the semi-honest protocol) and §5 (its malicious variant, after Rindal and
//! Schoppmann, "VOLE-PSI", Eurocrypt 2021, Fig. 4).
//!
//! Receiver R holds X (and learns X ∩ Y); sender S holds Y.
//! 1. R encodes the OKVS `P = Encode({(x, H^B(x)) : x ∈ X})` under a fresh public seed
//!    ([`blindjoin_crypto::okvs`], random-band OKVS, re-seeded if elimination fails).
//! 2. A random VOLE of length `m = |P|` ([`blindjoin_ot::vole`]): R gets `A′, C`, S gets `Δ, B`
//!    with `C = B + A′·Δ`.
//! 3. R sends the seed and `A = P + A′`.
//! 4. S sets `K = B + Δ·A` (so `K = C + Δ·P`) and sends `H^o(Decode(K, y) + Δ·H^B(y))` for
//!    y ∈ Y — which equals `H^o(Decode(C, y))` exactly when `Decode(P, y) = H^B(y)`, i.e. when
//!    y ∈ X — **sorted by value**. That order is a function of the values R receives anyway, so
//!    it tells R nothing a secret random order would hide (it is the order a shuffle followed by
//!    a sort would give), and it lets R match by one merge instead of a hash table.
//! 5. R sorts its own `H^o(Decode(C, x))` and outputs the x whose value is among S's. With
//!    `broadcast_result`, R then sends S the positions (in S's sent order) that matched.
//!
//! # Modes (`Rr22Mode`; both parties must agree — the handshake checks it)
//!
//! * **fast**: `A`, `H^B` in GF(2^128); `H^o` truncated to `λ + log2(n_R·n_S)` bits (λ = 40).
//! * **low_comm**: `H^B` and the VOLE noise are `ℓ = λ + ⌈log2 n_S⌉` bits (rounded up to bytes),
//!   so `A` costs ℓ instead of 128 bits per OKVS entry. A y ∉ X matches only if
//!   `Decode(P, y) = H^B(y)` (probability `2^-ℓ` each, so ≤ 2^-40 over all of Y) or its output
//!   collides with one of R's (≤ 2^-40 by the output length).
//! * **malicious**: fast mode plus RS21's extra randomisation: S commits to `w_S` before the
//!   VOLE, R sends `w_R` after `A`, S opens `w_S`, and outputs are the full 128-bit
//!   `H^o(x, v + w)` with `w = w_S ⊕ w_R` and the item itself keying `H^o` (Davies–Meyer).
//!   The VOLE runs its consistency check and SoftSpokenOT its malicious check. **Caveat:** the
//!   base OTs are now malicious-secure (Masny–Rindal), but the composition is not proven, so
//!   this mode is hardened, not proven malicious-secure.
//!
//! Leakage: R learns X ∩ Y and |Y|; S learns |X| (and X ∩ Y with `broadcast_result`).
//!
//! **Trust boundary of S's output.** With `broadcast_result` (joins, `check_hash_digest`), S's
//! result is the positions R sends back, in every mode: a malicious R can leave matches out or
//! name non-matching items. S refuses positions out of range, repeated or out of order, and more
//! of them than `min(|X|, |Y|)` ([`ProtocolError::PeerMisbehaved`]); within that, it cannot
//! tell a true answer from a false one.
//! Hashes are fixed-key AES in Matyas–Meyer–Oseas form (`π(z) ⊕ z`), under separate keys.

use crate::ecdh::expect_type;
use crate::{HandshakeChecked, ItemDigest, Progress, ProtocolError, PsiOptions, PsiOutput, Role};
use aes::Aes128;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use blindjoin_crypto::gf128::Gf128;
use blindjoin_crypto::okvs::{Okvs, OkvsError, OkvsLayout, OkvsParams, encode_with_retry};
use blindjoin_crypto::random_bytes;
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{Link, Reader, put_u32};
use blindjoin_ot::vole::{vole_receive_a_first, vole_send};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::fmt;
use zeroize::Zeroize;

/// Statistical security parameter λ.
const STAT_SEC: u32 = 40;

/// OKVS entries per message of `A`.
const A_CHUNK: usize = 1 << 20;

/// Outputs per message from the sender.
const OUT_CHUNK: usize = 1 << 18;

/// Items hashed / decoded per parallel task.
const TASK: usize = 1 << 12;

/// OKVS encoding attempts before giving up (each fails with probability ≲ 2^-40).
const OKVS_TRIES: u32 = 8;

const MSG_COMMIT: u8 = wire::byte(ids::RR22_COMMIT);
const MSG_A: u8 = wire::byte(ids::RR22_A);
const MSG_W_R: u8 = wire::byte(ids::RR22_W_R);
const MSG_W_S: u8 = wire::byte(ids::RR22_W_S);
const MSG_OUT: u8 = wire::byte(ids::RR22_OUT);

const KEY_HB: [u8; 16] = *b"blindjoin-rr22-B";
const KEY_HO: [u8; 16] = *b"blindjoin-rr22-O";
const COMMIT_DOMAIN: &[u8] = b"blindjoin/rr22/commit-w\0";

/// The three RR22 variants.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Rr22Mode {
    /// Semi-honest, GF(2^128) VOLE.
    #[default]
    Fast,
    /// Semi-honest, ℓ-bit subfield VOLE: less communication.
    LowComm,
    /// RS21's malicious-model outputs (see the module docs for what is not yet malicious).
    Malicious,
}

impl Rr22Mode {
    /// The name announced in the handshake.
    pub fn variant(self) -> &'static str {
        match self {
            Rr22Mode::Fast => "fast",
            Rr22Mode::LowComm => "low_comm",
            Rr22Mode::Malicious => "malicious",
        }
    }

    /// Parses [`Self::variant`].
    pub fn from_variant(s: &str) -> Option<Self> {
        [Rr22Mode::Fast, Rr22Mode::LowComm, Rr22Mode::Malicious]
            .into_iter()
            .find(|m| m.variant() == s)
    }
}

impl fmt::Display for Rr22Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.variant())
    }
}

/// Sizes both parties derive from the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rr22Sizes {
    /// Bytes per OKVS value / VOLE noise value (16, or ℓ/8 in low-comm mode).
    pub value_bytes: usize,
    /// Bytes per output compared.
    pub out_bytes: usize,
}

impl Rr22Sizes {
    /// Sizes for `n_r` receiver and `n_s` sender items in `mode`, with `extra` statistical
    /// security bits (see [`PsiOptions::extra_stat_bits`]).
    pub fn new(mode: Rr22Mode, n_r: u64, n_s: u64, extra: u32) -> Self {
        let lambda = STAT_SEC + extra.min(24);
        let log2_ceil = |x: u128| 128 - x.max(1).saturating_sub(1).leading_zeros();
        let out_bytes = match mode {
            Rr22Mode::Malicious => 16,
            _ => {
                let bits = lambda + log2_ceil(u128::from(n_r.max(1)) * u128::from(n_s.max(1)));
                (bits.div_ceil(8) as usize).clamp(8, 16)
            }
        };
        let value_bytes = match mode {
            Rr22Mode::LowComm => {
                ((lambda + log2_ceil(u128::from(n_s))).div_ceil(8) as usize).clamp(8, 16)
            }
            _ => 16,
        };
        Rr22Sizes {
            value_bytes,
            out_bytes,
        }
    }

    fn value_mask(&self) -> u128 {
        mask_bytes(self.value_bytes)
    }
}

fn mask_bytes(bytes: usize) -> u128 {
    if bytes >= 16 {
        u128::MAX
    } else {
        (1u128 << (8 * bytes)) - 1
    }
}

/// Runs RR22 after a successful handshake.
pub(crate) fn run(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    mode: Rr22Mode,
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<PsiOutput, ProtocolError> {
    let (n_r, n_s) = crate::sizes_within(hs, u64::from(u32::MAX), "RR22", "; use smaller buckets")?;
    let sizes = Rr22Sizes::new(mode, n_r, n_s, opts.extra_stat_bits);
    let ctx = Ctx {
        mode,
        sizes,
        n_r: n_r as usize,
        n_s: n_s as usize,
        progress,
        broadcast: hs.broadcast_result(),
    };
    match hs.role() {
        Role::Receiver => receiver(link, &ctx, items),
        Role::Sender => sender(link, &ctx, items),
    }
}

struct Ctx<'a> {
    mode: Rr22Mode,
    sizes: Rr22Sizes,
    n_r: usize,
    n_s: usize,
    progress: &'a dyn Progress,
    broadcast: bool,
}

fn okvs_layout_size(n_r: usize) -> Result<usize, ProtocolError> {
    OkvsParams::default()
        .size_for(n_r)
        .map(|(m, _)| m)
        .map_err(okvs_error)
}

fn okvs_error(e: OkvsError) -> ProtocolError {
    match e {
        OkvsError::DuplicateKey { index_a, index_b } => ProtocolError::Config(format!(
            "items {index_a} and {index_b} are equal; RR22 needs deduplicated keys (the data path \
             deduplicates them — this is a bug in the caller)"
        )),
        other => ProtocolError::Config(format!("OKVS: {other}")),
    }
}

fn receiver(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
) -> Result<PsiOutput, ProtocolError> {
    let m = okvs_layout_size(ctx.n_r)?;
    let commitment = if ctx.mode == Rr22Mode::Malicious {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "RR22 commitment");
        expect_type(&mut r, MSG_COMMIT)?;
        let mut c = [0u8; 32];
        c.copy_from_slice(r.take(32)?);
        r.finish()?;
        Some(c)
    } else {
        None
    };

    // VOLE and the OKVS solve are independent: run them side by side. The solve goes to its own
    // OS thread, never into rayon's pool with the blocking link calls (a pool worker blocked on
    // the link could sit on top of a stolen job the peer waits for). So does C's dual encoding,
    // as soon as the VOLE is done: A goes out the moment the solve ends, whether C is ready
    // or not, and neither waits for the other (at 2^20, with both parties on two cores, the
    // solve outlasted the VOLE by about 50 ms on one core, and C's encoding took about as
    // long on two).
    ctx.progress.stage("RR22: VOLE and OKVS encoding", 0);
    let mut seed = [0u8; 16];
    random_bytes(&mut seed)?;
    let vmask = ctx.sizes.value_mask();
    let (vole, okvs) = std::thread::scope(|scope| {
        let solver = scope.spawn(|| {
            let values = hash_b(items, vmask);
            encode_with_retry(items, &values, seed, OKVS_TRIES)
        });
        let vole = vole_receive_a_first(
            link,
            m,
            8 * ctx.sizes.value_bytes,
            ctx.mode == Rr22Mode::Malicious,
        );
        let (vole, c_job) = match vole.and_then(|mut v| v.split_c().map(|job| (v, job))) {
            Ok((v, job)) => (Ok(v), Some(scope.spawn(move || job.encode()))),
            Err(e) => (Err(e), None),
        };
        let okvs = solver
            .join()
            .map_err(|_| ProtocolError::Unreachable("the OKVS solver thread panicked"))?;
        let vole = vole?;
        let okvs = okvs.map_err(okvs_error)?;
        if okvs.len() != m || vole.len() != m {
            return Err(ProtocolError::Unreachable("OKVS and VOLE lengths differ"));
        }
        send_masked_okvs(link, ctx, &okvs, vole.a())?;
        let c = c_job
            .ok_or(ProtocolError::Unreachable("no C encoding"))?
            .join()
            .map_err(|_| ProtocolError::Unreachable("the C encoding thread panicked"))??;
        Ok((vole.with_c(c)?, okvs))
    })?;

    let w = match commitment {
        Some(c) => Some(exchange_w_receiver(link, &c)?),
        None => None,
    };

    // Our outputs H^o(Decode(C, x)), then the sender's, streamed and looked up.
    ctx.progress.stage("RR22: matching", ctx.n_s as u64);
    let layout = okvs.layout();
    let mut decoded = vec![Gf128::ZERO; items.len()];
    decode_par(layout, vole.c(), items, &mut decoded)?;
    drop(vole);
    drop(okvs);
    output_hash(ctx, items, &mut decoded, w);
    if tags_pack(ctx) {
        match_outputs::<Packed>(link, ctx, decoded)
    } else {
        match_outputs::<(u128, u32)>(link, ctx, decoded)
    }
}

/// `A = P + A′`, sent in chunks, the first with the seed the OKVS was solved under.
fn send_masked_okvs(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    okvs: &Okvs,
    a: &[Gf128],
) -> Result<(), ProtocolError> {
    ctx.progress
        .stage("RR22: sending the masked OKVS", okvs.len() as u64);
    let vb = ctx.sizes.value_bytes;
    let mut first = true;
    for (p, a) in okvs.as_slice().chunks(A_CHUNK).zip(a.chunks(A_CHUNK)) {
        let mut msg = Vec::with_capacity(1 + 16 + 4 + p.len() * vb);
        msg.push(MSG_A);
        if first {
            msg.extend_from_slice(&okvs.seed());
            first = false;
        }
        put_u32(&mut msg, p.len() as u32);
        for (pi, ai) in p.iter().zip(a) {
            msg.extend_from_slice(&(pi.0 ^ ai.0).to_le_bytes()[..vb]);
        }
        link.send(&msg)?;
        ctx.progress.advance(p.len() as u64);
    }
    if first {
        return Err(ProtocolError::Unreachable("empty OKVS"));
    }
    Ok(())
}

/// The receiver's last step: our tags sorted, merged with the sender's as they arrive, then the
/// result (and, with `broadcast_result`, the sender's matched positions) settled.
fn match_outputs<T: TagEntry>(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    tags: Vec<Gf128>,
) -> Result<PsiOutput, ProtocolError> {
    let n_items = tags.len();
    let ob = ctx.sizes.out_bytes;
    let mut matcher = SortedMatch::new(sorted_tags::<T>(&tags, 8 * ob as u32));
    drop(tags);

    let mut mine = Vec::new();
    let mut theirs = Vec::new();
    let mut received = 0usize;
    while received < ctx.n_s {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "RR22 outputs");
        expect_type(&mut r, MSG_OUT)?;
        let (count, bytes) = r.records(ob, ctx.n_s - received)?;
        r.finish()?;
        if count == 0 {
            return Err(ProtocolError::PeerMisbehaved(
                "empty RR22 output batch".into(),
            ));
        }
        matcher.batch(bytes, ob, received, &mut mine, &mut theirs)?;
        received += count;
        ctx.progress.advance(count as u64);
    }
    crate::positions::finish_receiver(link, mine, n_items, theirs, ctx.n_s, ctx.broadcast)
}

fn sender(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    items: &[ItemDigest],
) -> Result<PsiOutput, ProtocolError> {
    let m = okvs_layout_size(ctx.n_r)?;
    let mut w_s = [0u8; 16];
    if ctx.mode == Rr22Mode::Malicious {
        random_bytes(&mut w_s)?;
        let mut msg = vec![MSG_COMMIT];
        msg.extend_from_slice(&commit(&w_s));
        link.send(&msg)?;
    }

    ctx.progress.stage("RR22: VOLE", 0);
    let vole = vole_send(
        link,
        m,
        8 * ctx.sizes.value_bytes,
        ctx.mode == Rr22Mode::Malicious,
    )?;
    let delta = vole.delta();

    // H^B of our items needs nothing from the receiver: compute it while it finishes its side
    // of the VOLE and the OKVS.
    let hb = hash_b(items, ctx.sizes.value_mask());

    // K = B + Δ·A.
    ctx.progress
        .stage("RR22: receiving the masked OKVS", m as u64);
    let vb = ctx.sizes.value_bytes;
    let mut k: Vec<Gf128> = Vec::with_capacity(m);
    let mut seed = [0u8; 16];
    while k.len() < m {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "RR22 masked OKVS");
        expect_type(&mut r, MSG_A)?;
        if k.is_empty() {
            seed.copy_from_slice(r.take(16)?);
        }
        let (count, bytes) = r.records(vb, (m - k.len()).min(A_CHUNK))?;
        r.finish()?;
        if count == 0 {
            return Err(ProtocolError::PeerMisbehaved(
                "empty RR22 OKVS batch".into(),
            ));
        }
        let b = &vole.b()[k.len()..k.len() + count];
        let start = k.len();
        k.resize(start + count, Gf128::ZERO);
        k[start..]
            .par_chunks_mut(TASK)
            .zip(bytes.par_chunks(TASK * vb))
            .zip(b.par_chunks(TASK))
            .for_each(|((out, a), b)| {
                for ((o, a), b) in out.iter_mut().zip(a.chunks_exact(vb)).zip(b) {
                    let mut x = [0u8; 16];
                    x[..vb].copy_from_slice(a);
                    *o = *b + delta * Gf128(u128::from_le_bytes(x));
                }
            });
        ctx.progress.advance(count as u64);
    }
    drop(vole);

    let w = if ctx.mode == Rr22Mode::Malicious {
        Some(exchange_w_sender(link, &w_s)?)
    } else {
        None
    };
    w_s.zeroize();

    // Outputs, sorted by value.
    ctx.progress
        .stage("RR22: sending outputs", items.len() as u64);
    let layout = OkvsLayout::for_items(ctx.n_r, seed, OkvsParams::default()).map_err(okvs_error)?;
    let mut decoded = vec![Gf128::ZERO; items.len()];
    decode_par(&layout, &k, items, &mut decoded)?;
    k.iter_mut().for_each(|x| x.0.zeroize());
    drop(k);
    decoded
        .par_chunks_mut(TASK)
        .zip(hb.par_chunks(TASK))
        .for_each(|(d, h)| {
            for (d, h) in d.iter_mut().zip(h) {
                *d += delta * *h;
            }
        });
    drop(hb);
    output_hash(ctx, items, &mut decoded, w);
    if tags_pack(ctx) {
        send_outputs::<Packed>(link, ctx, decoded)
    } else {
        send_outputs::<(u128, u32)>(link, ctx, decoded)
    }
}

/// The sender's last step: its tags sent sorted by value, then (with `broadcast_result`) the
/// receiver's matched positions mapped back to our items.
fn send_outputs<T: TagEntry>(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    tags: Vec<Gf128>,
) -> Result<PsiOutput, ProtocolError> {
    let n_items = tags.len();
    let ob = ctx.sizes.out_bytes;
    let sorted = sorted_tags::<T>(&tags, 8 * ob as u32);
    drop(tags);
    for chunk in sorted.chunks(OUT_CHUNK) {
        let mut msg = Vec::with_capacity(5 + chunk.len() * ob);
        msg.push(MSG_OUT);
        put_u32(&mut msg, chunk.len() as u32);
        for o in chunk {
            msg.extend_from_slice(&o.tag().to_le_bytes()[..ob]);
        }
        link.send(&msg)?;
        ctx.progress.advance(chunk.len() as u64);
    }

    if !ctx.broadcast {
        return Ok(PsiOutput::intersection(None));
    }
    // The receiver decides what we output: all we can check is that the positions are ours,
    // distinct (strictly increasing on the wire) and no more than the smaller set holds.
    let positions = crate::positions::receive_at_most(link, n_items, n_items.min(ctx.n_r))?;
    let mut mine: Vec<usize> = positions
        .into_iter()
        .map(|p| sorted[p].index() as usize)
        .collect();
    mine.sort_unstable();
    Ok(PsiOutput::intersection(Some(mine)))
}

fn commit(w_s: &[u8; 16]) -> [u8; 32] {
    Sha256::new()
        .chain_update(COMMIT_DOMAIN)
        .chain_update(w_s)
        .finalize()
        .into()
}

/// R: send `w_R`, receive and check the opening of `w_S`; returns `w = w_S ⊕ w_R`.
fn exchange_w_receiver(link: &mut dyn Link, c: &[u8; 32]) -> Result<u128, ProtocolError> {
    let mut w_r = [0u8; 16];
    random_bytes(&mut w_r)?;
    let mut msg = vec![MSG_W_R];
    msg.extend_from_slice(&w_r);
    link.send(&msg)?;
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "RR22 opening of w_S");
    expect_type(&mut r, MSG_W_S)?;
    let mut w_s = [0u8; 16];
    w_s.copy_from_slice(r.take(16)?);
    r.finish()?;
    if commit(&w_s) != *c {
        return Err(ProtocolError::PeerMisbehaved(
            "the sender's w_S does not match its commitment".into(),
        ));
    }
    Ok(u128::from_le_bytes(w_s) ^ u128::from_le_bytes(w_r))
}

/// S: receive `w_R`, open `w_S`; returns `w = w_S ⊕ w_R`.
fn exchange_w_sender(link: &mut dyn Link, w_s: &[u8; 16]) -> Result<u128, ProtocolError> {
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "RR22 w_R");
    expect_type(&mut r, MSG_W_R)?;
    let mut w_r = [0u8; 16];
    w_r.copy_from_slice(r.take(16)?);
    r.finish()?;
    let mut open = vec![MSG_W_S];
    open.extend_from_slice(w_s);
    link.send(&open)?;
    Ok(u128::from_le_bytes(*w_s) ^ u128::from_le_bytes(w_r))
}

/// `H^B(x) = π_B(x) ⊕ x`, truncated by `mask`.
fn hash_b(items: &[ItemDigest], mask: u128) -> Vec<Gf128> {
    let cipher = Aes128::new(&KEY_HB.into());
    let mut out = vec![Gf128::ZERO; items.len()];
    out.par_chunks_mut(TASK)
        .zip(items.par_chunks(TASK))
        .for_each(|(dst, src)| {
            let mut blocks: Vec<[u8; 16]> = src.to_vec();
            cipher.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut blocks));
            for ((d, b), x) in dst.iter_mut().zip(&blocks).zip(src) {
                *d = Gf128((u128::from_le_bytes(*b) ^ u128::from_le_bytes(*x)) & mask);
            }
        });
    out
}

/// Replaces each item's `v` by its output hash, truncated to `out_bytes` (as a little-endian
/// `u128`): the values themselves are gone afterwards, and no second vector is needed.
/// Semi-honest: `π_O(v) ⊕ v`. Malicious: Davies–Meyer keyed by the item, on `v + w`.
fn output_hash(ctx: &Ctx<'_>, items: &[ItemDigest], v: &mut [Gf128], w: Option<u128>) {
    let mask = mask_bytes(ctx.sizes.out_bytes);
    match w {
        None => {
            let cipher = Aes128::new(&KEY_HO.into());
            v.par_chunks_mut(TASK).for_each(|chunk| {
                let mut blocks: Vec<[u8; 16]> = chunk.iter().map(|x| x.0.to_le_bytes()).collect();
                cipher.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut blocks));
                for (x, b) in chunk.iter_mut().zip(&blocks) {
                    x.0 = (u128::from_le_bytes(*b) ^ x.0) & mask;
                }
                blocks.zeroize();
            });
        }
        Some(w) => {
            v.par_chunks_mut(TASK)
                .zip(items.par_chunks(TASK))
                .for_each(|(chunk, keys)| {
                    for (x, key) in chunk.iter_mut().zip(keys) {
                        let z = x.0 ^ w;
                        let mut b = z.to_le_bytes().into();
                        Aes128::new(key.into()).encrypt_block(&mut b);
                        let mut bytes = [0u8; 16];
                        bytes.copy_from_slice(&b);
                        x.0 = (u128::from_le_bytes(bytes) ^ z) & mask;
                    }
                });
        }
    }
}

/// OKVS decode on the rayon pool: when the peer is idle its core is ours.
fn decode_par(
    layout: &OkvsLayout,
    vector: &[Gf128],
    keys: &[ItemDigest],
    out: &mut [Gf128],
) -> Result<(), ProtocolError> {
    layout
        .par_decode_batch(vector, keys, out)
        .map_err(okvs_error)
}

/// An output tag with its item's index, ordered by tag, then index.
trait TagEntry: Copy + Default + Ord + Send + Sync {
    fn new(tag: u128, index: u32) -> Self;
    fn tag(self) -> u128;
    fn index(self) -> u32;
}

/// Any tag: 32 bytes an entry (a `u128` aligns the pair).
impl TagEntry for (u128, u32) {
    fn new(tag: u128, index: u32) -> Self {
        (tag, index)
    }
    fn tag(self) -> u128 {
        self.0
    }
    fn index(self) -> u32 {
        self.1
    }
}

/// A tag of at most 96 bits above its index, in one `u128`: ordering the words orders by tag,
/// then index, and an entry takes 16 bytes instead of 32. The semi-honest modes' tags are
/// `λ + log2(n_R·n_S)` bits, so this is their case up to 2^28 items a side.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Packed(u128);

impl Packed {
    /// Tags of at most this many bits fit.
    const TAG_BITS: u32 = 96;
}

impl TagEntry for Packed {
    fn new(tag: u128, index: u32) -> Self {
        Packed((tag << 32) | u128::from(index))
    }
    fn tag(self) -> u128 {
        self.0 >> 32
    }
    fn index(self) -> u32 {
        self.0 as u32
    }
}

/// Whether this run's output tags fit [`Packed`]. A local choice: the wire carries
/// `out_bytes` per tag either way.
fn tags_pack(ctx: &Ctx<'_>) -> bool {
    8 * ctx.sizes.out_bytes as u32 <= Packed::TAG_BITS
}

/// `(tag, index)` for every tag, sorted by tag (then index). Tags are pseudo-random values below
/// `2^value_bits`, so a counting sort on their top bits spreads them evenly over ranges of a
/// few dozen, which are then sorted on their own, in parallel: about a tenth of a comparison
/// sort of the whole vector.
fn sorted_tags<T: TagEntry>(tags: &[Gf128], value_bits: u32) -> Vec<T> {
    let n = tags.len();
    let range_bits = (usize::BITS - n.leading_zeros())
        .saturating_sub(4)
        .clamp(1, 16)
        .min(value_bits.max(1));
    let shift = value_bits.saturating_sub(range_bits);
    let range_of = |t: u128| ((t >> shift) as usize) & ((1 << range_bits) - 1);
    let mut starts = vec![0usize; (1 << range_bits) + 1];
    for t in tags {
        starts[range_of(t.0) + 1] += 1;
    }
    for r in 1..starts.len() {
        starts[r] += starts[r - 1];
    }
    let mut out = vec![T::default(); n];
    let mut next = starts.clone();
    for (i, t) in tags.iter().enumerate() {
        let r = range_of(t.0);
        out[next[r]] = T::new(t.0, i as u32);
        next[r] += 1;
    }
    let mut ranges = Vec::with_capacity(starts.len() - 1);
    let mut rest = &mut out[..];
    for w in starts.windows(2) {
        let (range, tail) = rest.split_at_mut(w[1] - w[0]);
        ranges.push(range);
        rest = tail;
    }
    ranges
        .into_par_iter()
        .with_min_len(256)
        .for_each(|r| r.sort_unstable());
    out
}

/// The receiver's side of the matching: our tags sorted, merged with the sender's, which arrive
/// in increasing order, batch after batch. One forward pass over both lists, where a hash table
/// of our tags cost a table build and a cache miss per probe.
struct SortedMatch<T> {
    ours: Vec<T>,
    /// Our first tag not below the sender's last one.
    next: usize,
    /// The sender's last tag.
    last: Option<u128>,
}

impl<T: TagEntry> SortedMatch<T> {
    fn new(ours: Vec<T>) -> Self {
        SortedMatch {
            ours,
            next: 0,
            last: None,
        }
    }

    /// Merges a batch of `ob`-byte little-endian tags (the sender's positions `first..`):
    /// pushes our matching indices to `mine` and the batch's matching positions to `theirs`.
    ///
    /// # Errors
    /// [`ProtocolError::PeerMisbehaved`] when the sender's tags are not in increasing order.
    fn batch(
        &mut self,
        bytes: &[u8],
        ob: usize,
        first: usize,
        mine: &mut Vec<usize>,
        theirs: &mut Vec<u32>,
    ) -> Result<(), ProtocolError> {
        for (j, t) in bytes.chunks_exact(ob).enumerate() {
            let mut b = [0u8; 16];
            b[..ob].copy_from_slice(t);
            let t = u128::from_le_bytes(b);
            if self.last.is_some_and(|l| t < l) {
                return Err(ProtocolError::PeerMisbehaved(
                    "RR22 outputs are not in increasing order".into(),
                ));
            }
            self.last = Some(t);
            while self.ours.get(self.next).is_some_and(|o| o.tag() < t) {
                self.next += 1;
            }
            let equal = self.ours[self.next..]
                .iter()
                .take_while(|o| o.tag() == t)
                .map(|o| o.index() as usize);
            let before = mine.len();
            mine.extend(equal);
            if mine.len() > before {
                theirs.push((first + j) as u32);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(n: usize, seed: u64, bits: u32) -> Vec<u128> {
        tag_values(n, seed, bits).into_iter().map(|t| t.0).collect()
    }

    fn tag_values(n: usize, seed: u64, bits: u32) -> Vec<Gf128> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                let mut t = 0u128;
                for _ in 0..2 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    t = (t << 64) | u128::from(x);
                }
                Gf128(t & (u128::MAX >> (128 - bits)))
            })
            .collect()
    }

    #[test]
    fn sorted_tags_is_a_sort_by_tag_then_index() {
        for (n, bits) in [
            (0, 80),
            (1, 80),
            (5, 8),
            (3000, 16),
            (70_000, 80),
            (70_000, 96),
            (70_000, 128),
        ] {
            let mut ts = tag_values(n, n as u64 + 3, bits);
            // Repeated tags must keep every index.
            if n > 10 {
                ts[7] = ts[3];
            }
            let mut want: Vec<(u128, u32)> = ts
                .iter()
                .enumerate()
                .map(|(i, t)| (t.0, i as u32))
                .collect();
            want.sort_unstable();
            assert_eq!(
                sorted_tags::<(u128, u32)>(&ts, bits),
                want,
                "n = {n}, {bits} bits"
            );
            if bits <= Packed::TAG_BITS {
                let packed: Vec<(u128, u32)> = sorted_tags::<Packed>(&ts, bits)
                    .into_iter()
                    .map(|p| (p.tag(), p.index()))
                    .collect();
                assert_eq!(packed, want, "packed, n = {n}, {bits} bits");
            }
        }
    }

    #[test]
    fn packed_entries_order_by_tag_then_index_at_the_extremes() {
        let top = u128::MAX >> 32;
        let entries = [(top, u32::MAX), (top, 0), (0, u32::MAX), (1, 0), (0, 0)];
        let mut packed: Vec<Packed> = entries.iter().map(|&(t, i)| Packed::new(t, i)).collect();
        packed.sort_unstable();
        let got: Vec<(u128, u32)> = packed.iter().map(|p| (p.tag(), p.index())).collect();
        let mut want = entries.to_vec();
        want.sort_unstable();
        assert_eq!(got, want);
    }

    /// The sender's tags as the wire carries them: `ob` little-endian bytes each.
    fn wire(ts: &[u128], ob: usize) -> Vec<u8> {
        ts.iter()
            .flat_map(|t| t.to_le_bytes()[..ob].to_vec())
            .collect()
    }

    #[test]
    fn sorted_match_finds_every_common_tag_across_batches() {
        finds_every_common_tag::<Packed>();
        finds_every_common_tag::<(u128, u32)>();
    }

    fn finds_every_common_tag<T: TagEntry>() {
        let ob = 10;
        let ours = tags(5000, 11, 80);
        let mut theirs: Vec<u128> = tags(4000, 12, 80);
        theirs.extend(ours.iter().step_by(3).copied());
        theirs.push(ours[0]); // a repeated sender tag matches again
        theirs.sort_unstable();
        let mut m = SortedMatch::new(sorted_tags::<T>(&tag_values(5000, 11, 80), 80));
        let (mut mine, mut pos) = (Vec::new(), Vec::new());
        for (b, chunk) in theirs.chunks(777).enumerate() {
            m.batch(&wire(chunk, ob), ob, b * 777, &mut mine, &mut pos)
                .unwrap();
        }
        mine.sort_unstable();
        mine.dedup();
        let want: Vec<usize> = (0..ours.len()).step_by(3).collect();
        assert_eq!(mine, want);
        let matched: Vec<u128> = pos.iter().map(|&p| theirs[p as usize]).collect();
        assert_eq!(matched.len(), want.len() + 1);
        assert!(matched.iter().all(|t| ours.contains(t)));
    }

    /// A receiver's link that, after the sender opened `w_S` (the last message before the
    /// outputs), replaces the positions it sends back with `claim`.
    struct ClaimPositions<L> {
        inner: L,
        armed: bool,
        replaced: bool,
        claim: Vec<u32>,
        n_s: usize,
    }

    impl<L: Link> Link for ClaimPositions<L> {
        fn send(&mut self, msg: &[u8]) -> Result<(), blindjoin_link::LinkError> {
            if !self.armed {
                return self.inner.send(msg);
            }
            if !self.replaced {
                self.replaced = true;
                let _ = crate::positions::send(&mut self.inner, &self.claim, self.n_s);
            }
            Ok(())
        }
        fn recv(&mut self) -> Result<Vec<u8>, blindjoin_link::LinkError> {
            let m = self.inner.recv()?;
            if m.len() == 17 && m[0] == MSG_W_S {
                self.armed = true;
            }
            Ok(m)
        }
        fn abort(&mut self, reason: &str) {
            self.inner.abort(reason)
        }
        fn close(&mut self) -> Result<(), blindjoin_link::LinkError> {
            self.inner.close()
        }
        fn stats(&self) -> blindjoin_link::LinkStats {
            self.inner.stats()
        }
        fn peer_id(&self) -> &str {
            self.inner.peer_id()
        }
    }

    /// Malicious mode with `broadcast_result`, against a receiver that sends back `claim`: the
    /// sender's result.
    fn sender_against_claim(claim: Vec<u32>) -> Result<Vec<usize>, ProtocolError> {
        use crate::{Hello, NoProgress, ProtocolChoice, handshake, run_psi};
        use blindjoin_crypto::item_digest;
        let (n_r, n_s) = (10usize, 200usize);
        let key = |i: usize| item_digest(format!("k{i}").as_bytes());
        let xs: Vec<ItemDigest> = (0..n_r).map(key).collect();
        let ys: Vec<ItemDigest> = (n_r - 5..n_r - 5 + n_s).map(key).collect();
        let malicious = ProtocolChoice::Rr22 {
            mode: Rr22Mode::Malicious,
        };
        let hello = move |role, n: usize| Hello::new(malicious, role, true, n as u64);
        let (la, mut lb) = blindjoin_link::mem_pair();
        let receiver = std::thread::spawn(move || {
            let mut link = ClaimPositions {
                inner: la,
                armed: false,
                replaced: false,
                claim,
                n_s,
            };
            let hs = handshake(&mut link, hello(Role::Receiver, n_r))?;
            run_psi(&mut link, &hs, &PsiOptions::default(), &xs, &NoProgress)
        });
        let hs = handshake(&mut lb, hello(Role::Sender, n_s)).unwrap();
        let out = run_psi(&mut lb, &hs, &PsiOptions::default(), &ys, &NoProgress);
        drop(lb);
        let _ = receiver.join().unwrap();
        out.map(|o| o.intersection.unwrap_or_default())
    }

    /// The sender refuses more positions than the smaller set has (here: all of its 200 items
    /// against the receiver's 10); within the bound it can only take the receiver's word.
    #[test]
    fn malicious_sender_refuses_more_positions_than_the_smaller_set() {
        let all: Vec<u32> = (0..200).collect();
        let err = sender_against_claim(all);
        assert!(
            matches!(&err, Err(ProtocolError::PeerMisbehaved(e)) if e.contains("smaller set")),
            "{err:?}"
        );
        let ten: Vec<u32> = (0..10).map(|i| 20 * i).collect();
        assert_eq!(sender_against_claim(ten).unwrap().len(), 10);
    }

    #[test]
    fn sorted_match_refuses_tags_out_of_order() {
        let ob = 10;
        let ours = tag_values(100, 5, 80);
        let mut m = SortedMatch::new(sorted_tags::<Packed>(&ours, 80));
        let (mut mine, mut pos) = (Vec::new(), Vec::new());
        m.batch(&wire(&[5, 9], ob), ob, 0, &mut mine, &mut pos)
            .unwrap();
        // Within a batch and across batches.
        let err = m.batch(&wire(&[8], ob), ob, 2, &mut mine, &mut pos);
        assert!(
            matches!(err, Err(ProtocolError::PeerMisbehaved(_))),
            "{err:?}"
        );
        let mut m = SortedMatch::new(sorted_tags::<Packed>(&ours, 80));
        let err = m.batch(&wire(&[9, 5], ob), ob, 0, &mut mine, &mut pos);
        assert!(
            matches!(err, Err(ProtocolError::PeerMisbehaved(_))),
            "{err:?}"
        );
    }
}
