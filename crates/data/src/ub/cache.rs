//! The two cache files of unbalanced PSI, one format:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `BJUBCACH` |
//! | 2 | format version, LE (1) |
//! | 1 | kind: 1 server cache, 2 client cache |
//! | 1 + n | curve name length, then the name (`CURVE_FOURQ`, ...) |
//! | 8 | count: values in the cache, LE |
//! | 1 | ℓ: bytes per value |
//! | 16 | key-check value ([`OprfScalar::key_check_value`](blindjoin_crypto::oprf::OprfScalar::key_check_value)) |
//! | 1 | labels: 0 none, 1 present |
//! | 32 | labels only: the salt of the label keys |
//! | 2 + Σ(2 + n) | labels only: column count, LE, then each name's length (LE u16) and name |
//! | 8 | labels only: total sealed bytes, LE |
//! | count·ℓ | the values `F_k(y)`, in increasing order |
//! | count·16 | server only: the item digest at each position (the secret permutation) |
//! | count·4 | labels only: each position's sealed-label length, LE |
//! | bytes | labels only: the sealed labels, in position order ([`blindjoin_protocols::ub_oprf::labels`]) |
//! | 32 | SHA-256 of everything above |
//!
//! No key material: a wrong key file is caught by comparing key-check values. Files are
//! written atomically (temporary file, fsync, rename) and are 0600. A reader checks the magic, version, kind,
//! curve, ℓ, that the file's length is exactly what the header implies (before it allocates
//! anything of that size), the checksum, and that the values are in order; every failure is a
//! [`UbError::Cache`] naming the file and what to do.

use super::UbError;
use crate::table::output::AtomicFile;
use blindjoin_crypto::{Curve, ItemDigest};
use blindjoin_protocols::ub_oprf::labels::{SALT_LEN, SealedLabels};
use blindjoin_protocols::ub_oprf::{
    CacheMeta, LabelMeta, MAX_LABEL_COLUMNS, MAX_LABEL_NAME, MAX_SERVER_ITEMS, MAX_TAG_LEN,
    MIN_TAG_LEN, check_sorted,
};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

const MAGIC: &[u8; 8] = b"BJUBCACH";
/// The cache format version this build reads and writes (2: sealed labels).
pub const FORMAT_VERSION: u16 = 2;
const KIND_SERVER: u8 = 1;
const KIND_CLIENT: u8 = 2;
const MAX_CURVE_NAME: usize = 32;

/// The server's cache: the values and which of its items sits at each position.
#[derive(Debug)]
pub struct ServerCache {
    /// Curve, count, ℓ, key check.
    pub meta: CacheMeta,
    /// `count·ℓ` bytes, increasing.
    pub values: Vec<u8>,
    /// The item digest at each position.
    pub digests: Vec<ItemDigest>,
    /// Each position's sealed label, when the cache has labels.
    pub labels: Option<SealedLabels>,
}

/// The client's copy: the values only.
#[derive(Debug)]
pub struct ClientCache {
    /// Curve, count, ℓ, key check.
    pub meta: CacheMeta,
    /// `count·ℓ` bytes, increasing.
    pub values: Vec<u8>,
    /// Each position's sealed label, when the cache has labels.
    pub labels: Option<SealedLabels>,
}

fn header(kind: u8, meta: &CacheMeta) -> Vec<u8> {
    let mut h = Vec::with_capacity(64);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    h.push(kind);
    let name = meta.curve.config_name().as_bytes();
    h.push(name.len() as u8);
    h.extend_from_slice(name);
    h.extend_from_slice(&meta.count.to_le_bytes());
    h.push(meta.tag_len as u8);
    h.extend_from_slice(&meta.key_check);
    match &meta.labels {
        None => h.push(0),
        Some(l) => {
            h.push(1);
            h.extend_from_slice(&l.salt);
            h.extend_from_slice(&(l.columns.len() as u16).to_le_bytes());
            for c in &l.columns {
                h.extend_from_slice(&(c.len() as u16).to_le_bytes());
                h.extend_from_slice(c.as_bytes());
            }
            h.extend_from_slice(&l.bytes.to_le_bytes());
        }
    }
    h
}

