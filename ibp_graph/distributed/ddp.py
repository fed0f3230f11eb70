"""The process group of a data-parallel run: who this rank is, its device, and reductions.

A run started by ``torchrun`` (or ``ibp-graph train --nproc-per-node N``) finds its place in
the environment torch's launcher sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``/``MASTER_PORT``). `init_from_env` joins
the process group (gloo on the CPU, NCCL when every local rank has a GPU of its own, gloo
when ranks share a GPU) with a timeout, so a rank that dies makes the others stop with a
`DistributedError` instead of hanging. Under NCCL, torch's own watchdog handles a collective
that times out first, and with torch's defaults (``TORCH_NCCL_ASYNC_ERROR_HANDLING``) it ends
the process: the ranks still stop, with torch's message rather than ours.

.. code-block:: python

    ctx = init_from_env(device="auto", timeout_s=300)
    if ctx is not None:
        with ctx.guard():
            total = ctx.sum([loss_sum, seen])
        ctx.close()
"""

from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from ..errors import IBPError, IBPInputError, check_choice

__all__ = ["RUN_ID_ENV", "DistContext", "DistributedError", "init_from_env", "world_from_env"]

#: Set by `ibp_graph.distributed.launch` for its ranks: names the run's shared segments.
RUN_ID_ENV = "IBP_GRAPH_RUN_ID"
_BACKENDS = ("auto", "gloo", "nccl")


#: Exit status of a rank that stops because another rank failed (`PeerFailed`): the
#: launcher then names a rank that failed first of its own accord.
PEER_EXIT = 3


class DistributedError(IBPError, RuntimeError):
    """Another rank failed, or the process group timed out; the message names this rank."""

    #: The CLI's exit status for it.
    exit_status = 1


class PeerFailed(DistributedError):
    """This rank stops because another rank failed or did not answer in time."""

    exit_status = PEER_EXIT


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise IBPInputError(f"environment variable {name} is not set (start with torchrun)")
        return default
    try:
        return int(value)
    except ValueError:
        raise IBPInputError(
            f"environment variable {name} must be an integer, got {value!r}"
        ) from None


def world_from_env() -> tuple[int, int, int, int, int] | None:
    """``(rank, world_size, local_rank, local_world_size, node_rank)`` from torch's launcher.

    None when ``WORLD_SIZE`` is not set (not started by a launcher).

    Raises:
        IBPInputError: a variable is not an integer, or the values are inconsistent.
    """
    if "WORLD_SIZE" not in os.environ:
        return None
    world = _env_int("WORLD_SIZE")
    rank = _env_int("RANK")
    local_rank = _env_int("LOCAL_RANK", rank)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    node = _env_int("GROUP_RANK", 0)
    if not (0 <= rank < world and 0 <= local_rank < local_world <= world and node >= 0):
        raise IBPInputError(
            f"inconsistent launcher environment: RANK={rank} WORLD_SIZE={world} "
            f"LOCAL_RANK={local_rank} LOCAL_WORLD_SIZE={local_world} GROUP_RANK={node}"
        )
    return rank, world, local_rank, local_world, node


#: Words in the messages of gloo's, NCCL's and c10d's communication errors that are not
#: ``torch.distributed.DistError``s (generic words such as "timeout" or "peer" also occur in
#: local errors, CUDA's "peer access" among them, which must not blame another rank).
_GROUP_WORDS = ("gloo", "nccl", "c10d")


#: What `DistContext.close` keeps after a failed collective, until the interpreter exits.
#: Freeing a DDP model frees its reducer and, with it, the last reference to a gloo process
#: group, whose destructor joins the group's worker thread while holding the GIL. Right after
#: a failed collective that thread may still be freeing the failed work, which takes the GIL:
#: the two wait for each other and the rank hangs instead of stopping (seen in 2 of 39 runs
#: of a killed peer on a loaded 2-core machine). The same happens when an exception leaves a
#: collective behind, such as Ctrl-C (the SIGINT that torch's elastic agent passes on to its
#: ranks): a rank printed "interrupted" and hung until the agent killed it 30 s later, in 5
#: of 34 runs. Kept here, the group is freed at exit, long after (a rank that torch's agent
#: started even exits without the interpreter's teardown, see ``ibp_graph/__main__.py``).
_KEPT_AFTER_FAILURE: list[Any] = []


def _from_the_group(exc: BaseException) -> bool:
    """Whether an error comes from the process group (a peer gone, a timeout)."""
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc).lower()
    return any(word in text for word in _GROUP_WORDS)


