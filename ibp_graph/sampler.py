"""Uniform multi-hop neighbor sampling over a `CSRGraph`, with PyG's batch layout.

The sampler is vectorised torch code (a Python loop over hops, never over nodes or edges), so
it runs unchanged on CPU and CUDA tensors: the device is the graph's.

The default semantics follow PyG's ``NeighborLoader`` (pyg-lib's ``neighbor_sample`` with
``csc=True``, ``replace=False``, ``directed=True``, ``disjoint=False``):

- ``node`` holds the seeds (duplicates included, each at its own position), then the nodes first
  reached in hop 1 in order of discovery, then those of hop 2, and so on.
- Hop ``h`` samples in-neighbors of the nodes added in hop ``h - 1`` (the seeds for hop 1), in
  the order they appear in ``node``; the nodes added in the last hop are not expanded.
- Each sampled edge ``u -> v`` gives ``row`` = local id of the neighbor ``u`` and ``col`` =
  local id of the target ``v``; edges are grouped by target in frontier order, and within a
  target come in CSR (edge) order. A neighbor that is already in ``node`` keeps its local id;
  a node that occurs several times among the seeds is referred to by its first position.
- A node with at most ``fanout`` in-neighbors (or any node with ``fanout = -1``) contributes
  all of them; otherwise ``fanout`` distinct ones, every such subset equally likely.
- No hops (``num_neighbors=[]``) give the seeds alone, without edges, as PyG does: nothing is
  drawn and no hop runs, on any backend.

The other modes of `NeighborSampler` (``replace``, ``disjoint``, ``subgraph_type``, ``draw``)
change one rule each; its docstring states them.

Two backends run the hops. ``"torch"`` (the default, any device) uses torch ops
(`ibp_graph.sample_draw`), picking per hop the cheapest of a few exact draws; on a CPU graph it
runs each hop as one compiled pass instead (`ibp_graph.sample_cpu`, Numba, the GIL released,
on ``torch.get_num_threads()`` threads, the same batches for any count) whenever Numba
imports. ``"kernel"`` (graphs on a CUDA device; needs CuPy) runs each hop with fanout up to
``MAX_K`` (or ``-1``) as the three kernels of ``cuda/sample_neighbors.cu`` and a prefix sum,
driven by `ibp_graph.sample_hop.launch_batch`, which reads a batch's sizes once, at its end,
where it can; fanouts above ``MAX_K`` take the torch path; with ``disjoint=True`` it keeps the
torch hop and draws with the kernel `ibp_graph.kernels.sample_neighbors.kernel_sample`. Both
are uniform and reproducible for a seed, but they draw different neighbors for the same seed.
Which one is faster depends on the graph and the GPU; ``benchmarks/sampling.py`` compares them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import torch

from .errors import (
    IBPDeviceError,
    IBPInputError,
    check_bool,
    check_choice,
    check_fanouts,
    check_int,
)
from .graph import CSRGraph
from .kernels.sample_neighbors import MAX_K as KERNEL_MAX_K
from .kernels.sample_neighbors import CudaHopKernels, kernel_sample
from .pinned import to_device
from .sample_draw import (
    RANDOM_BITS,
    exclusive_cumsum,
    floyd_sample,
    randint,
    random_keys_sample,
    replace_sample,
)
from .sample_hop import (
    HopKernels,
    LaunchedGroup,
    finish_group,
    launch_group,
    read_counts,
)
from .sample_index import UNSEEN, KeyIndex, dense_clear, dense_insert, dense_seed
from .sample_modes import induced_edges, to_bidirectional
from .sample_replay import BatchReplay

if TYPE_CHECKING:
    from .sample_cpu import Workspace

__all__ = ["NeighborSampler", "SampledBatch", "floyd_sample", "random_keys_sample"]

#: The values of ``NeighborSampler(backend=...)``.
BACKENDS = ("torch", "kernel")
#: The values of ``NeighborSampler(subgraph_type=...)``.
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
#: The values of ``NeighborSampler(draw=...)``.
DRAWS = ("once", "per_hop")
#: Per-hop cost model choosing between Floyd's algorithm (about ``rows * k * k / 2``
#: comparisons) and random keys over whole neighborhoods (a sort of ``sum(degree)`` entries).
_SORT_COST_PER_ENTRY = 16
#: Whether CPU graphs use the compiled hop of `ibp_graph.sample_cpu` (when Numba imports).
_COMPILED = True


def _cpu_hops() -> ModuleType:
    """`ibp_graph.sample_cpu`, imported on first use.

    Importing Numba takes a fraction of a second that GPU-only runs need not pay.
    """
    from . import sample_cpu

    return sample_cpu


@dataclass
class SampledBatch:
    """One sampled subgraph, laid out like PyG's ``SamplerOutput``.

    All tensors are int64 on the graph's device (``input_id`` stays as given).

    Attributes:
        node: global ids of the sampled nodes: the seeds first, then the nodes of each hop in
            order of discovery.
        row: local id (index into ``node``) of the source, i.e. the sampled neighbor, of every
            sampled edge.
        col: local id of the target of every sampled edge.
        edge: global edge id of every sampled edge (its position in the original
            ``edge_index``, see `CSRGraph.edge_ids`).
        batch_size: number of seeds (``node[:batch_size]`` are the seeds).
        num_sampled_nodes: nodes added per hop, starting with ``batch_size``; None for
            ``subgraph_type`` ``"bidirectional"`` or ``"induced"``, as in PyG.
        num_sampled_edges: edges sampled per hop; None where ``num_sampled_nodes`` is.
        input_id: positions of the seeds in the loader's input nodes (default: None).
        batch: with ``disjoint=True``, the seed (``0 .. batch_size - 1``) whose tree every node
            belongs to; otherwise None (default: None).
    """

    node: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    edge: torch.Tensor
    batch_size: int
    num_sampled_nodes: list[int] | None
    num_sampled_edges: list[int] | None
    input_id: torch.Tensor | None = None
    batch: torch.Tensor | None = None

    @property
    def edge_index(self) -> torch.Tensor:
        """``(2, num_edges)`` local ``[row, col]``: PyG's ``batch.edge_index``."""
        return torch.stack([self.row, self.col])

    @property
    def global_row(self) -> torch.Tensor:
        """Global id of the source of every sampled edge."""
        return self.node[self.row]

    @property
    def global_col(self) -> torch.Tensor:
        """Global id of the target of every sampled edge."""
        return self.node[self.col]

    @property
    def seed_node(self) -> torch.Tensor:
        """Global ids of the seeds, ``node[:batch_size]``."""
        return self.node[: self.batch_size]

    @property
    def num_nodes(self) -> int:
        """Length of ``node``."""
        return self.node.numel()

    @property
    def num_edges(self) -> int:
        """Number of sampled edges."""
        return self.row.numel()


