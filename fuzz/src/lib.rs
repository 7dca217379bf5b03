//! Shared pieces of the fuzz targets: how a fuzz input is split into the peer's messages, the
//! hostile peer of the whole-protocol targets (two-party, unbalanced, three-party), and a
//! recording link for seed inputs.
//!
//! Every target plays the *peer*: the fuzz input is what arrives from the other party, and the
//! code under test is this party's, run honestly through the public API. The invariant checked
//! everywhere: no panic, no unbounded allocation, no hang — a bad input is a typed error.

use blindjoin_crypto::oprf::OprfScalar;
use blindjoin_crypto::{Curve, ItemDigest, item_digest};
use blindjoin_link::{Link, LinkError, LinkStats, MemLink, mem_pair};
use blindjoin_protocols::ecdh_3pc::{Seat, handshake_3pc, run_3pc};
use blindjoin_protocols::rr22::Rr22Mode;
use blindjoin_protocols::ub_oprf::{self, CacheMeta, OnlineOptions};
use blindjoin_protocols::{
    Hello, NoProgress, Protocol, ProtocolChoice, PsiOptions, PsiOutput, Reveal, Role, handshake,
    run_psi,
};
use std::sync::{Arc, Mutex};

/// Bytes of the length prefix in front of each message of a fuzz input.
pub const LEN_BYTES: usize = 3;

/// Splits `data` into messages, each `len: u24 LE | len bytes` (a length past the end takes
/// what is left). At most `max` messages.
pub fn messages(mut data: &[u8], max: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while !data.is_empty() && out.len() < max {
        let mut len_bytes = [0u8; 4];
        let k = data.len().min(LEN_BYTES);
        len_bytes[..k].copy_from_slice(&data[..k]);
        data = &data[k..];
        let len = (u32::from_le_bytes(len_bytes) as usize).min(data.len());
        let (msg, rest) = data.split_at(len);
        out.push(msg);
        data = rest;
    }
    out
}

/// The inverse of [`messages`].
pub fn join_messages<'a>(msgs: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        let len = u32::try_from(m.len()).unwrap_or(u32::MAX).min(0xff_ffff);
        out.extend_from_slice(&len.to_le_bytes()[..LEN_BYTES]);
        out.extend_from_slice(&m[..len as usize]);
    }
    out
}

/// Queues `msgs` as data messages from `peer`, then an abort, so that the party under test gets
/// every message and then a prompt [`LinkError::PeerAborted`] instead of waiting for a timeout.
/// `peer` must stay alive until the party under test is done (its sends would fail otherwise).
pub fn feed(peer: &mut MemLink, msgs: &[&[u8]]) {
    for m in msgs {
        // Nothing the fuzzer makes exceeds MAX_FRAME_LEN; if it did, the message is just lost.
        let _ = peer.send(m);
    }
    peer.abort("end of fuzz input");
}

/// The hellos the `hello` target checks hostile hellos against, for a party with `role`: ECDH
/// (Curve25519, broadcast, threshold 3), RR22 fast, KKRT (broadcast).
pub fn target_hellos(role: Role) -> [Hello; 3] {
    [
        Hello::new(
            ProtocolChoice::Ecdh {
                curve: Curve::Curve25519,
            },
            role,
            true,
            10,
        )
        .with_reveal(Reveal::UpTo(3)),
        Hello::new(
            ProtocolChoice::Rr22 {
                mode: Rr22Mode::Fast,
            },
            role,
            false,
            0,
        ),
        Hello::new(ProtocolChoice::Kkrt, role, true, 7).with_context([9; 16]),
    ]
}

/// Largest set a whole-protocol target lets either party have: keeps every run to milliseconds.
pub const MAX_ITEMS: usize = 16;

/// What a whole-protocol fuzz input's first bytes choose.
#[derive(Clone, Copy, Debug)]
pub struct PsiCase {
    /// The protocol under test.
    pub protocol: Protocol,
    /// ECDH's curve.
    pub curve: Option<Curve>,
    /// RR22's mode ("" for the others).
    pub variant: &'static str,
    /// The honest party's role.
    pub role: Role,
    /// `broadcast_result`.
    pub broadcast: bool,
    /// The honest party's item count.
    pub ours: usize,
    /// The item count the hostile peer announces.
    pub theirs: usize,
    /// What ECDH reveals (the shuffled modes); [`Reveal::Intersection`] for the others.
    pub reveal: Reveal,
}

