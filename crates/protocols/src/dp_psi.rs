//! DP-PSI (SecretFlow's `DP_PSI_2PC`): ECDH-PSI whose output is noised by sub-sampling and
//! randomized response, after Du et al., "DP-PSI: Private and secure set intersection"
//! (arXiv 2208.13249). Model: semi-honest; the masking is the DDH-in-the-random-oracle-model
//! masking of [`crate::ecdh`].
//!
//! Parties, in SecretFlow's naming: **Bob** is the receiver (`receiver_rank`; our
//! [`Role::Receiver`]) with set Y and key `b`; **Alice** is the other party with set X and key `a`.
//! Parameters: `p1` = `bob_sub_sampling` (default 0.9) and `ε` = `epsilon` (default 3), from which
//! `p2 = e^ε / (1 + e^ε)` and `q = 1 − p2` ([`DpParams::p2`], [`DpParams::q`]).
//!
//! 1. Alice sends `H(x)^a` for x ∈ X.
//! 2. Bob keeps each of his items independently with probability `p1` (the sub-sample Y\*) and
//!    sends `|Y*|` and `H(y)^b` for y ∈ Y\* in a secret random order. He raises Alice's points to
//!    `b` and returns their tags `T(H(x)^ab)` sorted by value (a permutation Alice cannot relate
//!    to her order).
//! 3. Alice raises Bob's points to `a`, finds the positions I\* of Y\* whose tag is among hers
//!    (the sub-sampled intersection), keeps each position of I\* with probability `p2` and adds
//!    each position of Y\* \ I\* with probability `q`, and sends the chosen positions.
//! 4. Bob maps the positions to his items: that is his output. Alice learns no items.
//!
//! Each y ∈ Y is in Bob's output with probability `p1·p2` if y ∈ X and `p1·q` if y ∉ X,
//! independently of every other item ([`DpParams::inclusion_probability`]).
//!
//! Privacy of the output (Alice's set, one element added or removed): Bob's view of each y is one
//! bit drawn as above, so for any output o, `P[o | y ∈ X] / P[o | y ∉ X]` is at most
//! `max(p2/q, (1 − p1·q)/(1 − p1·p2)) = e^ε` (the second ratio is at most `(1 − q)/(1 − p2) = e^ε`
//! because `1 − p1·t` falls more slowly than `1 − t`): ε-differential privacy per element, as
//! randomized response gives. Alice learns `|Y*|` and `|X ∩ Y*|`, a `Binomial(|X ∩ Y|, p1)`
//! count; the sub-sampling is what hides |X ∩ Y| from her; it gives no pure-ε guarantee (with
//! `|X ∩ Y| = 0` the count is always 0), the paper's analysis gives (ε, δ). Bob learns |X|.
//!
//! The bound assumes Bob flips one coin per item: Y\* must hold each item at most once. A Bob
//! who sent k copies of `H(y)^b` would get k independent coins on y's membership, and k·ε for y.
//! Alice therefore refuses a sub-sample with two equal tags ([`ProtocolError::PeerMisbehaved`]),
//! and Bob refuses his own input if it repeats an item ([`ProtocolError::Config`]). Beyond that
//! check the model stays semi-honest: a Bob who deviates otherwise is not covered.
//!
//! Repeated runs on the same sets compose sequentially: r runs are at most r·ε-DP, and in practice
//! the average of r outputs converges to `p1·p2` for members and `p1·q` for non-members, so a few
//! runs reveal membership. The data path must not offer unlimited reruns on the same inputs.
//!
//! `T` is the tag of [`crate::ecdh::tag_len_with`], sized for `|Y|·max(|X|, |Y|)` comparisons
//! ([`match_tag_len`]): the |Y\*|·|X| match tests and the |Y\*|²/2 pairs of the distinctness check,
//! so that neither a false match nor an honest Bob refused for a tag collision is expected more
//! often than 2^-40.

use crate::ecdh::{
    Ctx, expect_type, peer_tags, receive_group, receive_tags, send_masked, tag_bytes, tag_len_with,
    tag_message,
};
use crate::{
    Curve, HandshakeChecked, ItemDigest, Progress, ProtocolError, PsiOptions, PsiOutput, Role,
};
use blindjoin_crypto::{new_cipher, random_bytes};
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{Link, Reader, put_u64};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// SecretFlow's name of the protocol (v1 `psi_type`).
pub const NAME: &str = "DP_PSI_2PC";

const MSG_COUNT: u8 = wire::byte(ids::ECDH_COUNT);

