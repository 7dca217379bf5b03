//! APSI's parameters (`PSIParams`): the hash table, the item encoding, the query powers and the
//! BFV parameters, with every rule Microsoft APSI's `PSIParams::initialize` checks, and
//! [`ApsiParams::from_json`] for APSI's (and SecretFlow's) parameter files.
//!
//! Derived quantities (each has a test that computes it):
//! * **bits per field element** b = ⌊log2 t⌋ (`bit_count(t) − 1`): any b-bit value is below
//!   t, so a chunk of the item maps to a slot value without reduction.
//! * **item bits** = felts_per_item · b, required in 80..=128 (APSI's `item_bit_count_min` /
//!   `_max`). The receiver learns a match when all felts of its item equal those of a sender
//!   item in the same bin; the OPRF outputs are pseudorandom, so a false match with one of the
//!   ≤ hash_func_count·|Y| sender entries needs an 80-bit collision: with |X| ≤ 2^16 queries
//!   and |Y| ≤ 2^28 items the expected count is below 2^(16+28+2−80) = 2^−34. 128 is the width of
//!   the OPRF output we take the item from.
//! * **bins per bundle** = ⌊N / felts_per_item⌋: an item takes felts_per_item consecutive slots
//!   of one plaintext. table_size must be a multiple of it, so that the table is exactly
//!   `bundle_idx_count` = table_size / bins_per_bundle plaintexts wide.
//! * **query powers**: the receiver sends y^p for each p in query_powers; the sender must
//!   reach every power the evaluation needs (1..=max_items_per_bin, or with
//!   Paterson–Stockmeyer of low degree L the powers 1..=L and the multiples of L+1) as sums of
//!   two powers it has, which [`crate::powers::PowersDag`] checks. APSI's rules: 1 is in, 0 is
//!   not, no power above max_items_per_bin, and with L > 0 every power above L is a multiple
//!   of L+1.
//! * **HE**: N, t and the coefficient primes go through [`blindjoin_he::Parameters::new`]
//!   (batching t, the HE standard's 128-bit bound); a multiplicative depth ≥ 1 needs a
//!   special prime (two or more coeff_modulus primes).

use crate::error::{ApsiError, Result};
use blindjoin_he::{Context, Parameters, PlainModulus};

/// APSI's `hash_func_count` bounds (Kuku's cuckoo hashing supports 1..=8 functions).
pub const HASH_FUNC_COUNT_RANGE: std::ops::RangeInclusive<usize> = 1..=8;
/// APSI's `felts_per_item` bounds.
pub const FELTS_PER_ITEM_RANGE: std::ops::RangeInclusive<usize> = 2..=32;
/// APSI's `item_bit_count_min ..= item_bit_count_max`.
pub const ITEM_BITS_RANGE: std::ops::RangeInclusive<u32> = 80..=128;
/// Largest table and bin size we accept (bounds what a peer's parameters can make us allocate).
pub const MAX_TABLE_SIZE: usize = 1 << 24;
/// See [`MAX_TABLE_SIZE`].
pub const MAX_ITEMS_PER_BIN: usize = 1 << 14;

/// `table_params`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableParams {
    /// Cuckoo hash functions; the sender inserts each item at every one of its locations.
    pub hash_func_count: usize,
    /// Bins of the table.
    pub table_size: usize,
    /// Items a sender bin holds per bundle (the degree of the matching polynomial).
    pub max_items_per_bin: usize,
}

/// `query_params`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryParams {
    /// Paterson–Stockmeyer low degree L (0: plain evaluation).
    pub ps_low_degree: usize,
    /// The powers of the query the receiver encrypts, sorted, unique.
    pub query_powers: Vec<usize>,
}

/// `seal_params`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealParams {
    /// N.
    pub poly_modulus_degree: usize,
    /// t, or its bit size.
    pub plain_modulus: PlainModulus,
    /// Bit sizes of the coefficient primes (the last is the special prime when there are ≥ 2).
    pub coeff_modulus_bits: Vec<u32>,
}

/// Checked APSI parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApsiParams {
    /// `table_params`.
    pub table: TableParams,
    /// `item_params.felts_per_item`.
    pub felts_per_item: usize,
    /// `query_params`.
    pub query: QueryParams,
    /// `seal_params`.
    pub seal: SealParams,
    he: Parameters,
}

fn bad(field: &'static str, reason: impl Into<String>) -> ApsiError {
    ApsiError::Params {
        field,
        reason: reason.into(),
    }
}

