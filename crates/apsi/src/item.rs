//! From an OPRF output to what the tables hold: the hashed item (its cuckoo locations and its
//! field elements) and the label key, and the label encryption.
//!
//! * **Split.** SHA-256(domain ‖ T(H(x)^k)) gives 32 bytes: the first 16 are the hashed item,
//!   the last 16 the label key (APSI's `HashedItem` / `LabelKey`). The domain separates these
//!   from the values `ub_oprf` derives from the same OPRF.
//! * **Locations.** Location i ∈ 0..hash_func_count of an item is a 64-bit mix of its two
//!   halves and i, reduced mod table_size. The hashed item is already pseudorandom to anyone
//!   without the OPRF key, so an unkeyed mix suffices (as Kuku's tabulation hashing does).
//! * **Felts.** The low item_bits of the hashed item, cut into felts_per_item chunks of
//!   b = ⌊log2 t⌋ bits (each < t).
//! * **Labels** follow APSI's nonce scheme: the sender stores nonce ‖ (label ⊕ KS(key, nonce))
//!   with a fresh random nonce of `nonce_len` bytes per item and KS the SHA-256 counter stream
//!   SHA-256(domain ‖ key ‖ nonce ‖ counter). The key comes from the OPRF, so only a receiver
//!   that holds the item can decrypt; the nonce keeps two versions of one item's label (a DB
//!   rebuilt with a changed label) from sharing a key stream. A per-DB salt instead of the
//!   nonce (the research brief's A.3) would save the nonce's slots but give an item the same
//!   stream in every DB made with that salt; APSI's choice costs nonce_len bytes of label
//!   felts and needs no state, so we follow it. Labels shorter than `label_len` are padded with
//!   zero bytes (APSI's fixed label size).
//!   The encrypted label, 8·(nonce_len + label_len) bits, is cut into b-bit felts and these
//!   into parts of felts_per_item: part p's polynomial interpolates felts p·f .. p·f+f−1.

use sha2::{Digest, Sha256};
use zeroize::Zeroize;

/// The 16-byte hashed item.
pub type HashedItem = [u8; 16];
/// The 16-byte label key.
pub type LabelKey = [u8; 16];

const SPLIT_DOMAIN: &[u8] = b"blindjoin-apsi v1 item and label key";
const STREAM_DOMAIN: &[u8] = b"blindjoin-apsi v1 label stream";
/// Longest label (bytes), as APSI's `max_label_byte_count`.
pub const MAX_LABEL_LEN: usize = 1024;
/// Longest nonce (bytes), as APSI's `max_nonce_byte_count`.
pub const MAX_NONCE_LEN: usize = 16;

/// Hashed item and label key of an OPRF output `T(H(x)^k)`.
pub fn split(oprf_out: &[u8; 32]) -> (HashedItem, LabelKey) {
    let mut h: [u8; 32] = Sha256::new()
        .chain_update(SPLIT_DOMAIN)
        .chain_update(oprf_out)
        .finalize()
        .into();
    let mut item = [0u8; 16];
    let mut key = [0u8; 16];
    item.copy_from_slice(&h[..16]);
    key.copy_from_slice(&h[16..]);
    h.zeroize();
    (item, key)
}

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Location `i` of `item` in a table of `table_size` bins.
pub fn location(item: &HashedItem, i: usize, table_size: usize) -> usize {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&item[..8]);
    hi.copy_from_slice(&item[8..]);
    let (lo, hi) = (u64::from_le_bytes(lo), u64::from_le_bytes(hi));
    let h = mix64(lo ^ mix64(hi.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))));
    (h % table_size as u64) as usize
}

/// The distinct locations of `item` for `count` hash functions.
pub fn locations(item: &HashedItem, count: usize, table_size: usize) -> Vec<usize> {
    let mut out: Vec<usize> = (0..count).map(|i| location(item, i, table_size)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Bit `i` (least significant first) of `bytes`; 0 past the end.
fn bit(bytes: &[u8], i: usize) -> u64 {
    bytes
        .get(i / 8)
        .map_or(0, |b| u64::from((b >> (i % 8)) & 1))
}

/// `count` chunks of `bits` bits of `bytes`, least significant first (zero past the end).
pub fn to_felts(bytes: &[u8], bits: u32, count: usize) -> Vec<u64> {
    (0..count)
        .map(|c| {
            (0..bits as usize).fold(0u64, |acc, j| {
                acc | (bit(bytes, c * bits as usize + j) << j)
            })
        })
        .collect()
}

/// Inverse of [`to_felts`] for `len` bytes (extra bits ignored).
pub fn from_felts(felts: &[u64], bits: u32, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    for (c, &f) in felts.iter().enumerate() {
        for j in 0..bits as usize {
            let i = c * bits as usize + j;
            if i / 8 < len && (f >> j) & 1 == 1 {
                out[i / 8] |= 1 << (i % 8);
            }
        }
    }
    out
}

/// The felts of an item: felts_per_item chunks of `bits` bits.
pub fn item_felts(item: &HashedItem, bits: u32, felts: usize) -> Vec<u64> {
    to_felts(item, bits, felts)
}

/// Label parts: ⌈8·(nonce_len + label_len) / (felts·bits)⌉.
pub fn label_parts(label_len: usize, nonce_len: usize, bits: u32, felts: usize) -> usize {
    (8 * (label_len + nonce_len)).div_ceil(felts * bits as usize)
}

fn keystream(key: &LabelKey, nonce: &[u8], out: &mut [u8]) {
    for (ctr, chunk) in out.chunks_mut(32).enumerate() {
        let mut block: [u8; 32] = Sha256::new()
            .chain_update(STREAM_DOMAIN)
            .chain_update(key)
            .chain_update([nonce.len() as u8])
            .chain_update(nonce)
            .chain_update((ctr as u32).to_le_bytes())
            .finalize()
            .into();
        for (o, k) in chunk.iter_mut().zip(&block) {
            *o ^= k;
        }
        block.zeroize();
    }
}

/// nonce ‖ (label ⊕ KS(key, nonce)), the label zero-padded to `label_len`.
pub fn encrypt_label(key: &LabelKey, nonce: &[u8], label: &[u8], label_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(nonce.len() + label_len);
    out.extend_from_slice(nonce);
    let mut body = vec![0u8; label_len];
    body[..label.len().min(label_len)].copy_from_slice(&label[..label.len().min(label_len)]);
    keystream(key, nonce, &mut body);
    out.extend_from_slice(&body);
    out
}

/// Inverse of [`encrypt_label`] (`enc` = nonce ‖ body).
pub fn decrypt_label(key: &LabelKey, enc: &[u8], nonce_len: usize) -> Vec<u8> {
    let (nonce, body) = enc.split_at(nonce_len.min(enc.len()));
    let mut out = body.to_vec();
    keystream(key, nonce, &mut out);
    out
}
