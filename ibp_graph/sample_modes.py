"""The parts of `NeighborSampler` that only some of its modes use.

- `to_bidirectional`: ``subgraph_type="bidirectional"``, PyG's ``SamplerOutput.to_bidirectional``.
- `induced_edges`: ``subgraph_type="induced"``, every edge of the graph between sampled nodes.
"""

from __future__ import annotations

import torch

from .graph import CSRGraph
from .sample_index import KNOWN

__all__ = ["induced_edges", "to_bidirectional"]


def to_bidirectional(
    row: torch.Tensor, col: torch.Tensor, edge: torch.Tensor, num_nodes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sampled edges together with their reverses, without repeats, as PyG builds them.

    The edges ``row -> col`` and ``col -> row`` are pooled and sorted by ``(col, row)``; every
    local pair is kept once. A kept pair's edge id is the one of its first occurrence in
    ``[edges, reversed edges]`` (a reversed edge carries the id of the edge it reverses; PyG
    keeps an unspecified one of the merged ids).

    Args:
        row: local source of every sampled edge.
        col: local target of every sampled edge.
        edge: global edge id of every sampled edge.
        num_nodes: number of sampled nodes (local ids are below it).

    Returns:
        ``(row, col, edge)`` of the bidirectional subgraph.
    """
    rows = torch.cat([row, col])
    cols = torch.cat([col, row])
    edges = torch.cat([edge, edge])
    order = torch.sort(cols * num_nodes + rows, stable=True)
    keep = torch.ones_like(order.values, dtype=torch.bool)
    keep[1:] = order.values[1:] != order.values[:-1]
    pick = order.indices[keep]
    return rows.index_select(0, pick), cols.index_select(0, pick), edges.index_select(0, pick)


def induced_edges(
    graph: CSRGraph, pos: torch.Tensor, target: torch.Tensor, local: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every edge of ``graph`` whose two ends are sampled nodes.

    Args:
        graph: the graph.
        pos: CSR positions of every in-edge of the sampled nodes, grouped by target in the
            order of the sampled nodes (a target listed twice, e.g. a repeated seed, has its
            in-edges at each position), in CSR order within a target: the sampler's hop
            entries with fanout -1.
        target: the local id of each entry's target.
        local: the sampler's dense map (`ibp_graph.sample_index`) holding the sampled nodes.

    Returns:
        ``(row, col, edge)``: local source, local target and global edge id of every edge
        whose source is sampled too, in the order of ``pos``.
    """
    src = local.index_select(0, graph.indices.index_select(0, pos).long())
    inside = (src < 0).nonzero().squeeze(1)  # the map holds a sampled node's id as id - KNOWN
    pos = pos.index_select(0, inside)
    row = src.index_select(0, inside) + KNOWN
    return row, target.index_select(0, inside), graph.edge_ids.index_select(0, pos)
