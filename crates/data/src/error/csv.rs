//! [`CsvError`]: what is wrong in a CSV input, with the file and position.

use std::path::PathBuf;

/// An error in the CSV input. Every variant names the file and the position
/// of the problem, and its message says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CsvError {
    /// The file has no header row: it is empty, or holds only a byte order
    /// mark and/or blank lines.
    #[error(
        "{}: the file is empty (no header row); a CSV file must start with a line naming its columns",
        path.display()
    )]
    EmptyFile {
        /// The file.
        path: PathBuf,
    },

    /// A header name is not valid UTF-8.
    #[error(
        "{}:{line}:{column}: name of column {field} is not valid UTF-8; re-save the file with UTF-8 encoding",
        path.display()
    )]
    InvalidUtf8Header {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: u64,
        /// 1-based byte column of the first invalid byte.
        column: u64,
        /// 1-based index of the header field.
        field: usize,
    },

    /// Two header fields have the same name.
    #[error(
        "{}:{line}: duplicate column name {name:?} (header columns {first_column} and {column}); rename one so every column name is unique",
        path.display()
    )]
    DuplicateColumn {
        /// The file.
        path: PathBuf,
        /// 1-based line on which the header starts.
        line: u64,
        /// The repeated name.
        name: String,
        /// 1-based index of the first column with this name.
        first_column: usize,
        /// 1-based index of the repeated column.
        column: usize,
    },

    /// A carriage return outside quotes is not followed by a line feed.
    #[error(
        "{}:{line}:{column}: carriage return (\\r) not followed by a line feed outside a quoted field; use LF or CRLF line endings, or quote the field containing it",
        path.display()
    )]
    BareCarriageReturn {
        /// The file.
        path: PathBuf,
        /// 1-based line of the carriage return.
        line: u64,
        /// 1-based byte column of the carriage return.
        column: u64,
    },

    /// A `"` appears inside a field that does not start with a quote.
    #[error(
        "{}:{line}:{column}: quote character inside unquoted field {field}; enclose the whole field in quotes and double the quotes inside it (ab\"c -> \"ab\"\"c\")",
        path.display()
    )]
    QuoteInUnquotedField {
        /// The file.
        path: PathBuf,
        /// 1-based line of the quote.
        line: u64,
        /// 1-based byte column of the quote.
        column: u64,
        /// 1-based index of the field within its record.
        field: usize,
    },

    /// Something other than `,`, a line ending or the end of the file
    /// follows the closing quote of a quoted field.
    #[error(
        "{}:{line}:{column}: unexpected character after the closing quote of field {field}; a quoted field must be followed by a comma or a line ending, and quotes inside it must be doubled (\"\")",
        path.display()
    )]
    CharactersAfterClosingQuote {
        /// The file.
        path: PathBuf,
        /// 1-based line of the unexpected character.
        line: u64,
        /// 1-based byte column of the unexpected character.
        column: u64,
        /// 1-based index of the field within its record.
        field: usize,
    },

    /// The file ends inside a quoted field.
    #[error(
        "{}:{line}:{column}: unterminated quoted field {field} (the quote opened here never closes); check for a stray '\"' or add the missing closing quote",
        path.display()
    )]
    UnterminatedQuote {
        /// The file.
        path: PathBuf,
        /// 1-based line of the opening quote.
        line: u64,
        /// 1-based byte column of the opening quote.
        column: u64,
        /// 1-based index of the field within its record.
        field: usize,
    },

    /// A record does not have as many fields as the header.
    #[error(
        "{}:{line}:{column}: {} has {found} fields but the header has {expected}; check for a missing or extra comma, and quote fields that contain commas",
        path.display(),
        record_description(*record_line, *line)
    )]
    FieldCount {
        /// The file.
        path: PathBuf,
        /// 1-based line of the problem: where the first surplus field starts
        /// (too many fields) or where the record ends (too few). Equal to
        /// `record_line` unless the record spans several lines.
        line: u64,
        /// 1-based byte column of the problem (see `line`).
        column: u64,
        /// 1-based line on which the record starts.
        record_line: u64,
        /// Number of header columns.
        expected: usize,
        /// Number of fields in the record.
        found: usize,
    },
}

fn record_description(record_line: u64, line: u64) -> String {
    if record_line == line {
        "record".to_owned()
    } else {
        format!("record starting on line {record_line}")
    }
}
