//! The server's label columns in its cache, and the client's output joined with them
//! (labels over unbalanced PSI; the sealing is [`blindjoin_protocols::ub_oprf::labels`]).
//!
//! One server key's label is all its rows' values of the label columns, as text (the CSV
//! field, unquoted): `u32` row count, then per row per column `u32` length and the bytes, all
//! little-endian. The client's output is its own row followed by the label columns, once per
//! server row of the matched key (an inner join: a key with r server rows gives each of the
//! client's rows of that key r output rows, in the server's file order).
//!
//! The server's table is streamed row by row to generate the cache
//! ([`for_each_label_row`]): each row's cells go to the cache sort, which joins a key's rows
//! into its label ([`super::gen_cache`]), so nothing here grows with the table.

use super::{LabelChoice, UbError};
use crate::error::{ConfigError, DataError};
use crate::pipeline::spill::for_each_row;
use crate::spec::TableFormat;
use crate::table::csv::{CsvError, CsvReader, FieldSpan, field_value};
use blindjoin_crypto::ItemDigest;
use blindjoin_protocols::{Progress, ProtocolError};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// One key's label: its rows, each a value per label column.
pub type LabelRows = Vec<Vec<Vec<u8>>>;

/// The label columns the server's cache carries, as `choice` says.
///
/// # Errors
/// A chosen column the table lacks, or a key column chosen.
pub fn choose_columns(
    header: &[String],
    keys: &[String],
    choice: &LabelChoice,
) -> Result<Vec<String>, UbError> {
    match choice {
        LabelChoice::None => Ok(Vec::new()),
        LabelChoice::AllNonKey => Ok(header
            .iter()
            .filter(|h| !keys.contains(h))
            .cloned()
            .collect()),
        LabelChoice::Columns(cols) => {
            for c in cols {
                if !header.contains(c) {
                    return Err(field_error(format!(
                        "{c:?} is not a column of the server's table (columns: {})",
                        header.join(", ")
                    )));
                }
                if keys.contains(c) {
                    return Err(field_error(format!(
                        "{c:?} is a key column; labels are the other columns"
                    )));
                }
            }
            Ok(cols.clone())
        }
    }
}

fn field_error(message: String) -> UbError {
    UbError::Data(DataError::Config(ConfigError::Invalid {
        field: "blindjoin.label_columns".into(),
        message,
    }))
}

/// The column names of the CSV table at `path`, read from as much of its start as the header
/// takes.
///
/// # Errors
/// The file does not read, or its header does not parse.
pub fn csv_header(path: &Path) -> Result<Vec<String>, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        action: "reading the input",
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let mut block = Vec::new();
    let mut want: u64 = 64 << 10;
    loop {
        let more = want.saturating_sub(block.len() as u64);
        let got = Read::by_ref(&mut file)
            .take(more)
            .read_to_end(&mut block)
            .map_err(io)?;
        let eof = (got as u64) < more;
        match CsvReader::new(&block, path) {
            // The header ends inside what was read (a line end after it), or the file does.
            Ok(r) if eof || r.offset() < block.len() || block.ends_with(b"\n") => {
                return Ok(r.header().to_vec());
            }
            // A quoted name or a CRLF cut by the end of what was read: read more.
            Err(e)
                if eof
                    || !matches!(
                        e,
                        CsvError::UnterminatedQuote { .. } | CsvError::BareCarriageReturn { .. }
                    ) =>
            {
                return Err(e.into());
            }
            _ => want = want.saturating_mul(2),
        }
    }
}

/// Takes one row of the server's table: its key digest, row number and encoded label cells.
pub type LabelRowSink<'a> = dyn FnMut(ItemDigest, u64, &[u8]) -> Result<(), DataError> + 'a;

