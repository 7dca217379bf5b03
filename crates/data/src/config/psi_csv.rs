//! SecretFlow's `psi_csv(...)` call (the whitepaper's Python API) → a two-party [`RunSpec`]: the
//! Python layer hands over the call's arguments and builds no config per protocol. SecretFlow's
//! protocol names map to a [`ProtocolChoice`] here and only here.

use super::{invalid, parse_curve};
use crate::error::ConfigError;
use crate::spec::{Parties, RunSpec};
use blindjoin_protocols::rr22::Rr22Mode;
use blindjoin_protocols::{ProtocolChoice, Role};
use std::path::PathBuf;
use std::time::Duration;

/// One party's share of a `psi_csv` call.
#[derive(Clone, Debug)]
pub struct PsiCsvCall {
    /// This party.
    pub self_party: String,
    /// Every party with the address this party uses for it (its own: where it listens), in the
    /// call's order.
    pub parties: Vec<(String, String)>,
    /// The party that receives the result.
    pub receiver: String,
    /// This party's key columns.
    pub keys: Vec<String>,
    /// This party's input.
    pub input: PathBuf,
    /// This party's output (a sender without `broadcast_result` writes none).
    pub output: Option<PathBuf>,
    /// SecretFlow's protocol name (`ECDH_PSI_2PC`, `KKRT_PSI_2PC`, `RR22_PSI_2PC`,
    /// `RR22_FAST_PSI_2PC`, `RR22_LOWCOMM_PSI_2PC`) or a v2 one (`PROTOCOL_ECDH`, ...).
    pub protocol: String,
    /// ECDH's curve (`curve_type`).
    pub curve: String,
    /// RR22's mode, for a protocol name that does not say it (`PROTOCOL_RR22`, `RR22_PSI_2PC`).
    pub rr22_mode: Option<Rr22Mode>,
    /// `broadcast_result`.
    pub broadcast_result: bool,
    /// `sort`: align the outputs row by row.
    pub sort: bool,
    /// RR22's and KKRT's keys per bucket.
    pub bucket_size: Option<u64>,
    /// How long to wait for the peer to connect.
    pub connect_timeout: Option<Duration>,
    /// How long to wait for any one message.
    pub recv_timeout: Option<Duration>,
    /// Where the report goes.
    pub report: Option<PathBuf>,
}

/// The protocol a `psi_csv` name asks for.
///
/// # Errors
/// An unknown name or curve, naming the argument.
pub fn psi_csv_protocol(name: &str, curve: &str) -> Result<ProtocolChoice, ConfigError> {
    let rr22 = |mode| Ok(ProtocolChoice::Rr22 { mode });
    match name.trim() {
        "ECDH_PSI_2PC" | "PROTOCOL_ECDH" => Ok(ProtocolChoice::Ecdh {
            curve: parse_curve(curve).map_err(|e| invalid("curve_type", &e.to_string()))?,
        }),
        "KKRT_PSI_2PC" | "PROTOCOL_KKRT" => Ok(ProtocolChoice::Kkrt),
        "RR22_PSI_2PC" | "RR22_FAST_PSI_2PC" | "PROTOCOL_RR22" => rr22(Rr22Mode::Fast),
        "RR22_LOWCOMM_PSI_2PC" => rr22(Rr22Mode::LowComm),
        other => Err(invalid(
            "protocol",
            &format!(
                "unknown protocol {other:?}; use ECDH_PSI_2PC, KKRT_PSI_2PC, RR22_PSI_2PC \
                 (RR22_FAST_PSI_2PC) or RR22_LOWCOMM_PSI_2PC"
            ),
        )),
    }
}

