//! BFV end to end: every homomorphic result is decrypted and compared slot by slot with the
//! same computation on plaintext vectors mod t.

use crate::cipher::{decrypt, encrypt, encrypt_seeded, noise_budget};
use crate::eval::{
    add, add_plain, extend, from_ntt, mod_switch_to, mod_switch_to_next, multiply,
    multiply_extended, multiply_plain, multiply_plain_accumulate, negate, relinearize, square, sub,
    to_ntt,
};
use crate::{
    BatchEncoder, Ciphertext, Context, HeError, NttPlaintext, Parameters, PlainModulus, RelinKeys,
    SecretKey,
};

struct Setup {
    ctx: Context,
    sk: SecretKey,
}

fn setup(n: usize, t: PlainModulus, bits: &[u32]) -> Setup {
    let params = Parameters::new(n, t, bits).unwrap();
    let ctx = Context::new(&params).unwrap();
    let sk = SecretKey::generate(&ctx).unwrap();
    Setup { ctx, sk }
}

/// APSI 1M-1024-cmp's parameters.
fn small() -> Setup {
    setup(4096, PlainModulus::Value(40961), &[40, 32, 32])
}

/// APSI 16M-1024's parameters (depth for x^8).
fn deep() -> Setup {
    setup(8192, PlainModulus::Bits(22), &[56, 56, 56, 50])
}

fn rand_slots(state: &mut u64, n: usize, t: u64) -> Vec<u64> {
    (0..n)
        .map(|_| {
            *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = *state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % t
        })
        .collect()
}

fn enc(s: &Setup, slots: &[u64]) -> Ciphertext {
    let e = BatchEncoder::new(&s.ctx);
    encrypt(&s.ctx, &s.sk, &e.encode(slots).unwrap()).unwrap()
}

fn dec(s: &Setup, ct: &Ciphertext) -> Vec<u64> {
    let e = BatchEncoder::new(&s.ctx);
    e.decode(&decrypt(&s.ctx, &s.sk, ct).unwrap())
}

fn mulv(t: u64, a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| ((u128::from(x) * u128::from(y)) % u128::from(t)) as u64)
        .collect()
}

fn addv(t: u64, a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().zip(b).map(|(&x, &y)| (x + y) % t).collect()
}

#[test]
fn encode_decode_and_encrypt_decrypt_round_trip() {
    let mut st = 1;
    for s in [
        small(),
        setup(2048, PlainModulus::Value(65537), &[48]),
        setup(8192, PlainModulus::Value(65537), &[56, 48, 48]),
    ] {
        let (n, t) = (s.ctx.degree(), s.ctx.plain_modulus());
        let e = BatchEncoder::new(&s.ctx);
        let random = rand_slots(&mut st, n, t);
        let mut one = vec![0u64; n];
        one[n / 2] = t - 1;
        for slots in [random, vec![0; n], vec![t - 1; n], one] {
            assert_eq!(e.decode(&e.encode(&slots).unwrap()), slots);
            let ct = enc(&s, &slots);
            assert_eq!(dec(&s, &ct), slots);
            let budget = noise_budget(&s.ctx, &s.sk, &ct).unwrap();
            assert!(budget > 0);
            // Seeded: (c0, seed) expands to a ciphertext that decrypts the same.
            let seeded = encrypt_seeded(&s.ctx, &s.sk, &e.encode(&slots).unwrap()).unwrap();
            assert_eq!(dec(&s, &seeded.expand(&s.ctx).unwrap()), slots);
        }
        // Short input: missing slots are zero.
        let ct = enc(&s, &[5, 6]);
        let mut want = vec![0u64; n];
        want[..2].copy_from_slice(&[5, 6]);
        assert_eq!(dec(&s, &ct), want);
        assert!(matches!(e.encode(&[t]), Err(HeError::Mismatch(_))));
        assert!(matches!(
            e.encode(&vec![0; n + 1]),
            Err(HeError::Mismatch(_))
        ));
    }
}

