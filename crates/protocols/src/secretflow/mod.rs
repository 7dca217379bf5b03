//! The protocol side of running against an unmodified SecretFlow party (PyPI `spu==0.9.5`,
//! psi@242a8fa) on SecretFlow's own link ([`blindjoin_link::secretflow`]): its batch message,
//! its PSI v2 config check and its `PROTOCOL_ECDH`. Items in, indices out, as for our own
//! protocols; the session around them (reading, the sync steps, the join, the output) is the
//! data path's (`blindjoin_data::secretflow_wire`).

pub mod batch;
pub mod config;
pub mod ecdh;
pub mod ub;

#[cfg(test)]
mod tests;
