//! GGM-tree puncturable PRF → single-point and multi-point correlated OT (SPCOT / MPCOT), the
//! "silent" expansion step of Boyle, Couteau, Gilboa, Ishai, Kohl, Rindal, Scholl, "Efficient
//! Two-Round OT Extension and Silent Non-Interactive Secure Computation" (CCS 2019), §4
//! (puncturable PRF from a GGM tree, keys distributed with one OT per tree level and the
//! "sum trick"), in its correlated form with a global `Δ` as used by silent VOLE / Ferret.
//!
//! # What the parties end with
//!
//! For `t` trees of `2^d` leaves (`N = t·2^d`), the receiver holds one secret point
//! `α_j ∈ [0, 2^d)` per tree. The sender (holder of the global `Δ`) gets `v ∈ ({0,1}^128)^N`,
//! the receiver gets `w` with
//!
//! ```text
//! w_i = v_i ⊕ e_i·Δ,   e = the regular weight-t vector with e_{j·2^d + α_j} = 1.
//! ```
//!
//! # Protocol (per tree; all trees batched into a few messages)
//!
//! `G(s) = (AES_{k0}(s) ⊕ s, AES_{k1}(s) ⊕ s)` with two fixed public keys is the length-doubling
//! PRG; node `g` of a level has children `2g` (left) and `2g + 1` (right), so a leaf's index
//! spells its root-to-leaf path, most significant bit first.
//!
//! ```text
//! Receiver R (α, COTs t_i = q_i ⊕ c_i·Δ)          Sender S (Δ, q_i, random root seeds)
//!   f_{j,l} = c_{j,l} ⊕ ¬α_{j,l}    (derandomise the precomputed COTs' choice bits)
//!   ---- "PPRF" | u32 t | u32 d | packed f (t·d bits) ------------------------------>
//!                                    S expands each tree; for each level l = 1..d:
//!                                      K_l^0 = ⊕ left children, K_l^1 = ⊕ right children
//!                                      m_l^0 = K_l^{f} ⊕ H(i, q_i), m_l^1 = K_l^{1⊕f} ⊕ H(i, q_i ⊕ Δ)
//!                                    c = Δ ⊕ (⊕ of all 2^d leaves)
//!   <--- "PPRS" | u32 t | u32 d, then chunks of (m_1^0, m_1^1, …, m_d^0, m_d^1, c) per tree --
//!   K_l^{¬α_l} = m_l^{c_l} ⊕ H(i, t_i); rebuild every node off the path to α level by level
//!   (the missing sibling = K_l^{¬α_l} ⊕ the XOR of the siblings R already knows);
//!   w_α = c ⊕ (⊕_{i≠α} w_i) = v_α ⊕ Δ.
//! ```
//!
//! `i = j·d + l` is the index of the COT consumed by tree `j`, level `l`. `H(i, x) =
//! π(π(x) ⊕ i) ⊕ π(x)` is the tweakable correlation-robust hash of Guo–Katz–Wang–Yu (S&P 2020)
//! under its own fixed key (distinct from the one [`crate::iknp`] uses for random OTs). The COTs
//! may have any choice bits: the flip message turns them into OTs with choice `¬α_l` (if the
//! caller ran IKNP with [`complement_choices`], every flip is 0).
//!
//! # Security model
//!
//! **Semi-honest.** A malicious sender can send inconsistent level sums or a wrong `c` (a
//! selective-failure attack on `α`), and the consumed IKNP COTs are themselves only
//! semi-honest (no KOS check). Nothing here detects deviations; every peer
//! message is still bounds-checked and failures are typed [`OtError`]s. Each COT must be used
//! for one expansion only.

use crate::OtError;
use aes::Aes128;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use blindjoin_crypto::random_bytes;
use blindjoin_link::{Link, Reader, put_u32};
use rayon::prelude::*;
use zeroize::Zeroize;

/// Largest tree depth `d`.
pub const MAX_DEPTH: usize = 28;

/// Largest output length `N = t·2^d` (2^28 blocks = 4 GiB per party).
pub const MAX_LEAVES: usize = 1 << 28;

/// Fixed public AES keys of the GGM PRG: left child, right child.
const PRG_KEYS: [[u8; 16]; 2] = [*b"blindjoin-ggm-L0", *b"blindjoin-ggm-R1"];

