//! The session handshake: before any protocol message, both parties send a [`Hello`] and check the
//! other's. Any disagreement is an error on *both* sides that names the field and both values —
//! the check is the same pure function of the two hellos on each side.

use crate::{Curve, Protocol, ProtocolError, Role};
use blindjoin_link::{Link, Reader, put_bytes_u16, put_u32, put_u64};

/// Version of the wire format; both parties must speak the same one.
pub const WIRE_VERSION: &str = concat!("blindjoin/", env!("CARGO_PKG_VERSION"), "/wire-6");
/// Longest string field in a hello.
const MAX_FIELD: usize = 128;

/// What one party announces about its run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Program and wire version.
    pub version: String,
    /// The protocol to run.
    pub protocol: String,
    /// The curve (empty when the protocol has none).
    pub curve: String,
    /// This party's role.
    pub role: Role,
    /// Number of key columns.
    pub key_columns: u32,
    /// The join type.
    pub join_type: String,
    /// Whether the sender also receives the result.
    pub broadcast_result: bool,
    /// Number of (unique) items this party brings — revealed to the peer by every PSI protocol.
    pub item_count: u64,
    /// The protocol's mode where it has several (RR22: `fast`, `low_comm`, `malicious`); empty
    /// otherwise. Must agree.
    pub variant: String,
    /// Items per bucket when the data path splits the run into buckets (0: one bucket). Must
    /// agree, since both sides derive the bucket count from it.
    pub bucket_size: u64,
}

impl Hello {
    /// A hello for this build's wire version.
    pub fn new(
        protocol: Protocol,
        curve: Option<Curve>,
        role: Role,
        key_columns: u32,
        join_type: &str,
        broadcast_result: bool,
        item_count: u64,
    ) -> Self {
        Hello {
            version: WIRE_VERSION.to_string(),
            protocol: protocol.config_name().to_string(),
            curve: curve
                .map(|c| c.config_name().to_string())
                .unwrap_or_default(),
            role,
            key_columns,
            join_type: join_type.to_string(),
            broadcast_result,
            item_count,
            variant: String::new(),
            bucket_size: 0,
        }
    }

    /// The same hello announcing `bucket_size` items per bucket (0: no bucketing).
    pub fn with_bucket_size(mut self, bucket_size: u64) -> Self {
        self.bucket_size = bucket_size;
        self
    }

    /// The protocol's own mode: [`Hello::variant`] up to the first `/` (what follows are
    /// settings of the data path that must also agree, e.g. `fast/min_intersection=10`).
    pub fn protocol_mode(&self) -> &str {
        self.variant.split('/').next().unwrap_or_default()
    }

    /// The same hello announcing protocol mode `variant` (see [`Hello::variant`]).
    pub fn with_variant(mut self, variant: &str) -> Self {
        self.variant = variant.to_string();
        self
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        put_bytes_u16(&mut out, self.version.as_bytes());
        put_bytes_u16(&mut out, self.protocol.as_bytes());
        put_bytes_u16(&mut out, self.curve.as_bytes());
        out.push(match self.role {
            Role::Receiver => 0,
            Role::Sender => 1,
        });
        put_u32(&mut out, self.key_columns);
        put_bytes_u16(&mut out, self.join_type.as_bytes());
        out.push(u8::from(self.broadcast_result));
        put_u64(&mut out, self.item_count);
        put_bytes_u16(&mut out, self.variant.as_bytes());
        put_u64(&mut out, self.bucket_size);
        out
    }

