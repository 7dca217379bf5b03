//! The one registry of message ids, and the [`WireMessage`] codec the typed messages implement.
//!
//! Every message a protocol or the data path sends starts with an id from [`ids`]: one byte for
//! the messages of `blindjoin-protocols` and the data path, four ASCII bytes for the OT layer's
//! (`blindjoin-ot`). No id is a prefix of another ([`ALL`] lists them; a test checks it), so a
//! message that arrives where another was expected is refused as such rather than misread.
//! Reading the wire protocol means reading this file, then each id's module.
//!
//! Not listed: the link's own framing (greeting, frame headers, heartbeats, aborts; see
//! [`crate::heartbeat`]), which sits below every message, and the bulk frames that continue a
//! message (their first byte repeats the id of the message they continue).

use crate::codec::{DecodeError, Reader};

/// The registered ids, by the layer that sends them.
pub mod ids {
    /// The protocol handshake (`blindjoin_protocols::Hello`).
    pub const HELLO: &[u8] = &[0x01];
    /// The data path's run terms (join, buckets, key columns, recovery), after the hello.
    pub const RUN_TERMS: &[u8] = &[0x02];

    /// Data path: one bucket's unique-key count.
    pub const BUCKET_COUNT: &[u8] = &[0x08];
    /// Data path: a bucket's join information (per-key row counts for padded joins).
    pub const JOIN_INFO: &[u8] = &[0x09];
    /// Data path: `check_hash_digest`'s keyed digest of the intersection.
    pub const DIGEST_CHECK: &[u8] = &[0x0a];
    /// Data path: `check_hash_digest`'s Diffie–Hellman share, which keys the digest.
    pub const DIGEST_SHARE: &[u8] = &[0x0c];
    /// Data path: where a resumed run starts (recovery).
    pub const RESUME: &[u8] = &[0x0b];
    /// Data path, partitioned runs: a worker connection's greeting (session, partition, attempt).
    pub const WORKER_GREETING: &[u8] = &[0x0d];
    /// Data path, partitioned runs: the listening coordinator's worker endpoint table.
    pub const WORKER_TABLE: &[u8] = &[0x0e];
    /// Data path, partitioned runs on a scheduler: the partitions a coordinator retries.
    pub const WORKER_RETRY: &[u8] = &[0x0f];

    /// Intersection positions sent back to a party (every protocol's result transfer).
    pub const POSITIONS: &[u8] = &[0x10];
    /// ECDH: blinded points.
    pub const ECDH_POINTS: &[u8] = &[0x11];
    /// ECDH: match tags.
    pub const ECDH_TAGS: &[u8] = &[0x12];
    /// ECDH, cardinality and threshold modes: the intersection's size.
    pub const ECDH_COUNT: &[u8] = &[0x13];

    /// RR22: the receiver's commitment (malicious mode).
    pub const RR22_COMMIT: &[u8] = &[0x21];
    /// RR22: the receiver's OKVS-encoded `A` correction.
    pub const RR22_A: &[u8] = &[0x22];
    /// RR22: the receiver's `w` share (malicious mode).
    pub const RR22_W_R: &[u8] = &[0x23];
    /// RR22: the sender's `w` share (malicious mode).
    pub const RR22_W_S: &[u8] = &[0x24];
    /// RR22: the sender's outputs (tags).
    pub const RR22_OUT: &[u8] = &[0x25];

    /// KKRT: the receiver's hashing seed.
    pub const KKRT_SEED: &[u8] = &[0x31];
    /// KKRT: the sender's tags.
    pub const KKRT_TAGS: &[u8] = &[0x32];

    /// Unbalanced PSI: the cache's header.
    pub const UB_CACHE_HEAD: &[u8] = &[0x41];
    /// Unbalanced PSI: a batch of cache tags.
    pub const UB_CACHE_TAGS: &[u8] = &[0x42];
    /// Unbalanced PSI: the online hello.
    pub const UB_HELLO: &[u8] = &[0x43];
    /// Unbalanced PSI: the client's blinded items.
    pub const UB_BLINDED: &[u8] = &[0x44];
    /// Unbalanced PSI: the server's evaluations.
    pub const UB_EVALUATED: &[u8] = &[0x45];

