//! Cancelling a run from outside the thread that runs it (Ctrl-C in Python, a signal handler).
//!
//! The run thread is usually blocked in a socket read (in the link's reader thread, which it waits
//! on) or in the connect loop. [`Cancel::cancel`] sets a flag the connect loops poll, and shuts
//! down the *read* half of every connection registered with [`Cancel::watch`]: the reader thread
//! sees end-of-stream, the blocked `recv` returns, and the run thread — still able to write —
//! sends the peer an abort frame with [`Cancel::reason`] before it drops the link. Writing the
//! abort from the cancelling thread instead could interleave with a frame the run thread is half
//! way through writing, so it is left to the run thread. [`Cancel::sever`] is the last resort for
//! a run thread that does not come back (blocked writing to a peer that stopped reading).

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A cancellation handle shared by the run and whoever may cancel it. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct Cancel {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    cancelled: AtomicBool,
    reason: Mutex<String>,
    sockets: Mutex<Vec<TcpStream>>,
}

impl Cancel {
    /// A handle that is not cancelled (and never will be unless [`Cancel::cancel`] is called).
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Cancels the run: records `reason` (sent to the peer in the abort frame), and wakes the
    /// run's blocked reads. Later calls keep the first reason.
    pub fn cancel(&self, reason: &str) {
        {
            let mut r = self
                .inner
                .reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !self.inner.cancelled.swap(true, Ordering::SeqCst) {
                *r = reason.to_string();
            }
        }
        self.each_socket(Shutdown::Read);
    }

    /// Shuts both directions of every registered connection, so even a run thread blocked in a
    /// write returns. The peer then sees the connection close instead of our abort reason.
    pub fn sever(&self) {
        self.each_socket(Shutdown::Both);
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// The reason given to [`Cancel::cancel`] (empty if not cancelled).
    pub fn reason(&self) -> String {
        self.inner
            .reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Registers a connection (a clone of the link's socket) to be woken on cancel. If the run
    /// was cancelled already, it is shut down at once; the lock orders this against `cancel`.
    pub fn watch(&self, socket: TcpStream) {
        let mut sockets = self
            .inner
            .sockets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.is_cancelled() {
            let _ = socket.shutdown(Shutdown::Read);
        }
        sockets.push(socket);
    }

    fn each_socket(&self, how: Shutdown) {
        let sockets = self
            .inner
            .sockets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for s in sockets.iter() {
            // Already closed sockets fail here; nothing to do about them.
            let _ = s.shutdown(how);
        }
    }
}