/// The ECDH reveal modes a case picks from.
const REVEALS: [Reveal; 3] = [Reveal::Intersection, Reveal::Cardinality, Reveal::UpTo(3)];

/// Bytes of configuration in front of a whole-protocol fuzz input's messages.
pub const CASE_BYTES: usize = 3;

const CURVES: [Curve; 6] = [
    Curve::Curve25519,
    Curve::Ristretto255,
    Curve::Secp256k1,
    Curve::P256,
    Curve::Sm2,
    Curve::FourQ,
];

const RR22_MODES: [Rr22Mode; 3] = [Rr22Mode::Fast, Rr22Mode::LowComm, Rr22Mode::Malicious];

impl PsiCase {
    /// Reads the case from `head` (missing bytes are 0): byte 0 = role (bit 0), broadcast
    /// (bit 1), curve or RR22 mode (bits 2..); byte 1 = our item count; byte 2 = the peer's.
    pub fn from_bytes(protocol: Protocol, head: &[u8]) -> Self {
        let b = |i: usize| head.get(i).copied().unwrap_or(0);
        let sel = usize::from(b(0) >> 2);
        PsiCase {
            protocol,
            curve: (protocol == Protocol::Ecdh).then(|| CURVES[sel % CURVES.len()]),
            variant: if protocol == Protocol::Rr22 {
                RR22_MODES[sel % RR22_MODES.len()].variant()
            } else {
                ""
            },
            role: if b(0) & 1 == 0 {
                Role::Receiver
            } else {
                Role::Sender
            },
            broadcast: b(0) & 2 != 0,
            ours: usize::from(b(1)) % (MAX_ITEMS + 1),
            theirs: usize::from(b(2)) % (MAX_ITEMS + 1),
            reveal: if protocol == Protocol::Ecdh {
                REVEALS[sel / CURVES.len() % REVEALS.len()]
            } else {
                Reveal::Intersection
            },
        }
    }

    /// The first bytes of an input that [`PsiCase::from_bytes`] reads back as `self`.
    pub fn to_bytes(&self) -> [u8; CASE_BYTES] {
        let sel = match self.protocol {
            Protocol::Ecdh => {
                CURVES
                    .iter()
                    .position(|c| Some(*c) == self.curve)
                    .unwrap_or(0)
                    + CURVES.len() * REVEALS.iter().position(|r| *r == self.reveal).unwrap_or(0)
            }
            Protocol::Rr22 => RR22_MODES
                .iter()
                .position(|m| m.variant() == self.variant)
                .unwrap_or(0),
            _ => 0,
        };
        let role = u8::from(self.role == Role::Sender);
        let broadcast = u8::from(self.broadcast) << 1;
        [
            (sel as u8) << 2 | broadcast | role,
            self.ours as u8,
            self.theirs as u8,
        ]
    }

    /// The protocol with its curve or mode.
    pub fn choice(&self) -> ProtocolChoice {
        match self.protocol {
            Protocol::Ecdh => ProtocolChoice::Ecdh {
                curve: self.curve.unwrap_or(Curve::Curve25519),
            },
            Protocol::Rr22 => ProtocolChoice::Rr22 {
                mode: Rr22Mode::from_variant(self.variant).unwrap_or_default(),
            },
            _ => ProtocolChoice::Kkrt,
        }
    }

    /// The hello of the party with `role` and `n` items.
    pub fn hello(&self, role: Role, n: usize) -> Hello {
        Hello::new(self.choice(), role, self.broadcast, n as u64).with_reveal(self.reveal)
    }

    /// The other role.
    pub fn peer_role(&self) -> Role {
        self.role.other()
    }
}

/// `n` distinct digests; `salt` picks disjoint families.
pub fn items(salt: &str, n: usize) -> Vec<ItemDigest> {
    (0..n)
        .map(|i| item_digest(format!("{salt}/{i}").as_bytes()))
        .collect()
}

