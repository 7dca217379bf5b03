//! Silent random VOLE over GF(2^128), with an optional small noise domain (subfield VOLE).
//!
//! The parties end with vectors of length `m`: the *sender* holds a global `Δ ∈ GF(2^128)` and
//! `B`, the *receiver* holds `A` and `C` with
//!
//! ```text
//! C_i = B_i + A_i·Δ        (every coordinate, arithmetic in GF(2^128))
//! ```
//!
//! and `A` pseudo-random. With `noise_bits = ℓ < 128`, every `A_i` lies in the GF(2)-subspace of
//! elements whose bits `ℓ..128` are zero (ℓ-bit strings embedded in GF(2^128)): this is the
//! "subfield VOLE" RR22's low-communication mode needs, where the receiver sends `P + A` at ℓ bits
//! per entry. (The subspace is not a subfield, but everything RR22 and the dual-LPN argument use
//! is GF(2)-linearity in `A` and the fact that `a·Δ` is uniform for `a ≠ 0`: the noise is ℓ
//! parallel binary LPN instances with a shared support, exactly as for a GF(2^ℓ) subfield.)
//!
//! # Construction (Boyle–Couteau–Gilboa–Ishai–Kohl–Rindal–Scholl, CCS 2019, §5 "silent" VOLE)
//!
//! 1. **Dual LPN.** `A = u·Gᵀ`, `C = w·Gᵀ`, `B = v·Gᵀ` for the dual encoding `Gᵀ` of an
//!    Expand-Accumulate code ([`ExAccCode`], "ExAcc7": expander weight 7, rate 1/2, `N = 2n`,
//!    BCG+22 CRYPTO 2022 §3), where `u ∈ GF(2^128)^N` is *regular* sparse noise (one nonzero
//!    `β_j` per block) and `w = v + u·Δ`. The code seed is public; in the checked (malicious)
//!    mode it comes from a coin toss (see *Code seed*).
//! 2. **Noise weight.** `t ≥` [`NOISE_WEIGHT`] `= 1736` blocks, so that a linear test tells `A`
//!    from uniform with advantage at most `2^-128` for every shape (see *Linear attacks*).
//!    The code length is at least `2·`[`MIN_CODE_N`] so small `m` keep a healthy LPN instance
//!    (the extra outputs are simply dropped).
//! 3. **Multi-point VOLE** `w = v + u·Δ` from GGM trees ([`crate::pprf::mpvole_send`]): one
//!    tree of `2^d` leaves per noise block (the last one truncated to the code length), the
//!    punctured leaf corrected by a base VOLE `γ_j = δ_j + β_j·Δ`.
//! 4. **Base VOLE** from `ℓ` correlated OTs per block (Gilboa's multiplication): the COT
//!    receiver's choice bits are the bits of `β_j`, and with `t_{j,k} = q_{j,k} + c_{j,k}·Δ`,
//!    `γ_j = Σ_k t_{j,k}·x^k = Σ_k q_{j,k}·x^k + β_j·Δ`.
//! 5. The COTs (`t·d` for the trees plus `t·ℓ` for the base VOLE) come from SoftSpokenOT
//!    ([`crate::softspoken`], k = 4: 32 bits per OT), with its malicious check when checked.
//!
//! Messages: the receiver opens with `"VOLE" | u64 m | u8 ℓ | u8 checked`, the sender answers
//! `"VOLS" | seed`, then the COT extension and the PPRF run. Checked, the hello also carries the
//! receiver's seed commitment and the receiver opens it (`"VOLO" | share`) after `"VOLS"`.
//!
//! # Linear attacks: why `t ≥ 1736`
//!
//! A linear test is a nonzero `x ∈ GF(2)^n`: `⟨A, x⟩ = ⟨u, v⟩` with `v = Gᵀx`, a nonzero
//! codeword of ExAcc7, so `v` has weight at least `δN`, `δ` the code's relative minimum
//! distance (a test over GF(2^128) is no better: a binary code keeps its minimum distance over
//! an extension field). Tree `j` (a block of `b_j ≤ 2^d` positions, noise `β_j ≠ 0` at a uniform `α_j`)
//! adds `v_{α_j}·β_j`; it is *hit* when `v_{α_j} = 1`, with probability `w_j / b_j` for `w_j` of
//! `v`'s weight in the block.
//!
//! * **GF(2^128) noise** (ℓ = 128): `⟨u, v⟩` is the sum of the hit trees' `β_j`, independent
//!   uniform nonzero values: within `2^-128` of uniform once one tree is hit, and `0` when none
//!   is. The test's advantage is `Pr[no hit] = Π_j (1 − w_j/b_j)` (up to `2^-128`).
//! * **ℓ-bit noise** (the low-communication subspace): a GF(2)-linear test on the `ℓ·n` bits of
//!   `A` meets tree `j` as `⟨y_j, β_j⟩` for the test's pattern `y_j ∈ GF(2)^ℓ` at `α_j`. With
//!   `β_j` uniform nonzero its bias is `1` for `y_j = 0` and `−1/(2^ℓ − 1)` otherwise, so a tree
//!   contributes at most `1 − Pr[y_j ≠ 0]·2^ℓ/(2^ℓ − 1) ≤ 1 − w_j/b_j` — the bound above (ℓ = 1
//!   gives binary LPN's `1 − 2w_j/b_j`). A tree the test covers wholly contributes at most
//!   `1/(2^ℓ − 1)` in absolute value, less than the same weight spread over the other trees
//!   costs the test (`≥ e^-2` per tree's worth of weight) once `ℓ ≥ 8`; RR22 uses `ℓ ≥ 64`.
//!
//! With `Σ w_j ≥ δN` and `b_j ≤ 2^d`, the concavity of `log(1 − x)` (AM–GM) bounds the product
//! by `(1 − δN/(t·2^d))^t`: [`LpnShape::linear_attack_bits`] `= −t·log2(1 − δN/(t·2^d))`, and
//! with full trees (`N = t·2^d`) [`linear_attack_bits`] `= −t·log2(1 − δ)`. The worst shape has a
//! last tree of one or two leaves, where `N/(t·2^d)` tends to `(t − 1)/t`: there `t = 1736` gives 128.39
//! bits and `t = 1728` 127.80, so [`NOISE_WEIGHT`] is 1736, the least multiple of 8 that keeps
//! every shape at 128 bits (`⌈128 / −log2(1 − δ)⌉ = 1730` for full trees).
//!
//! The rule `t = ⌈−128 / log2(1 − 2δ)⌉` of libOTe (`getRegNoiseWeight`) and SecretFlow's yacl
//! is the bias `(1 − 2δ)^t` of *binary* noise, where a hit flips the test's parity; over
//! GF(2^128) only "no hit" helps the test, and at δ = 0.05 that rule's `t` (848–1695 by shape)
//! gave 63–125 bits.
//!
//! `δ` = [`EXACC7_MIN_DISTANCE`] = 0.05 is an estimate, not a proven bound: the value libOTe's
//! `EAConfigure` uses for ExAcc7 (first at this rate 1/2, code length `2n`, now at rate 1/5,
//! noted there as "known to be high but likely overall accurate") and SecretFlow's yacl
//! (`kMinDistanceRatio`, code length `2n`). A rate-1/2 code has less redundancy than a
//! rate-1/5 one, so the rate-1/5 figure is no license to go higher here; for comparison, a
//! random linear code of rate 1/2 reaches the Gilbert–Varshamov distance 0.11.
//!
//! # Code seed
//!
//! Unchecked, the sender picks the seed. Checked, neither party may pick it (a party searching
//! seeds for a code of low distance would weaken the LPN instance): the receiver commits to a
//! random 32-byte share `s_R` in its hello (`SHA-256(domain ‖ s_R)`), the sender answers with
//! its own share `s_S`, the receiver opens `s_R`, the sender checks the opening
//! ([`OtError::PeerMisbehaved`] if it does not match), and the seed is the first 16 bytes of
//! `SHA-256(domain ‖ s_S ‖ s_R)`. The sender chose `s_S` without knowing `s_R`, and the receiver
//! was bound to `s_R` before it saw `s_S`.
//!
//! # Consistency check (`checked = true`)
//!
//! The check of Weng–Yang–Katz–Wang, *Wolverine* (S&P 2021) §4 / Yang et al., *Ferret* (CCS 2020)
//! Fig. 7, against a sender whose tree sums or corrections are inconsistent: after the
//! expansion the receiver picks a fresh seed for random weights `χ_i ∈ GF(2^128)` (AES-CTR) and
//! sends it with `x′ = Σ_j χ_{p_j}·β_j + y*`, where `(y*, z* = v* + y*·Δ)` is one more base VOLE
//! (128 further COTs). The sender returns `SHA-256(Σ χ_i·v_i + v* + x′·Δ)`; the receiver
//! compares it with `SHA-256(Σ χ_i·w_i + z*)` and fails with
//! [`OtError::PeerMisbehaved`] on a mismatch. A cheating sender passes with probability
//! ≤ 2^-128 + (selective failure: it learns one predicate of the noise positions, the leakage the
//! Wolverine/Ferret analysis allows). `v*` hides the sender's reply.
//!
//! # Security model
//!
//! Unchecked: semi-honest, like the COTs and the PPRF underneath. Checked: the sender's PPRF
//! messages are verified as above; the correlated OTs must then also come from a maliciously
//! secure extension for the whole VOLE to be malicious-secure. Every peer message is
//! bounds-checked and parameter mismatches are typed errors.

