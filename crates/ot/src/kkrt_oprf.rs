//! The KKRT16 batched oblivious PRF: Kolesnikov, Kumaresan, Rosulek, Trieu, "Efficient Batched
//! Oblivious PRF with Applications to Private Set Intersection" (CCS 2016), §3 (1-out-of-∞ OT
//! from IKNP with a pseudorandom code) and §4 (the BaRK-OPRF), semi-honest.
//!
//! # Protocol (`m` OPRF instances, code width `w = 512` bits)
//!
//! IKNP (CRYPTO 2003) with the repetition code replaced by a pseudorandom code `C`, so the
//! receiver's "choice" in instance `i` is an arbitrary 128-bit input `r_i` rather than a bit.
//! Roles reverse for the base OTs: the OPRF *sender* (key holder) is the base-OT *receiver*.
//!
//! ```text
//! Receiver R (inputs r_0..r_{m-1})                Sender S (s ∈ {0,1}^512 random)
//!   ---- "KKRT" | u64 m ------------------------>   checks m
//!   <--- code seed (16 bytes) --------------------   C(x) = AES_{K_0}(x) ‖ … ‖ AES_{K_3}(x)
//!   512 base OTs, R sends (k_j^0, k_j^1), S chooses s_j → S holds k_j^{s_j}
//!   for each chunk of rows, j < 512 (columns):
//!     t_j = G(k_j^0), d_j = t_j ⊕ G(k_j^1)         q_j = G(k_j^{s_j})
//!   transpose to rows T_i, D_i (512 bits each)        transpose to rows Q_i
//!   ---- u_i = D_i ⊕ C(r_i)  (64 bytes per row) --->   Q_i ← Q_i ⊕ (u_i ∧ s) = T_i ⊕ (C(r_i) ∧ s)
//!   output H(i, T_i)                                  F(i, y) = H(i, Q_i ⊕ (C(y) ∧ s))
//! ```
//!
//! so that `F(i, r_i) = H(i, T_i)`, while for `y ≠ r_i` the hash input differs from `T_i` by
//! `(C(y) ⊕ C(r_i)) ∧ s`, which hides at least κ = 128 unknown bits of `s` whenever the code
//! words are ≥ 128 apart — true except with negligible probability for a pseudorandom code of
//! width 512 (KKRT16 §4, Table 1 lists 424–448 bits as the minimum for 2^-40 at κ = 128; we use
//! 512 = 4 AES blocks as the paper's implementation and libOTe do, which keeps every row a whole
//! number of 128-bit words and needs no bit-level packing).
//!
//! `G` is AES-128-CTR under the base-OT key (the stream continues across chunks). The code keys
//! `K_g` are derived from a 16-byte seed the sender picks (semi-honest: either party may choose
//! it; the sender choosing protects the sender's outputs from a receiver who would pick a code
//! with short distances).
//!
//! # The output hash
//!
//! `H(i, v) = ⊕_{g<4} TCCR(4i + g, v_g)` over the four 128-bit words of `v`, with the tweakable
//! correlation-robust hash of Guo, Katz, Wang, Yu (IEEE S&P 2020) `TCCR(t, x) = π(π(x) ⊕ t) ⊕
//! π(x)`, `π` = AES-128 under a fixed public key (as in [`crate::iknp`], a different key).
//!
//! # Security model
//!
//! Semi-honest (as KKRT16 §4). Every peer message is length-checked before use; failures are
//! typed [`OtError`]s.

use crate::OtError;
use crate::base_ot::{base_ot_receive, base_ot_send};
use crate::iknp::Prg;
use crate::transpose::transpose128;
use aes::Aes128;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use blindjoin_crypto::{ItemDigest, random_bytes};
use blindjoin_link::{Link, Reader, put_u64};
use rayon::prelude::*;
use zeroize::Zeroize;

/// 128-bit words per code word / OT row.
pub const CODE_BLOCKS: usize = 4;

/// Code width `w` in bits, and the number of base OTs.
pub const CODE_BITS: usize = 128 * CODE_BLOCKS;

/// Rows per correction message: 2^13 rows × 64 bytes = 512 KiB.
pub const OPRF_CHUNK: usize = 1 << 13;

/// Most OPRF instances one run may have (instance indices are `u32` in the protocols).
pub const MAX_OPRF_INSTANCES: usize = u32::MAX as usize;

