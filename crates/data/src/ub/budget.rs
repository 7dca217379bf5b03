//! The server's query cap: how many peer items one OPRF key may evaluate, over all the online
//! runs that use it (`blindjoin.max_query_items`). Unbalanced PSI ([`UB`]) counts the client
//! items of its server key; labeled PSI ([`APSI`], `crate::apsi`) the OPRF evaluations of the
//! key in a sender DB file. Both keep the count the same way, in this module.
//!
//! Why a cap, and why items. The key outlives the run: the cache (or DB) is made once and then
//! answers query after query. Each item the server evaluates lets the peer test one guess
//! against the whole set — it learns whether that guess is in the server's set. So what a peer
//! can learn about the server's set under one key grows with the number of items evaluated
//! under that key, whatever the number of runs they came in. A cap on queries (runs) would not
//! bound it (one run may carry 2^32 − 1 items); a cap on items does. The unit is the count the
//! peer announces before the evaluation (unique keys, which the server learns anyway): the
//! server evaluates at most that many and refuses a peer that sends more.
//!
//! The count is charged before anything is evaluated, so a run that fails half-way still counts
//! in full (the peer may have received part of its evaluations). It is kept next to the key
//! file (or DB file), in `<file>.queries` (mode 0600, opened with `O_NOFOLLOW`: a symlink there
//! is refused), with the key's check value: a key replaced by a new one (key rotation) starts
//! again from 0, while regenerating the cache under the same key does not reset it. The file is
//! made, with a count of 0, when blindjoin makes the key ([`start`]); afterwards a missing count
//! file is an error, not a count of 0 — deleting it must not reset the budget silently. A user
//! who means to start a count afresh (a key made outside blindjoin, or a deliberate reset)
//! creates an empty count file ([`RESET_HINT`], docs/config.md). A run with no key file
//! (`MODE_FULL` without `server_secret_key_path`, a labeled-PSI DB built and served without
//! being saved) has a fresh key of its own, so only that run's query counts. The file is locked
//! while it is read and rewritten, so two servers sharing a key cannot both spend the same
//! budget.

use super::UbError;
use crate::table::private_fs;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Peer items one key may evaluate by default: 1,000,000. At 32 bytes each way per item
/// that is about 64 MB of online traffic, well above the 2^14-key queries the benchmarks run
/// (docs/benchmarks.md) yet a small fraction of any identifier space worth protecting (a
/// national phone-number plan has 10^8–10^10 numbers): a client enumerating such a space gets
/// through at most 10^6 / 10^8 = 1 % of it per key. Raise it for larger clients. Labeled PSI
/// uses the same default: its OPRF answers the same membership question per evaluation.
pub const DEFAULT_MAX_QUERY_ITEMS: u64 = 1_000_000;

/// The config field that sets the cap (named in every refusal).
pub const FIELD: &str = "blindjoin.max_query_items";

/// How to start a count deliberately (`{}`: the count file), in refusals and docs/config.md.
pub const RESET_HINT: &str = "install -m 600 /dev/null";

/// What a count file counts: its first line, the name of its count line, and what the key is
/// kept in (for messages).
#[derive(Clone, Copy, Debug)]
pub struct Ledger {
    /// First line of the count file.
    magic: &'static str,
    /// The count line's name.
    count_name: &'static str,
    /// What holds the key ("key file", "DB file").
    pub holder: &'static str,
    /// Who asks ("client", "receiver").
    pub peer: &'static str,
}

/// Unbalanced PSI: client items charged to the server's key file.
pub const UB: Ledger = Ledger {
    magic: "blindjoin unbalanced-PSI query count v1",
    count_name: "client_items",
    holder: "key file",
    peer: "client",
};

/// Labeled PSI: OPRF evaluations charged to the key in a sender DB file.
pub const APSI: Ledger = Ledger {
    magic: "blindjoin labeled-PSI query count v1",
    count_name: "oprf_evaluations",
    holder: "DB file",
    peer: "receiver",
};

