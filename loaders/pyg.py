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

import contextlib
import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

try:
    from torch_geometric.data import Data, FeatureStore, HeteroData, TensorAttr
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
    from torch_geometric.sampler import NodeSamplerInput, SamplerOutput
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "ibp_graph.loaders.pyg needs PyTorch Geometric: pip install 'ibp-graph[pyg]'"
    ) from _exc

from ibp_graph import loading
from ibp_graph.errors import IBPInputError, check_bool, check_choice
from ibp_graph.features import FeatureSource, as_feature_source, resolve_device
from ibp_graph.graph import CSRGraph
from ibp_graph.indexing import normalize_index_tensor
from ibp_graph.loading import BaseNodeLoader, type_name, unsupported, warn_ignored, warn_once
from ibp_graph.pinned import to_device
from ibp_graph.sampler import SUBGRAPH_TYPES, NeighborSampler, SampledBatch

__all__ = ["IBPFeatureStore", "NeighborLoader"]


def _select(value: Any, index: torch.Tensor, dim: int) -> Any:
    if isinstance(value, torch.Tensor):
        return value.index_select(dim, index.to(value.device))
    return [value[i] for i in index.tolist()]  # a list or tuple with one entry per item


def _subgraph_type(value: Any, directed: bool) -> str:
    """PyG's ``subgraph_type`` (a string or ``SubgraphType``) as a string.

    ``directed=False`` means ``"induced"``, as in PyG.
    """
    if not directed:
        return "induced"
    return check_choice("subgraph_type", value, SUBGRAPH_TYPES)


def _tuple_input_nodes(nodes: Any) -> Any:
    """A tuple ``input_nodes`` as PyG reads it on a ``Data``: node ids, as a list of ints.

    PyG's ``get_input_nodes`` turns any ``input_nodes`` of a ``Data`` that is not a tensor
    into ``torch.tensor(nodes, dtype=torch.long)``. A tuple whose first entry is a string or
    None is PyG's ``(node_type, ids)`` of heterogeneous graphs: it is returned as it is, for
    `ibp_graph.loading.input_nodes` to refuse. Anything else is returned as it is.

    Raises:
        IBPInputError: an entry is not an integer (PyG would read a bool as the id 0 or 1).
    """
    if not isinstance(nodes, tuple) or (nodes and (nodes[0] is None or isinstance(nodes[0], str))):
        return nodes
    ids = []
    for i, value in enumerate(nodes):
        k = loading.as_int(value)
        if k is None:
            hint = (
                " (a mask must be a boolean tensor)" if isinstance(value, (bool, np.bool_)) else ""
            )
            raise IBPInputError(
                f"input_nodes is a tuple of node ids, got '{type_name(value)}' at index {i}{hint}"
            )
        ids.append(k)
    return ids


def _sampler_output(sampled: SampledBatch) -> SamplerOutput:
    """``sampled`` as the ``SamplerOutput`` PyG's ``NeighborSampler`` gives a ``NodeLoader``.

    Its ``metadata`` is ``(input_id, seed_time)``, ``seed_time`` None (no temporal sampling).
    """
    nodes, edges = sampled.num_sampled_nodes, sampled.num_sampled_edges
    return SamplerOutput(
        node=sampled.node,
        row=sampled.row,
        col=sampled.col,
        edge=sampled.edge,
        batch=sampled.batch,
        num_sampled_nodes=None if nodes is None else list(nodes),
        num_sampled_edges=None if edges is None else list(edges),
        metadata=(sampled.input_id, None),
    )


