//! One party's n-party run (`PROTOCOL_NPC`, `ECDH_PSI_NPC`, `KKRT_PSI_NPC`; the protocols are
//! `blindjoin_protocols::npc`) or DP-PSI run (`DP_PSI_2PC`, `blindjoin_protocols::dp_psi`): read
//! and key the input while the links come up ([`blindjoin_link::establish_many`], a link to every
//! other party), run the protocol on the unique keys, and — the receiver only — write its rows
//! whose key is in the result. The others write nothing.
//!
//! Large inputs run in hash buckets as three-party runs do ([`super::three_party`]): every party
//! first sends every other its row count, all derive the bucket count from the largest and
//! `bucket_size`, then run the protocol once per bucket (each run starts by swapping the bucket's
//! key counts). Links close in a global order of the pairs (by lower, then higher index), the
//! same at every party, so no two parties wait on each other's close in a cycle.

use crate::config::{NPartyProtocol, NPartySpec};
use crate::error::DataError;
use crate::pipeline::bucket::bucket_count;
use crate::pipeline::process::key_groups;
use crate::pipeline::report::{Report, Stages, peak_rss_bytes};
use crate::pipeline::runs::{Runs, SortBy};
use crate::pipeline::three_party::{ThreePartyOutcome, push_matches};
use crate::pipeline::two_party::prepare;
use crate::table::writer::RowWriter;
use blindjoin_link::{Cancel, Link, LinkError, LinkStats, TcpLink, TcpOptions, establish_many};
use blindjoin_protocols::npc::{hello_all_bounded, run_npc};
use blindjoin_protocols::{
    Hello, ItemDigest, NoProgress, Progress, ProtocolChoice, ProtocolError, PsiOptions, Role,
    dp_psi, handshake,
};
use std::time::{Duration, Instant};

/// How long a party whose input is bad keeps trying to reach the others to tell them so.
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// Runs this party of an n-party (or DP-PSI) config over TCP.
///
/// # Errors
/// Any [`DataError`]; the other parties are told about our failure when their links are up.
pub fn run_n_party(
    t: &NPartySpec,
    progress: &dyn Progress,
    cancel: &Cancel,
) -> Result<ThreePartyOutcome, DataError> {
    crate::pipeline::two_party::reported_as_cancelled(run_inner(t, progress, cancel), cancel)
}

