//! n parties (n ≥ 2), a link between every two: the full mesh the n-party PSI protocols run on.
//! Each party has one listening address (its entry in `link_config.parties`). Party `i` (its
//! index in the list) listens for every party after it and connects to every party before it;
//! its one listener takes all of its incoming peers, each recognised by the id in its greeting
//! ([`crate::greet`]), so the peers may connect in any order and any party may start first. Each
//! link is an ordinary [`TcpLink`] (timeouts, TLS and heartbeats per link, as for two parties).
//! The three-party runs keep their ring ([`crate::establish_three`]).

use crate::budget::Credit;
use crate::greet::accept_peers;
use crate::tcp::bind;
use crate::tls::TlsContext;
use crate::{Cancel, LinkError, PartyAddr, TcpLink, TcpOptions, TlsConfig};
use std::sync::Arc;
use std::time::Instant;

/// Whether party `me` listens (rather than connects) on its link to party `peer` (indices into
/// the party list): the earlier party listens.
pub fn n_party_listens(me: usize, peer: usize) -> bool {
    me < peer
}

/// Sets up our links to every other party. `base` gives the timeouts and the link shape (its
/// ids, addresses and TLS are replaced per link); `tls_server` is used where we listen and
/// `tls_client` where we connect. Returns the links indexed by the peer's position in
/// `parties` (`None` at `me`).
///
/// # Errors
/// Fewer than two parties, two with one id, `me` out of range, or the first failure of any link
/// (a port in use, a peer missing at the deadline, a wrong peer, TLS); the others are dropped.
pub fn establish_many(
    parties: &[PartyAddr],
    me: usize,
    base: &TcpOptions,
    tls_server: Option<TlsConfig>,
    tls_client: Option<TlsConfig>,
    cancel: &Cancel,
) -> Result<Vec<Option<TcpLink>>, LinkError> {
    let n = parties.len();
    if n < 2 || me >= n {
        return Err(LinkError::WrongPeer(format!(
            "n-party links need at least two parties and this party among them; got {n} parties"
        )));
    }
    for i in 0..n {
        if parties[i + 1..].iter().any(|p| p.id == parties[i].id) {
            return Err(LinkError::WrongPeer(format!(
                "two parties have the id {:?}; give each its own id in link_config.parties",
                parties[i].id
            )));
        }
    }
    let opts_for = |peer: usize| {
        let tls = if n_party_listens(me, peer) {
            tls_server.clone()
        } else {
            tls_client.clone()
        };
        TcpOptions {
            self_id: parties[me].id.clone(),
            self_addr: parties[me].addr.clone(),
            peer_id: parties[peer].id.clone(),
            peer_addr: parties[peer].addr.clone(),
            tls,
            ..base.clone()
        }
    };
    let listen: Vec<TcpOptions> = (me + 1..n).map(opts_for).collect();
    let dial: Vec<(usize, TcpOptions)> = (0..me).map(|p| (p, opts_for(p))).collect();
    // One credit for all links: what we send on any lets every reader hold more, so parties
    // each sending before reading cannot deadlock (see `crate::budget`).
    let credit = Credit::new();
    let mut out: Vec<Option<TcpLink>> = (0..n).map(|_| None).collect();
    let (dialed, listened) = std::thread::scope(|s| {
        let dials: Vec<_> = dial
            .iter()
            .map(|(p, o)| {
                let c = Arc::clone(&credit);
                (
                    *p,
                    s.spawn(move || TcpLink::establish_crediting(o, false, cancel, c)),
                )
            })
            .collect();
        let listened = accept_all(&listen, cancel, &credit);
        let dialed: Vec<(usize, Result<TcpLink, LinkError>)> = dials
            .into_iter()
            .map(|(p, h)| {
                let r = h.join().unwrap_or_else(|_| {
                    Err(LinkError::WrongPeer(
                        "internal: a connect thread panicked".into(),
                    ))
                });
                (p, r)
            })
            .collect();
        (dialed, listened)
    });
    for (i, link) in listened? {
        out[me + 1 + i] = Some(link);
    }
    for (p, link) in dialed {
        out[p] = Some(link?);
    }
    Ok(out)
}