/// Fixed public key of the permutation in the OT-masking hash.
const OT_HASH_KEY: [u8; 16] = *b"blindjoin-pprf-h";

const FLIPS_MAGIC: &[u8] = blindjoin_link::wire::ids::PPRF_FLIPS;
const SUMS_MAGIC: &[u8] = blindjoin_link::wire::ids::PPRF_SUMS;

/// Target payload size of one level-sum message.
const MSG_TARGET_BYTES: usize = 1 << 20;

/// Nodes per AES batch in the tree expansion.
const AES_BATCH: usize = 256;

/// Leaves per parallel task (trees are grouped so that small trees still batch well).
const TASK_LEAVES: usize = 1 << 14;

/// Number of COTs an expansion of `t` trees of depth `d` consumes: `t·d`.
pub fn cots_needed(t: usize, d: usize) -> usize {
    t.saturating_mul(d)
}

/// The choice bits that make every flip bit 0: for tree `j`, level `l` (COT index `j·d + l`),
/// the complement of bit `d − 1 − l` of `α_j`. Running IKNP with these choices is optional —
/// COTs with arbitrary choice bits work too.
pub fn complement_choices(alphas: &[usize], d: usize) -> Vec<bool> {
    alphas
        .iter()
        .flat_map(|&a| (0..d).map(move |l| !path_bit(a, d, l)))
        .collect()
}

/// The direction (false = left, true = right) taken at level `l` (0 = children of the root)
/// on the path to leaf `alpha` in a tree of depth `d`.
fn path_bit(alpha: usize, d: usize, l: usize) -> bool {
    (alpha >> (d - 1 - l)) & 1 == 1
}

fn check_params(t: usize, d: usize) -> Result<(), OtError> {
    if d == 0 || d > MAX_DEPTH {
        return Err(OtError::Usage(format!(
            "tree depth {d} out of range 1..={MAX_DEPTH}"
        )));
    }
    if t == 0 || t > (MAX_LEAVES >> d) {
        return Err(OtError::Usage(format!(
            "{t} trees of 2^{d} leaves: need 1 ≤ t and t·2^d ≤ {MAX_LEAVES}"
        )));
    }
    Ok(())
}

fn header(magic: &[u8], t: usize, d: usize) -> Vec<u8> {
    let mut m = magic.to_vec();
    put_u32(&mut m, t as u32); // t ≤ MAX_LEAVES < 2^32, checked by check_params
    put_u32(&mut m, d as u32);
    m
}

/// Reads and checks a `magic | u32 t | u32 d` header; returns the reader positioned after it.
fn read_header<'a>(
    msg: &'a [u8],
    magic: &[u8],
    what: &'static str,
    t: usize,
    d: usize,
) -> Result<Reader<'a>, OtError> {
    let mut r = Reader::new(msg, what);
    if r.take(4)? != magic {
        return Err(OtError::PeerMisbehaved(format!(
            "{what} has the wrong magic; the peer runs a different protocol"
        )));
    }
    let (pt, pd) = (r.u32()? as usize, r.u32()? as usize);
    if (pt, pd) != (t, d) {
        return Err(OtError::PeerMisbehaved(format!(
            "{what}: this party expands {t} trees of depth {d}, the peer {pt} of depth {pd}"
        )));
    }
    Ok(r)
}

fn block(x: u128) -> [u8; 16] {
    x.to_le_bytes()
}

fn word(b: &[u8]) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    u128::from_le_bytes(a)
}

/// `H(i, x_i ⊕ offset)` for all `i`, with tweak `i` = position in `xs`.
fn ot_hash(xs: &[u128], offset: u128) -> Vec<u128> {
    let cipher = Aes128::new(&OT_HASH_KEY.into());
    let mut out = vec![0u128; xs.len()];
    out.par_chunks_mut(1024)
        .zip(xs.par_chunks(1024))
        .enumerate()
        .for_each(|(c, (dst, src))| {
            let mut pi: Vec<[u8; 16]> = src.iter().map(|x| block(x ^ offset)).collect();
            cipher.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut pi));
            let mut second: Vec<[u8; 16]> = pi
                .iter()
                .enumerate()
                .map(|(k, p)| block(u128::from_le_bytes(*p) ^ (c * 1024 + k) as u128))
                .collect();
            cipher.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut second));
            for ((d, s), p) in dst.iter_mut().zip(&second).zip(&pi) {
                *d = u128::from_le_bytes(*s) ^ u128::from_le_bytes(*p);
            }
            pi.zeroize();
            second.zeroize();
        });
    out
}

