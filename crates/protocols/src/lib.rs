//! # blindjoin-protocols — PSI protocols over a link
//!
//! A protocol sees only a list of [`ItemDigest`]s (128-bit digests of canonical keys, deduplicated
//! by the data path) and a [`Link`] to the peer, and returns the indices of its own items that are
//! in the intersection — or `None` when this party does not learn the result. It never touches
//! files. The data path calls [`handshake`] and then [`run_psi`], the single dispatch point.
//!
//! The items arrive in the data path's order, which is the order of their keys, so a position
//! tells where a key ranks among ours: a protocol must never let the peer learn which of our
//! positions matched. (Each one here sends per-item values in our order only when the peer cannot
//! relate them to its own, such as ECDH's blinded points; what the peer can match against it
//! shuffles, or sends sorted by a pseudo-random value.)
//!
//! | protocol | module | model |
//! |---|---|---|
//! | `PROTOCOL_ECDH` | [`ecdh`] | semi-honest, DDH in the random-oracle model |
//! | `PROTOCOL_RR22` | [`rr22`] | semi-honest (fast, low_comm); malicious outputs (see module) |
//! | `PROTOCOL_KKRT` | [`kkrt`] | semi-honest (KKRT16 batched OPRF + cuckoo hashing) |
//! | `ub_psi_config` (unbalanced) | [`ub_oprf`] | semi-honest (2HashDH OPRF, offline cache + online query; driven by the data path's `ub` module, not [`run_psi`]) |
//! | `DP_PSI_2PC` | [`dp_psi`] | semi-honest ECDH-PSI with an ε-DP output (sub-sampling + randomized response; its own entry, [`dp_psi::run`]) |
//! | `ECDH_PSI_3PC` | [`ecdh_3pc`] | semi-honest, no two parties colluding (its own entry, [`ecdh_3pc::run_3pc`]) |
//! | n-party (`PROTOCOL_NPC`, `ECDH_PSI_NPC`, `KKRT_PSI_NPC`) | [`npc`] | zero-sharing OPPRF: semi-honest, no two parties colluding; SecretFlow's tree: the two-party protocol's, with intermediate leaks (its own entry, [`npc::run_npc`]) |
//!
//! ```
//! use blindjoin_crypto::{Curve, item_digest};
//! use blindjoin_link::mem_pair;
//! use blindjoin_protocols::*;
//! let (mut la, mut lb) = mem_pair();
//! let ecdh = ProtocolChoice::Ecdh { curve: Curve::Curve25519 };
//! let hello = move |role, n| Hello::new(ecdh, role, true, n);
//! let xs: Vec<_> = ["a", "b", "c"].iter().map(|s| item_digest(s.as_bytes())).collect();
//! let ys: Vec<_> = ["b", "c", "d"].iter().map(|s| item_digest(s.as_bytes())).collect();
//! let t = std::thread::spawn(move || {
//!     let hs = handshake(&mut lb, hello(Role::Sender, 3)).unwrap();
//!     run_psi(&mut lb, &hs, &PsiOptions::default(), &ys, &NoProgress).unwrap()
//! });
//! let hs = handshake(&mut la, hello(Role::Receiver, 3)).unwrap();
//! let mine = run_psi(&mut la, &hs, &PsiOptions::default(), &xs, &NoProgress).unwrap();
//! assert_eq!(mine.intersection, Some(vec![1, 2]));
//! assert_eq!(t.join().unwrap().intersection, Some(vec![0, 1]));
//! ```

mod choice;
pub mod dp_psi;
pub mod ecdh;
pub mod ecdh_3pc;
mod ecdh_shuffled;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
pub mod kkrt;
pub mod mesh;
pub mod npc;
mod positions;
mod progress;
pub mod rr22;
pub mod secretflow;
mod shuffle;
// Unbalanced PSI (ECDH-OPRF, offline/online); the data path's `ub` module drives it.
pub mod ub_oprf;

pub use blindjoin_crypto::{Curve, ItemDigest};
pub use blindjoin_link::Link;
pub use choice::ProtocolChoice;
pub use error::ProtocolError;
pub use handshake::{HandshakeChecked, Hello, handshake};
pub use progress::{NoProgress, Phases, Progress, Unit};

use std::fmt;
use std::str::FromStr;
use zeroize::Zeroizing;

