"""One copy per host of the CSR graph the samplers read, in a shared-memory segment.

Layout of the segment: a 64-byte header (magic, nodes, edges, bytes per index), then
``indptr`` (int64), ``indices`` (int64 or int32) and ``edge_ids`` (int64), each starting on
a 64-byte boundary; or, in the pairs layout (`CSRGraph.pairs`, 16 as the bytes per index),
``indptr`` then the ``(edges, 2)`` int64 sources and edge ids interleaved. `share_graph`
writes it (one process per host); `attach_graph` returns a `CSRGraph` whose tensors are views
of the segment, so every local rank samples from the same pages.

.. code-block:: python

    seg = SharedSegment.create(name, graph_segment_size(graph))
    share_graph(graph, seg)                                # local rank 0
    g = attach_graph(SharedSegment.attach(name))          # every rank
"""

from __future__ import annotations

import mmap

import numpy as np
import torch

from ..errors import IBPFormatError, IBPInputError, check_bool
from ..graph import CSRGraph, check_pairs_dtype
from ..pinned import TAIL_PAD
from .shm import SharedSegment, round_up

__all__ = ["attach_graph", "graph_segment_size", "share_graph"]

_MAGIC = b"IBPGCSR1"
_HEADER = 64
_ALIGN = 64
_INDEX = {8: torch.int64, 4: torch.int32}
#: The header's bytes per index of the pairs layout (an int64 source and its edge id).
_PAIRS = 16


def _layout(num_nodes: int, num_edges: int, index_bytes: int) -> tuple[int, int, int, int]:
    """Byte offsets of indptr, indices and edge_ids, and the end of the data.

    ``index_bytes`` `_PAIRS`: the pairs layout, each edge id 8 bytes after its source.
    """
    indptr = _HEADER
    indices = round_up(indptr + 8 * (num_nodes + 1), _ALIGN)
    if index_bytes == _PAIRS:
        return indptr, indices, indices + 8, indices + _PAIRS * num_edges
    edge_ids = round_up(indices + index_bytes * num_edges, _ALIGN)
    return indptr, indices, edge_ids, edge_ids + 8 * num_edges


def _index_bytes(graph: CSRGraph, pairs: bool) -> int:
    if not check_bool("pairs", pairs):
        return graph.indices.element_size()
    check_pairs_dtype(graph.indices.dtype, "share_graph(pairs=True)")
    return _PAIRS


def graph_segment_size(graph: CSRGraph, pairs: bool = False) -> int:
    """Bytes of the segment that holds ``graph`` (whole pages), in the pairs layout or not.

    The arrays leave the last `ibp_graph.pinned.TAIL_PAD` bytes free, so that the segment
    can be pinned in place as it is (`CSRGraph.uva_in_place`).
    """
    end = _layout(graph.num_nodes, graph.num_edges, _index_bytes(graph, pairs))[3]
    return round_up(end + TAIL_PAD, mmap.PAGESIZE)


def share_graph(graph: CSRGraph, segment: SharedSegment, pairs: bool = False) -> CSRGraph:
    """Write ``graph`` (on the CPU) into ``segment``; return the copy that reads it there.

    Args:
        graph: the graph, on the CPU.
        segment: a segment of at least ``graph_segment_size(graph, pairs)`` bytes.
        pairs: write int64 sources and edge ids interleaved (`CSRGraph.pairs`), the layout
            the GPU reads over UVA with fewest reads (default: False).

    Raises:
        IBPInputError: the graph is not on the CPU, or the segment is closed or too small,
            or ``pairs`` with int32 indices.
    """
    if graph.device.type != "cpu":
        raise IBPInputError(f"the graph to share must be on the CPU, got {graph.device}")
    need = graph_segment_size(graph, pairs)
    if segment.closed or segment.nbytes < need:
        have = "closed" if segment.closed else f"{segment.nbytes} bytes"
        raise IBPInputError(f"segment {segment.name} is {have}, the graph needs {need} bytes")
    n, e, ib = graph.num_nodes, graph.num_edges, _index_bytes(graph, pairs)
    header = np.zeros(_HEADER, dtype=np.uint8)
    header[:8] = np.frombuffer(_MAGIC, dtype=np.uint8)
    header[8:32] = np.array([n, e, ib], dtype="<i8").view(np.uint8)
    segment.array[:_HEADER] = header
    out = _attach(segment)
    out.indptr.copy_(graph.indptr)
    out.indices.copy_(graph.indices)
    out.edge_ids.copy_(graph.edge_ids)
    return out


def _attach(segment: SharedSegment) -> CSRGraph:
    head = segment.array[:_HEADER]
    if segment.nbytes < _HEADER or head[:8].tobytes() != _MAGIC:
        raise IBPFormatError(f"{segment.path}: not a shared CSR graph (bad magic)")
    n, e, ib = (int(v) for v in head[8:32].view("<i8"))
    if n < 1 or e < 0 or (ib not in _INDEX and ib != _PAIRS):
        raise IBPFormatError(f"{segment.path}: bad graph header (nodes {n}, edges {e}, index {ib})")
    p_indptr, p_indices, p_edges, end = _layout(n, e, ib)
    if end > segment.nbytes:
        raise IBPFormatError(
            f"{segment.path}: the graph needs {end} bytes, the segment has {segment.nbytes}"
        )
    indptr = segment.tensor(p_indptr, n + 1, torch.int64)
    if ib == _PAIRS:
        both = segment.tensor(p_indices, 2 * e, torch.int64).view(e, 2)
        return CSRGraph(indptr=indptr, indices=both[:, 0], edge_ids=both[:, 1], num_nodes=n)
    return CSRGraph(
        indptr=indptr,
        indices=segment.tensor(p_indices, e, _INDEX[ib]),
        edge_ids=segment.tensor(p_edges, e, torch.int64),
        num_nodes=n,
    )


def attach_graph(segment: SharedSegment) -> CSRGraph:
    """The `CSRGraph` held in ``segment`` (written by `share_graph`), as views of it.

    The segment must stay open while the graph is used (its tensors keep the mapping
    alive).

    Raises:
        IBPFormatError: the segment does not hold a graph written by `share_graph`.
    """
    return _attach(segment)
