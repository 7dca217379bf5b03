//! The server's output with `server_get_result`: its rows whose key matched, written from one
//! streaming pass over its table.
//!
//! After the query the server knows the matched keys' digests (at most the client's count). Its
//! table is read row by row ([`crate::pipeline::spill::for_each_row`]) and only the matched rows
//! are kept (key, row number, raw bytes), so memory follows the matches, not the table. Every
//! matched digest must be met on the way: a cache key missing from the table means the table
//! changed since the cache was generated ([`UbError::InputChanged`]).

use super::UbError;
use crate::pipeline::spill::for_each_row;
use crate::spec::TableFormat;
use crate::table::keys::cmp_keys;
use crate::table::output::Sink;
use crate::table::writer::RowWriter;
use blindjoin_crypto::ItemDigest;
use blindjoin_protocols::Progress;
use rayon::prelude::*;
use std::collections::HashSet;
use std::path::Path;

/// Where the matched rows go: the output's path and format, and whether to sort them by key.
pub(super) struct RowsOut<'a> {
    pub path: &'a Path,
    pub format: TableFormat,
    pub align: bool,
}

/// The matched rows kept from the stream: keys and raw rows in one buffer each.
#[derive(Default)]
struct Kept {
    keys: Vec<u8>,
    raws: Vec<u8>,
    /// Per row: (row number, end of its key in `keys`, end of its raw row in `raws`).
    ends: Vec<(u64, usize, usize)>,
}

impl Kept {
    fn push(&mut self, row: u64, key: &[u8], raw: &[u8]) {
        self.keys.extend_from_slice(key);
        self.raws.extend_from_slice(raw);
        self.ends.push((row, self.keys.len(), self.raws.len()));
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1].1 };
        &self.keys[start..self.ends[i].1]
    }

    fn raw(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1].2 };
        &self.raws[start..self.ends[i].2]
    }
}

