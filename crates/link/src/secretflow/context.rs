//! yacl's `Context` for two parties (`yacl/link/context.cc`, `algorithm/*.cc`@f724366): the
//! names every message goes under, the collectives, spawned sub-contexts and psi's `SyncWait`.
//!
//! * P2P: `<ctx_id>:P2P-<n>:<src>-><dst>`, `n` counting from 1 per context and direction;
//! * collectives: `<ctx_id>:<k>:ALLGATHER|BARRIER|BCAST`, `k` counting from 1 per context,
//!   shared by all collectives;
//! * spawn: `<parent>-<c>` (`c` from 0, per parent) or `<parent>-<name>` (no counter).
//!
//! Counters advance on both sides in the same order, so both parties must make the same calls
//! in the same order on the same context — exactly as with two wheel parties.

use super::channel::{Channel, check_msg_key};
use crate::LinkError;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What psi's `SyncWait` sends while its closure runs (`psi/utils/sync.h`@242a8fa).
pub const SYNC_UNFINISHED: &[u8] = b"p_unfinished";
/// What it sends once the closure is done.
pub const SYNC_FINISHED: &[u8] = b"p_finished";
/// How often `SyncWait` reports (psi's `std::chrono::seconds span(5)`).
pub const SYNC_WAIT_PERIOD: Duration = Duration::from_secs(5);

/// A named view of the link: its own id and counters over the shared channel.
pub struct Context {
    chan: Arc<Channel>,
    id: String,
    counter: u64,
    p2p_sent: u64,
    p2p_received: u64,
    children: u64,
    recv_timeout: Duration,
}

impl Context {
    pub(crate) fn new(chan: Arc<Channel>, id: String, recv_timeout: Duration) -> Context {
        Context {
            chan,
            id,
            counter: 0,
            p2p_sent: 0,
            p2p_received: 0,
            children: 0,
            recv_timeout,
        }
    }

    /// The context id (`desc.id` for the root, `<parent>-…` for spawned ones).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// This party's rank (0 or 1).
    pub fn rank(&self) -> usize {
        self.chan.self_rank as usize
    }

    /// The peer's rank.
    pub fn peer_rank(&self) -> usize {
        self.chan.peer_rank as usize
    }

    /// Always 2: this link joins two parties.
    pub fn world_size(&self) -> usize {
        2
    }

    /// How long a receive waits (yacl `recv_timeout_ms`).
    pub fn recv_timeout(&self) -> Duration {
        self.recv_timeout
    }

    /// Changes how long receives on this context wait.
    pub fn set_recv_timeout(&mut self, t: Duration) {
        self.recv_timeout = t;
    }

    /// An unnamed sub-context `<id>-<c>`; advances this context's child counter.
    pub fn spawn(&mut self) -> Context {
        let id = format!("{}-{}", self.id, self.children);
        self.children += 1;
        Context::new(Arc::clone(&self.chan), id, self.recv_timeout)
    }

    /// A named sub-context `<id>-<name>` (as RR22's `spawn("read")`); no counter moves.
    ///
    /// # Errors
    /// An empty name or one holding `\x01\x02`.
    pub fn spawn_named(&self, name: &str) -> Result<Context, LinkError> {
        check_msg_key(name)?;
        Ok(Context::new(
            Arc::clone(&self.chan),
            format!("{}-{name}", self.id),
            self.recv_timeout,
        ))
    }

    /// Sends `value` to the peer under the next P2P key (yacl `Context::Send`), and waits until
    /// the peer has stored it.
    ///
    /// # Errors
    /// The peer refused it, went away, or did not answer within the RPC timeout; cancelled.
    pub fn send(&mut self, value: &[u8]) -> Result<(), LinkError> {
        self.p2p_sent += 1;
        let key = format!(
            "{}:P2P-{}:{}->{}",
            self.id,
            self.p2p_sent,
            self.rank(),
            self.peer_rank()
        );
        self.chan.send(&key, value)
    }

    /// Receives the peer's next P2P message (yacl `Context::Recv`).
    ///
    /// # Errors
    /// Nothing within the receive timeout ([`LinkError::RecvTimeout`]), the peer went away or
    /// broke the protocol, cancelled.
    pub fn recv(&mut self) -> Result<Vec<u8>, LinkError> {
        self.p2p_received += 1;
        let key = format!(
            "{}:P2P-{}:{}->{}",
            self.id,
            self.p2p_received,
            self.peer_rank(),
            self.rank()
        );
        self.chan.recv(&key, self.recv_timeout)
    }

