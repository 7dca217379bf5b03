//! DP-PSI against its mechanism: exact answers where the noise is negligible, and each item's
//! inclusion rate over 1,000 seeded runs within a stated confidence bound of `p1·p2` / `p1·q`.

use super::*;
use crate::{Hello, NoProgress, ProtocolChoice, handshake};
use blindjoin_crypto::item_digest;
use blindjoin_link::mem_pair;
use std::collections::HashSet;

const CURVE: Curve = Curve::Curve25519;

fn digests(tag: &str, n: usize) -> Vec<ItemDigest> {
    (0..n)
        .map(|i| item_digest(format!("{tag}/{i}").as_bytes()))
        .collect()
}

fn seed(who: &str, run: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(who.as_bytes());
    h.update(run.to_le_bytes());
    h.finalize().into()
}

/// One run: Bob (receiver) holds `ys`, Alice `xs`; returns Bob's output.
fn run_pair(
    params: DpParams,
    ys: &[ItemDigest],
    xs: &[ItemDigest],
    seeds: Option<([u8; 32], [u8; 32])>,
    broadcast: bool,
) -> Result<Vec<usize>, ProtocolError> {
    let (mut lb, mut la) = mem_pair();
    let choice = ProtocolChoice::Ecdh { curve: CURVE };
    let xs = xs.to_vec();
    let alice_seed = seeds.map(|s| s.1);
    let alice = std::thread::spawn(move || {
        let hello = Hello::new(choice, Role::Sender, broadcast, xs.len() as u64)
            .with_context(params.context());
        let hs = handshake(&mut la, hello)?;
        run_seeded(
            &mut la,
            &hs,
            CURVE,
            params,
            &PsiOptions::default(),
            alice_seed,
            &xs,
            &NoProgress,
        )
    });
    let hello = Hello::new(choice, Role::Receiver, broadcast, ys.len() as u64)
        .with_context(params.context());
    let hs = handshake(&mut lb, hello)?;
    let out = run_seeded(
        &mut lb,
        &hs,
        CURVE,
        params,
        &PsiOptions::default(),
        seeds.map(|s| s.0),
        ys,
        &NoProgress,
    );
    // Bob's end closes first, so an Alice waiting on a Bob who gave up fails at once.
    drop(lb);
    let alice_out = alice
        .join()
        .map_err(|_| ProtocolError::Unreachable("alice panicked"))?;
    if out.is_ok() {
        assert_eq!(alice_out?.intersection, None, "Alice learns no items");
    }
    Ok(out?.intersection.unwrap_or_default())
}

fn plaintext(ys: &[ItemDigest], xs: &[ItemDigest]) -> Vec<usize> {
    let set: HashSet<_> = xs.iter().collect();
    (0..ys.len()).filter(|&i| set.contains(&ys[i])).collect()
}

#[test]
fn probabilities_follow_from_epsilon() {
    let p = DpParams::default();
    // SecretFlow's defaults print p2 = 0.9525741268224333, q = 0.047425873177566746.
    assert!((p.p2() - 0.952_574_126_822_433_3).abs() < 1e-12);
    assert!((p.q() - 0.047_425_873_177_566_746).abs() < 1e-12);
    assert!((p.p2() / p.q() - 3f64.exp()).abs() < 1e-9);
    // The exclusion ratio is bounded by e^ε too (the privacy claim in the module doc).
    for p1 in [0.1, 0.5, 0.9, 1.0] {
        for eps in [0.1, 1.0, 3.0, 8.0] {
            let d = DpParams {
                bob_sub_sampling: p1,
                epsilon: eps,
            };
            let ratio = (1.0 - p1 * d.q()) / (1.0 - p1 * d.p2());
            assert!(ratio <= eps.exp() * (1.0 + 1e-12), "p1 {p1} eps {eps}");
        }
    }
}

