//! Speed of the OT layer, both parties in this process over the in-memory link (two threads):
//! base OT, IKNP, SoftSpoken against IKNP, the PPRF / MPCOT expansion, and VOLE.
//!
//! Run: `cargo bench -p blindjoin-ot --bench ot_speed` (all), or name parts after `--`:
//! `base_ot`, `iknp`, `softspoken`, `pprf`, `vole`. `BJ_BENCH_LOG_N=16` shrinks every size by
//! 2^(20 - 16) (a quick check that it still runs). The `softspoken` part has its own knobs:
//! `SS_BENCH_K=2,4` (field sizes), `SS_BENCH_SEMI_ONLY=1`, `SS_BENCH_ROUNDS=25` (default 9).

// A benchmark binary: failing loudly is fine.
#![allow(clippy::expect_used, missing_docs)]

use blindjoin_link::{Link, MemLink, mem_pair};
use blindjoin_ot::pprf::{mpcot_receive, mpcot_send};
use blindjoin_ot::vole::{vole_receive, vole_send};
use blindjoin_ot::{
    SoftSpokenParams, base_ot_receive, base_ot_send, iknp_cot_receive, iknp_cot_send,
    softspoken_cot_receive, softspoken_cot_send,
};
use std::time::{Duration, Instant};

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let log_n: u32 = std::env::var("BJ_BENCH_LOG_N").map_or(20, |v| v.parse().expect("log n"));
    let shift = 20u32.saturating_sub(log_n);
    if wanted("base_ot") {
        base_ot();
    }
    if wanted("iknp") {
        iknp(1 << (20 - shift));
    }
    if wanted("softspoken") {
        softspoken_vs_iknp(1 << (20 - shift));
    }
    if wanted("pprf") {
        pprf(shift as usize);
    }
    if wanted("vole") {
        vole(shift);
    }
}

/// Runs `a` on a new thread and `b` here, each with one end of an in-memory link.
fn run2<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce(&mut MemLink) -> RA + Send + 'static,
    RA: Send + 'static,
    B: FnOnce(&mut MemLink) -> RB,
{
    let (mut la, mut lb) = mem_pair();
    let h = std::thread::spawn(move || a(&mut la));
    let rb = b(&mut lb);
    (h.join().expect("first party"), rb)
}

/// splitmix64 bits: reproducible choices and punctured points without a dependency.
fn bits(n: usize, seed: u64) -> Vec<u64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
        .collect()
}

fn choices(n: usize) -> Vec<bool> {
    bits(n, 1).into_iter().map(|x| x & 1 == 1).collect()
}

/// Bytes both parties sent, per element, and in bits.
fn per_element(bytes: u64, n: usize) -> String {
    format!(
        "{:.2} bytes = {:.1} bits per element",
        bytes as f64 / n as f64,
        bytes as f64 * 8.0 / n as f64
    )
}

/// Wall time of a base-OT batch of 128 and 512 (mean of 5).
fn base_ot() {
    for k in [128usize, 512] {
        let c = choices(k);
        let reps = 5;
        let start = Instant::now();
        for _ in 0..reps {
            let c2 = c.clone();
            run2(
                move |l| base_ot_send(l, k).expect("send"),
                move |l| base_ot_receive(l, &c2).expect("receive"),
            );
        }
        println!("base OT k={k}: {:?} per batch", start.elapsed() / reps);
    }
}

/// IKNP: `n` COTs, then the random OTs hashed from them.
fn iknp(n: usize) {
    // Warm-up (rayon pool, page faults).
    iknp_once(n.min(1 << 16), choices(n.min(1 << 16)));
    let c = choices(n);
    let start = Instant::now();
    let ((s, sent), r) = iknp_once(n, c);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "IKNP: {n} COTs in {secs:.3} s = {:.2} M COT/s (both parties, this machine), {}",
        n as f64 / secs / 1e6,
        per_element(sent, n)
    );
    let start = Instant::now();
    let so = s.random_ots();
    let ro = r.random_ots();
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(so.len() + ro.len(), 2 * n);
    println!("random-OT hashing (both sides): {secs:.3} s");
}

/// One IKNP run; returns the sender with the bytes both sent, and the receiver.
fn iknp_once(
    n: usize,
    c: Vec<bool>,
) -> ((blindjoin_ot::CotSender, u64), blindjoin_ot::CotReceiver) {
    let ((s, ss), (r, rs)) = run2(
        move |l| (iknp_cot_send(l, n).expect("send"), l.stats()),
        move |l| (iknp_cot_receive(l, &c).expect("receive"), l.stats()),
    );
    assert_eq!((s.len(), r.len()), (n, n));
    ((s, ss.bytes_sent + rs.bytes_sent), r)
}

/// CPU seconds of this process so far (user + system, Linux; 0 elsewhere).
fn process_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (field(11) + field(12)) / 100.0
}

