use super::*;
use crate::spec::RunSpec;
use crate::ub::{UbMode, UbRole, UbSpec};
use blindjoin_crypto::Curve;
use blindjoin_protocols::{ProtocolChoice, Role};
use std::path::PathBuf;

/// A v1 launch as SecretFlow's quick start has users write it: `legacy_psi_config` with the
/// given fields, two parties (`alice` at rank 0, `bob` at 1), and `me` as this party.
fn cfg(fields: &str, me: &str) -> String {
    format!(
        r#"{{
  "legacy_psi_config": {{
    {fields}
  }},
  "link_config": {{
    "parties": [
      {{ "id": "alice", "host": "127.0.0.1:5300" }},
      {{ "id": "bob", "host": "127.0.0.1:5400" }}
    ],
    "recv_timeout_ms": 120000
  }},
  "self_link_party": "{me}"
}}"#
    )
}

const IO: &str = r#""input_params": { "path": "in.csv", "select_fields": ["id", "k2"], "precheck": false },
    "output_params": { "path": "out.csv", "need_sort": true }"#;

fn parse(text: &str) -> Result<Plan, ConfigError> {
    parse_legacy_launch_config(text, "v1.json", Path::new("/base"))
}

fn two(text: &str) -> RunSpec {
    match parse(text).unwrap() {
        Plan::TwoParty(s) => *s,
        other => panic!("expected a two-party plan, got {}", other.kind()),
    }
}

fn ub(text: &str) -> UbSpec {
    match parse(text).unwrap() {
        Plan::Unbalanced(u) => *u,
        other => panic!("expected an unbalanced plan, got {}", other.kind()),
    }
}

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn every_type_has_its_name_and_number() {
    for (name, number, t) in PSI_TYPES {
        assert_eq!(PsiType::from_name(name), Some(t));
        assert_eq!(t.name(), name);
        assert_eq!(PsiType::parse(Some(&json!(number))).unwrap(), t);
        assert_eq!(PsiType::parse(Some(&json!(name))).unwrap(), t);
    }
    assert!(PsiType::from_name("INVALID_PSI_TYPE").is_none());
    for bad in [json!(0), json!(16), json!("ECDH"), json!(true)] {
        let e = PsiType::parse(Some(&bad)).unwrap_err().to_string();
        assert!(e.contains("legacy_psi_config.psi_type"), "{e}");
    }
    assert!(
        PsiType::parse(None)
            .unwrap_err()
            .to_string()
            .contains("missing")
    );
}

#[test]
fn ecdh_2pc_maps_rank_curve_broadcast_and_io() {
    let fields = format!(
        r#""psi_type": "ECDH_PSI_2PC", "receiver_rank": 1, "broadcast_result": true,
    "curve_type": "CURVE_FOURQ", {IO}"#
    );
    // bob is rank 1: the receiver.
    let s = two(&cfg(&fields, "bob"));
    assert_eq!(s.role, Role::Receiver);
    assert_eq!(
        s.protocol,
        ProtocolChoice::Ecdh {
            curve: Curve::FourQ
        }
    );
    assert!(s.broadcast_result && s.align);
    assert_eq!(s.keys, vec!["id", "k2"]);
    assert_eq!(s.input, PathBuf::from("/base/in.csv"));
    assert_eq!(s.output, Some(PathBuf::from("/base/out.csv")));
    assert_eq!(s.parties.peer_id, "alice");
    assert_eq!(s.recv_timeout, std::time::Duration::from_millis(120000));
    let s = two(&cfg(&fields, "alice"));
    assert_eq!(
        (s.role, s.parties.self_addr.as_str()),
        (Role::Sender, "127.0.0.1:5300")
    );
    // Numbers, as protobuf's JSON mapping may write enums; rank 0 by default; need_sort false.
    let s = two(&cfg(
        r#""psi_type": 1, "curve_type": 4, "input_params": {"path": "in.csv", "select_fields": ["id"]},
    "output_params": {"path": "out.csv"}"#,
        "alice",
    ));
    assert_eq!(s.role, Role::Receiver);
    assert_eq!(s.protocol.curve(), Some(Curve::Secp256k1));
    assert!(!s.align && !s.broadcast_result);
    // lowerCamelCase, as protobuf's JSON printer writes it.
    let s = two(&cfg(
        r#""psiType": "ECDH_PSI_2PC", "receiverRank": "1", "curveType": "CURVE_25519",
    "inputParams": {"path": "in.csv", "selectFields": ["id"]}, "outputParams": {"path": "o.csv", "needSort": true}"#,
        "bob",
    ));
    assert_eq!((s.role, s.align), (Role::Receiver, true));
}

