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

/// The header of a server cache with `meta` (for [`super::gen_cache`], which writes the body itself).
pub(super) fn header_of_server(meta: &CacheMeta) -> Vec<u8> {
    header(KIND_SERVER, meta)
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

/// The client's cache written as the transfer streams in ([`blindjoin_protocols::ub_oprf::recv_cache_into`]):
/// header, then each chunk as it arrives, then the checksum; nothing appears at the path before
/// [`ClientCacheWriter::commit`], and memory does not grow with the cache.
pub struct ClientCacheWriter {
    path: std::path::PathBuf,
    file: Option<AtomicFile>,
    hash: Sha256,
    /// The first I/O failure, kept to report as such (the protocol sees a generic stop).
    pub error: Option<UbError>,
}

impl ClientCacheWriter {
    /// A writer for the client cache at `path` (created on [`CacheSink::begin`]).
    pub fn new(path: &Path) -> ClientCacheWriter {
        ClientCacheWriter {
            path: path.to_path_buf(),
            file: None,
            hash: Sha256::new(),
            error: None,
        }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), blindjoin_protocols::ProtocolError> {
        self.hash.update(bytes);
        let r = match self.file.as_mut() {
            Some(f) => f.write_all(bytes).map_err(UbError::from),
            None => Err(bad(
                &self.path,
                "internal error: written before begin".into(),
            )),
        };
        r.map_err(|e| {
            self.error = Some(e);
            blindjoin_protocols::ProtocolError::Config(
                "the client cache could not be written".into(),
            )
        })
    }

    /// Writes the checksum and moves the file into place.
    ///
    /// # Errors
    /// I/O failures.
    pub fn commit(mut self) -> Result<(), UbError> {
        let f = self
            .file
            .take()
            .ok_or_else(|| bad(&self.path, "internal error: nothing was received".into()))?;
        let sum = std::mem::take(&mut self.hash).finalize();
        let mut f = f;
        f.write_all(&sum)?;
        f.commit()?;
        Ok(())
    }
}

impl blindjoin_protocols::ub_oprf::CacheSink for ClientCacheWriter {
    fn begin(&mut self, meta: &CacheMeta) -> Result<(), blindjoin_protocols::ProtocolError> {
        let folder = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        crate::table::private_fs::warn_if_shared(folder, "the cache's folder");
        match AtomicFile::create(&self.path) {
            Ok(f) => self.file = Some(f),
            Err(e) => {
                self.error = Some(e.into());
                return Err(blindjoin_protocols::ProtocolError::Config(
                    "the client cache could not be created".into(),
                ));
            }
        }
        self.put(&header(KIND_CLIENT, meta))
    }

    fn bytes(&mut self, chunk: &[u8]) -> Result<(), blindjoin_protocols::ProtocolError> {
        self.put(chunk)
    }
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

/// A cache file whose header was read and checked, positioned at its body, with the hash of
/// the header so far and the file's length checked against what the header announces.
struct Opened {
    f: std::fs::File,
    hash: Sha256,
    meta: CacheMeta,
    header_len: u64,
    what: &'static str,
}

/// Opens a cache file of `kind` and checks its header and its length.
fn read_header(path: &Path, kind: u8) -> Result<Opened, UbError> {
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
    Ok(Opened {
        f,
        hash,
        meta: CacheMeta {
            curve,
            count,
            tag_len,
            key_check,
            labels: labels_meta,
        },
        header_len,
        what,
    })
}

/// The header, the body (values, and the digests for a server cache) and the labels of a
/// checked file, in memory.
fn read(path: &Path, kind: u8) -> Result<(CacheMeta, Vec<u8>, Option<SealedLabels>), UbError> {
    let Opened {
        mut f,
        mut hash,
        meta,
        what,
        ..
    } = read_header(path, kind)?;
    let per = meta.tag_len as u64 + if kind == KIND_SERVER { 16 } else { 0 };
    let mut body = vec![0u8; (meta.count * per) as usize];
    f.read_exact(&mut body)
        .map_err(|e| bad(path, format!("cannot read the {what} cache: {e}")))?;
    for chunk in body.chunks(1 << 20) {
        hash.update(chunk);
    }
    let labels = match &meta.labels {
        None => None,
        Some(m) => {
            let mut lens = vec![0u8; 4 * meta.count as usize];
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
    let vlen = (meta.count as usize) * meta.tag_len;
    check_sorted(&body[..vlen], meta.tag_len)
        .map_err(|p| bad(path, format!("value {p} is out of order")))?;
    Ok((meta, body, labels))
}

/// A cache file checked whole (checksum, order, label lengths) by streaming it once, then read
/// in place: the online phase looks values up by one sequential pass, and fetches digests and
/// labels at given positions, so memory does not grow with the server's set.
pub struct CacheFile {
    /// Curve, count, ℓ, key check, labels.
    pub meta: CacheMeta,
    path: std::path::PathBuf,
    f: std::fs::File,
    values_at: u64,
    digests_at: Option<u64>,
    lens_at: u64,
    data_at: u64,
}

/// Bytes read at once when streaming a cache.
const STREAM_CHUNK: usize = 1 << 20;

/// Opens and checks the server cache at `path` without loading it.
///
/// # Errors
/// As [`read_server`].
pub fn open_server(path: &Path) -> Result<CacheFile, UbError> {
    open(path, KIND_SERVER)
}

/// Opens and checks the client cache at `path` without loading it.
///
/// # Errors
/// As [`read_client`].
pub fn open_client(path: &Path) -> Result<CacheFile, UbError> {
    open(path, KIND_CLIENT)
}

fn open(path: &Path, kind: u8) -> Result<CacheFile, UbError> {
    let Opened {
        f,
        mut hash,
        meta,
        header_len,
        what,
    } = read_header(path, kind)?;
    let tl = meta.tag_len;
    let n = meta.count;
    let io = |e: std::io::Error| bad(path, format!("cannot read the {what} cache: {e}"));
    let mut r = std::io::BufReader::with_capacity(STREAM_CHUNK, &f);
    // Values: hashed and checked in order, one at a time.
    let mut prev = [0u8; MAX_TAG_LEN];
    let mut cur = [0u8; MAX_TAG_LEN];
    for p in 0..n {
        r.read_exact(&mut cur[..tl]).map_err(io)?;
        hash.update(&cur[..tl]);
        if p > 0 && cur[..tl] < prev[..tl] {
            return Err(bad(path, format!("value {p} is out of order")));
        }
        prev[..tl].copy_from_slice(&cur[..tl]);
    }
    let mut buf = vec![0u8; STREAM_CHUNK];
    let mut stream = |len: u64, hash: &mut Sha256, r: &mut std::io::BufReader<&std::fs::File>| {
        let mut left = len;
        while left > 0 {
            let k = left.min(STREAM_CHUNK as u64) as usize;
            r.read_exact(&mut buf[..k]).map_err(io)?;
            hash.update(&buf[..k]);
            left -= k as u64;
        }
        Ok::<(), UbError>(())
    };
    if kind == KIND_SERVER {
        stream(16 * n, &mut hash, &mut r)?;
    }
    if let Some(m) = &meta.labels {
        let mut total = 0u64;
        let mut l4 = [0u8; 4];
        for p in 0..n {
            r.read_exact(&mut l4).map_err(io)?;
            hash.update(l4);
            let len = u32::from_le_bytes(l4) as usize;
            if !(blindjoin_protocols::ub_oprf::labels::MAC_LEN
                ..=blindjoin_protocols::ub_oprf::labels::MAX_SEALED_LEN)
                .contains(&len)
            {
                return Err(bad(
                    path,
                    format!("damaged labels: label {p} has {len} bytes"),
                ));
            }
            total += len as u64;
        }
        if total != m.bytes {
            return Err(bad(
                path,
                format!("damaged labels: {total} bytes, the header says {}", m.bytes),
            ));
        }
        stream(m.bytes, &mut hash, &mut r)?;
    }
    let mut sum = [0u8; 32];
    r.read_exact(&mut sum).map_err(io)?;
    if hash.finalize().as_slice() != sum {
        return Err(bad(
            path,
            "the checksum does not match: the file is damaged or was modified".into(),
        ));
    }
    drop(r);
    let values_at = header_len;
    let after_values = values_at + n * tl as u64;
    let (digests_at, lens_at) = if kind == KIND_SERVER {
        (Some(after_values), after_values + 16 * n)
    } else {
        (None, after_values)
    };
    Ok(CacheFile {
        meta,
        path: path.to_path_buf(),
        f,
        values_at,
        digests_at,
        lens_at,
        data_at: lens_at + 4 * n,
    })
}

impl CacheFile {
    fn read_at(&self, buf: &mut [u8], at: u64) -> Result<(), UbError> {
        use std::os::unix::fs::FileExt;
        self.f
            .read_exact_at(buf, at)
            .map_err(|e| bad(&self.path, format!("cannot read the cache: {e}")))
    }

    /// Server cache: the item digest at position `p`.
    ///
    /// # Errors
    /// Not a server cache, `p` out of range, an I/O failure.
    pub fn digest_at(&self, p: usize) -> Result<ItemDigest, UbError> {
        let at = self
            .digests_at
            .filter(|_| (p as u64) < self.meta.count)
            .ok_or_else(|| {
                bad(
                    &self.path,
                    "internal error: no digest at this position".into(),
                )
            })?;
        let mut d = [0u8; 16];
        self.read_at(&mut d, at + 16 * p as u64)?;
        Ok(d)
    }

    /// The sealed labels at `positions` (each below the count), read in place: one pass over
    /// the label lengths, then one read per label.
    ///
    /// # Errors
    /// No labels in this cache, an I/O failure.
    pub fn labels_at(
        &self,
        positions: &[u32],
    ) -> Result<std::collections::HashMap<u32, Vec<u8>>, UbError> {
        let mut want: Vec<u32> = positions.to_vec();
        want.sort_unstable();
        want.dedup();
        let mut out = std::collections::HashMap::with_capacity(want.len());
        if self.meta.labels.is_none() || want.is_empty() {
            return Ok(out);
        }
        let mut f = &self.f;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(self.lens_at))
            .map_err(|e| bad(&self.path, format!("cannot read the cache: {e}")))?;
        let mut r = std::io::BufReader::with_capacity(STREAM_CHUNK, f);
        let mut offset = 0u64;
        let mut next = 0usize;
        let mut l4 = [0u8; 4];
        let mut spans = Vec::with_capacity(want.len());
        for p in 0..self.meta.count {
            if next == want.len() {
                break;
            }
            r.read_exact(&mut l4)
                .map_err(|e| bad(&self.path, format!("cannot read the cache: {e}")))?;
            let len = u32::from_le_bytes(l4) as u64;
            if want[next] as u64 == p {
                spans.push((want[next], offset, len));
                next += 1;
            }
            offset += len;
        }
        for (p, at, len) in spans {
            let mut blob = vec![0u8; len as usize];
            self.read_at(&mut blob, self.data_at + at)?;
            out.insert(p, blob);
        }
        Ok(out)
    }
}

/// What the transfer sends from a server cache, read in place: the values, then the label
/// lengths and the labels (the digests stay with the server).
pub struct TransferSource<'a> {
    file: &'a CacheFile,
    /// `(offset, length)` of each section still to send.
    spans: Vec<(u64, u64)>,
    /// Bytes of the first span already read.
    done: u64,
}

impl CacheFile {
    /// The transfer's view of this cache ([`blindjoin_protocols::ub_oprf::send_cache_from`]).
    pub fn transfer_source(&self) -> TransferSource<'_> {
        let n = self.meta.count;
        let mut spans = vec![(self.values_at, n * self.meta.tag_len as u64)];
        if let Some(m) = &self.meta.labels {
            spans.push((self.lens_at, 4 * n));
            spans.push((self.data_at, m.bytes));
        }
        TransferSource {
            file: self,
            spans,
            done: 0,
        }
    }
}

impl blindjoin_protocols::ub_oprf::CacheSource for TransferSource<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<(), blindjoin_protocols::ProtocolError> {
        use blindjoin_protocols::ProtocolError;
        while self.spans.first().is_some_and(|&(_, len)| len == self.done) {
            self.spans.remove(0);
            self.done = 0;
        }
        let &(at, len) = self
            .spans
            .first()
            .ok_or(ProtocolError::Unreachable("read past the cache's sections"))?;
        if self.done + buf.len() as u64 > len {
            return Err(ProtocolError::Unreachable(
                "a read spans two cache sections",
            ));
        }
        self.file
            .read_at(buf, at + self.done)
            .map_err(|e| ProtocolError::Config(format!("cannot send the server cache: {e}")))?;
        self.done += buf.len() as u64;
        Ok(())
    }
}