#[test]
fn bad_parameters_and_broadcast_are_refused() {
    for (p1, eps) in [
        (0.0, 3.0),
        (1.5, 3.0),
        (f64::NAN, 3.0),
        (0.9, 0.0),
        (0.9, f64::INFINITY),
    ] {
        let d = DpParams {
            bob_sub_sampling: p1,
            epsilon: eps,
        };
        assert!(
            matches!(d.validate(), Err(ProtocolError::Config(_))),
            "{p1} {eps}"
        );
    }
    let xs = digests("x", 3);
    let err = run_pair(DpParams::default(), &xs, &xs, None, true);
    assert!(matches!(err, Err(ProtocolError::Config(m)) if m.contains("broadcast_result")));
}

/// With p1 = 1 and ε = 60, q ≈ 9e-27: the output is the plaintext intersection.
#[test]
fn negligible_noise_gives_the_plaintext_intersection() {
    let exact = DpParams {
        bob_sub_sampling: 1.0,
        epsilon: 60.0,
    };
    let xs = digests("x", 40);
    let mut ys = digests("y", 30);
    ys[3..13].copy_from_slice(&xs[20..30]);
    let cases: Vec<(Vec<ItemDigest>, Vec<ItemDigest>)> = vec![
        (vec![], vec![]),
        (ys.clone(), vec![]),
        (vec![], xs.clone()),
        (xs[..1].to_vec(), xs[..1].to_vec()),
        (ys.clone(), xs.clone()),
        (xs.clone(), xs.clone()),
        (digests("none", 7), xs.clone()),
    ];
    for (ys, xs) in cases {
        let got = run_pair(exact, &ys, &xs, None, false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got,
            plaintext(&ys, &xs),
            "|Y| {} |X| {}",
            ys.len(),
            xs.len()
        );
    }
}

/// Each of Bob's items is in his output with probability p1·p2 (members of X) or p1·q
/// (non-members), independently per run. Over N = 1,000 seeded runs, Hoeffding's inequality
/// gives P(|rate − p| ≥ t) ≤ 2·exp(−2·N·t²); with a union bound over the M = 12 items and a
/// total failure probability δ = 1e-6, t = sqrt(ln(2M/δ) / (2N)) ≈ 0.092. The runs are seeded,
/// so the test is deterministic; the bound says a correct mechanism fails it for at most a
/// δ fraction of seed sets.
#[test]
fn inclusion_rates_over_1000_seeded_runs_match_the_mechanism() {
    const RUNS: u64 = 1000;
    const DELTA: f64 = 1e-6;
    let params = DpParams::default();
    let xs = digests("x", 9);
    let mut ys = digests("y", 12);
    // Items 0..6 of Y are in X, 6..12 are not.
    ys[..6].copy_from_slice(&xs[..6]);
    let members = plaintext(&ys, &xs);
    assert_eq!(members, (0..6).collect::<Vec<_>>());

    let mut counts = vec![0u64; ys.len()];
    for run in 0..RUNS {
        let seeds = (seed("bob", run), seed("alice", run));
        let out = run_pair(params, &ys, &xs, Some(seeds), false).unwrap_or_else(|e| panic!("{e}"));
        for i in out {
            counts[i] += 1;
        }
    }
    let m = ys.len() as f64;
    let t = ((2.0 * m / DELTA).ln() / (2.0 * RUNS as f64)).sqrt();
    assert!((t - 0.092).abs() < 0.001, "bound {t}");
    for (i, &c) in counts.iter().enumerate() {
        let rate = c as f64 / RUNS as f64;
        let p = params.inclusion_probability(members.contains(&i));
        assert!(
            (rate - p).abs() < t,
            "item {i}: observed {rate}, mechanism {p}, bound ±{t}"
        );
    }
}

/// The seeds fix the output: the same seeds give the same output, run after run.
#[test]
fn seeded_runs_are_reproducible() {
    let xs = digests("x", 9);
    let mut ys = digests("y", 12);
    ys[..6].copy_from_slice(&xs[..6]);
    let seeds = Some((seed("bob", 7), seed("alice", 7)));
    let a = run_pair(DpParams::default(), &ys, &xs, seeds, false);
    let b = run_pair(DpParams::default(), &ys, &xs, seeds, false);
    assert_eq!(a.ok(), b.ok());
}

