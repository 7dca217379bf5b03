//! `apsi_sender_config` / `apsi_receiver_config` (SecretFlow's `psi.ApsiSenderConfig` /
//! `ApsiReceiverConfig`, `pir.proto`) with `link_config` and `self_link_party`, into an
//! [`ApsiSpec`]. Every field of both messages is accepted; see `docs/config.md` for what each
//! means here. Ours live in the top-level `blindjoin` object, as for unbalanced PSI: among
//! them the sender's `max_query_items` (the cap on OPRF evaluations per DB key,
//! [`crate::ub::budget`]).

use super::{Envelope, LinkConfig, invalid, lenient_u64, peer_link, two_party_link};
use crate::apsi::{ApsiRole, ApsiSpec, Buckets, DEFAULT_NONCE_BYTES, SenderTask};
use crate::error::ConfigError;
use crate::ub::budget::{DEFAULT_MAX_QUERY_ITEMS, FIELD as MAX_QUERY_ITEMS};
use blindjoin_apsi::item::MAX_NONCE_LEN;
use blindjoin_apsi::sender_db::DbForm;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApsiLaunch {
    apsi_sender_config: Option<SenderConfig>,
    apsi_receiver_config: Option<ReceiverConfig>,
    link_config: Option<LinkConfig>,
    self_link_party: Option<String>,
    blindjoin: Option<ApsiExtensions>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SenderConfig {
    threads: Option<Value>,
    log_file: Option<String>,
    silent: Option<bool>,
    log_level: Option<String>,
    db_file: Option<String>,
    params_file: Option<String>,
    sdb_out_file: Option<String>,
    nonce_byte_count: Option<Value>,
    compress: Option<bool>,
    save_db_only: Option<bool>,
    experimental_enable_bucketize: Option<bool>,
    experimental_bucket_cnt: Option<Value>,
    experimental_bucket_folder: Option<String>,
    experimental_db_generating_process_num: Option<Value>,
    source_file: Option<String>,
    experimental_bucket_group_cnt: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiverConfig {
    threads: Option<Value>,
    log_file: Option<String>,
    silent: Option<bool>,
    log_level: Option<String>,
    query_file: Option<String>,
    output_file: Option<String>,
    params_file: Option<String>,
    experimental_enable_bucketize: Option<bool>,
    experimental_bucket_cnt: Option<Value>,
    query_batch_size: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApsiExtensions {
    report_path: Option<String>,
    connect_timeout_ms: Option<Value>,
    peer_silence_timeout_ms: Option<Value>,
    max_query_items: Option<Value>,
}

/// Most buckets: 2^20 (SecretFlow's examples use 10,000).
pub const MAX_BUCKETS: u64 = 1 << 20;

fn path_of(v: Option<&String>) -> Option<&str> {
    v.map(|s| s.trim()).filter(|s| !s.is_empty())
}

fn logging(
    section: &str,
    log_level: Option<&String>,
    log_file: Option<&String>,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    match log_level.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "all" | "debug" | "info" | "warning" | "error" | "off") => {}
        Some(other) => {
            return Err(invalid(
                &format!("{section}.log_level"),
                &format!("{other:?}; use all, debug, info, warning, error or off"),
            ));
        }
    }
    if path_of(log_file).is_some() {
        warnings.push(format!(
            "{section}.log_file: APSI's own log file; blindjoin logs to stderr (--log-level, \
             BLINDJOIN_LOG), so nothing is written there"
        ));
    }
    Ok(())
}

fn threads(section: &str, v: Option<&Value>) -> Result<Option<usize>, ConfigError> {
    match v {
        None => Ok(None),
        Some(v) => match lenient_u64(v, &format!("{section}.threads"))? {
            0 => Ok(None),
            n if n > 4096 => Err(invalid(
                &format!("{section}.threads"),
                &format!("{n}; at most 4096"),
            )),
            n => Ok(Some(n as usize)),
        },
    }
}

fn buckets(
    section: &str,
    enable: Option<bool>,
    count: Option<&Value>,
) -> Result<Option<usize>, ConfigError> {
    if !enable.unwrap_or(false) {
        return Ok(None);
    }
    let field = format!("{section}.experimental_bucket_cnt");
    let n = match count {
        Some(v) => lenient_u64(v, &field)?,
        None => 0,
    };
    if n == 0 || n > MAX_BUCKETS {
        return Err(invalid(
            &field,
            &format!(
                "{n}; experimental_enable_bucketize needs a bucket count in 1..={MAX_BUCKETS}, \
                 the same on both sides"
            ),
        ));
    }
    Ok(Some(n as usize))
}

/// Parses a labeled-PSI launch config; `source` names it in errors, relative paths resolve
/// against `base_dir`.
///
/// # Errors
/// Syntax errors, unknown fields, invalid values, missing files the task needs.
pub fn parse_apsi_launch_config(
    text: &str,
    source: &str,
    base_dir: &Path,
) -> Result<ApsiSpec, ConfigError> {
    labeled_psi(&Envelope::parse(text, source, base_dir)?)
}

/// As [`parse_apsi_launch_config`], from a parsed launch config.
///
/// # Errors
/// As [`parse_apsi_launch_config`].
pub(crate) fn labeled_psi(env: &Envelope) -> Result<ApsiSpec, ConfigError> {
    let cfg = env.typed_kind::<ApsiLaunch>(&["apsi_sender_config", "apsi_receiver_config"])?;
    let mut warnings = env.warnings().to_vec();
    let resolve = |p: &str| super::resolve_path(env.base_dir(), p);
    let (role, bucket_count, folder, query_batch_size, threads_n, needs_link) =
        match (cfg.apsi_sender_config, cfg.apsi_receiver_config) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "apsi_receiver_config",
                    "a config is one party's: give apsi_sender_config or apsi_receiver_config, \
                     not both",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "apsi_sender_config",
                    "missing (or apsi_receiver_config)",
                ));
            }
            (Some(s), None) => {
                let sec = "apsi_sender_config";
                let f = |n: &str| format!("{sec}.{n}");
                logging(
                    sec,
                    s.log_level.as_ref(),
                    s.log_file.as_ref(),
                    &mut warnings,
                )?;
                let _ = s.silent;
                let threads_n = threads(sec, s.threads.as_ref())?;
                let bucket_count = buckets(
                    sec,
                    s.experimental_enable_bucketize,
                    s.experimental_bucket_cnt.as_ref(),
                )?;
                let folder = match (bucket_count, path_of(s.experimental_bucket_folder.as_ref())) {
                    (Some(_), Some(p)) => Some(resolve(p)),
                    (Some(_), None) => {
                        return Err(invalid(
                            &f("experimental_bucket_folder"),
                            "missing; bucket mode keeps one DB file per bucket there",
                        ));
                    }
                    (None, Some(_)) => {
                        warnings.push(format!(
                            "{}: ignored without experimental_enable_bucketize",
                            f("experimental_bucket_folder")
                        ));
                        None
                    }
                    (None, None) => None,
                };
                for (name, v) in [
                    (
                        "experimental_db_generating_process_num",
                        s.experimental_db_generating_process_num.as_ref(),
                    ),
                    (
                        "experimental_bucket_group_cnt",
                        s.experimental_bucket_group_cnt.as_ref(),
                    ),
                ] {
                    if let Some(v) = v {
                        // Accepted for SecretFlow's configs: buckets are built one after the
                        // other, each with all of the run's threads, and stored one file each.
                        let _ = lenient_u64(v, &f(name))?;
                    }
                }
                let nonce_len = match s.nonce_byte_count.as_ref() {
                    None => DEFAULT_NONCE_BYTES,
                    Some(v) => match lenient_u64(v, &f("nonce_byte_count"))? {
                        0 => DEFAULT_NONCE_BYTES,
                        n if n as usize > MAX_NONCE_LEN => {
                            return Err(invalid(
                                &f("nonce_byte_count"),
                                &format!("{n}; at most {MAX_NONCE_LEN}"),
                            ));
                        }
                        n => n as usize,
                    },
                };
                // APSI's "compress the DB file" switch picks the form the saved DB stores its
                // plaintexts in: true the packed coefficient form (7.5–9× smaller, an NTT per
                // prime and plaintext on load), false the NTT form (loaded by reading alone),
                // absent the default, packed (`DbForm` says why).
                let form = match s.compress {
                    Some(true) => DbForm::Packed,
                    Some(false) => DbForm::Ntt,
                    None => DbForm::default(),
                };
                let save_db_only = s.save_db_only.unwrap_or(false);
                let source_file = path_of(s.source_file.as_ref()).map(resolve);
                let db_file = path_of(s.db_file.as_ref()).map(resolve);
                let sdb_out = path_of(s.sdb_out_file.as_ref()).map(resolve);
                let task = match (source_file, db_file) {
                    (Some(_), Some(_)) => {
                        return Err(invalid(
                            &f("db_file"),
                            "and source_file are both given; source_file builds a new DB, \
                             db_file loads a saved one: give one",
                        ));
                    }
                    (Some(src), None) => {
                        let params_file =
                            path_of(s.params_file.as_ref())
                                .map(resolve)
                                .ok_or_else(|| {
                                    invalid(
                                        &f("params_file"),
                                        "missing; building a DB from source_file needs APSI's \
                                     parameter JSON",
                                    )
                                })?;
                        if save_db_only && sdb_out.is_none() && folder.is_none() {
                            return Err(invalid(
                                &f("sdb_out_file"),
                                "missing; save_db_only writes the DB there",
                            ));
                        }
                        if folder.is_some() && sdb_out.is_some() {
                            warnings.push(format!(
                                "{}: ignored in bucket mode (the DBs go to \
                                 experimental_bucket_folder)",
                                f("sdb_out_file")
                            ));
                        }
                        SenderTask::Build {
                            source: src,
                            params_file,
                            sdb_out: if folder.is_some() { None } else { sdb_out },
                            save_db_only,
                            nonce_len,
                            form,
                        }
                    }
                    (None, db) => {
                        if save_db_only {
                            return Err(invalid(
                                &f("save_db_only"),
                                "needs source_file: it builds a DB from the table and saves it",
                            ));
                        }
                        if db.is_none() && folder.is_none() {
                            return Err(invalid(
                                &f("source_file"),
                                "missing; give source_file (a CSV with a key column, and value \
                                 for labels) to build the DB, or db_file to serve a saved one",
                            ));
                        }
                        if path_of(s.params_file.as_ref()).is_some() {
                            warnings.push(format!(
                                "{}: ignored; a saved DB carries its parameters",
                                f("params_file")
                            ));
                        }
                        if s.compress.is_some() {
                            warnings.push(format!(
                                "{}: ignored; a saved DB is read in the form it was saved in",
                                f("compress")
                            ));
                        }
                        SenderTask::Load { db_file: db }
                    }
                };
                let needs_link = !save_db_only;
                (
                    ApsiRole::Sender(task),
                    bucket_count,
                    folder,
                    0,
                    threads_n,
                    needs_link,
                )
            }
            (None, Some(r)) => {
                let sec = "apsi_receiver_config";
                let f = |n: &str| format!("{sec}.{n}");
                logging(
                    sec,
                    r.log_level.as_ref(),
                    r.log_file.as_ref(),
                    &mut warnings,
                )?;
                let _ = r.silent;
                let threads_n = threads(sec, r.threads.as_ref())?;
                let bucket_count = buckets(
                    sec,
                    r.experimental_enable_bucketize,
                    r.experimental_bucket_cnt.as_ref(),
                )?;
                let query = path_of(r.query_file.as_ref())
                    .map(resolve)
                    .ok_or_else(|| invalid(&f("query_file"), "missing; a CSV with a key column"))?;
                let output = path_of(r.output_file.as_ref())
                    .map(resolve)
                    .ok_or_else(|| {
                        invalid(
                            &f("output_file"),
                            "missing; the keys found and their labels are written there",
                        )
                    })?;
                let params_file = path_of(r.params_file.as_ref()).map(resolve);
                let batch = match r.query_batch_size.as_ref() {
                    None => 0,
                    Some(v) => lenient_u64(v, &f("query_batch_size"))?.min(1 << 24) as usize,
                };
                (
                    ApsiRole::Receiver {
                        query,
                        output,
                        params_file,
                    },
                    bucket_count,
                    None,
                    batch,
                    threads_n,
                    true,
                )
            }
        };

    let link = match (&cfg.link_config, &cfg.self_link_party) {
        (Some(link), Some(self_id)) if needs_link => Some(two_party_link(
            link,
            self_id,
            "labeled PSI",
            &resolve,
            true,
        )?),
        (_, _) if needs_link => {
            return Err(invalid(
                if cfg.link_config.is_none() {
                    "link_config"
                } else {
                    "self_link_party"
                },
                "missing; this run talks to the peer (only a sender with save_db_only runs \
                 alone)",
            ));
        }
        (l, p) => {
            if l.is_some() || p.is_some() {
                warnings
                    .push("link_config: ignored; save_db_only builds the DB without a peer".into());
            }
            None
        }
    };
    let e = cfg.blindjoin.as_ref();
    let max_query_items = match e.and_then(|e| e.max_query_items.as_ref()) {
        None => DEFAULT_MAX_QUERY_ITEMS,
        Some(_) if matches!(role, ApsiRole::Receiver { .. }) => {
            return Err(invalid(
                MAX_QUERY_ITEMS,
                "the sender's cap on the OPRF evaluations its DB's key serves; a receiver has \
                 none (remove it)",
            ));
        }
        Some(v) => match lenient_u64(v, MAX_QUERY_ITEMS)? {
            0 => {
                return Err(invalid(
                    MAX_QUERY_ITEMS,
                    "0 would refuse every query; use 1 or more",
                ));
            }
            n => n,
        },
    };
    Ok(ApsiSpec {
        role,
        buckets: bucket_count.map(|count| Buckets { count, folder }),
        query_batch_size,
        max_query_items,
        threads: threads_n,
        link: peer_link(
            link,
            e.and_then(|e| e.connect_timeout_ms.as_ref()),
            e.and_then(|e| e.peer_silence_timeout_ms.as_ref()),
        )?,
        report: e.and_then(|e| e.report_path.as_deref()).map(resolve),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form_of(compress: &str) -> (Option<DbForm>, Vec<String>) {
        let text = format!(
            r#"{{"apsi_sender_config": {{"source_file": "db.csv", "params_file": "p.json",
                "sdb_out_file": "sdb", "save_db_only": true{compress}}}}}"#
        );
        let spec = parse_apsi_launch_config(&text, "t.json", Path::new(".")).unwrap();
        match spec.role {
            ApsiRole::Sender(SenderTask::Build { form, .. }) => (Some(form), spec.warnings),
            _ => (None, spec.warnings),
        }
    }

    /// The sender's `blindjoin.max_query_items`: unbalanced PSI's default when absent, any
    /// integer form otherwise; the default is the one docs/config.md gives for labeled PSI.
    #[test]
    fn max_query_items_defaults_to_unbalanced_psis() {
        let cap = |ext: &str| {
            let text = format!(
                r#"{{"apsi_sender_config": {{"source_file": "db.csv", "params_file": "p.json",
                    "sdb_out_file": "sdb", "save_db_only": true}}{ext}}}"#
            );
            parse_apsi_launch_config(&text, "t.json", Path::new("."))
                .unwrap()
                .max_query_items
        };
        assert_eq!(cap(""), DEFAULT_MAX_QUERY_ITEMS);
        assert_eq!(cap(r#", "blindjoin": {"max_query_items": "5000"}"#), 5000);
        assert_eq!(cap(r#", "blindjoin": {"max_query_items": 7}"#), 7);
        let doc = include_str!("../../../../docs/config.md");
        let section = &doc[doc.find("### `apsi_receiver_config`").unwrap()..];
        assert!(
            section
                .lines()
                .any(|l| l.starts_with("| `max_query_items` | Sender")
                    && l.contains("Default **1,000,000**")),
            "docs/config.md's labeled-PSI max_query_items row"
        );
        assert_eq!(DEFAULT_MAX_QUERY_ITEMS, 1_000_000);
    }

    /// `compress` picks the saved DB's form; with `db_file` it is ignored with a warning.
    #[test]
    fn compress_picks_the_db_form() {
        assert_eq!(form_of(r#", "compress": true"#).0, Some(DbForm::Packed));
        assert_eq!(form_of(r#", "compress": false"#).0, Some(DbForm::Ntt));
        assert_eq!(DbForm::default(), DbForm::Packed);
        let (form, warnings) = form_of("");
        assert_eq!(form, Some(DbForm::default()));
        assert!(warnings.is_empty(), "{warnings:?}");
        let text = r#"{"apsi_sender_config": {"db_file": "sdb", "compress": true},
            "link_config": {"parties": [{"id": "s", "host": "127.0.0.1:1"},
            {"id": "r", "host": "127.0.0.1:2"}]}, "self_link_party": "s"}"#;
        let spec = parse_apsi_launch_config(text, "t.json", Path::new(".")).unwrap();
        assert!(
            spec.warnings.iter().any(|w| w.contains("compress")),
            "{:?}",
            spec.warnings
        );
    }
}
