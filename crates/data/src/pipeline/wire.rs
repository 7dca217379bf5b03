//! The data path's own messages, typed: the run terms both parties agree on after the protocol
//! handshake, each bucket's key count, the resume point, and the intersection digest check. Their
//! ids are in `blindjoin_link::wire::ids` with every other message's (`DIGEST_SHARE` and
//! `DIGEST_CHECK` serve both digest checks); the join information's
//! encoding is in [`crate::pipeline::join`].

use crate::error::DataError;
use crate::pipeline::join::JoinType;
use crate::spec::RunSpec;
use blindjoin_link::wire::{WireMessage, ids};
use blindjoin_link::{DecodeError, Link, Reader, put_u32, put_u64};
use blindjoin_protocols::{ProtocolError, Role, compare_settings};

/// The data path's settings that both parties must share, agreed in their own message after
/// the protocol's hello. A mismatch names the config field on both sides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunTerms {
    /// The number of key columns.
    pub key_columns: u32,
    /// `advanced_join_type`.
    pub join: JoinType,
    /// `left_side`.
    pub left_side: Role,
    /// `check_hash_digest`.
    pub check_hash_digest: bool,
    /// `blindjoin.check_intersection_digest`.
    pub check_intersection_digest: bool,
    /// Whether recovery is on (it adds the resume message before the first bucket).
    pub recovery: bool,
    /// Items per bucket (both sides derive the bucket count from it).
    pub bucket_size: u64,
    /// `blindjoin.min_intersection` (0: none).
    pub min_intersection: u64,
    /// The partitions this party asks for; the run uses the smaller of the two
    /// ([`crate::pipeline::partition::agreed`]), so it is not compared.
    pub workers: u32,
    /// Whether this party's partitions run as tasks of a scheduler (`blindjoin.ray`), whose
    /// coordinator swaps failed partitions with the peer's after each round: a peer running
    /// in one process would never answer, so the two must agree before any work.
    pub scheduled: bool,
}

impl RunTerms {
    /// The terms `spec` asks for.
    pub fn of(spec: &RunSpec) -> Self {
        RunTerms {
            key_columns: spec.keys.len() as u32,
            join: spec.join.join,
            left_side: spec.join.left_side,
            check_hash_digest: spec.join.check_hash_digest,
            check_intersection_digest: spec.join.check_intersection_digest,
            recovery: spec.recovery.is_some(),
            bucket_size: spec.bucket_size,
            min_intersection: spec.min_intersection.unwrap_or(0),
            workers: 1,
            scheduled: false,
        }
    }

    /// Each term with the field a user changes to fix a mismatch.
    fn named(&self) -> [(&'static str, String); 9] {
        [
            (
                "the number of key columns (keys)",
                self.key_columns.to_string(),
            ),
            (
                "the bucket size (rr22_config.bucket_size / kkrt_config.bucket_size)",
                self.bucket_size.to_string(),
            ),
            ("advanced_join_type", self.join.config_name().to_string()),
            ("left_side", self.left_side.to_string()),
            (
                "psi_config.check_hash_digest",
                self.check_hash_digest.to_string(),
            ),
            (
                "recovery_config.enabled (both parties must enable recovery)",
                self.recovery.to_string(),
            ),
            (
                "blindjoin.min_intersection",
                self.min_intersection.to_string(),
            ),
            (
                "blindjoin.check_intersection_digest",
                self.check_intersection_digest.to_string(),
            ),
            (
                "how the run is driven (blindjoin.ray.run on both sides, or blindjoin run / \
                 blindjoin.run on both)",
                if self.scheduled {
                    "blindjoin.ray.run"
                } else {
                    "one process (blindjoin run / blindjoin.run)"
                }
                .to_string(),
            ),
        ]
    }

    /// Sends ours, reads the peer's, and checks they agree; both sides report the same field.
    /// Returns the peer's terms (for its worker count).
    ///
    /// # Errors
    /// A mismatch ([`ProtocolError::Mismatch`]), a malformed message, or a link failure.
    pub fn agree(&self, link: &mut dyn Link, role: Role) -> Result<RunTerms, DataError> {
        link.send(&self.encode()).map_err(ProtocolError::from)?;
        let theirs = RunTerms::decode(&link.recv().map_err(ProtocolError::from)?)
            .map_err(ProtocolError::from)?;
        compare_settings(self.named(), theirs.named(), role, role.other())?;
        Ok(theirs)
    }
}

impl WireMessage for RunTerms {
    const ID: &'static [u8] = ids::RUN_TERMS;
    const NAME: &'static str = "run terms";

