//! Reading a Parquet table: opening and checking the file, the key checks, and each record
//! batch as canonical keys and typed rows.

use super::column_text::ColumnText;
use super::typed_rows::RowEncoder;
use super::{BATCH_ROWS, check_types};
use crate::error::DataError;
use arrow_schema::{DataType, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The Arrow schema of a Parquet file, from its footer.
///
/// # Errors
/// The file cannot be opened ([`DataError::Io`]) or is not readable Parquet
/// ([`DataError::Parquet`]).
pub fn read_schema(path: &Path) -> Result<SchemaRef, DataError> {
    guard_decoder(path, || Ok(open_reader(path)?.schema().clone()))
}

/// Runs `work`, which decodes the Parquet file at `path`, turning a panic inside the decoder
/// into [`DataError::Parquet`]. The parquet crate is meant to return errors on corrupt input,
/// but in 57.3 a few flipped bytes still reach panics (in its thrift footer decoder, its bit
/// reader, and arrow-ipc's decoding of the embedded schema; see the corrupt-file test), and a
/// bad input file must end the run with a message, not a crash. (The panic hook still prints
/// the panic to stderr; with `panic = "abort"` this guard would not help.)
pub(super) fn guard_decoder<T>(
    path: &Path,
    work: impl FnOnce() -> Result<T, DataError>,
) -> Result<T, DataError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        let reason = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(parquet_error(
            path,
            format!("the Parquet decoder failed on this file ({reason}); it is probably corrupt"),
        ))
    })
}

/// A Parquet table read record batch by record batch into the data path's keys and rows: each
/// row's canonical key (from the text a CSV file would hold for its key cells, see the
/// [module docs](super)) and its typed row bytes ([`super::typed_rows`]). Memory stays at one
/// batch whatever the file's size.
pub struct ParquetRows {
    path: PathBuf,
    schema: SchemaRef,
    reader: ParquetRecordBatchReader,
    key_columns: Vec<usize>,
    encoder: RowEncoder,
    total_rows: u64,
    decoded_bytes: u64,
    /// Rows read so far.
    rows: u64,
}

/// One record batch's keys and rows, each concatenated with where each one ends.
#[derive(Default)]
pub struct RowBatch {
    /// Canonical keys.
    pub keys: Vec<u8>,
    /// End of each row's key in `keys`.
    pub key_ends: Vec<usize>,
    /// Typed row bytes.
    pub rows: Vec<u8>,
    /// End of each row in `rows`.
    pub row_ends: Vec<usize>,
}

impl RowBatch {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.row_ends.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.row_ends.is_empty()
    }

    /// Row `i`'s canonical key.
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.key_ends[i - 1] };
        &self.keys[start..self.key_ends[i]]
    }

    /// Row `i`'s bytes.
    pub fn row(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.row_ends[i - 1] };
        &self.rows[start..self.row_ends[i]]
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.key_ends.clear();
        self.rows.clear();
        self.row_ends.clear();
    }
}

