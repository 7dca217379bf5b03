//! Parquet input and output in a build without the `parquet` feature: the same entry points as
//! the real module, each refusing with an error that names the file and says how to go on, so
//! the rest of the data path needs no feature switches of its own.

use crate::error::DataError;
use arrow_schema::SchemaRef;
use std::convert::Infallible;
use std::io::Write;
use std::path::Path;

/// What a Parquet table is told in this build.
const NOT_BUILT: &str = "this build of blindjoin has no Parquet support (blindjoin-data's \
                         `parquet` feature is off); use a CSV table (IO_TYPE_FILE_CSV) or a \
                         build with the feature";

/// Refuses: no Parquet file can be read in this build.
///
/// # Errors
/// Always [`DataError::Parquet`].
pub fn read_schema(path: &Path) -> Result<SchemaRef, DataError> {
    Err(not_built(path))
}

/// A Parquet table being read: none can be in this build ([`ParquetRows::open`] refuses).
pub struct ParquetRows {
    never: Infallible,
}

/// A batch of a Parquet table's keys and rows (always empty in this build).
#[derive(Default)]
pub struct RowBatch {
    empty: (),
}

impl RowBatch {
    /// Rows in the batch: none.
    pub fn len(&self) -> usize {
        let () = self.empty;
        0
    }

    /// Whether the batch is empty: always.
    pub fn is_empty(&self) -> bool {
        true
    }

    /// Unreachable: the batch has no rows.
    pub fn key(&self, _i: usize) -> &[u8] {
        &[]
    }

    /// Unreachable: the batch has no rows.
    pub fn row(&self, _i: usize) -> &[u8] {
        &[]
    }
}

impl ParquetRows {
    /// Refuses: no Parquet file can be read in this build.
    ///
    /// # Errors
    /// Always [`DataError::Parquet`].
    pub fn open(path: &Path, _keys: &[String]) -> Result<ParquetRows, DataError> {
        Err(not_built(path))
    }

    /// Unreachable: no table exists.
    pub fn schema(&self) -> &SchemaRef {
        match self.never {}
    }

    /// Unreachable: no table exists.
    pub fn header(&self) -> Vec<String> {
        match self.never {}
    }

    /// Unreachable: no table exists.
    pub fn total_rows(&self) -> u64 {
        match self.never {}
    }

    /// Unreachable: no table exists.
    pub fn decoded_bytes(&self) -> u64 {
        match self.never {}
    }

    /// Unreachable: no table exists.
    ///
    /// # Errors
    /// None.
    pub fn next_batch(&mut self, _out: &mut RowBatch) -> Result<bool, DataError> {
        match self.never {}
    }
}

/// Typed rows to an output: none exist in this build (no Parquet table can be read).
pub struct TypedRowWriter {
    never: Infallible,
}

impl TypedRowWriter {
    /// Refuses: typed rows come only from a Parquet input.
    ///
    /// # Errors
    /// Always [`DataError::ParquetOutput`].
    pub fn create(
        path: &Path,
        _schema: &SchemaRef,
        _parquet: bool,
        _null_rep: &str,
    ) -> Result<TypedRowWriter, DataError> {
        Err(DataError::ParquetOutput {
            path: path.to_path_buf(),
            message: NOT_BUILT.into(),
        })
    }

    /// Unreachable: no writer exists.
    ///
    /// # Errors
    /// None.
    pub fn row(&mut self, _row: &[u8]) -> Result<(), DataError> {
        match self.never {}
    }

    /// Unreachable: no writer exists.
    ///
    /// # Errors
    /// None.
    pub fn nulls(&mut self, _n: u64) -> Result<(), DataError> {
        match self.never {}
    }

    /// Unreachable: no writer exists.
    ///
    /// # Errors
    /// None.
    pub fn commit(self) -> Result<u64, DataError> {
        match self.never {}
    }
}

fn not_built(path: &Path) -> DataError {
    DataError::Parquet {
        path: path.to_path_buf(),
        message: NOT_BUILT.into(),
    }
}

/// A Parquet output that cannot exist in this build: [`ParquetWriter::create`] refuses, so no
/// value of this type is ever made.
pub struct ParquetWriter {
    never: Infallible,
}

impl ParquetWriter {
    /// Refuses: no Parquet file can be written in this build.
    ///
    /// # Errors
    /// Always [`DataError::ParquetOutput`].
    pub fn create(path: &Path, _null_rep: &str) -> Result<ParquetWriter, DataError> {
        Err(DataError::ParquetOutput {
            path: path.to_path_buf(),
            message: NOT_BUILT.into(),
        })
    }

    /// Unreachable: no writer exists.
    ///
    /// # Errors
    /// None.
    pub fn commit(self) -> Result<u64, DataError> {
        match self.never {}
    }

    /// Unreachable: no writer exists.
    pub fn take_error(&mut self) -> Option<DataError> {
        match self.never {}
    }
}

impl Write for ParquetWriter {
    fn write(&mut self, _buf: &[u8]) -> std::io::Result<usize> {
        match self.never {}
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error's message, or nothing for a success (which the asserts then reject).
    fn message<T>(r: Result<T, DataError>) -> String {
        r.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn parquet_tables_are_refused_with_the_file_named() {
        let p = Path::new("in.parquet");
        let e = message(read_schema(p));
        assert!(
            e.starts_with("in.parquet: ") && e.contains("no Parquet support"),
            "{e}"
        );
        let e = message(ParquetRows::open(p, &[]));
        assert!(e.contains("`parquet` feature"), "{e}");
        let e = message(ParquetWriter::create(Path::new("out.parquet"), "NULL"));
        assert!(
            e.starts_with("out.parquet: ") && e.contains("IO_TYPE_FILE_CSV"),
            "{e}"
        );
    }
}
