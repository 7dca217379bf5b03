//! The sender DB file: [`SenderDb::to_bytes`] (magic `BJAPSIDB`, a format version, the
//! parameters, the OPRF key seed, the entries and a SHA-256 checksum of all of it), written
//! atomically to a private file (mode 0600, [`AtomicFile`]) because it holds the OPRF key:
//! whoever reads it can answer queries as the sender and test any key against the table.
//! Loading checks the magic, checksum and version before anything else and names the file in
//! every refusal.

use crate::error::DataError;
use crate::table::output::AtomicFile;
use blindjoin_apsi::{ApsiError, SenderDb};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// The DB file of bucket `i` in a bucket folder.
pub fn bucket_path(folder: &Path, i: usize) -> PathBuf {
    folder.join(format!("bucket-{i}.sdb"))
}

/// Writes `db` to `path` (atomically, mode 0600).
///
/// # Errors
/// The directory is missing or not writable, the disk is full.
pub fn save(db: &SenderDb, path: &Path) -> Result<(), DataError> {
    let bytes = db.to_bytes();
    let mut f = AtomicFile::create(path)?;
    f.write_all(&bytes)?;
    f.commit()
}

/// Loads the DB saved at `path`.
///
/// # Errors
/// [`DataError::ApsiInput`] naming the file when it is missing, damaged, truncated, of another
/// format version or not a sender DB at all.
pub fn load(path: &Path) -> Result<SenderDb, DataError> {
    let bytes = Zeroizing::new(std::fs::read(path).map_err(|e| DataError::ApsiInput {
        path: path.to_path_buf(),
        problem: format!("cannot read the sender DB: {e}"),
    })?);
    SenderDb::from_bytes(&bytes).map_err(|e| DataError::ApsiInput {
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
