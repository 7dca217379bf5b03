use super::*;

/// A three-party config for `me`; `extra` is spliced into `protocol_config`, `parties` lists the
/// `link_config.parties` ids.
fn cfg(me: &str, protocol: &str, extra: &str, parties: &[&str]) -> String {
    let ps: Vec<String> = parties
        .iter()
        .enumerate()
        .map(|(i, id)| format!(r#"{{ "id": "{id}", "host": "127.0.0.1:{}" }}"#, 5300 + i))
        .collect();
    format!(
        r#"{{
  "psi_config": {{
    "protocol_config": {{
      "protocol": "{protocol}",
      "ecdh_config": {{ "curve": "CURVE_FOURQ" }},
      {extra}
      "broadcast_result": false
    }},
    "input_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "in.csv" }},
    "output_config": {{ "type": "IO_TYPE_FILE_CSV", "path": "out.csv" }},
    "keys": ["id",],
    "recovery_config": {{ "enabled": false }}
  }},
  "link_config": {{ "parties": [{}] }},
  "self_link_party": "{me}"
}}"#,
        ps.join(", ")
    )
}

fn parse3(text: &str) -> Result<Option<ThreePartySpec>, ConfigError> {
    parse_three_party_config(text, "t.json", Path::new("/base"))
}

const ABC: [&str; 3] = ["alice", "bob", "carol"];

#[test]
fn three_parties_are_accepted_for_the_3pc_protocol() {
    for protocol in THREE_PARTY_PROTOCOLS {
        for (me, idx) in [("alice", 0), ("bob", 1), ("carol", 2)] {
            let t = parse3(&cfg(me, protocol, r#""receiver": "bob","#, &ABC))
                .unwrap()
                .unwrap();
            assert_eq!(t.me, idx);
            assert_eq!(t.receiver, 1);
            assert_eq!(t.is_receiver(), me == "bob");
            assert_eq!(
                t.spec.role,
                if me == "bob" {
                    Role::Receiver
                } else {
                    Role::Sender
                }
            );
            assert_eq!(
                t.spec.protocol.curve(),
                Some(blindjoin_crypto::Curve::FourQ)
            );
            assert_eq!(t.spec.input, Path::new("/base/in.csv"));
            assert_eq!(t.parties[2].addr, "127.0.0.1:5302");
            assert_eq!(t.setup(), "alice,bob,carol>bob");
        }
    }
    // A consistent role is fine.
    let t = parse3(&cfg(
        "alice",
        "PROTOCOL_ECDH_3PC",
        r#""receiver": "alice", "role": "ROLE_RECEIVER","#,
        &ABC,
    ));
    assert!(t.unwrap().is_some());
}

#[test]
fn two_party_protocols_are_not_three_party_and_refuse_three_parties() {
    let text = cfg(
        "alice",
        "PROTOCOL_ECDH",
        r#""role": "ROLE_RECEIVER","#,
        &ABC,
    );
    assert!(parse3(&text).unwrap().is_none());
    let e = super::super::parse_launch_config(&text, "t.json", Path::new("/b"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("exactly 2") && e.contains("PROTOCOL_ECDH_3PC"),
        "{e}"
    );
    // The 3PC name given to the two-party parser says what it needs.
    let text = cfg(
        "alice",
        "PROTOCOL_ECDH_3PC",
        r#""role": "ROLE_RECEIVER","#,
        &ABC[..2],
    );
    let e = super::super::parse_launch_config(&text, "t.json", Path::new("/b"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("three-party"), "{e}");
}

#[test]
fn wrong_ids_counts_and_receivers_are_errors() {
    let err = |text: String| parse3(&text).unwrap_err().to_string();
    let e = err(cfg(
        "alice",
        "PROTOCOL_ECDH_3PC",
        r#""receiver": "bob","#,
        &ABC[..2],
    ));
    assert!(e.contains("needs exactly 3"), "{e}");
    let e = err(cfg(
        "dave",
        "PROTOCOL_ECDH_3PC",
        r#""receiver": "bob","#,
        &ABC,
    ));
    assert!(e.contains("self_link_party") && e.contains("dave"), "{e}");
    let e = err(cfg(
        "alice",
        "PROTOCOL_ECDH_3PC",
        r#""receiver": "dave","#,
        &ABC,
    ));
    assert!(e.contains("receiver") && e.contains("dave"), "{e}");
    let e = err(cfg("alice", "PROTOCOL_ECDH_3PC", "", &ABC));
    assert!(e.contains("receiver") && e.contains("missing"), "{e}");
    let e = err(cfg(
        "alice",
        "PROTOCOL_ECDH_3PC",
        r#""receiver": "alice","#,
        &["alice", "bob", "alice"],
    ));
    assert!(e.contains("must differ"), "{e}");
    let e = err(cfg(
        "alice",
        "PROTOCOL_ECDH_3PC",
        r#""receiver": "bob", "role": "ROLE_RECEIVER","#,
        &ABC,
    ));
    assert!(e.contains("contradicts"), "{e}");
}

#[test]
fn unsupported_features_are_refused_with_the_reason() {
    let base = cfg(
        "alice",
        "PROTOCOL_ECDH_3PC",
        r#""receiver": "alice","#,
        &ABC,
    );
    let cases = [
        (
            r#""broadcast_result": false"#,
            r#""broadcast_result": true"#,
            "three-way intersection",
        ),
        (
            r#""keys": ["id",],"#,
            r#""keys": ["id"], "advanced_join_type": "ADVANCED_JOIN_TYPE_LEFT_JOIN", "left_side": "ROLE_RECEIVER","#,
            "inner join",
        ),
        (
            r#""recovery_config": { "enabled": false }"#,
            r#""recovery_config": { "enabled": true, "folder": "/tmp/rec" }"#,
            "recovery",
        ),
        (
            r#""keys": ["id",],"#,
            r#""keys": ["id"], "check_hash_digest": true,"#,
            "nothing to compare",
        ),
    ];
    for (from, to, why) in cases {
        assert!(base.contains(from), "{from}");
        let text = base.replace(from, to);
        let e = parse3(&text).unwrap_err().to_string();
        assert!(
            e.contains(why) && e.contains("PROTOCOL_ECDH_3PC"),
            "{to}: {e}"
        );
    }
    let e = parse3(&base.replace(r#""CURVE_FOURQ""#, r#""""#))
        .unwrap_err()
        .to_string();
    assert!(e.contains("curve"), "{e}");
}
