//! Unbalanced PSI from a Diffie–Hellman OPRF, with offline and online phases: Jarecki–Liu, "Fast
//! Secure Computation of Set Intersection" (SCN 2010), as made practical for a large server set
//! by Resende–Aranha, "Faster Unbalanced Private Set Intersection" (FC 2018), and run by
//! SecretFlow as its ECDH-OPRF UB-PSI (`ub_psi_config`). Model: semi-honest; security from the
//! one-more-Gap-DH assumption in the random-oracle model (the OPRF is 2HashDH, see
//! [`blindjoin_crypto::oprf`]).
//!
//! Server S holds the large set Y and key `k`; client C holds the small set X.
//! - **Offline** ([`evaluate_server_set`]): S computes `F_k(y) = T(H(y)^k)` for every y,
//!   truncated to ℓ bytes ([`tag_len`]), and orders them by value. Sorting by a pseudorandom
//!   value is as good as SecretFlow's random shuffle — the position of a tag says nothing
//!   the tag itself does not — and lets C look values up by binary search without an index. S
//!   keeps the permutation (which item sits at which position) to itself.
//! - **Transfer** ([`send_cache`] / [`recv_cache`]): S streams the ordered values; C stores them.
//!   Done once, reused for every later query under the same key.
//! - **Online** ([`online_client`] / [`online_server`]): C sends `H(x)^r` for each x (one fresh `r`
//!   per run), S returns `(H(x)^r)^k`, C unblinds with `1/r` to `H(x)^k`, computes `F_k(x)` and
//!   looks it up in the cache. C learns its items in X ∩ Y. With `server_get_result`, C sends the
//!   matched cache positions back and S maps them through its permutation to its items.
//! - **Shuffle variant** (`client_get_result = false`, `server_get_result = true`): S waits for
//!   all of C's blinded points and returns the evaluations in a fresh secret random order π, so
//!   C finds which cache positions match but not which of its own items they belong to; it sends
//!   those positions and only S learns the result (SecretFlow's
//!   `RecvBlindAndShuffleSendEvaluate`).
//!
//! Leakage: C learns |Y| (the cache), X ∩ Y when `client_get_result`, and |X ∩ Y| always. S
//! learns |X|, and with `server_get_result` X ∩ Y (as its own items). The blinded points are
//! uniform, so S learns nothing else about X.
//!
//! Online cost: C → S `32·|X|` bytes of points, S → C `32·|X|`, plus the positions of the
//! matches when S gets the result — independent of |Y|. C does two scalar multiplications and
//! one hash-to-curve per item; S one scalar multiplication.
//!
//! ℓ: a false match needs one of C's |X| values to hit one of S's |Y| ℓ-byte values; we fix
//! ℓ = ⌈(λ + ⌈log2 |Y|⌉ + 32)/8⌉ bytes with λ = 40 when the cache is made (12 bytes for |Y| ≤ 2^24,
//! as SecretFlow's fixed 12), which bounds the expected false matches by 2^-40 for any client of
//! up to 2^32 items — the most the online phase accepts (positions are 32-bit).

use crate::ecdh::expect_type;
use crate::shuffle::random_permutation;
use crate::{ItemDigest, Progress, ProtocolError};
use blindjoin_crypto::Curve;
use blindjoin_crypto::oprf::{OprfScalar, POINT_LEN, tag};
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{BULK_CHUNK, Link, Reader, put_bytes_u16, put_u64, recv_bulk, send_bulk};
use rayon::prelude::*;

pub mod labels;

use labels::{MAC_LEN, MAX_SEALED_LEN, SALT_LEN, SealedLabels};

/// Statistical security λ of the false-match bound.
const STAT_SEC: u32 = 40;
/// log2 of the largest client set the tag length is sized for.
pub const MAX_CLIENT_LOG2: u32 = 32;
/// Largest client set the online phase accepts (positions on the wire are `u32`).
pub const MAX_CLIENT_ITEMS: u64 = u32::MAX as u64;
/// Largest server set a cache may hold (positions are `u32`).
pub const MAX_SERVER_ITEMS: u64 = u32::MAX as u64;
/// Shortest and longest truncated OPRF value.
pub const MIN_TAG_LEN: usize = 8;
/// See [`MIN_TAG_LEN`].
pub const MAX_TAG_LEN: usize = 16;
/// Items per online message.
pub const ONLINE_BATCH: usize = 4096;

const MSG_CACHE_HEAD: u8 = wire::byte(ids::UB_CACHE_HEAD);
const MSG_CACHE_TAGS: u8 = wire::byte(ids::UB_CACHE_TAGS);
const MSG_HELLO: u8 = wire::byte(ids::UB_HELLO);
const MSG_BLINDED: u8 = wire::byte(ids::UB_BLINDED);
const MSG_EVALUATED: u8 = wire::byte(ids::UB_EVALUATED);
/// Wire version of this protocol's messages (2: the cache may carry sealed labels).
const WIRE_VERSION: u8 = 2;
/// Most label columns a cache may carry.
pub const MAX_LABEL_COLUMNS: usize = 4096;
/// Longest label column name, in bytes.
pub const MAX_LABEL_NAME: usize = 1024;

/// ℓ in bytes for a server set of `n_server` items (see the module doc).
pub fn tag_len(n_server: u64) -> usize {
    let log = 64 - n_server.max(1).saturating_sub(1).leading_zeros();
    ((STAT_SEC + log + MAX_CLIENT_LOG2).div_ceil(8) as usize).clamp(MIN_TAG_LEN, MAX_TAG_LEN)
}

/// What both parties must agree on about a cache; the server's cache file and the client's
/// both carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheMeta {
    /// The OPRF group.
    pub curve: Curve,
    /// Values in the cache (unique server items).
    pub count: u64,
    /// ℓ, bytes per value.
    pub tag_len: usize,
    /// [`OprfScalar::key_check_value`] of the key the cache was made with.
    pub key_check: [u8; 16],
    /// The sealed labels the cache carries, if any ([`labels`]).
    pub labels: Option<LabelMeta>,
}

/// What a cache's labels are: the salt of their keys, the server's label column names (in the
/// order each item's label lists its rows' values), and their total sealed size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelMeta {
    /// The per-cache salt of every label key.
    pub salt: [u8; SALT_LEN],
    /// The label columns, in order.
    pub columns: Vec<String>,
    /// Total bytes of all sealed labels (each item's is at least [`MAC_LEN`]).
    pub bytes: u64,
}

/// The offline evaluation: `(values, order, points)` where `values` holds the ℓ-byte `F_k(y)` of
/// every item in increasing order, `order[p]` is the index into `items` of the value at position
/// `p` (the server's secret permutation), and, when `keep_points`, `points[i]` is `H(y_i)^k` of
/// `items[i]` (what its label key is derived from, [`labels::LabelKey::derive`]).
///
/// # Errors
/// Too many items, or a crypto failure.
pub fn evaluate_server_set(
    key: &OprfScalar,
    items: &[ItemDigest],
    tag_len: usize,
    keep_points: bool,
    progress: &dyn Progress,
) -> Result<ServerSet, ProtocolError> {
    if items.len() as u64 > MAX_SERVER_ITEMS {
        return Err(ProtocolError::Config(format!(
            "unbalanced PSI caches at most {MAX_SERVER_ITEMS} unique keys"
        )));
    }
    if !(MIN_TAG_LEN..=MAX_TAG_LEN).contains(&tag_len) {
        return Err(ProtocolError::Config(format!(
            "the OPRF value length must be {MIN_TAG_LEN}..={MAX_TAG_LEN} bytes"
        )));
    }
    progress.stage(
        "evaluating the OPRF on the server's items",
        items.len() as u64,
    );
    let mut values = vec![0u8; items.len() * tag_len];
    // Chunks bound the 32-byte points in memory at once.
    const CHUNK: usize = 1 << 16;
    let mut points = vec![0u8; CHUNK.min(items.len()) * POINT_LEN];
    let mut kept: Vec<[u8; POINT_LEN]> = Vec::new();
    for (its, vals) in items.chunks(CHUNK).zip(values.chunks_mut(CHUNK * tag_len)) {
        let pts = &mut points[..its.len() * POINT_LEN];
        key.hash_and_mul(its, pts)?;
        if keep_points {
            kept.extend(pts.chunks_exact(POINT_LEN).map(|p| {
                let mut a = [0u8; POINT_LEN];
                a.copy_from_slice(p);
                a
            }));
        }
        pts.par_chunks(POINT_LEN)
            .zip(vals.par_chunks_mut(tag_len))
            .for_each(|(p, v)| v.copy_from_slice(&tag(p)[..tag_len]));
        progress.advance(its.len() as u64);
    }
    let mut order: Vec<u32> = (0..items.len() as u32).collect();
    let value = |i: u32| &values[i as usize * tag_len..(i as usize + 1) * tag_len];
    order.par_sort_unstable_by(|&a, &b| value(a).cmp(value(b)));
    let mut sorted = vec![0u8; values.len()];
    sorted
        .par_chunks_mut(tag_len)
        .zip(order.par_iter())
        .for_each(|(s, &i)| s.copy_from_slice(value(i)));
    Ok(ServerSet {
        values: sorted,
        order,
        points: keep_points.then_some(kept),
    })
}

