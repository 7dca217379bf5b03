//! A strict, fast RFC 4180 CSV reader over an in-memory byte slice, with
//! exact error positions, plus a small writer helper.
//!
//! # Dialect
//!
//! * Separator `,`, quote `"`, escaped quote `""` inside a quoted field.
//! * A header row is required. A file with no header (0 bytes, only a UTF-8
//!   BOM, or only blank lines) is [`CsvError::EmptyFile`]. A header-only file
//!   is a valid table with zero records.
//! * A UTF-8 byte order mark (`EF BB BF`) at the very start is skipped; it is
//!   not counted in column numbers.
//! * Records end with LF or CRLF (both may be mixed in one file). The last
//!   record may lack a terminator. Outside quotes, a CR that is not directly
//!   followed by LF is [`CsvError::BareCarriageReturn`]. Inside quotes, CR and
//!   LF are ordinary data.
//! * **Blank lines are skipped** everywhere outside quoted fields: a
//!   zero-length line, or a line consisting only of `\r` before its `\n`.
//!   Consequently a record made of one empty unquoted field cannot exist; in a
//!   single-column table write an empty value as `""` (see [`write_record`]).
//! * A field is either unquoted (may not contain `"`, `,`, CR or LF) or starts
//!   with `"` and ends with the matching closing `"`, which must be followed
//!   by `,`, a line ending or the end of the file. Whitespace is never
//!   trimmed: ` "a"` is an unquoted field containing a quote, hence an error.
//! * Every record must have exactly as many fields as the header.
//! * Header names must be valid UTF-8 and unique (empty names are allowed,
//!   but at most once). Data fields are raw bytes and are not validated here:
//!   the caller validates the columns it uses.
//!
//! # Positions
//!
//! Lines are physical lines, 1-based, delimited by LF (a quoted field with
//! embedded newlines makes the next record start on a later line; a lone CR
//! inside quotes does not start a new line). Columns are 1-based **byte**
//! columns within the physical line (not characters). Field numbers in errors
//! are 1-based indices within the record.
//!
//! # Usage
//!
//! ```ignore
//! let mut reader = CsvReader::new(&bytes, path)?;
//! let key = reader.column_index("email").ok_or(..)?;
//! let mut fields = Vec::new();
//! while let Some(record) = reader.next_record(&mut fields)? {
//!     let raw_row = &bytes[record.start..record.end];   // byte-exact row
//!     let value = field_value(&bytes, &fields[key]);     // unescaped key
//! }
//! ```
//!
//! The parser keeps only `(offset, line, line start)` as state between
//! records, so a later streaming version can feed it buffer windows that
//! always begin at a record boundary.
#![deny(clippy::indexing_slicing)]

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The location of one field's content in the input.
///
/// `start..end` covers the content bytes only: for a quoted field the
/// surrounding quotes are excluded, but escaped quotes (`""`) are still
/// doubled. Use [`field_value`] to get the unescaped value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpan {
    /// Offset of the first content byte.
    pub start: usize,
    /// Offset one past the last content byte.
    pub end: usize,
    /// Whether the field was enclosed in quotes.
    pub quoted: bool,
}

/// The location of one raw record in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSpan {
    /// Offset of the record's first byte.
    pub start: usize,
    /// Offset one past the record's last byte; excludes the LF / CRLF
    /// terminator. `bytes[start..end]` is the row exactly as written.
    pub end: usize,
    /// 1-based physical line on which the record starts.
    pub line: u64,
}

pub use crate::error::CsvError;

/// Strict CSV reader over an in-memory file. See the [module docs](self)
/// for the accepted dialect.
///
/// After [`next_record`](Self::next_record) has returned an error, every
/// later call returns the same error again (the reader does not resync).
#[derive(Debug)]
pub struct CsvReader<'a> {
    bytes: &'a [u8],
    path: PathBuf,
    header: Vec<String>,
    header_line: u64,
    /// Offset of the next unread byte (always at a line start).
    pos: usize,
    /// 1-based line containing `pos`.
    line: u64,
    /// Offset of the first byte of line `line` (after the BOM on line 1).
    line_start: usize,
    failed: Option<CsvError>,
}

/// A record as found by the tokenizer, before the field-count check.
struct RawRecord {
    span: RecordSpan,
    /// Offset at which the record's first line starts (for [`locate`]).
    line_start: usize,
}

