//! One session: what every kind of run does around its protocol, in one place.
//!
//! - **Connect while working.** Connecting starts on a thread of its own as the run starts, so
//!   reading the input (or generating a cache) and waiting for the peer overlap;
//!   [`Session::link`] waits for the connection the first time the run needs it.
//! - **Abort policy.** A run that fails tells every party it is connected to why, so they stop
//!   at once naming the cause: with the cancel's reason when the run was cancelled, else with
//!   the error. A run that failed before it needed its link still waits [`ABORT_GRACE`] for the
//!   connection to tell the peer. A link that itself failed is not written to again (the peer
//!   cannot hear); the other links of a mesh are told.
//! - **Cancel → stopped.** A run that fails after its [`Cancel`] fired failed *because* of it,
//!   whatever error surfaced first: it reports [`LinkError::Cancelled`] ([`crate::Fault::Stopped`]).
//! - **Timeouts.** The connection is awaited for the link's connect timeout plus a margin, then
//!   reported as [`LinkError::ConnectTimeout`] naming the peers and our address.
//!
//! Generic over what a run connects to ([`Links`]): one [`TcpLink`], or a mesh of them.

use crate::error::DataError;
use blindjoin_link::{Cancel, Link, LinkError, TcpLink, TcpOptions};
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// How long a party that failed before using its links keeps waiting for them, to tell the
/// others why.
pub(crate) const ABORT_GRACE: Duration = Duration::from_secs(5);

/// How much longer than the link's own connect timeout the session waits for the connect
/// thread (it reports its own timeout first; this only guards a thread that never returns).
const CONNECT_MARGIN: Duration = Duration::from_secs(5);

/// What a run is connected to: one link, or a mesh of links to several parties.
pub(crate) trait Links: Send + 'static {
    /// Tells every connected party why this run stops; `link_failed` says the error came from a
    /// link, which is then not written to again (a mesh still tells its other parties).
    fn abort_all(&mut self, why: &str, link_failed: bool);
}

impl Links for TcpLink {
    fn abort_all(&mut self, why: &str, link_failed: bool) {
        if !link_failed {
            self.abort(why);
        }
    }
}

/// A mesh: the links to the other parties (`None` for ourselves). A failed link's abort is a
/// no-op write on a closed socket; the point is to tell the parties still connected.
impl<const N: usize> Links for [Option<TcpLink>; N] {
    fn abort_all(&mut self, why: &str, _link_failed: bool) {
        for l in self.iter_mut().flatten() {
            l.abort(why);
        }
    }
}

impl Links for Vec<Option<TcpLink>> {
    fn abort_all(&mut self, why: &str, _link_failed: bool) {
        for l in self.iter_mut().flatten() {
            l.abort(why);
        }
    }
}

/// An error a session can sort: whether a link failed (so it is not written to again).
pub(crate) trait SessionError:
    From<LinkError> + From<DataError> + std::fmt::Display
{
    /// Whether the error is the link's own (broken, timed out, aborted by the peer).
    fn is_link_failure(&self) -> bool;
}

impl SessionError for DataError {
    fn is_link_failure(&self) -> bool {
        matches!(
            self,
            DataError::Link(_) | DataError::Protocol(blindjoin_protocols::ProtocolError::Link(_))
        )
    }
}

/// What the connect thread runs: brings the links up (and may check them).
type Establish<L> = Box<dyn FnOnce(&Cancel) -> Result<L, DataError> + Send>;

/// A connection still coming: its thread's answer, who we wait for, our address, how long.
struct Pending<L> {
    rx: Receiver<Result<L, DataError>>,
    peers: String,
    addr: String,
    wait: Duration,
}

/// How a session connects: a function run on the connect thread, what it waits for (for a
/// timeout's message), and how long.
pub(crate) struct Connect<L> {
    establish: Establish<L>,
    /// Who we wait for (a party id, or several joined).
    peers: String,
    /// Where we are reachable, for the timeout's message.
    addr: String,
    wait: Duration,
}

impl Connect<TcpLink> {
    /// One TCP link with these options.
    pub(crate) fn tcp(opts: TcpOptions) -> Connect<TcpLink> {
        Connect {
            peers: opts.peer_id.clone(),
            addr: opts.peer_addr.clone(),
            wait: opts.connect_timeout + CONNECT_MARGIN,
            establish: Box::new(move |cancel| {
                TcpLink::establish_with_cancel(&opts, cancel).map_err(DataError::from)
            }),
        }
    }
}