/// What [`evaluate_server_set`] returns.
pub struct ServerSet {
    /// The ℓ-byte values, increasing.
    pub values: Vec<u8>,
    /// `order[p]`: the item at position `p`.
    pub order: Vec<u32>,
    /// `H(y_i)^k` per item, in the items' order, when asked for.
    pub points: Option<Vec<[u8; POINT_LEN]>>,
}

fn put_meta(msg: &mut Vec<u8>, meta: &CacheMeta) {
    msg.push(WIRE_VERSION);
    put_bytes_u16(msg, meta.curve.config_name().as_bytes());
    put_u64(msg, meta.count);
    msg.push(meta.tag_len as u8);
    msg.extend_from_slice(&meta.key_check);
    match &meta.labels {
        None => msg.push(0),
        Some(l) => {
            msg.push(1);
            msg.extend_from_slice(&l.salt);
            msg.extend_from_slice(&(l.columns.len() as u16).to_le_bytes());
            for c in &l.columns {
                put_bytes_u16(msg, c.as_bytes());
            }
            put_u64(msg, l.bytes);
        }
    }
}

fn read_meta(r: &mut Reader<'_>) -> Result<CacheMeta, ProtocolError> {
    let version = r.u8()?;
    if version != WIRE_VERSION {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "speaks unbalanced-PSI wire version {version}, this build {WIRE_VERSION}; run the same \
             blindjoin version on both sides"
        )));
    }
    let name = r.str_u16(64)?;
    let curve: Curve = name
        .parse()
        .map_err(|_| ProtocolError::PeerMisbehaved(format!("names an unknown curve {name:?}")))?;
    let count = r.u64()?;
    let tag_len = r.u8()? as usize;
    let mut key_check = [0u8; 16];
    key_check.copy_from_slice(r.take(16)?);
    let labels = match r.u8()? {
        0 => None,
        1 => {
            let mut salt = [0u8; SALT_LEN];
            salt.copy_from_slice(r.take(SALT_LEN)?);
            let n = u16::from_le_bytes([r.u8()?, r.u8()?]) as usize;
            if n > MAX_LABEL_COLUMNS {
                return Err(ProtocolError::PeerMisbehaved(format!(
                    "announces {n} label columns (limit {MAX_LABEL_COLUMNS})"
                )));
            }
            let mut columns = Vec::with_capacity(n);
            for _ in 0..n {
                columns.push(r.str_u16(MAX_LABEL_NAME)?.to_owned());
            }
            let bytes = r.u64()?;
            if bytes < count.saturating_mul(MAC_LEN as u64)
                || bytes > count.saturating_mul(MAX_SEALED_LEN as u64)
            {
                return Err(ProtocolError::PeerMisbehaved(format!(
                    "announces {bytes} bytes of labels for {count} values"
                )));
            }
            Some(LabelMeta {
                salt,
                columns,
                bytes,
            })
        }
        other => {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "sent label flag {other} in the cache header"
            )));
        }
    };
    if count > MAX_SERVER_ITEMS || !(MIN_TAG_LEN..=MAX_TAG_LEN).contains(&tag_len) {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "announces a cache of {count} values of {tag_len} bytes (limits: {MAX_SERVER_ITEMS} \
             values of {MIN_TAG_LEN}..={MAX_TAG_LEN} bytes)"
        )));
    }
    Ok(CacheMeta {
        curve,
        count,
        tag_len,
        key_check,
        labels,
    })
}

/// Transfer, server side: the cache's metadata, then its values, then (when the cache has
/// labels) each position's sealed-label length and the sealed labels.
///
/// # Errors
/// Link failures; `values` or `labels` not of the announced size.
pub fn send_cache(
    link: &mut dyn Link,
    meta: &CacheMeta,
    values: &[u8],
    labels: Option<&SealedLabels>,
) -> Result<(), ProtocolError> {
    if values.len() as u64 != meta.count * meta.tag_len as u64 {
        return Err(ProtocolError::Unreachable(
            "the cache's values do not match its metadata",
        ));
    }
    let lens;
    let sections: Vec<&[u8]> = match (&meta.labels, labels) {
        (None, None) => vec![values],
        (Some(m), Some(l)) if l.len() as u64 == meta.count && l.data.len() as u64 == m.bytes => {
            lens = l.lengths_le();
            vec![values, &lens, &l.data]
        }
        _ => {
            return Err(ProtocolError::Unreachable(
                "the cache's labels do not match its metadata",
            ));
        }
    };
    send_cache_from(link, meta, &mut SliceSource { sections, at: 0 })
}

/// Where [`send_cache_from`] reads the cache it sends.
pub trait CacheSource {
    /// Fills `buf` with the next bytes of the values, then of the label lengths, then of the
    /// sealed labels (in that order; one call never spans two sections).
    ///
    /// # Errors
    /// The source cannot be read.
    fn read(&mut self, buf: &mut [u8]) -> Result<(), ProtocolError>;
}

/// Transfer, server side, streamed: as [`send_cache`], the sections read from `source` one
/// message ([`BULK_CHUNK`] bytes) at a time, so the server's memory does not grow with the
/// cache. The messages are the same as [`send_cache`]'s.
///
/// # Errors
/// Link failures; the source's.
pub fn send_cache_from(
    link: &mut dyn Link,
    meta: &CacheMeta,
    source: &mut dyn CacheSource,
) -> Result<(), ProtocolError> {
    let mut head = vec![MSG_CACHE_HEAD];
    put_meta(&mut head, meta);
    link.send(&head)?;
    let values = meta.count * meta.tag_len as u64;
    let (lens, labels) = meta
        .labels
        .as_ref()
        .map_or((0, 0), |l| (4 * meta.count, l.bytes));
    let mut msg = Vec::new();
    for len in [values, lens, labels] {
        let mut left = len;
        while left > 0 {
            let k = left.min(BULK_CHUNK as u64) as usize;
            msg.clear();
            msg.push(MSG_CACHE_TAGS);
            msg.resize(1 + k, 0);
            source.read(&mut msg[1..])?;
            link.send(&msg)?;
            left -= k as u64;
        }
    }
    Ok(())
}

/// [`send_cache`]'s source: sections in memory, read one after another.
struct SliceSource<'a> {
    sections: Vec<&'a [u8]>,
    at: usize,
}

