//! The greeting on a partition worker's connection. A partitioned run opens one connection per
//! partition besides the main link; each is an ordinary link (its own TCP/TLS greeting with the
//! party ids), and its first messages bind it to the run: the session id the coordinators
//! agreed over the main link (random per run), the partition index, the partition count and the
//! attempt (a retried partition counts up). A connection that names another session (a stale
//! or foreign run), another attempt (a worker of a failed try still running) or another
//! partition (crossed endpoints) is refused on both sides before any protocol message, so no
//! bucket's traffic ever meets the wrong peer worker. The coordinators exchange the listening
//! side's worker ports in a [`WorkerTable`] over the main link.

use crate::wire::{WireMessage, ids};
use crate::{DecodeError, Link, LinkError, Reader, put_u32};

/// Most partitions a run may have: bounds the endpoint table a peer may send.
pub const MAX_PARTITIONS: u32 = 1024;

/// A run's session id: random, made by the listening coordinator, sent over the main link.
pub type SessionId = [u8; 16];

/// What a worker connection says it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerGreeting {
    /// The run.
    pub session: SessionId,
    /// This connection's partition, `0..partitions`.
    pub partition: u32,
    /// The run's partition count.
    pub partitions: u32,
    /// Which try of this partition (0 first; a retry counts up).
    pub attempt: u32,
}

impl WireMessage for WorkerGreeting {
    const ID: &'static [u8] = ids::WORKER_GREETING;
    const NAME: &'static str = "worker greeting";

    fn put_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.session);
        put_u32(out, self.partition);
        put_u32(out, self.partitions);
        put_u32(out, self.attempt);
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut session = [0u8; 16];
        session.copy_from_slice(r.take(16)?);
        let g = WorkerGreeting {
            session,
            partition: r.u32()?,
            partitions: r.u32()?,
            attempt: r.u32()?,
        };
        if g.partitions == 0 || g.partitions > MAX_PARTITIONS || g.partition >= g.partitions {
            return Err(DecodeError {
                what: Self::NAME,
                reason: format!(
                    "partition {} of {} (at most {MAX_PARTITIONS} partitions)",
                    g.partition, g.partitions
                ),
            });
        }
        Ok(g)
    }
}

/// The listening coordinator's worker endpoints: the session id and, per partition, the port
/// its worker listens on (on the host of the main link's address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerTable {
    /// The run.
    pub session: SessionId,
    /// Partition `p` listens on `ports[p]`.
    pub ports: Vec<u16>,
}

impl WireMessage for WorkerTable {
    const ID: &'static [u8] = ids::WORKER_TABLE;
    const NAME: &'static str = "worker endpoint table";

    fn put_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.session);
        put_u32(out, self.ports.len() as u32);
        for p in &self.ports {
            out.extend_from_slice(&p.to_be_bytes());
        }
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut session = [0u8; 16];
        session.copy_from_slice(r.take(16)?);
        let n = r.u32()?;
        if n == 0 || n > MAX_PARTITIONS {
            return Err(DecodeError {
                what: Self::NAME,
                reason: format!("{n} partitions (1 to {MAX_PARTITIONS})"),
            });
        }
        let mut ports = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let b = r.take(2)?;
            ports.push(u16::from_be_bytes([b[0], b[1]]));
        }
        Ok(WorkerTable { session, ports })
    }
}

/// A coordinator's failed partitions after a round of partition tasks (a run on a scheduler
/// such as Ray). Both coordinators send theirs and retry the union, each partition at its
/// next attempt, so the two sides' attempts for a partition always stay equal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryRound {
    /// The round (0 first): both sides must be in the same one.
    pub round: u32,
    /// The partitions that failed here, ascending.
    pub failed: Vec<u32>,
}

impl WireMessage for RetryRound {
    const ID: &'static [u8] = ids::WORKER_RETRY;
    const NAME: &'static str = "partition retry round";

    fn put_body(&self, out: &mut Vec<u8>) {
        put_u32(out, self.round);
        put_u32(out, self.failed.len() as u32);
        for p in &self.failed {
            put_u32(out, *p);
        }
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let round = r.u32()?;
        let n = r.u32()?;
        if n > MAX_PARTITIONS {
            return Err(DecodeError {
                what: Self::NAME,
                reason: format!("{n} failed partitions (at most {MAX_PARTITIONS})"),
            });
        }
        let mut failed = Vec::with_capacity(n as usize);
        for _ in 0..n {
            failed.push(r.u32()?);
        }
        Ok(RetryRound { round, failed })
    }
}