@dataclass
class DistContext:
    """This rank's place in the run, and the collectives the training loop needs.

    Attributes:
        rank: global rank.
        world_size: ranks in the run.
        local_rank: rank on this host (its GPU when there is one per rank).
        local_world_size: ranks on this host.
        node_rank: this host's rank (``GROUP_RANK``).
        backend: ``gloo`` or ``nccl``.
        device: where this rank trains.
        run_id: shared by every rank; names the run's shared segments.
        timeout_s: the process group's timeout.
        owns_group: whether `close` destroys the process group (we created it).
        failed: whether `guard` turned a failed collective into a `DistributedError`.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    backend: str
    device: torch.device
    run_id: str
    timeout_s: float
    owns_group: bool = True
    failed: bool = False
    #: What holds the process group and must outlive a failure (`hold`).
    _holders: list[Any] = field(default_factory=list, repr=False)

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0 (the one that prints and writes results)."""
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        """Whether this is local rank 0 (the one that creates the host's segments)."""
        return self.local_rank == 0

    @property
    def num_nodes(self) -> int:
        """Hosts in the run (ranks per host are equal under torchrun)."""
        return max(1, self.world_size // max(1, self.local_world_size))

    def segment_name(self, what: str) -> str:
        """A name for this host's segment ``what``: unique per run and node."""
        return f"ibp-graph-{self.run_id}-node{self.node_rank}-{what}"

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Turn a failed collective (a dead peer, a timeout) into a `DistributedError`."""
        try:
            yield
        except (RuntimeError, dist.DistError) as exc:
            if isinstance(exc, IBPError) or not _from_the_group(exc):
                raise
            first = " ".join(str(exc).split())[:300] or type(exc).__name__
            self.failed = True
            raise PeerFailed(
                f"rank {self.rank} of {self.world_size}: another rank failed or did not answer "
                f"within the process group's timeout ({self.timeout_s:g} s); stopping ({first})"
            ) from None

    def barrier(self) -> None:
        """Wait for every rank (a `DistributedError` when one is gone)."""
        with self.guard():
            if self.backend == "nccl":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()

    def _reduce(self, values: Sequence[float], op: Any) -> list[float]:
        dev = self.device if self.backend == "nccl" else torch.device("cpu")
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=dev)
        with self.guard():
            dist.all_reduce(t, op=op)
        return t.tolist()

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over ranks (float64)."""
        return self._reduce(values, dist.ReduceOp.SUM)

    def max(self, values: Sequence[float]) -> list[float]:
        """Element-wise maximum over ranks."""
        return self._reduce(values, dist.ReduceOp.MAX)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order."""
        out: list[Any] = [None] * self.world_size
        with self.guard():
            dist.all_gather_object(out, obj)
        return out

    def hold(self, obj: Any) -> None:
        """Keep ``obj``, which holds the process group (a DDP model), until `close`.

        After a failed collective, or when `close` runs while an exception is on its way out,
        `close` keeps it until the interpreter exits (see `_KEPT_AFTER_FAILURE`), so that the
        rank stops instead of hanging.
        """
        self._holders.append(obj)

    def close(self) -> None:
        """Leave the process group (when we joined it); let go of what `hold` kept."""
        if self.failed or sys.exc_info()[0] is not None:  # called from a finally on the way out
            _KEPT_AFTER_FAILURE.extend(self._holders)
        self._holders.clear()
        if self.owns_group and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def _pick(device: str, local_rank: int, local_world: int) -> tuple[torch.device, bool]:
    """This rank's device, and whether every local rank has a GPU of its own."""
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu"), False
    if not torch.cuda.is_available():
        return torch.device(device), False  # resolve_device reports it later
    count = torch.cuda.device_count()
    dev = torch.device(device if device not in ("auto", "cuda") else "cuda")
    index = dev.index if dev.index is not None else local_rank % count
    return torch.device("cuda", index), local_world <= count and dev.index is None


def check_backend(backend: str, device: torch.device) -> None:
    """Refuse a process-group ``backend`` that cannot serve ranks training on ``device``.

    Raises:
        IBPInputError: ``nccl`` for ranks on the CPU, or in a torch built without NCCL.
    """
    if backend != "nccl":
        return
    if device.type != "cuda":
        raise IBPInputError(
            f"dist_backend: nccl connects GPUs, and this run trains on {device}; use gloo or auto"
        )
    if not dist.is_nccl_available():
        raise IBPInputError("dist_backend: nccl is not built into this torch; use gloo or auto")


def init_from_env(
    device: str = "auto", *, timeout_s: float = 300.0, backend: str = "auto"
) -> DistContext | None:
    """Join the process group the launcher's environment describes (None: not launched).

    Args:
        device: the config's device (``auto``, ``cpu``, ``cuda``, ``cuda:N``); on a GPU each
            rank takes ``cuda:LOCAL_RANK`` (modulo the GPUs there are).
        timeout_s: how long a collective waits for the other ranks before failing.
        backend: ``auto`` (NCCL when each local rank has its own GPU, else gloo), ``gloo``
            or ``nccl``.

    Raises:
        IBPInputError: a bad backend (`check_backend`) or timeout, or an inconsistent
            environment.
        DistributedError: the process group cannot be formed.
    """
    backend = check_choice("backend", backend, _BACKENDS)
    if not timeout_s > 0:
        raise IBPInputError(f"timeout_s must be > 0, got {timeout_s!r}")
    world = world_from_env()
    if world is None:
        return None
    rank, size, local_rank, local_world, node = world
    dev, own_gpu = _pick(device, local_rank, local_world)
    check_backend(backend, dev)
    if backend == "auto":
        backend = "nccl" if dev.type == "cuda" and own_gpu else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    owns = not dist.is_initialized()
    ctx = DistContext(rank, size, local_rank, local_world, node, backend, dev, "", timeout_s, owns)
    if owns:
        with ctx.guard():
            dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    else:
        ctx.backend = dist.get_backend()
    run_id = os.environ.get(RUN_ID_ENV) or secrets.token_hex(4)
    ctx.run_id = str(ctx.gather(run_id)[0])  # rank 0's
    return ctx
