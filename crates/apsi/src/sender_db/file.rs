//! The sender DB file, format version 3 ([`SenderDb::write_to`], [`SenderDb::read_from`]):
//!
//! ```text
//! "BJAPSIDB" | version u16 = 3 | form u8 (0 ntt, 1 packed) | params length u32 | params |
//! label_len u32 | nonce_len u8 | OPRF key seed (32) | items u64 | bundle indices u32 |
//! per index: bundles u32, per bundle: degree u32, then per polynomial (matching, then each
//! label part) its plaintexts in the file's form | SHA-256 of all the above
//! ```
//!
//! (integers little-endian). The two forms of a polynomial's plaintexts ([`DbForm`]):
//!
//! * `ntt`: each as the online phase multiplies by it, level × N residues of 8 bytes, then the
//!   few the evaluation adds (degree 0 and, with Paterson–Stockmeyer, multiples of L + 1) in
//!   coefficient form, N words each. Loading is a read and a range check.
//! * `packed`: each once, in coefficient form, N coefficients of ⌈log2 t⌉ bits
//!   (`packing`), 64·level / ⌈log2 t⌉ times smaller (7.5× at 17 bits and two primes, 8× at
//!   16 bits and two, 9.1× at 21 bits and three); loading redoes the lift and the forward
//!   NTT per prime, in parallel over a polynomial's plaintexts while the bytes are hashed,
//!   and keeps the few the evaluation adds in coefficient form too.
//!
//! Version 2 is version 3 in `ntt` form without the form byte and is still read; version 1
//! (which stored the entries) and unknown versions are refused: re-run setup.
//!
//! Loading is a streamed read of hostile input: every count is bounded by the parameters and by
//! the bytes left before anything is allocated, every residue must be below its prime and
//! every coefficient below t, the checksum is compared before the DB is returned, and at most
//! one polynomial's bytes are buffered besides the DB being built (the file is never in memory
//! twice). A packed file expands 64·level / ⌈log2 t⌉ times in memory, as any DB of its size
//! does: a plaintext is allocated only once its bytes have been read, so a file cannot make the
//! loader allocate more than that multiple of its length. The bytes hold the OPRF key: whoever
//! stores them must keep the file private.

use super::packing::Coder;
use super::{Bundle, Coeffs, OPRF_CURVE, SenderDb, check_sizes, keep_plain, label_coeff_count};
use crate::error::{ApsiError, Result};
use crate::item;
use crate::params::ApsiParams;
use blindjoin_crypto::oprf::OprfScalar;
use blindjoin_he::{NttPlaintext, Plaintext};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use zeroize::{Zeroize, Zeroizing};

const MAGIC: &[u8; 8] = b"BJAPSIDB";
/// Version 3 has a form byte; version 2 stored the `ntt` form without it; version 1 stored
/// the entries.
const VERSION: u16 = 3;
const VERSION_NTT_ONLY: u16 = 2;

/// How a DB file stores the bundles' plaintexts (see the module doc).
///
/// The default is `Packed`: 7.5–8× smaller at the 1M presets (9.1× at 16M-1-32, whose `ntt`
/// file would be about 10 GB) and, measured at 2^20 items on 2 threads, about as fast to load:
/// its forward NTTs, spread over the threads while the bytes are hashed, cost about what
/// reading and hashing the 7.5–8× larger `ntt` file does (median loads 0.51–1.30× `ntt`'s over
/// three rounds at 1M-1024-cmp and 1M-1-32; `docs/notes/apsi-performance.md`). A packed load
/// within 1.5× of an `ntt` one was the bar for this default. `Ntt` (`compress: false`) loads
/// with one thread and no arithmetic besides range checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DbForm {
    /// NTT form, 8 bytes per residue: loading is a read.
    Ntt,
    /// Coefficient form bit-packed at ⌈log2 t⌉ bits: 7.5–9× smaller, one forward NTT per
    /// prime and plaintext on load.
    #[default]
    Packed,
}

impl DbForm {
    fn code(self) -> u8 {
        match self {
            Self::Ntt => 0,
            Self::Packed => 1,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(Self::Ntt),
            1 => Some(Self::Packed),
            _ => None,
        }
    }

    /// `ntt` or `packed`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ntt => "ntt",
            Self::Packed => "packed",
        }
    }
}

