//! The serving loop behind `blindjoin serve`: one long-running party at one address answering
//! many clients, one after another and at once (up to `max_sessions`), each session on its own
//! link. What a session does is the caller's ([`Answer`]): unbalanced PSI's online phase
//! (`crate::ub::serve`) or a labeled-PSI query (`crate::apsi::serve`).
//!
//! Stopping: when `stop` is cancelled (SIGTERM or Ctrl-C in the CLI) the listener closes at
//! once, so no new client is accepted; sessions in flight get `drain` to finish, and those
//! still running after it are aborted (their clients get a clear link error).

use blindjoin_link::{Cancel, Incoming, Link, ServeListener, TcpLink, TcpOptions};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What one session did, for its log line.
pub struct Answered {
    /// Items (keys) the client asked about.
    pub items: u64,
}

/// One session on a greeted link: `Ok` with what it did, or why it failed (the client has been
/// told: the session aborts the link with the reason).
pub trait Answer: Sync {
    /// Answers the client `client` on `link`.
    ///
    /// # Errors
    /// Why the session failed, for the log.
    fn answer(&self, client: &str, link: &mut TcpLink) -> Result<Answered, String>;
}

/// Sessions at once by default: one per core, at least 2.
pub fn default_max_sessions() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .max(2)
}

/// How long sessions in flight may run on after a stop, by default.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(30);

/// How a serving run behaves.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Sessions at once; a further client waits in the listen backlog until one ends.
    pub max_sessions: usize,
    /// How long sessions in flight may run on after `stop`.
    pub drain: Duration,
    /// Stop after this many sessions have ended (tests and benchmarks; port probes do not
    /// count; `None`: until stopped).
    pub max_total_sessions: Option<u64>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_sessions: default_max_sessions(),
            drain: DEFAULT_DRAIN,
            max_total_sessions: None,
        }
    }
}

/// What a serving run did, for its report.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ServeSummary {
    /// The address it listened on.
    pub listened_on: String,
    /// Sessions that ended with the client answered.
    pub sessions_ok: u64,
    /// Sessions that failed (a stranger, a refused query, a lost client, a stop).
    pub sessions_failed: u64,
    /// Client items evaluated over all sessions.
    pub items: u64,
    /// How long it served, in seconds.
    pub elapsed_s: f64,
}

