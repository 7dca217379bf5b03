//! yacl's channel semantics on top of Push (`yacl/link/transport/channel.cc`@f724366):
//!
//! * a normal message goes out under `<msg_key>\x01\x02<seq>`, `seq` counting from 1 per
//!   channel (shared by every context of the link); the connect message uses seq 0;
//! * the receiver strips the suffix, stores the value under `<msg_key>`, ignores a repeated seq
//!   (RPC retries), and refuses a second unread value under the same key;
//! * consuming a message sends `ACK\x01\x02` with the decimal seq (not for seq 0), at once, so a
//!   wheel peer's throttle window (`seq >= acked + throttle_window_size` blocks) keeps moving;
//! * closing: ACK whatever is unread, send `FIN\x01\x02` with the count of messages sent, wait
//!   for the peer's FIN and for seqs 1..=its count, then for the ACKs of our own seqs.

use super::chunks::{Reassembly, slices};
use super::client::{Failure, RpcClient};
use super::proto::{
    ChunkInfo, IC_INVALID_REQUEST, IC_UNEXPECTED_ERROR, PushRequest, PushResponse, TRANS_CHUNKED,
    TRANS_MONO,
};
use super::seqs::SeqSet;
use super::server::PushHandler;
use crate::{Cancel, LinkError};
use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Separates a message key from its seq; never allowed inside a message key.
pub const SEQ_SEPARATOR: &[u8] = b"\x01\x02";
/// The ACK key (no seq suffix).
pub const ACK_KEY: &[u8] = b"ACK\x01\x02";
/// The FIN key (no seq suffix).
pub const FIN_KEY: &[u8] = b"FIN\x01\x02";
/// Longest decimal seq accepted (u64::MAX has 20 digits).
const MAX_SEQ_DIGITS: usize = 20;
/// Most values being reassembled at once; a wheel has at most one per message in flight.
const MAX_PARTIAL: usize = 1024;
/// How long after the peer's connections all closed (without a FIN) it counts as gone; brpc
/// reconnects at once if it only lost a connection.
pub const PEER_GONE_GRACE: Duration = Duration::from_secs(2);
/// Poll interval of blocking waits (for cancel and peer loss).
const POLL: Duration = Duration::from_millis(100);
/// Sends that met a broken connection are retried this many times, a second apart (yacl's
/// default `retry_opts`: 3 retries); a repeated seq is ignored by the receiver, so it is safe.
const SEND_RETRIES: u32 = 3;

/// Bounds and sizes of one channel.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub chunk: usize,
    pub parallel: usize,
    pub max_message: usize,
    pub max_buffered: usize,
    pub rpc_timeout: Duration,
}

#[derive(Debug)]
struct Stored {
    value: Vec<u8>,
    seq: u64,
}

#[derive(Default)]
struct State {
    /// Last seq given to an outgoing message.
    sent: u64,
    inbox: HashMap<Vec<u8>, VecDeque<Stored>>,
    received: SeqSet,
    acked: SeqSet,
    peer_fin: Option<u64>,
    partial: HashMap<Vec<u8>, Reassembly>,
    /// Bytes held in `inbox` and `partial`.
    buffered: usize,
    closing: bool,
    /// The first violation by the peer; every later operation reports it.
    failure: Option<Failure>,
    inbound_open: usize,
    inbound_lost_at: Option<Instant>,
}

/// One peer's channel: the store of received messages and the sender of ours.
pub(crate) struct Channel {
    pub(crate) self_rank: u64,
    pub(crate) peer_rank: u64,
    pub(crate) peer: String,
    pub(crate) client: RpcClient,
    pub(crate) limits: Limits,
    pub(crate) cancel: Cancel,
    state: Mutex<State>,
    changed: Condvar,
    acks: Mutex<AckQueue>,
    acks_changed: Condvar,
}

