//! Messages of the APSI protocol and their decoders (hostile input: every length is checked
//! against the parameters before anything is allocated; ciphertexts go through
//! `blindjoin-he`'s checked decoders).
//!
//! Ids are registered in `blindjoin_link::wire::ids` (0xA1..=0xA7), whose test checks that no
//! id is a prefix of another.
//!
//! | id | direction | body |
//! |----|-----------|------|
//! | 0xA1 `APSI_PARAMS` | S → R | version, parameter bytes (u32 length), label_len u32, nonce_len u8 |
//! | 0xA2 `APSI_OPRF_QUERY` | R → S | count u32, count blinded points |
//! | 0xA3 `APSI_OPRF_REPLY` | S → R | the evaluated points |
//! | 0xA4 `APSI_QUERY_HEAD` | R → S | relinearization keys (u32 length, may be 0), ciphertext count u32 |
//! | 0xA5 `APSI_QUERY_CT` | R → S | one seeded ciphertext (bundle index major, source powers ascending) |
//! | 0xA6 `APSI_RESULT_HEAD` | S → R | result count u32 |
//! | 0xA7 `APSI_RESULT` | S → R | bundle index u32, parts u8, matching ciphertext and one per label part (u32 length each; rounded ciphertexts where the parameters allow) |

use crate::error::{ApsiError, Result, peer};
use crate::params::ApsiParams;
use blindjoin_crypto::oprf::POINT_LEN;
use blindjoin_he::rounded::rounding_bits;
use blindjoin_he::{Ciphertext, Context, RelinKeys, RoundedCiphertext, SeededCiphertext};
use blindjoin_link::Reader;

use blindjoin_link::wire::{byte, ids};

/// Sender's parameters and label sizes.
pub const APSI_PARAMS: u8 = byte(ids::APSI_PARAMS);
/// Receiver's blinded items.
pub const APSI_OPRF_QUERY: u8 = byte(ids::APSI_OPRF_QUERY);
/// Sender's evaluated points.
pub const APSI_OPRF_REPLY: u8 = byte(ids::APSI_OPRF_REPLY);
/// Receiver's relinearization keys and ciphertext count.
pub const APSI_QUERY_HEAD: u8 = byte(ids::APSI_QUERY_HEAD);
/// One encrypted query power.
pub const APSI_QUERY_CT: u8 = byte(ids::APSI_QUERY_CT);
/// Number of results.
pub const APSI_RESULT_HEAD: u8 = byte(ids::APSI_RESULT_HEAD);
/// One bundle's result.
pub const APSI_RESULT: u8 = byte(ids::APSI_RESULT);
/// Every id of this crate, by its registered name.
pub const ALL: &[(&str, u8)] = &[
    ("APSI_PARAMS", APSI_PARAMS),
    ("APSI_OPRF_QUERY", APSI_OPRF_QUERY),
    ("APSI_OPRF_REPLY", APSI_OPRF_REPLY),
    ("APSI_QUERY_HEAD", APSI_QUERY_HEAD),
    ("APSI_QUERY_CT", APSI_QUERY_CT),
    ("APSI_RESULT_HEAD", APSI_RESULT_HEAD),
    ("APSI_RESULT", APSI_RESULT),
];
/// Wire version (2: result ciphertexts rounded).
pub const WIRE_VERSION: u8 = 2;
/// Most label parts a result may carry (⌈8·(1024 + 16) / 80⌉ = 104 for the smallest item).
pub const MAX_LABEL_PARTS: usize = 128;

fn dec(e: blindjoin_link::DecodeError) -> ApsiError {
    peer(e.to_string())
}

fn reader<'a>(msg: &'a [u8], id: u8, what: &'static str) -> Result<Reader<'a>> {
    let mut r = Reader::new(msg, what);
    let got = r.u8().map_err(dec)?;
    if got != id {
        return Err(peer(format!(
            "sent a message of type {got:#04x} where {what} ({id:#04x}) was due"
        )));
    }
    Ok(r)
}

fn put_u32(out: &mut Vec<u8>, v: usize) {
    out.extend_from_slice(&(v as u32).to_le_bytes());
}

fn blob<'a>(r: &mut Reader<'a>) -> Result<&'a [u8]> {
    let n = r.u32().map_err(dec)? as usize;
    r.take(n).map_err(dec)
}

/// `APSI_PARAMS`.
pub fn encode_params(params: &ApsiParams, label_len: usize, nonce_len: usize) -> Vec<u8> {
    let mut m = vec![APSI_PARAMS, WIRE_VERSION];
    let pb = params.to_bytes();
    put_u32(&mut m, pb.len());
    m.extend_from_slice(&pb);
    put_u32(&mut m, label_len);
    m.push(nonce_len as u8);
    m
}

