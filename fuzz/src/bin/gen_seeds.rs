//! Writes seed inputs for every fuzz target into `<dir>/<target>/seed-*` (default dir:
//! `fuzz/seeds`): valid messages from honest runs, so the fuzzer starts deep in each decoder.
//! Deterministic in layout, not in bytes (the protocol runs use fresh randomness).

use blindjoin_link::wire::ids;
use blindjoin_link::{put_u32, put_u64, put_varint};
use blindjoin_protocols::ecdh_3pc::Seat;
use blindjoin_protocols::fuzzing::hello_encode;
use blindjoin_protocols::ub_oprf::OnlineOptions;
use blindjoin_protocols::{Curve, Protocol, Reveal, Role};
use fuzz_support::{
    PsiCase, ThreeCase, UbCase, UbStep, join_messages, psi_seed, target_hellos, three_seed, ub_seed,
};
use std::path::{Path, PathBuf};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let d: PathBuf = dir.join(target);
    std::fs::create_dir_all(&d)?;
    std::fs::write(d.join(format!("seed-{name}")), bytes)
}

fn gaps(positions: &[u32]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut next = 0;
    for &p in positions {
        put_varint(&mut out, p - next);
        next = p + 1;
    }
    out
}

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/seeds".into()),
    );

    // Whole protocols: every protocol × role × broadcast (and a few modes / curves / sizes).
    let cases = [
        (Protocol::Rr22, "rr22", None),
        (Protocol::Kkrt, "kkrt", None),
        (Protocol::Ecdh, "ecdh", Some(Curve::Curve25519)),
    ];
    for (protocol, name, curve) in cases {
        for role in [Role::Receiver, Role::Sender] {
            for broadcast in [false, true] {
                let variants: &[&str] = if protocol == Protocol::Rr22 {
                    &["fast", "low_comm", "malicious"]
                } else {
                    &[""]
                };
                for (vi, &variant) in variants.iter().enumerate() {
                    let case = PsiCase {
                        protocol,
                        curve,
                        variant,
                        role,
                        broadcast,
                        ours: 8,
                        theirs: 6 + vi,
                        reveal: Reveal::Intersection,
                    };
                    let r = if role == Role::Receiver { "r" } else { "s" };
                    let seed = psi_seed(case);
                    write(
                        &dir,
                        &format!("psi_{name}"),
                        &format!("{r}{}{variant}", u8::from(broadcast)),
                        &seed,
                    )?;
                }
            }
        }
    }
    for curve in [
        Curve::Ristretto255,
        Curve::Secp256k1,
        Curve::P256,
        Curve::Sm2,
        Curve::FourQ,
    ] {
        let case = PsiCase {
            protocol: Protocol::Ecdh,
            curve: Some(curve),
            variant: "",
            role: Role::Sender,
            broadcast: true,
            ours: 5,
            theirs: 5,
            reveal: Reveal::Intersection,
        };
        write(
            &dir,
            "psi_ecdh",
            &format!("s1-{}", curve.config_name()),
            &psi_seed(case),
        )?;
    }

    // Unbalanced PSI: every step, both groups, every result-sharing option.
    for (si, step) in [
        UbStep::RecvCache,
        UbStep::OnlineClient,
        UbStep::OnlineServer,
    ]
    .into_iter()
    .enumerate()
    {
        for (ci, curve) in [Curve::FourQ, Curve::Ristretto255].into_iter().enumerate() {
            for (oi, (c, s)) in [(true, false), (false, true), (true, true)]
                .into_iter()
                .enumerate()
            {
                let case = UbCase {
                    step,
                    curve,
                    opts: OnlineOptions {
                        client_get_result: c,
                        server_get_result: s,
                        threshold: None,
                    },
                    client: 7,
                    server: 9,
                };
                write(&dir, "ub_oprf", &format!("{si}{ci}{oi}"), &ub_seed(case))?;
            }
        }
    }

    // Three parties: each seat on Curve25519, and the receiver on FourQ.
    for (seat, curve) in [
        (Seat::Receiver, Curve::Curve25519),
        (Seat::P, Curve::Curve25519),
        (Seat::Q, Curve::Curve25519),
        (Seat::Receiver, Curve::FourQ),
    ] {
        let case = ThreeCase {
            seat,
            curve,
            sizes: [8, 6, 7],
        };
        write(
            &dir,
            "psi_3pc",
            &format!("{seat:?}-{}", curve.config_name()),
            &three_seed(case),
        )?;
    }

    // Bucket counts: bucket 2 of 4 (bucket size 2^8 for 1000 rows), the peer announced 900 rows
    // and had 400 before; its reply says 230.
    let mut reply = ids::BUCKET_COUNT.to_vec();
    put_u32(&mut reply, 2);
    put_u64(&mut reply, 230);
    let mut seed = vec![8u8, 2, 240];
    seed.extend(900u16.to_le_bytes());
    seed.extend(400u16.to_le_bytes());
    seed.extend(join_messages([reply.as_slice()]));
    write(&dir, "bucket_count", "mid", &seed)?;

    // Resume points: a checkpoint of 6 buckets at 3 (previous 2); the peer is at 2.
    let mut reply = ids::RESUME.to_vec();
    put_u32(&mut reply, 2);
    let mut seed = vec![6u8, 4, 3, 6];
    seed.extend(join_messages([reply.as_slice()]));
    write(&dir, "resume_point", "one-behind", &seed)?;

    // The digest check: a valid share (a Curve25519 point), then a tag of the right length.
    let mut share = ids::DIGEST_SHARE.to_vec();
    let mut point = [0u8; 32];
    blindjoin_crypto::new_cipher(Curve::Curve25519, None)
        .and_then(|c| c.hash_and_mask(&[[1u8; 16]], &mut point))
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    share.extend_from_slice(&point);
    let mut tag = ids::DIGEST_CHECK.to_vec();
    tag.extend_from_slice(&[0u8; 16]);
    write(
        &dir,
        "check_digest",
        "share-then-tag",
        &join_messages([share.as_slice(), tag.as_slice()]),
    )?;

    // Hellos: the peer's hello that agrees with each of the target's own hellos.
    for (i, h) in target_hellos(Role::Sender).into_iter().enumerate() {
        // sel = 2i (we are the receiver), the peer is the sender.
        let mut seed = vec![(2 * i) as u8];
        seed.extend(hello_encode(&h));
        write(&dir, "hello", &format!("{i}"), &seed)?;
    }

    // Result positions: direct (gaps, bitmap) and over the link.
    let n: u16 = 40;
    let pos = [0u32, 3, 4, 17, 39];
    let mut direct = n.to_le_bytes().to_vec();
    direct.push(0);
    direct.extend((pos.len() as u16).to_le_bytes());
    direct.push(0);
    direct.extend(gaps(&pos));
    write(&dir, "positions", "gaps", &direct)?;
    let mut bits = vec![0u8; 5];
    for p in pos {
        bits[p as usize / 8] |= 1 << (p % 8);
    }
    let mut direct = n.to_le_bytes().to_vec();
    direct.push(0);
    direct.extend((pos.len() as u16).to_le_bytes());
    direct.push(1);
    direct.extend(&bits);
    write(&dir, "positions", "bitmap", &direct)?;
    for (format, body) in [(0u8, gaps(&pos)), (1, bits.clone())] {
        let mut head = vec![3u8];
        put_u32(&mut head, pos.len() as u32);
        head.push(format);
        put_u32(&mut head, body.len() as u32);
        let mut bulk = vec![3u8];
        bulk.extend(&body);
        let mut seed = n.to_le_bytes().to_vec();
        seed.push(1);
        seed.extend(join_messages([head.as_slice(), bulk.as_slice()]));
        write(&dir, "positions", &format!("recv{format}"), &seed)?;
    }

    // Join counts: k = 5 keys, plain ones and varying counts.
    for (c, counts) in [(0u8, vec![]), (1, vec![1u32, 2, 300, 1, 70_000])] {
        let mut body = Vec::new();
        for &x in &counts {
            put_varint(&mut body, x);
        }
        let mut head = vec![0x40u8];
        put_u64(&mut head, 3);
        put_u32(&mut head, 5);
        put_u32(&mut head, body.len() as u32);
        let mut bulk = vec![0x40u8];
        bulk.extend(&body);
        let mut seed = vec![5u8, c];
        if body.is_empty() {
            seed.extend(join_messages([head.as_slice()]));
        } else {
            seed.extend(join_messages([head.as_slice(), bulk.as_slice()]));
        }
        write(&dir, "join_counts", &format!("{c}"), &seed)?;
    }

    // Bulk: 10 bytes of kind 7 in two parts.
    let mut seed = vec![7u8];
    seed.extend(10u32.to_le_bytes());
    seed.extend(join_messages([
        &[7u8, 1, 2, 3, 4][..],
        &[7u8, 5, 6, 7, 8, 9, 10][..],
    ]));
    write(&dir, "link_bulk", "two-parts", &seed)?;

    // Frames: data, data, abort; and data then close.
    let frame = |kind: u8, payload: &[u8]| {
        let mut f = (payload.len() as u32).to_le_bytes().to_vec();
        f.push(kind);
        f.extend_from_slice(payload);
        // The CRC-32 trailer over header and payload (crates/link/src/frame.rs).
        blindjoin_link::fuzzing::seal_frames(&[f, vec![0; 4]].concat())
    };
    let mut s = frame(0, b"hello");
    s.extend(frame(0, b""));
    s.extend(frame(1, "peer failed: reason".as_bytes()));
    write(&dir, "link_frames", "abort", &s)?;
    let mut s = frame(0, &[1, 2, 3]);
    s.extend(frame(2, b""));
    write(&dir, "link_frames", "close", &s)?;

    // Greetings: plain and TLS, and a release with the old link version.
    for (name, magic) in [
        ("plain", b"BLNDJN03"),
        ("tls", b"BLNDJS03"),
        ("old", b"BLNDJN02"),
    ] {
        let mut g = magic.to_vec();
        for id in [&b"bob"[..], b"alice"] {
            g.extend((id.len() as u16).to_le_bytes());
            g.extend_from_slice(id);
        }
        write(&dir, "link_greeting", name, &g)?;
    }

    // SecretFlow link: Pushes as a wheel sends them (the connect step, a MONO message, a value
    // in three out-of-order CHUNKED slices, an ACK, a FIN).
    {
        use blindjoin_link::secretflow::frame::encode_frame;
        use blindjoin_link::secretflow::proto::{ChunkInfo, PushRequest, RpcMeta, TRANS_CHUNKED};
        let push = |corr: u64, key: &[u8], value: &[u8], chunk: Option<(u64, u64)>| {
            let req = PushRequest {
                sender_rank: 1,
                key,
                value,
                trans_type: if chunk.is_some() { TRANS_CHUNKED } else { 0 },
                chunk_info: chunk.map(|(message_length, chunk_offset)| ChunkInfo {
                    message_length,
                    chunk_offset,
                }),
            };
            encode_frame(&RpcMeta::push_request(corr), req.encoded_len_bound(), |o| {
                req.encode(o)
            })
        };
        let mut s = push(1, b"connect_1\x01\x020", b"", None);
        s.extend(push(2, b"root:P2P-1:1->0\x01\x021", b"hello", None));
        s.extend(push(3, b"ACK\x01\x02", b"1", None));
        write(&dir, "link_secretflow", "mono", &s)?;
        let value = [7u8; 2500];
        let key = b"root:1:ALLGATHER\x01\x022";
        let mut s = Vec::new();
        for (i, off) in [2048usize, 0, 1024].into_iter().enumerate() {
            let end = (off + 1024).min(value.len());
            s.extend(push(
                10 + i as u64,
                key,
                &value[off..end],
                Some((2500, off as u64)),
            ));
        }
        s.extend(push(20, b"FIN\x01\x02", b"2", None));
        write(&dir, "link_secretflow", "chunked", &s)?;

        // The same Pushes over h2:grpc, one stream each.
        let body = |key: &[u8], value: &[u8]| {
            let req = PushRequest {
                sender_rank: 1,
                key,
                value,
                trans_type: 0,
                chunk_info: None,
            };
            let mut o = Vec::with_capacity(req.encoded_len_bound());
            req.encode(&mut o);
            o
        };
        let s = blindjoin_link::fuzzing::secretflow_h2_conversation(&[
            body(b"connect_1\x01\x020", b""),
            body(b"root:P2P-1:1->0\x01\x021", b"hello"),
            body(b"ACK\x01\x02", b"1"),
            body(b"FIN\x01\x02", b"2"),
        ]);
        write(&dir, "link_secretflow_h2", "pushes", &s)?;
    }

    // Reader: a program (u8, u32, str, records) then a message.
    let prog = [0u8, 0, 1, 0, 4, 2, 5, 2, 6, 0];
    let mut msg = vec![9u8, 1, 0, 0, 0, 3, 0, b'a', b'b', b'c', 2, 0, 0, 0];
    msg.resize(prog.len(), 0);
    let mut seed = prog.to_vec();
    seed.extend(msg);
    seed.extend([0x80, 0x01, 0x05]);
    write(&dir, "link_reader", "prog", &seed)?;
    Ok(())
}
