"""Real node-feature tables of ``../shared/datasets``, loaded as a PyG user gets them.

Every loader returns ``(name, array, note)``: ``array`` is a 2-D C-contiguous NumPy array
(float32 unless the name says otherwise), one row per node in node-id order, and ``note``
says which files it came from, how it was built and whether it is derived.

The data files are third-party and are read in place from ``SHARED_DATASETS`` (override
with the environment variable ``IBP_GRAPH_DATASETS``); nothing is copied or cached on disk.
The Planetoid files are Python pickles: they are read with an unpickler that only accepts
the NumPy / SciPy-CSR classes those files use, so loading them executes nothing else.
The npz files are read with ``allow_pickle=False``.

Usage::

    from benchmarks import real_tables
    if real_tables.available():
        for name, x, note in real_tables.load_all():
            ...
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import pickle
from pathlib import Path

import numpy as np

Table = tuple[str, np.ndarray, str]

SHARED_DATASETS = Path(
    os.environ.get("IBP_GRAPH_DATASETS")
    or Path(__file__).resolve().parents[2] / "shared" / "datasets"
)

#: Seed of the fixed ARPACK start vector used for the derived SVD tables.
SVD_SEED = 0
#: Number of components of the derived SVD tables.
SVD_COMPONENTS = 100

HETEROPHILOUS = ("tolokers", "minesweeper", "actor", "cornell", "texas", "wisconsin")

_PLANETOID_FILES = {
    name: [f"ind.{name}.{part}" for part in ("x", "tx", "allx", "test.index")]
    for name in ("cora", "citeseer", "pubmed")
}


def _root(root: str | os.PathLike | None) -> Path:
    # Read the module global at call time, so tests may monkeypatch it.
    return Path(root) if root is not None else SHARED_DATASETS


def _required_files(root: Path) -> list[Path]:
    files = [root / "planetoid" / f for f in _PLANETOID_FILES["cora"]]
    files += [root / "planetoid" / f for f in _PLANETOID_FILES["citeseer"]]
    files += [root / "planetoid" / "ind.pubmed.x", root / "planetoid" / "ind.pubmed.tx"]
    files += [root / "planetoid" / "ind.pubmed.test.index"]
    files += [root / "heterophilous" / f"{n}.npz" for n in HETEROPHILOUS]
    files += [root / "musae" / d / "features.json" for d in ("facebook", "twitch_DE")]
    return files


def available(root: str | os.PathLike | None = None) -> bool:
    """True when every file that :func:`load_all` reads exists under the datasets folder."""
    return all(p.is_file() for p in _required_files(_root(root)))


# --------------------------------------------------------------------------------------------
# Planetoid (kimiyoung/planetoid pickles), built exactly like torch_geometric's Planetoid
# --------------------------------------------------------------------------------------------


def _allowed_globals() -> dict[tuple[str, str], object]:
    import scipy.sparse as sp

    try:  # NumPy >= 2
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # pragma: no cover - NumPy 1.x
        from numpy.core.multiarray import _reconstruct

    csr = sp.csr_matrix
    return {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("scipy.sparse.csr", "csr_matrix"): csr,
        ("scipy.sparse._csr", "csr_matrix"): csr,
        ("scipy.sparse", "csr_matrix"): csr,
    }


class _SafeUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the NumPy/SciPy classes of the Planetoid files."""

    def __init__(self, file, path: Path):
        super().__init__(file, encoding="latin1")
        self._path = path
        self._allowed = _allowed_globals()

    def find_class(self, module: str, name: str):  # noqa: D102
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"{self._path}: refusing to load global {module}.{name} "
                "(only NumPy arrays and SciPy CSR matrices are allowed)"
            ) from None


