//! `blindjoin gen`: seeded tables for tests and benchmarks.

use anyhow::{Context, Result};
use blindjoin_data::generate::{GenSpec, generate};
use blindjoin_data::parquet_io::ParquetWriter;
use blindjoin_data::write_atomic;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct GenArgs {
    /// Rows per party: once for equal sizes, or once per party (2 or 3 times).
    #[arg(long, short = 'n', required = true, num_args = 1..=3, value_delimiter = ',')]
    rows: Vec<usize>,
    /// Parties (2 or 3); files are alice.csv, bob.csv and carol.csv.
    #[arg(long, default_value_t = 2)]
    parties: usize,
    /// Keys shared by all parties (default: half of the smallest table).
    #[arg(long)]
    overlap: Option<usize>,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Payload columns besides the key.
    #[arg(long, default_value_t = 1)]
    payload_columns: usize,
    /// Key columns (the id is split over id1..idK).
    #[arg(long, default_value_t = 1)]
    key_columns: usize,
    /// Extra rows repeating existing keys, as a fraction of the rows (e.g. 0.1).
    #[arg(long, default_value_t = 0.0)]
    duplicates: f64,
    /// Directory to write into (created if missing).
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
    /// File format: csv, or parquet (string columns; alice.parquet, ...).
    #[arg(long, default_value = "csv", value_parser = ["csv", "parquet"])]
    format: String,
}

pub(crate) const PARTY_NAMES: [&str; 3] = ["alice", "bob", "carol"];

pub(crate) fn run(a: GenArgs) -> Result<()> {
    if !(2..=3).contains(&a.parties) {
        anyhow::bail!("--parties must be 2 or 3");
    }
    let rows: Vec<usize> = match a.rows.len() {
        1 => vec![a.rows[0]; a.parties],
        n if n == a.parties => a.rows.clone(),
        n => anyhow::bail!(
            "--rows has {n} values for {} parties; give one, or one per party",
            a.parties
        ),
    };
    let overlap = a
        .overlap
        .unwrap_or(rows.iter().copied().min().unwrap_or(0) / 2);
    let spec = GenSpec {
        rows,
        overlap,
        seed: a.seed,
        payload_columns: a.payload_columns,
        key_columns: a.key_columns,
        duplicate_fraction: a.duplicates,
    };
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    for (text, name) in generate(&spec).iter().zip(PARTY_NAMES) {
        let path = a.out_dir.join(format!("{name}.{}", a.format));
        if a.format == "parquet" {
            let mut w = ParquetWriter::create(&path, "NULL")?;
            w.write_all(text)
                .with_context(|| format!("writing {}", path.display()))?;
            w.commit()?;
        } else {
            write_atomic(&path, text)?;
        }
        eprintln!("blindjoin: wrote {}", path.display());
    }
    Ok(())
}