/// The PSI protocols, named as in SecretFlow's v2 config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// ECDH-PSI (Meadows 1986; Huberman–Franklin–Hogg 1999).
    Ecdh,
    /// KKRT16 (Kolesnikov–Kumaresan–Rosulek–Trieu, CCS 2016): batched OPRF + cuckoo hashing;
    /// see [`kkrt`].
    Kkrt,
    /// RR22 (Raghuraman–Rindal, CCS 2022): OKVS + silent VOLE; see [`rr22`].
    Rr22,
}

impl Protocol {
    /// SecretFlow's spelling.
    pub fn config_name(self) -> &'static str {
        match self {
            Protocol::Ecdh => "PROTOCOL_ECDH",
            Protocol::Kkrt => "PROTOCOL_KKRT",
            Protocol::Rr22 => "PROTOCOL_RR22",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.config_name())
    }
}

impl FromStr for Protocol {
    type Err = ProtocolError;

    /// `PROTOCOL_ECDH` / `ecdh`, `PROTOCOL_KKRT` / `kkrt`, `PROTOCOL_RR22` / `rr22`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_uppercase();
        Ok(match t.strip_prefix("PROTOCOL_").unwrap_or(&t) {
            "ECDH" => Protocol::Ecdh,
            "KKRT" => Protocol::Kkrt,
            "RR22" => Protocol::Rr22,
            _ => {
                return Err(ProtocolError::Unsupported {
                    what: format!("protocol {s:?}"),
                    hint: "use PROTOCOL_RR22, PROTOCOL_KKRT or PROTOCOL_ECDH".into(),
                });
            }
        })
    }
}

/// Which side a party plays. The receiver always learns the intersection; the sender learns it
/// only with `broadcast_result`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Role {
    /// Learns the result.
    Receiver,
    /// Helps; learns the result only if it is broadcast.
    Sender,
}

impl Role {
    /// The peer's role.
    pub fn other(self) -> Role {
        match self {
            Role::Receiver => Role::Sender,
            Role::Sender => Role::Receiver,
        }
    }

    /// The role's byte in typed messages.
    pub fn wire_code(self) -> u8 {
        match self {
            Role::Receiver => 0,
            Role::Sender => 1,
        }
    }

    /// The role [`Role::wire_code`] names.
    pub fn from_wire_code(code: u8) -> Option<Role> {
        match code {
            0 => Some(Role::Receiver),
            1 => Some(Role::Sender),
            _ => None,
        }
    }

    /// SecretFlow's spelling.
    pub fn config_name(self) -> &'static str {
        match self {
            Role::Receiver => "ROLE_RECEIVER",
            Role::Sender => "ROLE_SENDER",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.config_name())
    }
}

/// Local knobs that need not agree between the parties.
#[derive(Clone)]
pub struct PsiOptions {
    /// Items per message (SecretFlow's `ecdh_config.batch_size`, default 4096).
    pub batch_size: usize,
    /// A user-supplied secret key (raw 32 bytes); random per run when `None`.
    pub secret_key: Option<Zeroizing<Vec<u8>>>,
    /// Extra statistical-security bits for match tags, `⌈log2 B⌉` when the run is split into `B`
    /// buckets, so the false-match bound 2^-40 holds for the whole run, not per bucket. Both
    /// parties derive it from agreed values.
    pub extra_stat_bits: u32,
    /// What the receiver may learn in this run (or bucket): [`Hello::reveal`] of the handshake,
    /// with a threshold lowered by what earlier buckets revealed. Anything but
    /// [`Reveal::Intersection`] needs `PROTOCOL_ECDH`.
    pub reveal: Reveal,
}

/// Never prints the secret key.
impl fmt::Debug for PsiOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PsiOptions")
            .field("batch_size", &self.batch_size)
            .field(
                "secret_key",
                &self.secret_key.as_ref().map(|_| "<redacted>"),
            )
            .field("extra_stat_bits", &self.extra_stat_bits)
            .field("reveal", &self.reveal)
            .finish()
    }
}

/// What a run reveals to the receiver (and, with `broadcast_result`, to the sender).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reveal {
    /// The intersection itself.
    #[default]
    Intersection,
    /// Only its size |X ∩ Y| (PSI-CA).
    Cardinality,
    /// Its size, and at most this many of its items, chosen at random (SecretFlow's threshold
    /// PSI, `intersection_threshold`).
    UpTo(u64),
}

impl Default for PsiOptions {
    fn default() -> Self {
        Self {
            batch_size: 4096,
            secret_key: None,
            extra_stat_bits: 0,
            reveal: Reveal::Intersection,
        }
    }
}

/// Largest accepted batch size: keeps one message of 33-byte points under 64 MiB.
pub const MAX_BATCH_SIZE: usize = 1 << 20;

