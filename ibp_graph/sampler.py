"""Uniform multi-hop neighbor sampling over a `CSRGraph`, with PyG's batch layout.

The sampler is vectorised torch code (a Python loop over hops and, inside a hop, over the
``fanout`` draws, never over nodes or edges), so it runs unchanged on CPU and CUDA tensors: the
device is the graph's.

Semantics follow PyG's ``NeighborLoader`` (pyg-lib's ``neighbor_sample`` with ``csc=True``,
``replace=False``, ``directed=True``):

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

Two backends draw those subsets. ``"torch"`` (the default, any device) uses `floyd_sample` or
`random_keys_sample`, whichever a per-hop cost model finds cheaper. ``"kernel"`` (graphs on a
CUDA device; needs CuPy) launches the CUDA kernel of ``cuda/sample_neighbors.cu``
(`ibp_graph.kernels.sample_neighbors.kernel_sample`) for fanouts up to its ``MAX_K``, and the
torch path above that. Both are uniform and reproducible for a seed, but they draw different
neighbors for the same seed. Which one is faster depends on the graph and the GPU;
``benchmarks/sampling.py`` compares them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .errors import IBPDeviceError, IBPInputError
from .graph import CSRGraph
from .kernels.sample_neighbors import MAX_K as KERNEL_MAX_K
from .kernels.sample_neighbors import kernel_sample

__all__ = ["NeighborSampler", "SampledBatch", "floyd_sample", "random_keys_sample"]

#: Random draws are 62-bit integers reduced modulo the range (bias < range / 2**62).
_RANDOM_BITS = 62
#: The values of ``NeighborSampler(backend=...)``.
BACKENDS = ("torch", "kernel")
#: Per-hop cost model choosing between Floyd's algorithm (about ``rows * k * k / 2``
#: comparisons) and random keys over whole neighborhoods (a sort of ``sum(degree)`` entries).
_SORT_COST_PER_ENTRY = 16


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
        num_sampled_nodes: nodes added per hop, starting with ``batch_size``.
        num_sampled_edges: edges sampled per hop.
        input_id: positions of the seeds in the loader's input nodes (default: None).
    """

    node: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    edge: torch.Tensor
    batch_size: int
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    input_id: torch.Tensor | None = None

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


def _check_num_neighbors(num_neighbors: object) -> tuple[int, ...]:
    if not isinstance(num_neighbors, (list, tuple)):
        raise IBPInputError(
            f"num_neighbors must be a list of ints, got '{type(num_neighbors).__name__}'"
        )
    if not num_neighbors:
        raise IBPInputError("num_neighbors must be a non-empty list of ints (one per hop)")
    out = []
    for i, k in enumerate(num_neighbors):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise IBPInputError(
                f"num_neighbors must be a list of ints, got '{type(k).__name__}' at index {i}"
            )
        if k < -1:
            raise IBPInputError(
                f"num_neighbors[{i}] must be >= -1 (-1: all neighbors, 0: none), got {int(k)}"
            )
        out.append(int(k))
    return tuple(out)


def _check_backend(backend: object, graph: CSRGraph) -> str:
    if not isinstance(backend, str) or backend not in BACKENDS:
        got = repr(backend) if isinstance(backend, str) else f"'{type(backend).__name__}'"
        raise IBPInputError(f"backend must be 'torch' or 'kernel', got {got}")
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


