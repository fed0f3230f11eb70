"""DGL drop-ins: `DataLoader` and the block samplers, yielding DGL blocks.

`DataLoader` takes ``dgl.dataloading.DataLoader``'s arguments and yields what it yields,
``(input_nodes, output_nodes, blocks)``, for `NeighborSampler`, `MultiLayerNeighborSampler`,
`MultiLayerFullNeighborSampler` (ours, `ibp_graph.loaders.dgl_sampler`) or DGL's own
``NeighborSampler``. Neighbors are sampled by ibp-graph's sampler, per block as DGL does; the
blocks carry the graph's data as DGL's loader gives it (`ibp_graph.loaders.dgl_blocks`), and
the feature rows of ``blocks[0].srcdata`` can come from an IBP-compressed table instead of
``g.ndata`` (our ``features=`` argument). A training script changes only its imports:

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

The blocks: ``fanouts[i]`` is the fanout of ``blocks[i]``, as in DGL (``blocks[0]``, the
outermost hop, uses ``fanouts[0]``; the seeds' own neighbors use ``fanouts[-1]``). Every
block's destination nodes are a prefix of its source nodes; ``blocks[i + 1]``'s source nodes
are ``blocks[i]``'s destination nodes; ``srcdata[dgl.NID]``, ``dstdata[dgl.NID]`` and
``edata[dgl.EID]`` hold the global node and edge ids. As in DGL, every block draws fresh
in-neighbors for all its destination nodes (``draw="per_hop"``); the sampler's
``draw="once"`` draws each node's neighbors once per batch and reuses them in later blocks,
as PyG does. With ``-1`` fanouts both give exactly DGL's edges. A fanout of ``0`` gives a
block without edges whose source nodes are its destination nodes, as DGL's unfused sampler
does (DGL's fused one, its default on a CPU with more than one thread, leaves that block
without source nodes); ``fanouts=[]``, no blocks at all, is refused when the loader is built,
as DGL's loader fails on it at its first batch.

Every ``g.ndata`` field is on every block's ``srcdata`` / ``dstdata`` and every ``g.edata``
field on its ``edata``, as DGL's loader gives them on the CPU, read from ``g`` when the batch
is built (replacing ``g.ndata["h"]`` after building the loader serves the new rows; deleting a
field removes it from later batches). The loader's ``features`` (default: ``g.ndata[feat]``)
fills ``blocks[0].srcdata[feat]`` and its ``labels`` (default: ``g.ndata[label]``) fill
``blocks[-1].dstdata[label]``, where ``feat`` and ``label`` are the first names of the
sampler's ``prefetch_node_feats`` / ``prefetch_labels`` (default: ``"feat"``, ``"label"``).

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
wheels of data.dgl.ai)                   there over UVA: ``use_uva=True`` or
                                         ``graph_memory="uva"``) and sampled there; blocks
                                         are created on the GPU; rows are fetched and decoded
                                         by the GPU over UVA from a `CudaIBPTable` (an
                                         `IBPTable` is opened as one) or gathered from a
                                         `PinnedRawTable`, on a side stream, ``prefetch``
                                         batches ahead
===========================  ==========  ======================================================

``device`` defaults to the graph's device when the DGL graph is on a GPU, else to where the
features deliver rows, else the CPU. On a GPU the sampler runs its hops with the fused hop
kernels when CuPy imports (our ``sampler_backend``, default None; ``"torch"`` for torch ops),
their launches replayed from CUDA graphs, 8 batches a call, where the blocks allow it (our
``sampler_cuda_graph`` and ``sample_group``, default None: with ``draw="once"`` and every
fanout from 0 to 256).
The CUDA path is written but has not run yet: no CUDA build of DGL was available.

DGL's loader arguments, and what happens to each here:

==========================  ================================================================
argument                    what happens
==========================  ================================================================
``graph``, ``indices``,     as DGL (homogeneous graphs; ``indices`` a tensor, array, list or
``graph_sampler``           boolean mask, or ``{ntype: ids}`` on a graph with one node type;
                            DGL's ``NeighborSampler`` is read and sampled by us; blocks and
                            ids have the graph's ``idtype`` and type names)
``device``                  as DGL: where sampling runs and the blocks land
``batch_size``,             as DGL
``drop_last``, ``shuffle``
``use_ddp``, ``ddp_seed``   as DGL: rank ``r`` takes the ``r``-th contiguous block of the
                            seeds, the same every epoch, shuffled within itself; the last
                            block padded with its own first seeds
                            (`ibp_graph.distributed.rank_block`); the shuffle is seeded by
                            ``ddp_seed``, the epoch and the rank (DGL's draws from NumPy's
                            global generator)
``use_uva``                 with a CUDA ``device``: the graph stays in pinned host memory and
                            is sampled over UVA (``graph_memory="uva"``); on the CPU: a
                            one-time warning, the graph is sampled in host memory
``use_prefetch_thread``     True: without workers, the ``prefetch`` batches ahead are
                            sampled and fetched on a background thread; False: in this
                            thread; None: DGL's rule (`dgl_default_prefetch_thread`), on
                            for a CUDA ``device`` with the graph on the CPU and no UVA
``use_alternate_streams``,  a one-time warning when set: batches are prepared ``prefetch``
``pin_prefetcher``          ahead, on a side stream on a GPU, in this thread (or in the
                            workers) on the CPU
``gpu_cache``               a one-time warning: there is no GPU feature cache; rows are read
                            from ``features`` every batch
``num_workers``,            torch ``DataLoader`` keywords, with torch's meaning: on the CPU
``persistent_workers``,     worker processes sample and read ``features`` (the same batches
other ``**kwargs``          as without workers, for a ``seed``); the blocks and the fields of
                            ``g`` are added in the iterating process, so changes to ``g``
                            show even with persistent workers; on a GPU a one-time warning
                            (batches are prepared on a side stream)
==========================  ================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ibp_graph.errors import IBPInputError, check_bool
from ibp_graph.features import FeatureSource, as_feature_source, resolve_device
from ibp_graph.loading import (
    BaseNodeLoader,
    check_graph_memory,
    default_sampler_backend,
    input_nodes,
    place_graph,
    resolve_cuda_graph,
    type_name,
    warn_ignored,
)
from ibp_graph.sampler import SampledBatch

from .dgl_blocks import node_ids, to_blocks
from .dgl_import import GRAPHBOLT_PLACEHOLDER, dgl_supports, import_dgl
from .dgl_sampler import (
    MultiLayerFullNeighborSampler,
    MultiLayerNeighborSampler,
    NeighborSampler,
    structure,
    to_csr,
)

__all__ = [
    "GRAPHBOLT_PLACEHOLDER",
    "DataLoader",
    "MultiLayerFullNeighborSampler",
    "MultiLayerNeighborSampler",
    "NeighborSampler",
    "dgl_default_prefetch_thread",
    "to_csr",
]

#: ``dgl`` (checked again on every import of this module, naming the extra when missing).
dgl = import_dgl()
#: Kept for the trainer: whether this DGL build holds graphs on a device.
_dgl_supports = dgl_supports


@dataclass
class _Prepared:
    """A sampled batch with the rows and labels of the loader's own sources (no DGL objects).

    This is what a worker process sends back; the blocks are built from it, with the graph's
    data as it is then, in the process that iterates.
    """

    sampled: SampledBatch
    rows: torch.Tensor | None = None
    labels: torch.Tensor | None = None


def dgl_default_prefetch_thread(
    device: str | torch.device, graph_device: str | torch.device, uva: bool
) -> bool:
    """What ``use_prefetch_thread=None`` means, by DGL 2.1.0's rule.

    DGL's ``DataLoader`` (``python/dgl/dataloading/dataloader.py`` at v2.1.0) turns its
    prefetch thread on when the output ``device`` is CUDA, the graph is on the CPU and
    ``use_uva`` is False (its "sampling on the CPU, batches on the GPU" case), and leaves it
    off otherwise; it does not look at ``num_workers``. The same here, with our
    ``graph_memory="uva"`` counted as ``use_uva=True``. This differs from the other
    loaders' default (`ibp_graph.loading.default_prefetch_thread`: on for any CUDA device):
    with a graph already on the GPU or read over UVA, pass ``use_prefetch_thread=True`` for
    the thread (our sampler runs on the GPU in every CUDA case; the thread overlaps its host
    work and reads of sizes from the GPU with the training loop).

    Args:
        device: where the blocks land (the loader's ``device``).
        graph_device: where the graph was given (a DGL graph's or a `CSRGraph`'s device).
        uva: the graph is read over UVA (``use_uva=True`` or ``graph_memory="uva"``).
    """
    on_gpu = torch.device(device).type == "cuda"
    return on_gpu and torch.device(graph_device).type == "cpu" and not uva


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

    Each step yields ``(input_nodes, output_nodes, blocks)`` (see the module docstring for
    the blocks, their fields and what each DGL argument does). It is a
    ``torch.utils.data.DataLoader``, as DGL's is: ``loader.dataset`` holds the positions of
    the seeds and ``loader.collate_fn(positions)`` gives their batch.

    Seeds are the ``indices`` in batches of ``batch_size``; like DGL's, they should be
    distinct (a repeated seed appears at each of its positions in ``output_nodes``, but only
    the first one gets in-edges). Reproducibility follows `ibp_graph.loading`: with ``seed``
    set, epoch ``e`` always yields the same batches, with or without workers.

    Args:
        graph: a homogeneous ``dgl.DGLGraph``, or an ibp-graph `CSRGraph` (then ``features``
            and ``labels`` are passed explicitly). Use `from_ogb` for an OGB dataset.
        indices: seed node ids (tensor, array, list), or a boolean mask over the nodes; or
            ``{ntype: ids}`` where the graph's one node type is ``ntype`` (then, as in DGL,
            each ``output_nodes`` is ``{ntype: ids}``).
        graph_sampler: `NeighborSampler` (or `MultiLayerNeighborSampler`,
            `MultiLayerFullNeighborSampler`), or DGL's ``dgl.dataloading.NeighborSampler``
            (its settings are read; the sampling is ibp-graph's, per block).
        device: where sampling runs and blocks land (default: the sampler's
            ``output_device``, else the DGL graph's device when it is a GPU, else where
            ``features`` delivers rows, else the CPU).
        use_ddp: each rank of ``torch.distributed`` iterates over its contiguous block of
            the seeds, as DGL's does (`ibp_graph.distributed.rank_block`) (default: False).
        ddp_seed: the base seed of each rank's shuffle under ``use_ddp`` (default: 0).
        batch_size: seeds per batch (default: 1).
        drop_last: drop the last, smaller batch (default: False).
        shuffle: reshuffle the seeds every epoch (default: False).
        use_prefetch_thread: True: without workers, prepare the ``prefetch`` batches ahead
            on a background thread (`ibp_graph.prefetch.Prefetcher`'s ``thread``); False: in
            this thread; None: as DGL decides it (`dgl_default_prefetch_thread`). The
            resolved bool is ``loader.use_prefetch_thread`` (as in DGL) and
            ``loader.prefetch_thread`` (default: None).
        use_alternate_streams: a one-time warning when it asks for something else than
            what happens: on a GPU batches are always prepared on a side stream
            (default: None).
        pin_prefetcher: a one-time warning when True: prepared rows are not pinned
            (default: None).
        use_uva: with a CUDA ``device``, keep the graph in pinned host memory and sample it
            over UVA (``graph_memory="uva"``); on the CPU a one-time warning (default: False).
        gpu_cache: a one-time warning when given: there is no GPU feature cache
            (default: None).
        features: ours: the node features for ``blocks[0].srcdata[feat]``: an `IBPTable`,
            `CudaIBPTable`, `PinnedRawTable`, tensor, 2-D NumPy array (a memmap too) or
            `FeatureSource` (default: None, ``g.ndata[feat]`` read when each batch is built).
        labels: ours: the node labels for ``blocks[-1].dstdata[label]``, one row per node
            (default: None, ``g.ndata[label]`` read when each batch is built).
        prefetch: ours: batches prepared ahead of the one being consumed (default: 2).
        seed: ours: base seed of the shuffle and the sampler (default: None, drawn from
            torch's global generator; under ``use_ddp`` the shuffle uses ``ddp_seed``).
        progress: ours: iterate through a tqdm bar showing `stats` (default: False).
        graph_memory: ours: where the sampled graph lives: ``"device"`` (copied to
            ``device``) or ``"uva"`` (pinned host memory read by the GPU over UVA; needs a
            CUDA ``device``) (default: ``"device"``).
        sampler_backend: ours: how the sampler runs its hops: ``"torch"`` (torch ops, any
            device) or ``"kernel"`` (the fused hop kernels; needs a CUDA ``device`` and
            CuPy), see `ibp_graph.sampler.NeighborSampler`; None: ``"kernel"`` when the
            sampled graph is on a GPU (a CUDA ``device`` always samples there: the graph is
            copied to it or read over UVA) and CuPy imports, else ``"torch"``
            (`ibp_graph.loading.default_sampler_backend`). The two draw different neighbors
            for the same seed. ``loader.sampler_backend`` holds the backend used
            (default: None).
        sampler_cuda_graph: ours: with the fused hop kernels, replay their launches from
            CUDA graphs where the batches allow it (the same blocks, less host work, buffers
            kept in GPU memory; see `ibp_graph.sampler.NeighborSampler`'s ``cuda_graph``);
            None: on with ``"kernel"``, off with ``"torch"``
            (`ibp_graph.loading.default_cuda_graph`). ``loader.sampler_cuda_graph`` holds
            the setting used (default: None).
        sample_group: ours: without workers, sample this many batches per call of the
            sampler (`ibp_graph.sampler.NeighborSampler.sample_batches`): the same blocks;
            with the fused hop kernels, one group whose sizes are read once; None: 8 where
            the fused hop kernels launch a batch without reading its sizes (a sampler with
            ``draw="once"`` and every fanout from 0 to 256), else 1: DGL's per-block draws
            read them (`ibp_graph.loading.default_sample_group`). ``loader.sample_group``
            holds the value used (default: None).
        **kwargs: ``torch.utils.data.DataLoader`` keywords (``num_workers``,
            ``persistent_workers``, ``prefetch_factor``, ``worker_init_fn``, ...), as DGL
            forwards them; see `ibp_graph.loading.BaseNodeLoader`.

    Raises:
        NotImplementedError: a heterogeneous graph, a block, a sampler we cannot read, or
            an option that would silently give other batches (naming it).
        TypeError: a keyword that neither DGL's nor torch's loader takes.
        IBPInputError: a bad argument, found at construction: ``indices`` out of range,
            features or labels with another row count than the graph has nodes, prefetch
            names missing from ``g.ndata``/``g.edata``, a CUDA ``device`` without a usable
            GPU or with a DGL build that has no CUDA, a bad ``graph_memory``,
            ``sampler_backend`` or ``sampler_cuda_graph`` (True with torch ops), ``use_ddp``
            without ``torch.distributed``, or a sampler with ``fanouts=[]`` (no blocks: DGL's
            loader fails on it at its first batch).
        IBPDeviceError: ``sampler_backend="kernel"`` with a CPU ``device``.
    """

    _ddp_blocks = True  # DGL's contiguous block per rank

    def __init__(
        self,
        graph: Any,
        indices: Any,
        graph_sampler: NeighborSampler | Any,
        device: str | torch.device | None = None,
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
        *,
        features: Any = None,
        labels: torch.Tensor | None = None,
        prefetch: int = 2,
        seed: int | None = None,
        progress: bool = False,
        graph_memory: str = "device",
        sampler_backend: str | None = None,
        sampler_cuda_graph: bool | None = None,
        sample_group: int | None = None,
        **kwargs: Any,
    ) -> None:
        settings = NeighborSampler.from_dgl(graph_sampler)
        if not settings.fanouts:
            raise IBPInputError(
                "fanouts=[] gives no blocks to carry a batch's features and labels (DGL's "
                "DataLoader fails on it too, at its first batch): use fanouts=[0] for one "
                "block of the seeds without edges"
            )
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
            # None: resolved below, by DGL's rule (not the other loaders' default).
            prefetch_thread=(
                None
                if use_prefetch_thread is None
                else check_bool("use_prefetch_thread", use_prefetch_thread)
            ),
            sample_group=sample_group,
        )
        graph_memory = check_graph_memory(graph_memory)
        is_dgl = isinstance(graph, dgl.DGLGraph)
        csr = to_csr(graph)  # checks the graph's type first
        num_nodes = csr.num_nodes
        self.graph = graph
        self._structure = structure(graph)
        self.graph_sampler = settings
        self.indices = indices
        self.use_uva = use_uva
        self.use_alternate_streams = use_alternate_streams
        self.pin_prefetcher = pin_prefetcher
        self.gpu_cache = gpu_cache
        # DGL takes {ntype: ids} on a graph whose one node type is named: its output_nodes
        # are then {ntype: ids} too (input_nodes stay a tensor).
        self._output_ntype = None
        if is_dgl and isinstance(indices, Mapping):
            if list(indices) != graph.ntypes:
                raise IBPInputError(
                    f"indices names the node types {list(indices)}, the graph has one: "
                    f"{graph.ntypes[0]!r}"
                )
            self._output_ntype = graph.ntypes[0]
            indices = indices[self._output_ntype]
        self.input_nodes, self._input_id = input_nodes(indices, num_nodes, name="indices")

        ndata = graph.ndata if is_dgl else {}
        feat_names = settings.prefetch_node_feats or ["feat"]
        label_names = settings.prefetch_labels or ["label"]
        self.feat_key, self.label_key = feat_names[0], label_names[0]

        # Where things run.
        if device is None:
            device = settings.output_device
        dev = resolve_device(device)
        if dev is not None:
            self._check_dgl_device(dev)
        self.features: FeatureSource | None = None
        if features is not None:
            self.features = as_feature_source(features, dev, check=False)
            if self.features.num_rows != num_nodes:
                raise IBPInputError(
                    f"features have {self.features.num_rows} rows, the graph has {num_nodes} nodes"
                )
        elif settings.prefetch_node_feats and self.feat_key not in ndata:
            raise IBPInputError(self._missing("node", self.feat_key, is_dgl, "features"))
        if dev is None:
            if is_dgl and graph.device.type != "cpu":
                dev = resolve_device(graph.device)
            elif self.features is not None:
                dev = self.features.device
            else:
                dev = torch.device("cpu")
        self._check_dgl_device(dev)
        self.device = dev

        self.labels: torch.Tensor | None = None
        if labels is not None:
            self.labels = _node_tensor("labels", labels, num_nodes, "nodes").to(dev)
        elif settings.prefetch_labels and self.label_key not in ndata:
            raise IBPInputError(self._missing("node", self.label_key, is_dgl, "labels"))
        # Every other prefetch name must be in the graph's data (DGL fails on the first
        # batch; we fail here, and again at a batch if the field was deleted since).
        self._node_names = [*feat_names[1:], *label_names[1:]]
        if self.features is None and settings.prefetch_node_feats:
            self._node_names.insert(0, self.feat_key)
        if self.labels is None and settings.prefetch_labels:
            self._node_names.append(self.label_key)
        self._edge_names = list(settings.prefetch_edge_feats)
        missing = self._first_missing(graph if is_dgl else None)
        if missing is not None:
            raise IBPInputError(self._missing(*missing, is_dgl))

        self._warn_dgl_options(dev)
        if use_uva is True and dev.type == "cuda":
            graph_memory = "uva"
        self.graph_memory = graph_memory
        if self.prefetch_thread is None:
            graph_device = graph.device if is_dgl else csr.device
            self.prefetch_thread = dgl_default_prefetch_thread(
                dev, graph_device, uva=graph_memory == "uva"
            )
        self.use_prefetch_thread = self.prefetch_thread
        self.csr = place_graph(csr, dev, graph_memory)
        if sampler_backend is None:  # decided by where the sampled graph is
            sampler_backend = default_sampler_backend(self.csr.device)
        node_sampler = settings.csr_sampler(
            self.csr,
            seed=self.seed,
            backend=sampler_backend,
            cuda_graph=resolve_cuda_graph(sampler_cuda_graph, sampler_backend),
        )
        self._start_pipeline(node_sampler)

    # -- construction helpers ------------------------------------------------------------
    def _warn_dgl_options(self, dev: torch.device) -> None:
        """One-time warnings for DGL's options that cannot apply on ``dev``."""
        if self.use_uva is True and dev.type != "cuda":
            warn_ignored(
                "use_uva", True, "UVA needs a CUDA device: the graph is sampled in host memory"
            )
        if self.use_alternate_streams is not None and self.use_alternate_streams != (
            dev.type == "cuda"
        ):
            instead = (
                "batches are always prepared on a side stream on a GPU"
                if dev.type == "cuda"
                else "there are no CUDA streams on the CPU"
            )
            warn_ignored("use_alternate_streams", self.use_alternate_streams, instead)
        if self.pin_prefetcher:
            warn_ignored(
                "pin_prefetcher",
                self.pin_prefetcher,
                "prepared rows are not pinned (on a GPU they are fetched straight into GPU memory)",
            )
        if self.gpu_cache is not None:
            warn_ignored(
                "gpu_cache",
                "...",
                "there is no GPU feature cache: rows are read from the features every batch",
            )

    @staticmethod
    def _check_dgl_device(dev: torch.device) -> None:
        if not dgl_supports(dev):
            raise IBPInputError(
                f"blocks would live on {dev}, but this DGL build ({dgl.__version__}) cannot put "
                "graphs there (the PyPI build is CPU-only, and DGL refuses GPU tensors in a "
                "CPU block's srcdata): install a CUDA build of DGL, or use the CPU "
                "(device='cpu' and features=ibp_graph.open(path) or a CPU tensor)"
            )

    def _first_missing(self, graph: Any) -> tuple[str, str] | None:
        """(kind, name) of the first prefetch name not in ``graph``'s data (None: a CSRGraph)."""
        for kind, names in (("node", self._node_names), ("edge", self._edge_names)):
            frame = {} if graph is None else graph.ndata if kind == "node" else graph.edata
            for name in names:
                if name not in frame:
                    return kind, name
        return None

    @staticmethod
    def _missing(kind: str, name: str, is_dgl: bool, keyword: str | None = None) -> str:
        where = f"g.{'n' if kind == 'node' else 'e'}data" if is_dgl else "a CSRGraph"
        fix = f"pass {keyword}= or drop the name" if keyword else "add it or drop the name"
        return f"{where} has no {name!r} to prefetch; {fix}"

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
        """The rows of the loader's ``features`` and ``labels`` (in a worker, if any)."""
        out = _Prepared(sampled)
        node = sampled.node
        src = self.features
        if src is not None:
            out.rows = src.gather(node, stream=stream)
            n = node.numel()
            self.stats.add_fetch(n, src.stored_bytes(node), n * src.row_bytes)
        if self.labels is not None:
            out.labels = self.labels.index_select(0, node[: sampled.batch_size])
        return out

    def _deliver(self, batch: _Prepared) -> tuple[torch.Tensor, torch.Tensor, list]:
        """``(input_nodes, output_nodes, blocks)``, the blocks taking ``g``'s data as it is now."""
        sampled = batch.sampled
        graph = self.graph if isinstance(self.graph, dgl.DGLGraph) else None
        if structure(self.graph) is not self._structure:
            raise IBPInputError(
                "the graph's nodes or edges were changed after the DataLoader was built "
                "(add_edges, remove_nodes, ...): its batches would be stale; build a new "
                "DataLoader"
            )
        missing = self._first_missing(graph) if graph is not None else None
        if missing is not None:
            raise IBPInputError(
                self._missing(*missing, True) + " (it was removed from the graph after the "
                "loader was built)"
            )
        blocks = to_blocks(graph, sampled, draw=self.graph_sampler.draw)
        rows = batch.rows
        if rows is None and graph is not None:
            # g.ndata[feat] as it is now, gathered here (counted in `stats`) when it is where
            # the blocks are; otherwise the block's lazy slice reads it when used.
            table = graph.ndata.get(self.feat_key)
            if isinstance(table, torch.Tensor) and table.device == sampled.node.device:
                rows = table.index_select(0, sampled.node)
                self.stats.add_fetch(rows.size(0), 0, rows.numel() * rows.element_size())
        if rows is not None:
            blocks[0].srcdata[self.feat_key] = rows
        if batch.labels is not None:
            blocks[-1].dstdata[self.label_key] = batch.labels
        input_nodes, output_nodes = node_ids(graph, sampled)
        if self._output_ntype is not None:
            return input_nodes, {self._output_ntype: output_nodes}, blocks
        return input_nodes, output_nodes, blocks

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_nodes={self.csr.num_nodes}, "
            f"fanouts={self.graph_sampler.fanouts}, draw={self.graph_sampler.draw!r}, "
            f"batch_size={self.batch_size}, features={self.features!r}, device={self.device})"
        )