impl ParquetRows {
    /// Opens the Parquet file at `path` and checks that every column has a supported type and a
    /// unique name, and that every column in `keys` exists.
    ///
    /// # Errors
    /// [`DataError::Io`] (opening `path`), [`DataError::Parquet`] (not Parquet, truncated,
    /// corrupt, duplicate column names), [`DataError::UnsupportedParquetType`],
    /// [`DataError::MissingKeyColumn`].
    pub fn open(path: &Path, keys: &[String]) -> Result<ParquetRows, DataError> {
        guard_decoder(path, || {
            let builder = open_reader(path)?;
            let schema = builder.schema().clone();
            check_columns(path, &schema)?;
            let key_columns = key_columns(path, &schema, keys)?;
            let encoder = RowEncoder::new(path, &schema)?;
            let meta = builder.metadata();
            let total_rows = u64::try_from(meta.file_metadata().num_rows()).unwrap_or(0);
            let decoded_bytes = meta
                .row_groups()
                .iter()
                .map(|g| u64::try_from(g.total_byte_size()).unwrap_or(0))
                .sum();
            let reader = builder
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|e| unreadable(path, &e))?;
            Ok(ParquetRows {
                path: path.to_path_buf(),
                schema,
                reader,
                key_columns,
                encoder,
                total_rows,
                decoded_bytes,
                rows: 0,
            })
        })
    }

    /// The file's Arrow schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Column names.
    pub fn header(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    /// Rows the footer says the file holds.
    pub fn total_rows(&self) -> u64 {
        self.total_rows
    }

    /// The table's size decoded, as the footer states it: what sizes the spill.
    pub fn decoded_bytes(&self) -> u64 {
        self.decoded_bytes
    }

    /// Reads the next record batch into `out` (cleared first); `false` at the end of the file.
    ///
    /// # Errors
    /// [`DataError::Parquet`] (a corrupt page, a cell that cannot be written as key text),
    /// [`DataError::NullKey`], [`DataError::EmptyParquetKey`].
    pub fn next_batch(&mut self, out: &mut RowBatch) -> Result<bool, DataError> {
        out.clear();
        let path = self.path.clone();
        guard_decoder(&path, || {
            let Some(batch) = self.reader.next() else {
                return Ok(false);
            };
            let batch = batch.map_err(|e| unreadable(&self.path, &e))?;
            // Dictionaries are carried as their values.
            let columns = batch
                .columns()
                .iter()
                .zip(self.schema.fields())
                .map(|(array, field)| match array.data_type() {
                    DataType::Dictionary(_, value) => arrow_cast::cast(array, value).map_err(|e| {
                        unreadable(&self.path, &format!("column {:?}: {e}", field.name()))
                    }),
                    _ => Ok(array.clone()),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let keys = self
                .key_columns
                .iter()
                .map(|&k| ColumnText::new(&self.path, &self.schema.fields()[k], &columns[k]))
                .collect::<Result<Vec<_>, _>>()?;
            let mut cell = Vec::new();
            for index in 0..batch.num_rows() {
                let row = self.rows + index as u64 + 1;
                for (column, &k) in keys.iter().zip(&self.key_columns) {
                    let field = self.schema.fields()[k].name();
                    check_key(&self.path, row, index, column, field)?;
                    cell.clear();
                    (column.cells)(index, &mut cell).map_err(|why| {
                        parquet_error(&self.path, format!("row {row}, column {field:?}: {why}"))
                    })?;
                    let text = unquoted(&cell);
                    out.keys
                        .extend_from_slice(&(text.len() as u32).to_be_bytes());
                    out.keys.extend_from_slice(&text);
                }
                out.key_ends.push(out.keys.len());
            }
            self.encoder
                .encode(&columns, batch.num_rows(), &mut out.rows, &mut out.row_ends)
                .map_err(|e| unreadable(&self.path, &e))?;
            self.rows += batch.num_rows() as u64;
            Ok(true)
        })
    }
}

/// A key cell's value: the cell text, unquoted when it is quoted (strings and binaries), as a
/// CSV reader would give it.
fn unquoted(cell: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match cell.strip_prefix(b"\"").and_then(|c| c.strip_suffix(b"\"")) {
        Some(inner) if inner.contains(&b'"') => {
            let mut v = Vec::with_capacity(inner.len());
            let mut quote = false;
            for &b in inner {
                if b == b'"' && quote {
                    quote = false;
                    continue;
                }
                quote = b == b'"';
                v.push(b);
            }
            std::borrow::Cow::Owned(v)
        }
        Some(inner) => std::borrow::Cow::Borrowed(inner),
        None => std::borrow::Cow::Borrowed(cell),
    }
}

fn open_reader(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>, DataError> {
    let file = File::open(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        action: "reading the input",
        source,
    })?;
    ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| unreadable(path, &e))
}

pub(super) fn unreadable(path: &Path, error: &dyn std::fmt::Display) -> DataError {
    parquet_error(
        path,
        format!(
            "cannot read the file as Parquet ({error}); check that it is complete and really in \
             Parquet format (a CSV file needs a .csv name)"
        ),
    )
}

fn parquet_error(path: &Path, message: String) -> DataError {
    DataError::Parquet {
        path: path.to_path_buf(),
        message,
    }
}

/// Every column has a supported type and a name no other column has (a CSV header needs
/// unique names), and there is at least one column.
fn check_columns(path: &Path, schema: &Schema) -> Result<(), DataError> {
    if schema.fields().is_empty() {
        return Err(parquet_error(path, "the file has no columns".into()));
    }
    check_types(path, schema)?;
    for (index, field) in schema.fields().iter().enumerate() {
        let earlier = schema.fields().iter().take(index);
        if earlier.clone().any(|f| f.name() == field.name()) {
            return Err(parquet_error(
                path,
                format!(
                    "two columns are named {:?}; rename one so every column name is unique",
                    field.name()
                ),
            ));
        }
    }
    Ok(())
}

/// Column indices of `keys`, each of which must exist.
fn key_columns(path: &Path, schema: &Schema, keys: &[String]) -> Result<Vec<usize>, DataError> {
    keys.iter()
        .map(|key| {
            schema
                .index_of(key)
                .map_err(|_| DataError::MissingKeyColumn {
                    path: path.to_path_buf(),
                    column: key.clone(),
                    available: schema
                        .fields()
                        .iter()
                        .map(|f| format!("{:?}", f.name()))
                        .collect::<Vec<_>>()
                        .join(", "),
                })
        })
        .collect()
}

/// Row `index` of the batch (row `row` of the file, 1-based) has a non-null, non-empty value in
/// the key column `field`.
fn check_key(
    path: &Path,
    row: u64,
    index: usize,
    column: &ColumnText,
    field: &str,
) -> Result<(), DataError> {
    if column.is_null(index) {
        return Err(DataError::NullKey {
            path: path.to_path_buf(),
            row,
            field: field.to_owned(),
        });
    }
    if column.is_empty_value(index) {
        return Err(DataError::EmptyParquetKey {
            path: path.to_path_buf(),
            row,
            field: field.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unquoted;

    #[test]
    fn key_cells_are_unquoted_as_a_csv_reader_would() {
        assert_eq!(&*unquoted(b"42"), b"42");
        assert_eq!(&*unquoted(b"\"a,b\""), b"a,b");
        assert_eq!(&*unquoted(b"\"say \"\"hi\"\"\""), b"say \"hi\"");
        assert_eq!(&*unquoted(b"\"\"\"\"\"\""), b"\"\"");
        assert_eq!(&*unquoted(b"\"0a0b\""), b"0a0b");
    }
}
