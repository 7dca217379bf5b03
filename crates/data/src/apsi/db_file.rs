//! The sender DB file: [`SenderDb::write_to`] (magic `BJAPSIDB`, a format version, the
//! plaintext form, the parameters, the OPRF key seed, the bundles' plaintexts in NTT form or
//! bit-packed coefficient form ([`DbForm`], chosen by `compress`) and a SHA-256 checksum of all
//! of it; `blindjoin_apsi::sender_db::file` has the layout), streamed atomically to a private
//! file (mode 0600, [`AtomicFile`]) because it holds the OPRF key: whoever reads it can answer
//! queries as the sender and test any key against the table. Loading streams the file through
//! [`SenderDb::read_from`] (magic, version and form first, every count bounded before anything
//! is allocated, the checksum before the DB is used), reads either form, and names the file in
//! every refusal.

use crate::error::DataError;
use crate::table::output::AtomicFile;
use blindjoin_apsi::sender_db::DbForm;
use blindjoin_apsi::{ApsiError, SenderDb};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

/// The DB file of bucket `i` in a bucket folder.
pub fn bucket_path(folder: &Path, i: usize) -> PathBuf {
    folder.join(format!("bucket-{i}.sdb"))
}

/// Writes `db` to `path` in `form` (atomically, mode 0600).
///
/// # Errors
/// The directory is missing or not writable, the disk is full.
pub fn save(db: &SenderDb, path: &Path, form: DbForm) -> Result<(), DataError> {
    let mut w = Sink {
        file: AtomicFile::create(path)?,
        error: None,
    };
    if let Err(source) = db.write_to(&mut w, form) {
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
/// format version or form or not a sender DB at all.
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
            std::fs::write(&bad_path, &bad).unwrap();
            let e = load(&bad_path).err().unwrap().to_string();
            assert!(e.contains(&*bad_path.to_string_lossy()), "{e}");
            let mut unknown = bytes;
            unknown[10] = 9;
            let unknown_path = dir.join(format!("form9-{}.sdb", form.name()));
            std::fs::write(&unknown_path, &unknown).unwrap();
            let e = load(&unknown_path).err().unwrap();
            assert_eq!(e.fault(), crate::Fault::Input, "{e}");
            assert!(e.to_string().contains("plaintext form 9"), "{e}");
            assert!(e.to_string().contains("form9-"), "{e}");
        }
        // 8·8·1 / 17 ≈ 3.8× on the plaintexts (one prime here; presets have two).
        assert!(sizes[0] > 3 * sizes[1], "{sizes:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
