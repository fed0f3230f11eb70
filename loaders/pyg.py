"""PyTorch Geometric drop-ins: `NeighborLoader` and `IBPFeatureStore`.

`NeighborLoader` takes PyG's arguments in PyG's order and yields PyG ``Data`` batches with
PyG's fields, sampled by ibp-graph's own sampler (no pyg-lib or torch-sparse needed), with
node features read from an IBP-compressed table, a pinned raw table or a tensor, and the
next batches prepared while the model trains (see `ibp_graph.prefetch`). A training script
changes only its import:

.. code-block:: python

    import torch
    import torch.nn.functional as F
    from torch_geometric.data import Data
    from torch_geometric.nn.models import GraphSAGE

    import ibp_graph

    # from torch_geometric.loader import NeighborLoader
    from ibp_graph.loaders.pyg import NeighborLoader

    torch.manual_seed(0)
    x = (torch.rand(1000, 64) < 0.05).float()  # a sparse bag of words
    data = Data(x=x, edge_index=torch.randint(0, 1000, (2, 5000)), y=x[:, :4].argmax(1))
    data.train_mask = torch.rand(1000) < 0.5
    table = ibp_graph.compress(data.x, "x.ibp", progress=False)  # once, offline

    loader = NeighborLoader(
        data,
        num_neighbors=[10, 5],
        input_nodes=data.train_mask,
        batch_size=128,
        shuffle=True,
        features=table,  # ours: the compressed table (default: data.x)
        seed=0,  # ours: reproducible batches
    )
    model = GraphSAGE(64, 32, num_layers=2, out_channels=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for batch in loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
    print(loader.stats.summary())

`IBPFeatureStore` serves the same tables through PyG's ``FeatureStore`` interface.

Importing this module needs ``torch_geometric`` (the ``pyg`` extra).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

try:
    from torch_geometric.data import Data, FeatureStore, HeteroData, TensorAttr
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "ibp_graph.loaders.pyg needs PyTorch Geometric: pip install 'ibp-graph[pyg]'"
    ) from _exc

from ibp_graph import loading
from ibp_graph.errors import IBPInputError
from ibp_graph.features import FeatureSource, as_feature_source, resolve_device
from ibp_graph.graph import CSRGraph
from ibp_graph.loading import BaseNodeLoader, type_name, unsupported
from ibp_graph.sampler import NeighborSampler, SampledBatch

__all__ = ["IBPFeatureStore", "NeighborLoader"]


def _select(value: Any, index: torch.Tensor, dim: int) -> Any:
    if isinstance(value, torch.Tensor):
        return value.index_select(dim, index.to(value.device))
    return [value[i] for i in index.tolist()]  # a list or tuple with one entry per item


class NeighborLoader(BaseNodeLoader):
    """PyG's ``NeighborLoader`` for homogeneous graphs, with compressed features and prefetch.

    Uniform neighbor sampling without replacement (`ibp_graph.sampler.NeighborSampler`, PyG's
    semantics). Each batch is a ``torch_geometric.data.Data`` with PyG's fields: ``x`` (the
    rows of ``n_id``, read through ``features``), ``edge_index`` (local), ``n_id``, ``e_id``,
    ``input_id``, ``batch_size``, ``num_sampled_nodes``, ``num_sampled_edges``, every other
    node-level attribute of ``data`` (``y``, masks, ...) sliced by ``n_id``, every edge-level
    one sliced by ``e_id``, and ``data``'s other attributes as they are.

    Where things run (``device`` defaults to where ``features`` delivers rows):

    ================================  ==========  ============================================
    ``features``                      ``device``  sampling, and rows
    ================================  ==========  ============================================
    ``data.x`` / CPU tensor           CPU         CPU; ``index_select``
    `IBPTable`                        CPU         CPU; decoded by NumPy
    `IBPTable`                        CUDA        GPU; the file is opened as a `CudaIBPTable`
    `CudaIBPTable`                    its GPU     GPU; fetched and decoded by the GPU over UVA
    `PinnedRawTable`                  its GPU     GPU; gathered by the GPU over UVA (IBP off)
    CPU tensor                        CUDA        GPU; gathered on the CPU, copied to the GPU
    any, with ``graph_memory="uva"``  CUDA        GPU, the graph read over UVA from pinned
                                                  host memory; rows as above
    ================================  ==========  ============================================

    On a GPU the graph is copied there once (``graph_memory="device"``, the default) and the
    same sampler code runs on CUDA tensors. With ``graph_memory="uva"`` it stays in pinned
    host memory instead, as CUDA tensors the sampler reads over PCIe: for graphs larger than
    the GPU, at the cost of slower sampling; the batches are the same. Node- and edge-level
    attributes of ``data`` are copied to the GPU once, and sampling and fetching run on a side
    stream, ``prefetch`` batches ahead.

    Reproducibility follows `ibp_graph.loading`: with ``seed`` set, epoch ``e`` of any loader
    built with the same arguments yields the same batches, whatever the prefetch depth or
    earlier epochs did; with ``seed=None`` the base seed is drawn from torch's global
    generator at construction (so ``torch.manual_seed`` fixes it). CPU and CUDA draws differ
    for the same seed.

    Args:
        data: the graph, a ``torch_geometric.data.Data`` with ``edge_index``.
        num_neighbors: neighbors sampled per node, one int per hop (``-1``: all).
        input_nodes: seed nodes: None (all nodes), a boolean mask or an index tensor. As in
            PyG, ``input_id`` holds positions in an index, node ids for a mask
            (default: None).
        input_time: temporal sampling; must be None.
        replace: sampling with replacement; must be False.
        subgraph_type: must be ``"directional"``.
        disjoint: must be False.
        temporal_strategy: must be ``"uniform"``.
        time_attr: must be None.
        weight_attr: weighted sampling; must be None.
        transform: called on every batch (``Data``) before it is handed over
            (default: None).
        transform_sampler_output: must be None.
        is_sorted: ignored (our CSR is built once with a stable sort).
        filter_per_worker: ignored: batches are assembled in the loading process.
        neighbor_sampler: must be None.
        directed: must be True.
        batch_size: seeds per batch (default: 1).
        shuffle: reshuffle the seeds every epoch (default: False).
        drop_last: drop the last, smaller batch (default: False).
        num_workers: must be 0 (prefetching replaces worker processes).
        pin_memory: accepted for compatibility, no effect.
        persistent_workers: must be False.
        features: the node features: an `IBPTable`, `CudaIBPTable`, `PinnedRawTable`,
            tensor or `FeatureSource` (default: ``data.x``; None without ``data.x``: batches
            have no ``x``).
        device: where batches land and sampling runs (default: the features' device).
        prefetch: batches prepared ahead of the one being consumed (default: 2).
        seed: base seed of the shuffle and the sampler (default: None).
        progress: iterate through a tqdm bar showing `stats` (default: False).
        graph_memory: where the graph lives: ``"device"`` (copied to ``device``) or
            ``"uva"`` (pinned host memory read by the GPU over UVA, for graphs larger than
            the GPU; needs a CUDA ``device``) (default: ``"device"``).
        sampler_backend: how the sampler draws neighbors: ``"torch"`` (torch ops, any
            device) or ``"kernel"`` (a CUDA kernel; needs a CUDA ``device``), see
            `ibp_graph.sampler.NeighborSampler` (default: ``"torch"``).

    Raises:
        NotImplementedError: an option we do not support is set (naming it).
        IBPInputError: a bad argument, found at construction: ``num_neighbors`` not a list
            of ints, ``input_nodes`` out of range, features with another row count than
            ``data.num_nodes``, a CUDA ``device`` without a usable GPU, or a
            ``graph_memory`` other than ``"device"`` and ``"uva"``, or ``"uva"`` with a CPU
            ``device``, or an unknown ``sampler_backend``.
        IBPDeviceError: ``sampler_backend="kernel"`` with a CPU ``device``.
    """

    def __init__(
        self,
        data: Data,
        num_neighbors: list[int],
        input_nodes: torch.Tensor | None = None,
        input_time: torch.Tensor | None = None,
        replace: bool = False,
        subgraph_type: Any = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: str | None = None,
        weight_attr: str | None = None,
        transform: Callable[[Data], Any] | None = None,
        transform_sampler_output: Callable | None = None,
        is_sorted: bool = False,
        filter_per_worker: bool | None = None,
        neighbor_sampler: Any = None,
        directed: bool = True,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        features: Any = None,
        device: str | torch.device | None = None,
        prefetch: int = 2,
        seed: int | None = None,
        progress: bool = False,
        graph_memory: str = "device",
        sampler_backend: str = "torch",
    ) -> None:
        self._check_data(data)
        self._check_options(
            input_time=input_time,
            replace=replace,
            subgraph_type=subgraph_type,
            disjoint=disjoint,
            temporal_strategy=temporal_strategy,
            time_attr=time_attr,
            weight_attr=weight_attr,
            transform_sampler_output=transform_sampler_output,
            neighbor_sampler=neighbor_sampler,
            directed=directed,
            num_workers=num_workers,
            persistent_workers=persistent_workers,
        )
        if transform is not None and not callable(transform):
            raise IBPInputError(f"transform must be callable, got '{type_name(transform)}'")
        self._set_loop_args(
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
            prefetch=prefetch,
            seed=seed,
            progress=progress,
        )
        self.graph_memory = loading.check_graph_memory(graph_memory)

        num_nodes = int(data.num_nodes)
        self.data = data
        self.num_neighbors = num_neighbors
        self.pin_memory = pin_memory
        self.filter_per_worker = filter_per_worker
        self.transform = transform
        # PyG names node types by a string or a (type, ids) tuple; a mapping is just a bad
        # argument here (DGL's {ntype: ids} is refused as unsupported by the shared default).
        self.input_nodes, self._input_id = loading.input_nodes(
            input_nodes, num_nodes, node_types=(str, tuple)
        )

        self.features: FeatureSource | None = None
        if features is not None or getattr(data, "x", None) is not None:
            self.features = as_feature_source(features, device, data=data, check=False)
            if self.features.num_rows != num_nodes:
                raise IBPInputError(
                    f"features have {self.features.num_rows} rows, the graph has {num_nodes} nodes"
                )
        dev = resolve_device(device)
        if dev is None:
            dev = self.features.device if self.features is not None else torch.device("cpu")
        self.device = dev

        self.graph = loading.place_graph(CSRGraph.from_data(data), dev, self.graph_memory)
        self.sampler = NeighborSampler(
            self.graph, num_neighbors, seed=self.seed, backend=sampler_backend
        )
        self._split_attrs()
        self._start_pipeline()

    # -- construction helpers ----------------------------------------------------------
    @staticmethod
    def _check_data(data: Any) -> None:
        if isinstance(data, HeteroData):
            raise NotImplementedError(
                "data is a HeteroData: ibp_graph's NeighborLoader samples homogeneous graphs "
                "(torch_geometric.data.Data) only"
            )
        if isinstance(data, (tuple, list)):
            raise NotImplementedError(
                "data=(FeatureStore, GraphStore) is not supported by ibp_graph's NeighborLoader;"
                " pass a Data (and IBP tables through features=)"
            )
        if not isinstance(data, Data):
            raise IBPInputError(
                f"data must be a torch_geometric.data.Data, got '{type_name(data)}'"
            )
        if data.edge_index is None:
            if "adj_t" in data:
                raise NotImplementedError(
                    "data.adj_t (a SparseTensor) is not supported: give data an edge_index"
                )
            raise IBPInputError("data must have an edge_index")
        if data.num_nodes is None:
            raise IBPInputError("data.num_nodes is unknown: set data.num_nodes")

    @staticmethod
    def _check_options(**opts: Any) -> None:
        why = {
            "input_time": (None, "temporal sampling is not implemented"),
            "replace": (False, "the sampler draws without replacement"),
            "disjoint": (False, "disjoint subgraphs per seed are not implemented"),
            "temporal_strategy": ("uniform", "temporal sampling is not implemented"),
            "time_attr": (None, "temporal sampling is not implemented"),
            "weight_attr": (None, "weighted sampling is not implemented"),
            "transform_sampler_output": (None, "batches are assembled from our SampledBatch"),
            "neighbor_sampler": (None, "the loader builds its own ibp_graph NeighborSampler"),
            "directed": (True, "only directional subgraphs are sampled"),
            "num_workers": (0, "batches are prefetched in this process (see prefetch=)"),
            "persistent_workers": (False, "there are no worker processes"),
        }
        for name, (ok, reason) in why.items():
            value = opts[name]
            if ok is None:
                bad = value is not None
            else:
                bad = isinstance(value, torch.Tensor) or value != ok
            if bad:
                raise unsupported(name, value, reason)
        sub = opts["subgraph_type"]
        if getattr(sub, "value", sub) != "directional":
            raise unsupported("subgraph_type", sub, "only 'directional' subgraphs are sampled")

    def _split_attrs(self) -> None:
        """Sort ``data``'s attributes into node-level, edge-level and the rest, on device."""
        data, dev = self.data, self.device
        base = copy.copy(data)
        self._node_attrs: dict[str, tuple[Any, int]] = {}
        self._edge_attrs: dict[str, tuple[Any, int]] = {}
        self._has_num_nodes = False
        for key in data.keys():  # noqa: SIM118 - Data.keys() is a method, not a dict view
            value = data[key]
            if key == "num_nodes":
                self._has_num_nodes = True
            elif key in ("x", "edge_index"):
                continue
            elif data.is_node_attr(key) or data.is_edge_attr(key):
                if isinstance(value, np.ndarray):
                    value = torch.from_numpy(value)
                if isinstance(value, torch.Tensor):
                    value = value.to(dev)
                    dim = data.__cat_dim__(key, value)
                else:
                    dim = 0
                target = self._node_attrs if data.is_node_attr(key) else self._edge_attrs
                target[key] = (value, dim)
            elif isinstance(value, torch.Tensor):
                base[key] = value.to(dev)
        self._base = base

    # -- batches -----------------------------------------------------------------------
    def _fetch(self, sampled: SampledBatch, stream: torch.cuda.Stream | None) -> Any:
        """Join a sampled subgraph with its features and attributes: one PyG ``Data``."""
        node, edge = sampled.node, sampled.edge
        out = copy.copy(self._base)
        for key, (value, dim) in self._node_attrs.items():
            out[key] = _select(value, node, dim)
        for key, (value, dim) in self._edge_attrs.items():
            out[key] = _select(value, edge, dim)
        if self._has_num_nodes:
            out.num_nodes = node.numel()
        out.edge_index = sampled.edge_index
        src = self.features
        if src is not None:
            out.x = src.gather(node, stream=stream)
            rows = node.numel()
            self.stats.add_fetch(rows, src.stored_bytes(node), rows * src.row_bytes)
        if "n_id" not in out:
            out.n_id = node
        if "e_id" not in out:
            out.e_id = edge
        out.num_sampled_nodes = list(sampled.num_sampled_nodes)
        out.num_sampled_edges = list(sampled.num_sampled_edges)
        out.input_id = sampled.input_id.to(self.device)
        out.batch_size = sampled.batch_size
        if self.transform is not None:
            out = self.transform(out)
        return out

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_nodes={self.graph.num_nodes}, "
            f"num_neighbors={list(self.sampler.num_neighbors)}, batch_size={self.batch_size}, "
            f"features={self.features!r}, device={self.device})"
        )