/// The whole-protocol target: the honest party (the case's role, [`PsiCase::ours`] items) runs
/// [`handshake`] and [`run_psi`] on an in-memory link; the peer sends a valid hello for the case
/// and then the fuzz input's messages, then aborts. Checks that a result, if any, is a sorted
/// list of distinct indices into our items.
pub fn run_hostile_peer(protocol: Protocol, data: &[u8]) {
    let (head, rest) = data.split_at(data.len().min(CASE_BYTES));
    let case = PsiCase::from_bytes(protocol, head);
    let ours = items("ours", case.ours);
    let (mut me, mut peer) = mem_pair();
    let peer_hello = case.hello(case.peer_role(), case.theirs);
    let mut msgs = vec![blindjoin_protocols::fuzzing::hello_encode(&peer_hello)];
    msgs.extend(messages(rest, 1 << 12).into_iter().map(<[u8]>::to_vec));
    let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
    feed(&mut peer, &refs);
    let Ok(hs) = handshake(&mut me, case.hello(case.role, case.ours)) else {
        unreachable_handshake();
    };
    let opts = PsiOptions {
        batch_size: 4,
        reveal: case.reveal,
        ..PsiOptions::default()
    };
    if let Ok(PsiOutput {
        intersection: Some(idx),
        ..
    }) = run_psi(&mut me, &hs, &opts, &ours, &NoProgress)
    {
        assert!(
            idx.windows(2).all(|w| w[0] < w[1]),
            "unsorted result {idx:?}"
        );
        assert!(
            idx.iter().all(|&i| i < ours.len()),
            "index out of range {idx:?}"
        );
    }
    drop(peer);
}

#[cold]
fn unreachable_handshake() -> ! {
    panic!("the harness's own hello was refused: the harness is out of date with handshake.rs");
}

/// A link that records every data message it receives (for seed inputs).
pub struct Recording<L> {
    /// The real link.
    pub inner: L,
    /// Messages received so far.
    pub got: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl<L: Link> Link for Recording<L> {
    fn send(&mut self, payload: &[u8]) -> Result<(), LinkError> {
        self.inner.send(payload)
    }
    fn recv(&mut self) -> Result<Vec<u8>, LinkError> {
        let m = self.inner.recv()?;
        if let Ok(mut got) = self.got.lock() {
            got.push(m.clone());
        }
        Ok(m)
    }
    fn abort(&mut self, reason: &str) {
        self.inner.abort(reason)
    }
    fn close(&mut self) -> Result<(), LinkError> {
        self.inner.close()
    }
    fn stats(&self) -> LinkStats {
        self.inner.stats()
    }
    fn peer_id(&self) -> &str {
        self.inner.peer_id()
    }
}

/// A seed for [`run_hostile_peer`]: an honest run of `case`, with the messages the party under
/// test received from its (honest) peer after the hello.
pub fn psi_seed(case: PsiCase) -> Vec<u8> {
    let (a, mut b) = mem_pair();
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut a = Recording {
        inner: a,
        got: got.clone(),
    };
    let ours = items("ours", case.ours);
    // The peer shares half of its items with us, so the seed exercises matches too.
    let mut theirs = items("theirs", case.theirs);
    for (t, o) in theirs.iter_mut().zip(ours.iter()).step_by(2) {
        *t = *o;
    }
    let peer = std::thread::spawn(move || {
        let hs = handshake(&mut b, case.hello(case.peer_role(), case.theirs)).ok()?;
        let out = run_psi(&mut b, &hs, &PsiOptions::default(), &theirs, &NoProgress).ok();
        let _ = b.close();
        out
    });
    let hs = handshake(&mut a, case.hello(case.role, case.ours));
    if let Ok(hs) = hs {
        let opts = PsiOptions {
            batch_size: 4,
            ..PsiOptions::default()
        };
        let _ = run_psi(&mut a, &hs, &opts, &ours, &NoProgress);
        let _ = a.close();
    }
    let _ = peer.join();
    let got = got.lock().map(|g| g.clone()).unwrap_or_default();
    let mut out = case.to_bytes().to_vec();
    // got[0] is the peer's hello, which run_hostile_peer sends itself.
    out.extend(join_messages(got.iter().skip(1).map(Vec::as_slice)));
    out
}

/// Which unbalanced-PSI step a [`UbCase`] runs on our side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UbStep {
    /// The client receiving the server's cache ([`ub_oprf::recv_cache`]).
    RecvCache,
    /// The client's online phase ([`ub_oprf::online_client`]).
    OnlineClient,
    /// The server's online phase ([`ub_oprf::online_server`]).
    OnlineServer,
}

