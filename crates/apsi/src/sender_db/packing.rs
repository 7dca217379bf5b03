//! The packed plaintext form of the DB file: a plaintext's N coefficients mod t, each in
//! b = ⌈log2 t⌉ bits (the bit length of t − 1), little-endian bit order, N·b/8 bytes.
//!
//! In memory a bundle plaintext is in NTT form over the top level's primes (centered lift of
//! the coefficients, then one forward NTT per prime). Its coefficient form is recovered from
//! the first prime's row alone: one inverse NTT gives the centered coefficients v ∈
//! (−t/2, t/2] mod q₀, and q₀ > t makes v, and so v mod t, unique. Loading does the lift and
//! the forward NTTs again (as `BatchEncoder::to_ntt` does), which gives the same residues.

use crate::error::{ApsiError, Result};
use blindjoin_he::modarith::Modulus;
use blindjoin_he::ntt::NttTables;
use blindjoin_he::{Context, NttPlaintext, Plaintext};

/// Packs and unpacks the plaintexts of one context.
pub(super) struct Coder<'a> {
    ctx: &'a Context,
    n: usize,
    level: usize,
    bits: u32,
    t: Modulus,
    /// The top level's primes and their NTT tables (the context's: the tables are a function
    /// of the prime and N).
    q: Vec<Modulus>,
    q_ntt: Vec<NttTables>,
}

/// Bits per coefficient mod `t`: the bit length of t − 1, which is ⌈log2 t⌉ for every t ≥ 2
/// that is not a power of two (t is prime).
pub(super) fn coeff_bits(t: u64) -> u32 {
    u64::BITS - t.saturating_sub(1).leading_zeros()
}

/// Bytes of one packed plaintext of `n` coefficients of `bits` bits.
pub(super) fn packed_len(n: usize, bits: u32) -> usize {
    (n * bits as usize).div_ceil(8)
}

