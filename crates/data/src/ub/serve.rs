//! `blindjoin serve` for unbalanced PSI: one long-running server, its cache and key loaded once,
//! answering the online queries of many clients — one after another and at once, up to
//! `max_sessions` — each on its own link. A client is an unchanged `blindjoin run` with its
//! `MODE_ONLINE` client config naming this server's address (see [`blindjoin_link::ServeListener`]
//! for how it reaches a server that always listens).
//!
//! What is shared: the cache's header (the online phase evaluates the client's points under the
//! key; the cache itself went to the clients offline) and the key, read once, so memory is the
//! process plus a fixed amount per session (the link's bounded inbox and one batch of points).
//! What each session has: its own link, its TLS identity check (the client's certificate must
//! name the id it greets with), and its charge to the key's query budget
//! (`blindjoin.max_query_items`, the same count file as `blindjoin run`, locked per charge, so
//! concurrent sessions cannot overspend it).
//!
//! Stopping: when `stop` is cancelled (SIGTERM or Ctrl-C in the CLI) the listener closes at
//! once, so no new client is accepted; sessions in flight get `drain` to finish, and those
//! still running after it are aborted (their clients get a clear link error).

use super::{UbError, UbMode, UbRole, UbSpec, budget, cache, key};
use crate::error::{ConfigError, DataError};
use blindjoin_crypto::oprf::OprfScalar;
use blindjoin_link::{Cancel, Incoming, Link, ServeListener, TcpOptions};
use blindjoin_protocols::NoProgress;
use blindjoin_protocols::ub_oprf::{
    CacheMeta, OnlineOptions, online_server_hello, online_server_serve,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
    /// Stop after this many sessions (tests and benchmarks; `None`: until stopped).
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

/// What one session needs, shared by all.
struct Served {
    key: OprfScalar,
    key_check: [u8; 16],
    meta: CacheMeta,
    opts: OnlineOptions,
    spec: UbSpec,
    template: TcpOptions,
}

/// Serves `spec` (an unbalanced-PSI server in `MODE_ONLINE`) until `stop`, writing one line per
/// session to `log`.
///
/// # Errors
/// The config is not a serving one (named), the cache or key is unusable, or the address cannot
/// be bound. A failed session is logged and counted, never an error of the server.
pub fn serve_ub(
    spec: &UbSpec,
    so: &ServeOptions,
    stop: &Cancel,
    log: &(dyn Fn(&str) + Sync),
) -> Result<ServeSummary, UbError> {
    let served = Arc::new(prepare(spec)?);
    let listener = ServeListener::bind(&served.template)?;
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| served.template.self_addr.clone());
    log(&format!(
        "serving unbalanced PSI on {addr} as {:?}: cache of {} keys, up to {} sessions at once",
        served.template.self_id,
        served.meta.count,
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
    std::thread::scope(|scope| -> Result<(), UbError> {
        loop {
            if stop.is_cancelled() {
                break;
            }
            if so.max_total_sessions.is_some_and(|m| next >= m) {
                break;
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
            let (served, active, ok, failed, items, sessions) = (
                Arc::clone(&served),
                Arc::clone(&active),
                Arc::clone(&ok),
                Arc::clone(&failed),
                Arc::clone(&items),
                Arc::clone(&sessions),
            );
            scope.spawn(move || {
                let from = incoming.from();
                let t = Instant::now();
                let outcome = session(&served, incoming, &cancel);
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
                    Err((client, e)) => {
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

/// Checks that `spec` can serve and loads what the sessions share.
fn prepare(spec: &UbSpec) -> Result<Served, UbError> {
    let refuse = |field: &str, message: &str| {
        UbError::Data(DataError::Config(ConfigError::Invalid {
            field: field.into(),
            message: message.into(),
        }))
    };
    if spec.role != UbRole::Server || spec.mode != UbMode::Online {
        return Err(refuse(
            "ub_psi_config.mode",
            "blindjoin serve answers online queries: the config must be the server's \
             (role ROLE_SERVER) in MODE_ONLINE, with the cache made by MODE_OFFLINE or \
             MODE_OFFLINE_GEN_CACHE",
        ));
    }
    if spec.peer_wire.is_some() {
        return Err(refuse(
            "blindjoin.peer_wire",
            "blindjoin serve answers blindjoin clients; a SecretFlow client needs `blindjoin run`",
        ));
    }
    if spec.server_get_result || !spec.client_get_result || spec.threshold.is_some() {
        return Err(refuse(
            "ub_psi_config.server_get_result",
            "blindjoin serve answers clients that learn their own result (client_get_result \
             true, server_get_result false, no intersection_threshold); a server that learns \
             each result runs `blindjoin run` per client",
        ));
    }
    let Some(key_path) = spec.secret_key_path.as_deref() else {
        return Err(UbError::KeyFile {
            path: Default::default(),
            problem: "ub_psi_config.server_secret_key_path is required to serve (the key the \
                      cache was generated with)"
                .into(),
        });
    };
    let file = cache::open_server(&spec.cache_path)?;
    let key = key::load_or_create(key_path, spec.curve, false)?.0;
    let key_check = key.key_check_value()?;
    cache::check_key(&spec.cache_path, &file.meta, &key_check, key_path)?;
    if file.meta.curve != spec.curve {
        return Err(UbError::Cache {
            path: spec.cache_path.clone(),
            problem: format!(
                "the cache was generated on {}, this config asks for {}",
                file.meta.curve, spec.curve
            ),
            fix: "set blindjoin.curve to the cache's curve, or regenerate the cache",
        });
    }
    let template = spec.link.tcp_options().ok_or_else(|| {
        refuse(
            "link_config",
            "missing: the server listens at its own address in link_config.parties",
        )
    })?;
    Ok(Served {
        key,
        key_check,
        meta: file.meta.clone(),
        opts: OnlineOptions {
            client_get_result: true,
            server_get_result: false,
            threshold: None,
        },
        spec: spec.clone(),
        template,
    })
}

/// One answered session.
struct Answered {
    client: String,
    items: u64,
    sent: u64,
    received: u64,
}

/// Greets the client, charges its announced count to the key, evaluates, closes. A failure is
/// the client's id (once greeted) and what went wrong, for the log.
fn session(
    served: &Served,
    incoming: Incoming,
    cancel: &Cancel,
) -> Result<Answered, (Option<String>, String)> {
    let (client, mut link) = incoming
        .establish(&served.template, cancel)
        .map_err(|e| (None, e.to_string()))?;
    let named = |e: UbError| (Some(client.clone()), e.to_string());
    let n = match online_server_hello(&mut link, &served.meta, served.opts) {
        Ok(n) => n,
        Err(e) => {
            link.abort(&e.to_string());
            return Err(named(e.into()));
        }
    };
    if let Err(e) = budget::charge(
        served.spec.secret_key_path.as_deref(),
        &served.key_check,
        served.spec.max_query_items,
        n,
    ) {
        link.abort(&e.to_string());
        return Err(named(e));
    }
    if let Err(e) = online_server_serve(
        &mut link,
        &served.key,
        &served.meta,
        served.opts,
        n,
        &NoProgress,
    ) {
        link.abort(&e.to_string());
        return Err(named(e.into()));
    }
    let stats = link.stats();
    link.close().map_err(|e| named(e.into()))?;
    Ok(Answered {
        client,
        items: n,
        sent: stats.bytes_sent,
        received: stats.bytes_received,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
