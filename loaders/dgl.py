"""DGL drop-ins: `DataLoader` and `NeighborSampler`, yielding DGL blocks.

`DataLoader` takes DGL's arguments and yields what ``dgl.dataloading.DataLoader`` yields for a
``dgl.dataloading.NeighborSampler(fanouts, prefetch_node_feats=["feat"],
prefetch_labels=["label"])``: the input nodes, the seeds, and one DGL block (message flow
graph, ``dgl.create_block``) per layer, with ``blocks[0].srcdata["feat"]`` the rows of
``input_nodes`` and ``blocks[-1].dstdata["label"]`` the seeds' labels. Neighbors are sampled
by ibp-graph's own sampler and the rows are read from an IBP-compressed table, a pinned raw
table or a tensor, the next batches prepared while the model trains (`ibp_graph.prefetch`).
A training script changes only its imports:

.. code-block:: python

    import dgl
    import torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    import ibp_graph

    # from dgl.dataloading import DataLoader, NeighborSampler
    from ibp_graph.loaders.dgl import DataLoader, NeighborSampler

    torch.manual_seed(0)
    g = dgl.graph(tuple(torch.randint(0, 1000, (2, 5000))), num_nodes=1000)
    g.ndata["feat"] = (torch.rand(1000, 64) < 0.05).float()  # a sparse bag of words
    g.ndata["label"] = g.ndata["feat"][:, :4].argmax(1)
    table = ibp_graph.compress(g.ndata["feat"], "x.ibp", progress=False)  # once, offline

    sampler = NeighborSampler([5, 10], prefetch_node_feats=["feat"], prefetch_labels=["label"])
    loader = DataLoader(
        g,
        torch.arange(500),
        sampler,
        batch_size=128,
        shuffle=True,
        features=table,  # ours: the compressed table (default: g.ndata["feat"])
        seed=0,  # ours: reproducible batches
    )
    layers = torch.nn.ModuleList([SAGEConv(64, 32, "mean"), SAGEConv(32, 4, "mean")])
    optimizer = torch.optim.Adam(layers.parameters(), lr=0.01)
    for input_nodes, output_nodes, blocks in loader:
        h = blocks[0].srcdata["feat"]
        for i, (layer, block) in enumerate(zip(layers, blocks)):
            h = layer(block, h)
            h = F.relu(h) if i < len(layers) - 1 else h
        loss = F.cross_entropy(h, blocks[-1].dstdata["label"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(loader.stats.summary())

The blocks: ``fanouts[i]`` is the fanout of layer ``i``, as in DGL (``blocks[0]``, the
outermost hop, uses ``fanouts[0]``; the seeds' own neighbors use ``fanouts[-1]``). Every
block's destination nodes are a prefix of its source nodes; ``blocks[i + 1]``'s source nodes
are ``blocks[i]``'s destination nodes; ``srcdata[dgl.NID]``, ``dstdata[dgl.NID]`` and
``edata[dgl.EID]`` hold the global node and edge ids. One difference from DGL's sampler,
which draws the neighbors of every destination node again in every block: ours draws the
neighbors of each node once (in the hop after the node is first reached) and every later block
reuses that draw, as PyG's ``NeighborLoader`` does. So in each block a destination node has
``min(in_degree, fanout)`` in-edges, with the fanout of the layer in which it was first
expanded, and with ``-1`` fanouts the blocks hold exactly the edges of DGL's.

Which DGL build, and where things run:

===========================  ==========  ======================================================
DGL build                    ``device``  sampling, blocks and rows
===========================  ==========  ======================================================
PyPI ``dgl==2.1.0``          CPU         all on the CPU; an `IBPTable` is decoded by NumPy
(CPU-only)
PyPI ``dgl==2.1.0``          CUDA        refused (`IBPInputError`): this build cannot put a
                                         graph on a GPU, and DGL refuses GPU tensors in the
                                         ``srcdata`` of a CPU block, so neither the blocks
                                         nor the fetched rows can go to the GPU. Open tables
                                         with ``ibp_graph.open(path)`` (CPU decoding).
CUDA build (conda, or the    CUDA        the graph is copied to the GPU once (or read
wheels of data.dgl.ai)                   there over UVA: ``graph_memory="uva"``) and sampled
                                         there; blocks are created on the GPU; rows are
                                         fetched and decoded by the GPU over UVA from a
                                         `CudaIBPTable` (an `IBPTable` is opened as one) or
                                         gathered from a `PinnedRawTable`, on a side stream,
                                         ``prefetch`` batches ahead
===========================  ==========  ======================================================

``device`` defaults to the graph's device when the DGL graph is on a GPU, else to where the
features deliver rows, else the CPU. With ``graph_memory="uva"`` (CUDA builds only) the graph
is not copied to the GPU: it stays in pinned host memory, as CUDA tensors the sampler reads
over PCIe (UVA), for graphs larger than the GPU; the batches are the same. The CUDA path is
written but has not run yet: no CUDA build of DGL was available.

Importing this module needs DGL (the ``dgl`` extra). With a torch DGL 2.1.0 has no GraphBolt
build for (any but 2.0.0 to 2.2.1; torch 2.13 here), ``import dgl`` fails inside
``dgl.graphbolt``, which ``dgl.distributed`` imports at load time: it imports
``torchdata.datapipes`` (absent from torchdata 0.11, which pip picks for ``torchdata>=0.5``),
and even with an older torchdata it then raises ``FileNotFoundError`` for
``dgl/graphbolt/libgraphbolt_pytorch_<torch version>.so``, shipped only for torch 2.0.0 to
2.2.1. Nothing outside GraphBolt and ``dgl.distributed`` uses it at import, so before the
first ``import dgl`` this module puts a placeholder module into
``sys.modules["dgl.graphbolt"]`` when the real one cannot load; any attribute of the
placeholder raises an ``AttributeError`` that says why. It also sets ``DGLBACKEND=pytorch``
when unset, so that DGL does not write ``~/.dgl/config.json``. ``dgl.sparse`` (loaded only by
``DGLGraph.adj()``) has no build for these torch versions either and is not used.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ibp_graph.errors import IBPInputError
from ibp_graph.features import FeatureSource, as_feature_source, resolve_device
from ibp_graph.graph import CSRGraph
from ibp_graph.loading import (
    BaseNodeLoader,
    check_graph_memory,
    input_nodes,
    place_graph,
    type_name,
    unsupported,
)
from ibp_graph.sampler import NeighborSampler as CSRNeighborSampler
from ibp_graph.sampler import SampledBatch

__all__ = ["GRAPHBOLT_PLACEHOLDER", "DataLoader", "NeighborSampler", "to_csr"]

_EXTRA_HINT = "pip install 'ibp-graph[dgl]'"


# --------------------------------------------------------------------------------------------
# Importing DGL
# --------------------------------------------------------------------------------------------


def _graphbolt_loadable(dgl_dir: Path) -> bool:
    """Whether ``dgl.graphbolt`` would import: ``torchdata.datapipes`` and a library for torch."""
    version = torch.__version__.split("+", maxsplit=1)[0]
    if not any((dgl_dir / "graphbolt").glob(f"*graphbolt_pytorch_{version}.*")):
        return False
    try:
        return importlib.util.find_spec("torchdata.datapipes") is not None
    except ImportError:  # torchdata itself is missing
        return False


def _graphbolt_placeholder() -> types.ModuleType:
    """A ``dgl.graphbolt`` whose attributes raise an ``AttributeError`` saying why."""
    module = types.ModuleType(
        "dgl.graphbolt",
        "Placeholder put in place by ibp_graph.loaders.dgl: DGL's GraphBolt cannot load here.",
    )

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module-level __getattr__ hook
        raise AttributeError(
            f"dgl.graphbolt.{name}: DGL's GraphBolt is not available with torch "
            f"{torch.__version__} (no libgraphbolt build or no torchdata.datapipes); "
            "ibp_graph.loaders.dgl put this placeholder in sys.modules so that `import dgl` "
            "works"
        )

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def _import_dgl() -> tuple[types.ModuleType, bool]:
    """``import dgl``, with ``dgl.graphbolt`` stubbed when it cannot load.

    Returns:
        The module, and whether this call put the placeholder in place.
    """
    placeholder = None
    if sys.modules.get("dgl") is None:  # not imported yet (or blocked with None)
        try:
            spec = importlib.util.find_spec("dgl")
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"ibp_graph.loaders.dgl needs DGL: {_EXTRA_HINT}")
        os.environ.setdefault("DGLBACKEND", "pytorch")
        dgl_dir = Path(next(iter(spec.submodule_search_locations)))
        if "dgl.graphbolt" not in sys.modules and not _graphbolt_loadable(dgl_dir):
            placeholder = _graphbolt_placeholder()
            sys.modules["dgl.graphbolt"] = placeholder
    try:
        import dgl
    except (ImportError, OSError) as exc:
        if placeholder is not None and sys.modules.get("dgl.graphbolt") is placeholder:
            del sys.modules["dgl.graphbolt"]
        raise ImportError(
            f"ibp_graph.loaders.dgl: `import dgl` failed ({exc}); ibp-graph supports "
            f"dgl==2.1.0: {_EXTRA_HINT}"
        ) from exc
    backend = getattr(getattr(dgl, "backend", None), "backend_name", "pytorch")
    if backend != "pytorch":
        raise ImportError(
            f"ibp_graph.loaders.dgl needs DGL's PyTorch backend, DGL loaded {backend!r}: "
            "set DGLBACKEND=pytorch"
        )
    return dgl, placeholder is not None


dgl, GRAPHBOLT_PLACEHOLDER = _import_dgl()
"""``dgl``, and whether importing this module put the ``dgl.graphbolt`` placeholder in place."""


@functools.cache
def _dgl_supports(device: torch.device) -> bool:
    """Whether this DGL build can hold graphs on ``device`` (the PyPI build: the CPU only)."""
    if device.type == "cpu":
        return True
    try:
        dgl.graph(([0], [0])).to(device)
    except Exception:  # noqa: BLE001 - DGLError, RuntimeError: any failure means "no"
        return False
    return True


# --------------------------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------------------------


def to_csr(graph: Any, *, indices_dtype: torch.dtype = torch.int64) -> CSRGraph:
    """The in-neighbor `CSRGraph` of a homogeneous ``dgl.DGLGraph`` (or a `CSRGraph` as is).

    The CSR's edge ids are DGL's edge ids, so sampled edges index ``g.edata`` and
    ``g.find_edges``. In-edges are what DGL's ``NeighborSampler`` samples (``edge_dir="in"``).

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
            "types): ibp_graph's DataLoader samples homogeneous graphs only"
        )
    src, dst = graph.edges(order="eid")
    return CSRGraph.from_edge_index(
        torch.stack([src, dst]), graph.num_nodes(), indices_dtype=indices_dtype
    )


