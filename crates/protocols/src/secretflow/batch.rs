//! psi's `PsiDataBatchProto` (`psi/utils/serializable.proto`@242a8fa), the message every ECDH
//! batch travels in: `1 item_num`, `2 flatten_bytes` (fixed-width items concatenated),
//! `3 is_last_batch`, `4 batch_index`, `5 type` (`"enc"`, `"dual.enc"`), `6 duplicate_item_cnt`
//! (map: index in the batch → extra copies). A stream ends with an empty batch marked last.
//!
//! The decoder trusts nothing: the width must be the one the protocol expects, the count must
//! match the bytes, every duplicate index must be inside the batch and each appear once.

use crate::ProtocolError;
use blindjoin_link::secretflow::proto::{Fields, Value, put_bytes_field, put_varint_field};

/// One batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// Items in `flatten`.
    pub item_num: u32,
    /// The items, each `width` bytes.
    pub flatten: Vec<u8>,
    /// The stream's end marker.
    pub is_last: bool,
    /// Position in the stream, from 0.
    pub index: u32,
    /// `"enc"` or `"dual.enc"`.
    pub kind: String,
    /// (index in this batch, extra copies), sorted by index.
    pub duplicates: Vec<(u32, u32)>,
}

impl Batch {
    /// A batch of `items` (concatenated, `width` bytes each).
    pub fn items(flatten: Vec<u8>, width: usize, index: u32, kind: &str) -> Batch {
        Batch {
            item_num: (flatten.len() / width.max(1)) as u32,
            flatten,
            is_last: false,
            index,
            kind: kind.into(),
            duplicates: Vec::new(),
        }
    }

    /// The end marker after `index` batches.
    pub fn end(index: u32, kind: &str) -> Batch {
        Batch {
            is_last: true,
            index,
            kind: kind.into(),
            ..Batch::default()
        }
    }