/// Streams the CSV table at `path` (keyed by `keys`) and hands `each` every row's key digest,
/// row number and values of `columns` encoded as one row of [`encode`] (per column a `u32` LE
/// length and the bytes), in file order; returns the row count. The reader holds about two
/// blocks of the file ([`for_each_row`]); nothing grows with the table.
///
/// # Errors
/// A chosen column the table lacks; the table does not read; `each`'s.
pub fn for_each_label_row(
    path: &Path,
    keys: &[String],
    columns: &[String],
    progress: &dyn Progress,
    each: &mut LabelRowSink<'_>,
) -> Result<u64, UbError> {
    let header = csv_header(path)?;
    let idx: Vec<usize> = columns
        .iter()
        .map(|c| {
            header
                .iter()
                .position(|h| h == c)
                .ok_or_else(|| field_error(format!("{c:?} is not a column of the server's table")))
        })
        .collect::<Result<_, _>>()?;
    let mut fields: Vec<FieldSpan> = Vec::new();
    let mut cells: Vec<u8> = Vec::new();
    let (_, rows) = for_each_row(path, TableFormat::Csv, keys, progress, &mut |r| {
        // The row parsed when it was read; parse it again for its fields.
        let mut reader = CsvReader::resume(r.raw, path, &header, 1);
        if reader.next_record(&mut fields)?.is_none() {
            return Err(DataError::Protocol(ProtocolError::Unreachable(
                "a row of the server's table that parsed once no longer does",
            )));
        }
        cells.clear();
        for &i in &idx {
            let v = fields
                .get(i)
                .map(|f| field_value(r.raw, f))
                .unwrap_or_default();
            push_value(&mut cells, &v);
        }
        each(r.digest, r.row, &cells)
    })?;
    Ok(rows)
}

/// Appends one value of a label row: `u32` LE length, then the bytes.
fn push_value(out: &mut Vec<u8>, v: &[u8]) {
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    out.extend_from_slice(v);
}

/// Encodes one key's label rows.
pub fn encode(rows: &[&[Vec<u8>]]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for r in rows {
        for v in r.iter() {
            push_value(&mut out, v);
        }
    }
    out
}

