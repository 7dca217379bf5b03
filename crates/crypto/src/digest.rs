//! Item digests and match tags.
//!
//! Protocols never see keys, only 128-bit digests of their canonical encoding: a fixed size keeps
//! every protocol's buffers flat, and at 2^32 items a digest collision has probability 2^-64.

use sha2::{Digest, Sha256};

/// A 128-bit digest of one canonical key.
pub type ItemDigest = [u8; 16];

const ITEM_DOMAIN: &[u8] = b"blindjoin/v1/item-digest\0";
const TAG_DOMAIN: &[u8] = b"blindjoin/v1/ecdh-match-tag\0";

/// SHA-256's initial hash value (FIPS 180-4 §5.3.3).
pub(crate) const SHA256_IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// Digest of a canonical key encoding (SHA-256, domain-separated, truncated to 128 bits).
///
/// Keys short enough for the domain, the key and SHA-256's padding to fit one 64-byte block
/// (up to 30 bytes: most ids) are padded here (FIPS 180-4 §5.1.1) and go straight to the
/// compression function: the same digest, without the streaming API's buffering, which cost as
/// much as the compression itself at a million keys.
pub fn item_digest(canonical_key: &[u8]) -> ItemDigest {
    let Some(block) = one_block(canonical_key) else {
        return item_digest_streamed(canonical_key);
    };
    let mut state = SHA256_IV;
    sha2::block_api::compress256(&mut state, &[block]);
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(state) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// Keys [`item_digests`] hashes at once.
pub const ITEM_DIGEST_LANES: usize = crate::sha256_ni_lanes::LANES;

/// [`item_digest`] of several keys at once: on CPUs with the SHA extensions, keys that fit one
/// block go through SHA-256's rounds side by side, several times faster than one after the
/// other (see `sha256_ni_lanes`). The same digests either way.
pub fn item_digests(keys: [&[u8]; ITEM_DIGEST_LANES]) -> [ItemDigest; ITEM_DIGEST_LANES] {
    let mut blocks = [[0u8; 64]; ITEM_DIGEST_LANES];
    for (block, key) in blocks.iter_mut().zip(keys) {
        match one_block(key) {
            Some(b) => *block = b,
            None => return keys.map(item_digest),
        }
    }
    crate::sha256_ni_lanes::compress_lanes(&blocks).unwrap_or_else(|| keys.map(item_digest))
}

/// The domain, the key and SHA-256's padding (FIPS 180-4 §5.1.1) as one block, if they fit.
fn one_block(canonical_key: &[u8]) -> Option<[u8; 64]> {
    let len = ITEM_DOMAIN.len() + canonical_key.len();
    if len + 9 > 64 {
        return None;
    }
    let mut block = [0u8; 64];
    block[..ITEM_DOMAIN.len()].copy_from_slice(ITEM_DOMAIN);
    block[ITEM_DOMAIN.len()..len].copy_from_slice(canonical_key);
    block[len] = 0x80;
    block[56..].copy_from_slice(&(len as u64 * 8).to_be_bytes());
    Some(block)
}

/// [`item_digest`] through the streaming API (any length).
fn item_digest_streamed(canonical_key: &[u8]) -> ItemDigest {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_of_several_keys_at_once_equal_one_at_a_time() {
        // Lengths around the one-block limit, so some batches mix in a streamed key.
        let keys: Vec<Vec<u8>> = (0..64usize)
            .map(|len| (0..len).map(|i| (i * 131 + len * 7) as u8).collect())
            .collect();
        for batch in keys.windows(ITEM_DIGEST_LANES) {
            let refs: [&[u8]; ITEM_DIGEST_LANES] = std::array::from_fn(|i| batch[i].as_slice());
            assert_eq!(item_digests(refs), refs.map(item_digest_streamed));
        }
    }

    #[test]
    fn one_block_digests_equal_the_streamed_ones() {
        for len in 0..=100usize {
            let key: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            assert_eq!(
                item_digest(&key),
                item_digest_streamed(&key),
                "length {len}"
            );
        }
    }
}