def _exclusive_cumsum(x: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(x, 0) - x


def _randint(n: int, k: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """``(k, n)`` uniform 62-bit non-negative int64 draws."""
    return torch.randint(
        0, 2**_RANDOM_BITS, (k, n), generator=generator, device=device, dtype=torch.int64
    )


def floyd_sample(deg: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """``k`` distinct offsets in ``[0, deg[i])`` per row, uniformly, by Floyd's algorithm.

    Step ``s`` draws ``t`` uniform in ``[0, j]`` with ``j = deg - k + s`` and keeps ``t``, or
    ``j`` if ``t`` was already taken; this yields every ``k``-subset with equal probability.
    One vectorised step per draw: ``O(rows * k^2)`` comparisons.

    Args:
        deg: ``(rows,)`` int64 population sizes, each ``> k``.
        k: sample size, ``>= 1``.
        generator: random source on ``deg``'s device.

    Returns:
        ``(rows, k)`` int64 offsets, ascending within each row.
    """
    rows = deg.numel()
    draws = _randint(rows, k, generator, deg.device)
    chosen = torch.empty((rows, k), dtype=torch.int64, device=deg.device)
    for s in range(k):
        j = deg - (k - s)
        t = draws[s] % (j + 1)
        if s:
            taken = (chosen[:, :s] == t.unsqueeze(1)).any(dim=1)
            t = torch.where(taken, j, t)
        chosen[:, s] = t
    return chosen.sort(dim=1).values


def random_keys_sample(
    deg: torch.Tensor, k: int, generator: torch.Generator, total: int | None = None
) -> torch.Tensor:
    """``k`` distinct offsets in ``[0, deg[i])`` per row: the ``k`` smallest of random keys.

    Every entry of every row gets an independent uniform 62-bit key (ties, with probability
    about ``deg^2 / 2^63``, go to the lower offset); the ``k`` entries with the smallest keys
    form a uniform random ``k``-subset. Costs a sort of ``sum(deg)`` entries.

    Args:
        deg: ``(rows,)`` int64 population sizes, each ``> k``.
        k: sample size, ``>= 1``.
        generator: random source on ``deg``'s device.
        total: ``deg.sum()`` if already known.

    Returns:
        ``(rows, k)`` int64 offsets, ascending within each row.
    """
    rows = deg.numel()
    if total is None:
        total = int(deg.sum())
    device = deg.device
    row = torch.repeat_interleave(torch.arange(rows, device=device), deg, output_size=total)
    offset = torch.arange(total, device=device) - _exclusive_cumsum(deg)[row]
    keys = _randint(total, 1, generator, device)[0]
    order = torch.sort(keys, stable=True).indices
    order = order[torch.sort(row[order], stable=True).indices]  # by row, then by key
    # After the sort, position p still belongs to row[p] with rank offset[p] in that row.
    picked = order[offset < k]
    return offset[picked].view(rows, k).sort(dim=1).values


class NeighborSampler:
    """Uniform neighbor sampler without replacement, one fanout per hop (PyG semantics).

    Example:
        >>> edge_index = torch.tensor([[1, 2, 3, 0], [0, 0, 1, 3]])  # 1->0, 2->0, 3->1, 0->3
        >>> sampler = NeighborSampler(CSRGraph.from_edge_index(edge_index), [2, 1], seed=0)
        >>> batch = sampler.sample(torch.tensor([0]))
        >>> batch.node.tolist(), batch.edge_index.tolist(), batch.edge.tolist()
        ([0, 1, 2, 3], [[1, 2, 3], [0, 0, 1]], [0, 1, 2])
        >>> batch.num_sampled_nodes, batch.num_sampled_edges
        ([1, 2, 1], [2, 1])

    The sampler keeps a ``(num_nodes,)`` int64 scratch map on the graph's device (allocated on
    first use, cleared after every batch, not pickled), so one instance must not run
    `sample` from several threads at once; forked or spawned worker processes each get their
    own. Workers of one process tree start from the same generator state: reseed each with
    `manual_seed`.

    ``backend`` picks how the neighbors of a node with more than ``fanout`` of them are drawn:
    ``"torch"`` with torch ops (CPU or CUDA), ``"kernel"`` with a CUDA kernel (CUDA graphs,
    fanouts up to `ibp_graph.kernels.sample_neighbors.MAX_K`; larger fanouts use torch ops).
    Everything else is the same code. Both draw every subset with equal probability and are
    reproducible for a seed, but the two draw different neighbors for the same seed. Which is
    faster depends on the graph and the GPU: ``benchmarks/sampling.py`` measures both.

    Args:
        graph: the graph; sampling runs on its device.
        num_neighbors: in-neighbors to sample per node, one entry per hop; ``-1`` takes all of
            them, ``0`` none.
        seed: seed of the generator (default: None, a non-deterministic seed).
        backend: ``"torch"`` or ``"kernel"`` (default: ``"torch"``).

    Raises:
        IBPInputError: an argument is invalid (an unknown ``backend`` is named).
        IBPDeviceError: ``backend="kernel"`` with a graph that is not on a CUDA device.
        ImportError: ``backend="kernel"`` without CuPy.
    """

    def __init__(
        self,
        graph: CSRGraph,
        num_neighbors: Sequence[int],
        *,
        seed: int | None = None,
        backend: str = "torch",
    ) -> None:
        if not isinstance(graph, CSRGraph):
            raise IBPInputError(f"graph must be a CSRGraph, got '{type(graph).__name__}'")
        self.graph = graph
        self.num_neighbors = _check_num_neighbors(num_neighbors)
        self.backend = _check_backend(backend, graph)
        self.generator = torch.Generator(device=graph.device)
        self.manual_seed(seed)
        self._map: torch.Tensor | None = None

    def manual_seed(self, seed: int | None) -> None:
        """Reseed the generator (None: a non-deterministic seed)."""
        if seed is None:
            self.seed = self.generator.seed()
            return
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise IBPInputError(f"seed must be an int or None, got '{type(seed).__name__}'")
        self.seed = int(seed)
        self.generator.manual_seed(self.seed)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_map"] = None
        state["generator"] = None
        state["_generator_state"] = self.generator.get_state()
        return state

    def __setstate__(self, state: dict) -> None:
        gen_state = state.pop("_generator_state")
        state.setdefault("backend", "torch")
        self.__dict__.update(state)
        self.generator = torch.Generator(device=self.graph.device)
        self.generator.set_state(gen_state)

    def __repr__(self) -> str:
        return (
            f"NeighborSampler({self.graph!r}, num_neighbors={list(self.num_neighbors)}, "
            f"backend={self.backend!r})"
        )

    # ----------------------------------------------------------------------------------------

    def _check_seeds(self, seeds: object) -> torch.Tensor:
        if isinstance(seeds, np.ndarray):
            seeds = torch.from_numpy(seeds)
        if not isinstance(seeds, torch.Tensor):
            raise IBPInputError(f"seeds must be a torch.Tensor, got '{type(seeds).__name__}'")
        if seeds.dtype.is_floating_point or seeds.dtype.is_complex or seeds.dtype == torch.bool:
            raise IBPInputError(f"seeds must hold integers, got dtype {seeds.dtype}")
        if seeds.dim() != 1:
            raise IBPInputError(f"seeds must be 1-D, got shape {tuple(seeds.shape)}")
        seeds = seeds.to(self.graph.device, torch.int64)
        n = self.graph.num_nodes
        if seeds.numel():
            lo, hi = torch.aminmax(seeds)
            if int(lo) < 0 or int(hi) >= n:
                i = int(((seeds < 0) | (seeds >= n)).nonzero()[0, 0])
                raise IBPInputError(
                    f"seeds[{i}] = {int(seeds[i])} is out of range for a graph of {n} nodes"
                )
        return seeds

    def _scratch(self) -> torch.Tensor:
        if self._map is None:
            self._map = torch.full(
                (self.graph.num_nodes,), -1, dtype=torch.int64, device=self.graph.device
            )
        return self._map

    def _hop_entries(
        self, frontier: torch.Tensor, fanout: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """CSR positions of the edges sampled into ``frontier`` and the frontier index of each."""
        g = self.graph
        device = g.device
        start = g.indptr.index_select(0, frontier)
        deg = g.indptr.index_select(0, frontier + 1) - start
        count = deg if fanout < 0 else deg.clamp(max=fanout)
        total = int(count.sum())
        target = torch.repeat_interleave(
            torch.arange(frontier.numel(), device=device), count, output_size=total
        )
        first = _exclusive_cumsum(count)
        offset = torch.arange(total, device=device) - first.index_select(0, target)
        if fanout > 0:
            big = (deg > fanout).nonzero().squeeze(1)
            if big.numel():
                big_deg = deg.index_select(0, big)
                if self.backend == "kernel" and fanout <= KERNEL_MAX_K:
                    key = _randint(1, 1, self.generator, device).view(1)
                    chosen = kernel_sample(big_deg, fanout, key)
                else:
                    floyd_cost = big.numel() * fanout * fanout // 2
                    sort_entries = int(big_deg.sum())
                    if floyd_cost <= _SORT_COST_PER_ENTRY * sort_entries:
                        chosen = floyd_sample(big_deg, fanout, self.generator)
                    else:
                        chosen = random_keys_sample(big_deg, fanout, self.generator, sort_entries)
                slots = first.index_select(0, big).unsqueeze(1) + torch.arange(
                    fanout, device=device
                )
                offset.index_copy_(0, slots.view(-1), chosen.view(-1))
        return start.index_select(0, target) + offset, target

    def sample(self, seeds: torch.Tensor, input_id: torch.Tensor | None = None) -> SampledBatch:
        """Sample the multi-hop in-neighborhood of ``seeds``.

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
        seeds = self._check_seeds(seeds)
        if input_id is not None and (
            not isinstance(input_id, torch.Tensor) or input_id.shape != seeds.shape
        ):
            raise IBPInputError(
                f"input_id must be a tensor of the seeds' shape {tuple(seeds.shape)}, got "
                f"{getattr(input_id, 'shape', type(input_id).__name__)}"
            )
        g = self.graph
        device = g.device
        batch_size = seeds.numel()
        local = self._scratch()
        nodes, rows, cols, edges = [seeds], [], [], []
        num_nodes, num_edges = [batch_size], []
        empty = torch.empty(0, dtype=torch.int64, device=device)
        ok = False
        try:
            # The first position of each seed value is its local id.
            local.scatter_reduce_(
                0, seeds, torch.arange(batch_size, device=device), "amin", include_self=False
            )
            frontier, begin, end = seeds, 0, batch_size
            for fanout in self.num_neighbors:
                if fanout == 0 or frontier.numel() == 0:
                    pos, target = empty, empty
                else:
                    pos, target = self._hop_entries(frontier, fanout)
                nbr = g.indices.index_select(0, pos).long()
                loc = local.index_select(0, nbr)
                # Neighbors without a local id yet: mark each value with (its first position
                # in this hop - a bias), all < -1, then the marked entries that carry their own
                # position are first occurrences, already in order of discovery.
                new = (loc < 0).nonzero().squeeze(1)
                cand = nbr.index_select(0, new)
                marked = new - (nbr.numel() + 2)
                local.scatter_reduce_(0, cand, marked, "amin")
                fresh = cand[local.index_select(0, cand) == marked]
                local.index_copy_(0, fresh, torch.arange(end, end + fresh.numel(), device=device))
                loc.index_copy_(0, new, local.index_select(0, cand))
                rows.append(loc)
                cols.append(target + begin)
                edges.append(g.edge_ids.index_select(0, pos))
                nodes.append(fresh)
                num_nodes.append(fresh.numel())
                num_edges.append(pos.numel())
                frontier, begin, end = fresh, end, end + fresh.numel()
            node = torch.cat(nodes)
            ok = True
        finally:
            if ok:
                local.index_fill_(0, node, -1)
            else:
                self._map = None  # a fresh one next time
        return SampledBatch(
            node=node,
            row=torch.cat(rows),
            col=torch.cat(cols),
            edge=torch.cat(edges),
            batch_size=batch_size,
            num_sampled_nodes=num_nodes,
            num_sampled_edges=num_edges,
            input_id=input_id,
        )
