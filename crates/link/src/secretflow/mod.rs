//! # SecretFlow's link, spoken by blindjoin
//!
//! A party that talks to an unmodified SecretFlow party (PyPI `spu==0.9.5`: yacl link over brpc)
//! on the wire, so SecretFlow's PSI protocols can be run against it. Only the transport is
//! here; the PSI sessions on top are in `blindjoin-data` (`secretflow_wire`, `secretflow_ub`).
//!
//! Layers, bottom up, each in its own module and each mirroring one part of yacl@f724366 /
//! brpc 1.11 (the full wire description with byte captures is the research brief
//! `secretflow_wire.md` §1):
//!
//! 1. [`proto`] — protobuf for brpc's `RpcMeta` (`src/brpc/policy/baidu_rpc_meta.proto`) and
//!    interconnection's `PushRequest` / `ChunkInfo` / `PushResponse`
//!    (`interconnection/link/transport.proto`). Every length is checked against what is left.
//! 2. [`frame`] — baidu_std framing: `PRPC`, `body_size` u32 BE, `meta_size` u32 BE, meta,
//!    payload (`src/brpc/policy/baidu_rpc_protocol.cpp`). Bodies are bounded by
//!    [`Options::max_push_body`] before they are read.
//! 3. `client` / `server` — each party runs a server on its own address and dials the peer's:
//!    two TCP connections, each carrying one direction's requests and the other's responses
//!    (`yacl/link/transport/brpc_link.cc`). Requests are pipelined and matched to responses by
//!    correlation id; the server answers every Push as soon as it is stored.
//! 4. `channel` — yacl's channel (`yacl/link/transport/channel.cc`): `<key>\x01\x02<seq>`
//!    keys, seq from 1, duplicate seqs ignored, an ACK when the application consumes a message,
//!    chunking out and reassembly in (bounded by [`Options::max_message_len`] and
//!    [`Options::max_buffered_bytes`]), FIN and the close sequence.
//! 5. [`Context`] — yacl's `Context` and algorithms (`yacl/link/context.cc`,
//!    `yacl/link/algorithm/{allgather,barrier,broadcast}.cc`): P2P and collective keys, spawned
//!    sub-contexts, the connect step, and psi's `SyncWait` (`psi/utils/sync.h`@242a8fa).
//!
//! [`Session::start`] binds, builds the layers and runs the connect step; [`Session::stop`] runs
//! yacl's close sequence (the wheel's `stop_link`), without which a wheel peer waits forever.
//!
//! Both parties may start in either order: the connect message is retried until
//! [`Options::connect_timeout`]. A peer that dies is reported as [`LinkError::PeerClosed`] within
//! [`PEER_GONE_GRACE`] of its connections closing (or [`LinkError::RecvTimeout`] if it
//! hangs with them open); a peer that breaks the protocol as [`LinkError::BadFrame`].
//!
//! **h2:grpc** (yacl `brpc_channel_protocol: "h2:grpc"`, [`ChannelProtocol`]): the `h2` module
//! replaces layer 2 for the requests this side sends — HTTP/2 frames (RFC 9113), one stream per
//! Push, HPACK header blocks (RFC 7541; we encode literals without Huffman, `loona-hpack`
//! decodes), gRPC's 5-byte length prefix, and flow control both ways (we wait on the peer's
//! windows and replenish the ones we give). The server tells the two framings apart by the
//! first four bytes of each connection (`PRI ` is the HTTP/2 preface), so it accepts either.
//! Frames, header blocks, streams and windows are all bounded (see the constants in `h2`); a
//! peer that breaks HTTP/2 gets GOAWAY and is reported as [`LinkError::BadFrame`].
//!
//! **TLS** (yacl `enable_ssl`): [`Options::tls`] ([`TlsOptions`], yacl's `server_ssl_opts` and
//! `client_ssl_opts`) puts both connections inside TLS (rustls): the server handshakes each
//! accepted connection on its own thread, the client each connection it dials (its writer and
//! its response reader share the rustls state). The frames inside are unchanged. What brpc does
//! and how this side matches it is in the `tls` module's doc: `verify_depth` 0 is no
//! verification, no name is checked, no SNI, no ALPN. A refused certificate, on either side, is
//! a TLS [`LinkError`] at once, not a connect timeout.
//!
//! ```no_run
//! use blindjoin_link::Cancel;
//! use blindjoin_link::secretflow::{Options, Session};
//! let opts = Options::new("root", 0, "127.0.0.1:61001", "127.0.0.1:61002");
//! let (session, mut ctx) = Session::start(&opts, &Cancel::new())?;
//! ctx.send(b"hello")?;
//! let both = ctx.all_gather(b"mine")?;
//! session.stop()?;
//! # Ok::<(), blindjoin_link::LinkError>(())
//! ```

