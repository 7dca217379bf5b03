//! SoftSpokenOT: Lawrence Roy, "SoftSpokenOT: Quieter OT Extension from Small-Field Silent VOLE
//! in the Minicrypt Model" (CRYPTO 2022, ePrint 2022/192), producing `n` correlated OTs with a
//! global `Δ` — exactly the output of [`crate::iknp`]: the sender holds `Δ, q_i`, the receiver
//! `c_i, t_i = q_i ⊕ c_i·Δ` — while sending `⌈128/k⌉` bits per OT instead of IKNP's 128.
//!
//! # Construction (κ = 128, parameter `k` = [`SoftSpokenParams::k`])
//!
//! The 128 bits of `Δ` are split into `m = ⌈128/k⌉` groups of `k` bits (the last one narrower
//! when `k ∤ 128`); group `i` covers bits `o_i .. o_i + k_i` and is the secret `Δ^(i) ∈ F_2^{k_i}`
//! of one *small-field VOLE*.
//!
//! * **(N−1)-out-of-N OT from base OTs (a punctured PRF).** For each small VOLE the receiver `R`
//!   (base-OT *sender*, like IKNP) builds a GGM tree with `N = 2^{k_i}` leaves `s_x` out of
//!   `k_i` random base OTs: the two level-1 nodes are the keys `K^0, K^1` of base OT `o_i`; the
//!   XOR of all left (right) children of level `l ≥ 2` is sent masked with `K^0` (`K^1`) of base
//!   OT `o_i + l − 1`. The sender `S` is the base-OT receiver with choice bits `¬Δ`, so on every
//!   level it learns the sum of the side *off* the path to leaf `Δ^(i)` and rebuilds every leaf
//!   except `s_{Δ^(i)}`. Leaf index bits are read least-significant first (level `l` decides bit
//!   `l − 1`), so base OT `j` carries exactly bit `j` of `Δ`.
//! * **Small-field VOLE (§3.1).** Each leaf is stretched to one 128-bit word per block `β` of
//!   128 OTs, `r_x[β] = π(s_x ⊕ β) ⊕ s_x ⊕ β` (`π` = AES-128 under a fixed public key; the paper's
//!   reference implementation in libOTe uses the same fixed-key construction). `R` computes
//!   `u = ⊕_x r_x` and, for each bit `b < k_i`, `v_b = ⊕_{x : x_b = 1} r_x`; `S` computes
//!   `w_b = ⊕_{x ≠ Δ^(i)} (x ⊕ Δ^(i))_b · r_x`, in which the unknown leaf has coefficient 0, and
//!   `w_b = v_b ⊕ Δ^(i)_b · u`. Both sums cost < `2·2^k` word XORs per block: the table of leaf
//!   words is folded onto its lower half once per bit, top bits first (two bits per pass).
//! * **Subspace VOLE with the repetition code (§3.2).** The `m` small VOLEs have independent
//!   `u^(i)`; `R` sends `d^(i) = u^(i) ⊕ c` for every `i` (`c` = its choice bits), i.e. it
//!   encodes `c` with the length-`m` repetition code, and `S` corrects
//!   `q_{o_i + b} = w_b ⊕ Δ_{o_i + b} · d^(i) = v_b ⊕ Δ_{o_i + b} · c`. So the 128 columns
//!   `t_j = v_j` of `R` and `q_j` of `S` satisfy `q_j = t_j ⊕ Δ_j · c` — the IKNP matrix
//!   relation — and transposing each 128×128 block gives `t_i = q_i ⊕ c_i·Δ` per OT.
//!
//! With `k = 1` this is exactly IKNP (two leaves per tree = the two base-OT keys).
//!
//! # Messages
//!
//! ```text
//! Receiver R (choices c ∈ {0,1}^n)                     Sender S (Δ ∈ {0,1}^128, random, ≠ 0)
//!   -- "SSOT" | u64 n | u8 k | u8 malicious -------->  S checks all three equal its own
//!   128 base OTs (crate::base_ot; R sends, S chooses ¬Δ_j, gets K_j^{¬Δ_j})
//!   -- tree: for i < m, l = 2..k_i: m_l^0 | m_l^1 ->  S rebuilds all leaves but s_{Δ^(i)}
//!      [malicious: then for i < m: e_i | C_i]          [malicious: checks every C_i]
//!   for each chunk of up to 128·max(k, 2) blocks of 128 OTs:
//!   -- d^(i)[β] for β in the chunk, i < m ---------->  q columns, then transpose
//!      (16·m bytes per block; see below)
//!   [malicious:]
//!   <- σ (16 bytes) ---------------------------------  challenge seed, revealed only now
//!   -- h_c | h_0 .. h_127 (16 bytes each) ---------->  S checks H(q_j) = h_j ⊕ Δ_j·h_c ∀ j
//! ```
//!
//! Block `β` holds OTs `128β .. 128β + 127` (the last one zero-padded); the correction message of
//! a chunk is a sequence of groups of up to 64 blocks, and a group of `g` blocks from `β_0` holds
//! `d^(0)[β_0 .. β_0 + g]`, then `d^(1)[…]`, …, then `d^(m−1)[…]`, each `d` 16 bytes (bit `r` of
//! `d^(i)[β]` belongs to OT `128β + r`). Every message is decoded with an exact expected length.
//!
//! Communication R → S: `16·⌈128/k⌉` bytes per 128 OTs (`⌈128/k⌉` bits per OT) plus fixed
//! costs — header, the base OTs (≈ 4.2 KiB; S → R ≈ 8.2 KiB), the tree sums (`32·(128 − m)` bytes ≤ 4 KiB); in
//! malicious mode also one extra block of 128 OTs, `64·m` bytes of leaf checks and the
//! 2064-byte response, and S → R 16 bytes. Local work per OT: `2^k / k` fixed-key AES calls
//! (S: `(2^k − 1)/k`) and ≈ `2^{k+1}/k` word XORs per party, against IKNP's 2 (R) and 1 (S)
//! AES calls.
//!
//! # Choosing `k`
//!
//! `k` trades communication (`⌈128/k⌉` bits per OT) against local work (`2^k/k` AES calls per
//! OT); the paper leaves it as that knob (its author's reference implementation, libOTe,
//! defaults to `k = 2`). We default to [`DEFAULT_FIELD_BITS`] = 4: a quarter of IKNP's traffic
//! for 4 AES calls per OT, which on an AES-NI/VAES machine is still no slower than
//! [`crate::iknp`] even over an in-memory link. Measured with `cargo bench -p blindjoin-ot
//! --bench ot_speed -- softspoken` (n = 2^20, both parties on one 2-core VM, time relative to
//! `iknp_cot_send`/`iknp_cot_receive`): k = 2 ≈ 0.8×, k = 3 ≈ 0.85×, k = 4 ≈ 0.85–0.93×,
//! k = 5 ≈ 1.0×, k = 6 ≈ 1.2–1.3×, k = 8 ≈ 2.8×; malicious mode adds ≈ 20–30%. (`k = 1`, the
//! IKNP protocol itself, measures ≈ 0.88×: part of the margin is this module's faster
//! transposition and batching, not the protocol.) Raise `k` only for slow links.
//!
//! # Malicious mode (§4, consistency check)
//!
//! Two checks, both against a deviating **receiver** `R` (the only party whose messages can break
//! the correlation). Check 1 follows the paper's reference implementation; check 2 is the §4
//! universal-hash check, instantiated with a full-width GF(2^128) hash (where libOTe hashes over
//! GF(2^64) and compresses to ≈ 40 bits per field bit); the guarantee below is for this
//! instantiation.
//!
//! 1. **Punctured-PRF consistency.** Each leaf is hashed, `SHA-512(tag | i | x | s_x)` =
//!    `h_x (32 bytes) | s'_x (16 bytes)`; `R` sends `e_i = ⊕_x h_x` and
//!    `C_i = SHA-256(tag | i | h_0 | … | h_{N−1})` and both parties use `s'_x` as leaves. `S`
//!    recomputes `h_{Δ^(i)} = e_i ⊕ ⊕_{x ≠ Δ^(i)} h_x` and checks `C_i`. Passing binds `R` (by
//!    collision resistance) to one leaf vector consistent with every puncture point it lets
//!    pass: inconsistent tree sums can only make the check fail for some values of `Δ^(i)` —
//!    a selective abort.
//! 2. **Subspace-VOLE consistency (the universal-hash check of §4).** `R`'s choice bits get one
//!    extra block `P` of 128 OTs with uniformly random choices. After all corrections have
//!    arrived `S` reveals a seed `σ` it drew at the start; both derive `χ_β = AES_σ(β)` for
//!    every block and fix `χ_P = 1`, and hash each column `e ∈ {0,1}^{128·blocks}` with the
//!    F_2-linear universal hash `H(e) = Σ_β χ_β · e_β` over GF(2^128) (`e_β` = the column's 128
//!    bits in block `β`, as a field element). `R` sends `h_c = H(c)` and `h_j = H(t_j)`; `S`
//!    accepts iff `H(q_j) = h_j ⊕ Δ_j · h_c` for all 128 columns, else
//!    [`OtError::PeerMisbehaved`].
//!
//! **What a passing check guarantees.** Let `u'^(i) = u^(i) ⊕ d^(i)` be the choice vector `R`
//! effectively committed to in small VOLE `i` (fixed before `σ` is known). Column `j` of VOLE `i`
//! passes iff `Δ_j · g_i = δ_j`, where `g_i = H(u'^(i)) ⊕ h_c` and `δ_j = h_j ⊕ H(v_j)` are
//! known to `R`. VOLEs with `g_i = 0` share one vector `c*` (two different `u'` collide under `H`
//! with probability `2^-128` per pair, ≤ `2^-115` over all pairs); on each other VOLE `R` must
//! have guessed all of `Δ^(i)`, which happens with probability `2^{-k_i}`. Hence, except with
//! probability ≤ `2^-115`: the sender's `q` is `q_i = t'_i ⊕ c*_i·Δ` for a `t'` that `R` knows,
//! and a receiver that deviated learns `g` bits of `Δ` (whole `k`-bit groups) only with
//! probability `2^-g` — together with check 1, the selective-abort leakage of KOS15-style
//! ("leaky") correlated OT. `Δ` is therefore **not** perfectly hidden from a cheating receiver;
//! consumers that need full security must tolerate that leakage, e.g. by hashing with the
//! correlation-robust hash of [`CotSender::random_ots`] as the paper does for its final OTs.
//!
//! **Privacy of `c`.** `h_j = H(q_j) ⊕ Δ_j·h_c` is a function of `S`'s own view and `h_c`, and
//! `h_c = (Σ_{β≠P} χ_β c_β) ⊕ c_P` is one-time padded by the 128 random padding choices (because
//! `χ_P = 1`, whatever `σ` is). So 128 padding OTs suffice — KOS15 needs `128 + s` because its
//! random coefficients are full-rank only with probability `1 − 2^-s` — and `S` choosing `σ`
//! alone costs `R` nothing; `σ` only has to stay unknown to `R` until the corrections are sent.
//! The padding OTs are consumed by the check and not returned.
//!
//! **Not covered.** The base OTs ([`crate::base_ot`], Masny–Rindal) are malicious-secure, but the
//! composition with this check has no proof of ours; a malicious `S` is not
//! checked (it has nothing to check: its only messages are base-OT points and `σ`). Failures do
//! not say which small VOLE or column failed, so an abort leaks no more than one bit.
//!
//! # Security model
//!
//! Semi-honest mode: secure against a passive adversary given secure base OTs, with AES under a
//! fixed public key modelled as a random permutation (GGM PRG `G_b(s) = π_b(s) ⊕ s`, leaf PRG
//! above) — the "minicrypt" setting of the paper. As with IKNP, a malicious receiver can learn
//! bits of `Δ` in semi-honest mode undetected.

