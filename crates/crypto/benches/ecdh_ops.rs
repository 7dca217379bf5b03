//! Per-item cost of the ECDH-PSI building blocks on each curve, single thread.
//! Run: `cargo bench -p blindjoin-crypto` (optionally a curve name as filter).

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
}
