"""What the framework loaders share: argument checks, per-epoch seeds and the batch loop.

`ibp_graph.loaders.pyg.NeighborLoader` and `ibp_graph.loaders.dgl.DataLoader` differ only in
how they turn a `SampledBatch` and its feature rows into a framework batch (a PyG ``Data``,
DGL blocks). Everything else lives here and needs no framework: the checks of the common
arguments, where the graph is kept (`place_graph`), the seed nodes cut into batches, the
shuffle order and sampler seed of every epoch, the `Prefetcher` and the progress bar. A
loader subclasses `BaseNodeLoader`, sets its attributes with `_set_loop_args` and
`_start_pipeline`, places its graph with `place_graph`, and implements `_fetch`.

Reproducibility (the same for every loader): with ``seed`` set, epoch ``e`` of any loader
built with the same arguments yields the same batches, whatever the prefetch depth or
earlier epochs did: the shuffle order and the neighbor draws of epoch ``e`` come from two
independent streams of ``numpy.random.SeedSequence([seed, e])``. With ``seed=None`` the base
seed is drawn from torch's global generator at construction (so ``torch.manual_seed`` fixes
it, as for torch's ``DataLoader``). CPU and CUDA draws differ for the same seed.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from .errors import IBPInputError
from .graph import CSRGraph
from .prefetch import LoaderStats, Prefetcher
from .sampler import NeighborSampler, SampledBatch

__all__ = [
    "GRAPH_MEMORY",
    "SEED_BOUND",
    "BaseNodeLoader",
    "check_batch_size",
    "check_bool",
    "check_graph_memory",
    "check_prefetch",
    "input_nodes",
    "place_graph",
    "resolve_seed",
    "type_name",
    "unsupported",
]

#: Bound (exclusive) of the base seed drawn from torch's global generator when seed=None.
SEED_BOUND = 2**63 - 1

#: Where a loader may keep its graph (the ``graph_memory`` argument, see `place_graph`).
GRAPH_MEMORY: tuple[str, ...] = ("device", "uva")


def type_name(x: object) -> str:
    """The name of ``x``'s type, for error messages."""
    return type(x).__name__


def unsupported(name: str, value: object, why: str) -> NotImplementedError:
    """The error for an option a loader accepts for compatibility but does not implement."""
    return NotImplementedError(f"{name}={value!r} is not supported by ibp_graph's loader: {why}")


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool.

    Raises:
        IBPInputError: it is not.
    """
    if not isinstance(value, bool):
        raise IBPInputError(f"{name} must be a bool, got '{type_name(value)}'")
    return value


def check_batch_size(batch_size: object) -> int:
    """``batch_size`` if it is an int >= 1.

    Raises:
        IBPInputError: it is not.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise IBPInputError(f"batch_size must be a positive int, got {batch_size!r}")
    return batch_size


def check_prefetch(prefetch: object) -> int:
    """``prefetch`` if it is an int >= 0.

    Raises:
        IBPInputError: it is not.
    """
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        raise IBPInputError(f"prefetch must be an int >= 0, got {prefetch!r}")
    return prefetch


def check_graph_memory(graph_memory: object) -> str:
    """``graph_memory`` if it is one of `GRAPH_MEMORY`.

    Raises:
        IBPInputError: it is not.
    """
    if not isinstance(graph_memory, str) or graph_memory not in GRAPH_MEMORY:
        allowed = ", ".join(repr(m) for m in GRAPH_MEMORY)
        raise IBPInputError(f"graph_memory must be one of {allowed}, got {graph_memory!r}")
    return graph_memory


def place_graph(graph: CSRGraph, device: torch.device, graph_memory: str = "device") -> CSRGraph:
    """The loader's graph, placed for sampling on ``device`` as ``graph_memory`` says.

    Args:
        graph: the CSR graph, on any device.
        device: where sampling runs (the loader's resolved device).
        graph_memory: ``"device"``: the graph is copied to ``device`` (returned as it is when
            it is there already). ``"uva"``: the graph stays in pinned host memory as CUDA
            tensors that the GPU reads over UVA (`CSRGraph.to_uva`), for graphs larger than
            the GPU; needs a CUDA ``device`` (default: ``"device"``).

    Raises:
        IBPInputError: ``graph_memory`` is not one of `GRAPH_MEMORY`, or is ``"uva"`` with a
            ``device`` that is not a GPU.
        IBPDeviceError: ``"uva"`` and no CUDA GPU is usable.
    """
    graph_memory = check_graph_memory(graph_memory)
    device = torch.device(device)
    if graph_memory == "device":
        return graph.to(device)
    if device.type != "cuda":
        raise IBPInputError(
            "graph_memory='uva' keeps the graph in pinned host memory for the GPU to read, "
            f"so it needs device='cuda', got device='{device}'"
        )
    return graph.to_uva(device)


