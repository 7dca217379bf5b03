//! Wire format of ciphertexts, seeded ciphertexts, relinearization keys and plaintexts.
//!
//! Every object starts with `"BJHE"`, a format version (1), a kind byte and an 8-byte
//! fingerprint of the parameters (SHA-256 of N, t and the primes), then kind-specific header
//! bytes and the residues. A residue mod q_i is packed in exactly bits(q_i) bits, least
//! significant first, each row padded with zero bits to a whole byte, so a 32-bit prime costs
//! 4 bytes per coefficient instead of 8 and every object has exactly one encoding.
//!
//! Decoding is for hostile input (the peer, a file): the header fields are checked against the
//! context (level ≤ the top data level, size 2 or 3, the key count equal to the number of data
//! primes), so the expected length is computed from the parameters before anything is
//! allocated and must match the input exactly; every residue must be below its prime and the
//! padding zero. Failures are [`HeError::Decode`] naming the object and the fault; nothing
//! panics.

use sha2::{Digest, Sha256};

use crate::cipher::{Ciphertext, SeededCiphertext};
use crate::context::Context;
use crate::encoder::{NttPlaintext, Plaintext};
use crate::error::{HeError, Result};
use crate::keys::{RelinKeys, expand_uniform};
use crate::modarith::Modulus;
use crate::poly::RnsPoly;
use crate::prng::SEED_BYTES;
use crate::rounded::{RoundedCiphertext, rounding_bits};

const MAGIC: &[u8; 4] = b"BJHE";
const VERSION: u8 = 1;
/// Magic, version, kind, fingerprint.
const HEADER: usize = 4 + 1 + 1 + 8;

/// Kinds of serialized objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Ciphertext = 1,
    Seeded = 2,
    RelinKeys = 3,
    Plaintext = 4,
    NttPlaintext = 5,
    Rounded = 6,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Ciphertext => "ciphertext",
            Kind::Seeded => "seeded ciphertext",
            Kind::RelinKeys => "relinearization keys",
            Kind::Plaintext => "plaintext",
            Kind::NttPlaintext => "NTT plaintext",
            Kind::Rounded => "rounded ciphertext",
        }
    }
}

/// The 8-byte fingerprint of the parameters.
pub fn fingerprint(ctx: &Context) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(b"blindjoin-he parameters v1");
    h.update((ctx.n as u64).to_le_bytes());
    h.update(ctx.t.value().to_le_bytes());
    h.update((ctx.q.len() as u64).to_le_bytes());
    for q in &ctx.q {
        h.update(q.value().to_le_bytes());
    }
    let d = h.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    out
}

fn header(ctx: &Context, kind: Kind, out: &mut Vec<u8>) {
    out.reserve(HEADER);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(kind as u8);
    out.extend_from_slice(&fingerprint(ctx));
}

fn row_bytes(n: usize, bits: u32) -> usize {
    (n * bits as usize).div_ceil(8)
}

fn pack_row(out: &mut Vec<u8>, vals: &[u64], bits: u32) {
    let (mut acc, mut have) = (0u128, 0u32);
    for &v in vals {
        acc |= u128::from(v) << have;
        have += bits;
        while have >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            have -= 8;
        }
    }
    if have > 0 {
        out.push(acc as u8);
    }
}

