//! Hash bucketing: split both parties' keys by a portable hash into `B` buckets and run the
//! protocol once per bucket, so per-run memory and the protocols' vectors stay bounded
//! (SecretFlow's `bucket_size`, default 2^20 items), and so the data path can hold one bucket in
//! memory at a time (see [`crate::pipeline::spill`]).
//!
//! Both parties derive `B`, the power of two at or above `max(n_ours, n_theirs) / bucket_size`,
//! from the row counts in the handshake, and put each key digest into bucket `⌊h·B / 2^64⌋`
//! (`h` = bytes 8..16 of the digest, little-endian — the digest is SHA-256 of the canonical key,
//! so this is portable and uniform; with `B` a power of two it is the top `log2 B` bits of `h`,
//! which lets a party that spilled its rows into fewer or more on-disk shards find each
//! bucket's rows). They then run bucket 0, 1, … in turn over the same link; before each bucket
//! they swap the number of unique keys they hold in it. Tags get `log2 B` extra bits so the
//! 2^-40 false-match bound covers the whole run.
//!
//! Leakage beyond the protocol's own: none about the histogram. SecretFlow's parties learn how
//! many of the peer's unique keys fall in each bucket, a histogram of a public hash of the
//! peer's keys, so two runs on the same data with one new key show which bucket the key fell
//! into (a few bits of its hash, every run). Here, with more than one bucket, each party pads
//! every bucket with random dummy digests to [`padded_bucket_size`] of its announced row count,
//! so the counts it sends depend on nothing but that count (see the function for the bound on
//! the rare bucket that overflows it). Dummies match nothing (a random 128-bit digest equals one
//! of the peer's with probability ≤ n·2^-128) and are dropped from the result. A salted bucket
//! hash would not do this: the salt is known to both parties, so the peer still locates any key
//! it guesses.

use crate::error::DataError;
use crate::pipeline::process::ProcessorState;
use crate::pipeline::wire::BucketCount;
use blindjoin_link::Link;
use blindjoin_link::wire::WireMessage;
use blindjoin_protocols::{
    HandshakeChecked, ItemDigest, Progress, ProtocolError, PsiOptions, PsiOutput, Reveal, run_psi,
};

/// Unique keys per bucket that a party with `rows` rows pads each of `b` buckets to (0: no
/// padding, one bucket). With `μ = rows / b`, the target is `μ + 8√μ + 32`. A bucket's count is
/// at most a Binomial(rows, 1/b) variable (duplicates only lower it), so by Bernstein's
/// inequality it exceeds `μ + t` with probability at most `exp(−t² / (2(μ + t/3)))`; for
/// `t = 8√μ + 32` that is below 2^-40 for every `μ` ([`overflow_bits`], tested). A bucket over
/// the target is sent unpadded (its count then shows that it overflowed). The cost: `8/√μ`
/// more items per bucket, 0.8 % at `μ = 2^20`.
pub fn padded_bucket_size(rows: u64, b: usize) -> u64 {
    if b <= 1 {
        return 0;
    }
    let mu = rows as f64 / b as f64;
    (mu + 8.0 * mu.sqrt() + 32.0).ceil() as u64
}

/// `−log2` of the Bernstein bound on a bucket of mean `mu` exceeding its padded size.
pub fn overflow_bits(mu: f64) -> f64 {
    let t = 8.0 * mu.sqrt() + 32.0;
    t * t / (2.0 * (mu + t / 3.0)) / std::f64::consts::LN_2
}

/// Most buckets a run may use.
pub const MAX_BUCKETS: usize = 1 << 16;