/// What a party learns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PsiOutput {
    /// Sorted indices into this party's items that are in the intersection; `None` if this party
    /// does not learn the result.
    pub intersection: Option<Vec<usize>>,
    /// |X ∩ Y|, in the [`Reveal::Cardinality`] and [`Reveal::UpTo`] modes, for the parties that
    /// learn it (the receiver; the sender too with `broadcast_result`).
    pub cardinality: Option<u64>,
    /// In [`Reveal::UpTo`] mode, how many items of the intersection were revealed (both parties
    /// know it, so both can enforce the cap across buckets).
    pub revealed: Option<u64>,
}

impl PsiOutput {
    /// The whole intersection (or `None`), as the protocols that reveal nothing else return it.
    pub fn intersection(intersection: Option<Vec<usize>>) -> Self {
        PsiOutput {
            intersection,
            ..PsiOutput::default()
        }
    }
}

/// Runs the agreed protocol on `items` (this party's deduplicated digests).
///
/// # Errors
/// Link failures, a misbehaving peer, or crypto failures; see [`ProtocolError`].
pub fn run_psi(
    link: &mut dyn Link,
    hs: &HandshakeChecked,
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<PsiOutput, ProtocolError> {
    if items.len() as u64 != hs.ours().item_count {
        return Err(ProtocolError::Unreachable(
            "item count differs from the handshake",
        ));
    }
    if opts.batch_size == 0 || opts.batch_size > MAX_BATCH_SIZE {
        return Err(ProtocolError::Config(format!(
            "batch_size must be between 1 and {MAX_BATCH_SIZE}, got {}",
            opts.batch_size
        )));
    }
    let agreed_kind = std::mem::discriminant(&hs.reveal());
    if std::mem::discriminant(&opts.reveal) != agreed_kind {
        return Err(ProtocolError::Unreachable(
            "the reveal mode differs from the handshake's",
        ));
    }
    // The one place a protocol choice becomes its implementation.
    match hs.choice() {
        ProtocolChoice::Ecdh { curve } => ecdh::run(link, hs, curve, opts, items, progress),
        ProtocolChoice::Rr22 { mode } => {
            refuse_reveal(hs, opts)?;
            rr22::run(link, hs, mode, opts, items, progress)
        }
        ProtocolChoice::Kkrt => {
            refuse_reveal(hs, opts)?;
            kkrt::run(link, hs, opts, items, progress)
        }
    }
}

/// Compares two parties' settings, each named by the field a user changes to fix it (the same
/// names, in the same order, on both sides), so both parties report the first that differs.
///
/// # Errors
/// [`ProtocolError::Mismatch`] naming that setting and both values.
pub fn compare_settings<const N: usize>(
    ours: [(&'static str, String); N],
    theirs: [(&'static str, String); N],
    our_role: Role,
    their_role: Role,
) -> Result<(), ProtocolError> {
    for ((field, a), (_, b)) in ours.into_iter().zip(theirs) {
        if a != b {
            return Err(ProtocolError::Mismatch {
                field,
                ours: a,
                theirs: b,
                our_role: our_role.to_string(),
                their_role: their_role.to_string(),
            });
        }
    }
    Ok(())
}

/// `(n_receiver, n_sender)` when both are at most `max`. Too many items of our own is a setting
/// to change (`hint`); too many announced by the peer is the peer's fault.
pub(crate) fn sizes_within(
    hs: &HandshakeChecked,
    max: u64,
    name: &str,
    hint: &str,
) -> Result<(u64, u64), ProtocolError> {
    if hs.ours().item_count > max {
        return Err(ProtocolError::Config(format!(
            "{name} takes at most {max} unique keys per party{hint}"
        )));
    }
    if hs.theirs().item_count > max {
        return Err(ProtocolError::PeerMisbehaved(format!(
            "the peer announced {} unique keys; {name} takes at most {max} per party",
            hs.theirs().item_count
        )));
    }
    Ok(hs.set_sizes())
}

/// The cardinality-only and threshold modes need a protocol that can hide which items match.
fn refuse_reveal(hs: &HandshakeChecked, opts: &PsiOptions) -> Result<(), ProtocolError> {
    if opts.reveal == Reveal::Intersection {
        return Ok(());
    }
    Err(ProtocolError::Config(format!(
        "{} reveals the intersection itself; the cardinality-only and threshold modes need \
         PROTOCOL_ECDH",
        hs.choice()
    )))
}

#[cfg(test)]
mod tests;