/// ACKs waiting for the ACK sender: `(seq, tries so far)`.
#[derive(Default)]
struct AckQueue {
    queue: VecDeque<(u64, u32)>,
    /// The sender holds a batch it has not finished.
    busy: bool,
    stopped: bool,
}

fn decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > MAX_SEQ_DIGITS || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// `<msg_key>\x01\x02<seq>` split into its parts; a key without the separator has seq 0 (yacl).
pub(crate) fn split_key(key: &[u8]) -> Option<(&[u8], u64)> {
    match key.windows(2).position(|w| w == SEQ_SEPARATOR) {
        None => Some((key, 0)),
        Some(p) => Some((&key[..p], decimal(&key[p + 2..])?)),
    }
}

/// The channel key of a message.
pub(crate) fn channel_key(msg_key: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(msg_key.len() + 2 + MAX_SEQ_DIGITS);
    k.extend_from_slice(msg_key.as_bytes());
    k.extend_from_slice(SEQ_SEPARATOR);
    k.extend_from_slice(seq.to_string().as_bytes());
    k
}

/// Refuses keys yacl refuses (`NormalMessageKeyEnforce`): empty, or holding the separator.
pub(crate) fn check_msg_key(key: &str) -> Result<(), LinkError> {
    if key.is_empty() || key.as_bytes().windows(2).any(|w| w == SEQ_SEPARATOR) {
        return Err(LinkError::InvalidKey {
            key: key.into(),
            reason: "a message key must be non-empty and must not contain \\x01\\x02".into(),
        });
    }
    Ok(())
}

