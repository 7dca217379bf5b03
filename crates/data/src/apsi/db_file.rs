//! The sender DB file: [`SenderDb::write_to`] (magic `BJAPSIDB`, a format version, the
//! plaintext form, the parameters, the OPRF key seed, the bundles' plaintexts in NTT form or
//! bit-packed coefficient form ([`DbForm`], chosen by `compress`) and a SHA-256 checksum of all
//! of it; `blindjoin_apsi::sender_db::file` has the layout), streamed atomically to a private
//! file (mode 0600, [`AtomicFile`]) because it holds the OPRF key: whoever reads it can answer
//! queries as the sender and test any key against the table. So a DB file whose permissions
//! grant anything to group or others is refused, as key files are
//! ([`private_fs::open_secret`]), and the bytes pass through buffers that are zeroized
//! ([`SecretSink`], [`SecretReader`]). Saving a DB (a new key) starts its query count at 0
//! (`<file>.queries`, [`budget::start`]). Loading streams the file through
//! [`SenderDb::read_from`] (magic, version and form first, every count bounded before anything
//! is allocated, the checksum before the DB is used), reads either form, and names the file in
//! every refusal.

use crate::error::DataError;
use crate::table::output::AtomicFile;
use crate::table::private_fs;
use crate::ub::budget;
use blindjoin_apsi::sender_db::DbForm;
use blindjoin_apsi::{ApsiError, SenderDb};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// Bytes buffered between the DB and its file: 1 MiB, as other outputs.
const BUFFER: usize = 1 << 20;

/// The DB file of bucket `i` in a bucket folder.
pub fn bucket_path(folder: &Path, i: usize) -> PathBuf {
    folder.join(format!("bucket-{i}.sdb"))
}

/// The key check value of `db`'s OPRF key: what its query count is bound to.
///
/// # Errors
/// Hashing to the group failed (it cannot).
pub fn key_check(db: &SenderDb) -> Result<[u8; 16], DataError> {
    db.oprf_key()
        .key_check_value()
        .map_err(|e| DataError::Apsi(ApsiError::Crypto(e)))
}

/// The labeled-PSI [`budget::Refusal`] as a [`DataError`]: over the cap the receiver is at
/// fault (it asked for more than the key may answer); a count file the user must see to is
/// the input's.
pub(crate) fn refusal(r: budget::Refusal) -> DataError {
    match r {
        budget::Refusal::Cap {
            cap,
            used,
            asked,
            count_file,
        } => DataError::ApsiQueryCap {
            cap,
            used,
            asked,
            count_file,
        },
        budget::Refusal::File { path, problem } => DataError::ApsiInput { path, problem },
    }
}

/// Writes `db` to `path` in `form` (atomically, mode 0600) and starts its key's query count.
///
/// # Errors
/// The directory is missing or not writable, the disk is full.
pub fn save(db: &SenderDb, path: &Path, form: DbForm) -> Result<(), DataError> {
    let mut w = SecretSink {
        file: AtomicFile::create_unbuffered(path)?,
        buf: Zeroizing::new(Vec::with_capacity(BUFFER)),
        error: None,
    };
    let written = db.write_to(&mut w, form).and_then(|()| w.drain());
    if let Err(source) = written {
        return Err(w.error.take().unwrap_or(DataError::Io {
            path: path.to_path_buf(),
            action: "writing the sender DB",
            source,
        }));
    }
    let SecretSink { file, .. } = w;
    file.commit()?;
    budget::start(&budget::APSI, path, &key_check(db)?).map_err(refusal)
}

/// [`AtomicFile`] (unbuffered) as a [`Write`], buffering in memory that is zeroized (the DB
/// holds the OPRF key seed) and keeping the file's error (which names the file).
struct SecretSink {
    file: AtomicFile,
    /// Never grows past its capacity, so never reallocates.
    buf: Zeroizing<Vec<u8>>,
    error: Option<DataError>,
}

impl SecretSink {
    /// Writes what is buffered to the file.
    fn drain(&mut self) -> std::io::Result<()> {
        let r = put(&mut self.file, &mut self.error, &self.buf);
        self.buf.clear();
        r
    }
}

/// Writes `bytes` to `file`, keeping its error in `error`.
fn put(file: &mut AtomicFile, error: &mut Option<DataError>, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes).map_err(|e| {
        let m = e.to_string();
        *error = Some(e);
        std::io::Error::other(m)
    })
}

impl Write for SecretSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + buf.len() > self.buf.capacity() {
            self.drain()?;
        }
        if buf.len() > self.buf.capacity() {
            put(&mut self.file, &mut self.error, buf)?;
        } else {
            self.buf.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A buffered reader whose buffer is zeroized when dropped (the DB holds the OPRF key seed);
/// reads as large as the buffer go straight to the caller's memory.
struct SecretReader<R> {
    inner: R,
    buf: Zeroizing<Vec<u8>>,
    pos: usize,
    end: usize,
}

impl<R: Read> SecretReader<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Zeroizing::new(vec![0u8; BUFFER]),
            pos: 0,
            end: 0,
        }
    }
}