def _check_backend(backend: object, graph: CSRGraph) -> str:
    backend = check_choice("backend", backend, BACKENDS)
    if backend == "kernel":
        if graph.device.type != "cuda":
            raise IBPDeviceError(
                "backend='kernel' launches a CUDA kernel, so it needs a graph on a CUDA "
                f"device, and this graph is on {graph.device}: move it with graph.to('cuda') "
                "or graph.to_uva(), or use backend='torch'"
            )
        from .kernels.runtime import cupy

        cupy()  # fail now, not at the first batch, when CuPy is missing
    return backend


class NeighborSampler:
    """Uniform multi-hop neighbor sampler, one fanout per hop (PyG's and DGL's semantics).

    Example:
        >>> edge_index = torch.tensor([[1, 2, 3, 0], [0, 0, 1, 3]])  # 1->0, 2->0, 3->1, 0->3
        >>> sampler = NeighborSampler(CSRGraph.from_edge_index(edge_index), [2, 1], seed=0)
        >>> batch = sampler.sample(torch.tensor([0]))
        >>> batch.node.tolist(), batch.edge_index.tolist(), batch.edge.tolist()
        ([0, 1, 2, 3], [[1, 2, 3], [0, 0, 1]], [0, 1, 2])
        >>> batch.num_sampled_nodes, batch.num_sampled_edges
        ([1, 2, 1], [2, 1])

    The default is PyG's ``NeighborLoader`` (see the module docstring). Each mode changes one
    rule:

    - ``replace=True``: a node with at least one in-neighbor gets exactly ``fanout`` of them,
      drawn independently and uniformly (repeats possible, adjacent in the output); ``-1`` still
      takes every in-neighbor once. As pyg-lib and DGL do.
    - ``disjoint=True``: every seed grows its own tree (PyG's ``disjoint``): a node reached from
      two seeds, or twice from one seed list position and another, gets one local id per seed,
      and `SampledBatch.batch` holds the seed index of every node. Within a tree the default
      rules hold (a node reached twice in one tree keeps its first local id).
    - ``subgraph_type="bidirectional"``: the sampled edges plus their reverses, each local pair
      once, sorted by ``(col, row)`` (PyG's ``SamplerOutput.to_bidirectional``). A reversed edge
      carries the id of the edge it reverses; a pair sampled twice keeps its first id.
      ``num_sampled_nodes`` and ``num_sampled_edges`` are None, as in PyG.
    - ``subgraph_type="induced"``: the nodes are sampled as usual, then the edges are every edge
      of the graph between two sampled nodes, grouped by target in the order of ``node``, in CSR
      order within a target, with their edge ids (PyG's ``induced``, computed by torch-sparse);
      ``num_sampled_nodes`` and ``num_sampled_edges`` are None.
    - ``draw="per_hop"`` (DGL's ``NeighborSampler``, one block per hop): hop ``h`` draws fresh
      in-neighbors for every node known before it, ``node[:sum(num_sampled_nodes[:h + 1])]``,
      not only for the nodes added by hop ``h - 1``. Hop ``h``'s ``num_sampled_edges[h]``
      entries of ``row``/``col``/``edge`` are then one block, whose destination nodes are
      ``node[:sum(num_sampled_nodes[:h + 1])]`` and whose source nodes are
      ``node[:sum(num_sampled_nodes[:h + 2])]`` (new nodes appended in order of discovery).
      ``draw="once"`` (the default, PyG) draws a node's neighbors only in the hop after the one
      that discovered it.

    ``num_neighbors=[]`` (no hops) gives the seeds alone in every mode, as PyG does (see
    `sample`).

    ``disjoint=True`` with ``subgraph_type="induced"`` (refused by PyG too), and
    ``draw="per_hop"`` with a ``subgraph_type`` other than ``"directional"`` (whose edges no
    longer form blocks), raise `IBPInputError`.

    The sampler keeps a ``(num_nodes,)`` int64 scratch map on the graph's device (allocated on
    first use, cleared after every batch, not pickled), and on the compiled CPU path buffers of
    about 40 bytes per sampled edge reused from batch to batch, so one instance must not run
    `sample` from several threads at once: threads that share one hold its `lock` around
    `manual_seed` and `sample` (the loaders do), which also keeps each batch's draws its own.
    Forked or spawned worker processes each get their own instance and lock. Workers of one
    process tree start from the same generator state: reseed each with `manual_seed`.

    On a CPU graph the hops run compiled (`ibp_graph.sample_cpu`: one pass per hop, without
    the GIL, a large hop's draws on ``torch.get_num_threads()`` threads, the same batches for
    any thread count) when Numba is installed, and with torch ops otherwise; both draw the same
    distribution, not the same neighbors.

    ``backend`` picks how a hop runs: ``"torch"`` with torch ops (CPU or CUDA); ``"kernel"``
    (graphs on a CUDA device) with the fused hop of `ibp_graph.sample_hop`, three CUDA kernels
    and a prefix sum per hop and one host read per batch, for fanouts up to
    `ibp_graph.kernels.sample_neighbors.MAX_K` (a fanout of ``-1`` reads its sizes first;
    larger fanouts use torch ops; with ``disjoint=True`` the kernel only draws the neighbors
    of nodes with more than ``fanout``). Both draw every subset with equal probability and are
    reproducible for a seed, but the two draw different neighbors for the same seed. Which is
    faster depends on the graph and the GPU: ``benchmarks/sampling.py`` measures both.

    ``cuda_graph=True`` (``"kernel"`` only) captures a batch's launches as a CUDA graph, once
    per batch size, and replays it for later batches of that size
    (`ibp_graph.sample_replay`): the same batches, with one launch from Python instead of the
    hops' launches and most of their torch ops (for 3 hops, 9 launches). It
    applies to batches whose hops all draw (``draw="once"``, every fanout in
    ``[0, MAX_K]``, not ``disjoint``); others run as without it, and batches of no hops
    launch nothing, so they are never captured. Each graph keeps its
    buffers in GPU memory (at most 56 bytes a slot: for 1,024 seeds and fanouts
    ``[15, 10, 5]``, 936,960 slots, about 52 MB). With torch before 2.12 only the main thread
    captures (`ibp_graph.sample_replay.cuda_capture`): on other threads batches run eagerly,
    unless their size was captured before (`capture_sizes`; the loaders capture their
    epoch's sizes where the epoch starts, so their prefetch thread replays them).

    `sample_batches` samples several batches in one call, the same batches as `sample` one
    by one: with ``"kernel"``, batches of one size run as one group, whose sizes the host
    reads once and which one CUDA graph replays with ``cuda_graph=True`` (its buffers are
    then those of every batch of the group). The hop kernels' random keys are drawn on the
    host (from a CPU generator seeded with ``seed``), so a seed gives the same batches on a
    GPU as with the kernels' source run on the host.

    Args:
        graph: the graph; sampling runs on its device.
        num_neighbors: in-neighbors to sample per node, one entry per hop; ``-1`` takes all of
            them, ``0`` none; ``[]`` gives the seeds only, as PyG (see `sample`).
        seed: seed of the generator (default: None, a non-deterministic seed).
        backend: ``"torch"`` or ``"kernel"`` (default: ``"torch"``).
        cuda_graph: replay captured launches, per batch size (``backend="kernel"`` only)
            (default: False).
        replace: draw with replacement (default: False).
        disjoint: one tree per seed, with `SampledBatch.batch` (default: False).
        subgraph_type: ``"directional"``, ``"bidirectional"`` or ``"induced"`` (PyG's
            ``SubgraphType`` members are accepted too) (default: ``"directional"``).
        draw: ``"once"`` (PyG) or ``"per_hop"`` (DGL blocks) (default: ``"once"``).

    Raises:
        IBPInputError: an argument is invalid (an unknown value is named with the allowed
            ones), or two arguments do not combine (both are named).
        IBPDeviceError: ``backend="kernel"`` with a graph that is not on a CUDA device.
        ImportError: ``backend="kernel"`` without CuPy.
    """

    #: Whether batches run through `BatchReplay` (``cuda_graph=True``).
    cuda_graph: bool = False

    def __init__(
        self,
        graph: CSRGraph,
        num_neighbors: Sequence[int],
        *,
        seed: int | None = None,
        backend: str = "torch",
        replace: bool = False,
        disjoint: bool = False,
        subgraph_type: str = "directional",
        draw: str = "once",
        cuda_graph: bool = False,
    ) -> None:
        if not isinstance(graph, CSRGraph):
            raise IBPInputError(f"graph must be a CSRGraph, got '{type(graph).__name__}'")
        self.graph = graph
        self.num_neighbors = check_fanouts("num_neighbors", num_neighbors)
        self.backend = _check_backend(backend, graph)
        self.replace = check_bool("replace", replace)
        self.disjoint = check_bool("disjoint", disjoint)
        self.subgraph_type = check_choice("subgraph_type", subgraph_type, SUBGRAPH_TYPES)
        self.draw = check_choice("draw", draw, DRAWS)
        if self.disjoint and self.subgraph_type == "induced":
            raise IBPInputError(
                "disjoint=True does not combine with subgraph_type='induced': an induced "
                "subgraph joins the seeds' trees (use disjoint=False or another subgraph_type)"
            )
        if self.draw == "per_hop" and self.subgraph_type != "directional":
            raise IBPInputError(
                f"draw='per_hop' needs subgraph_type='directional', got subgraph_type="
                f"{self.subgraph_type!r}: per-hop draws form one block per hop, which "
                "bidirectional or induced edges do not"
            )
        self.cuda_graph = check_bool("cuda_graph", cuda_graph)
        if self.cuda_graph and self.backend != "kernel":
            raise IBPInputError(
                "cuda_graph=True replays the hop kernels' launches, so it needs "
                f"backend='kernel', got backend={self.backend!r}"
            )
        self.generator = torch.Generator(device=graph.device)
        #: The hop kernels' random keys come from the host, seeded as ``generator`` is: they
        #: travel to the GPU with the seeds, in one copy.
        self._key_generator = torch.Generator()
        #: Held by a thread around its `manual_seed` and `sample` calls (see above).
        self.lock = threading.Lock()
        self.manual_seed(seed)
        self._map: torch.Tensor | None = None
        #: On a GPU, the stream of the last batch and an event after it cleared the map: a
        #: batch on another stream waits for it before writing the map.
        self._map_cleared: tuple[torch.cuda.Stream, torch.cuda.Event] | None = None
        self._arange: torch.Tensor | None = None
        #: The aranges a longer one replaced: on a GPU a batch queued on another stream may
        #: still read one, so none is freed while the sampler lives (together they hold less
        #: than the current one, which at least doubles each time).
        self._old_aranges: list[torch.Tensor] = []
        self._work: Workspace | None = None
        self._replay: BatchReplay | None = None
        self._hop_kernels = self._kernels_for_backend()

    def manual_seed(self, seed: int | None) -> None:
        """Reseed the generator (None: a non-deterministic seed).

        Raises:
            IBPInputError: ``seed`` is neither an int nor None.
        """
        if seed is None:
            self.seed = self.generator.seed()
        elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise IBPInputError(f"seed must be an int or None, got '{type(seed).__name__}'")
        else:
            self.seed = int(seed)
            self.generator.manual_seed(self.seed)
        self._key_generator.manual_seed(self.seed)

    def _kernels_for_backend(self) -> HopKernels | None:
        """The hop kernels of the ``"kernel"`` backend (None for ``"torch"``)."""
        return CudaHopKernels(self.graph.device) if self.backend == "kernel" else None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_map"] = state["_arange"] = state["_work"] = state["_hop_kernels"] = None
        state["_old_aranges"] = []
        state["_replay"] = state["_map_cleared"] = None
        state["generator"] = state["lock"] = state["_key_generator"] = None
        # bytes, not a tensor: a tensor made here would be freed before a spawned process
        # opens its shared memory (torch shares tensors between processes by handle)
        state["_generator_state"] = self.generator.get_state().numpy().tobytes()
        state["_key_generator_state"] = self._key_generator.get_state().numpy().tobytes()
        return state

    def __setstate__(self, state: dict) -> None:
        gen_state = state.pop("_generator_state")
        key_state = state.pop("_key_generator_state", None)
        for name, default in (
            ("backend", "torch"),
            ("replace", False),
            ("disjoint", False),
            ("subgraph_type", "directional"),
            ("draw", "once"),
            ("_arange", None),
            ("_old_aranges", []),
            ("_work", None),
            ("_replay", None),
            ("cuda_graph", False),
        ):
            state.setdefault(name, default)
        self.__dict__.update(state)
        self.lock = threading.Lock()
        self._hop_kernels = self._kernels_for_backend()
        self.generator = torch.Generator(device=self.graph.device)
        if isinstance(gen_state, bytes):
            gen_state = torch.frombuffer(bytearray(gen_state), dtype=torch.uint8)
        self.generator.set_state(gen_state)
        self._key_generator = torch.Generator()
        if key_state is None:  # pickled before the keys had a generator of their own
            self._key_generator.manual_seed(self.seed)
        else:
            self._key_generator.set_state(torch.frombuffer(bytearray(key_state), dtype=torch.uint8))

    def __repr__(self) -> str:
        modes = "".join(
            f", {name}={getattr(self, name)!r}"
            for name, default in (
                ("replace", False),
                ("disjoint", False),
                ("subgraph_type", "directional"),
                ("draw", "once"),
                ("cuda_graph", False),
            )
            if getattr(self, name) != default
        )
        return (
            f"NeighborSampler({self.graph!r}, num_neighbors={list(self.num_neighbors)}, "
            f"backend={self.backend!r}{modes})"
        )

    # ----------------------------------------------------------------------------------------

    def _check_seeds(self, seeds: object) -> torch.Tensor:
        """``seeds`` checked (`_seed_tensor`, `_check_range`), on the graph's device."""
        seeds = self._seed_tensor(seeds, "seeds")
        self._check_range([seeds], ["seeds"])
        # Through pinned memory to a GPU: no wait for the batches queued before.
        return to_device(seeds, self.graph.device)

    @staticmethod
    def _seed_tensor(seeds: object, name: str) -> torch.Tensor:
        """``seeds`` as a contiguous int64 tensor where it is, its form checked (not its ids)."""
        if isinstance(seeds, np.ndarray):
            seeds = torch.from_numpy(seeds)
        if not isinstance(seeds, torch.Tensor):
            raise IBPInputError(f"{name} must be a torch.Tensor, got '{type(seeds).__name__}'")
        if seeds.dtype.is_floating_point or seeds.dtype.is_complex or seeds.dtype == torch.bool:
            raise IBPInputError(f"{name} must hold integers, got dtype {seeds.dtype}")
        if seeds.dim() != 1:
            raise IBPInputError(f"{name} must be 1-D, got shape {tuple(seeds.shape)}")
        # Contiguous: the hop kernels read the seeds by address.
        return seeds.to(torch.int64).contiguous()

    def _check_range(self, batches: list[torch.Tensor], names: list[str]) -> None:
        """Raise where an id of ``batches`` is outside ``[0, num_nodes)``, naming the first one.

        Batch ``k`` is named ``names[k]``; one host read checks all of them.
        """
        n = self.graph.num_nodes
        flat = batches[0] if len(batches) == 1 else torch.cat(batches) if batches else None
        if flat is None or not flat.numel():
            return
        # Checked where the seeds are: on the CPU (the loaders' seeds) no GPU is waited for.
        lo, hi = read_counts(torch.stack(torch.aminmax(flat)))
        if lo < 0 or hi >= n:
            i = int(((flat < 0) | (flat >= n)).nonzero()[0, 0])
            for seeds, name in zip(batches, names, strict=True):
                if i < seeds.numel():
                    raise IBPInputError(
                        f"{name}[{i}] = {int(seeds[i])} is out of range for a graph of {n} nodes"
                    )
                i -= seeds.numel()

    @staticmethod
    def _check_input_id(input_id: object, seeds: torch.Tensor, name: str) -> None:
        if input_id is not None and (
            not isinstance(input_id, torch.Tensor) or input_id.shape != seeds.shape
        ):
            raise IBPInputError(
                f"{name} must be a tensor of the seeds' shape {tuple(seeds.shape)}, got "
                f"{getattr(input_id, 'shape', type(input_id).__name__)}"
            )

    def _scratch(self) -> torch.Tensor:
        if self._map is None:
            self._map = torch.full(
                (self.graph.num_nodes,), UNSEEN, dtype=torch.int64, device=self.graph.device
            )
            self._map_cleared = None
        elif self._map_cleared is not None:
            stream, cleared = self._map_cleared
            current = torch.cuda.current_stream(self.graph.device)
            if current != stream:  # on the same stream, the order of the queue suffices
                current.wait_event(cleared)
            self._map_cleared = None  # this batch's clearing comes after, on its stream
        return self._map

    def _note_map_cleared(self) -> None:
        """After a batch queued the clearing of the map: on a GPU, mark where it ends."""
        if self.graph.device.type == "cuda":
            stream = torch.cuda.current_stream(self.graph.device)
            self._map_cleared = (stream, stream.record_event())

    def _workspace(self) -> Workspace:
        if self._work is None:
            self._work = _cpu_hops().Workspace()
        return self._work

    def _iota(self, n: int) -> torch.Tensor:
        """``arange(m)`` for some ``m >= n``, kept between batches (never written to)."""
        iota = self._arange
        if iota is None or iota.numel() < n:
            if iota is not None:
                self._old_aranges.append(iota)
            iota = torch.arange(max(n, 2 * (0 if iota is None else iota.numel()), 1024))
            self._arange = iota = iota.to(self.graph.device)
        return iota

    def _draw_without_replacement(
        self, deg: torch.Tensor, fanout: int, sort_entries: int
    ) -> torch.Tensor:
        """``fanout`` distinct offsets per row of ``deg`` (each ``> fanout``), ascending.

        ``sort_entries`` is ``deg.sum()``, read by the caller with the hop's other sizes.
        """
        if self.backend == "kernel" and fanout <= KERNEL_MAX_K:
            key = randint(1, 1, self.generator, deg.device).view(1)
            return kernel_sample(deg, fanout, key)
        floyd_cost = deg.numel() * fanout * fanout // 2
        if floyd_cost > _SORT_COST_PER_ENTRY * sort_entries:
            return random_keys_sample(deg, fanout, self.generator, sort_entries)
        return floyd_sample(deg, fanout, self.generator)

    def _hop_entries(
        self, frontier: torch.Tensor, fanout: int, begin: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """CSR positions of the edges sampled into ``frontier`` and their targets' local ids.

        ``frontier`` is ``node[begin:begin + len(frontier)]``; the entries are grouped by target
        in frontier order. One host read (`read_counts`) gets every size the hop needs.
        """
        g = self.graph
        start = g.indptr.index_select(0, frontier)
        deg = g.indptr.index_select(0, frontier + 1).sub_(start)
        if fanout < 0:
            count = deg
        elif self.replace:
            count = deg.clamp(max=1).mul_(fanout)
        else:
            count = deg.clamp(max=fanout)
        if fanout > 0:  # rows whose neighbors are drawn: their number, and their degrees' sum
            drawn = deg > (0 if self.replace else fanout)
            sizes = torch.stack([count.sum(), drawn.sum(), deg.mul(drawn).sum()])
            total, num_drawn, drawn_entries = read_counts(sizes)
        else:
            (total,) = read_counts(count.sum().view(1))
        iota = self._iota(max(total, begin + frontier.numel()))
        col = torch.repeat_interleave(
            iota[begin : begin + frontier.numel()], count, output_size=total
        )
        first = exclusive_cumsum(count)
        # Entry j of a target takes its j-th in-neighbor; sampled targets are overwritten below.
        pos = torch.repeat_interleave(start - first, count, output_size=total).add_(iota[:total])
        if fanout > 0 and num_drawn:
            rows = torch.nonzero_static(drawn, size=num_drawn).squeeze(1)  # no host read
            rows_deg = deg.index_select(0, rows)
            if self.replace:
                chosen = replace_sample(rows_deg, fanout, self.generator)
            else:
                chosen = self._draw_without_replacement(rows_deg, fanout, drawn_entries)
            slots = first.index_select(0, rows).unsqueeze(1) + iota[:fanout]
            chosen += start.index_select(0, rows).unsqueeze(1)
            pos.index_copy_(0, slots.view(-1), chosen.view(-1))
        return pos, col

    def sample(self, seeds: torch.Tensor, input_id: torch.Tensor | None = None) -> SampledBatch:
        """Sample the multi-hop in-neighborhood of ``seeds``.

        Without hops (``num_neighbors=[]``) the batch is the seeds, as PyG gives it: ``node``
        a copy of ``seeds`` (repeats kept), no edges, ``num_sampled_nodes == [len(seeds)]``
        and ``num_sampled_edges == []`` (None for ``"bidirectional"`` and ``"induced"``),
        ``batch`` ``0 .. len(seeds) - 1`` with ``disjoint=True``; ``"induced"`` has the
        graph's edges between the seeds. Nothing is drawn from the generator and no hop
        kernel or hop op runs.

        Args:
            seeds: 1-D integer tensor of global node ids in ``[0, num_nodes)``; duplicates are
                distinct seeds.
            input_id: positions of the seeds in the loader's input nodes, stored as given
                (default: None).

        Returns:
            The batch, on the graph's device.

        Raises:
            IBPInputError: ``seeds`` is not a 1-D integer tensor, or holds an id outside
                ``[0, num_nodes)`` (naming the first one), or ``input_id`` has another length.
        """
        if self._groups():
            seeds = self._seed_tensor(seeds, "seeds")
            self._check_input_id(input_id, seeds, "input_id")
            self._check_range([seeds], ["seeds"])
            return self._sample_group([seeds], [None], [input_id])[0]
        seeds = self._check_seeds(seeds)
        self._check_input_id(input_id, seeds, "input_id")
        if not self.num_neighbors:
            out = self._sample_seeds(seeds)
        elif self.disjoint:
            out = self._sample_disjoint(seeds)
        else:
            out = self._sample_shared(seeds)
        return self._finish(out, input_id)

    def _finish(self, out: SampledBatch, input_id: torch.Tensor | None) -> SampledBatch:
        """A batch with its ``input_id``, and with ``"bidirectional"``, its reversed edges."""
        out.input_id = input_id
        if self.subgraph_type == "bidirectional":
            out.row, out.col, out.edge = to_bidirectional(out.row, out.col, out.edge, out.num_nodes)
            out.num_sampled_nodes = out.num_sampled_edges = None
        return out

    def sample_batches(
        self,
        batches: Sequence[torch.Tensor],
        *,
        batch_seeds: Sequence[int | None] | None = None,
        input_ids: Sequence[torch.Tensor | None] | None = None,
    ) -> list[SampledBatch]:
        """Sample several batches at once: the batches that `sample` gives one by one.

        Batch ``k`` is ``sample(batches[k], input_ids[k])`` after ``manual_seed(batch_seeds[k])``
        (no reseeding where the seed is None), and the generators are left as after those calls.
        With ``backend="kernel"`` (not ``disjoint``) each run of consecutive batches of one size
        is launched as one group (`ibp_graph.sample_hop.launch_group`): the host reads the
        group's sizes once, after its last batch, and with ``cuda_graph=True`` one CUDA graph
        replays the whole group (`ibp_graph.sample_replay`; captured the second time a group of
        that shape comes, and kept, at most 56 bytes a slot, for every batch of the group). The
        seeds and keys of a group reach the GPU in one copy. Every batch of a group but the
        last is cleared from the sampler's map by a kernel that reads its sizes there. With
        ``subgraph_type="induced"``, with a fanout above
        `ibp_graph.kernels.sample_neighbors.MAX_K` (a hop of torch ops, which draws from
        ``generator``), and on the other backends, batches are sampled one by one.

        Args:
            batches: 1-D integer tensors of global node ids, one per batch.
            batch_seeds: per batch, the seed to give `manual_seed` first, or None (default:
                None, no reseeding).
            input_ids: per batch, its ``input_id`` for `sample` (default: None).

        Returns:
            The batches, in order, on the graph's device.

        Raises:
            IBPInputError: ``batches`` is not a list or tuple of 1-D integer tensors,
                ``batch_seeds`` or ``input_ids`` has another length, a seed is not an int or
                None, an ``input_ids`` entry has another shape than its batch, or an id is
                outside ``[0, num_nodes)`` (naming the batch and the position).
        """
        if not isinstance(batches, (list, tuple)):
            raise IBPInputError(
                f"batches must be a list or tuple of tensors, got '{type(batches).__name__}'"
            )
        count = len(batches)
        batch_seeds = self._per_batch(batch_seeds, "batch_seeds", count)
        input_ids = self._per_batch(input_ids, "input_ids", count)
        for seed in batch_seeds:
            if seed is not None and (
                isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
            ):
                raise IBPInputError(
                    f"batch_seeds must hold ints or None, got '{type(seed).__name__}'"
                )
        names = [f"batches[{k}]" for k in range(count)]
        tensors = [self._seed_tensor(b, name) for b, name in zip(batches, names, strict=True)]
        for k, (seeds, input_id) in enumerate(zip(tensors, input_ids, strict=True)):
            self._check_input_id(input_id, seeds, f"input_ids[{k}]")
        if len({t.device for t in tensors}) > 1:  # where the first batch is, to be checked
            tensors = [t.to(tensors[0].device) for t in tensors]
        self._check_range(tensors, names)  # every batch before any is sampled
        if not self._groups():
            out = []
            for seeds, seed, input_id in zip(tensors, batch_seeds, input_ids, strict=True):
                if seed is not None:
                    self.manual_seed(seed)
                out.append(self.sample(seeds, input_id))
            return out
        out, start = [], 0
        for _, group in self.group_shapes([t.numel() for t in tensors]):
            part = slice(start, start + group)
            out += self._sample_group(tensors[part], batch_seeds[part], input_ids[part])
            start += group
        return out

    def group_shapes(self, sizes: Sequence[int]) -> list[tuple[int, int]]:
        """The groups that `sample_batches` makes of batches of ``sizes`` seeds, in order.

        Each is ``(batch size, batches)``: a run of consecutive batches of one size (one
        batch each with ``subgraph_type="induced"``, whose edges need the sampler's map
        after the hops, with a fanout above ``MAX_K``, whose hop of torch ops draws from the
        generator, and on backends that sample one by one).
        """
        shapes: list[tuple[int, int]] = []
        # A hop of torch ops (a fanout above MAX_K) draws from `generator`, which a group
        # seeds for every batch before launching any: one batch a group then.
        runs = (
            self._groups()
            and self.subgraph_type != "induced"
            and all(k <= KERNEL_MAX_K for k in self.num_neighbors)
        )
        for size in sizes:
            if runs and shapes and shapes[-1][0] == size:
                shapes[-1] = (size, shapes[-1][1] + 1)
            else:
                shapes.append((int(size), 1))
        return shapes

    @staticmethod
    def _per_batch(values: Sequence | None, name: str, count: int) -> list:
        if values is None:
            return [None] * count
        if not isinstance(values, (list, tuple)) or len(values) != count:
            raise IBPInputError(
                f"{name} must be a list or tuple of one entry per batch ({count}), got "
                f"{len(values) if isinstance(values, (list, tuple)) else type(values).__name__}"
            )
        return list(values)

    @property
    def replayable(self) -> bool:
        """Whether the hop kernels launch this sampler's batches without a host read on the way.

        True with the ``"kernel"`` backend, every fanout drawn by the kernels (``0`` to
        `ibp_graph.kernels.sample_neighbors.MAX_K`), ``draw="once"``, not ``disjoint`` and at
        least one hop: such batches depend on their size alone, so ``cuda_graph=True``
        captures and replays them (a batch whose frontier bound passes a few million slots
        still reads its sizes, and is then not captured).
        """
        return (
            self._hop_kernels is not None
            and not self.disjoint
            and self.draw == "once"
            and bool(self.num_neighbors)
            and all(0 <= k <= KERNEL_MAX_K for k in self.num_neighbors)
        )

    def _groups(self) -> bool:
        """Whether batches run as groups of the hop kernels (`_sample_group`)."""
        return self._hop_kernels is not None and not self.disjoint and bool(self.num_neighbors)

    def _sample_group(
        self,
        seeds: list[torch.Tensor],
        batch_seeds: list[int | None],
        input_ids: list[torch.Tensor | None],
    ) -> list[SampledBatch]:
        """Batches of one size as one group of the hop kernels (see `sample_batches`).

        ``seeds``: `_seed_tensor` of each batch, its ids checked (`_check_range`).
        """
        count, size, hops = len(seeds), seeds[0].numel(), len(self.num_neighbors)
        device = self.graph.device
        on_host = all(t.device.type == "cpu" for t in seeds)
        # The group's inputs: seeds, then keys. From the host (the loaders' seeds), in pinned
        # memory, so that they reach a GPU in one copy that waits for nothing queued before.
        inputs = torch.empty(
            count * (size + hops),
            dtype=torch.int64,
            device="cpu" if on_host else device,
            pin_memory=on_host and device.type == "cuda",
        )
        batch_part = inputs[: count * size].view(count, size)
        torch.stack([t.to(inputs.device) for t in seeds], out=batch_part)
        key_part = inputs[count * size :].view(count, hops)
        keys = key_part if on_host else torch.empty((count, hops), dtype=torch.int64)
        for row, seed in zip(keys, batch_seeds, strict=True):
            if seed is not None:
                self.manual_seed(seed)
            torch.randint(0, 2**RANDOM_BITS, (hops,), generator=self._key_generator, out=row)
        if not on_host:
            key_part.copy_(to_device(keys, device))
        finished = self._run_group(inputs, size, count)
        return [
            self._finish(self._batch(node, row, col, edge, size, nodes, edges), input_id)
            for (node, row, col, edge, nodes, edges), input_id in zip(
                finished, input_ids, strict=True
            )
        ]

    def _batch(
        self,
        node: torch.Tensor,
        row: torch.Tensor,
        col: torch.Tensor,
        edge: torch.Tensor,
        batch_size: int,
        num_nodes: list[int],
        num_edges: list[int],
    ) -> SampledBatch:
        """A batch without trees (``batch``); ``"induced"`` gives no counts per hop, as PyG."""
        induced = self.subgraph_type == "induced"
        return SampledBatch(
            node=node,
            row=row,
            col=col,
            edge=edge,
            batch_size=batch_size,
            num_sampled_nodes=None if induced else num_nodes,
            num_sampled_edges=None if induced else num_edges,
        )

    def _run_group(self, inputs: torch.Tensor, size: int, count: int) -> list:
        """`ibp_graph.sample_hop.finish_group` of a group, the dense map left empty.

        ``inputs``: ``count`` batches of ``size`` seeds (ids checked), then their keys. With
        ``"induced"`` (one batch), its edges are the induced ones.
        """
        g = self.graph
        fanouts = self.num_neighbors
        local = self._scratch()
        iota = self._iota(size)
        kernels = self._hop_kernels

        def launch(on_device: torch.Tensor) -> LaunchedGroup:
            return launch_group(
                kernels, g, local, on_device[: count * size].view(count, size), fanouts,
                replace=self.replace, per_hop=self.draw == "per_hop",
                keys=on_device[count * size :].view(count, -1), torch_hop=self._torch_hop,
                iota=iota,
            )  # fmt: skip

        finished: list = []
        try:
            if self.cuda_graph and size:
                if self._replay is None:
                    self._replay = BatchReplay()
                finished = self._replay.sample(launch, inputs, (size, count), g.device, kernels)
            else:
                finished = finish_group(launch(inputs.to(g.device, non_blocking=True)), kernels)
            if self.subgraph_type == "induced":
                node = finished[-1][0]
                row, col, edge = induced_edges(g, *self._hop_entries(node, -1, 0), local)
                finished[-1] = (node, row, col, edge, *finished[-1][4:])
        finally:
            self._release_map(local, finished[-1][0] if finished else None, bool(finished))
        return finished

    def capture_sizes(self, sizes: Iterable[int], group: int = 1) -> list[int]:
        """With ``cuda_graph=True``, capture the launches of batches of ``sizes`` seeds now.

        With ``group > 1``, of groups of ``group`` such batches, as `sample_batches` launches
        them.

        A batch size is otherwise captured the second time a batch of that size comes, on the
        thread that samples it; with torch before 2.12 only the main thread can capture
        (`ibp_graph.sample_replay.cuda_capture`), so a loader that samples on its prefetch
        thread calls this where its epoch starts. Each size is captured from batches of the
        node ids ``0 .. size - 1`` with keys of zeros, on this thread and its current stream:
        the generator is not drawn from, so the batches sampled later are the same as
        without it. A size runs eagerly as before where its launches read a size on the way
        (a fanout of ``-1``, ``draw="per_hop"``, ...), where it exceeds the graph's nodes,
        once `ibp_graph.sample_replay.MAX_GRAPHS` sizes are kept, or after a capture failed
        (one warning says why). Hold ``lock`` around it where other threads use the sampler.

        Args:
            sizes: batch sizes, most important first.
            group: batches per group (default: 1).

        Returns:
            Those of ``sizes`` that replay from a CUDA graph now (none without
            ``cuda_graph=True``, or with ``disjoint=True``, ``draw="per_hop"``, a fanout of
            ``-1`` or above `ibp_graph.kernels.sample_neighbors.MAX_K`, or no hops
            (``num_neighbors=[]``): such batches are never captured, and none is sampled
            here).

        Raises:
            IBPInputError: ``sizes`` is not an iterable of ints, or holds a negative one
                (named).
        """
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
            raise IBPInputError(f"sizes must be an iterable of ints, got '{type(sizes).__name__}'")
        sizes = list(sizes)
        for size in sizes:
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
                raise IBPInputError(f"sizes must hold ints >= 0, got {size!r}")
        group = check_int("group", group, 1)
        if not self.cuda_graph or not self.replayable:
            return []  # batches never captured (`replayable`): nothing to sample
        if self._replay is None:
            self._replay = BatchReplay()
        replay, device = self._replay, self.graph.device
        keys = torch.zeros(group * len(self.num_neighbors), dtype=torch.int64, device=device)
        sizes = list(dict.fromkeys(int(size) for size in sizes))
        for size in sizes:
            inputs = torch.cat([torch.arange(size, device=device).repeat(group), keys])
            # two groups at most: the first runs eagerly and shows whether the launches
            # read a size, the second is captured
            for _ in range(2):
                if not (1 <= size <= self.graph.num_nodes and replay.wants((size, group))):
                    break
                self._run_group(inputs, size, group)
        return [size for size in sizes if (size, group) in replay.graphs]

    def _sample_seeds(self, seeds: torch.Tensor) -> SampledBatch:
        """The batch of no hops (``num_neighbors=[]``): the seeds, and nothing drawn.

        ``"induced"`` takes the graph's edges between the seeds (each position of a repeated
        seed is a target of its own, as after hops); the other modes have no edges.
        """
        batch_size = seeds.numel()
        node = seeds.clone()  # the batch's own tensor, as after hops
        row, col, edge = (seeds.new_empty(0) for _ in range(3))
        induced = self.subgraph_type == "induced"
        if induced:
            local = self._scratch()
            ok = False
            try:
                dense_seed(local, node, self._iota(batch_size))
                row, col, edge = induced_edges(self.graph, *self._hop_entries(node, -1, 0), local)
                ok = True
            finally:
                self._release_map(local, node, ok)
        out = self._batch(node, row, col, edge, batch_size, [batch_size], [])
        if self.disjoint:
            out.batch = torch.arange(batch_size, device=node.device)
        return out

    def _compiled_hop(self) -> bool:
        """Whether hops run in `ibp_graph.sample_cpu` (CPU graph, Numba, torch backend)."""
        return (
            _COMPILED
            and self._hop_kernels is None
            and self.backend == "torch"
            and self.graph.device.type == "cpu"
            and _cpu_hops().available()
        )

    def _sample_compiled(self, seeds: torch.Tensor, local: torch.Tensor | None) -> tuple:
        """All hops in `ibp_graph.sample_cpu`, local ids in the dense map ``local``.

        With ``local=None`` the trees are disjoint (local ids keyed by seed index and node).
        """
        g = self.graph
        keys = randint(len(self.num_neighbors), 1, self.generator, seeds.device)
        return _cpu_hops().sample(
            g.indptr, g.indices, g.edge_ids, seeds, self.num_neighbors, keys.view(-1).tolist(),
            replace=self.replace, per_hop=self.draw == "per_hop", disjoint=local is None,
            local=local, work=self._workspace(), threads=torch.get_num_threads(),
        )  # fmt: skip

    def _try_compiled(self, seeds: torch.Tensor, local: torch.Tensor | None) -> tuple | None:
        """`_sample_compiled`, or None where Numba could not compile the hops (`jit`)."""
        from .jit import compiled_call

        return compiled_call(self._sample_compiled, seeds, local)[1]

    def _clear_compiled(self, local: torch.Tensor, node: torch.Tensor) -> None:
        """Clear a batch's nodes from the map with the compiled loop.

        Where Numba could not compile it (`jit.compiled_call`), the next batch takes a fresh
        map instead.
        """
        from .jit import compiled_call

        if not compiled_call(_cpu_hops().clear, local, node)[0]:
            self._map = None

    def _release_map(self, local: torch.Tensor, node: torch.Tensor, ok: bool) -> None:
        """After a batch on the dense map: clear ``node``'s entries, or drop the map.

        A batch that failed midway leaves the map in an unknown state: the next batch takes
        a fresh one, and the CUDA graphs that wrote into the old one are dropped too.
        """
        if ok:
            dense_clear(local, node)
            self._note_map_cleared()
        else:
            self._map = None
            self._replay = None

    def _sample_shared(self, seeds: torch.Tensor) -> SampledBatch:
        """One subgraph for all seeds, with torch ops or compiled; local ids from the dense map.

        The hop kernels run batches as groups instead (`_sample_group`).
        """
        g = self.graph
        compiled = self._compiled_hop()
        batch_size = seeds.numel()
        local = self._scratch()
        node = seeds
        ok = False
        try:
            hops = self._try_compiled(seeds, local) if compiled else None
            if hops is not None:
                node, row, col, edge, num_nodes, num_edges, _ = hops
            else:
                if compiled:  # Numba could not compile the hops: torch ops, on a fresh map
                    compiled, self._map = False, None
                    local = self._scratch()
                node, row, col, edge, num_nodes, num_edges = self._hops_with_ops(seeds, local)
            if self.subgraph_type == "induced":
                row, col, edge = induced_edges(g, *self._hop_entries(node, -1, 0), local)
            ok = True
        finally:
            if ok and compiled:
                self._clear_compiled(local, node)
            else:
                self._release_map(local, node, ok)
        return self._batch(node, row, col, edge, batch_size, num_nodes, num_edges)

    def _hops_with_ops(
        self, seeds: torch.Tensor, local: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[int]]:
        """The hops of `_sample_shared` with torch ops (any device)."""
        batch_size = seeds.numel()
        per_hop = self.draw == "per_hop"
        iota = self._iota(batch_size)
        dense_seed(local, seeds, iota)
        nodes, rows, cols, edges = [seeds], [], [], []
        num_nodes, num_edges = [batch_size], []
        empty = seeds.new_empty(0)
        frontier, begin, end = seeds, 0, batch_size
        for fanout in self.num_neighbors:
            if per_hop:  # every node known so far
                frontier, begin = torch.cat(nodes), 0
            if fanout == 0 or frontier.numel() == 0:
                loc, col, edge, fresh = empty, empty, empty, empty
            else:
                loc, col, edge, fresh = self._torch_hop(frontier, fanout, begin, end)
            rows.append(loc)
            cols.append(col)
            edges.append(edge)
            nodes.append(fresh)
            num_nodes.append(fresh.numel())
            num_edges.append(loc.numel())
            frontier, begin, end = fresh, end, end + fresh.numel()
        node, row, col, edge = (torch.cat(x) for x in (nodes, rows, cols, edges))
        return node, row, col, edge, num_nodes, num_edges

    def _torch_hop(
        self, frontier: torch.Tensor, fanout: int, begin: int, end: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One hop with torch ops: ``(row, col, edge, fresh)``, new nodes numbered from ``end``."""
        g = self.graph
        pos, col = self._hop_entries(frontier, fanout, begin)
        nbr = g.indices.index_select(0, pos).long()
        loc, fresh = dense_insert(self._scratch(), nbr, end, self._iota(nbr.numel()))
        return loc, col, g.edge_ids.index_select(0, pos), fresh

    def _sample_disjoint(self, seeds: torch.Tensor) -> SampledBatch:
        """One tree per seed; a node's key is ``seed index * num_nodes + global id``."""
        g = self.graph
        hops = self._try_compiled(seeds, None) if self._compiled_hop() else None
        if hops is not None:
            node, row, col, edge, num_nodes, num_edges, tree = hops
            return SampledBatch(
                node=node,
                row=row,
                col=col,
                edge=edge,
                batch_size=seeds.numel(),
                num_sampled_nodes=num_nodes,
                num_sampled_edges=num_edges,
                batch=tree,
            )
        n = g.num_nodes
        batch_size = seeds.numel()
        seed_batch = self._iota(batch_size)[:batch_size].clone()
        index = KeyIndex(seed_batch * n + seeds)
        nodes, batches, rows, cols, edges = [seeds], [seed_batch], [], [], []
        num_nodes, num_edges = [batch_size], []
        empty = seeds.new_empty(0)
        per_hop = self.draw == "per_hop"
        frontier, frontier_batch, begin = seeds, seed_batch, 0
        for fanout in self.num_neighbors:
            if per_hop:
                frontier, frontier_batch, begin = torch.cat(nodes), torch.cat(batches), 0
            if fanout == 0 or frontier.numel() == 0:
                pos, col = empty, empty
            else:
                pos, col = self._hop_entries(frontier, fanout, begin)
            nbr = g.indices.index_select(0, pos).long()
            loc, fresh = index.insert(frontier_batch.index_select(0, col - begin) * n + nbr)
            fresh_batch = torch.div(fresh, n, rounding_mode="floor")
            fresh = fresh - fresh_batch * n
            rows.append(loc)
            cols.append(col)
            edges.append(g.edge_ids.index_select(0, pos))
            begin = sum(num_nodes)
            nodes.append(fresh)
            batches.append(fresh_batch)
            num_nodes.append(fresh.numel())
            num_edges.append(pos.numel())
            frontier, frontier_batch = fresh, fresh_batch
        return SampledBatch(
            node=torch.cat(nodes),
            row=torch.cat(rows),
            col=torch.cat(cols),
            edge=torch.cat(edges),
            batch_size=batch_size,
            num_sampled_nodes=num_nodes,
            num_sampled_edges=num_edges,
            batch=torch.cat(batches),
        )