    /// The protobuf bytes (proto3: default values left out, as the wheel writes them).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.flatten.len() + 32 + self.duplicates.len() * 12);
        if self.item_num != 0 {
            put_varint_field(&mut out, 1, u64::from(self.item_num));
        }
        if !self.flatten.is_empty() {
            put_bytes_field(&mut out, 2, &self.flatten);
        }
        if self.is_last {
            put_varint_field(&mut out, 3, 1);
        }
        if self.index != 0 {
            put_varint_field(&mut out, 4, u64::from(self.index));
        }
        if !self.kind.is_empty() {
            put_bytes_field(&mut out, 5, self.kind.as_bytes());
        }
        let mut entry = Vec::with_capacity(12);
        for &(i, n) in &self.duplicates {
            entry.clear();
            put_varint_field(&mut entry, 1, u64::from(i));
            put_varint_field(&mut entry, 2, u64::from(n));
            put_bytes_field(&mut out, 6, &entry);
        }
        out
    }

    /// Decodes a peer's batch whose items must be `width` bytes each.
    ///
    /// # Errors
    /// [`ProtocolError::PeerMisbehaved`] naming what is wrong.
    pub fn decode(buf: &[u8], width: usize) -> Result<Batch, ProtocolError> {
        Self::decode_with(buf, width, false)
    }

    /// Like [`Batch::decode`] for the streams of SecretFlow's unbalanced PSI, whose batches
    /// never set `item_num` (nor `batch_index` or `type`): the count is the bytes over
    /// `width`, which must divide them; a batch that does set `item_num` must agree.
    ///
    /// # Errors
    /// [`ProtocolError::PeerMisbehaved`] naming what is wrong.
    pub fn decode_uncounted(buf: &[u8], width: usize) -> Result<Batch, ProtocolError> {
        Self::decode_with(buf, width, true)
    }

    fn decode_with(buf: &[u8], width: usize, derive: bool) -> Result<Batch, ProtocolError> {
        let bad = |m: String| ProtocolError::PeerMisbehaved(format!("SecretFlow batch: {m}"));
        let mut b = Batch::default();
        let mut f = Fields::new(buf, "PsiDataBatchProto");
        let mut dups = Vec::new();
        while let Some((field, v)) = f.next_field().map_err(|e| bad(e.to_string()))? {
            match (field, v) {
                (1, Value::Varint(n)) => {
                    b.item_num = u32::try_from(n).map_err(|_| bad(format!("item_num {n}")))?
                }
                (2, Value::Bytes(x)) => b.flatten = x.to_vec(),
                (3, Value::Varint(n)) => b.is_last = n != 0,
                (4, Value::Varint(n)) => {
                    b.index = u32::try_from(n).map_err(|_| bad(format!("batch_index {n}")))?
                }
                (5, Value::Bytes(x)) => {
                    b.kind = String::from_utf8(x.to_vec())
                        .map_err(|_| bad("type is not UTF-8".into()))?
                }
                (6, Value::Bytes(x)) => {
                    let (mut k, mut n) = (0u64, 0u64);
                    let mut e = Fields::new(x, "duplicate_item_cnt entry");
                    while let Some((ef, ev)) = e.next_field().map_err(|e| bad(e.to_string()))? {
                        match (ef, ev) {
                            (1, Value::Varint(v)) => k = v,
                            (2, Value::Varint(v)) => n = v,
                            _ => {}
                        }
                    }
                    let k = u32::try_from(k).map_err(|_| bad(format!("duplicate index {k}")))?;
                    let n = u32::try_from(n).map_err(|_| bad(format!("duplicate count {n}")))?;
                    dups.push((k, n));
                }
                // Unknown fields are skipped, as protobuf does.
                _ => {}
            }
        }
        if derive && b.item_num == 0 && width != 0 && b.flatten.len() % width == 0 {
            b.item_num = u32::try_from(b.flatten.len() / width)
                .map_err(|_| bad(format!("{} bytes in one batch", b.flatten.len())))?;
        }
        if width == 0 || b.flatten.len() != b.item_num as usize * width {
            return Err(bad(format!(
                "{} bytes for {} items of {width} bytes",
                b.flatten.len(),
                b.item_num
            )));
        }
        if dups.len() > b.item_num as usize {
            return Err(bad(format!(
                "{} duplicate counts for {} items",
                dups.len(),
                b.item_num
            )));
        }
        dups.sort_unstable();
        for w in dups.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(bad(format!("duplicate index {} given twice", w[0].0)));
            }
        }
        if let Some(&(i, _)) = dups.iter().find(|(i, _)| *i >= b.item_num) {
            return Err(bad(format!(
                "duplicate index {i} outside a batch of {}",
                b.item_num
            )));
        }
        b.duplicates = dups;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_end_batch_is_the_wheels_bytes() {
        // `180120012a03656e63` closes a one-batch `enc` stream (captured from the wheel).
        let b = Batch::end(1, "enc").encode();
        assert_eq!(b, [0x18, 0x01, 0x20, 0x01, 0x2a, 0x03, b'e', b'n', b'c']);
        let d = Batch::decode(&b, 32).unwrap();
        assert!(d.is_last && d.index == 1 && d.item_num == 0);
    }

    #[test]
    fn batches_round_trip_and_hostile_ones_fail() {
        let mut b = Batch::items(vec![7u8; 64], 32, 3, "enc");
        b.duplicates = vec![(0, 2), (1, 5)];
        let enc = b.encode();
        assert_eq!(Batch::decode(&enc, 32).unwrap(), b);
        assert!(Batch::decode(&enc, 33).is_err(), "wrong width");
        let mut over = b.clone();
        over.duplicates = vec![(2, 1)];
        assert!(Batch::decode(&over.encode(), 32).is_err(), "index outside");
        let mut twice = b.clone();
        twice.duplicates = vec![(1, 1), (1, 2)];
        assert!(Batch::decode(&twice.encode(), 32).is_err(), "index twice");
        assert!(Batch::decode(&[0xff, 0xff], 32).is_err());
        for cut in 0..enc.len() {
            let _ = Batch::decode(&enc[..cut], 32);
        }
    }
}
