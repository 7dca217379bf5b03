//! The session handshake: before any protocol message, both parties send a [`Hello`] and check the
//! other's. Any disagreement is an error on *both* sides that names the setting and both values —
//! the check is the same pure function of the two hellos on each side.
//!
//! A hello holds only what the protocol layer needs to agree on: the wire version, the protocol
//! with its curve or mode ([`ProtocolChoice`]), the roles, who learns the result, what it reveals
//! and the set sizes, plus a caller's context digest (the three-party setup). The data path's own
//! settings (join, buckets, key columns, recovery) are agreed by the data path in its own message.

use crate::{ProtocolChoice, ProtocolError, Reveal, Role};
use blindjoin_link::wire::{WireMessage, ids};
use blindjoin_link::{DecodeError, Link, Reader, put_bytes_u16, put_u64};

/// Version of the wire format; both parties must speak the same one.
pub const WIRE_VERSION: &str = concat!("blindjoin/", env!("CARGO_PKG_VERSION"), "/wire-8");
/// Longest version string accepted.
const MAX_VERSION: usize = 128;

/// What one party announces about its run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Program and wire version.
    pub version: String,
    /// The protocol to run, with its curve or mode.
    pub choice: ProtocolChoice,
    /// This party's role.
    pub role: Role,
    /// Whether the sender also receives the result.
    pub broadcast_result: bool,
    /// What the run reveals (the intersection, its size, or at most T of its items).
    pub reveal: Reveal,
    /// Number of (unique) items this party brings — revealed to the peer by every PSI protocol.
    pub item_count: u64,
    /// A digest of settings the caller binds into the handshake (the three-party setup); zero
    /// otherwise. Must agree.
    pub context: [u8; 16],
}

impl Hello {
    /// A hello for this build's wire version, revealing the intersection, with no context.
    pub fn new(
        choice: ProtocolChoice,
        role: Role,
        broadcast_result: bool,
        item_count: u64,
    ) -> Self {
        Hello {
            version: WIRE_VERSION.to_string(),
            choice,
            role,
            broadcast_result,
            reveal: Reveal::Intersection,
            item_count,
            context: [0; 16],
        }
    }

    /// The same hello revealing `reveal`.
    pub fn with_reveal(mut self, reveal: Reveal) -> Self {
        self.reveal = reveal;
        self
    }

    /// The same hello binding `context` (see [`Hello::context`]).
    pub fn with_context(mut self, context: [u8; 16]) -> Self {
        self.context = context;
        self
    }
}

/// `(kind, threshold)` on the wire.
fn reveal_codes(r: Reveal) -> (u8, u64) {
    match r {
        Reveal::Intersection => (0, 0),
        Reveal::Cardinality => (1, 0),
        Reveal::UpTo(t) => (2, t),
    }
}

fn reveal_name(r: Reveal) -> String {
    match r {
        Reveal::Intersection => "the intersection".into(),
        Reveal::Cardinality => "its size only (cardinality_only)".into(),
        Reveal::UpTo(t) => format!("at most {t} of its keys (intersection_threshold)"),
    }
}

/// A decoded hello: either one of our version, or the version string of a peer that speaks
/// another (whose other fields we cannot read).
enum Decoded {
    Same(Hello),
    OtherVersion(String),
}

impl WireMessage for Hello {
    const ID: &'static [u8] = ids::HELLO;
    const NAME: &'static str = "hello";

    fn put_body(&self, out: &mut Vec<u8>) {
        put_bytes_u16(out, self.version.as_bytes());
        let (p, q) = self.choice.wire_codes();
        out.extend_from_slice(&[p, q]);
        out.push(self.role.wire_code());
        out.push(u8::from(self.broadcast_result));
        let (kind, t) = reveal_codes(self.reveal);
        out.push(kind);
        put_u64(out, t);
        put_u64(out, self.item_count);
        out.extend_from_slice(&self.context);
    }

    fn read_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let bad = |reason: String| DecodeError {
            what: "hello",
            reason,
        };
        let version = r.str_u16(MAX_VERSION)?.to_string();
        let (p, q) = (r.u8()?, r.u8()?);
        let choice = ProtocolChoice::from_wire_codes(p, q)
            .ok_or_else(|| bad(format!("unknown protocol code {p}/{q}")))?;
        let code = r.u8()?;
        let role =
            Role::from_wire_code(code).ok_or_else(|| bad(format!("unknown role code {code}")))?;
        let broadcast_result = r.bool()?;
        let reveal = match (r.u8()?, r.u64()?) {
            (0, 0) => Reveal::Intersection,
            (1, 0) => Reveal::Cardinality,
            (2, t) => Reveal::UpTo(t),
            (k, t) => return Err(bad(format!("bad reveal code {k}/{t}"))),
        };
        let item_count = r.u64()?;
        let mut context = [0u8; 16];
        context.copy_from_slice(r.take(16)?);
        Ok(Hello {
            version,
            choice,
            role,
            broadcast_result,
            reveal,
            item_count,
            context,
        })
    }
}