impl CacheSource for SliceSource<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<(), ProtocolError> {
        while self.sections.first().is_some_and(|s| s.is_empty()) {
            self.sections.remove(0);
        }
        let Some(s) = self.sections.first() else {
            return Err(ProtocolError::Unreachable("read past the cache's sections"));
        };
        let part = s
            .get(self.at..self.at + buf.len())
            .ok_or(ProtocolError::Unreachable(
                "a read spans two cache sections",
            ))?;
        buf.copy_from_slice(part);
        self.at += buf.len();
        if self.at == s.len() {
            self.sections.remove(0);
            self.at = 0;
        }
        Ok(())
    }
}

/// Transfer, client side: the metadata, the values and the sealed labels if any. `max_bytes`
/// bounds what we accept to store (values, label lengths and labels together); memory grows
/// only as data arrives. The values must be in increasing order (what [`evaluate_server_set`]
/// makes), which [`online_client`]'s lookup relies on.
///
/// # Errors
/// Link failures, a malformed or oversized cache, values out of order, label lengths that do
/// not add up to what the header announced.
pub fn recv_cache(
    link: &mut dyn Link,
    max_bytes: u64,
) -> Result<(CacheMeta, Vec<u8>, Option<SealedLabels>), ProtocolError> {
    let head = link.recv()?;
    let mut r = Reader::new(&head, "cache header");
    expect_type(&mut r, MSG_CACHE_HEAD)?;
    let meta = read_meta(&mut r)?;
    r.finish()?;
    let bytes = meta.count * meta.tag_len as u64;
    let label_bytes = meta
        .labels
        .as_ref()
        .map_or(0, |l| l.bytes.saturating_add(4 * meta.count));
    let total = bytes.saturating_add(label_bytes);
    if total > max_bytes {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "announces a cache of {total} bytes; this client accepts at most {max_bytes}"
        )));
    }
    let values = recv_bulk(link, MSG_CACHE_TAGS, bytes as usize, "cache values")?;
    check_sorted(&values, meta.tag_len)
        .map_err(|p| ProtocolError::PeerMisbehaved(format!("cache value {p} is out of order")))?;
    let labels = match &meta.labels {
        None => None,
        Some(m) => {
            let lens = recv_bulk(
                link,
                MSG_CACHE_TAGS,
                4 * meta.count as usize,
                "label lengths",
            )?;
            let offsets = SealedLabels::offsets_from_le(&lens, m.bytes).map_err(|e| {
                ProtocolError::PeerMisbehaved(format!("sent label lengths that {e}"))
            })?;
            let data = recv_bulk(link, MSG_CACHE_TAGS, m.bytes as usize, "sealed labels")?;
            Some(SealedLabels { offsets, data })
        }
    };
    Ok((meta, values, labels))
}

/// Where [`recv_cache_into`] puts the cache as it arrives, section by section.
pub trait CacheSink {
    /// The checked header, before any data.
    ///
    /// # Errors
    /// The sink cannot start (e.g. its file cannot be created).
    fn begin(&mut self, meta: &CacheMeta) -> Result<(), ProtocolError>;
    /// The next bytes of the values, then of the label lengths, then of the sealed labels (in
    /// that order, each section whole before the next).
    ///
    /// # Errors
    /// The sink cannot take them.
    fn bytes(&mut self, chunk: &[u8]) -> Result<(), ProtocolError>;
}

/// Transfer, client side, streamed: as [`recv_cache`], but each chunk goes to `sink` as it
/// arrives and is checked there and then (values in order across chunks, each label length in
/// range and the lengths adding up to the header's total), so the client's memory does not grow
/// with the cache. Returns the metadata.
///
/// # Errors
/// As [`recv_cache`], and the sink's.
pub fn recv_cache_into(
    link: &mut dyn Link,
    max_bytes: u64,
    sink: &mut dyn CacheSink,
) -> Result<CacheMeta, ProtocolError> {
    let head = link.recv()?;
    let mut r = Reader::new(&head, "cache header");
    expect_type(&mut r, MSG_CACHE_HEAD)?;
    let meta = read_meta(&mut r)?;
    r.finish()?;
    let tl = meta.tag_len;
    let values = meta.count * tl as u64;
    let (lens, labels) = meta
        .labels
        .as_ref()
        .map_or((0, 0), |l| (4 * meta.count, l.bytes));
    let total = values.saturating_add(lens).saturating_add(labels);
    if total > max_bytes {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "announces a cache of {total} bytes; this client accepts at most {max_bytes}"
        )));
    }
    sink.begin(&meta)?;
    // Values: order checked across chunks (a value may straddle two).
    let mut prev: Vec<u8> = Vec::new();
    let mut partial: Vec<u8> = Vec::new();
    let mut index = 0u64;
    recv_section(link, values, "cache values", &mut |chunk| {
        partial.extend_from_slice(chunk);
        let whole = partial.len() - partial.len() % tl;
        for v in partial[..whole].chunks_exact(tl) {
            if !prev.is_empty() && v < &prev[..] {
                return Err(ProtocolError::PeerMisbehaved(format!(
                    "cache value {index} is out of order"
                )));
            }
            prev.clear();
            prev.extend_from_slice(v);
            index += 1;
        }
        partial.drain(..whole);
        sink.bytes(chunk)
    })?;
    if meta.labels.is_some() {
        let mut sum = 0u64;
        let mut partial: Vec<u8> = Vec::new();
        let mut p = 0u64;
        recv_section(link, lens, "label lengths", &mut |chunk| {
            partial.extend_from_slice(chunk);
            let whole = partial.len() - partial.len() % 4;
            for c in partial[..whole].chunks_exact(4) {
                let n = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize;
                if !(MAC_LEN..=MAX_SEALED_LEN).contains(&n) {
                    return Err(ProtocolError::PeerMisbehaved(format!(
                        "sent label lengths that give label {p} {n} bytes (each must be \
                         {MAC_LEN}..={MAX_SEALED_LEN})"
                    )));
                }
                sum += n as u64;
                p += 1;
            }
            partial.drain(..whole);
            sink.bytes(chunk)
        })?;
        if sum != labels {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "sent label lengths that add up to {sum} bytes, not the announced {labels}"
            )));
        }
        recv_section(link, labels, "sealed labels", &mut |chunk| {
            sink.bytes(chunk)
        })?;
    }
    Ok(meta)
}

/// Receives `len` bytes sent by [`send_bulk`] under [`MSG_CACHE_TAGS`], handing each message's
/// part to `f`.
fn recv_section(
    link: &mut dyn Link,
    len: u64,
    what: &'static str,
    f: &mut dyn FnMut(&[u8]) -> Result<(), ProtocolError>,
) -> Result<(), ProtocolError> {
    let mut left = len;
    while left > 0 {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, what);
        expect_type(&mut r, MSG_CACHE_TAGS)?;
        let part = r.take(r.left())?;
        if part.is_empty() || part.len() as u64 > left {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "sent {} bytes of {what} where {left} were still due",
                part.len()
            )));
        }
        f(part)?;
        left -= part.len() as u64;
    }
    Ok(())
}

/// `Err(p)` if value `p` is smaller than value `p − 1`.
pub fn check_sorted(values: &[u8], tag_len: usize) -> Result<(), usize> {
    if tag_len == 0 || !values.len().is_multiple_of(tag_len) {
        return Err(0);
    }
    let bad = values
        .par_chunks(tag_len)
        .zip(values.par_chunks(tag_len).skip(1))
        .position_any(|(a, b)| a > b);
    match bad {
        Some(p) => Err(p + 1),
        None => Ok(()),
    }
}

/// Who learns what in the online phase. Both parties must pass the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnlineOptions {
    /// The client learns its items in the intersection.
    pub client_get_result: bool,
    /// The server learns its items in the intersection. With `client_get_result = false`, the
    /// shuffle variant runs.
    pub server_get_result: bool,
    /// Threshold mode: at most this many keys of the intersection are revealed (SecretFlow's
    /// `intersection_threshold`); `None` reveals all. See [`online_client`].
    pub threshold: Option<u64>,
}

impl OnlineOptions {
    /// Whether the server shuffles its evaluations (the shuffle variant and threshold mode).
    pub fn shuffled(self) -> bool {
        !self.client_get_result || self.threshold.is_some()
    }