def _load_planetoid_matrix(path: Path) -> np.ndarray:
    """One ``ind.NAME.{x,tx,allx}`` pickle as a dense float32 array (PyG: todense, float)."""
    import scipy.sparse as sp

    with open(path, "rb") as f:
        obj = _SafeUnpickler(f, path).load()
    if sp.issparse(obj):
        dense = obj.toarray()
    elif isinstance(obj, np.ndarray):
        dense = obj
    else:
        raise ValueError(f"{path}: expected a sparse matrix or ndarray, got {type(obj)!r}")
    if dense.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D matrix, got shape {dense.shape}")
    return np.ascontiguousarray(dense, dtype=np.float32)


def _load_test_index(path: Path) -> np.ndarray:
    with open(path, encoding="ascii") as f:
        return np.array([int(line) for line in f if line.strip()], dtype=np.int64)


def _planetoid_x(name: str, root: Path) -> np.ndarray:
    """``data.x`` of ``torch_geometric.datasets.Planetoid(root, NAME)`` (no transform).

    Mirrors ``torch_geometric.io.planetoid.read_planetoid_data``: ``x = cat(allx, tx)``,
    for CiteSeer ``tx`` first extended with zero rows for the test ids missing from the
    file, then ``x[test_index] = x[sorted(test_index)]``.
    """
    d = root / "planetoid"
    tx = _load_planetoid_matrix(d / f"ind.{name}.tx")
    allx = _load_planetoid_matrix(d / f"ind.{name}.allx")
    test_index = _load_test_index(d / f"ind.{name}.test.index")
    sorted_test_index = np.sort(test_index)
    if name == "citeseer":
        lo = int(test_index.min())
        tx_ext = np.zeros((int(test_index.max()) - lo + 1, tx.shape[1]), dtype=tx.dtype)
        tx_ext[sorted_test_index - lo] = tx
        tx = tx_ext
    x = np.concatenate([allx, tx], axis=0)
    x[test_index] = x[sorted_test_index]
    return np.ascontiguousarray(x, dtype=np.float32)


def load_cora(root: str | os.PathLike | None = None) -> Table:
    """Cora binary bag of words, 2,708 x 1,433 float32 (PyG ``Planetoid('Cora').x``)."""
    x = _planetoid_x("cora", _root(root))
    note = (
        "planetoid/ind.cora.{allx,tx,test.index} (kimiyoung/planetoid, MIT), rebuilt as "
        "torch_geometric.datasets.Planetoid does: cat(allx, tx), test rows reordered; "
        "binary BoW, not derived"
    )
    return "cora-bow", x, note


def load_citeseer(root: str | os.PathLike | None = None) -> Table:
    """CiteSeer binary bag of words, 3,327 x 3,703 float32 (PyG ``Planetoid('CiteSeer').x``)."""
    x = _planetoid_x("citeseer", _root(root))
    note = (
        "planetoid/ind.citeseer.{allx,tx,test.index} (kimiyoung/planetoid, MIT), rebuilt "
        "as torch_geometric.datasets.Planetoid does: tx extended with the all-zero rows "
        "PyG inserts for the 15 isolated test ids, cat(allx, tx), test rows reordered; "
        "binary BoW, not derived"
    )
    return "citeseer-bow", x, note


def load_pubmed_partial(root: str | os.PathLike | None = None) -> Table:
    """The 1,060 PubMed TF-IDF rows present (nodes 0..59 and the 1,000 test nodes), float32."""
    d = _root(root) / "planetoid"
    x = _load_planetoid_matrix(d / "ind.pubmed.x")
    tx = _load_planetoid_matrix(d / "ind.pubmed.tx")
    test_index = _load_test_index(d / "ind.pubmed.test.index")
    # tx row k is node test_index[k] (PyG's reordering); list rows in node-id order.
    table = np.concatenate([x, tx[np.argsort(test_index, kind="stable")]], axis=0)
    note = (
        "planetoid/ind.pubmed.{x,tx,test.index} (kimiyoung/planetoid, MIT): the rows of "
        f"PyG's Planetoid('PubMed').x for nodes 0..{x.shape[0] - 1} (x) and the "
        f"{tx.shape[0]} test nodes (tx), in node-id order; the other "
        "18,657 rows (allx) are not available; real TF-IDF values, subset, not derived"
    )
    return "pubmed-tfidf-1060rows", np.ascontiguousarray(table, dtype=np.float32), note