use crate::OtError;
use crate::base_ot::{base_ot_receive, base_ot_send};
use crate::iknp::{CotReceiver, CotSender, KAPPA, MAX_COTS};
use aes::Aes128;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use blindjoin_crypto::gf128::{Gf128, mul_add_slices};
use blindjoin_crypto::random_bytes;
use blindjoin_link::{Link, Reader, put_u64};
use rayon::prelude::*;
use sha2::{Digest, Sha256, Sha512};
use std::sync::Mutex;
use zeroize::{Zeroize, Zeroizing};

/// Largest `k`: small VOLEs over at most GF(2^8), i.e. GGM trees of at most 256 leaves.
pub const MAX_FIELD_BITS: usize = 8;

/// Default `k` (see the module doc, "Choosing `k`").
pub const DEFAULT_FIELD_BITS: usize = 4;

/// OTs appended (and consumed) in malicious mode to hide the choice bits in the check: one block,
/// with uniformly random choices.
pub const MALICIOUS_PAD_OTS: usize = BLOCK;

/// OTs per block: one 128×128 bit matrix, one word of every column.
const BLOCK: usize = 128;

const HEADER_MAGIC: &[u8] = blindjoin_link::wire::ids::SOFTSPOKEN;

/// Fixed public AES keys: GGM left child, GGM right child, leaf stream PRG.
const GGM_KEYS: [[u8; 16]; 2] = [*b"blindjoin-ssot-L", *b"blindjoin-ssot-R"];
const STREAM_KEY: [u8; 16] = *b"blindjoin-ssot-S";

const LEAF_DOMAIN: &[u8] = b"blindjoin-ot/softspoken/leaf/v1";
const COMMIT_DOMAIN: &[u8] = b"blindjoin-ot/softspoken/commit/v1";

