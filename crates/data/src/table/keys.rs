//! Reading a table: parse the CSV, pull out the key columns, validate them, and encode each row's
//! key canonically.
//!
//! Canonical key: for each key column in `keys` order, `len: u32 BE | UTF-8 bytes`. The length
//! prefix makes the encoding injective, so `("a,b", "c")` and `("a", "b,c")` differ (SecretFlow
//! joins with "," and confuses them). Column *names* are not part of it, so the parties may name
//! their key columns differently. Quoted and unquoted spellings of a value are the same key.

use crate::error::DataError;
use crate::spec::TableFormat;
use crate::table::csv::{CsvReader, FieldSpan, RecordSpan, field_value};
use crate::table::parquet_io::{ParquetRows, RowBatch};
use crate::table::writer::Columns;
use rayon::prelude::*;
use std::cmp::Ordering;
use std::path::{Path, PathBuf};

/// A table in memory: its rows' bytes (a CSV file whole, or a Parquet table's typed rows), its
/// columns, where each record is, and each row's key.
pub struct Table {
    /// The file.
    pub path: PathBuf,
    /// The whole CSV file, or every typed row of a Parquet table.
    pub bytes: Vec<u8>,
    /// Column names, and a Parquet table's schema.
    pub columns: Columns,
    /// Where each data record is in `bytes`.
    pub records: Vec<RecordSpan>,
    /// Canonical keys of all rows, concatenated; row i is `keys[key_ends[i-1]..key_ends[i]]`.
    keys: Vec<u8>,
    key_ends: Vec<usize>,
}

impl Table {
    /// Reads and validates `path`, extracting the `keys` columns.
    ///
    /// # Errors
    /// Missing or unreadable file, malformed CSV, missing key column, empty or non-UTF-8 key.
    pub fn read(path: &Path, keys: &[String]) -> Result<Table, DataError> {
        let bytes = std::fs::read(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            action: "reading the input",
            source,
        })?;
        let mut reader = CsvReader::new(&bytes, path)?;
        let header = reader.header().to_vec();
        let key_cols = KeyColumns::find(&reader, keys)?;
        let mut records = Vec::new();
        let mut key_buf = Vec::new();
        let mut key_ends = Vec::new();
        let mut fields: Vec<FieldSpan> = Vec::new();
        while let Some(rec) = reader.next_record(&mut fields)? {
            key_cols.append_key(&bytes, &fields, rec.line, path, &mut key_buf)?;
            key_ends.push(key_buf.len());
            records.push(rec);
        }
        drop(reader); // Ends the borrow of `bytes`, which the table then owns.
        Ok(Table {
            path: path.to_path_buf(),
            bytes,
            columns: Columns::csv(header),
            records,
            keys: key_buf,
            key_ends,
        })
    }

    /// Reads and validates the table at `path`, CSV or Parquet as `format` says.
    ///
    /// # Errors
    /// As [`Table::read`], and for Parquet as [`ParquetRows`].
    pub fn read_any(path: &Path, format: TableFormat, keys: &[String]) -> Result<Table, DataError> {
        if format == TableFormat::Csv {
            return Table::read(path, keys);
        }
        let mut table = ParquetRows::open(path, keys)?;
        let mut bytes = Vec::new();
        let mut records = Vec::new();
        let mut key_buf = Vec::new();
        let mut key_ends = Vec::new();
        let mut batch = RowBatch::default();
        while table.next_batch(&mut batch)? {
            for i in 0..batch.len() {
                let start = bytes.len();
                bytes.extend_from_slice(batch.row(i));
                records.push(RecordSpan {
                    start,
                    end: bytes.len(),
                    line: records.len() as u64 + 1,
                });
                key_buf.extend_from_slice(batch.key(i));
                key_ends.push(key_buf.len());
            }
        }
        Ok(Table {
            path: path.to_path_buf(),
            bytes,
            columns: Columns {
                header: table.header(),
                schema: Some(table.schema().clone()),
            },
            records,
            keys: key_buf,
            key_ends,
        })
    }

    /// Number of data rows.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the table has no data rows.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Canonical key of row `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.key_ends[i - 1] };
        &self.keys[start..self.key_ends[i]]
    }

    /// The bytes of row `i`: as it appears in a CSV file (no line terminator), or a Parquet
    /// table's typed row.
    pub fn raw_row(&self, i: usize) -> &[u8] {
        let r = &self.records[i];
        &self.bytes[r.start..r.end]
    }
}