impl<'a> Coder<'a> {
    /// A coder for the top level of `ctx`.
    ///
    /// # Errors
    /// [`ApsiError::Db`] when the context has no prime or no NTT for it (not from APSI's rules).
    pub(super) fn new(ctx: &'a Context) -> Result<Self> {
        let level = ctx.top_level();
        let n = ctx.degree();
        let bad = || ApsiError::Db("parameters without NTT-friendly primes above t".into());
        let t = Modulus::new(ctx.plain_modulus()).ok_or_else(bad)?;
        let q = ctx.level_moduli(level).to_vec();
        if q.is_empty() || q.iter().any(|m| m.value() <= t.value()) {
            return Err(bad());
        }
        let q_ntt = q
            .iter()
            .map(|&m| NttTables::new(m, n).ok_or_else(bad))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            ctx,
            n,
            level,
            bits: coeff_bits(t.value()),
            t,
            q,
            q_ntt,
        })
    }

    /// Bytes of one packed plaintext.
    pub(super) fn packed_len(&self) -> usize {
        packed_len(self.n, self.bits)
    }

    /// Packs the coefficient form of a bundle plaintext into `out` (`packed_len` bytes): from
    /// `plain` when the DB keeps it, else recovered from `ntt` (see the module doc). `None`
    /// if `ntt` is not a lifted plaintext of this context (an internal inconsistency).
    pub(super) fn pack(
        &self,
        ntt: &NttPlaintext,
        plain: Option<&Plaintext>,
        out: &mut [u8],
    ) -> Option<()> {
        if let Some(p) = plain {
            pack_bits(p.coeffs(), self.bits, out);
            return Some(());
        }
        if ntt.level() != self.level {
            return None;
        }
        let (q0, q0_ntt) = (self.q.first()?, self.q_ntt.first()?);
        let mut row = ntt.residues().get(..self.n)?.to_vec();
        q0_ntt.inverse(&mut row);
        for x in &mut row {
            let v = q0.center(*x);
            let c = self.t.from_i64(v);
            if self.t.center(c) != v {
                return None;
            }
            *x = c;
        }
        pack_bits(&row, self.bits, out);
        Some(())
    }

    /// The plaintext packed in `bytes`, in NTT form at the top level, and in coefficient form
    /// too when `keep`. `Err(None)` when a coefficient is not below t, `Err(Some(e))` when the
    /// HE layer refuses. The residues are `BatchEncoder::to_ntt`'s: each coefficient c is
    /// lifted centered (c, or q − (t − c) when c > t/2) and each row transformed in place.
    pub(super) fn unpack(
        &self,
        bytes: &[u8],
        keep: bool,
    ) -> std::result::Result<(NttPlaintext, Option<Plaintext>), Option<ApsiError>> {
        let n = self.n;
        let mut res = vec![0u64; n * self.level];
        let (first, rest) = res.split_at_mut(n);
        unpack_bits(bytes, self.bits, first);
        let t = self.t.value();
        if first.iter().any(|&c| c >= t) {
            return Err(None);
        }
        let plain = if keep {
            Some(Plaintext::from_coeffs(self.ctx, first).map_err(|e| Some(e.into()))?)
        } else {
            None
        };
        // Branch-free (half of the coefficients are above t/2, at random: a branch would be
        // mispredicted half the time) and without overflow checks (c + q − t < q < 2^63), in
        // blocks of 8 (N ≥ 1024 is a multiple of 8) so that it vectorizes. (half − c) wraps,
        // setting the top bit, iff c > t/2.
        let half = t / 2;
        let lift =
            |c: u64, up: u64| c.wrapping_add(up & (half.wrapping_sub(c) >> 63).wrapping_neg());
        for (row, m) in rest.chunks_exact_mut(n).zip(&self.q[1..]) {
            let up = m.value() - t;
            for (xs, cs) in row.chunks_exact_mut(8).zip(first.chunks_exact(8)) {
                for (x, &c) in xs.iter_mut().zip(cs) {
                    *x = lift(c, up);
                }
            }
        }
        let up = self.q[0].value() - t;
        for xs in first.chunks_exact_mut(8) {
            for x in xs {
                *x = lift(*x, up);
            }
        }
        for (row, tables) in res.chunks_exact_mut(n).zip(&self.q_ntt) {
            tables.forward(row);
        }
        let ntt =
            NttPlaintext::from_residues(self.ctx, self.level, res).map_err(|e| Some(e.into()))?;
        Ok((ntt, plain))
    }
}

/// Writes `values` (each < 2^bits, bits ≤ 64) into `out`, `bits` bits each, low bits first;
/// bits past the last value are zero.
pub(super) fn pack_bits(values: &[u64], bits: u32, out: &mut [u8]) {
    let mut acc: u128 = 0;
    let mut have = 0u32;
    let mut dst = out.iter_mut();
    for &v in values {
        acc |= u128::from(v) << have;
        have += bits;
        while have >= 8 {
            if let Some(b) = dst.next() {
                *b = acc as u8;
            }
            acc >>= 8;
            have -= 8;
        }
    }
    for b in dst {
        *b = acc as u8;
        acc >>= 8;
    }
}

