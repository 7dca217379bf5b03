//! SHA-256 of several independent one-block messages at once, with the SHA extensions.
//!
//! One `sha256rnds2` waits for the one before it, so a single message's 64 rounds are bound by
//! that instruction's latency, not by how many the core can start: hashing a million short keys
//! one after another left most of the SHA unit idle. Here [`LANES`] messages go through the
//! rounds side by side (each step of the compression function, FIPS 180-4 §6.2.2, is issued for
//! every lane before the next step), so their rounds overlap. The message schedule is the one
//! Intel's SHA extensions guide gives (`sha256msg1`, `sha256msg2` and an `palignr` for
//! `W[t−7]`), written as a loop over the 16 four-round quads.
//!
//! Checked against the `sha2` crate on random blocks (tests below and in [`crate::digest`]).

#![allow(unsafe_code)] // entering the kernel only; a SAFETY note on the one unsafe block

/// Messages hashed side by side.
pub(crate) const LANES: usize = 4;

/// Whether this CPU has the SHA extensions (and the SSSE3 / SSE4.1 shuffles the kernel uses).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            std::is_x86_feature_detected!("sha")
                && std::is_x86_feature_detected!("sse4.1")
                && std::is_x86_feature_detected!("ssse3")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The first 16 bytes of SHA-256's output state after compressing each of `blocks` (already
