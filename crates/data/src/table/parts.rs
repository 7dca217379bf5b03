//! A table given as a directory of part files (`input_config.path` naming a directory), as
//! Spark, Hive or a sharded export writes them: the parts are taken in name order, and the
//! table is their rows in that order, so row numbers (and an unaligned output's order) are the
//! same as for the one file their concatenation makes.
//!
//! CSV parts must all start with the same header line; the run reads their concatenation (the
//! first part's header, then every part's rows). Parquet parts must all have the same schema;
//! the run reads one Parquet file of all their rows, in order, rewritten with that schema
//! (columns made nullable, as every Parquet file blindjoin writes). The concatenation is made
//! in a private folder (0700, the file 0600) and removed once the table is spilled, except
//! with recovery, where a Parquet one is kept in the recovery folder (`input.parquet`: a
//! resumed run reads the spilled rows' schema from it). Names starting with `.` or `_`
//! (`_SUCCESS`, `.part-0.crc`) and anything but regular files are skipped.

use crate::error::{ConfigError, DataError};
use crate::spec::TableFormat;
use crate::table::private_fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// Longest header line accepted: a part whose first line is longer is refused, not read whole.
const MAX_HEADER: usize = 1 << 20;

/// The part files of `dir`, in name order.
///
/// # Errors
/// The folder cannot be listed; it holds no part.
pub(crate) fn part_files(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let io = |source| DataError::Io {
        path: dir.to_path_buf(),
        action: "listing the input folder's part files",
        source,
    };
    let mut parts = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let skipped = name
            .to_str()
            .is_none_or(|n| n.starts_with('.') || n.starts_with('_'));
        if skipped || !entry.file_type().map_err(io)?.is_file() {
            continue;
        }
        parts.push(entry.path());
    }
    parts.sort();
    if parts.is_empty() {
        return Err(invalid(format!(
            "{}: a folder with no part files (names starting with '.' or '_' are skipped)",
            dir.display()
        )));
    }
    Ok(parts)
}

fn invalid(message: String) -> DataError {
    DataError::Config(ConfigError::Invalid {
        field: "psi_config.input_config.path".into(),
        message,
    })
}

/// The first line of `r` (its `\n` included), at most [`MAX_HEADER`] bytes.
fn first_line(r: &mut impl BufRead, path: &Path) -> Result<Vec<u8>, DataError> {
    let mut line = Vec::new();
    r.by_ref()
        .take(MAX_HEADER as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            action: "reading a part file's header",
            source,
        })?;
    if line.len() > MAX_HEADER {
        return Err(invalid(format!(
            "{}: the first line is longer than {MAX_HEADER} bytes",
            path.display()
        )));
    }
    Ok(line)
}

/// Concatenates CSV `parts` into the new private file `out`: the first part whole, then every
/// other part without its header line, which must be the first part's. Returns the rows'
/// bytes written.
///
/// # Errors
/// A part that cannot be read, has no header or another header than the first; a write error.
pub(crate) fn concat_csv(parts: &[PathBuf], out: &Path) -> Result<u64, DataError> {
    let werr = |source| DataError::Io {
        path: out.to_path_buf(),
        action: "writing the concatenated input parts",
        source,
    };
    let file = private_fs::create_new(out).map_err(werr)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut header: Option<(Vec<u8>, &Path)> = None;
    let mut total = 0u64;
    for part in parts {
        let f = std::fs::File::open(part).map_err(|source| DataError::Io {
            path: part.clone(),
            action: "reading an input part file",
            source,
        })?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let line = first_line(&mut r, part)?;
        let trimmed = line.strip_suffix(b"\n").unwrap_or(&line);
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        if trimmed.is_empty() {
            return Err(invalid(format!(
                "{}: an input part with no header line (every part starts with the same header)",
                part.display()
            )));
        }
        match &header {
            None => {
                w.write_all(trimmed).map_err(werr)?;
                w.write_all(b"\n").map_err(werr)?;
                header = Some((trimmed.to_vec(), part));
            }
            Some((h, first)) if h.as_slice() != trimmed => {
                return Err(invalid(format!(
                    "{}: its header differs from {}'s; every part of the input folder must \
                     start with the same header",
                    part.display(),
                    first.display()
                )));
            }
            Some(_) => {}
        }
        // The rows, with a final newline if the part lacks one.
        let mut last = b'\n';
        loop {
            let buf = r.fill_buf().map_err(|source| DataError::Io {
                path: part.clone(),
                action: "reading an input part file",
                source,
            })?;
            if buf.is_empty() {
                break;
            }
            w.write_all(buf).map_err(werr)?;
            last = buf[buf.len() - 1];
            total += buf.len() as u64;
            let n = buf.len();
            r.consume(n);
        }
        if last != b'\n' {
            w.write_all(b"\n").map_err(werr)?;
        }
    }
    w.flush().map_err(werr)?;
    Ok(total)
}

