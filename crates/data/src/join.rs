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

/// `advanced_join_type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum JoinType {
    /// Matched pairs only (also `ADVANCED_JOIN_TYPE_UNSPECIFIED`).
    #[default]
    Inner,
    /// Matched pairs, then the left side's unmatched rows.
    Left,
    /// Matched pairs, then the right side's unmatched rows.
    Right,
    /// Matched pairs, then both sides' unmatched rows.
    Full,
    /// Both sides' unmatched rows only.
    Difference,
}

impl JoinType {
    /// Every join type, for help texts and tests.
    pub const ALL: [JoinType; 5] = [
        JoinType::Inner,
        JoinType::Left,
        JoinType::Right,
        JoinType::Full,
        JoinType::Difference,
    ];

    /// SecretFlow's spelling.
    pub fn config_name(self) -> &'static str {
        match self {
            JoinType::Inner => "ADVANCED_JOIN_TYPE_INNER_JOIN",
            JoinType::Left => "ADVANCED_JOIN_TYPE_LEFT_JOIN",
            JoinType::Right => "ADVANCED_JOIN_TYPE_RIGHT_JOIN",
            JoinType::Full => "ADVANCED_JOIN_TYPE_FULL_JOIN",
            JoinType::Difference => "ADVANCED_JOIN_TYPE_DIFFERENCE",
        }
    }

    /// Parses SecretFlow's names (`ADVANCED_JOIN_TYPE_UNSPECIFIED` is inner) and the short
    /// forms `inner`, `left`, `right`, `full`, `difference`.
    pub fn parse(s: &str) -> Option<Self> {
        let t = s.trim().to_ascii_uppercase();
        let short = t.strip_prefix("ADVANCED_JOIN_TYPE_").unwrap_or(&t);
        Some(match short.strip_suffix("_JOIN").unwrap_or(short) {
            "UNSPECIFIED" | "INNER" => JoinType::Inner,
            "LEFT" => JoinType::Left,
            "RIGHT" => JoinType::Right,
            "FULL" => JoinType::Full,
            "DIFFERENCE" => JoinType::Difference,
            _ => return None,
        })
    }

    fn has_pairs(self) -> bool {
        self != JoinType::Difference
    }

    fn keeps_left_unmatched(self) -> bool {
        matches!(self, JoinType::Left | JoinType::Full | JoinType::Difference)
    }

    fn keeps_right_unmatched(self) -> bool {
        matches!(
            self,
            JoinType::Right | JoinType::Full | JoinType::Difference
        )
    }
}

/// Largest join output accepted: a guard against a peer that claims absurd duplicate counts
/// (2^40 rows is far beyond any file we could write).
pub const MAX_OUTPUT_ROWS: u64 = 1 << 40;

/// One party's output, as a list of parts; rows are produced lazily by [`JoinPlan::rows`].
#[derive(Debug, Default)]
pub struct JoinPlan {
    parts: Vec<Part>,
    len: u64,
}

#[derive(Debug)]
enum Part {
    /// The matched pairs: key `i` holds our rows `rows[ends[i-1]..ends[i]]` and the peer has
    /// `peer[i]` rows of it. The left side writes each of its rows `peer[i]` times in a row,
    /// the right side its run of rows `peer[i]` times over.
    Pairs {
        rows: Vec<u32>,
        ends: Vec<usize>,
        peer: Vec<u32>,
        left: bool,
    },
    /// Own rows, once each.
    Own(Vec<u32>),
    /// Null rows standing for the peer's unmatched rows.
    Nulls(u64),
}

/// This party's side of a join, in the key order both parties share.
pub struct JoinInput {
    /// The join.
    pub join: JoinType,
    /// Whether this party is the join's left side.
    pub am_left: bool,
    /// This party's rows of the matched keys, key after key (in the shared order).
    pub matched_rows: Vec<u32>,
    /// Where each matched key's rows end in `matched_rows`.
    pub matched_ends: Vec<usize>,
    /// The peer's row count for each matched key, same order.
    pub peer_counts: Vec<u32>,
    /// This party's rows whose key did not match, in output order.
    pub unmatched: Vec<u32>,
    /// The peer's number of unmatched rows.
    pub peer_unmatched: u64,
}

