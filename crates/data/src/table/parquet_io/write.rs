//! A CSV input's output rows as Parquet ([`ParquetWriter`]), and the Parquet file every output
//! is written through ([`ParquetFile`]).

use super::BATCH_ROWS;
use super::record_splitter::{Record, RecordSplitter};
use crate::error::DataError;
use crate::table::output::AtomicFile;
use arrow_array::builder::StringBuilder;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows per row group of the output. The writer holds a whole row group, encoded, in memory;
/// 256Ki rows bounds that while keeping row groups large enough for readers (polars' default).
pub(super) const ROW_GROUP_ROWS: usize = 256 * 1024;

/// The longest cell text quoted in an error message, in characters.
const MAX_QUOTED_VALUE: usize = 100;

/// Writes a CSV input's output rows as Parquet: one nullable Utf8 column per CSV column, named
/// from the header.
///
/// Receives, through [`Write`], a header record and then data records, split across `write`
/// calls in any way (a quoted field may be cut anywhere). Parses them incrementally and writes
/// row groups through [`ArrowWriter`] (snappy) into an [`AtomicFile`]: the file appears only on
/// [`commit`](Self::commit), and a writer dropped or failed before that leaves nothing behind.
///
/// A cell is null when it is unquoted and empty, or when it is exactly what the pipeline writes
/// for a padding cell (`null_rep`, quoted only if it needs quotes); any other cell is a value.
///
/// A `write` that fails returns an [`std::io::Error`] carrying the message; the typed
/// [`DataError`] comes from [`commit`](Self::commit).
pub struct ParquetWriter {
    splitter: RecordSplitter,
    rows: RowSink,
    failed: Option<DataError>,
}

impl ParquetWriter {
    /// Starts writing what will become `path`. `null_rep` is the text of padding cells.
    ///
    /// # Errors
    /// [`DataError::Io`] if the output cannot be created.
    pub fn create(path: &Path, null_rep: &str) -> Result<ParquetWriter, DataError> {
        let file = AtomicFile::create(path)?;
        Ok(ParquetWriter {
            splitter: RecordSplitter::default(),
            rows: RowSink {
                path: path.to_path_buf(),
                null_rep: null_rep.to_owned(),
                state: SinkState::AwaitingHeader(file),
                rows: 0,
            },
            failed: None,
        })
    }

    /// Ends the last record, writes the remaining rows and the Parquet footer, and moves the
    /// file into place. Returns the number of data rows.
    ///
    /// # Errors
    /// The first error met while writing (malformed CSV, a header that does not match the
    /// schema, a cell that does not parse as its column's type, I/O), or one while finishing.
    pub fn commit(mut self) -> Result<u64, DataError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.splitter.finish(&mut self.rows)?;
        self.rows.finish()
    }

    /// The typed error behind a failed `write` (the `io::Error` only carries its text).
    pub fn take_error(&mut self) -> Option<DataError> {
        self.failed.take()
    }
}

