//! # blindjoin-he — BFV homomorphic encryption for labeled PSI
//!
//! The subset of BFV (Fan–Vercauteren, eprint 2012/144) that Microsoft APSI's labeled PSI needs,
//! over SEAL-style parameters (SecretFlow's APSI presets): RNS polynomials with a lazy Harvey
//! NTT, batching, symmetric encryption with seeded ciphertexts, ct+ct, ct×pt and its
//! multiply-accumulate, ct×ct in the Halevi–Polyakov–Shoup RNS variant (eprint 2018/117),
//! relinearization with a special prime, modulus switching, the noise budget, and checked
//! serialization ([`serial`]). Parameters are refused below 128-bit security (the HE standard's table).
//!
//! ```
//! use blindjoin_he::{BatchEncoder, Context, Parameters, PlainModulus, RelinKeys, SecretKey};
//! use blindjoin_he::{cipher, eval};
//! let params = Parameters::new(4096, PlainModulus::Value(40961), &[40, 32, 32]).unwrap();
//! let ctx = Context::new(&params).unwrap();
//! let sk = SecretKey::generate(&ctx).unwrap();
//! let rk = RelinKeys::generate(&ctx, &sk).unwrap();
//! let enc = BatchEncoder::new(&ctx);
//! let x = cipher::encrypt(&ctx, &sk, &enc.encode(&[3, 4, 5]).unwrap()).unwrap();
//! let x2 = eval::relinearize(&ctx, &eval::square(&ctx, &x).unwrap(), &rk).unwrap();
//! let slots = enc.decode(&cipher::decrypt(&ctx, &sk, &x2).unwrap());
//! assert_eq!(&slots[..4], &[9, 16, 25, 0]);
//! ```

pub mod cipher;
pub mod context;
pub mod encoder;
pub mod error;
pub mod eval;
pub mod keys;
pub mod mac_ifma;
pub mod modarith;
pub mod ntt;
pub mod ntt_ifma;
pub mod params;
pub mod poly;
pub mod prng;
pub mod rns;
pub mod rounded;
pub mod serial;

pub use cipher::{Ciphertext, SeededCiphertext};
pub use context::Context;
pub use encoder::{BatchEncoder, NttPlaintext, Plaintext};
pub use error::{HeError, Result};
pub use keys::{RelinKeys, SecretKey};
pub use params::{Parameters, PlainModulus};
pub use rounded::RoundedCiphertext;

#[cfg(test)]
mod tests;
