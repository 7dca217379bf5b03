//! h2:grpc: the HPACK encoder against loona-hpack's decoder, the gRPC prefix, our client
//! against our server (values over many frames and past the default windows), our client's
//! flow control against a server that opens its windows a little at a time, and hostile bytes
//! at both ends (no panic, a typed failure, bounded memory). The wheel itself is met in
//! `tests/secretflow_interop.rs`.

use super::*;
use crate::Cancel;
use crate::secretflow::ChannelProtocol;
use crate::secretflow::client::RpcClient;
use crate::secretflow::hostile::Rng;
use crate::secretflow::proto::PushRequest;
use crate::secretflow::server::RpcServer;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

const MAX_BODY: usize = 1 << 20;

#[derive(Default)]
struct Recorder {
    pushes: Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
    bad: Mutex<Vec<String>>,
}

impl PushHandler for Recorder {
    fn on_push(&self, req: &PushRequest<'_>) -> PushResponse {
        lock(&self.pushes).push((req.key.to_vec(), req.value.to_vec()));
        if req.key == b"refuse" {
            return PushResponse {
                error_code: 42,
                error_msg: "no".into(),
            };
        }
        PushResponse::default()
    }
    fn on_connection(&self, _open: bool) {}
    fn on_bad_frame(&self, reason: String) {
        lock(&self.bad).push(reason);
    }
}

fn server() -> (RpcServer, Arc<Recorder>) {
    let rec = Arc::new(Recorder::default());
    let handler: Arc<dyn PushHandler> = rec.clone();
    let s = RpcServer::start("127.0.0.1:0".parse().unwrap(), MAX_BODY, handler, None).unwrap();
    (s, rec)
}

fn h2_client(addr: std::net::SocketAddr) -> RpcClient {
    RpcClient::new(
        "peer",
        addr,
        MAX_BODY,
        Duration::from_secs(5),
        Cancel::new(),
        None,
        ChannelProtocol::H2Grpc,
    )
}