impl Channel {
    pub(crate) fn new(
        self_rank: u64,
        peer_rank: u64,
        peer: &str,
        client: RpcClient,
        limits: Limits,
        cancel: Cancel,
    ) -> Channel {
        Channel {
            self_rank,
            peer_rank,
            peer: peer.into(),
            client,
            limits,
            cancel,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            acks: Mutex::new(AckQueue::default()),
            acks_changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>, deadline: Instant) -> MutexGuard<'a, State> {
        let slice = deadline.saturating_duration_since(Instant::now()).min(POLL);
        self.changed
            .wait_timeout(g, slice)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    /// The error to report instead of waiting on, if any: a peer violation, a cancel, or a peer
    /// whose connections all closed before it sent FIN.
    fn blocker(&self, st: &State) -> Option<LinkError> {
        if let Some(f) = &st.failure {
            return Some(f.clone().into_link_error(&self.peer));
        }
        if self.cancel.is_cancelled() {
            return Some(LinkError::Cancelled {
                reason: self.cancel.reason(),
            });
        }
        if st.peer_fin.is_none() {
            let inbound_gone = st
                .inbound_lost_at
                .is_some_and(|t| t.elapsed() >= PEER_GONE_GRACE);
            let outbound_gone = self.client.down_for().is_some_and(|d| d >= PEER_GONE_GRACE);
            if inbound_gone || outbound_gone {
                return Some(LinkError::PeerClosed {
                    peer: self.peer.clone(),
                });
            }
        }
        None
    }

    fn fail(&self, st: &mut State, reason: String) -> PushResponse {
        let f = Failure::Malformed(reason.clone());
        st.failure.get_or_insert(f);
        self.changed.notify_all();
        PushResponse {
            error_code: IC_UNEXPECTED_ERROR,
            error_msg: reason,
        }
    }

    /// Stores one normal, ACK or FIN message; returns seqs to ACK at once (messages that arrive
    /// while closing).
    fn on_message(
        &self,
        st: &mut State,
        key: &[u8],
        value: Vec<u8>,
    ) -> Result<Option<u64>, String> {
        if key == ACK_KEY {
            let seq = decimal(&value).ok_or("ACK whose value is not a decimal seq")?;
            st.acked
                .insert(seq)
                .map_err(|_| "ACKs for too many seqs this party never sent".to_string())?;
            return Ok(None);
        }
        if key == FIN_KEY {
            let n = decimal(&value).ok_or("FIN whose value is not a decimal count")?;
            st.peer_fin.get_or_insert(n);
            return Ok(None);
        }
        let (msg_key, seq) = split_key(key).ok_or("message key with a malformed seq suffix")?;
        if seq > 0 {
            match st.received.insert(seq) {
                Ok(true) => {}
                // A repeat (RPC retry): already stored once.
                Ok(false) => return Ok(None),
                Err(_) => return Err("too many out-of-order seqs".into()),
            }
        }
        if st.closing {
            return Ok((seq > 0).then_some(seq));
        }
        let queue = st.inbox.entry(msg_key.to_vec()).or_default();
        if seq > 0 && !queue.is_empty() {
            return Err(format!(
                "two unread messages under key {:?}",
                String::from_utf8_lossy(msg_key)
            ));
        }
        let len = value.len();
        queue.push_back(Stored { value, seq });
        st.buffered += len;
        if st.buffered > self.limits.max_buffered {
            return Err(format!(
                "the peer has {} bytes of messages unread here, over the limit of {}; raise max_buffered_bytes if its batches are that large",
                st.buffered, self.limits.max_buffered
            ));
        }
        Ok(None)
    }

    fn on_chunk(
        &self,
        st: &mut State,
        key: &[u8],
        value: &[u8],
        info: Option<ChunkInfo>,
    ) -> Result<Option<u64>, String> {
        let info = info.ok_or("CHUNKED request without chunk_info")?;
        if info.message_length > self.limits.max_message as u64 {
            return Err(format!(
                "chunked message of {} bytes exceeds the limit of {} bytes; raise max_message_len if the peer really sends values this large",
                info.message_length, self.limits.max_message
            ));
        }
        let (_, seq) = split_key(key).ok_or("message key with a malformed seq suffix")?;
        if seq > 0 && st.received.contains(seq) {
            return Ok(None);
        }
        if !st.partial.contains_key(key) && st.partial.len() >= MAX_PARTIAL {
            return Err("too many chunked messages in progress at once".into());
        }
        let r = st
            .partial
            .entry(key.to_vec())
            .or_insert_with(|| Reassembly::new(info.message_length));
        if r.total() != info.message_length {
            return Err(format!(
                "chunks of one message announce lengths {} and {}",
                r.total(),
                info.message_length
            ));
        }
        let added = r.add(info.chunk_offset, value).map_err(|e| e.0)?;
        let complete = r.is_complete();
        st.buffered += added;
        if st.buffered > self.limits.max_buffered {
            return Err(format!(
                "the peer has {} bytes of messages unread here, over the limit of {}; raise max_buffered_bytes",
                st.buffered, self.limits.max_buffered
            ));
        }
        if !complete {
            return Ok(None);
        }
        let Some(r) = st.partial.remove(key) else {
            return Ok(None);
        };
        st.buffered -= usize::try_from(r.held()).unwrap_or(0);
        self.on_message(st, key, r.into_value())
    }

    /// Queues an ACK for the ACK sender ([`Channel::run_acks`]); never blocks the caller.
    fn send_ack(&self, seq: u64) {
        let mut a = self.acks.lock().unwrap_or_else(PoisonError::into_inner);
        a.queue.push_back((seq, 0));
        drop(a);
        self.acks_changed.notify_all();
    }

    /// The ACK sender's loop (its own thread, started by the session): sends every queued ACK,
    /// pipelined, and sends again those that met a broken connection — a lost ACK would stall
    /// a wheel peer's throttle window and hang its close. Returns once [`Channel::stop_acks`]
    /// was called.
    pub(crate) fn run_acks(&self) {
        loop {
            let batch: Vec<(u64, u32)> = {
                let mut a = self.acks.lock().unwrap_or_else(PoisonError::into_inner);
                while a.queue.is_empty() && !a.stopped {
                    a = self
                        .acks_changed
                        .wait_timeout(a, POLL)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                if a.stopped {
                    return;
                }
                a.busy = true;
                a.queue.drain(..).collect()
            };
            let mut started = Vec::with_capacity(batch.len());
            let mut again = Vec::new();
            for (seq, tries) in batch {
                let v = seq.to_string();
                let req = self.request(ACK_KEY, v.as_bytes());
                match self.client.start(&req, Duration::from_secs(2)) {
                    Ok(id) => started.push((id, seq, tries)),
                    Err(f) => again.push((seq, tries, f)),
                }
            }
            for (id, seq, tries) in started {
                match self.client.wait(id, self.limits.rpc_timeout) {
                    Ok(Ok(())) => {}
                    Ok(Err(f)) => again.push((seq, tries, f)),
                    Err(e) => again.push((seq, tries, Failure::Closed(e.to_string()))),
                }
            }
            let retry = !again.is_empty();
            {
                let mut a = self.acks.lock().unwrap_or_else(PoisonError::into_inner);
                for (seq, tries, f) in again {
                    if f.is_transient() && tries < SEND_RETRIES {
                        a.queue.push_back((seq, tries + 1));
                    } else {
                        let mut st = self.lock();
                        st.failure.get_or_insert(f);
                        self.changed.notify_all();
                    }
                }
                a.busy = false;
            }
            self.acks_changed.notify_all();
            if retry && self.sleep(Duration::from_secs(1)).is_err() {
                return;
            }
        }
    }

    /// Ends [`Channel::run_acks`].
    pub(crate) fn stop_acks(&self) {
        self.acks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stopped = true;
        self.acks_changed.notify_all();
    }

    /// Waits until every queued ACK was delivered.
    fn flush_acks(&self, deadline: Instant, timeout: Duration) -> Result<(), LinkError> {
        let mut a = self.acks.lock().unwrap_or_else(PoisonError::into_inner);
        while !a.queue.is_empty() || a.busy {
            if let Some(e) = self.blocker(&self.lock()) {
                return Err(e);
            }
            if a.stopped || Instant::now() >= deadline {
                return Err(LinkError::RpcTimeout {
                    peer: self.peer.clone(),
                    waited: timeout,
                });
            }
            a = self
                .acks_changed
                .wait_timeout(a, POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        Ok(())
    }

    fn request<'a>(&self, key: &'a [u8], value: &'a [u8]) -> PushRequest<'a> {
        PushRequest {
            sender_rank: self.self_rank,
            key,
            value,
            trans_type: TRANS_MONO,
            chunk_info: None,
        }
    }

    /// Sends `req`, retrying on a broken connection; `Err` on cancel, timeout or refusal.
    fn push(&self, req: &PushRequest<'_>) -> Result<(), LinkError> {
        let mut attempt = 0;
        let mut was_closed = false;
        loop {
            match self
                .client
                .call(req, Duration::from_secs(2), self.limits.rpc_timeout)?
            {
                Ok(()) => return Ok(()),
                Err(f) if f.is_transient() && attempt < SEND_RETRIES => {
                    was_closed |= matches!(f, Failure::Closed(_));
                    attempt += 1;
                    self.sleep(Duration::from_secs(1))?;
                }
                // The connection broke and the peer's port is shut since: it is gone.
                Err(Failure::Dial(_)) if was_closed || self.client.down_for().is_some() => {
                    return Err(LinkError::PeerClosed {
                        peer: self.peer.clone(),
                    });
                }
                Err(f) => return Err(f.into_link_error(&self.peer)),
            }
        }
    }

    fn sleep(&self, d: Duration) -> Result<(), LinkError> {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if self.cancel.is_cancelled() {
                return Err(LinkError::Cancelled {
                    reason: self.cancel.reason(),
                });
            }
            std::thread::sleep(end.saturating_duration_since(Instant::now()).min(POLL));
        }
        Ok(())
    }

    /// The peer's server address (for errors).
    pub(crate) fn peer_addr(&self) -> String {
        self.client.addr().to_string()
    }

    /// The connect step's send: `key` (seq 0, empty value) retried until `deadline`, each
    /// attempt with yacl's cyclic 2..12 s RPC timeout, 1 s apart.
    pub(crate) fn connect_send(
        &self,
        key: &[u8],
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), LinkError> {
        let req = self.request(key, &[]);
        let mut last = String::from("no attempt made");
        // Under TLS: an attempt the peer accepted and then closed (its server refused our
        // handshake or certificate; the alert can be lost to the close).
        let mut closed_by_peer: Option<String> = None;
        for attempt in 0u64.. {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let rpc = Duration::from_secs(2 + attempt % 11).min(left);
            match self.client.call(&req, rpc, rpc) {
                Ok(Ok(())) => return Ok(()),
                // Accepted, closed, and now the port is shut: the peer refused us and gave up.
                Ok(Err(Failure::Dial(refused)))
                    if self.client.has_tls()
                        && closed_by_peer.is_some()
                        && refused.starts_with("cannot connect to") =>
                {
                    // What our own server found about the peer's TLS, if anything, says more.
                    if let Some(f @ Failure::Tls(_)) = &self.lock().failure {
                        return Err(f.clone().into_link_error(&self.peer));
                    }
                    return Err(LinkError::TlsHandshake {
                        peer: self.peer.clone(),
                        reason: format!(
                            "{}, then stopped listening ({refused}): it refused this party's                              TLS or certificate; see its log",
                            closed_by_peer.unwrap_or_default()
                        ),
                    });
                }
                Ok(Err(f)) if f.is_transient() => {
                    last = f.text();
                    let reached = match &f {
                        Failure::Closed(_) => true,
                        Failure::Dial(why) => !why.starts_with("cannot connect to"),
                        _ => false,
                    };
                    if self.client.has_tls() && reached {
                        closed_by_peer = Some(format!("the peer closed the connection ({last})"));
                    }
                }
                Ok(Err(f)) => return Err(f.into_link_error(&self.peer)),
                Err(LinkError::RpcTimeout { .. }) => last = "the peer did not answer".into(),
                Err(e) => return Err(e),
            }
            // Our server refused the peer's TLS (or the peer ours): no point in retrying.
            if let Some(f @ Failure::Tls(_)) = &self.lock().failure {
                return Err(f.clone().into_link_error(&self.peer));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            self.sleep(left.min(Duration::from_secs(1)))?;
        }
        Err(LinkError::ConnectTimeout {
            peer: self.peer.clone(),
            addr: self.peer_addr(),
            waited: timeout,
            last,
        })
    }

    /// Sends `value` under `msg_key` with the next seq and waits until the peer stored it.
    pub(crate) fn send(&self, msg_key: &str, value: &[u8]) -> Result<(), LinkError> {
        check_msg_key(msg_key)?;
        let seq = {
            let mut st = self.lock();
            if let Some(e) = self.blocker(&st) {
                return Err(e);
            }
            if st.closing {
                return Err(LinkError::UnexpectedData {
                    peer: self.peer.clone(),
                });
            }
            st.sent += 1;
            st.sent
        };
        self.send_value(&channel_key(msg_key, seq), value)
    }

    /// Sends one channel key's value, MONO or CHUNKED.
    pub(crate) fn send_value(&self, key: &[u8], value: &[u8]) -> Result<(), LinkError> {
        if value.len() <= self.limits.chunk {
            return self.push(&self.request(key, value));
        }
        let total = value.len() as u64;
        let mut in_flight: VecDeque<(u64, usize, usize)> = VecDeque::new();
        let r = self.send_chunks(key, value, total, &mut in_flight);
        if r.is_err() {
            self.client.forget(in_flight.iter().map(|(id, _, _)| *id));
        }
        r
    }

    fn send_chunks(
        &self,
        key: &[u8],
        value: &[u8],
        total: u64,
        in_flight: &mut VecDeque<(u64, usize, usize)>,
    ) -> Result<(), LinkError> {
        for (off, len) in slices(value.len(), self.limits.chunk) {
            if in_flight.len() >= self.limits.parallel.max(1)
                && let Some((id, o, l)) = in_flight.pop_front()
            {
                self.finish_chunk(key, value, total, id, o, l)?;
            }
            let req = self.chunk_request(key, &value[off..off + len], total, off);
            match self.client.start(&req, Duration::from_secs(2)) {
                Ok(id) => in_flight.push_back((id, off, len)),
                // Sent again (and awaited) by finish_chunk's retry path.
                Err(_) => in_flight.push_back((0, off, len)),
            }
        }
        while let Some((id, o, l)) = in_flight.pop_front() {
            self.finish_chunk(key, value, total, id, o, l)?;
        }
        Ok(())
    }

    fn chunk_request<'a>(
        &self,
        key: &'a [u8],
        part: &'a [u8],
        total: u64,
        off: usize,
    ) -> PushRequest<'a> {
        PushRequest {
            sender_rank: self.self_rank,
            key,
            value: part,
            trans_type: TRANS_CHUNKED,
            chunk_info: Some(ChunkInfo {
                message_length: total,
                chunk_offset: off as u64,
            }),
        }
    }

    fn finish_chunk(
        &self,
        key: &[u8],
        value: &[u8],
        total: u64,
        id: u64,
        off: usize,
        len: usize,
    ) -> Result<(), LinkError> {
        let first = if id == 0 {
            Err(Failure::Closed("not sent".into()))
        } else {
            self.client.wait(id, self.limits.rpc_timeout)?
        };
        match first {
            Ok(()) => Ok(()),
            Err(f) if f.is_transient() => {
                self.push(&self.chunk_request(key, &value[off..off + len], total, off))
            }
            Err(f) => Err(f.into_link_error(&self.peer)),
        }
    }

    /// How many messages under `msg_key` are stored and unread.
    #[cfg(test)]
    pub(crate) fn unread(&self, msg_key: &str) -> usize {
        self.lock()
            .inbox
            .get(msg_key.as_bytes())
            .map_or(0, VecDeque::len)
    }

    /// Waits for the value under `msg_key`, at most `timeout`, and ACKs it.
    pub(crate) fn recv(&self, msg_key: &str, timeout: Duration) -> Result<Vec<u8>, LinkError> {
        check_msg_key(msg_key)?;
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if let Some(q) = st.inbox.get_mut(msg_key.as_bytes())
                && let Some(m) = q.pop_front()
            {
                if q.is_empty() {
                    st.inbox.remove(msg_key.as_bytes());
                }
                st.buffered -= m.value.len();
                drop(st);
                if m.seq > 0 {
                    self.send_ack(m.seq);
                }
                return Ok(m.value);
            }
            if let Some(e) = self.blocker(&st) {
                return Err(e);
            }
            if let Some(n) = st.peer_fin
                && st.received.has_all_up_to(n)
                && st.partial.is_empty()
            {
                // The peer closed and everything it sent is here: this key will not come.
                return Err(LinkError::PeerClosed {
                    peer: self.peer.clone(),
                });
            }
            if Instant::now() >= deadline {
                return Err(LinkError::RecvTimeout {
                    peer: self.peer.clone(),
                    waited: timeout,
                });
            }
            st = self.wait(st, deadline);
        }
    }

    /// yacl `WaitLinkTaskFinish`: ACK unread messages, send FIN, wait for the peer's FIN and all
    /// its messages, flush our ACKs, wait for the ACKs of ours.
    pub(crate) fn close(&self, timeout: Duration) -> Result<(), LinkError> {
        let deadline = Instant::now() + timeout;
        let (unread, sent) = {
            let mut st = self.lock();
            st.closing = true;
            let unread: Vec<u64> = st
                .inbox
                .drain()
                .flat_map(|(_, q)| q.into_iter().map(|m| m.seq))
                .filter(|s| *s > 0)
                .collect();
            st.buffered = st.partial.values().map(|r| r.held() as usize).sum();
            (unread, st.sent)
        };
        for seq in unread {
            self.send_ack(seq);
        }
        let count = sent.to_string();
        self.push(&self.request(FIN_KEY, count.as_bytes()))?;
        let timed_out = || LinkError::RecvTimeout {
            peer: self.peer.clone(),
            waited: timeout,
        };
        let mut st = self.lock();
        loop {
            if let Some(n) = st.peer_fin
                && st.received.has_all_up_to(n)
            {
                break;
            }
            if let Some(e) = self.blocker(&st) {
                return Err(e);
            }
            if Instant::now() >= deadline {
                return Err(timed_out());
            }
            st = self.wait(st, deadline);
        }
        drop(st);
        self.flush_acks(deadline, timeout)?;
        let mut st = self.lock();
        while !st.acked.has_all_up_to(sent) {
            if let Some(f) = &st.failure {
                return Err(f.clone().into_link_error(&self.peer));
            }
            if self.cancel.is_cancelled() {
                return Err(LinkError::Cancelled {
                    reason: self.cancel.reason(),
                });
            }
            if Instant::now() >= deadline {
                return Err(timed_out());
            }
            st = self.wait(st, deadline);
        }
        Ok(())
    }

    /// Bytes of received messages held (unread or being reassembled).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn buffered(&self) -> usize {
        self.lock().buffered
    }
}