/// Where the key columns are in a file, and how to turn a record's key fields into the
/// canonical key.
pub(crate) struct KeyColumns {
    cols: Vec<usize>,
    names: Vec<String>,
}

impl KeyColumns {
    /// Looks the key columns up in the header.
    ///
    /// # Errors
    /// A key column the file does not have (the message lists the ones it has).
    pub(crate) fn find(reader: &CsvReader<'_>, keys: &[String]) -> Result<Self, DataError> {
        let header = reader.header();
        let cols = keys
            .iter()
            .map(|k| {
                reader
                    .column_index(k)
                    .ok_or_else(|| DataError::MissingKeyColumn {
                        path: reader.path().to_path_buf(),
                        column: k.clone(),
                        available: header
                            .iter()
                            .map(|h| format!("{h:?}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KeyColumns {
            cols,
            names: keys.to_vec(),
        })
    }

    /// Appends the canonical key of the record whose fields are `fields` (spans into `bytes`,
    /// starting on `line`) to `out`.
    ///
    /// # Errors
    /// An empty or non-UTF-8 key field, named by line and column name.
    pub(crate) fn append_key(
        &self,
        bytes: &[u8],
        fields: &[FieldSpan],
        line: u64,
        path: &Path,
        out: &mut Vec<u8>,
    ) -> Result<(), DataError> {
        for (&col, name) in self.cols.iter().zip(&self.names) {
            let value = fields.get(col).map(|span| field_value(bytes, span));
            let Some(value) = value.filter(|v| !v.is_empty()) else {
                return Err(DataError::EmptyKey {
                    path: path.to_path_buf(),
                    line,
                    field: name.clone(),
                });
            };
            // ASCII (nearly every key) is UTF-8: checking that first, a word at a time, skips
            // the validator's per-call cost on a million short keys.
            if !value.is_ascii()
                && let Err(e) = std::str::from_utf8(&value)
            {
                return Err(DataError::NonUtf8Key {
                    path: path.to_path_buf(),
                    line,
                    field: name.clone(),
                    offset: e.valid_up_to(),
                });
            }
            out.extend_from_slice(&(value.len() as u32).to_be_bytes());
            out.extend_from_slice(&value);
        }
        Ok(())
    }
}

/// Sorts items by their keys in [`cmp_keys`] order (ties by item): first by a 16-byte prefix of
/// each key's order-preserving encoding ([`key_chunk`]), on all cores and without touching the
/// keys again, then settles runs of equal prefixes by the next 16 bytes, and so on
/// ([`settle`]). A comparison sort that fetches both keys per comparison is several times slower
/// on millions of rows (each fetch is a cache miss), and keys that share a long prefix
/// (`customer-0000…`) would all fall into one such run.
pub(crate) fn sort_by_key<'k, T: Copy + Ord + Send + Sync>(
    items: &mut [T],
    key_of: impl Fn(T) -> &'k [u8] + Sync,
) {
    let mut keyed: Vec<(u128, T)> = items
        .par_iter()
        .map(|&i| (key_prefix(key_of(i)), i))
        .collect();
    keyed.par_sort_unstable();
    settle_runs(&mut keyed, 1, &key_of);
    for (dst, (_, item)) in items.iter_mut().zip(keyed) {
        *dst = item;
    }
}

/// Runs of tied chunks below this length are settled by full comparisons.
pub(crate) const SETTLE_BY_COMPARISON: usize = 32;

/// Chunks of the encoding looked at before the rest is settled by full comparisons.
const MAX_CHUNKS: usize = 16;

/// Settles every run of equal chunks in `keyed` (sorted by chunk `depth − 1`, then item).
fn settle_runs<'k, T: Copy + Ord + Send + Sync>(
    keyed: &mut [(u128, T)],
    depth: usize,
    key_of: &(impl Fn(T) -> &'k [u8] + Sync),
) {
    let mut i = 0;
    while i < keyed.len() {
        let chunk = keyed[i].0;
        let run = keyed[i..]
            .iter()
            .position(|k| k.0 != chunk)
            .unwrap_or(keyed.len() - i);
        if run > 1 {
            settle(&mut keyed[i..i + run], depth, key_of);
        }
        i += run;
    }
}

/// Orders a run of items whose keys' encodings agree on their first `16·depth` bytes: by the
/// next chunk (on all cores when the run is long), recursing into runs that tie again, or by
/// full comparisons when the run is short, too deep, or every key's encoding has ended.
fn settle<'k, T: Copy + Ord + Send + Sync>(
    run: &mut [(u128, T)],
    depth: usize,
    key_of: &(impl Fn(T) -> &'k [u8] + Sync),
) {
    if run.len() < SETTLE_BY_COMPARISON || depth >= MAX_CHUNKS {
        run.sort_unstable_by(|a, b| cmp_keys(key_of(a.1), key_of(b.1)).then(a.1.cmp(&b.1)));
        return;
    }
    let mut more = false;
    for k in run.iter_mut() {
        let (chunk, longer) = key_chunk(key_of(k.1), depth);
        k.0 = chunk;
        more |= longer;
    }
    if !more {
        // Every encoding ends within this chunk: equal chunks are equal keys (or keys with
        // different numbers of fields), which the full comparison orders.
        run.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| cmp_keys(key_of(a.1), key_of(b.1)))
                .then(a.1.cmp(&b.1))
        });
        return;
    }
    if run.len() > 1 << 12 {
        run.par_sort_unstable();
    } else {
        run.sort_unstable();
    }
    settle_runs(run, depth + 1, key_of);
}

