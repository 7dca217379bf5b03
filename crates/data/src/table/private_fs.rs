//! Files and folders that hold the user's rows or keys, private from the moment they exist.
//!
//! Spill shards, sorted runs, the recovery folder's files, the unbalanced-PSI caches and every
//! output are copies of, or functions of, the user's table; key files are secrets. So (see `docs/protocols.md`, *Files blindjoin creates*):
//!
//! - a folder made for one run ([`create_private_dir_in`]) has 128 random bits from the OS in
//!   its name and mode 0700, and making it fails if anything is already at that name: nobody
//!   can plant it, predict it, or list or read what goes into it;
//! - a file is opened create-new (`O_CREAT | O_EXCL`, plus `O_NOFOLLOW`) with mode 0600
//!   ([`create_new`]): it never reuses a planted file, never writes through a symlink, and is
//!   never readable by group or others, not even between its creation and a `chmod`;
//! - a folder the user names (`spill_dir`, the recovery folder, the caches' folder) is used as
//!   it is, and the user is warned when group or others have access to it
//!   ([`warn_if_shared`]); one we create for them is 0700;
//! - a key file or a sender DB (which holds an OPRF key) the user gives is refused when group
//!   or others have any access to it ([`open_secret`], [`read_key_file`]).
//!
//! The umask can only narrow these modes.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// Mode of every file we create.
pub(crate) const FILE_MODE: u32 = 0o600;
/// Mode of every folder we create.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Random bytes in a private folder's name: 128 bits, so a name is neither guessed ahead nor
/// ever repeated (a collision among 2^32 folders has probability about 2^-65).
const NAME_RANDOM_BYTES: usize = 16;
/// Permission bits for group and others: none may be set on a key file, and any set on a
/// user's folder is warned about.
const GROUP_OTHER: u32 = 0o077;

/// Options for our files: mode 0600 and no symlink followed at the last component.
fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(FILE_MODE).custom_flags(libc::O_NOFOLLOW);
    }
    o
}

/// A new file at `path`, open for reading and writing, mode 0600.
///
/// # Errors
/// `AlreadyExists` when anything is at `path`, a symlink included (dangling or not); any other
/// I/O error.
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    options().read(true).write(true).create_new(true).open(path)
}

/// [`create_new`] after removing whatever is at `path` (a symlink is removed, not followed): for
/// the recovery folder's files, which a rerun after a crash writes afresh.
///
/// # Errors
/// As [`create_new`]; removing a file failed.
pub(crate) fn replace(path: &Path) -> io::Result<File> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    create_new(path)
}

/// One of our files that a resumed run continues, open for reading and writing. A symlink at
/// `path` is refused (`O_NOFOLLOW`), as is anything but a regular file; a mode wider than 0600
/// is narrowed to it.
///
/// # Errors
/// Not a regular file; any I/O error.
pub(crate) fn open_existing(path: &Path) -> io::Result<File> {
    let f = options().read(true).write(true).open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    narrow(&f, &meta, FILE_MODE)?;
    Ok(f)
}

/// Sets `f`'s mode to `mode` when it grants anything more.
fn narrow(f: &File, meta: &Metadata, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o777 & !mode != 0 {
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
    }
    #[cfg(not(unix))]
    let _ = (f, meta, mode);
    Ok(())
}

/// A new folder at `path`, mode 0700.
///
/// # Errors
/// `AlreadyExists` when anything is at `path`; any other I/O error.
pub(crate) fn create_dir(path: &Path) -> io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(DIR_MODE);
    }
    b.create(path)
}

/// A new folder `.blindjoin-<what>-<32 hex digits>` in `parent`, mode 0700, the hex digits
/// from the OS's random generator.
///
/// # Errors
/// `parent` is missing or not writable; the random generator failed.
pub(crate) fn create_private_dir_in(parent: &Path, what: &str) -> io::Result<PathBuf> {
    let mut r = [0u8; NAME_RANDOM_BYTES];
    blindjoin_crypto::random_bytes(&mut r).map_err(io::Error::other)?;
    let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
    let path = parent.join(format!(".blindjoin-{what}-{hex}"));
    create_dir(&path)?;
    Ok(path)
}