#[test]
fn fresh_noise_budget_is_log_q_minus_log_t_minus_fresh_noise() {
    let s = small();
    let ct = enc(&s, &[1, 2, 3]);
    let b = noise_budget(&s.ctx, &s.sk, &ct).unwrap();
    // Q = 72 bits, t = 16 bits; fresh noise ‖v‖ ≤ ~N·... is a few to ~10 bits.
    assert!((40..=54).contains(&b), "budget {b}");
}

#[test]
fn additions_match_plaintext() {
    let s = small();
    let (n, t) = (s.ctx.degree(), s.ctx.plain_modulus());
    let mut st = 2;
    let (a, b) = (rand_slots(&mut st, n, t), rand_slots(&mut st, n, t));
    let (ca, cb) = (enc(&s, &a), enc(&s, &b));
    assert_eq!(dec(&s, &add(&s.ctx, &ca, &cb).unwrap()), addv(t, &a, &b));
    let diff: Vec<u64> = a.iter().zip(&b).map(|(&x, &y)| (x + t - y) % t).collect();
    assert_eq!(dec(&s, &sub(&s.ctx, &ca, &cb).unwrap()), diff);
    let neg: Vec<u64> = a.iter().map(|&x| (t - x) % t).collect();
    assert_eq!(dec(&s, &negate(&s.ctx, &ca).unwrap()), neg);
    let pb = BatchEncoder::new(&s.ctx).encode(&b).unwrap();
    assert_eq!(
        dec(&s, &add_plain(&s.ctx, &ca, &pb).unwrap()),
        addv(t, &a, &b)
    );
    // ct + ct of all t−1: wraps mod t.
    let top = enc(&s, &vec![t - 1; n]);
    assert_eq!(dec(&s, &add(&s.ctx, &top, &top).unwrap()), vec![t - 2; n]);
}

#[test]
fn ct_times_pt_and_multiply_accumulate_match_plaintext() {
    let s = small();
    let (n, t) = (s.ctx.degree(), s.ctx.plain_modulus());
    let e = BatchEncoder::new(&s.ctx);
    let level = s.ctx.top_level();
    let mut st = 3;
    // 32 terms: more than the 15 products summed before a reduction.
    let mut cts = Vec::new();
    let mut pts = Vec::new();
    let mut want = vec![0u64; n];
    for _ in 0..32 {
        let (x, p) = (rand_slots(&mut st, n, t), rand_slots(&mut st, n, t));
        want = addv(t, &want, &mulv(t, &x, &p));
        let mut c = enc(&s, &x);
        to_ntt(&s.ctx, &mut c).unwrap();
        cts.push(c);
        pts.push(e.to_ntt(&e.encode(&p).unwrap(), level).unwrap());
    }
    let terms: Vec<_> = cts.iter().zip(&pts).collect();
    let mut acc = multiply_plain_accumulate(&s.ctx, &terms).unwrap();
    assert!(acc.is_ntt_form());
    assert_eq!(dec(&s, &acc), want, "decrypts in NTT form too");
    from_ntt(&s.ctx, &mut acc).unwrap();
    assert_eq!(dec(&s, &acc), want);
    assert!(noise_budget(&s.ctx, &s.sk, &acc).unwrap() > 0);

    // Single products, including by zero and by all t−1.
    let x = rand_slots(&mut st, n, t);
    let mut cx = enc(&s, &x);
    to_ntt(&s.ctx, &mut cx).unwrap();
    for p in [vec![0u64; n], vec![t - 1; n], rand_slots(&mut st, n, t)] {
        let pt = e.to_ntt(&e.encode(&p).unwrap(), level).unwrap();
        assert_eq!(
            dec(&s, &multiply_plain(&s.ctx, &cx, &pt).unwrap()),
            mulv(t, &x, &p)
        );
    }
    // Form and level checks.
    let coeff = enc(&s, &x);
    let pt = e.to_ntt(&e.encode(&x).unwrap(), level).unwrap();
    assert!(matches!(
        multiply_plain(&s.ctx, &coeff, &pt),
        Err(HeError::Mismatch(_))
    ));
    let low = e.to_ntt(&e.encode(&x).unwrap(), 1).unwrap();
    assert!(matches!(
        multiply_plain(&s.ctx, &cx, &low),
        Err(HeError::Mismatch(_))
    ));
    assert!(multiply_plain_accumulate(&s.ctx, &[]).is_err());
}

