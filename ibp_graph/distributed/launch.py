"""``ibp-graph train --nproc-per-node N``: N local ranks started by torch's own launcher.

This process becomes torch's elastic agent (``torch.distributed.run`` with
``--standalone``, a c10d rendezvous on a free local port), which starts
``python -m ibp_graph train ...`` N times with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
the rest set; a rank that fails makes the agent stop the others. Across hosts, run
``torchrun --nnodes M --nproc-per-node N -m ibp_graph train ...`` on every host instead.

It also owns the run's shared segments: it names the run (``IBP_GRAPH_RUN_ID``) and removes
anything of that run left in ``/dev/shm`` when the ranks are gone. It tells the ranks its pid
(``IBP_GRAPH_LAUNCHER_PID``): if it is killed (SIGKILL, where none of this runs), each rank
stops by itself and local rank 0 removes the segments (`ibp_graph.distributed.orphan`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import IBPInputError, Terminated
from .ddp import PEER_EXIT, RUN_ID_ENV, DistributedError
from .orphan import LAUNCHER_PID_ENV
from .shm import SHM_DIR

__all__ = ["launch_local", "leftover_segments"]


def leftover_segments(run_id: str, shm_dir: str | os.PathLike[str] = SHM_DIR) -> list[Path]:
    """Segments of run ``run_id`` still in ``shm_dir``."""
    return sorted(Path(shm_dir).glob(f"ibp-graph-{run_id}-*"))


def _culprit(exc: Any) -> tuple[int, Any]:
    """``(rank, failure)`` of the rank that failed first of its own accord.

    Ranks that stopped because another had (exit status `PEER_EXIT`) may have exited first;
    they count only when no other rank failed. torch's ``get_first_failure`` would take the
    earliest by whole-second timestamps, ties by rank.
    """
    failures = sorted(exc.failures.items(), key=lambda item: (item[1].timestamp, item[0]))
    culprits = [item for item in failures if item[1].exitcode != PEER_EXIT]
    return (culprits or failures)[0]


def launch_local(args: Sequence[str], nproc_per_node: int, *, run_id: str | None = None) -> None:
    """Run ``python -m ibp_graph ARGS`` as ``nproc_per_node`` ranks on this host.

    Args:
        args: the ``ibp-graph`` arguments of every rank (e.g. ``["train", "--config", "x"]``).
        nproc_per_node: ranks to start (>= 1).
        run_id: names the run's shared segments (default: ``IBP_GRAPH_RUN_ID`` when set,
            else a random one).

    Raises:
        IBPInputError: ``nproc_per_node`` is not an int >= 1.
        DistributedError: a rank failed (naming it, its exit code or signal): the first to
            fail of those that did not stop because another rank had (`PEER_EXIT`).
        KeyboardInterrupt: Ctrl-C (SIGINT) reached the launcher; the ranks are stopped.
        Terminated: SIGTERM reached the launcher; the ranks are stopped.
    """
    if isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int):
        raise IBPInputError(f"--nproc-per-node must be an integer >= 1, got {nproc_per_node!r}")
    if nproc_per_node < 1:
        raise IBPInputError(f"--nproc-per-node must be an integer >= 1, got {nproc_per_node}")
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    run_id = run_id or os.environ.get(RUN_ID_ENV) or secrets.token_hex(4)
    config = torch_run.parse_args(
        [
            "--standalone",
            f"--nproc-per-node={nproc_per_node}",
            "--max-restarts=0",
            "--module",
            "ibp_graph",
            *args,
        ]
    )
    previous = {name: os.environ.get(name) for name in (RUN_ID_ENV, LAUNCHER_PID_ENV)}
    os.environ[RUN_ID_ENV] = run_id
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # the ranks stop if it goes (orphan.py)
    try:
        torch_run.run(config)
    except ChildFailedError as exc:
        rank, failure = _culprit(exc)
        if failure.exitcode < 0:
            how = f"killed by {failure.signal_name()}"
        else:
            how = f"exit code {failure.exitcode}; its error is above"
        raise DistributedError(f"rank {rank} of {nproc_per_node} failed ({how})") from None
    except SignalException as exc:  # torch's agent turns SIGINT and SIGTERM into this
        if exc.sigval == signal.SIGINT:
            raise KeyboardInterrupt from None
        if exc.sigval == signal.SIGTERM:
            raise Terminated from None
        raise
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for path in leftover_segments(run_id):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