/// SecretFlow's `DpPsiParams`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DpParams {
    /// `p1`: the probability Bob (the receiver) keeps each of his items.
    pub bob_sub_sampling: f64,
    /// ε of the randomized response.
    pub epsilon: f64,
}

impl Default for DpParams {
    /// SecretFlow's defaults: `bob_sub_sampling = 0.9`, `epsilon = 3`.
    fn default() -> Self {
        DpParams {
            bob_sub_sampling: 0.9,
            epsilon: 3.0,
        }
    }
}

impl DpParams {
    /// Checks `0 < bob_sub_sampling ≤ 1` and `0 < epsilon < ∞`.
    ///
    /// # Errors
    /// [`ProtocolError::Config`] naming the field.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        let p1 = self.bob_sub_sampling;
        if !(p1 > 0.0 && p1 <= 1.0) {
            return Err(ProtocolError::Config(format!(
                "dppsi_params.bob_sub_sampling must be in (0, 1], got {p1}"
            )));
        }
        if !(self.epsilon > 0.0 && self.epsilon.is_finite()) {
            return Err(ProtocolError::Config(format!(
                "dppsi_params.epsilon must be a positive finite number, got {}",
                self.epsilon
            )));
        }
        Ok(())
    }

    /// `p2 = e^ε / (1 + e^ε)`: the probability Alice keeps a sub-sampled match. Written as
    /// `1 / (1 + e^−ε)` so a large ε does not overflow.
    pub fn p2(&self) -> f64 {
        1.0 / (1.0 + (-self.epsilon).exp())
    }

    /// `q = 1 − p2 = 1 / (1 + e^ε)`: the probability Alice adds a sub-sampled non-match.
    pub fn q(&self) -> f64 {
        1.0 / (1.0 + self.epsilon.exp())
    }

    /// The probability that one of Bob's items is in his output: `p1·p2` if it is in Alice's
    /// set, `p1·q` if not.
    pub fn inclusion_probability(&self, in_alice: bool) -> f64 {
        self.bob_sub_sampling * if in_alice { self.p2() } else { self.q() }
    }

    /// A 16-byte digest of the parameters, for the handshake's context, so two parties with
    /// different parameters fail at the hello rather than run different mechanisms.
    pub fn context(&self) -> [u8; 16] {
        blindjoin_crypto::item_digest(
            format!(
                "dp-psi\0{:016x}\0{:016x}",
                self.bob_sub_sampling.to_bits(),
                self.epsilon.to_bits()
            )
            .as_bytes(),
        )
    }
}

/// Uniform draws from SHA-256 in counter mode under a 32-byte key: a fresh OS-random key per run,
/// or, in this crate's tests only, a fixed one (so the sampling and Bob's shuffle are
/// reproducible).
struct Sampler {
    key: Zeroizing<[u8; 32]>,
    counter: u64,
}

impl Sampler {
    fn from_os() -> Result<Self, ProtocolError> {
        let mut key = Zeroizing::new([0u8; 32]);
        random_bytes(&mut key[..])?;
        Ok(Sampler { key, counter: 0 })
    }

    #[cfg(test)]
    fn from_seed(seed: [u8; 32]) -> Self {
        Sampler {
            key: Zeroizing::new(seed),
            counter: 0,
        }
    }

    fn next_u64(&mut self) -> u64 {
        let mut h = Sha256::new();
        h.update(&self.key[..]);
        h.update(self.counter.to_le_bytes());
        self.counter += 1;
        let d = h.finalize();
        let mut w = [0u8; 8];
        w.copy_from_slice(&d[..8]);
        u64::from_le_bytes(w)
    }

    /// Uniform in [0, 1) with 53 bits.
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniformly random permutation of `0..n` (Fisher–Yates; index by multiply-shift, bias at
    /// most n/2^64).
    fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut perm: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = ((u128::from(self.next_u64()) * (i as u128 + 1)) >> 64) as usize;
            perm.swap(i, j);
        }
        perm
    }

    fn bernoulli(&mut self, p: f64) -> bool {
        self.uniform() < p
    }
}

