//! `blindjoin bench --protocol apsi`: labeled PSI as SecretFlow runs it, with real
//! `blindjoin run --config` processes on loopback: the sender's setup (`save_db_only`) alone,
//! then the sender online from the saved DB and the receiver. Prints setup time, online time,
//! bytes each way and each process's peak RSS, and checks the result against a plaintext
//! lookup.

use anyhow::{Context, Result, bail};
use blindjoin_data::apsi::ApsiReport;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the APSI bench needs.
pub(crate) struct ApsiBench<'a> {
    pub dir: &'a Path,
    pub preset: &'a Path,
    pub rows: usize,
    pub label_bytes: usize,
    pub queries: usize,
    pub timeout: Duration,
    pub bandwidth: Option<&'a str>,
    pub latency: Option<&'a str>,
}

#[derive(Serialize)]
pub(crate) struct ApsiBenchResult {
    protocol: &'static str,
    preset: String,
    db_rows: usize,
    label_bytes: usize,
    queries: usize,
    found: usize,
    pub correct: bool,
    setup_s: f64,
    online_s: f64,
    sender_load_s: f64,
    sender_serve_s: f64,
    bytes_receiver_to_sender: u64,
    bytes_sender_to_receiver: u64,
    setup_peak_rss_bytes: u64,
    sender_online_peak_rss_bytes: u64,
    receiver_peak_rss_bytes: u64,
    db_file_bytes: u64,
}

fn label(i: usize, len: usize) -> String {
    let mut s = format!("{i:x}");
    while s.len() < len {
        s.push(char::from(b'a' + (s.len() % 26) as u8));
    }
    s.truncate(len);
    s
}