/// What an unbalanced-PSI fuzz input's first bytes choose.
#[derive(Clone, Copy, Debug)]
pub struct UbCase {
    /// The step under test.
    pub step: UbStep,
    /// The OPRF group.
    pub curve: Curve,
    /// Who learns the result (never both false: that is refused before any message).
    pub opts: OnlineOptions,
    /// The client's item count.
    pub client: usize,
    /// The server's item count (the cache's).
    pub server: usize,
}

/// The OPRF groups a [`UbCase`] picks from.
const UB_CURVES: [Curve; 2] = [Curve::FourQ, Curve::Ristretto255];

/// The result-sharing options a [`UbCase`] picks from: client only, the shuffle variant
/// (server only), both.
const UB_OPTS: [(bool, bool); 3] = [(true, false), (false, true), (true, true)];

/// The threshold of a threshold-mode [`UbCase`].
const UB_THRESHOLD: u64 = 3;

/// The most cache bytes the fuzzed client accepts in transfer (a few hundred values).
pub const UB_MAX_CACHE_BYTES: u64 = 4096;

impl UbCase {
    /// Reads the case from `head` (missing bytes are 0): byte 0 = step (bits 0..2, mod 3), curve
    /// (bit 2), options (bits 3..7, mod 3), threshold mode with T = 3 (bit 7, when the client
    /// learns the result); byte 1 = the client's item count; byte 2 = the server's.
    pub fn from_bytes(head: &[u8]) -> Self {
        let b = |i: usize| head.get(i).copied().unwrap_or(0);
        let step = match b(0) & 3 {
            1 => UbStep::OnlineClient,
            2 => UbStep::OnlineServer,
            _ => UbStep::RecvCache,
        };
        let (client_get_result, server_get_result) = UB_OPTS[usize::from(b(0) >> 3 & 0x0f) % 3];
        let threshold = (b(0) & 0x80 != 0 && client_get_result).then_some(UB_THRESHOLD);
        UbCase {
            step,
            curve: UB_CURVES[usize::from(b(0) >> 2 & 1)],
            opts: OnlineOptions {
                client_get_result,
                server_get_result,
                threshold,
            },
            client: usize::from(b(1)) % (MAX_ITEMS + 1),
            server: usize::from(b(2)) % (MAX_ITEMS + 1),
        }
    }

    /// The first bytes of an input that [`UbCase::from_bytes`] reads back as `self`.
    pub fn to_bytes(&self) -> [u8; CASE_BYTES] {
        let step = match self.step {
            UbStep::RecvCache => 0u8,
            UbStep::OnlineClient => 1,
            UbStep::OnlineServer => 2,
        };
        let curve = UB_CURVES.iter().position(|c| *c == self.curve).unwrap_or(0) as u8;
        let opts = UB_OPTS
            .iter()
            .position(|o| *o == (self.opts.client_get_result, self.opts.server_get_result))
            .unwrap_or(0) as u8;
        let threshold = u8::from(self.opts.threshold.is_some()) << 7;
        [
            step | curve << 2 | opts << 3 | threshold,
            self.client as u8,
            self.server as u8,
        ]
    }

    /// The server's key (fixed, so seeds recorded in one run replay in another), its items'
    /// cache (sorted values and their metadata), the client's items (half of them in the
    /// server's set).
    pub fn setup(&self) -> Option<(OprfScalar, CacheMeta, Vec<u8>, Vec<ItemDigest>)> {
        let key = OprfScalar::from_seed(self.curve, b"blindjoin fuzz ub-oprf key").ok()?;
        let server = items("server", self.server);
        let tl = ub_oprf::tag_len(self.server as u64);
        let values = ub_oprf::evaluate_server_set(&key, &server, tl, false, &NoProgress)
            .ok()?
            .values;
        let meta = CacheMeta {
            curve: self.curve,
            count: self.server as u64,
            tag_len: tl,
            key_check: key.key_check_value().ok()?,
            labels: None,
        };
        let mut client = items("client", self.client);
        for (c, s) in client.iter_mut().zip(server.iter()).step_by(2) {
            *c = *s;
        }
        Some((key, meta, values, client))
    }
}

