"""A rank stops when the launcher that started it is gone, however the launcher ended.

torch's elastic agent (``ibp-graph train --nproc-per-node N`` or ``torchrun``) starts each
rank in a session of its own and stops the ranks itself when it fails, is interrupted or
gets SIGTERM. Killed with SIGKILL (the OOM killer, ``kill -9``, a batch scheduler) it cannot:
its ranks would be handed to init and train on to the end, holding GPUs, memory and CPUs.

`watch_launcher` starts a daemon thread in the rank that waits for the launcher to exit (a
pidfd where the kernel has them, otherwise ``os.getppid()`` every half second, as torch's
own DataLoader workers watch their parent) and then writes one line to stderr
(``ibp-graph: error: rank R of W: the launcher (pid P) is gone; stopping``), removes this
node's shared segments of the run when this is local rank 0 and ``IBP_GRAPH_RUN_ID`` names
the run (as `ibp_graph.distributed.launch` does), and ends the process with exit status
`ORPHAN_EXIT`, without the interpreter's teardown (as SIGTERM's default action would). A
segment is also removed by its watchdog process when the rank that created it exits
(`ibp_graph.distributed.shm`), whatever the run id.

Which processes are watched: a rank started by torch's elastic agent, i.e. ``WORLD_SIZE``
and ``TORCHELASTIC_RUN_ID`` are set (the agent sets both in every rank it starts). The
launcher is the process whose pid `ibp_graph.distributed.launch` puts in
``IBP_GRAPH_LAUNCHER_PID``; under a user's ``torchrun`` it is this process's parent when the
watch starts. Only on POSIX systems, where an orphan's parent changes; elsewhere nothing
happens.

Why not ``prctl(PR_SET_PDEATHSIG)``: the signal it sends cannot print anything first
(``train`` keeps SIGTERM's default action, so that a rank blocked in a collective ends at
once), and it follows the thread that forked the rank rather than the process. In torch 2.13
the agent forks every rank from the thread that calls ``agent.run()``
(``SubprocessContext._start`` -> ``SubprocessHandler._popen``, a plain ``Popen`` with
``start_new_session=True``; ``numactl`` under ``--numa-binding`` replaces itself with the
rank), so that thread would do; the process-wide check needs no such reasoning.

.. code-block:: python

    watch_launcher()          # first thing in a rank: None when not a launched rank
    ...
    stop_if_launcher_gone()   # on an error: report the launcher instead, if it is gone
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import threading
import time
from collections.abc import Mapping

from .shm import SHM_DIR

__all__ = [
    "LAUNCHER_PID_ENV",
    "ORPHAN_EXIT",
    "launcher_gone",
    "launcher_pid",
    "stop_if_launcher_gone",
    "watch_launcher",
]

#: Set by `ibp_graph.distributed.launch` for its ranks: the pid of the launching process.
LAUNCHER_PID_ENV = "IBP_GRAPH_LAUNCHER_PID"
#: Exit status of a rank that stops because its launcher is gone (a runtime error).
ORPHAN_EXIT = 1
#: Set by torch's elastic agent in every rank it starts.
_AGENT_ENV = "TORCHELASTIC_RUN_ID"
#: The run id's variable (`ibp_graph.distributed.ddp.RUN_ID_ENV`; ddp loads torch.distributed).
_RUN_ID_ENV = "IBP_GRAPH_RUN_ID"
_POLL_S = 0.5
#: A run id that can only name that run's segments (no glob characters).
_SAFE_RUN_ID = re.compile(r"[A-Za-z0-9._-]+")

#: The launcher this process watches (None: not watching), and the one way out.
_watched: int | None = None
_stopping = threading.Lock()


def _forget() -> None:
    """In a forked child (a loader's worker): its parent is the rank, and no thread watches."""
    global _watched, _stopping
    _watched = None
    _stopping = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


def launcher_pid(environ: Mapping[str, str] | None = None) -> int | None:
    """The pid of the process that launched this rank, or None when it is not watched.

    None unless this is a POSIX system and ``environ`` (default: ``os.environ``) is a rank's
    that torch's elastic agent started (``WORLD_SIZE`` and ``TORCHELASTIC_RUN_ID`` set).
    Otherwise ``IBP_GRAPH_LAUNCHER_PID`` when it is a pid, else this process's parent.
    """
    env = os.environ if environ is None else environ
    if os.name != "posix" or "WORLD_SIZE" not in env or _AGENT_ENV not in env:
        return None
    value = env.get(LAUNCHER_PID_ENV, "").strip()
    if value.isdigit() and int(value) > 1:
        return int(value)
    return os.getppid()


def launcher_gone() -> bool:
    """Whether the launcher `watch_launcher` watches has exited (False when not watching)."""
    return _watched is not None and os.getppid() != _watched


def stop_if_launcher_gone() -> None:
    """End the process as `watch_launcher` does if the watched launcher has exited.

    For a rank's error path: an error caused by the launcher's end (another rank stopped
    first) is then reported as that. Returns when the launcher is alive or not watched.
    """
    if launcher_gone():
        _stop(_watched)


def watch_launcher(*, interval_s: float = _POLL_S) -> int | None:
    """Stop this rank when its launcher exits; the launcher's pid, or None when not a rank.

    Starts one daemon thread (once per process; later calls return the same pid). When the
    launcher has already exited, this stops the process at once.

    Args:
        interval_s: how often the parent is checked where the kernel has no pidfds (> 0).

    Raises:
        ValueError: ``interval_s`` is not > 0.
    """
    global _watched
    if not interval_s > 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
    if _watched is not None:
        return _watched
    pid = launcher_pid()
    if pid is None:
        return None
    _watched = pid
    thread = threading.Thread(
        target=_watch, args=(pid, interval_s), name="ibp-graph-launcher-watch", daemon=True
    )
    thread.start()
    return pid


def _watch(pid: int, interval_s: float) -> None:
    """Wait until this process's parent is no longer ``pid``, then `_stop`."""
    fd = None
    with contextlib.suppress(AttributeError, OSError):  # no pidfds: poll
        fd = os.pidfd_open(pid)
    try:
        while os.getppid() == pid:
            if fd is None:
                time.sleep(interval_s)
            elif select.select([fd], [], [], interval_s)[0] and os.getppid() == pid:
                # Ended, yet still our parent: the pid was reused before it was opened, or
                # the kernel has not handed us over yet. Poll from now on.
                os.close(fd)
                fd = None
    finally:
        if fd is not None:
            os.close(fd)
    _stop(pid)


def _stop(pid: int | None) -> None:
    """Say that the launcher ``pid`` is gone, remove this node's segments, and exit."""
    _stopping.acquire()  # the first caller exits; any other waits here for the end
    rank, world = os.environ.get("RANK", "?"), os.environ.get("WORLD_SIZE", "?")
    line = f"ibp-graph: error: rank {rank} of {world}: the launcher (pid {pid}) is gone; stopping"
    with contextlib.suppress(OSError):  # one write; stderr may have gone with the launcher
        os.write(2, f"{line}\n".encode())
    with contextlib.suppress(OSError):
        _remove_segments()
    os._exit(ORPHAN_EXIT)


def _remove_segments() -> None:
    """On local rank 0, remove this node's segments of the run named in the environment.

    Local rank 0 creates the node's segments (`ibp_graph.distributed.host`); the names are
    `ibp_graph.distributed.ddp.DistContext.segment_name`'s.
    """
    run_id = os.environ.get(_RUN_ID_ENV, "")
    if os.environ.get("LOCAL_RANK", "0").strip() != "0" or not _SAFE_RUN_ID.fullmatch(run_id):
        return
    node = os.environ.get("GROUP_RANK", "0").strip() or "0"
    if not node.isdigit():
        return
    for path in SHM_DIR.glob(f"ibp-graph-{run_id}-node{node}-*"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
