//! End-to-end tests against a plaintext lookup, the parameter rules on every preset, and a
//! hostile peer on either side.

use crate::error::ApsiError;
use crate::params::{ApsiParams, QueryParams, SealParams, TableParams};
use crate::powers::{PowersDag, target_powers};
use crate::sender_db::DbForm;
use crate::{SenderDb, item, query, serve};
use blindjoin_crypto::{ItemDigest, item_digest};
use blindjoin_he::PlainModulus;
use blindjoin_link::{Link, MemLink, mem_pair_with_timeout};
use std::collections::HashMap;
use std::time::Duration;

fn presets() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../he/tests/data");
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            (
                p.file_stem().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn preset(name: &str) -> ApsiParams {
    let text = presets().into_iter().find(|(n, _)| n == name).unwrap().1;
    ApsiParams::from_json(&text).unwrap()
}

/// A small test preset: N = 4096, t = 40961 (15-bit felts, 6 per item: 90 bits), two bundle
/// indices of 682 bins, 3 hash functions, powers 1..=8 (depth 1 to reach 16).
pub(crate) fn small(
    max_items_per_bin: usize,
    ps_low_degree: usize,
    powers: &[usize],
) -> ApsiParams {
    ApsiParams::new(
        TableParams {
            hash_func_count: 3,
            table_size: 1364,
            max_items_per_bin,
        },
        6,
        QueryParams {
            ps_low_degree,
            query_powers: powers.to_vec(),
        },
        SealParams {
            poly_modulus_degree: 4096,
            plain_modulus: PlainModulus::Value(40961),
            coeff_modulus_bits: vec![40, 32, 32],
        },
    )
    .unwrap()
}

/// Paterson–Stockmeyer with L = 3 on N = 8192 [56,48,48] (depth 2 in all), 14 items a bin.
pub(crate) fn paterson_stockmeyer_l3() -> ApsiParams {
    ApsiParams::new(
        TableParams {
            hash_func_count: 3,
            table_size: 1638,
            max_items_per_bin: 14,
        },
        5,
        QueryParams {
            ps_low_degree: 3,
            query_powers: vec![1, 2, 3, 4, 8],
        },
        SealParams {
            poly_modulus_degree: 8192,
            plain_modulus: PlainModulus::Value(65537),
            coeff_modulus_bits: vec![56, 48, 48],
        },
    )
    .unwrap()
}

pub(crate) fn digests(prefix: &str, n: usize) -> Vec<ItemDigest> {
    (0..n)
        .map(|i| item_digest(format!("{prefix}{i}").as_bytes()))
        .collect()
}

fn link_pair() -> (MemLink, MemLink) {
    mem_pair_with_timeout(Duration::from_secs(120))
}

/// Runs one query; returns the receiver's answer and the sender's outcome.
pub(crate) fn run(
    db: &SenderDb,
    params: Option<&ApsiParams>,
    q: &[ItemDigest],
) -> crate::Result<Vec<Option<Vec<u8>>>> {
    run_capped(db, params, q, q.len())
}

/// [`run`] with the sender evaluating at most `max_items` OPRF points.
fn run_capped(
    db: &SenderDb,
    params: Option<&ApsiParams>,
    q: &[ItemDigest],
    max_items: usize,
) -> crate::Result<Vec<Option<Vec<u8>>>> {
    let (mut a, mut b) = link_pair();
    std::thread::scope(|s| {
        let h = s.spawn(move || serve(&mut a, db, max_items));
        let got = query(&mut b, params, q);
        drop(b);
        let served = h.join().unwrap();
        match (got, served) {
            (Ok(g), s) => {
                s.unwrap();
                Ok(g)
            }
            // The receiver saw the link close: the sender's error says why.
            (Err(ApsiError::Link(_)), Err(e)) => Err(e),
            (Err(e), _) => Err(e),
        }
    })
}

/// The plaintext answer, labels zero-padded to `label_len`.
pub(crate) fn expected(
    items: &[ItemDigest],
    labels: Option<&[Vec<u8>]>,
    label_len: usize,
    q: &[ItemDigest],
) -> Vec<Option<Vec<u8>>> {
    let map: HashMap<ItemDigest, Vec<u8>> = items
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut l = labels.map_or(Vec::new(), |l| l[i].clone());
            l.resize(label_len, 0);
            (*d, l)
        })
        .collect();
    q.iter().map(|d| map.get(d).cloned()).collect()
}