impl ApsiParams {
    /// Checks every rule (see the module doc) and builds the parameters.
    ///
    /// # Errors
    /// [`ApsiError::Params`] naming the field that breaks a rule.
    pub fn new(
        table: TableParams,
        felts_per_item: usize,
        mut query: QueryParams,
        seal: SealParams,
    ) -> Result<Self> {
        if table.table_size == 0 || table.table_size > MAX_TABLE_SIZE {
            return Err(bad(
                "table_params.table_size",
                format!("{} is not in 1..={MAX_TABLE_SIZE}", table.table_size),
            ));
        }
        if table.max_items_per_bin == 0 || table.max_items_per_bin > MAX_ITEMS_PER_BIN {
            return Err(bad(
                "table_params.max_items_per_bin",
                format!(
                    "{} is not in 1..={MAX_ITEMS_PER_BIN}",
                    table.max_items_per_bin
                ),
            ));
        }
        if !HASH_FUNC_COUNT_RANGE.contains(&table.hash_func_count) {
            return Err(bad(
                "table_params.hash_func_count",
                format!("{} is not in 1..=8", table.hash_func_count),
            ));
        }
        if !FELTS_PER_ITEM_RANGE.contains(&felts_per_item) {
            return Err(bad(
                "item_params.felts_per_item",
                format!("{felts_per_item} is not in 2..=32"),
            ));
        }
        if query.ps_low_degree > table.max_items_per_bin {
            return Err(bad(
                "query_params.ps_low_degree",
                format!(
                    "{} is larger than max_items_per_bin {}",
                    query.ps_low_degree, table.max_items_per_bin
                ),
            ));
        }
        query.query_powers.sort_unstable();
        query.query_powers.dedup();
        if query.query_powers.first() == Some(&0) || !query.query_powers.contains(&1) {
            return Err(bad(
                "query_params.query_powers",
                "must contain 1 and cannot contain 0",
            ));
        }
        if let Some(&p) = query
            .query_powers
            .iter()
            .find(|&&p| p > table.max_items_per_bin)
        {
            return Err(bad(
                "query_params.query_powers",
                format!(
                    "{p} is larger than max_items_per_bin {}",
                    table.max_items_per_bin
                ),
            ));
        }
        let high = query.ps_low_degree + 1;
        if let Some(&p) = query
            .query_powers
            .iter()
            .find(|&&p| p > query.ps_low_degree && p % high != 0)
        {
            return Err(bad(
                "query_params.query_powers",
                format!(
                    "{p} is above ps_low_degree {} and not a multiple of ps_low_degree + 1",
                    query.ps_low_degree
                ),
            ));
        }
        let he = Parameters::new(
            seal.poly_modulus_degree,
            seal.plain_modulus,
            &seal.coeff_modulus_bits,
        )
        .map_err(|e| bad("seal_params", e.to_string()))?;
        let b = bits_per_felt(he.plain_modulus());
        let item_bits = b * felts_per_item as u32;
        if !ITEM_BITS_RANGE.contains(&item_bits) {
            return Err(bad(
                "item_params.felts_per_item",
                format!(
                    "{felts_per_item} field elements of {b} bits make {item_bits}-bit items; \
                     APSI requires 80..=128"
                ),
            ));
        }
        let per_bundle = seal.poly_modulus_degree / felts_per_item;
        if per_bundle == 0 || !table.table_size.is_multiple_of(per_bundle) {
            return Err(bad(
                "table_params.table_size",
                format!(
                    "{} is not a multiple of poly_modulus_degree / felts_per_item = {per_bundle}",
                    table.table_size
                ),
            ));
        }
        let out = Self {
            table,
            felts_per_item,
            query,
            seal,
            he,
        };
        let dag = crate::powers::PowersDag::new(&out)?;
        if out.needs_products(&dag) && out.seal.coeff_modulus_bits.len() < 2 {
            return Err(bad(
                "seal_params.coeff_modulus_bits",
                format!(
                    "one prime gives no relinearization, but the evaluation multiplies \
                     ciphertexts (power depth {}, ps_low_degree {}); list every power \
                     1..=max_items_per_bin with ps_low_degree 0, or add primes",
                    dag.depth(),
                    out.query.ps_low_degree
                ),
            ));
        }
        Ok(out)
    }

