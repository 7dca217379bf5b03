//! SecretFlow's `psi_csv(...)` call (the whitepaper's Python API) → a [`Plan`]: the Python layer
//! hands over the call's arguments and builds no config per protocol. The balanced two-party
//! names map to a [`ProtocolChoice`] here ([`psi_csv_spec`]); every other v1 name (three-party,
//! unbalanced, and the refused ones) becomes the `legacy_psi_config` SecretFlow's own `psi_csv`
//! builds, read by [`super::legacy`] ([`psi_csv_plan`]).

use super::legacy::{self, PsiType};
use super::{invalid, parse_curve};
use crate::error::ConfigError;
use crate::plan::Plan;
use crate::spec::{Parties, RunSpec};
use blindjoin_protocols::rr22::Rr22Mode;
use blindjoin_protocols::{ProtocolChoice, Role};
use serde_json::json;
use std::path::{Path, PathBuf};
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
    /// `precheck_input` (see `legacy_psi_config.input_params.precheck` in docs/config.md).
    pub precheck: bool,
    /// Unbalanced PSI: this party's cache (`preprocess_path`).
    pub preprocess_path: Option<PathBuf>,
    /// Unbalanced PSI: the server's key file (`ecdh_secret_key_path`).
    pub ecdh_secret_key_path: Option<PathBuf>,
    /// DP-PSI: `dppsi_bob_sub_sampling` (default 0.9; used by `DP_PSI_2PC` only).
    pub dppsi_bob_sub_sampling: Option<f64>,
    /// DP-PSI: `dppsi_epsilon` (default 3; used by `DP_PSI_2PC` only).
    pub dppsi_epsilon: Option<f64>,
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
        "RR22_MALICIOUS_PSI_2PC" => rr22(Rr22Mode::Malicious),
        other => Err(invalid(
            "protocol",
            &format!(
                "unknown two-party protocol {other:?}; use ECDH_PSI_2PC, KKRT_PSI_2PC, \
                 RR22_PSI_2PC (RR22_FAST_PSI_2PC), RR22_LOWCOMM_PSI_2PC or \
                 RR22_MALICIOUS_PSI_2PC (ECDH_PSI_3PC and ECDH_OPRF_UB_PSI_2PC_*: psi_csv_plan)"
            ),
        )),
    }
}

/// The `psi_csv` argument each v1 field comes from, for errors.
const ARGUMENTS: &[(&str, &str)] = &[
    ("legacy_psi_config.input_params.select_fields", "key"),
    ("legacy_psi_config.input_params.path", "input_path"),
    ("legacy_psi_config.output_params.path", "output_path"),
    ("legacy_psi_config.output_params.need_sort", "sort"),
    ("legacy_psi_config.input_params.precheck", "precheck_input"),
    ("legacy_psi_config.receiver_rank", "receiver"),
    ("legacy_psi_config.psi_type", "protocol"),
    ("legacy_psi_config.", ""),
];

