//! The greeting: the first bytes each side of a new TCP connection sends, `MAGIC | own id | the
//! id it expects the other side to have`, so a wrong process on the port, or a peer configured
//! with other party ids, is a clear error, not a hang. Both sides check both ids, so a
//! misconfiguration is reported by both parties.
//!
//! The listener greets incoming connections *concurrently* (one thread each, at most
//! [`MAX_GREETINGS`] at once) and each greeting has [`GREETING_TIMEOUT`] in all, so a stranger
//! that connects first and then sends nothing, or half a greeting, cannot hold up the real
//! peer's greeting: greeted one at a time, every connection ahead of the peer's could cost a
//! whole timeout. TLS, if configured, starts only on the connection whose greeting matched (see
//! [`crate::tls`]).

use crate::LinkError;
use crate::cancel::Cancel;
use crate::tcp::{TcpOptions, cancelled, io};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

/// Magic bytes opening the greeting; version 3 of the link (version 1 had no heartbeats,
/// version 2 no CRC on its frames).
const MAGIC: &[u8; 8] = b"BLNDJN03";
/// The same for a party that will start TLS after the greeting.
const MAGIC_TLS: &[u8; 8] = b"BLNDJS03";
/// What a release with an older link sends, and its TLS form: recognised, to say so clearly.
const OLD_MAGICS: [&[u8; 8]; 4] = [b"BLNDJN01", b"BLNDJS01", b"BLNDJN02", b"BLNDJS02"];
/// Longest party id accepted in a greeting.
const MAX_ID_LEN: usize = 256;

/// How long one greeting may take in all, on either side: 5 s. A greeting is at most 524 bytes
/// each way, one round trip once TCP is up, so a real peer needs a few RTTs (well under a second
/// even across continents or on a loaded machine); the timeout only bounds how long a stranger
/// holds one of the [`MAX_GREETINGS`] slots, and how long a connector waits on a port where
/// something else listens before it retries.
pub(crate) const GREETING_TIMEOUT: Duration = Duration::from_secs(5);

/// Greetings the listener runs at once: 8. A further connection evicts the oldest pending one,
/// so a stranger opening connections cannot lock the real peer out; it would have to open them
/// faster than the real peer's greeting completes.
pub(crate) const MAX_GREETINGS: usize = 8;

/// How long the listener sleeps between non-blocking accepts. Both parties read their input
/// while the link comes up, and the one that finishes first waits for the link: a long poll
/// would be idle time added to every run.
const ACCEPT_POLL: Duration = Duration::from_millis(2);

/// Waits on `listener` until a connection greets us as the peer in `opts`: its greeted stream,
/// or the first fatal greeting (a blindjoin peer with other ids or an older release), a cancel,
/// or the deadline.
pub(crate) fn accept_peer(
    listener: &TcpListener,
    opts: &TcpOptions,
    deadline: Instant,
    cancel: &Cancel,
) -> Result<TcpStream, LinkError> {
    let mut got = accept_peers(listener, std::slice::from_ref(opts), deadline, cancel)?;
    got.pop()
        .map(|(_, s)| s)
        .ok_or_else(|| LinkError::WrongPeer("internal: no greeted connection".into()))
}

