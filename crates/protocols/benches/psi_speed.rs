//! Speed of the two-party PSI protocols in one process over the in-memory link (a thread per
//! party): RR22 in each mode and KKRT16 at n = 2^20 per side with half of the items shared.
//! Prints each protocol stage per party on stderr, then the total time and the traffic in bits
//! per element.
//!
//! Run: `cargo bench -p blindjoin-protocols --bench psi_speed` (both), or `-- rr22` / `-- kkrt`.
//! `BJ_RR22_MODES=fast,low_comm` runs only those RR22 modes (to profile one at a time);
//! `BJ_BENCH_LOG_N=16` runs at 2^16 items per side (a quick check that it still runs).

// A benchmark binary: failing loudly is fine.
#![allow(clippy::expect_used, missing_docs)]

/// The same allocator as the CLI, so the times match the binary's.
#[global_allocator]
static ALLOC: blindjoin_alloc::HugePageAlloc = blindjoin_alloc::HugePageAlloc;

use blindjoin_crypto::item_digest;
use blindjoin_link::{Link, mem_pair};
use blindjoin_protocols::rr22::Rr22Mode;
use blindjoin_protocols::{
    Hello, ItemDigest, Progress, ProtocolChoice, PsiOptions, Role, handshake, run_psi,
};
use std::sync::Mutex;
use std::time::Instant;

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let log_n: u32 = std::env::var("BJ_BENCH_LOG_N").map_or(20, |v| v.parse().expect("log n"));
    let n = 1usize << log_n;
    let (xs, ys) = sets(n, n / 2);
    if wanted("rr22") {
        for mode in [Rr22Mode::Fast, Rr22Mode::LowComm, Rr22Mode::Malicious] {
            if let Ok(only) = std::env::var("BJ_RR22_MODES")
                && !only.split(',').any(|m| m == mode.variant())
            {
                continue;
            }
            let name = format!("RR22 {mode}");
            run(&name, ProtocolChoice::Rr22 { mode }, &xs, &ys, log_n);
        }
    }
    if wanted("kkrt") {
        run("KKRT", ProtocolChoice::Kkrt, &xs, &ys, log_n);
    }
}

/// Receiver items r0..rn, the sender's share `overlap` of them.
fn sets(n: usize, overlap: usize) -> (Vec<ItemDigest>, Vec<ItemDigest>) {
    let d = |tag: &str, i: usize| item_digest(format!("7/{tag}/{i}").as_bytes());
    let xs: Vec<_> = (0..n).map(|i| d("x", i)).collect();
    let ys = (0..n)
        .map(|i| {
            if i < overlap {
                xs[n - 1 - i]
            } else {
                d("y", i)
            }
        })
        .collect();
    (xs, ys)
}

/// Prints the time spent in each protocol stage, per party.
struct StageClock(&'static str, Mutex<(Instant, &'static str)>);

impl StageClock {
    fn new(party: &'static str) -> Self {
        StageClock(party, Mutex::new((Instant::now(), "start")))
    }
}

impl Progress for StageClock {
    fn stage(&self, name: &'static str, _: u64) {
        let mut g = self.1.lock().expect("clock");
        eprintln!(
            "{:>8}: {:<40} {:>8.3} s",
            self.0,
            g.1,
            g.0.elapsed().as_secs_f64()
        );
        *g = (Instant::now(), name);
    }
    fn advance(&self, _: u64) {}
}

/// One run of `p`, receiver `xs` against sender `ys`; checks the intersection's size.
fn run(name: &str, p: ProtocolChoice, xs: &[ItemDigest], ys: &[ItemDigest], log_n: u32) {
    let (mut la, mut lb) = mem_pair();
    let hello = move |role, n: usize| Hello::new(p, role, false, n as u64);
    let ys = ys.to_vec();
    let t0 = Instant::now();
    let sender = std::thread::spawn(move || {
        let hs = handshake(&mut lb, hello(Role::Sender, ys.len())).expect("handshake");
        let clock = StageClock::new("sender");
        run_psi(&mut lb, &hs, &PsiOptions::default(), &ys, &clock).expect("sender");
        clock.stage("end", 0);
        lb.stats()
    });
    let hs = handshake(&mut la, hello(Role::Receiver, xs.len())).expect("handshake");
    let clock = StageClock::new("receiver");
    let out = run_psi(&mut la, &hs, &PsiOptions::default(), xs, &clock).expect("receiver");
    clock.stage("end", 0);
    let s = sender.join().expect("sender thread");
    let r = la.stats();
    let found = out.intersection.expect("intersection").len();
    assert_eq!(found, xs.len() / 2, "{name}: intersection size");
    eprintln!(
        "{name} n=2^{log_n}: {:.3} s, {} bytes = {:.1} bits/element",
        t0.elapsed().as_secs_f64(),
        s.bytes_sent + r.bytes_sent,
        (s.bytes_sent + r.bytes_sent) as f64 * 8.0 / xs.len() as f64
    );
}
