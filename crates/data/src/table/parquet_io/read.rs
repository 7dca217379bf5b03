//! Parquet → intermediate CSV: opening and checking the file, the key checks, and the CSV
//! text written in chunks.

use super::column_text::ColumnText;
use super::{BATCH_ROWS, check_types};
use crate::error::DataError;
use arrow_schema::{Schema, SchemaRef};
use blindjoin_protocols::Progress;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Bytes of intermediate CSV gathered before each write to the caller's writer.
const WRITE_CHUNK: usize = 1 << 20;

/// The Arrow schema of a Parquet file, from its footer.
///
/// # Errors
/// The file cannot be opened ([`DataError::Io`]) or is not readable Parquet
/// ([`DataError::Parquet`]).
pub fn read_schema(path: &Path) -> Result<SchemaRef, DataError> {
    guard_decoder(path, || Ok(open_reader(path)?.schema().clone()))
}

/// Converts the Parquet file at `path` into the intermediate CSV (see the [module docs](super)),
/// writing a header and then one record per row to `out`. Streams record batches, so memory
/// stays bounded whatever the file's size. Returns the number of rows.
///
/// Checks on the way that every column has a supported type, that every column in `keys`
/// exists, and that no key cell is null or empty. Reports progress as the stage
/// `reading Parquet`, in rows.
///
/// # Errors
/// [`DataError::Io`] (opening `path` or writing `out`), [`DataError::Parquet`] (not Parquet,
/// truncated, corrupt, duplicate column names), [`DataError::UnsupportedParquetType`],
/// [`DataError::MissingKeyColumn`], [`DataError::NullKey`], [`DataError::EmptyParquetKey`].
pub fn parquet_to_csv(
    path: &Path,
    keys: &[String],
    out: &mut dyn Write,
    progress: &dyn Progress,
) -> Result<u64, DataError> {
    guard_decoder(path, || convert_to_csv(path, keys, out, progress))
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

fn convert_to_csv(
    path: &Path,
    keys: &[String],
    out: &mut dyn Write,
    progress: &dyn Progress,
) -> Result<u64, DataError> {
    let builder = open_reader(path)?;
    let schema = builder.schema().clone();
    check_columns(path, &schema)?;
    let key_columns = key_columns(path, &schema, keys)?;
    let total = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
    let reader = builder
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| unreadable(path, &e))?;
    progress.stage("reading Parquet", total);

    let mut text = CsvText::new(path, out);
    text.header(&schema)?;
    let mut rows = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| unreadable(path, &e))?;
        let columns = batch
            .columns()
            .iter()
            .zip(schema.fields())
            .map(|(array, field)| ColumnText::new(path, field, array))
            .collect::<Result<Vec<_>, _>>()?;
        for index in 0..batch.num_rows() {
            rows += 1;
            check_keys(path, rows, index, &columns, &key_columns, &schema)?;
            text.record(rows, index, &columns, &schema)?;
        }
        progress.advance(batch.num_rows() as u64);
    }
    text.finish()?;
    Ok(rows)
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

/// Row `index` of the batch (row `row` of the file, 1-based) has a non-null, non-empty value
/// in every key column.
fn check_keys(
    path: &Path,
    row: u64,
    index: usize,
    columns: &[ColumnText],
    key_columns: &[usize],
    schema: &Schema,
) -> Result<(), DataError> {
    for &k in key_columns {
        let (Some(column), Some(field)) = (columns.get(k), schema.fields().get(k)) else {
            continue;
        };
        let field = field.name().clone();
        if column.is_null(index) {
            return Err(DataError::NullKey {
                path: path.to_path_buf(),
                row,
                field,
            });
        }
        if column.is_empty_value(index) {
            return Err(DataError::EmptyParquetKey {
                path: path.to_path_buf(),
                row,
                field,
            });
        }
    }
    Ok(())
}

/// The intermediate CSV being written: lines gathered into chunks for the caller's writer.
struct CsvText<'a> {
    path: &'a Path,
    out: &'a mut dyn Write,
    buffer: Vec<u8>,
}

impl<'a> CsvText<'a> {
    fn new(path: &'a Path, out: &'a mut dyn Write) -> Self {
        CsvText {
            path,
            out,
            buffer: Vec::with_capacity(WRITE_CHUNK + WRITE_CHUNK / 4),
        }
    }

    fn header(&mut self, schema: &Schema) -> Result<(), DataError> {
        crate::table::csv::write_record(&mut self.buffer, schema.fields().iter().map(|f| f.name()));
        Ok(())
    }

    /// Appends row `index` of the batch (row `row` of the file).
    fn record(
        &mut self,
        row: u64,
        index: usize,
        columns: &[ColumnText],
        schema: &Schema,
    ) -> Result<(), DataError> {
        let start = self.buffer.len();
        for (c, (column, field)) in columns.iter().zip(schema.fields()).enumerate() {
            if c > 0 {
                self.buffer.push(b',');
            }
            if column.is_null(index) {
                continue;
            }
            (column.cells)(index, &mut self.buffer).map_err(|why| {
                parquet_error(
                    self.path,
                    format!("row {row}, column {:?}: {why}", field.name()),
                )
            })?;
        }
        if self.buffer.len() == start {
            // A lone null cell would be a blank line, which CSV readers skip.
            return Err(parquet_error(
                self.path,
                format!(
                    "row {row} is a single null cell, which the CSV-based data path cannot carry; \
                     a one-column table's column must be its key"
                ),
            ));
        }
        self.buffer.push(b'\n');
        if self.buffer.len() >= WRITE_CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DataError> {
        self.out
            .write_all(&self.buffer)
            .map_err(|source| DataError::Io {
                path: self.path.to_path_buf(),
                action: "writing its intermediate CSV copy",
                source,
            })?;
        self.buffer.clear();
        Ok(())
    }

    fn finish(mut self) -> Result<(), DataError> {
        self.flush()?;
        self.out.flush().map_err(|source| DataError::Io {
            path: self.path.to_path_buf(),
            action: "writing its intermediate CSV copy",
            source,
        })
    }
}