/// A bounds-checked cursor over the input.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn err(&self, reason: impl Into<String>) -> HeError {
        HeError::Decode {
            what: self.what,
            reason: reason.into(),
        }
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.err(format!("truncated at byte {}", self.pos)))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// Reads one row of `n` residues mod `m`, each checked below m.
    fn row(&mut self, n: usize, m: &Modulus, row: usize, out: &mut [u64]) -> Result<()> {
        let bits = m.bits();
        let bytes = self.take(row_bytes(n, bits))?;
        let mask = (1u128 << bits) - 1;
        let (mut acc, mut have, mut next) = (0u128, 0u32, 0usize);
        for (c, slot) in out.iter_mut().enumerate().take(n) {
            while have < bits {
                let b = bytes.get(next).copied().unwrap_or(0);
                acc |= u128::from(b) << have;
                have += 8;
                next += 1;
            }
            let v = (acc & mask) as u64;
            acc >>= bits;
            have -= bits;
            if v >= m.value() {
                return Err(self.err(format!(
                    "row {row} coefficient {c} is {v}, not below the modulus {}",
                    m.value()
                )));
            }
            *slot = v;
        }
        if acc != 0 {
            return Err(self.err(format!("row {row} has nonzero padding bits")));
        }
        Ok(())
    }

    /// Reads one row of `n` values of `bits` bits each (any value fits).
    fn raw_row(&mut self, n: usize, bits: u32, row: usize) -> Result<Vec<u64>> {
        let bytes = self.take(row_bytes(n, bits))?;
        let mask = (1u128 << bits) - 1;
        let (mut acc, mut have, mut next) = (0u128, 0u32, 0usize);
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            while have < bits {
                let b = bytes.get(next).copied().unwrap_or(0);
                acc |= u128::from(b) << have;
                have += 8;
                next += 1;
            }
            out.push((acc & mask) as u64);
            acc >>= bits;
            have -= bits;
        }
        if acc != 0 {
            return Err(self.err(format!("row {row} has nonzero padding bits")));
        }
        Ok(out)
    }

    fn poly(&mut self, n: usize, moduli: &[Modulus]) -> Result<RnsPoly> {
        let mut p = RnsPoly::zero(n, moduli.len());
        for (i, m) in moduli.iter().enumerate() {
            self.row(n, m, i, p.row_mut(i))?;
        }
        Ok(p)
    }

    fn finish(&self) -> Result<()> {
        if self.pos != self.buf.len() {
            return Err(self.err(format!("{} bytes after the end", self.buf.len() - self.pos)));
        }
        Ok(())
    }
}

/// Checks the header and the exact total length before any allocation.
fn open<'a>(
    ctx: &Context,
    bytes: &'a [u8],
    kind: Kind,
    body_len: impl FnOnce(&mut Reader<'a>) -> Result<usize>,
) -> Result<Reader<'a>> {
    let mut r = Reader {
        buf: bytes,
        pos: 0,
        what: kind.name(),
    };
    if r.take(4)? != MAGIC {
        return Err(r.err("not a blindjoin-he object (magic)"));
    }
    let v = r.byte()?;
    if v != VERSION {
        return Err(r.err(format!("format version {v}, expected {VERSION}")));
    }
    let k = r.byte()?;
    if k != kind as u8 {
        return Err(r.err(format!("object kind {k}, expected {}", kind as u8)));
    }
    if r.take(8)? != fingerprint(ctx) {
        return Err(r.err("made under other parameters (fingerprint)"));
    }
    let start = r.pos;
    let body = body_len(&mut r)?;
    let want = start
        .checked_add(body)
        .ok_or_else(|| r.err("length overflow"))?;
    if bytes.len() != want {
        return Err(r.err(format!(
            "{} bytes, expected {want} for these parameters",
            bytes.len()
        )));
    }
    Ok(r)
}

fn poly_bytes(n: usize, moduli: &[Modulus]) -> usize {
    moduli.iter().map(|m| row_bytes(n, m.bits())).sum()
}

fn level_of(ctx: &Context, r: &Reader<'_>, level: u8) -> Result<usize> {
    let l = usize::from(level);
    if l == 0 || l > ctx.top_level() {
        return Err(r.err(format!("level {l} outside 1..={}", ctx.top_level())));
    }
    Ok(l)
}

impl Ciphertext {
    /// Serializes (any level, size and form).
    pub fn to_bytes(&self, ctx: &Context) -> Vec<u8> {
        let mut out = Vec::new();
        header(ctx, Kind::Ciphertext, &mut out);
        out.extend_from_slice(&[
            self.level as u8,
            u8::from(self.ntt_form),
            self.polys.len() as u8,
        ]);
        let moduli = ctx.level_moduli(self.level);
        for p in &self.polys {
            for (i, m) in moduli.iter().enumerate() {
                pack_row(&mut out, p.row(i), m.bits());
            }
        }
        out
    }

