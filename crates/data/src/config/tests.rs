use super::*;

fn seed_config(role: &str, me: &str) -> String {
    // The seed's v2 benchmark config, protocol switched to ECDH with a curve; the trailing comma
    // in `keys` is theirs.
    format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{
      "protocol": "PROTOCOL_ECDH",
      "ecdh_config": {{ "curve": "CURVE_25519" }},
      "role": "{role}",
      "broadcast_result": false
    }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "/data/in.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "/data/out.csv" }},
    "keys": [
      "id",
    ],
    "debug_options": {{ "trace_path": "/tmp/x.trace" }},
    "skip_duplicates_check": false,
    "disable_alignment": false,
    "advanced_join_type": "ADVANCED_JOIN_TYPE_UNSPECIFIED",
    "left_side": "ROLE_RECEIVER",
    "check_hash_digest": false,
    "recovery_config": {{ "enabled": false }}
  }},
  "link_config": {{
    "parties": [
      {{ "id": "receiver", "host": "127.0.0.1:5300" }},
      {{ "id": "sender", "host": "127.0.0.1:5400" }}
    ]
  }},
  "self_link_party": "{me}"
}}"#
    )
}

fn parse(text: &str) -> Result<RunSpec, ConfigError> {
    parse_launch_config(text, "test.json", Path::new("/base"))
}

