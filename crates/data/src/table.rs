//! Reading a table: parse the CSV, pull out the key columns, validate them, and encode each row's
//! key canonically.
//!
//! Canonical key: for each key column in `keys` order, `len: u32 BE | UTF-8 bytes`. The length
//! prefix makes the encoding injective, so `("a,b", "c")` and `("a", "b,c")` differ (SecretFlow
//! joins with "," and confuses them). Column *names* are not part of it, so the parties may name
//! their key columns differently. Quoted and unquoted spellings of a value are the same key.

use crate::csv::{CsvReader, FieldSpan, RecordSpan, field_value};
use crate::error::DataError;
use blindjoin_crypto::{ItemDigest, item_digest};
use rayon::prelude::*;
use std::cmp::Ordering;
use std::path::{Path, PathBuf};

/// A table in memory: the file bytes, its header, where each record is, and each row's key.
pub struct Table {
    /// The file.
    pub path: PathBuf,
    /// The whole file.
    pub bytes: Vec<u8>,
    /// Column names.
    pub header: Vec<String>,
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
        let key_cols = keys
            .iter()
            .map(|k| {
                reader
                    .column_index(k)
                    .ok_or_else(|| DataError::MissingKeyColumn {
                        path: path.to_path_buf(),
                        column: k.clone(),
                        available: header
                            .iter()
                            .map(|h| format!("{h:?}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;

        let mut records = Vec::new();
        let mut key_buf = Vec::new();
        let mut key_ends = Vec::new();
        let mut fields: Vec<FieldSpan> = Vec::new();
        while let Some(rec) = reader.next_record(&mut fields)? {
            for (&col, name) in key_cols.iter().zip(keys) {
                let Some(span) = fields.get(col) else {
                    return Err(DataError::EmptyKey {
                        path: path.to_path_buf(),
                        line: rec.line,
                        field: name.clone(),
                    });
                };
                let value = field_value(&bytes, span);
                if value.is_empty() {
                    return Err(DataError::EmptyKey {
                        path: path.to_path_buf(),
                        line: rec.line,
                        field: name.clone(),
                    });
                }
                if let Err(e) = std::str::from_utf8(&value) {
                    return Err(DataError::NonUtf8Key {
                        path: path.to_path_buf(),
                        line: rec.line,
                        field: name.clone(),
                        offset: e.valid_up_to(),
                    });
                }
                key_buf.extend_from_slice(&(value.len() as u32).to_be_bytes());
                key_buf.extend_from_slice(&value);
            }
            key_ends.push(key_buf.len());
            records.push(rec);
        }
        drop(reader); // Ends the borrow of `bytes`, which the table then owns.
        Ok(Table {
            path: path.to_path_buf(),
            bytes,
            header,
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

    /// The raw bytes of row `i` as they appear in the file (no line terminator).
    pub fn raw_row(&self, i: usize) -> &[u8] {
        let r = &self.records[i];
        &self.bytes[r.start..r.end]
    }

    /// Groups rows by key: the unique keys' digests (sorted) and, for each, the rows holding it
    /// (in input order).
    pub fn unique_keys(&self) -> UniqueKeys {
        let by_digest = sort_uniform(
            (0..self.len())
                .into_par_iter()
                .map(|i| (u128::from_be_bytes(item_digest(self.key(i))), i as u32))
                .collect(),
        );
        let mut digests = Vec::new();
        let mut group_ends = Vec::new();
        let mut rows = Vec::with_capacity(by_digest.len());
        for (i, &(d, row)) in by_digest.iter().enumerate() {
            if i > 0 && by_digest[i - 1].0 != d {
                group_ends.push(rows.len());
            }
            if i == 0 || by_digest[i - 1].0 != d {
                digests.push(d.to_be_bytes());
            }
            rows.push(row);
        }
        if !rows.is_empty() {
            group_ends.push(rows.len());
        }
        UniqueKeys {
            digests,
            rows,
            group_ends,
        }
    }
}

/// Rows grouped by unique key.
pub struct UniqueKeys {
    /// One digest per unique key, sorted.
    pub digests: Vec<ItemDigest>,
    rows: Vec<u32>,
    group_ends: Vec<usize>,
}

impl UniqueKeys {
    /// The rows whose key is unique key `k`.
    pub fn rows_of(&self, k: usize) -> &[u32] {
        let start = if k == 0 { 0 } else { self.group_ends[k - 1] };
        &self.rows[start..self.group_ends[k]]
    }
}

/// Sorts `(digest, row)` pairs whose digests are uniformly random: one counting pass on the top
/// 16 bits into 65,536 buckets (a few pairs each), then a sort per bucket — linear time, where a
/// comparison sort of 2^20 pairs costs several times more.
fn sort_uniform(v: Vec<(u128, u32)>) -> Vec<(u128, u32)> {
    const SHIFT: u32 = 128 - 16;
    if v.len() < 1 << 12 {
        let mut v = v;
        v.sort_unstable();
        return v;
    }
    let mut counts = vec![0usize; (1 << 16) + 1];
    for &(d, _) in &v {
        counts[(d >> SHIFT) as usize + 1] += 1;
    }
    for b in 1..counts.len() {
        counts[b] += counts[b - 1];
    }
    let mut out = vec![(0u128, 0u32); v.len()];
    let mut fill = counts.clone();
    for &(d, r) in &v {
        let b = (d >> SHIFT) as usize;
        out[fill[b]] = (d, r);
        fill[b] += 1;
    }
    drop(v);
    // Split `out` at the bucket bounds and sort each bucket, in parallel.
    let mut parts: Vec<&mut [(u128, u32)]> = Vec::with_capacity(1 << 16);
    let mut rest: &mut [(u128, u32)] = &mut out;
    for b in 0..(1 << 16) {
        let (head, tail) = rest.split_at_mut(counts[b + 1] - counts[b]);
        parts.push(head);
        rest = tail;
    }
    parts.par_iter_mut().for_each(|p| p.sort_unstable());
    out
}

/// Sorts row numbers by key in [`cmp_keys`] order, ties by row number (so rows with equal keys
/// keep their input order).
///
/// Sorts by a 16-byte prefix of the first key field first (as an integer; zero-padded, which
/// never contradicts [`cmp_keys`]: padded prefixes that differ order like the keys), then
/// settles runs of equal prefixes with the full comparison.
pub fn sort_rows_by_key(table: &Table, rows: &mut [u32]) {
    let mut keyed: Vec<(u128, u32)> = rows
        .par_iter()
        .map(|&r| (key_prefix(table.key(r as usize)), r))
        .collect();
    keyed.par_sort_unstable();
    let mut i = 0;
    while i < keyed.len() {
        let mut j = i + 1;
        while j < keyed.len() && keyed[j].0 == keyed[i].0 {
            j += 1;
        }
        if j - i > 1 {
            keyed[i..j].sort_unstable_by(|a, b| {
                cmp_keys(table.key(a.1 as usize), table.key(b.1 as usize)).then(a.1.cmp(&b.1))
            });
        }
        i = j;
    }
    for (dst, (_, r)) in rows.iter_mut().zip(keyed) {
        *dst = r;
    }
}

/// The first 16 bytes of a key's first field, zero-padded, as a big-endian integer.
fn key_prefix(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    if let Some((field, _)) = split_field(key) {
        let n = field.len().min(16);
        b[..n].copy_from_slice(&field[..n]);
    }
    u128::from_be_bytes(b)
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
        assert_eq!(t.unique_keys().digests.len(), 2);
    }

    #[test]
    fn quoted_and_unquoted_are_the_same_key() {
        let p = write("quoted", "id,x\n\"abc\",1\nabc,2\n");
        let t = Table::read(&p, &["id".into()]).unwrap();
        assert_eq!(t.key(0), t.key(1));
        let u = t.unique_keys();
        assert_eq!(u.digests.len(), 1);
        assert_eq!(u.rows_of(0), &[0, 1]);
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
        let p = write("missing", "id,x\na,1\n");
        let e = Table::read(&p, &["ID".into()]).err().unwrap().to_string();
        assert!(e.contains("\"ID\"") && e.contains("\"id\""), "{e}");
    }

    #[test]
    fn header_only_is_an_empty_table() {
        let p = write("header", "id,x\n");
        let t = Table::read(&p, &["id".into()]).unwrap();
        assert!(t.is_empty());
        assert!(t.unique_keys().digests.is_empty());
    }

    #[test]
    fn sorting_rows_by_key_matches_the_full_comparison() {
        // Shared 16-byte prefixes, embedded NULs, prefixes of each other, multi-column ties.
        let text = "a,b\n\
                    0123456789abcdefZ,1\n0123456789abcdef,2\n0123456789abcdefA,1\n\
                    ab,x\nab,\"\"\"\"\nab,x\nb,1\n\"a\",2\n0123456789abcdef,1\n";
        let p = write("sortrows", text);
        let t = Table::read(&p, &["a".into(), "b".into()]).unwrap();
        let mut rows: Vec<u32> = (0..t.len() as u32).collect();
        sort_rows_by_key(&t, &mut rows);
        let mut want: Vec<u32> = (0..t.len() as u32).collect();
        want.sort_by(|&x, &y| cmp_keys(t.key(x as usize), t.key(y as usize)).then(x.cmp(&y)));
        assert_eq!(rows, want);
    }

    #[test]
    fn uniform_sort_sorts() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u128;
        for n in [0usize, 5, 5000, 100_000] {
            let v: Vec<(u128, u32)> = (0..n as u32)
                .map(|i| {
                    x = x
                        .wrapping_mul(0x2545_f491_4f6c_dd1d_f4a5_2b1c_1d3e_5f01)
                        .wrapping_add(1);
                    // Some repeats, to check ties are ordered by row.
                    (if i % 7 == 0 { 42 << 100 } else { x }, n as u32 - i)
                })
                .collect();
            let mut want = v.clone();
            want.sort_unstable();
            assert_eq!(sort_uniform(v), want, "n={n}");
        }
    }

    #[test]
    fn key_order_is_tuple_order() {
        let enc = |parts: &[&str]| {
            let mut v = Vec::new();
            for p in parts {
                v.extend_from_slice(&(p.len() as u32).to_be_bytes());
                v.extend_from_slice(p.as_bytes());
            }
            v
        };
        assert_eq!(cmp_keys(&enc(&["b"]), &enc(&["ab"])), Ordering::Greater);
        assert_eq!(
            cmp_keys(&enc(&["a", "z"]), &enc(&["ab", "a"])),
            Ordering::Less
        );
        assert_eq!(
            cmp_keys(&enc(&["a", "b"]), &enc(&["a", "b"])),
            Ordering::Equal
        );
    }
}
