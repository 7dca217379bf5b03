//! IKNP OT extension: Ishai, Kilian, Nissim, Petrank, "Extending Oblivious Transfers
//! Efficiently" (CRYPTO 2003), the semi-honest protocol, in its correlated-OT
//! form (the "C-OT" variant of Asharov–Lindell–Schneider–Zohner, CCS 2013): `n` correlated OTs
//! with a global `Δ`.
//!
//! # Protocol (security parameter κ = 128)
//!
//! Roles reverse for the base OTs: the extension *sender* (holder of `Δ`) is the base-OT
//! *receiver* with choice bits `Δ_j`; the extension *receiver* (holder of choices `c`) is the
//! base-OT *sender*.
//!
//! ```text
//! Receiver R (choices c ∈ {0,1}^n)           Sender S (Δ ∈ {0,1}^128 random)
//!   ---- header: "IKNP" | u64 n ---------------------->   S checks n matches its own
//!   128 base OTs, R sends (k_j^0, k_j^1), S chooses Δ_j → S holds k_j^{Δ_j}
//!   for each chunk of m ≤ 2^14 OTs (m rounded up to a multiple of 128), for j < 128:
//!     t_j = G(k_j^0), u_j = t_j ⊕ G(k_j^1) ⊕ c          (m-bit strings)
//!   ---- u_0 | … | u_127  (128·m/8 bytes) ------------>   q_j = G(k_j^{Δ_j}) ⊕ Δ_j·u_j
//!   transpose: t_i = row i of [t_0..t_127]                  q_i = row i of [q_0..q_127]
//! ```
//!
//! so that `q_j = t_j ⊕ Δ_j·c`, i.e. for every OT `i`: `t_i = q_i ⊕ c_i·Δ`.
//!
//! `G` is AES-128 in counter mode keyed with the 16-byte base-OT key (counter = the 128-bit
//! little-endian block index, continued across chunks, so every key's stream is used once).
//!
//! # Random OT
//!
//! [`CotSender::random_ots`] / [`CotReceiver::random_ots`] break the correlation with the
//! tweakable correlation-robust hash of Guo, Katz, Wang, Yu, "Efficient and Secure Multiparty
//! Computation from Fixed-Key Block Ciphers" (IEEE S&P 2020):
//! `H(i, x) = π(π(x) ⊕ i) ⊕ π(x)`, `π` = AES-128 under a fixed public key. Sender gets
//! `(H(i, q_i), H(i, q_i ⊕ Δ))`, receiver `H(i, t_i)`.
//!
//! # Security model
//!
//! Semi-honest only (IKNP without the KOS consistency check): a malicious receiver can send
//! inconsistent `u_j` and learn bits of `Δ`. Both parties must follow the protocol.

use crate::OtError;
use crate::base_ot::{base_ot_receive, base_ot_send};
use crate::transpose::transpose_rows;
use aes::Aes128;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use blindjoin_crypto::random_bytes;
use blindjoin_link::{Link, Reader, put_u64};
use rayon::prelude::*;
use zeroize::Zeroize;

/// Security parameter: number of base OTs and width of `Δ`, `q_i`, `t_i`.
pub const KAPPA: usize = 128;

/// OTs per extension message. A message carries `128 · CHUNK_OTS / 8` = 256 KiB.
pub const CHUNK_OTS: usize = 1 << 14;

/// Largest `n` one call may extend (2^32 − 1 so the chunk counters never wrap and a caller bug
/// cannot ask for an absurd allocation silently).
pub const MAX_COTS: usize = u32::MAX as usize;

const HEADER_MAGIC: &[u8] = blindjoin_link::wire::ids::IKNP;

/// The sender's half of `n` correlated OTs: global `Δ` and `q_i`, with `t_i = q_i ⊕ c_i·Δ` on
/// the receiver's side. Secrets are zeroized on drop.
pub struct CotSender {
    delta: u128,
    q: Vec<u128>,
}

impl CotSender {
    /// Assembles a sender's output from `Δ` and the `q_i` (for the other OT extensions of this
    /// crate, which produce the same correlation).
    pub(crate) fn from_parts(delta: u128, q: Vec<u128>) -> Self {
        CotSender { delta, q }
    }

    /// The global correlation `Δ` (never zero).
    pub fn delta(&self) -> u128 {
        self.delta
    }

    /// `q_i` for each OT.
    pub fn q(&self) -> &[u128] {
        &self.q
    }

    /// Number of OTs.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// True when no OTs were produced.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Random OTs derived from the correlated ones: `[H(i, q_i), H(i, q_i ⊕ Δ)]` (see the
    /// module doc for `H`). The receiver's [`CotReceiver::random_ots`] yields the element
    /// selected by its choice bit.
    pub fn random_ots(&self) -> Vec<[[u8; 16]; 2]> {
        let h0 = tccr_hash(&self.q, 0);
        let h1 = tccr_hash(&self.q, self.delta);
        h0.into_iter().zip(h1).map(|(a, b)| [a, b]).collect()
    }
}

