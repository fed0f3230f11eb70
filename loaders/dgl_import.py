"""``import dgl`` for the DGL drop-ins, with a clear error when DGL is missing.

ibp-graph's start-up hook (``ibp_graph_dgl_hook``, run by the ``ibp_graph_dgl_hook.pth`` that
``pip install`` puts into site-packages) already lets a plain ``import dgl`` work where DGL's
GraphBolt has no build for the running torch. This module installs the same hook when the
``.pth`` did not run (``python -S``, a checkout on ``sys.path``), imports DGL, and checks that
DGL uses its PyTorch backend. It sets ``DGLBACKEND=pytorch`` when unset, so that DGL does not
write ``~/.dgl/config.json``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import types

import torch

__all__ = ["GRAPHBOLT_PLACEHOLDER", "EXTRA_HINT", "dgl", "dgl_supports", "import_dgl"]

#: How to install DGL with ibp-graph.
EXTRA_HINT = "pip install 'ibp-graph[dgl]'"


def import_dgl() -> types.ModuleType:
    """``import dgl``, with the GraphBolt placeholder hook in place.

    Raises:
        ImportError: DGL is not installed or does not import (naming the extra), or it loaded
            a backend other than PyTorch.
    """
    if sys.modules.get("dgl") is None:  # not imported yet (or blocked with None)
        try:
            spec = importlib.util.find_spec("dgl")
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise ImportError(f"ibp_graph.loaders.dgl needs DGL: {EXTRA_HINT}")
        os.environ.setdefault("DGLBACKEND", "pytorch")
        try:
            import ibp_graph_dgl_hook
        except ImportError:  # ibp-graph not installed (a checkout on sys.path): no hook
            pass
        else:
            ibp_graph_dgl_hook.install()
    try:
        import dgl
    except (ImportError, OSError) as exc:
        raise ImportError(
            f"ibp_graph.loaders.dgl: `import dgl` failed ({exc}); ibp-graph supports "
            f"dgl==2.1.0: {EXTRA_HINT}"
        ) from exc
    backend = getattr(getattr(dgl, "backend", None), "backend_name", "pytorch")
    if backend != "pytorch":
        raise ImportError(
            f"ibp_graph.loaders.dgl needs DGL's PyTorch backend, DGL loaded {backend!r}: "
            "set DGLBACKEND=pytorch"
        )
    return dgl


dgl = import_dgl()


def _placeholder_in_use() -> bool:
    try:
        from ibp_graph_dgl_hook import is_placeholder
    except ImportError:
        return False
    return is_placeholder(sys.modules.get("dgl.graphbolt"))


#: Whether ``dgl.graphbolt`` is ibp-graph's placeholder (GraphBolt cannot load here).
GRAPHBOLT_PLACEHOLDER = _placeholder_in_use()


@functools.cache
def dgl_supports(device: torch.device) -> bool:
    """Whether this DGL build can hold graphs on ``device`` (the PyPI build: the CPU only)."""
    if device.type == "cpu":
        return True
    try:
        dgl.graph(([0], [0])).to(device)
    except Exception:  # noqa: BLE001 - DGLError, RuntimeError: any failure means "no"
        return False
    return True
