"""ibp_graph.datasets: the bundled Cora / CiteSeer graphs and OGB node-property datasets.

The bundled files must give exactly what ``torch_geometric.datasets.Planetoid`` gives (PyG's
shapes, raw binary features, symmetric coalesced edges, the public split); where the upstream
Planetoid files are available under ../shared/datasets they are also compared bit for bit
with a rebuild from those files. OGB datasets are never downloaded: a tiny dataset is written
in OGB's exact on-disk layout and read through ogb's own loader (skipped without ogb).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import real_tables  # noqa: E402
from ibp_graph import IBPInputError  # noqa: E402
from ibp_graph.datasets import GraphDataset, known_names, load_dataset  # noqa: E402

#: name -> (nodes, features, directed edge pairs, classes, (train, val, test)), as PyG gives.
EXPECTED = {
    "cora": (2708, 1433, 10556, 7, (140, 500, 1000)),
    "citeseer": (3327, 3703, 9104, 6, (120, 500, 1000)),
}

PLANETOID_DIR = real_tables.SHARED_DATASETS / "planetoid"
PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def _planetoid_available(name: str) -> bool:
    return all((PLANETOID_DIR / f"ind.{name}.{p}").is_file() for p in PARTS)


needs_planetoid = pytest.mark.skipif(
    not all(_planetoid_available(n) for n in EXPECTED),
    reason=f"upstream Planetoid files not found under {PLANETOID_DIR} "
    "(set IBP_GRAPH_DATASETS to the shared/datasets folder)",
)


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def bundled(request) -> GraphDataset:
    return load_dataset(request.param)


# --------------------------------------------------------------------------------------------
# Bundled Planetoid graphs
# --------------------------------------------------------------------------------------------


def test_bundled_shapes_match_pyg(bundled: GraphDataset) -> None:
    n, d, e, c, (n_train, n_val, n_test) = EXPECTED[bundled.name]
    assert bundled.x.dtype == torch.float32 and tuple(bundled.x.shape) == (n, d)
    assert bundled.y.dtype == torch.int64 and tuple(bundled.y.shape) == (n,)
    assert bundled.edge_index.dtype == torch.int64 and tuple(bundled.edge_index.shape) == (2, e)
    assert bundled.num_nodes == n and bundled.num_features == d and bundled.num_edges == e
    assert bundled.num_classes == c
    assert int(bundled.y.min()) == 0 and int(bundled.y.max()) == c - 1
    masks = (bundled.train_mask, bundled.val_mask, bundled.test_mask)
    assert all(m.dtype == torch.bool and tuple(m.shape) == (n,) for m in masks)
    assert [int(m.sum()) for m in masks] == [n_train, n_val, n_test]
    # The public split: the first labelled nodes, then the next 500, then the test ids.
    assert bool(bundled.train_mask[:n_train].all())
    assert bool(bundled.val_mask[n_train : n_train + n_val].all())
    assert "kimiyoung/planetoid" in bundled.source and "MIT" in bundled.source
    assert f"num_nodes={n}" in repr(bundled)


def test_bundled_x_is_raw_binary(bundled: GraphDataset) -> None:
    x = bundled.x
    assert bool(((x == 0) | (x == 1)).all())
    bits = x.numpy().view(np.uint32)
    assert set(np.unique(bits).tolist()) == {0, 0x3F800000}  # +0.0 and 1.0 only, no -0.0
    assert bool((x.sum(dim=1) > 1).any())  # not row-normalized


def test_bundled_edges_symmetric_coalesced_in_range(bundled: GraphDataset) -> None:
    ei = bundled.edge_index.numpy()
    n = bundled.num_nodes
    assert ei.min() >= 0 and ei.max() < n
    assert not (ei[0] == ei[1]).any(), "self loops"
    forward = np.sort(ei[0] * n + ei[1])
    backward = np.sort(ei[1] * n + ei[0])
    assert np.array_equal(forward, backward), "not symmetric"
    # PyG coalesces with sort_by_row=False: sorted by (target, source), no duplicates.
    assert (np.diff(ei[1] * n + ei[0]) > 0).all()


def test_bundled_masks_disjoint(bundled: GraphDataset) -> None:
    total = bundled.train_mask.long() + bundled.val_mask.long() + bundled.test_mask.long()
    assert int(total.max()) == 1


def test_to_pyg_has_the_same_tensors(bundled: GraphDataset) -> None:
    pytest.importorskip("torch_geometric", reason="torch_geometric (the 'pyg' extra) missing")
    from torch_geometric.data import Data

    data = bundled.to_pyg()
    assert isinstance(data, Data)
    assert set(data.keys()) == {"x", "edge_index", "y", "train_mask", "val_mask", "test_mask"}
    for key in ("x", "edge_index", "y", "train_mask", "val_mask", "test_mask"):
        assert data[key] is getattr(bundled, key), key
    assert data.num_nodes == bundled.num_nodes
    assert data.is_undirected()


def test_to_pyg_without_torch_geometric(monkeypatch) -> None:
    ds = load_dataset("cora")
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)
    with pytest.raises(ImportError, match=r"'pyg' extra"):
        ds.to_pyg()


def test_names_are_case_insensitive() -> None:
    a, b = load_dataset("CiteSeer"), load_dataset(" citeseer ")
    assert a.name == b.name == "citeseer"
    assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_files_small_and_plain(name: str) -> None:
    ref = resources.files("ibp_graph") / "data" / f"{name}.npz"
    with ref.open("rb") as f:
        blob = f.read()
    assert len(blob) < 1_000_000
    readme = resources.files("ibp_graph") / "data" / "README.md"
    assert "kimiyoung/planetoid" in readme.read_text(encoding="utf-8")
    path = Path(str(ref))
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        assert "x_values" not in z.files  # binary: only the nonzero pattern is stored
    assert meta["license"].startswith("MIT")
    assert meta["source_repository"] == "https://github.com/kimiyoung/planetoid"
    assert meta["build_command"] and meta["build_steps"]


@needs_planetoid
@pytest.mark.parametrize(
    ("name", "loader"), [("cora", real_tables.load_cora), ("citeseer", real_tables.load_citeseer)]
)
def test_bundled_x_equals_real_tables(name: str, loader) -> None:
    _, want, _ = loader()
    got = load_dataset(name).x.numpy()
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@needs_planetoid
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_file_matches_a_rebuild_from_upstream(name: str) -> None:
    pytest.importorskip("torch_geometric", reason="the rebuild uses PyG's edge helper")
    from benchmarks import bundle_planetoid

    want = bundle_planetoid.planetoid_data(PLANETOID_DIR, name)
    got = load_dataset(name)
    for key, tensor in want.items():
        mine = getattr(got, key)
        assert mine.dtype == tensor.dtype, key
        assert mine.numpy().tobytes() == tensor.numpy().tobytes(), key


def test_bundled_root_override(tmp_path: Path) -> None:
    src = resources.files("ibp_graph") / "data" / "cora.npz"
    with src.open("rb") as f:
        (tmp_path / "cora.npz").write_bytes(f.read())
    a, b = load_dataset("cora", root=tmp_path), load_dataset("cora")
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert str(tmp_path) in a.source

    with pytest.raises(IBPInputError, match="citeseer.npz: no such file"):
        load_dataset("citeseer", root=tmp_path)

    (tmp_path / "cora.npz").write_bytes(b"not a zip file")
    with pytest.raises(IBPInputError, match="not a readable .npz"):
        load_dataset("cora", root=tmp_path)


def test_bundled_malformed_archive(tmp_path: Path) -> None:
    with np.load(Path(str(resources.files("ibp_graph") / "data" / "cora.npz"))) as z:
        arrays = {k: z[k] for k in z.files}
    bad = dict(arrays)
    bad["x_indices"] = arrays["x_indices"].copy()
    bad["x_indices"][0] = 5000
    np.savez(tmp_path / "cora.npz", **bad)
    with pytest.raises(IBPInputError, match="column id"):
        load_dataset("cora", root=tmp_path)
    del bad["test_mask"]
    np.savez(tmp_path / "cora.npz", **bad)
    with pytest.raises(IBPInputError, match="missing array.*test_mask"):
        load_dataset("cora", root=tmp_path)


# --------------------------------------------------------------------------------------------
# Names and OGB folders
# --------------------------------------------------------------------------------------------


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(IBPInputError) as info:
        load_dataset("pubmed")
    msg = str(info.value)
    assert "'pubmed'" in msg
    for name in ("cora", "citeseer", "ogbn-arxiv", "ogbn-products", "ogbn-papers100M"):
        assert name in msg
    assert set(known_names()) >= {"cora", "citeseer", "ogb:ogbn-arxiv", "ogbn-papers100M"}
    with pytest.raises(IBPInputError, match="unknown dataset"):
        load_dataset("ogb:ogbn-proteins")


def test_missing_ogb_folder_is_an_error_not_a_download(tmp_path: Path) -> None:
    folder = tmp_path / "ogbn_arxiv"
    with pytest.raises(IBPInputError) as info:
        load_dataset("ogb:ogbn-arxiv", root=tmp_path)
    assert f"{folder} does not exist" in str(info.value)
    assert "nothing is downloaded" in str(info.value)

    folder.mkdir()
    with pytest.raises(IBPInputError, match="RELEASE_v1.txt is missing") as info:
        load_dataset("ogbn-arxiv", root=tmp_path)
    assert str(folder / "RELEASE_v1.txt") in str(info.value)

    (folder / "RELEASE_v1.txt").write_text("")
    with pytest.raises(IBPInputError) as info:
        load_dataset("ogbn-arxiv", root=tmp_path)
    assert str(folder / "processed" / "data_processed") in str(info.value)
    assert str(folder / "raw" / "edge.csv.gz") in str(info.value)

    # ogbn-papers100M is stored binary: OGB needs raw/data.npz.
    papers = tmp_path / "ogbn_papers100M"
    papers.mkdir()
    (papers / "RELEASE_v1.txt").write_text("")
    with pytest.raises(IBPInputError, match=r"raw/data\.npz"):
        load_dataset("ogbn-papers100M", root=tmp_path)
    assert list(tmp_path.iterdir()) and not any(tmp_path.glob("*.zip"))


def test_ogb_without_the_ogb_package(tmp_path: Path, monkeypatch) -> None:
    _write_ogbn_arxiv(tmp_path, *_tiny_graph())
    monkeypatch.setitem(sys.modules, "ogb", None)
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", None)
    with pytest.raises(ImportError, match=r"'ogb' extra"):
        load_dataset("ogbn-arxiv", root=tmp_path)


# --------------------------------------------------------------------------------------------
# A tiny ogbn-arxiv in OGB's exact on-disk layout
# --------------------------------------------------------------------------------------------


def _tiny_graph():
    rng = np.random.default_rng(7)
    n, d, e = 12, 5, 30
    # Multiples of 1/8 print exactly, so the CSV round trip is exact in float32.
    x = (rng.integers(-16, 16, size=(n, d)) / 8).astype(np.float32)
    edges = rng.integers(0, n, size=(2, e)).astype(np.int64)
    y = rng.integers(0, 40, size=n).astype(np.int64)
    year = rng.integers(1990, 2021, size=n).astype(np.int64)
    perm = rng.permutation(n)
    split = {"train": np.sort(perm[:6]), "valid": np.sort(perm[6:9]), "test": np.sort(perm[9:])}
    return x, edges, y, year, split


def _write_ogbn_arxiv(root: Path, x, edges, y, year, split) -> Path:
    """``root/ogbn_arxiv`` in OGB's layout (`benchmarks.upstream_examples.write_ogbn`)."""
    from benchmarks.upstream_examples import Graph, write_ogbn

    codes = np.zeros(x.shape[0], dtype=np.int64)
    for code, part in ((1, "train"), (2, "valid"), (3, "test")):
        codes[split[part]] = code
    return write_ogbn(root, "ogbn-arxiv", Graph(x, y, edges, codes), year)


