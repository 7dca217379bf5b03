//! The server's key file: 32 raw random bytes, as SecretFlow's `openssl rand 32`.
//!
//! - An existing file must be a regular file of exactly 32 bytes whose permissions grant
//!   nothing to group or others (0600 or stricter); anything wider is refused, since whoever
//!   reads the key can evaluate the OPRF offline and test any guess against the cache. The
//!   check is `private_fs::read_key_file`, shared with ECDH's `secret_key_path`.
//! - A missing file is created with 32 fresh random bytes and mode 0600 (created that way, not
//!   chmod-ed after the write, and never through a symlink: `private_fs::create_new`), but only
//!   when the run makes a new cache (gen cache, offline, full): in the other modes a new key
//!   could not match the existing cache.
//! - The bytes are held in a zeroizing buffer and turned into the group scalar by
//!   [`OprfScalar::from_seed`]; neither the bytes nor the scalar is ever written anywhere else —
//!   the caches carry only a key-check value (SecretFlow writes the key into its cache meta).

use super::UbError;
use blindjoin_crypto::Curve;
use blindjoin_crypto::oprf::OprfScalar;
use std::io::Write;
use std::path::Path;
use zeroize::Zeroizing;

/// Length of a key file.
pub const KEY_FILE_LEN: usize = 32;

fn err(path: &Path, problem: impl Into<String>) -> UbError {
    UbError::KeyFile {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

/// Reads the key file at `path`, or creates it when `create` and it does not exist; returns the
/// OPRF key and whether the file was created.
///
/// # Errors
/// [`UbError::KeyFile`] for permissions wider than 0600, a wrong size, a missing file when
/// `create` is false, or an I/O failure.
pub fn load_or_create(
    path: &Path,
    curve: Curve,
    create: bool,
) -> Result<(OprfScalar, bool), UbError> {
    let (bytes, created) = load_or_create_raw(path, create)?;
    let key = OprfScalar::from_seed(curve, &bytes[..])?;
    Ok((key, created))
}

/// As [`load_or_create`], the file's 32 bytes as they are (SecretFlow's unbalanced PSI reads
/// them as its FourQ key, `crate::secretflow_ub`).
///
/// # Errors
/// As [`load_or_create`].
pub(crate) fn load_or_create_raw(
    path: &Path,
    create: bool,
) -> Result<(Zeroizing<Vec<u8>>, bool), UbError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !create {
                return Err(err(
                    path,
                    "the key file does not exist; use the one the cache was generated with, or \
                     run MODE_OFFLINE_GEN_CACHE to make a new key and cache",
                ));
            }
            Ok((create_key_file(path)?, true))
        }
        Err(e) => Err(err(path, format!("cannot read the key file: {e}"))),
        Ok(_) => Ok((read_key_file(path)?, false)),
    }
}

fn read_key_file(path: &Path) -> Result<Zeroizing<Vec<u8>>, UbError> {
    crate::table::private_fs::read_key_file(
        path,
        KEY_FILE_LEN,
        " raw random bytes (make one with `openssl rand 32 > FILE && chmod 600 FILE`)",
    )
    .map_err(|problem| err(path, problem))
}

fn create_key_file(path: &Path) -> Result<Zeroizing<Vec<u8>>, UbError> {
    let mut bytes = Zeroizing::new(vec![0u8; KEY_FILE_LEN]);
    blindjoin_crypto::random_bytes(&mut bytes)?;
    let mut f = crate::table::private_fs::create_new(path).map_err(|e| {
        err(
            path,
            format!("cannot create the key file (does its directory exist?): {e}"),
        )
    })?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| err(path, format!("cannot write the key file: {e}")))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "bj-ub-key-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[cfg(unix)]
    #[test]
    fn created_0600_reused_and_wide_permissions_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir();
        let p = d.join("server.key");
        assert!(matches!(
            load_or_create(&p, Curve::FourQ, false),
            Err(UbError::KeyFile { .. })
        ));
        let (k1, created) = load_or_create(&p, Curve::FourQ, true).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&p).unwrap().len(), 32);
        let (k2, created) = load_or_create(&p, Curve::FourQ, true).unwrap();
        assert!(!created);
        assert_eq!(k1.key_check_value().unwrap(), k2.key_check_value().unwrap());
        for wide in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(wide)).unwrap();
            let e = load_or_create(&p, Curve::FourQ, false).unwrap_err();
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
        load_or_create(&p, Curve::FourQ, false).unwrap();
        // SecretFlow's `openssl rand 32`: any 32 bytes are a key, above FourQ's order or not.
        let q = d.join("sf.key");
        std::fs::write(&q, [0xff; 32]).unwrap();
        std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o600)).unwrap();
        load_or_create(&q, Curve::FourQ, false).unwrap();
        load_or_create(&q, Curve::Ristretto255, false).unwrap();
        std::fs::write(&q, [1; 31]).unwrap();
        let e = load_or_create(&q, Curve::FourQ, false).unwrap_err();
        assert!(e.to_string().contains("exactly 32"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