use crate::OtError;
use crate::pprf::{MAX_DEPTH, MAX_LEAVES, complement_choices, mpvole_receive, mpvole_send};
use crate::softspoken::{SoftSpokenParams, softspoken_cot_receive, softspoken_cot_send};
use blindjoin_crypto::exacc::{ExAccCode, ROWS_PER_TASK};
use blindjoin_crypto::gf128::Gf128;
use blindjoin_crypto::random_bytes;
use blindjoin_link::{Link, Reader, put_u64};
use rayon::prelude::*;
use zeroize::Zeroize;

/// Regular noise weight (number of GGM trees), at least: the least multiple of 8 for which every
/// shape's [`LpnShape::linear_attack_bits`] reaches [`LINEAR_ATTACK_BITS`] (see the module docs,
/// *Linear attacks*).
pub const NOISE_WEIGHT: usize = 1736;

/// ExAcc7's relative minimum distance, as libOTe and SecretFlow estimate it (see the module
/// docs); the noise weight is chosen from it.
pub const EXACC7_MIN_DISTANCE: f64 = 0.05;

/// Security against linear attacks the noise weight is chosen for (bits).
pub const LINEAR_ATTACK_BITS: f64 = 128.0;

/// Bits of security against linear attacks of regular noise in `t` full trees:
/// `−t·log2(1 − δ)` with δ = [`EXACC7_MIN_DISTANCE`] (a test's advantage is at most the chance
/// that no tree is hit; see the module docs).
pub fn linear_attack_bits(t: usize) -> f64 {
    linear_attack_bits_filled(t, 1.0)
}

/// [`linear_attack_bits`] when the code length covers the fraction `fill = N/(t·2^d)` of the
/// trees' leaves: `−t·log2(1 − δ·fill)`.
fn linear_attack_bits_filled(t: usize, fill: f64) -> f64 {
    -(t as f64) * (1.0 - EXACC7_MIN_DISTANCE * fill).log2()
}

/// Smallest code message size: shorter VOLEs are cut from one of this length.
pub const MIN_CODE_N: usize = 1 << 13;

/// Largest VOLE length one call produces (the code length `2m` must fit the PPRF).
pub const MAX_VOLE_LEN: usize = MAX_LEAVES / 2;

const HELLO_MAGIC: &[u8] = blindjoin_link::wire::ids::VOLE_HELLO;
const SEED_MAGIC: &[u8] = blindjoin_link::wire::ids::VOLE_SEED;
const CHECK_MAGIC: &[u8] = blindjoin_link::wire::ids::VOLE_CHECK;
const REPLY_MAGIC: &[u8] = blindjoin_link::wire::ids::VOLE_REPLY;
const OPEN_MAGIC: &[u8] = blindjoin_link::wire::ids::VOLE_OPEN;
const CHECK_DOMAIN: &[u8] = b"blindjoin/vole/check\0";
const SHARE_DOMAIN: &[u8] = b"blindjoin/vole/seed-share\0";
const SEED_DOMAIN: &[u8] = b"blindjoin/vole/code-seed\0";

/// COTs for the check's extra base VOLE `(y*, z*)`.
const CHECK_COTS: usize = 128;