/// The length-doubling GGM PRG `G(s) = (AES_{k0}(s) ⊕ s, AES_{k1}(s) ⊕ s)`.
struct Ggm {
    k: [Aes128; 2],
}

impl Ggm {
    fn new() -> Self {
        Ggm {
            k: [
                Aes128::new(&PRG_KEYS[0].into()),
                Aes128::new(&PRG_KEYS[1].into()),
            ],
        }
    }

    /// Replaces the `n` nodes in `buf[..n]` by their `2n` children in `buf[..2n]`: node `g`'s
    /// children land at `2g`, `2g + 1`. Works from the back so nothing is overwritten unread.
    fn expand_in_place(&self, buf: &mut [u128], n: usize) {
        let mut seeds = [0u128; AES_BATCH];
        let mut l = [[0u8; 16]; AES_BATCH];
        let mut r = [[0u8; 16]; AES_BATCH];
        let mut hi = n;
        while hi > 0 {
            let lo = hi.saturating_sub(AES_BATCH);
            let m = hi - lo;
            seeds[..m].copy_from_slice(&buf[lo..hi]);
            for k in 0..m {
                l[k] = block(seeds[k]);
                r[k] = l[k];
            }
            self.k[0].encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut l[..m]));
            self.k[1].encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut r[..m]));
            for (k, pair) in buf[2 * lo..2 * hi].chunks_exact_mut(2).enumerate() {
                pair[0] = u128::from_le_bytes(l[k]) ^ seeds[k];
                pair[1] = u128::from_le_bytes(r[k]) ^ seeds[k];
            }
            hi = lo;
        }
        seeds.zeroize();
        l.zeroize();
        r.zeroize();
    }
}

/// XOR of the left (even) and right (odd) nodes of one tree level.
fn side_sums(level: &[u128]) -> [u128; 2] {
    level
        .chunks_exact(2)
        .fold([0, 0], |[a, b], p| [a ^ p[0], b ^ p[1]])
}

/// Sender: expands `seeds.len()` trees into `leaves` (tree-major), writing each level's
/// `[K^0, K^1]` into `sums[j·d + l]` and `offsets[j] ⊕ ⊕leaves` into `corr[j]`.
fn expand_sender(
    ggm: &Ggm,
    leaves: &mut [u128],
    seeds: &[u128],
    sums: &mut [[u128; 2]],
    corr: &mut [u128],
    d: usize,
    offsets: &[u128],
) {
    let g = seeds.len();
    leaves[..g].copy_from_slice(seeds);
    for l in 0..d {
        ggm.expand_in_place(leaves, g << l);
        let width = 2usize << l;
        for (j, tree) in leaves[..g * width].chunks_exact(width).enumerate() {
            sums[j * d + l] = side_sums(tree);
        }
    }
    for ((c, tree), off) in corr
        .iter_mut()
        .zip(leaves.chunks_exact(1 << d))
        .zip(offsets)
    {
        *c = tree.iter().fold(*off, |a, x| a ^ x);
    }
}

/// Receiver: rebuilds `alphas.len()` punctured trees into `leaves` from the received level sums
/// `known[j·d + l] = K_l^{¬α_l}`, corrections `corr[j]` and base VOLE values `gammas[j]`; the
/// punctured leaf gets `corr[j] ⊕ gammas[j] ⊕ (⊕ other leaves)` (`v_α ⊕ Δ` for MPCOT).
fn expand_receiver(
    ggm: &Ggm,
    leaves: &mut [u128],
    alphas: &[usize],
    known: &[u128],
    corr: &[u128],
    gammas: &[u128],
    d: usize,
) {
    let g = alphas.len();
    // The roots are unknown: hold 0 and let `pos[j]` track the punctured node of each tree.
    leaves[..g].fill(0);
    let mut pos = vec![0usize; g];
    for l in 0..d {
        ggm.expand_in_place(leaves, g << l);
        let width = 2usize << l;
        for (j, tree) in leaves[..g * width].chunks_exact_mut(width).enumerate() {
            let p = pos[j];
            // Children of the punctured node are garbage: clear them.
            tree[2 * p] = 0;
            tree[2 * p + 1] = 0;
            let a = usize::from(path_bit(alphas[j], d, l));
            let side = 1 - a;
            let others = tree.iter().skip(side).step_by(2).fold(0, |x, y| x ^ y);
            tree[2 * p + side] = known[j * d + l] ^ others;
            pos[j] = 2 * p + a;
        }
    }
    for (((tree, &a), &c), &gamma) in leaves
        .chunks_exact_mut(1 << d)
        .zip(alphas)
        .zip(corr)
        .zip(gammas)
    {
        // tree[a] is 0, so the XOR over the whole tree is the XOR over i ≠ α.
        tree[a] = tree.iter().fold(c ^ gamma, |x, y| x ^ y);
    }
}

