//! Deterministic randomness for this crate's tests (SplitMix64): reproducible failures and no RNG
//! dependency. Test modules add their own helper methods in `impl Rng` blocks.

/// SplitMix64 state.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// The next 64 pseudo-random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next 128 pseudo-random bits.
    pub(crate) fn u128(&mut self) -> u128 {
        ((self.next_u64() as u128) << 64) | self.next_u64() as u128
    }

    /// A pseudo-random field element.
    pub(crate) fn gf(&mut self) -> crate::gf128::Gf128 {
        crate::gf128::Gf128(self.u128())
    }
}