/// Reads `out.len()` values of `bits` bits (≤ 64) from `bytes`, as [`pack_bits`] wrote them;
/// missing bytes read as zero. Up to 57 bits a value lies in the 8 bytes from its first byte.
pub(super) fn unpack_bits(bytes: &[u8], bits: u32, out: &mut [u64]) {
    if bits <= 57 {
        let mask = (1u64 << bits) - 1;
        let b = bits as usize;
        for (i, o) in out.iter_mut().enumerate() {
            let bit = i * b;
            let at = bit / 8;
            let mut w = [0u8; 8];
            match bytes.get(at..at + 8) {
                Some(s) => w.copy_from_slice(s),
                None => {
                    let tail = bytes.get(at..).unwrap_or(&[]);
                    w[..tail.len()].copy_from_slice(tail);
                }
            }
            *o = (u64::from_le_bytes(w) >> (bit % 8)) & mask;
        }
        return;
    }
    let mask = (1u128 << bits) - 1;
    let mut acc: u128 = 0;
    let mut have = 0u32;
    let mut src = bytes.iter();
    for o in out {
        while have < bits {
            acc |= u128::from(src.next().copied().unwrap_or(0)) << have;
            have += 8;
        }
        *o = (acc & mask) as u64;
        acc >>= bits;
        have -= bits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blindjoin_he::{BatchEncoder, Parameters, PlainModulus};

    /// ⌈log2 t⌉ for the presets' plain moduli and the edges.
    #[test]
    fn coefficient_bits_are_ceil_log2_t() {
        for (t, bits) in [
            (40961u64, 16u32),
            (65537, 17),
            (114689, 17),
            (1032193, 20),
            (4079617, 22),
            (2, 1),
            (3, 2),
            ((1 << 31) - 1, 31),
        ] {
            assert_eq!(coeff_bits(t), bits, "{t}");
            assert!(t <= 1 << bits && (bits == 1 || t > 1 << (bits - 1)), "{t}");
        }
        assert_eq!(packed_len(8192, 17), 17408);
        assert_eq!(packed_len(3, 3), 2);
    }

    /// Every width 1..=64, lengths that end mid-byte, values at both ends of the range.
    #[test]
    fn bits_round_trip_at_every_width() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for bits in 1..=64u32 {
            for len in [0usize, 1, 7, 8, 9, 64, 257] {
                let max = if bits == 64 {
                    u64::MAX
                } else {
                    (1 << bits) - 1
                };
                let v: Vec<u64> = (0..len)
                    .map(|i| {
                        s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                        match i % 3 {
                            0 => 0,
                            1 => max,
                            _ => (s >> 7) & max,
                        }
                    })
                    .collect();
                let mut out = vec![0xAAu8; packed_len(len, bits)];
                pack_bits(&v, bits, &mut out);
                let mut back = vec![1u64; len];
                unpack_bits(&out, bits, &mut back);
                assert_eq!(back, v, "bits {bits}, len {len}");
                if !(len * bits as usize).is_multiple_of(8) {
                    let spare = 8 - (len * bits as usize) % 8;
                    assert_eq!(out.last().map(|b| b >> (8 - spare)), Some(0));
                }
            }
        }
    }

    /// A plaintext's NTT form packs to its coefficients and unpacks to the same residues.
    #[test]
    fn ntt_form_packs_to_its_coefficients() {
        let params = Parameters::new(4096, PlainModulus::Value(40961), &[40, 32, 32]).unwrap();
        let ctx = Context::new(&params).unwrap();
        let coder = Coder::new(&ctx).unwrap();
        let enc = BatchEncoder::new(&ctx);
        let slots: Vec<u64> = (0..4096u64).map(|i| (i * i * 7 + 3) % 40961).collect();
        for slots in [slots, vec![0; 4096], vec![40960; 4096]] {
            let pt = enc.encode(&slots).unwrap();
            let ntt = enc.to_ntt(&pt, ctx.top_level()).unwrap();
            let mut a = vec![0u8; coder.packed_len()];
            let mut b = vec![0u8; coder.packed_len()];
            coder.pack(&ntt, None, &mut a).unwrap();
            coder.pack(&ntt, Some(&pt), &mut b).unwrap();
            assert_eq!(a, b);
            let (back, plain) = coder.unpack(&a, true).unwrap();
            assert_eq!(back, ntt);
            assert_eq!(plain.as_ref(), Some(&pt));
        }
        // A coefficient of t (16 bits hold up to 65535) is refused.
        let mut bytes = vec![0u8; coder.packed_len()];
        pack_bits(&[40961], 16, &mut bytes);
        assert!(matches!(coder.unpack(&bytes, false), Err(None)));
    }
}