/// Trees per parallel task.
fn task_trees(d: usize) -> usize {
    (TASK_LEAVES >> d).max(1)
}

/// Trees per level-sum message.
fn msg_trees(d: usize) -> usize {
    (MSG_TARGET_BYTES / (32 * d + 16)).max(1)
}

/// Multi-point COT, sender side: `t` GGM trees of `2^d` leaves (regular noise, one punctured
/// point per tree), consuming the `t·d` precomputed COTs `(Δ, q)` of an IKNP (or any COT)
/// sender. Returns `v` (length `t·2^d`, tree-major); the receiver ends with
/// `w_i = v_i ⊕ e_i·Δ`.
///
/// # Errors
/// [`OtError::Usage`] for `d ∉ 1..=MAX_DEPTH`, `t = 0`, `t·2^d > MAX_LEAVES` or
/// `q.len() ≠ t·d`; link failure; the receiver's message malformed
/// ([`OtError::InvalidMessage`]) or for other parameters ([`OtError::PeerMisbehaved`]);
/// RNG failure.
pub fn mpcot_send(
    link: &mut dyn Link,
    delta: u128,
    q: &[u128],
    t: usize,
    d: usize,
) -> Result<Vec<u128>, OtError> {
    check_params(t, d)?;
    mpvole_send(link, delta, q, t, d, &vec![delta; t])
}

/// Multi-point VOLE expansion, sender side: as [`mpcot_send`], but tree `j`'s final
/// correction is `offsets[j] ⊕ (⊕ leaves)` instead of `Δ ⊕ (⊕ leaves)`. With a base VOLE
/// correlation `γ_j = offsets[j] + β_j·Δ` held by the receiver (passed to
/// [`mpvole_receive`] as `gammas`), the receiver's punctured leaf becomes `v_α + β_j·Δ`: the
/// "sum trick" of Weng–Yang–Katz–Wang, *Wolverine* (S&P 2021) §3.2 / Ferret §4, which turns
/// GGM trees into multi-point VOLE over GF(2^128). `mpcot_send` is the case `offsets = Δ`,
/// `gammas = 0`, `β = 1`.
///
/// # Errors
/// As [`mpcot_send`]; also `offsets.len() ≠ t`.
pub fn mpvole_send(
    link: &mut dyn Link,
    delta: u128,
    q: &[u128],
    t: usize,
    d: usize,
    offsets: &[u128],
) -> Result<Vec<u128>, OtError> {
    check_params(t, d)?;
    if offsets.len() != t {
        return Err(OtError::Usage(format!(
            "{t} trees need {t} correction offsets, got {}",
            offsets.len()
        )));
    }
    let n_cots = t * d;
    if q.len() != n_cots {
        return Err(OtError::Usage(format!(
            "{t} trees of depth {d} need {n_cots} COTs, got {}",
            q.len()
        )));
    }

    let msg = link.recv()?;
    let mut r = read_header(&msg, FLIPS_MAGIC, "PPRF choice flips", t, d)?;
    let flips = r.take(n_cots.div_ceil(8))?;
    r.finish()?;
    let flip = |i: usize| (flips[i / 8] >> (i % 8)) & 1 == 1;

    let mut seed_bytes = vec![0u8; 16 * t];
    random_bytes(&mut seed_bytes)?;
    let mut seeds: Vec<u128> = seed_bytes.chunks_exact(16).map(word).collect();
    seed_bytes.zeroize();

    let ggm = Ggm::new();
    let mut v = vec![0u128; t << d];
    let mut sums = vec![[0u128; 2]; n_cots];
    let mut corr = vec![0u128; t];
    let tt = task_trees(d);
    v.par_chunks_mut(tt << d)
        .zip(sums.par_chunks_mut(tt * d))
        .zip(corr.par_chunks_mut(tt))
        .zip(seeds.par_chunks(tt))
        .zip(offsets.par_chunks(tt))
        .for_each(|((((leaves, s), c), sd), off)| expand_sender(&ggm, leaves, sd, s, c, d, off));
    seeds.zeroize();

    let mut h0 = ot_hash(q, 0);
    let mut h1 = ot_hash(q, delta);
    link.send(&header(SUMS_MAGIC, t, d))?;
    let per_msg = msg_trees(d);
    let mut out = Vec::with_capacity(per_msg.min(t) * (32 * d + 16));
    for first in (0..t).step_by(per_msg) {
        out.clear();
        for (j, c) in corr.iter().enumerate().skip(first).take(per_msg) {
            for l in 0..d {
                let i = j * d + l;
                let f = usize::from(flip(i));
                out.extend_from_slice(&block(sums[i][f] ^ h0[i]));
                out.extend_from_slice(&block(sums[i][1 - f] ^ h1[i]));
            }
            out.extend_from_slice(&block(*c));
        }
        link.send(&out)?;
    }
    out.zeroize();
    sums.zeroize();
    h0.zeroize();
    h1.zeroize();
    Ok(v)
}