    /// Decodes and checks a ciphertext of `ctx`.
    ///
    /// # Errors
    /// [`HeError::Decode`] naming the fault.
    pub fn from_bytes(ctx: &Context, bytes: &[u8]) -> Result<Self> {
        let mut hdr = (0usize, false, 0usize);
        let mut r = open(ctx, bytes, Kind::Ciphertext, |r| {
            let b = r.byte()?;
            let level = level_of(ctx, r, b)?;
            let ntt = match r.byte()? {
                0 => false,
                1 => true,
                b => return Err(r.err(format!("form byte {b}, expected 0 or 1"))),
            };
            let size = usize::from(r.byte()?);
            if !(2..=3).contains(&size) {
                return Err(r.err(format!("size {size}, expected 2 or 3")));
            }
            hdr = (level, ntt, size);
            Ok(3 + size * poly_bytes(ctx.n, ctx.level_moduli(level)))
        })?;
        let (level, ntt_form, size) = hdr;
        let moduli = ctx.level_moduli(level);
        let polys = (0..size)
            .map(|_| r.poly(ctx.n, moduli))
            .collect::<Result<Vec<_>>>()?;
        r.finish()?;
        Ok(Self {
            level,
            ntt_form,
            polys,
        })
    }
}

impl SeededCiphertext {
    /// Serializes: level, seed, c0.
    pub fn to_bytes(&self, ctx: &Context) -> Vec<u8> {
        let mut out = Vec::new();
        header(ctx, Kind::Seeded, &mut out);
        out.push(self.level as u8);
        out.extend_from_slice(&self.seed);
        for (i, m) in ctx.level_moduli(self.level).iter().enumerate() {
            pack_row(&mut out, self.c0.row(i), m.bits());
        }
        out
    }

    /// Decodes and checks a seeded ciphertext of `ctx`.
    ///
    /// # Errors
    /// [`HeError::Decode`] naming the fault.
    pub fn from_bytes(ctx: &Context, bytes: &[u8]) -> Result<Self> {
        let mut level = 0;
        let mut r = open(ctx, bytes, Kind::Seeded, |r| {
            let b = r.byte()?;
            level = level_of(ctx, r, b)?;
            Ok(1 + SEED_BYTES + poly_bytes(ctx.n, ctx.level_moduli(level)))
        })?;
        let mut seed = [0u8; SEED_BYTES];
        seed.copy_from_slice(r.take(SEED_BYTES)?);
        let c0 = r.poly(ctx.n, ctx.level_moduli(level))?;
        r.finish()?;
        Ok(Self { level, c0, seed })
    }
}

impl RelinKeys {
    /// Serializes: the count, then per component the seed of a_i and b_i over all primes (NTT
    /// form): half the size of (b_i, a_i).
    pub fn to_bytes(&self, ctx: &Context) -> Vec<u8> {
        let mut out = Vec::new();
        header(ctx, Kind::RelinKeys, &mut out);
        out.push(self.keys.len() as u8);
        for ((b, _), seed) in self.keys.iter().zip(&self.seeds) {
            out.extend_from_slice(seed);
            for (i, m) in ctx.q.iter().enumerate() {
                pack_row(&mut out, b.row(i), m.bits());
            }
        }
        out
    }

    /// Decodes and checks relinearization keys of `ctx`.
    ///
    /// # Errors
    /// [`HeError::Decode`] naming the fault; [`HeError::Unsupported`] without a special prime.
    pub fn from_bytes(ctx: &Context, bytes: &[u8]) -> Result<Self> {
        let Some((sp, _)) = ctx.special else {
            return Err(HeError::Unsupported(
                "relinearization needs at least two coeff_modulus primes",
            ));
        };
        let mut r = open(ctx, bytes, Kind::RelinKeys, |r| {
            let count = usize::from(r.byte()?);
            if count != sp {
                return Err(r.err(format!("{count} key components, expected {sp}")));
            }
            Ok(1 + sp * (SEED_BYTES + poly_bytes(ctx.n, &ctx.q)))
        })?;
        let mut keys = Vec::with_capacity(sp);
        let mut seeds = Vec::with_capacity(sp);
        for _ in 0..sp {
            let mut seed = [0u8; SEED_BYTES];
            seed.copy_from_slice(r.take(SEED_BYTES)?);
            let b = r.poly(ctx.n, &ctx.q)?;
            keys.push((b, expand_uniform(ctx, ctx.q.len(), &seed)));
            seeds.push(seed);
        }
        r.finish()?;
        Ok(Self { keys, seeds })
    }
}

