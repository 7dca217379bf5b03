//! The listening side of a serving party (`blindjoin serve`): one address, many clients, one
//! link each. A client is an ordinary two-party link endpoint: whichever way its id sorts, it
//! reaches a party that always listens ([`crate::TcpLink::establish_with_cancel`] dials the
//! peer's address while it listens), so it needs no setting of its own.
//!
//! Each connection is greeted on the thread that will run its session
//! ([`Incoming::establish`]): a stranger that connects and sends nothing holds only its own
//! thread, for at most the greeting timeout, not the accept loop.

use crate::cancel::Cancel;
use crate::greet::{GreetError, greet_any_client};
use crate::tcp::{TcpOptions, bind};
use crate::tls::TlsContext;
use crate::{LinkError, TcpLink};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long [`ServeListener::accept`] sleeps between non-blocking accepts.
const ACCEPT_POLL: Duration = Duration::from_millis(5);

/// A bound serving address.
pub struct ServeListener {
    listener: TcpListener,
}

/// A connection not yet greeted.
pub struct Incoming {
    stream: TcpStream,
    from: SocketAddr,
}

impl ServeListener {
    /// Binds `template.self_addr` (non-blocking, so accepting can be interrupted).
    ///
    /// # Errors
    /// A bad address or a port in use ([`LinkError::Bind`]).
    pub fn bind(template: &TcpOptions) -> Result<ServeListener, LinkError> {
        Ok(ServeListener {
            listener: bind(template)?,
        })
    }

    /// The address bound (the port, when `self_addr` asked for port 0).
    ///
    /// # Errors
    /// The socket's address cannot be read.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Waits up to `wait` for a connection; `None` when none came, so the caller can look at
    /// its stop signal between waits.
    ///
    /// # Errors
    /// The listening socket failed.
    pub fn accept(&self, wait: Duration) -> Result<Option<Incoming>, LinkError> {
        let until = Instant::now() + wait;
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    stream
                        .set_nonblocking(false)
                        .map_err(|source| LinkError::Io {
                            peer: from.to_string(),
                            source,
                        })?;
                    return Ok(Some(Incoming { stream, from }));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // A connection reset before it was accepted: not the listener's failure.
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => {}
                Err(source) => {
                    return Err(LinkError::Io {
                        peer: "(listening)".into(),
                        source,
                    });
                }
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            std::thread::sleep(ACCEPT_POLL);
        }
    }
}

impl Incoming {
    /// Where the connection came from.
    pub fn from(&self) -> SocketAddr {
        self.from
    }

    /// Greets the client — any id that expects `template.self_id` — then, with
    /// `template.tls`, the TLS handshake as the server (the client's certificate must name the
    /// id it greeted with), then the link with `template`'s timeouts: the client's id and the
    /// link.
    ///
    /// # Errors
    /// [`LinkError::PeerClosed`] for a connection closed before its first byte (a port probe);
    /// not a blindjoin client, a client expecting another party or with TLS set otherwise
    /// ([`LinkError::WrongPeer`]), a refused certificate, or I/O.
    pub fn establish(
        self,
        template: &TcpOptions,
        cancel: &Cancel,
    ) -> Result<(String, TcpLink), LinkError> {
        // A connection closed before its first byte is a port probe (a health check, a
        // scanner): told apart so the server need not log it as a failed client.
        let _ = self
            .stream
            .set_read_timeout(Some(crate::greet::GREETING_TIMEOUT));
        if matches!(self.stream.peek(&mut [0u8; 1]), Ok(0)) {
            return Err(LinkError::PeerClosed {
                peer: self.from.to_string(),
            });
        }
        let (id, stream) = match greet_any_client(self.stream, template) {
            Ok(x) => x,
            Err(GreetError::Fatal(e)) => return Err(e),
            Err(GreetError::NotBlindjoin(why)) => {
                return Err(LinkError::WrongPeer(format!(
                    "{} is not a blindjoin client: {why}",
                    self.from
                )));
            }
        };
        let mut opts = template.clone();
        opts.peer_id = id.clone();
        let tls = match &opts.tls {
            Some(cfg) => Some(TlsContext::load(cfg, &id, true)?),
            None => None,
        };
        let link = TcpLink::from_greeted(stream, &opts, tls, cancel, crate::budget::Credit::new())?;
        Ok((id, link))
    }
}
