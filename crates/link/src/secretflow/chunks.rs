//! Chunking: a value longer than `http_max_payload_size` travels as CHUNKED Pushes of exactly
//! that size (the last shorter), each carrying `{message_length, chunk_offset}`; up to
//! `chunk_parallel_send_size` are in flight, so they may arrive in any order
//! (yacl `Channel::SendChunked` / `OnChunkedMessage`).
//!
//! [`Reassembly`] keeps the slices that arrived, not a buffer of the announced length: memory
//! follows the bytes actually received (which the channel counts against its budget), and the
//! whole value is allocated only once every byte is in.

use std::collections::BTreeMap;

/// The slices of one value: `(offset, len)` of each, in order.
pub fn slices(total: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunk = chunk.max(1);
    (0..total.div_ceil(chunk)).map(move |i| {
        let off = i * chunk;
        (off, chunk.min(total - off))
    })
}

/// A chunk that does not fit the value being reassembled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadChunk(pub String);

/// One value being reassembled.
#[derive(Debug)]
pub struct Reassembly {
    total: u64,
    got: u64,
    parts: BTreeMap<u64, Vec<u8>>,
}

impl Reassembly {
    /// A value of `total` bytes (already checked against the message size bound).
    pub fn new(total: u64) -> Reassembly {
        Reassembly {
            total,
            got: 0,
            parts: BTreeMap::new(),
        }
    }

    /// The announced length.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Adds the slice at `offset`. `Ok(0)` for a repeat of a slice already held (an RPC retry),
    /// else the bytes added.
    ///
    /// # Errors
    /// The slice runs past the end or overlaps another slice differently.
    pub fn add(&mut self, offset: u64, data: &[u8]) -> Result<usize, BadChunk> {
        let len = data.len() as u64;
        let end = offset
            .checked_add(len)
            .filter(|e| *e <= self.total)
            .ok_or_else(|| {
                BadChunk(format!(
                    "chunk at offset {offset} of {len} bytes runs past the message length {}",
                    self.total
                ))
            })?;
        if len == 0 {
            return Ok(0);
        }
        if let Some(held) = self.parts.get(&offset) {
            if held.as_slice() == data {
                return Ok(0);
            }
            return Err(BadChunk(format!("two different chunks at offset {offset}")));
        }
        let overlaps_before = self
            .parts
            .range(..offset)
            .next_back()
            .is_some_and(|(o, d)| o + d.len() as u64 > offset);
        let overlaps_after = self.parts.range(offset..end).next().is_some();
        if overlaps_before || overlaps_after {
            return Err(BadChunk(format!(
                "chunk at offset {offset} of {len} bytes overlaps another chunk"
            )));
        }
        self.parts.insert(offset, data.to_vec());
        self.got += len;
        Ok(data.len())
    }

    /// Bytes held.
    pub fn held(&self) -> u64 {
        self.got
    }

    /// Every byte is in.
    pub fn is_complete(&self) -> bool {
        self.got == self.total
    }

    /// The whole value (call once [`Reassembly::is_complete`]). Slices do not overlap, lie
    /// within the value and add up to its length, so concatenating them in order fills it.
    pub fn into_value(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(usize::try_from(self.got).unwrap_or(0));
        for (_, part) in self.parts {
            out.extend_from_slice(&part);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_exact_size_with_a_short_last_one() {
        let s: Vec<_> = slices(2_097_166, 1 << 20).collect();
        assert_eq!(s, vec![(0, 1 << 20), (1 << 20, 1 << 20), (2 << 20, 14)]);
        assert_eq!(slices(10, 5).count(), 2);
        assert_eq!(slices(0, 5).count(), 0);
    }

    #[test]
    fn reassembles_in_any_order_and_ignores_repeats() {
        let value: Vec<u8> = (0..100u8).collect();
        let mut r = Reassembly::new(100);
        let order = [(60, 40), (0, 30), (30, 30)];
        for (i, (o, l)) in order.iter().enumerate() {
            assert_eq!(r.add(*o as u64, &value[*o..o + l]).unwrap(), *l);
            assert_eq!(r.is_complete(), i == 2);
        }
        assert_eq!(r.add(0, &value[..30]).unwrap(), 0);
        assert_eq!(r.into_value(), value);
    }

    #[test]
    fn overlaps_and_overruns_are_refused() {
        let mut r = Reassembly::new(100);
        r.add(10, &[1; 20]).unwrap();
        assert!(r.add(0, &[0; 11]).is_err());
        assert!(r.add(29, &[0; 2]).is_err());
        assert!(r.add(5, &[0; 30]).is_err());
        assert!(r.add(10, &[2; 20]).is_err());
        assert!(r.add(90, &[0; 11]).is_err());
        assert!(r.add(u64::MAX, &[0; 2]).is_err());
        assert_eq!(r.held(), 20);
        assert!(!r.is_complete());
    }
}