/// Concatenates Parquet `parts` into `out` (written atomically, 0600): every part's rows in
/// order, under the first part's schema. Returns the rows.
///
/// # Errors
/// A part that is not readable Parquet or has another schema than the first; a write error.
#[cfg(feature = "parquet")]
pub(crate) fn concat_parquet(parts: &[PathBuf], out: &Path) -> Result<u64, DataError> {
    use crate::table::parquet_io::{ParquetRows, RowBatch, TypedRowWriter};
    let first = parts
        .first()
        .ok_or_else(|| invalid("a folder with no part files".into()))?;
    let schema = ParquetRows::open(first, &[])?.schema().clone();
    let mut w = TypedRowWriter::create(out, &schema, true, "")?;
    let mut rows = 0u64;
    let mut batch = RowBatch::default();
    for part in parts {
        let mut r = ParquetRows::open(part, &[])?;
        if r.schema().fields() != schema.fields() {
            return Err(invalid(format!(
                "{}: its schema differs from {}'s; every part of the input folder must have \
                 the same columns and types",
                part.display(),
                first.display()
            )));
        }
        while r.next_batch(&mut batch)? {
            for i in 0..batch.len() {
                w.row(batch.row(i))?;
            }
            rows += batch.len() as u64;
        }
    }
    w.commit()?;
    Ok(rows)
}

/// Without Parquet support: refused.
#[cfg(not(feature = "parquet"))]
pub(crate) fn concat_parquet(parts: &[PathBuf], _out: &Path) -> Result<u64, DataError> {
    Err(invalid(format!(
        "{}: this build reads no Parquet",
        parts
            .first()
            .map_or_else(String::new, |p| p.display().to_string())
    )))
}

/// Where a recovery folder keeps a Parquet folder input's concatenation.
pub(crate) const KEPT_PARQUET: &str = "input.parquet";

/// The input to read: `input` itself, or, when it names a folder, the concatenation of its
/// parts in a private folder made in `scratch` (removed when the returned guard drops); a
/// Parquet one goes to `keep` instead when given (a recovery folder's [`KEPT_PARQUET`]).
///
/// # Errors
/// As [`part_files`], [`concat_csv`] and [`concat_parquet`].
pub(crate) fn resolve(
    input: &Path,
    format: TableFormat,
    scratch: &Path,
    keep: Option<&Path>,
) -> Result<(PathBuf, Option<Scratch>), DataError> {
    if !input.is_dir() {
        return Ok((input.to_path_buf(), None));
    }
    let parts = part_files(input)?;
    if let (TableFormat::Parquet, Some(kept)) = (format, keep) {
        concat_parquet(&parts, kept)?;
        return Ok((kept.to_path_buf(), None));
    }
    let dir =
        private_fs::create_private_dir_in(scratch, "input").map_err(|source| DataError::Io {
            path: scratch.to_path_buf(),
            action: "creating a private folder for the input's parts",
            source,
        })?;
    let guard = Scratch(dir.clone());
    let joined = match format {
        TableFormat::Csv => {
            let p = dir.join("input.csv");
            concat_csv(&parts, &p)?;
            p
        }
        TableFormat::Parquet => {
            let p = dir.join("input.parquet");
            concat_parquet(&parts, &p)?;
            p
        }
    };
    Ok((joined, Some(guard)))
}