pub(crate) fn labels_for(n: usize, len: usize, seed: u8) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            (0..len - (i % 2).min(len - 1))
                .map(|j| (i * 31 + j * 7) as u8 ^ seed)
                .collect()
        })
        .collect()
}

#[test]
fn every_preset_parses_and_passes_apsis_rules() {
    let all = presets();
    assert_eq!(all.len(), 39);
    for (name, text) in &all {
        let p = ApsiParams::from_json(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let dag = PowersDag::new(&p).unwrap();
        assert!((80..=128).contains(&p.item_bits()), "{name}");
        assert_eq!(p.table.table_size % p.bins_per_bundle(), 0, "{name}");
        let (back, used) = ApsiParams::from_bytes(&p.to_bytes()).unwrap();
        assert_eq!(used, p.to_bytes().len());
        assert_eq!(back.to_bytes(), p.to_bytes());
        println!(
            "{name:>16}: items {} bits, {} bundle indices, depth {}, {} products",
            p.item_bits(),
            p.bundle_idx_count(),
            dag.depth(),
            dag.products()
        );
    }
}

#[test]
fn derived_quantities_of_two_presets() {
    let p = preset("1M-1024-cmp");
    assert_eq!(p.bits_per_felt(), 15); // ⌊log2 40961⌋
    assert_eq!(p.item_bits(), 90);
    assert_eq!(p.bins_per_bundle(), 682); // ⌊4096 / 6⌋
    assert_eq!(p.bundle_idx_count(), 3); // 2046 / 682
    let dag = PowersDag::new(&p).unwrap();
    assert_eq!(dag.depth(), 1);
    assert_eq!(dag.products(), 101 - 16);
    let p = preset("1M-1-32");
    assert_eq!(p.bits_per_felt(), 16);
    assert_eq!(p.item_bits(), 80);
    assert_eq!(p.bins_per_bundle(), 1638);
    // 32-byte labels with 16-byte nonces: 384 bits in parts of 5 × 16 bits.
    assert_eq!(item::label_parts(32, 16, 16, 5), 5);
    assert_eq!(target_powers(10, 2), vec![1, 2, 3, 6, 9]);
    assert_eq!(target_powers(4, 0), vec![1, 2, 3, 4]);
}

#[test]
fn each_rule_names_its_field() {
    let base = || {
        (
            TableParams {
                hash_func_count: 3,
                table_size: 1364,
                max_items_per_bin: 16,
            },
            6usize,
            QueryParams {
                ps_low_degree: 0,
                query_powers: vec![1, 2, 3, 4, 5, 6, 7, 8],
            },
            SealParams {
                poly_modulus_degree: 4096,
                plain_modulus: PlainModulus::Value(40961),
                coeff_modulus_bits: vec![40, 32, 32],
            },
        )
    };
    let field = |r: crate::Result<ApsiParams>| match r {
        Err(ApsiError::Params { field, .. }) => field,
        other => panic!("{:?}", other.map(|_| ())),
    };
    let (t, f, q, s) = base();
    assert!(ApsiParams::new(t, f, q, s).is_ok());
    let (mut t, f, q, s) = base();
    t.table_size = 0;
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "table_params.table_size"
    );
    let (mut t, f, q, s) = base();
    t.table_size = 1000;
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "table_params.table_size"
    );
    let (mut t, f, q, s) = base();
    t.max_items_per_bin = 0;
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "table_params.max_items_per_bin"
    );
    let (mut t, f, q, s) = base();
    t.hash_func_count = 9;
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "table_params.hash_func_count"
    );
    let (t, _, q, s) = base();
    // 5 felts of 15 bits: 75 < 80.
    assert_eq!(
        field(ApsiParams::new(t, 5, q, s)),
        "item_params.felts_per_item"
    );
    let (t, _, q, s) = base();
    assert_eq!(
        field(ApsiParams::new(t, 1, q, s)),
        "item_params.felts_per_item"
    );
    let (t, f, mut q, s) = base();
    q.query_powers = vec![2, 3];
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "query_params.query_powers"
    );
    let (t, f, mut q, s) = base();
    q.query_powers = vec![0, 1];
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "query_params.query_powers"
    );
    let (t, f, mut q, s) = base();
    q.query_powers = vec![1, 17];
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "query_params.query_powers"
    );
    let (t, f, mut q, s) = base();
    q.ps_low_degree = 17;
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "query_params.ps_low_degree"
    );
    let (t, f, mut q, s) = base();
    q.ps_low_degree = 3;
    q.query_powers = vec![1, 2, 3, 5];
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "query_params.query_powers"
    );
    let (t, f, q, mut s) = base();
    s.coeff_modulus_bits = vec![40, 40, 30];
    assert_eq!(field(ApsiParams::new(t, f, q, s)), "seal_params");
    let (t, f, q, mut s) = base();
    s.plain_modulus = PlainModulus::Value(65539);
    assert_eq!(field(ApsiParams::new(t, f, q, s)), "seal_params");
    // One prime and powers needing a product.
    let (t, f, q, mut s) = base();
    s.coeff_modulus_bits = vec![60];
    assert_eq!(
        field(ApsiParams::new(t, f, q, s)),
        "seal_params.coeff_modulus_bits"
    );
    assert!(matches!(
        ApsiParams::from_json("{}"),
        Err(ApsiError::Params {
            field: "table_params.hash_func_count",
            ..
        })
    ));
}

