//! The labeled-PSI tables: the sender's source (`key`, or `key,value` for labels) and the
//! receiver's query (`key`). Keys and labels are CSV cells (quoted cells may hold commas,
//! quotes and line breaks); the item is the digest of the key cell's bytes, as every other
//! run of ours digests a key.
//!
//! A key that appears twice in the source is refused, naming both lines: the sender DB holds
//! one label per item, and silently keeping one of two labels would hand the receiver a label
//! the data owner may not have meant. Duplicate query keys are allowed: each query row that is
//! found gets its own result row.

use crate::error::DataError;
use crate::table::csv::{CsvReader, field_value};
use blindjoin_crypto::{ItemDigest, item_digest};
use std::collections::HashMap;
use std::path::Path;

/// The column that holds the key.
pub const KEY_COLUMN: &str = "key";
/// The column that holds the label (sender, labeled mode).
pub const VALUE_COLUMN: &str = "value";

/// The sender's table.
pub struct Source {
    /// One digest per row.
    pub items: Vec<ItemDigest>,
    /// One label per row, in labeled mode (a `value` column).
    pub labels: Option<Vec<Vec<u8>>>,
    /// The longest label, in bytes (at least 1 in labeled mode; 0 unlabeled).
    pub label_len: usize,
}

/// The receiver's table: each row's key and its digest.
pub struct Query {
    /// Key cells, in file order.
    pub keys: Vec<Vec<u8>>,
    /// Their digests.
    pub items: Vec<ItemDigest>,
}

fn bad(path: &Path, problem: String) -> DataError {
    DataError::ApsiInput {
        path: path.to_path_buf(),
        problem,
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        action: "reading the input",
        source,
    })
}

/// One row: its line, key cell and value cell (empty without a value column).
type Row = (u64, Vec<u8>, Vec<u8>);

/// The rows of `bytes`, and whether it has a value column (looked for when `with_value`).
fn rows(bytes: &[u8], path: &Path, with_value: bool) -> Result<(Vec<Row>, bool), DataError> {
    let mut reader = CsvReader::new(bytes, path)?;
    let key = reader
        .column_index(KEY_COLUMN)
        .ok_or_else(|| DataError::MissingKeyColumn {
            path: path.to_path_buf(),
            column: KEY_COLUMN.into(),
            available: reader.header().join(", "),
        })?;
    let value = if with_value {
        reader.column_index(VALUE_COLUMN)
    } else {
        None
    };
    let mut out = Vec::new();
    let mut fields = Vec::new();
    while let Some(rec) = reader.next_record(&mut fields)? {
        let k = fields
            .get(key)
            .map(|s| field_value(bytes, s).into_owned())
            .unwrap_or_default();
        if k.is_empty() {
            return Err(DataError::EmptyKey {
                path: path.to_path_buf(),
                line: rec.line,
                field: KEY_COLUMN.into(),
            });
        }
        let v = value
            .and_then(|i| fields.get(i))
            .map(|s| field_value(bytes, s).into_owned())
            .unwrap_or_default();
        out.push((rec.line, k, v));
    }
    Ok((out, value.is_some()))
}

/// Reads the sender's source table: a `key` column, and a `value` column for labels (other
/// columns are ignored, as APSI's CLI ignores them). Labels longer than `max_label` bytes are
/// refused naming the line.
///
/// # Errors
/// The file cannot be read, is not CSV, lacks `key`, has an empty or duplicate key, or a label
/// too long.
pub fn read_source(path: &Path, max_label: usize) -> Result<Source, DataError> {
    let bytes = read_file(path)?;
    let (rows, labeled) = rows(&bytes, path, true)?;
    let mut first_line: HashMap<ItemDigest, u64> = HashMap::with_capacity(rows.len());
    let mut items = Vec::with_capacity(rows.len());
    let mut labels = Vec::with_capacity(if labeled { rows.len() } else { 0 });
    let mut label_len = 0;
    for (line, key, value) in rows {
        let d = item_digest(&key);
        if let Some(first) = first_line.insert(d, line) {
            return Err(bad(
                path,
                format!(
                    "line {line}: key {:?} is also on line {first}; the sender's table must \
                     hold each key once (one label per key)",
                    String::from_utf8_lossy(&key)
                ),
            ));
        }
        if labeled {
            if value.len() > max_label {
                return Err(bad(
                    path,
                    format!(
                        "line {line}: the value is {} bytes; labels may have at most \
                         {max_label}",
                        value.len()
                    ),
                ));
            }
            label_len = label_len.max(value.len());
            labels.push(value);
        }
        items.push(d);
    }
    if labeled {
        label_len = label_len.max(1);
    }
    Ok(Source {
        items,
        labels: labeled.then_some(labels),
        label_len,
    })
}