impl Drop for CotSender {
    fn drop(&mut self) {
        self.delta.zeroize();
        self.q.zeroize();
    }
}

/// The receiver's half of `n` correlated OTs: its choice bits and `t_i = q_i ⊕ c_i·Δ`.
/// Secrets are zeroized on drop.
pub struct CotReceiver {
    choices: Vec<bool>,
    t: Vec<u128>,
}

impl CotReceiver {
    /// Assembles a receiver's output from its choice bits and the `t_i` (for the other OT
    /// extensions of this crate).
    pub(crate) fn from_parts(choices: Vec<bool>, t: Vec<u128>) -> Self {
        CotReceiver { choices, t }
    }

    /// `t_i` for each OT.
    pub fn t(&self) -> &[u128] {
        &self.t
    }

    /// The choice bits the OTs were run with.
    pub fn choices(&self) -> &[bool] {
        &self.choices
    }

    /// Number of OTs.
    pub fn len(&self) -> usize {
        self.t.len()
    }

    /// True when no OTs were produced.
    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }

    /// Random OTs: `H(i, t_i)`, equal to the sender's `random_ots()[i][c_i]`.
    pub fn random_ots(&self) -> Vec<[u8; 16]> {
        tccr_hash(&self.t, 0)
    }
}

impl Drop for CotReceiver {
    fn drop(&mut self) {
        self.choices.zeroize();
        self.t.zeroize();
    }
}

/// Fixed public key of the permutation `π` in the TCCR hash: the 16 ASCII bytes
/// `blindjoin-tccr-1` (any fixed, public key works; it is a nothing-up-my-sleeve constant).
const TCCR_KEY: [u8; 16] = *b"blindjoin-tccr-1";

/// `H(i, x ⊕ offset) = π(π(y) ⊕ i) ⊕ π(y)` with `y = x ⊕ offset`, for all `i`.
fn tccr_hash(xs: &[u128], offset: u128) -> Vec<[u8; 16]> {
    let cipher = Aes128::new(&TCCR_KEY.into());
    let mut out = vec![[0u8; 16]; xs.len()];
    out.par_chunks_mut(1024)
        .zip(xs.par_chunks(1024))
        .enumerate()
        .for_each(|(c, (dst, src))| {
            let mut pi_y: Vec<[u8; 16]> = src.iter().map(|x| (x ^ offset).to_le_bytes()).collect();
            cipher.encrypt_blocks(aes::Block::cast_slice_from_core_mut(&mut pi_y));
            for (k, (d, p)) in dst.iter_mut().zip(&pi_y).enumerate() {
                let i = (c * 1024 + k) as u128;
                *d = (u128::from_le_bytes(*p) ^ i).to_le_bytes();
            }
            cipher.encrypt_blocks(aes::Block::cast_slice_from_core_mut(dst));
            for (d, p) in dst.iter_mut().zip(&pi_y) {
                *d = (u128::from_le_bytes(*d) ^ u128::from_le_bytes(*p)).to_le_bytes();
            }
            pi_y.zeroize();
        });
    out
}

/// AES-128-CTR stream keyed by one base-OT key (also used by [`crate::kkrt_oprf`]).
pub(crate) struct Prg {
    cipher: Aes128,
    counter: u128,
}

impl Prg {
    pub(crate) fn new(key: &[u8; 16]) -> Self {
        Prg {
            cipher: Aes128::new(&(*key).into()),
            counter: 0,
        }
    }

    /// Overwrites `out` (a multiple of 16 bytes) with the next `out.len()` stream bytes.
    pub(crate) fn fill(&mut self, out: &mut [u8]) {
        let (blocks, _) = aes::Block::slice_as_chunks_mut(out);
        for b in blocks.iter_mut() {
            *b = self.counter.to_le_bytes().into();
            self.counter = self.counter.wrapping_add(1);
        }
        self.cipher.encrypt_blocks(blocks);
    }
}

/// Chunk sizes: `(ots in this chunk, padded column bits)`.
fn chunks(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n.div_ceil(CHUNK_OTS)).map(move |c| {
        let m = (n - c * CHUNK_OTS).min(CHUNK_OTS);
        (m, m.div_ceil(128) * 128)
    })
}

/// Transposes a chunk's 128 rows of `padded` bits into `dst` (`m` words): in place when the
/// chunk is a whole number of 128-OT blocks, through a scratch buffer for the last, short one.
fn transpose_into(rows: &[u8], m: usize, padded: usize, dst: &mut [u128]) {
    if m == padded {
        transpose_rows(rows, padded, dst);
    } else {
        let mut words = vec![0u128; padded];
        transpose_rows(rows, padded, &mut words);
        dst.copy_from_slice(&words[..m]);
        words.zeroize();
    }
}

