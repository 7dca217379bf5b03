"""Drop-in stand-ins for the two SecretFlow modules a PSI script imports, so a script written for
SecretFlow runs on blindjoin with its two imports changed and nothing else::

    import spu                        ->  from blindjoin.compat import spu
    import secretflow as sf           ->  import blindjoin.compat.secretflow as sf

Only what PSI scripts use is here: ``sf.init`` / ``sf.shutdown`` / ``sf.PYU`` / ``sf.SPU`` /
``sf.reveal`` and the ``spu.spu_pb2`` constants a ``cluster_def`` names. There is no Ray: every
party the script's per-party dicts name runs in this process (one machine), or only
``$BLINDJOIN_SELF_PARTY`` (one process per machine). See ``python/README.md``.
"""