/// A 16-byte prefix of a key's order-preserving encoding, as a big-endian integer: each field's
/// bytes with `00` escaped as `00 01`, then `00 00` (so the encodings compare exactly as
/// [`cmp_keys`] compares keys), truncated and zero-padded. Unequal prefixes never contradict
/// [`cmp_keys`]. Unlike the first field's bytes alone, a constant or short first column
/// (`country`, `id`) still leaves the next one's bytes in the prefix, so ties stay rare.
pub(crate) fn key_prefix(key: &[u8]) -> u128 {
    // The common case: a first field of 16 bytes or more without NULs.
    if let Some((field, _)) = split_field(key)
        && let Some(head) = field.first_chunk::<16>()
        && !head.contains(&0)
    {
        return u128::from_be_bytes(*head);
    }
    key_chunk(key, 0).0
}

/// Bytes `16·depth .. 16·depth + 16` of the key's order-preserving encoding (see
/// [`key_prefix`]), zero-padded, as a big-endian integer, and whether the encoding goes on
/// past them.
fn key_chunk(key: &[u8], depth: usize) -> (u128, bool) {
    let start = 16 * depth;
    let mut b = [0u8; 16];
    // Position in the encoding; `b` starts zeroed, so a 0 (or a field's `00 00` end) is only a
    // step forward.
    let mut n = 0;
    let mut rest = key;
    while let Some((field, more)) = split_field(rest) {
        if n + 2 * field.len() + 2 <= start {
            // The whole field (even with every byte escaped) lies before the chunk: count it.
            n += field.len() + field.iter().filter(|&&c| c == 0).count() + 2;
        } else {
            for &c in field {
                for byte in [c, 1].into_iter().take(if c == 0 { 2 } else { 1 }) {
                    if let Some(slot) = n.checked_sub(start).and_then(|i| b.get_mut(i)) {
                        *slot = byte;
                    }
                    n += 1;
                }
                if n > start + 16 {
                    return (u128::from_be_bytes(b), true);
                }
            }
            n += 2;
        }
        rest = more;
        if n > start + 16 {
            return (u128::from_be_bytes(b), true);
        }
    }
    (u128::from_be_bytes(b), n > start + 16)
}