/// SoftSpoken for several field sizes `k` (semi-honest and malicious) against IKNP: rounds over
/// all configurations in rotating order; best and median wall time and mean CPU time (both
/// parties) of each, so that other load on the machine shows as spread rather than bias.
fn softspoken_vs_iknp(n: usize) {
    let rounds: usize = std::env::var("SS_BENCH_ROUNDS").map_or(9, |v| v.parse().expect("rounds"));
    let c = choices(n);
    let ks: Vec<usize> = std::env::var("SS_BENCH_K").map_or_else(
        |_| vec![1, 2, 3, 4, 5, 8],
        |v| v.split(',').map(|k| k.parse().expect("k")).collect(),
    );
    let modes: &[bool] = if std::env::var("SS_BENCH_SEMI_ONLY").is_ok() {
        &[false]
    } else {
        &[false, true]
    };
    let mut configs: Vec<Option<SoftSpokenParams>> = vec![None]; // None = IKNP
    for &malicious in modes {
        configs.extend(ks.iter().map(|&k| Some(SoftSpokenParams { k, malicious })));
    }
    // Warm-up: rayon pool, page faults.
    let c2 = c[..n.min(1 << 16)].to_vec();
    let m = c2.len();
    let p = SoftSpokenParams::default();
    run2(
        move |l| softspoken_cot_send(l, m, p).expect("send"),
        move |l| softspoken_cot_receive(l, &c2, p).expect("receive"),
    );
    let mut best = vec![f64::INFINITY; configs.len()];
    let mut all = vec![Vec::new(); configs.len()];
    let mut cpu = vec![0f64; configs.len()];
    let mut bytes = vec![0u64; configs.len()];
    for round in 0..rounds {
        for step in 0..configs.len() {
            let ci = (round + step) % configs.len();
            let c = c.clone();
            let cpu0 = process_cpu_seconds();
            let start = Instant::now();
            let (len, sent) = match configs[ci] {
                None => {
                    let ((s, ss), (r, rs)) = run2(
                        move |l| (iknp_cot_send(l, n).expect("send"), l.stats()),
                        move |l| (iknp_cot_receive(l, &c).expect("receive"), l.stats()),
                    );
                    (s.len().min(r.len()), ss.bytes_sent + rs.bytes_sent)
                }
                Some(p) => {
                    let ((s, ss), (r, rs)) = run2(
                        move |l| (softspoken_cot_send(l, n, p).expect("send"), l.stats()),
                        move |l| {
                            (
                                softspoken_cot_receive(l, &c, p).expect("receive"),
                                l.stats(),
                            )
                        },
                    );
                    (s.len().min(r.len()), ss.bytes_sent + rs.bytes_sent)
                }
            };
            let secs = start.elapsed().as_secs_f64();
            best[ci] = best[ci].min(secs);
            all[ci].push(secs);
            cpu[ci] += process_cpu_seconds() - cpu0;
            assert_eq!(len, n);
            bytes[ci] = sent;
        }
    }
    let medians: Vec<f64> = all
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    for (ci, cfg) in configs.iter().enumerate() {
        let name = match cfg {
            None => "IKNP                ".to_string(),
            Some(p) => format!(
                "SoftSpoken k={} {}",
                p.k,
                if p.malicious { "mal " } else { "semi" }
            ),
        };
        println!(
            "{name} n={n}: best {:6.1} ms ({:.2}× IKNP), median {:6.1} ms ({:.2}×), \
             CPU {:6.1} ms/run ({:.2}×), {}",
            best[ci] * 1e3,
            best[ci] / best[0],
            medians[ci] * 1e3,
            medians[ci] / medians[0],
            cpu[ci] / rounds as f64 * 1e3,
            cpu[ci] / cpu[0],
            per_element(bytes[ci], n),
        );
    }
}

/// IKNP COTs then MPCOT (the PPRF expansion) for `t` trees of depth `d`, for three shapes of
/// N = t · 2^d = 2^20 leaves (each depth less `shift`).
fn pprf(shift: usize) {
    for (t, d) in [(1usize << 8, 12usize), (1 << 12, 8), (1, 20)] {
        let d = d.saturating_sub(shift).max(1);
        let alphas: Vec<usize> = bits(t, 2)
            .into_iter()
            .map(|x| (x as usize) & ((1 << d) - 1))
            .collect();
        let c = choices(t * d);
        let start = Instant::now();
        let ((v, s_cot, s_exp, s_sent), (w, r_exp, r_sent)) = run2(
            move |l| {
                let s = iknp_cot_send(l, t * d).expect("cot send");
                let cot = start.elapsed();
                let t0 = Instant::now();
                let v = mpcot_send(l, s.delta(), s.q(), t, d).expect("mpcot send");
                (v, cot, t0.elapsed(), l.stats().bytes_sent)
            },
            move |l| {
                let r = iknp_cot_receive(l, &c).expect("cot receive");
                let t0 = Instant::now();
                let w = mpcot_receive(l, r.t(), r.choices(), &alphas, d).expect("mpcot receive");
                (w, t0.elapsed(), l.stats().bytes_sent)
            },
        );
        let total = start.elapsed();
        assert_eq!((v.len(), w.len()), (t << d, t << d));
        println!(
            "PPRF t={t} d={d} N={}: IKNP {} COTs {s_cot:?}; MPCOT sender {s_exp:?}, receiver \
             {r_exp:?}; total {total:?}; {}",
            t << d,
            t * d,
            per_element(s_sent + r_sent, t << d)
        );
    }
}

/// VOLE of length m: 2^20, and the OKVS size RR22 asks for at 2^20 items (1,153,434), with
/// 128- and 64-bit noise, unchecked and checked; each length `>> shift`.
fn vole(shift: u32) {
    for (m, noise_bits, checked) in [
        (1usize << 20, 128usize, false),
        (1_153_434, 128, false),
        (1_153_434, 64, false),
        (1_153_434, 128, true),
    ] {
        let m = m >> shift;
        let start = Instant::now();
        let ((s, s_sent), (r, r_sent)) = run2(
            move |l| {
                let s = vole_send(l, m, noise_bits, checked).expect("vole send");
                (s, l.stats().bytes_sent)
            },
            move |l| {
                let r = vole_receive(l, m, noise_bits, checked).expect("vole receive");
                (r, l.stats().bytes_sent)
            },
        );
        let took: Duration = start.elapsed();
        assert_eq!(r.c()[m - 1], s.b()[m - 1] + r.a()[m - 1] * s.delta());
        println!(
            "VOLE m={m} noise bits={noise_bits} checked={checked}: {took:?}, {}",
            per_element(s_sent + r_sent, m)
        );
    }
}
