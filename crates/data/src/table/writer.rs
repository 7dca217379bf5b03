//! The output table: the rows a run keeps, written in the output's format from however the
//! input's rows are carried ([`Columns`]).

use crate::error::DataError;
use crate::spec::TableFormat;
use crate::table::output::{AtomicFile, Sink};
use crate::table::parquet_io::{ParquetWriter, TypedRowWriter};
use arrow_schema::SchemaRef;
use std::path::{Path, PathBuf};

/// Bytes of CSV text gathered before each write.
const WRITE_CHUNK: usize = 1 << 20;

/// The text a CSV input's padding cells are given on their way to a Parquet output, which reads
/// it back as null: no cell of a CSV row is written as exactly this by the pipeline.
const PARQUET_PADDING: &str = "NULL";

/// A table's columns, and with them how the data path carries its rows: a CSV input's row is
/// its line as in the file; a Parquet input's is a typed row of its Arrow schema
/// ([`crate::table::parquet_io`]).
#[derive(Clone, Debug, Default)]
pub struct Columns {
    /// Column names.
    pub header: Vec<String>,
    /// The Arrow schema of a Parquet input; `None` for CSV.
    pub schema: Option<SchemaRef>,
}

impl Columns {
    /// A CSV table's columns.
    pub fn csv(header: Vec<String>) -> Columns {
        Columns {
            header,
            schema: None,
        }
    }
}

/// The output being written: nothing appears at its path before [`commit`](Self::commit).
pub struct RowWriter {
    out: Out,
    path: PathBuf,
    rows: u64,
}

enum Out {
    /// CSV rows to a CSV file.
    Csv(CsvText<AtomicFile>),
    /// CSV rows to a Parquet file of text columns.
    CsvAsParquet(Box<CsvText<ParquetWriter>>),
    /// Typed rows to a Parquet or CSV file.
    Typed(Box<TypedRowWriter>),
}

/// CSV lines gathered for a byte sink.
struct CsvText<W> {
    sink: W,
    text: Vec<u8>,
    /// A padding row's line.
    null_line: Vec<u8>,
}

impl<W> CsvText<W> {
    fn new(sink: W, header: &[String], null_rep: &str) -> Self {
        let mut text = Vec::with_capacity(WRITE_CHUNK + WRITE_CHUNK / 4);
        crate::table::csv::write_record(&mut text, header.iter().map(|h| h.as_bytes()));
        let mut null_line = Vec::new();
        crate::table::csv::write_record(&mut null_line, header.iter().map(|_| null_rep.as_bytes()));
        CsvText {
            sink,
            text,
            null_line,
        }
    }
}

/// Where gathered CSV text goes.
trait TextSink {
    fn put(&mut self, bytes: &[u8], path: &Path) -> Result<(), DataError>;
}

impl TextSink for AtomicFile {
    fn put(&mut self, bytes: &[u8], _: &Path) -> Result<(), DataError> {
        self.write_all(bytes)
    }
}

impl TextSink for ParquetWriter {
    fn put(&mut self, bytes: &[u8], path: &Path) -> Result<(), DataError> {
        std::io::Write::write_all(self, bytes).map_err(|e| {
            self.take_error()
                .unwrap_or_else(|| DataError::ParquetOutput {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })
        })
    }
}

impl<W: TextSink> CsvText<W> {
    fn line(&mut self, line: &[u8], path: &Path) -> Result<(), DataError> {
        self.text.extend_from_slice(line);
        self.text.push(b'\n');
        self.flush_full(path)
    }

    fn nulls(&mut self, n: u64, path: &Path) -> Result<(), DataError> {
        for _ in 0..n {
            self.text.extend_from_slice(&self.null_line);
            self.flush_full(path)?;
        }
        Ok(())
    }

    fn flush_full(&mut self, path: &Path) -> Result<(), DataError> {
        if self.text.len() >= WRITE_CHUNK {
            self.sink.put(&self.text, path)?;
            self.text.clear();
        }
        Ok(())
    }

    fn finish(mut self, path: &Path) -> Result<W, DataError> {
        self.sink.put(&self.text, path)?;
        Ok(self.sink)
    }
}

impl RowWriter {
    /// Starts writing the output table at `path` in `format`, for rows carried as `columns`
    /// says. `null_rep` is the text of a CSV output's padding cells; a Parquet output's are null.
    ///
    /// # Errors
    /// The output cannot be created.
    pub fn create(
        path: &Path,
        format: TableFormat,
        columns: &Columns,
        null_rep: &str,
    ) -> Result<RowWriter, DataError> {
        let parquet = format == TableFormat::Parquet;
        let out = match (&columns.schema, parquet) {
            (Some(schema), _) => Out::Typed(Box::new(TypedRowWriter::create(
                path, schema, parquet, null_rep,
            )?)),
            (None, false) => Out::Csv(CsvText::new(
                AtomicFile::create(path)?,
                &columns.header,
                null_rep,
            )),
            (None, true) => Out::CsvAsParquet(Box::new(CsvText::new(
                ParquetWriter::create(path, PARQUET_PADDING)?,
                &columns.header,
                PARQUET_PADDING,
            ))),
        };
        Ok(RowWriter {
            out,
            path: path.to_path_buf(),
            rows: 0,
        })
    }

    /// Appends `n` padding rows.
    ///
    /// # Errors
    /// Writing failed.
    pub fn nulls(&mut self, n: u64) -> Result<(), DataError> {
        self.rows += n;
        match &mut self.out {
            Out::Csv(t) => t.nulls(n, &self.path),
            Out::CsvAsParquet(t) => t.nulls(n, &self.path),
            Out::Typed(w) => w.nulls(n),
        }
    }

    /// Writes what remains and moves the file into place; returns the rows written (data and
    /// padding).
    ///
    /// # Errors
    /// Writing or finishing the output failed.
    pub fn commit(self) -> Result<u64, DataError> {
        match self.out {
            Out::Csv(t) => t.finish(&self.path)?.commit()?,
            Out::CsvAsParquet(t) => {
                t.finish(&self.path)?.commit()?;
            }
            Out::Typed(w) => {
                w.commit()?;
            }
        }
        Ok(self.rows)
    }
}

impl Sink for RowWriter {
    fn row(&mut self, row: &[u8]) -> Result<(), DataError> {
        self.rows += 1;
        match &mut self.out {
            Out::Csv(t) => t.line(row, &self.path),
            Out::CsvAsParquet(t) => t.line(row, &self.path),
            Out::Typed(w) => w.row(row),
        }
    }
}
