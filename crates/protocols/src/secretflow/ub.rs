//! SecretFlow's unbalanced ECDH-OPRF PSI (`ub_psi_config`; psi
//! `psi/algorithm/ecdh/ub_psi/{server,client,ecdh_oprf_psi}.cc`@242a8fa) for one party against
//! a SecretFlow party on its link. Items in, indices out; the session (modes, SyncWait, cache
//! files, output) is the data path's (`blindjoin_data::secretflow_ub`).
//!
//! * **Cache transfer** (`MODE_OFFLINE_TRANSFER_CACHE`), on the main context: the server sends
//!   its cache's 12-byte OPRF values in stored order, at most [`CACHE_BATCH`] per batch, with
//!   each batch's extra-copy counts, then the end batch; then both run a barrier.
//! * **Online**, on the context spawned at `Init`: the client sends its items blinded by one
//!   random r ([`BLIND_BATCH`] per batch, with extra-copy counts only if the server learns the
//!   result), then the end batch; the server answers each batch with the points raised to its
//!   key, in order, then the end batch — or, when the client does not learn the result, all of
//!   them at once in a random order ([`CACHE_BATCH`] per batch). The client's item is in the
//!   intersection when its OPRF value is in the cache. If the server learns the result the
//!   client sends two `IndexesProto`: the matched cache positions, then its matched positions
//!   (in the order the evaluations came back).
//!
//! Batches of this protocol set only `flatten_bytes`, `is_last_batch` and
//! `duplicate_item_cnt`. Everything from the peer is bounded and checked; nothing panics.

use super::batch::Batch;
use crate::ProtocolError;
use blindjoin_crypto::secretflow_oprf::{Blinder, OPRF_LEN, OprfKey, OprfValue, POINT_LEN};
use blindjoin_link::secretflow::Context;
use blindjoin_link::secretflow::proto::{Fields, Value, put_bytes_field, put_varint, read_varint};
use std::collections::HashMap;

/// Values per cache-transfer batch, and per batch of the shuffled reply
/// (`kEcdhOprfPsiBatchSize`).
pub const CACHE_BATCH: usize = 8192;
/// Items per blinded batch (the client's key provider's batch).
pub const BLIND_BATCH: usize = 1 << 16;
/// Most items we accept from the peer in one stream: 2^32, SecretFlow's index width.
pub const MAX_PEER_ITEMS: u64 = 1 << 32;

fn bad(m: String) -> ProtocolError {
    ProtocolError::PeerMisbehaved(m)
}

/// A batch as this protocol sends it: only fields 2, 3 and 6.
fn batch(flatten: Vec<u8>, extra: &[u32]) -> Vec<u8> {
    Batch {
        flatten,
        duplicates: extra
            .iter()
            .enumerate()
            .filter(|(_, e)| **e > 0)
            .map(|(i, e)| (i as u32, *e))
            .collect(),
        ..Batch::default()
    }
    .encode()
}

/// The end batch, `18 01`.
fn end_batch() -> Vec<u8> {
    Batch {
        is_last: true,
        ..Batch::default()
    }
    .encode()
}

/// Expands a batch's sparse duplicate counts into one count per item.
fn extra_of(b: &Batch) -> Vec<u32> {
    let mut e = vec![0u32; b.item_num as usize];
    for &(i, n) in &b.duplicates {
        e[i as usize] = n;
    }
    e
}

/// `IndexesProto{1: repeated uint32}`, packed as the wheel writes it.
pub fn encode_indexes(v: &[u32]) -> Vec<u8> {
    let mut packed = Vec::with_capacity(v.len() * 3);
    for &x in v {
        put_varint(&mut packed, u64::from(x));
    }
    let mut out = Vec::with_capacity(packed.len() + 6);
    if !packed.is_empty() {
        put_bytes_field(&mut out, 1, &packed);
    }
    out
}

/// Decodes an `IndexesProto` (packed or not), at most `max` entries.
///
/// # Errors
/// [`ProtocolError::PeerMisbehaved`] for bad protobuf, a value over 32 bits, or too many.
pub fn decode_indexes(buf: &[u8], max: usize, what: &str) -> Result<Vec<u32>, ProtocolError> {
    let err = |m: String| bad(format!("SecretFlow {what}: {m}"));
    let mut out = Vec::new();
    let push = |v: u64, out: &mut Vec<u32>| -> Result<(), ProtocolError> {
        if out.len() >= max {
            return Err(err(format!("more than {max} indexes")));
        }
        out.push(u32::try_from(v).map_err(|_| err(format!("index {v} over 32 bits")))?);
        Ok(())
    };
    let mut f = Fields::new(buf, "IndexesProto");
    while let Some((field, v)) = f.next_field().map_err(|e| err(e.to_string()))? {
        match (field, v) {
            (1, Value::Varint(x)) => push(x, &mut out)?,
            (1, Value::Bytes(p)) => {
                let mut at = 0;
                while at < p.len() {
                    let x = read_varint(p, &mut at)
                        .ok_or_else(|| err("a truncated packed varint".into()))?;
                    push(x, &mut out)?;
                }
            }
            (1, _) => return Err(err("field 1 of the wrong wire type".into())),
            _ => {}
        }
    }
    Ok(out)
}