/// The label parts of a cache file: each position's length, then the sealed labels.
fn label_parts(
    path: &Path,
    meta: &CacheMeta,
    labels: Option<&SealedLabels>,
) -> Result<(Vec<u8>, Vec<u8>), UbError> {
    match (&meta.labels, labels) {
        (None, None) => Ok((Vec::new(), Vec::new())),
        (Some(m), Some(l)) if l.len() as u64 == meta.count && l.data.len() as u64 == m.bytes => {
            Ok((l.lengths_le(), l.data.clone()))
        }
        _ => Err(bad(
            path,
            "internal error: the labels do not match the header".into(),
        )),
    }
}

/// Writes a cache: 0600, as every output ([`AtomicFile`]); the server's cache maps each of its
/// items to a position, so the user is told when the folder it goes into is open to group or
/// others.
fn write(path: &Path, parts: &[&[u8]]) -> Result<(), UbError> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    crate::table::private_fs::warn_if_shared(folder, "the cache's folder");
    let mut hash = Sha256::new();
    let mut f = AtomicFile::create(path)?;
    for p in parts {
        for chunk in p.chunks(1 << 20) {
            hash.update(chunk);
            f.write_all(chunk)?;
        }
    }
    f.write_all(&hash.finalize())?;
    f.commit()?;
    Ok(())
}

/// Writes the server cache atomically.
///
/// # Errors
/// I/O failures; sizes that do not match `meta` (a bug).
pub fn write_server(
    path: &Path,
    meta: &CacheMeta,
    values: &[u8],
    digests: &[ItemDigest],
    labels: Option<&SealedLabels>,
) -> Result<(), UbError> {
    if values.len() as u64 != meta.count * meta.tag_len as u64 || digests.len() as u64 != meta.count
    {
        return Err(bad(
            path,
            "internal error: sizes do not match the header".into(),
        ));
    }
    let (lens, data) = label_parts(path, meta, labels)?;
    write(
        path,
        &[
            &header(KIND_SERVER, meta),
            values,
            digests.as_flattened(),
            &lens,
            &data,
        ],
    )
}

/// Writes the client cache atomically.
///
/// # Errors
/// As [`write_server`].
pub fn write_client(
    path: &Path,
    meta: &CacheMeta,
    values: &[u8],
    labels: Option<&SealedLabels>,
) -> Result<(), UbError> {
    if values.len() as u64 != meta.count * meta.tag_len as u64 {
        return Err(bad(
            path,
            "internal error: sizes do not match the header".into(),
        ));
    }
    let (lens, data) = label_parts(path, meta, labels)?;
    write(path, &[&header(KIND_CLIENT, meta), values, &lens, &data])
}

const REGENERATE: &str = "regenerate it: on the server run MODE_OFFLINE_GEN_CACHE (or \
                          MODE_OFFLINE), on the client run MODE_OFFLINE_TRANSFER_CACHE";

fn bad(path: &Path, problem: String) -> UbError {
    UbError::Cache {
        path: path.to_path_buf(),
        problem,
        fix: REGENERATE,
    }
}

/// Reads and validates a server cache.
///
/// # Errors
/// [`UbError::Cache`] for a missing, truncated, tampered or foreign file.
pub fn read_server(path: &Path) -> Result<ServerCache, UbError> {
    let (meta, body, labels) = read(path, KIND_SERVER)?;
    let vlen = (meta.count as usize) * meta.tag_len;
    let (values, digests) = body.split_at(vlen);
    let digests = digests
        .chunks_exact(16)
        .map(|c| {
            let mut d = [0u8; 16];
            d.copy_from_slice(c);
            d
        })
        .collect();
    Ok(ServerCache {
        meta,
        values: values.to_vec(),
        digests,
        labels,
    })
}

/// Reads and validates a client cache.
///
/// # Errors
/// As [`read_server`].
pub fn read_client(path: &Path) -> Result<ClientCache, UbError> {
    let (meta, values, labels) = read(path, KIND_CLIENT)?;
    Ok(ClientCache {
        meta,
        values,
        labels,
    })
}

