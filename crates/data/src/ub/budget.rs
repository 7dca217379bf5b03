//! The server's query cap: how many client items one OPRF key may evaluate, over all the online
//! runs that use it (`blindjoin.max_query_items`).
//!
//! Why a cap, and why client items. The key outlives the run: the cache is made once and then
//! answers query after query. Each client item the server evaluates lets the client test one
//! guess against the whole cache — it learns whether that guess is in the server's set. So
//! what a client can learn about the server's set under one key grows with the number of items
//! evaluated under that key, whatever the number of runs they came in. A cap on queries (runs)
//! would not bound it (one run may carry 2^32 − 1 items); a cap on items does. The unit is the
//! count the client announces in its online hello (unique keys, which the server learns anyway):
//! the server evaluates exactly that many and refuses a client that sends more.
//!
//! The count is charged before anything is evaluated, so a run that fails half-way still counts
//! in full (the client may have received part of its evaluations). It is kept next to the key
//! file, in `<key file>.queries` (mode 0600), with the key's check value: a key file replaced by
//! a new key (key rotation) starts again from 0, while regenerating the cache under the same key
//! does not reset it. A run with no key file (`MODE_FULL` without `server_secret_key_path`) has a
//! fresh key of its own, so only that run's query counts. The file is locked while it is read
//! and rewritten, so two servers sharing a key cannot both spend the same budget.

use super::UbError;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Client items one key may evaluate by default: 1,000,000. At 32 bytes each way per item
/// that is about 64 MB of online traffic, well above the 2^14-key queries the benchmarks run
/// (docs/benchmarks.md) yet a small fraction of any identifier space worth protecting (a
/// national phone-number plan has 10^8–10^10 numbers): a client enumerating such a space gets
/// through at most 10^6 / 10^8 = 1 % of it per key. Raise it for larger clients.
pub const DEFAULT_MAX_QUERY_ITEMS: u64 = 1_000_000;

/// The config field that sets the cap (named in every refusal).
pub const FIELD: &str = "blindjoin.max_query_items";

/// First line of the count file.
const MAGIC: &str = "blindjoin unbalanced-PSI query count v1";

/// The count file of the key at `key_path`.
pub fn count_path(key_path: &Path) -> PathBuf {
    let mut name = key_path.as_os_str().to_owned();
    name.push(".queries");
    PathBuf::from(name)
}

/// Charges `asked` client items to the key whose check value is `key_check` (kept at
/// `key_path`, or a fresh key of this run alone when `None`) and returns the key's total after
/// this query.
///
/// # Errors
/// [`UbError::QueryCap`] when the total would pass `cap` (nothing is charged then);
/// [`UbError::KeyFile`] when the count file cannot be read, is damaged, or cannot be written.
pub fn charge(
    key_path: Option<&Path>,
    key_check: &[u8; 16],
    cap: u64,
    asked: u64,
) -> Result<u64, UbError> {
    let Some(key_path) = key_path else {
        return admit(0, cap, asked, "none: this run's key is fresh".into());
    };
    let path = count_path(key_path);
    let io = |what: &str, e: std::io::Error| UbError::KeyFile {
        path: path.clone(),
        problem: format!("{what} the query count file: {e}"),
    };
    let mut f = open_private(&path).map_err(|e| io("cannot open", e))?;
    f.lock().map_err(|e| io("cannot lock", e))?;
    let mut text = String::new();
    f.read_to_string(&mut text)
        .map_err(|e| io("cannot read", e))?;
    let used = parse(&text, key_check).ok_or_else(|| UbError::KeyFile {
        path: path.clone(),
        problem: "the query count file is damaged; it bounds what clients may learn under this \
                  key, so it is not reset silently: make a new key and cache (see docs/config.md, \
                  key rotation), or write the known count back"
            .into(),
    })?;
    let total = admit(used, cap, asked, path.display().to_string())?;
    let out = format!(
        "{MAGIC}\nkey_check {}\nclient_items {total}\n",
        hex(key_check)
    );
    f.set_len(0).map_err(|e| io("cannot write", e))?;
    f.rewind().map_err(|e| io("cannot write", e))?;
    f.write_all(out.as_bytes())
        .map_err(|e| io("cannot write", e))?;
    f.sync_all().map_err(|e| io("cannot write", e))?;
    Ok(total)
}

/// `used + asked` when it stays within `cap`.
fn admit(used: u64, cap: u64, asked: u64, count_file: String) -> Result<u64, UbError> {
    match used.checked_add(asked) {
        Some(total) if total <= cap => Ok(total),
        _ => Err(UbError::QueryCap {
            field: FIELD,
            cap,
            used,
            asked,
            count_file,
        }),
    }
}

/// The count recorded for `key_check`: 0 for an empty file or another key's (the key was
/// rotated), `None` for a damaged file.
fn parse(text: &str, key_check: &[u8; 16]) -> Option<u64> {
    if text.is_empty() {
        return Some(0);
    }
    let mut lines = text.lines();
    if lines.next()? != MAGIC {
        return None;
    }
    let check = lines.next()?.strip_prefix("key_check ")?;
    let count: u64 = lines.next()?.strip_prefix("client_items ")?.parse().ok()?;
    if check.len() != 32 || !check.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(if check == hex(key_check) { count } else { 0 })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Opens `path` for reading and writing, creating it with mode 0600.
fn open_private(path: &Path) -> std::io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)
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

    #[test]
    fn items_add_up_across_runs_until_the_cap() {
        let key = key_path("adds");
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
        let key = key_path("rotate");
        charge(Some(&key), &[1; 16], 100, 100).unwrap();
        assert!(charge(Some(&key), &[1; 16], 100, 1).is_err());
        assert_eq!(charge(Some(&key), &[2; 16], 100, 1).unwrap(), 1);
        std::fs::write(count_path(&key), "client_items 0\n").unwrap();
        assert!(matches!(
            charge(Some(&key), &[2; 16], 100, 1),
            Err(UbError::KeyFile { .. })
        ));
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