/// Decodes `APSI_PARAMS`: the parameters, label_len, nonce_len.
///
/// # Errors
/// [`ApsiError::PeerMisbehaved`] for malformed bytes or sizes out of range.
pub fn decode_params(msg: &[u8]) -> Result<(ApsiParams, usize, usize)> {
    let mut r = reader(msg, APSI_PARAMS, "APSI parameters")?;
    let v = r.u8().map_err(dec)?;
    if v != WIRE_VERSION {
        return Err(peer(format!(
            "speaks APSI wire version {v}, this build {WIRE_VERSION}"
        )));
    }
    let pb = blob(&mut r)?;
    let (params, used) =
        ApsiParams::from_bytes(pb).map_err(|e| peer(format!("sent parameters we refuse: {e}")))?;
    if used != pb.len() {
        return Err(peer("trailing bytes after the parameters"));
    }
    let label_len = r.u32().map_err(dec)? as usize;
    let nonce_len = r.u8().map_err(dec)? as usize;
    r.finish().map_err(dec)?;
    if label_len > crate::item::MAX_LABEL_LEN || nonce_len > crate::item::MAX_NONCE_LEN {
        return Err(peer(format!(
            "announces labels of {label_len} bytes with {nonce_len}-byte nonces (limits {} and {})",
            crate::item::MAX_LABEL_LEN,
            crate::item::MAX_NONCE_LEN
        )));
    }
    Ok((params, label_len, nonce_len))
}

/// `APSI_OPRF_QUERY` from the blinded points.
pub fn encode_oprf_query(points: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(5 + points.len());
    m.push(APSI_OPRF_QUERY);
    put_u32(&mut m, points.len() / POINT_LEN);
    m.extend_from_slice(points);
    m
}

/// Decodes `APSI_OPRF_QUERY` (at most `max` points).
///
/// # Errors
/// [`ApsiError::PeerMisbehaved`] for a malformed message or too many points.
pub fn decode_oprf_query(msg: &[u8], max: usize) -> Result<Vec<u8>> {
    let mut r = reader(msg, APSI_OPRF_QUERY, "APSI OPRF query")?;
    let n = r.u32().map_err(dec)? as usize;
    if n > max {
        return Err(peer(format!(
            "queries {n} items; the table takes at most {max}"
        )));
    }
    let pts = r.take(n * POINT_LEN).map_err(dec)?.to_vec();
    r.finish().map_err(dec)?;
    Ok(pts)
}

/// Decodes `APSI_OPRF_REPLY` (exactly `n` points).
///
/// # Errors
/// [`ApsiError::PeerMisbehaved`] for a malformed message.
pub fn decode_oprf_reply(msg: &[u8], n: usize) -> Result<Vec<u8>> {
    let mut r = reader(msg, APSI_OPRF_REPLY, "APSI OPRF reply")?;
    let pts = r.take(n * POINT_LEN).map_err(dec)?.to_vec();
    r.finish().map_err(dec)?;
    Ok(pts)
}

/// `APSI_QUERY_HEAD`.
pub fn encode_query_head(ctx: &Context, rk: Option<&RelinKeys>, count: usize) -> Vec<u8> {
    let mut m = vec![APSI_QUERY_HEAD];
    let rb = rk.map(|k| k.to_bytes(ctx)).unwrap_or_default();
    put_u32(&mut m, rb.len());
    m.extend_from_slice(&rb);
    put_u32(&mut m, count);
    m
}

/// Decodes `APSI_QUERY_HEAD`: the keys (if sent) and the ciphertext count, which must be
/// `want`.
///
/// # Errors
/// [`ApsiError::PeerMisbehaved`] for malformed keys or a wrong count.
pub fn decode_query_head(
    ctx: &Context,
    msg: &[u8],
    want: usize,
) -> Result<(Option<RelinKeys>, usize)> {
    let mut r = reader(msg, APSI_QUERY_HEAD, "APSI query head")?;
    let rb = blob(&mut r)?;
    let rk = if rb.is_empty() {
        None
    } else {
        Some(
            RelinKeys::from_bytes(ctx, rb)
                .map_err(|e| peer(format!("relinearization keys: {e}")))?,
        )
    };
    let n = r.u32().map_err(dec)? as usize;
    r.finish().map_err(dec)?;
    if n != want {
        return Err(peer(format!(
            "announces {n} query ciphertexts; the parameters need {want}"
        )));
    }
    Ok((rk, n))
}