/// Our listener's links: one per entry of `listen` (index into it, link).
fn accept_all(
    listen: &[TcpOptions],
    cancel: &Cancel,
    credit: &Arc<Credit>,
) -> Result<Vec<(usize, TcpLink)>, LinkError> {
    let Some(first) = listen.first() else {
        return Ok(Vec::new());
    };
    // Certificate problems are reported before any waiting for the peers.
    let mut tls: Vec<Option<TlsContext>> = listen
        .iter()
        .map(|o| {
            o.tls
                .as_ref()
                .map(|cfg| TlsContext::load(cfg, &o.peer_id, true))
                .transpose()
        })
        .collect::<Result<_, _>>()?;
    let deadline = Instant::now() + first.connect_timeout;
    let listener = bind(first)?;
    let streams = accept_peers(&listener, listen, deadline, cancel)?;
    drop(listener);
    streams
        .into_iter()
        .map(|(i, stream)| {
            let ctx = tls.get_mut(i).and_then(Option::take);
            TcpLink::from_greeted(stream, &listen[i], ctx, cancel, Arc::clone(credit))
                .map(|l| (i, l))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Link;
    use std::time::Duration;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn base() -> TcpOptions {
        TcpOptions {
            self_id: String::new(),
            self_addr: String::new(),
            peer_id: String::new(),
            peer_addr: String::new(),
            connect_timeout: Duration::from_secs(20),
            recv_timeout: Duration::from_secs(20),
            silence_timeout: Duration::from_secs(20),
            tls: None,
            shape: None,
        }
    }

    #[test]
    fn five_parties_connect_in_any_start_order_and_talk() {
        let parties: Vec<PartyAddr> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|id| PartyAddr {
                id: id.to_string(),
                addr: format!("127.0.0.1:{}", free_port()),
            })
            .collect();
        let handles: Vec<_> = [3usize, 0, 4, 1, 2]
            .into_iter()
            .map(|me| {
                let parties = parties.clone();
                std::thread::sleep(Duration::from_millis(50));
                std::thread::spawn(move || {
                    let mut links =
                        establish_many(&parties, me, &base(), None, None, &Cancel::new()).unwrap();
                    assert!(links[me].is_none());
                    for (p, l) in links.iter_mut().enumerate() {
                        if let Some(l) = l {
                            assert_eq!(l.peer_id(), parties[p].id);
                            l.send(format!("{me}->{p}").as_bytes()).unwrap();
                        }
                    }
                    for (p, l) in links.iter_mut().enumerate() {
                        if let Some(l) = l {
                            assert_eq!(l.recv().unwrap(), format!("{p}->{me}").into_bytes());
                        }
                    }
                    // Close in a global edge order: (min, max) ascending.
                    let mut order: Vec<usize> = (0..parties.len()).filter(|&p| p != me).collect();
                    order.sort_by_key(|&p| (p.min(me), p.max(me)));
                    for p in order {
                        links[p].as_mut().unwrap().close().unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn a_stranger_id_fails_clearly() {
        let parties: Vec<PartyAddr> = ["a", "b"]
            .iter()
            .map(|id| PartyAddr {
                id: id.to_string(),
                addr: format!("127.0.0.1:{}", free_port()),
            })
            .collect();
        let mut wrong = parties.clone();
        wrong[1].id = "z".into();
        let mut b = base();
        b.connect_timeout = Duration::from_secs(5);
        let b2 = b.clone();
        let p = parties.clone();
        let t = std::thread::spawn(move || establish_many(&p, 0, &b2, None, None, &Cancel::new()));
        let theirs = establish_many(&wrong, 1, &b, None, None, &Cancel::new());
        let ours = t.join().unwrap();
        assert!(
            matches!(ours, Err(LinkError::WrongPeer(_))),
            "{:?}",
            ours.err()
        );
        assert!(theirs.is_err());
    }

    #[test]
    fn duplicate_ids_and_bad_indices_are_refused() {
        let p = |id: &str| PartyAddr {
            id: id.into(),
            addr: "127.0.0.1:1".into(),
        };
        let c = Cancel::new();
        assert!(establish_many(&[p("a"), p("a")], 0, &base(), None, None, &c).is_err());
        assert!(establish_many(&[p("a")], 0, &base(), None, None, &c).is_err());
        assert!(establish_many(&[p("a"), p("b")], 2, &base(), None, None, &c).is_err());
    }
}
