//! n-party PSI (n ≥ 2): one receiver learns the intersection of all n parties' sets. Two
//! variants, over a full mesh of pairwise links (`links[j]` goes to party `j`, `None` at our own
//! index):
//!
//! - [`NpcVariant::Iterated`] — SecretFlow's `ECDH_PSI_NPC` / `KKRT_PSI_NPC`
//!   ([`iterated`]): a tree of two-party runs. It leaks intermediate intersections (the module
//!   says exactly which, to whom).
//! - [`NpcVariant::ZeroShare`] — the default for our own config ([`zero_share`]): an OPPRF with
//!   zero-sharing among the helpers, after Kolesnikov–Matania–Pinkas–Rosulek–Trieu (CCS 2017)
//!   and the OKVS form of Nevo–Trieu–Yanai (CCS 2021). The receiver learns the final
//!   intersection and the set sizes, nothing else; helpers learn set sizes. Semi-honest, no two
//!   parties colluding.
//!
//! Both start with [`hello_all`]: every party sends every other a digest of the run's setup
//! (protocol, parties, receiver, key columns — bound by the caller's `context`) and its set size,
//! so a party configured differently fails at once, named.

pub mod iterated;
pub mod zero_share;

use crate::ecdh::expect_type;
use crate::{ItemDigest, Progress, ProtocolChoice, ProtocolError, PsiOptions};
use blindjoin_link::wire::{self, ids};
use blindjoin_link::{Link, Reader, put_u64};

/// The links of one party: `links[j]` to party `j`, `None` at our own index.
pub type Links<'a> = [Option<&'a mut dyn Link>];

/// Which n-party protocol runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NpcVariant {
    /// SecretFlow's tree of two-party runs with this two-party protocol (`Ecdh` for
    /// `ECDH_PSI_NPC`, `Kkrt` for `KKRT_PSI_NPC`).
    Iterated(ProtocolChoice),
    /// The leak-free OPPRF / zero-sharing protocol on this OPRF curve (FourQ or Ristretto255).
    ZeroShare(crate::Curve),
}

impl NpcVariant {
    /// A short name for the setup digest and messages.
    pub fn name(&self) -> String {
        match self {
            NpcVariant::Iterated(c) => format!("iterated/{c}"),
            NpcVariant::ZeroShare(c) => format!("zero-share/{c}"),
        }
    }
}

const MSG_HELLO: u8 = wire::byte(ids::NPC_HELLO);

/// Largest set size a party may announce (positions are `u32` on the wire).
pub const MAX_ITEMS: u64 = u32::MAX as u64;

/// Exchanges `context` and set sizes with every other party; returns every party's size
/// (ours at `me`).
///
/// # Errors
/// A peer with another setup digest ([`ProtocolError::Config`] naming it), a size above
/// [`MAX_ITEMS`], a malformed message, or a link failure.
pub fn hello_all(
    links: &mut Links<'_>,
    me: usize,
    context: [u8; 16],
    items: u64,
) -> Result<Vec<u64>, ProtocolError> {
    hello_all_bounded(links, me, context, items, MAX_ITEMS)
}