/// Number of buckets for the two parties' row counts: the power of two at or above
/// `max / bucket_size` (1 when `bucket_size` is 0).
///
/// # Errors
/// More than [`MAX_BUCKETS`] buckets would be needed.
pub fn bucket_count(n_ours: u64, n_theirs: u64, bucket_size: u64) -> Result<usize, DataError> {
    if bucket_size == 0 {
        return Ok(1);
    }
    let b = n_ours
        .max(n_theirs)
        .div_ceil(bucket_size)
        .max(1)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX);
    if b > MAX_BUCKETS as u64 {
        return Err(DataError::Protocol(ProtocolError::Config(format!(
            "bucket_size {bucket_size} would split {} rows into {b} buckets (at most \
             {MAX_BUCKETS}); raise rr22_config.bucket_size or kkrt_config.bucket_size (ECDH \
             runs, two- or three-party, always use {}, so at most {} rows)",
            n_ours.max(n_theirs),
            crate::spec::DEFAULT_BUCKET_SIZE,
            crate::spec::DEFAULT_BUCKET_SIZE.saturating_mul(MAX_BUCKETS as u64)
        ))));
    }
    Ok(b as usize)
}

/// The bucket of a digest among `b`.
pub fn bucket_of(d: &ItemDigest, b: usize) -> usize {
    let mut w = [0u8; 8];
    w.copy_from_slice(&d[8..16]);
    ((u128::from(u64::from_le_bytes(w)) * b as u128) >> 64) as usize
}

/// Runs the agreed protocol bucket by bucket over one link; the caller hands it each bucket's
/// unique digests in bucket order.
pub struct BucketedPsi<'h> {
    hs: &'h HandshakeChecked,
    opts: PsiOptions,
    buckets: usize,
    next: usize,
    peer_keys: u64,
    counts: RevealCounts,
    /// A resumed run redoing a bucket this party already ran: `(bucket, the peer's key count
    /// in it then)`.
    redo: Option<(usize, u64)>,
}

/// In the modes that reveal the intersection's size, what the buckets run so far revealed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RevealCounts {
    /// |X ∩ Y| so far, when this party learns it.
    pub cardinality: Option<u64>,
    /// Keys of the intersection revealed so far (threshold mode).
    pub revealed: u64,
}

impl<'h> BucketedPsi<'h> {
    /// Sets up the run the handshake agreed, in buckets of `bucket_size` items (agreed in the
    /// run terms; 0: one bucket).
    ///
    /// # Errors
    /// The row counts need too many buckets.
    pub fn new(
        hs: &'h HandshakeChecked,
        opts: &PsiOptions,
        bucket_size: u64,
    ) -> Result<Self, DataError> {
        let buckets = bucket_count(hs.ours().item_count, hs.theirs().item_count, bucket_size)?;
        let mut opts = opts.clone();
        opts.extra_stat_bits += usize::BITS - (buckets - 1).leading_zeros();
        Ok(BucketedPsi {
            hs,
            opts,
            buckets,
            next: 0,
            peer_keys: 0,
            counts: RevealCounts::default(),
            redo: None,
        })
    }

    /// The number of buckets.
    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// The peer's unique keys in the buckets run so far.
    pub fn peer_keys(&self) -> u64 {
        self.peer_keys
    }

    /// Whether every bucket has run.
    pub fn done(&self) -> bool {
        self.next == self.buckets
    }

    /// The next bucket to run.
    pub fn next_bucket(&self) -> usize {
        self.next
    }

    /// What the buckets run so far revealed (cardinality and threshold modes).
    pub fn counts(&self) -> RevealCounts {
        self.counts
    }

    /// Skips to bucket `next`, the peer having had `peer_keys` keys before it and the buckets
    /// before it having revealed `counts` (a resumed run).
    ///
    /// # Errors
    /// `next` is past the last bucket.
    pub fn resume_at(
        &mut self,
        next: usize,
        peer_keys: u64,
        counts: RevealCounts,
    ) -> Result<(), DataError> {
        if next > self.buckets {
            return Err(DataError::Protocol(ProtocolError::Config(format!(
                "the checkpoint is at bucket {next} of {}; delete the recovery folder to start \
                 over",
                self.buckets
            ))));
        }
        self.next = next;
        self.peer_keys = peer_keys;
        self.counts = counts;
        Ok(())
    }

    /// Skips to a checkpoint's state; when the state redoes a bucket this party already ran
    /// (`redo_peer_keys`), the peer must announce the key count it announced then.
    ///
    /// # Errors
    /// The state is past the last bucket.
    pub fn resume_from(&mut self, st: &ProcessorState) -> Result<(), DataError> {
        self.resume_at(st.buckets_done, st.peer_keys, st.counts)?;
        self.redo = st.redo_peer_keys.map(|n| (st.buckets_done, n));
        Ok(())
    }