#[test]
fn ntt_plaintexts_round_trip_through_their_residues_and_bad_ones_are_refused() {
    let s = small();
    let (n, t) = (s.ctx.degree(), s.ctx.plain_modulus());
    let e = BatchEncoder::new(&s.ctx);
    let level = s.ctx.top_level();
    let x = rand_slots(&mut 11, n, t);
    let pt = e.to_ntt(&e.encode(&x).unwrap(), level).unwrap();
    let back = NttPlaintext::from_residues(&s.ctx, level, pt.residues().to_vec()).unwrap();
    assert_eq!(back, pt);
    let mut c = enc(&s, &x);
    to_ntt(&s.ctx, &mut c).unwrap();
    assert_eq!(
        dec(&s, &multiply_plain(&s.ctx, &c, &back).unwrap()),
        mulv(t, &x, &x)
    );
    let short = pt.residues()[..n].to_vec();
    assert!(NttPlaintext::from_residues(&s.ctx, level, short.clone()).is_err());
    assert!(NttPlaintext::from_residues(&s.ctx, 1, short).is_ok());
    assert!(NttPlaintext::from_residues(&s.ctx, 3, vec![0; 3 * n]).is_err());
    let mut big = pt.residues().to_vec();
    big[n + 5] = s.ctx.level_moduli(level)[1].value();
    assert!(matches!(
        NttPlaintext::from_residues(&s.ctx, level, big),
        Err(HeError::Mismatch(_))
    ));
}

#[test]
fn an_extended_operand_serves_several_products_and_its_q_rows_are_the_ntt_form() {
    let s = small();
    let rk = RelinKeys::generate(&s.ctx, &s.sk).unwrap();
    let (n, t) = (s.ctx.degree(), s.ctx.plain_modulus());
    let mut st = 5;
    let (x, y, z) = (
        rand_slots(&mut st, n, t),
        rand_slots(&mut st, n, t),
        rand_slots(&mut st, n, t),
    );
    let (cx, cy, cz) = (enc(&s, &x), enc(&s, &y), enc(&s, &z));
    let ex = extend(&s.ctx, &cx).unwrap();
    for (c, v) in [(&cy, &y), (&cz, &z), (&cx, &x)] {
        let prod = multiply_extended(&s.ctx, &ex, &extend(&s.ctx, c).unwrap()).unwrap();
        assert_eq!(prod, multiply(&s.ctx, &cx, c).unwrap(), "same as multiply");
        let prod = relinearize(&s.ctx, &prod, &rk).unwrap();
        assert_eq!(dec(&s, &prod), mulv(t, &x, v));
    }
    let mut nx = cx.clone();
    to_ntt(&s.ctx, &mut nx).unwrap();
    assert_eq!(ex.ntt(), &nx);
    assert!(matches!(extend(&s.ctx, &nx), Err(HeError::Mismatch(_))));
    let three = multiply(&s.ctx, &cx, &cy).unwrap();
    assert!(matches!(extend(&s.ctx, &three), Err(HeError::Mismatch(_))));
}

