//! FourQ (Costello–Longa, "FourQ: four-dimensional decompositions on a Q-curve over the Mersenne
//! prime", ASIACRYPT 2015, eprint 2015/565) for ECDH-PSI.

mod field;
mod mul;
mod point;
mod scalar;

pub use scalar::Scalar;

#[cfg(test)]
mod tests;
