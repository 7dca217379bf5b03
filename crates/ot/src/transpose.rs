//! Bit-matrix transposition for OT extension.
//!
//! Bit convention everywhere in this crate: bit `i` of a byte string is bit `i % 8` of byte
//! `i / 8` (little-endian), and bit `i` of a `u128` is `(x >> i) & 1`; a `u128` read with
//! `u128::from_le_bytes` from 16 bytes keeps bit numbers.

use rayon::prelude::*;

/// Masks selecting, for block size `s`, the bits whose index has bit `s` clear.
const MASKS: [(u32, u128); 7] = [
    (64, 0x0000_0000_0000_0000_FFFF_FFFF_FFFF_FFFF),
    (32, 0x0000_0000_FFFF_FFFF_0000_0000_FFFF_FFFF),
    (16, 0x0000_FFFF_0000_FFFF_0000_FFFF_0000_FFFF),
    (8, 0x00FF_00FF_00FF_00FF_00FF_00FF_00FF_00FF),
    (4, 0x0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F_0F0F),
    (2, 0x3333_3333_3333_3333_3333_3333_3333_3333),
    (1, 0x5555_5555_5555_5555_5555_5555_5555_5555),
];

/// Transposes a 128×128 bit matrix in place (Eklundh's recursive block swap: 7 rounds, each
/// swapping the off-diagonal `s×s` sub-blocks of every `2s×2s` block with shifts and masks).
/// On return, bit `j` of `m[i]` is the old bit `i` of `m[j]`.
pub fn transpose128(m: &mut [u128; 128]) {
    for &(s, lo) in &MASKS {
        let s_us = s as usize;
        let mut base = 0;
        while base < 128 {
            for i in base..base + s_us {
                let a = m[i];
                let b = m[i + s_us];
                let t = ((a >> s) ^ b) & lo;
                m[i + s_us] = b ^ t;
                m[i] = a ^ (t << s);
            }
            base += 2 * s_us;
        }
    }
}

/// Transposes 128 rows of `cols` bits each (`rows` holds row `j` at bytes
/// `[j·cols/8, (j+1)·cols/8)`; `cols` is a multiple of 128) into `cols` words of 128 bits:
/// bit `j` of `out[i]` = bit `i` of row `j`.
///
/// Callers guarantee `rows.len() == 16 * cols` and `out.len() == cols` (private helper).
pub(crate) fn transpose_rows(rows: &[u8], cols: usize, out: &mut [u128]) {
    let row_len = cols / 8;
    out.par_chunks_mut(128).enumerate().for_each(|(blk, dst)| {
        let mut m = [0u128; 128];
        for (j, word) in m.iter_mut().enumerate() {
            let start = j * row_len + blk * 16;
            let mut b = [0u8; 16];
            b.copy_from_slice(&rows[start..start + 16]);
            *word = u128::from_le_bytes(b);
        }
        transpose128(&mut m);
        dst.copy_from_slice(&m);
    });
}

#[cfg(test)]
pub(crate) fn naive_transpose_rows(rows: &[u8], cols: usize) -> Vec<u128> {
    let row_len = cols / 8;
    let mut out = vec![0u128; cols];
    for (i, word) in out.iter_mut().enumerate() {
        for j in 0..128 {
            let bit = (rows[j * row_len + i / 8] >> (i % 8)) & 1;
            *word |= u128::from(bit) << j;
        }
    }
    out
}