fn db(s: impl Into<String>) -> ApsiError {
    ApsiError::Db(s.into())
}

impl SenderDb {
    /// The serialized DB in `form` (see the module doc); it holds the OPRF key.
    pub fn to_bytes(&self, form: DbForm) -> Zeroizing<Vec<u8>> {
        let mut out = SecretVec(Zeroizing::new(Vec::new()));
        // Writing to a Vec cannot fail, and the DB's plaintexts are its context's.
        let _ = self.write_to(&mut out, form);
        out.0
    }

    /// Writes the serialized DB in `form` (see the module doc) to `w`, streamed: at most one
    /// polynomial's bytes are buffered. It holds the OPRF key.
    ///
    /// # Errors
    /// Those of `w`.
    pub fn write_to(&self, w: &mut dyn Write, form: DbForm) -> std::io::Result<()> {
        let coder = match form {
            DbForm::Ntt => None,
            DbForm::Packed => {
                Some(Coder::new(&self.ctx).map_err(|e| std::io::Error::other(e.to_string()))?)
            }
        };
        let mut out = HashWriter {
            w,
            hash: Sha256::new(),
            buf: Vec::new(),
        };
        out.put(MAGIC)?;
        out.put(&VERSION.to_le_bytes())?;
        out.put(&[form.code()])?;
        let pb = self.params.to_bytes();
        out.put(&(pb.len() as u32).to_le_bytes())?;
        out.put(&pb)?;
        out.put(&(self.label_len as u32).to_le_bytes())?;
        out.put(&[self.nonce_len as u8])?;
        out.put(self.seed.as_ref())?;
        out.put(&(self.items as u64).to_le_bytes())?;
        out.put(&(self.bundles.len() as u32).to_le_bytes())?;
        let low = self.params.query.ps_low_degree;
        let mut packed = Vec::new();
        for idx in &self.bundles {
            out.put(&(idx.len() as u32).to_le_bytes())?;
            for b in idx {
                out.put(&(b.degree as u32).to_le_bytes())?;
                for c in std::iter::once(&b.matching).chain(&b.labels) {
                    match &coder {
                        None => {
                            for pt in &c.ntt {
                                out.words(pt.residues())?;
                            }
                            for (d, p) in c.plain.iter().enumerate() {
                                match p {
                                    Some(p) if keep_plain(low, d) => out.words(p.coeffs())?,
                                    _ => {}
                                }
                            }
                        }
                        Some(coder) => {
                            let len = coder.packed_len();
                            packed.clear();
                            packed.resize(len * c.ntt.len(), 0u8);
                            packed
                                .par_chunks_mut(len)
                                .zip(c.ntt.par_iter())
                                .enumerate()
                                .try_for_each(|(d, (dst, ntt))| {
                                    let plain = c.plain.get(d).and_then(Option::as_ref);
                                    coder.pack(ntt, plain, dst)
                                })
                                .ok_or_else(|| {
                                    std::io::Error::other(
                                        "a plaintext of the DB is not one of its parameters",
                                    )
                                })?;
                            out.put(&packed)?;
                        }
                    }
                }
            }
        }
        let sum = out.hash.finalize();
        out.w.write_all(&sum)
    }