impl<'a> CsvReader<'a> {
    /// Parses the header. `path` is only used in error messages.
    pub fn new(bytes: &'a [u8], path: &Path) -> Result<Self, CsvError> {
        let start = if bytes.starts_with(BOM) { BOM.len() } else { 0 };
        let mut reader = CsvReader {
            bytes,
            path: path.to_path_buf(),
            header: Vec::new(),
            header_line: 1,
            pos: start,
            line: 1,
            line_start: start,
            failed: None,
        };
        let mut fields = Vec::new();
        let Some(raw) = reader.read_raw(&mut fields)? else {
            return Err(CsvError::EmptyFile { path: reader.path });
        };
        reader.header_line = raw.span.line;
        let mut header: Vec<String> = Vec::with_capacity(fields.len());
        let mut seen: HashMap<String, usize> = HashMap::with_capacity(fields.len());
        for (index, span) in fields.iter().enumerate() {
            let raw_content = bytes.get(span.start..span.end).unwrap_or_default();
            // `""` is ASCII, so the raw content is valid UTF-8 exactly when
            // the unescaped value is; this lets us report the raw position.
            if let Err(e) = std::str::from_utf8(raw_content) {
                let offset = span.start.saturating_add(e.valid_up_to());
                let (line, column) = locate(bytes, raw.span.line, raw.line_start, offset);
                return Err(CsvError::InvalidUtf8Header {
                    path: reader.path,
                    line,
                    column,
                    field: index + 1,
                });
            }
            let value = field_value(bytes, span);
            let name = String::from_utf8_lossy(&value).into_owned();
            if let Some(&first) = seen.get(name.as_str()) {
                return Err(CsvError::DuplicateColumn {
                    path: reader.path,
                    line: raw.span.line,
                    name,
                    first_column: first + 1,
                    column: index + 1,
                });
            }
            seen.insert(name.clone(), index);
            header.push(name);
        }
        reader.header = header;
        Ok(reader)
    }

    /// A reader for a later block of the same file, for streaming it block by block: `bytes`
    /// starts at a record boundary that is on physical line `line`, and its records have the
    /// columns `header` (already read from the file's start).
    pub fn resume(bytes: &'a [u8], path: &Path, header: &[String], line: u64) -> Self {
        CsvReader {
            bytes,
            path: path.to_path_buf(),
            header: header.to_vec(),
            header_line: 1,
            pos: 0,
            line,
            line_start: 0,
            failed: None,
        }
    }

    /// 1-based physical line of the next unread byte.
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The column names, in file order (never empty).
    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// 0-based index of the column named `name`, if any (names are unique).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    /// 1-based line on which the header starts (1 unless blank lines precede it).
    pub fn header_line(&self) -> u64 {
        self.header_line
    }

