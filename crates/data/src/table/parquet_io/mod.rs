//! Parquet input and output, natively: a Parquet table is read record batch by record batch
//! into the data path's canonical keys and typed row bytes ([`ParquetRows`],
//! [`typed_rows`]), and the joined rows are written back as Arrow batches ([`TypedRowWriter`])
//! with the input's schema, kept in the prepared table. No CSV text is made on the way.
//!
//! Text appears in two places only. A **key** is hashed as the text a CSV file would hold for
//! the same value once unquoted (an Int64 42 is `42`, a string `a,b` is `a,b`), so a party with
//! a CSV table and one with a Parquet table find the same keys. A **CSV output** of a Parquet
//! input writes each cell as below; a CSV input written as Parquet ([`ParquetWriter`]) has
//! Utf8 columns named from its header.
//! | Arrow type | cell text |
//! |---|---|
//! | null (any type) | empty and **unquoted** |
//! | Utf8, LargeUtf8, Utf8View | always quoted (RFC 4180, `"` doubled), so `""` is the empty string |
//! | Binary, LargeBinary, BinaryView, FixedSizeBinary | quoted lowercase hex |
//! | Int8…Int64, UInt8…UInt64 | decimal |
//! | Float16/32/64 | shortest text that parses back to the same value (`1.0`, `1e300`, `-0.0`, `NaN`, `inf`, `-inf`) |
//! | Boolean | `true` / `false` |
//! | Decimal32…256 | exact decimal with the column's scale (`-0.05`) |
//! | Date32 | `YYYY-MM-DD` |
//! | Date64 | `YYYY-MM-DD`, or `YYYY-MM-DDTHH:MM:SS.fff` when not midnight |
//! | Time32/Time64 | `HH:MM:SS` plus as many fraction digits as needed (`.fff`, `.ffffff`, `.fffffffff`) |
//! | Timestamp without time zone | `YYYY-MM-DDTHH:MM:SS[.f…]`, as arrow's display writes it |
//! | Timestamp with time zone | the same instant in UTC with a `Z` suffix |
//! | Dictionary of any of these | the value's text |
//!
//! Years outside 0000–9999 carry a sign (`+10000-01-01`). Padding rows of outer joins are null
//! in every column as Parquet, and `csv_null_rep` in every cell as CSV.
//!
//! Timestamps with a time zone are written in UTC rather than in their zone so that the same
//! instant always has the same key text and no time zone database is needed; a Parquet output
//! keeps the zone in its schema.
//!
//! What cannot be carried: nested types (List, Struct, Map, Union), Interval, Duration, and
//! decimals with a negative scale; these are [`DataError::UnsupportedParquetType`]. Parquet to
//! Parquet keeps every value bit for bit (a NaN's payload too); in CSV text every NaN is `NaN`.

mod column_text;
mod read;
mod record_splitter;
mod typed_rows;
mod typed_write;
mod write;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

pub use read::{ParquetRows, RowBatch, read_schema};
pub use typed_write::TypedRowWriter;
pub use write::ParquetWriter;

use crate::error::DataError;
use arrow_schema::{DataType, Schema, TimeUnit};
use std::path::Path;

/// Rows per record batch, both ways: large enough that per-batch overhead vanishes, small
/// enough that a batch of a wide table stays in the tens of megabytes.
const BATCH_ROWS: usize = 64 * 1024;

/// Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

/// Fails with [`DataError::UnsupportedParquetType`], naming the first column whose type cannot
/// go through the intermediate CSV and back.
fn check_types(path: &Path, schema: &Schema) -> Result<(), DataError> {
    match schema
        .fields()
        .iter()
        .find(|f| !is_supported(f.data_type()))
    {
        Some(field) => Err(DataError::UnsupportedParquetType {
            path: path.to_path_buf(),
            column: field.name().clone(),
            data_type: field.data_type().to_string(),
        }),
        None => Ok(()),
    }
}

/// Whether a column of this type can go through the intermediate CSV and back.
fn is_supported(data_type: &DataType) -> bool {
    use DataType as T;
    match data_type {
        T::Dictionary(key, value) => key.is_dictionary_key_type() && can_be_dictionary(value),
        other => is_supported_scalar(other),
    }
}

fn is_supported_scalar(data_type: &DataType) -> bool {
    use DataType as T;
    match data_type {
        T::Null
        | T::Boolean
        | T::Int8
        | T::Int16
        | T::Int32
        | T::Int64
        | T::UInt8
        | T::UInt16
        | T::UInt32
        | T::UInt64
        | T::Float16
        | T::Float32
        | T::Float64
        | T::Utf8
        | T::LargeUtf8
        | T::Utf8View
        | T::Binary
        | T::LargeBinary
        | T::BinaryView
        | T::FixedSizeBinary(_)
        | T::Date32
        | T::Date64
        | T::Time32(TimeUnit::Second | TimeUnit::Millisecond)
        | T::Time64(TimeUnit::Microsecond | TimeUnit::Nanosecond)
        | T::Timestamp(_, _) => true,
        T::Decimal32(_, scale) | T::Decimal64(_, scale) => *scale >= 0,
        T::Decimal128(_, scale) | T::Decimal256(_, scale) => *scale >= 0,
        _ => false,
    }
}

/// Value types that `arrow_cast` packs back into a dictionary (see `cast_to_dictionary`).
fn can_be_dictionary(value: &DataType) -> bool {
    use DataType as T;
    is_supported_scalar(value)
        && !matches!(value, T::Null | T::Boolean | T::Utf8View | T::BinaryView)
}
