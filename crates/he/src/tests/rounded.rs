//! Rounded result ciphertexts: the bit widths and error bound for APSI's presets, and
//! decryption after rounding, serialization and lifting, against the plaintext slots.

use crate::cipher::{decrypt, encrypt, noise_budget};
use crate::eval::{mod_switch_to, relinearize, square};
use crate::rounded::{RoundedCiphertext, rounding_bits, rounding_error_bound};
use crate::{BatchEncoder, Context, HeError, Parameters, PlainModulus, RelinKeys, SecretKey};

fn ctx(n: usize, t: u64, bits: &[u32]) -> Context {
    Context::new(&Parameters::new(n, PlainModulus::Value(t), bits).unwrap()).unwrap()
}

#[test]
fn bits_and_bound_of_the_presets() {
    // τ = ⌈log2 t⌉; b0 = τ + 5, b1 = τ + log2 N + 3; the bound E below 1/8.
    for (n, t, bits, want) in [
        (4096usize, 40961u64, &[40u32, 32, 32][..], (21u32, 31u32)),
        (8192, 65537, &[56, 48, 48][..], (22, 33)),
        (8192, 65537, &[56, 56, 56, 50][..], (22, 33)),
    ] {
        let c = ctx(n, t, bits);
        let tau = (t as f64).log2().ceil() as u32;
        let log_n = (n as f64).log2() as u32;
        assert_eq!(want, (tau + 5, tau + log_n + 3));
        assert_eq!(rounding_bits(&c), Some(want));
        let q = c.level_moduli(1)[0].value() as f64;
        let e = t as f64 / 2f64.powi(want.0 as i32 + 1)
            + t as f64 * n as f64 / 2f64.powi(want.1 as i32 + 1)
            + t as f64 * (n as f64 + 1.0) / (2.0 * q);
        assert_eq!(rounding_error_bound(&c), Some(e));
        assert!(e < 0.125, "{e}");
    }
    // A last prime too small for b1 + 2 bits: nothing is rounded.
    let c = ctx(4096, 40961, &[30, 30]);
    assert_eq!(rounding_bits(&c), None);
}

#[test]
fn rounded_ciphertexts_decrypt_to_the_plaintext() {
    let c = ctx(4096, 40961, &[40, 32, 32]);
    let sk = SecretKey::generate(&c).unwrap();
    let rk = RelinKeys::generate(&c, &sk).unwrap();
    let enc = BatchEncoder::new(&c);
    let t = c.t;
    // Empty (all zero), one slot, every slot.
    let mut state = 7u64;
    let full: Vec<u64> = (0..4096)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % 40961
        })
        .collect();
    for slots in [vec![], vec![40960], full] {
        let mut x = encrypt(&c, &sk, &enc.encode(&slots).unwrap()).unwrap();
        let mut want: Vec<u64> = (0..4096)
            .map(|i| slots.get(i).copied().unwrap_or(0))
            .collect();
        // Fresh, then x², x⁴: less budget each time; every one with ≥ 2 bits left must survive.
        for round in 0..3 {
            let last = mod_switch_to(&c, &x, 1).unwrap();
            let before = noise_budget(&c, &sk, &last).unwrap();
            let r = RoundedCiphertext::round(&c, &last).unwrap();
            let bytes = r.to_bytes(&c);
            assert_eq!(bytes.len(), 14 + 2 + (4096 * (21 + 31)) / 8);
            let back = RoundedCiphertext::from_bytes(&c, &bytes).unwrap();
            assert_eq!(back, r);
            let lifted = back.lift(&c).unwrap();
            if before >= 2 {
                assert_eq!(
                    enc.decode(&decrypt(&c, &sk, &lifted).unwrap()),
                    want,
                    "round {round}"
                );
                // Noise below q/8 plus E < 1/8 stays below q/4: at least 1 bit left.
                if before >= 3 {
                    assert!(
                        noise_budget(&c, &sk, &lifted).unwrap() >= 1,
                        "round {round}"
                    );
                }
            }
            x = relinearize(&c, &square(&c, &x).unwrap(), &rk).unwrap();
            want = want.iter().map(|&v| t.mul(v, v)).collect();
        }
    }
}

#[test]
fn rounding_refuses_other_levels_and_hostile_bytes() {
    let c = ctx(4096, 40961, &[40, 32, 32]);
    let sk = SecretKey::generate(&c).unwrap();
    let enc = BatchEncoder::new(&c);
    let x = encrypt(&c, &sk, &enc.encode(&[1, 2]).unwrap()).unwrap();
    assert!(matches!(
        RoundedCiphertext::round(&c, &x),
        Err(HeError::Mismatch(_))
    ));
    let last = mod_switch_to(&c, &x, 1).unwrap();
    let good = RoundedCiphertext::round(&c, &last).unwrap().to_bytes(&c);
    let mut long = good.clone();
    long.push(0);
    let mut widths = good.clone();
    widths[14] += 1;
    let mut kind = good.clone();
    kind[5] = 1;
    for bad in [good[..good.len() - 1].to_vec(), long, widths, kind, vec![]] {
        assert!(matches!(
            RoundedCiphertext::from_bytes(&c, &bad),
            Err(HeError::Decode { .. })
        ));
    }
    let other = ctx(4096, 40961, &[30, 30]);
    assert!(matches!(
        RoundedCiphertext::from_bytes(&other, &good),
        Err(HeError::Decode { .. })
    ));
}