    fn check(self) -> Result<(), ProtocolError> {
        if !self.client_get_result && !self.server_get_result {
            return Err(ProtocolError::Config(
                "client_get_result and server_get_result are both false: nobody would learn \
                 anything; set one of them"
                    .into(),
            ));
        }
        if self.threshold == Some(0) || (self.threshold.is_some() && !self.client_get_result) {
            return Err(ProtocolError::Config(
                "threshold mode needs a threshold above 0 and client_get_result: the client \
                 learns the revealed keys"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// What a party learned online.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OnlineOutput {
    /// Client: sorted indices into its items; server: sorted cache positions (map them through
    /// the order of [`evaluate_server_set`]). `None` when this party does not learn the result.
    pub intersection: Option<Vec<usize>>,
    /// |X ∩ Y| in unique items when this party learns it (the client always does).
    pub count: Option<u64>,
    /// The peer's set size.
    pub peer_count: u64,
    /// Client, when it learns the result: each matched item with its cache positions and its
    /// evaluated point `H(x)^k` (to open its labels, [`labels::LabelKey::derive`]), in the
    /// order of `intersection`.
    pub hits: Vec<Hit>,
}

/// One of the client's matched items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Index into the client's items.
    pub item: usize,
    /// The cache positions holding its value (one unless the server's values collide).
    pub positions: Vec<u32>,
    /// `H(x)^k`.
    pub point: [u8; POINT_LEN],
}

fn hello(meta: &CacheMeta, opts: OnlineOptions, n_client: u64) -> Vec<u8> {
    let mut msg = vec![MSG_HELLO];
    put_meta(&mut msg, meta);
    msg.push(u8::from(opts.client_get_result));
    msg.push(u8::from(opts.server_get_result));
    put_u64(&mut msg, opts.threshold.unwrap_or(0));
    put_u64(&mut msg, n_client);
    msg
}

/// Exchanges hellos and checks the peer agrees; returns the client's set size.
fn exchange_hello(
    link: &mut dyn Link,
    meta: &CacheMeta,
    opts: OnlineOptions,
    n_client: u64,
    server: bool,
) -> Result<u64, ProtocolError> {
    link.send(&hello(meta, opts, n_client))?;
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "unbalanced-PSI hello");
    expect_type(&mut r, MSG_HELLO)?;
    let theirs = read_meta(&mut r)?;
    let (cg, sg) = (r.u8()? != 0, r.u8()? != 0);
    let their_threshold = Some(r.u64()?).filter(|&t| t > 0);
    let their_n = r.u64()?;
    r.finish()?;
    let (our_role, their_role) = if server {
        ("ROLE_SERVER", "ROLE_CLIENT")
    } else {
        ("ROLE_CLIENT", "ROLE_SERVER")
    };
    let mismatch = |field, ours: String, theirs: String| ProtocolError::Mismatch {
        field,
        ours,
        theirs,
        our_role: our_role.into(),
        their_role: their_role.into(),
    };
    if theirs.curve != meta.curve {
        return Err(mismatch(
            "the cache's curve",
            meta.curve.to_string(),
            theirs.curve.to_string(),
        ));
    }
    if theirs.key_check != meta.key_check
        || theirs.count != meta.count
        || theirs.tag_len != meta.tag_len
    {
        let show = |m: &CacheMeta| {
            format!(
                "a cache of {} values, key check {}",
                m.count,
                hex(&m.key_check)
            )
        };
        return Err(mismatch(
            "the cache (the client's copy is not the server's current one: run \
             MODE_OFFLINE_TRANSFER_CACHE again)",
            show(meta),
            show(&theirs),
        ));
    }
    if (cg, sg) != (opts.client_get_result, opts.server_get_result) {
        let show = |c: bool, s: bool| format!("client_get_result={c}, server_get_result={s}");
        return Err(mismatch(
            "who gets the result",
            show(opts.client_get_result, opts.server_get_result),
            show(cg, sg),
        ));
    }
    if their_threshold != opts.threshold {
        let show = |t: Option<u64>| t.map_or("none".to_string(), |t| t.to_string());
        return Err(mismatch(
            "intersection_threshold",
            show(opts.threshold),
            show(their_threshold),
        ));
    }
    if server {
        if their_n > MAX_CLIENT_ITEMS {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "announces {their_n} items; the online phase takes at most {MAX_CLIENT_ITEMS}"
            )));
        }
        Ok(their_n)
    } else {
        Ok(n_client)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Online, client side: `cache` is the transferred values (sorted, `meta.count` of them).
///
/// # Errors
/// Link failures, a disagreeing or misbehaving server, a cache that does not match `meta`.
pub fn online_client(
    link: &mut dyn Link,
    meta: &CacheMeta,
    cache: &[u8],
    items: &[ItemDigest],
    opts: OnlineOptions,
    progress: &dyn Progress,
) -> Result<OnlineOutput, ProtocolError> {
    if cache.len() as u64 != meta.count * meta.tag_len as u64 {
        return Err(ProtocolError::Unreachable(
            "the client cache does not match its metadata",
        ));
    }
    online_client_with(link, meta, &mut SortedValues(cache), items, opts, progress)
}

/// Where the client looks its values up: the cache's sorted ℓ-byte values, in memory
/// ([`SortedValues`]) or streamed from a file (`crates/data`'s client cache), so that the
/// client's memory need not grow with the server's set.
pub trait CacheLookup {
    /// For each of `tags` (ℓ-byte values, back to back, in any order), the positions of the
    /// cache holding it (empty for none), in `tags`' order.
    ///
    /// # Errors
    /// The cache cannot be read.
    fn positions(&mut self, tags: &[u8], tag_len: usize) -> Result<Vec<Vec<u32>>, ProtocolError>;
}

/// A cache's sorted values in memory: binary search.
pub struct SortedValues<'a>(pub &'a [u8]);

impl CacheLookup for SortedValues<'_> {
    fn positions(&mut self, tags: &[u8], tl: usize) -> Result<Vec<Vec<u32>>, ProtocolError> {
        Ok(tags
            .par_chunks(tl)
            .map(|t| find(self.0, tl, t).unwrap_or_default())
            .collect())
    }
}

