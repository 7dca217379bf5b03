//! Tests for [`crate::softspoken`]: correlation for every size / `k` / mode, cheating and
//! malformed peers, communication per OT (the throughput against IKNP is `cargo bench -p
//! blindjoin-ot --bench ot_speed -- softspoken`).

use crate::softspoken::{DEFAULT_FIELD_BITS, MAX_FIELD_BITS};
use crate::tests::run2;
use crate::*;
use blindjoin_link::{Link, LinkError, LinkStats, MemLink, mem_pair, put_u64};

fn random_choices(n: usize) -> Vec<bool> {
    let mut b = vec![0u8; n];
    blindjoin_crypto::random_bytes(&mut b).unwrap();
    b.iter().map(|x| x & 1 == 1).collect()
}

fn params(k: usize, malicious: bool) -> SoftSpokenParams {
    SoftSpokenParams { k, malicious }
}

/// An honest run; returns both outputs, the choices and the (sender, receiver) link stats.
fn run(n: usize, p: SoftSpokenParams) -> (CotSender, CotReceiver, Vec<bool>, LinkStats, LinkStats) {
    let choices = random_choices(n);
    let c2 = choices.clone();
    let ((s, s_stats), (r, r_stats)) = run2(
        move |l| {
            let s = softspoken_cot_send(l, n, p).unwrap();
            (s, l.stats())
        },
        move |l| {
            let r = softspoken_cot_receive(l, &c2, p).unwrap();
            (r, l.stats())
        },
    );
    (s, r, choices, s_stats, r_stats)
}

fn assert_correlated(s: &CotSender, r: &CotReceiver, choices: &[bool], what: &str) {
    let n = choices.len();
    assert_ne!(s.delta(), 0, "{what}");
    assert_eq!(s.len(), n, "{what}");
    assert_eq!(r.len(), n, "{what}");
    assert_eq!(r.choices(), choices, "{what}");
    for (i, ((t, q), &c)) in r.t().iter().zip(s.q()).zip(choices).enumerate() {
        let mask = if c { s.delta() } else { 0 };
        assert_eq!(*t, q ^ mask, "{what}: OT {i}");
    }
}

fn check_all_sizes(malicious: bool) {
    for k in [1usize, 2, 4, 8] {
        for n in [0usize, 1, 127, 128, 129, 10_000, 100_000] {
            let (s, r, choices, _, _) = run(n, params(k, malicious));
            assert_correlated(&s, &r, &choices, &format!("k={k} n={n} mal={malicious}"));
        }
    }
}

#[test]
fn softspoken_correlation_semi_honest_all_sizes() {
    check_all_sizes(false);
}

#[test]
fn softspoken_correlation_malicious_all_sizes() {
    check_all_sizes(true);
}

#[test]
fn softspoken_odd_k_and_chunk_boundaries() {
    // k ∤ 128 (narrower last small VOLE) and every other k, in both modes.
    for k in 1..=MAX_FIELD_BITS {
        for malicious in [false, true] {
            let (s, r, choices, _, _) = run(1000, params(k, malicious));
            assert_correlated(&s, &r, &choices, &format!("k={k} mal={malicious}"));
        }
    }
    // A correction message carries 128·max(k, 2) blocks of 128 OTs, in groups of 64 blocks;
    // cross those boundaries, including the case where the malicious padding block alone spills
    // into a second message.
    for k in [2usize, 3] {
        let per_msg = 128 * k * 128;
        for n in [per_msg - 1, per_msg, per_msg + 1, 2 * per_msg + 129] {
            for malicious in [false, true] {
                let (s, r, choices, _, _) = run(n, params(k, malicious));
                assert_correlated(&s, &r, &choices, &format!("k={k} n={n} mal={malicious}"));
            }
        }
    }
}

#[test]
fn softspoken_random_ots_and_fresh_outputs() {
    for malicious in [false, true] {
        let p = params(4, malicious);
        let (s1, r1, choices, _, _) = run(5000, p);
        let (s2, _, _, _, _) = run(5000, p);
        assert_ne!(s1.delta(), s2.delta(), "Δ repeats across runs");
        assert_ne!(s1.q(), s2.q(), "q repeats across runs");
        let so = s1.random_ots();
        let ro = r1.random_ots();
        for (i, &c) in choices.iter().enumerate() {
            let c = usize::from(c);
            assert_eq!(ro[i], so[i][c]);
            assert_ne!(ro[i], so[i][1 - c]);
        }
        // q_i look random: distinct, bits balanced.
        let mut sorted = s1.q().to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 5000);
        let ones: u32 = s1.q().iter().map(|x| x.count_ones()).sum();
        let total = 128 * 5000u32;
        assert!(ones > total * 49 / 100 && ones < total * 51 / 100);
    }
}