#[test]
fn ct_times_ct_with_relinearization_matches_plaintext() {
    for s in [
        small(),
        setup(8192, PlainModulus::Value(65537), &[56, 48, 48]),
    ] {
        let (n, t) = (s.ctx.degree(), s.ctx.plain_modulus());
        let rk = RelinKeys::generate(&s.ctx, &s.sk).unwrap();
        let mut st = 4;
        let (a, b) = (rand_slots(&mut st, n, t), rand_slots(&mut st, n, t));
        let (ca, cb) = (enc(&s, &a), enc(&s, &b));
        let fresh = noise_budget(&s.ctx, &s.sk, &ca).unwrap();
        let prod3 = multiply(&s.ctx, &ca, &cb).unwrap();
        assert_eq!(prod3.size(), 3);
        assert_eq!(dec(&s, &prod3), mulv(t, &a, &b), "size 3 decrypts with s²");
        let prod = relinearize(&s.ctx, &prod3, &rk).unwrap();
        assert_eq!(prod.size(), 2);
        assert_eq!(dec(&s, &prod), mulv(t, &a, &b));
        let after = noise_budget(&s.ctx, &s.sk, &prod).unwrap();
        assert!(after > 0 && after < fresh, "{fresh} -> {after}");
        let sq = relinearize(&s.ctx, &square(&s.ctx, &ca).unwrap(), &rk).unwrap();
        assert_eq!(dec(&s, &sq), mulv(t, &a, &a));
        // Edge slots: 0 · x, (t−1)·(t−1) = 1.
        let zero = enc(&s, &vec![0; n]);
        assert_eq!(dec(&s, &multiply(&s.ctx, &zero, &ca).unwrap()), vec![0; n]);
        let top = enc(&s, &vec![t - 1; n]);
        assert_eq!(dec(&s, &square(&s.ctx, &top).unwrap()), vec![1; n]);
        eprintln!("N={n}: fresh budget {fresh} bits, after ct×ct+relin {after} bits");
    }
}

#[test]
fn repeated_squaring_and_a_paterson_stockmeyer_shaped_product() {
    let s = deep();
    let ctx = &s.ctx;
    let (n, t) = (ctx.degree(), ctx.plain_modulus());
    let rk = RelinKeys::generate(ctx, &s.sk).unwrap();
    let e = BatchEncoder::new(ctx);
    let mut st = 5;
    let x = rand_slots(&mut st, n, t);
    let cx = enc(&s, &x);
    let mul = |a: &Ciphertext, b: &Ciphertext| {
        relinearize(ctx, &multiply(ctx, a, b).unwrap(), &rk).unwrap()
    };
    // x^2, x^4, x^8 by repeated squaring (depth 3).
    let mut want = x.clone();
    let mut c = cx.clone();
    let mut budgets = vec![noise_budget(ctx, &s.sk, &c).unwrap()];
    for _ in 0..3 {
        c = mul(&c, &c);
        want = mulv(t, &want, &want);
        assert_eq!(dec(&s, &c), want);
        budgets.push(noise_budget(ctx, &s.sk, &c).unwrap());
    }
    assert!(
        budgets.windows(2).all(|w| w[1] < w[0]) && budgets[3] > 0,
        "{budgets:?}"
    );
    eprintln!("budgets x, x^2, x^4, x^8: {budgets:?}");

    // Paterson–Stockmeyer shape: low powers x^1..x^4, an inner product with plaintext
    // coefficients in NTT form, times the high power x^4, plus another low-degree block:
    // p(x) = (Σ_j a_j x^j)·x^4 + Σ_j b_j x^j, j = 1..4.
    let x2 = mul(&cx, &cx);
    let x3 = mul(&x2, &cx);
    let x4 = mul(&x2, &x2);
    let powers = [cx.clone(), x2, x3, x4.clone()];
    let level = ctx.top_level();
    let block = |coeffs: &[Vec<u64>]| {
        let nt: Vec<Ciphertext> = powers
            .iter()
            .map(|p| {
                let mut p = p.clone();
                to_ntt(ctx, &mut p).unwrap();
                p
            })
            .collect();
        let pts: Vec<_> = coeffs
            .iter()
            .map(|c| e.to_ntt(&e.encode(c).unwrap(), level).unwrap())
            .collect();
        let terms: Vec<_> = nt.iter().zip(&pts).collect();
        let mut r = multiply_plain_accumulate(ctx, &terms).unwrap();
        from_ntt(ctx, &mut r).unwrap();
        r
    };
    let a: Vec<Vec<u64>> = (0..4).map(|_| rand_slots(&mut st, n, t)).collect();
    let b: Vec<Vec<u64>> = (0..4).map(|_| rand_slots(&mut st, n, t)).collect();
    let r = add(ctx, &mul(&block(&a), &x4), &block(&b)).unwrap();
    let mut want = vec![0u64; n];
    let mut xp = vec![1u64; n];
    let mut low = Vec::new();
    for _ in 0..4 {
        xp = mulv(t, &xp, &x);
        low.push(xp.clone());
    }
    let eval_block = |c: &[Vec<u64>]| {
        let mut acc = vec![0u64; n];
        for (cj, pj) in c.iter().zip(&low) {
            acc = addv(t, &acc, &mulv(t, cj, pj));
        }
        acc
    };
    want = addv(t, &want, &mulv(t, &eval_block(&a), &low[3]));
    want = addv(t, &want, &eval_block(&b));
    assert_eq!(dec(&s, &r), want);
    let budget = noise_budget(ctx, &s.sk, &r).unwrap();
    assert!(budget > 0);
    // The response is switched to the last data level before it is sent.
    let last = mod_switch_to(ctx, &r, 1).unwrap();
    assert_eq!(last.level(), 1);
    assert_eq!(dec(&s, &last), want);
    let last_budget = noise_budget(ctx, &s.sk, &last).unwrap();
    assert!(last_budget > 0);
    eprintln!("PS-shaped result: budget {budget} bits at level {level}, {last_budget} at level 1");
}