/// Blocks processed by the malicious receiver's final hash-and-transpose tasks.
const HASH_TASK_BLOCKS: usize = 64;

/// Parameters of one SoftSpokenOT run; both parties must use the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SoftSpokenParams {
    /// Bits of `Δ` per small VOLE, `1 ..= MAX_FIELD_BITS`: the receiver sends `⌈128/k⌉` bits per
    /// OT and each party evaluates ≈ `2^k/k` AES blocks per OT. `k = 1` is IKNP.
    pub k: usize,
    /// Run the §4 consistency checks (detects a receiver whose corrections are inconsistent; see
    /// the module doc for the exact guarantee). Costs 128 extra OTs and one more round trip.
    pub malicious: bool,
}

impl Default for SoftSpokenParams {
    /// `k = DEFAULT_FIELD_BITS` (4), semi-honest.
    fn default() -> Self {
        SoftSpokenParams {
            k: DEFAULT_FIELD_BITS,
            malicious: false,
        }
    }
}

impl SoftSpokenParams {
    /// Correction bits the receiver sends per OT: the number of small VOLEs, `⌈128/k⌉` (0 when
    /// `k` is 0, which the protocol rejects).
    pub fn bits_per_ot(&self) -> usize {
        if self.k == 0 {
            0
        } else {
            KAPPA.div_ceil(self.k)
        }
    }
}

/// How the 128 bits of `Δ` are split into small VOLEs.
struct Layout {
    /// `(o_i, k_i)`: first bit of `Δ` and width of small VOLE `i`.
    voles: Vec<(usize, usize)>,
}

impl Layout {
    fn new(k: usize) -> Self {
        let mut voles = Vec::new();
        let mut o = 0;
        while o < KAPPA {
            let w = k.min(KAPPA - o);
            voles.push((o, w));
            o += w;
        }
        Layout { voles }
    }

    fn count(&self) -> usize {
        self.voles.len()
    }

    fn tree_msg_len(&self, malicious: bool) -> usize {
        let sums: usize = self.voles.iter().map(|&(_, w)| 2 * (w - 1) * 16).sum();
        sums + if malicious { 64 * self.count() } else { 0 }
    }
}

/// Blocks the AES backend encrypts in parallel (VAES-512: 64); batches are padded to this.
const AES_BATCH: usize = 64;

/// Blocks per correction message: ≈ 256 KiB messages whatever `k` (512 KiB for `k = 1`, so a
/// message still splits into several parallel tasks).
fn chunk_blocks(k: usize) -> usize {
    BLOCK * k.max(2)
}

/// Blocks per parallel task, and per group of the correction message (see the module doc).
const GROUP: usize = 64;

/// Blocks per leaf table (one AES call): the table of `2^k` rows stays ≤ 32 KiB (L1) and each
/// AES call gets ≥ 128 blocks.
fn sub_blocks(k: usize) -> usize {
    (2048usize >> k).clamp(8, GROUP)
}

fn check_request(n: usize, params: &SoftSpokenParams) -> Result<(), OtError> {
    if params.k == 0 || params.k > MAX_FIELD_BITS {
        return Err(OtError::Usage(format!(
            "SoftSpokenOT field bits k = {} out of range 1..={MAX_FIELD_BITS}",
            params.k
        )));
    }
    if n > MAX_COTS {
        return Err(OtError::Usage(format!(
            "{n} OTs requested; at most {MAX_COTS} per extension"
        )));
    }
    Ok(())
}

fn header(n: usize, params: &SoftSpokenParams) -> Vec<u8> {
    let mut h = HEADER_MAGIC.to_vec();
    put_u64(&mut h, n as u64);
    h.push(params.k as u8); // k ≤ MAX_FIELD_BITS, checked by check_request
    h.push(u8::from(params.malicious));
    h
}

fn read_header(msg: &[u8], n: usize, params: &SoftSpokenParams) -> Result<(), OtError> {
    let mut r = Reader::new(msg, "SoftSpokenOT header");
    if r.take(4)? != HEADER_MAGIC {
        return Err(OtError::PeerMisbehaved(
            "SoftSpokenOT header has the wrong magic; the peer runs a different protocol".into(),
        ));
    }
    let peer_n = r.u64()?;
    let peer_k = r.u8()?;
    let peer_mal = r.u8()?;
    r.finish()?;
    if peer_n != n as u64 {
        return Err(OtError::PeerMisbehaved(format!(
            "SoftSpokenOT: this party extends {n} OTs but the receiver asked for {peer_n}"
        )));
    }
    if usize::from(peer_k) != params.k || peer_mal != u8::from(params.malicious) {
        return Err(OtError::PeerMisbehaved(format!(
            "SoftSpokenOT: this party runs k = {}, malicious = {}; the receiver k = {peer_k}, \
             malicious flag {peer_mal}",
            params.k, params.malicious
        )));
    }
    Ok(())
}

fn word(b: &[u8]) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    u128::from_le_bytes(a)
}

fn random_word() -> Result<u128, OtError> {
    let mut b = [0u8; 16];
    random_bytes(&mut b)?;
    let w = u128::from_le_bytes(b);
    b.zeroize();
    Ok(w)
}

fn xor_all(xs: &[u128]) -> u128 {
    xs.iter().fold(0, |a, x| a ^ x)
}

/// All-ones when bit `j` of `x` is set, else zero.
fn bit_mask(x: u128, j: usize) -> u128 {
    0u128.wrapping_sub((x >> j) & 1)
}

/// The length-doubling GGM PRG `G(s) = (π_L(s) ⊕ s, π_R(s) ⊕ s)`.
struct Ggm([Aes128; 2]);

impl Ggm {
    fn new() -> Self {
        Ggm([
            Aes128::new(&GGM_KEYS[0].into()),
            Aes128::new(&GGM_KEYS[1].into()),
        ])
    }

    /// The left children and the right children of `nodes`.
    fn expand(&self, nodes: &[u128]) -> [Vec<u128>; 2] {
        let side = |cipher: &Aes128| {
            let mut buf: Vec<[u8; 16]> = nodes.iter().map(|x| x.to_le_bytes()).collect();
            cipher.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut buf));
            let out = buf
                .iter()
                .zip(nodes)
                .map(|(b, x)| u128::from_le_bytes(*b) ^ x)
                .collect();
            buf.zeroize();
            out
        };
        [side(&self.0[0]), side(&self.0[1])]
    }
}

/// `h_x | s'_x` of the punctured-PRF check: `SHA-512(tag | i | x | s_x)`.
fn leaf_digest(i: usize, x: usize, seed: u128) -> ([u8; 32], u128) {
    let mut h = Sha512::new();
    h.update(LEAF_DOMAIN);
    h.update((i as u32).to_le_bytes());
    h.update((x as u32).to_le_bytes());
    h.update(seed.to_le_bytes());
    let mut d = h.finalize();
    let mut check = [0u8; 32];
    check.copy_from_slice(&d[..32]);
    let next = word(&d[32..48]);
    d.zeroize();
    (check, next)
}