/// This party's run of a `psi_csv` call.
///
/// # Errors
/// A party or receiver not among the parties, more or fewer than two parties, an unknown
/// protocol or curve, a missing output for a party that learns the result, a zero bucket size.
pub fn psi_csv_spec(call: PsiCsvCall) -> Result<RunSpec, ConfigError> {
    let names: Vec<&str> = call.parties.iter().map(|(p, _)| p.as_str()).collect();
    if call.parties.len() != 2 {
        return Err(invalid(
            "parties",
            &format!(
                "has {} parties ({names:?}); psi_csv runs exactly 2",
                call.parties.len()
            ),
        ));
    }
    let find = |who: &str, field: &str| {
        call.parties
            .iter()
            .position(|(p, _)| p == who)
            .ok_or_else(|| {
                invalid(
                    field,
                    &format!("{who:?} is not one of the parties {names:?}"),
                )
            })
    };
    let me = find(&call.self_party, "self_party")?;
    find(&call.receiver, "receiver")?;
    let peer = 1 - me;
    let role = if call.self_party == call.receiver {
        Role::Receiver
    } else {
        Role::Sender
    };
    let protocol = match (
        psi_csv_protocol(&call.protocol, &call.curve)?,
        call.rr22_mode,
    ) {
        (
            ProtocolChoice::Rr22 {
                mode: Rr22Mode::Fast,
            },
            Some(mode),
        ) if call.protocol.trim() != "RR22_FAST_PSI_2PC" => ProtocolChoice::Rr22 { mode },
        (choice, _) => choice,
    };
    if call.keys.is_empty() {
        return Err(invalid("key", "empty; name the key column(s)"));
    }
    let parties = Parties {
        self_id: call.self_party.clone(),
        self_addr: call.parties[me].1.clone(),
        peer_id: call.parties[peer].0.clone(),
        peer_addr: call.parties[peer].1.clone(),
    };
    let mut spec = RunSpec::new(parties, protocol, role, call.input, call.keys);
    spec.broadcast_result = call.broadcast_result;
    // A sender without broadcast_result learns nothing, as in SecretFlow: its output is unused.
    match call.output {
        Some(out) if spec.learns_result() => spec = spec.with_output(out),
        None if spec.learns_result() => {
            return Err(invalid(
                "output_path",
                &format!(
                    "missing for {:?}, which receives the result{}",
                    call.self_party,
                    if role == Role::Sender {
                        " (broadcast_result is true)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        _ => {}
    }
    spec.align = call.sort;
    if let Some(b) = call.bucket_size {
        if b == 0 {
            return Err(invalid("bucket_size", "must be at least 1"));
        }
        if !matches!(protocol, ProtocolChoice::Ecdh { .. }) {
            spec.bucket_size = b;
        }
    }
    if let Some(t) = call.connect_timeout {
        spec.connect_timeout = t;
    }
    if let Some(t) = call.recv_timeout {
        spec.recv_timeout = t.max(Duration::from_millis(1));
    }
    spec.report = call.report;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use blindjoin_crypto::Curve;

    fn call(me: &str, protocol: &str) -> PsiCsvCall {
        PsiCsvCall {
            self_party: me.into(),
            parties: vec![
                ("alice".into(), "127.0.0.1:1".into()),
                ("bob".into(), "127.0.0.1:2".into()),
            ],
            receiver: "alice".into(),
            keys: vec!["id".into()],
            input: "in.csv".into(),
            output: Some("out.csv".into()),
            protocol: protocol.into(),
            curve: "CURVE_FOURQ".into(),
            rr22_mode: None,
            broadcast_result: false,
            sort: true,
            bucket_size: Some(1000),
            connect_timeout: None,
            recv_timeout: None,
            report: None,
        }
    }

    #[test]
    fn secretflow_names_map_to_one_choice_each() {
        for (name, want) in [
            (
                "ECDH_PSI_2PC",
                ProtocolChoice::Ecdh {
                    curve: Curve::FourQ,
                },
            ),
            ("KKRT_PSI_2PC", ProtocolChoice::Kkrt),
            (
                "RR22_PSI_2PC",
                ProtocolChoice::Rr22 {
                    mode: Rr22Mode::Fast,
                },
            ),
            (
                "RR22_LOWCOMM_PSI_2PC",
                ProtocolChoice::Rr22 {
                    mode: Rr22Mode::LowComm,
                },
            ),
        ] {
            assert_eq!(psi_csv_protocol(name, "CURVE_FOURQ").unwrap(), want);
        }
        let e = psi_csv_protocol("BC22_PSI_2PC", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown protocol"), "{e}");
    }

    #[test]
    fn roles_outputs_and_refusals() {
        let r = psi_csv_spec(call("alice", "KKRT_PSI_2PC")).unwrap();
        assert_eq!((r.role, r.bucket_size), (Role::Receiver, 1000));
        assert_eq!(r.parties.peer_addr, "127.0.0.1:2");
        // A sender without broadcast writes nothing, even with an output path.
        let s = psi_csv_spec(call("bob", "KKRT_PSI_2PC")).unwrap();
        assert_eq!((s.role, s.output), (Role::Sender, None));
        let mut c = call("bob", "ECDH_PSI_2PC");
        c.broadcast_result = true;
        c.output = None;
        let e = psi_csv_spec(c).unwrap_err().to_string();
        assert!(e.contains("output_path"), "{e}");
        let mut m = call("alice", "PROTOCOL_RR22");
        m.rr22_mode = Some(Rr22Mode::Malicious);
        assert_eq!(
            psi_csv_spec(m).unwrap().protocol,
            ProtocolChoice::Rr22 {
                mode: Rr22Mode::Malicious
            }
        );
        let e = psi_csv_spec(call("carol", "KKRT_PSI_2PC"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("self_party") && e.contains("carol"), "{e}");
    }
}