def test_ogb_layout_loads_through_ogb(tmp_path: Path) -> None:
    pytest.importorskip(
        "ogb.nodeproppred", reason="ogb (the 'ogb' extra) is not installed: OGB layout untested"
    )
    x, edges, y, year, split = _tiny_graph()
    folder = _write_ogbn_arxiv(tmp_path, x, edges, y, year, split)
    before = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")

    first = load_dataset("ogbn-arxiv", root=tmp_path)  # from raw/, writes processed/
    assert (folder / "processed" / "data_processed").is_file()
    second = load_dataset("ogb:ogbn-arxiv", root=tmp_path)  # through torch.load
    assert os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD") == before

    for ds in (first, second):
        assert ds.name == "ogbn-arxiv"
        assert ds.num_nodes == x.shape[0] and ds.num_classes == 40
        assert ds.x.dtype == torch.float32 and np.array_equal(ds.x.numpy(), x)
        assert ds.y.dtype == torch.int64 and np.array_equal(ds.y.numpy(), y)
        # ogbn-arxiv is stored directed and OGB does not add inverse edges.
        assert ds.edge_index.dtype == torch.int64
        assert np.array_equal(ds.edge_index.numpy(), edges)
        masks = (ds.train_mask, ds.val_mask, ds.test_mask)
        for mask, part in zip(masks, ("train", "valid", "test"), strict=True):
            assert mask.dtype == torch.bool
            assert np.array_equal(np.flatnonzero(mask.numpy()), split[part])
        assert "ogb" in ds.source