    fn put_body(&self, out: &mut Vec<u8>) {
        put_u32(out, self.key_columns);
        out.push(self.join.wire_code());
        out.push(self.left_side.wire_code());
        out.push(u8::from(self.check_hash_digest));
        out.push(u8::from(self.recovery));
        put_u64(out, self.bucket_size);
        put_u64(out, self.min_intersection);
        out.push(u8::from(self.check_intersection_digest));
        put_u32(out, self.workers);
        out.push(u8::from(self.scheduled));
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let bad = |reason: String| DecodeError {
            what: Self::NAME,
            reason,
        };
        let key_columns = r.u32()?;
        let code = r.u8()?;
        let join = JoinType::from_wire_code(code)
            .ok_or_else(|| bad(format!("unknown join type code {code}")))?;
        let code = r.u8()?;
        let left_side =
            Role::from_wire_code(code).ok_or_else(|| bad(format!("unknown role code {code}")))?;
        Ok(RunTerms {
            key_columns,
            join,
            left_side,
            check_hash_digest: r.bool()?,
            recovery: r.bool()?,
            bucket_size: r.u64()?,
            min_intersection: r.u64()?,
            check_intersection_digest: r.bool()?,
            workers: r.u32()?,
            scheduled: r.bool()?,
        })
    }
}

/// One bucket's unique-key count, with the bucket's index (so crossed buckets are caught).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketCount {
    /// The bucket.
    pub bucket: u32,
    /// Unique keys of the sender of this message in it.
    pub keys: u64,
}

impl WireMessage for BucketCount {
    const ID: &'static [u8] = ids::BUCKET_COUNT;
    const NAME: &'static str = "bucket count";

    fn put_body(&self, out: &mut Vec<u8>) {
        put_u32(out, self.bucket);
        put_u64(out, self.keys);
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(BucketCount {
            bucket: r.u32()?,
            keys: r.u64()?,
        })
    }
}

/// Recovery: the number of buckets this party's checkpoint has done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumePoint {
    /// Buckets done.
    pub buckets_done: u32,
}

impl WireMessage for ResumePoint {
    const ID: &'static [u8] = ids::RESUME;
    const NAME: &'static str = "resume point";

    fn put_body(&self, out: &mut Vec<u8>) {
        put_u32(out, self.buckets_done);
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ResumePoint {
            buckets_done: r.u32()?,
        })
    }
}

/// A Curve25519 point of the digest checks: `blindjoin.check_intersection_digest`'s
/// Diffie–Hellman share, which keys the digests, and both rounds of `check_hash_digest`'s
/// private equality test (the masked digest, then the peer's point masked again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DigestShare {
    /// `a·G`.
    pub share: [u8; 32],
}

impl WireMessage for DigestShare {
    const ID: &'static [u8] = ids::DIGEST_SHARE;
    const NAME: &'static str = "digest-check share";

    fn put_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.share);
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut share = [0u8; 32];
        share.copy_from_slice(r.take(32)?);
        Ok(DigestShare { share })
    }
}

/// `blindjoin.check_intersection_digest`: the keyed digest of the intersection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DigestCheck {
    /// The chained digest.
    pub digest: [u8; 16],
}

impl WireMessage for DigestCheck {
    const ID: &'static [u8] = ids::DIGEST_CHECK;
    const NAME: &'static str = "intersection digest";