/// The header, the body (values, and the digests for a server cache) and the labels of a
/// checked file.
fn read(path: &Path, kind: u8) -> Result<(CacheMeta, Vec<u8>, Option<SealedLabels>), UbError> {
    let what = if kind == KIND_SERVER {
        "server"
    } else {
        "client"
    };
    let mut f = std::fs::File::open(path).map_err(|e| {
        bad(
            path,
            format!("cannot open the {what} cache ({e}); check cache_path"),
        )
    })?;
    let file_len = f
        .metadata()
        .map_err(|e| bad(path, format!("cannot read the {what} cache: {e}")))?
        .len();
    // Everything read is hashed as it comes, header included.
    let mut hash = Sha256::new();
    let take = |f: &mut std::fs::File, n: usize, hash: &mut Sha256| -> Result<Vec<u8>, UbError> {
        let mut b = vec![0u8; n];
        f.read_exact(&mut b)
            .map_err(|_| bad(path, "truncated header".into()))?;
        hash.update(&b);
        Ok(b)
    };
    // The fixed part of the header, up to the curve name's length.
    let mut head = [0u8; 12];
    f.read_exact(&mut head)
        .map_err(|_| bad(path, format!("not a blindjoin {what} cache (too short)")))?;
    hash.update(head);
    if &head[..8] != MAGIC {
        return Err(bad(
            path,
            format!(
                "not a blindjoin unbalanced-PSI cache (wrong magic; is this the {what} cache?)"
            ),
        ));
    }
    let version = u16::from_le_bytes([head[8], head[9]]);
    if version != FORMAT_VERSION {
        return Err(bad(
            path,
            format!("cache format version {version}; this build reads version {FORMAT_VERSION}"),
        ));
    }
    if head[10] != kind {
        let other = if head[10] == KIND_SERVER {
            "a server cache"
        } else {
            "a client cache"
        };
        return Err(bad(
            path,
            format!("this is {other}, but this party needs the {what} cache; check cache_path"),
        ));
    }
    let name_len = head[11] as usize;
    if name_len == 0 || name_len > MAX_CURVE_NAME {
        return Err(bad(path, "damaged header (curve name length)".into()));
    }
    let rest = take(&mut f, name_len + 8 + 1 + 16 + 1, &mut hash)?;
    let name = std::str::from_utf8(&rest[..name_len])
        .map_err(|_| bad(path, "damaged header (curve name)".into()))?;
    let curve: Curve = name
        .parse()
        .map_err(|_| bad(path, format!("damaged header (unknown curve {name:?})")))?;
    let mut c8 = [0u8; 8];
    c8.copy_from_slice(&rest[name_len..name_len + 8]);
    let count = u64::from_le_bytes(c8);
    let tag_len = rest[name_len + 8] as usize;
    let mut key_check = [0u8; 16];
    key_check.copy_from_slice(&rest[name_len + 9..name_len + 25]);
    if count > MAX_SERVER_ITEMS || !(MIN_TAG_LEN..=MAX_TAG_LEN).contains(&tag_len) {
        return Err(bad(
            path,
            format!("damaged header ({count} values of {tag_len} bytes)"),
        ));
    }
    let mut header_len = (12 + rest.len()) as u64;
    let labels_meta = match rest[name_len + 25] {
        0 => None,
        1 => {
            let b = take(&mut f, SALT_LEN + 2, &mut hash)?;
            let mut salt = [0u8; SALT_LEN];
            salt.copy_from_slice(&b[..SALT_LEN]);
            let n = u16::from_le_bytes([b[SALT_LEN], b[SALT_LEN + 1]]) as usize;
            header_len += b.len() as u64;
            if n > MAX_LABEL_COLUMNS {
                return Err(bad(path, format!("damaged header ({n} label columns)")));
            }
            let mut columns = Vec::with_capacity(n);
            for _ in 0..n {
                let l = take(&mut f, 2, &mut hash)?;
                let l = u16::from_le_bytes([l[0], l[1]]) as usize;
                if l > MAX_LABEL_NAME {
                    return Err(bad(path, "damaged header (label column name)".into()));
                }
                let name = take(&mut f, l, &mut hash)?;
                header_len += 2 + l as u64;
                columns.push(
                    String::from_utf8(name)
                        .map_err(|_| bad(path, "damaged header (label column name)".into()))?,
                );
            }
            let b = take(&mut f, 8, &mut hash)?;
            header_len += 8;
            let mut c8 = [0u8; 8];
            c8.copy_from_slice(&b);
            Some(LabelMeta {
                salt,
                columns,
                bytes: u64::from_le_bytes(c8),
            })
        }
        _ => return Err(bad(path, "damaged header (label flag)".into())),
    };
    let per = tag_len as u64 + if kind == KIND_SERVER { 16 } else { 0 };
    let label_len = labels_meta
        .as_ref()
        .map_or(0u64, |l| (4u64 * count).saturating_add(l.bytes));
    let want = (header_len + count * per + 32).saturating_add(label_len);
    if file_len != want {
        return Err(bad(
            path,
            format!(
                "the file has {file_len} bytes but its header announces {want} (truncated or \
                 appended to)"
            ),
        ));
    }
    let mut body = vec![0u8; (count * per) as usize];
    f.read_exact(&mut body)
        .map_err(|e| bad(path, format!("cannot read the {what} cache: {e}")))?;
    for chunk in body.chunks(1 << 20) {
        hash.update(chunk);
    }
    let labels = match &labels_meta {
        None => None,
        Some(m) => {
            let mut lens = vec![0u8; 4 * count as usize];
            f.read_exact(&mut lens)
                .map_err(|e| bad(path, format!("cannot read the {what} cache: {e}")))?;
            hash.update(&lens);
            let offsets = SealedLabels::offsets_from_le(&lens, m.bytes)
                .map_err(|e| bad(path, format!("damaged labels: the lengths {e}")))?;
            let mut data = vec![0u8; m.bytes as usize];
            f.read_exact(&mut data)
                .map_err(|e| bad(path, format!("cannot read the {what} cache: {e}")))?;
            for chunk in data.chunks(1 << 20) {
                hash.update(chunk);
            }
            Some(SealedLabels { offsets, data })
        }
    };
    let mut sum = [0u8; 32];
    f.read_exact(&mut sum)
        .map_err(|e| bad(path, format!("cannot read the {what} cache: {e}")))?;
    if hash.finalize().as_slice() != sum {
        return Err(bad(
            path,
            "the checksum does not match: the file is damaged or was modified".into(),
        ));
    }
    let meta = CacheMeta {
        curve,
        count,
        tag_len,
        key_check,
        labels: labels_meta,
    };
    let vlen = (count as usize) * tag_len;
    check_sorted(&body[..vlen], tag_len)
        .map_err(|p| bad(path, format!("value {p} is out of order")))?;
    Ok((meta, body, labels))
}

