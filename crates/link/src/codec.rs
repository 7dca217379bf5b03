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
