"""One-off: build the bundled ``ibp_graph/data/{cora,citeseer}.npz`` from the Planetoid pickles.

Reads ``ind.NAME.{x,tx,allx,y,ty,ally,graph,test.index}`` of kimiyoung/planetoid (MIT) from
``../shared/datasets/planetoid`` (or ``--src``) and reproduces what
``torch_geometric.datasets.Planetoid(root, NAME)`` gives (``split="public"``, no transform),
step by step as ``torch_geometric.io.planetoid.read_planetoid_data`` does, without running
PyG's download or processing and without fetching anything:

- the pickles are read with the restricted unpickler of :mod:`benchmarks.real_tables`,
  extended only by ``collections.defaultdict`` and ``list`` (the ``.graph`` adjacency dicts;
  the ``.y`` label arrays need nothing beyond the NumPy classes it already allows);
- ``x`` / ``y`` / masks follow ``read_planetoid_data`` line by line (torch ops, same dtypes);
- ``edge_index`` comes from PyG's own helper ``edge_index_from_dict`` (remove self loops,
  coalesce with ``sort_by_row=False``) applied to the unpickled dict.

Each ``.npz`` (``np.savez_compressed``, readable with ``allow_pickle=False``) holds ``x`` as the
CSR nonzero pattern of the exact float32 table (``x_indptr``, ``x_indices``, ``x_shape``, plus
``x_values`` only when some stored value is not 1.0), ``y`` (int64), ``edge_index`` (int32),
``train_mask`` / ``val_mask`` / ``test_mask`` (bool) and ``meta`` (a JSON string).

Run once, from the repository root::

    .venv/bin/python -m benchmarks.bundle_planetoid
    .venv/bin/python benchmarks/bundle_planetoid.py      # the same
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script, the repository root is not on the path

from benchmarks import real_tables  # noqa: E402

OUT_DIR = REPO / "ibp_graph" / "data"
COMMAND = ".venv/bin/python -m benchmarks.bundle_planetoid"

#: Lowercase file prefix -> (PyG dataset name, expected nodes, features, edges, classes,
#: train / val / test sizes).
DATASETS = {
    "cora": ("Cora", 2708, 1433, 10556, 7, (140, 500, 1000)),
    "citeseer": ("CiteSeer", 3327, 3703, 9104, 6, (120, 500, 1000)),
}
PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
MAX_BYTES = 1_000_000

SOURCE = {
    "source_repository": "https://github.com/kimiyoung/planetoid",
    "source_folder": "data/",
    "source_commit": "af6abf4",
    "license": "MIT (kimiyoung/planetoid)",
    "citation": (
        "Zhilin Yang, William W. Cohen, Ruslan Salakhutdinov. Revisiting Semi-Supervised "
        "Learning with Graph Embeddings. ICML 2016."
    ),
}


class _PlanetoidUnpickler(real_tables._SafeUnpickler):
    """`real_tables._SafeUnpickler` plus the two globals of the ``.graph`` pickles.

    ``ind.NAME.graph`` is a ``collections.defaultdict(list)`` (Python 2 pickle, so the
    factory is named ``__builtin__.list``); nothing else is added.
    """

    def __init__(self, file, path: Path):
        super().__init__(file, path)
        self._allowed = {
            **self._allowed,
            ("collections", "defaultdict"): collections.defaultdict,
            ("__builtin__", "list"): list,
            ("builtins", "list"): list,
        }


def _unpickle(path: Path) -> object:
    with open(path, "rb") as f:
        return _PlanetoidUnpickler(f, path).load()


def _read_part(folder: Path, prefix: str, part: str):
    """``torch_geometric.io.planetoid.read_file`` on our restricted unpickler."""
    path = folder / f"ind.{prefix}.{part}"
    if part == "test.index":
        return torch.from_numpy(real_tables._load_test_index(path))
    obj = _unpickle(path)
    if part == "graph":
        if not isinstance(obj, dict) or not all(
            isinstance(k, int) and isinstance(v, list) and all(isinstance(u, int) for u in v)
            for k, v in obj.items()
        ):
            raise ValueError(f"{path}: expected a dict of int -> list of int")
        return obj
    dense = obj.todense() if hasattr(obj, "todense") else obj
    if not isinstance(dense, np.ndarray) or dense.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D matrix, got {type(obj)!r}")
    return torch.from_numpy(np.asarray(dense)).to(torch.float)


def planetoid_data(folder: Path, prefix: str) -> dict[str, torch.Tensor]:
    """The tensors of ``Planetoid(root, NAME)[0]``, following ``read_planetoid_data``."""
    from torch_geometric.io.planetoid import edge_index_from_dict
    from torch_geometric.utils import index_to_mask

    x, tx, allx, y, ty, ally, graph, test_index = (
        _read_part(folder, prefix, part) for part in PARTS
    )
    train_index = torch.arange(y.size(0), dtype=torch.long)
    val_index = torch.arange(y.size(0), y.size(0) + 500, dtype=torch.long)
    sorted_test_index = test_index.sort()[0]

    if prefix == "citeseer":
        # The isolated CiteSeer test ids have no rows in tx / ty: PyG inserts zero rows.
        len_test_indices = int(test_index.max() - test_index.min()) + 1
        tx_ext = torch.zeros(len_test_indices, tx.size(1), dtype=tx.dtype)
        tx_ext[sorted_test_index - test_index.min(), :] = tx
        ty_ext = torch.zeros(len_test_indices, ty.size(1), dtype=ty.dtype)
        ty_ext[sorted_test_index - test_index.min(), :] = ty
        tx, ty = tx_ext, ty_ext

    x = torch.cat([allx, tx], dim=0)
    x[test_index] = x[sorted_test_index]

    y = torch.cat([ally, ty], dim=0).max(dim=1)[1]
    y[test_index] = y[sorted_test_index]

    return {
        "x": x,
        "y": y,
        "edge_index": edge_index_from_dict(graph_dict=graph, num_nodes=y.size(0)),
        "train_mask": index_to_mask(train_index, size=y.size(0)),
        "val_mask": index_to_mask(val_index, size=y.size(0)),
        "test_mask": index_to_mask(test_index, size=y.size(0)),
    }


def _csr_of(x: np.ndarray) -> dict[str, np.ndarray]:
    """CSR of the bit-level nonzero pattern of a float32 table (so -0.0 would be kept)."""
    bits = x.view(np.uint32)
    rows, cols = np.nonzero(bits)
    counts = np.bincount(rows, minlength=x.shape[0])
    indptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    out = {
        "x_indptr": indptr.astype(np.int32),
        "x_indices": cols.astype(np.int32),
        "x_shape": np.array(x.shape, dtype=np.int64),
    }
    values = x[rows, cols]
    if not np.array_equal(values.view(np.uint32), np.full(values.size, 0x3F800000, np.uint32)):
        out["x_values"] = values.astype(np.float32)
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check(prefix: str, data: dict[str, torch.Tensor]) -> None:
    _, n, d, e, c, (n_train, n_val, n_test) = DATASETS[prefix]
    x, y, ei = data["x"], data["y"], data["edge_index"]
    masks = [data[k] for k in ("train_mask", "val_mask", "test_mask")]
    assert x.dtype == torch.float32 and tuple(x.shape) == (n, d), (x.dtype, x.shape)
    assert bool(((x == 0) | (x == 1)).all()), "x is not binary"
    assert y.dtype == torch.int64 and y.shape == (n,) and int(y.max()) + 1 == c
    assert ei.dtype == torch.int64 and tuple(ei.shape) == (2, e), ei.shape
    assert int(ei.min()) >= 0 and int(ei.max()) < n
    pairs = set(map(tuple, ei.t().tolist()))
    assert all((b, a) in pairs for a, b in pairs), "edge_index is not symmetric"
    assert [int(m.sum()) for m in masks] == [n_train, n_val, n_test]
    assert int(sum(m.long() for m in masks).max()) == 1, "masks overlap"


def build(prefix: str, src: Path, out_dir: Path) -> Path:
    """Build and write ``out_dir/PREFIX.npz``; return its path."""
    name, *_ = DATASETS[prefix]
    data = planetoid_data(src, prefix)
    _check(prefix, data)
    x = data["x"].numpy()
    arrays = _csr_of(x)
    ei = data["edge_index"]
    n_nodes, n_feat = x.shape
    meta = {
        "name": name,
        "key": prefix,
        **SOURCE,
        "source_files": {
            f"ind.{prefix}.{part}": _sha256(src / f"ind.{prefix}.{part}") for part in PARTS
        },
        "equivalent_to": (
            f"torch_geometric.datasets.Planetoid(root, {name!r}) (split='public', no "
            f"transform), torch_geometric {_pyg_version()}"
        ),
        "num_nodes": n_nodes,
        "num_features": n_feat,
        "num_edges": int(ei.size(1)),
        "num_classes": int(data["y"].max()) + 1,
        "x_encoding": (
            "dense float32 (x_shape) rebuilt from the CSR nonzero pattern x_indptr/x_indices; "
            "stored values are 1.0 unless x_values is present"
        ),
        "build_script": "benchmarks/bundle_planetoid.py",
        "build_command": COMMAND,
        "build_steps": [
            f"unpickle ind.{prefix}.{{x,tx,allx,y,ty,ally,graph}} (latin1) with the restricted "
            "unpickler of benchmarks/real_tables.py plus collections.defaultdict and list; "
            f"read ind.{prefix}.test.index as int64",
            "matrices: todense, then torch float32 (torch_geometric.io.planetoid.read_file)",
            "citeseer only: tx and ty extended with zero rows for the test ids missing "
            "from the files (range min..max of test.index)",
            "x = cat(allx, tx); x[test_index] = x[sorted(test_index)]",
            "y = argmax of cat(ally, ty) (torch max(dim=1)); y[test_index] = y[sorted(test_index)]",
            "train_mask = first len(y-file) nodes; val_mask = the next 500; test_mask = test.index",
            "edge_index = torch_geometric.io.planetoid.edge_index_from_dict(graph, num_nodes): "
            "remove self loops, coalesce (sort_by_row=False); stored as int32",
            "np.savez_compressed with x as CSR of its nonzero pattern",
        ],
    }
    arrays.update(
        y=data["y"].numpy().astype(np.int64),
        edge_index=ei.numpy().astype(np.int32),
        train_mask=data["train_mask"].numpy(),
        val_mask=data["val_mask"].numpy(),
        test_mask=data["test_mask"].numpy(),
        meta=np.array(json.dumps(meta, indent=1)),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{prefix}.npz"
    np.savez_compressed(path, **arrays)
    _verify(path, data)
    size = path.stat().st_size
    if size >= MAX_BYTES:
        raise SystemExit(f"{path}: {size} bytes, over the {MAX_BYTES} byte budget")
    return path


def _pyg_version() -> str:
    import torch_geometric

    return torch_geometric.__version__


def _verify(path: Path, data: dict[str, torch.Tensor]) -> None:
    """Read the file back (``allow_pickle=False``) and compare every array bit for bit."""
    with np.load(path, allow_pickle=False) as z:
        shape = tuple(int(s) for s in z["x_shape"])
        x = np.zeros(shape, dtype=np.float32)
        rows = np.repeat(np.arange(shape[0]), np.diff(z["x_indptr"]))
        x[rows, z["x_indices"]] = z["x_values"] if "x_values" in z.files else 1.0
        want = data["x"].numpy()
        assert x.tobytes() == want.tobytes(), f"{path}: x does not round-trip"
        for key in ("y", "edge_index", "train_mask", "val_mask", "test_mask"):
            got = z[key].astype(data[key].numpy().dtype)
            assert np.array_equal(got, data[key].numpy()), f"{path}: {key} does not round-trip"
        json.loads(str(z["meta"]))


def main(argv: list[str] | None = None) -> int:
    """Build both files and print their sizes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--src",
        type=Path,
        default=real_tables.SHARED_DATASETS / "planetoid",
        help="folder with the ind.NAME.* files (default: ../shared/datasets/planetoid)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=OUT_DIR,
        help="folder for the .npz files (default: ibp_graph/data/, the bundled data)",
    )
    args = parser.parse_args(argv)
    for prefix in DATASETS:
        path = build(prefix, args.src, args.out)
        print(f"{path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