/// [`online_client`] with the cache behind `lookup`, which is asked once, after all the
/// evaluations are in.
///
/// # Errors
/// As [`online_client`], and the lookup's.
pub fn online_client_with(
    link: &mut dyn Link,
    meta: &CacheMeta,
    lookup: &mut dyn CacheLookup,
    items: &[ItemDigest],
    opts: OnlineOptions,
    progress: &dyn Progress,
) -> Result<OnlineOutput, ProtocolError> {
    opts.check()?;
    if items.len() as u64 > MAX_CLIENT_ITEMS {
        return Err(ProtocolError::Config(format!(
            "the online phase takes at most {MAX_CLIENT_ITEMS} unique keys"
        )));
    }
    exchange_hello(link, meta, opts, items.len() as u64, false)?;
    let r = OprfScalar::random(meta.curve)?;
    progress.stage("blinding the client's items", items.len() as u64);
    for chunk in items.chunks(ONLINE_BATCH) {
        let mut msg = vec![0u8; 1 + chunk.len() * POINT_LEN];
        msg[0] = MSG_BLINDED;
        r.hash_and_mul(chunk, &mut msg[1..])?;
        link.send(&msg)?;
        progress.advance(chunk.len() as u64);
    }
    progress.stage("unblinding", items.len() as u64);
    let tl = meta.tag_len;
    // Every evaluation, unblinded, in the reply's order (the client's item order, or the
    // server's shuffled order).
    let mut unblinded = vec![0u8; items.len() * POINT_LEN];
    let mut next = 0usize;
    while next < items.len() {
        let msg = link.recv()?;
        let mut rd = Reader::new(&msg, "evaluated points");
        expect_type(&mut rd, MSG_EVALUATED)?;
        let pts = rd.take(rd.left())?;
        let k = pts.len() / POINT_LEN;
        if pts.is_empty() || !pts.len().is_multiple_of(POINT_LEN) || k > items.len() - next {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "sent {} bytes of evaluated points where {} points were still due",
                pts.len(),
                items.len() - next
            )));
        }
        r.mul_inverse(
            pts,
            &mut unblinded[next * POINT_LEN..(next + k) * POINT_LEN],
        )?;
        next += k;
        progress.advance(k as u64);
    }
    progress.stage("looking up", 0);
    let mut tags = vec![0u8; items.len() * tl];
    tags.par_chunks_mut(tl)
        .zip(unblinded.par_chunks(POINT_LEN))
        .for_each(|(t, p)| t.copy_from_slice(&tag(p)[..tl]));
    let found = lookup.positions(&tags, tl)?;
    drop(tags);
    if found.len() != items.len() {
        return Err(ProtocolError::Unreachable("the lookup lost items"));
    }
    // Matched client items (in their order; in the shuffle variant, slots of the reply) and
    // the matched cache positions.
    let mut mine = Vec::new();
    let mut positions: Vec<u32> = Vec::new();
    let mut hits: Vec<Hit> = Vec::new();
    for (j, h) in found.into_iter().enumerate() {
        if h.is_empty() || h.iter().any(|&p| p as u64 >= meta.count) {
            continue;
        }
        // Without the shuffle, position j of the reply is our item j.
        mine.push(j);
        positions.extend_from_slice(&h);
        if opts.client_get_result {
            let mut point = [0u8; POINT_LEN];
            point.copy_from_slice(&unblinded[j * POINT_LEN..(j + 1) * POINT_LEN]);
            hits.push(Hit {
                item: j,
                positions: h,
                point,
            });
        }
    }
    positions.sort_unstable();
    positions.dedup();
    let count = mine.len() as u64;
    if let Some(t) = opts.threshold {
        return threshold_client(link, meta, items.len(), t, &hits, opts);
    }
    if opts.server_get_result {
        crate::positions::send(link, &positions, meta.count as usize)?;
    }
    Ok(OnlineOutput {
        intersection: opts.client_get_result.then_some(mine),
        count: Some(count),
        peer_count: meta.count,
        hits,
    })
}

/// The positions of the values equal to `v` in the sorted `cache` (usually none or one).
fn find(cache: &[u8], tl: usize, v: &[u8]) -> Option<Vec<u32>> {
    let n = cache.len() / tl;
    let at = |p: usize| &cache[p * tl..(p + 1) * tl];
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if at(mid) < v {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let mut out = Vec::new();
    let mut p = lo;
    while p < n && at(p) == v {
        out.push(p as u32);
        p += 1;
    }
    (!out.is_empty()).then_some(out)
}

/// Online, server side, with its key and its cache's metadata: [`online_server_hello`] then
/// [`online_server_serve`]. Returns the matched cache positions when `server_get_result`.
///
/// # Errors
/// Link failures, a disagreeing or misbehaving client.
pub fn online_server(
    link: &mut dyn Link,
    key: &OprfScalar,
    meta: &CacheMeta,
    opts: OnlineOptions,
    progress: &dyn Progress,
) -> Result<OnlineOutput, ProtocolError> {
    let n_client = online_server_hello(link, meta, opts)?;
    online_server_serve(link, key, meta, opts, n_client, progress)
}

/// The online phase's first step on the server: exchanges hellos and returns how many items
/// the client announces. [`online_server_serve`] evaluates exactly that many and no more, so a
/// caller that bounds what one key may evaluate (the query cap of `crates/data`'s unbalanced
/// run) decides here, before any evaluation leaves.
///
/// # Errors
/// Link failures, a disagreeing client, more than [`MAX_CLIENT_ITEMS`] announced.
pub fn online_server_hello(
    link: &mut dyn Link,
    meta: &CacheMeta,
    opts: OnlineOptions,
) -> Result<u64, ProtocolError> {
    opts.check()?;
    exchange_hello(link, meta, opts, 0, true)
}

/// The rest of the server's online phase, after [`online_server_hello`] returned `n_client`:
/// evaluates the client's `n_client` blinded points under `key` and, with `server_get_result`,
/// receives the matched cache positions; in threshold mode, reveals at most the threshold's
/// number of the client's matches to it ([`threshold_server`]).
///
/// # Errors
/// Link failures, a misbehaving client (more or fewer points than announced, bad points).
pub fn online_server_serve(
    link: &mut dyn Link,
    key: &OprfScalar,
    meta: &CacheMeta,
    opts: OnlineOptions,
    n_client: u64,
    progress: &dyn Progress,
) -> Result<OnlineOutput, ProtocolError> {
    opts.check()?;
    if n_client > MAX_CLIENT_ITEMS {
        return Err(ProtocolError::Unreachable(
            "the client's announced count was not checked by the hello",
        ));
    }
    let n_client = n_client as usize;
    progress.stage("evaluating the client's blinded items", n_client as u64);
    // Shuffle variant: all evaluations, in the client's order, before any leaves.
    let mut held: Vec<u8> = Vec::new();
    let mut next = 0usize;
    while next < n_client {
        let msg = link.recv()?;
        let mut rd = Reader::new(&msg, "blinded points");
        expect_type(&mut rd, MSG_BLINDED)?;
        let pts = rd.take(rd.left())?;
        let k = pts.len() / POINT_LEN;
        if pts.is_empty() || !pts.len().is_multiple_of(POINT_LEN) || k > n_client - next {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "sent {} bytes of blinded points where {} points were still due",
                pts.len(),
                n_client - next
            )));
        }
        let mut out = vec![0u8; 1 + pts.len()];
        out[0] = MSG_EVALUATED;
        key.mul(pts, &mut out[1..])?;
        if opts.shuffled() {
            held.extend_from_slice(&out[1..]);
        } else {
            link.send(&out)?;
        }
        next += k;
        progress.advance(k as u64);
    }
    let mut pi = Vec::new();
    if opts.shuffled() {
        pi = random_permutation(n_client)?;
        for chunk in pi.chunks(ONLINE_BATCH) {
            let mut msg = Vec::with_capacity(1 + chunk.len() * POINT_LEN);
            msg.push(MSG_EVALUATED);
            for &i in chunk {
                msg.extend_from_slice(&held[i * POINT_LEN..(i + 1) * POINT_LEN]);
            }
            link.send(&msg)?;
        }
    }
    if let Some(t) = opts.threshold {
        drop(held);
        return threshold_server(link, meta, opts, t, &pi);
    }
    drop(held);
    let intersection = if opts.server_get_result {
        let p = crate::positions::receive(link, meta.count as usize)?;
        if p.len() > n_client {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "reports {} matches for {n_client} items",
                p.len()
            )));
        }
        Some(p)
    } else {
        None
    };
    Ok(OnlineOutput {
        count: intersection.as_ref().map(|p| p.len() as u64),
        intersection,
        peer_count: n_client as u64,
        hits: Vec::new(),
    })
}

