"""``from blindjoin.compat import spu``: the ``spu.spu_pb2`` names a SecretFlow PSI script puts in
its ``cluster_def["runtime_config"]`` (the MPC protocol and field of SecretFlow's SPU device).
blindjoin's PSI does not run on SPU's MPC runtime, so these are accepted and ignored; they exist
so the script's ``cluster_def`` builds unchanged (see :mod:`blindjoin.compat`).
"""

from types import SimpleNamespace

__all__ = ["spu_pb2"]

#: SecretFlow's ``spu.spu_pb2`` enum values (protocol kinds and fields), by name.
spu_pb2 = SimpleNamespace(
    PROT_INVALID=0,
    REF2K=1,
    SEMI2K=2,
    ABY3=3,
    CHEETAH=4,
    SECURENN=5,
    FT_INVALID=0,
    FM32=1,
    FM64=2,
    FM128=3,
)
