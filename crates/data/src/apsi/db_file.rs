//! The sender DB file: [`SenderDb::write_to`] (magic `BJAPSIDB`, a format version, the
//! parameters, the OPRF key seed, the bundles' plaintexts as the online phase uses them and a
//! SHA-256 checksum of all of it), streamed atomically to a private file (mode 0600,
//! [`AtomicFile`]) because it holds the OPRF key: whoever reads it can answer queries as the
//! sender and test any key against the table. Loading streams the file through
//! [`SenderDb::read_from`] (magic and version first, every count bounded before anything is
//! allocated, the checksum before the DB is used) and names the file in every refusal.

use crate::error::DataError;
use crate::table::output::AtomicFile;
use blindjoin_apsi::{ApsiError, SenderDb};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

/// The DB file of bucket `i` in a bucket folder.
pub fn bucket_path(folder: &Path, i: usize) -> PathBuf {
    folder.join(format!("bucket-{i}.sdb"))
}

/// Writes `db` to `path` (atomically, mode 0600).
///
/// # Errors
/// The directory is missing or not writable, the disk is full.
pub fn save(db: &SenderDb, path: &Path) -> Result<(), DataError> {
    let mut w = Sink {
        file: AtomicFile::create(path)?,
        error: None,
    };
    if let Err(source) = db.write_to(&mut w) {
        return Err(w.error.take().unwrap_or(DataError::Io {
            path: path.to_path_buf(),
            action: "writing the sender DB",
            source,
        }));
    }
    w.file.commit()
}

/// [`AtomicFile`] as a [`Write`], keeping its error (which names the file).
struct Sink {
    file: AtomicFile,
    error: Option<DataError>,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.file.write_all(buf) {
            Ok(()) => Ok(buf.len()),
            Err(e) => {
                let m = e.to_string();
                self.error = Some(e);
                Err(std::io::Error::other(m))
            }
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Loads the DB saved at `path`.
///
/// # Errors
/// [`DataError::ApsiInput`] naming the file when it is missing, damaged, truncated, of another
/// format version or not a sender DB at all.
pub fn load(path: &Path) -> Result<SenderDb, DataError> {
    let unreadable = |e: std::io::Error| DataError::ApsiInput {
        path: path.to_path_buf(),
        problem: format!("cannot read the sender DB: {e}"),
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let len = file.metadata().map_err(unreadable)?.len();
    let mut r = BufReader::with_capacity(1 << 20, file);
    SenderDb::read_from(&mut r, len).map_err(|e| DataError::ApsiInput {
        path: path.to_path_buf(),
        problem: match e {
            ApsiError::Db(m) => format!(
                "{m}; make it again with source_file and save_db_only (SEAL-format DBs of \
                 Microsoft APSI are not read)"
            ),
            other => other.to_string(),
        },
    })
}
