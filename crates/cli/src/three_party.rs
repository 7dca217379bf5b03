//! `blindjoin run --config FILE` with a three-party config (`PROTOCOL_ECDH_3PC`): one of the
//! three parties; see `blindjoin_protocols::ecdh_3pc` for the protocol and its leakage. The
//! link flags (`--recv-timeout`, TLS, ...) are applied in `run_cmd::run`; TLS files from
//! `--tls-*` serve both where this party listens and where it connects.

use crate::progress::Bars;
use crate::run_cmd::{RunArgs, cancel_on_signal};
use anyhow::Result;
use blindjoin_data::ThreePartySpec;

/// The end of `blindjoin run --help`: what the three-party protocol reveals, to whom.
pub(crate) const HELP: &str = "\
Three parties (protocol PROTOCOL_ECDH_3PC, SecretFlow's ECDH_PSI_3PC): give every party the same
config with three link_config.parties and protocol_config.receiver = the receiver's id, each with
its own self_link_party. Only the receiver learns the result and writes output. What each party
learns (semi-honest, no two parties colluding):
  - the receiver R: R ∩ P ∩ Q and the sizes |P|, |Q| — not |P ∩ Q|;
  - helper Q (the second non-receiver in link_config.parties): |P ∩ Q| and the sizes |R|, |P|;
  - helper P (the first non-receiver): the sizes |R|, |Q| only.
SecretFlow's ECDH_PSI_3PC leaks |A ∩ B| of two parties to the third, C. Here the one pairwise
count, |P ∩ Q|, goes to helper Q, which learns no items; the receiver gets P ∩ Q masked and padded
with random points to min(|P|, |Q|) (the cost: up to min(|P|, |Q|) more curve multiplications at
Q and at R, and as many points on the Q-R link). Inputs of more than 2^20 rows run in hash
buckets, and then every party also learns how many keys each other party has per bucket (and Q
|P ∩ Q| per bucket), as in two-party runs. Inner join only; no broadcast_result, no recovery.";

/// Runs this party; prints a one-line summary (per-link bytes) on stderr and the report on
/// stdout.
pub(crate) fn run(a: &RunArgs, t: ThreePartySpec) -> Result<()> {
    for w in &t.spec.warnings {
        eprintln!("blindjoin: warning: {w}");
    }
    let bars = Bars::new(a.quiet);
    let cancel = cancel_on_signal();
    let result = blindjoin_data::run_three_party(&t, &bars, &cancel);
    bars.finish();
    let out = result?;
    let r = &out.report;
    if !a.quiet {
        let mb = |b: u64| b as f64 / 1e6;
        let what = if r.intersection_count < 0 {
            "this party is a helper and learns no items; no output written".to_string()
        } else {
            format!(
                "three-way intersection: {} keys, {} of {} rows -> {}",
                r.intersection_key_count,
                r.intersection_count,
                r.original_count,
                r.output_path.as_deref().unwrap_or("-")
            )
        };
        let links: Vec<String> = out
            .links
            .iter()
            .map(|(peer, s)| {
                format!(
                    "{peer}: sent {:.2} MB, received {:.2} MB",
                    mb(s.bytes_sent),
                    mb(s.bytes_received)
                )
            })
            .collect();
        eprintln!(
            "blindjoin: {what}; {:.2} s; links {}",
            r.stages.total_s,
            links.join("; ")
        );
    }
    println!("{}", serde_json::to_string_pretty(r)?);
    Ok(())
}