/// Streams the table at `table` and writes to `out` (if any) its rows whose key digest is in
/// `matched` (all rows of a key, duplicates included), sorted by key when `out.align` (ties in
/// file order), else in file order, with the table's own columns (a Parquet table's schema).
/// Returns the rows written.
///
/// # Errors
/// The table does not read; a matched key is not in it ([`UbError::InputChanged`]: the cache
/// was generated from another table); the output cannot be written.
pub(super) fn write_matched_rows(
    table: &Path,
    format: TableFormat,
    keys: &[String],
    matched: &HashSet<ItemDigest>,
    out: Option<RowsOut<'_>>,
    progress: &dyn Progress,
) -> Result<u64, UbError> {
    let mut kept = Kept::default();
    let mut seen: HashSet<ItemDigest> = HashSet::with_capacity(matched.len());
    let keep = out.is_some();
    let (columns, _) = for_each_row(table, format, keys, progress, &mut |r| {
        if matched.contains(&r.digest) {
            seen.insert(r.digest);
            if keep {
                kept.push(r.row, r.key, r.raw);
            }
        }
        Ok(())
    })?;
    if seen.len() != matched.len() {
        return Err(UbError::InputChanged {
            path: table.to_path_buf(),
            problem: "a key in the cache is no longer in the table".into(),
        });
    }
    let Some(out) = out else {
        return Ok(0);
    };
    let mut order: Vec<usize> = (0..kept.ends.len()).collect();
    if out.align {
        order.par_sort_by(|&a, &b| {
            cmp_keys(kept.key(a), kept.key(b)).then(kept.ends[a].0.cmp(&kept.ends[b].0))
        });
    }
    let mut w = RowWriter::create(out.path, out.format, &columns, "NULL")?;
    for &i in &order {
        w.row(kept.raw(i))?;
    }
    w.commit()?;
    Ok(order.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::keys::Table;
    use blindjoin_crypto::item_digest;
    use blindjoin_protocols::NoProgress;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("bj-ub-rows-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The whole-table path this module replaces: the table read into memory, the matched
    /// rows filtered, sorted when aligned (ties by row), written with the table's columns.
    fn write_in_memory(
        table: &Path,
        format: TableFormat,
        keys: &[String],
        matched: &HashSet<ItemDigest>,
        out: RowsOut<'_>,
    ) -> Result<u64, UbError> {
        let t = Table::read_any(table, format, keys)?;
        let digests: Vec<ItemDigest> = (0..t.len()).map(|i| item_digest(t.key(i))).collect();
        let present: HashSet<&ItemDigest> = digests.iter().collect();
        if matched.iter().any(|d| !present.contains(d)) {
            return Err(UbError::InputChanged {
                path: t.path.clone(),
                problem: "a key in the cache is no longer in the table".into(),
            });
        }
        let mut rows: Vec<usize> = (0..t.len())
            .filter(|&i| matched.contains(&digests[i]))
            .collect();
        if out.align {
            rows.sort_by(|&a, &b| cmp_keys(t.key(a), t.key(b)).then(a.cmp(&b)));
        }
        let mut w = RowWriter::create(out.path, out.format, &t.columns, "NULL")?;
        for &i in &rows {
            w.row(t.raw_row(i))?;
        }
        w.commit()?;
        Ok(rows.len() as u64)
    }

    /// The table's key digests, in file order.
    fn digests(table: &Path, format: TableFormat, keys: &[String]) -> Vec<ItemDigest> {
        let t = Table::read_any(table, format, keys).unwrap();
        (0..t.len()).map(|i| item_digest(t.key(i))).collect()
    }

    /// The matched digest sets a test tries on a table whose keys are `all`: none, one, every
    /// third, all.
    fn matched_sets(all: &[ItemDigest]) -> Vec<(String, HashSet<ItemDigest>)> {
        vec![
            ("none".into(), HashSet::new()),
            ("one".into(), all.iter().take(1).copied().collect()),
            ("a third".into(), all.iter().step_by(3).copied().collect()),
            ("all".into(), all.iter().copied().collect()),
        ]
    }

    /// Streams and writes, then writes by the in-memory path, for every matched set, aligned
    /// and not, CSV and Parquet output; the two files must be equal byte for byte.
    fn same_as_in_memory(table: &Path, format: TableFormat, keys: &[String]) {
        let d = table.parent().unwrap();
        for (name, matched) in matched_sets(&digests(table, format, keys)) {
            for align in [false, true] {
                for out_format in [TableFormat::Csv, TableFormat::Parquet] {
                    let (a, b) = (d.join("streamed"), d.join("in-memory"));
                    let tag = format!("{name} align={align} out={out_format:?}");
                    let out = |path| RowsOut {
                        path,
                        format: out_format,
                        align,
                    };
                    let n = write_matched_rows(
                        table,
                        format,
                        keys,
                        &matched,
                        Some(out(&a)),
                        &NoProgress,
                    )
                    .unwrap();
                    let m = write_in_memory(table, format, keys, &matched, out(&b)).unwrap();
                    assert_eq!(n, m, "{tag}");
                    assert_eq!(
                        std::fs::read(&a).unwrap(),
                        std::fs::read(&b).unwrap(),
                        "{tag}"
                    );
                }
            }
        }
    }

    #[test]
    fn csv_rows_are_the_in_memory_paths_byte_for_byte() {
        let d = dir("csv");
        let p = d.join("t.csv");
        // Keys out of order, repeated (in and out of order), quoted with a comma and a line
        // break, CRLF line ends, a last line without its end.
        let ids: Vec<String> = (0..300).map(|i| format!("k{}", (i * 37) % 120)).collect();
        let mut text = "v,id\r\n".to_string();
        for (i, k) in ids.iter().enumerate() {
            if i % 50 == 7 {
                text.push_str(&format!("\"a,\nb{i}\",{k}\r\n"));
            } else {
                text.push_str(&format!("x{i},\"{k}\"\r\n"));
            }
        }
        text.push_str("last,k5");
        std::fs::write(&p, &text).unwrap();
        same_as_in_memory(&p, TableFormat::Csv, &["id".into()]);
        // Two key columns.
        same_as_in_memory(&p, TableFormat::Csv, &["id".into(), "v".into()]);
        // An empty table.
        std::fs::write(&p, "v,id\n").unwrap();
        same_as_in_memory(&p, TableFormat::Csv, &["id".into()]);
    }

    #[cfg(feature = "parquet")]
    #[test]
    fn parquet_rows_are_the_in_memory_paths_byte_for_byte() {
        use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
        let d = dir("parquet");
        let p = d.join("t.parquet");
        let ids: Vec<i64> = (0..500).map(|i| (i * 13) % 170).collect();
        let payload: ArrayRef = std::sync::Arc::new(StringArray::from_iter_values(
            (0..ids.len()).map(|i| format!("p{i}")),
        ));
        let id: ArrayRef = std::sync::Arc::new(Int64Array::from_iter_values(ids.iter().copied()));
        let batch = RecordBatch::try_from_iter([("payload", payload), ("id", id)]).unwrap();
        let file = std::fs::File::create(&p).unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_size(128)
            .build();
        let mut w =
            parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        same_as_in_memory(&p, TableFormat::Parquet, &["id".into()]);
    }

    #[test]
    fn a_matched_key_missing_from_the_table_is_a_changed_input() {
        let d = dir("changed");
        let p = d.join("t.csv");
        std::fs::write(&p, "id\na\nb\n").unwrap();
        let keys = ["id".to_string()];
        let [a, b] = digests(&p, TableFormat::Csv, &keys)[..] else {
            panic!("two rows");
        };
        let matched: HashSet<ItemDigest> = [a, item_digest(b"not a canonical key")].into();
        let out = d.join("out.csv");
        for to in [
            None,
            Some(RowsOut {
                path: &out,
                format: TableFormat::Csv,
                align: true,
            }),
        ] {
            let e = write_matched_rows(
                &p,
                TableFormat::Csv,
                &["id".into()],
                &matched,
                to,
                &NoProgress,
            )
            .unwrap_err();
            assert!(matches!(e, UbError::InputChanged { .. }), "{e}");
        }
        assert!(!out.exists(), "nothing is written for a changed table");
        // Without an output the table is still checked, and nothing is written.
        let ok: HashSet<ItemDigest> = [b].into();
        let n = write_matched_rows(&p, TableFormat::Csv, &["id".into()], &ok, None, &NoProgress);
        assert_eq!(n.unwrap(), 0);
    }
}
