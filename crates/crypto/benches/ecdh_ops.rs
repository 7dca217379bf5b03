//! Per-item cost of the ECDH-PSI building blocks on each curve, single thread.
//! Run: `cargo bench -p blindjoin-crypto --bench ecdh_ops` (optionally a curve name as filter).

// A benchmark binary: failing loudly is fine.
#![allow(clippy::expect_used, missing_docs)]

use blindjoin_crypto::{Curve, item_digest, new_cipher};
use std::time::Instant;

fn main() {
    // FourQ's cipher splits batches over rayon; one worker keeps every figure per single thread.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    pool.install(run);
}

fn run() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let n = 4096usize;
    let items: Vec<_> = (0..n as u64)
        .map(|i| item_digest(&i.to_le_bytes()))
        .collect();
    println!(
        "{:<16} {:>16} {:>16} {:>16}",
        "curve", "hash+mask µs", "remask µs", "hash-to-curve µs"
    );
    for curve in Curve::ALL.into_iter().filter(|c| c.is_supported()) {
        if filter.as_deref().is_some_and(|f| {
            !curve
                .config_name()
                .to_lowercase()
                .contains(&f.to_lowercase())
        }) {
            continue;
        }
        let c = new_cipher(curve, None).expect("cipher");
        let m = if matches!(curve, Curve::P256 | Curve::Sm2) {
            n / 8
        } else {
            n
        };
        let mut pts = vec![0u8; m * c.point_len()];
        let t = Instant::now();
        c.hash_and_mask(&items[..m], &mut pts).expect("mask");
        let mask = t.elapsed().as_secs_f64() * 1e6 / m as f64;
        let mut out = vec![0u8; pts.len()];
        let t = Instant::now();
        c.remask(&pts, &mut out).expect("remask");
        let remask = t.elapsed().as_secs_f64() * 1e6 / m as f64;
        let h2c = if curve == Curve::Ristretto255 {
            let t = Instant::now();
            for it in &items[..m] {
                std::hint::black_box(blindjoin_crypto::ristretto::hash_to_group(it).expect("h2c"));
            }
            format!("{:.2}", t.elapsed().as_secs_f64() * 1e6 / m as f64)
        } else if curve == Curve::FourQ {
            // Includes one field inversion per item (the encoded form); hash_and_mask batches it.
            let t = Instant::now();
            for it in &items[..m] {
                std::hint::black_box(
                    blindjoin_crypto::fourq::hash_to_subgroup_encoded(it).expect("h2c"),
                );
            }
            format!("{:.2}", t.elapsed().as_secs_f64() * 1e6 / m as f64)
        } else {
            "-".into()
        };
        println!(
            "{:<16} {:>16.2} {:>16.2} {:>16}",
            curve.config_name(),
            mask,
            remask,
            h2c
        );
    }
    if filter
        .as_deref()
        .is_none_or(|f| "curve_25519 x25519".contains(&f.to_lowercase()))
    {
        x25519_backends();
    }
}

/// One X25519 scalar multiplication (the ladder, no hashing) per backend this CPU runs.
fn x25519_backends() {
    use blindjoin_crypto::x25519::{Backend, backend_name};
    let n = 4096u64;
    let us: Vec<[u8; 32]> = (0..n)
        .map(|i| {
            let mut u = [0u8; 32];
            u[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
            u[8] = 9;
            u
        })
        .collect();
    let k = [0x6bu8; 32];
    println!(
        "\nX25519 per scalar multiplication, one core (in use: {}):",
        backend_name()
    );
    for backend in [Backend::Ifma8, Backend::Avx2x4, Backend::Serial] {
        if !backend.is_available() {
            println!("{:<16} {:>16}", backend.name(), "not on this CPU");
            continue;
        }
        let mut out = vec![[0u8; 32]; us.len()];
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            backend.x25519(&k, &us, &mut out);
            best = best.min(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
        println!("{:<16} {:>13.2} µs", backend.name(), best);
    }
}