/// Waits on `listener` until one connection has greeted us as each of the peers in
/// `candidates` (one `TcpOptions` per expected peer, differing in the peer's id), in whatever
/// order they arrive: `(index into candidates, greeted stream)` for each, or the first fatal
/// greeting (a party whose ids match none of them, a second connection claiming a peer already
/// greeted), a cancel, or the deadline. The n-party links ([`crate::many`]) listen this way for
/// several peers on the one address a party has.
pub(crate) fn accept_peers(
    listener: &TcpListener,
    candidates: &[TcpOptions],
    deadline: Instant,
    cancel: &Cancel,
) -> Result<Vec<(usize, TcpStream)>, LinkError> {
    type Greeted = Result<(usize, TcpStream), GreetError>;
    let (done, results) = channel::<(u64, SocketAddr, Greeted)>();
    // Clones of the sockets still greeting, oldest first, to end them early.
    let mut pending: VecDeque<(u64, TcpStream)> = VecDeque::new();
    let mut next_id = 0u64;
    let mut last = String::from("nobody connected");
    let mut greeted: Vec<(usize, TcpStream)> = Vec::new();
    let Some(first) = candidates.first() else {
        return Ok(greeted);
    };
    std::thread::scope(|scope| {
        let outcome = loop {
            if let Err(e) = cancelled(cancel) {
                break Err(e);
            }
            let mut settled = None;
            while let Ok((id, from, result)) = results.try_recv() {
                pending.retain(|(p, _)| *p != id);
                match result {
                    Ok((i, s)) => {
                        if greeted.iter().any(|(g, _)| *g == i) {
                            settled = Some(Err(LinkError::WrongPeer(format!(
                                "a second connection from {from} claims to be party {:?}, \
                                 already connected",
                                candidates[i].peer_id
                            ))));
                        } else {
                            greeted.push((i, s));
                            if greeted.len() == candidates.len() {
                                settled = Some(Ok(()));
                            }
                        }
                    }
                    // Garbage from a scanner or another program: keep waiting for our peers.
                    Err(GreetError::NotBlindjoin(why)) => {
                        last = format!("{from} is not a blindjoin peer: {why}")
                    }
                    Err(GreetError::Fatal(e)) => settled = Some(Err(e)),
                }
                if settled.is_some() {
                    break;
                }
            }
            if let Some(s) = settled {
                break s;
            }
            let accepted = match listener.accept() {
                Ok((stream, from)) => {
                    let started = stream
                        .set_nonblocking(false)
                        .and_then(|()| stream.try_clone())
                        .and_then(|watch| {
                            let done = done.clone();
                            std::thread::Builder::new()
                                .name("link-greeting".into())
                                .spawn_scoped(scope, move || {
                                    let _ = done.send((
                                        next_id,
                                        from,
                                        greet_as_listener_among(stream, candidates),
                                    ));
                                })
                                .map(|_| watch)
                        });
                    match started {
                        Ok(watch) => {
                            if pending.len() >= MAX_GREETINGS
                                && let Some((_, oldest)) = pending.pop_front()
                            {
                                let _ = oldest.shutdown(Shutdown::Both);
                            }
                            pending.push_back((next_id, watch));
                            next_id += 1;
                        }
                        Err(e) => last = e.to_string(),
                    }
                    true
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => false,
                Err(e) => {
                    last = e.to_string();
                    false
                }
            };
            if Instant::now() >= deadline {
                let missing: Vec<&str> = candidates
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !greeted.iter().any(|(g, _)| g == i))
                    .map(|(_, c)| c.peer_id.as_str())
                    .collect();
                break Err(LinkError::ConnectTimeout {
                    peer: missing.join(", "),
                    addr: format!("{} (listening; the peer connects here)", first.self_addr),
                    waited: first.connect_timeout,
                    last: last.clone(),
                });
            }
            // More may be waiting: accept them before sleeping.
            if !accepted {
                std::thread::sleep(ACCEPT_POLL);
            }
        };
        // The other greetings end now; the scope then joins their threads.
        for (_, s) in &pending {
            let _ = s.shutdown(Shutdown::Both);
        }
        outcome
    })?;
    Ok(greeted)
}

/// Why a connection's greeting was refused.
pub(crate) enum GreetError {
    /// The other end does not speak our greeting: not fatal while the deadline lasts.
    NotBlindjoin(String),
    /// A blindjoin peer with the wrong identity: a configuration error.
    Fatal(LinkError),
}

