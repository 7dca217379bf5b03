//! What the process-level tests share: scratch folders, free ports, tables from `blindjoin gen`,
//! a party started with flags, and a bounded wait for it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_blindjoin");

/// A fresh, empty scratch folder named after the test binary's process and `name`.
pub fn tmp(prefix: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bj-{prefix}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A TCP port nobody listens on right now, below Linux's ephemeral range (32768+): every test
/// of this binary runs in one process, side by side, and a port from that range could be taken
/// as the source port of another test's outgoing connection before the child binds it. Unique
/// per test process and call (one counter for all tests), and checked free.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 12000 + (std::process::id() % 1000) as u16 * 16;
    for _ in 0..4000 {
        let p = base + NEXT.fetch_add(1, Ordering::Relaxed) % 4000;
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
    panic!("no free port in {base}..{}", base + 4000);
}

/// `receiver.csv` and `sender.csv` in `dir` from `blindjoin gen --rows ROWS --overlap OVERLAP`
/// (seeded, so every run gets the same tables) and any `extra` gen flags.
pub fn gen_tables(dir: &Path, rows: &str, overlap: &str, extra: &[&str]) {
    let out = Command::new(BIN)
        .args(["gen", "--rows", rows, "--overlap", overlap, "--seed", "5"])
        .args(extra)
        .arg("--out-dir")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(dir.join("alice.csv"), dir.join("receiver.csv")).unwrap();
    std::fs::rename(dir.join("bob.csv"), dir.join("sender.csv")).unwrap();
}

/// Starts `blindjoin run` for `role` on 127.0.0.1:`me` with its peer at `peer`, reading
/// `dir/ROLE.csv` (key column `id`) and writing `dir/ROLE_OUT.csv`, with `--broadcast-result` and
/// `extra` flags (the protocol, timeouts, ...).
pub fn party(dir: &Path, role: &str, me: u16, peer: u16, out: &str, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args(["run", "--role", role, "--keys", "id"])
        .args(["--self", &format!("127.0.0.1:{me}")])
        .args(["--peer", &format!("127.0.0.1:{peer}")])
        .args(["--broadcast-result", "--quiet"])
        .args(extra)
        .arg("--input")
        .arg(dir.join(format!("{role}.csv")))
        .arg("--output")
        .arg(dir.join(format!("{role}_{out}.csv")))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits at most `limit` for `c`; returns whether it succeeded, its stderr, and how long it took.
/// A process still running at the limit is killed and the test fails: no test waits unbounded.
pub fn wait_timed(mut c: Child, limit: Duration) -> (bool, String, Duration) {
    let t = Instant::now();
    loop {
        if let Some(status) = c.try_wait().unwrap() {
            let out = c.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            return (status.success(), err, t.elapsed());
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            panic!("a party did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`wait_timed`] without the time.
pub fn wait(c: Child, limit: Duration) -> (bool, String) {
    let (ok, err, _) = wait_timed(c, limit);
    (ok, err)
}

/// Sends `signal` (e.g. `-STOP`, `-KILL`) to a child with the system's `kill`.
pub fn signal(c: &Child, signal: &str) {
    let st = Command::new("kill")
        .args([signal, &c.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill {signal} failed");
}

/// Writes `certs/<name>.crt` and `.key` into `dir`, signed by `ca` and naming `name` (DNS SAN
/// and CN).
pub fn write_cert(dir: &Path, name: &str, ca: &rcgen::Issuer<'_, rcgen::KeyPair>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.signed_by(&key, ca).unwrap();
    std::fs::write(dir.join(format!("certs/{name}.crt")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("certs/{name}.key")), key.serialize_pem()).unwrap();
}

/// A CA whose certificate is `certs/<name>.crt`.
pub fn write_ca(dir: &Path, name: &str) -> rcgen::Issuer<'static, rcgen::KeyPair> {
    std::fs::create_dir_all(dir.join("certs")).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} CA"));
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join(format!("certs/{name}.crt")), cert.pem()).unwrap();
    rcgen::Issuer::new(params, key)
}

/// A Parquet table with `id` (int64) and `score` (float64 = id · 1.5) for ids `ids`.
pub fn write_scores(path: &Path, ids: std::ops::Range<i64>) {
    use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
    let id: ArrayRef = std::sync::Arc::new(Int64Array::from_iter_values(ids.clone()));
    let score: ArrayRef =
        std::sync::Arc::new(Float64Array::from_iter_values(ids.map(|i| i as f64 * 1.5)));
    let batch = RecordBatch::try_from_iter([("id", id), ("score", score)]).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        batch.schema(),
        None,
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// A `write_scores` table's rows, checking the column types survived.
pub fn read_scores(path: &Path) -> Vec<(i64, f64)> {
    use arrow_array::{Float64Array, Int64Array};
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let id = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let score = batch
            .column(1)
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        out.extend(
            id.values()
                .iter()
                .copied()
                .zip(score.values().iter().copied()),
        );
    }
    out
}