# --------------------------------------------------------------------------------------------
# NeighborSampler
# --------------------------------------------------------------------------------------------


def _check_fanouts(fanouts: object) -> list[int]:
    if not isinstance(fanouts, (list, tuple)):
        raise IBPInputError(f"fanouts must be a list of ints, got '{type_name(fanouts)}'")
    if not fanouts:
        raise IBPInputError("fanouts must be a non-empty list of ints (one per layer)")
    out = []
    for i, k in enumerate(fanouts):
        if isinstance(k, dict):
            raise unsupported(
                "fanouts", fanouts, "per-edge-type fanouts belong to heterogeneous graphs"
            )
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise IBPInputError(
                f"fanouts must be a list of ints, got '{type_name(k)}' at index {i}"
            )
        k = int(k)
        if k < -1:
            raise IBPInputError(f"fanouts[{i}] must be >= -1 (-1: all neighbors), got {k}")
        out.append(k)
    return out


def _check_names(name: str, names: object) -> list[str]:
    if names is None:
        return []
    if isinstance(names, dict):
        raise unsupported(name, names, "per-type names belong to heterogeneous graphs")
    if isinstance(names, str):
        raise IBPInputError(f"{name} must be a list of names, got the string {names!r}")
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise IBPInputError(f"{name} must be a list of str, got {names!r}")
    return list(names)