    /// n-party PSI: the setup digest and set size each party sends every other.
    pub const NPC_HELLO: &[u8] = &[0x61];
    /// n-party PSI, zero-sharing variant: a helper pair's shared PRF seed.
    pub const NPC_SEED: &[u8] = &[0x62];
    /// n-party PSI, zero-sharing variant: the receiver's blinded points.
    pub const NPC_BLINDED: &[u8] = &[0x63];
    /// n-party PSI, zero-sharing variant: a helper's evaluated points.
    pub const NPC_EVALUATED: &[u8] = &[0x64];
    /// n-party PSI, zero-sharing variant: a helper's OKVS (head, then bulk).
    pub const NPC_OKVS: &[u8] = &[0x65];
    /// n-party PSI, iterated variant: a party's current intersection size.
    pub const NPC_SIZE: &[u8] = &[0x66];
    /// n-party PSI with `broadcast_result`: the receiver's matched key digests of a bucket, to
    /// each other party (a count, then the digests in bulk parts).
    pub const NPC_RESULT: &[u8] = &[0x67];

    /// OT: IKNP extension header.
    pub const IKNP: &[u8] = b"IKNP";
    /// OT: KKRT OPRF header.
    pub const KKRT_OPRF: &[u8] = b"KKRT";
    /// OT: PPRF correction bits.
    pub const PPRF_FLIPS: &[u8] = b"PPRF";
    /// OT: PPRF sums.
    pub const PPRF_SUMS: &[u8] = b"PPRS";
    /// OT: SoftSpokenOT header.
    pub const SOFTSPOKEN: &[u8] = b"SSOT";
    /// OT: the VOLE receiver's opening (length, noise bits).
    pub const VOLE_HELLO: &[u8] = b"VOLE";
    /// OT: the VOLE code seed.
    pub const VOLE_SEED: &[u8] = b"VOLS";
    /// OT: the VOLE consistency check's challenge.
    pub const VOLE_CHECK: &[u8] = b"VOLC";
    /// OT: the VOLE consistency check's reply.
    pub const VOLE_REPLY: &[u8] = b"VOLR";
    /// OT: the opening of the VOLE receiver's committed share of the code seed (checked mode).
    pub const VOLE_OPEN: &[u8] = b"VOLO";

    /// Labeled PSI (`blindjoin-apsi`): the sender's parameters and label sizes.
    pub const APSI_PARAMS: &[u8] = &[0xa1];
    /// Labeled PSI: the receiver's blinded items.
    pub const APSI_OPRF_QUERY: &[u8] = &[0xa2];
    /// Labeled PSI: the sender's evaluated points.
    pub const APSI_OPRF_REPLY: &[u8] = &[0xa3];
    /// Labeled PSI: the receiver's relinearization keys and ciphertext count.
    pub const APSI_QUERY_HEAD: &[u8] = &[0xa4];
    /// Labeled PSI: one encrypted query power.
    pub const APSI_QUERY_CT: &[u8] = &[0xa5];
    /// Labeled PSI: the number of results.
    pub const APSI_RESULT_HEAD: &[u8] = &[0xa6];
    /// Labeled PSI: one bundle's result.
    pub const APSI_RESULT: &[u8] = &[0xa7];
    /// Labeled PSI, data path: the receiver's plan of queries (bucket count, then the bucket
    /// of each query in order), before the first query.
    pub const APSI_ROUNDS: &[u8] = &[0xa8];
}

/// Every registered id with its name, for the collision test and for readers.
pub const ALL: &[(&str, &[u8])] = &[
    ("HELLO", ids::HELLO),
    ("RUN_TERMS", ids::RUN_TERMS),
    ("BUCKET_COUNT", ids::BUCKET_COUNT),
    ("JOIN_INFO", ids::JOIN_INFO),
    ("DIGEST_CHECK", ids::DIGEST_CHECK),
    ("DIGEST_SHARE", ids::DIGEST_SHARE),
    ("RESUME", ids::RESUME),
    ("WORKER_GREETING", ids::WORKER_GREETING),
    ("WORKER_TABLE", ids::WORKER_TABLE),
    ("POSITIONS", ids::POSITIONS),
    ("ECDH_POINTS", ids::ECDH_POINTS),
    ("ECDH_TAGS", ids::ECDH_TAGS),
    ("ECDH_COUNT", ids::ECDH_COUNT),
    ("RR22_COMMIT", ids::RR22_COMMIT),
    ("RR22_A", ids::RR22_A),
    ("RR22_W_R", ids::RR22_W_R),
    ("RR22_W_S", ids::RR22_W_S),
    ("RR22_OUT", ids::RR22_OUT),
    ("KKRT_SEED", ids::KKRT_SEED),
    ("KKRT_TAGS", ids::KKRT_TAGS),
    ("UB_CACHE_HEAD", ids::UB_CACHE_HEAD),
    ("UB_CACHE_TAGS", ids::UB_CACHE_TAGS),
    ("UB_HELLO", ids::UB_HELLO),
    ("UB_BLINDED", ids::UB_BLINDED),
    ("UB_EVALUATED", ids::UB_EVALUATED),
    ("NPC_HELLO", ids::NPC_HELLO),
    ("NPC_SEED", ids::NPC_SEED),
    ("NPC_BLINDED", ids::NPC_BLINDED),
    ("NPC_EVALUATED", ids::NPC_EVALUATED),
    ("NPC_OKVS", ids::NPC_OKVS),
    ("NPC_SIZE", ids::NPC_SIZE),
    ("NPC_RESULT", ids::NPC_RESULT),
    ("IKNP", ids::IKNP),
    ("KKRT_OPRF", ids::KKRT_OPRF),
    ("PPRF_FLIPS", ids::PPRF_FLIPS),
    ("PPRF_SUMS", ids::PPRF_SUMS),
    ("SOFTSPOKEN", ids::SOFTSPOKEN),
    ("VOLE_HELLO", ids::VOLE_HELLO),
    ("VOLE_SEED", ids::VOLE_SEED),
    ("VOLE_CHECK", ids::VOLE_CHECK),
    ("VOLE_REPLY", ids::VOLE_REPLY),
    ("VOLE_OPEN", ids::VOLE_OPEN),
    ("APSI_PARAMS", ids::APSI_PARAMS),
    ("APSI_OPRF_QUERY", ids::APSI_OPRF_QUERY),
    ("APSI_OPRF_REPLY", ids::APSI_OPRF_REPLY),
    ("APSI_QUERY_HEAD", ids::APSI_QUERY_HEAD),
    ("APSI_QUERY_CT", ids::APSI_QUERY_CT),
    ("APSI_RESULT_HEAD", ids::APSI_RESULT_HEAD),
    ("APSI_RESULT", ids::APSI_RESULT),
    ("APSI_ROUNDS", ids::APSI_ROUNDS),
];