/// The unbalanced-PSI target: this party runs the case's step honestly on an in-memory link
/// (the server with a fixed key and its real cache, the client with that cache), the peer's
/// messages are the fuzz input's (after the case bytes), then an abort. Checks that whatever
/// comes back is well formed: a received cache within the size limit and sorted, client indices
/// sorted, distinct and in range, server positions in the cache and no more than the client's
/// items.
pub fn run_hostile_ub(data: &[u8]) {
    let (head, rest) = data.split_at(data.len().min(CASE_BYTES));
    let case = UbCase::from_bytes(head);
    let Some((key, meta, cache, client)) = case.setup() else {
        unreachable_setup();
    };
    let (mut me, mut peer) = mem_pair();
    let msgs = messages(rest, 1 << 12);
    feed(&mut peer, &msgs);
    match case.step {
        UbStep::RecvCache => {
            if let Ok((got, values, _)) = ub_oprf::recv_cache(&mut me, UB_MAX_CACHE_BYTES) {
                let bytes = got.count * got.tag_len as u64;
                assert!(bytes <= UB_MAX_CACHE_BYTES, "accepted {bytes} cache bytes");
                assert_eq!(values.len() as u64, bytes, "cache size");
                assert!(
                    ub_oprf::check_sorted(&values, got.tag_len).is_ok(),
                    "unsorted cache accepted"
                );
            }
        }
        UbStep::OnlineClient => {
            if let Ok(out) =
                ub_oprf::online_client(&mut me, &meta, &cache, &client, case.opts, &NoProgress)
            {
                if let Some(idx) = &out.intersection {
                    assert!(idx.windows(2).all(|w| w[0] < w[1]), "unsorted {idx:?}");
                    assert!(
                        idx.iter().all(|&i| i < client.len()),
                        "out of range {idx:?}"
                    );
                    assert_eq!(out.count, Some(idx.len() as u64), "count");
                }
                assert!(out.count.unwrap_or(0) <= client.len() as u64, "count");
            }
        }
        UbStep::OnlineServer => {
            if let Ok(out) = ub_oprf::online_server(&mut me, &key, &meta, case.opts, &NoProgress)
                && let Some(p) = &out.intersection
            {
                assert!(p.windows(2).all(|w| w[0] < w[1]), "unsorted {p:?}");
                assert!(p.iter().all(|&i| i < case.server), "out of range {p:?}");
                assert!(p.len() as u64 <= out.peer_count, "more matches than items");
            }
        }
    }
    drop(peer);
}

#[cold]
fn unreachable_setup() -> ! {
    panic!("the harness cannot make its own key or cache: out of date with ub_oprf.rs");
}

/// A seed for [`run_hostile_ub`]: an honest run of `case` (the whole transfer, or the online
/// phase), with the messages the party under test received from its honest peer.
pub fn ub_seed(case: UbCase) -> Vec<u8> {
    let mut out = case.to_bytes().to_vec();
    let Some((key, meta, cache, client)) = case.setup() else {
        return out;
    };
    let (a, mut b) = mem_pair();
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut a = Recording {
        inner: a,
        got: got.clone(),
    };
    let opts = case.opts;
    let step = case.step;
    let peer_meta = meta.clone();
    let peer_cache = cache.clone();
    let peer_client = client.clone();
    let peer = std::thread::spawn(move || {
        let _ = match step {
            UbStep::RecvCache => {
                ub_oprf::send_cache(&mut b, &peer_meta, &peer_cache, None).map(|_| ())
            }
            UbStep::OnlineClient => {
                ub_oprf::online_server(&mut b, &key, &peer_meta, opts, &NoProgress).map(|_| ())
            }
            UbStep::OnlineServer => ub_oprf::online_client(
                &mut b,
                &peer_meta,
                &peer_cache,
                &peer_client,
                opts,
                &NoProgress,
            )
            .map(|_| ()),
        };
        let _ = b.close();
    });
    let _ = match step {
        UbStep::RecvCache => ub_oprf::recv_cache(&mut a, UB_MAX_CACHE_BYTES).map(|_| ()),
        UbStep::OnlineClient => {
            ub_oprf::online_client(&mut a, &meta, &cache, &client, opts, &NoProgress).map(|_| ())
        }
        UbStep::OnlineServer => match case.setup() {
            Some((key, ..)) => {
                ub_oprf::online_server(&mut a, &key, &meta, opts, &NoProgress).map(|_| ())
            }
            None => Ok(()),
        },
    };
    let _ = a.close();
    let _ = peer.join();
    let got = got.lock().map(|g| g.clone()).unwrap_or_default();
    out.extend(join_messages(got.iter().map(Vec::as_slice)));
    out
}