/// The server's cache transfer: `values` (in stored order) and their extra-copy counts, then
/// the barrier. `ctx` is the main context, which must have sent no P2P message yet.
///
/// # Errors
/// Link failures; [`ProtocolError::Config`] if the lengths differ.
pub fn send_cache(
    ctx: &mut Context,
    values: &[OprfValue],
    extra: &[u32],
) -> Result<(), ProtocolError> {
    if values.len() != extra.len() {
        return Err(ProtocolError::Config(format!(
            "{} duplicate counts for {} cache values",
            extra.len(),
            values.len()
        )));
    }
    for (v, e) in values.chunks(CACHE_BATCH).zip(extra.chunks(CACHE_BATCH)) {
        ctx.send(&batch(v.concat(), e))?;
    }
    ctx.send(&end_batch())?;
    ctx.barrier()?;
    Ok(())
}

/// The server's cache as the client receives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerCache {
    /// The OPRF values, in the server's stored order.
    pub values: Vec<OprfValue>,
    /// Extra copies of each in the server's table.
    pub extra: Vec<u32>,
}

/// The client's side of [`send_cache`], at most `max_items` values.
///
/// # Errors
/// Link failures; a malformed batch, or more than `max_items` values.
pub fn recv_cache(ctx: &mut Context, max_items: u64) -> Result<PeerCache, ProtocolError> {
    let mut cache = PeerCache::default();
    loop {
        let b = Batch::decode_uncounted(&ctx.recv()?, OPRF_LEN)?;
        if b.is_last {
            if b.item_num != 0 {
                return Err(bad("the SecretFlow cache's end batch carries items".into()));
            }
            break;
        }
        if cache.values.len() as u64 + u64::from(b.item_num) > max_items.min(MAX_PEER_ITEMS) {
            return Err(bad(format!(
                "the SecretFlow server's cache has more than {} values",
                max_items.min(MAX_PEER_ITEMS)
            )));
        }
        cache.extra.extend(extra_of(&b));
        for v in b.flatten.chunks_exact(OPRF_LEN) {
            let mut a = [0u8; OPRF_LEN];
            a.copy_from_slice(v);
            cache.values.push(a);
        }
    }
    ctx.barrier()?;
    Ok(cache)
}

/// One match the server learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerMatch {
    /// Position in the server's cache (stored order).
    pub cache_index: u32,
    /// The client's extra copies of the item.
    pub peer_extra: u32,
}

/// What the server's online step found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerOutcome {
    /// Unique items the client sent.
    pub peer_unique: u64,
    /// The client's rows (unique items plus their extra copies; extra copies are sent only when
    /// the server learns the result).
    pub peer_total: u64,
    /// The matches, if the server learns the result.
    pub matches: Option<Vec<ServerMatch>>,
}