fn push<'a>(key: &'a [u8], value: &'a [u8]) -> PushRequest<'a> {
    PushRequest {
        sender_rank: 1,
        key,
        value,
        ..PushRequest::default()
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

#[test]
fn our_header_blocks_decode_as_written() {
    let long = "x".repeat(300);
    let fields = [
        (":path", PUSH_PATH),
        ("content-type", "application/grpc"),
        ("long", long.as_str()),
        ("empty", ""),
    ];
    let block = encode_headers(&fields);
    let got = loona_hpack::Decoder::new().decode(&block).unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = fields
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn the_grpc_prefix_round_trips_and_bad_prefixes_are_refused() {
    let m = grpc_message(|o| o.extend_from_slice(b"hello"), 5);
    assert_eq!(m, b"\x00\x00\x00\x00\x05hello");
    assert_eq!(grpc_unwrap(&m).unwrap(), b"hello");
    assert!(grpc_unwrap(b"\x00\x00\x00").is_err());
    assert!(grpc_unwrap(b"\x01\x00\x00\x00\x01a").is_err());
    assert!(grpc_unwrap(b"\x00\x00\x00\x00\x02a").is_err());
    assert!(grpc_unwrap(b"\x00\x00\x00\x00\x00extra").is_err());
}

/// Values from empty to 3 MB: the large ones span hundreds of DATA frames and pass the
/// default 64 KiB windows; several requests are in flight at once; a refusal comes back typed.
#[test]
fn our_client_and_server_carry_pushes_over_h2() {
    let (server, rec) = server();
    let client = h2_client(server.local_addr());
    let sizes = [0usize, 1, 16_384, 16_385, 70_000, 1_000_000];
    let values: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
        .collect();
    let mut ids = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let key = format!("k{i}");
        ids.push(
            client
                .start(&push(key.as_bytes(), v), Duration::from_secs(2))
                .unwrap(),
        );
    }
    for id in ids {
        assert_eq!(client.wait(id, Duration::from_secs(10)).unwrap(), Ok(()));
    }
    let got = lock(&rec.pushes).clone();
    assert_eq!(got.len(), values.len());
    for (i, v) in values.iter().enumerate() {
        assert_eq!(got[i], (format!("k{i}").into_bytes(), v.clone()));
    }
    let r = client
        .call(
            &push(b"refuse", b""),
            Duration::from_secs(2),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(
        r,
        Err(Failure::Refused {
            code: 42,
            message: "no".into()
        })
    );
    // Many small requests: the connection window is given back as it is used.
    for i in 0..2000 {
        let v = pattern(100, i as u8);
        let r = client
            .call(
                &push(b"many", &v),
                Duration::from_secs(2),
                Duration::from_secs(5),
            )
            .unwrap();
        assert_eq!(r, Ok(()));
    }
    assert!(lock(&rec.bad).is_empty(), "{:?}", lock(&rec.bad));
    let (sent, received) = client.traffic();
    assert!(
        sent > 1_100_000 && received > 2000 * 20,
        "{sent} {received}"
    );
}

/// Reads one frame from a test socket (any size).
fn next_frame(s: &mut TcpStream) -> RawFrame {
    match read_frame(s, 1 << 24) {
        Ok(Some(f)) => f,
        _ => panic!("no frame"),
    }
}

/// Answers stream `stream` with an OK Push response.
fn answer_ok(s: &mut TcpStream, stream: u32) {
    let mut out = Vec::new();
    put_frame(
        &mut out,
        HEADERS,
        END_HEADERS,
        stream,
        &encode_headers(&[(":status", "200")]),
    );
    let resp = grpc_message(|o| PushResponse::default().encode(o), 8);
    put_frame(&mut out, DATA, 0, stream, &resp);
    put_frame(
        &mut out,
        HEADERS,
        END_HEADERS | END_STREAM,
        stream,
        &encode_headers(&[("grpc-status", "0")]),
    );
    s.write_all(&out).unwrap();
}

/// A server that allows 1000 bytes per stream, then opens a stream 5000 bytes at a time as
/// its DATA arrives: our client must wait for each update, never send past a window, and the
/// body must arrive whole. (A first small request lets our client see the SETTINGS before
/// the large one: before them it may use the default 65535.)
#[test]
fn our_client_waits_for_the_peers_windows() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut preface = [0u8; 24];
        s.read_exact(&mut preface).unwrap();
        assert_eq!(&preface, PREFACE);
        let mut out = Vec::new();
        put_settings(&mut out, &[(SETTINGS_INITIAL_WINDOW_SIZE, 1000)]);
        s.write_all(&out).unwrap();
        let mut conn_room = DEFAULT_WINDOW;
        let mut bodies: HashMap<u32, (i64, Vec<u8>)> = HashMap::new();
        let mut done = Vec::new();
        let mut updates = 0;
        while done.len() < 2 {
            let f = next_frame(&mut s);
            match f.kind {
                HEADERS => {
                    bodies.insert(f.stream, (1000, Vec::new()));
                }
                DATA => {
                    let n = f.payload.len() as i64;
                    let first = done.is_empty();
                    let (room, body) = bodies.get_mut(&f.stream).unwrap();
                    conn_room -= n;
                    *room -= n;
                    assert!(conn_room >= 0, "sent past the connection window");
                    assert!(first || *room >= 0, "sent past the stream window");
                    body.extend_from_slice(&f.payload);
                    if f.flags & END_STREAM != 0 {
                        answer_ok(&mut s, f.stream);
                        done.push(f.stream);
                    } else if *room <= 0 {
                        let mut wu = Vec::new();
                        put_window_update(&mut wu, f.stream, 5000);
                        put_window_update(&mut wu, 0, 5000);
                        *room += 5000;
                        conn_room += 5000;
                        updates += 1;
                        std::thread::sleep(Duration::from_millis(2));
                        s.write_all(&wu).unwrap();
                    }
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        (bodies.remove(&done[1]).unwrap().1, updates)
    });
    let client = h2_client(addr);
    let r = client
        .call(
            &push(b"first", b"x"),
            Duration::from_secs(2),
            Duration::from_secs(20),
        )
        .unwrap();
    assert_eq!(r, Ok(()));
    let value = pattern(40_000, 9);
    let r = client
        .call(
            &push(b"k", &value),
            Duration::from_secs(2),
            Duration::from_secs(20),
        )
        .unwrap();
    assert_eq!(r, Ok(()));
    let (body, updates) = peer.join().unwrap();
    assert!(updates >= 7, "{updates} window updates");
    let msg = grpc_unwrap(&body).unwrap();
    let req = decode_push_request(msg).unwrap();
    assert_eq!(req.value, value.as_slice());
}

/// A valid client conversation: preface, SETTINGS, one request.
fn valid_request() -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    put_settings(&mut out, &[(SETTINGS_ENABLE_PUSH, 0)]);
    let block = encode_headers(&[
        (":method", "POST"),
        (":path", PUSH_PATH),
        ("content-type", "application/grpc"),
    ]);
    put_frame(&mut out, HEADERS, END_HEADERS, 1, &block);
    let mut req = Vec::new();
    push(b"key", b"value").encode(&mut req);
    let body = grpc_message(|o| o.extend_from_slice(&req), req.len());
    put_frame(&mut out, DATA, END_STREAM, 1, &body);
    out
}

/// Runs the server loop on `input` (as if read from a socket) and returns what it wrote.
fn serve_bytes(input: &[u8], rec: &Recorder) -> Vec<u8> {
    struct Pipe<'a> {
        input: io::Cursor<&'a [u8]>,
        output: Vec<u8>,
    }
    impl Read for Pipe<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }
    impl Write for Pipe<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut p = Pipe {
        input: io::Cursor::new(input),
        output: Vec::new(),
    };
    serve(&mut p, 4096, rec);
    p.output
}

