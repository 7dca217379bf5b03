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

use crate::error::DataError;
use crate::pipeline::bucket::bucket_count;
use crate::pipeline::multi_party::{RunLabel, connect_and_run, run_buckets, write_and_report};
use crate::pipeline::report::Stages;
use crate::pipeline::three_party::ThreePartyOutcome;
use crate::spec::{NPartyProtocol, NPartySpec};
use blindjoin_link::{Cancel, Link, LinkStats, establish_many};
use blindjoin_protocols::mesh::{MeshSeat, run_mesh};
use blindjoin_protocols::npc::hello_all_bounded;
use blindjoin_protocols::{ItemDigest, Progress, ProtocolError, PsiOptions};
use std::time::Instant;

/// Runs this party of an n-party (or DP-PSI) config over TCP.
///
/// # Errors
/// Any [`DataError`]; the other parties are told about our failure when their links are up.
pub fn run_n_party(
    t: &NPartySpec,
    progress: &dyn Progress,
    cancel: &Cancel,
) -> Result<ThreePartyOutcome, DataError> {
    let start = Instant::now();
    let (parties, me) = (t.parties.clone(), t.me);
    let (tls_s, tls_c) = (t.tls_server.clone(), t.tls_client.clone());
    connect_and_run(
        &t.spec,
        &t.parties[t.me].addr,
        "the other parties",
        move |base, cancel| establish_many(&parties, me, &base, tls_s, tls_c, &cancel),
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
    let done = run_buckets(
        spec,
        &mut table,
        b,
        learns,
        "n-party-matched",
        &mut stages,
        progress,
        |_, digests, opts, bucket_progress| {
            let (found, theirs) = run_bucket(t, links, setup, opts, digests, bucket_progress)?;
            let found = if spec.broadcast_result {
                share_result(t, links, digests, found)?
            } else {
                found
            };
            Ok((found, theirs))
        },
    )?;
    // Pairs close in (lower index, higher index) order at every party: no cycle of waits.
    let mut order: Vec<usize> = (0..links.len()).filter(|&p| p != t.me).collect();
    order.sort_by_key(|&p| (p.min(t.me), p.max(t.me)));
    for p in order {
        if let Some(l) = links[p].as_mut() {
            l.close()?;
        }
    }
    let per_link: Vec<(String, LinkStats)> = links
        .iter()
        .flatten()
        .map(|l| (l.peer_id().to_string(), l.stats()))
        .collect();
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
    let label = RunLabel {
        party: t.parties[t.me].id.clone(),
        receiver: t.is_receiver(),
        protocol: t.protocol.name(),
        curve,
        mode,
    };
    write_and_report(spec, &table, done, label, stages, start, per_link)
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

/// One bucket, through the protocols' one entry for a mesh: the matched item indices
/// (receiver) and the other parties' key counts.
fn run_bucket<L: Link>(
    t: &NPartySpec,
    links: &mut [Option<L>],
    setup: [u8; 16],
    opts: &PsiOptions,
    digests: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<(Option<Vec<usize>>, u64), DataError> {
    let seat = MeshSeat {
        me: t.me,
        receiver: t.receiver,
        setup,
    };
    let out = run_mesh(
        &mut dyn_links(links),
        t.protocol,
        seat,
        opts,
        digests,
        progress,
    )?;
    Ok((out.intersection, out.others_items))
}

#[cfg(test)]
mod tests;
