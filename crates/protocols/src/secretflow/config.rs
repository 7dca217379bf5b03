//! The config check of psi's PSI v2 session (`AbstractPsiParty::CheckPeerConfig`,
//! `psi/interface.cc`@242a8fa): both parties AllGather their `psi.v2.PsiConfig` (with the
//! inputs, outputs, keys, debug options and recovery folder cleared, `disable_alignment` false
//! and `input_attr.keys_unique` false), require different roles, set both roles to 0 and require
//! the rest equal — including which empty submessages are present, as protobuf's
//! `MessageDifferencer` does. We build the same bytes the wheel builds from the same settings
//! (`psi/apps/psi_launcher/launch.cc` `ExecConfToV2Conf`), and on a mismatch name the first
//! field that differs.

use crate::ProtocolError;
use blindjoin_link::secretflow::proto::{Fields, Value, put_bytes_field, put_varint_field};
use std::collections::BTreeMap;

/// `psi.v2.Protocol`.
pub const PROTOCOL_ECDH: u64 = 1;
/// `psi.v2.Protocol`.
pub const PROTOCOL_KKRT: u64 = 2;
/// `psi.v2.Protocol`.
pub const PROTOCOL_RR22: u64 = 3;
/// `psi.v2.Role`.
pub const ROLE_RECEIVER: u64 = 1;
/// `psi.v2.Role`.
pub const ROLE_SENDER: u64 = 2;

/// The settings that take part in the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PsiConfig {
    /// `protocol_config.protocol`.
    pub protocol: u64,
    /// `protocol_config.role`.
    pub role: u64,
    /// `protocol_config.broadcast_result`.
    pub broadcast_result: bool,
    /// `protocol_config.ecdh_config.curve` (`CurveType`).
    pub curve: u64,
    /// `protocol_config.ecdh_config.batch_size` (compared, not used on the wire).
    pub ecdh_batch_size: u64,
    /// `protocol_config.kkrt_config.bucket_size`.
    pub kkrt_bucket_size: u64,
    /// `protocol_config.rr22_config.bucket_size`.
    pub rr22_bucket_size: u64,
    /// `protocol_config.rr22_config.low_comm_mode`.
    pub rr22_low_comm: bool,
    /// `advanced_join_type` (INNER = 1, LEFT = 2, RIGHT = 3, FULL = 4, DIFFERENCE = 5).
    pub join_type: u64,
    /// `left_side` (a role).
    pub left_side: u64,
    /// `check_hash_digest`.
    pub check_hash_digest: bool,
    /// `output_attr.csv_null_rep`.
    pub csv_null_rep: String,
    /// `recovery_config.enabled`.
    pub recovery: bool,
}

impl PsiConfig {
    /// The serialized message, field by field as the wheel writes it.
    pub fn encode(&self) -> Vec<u8> {
        let mut pc = Vec::new();
        put_varint_field(&mut pc, 1, self.protocol);
        put_varint_field(&mut pc, 2, self.role);
        if self.broadcast_result {
            put_varint_field(&mut pc, 3, 1);
        }
        let mut ecdh = Vec::new();
        if self.curve != 0 {
            put_varint_field(&mut ecdh, 1, self.curve);
        }
        if self.ecdh_batch_size != 0 {
            put_varint_field(&mut ecdh, 2, self.ecdh_batch_size);
        }
        put_bytes_field(&mut pc, 4, &ecdh);
        let mut kkrt = Vec::new();
        if self.kkrt_bucket_size != 0 {
            put_varint_field(&mut kkrt, 1, self.kkrt_bucket_size);
        }
        put_bytes_field(&mut pc, 5, &kkrt);
        let mut rr22 = Vec::new();
        if self.rr22_bucket_size != 0 {
            put_varint_field(&mut rr22, 1, self.rr22_bucket_size);
        }
        if self.rr22_low_comm {
            put_varint_field(&mut rr22, 2, 1);
        }
        put_bytes_field(&mut pc, 6, &rr22);

        let mut out = Vec::new();
        put_bytes_field(&mut out, 1, &pc);
        put_bytes_field(&mut out, 2, &[]);
        put_bytes_field(&mut out, 3, &[]);
        put_bytes_field(&mut out, 7, &[]);
        let mut rec = Vec::new();
        if self.recovery {
            put_varint_field(&mut rec, 1, 1);
        }
        put_bytes_field(&mut out, 11, &rec);
        if self.join_type != 0 {
            put_varint_field(&mut out, 12, self.join_type);
        }
        if self.left_side != 0 {
            put_varint_field(&mut out, 13, self.left_side);
        }
        if self.check_hash_digest {
            put_varint_field(&mut out, 14, 1);
        }
        put_bytes_field(&mut out, 15, &[]);
        let mut oa = Vec::new();
        if !self.csv_null_rep.is_empty() {
            put_bytes_field(&mut oa, 1, self.csv_null_rep.as_bytes());
        }
        put_bytes_field(&mut out, 16, &oa);
        out
    }
}