def test_ogb_layout_writer_matches_the_checks(tmp_path: Path) -> None:
    # Without ogb, still check that the layout written above passes our pre-download checks.
    from ibp_graph.datasets import _check_ogb_folder

    folder = _write_ogbn_arxiv(tmp_path, *_tiny_graph())
    _check_ogb_folder("ogbn-arxiv", folder)
    shutil.rmtree(folder / "raw")
    with pytest.raises(IBPInputError, match="neither"):
        _check_ogb_folder("ogbn-arxiv", folder)


@pytest.mark.parametrize("kind", ["as stored", "float64", "strided", "read-only"])
def test_ogb_arrays_are_taken_without_a_copy_where_they_are_right(tmp_path, monkeypatch, kind):
    """ogbn-papers100M's features are 57 GB: a needless copy would double the peak."""
    pytest.importorskip("ogb.nodeproppred", reason="ogb (the 'ogb' extra) is not installed")
    import ogb.nodeproppred

    x, edges, y, year, split = _tiny_graph()
    _write_ogbn_arxiv(tmp_path, x, edges, y, year, split)  # what the folder checks want
    feat, edge_index = x.copy(), edges.copy()
    if kind == "float64":
        feat = feat.astype(np.float64)
    elif kind == "strided":
        feat = np.asfortranarray(feat)
        edge_index = np.asfortranarray(edge_index)
    elif kind == "read-only":
        feat.flags.writeable = edge_index.flags.writeable = False

    class Stored:  # stands for NodePropPredDataset: what it holds after loading
        root = str(tmp_path / "ogbn_arxiv")
        num_classes = 40

        def __init__(self, name, root):
            pass

        def get_idx_split(self):
            return split

        def __getitem__(self, i):
            graph = {"node_feat": feat, "edge_index": edge_index, "num_nodes": x.shape[0]}
            return graph, y[:, None]

    monkeypatch.setattr(ogb.nodeproppred, "NodePropPredDataset", Stored)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning about non-writable arrays
        ds = load_dataset("ogbn-arxiv", root=tmp_path)
    assert np.array_equal(ds.x.numpy(), x) and np.array_equal(ds.edge_index.numpy(), edges)
    assert ds.x.dtype == torch.float32 and ds.x.is_contiguous()
    assert ds.edge_index.dtype == torch.int64 and ds.edge_index.is_contiguous()
    shared = kind == "as stored"
    assert np.shares_memory(ds.x.numpy(), feat) is shared
    assert np.shares_memory(ds.edge_index.numpy(), edge_index) is (kind in ("as stored", "float64"))