/// Runs DP-PSI after a handshake on `ProtocolChoice::Ecdh { curve }` (whose hello context should
/// carry [`DpParams::context`]). Bob (the receiver) gets the sorted indices of his items in the
/// noised intersection; Alice gets `None`. The sampling randomness is always fresh from the OS:
/// a caller able to fix it could replay one run's coins, and the ε bound needs fresh coins.
///
/// ```no_run
/// use blindjoin_protocols::{dp_psi, Curve, HandshakeChecked, ItemDigest, Link, Progress, PsiOptions};
/// fn call(l: &mut dyn Link, hs: &HandshakeChecked, o: &PsiOptions, i: &[ItemDigest], p: &dyn Progress) {
///     let _ = dp_psi::run(l, hs, Curve::Curve25519, dp_psi::DpParams::default(), o, i, p);
/// }
/// ```
///
/// No caller outside the crate's tests can pass a seed:
///
/// ```compile_fail
/// use blindjoin_protocols::{dp_psi, Curve, HandshakeChecked, ItemDigest, Link, Progress, PsiOptions};
/// fn call(l: &mut dyn Link, hs: &HandshakeChecked, o: &PsiOptions, i: &[ItemDigest], p: &dyn Progress) {
///     let seed = Some([7u8; 32]);
///     let _ = dp_psi::run(l, hs, Curve::Curve25519, dp_psi::DpParams::default(), o, seed, i, p);
/// }
/// ```
///
/// # Errors
/// Invalid parameters, `broadcast_result` (the mechanism reveals to the receiver only), link
/// failures, a misbehaving peer, or crypto failures.
pub fn run(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    curve: Curve,
    params: DpParams,
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<PsiOutput, ProtocolError> {
    run_with(
        link,
        hs,
        curve,
        params,
        opts,
        Sampler::from_os,
        items,
        progress,
    )
}

/// [`run`] with the sampling randomness fixed by `seed` (`None`: from the OS), for this crate's
/// tests only.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_seeded(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    curve: Curve,
    params: DpParams,
    opts: &PsiOptions,
    seed: Option<[u8; 32]>,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<PsiOutput, ProtocolError> {
    let sampler = || match seed {
        Some(s) => Ok(Sampler::from_seed(s)),
        None => Sampler::from_os(),
    };
    run_with(link, hs, curve, params, opts, sampler, items, progress)
}

/// [`run`] drawing its sampler from `sampler` once the run's arguments are checked.
#[allow(clippy::too_many_arguments)]
fn run_with(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    curve: Curve,
    params: DpParams,
    opts: &PsiOptions,
    sampler: impl FnOnce() -> Result<Sampler, ProtocolError>,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<PsiOutput, ProtocolError> {
    params.validate()?;
    if hs.broadcast_result() {
        return Err(ProtocolError::Config(format!(
            "{NAME} reveals its noised result to the receiver only; set broadcast_result to false"
        )));
    }
    if items.len() as u64 != hs.ours().item_count {
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
    let (n_bob, n_alice) = crate::sizes_within(hs, u64::from(u32::MAX), NAME, "")?;
    let cipher = new_cipher(curve, opts.secret_key.as_ref().map(|k| k.as_slice()))?;
    let ctx = Ctx {
        cipher: &*cipher,
        batch: opts.batch_size,
        tag_len: match_tag_len(n_bob, n_alice, opts),
        progress,
    };
    let mut sampler = sampler()?;
    match hs.role() {
        Role::Receiver => bob(link, &ctx, &params, &mut sampler, items, n_alice as usize)
            .map(|v| PsiOutput::intersection(Some(v))),
        Role::Sender => alice(link, &ctx, &params, &mut sampler, items, n_bob as usize)
            .map(|()| PsiOutput::intersection(None)),
    }
}

/// The tag length for `n_bob` receiver items and `n_alice` sender items: [`tag_len_with`] for
/// `n_bob · max(n_alice, n_bob)` comparisons, which bounds both Alice's `|Y*|·|X|` match tests and
/// the `|Y*|²/2` pairs her distinctness check compares (see the module doc).
fn match_tag_len(n_bob: u64, n_alice: u64, opts: &PsiOptions) -> usize {
    tag_len_with(n_bob, n_alice.max(n_bob), opts.extra_stat_bits)
}

/// Refuses a receiver set that repeats an item: Y\* must hold each item once (module doc), and
/// Alice would refuse the run anyway, as the peer's fault, after all the masking.
fn check_distinct(items: &[ItemDigest]) -> Result<(), ProtocolError> {
    let mut sorted = items.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(ProtocolError::Config(format!(
            "{NAME} needs distinct items: the receiver's set repeats an item (deduplicate the keys \
             before the run)"
        )));
    }
    Ok(())
}

/// Refuses a sub-sample (sorted `(tag, position)` pairs) in which two positions share a tag: a
/// receiver repeating an item would get one coin per copy, k·ε for that item.
fn check_distinct_tags(y_tags: &[(u128, u32)]) -> Result<(), ProtocolError> {
    match y_tags.windows(2).find(|w| w[0].0 == w[1].0) {
        Some(w) => Err(ProtocolError::PeerMisbehaved(format!(
            "the receiver's sub-sample repeats an item (positions {} and {} carry the same \
             tag); {NAME}'s ε-DP guarantee needs each item at most once",
            w[0].1, w[1].1
        ))),
        None => Ok(()),
    }
}

fn bob(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    params: &DpParams,
    sampler: &mut Sampler,
    items: &[ItemDigest],
    n_alice: usize,
) -> Result<Vec<usize>, ProtocolError> {
    check_distinct(items)?;
    // Step 2a: the sub-sample Y*, in a secret random order.
    let shuffled = sampler.permutation(items.len());
    let mut kept = vec![false; items.len()];
    for k in kept.iter_mut() {
        *k = sampler.bernoulli(params.bob_sub_sampling);
    }
    let order: Vec<usize> = shuffled.into_iter().filter(|&i| kept[i]).collect();
    let mut head = vec![MSG_COUNT];
    put_u64(&mut head, order.len() as u64);
    link.send(&head)?;
    send_masked(link, ctx, items, &order)?;

    // Step 2b: Alice's points raised to b, returned as tags sorted by value.
    let n = ctx.cipher.point_len();
    let mut tags: Vec<u128> = Vec::with_capacity(n_alice.min(1 << 16));
    let mut received = 0;
    while let Some((_, remasked)) = receive_group(link, ctx, n_alice, &mut received)? {
        for out in remasked {
            let bytes = tag_bytes(&out, n, ctx.tag_len);
            tags.extend(bytes.chunks_exact(ctx.tag_len).map(|t| {
                let mut b = [0u8; 16];
                b[..ctx.tag_len].copy_from_slice(t);
                u128::from_be_bytes(b)
            }));
        }
    }
    tags.sort_unstable();
    for chunk in tags.chunks(ctx.batch) {
        let mut bytes = Vec::with_capacity(chunk.len() * ctx.tag_len);
        for t in chunk {
            bytes.extend_from_slice(&t.to_be_bytes()[..ctx.tag_len]);
        }
        link.send(&tag_message(&bytes, ctx.tag_len))?;
    }

    // Step 4: the chosen positions of Y*, mapped to our items.
    let positions = crate::positions::receive(link, order.len())?;
    let mut mine: Vec<usize> = positions.into_iter().map(|p| order[p]).collect();
    mine.sort_unstable();
    Ok(mine)
}

fn alice(
    link: &mut dyn Link,
    ctx: &Ctx<'_>,
    params: &DpParams,
    sampler: &mut Sampler,
    items: &[ItemDigest],
    n_bob: usize,
) -> Result<(), ProtocolError> {
    // Step 1: our masked items in our order (Bob returns them sorted by tag, not in this order).
    let order: Vec<usize> = (0..items.len()).collect();
    send_masked(link, ctx, items, &order)?;

    // Step 3: |Y*| (at most Bob's announced size), Y*^ab, then the tags of X^ab.
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "DP-PSI sub-sample size");
    expect_type(&mut r, MSG_COUNT)?;
    let n_star = r.u64()?;
    r.finish()?;
    if n_star > n_bob as u64 {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "the receiver announced a sub-sample of {n_star} items out of {n_bob}"
        )));
    }
    let n_star = n_star as usize;
    let y_tags = peer_tags(link, ctx, n_star)?;
    check_distinct_tags(&y_tags)?;
    let mut x_tags: Vec<u128> = Vec::with_capacity(items.len());
    receive_tags(link, ctx, items.len(), |_, t| x_tags.push(t))?;
    x_tags.sort_unstable();
    let mut in_intersection = vec![false; n_star];
    for &(t, pos) in &y_tags {
        if x_tags.binary_search(&t).is_ok()
            && let Some(slot) = in_intersection.get_mut(pos as usize)
        {
            *slot = true;
        }
    }
    // Randomized response over the positions of Y*.
    let (p2, q) = (params.p2(), params.q());
    let chosen: Vec<u32> = (0..n_star)
        .filter(|&i| sampler.bernoulli(if in_intersection[i] { p2 } else { q }))
        .map(|i| i as u32)
        .collect();
    crate::positions::send(link, &chosen, n_star)?;
    Ok(())
}

#[cfg(test)]
mod tests;
