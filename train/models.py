"""GraphSAGE and GAT node classifiers, built from PyG's ``torch_geometric.nn.models``.

Both are PyG's own `BasicGNN` models (``GraphSAGE`` with mean aggregation, ``GAT`` with
``GATConv``): ``layers`` message-passing layers, ReLU and dropout between them, and logits
out (no softmax), so a training step is ``F.cross_entropy(model(x, edge_index)[:bs], y)``.

Example::

    from ibp_graph.train.models import build_model
    from ibp_graph.train.config import TrainConfig

    cfg = TrainConfig(dataset="cora", model="gat", hidden=64, heads=8, layers=2)
    model = build_model(cfg, in_channels=1433, out_channels=7)

Importing this module needs ``torch_geometric`` (the ``pyg`` extra) only when a model is
built.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from ibp_graph.errors import IBPInputError

__all__ = ["MODELS", "ModelSpec", "build_model", "gat", "graphsage"]

#: Model names `build_model` accepts.
MODELS: tuple[str, ...] = ("sage", "gat")


class ModelSpec(Protocol):
    """What `build_model` reads from a config (a `TrainConfig` has all of it)."""

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


def build_model(cfg: ModelSpec, in_channels: int, out_channels: int) -> torch.nn.Module:
    """The model a config names (``cfg.model``: ``"sage"`` or ``"gat"``).

    Args:
        cfg: a `TrainConfig` (or anything with ``model``, ``hidden``, ``layers``,
            ``dropout`` and ``heads``); ``heads`` is used by GAT only.
        in_channels: width of a node-feature row.
        out_channels: number of classes.

    Raises:
        IBPInputError: an unknown model name or a bad size.
    """
    if cfg.model == "sage":
        return graphsage(
            in_channels, cfg.hidden, out_channels, layers=cfg.layers, dropout=cfg.dropout
        )
    if cfg.model == "gat":
        return gat(
            in_channels,
            cfg.hidden,
            out_channels,
            layers=cfg.layers,
            dropout=cfg.dropout,
            heads=cfg.heads,
        )
    raise IBPInputError(f"model must be one of {', '.join(MODELS)}, got {cfg.model!r}")
