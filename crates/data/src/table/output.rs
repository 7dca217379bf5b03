//! Atomic output files: everything is written to a hidden temporary file beside the target and
//! renamed over it only when complete, so a failed run never leaves a file that looks like a
//! result. A dropped, uncommitted [`AtomicFile`] deletes its temporary file.
//!
//! Outputs hold the user's rows (or a cache, a checkpoint, a report about them), so the
//! temporary file is made private ([`crate::table::private_fs::create_new`]: mode 0600, a random name,
//! create-new, no symlink followed) and the rename keeps that mode: the final file is 0600
//! too, whatever the umask or a file it replaces. A user who shares a result does so with
//! `chmod`.

use crate::error::DataError;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file being written; becomes visible at `path` only on [`AtomicFile::commit`].
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Starts writing what will become `path`.
    ///
    /// # Errors
    /// The directory does not exist or is not writable.
    pub fn create(path: &Path) -> Result<AtomicFile, DataError> {
        Self::create_buffered(path, 1 << 20)
    }

    /// [`AtomicFile::create`] for secret bytes: every write goes straight to the file, so no
    /// copy of them stays in a buffer that is freed unzeroized (the caller buffers in memory it
    /// zeroizes).
    ///
    /// # Errors
    /// As [`AtomicFile::create`].
    pub fn create_unbuffered(path: &Path) -> Result<AtomicFile, DataError> {
        // A zero-capacity `BufWriter` hands every write to the file without copying it.
        Self::create_buffered(path, 0)
    }

    fn create_buffered(path: &Path, buffer: usize) -> Result<AtomicFile, DataError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut r = [0u8; 8];
        blindjoin_crypto::random_bytes(&mut r).map_err(|e| DataError::Io {
            path: path.to_path_buf(),
            action: "naming the output's temporary file",
            source: std::io::Error::other(e),
        })?;
        let tag = u64::from_le_bytes(r);
        let tmp = path.with_file_name(format!(".{name}.blindjoin-tmp-{tag:016x}"));
        let file = crate::table::private_fs::create_new(&tmp).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            action: "creating the output (does its directory exist and is it writable?)",
            source,
        })?;
        Ok(AtomicFile {
            path: path.to_path_buf(),
            tmp,
            out: Some(BufWriter::with_capacity(buffer, file)),
        })
    }

    /// Appends bytes.
    ///
    /// # Errors
    /// The disk is full or the file vanished.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        let err = |source| DataError::Io {
            path: self.path.clone(),
            action: "writing the output",
            source,
        };
        match self.out.as_mut() {
            Some(out) => out.write_all(bytes).map_err(err),
            None => Ok(()),
        }
    }

    /// Flushes, syncs and renames the file into place.
    ///
    /// # Errors
    /// Flush, sync or rename failed; the temporary file is removed.
    pub fn commit(mut self) -> Result<(), DataError> {
        let err = |action, source| DataError::Io {
            path: self.path.clone(),
            action,
            source,
        };
        if let Some(out) = self.out.take() {
            let file = out
                .into_inner()
                .map_err(|e| err("writing the output", e.into_error()))?;
            file.sync_all().map_err(|e| err("syncing the output", e))?;
        }
        std::fs::rename(&self.tmp, &self.path).map_err(|e| err("renaming the output into place", e))
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.out.is_some() {
            self.out = None;
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `path` atomically.
///
/// # Errors
/// As [`AtomicFile`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)?;
    f.commit()
}

/// Where a run's kept rows go, one at a time (a row is carried as its table's
/// [`crate::table::writer::Columns`] say): the output ([`crate::table::writer::RowWriter`]).
pub trait Sink {
    /// Appends one row.
    ///
    /// # Errors
    /// Writing failed; the error names the output.
    fn row(&mut self, row: &[u8]) -> Result<(), DataError>;
}

/// Rows as lines, for tests.
#[cfg(test)]
impl Sink for Vec<u8> {
    fn row(&mut self, row: &[u8]) -> Result<(), DataError> {
        self.extend_from_slice(row);
        self.push(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_appears_until_commit() {
        let dir = std::env::temp_dir().join(format!("bj-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out.csv");
        let _ = std::fs::remove_file(&p);
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"id\n1\n").unwrap();
        assert!(!p.exists());
        drop(f);
        assert!(!p.exists());
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "temporary file left behind"
        );
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"id\n1\n").unwrap();
        f.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"id\n1\n");
    }

    /// The temporary file and the output it becomes are 0600, also when they replace a wider
    /// file; two writers of one path never share a temporary file.
    #[cfg(unix)]
    #[test]
    fn outputs_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = std::env::temp_dir().join(format!("bj-atomic-{}-private", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out.csv");
        std::fs::write(&p, b"old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (a, b) = (
            AtomicFile::create(&p).unwrap(),
            AtomicFile::create(&p).unwrap(),
        );
        assert_ne!(a.tmp, b.tmp);
        assert_eq!(mode(&a.tmp), 0o600);
        drop(b);
        a.commit().unwrap();
        assert_eq!(mode(&p), 0o600);
        write_atomic(&p, b"id\n").unwrap();
        assert_eq!(mode(&p), 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