class NeighborLoader(BaseNodeLoader, PyGNeighborLoader):
    """PyG's ``NeighborLoader`` for homogeneous graphs, with compressed features and prefetch.

    Uniform neighbor sampling by `ibp_graph.sampler.NeighborSampler` with PyG's semantics and
    modes (``replace``, ``disjoint``, ``subgraph_type``). Each batch is a
    ``torch_geometric.data.Data`` with PyG's fields: ``x`` (the rows of ``n_id``, read through
    ``features``), ``edge_index`` (local), ``n_id``, ``e_id``, ``input_id``, ``batch_size``,
    ``num_sampled_nodes`` and ``num_sampled_edges`` (``subgraph_type="directional"`` only, as
    in PyG), ``batch`` (``disjoint=True`` only: the seed index of every node), every other
    node-level attribute of ``data`` (``y``, masks, ...) sliced by ``n_id``, every edge-level
    one sliced by ``e_id``, and ``data``'s other attributes as they are. ``data`` is read when
    each epoch starts, so attributes deleted, added or replaced after construction are
    honoured (PyG's ``reddit.py`` deletes ``subgraph_loader.data.x``). Persistent workers
    (``persistent_workers=True``) keep ``data`` as it was when they started, as PyG's do.

    It is a ``torch.utils.data.DataLoader``, as PyG's is: ``loader.dataset`` holds the
    positions of the seeds, ``loader.collate_fn(positions)`` returns their batch, and every
    ``DataLoader`` keyword is accepted (``**kwargs``). On the CPU, ``num_workers > 0`` samples
    and fetches in torch's worker processes; the batches are those of ``num_workers=0``.

    It is also a ``torch_geometric.loader.NeighborLoader`` (PyG's ``__init__`` is not run, and
    PyG's sampling and joining methods are replaced by ours), so PyG code that checks for
    one takes it: ``BasicGNN.inference(loader)`` (with ``cache=True`` too), ``ZipLoader``
    (through `filter_fn`), and PyG's worker helpers ``enable_cpu_affinity``,
    ``enable_multithreading`` and ``enable_memory_log``.

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
    sampler runs its hops there with the fused hop kernels (``sampler_backend=None``, when
    CuPy imports; ``"torch"``: the torch ops of the CPU path, on CUDA tensors), their
    launches replayed from CUDA graphs, 8 batches a call where no hop reads its sizes (every
    fanout from 0 to 256) (``sampler_cuda_graph`` and ``sample_group``, both None); worker
    processes are not used (a one-time warning says so). With ``graph_memory="uva"`` the
    graph stays in pinned host memory instead, as CUDA tensors the sampler reads over PCIe
    (only ``indptr``, 8 bytes a node, is copied to the GPU; `ibp_graph.graph.CSRGraph.to_uva`):
    for graphs larger than the GPU, at the cost of slower sampling; the batches are the same.
    Node- and edge-level attributes of ``data`` are copied to the GPU once, and sampling and
    fetching run on a side stream, ``prefetch`` batches ahead, on a background thread unless
    ``prefetch_thread=False``.

    Reproducibility follows `ibp_graph.loading`: with ``seed`` set, epoch ``e`` of any loader
    built with the same arguments yields the same batches, whatever ``num_workers``, the
    prefetch depth or earlier epochs did; with ``seed=None`` the base seed is drawn from
    ``generator`` or torch's global generator at construction (so ``torch.manual_seed``
    fixes it). CPU and CUDA draws differ for the same seed, as do the two
    ``sampler_backend`` values' draws.

    Arguments that cannot apply never stop a run: a one-time
    `ibp_graph.loading.ArgumentIgnoredWarning` names them and says what happens instead.
    Only temporal and weighted sampling, which would silently change the batches, raise.

    Args:
        data: the graph, a ``torch_geometric.data.Data`` with ``edge_index``.
        num_neighbors: neighbors sampled per node, one int per hop (``-1``: all); ``[]``
            gives the seeds only, as PyG: no edges, ``num_sampled_nodes == [batch_size]``,
            ``num_sampled_edges == []``, ``x`` the seeds' rows.
        input_nodes: seed nodes: None (all nodes), a boolean mask or an index tensor (a
            list or tuple of ints is an index, as in PyG). As in PyG, ``input_id`` holds
            positions in an index, node ids for a mask (default: None).
        input_time: temporal sampling: must be None (raises otherwise).
        replace: sample with replacement (default: False).
        subgraph_type: ``"directional"``, ``"bidirectional"`` or ``"induced"`` (or PyG's
            ``SubgraphType``) (default: ``"directional"``).
        disjoint: one tree per seed; batches get ``batch`` (default: False).
        temporal_strategy: only used by temporal sampling; ignored, with a warning, when
            not ``"uniform"`` (default: ``"uniform"``).
        time_attr: temporal sampling: must be None (raises otherwise).
        weight_attr: weighted sampling: must be None (raises otherwise).
        transform: called on every batch (``Data``) before it is handed over
            (default: None).
        transform_sampler_output: called on every sampled subgraph, as PyG's
            ``SamplerOutput`` (``node``, ``row``, ``col``, ``edge``, ``batch``,
            ``num_sampled_nodes``, ``num_sampled_edges``, ``metadata=(input_id, None)``),
            before it is joined with its features; it returns a ``SamplerOutput`` (the one it
            was given, edited, or a new one: without ``metadata`` the batch keeps its
            ``input_id``; ``edge=None`` drops ``e_id`` and the edge attributes; ``orig_row``
            and ``orig_col`` give ``_orig_edge_index``, as in PyG) (default: None).
        is_sorted: accepted; no effect (the CSR graph is built once, whatever the order of
            ``edge_index``) (default: False).
        filter_per_worker: with workers, join features in the workers (None or True) or in
            the loading process (False) (default: None).
        neighbor_sampler: an `ibp_graph.sampler.NeighborSampler` over this graph to sample
            with, or PyG's ``NeighborSampler``, whose ``num_neighbors``, ``replace``,
            ``subgraph_type`` and ``disjoint`` are used (with a warning: the sampling is
            ibp-graph's) (default: None, built from the arguments above).
        directed: False means ``subgraph_type="induced"`` (PyG's deprecated form)
            (default: True).
        batch_size: seeds per batch (default: 1).
        shuffle: reshuffle the seeds every epoch (default: False).
        drop_last: drop the last, smaller batch (default: False).
        features: the node features: an `IBPTable`, `CudaIBPTable`, `PinnedRawTable`,
            tensor, 2-D NumPy array (a memmap too) or `FeatureSource` (default: ``data.x``
            as it is when each epoch starts; without it, batches have no ``x``).
        device: where batches land and sampling runs (default: the features' device).
        prefetch: batches prepared ahead of the one being consumed, without workers
            (default: 2).
        seed: base seed of the shuffle and the sampler (default: None).
        progress: iterate through a tqdm bar showing `stats` (default: False).
        graph_memory: where the graph lives: ``"device"`` (copied to ``device``) or
            ``"uva"`` (pinned host memory read by the GPU over UVA, for graphs larger than
            the GPU; needs a CUDA ``device``) (default: ``"device"``).
        sampler_backend: ours: how the sampler runs its hops: ``"torch"`` (torch ops, any
            device) or ``"kernel"`` (the fused hop kernels; needs a CUDA ``device`` and
            CuPy), see `ibp_graph.sampler.NeighborSampler`; None: ``"kernel"`` when the
            graph is on a GPU (``graph_memory`` ``"device"`` or ``"uva"`` with a CUDA
            ``device``) and CuPy imports, else ``"torch"``
            (`ibp_graph.loading.default_sampler_backend`). The two draw different neighbors
            for the same seed. A ``neighbor_sampler`` of ours keeps its own backend.
            ``loader.sampler_backend`` holds the backend used (default: None).
        prefetch_thread: ours: without workers, sample and fetch the ``prefetch`` batches
            ahead on a background thread, so that their host work and waits for the GPU
            overlap the training loop; None: on for a CUDA ``device`` (which has no worker
            processes), off on the CPU (`ibp_graph.loading.default_prefetch_thread`).
            ``loader.prefetch_thread`` holds the resolved bool (default: None).
        sampler_cuda_graph: ours: with the fused hop kernels, replay their launches from CUDA
            graphs, one captured per group shape where the epoch starts (the same batches,
            less host work, buffers kept in GPU memory; see
            `ibp_graph.sampler.NeighborSampler`'s ``cuda_graph``); None: on with
            ``"kernel"``, off with ``"torch"`` (`ibp_graph.loading.default_cuda_graph`). A
            ``neighbor_sampler`` of ours keeps its own. ``loader.sampler_cuda_graph`` holds
            the setting used (default: None).
        sample_group: ours: without workers, sample this many batches per call of the sampler
            (`ibp_graph.sampler.NeighborSampler.sample_batches`): the same batches; with the
            fused hop kernels, one group whose sizes are read once, replayed from one CUDA
            graph with ``cuda_graph=True``; None: 8 where the fused hop kernels launch a batch
            without reading its sizes (every fanout from 0 to 256), else 1
            (`ibp_graph.loading.default_sample_group`). ``loader.sample_group`` holds the
            value used (default: None).
        use_ddp: each rank of ``torch.distributed`` iterates over its own share of the seeds
            (`ibp_graph.distributed.rank_share`), in an order shuffled alike on every rank
            (default: False).
        ddp_seed: the base seed of that order under ``use_ddp`` (default: 0).
        input_id: PyG ``NodeLoader``'s explicit input ids, one per seed node (default: None).
        custom_cls: PyG ``NodeLoader``'s batch class for remote backends; ignored with a
            warning (batches are ``Data``) (default: None).
        csr: the in-neighbor `CSRGraph` of ``data``, already built, instead of building it
            from ``data.edge_index`` (e.g. one copy per host shared by the ranks,
            `ibp_graph.distributed.host.share_host_graph`) (default: None).
        **kwargs: ``torch.utils.data.DataLoader`` keywords (``num_workers``,
            ``persistent_workers``, ``prefetch_factor``, ``worker_init_fn``, ``generator``,
            ``timeout``, ``pin_memory``, ``pin_memory_device``, ``multiprocessing_context``,
            ``in_order``, ``sampler``, ``batch_sampler``), with torch's meaning;
            ``dataset`` and ``collate_fn`` are replaced by the loader's own, as in PyG.

    Raises:
        NotImplementedError: temporal or weighted sampling, a ``HeteroData``, or
            ``(FeatureStore, GraphStore)`` data (naming it).
        TypeError: a keyword that neither this loader nor torch's ``DataLoader`` takes.
        IBPInputError: a bad argument, found at construction: ``num_neighbors`` not a list
            of ints, ``input_nodes`` out of range or a tuple of anything but ints, features
            with another row count than ``data.num_nodes``, a CUDA ``device`` without a usable
            GPU, or a ``graph_memory`` other than ``"device"`` and ``"uva"``, or ``"uva"`` with
            a CPU ``device``, or an unknown ``sampler_backend`` or ``subgraph_type``, or
            ``sampler_cuda_graph=True`` with the torch backend, or ``use_ddp`` without an
            initialised ``torch.distributed``.
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
        features: Any = None,
        device: str | torch.device | None = None,
        prefetch: int = 2,
        seed: int | None = None,
        progress: bool = False,
        graph_memory: str = "device",
        sampler_backend: str | None = None,
        sampler_cuda_graph: bool | None = None,
        prefetch_thread: bool | None = None,
        sample_group: int | None = None,
        use_ddp: bool = False,
        ddp_seed: int = 0,
        input_id: torch.Tensor | None = None,
        custom_cls: Any = None,
        csr: CSRGraph | None = None,
        **kwargs: Any,
    ) -> None:
        self._check_data(data)
        for name, value in (("input_time", input_time), ("time_attr", time_attr)):
            if value is not None:
                raise unsupported(
                    name,
                    value,
                    "temporal sampling is not implemented (sampling ignoring "
                    "time would give other batches)",
                )
        if weight_attr is not None:
            raise unsupported(
                "weight_attr",
                weight_attr,
                "weighted sampling is not implemented (uniform sampling would give other batches)",
            )
        if temporal_strategy != "uniform":
            warn_ignored(
                "temporal_strategy", temporal_strategy, "it applies to temporal sampling only"
            )
        if custom_cls is not None:
            warn_ignored("custom_cls", custom_cls, "batches are torch_geometric.data.Data")
        for name, fn in (
            ("transform", transform),
            ("transform_sampler_output", transform_sampler_output),
        ):
            if fn is not None and not callable(fn):
                raise IBPInputError(f"{name} must be callable, got '{type_name(fn)}'")
        if filter_per_worker is not None:
            check_bool("filter_per_worker", filter_per_worker)
        self._set_loop_args(
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
            prefetch=prefetch,
            seed=seed,
            progress=progress,
            use_ddp=use_ddp,
            ddp_seed=ddp_seed,
            loader_kwargs=kwargs,
            prefetch_thread=prefetch_thread,
            sample_group=sample_group,
        )
        self.graph_memory = loading.check_graph_memory(graph_memory)

        num_nodes = int(data.num_nodes)
        self.data = data
        self.num_neighbors = num_neighbors
        self.replace = replace
        self.subgraph_type = _subgraph_type(subgraph_type, check_bool("directed", directed))
        self.disjoint = disjoint
        self.is_sorted = is_sorted
        self.filter_per_worker = filter_per_worker
        self._fetch_in_worker = filter_per_worker is not False
        self.transform = transform
        self.transform_sampler_output = transform_sampler_output
        # PyG names node types by a string or a (type, ids) tuple; a mapping is just a bad
        # argument here (DGL's {ntype: ids} is refused as unsupported by the shared default).
        # Any other tuple holds node ids, as PyG reads it on a Data.
        self.input_nodes, self._input_id = loading.input_nodes(
            _tuple_input_nodes(input_nodes), num_nodes, node_types=(str, tuple)
        )
        if input_id is not None:
            self._input_id = self._check_input_id(input_id)
        # The attributes PyG's NodeLoader.__init__ sets, which is not run.
        self.input_time, self.custom_cls, self.input_id = None, custom_cls, input_id
        self.input_data = NodeSamplerInput(
            input_id=self._input_id, node=self.input_nodes, time=None, input_type=None
        )

        self._features_given = features is not None
        self.features: FeatureSource | None = None
        if features is not None or getattr(data, "x", None) is not None:
            self.features = self._source(features, device)
        self._x_source = None if self._features_given else getattr(data, "x", None)
        dev = resolve_device(device)
        if dev is None:
            dev = self.features.device if self.features is not None else torch.device("cpu")
        self.device = dev

        if csr is None:
            csr = CSRGraph.from_data(data)
        elif not isinstance(csr, CSRGraph) or csr.num_nodes != int(data.num_nodes):
            got = f"{csr.num_nodes} nodes" if isinstance(csr, CSRGraph) else type_name(csr)
            raise IBPInputError(
                f"csr must be a CSRGraph of data's {data.num_nodes} nodes, got {got}"
            )
        self.graph = loading.place_graph(csr, dev, self.graph_memory)
        node_sampler = self._node_sampler(neighbor_sampler, sampler_backend, sampler_cuda_graph)
        self._attr_cache: dict[str, tuple[Any, Any]] = {}
        self._refresh()
        self._start_pipeline(node_sampler)

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

    def _check_input_id(self, input_id: Any) -> torch.Tensor:
        if not isinstance(input_id, torch.Tensor) or input_id.dim() != 1:
            raise IBPInputError(
                "input_id must be a 1-D tensor, got "
                f"{getattr(input_id, 'shape', type_name(input_id))}"
            )
        if input_id.numel() != self.input_nodes.numel():
            raise IBPInputError(
                f"input_id has {input_id.numel()} entries, there are "
                f"{self.input_nodes.numel()} input nodes"
            )
        return input_id.cpu()

    def _source(self, features: Any, device: Any) -> FeatureSource:
        """``features`` (or ``data.x`` for None) as a checked `FeatureSource`."""
        src = as_feature_source(features, device, data=self.data, check=False)
        num_nodes = int(self.data.num_nodes)
        if src.num_rows != num_nodes:
            raise IBPInputError(
                f"features have {src.num_rows} rows, the graph has {num_nodes} nodes"
            )
        return src

    def _node_sampler(
        self, given: Any, backend: str | None, cuda_graph: bool | None
    ) -> NeighborSampler:
        """The sampler: ``neighbor_sampler`` if it is ours, else one built from the settings.

        ``backend`` None: `ibp_graph.loading.default_sampler_backend` for the graph's device;
        ``cuda_graph`` None: `ibp_graph.loading.default_cuda_graph` for the backend.
        """
        num_neighbors, replace = self.num_neighbors, self.replace
        subgraph_type, disjoint = self.subgraph_type, self.disjoint
        if isinstance(given, NeighborSampler):
            if given.graph.num_nodes != self.graph.num_nodes:
                raise IBPInputError(
                    f"neighbor_sampler samples a graph of {given.graph.num_nodes} nodes, data "
                    f"has {self.graph.num_nodes}"
                )
            if given.graph.device != self.graph.device:
                raise IBPInputError(
                    f"neighbor_sampler's graph is on {given.graph.device}, the loader samples "
                    f"on {self.graph.device}"
                )
            if backend is not None and backend != given.backend:
                warn_ignored(
                    "sampler_backend",
                    backend,
                    f"neighbor_sampler samples with its own backend {given.backend!r}",
                )
            if cuda_graph is not None and check_bool("sampler_cuda_graph", cuda_graph) != (
                given.cuda_graph
            ):
                warn_ignored(
                    "sampler_cuda_graph",
                    cuda_graph,
                    f"neighbor_sampler keeps its own cuda_graph={given.cuda_graph}",
                )
            given.manual_seed(self.seed)
            return given
        if given is not None:
            values = getattr(getattr(given, "num_neighbors", None), "values", None)
            if not isinstance(values, list):
                raise IBPInputError(
                    "neighbor_sampler must be an ibp_graph NeighborSampler or PyG's "
                    f"NeighborSampler for a homogeneous graph, got '{type_name(given)}'"
                )
            warn_ignored(
                "neighbor_sampler",
                type_name(given),
                "its num_neighbors, replace, subgraph_type and disjoint are used by "
                "ibp-graph's own sampler",
            )
            num_neighbors = values
            replace = bool(getattr(given, "replace", replace))
            subgraph_type = _subgraph_type(getattr(given, "subgraph_type", subgraph_type), True)
            disjoint = bool(getattr(given, "disjoint", disjoint))
            self.num_neighbors, self.replace = num_neighbors, replace
            self.subgraph_type, self.disjoint = subgraph_type, disjoint
        if backend is None:
            backend = loading.default_sampler_backend(self.graph.device)
        return NeighborSampler(
            self.graph,
            num_neighbors,
            seed=self.seed,
            backend=backend,
            cuda_graph=loading.resolve_cuda_graph(cuda_graph, backend),
            replace=replace,
            disjoint=disjoint,
            subgraph_type=subgraph_type,
        )

    def _on_device(self, key: str, value: Any) -> Any:
        """``value`` on the loader's device, copied once per object."""
        cached = self._attr_cache.get(key)
        if cached is not None and cached[0] is value:
            return cached[1]
        moved = value
        if isinstance(moved, np.ndarray):
            moved = torch.from_numpy(moved)
        if isinstance(moved, torch.Tensor):
            moved = moved.to(self.device)
        self._attr_cache[key] = (value, moved)
        return moved

    def _refresh(self) -> None:
        """Read ``data``'s attributes as they are now: node-level, edge-level and the rest."""
        data = self.data
        if not self._features_given:
            x = getattr(data, "x", None)
            if x is None:
                self.features, self._x_source = None, None
            elif x is not self._x_source:
                self.features, self._x_source = self._source(None, self.device), x
        base = copy.copy(data)
        node_attrs: dict[str, tuple[Any, int]] = {}
        edge_attrs: dict[str, tuple[Any, int]] = {}
        has_num_nodes = False
        for key in data.keys():  # noqa: SIM118 - Data.keys() is a method, not a dict view
            value = data[key]
            if key == "num_nodes":
                has_num_nodes = True
            elif key in ("x", "edge_index"):
                continue
            elif data.is_node_attr(key) or data.is_edge_attr(key):
                value = self._on_device(key, value)
                dim = data.__cat_dim__(key, value) if isinstance(value, torch.Tensor) else 0
                target = node_attrs if data.is_node_attr(key) else edge_attrs
                target[key] = (value, dim)
            elif isinstance(value, torch.Tensor):
                base[key] = self._on_device(key, value)
        for key in set(self._attr_cache) - set(data.keys()):
            del self._attr_cache[key]
        self._node_attrs, self._edge_attrs = node_attrs, edge_attrs
        self._has_num_nodes = has_num_nodes
        self._base = base

    # -- batches -----------------------------------------------------------------------
    def _fetch(self, sampled: SampledBatch, stream: torch.cuda.Stream | None) -> Any:
        """Join a sampled subgraph with its features and attributes: one PyG ``Data``.

        With ``transform_sampler_output``, the subgraph goes through it as PyG's
        ``SamplerOutput`` first (without it, nothing is converted).
        """
        if self.transform_sampler_output is None:
            return self._join(sampled, sampled.input_id, sampled.batch_size, None, stream)
        out = self.transform_sampler_output(_sampler_output(sampled))
        return self._join_output(out, sampled, stream)

    def _join_output(
        self, out: Any, received: SampledBatch | None, stream: torch.cuda.Stream | None
    ) -> Any:
        """Join what ``transform_sampler_output`` returned: a ``SamplerOutput``.

        Its ``metadata`` gives ``input_id`` and ``batch_size`` as in PyG (``input_id``'s
        length); without ``metadata``, those of ``received`` are kept.

        Raises:
            IBPInputError: ``out`` is not a ``SamplerOutput`` (or a `SampledBatch`), or its
                ``metadata`` is not ``(input_id, seed_time)`` (None only with ``received``).
        """
        if isinstance(out, SampledBatch):
            return self._join(out, out.input_id, out.batch_size, None, stream)
        if not isinstance(out, SamplerOutput):
            raise IBPInputError(
                "transform_sampler_output must return a torch_geometric.sampler.SamplerOutput, "
                f"got '{type_name(out)}'"
            )
        meta = out.metadata
        if meta is None and received is not None:
            return self._join(out, received.input_id, received.batch_size, None, stream)
        if not isinstance(meta, (tuple, list)) or not meta or not isinstance(meta[0], torch.Tensor):
            got = type_name(meta)
            if isinstance(meta, (tuple, list)):
                got = f"({', '.join(type_name(m) for m in meta)})"
            raise IBPInputError(
                "SamplerOutput.metadata must be (input_id, seed_time) with input_id a tensor, "
                f"as PyG's NodeLoader gives it, got {got}"
            )
        seed_time = meta[1] if len(meta) > 1 else None
        return self._join(out, meta[0], int(meta[0].size(0)), seed_time, stream)

    def _join(
        self,
        sampled: SampledBatch | SamplerOutput,
        input_id: torch.Tensor | None,
        batch_size: int,
        seed_time: Any,
        stream: torch.cuda.Stream | None,
    ) -> Any:
        """The ``Data`` of a sampled subgraph, joined with its features and attributes."""
        node, edge = sampled.node, sampled.edge
        out = copy.copy(self._base)
        for key, (value, dim) in self._node_attrs.items():
            out[key] = _select(value, node, dim)
        for key, (value, dim) in self._edge_attrs.items():
            out[key] = None if edge is None else _select(value, edge, dim)  # None: dropped
        if self._has_num_nodes:
            out.num_nodes = node.numel()
        out.edge_index = torch.stack([sampled.row, sampled.col])
        src = self.features
        if src is not None:
            out.x = src.gather(node, stream=stream)
            rows = node.numel()
            self.stats.add_fetch(rows, src.stored_bytes(node), rows * src.row_bytes)
        if "n_id" not in out:
            out.n_id = node
        if edge is not None and "e_id" not in out:
            out.e_id = edge
        if sampled.batch is not None:
            out.batch = sampled.batch
        if sampled.num_sampled_nodes is not None:
            out.num_sampled_nodes = list(sampled.num_sampled_nodes)
        if sampled.num_sampled_edges is not None:
            out.num_sampled_edges = list(sampled.num_sampled_edges)
        orig_row, orig_col = getattr(sampled, "orig_row", None), getattr(sampled, "orig_col", None)
        if orig_row is not None and orig_col is not None:
            out._orig_edge_index = torch.stack([orig_row, orig_col])
        out.input_id = to_device(input_id, self.device)
        if seed_time is not None:
            out.seed_time = seed_time
        out.batch_size = batch_size
        if self.transform is not None:
            out = self.transform(out)
        return out

    def _deliver(self, batch: Any) -> Any:
        """The batch, its ``_orig_edge_index`` (if any) recorded on the consumer's stream.

        ``to_bidirectional(keep_orig_edges=True)`` in ``transform_sampler_output`` gives it;
        it is an attribute of the ``Data`` object, outside the store that the prefetcher's
        `ibp_graph.prefetch.record_stream` walks, so on a GPU it is recorded here, on the
        stream current when the batch is handed over.
        """
        # PyG keeps an underscored attribute in the Data's store object, outside its mapping
        orig = getattr(batch, "_orig_edge_index", None) if isinstance(batch, Data) else None
        if isinstance(orig, torch.Tensor) and orig.is_cuda:
            orig.record_stream(torch.cuda.current_stream(orig.device))
        return batch

    def filter_fn(self, out: Any) -> Any:
        """PyG's ``NodeLoader.filter_fn``: the batch of what ``collate_fn`` returned.

        ``collate_fn`` returns the joined batch already, so a ``Data`` comes back as it is
        (PyG's ``ZipLoader`` calls ``collate_fn`` and then ``filter_fn``). A PyG
        ``SamplerOutput`` (``metadata=(input_id, seed_time)``) is joined as PyG does:
        through ``transform_sampler_output``, then with its features, then ``transform``.

        Raises:
            TypeError: ``out`` is neither a ``Data`` nor a ``SamplerOutput``.
        """
        if isinstance(out, Data):
            return out
        if not isinstance(out, SamplerOutput):
            raise TypeError(
                "filter_fn takes a Data (a batch of this loader) or a "
                f"torch_geometric.sampler.SamplerOutput, got '{type_name(out)}'"
            )
        if self.transform_sampler_output is not None:
            out = self.transform_sampler_output(out)
        return self._deliver(self._join_output(out, None, None))

    def _get_iterator(self) -> Any:
        """Torch's iterator over the workers' results, not PyG's ``NodeLoader`` one.

        PyG's wraps it to call ``filter_fn`` on every result; here the results are our
        workers' (`ibp_graph.workers.WorkerResult`), which the base class joins itself.
        """
        return torch.utils.data.DataLoader._get_iterator(self)

    # -- PyG's worker helpers ------------------------------------------------------------
    def _no_workers(self, helper: str, *, always: bool = False) -> bool:
        """Whether ``helper`` cannot apply, as no worker processes run (warned once).

        With ``num_workers=0`` only when ``always`` (PyG's own check raises otherwise).
        """
        if self._use_workers or not (self.num_workers or always):
            return False
        why = f"sampling and fetching run on {self.device}" if self.num_workers else "num_workers=0"
        warn_once(f"loader.{helper}() has no effect: no worker processes run ({why})")
        return True

    def enable_cpu_affinity(
        self, loader_cores: list[int] | list[list[int]] | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """PyG's ``enable_cpu_affinity``: pin each worker process to its cores.

        As PyG's (``loader_cores``: one core, or a list of cores, per worker; default: NUMA
        node 0's). Where ``num_workers > 0`` starts no workers (a CUDA ``device``) it warns
        once and changes nothing.

        Raises:
            ValueError: on entering, with ``num_workers=0``, or ``loader_cores`` not one
                entry per worker (PyG's checks).
        """
        if self._no_workers("enable_cpu_affinity"):
            return contextlib.nullcontext()
        return super().enable_cpu_affinity(loader_cores)

    def enable_multithreading(
        self, worker_threads: int | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """PyG's ``enable_multithreading``: ``worker_threads`` torch threads per worker.

        As PyG's (it needs the ``"spawn"`` start method). Where ``num_workers > 0`` starts
        no workers (a CUDA ``device``) it warns once and changes nothing.

        Raises:
            ValueError: on entering, with ``num_workers=0``, too many threads, or another
                start method than ``"spawn"`` (PyG's checks).
        """
        if self._no_workers("enable_multithreading"):
            return contextlib.nullcontext()
        return super().enable_multithreading(worker_threads)

    def enable_memory_log(self) -> contextlib.AbstractContextManager[None]:
        """PyG's ``enable_memory_log``: each worker logs its memory (``logging.debug``).

        Without worker processes (``num_workers=0``, or a CUDA ``device``) it warns once and
        changes nothing.
        """
        if self._no_workers("enable_memory_log", always=True):
            return contextlib.nullcontext()
        return super().enable_memory_log()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_nodes={self.graph.num_nodes}, "
            f"num_neighbors={list(self.node_sampler.num_neighbors)}, "
            f"batch_size={self.batch_size}, features={self.features!r}, device={self.device})"
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
            `PinnedRawTable`, tensor, 2-D NumPy array or `FeatureSource`.
        device: where rows land (default: each source's own device).
    """

    def __init__(self, features: Any, *, device: str | torch.device | None = None) -> None:
        super().__init__()
        items = features.items() if isinstance(features, Mapping) else [((None, "x"), features)]
        sources: dict[FeatureKey, FeatureSource] = {}
        given: dict[FeatureKey, Any] = {}
        for key, obj in items:
            spelled = key
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
            if key in given:
                raise IBPInputError(
                    f"duplicate feature key {key!r}: given as {given[key]!r} and as {spelled!r}"
                )
            given[key] = spelled
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
    def _ids(index: Any, src: FeatureSource) -> tuple[torch.Tensor, tuple[int, ...]]:
        """Checked int64 row ids of a TensorAttr index, on the source's `index_device`.

        With the leading shape of the result (``()`` for one row); the tables' indexing
        rules (`normalize_index_tensor`).
        """
        return normalize_index_tensor(index, src.num_rows, src.index_device)

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
        ids, shape = self._ids(attr.index, src)
        return src.gather(ids).reshape(*shape, *src.row_shape)

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[torch.Tensor]:
        """One ``gather`` per source for all the attributes that read it."""
        groups: dict[FeatureKey, list[tuple[int, torch.Tensor, tuple[int, ...]]]] = {}
        for i, attr in enumerate(attrs):
            src = self._source(attr)
            ids, shape = self._ids(attr.index, src)
            groups.setdefault((attr.group_name, attr.attr_name), []).append((i, ids, shape))
        out: list[Any] = [None] * len(attrs)
        for key, parts in groups.items():
            src = self._sources[key]
            rows = src.gather(torch.cat([ids for _, ids, _ in parts]))
            pieces = rows.split([ids.numel() for _, ids, _ in parts])
            for (i, _, shape), piece in zip(parts, pieces, strict=True):
                out[i] = piece.reshape(*shape, *src.row_shape)
        return out

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        src = self._sources.get((attr.group_name, attr.attr_name))
        if src is None:
            return None
        if attr.index is None or not attr.is_set("index"):
            return (src.num_rows, *src.row_shape)
        _, shape = self._ids(attr.index, src)
        return (*shape, *src.row_shape)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """One ``TensorAttr(group_name, attr_name)`` per source."""
        return [self._tensor_attr_cls.cast(*key) for key in self._sources]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {v!r}" for k, v in self._sources.items())
        return f"IBPFeatureStore({{{inner}}})"