    fn put_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.digest);
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut digest = [0u8; 16];
        digest.copy_from_slice(r.take(16)?);
        Ok(DigestCheck { digest })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms() -> RunTerms {
        RunTerms {
            key_columns: 2,
            join: JoinType::Full,
            left_side: Role::Sender,
            check_hash_digest: true,
            check_intersection_digest: true,
            recovery: true,
            bucket_size: 1 << 20,
            min_intersection: 10,
            workers: 3,
            scheduled: false,
        }
    }

    /// A coordinator on a scheduler and a peer in one process are told apart before any work,
    /// on both sides with the same text naming what to change.
    #[test]
    fn a_scheduled_run_against_a_one_process_peer_is_refused() {
        let (mut a, mut b) = blindjoin_link::mem_pair();
        let mut ray = terms();
        ray.scheduled = true;
        let t = std::thread::spawn(move || ray.agree(&mut b, Role::Sender));
        let ours = terms()
            .agree(&mut a, Role::Receiver)
            .unwrap_err()
            .to_string();
        let theirs = t.join().unwrap().unwrap_err().to_string();
        assert!(ours.contains("blindjoin.ray.run on both sides"), "{ours}");
        assert!(
            ours.contains("this party (ROLE_RECEIVER) has one process"),
            "{ours}"
        );
        assert!(
            theirs.contains("this party (ROLE_SENDER) has blindjoin.ray.run"),
            "{theirs}"
        );
    }

    #[test]
    fn worker_counts_may_differ_and_each_side_learns_the_peers() {
        let (mut a, mut b) = blindjoin_link::mem_pair();
        let mut theirs = terms();
        theirs.workers = 8;
        let t = std::thread::spawn(move || theirs.agree(&mut b, Role::Sender));
        let got = terms().agree(&mut a, Role::Receiver).unwrap();
        assert_eq!(got.workers, 8);
        assert_eq!(t.join().unwrap().unwrap().workers, 3);
    }

    #[test]
    fn messages_round_trip() {
        assert_eq!(RunTerms::decode(&terms().encode()).unwrap(), terms());
        let c = BucketCount {
            bucket: 3,
            keys: 99,
        };
        assert_eq!(BucketCount::decode(&c.encode()).unwrap(), c);
        let p = ResumePoint { buckets_done: 4 };
        assert_eq!(ResumePoint::decode(&p.encode()).unwrap(), p);
        let d = DigestCheck { digest: [5; 16] };
        assert_eq!(DigestCheck::decode(&d.encode()).unwrap(), d);
        let s = DigestShare { share: [6; 32] };
        assert_eq!(DigestShare::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn hostile_terms_are_typed_errors() {
        let good = terms().encode();
        for cut in 0..good.len() {
            assert!(RunTerms::decode(&good[..cut]).is_err());
        }
        for at in [5, 6, 7, 8] {
            let mut bad = good.clone();
            bad[at] = 200;
            assert!(RunTerms::decode(&bad).is_err(), "byte {at}");
        }
    }

    #[test]
    fn every_term_mismatch_is_named_on_both_sides() {
        type Change = (fn(&mut RunTerms), &'static str);
        let changes: [Change; 8] = [
            (|t| t.key_columns = 1, "key columns"),
            (|t| t.bucket_size = 5, "bucket size"),
            (|t| t.join = JoinType::Inner, "advanced_join_type"),
            (|t| t.left_side = Role::Receiver, "left_side"),
            (|t| t.check_hash_digest = false, "check_hash_digest"),
            (|t| t.recovery = false, "recovery"),
            (|t| t.min_intersection = 0, "min_intersection"),
            (
                |t| t.check_intersection_digest = false,
                "check_intersection_digest",
            ),
        ];
        for (change, field) in changes {
            let mut other = terms();
            change(&mut other);
            let (mut a, mut b) = blindjoin_link::mem_pair();
            let theirs = other.clone();
            let t = std::thread::spawn(move || theirs.agree(&mut b, Role::Sender));
            let ea = terms()
                .agree(&mut a, Role::Receiver)
                .unwrap_err()
                .to_string();
            let eb = t.join().unwrap().unwrap_err().to_string();
            for e in [ea, eb] {
                assert!(e.contains(field), "{field}: {e}");
            }
        }
    }
}