/// Orders canonical keys as tuples of byte strings (column by column, bytewise), the order
/// `LC_ALL=C sort` gives a single column.
pub fn cmp_keys(a: &[u8], b: &[u8]) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        match (split_field(a), split_field(b)) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((fa, ra)), Some((fb, rb))) => match fa.cmp(fb) {
                Ordering::Equal => (a, b) = (ra, rb),
                other => return other,
            },
        }
    }
}

fn split_field(k: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = k.split_first_chunk::<4>()?;
    rest.split_at_checked(u32::from_be_bytes(*len) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic xorshift64 stream, for the randomized key tests.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// The canonical key of `fields`: each field's big-endian u32 length, then its bytes (what
    /// [`KeyColumns::append_key`] writes).
    fn canonical<F: AsRef<[u8]>>(fields: &[F]) -> Vec<u8> {
        let mut k = Vec::new();
        for f in fields {
            let f = f.as_ref();
            k.extend_from_slice(&(f.len() as u32).to_be_bytes());
            k.extend_from_slice(f);
        }
        k
    }

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bj-table-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.csv");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn multi_column_keys_do_not_collide() {
        let p = write("collide", "k1,k2\n\"a,b\",c\na,\"b,c\"\n");
        let t = Table::read(&p, &["k1".into(), "k2".into()]).unwrap();
        assert_ne!(t.key(0), t.key(1));
    }

    #[test]
    fn quoted_and_unquoted_are_the_same_key() {
        let p = write("quoted", "id,x\n\"abc\",1\nabc,2\n");
        let t = Table::read(&p, &["id".into()]).unwrap();
        assert_eq!(t.key(0), t.key(1));
    }

    #[test]
    fn bad_keys_name_the_line_and_field() {
        let p = write("empty", "id,x\na,1\n,2\n");
        let e = Table::read(&p, &["id".into()]).err().unwrap().to_string();
        assert!(
            e.contains(":3:") && e.contains("\"id\"") && e.contains("empty"),
            "{e}"
        );
        let p = write("utf8", "id,x\na,1\n");
        std::fs::write(&p, b"id,x\na\xff,1\n").unwrap();
        let e = Table::read(&p, &["id".into()]).err().unwrap().to_string();
        assert!(e.contains(":2:") && e.contains("UTF-8"), "{e}");
        // Non-ASCII UTF-8 is a key like any other; a bad byte after it is still found.
        let p = write("utf8-ok", "id,x\nzoë,1\n");
        let t = Table::read(&p, &["id".into()]).unwrap();
        assert_eq!(t.key(0), canonical(&["zoë"]));
        std::fs::write(&p, b"id,x\na,1\nzo\xc3\xab\xc3,2\n").unwrap();
        let e = Table::read(&p, &["id".into()]).err().unwrap().to_string();
        assert!(e.contains(":3:") && e.contains("UTF-8"), "{e}");
        let p = write("missing", "id,x\na,1\n");
        let e = Table::read(&p, &["ID".into()]).err().unwrap().to_string();
        assert!(e.contains("\"ID\"") && e.contains("\"id\""), "{e}");
    }

    #[test]
    fn header_only_is_an_empty_table() {
        let p = write("header", "id,x\n");
        let t = Table::read(&p, &["id".into()]).unwrap();
        assert!(t.is_empty());
    }

    #[test]
    fn sorting_by_key_matches_the_full_comparison() {
        // Shared 16-byte prefixes, embedded quotes, prefixes of each other, multi-column ties.
        let text = "a,b\n\
                    0123456789abcdefZ,1\n0123456789abcdef,2\n0123456789abcdefA,1\n\
                    ab,x\nab,\"\"\"\"\nab,x\nb,1\n\"a\",2\n0123456789abcdef,1\n";
        let p = write("sortrows", text);
        let t = Table::read(&p, &["a".into(), "b".into()]).unwrap();
        let mut rows: Vec<usize> = (0..t.len()).collect();
        sort_by_key(&mut rows, |r: usize| t.key(r));
        let mut want: Vec<usize> = (0..t.len()).collect();
        want.sort_by(|&x, &y| cmp_keys(t.key(x), t.key(y)).then(x.cmp(&y)));
        assert_eq!(rows, want);
    }

    #[test]
    fn key_prefixes_never_contradict_the_full_comparison() {
        // Keys of 1–3 fields over a tiny alphabet (NUL included), as canonical encodings.
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let keys: Vec<Vec<u8>> = (0..600)
            .map(|_| {
                let fields: Vec<Vec<u8>> = (0..1 + next() % 3)
                    .map(|_| {
                        let len = (next() % 20) as usize;
                        (0..len)
                            .map(|_| [0u8, 1, b'a'][next() as usize % 3])
                            .collect()
                    })
                    .collect();
                canonical(&fields)
            })
            .collect();
        for a in &keys {
            for b in &keys {
                match key_prefix(a).cmp(&key_prefix(b)) {
                    Ordering::Equal => {}
                    order => assert_eq!(cmp_keys(a, b), order, "{a:?} vs {b:?}"),
                }
            }
        }
        // A constant first column leaves the second column in the prefix.
        assert!(key_prefix(&canonical(&["US", "100"])) < key_prefix(&canonical(&["US", "200"])));
    }

    #[test]
    fn sorting_keys_with_long_shared_prefixes_matches_the_full_comparison() {
        // Runs that tie on the first chunks (a 40-byte shared head, NULs that escape to two
        // bytes, keys that end inside a chunk, duplicates), long enough for every settling path.
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let field = |len: usize, next: &mut dyn FnMut() -> u64| -> Vec<u8> {
            (0..len)
                .map(|_| [0u8, b'a', b'b'][next() as usize % 3])
                .collect()
        };
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for i in 0..6000 {
            let fields: Vec<Vec<u8>> = (0..if i % 2 == 0 { 1 } else { 2 })
                .map(|f| {
                    let mut v = if f == 0 {
                        b"customer-id-0000000000000000000000000000".to_vec()
                    } else {
                        Vec::new()
                    };
                    let len = (next() % 24) as usize;
                    v.extend(field(len, &mut next));
                    v
                })
                .collect();
            keys.push(canonical(&fields));
        }
        keys.extend(keys[..300].to_vec());
        let mut rows: Vec<usize> = (0..keys.len()).collect();
        sort_by_key(&mut rows, |r: usize| &keys[r]);
        let mut want: Vec<usize> = (0..keys.len()).collect();
        want.sort_by(|&x, &y| cmp_keys(&keys[x], &keys[y]).then(x.cmp(&y)));
        assert_eq!(rows, want);
        // Chunks continue the prefix: the encoding's bytes 16..32 of a 40-byte field.
        let k = canonical(&[[b'x'; 40]]);
        assert_eq!(key_chunk(&k, 1), (u128::from_be_bytes([b'x'; 16]), true));
        assert!(!key_chunk(&k, 2).1);
    }

    #[test]
    fn key_order_is_tuple_order() {
        assert_eq!(
            cmp_keys(&canonical(&["b"]), &canonical(&["ab"])),
            Ordering::Greater
        );
        assert_eq!(
            cmp_keys(&canonical(&["a", "z"]), &canonical(&["ab", "a"])),
            Ordering::Less
        );
        assert_eq!(
            cmp_keys(&canonical(&["a", "b"]), &canonical(&["a", "b"])),
            Ordering::Equal
        );
    }
}