/// Starts `blindjoin run --config config`; `shaped`: with the bench's `--bandwidth/--latency`
/// (not for the setup, which opens no connection and refuses them).
fn spawn(dir: &Path, config: &str, a: &ApsiBench<'_>, shaped: bool) -> Result<Child> {
    let exe = std::env::current_exe().context("finding the blindjoin binary")?;
    let mut cmd = Command::new(exe);
    cmd.current_dir(dir)
        .args(["run", "--quiet", "--config", config])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let (true, Some(b)) = (shaped, a.bandwidth) {
        cmd.args(["--bandwidth", b]);
    }
    if let (true, Some(l)) = (shaped, a.latency) {
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

fn report(dir: &Path, name: &str) -> Result<ApsiReport> {
    let text =
        std::fs::read_to_string(dir.join(name)).with_context(|| format!("reading {name}"))?;
    Ok(serde_json::from_str(&text)?)
}

/// Runs the bench in `a.dir`.
pub(crate) fn bench_apsi(a: &ApsiBench<'_>) -> Result<ApsiBenchResult> {
    let dir = a.dir;
    let labeled = a.label_bytes > 0;
    let mut db = String::with_capacity(a.rows * (12 + a.label_bytes));
    db.push_str(if labeled { "key,value\n" } else { "key\n" });
    for i in 0..a.rows {
        if labeled {
            let _ = writeln!(db, "k{i},{}", label(i, a.label_bytes));
        } else {
            let _ = writeln!(db, "k{i}");
        }
    }
    std::fs::write(dir.join("db.csv"), db)?;
    // Half the queries hit (spread over the DB), half miss.
    let mut q = String::from("key\n");
    let mut want: HashMap<String, String> = HashMap::new();
    for j in 0..a.queries {
        if j % 2 == 0 && a.rows > 0 {
            let i = (j.wrapping_mul(7919)) % a.rows;
            let _ = writeln!(q, "k{i}");
            want.insert(
                format!("k{i}"),
                if labeled {
                    label(i, a.label_bytes)
                } else {
                    String::new()
                },
            );
        } else {
            let _ = writeln!(q, "miss{j}");
        }
    }
    std::fs::write(dir.join("query.csv"), q)?;
    let preset = PathBuf::from(a.preset);
    std::fs::copy(&preset, dir.join("params.json"))
        .with_context(|| format!("reading the preset {}", preset.display()))?;
    let (ps, pr) = (crate::demo::free_port()?, crate::demo::free_port()?);
    let link = |me: &str| {
        format!(
            r#""link_config": {{"parties": [{{"id": "sender", "host": "127.0.0.1:{ps}"}},
            {{"id": "receiver", "host": "127.0.0.1:{pr}"}}]}}, "self_link_party": "{me}""#
        )
    };
    std::fs::write(
        dir.join("setup.json"),
        r#"{"apsi_sender_config": {"source_file": "db.csv", "params_file": "params.json",
        "sdb_out_file": "sdb", "save_db_only": true},
        "blindjoin": {"report_path": "setup_report.json"}}"#,
    )?;
    std::fs::write(
        dir.join("online.json"),
        format!(
            r#"{{"apsi_sender_config": {{"db_file": "sdb"}}, {},
            "blindjoin": {{"report_path": "sender_report.json"}}}}"#,
            link("sender")
        ),
    )?;
    std::fs::write(
        dir.join("receiver.json"),
        format!(
            r#"{{"apsi_receiver_config": {{"query_file": "query.csv", "output_file": "result.csv",
            "params_file": "params.json"}}, {},
            "blindjoin": {{"report_path": "receiver_report.json"}}}}"#,
            link("receiver")
        ),
    )?;
    let deadline = Instant::now() + a.timeout;
    wait(
        spawn(dir, "setup.json", a, false)?,
        deadline,
        "the sender's setup",
    )?;
    let s = spawn(dir, "online.json", a, true)?;
    let r = spawn(dir, "receiver.json", a, true)?;
    let r1 = wait(r, deadline, "the receiver");
    let r2 = wait(s, deadline, "the sender");
    r1?;
    r2?;
    let (setup, sender, receiver) = (
        report(dir, "setup_report.json")?,
        report(dir, "sender_report.json")?,
        report(dir, "receiver_report.json")?,
    );
    let text = std::fs::read(dir.join("result.csv"))?;
    let mut got: HashMap<String, String> = HashMap::new();
    let mut reader = blindjoin_data::csv::CsvReader::new(&text, Path::new("result.csv"))?;
    let mut f = Vec::new();
    while reader.next_record(&mut f)?.is_some() {
        let cell = |i: usize| {
            f.get(i)
                .map(|s| {
                    String::from_utf8_lossy(&blindjoin_data::csv::field_value(&text, s))
                        .into_owned()
                })
                .unwrap_or_default()
        };
        got.insert(cell(0), cell(1));
    }
    Ok(ApsiBenchResult {
        protocol: "apsi",
        preset: preset.display().to_string(),
        db_rows: a.rows,
        label_bytes: a.label_bytes,
        queries: a.queries,
        found: got.len(),
        correct: got == want,
        setup_s: setup.setup_s,
        online_s: receiver.online_s,
        sender_load_s: sender.setup_s,
        sender_serve_s: sender.online_s,
        bytes_receiver_to_sender: receiver.bytes_sent,
        bytes_sender_to_receiver: receiver.bytes_received,
        setup_peak_rss_bytes: setup.peak_rss_bytes,
        sender_online_peak_rss_bytes: sender.peak_rss_bytes,
        receiver_peak_rss_bytes: receiver.peak_rss_bytes,
        db_file_bytes: std::fs::metadata(dir.join("sdb")).map_or(0, |m| m.len()),
    })
}

/// Prints the result as a table.
pub(crate) fn print(r: &ApsiBenchResult) {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!(
        "labeled PSI (apsi): {} DB rows, {}-byte labels, {} queries, preset {}",
        r.db_rows, r.label_bytes, r.queries, r.preset
    );
    println!("  setup (read + build + save DB)  {:>10.3} s", r.setup_s);
    println!(
        "  sender online: load DB file     {:>10.3} s",
        r.sender_load_s
    );
    println!(
        "  sender online: serve the query  {:>10.3} s",
        r.sender_serve_s
    );
    println!(
        "  receiver online (from connect, incl. waiting for the load) {:.3} s",
        r.online_s
    );
    println!(
        "  bytes receiver -> sender        {:>10.3} MB",
        r.bytes_receiver_to_sender as f64 / 1e6
    );
    println!(
        "  bytes sender -> receiver        {:>10.3} MB",
        r.bytes_sender_to_receiver as f64 / 1e6
    );
    println!(
        "  peak RSS setup / sender online / receiver  {:.1} / {:.1} / {:.1} MiB",
        mib(r.setup_peak_rss_bytes),
        mib(r.sender_online_peak_rss_bytes),
        mib(r.receiver_peak_rss_bytes)
    );
    println!(
        "  DB file                         {:>10.1} MiB",
        mib(r.db_file_bytes)
    );
    println!(
        "  found {} of {} queries; result {}",
        r.found,
        r.queries,
        if r.correct { "correct" } else { "WRONG" }
    );
}
