"""Sampling hops in a few kernel launches, a batch's sizes read once (the ``"kernel"`` backend).

The torch-ops hop (`ibp_graph.sampler`) costs a few dozen small ops and several host syncs per
hop; on a GPU each op is a launch queued by the Python thread that also drives training.
`fused_hop` does one hop with the kernels of ``cuda/sample_neighbors.cu``:

1. draw: every frontier row fills its slots (``fanout`` per row, unused ones ``-1``) with
   sampled in-neighbors and claims, in the dense map, each neighbor not yet in the batch for
   its first slot (an ``atomicMin`` of the slot number);
2. flags: every slot is marked used, and fresh when it is the first slot of a new node;
3. one in-place prefix sum of the flags (torch; both flags of a slot in one word, used in the
   low 32 bits, fresh in the high ones), whose last word holds the hop's two totals;
4. emit: every used slot writes its edge (neighbor's local id, target's local id, edge id) at
   its rank among the used slots, and every fresh slot appends its node and enters it in the
   map, so that new nodes are numbered in order of first occurrence. Emit also stores the two
   totals in the batch's ``counts`` on the device.

`launch_batch` runs a batch's hops without waiting for the host between them: a hop that draws
(``1 <= fanout <= MAX_K``) sizes its buffers for the most its frontier can hold, the last hop's
slots (at most the graph's nodes), and the kernels read the frontier's real size from
``counts``. The host reads ``counts`` once, at the end, and cuts the buffers to size. It reads
them earlier only where a hop needs the sizes: a hop taking every in-neighbor (``fanout = -1``,
its slots laid out by a prefix sum of the degrees, one more read), a hop of torch ops (a fanout
above ``MAX_K``), ``draw="per_hop"`` (the frontier is every node so far), or a frontier bound
so loose that its slots would pass `_BOUND_SLOTS`.

`finish_batch` then reads the sizes and copies the outputs out; a batch launched without a read
on the way can be captured and replayed (`ibp_graph.sample_replay`).

`launch_group` launches several batches of one size one after the other, each but the last
cleared from the dense map by a kernel that reads the batch's sizes on the device
(`clear_launched`) so that no size is read between them, and `finish_group` reads all their
sizes at once and copies their outputs out in two launches of a fifth kernel, which reads
the counts on the device and packs every buffer's counted entries one after the other (the
group's nodes, then its edges): per batch, the host then splits views out of the two, and
does no other work. A single batch is a group of one.

The result is what the torch hops return for the same draws: edges grouped by target in
frontier order, within a target in ascending CSR order, new nodes in order of discovery. The
draws are the kernel's own (counter-based, a function of the hop's key and the row), so they
differ from the torch backend's.

The kernels are passed in (`HopKernels`): `ibp_graph.kernels.sample_neighbors.CudaHopKernels`
on a GPU; the tests run the same driver with the kernel source built for the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from .graph import CSRGraph
from .kernels.sample_neighbors import MAX_K as KERNEL_MAX_K
from .pinned import to_device
from .sample_index import dense_seed

#: A hop's slots must stay below this: the used count fills the low 32 bits of a flag word,
#: and the fresh count (at most the slots) times 2^32 must stay below 2^63, the int64 scan's
#: limit.
_MAX_SLOTS = 1 << 31
_USED_MASK = (1 << 32) - 1
#: Most slots a hop is sized for from a bound on its frontier: above, the host reads the real
#: sizes first (a batch's buffers stay within a few times its real size, about 56 bytes a slot).
_BOUND_SLOTS = 1 << 22

__all__ = [
    "HopKernels",
    "LaunchedBatch",
    "LaunchedGroup",
    "clear_launched",
    "finish_batch",
    "finish_group",
    "fused_hop",
    "launch_batch",
    "launch_group",
    "read_counts",
]


class HopKernels(Protocol):
    """The launches `fused_hop` makes (see ``cuda/sample_neighbors.cu`` for their contracts)."""

    def launching(self) -> contextlib.AbstractContextManager:
        """A context around a batch's launches (device and stream made current)."""

    def draw(self, indptr, indices, frontier, rows_at, key, local, nbr, pos, *, rows: int,
             k: int, replace: bool):  # fmt: skip
        """Fill ``k`` slots per frontier row with drawn in-neighbors, claiming new nodes.

        ``rows`` frontier rows, or the first ``rows_at[0]`` of them when ``rows_at`` is a tensor.
        ``indices`` is the graph's `ibp_graph.graph.CSRGraph.entries`. ``pos`` gets each
        slot's CSR position, or its edge id where ``indices`` is 2-D (``(E, 2)``: sources and
        edge ids, `ibp_graph.graph.CSRGraph.pairs`); so does `take_all`'s.
        """

    def take_all(self, indptr, indices, frontier, slot_start, local, nbr, pos, slots: int):
        """Fill the slots of ``slot_start`` with every in-neighbor, claiming new nodes."""

    def flags(self, nbr, local, flags):
        """Mark every slot fresh and used (``(slots, 2)`` int64)."""

    def clear(self, nodes, counts, at: int, local):
        """Set the map's entries of the first ``counts[at]`` of ``nodes`` back to unseen."""

    def pack(self, parts, counts, out, *, n_parts: int, rows: int):
        """Copy the counted entries of ``n_parts`` buffers into ``out``, one after the other.

        ``parts`` holds four int64 per buffer: its address, its capacity, the position of its
        count in ``counts`` and the distance between its ``rows`` rows.
        """

    def emit(self, nbr, pos, edge_ids, cum, slot_start, local, fresh, row, col, edge, counts,
             *, rows: int, k: int, begin: int, end: int, hop: int, hops: int):  # fmt: skip
        """Write the hop's edges and new nodes at their ranks, and its totals in ``counts``.

        ``begin < 0``: the frontier's place (``begin``, ``end``) comes from ``counts`` instead.
        ``edge_ids`` None: ``pos`` holds the edge ids already (a pairs graph's hop).
        """


