"""The benchmark whitepaper's three PSI scripts (balanced KKRT, unbalanced offline, unbalanced
online), run as scripts in their own Python process with their two SecretFlow imports changed
to blindjoin's stand-ins (``blindjoin.compat``) and, as the whitepaper tells its readers to,
their addresses and paths changed. Nothing else in them differs from the whitepaper: ``absl``'s
``app.run``, ``multiprocess.cpu_count()`` for ``omp_num_threads``, the ``cluster_def`` with
``spu.spu_pb2`` names, ``sf.init`` / ``sf.shutdown``, and the key written with ``open(path,
'wb')``. Both parties run in the script's process on 127.0.0.1 (SecretFlow's one-driver mode).

The unbalanced scripts give both parties one ``preprocess_path`` and keep it so here: the
client keeps the transferred cache there and blindjoin's server keeps its own beside it
(``<preprocess_path>.server``), so both parties share one folder as they would under SecretFlow,
whose server writes nothing there. The offline script writes its key file with the process
umask; the test runs it under ``umask 077``, as ``python/README.md`` tells users to, since
blindjoin refuses a key file others can read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest

from test_api import free_ports, read_csv, write_csv

pytest.importorskip("absl")
pytest.importorskip("multiprocess")

HEADER = '''
import os
import sys
import time
import logging
import multiprocess

from absl import app
from blindjoin.compat import spu
import blindjoin.compat.secretflow as sf
'''

CLUSTER = '''
cluster_def = {{
    'nodes': [
        {{'party': 'alice', 'address': '127.0.0.1:{a}', 'listen_address': '127.0.0.1:{a}'}},
        {{'party': 'bob', 'address': '127.0.0.1:{b}', 'listen_address': '127.0.0.1:{b}'}},
    ],
    'runtime_config': {{
        'protocol': spu.spu_pb2.SEMI2K,
        'field': spu.spu_pb2.FM128,
    }},
}}
'''

BALANCED = HEADER + '''
# init log
logging.basicConfig(stream=sys.stdout, level=logging.INFO)
''' + CLUSTER + '''

def main(_):
    sf.init(['alice','bob'], address='127.0.0.1:9394')
    alice = sf.PYU('alice')
    bob = sf.PYU('bob')
    carol = sf.PYU('carol')

    input_path = {{
        alice: '{d}/psi_1.csv',
        bob: '{d}/psi_2.csv',
    }}
    output_path = {{
        alice: '{d}/psi_output.csv',
        bob: '{d}/psi_output.csv',
    }}
    select_keys = {{
        alice: ['id'],
        bob: ['id'],
    }}
    spu = sf.SPU(cluster_def)

    start = time.time()

    reports = spu.psi_csv(
        key=select_keys,
        input_path=input_path,
        output_path=output_path,
        receiver='alice',  # if `broadcast_result=False`, only receiver can get output file.
        protocol='KKRT_PSI_2PC',	# psi protocol
        precheck_input=False,  # will cost ext time if set True
        sort=False,  # will cost ext time if set True
        broadcast_result=False,  # will cost ext time if set True
    )
    print(f"psi reports: {{reports}}")
    logging.info(f"cost time: {{time.time() - start}}")

    sf.shutdown()


if __name__ == '__main__':
    app.run(main)
'''

LINK = '''
link_desc = {{
    'recv_timeout_ms': 3600000,
}}
'''

OFFLINE = HEADER + '''
logging.basicConfig(stream=sys.stdout, level=logging.DEBUG)
''' + CLUSTER + LINK + '''
def main(_):
    sf.shutdown()
    sf.init(['alice','bob'],address='127.0.0.1:9394',log_to_driver=True,omp_num_threads=multiprocess.cpu_count())

    logging.basicConfig(stream=sys.stdout, level=logging.DEBUG)

    alice = sf.PYU('alice')
    bob = sf.PYU('bob')

    offline_input_path = {{
        alice: 'dummyalice.csv',
        bob: '{d}/unbalanced_server.csv',
    }}
    select_keys = {{
        alice: ['id'],
        bob: ['id'],
    }}
    spu = sf.SPU(cluster_def, link_desc)

    print("=====offline phase====")
    start = time.time()

    offline_output_path = {{
        alice: "{d}/unbalanced_client_out.csv",
        bob: "{d}/unbalanced_server_out.csv",
    }}

    offline_preprocess_path = "{d}/offline_psi0107.csv"
    secret_key = "000102030405060708090a0b0c0d0e0ff0e0d0c0b0a090807060504030201000"
    secret_key_path = "{d}/secret_key.bin"
    with open(secret_key_path, 'wb') as f:
            f.write(bytes.fromhex(secret_key))

    reports = spu.psi_csv(
        key=select_keys,
        input_path=offline_input_path,
        output_path=offline_output_path,
        receiver='alice',  # if `broadcast_result=False`, only receiver can get output file.
        protocol='ECDH_OPRF_UB_PSI_2PC_OFFLINE',        # psi protocol
        precheck_input=False,  # will cost ext time if set True
        sort=False,  # will cost ext time if set True
        broadcast_result=False,  # will cost ext time if set True
        bucket_size=10000000,
        curve_type="CURVE_FOURQ",
        preprocess_path=offline_preprocess_path,
        ecdh_secret_key_path=secret_key_path,
    )
    logging.info(f"offline psi reports: {{reports}}")
    logging.info(f"cost time: {{time.time() - start}}")

    sf.shutdown()


if __name__ == '__main__':
    app.run(main)
'''

ONLINE = HEADER + '''
logging.basicConfig(stream=sys.stdout, level=logging.DEBUG)
''' + CLUSTER + LINK + '''
def main(_):
    sf.shutdown()
    sf.init(['alice','bob'],address='127.0.0.1:9394',log_to_driver=True,omp_num_threads=multiprocess.cpu_count())

    logging.basicConfig(stream=sys.stdout, level=logging.DEBUG)

    alice = sf.PYU('alice')
    bob = sf.PYU('bob')

    online_input_path = {{
        alice: '{d}/unbalanced_client.csv',
        bob: 'dummy.bob.csv',
    }}
    output_path = {{
        alice: '{d}/unbalanced_online_out.csv',
        bob: '{d}/unbalanced_online_out.csv',
    }}
    select_keys = {{
        alice: ['id'],
        bob: ['id'],
    }}
    spu = sf.SPU(cluster_def, link_desc)

    offline_preprocess_path = "{d}/offline_psi0107.csv"
    secret_key_path = "{d}/secret_key.bin"

    print("=====online phase====")
    start = time.time()

    reports = spu.psi_csv(
        key=select_keys,
        input_path=online_input_path,
        output_path=output_path,
        receiver='alice',  # if `broadcast_result=False`, only receiver can get output file.
        protocol='ECDH_OPRF_UB_PSI_2PC_ONLINE', # psi protocol
        precheck_input=True,  # will cost ext time if set True
        sort=True,  # will cost ext time if set True
        broadcast_result=False,  # will cost ext time if set True
        bucket_size=100000000,
        curve_type="CURVE_FOURQ",
        preprocess_path=offline_preprocess_path,
        ecdh_secret_key_path=secret_key_path,
    )

    logging.info(f"online psi reports: {{reports}}")
    logging.info(f"cost time: {{time.time() - start}}")

    sf.shutdown()


if __name__ == '__main__':
    app.run(main)
'''


def table(path: Path, ids: range) -> Set[str]:
    keys = [f"id{i:06d}" for i in ids]
    write_csv(path, ["id", "v"], [[k, f"v{k}"] for k in keys])
    return set(keys)


def run_script(tmp_path: Path, name: str, text: str, umask: int = 0o022) -> None:
    a, b = free_ports(2)
    script = tmp_path / name
    script.write_text(text.format(a=a, b=b, d=tmp_path))

    def set_umask() -> None:
        os.umask(umask)

    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
        timeout=300, preexec_fn=set_umask,
    )
    assert done.returncode == 0, f"{name}:\n{done.stdout}\n{done.stderr}"


def ids(path: Path) -> List[str]:
    return [r["id"] for r in read_csv(path)]


def test_balanced_kkrt_script(tmp_path: Path) -> None:
    alice = table(tmp_path / "psi_1.csv", range(0, 3000))
    bob = table(tmp_path / "psi_2.csv", range(2000, 6000))
    run_script(tmp_path, "balanced.py", BALANCED)
    got = ids(tmp_path / "psi_output.csv")
    # Only the receiver writes (broadcast_result=False); sort=False keeps alice's input order.
    assert got == sorted(alice & bob)
    assert len(got) == 1000


def test_unbalanced_offline_then_online_scripts(tmp_path: Path) -> None:
    server = table(tmp_path / "unbalanced_server.csv", range(0, 20000))
    client = table(tmp_path / "unbalanced_client.csv", range(19900, 20100))
    run_script(tmp_path, "offline.py", OFFLINE, umask=0o077)
    assert (tmp_path / "offline_psi0107.csv").exists()  # the client's
    assert (tmp_path / "offline_psi0107.csv.server").exists()  # the server's, beside it
    run_script(tmp_path, "online.py", ONLINE)
    got = ids(tmp_path / "unbalanced_online_out.csv")
    assert got == sorted(server & client)  # sort=True
    assert len(got) == 100


def test_the_offline_script_under_the_default_umask_is_refused_naming_chmod(tmp_path: Path) -> None:
    table(tmp_path / "unbalanced_server.csv", range(0, 100))
    a, b = free_ports(2)
    script = tmp_path / "offline.py"
    script.write_text(OFFLINE.format(a=a, b=b, d=tmp_path))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
        timeout=300, preexec_fn=lambda: os.umask(0o022),
    )
    assert done.returncode != 0
    assert "chmod 600" in done.stdout + done.stderr