/// The one-byte id of a one-byte registered id (for the modules that write the id byte
/// themselves, e.g. into a reused buffer).
pub const fn byte(id: &[u8]) -> u8 {
    id[0]
}

/// A typed message: its registered id, then a body. `decode` refuses a message with another id,
/// a truncated or overlong body, and (through the body's reader) every length over its bound.
pub trait WireMessage: Sized {
    /// The id from [`ids`].
    const ID: &'static [u8];
    /// Its name in errors.
    const NAME: &'static str;

    /// Appends the body (everything after the id).
    fn put_body(&self, out: &mut Vec<u8>);

    /// Reads the body; the caller checks that nothing is left.
    ///
    /// # Errors
    /// The body is malformed.
    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// The whole message.
    fn encode(&self) -> Vec<u8> {
        let mut out = Self::ID.to_vec();
        self.put_body(&mut out);
        out
    }

    /// Decodes a whole message.
    ///
    /// # Errors
    /// Another id, or a malformed body.
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let body = bytes.strip_prefix(Self::ID).ok_or_else(|| DecodeError {
            what: Self::NAME,
            reason: format!(
                "expected message id {:02x?}, got {:02x?}",
                Self::ID,
                &bytes[..bytes.len().min(Self::ID.len())]
            ),
        })?;
        let mut r = Reader::new(body, Self::NAME);
        let m = Self::read_body(&mut r)?;
        r.finish()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_id_is_a_prefix_of_another() {
        for (i, (a, x)) in ALL.iter().enumerate() {
            assert!(!x.is_empty(), "{a} is empty");
            for (b, y) in &ALL[i + 1..] {
                assert!(
                    !x.starts_with(y) && !y.starts_with(x),
                    "{a} {x:02x?} and {b} {y:02x?} collide"
                );
            }
        }
    }

    #[test]
    fn names_are_unique_and_every_id_is_listed_once() {
        let mut names: Vec<&str> = ALL.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    struct Pair(u32, u64);

    impl WireMessage for Pair {
        const ID: &'static [u8] = ids::BUCKET_COUNT;
        const NAME: &'static str = "test pair";
        fn put_body(&self, out: &mut Vec<u8>) {
            crate::put_u32(out, self.0);
            crate::put_u64(out, self.1);
        }
        fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
            Ok(Pair(r.u32()?, r.u64()?))
        }
    }

    #[test]
    fn codec_round_trips_and_refuses_other_ids_and_bad_lengths() {
        let m = Pair(7, 1 << 40).encode();
        let back = Pair::decode(&m).unwrap();
        assert_eq!((back.0, back.1), (7, 1 << 40));
        let mut other = m.clone();
        other[0] = ids::RESUME[0];
        assert!(Pair::decode(&other).is_err());
        assert!(Pair::decode(&m[..m.len() - 1]).is_err());
        let mut long = m.clone();
        long.push(0);
        assert!(Pair::decode(&long).is_err());
        assert!(Pair::decode(&[]).is_err());
    }
}
