//! Tables: reading and writing CSV and Parquet, the canonical key encoding every party shares,
//! and the files we create (atomic outputs, private temporary files).

pub mod csv;
pub(crate) mod keys;
pub(crate) mod output;
#[cfg(feature = "parquet")]
pub mod parquet_io;
#[cfg(not(feature = "parquet"))]
#[path = "parquet_off.rs"]
pub mod parquet_io;
pub(crate) mod parts;
pub(crate) mod private_fs;
pub(crate) mod rows;
pub mod writer;