/// `C_i = SHA-256(tag | i | h_0 | … | h_{N−1})`.
fn leaf_commitment(i: usize, checks: &[[u8; 32]]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(COMMIT_DOMAIN);
    h.update((i as u32).to_le_bytes());
    for c in checks {
        h.update(c);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(&h.finalize());
    out
}

fn xor32(acc: &mut [u8; 32], x: &[u8]) {
    for (a, b) in acc.iter_mut().zip(x) {
        *a ^= b;
    }
}

/// Receiver side: every small VOLE's leaves (all `2^{k_i}`) and the tree message.
fn build_trees(
    layout: &Layout,
    keys: &[[[u8; 16]; 2]],
    malicious: bool,
) -> (Vec<Vec<u128>>, Vec<u8>) {
    let ggm = Ggm::new();
    let key = |j: usize, b: usize| u128::from_le_bytes(keys[j][b]);
    let mut msg = Vec::with_capacity(layout.tree_msg_len(malicious));
    let mut all = Vec::with_capacity(layout.count());
    for &(o, w) in &layout.voles {
        let mut nodes = vec![key(o, 0), key(o, 1)];
        for l in 1..w {
            let [left, mut right] = ggm.expand(&nodes);
            msg.extend_from_slice(&(xor_all(&left) ^ key(o + l, 0)).to_le_bytes());
            msg.extend_from_slice(&(xor_all(&right) ^ key(o + l, 1)).to_le_bytes());
            nodes.zeroize();
            nodes = left;
            nodes.extend_from_slice(&right);
            right.zeroize();
        }
        all.push(nodes);
    }
    if malicious {
        let checks: Vec<[u8; 64]> = all
            .par_iter_mut()
            .enumerate()
            .map(|(i, leaves)| {
                let mut hs = Vec::with_capacity(leaves.len());
                for (x, s) in leaves.iter_mut().enumerate() {
                    let (h, next) = leaf_digest(i, x, *s);
                    *s = next;
                    hs.push(h);
                }
                let mut out = [0u8; 64];
                let mut e = [0u8; 32];
                for h in &hs {
                    xor32(&mut e, h);
                }
                out[..32].copy_from_slice(&e);
                out[32..].copy_from_slice(&leaf_commitment(i, &hs));
                out
            })
            .collect();
        for c in &checks {
            msg.extend_from_slice(c);
        }
    }
    (all, msg)
}

/// Sender side: rebuilds every leaf except leaf `Δ^(i)` (left zero) of each small VOLE from the
/// base-OT keys `K_j^{¬Δ_j}` and the tree message; in malicious mode checks the commitments.
fn rebuild_trees(
    layout: &Layout,
    keys: &[[u8; 16]],
    delta: u128,
    msg: &[u8],
    malicious: bool,
) -> Result<Vec<Vec<u128>>, OtError> {
    let ggm = Ggm::new();
    let key = |j: usize| u128::from_le_bytes(keys[j]);
    let mut r = Reader::new(msg, "SoftSpokenOT tree");
    let sums = r.take(layout.tree_msg_len(false))?;
    let checks = r.take(layout.tree_msg_len(malicious) - sums.len())?;
    r.finish()?;
    let mut off = 0;
    let mut all = Vec::with_capacity(layout.count());
    for &(o, w) in &layout.voles {
        let alpha = punctured_index(delta, o, w);
        let a0 = alpha & 1;
        let mut nodes = vec![0u128; 2];
        nodes[1 - a0] = key(o);
        let mut p = a0; // the unknown node on this level (its value is kept at 0)
        for l in 1..w {
            let (m0, m1) = (word(&sums[off..off + 16]), word(&sums[off + 16..off + 32]));
            off += 32;
            let [mut left, mut right] = ggm.expand(&nodes);
            // S holds K^{¬α_l}, so it learns the sum of the side off its path; it fills that
            // child in (branch-free in the secret bit) and leaves the on-path child at 0.
            left[p] = 0;
            right[p] = 0;
            let on_right = bit_mask(alpha as u128, l);
            left[p] = (m0 ^ key(o + l) ^ xor_all(&left)) & on_right;
            right[p] = (m1 ^ key(o + l) ^ xor_all(&right)) & !on_right;
            p |= alpha & (1 << l);
            nodes.zeroize();
            nodes = left;
            nodes.extend_from_slice(&right);
            right.zeroize();
        }
        all.push(nodes);
    }
    if malicious {
        let checks: Vec<&[u8]> = checks.chunks_exact(64).collect();
        let ok = all
            .par_iter_mut()
            .zip(checks.par_iter())
            .zip(layout.voles.par_iter())
            .enumerate()
            .map(|(i, ((leaves, check), &(o, w)))| {
                let alpha = punctured_index(delta, o, w);
                let mut hs = vec![[0u8; 32]; leaves.len()];
                let mut missing = [0u8; 32];
                missing.copy_from_slice(&check[..32]);
                for (x, (s, h)) in leaves.iter_mut().zip(hs.iter_mut()).enumerate() {
                    if x != alpha {
                        let (hx, next) = leaf_digest(i, x, *s);
                        *s = next;
                        *h = hx;
                        xor32(&mut missing, &hx);
                    }
                }
                hs[alpha] = missing;
                let c = leaf_commitment(i, &hs);
                c.iter()
                    .zip(&check[32..])
                    .fold(0u8, |a, (x, y)| a | (x ^ y))
                    == 0
            })
            .reduce(|| true, |a, b| a & b);
        if !ok {
            all.zeroize();
            return Err(OtError::PeerMisbehaved(
                "SoftSpokenOT: the receiver's punctured-PRF trees do not match its commitments"
                    .into(),
            ));
        }
    }
    Ok(all)
}

/// `Δ^(i)`: the `w` bits of `Δ` from bit `o`, as a leaf index.
fn punctured_index(delta: u128, o: usize, w: usize) -> usize {
    ((delta >> o) as usize) & ((1 << w) - 1)
}

/// Per-task scratch memory, zeroized when dropped: the leaf table of one small VOLE, its AES
/// tweaks, and the group's 128 columns (column `c` of block `j` at `cols[c·g + j]`).
#[derive(Default)]
struct Scratch {
    table: Vec<[u8; 16]>,
    tweaks: Vec<[u8; 16]>,
    cols: Vec<[u8; 16]>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.table.zeroize();
        self.cols.zeroize();
    }
}

/// One [`Scratch`] per rayon worker for a whole run, so the parallel tasks neither allocate nor
/// zeroize per task; everything is zeroized when the pool is dropped.
struct ScratchPool(Vec<Mutex<Scratch>>);