    /// The path used in error messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Offset of the next unread byte; useful for progress reporting.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Reads the next record, filling `fields` (cleared first) with one span
    /// per header column. Returns `Ok(None)` at the end of the input.
    ///
    /// On `Ok(Some(_))`, `fields.len() == self.header().len()` and every span
    /// lies inside the returned record span. `fields` is meant to be reused
    /// across calls, so the hot path does not allocate. On error its contents
    /// are unspecified.
    pub fn next_record(
        &mut self,
        fields: &mut Vec<FieldSpan>,
    ) -> Result<Option<RecordSpan>, CsvError> {
        if let Some(e) = &self.failed {
            fields.clear();
            return Err(e.clone());
        }
        let result = self.read_checked(fields);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn read_checked(
        &mut self,
        fields: &mut Vec<FieldSpan>,
    ) -> Result<Option<RecordSpan>, CsvError> {
        let Some(raw) = self.read_raw(fields)? else {
            return Ok(None);
        };
        let expected = self.header.len();
        if fields.len() == expected {
            return Ok(Some(raw.span));
        }
        // Cold path: point at the first surplus field, or at the record end.
        let offset = match fields.get(expected) {
            Some(extra) => extra.start.saturating_sub(usize::from(extra.quoted)),
            None => raw.span.end,
        };
        let (line, column) = locate(self.bytes, raw.span.line, raw.line_start, offset);
        Err(CsvError::FieldCount {
            path: self.path.clone(),
            line,
            column,
            record_line: raw.span.line,
            expected,
            found: fields.len(),
        })
    }

    fn column_of(&self, offset: usize) -> u64 {
        column_number(self.line_start, offset)
    }

    /// Consumes the line ending found at `at` (`\n`, or `\r` that must be
    /// followed by `\n`); returns the record end on success.
    fn finish_line(&mut self, at: usize) -> Result<usize, CsvError> {
        match self.bytes.get(at) {
            Some(b'\n') => self.pos = at + 1,
            Some(b'\r') if self.bytes.get(at + 1) == Some(&b'\n') => self.pos = at + 2,
            Some(b'\r') => {
                return Err(CsvError::BareCarriageReturn {
                    path: self.path.clone(),
                    line: self.line,
                    column: self.column_of(at),
                });
            }
            // End of input (the only other caller-possible case).
            _ => {
                self.pos = at;
                return Ok(at);
            }
        }
        self.line += 1;
        self.line_start = self.pos;
        Ok(at)
    }

    /// Tokenizes one record without checking the field count.
    fn read_raw(&mut self, fields: &mut Vec<FieldSpan>) -> Result<Option<RawRecord>, CsvError> {
        fields.clear();
        let bytes = self.bytes;
        // Skip blank lines.
        loop {
            match bytes.get(self.pos) {
                None => return Ok(None),
                Some(b'\n') => self.pos += 1,
                Some(b'\r') if bytes.get(self.pos + 1) == Some(&b'\n') => self.pos += 2,
                Some(_) => break,
            }
            self.line += 1;
            self.line_start = self.pos;
        }
        let record_start = self.pos;
        let record_line = self.line;
        let record_line_start = self.line_start;
        let mut pos = self.pos;
        let end = loop {
            let field = fields.len() + 1;
            if bytes.get(pos) == Some(&b'"') {
                let open = pos;
                let open_line = self.line;
                let open_column = self.column_of(open);
                let mut i = open + 1;
                let close = loop {
                    let rest = bytes.get(i..).unwrap_or_default();
                    let k = find_any(rest, [b'"', b'\n']);
                    if k == rest.len() {
                        return Err(CsvError::UnterminatedQuote {
                            path: self.path.clone(),
                            line: open_line,
                            column: open_column,
                            field,
                        });
                    }
                    i += k;
                    if bytes.get(i) == Some(&b'\n') {
                        i += 1;
                        self.line += 1;
                        self.line_start = i;
                    } else if bytes.get(i + 1) == Some(&b'"') {
                        i += 2; // escaped quote
                    } else {
                        break i;
                    }
                };
                fields.push(FieldSpan {
                    start: open + 1,
                    end: close,
                    quoted: true,
                });
                pos = close + 1;
                match bytes.get(pos) {
                    Some(b',') => pos += 1,
                    None | Some(b'\n' | b'\r') => break self.finish_line(pos)?,
                    Some(_) => {
                        return Err(CsvError::CharactersAfterClosingQuote {
                            path: self.path.clone(),
                            line: self.line,
                            column: self.column_of(pos),
                            field,
                        });
                    }
                }
            } else {
                let rest = bytes.get(pos..).unwrap_or_default();
                let len = find_any(rest, [b',', b'\n', b'\r', b'"']);
                let stop = pos + len;
                fields.push(FieldSpan {
                    start: pos,
                    end: stop,
                    quoted: false,
                });
                match bytes.get(stop) {
                    Some(b',') => pos = stop + 1,
                    Some(b'"') => {
                        return Err(CsvError::QuoteInUnquotedField {
                            path: self.path.clone(),
                            line: self.line,
                            column: self.column_of(stop),
                            field,
                        });
                    }
                    _ => break self.finish_line(stop)?,
                }
            }
        };
        Ok(Some(RawRecord {
            span: RecordSpan {
                start: record_start,
                end,
                line: record_line,
            },
            line_start: record_line_start,
        }))
    }
}

/// Index of the first byte of `rest` that is one of `stops`, or `rest.len()`.
///
/// Scans eight bytes at a time (SWAR): for a stop byte `c`, the lowest set
/// 0x80 bit of `zero_bytes(word ^ broadcast(c))` marks the first byte equal
/// to `c` (borrows can only cause false hits *above* a true hit).
#[inline(always)]
fn find_any<const N: usize>(rest: &[u8], stops: [u8; N]) -> usize {
    const LO: u64 = u64::from_ne_bytes([0x01; 8]);
    const HI: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut chunks = rest.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let Ok(word) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let x = u64::from_le_bytes(word);
        let mut hits = 0;
        for stop in stops {
            let v = x ^ (LO * u64::from(stop));
            hits |= v.wrapping_sub(LO) & !v & HI;
        }
        if hits != 0 {
            return offset + (hits.trailing_zeros() / 8) as usize;
        }
        offset += 8;
    }
    let tail = chunks.remainder();
    offset
        + tail
            .iter()
            .position(|b| stops.contains(b))
            .unwrap_or(tail.len())
}

fn column_number(line_start: usize, offset: usize) -> u64 {
    u64::try_from(offset.saturating_sub(line_start))
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

/// Line and column of `offset`, scanning forward from a known line start.
fn locate(bytes: &[u8], mut line: u64, mut line_start: usize, offset: usize) -> (u64, u64) {
    let scanned = bytes.get(line_start..offset).unwrap_or_default();
    let base = line_start;
    for (k, &b) in scanned.iter().enumerate() {
        if b == b'\n' {
            line += 1;
            line_start = base + k + 1;
        }
    }
    (line, column_number(line_start, offset))
}

/// The field's value: borrowed when it contains no escaped quotes, owned
/// when `""` had to be collapsed to `"`.
///
/// A span that is out of range for `bytes` (e.g. from another input) yields
/// an empty value rather than panicking.
pub fn field_value<'a>(bytes: &'a [u8], span: &FieldSpan) -> Cow<'a, [u8]> {
    let raw = bytes.get(span.start..span.end).unwrap_or_default();
    if !span.quoted || !raw.contains(&b'"') {
        return Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut skip_next_quote = false;
    for &b in raw {
        if b == b'"' {
            if skip_next_quote {
                skip_next_quote = false;
                continue;
            }
            skip_next_quote = true;
        }
        out.push(b);
    }
    Cow::Owned(out)
}