/// The sender's half: `Δ` and `B`, with the receiver holding `C = B + A·Δ`. Zeroized on drop.
pub struct VoleSender {
    delta: Gf128,
    b: Vec<Gf128>,
}

impl VoleSender {
    /// The global key `Δ`.
    pub fn delta(&self) -> Gf128 {
        self.delta
    }

    /// `B`.
    pub fn b(&self) -> &[Gf128] {
        &self.b
    }

    /// Length `m`.
    pub fn len(&self) -> usize {
        self.b.len()
    }

    /// `m == 0`.
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
}

impl Drop for VoleSender {
    fn drop(&mut self) {
        self.delta.0.zeroize();
        zeroize_field(&mut self.b);
    }
}

/// The receiver's half: `A` (ℓ-bit values when `noise_bits = ℓ`) and `C = B + A·Δ`. Zeroized
/// on drop.
pub struct VoleReceiver {
    a: Vec<Gf128>,
    c: Vec<Gf128>,
}

impl VoleReceiver {
    /// `A`.
    pub fn a(&self) -> &[Gf128] {
        &self.a
    }

    /// `C`.
    pub fn c(&self) -> &[Gf128] {
        &self.c
    }

    /// Length `m`.
    pub fn len(&self) -> usize {
        self.c.len()
    }

    /// `m == 0`.
    pub fn is_empty(&self) -> bool {
        self.c.is_empty()
    }
}

impl Drop for VoleReceiver {
    fn drop(&mut self) {
        zeroize_field(&mut self.a);
        zeroize_field(&mut self.c);
    }
}

/// The receiver's VOLE with `A` encoded and `C` still to do ([`vole_receive_a_first`]).
pub struct VoleReceiverA {
    a: Vec<Gf128>,
    /// The length-`N` noisy vector `w` whose dual encoding is `C`.
    w: Vec<u128>,
    code: ExAccCode,
    m: usize,
}

impl VoleReceiverA {
    /// `A`.
    pub fn a(&self) -> &[Gf128] {
        &self.a
    }

    /// Length `m`.
    pub fn len(&self) -> usize {
        self.a.len()
    }

    /// `m == 0`.
    pub fn is_empty(&self) -> bool {
        self.a.is_empty()
    }

    /// Dual-encodes `w` into `C` (in parallel), giving the finished VOLE.
    ///
    /// # Errors
    /// Only on an internal length mismatch, or if `C`'s encoding was split off already
    /// ([`OtError::Usage`]).
    pub fn encode_c(mut self) -> Result<VoleReceiver, OtError> {
        let c = self.split_c()?.encode()?;
        self.with_c(c)
    }

    /// Splits `C`'s dual encoding off, to run on other cores while `A` is used (RR22 sends `A`
    /// as soon as its OKVS is solved, which may be before or after `C` is ready). Finish with
    /// [`CEncoding::encode`] and [`VoleReceiverA::with_c`].
    ///
    /// # Errors
    /// [`OtError::Usage`] if it was split off already.
    pub fn split_c(&mut self) -> Result<CEncoding, OtError> {
        if self.w.is_empty() && self.m > 0 {
            return Err(OtError::Usage("C's encoding was already split off".into()));
        }
        Ok(CEncoding {
            w: std::mem::take(&mut self.w),
            code: self.code.clone(),
            m: self.m,
        })
    }

    /// The finished VOLE, with `c` from [`CEncoding::encode`].
    ///
    /// # Errors
    /// [`OtError::Usage`] if `c` is not `m` long.
    pub fn with_c(mut self, mut c: EncodedC) -> Result<VoleReceiver, OtError> {
        if c.0.len() != self.m {
            return Err(OtError::Usage(format!(
                "C has {} entries, the VOLE {}",
                c.0.len(),
                self.m
            )));
        }
        let c = std::mem::take(&mut c.0);
        let a = std::mem::take(&mut self.a);
        Ok(VoleReceiver { a, c })
    }
}

/// The receiver's dual encoding of `C`, split off a [`VoleReceiverA`].
pub struct CEncoding {
    w: Vec<u128>,
    code: ExAccCode,
    m: usize,
}

impl CEncoding {
    /// Dual-encodes `w` into `C` (in parallel on the rayon pool).
    ///
    /// # Errors
    /// Only on an internal length mismatch ([`OtError::Usage`]).
    pub fn encode(mut self) -> Result<EncodedC, OtError> {
        let mut c = vec![0u128; self.code.n()];
        let encoded = self.code.dual_encode(&mut self.w, &mut c);
        if let Err(e) = encoded {
            c.zeroize();
            return Err(OtError::Usage(e.to_string()));
        }
        if let Some(tail) = c.get_mut(self.m..) {
            tail.zeroize();
        }
        c.truncate(self.m);
        Ok(EncodedC(c.into_iter().map(Gf128).collect()))
    }
}

/// `C`, from [`CEncoding::encode`], for [`VoleReceiverA::with_c`]; zeroized if dropped instead
/// (a run that fails between the two).
pub struct EncodedC(Vec<Gf128>);

impl Drop for EncodedC {
    fn drop(&mut self) {
        zeroize_field(&mut self.0);
    }
}

impl Drop for CEncoding {
    fn drop(&mut self) {
        self.w.zeroize();
    }
}

impl Drop for VoleReceiverA {
    fn drop(&mut self) {
        zeroize_field(&mut self.a);
        self.w.zeroize();
    }
}

fn zeroize_field(v: &mut [Gf128]) {
    for x in v.iter_mut() {
        x.0.zeroize();
    }
}

/// The LPN instance for a VOLE of length `m`: code message size `n`, code length `big_n = 2n`,
/// `t` trees of depth `d` (the last holding `big_n − (t−1)·2^d` leaves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LpnShape {
    /// Code message size (≥ `m`).
    pub n: usize,
    /// Code length `2n`.
    pub big_n: usize,
    /// Noise weight = number of trees.
    pub t: usize,
    /// Tree depth.
    pub d: usize,
}