    /// Loads a DB written by [`SenderDb::to_bytes`] (hostile input: see the module doc).
    ///
    /// # Errors
    /// [`ApsiError::Db`] naming what is wrong.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = bytes;
        Self::read_from(&mut r, bytes.len() as u64)
    }

    /// Loads a DB of `len` bytes written by [`SenderDb::write_to`] from `r`, streamed, in
    /// either form (hostile input: see the module doc). Uses rayon's threads for the packed
    /// form's NTTs.
    ///
    /// # Errors
    /// [`ApsiError::Db`] naming what is wrong, including a failed read.
    pub fn read_from(r: &mut dyn Read, len: u64) -> Result<Self> {
        if len < (MAGIC.len() + 2 + 32) as u64 {
            return Err(db("not a blindjoin APSI sender DB (too short)"));
        }
        let mut r = HashReader {
            r,
            left: len - 32,
            hash: Sha256::new(),
            buf: Vec::new(),
        };
        if r.take(8)? != MAGIC {
            return Err(db("not a blindjoin APSI sender DB (magic bytes)"));
        }
        let form = match r.u16()? {
            VERSION => {
                let c = r.u8()?;
                DbForm::from_code(c).ok_or_else(|| {
                    db(format!(
                        "plaintext form {c}; this build reads 0 (ntt) and 1 (packed): re-run \
                         setup with this build"
                    ))
                })?
            }
            VERSION_NTT_ONLY => DbForm::Ntt,
            version => {
                return Err(db(format!(
                    "format version {version}; this build reads versions {VERSION_NTT_ONLY} \
                     and {VERSION}: re-run setup (source_file with save_db_only) to make the \
                     DB again"
                )));
            }
        };
        let plen = r.u32()? as usize;
        let (params, used) = ApsiParams::from_bytes(r.take(plen)?)
            .map_err(|e| db(format!("its parameters: {e}")))?;
        if used != plen {
            return Err(db("trailing bytes after the parameters"));
        }
        let label_len = r.u32()? as usize;
        let nonce_len = r.u8()? as usize;
        check_sizes(label_len, nonce_len).map_err(|e| db(e.to_string()))?;
        let mut seed = Zeroizing::new([0u8; 32]);
        seed.copy_from_slice(r.take(32)?);
        let items = r.u64()?;
        let nidx = r.u32()? as usize;
        if nidx != params.bundle_idx_count() {
            return Err(db(format!(
                "{nidx} bundle indices; the parameters give {}",
                params.bundle_idx_count()
            )));
        }
        let items = usize::try_from(items).map_err(|_| db(format!("{items} items")))?;
        let ctx = params.context()?;
        let parts = if label_len == 0 {
            0
        } else {
            item::label_parts(
                label_len,
                nonce_len,
                params.bits_per_felt(),
                params.felts_per_item,
            )
        };
        if parts > crate::wire::MAX_LABEL_PARTS {
            return Err(db(format!("labels of {parts} parts")));
        }
        let coder = match form {
            DbForm::Ntt => None,
            DbForm::Packed => Some(Coder::new(&ctx)?),
        };
        let mut bundles = Vec::with_capacity(nidx);
        let (n, level) = (ctx.degree(), ctx.top_level());
        let max = params.table.max_items_per_bin;
        let low = params.query.ps_low_degree;
        let t = params.plain_modulus();
        // Bytes of one plaintext and of the smallest bundle (degree 1), which bounds a claimed
        // bundle count.
        let pt_bytes = coder.as_ref().map_or(8 * n * level, Coder::packed_len);
        let min_bundle = 4 + (2 + parts * label_coeff_count(1)) * pt_bytes;
        for b in 0..nidx {
            let nb = r.u32()? as usize;
            if nb as u64 > r.left / min_bundle as u64 {
                return Err(db(format!("bundle index {b} claims {nb} bundles")));
            }
            let mut list = Vec::with_capacity(nb);
            for _ in 0..nb {
                let degree = r.u32()? as usize;
                if degree == 0 || degree > max {
                    return Err(db(format!(
                        "a bundle of index {b} has degree {degree}; max_items_per_bin is {max}"
                    )));
                }
                let bad_pt = |e: ApsiError| db(format!("a plaintext of bundle index {b}: {e}"));
                let not_below_t =
                    || db(format!("a coefficient of bundle index {b} is not below t"));
                let mut coeffs = |count: usize| -> Result<Coeffs> {
                    if let Some(coder) = &coder {
                        let pb = coder.packed_len();
                        let v = r.take_with(count.saturating_mul(pb), |bytes| {
                            bytes
                                .par_chunks_exact(pb)
                                .enumerate()
                                .map(|(d, chunk)| {
                                    coder
                                        .unpack(chunk, keep_plain(low, d))
                                        .map_err(|e| match e {
                                            None => not_below_t(),
                                            Some(e) => bad_pt(e),
                                        })
                                })
                                .collect::<Result<Vec<_>>>()
                        })??;
                        let (ntt, plain) = v.into_iter().unzip();
                        return Ok(Coeffs { ntt, plain });
                    }
                    let ntt = (0..count)
                        .map(|_| {
                            let words = r.words(n * level)?;
                            NttPlaintext::from_residues(&ctx, level, words)
                                .map_err(|e| bad_pt(e.into()))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let plain = (0..count)
                        .map(|d| {
                            if !keep_plain(low, d) {
                                return Ok(None);
                            }
                            let words = r.words(n)?;
                            if words.iter().any(|&c| c >= t) {
                                return Err(not_below_t());
                            }
                            Plaintext::from_coeffs(&ctx, &words)
                                .map(Some)
                                .map_err(|e| bad_pt(e.into()))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    Ok(Coeffs { ntt, plain })
                };
                let matching = coeffs(degree + 1)?;
                let labels = (0..parts)
                    .map(|_| coeffs(label_coeff_count(degree)))
                    .collect::<Result<Vec<_>>>()?;
                list.push(Bundle {
                    degree,
                    matching,
                    labels,
                });
            }
            bundles.push(list);
        }
        if r.left != 0 {
            return Err(db("trailing bytes"));
        }
        let want = std::mem::take(&mut r.hash).finalize();
        let mut sum = [0u8; 32];
        r.r.read_exact(&mut sum)
            .map_err(|e| db(format!("cannot read its checksum: {e}")))?;
        if want.as_slice() != sum {
            return Err(db("checksum mismatch: the DB is damaged or truncated"));
        }
        let oprf = OprfScalar::from_seed(OPRF_CURVE, seed.as_ref())?;
        Ok(Self {
            params,
            ctx,
            seed,
            oprf,
            label_len,
            nonce_len,
            items,
            bundles,
        })
    }
}

/// A growing byte buffer that holds the OPRF key seed: each time it outgrows its allocation
/// the old one is zeroized before it is freed (a plain `Vec` would free copies of the seed).
struct SecretVec(Zeroizing<Vec<u8>>);

impl Write for SecretVec {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let need = self.0.len().saturating_add(buf.len());
        if need > self.0.capacity() {
            let mut bigger = Vec::with_capacity(need.max(2 * self.0.capacity()));
            bigger.extend_from_slice(&self.0);
            // The old allocation is zeroized when `Zeroizing` drops it.
            self.0 = Zeroizing::new(bigger);
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes and hashes; u64 words go out little-endian through a reused buffer.
struct HashWriter<'a> {
    w: &'a mut dyn Write,
    hash: Sha256,
    buf: Vec<u8>,
}

impl HashWriter<'_> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.hash.update(b);
        self.w.write_all(b)
    }
    fn words(&mut self, v: &[u64]) -> std::io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        let r = self.put(&buf);
        self.buf = buf;
        r
    }
}

impl Drop for HashReader<'_> {
    /// The buffer held the OPRF key seed at one point.
    fn drop(&mut self) {
        self.buf.zeroize();
    }
}

