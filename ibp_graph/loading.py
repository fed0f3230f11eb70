"""What the framework loaders share: arguments, per-batch seeds, workers and the batch loop.

`ibp_graph.loaders.pyg.NeighborLoader` and `ibp_graph.loaders.dgl.DataLoader` differ only in
how they turn a `SampledBatch` and its feature rows into a framework batch (a PyG ``Data``,
DGL blocks). Everything else lives here and needs no framework: the checks of the common
arguments, where the graph is kept (`place_graph`), the seed nodes cut into batches, the
shuffle order and the sampler seeds, the share of each rank under ``use_ddp``, worker
processes, the `Prefetcher`, the progress bar, and the one-time warnings for arguments that
cannot apply (`warn_ignored`).

`BaseNodeLoader` is a ``torch.utils.data.DataLoader``, as PyG's ``NodeLoader`` and DGL's
``DataLoader`` are: ``loader.dataset`` holds the positions of the seed nodes and
``loader.collate_fn(positions)`` samples and fetches the batch of those seeds. On the CPU,
``num_workers > 0`` runs sampling and fetching in torch's worker processes
(`ibp_graph.workers`); otherwise, and always on a GPU, the loading process prepares
``prefetch`` batches ahead (on a GPU, on a side stream), on a background thread with
``prefetch_thread=True``, the default on a GPU (`default_prefetch_thread`). The sampler runs
its hops with the fused hop kernels when its graph is on a GPU and CuPy imports, with torch
ops otherwise (``sampler_backend=None``, `default_sampler_backend`); with the kernels, a
sampler the loader builds replays their launches from CUDA graphs
(``sampler_cuda_graph=None``, `default_cuda_graph`), and the loop samples
`DEFAULT_SAMPLE_GROUP` batches per sampler call (``sample_group=None``,
`default_sample_group`).

Reproducibility (the same for every loader): with ``seed`` set, epoch ``e`` of any loader
built with the same arguments yields the same batches, whatever ``num_workers``, the prefetch
depth or earlier epochs did. The shuffle order of epoch ``e`` comes from
``numpy.random.SeedSequence([seed, e])`` (``[ddp_seed, e]`` under ``use_ddp``, identical on
every rank; ``[ddp_seed, e, rank]`` for a loader whose ranks take contiguous blocks, each
shuffled within itself), and the neighbor draws of its batch ``b`` from ``SeedSequence([seed, e, b,
rank])``, so no batch depends on which process samples it. With ``seed=None`` the base seed
is drawn from ``generator`` if given, else from torch's global generator, at construction (so
``torch.manual_seed`` fixes it, as for torch's ``DataLoader``). CPU and CUDA draws differ for
the same seed, and so do the two sampler backends' draws.
"""

from __future__ import annotations

import abc
import contextlib
import math
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils.data

from .distributed import rank_block, rank_share, share_size
from .errors import IBPInputError, as_int, check_bool, check_choice, check_int
from .graph import CSRGraph
from .kernels import runtime
from .prefetch import LoaderStats, Prefetcher
from .sampler import NeighborSampler, SampledBatch
from .threads import hold
from .workers import (
    COUNTERS,
    BatchTask,
    CollateFn,
    EpochBatches,
    SeedPositions,
    WorkerResult,
    add_counts,
)

__all__ = [
    "DEFAULT_SAMPLE_GROUP",
    "GRAPH_MEMORY",
    "SEED_BOUND",
    "TORCH_LOADER_KEYWORDS",
    "ArgumentIgnoredWarning",
    "BaseNodeLoader",
    "as_int",
    "check_batch_size",
    "check_bool",
    "check_choice",
    "check_graph_memory",
    "check_prefetch",
    "default_cuda_graph",
    "default_prefetch_thread",
    "default_sample_group",
    "default_sampler_backend",
    "input_nodes",
    "place_graph",
    "resolve_cuda_graph",
    "resolve_seed",
    "type_name",
    "unsupported",
    "uses_workers",
    "warn_ignored",
    "warn_once",
]

#: Bound (exclusive) of the base seed drawn from torch's global generator when seed=None.
SEED_BOUND = 2**63 - 1

#: Batches per sampler call with the fused hop kernels (``sample_group=None``,
#: `default_sample_group`).
DEFAULT_SAMPLE_GROUP = 8

#: Where a loader may keep its graph (the ``graph_memory`` argument, see `place_graph`).
GRAPH_MEMORY: tuple[str, ...] = ("device", "uva")