impl Plaintext {
    /// Serializes the N coefficients mod t.
    pub fn to_bytes(&self, ctx: &Context) -> Vec<u8> {
        let mut out = Vec::new();
        header(ctx, Kind::Plaintext, &mut out);
        pack_row(&mut out, &self.coeffs, ctx.t.bits());
        out
    }

    /// Decodes and checks a plaintext of `ctx` (every coefficient below t).
    ///
    /// # Errors
    /// [`HeError::Decode`] naming the fault.
    pub fn from_bytes(ctx: &Context, bytes: &[u8]) -> Result<Self> {
        let mut r = open(ctx, bytes, Kind::Plaintext, |_| {
            Ok(row_bytes(ctx.n, ctx.t.bits()))
        })?;
        let mut coeffs = vec![0u64; ctx.n];
        r.row(ctx.n, &ctx.t, 0, &mut coeffs)?;
        r.finish()?;
        Ok(Self { coeffs })
    }
}

impl NttPlaintext {
    /// Serializes: level, then the rows.
    pub fn to_bytes(&self, ctx: &Context) -> Vec<u8> {
        let mut out = Vec::new();
        header(ctx, Kind::NttPlaintext, &mut out);
        out.push(self.level as u8);
        for (i, m) in ctx.level_moduli(self.level).iter().enumerate() {
            pack_row(&mut out, self.poly.row(i), m.bits());
        }
        out
    }

    /// Decodes and checks an NTT-form plaintext of `ctx`.
    ///
    /// # Errors
    /// [`HeError::Decode`] naming the fault.
    pub fn from_bytes(ctx: &Context, bytes: &[u8]) -> Result<Self> {
        let mut level = 0;
        let mut r = open(ctx, bytes, Kind::NttPlaintext, |r| {
            let b = r.byte()?;
            level = level_of(ctx, r, b)?;
            Ok(1 + poly_bytes(ctx.n, ctx.level_moduli(level)))
        })?;
        let poly = r.poly(ctx.n, ctx.level_moduli(level))?;
        r.finish()?;
        Ok(Self { level, poly })
    }
}

impl RoundedCiphertext {
    /// Serializes: b0, b1, then c0' in b0 bits and c1' in b1 bits a coefficient.
    pub fn to_bytes(&self, ctx: &Context) -> Vec<u8> {
        let (b0, b1) = rounding_bits(ctx).unwrap_or((64, 64));
        let mut out = Vec::new();
        header(ctx, Kind::Rounded, &mut out);
        out.extend_from_slice(&[b0 as u8, b1 as u8]);
        pack_row(&mut out, &self.c0, b0);
        pack_row(&mut out, &self.c1, b1);
        out
    }

