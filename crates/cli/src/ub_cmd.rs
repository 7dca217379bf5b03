//! `blindjoin run --config` with a `ub_psi_config`: unbalanced PSI in SecretFlow's modes (gen
//! cache, transfer cache, offline, online, full). The work is `blindjoin_data::ub`.

use crate::UserError;
use crate::progress::Bars;
use crate::run_cmd::LinkFlags;
use anyhow::Result;
use blindjoin_data::ub::{UbMode, UbReport, UbRole, UbSpec, run_ub};

/// Applies `--connect-timeout`, `--recv-timeout`, `--peer-silence-timeout`,
/// `--bandwidth/--latency` and `--tls-*` to an unbalanced run. `MODE_OFFLINE_GEN_CACHE` talks to
/// no peer, so there they are refused rather than ignored.
pub(crate) fn apply_link_flags(spec: &mut UbSpec, link: LinkFlags) -> Result<()> {
    if spec.mode == UbMode::GenCache {
        let given = link.given();
        if !given.is_empty() {
            anyhow::bail!(
                "{} cannot apply: {} runs alone and opens no connection; drop {} here and give \
                 {} to the run that talks to the peer (transfer cache, online or full)",
                given.join(", "),
                UbMode::GenCache.config_name(),
                if given.len() == 1 { "it" } else { "them" },
                if given.len() == 1 { "it" } else { "them" },
            );
        }
        return Ok(());
    }
    link.apply(
        &mut spec.connect_timeout,
        &mut spec.recv_timeout,
        &mut spec.silence_timeout,
        &mut spec.link_shape,
        &mut [&mut spec.tls],
    );
    Ok(())
}

/// Applies `--max-query-items` (the config's `blindjoin.max_query_items`): it bounds what the
/// server's key evaluates, so it means something on a server that answers queries only.
pub(crate) fn apply_max_query_items(spec: &mut UbSpec, flag: Option<u64>) -> Result<()> {
    let Some(n) = flag else {
        return Ok(());
    };
    if spec.role != UbRole::Server || !spec.mode.queries() {
        anyhow::bail!(
            "--max-query-items bounds the client keys a server evaluates online; this run is \
             {} {}, which evaluates none",
            spec.role.config_name(),
            spec.mode.config_name()
        );
    }
    if n == 0 {
        anyhow::bail!("--max-query-items 0 would refuse every query; use 1 or more");
    }
    spec.max_query_items = n;
    Ok(())
}

/// Runs one party of an unbalanced-PSI config; prints a summary on stderr (unless `quiet`) and
/// the report on stdout.
pub(crate) fn run(spec: UbSpec, quiet: bool) -> Result<()> {
    for w in &spec.warnings {
        eprintln!("blindjoin: warning: {w}");
    }
    let bars = Bars::new(quiet);
    let cancel = crate::run_cmd::cancel_on_signal();
    let result = run_ub(&spec, &bars, &cancel);
    bars.finish();
    let report = match result {
        Ok(r) => r,
        Err(e) if e.is_user_error() => return Err(anyhow::Error::from(e).context(UserError)),
        Err(e) => return Err(e.into()),
    };
    if !quiet {
        eprintln!("{}", summary(&report));
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn summary(r: &UbReport) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    let mut parts = vec![format!("{} {}", r.role, r.mode)];
    if let Some(p) = &r.gen_cache {
        parts.push(format!(
            "cache of {} keys generated in {:.2} s",
            r.cache_count, p.seconds
        ));
    }
    if let Some(p) = &r.transfer_cache {
        parts.push(format!(
            "cache transferred in {:.2} s (sent {:.2} MB, received {:.2} MB)",
            p.seconds,
            mb(p.bytes_sent),
            mb(p.bytes_received)
        ));
    }
    if let Some(p) = &r.online {
        parts.push(format!(
            "online {:.3} s (sent {:.3} MB, received {:.3} MB)",
            p.seconds,
            mb(p.bytes_sent),
            mb(p.bytes_received)
        ));
        parts.push(match &r.output_path {
            Some(o) => format!(
                "intersection: {} keys, {} rows -> {o}",
                r.intersection_key_count, r.intersection_count
            ),
            None if r.intersection_key_count >= 0 => format!(
                "intersection size {} (this party gets no rows)",
                r.intersection_key_count
            ),
            None => "this party does not receive the result".into(),
        });
    }
    format!("blindjoin: {}; total {:.2} s", parts.join("; "), r.total_s)
}