/// Threshold mode, client side, after the shuffled evaluations came back: `hits` are the slots
/// of the reply that match (their `item` is the slot). Sends the slots; receives the slots the
/// server chose (`min(t, matches)` of them) and, in their order, which of our items each is;
/// with `server_get_result`, sends the chosen items' cache positions.
fn threshold_client(
    link: &mut dyn Link,
    meta: &CacheMeta,
    n_items: usize,
    t: u64,
    hits: &[Hit],
    opts: OnlineOptions,
) -> Result<OnlineOutput, ProtocolError> {
    let slots: Vec<u32> = hits.iter().map(|h| h.item as u32).collect();
    crate::positions::send(link, &slots, n_items)?;
    let count = hits.len() as u64;
    let want = t.min(count) as usize;
    let chosen = crate::positions::receive_at_most(link, n_items, want)?;
    if chosen.len() != want {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "revealed {} keys where min(threshold {t}, {count} matches) = {want} were due",
            chosen.len()
        )));
    }
    let raw = recv_bulk(link, MSG_EVALUATED, 4 * want, "revealed items")?;
    let mut revealed: Vec<usize> = Vec::with_capacity(want);
    let mut positions: Vec<u32> = Vec::new();
    for (slot, c) in chosen.iter().zip(raw.chunks_exact(4)) {
        let item = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize;
        let hit = hits
            .binary_search_by_key(slot, |h| h.item)
            .ok()
            .and_then(|k| hits.get(k));
        let Some(hit) = hit.filter(|_| item < n_items) else {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "revealed slot {slot} (item {item}), which is not a match of ours"
            )));
        };
        revealed.push(item);
        positions.extend_from_slice(&hit.positions);
    }
    revealed.sort_unstable();
    if revealed.windows(2).any(|w| w[0] == w[1]) {
        return Err(ProtocolError::PeerMisbehaved(
            "revealed the same item twice".into(),
        ));
    }
    if opts.server_get_result {
        positions.sort_unstable();
        positions.dedup();
        crate::positions::send(link, &positions, meta.count as usize)?;
    }
    Ok(OnlineOutput {
        intersection: Some(revealed),
        count: Some(count),
        peer_count: meta.count,
        hits: Vec::new(),
    })
}