/// The server's online step on `online` (the context spawned at `Init`): evaluate the client's
/// blinded items with `key`, at most `max_items` of them (a client that sends more is refused
/// before the batch that passes the cap is evaluated); if `server_gets_result`, receive and
/// check the index lists against a cache of `cache_len` values.
///
/// # Errors
/// Link failures; malformed batches, invalid points, too many items, inconsistent indexes.
pub fn server_online(
    online: &mut Context,
    key: &OprfKey,
    client_gets_result: bool,
    server_gets_result: bool,
    cache_len: usize,
    max_items: u64,
) -> Result<ServerOutcome, ProtocolError> {
    let cap = max_items.min(MAX_PEER_ITEMS);
    let mut extra: Vec<u32> = Vec::new();
    let mut held: Vec<u8> = Vec::new();
    loop {
        let b = Batch::decode_uncounted(&online.recv()?, POINT_LEN)?;
        if b.is_last {
            if b.item_num != 0 {
                return Err(bad("the SecretFlow client's end batch carries items".into()));
            }
            if client_gets_result {
                online.send(&end_batch())?;
            }
            break;
        }
        if extra.len() as u64 + u64::from(b.item_num) > cap {
            return Err(bad(format!(
                "the SecretFlow client sent more than {cap} items (this server's \
                 blindjoin.max_query_items, or SecretFlow's 2^32 index width)"
            )));
        }
        extra.extend(extra_of(&b));
        let evaluated = key.evaluate_blinded(&b.flatten)?;
        if client_gets_result {
            online.send(&batch(evaluated, &[]))?;
        } else {
            held.extend_from_slice(&evaluated);
        }
    }
    let n = extra.len();
    if !client_gets_result {
        // RecvBlindAndShuffleSendEvaluate: all at once, in a random order.
        let perm = random_permutation(n)?;
        let mut shuffled_extra = Vec::with_capacity(n);
        let mut out = Vec::with_capacity(CACHE_BATCH * POINT_LEN);
        for (k, &p) in perm.iter().enumerate() {
            out.extend_from_slice(&held[p * POINT_LEN..(p + 1) * POINT_LEN]);
            shuffled_extra.push(extra[p]);
            if (k + 1) % CACHE_BATCH == 0 {
                online.send(&batch(std::mem::take(&mut out), &[]))?;
            }
        }
        if !out.is_empty() {
            online.send(&batch(out, &[]))?;
        }
        online.send(&end_batch())?;
        extra = shuffled_extra;
    }
    let peer_total = n as u64 + extra.iter().map(|&e| u64::from(e)).sum::<u64>();
    let mut outcome = ServerOutcome {
        peer_unique: n as u64,
        peer_total,
        matches: None,
    };
    if server_gets_result {
        let max = n.min(cache_len);
        let cache_idx = decode_indexes(&online.recv()?, max, "cache indexes")?;
        let client_idx = decode_indexes(&online.recv()?, max, "client indexes")?;
        if cache_idx.len() != client_idx.len() {
            return Err(bad(format!(
                "SecretFlow client sent {} cache indexes but {} client indexes",
                cache_idx.len(),
                client_idx.len()
            )));
        }
        let mut seen_cache = vec![false; cache_len];
        let mut seen_client = vec![false; n];
        let mut matches = Vec::with_capacity(cache_idx.len());
        for (&c, &k) in cache_idx.iter().zip(&client_idx) {
            let (cu, ku) = (c as usize, k as usize);
            if cu >= cache_len || ku >= n {
                return Err(bad(format!(
                    "SecretFlow client index pair ({c}, {k}) outside a cache of {cache_len} and \
                     {n} client items"
                )));
            }
            if std::mem::replace(&mut seen_cache[cu], true)
                || std::mem::replace(&mut seen_client[ku], true)
            {
                return Err(bad(format!(
                    "SecretFlow client index pair ({c}, {k}) repeats an index"
                )));
            }
            matches.push(ServerMatch {
                cache_index: c,
                peer_extra: extra[ku],
            });
        }
        outcome.matches = Some(matches);
    }
    Ok(outcome)
}

/// A uniformly random permutation of 0..n (Fisher–Yates on OS randomness, rejection sampled).
///
/// # Errors
/// The OS random generator failed.
pub fn random_permutation(n: usize) -> Result<Vec<usize>, ProtocolError> {
    let mut p: Vec<usize> = (0..n).collect();
    let mut buf = [0u8; 8 * 256];
    let mut at = buf.len();
    let mut next = || -> Result<u64, ProtocolError> {
        if at == buf.len() {
            blindjoin_crypto::random_bytes(&mut buf)?;
            at = 0;
        }
        let mut w = [0u8; 8];
        w.copy_from_slice(&buf[at..at + 8]);
        at += 8;
        Ok(u64::from_le_bytes(w))
    };
    for i in (1..n).rev() {
        let bound = i as u64 + 1;
        let zone = u64::MAX - (u64::MAX % bound);
        let j = loop {
            let r = next()?;
            if r < zone {
                break (r % bound) as usize;
            }
        };
        p.swap(i, j);
    }
    Ok(p)
}

/// One match the client finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientMatch {
    /// Our item's index (in our order; meaningless when the reply was shuffled).
    pub index: u32,
    /// Position in the server's cache.
    pub cache_index: u32,
    /// The server's extra copies of the item.
    pub peer_extra: u32,
}