/// This party's run of a `psi_csv` call, of any protocol SecretFlow's `psi_csv` names: the
/// balanced two-party ones as [`psi_csv_spec`]; the others through the `legacy_psi_config`
/// SecretFlow builds from the same arguments (the receiver's rank is its place in `parties`).
///
/// # Errors
/// As [`psi_csv_spec`], or as [`legacy::parse_legacy_launch_config`] with the fields named by
/// the call's arguments.
pub fn psi_csv_plan(call: PsiCsvCall) -> Result<Plan, ConfigError> {
    match PsiType::from_name(call.protocol.trim()) {
        Some(t) if !t.is_two_party() => {}
        _ => return psi_csv_spec(call).map(|s| Plan::TwoParty(Box::new(s))),
    }
    let names: Vec<&str> = call.parties.iter().map(|(p, _)| p.as_str()).collect();
    let receiver_rank = names
        .iter()
        .position(|p| *p == call.receiver)
        .ok_or_else(|| {
            invalid(
                "receiver",
                &format!("{:?} is not one of the parties {names:?}", call.receiver),
            )
        })?;
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let mut cfg = json!({
        "psi_type": call.protocol.trim(),
        "receiver_rank": receiver_rank,
        "broadcast_result": call.broadcast_result,
        "input_params": {
            "path": call.input.display().to_string(),
            "select_fields": call.keys,
            "precheck": call.precheck,
        },
        "output_params": { "path": path(&call.output).unwrap_or_default(), "need_sort": call.sort },
        "curve_type": call.curve,
    });
    if let Some(b) = call.bucket_size {
        if b == 0 {
            return Err(invalid("bucket_size", "must be at least 1"));
        }
        cfg["bucket_size"] = b.into();
    }
    if let Some(p) = path(&call.preprocess_path) {
        cfg["preprocess_path"] = p.into();
    }
    if let Some(p) = path(&call.ecdh_secret_key_path) {
        cfg["ecdh_secret_key_path"] = p.into();
    }
    // SecretFlow's psi_csv passes dppsi_* with every protocol; only DP-PSI reads them.
    if PsiType::from_name(call.protocol.trim()) == Some(PsiType::DpPsi2pc) {
        let mut d = json!({});
        if let Some(p1) = call.dppsi_bob_sub_sampling {
            d["bob_sub_sampling"] = p1.into();
        }
        if let Some(eps) = call.dppsi_epsilon {
            d["epsilon"] = eps.into();
        }
        cfg["dppsi_params"] = d;
    }
    let parties: Vec<_> = call
        .parties
        .iter()
        .map(|(id, host)| json!({ "id": id, "host": host }))
        .collect();
    let mut link = json!({ "parties": parties });
    if let Some(t) = call.recv_timeout {
        link["recv_timeout_ms"] = (t.as_millis().max(1) as u64).into();
    }
    let mut ext = json!({});
    if let Some(t) = call.connect_timeout {
        ext["connect_timeout_ms"] = (t.as_millis() as u64).into();
    }
    if let Some(r) = path(&call.report) {
        ext["report_path"] = r.into();
    }
    let launch = json!({
        legacy::KEY: cfg,
        "link_config": link,
        "self_link_party": call.self_party,
        "blindjoin": ext,
    });
    // Paths arrive absolute from Python; a relative one resolves against the working folder.
    let mut plan =
        legacy::parse_legacy_launch_config(&launch.to_string(), "psi_csv", Path::new(""))
            .map_err(|e| legacy::rename(e, ARGUMENTS))?;
    for w in legacy::warnings_of(&mut plan).iter_mut() {
        *w = ARGUMENTS
            .iter()
            .fold(std::mem::take(w), |s, (from, to)| s.replace(from, to));
    }
    Ok(plan)
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
    if call.precheck {
        spec.warnings
            .push(legacy::precheck_warning("precheck_input"));
    }
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
            precheck: false,
            preprocess_path: None,
            ecdh_secret_key_path: None,
            dppsi_bob_sub_sampling: None,
            dppsi_epsilon: None,
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
        assert!(e.contains("unknown two-party protocol"), "{e}");
        assert_eq!(
            psi_csv_protocol("RR22_MALICIOUS_PSI_2PC", "").unwrap(),
            ProtocolChoice::Rr22 {
                mode: Rr22Mode::Malicious
            }
        );
    }

    #[test]
    fn every_v1_name_becomes_a_plan_through_the_v1_config() {
        let three = |me: &str| {
            let mut c = call(me, "ECDH_PSI_3PC");
            c.curve = "CURVE_25519".into();
            c.parties.push(("carol".into(), "127.0.0.1:3".into()));
            c.receiver = "carol".into();
            c
        };
        let mut c = three("carol");
        c.recv_timeout = Some(Duration::from_millis(3_600_000));
        c.connect_timeout = Some(Duration::from_secs(7));
        let Plan::ThreeParty(t) = psi_csv_plan(c).unwrap() else {
            panic!("not three-party")
        };
        assert!(t.is_receiver() && t.receiver == 2);
        // SPU's link_desc arrives here: both waits reach the plan.
        assert_eq!(t.spec.recv_timeout, Duration::from_secs(3600));
        assert_eq!(t.spec.connect_timeout, Duration::from_secs(7));
        let Plan::ThreeParty(t) = psi_csv_plan(three("alice")).unwrap() else {
            panic!("not three-party")
        };
        assert!(!t.is_receiver());
        // Unbalanced: the receiver (alice) is the client; bob the server, with his key.
        let ub = |me: &str, protocol: &str| {
            let mut c = call(me, protocol);
            c.preprocess_path = Some(format!("/tmp/{me}.cache").into());
            c.ecdh_secret_key_path = Some("/tmp/bob.key".into());
            c
        };
        let Plan::Unbalanced(u) = psi_csv_plan(ub("bob", "ECDH_OPRF_UB_PSI_2PC_OFFLINE")).unwrap()
        else {
            panic!("not unbalanced")
        };
        assert_eq!(u.role, crate::ub::UbRole::Server);
        // The server keeps its cache beside preprocess_path, the client's place.
        assert_eq!(u.cache_path, Path::new("/tmp/bob.cache.server"));
        let mut c = ub("bob", "ECDH_OPRF_UB_PSI_2PC_ONLINE");
        c.recv_timeout = Some(Duration::from_millis(1500));
        c.connect_timeout = Some(Duration::from_secs(9));
        let Plan::Unbalanced(u) = psi_csv_plan(c).unwrap() else {
            panic!("not unbalanced")
        };
        assert_eq!(u.link.recv_timeout, Duration::from_millis(1500));
        assert_eq!(u.link.connect_timeout, Duration::from_secs(9));
        let Plan::Unbalanced(u) = psi_csv_plan(ub("alice", "ECDH_OPRF_UB_PSI_2PC_ONLINE")).unwrap()
        else {
            panic!("not unbalanced")
        };
        assert_eq!(u.role, crate::ub::UbRole::Client);
        assert_eq!(u.output.as_deref(), Some(Path::new("out.csv")));
        // Warnings and errors name the call's arguments.
        let mut c = ub("alice", "ECDH_OPRF_UB_PSI_2PC_ONLINE");
        c.precheck = true;
        let mut plan = psi_csv_plan(c).unwrap();
        let w = legacy::warnings_of(&mut plan);
        assert!(
            w.iter().any(|w| w.starts_with("precheck_input:"))
                && w.iter().any(|w| w.starts_with("bucket_size = 1000:")),
            "{w:?}"
        );
        let mut c = call("alice", "KKRT_PSI_2PC");
        c.precheck = true;
        let w = psi_csv_spec(c).unwrap().warnings;
        assert!(w.iter().any(|w| w.starts_with("precheck_input:")), "{w:?}");
        let mut c = ub("alice", "ECDH_OPRF_UB_PSI_2PC_ONLINE");
        c.preprocess_path = None;
        let e = psi_csv_plan(c).unwrap_err().to_string();
        assert!(e.starts_with("preprocess_path:"), "{e}");
        let e = psi_csv_plan(call("alice", "BC22_PSI_2PC"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("protocol:") && e.contains("RR22"), "{e}");
        // DP-PSI takes dppsi_*; the n-party names need three parties or more.
        let mut c = call("alice", "DP_PSI_2PC");
        c.dppsi_epsilon = Some(1.5);
        let Plan::NParty(p) = psi_csv_plan(c).unwrap() else {
            panic!("not DP-PSI")
        };
        assert_eq!(p.protocol.name(), "DP_PSI_2PC");
        assert_eq!(
            p.protocol,
            crate::config::NPartyProtocol::Dp {
                curve: Curve::FourQ,
                params: blindjoin_protocols::dp_psi::DpParams {
                    bob_sub_sampling: 0.9,
                    epsilon: 1.5
                }
            }
        );
        let e = psi_csv_plan(call("alice", "KKRT_PSI_NPC"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 3"), "{e}");
        // The two-party names stay on the direct path.
        assert_eq!(
            psi_csv_plan(call("alice", "RR22_MALICIOUS_PSI_2PC"))
                .unwrap()
                .kind(),
            "two-party"
        );
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
