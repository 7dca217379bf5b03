//! # blindjoin-he — BFV homomorphic encryption for labeled PSI
//!
//! The subset of BFV (Fan–Vercauteren, eprint 2012/144) that Microsoft APSI's labeled PSI needs,
//! over SEAL-style parameters (SecretFlow's APSI presets). So far: parameters, checked against
//! the HE standard's 128-bit table, and RNS polynomials with Harvey's lazy negacyclic NTT.

pub mod error;
pub mod modarith;
pub mod ntt;
pub mod params;
pub mod poly;

pub use error::{HeError, Result};
pub use params::{Parameters, PlainModulus};