/// Serves `answer` at `template.self_addr` until `stop` (or `so.max_total_sessions`), writing
/// one line per session to `log`; `what` says what is served, for the first line.
///
/// # Errors
/// The address cannot be bound or the listening socket fails. A failed session is logged and
/// counted, never an error of the server.
pub fn serve(
    template: &TcpOptions,
    what: &str,
    answer: &dyn Answer,
    so: &ServeOptions,
    stop: &Cancel,
    log: &(dyn Fn(&str) + Sync),
) -> Result<ServeSummary, blindjoin_link::LinkError> {
    let listener = ServeListener::bind(template)?;
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| template.self_addr.clone());
    log(&format!(
        "serving {what} on {addr} as {:?}, up to {} sessions at once",
        template.self_id,
        so.max_sessions.max(1)
    ));
    let start = Instant::now();
    let active = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let items = Arc::new(AtomicU64::new(0));
    // Each session's cancel, so a drain that runs out can abort them.
    let sessions: Arc<Mutex<Vec<(u64, Cancel)>>> = Arc::default();
    let mut next = 0u64;
    std::thread::scope(|scope| -> Result<(), blindjoin_link::LinkError> {
        loop {
            if stop.is_cancelled() {
                break;
            }
            // Sessions that ended count towards max_total_sessions; port probes do not.
            if let Some(m) = so.max_total_sessions {
                let ended = ok.load(Ordering::SeqCst) + failed.load(Ordering::SeqCst);
                if ended >= m {
                    break;
                }
                if ended + active.load(Ordering::SeqCst) as u64 >= m {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            }
            if active.load(Ordering::SeqCst) >= so.max_sessions.max(1) {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            let Some(incoming) = listener.accept(Duration::from_millis(100))? else {
                continue;
            };
            next += 1;
            let id = next;
            let cancel = Cancel::new();
            lock(&sessions).push((id, cancel.clone()));
            active.fetch_add(1, Ordering::SeqCst);
            let (active, ok, failed, items, sessions) = (
                Arc::clone(&active),
                Arc::clone(&ok),
                Arc::clone(&failed),
                Arc::clone(&items),
                Arc::clone(&sessions),
            );
            scope.spawn(move || {
                let from = incoming.from();
                let t = Instant::now();
                let outcome = session(template, answer, incoming, &cancel);
                let secs = t.elapsed().as_secs_f64();
                match outcome {
                    Ok(s) => {
                        ok.fetch_add(1, Ordering::SeqCst);
                        items.fetch_add(s.items, Ordering::SeqCst);
                        log(&format!(
                            "session {id} from {from}: client {:?}, {} items, {secs:.3} s, {} bytes \
                             sent, {} received",
                            s.client, s.items, s.sent, s.received
                        ));
                    }
                    // A port probe (connected and closed, nothing sent): not a client.
                    Err((_, Failure::Probe)) => {}
                    Err((client, Failure::Failed(e))) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        let who = client.map(|c| format!("client {c:?}")).unwrap_or_default();
                        log(&format!(
                            "session {id} from {from}: {who} failed after {secs:.3} s: {e}"
                        ));
                    }
                }
                lock(&sessions).retain(|(s, _)| *s != id);
                active.fetch_sub(1, Ordering::SeqCst);
            });
        }
        // No new clients: the port closes now, the sessions in flight drain.
        drop(listener);
        let in_flight = active.load(Ordering::SeqCst);
        if in_flight > 0 {
            log(&format!(
                "stopping: {in_flight} sessions in flight, {:.0} s to finish",
                so.drain.as_secs_f64()
            ));
        }
        let until = Instant::now() + so.drain;
        while active.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        for (_, c) in lock(&sessions).iter() {
            c.cancel("the server is stopping");
        }
        // A session blocked in a write wakes only when its connection is shut both ways.
        let until = Instant::now() + Duration::from_secs(1);
        while active.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        for (_, c) in lock(&sessions).iter() {
            c.sever();
        }
        Ok(())
    })?;
    let summary = ServeSummary {
        listened_on: addr,
        sessions_ok: ok.load(Ordering::SeqCst),
        sessions_failed: failed.load(Ordering::SeqCst),
        items: items.load(Ordering::SeqCst),
        elapsed_s: start.elapsed().as_secs_f64(),
    };
    log(&format!(
        "stopped: {} sessions answered, {} failed, {} client items",
        summary.sessions_ok, summary.sessions_failed, summary.items
    ));
    Ok(summary)
}

/// One session as the client sees it: greeted, answered, closed; its line's fields.
struct Done {
    client: String,
    items: u64,
    sent: u64,
    received: u64,
}

/// Why a session ended without an answer.
enum Failure {
    /// The connection closed before its first byte: a port probe, not a client.
    Probe,
    /// What went wrong, for the log.
    Failed(String),
}

/// Greets the client, answers it, closes. A failure comes with the client's id once greeted.
fn session(
    template: &TcpOptions,
    answer: &dyn Answer,
    incoming: Incoming,
    cancel: &Cancel,
) -> Result<Done, (Option<String>, Failure)> {
    let (client, mut link) = incoming.establish(template, cancel).map_err(|e| match e {
        blindjoin_link::LinkError::PeerClosed { .. } => (None, Failure::Probe),
        e => (None, Failure::Failed(e.to_string())),
    })?;
    let done = answer
        .answer(&client, &mut link)
        .map_err(|e| (Some(client.clone()), Failure::Failed(e)))?;
    let stats = link.stats();
    link.close()
        .map_err(|e| (Some(client.clone()), Failure::Failed(e.to_string())))?;
    Ok(Done {
        client,
        items: done.items,
        sent: stats.bytes_sent,
        received: stats.bytes_received,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
