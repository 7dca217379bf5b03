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