    /// Decodes and checks a rounded ciphertext of `ctx` (the bit widths must be the ones
    /// [`rounding_bits`] derives for `ctx`).
    ///
    /// # Errors
    /// [`HeError::Decode`] naming the fault.
    pub fn from_bytes(ctx: &Context, bytes: &[u8]) -> Result<Self> {
        let mut bits = (0u32, 0u32);
        let mut r = open(ctx, bytes, Kind::Rounded, |r| {
            let Some((b0, b1)) = rounding_bits(ctx) else {
                return Err(r.err("these parameters do not round ciphertexts"));
            };
            let (g0, g1) = (u32::from(r.byte()?), u32::from(r.byte()?));
            if (g0, g1) != (b0, b1) {
                return Err(r.err(format!("bit widths {g0}, {g1}, expected {b0}, {b1}")));
            }
            bits = (b0, b1);
            Ok(2 + row_bytes(ctx.n, b0) + row_bytes(ctx.n, b1))
        })?;
        let c0 = r.raw_row(ctx.n, bits.0, 0)?;
        let c1 = r.raw_row(ctx.n, bits.1, 1)?;
        r.finish()?;
        Ok(Self { c0, c1 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cipher::{decrypt, encrypt, encrypt_seeded};
    use crate::{BatchEncoder, Parameters, PlainModulus, SecretKey};

    fn ctx() -> Context {
        Context::new(&Parameters::new(4096, PlainModulus::Value(40961), &[40, 32, 32]).unwrap())
            .unwrap()
    }

    fn decode_err(r: Result<impl Sized>) -> String {
        match r {
            Err(HeError::Decode { reason, .. }) => reason,
            Err(e) => format!("other error: {e}"),
            Ok(_) => "decoded".into(),
        }
    }

    #[test]
    fn round_trips_and_sizes() {
        let ctx = ctx();
        let sk = SecretKey::generate(&ctx).unwrap();
        let e = BatchEncoder::new(&ctx);
        let pt = e.encode(&[1, 2, 40960]).unwrap();
        let ct = encrypt(&ctx, &sk, &pt).unwrap();
        let bytes = ct.to_bytes(&ctx);
        // 40- and 32-bit rows: (5 + 4) bytes per coefficient per polynomial.
        assert_eq!(bytes.len(), HEADER + 3 + 2 * 4096 * 9);
        let back = Ciphertext::from_bytes(&ctx, &bytes).unwrap();
        assert_eq!(back, ct);
        assert_eq!(decrypt(&ctx, &sk, &back).unwrap(), pt);

        let seeded = encrypt_seeded(&ctx, &sk, &pt).unwrap();
        let sb = seeded.to_bytes(&ctx);
        assert_eq!(sb.len(), HEADER + 1 + 32 + 4096 * 9, "half a ciphertext");
        let back = SeededCiphertext::from_bytes(&ctx, &sb).unwrap();
        assert_eq!(back, seeded);
        assert_eq!(decrypt(&ctx, &sk, &back.expand(&ctx).unwrap()).unwrap(), pt);

        let rk = RelinKeys::generate(&ctx, &sk).unwrap();
        let rb = rk.to_bytes(&ctx);
        // Two components, each a seed and b over the 40-, 32- and 32-bit primes: half of (b, a).
        assert_eq!(rb.len(), HEADER + 1 + 2 * (32 + 4096 * (5 + 4 + 4)));
        assert_eq!(RelinKeys::from_bytes(&ctx, &rb).unwrap(), rk);

        let pb = pt.to_bytes(&ctx);
        assert_eq!(pb.len(), HEADER + 4096 * 16 / 8);
        assert_eq!(Plaintext::from_bytes(&ctx, &pb).unwrap(), pt);
        let np = e.to_ntt(&pt, 1).unwrap();
        let nb = np.to_bytes(&ctx);
        assert_eq!(NttPlaintext::from_bytes(&ctx, &nb).unwrap(), np);
    }

    #[test]
    fn truncated_oversized_and_out_of_range_input_is_refused() {
        let ctx = ctx();
        let sk = SecretKey::generate(&ctx).unwrap();
        let e = BatchEncoder::new(&ctx);
        let pt = e.encode(&[7; 100]).unwrap();
        let ct = encrypt(&ctx, &sk, &pt).unwrap();
        let bytes = ct.to_bytes(&ctx);
        for cut in [
            0,
            3,
            4,
            5,
            6,
            13,
            HEADER,
            HEADER + 2,
            HEADER + 3,
            bytes.len() / 2,
            bytes.len() - 1,
        ] {
            let r = decode_err(Ciphertext::from_bytes(&ctx, &bytes[..cut]));
            assert!(
                r.contains("truncated") || r.contains("bytes, expected"),
                "cut {cut}: {r}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(decode_err(Ciphertext::from_bytes(&ctx, &long)).contains("expected"));

        // A residue equal to q_0 (first coefficient of the first row: 40 bits).
        let q0 = ctx.q[0].value();
        let mut bad = bytes.clone();
        let at = HEADER + 3;
        bad[at..at + 5].copy_from_slice(&q0.to_le_bytes()[..5]);
        let r = decode_err(Ciphertext::from_bytes(&ctx, &bad));
        assert!(
            r.contains("row 0 coefficient 0") && r.contains("not below"),
            "{r}"
        );
        // Header fields.
        let mut b = bytes.clone();
        b[0] = b'X';
        assert!(decode_err(Ciphertext::from_bytes(&ctx, &b)).contains("magic"));
        let mut b = bytes.clone();
        b[4] = 9;
        assert!(decode_err(Ciphertext::from_bytes(&ctx, &b)).contains("version"));
        let mut b = bytes.clone();
        b[5] = Kind::Seeded as u8;
        assert!(decode_err(Ciphertext::from_bytes(&ctx, &b)).contains("kind"));
        let mut b = bytes.clone();
        b[HEADER] = 3;
        assert!(decode_err(Ciphertext::from_bytes(&ctx, &b)).contains("level 3"));
        let mut b = bytes.clone();
        b[HEADER + 1] = 2;
        assert!(decode_err(Ciphertext::from_bytes(&ctx, &b)).contains("form byte"));
        let mut b = bytes.clone();
        b[HEADER + 2] = 200;
        assert!(decode_err(Ciphertext::from_bytes(&ctx, &b)).contains("size 200"));
        // Other parameters: same shape, other primes.
        let other = Context::new(
            &Parameters::new(4096, PlainModulus::Value(65537), &[40, 32, 32]).unwrap(),
        )
        .unwrap();
        assert!(decode_err(Ciphertext::from_bytes(&other, &bytes)).contains("fingerprint"));
        // Plaintext coefficient ≥ t; nonzero padding cannot occur at N·16 bits, so test it on
        // the 40-bit row of an NTT plaintext (4096·40 bits is whole bytes too): use t's row.
        let mut pb = pt.to_bytes(&ctx);
        pb[HEADER] = 0xff;
        pb[HEADER + 1] = 0xff;
        assert!(
            decode_err(Plaintext::from_bytes(&ctx, &pb)).contains("not below the modulus 40961")
        );
        // Relinearization keys: wrong count, truncated.
        let rk = RelinKeys::generate(&ctx, &sk).unwrap();
        let mut rb = rk.to_bytes(&ctx);
        rb[HEADER] = 3;
        assert!(decode_err(RelinKeys::from_bytes(&ctx, &rb)).contains("key components"));
        rb[HEADER] = 2;
        rb.truncate(rb.len() - 10);
        assert!(decode_err(RelinKeys::from_bytes(&ctx, &rb)).contains("expected"));
        let one = Context::new(&Parameters::new(2048, PlainModulus::Value(65537), &[48]).unwrap())
            .unwrap();
        assert!(matches!(
            RelinKeys::from_bytes(&one, &rb),
            Err(HeError::Unsupported(_))
        ));
    }

    #[test]
    fn nonzero_padding_is_refused() {
        // N = 2048 with a 17-bit t: 2048·17 bits is whole bytes; a 30-bit-prime row of a
        // 1-prime context at N = 2048 is too. Build a row that does not end on a byte: pack
        // 3 values of 17 bits (51 bits, 5 bits of padding) and read them back.
        let m = Modulus::new(65537).unwrap();
        let mut out = Vec::new();
        pack_row(&mut out, &[1, 2, 65536], 17);
        assert_eq!(out.len(), 7);
        let mut vals = [0u64; 3];
        let mut r = Reader {
            buf: &out,
            pos: 0,
            what: "test",
        };
        r.row(3, &m, 0, &mut vals).unwrap();
        assert_eq!(vals, [1, 2, 65536]);
        out[6] |= 0x80;
        let mut r = Reader {
            buf: &out,
            pos: 0,
            what: "test",
        };
        assert!(r.row(3, &m, 0, &mut vals).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let ctx = ctx();
        let sk = SecretKey::generate(&ctx).unwrap();
        let e = BatchEncoder::new(&ctx);
        let ct = encrypt(&ctx, &sk, &e.encode(&[1]).unwrap()).unwrap();
        let bytes = ct.to_bytes(&ctx);
        let mut state = 11u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        for _ in 0..300 {
            let mut b = bytes.clone();
            for _ in 0..4 {
                let i = next() as usize % b.len();
                b[i] ^= 1 << (next() % 8);
            }
            let _ = Ciphertext::from_bytes(&ctx, &b);
            let _ = SeededCiphertext::from_bytes(&ctx, &b);
            let _ = RelinKeys::from_bytes(&ctx, &b);
            let _ = Plaintext::from_bytes(&ctx, &b);
            let _ = NttPlaintext::from_bytes(&ctx, &b);
            let len = next() as usize % 64;
            let junk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            assert!(Ciphertext::from_bytes(&ctx, &junk).is_err());
        }
    }
}
