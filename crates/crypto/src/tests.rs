use super::*;

fn supported() -> impl Iterator<Item = Curve> {
    Curve::ALL.into_iter().filter(|c| c.is_supported())
}

fn items(n: usize, salt: u8) -> Vec<ItemDigest> {
    (0..n)
        .map(|i| item_digest(&[&[salt][..], &i.to_le_bytes()].concat()))
        .collect()
}

fn mask(c: &dyn EcdhCipher, xs: &[ItemDigest]) -> Vec<u8> {
    let mut out = vec![0u8; xs.len() * c.point_len()];
    c.hash_and_mask(xs, &mut out).unwrap();
    out
}

fn remask(c: &dyn EcdhCipher, pts: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; pts.len()];
    c.remask(pts, &mut out).unwrap();
    out
}

#[test]
fn masking_commutes_on_every_curve() {
    for curve in supported() {
        let a = new_cipher(curve, None).unwrap();
        let b = new_cipher(curve, None).unwrap();
        let xs = items(17, 1);
        let ab = remask(&*b, &mask(&*a, &xs));
        let ba = remask(&*a, &mask(&*b, &xs));
        assert_eq!(ab, ba, "{curve}");
        // Different items give different points, and keys matter.
        let n = a.point_len();
        assert_ne!(ab[..n], ab[n..2 * n], "{curve}");
        assert_ne!(mask(&*a, &xs), mask(&*b, &xs), "{curve}");
    }
}

#[test]
fn batching_does_not_change_results() {
    for curve in supported() {
        let a = new_cipher(curve, None).unwrap();
        let xs = items(9, 2);
        let whole = mask(&*a, &xs);
        let one_by_one: Vec<u8> = xs
            .iter()
            .flat_map(|x| mask(&*a, std::slice::from_ref(x)))
            .collect();
        assert_eq!(whole, one_by_one, "{curve}");
    }
}

#[test]
fn fixed_key_is_deterministic() {
    // Scalar 7 is canonical in both byte orders.
    let mut le = [0u8; 32];
    le[0] = 7;
    let mut be = [0u8; 32];
    be[31] = 7;
    for curve in supported() {
        let key = if matches!(
            curve,
            Curve::Curve25519 | Curve::Ristretto255 | Curve::FourQ
        ) {
            le
        } else {
            be
        };
        let a = new_cipher(curve, Some(&key)).unwrap();
        let b = new_cipher(curve, Some(&key)).unwrap();
        let xs = items(3, 3);
        assert_eq!(mask(&*a, &xs), mask(&*b, &xs), "{curve}");
    }
}

#[test]
fn bad_secret_keys_are_rejected() {
    let bad = |curve, key: &[u8]| {
        matches!(
            new_cipher(curve, Some(key)),
            Err(CryptoError::InvalidSecretKey(_))
        )
    };
    for curve in supported() {
        assert!(bad(curve, &[1u8; 31]), "{curve}");
        if curve == Curve::Curve25519 {
            continue; // X25519 clamps any 32 bytes into a valid scalar, as RFC 7748 specifies.
        }
        assert!(bad(curve, &[0u8; 32]), "{curve}");
        assert!(bad(curve, &[0xffu8; 32]), "{curve}");
    }
}

#[test]
fn invalid_peer_points_are_typed_errors() {
    for curve in supported() {
        let a = new_cipher(curve, None).unwrap();
        let n = a.point_len();
        let good = mask(&*a, &items(2, 4));
        let mut out = vec![0u8; 2 * n];
        // All-zero bytes: the identity (Ristretto) or no valid SEC1 tag (Weierstrass).
        let mut bad = good.clone();
        bad[n..].fill(0);
        let err = a.remask(&bad, &mut out).unwrap_err();
        assert!(
            matches!(err, CryptoError::InvalidPoint { index: 1, .. }),
            "{curve}: {err}"
        );
        // All-ones: non-canonical / off-curve.
        let mut bad = good.clone();
        bad[..n].fill(0xff);
        assert!(
            matches!(
                a.remask(&bad, &mut out),
                Err(CryptoError::InvalidPoint { index: 0, .. })
            ),
            "{curve}"
        );
        // Ragged input is a typed error, not a panic.
        assert!(
            a.remask(&good[..n + 1], &mut vec![0u8; n + 1]).is_err(),
            "{curve}"
        );
        assert!(
            a.hash_and_mask(&items(2, 4), &mut vec![0u8; n]).is_err(),
            "{curve}"
        );
    }
}

