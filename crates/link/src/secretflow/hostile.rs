//! Hostile input, fuzz style: random, truncated, mutated and oversized bytes go through the
//! frame reader, every protobuf decoder and the channel's Push handler. Nothing may panic, a
//! frame body is never allocated beyond its bound, and the channel never holds more than its
//! byte budget. A fixed-seed xorshift keeps runs reproducible.

use super::channel::{Channel, Limits};
use super::client::RpcClient;
use super::frame::{FrameError, HEADER_LEN, MAGIC, encode_frame, read_frame};
use super::proto::{
    ChunkInfo, PushRequest, PushResponse, RpcMeta, TRANS_CHUNKED, decode_push_request, put_varint,
};
use super::server::PushHandler;
use crate::Cancel;
use std::io::Cursor;
use std::net::TcpListener;
use std::time::Duration;

/// xorshift64: the hostile tests' reproducible bytes (also used by the h2 tests).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub(super) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

const MAX_BODY: usize = 1 << 16;

fn valid_frames(rng: &mut Rng) -> Vec<Vec<u8>> {
    let value = rng.bytes(300);
    let req = PushRequest {
        sender_rank: 1,
        key: b"root:P2P-1:1->0\x01\x021",
        value: &value,
        trans_type: TRANS_CHUNKED,
        chunk_info: Some(ChunkInfo {
            message_length: 1000,
            chunk_offset: 300,
        }),
    };
    vec![
        encode_frame(&RpcMeta::push_request(rng.next()), 400, |o| req.encode(o)),
        encode_frame(&RpcMeta::response(rng.next(), 0, ""), 2, |o| {
            PushResponse::default().encode(o)
        }),
    ]
}

/// Feeds one input to every decoder; checks the bounds of whatever decodes.
fn feed(bytes: &[u8]) {
    let mut c = Cursor::new(bytes);
    while let Ok(Some(f)) = read_frame(&mut c, MAX_BODY) {
        assert!(f.payload().len() <= MAX_BODY);
        // The body buffer grows with what arrived: at most twice the body, and never past
        // twice the bound.
        assert!(f.body_capacity() <= 2 * MAX_BODY, "{}", f.body_capacity());
        let _ = decode_push_request(f.payload());
        let _ = PushResponse::decode(f.payload());
    }
    let _ = RpcMeta::decode(bytes);
    let _ = decode_push_request(bytes);
    let _ = PushResponse::decode(bytes);
}

#[test]
fn random_truncated_and_mutated_frames_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        let n = rng.below(200);
        feed(&rng.bytes(n));
        // Random bytes after a valid magic reach the size checks and the meta decoder.
        let mut m = Vec::from(MAGIC);
        m.extend(rng.bytes(n));
        feed(&m);
    }
    for _ in 0..300 {
        for frame in valid_frames(&mut rng) {
            for cut in [
                1,
                HEADER_LEN,
                HEADER_LEN + 3,
                frame.len() / 2,
                frame.len() - 1,
            ] {
                feed(&frame[..cut.min(frame.len())]);
            }
            let mut f = frame.clone();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(f.len());
                f[i] = rng.next() as u8;
            }
            feed(&f);
        }
    }
}

#[test]
fn oversized_announcements_are_refused_before_reading() {
    for body in [MAX_BODY as u32 + 1, u32::MAX] {
        let mut h = Vec::from(MAGIC);
        h.extend_from_slice(&body.to_be_bytes());
        h.extend_from_slice(&0u32.to_be_bytes());
        h.extend(vec![0u8; 100]);
        let mut c = Cursor::new(&h);
        assert!(matches!(
            read_frame(&mut c, MAX_BODY),
            Err(FrameError::TooLarge { .. })
        ));
        assert_eq!(c.position(), HEADER_LEN as u64, "read past the header");
    }
    // An announcement within the bound that never arrives: an error after what was sent.
    let mut h = Vec::from(MAGIC);
    h.extend_from_slice(&(MAX_BODY as u32).to_be_bytes());
    h.extend_from_slice(&0u32.to_be_bytes());
    h.extend(vec![0u8; 100]);
    assert!(matches!(
        read_frame(&mut Cursor::new(&h), MAX_BODY),
        Err(FrameError::Io(_))
    ));
    // Nested lengths past the end of their message.
    let mut meta = vec![0x0a];
    put_varint(&mut meta, u64::MAX >> 1);
    assert!(RpcMeta::decode(&meta).is_err());
}

fn lone_channel(max_message: usize, max_buffered: usize) -> Channel {
    // The client points at a closed port: ACKs fail quietly, as with a vanished peer.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let cancel = Cancel::new();
    let client = RpcClient::new(
        "peer",
        addr,
        MAX_BODY,
        Duration::from_secs(1),
        cancel.clone(),
        None,
        super::ChannelProtocol::BaiduStd,
    );
    let limits = Limits {
        chunk: 1000,
        parallel: 2,
        max_message,
        max_buffered,
        rpc_timeout: Duration::from_secs(1),
    };
    Channel::new(0, 1, "peer", client, limits, cancel)
}

fn push<'a>(key: &'a [u8], value: &'a [u8], chunk: Option<(u64, u64)>) -> PushRequest<'a> {
    PushRequest {
        sender_rank: 1,
        key,
        value,
        trans_type: if chunk.is_some() { TRANS_CHUNKED } else { 0 },
        chunk_info: chunk.map(|(message_length, chunk_offset)| ChunkInfo {
            message_length,
            chunk_offset,
        }),
    }
}