impl LpnShape {
    /// The shape used for a VOLE of length `m`.
    ///
    /// # Errors
    /// [`OtError::Usage`] when `m > MAX_VOLE_LEN`.
    pub fn for_len(m: usize) -> Result<Self, OtError> {
        if m > MAX_VOLE_LEN {
            return Err(OtError::Usage(format!(
                "VOLE of length {m} exceeds the maximum {MAX_VOLE_LEN}; split the input"
            )));
        }
        let n = m.max(MIN_CODE_N);
        let big_n = 2 * n;
        let mut d = 1;
        while d < MAX_DEPTH && big_n.div_ceil(1 << (d + 1)) >= NOISE_WEIGHT {
            d += 1;
        }
        Ok(LpnShape {
            n,
            big_n,
            t: big_n.div_ceil(1 << d),
            d,
        })
    }

    /// Bits of security against linear attacks of this shape's noise: `−t·log2(1 − δN/(t·2^d))`,
    /// which a truncated last tree lowers below [`linear_attack_bits`]`(t)` (module docs).
    pub fn linear_attack_bits(&self) -> f64 {
        let leaves = (self.t as f64) * (1u64 << self.d) as f64;
        linear_attack_bits_filled(self.t, self.big_n as f64 / leaves)
    }

    /// Leaves of tree `j` that lie inside the code length.
    pub fn tree_len(&self, j: usize) -> usize {
        (self.big_n - (j << self.d)).min(1 << self.d)
    }
}

/// SoftSpokenOT with its default field size; its malicious check when the VOLE is checked.
fn cot_params(checked: bool) -> SoftSpokenParams {
    SoftSpokenParams {
        malicious: checked,
        ..SoftSpokenParams::default()
    }
}

fn check_noise_bits(noise_bits: usize) -> Result<(), OtError> {
    if !(1..=128).contains(&noise_bits) {
        return Err(OtError::Usage(format!(
            "VOLE noise width {noise_bits} bits out of range 1..=128"
        )));
    }
    Ok(())
}

/// The receiver's hello; `commitment` (to its code-seed share) exactly when checked.
fn hello(m: usize, noise_bits: usize, commitment: Option<&[u8; 32]>) -> Vec<u8> {
    let mut h = HELLO_MAGIC.to_vec();
    put_u64(&mut h, m as u64);
    h.push(noise_bits as u8); // ≤ 128, checked
    h.push(u8::from(commitment.is_some()));
    if let Some(c) = commitment {
        h.extend_from_slice(c);
    }
    h
}

/// A party's code-seed share in the checked mode (module docs, *Code seed*); zeroized on drop.
struct SeedShare([u8; 32]);

impl SeedShare {
    fn random() -> Result<Self, OtError> {
        let mut s = SeedShare([0u8; 32]);
        random_bytes(&mut s.0)?;
        Ok(s)
    }

    fn commitment(&self) -> [u8; 32] {
        share_commitment(&self.0)
    }
}

impl Drop for SeedShare {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

fn share_commitment(share: &[u8; 32]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::new()
        .chain_update(SHARE_DOMAIN)
        .chain_update(share)
        .finalize()
        .into()
}

/// The code seed from both shares: the first 16 bytes of `SHA-256(domain ‖ s_S ‖ s_R)`.
fn coin_seed(sender: &[u8; 32], receiver: &[u8; 32]) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let h: [u8; 32] = Sha256::new()
        .chain_update(SEED_DOMAIN)
        .chain_update(sender)
        .chain_update(receiver)
        .finalize()
        .into();
    let mut seed = [0u8; 16];
    seed.copy_from_slice(&h[..16]);
    seed
}

/// The sender's side of the code seed, after the hello: a random seed it sends, or, when the
/// receiver committed to a share (checked), its own share sent, the receiver's opening checked
/// and both hashed.
///
/// # Errors
/// [`OtError::PeerMisbehaved`] when the opening does not match the commitment or has the wrong
/// magic; a malformed message; link or RNG failure.
fn send_code_seed(
    link: &mut dyn Link,
    receiver_commitment: Option<[u8; 32]>,
) -> Result<[u8; 16], OtError> {
    let Some(commitment) = receiver_commitment else {
        let mut seed = [0u8; 16];
        random_bytes(&mut seed)?;
        let mut reply = SEED_MAGIC.to_vec();
        reply.extend_from_slice(&seed);
        link.send(&reply)?;
        return Ok(seed);
    };
    let ours = SeedShare::random()?;
    let mut reply = SEED_MAGIC.to_vec();
    reply.extend_from_slice(&ours.0);
    link.send(&reply)?;
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "VOLE code-seed opening");
    if r.take(4)? != OPEN_MAGIC {
        return Err(OtError::PeerMisbehaved(
            "VOLE code-seed opening has the wrong magic".into(),
        ));
    }
    let mut theirs = SeedShare([0u8; 32]);
    theirs.0.copy_from_slice(r.take(32)?);
    r.finish()?;
    if share_commitment(&theirs.0) != commitment {
        return Err(OtError::PeerMisbehaved(
            "the receiver's VOLE code-seed share does not match its commitment".into(),
        ));
    }
    Ok(coin_seed(&ours.0, &theirs.0))
}

/// The receiver's side of the code seed, after its hello: the sender's seed, or, with `share`
/// (whose commitment the hello carried), the sender's share, our opening sent, both hashed.
///
/// # Errors
/// A malformed or mislabelled seed message; link failure.
fn receive_code_seed(link: &mut dyn Link, share: Option<&SeedShare>) -> Result<[u8; 16], OtError> {
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "VOLE code seed");
    if r.take(4)? != SEED_MAGIC {
        return Err(OtError::PeerMisbehaved(
            "VOLE seed message has the wrong magic; the peer runs a different protocol".into(),
        ));
    }
    let Some(share) = share else {
        let mut seed = [0u8; 16];
        seed.copy_from_slice(r.take(16)?);
        r.finish()?;
        return Ok(seed);
    };
    let mut theirs = SeedShare([0u8; 32]);
    theirs.0.copy_from_slice(r.take(32)?);
    r.finish()?;
    let mut open = OPEN_MAGIC.to_vec();
    open.extend_from_slice(&share.0);
    link.send(&open)?;
    open.zeroize();
    Ok(coin_seed(&theirs.0, &share.0))
}

/// The check weights `χ_i = AES_seed(i)` for `i < n`.
fn check_weights(seed: &[u8; 16], n: usize) -> Vec<Gf128> {
    use aes::Aes128;
    use aes::cipher::{BlockCipherEncrypt, KeyInit};
    use rayon::prelude::*;
    let cipher = Aes128::new(&(*seed).into());
    let mut out = vec![Gf128::ZERO; n];
    out.par_chunks_mut(1 << 12)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut blocks: Vec<[u8; 16]> = (0..chunk.len())
                .map(|i| (((c << 12) + i) as u128).to_le_bytes())
                .collect();
            cipher.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut blocks));
            for (o, b) in chunk.iter_mut().zip(&blocks) {
                *o = Gf128(u128::from_le_bytes(*b));
            }
        });
    out
}