impl blindjoin_protocols::ub_oprf::CacheLookup for CacheFile {
    /// One sequential pass over the values, merged with the sorted tags.
    fn positions(
        &mut self,
        tags: &[u8],
        tl: usize,
    ) -> Result<Vec<Vec<u32>>, blindjoin_protocols::ProtocolError> {
        use blindjoin_protocols::ProtocolError;
        if tl != self.meta.tag_len || tl == 0 || !tags.len().is_multiple_of(tl) {
            return Err(ProtocolError::Unreachable(
                "tags of another length than the cache's",
            ));
        }
        let m = tags.len() / tl;
        let tag = |i: usize| &tags[i * tl..(i + 1) * tl];
        let mut order: Vec<usize> = (0..m).collect();
        order.sort_unstable_by(|&a, &b| tag(a).cmp(tag(b)));
        let mut out = vec![Vec::new(); m];
        let io = |e: std::io::Error| {
            ProtocolError::Config(format!(
                "cannot read the cache {}: {e}",
                self.path.display()
            ))
        };
        let mut f = &self.f;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(self.values_at)).map_err(io)?;
        let mut r = std::io::BufReader::with_capacity(STREAM_CHUNK, f);
        let mut v = [0u8; MAX_TAG_LEN];
        let mut i = 0usize;
        for p in 0..self.meta.count {
            if i == m {
                break;
            }
            r.read_exact(&mut v[..tl]).map_err(io)?;
            while i < m && tag(order[i]) < &v[..tl] {
                i += 1;
            }
            let mut j = i;
            while j < m && tag(order[j]) == &v[..tl] {
                out[order[j]].push(p as u32);
                j += 1;
            }
        }
        Ok(out)
    }
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

    #[test]
    fn files_read_in_place_agree_with_memory() {
        use blindjoin_protocols::ub_oprf::{CacheLookup, SortedValues};
        for n in [0u64, 1, 3000] {
            let (mut meta, values, digests) = sample(n);
            let mut l = SealedLabels::default();
            l.offsets.push(0);
            for i in 0..n {
                l.push(&vec![i as u8; 16 + (i % 7) as usize]);
            }
            meta.labels = Some(LabelMeta {
                salt: [1; SALT_LEN],
                columns: vec!["a".into()],
                bytes: l.data.len() as u64,
            });
            let (p, q) = (tmp(&format!("fs{n}")), tmp(&format!("fc{n}")));
            write_server(&p, &meta, &values, &digests, Some(&l)).unwrap();
            write_client(&q, &meta, &values, Some(&l)).unwrap();
            let mut s = open_server(&p).unwrap();
            let mut c = open_client(&q).unwrap();
            assert_eq!((&s.meta, &c.meta), (&meta, &meta));
            // Tags present (some twice), absent, below and above every value.
            let mut tags: Vec<u8> = Vec::new();
            for i in [0u64, 5, n.saturating_sub(1), 5, 10_000] {
                tags.extend_from_slice(&[0, 0, 0, 0]);
                tags.extend_from_slice(&i.to_be_bytes());
            }
            tags.extend_from_slice(&[0xff; 12]);
            let want = SortedValues(&values).positions(&tags, 12).unwrap();
            assert_eq!(c.positions(&tags, 12).unwrap(), want);
            assert_eq!(s.positions(&tags, 12).unwrap(), want);
            for i in (0..n).step_by(97) {
                assert_eq!(s.digest_at(i as usize).unwrap(), digests[i as usize]);
            }
            assert!(c.digest_at(0).is_err());
            let pos: Vec<u32> = (0..n as u32).step_by(13).collect();
            let got = c.labels_at(&pos).unwrap();
            assert_eq!(got.len(), pos.len());
            for p in &pos {
                assert_eq!(got[p], l.get(*p as usize).unwrap());
            }
            // Damage anywhere is caught when the file is opened.
            let good = std::fs::read(&q).unwrap();
            for at in [45, good.len() / 2, good.len() - 1] {
                let mut b = good.clone();
                b[at] ^= 1;
                std::fs::write(&q, &b).unwrap();
                assert!(open_client(&q).is_err(), "{n} {at}");
            }
        }
    }

    #[test]
    fn the_streamed_writer_writes_what_write_client_writes() {
        use blindjoin_protocols::ub_oprf::CacheSink;
        let (mut meta, values, _) = sample(500);
        let mut l = SealedLabels::default();
        l.offsets.push(0);
        for i in 0..500u32 {
            l.push(&[i as u8; 20]);
        }
        meta.labels = Some(LabelMeta {
            salt: [4; SALT_LEN],
            columns: vec!["x".into()],
            bytes: l.data.len() as u64,
        });
        let (p, q) = (tmp("ws-a"), tmp("ws-b"));
        write_client(&p, &meta, &values, Some(&l)).unwrap();
        let mut w = ClientCacheWriter::new(&q);
        w.begin(&meta).unwrap();
        for part in [&values[..], &l.lengths_le()[..], &l.data[..]] {
            for c in part.chunks(777) {
                w.bytes(c).unwrap();
            }
        }
        w.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), std::fs::read(&q).unwrap());
        assert_eq!(open_client(&q).unwrap().meta, meta);
    }

    #[test]
    fn the_transfer_from_the_file_sends_what_the_memory_sends() {
        use blindjoin_protocols::ub_oprf::{recv_cache, send_cache, send_cache_from};
        // Over one message (4 MiB) of values, so the file is read in several pieces.
        for (n, labels) in [(0u64, false), (1, true), (400_000, false), (3000, true)] {
            let (mut meta, values, digests) = sample(n);
            let mut l = SealedLabels::default();
            l.offsets.push(0);
            for i in 0..n {
                l.push(&vec![i as u8; 16 + (i % 5) as usize]);
            }
            if labels {
                meta.labels = Some(LabelMeta {
                    salt: [2; SALT_LEN],
                    columns: vec!["v".into()],
                    bytes: l.data.len() as u64,
                });
            }
            let sealed = labels.then_some(&l);
            let p = tmp(&format!("send{n}{labels}"));
            write_server(&p, &meta, &values, &digests, sealed).unwrap();
            let f = open_server(&p).unwrap();
            let (mut a, mut b) = blindjoin_link::mem_pair();
            send_cache_from(&mut a, &meta, &mut f.transfer_source()).unwrap();
            let from_file = recv_cache(&mut b, u64::MAX).unwrap();
            send_cache(&mut a, &meta, &values, sealed).unwrap();
            let from_memory = recv_cache(&mut b, u64::MAX).unwrap();
            assert_eq!(from_file, from_memory, "{n} {labels}");
            assert_eq!(from_file, (meta, values, sealed.cloned()));
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
