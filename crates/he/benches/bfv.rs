//! Speed of the BFV operations APSI's sender and receiver spend their time in, one thread, at
//! two of SecretFlow's presets: N = 4096 [40,32,32] t = 40961 (1M-1024-cmp) and N = 8192
//! [56,48,48] t = 65537 (1M-1-32). Operations at the top data level.
//!
//! Also N = 8192 [56,56,56,50] (log Q = 218, SecretFlow's 16M presets), the shape of the SEAL
//! figure below.
//!
//! Run: `cargo bench -p blindjoin-he --bench bfv` (or `-- 4096`, `-- 8192-218` for one set).
//! `BJ_BENCH_REPS=n` repeats each operation n times (default 20).
//!
//! For comparison (research briefs `labeled_psi_and_scale_out.md` §0.3, `rust_deps.md`: same
//! machine, one core, N = 8192, four ~55-bit primes, log Q = 218): SEAL 4.x (no HEXL) ct×ct+relin
//! 12.6 ms, fhe.rs 12.9 ms.

// A benchmark binary: failing loudly is fine.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use blindjoin_he::eval::{
    extend, from_ntt, mod_switch_to_next, multiply, multiply_extended, multiply_plain_accumulate,
    relinearize, to_ntt,
};
use blindjoin_he::ntt::NttTables;
use blindjoin_he::{
    BatchEncoder, Ciphertext, Context, Parameters, PlainModulus, RelinKeys, SecretKey, cipher,
};
use std::hint::black_box;
use std::time::Instant;

/// On-CPU time of the calling thread in ms (Linux; wall time elsewhere): it leaves out time
/// spent waiting for a core on a shared machine.
fn cpu_ms() -> f64 {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map(|ns| ns / 1e6)
        .unwrap_or_else(|| T0.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3)
}

