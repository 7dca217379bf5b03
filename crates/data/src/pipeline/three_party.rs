//! One party's three-party run (`ECDH_PSI_3PC`; the protocol is
//! `blindjoin_protocols::ecdh_3pc`): read and key the input while the two links come up, run the
//! protocol on the unique keys, and — the receiver only — write its rows whose key all three
//! parties hold. The helpers write nothing.
//!
//! Large inputs run in hash buckets, as two-party runs do ([`crate::pipeline::bucket`]): the parties first
//! swap their row counts, all derive the bucket count from the largest and `bucket_size`
//! (default 2^20), then run the protocol once per bucket on that bucket's unique keys, each
//! bucket preceded by a handshake that swaps its key counts. So memory follows the bucket (and,
//! with a spilled input, the on-disk shards), not the table, and every party learns how many of
//! each other party's keys fall in each bucket (a histogram of a public hash, as in two-party
//! runs). The receiver's matches go to sorted runs, one per bucket, merged into the output at
//! the end. Links close in seat order (R–P, R–Q, P–Q), the same order at every party, so no two
//! parties wait on each other's close in a cycle.

use crate::error::DataError;
use crate::pipeline::bucket::bucket_count;
use crate::pipeline::multi_party::{RunLabel, connect_and_run, run_buckets, write_and_report};
use crate::pipeline::report::{Report, Stages};
use crate::spec::ThreePartySpec;
use blindjoin_link::{Cancel, Link, LinkStats, establish_three};
use blindjoin_protocols::ecdh_3pc::{Seat, handshake_3pc, run_3pc, seats};
use blindjoin_protocols::{Progress, ProtocolError};
use std::time::Instant;

/// What a three-party run did: the usual report (bytes summed over both links) and each link's
/// own counts.
#[derive(Clone, Debug)]
pub struct ThreePartyOutcome {
    /// The report (also written to the report path, if any).
    pub report: Report,
    /// Per link: the peer's id and the link's byte and message counts.
    pub links: Vec<(String, LinkStats)>,
}

/// Runs this party of a three-party config over TCP.
///
/// # Errors
/// Any [`DataError`]; both other parties are told about our failure when their links are up.
pub fn run_three_party(
    t: &ThreePartySpec,
    progress: &dyn Progress,
    cancel: &Cancel,
) -> Result<ThreePartyOutcome, DataError> {
    let start = Instant::now();
    let (parties, me) = (t.parties.clone(), t.me);
    let (tls_s, tls_c) = (t.tls_server.clone(), t.tls_client.clone());
    connect_and_run(
        &t.spec,
        &t.parties[t.me].addr,
        "the two other parties",
        move |base, cancel| establish_three(&parties, me, &base, tls_s, tls_c, &cancel),
        progress,
        cancel,
        |prepared, links| run_on_links(t, prepared, links, progress, start),
    )
}

/// Everything after the links are up, on any links (indexed by party; `None` at our index).
///
/// # Errors
/// Protocol, link and output errors.
pub(crate) fn run_on_links<L: Link>(
    t: &ThreePartySpec,
    prepared: crate::pipeline::two_party::Prepared,
    links: &mut [Option<L>; 3],
    progress: &dyn Progress,
    start: Instant,
) -> Result<ThreePartyOutcome, DataError> {
    let spec = &t.spec;
    let (mut table, read_s) = prepared.into_table();
    let mut stages = Stages {
        read_input_s: read_s,
        ..Stages::default()
    };
    let curve = spec.protocol.curve().ok_or_else(|| {
        DataError::Protocol(ProtocolError::Config(
            "ECDH_PSI_3PC needs protocol_config.ecdh_config.curve".into(),
        ))
    })?;
    let ids: Vec<String> = t.parties.iter().map(|p| p.id.clone()).collect();
    let seat_of = seats(&ids, &ids[t.receiver])?;
    let my_pos = seat_of
        .iter()
        .position(|&p| p == t.me)
        .ok_or(ProtocolError::Unreachable("this party has no seat"))?;
    let seat = Seat::ALL[my_pos];
    let [o0, o1] = seat.others().map(|s| match s {
        Seat::Receiver => seat_of[0],
        Seat::P => seat_of[1],
        Seat::Q => seat_of[2],
    });
    let (l0, l1) = two_links(links, o0, o1)?;

    // Every party's row count first: all derive the same bucket count from the largest.
    let t_hs = Instant::now();
    let handshake_span = crate::trace::span("handshake");
    let totals = handshake_3pc(
        [&mut *l0, &mut *l1],
        seat,
        curve,
        spec.keys.len() as u32,
        &t.setup(),
        table.rows,
    )?;
    drop(handshake_span);
    stages.connect_s = (start.elapsed().as_secs_f64() - read_s).max(t_hs.elapsed().as_secs_f64());
    let largest = totals.sizes.iter().copied().max().unwrap_or(0);
    let b = bucket_count(largest, 0, spec.bucket_size)?;

    let done = run_buckets(
        spec,
        &mut table,
        b,
        t.is_receiver(),
        "three-party-matched",
        &mut stages,
        progress,
        |_, digests, opts, bucket_progress| {
            let agreed = handshake_3pc(
                [&mut *l0, &mut *l1],
                seat,
                curve,
                spec.keys.len() as u32,
                &t.setup(),
                digests.len() as u64,
            )?;
            let theirs = agreed
                .sizes
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != my_pos)
                .map(|(_, &n)| n)
                .sum::<u64>();
            let found = run_3pc(
                [&mut *l0, &mut *l1],
                &agreed,
                opts,
                digests,
                bucket_progress,
            )?;
            Ok((found, theirs))
        },
    )?;
    // Seat order is the same total order at every party, so closing in it cannot deadlock.
    l0.close()?;
    l1.close()?;
    let per_link: Vec<(String, LinkStats)> = [&*l0, &*l1]
        .iter()
        .map(|l| (l.peer_id().to_string(), l.stats()))
        .collect();
    let label = RunLabel {
        party: t.parties[t.me].id.clone(),
        receiver: t.is_receiver(),
        protocol: "PROTOCOL_ECDH_3PC".into(),
        curve: Some(curve.to_string()),
        mode: Some(format!("seat {seat:?}")),
    };
    write_and_report(spec, &table, done, label, stages, start, per_link)
}

/// Mutable borrows of the links to parties `a` and `b` (distinct, both present).
fn two_links<L>(
    links: &mut [Option<L>; 3],
    a: usize,
    b: usize,
) -> Result<(&mut L, &mut L), DataError> {
    let missing =
        || DataError::Protocol(ProtocolError::Unreachable("a three-party link is missing"));
    let [x, y, z] = links;
    let (la, lb) = match (a, b) {
        (0, 1) => (x, y),
        (0, 2) => (x, z),
        (1, 0) => (y, x),
        (1, 2) => (y, z),
        (2, 0) => (z, x),
        (2, 1) => (z, y),
        _ => return Err(missing()),
    };
    Ok((
        la.as_mut().ok_or_else(missing)?,
        lb.as_mut().ok_or_else(missing)?,
    ))
}

#[cfg(test)]
mod tests;