/// Checks that a cache was made under the key with key-check value `kcv`.
///
/// # Errors
/// [`UbError::Cache`] naming the key file.
pub fn check_key(
    path: &Path,
    meta: &CacheMeta,
    kcv: &[u8; 16],
    key_path: &Path,
) -> Result<(), UbError> {
    if &meta.key_check != kcv {
        return Err(UbError::Cache {
            path: path.to_path_buf(),
            problem: format!(
                "the cache was generated under another key than the one in {} (key-check \
                 values differ)",
                key_path.display()
            ),
            fix: "use the key file the cache was generated with, or regenerate the cache with \
                  MODE_OFFLINE_GEN_CACHE and transfer it again",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("bj-ub-cache-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    }

    fn sample(n: u64) -> (CacheMeta, Vec<u8>, Vec<ItemDigest>) {
        let meta = CacheMeta {
            curve: Curve::FourQ,
            count: n,
            tag_len: 12,
            key_check: [5; 16],
            labels: None,
        };
        let mut values: Vec<u8> = Vec::new();
        for i in 0..n {
            values.extend_from_slice(&[0, 0, 0, 0]);
            values.extend_from_slice(&i.to_be_bytes());
        }
        let digests = (0..n).map(|i| [i as u8; 16]).collect();
        (meta, values, digests)
    }

    #[test]
    fn round_trips() {
        for n in [0, 1, 1000] {
            let (meta, values, digests) = sample(n);
            let p = tmp(&format!("s{n}"));
            write_server(&p, &meta, &values, &digests, None).unwrap();
            let s = read_server(&p).unwrap();
            assert_eq!(
                (s.meta, s.values, s.digests, s.labels),
                (meta.clone(), values.clone(), digests, None)
            );
            let q = tmp(&format!("c{n}"));
            write_client(&q, &meta, &values, None).unwrap();
            let c = read_client(&q).unwrap();
            assert_eq!((c.meta, c.values, c.labels), (meta, values, None));
            // The kinds are not interchangeable.
            assert!(read_client(&p).is_err());
            assert!(read_server(&q).is_err());
        }
    }

    #[test]
    fn tampering_truncation_and_wrong_keys_are_caught() {
        let (meta, values, digests) = sample(100);
        let p = tmp("tamper");
        write_server(&p, &meta, &values, &digests, None).unwrap();
        let good = std::fs::read(&p).unwrap();
        let expect_err = |bytes: &[u8], needle: &str| {
            std::fs::write(&p, bytes).unwrap();
            let e = read_server(&p).unwrap_err();
            let s = e.to_string();
            assert!(s.contains(needle), "{s}");
            assert!(
                s.contains("tamper") && s.contains("MODE_OFFLINE_GEN_CACHE"),
                "{s}"
            );
        };
        // A flipped bit anywhere in the body or the checksum.
        for at in [60, 500, good.len() - 40, good.len() - 1] {
            let mut b = good.clone();
            b[at] ^= 1;
            expect_err(&b, "checksum");
        }
        expect_err(&good[..good.len() - 1], "announces");
        expect_err(&good[..5], "too short");
        expect_err(&[good.clone(), vec![0]].concat(), "announces");
        let mut b = good.clone();
        b[0] = b'X';
        expect_err(&b, "magic");
        let mut b = good.clone();
        b[8] = 9;
        expect_err(&b, "version");
        // A huge count with a short file: refused on the length, nothing allocated.
        let mut b = good.clone();
        let count_at = 12 + "CURVE_FOURQ".len();
        b[count_at..count_at + 8].copy_from_slice(&(u32::MAX as u64).to_le_bytes());
        expect_err(&b, "announces");
        // Out of order values with a valid checksum.
        let mut v = values.clone();
        v.swap(11, 12 * 50 + 11);
        write_server(&p, &meta, &v, &digests, None).unwrap();
        assert!(read_server(&p).unwrap_err().to_string().contains("order"));
        // A wrong key.
        let e = check_key(&p, &meta, &[6; 16], Path::new("other.key")).unwrap_err();
        assert!(e.to_string().contains("other.key"), "{e}");
        check_key(&p, &meta, &[5; 16], Path::new("k")).unwrap();
        assert!(read_server(&tmp("missing")).is_err());
    }

    #[test]
    fn labels_round_trip_and_damage_is_caught() {
        for n in [0u64, 1, 50] {
            let (mut meta, values, digests) = sample(n);
            let mut l = SealedLabels::default();
            l.offsets.push(0);
            for i in 0..n {
                l.push(&vec![i as u8; 16 + i as usize]);
            }
            meta.labels = Some(LabelMeta {
                salt: [9; SALT_LEN],
                columns: vec!["score".into(), "ré gion".into()],
                bytes: l.data.len() as u64,
            });
            let (p, q) = (tmp(&format!("ls{n}")), tmp(&format!("lc{n}")));
            write_server(&p, &meta, &values, &digests, Some(&l)).unwrap();
            write_client(&q, &meta, &values, Some(&l)).unwrap();
            let s = read_server(&p).unwrap();
            assert_eq!((&s.meta, s.labels.as_ref()), (&meta, Some(&l)));
            let c = read_client(&q).unwrap();
            assert_eq!((&c.meta, c.labels.as_ref()), (&meta, Some(&l)));
            // Labels that do not match the header are not written.
            assert!(write_client(&q, &meta, &values, None).is_err());
            let good = std::fs::read(&q).unwrap();
            for at in [40, good.len() - 33] {
                let mut b = good.clone();
                b[at] ^= 1;
                std::fs::write(&q, &b).unwrap();
                assert!(read_client(&q).is_err());
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn caches_are_0600() {
        use std::os::unix::fs::PermissionsExt;
        let (meta, values, digests) = sample(3);
        let (p, q) = (tmp("mode-s"), tmp("mode-c"));
        write_server(&p, &meta, &values, &digests, None).unwrap();
        write_client(&q, &meta, &values, None).unwrap();
        for f in [p, q] {
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
    }

    #[test]
    fn no_key_material_in_the_file() {
        // The header holds exactly magic, version, kind, curve, count, ℓ and the key check.
        let (meta, values, digests) = sample(0);
        let p = tmp("nokey");
        write_server(&p, &meta, &values, &digests, None).unwrap();
        let b = std::fs::read(&p).unwrap();
        assert_eq!(b.len(), 12 + 11 + 8 + 1 + 16 + 1 + 32);
    }
}