/// `Σ χ_i·x_i`, in parallel.
fn weighted_sum(chi: &[Gf128], x: &[u128]) -> Gf128 {
    use blindjoin_crypto::gf128::inner_product;
    use rayon::prelude::*;
    chi.par_chunks(1 << 14)
        .zip(x.par_chunks(1 << 14))
        .map(|(c, x)| {
            let xs: Vec<Gf128> = x.iter().map(|&v| Gf128(v)).collect();
            inner_product(c, &xs)
        })
        .reduce(|| Gf128::ZERO, |a, b| a + b)
}

fn check_digest(x: Gf128) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::new()
        .chain_update(CHECK_DOMAIN)
        .chain_update(x.0.to_le_bytes())
        .finalize()
        .into()
}

fn code_for(shape: &LpnShape, seed: [u8; 16]) -> Result<ExAccCode, OtError> {
    ExAccCode::rate_half(shape.n, seed).map_err(|e| OtError::Usage(e.to_string()))
}

/// `Σ_k xs[k]·x^k` over GF(2^128).
fn gilboa_sum(xs: &[u128]) -> Gf128 {
    xs.iter()
        .enumerate()
        .map(|(k, &x)| Gf128(x) * Gf128(1u128 << k))
        .sum()
}

/// Runs a random VOLE of length `m` as the sender (holder of `Δ`), with noise values of
/// `noise_bits` bits (128: full GF(2^128) VOLE; fewer: the receiver's `A` is ℓ-bit).
///
/// # Errors
/// The receiver asked for other parameters ([`OtError::PeerMisbehaved`]); malformed messages;
/// link failure; `m > MAX_VOLE_LEN` or `noise_bits ∉ 1..=128` ([`OtError::Usage`]).
pub fn vole_send(
    link: &mut dyn Link,
    m: usize,
    noise_bits: usize,
    checked: bool,
) -> Result<VoleSender, OtError> {
    check_noise_bits(noise_bits)?;
    let shape = LpnShape::for_len(m)?;
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "VOLE hello");
    if r.take(4)? != HELLO_MAGIC {
        return Err(OtError::PeerMisbehaved(
            "VOLE hello has the wrong magic; the peer runs a different protocol".into(),
        ));
    }
    let (peer_m, peer_bits, peer_checked) = (r.u64()?, r.u8()?, r.u8()?);
    if (peer_m, usize::from(peer_bits), peer_checked) != (m as u64, noise_bits, u8::from(checked)) {
        return Err(OtError::PeerMisbehaved(format!(
            "VOLE: this party expects length {m} with {noise_bits}-bit noise (checked: \
             {checked}), the receiver asked for length {peer_m} with {peer_bits}-bit noise \
             (checked: {})",
            peer_checked != 0
        )));
    }
    let commitment = if checked {
        let mut c = [0u8; 32];
        c.copy_from_slice(r.take(32)?);
        Some(c)
    } else {
        None
    };
    r.finish()?;
    let seed = send_code_seed(link, commitment)?;
    let code = code_for(&shape, seed)?;

    let LpnShape { t, d, big_n, .. } = shape;
    let extra = if checked { CHECK_COTS } else { 0 };
    let cots = softspoken_cot_send(link, t * d + t * noise_bits + extra, cot_params(checked))?;
    let delta = cots.delta();
    let (tree_q, rest) = cots.q().split_at(t * d);
    let (base_q, check_q) = rest.split_at(t * noise_bits);
    let mut offsets: Vec<u128> = base_q
        .chunks_exact(noise_bits)
        .map(|qs| gilboa_sum(qs).0)
        .collect();
    let mut v_star = gilboa_sum(check_q);
    let mut v = mpvole_send(link, delta, tree_q, t, d, &offsets)?;
    offsets.zeroize();
    drop(cots);
    v.truncate(big_n);

    if checked {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "VOLE check challenge");
        if r.take(4)? != CHECK_MAGIC {
            return Err(OtError::PeerMisbehaved(
                "VOLE check challenge has the wrong magic".into(),
            ));
        }
        let mut seed = [0u8; 16];
        seed.copy_from_slice(r.take(16)?);
        let mut xb = [0u8; 16];
        xb.copy_from_slice(r.take(16)?);
        r.finish()?;
        let chi = check_weights(&seed, big_n);
        let reply = weighted_sum(&chi, &v) + v_star + Gf128(u128::from_le_bytes(xb)) * Gf128(delta);
        let mut msg = REPLY_MAGIC.to_vec();
        msg.extend_from_slice(&check_digest(reply));
        link.send(&msg)?;
    }
    v_star.0.zeroize();

    let mut b = vec![0u128; shape.n];
    code.dual_encode(&mut v, &mut b)
        .map_err(|e| OtError::Usage(e.to_string()))?;
    v.zeroize();
    b.truncate(m);
    let b = b.into_iter().map(Gf128).collect();
    Ok(VoleSender {
        delta: Gf128(delta),
        b,
    })
}

/// Runs a random VOLE of length `m` as the receiver: returns `A` (pseudo-random, `noise_bits`
/// bits per entry) and `C = B + A·Δ`.
///
/// # Errors
/// Malformed sender messages; link failure; RNG failure; bad `m` / `noise_bits`
/// ([`OtError::Usage`]).
pub fn vole_receive(
    link: &mut dyn Link,
    m: usize,
    noise_bits: usize,
    checked: bool,
) -> Result<VoleReceiver, OtError> {
    vole_receive_a_first(link, m, noise_bits, checked)?.encode_c()
}