mod channel;
mod chunks;
mod client;
mod context;
pub mod frame;
pub(crate) mod h2;
pub mod proto;
mod seqs;
mod server;
mod tls;

pub use channel::PEER_GONE_GRACE;
pub use context::{Context, SYNC_FINISHED, SYNC_UNFINISHED, SYNC_WAIT_PERIOD};
pub use tls::{SslOptions, TlsOptions};

use crate::{Cancel, LinkError};
use channel::{Channel, Limits};
use client::RpcClient;
use server::{PushHandler, RpcServer};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// Room for the key and protobuf overhead of one Push above its value.
const PUSH_OVERHEAD: usize = 64 * 1024;

/// `link_config.brpc_channel_protocol`: how this party's requests are framed. This party's
/// server accepts both whatever this says, as a brpc server does on one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelProtocol {
    /// `baidu_std`, brpc's (and the wheel's) default.
    #[default]
    BaiduStd,
    /// `h2:grpc`: HTTP/2 with gRPC framing (the `h2` module). As yacl does, chunks are
    /// `http_max_payload_size` − 4096 bytes.
    H2Grpc,
}

impl ChannelProtocol {
    /// The protocol a `brpc_channel_protocol` value names.
    ///
    /// # Errors
    /// A name this link does not speak, with what to use instead.
    pub fn parse(name: &str) -> Result<ChannelProtocol, String> {
        match name {
            "" | "baidu_std" => Ok(ChannelProtocol::BaiduStd),
            "h2:grpc" => Ok(ChannelProtocol::H2Grpc),
            "http" => Err(concat!(
                "\"http\" is not supported: SecretFlow 0.9.5's own channel fails to start ",
                "with it (brpc error -1); use \"baidu_std\" (the default) or \"h2:grpc\""
            )
            .into()),
            "h2" => Err(concat!(
                "\"h2\" (HTTP/2 without gRPC framing) is not supported; use \"h2:grpc\" ",
                "or \"baidu_std\" (the default)"
            )
            .into()),
            other => Err(format!(
                "{other:?} is not a brpc channel protocol SecretFlow's link uses; use \"baidu_std\" (the default) or \"h2:grpc\""
            )),
        }
    }

    /// The chunk size for values longer than `http_max_payload_size` (yacl
    /// `InterconnectionLink::MakeOptions` keeps 4 KiB for headers under h2).
    fn chunk(self, http_max_payload_size: usize) -> usize {
        match self {
            ChannelProtocol::BaiduStd => http_max_payload_size,
            ChannelProtocol::H2Grpc => http_max_payload_size - H2_CHUNK_RESERVE,
        }
    }
}

/// What yacl keeps of `http_max_payload_size` for the headers of an h2 Push.
const H2_CHUNK_RESERVE: usize = 4096;

