"""One sampling hop in a few kernel launches and one host read (the ``"kernel"`` backend).

The torch-ops hop (`ibp_graph.sampler`) costs a few dozen small ops and several host syncs per
hop; on a GPU each op is a launch queued by the Python thread that also drives training.
`fused_hop` does the same hop with the kernels of ``cuda/sample_neighbors.cu``:

1. draw: every frontier row fills its slots (``fanout`` per row, unused ones ``-1``) with
   sampled in-neighbors and claims, in the dense map, each neighbor not yet in the batch for
   its first slot (an ``atomicMin`` of the slot number);
2. flags: every slot is marked used, and fresh when it is the first slot of a new node;
3. one in-place prefix sum of the flags (torch; both flags of a slot in one word, used in the
   low 32 bits, fresh in the high ones) and one host read of the two totals, to allocate the
   outputs;
4. emit: every used slot writes its edge (neighbor's local id, target's local id, edge id) at
   its rank among the used slots, and every fresh slot appends its node and enters it in the
   map, so that new nodes are numbered in order of first occurrence.

A hop taking every in-neighbor (``fanout = -1``) lays its slots out by a prefix sum of the
degrees instead, which costs one more host read. The result is what the torch hop returns for
the same draws: edges grouped by target in frontier order, within a target in ascending CSR
order, new nodes in order of discovery. The draws are the kernel's own (counter-based, a
function of the hop's key and the row), so they differ from the torch backend's.

The kernels are passed in (`HopKernels`): `ibp_graph.kernels.sample_neighbors.CudaHopKernels`
on a GPU; the tests run the same driver with the kernel source built for the host.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import torch

from .graph import CSRGraph

#: A hop's slots must stay below this: the used count fills the low 32 bits of a flag word,
#: and the fresh count (at most the slots) times 2^32 must stay below 2^63, the int64 scan's
#: limit.
_MAX_SLOTS = 1 << 31
_USED_MASK = (1 << 32) - 1

__all__ = ["HopKernels", "fused_hop", "read_counts"]


class HopKernels(Protocol):
    """The launches `fused_hop` makes (see ``cuda/sample_neighbors.cu`` for their contracts)."""

    def launching(self) -> contextlib.AbstractContextManager:
        """A context around a batch's launches (device and stream made current)."""

    def draw(self, indptr, indices, frontier, key, local, nbr, pos, k: int, replace: bool):
        """Fill ``k`` slots per frontier row with drawn in-neighbors, claiming new nodes."""

    def take_all(self, indptr, indices, frontier, slot_start, local, nbr, pos, slots: int):
        """Fill the slots of ``slot_start`` with every in-neighbor, claiming new nodes."""

    def flags(self, nbr, local, flags):
        """Mark every slot fresh and used (``(slots, 2)`` int64)."""

    def emit(self, nbr, pos, edge_ids, cum, slot_start, local, fresh, row, col, edge, *,
             rows: int, k: int, begin: int, end: int):  # fmt: skip
        """Write the hop's edges and new nodes at their ranks."""


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
    """Sample one hop into ``frontier`` with the hop kernels.

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
    frontier = frontier.contiguous()
    device = frontier.device
    rows = frontier.numel()
    i64 = torch.int64
    slot_start = None
    if fanout > 0:
        slots = rows * fanout
    else:
        start = graph.indptr.index_select(0, frontier)
        slot_start = torch.zeros(rows + 1, dtype=i64, device=device)
        torch.cumsum(graph.indptr.index_select(0, frontier + 1).sub_(start), 0, out=slot_start[1:])
        (slots,) = read_counts(slot_start[rows:])
    if slots >= _MAX_SLOTS:
        raise ValueError(
            f"a sampling hop of {slots:,} slots (frontier rows x fanout): the fused hop counts "
            f"fewer than {_MAX_SLOTS:,}; use smaller batches or backend='torch'"
        )
    if slots == 0:
        empty = torch.empty(0, dtype=i64, device=device)
        return empty, empty, empty, empty
    nbr = torch.empty(slots, dtype=i64, device=device)
    pos = torch.empty(slots, dtype=i64, device=device)
    g = graph
    if fanout > 0:
        kernels.draw(g.indptr, g.indices, frontier, key, local, nbr, pos, fanout, replace)
    else:
        kernels.take_all(g.indptr, g.indices, frontier, slot_start, local, nbr, pos, slots)
    # One word per slot, used in the low 32 bits and fresh in the high ones: one 1-D scan
    # (device-wide on CUDA). torch walks a (slots, 2) tensor scanned along dim 0 with one block
    # of two threads, the likely reason why hops that did so took 62 ms of GPU time a batch on
    # an H100 (benchmarks/results/sampling-nvidia-h100-80gb-hbm3.md, kernel backend).
    cum = torch.empty(slots, dtype=i64, device=device)
    kernels.flags(nbr, local, cum)
    cum.cumsum_(0)
    (total,) = read_counts(cum[slots - 1 :])
    num_fresh, num_edges = total >> 32, total & _USED_MASK
    fresh = torch.empty(num_fresh, dtype=i64, device=device)
    row, col, edge = torch.empty((3, num_edges), dtype=i64, device=device)
    kernels.emit(
        nbr, pos, g.edge_ids, cum, slot_start, local, fresh, row, col, edge,
        rows=rows, k=max(fanout, 0), begin=begin, end=end,
    )  # fmt: skip
    return row, col, edge, fresh