/// Reads the version first: a peer of another wire version is reported as such, not as a
/// malformed hello.
fn decode(bytes: &[u8]) -> Result<Decoded, ProtocolError> {
    let version = bytes
        .strip_prefix(ids::HELLO)
        .and_then(|body| Reader::new(body, "hello").str_u16(MAX_VERSION).ok())
        .map(str::to_string);
    match version {
        Some(v) if v != WIRE_VERSION => Ok(Decoded::OtherVersion(v)),
        _ => Ok(Decoded::Same(Hello::decode(bytes)?)),
    }
}

/// Proof that the handshake ran and both parties agree; only [`handshake`] builds one, and
/// [`crate::run_psi`] requires it.
#[derive(Clone, Debug)]
pub struct HandshakeChecked {
    ours: Hello,
    theirs: Hello,
}

impl HandshakeChecked {
    /// What we announced.
    pub fn ours(&self) -> &Hello {
        &self.ours
    }

    /// What the peer announced.
    pub fn theirs(&self) -> &Hello {
        &self.theirs
    }

    /// The agreed protocol, with its curve or mode.
    pub fn choice(&self) -> ProtocolChoice {
        self.ours.choice
    }

    /// Our role.
    pub fn role(&self) -> Role {
        self.ours.role
    }

    /// Whether the sender also learns the result.
    pub fn broadcast_result(&self) -> bool {
        self.ours.broadcast_result
    }

    /// What the run reveals.
    pub fn reveal(&self) -> Reveal {
        self.ours.reveal
    }

    /// The same agreement for one bucket of a bucketed run, holding `ours` of our items and
    /// `theirs` of the peer's.
    pub fn for_bucket(&self, ours: u64, theirs: u64) -> Self {
        let mut hs = self.clone();
        hs.ours.item_count = ours;
        hs.theirs.item_count = theirs;
        hs
    }

    /// `(n_receiver, n_sender)`: the two parties' item counts by role.
    pub fn set_sizes(&self) -> (u64, u64) {
        match self.ours.role {
            Role::Receiver => (self.ours.item_count, self.theirs.item_count),
            Role::Sender => (self.theirs.item_count, self.ours.item_count),
        }
    }

    /// Whether this party learns the intersection.
    pub fn we_learn_result(&self) -> bool {
        self.ours.role == Role::Receiver || self.ours.broadcast_result
    }
}

