//! Output from a Parquet input's typed rows ([`super::typed_rows`]): Arrow batches written as
//! Parquet with the input's column types, or as CSV with the cell text of the
//! [module docs](super).

use super::BATCH_ROWS;
use super::column_text::ColumnText;
use super::typed_rows::RowDecoder;
use super::write::{ParquetFile, encoder_error, output_schema};
use crate::error::DataError;
use crate::table::output::AtomicFile;
use arrow_schema::SchemaRef;
use std::path::{Path, PathBuf};

/// Bytes of CSV text gathered before each write to the file.
const WRITE_CHUNK: usize = 1 << 20;

/// Writes typed rows of one schema to a Parquet or CSV output, atomically: nothing appears at
/// the path before [`commit`](Self::commit).
pub struct TypedRowWriter {
    path: PathBuf,
    schema: SchemaRef,
    decoder: RowDecoder,
    out: Out,
    /// Rows written (data and padding).
    rows: u64,
}

enum Out {
    Parquet {
        file: Box<ParquetFile>,
        /// The bytes of an all-null row (padding).
        null_row: Vec<u8>,
    },
    Csv {
        file: AtomicFile,
        text: Vec<u8>,
        /// The text of a padding row (`null_rep` in every cell), with its line end.
        null_line: Vec<u8>,
    },
}

impl TypedRowWriter {
    /// Starts writing what will become `path` from rows encoded under `schema` (the input's).
    /// As Parquet the output keeps the input's column types, made nullable (padding rows are
    /// null); as CSV (`parquet = false`) padding cells are `null_rep`.
    ///
    /// # Errors
    /// The output cannot be created; a column type that cannot be carried.
    pub fn create(
        path: &Path,
        schema: &SchemaRef,
        parquet: bool,
        null_rep: &str,
    ) -> Result<TypedRowWriter, DataError> {
        let decoder = RowDecoder::new(path, schema)?;
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let file = AtomicFile::create(path)?;
        let out = if parquet {
            let encoder = super::typed_rows::RowEncoder::new(path, schema)?;
            let output = output_schema(schema, &names).map_err(|m| encoder_error(path, &m))?;
            Out::Parquet {
                file: Box::new(
                    ParquetFile::new(output, file).map_err(|e| encoder_error(path, &e))?,
                ),
                null_row: encoder.null_row(),
            }
        } else {
            let mut text = Vec::with_capacity(WRITE_CHUNK + WRITE_CHUNK / 4);
            crate::table::csv::write_record(&mut text, names.iter().map(|n| n.as_bytes()));
            let mut null_line = Vec::new();
            crate::table::csv::write_record(
                &mut null_line,
                names.iter().map(|_| null_rep.as_bytes()),
            );
            Out::Csv {
                file,
                text,
                null_line,
            }
        };
        Ok(TypedRowWriter {
            path: path.to_path_buf(),
            schema: schema.clone(),
            decoder,
            out,
            rows: 0,
        })
    }

    /// Appends one row.
    ///
    /// # Errors
    /// A damaged row; writing failed.
    pub fn row(&mut self, row: &[u8]) -> Result<(), DataError> {
        self.decoder
            .push(row)
            .map_err(|e| encoder_error(&self.path, &e))?;
        self.rows += 1;
        if self.decoder.len() == BATCH_ROWS {
            self.write_batch()?;
        }
        Ok(())
    }

    /// Appends `n` padding rows (every cell null).
    ///
    /// # Errors
    /// Writing failed.
    pub fn nulls(&mut self, n: u64) -> Result<(), DataError> {
        match &self.out {
            Out::Parquet { null_row, .. } => {
                let null_row = null_row.clone();
                for _ in 0..n {
                    self.row(&null_row)?;
                }
            }
            Out::Csv { .. } => {
                // Rows before the padding go first.
                self.write_batch()?;
                if let Out::Csv {
                    file,
                    text,
                    null_line,
                } = &mut self.out
                {
                    for _ in 0..n {
                        text.extend_from_slice(null_line);
                        if text.len() >= WRITE_CHUNK {
                            file.write_all(text)?;
                            text.clear();
                        }
                    }
                }
                self.rows += n;
            }
        }
        Ok(())
    }

    /// Writes the rows held so far.
    fn write_batch(&mut self) -> Result<(), DataError> {
        if self.decoder.len() == 0 {
            return Ok(());
        }
        let n = self.decoder.len();
        let arrays = self
            .decoder
            .finish()
            .map_err(|e| encoder_error(&self.path, &e))?;
        match &mut self.out {
            Out::Parquet { file, .. } => file.write(arrays, &self.path),
            Out::Csv { file, text, .. } => {
                let columns = arrays
                    .iter()
                    .zip(self.schema.fields())
                    .map(|(array, field)| ColumnText::new(&self.path, field, array))
                    .collect::<Result<Vec<_>, _>>()?;
                let first = self.rows - n as u64;
                for index in 0..n {
                    for (c, (column, field)) in columns.iter().zip(self.schema.fields()).enumerate()
                    {
                        if c > 0 {
                            text.push(b',');
                        }
                        if column.is_null(index) {
                            continue;
                        }
                        (column.cells)(index, text).map_err(|why| DataError::ParquetOutput {
                            path: self.path.clone(),
                            message: format!(
                                "row {}, column {:?}: {why}",
                                first + index as u64 + 1,
                                field.name()
                            ),
                        })?;
                    }
                    text.push(b'\n');
                    if text.len() >= WRITE_CHUNK {
                        file.write_all(text)?;
                        text.clear();
                    }
                }
                Ok(())
            }
        }
    }

    /// Writes what remains and moves the file into place; returns the rows written.
    ///
    /// # Errors
    /// Writing or finishing the file failed.
    pub fn commit(mut self) -> Result<u64, DataError> {
        self.write_batch()?;
        match self.out {
            Out::Parquet { file, .. } => file.finish(&self.path)?,
            Out::Csv { mut file, text, .. } => {
                file.write_all(&text)?;
                file.commit()?;
            }
        }
        Ok(self.rows)
    }
}
