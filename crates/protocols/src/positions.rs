//! The broadcast of the result: the receiver tells the sender which of the sender's (shuffled)
//! items matched, as strictly increasing positions in `0..n`.
//!
//! Two encodings, whichever is smaller for the run: a bitmap of `n` bits (dense results: one
//! bit per sender item, where plain `u32`s cost 32 bits per match — for a 50% intersection
//! that is 1 bit per item instead of 16), or LEB128 varints of the gaps `p_i − p_{i−1} − 1`
//! (sparse results: about `log2(n/|I|)/7` bytes per match, rounded up).
//!
//! Wire: a head `[MSG, total u32, format u8, byte_len u32]`, then `[MSG, bytes…]` messages of
//! at most [`CHUNK_BYTES`] until `byte_len` bytes have come. The decoder bounds `byte_len` by
//! what the format allows for `n` and `total` before it reads anything, and checks every
//! position is in range and strictly increasing, and that exactly `total` were sent.

use crate::ProtocolError;
use crate::ecdh::expect_type;
use blindjoin_link::{Link, Reader, put_u32};

/// Message type of the result positions.
const MSG_POSITIONS: u8 = 3;

/// Bytes per message after the head.
pub(crate) const CHUNK_BYTES: usize = 1 << 22;

const FORMAT_GAPS: u8 = 0;
const FORMAT_BITMAP: u8 = 1;

/// Longest LEB128 encoding of a `u32`.
const MAX_VARINT: usize = 5;

/// Encodes sorted, distinct `positions` (all `< n`) in the smaller format.
pub(crate) fn encode(positions: &[u32], n: usize) -> (u8, Vec<u8>) {
    let mut gaps = Vec::with_capacity(positions.len().min(n.div_ceil(8) + 1));
    let mut next = 0u32;
    for &p in positions {
        let mut gap = p.wrapping_sub(next);
        loop {
            let low = (gap & 0x7f) as u8;
            gap >>= 7;
            if gap == 0 {
                gaps.push(low);
                break;
            }
            gaps.push(low | 0x80);
        }
        next = p.wrapping_add(1);
        if gaps.len() > n.div_ceil(8) {
            break;
        }
    }
    if gaps.len() <= n.div_ceil(8) {
        return (FORMAT_GAPS, gaps);
    }
    let mut bits = vec![0u8; n.div_ceil(8)];
    for &p in positions {
        bits[p as usize / 8] |= 1 << (p % 8);
    }
    (FORMAT_BITMAP, bits)
}

/// Decodes `total` positions below `n` from `bytes` in `format`.
///
/// # Errors
/// [`ProtocolError::PeerMisbehaved`] on an unknown format, a malformed varint, a position out
/// of range or out of order, a count other than `total`, or trailing bytes.
pub(crate) fn decode(
    format: u8,
    bytes: &[u8],
    total: usize,
    n: usize,
) -> Result<Vec<usize>, ProtocolError> {
    let bad = |what: &str| ProtocolError::PeerMisbehaved(format!("intersection positions: {what}"));
    let mut out = Vec::with_capacity(total.min(n));
    match format {
        FORMAT_BITMAP => {
            if bytes.len() != n.div_ceil(8) {
                return Err(bad("the bitmap's length does not match the set size"));
            }
            for (i, &b) in bytes.iter().enumerate() {
                let mut b = b;
                while b != 0 {
                    let p = 8 * i + b.trailing_zeros() as usize;
                    if p >= n {
                        return Err(bad("a bit past the end of the set is set"));
                    }
                    out.push(p);
                    b &= b - 1;
                }
            }
        }
        FORMAT_GAPS => {
            let mut next = 0usize;
            let mut gap = 0u64;
            let mut len = 0;
            for &b in bytes {
                len += 1;
                if len > MAX_VARINT {
                    return Err(bad("a varint is too long"));
                }
                gap |= u64::from(b & 0x7f) << (7 * (len - 1));
                if b & 0x80 != 0 {
                    continue;
                }
                let p = (next as u64).saturating_add(gap);
                if p >= n as u64 || out.len() >= total {
                    return Err(bad("a position is out of range, or there are too many"));
                }
                out.push(p as usize);
                next = p as usize + 1;
                (gap, len) = (0, 0);
            }
            if len != 0 {
                return Err(bad("the last varint is cut off"));
            }
        }
        other => return Err(bad(&format!("unknown format {other}"))),
    }
    if out.len() != total {
        return Err(bad(&format!(
            "announced {total} positions but sent {}",
            out.len()
        )));
    }
    Ok(out)
}