impl Write for ParquetWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(e) = &self.failed {
            return Err(std::io::Error::other(e.to_string()));
        }
        match self.splitter.feed(buf, &mut self.rows) {
            Ok(()) => Ok(buf.len()),
            Err(e) => {
                let io = std::io::Error::other(e.to_string());
                self.failed = Some(e);
                Err(io)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Receives records: the header first, which fixes the columns, then rows.
pub(super) struct RowSink {
    path: PathBuf,
    null_rep: String,
    state: SinkState,
    /// Data rows received.
    rows: u64,
}

enum SinkState {
    AwaitingHeader(AtomicFile),
    Writing(Box<TableWriter>),
    /// After a failure or after finishing; nothing more is accepted.
    Done,
}

impl RowSink {
    pub(super) fn record(&mut self, record: &Record<'_>) -> Result<(), DataError> {
        match std::mem::replace(&mut self.state, SinkState::Done) {
            SinkState::AwaitingHeader(file) => {
                let table = self.start(record, file)?;
                self.state = SinkState::Writing(Box::new(table));
                Ok(())
            }
            SinkState::Writing(mut table) => {
                self.rows += 1;
                table.push(self.rows, record, &self.path)?;
                self.state = SinkState::Writing(table);
                Ok(())
            }
            SinkState::Done => Err(self.output_error("the writer has already failed".into())),
        }
    }

    /// Opens the Parquet writer with a text column for each header field.
    fn start(&self, header: &Record<'_>, file: AtomicFile) -> Result<TableWriter, DataError> {
        let names: Vec<String> = header
            .iter()
            .map(|(name, _)| String::from_utf8_lossy(name).into_owned())
            .collect();
        let schema = Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(n, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        TableWriter::new(schema, NullRule::new(&self.null_rep, names.len()), file)
            .map_err(|e| self.output_error(e.to_string()))
    }

    fn finish(&mut self) -> Result<u64, DataError> {
        match std::mem::replace(&mut self.state, SinkState::Done) {
            SinkState::Writing(table) => {
                table.finish(&self.path)?;
                Ok(self.rows)
            }
            SinkState::AwaitingHeader(_) => {
                Err(self.output_error("the joined CSV has no header row".into()))
            }
            SinkState::Done => Err(self.output_error("the writer has already failed".into())),
        }
    }

    pub(super) fn output_error(&self, message: String) -> DataError {
        DataError::ParquetOutput {
            path: self.path.clone(),
            message,
        }
    }
}

/// A Parquet input's schema for its output: every field nullable (padding rows are all null),
/// after checking that `header` names its columns in order. Drops the `pandas` metadata, whose
/// index description (a range of row numbers) no longer fits the rows.
pub(super) fn output_schema(input: &Schema, header: &[String]) -> Result<SchemaRef, String> {
    let names: Vec<&String> = input.fields().iter().map(|f| f.name()).collect();
    if names.len() != header.len() || names.iter().zip(header).any(|(a, b)| *a != b) {
        return Err(format!(
            "the joined CSV's header {header:?} does not match the columns of the input's \
             Parquet schema {names:?}"
        ));
    }
    let fields: Vec<Field> = input
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let mut metadata = input.metadata().clone();
    metadata.remove("pandas");
    Ok(Arc::new(Schema::new_with_metadata(fields, metadata)))
}

/// When a parsed cell is null: unquoted and empty, or written exactly as the pipeline writes
/// a padding cell (`null_rep` through [`crate::table::csv::write_record`]).
struct NullRule {
    null_rep: Vec<u8>,
    quoted: bool,
}

impl NullRule {
    fn new(null_rep: &str, columns: usize) -> NullRule {
        let mut padding = Vec::new();
        crate::table::csv::write_record(
            &mut padding,
            std::iter::repeat_n(null_rep.as_bytes(), columns.max(1)),
        );
        NullRule {
            null_rep: null_rep.as_bytes().to_vec(),
            quoted: padding.first() == Some(&b'"'),
        }
    }

    fn is_null(&self, value: &[u8], quoted: bool) -> bool {
        (!quoted && value.is_empty()) || (quoted == self.quoted && value == self.null_rep)
    }
}

/// Buffers rows as Arrow columns and writes them as record batches.
struct TableWriter {
    schema: SchemaRef,
    columns: Vec<StringBuilder>,
    null: NullRule,
    buffered: usize,
    file: ParquetFile,
}

impl TableWriter {
    fn new(schema: SchemaRef, null: NullRule, file: AtomicFile) -> Result<TableWriter, ArrowError> {
        let columns = schema
            .fields()
            .iter()
            .map(|_| StringBuilder::new())
            .collect();
        Ok(TableWriter {
            file: ParquetFile::new(schema.clone(), file)?,
            schema,
            columns,
            null,
            buffered: 0,
        })
    }

    /// Appends data row `row` (1-based).
    fn push(&mut self, row: u64, record: &Record<'_>, path: &Path) -> Result<(), DataError> {
        if record.len() != self.columns.len() {
            return Err(DataError::ParquetOutput {
                path: path.to_path_buf(),
                message: format!(
                    "row {row} of the joined CSV has {} fields but the header has {}",
                    record.len(),
                    self.columns.len()
                ),
            });
        }
        let cells = record
            .iter()
            .zip(&mut self.columns)
            .zip(self.schema.fields());
        for (((value, quoted), column), field) in cells {
            if self.null.is_null(value, quoted) {
                column.append_null();
                continue;
            }
            let text = std::str::from_utf8(value).map_err(|_| DataError::ParquetValue {
                path: path.to_path_buf(),
                row,
                column: field.name().clone(),
                value: String::from_utf8_lossy(value)
                    .chars()
                    .take(MAX_QUOTED_VALUE)
                    .collect(),
                expected: field.data_type().to_string(),
            })?;
            column.append_value(text);
        }
        self.buffered += 1;
        if self.buffered == BATCH_ROWS {
            self.write_batch(path)?;
        }
        Ok(())
    }

    fn write_batch(&mut self, path: &Path) -> Result<(), DataError> {
        let arrays = self
            .columns
            .iter_mut()
            .map(|c| Arc::new(c.finish()) as ArrayRef)
            .collect();
        self.buffered = 0;
        self.file.write(arrays, path)
    }

    fn finish(mut self: Box<Self>, path: &Path) -> Result<(), DataError> {
        if self.buffered > 0 {
            self.write_batch(path)?;
        }
        self.file.finish(path)
    }
}

/// A Parquet file being written from record batches (snappy, row groups of
/// [`ROW_GROUP_ROWS`]), which appears at its path only when finished.
pub(super) struct ParquetFile {
    schema: SchemaRef,
    writer: ArrowWriter<AtomicSink>,
}

impl ParquetFile {
    pub(super) fn new(schema: SchemaRef, file: AtomicFile) -> Result<ParquetFile, ArrowError> {
        let properties = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_size(ROW_GROUP_ROWS)
            .build();
        let sink = AtomicSink { file, failed: None };
        let writer = ArrowWriter::try_new(sink, schema.clone(), Some(properties))
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
        Ok(ParquetFile { schema, writer })
    }

    /// Writes one batch of the file's schema.
    pub(super) fn write(&mut self, arrays: Vec<ArrayRef>, path: &Path) -> Result<(), DataError> {
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| encoder_error(path, &e))?;
        self.writer
            .write(&batch)
            .map_err(|e| self.write_error(path, &e))
    }

    /// Writes the footer and moves the file into place.
    pub(super) fn finish(mut self, path: &Path) -> Result<(), DataError> {
        self.writer
            .flush()
            .map_err(|e| self.write_error(path, &e))?;
        // Writes the footer; on failure the sink (and the temporary file) is dropped.
        let sink = self
            .writer
            .into_inner()
            .map_err(|e| encoder_error(path, &e))?;
        sink.file.commit()
    }

    /// The sink's own error when the Parquet writer failed because the disk did.
    fn write_error(&mut self, path: &Path, error: &parquet::errors::ParquetError) -> DataError {
        self.writer
            .inner_mut()
            .failed
            .take()
            .unwrap_or_else(|| encoder_error(path, error))
    }
}

pub(super) fn encoder_error(path: &Path, error: &dyn std::fmt::Display) -> DataError {
    DataError::ParquetOutput {
        path: path.to_path_buf(),
        message: error.to_string(),
    }
}

/// Lets [`ArrowWriter`] write into an [`AtomicFile`], keeping the typed error of a failed
/// write.
struct AtomicSink {
    file: AtomicFile,
    failed: Option<DataError>,
}

impl Write for AtomicSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.file.write_all(buf) {
            Ok(()) => Ok(buf.len()),
            Err(e) => {
                let io = std::io::Error::other(e.to_string());
                self.failed = Some(e);
                Err(io)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
