"""One unmodified SecretFlow party (PyPI spu==0.9.5, `spu.psi.psi_execute`, PSI v2) for the
interop tests in crates/cli/tests/e2e/secretflow.rs: it runs the settings it is given against
whichever party listens at the peer port (a blindjoin party, or a second copy of this script for
the SecretFlow-to-SecretFlow reference), prints its report as one JSON line, "PEER OK" and exits
0, or exits non-zero with SecretFlow's error.

usage: psi_peer.py --rank R --ports P0,P1 --input CSV --output CSV --keys id[,k2]
                   [--curve CURVE_25519] [--broadcast 0|1] [--join inner|left|right|full|difference]
                   [--left-rank 0] [--receiver-rank 0] [--unique 0|1] [--batch 4096]
                   [--bucket 1048576] [--die-after S] [--protocol PROTOCOL_ECDH]
"""

import argparse
import json
import os
import sys
import threading
import time

JOINS = {
    "inner": "JOIN_TYPE_INNER_JOIN",
    "left": "JOIN_TYPE_LEFT_JOIN",
    "right": "JOIN_TYPE_RIGHT_JOIN",
    "full": "JOIN_TYPE_FULL_JOIN",
    "difference": "JOIN_TYPE_DIFFERENCE",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--ports", required=True)
    ap.add_argument("--id", default="root")
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--keys", default="id")
    ap.add_argument("--protocol", default="PROTOCOL_ECDH")
    ap.add_argument("--curve", default="CURVE_25519")
    ap.add_argument("--broadcast", type=int, default=1)
    ap.add_argument("--join", default="inner", choices=sorted(JOINS))
    ap.add_argument("--left-rank", type=int, default=0)
    ap.add_argument("--receiver-rank", type=int, default=0)
    ap.add_argument("--unique", type=int, default=0)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--bucket", type=int, default=1 << 20)
    ap.add_argument("--disable-alignment", type=int, default=0)
    ap.add_argument("--die-after", type=float, default=0.0)
    ap.add_argument("--recv-timeout-ms", type=int, default=60000)
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
    lctx = link.create_brpc(desc, a.rank)
    if a.die_after > 0:
        def die():
            time.sleep(a.die_after)
            print("PEER dying", flush=True)
            os._exit(9)
        threading.Thread(target=die, daemon=True).start()

    conf = psi.PsiExecuteConfig(
        protocol_conf=psi.PsiProtocolConfig(
            protocol=psi.parse_protocol(a.protocol),
            receiver_rank=a.receiver_rank,
            bucket_size=a.bucket,
            broadcast_result=bool(a.broadcast),
            ecdh_params=psi.EcdhParams(curve=psi.parse_curve_type(a.curve), batch_size=a.batch),
        ),
        input_params=psi.InputParams(
            type=psi.SourceType.SOURCE_TYPE_FILE_CSV,
            path=a.input,
            selected_keys=a.keys.split(","),
            keys_unique=bool(a.unique),
        ),
        output_params=psi.OutputParams(
            type=psi.SourceType.SOURCE_TYPE_FILE_CSV,
            path=a.output,
            disable_alignment=bool(a.disable_alignment),
        ),
        join_conf=psi.ResultJoinConfig(
            type=psi.parse_join_type(JOINS[a.join]), left_side_rank=a.left_rank
        ),
    )
    try:
        rep = psi.psi_execute(conf, lctx)
    except Exception as e:  # SecretFlow's own error, for the test's message
        print(f"PEER ERROR {type(e).__name__}: {e}", flush=True)
        lctx.stop_link()
        sys.exit(3)
    print(json.dumps({k: getattr(rep, k) for k in dir(rep) if k.endswith("count")}), flush=True)
    lctx.stop_link()
    print("PEER OK", flush=True)


if __name__ == "__main__":
    main()
