//! The order of a bucket's rows ([`crate::pipeline::spill::GroupBucket`]), whether their shards were in
//! memory or on disk.
//!
//! Rows are ordered by [`order_key`] (then row number): it is the digest with its bucket hash
//! moved to the top, so the rows of a bucket are contiguous and rows with the same key are
//! neighbours.

use blindjoin_crypto::ItemDigest;

/// A digest rearranged so that its bucket hash (bytes 8..16, little-endian; see
/// [`crate::pipeline::bucket::bucket_of`]) is the high half and bytes 0..8 the low half. A bijection, so
/// equal order keys are equal digests.
pub fn order_key(d: &ItemDigest) -> u128 {
    let mut hi = [0u8; 8];
    hi.copy_from_slice(&d[8..16]);
    let mut lo = [0u8; 8];
    lo.copy_from_slice(&d[..8]);
    (u128::from(u64::from_le_bytes(hi)) << 64) | u128::from(u64::from_be_bytes(lo))
}

/// The digest an order key came from.
pub fn digest_of_order(o: u128) -> ItemDigest {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&((o as u64).to_be_bytes()));
    d[8..].copy_from_slice(&(((o >> 64) as u64).to_le_bytes()));
    d
}

/// The bucket among `b` of an order key; the same as [`crate::pipeline::bucket::bucket_of`] on its digest.
pub fn bucket_of_order(o: u128, b: usize) -> usize {
    (((o >> 64) * b as u128) >> 64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::bucket::bucket_of;
    use blindjoin_crypto::item_digest;

    #[test]
    fn order_keys_round_trip_and_bucket_like_digests() {
        for i in 0..1000u32 {
            let d = item_digest(&i.to_le_bytes());
            let o = order_key(&d);
            assert_eq!(digest_of_order(o), d);
            for b in [1, 2, 8, 1 << 10] {
                assert_eq!(bucket_of_order(o, b), bucket_of(&d, b));
            }
        }
    }
}
