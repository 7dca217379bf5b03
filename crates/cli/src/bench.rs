//! `blindjoin bench`: two real `blindjoin run` processes on loopback, CSV in and aligned CSV out,
//! checked against a plaintext intersection; prints time per stage, bytes each way, bits per
//! element and peak memory.

use crate::demo::{free_port, write_pair};
use crate::run_cmd::Rr22ModeArg;
use anyhow::{Context, Result, bail};
use blindjoin_data::{DEFAULT_BUCKET_SIZE, Report};
use clap::Args;
use serde::Serialize;
use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// Protocol: ecdh, rr22, kkrt, or apsi (labeled PSI: `--apsi-preset`, `--label-bytes`,
    /// `--queries`; `--rows` is the sender's DB size).
    #[arg(long, default_value = "ecdh")]
    protocol: String,
    /// Curve (ECDH).
    #[arg(long, default_value = "25519")]
    curve: String,
    /// RR22 mode.
    #[arg(long, value_enum, default_value_t = Rr22ModeArg::Fast)]
    rr22_mode: Rr22ModeArg,
    /// RR22 / KKRT keys per bucket.
    #[arg(long, default_value_t = DEFAULT_BUCKET_SIZE)]
    bucket_size: u64,
    /// Rows per party.
    #[arg(short = 'n', long, default_value_t = 1 << 16)]
    rows: usize,
    /// Fraction of keys in common.
    #[arg(long, default_value_t = 0.5)]
    overlap: f64,
    /// Columns besides the 16-hex-digit `id` key in each input (0 gives the id-only files of
    /// SecretFlow's benchmark script, for a comparison on identical inputs).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=16))]
    payload_columns: u8,
    /// Give the result to the sender too (checks alignment of both outputs).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    broadcast_result: bool,
    /// Seconds before the run is declared hung and killed.
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Keep the generated files in this directory.
    #[arg(long)]
    keep: Option<std::path::PathBuf>,
    /// Simulate a WAN of this bandwidth each way (in-process shaper), e.g. 100mbit, 10mbit.
    #[arg(long, value_name = "RATE")]
    bandwidth: Option<String>,
    /// Simulate this one-way latency each way, e.g. 10ms (a round trip costs twice that).
    #[arg(long, value_name = "DELAY")]
    latency: Option<String>,
    /// apsi: APSI's parameter JSON (e.g. SecretFlow's `1M-1024-cmp.json`).
    #[arg(long, value_name = "JSON")]
    apsi_preset: Option<std::path::PathBuf>,
    /// apsi: label bytes per DB row (0: unlabeled).
    #[arg(long, default_value_t = 32)]
    label_bytes: usize,
    /// apsi: query keys (half of them in the DB).
    #[arg(long, default_value_t = 1)]
    queries: usize,
}

#[derive(Serialize)]
struct BenchResult {
    protocol: String,
    curve: String,
    n: usize,
    payload_columns: u8,
    intersection: usize,
    correct: bool,
    wall_s: f64,
    receiver: Report,
    sender: Report,
    bytes_receiver_to_sender: u64,
    bytes_sender_to_receiver: u64,
    bits_per_element: f64,
    /// The simulated link, if any: `(bandwidth, one-way latency)` as given.
    link: Option<(String, String)>,
}

pub(crate) fn run(a: BenchArgs) -> Result<()> {
    blindjoin_data::LinkShape::parse(a.bandwidth.as_deref(), a.latency.as_deref())
        .map_err(|e| anyhow::anyhow!(e))?;
    let dir = match &a.keep {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("blindjoin-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    if a.protocol == "apsi" {
        let preset = a
            .apsi_preset
            .as_deref()
            .context("--protocol apsi needs --apsi-preset (APSI's parameter JSON)")?;
        let r = crate::bench_apsi::bench_apsi(&crate::bench_apsi::ApsiBench {
            dir: &dir,
            preset,
            rows: a.rows,
            label_bytes: a.label_bytes,
            queries: a.queries,
            timeout: Duration::from_secs(a.timeout),
            bandwidth: a.bandwidth.as_deref(),
            latency: a.latency.as_deref(),
        });
        if a.keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        let r = r?;
        if a.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            crate::bench_apsi::print(&r);
        }
        if !r.correct {
            bail!("the result does not match the plaintext lookup");
        }
        return Ok(());
    }
    let r = bench_in(&dir, &a);
    if a.keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let r = r?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print_table(&r);
    }
    if !r.correct {
        bail!("the result does not match the plaintext intersection");
    }
    Ok(())
}

fn spawn(
    dir: &Path,
    a: &BenchArgs,
    me: &str,
    role: &str,
    port: u16,
    peer: &str,
    peer_port: u16,
) -> Result<Child> {
    let exe = std::env::current_exe().context("finding the blindjoin binary")?;
    let mut cmd = Command::new(exe);
    cmd.args([
        "run",
        "--quiet",
        "--role",
        role,
        "--self-id",
        me,
        "--peer-id",
        peer,
    ])
    .args([
        "--self",
        &format!("127.0.0.1:{port}"),
        "--peer",
        &format!("127.0.0.1:{peer_port}"),
    ])
    .args([
        "--protocol",
        &a.protocol,
        "--curve",
        &a.curve,
        "--keys",
        "id",
        "--rr22-mode",
        a.rr22_mode.mode().variant().replace('_', "-").as_str(),
        "--bucket-size",
        &a.bucket_size.to_string(),
    ])
    .arg("--input")
    .arg(dir.join(format!("{me}.csv")))
    .arg("--output")
    .arg(dir.join(format!("{me}_out.csv")))
    .arg("--report")
    .arg(dir.join(format!("{me}_report.json")))
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    if a.broadcast_result {
        cmd.arg("--broadcast-result");
    }
    if let Some(b) = &a.bandwidth {
        cmd.args(["--bandwidth", b]);
    }
    if let Some(l) = &a.latency {
        cmd.args(["--latency", l]);
    }
    cmd.spawn().context("starting a party process")
}