/// The user's folder at `path` (a symlink to a folder is fine), made with any missing parents,
/// mode 0700 each, when it does not exist. Returns whether it existed.
///
/// # Errors
/// Something other than a folder is at `path`; it cannot be made.
pub(crate) fn ensure_user_dir(path: &Path) -> io::Result<bool> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(true),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory",
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut b = std::fs::DirBuilder::new();
            b.recursive(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                b.mode(DIR_MODE);
            }
            b.create(path)?;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Our own folder at `path` inside a folder we already use (the recovery folder's `shards`):
/// made 0700 when missing; when present it must be a real folder (not a symlink), and a mode
/// wider than 0700 is narrowed to it.
///
/// # Errors
/// A symlink or a file is at `path`; any I/O error.
pub(crate) fn ensure_own_dir(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                if m.permissions().mode() & 0o777 & !DIR_MODE != 0 {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(DIR_MODE))?;
                }
            }
            Ok(())
        }
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory (a symlink or a file is in its place)",
        )),
        // Another thread (a partition's worker) may make it between the check and ours: then
        // check what it made.
        Err(e) if e.kind() == io::ErrorKind::NotFound => match create_dir(path) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => ensure_made_dir(path),
            r => r,
        },
        Err(e) => Err(e),
    }
}

/// [`ensure_own_dir`] for a folder that exists now: it must be a directory, made private.
fn ensure_made_dir(path: &Path) -> io::Result<()> {
    let m = std::fs::symlink_metadata(path)?;
    if !m.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory (a symlink or a file is in its place)",
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if m.permissions().mode() & 0o777 & !DIR_MODE != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(DIR_MODE))?;
        }
    }
    Ok(())
}

/// The warning for a folder the user named (`what`: "spill_dir", ...) when group or others
/// have any access to it: they can list it, so they see the names and sizes of our files
/// there (the files themselves are 0600), and with write access they can delete them.
pub(crate) fn shared_dir_warning(dir: &Path, what: &str) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir).ok()?.permissions().mode() & 0o777;
        (mode & GROUP_OTHER != 0).then(|| {
            format!(
                "{what} {} has mode {mode:04o}: group or others can see the names and sizes of \
                 blindjoin's files in it (the files themselves are 0600); run `chmod 700 {}` \
                 to close it",
                dir.display(),
                dir.display()
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = (dir, what);
        None
    }
}

/// Prints [`shared_dir_warning`] on standard error, as the CLI prints the config's warnings
/// (the warning arises while the run prepares, after those are printed).
pub(crate) fn warn_if_shared(dir: &Path, what: &str) {
    if let Some(w) = shared_dir_warning(dir, what) {
        eprintln!("blindjoin: warning: {w}");
    }
}

/// Why the permissions of a secret file (`what`: "key file", "sender DB", holding `secret`)
/// are unsafe, if they grant anything to group or others.
fn secret_mode_problem(path: &Path, meta: &Metadata, what: &str, secret: &str) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        (mode & GROUP_OTHER != 0).then(|| {
            format!(
                "the {what}'s permissions are {mode:04o}, wider than 0600: group or others \
                 could read {secret}; run `chmod 600 {}`",
                path.display()
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = (path, meta, what, secret);
        None
    }
}

/// Opens a secret file the user gives (`what`, holding `secret`: a key file, a sender DB) for
/// reading, checking the file it opened (not the name, which could change in between): a
/// regular file whose permissions grant nothing to group or others. A FIFO at `path` is opened
/// without blocking and then refused.
///
/// # Errors
/// What is wrong, for the user.
pub(crate) fn open_secret(
    path: &Path,
    what: &str,
    secret: &str,
) -> Result<(File, Metadata), String> {
    let mut o = OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK);
    }
    let f = o
        .open(path)
        .map_err(|e| format!("cannot read the {what}: {e}"))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("cannot read the {what}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("the {what} is not a regular file"));
    }
    if let Some(problem) = secret_mode_problem(path, &meta, what, secret) {
        return Err(problem);
    }
    Ok((f, meta))
}