fn run_inner(
    t: &NPartySpec,
    progress: &dyn Progress,
    cancel: &Cancel,
) -> Result<ThreePartyOutcome, DataError> {
    let start = Instant::now();
    let spec = &t.spec;
    let base = TcpOptions {
        self_id: String::new(),
        self_addr: String::new(),
        peer_id: String::new(),
        peer_addr: String::new(),
        connect_timeout: spec.connect_timeout,
        recv_timeout: spec.recv_timeout,
        silence_timeout: spec.silence_timeout,
        tls: None,
        shape: spec.link_shape,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (parties, me, cancel2) = (t.parties.clone(), t.me, cancel.clone());
    let (tls_s, tls_c) = (t.tls_server.clone(), t.tls_client.clone());
    std::thread::Builder::new()
        .name("connect".into())
        .spawn(move || {
            let _ = tx.send(establish_many(&parties, me, &base, tls_s, tls_c, &cancel2));
        })
        .map_err(|source| DataError::Io {
            path: spec.input.clone(),
            action: "starting the connect thread",
            source,
        })?;
    let prepared = prepare(spec, progress);
    let wait = if prepared.is_ok() {
        spec.connect_timeout + Duration::from_secs(5)
    } else {
        ABORT_GRACE
    };
    let connect_span = crate::trace::span("connect");
    let connected: Result<Vec<Option<TcpLink>>, LinkError> =
        rx.recv_timeout(wait).unwrap_or_else(|_| {
            Err(LinkError::ConnectTimeout {
                peer: "the other parties".into(),
                addr: t.parties[t.me].addr.clone(),
                waited: wait,
                last: "the connect attempts did not finish".into(),
            })
        });
    drop(connect_span);
    let (prepared, mut links) = match (prepared, connected) {
        (Ok(p), Ok(l)) => (p, l),
        (Err(e), Ok(mut l)) => {
            abort_all(&mut l, &e.to_string());
            return Err(e);
        }
        (Err(e), Err(_)) => return Err(e),
        (Ok(_), Err(e)) => return Err(e.into()),
    };
    if cancel.is_cancelled() {
        abort_all(&mut links, &cancel.reason());
        return Err(LinkError::Cancelled {
            reason: cancel.reason(),
        }
        .into());
    }
    match run_on_links(t, prepared, &mut links, progress, start) {
        Ok(out) => Ok(out),
        Err(e) => {
            let why = if cancel.is_cancelled() {
                cancel.reason()
            } else {
                e.to_string()
            };
            abort_all(&mut links, &why);
            Err(e)
        }
    }
}

fn abort_all<L: Link>(links: &mut [Option<L>], why: &str) {
    for l in links.iter_mut().flatten() {
        l.abort(why);
    }
}

/// Everything after the links are up, on any links (indexed by party; `None` at our index).
///
/// # Errors
/// Protocol, link and output errors.
pub(crate) fn run_on_links<L: Link>(
    t: &NPartySpec,
    prepared: crate::pipeline::two_party::Prepared,
    links: &mut [Option<L>],
    progress: &dyn Progress,
    start: Instant,
) -> Result<ThreePartyOutcome, DataError> {
    let spec = &t.spec;
    if links.len() != t.parties.len() {
        return Err(ProtocolError::Unreachable("one link slot per party").into());
    }
    let (mut table, read_s) = prepared.into_table();
    let mut stages = Stages {
        read_input_s: read_s,
        ..Stages::default()
    };
    let setup = blindjoin_crypto::item_digest(format!("n-party\0{}", t.setup()).as_bytes());

    // Every party's row count first: all derive the same bucket count from the largest.
    let t_hs = Instant::now();
    let totals = {
        let mut refs = dyn_links(links);
        hello_all_bounded(&mut refs, t.me, setup, table.rows, u64::MAX)?
    };
    stages.connect_s = (start.elapsed().as_secs_f64() - read_s).max(t_hs.elapsed().as_secs_f64());
    let largest = totals.iter().copied().max().unwrap_or(0);
    let b = bucket_count(largest, 0, spec.bucket_size)?;

    let learns = t.is_receiver() || spec.broadcast_result;
    let output = match (learns, &spec.output) {
        (false, _) => None,
        (true, Some(out)) => Some(out.clone()),
        (true, None) => {
            return Err(DataError::Config(crate::error::ConfigError::Invalid {
                field: "psi_config.output_config.path".into(),
                message: "missing; this party receives the intersection".into(),
            }));
        }
    };
    let sort = if spec.align {
        SortBy::Key
    } else {
        SortBy::Bytes
    };
    let mut runs = match (&output, table.dir()) {
        (None, _) => None,
        (Some(_), Some(dir)) => Some(Runs::on_disk(dir.join("n-party-matched"), sort)?),
        (Some(_), None) => Some(Runs::in_memory(sort)),
    };
    // ⌈log2 B⌉ more tag bits, as bucketed two-party runs add, so 2^-40 holds for the whole run.
    let opts = PsiOptions {
        batch_size: spec.batch_size,
        extra_stat_bits: usize::BITS - (b - 1).leading_zeros(),
        ..PsiOptions::default()
    };
    if b > 1 {
        progress.stage("running the protocol (buckets)", b as u64);
    }
    let bucket_progress: &dyn Progress = if b > 1 { &NoProgress } else { progress };
    let (mut keys, mut matched_keys, mut peer_keys) = (0u64, 0u64, 0u64);
    let mut bucket_s = Vec::with_capacity(b);
    let mut join_s = 0.0;
    let m = b.min(table.shards());
    let per = b / m;
    let buckets_span = crate::trace::span("buckets");
    for unit in 0..m {
        let t_load = Instant::now();
        let group = table.load_unit(unit, b)?;
        join_s += t_load.elapsed().as_secs_f64();
        for k in unit * per..(unit + 1) * per {
            let _bucket_span = crate::trace::bucket_span("bucket", k);
            let t_bucket = Instant::now();
            let rows = group.bucket(k, b);
            let (ends, digests) = key_groups(&rows);
            keys += digests.len() as u64;
            let t_psi = Instant::now();
            let protocol_span = crate::trace::bucket_span("protocol", k);
            let (found, theirs) = run_bucket(t, links, setup, &opts, &digests, bucket_progress)?;
            let found = if spec.broadcast_result {
                share_result(t, links, &digests, found)?
            } else {
                found
            };
            drop(protocol_span);
            peer_keys += theirs;
            let psi_s = t_psi.elapsed().as_secs_f64();
            stages.protocol_s += psi_s;
            if let (Some(mut found), Some(runs)) = (found, runs.as_mut()) {
                found.sort_unstable();
                found.dedup();
                if found.last().is_some_and(|&g| g >= digests.len()) {
                    return Err(DataError::Protocol(ProtocolError::Unreachable(
                        "the protocol returned an item index out of range",
                    )));
                }
                matched_keys += found.len() as u64;
                push_matches(runs, &rows, &ends, &found, spec.align)?;
                runs.end_run();
            }
            if b > 1 {
                progress.advance(1);
            }
            let took = t_bucket.elapsed().as_secs_f64();
            join_s += (took - psi_s).max(0.0);
            bucket_s.push(took);
        }
    }
    drop(buckets_span);
    // Pairs close in (lower index, higher index) order at every party: no cycle of waits.
    let mut order: Vec<usize> = (0..links.len()).filter(|&p| p != t.me).collect();
    order.sort_by_key(|&p| (p.min(t.me), p.max(t.me)));
    for p in order {
        if let Some(l) = links[p].as_mut() {
            l.close()?;
        }
    }

    let t_write = Instant::now();
    let mut written = (-1i64, -1i64, None);
    if let (Some(out), Some(mut runs)) = (output, runs) {
        let _span = crate::trace::span("merge and write output");
        let mut w = RowWriter::create(
            &out,
            spec.output_format,
            &table.columns,
            &spec.join.null_rep,
        )?;
        let n = runs.merge_into(&mut w)?;
        w.commit()?;
        written = (
            n as i64,
            matched_keys as i64,
            Some(out.display().to_string()),
        );
    }
    stages.write_output_s = t_write.elapsed().as_secs_f64();
    stages.join_s = join_s;
    stages.total_s = start.elapsed().as_secs_f64();

    let per_link: Vec<(String, LinkStats)> = links
        .iter()
        .flatten()
        .map(|l| (l.peer_id().to_string(), l.stats()))
        .collect();
    let (sent, received) = per_link.iter().fold((0, 0), |(s, r), (_, st)| {
        (s + st.bytes_sent, r + st.bytes_received)
    });
    let (curve, mode) = match t.protocol {
        NPartyProtocol::Npc(v) => (None, Some(v.name())),
        NPartyProtocol::Dp { curve, params } => (
            Some(curve.to_string()),
            Some(format!(
                "bob_sub_sampling {}, epsilon {}",
                params.bob_sub_sampling, params.epsilon
            )),
        ),
    };
    let report = Report {
        version: env!("CARGO_PKG_VERSION").to_string(),
        party: t.parties[t.me].id.clone(),
        role: if t.is_receiver() {
            "ROLE_RECEIVER"
        } else {
            "ROLE_SENDER"
        }
        .into(),
        protocol: t.protocol.name(),
        curve,
        mode,
        buckets: b as u64,
        spilled: table.dir().is_some(),
        resumed_at_bucket: 0,
        original_count: table.rows as i64,
        original_key_count: keys as i64,
        intersection_count: written.0,
        intersection_key_count: written.1,
        peer_key_count: peer_keys as i64,
        output_path: written.2,
        aligned: spec.align,
        bytes_sent: sent,
        bytes_received: received,
        stages,
        bucket_s,
        peak_rss_bytes: peak_rss_bytes(),
        bucket_peak_rss_bytes: Vec::new(),
        cardinality: None,
        revealed_key_count: None,
        key_sets_equal: None,
        warnings: spec.warnings.clone(),
    };
    if let Some(p) = spec.report_path() {
        let mut json = serde_json::to_vec_pretty(&report).unwrap_or_default();
        json.push(b'\n');
        crate::table::output::write_atomic(&p, &json)?;
    }
    Ok(ThreePartyOutcome {
        report,
        links: per_link,
    })
}

/// With `broadcast_result`: the receiver sends each other party the digests of the bucket's
/// matched keys (`found`, indices into `digests`) and keeps `found`; every other party receives
/// them and returns its own indices of those keys. A party holds every key of the intersection,
/// so the digests tell it nothing the result does not; a digest it does not hold, or more of
/// them than its own keys, is the receiver misbehaving.
fn share_result<L: Link>(
    t: &NPartySpec,
    links: &mut [Option<L>],
    digests: &[ItemDigest],
    found: Option<Vec<usize>>,
) -> Result<Option<Vec<usize>>, DataError> {
    const RESULT: u8 = blindjoin_link::wire::byte(blindjoin_link::wire::ids::NPC_RESULT);
    let misbehaved = |why: String| DataError::Protocol(ProtocolError::PeerMisbehaved(why));
    if t.is_receiver() {
        let mut found = found.ok_or(ProtocolError::Unreachable("the receiver has a result"))?;
        found.sort_unstable();
        found.dedup();
        let mut bytes = Vec::with_capacity(found.len() * 16);
        for &g in &found {
            let d = digests
                .get(g)
                .ok_or(ProtocolError::Unreachable("found indices are in range"))?;
            bytes.extend_from_slice(d);
        }
        let count = u64::try_from(found.len()).unwrap_or(u64::MAX);
        for (p, l) in links.iter_mut().enumerate() {
            if p == t.me {
                continue;
            }
            let l = l
                .as_mut()
                .ok_or(ProtocolError::Unreachable("a link to every other party"))?;
            let mut head = vec![RESULT];
            head.extend_from_slice(&count.to_le_bytes());
            l.send(&head)?;
            blindjoin_link::send_bulk(l, RESULT, &bytes)?;
        }
        return Ok(Some(found));
    }
    let l = links
        .get_mut(t.receiver)
        .and_then(|l| l.as_mut())
        .ok_or(ProtocolError::Unreachable("a link to the receiver"))?;
    let head = l.recv()?;
    let count = match head.as_slice() {
        [RESULT, n @ ..] if n.len() == 8 => u64::from_le_bytes(n.try_into().unwrap_or([0xff; 8])),
        _ => {
            return Err(misbehaved(
                "the receiver's result head is not a count".into(),
            ));
        }
    };
    let count = usize::try_from(count)
        .ok()
        .filter(|&c| c <= digests.len())
        .ok_or_else(|| {
            misbehaved(format!(
                "the receiver claims {count} matched keys in a bucket where this party holds {}",
                digests.len()
            ))
        })?;
    let bytes = blindjoin_link::recv_bulk(l, RESULT, count * 16, "n-party result")
        .map_err(|e| misbehaved(e.to_string()))?;
    let mut ours: Vec<(ItemDigest, usize)> =
        digests.iter().enumerate().map(|(i, d)| (*d, i)).collect();
    ours.sort_unstable();
    let mut mine = Vec::with_capacity(count);
    for d in bytes.chunks_exact(16) {
        let i = ours
            .binary_search_by(|(o, _)| o.as_slice().cmp(d))
            .map_err(|_| misbehaved("the receiver sent a key this party does not hold".into()))?;
        mine.push(ours[i].1);
    }
    Ok(Some(mine))
}

fn dyn_links<L: Link>(links: &mut [Option<L>]) -> Vec<Option<&mut dyn Link>> {
    links
        .iter_mut()
        .map(|l| l.as_mut().map(|l| l as &mut dyn Link))
        .collect()
}

/// One bucket: the matched item indices (receiver) and the other parties' key counts.
fn run_bucket<L: Link>(
    t: &NPartySpec,
    links: &mut [Option<L>],
    setup: [u8; 16],
    opts: &PsiOptions,
    digests: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<(Option<Vec<usize>>, u64), DataError> {
    match t.protocol {
        NPartyProtocol::Npc(variant) => {
            let mut refs = dyn_links(links);
            let out = run_npc(
                &mut refs, t.me, t.receiver, variant, setup, opts, digests, progress,
            )?;
            let theirs = out
                .sizes
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != t.me)
                .map(|(_, &n)| n)
                .sum();
            Ok((out.intersection, theirs))
        }
        NPartyProtocol::Dp { curve, params } => {
            let peer = 1 - t.me.min(1);
            let link = links
                .get_mut(peer)
                .and_then(|l| l.as_mut())
                .ok_or(ProtocolError::Unreachable("DP-PSI has one peer"))?;
            let role = if t.is_receiver() {
                Role::Receiver
            } else {
                Role::Sender
            };
            let hello = Hello::new(
                ProtocolChoice::Ecdh { curve },
                role,
                false,
                digests.len() as u64,
            )
            .with_context(blindjoin_crypto::item_digest(
                [&setup[..], &params.context()].concat().as_slice(),
            ));
            let hs = handshake(link, hello)?;
            let theirs = hs.theirs().item_count;
            let out = dp_psi::run(link, &hs, curve, params, opts, None, digests, progress)?;
            Ok((out.intersection, theirs))
        }
    }
}

#[cfg(test)]
mod tests;