/// Multi-point COT, receiver side: one punctured point `alphas[j] < 2^d` per tree, consuming the
/// `t·d` precomputed COTs `(t_cots, choices)` of an IKNP (or any COT) receiver, whatever their
/// choice bits. Returns `w` (length `t·2^d`) with `w_i = v_i ⊕ Δ` exactly at
/// `i = j·2^d + alphas[j]` and `w_i = v_i` elsewhere.
///
/// # Errors
/// [`OtError::Usage`] for bad `t = alphas.len()` / `d` (as for [`mpcot_send`]), an
/// `alpha ≥ 2^d`, or COT slices of the wrong length; link failure; a malformed sender message
/// ([`OtError::InvalidMessage`]) or one for other parameters ([`OtError::PeerMisbehaved`]).
pub fn mpcot_receive(
    link: &mut dyn Link,
    t_cots: &[u128],
    choices: &[bool],
    alphas: &[usize],
    d: usize,
) -> Result<Vec<u128>, OtError> {
    mpvole_receive(link, t_cots, choices, alphas, d, &vec![0; alphas.len()])
}

/// Multi-point VOLE expansion, receiver side: as [`mpcot_receive`], with the base VOLE values
/// `gammas[j] = offsets[j] + β_j·Δ` matching the sender's [`mpvole_send`] offsets; the
/// punctured leaf of tree `j` becomes `v_α + β_j·Δ`.
///
/// # Errors
/// As [`mpcot_receive`]; also `gammas.len() ≠ alphas.len()`.
pub fn mpvole_receive(
    link: &mut dyn Link,
    t_cots: &[u128],
    choices: &[bool],
    alphas: &[usize],
    d: usize,
    gammas: &[u128],
) -> Result<Vec<u128>, OtError> {
    let t = alphas.len();
    check_params(t, d)?;
    if gammas.len() != t {
        return Err(OtError::Usage(format!(
            "{t} trees need {t} base VOLE values, got {}",
            gammas.len()
        )));
    }
    let n_cots = t * d;
    if t_cots.len() != n_cots || choices.len() != n_cots {
        return Err(OtError::Usage(format!(
            "{t} trees of depth {d} need {n_cots} COTs, got {} values and {} choice bits",
            t_cots.len(),
            choices.len()
        )));
    }
    if let Some(a) = alphas.iter().find(|&&a| a >> d != 0) {
        return Err(OtError::Usage(format!(
            "punctured point {a} outside a tree of 2^{d} leaves"
        )));
    }

    let mut msg = header(FLIPS_MAGIC, t, d);
    let mut packed = vec![0u8; n_cots.div_ceil(8)];
    for (i, (&c, want)) in choices
        .iter()
        .zip(complement_choices(alphas, d))
        .enumerate()
    {
        packed[i / 8] |= u8::from(c ^ want) << (i % 8);
    }
    msg.extend_from_slice(&packed);
    link.send(&msg)?;
    msg.zeroize();
    packed.zeroize();

    let hdr = link.recv()?;
    read_header(&hdr, SUMS_MAGIC, "PPRF level sums header", t, d)?.finish()?;

    let mut h = ot_hash(t_cots, 0);
    let mut known = vec![0u128; n_cots];
    let mut corr = vec![0u128; t];
    let per_msg = msg_trees(d);
    for first in (0..t).step_by(per_msg) {
        let trees = (first + per_msg).min(t) - first;
        let mut msg = link.recv()?;
        let mut r = Reader::new(&msg, "PPRF level sums");
        let body = r.take(trees * (32 * d + 16))?;
        r.finish()?;
        for (k, rec) in body.chunks_exact(32 * d + 16).enumerate() {
            let j = first + k;
            for l in 0..d {
                let i = j * d + l;
                let m = &rec[32 * l + 16 * usize::from(choices[i])..];
                known[i] = word(m) ^ h[i];
            }
            corr[j] = word(&rec[32 * d..]);
        }
        msg.zeroize();
    }
    h.zeroize();

    let ggm = Ggm::new();
    let mut w = vec![0u128; t << d];
    let tt = task_trees(d);
    w.par_chunks_mut(tt << d)
        .zip(alphas.par_chunks(tt))
        .zip(known.par_chunks(tt * d))
        .zip(corr.par_chunks(tt))
        .zip(gammas.par_chunks(tt))
        .for_each(|((((leaves, a), k), c), g)| expand_receiver(&ggm, leaves, a, k, c, g, d));
    known.zeroize();
    Ok(w)
}