/// A receiver that announces a sub-sample larger than its set is refused by Alice.
#[test]
fn an_inflated_sub_sample_is_refused() {
    let (mut lb, mut la) = mem_pair();
    let params = DpParams::default();
    let choice = ProtocolChoice::Ecdh { curve: CURVE };
    let xs = digests("x", 4);
    let alice = std::thread::spawn(move || {
        let hello = Hello::new(choice, Role::Sender, false, 4).with_context(params.context());
        let hs = handshake(&mut la, hello)?;
        run(
            &mut la,
            &hs,
            CURVE,
            params,
            &PsiOptions::default(),
            &xs,
            &NoProgress,
        )
    });
    let hello = Hello::new(choice, Role::Receiver, false, 3).with_context(params.context());
    handshake(&mut lb, hello).unwrap();
    let mut head = vec![MSG_COUNT];
    put_u64(&mut head, 1 << 40);
    lb.send(&head).unwrap();
    let err = alice.join().unwrap().unwrap_err();
    assert!(
        matches!(&err, ProtocolError::PeerMisbehaved(m) if m.contains("sub-sample")),
        "{err}"
    );
}

/// A receiver that follows the protocol but sends `copies` masked copies of `items[0]` as its
/// sub-sample, so Alice would flip `copies` independent coins on one item's membership. Returns
/// the positions Alice chose.
fn repeating_bob(
    link: &mut dyn Link,
    items: &[ItemDigest],
    copies: usize,
    n_alice: usize,
) -> Result<Vec<usize>, ProtocolError> {
    let cipher = new_cipher(CURVE, None)?;
    let opts = PsiOptions::default();
    let ctx = Ctx {
        cipher: &*cipher,
        batch: opts.batch_size,
        tag_len: match_tag_len(items.len() as u64, n_alice as u64, &opts),
        progress: &NoProgress,
    };
    let mut head = vec![MSG_COUNT];
    put_u64(&mut head, copies as u64);
    link.send(&head)?;
    send_masked(link, &ctx, items, &vec![0; copies])?;
    let n = ctx.cipher.point_len();
    let mut tags = Vec::new();
    let mut received = 0;
    while let Some((_, remasked)) = receive_group(link, &ctx, n_alice, &mut received)? {
        for out in remasked {
            tags.extend_from_slice(&tag_bytes(&out, n, ctx.tag_len));
        }
    }
    for chunk in tags.chunks(ctx.batch * ctx.tag_len) {
        link.send(&tag_message(chunk, ctx.tag_len))?;
    }
    crate::positions::receive(link, copies)
}

/// A receiver that repeats one item k times would turn ε into k·ε for it: Alice refuses equal
/// tags in the sub-sample as the peer's fault.
#[test]
fn a_receiver_repeating_an_item_is_refused() {
    let (mut lb, mut la) = mem_pair();
    let params = DpParams::default();
    let choice = ProtocolChoice::Ecdh { curve: CURVE };
    let xs = digests("x", 8);
    let ys = xs[..4].to_vec();
    let alice = std::thread::spawn(move || {
        let hello = Hello::new(choice, Role::Sender, false, 8).with_context(params.context());
        let hs = handshake(&mut la, hello)?;
        run(
            &mut la,
            &hs,
            CURVE,
            params,
            &PsiOptions::default(),
            &xs,
            &NoProgress,
        )
    });
    let hello = Hello::new(choice, Role::Receiver, false, 4).with_context(params.context());
    handshake(&mut lb, hello).unwrap();
    let bob = repeating_bob(&mut lb, &ys, 4, 8);
    drop(lb);
    let err = alice.join().unwrap().unwrap_err();
    assert!(
        matches!(&err, ProtocolError::PeerMisbehaved(m) if m.contains("repeat")),
        "{err}; Bob got {bob:?}"
    );
}

/// An honest receiver whose own set repeats an item is refused before anything is sent, as a
/// caller error rather than a misbehaving peer at Alice.
#[test]
fn a_receiver_set_with_repeats_is_refused_locally() {
    let xs = digests("x", 5);
    let mut ys = digests("y", 4);
    ys[3] = ys[1];
    let err = run_pair(DpParams::default(), &ys, &xs, None, false);
    assert!(
        matches!(&err, Err(ProtocolError::Config(m)) if m.contains("distinct")),
        "{err:?}"
    );
}