/// Rows processed per parallel task.
const TASK: usize = 1 << 11;

const HEADER_MAGIC: &[u8] = blindjoin_link::wire::ids::KKRT_OPRF;

/// Fixed public key of `π` in the output hash (a nothing-up-my-sleeve constant).
const HASH_KEY: [u8; 16] = *b"blindjoin-kkrt-H";

/// One OT row / code word: 512 bits, word `g` holding bits `128g .. 128g + 127`.
type Row = [u128; CODE_BLOCKS];

/// The pseudorandom code `C(x) = AES_{K_0}(x) ‖ AES_{K_1}(x) ‖ AES_{K_2}(x) ‖ AES_{K_3}(x)`.
struct Code {
    keys: [Aes128; CODE_BLOCKS],
}

impl Code {
    /// `K_g = AES_seed(g)`.
    fn new(seed: &[u8; 16]) -> Self {
        let expand = Aes128::new(&(*seed).into());
        let mut k = [[0u8; 16]; CODE_BLOCKS];
        for (g, key) in k.iter_mut().enumerate() {
            key[0] = g as u8;
            key[15] = 0xC0;
        }
        expand.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut k));
        let keys = k.map(|key| Aes128::new(&key.into()));
        Code { keys }
    }

    /// `rows[i] = C(xs[i])`.
    fn encode(&self, xs: &[ItemDigest], rows: &mut [Row]) {
        let mut blocks: Vec<[u8; 16]> = xs.to_vec();
        for (g, key) in self.keys.iter().enumerate() {
            blocks.copy_from_slice(xs);
            key.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut blocks));
            for (r, b) in rows.iter_mut().zip(&blocks) {
                r[g] = u128::from_le_bytes(*b);
            }
        }
        blocks.zeroize();
    }
}

/// `out[k] = H(index[k], rows[k])` (module doc).
fn hash_rows(pi: &Aes128, index: &[u64], rows: &[Row], out: &mut [u128]) {
    let mut a: Vec<[u8; 16]> = rows.iter().flatten().map(|w| w.to_le_bytes()).collect();
    pi.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut a));
    let mut b: Vec<[u8; 16]> = a
        .iter()
        .enumerate()
        .map(|(k, x)| {
            let t = u128::from(index[k / CODE_BLOCKS]) * CODE_BLOCKS as u128
                + (k % CODE_BLOCKS) as u128;
            (u128::from_le_bytes(*x) ^ t).to_le_bytes()
        })
        .collect();
    pi.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut b));
    for (k, o) in out.iter_mut().enumerate() {
        let mut h = 0u128;
        for g in 0..CODE_BLOCKS {
            let j = k * CODE_BLOCKS + g;
            h ^= u128::from_le_bytes(a[j]) ^ u128::from_le_bytes(b[j]);
        }
        *o = h;
    }
    a.zeroize();
    b.zeroize();
}

/// Chunks of rows: `(first row, rows in this chunk, rows padded to a multiple of 128)`.
fn chunks(m: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..m.div_ceil(OPRF_CHUNK)).map(move |c| {
        let start = c * OPRF_CHUNK;
        let rows = (m - start).min(OPRF_CHUNK);
        (start, rows, rows.div_ceil(128) * 128)
    })
}

/// Transposes 512 columns of `padded` bits (`cols` holds column `j` at bytes
/// `[j·padded/8, (j+1)·padded/8)`) into `padded` rows of 512 bits: bit `j` of row `i` = bit `i`
/// of column `j`. Callers guarantee `cols.len() == CODE_BITS * padded / 8` and
/// `out.len() == padded` (private helper).
fn transpose_wide(cols: &[u8], padded: usize, out: &mut [Row]) {
    let row_len = padded / 8;
    out.par_chunks_mut(128).enumerate().for_each(|(blk, dst)| {
        let mut m = [0u128; 128];
        for g in 0..CODE_BLOCKS {
            for (j, word) in m.iter_mut().enumerate() {
                let start = (g * 128 + j) * row_len + blk * 16;
                let mut b = [0u8; 16];
                b.copy_from_slice(&cols[start..start + 16]);
                *word = u128::from_le_bytes(b);
            }
            transpose128(&mut m);
            for (r, w) in dst.iter_mut().zip(&m) {
                r[g] = *w;
            }
        }
        m.zeroize();
    });
}

