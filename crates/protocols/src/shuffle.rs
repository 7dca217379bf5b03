//! A uniformly random permutation (Fisher–Yates), used so a peer learns nothing from the
//! positions of our items. The randomness is AES-128 in counter mode under a fresh 16-byte key
//! from the OS (a CSPRNG; reading megabytes from the OS RNG instead costs more than the shuffle).

use crate::ProtocolError;
use aes::Aes128;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use blindjoin_crypto::random_bytes;
use zeroize::Zeroize;

/// Words drawn per AES batch.
const BATCH: usize = 512;

/// A random permutation of `0..n`.
pub(crate) fn random_permutation(n: usize) -> Result<Vec<usize>, ProtocolError> {
    let mut key = [0u8; 16];
    random_bytes(&mut key)?;
    let cipher = Aes128::new(&key.into());
    key.zeroize();
    let mut perm: Vec<usize> = (0..n).collect();
    let mut blocks = [[0u8; 16]; BATCH / 2];
    let mut counter = 0u128;
    let mut i = n;
    while i > 1 {
        for b in blocks.iter_mut() {
            *b = counter.to_le_bytes();
            counter += 1;
        }
        cipher.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut blocks));
        for w in blocks.as_flattened().chunks_exact(8) {
            if i <= 1 {
                break;
            }
            i -= 1;
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            // Lemire's multiply-shift: j uniform in 0..=i up to a bias of (i+1)/2^64.
            let j = ((u64::from_le_bytes(b) as u128 * (i as u128 + 1)) >> 64) as usize;
            perm.swap(i, j);
        }
    }
    blocks.zeroize();
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