/// Decodes a label of `columns` columns; a malformed one is the server's fault (it opened,
/// so the server sealed it).
///
/// # Errors
/// [`ProtocolError::PeerMisbehaved`] for a label that does not decode.
pub fn decode(bytes: &[u8], columns: usize) -> Result<LabelRows, ProtocolError> {
    let bad = || ProtocolError::PeerMisbehaved("sealed a malformed label".into());
    let mut at = 0usize;
    let u32_at = |at: &mut usize| -> Result<usize, ProtocolError> {
        let b = bytes.get(*at..*at + 4).ok_or_else(bad)?;
        *at += 4;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let n = u32_at(&mut at)?;
    // Each row takes at least 4 bytes per column; bound the allocation by what is there.
    if columns > 0 && n > bytes.len() / (4 * columns) {
        return Err(bad());
    }
    let mut rows = Vec::with_capacity(n.min(bytes.len()));
    for _ in 0..n {
        let mut row = Vec::with_capacity(columns);
        for _ in 0..columns {
            let l = u32_at(&mut at)?;
            let v = bytes
                .get(at..at.checked_add(l).ok_or_else(bad)?)
                .ok_or_else(bad)?;
            at += l;
            row.push(v.to_vec());
        }
        rows.push(row);
    }
    if at != bytes.len() {
        return Err(bad());
    }
    Ok(rows)
}

/// The output's label column names: the server's, with `_server` appended (repeatedly) to a
/// name the client's table already has.
pub fn output_names(client: &[String], labels: &[String]) -> Vec<String> {
    let mut taken: Vec<String> = client.to_vec();
    let mut out = Vec::with_capacity(labels.len());
    for l in labels {
        let mut name = l.clone();
        while taken.contains(&name) {
            name.push_str("_server");
        }
        taken.push(name.clone());
        out.push(name);
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::table::keys::Table;

    /// Each row's values of `columns` in the CSV `table`, in row order (the whole-table reading
    /// that [`for_each_label_row`] replaced, kept as the reference).
    pub(in crate::ub) fn row_values(table: &Table, columns: &[String]) -> Vec<Vec<Vec<u8>>> {
        let mut reader = CsvReader::new(&table.bytes, &table.path).unwrap();
        let idx: Vec<usize> = columns
            .iter()
            .map(|c| reader.column_index(c).unwrap())
            .collect();
        let mut out = Vec::with_capacity(table.len());
        let mut fields: Vec<FieldSpan> = Vec::new();
        while let Some(_rec) = reader.next_record(&mut fields).unwrap() {
            out.push(
                idx.iter()
                    .map(|&i| field_value(&table.bytes, &fields[i]).into_owned())
                    .collect(),
            );
        }
        out
    }

    /// Groups row indices by their key digest: for each of `unique` (sorted), the rows holding it,
    /// in file order.
    pub(in crate::ub) fn rows_by_key(
        unique: &[ItemDigest],
        row_digests: &[ItemDigest],
    ) -> Vec<Vec<usize>> {
        let mut by: Vec<Vec<usize>> = vec![Vec::new(); unique.len()];
        for (i, d) in row_digests.iter().enumerate() {
            if let Ok(u) = unique.binary_search(d) {
                by[u].push(i);
            }
        }
        by
    }

    /// The cache made from the CSV table at `path` with label columns `cols`: by the rows'
    /// stream and the sort (`ext`, under `limits`), and by the whole-table gathering this
    /// module had (`mem`, the reference); returns the two files and the runs written.
    fn both(
        path: &Path,
        cols: &[&str],
        limits: crate::ub::gen_cache::SortLimits,
    ) -> (Vec<u8>, Vec<u8>, usize) {
        use crate::ub::gen_cache::tests::write_in_memory;
        use crate::ub::gen_cache::{CacheSorter, LabelSource};
        use blindjoin_crypto::oprf::OprfScalar;
        use blindjoin_crypto::{Curve, item_digest};
        use blindjoin_protocols::NoProgress;
        use blindjoin_protocols::ub_oprf::labels::SALT_LEN;
        let key = OprfScalar::from_seed(Curve::FourQ, &[9u8; 32]).unwrap();
        let keys = vec!["id".to_string()];
        let src = LabelSource {
            salt: [5; SALT_LEN],
            columns: cols.iter().map(|c| c.to_string()).collect(),
        };
        let (mem, ext) = (path.with_extension("mem"), path.with_extension("ext"));
        // The reference: the table read whole, each key's rows gathered.
        let t = Table::read_any(path, TableFormat::Csv, &keys).unwrap();
        let digests: Vec<ItemDigest> = (0..t.len()).map(|i| item_digest(t.key(i))).collect();
        let mut unique = digests.clone();
        unique.sort_unstable();
        unique.dedup();
        let by_key = rows_by_key(&unique, &digests);
        let vals = row_values(&t, &src.columns);
        let plain = |d: &ItemDigest| {
            let u = unique.binary_search(d).unwrap();
            let rows: Vec<&[Vec<u8>]> = by_key[u].iter().map(|&i| &vals[i][..]).collect();
            encode(&rows)
        };
        write_in_memory(&mem, &key, &digests, Some((&src, &plain)));
        // The stream.
        let mut s = CacheSorter::new(&ext, &key, Curve::FourQ, Some(&src), limits);
        let rows = for_each_label_row(path, &keys, &src.columns, &NoProgress, &mut |d, r, c| {
            s.push_row(d, r, c)
        })
        .unwrap();
        assert_eq!(rows, t.len() as u64);
        let (_, runs) = s.finish(&NoProgress).unwrap();
        let out = (
            std::fs::read(&mem).unwrap(),
            std::fs::read(&ext).unwrap(),
            runs,
        );
        std::fs::remove_file(mem).unwrap();
        std::fs::remove_file(ext).unwrap();
        out
    }

    #[test]
    fn the_streamed_labels_make_the_whole_table_cache_byte_for_byte() {
        use crate::ub::gen_cache::tests::dir;
        use crate::ub::gen_cache::{CHUNK_BYTES_PER_ROW, SortLimits};
        let d = dir("labels-csv");
        let five = SortLimits {
            memory: 5 * (CHUNK_BYTES_PER_ROW + 24),
            fan_in: 3,
        };
        // 1,000 keys: every seventh twice in a row and again at the end (repeats within and
        // across chunks), k3 every 50 rows (rows in many chunks); empty scores, notes with
        // commas, quotes and line ends, CRLF on some lines.
        let mut csv = String::from("id,score,note\n");
        let row = |csv: &mut String, i: usize, n: usize| {
            let score = if n.is_multiple_of(5) {
                String::new()
            } else {
                n.to_string()
            };
            let note = match n % 4 {
                0 => String::new(),
                1 => format!("\"a,b \"\"q{n}\"\"\nline 2\""),
                2 => format!("plain {n}"),
                _ => "\"\"".to_string(),
            };
            let end = if n.is_multiple_of(6) { "\r\n" } else { "\n" };
            csv.push_str(&format!("k{i},{score},{note}{end}"));
        };
        let mut n = 0;
        for i in 0..1000 {
            row(&mut csv, i, n);
            n += 1;
            if i % 7 == 0 {
                row(&mut csv, i, n);
                n += 1;
            }
            if i % 50 == 49 {
                row(&mut csv, 3, n);
                n += 1;
            }
        }
        for i in (0..1000).step_by(7) {
            row(&mut csv, i, n);
            n += 1;
        }
        let big = d.join("big.csv");
        std::fs::write(&big, &csv).unwrap();
        for cols in [&["note", "score"][..], &["score"]] {
            let (mem, ext, runs) = both(&big, cols, five);
            assert_eq!(ext, mem, "{cols:?}");
            // More runs than the fan-in: several merge passes.
            assert!(runs > 100, "{runs}");
            let (mem, ext, runs) = both(&big, cols, SortLimits::default());
            assert_eq!(ext, mem, "{cols:?}");
            assert_eq!(runs, 0);
        }
        // One row; a header alone; one key on every row, a chunk each.
        let one = d.join("one.csv");
        std::fs::write(&one, "id,v\nk,\"x,\ny\"\n").unwrap();
        let (mem, ext, _) = both(&one, &["v"], five);
        assert_eq!(ext, mem);
        std::fs::write(&one, "id,v\n").unwrap();
        let (mem, ext, _) = both(&one, &["v"], five);
        assert_eq!(ext, mem);
        let same: String = (0..30).map(|i| format!("k,{i}\n")).collect();
        std::fs::write(&one, format!("id,v\n{same}")).unwrap();
        let alone = SortLimits {
            memory: 1,
            fan_in: 2,
        };
        let (mem, ext, runs) = both(&one, &["v"], alone);
        assert_eq!(ext, mem);
        assert_eq!(runs, 29);
    }

    #[test]
    fn the_header_is_read_whatever_its_length_and_a_missing_column_is_named() {
        use crate::ub::gen_cache::tests::dir;
        let d = dir("labels-header");
        let p = d.join("t.csv");
        // A header longer than the first read, a quoted name with a line end in it.
        let long = "c".repeat(100_000);
        std::fs::write(&p, format!("id,\"a\nb\",{long}\r\nk,1,2\r\n")).unwrap();
        assert_eq!(csv_header(&p).unwrap(), ["id", "a\nb", long.as_str()]);
        std::fs::write(&p, "id,v").unwrap();
        assert_eq!(csv_header(&p).unwrap(), ["id", "v"]);
        std::fs::write(&p, "").unwrap();
        assert!(csv_header(&p).is_err());
        std::fs::write(&p, "id,v\nk,1\n").unwrap();
        let keys = vec!["id".to_string()];
        let e = for_each_label_row(
            &p,
            &keys,
            &["w".to_string()],
            &blindjoin_protocols::NoProgress,
            &mut |_, _, _| Ok(()),
        )
        .unwrap_err();
        assert!(e.to_string().contains("\"w\""), "{e}");
    }

    #[test]
    fn encode_decode_round_trip_and_junk_is_refused() {
        let rows: Vec<Vec<Vec<u8>>> = vec![
            vec![b"1".to_vec(), b"".to_vec()],
            vec![b"a,\"b".to_vec(), vec![0xff; 300]],
        ];
        let refs: Vec<&[Vec<u8>]> = rows.iter().map(|r| &r[..]).collect();
        let e = encode(&refs);
        assert_eq!(decode(&e, 2).unwrap(), rows);
        assert!(decode(&e[..e.len() - 1], 2).is_err());
        assert!(decode(&[e.clone(), vec![0]].concat(), 2).is_err());
        assert!(decode(&[0xff, 0xff, 0xff, 0xff], 2).is_err());
        assert!(decode(&[], 1).is_err());
        assert_eq!(decode(&encode(&[]), 3).unwrap(), LabelRows::new());
    }

    #[test]
    fn names_and_choices() {
        let client = vec!["id".to_string(), "score".to_string()];
        assert_eq!(
            output_names(&client, &["score".into(), "region".into()]),
            vec!["score_server", "region"]
        );
        let header: Vec<String> = ["id", "a", "b"].map(String::from).to_vec();
        let keys = vec!["id".to_string()];
        let cols = |c: &[&str]| LabelChoice::Columns(c.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            choose_columns(&header, &keys, &LabelChoice::AllNonKey).unwrap(),
            ["a", "b"]
        );
        assert!(
            choose_columns(&header, &keys, &LabelChoice::None)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            choose_columns(&header, &keys, &cols(&["b", "a"])).unwrap(),
            ["b", "a"]
        );
        assert!(choose_columns(&header, &keys, &cols(&["id"])).is_err());
        assert!(choose_columns(&header, &keys, &cols(&["zz"])).is_err());
    }
}
