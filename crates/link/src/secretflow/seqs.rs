//! A set of sequence numbers (1, 2, …) kept as "all of 1..=n" plus the few seen beyond the
//! first gap — yacl's `SegmentTree` does the same job — so the close sequence can ask "did 1..=N
//! all arrive?" in O(1) and a long session costs O(out-of-order window), not O(messages).

use std::collections::BTreeSet;

/// Most sequence numbers held beyond the first gap. Messages arrive at most
/// `chunk_parallel_send_size`+`throttle_window_size` out of order; a peer that leaves a gap this
/// wide is not a yacl channel.
pub const MAX_SPARSE: usize = 1 << 16;

/// Sequence numbers seen (never 0).
#[derive(Debug, Default, Clone)]
pub struct SeqSet {
    /// Every number in 1..=prefix is in the set.
    prefix: u64,
    /// Numbers above `prefix + 1`.
    sparse: BTreeSet<u64>,
}

/// Too many sequence numbers beyond the first gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooSparse;

impl SeqSet {
    /// Adds `seq`; `Ok(false)` if it was already there.
    ///
    /// # Errors
    /// More than [`MAX_SPARSE`] numbers would be held beyond the first gap.
    pub fn insert(&mut self, seq: u64) -> Result<bool, TooSparse> {
        if seq == 0 || seq <= self.prefix {
            return Ok(false);
        }
        if seq == self.prefix + 1 {
            self.prefix = seq;
            while self.sparse.remove(&(self.prefix + 1)) {
                self.prefix += 1;
            }
            return Ok(true);
        }
        if self.sparse.contains(&seq) {
            return Ok(false);
        }
        if self.sparse.len() >= MAX_SPARSE {
            return Err(TooSparse);
        }
        self.sparse.insert(seq);
        Ok(true)
    }

    /// Whether `seq` is in the set.
    pub fn contains(&self, seq: u64) -> bool {
        seq != 0 && (seq <= self.prefix || self.sparse.contains(&seq))
    }

    /// Whether all of 1..=n are in the set (true for n = 0).
    pub fn has_all_up_to(&self, n: u64) -> bool {
        self.prefix >= n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_order_inserts_fill_the_prefix() {
        let mut s = SeqSet::default();
        assert_eq!(s.insert(3), Ok(true));
        assert_eq!(s.insert(1), Ok(true));
        assert!(!s.has_all_up_to(3));
        assert_eq!(s.insert(3), Ok(false));
        assert_eq!(s.insert(2), Ok(true));
        assert!(s.has_all_up_to(3));
        assert_eq!(s.insert(1), Ok(false));
        assert_eq!(s.insert(0), Ok(false));
        assert!(!s.contains(0));
        assert!(s.contains(2) && !s.contains(4));
    }

    #[test]
    fn a_wide_gap_is_refused_not_stored() {
        let mut s = SeqSet::default();
        for i in 0..MAX_SPARSE as u64 {
            assert_eq!(s.insert(10 + i), Ok(true));
        }
        assert_eq!(s.insert(u64::MAX), Err(TooSparse));
        // Filling the gap collapses everything into the prefix.
        for i in 1..10 {
            s.insert(i).unwrap();
        }
        assert!(s.has_all_up_to(9 + MAX_SPARSE as u64));
        assert_eq!(s.insert(u64::MAX), Ok(true));
    }
}