/// The path of a field, for messages: SecretFlow's names where known.
fn field_name(path: &[u32]) -> &'static str {
    match path {
        [1] => "psi_config.protocol_config",
        [1, 1] => "psi_config.protocol_config.protocol",
        [1, 2] => "psi_config.protocol_config.role",
        [1, 3] => "psi_config.protocol_config.broadcast_result",
        [1, 4] => "psi_config.protocol_config.ecdh_config",
        [1, 4, 1] => "psi_config.protocol_config.ecdh_config.curve",
        [1, 4, 2] => "psi_config.protocol_config.ecdh_config.batch_size",
        [1, 5] => "psi_config.protocol_config.kkrt_config",
        [1, 5, 1] => "psi_config.protocol_config.kkrt_config.bucket_size",
        [1, 6] => "psi_config.protocol_config.rr22_config",
        [1, 6, 1] => "psi_config.protocol_config.rr22_config.bucket_size",
        [1, 6, 2] => "psi_config.protocol_config.rr22_config.low_comm_mode",
        [2] => "psi_config.input_config",
        [3] => "psi_config.output_config",
        [7] => "psi_config.debug_options",
        [10] => "psi_config.disable_alignment",
        [11] => "psi_config.recovery_config",
        [11, 1] => "psi_config.recovery_config.enabled",
        [12] => "psi_config.advanced_join_type",
        [13] => "psi_config.left_side",
        [14] => "psi_config.check_hash_digest",
        [15] => "psi_config.input_attr",
        [15, 1] => "psi_config.input_attr.keys_unique",
        [16] => "psi_config.output_attr",
        [16, 1] => "psi_config.output_attr.csv_null_rep",
        _ => "a psi_config field this party does not know",
    }
}

/// Which length-delimited fields are submessages (the others are strings or bytes).
fn is_message(path: &[u32]) -> bool {
    matches!(
        path,
        [1] | [2] | [3] | [7] | [11] | [15] | [16] | [1, 4] | [1, 5] | [1, 6]
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Leaf {
    Present,
    Varint(u64),
    Fixed(u64),
    Bytes(Vec<u8>),
}

impl std::fmt::Display for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Leaf::Present => f.write_str("set"),
            Leaf::Varint(v) | Leaf::Fixed(v) => write!(f, "{v}"),
            Leaf::Bytes(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
        }
    }
}

const MAX_DEPTH: usize = 3;

fn flatten(
    buf: &[u8],
    path: &mut Vec<u32>,
    out: &mut BTreeMap<Vec<u32>, Leaf>,
) -> Result<(), ProtocolError> {
    let mut f = Fields::new(buf, "psi.v2.PsiConfig");
    while let Some((field, v)) = f
        .next_field()
        .map_err(|e| ProtocolError::PeerMisbehaved(e.to_string()))?
    {
        path.push(field);
        let leaf = match v {
            Value::Varint(x) => Leaf::Varint(x),
            Value::Fixed64(x) => Leaf::Fixed(x),
            Value::Fixed32(x) => Leaf::Fixed(u64::from(x)),
            Value::Bytes(b) if is_message(path) && path.len() < MAX_DEPTH => {
                flatten(b, path, out)?;
                Leaf::Present
            }
            Value::Bytes(b) => Leaf::Bytes(b.to_vec()),
        };
        // A repeated field (`keys`, cleared by both) keeps its last value here; what matters
        // is that a difference shows.
        out.insert(path.clone(), leaf);
        path.pop();
    }
    Ok(())
}