    fn decode(bytes: &[u8]) -> Result<Hello, ProtocolError> {
        let mut r = Reader::new(bytes, "hello");
        let version = r.str_u16(MAX_FIELD)?.to_string();
        let protocol = r.str_u16(MAX_FIELD)?.to_string();
        let curve = r.str_u16(MAX_FIELD)?.to_string();
        let role = match r.u8()? {
            0 => Role::Receiver,
            1 => Role::Sender,
            other => {
                return Err(ProtocolError::PeerMisbehaved(format!(
                    "unknown role code {other} in hello"
                )));
            }
        };
        let key_columns = r.u32()?;
        let join_type = r.str_u16(MAX_FIELD)?.to_string();
        let broadcast_result = match r.u8()? {
            0 => false,
            1 => true,
            other => {
                return Err(ProtocolError::PeerMisbehaved(format!(
                    "bad boolean {other} in hello"
                )));
            }
        };
        let item_count = r.u64()?;
        let variant = r.str_u16(MAX_FIELD)?.to_string();
        let bucket_size = r.u64()?;
        r.finish()?;
        Ok(Hello {
            version,
            protocol,
            curve,
            role,
            key_columns,
            join_type,
            broadcast_result,
            item_count,
            variant,
            bucket_size,
        })
    }
}

/// Proof that the handshake ran and both parties agree; only [`handshake`] builds one, and
/// [`crate::run_psi`] requires it.
#[derive(Clone, Debug)]
pub struct HandshakeChecked {
    /// What we announced.
    pub ours: Hello,
    /// What the peer announced.
    pub theirs: Hello,
    /// The agreed protocol.
    pub protocol: Protocol,
    /// The agreed curve, if any.
    pub curve: Option<Curve>,
}

impl HandshakeChecked {
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

/// Compares two hellos. Pure and symmetric up to swapping `ours`/`theirs`, so both parties report
/// the same field.
pub fn check(ours: &Hello, theirs: &Hello) -> Result<(), ProtocolError> {
    let mismatch = |field: &'static str, a: String, b: String| ProtocolError::Mismatch {
        field,
        ours: a,
        theirs: b,
        our_role: ours.role.to_string(),
        their_role: theirs.role.to_string(),
    };
    let fields: [(&'static str, String, String); 8] = [
        (
            "program version",
            ours.version.clone(),
            theirs.version.clone(),
        ),
        (
            "protocol_config.protocol",
            ours.protocol.clone(),
            theirs.protocol.clone(),
        ),
        (
            "protocol_config.ecdh_config.curve",
            ours.curve.clone(),
            theirs.curve.clone(),
        ),
        (
            "the protocol mode and what the run reveals (rr22_config.low_comm_mode / .malicious, intersection_threshold, blindjoin.cardinality_only / .min_intersection)",
            ours.variant.clone(),
            theirs.variant.clone(),
        ),
        (
            "the number of key columns (keys)",
            ours.key_columns.to_string(),
            theirs.key_columns.to_string(),
        ),
        (
            "the bucket size (rr22_config.bucket_size / kkrt_config.bucket_size)",
            ours.bucket_size.to_string(),
            theirs.bucket_size.to_string(),
        ),
        (
            "advanced_join_type",
            ours.join_type.clone(),
            theirs.join_type.clone(),
        ),
        (
            "protocol_config.broadcast_result",
            ours.broadcast_result.to_string(),
            theirs.broadcast_result.to_string(),
        ),
    ];
    for (field, a, b) in fields {
        if a != b {
            return Err(mismatch(field, a, b));
        }
    }
    if ours.role == theirs.role {
        return Err(mismatch(
            "protocol_config.role (exactly one party must be ROLE_RECEIVER and one ROLE_SENDER)",
            ours.role.to_string(),
            theirs.role.to_string(),
        ));
    }
    Ok(())
}

/// Sends our hello, reads the peer's, and checks them. On a mismatch both sides fail with the same
/// field named.
///
/// # Errors
/// [`ProtocolError::Mismatch`], a malformed hello, or a link failure.
pub fn handshake(link: &mut dyn Link, ours: Hello) -> Result<HandshakeChecked, ProtocolError> {
    link.send(&ours.encode())?;
    let theirs = Hello::decode(&link.recv()?)?;
    check(&ours, &theirs)?;
    let protocol: Protocol = ours.protocol.parse()?;
    let curve = if ours.curve.is_empty() {
        None
    } else {
        Some(ours.curve.parse::<Curve>()?)
    };
    Ok(HandshakeChecked {
        ours,
        theirs,
        protocol,
        curve,
    })
}
