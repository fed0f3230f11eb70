"""GraphSAGE and GAT node classifiers for PyG and for DGL.

PyG (``backend: pyg``): PyG's own `BasicGNN` models from ``torch_geometric.nn.models``
(``GraphSAGE`` with mean aggregation, ``GAT`` with ``GATConv``), so a training step is
``F.cross_entropy(model(x, edge_index)[:bs], y)``.

DGL (``backend: dgl``): `DGLGraphSAGE` and `DGLGAT`, built from ``dgl.nn.SAGEConv``
(``"mean"``) and ``dgl.nn.GATConv`` with the same hyper-parameters and the same layout as
PyG's: ``layers`` layers with ReLU and dropout between them (none on the input), GAT's hidden
layers concatenating ``heads`` heads of ``hidden // heads`` channels, its last layer
averaging them, attention dropout ``dropout`` and a self-loop on every node (PyG's
``GATConv`` adds them). They run on the blocks of `ibp_graph.loaders.dgl.DataLoader`:
``model(blocks, blocks[0].srcdata["feat"])`` gives the seeds' logits.

Both give logits (no softmax). Example::

    from ibp_graph.train.models import build_model
    from ibp_graph.train.config import TrainConfig

    cfg = TrainConfig(dataset="cora", model="gat", hidden=64, heads=8, layers=2)
    model = build_model(cfg, in_channels=1433, out_channels=7)
    dgl_model = build_model(cfg, in_channels=1433, out_channels=7, backend="dgl")

Importing this module needs neither framework: ``torch_geometric`` (the ``pyg`` extra) or
DGL (the ``dgl`` extra) is imported when a model for it is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from ibp_graph.errors import IBPInputError, check_choice

__all__ = [
    "BACKENDS",
    "MODELS",
    "DGLGraphSAGE",
    "DGLGAT",
    "ModelSpec",
    "build_model",
    "dgl_gat",
    "dgl_graphsage",
    "gat",
    "graphsage",
]

#: Model names `build_model` accepts.
MODELS: tuple[str, ...] = ("sage", "gat")
#: Frameworks `build_model` builds for.
BACKENDS: tuple[str, ...] = ("pyg", "dgl")


class ModelSpec(Protocol):
    """What `build_model` reads from a config (a `TrainConfig` has all of it).

    ``backend`` (``"pyg"`` or ``"dgl"``) is read when present; without it, PyG.
    """

    model: str
    hidden: int
    layers: int
    dropout: float
    heads: int


def _models() -> Any:
    try:
        from torch_geometric.nn import models
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "ibp_graph.train needs PyTorch Geometric: pip install 'ibp-graph[pyg]'"
        ) from exc
    return models


_DGL_HINT = "pip install 'ibp-graph[dgl]'"


def _dgl_loaders(what: str) -> Any:
    """`ibp_graph.loaders.dgl`, imported first as it patches DGL's import.

    Raises:
        ImportError: DGL is not installed or does not import (naming ``what`` needs it, and
            the extra to install).
    """
    try:
        loaders = importlib.import_module("ibp_graph.loaders.dgl")
    except ImportError as exc:
        hint = "" if _DGL_HINT in str(exc) else f": {_DGL_HINT}"
        raise ImportError(f"{what} needs DGL{hint} ({exc})") from exc
    return loaders


def _check(name: str, value: object, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise IBPInputError(f"{name} must be an integer >= {lo}, got {value!r}")
    return value


def _check_dropout(dropout: object) -> float:
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
        raise IBPInputError(f"dropout must be a number in [0, 1), got {dropout!r}")
    if not 0.0 <= float(dropout) < 1.0:
        raise IBPInputError(f"dropout must be in [0, 1), got {dropout!r}")
    return float(dropout)


def graphsage(
    in_channels: int, hidden: int, out_channels: int, *, layers: int = 2, dropout: float = 0.5
) -> torch.nn.Module:
    """PyG's ``GraphSAGE`` (mean aggregation) with ``layers`` ``SAGEConv`` layers.

    Args:
        in_channels: width of a node-feature row.
        hidden: width of the hidden layers.
        out_channels: number of classes (the logits' width).
        layers: message-passing layers, one per sampling hop (default: 2).
        dropout: dropout probability between layers (default: 0.5).
    """
    return _models().GraphSAGE(
        _check("in_channels", in_channels, 1),
        _check("hidden", hidden, 1),
        num_layers=_check("layers", layers, 1),
        out_channels=_check("out_channels", out_channels, 1),
        dropout=_check_dropout(dropout),
    )


def gat(
    in_channels: int,
    hidden: int,
    out_channels: int,
    *,
    layers: int = 2,
    dropout: float = 0.6,
    heads: int = 8,
) -> torch.nn.Module:
    """PyG's ``GAT`` with ``layers`` ``GATConv`` layers.

    Hidden layers concatenate ``heads`` heads of ``hidden // heads`` channels each; the last
    layer averages its heads into the logits. ``dropout`` applies to the features between
    layers and to the attention coefficients.

    Args:
        in_channels: width of a node-feature row.
        hidden: width of the hidden layers, a multiple of ``heads``.
        out_channels: number of classes (the logits' width).
        layers: message-passing layers, one per sampling hop (default: 2).
        dropout: dropout probability (default: 0.6).
        heads: attention heads per layer (default: 8).
    """
    heads = _check("heads", heads, 1)
    if _check("hidden", hidden, 1) % heads:
        raise IBPInputError(f"hidden ({hidden}) must be a multiple of heads ({heads}) for GAT")
    return _models().GAT(
        _check("in_channels", in_channels, 1),
        hidden,
        num_layers=_check("layers", layers, 1),
        out_channels=_check("out_channels", out_channels, 1),
        dropout=_check_dropout(dropout),
        heads=heads,
    )


def _conv_dims(in_channels: int, hidden: int, out_channels: int, layers: int) -> list[int]:
    """Widths from the input through the hidden layers to the logits, checked."""
    _check("in_channels", in_channels, 1)
    _check("hidden", hidden, 1)
    _check("out_channels", out_channels, 1)
    return [in_channels] + [hidden] * (_check("layers", layers, 1) - 1) + [out_channels]


def _check_blocks(blocks: Sequence[Any], layers: int) -> None:
    if len(blocks) != layers:
        raise IBPInputError(
            f"the model has {layers} layers but got {len(blocks)} blocks: sample one hop per layer"
        )


class DGLGraphSAGE(torch.nn.Module):
    """GraphSAGE (mean aggregation) over DGL blocks, laid out as PyG's ``GraphSAGE``.

    Build it with `dgl_graphsage`. ``layers`` ``dgl.nn.SAGEConv(..., "mean")`` layers, ReLU
    and dropout between them; ``forward(blocks, x)`` returns the logits of
    ``blocks[-1]``'s destination nodes.
    """

    def __init__(
        self, in_channels: int, hidden: int, out_channels: int, *, layers: int, dropout: float
    ) -> None:
        super().__init__()
        dims = _conv_dims(in_channels, hidden, out_channels, layers)
        nn = _dgl_loaders("DGLGraphSAGE").dgl.nn
        self.convs = torch.nn.ModuleList(
            nn.SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:], strict=True)
        )
        self.dropout = torch.nn.Dropout(_check_dropout(dropout))

    def forward(self, blocks: Sequence[Any], x: torch.Tensor) -> torch.Tensor:
        """Logits of the last block's destination nodes.

        Args:
            blocks: one DGL block per layer, outermost hop first.
            x: features of ``blocks[0]``'s source nodes.
        """
        _check_blocks(blocks, len(self.convs))
        last = len(self.convs) - 1
        for i, (conv, block) in enumerate(zip(self.convs, blocks, strict=True)):
            x = conv(block, x)
            if i < last:
                x = self.dropout(F.relu(x))
        return x


class DGLGAT(torch.nn.Module):
    """GAT over DGL blocks, laid out as PyG's ``GAT``.

    Build it with `dgl_gat`. ``layers`` ``dgl.nn.GATConv`` layers: hidden ones concatenate
    ``heads`` heads of ``hidden // heads`` channels, the last one averages its heads into
    the logits; attention dropout ``dropout``, ReLU and dropout between layers. Every
    destination node attends to itself, as PyG's ``GATConv`` (``add_self_loops=True``)
    does: each block's self-loops are replaced by exactly one per destination node.
    """

    def __init__(
        self,
        in_channels: int,
        hidden: int,
        out_channels: int,
        *,
        layers: int,
        dropout: float,
        heads: int,
    ) -> None:
        super().__init__()
        heads = _check("heads", heads, 1)
        dims = _conv_dims(in_channels, hidden, out_channels, layers)
        if hidden % heads:
            raise IBPInputError(f"hidden ({hidden}) must be a multiple of heads ({heads}) for GAT")
        p = _check_dropout(dropout)
        self._dgl = _dgl_loaders("DGLGAT").dgl
        last = len(dims) - 2
        self.convs = torch.nn.ModuleList(
            self._dgl.nn.GATConv(
                dims[i],
                dims[i + 1] if i == last else dims[i + 1] // heads,
                heads,
                attn_drop=p,
                allow_zero_in_degree=True,  # every node has its self-loop
            )
            for i in range(last + 1)
        )
        self.dropout = torch.nn.Dropout(p)

    def _self_loops(self, block: Any) -> Any:
        """``block`` with its self-loops replaced by one per destination node.

        The destination nodes are the first source nodes, so a local ``src == dst`` edge
        is a self-loop.
        """
        src, dst = block.edges()
        keep = src != dst
        loops = torch.arange(block.num_dst_nodes(), dtype=src.dtype, device=src.device)
        return self._dgl.create_block(
            (torch.cat([src[keep], loops]), torch.cat([dst[keep], loops])),
            num_src_nodes=block.num_src_nodes(),
            num_dst_nodes=block.num_dst_nodes(),
        )

    def forward(self, blocks: Sequence[Any], x: torch.Tensor) -> torch.Tensor:
        """Logits of the last block's destination nodes.

        Args:
            blocks: one DGL block per layer, outermost hop first.
            x: features of ``blocks[0]``'s source nodes.
        """
        _check_blocks(blocks, len(self.convs))
        last = len(self.convs) - 1
        for i, (conv, block) in enumerate(zip(self.convs, blocks, strict=True)):
            h = conv(self._self_loops(block), x)  # (dst nodes, heads, channels)
            if i < last:
                x = self.dropout(F.relu(h.flatten(1)))
            else:
                x = h.mean(dim=1)
        return x


def dgl_graphsage(
    in_channels: int, hidden: int, out_channels: int, *, layers: int = 2, dropout: float = 0.5
) -> DGLGraphSAGE:
    """GraphSAGE for DGL blocks, with `graphsage`'s hyper-parameters.

    Args:
        in_channels: width of a node-feature row.
        hidden: width of the hidden layers.
        out_channels: number of classes (the logits' width).
        layers: message-passing layers, one block each (default: 2).
        dropout: dropout probability between layers (default: 0.5).

    Raises:
        ImportError: DGL is not installed.
    """
    return DGLGraphSAGE(in_channels, hidden, out_channels, layers=layers, dropout=dropout)


def dgl_gat(
    in_channels: int,
    hidden: int,
    out_channels: int,
    *,
    layers: int = 2,
    dropout: float = 0.6,
    heads: int = 8,
) -> DGLGAT:
    """GAT for DGL blocks, with `gat`'s hyper-parameters.

    Args:
        in_channels: width of a node-feature row.
        hidden: width of the hidden layers, a multiple of ``heads``.
        out_channels: number of classes (the logits' width).
        layers: message-passing layers, one block each (default: 2).
        dropout: dropout probability, between layers and on the attention (default: 0.6).
        heads: attention heads per layer (default: 8).

    Raises:
        ImportError: DGL is not installed.
    """
    return DGLGAT(in_channels, hidden, out_channels, layers=layers, dropout=dropout, heads=heads)


def build_model(
    cfg: ModelSpec, in_channels: int, out_channels: int, *, backend: str | None = None
) -> torch.nn.Module:
    """The model a config names (``cfg.model``: ``"sage"`` or ``"gat"``) for its backend.

    Args:
        cfg: a `TrainConfig` (or anything with ``model``, ``hidden``, ``layers``,
            ``dropout`` and ``heads``, and optionally ``backend``); ``heads`` is used by
            GAT only.
        in_channels: width of a node-feature row.
        out_channels: number of classes.
        backend: ``"pyg"`` or ``"dgl"`` (default: None, ``cfg.backend``, else PyG).

    Raises:
        IBPInputError: an unknown model or backend name, or a bad size.
        ImportError: the backend's framework is not installed.
    """
    if backend is None:
        backend = getattr(cfg, "backend", "pyg")
    backend = check_choice("backend", backend, BACKENDS)
    model = check_choice("model", cfg.model, MODELS)
    dgl = backend == "dgl"
    if model == "sage":
        make_sage = dgl_graphsage if dgl else graphsage
        return make_sage(
            in_channels, cfg.hidden, out_channels, layers=cfg.layers, dropout=cfg.dropout
        )
    make_gat = dgl_gat if dgl else gat  # model == "gat"
    return make_gat(
        in_channels,
        cfg.hidden,
        out_channels,
        layers=cfg.layers,
        dropout=cfg.dropout,
        heads=cfg.heads,
    )
