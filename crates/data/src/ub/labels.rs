//! The server's label columns in its cache, and the client's output joined with them
//! (labels over unbalanced PSI; the sealing is [`blindjoin_protocols::ub_oprf::labels`]).
//!
//! One server key's label is all its rows' values of the label columns, as text (the CSV
//! field, unquoted): `u32` row count, then per row per column `u32` length and the bytes, all
//! little-endian. The client's output is its own row followed by the label columns, once per
//! server row of the matched key (an inner join: a key with r server rows gives each of the
//! client's rows of that key r output rows, in the server's file order).

use super::{LabelChoice, UbError};
use crate::error::{ConfigError, DataError};
use crate::table::csv::{CsvReader, FieldSpan, field_value};
use crate::table::keys::Table;
use blindjoin_crypto::ItemDigest;
use blindjoin_protocols::ProtocolError;

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

/// Each row's values of `columns` in the CSV `table`, in row order.
///
/// # Errors
/// The table's bytes no longer parse (they did when it was read).
pub fn row_values(table: &Table, columns: &[String]) -> Result<Vec<Vec<Vec<u8>>>, UbError> {
    let mut reader = CsvReader::new(&table.bytes, &table.path).map_err(DataError::from)?;
    let idx: Vec<usize> = columns
        .iter()
        .map(|c| {
            reader
                .column_index(c)
                .ok_or_else(|| field_error(format!("{c:?} is not a column of the server's table")))
        })
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(table.len());
    let mut fields: Vec<FieldSpan> = Vec::new();
    while let Some(_rec) = reader.next_record(&mut fields).map_err(DataError::from)? {
        out.push(
            idx.iter()
                .map(|&i| {
                    fields
                        .get(i)
                        .map(|f| field_value(&table.bytes, f).into_owned())
                        .unwrap_or_default()
                })
                .collect(),
        );
    }
    Ok(out)
}

/// Encodes one key's label rows.
pub fn encode(rows: &[&[Vec<u8>]]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for r in rows {
        for v in r.iter() {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
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

/// Groups row indices by their key digest: for each of `unique` (sorted), the rows holding it,
/// in file order.
pub fn rows_by_key(unique: &[ItemDigest], row_digests: &[ItemDigest]) -> Vec<Vec<usize>> {
    let mut by: Vec<Vec<usize>> = vec![Vec::new(); unique.len()];
    for (i, d) in row_digests.iter().enumerate() {
        if let Ok(u) = unique.binary_search(d) {
            by[u].push(i);
        }
    }
    by
}

#[cfg(test)]
mod tests {
    use super::*;

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