impl<L: Links> Connect<L> {
    /// Any set of links: `establish` brings them up (and may check them: a greeting, a
    /// handshake); `peers` and `addr` name a timeout.
    pub(crate) fn with(
        peers: String,
        addr: String,
        connect_timeout: Duration,
        establish: impl FnOnce(&Cancel) -> Result<L, DataError> + Send + 'static,
    ) -> Connect<L> {
        Connect {
            establish: Box::new(establish),
            peers,
            addr,
            wait: connect_timeout + CONNECT_MARGIN,
        }
    }
}

/// A run's links while it runs: connecting, connected, or none (a run alone).
pub(crate) struct Session<L> {
    pending: Option<Pending<L>>,
    links: Option<L>,
    cancel: Cancel,
}

impl<L: Links> Session<L> {
    /// The links, waiting for the connection the first time.
    ///
    /// # Errors
    /// The connection failed or did not come in time; a run that connects to no one.
    pub(crate) fn link(&mut self) -> Result<&mut L, DataError> {
        if let Some(Pending {
            rx,
            peers,
            addr,
            wait,
        }) = self.pending.take()
        {
            let links = match rx.recv_timeout(wait) {
                Ok(r) => r?,
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    return Err(DataError::Link(LinkError::ConnectTimeout {
                        peer: peers,
                        addr,
                        waited: wait,
                        last: "the connect attempt did not finish".into(),
                    }));
                }
            };
            self.links = Some(links);
        }
        self.links.as_mut().ok_or(DataError::Protocol(
            blindjoin_protocols::ProtocolError::Unreachable("a run alone asked for a link"),
        ))
    }

    /// Takes the links out of the session, for a run that goes on using them after its
    /// session's setup (the partitions' coordinator). A failure after this is not told to the
    /// peer by the session.
    ///
    /// # Errors
    /// As [`Session::link`].
    pub(crate) fn take_link(&mut self) -> Result<L, DataError> {
        self.link()?;
        self.links.take().ok_or(DataError::Protocol(
            blindjoin_protocols::ProtocolError::Unreachable("a run alone asked for a link"),
        ))
    }

    /// Closes the links once the protocol is done and before any output is written, so a peer
    /// that fails at the end (killed, or refusing our close) leaves no result behind. A closed
    /// session has no links: its later failures are not told to anyone.
    ///
    /// # Errors
    /// The close failed (the peer did not finish the session).
    pub(crate) fn close(&mut self) -> Result<(), DataError>
    where
        L: blindjoin_link::Link,
    {
        if let Some(mut l) = self.links.take() {
            l.close()?;
        }
        Ok(())
    }

    /// The links if they are up, without waiting.
    pub(crate) fn connected(&mut self) -> Option<&mut L> {
        self.links.as_mut()
    }

    /// The links once connected, unless the run was cancelled meanwhile (while it read its
    /// input): the peer then hears of the cancel before any protocol message.
    ///
    /// # Errors
    /// As [`Session::link`]; [`LinkError::Cancelled`].
    pub(crate) fn ready(&mut self) -> Result<&mut L, DataError> {
        self.link()?;
        if self.cancel.is_cancelled() {
            return Err(DataError::Link(LinkError::Cancelled {
                reason: self.cancel.reason(),
            }));
        }
        self.link()
    }

    /// On failure: wait briefly for a connection still coming, then tell the others why.
    fn abort(&mut self, why: &str, link_failed: bool) {
        if self.links.is_none()
            && let Some(p) = self.pending.take()
            && let Ok(Ok(l)) = p.rx.recv_timeout(ABORT_GRACE)
        {
            self.links = Some(l);
        }
        if let Some(l) = self.links.as_mut() {
            l.abort_all(why, link_failed);
        }
    }
}

