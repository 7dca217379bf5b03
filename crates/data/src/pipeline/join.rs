//! Joins on the intersection, with SQL semantics for duplicate keys, aligned row by row.
//!
//! The protocol runs on unique keys. Afterwards both parties know the matched keys (this needs
//! `broadcast_result`) and put them in the same order (by key). For each matched key with `a`
//! rows on the left and `b` on the right, the SQL join has the `a·b` pairs `(l_i, r_j)`; both
//! outputs list them `i`-major, so the left party writes each of its rows `b` times in a row and
//! the right party writes its `b` rows `a` times over. Zipping the two files gives exactly the
//! SQL pairs (SecretFlow instead writes each row `peer_count + 1` times, which loses pairs).
//!
//! Outer joins then pad with the null row (`csv_null_rep` in every column), in this order on
//! both sides:
//!
//! | part | left party writes | right party writes | in |
//! |---|---|---|---|
//! | 1 | matched pairs | matched pairs | INNER, LEFT, RIGHT, FULL |
//! | 2 | its unmatched rows | null × that count | LEFT, FULL, DIFFERENCE |
//! | 3 | null × the right's unmatched count | its unmatched rows | RIGHT, FULL, DIFFERENCE |
//!
//! What it reveals beyond the intersection: each party learns the other's row count for every
//! matched key (needed to write the pairs), and, in parts 2 and 3, the number of the other's
//! unmatched rows that the join pads for. Nothing about unmatched keys themselves.

use crate::error::DataError;
use blindjoin_link::{
    BulkError, Link, MAX_VARINT_LEN, Reader, put_u32, put_varint, recv_bulk, send_bulk, varints,
};
use blindjoin_protocols::ProtocolError;

pub use crate::spec::JoinType;

/// Largest join output accepted: a guard against a peer that claims absurd duplicate counts
/// (2^40 rows is far beyond any file we could write).
pub const MAX_OUTPUT_ROWS: u64 = 1 << 40;

fn peer_error(message: String) -> DataError {
    DataError::Protocol(ProtocolError::PeerMisbehaved(message))
}

const MSG_JOIN_INFO: u8 = blindjoin_link::wire::byte(blindjoin_link::wire::ids::JOIN_INFO);

/// Sends our row count per matched key and our unmatched row count; receives the peer's.
/// Both parties must pass the same number of matched keys (they know the same intersection).
///
/// Wire: `[MSG, unmatched u64, n u32, byte_len u32]`; `byte_len = 0` means every count is 1
/// (unique keys: nothing more is sent), else `[MSG, bytes…]` messages carry the `n` counts as
/// LEB128 varints. The decoder checks `n` against its own key count and `byte_len ≤ 5·n`
/// before reading, and that exactly `n` non-zero counts arrive.
///
/// # Errors
/// Link failures; a peer whose counts do not line up.
pub fn exchange_counts(
    link: &mut dyn Link,
    counts: &[u32],
    unmatched: u64,
) -> Result<(Vec<u32>, u64), DataError> {
    let mut body = Vec::new();
    if counts.iter().any(|&c| c != 1) {
        body.reserve(counts.len());
        for &c in counts {
            put_varint(&mut body, c);
        }
    }
    let mut head = vec![MSG_JOIN_INFO];
    head.extend_from_slice(&unmatched.to_le_bytes());
    put_u32(&mut head, counts.len() as u32);
    put_u32(&mut head, body.len() as u32);
    link.send(&head)?;
    send_bulk(link, MSG_JOIN_INFO, &body)?;

    let decode = |e: blindjoin_link::DecodeError| peer_error(e.to_string());
    let msg = link.recv()?;
    let mut r = Reader::new(&msg, "join counts");
    if r.u8().map_err(decode)? != MSG_JOIN_INFO {
        return Err(peer_error("expected the join counts".into()));
    }
    let peer_unmatched = r.u64().map_err(decode)?;
    let n = r.u32().map_err(decode)? as usize;
    let byte_len = r.u32().map_err(decode)? as usize;
    r.finish().map_err(decode)?;
    if n != counts.len() {
        return Err(peer_error(format!(
            "the peer has {n} matched keys, we have {}; the intersections differ",
            counts.len()
        )));
    }
    if byte_len == 0 {
        return Ok((vec![1; n], peer_unmatched));
    }
    if byte_len > n.saturating_mul(MAX_VARINT_LEN) {
        return Err(peer_error(format!(
            "{byte_len} bytes of join counts announced for {n} keys"
        )));
    }
    let bytes = recv_bulk(link, MSG_JOIN_INFO, byte_len, "join counts").map_err(|e| match e {
        BulkError::Link(l) => DataError::Link(l),
        BulkError::Decode(d) => decode(d),
    })?;
    let mut peer = Vec::with_capacity(n);
    for v in varints(&bytes, "join counts") {
        let v = v.map_err(decode)?;
        if v == 0 || peer.len() == n {
            return Err(peer_error(
                "a join count is zero, or there are too many".into(),
            ));
        }
        peer.push(v);
    }
    if peer.len() != n {
        return Err(peer_error(format!(
            "expected {n} join counts, got {}",
            peer.len()
        )));
    }
    Ok((peer, peer_unmatched))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cross_the_link_and_mismatches_fail() {
        let (mut a, mut b) = blindjoin_link::mem_pair();
        let t = std::thread::spawn(move || exchange_counts(&mut b, &[2, 1, 700], 4).unwrap());
        assert_eq!(
            exchange_counts(&mut a, &[1, 1, 1], 9).unwrap(),
            (vec![2, 1, 700], 4)
        );
        assert_eq!(t.join().unwrap(), (vec![1, 1, 1], 9));
        // Unique keys cost only the head.
        assert!(a.stats().bytes_sent < 64);

        let (mut a, mut b) = blindjoin_link::mem_pair();
        let t = std::thread::spawn(move || exchange_counts(&mut b, &[1, 1], 0));
        assert!(exchange_counts(&mut a, &[1], 0).is_err());
        let _ = t.join();
    }

    #[test]
    fn join_names_parse() {
        for j in JoinType::ALL {
            assert_eq!(JoinType::parse(j.config_name()), Some(j));
        }
        assert_eq!(
            JoinType::parse("ADVANCED_JOIN_TYPE_UNSPECIFIED"),
            Some(JoinType::Inner)
        );
        assert_eq!(JoinType::parse("left"), Some(JoinType::Left));
        assert_eq!(JoinType::parse("outer"), None);
    }
}