/// padded, one block per message) from the initial hash value. Returns `None` when the CPU
/// lacks the SHA extensions.
pub(crate) fn compress_lanes(blocks: &[[u8; 64]; LANES]) -> Option<[[u8; 16]; LANES]> {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: `available()` just confirmed sha, sse4.1 and ssse3 (sse2 is x86-64's
        // baseline), the target features `x86::compress_lanes` is compiled for.
        return Some(unsafe { x86::compress_lanes(blocks) });
    }
    let _ = blocks;
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::LANES;
    use crate::digest::SHA256_IV as IV;
    use std::arch::x86_64::*;

    /// FIPS 180-4 §4.2.2, four per quad.
    const K: [u32; 64] = [
        0x428a_2f98,
        0x7137_4491,
        0xb5c0_fbcf,
        0xe9b5_dba5,
        0x3956_c25b,
        0x59f1_11f1,
        0x923f_82a4,
        0xab1c_5ed5,
        0xd807_aa98,
        0x1283_5b01,
        0x2431_85be,
        0x550c_7dc3,
        0x72be_5d74,
        0x80de_b1fe,
        0x9bdc_06a7,
        0xc19b_f174,
        0xe49b_69c1,
        0xefbe_4786,
        0x0fc1_9dc6,
        0x240c_a1cc,
        0x2de9_2c6f,
        0x4a74_84aa,
        0x5cb0_a9dc,
        0x76f9_88da,
        0x983e_5152,
        0xa831_c66d,
        0xb003_27c8,
        0xbf59_7fc7,
        0xc6e0_0bf3,
        0xd5a7_9147,
        0x06ca_6351,
        0x1429_2967,
        0x27b7_0a85,
        0x2e1b_2138,
        0x4d2c_6dfc,
        0x5338_0d13,
        0x650a_7354,
        0x766a_0abb,
        0x81c2_c92e,
        0x9272_2c85,
        0xa2bf_e8a1,
        0xa81a_664b,
        0xc24b_8b70,
        0xc76c_51a3,
        0xd192_e819,
        0xd699_0624,
        0xf40e_3585,
        0x106a_a070,
        0x19a4_c116,
        0x1e37_6c08,
        0x2748_774c,
        0x34b0_bcb5,
        0x391c_0cb3,
        0x4ed8_aa4a,
        0x5b9c_ca4f,
        0x682e_6ff3,
        0x748f_82ee,
        0x78a5_636f,
        0x84c8_7814,
        0x8cc7_0208,
        0x90be_fffa,
        0xa450_6ceb,
        0xbef9_a3f7,
        0xc671_78f2,
    ];

    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    fn words(w: [u32; 4]) -> __m128i {
        _mm_set_epi32(w[3] as i32, w[2] as i32, w[1] as i32, w[0] as i32)
    }

    /// Sixteen bytes as a vector, lane 0 first.
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    fn load(b: &[u8]) -> __m128i {
        let mut w = [0u32; 4];
        for (w, c) in w.iter_mut().zip(b.chunks_exact(4)) {
            *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        words(w)
    }

    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    fn store(v: __m128i) -> [u8; 16] {
        let lo = _mm_cvtsi128_si64(v) as u64;
        let hi = _mm_extract_epi64::<1>(v) as u64;
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&lo.to_le_bytes());
        out[8..].copy_from_slice(&hi.to_le_bytes());
        out
    }

    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) fn compress_lanes(blocks: &[[u8; 64]; LANES]) -> [[u8; 16]; LANES] {
        // Big-endian words: reverse the bytes of each 32-bit lane.
        let swap = _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203);
        // The state as the rounds instruction wants it: ABEF and CDGH (high lane first).
        let abef = words([IV[5], IV[4], IV[1], IV[0]]);
        let cdgh = words([IV[7], IV[6], IV[3], IV[2]]);
        let mut s0 = [abef; LANES];
        let mut s1 = [cdgh; LANES];
        let mut w = [[_mm_setzero_si128(); 4]; LANES];
        for (w, block) in w.iter_mut().zip(blocks) {
            for (q, chunk) in w.iter_mut().zip(block.chunks_exact(16)) {
                *q = _mm_shuffle_epi8(load(chunk), swap);
            }
        }
        for j in 0..16 {
            let k = words([K[4 * j], K[4 * j + 1], K[4 * j + 2], K[4 * j + 3]]);
            for l in 0..LANES {
                let w = &mut w[l];
                if j >= 4 {
                    // W[4j..4j+4] from the four quads before it (FIPS 180-4 §6.2.2 step 1).
                    let t7 = _mm_alignr_epi8::<4>(w[(j - 1) % 4], w[(j - 2) % 4]);
                    let x = _mm_add_epi32(_mm_sha256msg1_epu32(w[j % 4], w[(j - 3) % 4]), t7);
                    w[j % 4] = _mm_sha256msg2_epu32(x, w[(j - 1) % 4]);
                }
                let wk = _mm_add_epi32(w[j % 4], k);
                s1[l] = _mm_sha256rnds2_epu32(s1[l], s0[l], wk);
                s0[l] = _mm_sha256rnds2_epu32(s0[l], s1[l], _mm_shuffle_epi32::<0x0e>(wk));
            }
        }
        let mut out = [[0u8; 16]; LANES];
        for l in 0..LANES {
            let s0 = _mm_add_epi32(s0[l], abef);
            let s1 = _mm_add_epi32(s1[l], cdgh);
            // ABEF, CDGH -> ABCD (A in lane 0), each word big-endian.
            let feba = _mm_shuffle_epi32::<0x1b>(s0);
            let dchg = _mm_shuffle_epi32::<0xb1>(s1);
            let dcba = _mm_blend_epi16::<0xf0>(feba, dchg);
            out[l] = store(_mm_shuffle_epi8(dcba, swap));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lane_is_sha256s_compression_of_its_own_block() {
        if !available() {
            eprintln!("no SHA extensions here: nothing to check");
            return;
        }
        let mut x = 0x0123_4567_89ab_cdefu64;
        for _ in 0..200 {
            let mut blocks = [[0u8; 64]; LANES];
            for b in blocks.iter_mut().flatten() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            let got = compress_lanes(&blocks).unwrap();
            for (block, got) in blocks.iter().zip(got) {
                let mut state = crate::digest::SHA256_IV;
                sha2::block_api::compress256(&mut state, std::slice::from_ref(block));
                let mut want = [0u8; 16];
                for (o, w) in want.chunks_exact_mut(4).zip(state) {
                    o.copy_from_slice(&w.to_be_bytes());
                }
                assert_eq!(got, want);
            }
        }
    }
}