/// What a three-party fuzz input's first bytes choose.
#[derive(Clone, Copy, Debug)]
pub struct ThreeCase {
    /// The honest party's seat.
    pub seat: Seat,
    /// The curve.
    pub curve: Curve,
    /// Item counts by seat (R, P, Q).
    pub sizes: [usize; 3],
}

/// Bytes of configuration in front of a three-party fuzz input's messages.
pub const THREE_CASE_BYTES: usize = 4;

/// The run's party setup, as every party passes it to [`handshake_3pc`].
const THREE_SETUP: &str = "r,p,q>r";

fn seat_index(s: Seat) -> usize {
    Seat::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

impl ThreeCase {
    /// Reads the case from `head` (missing bytes are 0): byte 0 = our seat (bits 0..2, mod 3:
    /// R, P, Q), the curve (bits 2.., mod 6); bytes 1..4 = the item counts of R, P and Q, each
    /// mod 17.
    pub fn from_bytes(head: &[u8]) -> Self {
        let b = |i: usize| head.get(i).copied().unwrap_or(0);
        ThreeCase {
            seat: Seat::ALL[usize::from(b(0) & 3) % 3],
            curve: CURVES[usize::from(b(0) >> 2) % CURVES.len()],
            sizes: [1, 2, 3].map(|i| usize::from(b(i)) % (MAX_ITEMS + 1)),
        }
    }

    /// The first bytes of an input that [`ThreeCase::from_bytes`] reads back as `self`.
    pub fn to_bytes(&self) -> [u8; THREE_CASE_BYTES] {
        let curve = CURVES.iter().position(|c| *c == self.curve).unwrap_or(0) as u8;
        let [r, p, q] = self.sizes.map(|n| n as u8);
        [seat_index(self.seat) as u8 | curve << 2, r, p, q]
    }

    /// The items of the party at `seat` (every party shares half of its items with R's).
    fn items(&self, seat: Seat) -> Vec<ItemDigest> {
        let mut mine = items(
            &format!("3pc/{}", seat_index(seat)),
            self.sizes[seat_index(seat)],
        );
        let r = items("3pc/0", self.sizes[0]);
        for (m, x) in mine.iter_mut().zip(r.iter()).step_by(2) {
            *m = *x;
        }
        mine
    }
}

/// Three in-memory links between the seats: `ends[i][j]` is seat i's end of the link to seat j.
fn triangle() -> [[Option<MemLink>; 3]; 3] {
    let (rp, pr) = mem_pair();
    let (rq, qr) = mem_pair();
    let (pq, qp) = mem_pair();
    [
        [None, Some(rp), Some(rq)],
        [Some(pr), None, Some(pq)],
        [Some(qr), Some(qp), None],
    ]
}

/// Seat `seat`'s two links, in [`Seat::others`] order (the order [`run_3pc`] takes them in).
fn links_of(ends: &mut [[Option<MemLink>; 3]; 3], seat: Seat) -> Option<[MemLink; 2]> {
    let [a, b] = seat.others().map(seat_index);
    let row = &mut ends[seat_index(seat)];
    Some([row[a].take()?, row[b].take()?])
}

/// One honest party of the three: [`handshake_3pc`], then (when `run`) [`run_3pc`].
fn party_3pc(
    links: &mut [MemLink; 2],
    case: &ThreeCase,
    seat: Seat,
    items: &[ItemDigest],
    run: bool,
) -> Result<Option<Vec<usize>>, blindjoin_protocols::ProtocolError> {
    let [a, b] = links;
    let n = items.len() as u64;
    let agreed = handshake_3pc([a, b], seat, case.curve, 1, THREE_SETUP, n)?;
    if !run {
        return Ok(None);
    }
    let opts = PsiOptions {
        batch_size: 4,
        ..PsiOptions::default()
    };
    let [a, b] = links;
    run_3pc([a, b], &agreed, &opts, items, &NoProgress)
}

/// The three-party target: this party takes the case's seat and runs [`handshake_3pc`] and
/// [`run_3pc`] honestly; the other two seats run the real handshake (so ours passes) and then
/// each sends us its share of the fuzz input's messages (a message's first byte picks the
/// sender, bit 0: our first or second link in [`Seat::others`] order; the rest is the payload),
/// then aborts. Checks that a receiver's result is a sorted list of distinct indices into its
/// items and that a helper gets none.
pub fn run_hostile_3pc(data: &[u8]) {
    let (head, rest) = data.split_at(data.len().min(THREE_CASE_BYTES));
    let case = ThreeCase::from_bytes(head);
    let mut to_us: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    for m in messages(rest, 1 << 12) {
        if let Some((&sel, body)) = m.split_first() {
            to_us[usize::from(sel & 1)].push(body.to_vec());
        }
    }
    let mut ends = triangle();
    let Some(mut mine) = links_of(&mut ends, case.seat) else {
        return;
    };
    let mut peers = Vec::new();
    for (k, other) in case.seat.others().into_iter().enumerate() {
        let Some(mut links) = links_of(&mut ends, other) else {
            return;
        };
        let msgs = std::mem::take(&mut to_us[k]);
        let towards_us = other
            .others()
            .iter()
            .position(|s| *s == case.seat)
            .unwrap_or(0);
        peers.push(std::thread::spawn(move || {
            let _ = party_3pc(&mut links, &case, other, &case.items(other), false);
            let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
            feed(&mut links[towards_us], &refs);
            links
        }));
    }
    let ours = case.items(case.seat);
    let out = party_3pc(&mut mine, &case, case.seat, &ours, true);
    // Our links go first, so a peer still waiting for our hello (after a failure) stops too.
    drop(mine);
    for p in peers {
        let _ = p.join();
    }
    if let Ok(out) = out {
        match (case.seat, out) {
            (Seat::Receiver, Some(idx)) => {
                assert!(idx.windows(2).all(|w| w[0] < w[1]), "unsorted {idx:?}");
                assert!(idx.iter().all(|&i| i < ours.len()), "out of range {idx:?}");
            }
            (Seat::Receiver, None) => panic!("the receiver finished without a result"),
            (_, Some(_)) => panic!("a helper learned a result"),
            (_, None) => {}
        }
    }
}

/// A seed for [`run_hostile_3pc`]: an honest run of all three seats, with the messages our seat
/// received after the hellos, each behind the byte that names its link.
pub fn three_seed(case: ThreeCase) -> Vec<u8> {
    let mut out = case.to_bytes().to_vec();
    let mut ends = triangle();
    let Some([a, b]) = links_of(&mut ends, case.seat) else {
        return out;
    };
    let got = [
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    ];
    let mut mine = [
        Recording {
            inner: a,
            got: got[0].clone(),
        },
        Recording {
            inner: b,
            got: got[1].clone(),
        },
    ];
    let mut peers = Vec::new();
    for other in case.seat.others() {
        let Some(mut links) = links_of(&mut ends, other) else {
            return out;
        };
        peers.push(std::thread::spawn(move || {
            let _ = party_3pc(&mut links, &case, other, &case.items(other), true);
            links
        }));
    }
    let ours = case.items(case.seat);
    let [a, b] = &mut mine;
    if let Ok(agreed) = handshake_3pc(
        [a, b],
        case.seat,
        case.curve,
        1,
        THREE_SETUP,
        ours.len() as u64,
    ) {
        let opts = PsiOptions {
            batch_size: 4,
            ..PsiOptions::default()
        };
        let [a, b] = &mut mine;
        let _ = run_3pc([a, b], &agreed, &opts, &ours, &NoProgress);
    }
    drop(mine);
    let mut peer_links = Vec::new();
    for p in peers {
        if let Ok(l) = p.join() {
            peer_links.push(l);
        }
    }
    let mut msgs = Vec::new();
    for (k, g) in got.iter().enumerate() {
        let g = g.lock().map(|g| g.clone()).unwrap_or_default();
        // The first message on each link is the peer's hello, which the harness's peers send.
        for m in g.iter().skip(1) {
            let mut tagged = vec![k as u8];
            tagged.extend_from_slice(m);
            msgs.push(tagged);
        }
    }
    out.extend(join_messages(msgs.iter().map(Vec::as_slice)));
    out
}
