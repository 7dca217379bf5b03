//! Three parties, three pairwise TCP links. Each party has one listening address (its entry in
//! `link_config.parties`), and a port takes one peer at a time, so the links go round a ring:
//! party `i` (its index in the party list) listens for party `i + 1 mod 3` and connects to party
//! `i + 2 mod 3`. Every party then listens exactly once and connects exactly once, both at the
//! same time (two threads), and any of the three may start first. Each link is an ordinary
//! [`TcpLink`]: the greeting checks both ids (so a party configured with another list fails
//! clearly), and timeouts, TLS and heartbeats are per link as for two parties.

use crate::budget::Credit;
use crate::{Cancel, LinkError, TcpLink, TcpOptions, TlsConfig};
use std::sync::Arc;

/// One of the three parties: its id and its `HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartyAddr {
    /// The party id.
    pub id: String,
    /// Where it listens.
    pub addr: String,
}

/// Whether party `me` listens (rather than connects) on its link to party `peer` (indices into
/// the three-party list): the ring rule of this module.
pub fn three_party_listens(me: usize, peer: usize) -> bool {
    (me + 1) % 3 == peer
}

/// Sets up our two links. `base` gives the timeouts and the link shape (its ids, addresses and
/// TLS are replaced per link); `tls_server` is used where we listen and `tls_client` where we
/// connect. Returns the links indexed by the peer's position in `parties` (`None` at `me`).
///
/// # Errors
/// Not three distinct parties, `me` out of range, or the first failure of either link (a port
/// in use, no peer before the deadline, a wrong peer, TLS); the other link is dropped.
pub fn establish_three(
    parties: &[PartyAddr],
    me: usize,
    base: &TcpOptions,
    tls_server: Option<TlsConfig>,
    tls_client: Option<TlsConfig>,
    cancel: &Cancel,
) -> Result<[Option<TcpLink>; 3], LinkError> {
    if parties.len() != 3 || me >= 3 {
        return Err(LinkError::WrongPeer(format!(
            "three-party links need exactly three parties and this party among them; got {} \
             parties",
            parties.len()
        )));
    }
    let ids = |i: usize| &parties[i].id;
    if ids(0) == ids(1) || ids(0) == ids(2) || ids(1) == ids(2) {
        return Err(LinkError::WrongPeer(
            "two of the three parties have the same id; give each its own id in \
             link_config.parties"
                .into(),
        ));
    }
    let opts_for = |peer: usize| {
        let listen = three_party_listens(me, peer);
        let tls = if listen {
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
    let (listen_to, dial_to) = ((me + 1) % 3, (me + 2) % 3);
    let (dial_opts, listen_opts) = (opts_for(dial_to), opts_for(listen_to));
    // One credit for both links: what we send on either lets both readers hold more, so a ring
    // of parties each sending before reading cannot deadlock (see `crate::budget`).
    let credit = Credit::new();
    let (dialed, listened) = std::thread::scope(|s| {
        let dial_credit = Arc::clone(&credit);
        let dial = s.spawn(|| TcpLink::establish_crediting(&dial_opts, false, cancel, dial_credit));
        let listened = TcpLink::establish_crediting(&listen_opts, true, cancel, credit);
        let dialed = dial.join().unwrap_or_else(|_| {
            Err(LinkError::WrongPeer(
                "internal: the connect thread panicked".into(),
            ))
        });
        (dialed, listened)
    });
    let mut out: [Option<TcpLink>; 3] = [None, None, None];
    out[dial_to] = Some(dialed?);
    out[listen_to] = Some(listened?);
    Ok(out)
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

    #[test]
    fn ring_rule_gives_each_party_one_listen_and_one_connect() {
        for me in 0..3 {
            let listens: Vec<bool> = (0..3)
                .filter(|&p| p != me)
                .map(|p| three_party_listens(me, p))
                .collect();
            assert_eq!(listens.iter().filter(|&&l| l).count(), 1);
            for p in (0..3).filter(|&p| p != me) {
                assert_ne!(three_party_listens(me, p), three_party_listens(p, me));
            }
        }
    }

    #[test]
    fn three_parties_connect_in_any_start_order_and_talk() {
        let parties: Vec<PartyAddr> = ["alice", "bob", "carol"]
            .iter()
            .map(|id| PartyAddr {
                id: id.to_string(),
                addr: format!("127.0.0.1:{}", free_port()),
            })
            .collect();
        let base = TcpOptions {
            self_id: String::new(),
            self_addr: String::new(),
            peer_id: String::new(),
            peer_addr: String::new(),
            connect_timeout: Duration::from_secs(10),
            recv_timeout: Duration::from_secs(10),
            silence_timeout: Duration::from_secs(10),
            tls: None,
            shape: None,
        };
        let handles: Vec<_> = [2usize, 0, 1]
            .into_iter()
            .map(|me| {
                let (parties, base) = (parties.clone(), base.clone());
                std::thread::sleep(Duration::from_millis(100));
                std::thread::spawn(move || {
                    let mut links =
                        establish_three(&parties, me, &base, None, None, &Cancel::new()).unwrap();
                    for (p, l) in links.iter_mut().enumerate() {
                        if let Some(l) = l {
                            assert_eq!(l.peer_id(), parties[p].id);
                            l.send(format!("{me}->{p}").as_bytes()).unwrap();
                        }
                    }
                    for (p, l) in links.iter_mut().enumerate() {
                        if let Some(l) = l {
                            assert_eq!(l.recv().unwrap(), format!("{p}->{me}").into_bytes());
                            l.close().unwrap();
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }
}