/// Single-point COT, sender side: [`mpcot_send`] with one tree of `2^d` leaves (`d` COTs).
///
/// # Errors
/// As [`mpcot_send`].
pub fn spcot_send(
    link: &mut dyn Link,
    delta: u128,
    q: &[u128],
    d: usize,
) -> Result<Vec<u128>, OtError> {
    mpcot_send(link, delta, q, 1, d)
}

/// Single-point COT, receiver side: [`mpcot_receive`] with one tree and punctured point
/// `alpha < 2^d` (`d` COTs). Returns `w` with `w_α = v_α ⊕ Δ`, `w_i = v_i` elsewhere.
///
/// # Errors
/// As [`mpcot_receive`].
pub fn spcot_receive(
    link: &mut dyn Link,
    t_cots: &[u128],
    choices: &[bool],
    alpha: usize,
    d: usize,
) -> Result<Vec<u128>, OtError> {
    mpcot_receive(link, t_cots, choices, &[alpha], d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{iknp_cot_receive, iknp_cot_send};
    use blindjoin_link::mem_pair;

    use crate::tests::run2;

    fn random_alphas(t: usize, d: usize) -> Vec<usize> {
        let mut b = vec![0u8; 8 * t];
        blindjoin_crypto::random_bytes(&mut b).unwrap();
        b.chunks_exact(8)
            .map(|c| (u64::from_le_bytes(c.try_into().unwrap()) as usize) & ((1 << d) - 1))
            .collect()
    }

    fn random_bools(n: usize) -> Vec<bool> {
        let mut b = vec![0u8; n];
        blindjoin_crypto::random_bytes(&mut b).unwrap();
        b.iter().map(|x| x & 1 == 1).collect()
    }

    /// IKNP COTs (random or complement choice bits) then MPCOT; returns (Δ, v, w).
    fn run_mpcot(alphas: &[usize], d: usize, complement: bool) -> (u128, Vec<u128>, Vec<u128>) {
        let t = alphas.len();
        let choices = if complement {
            complement_choices(alphas, d)
        } else {
            random_bools(t * d)
        };
        let a2 = alphas.to_vec();
        let ((delta, v), w) = run2(
            move |l| {
                let s = iknp_cot_send(l, t * d).unwrap();
                let v = mpcot_send(l, s.delta(), s.q(), t, d).unwrap();
                (s.delta(), v)
            },
            move |l| {
                let r = iknp_cot_receive(l, &choices).unwrap();
                mpcot_receive(l, r.t(), r.choices(), &a2, d).unwrap()
            },
        );
        (delta, v, w)
    }

    fn check_relation(alphas: &[usize], d: usize, delta: u128, v: &[u128], w: &[u128]) {
        let t = alphas.len();
        assert_eq!(v.len(), t << d);
        assert_eq!(w.len(), t << d);
        for (i, (vi, wi)) in v.iter().zip(w).enumerate() {
            let punctured = alphas[i >> d] == i & ((1 << d) - 1);
            let mask = if punctured { delta } else { 0 };
            assert_eq!(*wi, vi ^ mask, "t={t} d={d} i={i} punctured={punctured}");
        }
    }

    #[test]
    fn mpcot_relation_all_leaves() {
        for d in [1usize, 2, 5, 10] {
            for t in [1usize, 3, 64] {
                for complement in [false, true] {
                    let alphas = random_alphas(t, d);
                    let (delta, v, w) = run_mpcot(&alphas, d, complement);
                    check_relation(&alphas, d, delta, &v, &w);
                }
            }
        }
    }

    #[test]
    fn spcot_every_point_small_trees() {
        // Every α of small trees, including both ends, through the single-point wrappers.
        for d in [1usize, 2, 3] {
            for alpha in 0..(1usize << d) {
                let choices = random_bools(d);
                let ((delta, v), w) = run2(
                    move |l| {
                        let s = iknp_cot_send(l, d).unwrap();
                        (s.delta(), spcot_send(l, s.delta(), s.q(), d).unwrap())
                    },
                    move |l| {
                        let r = iknp_cot_receive(l, &choices).unwrap();
                        spcot_receive(l, r.t(), r.choices(), alpha, d).unwrap()
                    },
                );
                check_relation(&[alpha], d, delta, &v, &w);
            }
        }
    }

    #[test]
    fn multi_message_and_multi_task() {
        // d = 1 puts ~21,845 trees in one message and 8,192 per parallel task: 50,000 trees
        // span three sum messages and several tasks. d = 16 gives one tree per task.
        for (t, d) in [(50_000usize, 1usize), (3, 16)] {
            let alphas = random_alphas(t, d);
            let (delta, v, w) = run_mpcot(&alphas, d, false);
            check_relation(&alphas, d, delta, &v, &w);
        }
    }

    #[test]
    fn runs_differ_and_leaves_look_random() {
        let alphas = random_alphas(3, 10);
        let (d1, v1, _) = run_mpcot(&alphas, 10, false);
        let (d2, v2, _) = run_mpcot(&alphas, 10, false);
        assert_ne!(d1, d2);
        assert_ne!(v1, v2);
        assert!(v1.iter().zip(&v2).all(|(a, b)| a != b));
        let mut s = v1.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), v1.len(), "repeated leaves");
        let ones: u32 = v1.iter().map(|x| x.count_ones()).sum();
        let total = 128 * v1.len() as u32;
        assert!(ones > total * 49 / 100 && ones < total * 51 / 100);
    }

    #[test]
    fn ggm_prg_matches_definition() {
        let ggm = Ggm::new();
        let mut buf = vec![0u128; 2 * 600];
        for (i, x) in buf.iter_mut().take(600).enumerate() {
            *x = (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) ^ 7;
        }
        let orig: Vec<u128> = buf[..600].to_vec();
        ggm.expand_in_place(&mut buf, 600);
        for (g, s) in orig.iter().enumerate() {
            for (side, key) in PRG_KEYS.iter().enumerate() {
                let c = Aes128::new(&(*key).into());
                let mut b = aes::Block::from(s.to_le_bytes());
                c.encrypt_block(&mut b);
                let want = u128::from_le_bytes(b.into()) ^ s;
                assert_eq!(buf[2 * g + side], want, "node {g} side {side}");
            }
        }
    }

    #[test]
    fn usage_errors() {
        let (mut l, _r) = mem_pair();
        let u = |r: Result<Vec<u128>, OtError>| matches!(r, Err(OtError::Usage(_)));
        assert!(u(mpcot_send(&mut l, 1, &[], 1, 0)));
        assert!(u(mpcot_send(&mut l, 1, &[], 0, 3)));
        assert!(u(mpcot_send(&mut l, 1, &[0; 29], 1, 29)));
        assert!(u(mpcot_send(&mut l, 1, &[0; 5], 2, 3)));
        assert!(u(mpcot_send(&mut l, 1, &[0; 20], 1 << 19, 10)));
        assert!(u(mpcot_receive(&mut l, &[0; 3], &[false; 3], &[8], 3)));
        assert!(u(mpcot_receive(&mut l, &[0; 3], &[false; 2], &[1], 3)));
        assert!(u(mpcot_receive(&mut l, &[0; 2], &[false; 3], &[1], 3)));
        assert!(u(mpcot_receive(&mut l, &[], &[], &[], 3)));
    }

    fn kind(r: &Result<Vec<u128>, OtError>) -> &'static str {
        match r {
            Err(OtError::PeerMisbehaved(_)) => "misbehaved",
            Err(OtError::InvalidMessage(_)) => "invalid",
            Err(OtError::Link(_)) => "link",
            Err(_) => "other",
            Ok(_) => "ok",
        }
    }

    #[test]
    fn sender_rejects_bad_flips() {
        // t = 3, d = 5: 15 flip bits = 2 bytes.
        let good = |t: usize, d: usize, extra: usize| {
            let mut m = header(FLIPS_MAGIC, t, d);
            m.extend(std::iter::repeat_n(0u8, 2 + extra));
            m
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (good(3, 5, 0)[..13].to_vec(), "invalid"),
            (good(3, 5, 1), "invalid"),
            (good(4, 5, 0), "misbehaved"),
            (good(3, 6, 0), "misbehaved"),
            (
                [b"KKRT".as_slice(), &good(3, 5, 0)[4..]].concat(),
                "misbehaved",
            ),
            (vec![], "invalid"),
            (b"PPRF\xff\xff".to_vec(), "invalid"),
        ];
        for (msg, want) in cases {
            let (_, r) = run2(
                move |l| l.send(&msg).unwrap(),
                |l| mpcot_send(l, 5, &[0; 15], 3, 5),
            );
            assert_eq!(kind(&r), want);
        }
    }

    #[test]
    fn receiver_rejects_bad_sums() {
        // t = 3, d = 5: one sums message of 3·(32·5 + 16) = 528 bytes.
        let body = 3 * (32 * 5 + 16);
        type Build = Box<dyn Fn() -> Vec<Vec<u8>> + Send>;
        let cases: Vec<(Build, &str)> = vec![
            (
                Box::new(move || vec![header(SUMS_MAGIC, 3, 5), vec![0; body - 1]]),
                "invalid",
            ),
            (
                Box::new(move || vec![header(SUMS_MAGIC, 3, 5), vec![0; body + 1]]),
                "invalid",
            ),
            (
                Box::new(move || vec![header(SUMS_MAGIC, 3, 5), vec![]]),
                "invalid",
            ),
            (
                Box::new(move || vec![header(SUMS_MAGIC, 2, 5), vec![0; body]]),
                "misbehaved",
            ),
            (
                Box::new(move || vec![header(SUMS_MAGIC, 3, 4), vec![0; body]]),
                "misbehaved",
            ),
            (
                Box::new(move || vec![header(FLIPS_MAGIC, 3, 5), vec![0; body]]),
                "misbehaved",
            ),
            (
                Box::new(move || vec![[header(SUMS_MAGIC, 3, 5), vec![0]].concat()]),
                "invalid",
            ),
            (
                Box::new(move || vec![header(SUMS_MAGIC, 3, 5)[..6].to_vec()]),
                "invalid",
            ),
            // A well-formed (random-garbage) run succeeds: the protocol is semi-honest.
            (
                Box::new(move || vec![header(SUMS_MAGIC, 3, 5), vec![0xab; body]]),
                "ok",
            ),
        ];
        for (i, (build, want)) in cases.into_iter().enumerate() {
            let (_, r) = run2(
                move |l| {
                    let _flips = l.recv().unwrap();
                    for m in build() {
                        l.send(&m).unwrap();
                    }
                },
                |l| mpcot_receive(l, &[0; 15], &[false; 15], &[0, 7, 31], 5),
            );
            assert_eq!(kind(&r), want, "case {i}");
        }
        // A sender that goes away mid-protocol gives a link error, not a hang or panic.
        let (_, r) = run2(
            |l| {
                let _flips = l.recv().unwrap();
                l.send(&header(SUMS_MAGIC, 3, 5)).unwrap();
                l.abort("bye");
            },
            |l| mpcot_receive(l, &[0; 15], &[false; 15], &[0, 7, 31], 5),
        );
        assert_eq!(kind(&r), "link");
    }
}