/// `MAGIC | own id | the id we expect the other side to have`: both sides check both ids, so a
/// misconfiguration is reported by both parties, not just the one that noticed.
fn greeting(opts: &TcpOptions) -> Vec<u8> {
    let mut g = if opts.tls.is_some() { MAGIC_TLS } else { MAGIC }.to_vec();
    crate::put_bytes_u16(&mut g, opts.self_id.as_bytes());
    crate::put_bytes_u16(&mut g, opts.peer_id.as_bytes());
    g
}

fn read_id(stream: &mut impl Read) -> Result<String, GreetError> {
    let not_ours = |e: std::io::Error| GreetError::NotBlindjoin(e.to_string());
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).map_err(not_ours)?;
    let len = u16::from_le_bytes(len) as usize;
    if len > MAX_ID_LEN {
        return Err(GreetError::NotBlindjoin(format!(
            "party id of {len} bytes is too long"
        )));
    }
    let mut id = vec![0u8; len];
    stream.read_exact(&mut id).map_err(not_ours)?;
    String::from_utf8(id).map_err(|_| GreetError::NotBlindjoin("party id is not UTF-8".to_string()))
}

/// The other side's greeting.
pub(crate) struct Greeting {
    pub(crate) their_id: String,
    pub(crate) they_expect: String,
    pub(crate) tls: bool,
}

/// Reads the other side's greeting.
pub(crate) fn read_greeting(stream: &mut impl Read) -> Result<Greeting, GreetError> {
    let mut magic = [0u8; 8];
    stream
        .read_exact(&mut magic)
        .map_err(|e| GreetError::NotBlindjoin(e.to_string()))?;
    let tls = match &magic {
        m if m == MAGIC => false,
        m if m == MAGIC_TLS => true,
        m if OLD_MAGICS.contains(&m) => {
            return Err(GreetError::Fatal(LinkError::WrongPeer(
                "the peer runs an older blindjoin release (an earlier link version: without \
                 heartbeats or frame checksums); install the same release on both sides"
                    .to_string(),
            )));
        }
        // baidu_std's magic: a SecretFlow party (yacl's link over brpc) dialled us.
        m if m.starts_with(&crate::secretflow::frame::MAGIC) => {
            return Err(GreetError::Fatal(LinkError::WrongPeer(
                "the peer speaks SecretFlow's link (brpc baidu_std), not blindjoin's: it is a \
                 SecretFlow party; to run against it set \"blindjoin\": {\"peer_wire\": \
                 \"secretflow\"} in this party's config (docs/config.md, \"Running against \
                 SecretFlow\")"
                    .to_string(),
            )));
        }
        _ => return Err(GreetError::NotBlindjoin("wrong greeting bytes".to_string())),
    };
    Ok(Greeting {
        their_id: read_id(stream)?,
        they_expect: read_id(stream)?,
        tls,
    })
}

fn check_ids(theirs: Greeting, opts: &TcpOptions) -> Result<(), GreetError> {
    let Greeting {
        their_id,
        they_expect,
        tls,
    } = theirs;
    if tls != opts.tls.is_some() {
        let on_off = |b: bool| if b { "on" } else { "off" };
        return Err(GreetError::Fatal(LinkError::WrongPeer(format!(
            "this party has TLS {} but peer {their_id:?} has it {}; set link_config.enable_ssl (or the --tls-* flags) the same on both sides",
            on_off(opts.tls.is_some()),
            on_off(tls)
        ))));
    }
    if their_id == opts.peer_id && they_expect == opts.self_id {
        return Ok(());
    }
    Err(GreetError::Fatal(LinkError::WrongPeer(format!(
        "this party is {:?} and expects peer {:?}, but the connected party is {:?} and expects peer {:?}; \
         make link_config.parties and self_link_party agree on both sides",
        opts.self_id, opts.peer_id, their_id, they_expect
    ))))
}

