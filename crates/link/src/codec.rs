//! A bounded cursor over untrusted message bytes. Every read checks what is left first and
//! returns a [`DecodeError`] instead of panicking; [`Reader::finish`] rejects trailing bytes.

use thiserror::Error;

/// A message from the peer did not decode.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("malformed {what} message: {reason}")]
pub struct DecodeError {
    /// Which message.
    pub what: &'static str,
    /// What was wrong.
    pub reason: String,
}

/// Cursor over one message.
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// Starts reading `buf`, which holds one `what` message (the name goes into errors).
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, what }
    }

    fn err(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            what: self.what,
            reason: reason.into(),
        }
    }

    /// Bytes not yet read.
    pub fn left(&self) -> usize {
        self.buf.len()
    }

    /// The next `n` bytes.
    ///
    /// # Errors
    /// Fewer than `n` bytes left.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        match self.buf.split_at_checked(n) {
            Some((head, tail)) => {
                self.buf = tail;
                Ok(head)
            }
            None => Err(self.err(format!("needs {n} more bytes, has {}", self.buf.len()))),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// A byte.
    ///
    /// # Errors
    /// Truncated message.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    /// A boolean byte: 0 or 1.
    ///
    /// # Errors
    /// Truncated message, or any other byte.
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.err(format!("bad boolean {other}"))),
        }
    }

    /// A little-endian u32.
    ///
    /// # Errors
    /// Truncated message.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian u64.
    ///
    /// # Errors
    /// Truncated message.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A string with a u16 length prefix, at most `max` bytes, valid UTF-8.
    ///
    /// # Errors
    /// Too long, truncated, or not UTF-8.
    pub fn str_u16(&mut self, max: usize) -> Result<&'a str, DecodeError> {
        let n = u16::from_le_bytes(self.array()?) as usize;
        if n > max {
            return Err(self.err(format!("string of {n} bytes exceeds the limit of {max}")));
        }
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes).map_err(|_| self.err("string is not UTF-8"))
    }

    /// A count of fixed-size records (u32 prefix), checked against `max` and against the bytes
    /// actually left, before anything is allocated. Returns the count and the records' bytes.
    ///
    /// # Errors
    /// The count exceeds `max` or the bytes left.
    pub fn records(
        &mut self,
        record_len: usize,
        max: usize,
    ) -> Result<(usize, &'a [u8]), DecodeError> {
        let n = self.u32()? as usize;
        let fits = n
            .checked_mul(record_len)
            .is_some_and(|b| b <= self.buf.len());
        if n > max || !fits {
            return Err(self.err(format!(
                "claims {n} records of {record_len} bytes; at most {max} allowed and {} bytes left",
                self.buf.len()
            )));
        }
        Ok((n, self.take(n * record_len)?))
    }

    /// Ends decoding.
    ///
    /// # Errors
    /// Bytes are left over.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.err(format!("{} unexpected trailing bytes", self.buf.len())))
        }
    }
}

/// Appends a little-endian u32.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a little-endian u64.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends bytes with a u16 length prefix, cut at 65,535 bytes (callers keep fields short).
pub fn put_bytes_u16(out: &mut Vec<u8>, v: &[u8]) {
    let v = &v[..v.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(v.len() as u16).to_le_bytes());
    out.extend_from_slice(v);
}

/// Longest LEB128 encoding of a `u32`.
pub const MAX_VARINT_LEN: usize = 5;

/// Longest LEB128 encoding of a `u64`.
pub const MAX_VARINT64_LEN: usize = 10;

