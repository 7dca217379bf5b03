//! # blindjoin-he — BFV homomorphic encryption for labeled PSI
//!
//! The subset of BFV (Fan–Vercauteren, eprint 2012/144) that Microsoft APSI's labeled PSI needs,
//! over SEAL-style parameters (SecretFlow's APSI presets). This first part: parameters, checked
//! against the HE standard's 128-bit table.

pub mod error;
pub mod modarith;
pub mod params;

pub use error::{HeError, Result};
pub use params::{Parameters, PlainModulus};