    /// Sends under an explicit message key (the seq suffix is added).
    ///
    /// # Errors
    /// As [`Context::send`]; an invalid key.
    pub fn send_key(&self, key: &str, value: &[u8]) -> Result<(), LinkError> {
        self.chan.send(key, value)
    }

    /// Receives the value under an explicit message key.
    ///
    /// # Errors
    /// As [`Context::recv`]; an invalid key.
    pub fn recv_key(&self, key: &str) -> Result<Vec<u8>, LinkError> {
        self.chan.recv(key, self.recv_timeout)
    }

    fn next_event(&mut self, kind: &str) -> String {
        self.counter += 1;
        format!("{}:{}:{kind}", self.id, self.counter)
    }

    /// yacl `AllGather`: both values, indexed by rank.
    ///
    /// # Errors
    /// As [`Context::send`] and [`Context::recv`].
    pub fn all_gather(&mut self, value: &[u8]) -> Result<Vec<Vec<u8>>, LinkError> {
        let event = self.next_event("ALLGATHER");
        self.chan.send(&event, value)?;
        let theirs = self.chan.recv(&event, self.recv_timeout)?;
        let mut out = vec![Vec::new(), Vec::new()];
        out[self.rank()] = value.to_vec();
        out[self.peer_rank()] = theirs;
        Ok(out)
    }

    /// yacl `Barrier`: both send an empty value and wait for the other's.
    ///
    /// # Errors
    /// As [`Context::all_gather`].
    pub fn barrier(&mut self) -> Result<(), LinkError> {
        let event = self.next_event("BARRIER");
        self.chan.send(&event, &[])?;
        self.chan.recv(&event, self.recv_timeout).map(|_| ())
    }

    /// yacl `Broadcast`: the root's value, which the root sends and the other party receives
    /// (the non-root's `value` is ignored).
    ///
    /// # Errors
    /// As [`Context::all_gather`]; a root that is not 0 or 1.
    pub fn broadcast(&mut self, value: &[u8], root: usize) -> Result<Vec<u8>, LinkError> {
        if root > 1 {
            return Err(LinkError::InvalidOption {
                field: "root",
                reason: format!("rank {root} is not 0 or 1"),
            });
        }
        let event = self.next_event("BCAST");
        if root == self.rank() {
            self.chan.send(&event, value)?;
            Ok(value.to_vec())
        } else {
            self.chan.recv(&event, self.recv_timeout)
        }
    }

    /// yacl `ConnectToMesh`: sends `connect_<rank>` (seq 0, empty), retried until it is
    /// delivered, then waits for the peer's `connect_<peer>`, all within `timeout`. Run once by
    /// [`super::Session::start`]; psi runs it a second time in its party `Init`.
    ///
    /// # Errors
    /// [`LinkError::ConnectTimeout`] if the peer is not reachable in time; cancelled.
    pub fn connect_to_mesh(&self, timeout: Duration) -> Result<(), LinkError> {
        let deadline = Instant::now() + timeout;
        let key = super::channel::channel_key(&format!("connect_{}", self.rank()), 0);
        self.chan.connect_send(&key, deadline, timeout)?;
        self.recv_peer_connect(deadline, timeout)
    }