#[test]
fn softspoken_params_default_and_usage_errors() {
    let d = SoftSpokenParams::default();
    assert_eq!(d, params(DEFAULT_FIELD_BITS, false));
    assert_eq!(d.k, 4);
    assert_eq!(d.bits_per_ot(), 32);
    assert_eq!(params(3, false).bits_per_ot(), 43);
    assert_eq!(params(8, true).bits_per_ot(), 16);
    for k in [0usize, MAX_FIELD_BITS + 1, 64] {
        // Rejected before any message is exchanged.
        let (mut a, _b) = mem_pair();
        assert!(matches!(
            softspoken_cot_send(&mut a, 10, params(k, false)),
            Err(OtError::Usage(_))
        ));
        assert!(matches!(
            softspoken_cot_receive(&mut a, &[true; 10], params(k, true)),
            Err(OtError::Usage(_))
        ));
        assert_eq!(a.stats().messages_sent, 0);
    }
    let (mut a, _b) = mem_pair();
    assert!(matches!(
        softspoken_cot_send(&mut a, MAX_COTS + 1, d),
        Err(OtError::Usage(_))
    ));
}

#[test]
fn softspoken_peer_gone_is_a_link_error() {
    let (la, mut lb) = mem_pair();
    drop(la);
    assert!(matches!(
        softspoken_cot_send(&mut lb, 10, SoftSpokenParams::default()),
        Err(OtError::Link(_))
    ));
    let (la, mut lb) = mem_pair();
    drop(la);
    assert!(matches!(
        softspoken_cot_receive(&mut lb, &[true], params(2, true)),
        Err(OtError::Link(_))
    ));
}

#[test]
fn softspoken_communication_per_ot() {
    let n = 1usize << 17;
    for k in [1usize, 2, 4, 8] {
        for malicious in [false, true] {
            let p = params(k, malicious);
            let (s, r, choices, s_stats, r_stats) = run(n, p);
            assert_correlated(&s, &r, &choices, &format!("k={k}"));
            let total = r_stats.bytes_sent + s_stats.bytes_sent;
            let bits_per_ot = 8.0 * total as f64 / n as f64;
            let expect = p.bits_per_ot() as f64;
            println!(
                "k={k} malicious={malicious}: {total} bytes = {bits_per_ot:.3} bits/OT \
                 (corrections alone: {expect} bits/OT; IKNP: 128)"
            );
            // Corrections are exactly ⌈128/k⌉ bits per OT; the fixed costs (header, base OTs,
            // tree sums; in malicious mode also the padding block, leaf checks and the check
            // round trip — 12 KiB at most, for k = 1) add at most 0.75 bit per OT at this size.
            assert!(bits_per_ot >= expect, "k={k}: {bits_per_ot}");
            assert!(bits_per_ot < expect + 1.5, "k={k}: {bits_per_ot}");
            assert!(
                bits_per_ot < 1.25 * 128.0 / k as f64 + 1.0,
                "k={k}: {bits_per_ot}"
            );
            // The sender only sends the base-OT points (two per Masny–Rindal OT, 8 KiB for
            // 128) and the 16-byte challenge.
            assert!(s_stats.bytes_sent < 9_000, "{}", s_stats.bytes_sent);
        }
    }
}

// ---- cheating and malformed peers ------------------------------------------------------------

type Edit = Box<dyn FnMut(usize, &mut Vec<u8>) + Send>;

/// A link that lets a test rewrite the `i`-th message this party sends.
struct Tamper<'a> {
    inner: &'a mut MemLink,
    sent: usize,
    edit: Edit,
}

impl<'a> Tamper<'a> {
    fn new(inner: &'a mut MemLink, edit: Edit) -> Self {
        Tamper {
            inner,
            sent: 0,
            edit,
        }
    }
}