/// Reads the receiver's query table (a `key` column; other columns are ignored).
///
/// # Errors
/// The file cannot be read, is not CSV, lacks `key` or has an empty key.
pub fn read_query(path: &Path) -> Result<Query, DataError> {
    let bytes = read_file(path)?;
    let (rows, _) = rows(&bytes, path, false)?;
    let keys: Vec<Vec<u8>> = rows.into_iter().map(|(_, k, _)| k).collect();
    let items = keys.iter().map(|k| item_digest(k)).collect();
    Ok(Query { keys, items })
}

/// A label as the receiver gets it (zero-padded to the DB's label size) back to the cell:
/// trailing NUL bytes are dropped, so a label's own trailing NUL bytes are not kept (labels
/// are CSV text).
pub fn unpad(label: &[u8]) -> &[u8] {
    let end = label.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    label.get(..end).unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn tempdir() -> std::path::PathBuf {
        let mut r = [0u8; 8];
        blindjoin_crypto::random_bytes(&mut r).unwrap();
        let d = std::env::temp_dir().join(format!("bj-apsi-{:016x}", u64::from_le_bytes(r)));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn file(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn reads_labels_with_commas_quotes_and_extra_columns() {
        let dir = tempdir();
        let p = file(
            &dir,
            "s.csv",
            "key,value,other\n\"a,1\",\"say \"\"hi\"\"\",x\nb,,y\n",
        );
        let s = read_source(&p, 64).unwrap();
        assert_eq!(s.items, vec![item_digest(b"a,1"), item_digest(b"b")]);
        assert_eq!(s.labels.unwrap(), vec![b"say \"hi\"".to_vec(), Vec::new()]);
        assert_eq!(s.label_len, 8);
    }

    #[test]
    fn unlabeled_without_value_column() {
        let dir = tempdir();
        let p = file(&dir, "s.csv", "key\na\n");
        let s = read_source(&p, 64).unwrap();
        assert!(s.labels.is_none());
        assert_eq!(s.label_len, 0);
    }

    #[test]
    fn duplicate_source_key_names_both_lines() {
        let dir = tempdir();
        let p = file(&dir, "s.csv", "key,value\na,1\nb,2\na,3\n");
        let e = read_source(&p, 64).err().unwrap().to_string();
        assert!(e.contains("line 4") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn long_label_names_the_line() {
        let dir = tempdir();
        let p = file(&dir, "s.csv", "key,value\na,12345\n");
        let e = read_source(&p, 4).err().unwrap().to_string();
        assert!(e.contains("line 2") && e.contains("5 bytes"), "{e}");
    }

    #[test]
    fn missing_key_column_and_empty_key() {
        let dir = tempdir();
        let p = file(&dir, "q.csv", "id\na\n");
        assert!(matches!(
            read_query(&p),
            Err(DataError::MissingKeyColumn { .. })
        ));
        let p = file(&dir, "q2.csv", "key,x\n,1\n");
        assert!(matches!(read_query(&p), Err(DataError::EmptyKey { .. })));
    }

    #[test]
    fn unpad_drops_trailing_zeros_only() {
        assert_eq!(unpad(b"ab\0\0"), b"ab");
        assert_eq!(unpad(b"\0a\0"), b"\0a");
        assert_eq!(unpad(b"\0\0"), b"");
    }
}
