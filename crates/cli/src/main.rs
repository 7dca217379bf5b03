//! The `blindjoin` command: a thin shell over `blindjoin-data`.
//!
//! Exit codes: 0 success; 1 the run failed (link, peer, protocol, disk); 2 the config, flags or
//! input are wrong (the message names the field, or the file, line and column).

mod bench;
mod bench_apsi;
mod demo;
mod gen_cmd;
mod progress;
mod run_cmd;
mod serve_cmd;
mod shape_proxy;
mod three_party;

use blindjoin_data::ub::UbError;
use blindjoin_data::{DataError, Fault, RunError};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The system allocator, with freed large blocks reused and (opt-in) huge pages.
#[global_allocator]
static ALLOC: blindjoin_alloc::HugePageAlloc = blindjoin_alloc::HugePageAlloc;

/// Private set intersection and private joins between two organisations.
#[derive(Parser)]
#[command(name = "blindjoin", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one party, from a SecretFlow PSI v2 JSON config (--config) or from flags; a config
    /// with three parties runs three-party ECDH-PSI (PROTOCOL_ECDH_3PC; `run --help` says who
    /// learns what).
    Run(Box<run_cmd::RunArgs>),
    /// Serve many clients from one long-running server: unbalanced PSI's online phase (its
    /// cache and key loaded once) or labeled PSI (its saved DB loaded once), sessions at once
    /// up to --max-sessions, a line per session, and a clean stop on SIGTERM.
    Serve(serve_cmd::ServeArgs),
    /// Write seeded, shuffled CSV tables with a given overlap, for tests and benchmarks.
    Gen(gen_cmd::GenArgs),
    /// Run both parties on loopback on a small built-in example and print the result.
    Demo(demo::DemoArgs),
    /// Run both parties as two processes on loopback, check the result, print time and bytes.
    Bench(bench::BenchArgs),
    /// Bench tool: a TCP proxy that shapes each connection like `bench --bandwidth/--latency`,
    /// to put a peer system's two processes on the same simulated link as ours.
    #[command(hide = true)]
    BenchProxy(shape_proxy::ProxyArgs),
}

/// Who must act on a failed command: the run's own [`Fault`] when it failed, a config fault for
/// what the CLI refused itself ([`UserError`]), else the link's (an error of no known kind).
fn fault_of(e: &anyhow::Error) -> Fault {
    e.chain()
        .find_map(|c| {
            c.downcast_ref::<RunError>()
                .map(RunError::fault)
                .or_else(|| c.downcast_ref::<DataError>().map(DataError::fault))
                .or_else(|| c.downcast_ref::<UbError>().map(UbError::fault))
        })
        .unwrap_or(if e.downcast_ref::<UserError>().is_some() {
            Fault::Config
        } else {
            Fault::Link
        })
}

/// An error whose fix is in the user's hands (config, flags, input): exit code 2.
#[derive(Debug)]
pub(crate) struct UserError;

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("invalid configuration or input")
    }
}

impl std::error::Error for UserError {}

fn main() -> ExitCode {
    blindjoin_alloc::tune_system_allocator();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run_cmd::run(*args),
        Command::Serve(args) => serve_cmd::run(args),
        Command::Gen(args) => gen_cmd::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(args),
        Command::BenchProxy(args) => shape_proxy::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error is printed at every level but `off` (`err` and `critical` print only it).
            blindjoin_data::log::emit(
                blindjoin_data::log::Level::Critical,
                &format!("error: {e:#}"),
            );
            ExitCode::from(fault_of(&e).exit_code())
        }
    }
}