#[test]
fn random_peer_bytes_never_panic() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for curve in supported() {
        let a = new_cipher(curve, None).unwrap();
        let n = a.point_len();
        for _ in 0..200 {
            let bytes: Vec<u8> = (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (state >> 56) as u8
                })
                .collect();
            let _ = a.remask(&bytes, &mut vec![0u8; n]);
        }
    }
}

#[test]
fn curve_names_round_trip() {
    for curve in Curve::ALL {
        assert_eq!(curve.config_name().parse::<Curve>().unwrap(), curve);
    }
    assert_eq!("25519".parse::<Curve>().unwrap(), Curve::Curve25519);
    assert_eq!(
        "CURVE_25519_ELLIGATOR2".parse::<Curve>().unwrap(),
        Curve::Curve25519
    );
    assert!("CURVE_ED448".parse::<Curve>().is_err());
    assert_eq!(
        new_cipher(Curve::FourQ, None).unwrap().curve(),
        Curve::FourQ
    );
}

#[test]
fn ristretto_hash_is_domain_separated_and_deterministic() {
    let p = ristretto::hash_to_group(b"abc").unwrap();
    assert_eq!(p, ristretto::hash_to_group(b"abc").unwrap());
    assert_ne!(p, ristretto::hash_to_group(b"abd").unwrap());
}

#[test]
fn tags_are_prefixes() {
    let t16 = tag_of(b"point", 16);
    let t10 = tag_of(b"point", 10);
    assert_eq!(t16 >> 48, t10 >> 48);
    assert_eq!(t10 & ((1u128 << 48) - 1), 0);
}

#[test]
fn x25519_rejects_low_order_and_non_canonical_points() {
    let a = new_cipher(Curve::Curve25519, None).unwrap();
    let mut out = [0u8; 32];
    // u = 1 has order 4 on Curve25519: the clamped product is the identity (u = 0).
    let mut one = [0u8; 32];
    one[0] = 1;
    assert!(matches!(
        a.remask(&one, &mut out),
        Err(CryptoError::InvalidPoint { index: 0, .. })
    ));
    // p itself is not canonical.
    let mut p = [0xffu8; 32];
    p[0] = 0xed;
    p[31] = 0x7f;
    assert!(matches!(
        a.remask(&p, &mut out),
        Err(CryptoError::InvalidPoint { index: 0, .. })
    ));
}

#[test]
fn x25519_matches_rfc7748_and_rfc9380_through_dalek() {
    // RFC 7748 §5.2, first test vector.
    let hex = |s: &str| -> [u8; 32] {
        let mut a = [0u8; 32];
        for (i, b) in a.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        a
    };
    let k = hex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4");
    let u = hex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c");
    let want = hex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552");
    let mut out = [[0u8; 32]];
    x25519::x25519_serial(&k, &[u], &mut out);
    assert_eq!(out[0], want);
}

#[test]
fn ciphers_report_their_curve() {
    for curve in supported() {
        assert_eq!(new_cipher(curve, None).unwrap().curve(), curve);
    }
}

#[test]
fn every_x25519_backend_this_cpu_runs_matches_the_serial_reference() {
    use x25519::Backend;
    let xs = items(1000, 9);
    let mut slow = vec![[0u8; 32]; xs.len()];
    x25519::hash_to_montgomery_serial(x25519::DST, &xs, &mut slow);
    let mut fast = vec![[0u8; 32]; xs.len()];
    crate::x25519_ifma::hash_to_montgomery_batch(x25519::DST, &xs, &mut fast);
    assert_eq!(fast, slow);
    let k = [0x5au8; 32];
    let mut want = vec![[0u8; 32]; xs.len()];
    x25519::x25519_serial(&k, &slow, &mut want);
    let mut ran = Vec::new();
    for backend in [Backend::Ifma8, Backend::Avx2x4, Backend::Serial] {
        if !backend.is_available() {
            continue;
        }
        let mut got = vec![[0u8; 32]; xs.len()];
        backend.x25519(&k, &slow, &mut got);
        assert_eq!(got, want, "backend {}", backend.name());
        ran.push(backend.name());
    }
    eprintln!(
        "X25519 backends checked: {ran:?}; in use: {}",
        x25519::backend_name()
    );
}