#[test]
fn modulus_switching_keeps_the_message() {
    let s = setup(8192, PlainModulus::Value(65537), &[56, 56, 30]);
    let ctx = &s.ctx;
    let (n, t) = (ctx.degree(), ctx.plain_modulus());
    let mut st = 6;
    let x = rand_slots(&mut st, n, t);
    let c = enc(&s, &x);
    assert_eq!(c.level(), 2);
    let down = mod_switch_to_next(ctx, &c).unwrap();
    assert_eq!(down.level(), 1);
    assert_eq!(dec(&s, &down), x);
    assert!(noise_budget(ctx, &s.sk, &down).unwrap() > 0);
    assert!(matches!(
        mod_switch_to_next(ctx, &down),
        Err(HeError::Unsupported(_))
    ));
    // NTT form is kept through the switch.
    let mut cn = c.clone();
    to_ntt(ctx, &mut cn).unwrap();
    let dn = mod_switch_to_next(ctx, &cn).unwrap();
    assert!(dn.is_ntt_form());
    assert_eq!(dec(&s, &dn), x);
    // Operands at different levels are refused.
    assert!(matches!(add(ctx, &c, &down), Err(HeError::Mismatch(_))));
    assert!(matches!(
        multiply(ctx, &c, &down),
        Err(HeError::Mismatch(_))
    ));
    assert!(matches!(
        mod_switch_to(ctx, &down, 2),
        Err(HeError::Mismatch(_))
    ));
}