fn check_n(n: usize) -> Result<(), OtError> {
    if n > MAX_COTS {
        return Err(OtError::Usage(format!(
            "{n} OTs requested; at most {MAX_COTS} per extension"
        )));
    }
    Ok(())
}

fn header(n: usize) -> Vec<u8> {
    let mut h = HEADER_MAGIC.to_vec();
    put_u64(&mut h, n as u64);
    h
}

/// Runs `n` correlated OTs as the IKNP *sender*. Picks a random nonzero `Δ`; returns `Δ` and
/// `q_i` with the receiver holding `t_i = q_i ⊕ c_i·Δ`.
///
/// # Errors
/// Link failure; the receiver announced a different `n` ([`OtError::PeerMisbehaved`]); a
/// malformed message ([`OtError::InvalidMessage`]); base-OT failure; `n > MAX_COTS`.
pub fn iknp_cot_send(link: &mut dyn Link, n: usize) -> Result<CotSender, OtError> {
    check_n(n)?;
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "IKNP header");
    if r.take(4)? != HEADER_MAGIC {
        return Err(OtError::PeerMisbehaved(
            "IKNP header has the wrong magic; the peer runs a different protocol".into(),
        ));
    }
    let peer_n = r.u64()?;
    r.finish()?;
    if peer_n != n as u64 {
        return Err(OtError::PeerMisbehaved(format!(
            "IKNP: this party extends {n} OTs but the receiver asked for {peer_n}"
        )));
    }

    let mut delta = 0u128;
    while delta == 0 {
        let mut b = [0u8; 16];
        random_bytes(&mut b)?;
        delta = u128::from_le_bytes(b);
        b.zeroize();
    }
    let bits: Vec<bool> = (0..KAPPA).map(|j| (delta >> j) & 1 == 1).collect();
    let mut keys = base_ot_receive(link, &bits)?;
    let mut prgs: Vec<Prg> = keys.iter().map(Prg::new).collect();
    keys.zeroize();

    let mut out = CotSender {
        delta,
        q: vec![0u128; n],
    };
    let mut cols = Vec::new();
    let mut done = 0;
    for (m, padded) in chunks(n) {
        let row_len = padded / 8;
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "IKNP extension matrix");
        let u = r.take(KAPPA * row_len)?;
        r.finish()?;
        cols.resize(KAPPA * row_len, 0u8);
        cols.par_chunks_mut(row_len)
            .zip(prgs.par_iter_mut())
            .zip(u.par_chunks(row_len))
            .enumerate()
            .for_each(|(j, ((q_j, prg), u_j))| {
                prg.fill(q_j);
                let mask = 0u8.wrapping_sub(((delta >> j) & 1) as u8);
                for (q, u) in q_j.iter_mut().zip(u_j) {
                    *q ^= u & mask;
                }
            });
        transpose_into(&cols, m, padded, &mut out.q[done..done + m]);
        done += m;
    }
    cols.zeroize();
    Ok(out)
}

/// Runs `choices.len()` correlated OTs as the IKNP *receiver*: returns `t_i = q_i ⊕ c_i·Δ`.
///
/// # Errors
/// Link failure; base-OT failure; more than [`MAX_COTS`] choices.
pub fn iknp_cot_receive(link: &mut dyn Link, choices: &[bool]) -> Result<CotReceiver, OtError> {
    let n = choices.len();
    check_n(n)?;
    link.send(&header(n))?;
    let mut keys = base_ot_send(link, KAPPA)?;
    let mut prgs: Vec<[Prg; 2]> = keys
        .iter()
        .map(|[k0, k1]| [Prg::new(k0), Prg::new(k1)])
        .collect();
    keys.zeroize();

    let mut out = CotReceiver {
        choices: choices.to_vec(),
        t: vec![0u128; n],
    };
    let mut t_cols = Vec::new();
    let mut u_cols = Vec::new();
    let mut done = 0;
    for (m, padded) in chunks(n) {
        let row_len = padded / 8;
        let mut c = vec![0u8; row_len];
        for (i, &bit) in choices[done..done + m].iter().enumerate() {
            c[i / 8] |= u8::from(bit) << (i % 8);
        }
        t_cols.resize(KAPPA * row_len, 0u8);
        u_cols.resize(KAPPA * row_len, 0u8);
        t_cols
            .par_chunks_mut(row_len)
            .zip(u_cols.par_chunks_mut(row_len))
            .zip(prgs.par_iter_mut())
            .for_each(|((t_j, u_j), [g0, g1])| {
                g0.fill(t_j);
                g1.fill(u_j);
                for ((u, t), c) in u_j.iter_mut().zip(t_j.iter()).zip(&c) {
                    *u ^= t ^ c;
                }
            });
        link.send(&u_cols)?;
        transpose_into(&t_cols, m, padded, &mut out.t[done..done + m]);
        c.zeroize();
        done += m;
    }
    t_cols.zeroize();
    Ok(out)
}