/// How this party joins a SecretFlow link. Field names follow yacl's `ContextDesc`.
#[derive(Debug, Clone)]
pub struct Options {
    /// `desc.id`: the root context id, prefix of every key; both parties must agree (the
    /// wheel's default is `"root"`).
    pub id: String,
    /// This party's rank, 0 or 1 (its index in the wheel's `desc.parties`).
    pub self_rank: usize,
    /// Where this party's server listens (`parties[self_rank].host`).
    pub self_addr: String,
    /// The peer's server (`parties[peer].host`).
    pub peer_addr: String,
    /// The peer's name, for error messages only (never on the wire).
    pub peer_name: String,
    /// `http_max_payload_size`: longer values are chunked into slices of this size. Default
    /// 1 MiB, the wheel's.
    pub http_max_payload_size: usize,
    /// `chunk_parallel_send_size`: chunks in flight at once. Default 8, the wheel's.
    pub chunk_parallel_send_size: usize,
    /// Deadline of the connect step (the peer may start this long after us). Default 60 s:
    /// a wheel peer gives up after `connect_retry_times` × (`connect_retry_interval_ms` +
    /// attempt timeouts), about 10 × (1 + 2..12) s.
    pub connect_timeout: Duration,
    /// `recv_timeout_ms`: how long a receive waits. Default 30 s, the wheel's.
    pub recv_timeout: Duration,
    /// `http_timeout_ms`: how long one Push waits for its response. Default 20 s, the wheel's.
    pub rpc_timeout: Duration,
    /// Bound on [`Session::stop`]'s close sequence. Default 30 s.
    pub close_timeout: Duration,
    /// Largest baidu_std body accepted from the peer. Default 32 MiB: a wheel's Push body is
    /// its `http_max_payload_size` (1 MiB by default) plus the key, so this admits peers
    /// configured with up to ~32 MiB chunks while bounding one read.
    pub max_push_body: usize,
    /// Largest (reassembled) message accepted. Default 256 MiB: an ECDH batch is ~2 MiB and
    /// psi's largest messages (UB cache batches) are far below this.
    pub max_message_len: usize,
    /// Most bytes of received messages held at once (unread or being reassembled). Default
    /// 1 GiB: the memory a hostile or runaway peer can make this party hold.
    pub max_buffered_bytes: usize,
    /// `enable_ssl`: `Some` puts both connections (this party's server and its client to the
    /// peer's) inside TLS, with `server_ssl_opts` and `client_ssl_opts`. Default `None`
    /// (plaintext, the wheel's default). Both parties must agree: with TLS on, this party's
    /// server refuses plaintext peers (a brpc server would accept both on one port).
    pub tls: Option<TlsOptions>,
    /// `brpc_channel_protocol`: how this party's requests are framed. Default `baidu_std`.
    pub channel_protocol: ChannelProtocol,
}

impl Options {
    /// The wheel's defaults for everything but the id, rank and addresses.
    pub fn new(id: &str, self_rank: usize, self_addr: &str, peer_addr: &str) -> Options {
        Options {
            id: id.into(),
            self_rank,
            self_addr: self_addr.into(),
            peer_addr: peer_addr.into(),
            peer_name: format!("rank {}", 1 - self_rank.min(1)),
            http_max_payload_size: 1 << 20,
            chunk_parallel_send_size: 8,
            connect_timeout: Duration::from_secs(60),
            recv_timeout: Duration::from_secs(30),
            rpc_timeout: Duration::from_secs(20),
            close_timeout: Duration::from_secs(30),
            max_push_body: 32 << 20,
            max_message_len: 256 << 20,
            max_buffered_bytes: 1 << 30,
            tls: None,
            channel_protocol: ChannelProtocol::BaiduStd,
        }
    }

    /// Checks every field's range.
    ///
    /// # Errors
    /// [`LinkError::InvalidOption`] naming the field.
    pub fn validate(&self) -> Result<(), LinkError> {
        let bad = |field, reason: String| Err(LinkError::InvalidOption { field, reason });
        if self.self_rank > 1 {
            return bad("self_rank", format!("{} is not 0 or 1", self.self_rank));
        }
        if let Err(e) = channel::check_msg_key(&self.id) {
            return bad("id", e.to_string());
        }
        if self.http_max_payload_size == 0 {
            return bad("http_max_payload_size", "must be at least 1".into());
        }
        if self.channel_protocol == ChannelProtocol::H2Grpc
            && self.http_max_payload_size <= H2_CHUNK_RESERVE
        {
            return bad(
                "http_max_payload_size",
                format!(
                    "{} must exceed {H2_CHUNK_RESERVE} with brpc_channel_protocol h2:grpc (yacl keeps that much for headers)",
                    self.http_max_payload_size
                ),
            );
        }
        if self.max_push_body > u32::MAX as usize {
            return bad(
                "max_push_body",
                format!("at most {} (u32 body size)", u32::MAX),
            );
        }
        if self.http_max_payload_size.saturating_add(PUSH_OVERHEAD) > self.max_push_body {
            return bad(
                "http_max_payload_size",
                format!(
                    "{} plus {PUSH_OVERHEAD} bytes of overhead must fit max_push_body ({})",
                    self.http_max_payload_size, self.max_push_body
                ),
            );
        }
        if self.chunk_parallel_send_size == 0 {
            return bad("chunk_parallel_send_size", "must be at least 1".into());
        }
        if self.max_message_len > self.max_buffered_bytes {
            return bad(
                "max_message_len",
                format!(
                    "{} exceeds max_buffered_bytes ({})",
                    self.max_message_len, self.max_buffered_bytes
                ),
            );
        }
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        Ok(())
    }
}