/// The frames in `bytes`.
fn frames(bytes: &[u8]) -> Vec<RawFrame> {
    let mut c = io::Cursor::new(bytes);
    let mut v = Vec::new();
    while let Ok(Some(f)) = read_frame(&mut c, 1 << 24) {
        v.push(f);
    }
    v
}

#[test]
fn the_server_answers_a_valid_request_and_refuses_other_methods() {
    let rec = Recorder::default();
    let out = serve_bytes(&valid_request(), &rec);
    assert_eq!(
        lock(&rec.pushes).as_slice(),
        &[(b"key".to_vec(), b"value".to_vec())]
    );
    let fs = frames(&out);
    let data: Vec<&RawFrame> = fs
        .iter()
        .filter(|f| f.kind == DATA && f.stream == 1)
        .collect();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0].payload, b"\x00\x00\x00\x00\x02\x0a\x00");
    let mut dec = loona_hpack::Decoder::new();
    let trailers: Vec<_> = fs
        .iter()
        .filter(|f| f.kind == HEADERS && f.flags & END_STREAM != 0)
        .map(|f| dec.decode(&f.payload).unwrap())
        .collect();
    assert_eq!(trailers.len(), 1);

    // Another path: a trailers-only UNIMPLEMENTED, nothing dispatched.
    let rec = Recorder::default();
    let mut input = PREFACE.to_vec();
    let block = encode_headers(&[
        (":method", "POST"),
        (":path", "/other.Service/Call"),
        ("content-type", "application/grpc"),
    ]);
    put_frame(&mut input, HEADERS, END_HEADERS | END_STREAM, 1, &block);
    let out = serve_bytes(&input, &rec);
    assert!(lock(&rec.pushes).is_empty());
    let f = frames(&out)
        .into_iter()
        .find(|f| f.kind == HEADERS)
        .unwrap();
    let fields = loona_hpack::Decoder::new().decode(&f.payload).unwrap();
    assert_eq!(field(&fields, "grpc-status"), Some(&b"12"[..]));
}

