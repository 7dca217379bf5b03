//! A uniformly random permutation from the OS RNG (Fisher–Yates), used so a peer learns nothing
//! from the positions of our items.

use crate::ProtocolError;
use blindjoin_crypto::random_bytes;

/// A random permutation of `0..n`.
pub(crate) fn random_permutation(n: usize) -> Result<Vec<usize>, ProtocolError> {
    let mut perm: Vec<usize> = (0..n).collect();
    let mut words = vec![0u8; n.saturating_sub(1) * 8];
    random_bytes(&mut words)?;
    for (k, w) in words.chunks_exact(8).enumerate() {
        let i = n - 1 - k;
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        // Lemire's multiply-shift: j uniform in 0..=i up to a bias of (i+1)/2^64.
        let j = ((u64::from_le_bytes(b) as u128 * (i as u128 + 1)) >> 64) as usize;
        perm.swap(i, j);
    }
    Ok(perm)
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_a_permutation() {
        for n in [0, 1, 2, 1000] {
            let mut p = super::random_permutation(n).unwrap();
            p.sort_unstable();
            assert_eq!(p, (0..n).collect::<Vec<_>>());
        }
        assert_ne!(
            super::random_permutation(64).unwrap(),
            super::random_permutation(64).unwrap()
        );
    }
}
