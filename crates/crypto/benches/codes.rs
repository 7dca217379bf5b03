//! Speed of the VOLE building blocks that need no peer: the random band OKVS (encode, decode)
//! and the ExAcc7 dual encoding, each on a one- and a two-thread pool.
//!
//! Run: `cargo bench -p blindjoin-crypto --bench codes` (or `-- okvs`, `-- exacc` for one part).
//! `BJ_BENCH_LOG_N=16` runs at 2^16 items instead of 2^20 (a quick check that it still runs).

// A benchmark binary: failing loudly is fine.
#![allow(clippy::expect_used, missing_docs)]

use blindjoin_crypto::exacc::ExAccCode;
use blindjoin_crypto::gf128::Gf128;
use blindjoin_crypto::okvs;
use std::time::Instant;

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let log_n: u32 = std::env::var("BJ_BENCH_LOG_N").map_or(20, |v| v.parse().expect("log n"));
    if wanted("okvs") {
        okvs_timing(log_n);
    }
    if wanted("exacc") {
        exacc_timing(log_n);
    }
}

/// splitmix64: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn u128(&mut self) -> u128 {
        (u128::from(self.next()) << 64) | u128::from(self.next())
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool")
}

/// On-CPU time of the calling thread in ms (Linux): unlike wall time it leaves out the time the
/// thread waited for a core, which matters on a shared machine. Wall time elsewhere. The kernel
/// updates the figure at scheduler ticks (a few ms), so it reads 0 for the sub-millisecond runs
/// of small `BJ_BENCH_LOG_N`; at 2^20 the runs take tens of ms or more.
fn cpu_ms() -> f64 {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map(|ns| ns / 1e6)
        .unwrap_or_else(|| T0.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3)
}

/// `encode`, `decode_batch` and `par_decode_batch` of n random keys: the minimum over 5 runs of
/// the wall time and of the calling thread's on-CPU time.
fn okvs_timing(log_n: u32) {
    let n = 1usize << log_n;
    let mut rng = Rng(61);
    let keys: Vec<[u8; 16]> = (0..n).map(|_| rng.u128().to_le_bytes()).collect();
    let vals: Vec<Gf128> = (0..n).map(|_| Gf128(rng.u128())).collect();
    let seed = rng.u128().to_le_bytes();
    for threads in [1usize, 2] {
        // [encode, decode_batch, par_decode_batch] × [wall, cpu]
        let mut best = [[f64::MAX; 2]; 3];
        let mut m = 0;
        pool(threads).install(|| {
            for _ in 0..5 {
                let mut measure = |k: usize, f: &mut dyn FnMut()| {
                    let (t, c) = (Instant::now(), cpu_ms());
                    f();
                    best[k][0] = best[k][0].min(t.elapsed().as_secs_f64() * 1e3);
                    best[k][1] = best[k][1].min(cpu_ms() - c);
                };
                let mut encoded = None;
                measure(0, &mut || {
                    encoded = Some(okvs::encode(&keys, &vals, seed).expect("encode"));
                });
                let encoded = encoded.expect("encoded");
                m = encoded.len();
                let mut out = vec![Gf128::ZERO; n];
                measure(1, &mut || {
                    encoded.decode_batch(&keys, &mut out).expect("decode");
                });
                assert_eq!(out, vals, "decode_batch");
                let mut out = vec![Gf128::ZERO; n];
                measure(2, &mut || {
                    encoded.par_decode_batch(&keys, &mut out).expect("decode");
                });
                assert_eq!(out, vals, "par_decode_batch");
            }
        });
        println!(
            "OKVS threads = {threads}, n = 2^{log_n}, m = {m} ({:.3} n, {:.1} bytes per item): \
             encode {:.1} ms (calling thread on-CPU {:.1}), decode_batch {:.1} ms (on-CPU \
             {:.1}), par_decode_batch {:.1} ms",
            m as f64 / n as f64,
            (m * 16) as f64 / n as f64,
            best[0][0],
            best[0][1],
            best[1][0],
            best[1][1],
            best[2][0]
        );
    }
}

/// The rate-1/2 ExAcc7 dual encoding of N = 2n u128 (best of 5), and the accumulation alone
/// (a plain prefix XOR, its lower bound).
fn exacc_timing(log_n: u32) {
    let n = 1usize << log_n;
    let code = ExAccCode::rate_half(n, [7u8; 16]).expect("code");
    let mut rng = Rng(6);
    let x0: Vec<u128> = (0..2 * n).map(|_| rng.u128()).collect();
    let mut out = vec![0u128; n];
    let mut best_of_5 = || {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let mut x = x0.clone();
            let t = Instant::now();
            code.dual_encode(&mut x, &mut out).expect("dual_encode");
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    };
    let one_thread = pool(1).install(&mut best_of_5);
    let two_threads = pool(2).install(&mut best_of_5);
    let mut x = x0.clone();
    let t = Instant::now();
    let mut acc = 0u128;
    for v in x.iter_mut() {
        acc ^= *v;
        *v = acc;
    }
    let accum = t.elapsed().as_secs_f64();
    std::hint::black_box(&x);
    println!(
        "ExAcc7 dual_encode N = 2^{} u128: best of 5 = {:.2} ms on one thread, {:.2} ms on two \
         (accumulate alone: {:.2} ms)",
        log_n + 1,
        one_thread * 1e3,
        two_threads * 1e3,
        accum * 1e3,
    );
}