def read_counts(t: torch.Tensor) -> list[int]:
    """The values of a small int64 tensor on the host.

    On a GPU: a copy to pinned memory on the current stream of ``t``'s device (whichever
    device is current) and a wait on a blocking event recorded there, so the host thread
    sleeps, instead of spinning, until the copy is done.
    """
    if t.device.type != "cuda":
        return t.tolist()
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    done = torch.cuda.Event(blocking=True)
    done.record(torch.cuda.current_stream(t.device))
    done.synchronize()
    return host.tolist()


def fused_hop(
    kernels: HopKernels,
    graph: CSRGraph,
    local: torch.Tensor,
    frontier: torch.Tensor,
    *,
    begin: int,
    end: int,
    fanout: int,
    replace: bool,
    key: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample one hop into ``frontier`` with the hop kernels, its sizes read on the host.

    Args:
        kernels: the launches (inside their ``launching()`` context).
        graph: the CSR graph (its tensors on the kernels' device).
        local: the sampler's dense map (`ibp_graph.sample_index`), holding the batch so far.
        frontier: ``(F,)`` int64 global ids of the nodes to expand, local ids
            ``begin .. begin + F - 1``.
        begin: local id of ``frontier[0]``.
        end: number of nodes in the batch so far (the first new local id).
        fanout: neighbors per node, in ``[1, MAX_K]``, or ``-1`` for all of them.
        replace: draw with replacement (``fanout > 0`` only).
        key: ``(1,)`` int64 random key of this hop, on the device.

    Returns:
        ``(row, col, edge, fresh)``: per sampled edge the local ids of the neighbor and of the
        target and the edge id; the new nodes in order of discovery (local ids ``end, ...``).
    """
    edges, fresh = _hop_read(
        kernels, graph, local, frontier, None, begin=begin, end=end, fanout=fanout,
        replace=replace, key=key, hop=1, hops=1,
    )  # fmt: skip
    row, col, edge = edges
    return row, col, edge, fresh


def _hop_read(
    kernels: HopKernels,
    graph: CSRGraph,
    local: torch.Tensor,
    frontier: torch.Tensor,
    counts: torch.Tensor | None,
    *,
    begin: int,
    end: int,
    fanout: int,
    replace: bool,
    key: torch.Tensor,
    hop: int,
    hops: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`fused_hop`, returning ``(edges, fresh)`` with ``edges`` ``(3, E)`` (row, col, edge).

    With ``counts``, the hop also stores its totals there, as hop ``hop`` of ``hops``.
    """
    frontier = frontier.contiguous()
    rows = frontier.numel()
    slot_start = None
    if fanout > 0:
        slots = rows * fanout
    else:
        start = graph.indptr.index_select(0, frontier)
        slot_start = torch.zeros(rows + 1, dtype=torch.int64, device=frontier.device)
        torch.cumsum(graph.indptr.index_select(0, frontier + 1).sub_(start), 0, out=slot_start[1:])
        (slots,) = read_counts(slot_start[rows:])
    edges, fresh, cum = _launch_hop(
        kernels, graph, local, frontier, None, rows, slots, slot_start, counts, begin=begin,
        end=end, fanout=fanout, replace=replace, key=key, hop=hop, hops=hops,
    )  # fmt: skip
    (total,) = read_counts(cum[-1:])
    return edges[:, : total & _USED_MASK], fresh[: total >> 32]


def _launch_hop(
    kernels: HopKernels,
    graph: CSRGraph,
    local: torch.Tensor,
    frontier: torch.Tensor,
    rows_at: torch.Tensor | None,
    rows: int,
    slots: int,
    slot_start: torch.Tensor | None,
    counts: torch.Tensor | None,
    *,
    begin: int,
    end: int,
    fanout: int,
    replace: bool,
    key: torch.Tensor,
    hop: int,
    hops: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch one hop into buffers sized for ``slots`` slots; nothing is read on the host.

    Returns ``(edges, fresh, cum)``: ``edges`` ``(3, slots)`` (rows: row, col, edge) holds the
    hop's edges first, ``fresh`` its new nodes first, and ``cum[-1]`` their numbers (see
    `fused_hop`).
    """
    if slots >= _MAX_SLOTS:
        raise ValueError(
            f"a sampling hop of {slots:,} slots (frontier rows x fanout): the fused hop counts "
            f"fewer than {_MAX_SLOTS:,}; use smaller batches or backend='torch'"
        )
    i64, device = torch.int64, frontier.device
    if slots == 0:
        empty = torch.empty((3, 0), dtype=i64, device=device)
        return empty, empty[0], torch.zeros(1, dtype=i64, device=device)
    nbr, pos, cum = torch.empty((3, slots), dtype=i64, device=device)
    g = graph
    if fanout > 0:
        kernels.draw(g.indptr, g.entries, frontier, rows_at, key, local, nbr, pos, rows=rows,
                     k=fanout, replace=replace)  # fmt: skip
    else:
        kernels.take_all(g.indptr, g.entries, frontier, slot_start, local, nbr, pos, slots)
    # One word per slot, used in the low 32 bits and fresh in the high ones: one 1-D scan
    # (device-wide on CUDA). torch walks a (slots, 2) tensor scanned along dim 0 with one block
    # of two threads, the likely reason why hops that did so took 62 ms of GPU time a batch on
    # an H100 (benchmarks/results/sampling-nvidia-h100-80gb-hbm3.md, kernel backend).
    kernels.flags(nbr, local, cum)
    cum.cumsum_(0)
    fresh = torch.empty(min(slots, g.num_nodes), dtype=i64, device=device)
    edges = torch.empty((3, slots), dtype=i64, device=device)
    row, col, edge = edges.unbind()
    # A pairs graph's draw leaves each slot's edge id in pos: the emit reads no edge_ids.
    kernels.emit(
        nbr, pos, None if g.pairs else g.edge_ids, cum, slot_start, local, fresh, row, col,
        edge, counts,
        rows=rows, k=max(fanout, 0), begin=begin, end=end, hop=hop, hops=hops,
    )  # fmt: skip
    return edges, fresh, cum


#: A hop run with torch ops: ``(frontier, fanout, begin, end) -> (row, col, edge, fresh)``.
TorchHop = Callable[[torch.Tensor, int, int, int], tuple[torch.Tensor, ...]]


class LaunchedBatch:
    """A batch's hops launched so far: their buffers, and their sizes where the host knows them.

    ``nodes`` (the seeds, then each hop's new nodes) and ``edges`` (``(3, E)`` per hop: row,
    col, edge) hold the hops' outputs first; ``counts`` holds every size on the device.
    """

    def __init__(self, seeds: torch.Tensor, hops: int, counts: torch.Tensor | None = None) -> None:
        self.hops = hops
        #: Nodes and edges per hop on the device: ``[seeds, new nodes of hop 1..H, edges of
        #: hop 1..H]`` (the kernels' ``counts``; ``counts`` when given, a row of a group's
        #: counts, zeroed here).
        if counts is None:
            counts = torch.zeros(2 * hops + 1, dtype=torch.int64, device=seeds.device)
        else:
            counts.zero_()
        self.counts = counts
        # A fill, not `counts[0] = n`: that copies n from pageable host memory, which waits
        # for the stream (and cannot be captured in a CUDA graph).
        self.counts[:1].fill_(seeds.numel())
        self.nodes: list[torch.Tensor] = [seeds]
        self.edges: list[torch.Tensor] = []  # (3, E) per hop: row, col, edge
        self.num_nodes: list[int | None] = [seeds.numel()]
        self.num_edges: list[int | None] = []
        #: Whether every hop so far was launched without the host reading a size (the
        #: batch's launches then depend on its sizes alone, not on its values).
        self.launched_only = True

    def read(self) -> None:
        """Read the sizes still unknown (one host read) and cut their buffers to size."""
        if None not in self.num_nodes and None not in self.num_edges:
            return
        self.launched_only = False
        sizes = read_counts(self.counts)
        self.num_nodes = sizes[: len(self.nodes)]
        self.num_edges = sizes[self.hops + 1 : self.hops + 1 + len(self.edges)]
        self.nodes = [part[:n] for part, n in zip(self.nodes, self.num_nodes, strict=True)]
        self.edges = [part[:, :n] for part, n in zip(self.edges, self.num_edges, strict=True)]

    def add(self, edges, fresh, num_edges: int | None, num_fresh: int | None) -> None:
        """Append a hop's edges and new nodes, with their numbers (None: on the device only)."""
        self.edges.append(edges)
        self.nodes.append(fresh)
        self.num_edges.append(num_edges)
        self.num_nodes.append(num_fresh)

    def known_end(self) -> int | None:
        """The number of nodes so far, where the host knows it."""
        return None if None in self.num_nodes else sum(self.num_nodes)


def launch_batch(
    kernels: HopKernels,
    graph: CSRGraph,
    local: torch.Tensor,
    seeds: torch.Tensor,
    fanouts: Sequence[int],
    *,
    replace: bool,
    per_hop: bool,
    keys: torch.Tensor,
    torch_hop: TorchHop | None,
    counts: torch.Tensor | None = None,
) -> LaunchedBatch:
    """Launch every hop of a batch with the hop kernels, reading sizes only where a hop must.

    `finish_batch` then reads the sizes still unknown (once) and copies the outputs out. The
    returned batch's ``launched_only`` says whether the host read nothing on the way: then
    the launches are a function of the batch's size alone (the kernels read every other size
    from ``counts``), so that they can be captured once and replayed for another batch of that
    size with new ``seeds`` and ``keys`` written into the same tensors
    (`ibp_graph.sample_replay`).

    Args:
        kernels: the launches (inside their ``launching()`` context).
        graph: the CSR graph (its tensors on the kernels' device).
        local: the sampler's dense map, holding the seeds (`ibp_graph.sample_index.dense_seed`).
        seeds: ``(B,)`` int64 global ids of the seeds, local ids ``0 .. B - 1``.
        fanouts: neighbors per node and hop: ``0`` (none), ``-1`` (all), or a count; counts
            above ``KERNEL_MAX_K`` run as ``torch_hop``. No fanouts (no hops) launch nothing:
            the batch is the seeds (`ibp_graph.sampler.NeighborSampler` does not call this
            then).
        replace: draw with replacement.
        per_hop: expand every node so far at each hop (``draw="per_hop"``), not the last hop's.
        keys: ``(len(fanouts),)`` int64 random keys, one per hop, on the device.
        torch_hop: the sampler's hop of torch ops, for fanouts the kernels do not draw.
        counts: ``(2 * len(fanouts) + 1,)`` int64 on the device, where the batch keeps its
            sizes (default: a new tensor), so that a group's sizes are read at once.

    Returns:
        The hops' buffers (`LaunchedBatch`), not yet cut to size.
    """
    hops = len(fanouts)
    batch = LaunchedBatch(seeds, hops, counts)
    for hop, fanout in enumerate(fanouts, 1):
        if fanout == 0:
            batch.add(seeds.new_empty((3, 0)), seeds[:0], 0, 0)  # its counts stay 0
            continue
        lazy = not per_hop and 1 <= fanout <= KERNEL_MAX_K
        rows = batch.nodes[-1].numel()  # a bound on the frontier while its size is unknown
        if not lazy or (batch.num_nodes[-1] is None and rows * fanout > _BOUND_SLOTS):
            batch.read()
        end = batch.known_end()
        if per_hop:
            frontier, begin = torch.cat(batch.nodes), 0
        else:
            frontier = batch.nodes[-1]
            begin = -1 if end is None else end - frontier.numel()
        rows = frontier.numel()
        key = keys[hop - 1 : hop]
        if rows == 0:
            batch.add(seeds.new_empty((3, 0)), seeds[:0], 0, 0)
        elif lazy:
            rows_at = batch.counts[hop - 1 : hop] if batch.num_nodes[-1] is None else None
            out = _launch_hop(
                kernels, graph, local, frontier, rows_at, rows, rows * fanout, None,
                batch.counts, begin=begin, end=-1 if end is None else end, fanout=fanout,
                replace=replace, key=key, hop=hop, hops=hops,
            )  # fmt: skip
            batch.add(*out[:2], None, None)
        elif fanout == -1 or fanout <= KERNEL_MAX_K:
            batch.launched_only = False
            edges, fresh = _hop_read(
                kernels, graph, local, frontier, batch.counts, begin=begin, end=end,
                fanout=fanout, replace=replace, key=key, hop=hop, hops=hops,
            )  # fmt: skip
            batch.add(edges, fresh, edges.shape[1], fresh.numel())
        else:
            batch.launched_only = False
            row, col, edge, fresh = torch_hop(frontier, fanout, begin, end)
            batch.counts[hop : hop + 1].fill_(fresh.numel())
            batch.counts[hops + hop : hops + hop + 1].fill_(row.numel())
            batch.add(torch.stack([row, col, edge]), fresh, row.numel(), fresh.numel())
    return batch


class LaunchedGroup:
    """The launches of a group of batches, one after the other, their sizes read at once.

    ``batches`` keep their sizes in the rows of ``counts`` (``(K, 2 * hops + 1)`` int64 on
    the device). Each batch but the last was cleared from the dense map on the device
    (`clear_launched`), so that the next one could be launched before any size was read;
    the last one is still in the map (the sampler clears it with its cut nodes).
    """

    def __init__(self, batches: list[LaunchedBatch], counts: torch.Tensor) -> None:
        self.batches = batches
        self.counts = counts
        #: The table `finish_group` packs from, and its node parts: kept for a group launched
        #: without a read (a replayed group's buffers stay those of its graph).
        self._parts: tuple[torch.Tensor, int, list[torch.Tensor]] | None = None

    @property
    def launched_only(self) -> bool:
        """Whether no batch of the group read a size on the way (see `launch_batch`)."""
        return all(batch.launched_only for batch in self.batches)


def launch_group(
    kernels: HopKernels,
    graph: CSRGraph,
    local: torch.Tensor,
    seeds: torch.Tensor,
    fanouts: Sequence[int],
    *,
    replace: bool,
    per_hop: bool,
    keys: torch.Tensor,
    torch_hop: TorchHop | None,
    iota: torch.Tensor,
) -> LaunchedGroup:
    """Launch the batches of ``seeds`` one after the other, without reading a size between them.

    Batch ``k`` is `launch_batch` of ``seeds[k]`` with ``keys[k]``, after the dense map was
    seeded with it, and, but for the last batch, followed by `clear_launched`: the same
    batches as launched one by one, in the same order. A group launched without a host read
    (``launched_only``) depends on its shape alone, so it can be captured and replayed
    (`ibp_graph.sample_replay`).

    Args:
        kernels: the launches.
        graph: the CSR graph (its tensors on the kernels' device).
        local: the sampler's dense map, empty.
        seeds: ``(K, B)`` int64 global ids, one batch per row, ``K, B >= 1``.
        fanouts: as for `launch_batch`, at least one.
        replace: draw with replacement.
        per_hop: ``draw="per_hop"``.
        keys: ``(K, len(fanouts))`` int64 random keys on the device.
        torch_hop: the sampler's hop of torch ops.
        iota: ``arange(n)`` for some ``n >= B``.
    """
    hops = len(fanouts)
    counts = torch.empty((seeds.shape[0], 2 * hops + 1), dtype=torch.int64, device=seeds.device)
    batches = []
    with kernels.launching():
        for k, (batch_seeds, batch_keys) in enumerate(zip(seeds, keys, strict=True)):
            dense_seed(local, batch_seeds, iota)
            batch = launch_batch(
                kernels, graph, local, batch_seeds, fanouts, replace=replace, per_hop=per_hop,
                keys=batch_keys, torch_hop=torch_hop, counts=counts[k],
            )  # fmt: skip
            if k + 1 < seeds.shape[0]:
                clear_launched(kernels, local, batch)
            batches.append(batch)
    return LaunchedGroup(batches, counts)


def clear_launched(kernels: HopKernels, local: torch.Tensor, batch: LaunchedBatch) -> None:
    """Reset the dense map's entries of a launched batch's nodes, without reading a size.

    One ``clear`` launch per node buffer (the seeds, then each hop's new nodes) reads the
    buffer's count from ``counts`` on the device. So the clearing can be queued, or captured,
    between the batches of a group before any size is known (`ibp_graph.sample_replay`).
    Call it inside ``kernels.launching()``.

    Args:
        kernels: the launches.
        local: the sampler's dense map, holding the batch.
        batch: the batch's launches.
    """
    for hop, part in enumerate(batch.nodes):
        if part.numel():
            kernels.clear(part, batch.counts, hop, local)


#: One batch's outputs: ``(node, row, col, edge, num_nodes, num_edges)`` (see `finish_group`).
Finished = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[int]]


def finish_batch(batch: LaunchedBatch, kernels: HopKernels) -> Finished:
    """A launched batch's outputs: `finish_group` of a group of this one batch."""
    return finish_group(LaunchedGroup([batch], batch.counts.view(1, -1)), kernels)[0]


def finish_group(group: LaunchedGroup, kernels: HopKernels) -> list[Finished]:
    """The outputs of every batch of a group, in new tensors, cut to size.

    Reads the sizes still unknown, of every batch at once (one host read). The group is left
    as it is, so that the buffers of a replayed group stay whole for the next replay. The
    nodes of all the batches are copied out in one launch of ``kernels.pack``, and so are
    their edges: each batch's tensors are views into those two, which stay in memory while any
    of the group's batches does.

    Returns:
        Per batch ``(node, row, col, edge, num_nodes, num_edges)``: the batch's nodes (seeds
        first, then each hop's new nodes in order of discovery), its edges' local ids and
        edge ids, nodes added per hop (the seeds first) and edges per hop.
    """
    hops = group.batches[0].hops
    if any(None in b.num_nodes or None in b.num_edges for b in group.batches):
        sizes = [(row[: hops + 1], row[hops + 1 :]) for row in read_counts(group.counts)]
    else:
        sizes = [(list(b.num_nodes), list(b.num_edges)) for b in group.batches]
    node_sizes = [sum(num_nodes) for num_nodes, _ in sizes]
    edge_sizes = [sum(num_edges) for _, num_edges in sizes]
    nodes, edges = _pack(group, kernels, sum(node_sizes), sum(edge_sizes))
    if len(sizes) == 1:
        (num_nodes, num_edges), (row, col, edge) = sizes[0], edges.unbind()
        return [(nodes, row, col, edge, num_nodes, num_edges)]
    rows, cols, edge_ids = (t.split(edge_sizes) for t in edges.unbind())
    return [
        (node, row, col, edge, num_nodes, num_edges)
        for node, row, col, edge, (num_nodes, num_edges) in zip(
            nodes.split(node_sizes), rows, cols, edge_ids, sizes, strict=True
        )
    ]


def _pack(
    group: LaunchedGroup, kernels: HopKernels, num_nodes: int, num_edges: int
) -> tuple[torch.Tensor, ...]:
    """The group's nodes and its ``(3, E)`` edges, each packed by one launch of ``pack``."""
    first = group.batches[0].nodes[0]
    nodes, edges = first.new_empty(num_nodes), first.new_empty((3, num_edges))
    parts, node_parts, _held = group._parts or _parts_table(group)
    with kernels.launching():
        if num_nodes:
            kernels.pack(parts[: 4 * node_parts], group.counts, nodes, n_parts=node_parts, rows=1)
        if num_edges:
            edge_parts = parts.numel() // 4 - node_parts
            kernels.pack(parts[4 * node_parts :], group.counts, edges, n_parts=edge_parts, rows=3)
    return nodes, edges


def _parts_table(group: LaunchedGroup) -> tuple[torch.Tensor, int, list[torch.Tensor]]:
    """`HopKernels.pack`'s table of a group's buffers, on the device.

    The node buffers first (batch by batch, the seeds first), then the edge buffers; returned
    with the number of node buffers and the buffers it points to. A buffer cut to size on the
    way (a hop that read its sizes) is a view: its rows are its stride apart; one whose
    entries are not next to each other is copied first. Kept on the group where it launched
    without a read: its buffers, a replayed group's those of its graph, stay.
    """
    hops = group.batches[0].hops
    width = 2 * hops + 1  # counts per batch: nodes of the seeds and each hop, edges per hop
    rows: tuple[list[int], list[int]] = ([], [])
    held: list[torch.Tensor] = []
    for k, batch in enumerate(group.batches):
        for kind, parts, first in ((0, batch.nodes, 0), (1, batch.edges, hops + 1)):
            for hop, part in enumerate(parts):
                if part.shape[-1] > 1 and part.stride(-1) != 1:
                    part = part.contiguous()
                held.append(part)
                rows[kind].extend(
                    (part.data_ptr(), part.shape[-1], k * width + first + hop, part.stride(0))
                )
    # Filled through NumPy (a tensor made from Python values would reach a GPU by a copy that
    # waits for the stream), then copied there through pinned memory, waiting for nothing.
    table = torch.empty(len(rows[0]) + len(rows[1]), dtype=torch.int64)
    table.numpy()[:] = rows[0] + rows[1]
    out = (to_device(table, group.counts.device), len(rows[0]) // 4, held)
    if group.launched_only:
        group._parts = out
    return out