#[test]
fn the_server_reports_peers_that_break_http2() {
    let cases: Vec<(&str, Vec<u8>)> = {
        let mut v = Vec::new();
        let mut big = PREFACE.to_vec();
        put_frame(&mut big, DATA, 0, 1, &vec![0u8; DEFAULT_MAX_FRAME + 1]);
        v.push(("frame over the maximum", big));
        let mut hp = PREFACE.to_vec();
        put_frame(&mut hp, HEADERS, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff]);
        v.push(("bad HPACK", hp));
        let mut even = PREFACE.to_vec();
        put_frame(&mut even, HEADERS, END_HEADERS, 2, &encode_headers(&[]));
        v.push(("even stream", even));
        let mut body = PREFACE.to_vec();
        let block = encode_headers(&[(":method", "POST"), (":path", PUSH_PATH)]);
        put_frame(&mut body, HEADERS, END_HEADERS, 1, &block);
        for _ in 0..2 {
            put_frame(&mut body, DATA, 0, 1, &[0u8; 4000]);
        }
        v.push(("body over max_body", body));
        let mut wu = PREFACE.to_vec();
        put_window_update(&mut wu, 0, 0x7fff_ffff);
        v.push(("window overflow", wu));
        v.push((
            "not a preface",
            b"PRI * HTTP/1.1\r\n\r\nxxxxxxxxxxxx".to_vec(),
        ));
        v
    };
    for (what, input) in cases {
        let rec = Recorder::default();
        let out = serve_bytes(&input, &rec);
        assert_eq!(lock(&rec.bad).len(), 1, "{what}: {:?}", lock(&rec.bad));
        if what != "not a preface" {
            assert!(
                frames(&out).iter().any(|f| f.kind == GOAWAY),
                "{what}: no GOAWAY"
            );
        }
    }
}

/// Random, truncated and mutated conversations: the server loop never panics and never
/// dispatches more than the valid requests it was given.
#[test]
fn hostile_bytes_at_the_server_never_panic() {
    let mut rng = Rng(0x5eed_0002);
    let valid = valid_request();
    for i in 0..3000 {
        let mut input = match i % 3 {
            0 => {
                let mut v = PREFACE.to_vec();
                let n = (rng.next() % 400) as usize;
                v.extend(rng.bytes(n));
                v
            }
            1 => valid[..(rng.next() as usize) % valid.len()].to_vec(),
            _ => valid.clone(),
        };
        if i % 3 == 2 {
            for _ in 0..1 + rng.next() % 4 {
                let at = PREFACE.len() + (rng.next() as usize) % (input.len() - PREFACE.len());
                input[at] = rng.next() as u8;
            }
        }
        let rec = Recorder::default();
        let _ = serve_bytes(&input, &rec);
        assert!(lock(&rec.pushes).len() <= 1);
    }
}

/// A server that answers with garbage after the preface: the request fails with a typed
/// failure, not a hang or a panic.
#[test]
fn a_server_sending_garbage_fails_the_request() {
    let mut rng = Rng(0x5eed_0003);
    for round in 0..20 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let junk = if round == 0 {
            let mut v = Vec::new();
            put_frame(&mut v, HEADERS, END_HEADERS | END_STREAM, 1, &[0xff; 8]);
            v
        } else {
            rng.bytes(64 + round * 13)
        };
        let peer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut preface = [0u8; 24];
            let _ = s.read_exact(&mut preface);
            let _ = s.write_all(&junk);
            std::thread::sleep(Duration::from_millis(300));
        });
        let client = h2_client(addr);
        let r = client
            .call(
                &push(b"k", b"v"),
                Duration::from_secs(2),
                Duration::from_secs(5),
            )
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(r.is_err(), "round {round}: garbage was taken for an answer");
        peer.join().unwrap();
    }
}