/// Why a charge was refused.
#[derive(Debug)]
pub enum Refusal {
    /// The total would pass the cap (nothing is charged).
    Cap {
        /// The cap.
        cap: u64,
        /// Items evaluated under this key before this query.
        used: u64,
        /// Items this query asks for.
        asked: u64,
        /// Where the count is kept.
        count_file: String,
    },
    /// The count file is missing, damaged, or cannot be read or written.
    File {
        /// The count file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        problem: String,
    },
}

/// The count file of the key kept at `key_path`.
pub fn count_path(key_path: &Path) -> PathBuf {
    let mut name = key_path.as_os_str().to_owned();
    name.push(".queries");
    PathBuf::from(name)
}

/// Unbalanced PSI's [`charge_to`]: [`UbError::QueryCap`] over the cap, [`UbError::KeyFile`]
/// for a count file that is missing, damaged or cannot be read or written.
///
/// # Errors
/// As said.
pub fn charge(
    key_path: Option<&Path>,
    key_check: &[u8; 16],
    cap: u64,
    asked: u64,
) -> Result<u64, UbError> {
    Ok(charge_to(&UB, key_path, key_check, cap, asked)?)
}

impl From<Refusal> for UbError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Cap {
                cap,
                used,
                asked,
                count_file,
            } => UbError::QueryCap {
                field: FIELD,
                cap,
                used,
                asked,
                count_file,
            },
            Refusal::File { path, problem } => UbError::KeyFile { path, problem },
        }
    }
}

/// Starts the count of a key blindjoin has just made at `key_path`: a count file holding 0
/// for `key_check`, in place of whatever was there (it belonged to an older key).
///
/// # Errors
/// The count file cannot be written.
pub fn start(ledger: &Ledger, key_path: &Path, key_check: &[u8; 16]) -> Result<(), Refusal> {
    let path = count_path(key_path);
    let mut f = private_fs::replace(&path).map_err(|e| io_refusal(&path, "cannot create", e))?;
    write_count(&mut f, ledger, key_check, 0).map_err(|e| io_refusal(&path, "cannot write", e))
}

/// Charges `asked` items to the key whose check value is `key_check` (kept at `key_path`, or
/// a fresh key of this run alone when `None`) and returns the key's total after this query.
///
/// # Errors
/// [`Refusal::Cap`] when the total would pass `cap` (nothing is charged then);
/// [`Refusal::File`] when the count file is missing (see the module doc), cannot be read, is
/// damaged, or cannot be written.
pub fn charge_to(
    ledger: &Ledger,
    key_path: Option<&Path>,
    key_check: &[u8; 16],
    cap: u64,
    asked: u64,
) -> Result<u64, Refusal> {
    let Some(key_path) = key_path else {
        return admit(0, cap, asked, "none: this run's key is fresh".into());
    };
    let path = count_path(key_path);
    let io = |what: &str, e: std::io::Error| io_refusal(&path, what, e);
    let mut f = match private_fs::open_existing(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Refusal::File {
                path: path.clone(),
                problem: format!(
                    "the query count file is missing beside the {holder} {key}; it bounds what \
                     a {peer} may learn under this key, so a missing file is not taken as 0. \
                     Restore it from a backup, or make a new key (docs/config.md, key \
                     rotation); if this key has never served a query, or you mean to reset its \
                     count, create an empty one: `{RESET_HINT} {count}`",
                    holder = ledger.holder,
                    key = key_path.display(),
                    peer = ledger.peer,
                    count = path.display(),
                ),
            });
        }
        Err(e) => return Err(io("cannot open", e)),
    };
    f.lock().map_err(|e| io("cannot lock", e))?;
    let mut text = String::new();
    f.read_to_string(&mut text)
        .map_err(|e| io("cannot read", e))?;
    let used = parse(ledger, &text, key_check).ok_or_else(|| Refusal::File {
        path: path.clone(),
        problem: format!(
            "the query count file is damaged; it bounds what a {} may learn under this key, so \
             it is not reset silently: make a new key (see docs/config.md, key rotation), or \
             write the known count back",
            ledger.peer
        ),
    })?;
    let total = admit(used, cap, asked, path.display().to_string())?;
    write_count(&mut f, ledger, key_check, total).map_err(|e| io("cannot write", e))?;
    Ok(total)
}