fn resolve(party: &str, addr: &str) -> Result<SocketAddr, LinkError> {
    let bad = |reason: String| LinkError::BadAddress {
        party: party.into(),
        addr: addr.into(),
        reason,
    };
    addr.to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))
}

/// A running link: this party's server, its client to the peer, and the channel between.
pub struct Session {
    chan: Arc<Channel>,
    server: RpcServer,
    acks: Option<std::thread::JoinHandle<()>>,
    close_timeout: Duration,
}

impl Session {
    /// Listens on `self_addr`, then runs the connect step with the peer (which may start before
    /// or after this party, within `connect_timeout`). Returns the root context (id `opts.id`).
    ///
    /// # Errors
    /// An invalid option, a TLS file that cannot be used, the address cannot be bound, the peer
    /// did not connect in time, a TLS certificate refused (by either side), cancelled.
    pub fn start(opts: &Options, cancel: &Cancel) -> Result<(Session, Context), LinkError> {
        opts.validate()?;
        let self_addr = resolve("self", &opts.self_addr)?;
        let peer_addr = resolve(&opts.peer_name, &opts.peer_addr)?;
        let tls = match &opts.tls {
            Some(t) => Some(Arc::new(tls::Tls::load(t)?)),
            None => None,
        };
        let client = RpcClient::new(
            &opts.peer_name,
            peer_addr,
            opts.max_push_body,
            opts.rpc_timeout,
            cancel.clone(),
            tls.clone(),
            opts.channel_protocol,
        );
        let limits = Limits {
            chunk: opts.channel_protocol.chunk(opts.http_max_payload_size),
            parallel: opts.chunk_parallel_send_size,
            max_message: opts.max_message_len,
            max_buffered: opts.max_buffered_bytes,
            rpc_timeout: opts.rpc_timeout,
        };
        let self_rank = opts.self_rank as u64;
        let chan = Arc::new(Channel::new(
            self_rank,
            1 - self_rank,
            &opts.peer_name,
            client,
            limits,
            cancel.clone(),
        ));
        let handler: Arc<dyn PushHandler> = chan.clone();
        let server = RpcServer::start(self_addr, opts.max_push_body, handler, tls)?;
        let acker = Arc::clone(&chan);
        let acks = std::thread::Builder::new()
            .name("sf-link-acks".into())
            .spawn(move || acker.run_acks())
            .map_err(|e| LinkError::Io {
                peer: opts.peer_name.clone(),
                source: e,
            })?;
        let session = Session {
            chan: Arc::clone(&chan),
            server,
            acks: Some(acks),
            close_timeout: opts.close_timeout,
        };
        let ctx = Context::new(chan, opts.id.clone(), opts.recv_timeout);
        ctx.connect_to_mesh(opts.connect_timeout)?;
        Ok((session, ctx))
    }

    /// (bytes sent, bytes received) so far on both connections: TCP payload, baidu_std framing
    /// included (what SecretFlow's benchmark reads from the kernel's socket counters). With TLS
    /// these are the frames inside TLS; the records around them are not counted.
    pub fn traffic(&self) -> (u64, u64) {
        self.chan.client.traffic()
    }

    /// Where this party's server listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// yacl's close sequence (the wheel's `stop_link`): ACK unread messages, send FIN with our
    /// count, wait for the peer's FIN and all its messages, wait for the ACKs of ours, then close
    /// the port. Bounded by `close_timeout`.
    ///
    /// # Errors
    /// The peer went away or did not finish in time; cancelled.
    pub fn stop(mut self) -> Result<(), LinkError> {
        let r = self.chan.close(self.close_timeout);
        self.shut_down();
        r
    }

