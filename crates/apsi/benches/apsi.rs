//! Setup and online speed of labeled PSI at SecretFlow's presets, both parties in this process
//! over an in-memory link (bytes are counted as on a socket, framing included).
//!
//! Run: `cargo bench -p blindjoin-apsi -- [log2 DB size …] [preset …]` (or, without the
//! workspace's fat-LTO release build, `CARGO_PROFILE_DEV_OPT_LEVEL=3 cargo bench -p
//! blindjoin-apsi --profile dev -- …`), e.g.
//! `-- 16 1M-1024-cmp` (add `load` to time saving the DB to bytes in each file form, ntt and
//! packed, with their sizes, and loading each back three times; `reps=K` to run the online
//! phase K times on one DB); defaults: 2^16 items, presets `1M-1024-cmp` (unlabeled, 1024
//! queries) and `1M-1-32` (32-byte labels, 16-byte nonces, 1 query). Threads: rayon's
//! (`RAYON_NUM_THREADS=2` to match the APSI peer's `-t 2`). Half of the queries are in the DB;
//! the answer is checked against the plaintext lookup.
//!
//! Peak RSS is the process's (VmHWM: sender DB and receiver together; the receiver's share is
//! a few MiB), read after each case; run one case per process for a per-case figure.

// A benchmark binary: failing loudly is fine.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use blindjoin_apsi::sender_db::DbForm;
use blindjoin_apsi::{ApsiParams, SenderDb, query, serve};
use blindjoin_crypto::item_digest;
use blindjoin_link::{Link, mem_pair_with_timeout};
use std::time::{Duration, Instant};

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// CPU seconds of this process so far (user + system, both parties and every thread): on a
/// shared machine it compares runs better than wall time, which counts waiting for a core.
fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(0.0)
}

/// The CLI's allocator (its tuning is set first thing in `main`).
#[global_allocator]
static ALLOC: blindjoin_alloc::HugePageAlloc = blindjoin_alloc::HugePageAlloc;

fn main() {
    blindjoin_alloc::tune_system_allocator();
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut logs: Vec<u32> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let load = args.iter().any(|a| a == "load");
    let reps: usize = args
        .iter()
        .find_map(|a| a.strip_prefix("reps=")?.parse().ok())
        .unwrap_or(1);
    let mut presets: Vec<String> = args
        .iter()
        .filter(|a| a.parse::<u32>().is_err() && *a != "load" && !a.starts_with("reps="))
        .cloned()
        .collect();
    if logs.is_empty() {
        logs.push(16);
    }
    if presets.is_empty() {
        presets = vec!["1M-1024-cmp".into(), "1M-1-32".into()];
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../he/tests/data");
    println!(
        "threads {}; preset, DB items, queries, label bytes: setup s (of which the OPRF), online s, \
         R→S MB, S→R MB, bundles, peak RSS MiB",
        rayon::current_num_threads()
    );
    for log in logs {
        for name in &presets {
            let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap();
            let params = ApsiParams::from_json(&text).unwrap();
            let (queries, label_len) = if name.ends_with("-32") {
                (1usize, 32usize)
            } else {
                (1024, 0)
            };
            let n = 1usize << log;
            let items: Vec<_> = (0..n)
                .map(|i| item_digest(format!("item{i}").as_bytes()))
                .collect();
            let labels: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let mut l = format!("label{i}").into_bytes();
                    l.resize(label_len, b'.');
                    l
                })
                .collect();
            // The OPRF alone, for the share of setup it takes.
            let t_oprf = Instant::now();
            let key =
                blindjoin_crypto::oprf::OprfScalar::random(blindjoin_crypto::Curve::FourQ).unwrap();
            let mut pts = vec![0u8; n * blindjoin_crypto::oprf::POINT_LEN];
            key.hash_and_mul(&items, &mut pts).unwrap();
            drop(pts);
            let oprf = t_oprf.elapsed().as_secs_f64();
            let t0 = Instant::now();
            let db = if label_len > 0 {
                SenderDb::build(params.clone(), &items, Some(&labels), label_len, 16).unwrap()
            } else {
                SenderDb::build(params.clone(), &items, None, 0, 0).unwrap()
            };
            let setup = t0.elapsed().as_secs_f64();
            // `load`: the DB saved to bytes in each file form and loaded back three times
            // (what a sender serving from a saved DB pays before it can answer), then served
            // from the copy loaded from the default form.
            let db = if load {
                let saved: Vec<_> = [DbForm::Ntt, DbForm::Packed]
                    .into_iter()
                    .map(|form| {
                        let t = Instant::now();
                        let bytes = db.to_bytes(form);
                        (form, bytes, t.elapsed().as_secs_f64())
                    })
                    .collect();
                drop(db);
                let mut served = None;
                for (form, bytes, save) in saved {
                    let loads: Vec<(f64, f64)> = (0..3)
                        .map(|_| {
                            let (t, c) = (Instant::now(), cpu_s());
                            let back = SenderDb::from_bytes(&bytes).unwrap();
                            let s = (t.elapsed().as_secs_f64(), cpu_s() - c);
                            if form == DbForm::default() {
                                served = Some(back);
                            }
                            s
                        })
                        .collect();
                    let wall: Vec<f64> = loads.iter().map(|l| l.0).collect();
                    let cpu: Vec<f64> = loads.iter().map(|l| l.1).collect();
                    println!(
                        "{name}, 2^{log}, {} form: DB bytes {:.1} MB, to_bytes {save:.2} s, \
                         from_bytes {wall:.2?} s ({cpu:.2?} CPU s)",
                        form.name(),
                        bytes.len() as f64 / 1e6,
                    );
                }
                served.unwrap()
            } else {
                db
            };
            let q: Vec<_> = (0..queries)
                .map(|i| {
                    if i % 2 == 0 {
                        items[(i * 7919) % n]
                    } else {
                        item_digest(format!("absent{i}").as_bytes())
                    }
                })
                .collect();
            for _ in 0..reps {
                let (mut a, mut b) = mem_pair_with_timeout(Duration::from_secs(3600));
                let t1 = Instant::now();
                let c1 = cpu_s();
                let (got, stats) = std::thread::scope(|s| {
                    let h = s.spawn(|| {
                        serve(&mut a, &db, q.len()).unwrap();
                        a.stats()
                    });
                    let got = query(&mut b, Some(&params), &q).unwrap();
                    (got, h.join().unwrap())
                });
                let online = t1.elapsed().as_secs_f64();
                let online_cpu = cpu_s() - c1;
                for (i, g) in got.iter().enumerate() {
                    if i % 2 == 0 {
                        let want = &labels[(i * 7919) % n];
                        assert_eq!(
                            g.as_deref(),
                            Some(if label_len > 0 { &want[..] } else { &[][..] })
                        );
                    } else {
                        assert!(g.is_none());
                    }
                }
                println!(
                    "{name}, 2^{log}, {queries}, {label_len}: {setup:.2} s (OPRF alone {oprf:.2} s), \
                 {online:.3} s ({online_cpu:.2} CPU s), {:.2} MB, {:.2} MB, {:?}, {:.0} MiB",
                    stats.bytes_received as f64 / 1e6,
                    stats.bytes_sent as f64 / 1e6,
                    db.bundle_counts(),
                    peak_rss_mib()
                );
            }
        }
    }
}