#: The keywords of ``torch.utils.data.DataLoader`` a loader takes besides ``batch_size``,
#: ``shuffle`` and ``drop_last`` (see `BaseNodeLoader._set_loop_args`).
TORCH_LOADER_KEYWORDS: tuple[str, ...] = (
    "dataset",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


#: The torch ``DataLoader`` keywords that configure worker processes.
_WORKER_KEYWORDS = ("num_workers", "persistent_workers", "prefetch_factor")


class ArgumentIgnoredWarning(UserWarning):
    """An argument of the replaced loader cannot apply here; the message says what happens."""


#: Messages already shown by `warn_once` in this process.
_WARNED: set[str] = set()


def _our_folders() -> tuple[str, ...]:
    import ibp_graph.loaders

    here = Path(__file__).resolve().parent
    return (str(here), *(str(Path(p).resolve()) for p in ibp_graph.loaders.__path__))


def _user_stacklevel() -> int:
    """The ``stacklevel`` of `warn_once`'s ``warnings.warn`` that names the user's line."""
    ours = _our_folders()
    frame = sys._getframe(2)  # the caller of warn_once
    level = 2
    while frame is not None and str(Path(frame.f_code.co_filename).resolve().parent).startswith(
        ours
    ):
        frame = frame.f_back
        level += 1
    return level


def warn_once(message: str) -> None:
    """Warn with `ArgumentIgnoredWarning`, once per process for each ``message``.

    The warning points at the first line outside ibp-graph on the call stack (the user's).
    """
    if message in _WARNED:
        return
    _WARNED.add(message)
    warnings.warn(message, ArgumentIgnoredWarning, stacklevel=_user_stacklevel())


def warn_ignored(name: str, value: object, instead: str) -> None:
    """One-time warning that argument ``name`` cannot apply, saying what happens ``instead``.

    Example:
        >>> warn_ignored("num_workers", 6, "workers are not used: sampling and fetching "
        ...              "run on the GPU")  # doctest: +SKIP
        ArgumentIgnoredWarning: num_workers=6: workers are not used: sampling and fetching run
        on the GPU
    """
    warn_once(f"{name}={value!r}: {instead}")


def type_name(x: object) -> str:
    """The name of ``x``'s type, for error messages."""
    return type(x).__name__


def unsupported(name: str, value: object, why: str) -> NotImplementedError:
    """The error for an option a loader accepts for compatibility but does not implement."""
    return NotImplementedError(f"{name}={value!r} is not supported by ibp_graph's loader: {why}")


def check_batch_size(batch_size: object) -> int:
    """``batch_size`` as an int if it is an integer >= 1 (see `as_int`).

    Raises:
        IBPInputError: it is not.
    """
    size = as_int(batch_size)
    if size is None or size < 1:
        raise IBPInputError(f"batch_size must be a positive int, got {batch_size!r}")
    return size


def check_prefetch(prefetch: object) -> int:
    """``prefetch`` if it is an int >= 0.

    Raises:
        IBPInputError: it is not.
    """
    return check_int("prefetch", prefetch, 0)


def check_sample_group(sample_group: object) -> int | None:
    """``sample_group`` if it is an int >= 1 or None (see `default_sample_group`).

    Raises:
        IBPInputError: it is not.
    """
    return None if sample_group is None else check_int("sample_group", sample_group, 1)


def check_graph_memory(graph_memory: object) -> str:
    """``graph_memory`` if it is one of `GRAPH_MEMORY`.

    Raises:
        IBPInputError: it is not.
    """
    return check_choice("graph_memory", graph_memory, GRAPH_MEMORY)


def uses_workers(device: str | torch.device, num_workers: object) -> bool:
    """Whether a loader on ``device`` runs torch's worker processes for ``num_workers``.

    Only on the CPU: on a GPU the loading process prepares the batches on a side stream
    and ``num_workers`` is ignored (with a warning). A value that is not an int counts as
    workers, so that torch's ``DataLoader`` checks it.
    """
    cpu = torch.device(device).type == "cpu"
    return cpu and not (isinstance(num_workers, int) and num_workers <= 0)


def default_prefetch_thread(device: str | torch.device) -> bool:
    """What ``prefetch_thread=None`` means: on for a CUDA device, off on the CPU.

    On a GPU (where there are no worker processes, `uses_workers`), without the thread the
    sampler's host work and its reads of sizes back from the GPU run inside ``next()``,
    serialised with the training loop; on the thread they overlap it. Measured on an H100
    (``benchmarks/results/e2e-nvidia-h100-80gb-hbm3.md``, GraphSAGE, the same batches and
    losses): 0% overlap without the thread, 64-73% with it; CiteSeer's epochs took 0.0404 s
    instead of 0.0501 s, but Cora's 0.0535 s instead of 0.0397 s. The thread shares the GIL
    with the training loop, and a step made mostly of short ops (kernel launches) pays a
    hand-over for each op while the thread wants the GIL: on the CPU a step of 300 short ops
    took 1.64x-1.78x its time beside Cora's loaders on the thread
    (``benchmarks/results/gil-handoff-cpu.md``). Where steps are that short, False may be
    faster. On the CPU the default stays off (pass True to use the thread there).

    Args:
        device: where the loader samples and fetches.
    """
    return torch.device(device).type == "cuda"


def default_cuda_graph(backend: str) -> bool:
    """What ``sampler_cuda_graph=None`` means: replay the launches with the fused hop kernels.

    True for ``backend="kernel"``, False for ``"torch"`` (there is nothing to replay). The
    sampler then captures each group shape's launches once, as a CUDA graph
    (`ibp_graph.sample_replay`), and replays it: the same batches, with less host work.
    Measured on an H200 (``benchmarks/results/sampling-nvidia-h200.md``, commit 2b96efc, a
    2M-node, 50M-edge power-law graph, fanouts [15, 10, 5], batches of 1,024 seeds given from
    the host, as the loaders give them, int64 CSR indices): host CPU per batch 0.62 ms
    replayed against 1.74 ms eager on a graph in GPU memory (0.68 ms against 1.90 ms over
    UVA), for about 0.24 ms of GPU work; in GraphSAGE epochs on the loaders' prefetch thread
    (``benchmarks/results/e2e-nvidia-h200.md``, commit ddeb6e8, the same batches and losses)
    0.0237 s against 0.0248 s (Cora) and 0.0242 s against 0.0256 s (CiteSeer). The cost is
    GPU memory: each captured shape keeps its buffers (see
    `ibp_graph.sampler.NeighborSampler`). Pass ``sampler_cuda_graph=False`` to run the
    launches eagerly.

    Args:
        backend: the sampler's backend, ``"torch"`` or ``"kernel"``.
    """
    return backend == "kernel"


def default_sample_group(sampler: NeighborSampler) -> int:
    """What ``sample_group=None`` means: `DEFAULT_SAMPLE_GROUP` batches a call, or 1.

    `DEFAULT_SAMPLE_GROUP` where the fused hop kernels launch ``sampler``'s batches without a
    host read on the way (`ibp_graph.sampler.NeighborSampler.replayable`: every fanout from 0
    to 256, ``draw="once"``, not ``disjoint``), one batch a call otherwise.

    `ibp_graph.sampler.NeighborSampler.sample_batches` then launches a group of batches of
    one size one after the other and reads all their sizes back at once (one CUDA graph
    replays the whole group with ``cuda_graph=True``): the same batches, with less host work
    per batch. Measured on an H200 as in `default_cuda_graph` (groups of 8): host CPU per
    batch 0.15 ms replayed in groups against 0.62 ms replayed one batch a call, and 1.07 ms
    eager in groups against 1.74 ms eager one a call (over UVA: 0.28, 0.68, 1.06 and 1.90
    ms). The costs: a group's first batch is ready once the whole group is sampled (8 batches
    of about 0.23 ms of GPU work each in that run), and the group's batches are in GPU memory
    together (a replayed group's CUDA graph keeps the buffers of all of them: for 1,024 seeds
    and fanouts ``[15, 10, 5]``, at most about 52 MB a batch). Torch ops sample a group's
    batches one by one, and hops that read their sizes (a fanout of ``-1``, as evaluation
    loaders take whole neighborhoods, or ``draw="per_hop"``, as DGL's blocks) would gain
    little against holding several such batches at once: one batch a call for them. Pass
    ``sample_group`` to choose.

    Args:
        sampler: the loader's neighbor sampler.
    """
    return DEFAULT_SAMPLE_GROUP if sampler.replayable else 1


def resolve_cuda_graph(cuda_graph: object, backend: str) -> bool:
    """``sampler_cuda_graph`` for a sampler of ``backend`` that a loader builds.

    None: `default_cuda_graph`.

    Raises:
        IBPInputError: it is not a bool or None, or True with ``backend="torch"``.
    """
    if cuda_graph is None:
        return default_cuda_graph(backend)
    cuda_graph = check_bool("sampler_cuda_graph", cuda_graph)
    if cuda_graph and backend != "kernel":
        raise IBPInputError(
            "sampler_cuda_graph=True replays the fused hop kernels' launches, so it needs "
            f"sampler_backend='kernel' (the loader's sampler runs {backend!r})"
        )
    return cuda_graph


def default_sampler_backend(device: str | torch.device) -> str:
    """What ``sampler_backend=None`` means: ``"kernel"`` for a CUDA graph when CuPy imports.

    Else ``"torch"`` (a CPU graph, or no CuPy: the fused hop kernels need it). Measured on an
    H100 (``benchmarks/results/sampling-nvidia-h100-80gb-hbm3.md``, commit a04226f, a
    2M-node, 50M-edge power-law graph, fanouts [15, 10, 5], batches of 1024, both backends
    in one run): the fused hop kernels (``"kernel"``, `ibp_graph.sample_hop.launch_batch`)
    sampled 298 M / 438 M edges/s (int64 / int32 CSR indices) on a graph in GPU memory
    against 91 M / 86 M with torch ops, 194 M / 250 M against 62 M / 78 M over UVA, with
    about 2 ms instead of 7 ms of host CPU per batch. It is only a default: pass
    ``sampler_backend="torch"`` or ``"kernel"`` to choose. The two backends are both uniform
    and reproducible for a seed, but they draw different neighbors for the same seed.

    Args:
        device: where the sampler's graph is (a graph read over UVA is on its GPU).
    """
    if torch.device(device).type != "cuda":
        return "torch"
    try:
        runtime.cupy()
    except ImportError:
        return "torch"
    return "kernel"


def place_graph(graph: CSRGraph, device: torch.device, graph_memory: str = "device") -> CSRGraph:
    """The loader's graph, placed for sampling on ``device`` as ``graph_memory`` says.

    Args:
        graph: the CSR graph, on any device.
        device: where sampling runs (the loader's resolved device).
        graph_memory: ``"device"``: the graph is copied to ``device`` (returned as it is when
            it is there already). ``"uva"``: the graph stays in pinned host memory as CUDA
            tensors that the GPU reads over UVA (`CSRGraph.to_uva`: ``indptr`` copied to
            ``device``, int64 sources and edge ids interleaved), for graphs larger than the
            GPU; a graph over UVA already is returned as it is; needs a CUDA ``device``
            (default: ``"device"``).

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


def resolve_seed(seed: object, generator: torch.Generator | None = None) -> int:
    """The loader's base seed: ``seed``, or for None one drawn from ``generator``.

    Args:
        seed: an int >= 0, or None.
        generator: a CPU ``torch.Generator`` to draw from when ``seed`` is None
            (default: None, torch's global generator).

    Raises:
        IBPInputError: ``seed`` is neither None nor an int >= 0, or ``generator`` is not a
            ``torch.Generator``.
    """
    if seed is None:
        if generator is not None and not isinstance(generator, torch.Generator):
            raise IBPInputError(
                f"generator must be a torch.Generator, got '{type_name(generator)}'"
            )
        return int(torch.randint(0, SEED_BOUND, (), dtype=torch.int64, generator=generator))
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


class BaseNodeLoader(torch.utils.data.DataLoader, abc.ABC):
    """Seed nodes in batches -> `NeighborSampler` -> `_fetch` -> framework batches.

    A ``torch.utils.data.DataLoader`` whose ``dataset`` is `SeedPositions` (the positions
    of the seed nodes, like PyG's ``range``) and whose ``collate_fn(positions)`` samples and
    fetches the batch of those seeds. Iterating starts one epoch: the seeds (shuffled when
    ``shuffle``; each rank's share under ``use_ddp``) are cut into batches of
    ``batch_size``, each sampled by ``node_sampler`` and turned into a batch by `_fetch`,
    counted in ``stats``. On the CPU with ``num_workers > 0`` torch's worker processes do
    that (see `ibp_graph.workers`); otherwise the loading process does it ``prefetch``
    batches ahead (`Prefetcher`, on a side stream on a GPU).

    How a subclass is built (``__init__``), in this order:

    1. `_set_loop_args` with the loop's arguments, ``use_ddp``/``ddp_seed``, and every
       torch ``DataLoader`` keyword the user passed as ``loader_kwargs`` (a mapping; a
       loader with ``**kwargs`` forwards them as they are). It checks them, draws the base
       seed ``self.seed`` and, under ``use_ddp``, reads the rank and world size.
    2. Set ``input_nodes``, ``_input_id`` (`input_nodes` gives both) and ``device``.
    3. Build the `NeighborSampler` (seeded with ``self.seed``) and call
       ``_start_pipeline(node_sampler)``: it runs ``torch.utils.data.DataLoader.__init__``,
       after which torch forbids setting ``batch_size``, ``sampler``, ``batch_sampler``,
       ``drop_last``, ``dataset`` and ``persistent_workers``.

    A subclass implements `_fetch`, and may override `_deliver` (what the user receives)
    and `_refresh` (re-read the graph's data at the start
    of every epoch) and set ``_fetch_in_worker = False`` to join features in the loading
    process rather than in the workers.

    Attributes:
        batch_size: seeds per batch.
        shuffle: reshuffle the seeds every epoch.
        drop_last: drop the last, smaller batch.
        prefetch: batches prepared ahead of the one being consumed (without workers).
        sample_group: batches sampled per call of the sampler (without workers;
            `default_sample_group` unless given).
        seed: the base seed (see the module docstring).
        progress: iterate through a tqdm bar showing `stats`.
        use_ddp: each rank iterates over its share of the seeds.
        ddp_seed: the base seed of the shuffle order under ``use_ddp``.
        input_nodes: CPU int64 seed node ids.
        device: where sampling runs and batches land.
        node_sampler: the neighbor sampler (reseeded for every batch).
        stats: counters of the current (or last) epoch.
        dataset: `SeedPositions` over ``input_nodes``.
        collate_fn: ``collate_fn(positions)``: the batch of the seeds at ``positions`` (see
            `_collate`).
    """

    batch_size: int
    shuffle: bool
    drop_last: bool
    prefetch: int
    #: None until `_start_pipeline` resolves it (`default_sample_group`) unless given.
    sample_group: int | None
    seed: int
    progress: bool
    use_ddp: bool
    ddp_seed: int
    input_nodes: torch.Tensor
    _input_id: torch.Tensor | None
    device: torch.device
    node_sampler: NeighborSampler
    stats: LoaderStats
    #: Join features in the workers (True) or in the loading process (False).
    _fetch_in_worker: bool = True
    #: Under ``use_ddp``, each rank takes a contiguous block of the seeds, shuffled within it
    #: (`ibp_graph.distributed.rank_block`, DGL's rule), instead of every ``world_size``-th
    #: seed of an order shuffled alike on every rank (`rank_share`, torch's rule).
    _ddp_blocks: bool = False

    @property
    def sampler_backend(self) -> str:
        """How ``node_sampler`` runs its hops: ``"torch"`` or ``"kernel"`` (its ``backend``).

        The loaders resolve ``sampler_backend=None`` with `default_sampler_backend`.
        """
        return self.node_sampler.backend

    @property
    def sampler_cuda_graph(self) -> bool:
        """Whether ``node_sampler`` replays its launches from CUDA graphs (``cuda_graph``).

        The loaders resolve ``sampler_cuda_graph=None`` with `default_cuda_graph`.
        """
        return self.node_sampler.cuda_graph

    def _set_loop_args(
        self,
        *,
        batch_size: int,
        shuffle: bool | None,
        drop_last: bool,
        prefetch: int,
        seed: int | None,
        progress: bool,
        use_ddp: bool = False,
        ddp_seed: int = 0,
        loader_kwargs: Mapping[str, Any] | None = None,
        prefetch_thread: bool | None = None,
        sample_group: int | None = None,
    ) -> None:
        """Check and store the loop's arguments (``seed=None`` draws the base seed).

        Args:
            batch_size: seeds per batch.
            shuffle: reshuffle every epoch (None: False, as torch).
            drop_last: drop the last, smaller batch (under ``use_ddp`` also: cut the seed
                order to a multiple of the world size instead of padding it).
            prefetch: batches prepared ahead without workers.
            seed: the base seed, or None.
            progress: show a tqdm bar.
            use_ddp: iterate over this rank's share of the seeds (needs an initialised
                ``torch.distributed``) (default: False).
            ddp_seed: the base seed of the shuffle order under ``use_ddp``, the same on
                every rank (default: 0).
            loader_kwargs: ``torch.utils.data.DataLoader`` keywords, any of
                `TORCH_LOADER_KEYWORDS` (default: None). ``dataset`` and ``collate_fn`` are
                replaced by the loader's own (as PyG does); ``sampler`` gives the order of the
                seed positions every epoch and ``batch_sampler`` the positions of every batch,
                instead of ``shuffle`` and ``seed``; the rest go to torch as they are.
            prefetch_thread: without workers, prepare the batches on a background thread
                (`ibp_graph.prefetch.Prefetcher`'s ``thread``); None: decided by
                `_start_pipeline` once the device is known (`default_prefetch_thread`: on a
                CUDA device), unless the subclass sets
                ``self.prefetch_thread`` to a bool before (default: None).
            sample_group: without workers, batches sampled per call of the sampler
                (`ibp_graph.sampler.NeighborSampler.sample_batches`; the same batches);
                None: decided by `_start_pipeline` from the sampler
                (`default_sample_group`) (default: None).

        Raises:
            TypeError: a keyword in ``loader_kwargs`` is not a torch ``DataLoader`` keyword.
            ValueError: ``sampler`` with ``shuffle``, or ``batch_sampler`` with
                ``batch_size``, ``shuffle``, ``sampler`` or ``drop_last`` (torch's rule).
            IBPInputError: a bad value, or ``use_ddp`` without an initialised
                ``torch.distributed``.
        """
        kwargs = dict(loader_kwargs or {})
        unknown = sorted(set(kwargs) - set(TORCH_LOADER_KEYWORDS))
        if unknown:
            raise TypeError(
                f"{type(self).__name__}() got an unexpected keyword argument {unknown[0]!r}"
            )
        for name, own in (
            ("dataset", "the positions of its seed nodes"),
            ("collate_fn", "one that samples and fetches"),
        ):
            if kwargs.pop(name, None) is not None:
                warn_once(f"{name}: not used, the loader has its own ({own}), as PyG's does")
        self._user_sampler = kwargs.pop("sampler", None)
        self._user_batch_sampler = kwargs.pop("batch_sampler", None)
        shuffle = False if shuffle is None else shuffle
        self.batch_size = check_batch_size(batch_size)
        self.prefetch = check_prefetch(prefetch)
        self.sample_group = check_sample_group(sample_group)
        #: Resolved to a bool by `_start_pipeline` when None.
        self.prefetch_thread: bool | None = (
            None if prefetch_thread is None else check_bool("prefetch_thread", prefetch_thread)
        )
        self.shuffle = check_bool("shuffle", shuffle)
        self.drop_last = check_bool("drop_last", drop_last)
        self.progress = check_bool("progress", progress)
        self.use_ddp = check_bool("use_ddp", use_ddp)
        if self._user_sampler is not None and self.shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if self._user_batch_sampler is not None and (
            self.batch_size != 1 or self.shuffle or self._user_sampler is not None or drop_last
        ):
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                "and drop_last"
            )
        self.seed = resolve_seed(seed, kwargs.get("generator"))
        if isinstance(ddp_seed, bool) or not isinstance(ddp_seed, (int, np.integer)):
            raise IBPInputError(f"ddp_seed must be an int, got '{type_name(ddp_seed)}'")
        if ddp_seed < 0:  # SeedSequence refuses it, at the first shuffled epoch
            raise IBPInputError(f"ddp_seed must be an int >= 0, got {ddp_seed}")
        self.ddp_seed = int(ddp_seed)
        self._rank, self._world_size = 0, 1
        if self.use_ddp:
            dist = torch.distributed
            if not (dist.is_available() and dist.is_initialized()):
                raise IBPInputError(
                    "use_ddp=True shares the seeds between the ranks of torch.distributed, "
                    "which is not initialised: call torch.distributed.init_process_group() "
                    "first (torchrun sets up what it needs)"
                )
            self._rank, self._world_size = int(dist.get_rank()), int(dist.get_world_size())
        self._torch_kwargs = kwargs

    def _start_pipeline(self, node_sampler: NeighborSampler) -> None:
        """Initialise the torch ``DataLoader``, the counters and, on a GPU, the side stream.

        Call it last in ``__init__``, after ``input_nodes`` and ``device`` are set. On a GPU
        it also waits for the device: what the constructor put there (the graph, attributes,
        tables) may have been queued on any stream, and the side stream is ordered only
        after the stream current when iteration starts.

        Args:
            node_sampler: the neighbor sampler (``self.node_sampler``).

        Raises:
            ValueError: torch's ``DataLoader`` refuses a keyword's value (for example
                ``persistent_workers=True`` with ``num_workers=0``).
        """
        self.node_sampler = node_sampler
        self.stats = LoaderStats()
        self._stream = None
        if self.device.type == "cuda":
            self._stream = torch.cuda.Stream(self.device)
            torch.cuda.synchronize(self.device)
        self._epoch = 0
        batch_size, drop_last = self.batch_size, self.drop_last
        self._epoch_batches = EpochBatches(self.__len__)
        kwargs = dict(self._torch_kwargs)
        num_workers = kwargs.get("num_workers", 0)
        self._use_workers = uses_workers(self.device, num_workers)
        if self.prefetch_thread is None:
            self.prefetch_thread = default_prefetch_thread(self.device)
        if self.sample_group is None:
            self.sample_group = default_sample_group(node_sampler)
        if not self._use_workers and num_workers:
            # No workers will start: torch need not check (or warn about) their settings.
            worker_args = {k: kwargs.pop(k) for k in _WORKER_KEYWORDS if k in kwargs}
        torch.utils.data.DataLoader.__init__(
            self,
            SeedPositions(self.input_nodes.numel()),
            batch_sampler=self._epoch_batches,
            collate_fn=CollateFn(self),
            **kwargs,
        )
        # torch clears these when given a batch sampler; they keep their meaning here.
        object.__setattr__(self, "batch_size", batch_size)
        object.__setattr__(self, "drop_last", drop_last)
        if not self._use_workers and num_workers:
            for name, value in worker_args.items():
                object.__setattr__(self, name, value)
            warn_ignored(
                "num_workers",
                num_workers,
                "workers are not used: sampling and fetching run on the GPU",
            )
        if self.pin_memory and not torch.cuda.is_available():
            warn_ignored("pin_memory", True, "no GPU is usable, so batches are not pinned")

    # -- epochs --------------------------------------------------------------------------
    def __len__(self) -> int:
        if self._user_batch_sampler is not None:
            return len(self._user_batch_sampler)
        if self._user_sampler is not None:
            n = len(self._user_sampler)
        else:
            n = self.input_nodes.numel()
        if self.use_ddp:
            n = share_size(n, self._world_size, drop_last=self.drop_last)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (its order and draws, see the module).

        Raises:
            IBPInputError: ``epoch`` is not an int >= 0.
        """
        self._epoch = check_int("epoch", epoch, 0)

    def _order_seed(self, epoch: int, *rank: int) -> int:
        base = self.ddp_seed if self.use_ddp else self.seed
        key = [base, epoch, *rank]
        return int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0])

    def _batch_seed(self, epoch: int, index: int) -> int:
        """The sampler seed of batch ``index`` of ``epoch``."""
        key = [self.seed, epoch, index, self._rank]
        return int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0])

    def _positions(self, values: Iterable[Any], what: str) -> torch.Tensor:
        if isinstance(values, torch.Tensor):
            pos = values.detach().to("cpu", torch.int64).view(-1)
        else:
            pos = torch.as_tensor(list(values), dtype=torch.int64).view(-1)
        n = self.input_nodes.numel()
        bad = (pos < 0) | (pos >= n)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise IBPInputError(
                f"{what} gave position {int(pos[i])}, the loader has {n} seed nodes"
            )
        return pos

    def _plan(self, epoch: int) -> list[torch.Tensor]:
        """The positions of the seeds of every batch of ``epoch`` (this rank's share)."""
        if self._user_batch_sampler is not None:
            return [self._positions(b, "batch_sampler") for b in self._user_batch_sampler]
        n = self.input_nodes.numel()
        blocks = self.use_ddp and self._ddp_blocks
        shuffle = self.shuffle and self._user_sampler is None
        if self._user_sampler is not None:
            order = self._positions(self._user_sampler, "sampler")
        elif shuffle and not blocks:
            gen = torch.Generator().manual_seed(self._order_seed(epoch))
            order = torch.randperm(n, generator=gen)
        else:
            order = torch.arange(n)
        share = {"rank": self._rank, "world_size": self._world_size, "drop_last": self.drop_last}
        if blocks and order.numel():
            gen = None
            if shuffle:
                gen = torch.Generator().manual_seed(self._order_seed(epoch, self._rank))
            order = rank_block(order, generator=gen, **share)
        elif self.use_ddp and order.numel():
            order = rank_share(order, **share)
        bs = self.batch_size
        return [order[b * bs : (b + 1) * bs] for b in range(len(self))]

    # -- iteration -----------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch
        self._epoch += 1
        self._refresh()
        batches = self._plan(epoch)
        self.stats.reset()
        if self._use_workers:
            self._epoch_batches.plan(epoch, batches)
            source: Iterator[Any] = self._from_workers(super().__iter__())
        else:
            self._capture_sizes(batches)
            source = Prefetcher(
                self._work(epoch, batches),
                self._fetch,
                depth=self.prefetch,
                device=self.device,
                stats=self.stats,
                stream=self._stream,
                thread=self.prefetch_thread,
            )
        return self._run(source)

    def _capture_sizes(self, batches: list[torch.Tensor]) -> None:
        """Capture the epoch's batch sizes where ``node_sampler`` replays its launches.

        With ``cuda_graph=True``, the group shapes of the sampler's calls (``sample_group``
        batches each; `NeighborSampler.group_shapes`), the most frequent first, are captured
        on the thread that starts the epoch
        (`ibp_graph.sampler.NeighborSampler.capture_sizes`): with torch before 2.12 the
        prefetch thread could not capture them. On a GPU, on the side stream, after the work
        queued before the epoch.
        """
        if not getattr(self.node_sampler, "cuda_graph", False):
            return
        shapes = Counter(
            (size, count)
            for chunk in self._chunks(batches)
            for size, count in self.node_sampler.group_shapes([int(b.numel()) for b in chunk])
        )
        stream = contextlib.nullcontext()
        if self._stream is not None:
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
            stream = torch.cuda.stream(self._stream)
        with hold(self.node_sampler.lock), stream:
            for (size, count), _ in shapes.most_common():
                self.node_sampler.capture_sizes([size], group=count)

    def _sample_batch(self, epoch: int, index: int, positions: torch.Tensor) -> SampledBatch:
        """Sample batch ``index`` of ``epoch``: the seeds at ``positions``, seeded for it."""
        return self._sample_positions(positions, self._batch_seed(epoch, index))

    def _sample_positions(self, positions: torch.Tensor, seed: int | None = None) -> SampledBatch:
        """Sample the seeds at ``positions``, after seeding the sampler with ``seed``.

        Live iterators of one loader (each with its own prefetch thread), direct
        ``collate_fn`` calls and other loaders given the same ``neighbor_sampler`` share
        ``node_sampler``: its generator, dense map and workspace. The sampler's lock keeps
        each batch's seeding and sampling together, so a batch's draws do not depend on what
        else samples at the same time; on a GPU it also keeps the order of their launches on
        the side stream the iterators share. A prefetch thread stops waiting for the lock
        once its iterator is closed (`ibp_graph.producer.hold`).

        Args:
            positions: int64 positions into ``input_nodes``.
            seed: the sampler seed (default: None, the generator as it is).
        """
        input_id = positions if self._input_id is None else self._input_id[positions]
        seeds = self.input_nodes[positions]
        with hold(self.node_sampler.lock):
            if seed is not None:
                self.node_sampler.manual_seed(seed)
            return self.node_sampler.sample(seeds, input_id)

    def _chunks(self, batches: list[torch.Tensor]) -> list[list[torch.Tensor]]:
        """The epoch's batches in the ``sample_group``-long runs that one call samples."""
        step = self.sample_group
        return [batches[start : start + step] for start in range(0, len(batches), step)]

    def _work(self, epoch: int, batches: list[torch.Tensor]) -> Iterator[SampledBatch]:
        index = 0
        for chunk in self._chunks(batches):
            if len(chunk) == 1:
                yield self._sample_batch(epoch, index, chunk[0])
            else:
                yield from self._sample_chunk(epoch, index, chunk)
            index += len(chunk)

    def _sample_chunk(
        self, epoch: int, first: int, chunk: list[torch.Tensor]
    ) -> list[SampledBatch]:
        """Batches ``first, first + 1, ...`` of ``epoch`` in one sampler call.

        The batches that `_sample_batch` gives one by one (`NeighborSampler.sample_batches`).
        """
        seeds = [self.input_nodes[positions] for positions in chunk]
        ids = [p if self._input_id is None else self._input_id[p] for p in chunk]
        batch_seeds = [self._batch_seed(epoch, first + i) for i in range(len(chunk))]
        with hold(self.node_sampler.lock):
            return self.node_sampler.sample_batches(seeds, batch_seeds=batch_seeds, input_ids=ids)

    def _from_workers(self, results: Iterator[WorkerResult]) -> Iterator[Any]:
        """Batches from torch's worker iterator, their counters added to `stats`."""
        while True:
            t0 = time.perf_counter()
            try:
                result = next(results)
            except StopIteration:
                return
            batch = result.batch
            if not result.fetched:
                t1 = time.perf_counter()
                batch = self._fetch(batch, None)
                self.stats.add_span("fetch", t1, time.perf_counter())
            add_counts(self.stats, result.counts)
            self.stats.batches += 1
            self.stats.add_span("wait", t0, time.perf_counter())
            yield batch
            del batch, result

    def _run(self, source: Iterator[Any]) -> Iterator[Any]:
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(self), desc=type(self).__name__, unit="batch")
        pin = (
            self.pin_memory
            and not self._use_workers
            and self.device.type == "cpu"
            and torch.cuda.is_available()
        )
        try:
            for batch in source:
                if bar is not None:
                    bar.set_postfix(self.stats.as_postfix(), refresh=False)
                    bar.update(1)
                out = self._deliver(batch)
                del batch  # hold no reference while the next batches are prepared
                if pin:
                    from torch.utils.data._utils.pin_memory import pin_memory

                    out = pin_memory(out, self.pin_memory_device or None)
                yield out
                del out
        finally:
            close = getattr(source, "close", None)
            if callable(close):
                close()
            self.stats.resolve(block=True)
            if bar is not None:
                bar.set_postfix(self.stats.as_postfix(), refresh=False)
                bar.close()

    def _collate(self, index: Any) -> Any:
        """The batch of the seeds at positions ``index`` (a list or tensor of positions).

        ``loader.collate_fn(index)`` calls it. As PyG's ``collate_fn``: samples the seeds'
        neighborhoods (with the sampler's current generator state) and joins them with their
        features. Torch's workers call it with a `BatchTask` instead, and get a
        `WorkerResult` back.

        Raises:
            IBPInputError: a position is outside ``[0, len(dataset))``.
        """
        if isinstance(index, BatchTask):
            return self._run_task(index)
        sampled = self._sample_positions(self._positions(index, "index"))
        return self._deliver(self._fetch(sampled, None))

    def __call__(self, index: Any) -> Any:
        """``loader(positions)``: the same as ``loader.collate_fn(positions)`` (as PyG's)."""
        return self._collate(index)

    def _run_task(self, task: BatchTask) -> WorkerResult:
        """Prepare one batch in a worker, counting into fresh counters."""
        own, self.stats = self.stats, LoaderStats()
        try:
            t0 = time.perf_counter()
            out = self._sample_batch(task.epoch, task.index, torch.from_numpy(task.positions))
            t1 = time.perf_counter()
            self.stats.add_span("sample", t0, t1)
            if self._fetch_in_worker:
                out = self._fetch(out, None)
                self.stats.add_span("fetch", t1, time.perf_counter())
            counts = {name: getattr(self.stats, name) for name in COUNTERS}
        finally:
            self.stats = own
        return WorkerResult(out, self._fetch_in_worker, counts)

    def __getstate__(self) -> dict[str, Any]:
        """What a spawned worker needs: no worker iterator, stream or process context."""
        state = self.__dict__.copy()
        state["_iterator"] = None
        state["_stream"] = None
        state["_DataLoader__multiprocessing_context"] = None
        return state

    # -- hooks -----------------------------------------------------------------------------
    def _refresh(self) -> None:  # noqa: B027 - an optional hook with nothing to do by default
        """Re-read what the batches take from the graph's data (each epoch; default: nothing)."""

    @abc.abstractmethod
    def _fetch(self, sampled: SampledBatch, stream: torch.cuda.Stream | None) -> Any:
        """Join a sampled subgraph with its features: the prepared batch.

        Runs on the side stream ``stream`` on a GPU (None on the CPU), and in a worker
        process when there are workers. Every CUDA tensor the consumer will read must be
        reachable from the result by `ibp_graph.prefetch.record_stream` (tensors, mappings,
        sequences, dataclasses).
        """

    def _deliver(self, batch: Any) -> Any:
        """What the consumer receives for a prepared batch (default: the batch itself)."""
        return batch