impl<R: Read> Read for SecretReader<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.end {
            if out.len() >= self.buf.len() {
                return self.inner.read(out);
            }
            self.end = self.inner.read(&mut self.buf)?;
            self.pos = 0;
        }
        let n = out.len().min(self.end - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Loads the DB saved at `path`.
///
/// # Errors
/// [`DataError::ApsiInput`] naming the file when it is missing, readable by group or others,
/// damaged, truncated, of another format version or form or not a sender DB at all.
pub fn load(path: &Path) -> Result<SenderDb, DataError> {
    let refused = |problem: String| DataError::ApsiInput {
        path: path.to_path_buf(),
        problem,
    };
    let (file, meta) = private_fs::open_secret(
        path,
        "sender DB",
        "its OPRF key (and then answer queries as the sender)",
    )
    .map_err(refused)?;
    let mut r = SecretReader::new(file);
    SenderDb::read_from(&mut r, meta.len()).map_err(|e| {
        refused(match e {
            ApsiError::Db(m) => format!(
                "{m}; make it again with source_file and save_db_only (SEAL-format DBs of \
                 Microsoft APSI are not read)"
            ),
            other => other.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apsi::source::tests::tempdir;
    use blindjoin_apsi::ApsiParams;
    use blindjoin_crypto::item_digest;

    /// SecretFlow's `100-1-300.json` (N = 2048, t = 65537: 17-bit coefficients, one prime).
    const PRESET: &str = r#"{
        "table_params": {"hash_func_count": 1, "table_size": 256, "max_items_per_bin": 6},
        "item_params": {"felts_per_item": 8},
        "query_params": {"ps_low_degree": 0, "query_powers": [1, 2, 3, 4, 5, 6]},
        "seal_params": {"plain_modulus": 65537, "poly_modulus_degree": 2048,
            "coeff_modulus_bits": [48]}
    }"#;

    fn write_private(path: &Path, bytes: &[u8]) {
        std::fs::write(path, bytes).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }

    /// The zeroizing buffers pass every byte through unchanged: writes smaller and larger
    /// than the buffer, reads of every size (a large one straight to the caller).
    #[test]
    fn secret_buffers_pass_bytes_through() {
        let dir = tempdir();
        let path = dir.join("through");
        let data: Vec<u8> = (0..3 * BUFFER + 1000)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut w = SecretSink {
            file: AtomicFile::create_unbuffered(&path).unwrap(),
            buf: Zeroizing::new(Vec::with_capacity(BUFFER)),
            error: None,
        };
        let mut at = 0;
        for n in [1, 31, BUFFER - 5, 2 * BUFFER, 100] {
            w.write_all(&data[at..at + n]).unwrap();
            at += n;
        }
        w.write_all(&data[at..]).unwrap();
        w.drain().unwrap();
        assert_eq!(w.buf.capacity(), BUFFER, "the buffer never reallocates");
        w.file.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let mut r = SecretReader::new(std::fs::File::open(&path).unwrap());
        let mut back = Vec::new();
        for n in [3, BUFFER, 2 * BUFFER + 1, 5] {
            let mut chunk = vec![0u8; n];
            r.read_exact(&mut chunk).unwrap();
            back.extend(chunk);
        }
        r.read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Both forms save privately and load back the same DB; the packed file is smaller; a
    /// damaged file of either form, and one of an unknown form, is refused naming the file.
    #[test]
    fn both_forms_save_and_load_and_refusals_name_the_file() {
        let dir = tempdir();
        let params = ApsiParams::from_json(PRESET).unwrap();
        let items: Vec<_> = (0..60)
            .map(|i| item_digest(format!("k{i}").as_bytes()))
            .collect();
        let labels: Vec<Vec<u8>> = (0..60).map(|i| vec![i as u8; 5]).collect();
        let db = SenderDb::build(params, &items, Some(&labels), 5, 16).unwrap();
        let mut sizes = Vec::new();
        for form in [DbForm::Ntt, DbForm::Packed] {
            let path = dir.join(format!("{}.sdb", form.name()));
            save(&db, &path, form).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&path).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600);
            }
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.as_slice(), db.to_bytes(form).as_slice());
            let back = load(&path).unwrap();
            assert_eq!(back.bundle_counts(), db.bundle_counts());
            assert_eq!(back.to_bytes(form).as_slice(), bytes.as_slice());
            sizes.push(bytes.len());
            let mut bad = bytes.clone();
            let mid = bad.len() / 2;
            bad[mid] ^= 0x10;
            let bad_path = dir.join(format!("bad-{}.sdb", form.name()));
            write_private(&bad_path, &bad);
            let e = load(&bad_path).err().unwrap().to_string();
            assert!(e.contains(&*bad_path.to_string_lossy()), "{e}");
            let mut unknown = bytes;
            unknown[10] = 9;
            let unknown_path = dir.join(format!("form9-{}.sdb", form.name()));
            write_private(&unknown_path, &unknown);
            let e = load(&unknown_path).err().unwrap();
            assert_eq!(e.fault(), crate::Fault::Input, "{e}");
            assert!(e.to_string().contains("plaintext form 9"), "{e}");
            assert!(e.to_string().contains("form9-"), "{e}");
        }
        // Saving started the key's count; a DB readable by others is refused.
        let saved = dir.join("packed.sdb");
        let count = std::fs::read_to_string(budget::count_path(&saved)).unwrap();
        assert!(count.ends_with("oprf_evaluations 0\n"), "{count}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&saved, std::fs::Permissions::from_mode(0o640)).unwrap();
            let e = load(&saved).err().unwrap();
            assert_eq!(e.fault(), crate::Fault::Input, "{e}");
            assert!(e.to_string().contains("wider than 0600"), "{e}");
        }
        // 8·8·1 / 17 ≈ 3.8× on the plaintexts (one prime here; presets have two).
        assert!(sizes[0] > 3 * sizes[1], "{sizes:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
