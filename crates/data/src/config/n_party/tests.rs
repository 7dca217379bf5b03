use super::*;

/// A config for `me` naming `protocol`; `extra` is spliced into `protocol_config`.
fn cfg(me: &str, protocol: &str, extra: &str, parties: &[&str]) -> String {
    let ps: Vec<String> = parties
        .iter()
        .enumerate()
        .map(|(i, id)| format!(r#"{{ "id": "{id}", "host": "127.0.0.1:{}" }}"#, 5400 + i))
        .collect();
    format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{
      "protocol": "{protocol}",
      {extra}
      "broadcast_result": false
    }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "in.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "out.csv" }},
    "keys": ["id"],
    "recovery_config": {{ "enabled": false }}
  }},
  "link_config": {{ "parties": [{}] }},
  "self_link_party": "{me}"
}}"#,
        ps.join(", ")
    )
}

fn parse(text: &str) -> Result<Option<NPartySpec>, ConfigError> {
    parse_n_party_config(text, "t.json", Path::new("/base"))
}

const FIVE: [&str; 5] = ["a", "b", "c", "d", "e"];

#[test]
fn five_parties_default_to_the_zero_sharing_protocol() {
    for (i, me) in FIVE.iter().enumerate() {
        let t = parse(&cfg(me, "PROTOCOL_NPC", r#""receiver": "c","#, &FIVE))
            .unwrap()
            .unwrap();
        assert_eq!((t.me, t.receiver), (i, 2));
        assert_eq!(
            t.protocol,
            NPartyProtocol::Npc(NpcVariant::ZeroShare(Curve::FourQ))
        );
        assert_eq!(t.parties.len(), 5);
        assert_eq!(t.spec.input, Path::new("/base/in.csv"));
        assert!(t.spec.warnings.is_empty(), "{:?}", t.spec.warnings);
    }
}

#[test]
fn secretflow_npc_names_run_the_iterated_protocol_with_a_warning() {
    let ecdh = r#""receiver": "a", "ecdh_config": { "curve": "CURVE_25519" },"#;
    for name in ["ECDH_PSI_NPC", "PROTOCOL_ECDH_NPC"] {
        let t = parse(&cfg("b", name, ecdh, &FIVE)).unwrap().unwrap();
        assert_eq!(
            t.protocol,
            NPartyProtocol::Npc(NpcVariant::Iterated(ProtocolChoice::Ecdh {
                curve: Curve::Curve25519
            }))
        );
        assert!(t.spec.warnings.iter().any(|w| w.contains("intermediate")));
    }
    for name in ["KKRT_PSI_NPC", "PROTOCOL_KKRT_NPC"] {
        let t = parse(&cfg("b", name, r#""receiver": "a","#, &FIVE))
            .unwrap()
            .unwrap();
        assert_eq!(
            t.protocol,
            NPartyProtocol::Npc(NpcVariant::Iterated(ProtocolChoice::Kkrt))
        );
    }
    let e = parse(&cfg("b", "ECDH_PSI_NPC", r#""receiver": "a","#, &FIVE)).unwrap_err();
    assert!(e.to_string().contains("ecdh_config.curve"), "{e}");
}

#[test]
fn dp_psi_takes_two_parties_and_its_parameters() {
    let t = parse(&cfg("x", "DP_PSI_2PC", r#""receiver": "y","#, &["x", "y"]))
        .unwrap()
        .unwrap();
    assert_eq!(
        t.protocol,
        NPartyProtocol::Dp {
            curve: Curve::Curve25519,
            params: DpParams::default()
        }
    );
    let extra = r#""receiver": "y", "dppsi_params": { "bob_sub_sampling": 0.5, "epsilon": 1.5 },"#;
    let t = parse(&cfg("y", "PROTOCOL_DP", extra, &["x", "y"]))
        .unwrap()
        .unwrap();
    assert!(t.is_receiver());
    assert_eq!(
        t.protocol,
        NPartyProtocol::Dp {
            curve: Curve::Curve25519,
            params: DpParams {
                bob_sub_sampling: 0.5,
                epsilon: 1.5
            }
        }
    );
    let bad = r#""receiver": "y", "dppsi_params": { "epsilon": -1 },"#;
    let e = parse(&cfg("y", "DP_PSI_2PC", bad, &["x", "y"])).unwrap_err();
    assert!(e.to_string().contains("epsilon"), "{e}");
    let e = parse(&cfg(
        "x",
        "DP_PSI_2PC",
        r#""receiver": "y","#,
        &["x", "y", "z"],
    ))
    .unwrap_err();
    assert!(e.to_string().contains("exactly 2"), "{e}");
}

#[test]
fn refusals_name_the_field() {
    let cases = [
        (cfg("a", "PROTOCOL_NPC", "", &FIVE), "receiver"),
        (
            cfg("a", "PROTOCOL_NPC", r#""receiver": "q","#, &FIVE),
            "receiver",
        ),
        (
            cfg("q", "PROTOCOL_NPC", r#""receiver": "a","#, &FIVE),
            "self_link_party",
        ),
        (
            cfg("a", "PROTOCOL_NPC", r#""receiver": "a","#, &["a", "b", "a"]),
            "link_config.parties",
        ),
        (
            cfg(
                "a",
                "PROTOCOL_NPC",
                r#""receiver": "a", "ecdh_config": { "curve": "CURVE_25519" },"#,
                &FIVE,
            ),
            "ecdh_config.curve",
        ),
        (
            cfg(
                "a",
                "PROTOCOL_NPC",
                r#""receiver": "b", "role": "ROLE_RECEIVER","#,
                &FIVE,
            ),
            "role",
        ),
        (
            cfg(
                "a",
                "PROTOCOL_NPC",
                r#""receiver": "a", "broadcast_result": true,"#,
                &FIVE,
            )
            .replace(r#""broadcast_result": false"#, r#""x": 1"#),
            "broadcast_result",
        ),
    ];
    for (text, field) in cases {
        let e = parse(&text).unwrap_err();
        assert!(e.to_string().contains(field), "{field}: {e}");
    }
    // Other protocols are not ours.
    assert!(
        parse(&cfg("a", "PROTOCOL_ECDH", "", &FIVE))
            .unwrap()
            .is_none()
    );
}
