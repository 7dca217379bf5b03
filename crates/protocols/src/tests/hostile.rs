//! Scripted hostile peers: for every protocol and both roles, the peer runs the real protocol but
//! its link truncates, pads, replaces or reorders one of its messages, or its hello lies about
//! its set size. The honest party must end — with a typed error, or for a change it cannot
//! detect (semi-honest protocols) with some result — within a bounded time, and never panic or
//! allocate what a size claims. The fuzz targets (`fuzz/`) explore the same surface at random.

use super::*;
use crate::rr22::Rr22Mode;
use blindjoin_crypto::item_digest;
use blindjoin_link::{LinkError, LinkStats, mem_pair_with_timeout};
use std::sync::mpsc;
use std::time::Duration;

/// Set sizes: small, since every message of every protocol is mangled in turn.
const HONEST_N: usize = 80;
const HOSTILE_N: usize = 60;

/// What the hostile link does to the message it picks.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mangle {
    /// Drops the last byte.
    Truncate,
    /// Appends 1000 bytes.
    Pad,
    /// Same length, random content.
    Replace,
    /// Sends the next message first (when the two are sent back to back).
    Swap,
    /// Only for the hello: announces this many items instead of the true count.
    Claim(u64),
}

/// A link that applies `mangle` to its `target`-th outgoing message (0 = the hello).
pub(crate) struct Hostile<L: Link> {
    inner: L,
    sent: usize,
    target: usize,
    mangle: Mangle,
    held: Option<Vec<u8>>,
    /// Bytes of the hello after its item count (its context).
    hello_tail: usize,
}

impl<L: Link> Hostile<L> {
    /// Wraps `inner`; `hello_tail` only matters for [`Mangle::Claim`].
    pub(crate) fn new(inner: L, target: usize, mangle: Mangle, hello_tail: usize) -> Self {
        Hostile {
            inner,
            sent: 0,
            target,
            mangle,
            held: None,
            hello_tail,
        }
    }

    /// Whether the target message was sent (and so changed).
    pub(crate) fn struck(&self) -> bool {
        self.sent > self.target
    }

    fn mangled(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut m = payload.to_vec();
        match self.mangle {
            Mangle::Truncate => {
                m.pop();
            }
            Mangle::Pad => m.extend(std::iter::repeat_n(0xa5, 1000)),
            Mangle::Replace => {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ self.target as u64;
                for b in &mut m {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
            }
            Mangle::Claim(n) => {
                if let Some(at) = m.len().checked_sub(self.hello_tail + 8) {
                    m[at..at + 8].copy_from_slice(&n.to_le_bytes());
                }
            }
            Mangle::Swap => {}
        }
        m
    }
}

impl<L: Link> Link for Hostile<L> {
    fn send(&mut self, payload: &[u8]) -> Result<(), LinkError> {
        let index = self.sent;
        self.sent += 1;
        if let Some(first) = self.held.take() {
            self.inner.send(payload)?;
            return self.inner.send(&first);
        }
        if index != self.target {
            return self.inner.send(payload);
        }
        match self.mangle {
            Mangle::Swap => {
                self.held = Some(payload.to_vec());
                Ok(())
            }
            _ => {
                let m = self.mangled(payload);
                self.inner.send(&m)
            }
        }
    }

    fn recv(&mut self) -> Result<Vec<u8>, LinkError> {
        // A held message whose successor is not sent before a reply is awaited goes out now:
        // only messages sent back to back are swapped, so a swap never just stalls the run.
        if let Some(held) = self.held.take() {
            self.inner.send(&held)?;
        }
        self.inner.recv()
    }

    fn abort(&mut self, reason: &str) {
        self.inner.abort(reason)
    }

    fn close(&mut self) -> Result<(), LinkError> {
        if let Some(last) = self.held.take() {
            self.inner.send(&last)?;
        }
        self.inner.close()
    }

    fn stats(&self) -> LinkStats {
        self.inner.stats()
    }