/// The client's online step on `online` for our unique `items` (`extra[i]` more copies of each
/// in our table) against the server's `cache`. Returns the matches in cache order. Whether we
/// learn the result is the server's choice, not a step of ours: when we do not, it shuffles its
/// reply, and `index` is then a position in that order, not our item's (the matches' count and
/// cache positions stay right, and are what the server is sent if it learns the result).
///
/// # Errors
/// Link failures; malformed batches, invalid points, a reply of the wrong size.
pub fn client_online<T: AsRef<[u8]> + Sync>(
    online: &mut Context,
    items: &[T],
    extra: &[u32],
    cache: &PeerCache,
    server_gets_result: bool,
) -> Result<Vec<ClientMatch>, ProtocolError> {
    if extra.len() != items.len() {
        return Err(ProtocolError::Config(format!(
            "{} duplicate counts for {} items",
            extra.len(),
            items.len()
        )));
    }
    let blinder = Blinder::random()?;
    let (me, peer) = (online.rank(), online.peer_rank());
    let ctx: &Context = online;
    let blinder = &blinder;
    let (sent_result, values) = std::thread::scope(|s| {
        let sender = s.spawn(|| -> Result<u64, ProtocolError> {
            let mut n = 0u64;
            for (chunk, ex) in items.chunks(BLIND_BATCH).zip(extra.chunks(BLIND_BATCH)) {
                let blinded = blinder.blind(chunk)?;
                let msg = batch(blinded, if server_gets_result { ex } else { &[] });
                n += 1;
                ctx.send_key(&ctx.p2p_key(n, me, peer), &msg)?;
            }
            n += 1;
            ctx.send_key(&ctx.p2p_key(n, me, peer), &end_batch())?;
            Ok(n)
        });
        let values = recv_evaluated(ctx, blinder, items.len());
        let panicked = || ProtocolError::Unreachable("the blinding thread panicked");
        (sender.join().unwrap_or_else(|_| Err(panicked())), values)
    });
    let sent = sent_result?;
    let values = values?;

    let mine: HashMap<OprfValue, u32> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, i as u32))
        .collect();
    let mut matches = Vec::new();
    for (c, v) in cache.values.iter().enumerate() {
        if let Some(&i) = mine.get(v) {
            matches.push(ClientMatch {
                index: i,
                cache_index: c as u32,
                peer_extra: cache.extra.get(c).copied().unwrap_or(0),
            });
        }
    }
    if server_gets_result {
        let ci: Vec<u32> = matches.iter().map(|m| m.cache_index).collect();
        let si: Vec<u32> = matches.iter().map(|m| m.index).collect();
        ctx.send_key(&ctx.p2p_key(sent + 1, me, peer), &encode_indexes(&ci))?;
        ctx.send_key(&ctx.p2p_key(sent + 2, me, peer), &encode_indexes(&si))?;
    }
    Ok(matches)
}

fn recv_evaluated(
    ctx: &Context,
    blinder: &Blinder,
    expected: usize,
) -> Result<Vec<OprfValue>, ProtocolError> {
    let (me, peer) = (ctx.rank(), ctx.peer_rank());
    let mut values = Vec::with_capacity(expected);
    for n in 1u64.. {
        let b = Batch::decode_uncounted(&ctx.recv_key(&ctx.p2p_key(n, peer, me))?, POINT_LEN)?;
        if b.is_last {
            if b.item_num != 0 {
                return Err(bad("the SecretFlow server's end batch carries items".into()));
            }
            break;
        }
        if values.len() + b.item_num as usize > expected {
            return Err(bad(format!(
                "the SecretFlow server returned more than our {expected} blinded items"
            )));
        }
        values.extend(blinder.finalize(&b.flatten)?);
    }
    if values.len() != expected {
        return Err(bad(format!(
            "the SecretFlow server returned {} of our {expected} blinded items",
            values.len()
        )));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn indexes_round_trip_and_hostile_ones_fail() {
        for v in [vec![], vec![0u32], vec![1, 300, u32::MAX]] {
            let e = encode_indexes(&v);
            assert_eq!(decode_indexes(&e, 10, "t").unwrap(), v);
        }
        // Unpacked entries decode too.
        assert_eq!(
            decode_indexes(&[0x08, 0x05, 0x08, 0x07], 10, "t").unwrap(),
            [5, 7]
        );
        assert!(decode_indexes(&encode_indexes(&[1, 2, 3]), 2, "t").is_err());
        assert!(decode_indexes(&[0x0a, 0x01, 0x80], 10, "t").is_err());
        assert!(decode_indexes(&[0x08, 0x80, 0x80, 0x80, 0x80, 0x10], 10, "t").is_err());
        assert!(decode_indexes(&[0x0d, 0, 0, 0, 0], 10, "t").is_err());
    }

    #[test]
    fn batches_are_the_wheels_bytes() {
        assert_eq!(end_batch(), [0x18, 0x01]);
        let b = batch(vec![9u8; 24], &[0, 3]);
        let d = Batch::decode_uncounted(&b, OPRF_LEN).unwrap();
        assert_eq!(d.item_num, 2);
        assert_eq!(d.duplicates, [(1, 3)]);
        assert!(b.starts_with(&[0x12, 24]), "field 2 first, no item_num");
        assert!(Batch::decode_uncounted(&[0x12, 5, 0, 0, 0, 0, 0], OPRF_LEN).is_err());
    }

    #[test]
    fn permutations_are_permutations() {
        for n in [0usize, 1, 2, 100] {
            let mut p = random_permutation(n).unwrap();
            p.sort_unstable();
            assert_eq!(p, (0..n).collect::<Vec<_>>());
        }
    }
}