    /// The peer's `connect_<peer>`, until `deadline`; a timeout is the connect step's.
    fn recv_peer_connect(&self, deadline: Instant, timeout: Duration) -> Result<(), LinkError> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.chan
            .recv(&format!("connect_{}", self.peer_rank()), left)
            .map(|_| ())
            .map_err(|e| match e {
                LinkError::RecvTimeout { peer, .. } => LinkError::ConnectTimeout {
                    peer,
                    addr: self.chan.peer_addr(),
                    waited: timeout,
                    last: "the peer accepted our connect message but sent none of its own".into(),
                },
                other => other,
            })
    }

    /// The connect step psi's party `Init` runs once more after [`super::Session::start`]'s,
    /// receiving first: the peer's `connect_<peer>`, at most `first_wait`, then ours, then (if
    /// it had not come) the peer's, all within `timeout`.
    ///
    /// Why not send first, as yacl does: yacl's channel keeps one unread seq-0 message a key and
    /// silently drops a second (`OnNormalMessage` inserts with `emplace`, and seq 0 skips the
    /// duplicate check), so our second `connect_<rank>`, sent before the peer has read the
    /// first, is lost, and the peer waits out its `recv_timeout_ms` and aborts. A wheel peer
    /// sends its second connect only after it has read our first (its `create_brpc` returned),
    /// so once its second is here ours cannot be dropped. Between two wheels the window is
    /// their Python between `create_brpc` and `psi_execute`; with no such gap on our side it was
    /// hit on a loaded machine (2 runs in 18). A peer that waits first too (another blindjoin)
    /// gets ours after `first_wait`; we keep every seq-0 message, so it is never lost here.
    ///
    /// # Errors
    /// As [`Context::connect_to_mesh`].
    pub fn connect_to_mesh_again(
        &self,
        timeout: Duration,
        first_wait: Duration,
    ) -> Result<(), LinkError> {
        let deadline = Instant::now() + timeout;
        let theirs = format!("connect_{}", self.peer_rank());
        let early = match self.chan.recv(&theirs, first_wait.min(timeout)) {
            Ok(_) => true,
            Err(LinkError::RecvTimeout { .. }) => false,
            Err(e) => return Err(e),
        };
        let key = super::channel::channel_key(&format!("connect_{}", self.rank()), 0);
        self.chan.connect_send(&key, deadline, timeout)?;
        if early {
            return Ok(());
        }
        self.recv_peer_connect(deadline, timeout)
    }

    /// How many messages under `msg_key` are stored here unread.
    #[cfg(test)]
    pub(crate) fn unread(&self, msg_key: &str) -> usize {
        self.chan.unread(msg_key)
    }

    /// psi's `SyncWait`: runs `work` on its own thread while a spawned sub-context AllGathers
    /// `p_unfinished` every 5 s, then `p_finished`, until neither party is unfinished. The peer
    /// sees the same rounds a wheel party would.
    ///
    /// If the link fails, the error is returned once `work` has finished (its thread is
    /// joined, not abandoned).
    ///
    /// # Errors
    /// As [`Context::all_gather`].
    pub fn sync_wait<R: Send>(&mut self, work: impl FnOnce() -> R + Send) -> Result<R, LinkError> {
        self.sync_wait_every(SYNC_WAIT_PERIOD, |_| work())
    }

    /// [`Context::sync_wait`] whose work uses this context itself, as psi's closures use
    /// `lctx_` (the ECDH run spawns its dual-mask context from it; `Finalize` AllGathers the row
    /// counts on it). The sync sub-context is spawned first, so the names follow psi's.
    ///
    /// # Errors
    /// As [`Context::all_gather`].
    pub fn sync_wait_with<R: Send>(
        &mut self,
        work: impl FnOnce(&mut Context) -> R + Send,
    ) -> Result<R, LinkError> {
        self.sync_wait_every(SYNC_WAIT_PERIOD, work)
    }

    /// The key of this context's `n`-th P2P message from `src` to `dst` (`n` from 1), for
    /// protocols that send and receive P2P from several threads with [`Context::send_key`] and
    /// [`Context::recv_key`] on a context with no other P2P traffic.
    pub fn p2p_key(&self, n: u64, src: usize, dst: usize) -> String {
        format!("{}:P2P-{n}:{src}->{dst}", self.id)
    }

    /// [`Context::sync_wait`] with another period (tests; a wheel peer always uses 5 s).
    ///
    /// # Errors
    /// As [`Context::all_gather`].
    pub fn sync_wait_every<R: Send>(
        &mut self,
        period: Duration,
        work: impl FnOnce(&mut Context) -> R + Send,
    ) -> Result<R, LinkError> {
        let mut sync = self.spawn();
        let this = &mut *self;
        std::thread::scope(|s| {
            let (done_tx, done_rx) = mpsc::channel::<()>();
            let mut worker = Some(s.spawn(move || {
                let r = work(this);
                let _ = done_tx.send(());
                r
            }));
            let mut result = None;
            loop {
                if result.is_none() {
                    let finished = match done_rx.recv_timeout(period) {
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
                        Err(RecvTimeoutError::Timeout) => false,
                    };
                    if finished && let Some(h) = worker.take() {
                        match h.join() {
                            Ok(r) => result = Some(r),
                            Err(p) => std::panic::resume_unwind(p),
                        }
                    }
                }
                let flag = if result.is_some() {
                    SYNC_FINISHED
                } else {
                    SYNC_UNFINISHED
                };
                let flags = sync.all_gather(flag)?;
                if flags.iter().all(|f| f.as_slice() != SYNC_UNFINISHED) {
                    break;
                }
            }
            match result {
                Some(r) => Ok(r),
                // Unreachable: the loop only ends once our own flag was "finished".
                None => Err(LinkError::InvalidOption {
                    field: "sync_wait",
                    reason: "ended before its work finished".into(),
                }),
            }
        })
    }
}