#[test]
fn one_prime_parameters_have_no_relinearization() {
    let s = setup(2048, PlainModulus::Value(65537), &[48]);
    assert!(!s.ctx.has_special_prime());
    assert!(matches!(
        RelinKeys::generate(&s.ctx, &s.sk),
        Err(HeError::Unsupported(_))
    ));
    // ct×pt still works there (APSI's one-prime presets use only that).
    let e = BatchEncoder::new(&s.ctx);
    let (n, t) = (s.ctx.degree(), s.ctx.plain_modulus());
    let mut st = 7;
    let (x, p) = (rand_slots(&mut st, n, t), rand_slots(&mut st, n, t));
    let mut c = enc(&s, &x);
    to_ntt(&s.ctx, &mut c).unwrap();
    let pt = e.to_ntt(&e.encode(&p).unwrap(), 1).unwrap();
    assert_eq!(
        dec(&s, &multiply_plain(&s.ctx, &c, &pt).unwrap()),
        mulv(t, &x, &p)
    );
}

#[test]
fn objects_of_other_parameters_are_refused_not_misused() {
    let a = small();
    let b = setup(8192, PlainModulus::Value(65537), &[56, 48, 48]);
    let rk_b = RelinKeys::generate(&b.ctx, &b.sk).unwrap();
    let ct_b = enc(&b, &[1, 2, 3]);
    let ct_a = enc(&a, &[1, 2, 3]);
    let ctx = &a.ctx;
    let mismatch = |r: crate::Result<Ciphertext>| matches!(r, Err(HeError::Mismatch(_)));
    assert!(mismatch(add(ctx, &ct_a, &ct_b)));
    assert!(mismatch(negate(ctx, &ct_b)));
    assert!(mismatch(multiply(ctx, &ct_b, &ct_b)));
    assert!(mismatch(mod_switch_to_next(ctx, &ct_b)));
    assert!(mismatch(relinearize(
        ctx,
        &multiply(ctx, &ct_a, &ct_a).unwrap(),
        &rk_b
    )));
    let mut c = ct_b.clone();
    assert!(to_ntt(ctx, &mut c).is_err());
    assert!(decrypt(ctx, &a.sk, &ct_b).is_err());
    assert!(decrypt(ctx, &b.sk, &ct_a).is_err());
    assert!(RelinKeys::generate(ctx, &b.sk).is_err());
    let pt_b = BatchEncoder::new(&b.ctx).encode(&[1]).unwrap();
    assert!(encrypt(ctx, &a.sk, &pt_b).is_err());
    assert!(mismatch(add_plain(ctx, &ct_a, &pt_b)));
    let mut cn = ct_a.clone();
    to_ntt(ctx, &mut cn).unwrap();
    let npt_b = BatchEncoder::new(&b.ctx).to_ntt(&pt_b, 1).unwrap();
    assert!(mismatch(multiply_plain(ctx, &cn, &npt_b)));
}

#[test]
fn the_noise_budget_says_when_decryption_fails() {
    // N = 4096 [40,32,32]: one squaring leaves ~25 bits, the next exhausts the budget.
    let s = small();
    let ctx = &s.ctx;
    let (n, t) = (ctx.degree(), ctx.plain_modulus());
    let rk = RelinKeys::generate(ctx, &s.sk).unwrap();
    let mut st = 8;
    let x = rand_slots(&mut st, n, t);
    let mut want = x.clone();
    let mut c = enc(&s, &x);
    let mut seen_exhausted = false;
    for _ in 0..3 {
        c = relinearize(ctx, &square(ctx, &c).unwrap(), &rk).unwrap();
        want = mulv(t, &want, &want);
        let budget = noise_budget(ctx, &s.sk, &c).unwrap();
        let right = dec(&s, &c) == want;
        if budget > 0 {
            assert!(right, "budget {budget} bits but wrong slots");
        } else {
            seen_exhausted = true;
            assert!(!right, "random slots survived an exhausted budget");
        }
    }
    assert!(seen_exhausted);
}

/// The sender shares one context, its keys and ciphertexts across threads (rayon).
#[test]
fn shared_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Context>();
    check::<Ciphertext>();
    check::<crate::SeededCiphertext>();
    check::<crate::NttPlaintext>();
    check::<RelinKeys>();
    check::<SecretKey>();
}
