//! Hash bucketing: split both parties' keys by a portable hash into `B` buckets and run the
//! protocol once per bucket, so per-run memory and the protocols' vectors stay bounded
//! (SecretFlow's `bucket_size`, default 2^20 items).
//!
//! Both parties derive `B = ⌈max(n_ours, n_theirs) / bucket_size⌉` from the handshake, put each
//! key digest into bucket `⌊h·B / 2^64⌋` (`h` = bytes 8..16 of the digest, little-endian — the
//! digest is SHA-256 of the canonical key, so this is portable and uniform), exchange the
//! per-bucket counts, then run bucket 0, 1, … in turn over the same link. Tags get
//! `⌈log2 B⌉` extra bits so the 2^-40 false-match bound covers the whole run.
//!
//! Leakage beyond the protocol's own: each party learns how many of the peer's keys fall in each
//! bucket (a histogram of a public hash of the peer's keys), as in SecretFlow.

use crate::error::DataError;
use blindjoin_link::{Link, Reader, put_u32};
use blindjoin_protocols::{
    HandshakeChecked, ItemDigest, Progress, ProtocolError, PsiOptions, PsiOutput, run_psi,
};

/// Most buckets a run may use (the count message is then 256 KiB).
pub const MAX_BUCKETS: usize = 1 << 16;

const COUNTS_MAGIC: &[u8; 4] = b"BKTS";