/// [`hello_all`] with sizes bounded by `max` instead of [`MAX_ITEMS`] (the data path swaps row
/// counts this way, which only fix the bucket count).
///
/// # Errors
/// As [`hello_all`].
pub fn hello_all_bounded(
    links: &mut Links<'_>,
    me: usize,
    context: [u8; 16],
    items: u64,
    max: u64,
) -> Result<Vec<u64>, ProtocolError> {
    if items > max {
        return Err(ProtocolError::Config(format!(
            "n-party PSI takes at most {max} unique keys per party"
        )));
    }
    let mut msg = vec![MSG_HELLO];
    msg.extend_from_slice(&context);
    put_u64(&mut msg, items);
    for l in links.iter_mut().flatten() {
        l.send(&msg)?;
    }
    let mut sizes = vec![0u64; links.len()];
    for (j, l) in links.iter_mut().enumerate() {
        let Some(l) = l else {
            sizes[j] = items;
            continue;
        };
        let got = l.recv()?;
        let mut r = Reader::new(&got, "n-party hello");
        expect_type(&mut r, MSG_HELLO).map_err(|e| blame(&**l, e))?;
        let theirs = r.take(16)?;
        let n = r.u64()?;
        r.finish()?;
        if theirs != context {
            return Err(ProtocolError::Config(format!(
                "party {:?} runs another n-party setup (protocol, party list, receiver or key \
                 columns differ); give every party the same config",
                l.peer_id()
            )));
        }
        if n > max {
            return Err(ProtocolError::PeerMisbehaved(format!(
                "party {:?} announced {n} keys; n-party PSI takes at most {max}",
                l.peer_id()
            )));
        }
        sizes[j] = n;
    }
    if links.get(me).is_none_or(|l| l.is_some()) {
        return Err(ProtocolError::Unreachable(
            "our own index must have no link",
        ));
    }
    Ok(sizes)
}

/// What an n-party run gives a party.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpcOutput {
    /// The sorted indices into our items of the n-way intersection at the receiver, `None`
    /// elsewhere.
    pub intersection: Option<Vec<usize>>,
    /// Every party's set size (ours included), as announced.
    pub sizes: Vec<u64>,
}

/// Runs the n-party PSI. `links` as [`Links`], with a link to every other party; `receiver` is
/// the index of the party that learns the result.
///
/// # Errors
/// Bad indices, a missing link, a setup mismatch, link failures, a misbehaving peer (named), or
/// crypto failures.
#[allow(clippy::too_many_arguments)]
pub fn run_npc(
    links: &mut Links<'_>,
    me: usize,
    receiver: usize,
    variant: NpcVariant,
    context: [u8; 16],
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<NpcOutput, ProtocolError> {
    let n = links.len();
    if n < 2 || me >= n || receiver >= n {
        return Err(ProtocolError::Config(format!(
            "n-party PSI needs at least 2 parties and the receiver among them; got {n} parties, \
             receiver index {receiver}"
        )));
    }
    for (j, l) in links.iter().enumerate() {
        if (j == me) == l.is_some() {
            return Err(ProtocolError::Unreachable(
                "n-party links: one to every other party, none to ourselves",
            ));
        }
    }
    if opts.reveal != crate::Reveal::Intersection {
        return Err(ProtocolError::Config(
            "n-party PSI reveals the intersection; the cardinality-only and threshold modes \
             are two-party"
                .into(),
        ));
    }
    let context = blindjoin_crypto::item_digest(
        [
            &context[..],
            variant.name().as_bytes(),
            &receiver.to_le_bytes(),
        ]
        .concat()
        .as_slice(),
    );
    let sizes = hello_all(links, me, context, items.len() as u64)?;
    let intersection = match variant {
        NpcVariant::Iterated(choice) => iterated::run(
            links, me, receiver, choice, context, &sizes, opts, items, progress,
        ),
        NpcVariant::ZeroShare(curve) => {
            zero_share::run(links, me, receiver, curve, &sizes, opts, items, progress)
        }
    }?;
    Ok(NpcOutput {
        intersection,
        sizes,
    })
}

/// Names the party behind `link` in errors that would otherwise say only "the peer".
pub(crate) fn blame(link: &dyn Link, e: ProtocolError) -> ProtocolError {
    match e {
        ProtocolError::PeerMisbehaved(m) => {
            ProtocolError::PeerMisbehaved(format!("party {:?}: {m}", link.peer_id()))
        }
        ProtocolError::InvalidMessage(d) => ProtocolError::PeerMisbehaved(format!(
            "party {:?} sent a bad message: {d}",
            link.peer_id()
        )),
        other => other,
    }
}

#[cfg(test)]
mod tests;