/// [`vole_receive`], stopping once `A` is ready: the caller can use `A` (RR22 sends it on)
/// before paying for `C`'s dual encoding with [`VoleReceiverA::encode_c`]. All communication
/// (and the consistency check, when `checked`) is over when this returns.
///
/// # Errors
/// As [`vole_receive`].
pub fn vole_receive_a_first(
    link: &mut dyn Link,
    m: usize,
    noise_bits: usize,
    checked: bool,
) -> Result<VoleReceiverA, OtError> {
    check_noise_bits(noise_bits)?;
    let shape = LpnShape::for_len(m)?;
    let share = if checked {
        Some(SeedShare::random()?)
    } else {
        None
    };
    let commitment = share.as_ref().map(SeedShare::commitment);
    link.send(&hello(m, noise_bits, commitment.as_ref()))?;
    let seed = receive_code_seed(link, share.as_ref())?;
    drop(share);
    let code = code_for(&shape, seed)?;

    let LpnShape { t, d, big_n, .. } = shape;
    let mut alphas = random_points(&shape)?;
    let mut betas = random_noise_values(t, noise_bits)?;
    let mut choices = complement_choices(&alphas, d);
    choices.extend(
        betas
            .iter()
            .flat_map(|&b| (0..noise_bits).map(move |k| (b >> k) & 1 == 1)),
    );
    let mut y_star = 0u128;
    if checked {
        y_star = random_noise_values(1, 128)?[0];
        choices.extend((0..CHECK_COTS).map(|k| (y_star >> k) & 1 == 1));
    }
    let cots = softspoken_cot_receive(link, &choices, cot_params(checked))?;
    choices.zeroize();
    let (tree_t, rest) = cots.t().split_at(t * d);
    let (base_t, check_t) = rest.split_at(t * noise_bits);
    let tree_c = &cots.choices()[..t * d];
    let mut gammas: Vec<u128> = base_t
        .chunks_exact(noise_bits)
        .map(|ts| gilboa_sum(ts).0)
        .collect();
    let mut z_star = gilboa_sum(check_t);
    let mut w = mpvole_receive(link, tree_t, tree_c, &alphas, d, &gammas)?;
    gammas.zeroize();
    drop(cots);
    w.truncate(big_n);

    if checked {
        let mut seed = [0u8; 16];
        random_bytes(&mut seed)?;
        let chi = check_weights(&seed, big_n);
        let x_star: Gf128 = alphas
            .iter()
            .zip(&betas)
            .enumerate()
            .map(|(j, (&a, &b))| chi[(j << d) + a] * Gf128(b))
            .sum();
        let mut msg = CHECK_MAGIC.to_vec();
        msg.extend_from_slice(&seed);
        msg.extend_from_slice(&(x_star.0 ^ y_star).to_le_bytes());
        link.send(&msg)?;
        let expect = check_digest(weighted_sum(&chi, &w) + z_star);
        let reply = link.recv()?;
        let mut r = Reader::new(&reply, "VOLE check reply");
        if r.take(4)? != REPLY_MAGIC {
            return Err(OtError::PeerMisbehaved(
                "VOLE check reply has the wrong magic".into(),
            ));
        }
        let got = r.take(32)?;
        r.finish()?;
        if got != expect {
            return Err(OtError::PeerMisbehaved(
                "the VOLE consistency check failed: the sender's PPRF messages are inconsistent"
                    .into(),
            ));
        }
    }
    y_star.zeroize();
    z_star.0.zeroize();

    let a = encode_sparse(&code, &shape, m, &alphas, &betas);
    alphas.zeroize();
    betas.zeroize();
    Ok(VoleReceiverA { a, w, code, m })
}

/// The dual encoding of the receiver's regular sparse noise `u` (`β_j` at `j·2^d + α_j`):
/// `u`'s prefix-XOR is never materialised — at position `p` in tree `j` it is
/// `β_0 ⊕ … ⊕ β_{j−1}`, plus `β_j` once `p` reaches `j·2^d + α_j`, which a table of `2t` entries
/// answers. Row chunks run in parallel (the code's PRG is seekable). The dense `w` goes through
/// the code's own dual encoding separately ([`VoleReceiverA::encode_c`]): one fused pass over
/// both ran 1.3× slower than the two.
fn encode_sparse(
    code: &ExAccCode,
    shape: &LpnShape,
    m: usize,
    alphas: &[usize],
    betas: &[u128],
) -> Vec<Gf128> {
    let d = shape.d;
    let mut table = Vec::with_capacity(2 * betas.len());
    let mut noise_at = Vec::with_capacity(betas.len());
    let mut acc = 0u128;
    for (j, (&b, &alpha)) in betas.iter().zip(alphas).enumerate() {
        table.push(acc);
        acc ^= b;
        table.push(acc);
        noise_at.push((j << d) + alpha);
    }
    let mut a = vec![Gf128::ZERO; shape.n];
    let (table_ref, noise_ref) = (&table[..], &noise_at[..]);
    a.par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, a)| {
            let first = task * ROWS_PER_TASK;
            code.for_each_position_batch_in(first..first + a.len(), |row, pos| {
                let at = row - first;
                for (ao, &p) in a[at..at + pos.len()].iter_mut().zip(pos) {
                    let j = p >> d;
                    let past = usize::from(p >= noise_ref[j]);
                    ao.0 ^= table_ref[2 * j + past];
                }
            });
        });
    table.zeroize();
    noise_at.zeroize();
    acc.zeroize();
    a.truncate(m);
    a
}

/// One noise position per tree, uniform within the tree's (possibly truncated) length.
fn random_points(shape: &LpnShape) -> Result<Vec<usize>, OtError> {
    let mut bytes = vec![0u8; 8 * shape.t];
    random_bytes(&mut bytes)?;
    let points = bytes
        .chunks_exact(8)
        .enumerate()
        .map(|(j, c)| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            let r = u64::from_le_bytes(w);
            // Multiply-shift reduction: bias ≤ 2^d / 2^64.
            ((u128::from(r) * shape.tree_len(j) as u128) >> 64) as usize
        })
        .collect();
    bytes.zeroize();
    Ok(points)
}

