"""Worker processes for the CPU loaders: what torch's ``DataLoader`` machinery carries.

A loader with ``num_workers > 0`` on the CPU hands its batches to torch's multiprocessing
iterator (so ``persistent_workers``, ``prefetch_factor``, ``worker_init_fn``, ``timeout``,
``multiprocessing_context``, ``pin_memory`` and ``in_order`` keep torch's meaning). Three
small objects make that work without losing reproducibility:

- `SeedPositions` is the loader's ``dataset``: positions ``0 .. n - 1`` into its seed nodes
  (PyG's loader passes a ``range`` of them). Its ``__getitems__`` hands a `BatchTask` to the
  loader's ``collate_fn`` unchanged, so the task reaches the worker whole.
- `EpochBatches` is the loader's ``batch_sampler``: it yields one `BatchTask` per batch of
  the epoch the loader planned, each naming its epoch and batch index. A worker seeds the
  neighbor sampler from ``(seed, epoch, batch index)``, so the draws do not depend on which
  process runs the batch: any ``num_workers`` gives the batches of ``num_workers=0``.
- `WorkerResult` brings a batch back with the worker's counters, which the loader adds to
  its `LoaderStats`.

Worker processes are started by torch (``fork`` by default on Linux: the graph, the tensors
and memory-mapped `IBPTable` rows are shared with the parent, not copied). With ``spawn`` or
``forkserver`` the loader is pickled into every worker; its tensors go through shared memory.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from .errors import IBPInputError

if TYPE_CHECKING:
    from .prefetch import LoaderStats

__all__ = [
    "COUNTERS",
    "BatchTask",
    "CollateFn",
    "EpochBatches",
    "SeedPositions",
    "WorkerResult",
    "add_counts",
]

#: `LoaderStats` fields a worker counts and the loader adds up (the wait is the loader's own).
COUNTERS = ("sample_s", "fetch_s", "rows", "pcie_bytes", "decoded_bytes")


@dataclass(frozen=True)
class BatchTask:
    """One batch of one epoch, as sent to a worker.

    Attributes:
        epoch: the epoch it belongs to.
        index: its position in the epoch (0 for the first batch).
        positions: int64 positions of its seeds in the loader's seed nodes.
    """

    epoch: int
    index: int
    positions: np.ndarray

    def __len__(self) -> int:
        return len(self.positions)


class SeedPositions(Dataset):
    """``0 .. n - 1``: the positions of a loader's seed nodes (the loader's ``dataset``).

    Behaves as ``range(n)`` for ``len``, indexing, slicing, iteration and ``==``.

    Args:
        n: number of seed nodes.
    """

    def __init__(self, n: int) -> None:
        self._range = range(int(n))

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, i: Any) -> Any:
        return self._range[i]

    def __getitems__(self, indices: Any) -> Any:
        """A `BatchTask` unchanged (for the loader's ``collate_fn``), else the positions."""
        if isinstance(indices, BatchTask):
            return indices
        return [self._range[i] for i in indices]

    def __iter__(self) -> Iterator[int]:
        return iter(self._range)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SeedPositions):
            return self._range == other._range
        return self._range == other

    def __hash__(self) -> int:
        return hash(self._range)

    def __repr__(self) -> str:
        return f"SeedPositions({len(self._range)})"


class CollateFn:
    """A loader's ``collate_fn`` that torch's iterator can hold without keeping it alive.

    Torch's worker iterator keeps its ``collate_fn``, and a loader with persistent workers
    keeps its iterator; a bound method would close that cycle, and when the garbage
    collector then frees both, the worker queues are closed before the iterator can tell
    the workers to stop (each then times out). This holds the loader weakly instead; forked
    workers inherit the live loader, and pickling (spawned workers) carries it whole.

    Args:
        loader: an object with a ``_collate(index)`` method.
    """

    def __init__(self, loader: Any) -> None:
        self._loader = weakref.ref(loader)

    def __call__(self, index: Any) -> Any:
        """``loader._collate(index)``."""
        loader = self._loader()
        if loader is None:
            raise IBPInputError("the loader of this collate_fn no longer exists")
        return loader._collate(index)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _collate_of, (self._loader(),)


def _collate_of(loader: Any) -> Any:
    """The unpickled `CollateFn`: a strong reference in the process that unpickles it."""
    return loader._collate


class EpochBatches(Sampler):
    """The batches of the epoch a loader planned, as `BatchTask` objects (its batch sampler).

    Args:
        length: the loader's bound method called by ``len()``: batches per epoch (held
            weakly, see `CollateFn`).
    """

    def __init__(self, length: Callable[[], int]) -> None:
        self._length: weakref.WeakMethod | None = weakref.WeakMethod(length)
        self._plan: tuple[int, Sequence[torch.Tensor]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_length"] = self._length() if self._length is not None else None
        state["_plan"] = None  # the tasks carry their positions
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        length = state.pop("_length")
        self.__dict__.update(state)
        self._length = weakref.WeakMethod(length) if length is not None else None

    def plan(self, epoch: int, batches: Sequence[torch.Tensor]) -> None:
        """Set the epoch and the positions of each of its batches for the next iteration."""
        self._plan = (epoch, batches)

    def __iter__(self) -> Iterator[BatchTask]:
        if self._plan is None:
            raise IBPInputError(
                "the loader's batch_sampler yields batches only while the loader iterates: "
                "iterate the loader itself"
            )
        epoch, batches = self._plan
        for index, positions in enumerate(batches):
            yield BatchTask(epoch, index, positions.numpy())

    def __len__(self) -> int:
        length = self._length() if self._length is not None else None
        return int(length()) if length is not None else 0


@dataclass
class WorkerResult:
    """A batch prepared in a worker, with the worker's counters for it.

    Attributes:
        batch: the prepared batch (``fetched``), or the sampled subgraph still to be joined
            with its features in the loading process.
        fetched: whether ``batch`` is prepared.
        counts: the worker's `COUNTERS` for this batch.
    """

    batch: Any
    fetched: bool
    counts: dict[str, float]

    def pin_memory(self, device: Any = None) -> WorkerResult:
        """The same result with the batch's tensors in pinned memory (torch's pin thread)."""
        from torch.utils.data._utils.pin_memory import pin_memory

        return WorkerResult(pin_memory(self.batch, device), self.fetched, self.counts)


def add_counts(stats: LoaderStats, counts: dict[str, float]) -> None:
    """Add a worker's counters to ``stats``."""
    for name in COUNTERS:
        setattr(stats, name, getattr(stats, name) + counts.get(name, 0))