/// Appends `value` as one CSV field, quoting it only when needed: when it
/// contains `,`, `"`, CR or LF (or starts with a UTF-8 BOM, which a reader
/// would strip at the start of a file). Quotes inside are doubled. Leading
/// and trailing spaces are kept as they are, unquoted.
///
/// Note: an empty value is written as nothing; a record whose only field is
/// empty would then be a blank line, which readers skip. [`write_record`]
/// handles that case.
pub fn write_field(out: &mut Vec<u8>, value: &[u8]) {
    let needs_quotes = value.starts_with(BOM)
        || value
            .iter()
            .any(|&b| matches!(b, b',' | b'"' | b'\r' | b'\n'));
    if !needs_quotes {
        out.extend_from_slice(value);
        return;
    }
    out.push(b'"');
    for chunk in value.split_inclusive(|&b| b == b'"') {
        out.extend_from_slice(chunk);
        if chunk.ends_with(b"\"") {
            out.push(b'"');
        }
    }
    out.push(b'"');
}

/// Appends a whole record (fields joined by `,`, terminated by `\n`) using
/// [`write_field`]. A record with a single empty field is written as `""` so
/// that it is not read back as a blank line. `fields` must not be empty.
pub fn write_record<I>(out: &mut Vec<u8>, fields: I)
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let start = out.len();
    let mut count = 0usize;
    for field in fields {
        if count > 0 {
            out.push(b',');
        }
        write_field(out, field.as_ref());
        count += 1;
    }
    if count == 1 && out.len() == start {
        out.extend_from_slice(b"\"\"");
    }
    out.push(b'\n');
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    const P: &str = "data/a.csv";

    fn path() -> PathBuf {
        PathBuf::from(P)
    }

    fn reader(input: &[u8]) -> CsvReader<'_> {
        CsvReader::new(input, Path::new(P)).unwrap()
    }

    /// All records as (line, raw row, field values), or the first error.
    #[allow(clippy::type_complexity)]
    fn records(input: &[u8]) -> Result<Vec<(u64, Vec<u8>, Vec<Vec<u8>>)>, CsvError> {
        let mut r = CsvReader::new(input, Path::new(P))?;
        let mut fields = Vec::new();
        let mut out = Vec::new();
        while let Some(rec) = r.next_record(&mut fields)? {
            let values = fields
                .iter()
                .map(|f| field_value(input, f).into_owned())
                .collect();
            out.push((rec.line, input[rec.start..rec.end].to_vec(), values));
        }
        Ok(out)
    }

    fn vals(items: &[&str]) -> Vec<Vec<u8>> {
        items.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    fn rec(line: u64, raw: &str, items: &[&str]) -> (u64, Vec<u8>, Vec<Vec<u8>>) {
        (line, raw.as_bytes().to_vec(), vals(items))
    }

    #[test]
    fn header_only() {
        for input in [&b"a,b,c"[..], b"a,b,c\n", b"a,b,c\r\n", b"a,b,c\n\n\r\n"] {
            let r = reader(input);
            assert_eq!(r.header(), ["a", "b", "c"]);
            assert_eq!(r.header_line(), 1);
            assert_eq!(r.column_index("b"), Some(1));
            assert_eq!(r.column_index("z"), None);
            assert_eq!(records(input).unwrap(), vec![]);
        }
    }

    #[test]
    fn empty_file() {
        for input in [
            &b""[..],
            b"\xEF\xBB\xBF",
            b"\n",
            b"\r\n\n\r\n",
            b"\xEF\xBB\xBF\n\n",
        ] {
            let err = CsvReader::new(input, Path::new(P)).unwrap_err();
            assert_eq!(err, CsvError::EmptyFile { path: path() });
        }
        let err = CsvReader::new(b"", Path::new(P)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "data/a.csv: the file is empty (no header row); a CSV file must start with a line naming its columns"
        );
    }

    #[test]
    fn blank_lines_before_header() {
        let input = b"\n\r\nid,v\n1,2\n";
        let r = reader(input);
        assert_eq!(r.header(), ["id", "v"]);
        assert_eq!(r.header_line(), 3);
        assert_eq!(records(input).unwrap(), vec![rec(4, "1,2", &["1", "2"])]);
    }

    #[test]
    fn bom() {
        let input = b"\xEF\xBB\xBFid,v\n1,2\n";
        assert_eq!(reader(input).header(), ["id", "v"]);
        assert_eq!(records(input).unwrap(), vec![rec(2, "1,2", &["1", "2"])]);
        // The BOM does not count towards columns.
        let err = records(b"\xEF\xBB\xBFi\"d,v\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::QuoteInUnquotedField {
                path: path(),
                line: 1,
                column: 2,
                field: 1
            }
        );
        // A BOM not at the start is data.
        let input = b"id\n\xEF\xBB\xBFx\n";
        assert_eq!(
            records(input).unwrap()[0].2,
            vec![b"\xEF\xBB\xBFx".to_vec()]
        );
    }

    #[test]
    fn crlf() {
        let input = b"id,v\r\n1,2\r\n3,4\r\n";
        let mut r = reader(input);
        let mut f = Vec::new();
        let a = r.next_record(&mut f).unwrap().unwrap();
        assert_eq!(
            a,
            RecordSpan {
                start: 6,
                end: 9,
                line: 2
            }
        );
        assert_eq!(
            f,
            [
                FieldSpan {
                    start: 6,
                    end: 7,
                    quoted: false
                },
                FieldSpan {
                    start: 8,
                    end: 9,
                    quoted: false
                }
            ]
        );
        let b = r.next_record(&mut f).unwrap().unwrap();
        assert_eq!(
            b,
            RecordSpan {
                start: 11,
                end: 14,
                line: 3
            }
        );
        assert_eq!(r.next_record(&mut f).unwrap(), None);
        assert_eq!(r.next_record(&mut f).unwrap(), None);
        assert_eq!(r.offset(), input.len());
    }

    #[test]
    fn mixed_endings() {
        let input = b"id,v\n1,2\r\n3,4\n\"5\",\"6\"\r\n7,8";
        assert_eq!(
            records(input).unwrap(),
            vec![
                rec(2, "1,2", &["1", "2"]),
                rec(3, "3,4", &["3", "4"]),
                rec(4, "\"5\",\"6\"", &["5", "6"]),
                rec(5, "7,8", &["7", "8"]),
            ]
        );
    }

    #[test]
    fn trailing_blank_lines() {
        let input = b"id,v\n1,2\n\n\r\n\n";
        assert_eq!(records(input).unwrap(), vec![rec(2, "1,2", &["1", "2"])]);
    }

    #[test]
    fn blank_lines_in_middle() {
        let input = b"id,v\n\n1,2\r\n\r\n\n3,4\n";
        assert_eq!(
            records(input).unwrap(),
            vec![rec(3, "1,2", &["1", "2"]), rec(6, "3,4", &["3", "4"])]
        );
    }

    #[test]
    fn last_record_without_newline() {
        assert_eq!(
            records(b"id,v\n1,2\n3,4").unwrap(),
            vec![rec(2, "1,2", &["1", "2"]), rec(3, "3,4", &["3", "4"])]
        );
        assert_eq!(
            records(b"id,v\n1,").unwrap(),
            vec![rec(2, "1,", &["1", ""])]
        );
        assert_eq!(
            records(b"id,v\n1,\"\"").unwrap(),
            vec![rec(2, "1,\"\"", &["1", ""])]
        );
    }

    #[test]
    fn empty_fields() {
        let input = b"a,b,c\n,,\n\"\",,\"\"\n";
        let got = records(input).unwrap();
        assert_eq!(
            got,
            vec![
                rec(2, ",,", &["", "", ""]),
                rec(3, "\"\",,\"\"", &["", "", ""])
            ]
        );
        // Single column: an empty value must be quoted, a blank line is skipped.
        let input = b"a\n\"\"\n\nx\n";
        assert_eq!(
            records(input).unwrap(),
            vec![rec(2, "\"\"", &[""]), rec(4, "x", &["x"])]
        );
    }

    #[test]
    fn quoted_commas_quotes_newlines() {
        let input = b"id,text,n\n1,\"a,b\",x\n2,\"say \"\"hi\"\"\",y\n3,\"line1\nline2\r\nline3\",z\n4,plain,w\n";
        let got = records(input).unwrap();
        assert_eq!(
            got,
            vec![
                rec(2, "1,\"a,b\",x", &["1", "a,b", "x"]),
                rec(3, "2,\"say \"\"hi\"\"\",y", &["2", "say \"hi\"", "y"]),
                rec(
                    4,
                    "3,\"line1\nline2\r\nline3\",z",
                    &["3", "line1\nline2\r\nline3", "z"]
                ),
                rec(7, "4,plain,w", &["4", "plain", "w"]),
            ]
        );
        // Positions after a multi-line field are physical.
        let err = records(b"a,b\n\"x\ny\"z,1\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::CharactersAfterClosingQuote {
                path: path(),
                line: 3,
                column: 3,
                field: 1
            }
        );
        // A lone CR inside quotes is data and does not start a line.
        assert_eq!(records(b"a\n\"x\ry\"\nz\n").unwrap()[1].0, 3);
    }

    #[test]
    fn quoted_header() {
        let r = reader(b"\"id\",\"na,me\",\"q\"\"t\",\"multi\nline\"\n");
        assert_eq!(r.header(), ["id", "na,me", "q\"t", "multi\nline"]);
    }

    #[test]
    fn unterminated_quote() {
        let err = records(b"id,v\n1,2\n3,\"abc\n4,5\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::UnterminatedQuote {
                path: path(),
                line: 3,
                column: 3,
                field: 2
            }
        );
        assert_eq!(
            err.to_string(),
            "data/a.csv:3:3: unterminated quoted field 2 (the quote opened here never closes); check for a stray '\"' or add the missing closing quote"
        );
        let err = records(b"id,v\n1,\"a\"\"").unwrap_err();
        assert_eq!(
            err,
            CsvError::UnterminatedQuote {
                path: path(),
                line: 2,
                column: 3,
                field: 2
            }
        );
        let err = CsvReader::new(b"\"id", Path::new(P)).unwrap_err();
        assert_eq!(
            err,
            CsvError::UnterminatedQuote {
                path: path(),
                line: 1,
                column: 1,
                field: 1
            }
        );
    }

    #[test]
    fn quote_in_unquoted_field() {
        let err = records(b"id,v\n1,ab\"c\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::QuoteInUnquotedField {
                path: path(),
                line: 2,
                column: 5,
                field: 2
            }
        );
        // Leading space before a quote: the field is unquoted.
        let err = records(b"id,v\n1, \"x\"\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::QuoteInUnquotedField {
                path: path(),
                line: 2,
                column: 4,
                field: 2
            }
        );
    }

    #[test]
    fn characters_after_closing_quote() {
        let err = records(b"id,v\n1,\"ab\"c\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::CharactersAfterClosingQuote {
                path: path(),
                line: 2,
                column: 7,
                field: 2
            }
        );
        let err = records(b"id,v\n\"1\" ,2\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::CharactersAfterClosingQuote {
                path: path(),
                line: 2,
                column: 4,
                field: 1
            }
        );
    }

    #[test]
    fn wrong_field_count() {
        let err = records(b"a,b,c\n1,2,3\n4,5\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::FieldCount {
                path: path(),
                line: 3,
                column: 4,
                record_line: 3,
                expected: 3,
                found: 2
            }
        );
        assert_eq!(
            err.to_string(),
            "data/a.csv:3:4: record has 2 fields but the header has 3; check for a missing or extra comma, and quote fields that contain commas"
        );
        let err = records(b"a,b,c\n1,2,3\n\n4,5,6,7,8\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::FieldCount {
                path: path(),
                line: 4,
                column: 7,
                record_line: 4,
                expected: 3,
                found: 5
            }
        );
        // Record spanning lines: the position is physical, record_line is its start.
        let err = records(b"a,b\n\"x\ny\",1,\"z\"\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::FieldCount {
                path: path(),
                line: 3,
                column: 6,
                record_line: 2,
                expected: 2,
                found: 3
            }
        );
        assert!(err.to_string().starts_with(
            "data/a.csv:3:6: record starting on line 2 has 3 fields but the header has 2;"
        ));
        // The error is sticky.
        let mut r = reader(b"a,b\n1\n2,3\n");
        let mut f = Vec::new();
        let e1 = r.next_record(&mut f).unwrap_err();
        let e2 = r.next_record(&mut f).unwrap_err();
        assert_eq!(e1, e2);
    }

    #[test]
    fn bare_cr() {
        let err = records(b"id,v\n1,2\r3,4\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::BareCarriageReturn {
                path: path(),
                line: 2,
                column: 4
            }
        );
        let err = records(b"id,v\n1,a\rb\n").unwrap_err();
        assert_eq!(
            err,
            CsvError::BareCarriageReturn {
                path: path(),
                line: 2,
                column: 4
            }
        );
        let err = records(b"id,v\n1,\"2\"\r").unwrap_err();
        assert_eq!(
            err,
            CsvError::BareCarriageReturn {
                path: path(),
                line: 2,
                column: 6
            }
        );
        // "\r" alone on a line followed by EOF is not a blank line (no LF).
        let err = records(b"id,v\n1,2\n\r").unwrap_err();
        assert_eq!(
            err,
            CsvError::BareCarriageReturn {
                path: path(),
                line: 3,
                column: 1
            }
        );
        let err = CsvReader::new(b"a\rb\n", Path::new(P)).unwrap_err();
        assert_eq!(
            err,
            CsvError::BareCarriageReturn {
                path: path(),
                line: 1,
                column: 2
            }
        );
    }

    #[test]
    fn duplicate_header_names() {
        let err = CsvReader::new(b"id,name,x,name\n", Path::new(P)).unwrap_err();
        assert_eq!(
            err,
            CsvError::DuplicateColumn {
                path: path(),
                line: 1,
                name: "name".into(),
                first_column: 2,
                column: 4
            }
        );
        assert_eq!(
            err.to_string(),
            "data/a.csv:1: duplicate column name \"name\" (header columns 2 and 4); rename one so every column name is unique"
        );
        // Quoting does not make names distinct; one empty name is fine, two are not.
        let err = CsvReader::new(b"a,\"a\"\n", Path::new(P)).unwrap_err();
        assert!(matches!(
            err,
            CsvError::DuplicateColumn {
                first_column: 1,
                column: 2,
                ..
            }
        ));
        assert_eq!(reader(b"a,,b\n").header(), ["a", "", "b"]);
        let err = CsvReader::new(b",a,\n", Path::new(P)).unwrap_err();
        assert!(matches!(
            err,
            CsvError::DuplicateColumn {
                first_column: 1,
                column: 3,
                ..
            }
        ));
    }

    #[test]
    fn non_utf8_header() {
        let err = CsvReader::new(b"id,n\xFFame\n", Path::new(P)).unwrap_err();
        assert_eq!(
            err,
            CsvError::InvalidUtf8Header {
                path: path(),
                line: 1,
                column: 5,
                field: 2
            }
        );
        // Inside a multi-line quoted name, after a BOM.
        let err = CsvReader::new(b"\xEF\xBB\xBFid,\"a\nb\xC3\"\n", Path::new(P)).unwrap_err();
        assert_eq!(
            err,
            CsvError::InvalidUtf8Header {
                path: path(),
                line: 2,
                column: 2,
                field: 2
            }
        );
        assert_eq!(reader("id,名前\n".as_bytes()).header(), ["id", "名前"]);
    }

    #[test]
    fn non_utf8_data_is_not_an_error() {
        let input = b"id,v\n\xFF\xFE,\"\xC3\"\n";
        assert_eq!(
            records(input).unwrap(),
            vec![(
                2,
                b"\xFF\xFE,\"\xC3\"".to_vec(),
                vec![b"\xFF\xFE".to_vec(), b"\xC3".to_vec()]
            )]
        );
    }

    #[test]
    fn field_value_unescaping() {
        let bytes = b"x\"\"y\"\"\"\"z";
        let all = FieldSpan {
            start: 0,
            end: bytes.len(),
            quoted: true,
        };
        assert_eq!(
            field_value(bytes, &all),
            Cow::<[u8]>::Owned(b"x\"y\"\"z".to_vec())
        );
        let unquoted = FieldSpan {
            quoted: false,
            ..all
        };
        assert!(matches!(field_value(bytes, &unquoted), Cow::Borrowed(b) if b == bytes));
        let plain = FieldSpan {
            start: 0,
            end: 1,
            quoted: true,
        };
        assert!(matches!(field_value(bytes, &plain), Cow::Borrowed(b"x")));
        let bad = FieldSpan {
            start: 5,
            end: 100,
            quoted: true,
        };
        assert_eq!(field_value(bytes, &bad), Cow::<[u8]>::Borrowed(b""));
        let backwards = FieldSpan {
            start: 5,
            end: 2,
            quoted: false,
        };
        assert_eq!(field_value(bytes, &backwards), Cow::<[u8]>::Borrowed(b""));
    }

    #[test]
    fn write_field_cases() {
        let w = |v: &[u8]| {
            let mut out = Vec::new();
            write_field(&mut out, v);
            out
        };
        assert_eq!(w(b"abc"), b"abc");
        assert_eq!(w(b" a b "), b" a b ");
        assert_eq!(w(b""), b"");
        assert_eq!(w(b"a,b"), b"\"a,b\"");
        assert_eq!(w(b"a\"b\""), b"\"a\"\"b\"\"\"");
        assert_eq!(w(b"a\r\nb"), b"\"a\r\nb\"");
        assert_eq!(w(b"\xEF\xBB\xBFx"), b"\"\xEF\xBB\xBFx\"");
        let mut out = Vec::new();
        write_record(&mut out, [""]);
        write_record(&mut out, ["", ""]);
        write_record(&mut out, ["a", "b,c"]);
        assert_eq!(out, b"\"\"\n,\na,\"b,c\"\n");
    }

    /// Deterministic LCG (Knuth MMIX constants).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn write_round_trip_property() {
        const ALPHABET: &[u8] = b"a,\"\r\n";
        let mut rng = Lcg(42);
        for _ in 0..2_000 {
            let ncols = 1 + rng.below(4) as usize;
            let nrows = rng.below(5) as usize;
            let mut header: Vec<Vec<u8>> = Vec::new();
            for c in 0..ncols {
                let mut name = vec![b'c', b'0' + c as u8];
                for _ in 0..rng.below(4) {
                    name.push(ALPHABET[rng.below(5) as usize]);
                }
                header.push(name);
            }
            let mut rows = Vec::new();
            for _ in 0..nrows {
                let row: Vec<Vec<u8>> = (0..ncols)
                    .map(|_| {
                        (0..rng.below(7))
                            .map(|_| ALPHABET[rng.below(5) as usize])
                            .collect()
                    })
                    .collect();
                rows.push(row);
            }
            let mut file = Vec::new();
            write_record(&mut file, &header);
            for row in &rows {
                write_record(&mut file, row);
            }
            if rng.below(2) == 0 {
                file.pop(); // drop the final newline
            }
            let r = reader(&file);
            let names: Vec<Vec<u8>> = r.header().iter().map(|h| h.as_bytes().to_vec()).collect();
            assert_eq!(names, header, "file {:?}", String::from_utf8_lossy(&file));
            let got: Vec<Vec<Vec<u8>>> = records(&file).unwrap().into_iter().map(|r| r.2).collect();
            assert_eq!(got, rows, "file {:?}", String::from_utf8_lossy(&file));
        }
    }

    #[test]
    fn find_any_matches_naive_scan() {
        let mut rng = Lcg(99);
        for _ in 0..20_000 {
            let len = rng.below(40) as usize;
            let input: Vec<u8> = (0..len)
                .map(|_| match rng.below(4) {
                    0 => b",\n\r\""[rng.below(4) as usize],
                    _ => rng.below(256) as u8,
                })
                .collect();
            let naive4 = input
                .iter()
                .position(|&b| matches!(b, b',' | b'\n' | b'\r' | b'"'))
                .unwrap_or(input.len());
            assert_eq!(
                find_any(&input, [b',', b'\n', b'\r', b'"']),
                naive4,
                "{input:?}"
            );
            let naive2 = input
                .iter()
                .position(|&b| matches!(b, b'"' | b'\n'))
                .unwrap_or(input.len());
            assert_eq!(find_any(&input, [b'"', b'\n']), naive2, "{input:?}");
        }
    }

    #[test]
    fn random_input_never_panics() {
        // Weighted towards plain bytes so that many inputs get past the header.
        const ALPHABET: &[u8] = b"aaaaaaaaa,,,\n\n\"\r \xEF\xBB\xBF\xFF";
        let mut rng = Lcg(7);
        let mut fields = Vec::new();
        let (mut headers, mut parsed) = (0, 0);
        for _ in 0..10_000 {
            let mut input = Vec::new();
            if rng.below(2) == 0 {
                input.extend_from_slice(b"h,k\n");
            }
            for _ in 0..rng.below(64) {
                input.push(if rng.below(16) == 0 {
                    rng.below(256) as u8
                } else {
                    ALPHABET[rng.below(ALPHABET.len() as u64) as usize]
                });
            }
            let Ok(mut r) = CsvReader::new(&input, Path::new(P)) else {
                continue;
            };
            headers += 1;
            let mut guard = 0;
            while let Ok(Some(rec)) = r.next_record(&mut fields) {
                assert!(rec.start <= rec.end && rec.end <= input.len());
                assert_eq!(fields.len(), r.header().len());
                for f in &fields {
                    assert!(f.start <= f.end && f.end <= rec.end && f.start >= rec.start);
                    let _ = field_value(&input, f);
                }
                guard += 1;
                parsed += 1;
                assert!(guard <= input.len(), "no progress");
            }
        }
        // The inputs must exercise the record path, not only header errors.
        assert!(
            headers > 1_000 && parsed > 1_000,
            "{headers} headers, {parsed} records"
        );
    }

    #[test]
    #[ignore = "throughput measurement; run with --release -- --ignored --nocapture"]
    fn throughput() {
        let mut simple = b"id,email,name,amount,date\n".to_vec();
        let mut quoted = simple.clone();
        let mut i = 0u64;
        while simple.len() < 200_000_000 {
            simple.extend_from_slice(
                format!(
                    "{i},user{i}@example.com,Name {i},{}.{:02},2024-01-{:02}\n",
                    i % 10_000,
                    i % 100,
                    i % 28 + 1
                )
                .as_bytes(),
            );
            i += 1;
        }
        let mut j = 0u64;
        while quoted.len() < 200_000_000 {
            quoted.extend_from_slice(
                format!(
                    "\"{j}\",\"user{j}@example.com\",\"Name, \"\"{j}\"\"\",\"{}\",\"2024\"\r\n",
                    j % 10_000
                )
                .as_bytes(),
            );
            j += 1;
        }
        for (label, data) in [("simple", &simple), ("all-quoted", &quoted)] {
            let mut best = f64::MAX;
            let mut n = 0u64;
            for _ in 0..3 {
                let t = std::time::Instant::now();
                let mut r = reader(data);
                let mut fields = Vec::new();
                n = 0;
                let mut sink = 0usize;
                while let Some(rec) = r.next_record(&mut fields).unwrap() {
                    n += 1;
                    sink = sink.wrapping_add(rec.end ^ fields[1].start);
                }
                std::hint::black_box(sink);
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!(
                "{label}: {} MB, {n} records, {:.3} s, {:.0} MB/s, {:.1} M records/s",
                data.len() / 1_000_000,
                best,
                data.len() as f64 / best / 1e6,
                n as f64 / best / 1e6
            );
        }
    }
}