/// Runs `body` in a session: starts `connect` (if the run talks to anyone) on its own thread,
/// runs `body` meanwhile, and applies the abort and cancel policy of the module doc to its
/// result. `path` names the run's file if the connect thread cannot start.
///
/// # Errors
/// `body`'s error, or [`LinkError::Cancelled`] for a run cancelled before it failed.
pub(crate) fn run<L: Links, T, E: SessionError>(
    connect: Option<Connect<L>>,
    cancel: &Cancel,
    path: &Path,
    body: impl FnOnce(&mut Session<L>) -> Result<T, E>,
) -> Result<T, E> {
    let mut session = Session {
        pending: None,
        links: None,
        cancel: cancel.clone(),
    };
    if let Some(c) = connect {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread_cancel = cancel.clone();
        let establish = c.establish;
        std::thread::Builder::new()
            .name("connect".into())
            .spawn(move || {
                let _ = tx.send(establish(&thread_cancel));
            })
            .map_err(|source| DataError::Io {
                path: path.to_path_buf(),
                action: "starting the connect thread",
                source,
            })?;
        session.pending = Some(Pending {
            rx,
            peers: c.peers,
            addr: c.addr,
            wait: c.wait,
        });
    }
    match body(&mut session) {
        Ok(t) => Ok(t),
        Err(_) if cancel.is_cancelled() => {
            // Our own reads were shut down: whatever surfaced, the reason is the cancel's.
            session.abort(&cancel.reason(), false);
            Err(E::from(LinkError::Cancelled {
                reason: cancel.reason(),
            }))
        }
        Err(e) => {
            session.abort(&e.to_string(), e.is_link_failure());
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A link set that counts the aborts it is asked for.
    #[derive(Clone)]
    struct Counting(Arc<AtomicUsize>, Arc<std::sync::Mutex<Vec<String>>>);

    impl Links for Counting {
        fn abort_all(&mut self, why: &str, link_failed: bool) {
            if !link_failed {
                self.0.fetch_add(1, Ordering::SeqCst);
                if let Ok(mut w) = self.1.lock() {
                    w.push(why.to_string());
                }
            }
        }
    }

    fn counting() -> Counting {
        Counting(Arc::default(), Arc::default())
    }

    fn connect_to(c: Counting, delay: Duration) -> Connect<Counting> {
        Connect::with(
            "peer".into(),
            "127.0.0.1:1".into(),
            Duration::from_secs(1),
            move |_| {
                std::thread::sleep(delay);
                Ok(c)
            },
        )
    }

    fn config_error() -> DataError {
        DataError::Config(crate::error::ConfigError::Invalid {
            field: "f".into(),
            message: "bad input".into(),
        })
    }

    #[test]
    fn a_failure_before_the_link_is_needed_still_tells_the_peer() {
        let c = counting();
        let r: Result<(), DataError> = run(
            Some(connect_to(c.clone(), Duration::from_millis(50))),
            &Cancel::new(),
            Path::new("in.csv"),
            |_| Err(config_error()),
        );
        assert!(matches!(r, Err(DataError::Config(_))));
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
        assert!(c.1.lock().unwrap()[0].contains("bad input"));
    }

    #[test]
    fn a_link_failure_is_not_written_back() {
        let c = counting();
        let r: Result<(), DataError> = run(
            Some(connect_to(c.clone(), Duration::ZERO)),
            &Cancel::new(),
            Path::new("in.csv"),
            |s| {
                s.link()?;
                Err(DataError::Link(LinkError::PeerClosed { peer: "p".into() }))
            },
        );
        assert!(matches!(r, Err(DataError::Link(_))));
        assert_eq!(c.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_cancelled_run_reports_the_cancel_and_tells_the_peer_its_reason() {
        let c = counting();
        let cancel = Cancel::new();
        let r: Result<(), DataError> = run(
            Some(connect_to(c.clone(), Duration::ZERO)),
            &cancel,
            Path::new("in.csv"),
            |s| {
                s.link()?;
                cancel.cancel("Ctrl-C");
                Err(DataError::Link(LinkError::PeerClosed { peer: "p".into() }))
            },
        );
        match r {
            Err(DataError::Link(LinkError::Cancelled { reason })) => assert_eq!(reason, "Ctrl-C"),
            other => panic!("{other:?}"),
        }
        assert_eq!(c.1.lock().unwrap().as_slice(), ["Ctrl-C".to_string()]);
    }

    #[test]
    fn a_connection_that_never_comes_is_a_timeout_naming_the_peer() {
        let mut c = Connect::with(
            "bob".into(),
            "127.0.0.1:9".into(),
            Duration::ZERO,
            move |_| {
                std::thread::sleep(Duration::from_secs(30));
                Ok(counting())
            },
        );
        c.wait = Duration::from_millis(50);
        let r: Result<(), DataError> = run(Some(c), &Cancel::new(), Path::new("x"), |s| {
            s.link()?;
            Ok(())
        });
        match r {
            Err(DataError::Link(LinkError::ConnectTimeout { peer, .. })) => assert_eq!(peer, "bob"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_run_alone_has_no_link() {
        let r: Result<(), DataError> =
            run::<TcpLink, _, _>(None, &Cancel::new(), Path::new("x"), |s| {
                assert!(s.connected().is_none());
                assert!(s.link().is_err());
                Ok(())
            });
        assert!(r.is_ok());
    }
}