/// A private scratch folder, removed when dropped.
pub(crate) struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The parts' names, sizes and modification times, for a recovery fingerprint (a folder's own
/// metadata does not change when a part is rewritten in place).
pub(crate) fn parts_fingerprint(dir: &Path) -> Result<String, DataError> {
    let mut text = String::new();
    for p in part_files(dir)? {
        let meta = std::fs::metadata(&p).map_err(|source| DataError::Io {
            path: p.clone(),
            action: "reading an input part file",
            source,
        })?;
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        text.push_str(&format!("{}:{}:{modified};", p.display(), meta.len()));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bj-parts-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn parts_concatenate_in_name_order_with_one_header() {
        let d = dir("concat");
        let input = d.join("in");
        std::fs::create_dir(&input).unwrap();
        std::fs::write(input.join("part-1.csv"), "id,v\r\nc,3\nd,4").unwrap();
        std::fs::write(input.join("part-0.csv"), "id,v\na,1\nb,2\n").unwrap();
        std::fs::write(input.join("part-2.csv"), "id,v\n").unwrap();
        std::fs::write(input.join("_SUCCESS"), "").unwrap();
        std::fs::write(input.join(".part-0.csv.crc"), "x").unwrap();
        std::fs::create_dir(input.join("sub")).unwrap();
        let (path, guard) = resolve(&input, TableFormat::Csv, &d, None).unwrap();
        let got = std::fs::read_to_string(&path).unwrap();
        assert_eq!(got, "id,v\na,1\nb,2\nc,3\nd,4\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(path.parent().unwrap()), 0o700);
        }
        drop(guard);
        assert!(!path.exists(), "the concatenation is removed");
        // A file is used as it is.
        let f = input.join("part-0.csv");
        let (same, none) = resolve(&f, TableFormat::Csv, &d, None).unwrap();
        assert_eq!(same, f);
        assert!(none.is_none());
    }

    #[test]
    fn a_part_with_another_or_no_header_and_an_empty_folder_are_refused() {
        let d = dir("bad");
        let input = d.join("in");
        std::fs::create_dir(&input).unwrap();
        let e = resolve(&input, TableFormat::Csv, &d, None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no part files"), "{e}");
        std::fs::write(input.join("a.csv"), "id,v\na,1\n").unwrap();
        std::fs::write(input.join("b.csv"), "id,w\nb,2\n").unwrap();
        let e = resolve(&input, TableFormat::Csv, &d, None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("b.csv") && e.contains("same header"), "{e}");
        std::fs::write(input.join("b.csv"), "").unwrap();
        let e = resolve(&input, TableFormat::Csv, &d, None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no header"), "{e}");
        // CSV parts read as Parquet: refused, naming the part.
        std::fs::write(input.join("b.csv"), "id,v\nb,2\n").unwrap();
        assert!(resolve(&input, TableFormat::Parquet, &d, None).is_err());
        // No scratch folder is left behind by a refused folder.
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".blindjoin-input")
            })
            .collect();
        assert!(left.is_empty());
    }

    #[test]
    fn the_fingerprint_sees_a_part_change() {
        let d = dir("fp");
        std::fs::write(d.join("a.csv"), "id\na\n").unwrap();
        let before = parts_fingerprint(&d).unwrap();
        std::fs::write(d.join("a.csv"), "id\na\nb\n").unwrap();
        assert_ne!(before, parts_fingerprint(&d).unwrap());
    }
}