impl Link for Tamper<'_> {
    fn send(&mut self, payload: &[u8]) -> Result<(), LinkError> {
        let mut p = payload.to_vec();
        (self.edit)(self.sent, &mut p);
        self.sent += 1;
        self.inner.send(&p)
    }
    fn recv(&mut self) -> Result<Vec<u8>, LinkError> {
        self.inner.recv()
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

/// Receiver messages: 0 header, 1 base-OT point, 2 tree, 3.. corrections, then the response.
const RECV_TREE_MSG: usize = 2;
const RECV_FIRST_CHUNK: usize = 3;

type Outcome = (
    Result<CotReceiver, OtError>,
    Result<CotSender, OtError>,
    Vec<bool>,
);

/// A receiver whose outgoing messages pass through `edit`, against an honest sender. Each side
/// aborts the link on failure so the other never waits for a timeout.
fn run_tampered_receiver(n: usize, p: SoftSpokenParams, edit: Edit) -> Outcome {
    let choices = random_choices(n);
    let c2 = choices.clone();
    let (r, s) = run2(
        move |l| {
            let mut t = Tamper::new(l, edit);
            let r = softspoken_cot_receive(&mut t, &c2, p);
            if r.is_err() {
                t.abort("test receiver failed");
            }
            r
        },
        move |l| {
            let s = softspoken_cot_send(l, n, p);
            if s.is_err() {
                l.abort("test sender failed");
            }
            s
        },
    );
    (r, s, choices)
}

/// Offset of small VOLE `i`'s correction for block `j` (< 64) in the first correction message
/// of a run of `n` OTs: the message is a sequence of groups of up to 64 blocks, each holding
/// every small VOLE's run of corrections in turn.
fn corr_offset(n: usize, p: SoftSpokenParams, i: usize, j: usize) -> usize {
    let g = (n.div_ceil(128) + usize::from(p.malicious)).min(64);
    (i * g + j) * 16
}

/// Flips bit `ot % 8` of byte `ot / 8` (`ot < 128`) of the correction of every small VOLE `i`
/// with `i % 2 == 0`, in the first block: the receiver's choice of OT `ot` then differs between
/// VOLEs, while it keeps answering the check honestly.
fn flip_even_voles(n: usize, p: SoftSpokenParams, ot: usize) -> Edit {
    let m = p.bits_per_ot();
    Box::new(move |idx, msg| {
        if idx == RECV_FIRST_CHUNK {
            for i in (0..m).step_by(2) {
                msg[corr_offset(n, p, i, 0) + ot / 8] ^= 1 << (ot % 8);
            }
        }
    })
}

#[test]
fn softspoken_cheating_receiver_caught_in_malicious_mode() {
    for k in [1usize, 2, 4, 8] {
        // Half the small VOLEs disagree with the rest: passing needs 64 guessed bits of Δ.
        let p = params(k, true);
        let (_, s, _) = run_tampered_receiver(1000, p, flip_even_voles(1000, p, 5));
        assert!(
            matches!(s, Err(OtError::PeerMisbehaved(_))),
            "k={k}: {:?}",
            s.map(|s| s.len())
        );
        // Flipping the same choice in *every* VOLE is consistent, but the honest response still
        // hashes the original choice vector: caught as well.
        let all: Edit = Box::new(move |idx, msg: &mut Vec<u8>| {
            if idx == RECV_FIRST_CHUNK {
                for i in 0..p.bits_per_ot() {
                    msg[corr_offset(1000, p, i, 0)] ^= 1;
                }
            }
        });
        let (_, s, _) = run_tampered_receiver(1000, params(k, true), all);
        assert!(matches!(s, Err(OtError::PeerMisbehaved(_))), "k={k}");
        // A forged check response.
        for (pos, what) in [(0usize, "h_c"), (16 + 16 * 77 + 3, "h_77")] {
            let forge: Edit = Box::new(move |idx, msg: &mut Vec<u8>| {
                if idx == RECV_FIRST_CHUNK + 1 {
                    msg[pos] ^= 0x10;
                }
            });
            let (_, s, _) = run_tampered_receiver(1000, params(k, true), forge);
            assert!(matches!(s, Err(OtError::PeerMisbehaved(_))), "k={k} {what}");
        }
    }
}

#[test]
fn softspoken_semi_honest_mode_does_not_detect_the_same_cheat() {
    // What the check buys: without it the sender accepts, and OT 5 is off by exactly the bits of
    // Δ in the cheated small VOLEs' columns (the receiver now "knows" q_5 on those columns).
    for k in [1usize, 2, 4, 8] {
        let p = params(k, false);
        let (r, s, choices) = run_tampered_receiver(1000, p, flip_even_voles(1000, p, 5));
        let (r, s) = (r.unwrap(), s.unwrap());
        let mut cheated = 0u128;
        for i in (0..128 / k).step_by(2) {
            cheated |= ((1u128 << k) - 1) << (i * k);
        }
        for (i, &c) in choices.iter().enumerate() {
            let expect = if c { s.delta() } else { 0 };
            let err = r.t()[i] ^ s.q()[i] ^ expect;
            let want = if i == 5 { s.delta() & cheated } else { 0 };
            assert_eq!(err, want, "k={k} OT {i}");
        }
    }
}

#[test]
fn softspoken_cheating_tree_caught_in_malicious_mode() {
    for k in [1usize, 2, 4, 8] {
        // Every byte of the tree message (level sums and leaf checks) altered.
        let all: Edit = Box::new(|idx, msg: &mut Vec<u8>| {
            if idx == RECV_TREE_MSG {
                msg.iter_mut().for_each(|b| *b ^= 0x5a);
            }
        });
        let (_, s, _) = run_tampered_receiver(300, params(k, true), all);
        assert!(matches!(s, Err(OtError::PeerMisbehaved(_))), "k={k}");
        // Only the commitment of small VOLE 0 (the last 32 bytes of its 64-byte check, which
        // follows the level sums).
        let sums = if k == 1 {
            0
        } else {
            128usize.div_ceil(k) * 2 * (k - 1) * 16
        };
        let commit: Edit = Box::new(move |idx, msg: &mut Vec<u8>| {
            if idx == RECV_TREE_MSG {
                msg[sums + 32] ^= 1;
            }
        });
        let (_, s, _) = run_tampered_receiver(300, params(k, true), commit);
        assert!(matches!(s, Err(OtError::PeerMisbehaved(_))), "k={k}");
    }
    // For k ≥ 2: both level-2 sums of small VOLE 0 altered, so the sender uses a wrong sum
    // whatever its Δ bit is.
    for k in [2usize, 4, 8] {
        let sums: Edit = Box::new(|idx, msg: &mut Vec<u8>| {
            if idx == RECV_TREE_MSG {
                msg[0] ^= 1;
                msg[16] ^= 1;
            }
        });
        let (_, s, _) = run_tampered_receiver(300, params(k, true), sums);
        assert!(matches!(s, Err(OtError::PeerMisbehaved(_))), "k={k}");
    }
}

fn expect_invalid(s: &Result<CotSender, OtError>, what: &str) {
    assert!(
        matches!(s, Err(OtError::InvalidMessage(_))),
        "{what}: {:?}",
        s.as_ref().map(|s| s.len())
    );
}

#[test]
fn softspoken_sender_rejects_malformed_messages() {
    type Cut = fn(&mut Vec<u8>);
    let cuts: [(Cut, &str); 4] = [
        (|m| m.truncate(m.len() - 1), "one byte short"),
        (|m| m.push(0), "one byte long"),
        (|m| m.clear(), "empty"),
        (|m| m.extend_from_slice(&[0u8; 1 << 16]), "64 KiB long"),
    ];
    for malicious in [false, true] {
        let p = params(4, malicious);
        let mut targets = vec![(RECV_TREE_MSG, "tree"), (RECV_FIRST_CHUNK, "corrections")];
        if malicious {
            targets.push((RECV_FIRST_CHUNK + 1, "check response"));
        }
        for &(target, msg_name) in &targets {
            for &(cut, how) in &cuts {
                let edit: Edit = Box::new(move |idx, msg: &mut Vec<u8>| {
                    if idx == target {
                        cut(msg);
                    }
                });
                let (_, s, _) = run_tampered_receiver(1000, p, edit);
                expect_invalid(&s, &format!("{msg_name} {how} mal={malicious}"));
            }
        }
    }
    // k = 1 has no level sums: an empty tree message is valid in semi-honest mode only.
    let (r, s, c) = run_tampered_receiver(200, params(1, false), Box::new(|_, _| {}));
    assert_correlated(&s.unwrap(), &r.unwrap(), &c, "k=1");
    let extra: Edit = Box::new(|idx, msg: &mut Vec<u8>| {
        if idx == RECV_TREE_MSG {
            msg.push(1);
        }
    });
    let (_, s, _) = run_tampered_receiver(200, params(1, false), extra);
    expect_invalid(&s, "k=1 tree with a stray byte");
}

#[test]
fn softspoken_sender_rejects_bad_header() {
    let with = |magic: &[u8], n: u64, k: u8, mal: u8| {
        let mut h = magic.to_vec();
        put_u64(&mut h, n);
        h.push(k);
        h.push(mal);
        h
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (with(b"SSOT", 999, 4, 1), "misbehaved"),
        (with(b"SSOT", 1000, 2, 1), "misbehaved"),
        (with(b"SSOT", 1000, 4, 0), "misbehaved"),
        (with(b"IKNP", 1000, 4, 1), "misbehaved"),
        (b"SSO".to_vec(), "invalid"),
        (with(b"SSOT", 1000, 4, 1)[..13].to_vec(), "invalid"),
        ([with(b"SSOT", 1000, 4, 1), vec![0]].concat(), "invalid"),
    ];
    for (msg, kind) in cases {
        let (_, r) = run2(
            move |l| l.send(&msg).unwrap(),
            |l| softspoken_cot_send(l, 1000, params(4, true)),
        );
        let ok = matches!(
            (&r, kind),
            (Err(OtError::PeerMisbehaved(_)), "misbehaved")
                | (Err(OtError::InvalidMessage(_)), "invalid")
        );
        assert!(ok, "expected {kind}, got {:?}", r.map(|s| s.len()));
    }
}

#[test]
fn softspoken_receiver_rejects_bad_challenge_and_base_ot_reply() {
    // Sender messages: 0 base-OT points, 1 challenge seed.
    type Cut = fn(&mut Vec<u8>);
    let cuts: [Cut; 3] = [|m| m.truncate(15), |m| m.push(0), |m| m.clear()];
    for cut in cuts {
        let choices = random_choices(500);
        let p = params(4, true);
        let (s, r) = run2(
            move |l| {
                let mut t = Tamper::new(
                    l,
                    Box::new(move |idx, msg| {
                        if idx == 1 {
                            cut(msg);
                        }
                    }),
                );
                let s = softspoken_cot_send(&mut t, 500, p);
                if s.is_err() {
                    t.abort("test sender failed");
                }
                s
            },
            move |l| {
                let r = softspoken_cot_receive(l, &choices, p);
                if r.is_err() {
                    l.abort("test receiver failed");
                }
                r
            },
        );
        assert!(
            matches!(r, Err(OtError::InvalidMessage(_))),
            "{:?}",
            r.map(|r| r.len())
        );
        assert!(
            matches!(s, Err(OtError::Link(_))),
            "{:?}",
            s.map(|s| s.len())
        );
    }
    // A sender that answers the base-OT point with the wrong number of points.
    for count in [0u32, 127, 129, u32::MAX] {
        let (_, r) = run2(
            move |l| {
                let _header = l.recv().unwrap();
                let _a = l.recv().unwrap();
                let mut m = Vec::new();
                blindjoin_link::put_u32(&mut m, count);
                m.extend_from_slice(&[7u8; 64]);
                l.send(&m).unwrap();
            },
            |l| softspoken_cot_receive(l, &[true; 300], SoftSpokenParams::default()),
        );
        assert!(
            matches!(
                r,
                Err(OtError::InvalidMessage(_)) | Err(OtError::PeerMisbehaved(_))
            ),
            "count {count}: {:?}",
            r.map(|r| r.len())
        );
    }
}

#[test]
fn softspoken_sender_rejects_wrong_tree_from_a_fake_receiver() {
    // A fake receiver: honest header and base OTs, then a tree message of the wrong size.
    let n = 1000usize;
    for len in [0usize, 1, 4095, 4097] {
        let (_, r) = run2(
            move |l| {
                let mut h = b"SSOT".to_vec();
                put_u64(&mut h, n as u64);
                h.extend_from_slice(&[8, 0]);
                l.send(&h).unwrap();
                base_ot_send(l, KAPPA).unwrap();
                l.send(&vec![0u8; len]).unwrap();
            },
            move |l| softspoken_cot_send(l, n, params(8, false)),
        );
        expect_invalid(&r, &format!("tree of {len} bytes"));
    }
}

#[test]
fn softspoken_transpose_block_matches_transpose128() {
    for _ in 0..50 {
        let mut bytes = [0u8; 16 * 128];
        blindjoin_crypto::random_bytes(&mut bytes).unwrap();
        let mut a = [0u128; 128];
        for (j, w) in a.iter_mut().enumerate() {
            *w = u128::from_le_bytes(bytes[16 * j..16 * j + 16].try_into().unwrap());
        }
        let mut b = a;
        crate::transpose::transpose128(&mut a);
        crate::softspoken::transpose_block(&mut b);
        assert_eq!(a, b);
    }
}