fn io_refusal(path: &Path, what: &str, e: std::io::Error) -> Refusal {
    Refusal::File {
        path: path.to_path_buf(),
        problem: format!("{what} the query count file: {e}"),
    }
}

/// Replaces `f`'s contents with `total` for `key_check`, on disk before it returns.
fn write_count(
    f: &mut File,
    ledger: &Ledger,
    key_check: &[u8; 16],
    total: u64,
) -> std::io::Result<()> {
    let out = format!(
        "{}\nkey_check {}\n{} {total}\n",
        ledger.magic,
        hex(key_check),
        ledger.count_name
    );
    f.set_len(0)?;
    f.rewind()?;
    f.write_all(out.as_bytes())?;
    f.sync_all()
}

/// `used + asked` when it stays within `cap`.
fn admit(used: u64, cap: u64, asked: u64, count_file: String) -> Result<u64, Refusal> {
    match used.checked_add(asked) {
        Some(total) if total <= cap => Ok(total),
        _ => Err(Refusal::Cap {
            cap,
            used,
            asked,
            count_file,
        }),
    }
}

/// The count recorded for `key_check`: 0 for an empty file (a count started deliberately) or
/// another key's (the key was rotated), `None` for a damaged file or another ledger's.
fn parse(ledger: &Ledger, text: &str, key_check: &[u8; 16]) -> Option<u64> {
    if text.is_empty() {
        return Some(0);
    }
    let mut lines = text.lines();
    if lines.next()? != ledger.magic {
        return None;
    }
    let check = lines.next()?.strip_prefix("key_check ")?;
    let count: u64 = lines
        .next()?
        .strip_prefix(ledger.count_name)?
        .strip_prefix(' ')?
        .parse()
        .ok()?;
    if check.len() != 32 || !check.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(if check == hex(key_check) { count } else { 0 })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn key_path(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("blindjoin-budget-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("server.key")
    }

    /// A key blindjoin has just made: its count started at 0.
    fn started(name: &str, check: &[u8; 16]) -> PathBuf {
        let key = key_path(name);
        start(&UB, &key, check).unwrap();
        key
    }

    #[test]
    fn items_add_up_across_runs_until_the_cap() {
        let key = started("adds", &[1; 16]);
        assert_eq!(charge(Some(&key), &[1; 16], 500, 200).unwrap(), 200);
        assert_eq!(charge(Some(&key), &[1; 16], 500, 300).unwrap(), 500);
        let e = charge(Some(&key), &[1; 16], 500, 1).unwrap_err();
        assert!(
            matches!(
                e,
                UbError::QueryCap {
                    used: 500,
                    asked: 1,
                    cap: 500,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains(FIELD), "{e}");
        // A refused query is not charged; a raised cap lets the key serve again.
        assert_eq!(charge(Some(&key), &[1; 16], 600, 100).unwrap(), 600);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(count_path(&key))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_new_key_starts_from_zero_and_a_damaged_file_is_refused() {
        let key = started("rotate", &[1; 16]);
        charge(Some(&key), &[1; 16], 100, 100).unwrap();
        assert!(charge(Some(&key), &[1; 16], 100, 1).is_err());
        assert_eq!(charge(Some(&key), &[2; 16], 100, 1).unwrap(), 1);
        std::fs::write(count_path(&key), "client_items 0\n").unwrap();
        assert!(matches!(
            charge(Some(&key), &[2; 16], 100, 1),
            Err(UbError::KeyFile { .. })
        ));
    }

    /// Deleting the count file must not reset the budget: a missing one beside a key is
    /// refused, saying how to start a count deliberately; an empty file starts it at 0.
    #[test]
    fn a_missing_count_file_is_refused_and_an_empty_one_starts_from_zero() {
        let key = key_path("missing");
        std::fs::write(&key, [3u8; 32]).unwrap();
        let e = charge(Some(&key), &[1; 16], 100, 1).unwrap_err();
        let UbError::KeyFile { path, problem } = &e else {
            panic!("{e}");
        };
        assert_eq!(path, &count_path(&key));
        assert!(problem.contains("missing"), "{problem}");
        let hint = format!("{RESET_HINT} {}", count_path(&key).display());
        assert!(problem.contains(&hint), "{problem}");
        assert!(!count_path(&key).exists(), "nothing is created");
        std::fs::File::create(count_path(&key)).unwrap();
        assert_eq!(charge(Some(&key), &[1; 16], 100, 7).unwrap(), 7);
        std::fs::remove_file(count_path(&key)).unwrap();
        assert!(charge(Some(&key), &[1; 16], 100, 1).is_err());
    }

    /// A symlink at the count file is not followed (`O_NOFOLLOW`): the file it points to is
    /// neither read nor written.
    #[cfg(unix)]
    #[test]
    fn a_symlinked_count_file_is_refused() {
        let key = started("symlink", &[1; 16]);
        // A valid count elsewhere: followed, it would be read and rewritten.
        let target = key.with_file_name("elsewhere");
        std::fs::rename(count_path(&key), &target).unwrap();
        let theirs = std::fs::read_to_string(&target).unwrap();
        std::os::unix::fs::symlink(&target, count_path(&key)).unwrap();
        assert!(matches!(
            charge(Some(&key), &[1; 16], 100, 1),
            Err(UbError::KeyFile { .. })
        ));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), theirs);
    }

    /// The two ledgers keep their counts apart: one's file is damaged to the other.
    #[test]
    fn labeled_psi_counts_evaluations_in_a_file_of_its_own() {
        let key = key_path("apsi");
        start(&APSI, &key, &[4; 16]).unwrap();
        assert_eq!(charge_to(&APSI, Some(&key), &[4; 16], 10, 6).unwrap(), 6);
        assert!(matches!(
            charge_to(&APSI, Some(&key), &[4; 16], 10, 5),
            Err(Refusal::Cap {
                used: 6,
                asked: 5,
                cap: 10,
                ..
            })
        ));
        let text = std::fs::read_to_string(count_path(&key)).unwrap();
        assert!(text.contains("oprf_evaluations 6"), "{text}");
        assert!(matches!(
            charge(Some(&key), &[4; 16], 10, 1),
            Err(UbError::KeyFile { .. })
        ));
        // A new key made at the same path starts again from 0.
        start(&APSI, &key, &[5; 16]).unwrap();
        assert_eq!(charge_to(&APSI, Some(&key), &[5; 16], 10, 10).unwrap(), 10);
    }

    #[test]
    fn a_fresh_key_counts_this_run_alone() {
        assert_eq!(charge(None, &[0; 16], 10, 10).unwrap(), 10);
        assert!(matches!(
            charge(None, &[0; 16], 10, 11),
            Err(UbError::QueryCap { used: 0, .. })
        ));
        assert!(charge(None, &[0; 16], u64::MAX, u64::MAX).is_ok());
    }

    /// The derivation in [`DEFAULT_MAX_QUERY_ITEMS`]'s doc and docs/config.md.
    #[test]
    fn the_default_bounds_an_enumerating_client() {
        // At most 1 % of a 10^8-number space per key.
        const { assert!(DEFAULT_MAX_QUERY_ITEMS * 100 <= 100_000_000) };
        // The benchmarks' 2^14-key client queries 61 times; a 10^6-key client once.
        assert_eq!(DEFAULT_MAX_QUERY_ITEMS / (1 << 14), 61);
        assert_eq!(DEFAULT_MAX_QUERY_ITEMS / 1_000_000, 1);
        // About 64 MB of online traffic (32 bytes each way per item).
        assert_eq!(DEFAULT_MAX_QUERY_ITEMS * 64 / 1_000_000, 64);
    }

    /// `n` with a comma every three digits, as the docs write numbers.
    fn thousands(n: u64) -> String {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    }

    #[test]
    fn the_default_is_documented() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        let want = format!("Default **{}**", thousands(DEFAULT_MAX_QUERY_ITEMS));
        let doc = include_str!("../../../../docs/config.md");
        assert!(
            doc.lines()
                .any(|l| l.starts_with("| `max_query_items` |") && l.contains(&want)),
            "docs/config.md's max_query_items row does not say {want}"
        );
        let protocols = include_str!("../../../../docs/protocols.md");
        let want = format!("(default {})", thousands(DEFAULT_MAX_QUERY_ITEMS));
        assert!(protocols.contains(&want), "docs/protocols.md: {want}");
    }
}