    fn peer_id(&self) -> &str {
        self.inner.peer_id()
    }
}

type Setup = ProtocolChoice;

fn hello(s: Setup, role: Role, n: usize) -> Hello {
    Hello::new(s, role, true, n as u64)
}

fn items(tag: &str, n: usize, shared: usize) -> Vec<ItemDigest> {
    (0..n)
        .map(|i| {
            if i < shared {
                item_digest(format!("shared/{i}").as_bytes())
            } else {
                item_digest(format!("{tag}/{i}").as_bytes())
            }
        })
        .collect()
}

/// One party's whole run on `link`.
fn party(
    link: &mut dyn Link,
    s: Setup,
    role: Role,
    xs: &[ItemDigest],
) -> Result<PsiOutput, ProtocolError> {
    let hs = handshake(link, hello(s, role, xs.len()))?;
    let out = run_psi(link, &hs, &PsiOptions::default(), xs, &NoProgress)?;
    link.close()?;
    Ok(out)
}

/// Runs an honest `honest_role` against a hostile peer; returns the honest party's result, or
/// `None` if it did not end within the bound (a hang). Panics propagate (a failed test).
fn against_hostile(
    s: Setup,
    honest_role: Role,
    target: usize,
    mangle: Mangle,
) -> Option<Result<PsiOutput, ProtocolError>> {
    let (la, lb) = mem_pair_with_timeout(Duration::from_secs(3));
    let hostile_role = honest_role.other();
    let (mine, theirs) = (
        items("honest", HONEST_N, 30),
        items("hostile", HOSTILE_N, 30),
    );
    let hostile = std::thread::spawn(move || {
        let mut link = Hostile::new(lb, target, mangle, HELLO_TAIL);
        let _ = party(&mut link, s, hostile_role, &theirs);
    });
    let (tx, rx) = mpsc::channel();
    let honest = std::thread::spawn(move || {
        let mut la = la;
        let _ = tx.send(party(&mut la, s, honest_role, &mine));
    });
    let got = rx.recv_timeout(Duration::from_secs(20)).ok();
    if got.is_some() {
        honest.join().expect("the honest party panicked");
        hostile
            .join()
            .expect("the hostile party's own code panicked");
    } else if honest.is_finished() {
        honest.join().expect("the honest party panicked");
    }
    got
}

/// How many messages `role` sends in an honest run (hello included).
fn messages_sent(s: Setup, role: Role) -> usize {
    let (mut la, mut lb) = mem_pair_with_timeout(Duration::from_secs(10));
    let other = role.other();
    let t = std::thread::spawn(move || {
        party(&mut lb, s, other, &items("b", HOSTILE_N, 30)).expect("honest run");
    });
    party(&mut la, s, role, &items("a", HONEST_N, 30)).expect("honest run");
    t.join().expect("honest peer");
    la.stats().messages_sent as usize
}

/// Bytes of a hello after its item count: the context digest.
const HELLO_TAIL: usize = 16;

fn setups() -> Vec<Setup> {
    let rr22 = |mode| ProtocolChoice::Rr22 { mode };
    // One curve stands for all: the protocol code above the curve is the same.
    vec![
        ProtocolChoice::Ecdh {
            curve: Curve::Curve25519,
        },
        rr22(Rr22Mode::Fast),
        rr22(Rr22Mode::LowComm),
        rr22(Rr22Mode::Malicious),
        ProtocolChoice::Kkrt,
    ]
}

fn check_every_message(mangle: Mangle, must_fail: bool) {
    for s in setups() {
        for honest_role in [Role::Receiver, Role::Sender] {
            let hostile_role = honest_role.other();
            let n = messages_sent(s, hostile_role);
            for target in 0..n {
                let got = against_hostile(s, honest_role, target, mangle);
                let what =
                    format!("{s:?}, honest {honest_role:?}, message {target}/{n} {mangle:?}");
                let Some(result) = got else {
                    panic!("{what}: the honest party did not end");
                };
                if must_fail {
                    assert!(result.is_err(), "{what}: accepted");
                }
            }
        }
    }
}

#[test]
fn truncated_messages_are_refused() {
    check_every_message(Mangle::Truncate, true);
}

#[test]
fn oversized_messages_are_refused() {
    check_every_message(Mangle::Pad, true);
}

#[test]
fn random_messages_end_the_run_without_a_panic() {
    check_every_message(Mangle::Replace, false);
}

#[test]
fn reordered_messages_end_the_run_without_a_panic() {
    check_every_message(Mangle::Swap, false);
}

/// A peer that claims fewer items than it brings is caught; one that claims more may be
/// indistinguishable from one padding its set with dummies (the KKRT receiver's claim only sizes
/// what it asks for), but a huge claim must neither hang nor make the honest party allocate it.
#[test]
fn peers_that_lie_about_their_set_size_are_bounded() {
    for claim in [0, 1, HOSTILE_N as u64 * 10, 1 << 40, u64::MAX] {
        for s in setups() {
            for honest_role in [Role::Receiver, Role::Sender] {
                let got = against_hostile(s, honest_role, 0, Mangle::Claim(claim));
                let what = format!("{s:?}, honest {honest_role:?}, claim {claim}");
                match got {
                    None => panic!("{what}: the honest party did not end"),
                    Some(Ok(_)) if claim < HOSTILE_N as u64 => {
                        panic!("{what}: a run on a smaller false set size succeeded")
                    }
                    Some(_) => {}
                }
            }
        }
    }
}