#[test]
fn the_channel_refuses_lies_and_stays_within_its_budget() {
    // A claimed length over the message bound is refused without allocating it.
    let ch = lone_channel(10_000, 20_000);
    let r = ch.on_push(&push(b"k\x01\x021", b"abc", Some((u64::MAX, 0))));
    assert_ne!(r.error_code, 0);
    assert!(r.error_msg.contains("exceeds the limit"), "{}", r.error_msg);
    assert_eq!(ch.buffered(), 0);
    // ... and the channel stays failed, so a later recv reports it instead of waiting.
    let err = ch.recv("k", Duration::from_secs(5)).unwrap_err();
    assert!(matches!(err, crate::LinkError::BadFrame { .. }), "{err}");

    // Overlapping chunks, a chunk past the end, lengths that disagree, a wrong sender.
    for bad in [
        vec![
            push(b"a\x01\x021", &[1; 10], Some((100, 0))),
            push(b"a\x01\x021", &[1; 10], Some((100, 5))),
        ],
        vec![push(b"b\x01\x021", &[1; 10], Some((100, 95)))],
        vec![
            push(b"c\x01\x021", &[1; 10], Some((100, 0))),
            push(b"c\x01\x021", &[1; 10], Some((200, 10))),
        ],
        vec![
            push(b"d\x01\x021", &[1; 10], None),
            push(b"e\x01\x02x", &[1; 10], None),
        ],
        vec![
            push(b"f\x01\x021", b"x", None),
            push(b"f\x01\x022", b"y", None),
        ],
        vec![push(b"ACK\x01\x02", b"12a", None)],
        vec![push(b"FIN\x01\x02", b"", None)],
    ] {
        let ch = lone_channel(10_000, 20_000);
        let codes: Vec<i32> = bad.iter().map(|p| ch.on_push(p).error_code).collect();
        assert_ne!(
            codes.last(),
            Some(&0),
            "accepted {:?}",
            bad.last().map(|p| p.key)
        );
    }
    let ch = lone_channel(10_000, 20_000);
    let mut wrong = push(b"g\x01\x021", b"x", None);
    wrong.sender_rank = 7;
    assert_ne!(ch.on_push(&wrong).error_code, 0);

    // Unread messages past the byte budget: refused, and what is held stays near the bound.
    let ch = lone_channel(10_000, 20_000);
    let value = vec![0u8; 5000];
    let mut refused = false;
    for i in 1..=10u64 {
        let key = format!("m{i}\x01\x02{i}");
        if ch.on_push(&push(key.as_bytes(), &value, None)).error_code != 0 {
            refused = true;
            break;
        }
    }
    assert!(refused);
    assert!(ch.buffered() <= 20_000 + value.len());
}

#[test]
fn repeats_are_ignored_and_chunks_reassemble_out_of_order() {
    let ch = lone_channel(10_000, 20_000);
    let value: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
    let key = b"root:P2P-1:1->0\x01\x021";
    for off in [2000usize, 0, 1000, 0] {
        let end = (off + 1000).min(value.len());
        let r = ch.on_push(&push(key, &value[off..end], Some((2500, off as u64))));
        assert_eq!(r.error_code, 0, "{}", r.error_msg);
    }
    // The same seq again after it completed (an RPC retry) is dropped, not a second message.
    let r = ch.on_push(&push(key, &value[..1000], Some((2500, 0))));
    assert_eq!(r.error_code, 0);
    assert_eq!(
        ch.recv("root:P2P-1:1->0", Duration::from_secs(1)).unwrap(),
        value
    );
    assert_eq!(ch.buffered(), 0);
    let r = ch.on_push(&push(key, b"again", None));
    assert_eq!(r.error_code, 0);
    assert!(matches!(
        ch.recv("root:P2P-1:1->0", Duration::from_millis(200)),
        Err(crate::LinkError::RecvTimeout { .. })
    ));
}

/// Records what arrives at a bare server.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<(Vec<u8>, Vec<u8>)>>);

impl PushHandler for Recorder {
    fn on_push(&self, req: &PushRequest<'_>) -> PushResponse {
        self.0
            .lock()
            .unwrap()
            .push((req.key.to_vec(), req.value.to_vec()));
        PushResponse::default()
    }
    fn on_connection(&self, _open: bool) {}
    fn on_bad_frame(&self, _reason: String) {}
}

#[test]
fn an_ack_that_meets_a_closed_port_is_sent_again() {
    let ch = std::sync::Arc::new(lone_channel(10_000, 20_000));
    assert_eq!(ch.on_push(&push(b"k\x01\x027", b"v", None)).error_code, 0);
    assert_eq!(ch.recv("k", Duration::from_secs(1)).unwrap(), b"v");
    let acker = std::sync::Arc::clone(&ch);
    let t = std::thread::spawn(move || acker.run_acks());
    // The first attempt finds nothing listening; the peer's server comes up a moment later.
    std::thread::sleep(Duration::from_millis(1200));
    let rec = std::sync::Arc::new(Recorder::default());
    let handler: std::sync::Arc<dyn PushHandler> = rec.clone();
    let _server =
        super::server::RpcServer::start(ch.client.addr(), MAX_BODY, handler, None).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while rec.0.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    ch.stop_acks();
    t.join().unwrap();
    assert_eq!(
        rec.0.lock().unwrap().as_slice(),
        &[(b"ACK\x01\x02".to_vec(), b"7".to_vec())]
    );
}