/// `v` as an LEB128 varint (7 bits per byte, low first): the bytes, and how many of them are
/// used (1–10). For writers that keep a varint on the stack ([`put_varint`] appends one).
pub fn varint_bytes(v: u64) -> ([u8; MAX_VARINT64_LEN], usize) {
    let mut out = [0u8; MAX_VARINT64_LEN];
    let mut v = v;
    let mut n = 0;
    while v >= 0x80 {
        out[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    out[n] = v as u8;
    (out, n + 1)
}

/// Appends `v` as an LEB128 varint (1–5 bytes).
pub fn put_varint(out: &mut Vec<u8>, v: u32) {
    let (bytes, len) = varint_bytes(u64::from(v));
    out.extend_from_slice(&bytes[..len]);
}

/// Why an LEB128 varint did not decode.
enum VarintFault {
    /// More than the allowed bytes, or bits past 64.
    TooLong,
    /// The bytes ended inside it.
    CutOff,
}

/// The LEB128 varint at the front of `bytes`, of at most `max_len` bytes: its value and its
/// length.
fn leb128(bytes: &[u8], max_len: usize) -> Result<(u64, usize), VarintFault> {
    let mut v = 0u64;
    for i in 0.. {
        if i == max_len {
            return Err(VarintFault::TooLong);
        }
        let b = *bytes.get(i).ok_or(VarintFault::CutOff)?;
        // The tenth byte holds bit 63 only.
        if i == MAX_VARINT64_LEN - 1 && b > 1 {
            return Err(VarintFault::TooLong);
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    Err(VarintFault::TooLong)
}

/// Reads the LEB128 `u64` at `*at` in `bytes` and moves `*at` past it; `None` when it is cut
/// off at the end of `bytes` or does not fit 64 bits.
pub fn read_varint_u64(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let (v, len) = leb128(bytes.get(*at..)?, MAX_VARINT64_LEN).ok()?;
    *at += len;
    Some(v)
}

/// The LEB128 varints of [`put_varint`] in `bytes`, in order. A varint longer than
/// [`MAX_VARINT_LEN`] bytes, above `u32::MAX`, or cut off at the end is an error (and ends the
/// iteration).
pub fn varints<'a>(
    bytes: &'a [u8],
    what: &'static str,
) -> impl Iterator<Item = Result<u32, DecodeError>> + 'a {
    let err = move |reason: &str| DecodeError {
        what,
        reason: reason.into(),
    };
    let mut rest = bytes;
    let mut failed = false;
    std::iter::from_fn(move || {
        if rest.is_empty() || failed {
            return None;
        }
        let decoded = match leb128(rest, MAX_VARINT_LEN) {
            Ok((v, len)) => {
                rest = &rest[len..];
                u32::try_from(v).map_err(|_| err("a varint is above 2^32 − 1"))
            }
            Err(VarintFault::TooLong) => Err(err("a varint is too long")),
            Err(VarintFault::CutOff) => Err(err("the last varint is cut off")),
        };
        failed = decoded.is_err();
        Some(decoded)
    })
}

/// Bytes per message of [`send_bulk`].
pub const BULK_CHUNK: usize = 1 << 22;

/// What can go wrong receiving [`send_bulk`]'s messages.
#[derive(Debug, Error)]
pub enum BulkError {
    /// The link failed.
    #[error(transparent)]
    Link(#[from] crate::LinkError),
    /// A message had the wrong type, was empty, or ran past the announced length.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Sends `bytes` (whose length the caller has announced) as `[kind, chunk…]` messages of at
/// most [`BULK_CHUNK`] bytes; nothing for empty `bytes`.
///
/// # Errors
/// The link failed.
pub fn send_bulk(
    link: &mut dyn crate::Link,
    kind: u8,
    bytes: &[u8],
) -> Result<(), crate::LinkError> {
    for chunk in bytes.chunks(BULK_CHUNK) {
        let mut msg = Vec::with_capacity(1 + chunk.len());
        msg.push(kind);
        msg.extend_from_slice(chunk);
        link.send(&msg)?;
    }
    Ok(())
}

/// Receives exactly `byte_len` bytes sent by [`send_bulk`] with `kind`. The caller bounds
/// `byte_len` first; memory grows only as bytes arrive.
///
/// # Errors
/// The link failed; a message of another type, an empty one, or one past `byte_len`.
pub fn recv_bulk(
    link: &mut dyn crate::Link,
    kind: u8,
    byte_len: usize,
    what: &'static str,
) -> Result<Vec<u8>, BulkError> {
    let mut bytes = Vec::with_capacity(byte_len.min(BULK_CHUNK));
    while bytes.len() < byte_len {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, what);
        let got = r.u8()?;
        let part = r.take(r.left())?;
        if got != kind || part.is_empty() || part.len() > byte_len - bytes.len() {
            return Err(r
                .err(format!(
                    "a part of type {got:#04x} with {} bytes, where {} bytes of type {kind:#04x} \
                 were still due",
                    part.len(),
                    byte_len - bytes.len()
                ))
                .into());
        }
        bytes.extend_from_slice(part);
    }
    Ok(bytes)
}
