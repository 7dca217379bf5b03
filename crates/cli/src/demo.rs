//! `blindjoin demo`: both parties on loopback, in one process, on a built-in example.

use anyhow::{Context, Result};
use blindjoin_data::generate::{GenSpec, generate};
use blindjoin_data::{NoProgress, Parties, Role, Rr22Mode, RunSpec, protocol_choice, write_atomic};
use clap::Args;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Rows per party in the built-in example.
    #[arg(long, short = 'n', default_value_t = 10_000)]
    rows: usize,
    /// Protocol: rr22 (fast mode), kkrt or ecdh.
    #[arg(long, default_value = "rr22")]
    protocol: String,
    /// Curve for ECDH: 25519, ristretto255, secp256k1, sm2, p256.
    #[arg(long, default_value = "25519")]
    curve: String,
}

/// Writes `alice.csv` and `bob.csv` with `rows` rows each, `overlap` keys in common, one payload
/// column; returns their contents.
pub(crate) fn write_pair(
    dir: &Path,
    rows: usize,
    overlap: usize,
    seed: u64,
    payload_columns: usize,
) -> Result<Vec<Vec<u8>>> {
    let tables = generate(&GenSpec {
        rows: vec![rows, rows],
        overlap,
        seed,
        payload_columns,
        key_columns: 1,
        duplicate_fraction: 0.0,
    });
    for (t, name) in tables.iter().zip(["alice", "bob"]) {
        write_atomic(&dir.join(format!("{name}.csv")), t)?;
    }
    Ok(tables)
}

/// A free TCP port on 127.0.0.1 (the OS picks one; we release it for the party to bind).
pub(crate) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub(crate) fn run(a: DemoArgs) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("blindjoin-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = demo_in(&dir, &a);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn spec(
    dir: &Path,
    me: &str,
    port: u16,
    other: &str,
    peer_port: u16,
    role: Role,
    a: &DemoArgs,
) -> Result<RunSpec> {
    let protocol = protocol_choice(&a.protocol, &a.curve, Rr22Mode::Fast, "--protocol")?;
    let parties = Parties {
        self_id: me.into(),
        self_addr: format!("127.0.0.1:{port}"),
        peer_id: other.into(),
        peer_addr: format!("127.0.0.1:{peer_port}"),
    };
    let input = dir.join(format!("{me}.csv"));
    let mut spec = RunSpec::new(parties, protocol, role, input, vec!["id".into()])
        .with_output(dir.join(format!("{me}_out.csv")));
    spec.broadcast_result = true;
    spec.connect_timeout = Duration::from_secs(30);
    Ok(spec)
}

fn demo_in(dir: &Path, a: &DemoArgs) -> Result<()> {
    let overlap = a.rows / 2;
    write_pair(dir, a.rows, overlap, 42, 1)?;
    let (pa, pb) = (free_port()?, free_port()?);
    let alice = spec(dir, "alice", pa, "bob", pb, Role::Receiver, a)?;
    let bob = spec(dir, "bob", pb, "alice", pa, Role::Sender, a)?;
    let what = match alice.protocol.curve() {
        Some(c) => format!("ECDH-PSI on {c}"),
        None => alice.protocol.to_string(),
    };
    println!(
        "blindjoin demo: alice (receiver) and bob (sender) each hold {} rows, {} keys in common; {what} over 127.0.0.1",
        a.rows, overlap,
    );
    let t = Instant::now();
    let bob_thread = std::thread::spawn(move || blindjoin_data::run(&bob, &NoProgress));
    let ra = blindjoin_data::run(&alice, &NoProgress).context("alice's side failed")?;
    let rb = bob_thread
        .join()
        .map_err(|_| anyhow::anyhow!("bob's thread panicked"))?
        .context("bob's side failed")?;
    let elapsed = t.elapsed().as_secs_f64();
    if ra.intersection_key_count != overlap as i64 || rb.intersection_key_count != overlap as i64 {
        anyhow::bail!(
            "wrong result: expected {overlap}, alice got {}, bob got {}",
            ra.intersection_key_count,
            rb.intersection_key_count
        );
    }
    let out_a = std::fs::read_to_string(dir.join("alice_out.csv"))?;
    let out_b = std::fs::read_to_string(dir.join("bob_out.csv"))?;
    println!(
        "intersection size: {} (checked against the plaintext answer)",
        ra.intersection_key_count
    );
    println!("time: {elapsed:.2} s (both parties share this machine's cores)");
    println!(
        "bytes: alice sent {} and bob sent {} ({:.0} bits per element)",
        ra.bytes_sent,
        rb.bytes_sent,
        (ra.bytes_sent + rb.bytes_sent) as f64 * 8.0 / (2 * a.rows).max(1) as f64
    );
    println!("first aligned output rows (alice | bob):");
    for (x, y) in out_a.lines().zip(out_b.lines()).take(4) {
        println!("  {x:<28} | {y}");
    }
    Ok(())
}