    /// Passes over the next bucket without running the protocol, the peer having `peer_keys`
    /// keys in it (`check_hash_digest` found the key sets equal: every key is in the
    /// intersection).
    ///
    /// # Errors
    /// Every bucket has run.
    pub fn skip_next(&mut self, peer_keys: u64) -> Result<(), DataError> {
        self.resume_at(self.next + 1, self.peer_keys + peer_keys, self.counts)
    }

    /// Runs the next bucket on our unique digests in it; returns the indices into `items` of
    /// the intersection when this party learns it. In threshold mode the bucket may reveal only
    /// what the threshold has left.
    ///
    /// # Errors
    /// Protocol and link errors; a peer whose bucket counts are implausible.
    pub fn run_next(
        &mut self,
        link: &mut dyn Link,
        items: &[ItemDigest],
        progress: &dyn Progress,
    ) -> Result<Option<Vec<usize>>, DataError> {
        let k = self.next;
        if k >= self.buckets {
            return Err(DataError::Protocol(ProtocolError::Config(
                "internal: more buckets run than agreed".into(),
            )));
        }
        let target = padded_bucket_size(self.hs.ours().item_count, self.buckets) as usize;
        let padded;
        let run_items = if target > items.len() {
            padded = with_dummies(items, target)?;
            &padded[..]
        } else {
            items
        };
        let theirs = self.exchange_count(link, k, run_items.len() as u64)?;
        self.peer_keys += theirs;
        self.next += 1;
        let bhs = self.hs.for_bucket(run_items.len() as u64, theirs);
        let threshold = self.opts.reveal;
        if let Reveal::UpTo(t) = threshold {
            self.opts.reveal = Reveal::UpTo(t.saturating_sub(self.counts.revealed));
        }
        let out = run_psi(link, &bhs, &self.opts, run_items, progress);
        self.opts.reveal = threshold;
        let mut out = out?;
        if let Some(found) = out.intersection.as_mut() {
            found.retain(|&i| i < items.len());
        }
        if let Some(c) = out.cardinality {
            self.counts.cardinality = Some(self.counts.cardinality.unwrap_or(0) + c);
        }
        self.counts.revealed += out.revealed.unwrap_or(0);
        Ok(out.intersection)
    }

    /// Swaps bucket `k`'s unique-key count with the peer and bounds the peer's.
    pub(crate) fn exchange_count(
        &self,
        link: &mut dyn Link,
        k: usize,
        ours: u64,
    ) -> Result<u64, DataError> {
        let msg = BucketCount {
            bucket: k as u32,
            keys: ours,
        };
        link.send(&msg.encode()).map_err(ProtocolError::from)?;
        let reply = link.recv().map_err(ProtocolError::from)?;
        let bad = |why: String| DataError::Protocol(ProtocolError::PeerMisbehaved(why));
        let BucketCount {
            bucket: their_k,
            keys: theirs,
        } = BucketCount::decode(&reply).map_err(ProtocolError::from)?;
        let their_k = their_k as usize;
        if their_k != k {
            return Err(bad(format!(
                "the peer is at bucket {their_k}, this party at bucket {k}"
            )));
        }
        let total = self.hs.theirs().item_count;
        let padded_total =
            padded_bucket_size(total, self.buckets).saturating_mul(self.buckets as u64);
        if self.peer_keys.saturating_add(theirs) > total.max(padded_total) {
            return Err(bad(format!(
                "the peer's bucket counts exceed the {total} rows it announced"
            )));
        }
        // A uniform hash loads each bucket with mean ± a few standard deviations; a count far
        // above that is a peer trying to make this party allocate one huge bucket.
        let cap = 2 * total / self.buckets as u64 + 1024;
        if theirs > cap {
            return Err(bad(format!(
                "the peer claims {theirs} keys in bucket {k} of {} (of {total} rows in all); a \
                 hash cannot load a bucket that unevenly",
                self.buckets
            )));
        }
        // A resumed run redoing a bucket this party finished: the same input gives the same
        // count; another count means other rows, a second query on this party's bucket.
        if let Some((at, before)) = self.redo
            && at == k
            && before != theirs
        {
            return Err(bad(format!(
                "after the restart the peer redoes bucket {k} with {theirs} keys, but it sent \
                 {before} when the bucket first ran: its input changed since the interruption \
                 (or it replays the bucket with other rows); delete both recovery folders to \
                 start over with the new input"
            )));
        }
        Ok(theirs)
    }
}

