//! Every SecretFlow APSI preset (`tests/data/*.json`, copied from SecretFlow's
//! `apsi_parameters`) through the parameter check: primes, batching t, and the HE standard's
//! 128-bit bound. The table printed (`--nocapture`) is the one in docs/protocols.md.

// An integration test: `allow-unwrap-in-tests` covers only `#[test]` bodies, not helpers.
#![allow(clippy::unwrap_used)]

use blindjoin_he::params::max_secure_bits;
use blindjoin_he::{Context, HeError, Parameters, PlainModulus};

fn presets() -> Vec<(String, serde_json::Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (p.file_stem().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn params_of(v: &serde_json::Value) -> (usize, PlainModulus, Vec<u32>) {
    let s = &v["seal_params"];
    let n = s["poly_modulus_degree"].as_u64().unwrap() as usize;
    let plain = match s.get("plain_modulus") {
        Some(t) => PlainModulus::Value(t.as_u64().unwrap()),
        None => PlainModulus::Bits(s["plain_modulus_bits"].as_u64().unwrap() as u32),
    };
    let bits = s["coeff_modulus_bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u32)
        .collect();
    (n, plain, bits)
}

#[test]
fn every_preset_is_checked_against_the_128_bit_bound() {
    let all = presets();
    assert_eq!(all.len(), 39, "the 39 presets of SecretFlow's folder");
    let mut passed = 0;
    for (name, v) in &all {
        let (n, plain, bits) = params_of(v);
        let total: u32 = bits.iter().sum();
        let bound = max_secure_bits(n).unwrap();
        let got = Parameters::new(n, plain, &bits);
        // The check agrees with the table computed here.
        assert_eq!(got.is_ok(), total <= bound, "{name}");
        let p = got.unwrap();
        assert_eq!(p.total_coeff_bits(), total);
        let t = p.plain_modulus();
        assert_eq!(t % (2 * n as u64), 1, "{name}: batching t");
        if let PlainModulus::Value(want) = plain {
            assert_eq!(t, want);
        }
        Context::new(&p).unwrap();
        println!("{name:>16}: N={n:>5} t={t:>8} bits={bits:?} log Q={total} <= {bound}: pass");
        passed += 1;
    }
    assert_eq!(passed, all.len());
}

#[test]
fn a_preset_widened_past_the_bound_is_refused() {
    // 16M-1024's [56,56,56,50] sits exactly at N = 8192's 218 bits; one more bit is refused.
    let err = Parameters::new(8192, PlainModulus::Bits(22), &[56, 56, 56, 51]).unwrap_err();
    assert_eq!(
        err,
        HeError::Insecure {
            degree: 8192,
            total_bits: 219,
            max_bits: 218
        }
    );
}

/// Every distinct preset shape: a fresh ciphertext, its square (relinearized when the preset
/// has a special prime), a ct×pt product, and the switch to the last data level all decrypt to
/// the slot-wise plaintext answer with budget left. The printed budgets are docs/protocols.md's.
#[test]
fn every_preset_shape_computes_and_decrypts() {
    use blindjoin_he::eval::{mod_switch_to, multiply_plain, relinearize, square, to_ntt};
    use blindjoin_he::{BatchEncoder, RelinKeys, SecretKey, cipher};
    let mut shapes: Vec<(usize, PlainModulus, Vec<u32>, String)> = Vec::new();
    for (name, v) in presets() {
        let (n, plain, bits) = params_of(&v);
        if !shapes
            .iter()
            .any(|s| s.0 == n && s.1 == plain && s.2 == bits)
        {
            shapes.push((n, plain, bits, name));
        }
    }
    let mut state = 3u64;
    for (n, plain, bits, name) in shapes {
        let params = Parameters::new(n, plain, &bits).unwrap();
        let ctx = Context::new(&params).unwrap();
        let t = params.plain_modulus();
        let sk = SecretKey::generate(&ctx).unwrap();
        let enc = BatchEncoder::new(&ctx);
        let x: Vec<u64> = (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 11) % t
            })
            .collect();
        let sq: Vec<u64> = x
            .iter()
            .map(|&v| ((u128::from(v) * u128::from(v)) % u128::from(t)) as u64)
            .collect();
        let c = cipher::encrypt(&ctx, &sk, &enc.encode(&x).unwrap()).unwrap();
        let dec =
            |c: &blindjoin_he::Ciphertext| enc.decode(&cipher::decrypt(&ctx, &sk, c).unwrap());
        assert_eq!(dec(&c), x, "{name}");
        let fresh = cipher::noise_budget(&ctx, &sk, &c).unwrap();
        // ct×pt by the same values, in NTT form.
        let mut cn = c.clone();
        to_ntt(&ctx, &mut cn).unwrap();
        let pt = enc
            .to_ntt(&enc.encode(&x).unwrap(), ctx.top_level())
            .unwrap();
        let by_pt = multiply_plain(&ctx, &cn, &pt).unwrap();
        assert_eq!(dec(&by_pt), sq, "{name}: ct×pt");
        let pt_budget = cipher::noise_budget(&ctx, &sk, &by_pt).unwrap();
        let mut line =
            format!("{name:>16} N={n:>5} t={t:>8} bits={bits:?}: fresh {fresh}, ct×pt {pt_budget}");
        if ctx.has_special_prime() {
            let rk = RelinKeys::generate(&ctx, &sk).unwrap();
            let s = relinearize(&ctx, &square(&ctx, &c).unwrap(), &rk).unwrap();
            assert_eq!(dec(&s), sq, "{name}: ct×ct");
            let sb = cipher::noise_budget(&ctx, &sk, &s).unwrap();
            assert!(sb > 0, "{name}");
            let low = mod_switch_to(&ctx, &s, 1).unwrap();
            assert_eq!(dec(&low), sq, "{name}: mod switch");
            let lb = cipher::noise_budget(&ctx, &sk, &low).unwrap();
            line += &format!(", ct×ct+relin {sb}, then at level 1 {lb}");
        }
        println!("{line} bits");
    }
}
