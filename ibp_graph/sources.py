"""Reading feature tables from files: ``.npy`` (memory-mapped), ``.pt`` and OGB datasets."""

from __future__ import annotations

import gzip
import os
import pickle
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .dtypes import as_table
from .errors import IBPInputError

#: Keys tried, in order, when a ``.pt`` file holds a dict rather than a tensor.
PT_KEYS = ("x", "feat", "node_feat", "features")


@dataclass
class TableSource:
    """A 2-D table read from a file, and where it came from."""

    array: np.ndarray
    dtype_name: str
    description: str
    path: Path | None = None


#: The first bytes of every ``.npy`` file.
NPY_MAGIC = b"\x93NUMPY"
#: What to save instead of pickled objects, named in refusals.
SAVE_HINT = "save a plain array with numpy.save(path, x) or a tensor with torch.save(x, path)"


def _sniff(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(len(NPY_MAGIC))
    except OSError as exc:
        raise IBPInputError(f"{path}: cannot read file ({exc.strerror})") from None


def _not_npy(path: Path, head: bytes) -> IBPInputError:
    if head[:1] == b"\x80":
        return IBPInputError(
            f"{path}: is a Python pickle, not a .npy file; pickled objects are never loaded, "
            f"for safety: {SAVE_HINT}"
        )
    return IBPInputError(
        f"{path}: not a .npy file (it does not start with the NumPy magic {NPY_MAGIC!r}, but "
        f"with {head!r})"
    )


def _npy(path: Path) -> TableSource:
    head = _sniff(path)
    if head != NPY_MAGIC:
        raise _not_npy(path, head)
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc) or "Python objects" in str(exc):
            raise IBPInputError(
                f"{path}: holds Python objects (dtype object), not a numeric table; pickled "
                f"objects are never loaded, for safety: {SAVE_HINT}"
            ) from None
        raise IBPInputError(f"{path}: not a readable .npy file ({exc})") from None
    except (OSError, EOFError) as exc:
        raise IBPInputError(f"{path}: not a readable .npy file ({exc})") from None
    array, name = as_table(arr, what=str(path))
    return TableSource(array, name, f"{path} (memory-mapped)", path.resolve())


def _torch_load(path: Path) -> object:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about old pickle protocols first
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise IBPInputError(
            f"{path}: holds pickled Python objects other than tensors and plain containers; "
            f"they are never unpickled, for safety: {SAVE_HINT}"
        ) from None
    except Exception as exc:  # torch raises many types for a bad file
        raise IBPInputError(
            f"{path}: not a readable tensor file ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:120]})"
        ) from None


def _pt(path: Path, key: str | None) -> TableSource:
    obj = _torch_load(path)
    if isinstance(obj, dict):
        keys = (key,) if key else PT_KEYS
        found = next((k for k in keys if isinstance(obj.get(k), torch.Tensor)), None)
        if found is None:
            raise IBPInputError(
                f"{path}: holds a dict without a tensor under {', '.join(map(repr, keys))}"
            )
        obj = obj[found]
    elif key is not None:
        raise IBPInputError(f"{path}: holds a {type(obj).__name__}, not a dict with key {key!r}")
    if not isinstance(obj, torch.Tensor):
        raise IBPInputError(f"{path}: holds a {type(obj).__name__}, not a tensor")
    array, name = as_table(obj, what=str(path))
    return TableSource(array, name, f"{path}", path.resolve())


def ogb_folder(name: str, root: str | os.PathLike[str]) -> Path:
    """OGB's on-disk folder of a dataset: ``root/ogbn_arxiv`` for ``ogbn-arxiv``."""
    return Path(root) / name.replace("-", "_")


def _ogb(name: str, root: str | os.PathLike[str] | None) -> TableSource:
    if not name.startswith(("ogbn-", "ogbl-", "ogbg-")):
        raise IBPInputError(f"ogb:{name}: not an OGB dataset name (expected e.g. ogb:ogbn-arxiv)")
    folder = ogb_folder(name, root if root is not None else "dataset")
    raw = folder / "raw"
    for fname in ("node-feat.csv.gz", "node-feat.csv"):
        f = raw / fname
        if f.is_file():
            opener = gzip.open if fname.endswith(".gz") else open
            try:
                with opener(f, "rt") as fh:
                    arr = np.loadtxt(fh, delimiter=",", dtype=np.float32, ndmin=2)
            except (OSError, ValueError, EOFError) as exc:
                raise IBPInputError(f"{f}: cannot parse node features ({exc})") from None
            array, dname = as_table(arr, what=str(f))
            return TableSource(array, dname, f"ogb:{name} ({f})")
    npz = raw / "data.npz"
    if npz.is_file():
        try:
            with np.load(npz, allow_pickle=False) as z:
                names = list(z.files)
                arr = z["node_feat"] if "node_feat" in names else None
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise IBPInputError(f"{npz}: not a readable .npz file ({exc})") from None
        if arr is None:
            raise IBPInputError(f"{npz}: has no 'node_feat' array ({', '.join(names)})")
        array, dname = as_table(arr, what=str(npz))
        return TableSource(array, dname, f"ogb:{name} ({npz})")
    raise IBPInputError(
        f"ogb:{name}: no node features under {raw} (looked for node-feat.csv.gz, "
        f"node-feat.csv, data.npz); nothing is downloaded: fetch the dataset with ogb where "
        f"there is network access and pass its parent folder as --root"
    )


def open_source(
    spec: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    key: str | None = None,
) -> TableSource:
    """Open a table given as a ``.npy`` / ``.pt`` path or ``ogb:NAME``.

    Args:
        spec: the input: ``x.npy`` (memory-mapped, so larger-than-RAM tables stream),
            ``x.pt`` (a tensor, or a dict holding one under ``key``), or ``ogb:ogbn-arxiv``.
        root: folder holding OGB datasets in OGB's layout (default: ``dataset``).
        key: dict key in a ``.pt`` file (default: the first of ``x``, ``feat``, ``node_feat``,
            ``features`` present).
    """
    text = os.fspath(spec)
    if text.startswith("ogb:"):
        return _ogb(text[4:], root)
    path = Path(text)
    if not path.exists():
        raise IBPInputError(f"{path}: no such file")
    if not path.is_file():
        raise IBPInputError(f"{path}: not a file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _npy(path)
    if suffix in (".pt", ".pth"):
        return _pt(path, key)
    raise IBPInputError(f"{path}: unknown input type (expected .npy, .pt or ogb:NAME)")