/// `items` followed by random digests up to `target` items.
fn with_dummies(items: &[ItemDigest], target: usize) -> Result<Vec<ItemDigest>, DataError> {
    let mut out = Vec::with_capacity(target);
    out.extend_from_slice(items);
    let mut random = vec![0u8; (target - items.len()) * 16];
    blindjoin_crypto::random_bytes(&mut random).map_err(ProtocolError::from)?;
    for chunk in random.chunks_exact(16) {
        let mut d = [0u8; 16];
        d.copy_from_slice(chunk);
        out.push(d);
    }
    Ok(out)
}

/// Runs the agreed protocol over unique digests `items` held in memory, bucket by bucket;
/// returns indices into `items` like [`run_psi`].
///
/// # Errors
/// Protocol and link errors; a peer whose bucket counts are implausible.
pub fn run_bucketed(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    opts: &PsiOptions,
    bucket_size: u64,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<PsiOutput, DataError> {
    let mut psi = BucketedPsi::new(hs, opts, bucket_size)?;
    let b = psi.buckets();
    let mut by_bucket: Vec<Vec<usize>> = vec![Vec::new(); b];
    for (i, d) in items.iter().enumerate() {
        by_bucket[bucket_of(d, b)].push(i);
    }
    let mut result: Option<Vec<usize>> = None;
    for idx in by_bucket {
        let sub: Vec<ItemDigest> = idx.iter().map(|&i| items[i]).collect();
        if let Some(found) = psi.run_next(link, &sub, progress)? {
            result
                .get_or_insert_with(Vec::new)
                .extend(found.into_iter().map(|j| idx[j]));
        }
    }
    if let Some(r) = result.as_mut() {
        r.sort_unstable();
    }
    Ok(PsiOutput::intersection(result))
}

#[cfg(test)]
mod tests {
    use super::*;
    use blindjoin_crypto::item_digest;
    use blindjoin_link::{MemLink, mem_pair};
    use blindjoin_protocols::rr22::Rr22Mode;
    use blindjoin_protocols::{Hello, NoProgress, ProtocolChoice, Role, handshake};
    use std::collections::HashSet;

    fn digests(tag: &str, range: std::ops::Range<usize>) -> Vec<ItemDigest> {
        range
            .map(|i| item_digest(format!("{tag}{i}").as_bytes()))
            .collect()
    }

    /// Both parties through `run_bucketed` on the in-memory link.
    fn run_both(
        protocol: ProtocolChoice,
        bucket_size: u64,
        xs: Vec<ItemDigest>,
        ys: Vec<ItemDigest>,
    ) -> (PsiOutput, PsiOutput) {
        let (mut la, mut lb) = mem_pair();
        let hello = move |role, n: usize| Hello::new(protocol, role, true, n as u64);
        let t = std::thread::spawn(move || {
            let hs = handshake(&mut lb, hello(Role::Sender, ys.len())).unwrap();
            let opts = PsiOptions::default();
            run_bucketed(&mut lb, &hs, &opts, bucket_size, &ys, &NoProgress).unwrap()
        });
        let hs = handshake(&mut la, hello(Role::Receiver, xs.len())).unwrap();
        let opts = PsiOptions::default();
        let r = run_bucketed(&mut la, &hs, &opts, bucket_size, &xs, &NoProgress).unwrap();
        (r, t.join().unwrap())
    }

    fn plaintext(mine: &[ItemDigest], theirs: &[ItemDigest]) -> Vec<usize> {
        let set: HashSet<_> = theirs.iter().collect();
        (0..mine.len())
            .filter(|&i| set.contains(&mine[i]))
            .collect()
    }

    #[test]
    fn bucketed_runs_match_plaintext() {
        let mut xs = digests("k", 0..3000);
        xs.extend(digests("x", 0..500));
        let mut ys = digests("y", 0..1200);
        ys.extend(digests("k", 1000..2000));
        let rr22 = |mode| ProtocolChoice::Rr22 { mode };
        for (protocol, size) in [
            (rr22(Rr22Mode::Fast), 700),
            (rr22(Rr22Mode::LowComm), 1),
            (rr22(Rr22Mode::Fast), 1 << 20),
            (
                ProtocolChoice::Ecdh {
                    curve: blindjoin_crypto::Curve::Curve25519,
                },
                250,
            ),
        ] {
            let size = if size == 1 { 3500 / 7 } else { size };
            let (r, s) = run_both(protocol, size, xs.clone(), ys.clone());
            assert_eq!(
                r.intersection,
                Some(plaintext(&xs, &ys)),
                "{protocol} {size}"
            );
            assert_eq!(
                s.intersection,
                Some(plaintext(&ys, &xs)),
                "{protocol} {size}"
            );
        }
    }

    #[test]
    fn empty_sides_and_single_items_bucket_fine() {
        let one = digests("k", 0..1);
        for (xs, ys) in [
            (Vec::new(), Vec::new()),
            (one.clone(), Vec::new()),
            (Vec::new(), one.clone()),
            (one.clone(), one.clone()),
        ] {
            let fast = ProtocolChoice::Rr22 {
                mode: Rr22Mode::Fast,
            };
            let (r, s) = run_both(fast, 1, xs.clone(), ys.clone());
            assert_eq!(r.intersection, Some(plaintext(&xs, &ys)));
            assert_eq!(s.intersection, Some(plaintext(&ys, &xs)));
        }
    }

    fn fast() -> ProtocolChoice {
        ProtocolChoice::Rr22 {
            mode: Rr22Mode::Fast,
        }
    }

    #[test]
    fn lying_bucket_counts_are_a_typed_error() {
        // The receiver announces 100 rows, the "sender" 100,000, then claims too much.
        for (claims, want) in [
            (vec![(0u32, 200_000u64)], "exceed"),
            (vec![(0, 60_000)], "unevenly"),
            (vec![(1, 1)], "at bucket 1"),
        ] {
            let (mut la, mut lb) = mem_pair();
            let t = std::thread::spawn(move || {
                let hello = Hello::new(fast(), Role::Sender, true, 100_000);
                handshake(&mut lb, hello).unwrap();
                for (k, c) in claims {
                    let _ = lb.recv();
                    let msg = BucketCount { bucket: k, keys: c };
                    let _ = lb.send(&msg.encode());
                }
            });
            let hello = Hello::new(fast(), Role::Receiver, true, 100);
            let hs = handshake(&mut la, hello).unwrap();
            let mut psi = BucketedPsi::new(&hs, &PsiOptions::default(), 1 << 14).unwrap();
            assert_eq!(psi.buckets(), 8);
            let e = psi
                .run_next(&mut la, &digests("k", 0..10), &NoProgress)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
            drop(la);
            t.join().unwrap();
        }
    }

    #[test]
    fn padding_overflows_with_probability_below_2_to_the_minus_40() {
        let mut mu = 1e-3;
        while mu < 1e10 {
            assert!(overflow_bits(mu) >= 40.0, "mu {mu}: {}", overflow_bits(mu));
            mu *= 1.5;
        }
        assert_eq!(padded_bucket_size(1 << 30, 1), 0);
        // 2^20 keys a bucket: 0.8 % dummies.
        assert_eq!(padded_bucket_size(1 << 24, 16), (1 << 20) + 8 * 1024 + 32);
    }

    /// Runs every bucket of `items` in buckets of 500 keys; returns the peer's count per bucket
    /// and how many of our keys matched (checking every index is one of ours, not a dummy's).
    fn every_bucket(link: &mut MemLink, role: Role, items: &[ItemDigest]) -> (Vec<u64>, usize) {
        let hs = handshake(link, Hello::new(fast(), role, true, 3000)).unwrap();
        let mut psi = BucketedPsi::new(&hs, &PsiOptions::default(), 500).unwrap();
        let b = psi.buckets();
        let (mut counts, mut found) = (Vec::new(), 0);
        for k in 0..b {
            let sub: Vec<ItemDigest> = items
                .iter()
                .copied()
                .filter(|d| bucket_of(d, b) == k)
                .collect();
            let before = psi.peer_keys();
            let out = psi.run_next(link, &sub, &NoProgress).unwrap().unwrap();
            assert!(out.iter().all(|&i| i < sub.len()));
            found += out.len();
            counts.push(psi.peer_keys() - before);
        }
        (counts, found)
    }

    #[test]
    fn bucket_counts_do_not_depend_on_the_keys() {
        // Two runs on the same row count, one key different: the peer sees the same counts in
        // every bucket (and the same results as without padding).
        let xs = digests("k", 0..3000);
        let mut xs2 = xs.clone();
        xs2[2500] = item_digest(b"a new key");
        let ys = digests("k", 2000..5000);
        let mut seen = Vec::new();
        for mine in [xs, xs2] {
            let (mut la, mut lb) = mem_pair();
            let theirs = ys.clone();
            let t = std::thread::spawn(move || every_bucket(&mut lb, Role::Sender, &theirs));
            let (_, found) = every_bucket(&mut la, Role::Receiver, &mine);
            let (counts, their_found) = t.join().unwrap();
            assert!(counts.iter().all(|&c| c == counts[0]), "{counts:?}");
            assert_eq!(found, their_found);
            seen.push((counts, found));
        }
        assert_eq!(seen[0].0, seen[1].0);
        assert_eq!((seen[0].1, seen[1].1), (1000, 999));
    }

    #[test]
    fn bucket_count_and_index() {
        assert_eq!(bucket_count(10, 20, 0).unwrap(), 1);
        assert_eq!(bucket_count(0, 0, 5).unwrap(), 1);
        assert_eq!(bucket_count(10, 21, 5).unwrap(), 8);
        assert_eq!(bucket_count(10, 20, 5).unwrap(), 4);
        assert!(bucket_count(1 << 40, 0, 1).is_err());
        let d = [0xffu8; 16];
        assert_eq!(bucket_of(&d, 7), 6);
        assert_eq!(bucket_of(&[0u8; 16], 7), 0);
    }

    /// A resumed run redoing a bucket this party already ran: the peer must announce the key
    /// count it announced the first time; another count (other rows) is refused as its fault,
    /// the same count passes.
    #[test]
    fn a_redone_bucket_with_another_peer_count_is_refused() {
        let protocol = ProtocolChoice::Ecdh {
            curve: blindjoin_protocols::Curve::Curve25519,
        };
        for (peer_sends, refused) in [(11u64, true), (10, false)] {
            let (mut la, mut lb) = mem_pair();
            let t = std::thread::spawn(move || {
                let hello = Hello::new(protocol, Role::Sender, false, 4000);
                handshake(&mut lb, hello).unwrap();
                let _ours = lb.recv().unwrap();
                let reply = BucketCount {
                    bucket: 2,
                    keys: peer_sends,
                };
                lb.send(&reply.encode()).unwrap();
            });
            let hs = handshake(&mut la, Hello::new(protocol, Role::Receiver, false, 4000)).unwrap();
            let mut psi = BucketedPsi::new(&hs, &PsiOptions::default(), 1000).unwrap();
            let st = ProcessorState {
                buckets_done: 2,
                peer_keys: 20,
                redo_peer_keys: Some(10),
                ..ProcessorState::default()
            };
            psi.resume_from(&st).unwrap();
            let got = psi.exchange_count(&mut la, 2, 10);
            t.join().unwrap();
            match got {
                Err(DataError::Protocol(ProtocolError::PeerMisbehaved(m))) if refused => {
                    assert!(
                        m.contains("redoes bucket 2 with 11 keys") && m.contains("sent 10"),
                        "{m}"
                    )
                }
                Ok(n) if !refused => assert_eq!(n, 10),
                other => panic!("peer sends {peer_sends}: {other:?}"),
            }
        }
    }
}