/// `t` uniform nonzero values of `bits` bits.
fn random_noise_values(t: usize, bits: usize) -> Result<Vec<u128>, OtError> {
    let mask = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    let mut out = vec![0u128; t];
    let mut b = [0u8; 16];
    for x in &mut out {
        while *x == 0 {
            random_bytes(&mut b)?;
            *x = u128::from_le_bytes(b) & mask;
        }
    }
    b.zeroize();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::run2;

    fn run_vole(m: usize, bits: usize) -> (VoleSender, VoleReceiver) {
        run_vole_checked(m, bits, false)
    }

    fn run_vole_checked(m: usize, bits: usize, checked: bool) -> (VoleSender, VoleReceiver) {
        run2(
            move |l| vole_send(l, m, bits, checked).unwrap(),
            move |l| vole_receive(l, m, bits, checked).unwrap(),
        )
    }

    fn check(s: &VoleSender, r: &VoleReceiver, m: usize, bits: usize) {
        assert_eq!((s.len(), r.len(), r.a().len()), (m, m, m));
        let delta = s.delta();
        for i in 0..m {
            assert_eq!(
                r.c()[i],
                s.b()[i] + r.a()[i] * delta,
                "m={m} bits={bits} i={i}"
            );
            if bits < 128 {
                assert_eq!(r.a()[i].0 >> bits, 0, "A_{i} wider than {bits} bits");
            }
        }
        if m >= 64 {
            // A is pseudo-random: not all zero, and its entries are not all equal.
            assert!(r.a().iter().any(|a| a.0 != 0));
            assert!(r.a().windows(2).any(|p| p[0] != p[1]));
        }
    }

    #[test]
    fn relation_holds_on_every_coordinate() {
        for m in [0usize, 1, 2, 100, 4097, 20_000] {
            for bits in [128usize, 64, 48, 1] {
                let (s, r) = run_vole(m, bits);
                check(&s, &r, m, bits);
            }
        }
    }

    #[test]
    fn checked_vole_passes_with_an_honest_sender() {
        for (m, bits) in [(1usize, 128usize), (5000, 128), (5000, 64)] {
            let (s, r) = run_vole_checked(m, bits, true);
            check(&s, &r, m, bits);
        }
    }

    /// A sender that flips one bit of its first PPRF level-sum message is caught.
    #[test]
    fn checked_vole_catches_a_cheating_sender() {
        use blindjoin_link::{Link, LinkError, LinkStats};

        /// Forwards to the real link, corrupting the message after the PPRF level-sums header.
        struct Corrupt<'a> {
            inner: &'a mut dyn Link,
            armed: bool,
        }
        impl Link for Corrupt<'_> {
            fn send(&mut self, msg: &[u8]) -> Result<(), LinkError> {
                let fire = self.armed;
                self.armed = msg.starts_with(b"PPRS");
                if fire {
                    let mut m = msg.to_vec();
                    let last = m.len() - 1;
                    m[last] ^= 1;
                    return self.inner.send(&m);
                }
                self.inner.send(msg)
            }
            fn recv(&mut self) -> Result<Vec<u8>, LinkError> {
                self.inner.recv()
            }
            fn abort(&mut self, reason: &str) {
                self.inner.abort(reason)
            }
            fn close(&mut self) -> Result<(), LinkError> {
                self.inner.close()
            }
            fn stats(&self) -> LinkStats {
                self.inner.stats()
            }
            fn peer_id(&self) -> &str {
                self.inner.peer_id()
            }
        }

        // The block after the level-sums header holds the level sums and corrections; its last
        // byte belongs to the last tree's correction.
        let (s, r) = run2(
            |l| {
                let mut c = Corrupt {
                    inner: l,
                    armed: false,
                };
                vole_send(&mut c, 3000, 128, true).map(|_| ())
            },
            |l| vole_receive(l, 3000, 128, true).map(|_| ()),
        );
        let _ = s;
        assert!(
            matches!(&r, Err(OtError::PeerMisbehaved(e)) if e.contains("consistency")),
            "{:?}",
            r.err()
        );
    }

    /// `C` encoded apart from `A` (while `A` is in use) gives the same VOLE relation.
    #[test]
    fn c_encoded_apart_keeps_the_relation() {
        for (m, bits) in [(1usize, 128usize), (1000, 128), (4097, 64)] {
            let (s, r) = run2(
                move |l| vole_send(l, m, bits, false).unwrap(),
                move |l| {
                    let mut a = vole_receive_a_first(l, m, bits, false).unwrap();
                    let job = a.split_c().unwrap();
                    assert!(a.split_c().is_err(), "split twice");
                    let c = std::thread::spawn(move || job.encode())
                        .join()
                        .unwrap()
                        .unwrap();
                    assert!(a.a().len() == m);
                    a.with_c(c).unwrap()
                },
            );
            check(&s, &r, m, bits);
        }
    }

    /// The noise weight follows from the distance estimate and the bound for GF(2^128) noise:
    /// the least multiple of 8 for which the worst shape (a last tree of one leaf, so the code
    /// fills `(t − 1)/t` of the trees) keeps `(1 − δ·fill)^t ≤ 2^-128`.
    #[test]
    fn noise_weight_gives_128_bits_at_the_distance_estimate() {
        let worst = |t: usize| linear_attack_bits_filled(t, (t - 1) as f64 / t as f64);
        assert!(worst(NOISE_WEIGHT) >= LINEAR_ATTACK_BITS);
        assert!(worst(NOISE_WEIGHT - 8) < LINEAR_ATTACK_BITS);
        assert_eq!(NOISE_WEIGHT % 8, 0);
        // The bound is the no-hit probability (1 − δ)^t, not binary noise's (1 − 2δ)^t.
        let t = 1000.0;
        let want = -t * (1.0 - EXACC7_MIN_DISTANCE).log2();
        assert!((linear_attack_bits(1000) - want).abs() < 1e-9);
        // The t that libOTe's binary rule gives at δ = 0.05 (848) has under 63 bits of it.
        assert!(linear_attack_bits(848) < 63.0);
    }

    /// Lengths the shape is asked for: every power of two up to the maximum, its neighbours,
    /// odd sizes between, and the lengths just past each depth change (the worst fill).
    fn lengths() -> Vec<usize> {
        let mut ms = vec![0usize, 1, 2, 3, 4097, 100_000, 1_153_434, 1_300_000];
        for k in 0..=MAX_VOLE_LEN.trailing_zeros() {
            let p = 1usize << k;
            ms.extend([
                p - 1,
                p,
                p + 1,
                3 * (p / 2) + 1,
                5 * (p / 4) + 3,
                7 * (p / 8) + 5,
            ]);
        }
        for d in 1..MAX_DEPTH {
            // Around a depth change: big_n = NOISE_WEIGHT·2^(d+1) is the first length at depth d+1.
            let edge = (NOISE_WEIGHT << (d + 1)) / 2;
            ms.extend([edge - 1, edge, edge + 1]);
            // big_n = (NOISE_WEIGHT − 1)·2^d + 2: the last tree holds two leaves (the worst fill).
            let one_leaf = (((NOISE_WEIGHT - 1) << d) + 2) / 2;
            ms.extend([one_leaf - 1, one_leaf, one_leaf + 1]);
        }
        ms.retain(|&m| m <= MAX_VOLE_LEN);
        ms.push(MAX_VOLE_LEN);
        ms.sort_unstable();
        ms.dedup();
        ms
    }

    #[test]
    fn shape_meets_noise_weight_and_covers_code() {
        let mut weakest = f64::INFINITY;
        for m in lengths() {
            let s = LpnShape::for_len(m).unwrap();
            assert!(s.n >= m && s.big_n == 2 * s.n);
            assert!(s.t >= NOISE_WEIGHT, "{s:?}");
            assert!(s.linear_attack_bits() >= LINEAR_ATTACK_BITS, "{s:?}");
            assert!(
                s.linear_attack_bits() <= linear_attack_bits(s.t) + 1e-9,
                "{s:?}"
            );
            weakest = weakest.min(s.linear_attack_bits());
            assert!(s.t << s.d >= s.big_n && (s.t - 1) << s.d < s.big_n, "{s:?}");
            assert!(s.tree_len(s.t - 1) >= 1);
            // The PPRF's limits and the COT count still hold with the larger t.
            assert!((1..=MAX_DEPTH).contains(&s.d), "{s:?}");
            assert!(s.t <= MAX_LEAVES >> s.d, "{s:?}");
            let cots = s.t * s.d + s.t * 128 + CHECK_COTS;
            assert!(cots <= crate::iknp::MAX_COTS, "{s:?}");
        }
        assert!(weakest < 128.5, "the worst fill is in the list: {weakest}");
        assert!(LpnShape::for_len(MAX_VOLE_LEN + 1).is_err());
    }

    /// A checked run agrees on one code seed from both parties' shares; unchecked, the
    /// sender's seed arrives as sent.
    #[test]
    fn code_seed_coin_toss_agrees() {
        for checked in [false, true] {
            let (s, r) = run2(
                move |l| {
                    let commitment = if checked {
                        let msg = l.recv().unwrap();
                        Some(<[u8; 32]>::try_from(&msg[..]).unwrap())
                    } else {
                        None
                    };
                    send_code_seed(l, commitment).unwrap()
                },
                move |l| {
                    let share = checked.then(|| SeedShare::random().unwrap());
                    if let Some(sh) = &share {
                        l.send(&sh.commitment()).unwrap();
                    }
                    receive_code_seed(l, share.as_ref()).unwrap()
                },
            );
            assert_eq!(s, r, "checked: {checked}");
        }
        // The seed depends on both shares.
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert_ne!(coin_seed(&a, &b), coin_seed(&a, &a));
        assert_ne!(coin_seed(&a, &b), coin_seed(&b, &b));
    }

    /// A receiver whose opening is not the share it committed to in its hello is refused.
    #[test]
    fn checked_vole_refuses_a_wrong_seed_opening() {
        let (s, _) = run2(
            |l| vole_send(l, 100, 128, true).map(|_| ()),
            |l| {
                let committed = SeedShare([7u8; 32]);
                l.send(&hello(100, 128, Some(&committed.commitment())))
                    .unwrap();
                let _ = l.recv();
                let mut open = OPEN_MAGIC.to_vec();
                open.extend_from_slice(&[8u8; 32]);
                let _ = l.send(&open);
            },
        );
        assert!(
            matches!(&s, Err(OtError::PeerMisbehaved(e)) if e.contains("commitment")),
            "{s:?}",
            s = s.err()
        );
    }

    #[test]
    fn parameter_mismatch_is_a_typed_error() {
        let (s, r) = run2(
            |l| {
                let r = vole_send(l, 100, 128, false).map(|_| ());
                if let Err(e) = &r {
                    l.abort(&e.to_string());
                }
                r
            },
            |l| vole_receive(l, 100, 64, false).map(|_| ()),
        );
        assert!(matches!(s, Err(OtError::PeerMisbehaved(_))), "{s:?}");
        assert!(r.is_err());
        assert!(matches!(
            run2(|l| vole_send(l, 1, 0, false).map(|_| ()), |_| ()).0,
            Err(OtError::Usage(_))
        ));
    }

    #[test]
    fn truncated_seed_message_is_a_typed_error() {
        let (_, r) = run2(
            |l| {
                let _ = l.recv();
                l.send(b"VOLS0123").unwrap();
            },
            |l| vole_receive(l, 10, 128, false).map(|_| ()),
        );
        assert!(matches!(r, Err(OtError::InvalidMessage(_))), "{r:?}");
    }
}