/// Reads and hashes at most `left` bytes (the body, without the checksum).
struct HashReader<'a> {
    r: &'a mut dyn Read,
    left: u64,
    hash: Sha256,
    buf: Vec<u8>,
}

impl HashReader<'_> {
    /// Reads the next `n` bytes into the buffer, unhashed; refused before reading (or
    /// allocating) past the body.
    fn fill(&mut self, n: usize) -> Result<()> {
        if n as u64 > self.left {
            return Err(db("truncated"));
        }
        if n > self.buf.capacity() {
            // Growing in place would free the old allocation, which may hold the seed,
            // unzeroized.
            self.buf.zeroize();
            self.buf = Vec::with_capacity(n);
        }
        self.buf.resize(n, 0);
        self.r
            .read_exact(&mut self.buf)
            .map_err(|e| db(format!("cannot read it: {e}")))?;
        self.left -= n as u64;
        Ok(())
    }

    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        self.fill(n)?;
        self.hash.update(&self.buf);
        Ok(&self.buf)
    }

    /// The next `n` bytes given to `f`, hashed meanwhile on another of rayon's threads.
    fn take_with<T: Send>(&mut self, n: usize, f: impl FnOnce(&[u8]) -> T + Send) -> Result<T> {
        self.fill(n)?;
        let (hash, buf) = (&mut self.hash, &self.buf);
        Ok(rayon::join(|| hash.update(buf), || f(buf)).1)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    /// `count` little-endian u64 words.
    fn words(&mut self, count: usize) -> Result<Vec<u64>> {
        let bytes = count.checked_mul(8).ok_or_else(|| db("truncated"))?;
        let s = self.take(bytes)?;
        Ok(s.chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect())
    }
}