impl ScratchPool {
    fn new() -> Self {
        ScratchPool(
            (0..rayon::current_num_threads())
                .map(|_| Mutex::new(Scratch::default()))
                .collect(),
        )
    }

    /// Runs `f` with this worker's scratch (a fresh one off the pool or if it is busy).
    fn with<R>(&self, f: impl FnOnce(&mut Scratch) -> R) -> R {
        let slot = rayon::current_thread_index().and_then(|i| self.0.get(i));
        match slot.map(Mutex::try_lock) {
            Some(Ok(mut s)) => f(&mut s),
            _ => f(&mut Scratch::default()),
        }
    }
}

/// The leaf seeds of every small VOLE and the stream PRG: produces the VOLE columns of any
/// range of blocks.
struct Expander {
    k: usize,
    layout: Layout,
    /// Receiver: `seeds[i][x] = s_x`. Sender: `seeds[i][y] = s_{y ⊕ Δ^(i)}` for `y ≥ 1` and
    /// `seeds[i][0]` unused, so the same fold computes `v_b` (R) and `w_b` (S).
    seeds: Vec<Vec<u128>>,
    /// Per small VOLE: `⊕_x s_x` and, for each bit `b`, `⊕_{x : x_b = 1} s_x`.
    seed_sums: Vec<(u128, [u128; MAX_FIELD_BITS])>,
    punctured: bool,
    cipher: Aes128,
}

impl Drop for Expander {
    fn drop(&mut self) {
        self.seeds.zeroize();
        for (u, v) in self.seed_sums.iter_mut() {
            u.zeroize();
            v.zeroize();
        }
    }
}

impl Expander {
    fn new(k: usize, layout: Layout, seeds: Vec<Vec<u128>>, punctured: bool) -> Self {
        let seed_sums = seeds
            .iter()
            .map(|leaves| {
                let mut v = [0u128; MAX_FIELD_BITS];
                for (x, s) in leaves.iter().enumerate() {
                    for (b, vb) in v.iter_mut().enumerate() {
                        if (x >> b) & 1 == 1 {
                            *vb ^= s;
                        }
                    }
                }
                (xor_all(leaves), v)
            })
            .collect();
        Expander {
            k,
            layout,
            seeds,
            seed_sums,
            punctured,
            cipher: Aes128::new(&STREAM_KEY.into()),
        }
    }

    /// Small VOLE `i` (of width `W`, `N = 2^W` leaves; `P` = punctured, i.e. the sender) on
    /// the `sb` blocks `beta0 ..`, which sit at `j0 ..` in a group of `g`. Writes the VOLE's
    /// columns `o_i .. o_i + W` of `s.cols`: `v_b = ⊕_{x : x_b = 1} r_x` (the sender's relabeled
    /// leaves make this `w_b`, to which it adds `Δ_{o+b}·d`); the receiver also writes its
    /// corrections `d = u ⊕ c` with `u = ⊕_x r_x`.
    ///
    /// `r_x = π(z_x) ⊕ z_x` with `z_x = s_x ⊕ β`; the fold runs on the raw `π(z_x)`, and the
    /// `⊕ z_x` parts enter as per-column constants: `⊕_{x ∈ S} z_x = ⊕_{x ∈ S} s_x`, plus `β`
    /// when `|S|` is odd (only `S = {1}`, for `W = 1`).
    #[allow(clippy::too_many_arguments)]
    fn vole_w<const W: usize, const N: usize, const P: bool>(
        &self,
        i: usize,
        beta0: usize,
        j0: usize,
        sb: usize,
        g: usize,
        dir: &mut Dir<'_>,
        s: &mut Scratch,
    ) {
        let (o, _) = self.layout.voles[i];
        let start = usize::from(P);
        let seeds = &self.seeds[i][..N];
        let (seed_u, seed_v) = &self.seed_sums[i];
        let Scratch {
            table,
            tweaks,
            cols,
        } = s;
        // Leaf-major table: row x holds π(s_x ⊕ β) for the sb blocks. The sender has no leaf 0:
        // its row 0 is never encrypted and only ever receives XORs (its u is not used). The AES
        // batch is padded to a multiple of AES_BATCH (garbage past row N − 1): the backend
        // pipelines whole batches but encrypts a ragged tail one block at a time.
        tweaks.clear();
        tweaks.extend((beta0..beta0 + sb).map(|b| (b as u128).to_le_bytes()));
        let batch = ((N - start) * sb).next_multiple_of(AES_BATCH);
        table.resize(start * sb + batch, [0u8; 16]);
        for (row, seed) in table[..N * sb].chunks_exact_mut(sb).zip(seeds).skip(start) {
            for (z, t) in row.iter_mut().zip(tweaks.iter()) {
                *z = (u128::from_le_bytes(*t) ^ seed).to_le_bytes();
            }
        }
        self.cipher
            .encrypt_blocks(aes::Block::cast_slice_from_core_mut(
                &mut table[start * sb..start * sb + batch],
            ));
        // Fold the table, top bits first: the rows whose leaf index has bit b set XOR to column
        // o + b, and XOR-ing the upper half of the table onto the lower one removes bit b.
        // Two bits per pass (four quarters r0..r3: bit b−1 set in r2, r3; bit b−2 in r1, r3),
        // then one last single bit if W is odd; whole rows at a time, as flat byte slices that
        // the compiler turns into vector XORs.
        let mut b = W;
        while b >= 2 {
            let q = 1 << (b - 2);
            let (r01, r23) = table.split_at_mut(2 * q * sb);
            let (r0, r1) = r01.split_at_mut(q * sb);
            let (r2, r3) = r23.split_at_mut(q * sb);
            let (below, above) = cols.split_at_mut((o + b - 1) * g);
            // Start from the ⊕ z_x parts (W ≥ 2 here, so no β term).
            let ca = &mut above[j0..j0 + sb];
            ca.fill(seed_v[b - 1].to_le_bytes());
            let ca = ca.as_flattened_mut();
            let cb = &mut below[(o + b - 2) * g + j0..][..sb];
            cb.fill(seed_v[b - 2].to_le_bytes());
            let cb = cb.as_flattened_mut();
            if P && b == 2 {
                // Last pass of the sender: row 0 would only become u, which it does not use.
                for ((x1, x2), x3) in r1[..sb]
                    .chunks_exact(sb)
                    .zip(r2.chunks_exact(sb))
                    .zip(r3.chunks_exact(sb))
                {
                    for ((((a, c), y1), y2), y3) in ca
                        .iter_mut()
                        .zip(cb.iter_mut())
                        .zip(x1.as_flattened())
                        .zip(x2.as_flattened())
                        .zip(x3.as_flattened())
                    {
                        *a ^= y2 ^ y3;
                        *c ^= y1 ^ y3;
                    }
                }
                b -= 2;
                continue;
            }
            for (((x0, x1), x2), x3) in r0
                .chunks_exact_mut(sb)
                .zip(r1.chunks_exact(sb))
                .zip(r2.chunks_exact(sb))
                .zip(r3.chunks_exact(sb))
            {
                for (((((a, c), y0), y1), y2), y3) in ca
                    .iter_mut()
                    .zip(cb.iter_mut())
                    .zip(x0.as_flattened_mut().iter_mut())
                    .zip(x1.as_flattened())
                    .zip(x2.as_flattened())
                    .zip(x3.as_flattened())
                {
                    let t = y2 ^ y3;
                    *a ^= t;
                    *c ^= y1 ^ y3;
                    *y0 ^= y1 ^ t;
                }
            }
            b -= 2;
        }
        if b == 1 {
            let (r0, r1) = table.split_at_mut(sb);
            let c0 = &mut cols[o * g + j0..][..sb];
            // Column o: row 1, plus the ⊕ z_x parts (for W = 1 that is z_1 = s_1 ⊕ β).
            for (j, (c, r)) in c0.iter_mut().zip(&r1[..sb]).enumerate() {
                let k = if W == 1 {
                    seed_v[0] ^ (beta0 + j) as u128
                } else {
                    seed_v[0]
                };
                *c = (u128::from_le_bytes(*r) ^ k).to_le_bytes();
            }
            if !P {
                for (y0, y1) in r0
                    .as_flattened_mut()
                    .iter_mut()
                    .zip(r1[..sb].as_flattened())
                {
                    *y0 ^= y1;
                }
            }
        }
        match dir {
            Dir::Receive { c, corr } => {
                let run = &mut corr[(i * g + j0) * 16..][..sb * 16];
                for ((d, u), cj) in run
                    .chunks_exact_mut(16)
                    .zip(table.iter())
                    .zip(&c[j0..j0 + sb])
                {
                    d.copy_from_slice(&(u128::from_le_bytes(*u) ^ seed_u ^ cj).to_le_bytes());
                }
            }
            Dir::Send { delta, corr } => {
                let run = &corr[(i * g + j0) * 16..][..sb * 16];
                let mut masks = [0u128; W];
                for (b, mask) in masks.iter_mut().enumerate() {
                    *mask = bit_mask(*delta, o + b);
                }
                for (j, d) in run.chunks_exact(16).enumerate() {
                    let d = word(d);
                    for (b, mask) in masks.iter().enumerate() {
                        let z = &mut cols[(o + b) * g + j0 + j];
                        *z = (u128::from_le_bytes(*z) ^ (d & mask)).to_le_bytes();
                    }
                }
                masks.zeroize();
            }
        }
    }

