"""The framework-specific parts of a training run, behind one small interface.

`ibp_graph.train.run` trains and evaluates with one loop for every framework; a `Backend`
supplies what differs between them: the framework's graph, the model, the loader, and one
forward pass over a batch. Two are provided:

=========  ============================================  =======================================
backend    loader                                        model
=========  ============================================  =======================================
``pyg``    `ibp_graph.loaders.pyg.NeighborLoader`        PyG's ``GraphSAGE`` / ``GAT``
``dgl``    `ibp_graph.loaders.dgl.DataLoader` with       `DGLGraphSAGE` / `DGLGAT`
           `ibp_graph.loaders.dgl.NeighborSampler`       (``dgl.nn.SAGEConv`` / ``GATConv``)
=========  ============================================  =======================================

Both loaders sample with ibp-graph's seeded sampler and read rows through the same feature
source (an IBP table or the raw tensor), so they count the same per-stage times and bytes.

.. code-block:: python

    import torch.nn.functional as F

    from ibp_graph.datasets import load_dataset
    from ibp_graph.train.backends import get_backend
    from ibp_graph.train.config import TrainConfig

    backend = get_backend("dgl")  # an ImportError naming the extra without DGL
    ds = load_dataset("cora")
    graph = backend.graph(ds)
    model = backend.build_model(TrainConfig(dataset="cora"), ds.num_features, ds.num_classes)
    loader = backend.loader(graph, [10, 10], ds.train_mask, batch_size=32, shuffle=True, seed=0)
    for batch in loader:
        step = backend.forward(model, batch)  # the seeds' logits and labels
        loss = F.cross_entropy(step.out, step.y)
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import torch

from ibp_graph.errors import check_choice

from .models import BACKENDS, ModelSpec, _dgl_loaders, build_model

__all__ = ["BACKENDS", "Backend", "DGLBackend", "PyGBackend", "Step", "get_backend"]

#: The node data the DGL loaders put into ``blocks[-1].dstdata`` for evaluation.
_SPLIT_MASKS = ("val_mask", "test_mask")


@dataclass
class Step:
    """One forward pass over a batch.

    Attributes:
        out: logits of the batch's seed nodes, ``(seeds, classes)``.
        y: labels of the seed nodes.
        nodes: global ids of every node of the batch (seeds first): a batch fingerprint.
    """

    out: torch.Tensor
    y: torch.Tensor
    nodes: torch.Tensor

    @property
    def batch_size(self) -> int:
        """Seed nodes of the batch."""
        return int(self.y.shape[0])


class Backend(abc.ABC):
    """What a training run needs from a framework (PyG, DGL).

    Attributes:
        name: the config's ``backend`` value.
        takes_csr: whether `loader` takes ``csr=`` (a graph built once, see `csr`).
    """

    name: str
    takes_csr: bool = False

    @abc.abstractmethod
    def graph(self, ds: Any, *, undirected: bool = False, csr: Any = None) -> Any:
        """The framework's graph of a `GraphDataset`, holding its features, labels and splits.

        Args:
            ds: the dataset.
            undirected: add every reverse edge (duplicates merged).
            csr: (`takes_csr` backends) the `CSRGraph` the loaders will sample, built by
                `csr` from this dataset's graph: the graph's edges are then a meta tensor of
                its edge count, never read (default: None, the graph of ``ds``'s edges).
        """

    @abc.abstractmethod
    def num_edges(self, graph: Any) -> int:
        """Edges the loaders sample from."""

    def supports(self, device: torch.device) -> bool:
        """Whether the framework can train on ``device`` (default: yes)."""
        return True

    def csr(self, graph: Any) -> Any:
        """The `CSRGraph` that `loader` builds from ``graph`` (see `takes_csr`).

        Raises:
            NotImplementedError: the loader cannot take a CSR built elsewhere.
        """
        raise NotImplementedError(f"the {self.name} loader builds its own graph")

    def build_model(self, cfg: ModelSpec, in_channels: int, out_channels: int) -> torch.nn.Module:
        """The model of ``cfg.model`` for this framework (see `build_model`)."""
        return build_model(cfg, in_channels, out_channels, backend=self.name)

    @abc.abstractmethod
    def loader(
        self,
        graph: Any,
        fanouts: list[int],
        seeds: torch.Tensor,
        *,
        batch_size: int,
        shuffle: bool,
        seed: int,
        features: Any = None,
        device: torch.device | None = None,
        prefetch: int = 2,
        progress: bool = False,
        evaluation: bool = False,
        graph_memory: str = "device",
        sampler_backend: str | None = None,
        sampler_cuda_graph: bool | None = None,
        sample_group: int | None = None,
        use_ddp: bool = False,
        csr: Any = None,
    ) -> Any:
        """An ibp-graph loader over ``graph`` (its ``stats`` count times and bytes).

        Args:
            graph: from `graph`.
            fanouts: neighbors per hop (``-1``: all), one per layer.
            seeds: the seed nodes (a boolean mask or ids).
            batch_size: seeds per batch.
            shuffle: reshuffle the seeds every epoch.
            seed: the loader's base seed.
            features: the node features (an IBP table; default: None, the graph's raw
                features).
            device: where batches land (default: None, the loader's default).
            prefetch: batches prepared ahead.
            progress: show a progress bar.
            evaluation: batches must carry what `split_masks` reads.
            graph_memory: where the loader keeps the graph (``"device"`` or ``"uva"``).
            sampler_backend: how the sampler draws neighbors (``"torch"`` or ``"kernel"``;
                default: None, the loader's default for its device).
            sampler_cuda_graph: replay the hop kernels from CUDA graphs (default: None, the
                loader's default for its backend).
            sample_group: batches per sampler call (default: None, the loader's default for
                its backend).
            use_ddp: each rank of the torch.distributed group takes its share of every
                epoch's seeds, shuffled with ``seed`` on every rank (the loaders' ``use_ddp``
                and ``ddp_seed``) (default: False).
            csr: the graph's CSR from `csr`, built once (e.g. shared by the ranks of a
                host) (default: None: the loader builds its own).
        """

    @abc.abstractmethod
    def forward(self, model: torch.nn.Module, batch: Any) -> Step:
        """Run ``model`` on a batch of the loader: the seeds' logits and labels."""

    @abc.abstractmethod
    def split_masks(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Whether each seed of an evaluation batch is a valid node, and a test node."""


class PyGBackend(Backend):
    """PyG: `ibp_graph.loaders.pyg.NeighborLoader` batches and PyG's models."""

    name = "pyg"
    takes_csr = True

    def graph(self, ds: Any, *, undirected: bool = False, csr: Any = None) -> Any:
        """``ds.to_pyg()``, made undirected with PyG's ``to_undirected`` when asked.

        With ``csr``, ``edge_index`` is a meta tensor of ``csr``'s edge count: the loaders
        sample ``csr`` and never read it.
        """
        data = ds.to_pyg()
        if csr is not None:
            data.edge_index = torch.empty((2, csr.num_edges), dtype=torch.int64, device="meta")
        elif undirected:
            from torch_geometric.utils import to_undirected

            data.edge_index = to_undirected(data.edge_index, num_nodes=ds.num_nodes)
        return data

    def num_edges(self, graph: Any) -> int:
        """Columns of ``edge_index``."""
        return int(graph.edge_index.shape[1])

    def loader(
        self,
        graph: Any,
        fanouts: list[int],
        seeds: torch.Tensor,
        *,
        batch_size: int,
        shuffle: bool,
        seed: int,
        features: Any = None,
        device: torch.device | None = None,
        prefetch: int = 2,
        progress: bool = False,
        evaluation: bool = False,
        graph_memory: str = "device",
        sampler_backend: str | None = None,
        sampler_cuda_graph: bool | None = None,
        sample_group: int | None = None,
        use_ddp: bool = False,
        csr: Any = None,
    ) -> Any:
        """A `NeighborLoader`; its batches carry every node attribute of ``graph``."""
        from ibp_graph.loaders.pyg import NeighborLoader

        return NeighborLoader(
            graph,
            list(fanouts),
            input_nodes=seeds,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            progress=progress,
            features=features,
            device=device,
            prefetch=prefetch,
            graph_memory=graph_memory,
            sampler_backend=sampler_backend,
            sampler_cuda_graph=sampler_cuda_graph,
            sample_group=sample_group,
            use_ddp=use_ddp,
            ddp_seed=seed,
            csr=csr,
        )

    def csr(self, graph: Any) -> Any:
        """``CSRGraph.from_data(graph)``: what `NeighborLoader` builds (and takes as ``csr``)."""
        from ibp_graph.graph import CSRGraph

        return CSRGraph.from_data(graph)

    def forward(self, model: torch.nn.Module, batch: Any) -> Step:
        """``model(x, edge_index)`` over the subgraph, cut to the seeds."""
        bs = int(batch.batch_size)
        out = model(batch.x, batch.edge_index)[:bs]
        return Step(out, batch.y[:bs], batch.n_id)

    def split_masks(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's ``val_mask`` and ``test_mask``, cut to the seeds."""
        bs = int(batch.batch_size)
        return batch.val_mask[:bs], batch.test_mask[:bs]


def _undirected(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Every edge in both directions, duplicates merged, sorted by (source, target).

    The same edges in the same order as PyG's ``to_undirected``, without needing PyG.
    """
    row, col = edge_index
    key = torch.cat([row * num_nodes + col, col * num_nodes + row]).unique(sorted=True)
    return torch.stack([key // num_nodes, key % num_nodes])


class DGLBackend(Backend):
    """DGL: `ibp_graph.loaders.dgl.DataLoader` blocks and `DGLGraphSAGE` / `DGLGAT`.

    Raises:
        ImportError: DGL is not installed (naming the ``dgl`` extra).
    """

    name = "dgl"

    def __init__(self) -> None:
        self._loaders = _dgl_loaders("backend: dgl")
        self._dgl = self._loaders.dgl

    def graph(self, ds: Any, *, undirected: bool = False, csr: Any = None) -> Any:
        """A ``dgl.DGLGraph`` with ``feat``, ``label``, ``val_mask`` and ``test_mask``.

        ``feat`` is left out where ``ds.x`` is a meta tensor: a run whose loaders read the rows
        from a compressed table (`ibp_graph.datasets.GraphDataset.without`).

        Raises:
            NotImplementedError: ``csr`` is given (the DGL loader builds its own graph).
        """
        if csr is not None:
            self.csr(None)  # raises: this loader cannot take a CSR built elsewhere
        edge_index = ds.edge_index
        if undirected:
            edge_index = _undirected(edge_index, ds.num_nodes)
        g = self._dgl.graph((edge_index[0], edge_index[1]), num_nodes=ds.num_nodes)
        if not ds.x.is_meta:  # the rows come from a compressed table otherwise
            g.ndata["feat"] = ds.x
        g.ndata["label"] = ds.y
        for name in _SPLIT_MASKS:
            g.ndata[name] = getattr(ds, name)
        return g

    def num_edges(self, graph: Any) -> int:
        """``graph.num_edges()``."""
        return int(graph.num_edges())

    def supports(self, device: torch.device) -> bool:
        """Whether this DGL build puts graphs on ``device`` (the PyPI build: the CPU only)."""
        return self._loaders._dgl_supports(device)

    def loader(
        self,
        graph: Any,
        fanouts: list[int],
        seeds: torch.Tensor,
        *,
        batch_size: int,
        shuffle: bool,
        seed: int,
        features: Any = None,
        device: torch.device | None = None,
        prefetch: int = 2,
        progress: bool = False,
        evaluation: bool = False,
        graph_memory: str = "device",
        sampler_backend: str | None = None,
        sampler_cuda_graph: bool | None = None,
        sample_group: int | None = None,
        use_ddp: bool = False,
        csr: Any = None,
    ) -> Any:
        """A `DataLoader` with a `NeighborSampler` over ``fanouts`` (``csr`` is not used).

        Its blocks carry ``feat`` (from ``features``) and ``label``, and with
        ``evaluation`` the seeds' ``val_mask`` and ``test_mask`` too.
        """
        labels = ["label", *_SPLIT_MASKS] if evaluation else ["label"]
        sampler = self._loaders.NeighborSampler(
            list(fanouts), prefetch_node_feats=["feat"], prefetch_labels=labels
        )
        return self._loaders.DataLoader(
            graph,
            seeds,
            sampler,
            device,
            batch_size=batch_size,
            shuffle=shuffle,
            features=features,
            prefetch=prefetch,
            seed=seed,
            progress=progress,
            graph_memory=graph_memory,
            sampler_backend=sampler_backend,
            sampler_cuda_graph=sampler_cuda_graph,
            sample_group=sample_group,
            use_ddp=use_ddp,
            ddp_seed=seed,
        )

    def forward(self, model: torch.nn.Module, batch: Any) -> Step:
        """``model(blocks, blocks[0].srcdata["feat"])``: the seeds' logits."""
        input_nodes, _, blocks = batch
        out = model(blocks, blocks[0].srcdata["feat"])
        return Step(out, blocks[-1].dstdata["label"], input_nodes)

    def split_masks(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``blocks[-1].dstdata["val_mask"]`` and ``["test_mask"]``."""
        dst = batch[2][-1].dstdata
        return dst["val_mask"], dst["test_mask"]


def get_backend(name: str) -> Backend:
    """The `Backend` called ``name`` (``"pyg"`` or ``"dgl"``), its framework imported.

    Raises:
        IBPInputError: an unknown name.
        ImportError: the framework is not installed (naming the extra to install).
    """
    name = check_choice("backend", name, BACKENDS)
    if name == "pyg":
        try:
            import torch_geometric  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                f"backend: pyg needs PyTorch Geometric: pip install 'ibp-graph[pyg]' ({exc})"
            ) from exc
        return PyGBackend()
    return DGLBackend()  # name == "dgl"