def resolve_seed(seed: object) -> int:
    """The loader's base seed: ``seed``, or one drawn from torch's global generator for None.

    Raises:
        IBPInputError: ``seed`` is neither None nor an int >= 0.
    """
    if seed is None:
        return int(torch.randint(0, SEED_BOUND, (), dtype=torch.int64))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise IBPInputError(f"seed must be an int >= 0 or None, got {seed!r}")
    return int(seed)


def input_nodes(
    nodes: Any,
    num_nodes: int,
    *,
    name: str = "input_nodes",
    node_types: tuple[type, ...] = (str, tuple, Mapping),
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The seed nodes as (CPU int64 node ids, input ids or None for positions).

    Like PyG, a boolean mask gives input ids equal to the node ids; an index gives None, and
    each batch's ``input_id`` is then the seeds' positions in the index.

    Args:
        nodes: None (all nodes), a boolean mask of ``num_nodes`` entries, or node ids (a
            tensor, NumPy array, list or range).
        num_nodes: nodes in the graph.
        name: the argument's name in messages (``"input_nodes"`` for PyG, ``"indices"`` for
            DGL).
        node_types: the types by which the framework names node types (heterogeneous
            graphs), refused as not supported (default: a string, tuple or mapping, DGL's
            forms; PyG's are a string or tuple, a mapping is a plain bad argument there).

    Raises:
        NotImplementedError: ``nodes`` is one of ``node_types``.
        IBPInputError: anything else that is not 1-D integers or a mask of the right length,
            or an id out of range (naming the first one).
    """
    if nodes is None:
        return torch.arange(num_nodes), None
    if isinstance(nodes, node_types):
        raise unsupported(
            name, nodes, "node types belong to heterogeneous graphs; pass a tensor of node ids"
        )
    if isinstance(nodes, np.ndarray):
        nodes = torch.from_numpy(nodes)
    elif isinstance(nodes, (list, range)):
        nodes = torch.as_tensor(list(nodes), dtype=torch.int64)
    if not isinstance(nodes, torch.Tensor):
        raise IBPInputError(
            f"{name} must be None, a boolean mask or an index tensor, got '{type_name(nodes)}'"
        )
    nodes = nodes.cpu()
    if nodes.dim() != 1:
        raise IBPInputError(f"{name} must be 1-D, got shape {tuple(nodes.shape)}")
    if nodes.dtype == torch.bool:
        if nodes.numel() != num_nodes:
            raise IBPInputError(
                f"{name} is a boolean mask of {nodes.numel()} entries, the graph has "
                f"{num_nodes} nodes"
            )
        nodes = nodes.nonzero().view(-1)
        return nodes, nodes
    if nodes.dtype.is_floating_point or nodes.dtype.is_complex:
        raise IBPInputError(f"{name} must hold integers or bools, got dtype {nodes.dtype}")
    nodes = nodes.to(torch.int64)
    bad = (nodes < 0) | (nodes >= num_nodes)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise IBPInputError(
            f"{name}[{i}] = {int(nodes[i])} is out of range for a graph of {num_nodes} nodes"
        )
    return nodes, None


class BaseNodeLoader(abc.ABC):
    """Seed nodes in batches -> `NeighborSampler` -> `_fetch` -> framework batches.

    Iterating starts one epoch: the seeds (``input_nodes``, shuffled when ``shuffle``) are cut
    into batches of ``batch_size``, each sampled by ``sampler`` and turned into a batch by
    `_fetch`, ``prefetch`` batches ahead (`Prefetcher`), counted in ``stats``.

    A subclass's ``__init__`` calls `_set_loop_args` first (cheap checks, the base seed),
    then sets ``input_nodes``, ``_input_id``, ``device`` and ``sampler`` (seeded with
    ``self.seed``), then calls `_start_pipeline`. It implements `_fetch` and may override
    `_deliver`.

    Attributes:
        batch_size: seeds per batch.
        shuffle: reshuffle the seeds every epoch.
        drop_last: drop the last, smaller batch.
        prefetch: batches prepared ahead of the one being consumed.
        seed: the base seed (see the module docstring).
        progress: iterate through a tqdm bar showing `stats`.
        input_nodes: CPU int64 seed node ids.
        device: where sampling runs and batches land.
        sampler: the neighbor sampler (reseeded every epoch).
        stats: counters of the current (or last) epoch.
    """

    batch_size: int
    shuffle: bool
    drop_last: bool
    prefetch: int
    seed: int
    progress: bool
    input_nodes: torch.Tensor
    _input_id: torch.Tensor | None
    device: torch.device
    sampler: NeighborSampler
    stats: LoaderStats

    def _set_loop_args(
        self,
        *,
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
        prefetch: int,
        seed: int | None,
        progress: bool,
    ) -> None:
        """Check and store the loop's arguments (``seed=None`` draws the base seed)."""
        self.batch_size = check_batch_size(batch_size)
        self.prefetch = check_prefetch(prefetch)
        self.seed = resolve_seed(seed)
        self.shuffle = check_bool("shuffle", shuffle)
        self.drop_last = check_bool("drop_last", drop_last)
        self.progress = check_bool("progress", progress)

    def _start_pipeline(self) -> None:
        """Create the counters and, on a GPU, the side stream (after ``device`` is set).

        On a GPU it also waits for the device: what the constructor put there (the graph,
        attributes, tables) may have been queued on any stream, and the side stream is
        ordered only after the stream current when iteration starts.
        """
        self.stats = LoaderStats()
        self._stream = None
        if self.device.type == "cuda":
            self._stream = torch.cuda.Stream(self.device)
            torch.cuda.synchronize(self.device)
        self._epoch = 0

    # -- iteration -----------------------------------------------------------------------
    def __len__(self) -> int:
        n = self.input_nodes.numel()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _epoch_seeds(self, epoch: int) -> tuple[int, int]:
        """(shuffle seed, sampler seed) of ``epoch``."""
        order, draws = np.random.SeedSequence([self.seed, epoch]).generate_state(2, np.uint64)
        return int(order), int(draws)

    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch
        self._epoch += 1
        order_seed, sampler_seed = self._epoch_seeds(epoch)
        self.sampler.manual_seed(sampler_seed)
        n = self.input_nodes.numel()
        if self.shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(order_seed))
        else:
            order = torch.arange(n)
        self.stats.reset()
        prefetcher = Prefetcher(
            self._work(order),
            self._fetch,
            depth=self.prefetch,
            device=self.device,
            stats=self.stats,
            stream=self._stream,
        )
        return self._run(prefetcher)

    def _work(self, order: torch.Tensor) -> Iterator[SampledBatch]:
        bs = self.batch_size
        for b in range(len(self)):
            pos = order[b * bs : (b + 1) * bs]
            input_id = pos if self._input_id is None else self._input_id[pos]
            yield self.sampler.sample(self.input_nodes[pos], input_id)

    def _run(self, prefetcher: Prefetcher) -> Iterator[Any]:
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(self), desc=type(self).__name__, unit="batch")
        try:
            for batch in prefetcher:
                if bar is not None:
                    bar.set_postfix(self.stats.as_postfix(), refresh=False)
                    bar.update(1)
                yield self._deliver(batch)
                del batch  # hold no reference while the next batches are prepared
        finally:
            prefetcher.close()
            self.stats.resolve(block=True)
            if bar is not None:
                bar.set_postfix(self.stats.as_postfix(), refresh=False)
                bar.close()

    # -- hooks -----------------------------------------------------------------------------
    @abc.abstractmethod
    def _fetch(self, sampled: SampledBatch, stream: torch.cuda.Stream | None) -> Any:
        """Join a sampled subgraph with its features: the prepared batch.

        Runs on the side stream ``stream`` on a GPU (None on the CPU). Every CUDA tensor
        the consumer will read must be reachable from the result by
        `ibp_graph.prefetch.record_stream` (tensors, mappings, sequences, dataclasses).
        """

    def _deliver(self, batch: Any) -> Any:
        """What the consumer receives for a prepared batch (default: the batch itself)."""
        return batch