    /// One group of `blocks.len() ≤ GROUP` blocks from block `beta0`: runs every small VOLE,
    /// then gathers each block's 128 column words and, per `finish`, transposes them into
    /// `blocks` (rows: the OTs' `t_i` / `q_i`), hashes them first (returned), or stores them
    /// untransposed (word `c` of block `j` = column `c`).
    fn expand_group(
        &self,
        beta0: usize,
        blocks: &mut [[u128; BLOCK]],
        mut dir: Dir<'_>,
        finish: Finish<'_>,
        s: &mut Scratch,
    ) -> ColumnHashes {
        let g = blocks.len();
        let sub = sub_blocks(self.k);
        s.cols.resize(BLOCK * g, [0u8; 16]);
        for (i, &(_, w)) in self.layout.voles.iter().enumerate() {
            let mut j0 = 0;
            while j0 < g {
                let sb = sub.min(g - j0);
                macro_rules! go {
                    ($w:literal, $n:literal) => {
                        if self.punctured {
                            self.vole_w::<$w, $n, true>(i, beta0 + j0, j0, sb, g, &mut dir, s)
                        } else {
                            self.vole_w::<$w, $n, false>(i, beta0 + j0, j0, sb, g, &mut dir, s)
                        }
                    };
                }
                match w {
                    1 => go!(1, 2),
                    2 => go!(2, 4),
                    3 => go!(3, 8),
                    4 => go!(4, 16),
                    5 => go!(5, 32),
                    6 => go!(6, 64),
                    7 => go!(7, 128),
                    _ => go!(8, 256),
                }
                j0 += sb;
            }
        }
        let mut acc = [Gf128::ZERO; BLOCK];
        let chi = match finish {
            Finish::HashTranspose { chal, pad } => challenges(chal, beta0, g, pad),
            _ => Vec::new(),
        };
        let mut lo = [0u64; BLOCK];
        let mut hi = [0u64; BLOCK];
        let mut tmp = [Gf128::ZERO; BLOCK];
        for (j, blk) in blocks.iter_mut().enumerate() {
            if let Finish::Raw = finish {
                for (col, w) in s.cols.chunks_exact(g).zip(blk.iter_mut()) {
                    *w = u128::from_le_bytes(col[j]);
                }
                continue;
            }
            for ((col, l), h) in s.cols.chunks_exact(g).zip(lo.iter_mut()).zip(hi.iter_mut()) {
                let w = u128::from_le_bytes(col[j]);
                *l = w as u64;
                *h = (w >> 64) as u64;
            }
            if let Some(x) = chi.get(j) {
                for ((t, l), h) in tmp.iter_mut().zip(&lo).zip(&hi) {
                    *t = Gf128(u128::from(*l) | (u128::from(*h) << 64));
                }
                mul_add_slices(&mut acc, &tmp, *x);
            }
            transpose_halves(&mut lo, &mut hi, blk);
        }
        lo.zeroize();
        hi.zeroize();
        for t in tmp.iter_mut() {
            t.0.zeroize();
        }
        acc
    }
}

/// What [`Expander::expand_group`] does with a block's columns.
#[derive(Clone, Copy)]
enum Finish<'a> {
    /// Transpose into rows.
    Transpose,
    /// Hash the columns with `χ_β` from `chal` (1 for block `pad`), then transpose.
    HashTranspose {
        chal: &'a Aes128,
        pad: Option<usize>,
    },
    /// Store the columns untransposed (the malicious receiver hashes them later).
    Raw,
}

/// What a party adds to a group: the receiver its choice words and the corrections it writes
/// (small VOLE `i`'s run at `[i·g ..][..g]`, 16 bytes each); the sender `Δ` and the received
/// corrections.
enum Dir<'a> {
    Receive { c: &'a [u128], corr: &'a mut [u8] },
    Send { delta: u128, corr: &'a [u8] },
}