impl JoinPlan {
    /// Lays out this party's output (see the module docs for the order).
    ///
    /// # Errors
    /// The peer's counts do not line up with the matched keys (a zero count, a different
    /// number of keys) or make the output larger than [`MAX_OUTPUT_ROWS`].
    pub fn new(input: JoinInput) -> Result<Self, DataError> {
        let JoinInput {
            join,
            am_left,
            matched_rows,
            matched_ends,
            peer_counts,
            unmatched,
            peer_unmatched,
        } = input;
        if matched_ends.len() != peer_counts.len() || peer_counts.contains(&0) {
            return Err(peer_error(format!(
                "the peer sent {} row counts for {} matched keys (or a zero count)",
                peer_counts.len(),
                matched_ends.len()
            )));
        }
        let mut plan = JoinPlan::default();
        if join.has_pairs() {
            let mut start = 0;
            for (&end, &peer) in matched_ends.iter().zip(&peer_counts) {
                plan.grow((end - start) as u64 * u64::from(peer))?;
                start = end;
            }
            if peer_counts.iter().all(|&c| c == 1) {
                plan.parts.push(Part::Own(matched_rows));
            } else {
                plan.parts.push(Part::Pairs {
                    rows: matched_rows,
                    ends: matched_ends,
                    peer: peer_counts,
                    left: am_left,
                });
            }
        }
        let (left_unmatched, right_unmatched) = if am_left {
            (unmatched.len() as u64, peer_unmatched)
        } else {
            (peer_unmatched, unmatched.len() as u64)
        };
        let mut own = Some(unmatched);
        for (keep, left_part, count) in [
            (join.keeps_left_unmatched(), true, left_unmatched),
            (join.keeps_right_unmatched(), false, right_unmatched),
        ] {
            if !keep {
                continue;
            }
            plan.grow(count)?;
            if left_part == am_left {
                plan.parts.push(Part::Own(own.take().unwrap_or_default()));
            } else {
                plan.parts.push(Part::Nulls(count));
            }
        }
        Ok(plan)
    }

    /// A plan that writes `rows` once each, in the given order.
    pub fn own_rows(rows: Vec<u32>) -> Self {
        let len = rows.len() as u64;
        JoinPlan {
            parts: vec![Part::Own(rows)],
            len,
        }
    }

    fn grow(&mut self, rows: u64) -> Result<(), DataError> {
        self.len = self
            .len
            .checked_add(rows)
            .filter(|&n| n <= MAX_OUTPUT_ROWS)
            .ok_or_else(|| {
                peer_error(format!(
                    "the join would have more than {MAX_OUTPUT_ROWS} rows; the peer's duplicate \
                     counts are implausible"
                ))
            })?;
        Ok(())
    }

    /// Output rows in order: `Some(row)` for one of ours, `None` for the null row.
    pub fn rows(&self) -> impl Iterator<Item = Option<u32>> + '_ {
        self.parts
            .iter()
            .flat_map(|p| -> Box<dyn Iterator<Item = Option<u32>> + '_> {
                match p {
                    Part::Pairs {
                        rows,
                        ends,
                        peer,
                        left,
                    } => {
                        let left = *left;
                        Box::new(ends.iter().zip(peer).enumerate().flat_map(
                            move |(i, (&end, &times))| {
                                let start = if i == 0 { 0 } else { ends[i - 1] };
                                let run = &rows[start..end];
                                let times = times as usize;
                                let inner: Box<dyn Iterator<Item = Option<u32>> + '_> = if left {
                                    Box::new(
                                        run.iter().flat_map(move |&r| {
                                            std::iter::repeat_n(Some(r), times)
                                        }),
                                    )
                                } else {
                                    Box::new(
                                        (0..times).flat_map(move |_| run.iter().map(|&r| Some(r))),
                                    )
                                };
                                inner
                            },
                        ))
                    }
                    Part::Own(rows) => Box::new(rows.iter().map(|&r| Some(r))),
                    Part::Nulls(n) => Box::new((0..*n).map(|_| None)),
                }
            })
    }

    /// Number of output rows.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the output has no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn peer_error(message: String) -> DataError {
    DataError::Protocol(ProtocolError::PeerMisbehaved(message))
}