fn wait(mut child: Child, deadline: Instant, who: &str) -> Result<()> {
    loop {
        if let Some(status) = child.try_wait()? {
            if status.success() {
                return Ok(());
            }
            bail!("{who} failed with {status}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("{who} did not finish before the --timeout; killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn keys_of(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap_or_default().to_string())
        .collect()
}

fn bench_in(dir: &Path, a: &BenchArgs) -> Result<BenchResult> {
    let overlap = ((a.rows as f64) * a.overlap.clamp(0.0, 1.0)) as usize;
    let tables = write_pair(dir, a.rows, overlap, 20261122, a.payload_columns.into())?;
    let (pa, pb) = (free_port()?, free_port()?);
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let t = Instant::now();
    let receiver = spawn(dir, a, "alice", "receiver", pa, "bob", pb)?;
    let sender = spawn(dir, a, "bob", "sender", pb, "alice", pa)?;
    let r1 = wait(receiver, deadline, "the receiver (alice)");
    let r2 = wait(sender, deadline, "the sender (bob)");
    let wall_s = t.elapsed().as_secs_f64();
    r1?;
    r2?;
    let report = |who: &str| -> Result<Report> {
        let text = std::fs::read_to_string(dir.join(format!("{who}_report.json")))?;
        Ok(serde_json::from_str::<serde_json::Value>(&text).and_then(serde_json::from_value)?)
    };
    let (receiver, sender) = (report("alice")?, report("bob")?);

    // Plaintext check: the receiver's output keys are exactly the common keys, sorted; the
    // sender's (if broadcast) are the same rows in the same order.
    let ka: HashSet<String> = keys_of(&String::from_utf8_lossy(&tables[0]))
        .into_iter()
        .collect();
    let kb: HashSet<String> = keys_of(&String::from_utf8_lossy(&tables[1]))
        .into_iter()
        .collect();
    let mut expected: Vec<String> = ka.intersection(&kb).cloned().collect();
    expected.sort();
    let out_a = keys_of(&std::fs::read_to_string(dir.join("alice_out.csv"))?);
    let mut correct = out_a == expected;
    if a.broadcast_result {
        correct &= keys_of(&std::fs::read_to_string(dir.join("bob_out.csv"))?) == expected;
    }
    let bits_per_element =
        (receiver.bytes_sent + sender.bytes_sent) as f64 * 8.0 / (a.rows.max(1) as f64);
    Ok(BenchResult {
        protocol: receiver.protocol.clone(),
        curve: receiver
            .curve
            .clone()
            .or_else(|| receiver.mode.clone())
            .unwrap_or_default(),
        n: a.rows,
        payload_columns: a.payload_columns,
        intersection: expected.len(),
        correct,
        wall_s,
        bytes_receiver_to_sender: receiver.bytes_sent,
        bytes_sender_to_receiver: sender.bytes_sent,
        link: (a.bandwidth.is_some() || a.latency.is_some()).then(|| {
            (
                a.bandwidth.clone().unwrap_or_else(|| "unlimited".into()),
                a.latency.clone().unwrap_or_else(|| "0ms".into()),
            )
        }),
        bits_per_element,
        receiver,
        sender,
    })
}

fn print_table(r: &BenchResult) {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!(
        "{} {} n={} per side ({} payload column{}), intersection {} — {}",
        r.protocol,
        r.curve,
        r.n,
        r.payload_columns,
        if r.payload_columns == 1 { "" } else { "s" },
        r.intersection,
        if r.correct {
            "correct (matches plaintext, outputs aligned)"
        } else {
            "WRONG"
        }
    );
    println!("{:<22} {:>12} {:>12}", "", "receiver", "sender");
    let row = |name: &str, f: &dyn Fn(&Report) -> String| {
        println!("{:<22} {:>12} {:>12}", name, f(&r.receiver), f(&r.sender));
    };
    row("read input (s)", &|x| {
        format!("{:.3}", x.stages.read_input_s)
    });
    row("connect+handshake (s)", &|x| {
        format!("{:.3}", x.stages.connect_s)
    });
    row("protocol (s)", &|x| format!("{:.3}", x.stages.protocol_s));
    row("join per bucket (s)", &|x| {
        format!("{:.3}", x.stages.join_s)
    });
    row("write output (s)", &|x| {
        format!("{:.3}", x.stages.write_output_s)
    });
    row("total (s)", &|x| format!("{:.3}", x.stages.total_s));
    row("sent (MiB)", &|x| format!("{:.2}", mib(x.bytes_sent)));
    row("peak RSS (MiB)", &|x| {
        format!("{:.1}", mib(x.peak_rss_bytes))
    });
    println!(
        "wall (both processes): {:.3} s; bits per element (both directions / n): {:.1}",
        r.wall_s, r.bits_per_element
    );
    if let Some((b, l)) = &r.link {
        println!("simulated link: bandwidth {b}, one-way latency {l} (each direction)");
    }
}