/// Two Eklundh rounds (`2B`, then `B`) in one pass over each group of four `B`-row strips of a
/// 64-bit half: swaps the off-diagonal sub-blocks (`m2`, `m1` select the bit positions `p` with
/// `p & 2B = 0`, resp. `p & B = 0`). Halving the passes over memory is what makes it faster.
#[inline(always)]
fn eklundh_double_round<const B: usize>(half: &mut [u64; BLOCK], m2: u64, m1: u64) {
    #[inline(always)]
    fn swap(x: &mut u64, y: &mut u64, s: usize, mask: u64) {
        let t = ((*x >> s) ^ *y) & mask;
        *y ^= t;
        *x ^= t << s;
    }
    for group in half.chunks_exact_mut(4 * B) {
        let (g01, g23) = group.split_at_mut(2 * B);
        let (r0, r1) = g01.split_at_mut(B);
        let (r2, r3) = g23.split_at_mut(B);
        for (((a, b), c), d) in r0
            .iter_mut()
            .zip(r1.iter_mut())
            .zip(r2.iter_mut())
            .zip(r3.iter_mut())
        {
            let (mut a0, mut b0, mut c0, mut d0) = (*a, *b, *c, *d);
            swap(&mut a0, &mut c0, 2 * B, m2);
            swap(&mut b0, &mut d0, 2 * B, m2);
            swap(&mut a0, &mut b0, B, m1);
            swap(&mut c0, &mut d0, B, m1);
            (*a, *b, *c, *d) = (a0, b0, c0, d0);
        }
    }
}

/// Transposes a 128×128 bit block in place, like [`crate::transpose::transpose128`] (bit `j` of
/// `m[i]` becomes the old bit `i` of `m[j]`), via [`transpose_halves`].
pub(crate) fn transpose_block(m: &mut [u128; BLOCK]) {
    let mut lo = [0u64; BLOCK];
    let mut hi = [0u64; BLOCK];
    for ((l, h), w) in lo.iter_mut().zip(hi.iter_mut()).zip(m.iter()) {
        *l = *w as u64;
        *h = (*w >> 64) as u64;
    }
    transpose_halves(&mut lo, &mut hi, m);
    lo.zeroize();
    hi.zeroize();
}

/// Transposes the 128×128 bit block whose row `i` is `lo[i] | hi[i] << 64` into `out` (Eklundh's
/// recursive block swap, as [`crate::transpose::transpose128`]), on the two 64-bit halves
/// separately: the first round (`S = 64`) only swaps halves, and the other six never cross a
/// half, so they run on `u64` lanes, two rounds per pass over memory.
fn transpose_halves(lo: &mut [u64; BLOCK], hi: &mut [u64; BLOCK], out: &mut [u128; BLOCK]) {
    let (hi_top, _) = hi.split_at_mut(64);
    let (_, lo_bottom) = lo.split_at_mut(64);
    hi_top.swap_with_slice(lo_bottom);
    for half in [&mut *lo, &mut *hi] {
        eklundh_double_round::<16>(half, 0x0000_0000_FFFF_FFFF, 0x0000_FFFF_0000_FFFF);
        eklundh_double_round::<4>(half, 0x00FF_00FF_00FF_00FF, 0x0F0F_0F0F_0F0F_0F0F);
        eklundh_double_round::<1>(half, 0x3333_3333_3333_3333, 0x5555_5555_5555_5555);
    }
    for ((w, l), h) in out.iter_mut().zip(lo.iter()).zip(hi.iter()) {
        *w = u128::from(*l) | (u128::from(*h) << 64);
    }
}

/// `χ_β` for blocks `beta0 .. beta0 + count`: `AES_σ(β)`, and 1 for the padding block.
fn challenges(chal: &Aes128, beta0: usize, count: usize, pad: Option<usize>) -> Vec<Gf128> {
    let mut buf: Vec<[u8; 16]> = (beta0..beta0 + count)
        .map(|b| (b as u128).to_le_bytes())
        .collect();
    chal.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut buf));
    buf.iter()
        .enumerate()
        .map(|(j, x)| {
            if pad == Some(beta0 + j) {
                Gf128::ONE
            } else {
                Gf128::from_bytes(*x)
            }
        })
        .collect()
}

type ColumnHashes = [Gf128; BLOCK];

/// `Σ_β χ_β · (column j of block β)` for every column `j`, over `blocks` (still column-major).
fn hash_blocks(
    chal: &Aes128,
    beta0: usize,
    blocks: &[[u128; BLOCK]],
    pad: Option<usize>,
) -> ColumnHashes {
    let chi = challenges(chal, beta0, blocks.len(), pad);
    let mut acc = [Gf128::ZERO; BLOCK];
    let mut tmp = [Gf128::ZERO; BLOCK];
    for (blk, x) in blocks.iter().zip(chi) {
        for (t, w) in tmp.iter_mut().zip(blk) {
            *t = Gf128(*w);
        }
        mul_add_slices(&mut acc, &tmp, x);
    }
    for t in tmp.iter_mut() {
        t.0.zeroize();
    }
    acc
}

fn add_hashes(mut a: ColumnHashes, b: ColumnHashes) -> ColumnHashes {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
    a
}