fn greet(stream: TcpStream, opts: &TcpOptions, speak_first: bool) -> Result<TcpStream, GreetError> {
    let fatal = |e| GreetError::Fatal(io(opts, e));
    let send = |s: &mut TcpStream| {
        s.write_all(&greeting(opts))
            .map_err(|e| GreetError::NotBlindjoin(e.to_string()))
    };
    let mut timed = Timed {
        stream,
        deadline: Instant::now() + GREETING_TIMEOUT,
    };
    if speak_first {
        send(&mut timed.stream)?;
    }
    let theirs = read_greeting(&mut timed)?;
    let mut stream = timed.stream;
    if !speak_first {
        send(&mut stream)?;
    }
    check_ids(theirs, opts)?;
    stream.set_read_timeout(None).map_err(fatal)?;
    Ok(stream)
}

/// The socket during a greeting: every read waits only for what is left of the greeting's
/// time, so a peer that trickles bytes cannot stretch a greeting past [`GREETING_TIMEOUT`].
struct Timed {
    stream: TcpStream,
    deadline: Instant,
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

#[cfg(test)]
pub(crate) fn greet_as_listener(
    stream: TcpStream,
    opts: &TcpOptions,
) -> Result<TcpStream, GreetError> {
    greet_as_listener_among(stream, std::slice::from_ref(opts)).map(|(_, s)| s)
}

/// The listener's greeting when any of `candidates` (differing in the peer id) may connect:
/// reads the connector's greeting, answers as the candidate it names (the first one if it names
/// none, whose check then fails with both ids), and returns that candidate's index.
pub(crate) fn greet_as_listener_among(
    stream: TcpStream,
    candidates: &[TcpOptions],
) -> Result<(usize, TcpStream), GreetError> {
    let mut timed = Timed {
        stream,
        deadline: Instant::now() + GREETING_TIMEOUT,
    };
    let theirs = read_greeting(&mut timed)?;
    let i = candidates
        .iter()
        .position(|c| c.peer_id == theirs.their_id)
        .unwrap_or(0);
    let opts = candidates
        .get(i)
        .ok_or_else(|| GreetError::NotBlindjoin("no peer expected".to_string()))?;
    let mut stream = timed.stream;
    stream
        .write_all(&greeting(opts))
        .map_err(|e| GreetError::NotBlindjoin(e.to_string()))?;
    check_ids(theirs, opts)?;
    stream
        .set_read_timeout(None)
        .map_err(|e| GreetError::Fatal(io(opts, e)))?;
    Ok((i, stream))
}

/// A serving listener's greeting (`blindjoin serve`): any client whose greeting expects this
/// party (`template.self_id`) is answered as the peer it names; its id and the greeted stream.
/// A client expecting another id is answered with ours (so it reports the mismatch too) and
/// refused.
pub(crate) fn greet_any_client(
    stream: TcpStream,
    template: &TcpOptions,
) -> Result<(String, TcpStream), GreetError> {
    let mut timed = Timed {
        stream,
        deadline: Instant::now() + GREETING_TIMEOUT,
    };
    let theirs = read_greeting(&mut timed)?;
    let mut opts = template.clone();
    opts.peer_id = theirs.their_id.clone();
    let mut stream = timed.stream;
    stream
        .write_all(&greeting(&opts))
        .map_err(|e| GreetError::NotBlindjoin(e.to_string()))?;
    if theirs.their_id.is_empty() || theirs.their_id == template.self_id {
        return Err(GreetError::Fatal(LinkError::WrongPeer(format!(
            "a client greeted with the id {:?}; each client needs an id of its own",
            theirs.their_id
        ))));
    }
    let id = theirs.their_id.clone();
    check_ids(theirs, &opts)?;
    stream
        .set_read_timeout(None)
        .map_err(|e| GreetError::Fatal(io(&opts, e)))?;
    Ok((id, stream))
}

pub(crate) fn greet_as_connector(
    stream: TcpStream,
    opts: &TcpOptions,
) -> Result<TcpStream, GreetError> {
    greet(stream, opts, true)
}