# --------------------------------------------------------------------------------------------
# Heterophilous graphs (yandex-research/heterophilous-graphs npz)
# --------------------------------------------------------------------------------------------


def load_heterophilous(name: str, root: str | os.PathLike | None = None) -> Table:
    """``node_features`` of ``heterophilous/NAME.npz`` (float32, as stored)."""
    if name not in HETEROPHILOUS:
        raise ValueError(f"unknown heterophilous table {name!r}; expected one of {HETEROPHILOUS}")
    path = _root(root) / "heterophilous" / f"{name}.npz"
    with np.load(path, allow_pickle=False) as z:
        x = np.ascontiguousarray(z["node_features"], dtype=np.float32)
    if name == "tolokers":
        what = "10 real-valued dims in [0, 1]"
        pyg = "same npz that torch_geometric.datasets.HeterophilousGraphDataset reads"
    elif name == "minesweeper":
        what = "7 binary dims (synthetic graph)"
        pyg = "same npz that torch_geometric.datasets.HeterophilousGraphDataset reads"
    else:
        what = "binary BoW"
        pyg = (
            "PyG's Actor/WebKB read the geom-gcn raw files instead; same node count, "
            "not byte-compared here"
        )
    note = (
        f"heterophilous/{name}.npz key node_features (yandex-research/heterophilous-graphs, "
        f"MIT); {what}; {pyg}; not derived"
    )
    return name, x, note


# --------------------------------------------------------------------------------------------
# MUSAE (benedekrozemberczki/MUSAE features.json: sparse lists of feature ids)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _musae_pairs(path: str) -> tuple[int, int, np.ndarray, np.ndarray]:
    """(n_nodes, width, row ids, feature ids) of a MUSAE features.json, duplicates removed."""
    with open(path, encoding="utf-8") as f:
        feats: dict[str, list[int]] = json.load(f)
    n = len(feats)
    nodes = np.fromiter((int(k) for k in feats), dtype=np.int64, count=n)
    if not np.array_equal(np.sort(nodes), np.arange(n)):
        raise ValueError(f"{path}: node ids are not exactly 0..{n - 1}")
    lens = np.fromiter((len(v) for v in feats.values()), dtype=np.int64, count=n)
    cols = np.fromiter(
        itertools.chain.from_iterable(feats.values()), dtype=np.int64, count=int(lens.sum())
    )
    rows = np.repeat(nodes, lens)
    if cols.size and cols.min() < 0:
        raise ValueError(f"{path}: negative feature id")
    width = int(cols.max()) + 1 if cols.size else 0
    # Some Twitch lists repeat an id; the features are binary (set bits), so keep one.
    flat = np.unique(rows * width + cols)
    rows, cols = np.divmod(flat, width)
    for a in (rows, cols):
        a.flags.writeable = False
    return n, width, rows, cols


def _musae_dense(folder: str, root: Path) -> tuple[np.ndarray, int]:
    n, width, rows, cols = _musae_pairs(str(root / "musae" / folder / "features.json"))
    x = np.zeros((n, width), dtype=np.float32)
    x[rows, cols] = 1.0
    return x, rows.size


def load_facebook_bow(root: str | os.PathLike | None = None) -> Table:
    """Facebook page-page binary BoW, 22,470 x 4,714 float32 0/1 (dense)."""
    x, nnz = _musae_dense("facebook", _root(root))
    note = (
        "musae/facebook/features.json (benedekrozemberczki/MUSAE, GPL-3.0): lists of feature "
        f"ids -> dense float32 0/1, row = node id, width = max id + 1 ({nnz} ones); "
        "PyG's FacebookPagePage ships a different 128-dim table (not available here); "
        "real BoW, densified, not derived"
    )
    return "facebook-bow", x, note