fn check_m(m: usize) -> Result<(), OtError> {
    if m > MAX_OPRF_INSTANCES {
        return Err(OtError::Usage(format!(
            "{m} OPRF instances requested; at most {MAX_OPRF_INSTANCES}"
        )));
    }
    Ok(())
}

/// The sender's side of `m` OPRF instances: it can evaluate `F(i, y)` for any instance `i` and
/// any input `y`. Secrets are zeroized on drop.
pub struct OprfSender {
    s: Row,
    q: Vec<Row>,
    code: Code,
    pi: Aes128,
}

impl OprfSender {
    /// Number of instances.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// True when there are no instances.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// `out[k] = F(instances[k], inputs[k])`, in parallel.
    ///
    /// # Errors
    /// [`OtError::Usage`] if the three slices differ in length or an instance is out of range
    /// (a bug in the caller).
    pub fn eval(
        &self,
        instances: &[u32],
        inputs: &[ItemDigest],
        out: &mut [u128],
    ) -> Result<(), OtError> {
        if instances.len() != inputs.len() || out.len() != inputs.len() {
            return Err(OtError::Usage(format!(
                "OPRF eval: {} instances, {} inputs, {} outputs",
                instances.len(),
                inputs.len(),
                out.len()
            )));
        }
        if let Some(&bad) = instances.iter().find(|&&i| i as usize >= self.q.len()) {
            return Err(OtError::Usage(format!(
                "OPRF instance {bad} out of range (there are {})",
                self.q.len()
            )));
        }
        out.par_chunks_mut(TASK)
            .zip(instances.par_chunks(TASK))
            .zip(inputs.par_chunks(TASK))
            .for_each(|((o, idx), xs)| {
                let mut rows = vec![[0u128; CODE_BLOCKS]; xs.len()];
                self.code.encode(xs, &mut rows);
                for (r, &i) in rows.iter_mut().zip(idx) {
                    let q = &self.q[i as usize];
                    for g in 0..CODE_BLOCKS {
                        r[g] = q[g] ^ (r[g] & self.s[g]);
                    }
                }
                let index: Vec<u64> = idx.iter().map(|&i| u64::from(i)).collect();
                hash_rows(&self.pi, &index, &rows, o);
                rows.zeroize();
            });
        Ok(())
    }
}

impl Drop for OprfSender {
    fn drop(&mut self) {
        self.s.zeroize();
        self.q.zeroize();
    }
}

/// Runs `m` OPRF instances as the KKRT *sender* (key holder).
///
/// # Errors
/// Link failure; the receiver announced a different `m` or another protocol
/// ([`OtError::PeerMisbehaved`]); a malformed message ([`OtError::InvalidMessage`]); base-OT
/// failure; `m > MAX_OPRF_INSTANCES`.
pub fn kkrt_oprf_send(link: &mut dyn Link, m: usize) -> Result<OprfSender, OtError> {
    check_m(m)?;
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "KKRT header");
    if r.take(4)? != HEADER_MAGIC {
        return Err(OtError::PeerMisbehaved(
            "KKRT header has the wrong magic; the peer runs a different protocol".into(),
        ));
    }
    let peer_m = r.u64()?;
    r.finish()?;
    if peer_m != m as u64 {
        return Err(OtError::PeerMisbehaved(format!(
            "KKRT: this party expects {m} OPRF instances but the receiver asked for {peer_m}"
        )));
    }

    let mut seed = [0u8; 16];
    random_bytes(&mut seed)?;
    link.send(&seed)?;
    let code = Code::new(&seed);

    let mut sb = [0u8; CODE_BITS / 8];
    random_bytes(&mut sb)?;
    let mut s = [0u128; CODE_BLOCKS];
    for (g, w) in s.iter_mut().enumerate() {
        let mut b = [0u8; 16];
        b.copy_from_slice(&sb[16 * g..16 * g + 16]);
        *w = u128::from_le_bytes(b);
        b.zeroize();
    }
    sb.zeroize();
    let bits: Vec<bool> = (0..CODE_BITS)
        .map(|j| (s[j / 128] >> (j % 128)) & 1 == 1)
        .collect();
    let mut keys = base_ot_receive(link, &bits)?;
    let mut prgs: Vec<Prg> = keys.iter().map(Prg::new).collect();
    keys.zeroize();

    let mut out = OprfSender {
        s,
        q: Vec::with_capacity(m),
        code,
        pi: Aes128::new(&HASH_KEY.into()),
    };
    let mut cols = Vec::new();
    let mut rows = Vec::new();
    for (_, c, padded) in chunks(m) {
        let row_len = padded / 8;
        cols.resize(CODE_BITS * row_len, 0u8);
        cols.par_chunks_mut(row_len)
            .zip(prgs.par_iter_mut())
            .for_each(|(q_j, prg)| prg.fill(q_j));
        rows.resize(padded, [0u128; CODE_BLOCKS]);
        transpose_wide(&cols, padded, &mut rows);

        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "KKRT correction rows");
        let u = r.take(c * CODE_BITS / 8)?;
        r.finish()?;
        rows[..c]
            .par_chunks_mut(TASK)
            .zip(u.par_chunks(TASK * CODE_BITS / 8))
            .for_each(|(dst, u)| {
                for (row, u) in dst.iter_mut().zip(u.chunks_exact(CODE_BITS / 8)) {
                    for g in 0..CODE_BLOCKS {
                        let mut b = [0u8; 16];
                        b.copy_from_slice(&u[16 * g..16 * g + 16]);
                        row[g] ^= u128::from_le_bytes(b) & s[g];
                    }
                }
            });
        out.q.extend_from_slice(&rows[..c]);
    }
    cols.zeroize();
    rows.zeroize();
    Ok(out)
}

