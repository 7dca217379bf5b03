//! Batching (Smart–Vercauteren SIMD packing, as SEAL's `BatchEncoder`): t ≡ 1 (mod 2N) makes
//! Z_t\[X\]/(X^N+1) ≅ Z_t^N by evaluation at the N primitive 2N-th roots of unity mod t, which is
//! exactly the negacyclic NTT mod t. Encoding is the inverse NTT of the slot vector, decoding
//! the forward NTT, so ring products are slot-wise products. Slots are in the NTT's
//! (bit-reversed) order, not SEAL's: rotations, which need SEAL's order, are not used by APSI.
//!
//! An [`NttPlaintext`] is a plaintext lifted to the ciphertext primes of one level (centered,
//! coefficients in (−t/2, t/2], which halves the noise growth against [0, t)) and put in NTT form
//! once, so every ct×pt after that is a dyadic product: APSI keeps its bin-bundle polynomials
//! this way.

use crate::context::Context;
use crate::error::{HeError, Result};
use crate::poly::RnsPoly;

/// A plaintext polynomial: N coefficients mod t.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plaintext {
    pub(crate) coeffs: Vec<u64>,
}

impl Plaintext {
    /// From coefficients (each < t, at most N of them; missing ones are zero).
    ///
    /// # Errors
    /// [`HeError::Mismatch`] if a coefficient is ≥ t or there are more than N.
    pub fn from_coeffs(ctx: &Context, coeffs: &[u64]) -> Result<Self> {
        if coeffs.len() > ctx.n {
            return Err(HeError::Mismatch("more than N coefficients"));
        }
        if coeffs.iter().any(|&c| c >= ctx.t.value()) {
            return Err(HeError::Mismatch("coefficient not below t"));
        }
        let mut c = coeffs.to_vec();
        c.resize(ctx.n, 0);
        Ok(Self { coeffs: c })
    }

    /// The coefficients.
    pub fn coeffs(&self) -> &[u64] {
        &self.coeffs
    }
}

/// A plaintext in NTT form over the primes of one data level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NttPlaintext {
    pub(crate) level: usize,
    pub(crate) poly: RnsPoly,
}

impl NttPlaintext {
    /// The data level it was lifted to.
    pub fn level(&self) -> usize {
        self.level
    }

    /// The residues in NTT form, row after row (row i modulo the i-th prime of its level):
    /// what a store of precomputed plaintexts saves, so that loading is a copy.
    pub fn residues(&self) -> &[u64] {
        self.poly.data()
    }

    /// The plaintext whose [`NttPlaintext::residues`] are `residues`, at `level` of `ctx`.
    ///
    /// # Errors
    /// [`HeError::Mismatch`] if the level does not exist, the count is not N per prime of the
    /// level, or a residue is not below its prime (hostile input: nothing else is assumed).
    pub fn from_residues(ctx: &Context, level: usize, residues: Vec<u64>) -> Result<Self> {
        ctx.level_data(level)?;
        let n = ctx.n;
        if residues.len() != n * level {
            return Err(HeError::Mismatch("plaintext residues of other parameters"));
        }
        for (row, m) in residues.chunks_exact(n).zip(ctx.level_moduli(level)) {
            let q = m.value();
            if row.iter().any(|&x| x >= q) {
                return Err(HeError::Mismatch("plaintext residue not below its prime"));
            }
        }
        Ok(Self {
            level,
            poly: RnsPoly::from_data(n, residues),
        })
    }
}

/// Slot encoding and decoding.
pub struct BatchEncoder<'a> {
    ctx: &'a Context,
}

impl<'a> BatchEncoder<'a> {
    /// An encoder for `ctx`.
    pub fn new(ctx: &'a Context) -> Self {
        Self { ctx }
    }

    /// Number of slots (N).
    pub fn slot_count(&self) -> usize {
        self.ctx.n
    }

    /// Encodes up to N slot values, each < t (missing slots are zero).
    ///
    /// # Errors
    /// [`HeError::Mismatch`] if a value is ≥ t or there are more than N.
    pub fn encode(&self, slots: &[u64]) -> Result<Plaintext> {
        let mut pt = Plaintext::from_coeffs(self.ctx, slots)?;
        self.ctx.t_ntt.inverse(&mut pt.coeffs);
        Ok(pt)
    }

    /// The N slot values of `pt`.
    pub fn decode(&self, pt: &Plaintext) -> Vec<u64> {
        let mut v = pt.coeffs.clone();
        self.ctx.t_ntt.forward(&mut v);
        v
    }

    /// Lifts `pt` to data level `level` and transforms it to NTT form.
    ///
    /// # Errors
    /// [`HeError::Mismatch`] if the level does not exist.
    pub fn to_ntt(&self, pt: &Plaintext, level: usize) -> Result<NttPlaintext> {
        self.ctx.level_data(level)?;
        let centered: Vec<i64> = pt.coeffs.iter().map(|&c| self.ctx.t.center(c)).collect();
        let mut poly = RnsPoly::from_signed(&centered, self.ctx.level_moduli(level));
        poly.ntt(self.ctx.level_tables(level));
        Ok(NttPlaintext { level, poly })
    }
}