def load_twitch_de_bow(root: str | os.PathLike | None = None) -> Table:
    """Twitch DE binary BoW, 9,498 x 3,170 float32 0/1 (dense)."""
    x, nnz = _musae_dense("twitch_DE", _root(root))
    note = (
        "musae/twitch_DE/features.json (benedekrozemberczki/MUSAE, GPL-3.0): lists of feature "
        f"ids -> dense float32 0/1, row = node id (new_id), width = max id + 1 ({nnz} ones, "
        "repeated ids counted once); PyG's Twitch('DE') ships a different 128-dim table "
        "(not available here); real BoW, densified, not derived"
    )
    return "twitch-de-bow", x, note


@functools.lru_cache(maxsize=2)
def _facebook_svd(path: str, k: int, seed: int) -> np.ndarray:
    import scipy.sparse as sp
    from scipy.sparse.linalg import svds

    n, width, rows, cols = _musae_pairs(path)
    a = sp.csr_matrix(
        (np.ones(rows.size, dtype=np.float64), (rows, cols)), shape=(n, width), dtype=np.float64
    )
    v0 = np.random.default_rng(seed).standard_normal(min(a.shape))
    u, s, _ = svds(a, k=k, v0=v0, solver="arpack")
    order = np.argsort(s, kind="stable")[::-1]
    u, s = u[:, order], s[order]
    # Fix the sign of each component (largest |u| entry positive) so the table is canonical.
    signs = np.sign(u[np.argmax(np.abs(u), axis=0), np.arange(k)])
    signs[signs == 0] = 1.0
    table = np.ascontiguousarray(u * (s * signs), dtype=np.float32)
    table.flags.writeable = False
    return table


def load_facebook_svd(
    dtype: np.dtype | type = np.float32, root: str | os.PathLike | None = None
) -> Table:
    """DERIVED: Facebook BoW -> truncated SVD, 100 components, table U*S (22,470 x 100).

    Deterministic (fixed ARPACK start vector, canonical order and signs) and bit-identical
    between runs on one machine with one BLAS thread count; ARPACK's BLAS calls round
    differently with another OpenBLAS thread count, which flips the last bit of about 50
    of the 2,247,000 float32 entries (measured: 1 vs 2 threads).
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise ValueError(f"dtype must be float32 or float16, got {dtype}")
    path = str(_root(root) / "musae" / "facebook" / "features.json")
    table = np.array(_facebook_svd(path, SVD_COMPONENTS, SVD_SEED), dtype=dtype, order="C")
    cast = "" if dtype == np.float32 else ", then cast to float16"
    note = (
        "DERIVED from musae/facebook/features.json (GPL-3.0 data): sparse 0/1 BoW (float64) "
        f"-> scipy.sparse.linalg.svds(k={SVD_COMPONENTS}, solver='arpack', "
        f"v0=default_rng({SVD_SEED}).standard_normal), components by decreasing singular "
        f"value, sign fixed (largest |U| entry positive), table = U*S as float32{cast}; "
        "rows in node order; bit-identical for one BLAS thread count (a few 1-ulp "
        "differences otherwise)"
    )
    return f"facebook-svd{SVD_COMPONENTS}-{dtype.name}", table, note


# --------------------------------------------------------------------------------------------


def load_all(root: str | os.PathLike | None = None) -> list[Table]:
    """Every real table, in a fixed order (see the module docstring)."""
    tables = [load_cora(root), load_citeseer(root), load_pubmed_partial(root)]
    tables += [load_heterophilous(name, root) for name in HETEROPHILOUS]
    tables += [load_facebook_bow(root), load_twitch_de_bow(root)]
    tables += [load_facebook_svd(np.float32, root), load_facebook_svd(np.float16, root)]
    return tables


if __name__ == "__main__":  # pragma: no cover
    import time

    t0 = time.perf_counter()
    for _name, _x, _note in load_all():
        print(
            f"{_name:26s} {str(_x.shape):16s} {_x.dtype}  nnz={np.count_nonzero(_x) / _x.size:.4f}"
        )
        print(f"    {_note}")
    print(f"loaded in {time.perf_counter() - t0:.1f} s")
