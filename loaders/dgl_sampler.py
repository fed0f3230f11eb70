"""DGL's block samplers, sampled by ibp-graph: `NeighborSampler` and its multi-layer names.

`NeighborSampler` takes ``dgl.dataloading.NeighborSampler``'s arguments in DGL's order and is a
``dgl.dataloading.BlockSampler``, so it works with ibp-graph's `DataLoader` and with DGL's own
loader alike: ``sample(g, seed_nodes)`` / ``sample_blocks(g, seed_nodes)`` return
``(input_nodes, output_nodes, blocks)`` as DGL's do. How each DGL argument is honoured:

=======================  ===================================================================
argument                 what happens
=======================  ===================================================================
``fanouts``              as DGL: ``fanouts[i]`` in-neighbors per node for ``blocks[i]``,
                         ``-1`` all of them; ``[]``: no blocks, ``sample_blocks`` gives
                         ``(seeds, seeds, [])`` as DGL's (DGL's ``sample`` and loader
                         then fail on ``blocks[0]``: our ``sample`` does too, our
                         ``DataLoader`` refuses ``[]`` when built)
``edge_dir``             ``"in"`` as DGL; ``"out"`` raises ``NotImplementedError``
``prob``, ``mask``       raise ``NotImplementedError`` (sampling is uniform; ignoring them
                         would silently change what is sampled)
``replace``              as DGL (each node with in-neighbors gets exactly ``fanout``)
``prefetch_node_feats``  as DGL: the names are checked against ``g.ndata`` when the loader
``prefetch_labels``      is built; every block carries every field of ``g`` either way (see
``prefetch_edge_feats``  `ibp_graph.loaders.dgl_blocks`)
``output_device``        as DGL: where the blocks land
``fused``                no effect: there is one CPU sampler; both of DGL's give the same
                         distribution
=======================  ===================================================================

Neighbors are drawn per block, as DGL does (``draw="per_hop"``): every block draws fresh
in-neighbors for all its destination nodes. ``draw="once"`` (ours) draws each node's
neighbors once per batch, in the hop after the node is reached, and lets later blocks reuse
that draw, as PyG's ``NeighborLoader`` does: fewer edges per block, not DGL's distribution.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ibp_graph.errors import IBPInputError, check_bool, check_choice, check_fanouts, check_int
from ibp_graph.graph import CSRGraph
from ibp_graph.loading import resolve_seed, type_name, unsupported
from ibp_graph.sampler import NeighborSampler as CSRNeighborSampler

from .dgl_blocks import DRAWS, node_ids, to_blocks
from .dgl_import import dgl

__all__ = [
    "MultiLayerFullNeighborSampler",
    "MultiLayerNeighborSampler",
    "NeighborSampler",
    "structure",
    "to_csr",
]


#: For each DGL graph, weak references to the last CSR built from it and to the graph index
#: (`structure`) it was built from, with its indices dtype: loaders over one graph share one
#: CSR while any of them holds it, as DGL's loaders share the graph's own formats.
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def to_csr(graph: Any, *, indices_dtype: torch.dtype = torch.int64) -> CSRGraph:
    """The in-neighbor `CSRGraph` of a homogeneous ``dgl.DGLGraph`` (or a `CSRGraph` as is).

    The CSR's edge ids are DGL's edge ids, so sampled edges index ``g.edata`` and
    ``g.find_edges``. In-edges are what DGL's ``NeighborSampler`` samples (``edge_dir="in"``).
    A CSR built from a graph is returned again for that graph while it is alive and the
    graph's nodes and edges have not changed (a `CSRGraph` is immutable).

    Args:
        graph: a homogeneous ``dgl.DGLGraph`` (not a block), on any device; or a `CSRGraph`,
            returned unchanged.
        indices_dtype: ``torch.int64`` or ``torch.int32`` (see
            `CSRGraph.from_edge_index`) (default: ``torch.int64``).

    Raises:
        NotImplementedError: a heterogeneous graph or a block.
        IBPInputError: anything else that is not a DGL graph.
    """
    if isinstance(graph, CSRGraph):
        return graph
    if not isinstance(graph, dgl.DGLGraph):
        raise IBPInputError(
            f"graph must be a dgl.DGLGraph or an ibp_graph CSRGraph, got '{type_name(graph)}'"
        )
    if graph.is_block:
        raise NotImplementedError("graph is a DGL block: pass the whole graph")
    if not graph.is_homogeneous:
        raise NotImplementedError(
            f"graph is heterogeneous ({len(graph.ntypes)} node types, {len(graph.etypes)} edge "
            "types): ibp_graph's DGL samplers sample homogeneous graphs only"
        )
    built = _BUILT.get(graph)
    if built is not None and built[1]() is structure(graph) and built[2] == indices_dtype:
        csr = built[0]()
        if csr is not None:
            return csr
    src, dst = graph.edges(order="eid")
    csr = CSRGraph.from_edge_index(
        torch.stack([src, dst]), graph.num_nodes(), indices_dtype=indices_dtype
    )
    _BUILT[graph] = (weakref.ref(csr), weakref.ref(structure(graph)), indices_dtype)
    return csr


def structure(graph: Any) -> Any:
    """What changes when nodes or edges are added to a DGL graph or removed from it.

    DGL's ``add_nodes``, ``add_edges``, ``remove_nodes`` and ``remove_edges`` give the
    graph a new graph index (``g._graph``); the CSR built from the old one is stale then.
    None for anything else (a `CSRGraph` cannot change).
    """
    return getattr(graph, "_graph", None) if isinstance(graph, dgl.DGLGraph) else None


def _check_fanouts(fanouts: object) -> list[int]:
    if isinstance(fanouts, Sequence) and any(isinstance(v, Mapping) for v in fanouts):
        raise unsupported(
            "fanouts", fanouts, "per-edge-type fanouts belong to heterogeneous graphs"
        )
    return list(check_fanouts("fanouts", fanouts))


def _check_names(name: str, names: object) -> list[str]:
    if names is None:
        return []
    if isinstance(names, Mapping):
        raise unsupported(name, names, "per-type names belong to heterogeneous graphs")
    if isinstance(names, str):
        raise IBPInputError(f"{name} must be a list of names, got the string {names!r}")
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise IBPInputError(f"{name} must be a list of str, got {names!r}")
    return list(names)


class NeighborSampler(dgl.dataloading.BlockSampler):
    """DGL's ``NeighborSampler``, sampled by ibp-graph's uniform sampler.

    Takes ``dgl.dataloading.NeighborSampler``'s arguments in DGL's order, then ours (see the
    module docstring for what each does). Pass it to `ibp_graph.loaders.dgl.DataLoader` (or
    to DGL's own loader), or call `sample_blocks` directly.

    Example:
        >>> g = dgl.graph(([1, 2, 3, 0], [0, 0, 1, 3]))
        >>> input_nodes, output_nodes, blocks = NeighborSampler([2, 2]).sample(g, torch.tensor([0]))
        >>> output_nodes.tolist(), [b.num_dst_nodes() for b in blocks]
        ([0], [3, 1])

    Args:
        fanouts: in-neighbors per node for each layer, ``fanouts[0]`` the first (outermost)
            layer's; ``-1`` takes all of them; ``[]``: no layers, the seeds only (see
            `sample_blocks`).
        edge_dir: ``"in"`` (default: ``"in"``).
        prob: must be None: sampling is uniform (default: None).
        mask: must be None: sampling is uniform over all edges (default: None).
        replace: draw with replacement (default: False).
        prefetch_node_feats: ``g.ndata`` names for ``blocks[0].srcdata`` (default: None).
        prefetch_labels: ``g.ndata`` names for ``blocks[-1].dstdata`` (default: None).
        prefetch_edge_feats: ``g.edata`` names for every block's ``edata`` (default: None).
        output_device: where the blocks land (default: None, the seeds' device).
        fused: no effect (default: True).
        draw: ``"per_hop"`` (DGL: fresh neighbors in every block) or ``"once"`` (PyG: each
            node's neighbors drawn once per batch, reused by later blocks)
            (default: ``"per_hop"``).

    Raises:
        NotImplementedError: ``edge_dir="out"``, ``prob`` or ``mask`` (sampling them
            uniformly would silently give other batches), or per-type (heterogeneous)
            fanouts or names.
        IBPInputError: ``fanouts`` not a list of ints >= -1, names not lists of str, an
            unknown ``draw``, or a ``replace`` that is not a bool.
    """

    def __init__(
        self,
        fanouts: Sequence[int],
        edge_dir: str = "in",
        prob: str | None = None,
        mask: str | None = None,
        replace: bool = False,
        prefetch_node_feats: Sequence[str] | None = None,
        prefetch_labels: Sequence[str] | None = None,
        prefetch_edge_feats: Sequence[str] | None = None,
        output_device: str | torch.device | None = None,
        fused: bool = True,
        *,
        draw: str = "per_hop",
    ) -> None:
        fanouts = _check_fanouts(fanouts)
        if edge_dir != "in":
            raise unsupported("edge_dir", edge_dir, "only in-edges are sampled")
        for name, value in (("prob", prob), ("mask", mask)):
            if value is not None:
                raise unsupported(
                    name, value, "sampling is uniform over all in-edges; drop the argument"
                )
        replace = check_bool("replace", replace)
        super().__init__(
            prefetch_node_feats=_check_names("prefetch_node_feats", prefetch_node_feats),
            prefetch_labels=_check_names("prefetch_labels", prefetch_labels),
            prefetch_edge_feats=_check_names("prefetch_edge_feats", prefetch_edge_feats),
            output_device=output_device,
        )
        self.fanouts = fanouts
        self.edge_dir = edge_dir
        self.prob = None
        self.replace = replace
        self.fused = fused
        self.draw = check_choice("draw", draw, DRAWS)
        self._graph: tuple[Any, Any] | None = None  # (graph, its `structure`) sampled
        self._sampler: CSRNeighborSampler | None = None

    @classmethod
    def from_dgl(cls, sampler: Any) -> NeighborSampler:
        """The same settings as a ``dgl.dataloading.NeighborSampler`` (or ours, as is).

        Raises:
            NotImplementedError: ``sampler`` is another kind of DGL sampler, a subclass
                that overrides ``sample`` or ``sample_blocks``, or uses an option we do not
                support (see `NeighborSampler`).
        """
        ours = isinstance(sampler, NeighborSampler)
        if not ours and not isinstance(sampler, dgl.dataloading.NeighborSampler):
            raise NotImplementedError(
                f"graph_sampler={type_name(sampler)} is not supported by ibp_graph's "
                "DataLoader: pass ibp_graph.loaders.dgl.NeighborSampler (or "
                "MultiLayerNeighborSampler, MultiLayerFullNeighborSampler) or DGL's "
                "NeighborSampler"
            )
        base = NeighborSampler if ours else dgl.dataloading.NeighborSampler
        for method in ("sample", "sample_blocks"):
            if getattr(type(sampler), method) is not getattr(base, method):
                raise NotImplementedError(
                    f"graph_sampler={type_name(sampler)} overrides {method}(), which "
                    "ibp_graph's DataLoader would not call (it samples with its own "
                    "sampler): use it with dgl.dataloading.DataLoader"
                )
        if ours:
            return sampler
        if getattr(sampler, "prob", None) is not None:
            raise unsupported("prob (or mask)", sampler.prob, "sampling is uniform")
        return cls(
            list(sampler.fanouts),
            edge_dir=sampler.edge_dir,
            replace=bool(sampler.replace),
            prefetch_node_feats=sampler.prefetch_node_feats or None,
            prefetch_labels=sampler.prefetch_labels or None,
            prefetch_edge_feats=sampler.prefetch_edge_feats or None,
            output_device=sampler.output_device,
            fused=getattr(sampler, "fused", True),
        )

    def csr_sampler(
        self,
        graph: CSRGraph,
        *,
        seed: int | None,
        backend: str = "torch",
        cuda_graph: bool = False,
    ) -> Any:
        """An `ibp_graph.sampler.NeighborSampler` drawing these blocks on ``graph``.

        Its hop 0 expands the seeds, so it takes the fanouts in reverse (DGL's last layer
        first).
        """
        return CSRNeighborSampler(
            graph,
            self.fanouts[::-1],
            seed=seed,
            backend=backend,
            cuda_graph=cuda_graph,
            replace=self.replace,
            draw=self.draw,
        )

    def sample_blocks(
        self, g: Any, seed_nodes: Any, exclude_eids: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor, list[Any]]:
        """``(input_nodes, output_nodes, blocks)`` for ``seed_nodes``, as DGL's sampler gives.

        The first call on a graph builds its CSR (kept for later calls on the same graph,
        until nodes or edges are added to it or removed from it) and a generator seeded from
        torch's global one (so ``torch.manual_seed`` fixes the draws).

        With ``fanouts=[]`` it gives ``(seeds, seeds, [])``, the seeds in their own dtype, as
        DGL's does (the seeds are checked; nothing is drawn).

        Args:
            g: a homogeneous ``dgl.DGLGraph``.
            seed_nodes: the seeds' node ids (a 1-D integer tensor).
            exclude_eids: must be None (default: None).

        Raises:
            NotImplementedError: ``exclude_eids`` (edges left out of sampling), a dict of
                seeds (heterogeneous graphs) or a heterogeneous graph.
            IBPInputError: ``g`` is not a DGL graph, or a bad seed (naming it).
        """
        if exclude_eids is not None:
            raise unsupported(
                "exclude_eids", type_name(exclude_eids), "every in-edge may be sampled"
            )
        if isinstance(seed_nodes, Mapping):
            raise unsupported(
                "seed_nodes", type_name(seed_nodes), "node types belong to heterogeneous graphs"
            )
        built = self._graph
        if built is None or built[0] is not g or built[1] is not structure(g):
            csr = to_csr(g).to(g.device)
            self._sampler = self.csr_sampler(csr, seed=resolve_seed(None))
            self._graph = (g, structure(g))
        seeds = torch.as_tensor(seed_nodes)
        sampled = self._sampler.sample(seeds)
        blocks = to_blocks(g, sampled, draw=self.draw)
        if blocks:
            input_nodes, output_nodes = node_ids(g, sampled)
        else:  # no layers: DGL hands the seeds back as they came
            input_nodes = output_nodes = sampled.node.to(seeds.dtype)
        if self.output_device is not None:
            device = torch.device(self.output_device)
            blocks = [b.to(device) for b in blocks]
            input_nodes, output_nodes = input_nodes.to(device), output_nodes.to(device)
        return input_nodes, output_nodes, blocks

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_graph"] = state["_sampler"] = None  # rebuilt on first use
        return state

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(fanouts={self.fanouts}, replace={self.replace}, "
            f"draw={self.draw!r}, prefetch_node_feats={self.prefetch_node_feats}, "
            f"prefetch_labels={self.prefetch_labels})"
        )


#: DGL's other name for `NeighborSampler`.
MultiLayerNeighborSampler = NeighborSampler


class MultiLayerFullNeighborSampler(NeighborSampler):
    """DGL's ``MultiLayerFullNeighborSampler``: every in-neighbor, ``num_layers`` blocks.

    Args:
        num_layers: the number of blocks (layers); ``0`` is ``fanouts=[]``, as DGL's.
        **kwargs: `NeighborSampler`'s keyword arguments.

    Raises:
        IBPInputError: ``num_layers`` is not an int >= 0 (DGL reads a negative one as 0).
    """

    def __init__(self, num_layers: int, **kwargs: Any) -> None:
        super().__init__([-1] * check_int("num_layers", num_layers, 0), **kwargs)
