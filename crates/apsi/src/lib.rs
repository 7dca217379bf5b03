//! # blindjoin-apsi — labeled PSI with Microsoft APSI's protocol
//!
//! A sender holds a large set of items, each with an optional label; a receiver with a few
//! items learns which of them the sender holds and their labels; the sender learns only how
//! many items were queried (an upper bound, the OPRF count). The protocol is APSI's
//! (Chen–Laine–Rindal CCS'17, Chen–Huang–Laine–Rindal CCS'18 for labels, Cong et al. CCS'21
//! for Paterson–Stockmeyer and few query powers) over our BFV ([`blindjoin_he`]):
//!
//! 1. [`params`]: the parameter set (APSI's JSON presets) and every rule APSI checks.
//! 2. [`sender_db`]: the sender hashes its items through its OPRF key, inserts each at all of
//!    its cuckoo locations, and keeps per bundle of bins the matching and label polynomials as
//!    NTT-form plaintexts.
//! 3. [`receiver`]: OPRF of the query, cuckoo table, encrypted source powers; decryption of
//!    the results.
//! 4. [`sender`]: the remaining powers ([`powers`]), polynomial evaluation, modulus switching.
//!
//! Item digests and a link in, matches and labels out. The message ids are in [`wire`].

pub mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod interp;
pub mod item;
pub mod params;
pub mod powers;
pub mod receiver;
pub mod sender;
pub mod sender_db;
pub mod split_plan;
pub mod wire;

pub use error::{ApsiError, Result};
pub use params::ApsiParams;
pub use receiver::query;
pub use sender::{ServeStats, serve};
pub use sender_db::SenderDb;

#[cfg(test)]
mod tests;