/// `APSI_QUERY_CT`.
pub fn encode_query_ct(ctx: &Context, ct: &SeededCiphertext) -> Vec<u8> {
    let b = ct.to_bytes(ctx);
    let mut m = Vec::with_capacity(1 + b.len());
    m.push(APSI_QUERY_CT);
    m.extend_from_slice(&b);
    m
}

/// Decodes `APSI_QUERY_CT`, which must be at the top level.
///
/// # Errors
/// [`ApsiError::PeerMisbehaved`] for a malformed ciphertext.
pub fn decode_query_ct(ctx: &Context, msg: &[u8]) -> Result<Ciphertext> {
    let mut r = reader(msg, APSI_QUERY_CT, "APSI query ciphertext")?;
    let body = r.take(r.left()).map_err(dec)?;
    let ct = SeededCiphertext::from_bytes(ctx, body)
        .map_err(|e| peer(format!("query ciphertext: {e}")))?
        .expand(ctx)
        .map_err(|e| peer(format!("query ciphertext: {e}")))?;
    if ct.level() != ctx.top_level() {
        return Err(peer("a query ciphertext below the top level"));
    }
    Ok(ct)
}

/// `APSI_RESULT_HEAD`.
pub fn encode_result_head(count: usize) -> Vec<u8> {
    let mut m = vec![APSI_RESULT_HEAD];
    put_u32(&mut m, count);
    m
}

/// Decodes `APSI_RESULT_HEAD`.
///
/// # Errors
/// [`ApsiError::PeerMisbehaved`] for a malformed message.
pub fn decode_result_head(msg: &[u8]) -> Result<usize> {
    let mut r = reader(msg, APSI_RESULT_HEAD, "APSI result head")?;
    let n = r.u32().map_err(dec)? as usize;
    r.finish().map_err(dec)?;
    Ok(n)
}

/// One bundle's result.
#[derive(Clone, Debug)]
pub struct BundleResult {
    /// Bundle index.
    pub index: usize,
    /// Encrypted matching values.
    pub matching: Ciphertext,
    /// Encrypted label felts, per part.
    pub labels: Vec<Ciphertext>,
}

/// `APSI_RESULT`. When the parameters allow ([`rounding_bits`]) each ciphertext travels
/// rounded ([`RoundedCiphertext`]: c0 and c1 in b0 + b1 bits a coefficient instead of twice
/// the last prime's bits, at most one bit of the noise budget); a ciphertext that cannot be
/// rounded (not size 2 at level 1) is sent whole, and the receiver refuses it.
pub fn encode_result(ctx: &Context, r: &BundleResult) -> Vec<u8> {
    let mut m = vec![APSI_RESULT];
    put_u32(&mut m, r.index);
    m.push(r.labels.len() as u8);
    for ct in std::iter::once(&r.matching).chain(&r.labels) {
        let rounded = rounding_bits(ctx)
            .and_then(|_| RoundedCiphertext::round(ctx, ct).ok())
            .map(|rc| rc.to_bytes(ctx));
        let b = rounded.unwrap_or_else(|| ct.to_bytes(ctx));
        put_u32(&mut m, b.len());
        m.extend_from_slice(&b);
    }
    m
}

/// Decodes `APSI_RESULT`: the bundle index must be below `indices`, the parts `parts`, and
/// every ciphertext of size 2.
///
/// # Errors
/// [`ApsiError::PeerMisbehaved`] for anything else.
pub fn decode_result(
    ctx: &Context,
    msg: &[u8],
    indices: usize,
    parts: usize,
) -> Result<BundleResult> {
    let mut r = reader(msg, APSI_RESULT, "APSI result")?;
    let index = r.u32().map_err(dec)? as usize;
    if index >= indices {
        return Err(peer(format!(
            "a result for bundle index {index}; there are {indices}"
        )));
    }
    let got = r.u8().map_err(dec)? as usize;
    if got != parts {
        return Err(peer(format!(
            "a result with {got} label parts; the labels need {parts}"
        )));
    }
    let rounds = rounding_bits(ctx).is_some();
    let mut ct = || -> Result<Ciphertext> {
        let bytes = blob(&mut r)?;
        let c = if rounds {
            RoundedCiphertext::from_bytes(ctx, bytes).and_then(|rc| rc.lift(ctx))
        } else {
            Ciphertext::from_bytes(ctx, bytes)
        }
        .map_err(|e| peer(format!("result ciphertext: {e}")))?;
        if c.size() != 2 {
            return Err(peer("a result ciphertext of size 3"));
        }
        Ok(c)
    };
    let matching = ct()?;
    let labels = (0..parts).map(|_| ct()).collect::<Result<Vec<_>>>()?;
    r.finish().map_err(dec)?;
    Ok(BundleResult {
        index,
        matching,
        labels,
    })
}