/// The first 4 bytes of a session id in hex: enough to tell two runs apart in an error.
fn short(s: &SessionId) -> String {
    s[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// Why `theirs` does not belong with `ours`, if it does not.
pub fn mismatch(ours: &WorkerGreeting, theirs: &WorkerGreeting) -> Option<String> {
    if theirs.session != ours.session {
        return Some(format!(
            "the worker connection belongs to another run (session {}…, ours {}…); a stale or \
             foreign worker reached this port",
            short(&theirs.session),
            short(&ours.session)
        ));
    }
    if theirs.attempt != ours.attempt {
        return Some(format!(
            "the worker connection is from attempt {} of partition {}, ours is attempt {}; a \
             worker of an earlier try is still running",
            theirs.attempt, theirs.partition, ours.attempt
        ));
    }
    if (theirs.partition, theirs.partitions) != (ours.partition, ours.partitions) {
        return Some(format!(
            "crossed worker connections: the peer's worker is partition {} of {}, this one \
             partition {} of {}",
            theirs.partition, theirs.partitions, ours.partition, ours.partitions
        ));
    }
    None
}

/// Sends our greeting, reads the peer's, and refuses the connection (telling the peer why) if
/// they differ.
///
/// # Errors
/// [`LinkError::WrongPeer`] naming the mismatch; a malformed greeting; link failures.
pub fn greet_worker(link: &mut dyn Link, ours: &WorkerGreeting) -> Result<(), LinkError> {
    link.send(&ours.encode())?;
    let bytes = link.recv()?;
    let theirs = match WorkerGreeting::decode(&bytes) {
        Ok(g) => g,
        Err(e) => {
            let why = format!("refused a worker connection: {e}");
            link.abort(&why);
            return Err(LinkError::WrongPeer(why));
        }
    };
    if let Some(why) = mismatch(ours, &theirs) {
        let why = format!("refused a worker connection: {why}");
        link.abort(&why);
        return Err(LinkError::WrongPeer(why));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem_pair;

    fn g(session: u8, partition: u32, attempt: u32) -> WorkerGreeting {
        WorkerGreeting {
            session: [session; 16],
            partition,
            partitions: 4,
            attempt,
        }
    }

    fn both(
        a: WorkerGreeting,
        b: WorkerGreeting,
    ) -> (Result<(), LinkError>, Result<(), LinkError>) {
        let (mut la, mut lb) = mem_pair();
        let t = std::thread::spawn(move || greet_worker(&mut lb, &b));
        let ra = greet_worker(&mut la, &a);
        (ra, t.join().unwrap())
    }

    #[test]
    fn the_same_session_partition_and_attempt_are_accepted() {
        let (a, b) = both(g(1, 2, 0), g(1, 2, 0));
        assert!(a.is_ok() && b.is_ok());
    }

    #[test]
    fn another_session_is_refused_on_both_sides_naming_it() {
        let (a, b) = both(g(1, 2, 0), g(9, 2, 0));
        let e = a.unwrap_err().to_string();
        assert!(e.contains("another run") && e.contains("09090909"), "{e}");
        assert!(b.is_err());
    }

    #[test]
    fn a_stale_attempt_is_refused() {
        let (a, b) = both(g(1, 2, 1), g(1, 2, 0));
        let e = a.unwrap_err().to_string();
        assert!(e.contains("attempt 0") && e.contains("earlier try"), "{e}");
        assert!(b.is_err());
    }

    #[test]
    fn crossed_partitions_are_refused() {
        let (a, b) = both(g(1, 2, 0), g(1, 3, 0));
        let e = a.unwrap_err().to_string();
        assert!(
            e.contains("crossed") && e.contains("partition 3 of 4"),
            "{e}"
        );
        assert!(b.is_err());
    }

    #[test]
    fn retry_rounds_round_trip_and_huge_counts_are_refused() {
        let m = RetryRound {
            round: 2,
            failed: vec![0, 3],
        };
        assert_eq!(RetryRound::decode(&m.encode()).unwrap(), m);
        let empty = RetryRound {
            round: 0,
            failed: vec![],
        };
        assert_eq!(RetryRound::decode(&empty.encode()).unwrap(), empty);
        let mut huge = m.encode();
        let at = huge.len() - 12;
        huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(RetryRound::decode(&huge).is_err());
        assert!(RetryRound::decode(&m.encode()[..m.encode().len() - 1]).is_err());
    }

    #[test]
    fn greetings_and_tables_round_trip_and_bad_ones_are_refused() {
        let m = g(5, 3, 7);
        assert_eq!(WorkerGreeting::decode(&m.encode()).unwrap(), m);
        let out_of_range = WorkerGreeting { partition: 4, ..m };
        assert!(WorkerGreeting::decode(&out_of_range.encode()).is_err());
        let t = WorkerTable {
            session: [3; 16],
            ports: vec![9000, 9001],
        };
        assert_eq!(WorkerTable::decode(&t.encode()).unwrap(), t);
        let empty = WorkerTable {
            session: [3; 16],
            ports: vec![],
        };
        assert!(WorkerTable::decode(&empty.encode()).is_err());
        // A count far above what follows is refused without allocating it.
        let mut huge = t.encode();
        huge[17..21].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(WorkerTable::decode(&huge).is_err());
        assert!(WorkerTable::decode(&t.encode()[..20]).is_err());
    }
}