#[test]
fn felts_and_labels_round_trip() {
    let item = [0xA5u8; 16];
    let f = item::item_felts(&item, 15, 6);
    assert!(f.iter().all(|&x| x < 1 << 15));
    assert_eq!(item::from_felts(&f, 15, 11), item[..11].to_vec());
    let key = [7u8; 16];
    let enc = item::encrypt_label(&key, &[1, 2, 3], b"hello", 8);
    assert_eq!(enc.len(), 11);
    assert_eq!(item::decrypt_label(&key, &enc, 3), b"hello\0\0\0".to_vec());
    assert_ne!(
        item::decrypt_label(&[8u8; 16], &enc, 3),
        b"hello\0\0\0".to_vec()
    );
}

#[test]
fn unlabeled_against_a_plaintext_lookup() {
    let params = small(16, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let items = digests("s", 300);
    let db = SenderDb::build(params.clone(), &items, None, 0, 0).unwrap();
    // Half in, half out, one duplicated.
    let mut q = digests("s", 20);
    q.extend(digests("x", 20));
    q.push(q[3]);
    let got = run(&db, Some(&params), &q).unwrap();
    assert_eq!(got, expected(&items, None, 0, &q));
    assert_eq!(got.iter().filter(|x| x.is_some()).count(), 21);
    // Empty query, no match, all match (every DB item, up to the table's load).
    assert_eq!(
        run(&db, Some(&params), &[]).unwrap(),
        Vec::<Option<Vec<u8>>>::new()
    );
    let none = digests("y", 50);
    assert!(run(&db, None, &none).unwrap().iter().all(Option::is_none));
    let all = digests("s", 300);
    assert!(run(&db, None, &all).unwrap().iter().all(Option::is_some));
    // An empty DB answers nothing.
    let empty = SenderDb::build(params.clone(), &[], None, 0, 0).unwrap();
    assert_eq!(empty.bundle_counts(), vec![0, 0]);
    assert_eq!(run(&empty, None, &q).unwrap(), vec![None; q.len()]);
}

#[test]
fn labels_of_1_and_300_bytes_and_a_one_row_db() {
    let params = small(16, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    for (len, nonce, n) in [(1usize, 16usize, 200usize), (300, 16, 60), (32, 0, 1)] {
        let items = digests("l", n);
        let labels = labels_for(n, len, len as u8);
        let db = SenderDb::build(params.clone(), &items, Some(&labels), len, nonce).unwrap();
        let mut q = digests("l", n.min(30));
        q.extend(digests("m", 5));
        q.push(q[0]);
        let got = run(&db, Some(&params), &q).unwrap();
        assert_eq!(
            got,
            expected(&items, Some(&labels), len, &q),
            "{len}-byte labels"
        );
        assert!(got[0].is_some());
    }
}

#[test]
fn overflow_bundles_and_paterson_stockmeyer() {
    // Bins of 4: 3000 items × 3 locations over 1364 bins need several bundles per index.
    let params = small(4, 0, &[1, 2]);
    let items = digests("o", 3000);
    let labels = labels_for(3000, 5, 1);
    let db = SenderDb::build(params.clone(), &items, Some(&labels), 5, 4).unwrap();
    assert!(
        db.bundle_counts().iter().all(|&c| c >= 2),
        "{:?}",
        db.bundle_counts()
    );
    let mut q = digests("o", 40);
    q.extend(digests("p", 10));
    assert_eq!(
        run(&db, None, &q).unwrap(),
        expected(&items, Some(&labels), 5, &q)
    );
    // Paterson–Stockmeyer with L = 3 on N = 8192 (depth 2 in all).
    let ps = paterson_stockmeyer_l3();
    let items = digests("ps", 250);
    let labels = labels_for(250, 20, 3);
    let db = SenderDb::build(ps.clone(), &items, Some(&labels), 20, 8).unwrap();
    let mut q = digests("ps", 25);
    q.extend(digests("pq", 5));
    assert_eq!(
        run(&db, Some(&ps), &q).unwrap(),
        expected(&items, Some(&labels), 20, &q)
    );
    // The saved DB keeps the plaintexts Paterson–Stockmeyer adds in coefficient form.
    for form in [DbForm::Ntt, DbForm::Packed] {
        let back = SenderDb::from_bytes(&db.to_bytes(form)).unwrap();
        assert_eq!(
            run(&back, Some(&ps), &q).unwrap(),
            expected(&items, Some(&labels), 20, &q),
            "{form:?}"
        )
    }
}

/// Plays a peer that sends `msgs` (after reading what arrives first when `read_first`).
fn hostile(read_first: bool, msgs: Vec<Vec<u8>>) -> impl FnOnce(MemLink) + Send + 'static {
    move |mut l: MemLink| {
        if read_first {
            let _ = l.recv();
        }
        for m in msgs {
            if l.send(&m).is_err() {
                return;
            }
            let _ = l.recv();
        }
    }
}

#[test]
fn a_hostile_sender_gets_a_typed_error() {
    let params = small(16, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let other = small(8, 0, &[1, 2, 3, 4]);
    let q = digests("h", 3);
    let good_params = crate::wire::encode_params(&params, 0, 0);
    let cases: Vec<Vec<Vec<u8>>> = vec![
        vec![vec![]],
        vec![vec![0x13, 1, 2, 3]],
        vec![(0..200u8).collect()],
        vec![good_params[..good_params.len() - 1].to_vec()],
        vec![crate::wire::encode_params(&params, 5000, 0)],
        vec![good_params.clone(), vec![crate::wire::APSI_OPRF_REPLY; 40]],
        vec![good_params.clone(), vec![crate::wire::APSI_OPRF_REPLY]],
    ];
    for msgs in cases {
        let (a, mut b) = link_pair();
        let play = hostile(false, msgs);
        let peer = std::thread::spawn(move || play(a));
        let err = query(&mut b, Some(&params), &q).unwrap_err();
        assert!(
            matches!(
                err,
                ApsiError::PeerMisbehaved(_) | ApsiError::Link(_) | ApsiError::Crypto(_)
            ),
            "{err}"
        );
        drop(b);
        peer.join().unwrap();
    }
    // Other parameters.
    let db = SenderDb::build(other, &digests("h", 10), None, 0, 0).unwrap();
    assert!(matches!(
        run(&db, Some(&params), &q),
        Err(ApsiError::ParamsMismatch(_))
    ));
}

/// The sender evaluates no more OPRF points than the caller charged to its key: a receiver
/// that queries more is refused before any point is evaluated (it gets no OPRF reply).
#[test]
fn the_sender_evaluates_at_most_the_charged_points() {
    let params = small(16, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let db = SenderDb::build(params, &digests("c", 10), None, 0, 0).unwrap();
    let q = digests("c", 3);
    let err = run_capped(&db, None, &q, 2).unwrap_err();
    let ApsiError::PeerMisbehaved(m) = &err else {
        panic!("{err}");
    };
    assert!(m.contains("queries 3 items, more than the 2"), "{m}");
    assert_eq!(run_capped(&db, None, &q, 3).unwrap().len(), 3);
}

/// A receiver adopting the sender's parameters refuses ones that would make it encrypt more
/// than [`crate::receiver::MAX_ADOPTED_QUERY_CTS`] ciphertexts, before any work (it sends no
/// OPRF query); every preset is within the cap.
#[test]
fn a_receiver_does_not_adopt_parameters_past_its_work_cap() {
    use crate::receiver::MAX_ADOPTED_QUERY_CTS;
    for (name, text) in presets() {
        let p = ApsiParams::from_json(&text).unwrap();
        let cts = p.bundle_idx_count() * p.query.query_powers.len();
        assert!(cts <= MAX_ADOPTED_QUERY_CTS / 14, "{name}: {cts}");
    }
    // N = 4096, 5 felts of 16 bits an item (819 bins a bundle): 64 indices × 17 powers.
    let costly = ApsiParams::new(
        TableParams {
            hash_func_count: 1,
            table_size: 64 * 819,
            max_items_per_bin: 17,
        },
        5,
        QueryParams {
            ps_low_degree: 0,
            query_powers: (1..=17).collect(),
        },
        SealParams {
            poly_modulus_degree: 4096,
            plain_modulus: PlainModulus::Value(65537),
            coeff_modulus_bits: vec![40, 32, 32],
        },
    )
    .unwrap();
    assert_eq!(
        costly.bundle_idx_count() * costly.query.query_powers.len(),
        1088
    );
    let (a, mut b) = link_pair();
    let offer = crate::wire::encode_params(&costly, 0, 0);
    let sender = std::thread::spawn(move || {
        let mut a = a;
        a.send(&offer).unwrap();
        // Nothing follows: the receiver stops before its OPRF query.
        a.recv().is_err()
    });
    let err = query(&mut b, None, &digests("q", 2)).unwrap_err();
    assert!(
        matches!(
            err,
            ApsiError::PeerParamsTooCostly {
                ciphertexts: 1088,
                cap: 1024,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("params_file"), "{err}");
    drop(b);
    assert!(sender.join().unwrap());
}

#[test]
fn a_hostile_receiver_gets_a_typed_error() {
    let params = small(16, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let ctx = params.context().unwrap();
    let db = SenderDb::build(params.clone(), &digests("r", 10), None, 0, 0).unwrap();
    let one_point = {
        let k = blindjoin_crypto::oprf::OprfScalar::random(crate::sender_db::OPRF_CURVE).unwrap();
        let mut p = vec![0u8; 32];
        k.hash_and_mul(&digests("r", 1), &mut p).unwrap();
        crate::wire::encode_oprf_query(&p)
    };
    let head = crate::wire::encode_query_head(&ctx, None, 16);
    let cases: Vec<Vec<Vec<u8>>> = vec![
        vec![(0..100u8).collect()],
        vec![vec![crate::wire::APSI_OPRF_QUERY, 0xff, 0xff, 0xff, 0xff]],
        vec![vec![crate::wire::APSI_OPRF_QUERY, 1, 0, 0, 0, 9, 9]],
        vec![{
            let mut m = vec![crate::wire::APSI_OPRF_QUERY, 1, 0, 0, 0];
            m.extend([0xffu8; 32]);
            m
        }],
        // Past the OPRF: keys missing (the powers need them), then wrong counts and bad cts.
        vec![one_point.clone(), head.clone()],
        vec![
            one_point.clone(),
            crate::wire::encode_query_head(&ctx, None, 15),
        ],
        vec![
            one_point.clone(),
            vec![crate::wire::APSI_QUERY_HEAD, 0, 0, 0],
        ],
    ];
    for msgs in cases {
        let (mut a, b) = link_pair();
        let play = hostile(true, msgs);
        let peer = std::thread::spawn(move || play(b));
        let err = serve(&mut a, &db, usize::MAX).unwrap_err();
        assert!(
            matches!(err, ApsiError::PeerMisbehaved(_) | ApsiError::Link(_)),
            "{err}"
        );
        drop(a);
        peer.join().unwrap();
    }
    // Truncated, oversized and random query ciphertexts.
    let sk = blindjoin_he::SecretKey::generate(&ctx).unwrap();
    let rk = blindjoin_he::RelinKeys::generate(&ctx, &sk).unwrap();
    let enc = blindjoin_he::BatchEncoder::new(&ctx);
    let ct = blindjoin_he::cipher::encrypt_seeded(&ctx, &sk, &enc.encode(&[1]).unwrap()).unwrap();
    let good = crate::wire::encode_query_ct(&ctx, &ct);
    let mut long = good.clone();
    long.push(0);
    let mut random = vec![crate::wire::APSI_QUERY_CT];
    random.extend((0..good.len()).map(|i| (i * 131) as u8));
    for bad in [good[..good.len() / 2].to_vec(), long, random] {
        assert!(matches!(
            crate::wire::decode_query_ct(&ctx, &bad),
            Err(ApsiError::PeerMisbehaved(_))
        ));
    }
    let head = crate::wire::encode_query_head(&ctx, Some(&rk), 16);
    assert!(crate::wire::decode_query_head(&ctx, &head, 16).is_ok());
    assert!(crate::wire::decode_query_head(&ctx, &head[..head.len() - 5], 16).is_err());
    // A result of another bundle index or part count.
    let fresh = blindjoin_he::cipher::encrypt(&ctx, &sk, &enc.encode(&[1]).unwrap()).unwrap();
    let res = crate::wire::BundleResult {
        index: 0,
        matching: blindjoin_he::eval::mod_switch_to(&ctx, &fresh, 1).unwrap(),
        labels: vec![],
    };
    let msg = crate::wire::encode_result(&ctx, &res);
    let back = crate::wire::decode_result(&ctx, &msg, 2, 0).unwrap();
    let dec = |c| enc.decode(&blindjoin_he::cipher::decrypt(&ctx, &sk, c).unwrap());
    assert_eq!(dec(&back.matching), dec(&res.matching));
    // A whole (unrounded) ciphertext where the parameters round is refused.
    let whole = crate::wire::BundleResult {
        index: 0,
        matching: fresh,
        labels: vec![],
    };
    assert!(matches!(
        crate::wire::decode_result(&ctx, &crate::wire::encode_result(&ctx, &whole), 2, 0),
        Err(ApsiError::PeerMisbehaved(_))
    ));
    assert!(crate::wire::decode_result(&ctx, &msg, 0, 0).is_err());
    assert!(crate::wire::decode_result(&ctx, &msg, 2, 1).is_err());
    assert!(crate::wire::decode_result(&ctx, &msg[..msg.len() - 3], 2, 0).is_err());
}

#[test]
fn cuckoo_places_every_item_once_or_fails_cleanly() {
    let items: Vec<item::HashedItem> = (0..600u32)
        .map(|i| {
            let mut h = [0u8; 16];
            h[..4].copy_from_slice(&i.to_le_bytes());
            h[4..8].copy_from_slice(&(i.wrapping_mul(2654435761)).to_le_bytes());
            h
        })
        .collect();
    let table = crate::receiver::cuckoo(&items, 3, 1364).unwrap();
    let mut seen: Vec<u32> = table.iter().flatten().copied().collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..600).collect::<Vec<_>>());
    for (bin, u) in table.iter().enumerate() {
        if let Some(u) = u {
            assert!(item::locations(&items[*u as usize], 3, 1364).contains(&bin));
        }
    }
    assert!(matches!(
        crate::receiver::cuckoo(&items, 3, 500),
        Err(ApsiError::Cuckoo {
            items: 600,
            table_size: 500
        })
    ));
    // One hash function and more items than a few bins: collisions cannot be resolved.
    assert!(matches!(
        crate::receiver::cuckoo(&items[..50], 1, 60),
        Err(ApsiError::Cuckoo { .. })
    ));
    assert_eq!(crate::receiver::cuckoo(&[], 1, 60).unwrap(), vec![None; 60]);
}

#[test]
fn presets_end_to_end_at_a_small_db() {
    // Plain and Paterson–Stockmeyer evaluation, one and three primes, 32- and 300-byte labels,
    // at the presets' own N, t and primes (the noise is the presets').
    for (name, label_len) in [
        ("1M-1024-cmp", 0usize),
        ("1M-1024-com", 0),
        ("1M-1-32", 32),
        ("100-1-300", 300),
        ("100K-10-300", 300),
    ] {
        let params = preset(name);
        let n = 1500;
        let items = digests(name, n);
        let labels = labels_for(n, label_len.max(1), 5);
        let db = if label_len > 0 {
            SenderDb::build(params.clone(), &items, Some(&labels), label_len, 16).unwrap()
        } else {
            SenderDb::build(params.clone(), &items, None, 0, 0).unwrap()
        };
        let lab = (label_len > 0).then_some(&labels[..]);
        // One hash function: a single query item never fails the cuckoo table.
        let queries: Vec<Vec<ItemDigest>> = if params.table.hash_func_count == 1 {
            vec![vec![items[7]], digests("nope", 1)]
        } else {
            let mut q = digests(name, 20);
            q.extend(digests("nope", 20));
            vec![q]
        };
        for q in queries {
            let got = run(&db, Some(&params), &q).unwrap();
            assert_eq!(got, expected(&items, lab, label_len, &q), "{name}");
        }
    }
}

#[test]
fn message_ids_are_the_registered_ones() {
    for (ours, b) in crate::wire::ALL {
        let registered = blindjoin_link::wire::ALL
            .iter()
            .find(|(name, _)| name == ours)
            .map(|(_, id)| *id);
        assert_eq!(registered, Some([*b].as_slice()), "{ours}");
    }
}