FeatureKey = tuple[str | None, str]


class IBPFeatureStore(FeatureStore):
    """A read-only PyG ``FeatureStore`` over IBP tables, pinned raw tables or tensors.

    Keys are ``(group_name, attr_name)``; a single table is stored under ``(None, "x")``.
    Rows come back on each source's device. ``multi_get_tensor`` does one batched fetch per
    source. Writing and removing raise ``NotImplementedError``.

    With CUDA tables (`CudaIBPTable`, `PinnedRawTable`) use PyG loaders with
    ``filter_per_worker=False``: features must be fetched in the main process, where the GPU
    context and the pinned memory live.

    Example:
        >>> store = IBPFeatureStore({("paper", "x"): ibp_graph.open("x.ibp")})  # doctest: +SKIP
        >>> store[("paper", "x", torch.tensor([0, 5]))]                          # doctest: +SKIP
        >>> store.get_tensor(group_name="paper", attr_name="x", index=None)      # doctest: +SKIP

    Args:
        features: one table (stored as ``(None, "x")``), or a mapping from ``attr_name`` or
            ``(group_name, attr_name)`` to tables; each an `IBPTable`, `CudaIBPTable`,
            `PinnedRawTable`, tensor or `FeatureSource`.
        device: where rows land (default: each source's own device).
    """

    def __init__(self, features: Any, *, device: str | torch.device | None = None) -> None:
        super().__init__()
        items = features.items() if isinstance(features, Mapping) else [((None, "x"), features)]
        sources: dict[FeatureKey, FeatureSource] = {}
        for key, obj in items:
            if isinstance(key, str):
                key = (None, key)
            if (
                not isinstance(key, tuple)
                or len(key) != 2
                or not (key[0] is None or isinstance(key[0], str))
                or not isinstance(key[1], str)
            ):
                raise IBPInputError(
                    f"feature keys must be attr_name or (group_name, attr_name), got {key!r}"
                )
            if obj is None:
                raise IBPInputError(f"the features of {key!r} are None")
            sources[key] = as_feature_source(obj, device)
        self._sources = sources

    # -- helpers -----------------------------------------------------------------------
    def _source(self, attr: TensorAttr) -> FeatureSource:
        key = (attr.group_name, attr.attr_name)
        try:
            return self._sources[key]
        except KeyError:
            raise KeyError(
                f"no tensor for group_name={key[0]!r}, attr_name={key[1]!r}; have "
                f"{sorted(self._sources, key=str)}"
            ) from None

    @staticmethod
    def _ids(index: Any, src: FeatureSource) -> tuple[torch.Tensor, bool]:
        """Checked int64 row ids of a TensorAttr index, and whether it was a single int."""
        n = src.num_rows
        if index is None:
            return torch.arange(n, device=src.index_device), False
        if isinstance(index, slice):
            return torch.arange(*index.indices(n), device=src.index_device), False
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            i = int(index)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of range for {n} rows")
            return torch.tensor([i % n], device=src.index_device), True
        if isinstance(index, np.ndarray):
            index = torch.from_numpy(index)
        if not isinstance(index, torch.Tensor) or index.dim() != 1:
            raise IBPInputError(f"index must be None, an int, a slice or a 1-D tensor: {index!r}")
        if index.dtype == torch.bool:
            if index.numel() != n:
                raise IBPInputError(f"boolean index has {index.numel()} entries, rows: {n}")
            index = index.nonzero().view(-1)
        elif index.dtype.is_floating_point or index.dtype.is_complex:
            raise IBPInputError(f"index must hold integers or bools, got dtype {index.dtype}")
        index = index.to(src.index_device, torch.int64)
        if index.numel():
            lo, hi = (int(v) for v in torch.aminmax(index))
            if lo < 0 or hi >= n:
                bad = int(((index < 0) | (index >= n)).nonzero()[0, 0])
                raise IndexError(f"index[{bad}] = {int(index[bad])} is out of range for {n} rows")
        return index, False

    # -- FeatureStore hooks --------------------------------------------------------------
    def _put_tensor(self, tensor: Any, attr: TensorAttr) -> bool:
        raise NotImplementedError(
            "IBPFeatureStore is read-only: its tables are compressed files; write a new one "
            "with ibp_graph.compress and build a new store"
        )

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise NotImplementedError(
            "IBPFeatureStore is read-only: tensors cannot be removed; build a new store"
        )

    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor:
        src = self._source(attr)
        ids, scalar = self._ids(attr.index, src)
        rows = src.gather(ids)
        return rows[0] if scalar else rows

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[torch.Tensor]:
        """One ``gather`` per source for all the attributes that read it."""
        groups: dict[FeatureKey, list[tuple[int, torch.Tensor, bool]]] = {}
        for i, attr in enumerate(attrs):
            src = self._source(attr)
            ids, scalar = self._ids(attr.index, src)
            groups.setdefault((attr.group_name, attr.attr_name), []).append((i, ids, scalar))
        out: list[Any] = [None] * len(attrs)
        for key, parts in groups.items():
            rows = self._sources[key].gather(torch.cat([ids for _, ids, _ in parts]))
            pieces = rows.split([ids.numel() for _, ids, _ in parts])
            for (i, _, scalar), piece in zip(parts, pieces, strict=True):
                out[i] = piece[0] if scalar else piece
        return out

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        src = self._sources.get((attr.group_name, attr.attr_name))
        if src is None:
            return None
        if attr.index is None or not attr.is_set("index"):
            return (src.num_rows, *src.row_shape)
        ids, scalar = self._ids(attr.index, src)
        return src.row_shape if scalar else (ids.numel(), *src.row_shape)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """One ``TensorAttr(group_name, attr_name)`` per source."""
        return [self._tensor_attr_cls.cast(*key) for key in self._sources]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {v!r}" for k, v in self._sources.items())
        return f"IBPFeatureStore({{{inner}}})"
