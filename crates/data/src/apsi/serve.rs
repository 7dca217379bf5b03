//! `blindjoin serve` for labeled PSI: the sender's saved DB loaded once, each session one
//! receiver's query ([`crate::serving`] runs the sessions). A receiver is an unchanged
//! `blindjoin run` with its `apsi_receiver_config` naming this sender's address.
//!
//! Shared: the DB, read once (memory is the DB plus, per session, the link's bounded inbox and
//! one query's ciphertexts). Per session: its own link and TLS identity check, and its charge
//! to the DB key's OPRF budget (`blindjoin.max_query_items`, the DB file's count, locked per
//! charge, so concurrent sessions cannot overspend it).

use super::run::{decode_rounds, evaluations_per_bucket};
use super::{ApsiRole, ApsiSpec, SenderTask, db_file};
use crate::error::{ConfigError, DataError};
use crate::serving::{Answer, Answered, ServeOptions, ServeSummary, serve};
use crate::ub::budget;
use blindjoin_apsi::SenderDb;
use blindjoin_link::{Cancel, Link, TcpLink, TcpOptions};
use std::path::PathBuf;

/// What every session shares.
struct Served {
    db: SenderDb,
    db_path: PathBuf,
    key_check: [u8; 16],
    cap: u64,
    template: TcpOptions,
}

/// Serves `spec` (a labeled-PSI sender that loads its saved DB) until `stop`, one line per
/// session to `log`.
///
/// # Errors
/// The config is not a serving one (named), the DB cannot be loaded, or the address cannot be
/// bound. A failed session is logged and counted, never an error of the sender.
pub fn serve_apsi(
    spec: &ApsiSpec,
    so: &ServeOptions,
    stop: &Cancel,
    log: &(dyn Fn(&str) + Sync),
) -> Result<ServeSummary, DataError> {
    let served = prepare(spec)?;
    let what = format!(
        "labeled PSI (a DB of {} keys, {}-byte labels)",
        served.db.item_count(),
        served.db.label_len()
    );
    Ok(serve(&served.template, &what, &served, so, stop, log)?)
}

fn prepare(spec: &ApsiSpec) -> Result<Served, DataError> {
    let refuse = |field: &str, message: &str| {
        DataError::Config(ConfigError::Invalid {
            field: field.into(),
            message: message.into(),
        })
    };
    let db_path = match &spec.role {
        ApsiRole::Sender(SenderTask::Load { db_file: Some(p) }) if spec.buckets.is_none() => {
            p.clone()
        }
        ApsiRole::Sender(SenderTask::Load { .. }) => {
            return Err(refuse(
                "apsi_sender_config.bucket_folder",
                "blindjoin serve loads one saved DB (db_file); a bucketed DB folder is served by \
                 `blindjoin run` per receiver",
            ));
        }
        _ => {
            return Err(refuse(
                "apsi_sender_config.db_file",
                "blindjoin serve answers labeled-PSI receivers from a saved DB: the sender's \
                 config must load it (db_file, with no source_file); build and save it first \
                 with save_db_only",
            ));
        }
    };
    let db = db_file::load(&db_path)?;
    let key_check = db_file::key_check(&db)?;
    let template = spec.link.tcp_options().ok_or_else(|| {
        refuse(
            "link_config",
            "missing: the sender listens at its own address in link_config.parties",
        )
    })?;
    Ok(Served {
        db,
        db_path,
        key_check,
        cap: spec.max_query_items,
        template,
    })
}

impl Answer for Served {
    /// Reads the receiver's plan, charges its OPRF evaluations to the DB's key, answers.
    fn answer(&self, _client: &str, link: &mut TcpLink) -> Result<Answered, String> {
        let fail = |link: &mut TcpLink, e: DataError| {
            let why = e.to_string();
            link.abort(&why);
            why
        };
        let msg = link.recv().map_err(|e| fail(link, e.into()))?;
        let rounds = decode_rounds(&msg, 1).map_err(|e| fail(link, e))?;
        let asked: u64 = evaluations_per_bucket(&rounds).values().sum();
        budget::charge_to(
            &budget::APSI,
            Some(&self.db_path),
            &self.key_check,
            self.cap,
            asked,
        )
        .map_err(|r| fail(link, db_file::refusal(r)))?;
        for (_, items) in rounds {
            blindjoin_apsi::serve(link, &self.db, items).map_err(|e| fail(link, e.into()))?;
        }
        Ok(Answered { items: asked })
    }
}