/// Runs one OPRF instance per input as the KKRT *receiver*: returns `F(i, inputs[i])` for
/// every `i`, learning nothing about `F` elsewhere.
///
/// # Errors
/// Link failure; a malformed code-seed message; base-OT failure; more than
/// [`MAX_OPRF_INSTANCES`] inputs.
pub fn kkrt_oprf_receive(link: &mut dyn Link, inputs: &[ItemDigest]) -> Result<Vec<u128>, OtError> {
    let m = inputs.len();
    check_m(m)?;
    let mut h = HEADER_MAGIC.to_vec();
    put_u64(&mut h, m as u64);
    link.send(&h)?;

    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "KKRT code seed");
    let mut seed = [0u8; 16];
    seed.copy_from_slice(r.take(16)?);
    r.finish()?;
    let code = Code::new(&seed);
    let pi = Aes128::new(&HASH_KEY.into());

    let mut keys = base_ot_send(link, CODE_BITS)?;
    let mut prgs: Vec<[Prg; 2]> = keys
        .iter()
        .map(|[k0, k1]| [Prg::new(k0), Prg::new(k1)])
        .collect();
    keys.zeroize();

    let mut out = vec![0u128; m];
    let (mut t_cols, mut d_cols) = (Vec::new(), Vec::new());
    let (mut t_rows, mut d_rows) = (Vec::new(), Vec::new());
    for (start, c, padded) in chunks(m) {
        let row_len = padded / 8;
        t_cols.resize(CODE_BITS * row_len, 0u8);
        d_cols.resize(CODE_BITS * row_len, 0u8);
        t_cols
            .par_chunks_mut(row_len)
            .zip(d_cols.par_chunks_mut(row_len))
            .zip(prgs.par_iter_mut())
            .for_each(|((t_j, d_j), [g0, g1])| {
                g0.fill(t_j);
                g1.fill(d_j);
                for (d, t) in d_j.iter_mut().zip(t_j.iter()) {
                    *d ^= t;
                }
            });
        t_rows.resize(padded, [0u128; CODE_BLOCKS]);
        d_rows.resize(padded, [0u128; CODE_BLOCKS]);
        transpose_wide(&t_cols, padded, &mut t_rows);
        transpose_wide(&d_cols, padded, &mut d_rows);

        let xs = &inputs[start..start + c];
        let mut msg = vec![0u8; c * CODE_BITS / 8];
        msg.par_chunks_mut(TASK * CODE_BITS / 8)
            .zip(d_rows[..c].par_chunks(TASK))
            .zip(xs.par_chunks(TASK))
            .zip(t_rows[..c].par_chunks(TASK))
            .zip(out[start..start + c].par_chunks_mut(TASK))
            .enumerate()
            .for_each(|(task, ((((u, d), x), t), o))| {
                let mut code_rows = vec![[0u128; CODE_BLOCKS]; x.len()];
                code.encode(x, &mut code_rows);
                for ((u, d), cw) in u.chunks_exact_mut(CODE_BITS / 8).zip(d).zip(&code_rows) {
                    for g in 0..CODE_BLOCKS {
                        u[16 * g..16 * g + 16].copy_from_slice(&(d[g] ^ cw[g]).to_le_bytes());
                    }
                }
                code_rows.zeroize();
                let first = (start + task * TASK) as u64;
                let index: Vec<u64> = (first..first + t.len() as u64).collect();
                hash_rows(&pi, &index, t, o);
            });
        link.send(&msg)?;
    }
    t_cols.zeroize();
    d_cols.zeroize();
    t_rows.zeroize();
    d_rows.zeroize();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use blindjoin_crypto::item_digest;
    use blindjoin_link::mem_pair;

    fn run(inputs: Vec<ItemDigest>) -> (OprfSender, Vec<u128>) {
        let (mut a, mut b) = mem_pair();
        let m = inputs.len();
        let t = std::thread::spawn(move || kkrt_oprf_send(&mut a, m).unwrap());
        let outs = kkrt_oprf_receive(&mut b, &inputs).unwrap();
        (t.join().unwrap(), outs)
    }

    #[test]
    fn outputs_match_for_chosen_inputs_and_differ_otherwise() {
        for m in [0usize, 1, 127, 128, 129, OPRF_CHUNK + 300] {
            let xs: Vec<ItemDigest> = (0..m)
                .map(|i| item_digest(format!("x{i}").as_bytes()))
                .collect();
            let (s, r) = run(xs.clone());
            assert_eq!(s.len(), m);
            assert_eq!(r.len(), m);
            let idx: Vec<u32> = (0..m as u32).collect();
            let mut same = vec![0u128; m];
            s.eval(&idx, &xs, &mut same).unwrap();
            assert_eq!(same, r, "m={m}");
            // Another input in the same instance, or the same input in another instance.
            let ys: Vec<ItemDigest> = (0..m)
                .map(|i| item_digest(format!("y{i}").as_bytes()))
                .collect();
            let mut other = vec![0u128; m];
            s.eval(&idx, &ys, &mut other).unwrap();
            assert!(other.iter().zip(&r).all(|(a, b)| a != b));
            if m > 1 {
                let shifted: Vec<u32> = (0..m as u32).map(|i| (i + 1) % m as u32).collect();
                s.eval(&shifted, &xs, &mut other).unwrap();
                assert!(other.iter().zip(&r).all(|(a, b)| a != b));
            }
            let mut all = r.clone();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), m, "outputs are distinct");
        }
    }

    #[test]
    fn bad_eval_requests_are_usage_errors() {
        let xs = vec![item_digest(b"a"), item_digest(b"b")];
        let (s, _) = run(xs.clone());
        let mut out = [0u128; 2];
        assert!(matches!(
            s.eval(&[0, 2], &xs, &mut out),
            Err(OtError::Usage(_))
        ));
        assert!(matches!(
            s.eval(&[0], &xs, &mut out),
            Err(OtError::Usage(_))
        ));
    }

    #[test]
    fn a_wrong_count_or_short_rows_are_typed_errors() {
        // The receiver announces a different m.
        let (mut a, mut b) = mem_pair();
        let t = std::thread::spawn(move || kkrt_oprf_send(&mut a, 5).err());
        let mut h = HEADER_MAGIC.to_vec();
        put_u64(&mut h, 6);
        b.send(&h).unwrap();
        let e = t.join().unwrap().unwrap();
        assert!(matches!(e, OtError::PeerMisbehaved(_)), "{e}");

        // Honest up to the base OTs, then a truncated correction message.
        let (mut a, mut b) = mem_pair();
        let t = std::thread::spawn(move || kkrt_oprf_send(&mut a, 10).err());
        let mut h = HEADER_MAGIC.to_vec();
        put_u64(&mut h, 10);
        b.send(&h).unwrap();
        let _seed = b.recv().unwrap();
        let _keys = base_ot_send(&mut b, CODE_BITS).unwrap();
        b.send(&[0u8; 64 * 9]).unwrap();
        let e = t.join().unwrap().unwrap();
        assert!(matches!(e, OtError::InvalidMessage(_)), "{e}");
    }
}