    fn shut_down(&mut self) {
        self.server.stop();
        self.chan.stop_acks();
        self.chan.client.shutdown();
        if let Some(h) = self.acks.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// A channel for the fuzz hooks: rank 0 of two, its peer (a closed port) never dialled, so
/// ACKs stay queued.
#[cfg(feature = "fuzzing")]
fn fuzz_channel(
    protocol: ChannelProtocol,
    max_body: usize,
    max_message: usize,
    max_buffered: usize,
) -> Channel {
    let cancel = Cancel::new();
    let addr = SocketAddr::from(([127, 0, 0, 1], 9));
    let client = RpcClient::new(
        "fuzz-peer",
        addr,
        max_body,
        Duration::from_secs(1),
        cancel.clone(),
        None,
        protocol,
    );
    let limits = Limits {
        chunk: 1024,
        parallel: 2,
        max_message,
        max_buffered,
        rpc_timeout: Duration::from_secs(1),
    };
    Channel::new(0, 1, "fuzz-peer", client, limits, cancel)
}

/// The fuzz hook behind [`crate::fuzzing::secretflow_pushes`]: a channel whose peer is never
/// dialled (ACKs stay queued), fed every Push in `stream`.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_pushes(
    stream: &[u8],
    max_body: usize,
    max_message: usize,
    max_buffered: usize,
) -> crate::fuzzing::SecretflowOutcome {
    let chan = fuzz_channel(
        ChannelProtocol::BaiduStd,
        max_body,
        max_message,
        max_buffered,
    );
    let mut out = crate::fuzzing::SecretflowOutcome::default();
    let mut r = stream;
    while let Ok(Some(f)) = frame::read_frame(&mut r, max_body) {
        out.frames += 1;
        if f.meta.request.is_some()
            && let Ok(req) = proto::decode_push_request(f.payload())
            && chan.on_push(&req).error_code == 0
        {
            out.accepted += 1;
        }
    }
    out.buffered = chan.buffered();
    // One push may take the channel past its bound before it refuses the next.
    assert!(out.buffered <= max_buffered + max_body);
    out
}

/// The fuzz hook behind [`crate::fuzzing::secretflow_h2`]: the HTTP/2 server loop over
/// `stream` (bytes as they came off the peer's connection, the preface included), each Push
/// handed to a yacl channel whose peer is never dialled.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_h2(
    stream: &[u8],
    max_body: usize,
    max_message: usize,
    max_buffered: usize,
) -> crate::fuzzing::SecretflowH2Outcome {
    use std::io::{Cursor, Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The peer's bytes in, ours counted.
    struct Pipe<'a> {
        input: Cursor<&'a [u8]>,
        written: usize,
    }
    impl Read for Pipe<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(buf)
        }
    }
    impl Write for Pipe<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.written += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    /// Counts the Pushes and their answers, then hands each to the channel.
    struct Counting {
        chan: Channel,
        pushes: AtomicUsize,
        accepted: AtomicUsize,
    }
    impl server::PushHandler for Counting {
        fn on_push(&self, req: &proto::PushRequest<'_>) -> proto::PushResponse {
            self.pushes.fetch_add(1, Ordering::Relaxed);
            let r = self.chan.on_push(req);
            if r.error_code == 0 {
                self.accepted.fetch_add(1, Ordering::Relaxed);
            }
            r
        }
        fn on_connection(&self, _open: bool) {}
        fn on_bad_frame(&self, _reason: String) {}
    }

    let handler = Counting {
        chan: fuzz_channel(ChannelProtocol::H2Grpc, max_body, max_message, max_buffered),
        pushes: AtomicUsize::new(0),
        accepted: AtomicUsize::new(0),
    };
    let mut pipe = Pipe {
        input: Cursor::new(stream),
        written: 0,
    };
    h2::serve(&mut pipe, max_body, &handler);
    let buffered = handler.chan.buffered();
    assert!(buffered <= max_buffered + max_body);
    crate::fuzzing::SecretflowH2Outcome {
        pushes: handler.pushes.into_inner(),
        accepted: handler.accepted.into_inner(),
        written: pipe.written,
    }
}

#[cfg(test)]
mod hostile;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
