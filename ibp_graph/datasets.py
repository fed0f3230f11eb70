"""Graph datasets for training: the bundled Cora / CiteSeer and OGB node-property datasets.

One function, :func:`load_dataset`, returns a :class:`GraphDataset` (features, labels,
edges and the standard train / validation / test masks as torch tensors):

- ``"cora"`` and ``"citeseer"`` ship inside the package (``ibp_graph/data/*.npz``, built from
  the MIT-licensed Planetoid files of kimiyoung/planetoid, see ``ibp_graph/data/README.md``),
  so they load offline on a fresh install. They are exactly what
  ``torch_geometric.datasets.Planetoid(root, "Cora")`` / ``"CiteSeer"`` gives.
- ``"ogbn-arxiv"``, ``"ogbn-products"`` and ``"ogbn-papers100M"`` (also spelled
  ``"ogb:ogbn-arxiv"``, ...) are read with OGB's own ``NodePropPredDataset`` from a folder
  already in OGB's layout. Nothing is ever downloaded: the folder is checked first.

Example::

    from ibp_graph.datasets import load_dataset

    ds = load_dataset("cora")
    ds.x.shape, ds.num_classes, int(ds.train_mask.sum())  # (2708, 1433), 7, 140
    data = ds.to_pyg()  # a torch_geometric.data.Data with the same tensors
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from .errors import IBPInputError
from .sources import ogb_folder

__all__ = ["BUNDLED", "OGB_DATASETS", "TENSORS", "GraphDataset", "known_names", "load_dataset"]

#: Datasets shipped inside the package, by the name :func:`load_dataset` takes.
BUNDLED: tuple[str, ...] = ("cora", "citeseer")

#: OGB node-property datasets :func:`load_dataset` reads when ``ogb`` is installed, with the
#: two facts of OGB's ``nodeproppred/master.csv`` that decide which files it needs: the
#: release version (its ``RELEASE_vN.txt``) and whether the raw data is binary
#: (``raw/data.npz``) or CSV (``raw/edge.csv.gz``).
OGB_DATASETS: dict[str, dict[str, Any]] = {
    "ogbn-arxiv": {"version": 1, "binary": False},
    "ogbn-products": {"version": 1, "binary": False},
    "ogbn-papers100M": {"version": 1, "binary": True},
}

_OGB_DEFAULT_ROOT = "dataset"  # OGB's own default
_NPZ_KEYS = ("x_indptr", "x_indices", "x_shape", "y", "edge_index", "meta")
_MASKS = ("train_mask", "val_mask", "test_mask")
#: The tensors of a `GraphDataset`, in the order of its fields.
TENSORS = ("x", "y", "edge_index", *_MASKS)


def known_names() -> list[str]:
    """Every name :func:`load_dataset` accepts (OGB names also without the ``ogb:`` prefix)."""
    return [*BUNDLED, *(f"ogb:{n}" for n in OGB_DATASETS), *OGB_DATASETS]


@dataclass(eq=False)
class GraphDataset:
    """One node-classification graph with its standard split, as torch tensors.

    Attributes:
        name: canonical name (``"cora"``, ``"citeseer"``, ``"ogbn-arxiv"``, ...).
        x: node features, ``(num_nodes, num_features)`` float32.
        y: node labels, ``(num_nodes,)`` int64 (``-1`` for OGB nodes without a label).
        edge_index: ``(2, num_edges)`` int64, source row then target row.
        train_mask: ``(num_nodes,)`` bool.
        val_mask: ``(num_nodes,)`` bool.
        test_mask: ``(num_nodes,)`` bool.
        num_nodes: number of nodes.
        num_classes: number of classes.
        source: where the data came from and how it was built.

    Any tensor may be a meta tensor (shape and dtype only) in a dataset made by `without`.

    Example::

        ds = load_dataset("citeseer")
        model(ds.x, ds.edge_index)[ds.train_mask]
    """

    name: str
    x: torch.Tensor
    y: torch.Tensor
    edge_index: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    num_nodes: int
    num_classes: int
    source: str

    @property
    def num_features(self) -> int:
        """Width of a feature row."""
        return int(self.x.shape[1])

    @property
    def num_edges(self) -> int:
        """Number of columns of ``edge_index`` (directed pairs)."""
        return int(self.edge_index.shape[1])

    def without(self, *names: str) -> GraphDataset:
        """A copy whose tensors ``names`` are meta tensors: their shape and dtype, no data.

        For a run that reads them from elsewhere: ``"x"`` where the loaders read the rows from
        a compressed table, ``"edge_index"`` where they sample a CSR graph built once. The
        data can then be freed, and any read of its values fails at once instead of giving
        wrong rows. The other tensors are shared with this dataset.

        Raises:
            IBPInputError: a name is not one of the dataset's tensors.
        """
        change = {}
        for name in names:
            if name not in TENSORS:
                raise IBPInputError(f"GraphDataset has no tensor {name!r}; it has {TENSORS}")
            t = getattr(self, name)
            change[name] = torch.empty(t.shape, dtype=t.dtype, device="meta")
        return dataclasses.replace(self, **change)

    def to_pyg(self) -> Any:
        """The graph as a ``torch_geometric.data.Data`` sharing these tensors (no copies).

        Its fields are those of ``torch_geometric.datasets.Planetoid``'s graphs: ``x``,
        ``edge_index``, ``y``, ``train_mask``, ``val_mask`` and ``test_mask``.

        Raises:
            ImportError: torch_geometric is not installed (``pip install 'ibp-graph[pyg]'``).

        Example::

            data = load_dataset("cora").to_pyg()
            data.num_nodes  # 2708
        """
        try:
            from torch_geometric.data import Data
        except ImportError as exc:
            raise ImportError(
                "GraphDataset.to_pyg() needs torch_geometric: install the 'pyg' extra "
                "(pip install 'ibp-graph[pyg]')"
            ) from exc
        data = Data(x=self.x, edge_index=self.edge_index, y=self.y)
        data.train_mask = self.train_mask
        data.val_mask = self.val_mask
        data.test_mask = self.test_mask
        return data

    def __repr__(self) -> str:
        return (
            f"GraphDataset(name={self.name!r}, num_nodes={self.num_nodes}, "
            f"num_features={self.num_features}, num_edges={self.num_edges}, "
            f"num_classes={self.num_classes}, train/val/test="
            f"{int(self.train_mask.sum())}/{int(self.val_mask.sum())}/"
            f"{int(self.test_mask.sum())})"
        )


def load_dataset(name: str, *, root: str | os.PathLike[str] | None = None) -> GraphDataset:
    """Load a node-classification dataset by name.

    Args:
        name: ``"cora"`` or ``"citeseer"`` (bundled with the package), or an OGB
            node-property dataset: ``"ogbn-arxiv"``, ``"ogbn-products"``,
            ``"ogbn-papers100M"``, each also as ``"ogb:NAME"``. Case does not matter.
        root: OGB datasets: the folder holding ``ogbn_arxiv/`` etc. in OGB's layout
            (default: ``dataset``, OGB's default). Bundled datasets: a folder holding
            ``NAME.npz`` in the bundled format, read instead of the copy in the package
            (default: the package's copy).

    Returns:
        The graph, its labels and the standard split. For the bundled datasets, exactly
        what ``torch_geometric.datasets.Planetoid(root, "Cora")`` (or ``"CiteSeer"``) gives;
        for OGB ones, ``edge_index`` as OGB's ``NodePropPredDataset`` gives it (directed
        for ogbn-arxiv and ogbn-papers100M) and the masks from ``get_idx_split()``.

    Raises:
        IBPInputError: an unknown name (the message lists the known ones), an OGB folder
            that lacks what OGB needs to load without downloading (the message names the
            missing path), or a malformed ``.npz``.
        ImportError: an OGB name and the ``ogb`` package is not installed
            (``pip install 'ibp-graph[ogb]'``).

    Example::

        >>> from ibp_graph.datasets import load_dataset
        >>> ds = load_dataset("cora")
        >>> tuple(ds.x.shape), ds.num_classes, int(ds.train_mask.sum())
        ((2708, 1433), 7, 140)
        >>> arxiv = load_dataset("ogbn-arxiv", root="dataset")  # doctest: +SKIP
    """
    if not isinstance(name, str):
        raise IBPInputError(f"dataset name must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    if key in BUNDLED:
        return _load_bundled(key, root)
    ogb_key = key[4:] if key.startswith("ogb:") else key
    for ogb_name in OGB_DATASETS:
        if ogb_key == ogb_name.lower():
            return _load_ogb(ogb_name, root)
    raise IBPInputError(f"unknown dataset {name!r}; known: {', '.join(known_names())}")


# --------------------------------------------------------------------------------------------
# Bundled Planetoid graphs (ibp_graph/data/NAME.npz)
# --------------------------------------------------------------------------------------------


def _load_bundled(key: str, root: str | os.PathLike[str] | None) -> GraphDataset:
    if root is None:
        ref = resources.files("ibp_graph") / "data" / f"{key}.npz"
        where = f"ibp_graph/data/{key}.npz"
        if not ref.is_file():
            raise FileNotFoundError(
                f"{where}: the bundled dataset is missing from this installation of ibp-graph "
                "(its package data 'data/*.npz' was not installed)"
            )
        with ref.open("rb") as f:
            arrays, meta = _read_npz(f, where)
    else:
        path = Path(root) / f"{key}.npz"
        where = str(path)
        if not path.is_file():
            raise IBPInputError(f"{path}: no such file (root is a folder holding {key}.npz)")
        with open(path, "rb") as f:
            arrays, meta = _read_npz(f, where)

    n = arrays["x"].shape[0]
    source = (
        f"{meta.get('name', key)} from {where}: {meta.get('source_repository', '?')} "
        f"(commit {meta.get('source_commit', '?')}, {meta.get('license', '?')}); "
        f"{meta.get('citation', '')} Equal to {meta.get('equivalent_to', '?')}; "
        f"built by {meta.get('build_script', '?')}"
    )
    y = torch.from_numpy(arrays["y"])
    return GraphDataset(
        name=key,
        x=torch.from_numpy(arrays["x"]),
        y=y,
        edge_index=torch.from_numpy(arrays["edge_index"]),
        train_mask=torch.from_numpy(arrays["train_mask"]),
        val_mask=torch.from_numpy(arrays["val_mask"]),
        test_mask=torch.from_numpy(arrays["test_mask"]),
        num_nodes=n,
        num_classes=int(meta.get("num_classes", int(y.max()) + 1 if n else 0)),
        source=source,
    )


def _read_npz(f: IO[bytes], where: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read and check a bundled-format archive; rebuild the dense float32 ``x``."""
    try:
        with np.load(f, allow_pickle=False) as z:
            missing = [k for k in (*_NPZ_KEYS, *_MASKS) if k not in z.files]
            if missing:
                raise IBPInputError(f"{where}: missing array(s) {', '.join(missing)}")
            raw = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        if isinstance(exc, IBPInputError):
            raise
        raise IBPInputError(f"{where}: not a readable .npz archive ({exc})") from None

    def bad(what: str) -> IBPInputError:
        return IBPInputError(f"{where}: {what}")

    shape = raw["x_shape"]
    if shape.shape != (2,) or shape.dtype.kind not in "iu" or (shape < 0).any():
        raise bad(f"x_shape must be two non-negative integers, got {shape!r}")
    n, d = (int(s) for s in shape)
    indptr = raw["x_indptr"].astype(np.int64)
    indices = raw["x_indices"].astype(np.int64)
    if indptr.shape != (n + 1,) or indptr[0] != 0 or (np.diff(indptr) < 0).any():
        raise bad(f"x_indptr must be {n + 1} non-decreasing offsets from 0")
    if indices.shape != (int(indptr[-1]),) or (indices.size and not 0 <= indices.min()):
        raise bad(f"x_indices must hold {int(indptr[-1])} column ids")
    if indices.size and indices.max() >= d:
        raise bad(f"x_indices has a column id >= {d}")
    x = np.zeros((n, d), dtype=np.float32)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    if "x_values" in raw:
        values = raw["x_values"]
        if values.dtype != np.float32 or values.shape != indices.shape:
            raise bad(f"x_values must be {indices.size} float32 values")
        x[rows, indices] = values
    else:
        x[rows, indices] = 1.0

    y = raw["y"]
    if y.shape != (n,) or y.dtype.kind not in "iu":
        raise bad(f"y must be {n} integer labels")
    ei = raw["edge_index"]
    if ei.ndim != 2 or ei.shape[0] != 2 or ei.dtype.kind not in "iu":
        raise bad("edge_index must be a (2, E) integer array")
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise bad(f"edge_index has node ids outside 0..{n - 1}")
    out = {"x": x, "y": y.astype(np.int64), "edge_index": ei.astype(np.int64)}
    for k in _MASKS:
        m = raw[k]
        if m.shape != (n,) or m.dtype != np.bool_:
            raise bad(f"{k} must be {n} booleans")
        out[k] = m.copy()
    try:
        meta = json.loads(str(raw["meta"]))
    except ValueError as exc:
        raise bad(f"meta is not JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise bad("meta must be a JSON object")
    return out, meta


# --------------------------------------------------------------------------------------------
# OGB node-property datasets (read by ogb itself, never downloaded)
# --------------------------------------------------------------------------------------------


def _check_ogb_folder(name: str, folder: Path) -> None:
    """Raise unless ``folder`` lets OGB load ``name`` without downloading or prompting."""
    info = OGB_DATASETS[name]
    hint = (
        f"nothing is downloaded: copy the {name} folder, in OGB's layout, there (fetch it "
        "with ogb where there is network access), or pass its parent folder as root"
    )
    if not folder.is_dir():
        raise IBPInputError(f"{name}: {folder} does not exist; {hint}")
    release = folder / f"RELEASE_v{info['version']}.txt"
    if not release.is_file():
        # OGB would stop and ask on stdin whether to delete and re-download the folder.
        raise IBPInputError(f"{name}: {release} is missing; {hint}")
    processed = folder / "processed" / "data_processed"
    raw = folder / "raw" / ("data.npz" if info["binary"] else "edge.csv.gz")
    if not processed.is_file() and not raw.is_file():
        raise IBPInputError(f"{name}: neither {processed} nor {raw} exists; {hint}")


def _ogb_folders(name: str, root: Path) -> list[Path]:
    """The folders OGB may read: ``root/ogbn_x``, and ``root/ogbn_x_pyg`` where it exists.

    Some ogb releases prefer a ``_pyg`` folder left by ``PygNodePropPredDataset``; both are
    checked so that neither choice can lead ogb to download.
    """
    folder = ogb_folder(name, root)
    pyg = folder.with_name(folder.name + "_pyg")
    return [folder, pyg] if pyg.exists() else [folder]


@contextlib.contextmanager
def _torch_load_for_ogb() -> Iterator[None]:
    """Let ogb 1.3.6's ``torch.load`` of its own pickles run on torch >= 2.6 (restored after).

    ogb calls ``torch.load`` without ``weights_only`` on ``processed/data_processed``; torch
    2.6+ would refuse that pickle. ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` is set only while
    ogb runs (this is process-wide, so not thread-safe), and only for folders the caller
    chose, which must be trusted: that file is an arbitrary pickle.
    """
    key = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
    old = os.environ.get(key)
    os.environ[key] = "1"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD.*")
            yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def _as_tensor(a: Any, dtype: type) -> torch.Tensor:
    """``a`` as a C-contiguous tensor of ``dtype``, sharing its memory where it already is one.

    OGB's arrays are the largest things loaded (ogbn-papers100M's features are 57 GB): a
    copy of an array that is already right would double the peak for nothing.
    """
    out = np.ascontiguousarray(a, dtype=dtype)
    if not out.flags.writeable:  # torch.from_numpy wants memory it may write
        out = out.copy()
    return torch.from_numpy(out)


def _load_ogb(name: str, root: str | os.PathLike[str] | None) -> GraphDataset:
    root_path = Path(root) if root is not None else Path(_OGB_DEFAULT_ROOT)
    folders = _ogb_folders(name, root_path)
    for folder in folders:
        _check_ogb_folder(name, folder)
    try:
        import ogb
        from ogb.nodeproppred import NodePropPredDataset
    except ImportError as exc:
        raise ImportError(
            f"loading {name} needs the ogb package: install the 'ogb' extra "
            "(pip install 'ibp-graph[ogb]')"
        ) from exc
    # ogb writes processed/data_processed on its first load from raw/ but does not create
    # the folder itself.
    for folder in folders:
        if not (folder / "processed" / "data_processed").is_file():
            (folder / "processed").mkdir(exist_ok=True)

    with _torch_load_for_ogb():
        dataset = NodePropPredDataset(name, root=str(root_path))
        split = dataset.get_idx_split()
    graph, labels = dataset[0]

    feat = graph.get("node_feat")
    if feat is None:
        raise IBPInputError(f"{name}: the dataset under {root_path} has no node features")
    x = _as_tensor(feat, np.float32)
    num_nodes = int(graph["num_nodes"])
    labels = np.asarray(labels).reshape(num_nodes, -1)[:, 0]
    if labels.dtype.kind == "f":  # ogbn-papers100M: NaN for unlabeled nodes
        labels = np.where(np.isnan(labels), -1, labels)
    y = torch.from_numpy(np.array(labels, dtype=np.int64, order="C"))
    edge_index = _as_tensor(graph["edge_index"], np.int64)
    where, num_classes = getattr(dataset, "root", folders[0]), int(dataset.num_classes)
    del graph, feat, dataset  # ours now hold the arrays: nothing else keeps them alive

    def mask(idx: Any) -> torch.Tensor:
        m = torch.zeros(num_nodes, dtype=torch.bool)
        m[torch.from_numpy(np.array(idx, dtype=np.int64).reshape(-1))] = True
        return m

    version = getattr(ogb, "__version__", "?")
    source = (
        f"ogb:{name} from {where} read by ogb {version} "
        "NodePropPredDataset (edge_index as OGB stores it; split from get_idx_split())"
    )
    return GraphDataset(
        name=name,
        x=x,
        y=y,
        edge_index=edge_index,
        train_mask=mask(split["train"]),
        val_mask=mask(split["valid"]),
        test_mask=mask(split["test"]),
        num_nodes=num_nodes,
        num_classes=num_classes,
        source=source,
    )
