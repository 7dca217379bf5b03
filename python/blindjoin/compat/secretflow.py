"""``import blindjoin.compat.secretflow as sf``: SecretFlow's driver functions that PSI scripts
call, over blindjoin (see :mod:`blindjoin.compat`).

``sf.init(parties, address=..., omp_num_threads=N, ...)`` records the parties and the thread count
(``omp_num_threads`` becomes blindjoin's ``threads``); the Ray address and Ray's own options are
accepted and unused: SecretFlow's scripts start Ray to drive their parties, while a blindjoin
party is a process of its own (partitioned runs on Ray are :mod:`blindjoin.ray`, which starts
or joins a Ray of its own). ``sf.SPU(cluster_def, link_desc)`` is
:class:`blindjoin.SPU`, whose ``psi_csv`` takes SecretFlow's arguments.
"""

import logging
from typing import Any, Dict, List, Optional, Sequence

import blindjoin
from blindjoin import PYU

__all__ = ["init", "shutdown", "PYU", "SPU", "reveal"]

_log = logging.getLogger("blindjoin")

# What sf.init said, until sf.shutdown.
_state: Dict[str, Any] = {"parties": None, "threads": None}


def init(
    parties: Optional[Sequence[str]] = None,
    address: Optional[str] = None,
    *,
    omp_num_threads: Optional[int] = None,
    **ray_options: Any,
) -> None:
    """SecretFlow's ``sf.init``: ``parties`` and ``omp_num_threads`` are kept (the thread count
    applies to the PSI runs that follow); ``address`` and Ray's options are accepted and unused."""
    _state["parties"] = list(parties) if parties is not None else None
    _state["threads"] = int(omp_num_threads) if omp_num_threads else None
    unused = sorted(k for k in ray_options if k not in ("log_to_driver",))
    if address is not None or unused:
        _log.info(
            "sf.init: blindjoin runs no Ray cluster; address and %s are not used",
            ", ".join(unused) or "no other option",
        )


def shutdown() -> None:
    """SecretFlow's ``sf.shutdown``: forgets what :func:`init` recorded."""
    _state["parties"] = None
    _state["threads"] = None


def reveal(value: Any) -> Any:
    """SecretFlow's ``sf.reveal``: values here are already plain."""
    return value


class SPU(blindjoin.SPU):
    """SecretFlow's ``sf.SPU(cluster_def, link_desc)``: :class:`blindjoin.SPU`, with the thread
    count from :func:`init` applied to each ``psi_csv``."""

    def psi_csv(self, *args: Any, **kwargs: Any) -> List[Dict[str, Any]]:  # type: ignore[override]
        if _state["threads"] is not None:
            kwargs.setdefault("threads", _state["threads"])
        return super().psi_csv(*args, **kwargs)

