"""Lets ``import dgl`` (2.1.0) work with a torch that DGL's GraphBolt has no build for.

DGL 2.1.0 imports ``dgl.graphbolt`` while ``import dgl`` runs (through ``dgl.distributed``).
GraphBolt needs ``torchdata.datapipes`` (gone from torchdata 0.10 on) and a C++ library
built for the running torch (``dgl/graphbolt/libgraphbolt_pytorch_<version>.so``, shipped for
torch 2.0.0 to 2.2.1 only), so with torch 2.13 ``import dgl`` fails. Nothing else in DGL uses
GraphBolt at import time.

ibp-graph installs ``ibp_graph_dgl_hook.pth`` next to this module; Python's ``site`` runs it
at start-up, and it calls `install`, which puts `GraphboltFinder` at the front of
``sys.meta_path``. The finder answers only for ``dgl.graphbolt``, and only when the real
GraphBolt cannot load: then ``dgl.graphbolt`` is a placeholder module whose every attribute
raises an ``AttributeError`` saying why. When GraphBolt can load (a torch it was built for,
a torchdata with datapipes) the finder steps aside. Importing this module imports nothing
heavy (no torch, no dgl), so start-up stays fast. ``IBP_GRAPH_NO_DGL_HOOK=1`` turns the
start-up hook off.
"""

from __future__ import annotations

import os
import sys
import types

TYPE_CHECKING = False  # not typing's: importing typing at every start-up costs ~2 ms
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["PLACEHOLDER_DOC", "GraphboltFinder", "graphbolt_loadable", "install", "is_placeholder"]

#: The docstring of the placeholder module (how `is_placeholder` recognises it).
PLACEHOLDER_DOC = (
    "Placeholder for DGL's GraphBolt, which cannot load with this torch (see ibp_graph_dgl_hook)."
)


def graphbolt_loadable(graphbolt_dir: Path) -> bool:
    """Whether the real ``dgl.graphbolt`` in ``graphbolt_dir`` would import.

    Args:
        graphbolt_dir: the ``dgl/graphbolt`` folder.
    """
    import importlib.util

    import torch  # dgl has imported it already when dgl.graphbolt is imported

    version = torch.__version__.split("+", maxsplit=1)[0]
    if not any(graphbolt_dir.glob(f"*graphbolt_pytorch_{version}.*")):
        return False
    try:
        return importlib.util.find_spec("torchdata.datapipes") is not None
    except ImportError:  # torchdata itself is missing
        return False


class _PlaceholderLoader:
    """Creates the placeholder ``dgl.graphbolt`` (an ``importlib.abc.Loader``, duck-typed)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, PLACEHOLDER_DOC)

        def __getattr__(name: str) -> object:  # noqa: N807 - the module-level hook
            if name.startswith("__"):
                raise AttributeError(name)
            import torch

            raise AttributeError(
                f"dgl.graphbolt.{name}: DGL's GraphBolt is not available with torch "
                f"{torch.__version__} (no libgraphbolt build for it, or no "
                "torchdata.datapipes); ibp-graph put a placeholder in its place so that "
                "`import dgl` works (set IBP_GRAPH_NO_DGL_HOOK=1 to turn this off)"
            )

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the placeholder has no code."""


class GraphboltFinder:
    """Finds the placeholder for ``dgl.graphbolt`` when the real one cannot load.

    An ``importlib.abc.MetaPathFinder`` by its ``find_spec``: subclassing it would import
    ``importlib.abc`` (and ``typing``'s machinery behind it) at every interpreter start-up.
    """

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """The placeholder's spec for ``dgl.graphbolt`` if GraphBolt cannot load, else None."""
        if fullname != "dgl.graphbolt" or not path:
            return None
        import importlib.util
        from pathlib import Path

        if graphbolt_loadable(Path(next(iter(path))) / "graphbolt"):
            return None
        return importlib.util.spec_from_loader(fullname, _PlaceholderLoader())


def is_placeholder(module: object) -> bool:
    """Whether ``module`` is the placeholder ``dgl.graphbolt``."""
    return isinstance(module, types.ModuleType) and module.__doc__ == PLACEHOLDER_DOC


def install() -> bool:
    """Put a `GraphboltFinder` at the front of ``sys.meta_path`` (once).

    Returns:
        Whether the finder is in place (False when ``IBP_GRAPH_NO_DGL_HOOK`` is set to
        anything but ``""`` or ``"0"``).
    """
    if os.environ.get("IBP_GRAPH_NO_DGL_HOOK", "") not in ("", "0"):
        return False
    if not any(isinstance(f, GraphboltFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, GraphboltFinder())
    return True