/// Sends sorted, distinct positions below `n` (the sender's set size).
pub(crate) fn send(link: &mut dyn Link, positions: &[u32], n: usize) -> Result<(), ProtocolError> {
    let (format, bytes) = encode(positions, n);
    let mut head = vec![MSG_POSITIONS];
    put_u32(&mut head, positions.len() as u32);
    head.push(format);
    put_u32(&mut head, bytes.len() as u32);
    link.send(&head)?;
    for chunk in bytes.chunks(CHUNK_BYTES) {
        let mut msg = Vec::with_capacity(1 + chunk.len());
        msg.push(MSG_POSITIONS);
        msg.extend_from_slice(chunk);
        link.send(&msg)?;
    }
    Ok(())
}

/// Receives the positions of our matched items in our shuffled send order (`n` items).
pub(crate) fn receive(link: &mut dyn Link, n: usize) -> Result<Vec<usize>, ProtocolError> {
    let head = link.recv()?;
    let mut r = Reader::new(&head, "intersection positions");
    expect_type(&mut r, MSG_POSITIONS)?;
    let total = r.u32()? as usize;
    let format = r.u8()?;
    let byte_len = r.u32()? as usize;
    r.finish()?;
    if total > n {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "claims an intersection of {total} items, but this party has only {n}"
        )));
    }
    let limit = match format {
        FORMAT_BITMAP => n.div_ceil(8),
        _ => total.saturating_mul(MAX_VARINT),
    };
    if byte_len > limit {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "intersection positions: {byte_len} bytes announced for {total} of {n} items"
        )));
    }
    let mut bytes = Vec::with_capacity(byte_len.min(CHUNK_BYTES));
    while bytes.len() < byte_len {
        let msg = link.recv()?;
        let mut r = Reader::new(&msg, "intersection positions");
        expect_type(&mut r, MSG_POSITIONS)?;
        let part = r.take(r.left())?;
        if part.is_empty() || part.len() > byte_len - bytes.len() {
            return Err(ProtocolError::PeerMisbehaved(
                "intersection positions: a message is empty or runs past the announced length"
                    .into(),
            ));
        }
        bytes.extend_from_slice(part);
    }
    decode(format, &bytes, total, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(positions: &[u32], n: usize) -> u8 {
        let (format, bytes) = encode(positions, n);
        let want: Vec<usize> = positions.iter().map(|&p| p as usize).collect();
        assert_eq!(decode(format, &bytes, positions.len(), n).unwrap(), want);
        let (mut a, mut b) = blindjoin_link::mem_pair();
        let owned = positions.to_vec();
        let t = std::thread::spawn(move || send(&mut a, &owned, n).unwrap());
        assert_eq!(receive(&mut b, n).unwrap(), want);
        t.join().unwrap();
        format
    }

    #[test]
    fn dense_results_use_the_bitmap_and_sparse_ones_the_gaps() {
        let n = 100_000;
        let half: Vec<u32> = (0..n as u32).step_by(2).collect();
        assert_eq!(round_trip(&half, n), FORMAT_BITMAP);
        let sparse: Vec<u32> = (0..n as u32).step_by(997).collect();
        assert_eq!(round_trip(&sparse, n), FORMAT_GAPS);
        let all: Vec<u32> = (0..n as u32).collect();
        assert_eq!(round_trip(&all, n), FORMAT_BITMAP);
        round_trip(&[], n);
        round_trip(&[], 0);
        round_trip(&[0], 1);
        round_trip(&[n as u32 - 1], n);
        round_trip(&[0, 1, 2, 300, 70_000, 99_999], n);
        round_trip(&[u32::MAX - 1], u32::MAX as usize);
    }

    #[test]
    fn hostile_encodings_are_typed_errors() {
        // Out of range, out of order (a zero gap can't go backwards, so: too many), trailing.
        assert!(decode(FORMAT_GAPS, &[10], 1, 10).is_err());
        assert!(decode(FORMAT_GAPS, &[0, 0], 1, 10).is_err());
        assert!(decode(FORMAT_GAPS, &[0x80], 1, 10).is_err());
        assert!(decode(FORMAT_GAPS, &[0xff; 6], 1, 10).is_err());
        assert!(decode(FORMAT_GAPS, &[0xff, 0xff, 0xff, 0xff, 0x7f], 1, 10).is_err());
        assert!(decode(FORMAT_GAPS, &[1], 2, 10).is_err());
        assert!(decode(FORMAT_BITMAP, &[0xff], 8, 7).is_err());
        assert!(decode(FORMAT_BITMAP, &[0x01, 0], 1, 8).is_err());
        assert!(decode(FORMAT_BITMAP, &[0x03], 1, 8).is_err());
        assert!(decode(9, &[], 0, 8).is_err());
        // A head that claims more bytes than the format allows is refused before any read.
        let (mut a, mut b) = blindjoin_link::mem_pair();
        let mut head = vec![MSG_POSITIONS];
        put_u32(&mut head, 1);
        head.push(FORMAT_GAPS);
        put_u32(&mut head, 1 << 30);
        a.send(&head).unwrap();
        assert!(matches!(
            receive(&mut b, 10),
            Err(ProtocolError::PeerMisbehaved(_))
        ));
    }
}