#[test]
fn the_seed_config_runs_unchanged() {
    let s = parse(&seed_config("ROLE_SENDER", "sender")).unwrap();
    assert_eq!(s.role, Role::Sender);
    assert_eq!(s.parties.self_addr, "127.0.0.1:5400");
    assert_eq!(s.parties.peer_id, "receiver");
    assert_eq!(s.keys, vec!["id"]);
    assert!(s.align && !s.broadcast_result);
    assert_eq!(s.protocol.curve(), Some(Curve::Curve25519));
    assert_eq!(s.recv_timeout, DEFAULT_RECV_TIMEOUT);
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("trailing comma") && w.contains("test.json:12")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn unknown_fields_name_their_path_and_line() {
    let text = seed_config("ROLE_RECEIVER", "receiver")
        .replace("\"skip_duplicates_check\"", "\"skip_duplicate_check\"");
    let e = parse(&text).unwrap_err().to_string();
    assert!(
        e.contains("skip_duplicate_check") && e.contains("psi_config") && e.contains("line 15"),
        "{e}"
    );
}

#[test]
fn features_not_built_are_refused_by_name() {
    let cases = [(
        "\"psi_config\": {",
        "\"dk_pir_sender_config\": {}, \"psi_config\": {",
        "dk_pir_sender_config",
    )];
    for (from, to, field) in cases {
        let text = seed_config("ROLE_RECEIVER", "receiver").replacen(from, to, 1);
        let e = parse(&text).unwrap_err();
        assert!(
            matches!(e, ConfigError::NotYetSupported { .. }),
            "{to}: {e}"
        );
        assert!(
            e.to_string().contains(field) && e.to_string().contains("not supported yet"),
            "{e}"
        );
    }
}

#[test]
fn bad_values_are_explained() {
    let base = seed_config("ROLE_RECEIVER", "receiver");
    let e = parse(&base.replace(
        "\"self_link_party\": \"receiver\"",
        "\"self_link_party\": \"carol\"",
    ))
    .unwrap_err();
    assert!(e.to_string().contains("self_link_party"), "{e}");
    let e =
        parse(&base.replace("\"ecdh_config\": { \"curve\": \"CURVE_25519\" },", "")).unwrap_err();
    assert!(
        e.to_string().contains("ecdh_config.curve") && e.to_string().contains("required"),
        "{e}"
    );
    let e = parse(&base.replace("PROTOCOL_ECDH", "PROTOCOL_FOO")).unwrap_err();
    assert!(e.to_string().contains("unknown protocol"), "{e}");
    let e = parse(&base.replace(
        "ROLE_RECEIVER\",\n      \"broadcast",
        "ROLE_SERVER\",\n      \"broadcast",
    ))
    .unwrap_err();
    assert!(e.to_string().contains("role"), "{e}");
    let e = parse("{ not json").unwrap_err();
    assert!(
        e.to_string().contains("test.json") && e.to_string().contains("line 1"),
        "{e}"
    );
}

#[test]
fn link_timeouts_follow_secretflow_fields_and_strings() {
    let text = seed_config("ROLE_RECEIVER", "receiver").replace(
        "\"parties\": [",
        "\"recv_timeout_ms\": \"120000\", \"connect_retry_times\": 3, \"connect_retry_interval_ms\": 2000, \"parties\": [",
    );
    let s = parse(&text).unwrap();
    assert_eq!(s.recv_timeout, Duration::from_secs(120));
    assert_eq!(s.connect_timeout, Duration::from_secs(6));
}

#[test]
fn trailing_commas_inside_strings_are_left_alone() {
    let (t, lines) = strip_trailing_commas("{\"a\": \"x,]\", \"b\": [1,\n2,\n]}");
    assert_eq!(t, "{\"a\": \"x,]\", \"b\": [1,\n2 \n]}");
    assert_eq!(lines, vec![2]);
}

fn rr22_config(rr22: &str) -> String {
    seed_config("ROLE_RECEIVER", "receiver").replacen(
        r#""protocol": "PROTOCOL_ECDH",
      "ecdh_config": { "curve": "CURVE_25519" },"#,
        &format!(r#""protocol": "PROTOCOL_RR22",{rr22}"#),
        1,
    )
}

#[test]
fn rr22_configs_select_the_mode_and_bucket_size() {
    let s = parse(&rr22_config("")).unwrap();
    assert_eq!(s.protocol.protocol(), Protocol::Rr22);
    assert_eq!(
        (s.protocol.mode().unwrap_or(""), s.bucket_size),
        ("fast", 1 << 20)
    );
    assert_eq!(s.protocol.curve(), None);
    let s = parse(&rr22_config(
        r#" "rr22_config": { "low_comm_mode": true, "bucket_size": "4096" },"#,
    ))
    .unwrap();
    assert_eq!(
        (s.protocol.mode().unwrap_or(""), s.bucket_size),
        ("low_comm", 4096)
    );
    let s = parse(&rr22_config(r#" "rr22_config": { "malicious": true },"#)).unwrap();
    assert_eq!(s.protocol.mode(), Some("malicious"));
    // An ecdh_config left in an RR22 config is harmless.
    let s = parse(&rr22_config(
        r#" "ecdh_config": { "curve": "CURVE_FOURQ" },"#,
    ))
    .unwrap();
    assert_eq!(s.protocol.curve(), None);
}

#[test]
fn bad_rr22_configs_name_the_field() {
    for (rr22, field) in [
        (
            r#" "rr22_config": { "malicious": true, "low_comm_mode": true },"#,
            "rr22_config",
        ),
        (
            r#" "rr22_config": { "bucket_size": 0 },"#,
            "rr22_config.bucket_size",
        ),
        (
            r#" "rr22_config": { "bucket_size": "lots" },"#,
            "rr22_config.bucket_size",
        ),
        (r#" "rr22_config": { "fast": true },"#, "rr22_config"),
    ] {
        let e = parse(&rr22_config(rr22)).unwrap_err().to_string();
        assert!(e.contains(field), "{rr22}: {e}");
    }
}

fn kkrt_config(kkrt: &str) -> String {
    seed_config("ROLE_RECEIVER", "receiver").replacen(
        r#""protocol": "PROTOCOL_ECDH",
      "ecdh_config": { "curve": "CURVE_25519" },"#,
        &format!(r#""protocol": "PROTOCOL_KKRT",{kkrt}"#),
        1,
    )
}

#[test]
fn kkrt_configs_select_the_bucket_size() {
    let s = parse(&kkrt_config("")).unwrap();
    assert_eq!(s.protocol.protocol(), Protocol::Kkrt);
    assert_eq!(
        (s.protocol.mode().unwrap_or(""), s.bucket_size),
        ("", 1 << 20)
    );
    assert_eq!(s.protocol.curve(), None);
    let s = parse(&kkrt_config(
        r#" "kkrt_config": { "bucket_size": "4096" },"#,
    ))
    .unwrap();
    assert_eq!(s.bucket_size, 4096);
    // An rr22_config left in a KKRT config is ignored, as SecretFlow does.
    let s = parse(&kkrt_config(r#" "rr22_config": { "bucket_size": 7 },"#)).unwrap();
    assert_eq!(s.bucket_size, 1 << 20);
    for (kkrt, field) in [
        (
            r#" "kkrt_config": { "bucket_size": 0 },"#,
            "kkrt_config.bucket_size",
        ),
        (
            r#" "kkrt_config": { "bucket_size": "lots" },"#,
            "kkrt_config.bucket_size",
        ),
        (
            r#" "kkrt_config": { "low_comm_mode": true },"#,
            "kkrt_config",
        ),
    ] {
        let e = parse(&kkrt_config(kkrt)).unwrap_err().to_string();
        assert!(e.contains(field), "{kkrt}: {e}");
    }
}

#[test]
fn joins_need_broadcast_and_parse_their_fields() {
    use crate::pipeline::join::JoinType;
    let base = seed_config("ROLE_SENDER", "sender");
    let left = base.replace(
        "ADVANCED_JOIN_TYPE_UNSPECIFIED",
        "ADVANCED_JOIN_TYPE_LEFT_JOIN",
    );
    let e = parse(&left).unwrap_err();
    assert!(
        e.to_string().contains("advanced_join_type") && e.to_string().contains("broadcast_result"),
        "{e}"
    );
    // SecretFlow's check_hash_digest needs no broadcast (each party learns only whether the
    // key sets are equal); the intersection check, which compares the result, does.
    let digest = base.replace(
        "\"check_hash_digest\": false",
        "\"check_hash_digest\": true",
    );
    let spec = parse(&digest).unwrap();
    assert!(spec.join.check_hash_digest && !spec.join.check_intersection_digest);
    let intersection = base.replace(
        "\"self_link_party\"",
        "\"blindjoin\": { \"check_intersection_digest\": true },\n  \"self_link_party\"",
    );
    let e = parse(&intersection).unwrap_err();
    assert!(
        e.to_string().contains("check_intersection_digest")
            && e.to_string().contains("broadcast_result"),
        "{e}"
    );
    let threshold = digest.replace(
        "\"check_hash_digest\": true,",
        "\"check_hash_digest\": true, \"intersection_threshold\": 5,",
    );
    let e = parse(&threshold).unwrap_err();
    assert!(e.to_string().contains("check_hash_digest"), "{e}");

    let full = base
        .replace("\"broadcast_result\": false", "\"broadcast_result\": true")
        .replace(
            "ADVANCED_JOIN_TYPE_UNSPECIFIED",
            "ADVANCED_JOIN_TYPE_FULL_JOIN",
        )
        .replace(
            "\"left_side\": \"ROLE_RECEIVER\"",
            "\"left_side\": \"ROLE_SENDER\"",
        )
        .replace(
            "\"check_hash_digest\": false",
            "\"check_hash_digest\": true",
        )
        .replace(
            "\"recovery_config\"",
            "\"output_attr\": { \"csv_null_rep\": \"NA\" },\n    \"recovery_config\"",
        );
    let spec = parse(&full).unwrap();
    assert_eq!(spec.join.join, JoinType::Full);
    assert_eq!(spec.join.left_side, Role::Sender);
    assert_eq!(spec.join.null_rep, "NA");
    assert!(spec.join.check_hash_digest);
    let bad = full.replace(
        "\"left_side\": \"ROLE_SENDER\"",
        "\"left_side\": \"ROLE_LEFT\"",
    );
    assert!(parse(&bad).unwrap_err().to_string().contains("left_side"));
}

fn with_ssl(role: &str, me: &str, ssl: &str) -> String {
    seed_config(role, me).replace("\"parties\": [", &format!("{ssl}, \"parties\": ["))
}

const BOTH_SSL: &str = r#""enable_ssl": true,
    "client_ssl_opts": { "certificate_path": "c.crt", "private_key_path": "c.key",
                         "ca_file_path": "ca.crt", "verify_depth": 1 },
    "server_ssl_opts": { "certificate_path": "/abs/s.crt", "private_key_path": "s.key",
                         "ca_file_path": "ca.crt", "verify_depth": "2" }"#;

#[test]
fn enable_ssl_picks_server_opts_for_the_listener_and_client_opts_for_the_connector() {
    // "receiver" sorts first: it listens, so it uses server_ssl_opts.
    let r = parse(&with_ssl("ROLE_RECEIVER", "receiver", BOTH_SSL)).unwrap();
    let tls = r.tls.unwrap();
    assert_eq!(tls.cert_path, Path::new("/abs/s.crt"));
    assert_eq!(tls.key_path, Path::new("/base/s.key"));
    assert_eq!(tls.ca_path, Path::new("/base/ca.crt"));
    let s = parse(&with_ssl("ROLE_SENDER", "sender", BOTH_SSL)).unwrap();
    assert_eq!(s.tls.unwrap().cert_path, Path::new("/base/c.crt"));
    // Only one given: used either way.
    let one = r#""enable_ssl": true, "client_ssl_opts": { "certificate_path": "c.crt",
        "private_key_path": "c.key", "ca_file_path": "ca.crt" }"#;
    let r = parse(&with_ssl("ROLE_RECEIVER", "receiver", one)).unwrap();
    assert_eq!(r.tls.unwrap().cert_path, Path::new("/base/c.crt"));
    // Off (or absent): plain TCP, and the options are accepted but unused.
    let off = BOTH_SSL.replace("true", "false");
    assert!(
        parse(&with_ssl("ROLE_SENDER", "sender", &off))
            .unwrap()
            .tls
            .is_none()
    );
    assert!(
        parse(&seed_config("ROLE_SENDER", "sender"))
            .unwrap()
            .tls
            .is_none()
    );
}

#[test]
fn enable_ssl_without_files_names_the_field() {
    let e = parse(&with_ssl("ROLE_SENDER", "sender", "\"enable_ssl\": true")).unwrap_err();
    assert!(e.to_string().contains("link_config.enable_ssl"), "{e}");
    let missing_key = r#""enable_ssl": true, "client_ssl_opts": { "certificate_path": "c.crt",
        "private_key_path": "", "ca_file_path": "ca.crt" }"#;
    let e = parse(&with_ssl("ROLE_SENDER", "sender", missing_key)).unwrap_err();
    assert!(
        e.to_string()
            .contains("link_config.client_ssl_opts.private_key_path"),
        "{e}"
    );
    let typo = r#""enable_ssl": true, "client_ssl_opts": { "cert_path": "c.crt" }"#;
    let e = parse(&with_ssl("ROLE_SENDER", "sender", typo)).unwrap_err();
    assert!(e.to_string().contains("cert_path"), "{e}");
}

#[test]
fn recovery_needs_a_folder_and_resolves_it() {
    let base = seed_config("ROLE_RECEIVER", "receiver");
    assert_eq!(parse(&base).unwrap().recovery, None);
    let on = base.replacen("\"enabled\": false", "\"enabled\": true", 1);
    let e = parse(&on).unwrap_err().to_string();
    assert!(e.contains("recovery_config.folder"), "{e}");
    let with_folder = base.replacen(
        "\"enabled\": false",
        "\"enabled\": true, \"folder\": \"ckpt\"",
        1,
    );
    let spec = parse(&with_folder).unwrap();
    let folder = spec.recovery.unwrap();
    assert!(
        folder.ends_with("ckpt") && folder.is_absolute(),
        "{folder:?}"
    );
}

#[test]
fn threshold_and_cardinality_modes_parse_and_are_checked() {
    let base = seed_config("ROLE_RECEIVER", "receiver");
    let with = |extra: &str| base.replace("\"check_hash_digest\": false,", extra);
    let s = parse(&with(
        "\"check_hash_digest\": false, \"intersection_threshold\": 100, \"count_path\": \"c.csv\",",
    ))
    .unwrap();
    assert_eq!(s.reveal, Reveal::UpTo(100));
    assert_eq!(s.count_path.as_deref(), Some(Path::new("/base/c.csv")));

    // Cardinality-only needs no output; one given is not written, with a warning.
    let card = base.replace(
        "\"self_link_party\"",
        "\"blindjoin\": { \"cardinality_only\": true }, \"self_link_party\"",
    );
    let s = parse(&card).unwrap();
    assert_eq!(s.reveal, Reveal::Cardinality);
    assert!(!s.learns_result() && s.learns_count());
    assert!(
        s.warnings.iter().any(|w| w.contains("output_config")),
        "{:?}",
        s.warnings
    );
    let no_output = card.replace(
        "\"output_config\": { \"type\": \"IO_TYPE_FILE_CSV\", \"path\": \"/data/out.csv\" },",
        "",
    );
    assert!(parse(&no_output).is_ok());

    let e = parse(&card.replace(
        "\"check_hash_digest\": false,",
        "\"intersection_threshold\": 5,",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("blindjoin.cardinality_only") && e.contains("choose one"),
        "{e}"
    );
    let e = parse(&with("\"intersection_threshold\": 5,").replace(
        "\"protocol\": \"PROTOCOL_ECDH\"",
        "\"protocol\": \"PROTOCOL_KKRT\"",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("intersection_threshold") && e.contains("PROTOCOL_ECDH"),
        "{e}"
    );

    // count_path without a mode that writes it: a warning, not an error.
    let s = parse(&with("\"count_path\": \"c.csv\",")).unwrap();
    assert!(
        s.warnings.iter().any(|w| w.contains("count_path")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn parquet_io_types_are_accepted_and_unknown_ones_named() {
    let base = seed_config("ROLE_RECEIVER", "receiver");
    let s = parse(&base).unwrap();
    assert_eq!(
        (s.input_format, s.output_format),
        (TableFormat::Csv, TableFormat::Csv)
    );
    let pq = base.replace("IO_TYPE_FILE_CSV", "IO_TYPE_FILE_PARQUET");
    let s = parse(&pq).unwrap();
    assert_eq!(
        (s.input_format, s.output_format),
        (TableFormat::Parquet, TableFormat::Parquet)
    );
    let e = parse(&base.replacen("IO_TYPE_FILE_CSV", "IO_TYPE_FILE_ORC", 1))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("input_config.type") && e.contains("IO_TYPE_FILE_PARQUET"),
        "{e}"
    );
}

#[test]
fn any_config_is_told_apart_as_the_cli_does() {
    let base = Path::new("/base");
    let two = seed_config("ROLE_RECEIVER", "receiver");
    let p = parse_any_launch_config(&two, "two.json", base).unwrap();
    assert_eq!(p.kind(), "two-party");
    assert!(matches!(&p, Plan::TwoParty(s) if s.role == Role::Receiver));
    // debug_options.trace_path is honoured (crate::ops), so no warning about it.
    assert!(!p.warnings().iter().any(|w| w.contains("trace_path")));

    let three = r#"{
  "psi_config": {
    "protocol_config": { "protocol": "PROTOCOL_ECDH_3PC", "receiver": "alice",
                         "ecdh_config": { "curve": "CURVE_25519" } },
    "input_config": { "type": "IO_TYPE_FILE_CSV", "path": "b.csv" },
    "output_config": { "type": "IO_TYPE_FILE_CSV", "path": "b_out.csv" },
    "keys": ["id"]
  },
  "link_config": { "parties": [ { "id": "alice", "host": "127.0.0.1:1" },
    { "id": "bob", "host": "127.0.0.1:2" }, { "id": "carol", "host": "127.0.0.1:3" } ] },
  "self_link_party": "bob"
}"#;
    let mut p = parse_any_launch_config(three, "three.json", base).unwrap();
    assert_eq!(p.kind(), "three-party");
    p.set_report(PathBuf::from("/r.json"));
    match &p {
        Plan::ThreeParty(t) => {
            assert_eq!(t.me, 1);
            assert_eq!(t.spec.input, Path::new("/base/b.csv"));
            assert_eq!(t.spec.report.as_deref(), Some(Path::new("/r.json")));
        }
        other => panic!("{other:?}"),
    }

    let ub = r#"{
  "ub_psi_config": { "mode": "MODE_ONLINE", "role": "ROLE_CLIENT",
    "input_config": { "type": "IO_TYPE_FILE_CSV", "path": "c.csv" },
    "output_config": { "type": "IO_TYPE_FILE_CSV", "path": "c_out.csv" },
    "keys": ["id"], "cache_path": "cache", "client_get_result": true },
  "link_config": { "parties": [ { "id": "server", "host": "127.0.0.1:1" },
    { "id": "client", "host": "127.0.0.1:2" } ] },
  "self_link_party": "client"
}"#;
    let p = parse_any_launch_config(ub, "ub.json", base).unwrap();
    assert_eq!(p.kind(), "unbalanced");
    match &p {
        Plan::Unbalanced(u) => {
            assert_eq!(u.cache_path, Path::new("/base/cache"));
            assert!(u.link.shape.is_none());
        }
        other => panic!("{other:?}"),
    }

    // Each kind's own parser reports its errors.
    let bad = three.replace(r#""receiver": "alice","#, "");
    let e = parse_any_launch_config(&bad, "three.json", base).unwrap_err();
    assert!(e.to_string().contains("receiver"), "{e}");
    let bad = ub.replace("MODE_ONLINE", "MODE_NONE");
    let e = parse_any_launch_config(&bad, "ub.json", base).unwrap_err();
    assert!(e.to_string().contains("mode"), "{e}");
}

/// SecretFlow's `oneof runtime_config`: a second runtime config is refused, naming both, before
/// any kind's parser runs.
#[test]
fn a_second_runtime_config_is_refused_by_every_parser() {
    for (ours, body) in [
        ("legacy_psi_config", r#"{"psi_type": "ECDH_PSI_2PC"}"#),
        ("ub_psi_config", r#"{"mode": "MODE_ONLINE"}"#),
        ("apsi_sender_config", r#"{"source_file": "db.csv"}"#),
    ] {
        let text = format!(r#"{{"{ours}": {body}, "psi_config": {{}}}}"#);
        let err = parse_any_launch_config(&text, "two.json", Path::new("/base"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("psi_config") && err.contains(ours) && err.contains("cannot be combined"),
            "{ours}: the error names both configs: {err}"
        );
    }
}

#[test]
fn port_ranges_parse() {
    assert_eq!(super::parse_port_range("9100-9131").unwrap(), (9100, 9131));
    assert_eq!(super::parse_port_range("9100-9100").unwrap(), (9100, 9100));
    for bad in ["9100", "0-5", "9-8", "a-b", "1-70000", ""] {
        assert!(super::parse_port_range(bad).is_err(), "{bad}");
    }
}

/// Every kind of launch is parsed from text once: the v1, three-party and n-party forms hand
/// their parsers values, not text, and the process-wide settings read the same value.
#[test]
fn a_launch_is_parsed_once_whatever_its_kind() {
    let base = Path::new("/base");
    let three = r#"{
  "psi_config": {
    "protocol_config": { "protocol": "PROTOCOL_ECDH_3PC", "receiver": "alice",
                         "ecdh_config": { "curve": "CURVE_25519" } },
    "input_config": { "type": "IO_TYPE_FILE_CSV", "path": "b.csv" },
    "keys": ["id"]
  },
  "link_config": { "parties": [ { "id": "alice", "host": "127.0.0.1:1" },
    { "id": "bob", "host": "127.0.0.1:2" }, { "id": "carol", "host": "127.0.0.1:3" } ] },
  "self_link_party": "bob"
}"#;
    let n_party = three.replace("PROTOCOL_ECDH_3PC", "PROTOCOL_NPC").replace(
        r#""ecdh_config": { "curve": "CURVE_25519" } "#,
        r#""ecdh_config": {} "#,
    );
    let legacy_npc = r#"{
  "legacy_psi_config": { "psi_type": "ECDH_PSI_NPC", "receiver_rank": 0,
    "input_params": { "path": "a.csv", "select_fields": ["id"] },
    "output_params": { "path": "a_out.csv" }, "curve_type": "CURVE_25519" },
  "link_config": { "parties": [ { "id": "alice", "host": "127.0.0.1:1" },
    { "id": "bob", "host": "127.0.0.1:2" }, { "id": "carol", "host": "127.0.0.1:3" } ] },
  "self_link_party": "alice"
}"#;
    let ub = r#"{
  "ub_psi_config": { "mode": "MODE_ONLINE", "role": "ROLE_CLIENT",
    "input_config": { "type": "IO_TYPE_FILE_CSV", "path": "c.csv" },
    "output_config": { "type": "IO_TYPE_FILE_CSV", "path": "c_out.csv" },
    "keys": ["id"], "cache_path": "cache", "client_get_result": true },
  "link_config": { "parties": [ { "id": "server", "host": "127.0.0.1:1" },
    { "id": "client", "host": "127.0.0.1:2" } ] },
  "self_link_party": "client"
}"#;
    let cases = [
        ("two-party", seed_config("ROLE_RECEIVER", "receiver")),
        ("three-party", three.to_string()),
        ("n-party", n_party),
        ("n-party", legacy_npc.to_string()),
        ("unbalanced", ub.to_string()),
    ];
    for (kind, text) in cases {
        let before = envelope::parses();
        let env = Envelope::parse(&text, "c.json", base).unwrap();
        let plan = Plan::from_envelope(&env).unwrap_or_else(|e| panic!("{kind}: {e}"));
        crate::ops::Ops::of(&env).unwrap();
        assert_eq!(plan.kind(), kind);
        assert_eq!(envelope::parses() - before, 1, "{kind}");
    }
}

#[test]
fn brpc_channel_protocol_sets_secretflows_framing_and_unsupported_ones_are_named() {
    let with = |value: &str| {
        seed_config("ROLE_SENDER", "sender")
            .replacen(
                "\"link_config\": {",
                &format!("\"link_config\": {{ \"brpc_channel_protocol\": {value},"),
                1,
            )
            .replacen(
                "\"self_link_party\"",
                "\"blindjoin\": { \"peer_wire\": \"secretflow\" }, \"self_link_party\"",
                1,
            )
    };
    let channel = |text: &str| parse(text).unwrap().peer_wire.unwrap().channel;
    assert_eq!(
        channel(&with("\"h2:grpc\"")),
        crate::spec::SfChannel::H2Grpc
    );
    assert_eq!(
        channel(&with("\"baidu_std\"")),
        crate::spec::SfChannel::BaiduStd
    );
    assert_eq!(channel(&with("\"\"")), crate::spec::SfChannel::BaiduStd);
    for (bad, says) in [
        ("\"http\"", "fails to start"),
        ("\"h2\"", "without gRPC"),
        ("\"thrift\"", "not a brpc channel protocol"),
        ("7", "not a string"),
    ] {
        let e = parse(&with(bad)).unwrap_err().to_string();
        assert!(
            e.contains("link_config.brpc_channel_protocol") && e.contains(says),
            "{bad}: {e}"
        );
    }
}
