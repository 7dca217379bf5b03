//! The broadcast of the result: the receiver tells the sender which of the sender's (shuffled)
//! items matched, as strictly increasing positions in `0..n`.
//!
//! Two encodings, whichever is smaller for the run: a bitmap of `n` bits (dense results: one
//! bit per sender item, where plain `u32`s cost 32 bits per match — for a 50% intersection
//! that is 1 bit per item instead of 16), or LEB128 varints of the gaps `p_i − p_{i−1} − 1`
//! (sparse results: about `log2(n/|I|)/7` bytes per match, rounded up).
//!
//! Wire: a head `[MSG, total u32, format u8, byte_len u32]`, then `[MSG, bytes…]` messages of
//! at most [`BULK_CHUNK`](blindjoin_link::BULK_CHUNK) bytes ([`send_bulk`]) until `byte_len` bytes have come. The decoder bounds `byte_len` by
//! what the format allows for `n` and `total` before it reads anything, and checks every
//! position is in range and strictly increasing, and that exactly `total` were sent.

use crate::ecdh::expect_type;
use crate::{ProtocolError, PsiOutput};
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{
    Link, MAX_VARINT_LEN, Reader, put_u32, put_varint, recv_bulk, send_bulk, varints,
};

/// Message type of the result positions.
const MSG_POSITIONS: u8 = wire::byte(ids::POSITIONS);

const FORMAT_GAPS: u8 = 0;
const FORMAT_BITMAP: u8 = 1;

/// Encodes sorted, distinct `positions` (all `< n`) in the smaller format.
pub(crate) fn encode(positions: &[u32], n: usize) -> (u8, Vec<u8>) {
    let mut gaps = Vec::with_capacity(positions.len().min(n.div_ceil(8) + 1));
    let mut next = 0u32;
    for &p in positions {
        put_varint(&mut gaps, p.wrapping_sub(next));
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
    // Each position takes at least one bit of a bitmap or one byte of a varint, so the bytes that
    // arrived bound the count: a head claiming `total` positions with few bytes behind it must not
    // make us reserve `total` slots.
    let mut out = Vec::with_capacity(total.min(n).min(bytes.len().saturating_mul(8)));
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
            let mut next = 0u64;
            for gap in varints(bytes, "intersection positions") {
                let p = next + u64::from(gap?);
                if p >= n as u64 || out.len() >= total {
                    return Err(bad("a position is out of range, or there are too many"));
                }
                out.push(p as usize);
                next = p + 1;
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
    send_bulk(link, MSG_POSITIONS, &bytes)?;
    Ok(())
}

/// Receives the positions of our matched items in our shuffled send order (`n` items).
pub(crate) fn receive(link: &mut dyn Link, n: usize) -> Result<Vec<usize>, ProtocolError> {
    receive_at_most(link, n, n)
}

/// [`receive`], refusing more than `max_total` positions: an intersection has at most
/// `min(n_ours, n_theirs)` items, and the peer's set size is known from the handshake.
///
/// # Errors
/// [`ProtocolError::PeerMisbehaved`] for more than `max_total` (or `n`) positions, and as
/// [`decode`].
pub(crate) fn receive_at_most(
    link: &mut dyn Link,
    n: usize,
    max_total: usize,
) -> Result<Vec<usize>, ProtocolError> {
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
    if total > max_total {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "claims an intersection of {total} items, more than the smaller set's {max_total}"
        )));
    }
    let limit = match format {
        FORMAT_BITMAP => n.div_ceil(8),
        _ => total.saturating_mul(MAX_VARINT_LEN),
    };
    if byte_len > limit {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "intersection positions: {byte_len} bytes announced for {total} of {n} items"
        )));
    }
    let bytes = recv_bulk(link, MSG_POSITIONS, byte_len, "intersection positions")?;
    decode(format, &bytes, total, n)
}

/// The receiver's last step in the table-lookup protocols (RR22, KKRT): its matched item
/// indices (`< n_r`, in any order, repeats allowed) sorted and deduplicated, and with
/// `broadcast` the matched sender positions (`< n_s`) sent back.
pub(crate) fn finish_receiver(
    link: &mut dyn Link,
    mine: Vec<usize>,
    n_r: usize,
    theirs: Vec<u32>,
    n_s: usize,
    broadcast: bool,
) -> Result<PsiOutput, ProtocolError> {
    if broadcast {
        let theirs: Vec<u32> = sorted_distinct(theirs.into_iter().map(|p| p as usize), n_s)
            .into_iter()
            .map(|p| p as u32)
            .collect();
        send(link, &theirs, n_s)?;
    }
    Ok(PsiOutput::intersection(Some(sorted_distinct(
        mine.into_iter(),
        n_r,
    ))))
}

/// The distinct values of `v` (all below `n`; others are dropped) in increasing order, through
/// a bitmap: linear time, where sorting the half-million matches of a 2^20 bucket took 25 ms.
fn sorted_distinct(v: impl Iterator<Item = usize>, n: usize) -> Vec<usize> {
    let mut bits = vec![0u64; n.div_ceil(64)];
    for i in v {
        if let Some(w) = bits.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }
    let mut out = Vec::new();
    for (k, &w) in bits.iter().enumerate() {
        let mut w = w;
        while w != 0 {
            out.push(64 * k + w.trailing_zeros() as usize);
            w &= w - 1;
        }
    }
    out
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
        // A huge announced total with (almost) no bytes behind it is refused without reserving
        // room for `total` positions (8 TiB here: the reservation alone would abort).
        let huge = 1usize << 40;
        assert!(decode(FORMAT_GAPS, &[], huge, huge).is_err());
        assert!(decode(FORMAT_GAPS, &[0], huge, huge).is_err());
        assert!(decode(FORMAT_BITMAP, &[1], huge, 8).is_err());
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

    /// More positions than the smaller set holds are refused, in either format; as many pass.
    #[test]
    fn more_positions_than_the_smaller_set_are_refused() {
        let n = 1000;
        for positions in [(0..n as u32).collect::<Vec<_>>(), vec![1, 500, 999]] {
            let count = positions.len();
            for (max_total, ok) in [(count, true), (count - 1, false)] {
                let (mut a, mut b) = blindjoin_link::mem_pair();
                let sent = positions.clone();
                let t = std::thread::spawn(move || send(&mut a, &sent, n));
                let got = receive_at_most(&mut b, n, max_total);
                drop(b);
                let _ = t.join().unwrap();
                assert_eq!(got.is_ok(), ok, "{count} positions, at most {max_total}");
                if !ok {
                    assert!(matches!(got, Err(ProtocolError::PeerMisbehaved(_))));
                }
            }
        }
    }
}
