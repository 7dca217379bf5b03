//! The incremental CSV record parser behind [`ParquetWriter`](super::ParquetWriter).

use super::write::RowSink;
use crate::error::DataError;

/// Where a field of the current record ends in [`RecordSplitter::values`].
#[derive(Clone, Copy)]
struct FieldEnd {
    end: usize,
    quoted: bool,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum ParseState {
    /// At the start of a field (also of a record).
    #[default]
    FieldStart,
    Unquoted,
    Quoted,
    /// Just after a `"` inside a quoted field: an escaped quote or the closing one.
    QuoteInQuoted,
    /// After a CR outside quotes, which must be followed by LF.
    CarriageReturn,
}

/// Splits CSV bytes, fed in arbitrary pieces, into records (RFC 4180 as in [`crate::table::csv`]:
/// LF or CRLF line ends, blank lines skipped).
#[derive(Default)]
pub(super) struct RecordSplitter {
    state: ParseState,
    /// The unescaped values of the current record's fields, back to back.
    values: Vec<u8>,
    fields: Vec<FieldEnd>,
    /// Whether the field being read is quoted.
    quoted: bool,
    /// Records completed (the header is record 1).
    records: u64,
}

impl RecordSplitter {
    pub(super) fn feed(&mut self, bytes: &[u8], sink: &mut RowSink) -> Result<(), DataError> {
        let mut rest = bytes;
        while !rest.is_empty() {
            rest = match self.state {
                ParseState::Quoted => {
                    let n = rest.iter().position(|&b| b == b'"').unwrap_or(rest.len());
                    let (run, tail) = rest.split_at(n);
                    self.values.extend_from_slice(run);
                    match tail.split_first() {
                        Some((_, tail)) => {
                            self.state = ParseState::QuoteInQuoted;
                            tail
                        }
                        None => tail,
                    }
                }
                ParseState::Unquoted => {
                    let n = rest
                        .iter()
                        .position(|&b| matches!(b, b',' | b'\n' | b'\r' | b'"'))
                        .unwrap_or(rest.len());
                    let (run, tail) = rest.split_at(n);
                    self.values.extend_from_slice(run);
                    match tail.split_first() {
                        Some((&b, tail)) => {
                            self.delimiter(b, sink)?;
                            tail
                        }
                        None => tail,
                    }
                }
                _ => match rest.split_first() {
                    Some((&b, tail)) => {
                        self.byte(b, sink)?;
                        tail
                    }
                    None => rest,
                },
            };
        }
        Ok(())
    }

    /// One byte in the states that look at single bytes.
    fn byte(&mut self, b: u8, sink: &mut RowSink) -> Result<(), DataError> {
        match (self.state, b) {
            (ParseState::FieldStart, b'"') => {
                self.quoted = true;
                self.state = ParseState::Quoted;
            }
            (ParseState::FieldStart, b',' | b'\n' | b'\r') => self.delimiter(b, sink)?,
            (ParseState::FieldStart, _) => {
                self.values.push(b);
                self.state = ParseState::Unquoted;
            }
            (ParseState::QuoteInQuoted, b'"') => {
                self.values.push(b'"');
                self.state = ParseState::Quoted;
            }
            (ParseState::QuoteInQuoted, b',' | b'\n' | b'\r') => self.delimiter(b, sink)?,
            (ParseState::QuoteInQuoted, _) => {
                return Err(self.syntax(sink, "a character follows a closing quote"));
            }
            (ParseState::CarriageReturn, b'\n') => self.end_record(sink)?,
            (ParseState::CarriageReturn, _) => {
                return Err(self.syntax(sink, "a carriage return is not followed by a line feed"));
            }
            // `feed` scans these states in runs; handled here too for completeness.
            (ParseState::Unquoted, b',' | b'\n' | b'\r' | b'"') => self.delimiter(b, sink)?,
            (ParseState::Quoted, b'"') => self.state = ParseState::QuoteInQuoted,
            (ParseState::Unquoted | ParseState::Quoted, _) => self.values.push(b),
        }
        Ok(())
    }

    /// A `,`, CR, LF or (an error) `"` that ends an unquoted run.
    fn delimiter(&mut self, b: u8, sink: &mut RowSink) -> Result<(), DataError> {
        match b {
            b',' => {
                self.end_field();
                self.state = ParseState::FieldStart;
            }
            b'\n' => self.end_record(sink)?,
            b'\r' => self.state = ParseState::CarriageReturn,
            _ => return Err(self.syntax(sink, "a quote inside an unquoted field")),
        }
        Ok(())
    }

    fn end_field(&mut self) {
        self.fields.push(FieldEnd {
            end: self.values.len(),
            quoted: self.quoted,
        });
        self.quoted = false;
    }

    fn end_record(&mut self, sink: &mut RowSink) -> Result<(), DataError> {
        self.state = ParseState::FieldStart;
        let blank = self.fields.is_empty() && self.values.is_empty() && !self.quoted;
        if blank {
            return Ok(());
        }
        self.end_field();
        self.records += 1;
        let record = Record {
            values: &self.values,
            fields: &self.fields,
        };
        sink.record(&record)?;
        self.values.clear();
        self.fields.clear();
        Ok(())
    }

    /// Ends the last record, which may lack its line end.
    pub(super) fn finish(&mut self, sink: &mut RowSink) -> Result<(), DataError> {
        match self.state {
            ParseState::Quoted => Err(self.syntax(sink, "a quoted field is never closed")),
            ParseState::CarriageReturn => {
                Err(self.syntax(sink, "a carriage return is not followed by a line feed"))
            }
            _ => self.end_record(sink),
        }
    }

    fn syntax(&self, sink: &RowSink, what: &str) -> DataError {
        sink.output_error(format!(
            "record {} of the joined CSV is malformed: {what}",
            self.records + 1
        ))
    }
}

/// One parsed record: its fields' unescaped values and whether each was quoted.
pub(super) struct Record<'a> {
    values: &'a [u8],
    fields: &'a [FieldEnd],
}

impl Record<'_> {
    pub(super) fn len(&self) -> usize {
        self.fields.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], bool)> + '_ {
        let starts = std::iter::once(0).chain(self.fields.iter().map(|f| f.end));
        starts
            .zip(self.fields)
            .map(|(start, f)| (self.values.get(start..f.end).unwrap_or_default(), f.quoted))
    }
}