/// Number of buckets for the two parties' item counts.
///
/// # Errors
/// More than [`MAX_BUCKETS`] buckets would be needed.
pub fn bucket_count(n_ours: u64, n_theirs: u64, bucket_size: u64) -> Result<usize, DataError> {
    if bucket_size == 0 {
        return Ok(1);
    }
    let b = n_ours.max(n_theirs).div_ceil(bucket_size).max(1);
    if b > MAX_BUCKETS as u64 {
        return Err(DataError::Protocol(ProtocolError::Config(format!(
            "bucket_size {bucket_size} would split {} keys into {b} buckets (at most \
             {MAX_BUCKETS}); raise rr22_config.bucket_size / kkrt_config.bucket_size",
            n_ours.max(n_theirs)
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

/// Runs the agreed protocol over `items`, bucketed when the handshake says so; returns indices
/// into `items` like [`run_psi`].
///
/// # Errors
/// Protocol and link errors; a peer whose bucket counts do not add up.
pub fn run_bucketed(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<PsiOutput, DataError> {
    let size = hs.ours.bucket_size;
    let b = bucket_count(hs.ours.item_count, hs.theirs.item_count, size)?;
    if size == 0 || b == 1 {
        return Ok(run_psi(link, hs, opts, items, progress)?);
    }

    // Counting sort of our items by bucket.
    let buckets: Vec<usize> = items.iter().map(|d| bucket_of(d, b)).collect();
    let mut ours = vec![0u32; b];
    for &k in &buckets {
        ours[k] += 1;
    }
    let mut start = vec![0usize; b + 1];
    for k in 0..b {
        start[k + 1] = start[k] + ours[k] as usize;
    }
    let mut order = vec![0usize; items.len()];
    let mut fill = start.clone();
    for (i, &k) in buckets.iter().enumerate() {
        order[fill[k]] = i;
        fill[k] += 1;
    }
    drop(buckets);

    let theirs = exchange_counts(link, &ours, hs.theirs.item_count)?;
    let mut bucket_opts = opts.clone();
    bucket_opts.extra_stat_bits = opts.extra_stat_bits + (usize::BITS - (b - 1).leading_zeros());

    let mut result: Option<Vec<usize>> = None;
    for k in 0..b {
        let idx = &order[start[k]..start[k + 1]];
        let sub: Vec<ItemDigest> = idx.iter().map(|&i| items[i]).collect();
        let bhs = hs.for_bucket(u64::from(ours[k]), u64::from(theirs[k]));
        let out = run_psi(link, &bhs, &bucket_opts, &sub, progress)?;
        if let Some(found) = out.intersection {
            result
                .get_or_insert_with(Vec::new)
                .extend(found.into_iter().map(|j| idx[j]));
        }
    }
    if let Some(r) = result.as_mut() {
        r.sort_unstable();
    } else if hs.we_learn_result() {
        result = Some(Vec::new());
    }
    Ok(PsiOutput {
        intersection: result,
    })
}

/// Sends our per-bucket counts and returns the peer's, checked against its announced total.
fn exchange_counts(
    link: &mut dyn Link,
    ours: &[u32],
    their_total: u64,
) -> Result<Vec<u32>, DataError> {
    let mut msg = COUNTS_MAGIC.to_vec();
    put_u32(&mut msg, ours.len() as u32);
    for &c in ours {
        put_u32(&mut msg, c);
    }
    link.send(&msg).map_err(ProtocolError::from)?;
    let reply = link.recv().map_err(ProtocolError::from)?;
    let bad = |why: String| DataError::Protocol(ProtocolError::PeerMisbehaved(why));
    let mut r = Reader::new(&reply, "bucket counts");
    if r.take(4).map_err(ProtocolError::from)? != COUNTS_MAGIC {
        return Err(bad("bucket counts have the wrong magic".into()));
    }
    let b = r.u32().map_err(ProtocolError::from)? as usize;
    if b != ours.len() {
        return Err(bad(format!(
            "the peer split into {b} buckets, this party into {}",
            ours.len()
        )));
    }
    let mut theirs = Vec::with_capacity(b);
    for _ in 0..b {
        theirs.push(r.u32().map_err(ProtocolError::from)?);
    }
    r.finish().map_err(ProtocolError::from)?;
    let sum: u64 = theirs.iter().map(|&c| u64::from(c)).sum();
    if sum != their_total {
        return Err(bad(format!(
            "the peer's bucket counts add up to {sum}, but it announced {their_total} keys"
        )));
    }
    // A uniform hash loads each bucket with mean ± a few standard deviations; a count far above
    // that is a peer trying to make this party allocate one huge bucket.
    let cap = 2 * their_total / b as u64 + 1024;
    if let Some((k, &c)) = theirs
        .iter()
        .enumerate()
        .find(|&(_, &c)| u64::from(c) > cap)
    {
        return Err(bad(format!(
            "the peer claims {c} keys in bucket {k} of {b} (of {their_total} in all); a hash \
             cannot load a bucket that unevenly"
        )));
    }
    Ok(theirs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use blindjoin_crypto::item_digest;
    use blindjoin_link::mem_pair;
    use blindjoin_protocols::{Hello, NoProgress, Protocol, Role, handshake};
    use std::collections::HashSet;

    fn digests(tag: &str, range: std::ops::Range<usize>) -> Vec<ItemDigest> {
        range
            .map(|i| item_digest(format!("{tag}{i}").as_bytes()))
            .collect()
    }

    /// Both parties through `run_bucketed` on the in-memory link.
    fn run_both(
        protocol: Protocol,
        variant: &str,
        bucket_size: u64,
        xs: Vec<ItemDigest>,
        ys: Vec<ItemDigest>,
    ) -> (PsiOutput, PsiOutput) {
        let (mut la, mut lb) = mem_pair();
        let curve = (protocol == Protocol::Ecdh).then_some(blindjoin_crypto::Curve::Curve25519);
        let variant = variant.to_string();
        let hello = move |role, n: usize| {
            Hello::new(protocol, curve, role, 1, "INNER", true, n as u64)
                .with_variant(&variant)
                .with_bucket_size(bucket_size)
        };
        let h2 = hello.clone();
        let t = std::thread::spawn(move || {
            let hs = handshake(&mut lb, h2(Role::Sender, ys.len())).unwrap();
            run_bucketed(&mut lb, &hs, &PsiOptions::default(), &ys, &NoProgress).unwrap()
        });
        let hs = handshake(&mut la, hello(Role::Receiver, xs.len())).unwrap();
        let r = run_bucketed(&mut la, &hs, &PsiOptions::default(), &xs, &NoProgress).unwrap();
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
        for (protocol, variant, size) in [
            (Protocol::Rr22, "fast", 700),
            (Protocol::Rr22, "low_comm", 1),
            (Protocol::Rr22, "fast", 1 << 20),
            (Protocol::Ecdh, "", 250),
        ] {
            let size = if size == 1 { 3500 / 7 } else { size };
            let (r, s) = run_both(protocol, variant, size, xs.clone(), ys.clone());
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
            let (r, s) = run_both(Protocol::Rr22, "fast", 1, xs.clone(), ys.clone());
            assert_eq!(r.intersection, Some(plaintext(&xs, &ys)));
            assert_eq!(s.intersection, Some(plaintext(&ys, &xs)));
        }
    }

    #[test]
    fn lying_bucket_counts_are_a_typed_error() {
        let (mut la, mut lb) = mem_pair();
        let t = std::thread::spawn(move || {
            // Claims 3 buckets of 1 key each for a 5-key announcement.
            let mut msg = COUNTS_MAGIC.to_vec();
            put_u32(&mut msg, 3);
            for _ in 0..3 {
                put_u32(&mut msg, 1);
            }
            lb.send(&msg).unwrap();
            let _ = lb.recv();
        });
        let e = exchange_counts(&mut la, &[2, 2, 1], 5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("add up to 3") && e.contains("5"), "{e}");
        t.join().unwrap();

        let (mut la, mut lb) = mem_pair();
        let t = std::thread::spawn(move || {
            // 100,000 keys, all claimed to sit in bucket 0 of 4.
            let mut msg = COUNTS_MAGIC.to_vec();
            for c in [4, 100_000, 0, 0, 0] {
                put_u32(&mut msg, c);
            }
            lb.send(&msg).unwrap();
            let _ = lb.recv();
        });
        let e = exchange_counts(&mut la, &[1, 1, 1, 1], 100_000)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bucket 0"), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn bucket_count_and_index() {
        assert_eq!(bucket_count(10, 20, 0).unwrap(), 1);
        assert_eq!(bucket_count(0, 0, 5).unwrap(), 1);
        assert_eq!(bucket_count(10, 21, 5).unwrap(), 5);
        assert!(bucket_count(1 << 40, 0, 1).is_err());
        let d = [0xffu8; 16];
        assert_eq!(bucket_of(&d, 7), 6);
        assert_eq!(bucket_of(&[0u8; 16], 7), 0);
    }
}
