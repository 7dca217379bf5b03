"""One unmodified SecretFlow party of SecretFlow's unbalanced ECDH-OPRF PSI (PyPI spu==0.9.5,
`spu.psi.ub_psi_execute`) for the interop tests in crates/data/tests/secretflow_ub_wheel.rs: it
runs the mode and role it is given against whichever party listens at the
peer port (a blindjoin party, or a second copy of this script), prints its report as one JSON
line, "PEER OK" and exits 0, or exits non-zero with SecretFlow's error.

usage: ub_peer.py --rank R --ports P0,P1 --mode MODE_FULL --role server|client
                  --input CSV --output CSV --cache DIR [--keys id] [--key-file PATH]
                  [--server-result 0|1] [--client-result 0|1]
                  [--join inner|left|right|full|difference] [--left-rank 0|1]
                  [--tls-cert PEM --tls-key PEM --tls-ca PEM] [--die-after S]

With --tls-cert the wheel runs with desc.enable_ssl = True, that certificate and key on both its
brpc server and client, verifying the peer against --tls-ca (verify_depth 1).
"""

import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--ports", required=True)
    ap.add_argument("--id", default="root")
    ap.add_argument("--mode", required=True)
    ap.add_argument("--role", required=True, choices=["server", "client"])
    ap.add_argument("--input", default="")
    ap.add_argument("--output", default="")
    ap.add_argument("--cache", required=True)
    ap.add_argument("--keys", default="id")
    ap.add_argument("--key-file", default="")
    ap.add_argument("--server-result", type=int, default=0)
    ap.add_argument("--client-result", type=int, default=1)
    ap.add_argument("--recv-timeout-ms", type=int, default=60000)
    ap.add_argument("--join", default="inner")
    ap.add_argument("--left-rank", type=int, default=0)
    ap.add_argument("--die-after", type=float, default=0.0)
    ap.add_argument("--tls-cert", default="")
    ap.add_argument("--tls-key", default="")
    ap.add_argument("--tls-ca", default="")
    # brpc_channel_protocol: how the wheel frames its requests (baidu_std or h2:grpc).
    ap.add_argument("--channel", default="")
    a = ap.parse_args()

    import spu.psi as psi
    from spu import link

    desc = link.Desc()
    desc.id = a.id
    for i, port in enumerate(a.ports.split(",")):
        desc.add_party(f"party{i}", f"127.0.0.1:{port}")
    desc.recv_timeout_ms = a.recv_timeout_ms
    desc.connect_retry_times = 60
    desc.connect_retry_interval_ms = 1000
    if a.channel:
        desc.brpc_channel_protocol = a.channel
    if a.tls_cert:
        desc.enable_ssl = True
        for opts in (desc.server_ssl_opts, desc.client_ssl_opts):
            opts.cert.certificate_path = a.tls_cert
            opts.cert.private_key_path = a.tls_key
            opts.verify.ca_file_path = a.tls_ca
            opts.verify.verify_depth = 1
    lctx = link.create_brpc(desc, a.rank)

    role = "ROLE_SERVER" if a.role == "server" else "ROLE_CLIENT"
    conf = psi.UbPsiExecuteConfig(
        mode=psi.parse_ub_psi_mode(a.mode),
        role=psi.parse_ub_psi_role(role),
        server_receive_result=bool(a.server_result),
        client_receive_result=bool(a.client_result),
        cache_path=a.cache,
        input_params=psi.InputParams(
            type=psi.SourceType.SOURCE_TYPE_FILE_CSV,
            path=a.input,
            selected_keys=a.keys.split(","),
        ),
        output_params=psi.OutputParams(
            type=psi.SourceType.SOURCE_TYPE_FILE_CSV,
            path=a.output,
        ),
        server_params=psi.UbPsiServerParams(secret_key_path=a.key_file),
        join_conf=psi.ResultJoinConfig(
            type=psi.parse_join_type(f"JOIN_TYPE_{a.join.upper()}_JOIN"
                                     if a.join != "difference" else "JOIN_TYPE_DIFFERENCE"),
            left_side_rank=a.left_rank,
        ),
    )
    if a.die_after > 0:
        import os
        import threading
        import time

        def die():
            time.sleep(a.die_after)
            print("PEER dying", flush=True)
            os._exit(9)

        threading.Thread(target=die, daemon=True).start()
    try:
        rep = psi.ub_psi_execute(conf, lctx)
    except Exception as e:  # SecretFlow's own error, for the test's message
        print(f"PEER ERROR {type(e).__name__}: {e}", flush=True)
        lctx.stop_link()
        sys.exit(3)
    print(json.dumps({k: getattr(rep, k) for k in dir(rep) if k.endswith("count")}), flush=True)
    lctx.stop_link()
    print("PEER OK", flush=True)


if __name__ == "__main__":
    main()