/// Checks the peer's serialized config against ours as psi does. `ours` and `theirs` are the
/// AllGathered bytes.
///
/// # Errors
/// [`ProtocolError::Mismatch`] naming the first differing field (roles: equal roles), or
/// [`ProtocolError::PeerMisbehaved`] if the peer's bytes do not parse.
pub fn check_peer(ours: &[u8], theirs: &[u8], our_role: &str) -> Result<(), ProtocolError> {
    let mut a = BTreeMap::new();
    let mut b = BTreeMap::new();
    flatten(ours, &mut Vec::new(), &mut a)?;
    flatten(theirs, &mut Vec::new(), &mut b)?;
    let role = |m: &BTreeMap<Vec<u32>, Leaf>| match m.get(&vec![1, 2]) {
        Some(Leaf::Varint(r)) => *r,
        _ => 0,
    };
    let their_role = match role(&b) {
        ROLE_RECEIVER => "receiver",
        ROLE_SENDER => "sender",
        _ => "no role",
    };
    if role(&a) == role(&b) {
        return Err(ProtocolError::Mismatch {
            field: "psi_config.protocol_config.role",
            ours: our_role.into(),
            theirs: format!("{their_role} too"),
            our_role: our_role.into(),
            their_role: their_role.into(),
        });
    }
    a.remove(&vec![1, 2]);
    b.remove(&vec![1, 2]);
    let keys: std::collections::BTreeSet<&Vec<u32>> = a.keys().chain(b.keys()).collect();
    for k in keys {
        let (x, y) = (a.get(k), b.get(k));
        if x != y {
            let show = |l: Option<&Leaf>| l.map_or_else(|| "not set".to_string(), Leaf::to_string);
            let name = field_name(k);
            let num = if name.starts_with("a psi_config") {
                format!(
                    " (field {})",
                    k.iter().map(u32::to_string).collect::<Vec<_>>().join(".")
                )
            } else {
                String::new()
            };
            return Err(ProtocolError::Mismatch {
                field: name,
                ours: format!("{}{num}", show(x)),
                theirs: show(y),
                our_role: our_role.into(),
                their_role: their_role.into(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn wheel_receiver() -> PsiConfig {
        PsiConfig {
            protocol: PROTOCOL_ECDH,
            role: ROLE_RECEIVER,
            broadcast_result: true,
            curve: 1,
            ecdh_batch_size: 4096,
            kkrt_bucket_size: 1 << 20,
            rr22_bucket_size: 1 << 20,
            rr22_low_comm: false,
            join_type: 1,
            left_side: ROLE_RECEIVER,
            check_hash_digest: true,
            csv_null_rep: "NULL".into(),
            recovery: false,
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn the_wheels_receiver_config_bytes() {
        // Captured from spu 0.9.5: receiver, broadcast, CURVE_25519, batch 4096, bucket 2^20.
        let want = hex(
            "0a19 0801 1001 1801 2205 0801 108020 2a04 08808040 3204 08808040 1200 1a00 3a00 \
             5a00 6001 6801 7001 7a00 8201 06 0a04 4e554c4c",
        );
        assert_eq!(wheel_receiver().encode(), want);
    }

    #[test]
    fn equal_configs_pass_and_a_difference_is_named() {
        let ours = wheel_receiver();
        let mut theirs = ours.clone();
        theirs.role = ROLE_SENDER;
        check_peer(&ours.encode(), &theirs.encode(), "receiver").unwrap();
        let mut batch = theirs.clone();
        batch.ecdh_batch_size = 1000;
        let e = check_peer(&ours.encode(), &batch.encode(), "receiver").unwrap_err();
        assert!(
            e.to_string()
                .contains("psi_config.protocol_config.ecdh_config.batch_size"),
            "{e}"
        );
        let mut bc = theirs.clone();
        bc.broadcast_result = false;
        let e = check_peer(&ours.encode(), &bc.encode(), "receiver").unwrap_err();
        assert!(e.to_string().contains("broadcast_result"), "{e}");
        let e = check_peer(&ours.encode(), &ours.encode(), "receiver").unwrap_err();
        assert!(e.to_string().contains("role"), "{e}");
        let mut extra = theirs.encode();
        put_varint_field(&mut extra, 99, 5);
        let e = check_peer(&ours.encode(), &extra, "receiver").unwrap_err();
        assert!(e.to_string().contains("field 99"), "{e}");
        assert!(check_peer(&ours.encode(), &[0x0a, 0x40], "receiver").is_err());
    }
}
