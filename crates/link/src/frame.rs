//! Frame encoding shared by the TCP and in-memory links: `len: u32 LE | kind: u8 | payload |
//! crc: u32 LE`.
//!
//! **Why a checksum.** TCP's own 16-bit checksum misses about one damaged segment in 2^16 (and
//! NICs, middleboxes and RAM between them can damage bytes after it was checked). A damaged
//! byte in a masked point or an OT message does not fail any protocol check: it only drops a
//! match or shifts a result, so without TLS a flipped bit could end as a wrong intersection
//! written as if correct. Every frame therefore carries a CRC-32 (IEEE, the polynomial of
//! Ethernet and zlib; `crc32fast`, PCLMULQDQ-accelerated, well above link speed) over its header
//! and payload, and the reader refuses a frame whose CRC differs, naming the link. CRC-32
//! detects every burst error of up to 32 bits and lets a random corruption through with
//! probability 2^-32 per damaged frame. It is no defence against an attacker, who can fix the
//! CRC up: that is what TLS (`crate::tls`) is for, and TLS's AEAD makes the CRC redundant but
//! harmless (4 bytes a frame).

/// Largest payload one frame may carry: 64 MiB. Protocol batches are far smaller (a 4096-point
/// batch is 128 KiB); the bound caps what a hostile length prefix can make us allocate.
pub const MAX_FRAME_LEN: usize = 64 << 20;

/// Bytes of framing before each payload: `len: u32 LE | kind: u8`.
pub(crate) const HEADER_LEN: usize = 5;

/// Bytes of framing after each payload: the CRC-32 of header and payload, LE.
pub(crate) const TRAILER_LEN: usize = 4;

/// All framing bytes of one frame: what the byte counters add to each payload.
pub(crate) const OVERHEAD: usize = HEADER_LEN + TRAILER_LEN;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Data = 0,
    Abort = 1,
    Close = 2,
    /// "Still here": sent on a timer, consumed by the inbox (see [`crate::heartbeat`]).
    Heartbeat = 3,
}

impl Kind {
    pub(crate) fn from_byte(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Data),
            1 => Some(Kind::Abort),
            2 => Some(Kind::Close),
            3 => Some(Kind::Heartbeat),
            _ => None,
        }
    }
}

pub(crate) fn header(kind: Kind, len: usize) -> [u8; HEADER_LEN] {
    let l = (len as u32).to_le_bytes();
    [l[0], l[1], l[2], l[3], kind as u8]
}

/// The trailer of a frame with this header and payload.
pub(crate) fn trailer(head: &[u8; HEADER_LEN], payload: &[u8]) -> [u8; TRAILER_LEN] {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(payload);
    h.finalize().to_le_bytes()
}

/// A whole frame as it goes on the wire (tests and tools that write raw frames).
#[cfg(test)]
pub(crate) fn encode(kind: Kind, payload: &[u8]) -> Vec<u8> {
    let head = header(kind, payload.len());
    let mut v = Vec::with_capacity(OVERHEAD + payload.len());
    v.extend_from_slice(&head);
    v.extend_from_slice(payload);
    v.extend_from_slice(&trailer(&head, payload));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC is IEEE CRC-32 (zlib's `crc32`): its check value, and the empty close frame.
    #[test]
    fn the_trailer_is_ieee_crc32_of_header_and_payload() {
        let mut h = crc32fast::Hasher::new();
        h.update(b"123456789");
        assert_eq!(h.finalize(), 0xcbf4_3926);
        let f = encode(Kind::Close, b"");
        assert_eq!(&f[..HEADER_LEN], &[0, 0, 0, 0, 2]);
        let mut h = crc32fast::Hasher::new();
        h.update(&[0, 0, 0, 0, 2]);
        assert_eq!(&f[HEADER_LEN..], &h.finalize().to_le_bytes());
    }

    /// Every single-bit flip anywhere in a frame changes its CRC.
    #[test]
    fn every_single_bit_flip_is_caught() {
        let f = encode(Kind::Data, b"masked points, OT rows and the rest");
        for i in 0..f.len() * 8 {
            let mut g = f.clone();
            g[i / 8] ^= 1 << (i % 8);
            let head: [u8; HEADER_LEN] = g[..HEADER_LEN].try_into().unwrap();
            let (payload, crc) = g[HEADER_LEN..].split_at(g.len() - OVERHEAD);
            assert_ne!(trailer(&head, payload), crc, "bit {i}");
        }
    }
}