/// The settings two hellos compare, each with the config field a user changes to fix it.
fn settings(h: &Hello) -> [(&'static str, String); 6] {
    [
        (
            "protocol_config.protocol",
            h.choice.protocol().config_name().to_string(),
        ),
        (
            "protocol_config.ecdh_config.curve",
            h.choice.curve().map(|c| c.to_string()).unwrap_or_default(),
        ),
        (
            "the protocol mode (rr22_config.low_comm_mode / .malicious)",
            h.choice.mode().unwrap_or_default().to_string(),
        ),
        (
            "what the run reveals (intersection_threshold, blindjoin.cardinality_only, blindjoin.min_intersection)",
            reveal_name(h.reveal),
        ),
        (
            "protocol_config.broadcast_result",
            h.broadcast_result.to_string(),
        ),
        (
            "the three-party setup (link_config.parties, protocol_config.receiver and the number of keys)",
            hex(&h.context),
        ),
    ]
}

/// Compares two hellos. Pure and symmetric up to swapping `ours`/`theirs`, so both parties report
/// the same field.
///
/// # Errors
/// [`ProtocolError::Mismatch`] naming the first setting that differs.
pub fn check(ours: &Hello, theirs: &Hello) -> Result<(), ProtocolError> {
    let mismatch = |field: &'static str, a: String, b: String| ProtocolError::Mismatch {
        field,
        ours: a,
        theirs: b,
        our_role: ours.role.to_string(),
        their_role: theirs.role.to_string(),
    };
    if ours.version != theirs.version {
        return Err(mismatch(
            "program version",
            ours.version.clone(),
            theirs.version.clone(),
        ));
    }
    crate::compare_settings(settings(ours), settings(theirs), ours.role, theirs.role)?;
    if ours.role == theirs.role {
        return Err(mismatch(
            "protocol_config.role (exactly one party must be ROLE_RECEIVER and one ROLE_SENDER)",
            ours.role.to_string(),
            theirs.role.to_string(),
        ));
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Sends our hello, reads the peer's, and checks them. On a mismatch both sides fail with the same
/// field named.
///
/// # Errors
/// [`ProtocolError::Mismatch`], a malformed hello, or a link failure.
pub fn handshake(link: &mut dyn Link, ours: Hello) -> Result<HandshakeChecked, ProtocolError> {
    link.send(&ours.encode())?;
    let theirs = match decode(&link.recv()?)? {
        Decoded::Same(h) => h,
        Decoded::OtherVersion(v) => {
            return Err(ProtocolError::Mismatch {
                field: "program version",
                ours: ours.version.clone(),
                theirs: v,
                our_role: ours.role.to_string(),
                their_role: "other".into(),
            });
        }
    };
    check(&ours, &theirs)?;
    Ok(HandshakeChecked { ours, theirs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Curve;
    use crate::rr22::Rr22Mode;

    fn hello(role: Role) -> Hello {
        Hello::new(
            ProtocolChoice::Ecdh {
                curve: Curve::FourQ,
            },
            role,
            true,
            5,
        )
        .with_reveal(Reveal::UpTo(3))
        .with_context([7; 16])
    }

    #[test]
    fn hello_round_trips() {
        let h = hello(Role::Sender);
        match decode(&h.encode()).unwrap() {
            Decoded::Same(back) => assert_eq!(back, h),
            Decoded::OtherVersion(v) => panic!("{v}"),
        }
    }

    #[test]
    fn each_setting_mismatch_is_named_on_both_sides() {
        let a = hello(Role::Receiver);
        let cases: Vec<(Hello, &str)> = vec![
            (
                Hello {
                    choice: ProtocolChoice::Rr22 {
                        mode: Rr22Mode::Fast,
                    },
                    ..hello(Role::Sender)
                },
                "protocol_config.protocol",
            ),
            (
                Hello {
                    choice: ProtocolChoice::Ecdh { curve: Curve::P256 },
                    ..hello(Role::Sender)
                },
                "curve",
            ),
            (
                hello(Role::Sender).with_reveal(Reveal::Cardinality),
                "what the run reveals",
            ),
            (
                Hello {
                    broadcast_result: false,
                    ..hello(Role::Sender)
                },
                "broadcast_result",
            ),
            (hello(Role::Sender).with_context([8; 16]), "three-party"),
            (hello(Role::Receiver), "protocol_config.role"),
        ];
        for (b, field) in cases {
            for (x, y) in [(&a, &b), (&b, &a)] {
                let e = check(x, y).unwrap_err().to_string();
                assert!(e.contains(field), "{field}: {e}");
            }
        }
        assert!(check(&a, &hello(Role::Sender)).is_ok());
    }

    #[test]
    fn rr22_modes_must_agree() {
        let h = |role, mode| Hello::new(ProtocolChoice::Rr22 { mode }, role, false, 1);
        let e = check(
            &h(Role::Receiver, Rr22Mode::Fast),
            &h(Role::Sender, Rr22Mode::LowComm),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("low_comm_mode"), "{e}");
    }

    #[test]
    fn another_wire_version_is_reported_as_such() {
        let mut theirs = hello(Role::Sender);
        theirs.version = "blindjoin/0.0.1/wire-1".into();
        let (mut a, mut b) = blindjoin_link::mem_pair();
        b.send(&theirs.encode()).unwrap();
        let e = handshake(&mut a, hello(Role::Receiver))
            .unwrap_err()
            .to_string();
        assert!(e.contains("program version") && e.contains("wire-1"), "{e}");
    }

    #[test]
    fn hostile_hellos_are_typed_errors() {
        let good = hello(Role::Sender).encode();
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err() || cut == 0 && decode(&[]).is_err());
        }
        let mut bad_role = good.clone();
        let at = ids::HELLO.len() + 2 + WIRE_VERSION.len() + 2;
        bad_role[at] = 9;
        assert!(decode(&bad_role).is_err());
        let mut bad_proto = good.clone();
        bad_proto[at - 2] = 77;
        assert!(decode(&bad_proto).is_err());
    }
}