    /// Parses APSI's JSON parameter format (as in SecretFlow's `apsi_parameters/*.json`); as
    /// APSI does, 1 is added to query_powers.
    ///
    /// # Errors
    /// [`ApsiError::Params`] for a missing or malformed field or a broken rule.
    pub fn from_json(text: &str) -> Result<Self> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad("(the JSON text)", e.to_string()))?;
        let uint = |field: &'static str, x: Option<&serde_json::Value>| -> Result<u64> {
            x.and_then(serde_json::Value::as_u64)
                .ok_or_else(|| bad(field, "missing or not an unsigned integer"))
        };
        let size = |field: &'static str, x: Option<&serde_json::Value>| -> Result<usize> {
            let n = uint(field, x)?;
            if n > u64::from(u32::MAX) {
                return Err(bad(field, "larger than 2^32 − 1"));
            }
            Ok(n as usize)
        };
        let tp = v.get("table_params");
        let table = TableParams {
            hash_func_count: size(
                "table_params.hash_func_count",
                tp.and_then(|t| t.get("hash_func_count")),
            )?,
            table_size: size(
                "table_params.table_size",
                tp.and_then(|t| t.get("table_size")),
            )?,
            max_items_per_bin: size(
                "table_params.max_items_per_bin",
                tp.and_then(|t| t.get("max_items_per_bin")),
            )?,
        };
        let felts = size(
            "item_params.felts_per_item",
            v.get("item_params").and_then(|t| t.get("felts_per_item")),
        )?;
        let qp = v.get("query_params");
        let ps_low_degree = size(
            "query_params.ps_low_degree",
            qp.and_then(|t| t.get("ps_low_degree")),
        )?;
        let arr = qp
            .and_then(|t| t.get("query_powers"))
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad("query_params.query_powers", "missing or not an array"))?;
        if arr.len() > MAX_ITEMS_PER_BIN {
            return Err(bad("query_params.query_powers", "too many entries"));
        }
        let mut query_powers = vec![1];
        for p in arr {
            query_powers.push(size("query_params.query_powers", Some(p))?);
        }
        let sp = v.get("seal_params");
        let degree = size(
            "seal_params.poly_modulus_degree",
            sp.and_then(|t| t.get("poly_modulus_degree")),
        )?;
        let pm = sp.and_then(|t| t.get("plain_modulus"));
        let pmb = sp.and_then(|t| t.get("plain_modulus_bits"));
        let plain_modulus = match (pm, pmb) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "seal_params.plain_modulus",
                    "only one of plain_modulus and plain_modulus_bits may be given",
                ));
            }
            (Some(t), None) => PlainModulus::Value(uint("seal_params.plain_modulus", Some(t))?),
            (None, Some(b)) => {
                let b = uint("seal_params.plain_modulus_bits", Some(b))?;
                PlainModulus::Bits(
                    u32::try_from(b)
                        .map_err(|_| bad("seal_params.plain_modulus_bits", "too large"))?,
                )
            }
            (None, None) => {
                return Err(bad(
                    "seal_params.plain_modulus",
                    "neither plain_modulus nor plain_modulus_bits is given",
                ));
            }
        };
        let bits = sp
            .and_then(|t| t.get("coeff_modulus_bits"))
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad("seal_params.coeff_modulus_bits", "missing or not an array"))?;
        if bits.len() > 16 {
            return Err(bad("seal_params.coeff_modulus_bits", "more than 16 primes"));
        }
        let coeff_modulus_bits = bits
            .iter()
            .map(|b| {
                uint("seal_params.coeff_modulus_bits", Some(b)).and_then(|b| {
                    u32::try_from(b).map_err(|_| bad("seal_params.coeff_modulus_bits", "too large"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Self::new(
            table,
            felts,
            QueryParams {
                ps_low_degree,
                query_powers,
            },
            SealParams {
                poly_modulus_degree: degree,
                plain_modulus,
                coeff_modulus_bits,
            },
        )
    }

    /// Whether the sender multiplies ciphertexts: to compute powers, or in Paterson–Stockmeyer
    /// (a high power times an inner sum) when the degree reaches L + 1.
    pub fn needs_products(&self, dag: &crate::powers::PowersDag) -> bool {
        let l = self.query.ps_low_degree;
        dag.depth() > 0 || (l > 0 && self.table.max_items_per_bin > l)
    }

    /// The checked BFV parameters.
    pub fn he(&self) -> &Parameters {
        &self.he
    }

    /// A BFV context for these parameters.
    ///
    /// # Errors
    /// Only if the HE layer refuses parameters it accepted.
    pub fn context(&self) -> Result<Context> {
        Ok(Context::new(&self.he)?)
    }

    /// N.
    pub fn degree(&self) -> usize {
        self.seal.poly_modulus_degree
    }

    /// t.
    pub fn plain_modulus(&self) -> u64 {
        self.he.plain_modulus()
    }

    /// ⌊log2 t⌋: the bits an item or label chunk carries per slot.
    pub fn bits_per_felt(&self) -> u32 {
        bits_per_felt(self.he.plain_modulus())
    }

    /// felts_per_item · bits_per_felt.
    pub fn item_bits(&self) -> u32 {
        self.bits_per_felt() * self.felts_per_item as u32
    }

    /// ⌊N / felts_per_item⌋.
    pub fn bins_per_bundle(&self) -> usize {
        self.degree() / self.felts_per_item
    }

    /// table_size / bins_per_bundle.
    pub fn bundle_idx_count(&self) -> usize {
        self.table.table_size / self.bins_per_bundle()
    }

    /// A canonical byte encoding: both parties compare it, and a sender DB records it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let u32s = |out: &mut Vec<u8>, v: usize| out.extend_from_slice(&(v as u32).to_le_bytes());
        u32s(&mut out, self.table.hash_func_count);
        u32s(&mut out, self.table.table_size);
        u32s(&mut out, self.table.max_items_per_bin);
        u32s(&mut out, self.felts_per_item);
        u32s(&mut out, self.query.ps_low_degree);
        u32s(&mut out, self.query.query_powers.len());
        for &p in &self.query.query_powers {
            u32s(&mut out, p);
        }
        u32s(&mut out, self.seal.poly_modulus_degree);
        out.extend_from_slice(&self.he.plain_modulus().to_le_bytes());
        u32s(&mut out, self.he.coeff_modulus().len());
        for &q in self.he.coeff_modulus() {
            out.extend_from_slice(&q.to_le_bytes());
        }
        out
    }

    /// Inverse of [`ApsiParams::to_bytes`], for hostile input: bounded and checked by
    /// [`ApsiParams::new`]. Returns the parameters and the bytes used.
    ///
    /// # Errors
    /// [`ApsiError::Params`] on truncated or invalid bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<(Self, usize)> {
        let mut at = 0usize;
        let short = || bad("(encoded parameters)", "truncated");
        let u32_at = |at: &mut usize| -> Result<usize> {
            let b = bytes.get(*at..*at + 4).ok_or_else(short)?;
            *at += 4;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        let hash_func_count = u32_at(&mut at)?;
        let table_size = u32_at(&mut at)?;
        let max_items_per_bin = u32_at(&mut at)?;
        let felts = u32_at(&mut at)?;
        let ps_low_degree = u32_at(&mut at)?;
        let np = u32_at(&mut at)?;
        if np > MAX_ITEMS_PER_BIN {
            return Err(bad("query_params.query_powers", "too many entries"));
        }
        let mut query_powers = Vec::with_capacity(np);
        for _ in 0..np {
            query_powers.push(u32_at(&mut at)?);
        }
        let degree = u32_at(&mut at)?;
        let u64_at = |at: &mut usize| -> Result<u64> {
            let b = bytes.get(*at..*at + 8).ok_or_else(short)?;
            *at += 8;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Ok(u64::from_le_bytes(a))
        };
        let t = u64_at(&mut at)?;
        let nq = u32_at(&mut at)?;
        if nq == 0 || nq > 16 {
            return Err(bad("seal_params.coeff_modulus_bits", "not 1..=16 primes"));
        }
        let mut primes = Vec::with_capacity(nq);
        for _ in 0..nq {
            primes.push(u64_at(&mut at)?);
        }
        let coeff_modulus_bits = primes.iter().map(|&q| 64 - q.leading_zeros()).collect();
        let p = Self::new(
            TableParams {
                hash_func_count,
                table_size,
                max_items_per_bin,
            },
            felts,
            QueryParams {
                ps_low_degree,
                query_powers,
            },
            SealParams {
                poly_modulus_degree: degree,
                plain_modulus: PlainModulus::Value(t),
                coeff_modulus_bits,
            },
        )?;
        if p.he.coeff_modulus() != primes.as_slice() {
            return Err(bad(
                "seal_params.coeff_modulus_bits",
                "the primes are not the ones these bit sizes give",
            ));
        }
        Ok((p, at))
    }
}

/// ⌊log2 t⌋.
pub fn bits_per_felt(t: u64) -> u32 {
    63 - t.max(1).leading_zeros()
}