#[test]
fn kkrt_and_the_three_rr22_modes_take_the_bucket_size() {
    for (name, want) in [
        ("KKRT_PSI_2PC", ProtocolChoice::Kkrt),
        (
            "RR22_FAST_PSI_2PC",
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
        (
            "RR22_MALICIOUS_PSI_2PC",
            ProtocolChoice::Rr22 {
                mode: Rr22Mode::Malicious,
            },
        ),
    ] {
        let s = two(&cfg(
            &format!(r#""psi_type": "{name}", "bucket_size": 5000, {IO}"#),
            "alice",
        ));
        assert_eq!((s.protocol, s.bucket_size), (want, 5000), "{name}");
        // 0 is protobuf's unset: SecretFlow's default of 2^20.
        let s = two(&cfg(
            &format!(r#""psi_type": "{name}", "bucket_size": 0, {IO}"#),
            "alice",
        ));
        assert_eq!(s.bucket_size, crate::DEFAULT_BUCKET_SIZE, "{name}");
    }
}

#[test]
fn fields_of_other_types_are_accepted_with_a_warning_that_says_what_they_are() {
    let s = two(&cfg(
        &format!(
            r#""psi_type": "ECDH_PSI_2PC", "curve_type": "CURVE_25519", "bucket_size": 100,
    "preprocess_path": "c.bin", "ecdh_secret_key_path": "k.bin",
    "dppsi_params": {{"bob_sub_sampling": 0.9, "epsilon": 3}}, {}"#,
            IO.replace(r#""precheck": false"#, r#""precheck": true"#)
        ),
        "alice",
    ));
    for needle in [
        "input_params.precheck",
        "bucket_size = 100",
        "preprocess_path",
        "ecdh_secret_key_path",
        "dppsi_params",
    ] {
        assert!(
            s.warnings.iter().any(|w| w.contains(needle)),
            "{needle}: {:?}",
            s.warnings
        );
    }
    let s = two(&cfg(
        &format!(r#""psi_type": "KKRT_PSI_2PC", "curve_type": "CURVE_FOURQ", {IO}"#),
        "alice",
    ));
    assert!(s.warnings.iter().any(|w| w.contains("curve_type")));
}

#[test]
fn ecdh_3pc_picks_the_receiver_by_rank() {
    let text = |me: &str, rank: u32| {
        format!(
            r#"{{"legacy_psi_config": {{"psi_type": "ECDH_PSI_3PC", "receiver_rank": {rank},
  "curve_type": "CURVE_25519", {IO}}},
  "link_config": {{"parties": [{{"id": "a", "host": "127.0.0.1:1"}}, {{"id": "b", "host": "127.0.0.1:2"}},
    {{"id": "c", "host": "127.0.0.1:3"}}]}},
  "self_link_party": "{me}"}}"#
        )
    };
    for (me, rank, receiver) in [("a", 2, false), ("c", 2, true), ("b", 1, true)] {
        let Plan::ThreeParty(t) = parse(&text(me, rank)).unwrap() else {
            panic!("not three-party")
        };
        assert_eq!(t.receiver, rank as usize);
        assert_eq!(t.is_receiver(), receiver, "{me}");
        assert_eq!(t.parties.len(), 3);
    }
    let e = err(&text("a", 3));
    assert!(e.contains("legacy_psi_config.receiver_rank"), "{e}");
    // Broadcasting to the helpers is refused, naming the v1 field.
    let e = err(&text("a", 0).replace(
        r#""receiver_rank": 0"#,
        r#""receiver_rank": 0, "broadcast_result": true"#,
    ));
    assert!(e.contains("legacy_psi_config.broadcast_result"), "{e}");
    // Two parties are not enough.
    let e = err(&cfg(
        r#""psi_type": "ECDH_PSI_3PC", "curve_type": "CURVE_25519""#,
        "alice",
    ));
    assert!(
        e.contains("link_config.parties") && e.contains("exactly 3"),
        "{e}"
    );
}

const UB_IO: &str = r#""input_params": {"path": "in.csv", "select_fields": ["id"]},
    "output_params": {"path": "out.csv", "need_sort": true}"#;

#[test]
fn unbalanced_steps_map_onto_the_unbalanced_run() {
    let step = |t: &str, extra: &str, me: &str| {
        cfg(
            &format!(
                r#""psi_type": "{t}", "receiver_rank": 0, "curve_type": "CURVE_FOURQ", {UB_IO}{extra}"#
            ),
            me,
        )
    };
    let pre = r#", "preprocess_path": "cache.bin", "ecdh_secret_key_path": "k.bin""#;
    // Gen cache: the server alone; the cache beside preprocess_path (the client's), or at
    // output_params.path.
    let u = ub(&step("ECDH_OPRF_UB_PSI_2PC_GEN_CACHE", pre, "bob"));
    assert_eq!((u.mode, u.role), (UbMode::GenCache, UbRole::Server));
    assert_eq!(u.cache_path, PathBuf::from("/base/cache.bin.server"));
    assert!(u.warnings.iter().any(|w| w.contains("cache.bin.server")));
    assert_eq!(u.secret_key_path, Some(PathBuf::from("/base/k.bin")));
    assert!(u.link.parties.is_none());
    let u = ub(&step(
        "ECDH_OPRF_UB_PSI_2PC_GEN_CACHE",
        r#", "ecdh_secret_key_path": "k.bin""#,
        "bob",
    ));
    assert_eq!(u.cache_path, PathBuf::from("/base/out.csv"));
    // Transfer: rank 0 (alice) is the client; the server's cache at input_params.path works too.
    let u = ub(&step("ECDH_OPRF_UB_PSI_2PC_TRANSFER_CACHE", pre, "alice"));
    assert_eq!((u.mode, u.role), (UbMode::TransferCache, UbRole::Client));
    let u = ub(&step("ECDH_OPRF_UB_PSI_2PC_TRANSFER_CACHE", "", "bob"));
    assert_eq!(
        (u.role, u.cache_path),
        (UbRole::Server, PathBuf::from("/base/in.csv"))
    );
    // Offline: server generates and sends, keeping its cache beside the client's.
    let u = ub(&step("ECDH_OPRF_UB_PSI_2PC_OFFLINE", pre, "bob"));
    assert_eq!((u.mode, u.role), (UbMode::Offline, UbRole::Server));
    assert_eq!(u.cache_path, PathBuf::from("/base/cache.bin.server"));
    assert_eq!(u.input, Some(PathBuf::from("/base/in.csv")));
    assert_eq!(u.curve, Curve::FourQ);
    let u = ub(&step("ECDH_OPRF_UB_PSI_2PC_OFFLINE", pre, "alice"));
    assert_eq!((u.role, u.input.as_ref()), (UbRole::Client, None));
    assert_eq!(u.cache_path, PathBuf::from("/base/cache.bin"));
    // A key on the client is the server's: warned and dropped.
    assert!(
        u.warnings
            .iter()
            .any(|w| w.contains("ignored on the client"))
    );
    // Online: the client (receiver) learns; with broadcast_result the server too.
    let u = ub(&step("ECDH_OPRF_UB_PSI_2PC_ONLINE", pre, "alice"));
    assert_eq!((u.mode, u.role), (UbMode::Online, UbRole::Client));
    assert!(u.client_get_result && !u.server_get_result);
    assert_eq!(u.output, Some(PathBuf::from("/base/out.csv")));
    assert!(u.align);
    let u = ub(&step("ECDH_OPRF_UB_PSI_2PC_ONLINE", pre, "bob"));
    assert_eq!(
        (u.role, u.output.as_ref(), u.input.as_ref()),
        (UbRole::Server, None, None)
    );
    // No cache.bin.server under /base: preprocess_path itself names the server's cache.
    assert_eq!(u.cache_path, PathBuf::from("/base/cache.bin"));
    let u = ub(&step(
        "ECDH_OPRF_UB_PSI_2PC_ONLINE",
        &format!(r#"{pre}, "broadcast_result": true"#),
        "bob",
    ));
    assert!(u.server_get_result && u.client_get_result && u.output.is_some());
    // Shuffle online: the receiver is the server, and it learns the result.
    let u = ub(&step("ECDH_OPRF_UB_PSI_2PC_SHUFFLE_ONLINE", pre, "alice"));
    assert_eq!((u.mode, u.role), (UbMode::Online, UbRole::Server));
    assert!(u.server_get_result && !u.client_get_result);
    assert_eq!(u.output, Some(PathBuf::from("/base/out.csv")));
    let u = ub(&step("ECDH_OPRF_UB_PSI_2PC_SHUFFLE_ONLINE", pre, "bob"));
    assert_eq!((u.role, u.output.as_ref()), (UbRole::Client, None));
    // bucket_size has no meaning here: warned.
    let u = ub(&step(
        "ECDH_OPRF_UB_PSI_2PC_ONLINE",
        &format!(r#"{pre}, "bucket_size": 100000000"#),
        "alice",
    ));
    assert!(u.warnings.iter().any(|w| w.contains("bucket_size")));
}

#[test]
fn unbalanced_errors_name_the_v1_fields() {
    let step =
        |t: &str, extra: &str, me: &str| cfg(&format!(r#""psi_type": "{t}", {UB_IO}{extra}"#), me);
    for (text, field) in [
        // The server needs its own cache in online (blindjoin's server checks queries against it).
        (
            step(
                "ECDH_OPRF_UB_PSI_2PC_ONLINE",
                r#", "ecdh_secret_key_path": "k""#,
                "bob",
            ),
            "legacy_psi_config.preprocess_path",
        ),
        (
            step("ECDH_OPRF_UB_PSI_2PC_OFFLINE", "", "alice"),
            "legacy_psi_config.preprocess_path",
        ),
        (
            step(
                "ECDH_OPRF_UB_PSI_2PC_OFFLINE",
                r#", "preprocess_path": "c""#,
                "bob",
            ),
            "legacy_psi_config.ecdh_secret_key_path",
        ),
        (
            step(
                "ECDH_OPRF_UB_PSI_2PC_OFFLINE",
                r#", "preprocess_path": "c", "ecdh_secret_key_path": "k", "curve_type": "CURVE_25519""#,
                "bob",
            ),
            "legacy_psi_config.curve_type",
        ),
        (
            step(
                "ECDH_OPRF_UB_PSI_2PC_ONLINE",
                r#", "preprocess_path": "c""#,
                "alice",
            )
            .replace(r#""path": "out.csv", "#, ""),
            "legacy_psi_config.output_params.path",
        ),
        (
            step(
                "ECDH_OPRF_UB_PSI_2PC_ONLINE",
                r#", "preprocess_path": "c""#,
                "alice",
            )
            .replace(r#""select_fields": ["id"]"#, r#""select_fields": []"#),
            "legacy_psi_config.input_params.select_fields",
        ),
    ] {
        let e = err(&text);
        assert!(e.contains(field), "{field}: {e}");
        assert!(!e.contains("ub_psi_config"), "{e}");
    }
}

#[test]
fn bc22_is_refused_as_withdrawn_naming_rr22() {
    for t in [r#""BC22_PSI_2PC""#, "3"] {
        let e = err(&cfg(&format!(r#""psi_type": {t}, {IO}"#), "alice"));
        assert!(
            e.contains("legacy_psi_config.psi_type")
                && e.contains("withdrawn")
                && e.contains("security flaw")
                && e.contains("RR22_FAST_PSI_2PC"),
            "{e}"
        );
    }
}

#[test]
fn npc_types_pick_the_receiver_by_rank_and_run_secretflows_tree() {
    use crate::config::NPartyProtocol;
    use blindjoin_protocols::npc::NpcVariant;
    let text = |t: &str, me: &str, rank: u32| {
        format!(
            r#"{{"legacy_psi_config": {{"psi_type": "{t}", "receiver_rank": {rank},
  "curve_type": "CURVE_25519", {IO}}},
  "link_config": {{"parties": [{{"id": "a", "host": "127.0.0.1:1"}}, {{"id": "b", "host": "127.0.0.1:2"}},
    {{"id": "c", "host": "127.0.0.1:3"}}, {{"id": "d", "host": "127.0.0.1:4"}},
    {{"id": "e", "host": "127.0.0.1:5"}}]}},
  "self_link_party": "{me}"}}"#
        )
    };
    for (t, want) in [
        (
            "ECDH_PSI_NPC",
            NpcVariant::Iterated(ProtocolChoice::Ecdh {
                curve: Curve::Curve25519,
            }),
        ),
        ("KKRT_PSI_NPC", NpcVariant::Iterated(ProtocolChoice::Kkrt)),
    ] {
        for (me, rank) in [("a", 0), ("d", 3), ("b", 4)] {
            let Plan::NParty(p) = parse(&text(t, me, rank)).unwrap() else {
                panic!("not n-party")
            };
            assert_eq!(p.protocol, NPartyProtocol::Npc(want));
            assert_eq!(p.receiver, rank as usize);
            assert_eq!(p.parties.len(), 5);
            assert_eq!(p.spec.keys, vec!["id".to_string(), "k2".to_string()]);
        }
        let e = err(&text(t, "a", 5));
        assert!(e.contains("legacy_psi_config.receiver_rank"), "{e}");
        // broadcast_result: every party learns the intersection.
        let Plan::NParty(p) = parse(&text(t, "a", 0).replace(
            r#""receiver_rank": 0"#,
            r#""receiver_rank": 0, "broadcast_result": true"#,
        ))
        .unwrap() else {
            panic!("not n-party")
        };
        assert!(p.spec.broadcast_result);
        // Two parties are not n-party.
        let e = err(&cfg(&format!(r#""psi_type": "{t}", {IO}"#), "alice"));
        assert!(e.contains("at least 3"), "{e}");
    }
}

#[test]
fn dp_psi_takes_its_parameters() {
    use crate::config::NPartyProtocol;
    use blindjoin_protocols::dp_psi::DpParams;
    let Plan::NParty(p) =
        parse(&cfg(&format!(r#""psi_type": "DP_PSI_2PC", {IO}"#), "bob")).unwrap()
    else {
        panic!("not DP-PSI")
    };
    assert_eq!(
        p.protocol,
        NPartyProtocol::Dp {
            curve: Curve::Curve25519,
            params: DpParams::default()
        }
    );
    assert_eq!(p.receiver, 0);
    assert!(!p.is_receiver());
    let text = cfg(
        &format!(
            r#""psi_type": 12, "receiver_rank": 1, "curve_type": "CURVE_FOURQ",
    "dppsi_params": {{ "bob_sub_sampling": 0.5, "epsilon": 2 }}, {IO}"#
        ),
        "bob",
    );
    // Only Bob learns DP-PSI's result.
    let e = err(&text.replace(
        r#""receiver_rank": 1,"#,
        r#""receiver_rank": 1, "broadcast_result": true,"#,
    ));
    assert!(e.contains("legacy_psi_config.broadcast_result"), "{e}");
    let Plan::NParty(p) = parse(&text).unwrap() else {
        panic!("not DP-PSI")
    };
    assert!(p.is_receiver());
    assert_eq!(
        p.protocol,
        NPartyProtocol::Dp {
            curve: Curve::FourQ,
            params: DpParams {
                bob_sub_sampling: 0.5,
                epsilon: 2.0
            }
        }
    );
    assert!(
        p.spec.warnings.iter().all(|w| !w.contains("dppsi")),
        "{:?}",
        p.spec.warnings
    );
}

#[test]
fn bad_configs_name_the_field() {
    let ecdh = |extra: &str| {
        cfg(
            &format!(r#""psi_type": "ECDH_PSI_2PC", "curve_type": "CURVE_25519", {IO}{extra}"#),
            "alice",
        )
    };
    for (text, field) in [
        (
            cfg(&format!(r#""psi_type": "ECDH_PSI_2PC", {IO}"#), "alice"),
            "legacy_psi_config.curve_type",
        ),
        (
            ecdh(r#", "receiver_rank": 2"#),
            "legacy_psi_config.receiver_rank",
        ),
        (
            ecdh("").replace(r#""curve_type": "CURVE_25519""#, r#""curve_type": 9"#),
            "legacy_psi_config.curve_type",
        ),
        (
            ecdh("").replace(
                r#""curve_type": "CURVE_25519""#,
                r#""curve_type": "CURVE_X""#,
            ),
            "legacy_psi_config.curve_type",
        ),
        (
            ecdh("").replace(r#""path": "out.csv", "#, ""),
            "legacy_psi_config.output_params.path",
        ),
        (
            ecdh("").replace(r#""path": "in.csv", "#, ""),
            "legacy_psi_config.input_params.path",
        ),
        (
            ecdh("").replace(r#"["id", "k2"]"#, "[]"),
            "legacy_psi_config.input_params.select_fields",
        ),
        (
            ecdh("").replace(
                r#""self_link_party": "alice""#,
                r#""self_link_party": "eve""#,
            ),
            "self_link_party",
        ),
    ] {
        let e = err(&text);
        assert!(e.contains(field), "{field}: {e}");
        assert!(!e.contains("psi_config.protocol_config"), "{e}");
    }
    // Two-party types need two parties.
    let e = err(&ecdh("").replace(
        r#"{ "id": "bob", "host": "127.0.0.1:5400" }"#,
        r#"{ "id": "bob", "host": "127.0.0.1:5400" }, { "id": "carol", "host": "127.0.0.1:5500" }"#,
    ));
    assert!(
        e.contains("link_config.parties") && e.contains("ECDH_PSI_3PC"),
        "{e}"
    );
    // Without a link there is no rank to place.
    let e = err(r#"{"legacy_psi_config": {"psi_type": "KKRT_PSI_2PC"}}"#);
    assert!(e.contains("link_config"), "{e}");
    // One runtime config per launch.
    let e = err(&cfg(r#""psi_type": "KKRT_PSI_2PC""#, "alice").replacen(
        "\"link_config\"",
        "\"psi_config\": {}, \"link_config\"",
        1,
    ));
    assert!(e.contains("psi_config") && e.contains("oneof"), "{e}");
}

#[test]
fn unknown_fields_name_the_path_line_and_column() {
    for (text, path) in [
        (
            cfg(r#""psi_type": "KKRT_PSI_2PC", "bogus": 1"#, "alice"),
            "legacy_psi_config.bogus",
        ),
        (
            cfg(
                r#""psi_type": "KKRT_PSI_2PC", "input_params": {"path": "x", "nope": 1}"#,
                "alice",
            ),
            "legacy_psi_config.input_params.nope",
        ),
        (
            cfg(r#""psi_type": "KKRT_PSI_2PC""#, "alice")
                .replace("\"recv_timeout_ms\"", "\"recv_timeout\""),
            "link_config.recv_timeout",
        ),
        (
            cfg(r#""psi_type": "KKRT_PSI_2PC""#, "alice").replacen(
                "\"link_config\"",
                "\"blindjoin\": {\"max_query_items\": 1}, \"link_config\"",
                1,
            ),
            "blindjoin.max_query_items",
        ),
        (
            cfg(r#""psi_type": "ECDH_OPRF_UB_PSI_2PC_ONLINE""#, "alice").replacen(
                "\"link_config\"",
                "\"blindjoin\": {\"spill\": \"auto\"}, \"link_config\"",
                1,
            ),
            "blindjoin.spill",
        ),
    ] {
        let e = parse(&text).unwrap_err();
        let ConfigError::Syntax { message, .. } = &e else {
            panic!("{path}: not a syntax error: {e}")
        };
        assert!(
            message.contains(path) && message.contains("line") && message.contains("column"),
            "{path}: {message}"
        );
    }
}

#[test]
fn the_dispatch_picks_this_parser_and_the_v2_parser_points_here() {
    let text = cfg(&format!(r#""psi_type": "KKRT_PSI_2PC", {IO}"#), "alice");
    let has = |t: &str| {
        Envelope::parse(t, "t.json", Path::new("."))
            .unwrap()
            .has(KEY)
    };
    assert!(has(&text));
    assert!(!has(r#"{"psi_config": {}}"#));
    assert_eq!(
        super::super::parse_any_launch_config(&text, "v1.json", Path::new("/"))
            .unwrap()
            .kind(),
        "two-party"
    );
    let e = super::super::parse_launch_config(&text, "v1.json", Path::new("/"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("Plan::from_config"), "{e}");
    // Trailing commas, as in SecretFlow's docs: a warning naming the line.
    let s = two(&text.replace(r#""k2"]"#, r#""k2",]"#));
    assert!(
        s.warnings.iter().any(|w| w.contains("v1.json:3")),
        "{:?}",
        s.warnings
    );
}

/// A server step that reads its cache takes `<preprocess_path>.server` when it exists beside
/// the client's, else `preprocess_path` itself; a client always takes `preprocess_path`.
#[test]
fn the_server_reads_its_cache_beside_preprocess_path_when_there_is_one() {
    let base = std::env::temp_dir().join(format!("bj-legacy-beside-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let text = |step: &str, me: &str| {
        cfg(
            &format!(
                r#""psi_type": "{step}", "receiver_rank": 0, "curve_type": "CURVE_FOURQ", {UB_IO},
    "preprocess_path": "c.bin", "ecdh_secret_key_path": "k.bin""#
            ),
            me,
        )
    };
    let at =
        |step: &str, me: &str| match parse_legacy_launch_config(&text(step, me), "v1.json", &base)
            .unwrap()
        {
            Plan::Unbalanced(u) => u.cache_path,
            other => panic!("expected an unbalanced plan, got {}", other.kind()),
        };
    for step in [
        "ECDH_OPRF_UB_PSI_2PC_ONLINE",
        "ECDH_OPRF_UB_PSI_2PC_TRANSFER_CACHE",
    ] {
        assert_eq!(at(step, "bob"), base.join("c.bin"), "{step}");
    }
    std::fs::write(base.join("c.bin.server"), b"").unwrap();
    for step in [
        "ECDH_OPRF_UB_PSI_2PC_ONLINE",
        "ECDH_OPRF_UB_PSI_2PC_TRANSFER_CACHE",
        "ECDH_OPRF_UB_PSI_2PC_OFFLINE",
    ] {
        assert_eq!(at(step, "bob"), base.join("c.bin.server"), "{step}");
        assert_eq!(at(step, "alice"), base.join("c.bin"), "{step}");
    }
    std::fs::remove_dir_all(&base).unwrap();
}