/// Reads a secret key file of exactly `len` bytes into a zeroizing buffer, checked by
/// [`open_secret`] (a regular file, no permission for group or others), `len` bytes.
/// `how_to_make` ends the wrong-size message.
///
/// # Errors
/// What is wrong, for the user (no key byte is ever in it).
pub(crate) fn read_key_file(
    path: &Path,
    len: usize,
    how_to_make: &str,
) -> Result<Zeroizing<Vec<u8>>, String> {
    let (mut f, meta) = open_secret(path, "key file", "the secret key")?;
    if meta.len() != len as u64 {
        return Err(format!(
            "the key file has {} bytes; it must hold exactly {len}{how_to_make}",
            meta.len()
        ));
    }
    let mut bytes = Zeroizing::new(vec![0u8; len]);
    f.read_exact(&mut bytes)
        .map_err(|e| format!("cannot read the key file: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bj-private-fs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn create_new_is_0600_and_refuses_an_existing_path_and_a_symlink() {
        let d = dir("create-new");
        let p = d.join("f");
        create_new(&p).unwrap();
        assert_eq!(mode(&p), 0o600);
        let e = create_new(&p).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        // A symlink to a file, and one to nowhere: neither is followed, nothing is written.
        let target = d.join("target");
        std::fs::write(&target, b"theirs").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_new(&link).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"theirs");
        let dangling = d.join("dangling");
        std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
        assert!(create_new(&dangling).is_err());
        assert!(!d.join("nowhere").exists());
        // Reopening refuses the symlink too; `replace` removes it and makes a file of ours.
        assert!(open_existing(&link).is_err());
        replace(&link).unwrap();
        assert_eq!(mode(&link), 0o600);
        assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
        assert_eq!(std::fs::read(&target).unwrap(), b"theirs");
        // A wide file of ours is narrowed when reopened.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        open_existing(&p).unwrap();
        assert_eq!(mode(&p), 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The name's randomness, as derived in its doc comment and `docs/protocols.md`: among
    /// n = 2^32 folders, two share a name with probability at most n² / 2^(bits + 1).
    #[test]
    fn names_collide_with_probability_at_most_2_to_the_minus_65() {
        let bits = 8 * NAME_RANDOM_BYTES as i32;
        let log2_folders = 32;
        assert_eq!(2 * log2_folders - (bits + 1), -65);
    }

    #[test]
    fn ensure_own_dir_made_by_many_threads_at_once_succeeds_for_all() {
        // Two partitions' workers open their recovery folders side by side (found by the
        // soak, `soak::workers_2`: "File exists (os error 17)").
        let root = std::env::temp_dir().join(format!("bj-own-dir-race-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        for round in 0..200 {
            let d = root.join(format!("r{round}"));
            let go = std::sync::Arc::new(std::sync::Barrier::new(4));
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let (d, go) = (d.clone(), std::sync::Arc::clone(&go));
                    std::thread::spawn(move || {
                        go.wait();
                        ensure_own_dir(&d)
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap().unwrap();
            }
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn private_dirs_are_0700_random_and_never_reused() {
        let d = dir("dirs");
        let a = create_private_dir_in(&d, "spill").unwrap();
        let b = create_private_dir_in(&d, "spill").unwrap();
        assert_ne!(a, b);
        assert_eq!((mode(&a), mode(&b)), (0o700, 0o700));
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        let hex = name.strip_prefix(".blindjoin-spill-").unwrap();
        assert_eq!(hex.len(), 2 * NAME_RANDOM_BYTES);
        assert!(hex.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            create_dir(&a).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        // A symlink in place of our own folder is refused; a wide one of ours is narrowed.
        let link = d.join("shards");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert!(ensure_own_dir(&link).is_err());
        std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_own_dir(&b).unwrap();
        assert_eq!(mode(&b), 0o700);
        // A user's folder we make is 0700 down from the first missing parent.
        let user = d.join("new/recovery");
        assert!(!ensure_user_dir(&user).unwrap());
        assert_eq!((mode(&d.join("new")), mode(&user)), (0o700, 0o700));
        assert!(ensure_user_dir(&user).unwrap());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_shared_user_folder_is_warned_about() {
        let d = dir("warn");
        for (m, warned) in [(0o700, false), (0o750, true), (0o711, true), (0o1777, true)] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(m)).unwrap();
            let w = shared_dir_warning(&d, "spill_dir");
            assert_eq!(w.is_some(), warned, "{m:o}");
            if let Some(w) = w {
                assert!(w.contains("chmod 700") && w.contains("spill_dir"), "{w}");
            }
        }
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn key_files_must_be_private_regular_and_of_the_right_size() {
        let d = dir("key");
        let p = d.join("k");
        std::fs::write(&p, [7u8; 32]).unwrap();
        for wide in [0o644, 0o640, 0o604, 0o620, 0o602, 0o610] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(wide)).unwrap();
            let e = read_key_file(&p, 32, "").unwrap_err();
            assert!(e.contains(&format!("chmod 600 {}", p.display())), "{e}");
        }
        for ok in [0o600, 0o400] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(ok)).unwrap();
            assert_eq!(&read_key_file(&p, 32, "").unwrap()[..], &[7u8; 32]);
        }
        let e = read_key_file(&p, 33, " (hint)").unwrap_err();
        assert!(e.contains("exactly 33 (hint)"), "{e}");
        assert!(!e.contains("7, 7"), "no key byte in the message");
        // A folder, and a FIFO (opened without blocking, then refused).
        assert!(read_key_file(&d, 32, "").unwrap_err().contains("regular"));
        let fifo = d.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if made {
            assert!(
                read_key_file(&fifo, 32, "")
                    .unwrap_err()
                    .contains("regular")
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