/// Threshold mode, server side, after the shuffled evaluations went out: receives the slots
/// the client found matching, picks `min(t, claimed)` of them uniformly at random, and sends
/// them with which of the client's items each is (`pi[slot]`); with `server_get_result`,
/// receives the chosen keys' cache positions (at most that many). The server cannot check the
/// claims (its evaluations are still blinded by the client's `r`): a client that deviates can
/// have at most `t` of its items' slots mapped, never more. Returns the claimed count.
fn threshold_server(
    link: &mut dyn Link,
    meta: &CacheMeta,
    opts: OnlineOptions,
    t: u64,
    pi: &[usize],
) -> Result<OnlineOutput, ProtocolError> {
    let n_client = pi.len();
    let claimed =
        crate::positions::receive_at_most(link, n_client, n_client.min(meta.count as usize))?;
    let want = t.min(claimed.len() as u64) as usize;
    let pick = random_permutation(claimed.len())?;
    let mut chosen: Vec<usize> = pick.iter().take(want).map(|&k| claimed[k]).collect();
    chosen.sort_unstable();
    let slots: Vec<u32> = chosen.iter().map(|&s| s as u32).collect();
    crate::positions::send(link, &slots, n_client)?;
    let items: Vec<u8> = chosen
        .iter()
        .flat_map(|&s| (pi[s] as u32).to_le_bytes())
        .collect();
    send_bulk(link, MSG_EVALUATED, &items)?;
    let intersection = if opts.server_get_result {
        Some(crate::positions::receive_at_most(
            link,
            meta.count as usize,
            want,
        )?)
    } else {
        None
    };
    Ok(OnlineOutput {
        intersection,
        count: Some(claimed.len() as u64),
        peer_count: n_client as u64,
        hits: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;
    use blindjoin_crypto::item_digest;
    use blindjoin_link::mem_pair;
    use std::collections::HashSet;

    fn set(range: std::ops::Range<u64>) -> Vec<ItemDigest> {
        range.map(|i| item_digest(&i.to_le_bytes())).collect()
    }

    /// Offline, transfer, online over an in-memory link, with each server item `i` labelled
    /// `label(i)`; returns (client's, server's) items in the intersection (the server's mapped
    /// through its permutation) and the client's count, after checking that the client opens
    /// exactly its matches' labels.
    fn run(
        curve: Curve,
        server: &[ItemDigest],
        client: &[ItemDigest],
        opts: OnlineOptions,
    ) -> (Option<Vec<usize>>, Option<Vec<usize>>, u64) {
        let key = OprfScalar::from_seed(curve, b"0123456789abcdef0123456789abcdef").unwrap();
        let tl = tag_len(server.len() as u64);
        let set = evaluate_server_set(&key, server, tl, true, &NoProgress).unwrap();
        let (values, order) = (set.values, set.order);
        let points = set.points.unwrap();
        let label = |i: usize| format!("label of {i}").repeat(i % 3).into_bytes();
        let salt = [3u8; SALT_LEN];
        let mut sealed = SealedLabels::default();
        for &i in &order {
            let k = labels::LabelKey::derive(&points[i as usize], &salt);
            sealed.push(&labels::seal(&k, &label(i as usize)));
        }
        if order.is_empty() {
            sealed.offsets.push(0);
        }
        let meta = CacheMeta {
            curve,
            count: server.len() as u64,
            tag_len: tl,
            key_check: key.key_check_value().unwrap(),
            labels: Some(LabelMeta {
                salt,
                columns: vec!["v".into()],
                bytes: sealed.data.len() as u64,
            }),
        };
        let (mut ls, mut lc) = mem_pair();
        let client = client.to_vec();
        let t = std::thread::spawn(move || {
            let (meta, cache, labels) = recv_cache(&mut lc, 1 << 30).unwrap();
            let out = online_client(&mut lc, &meta, &cache, &client, opts, &NoProgress).unwrap();
            (out, meta, labels.unwrap(), client)
        });
        send_cache(&mut ls, &meta, &values, Some(&sealed)).unwrap();
        let s = online_server(&mut ls, &key, &meta, opts, &NoProgress).unwrap();
        let (c, cmeta, clabels, client) = t.join().unwrap();
        assert_eq!(cmeta, meta);
        assert_eq!(
            c.hits.len(),
            if !opts.shuffled() {
                c.count.unwrap() as usize
            } else {
                0
            }
        );
        for h in &c.hits {
            let p = h.positions[0] as usize;
            let k = labels::LabelKey::derive(&h.point, &salt);
            let opened = labels::open(&k, clabels.get(p).unwrap()).unwrap();
            let server_i = server.iter().position(|d| *d == client[h.item]).unwrap();
            assert_eq!(opened, label(server_i));
            // Any other position's label does not open under this item's key.
            if clabels.len() > 1 {
                let q = (p + 1) % clabels.len();
                assert_eq!(labels::open(&k, clabels.get(q).unwrap()), None);
            }
        }
        let theirs = s.intersection.map(|ps| {
            let mut v: Vec<usize> = ps.into_iter().map(|p| order[p] as usize).collect();
            v.sort_unstable();
            v
        });
        (c.intersection, theirs, c.count.unwrap())
    }

    fn plain(server: &[ItemDigest], client: &[ItemDigest]) -> (Vec<usize>, Vec<usize>) {
        let s: HashSet<_> = server.iter().collect();
        let c: HashSet<_> = client.iter().collect();
        let mine = (0..client.len())
            .filter(|&i| s.contains(&client[i]))
            .collect();
        let theirs = (0..server.len())
            .filter(|&i| c.contains(&server[i]))
            .collect();
        (mine, theirs)
    }

    const BOTH: OnlineOptions = OnlineOptions {
        client_get_result: true,
        server_get_result: true,
        threshold: None,
    };
    const CLIENT: OnlineOptions = OnlineOptions {
        client_get_result: true,
        server_get_result: false,
        threshold: None,
    };
    const SHUFFLE: OnlineOptions = OnlineOptions {
        client_get_result: false,
        server_get_result: true,
        threshold: None,
    };

    #[test]
    fn matches_the_plaintext_intersection() {
        let cases = [
            (set(0..0), set(0..0)),
            (set(0..0), set(0..5)),
            (set(0..5), set(0..0)),
            (set(0..1), set(0..1)),
            (set(0..1), set(1..2)),
            (set(0..1000), set(500..1500)),
            (set(0..1000), set(0..1000)),
            (set(0..1000), set(5000..6000)),
            (set(0..3000), set(2990..3010)),
            (set(0..10), set(0..1000)),
        ];
        for (server, client) in &cases {
            let (mine, theirs) = plain(server, client);
            for opts in [BOTH, CLIENT, SHUFFLE] {
                let (c, s, count) = run(Curve::FourQ, server, client, opts);
                assert_eq!(count, mine.len() as u64);
                assert_eq!(c, opts.client_get_result.then(|| mine.clone()));
                assert_eq!(s, opts.server_get_result.then(|| theirs.clone()));
            }
        }
        let (server, client) = (set(0..300), set(250..400));
        let (mine, theirs) = plain(&server, &client);
        for curve in [
            Curve::Ristretto255,
            Curve::Sm2,
            Curve::Secp256k1,
            Curve::P256,
        ] {
            for opts in [BOTH, SHUFFLE] {
                let (c, s, count) = run(curve, &server, &client, opts);
                assert_eq!(count, mine.len() as u64, "{curve}");
                assert_eq!(c, opts.client_get_result.then(|| mine.clone()), "{curve}");
                assert_eq!(s, Some(theirs.clone()), "{curve}");
            }
        }
    }

    #[test]
    fn threshold_reveals_at_most_t_keys_all_in_the_intersection() {
        let cases = [
            (set(0..1000), set(500..1500)),
            (set(0..1000), set(5000..5100)),
            (set(0..1), set(0..1)),
            (set(0..300), set(0..300)),
            (set(0..0), set(0..4)),
        ];
        for (server, client) in &cases {
            let (mine, _) = plain(server, client);
            for t in [1u64, 7, 10_000] {
                for sg in [false, true] {
                    let opts = OnlineOptions {
                        client_get_result: true,
                        server_get_result: sg,
                        threshold: Some(t),
                    };
                    let (c, s, count) = run(Curve::FourQ, server, client, opts);
                    let c = c.unwrap();
                    // The real count, and min(t, count) keys, all in the intersection.
                    assert_eq!(count, mine.len() as u64);
                    assert_eq!(c.len() as u64, t.min(count));
                    assert!(c.iter().all(|i| mine.contains(i)));
                    assert!(c.windows(2).all(|w| w[0] < w[1]));
                    // The server learns the same keys (as its own items), or nothing.
                    match s {
                        Some(s) => {
                            let mut theirs: Vec<ItemDigest> =
                                s.iter().map(|&i| server[i]).collect();
                            let mut ours: Vec<ItemDigest> = c.iter().map(|&i| client[i]).collect();
                            theirs.sort_unstable();
                            ours.sort_unstable();
                            assert_eq!(theirs, ours);
                        }
                        None => assert!(!sg),
                    }
                }
            }
        }
        // Both sides must agree on the threshold.
        let (mut ls, mut lc) = mem_pair();
        let key = OprfScalar::random(Curve::FourQ).unwrap();
        let t5 = OnlineOptions {
            threshold: Some(5),
            ..CLIENT
        };
        let t6 = OnlineOptions {
            threshold: Some(6),
            ..CLIENT
        };
        let t = std::thread::spawn(move || {
            online_client(&mut lc, &meta(0, [1; 16]), &[], &[], t5, &NoProgress)
        });
        let s = online_server(&mut ls, &key, &meta(0, [1; 16]), t6, &NoProgress);
        assert!(matches!(s, Err(ProtocolError::Mismatch { .. })), "{s:?}");
        assert!(t.join().unwrap().is_err());
    }

    #[test]
    fn a_threshold_server_revealing_unclaimed_or_too_few_slots_is_refused() {
        // The client holds items 0..4 of the server's 0..10; the hostile server answers with
        // honest evaluations, then reveals a slot the client did not claim, or none.
        let key = OprfScalar::from_seed(Curve::FourQ, &[1; 32]).unwrap();
        let server = set(0..10);
        let tl = tag_len(10);
        let values = evaluate_server_set(&key, &server, tl, false, &NoProgress)
            .unwrap()
            .values;
        let m = CacheMeta {
            count: 10,
            tag_len: tl,
            key_check: key.key_check_value().unwrap(),
            ..meta(0, [0; 16])
        };
        let opts = OnlineOptions {
            threshold: Some(2),
            ..CLIENT
        };
        let client: Vec<ItemDigest> = set(0..4).into_iter().chain(set(50..54)).collect();
        for reveal in [vec![], vec![5u32, 7]] {
            let (mut ls, mut lc) = mem_pair();
            let (mc, vc, cc) = (m.clone(), values.clone(), client.clone());
            let t = std::thread::spawn(move || {
                online_client(&mut lc, &mc, &vc, &cc, opts, &NoProgress)
            });
            let n = online_server_hello(&mut ls, &m, opts).unwrap() as usize;
            let msg = ls.recv().unwrap();
            let mut out = vec![MSG_EVALUATED];
            out.resize(1 + n * POINT_LEN, 0);
            key.mul(&msg[1..], &mut out[1..]).unwrap();
            ls.send(&out).unwrap();
            let claimed = crate::positions::receive(&mut ls, n).unwrap();
            assert_eq!(claimed, vec![0, 1, 2, 3]);
            crate::positions::send(&mut ls, &reveal, n).unwrap();
            let items: Vec<u8> = reveal.iter().flat_map(|&s| s.to_le_bytes()).collect();
            send_bulk(&mut ls, MSG_EVALUATED, &items).unwrap();
            let r = t.join().unwrap();
            assert!(
                matches!(r, Err(ProtocolError::PeerMisbehaved(_))),
                "{reveal:?}: {r:?}"
            );
        }
    }

    #[test]
    fn the_streamed_transfer_agrees_and_refuses_what_recv_cache_refuses() {
        struct Mem(Option<CacheMeta>, Vec<u8>);
        impl CacheSink for Mem {
            fn begin(&mut self, meta: &CacheMeta) -> Result<(), ProtocolError> {
                self.0 = Some(meta.clone());
                Ok(())
            }
            fn bytes(&mut self, chunk: &[u8]) -> Result<(), ProtocolError> {
                self.1.extend_from_slice(chunk);
                Ok(())
            }
        }
        // Values straddling many bulk chunks, with labels.
        let n = 300_000u64;
        let values: Vec<u8> = (0..n)
            .flat_map(|i| {
                let mut v = vec![0u8; 4];
                v.extend(i.to_be_bytes());
                v
            })
            .collect();
        let mut l = SealedLabels::default();
        l.offsets.push(0);
        for i in 0..n {
            l.push(&vec![i as u8; 16 + (i % 3) as usize]);
        }
        let m = CacheMeta {
            count: n,
            labels: Some(LabelMeta {
                salt: [0; SALT_LEN],
                columns: vec![],
                bytes: l.data.len() as u64,
            }),
            ..meta(n, [0; 16])
        };
        let (mut ls, mut lc) = mem_pair();
        let (m2, v2, l2) = (m.clone(), values.clone(), l.clone());
        let t = std::thread::spawn(move || send_cache(&mut ls, &m2, &v2, Some(&l2)).unwrap());
        let mut sink = Mem(None, Vec::new());
        let got = recv_cache_into(&mut lc, 1 << 30, &mut sink).unwrap();
        t.join().unwrap();
        assert_eq!(got, m);
        let want = [values.clone(), l.lengths_le(), l.data.clone()].concat();
        assert_eq!(sink.1, want);
        // Out of order, and over the size limit.
        let mut bad = values.clone();
        bad.swap(12 * 200_000 + 11, 12 * 200_001 + 11);
        let (mut ls, mut lc) = mem_pair();
        let t = std::thread::spawn(move || {
            let _ = send_cache(&mut ls, &m, &bad, Some(&l));
        });
        let r = recv_cache_into(&mut lc, 1 << 30, &mut Mem(None, Vec::new()));
        assert!(matches!(r, Err(ProtocolError::PeerMisbehaved(_))), "{r:?}");
        drop(lc);
        t.join().unwrap();
        let (mut ls, mut lc) = mem_pair();
        send_cache(&mut ls, &meta(1000, [0; 16]), &values[..12_000], None).unwrap();
        let r = recv_cache_into(&mut lc, 100, &mut Mem(None, Vec::new()));
        assert!(matches!(r, Err(ProtocolError::PeerMisbehaved(_))), "{r:?}");
    }

    #[test]
    fn tag_length_bounds_false_matches() {
        assert_eq!(tag_len(1 << 24), 12);
        assert_eq!(tag_len(1 << 20), 12);
        assert_eq!(tag_len(0), 9);
        assert_eq!(tag_len(1 << 32), 13);
        assert_eq!(tag_len(u64::MAX), 16);
    }

    #[test]
    fn nobody_learning_is_refused() {
        let none = OnlineOptions {
            client_get_result: false,
            server_get_result: false,
            threshold: None,
        };
        assert!(none.check().is_err());
        // A threshold of 0, or one the client does not learn, is refused too.
        for (t, c) in [(Some(0), true), (Some(3), false)] {
            let o = OnlineOptions {
                client_get_result: c,
                server_get_result: true,
                threshold: t,
            };
            assert!(o.check().is_err(), "{o:?}");
        }
    }

    fn meta(count: u64, key_check: [u8; 16]) -> CacheMeta {
        CacheMeta {
            curve: Curve::FourQ,
            count,
            tag_len: 12,
            key_check,
            labels: None,
        }
    }

    #[test]
    fn a_stale_client_cache_or_other_options_are_refused_on_both_sides() {
        let (mut ls, mut lc) = mem_pair();
        let key = OprfScalar::random(Curve::FourQ).unwrap();
        let t = std::thread::spawn(move || {
            online_client(&mut lc, &meta(0, [1; 16]), &[], &[], BOTH, &NoProgress)
        });
        let s = online_server(&mut ls, &key, &meta(0, [2; 16]), BOTH, &NoProgress);
        assert!(matches!(s, Err(ProtocolError::Mismatch { .. })), "{s:?}");
        assert!(matches!(
            t.join().unwrap(),
            Err(ProtocolError::Mismatch { .. })
        ));
        let (mut ls, mut lc) = mem_pair();
        let t = std::thread::spawn(move || {
            online_client(&mut lc, &meta(0, [1; 16]), &[], &[], CLIENT, &NoProgress)
        });
        let s = online_server(&mut ls, &key, &meta(0, [1; 16]), SHUFFLE, &NoProgress);
        assert!(matches!(s, Err(ProtocolError::Mismatch { .. })));
        assert!(t.join().unwrap().is_err());
    }

    #[test]
    fn hostile_label_sections_get_typed_errors() {
        let with_labels = |count: u64, bytes: u64| CacheMeta {
            labels: Some(LabelMeta {
                salt: [0; SALT_LEN],
                columns: vec!["a".into()],
                bytes,
            }),
            ..meta(count, [0; 16])
        };
        let values = |n: usize| -> Vec<u8> {
            (0..n as u32)
                .flat_map(|i| {
                    let mut v = vec![0u8; 8];
                    v.extend(i.to_be_bytes());
                    v
                })
                .collect()
        };
        // Lengths that do not add up, one below the MAC, one above the limit.
        for lens in [
            [20u32, 20],
            [16, 25],
            [8, 32],
            [MAX_SEALED_LEN as u32 + 1, 0],
        ] {
            let (mut ls, mut lc) = mem_pair();
            let m = with_labels(2, 40);
            let mut head = vec![MSG_CACHE_HEAD];
            put_meta(&mut head, &m);
            ls.send(&head).unwrap();
            send_bulk(&mut ls, MSG_CACHE_TAGS, &values(2)).unwrap();
            let le: Vec<u8> = lens.iter().flat_map(|l| l.to_le_bytes()).collect();
            send_bulk(&mut ls, MSG_CACHE_TAGS, &le).unwrap();
            send_bulk(&mut ls, MSG_CACHE_TAGS, &[0u8; 40]).unwrap();
            let r = recv_cache(&mut lc, 1 << 20);
            if lens == [20, 20] {
                let (_, _, l) = r.unwrap();
                assert_eq!(l.unwrap().get(1).unwrap().len(), 20);
            } else {
                assert!(
                    matches!(r, Err(ProtocolError::PeerMisbehaved(_))),
                    "{lens:?}"
                );
            }
        }
        // Announced label bytes beyond what the client stores, or too few for the count.
        for (bytes, max) in [(1u64 << 40, 1u64 << 41), (1 << 20, 1000), (10, 1 << 20)] {
            let (mut ls, mut lc) = mem_pair();
            let mut head = vec![MSG_CACHE_HEAD];
            put_meta(&mut head, &with_labels(2, bytes));
            ls.send(&head).unwrap();
            assert!(
                matches!(
                    recv_cache(&mut lc, max),
                    Err(ProtocolError::PeerMisbehaved(_))
                ),
                "{bytes}"
            );
        }
    }

    #[test]
    fn hostile_peers_get_typed_errors() {
        // A cache header announcing more than the client accepts.
        let (mut ls, mut lc) = mem_pair();
        send_cache(&mut ls, &meta(1 << 20, [0; 16]), &vec![0u8; 12 << 20], None).unwrap();
        assert!(matches!(
            recv_cache(&mut lc, 1000),
            Err(ProtocolError::PeerMisbehaved(_))
        ));
        // Values out of order.
        let (mut ls, mut lc) = mem_pair();
        let mut vals = vec![0u8; 24];
        vals[0] = 9;
        send_cache(&mut ls, &meta(2, [0; 16]), &vals, None).unwrap();
        assert!(matches!(
            recv_cache(&mut lc, 1000),
            Err(ProtocolError::PeerMisbehaved(_))
        ));
        // A bad tag length or wire version in the header.
        for (pos, byte) in [(1usize, 9u8), (2 + 2 + 11 + 8, 200)] {
            let (mut ls, mut lc) = mem_pair();
            let mut head = vec![MSG_CACHE_HEAD];
            put_meta(&mut head, &meta(1, [0; 16]));
            head[pos] = byte;
            ls.send(&head).unwrap();
            assert!(recv_cache(&mut lc, 1000).is_err());
        }
        // A server that returns invalid points or too many.
        for reply in [vec![0xffu8; 32], vec![0u8; 64]] {
            let (mut ls, mut lc) = mem_pair();
            let m = meta(0, [0; 16]);
            let t = std::thread::spawn(move || {
                online_client(&mut lc, &m, &[], &set(0..1), CLIENT, &NoProgress)
            });
            ls.send(&hello(&meta(0, [0; 16]), CLIENT, 0)).unwrap();
            let _ = ls.recv().unwrap();
            let _ = ls.recv().unwrap();
            let mut msg = vec![MSG_EVALUATED];
            msg.extend_from_slice(&reply);
            ls.send(&msg).unwrap();
            assert!(t.join().unwrap().is_err());
        }
        // A client that sends more points than announced, or junk.
        let key = OprfScalar::random(Curve::FourQ).unwrap();
        for junk in [vec![0u8; 64], vec![7u8; 33]] {
            let (mut ls, mut lc) = mem_pair();
            lc.send(&hello(&meta(0, [0; 16]), CLIENT, 1)).unwrap();
            let mut msg = vec![MSG_BLINDED];
            msg.extend_from_slice(&junk);
            lc.send(&msg).unwrap();
            assert!(online_server(&mut ls, &key, &meta(0, [0; 16]), CLIENT, &NoProgress).is_err());
        }
        // A client announcing more items than the online phase takes.
        let (mut ls, mut lc) = mem_pair();
        lc.send(&hello(&meta(0, [0; 16]), CLIENT, u64::MAX))
            .unwrap();
        assert!(matches!(
            online_server(&mut ls, &key, &meta(0, [0; 16]), CLIENT, &NoProgress),
            Err(ProtocolError::PeerMisbehaved(_))
        ));
    }
}