impl PushHandler for Channel {
    fn on_push(&self, req: &PushRequest<'_>) -> PushResponse {
        if req.sender_rank != self.peer_rank {
            return PushResponse {
                error_code: IC_UNEXPECTED_ERROR,
                error_msg: format!(
                    "dispatch error, key={}, error=listener rank={} not found",
                    String::from_utf8_lossy(req.key),
                    req.sender_rank
                ),
            };
        }
        let mut st = self.lock();
        if st.failure.is_some() {
            return PushResponse {
                error_code: IC_UNEXPECTED_ERROR,
                error_msg: "this party stopped after an earlier protocol error".into(),
            };
        }
        let outcome = match req.trans_type {
            TRANS_MONO => self.on_message(&mut st, req.key, req.value.to_vec()),
            TRANS_CHUNKED => self.on_chunk(&mut st, req.key, req.value, req.chunk_info),
            other => {
                return PushResponse {
                    error_code: IC_INVALID_REQUEST,
                    error_msg: format!("Error: trans type={other}, from rank={}", req.sender_rank),
                };
            }
        };
        match outcome {
            Ok(ack) => {
                drop(st);
                self.changed.notify_all();
                if let Some(seq) = ack {
                    self.send_ack(seq);
                }
                PushResponse::default()
            }
            Err(reason) => self.fail(&mut st, reason),
        }
    }

    fn on_connection(&self, open: bool) {
        let mut st = self.lock();
        if open {
            st.inbound_open += 1;
            st.inbound_lost_at = None;
        } else {
            st.inbound_open = st.inbound_open.saturating_sub(1);
            if st.inbound_open == 0 {
                st.inbound_lost_at = Some(Instant::now());
            }
        }
        drop(st);
        self.changed.notify_all();
    }

    fn on_traffic(&self, received: usize, sent: usize) {
        self.client.count(sent as u64, received as u64);
    }

    fn on_bad_frame(&self, reason: String) {
        let mut st = self.lock();
        st.failure.get_or_insert(Failure::Malformed(reason));
        drop(st);
        self.changed.notify_all();
    }

    fn on_tls_failure(&self, failure: super::tls::TlsFailure) {
        let mut st = self.lock();
        st.failure.get_or_insert(Failure::Tls(failure));
        drop(st);
        self.changed.notify_all();
    }
}
