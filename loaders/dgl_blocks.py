"""DGL blocks (message flow graphs) from a `SampledBatch`, with the graph's data as DGL adds it.

`to_blocks` turns one sampled subgraph into DGL's list of blocks, ``blocks[0]`` the outermost
hop, with the graph's id type (``int32`` or ``int64``) and its node and edge type names (a
homogeneous graph may name its one type, e.g. ``("paper", "cites", "paper")``), as DGL's
sampler gives them; `node_ids` gives the batch's node ids in that id type. Each block
carries what ``dgl.to_block`` gives the blocks of DGL's own ``NeighborSampler`` on a DGL
graph: every ``g.ndata`` field on its ``srcdata`` and
``dstdata`` and every ``g.edata`` field on its ``edata``, as lazy slices (DGL's
``Frame.subframe``: a field is gathered only when read), plus ``dgl.NID`` / ``dgl.EID``. The
fields are those of ``g`` when the batch is built, so replacing or deleting a field of ``g``
shows in the batches built after that.
"""

from __future__ import annotations

from typing import Any

import torch

from ibp_graph.sampler import SampledBatch

from .dgl_import import dgl

__all__ = ["DRAWS", "node_ids", "to_blocks"]

#: The values of the ``draw`` argument: DGL's per-block draw, or PyG's draw once per batch.
DRAWS = ("per_hop", "once")


def _prefix_sums(counts: list[int]) -> list[int]:
    out = [0]
    for c in counts:
        out.append(out[-1] + c)
    return out


def node_ids(graph: Any, sampled: SampledBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_nodes, output_nodes)`` of ``sampled``, in ``graph``'s id type.

    That is a DGL graph's ``idtype``, or int64 when ``graph`` is None.
    """
    node = sampled.node if graph is None else sampled.node.to(graph.idtype)
    return node, node[: sampled.batch_size]


def to_blocks(graph: Any, sampled: SampledBatch, *, draw: str = "per_hop") -> list[Any]:
    """The DGL blocks of ``sampled``, from the outermost hop to the seeds.

    Block ``i`` of ``L`` holds the edges of hop ``L - 1 - i``. Its destination nodes are the
    nodes known before that hop, ``node[:sum(num_sampled_nodes[:hop + 1])]``, and its source
    nodes those plus the nodes the hop added (so every block's destination nodes are a prefix
    of its source nodes, and ``blocks[i + 1]``'s source nodes are ``blocks[i]``'s destination
    nodes).

    Args:
        graph: the ``dgl.DGLGraph`` whose data the blocks carry, or None (then the blocks
            carry only ``dgl.NID`` and ``dgl.EID``).
        sampled: the sampled subgraph, from `ibp_graph.sampler.NeighborSampler` with the same
            ``draw``.
        draw: ``"per_hop"``: the hop's own edges form its block (DGL's draw, one set of
            in-neighbors per block). ``"once"``: the edges of that hop and of every hop
            before it (each node's neighbors were drawn once, in the hop after it was
            reached, and later blocks reuse them) (default: ``"per_hop"``).

    Returns:
        The blocks, on the device of ``sampled``'s tensors, with ``graph``'s ``idtype`` and
        type names (int64 and DGL's default names when ``graph`` is None).
    """
    frames = graph is not None
    idtype = graph.idtype if frames else torch.int64
    etype = graph.canonical_etypes[0] if frames else ("_N", "_E", "_N")
    node, row, col, edge = (
        t.to(idtype) for t in (sampled.node, sampled.row, sampled.col, sampled.edge)
    )
    nodes_upto = _prefix_sums(sampled.num_sampled_nodes)
    edges_upto = _prefix_sums(sampled.num_sampled_edges)
    hops = len(sampled.num_sampled_edges)
    blocks = []
    for hop in range(hops - 1, -1, -1):
        first = 0 if draw == "once" else edges_upto[hop]
        last = edges_upto[hop + 1]
        num_dst, num_src = nodes_upto[hop + 1], nodes_upto[hop + 2]
        block = dgl.create_block(
            {etype: (row[first:last], col[first:last])},
            num_src_nodes={etype[0]: num_src},
            num_dst_nodes={etype[2]: num_dst},
            idtype=idtype,
            device=node.device,
        )
        src_ids, dst_ids, edge_ids = node[:num_src], node[:num_dst], edge[first:last]
        if frames:
            _share_frames(graph, block, src_ids, dst_ids, edge_ids)
        else:
            block.srcdata[dgl.NID] = src_ids
            block.dstdata[dgl.NID] = dst_ids
            block.edata[dgl.EID] = edge_ids
        blocks.append(block)
    return blocks


def _share_frames(
    graph: Any, block: Any, src: torch.Tensor, dst: torch.Tensor, edges: torch.Tensor
) -> None:
    """Give ``block`` lazy slices of ``graph``'s node and edge data, as ``dgl.to_block`` does."""
    from dgl.utils import (
        extract_edge_subframes,
        extract_node_subframes_for_block,
        set_new_frames,
    )

    node_frames = extract_node_subframes_for_block(graph, [src], [dst])
    edge_frames = extract_edge_subframes(graph, [edges])
    if graph.device != src.device:  # gathered where the data is, then moved (lazily too)
        node_frames = [f.to(src.device) for f in node_frames]
        edge_frames = [f.to(src.device) for f in edge_frames]
    set_new_frames(block, node_frames=node_frames, edge_frames=edge_frames)