class NeighborSampler:
    """DGL's ``NeighborSampler`` settings, sampled by ibp-graph's uniform sampler.

    Takes ``dgl.dataloading.NeighborSampler``'s arguments in DGL's order; what ibp-graph does
    not implement raises at construction. Pass it to `DataLoader` (which also accepts DGL's
    own ``NeighborSampler``/``MultiLayerFullNeighborSampler`` and reads these settings from
    it).

    Args:
        fanouts: neighbors per node for each layer, ``fanouts[0]`` the first (outermost)
            layer; ``-1`` takes all of them.
        edge_dir: must be ``"in"`` (sample in-edges).
        prob: non-uniform sampling; must be None.
        mask: edge masks; must be None.
        replace: sampling with replacement; must be False.
        prefetch_node_feats: node data for ``blocks[0].srcdata``: the first name is filled
            from the loader's ``features`` (default ``g.ndata[name]``), the others from
            ``g.ndata`` (default: ``["feat"]`` when there are features).
        prefetch_labels: node data for ``blocks[-1].dstdata``: the first name from the
            loader's ``labels`` (default ``g.ndata[name]``), the others from ``g.ndata``
            (default: ``["label"]`` when there are labels).
        prefetch_edge_feats: edge data copied from ``g.edata`` into every block's ``edata``
            (default: none).
        output_device: where blocks land when the loader's ``device`` is None
            (default: None).
        fused: accepted for compatibility (DGL's fused CPU kernel); no effect.

    Raises:
        NotImplementedError: an option we do not support (naming it), or per-type
            (heterogeneous) fanouts or names.
        IBPInputError: ``fanouts`` not a non-empty list of ints >= -1, or names not lists
            of str.
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
    ) -> None:
        self.fanouts = _check_fanouts(fanouts)
        if edge_dir != "in":
            raise unsupported("edge_dir", edge_dir, "only in-edges are sampled")
        for name, value, why in (
            ("prob", prob, "sampling is uniform"),
            ("mask", mask, "edge masks are not implemented"),
        ):
            if value is not None:
                raise unsupported(name, value, why)
        if replace is not False:
            raise unsupported("replace", replace, "the sampler draws without replacement")
        self.edge_dir = edge_dir
        self.prob = None
        self.replace = False
        self.prefetch_node_feats = _check_names("prefetch_node_feats", prefetch_node_feats)
        self.prefetch_labels = _check_names("prefetch_labels", prefetch_labels)
        self.prefetch_edge_feats = _check_names("prefetch_edge_feats", prefetch_edge_feats)
        self.output_device = output_device
        self.fused = fused

    @classmethod
    def from_dgl(cls, sampler: Any) -> NeighborSampler:
        """The same settings as a ``dgl.dataloading.NeighborSampler`` (or a subclass).

        Raises:
            NotImplementedError: ``sampler`` is another DGL sampler, or uses an option we do
                not support.
        """
        if isinstance(sampler, NeighborSampler):
            return sampler
        if not isinstance(sampler, dgl.dataloading.NeighborSampler):
            raise NotImplementedError(
                f"graph_sampler={type_name(sampler)} is not supported by ibp_graph's "
                "DataLoader: pass ibp_graph.loaders.dgl.NeighborSampler or "
                "dgl.dataloading.NeighborSampler"
            )
        if getattr(sampler, "prob", None) is not None:
            raise unsupported("prob (or mask)", sampler.prob, "sampling is uniform")
        return cls(
            list(sampler.fanouts),
            edge_dir=sampler.edge_dir,
            replace=sampler.replace,
            prefetch_node_feats=sampler.prefetch_node_feats or None,
            prefetch_labels=sampler.prefetch_labels or None,
            prefetch_edge_feats=sampler.prefetch_edge_feats or None,
            output_device=sampler.output_device,
            fused=getattr(sampler, "fused", True),
        )

    def __repr__(self) -> str:
        return (
            f"NeighborSampler(fanouts={self.fanouts}, prefetch_node_feats="
            f"{self.prefetch_node_feats}, prefetch_labels={self.prefetch_labels})"
        )


# --------------------------------------------------------------------------------------------
# DataLoader
# --------------------------------------------------------------------------------------------


@dataclass
class _Prepared:
    """A prepared batch; ``tensors`` keeps every CUDA tensor visible to ``record_stream``."""

    input_nodes: torch.Tensor
    output_nodes: torch.Tensor
    blocks: list
    tensors: list[torch.Tensor] = field(default_factory=list)


def _node_tensor(name: str, value: Any, num_nodes: int, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise IBPInputError(f"{name} must be a torch.Tensor, got '{type_name(value)}'")
    if value.dim() < 1 or value.size(0) != num_nodes:
        raise IBPInputError(
            f"{name} has {value.size(0) if value.dim() else 0} rows, the graph has "
            f"{num_nodes} {what}"
        )
    return value


class DataLoader(BaseNodeLoader):
    """DGL's ``DataLoader`` for node classification, with compressed features and prefetch.

    Each step yields ``(input_nodes, output_nodes, blocks)`` (see the module docstring):
    ``blocks[0].srcdata[feat]`` holds the rows of ``input_nodes`` read through ``features``,
    ``blocks[-1].dstdata[label]`` the seeds' labels, where ``feat`` and ``label`` are the
    first names of the sampler's ``prefetch_node_feats`` and ``prefetch_labels``
    (default: ``"feat"`` and ``"label"``). Further prefetch names are sliced from
    ``g.ndata`` / ``g.edata``; nothing else of ``g``'s data is copied into the blocks.

    Seeds are the ``indices`` in batches of ``batch_size``; like DGL's, they should be
    distinct (a repeated seed appears at each of its positions in ``output_nodes``, but only
    the first one gets in-edges). Reproducibility follows `ibp_graph.loading`: with ``seed``
    set, epoch ``e`` always yields the same batches.

    Args:
        graph: a homogeneous ``dgl.DGLGraph``, or an ibp-graph `CSRGraph` (then ``features``
            and ``labels`` are passed explicitly). Use `from_ogb` for an OGB dataset.
        indices: seed node ids (tensor, array, list), or a boolean mask over the nodes.
        graph_sampler: `NeighborSampler`, or DGL's ``dgl.dataloading.NeighborSampler``
            (its settings are read; the sampling is ibp-graph's).
        device: where sampling runs and blocks land (default: the sampler's
            ``output_device``, else the DGL graph's device when it is a GPU, else where
            ``features`` delivers rows, else the CPU).
        use_ddp: must be False.
        ddp_seed: ignored (there is no distributed sampler).
        batch_size: seeds per batch (default: 1).
        drop_last: drop the last, smaller batch (default: False).
        shuffle: reshuffle the seeds every epoch (default: False).
        use_prefetch_thread: accepted for compatibility, no effect (``prefetch`` replaces it).
        use_alternate_streams: accepted, no effect: on a GPU batches are always prepared on
            a side stream.
        pin_prefetcher: accepted, no effect.
        use_uva: must be False: a `CudaIBPTable` or `PinnedRawTable` already reads the rows
            over UVA, and ``graph_memory="uva"`` samples a graph kept in pinned memory.
        gpu_cache: must be None.
        num_workers: must be 0 (prefetching replaces worker processes).
        persistent_workers: must be False.
        pin_memory: accepted for compatibility, no effect.
        features: the node features: an `IBPTable`, `CudaIBPTable`, `PinnedRawTable`,
            tensor or `FeatureSource` (default: ``g.ndata[feat]``; without it, no features).
        labels: the node labels, one row per node (default: ``g.ndata[label]``; without it,
            no labels).
        prefetch: batches prepared ahead of the one being consumed (default: 2).
        seed: base seed of the shuffle and the sampler (default: None).
        progress: iterate through a tqdm bar showing `stats` (default: False).
        graph_memory: where the sampled graph lives: ``"device"`` (copied to ``device``) or
            ``"uva"`` (pinned host memory read by the GPU over UVA, for graphs larger than
            the GPU; needs a CUDA ``device``) (default: ``"device"``).
        sampler_backend: how the sampler draws neighbors: ``"torch"`` (torch ops, any
            device) or ``"kernel"`` (a CUDA kernel; needs a CUDA ``device``), see
            `ibp_graph.sampler.NeighborSampler` (default: ``"torch"``).

    Raises:
        NotImplementedError: an option or graph we do not support (naming it).
        IBPInputError: a bad argument, found at construction: ``fanouts`` not a list of
            ints, ``indices`` out of range, features or labels with another row count than
            the graph has nodes, prefetch names missing from ``g.ndata``/``g.edata``, a CUDA
            ``device`` without a usable GPU, or with a DGL build that has no CUDA, or a
            ``graph_memory`` other than ``"device"`` and ``"uva"``, or ``"uva"`` with a CPU
            ``device``, or an unknown ``sampler_backend``.
        IBPDeviceError: ``sampler_backend="kernel"`` with a CPU ``device``.
    """

    def __init__(
        self,
        graph: Any,
        indices: Any,
        graph_sampler: NeighborSampler | Any,
        device: str | torch.device | None = None,
        *,
        use_ddp: bool = False,
        ddp_seed: int = 0,
        batch_size: int = 1,
        drop_last: bool = False,
        shuffle: bool = False,
        use_prefetch_thread: bool | None = None,
        use_alternate_streams: bool | None = None,
        pin_prefetcher: bool | None = None,
        use_uva: bool = False,
        gpu_cache: dict | None = None,
        num_workers: int = 0,
        persistent_workers: bool = False,
        pin_memory: bool = False,
        features: Any = None,
        labels: torch.Tensor | None = None,
        prefetch: int = 2,
        seed: int | None = None,
        progress: bool = False,
        graph_memory: str = "device",
        sampler_backend: str = "torch",
    ) -> None:
        settings = NeighborSampler.from_dgl(graph_sampler)
        for name, value, ok, why in (
            ("use_ddp", use_ddp, False, "there is no distributed sampler"),
            (
                "use_uva",
                use_uva,
                False,
                "CUDA tables read rows over UVA already; for the graph pass graph_memory='uva'",
            ),
            ("gpu_cache", gpu_cache, None, "there is no GPU feature cache"),
            ("num_workers", num_workers, 0, "batches are prefetched in this process"),
            ("persistent_workers", persistent_workers, False, "there are no worker processes"),
        ):
            if value is not ok and value != ok:
                raise unsupported(name, value, why)
        self._set_loop_args(
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
            prefetch=prefetch,
            seed=seed,
            progress=progress,
        )
        self.graph_memory = check_graph_memory(graph_memory)
        is_dgl = isinstance(graph, dgl.DGLGraph)
        csr = to_csr(graph)  # checks the graph's type first
        num_nodes = csr.num_nodes
        self.graph = graph
        self.graph_sampler = settings
        self.indices = indices
        self.use_ddp, self.ddp_seed, self.use_uva = use_ddp, ddp_seed, use_uva
        self.use_prefetch_thread = use_prefetch_thread
        self.use_alternate_streams = use_alternate_streams
        self.pin_prefetcher = pin_prefetcher
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.input_nodes, self._input_id = input_nodes(indices, num_nodes, name="indices")

        ndata = graph.ndata if is_dgl else {}
        edata = graph.edata if is_dgl else {}
        feat_names = settings.prefetch_node_feats or ["feat"]
        label_names = settings.prefetch_labels or ["label"]
        self.feat_key, self.label_key = feat_names[0], label_names[0]

        # Where things run.
        if device is None:
            device = settings.output_device
        dev = resolve_device(device)
        if dev is not None:
            self._check_dgl_device(dev)
        if features is None and self.feat_key in ndata:
            features = ndata[self.feat_key]
        elif features is None and settings.prefetch_node_feats:
            raise IBPInputError(self._missing("node", self.feat_key, is_dgl, "features"))
        self.features: FeatureSource | None = None
        if features is not None:
            self.features = as_feature_source(features, dev, check=False)
            if self.features.num_rows != num_nodes:
                raise IBPInputError(
                    f"features have {self.features.num_rows} rows, the graph has {num_nodes} nodes"
                )
        if dev is None:
            if is_dgl and graph.device.type != "cpu":
                dev = resolve_device(graph.device)
            elif self.features is not None:
                dev = self.features.device
            else:
                dev = torch.device("cpu")
        self._check_dgl_device(dev)
        self.device = dev

        # What goes into the blocks, moved to the device once.
        if labels is None and self.label_key in ndata:
            labels = ndata[self.label_key]
        elif labels is None and settings.prefetch_labels:
            raise IBPInputError(self._missing("node", self.label_key, is_dgl, "labels"))
        self.labels = None
        if labels is not None:
            self.labels = _node_tensor("labels", labels, num_nodes, "nodes").to(dev)
        self._src_extra = self._slice_sources(feat_names[1:], ndata, "node", is_dgl, num_nodes)
        self._dst_extra = self._slice_sources(label_names[1:], ndata, "node", is_dgl, num_nodes)
        self._edge_extra = self._slice_sources(
            settings.prefetch_edge_feats, edata, "edge", is_dgl, csr.num_edges
        )

        self.csr = place_graph(csr, dev, self.graph_memory)
        # Our sampler's hop 1 expands the seeds: DGL's last layer.
        self.sampler = CSRNeighborSampler(
            self.csr, settings.fanouts[::-1], seed=self.seed, backend=sampler_backend
        )
        self._start_pipeline()

    # -- construction helpers ------------------------------------------------------------
    @staticmethod
    def _check_dgl_device(dev: torch.device) -> None:
        if not _dgl_supports(dev):
            raise IBPInputError(
                f"blocks would live on {dev}, but this DGL build ({dgl.__version__}) cannot put "
                "graphs there (the PyPI build is CPU-only, and DGL refuses GPU tensors in a "
                "CPU block's srcdata): install a CUDA build of DGL, or use the CPU "
                "(device='cpu' and features=ibp_graph.open(path) or a CPU tensor)"
            )

    @staticmethod
    def _missing(kind: str, name: str, is_dgl: bool, keyword: str) -> str:
        where = f"g.{'n' if kind == 'node' else 'e'}data" if is_dgl else "a CSRGraph"
        return f"{where} has no {name!r} to prefetch; pass {keyword}= or drop the name"

    def _slice_sources(
        self, names: Sequence[str], frames: Any, kind: str, is_dgl: bool, rows: int
    ) -> dict[str, torch.Tensor]:
        out = {}
        for name in names:
            if name not in frames:
                keyword = "prefetch_edge_feats" if kind == "edge" else "prefetch names"
                raise IBPInputError(self._missing(kind, name, is_dgl, keyword))
            out[name] = _node_tensor(f"g.{kind[0]}data[{name!r}]", frames[name], rows, kind + "s")
            out[name] = out[name].to(self.device)
        return out

    @classmethod
    def from_ogb(
        cls,
        dataset: Any,
        graph_sampler: NeighborSampler | Any,
        split: str = "train",
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> DataLoader:
        """A loader over one split of OGB's ``DglNodePropPredDataset``.

        ``graph, labels = dataset[0]``; the seeds are ``dataset.get_idx_split()[split]`` and
        the labels OGB's ``(num_nodes, 1)`` column flattened (unless ``labels=`` is passed).

        Example:
            >>> from ogb.nodeproppred import DglNodePropPredDataset          # doctest: +SKIP
            >>> ds = DglNodePropPredDataset("ogbn-arxiv", root="dataset")    # doctest: +SKIP
            >>> loader = DataLoader.from_ogb(ds, NeighborSampler([10, 5]),   # doctest: +SKIP
            ...                              batch_size=1024, features=ibp_graph.open("x.ibp"))

        Args:
            dataset: a ``DglNodePropPredDataset`` or anything with the same interface.
            graph_sampler: as for `DataLoader`.
            split: a key of ``get_idx_split()`` (OGB: ``"train"``, ``"valid"``, ``"test"``)
                (default: ``"train"``).
            device: as for `DataLoader`.
            **kwargs: `DataLoader`'s keyword arguments.

        Raises:
            IBPInputError: ``dataset`` does not look like OGB's, or has no split ``split``.
        """
        if not callable(getattr(dataset, "get_idx_split", None)) or not hasattr(
            dataset, "__getitem__"
        ):
            raise IBPInputError(
                "dataset must be an OGB DglNodePropPredDataset (with dataset[0] and "
                f"get_idx_split()), got '{type_name(dataset)}'"
            )
        item = dataset[0]
        if not isinstance(item, tuple) or len(item) != 2:
            raise IBPInputError(f"dataset[0] must be a (graph, labels) pair, got {item!r:.80}")
        graph, labels = item
        splits = dataset.get_idx_split()
        if split not in splits:
            raise IBPInputError(f"no split {split!r} in get_idx_split(): has {sorted(splits)}")
        if kwargs.get("labels") is None and labels is not None:
            if not isinstance(labels, torch.Tensor):
                labels = torch.as_tensor(labels)
            kwargs["labels"] = (
                labels.view(-1) if labels.dim() == 2 and labels.size(1) == 1 else labels
            )
        return cls(graph, splits[split], graph_sampler, device, **kwargs)

    # -- batches -------------------------------------------------------------------------
    def _fetch(self, sampled: SampledBatch, stream: torch.cuda.Stream | None) -> _Prepared:
        """Blocks from the outermost hop to the seeds, with rows, labels and edge data."""
        node, row, col, edge = sampled.node, sampled.row, sampled.col, sampled.edge
        nodes_upto = [0]  # nodes_upto[h]: nodes of the hops < h
        for n in sampled.num_sampled_nodes:
            nodes_upto.append(nodes_upto[-1] + n)
        edges_upto = [0]
        for e in sampled.num_sampled_edges:
            edges_upto.append(edges_upto[-1] + e)
        hops = len(sampled.num_sampled_edges)
        tensors = [node, row, col, edge]
        blocks = []
        for h in range(hops, 0, -1):  # the block of hop h: edges of hops <= h
            ne, num_dst, num_src = edges_upto[h], nodes_upto[h], nodes_upto[h + 1]
            block = dgl.create_block(
                (row[:ne], col[:ne]), num_src_nodes=num_src, num_dst_nodes=num_dst
            )
            block.srcdata[dgl.NID] = node[:num_src]
            block.dstdata[dgl.NID] = node[:num_dst]
            block.edata[dgl.EID] = edge[:ne]
            for name, value in self._edge_extra.items():
                block.edata[name] = value.index_select(0, edge[:ne])
                tensors.append(block.edata[name])
            blocks.append(block)
        first, last = blocks[0], blocks[-1]
        src = self.features
        if src is not None:
            rows = src.gather(node, stream=stream)
            first.srcdata[self.feat_key] = rows
            tensors.append(rows)
            n = node.numel()
            self.stats.add_fetch(n, src.stored_bytes(node), n * src.row_bytes)
        for name, value in self._src_extra.items():
            first.srcdata[name] = value.index_select(0, node)
            tensors.append(first.srcdata[name])
        seeds = node[: sampled.batch_size]
        if self.labels is not None:
            last.dstdata[self.label_key] = self.labels.index_select(0, seeds)
            tensors.append(last.dstdata[self.label_key])
        for name, value in self._dst_extra.items():
            last.dstdata[name] = value.index_select(0, seeds)
            tensors.append(last.dstdata[name])
        return _Prepared(node, seeds, blocks, tensors)

    def _deliver(self, batch: _Prepared) -> tuple[torch.Tensor, torch.Tensor, list]:
        return batch.input_nodes, batch.output_nodes, batch.blocks

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_nodes={self.csr.num_nodes}, "
            f"fanouts={self.graph_sampler.fanouts}, batch_size={self.batch_size}, "
            f"features={self.features!r}, device={self.device})"
        )