/// Wall ms of `f`: the minimum and the median over `reps` runs (after one warm-up run), and
/// the mean CPU ms. On a shared machine the minimum is the figure least disturbed by other
/// processes; the CPU time is coarse (scheduler ticks) for sub-millisecond runs.
fn time<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, f64, f64) {
    black_box(f());
    let c0 = cpu_ms();
    let mut walls: Vec<f64> = (0..reps)
        .map(|_| {
            let w0 = Instant::now();
            black_box(f());
            w0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let cpu = (cpu_ms() - c0) / reps as f64;
    walls.sort_by(f64::total_cmp);
    (walls[0], walls[reps / 2], cpu)
}

fn report(name: &str, (min, median, cpu): (f64, f64, f64)) {
    println!("  {name:<40} min {min:>8.3} ms  median {median:>8.3} ms  cpu {cpu:>8.3} ms");
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn run(n: usize, t: u64, bits: &[u32], reps: usize) {
    let params = Parameters::new(n, PlainModulus::Value(t), bits).expect("params");
    let ctx = Context::new(&params).expect("context");
    println!("N = {n}, coeff_modulus_bits = {bits:?}, t = {t}, {reps} reps");
    let sk = SecretKey::generate(&ctx).unwrap();
    let rk = RelinKeys::generate(&ctx, &sk).unwrap();
    let enc = BatchEncoder::new(&ctx);
    let level = ctx.top_level();
    let mut st = 1u64;
    let mut slots = || (0..n).map(|_| splitmix(&mut st) % t).collect::<Vec<_>>();

    // NTT: one forward + one inverse over the data primes of a polynomial.
    let tables: Vec<NttTables> = params.coeff_modulus()[..level]
        .iter()
        .map(|&q| NttTables::new(blindjoin_he::modarith::Modulus::new(q).unwrap(), n).unwrap())
        .collect();
    let mut row: Vec<Vec<u64>> = params.coeff_modulus()[..level]
        .iter()
        .map(|&q| (0..n as u64).map(|i| i % q).collect())
        .collect();
    report(
        &format!("NTT forward, {level} primes"),
        time(reps * 10, || {
            for (r, tb) in row.iter_mut().zip(&tables) {
                tb.forward(r);
            }
        }),
    );
    report(
        &format!("NTT inverse, {level} primes"),
        time(reps * 10, || {
            for (r, tb) in row.iter_mut().zip(&tables) {
                tb.inverse(r);
            }
        }),
    );

    let pt = enc.encode(&slots()).unwrap();
    report(
        "encrypt (seeded)",
        time(reps, || cipher::encrypt_seeded(&ctx, &sk, &pt).unwrap()),
    );
    let a = cipher::encrypt(&ctx, &sk, &enc.encode(&slots()).unwrap()).unwrap();
    let b = cipher::encrypt(&ctx, &sk, &enc.encode(&slots()).unwrap()).unwrap();
    report(
        "decrypt",
        time(reps, || cipher::decrypt(&ctx, &sk, &a).unwrap()),
    );

    // ct×pt multiply-accumulate over 32 terms, NTT form (APSI's inner product).
    let cts: Vec<Ciphertext> = (0..32)
        .map(|_| {
            let mut c = cipher::encrypt(&ctx, &sk, &enc.encode(&slots()).unwrap()).unwrap();
            to_ntt(&ctx, &mut c).unwrap();
            c
        })
        .collect();
    let pts: Vec<_> = (0..32)
        .map(|_| enc.to_ntt(&enc.encode(&slots()).unwrap(), level).unwrap())
        .collect();
    let terms: Vec<_> = cts.iter().zip(&pts).collect();
    report(
        "ct×pt multiply-accumulate, 32 terms",
        time(reps, || multiply_plain_accumulate(&ctx, &terms).unwrap()),
    );
    report(
        "ciphertext to / from NTT form",
        time(reps, || {
            let mut c = a.clone();
            to_ntt(&ctx, &mut c).unwrap();
            from_ntt(&ctx, &mut c).unwrap();
            c
        }),
    );

    report(
        "ct×ct (HPS, size 3)",
        time(reps, || multiply(&ctx, &a, &b).unwrap()),
    );
    let prod = multiply(&ctx, &a, &b).unwrap();
    report(
        "relinearize",
        time(reps, || relinearize(&ctx, &prod, &rk).unwrap()),
    );
    report(
        "ct×ct + relinearize",
        time(reps, || {
            relinearize(&ctx, &multiply(&ctx, &a, &b).unwrap(), &rk).unwrap()
        }),
    );
    // APSI's power step: operands already extended, the product relinearized and then either
    // extended again (a power later multiplied) or only put in NTT form (a power only ct×pt
    // takes).
    let (ea, eb) = (extend(&ctx, &a).unwrap(), extend(&ctx, &b).unwrap());
    report(
        "extend to Q∪P (one operand)",
        time(reps, || extend(&ctx, &a).unwrap()),
    );
    report(
        "ct×ct of extended operands",
        time(reps, || multiply_extended(&ctx, &ea, &eb).unwrap()),
    );
    report(
        "power step: ct×ct + relin + extend",
        time(reps, || {
            let p = relinearize(&ctx, &multiply_extended(&ctx, &ea, &eb).unwrap(), &rk).unwrap();
            extend(&ctx, &p).unwrap()
        }),
    );
    report(
        "power step: ct×ct + relin + to NTT",
        time(reps, || {
            let mut p =
                relinearize(&ctx, &multiply_extended(&ctx, &ea, &eb).unwrap(), &rk).unwrap();
            to_ntt(&ctx, &mut p).unwrap();
            p
        }),
    );
    report(
        "mod switch to next",
        time(reps, || mod_switch_to_next(&ctx, &a).unwrap()),
    );
    let sq = relinearize(&ctx, &prod, &rk).unwrap();
    assert_eq!(
        enc.decode(&cipher::decrypt(&ctx, &sk, &sq).unwrap())[0],
        (u128::from(enc.decode(&cipher::decrypt(&ctx, &sk, &a).unwrap())[0])
            * u128::from(enc.decode(&cipher::decrypt(&ctx, &sk, &b).unwrap())[0])
            % u128::from(t)) as u64,
        "the benchmarked product decrypts right"
    );
}

/// The CLI's allocator (its tuning is set first thing in `main`).
#[global_allocator]
static ALLOC: blindjoin_alloc::HugePageAlloc = blindjoin_alloc::HugePageAlloc;

fn main() {
    blindjoin_alloc::tune_system_allocator();
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let reps: usize = std::env::var("BJ_BENCH_REPS").map_or(20, |v| v.parse().expect("reps"));
    if wanted("4096") {
        run(4096, 40961, &[40, 32, 32], reps);
    }
    if wanted("8192") {
        run(8192, 65537, &[56, 48, 48], reps);
    }
    // The shape of the research brief's SEAL / fhe.rs figures (N = 8192, four ~55-bit primes,
    // log Q = 218): three data primes, as in SecretFlow's 16M presets.
    if wanted("8192-218") {
        run(8192, 65537, &[56, 56, 56, 50], reps);
    }
}