const MSG_JOIN_INFO: u8 = 0x40;

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
    use std::collections::HashMap;

    /// A party's table: row `i` holds key `keys[i]`.
    struct Side {
        keys: Vec<u32>,
    }

    impl Side {
        /// (rows of each shared key flattened, ends, counts, unmatched rows).
        fn split(&self, shared: &[u32]) -> (Vec<u32>, Vec<usize>, Vec<u32>, Vec<u32>) {
            let mut rows = Vec::new();
            let mut ends = Vec::new();
            let mut counts = Vec::new();
            for &k in shared {
                let before = rows.len();
                rows.extend((0..self.keys.len() as u32).filter(|&r| self.keys[r as usize] == k));
                ends.push(rows.len());
                counts.push((rows.len() - before) as u32);
            }
            let unmatched = (0..self.keys.len() as u32)
                .filter(|&r| !shared.contains(&self.keys[r as usize]))
                .collect();
            (rows, ends, counts, unmatched)
        }
    }

    /// Both parties' outputs as key pairs (`None` = null row), zipped row by row.
    fn run(join: JoinType, left: &Side, right: &Side) -> Vec<(Option<u32>, Option<u32>)> {
        let mut shared: Vec<u32> = left
            .keys
            .iter()
            .copied()
            .filter(|k| right.keys.contains(k))
            .collect();
        shared.sort_unstable();
        shared.dedup();
        let (lr, le, lc, lu) = left.split(&shared);
        let (rr, re, rc, ru) = right.split(&shared);
        let (lu_n, ru_n) = (lu.len() as u64, ru.len() as u64);
        let lp = JoinPlan::new(JoinInput {
            join,
            am_left: true,
            matched_rows: lr,
            matched_ends: le,
            peer_counts: rc,
            unmatched: lu,
            peer_unmatched: ru_n,
        })
        .unwrap();
        let rp = JoinPlan::new(JoinInput {
            join,
            am_left: false,
            matched_rows: rr,
            matched_ends: re,
            peer_counts: lc,
            unmatched: ru,
            peer_unmatched: lu_n,
        })
        .unwrap();
        assert_eq!(lp.len(), rp.len(), "{join:?}: outputs differ in length");
        let l: Vec<_> = lp.rows().collect();
        let r: Vec<_> = rp.rows().collect();
        assert_eq!(l.len() as u64, lp.len());
        l.into_iter()
            .zip(r)
            .map(|(a, b)| {
                (
                    a.map(|row| left.keys[row as usize]),
                    b.map(|row| right.keys[row as usize]),
                )
            })
            .collect()
    }

    /// The SQL join of row ids, as a multiset of (left row, right row) with `None` for nulls.
    fn reference(
        join: JoinType,
        left: &Side,
        right: &Side,
    ) -> HashMap<(Option<u32>, Option<u32>), usize> {
        let mut out = HashMap::new();
        let l_hit = |k: u32| right.keys.contains(&k);
        let r_hit = |k: u32| left.keys.contains(&k);
        if join != JoinType::Difference {
            for &a in &left.keys {
                for &b in &right.keys {
                    if a == b {
                        *out.entry((Some(a), Some(b))).or_default() += 1;
                    }
                }
            }
        }
        if matches!(join, JoinType::Left | JoinType::Full | JoinType::Difference) {
            for &a in left.keys.iter().filter(|&&a| !l_hit(a)) {
                *out.entry((Some(a), None)).or_default() += 1;
            }
        }
        if matches!(
            join,
            JoinType::Right | JoinType::Full | JoinType::Difference
        ) {
            for &b in right.keys.iter().filter(|&&b| !r_hit(b)) {
                *out.entry((None, Some(b))).or_default() += 1;
            }
        }
        out
    }

    fn multiset(v: &[(Option<u32>, Option<u32>)]) -> HashMap<(Option<u32>, Option<u32>), usize> {
        let mut m = HashMap::new();
        for &p in v {
            *m.entry(p).or_default() += 1;
        }
        m
    }

    #[test]
    fn every_join_matches_sql_on_many_to_many_keys() {
        let cases = [
            (vec![3, 1, 3, 3, 5], vec![3, 1, 6, 1, 3]),
            (vec![], vec![1, 2]),
            (vec![1, 2], vec![]),
            (vec![], vec![]),
            (vec![7, 7, 7], vec![7, 7]),
            (vec![1, 2, 3], vec![4, 5, 6]),
            (vec![1, 2, 3], vec![1, 2, 3]),
            (vec![1, 1, 2, 2, 2, 9], vec![2, 1, 1, 1, 8, 8, 2]),
        ];
        for (l, r) in cases {
            let (left, right) = (Side { keys: l }, Side { keys: r });
            for join in JoinType::ALL {
                let got = run(join, &left, &right);
                // Matched rows pair a key with itself; padded rows pair with null.
                for &(a, b) in &got {
                    assert!(a.is_none() || b.is_none() || a == b, "{join:?}: {got:?}");
                }
                assert_eq!(
                    multiset(&got),
                    reference(join, &left, &right),
                    "{join:?} {:?} {:?}",
                    left.keys,
                    right.keys
                );
            }
        }
    }

    #[test]
    fn secretflow_duplicate_case_gives_one_one_then_three_six_times() {
        let left = Side {
            keys: vec![3, 1, 3, 3, 5],
        };
        let right = Side {
            keys: vec![3, 1, 6, 1, 3],
        };
        let got = run(JoinType::Inner, &left, &right);
        let keys: Vec<u32> = got.iter().map(|p| p.0.unwrap()).collect();
        assert_eq!(keys, [1, 1, 3, 3, 3, 3, 3, 3]);
        let full = run(JoinType::Full, &left, &right);
        assert_eq!(full[8..], [(Some(5), None), (None, Some(6))]);
    }

    #[test]
    fn hostile_counts_are_refused() {
        let input = |peer_counts: Vec<u32>| JoinInput {
            join: JoinType::Inner,
            am_left: true,
            matched_rows: vec![0, 1],
            matched_ends: vec![2],
            peer_counts,
            unmatched: vec![],
            peer_unmatched: 0,
        };
        assert!(JoinPlan::new(input(vec![0])).is_err());
        assert!(JoinPlan::new(input(vec![1, 1])).is_err());
        let big = JoinInput {
            join: JoinType::Left,
            am_left: false,
            matched_rows: vec![],
            matched_ends: vec![],
            peer_counts: vec![],
            unmatched: vec![],
            peer_unmatched: MAX_OUTPUT_ROWS + 1,
        };
        assert!(JoinPlan::new(big).is_err());
    }

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
