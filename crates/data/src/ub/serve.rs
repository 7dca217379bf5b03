//! `blindjoin serve` for unbalanced PSI: the server's cache and key loaded once, each session
//! one client's online phase ([`crate::serving`] runs the sessions). A client is an unchanged
//! `blindjoin run` with its `MODE_ONLINE` client config naming this server's address.
//!
//! What is shared: the cache's header (the online phase evaluates the client's points under the
//! key; the cache itself went to the clients offline) and the key, read once, so memory is the
//! process plus a fixed amount per session (the link's bounded inbox and one batch of points).
//! What each session has: its own link, its TLS identity check (the client's certificate must
//! name the id it greets with), and its charge to the key's query budget
//! (`blindjoin.max_query_items`, the same count file as `blindjoin run`, locked per charge, so
//! concurrent sessions cannot overspend it).

use super::{UbError, UbMode, UbRole, UbSpec, budget, cache, key};
use crate::error::{ConfigError, DataError};
use crate::serving::{Answer, Answered, ServeOptions, ServeSummary, serve};
use blindjoin_crypto::oprf::OprfScalar;
use blindjoin_link::{Cancel, Link, TcpLink, TcpOptions};
use blindjoin_protocols::NoProgress;
use blindjoin_protocols::ub_oprf::{
    CacheMeta, OnlineOptions, online_server_hello, online_server_serve,
};

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
    let served = prepare(spec)?;
    let what = format!("unbalanced PSI (a cache of {} keys)", served.meta.count);
    Ok(serve(&served.template, &what, &served, so, stop, log)?)
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
    super::run::check_curve(spec, &file.meta)?;
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

impl Answer for Served {
    /// Charges the client's announced count to the key, then evaluates its points.
    fn answer(&self, _client: &str, link: &mut TcpLink) -> Result<Answered, String> {
        let fail = |link: &mut TcpLink, e: UbError| {
            let why = e.to_string();
            link.abort(&why);
            why
        };
        let n =
            online_server_hello(link, &self.meta, self.opts).map_err(|e| fail(link, e.into()))?;
        budget::charge(
            self.spec.secret_key_path.as_deref(),
            &self.key_check,
            self.spec.max_query_items,
            n,
        )
        .map_err(|e| fail(link, e))?;
        online_server_serve(link, &self.key, &self.meta, self.opts, n, &NoProgress)
            .map_err(|e| fail(link, e.into()))?;
        Ok(Answered { items: n })
    }
}
