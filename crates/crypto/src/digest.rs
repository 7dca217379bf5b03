//! Item digests and match tags.
//!
//! Protocols never see keys, only 128-bit digests of their canonical encoding: a fixed size keeps
//! every protocol's buffers flat, and at 2^32 items a digest collision has probability 2^-64.

use sha2::{Digest, Sha256};

/// A 128-bit digest of one canonical key.
pub type ItemDigest = [u8; 16];

const ITEM_DOMAIN: &[u8] = b"blindjoin/v1/item-digest\0";
const TAG_DOMAIN: &[u8] = b"blindjoin/v1/ecdh-match-tag\0";

/// Digest of a canonical key encoding (SHA-256, domain-separated, truncated to 128 bits).
pub fn item_digest(canonical_key: &[u8]) -> ItemDigest {
    let h = Sha256::new()
        .chain_update(ITEM_DOMAIN)
        .chain_update(canonical_key)
        .finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&h[..16]);
    out
}

/// The first `len` (≤ 16) bytes of a domain-separated hash of a doubly-masked point, as a `u128`
/// (big-endian, zero-padded). Hashing first makes every tag bit uniform, whatever the curve's
/// encoding looks like.
pub fn tag_of(point: &[u8], len: usize) -> u128 {
    let h = Sha256::new()
        .chain_update(TAG_DOMAIN)
        .chain_update(point)
        .finalize();
    let mut b = [0u8; 16];
    let len = len.min(16);
    b[..len].copy_from_slice(&h[..len]);
    u128::from_be_bytes(b)
}