/// Runs `n` correlated OTs as the SoftSpokenOT *sender* (holder of `Δ`; the base-OT receiver).
/// Picks a random nonzero `Δ`; returns `Δ` and `q_i` with the receiver holding
/// `t_i = q_i ⊕ c_i·Δ` — the same output as [`crate::iknp_cot_send`].
///
/// # Errors
/// Link failure; the receiver announced a different `n`, `k` or mode, or (malicious mode) failed
/// a consistency check ([`OtError::PeerMisbehaved`]); a malformed message
/// ([`OtError::InvalidMessage`]); base-OT failure; `k` outside `1..=MAX_FIELD_BITS` or
/// `n > MAX_COTS` ([`OtError::Usage`]). On an error the caller should abort the link.
pub fn softspoken_cot_send(
    link: &mut dyn Link,
    n: usize,
    params: SoftSpokenParams,
) -> Result<CotSender, OtError> {
    check_request(n, &params)?;
    read_header(&link.recv()?, n, &params)?;
    let layout = Layout::new(params.k);
    let m = layout.count();

    let mut delta = 0u128;
    while delta == 0 {
        delta = random_word()?;
    }
    let mut choices: Vec<bool> = (0..KAPPA).map(|j| (delta >> j) & 1 == 0).collect();
    let keys = base_ot_receive(link, &choices);
    choices.zeroize();
    let mut keys = keys?;
    let trees = rebuild_trees(&layout, &keys, delta, &link.recv()?, params.malicious);
    keys.zeroize();
    let mut seeds = trees?;
    for (leaves, &(o, w)) in seeds.iter_mut().zip(&layout.voles) {
        let alpha = punctured_index(delta, o, w);
        let relabeled: Vec<u128> = (0..leaves.len())
            .map(|y| if y == 0 { 0 } else { leaves[y ^ alpha] })
            .collect();
        leaves.zeroize();
        *leaves = relabeled;
    }
    let expander = Expander::new(params.k, layout, seeds, true);

    // The challenge seed is fixed now and revealed only after every correction has arrived.
    let mut sigma = [0u8; 16];
    if params.malicious {
        random_bytes(&mut sigma)?;
    }
    let chal = Aes128::new(&sigma.into());

    let total = (n + usize::from(params.malicious) * MALICIOUS_PAD_OTS).div_ceil(BLOCK);
    let pad = params.malicious.then(|| total - 1);
    let mut q = Zeroizing::new(vec![0u128; total * BLOCK]);
    let (blocks, _) = q.as_chunks_mut::<BLOCK>();
    let cb = chunk_blocks(params.k);
    let mut hq = [Gf128::ZERO; BLOCK];
    let scratch = ScratchPool::new();
    let mut b0 = 0;
    while b0 < total {
        let nb = cb.min(total - b0);
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "SoftSpokenOT corrections");
        let corr = r.take(nb * m * 16)?;
        r.finish()?;
        let h = blocks[b0..b0 + nb]
            .par_chunks_mut(GROUP)
            .zip(corr.par_chunks(GROUP * m * 16))
            .enumerate()
            .map(|(gi, (out, corr))| {
                let beta0 = b0 + gi * GROUP;
                let finish = if params.malicious {
                    Finish::HashTranspose { chal: &chal, pad }
                } else {
                    Finish::Transpose
                };
                scratch.with(|s| {
                    expander.expand_group(beta0, out, Dir::Send { delta, corr }, finish, s)
                })
            })
            .reduce(|| [Gf128::ZERO; BLOCK], add_hashes);
        hq = add_hashes(hq, h);
        b0 += nb;
    }

    if params.malicious {
        link.send(&sigma)?;
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "SoftSpokenOT check response");
        let h_c = word(r.take(16)?);
        let h_t = r.take(BLOCK * 16)?;
        r.finish()?;
        let diff = hq
            .iter()
            .zip(h_t.chunks_exact(16))
            .enumerate()
            .fold(0u128, |acc, (j, (hq_j, h_j))| {
                acc | (hq_j.0 ^ word(h_j) ^ (h_c & bit_mask(delta, j)))
            });
        for h in hq.iter_mut() {
            h.0.zeroize();
        }
        if diff != 0 {
            return Err(OtError::PeerMisbehaved(
                "SoftSpokenOT consistency check failed: the receiver's corrections do not \
                 encode one choice vector"
                    .into(),
            ));
        }
    }
    q[n..].zeroize();
    q.truncate(n);
    Ok(CotSender::from_parts(delta, std::mem::take(&mut *q)))
}

/// Runs `choices.len()` correlated OTs as the SoftSpokenOT *receiver* (the base-OT sender):
/// returns `t_i = q_i ⊕ c_i·Δ` — the same output as [`crate::iknp_cot_receive`].
///
/// # Errors
/// Link failure; base-OT failure; a malformed challenge (malicious mode,
/// [`OtError::InvalidMessage`]); `k` outside `1..=MAX_FIELD_BITS` or more than [`MAX_COTS`]
/// choices ([`OtError::Usage`]); RNG failure. On an error the caller should abort the link.
pub fn softspoken_cot_receive(
    link: &mut dyn Link,
    choices: &[bool],
    params: SoftSpokenParams,
) -> Result<CotReceiver, OtError> {
    let n = choices.len();
    check_request(n, &params)?;
    link.send(&header(n, &params))?;
    let layout = Layout::new(params.k);
    let m = layout.count();

    let mut keys = base_ot_send(link, KAPPA)?;
    let (seeds, tree_msg) = build_trees(&layout, &keys, params.malicious);
    keys.zeroize();
    let expander = Expander::new(params.k, layout, seeds, false);
    link.send(&tree_msg)?;

    let total = (n + usize::from(params.malicious) * MALICIOUS_PAD_OTS).div_ceil(BLOCK);
    let pad = params.malicious.then(|| total - 1);
    let mut c = Zeroizing::new(vec![0u128; total]);
    for (w, bits) in c.iter_mut().zip(choices.chunks(BLOCK)) {
        let mut bytes = [0u8; 16];
        for (byte, eight) in bytes.iter_mut().zip(bits.chunks(8)) {
            *byte = eight
                .iter()
                .enumerate()
                .fold(0u8, |acc, (r, &bit)| acc | (u8::from(bit) << r));
        }
        *w = u128::from_le_bytes(bytes);
        bytes.zeroize();
    }
    if let Some(p) = pad {
        c[p] = random_word()?;
    }

    let mut t = Zeroizing::new(vec![0u128; total * BLOCK]);
    let (blocks, _) = t.as_chunks_mut::<BLOCK>();
    let cb = chunk_blocks(params.k);
    let scratch = ScratchPool::new();
    let mut b0 = 0;
    while b0 < total {
        let nb = cb.min(total - b0);
        let mut msg = vec![0u8; nb * m * 16];
        blocks[b0..b0 + nb]
            .par_chunks_mut(GROUP)
            .zip(msg.par_chunks_mut(GROUP * m * 16))
            .enumerate()
            .for_each(|(gi, (out, corr))| {
                let beta0 = b0 + gi * GROUP;
                let c = &c[beta0..beta0 + out.len()];
                // The malicious receiver can hash only once the challenge is known.
                let finish = if params.malicious {
                    Finish::Raw
                } else {
                    Finish::Transpose
                };
                scratch.with(|s| {
                    expander.expand_group(beta0, out, Dir::Receive { c, corr }, finish, s)
                });
            });
        link.send(&msg)?;
        b0 += nb;
    }

    if params.malicious {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "SoftSpokenOT challenge");
        let mut sigma = [0u8; 16];
        sigma.copy_from_slice(r.take(16)?);
        r.finish()?;
        let chal = Aes128::new(&sigma.into());
        let h_t = blocks
            .par_chunks_mut(HASH_TASK_BLOCKS)
            .enumerate()
            .map(|(ti, out)| {
                let h = hash_blocks(&chal, ti * HASH_TASK_BLOCKS, out, pad);
                out.iter_mut().for_each(transpose_block);
                h
            })
            .reduce(|| [Gf128::ZERO; BLOCK], add_hashes);
        let h_c = challenges(&chal, 0, total, pad)
            .into_iter()
            .zip(c.iter())
            .fold(Gf128::ZERO, |acc, (x, &w)| acc + x * Gf128(w));
        let mut resp = Vec::with_capacity(16 * (BLOCK + 1));
        resp.extend_from_slice(&h_c.to_bytes());
        for h in &h_t {
            resp.extend_from_slice(&h.to_bytes());
        }
        link.send(&resp)?;
    }
    t[n..].zeroize();
    t.truncate(n);
    Ok(CotReceiver::from_parts(
        choices.to_vec(),
        std::mem::take(&mut *t),
    ))
}