#[cfg(test)]
mod encode_bench {
    use super::*;

    /// `cargo test -p blindjoin-ot --release encode_costs -- --ignored --nocapture`: a test
    /// rather than a bench target because `encode_sparse` and `code_for` are private (the whole
    /// VOLE is timed by `cargo bench -p blindjoin-ot --bench ot_speed -- vole`).
    #[test]
    #[ignore = "timing of private steps: run by hand in release mode"]
    fn encode_costs() {
        let shape = LpnShape::for_len(1_153_434).unwrap();
        let code = code_for(&shape, [7; 16]).unwrap();
        let alphas: Vec<usize> = (0..shape.t)
            .map(|j| (j * 7919) % shape.tree_len(j))
            .collect();
        let betas: Vec<u128> = (0..shape.t)
            .map(|j| (j as u128) * 0x9e37_79b9_7f4a_7c15)
            .collect();
        let w0: Vec<u128> = (0..shape.big_n)
            .map(|i| (i as u128).wrapping_mul(0x1234_5678_9abc_def1))
            .collect();
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                for _ in 0..2 {
                    let t = std::time::Instant::now();
                    let a = encode_sparse(&code, &shape, shape.n, &alphas, &betas);
                    let er = t.elapsed();
                    assert_eq!(a.len(), shape.n);
                    let mut w = w0.clone();
                    let mut out = vec![0u128; shape.n];
                    let t = std::time::Instant::now();
                    code.dual_encode(&mut w, &mut out).unwrap();
                    println!(
                        "threads {threads}: encode_sparse (A) {er:?}, dual_encode (C) {:?}",
                        t.elapsed()
                    );
                }
            });
        }
    }
}
