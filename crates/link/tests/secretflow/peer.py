"""An unmodified SecretFlow party (PyPI spu==0.9.5, yacl link over brpc) for the interop test
crates/link/tests/secretflow_interop.rs. It runs a scripted exchange against the blindjoin party
and exits 0 after printing "PEER OK", or non-zero with the reason.

usage: peer.py --rank R --self-port P --peer-port Q --id ID [--mode full|die]
               [--payload BYTES] [--connection-type single|pooled]
               [--tls-cert PEM --tls-key PEM [--tls-ca PEM] [--verify-depth N]]

With --tls-cert the wheel runs with desc.enable_ssl = True and that certificate and key on both
its brpc server (server_ssl_opts) and its brpc client (client_ssl_opts), verifying the peer
against --tls-ca with --verify-depth (default 1; 0 turns verification off).
"""

import argparse
import os
import sys
import time

from spu import link


def pattern(n, seed):
    block = bytes((i + seed) % 256 for i in range(256))
    return (block * (n // 256 + 1))[:n]


def check(what, got, want):
    if got != want:
        g = got[:64] if isinstance(got, (bytes, str)) else got
        w = want[:64] if isinstance(want, (bytes, str)) else want
        print(f"PEER MISMATCH {what}: got {g!r} (len {len(got)}), want {w!r} (len {len(want)})",
              flush=True)
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--self-port", type=int, required=True)
    ap.add_argument("--peer-port", type=int, required=True)
    ap.add_argument("--id", default="root")
    ap.add_argument("--mode", default="full", choices=["full", "die"])
    # The wheel's http_max_payload_size (chunk size) and brpc_channel_connection_type.
    ap.add_argument("--payload", type=int, default=0)
    ap.add_argument("--connection-type", default="")
    # brpc_channel_protocol: how the wheel frames its requests (baidu_std or h2:grpc).
    ap.add_argument("--protocol", default="")
    ap.add_argument("--tls-cert", default="")
    ap.add_argument("--tls-key", default="")
    ap.add_argument("--tls-ca", default="")
    ap.add_argument("--verify-depth", type=int, default=1)
    a = ap.parse_args()

    me, peer = a.rank, 1 - a.rank
    ports = {me: a.self_port, peer: a.peer_port}
    desc = link.Desc()
    desc.id = a.id
    desc.recv_timeout_ms = 30000
    desc.connect_retry_times = 60
    desc.connect_retry_interval_ms = 1000
    if a.payload:
        desc.http_max_payload_size = a.payload
    if a.connection_type:
        desc.brpc_channel_connection_type = a.connection_type
    if a.protocol:
        desc.brpc_channel_protocol = a.protocol
    if a.tls_cert:
        desc.enable_ssl = True
        for opts in (desc.server_ssl_opts, desc.client_ssl_opts):
            opts.cert.certificate_path = a.tls_cert
            opts.cert.private_key_path = a.tls_key
            opts.verify.ca_file_path = a.tls_ca
            opts.verify.verify_depth = a.verify_depth
    for r in range(2):
        desc.add_party(f"party{r}", f"127.0.0.1:{ports[r]}")
    lctx = link.create_brpc(desc, me)
    print("PEER connected", flush=True)

    # P2P, small, both directions; rank 0 speaks first.
    if me == 0:
        lctx.send(peer, b"small from wheel")
        check("small", lctx.recv(peer), b"small from blindjoin")
    else:
        check("small", lctx.recv(peer), b"small from blindjoin")
        lctx.send(peer, b"small from wheel")

    if a.mode == "die":
        # A moment for brpc to write its response to the blindjoin side's last push (the
        # message is stored, and our recv returns, before that response is sent), then die
        # without stop_link while the blindjoin side waits for the next message.
        time.sleep(0.5)
        print("PEER dying mid-exchange", flush=True)
        os._exit(3)

    # > 1 MiB: chunked both ways (3 and 4 chunks of the default 1 MiB).
    lctx.send(peer, pattern(2_500_000, 1))
    check("big", lctx.recv(peer), pattern(3 * (1 << 20) + 5, 2))
    # Exactly 1 MiB is still one MONO push.
    lctx.send_async(peer, pattern(1 << 20, 3))
    check("1MiB", lctx.recv(peer), pattern(1 << 20, 4))

    # More messages than the throttle window (10): only prompt ACKs keep the wheel sending.
    for i in range(25):
        lctx.send_async(peer, f"burst {i}".encode())
    for i in range(25):
        check(f"burst {i}", lctx.recv(peer), f"reply {i}".encode())

    got = lctx.all_gather(f"gather from {me}")
    check("all_gather", list(got), ["gather from 0", "gather from 1"])
    lctx.barrier()
    check("broadcast", lctx.broadcast("bcast from 1" if me == 1 else "", 1), "bcast from 1")

    sub = lctx.spawn()  # <id>-0
    sub.send(peer, b"sub from wheel")
    check("sub recv", sub.recv(peer), b"sub from blindjoin")
    check("sub all_gather", list(sub.all_gather(f"s{me}")), ["s0", "s1"])

    # psi's SyncWait (psi/utils/sync.h): a spawned context (<id>-1) AllGathers the flag until
    # nobody is unfinished. This side's work is instant; the blindjoin side's takes > 5 s.
    sync = lctx.spawn()
    rounds = 0
    while True:
        rounds += 1
        flags = sync.all_gather("p_finished")
        if "p_unfinished" not in flags:
            break
    if rounds < 2:
        print(f"PEER MISMATCH sync_wait: {rounds} round(s), want >= 2", flush=True)
        sys.exit(1)

    # One message the blindjoin side never reads: its close must ACK it.
    lctx.send_async(peer, b"never read")
    check("last", lctx.recv(peer), b"last from blindjoin")
    lctx.stop_link()
    print(f"PEER OK sync_rounds={rounds}", flush=True)


if __name__ == "__main__":
    main()
