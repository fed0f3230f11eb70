"""The PyG drop-ins (NeighborLoader, IBPFeatureStore), feature sources and the prefetcher.

Checked on a small random graph and, when ../shared/datasets is there, on Cora (features
from benchmarks/real_tables.load_cora, edges and labels rebuilt from the Planetoid files as
torch_geometric.datasets.Planetoid does). GPU variants are marked ``gpu`` and skip without
CUDA.
"""

from __future__ import annotations

import collections
import gc
import importlib.util
import pickle
import re
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import homophilous_graph, run_docstring_example

torch_geometric = pytest.importorskip("torch_geometric")

from torch_geometric.data import Data, HeteroData  # noqa: E402
from torch_geometric.loader import NodeLoader  # noqa: E402
from torch_geometric.sampler import BaseSampler, SamplerOutput  # noqa: E402
from torch_geometric.testing.feature_store import MyFeatureStore  # noqa: E402

import ibp_graph  # noqa: E402
from ibp_graph.errors import IBPInputError  # noqa: E402
from ibp_graph.features import (  # noqa: E402
    FeatureSource,
    IBPFeatures,
    TensorFeatures,
    as_feature_source,
)
from ibp_graph.loaders import pyg as pyg_loaders  # noqa: E402
from ibp_graph.loaders.pyg import IBPFeatureStore, NeighborLoader  # noqa: E402
from ibp_graph.pinned import release_deferred  # noqa: E402
from ibp_graph.prefetch import LoaderStats, Prefetcher  # noqa: E402
from ibp_graph.sampler import NeighborSampler  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
no_gpu_here = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")

# --------------------------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------------------------

NUM_CLASSES = 4


def random_data(seed: int = 0, n: int = 300, e: int = 2400, d: int = 48) -> Data:
    """A random homophilous multigraph with sparse 0/1 features and learnable labels.

    Labels are a random linear function of the features; every edge's source has its
    target's label; the last 5 nodes are isolated. Extra node-, edge- and graph-level
    attributes check the slicing.
    """
    x, y, src, dst, gen = homophilous_graph(seed, n, e, d, NUM_CLASSES)
    data = Data(x=x, edge_index=torch.stack([src, dst]), y=y)
    data.train_mask = torch.rand(n, generator=gen) < 0.4
    data.edge_attr = torch.randn(e, 3, generator=gen)
    data.graph_attr = torch.randn(1, 7, generator=gen)
    data.name = "random"
    return data


def _planetoid_graph_edges(path: Path, num_nodes: int) -> torch.Tensor:
    """``ind.cora.graph`` (a pickled ``defaultdict(list)``) as PyG's coalesced edge_index."""

    class GraphUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            allowed = {
                ("collections", "defaultdict"): collections.defaultdict,
                ("__builtin__", "list"): list,
                ("builtins", "list"): list,
            }
            if (module, name) not in allowed:
                raise pickle.UnpicklingError(f"{path}: refusing global {module}.{name}")
            return allowed[(module, name)]

    with open(path, "rb") as f:
        graph = GraphUnpickler(f, encoding="latin1").load()
    row = [int(k) for k, vs in graph.items() for _ in vs]
    col = [int(v) for vs in graph.values() for v in vs]
    ei = torch.tensor([row, col], dtype=torch.int64)
    ei = ei[:, ei[0] != ei[1]]  # remove_self_loops
    key = torch.unique(ei[1] * num_nodes + ei[0])  # coalesce (sort_by_row=False)
    return torch.stack([key % num_nodes, key // num_nodes])


@pytest.fixture(scope="module")
def cora() -> Data:
    from benchmarks import real_tables as rt

    folder = rt.SHARED_DATASETS / "planetoid"
    needed = ["ind.cora.graph", "ind.cora.ally", "ind.cora.ty"] + [
        f"ind.cora.{p}" for p in ("x", "tx", "allx", "test.index")
    ]
    missing = [f for f in needed if not (folder / f).is_file()]
    if missing:
        pytest.skip(f"Cora not found under {folder} (missing {missing}); set IBP_GRAPH_DATASETS")
    _, x, _ = rt.load_cora()
    n = x.shape[0]
    labels = np.concatenate(
        [
            rt._load_planetoid_matrix(folder / "ind.cora.ally"),
            rt._load_planetoid_matrix(folder / "ind.cora.ty"),
        ]
    )
    y = torch.from_numpy(labels.argmax(1))
    test_index = torch.from_numpy(rt._load_test_index(folder / "ind.cora.test.index"))
    y[test_index] = y[test_index.sort().values]
    edge_index = _planetoid_graph_edges(folder / "ind.cora.graph", n)
    assert edge_index.size(1) == 10556  # Planetoid('Cora').edge_index
    data = Data(x=torch.from_numpy(x), edge_index=edge_index, y=y)
    data.train_mask = torch.zeros(n, dtype=torch.bool)
    data.train_mask[:140] = True
    return data


@pytest.fixture(scope="module")
def rand_data() -> Data:
    return random_data()


@pytest.fixture(scope="module")
def rand_table(rand_data, tmp_path_factory) -> ibp_graph.IBPTable:
    return ibp_graph.compress(
        rand_data.x, tmp_path_factory.mktemp("rand") / "x.ibp", progress=False
    )


@pytest.fixture(scope="module")
def cora_table(cora, tmp_path_factory) -> ibp_graph.IBPTable:
    return ibp_graph.compress(cora.x, tmp_path_factory.mktemp("cora") / "x.ibp", progress=False)


@pytest.fixture(params=["random", "cora"])
def graph(request) -> tuple[Data, ibp_graph.IBPTable]:
    if request.param == "random":
        return request.getfixturevalue("rand_data"), request.getfixturevalue("rand_table")
    return request.getfixturevalue("cora"), request.getfixturevalue("cora_table")


# --------------------------------------------------------------------------------------------
# Batch checks
# --------------------------------------------------------------------------------------------


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32) if t.dtype == torch.float32 else t


def check_batch(b: Data, data: Data, input_nodes: torch.Tensor, mask_input: bool, hops: int):
    """Every field of one batch against the original graph."""
    n_id, e_id = b.n_id.cpu(), b.e_id.cpu()
    bs = b.batch_size
    assert torch.equal(bits(b.x.cpu()), bits(data.x[n_id]))  # bit for bit
    assert torch.equal(b.y.cpu(), data.y[n_id])
    assert torch.equal(b.train_mask.cpu(), data.train_mask[n_id])
    ei = b.edge_index.cpu()
    assert ei.dtype == torch.int64 and ei.size(0) == 2
    if ei.numel():
        assert int(ei.min()) >= 0 and int(ei.max()) < n_id.numel()
    # Every sampled edge is the original edge e_id, between the right global nodes.
    assert torch.equal(data.edge_index[:, e_id], n_id[ei])
    if "edge_attr" in data:
        assert torch.equal(b.edge_attr.cpu(), data.edge_attr[e_id])
    # Seeds first, input_id as PyG defines it.
    input_id = b.input_id.cpu()
    assert input_id.numel() == bs
    expected_seeds = input_id if mask_input else input_nodes[input_id]
    assert torch.equal(n_id[:bs], expected_seeds)
    assert b.num_sampled_nodes[0] == bs and len(b.num_sampled_nodes) == hops + 1
    assert sum(b.num_sampled_nodes) == n_id.numel() == b.x.size(0)
    assert len(b.num_sampled_edges) == hops and sum(b.num_sampled_edges) == ei.size(1)
    assert n_id.unique().numel() == n_id.numel()


def same_batch(a: Data, b: Data) -> bool:
    if sorted(a.keys()) != sorted(b.keys()):
        return False
    for key in a.keys():
        va, vb = a[key], b[key]
        if isinstance(va, torch.Tensor):
            if not (isinstance(vb, torch.Tensor) and va.shape == vb.shape):
                return False
            if not torch.equal(bits(va.cpu()), bits(vb.cpu())):
                return False
        elif va != vb:
            return False
    return True


# --------------------------------------------------------------------------------------------
# NeighborLoader: batch contents
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ibp", [True, False], ids=["ibp", "data.x"])
@pytest.mark.parametrize("input_kind", ["mask", "index", "all"])
def test_batches_hold_the_original_rows_and_edges(graph, ibp, input_kind) -> None:
    data, table = graph
    n = data.num_nodes
    if input_kind == "mask":
        input_nodes = data.train_mask
        nodes = input_nodes.nonzero().view(-1)
    elif input_kind == "index":
        nodes = torch.randperm(n, generator=torch.Generator().manual_seed(1))[: n // 3]
        input_nodes = nodes
    else:
        input_nodes, nodes = None, torch.arange(n)
    loader = NeighborLoader(
        data,
        [6, 3],
        input_nodes=input_nodes,
        batch_size=97,
        shuffle=True,
        features=table if ibp else None,
        seed=3,
    )
    seen = []
    for b in loader:
        check_batch(b, data, nodes, input_kind == "mask", hops=2)
        seen.append(b.n_id[: b.batch_size])
        assert getattr(b, "name", None) == getattr(data, "name", None)
    # Every input node is a seed exactly once per epoch.
    assert torch.equal(torch.cat(seen).sort().values, nodes.sort().values)
    assert len(seen) == len(loader)


MODES = {
    "default": {},
    "replace": {"replace": True},
    "disjoint": {"disjoint": True},
    "bidirectional": {"subgraph_type": "bidirectional"},
    "induced": {"subgraph_type": "induced"},
    "disjoint-bidirectional": {"disjoint": True, "subgraph_type": "bidirectional"},
}


class OurSampler(BaseSampler):
    """Our sampler behind PyG's ``BaseSampler`` interface, seeded as a loader seeds batches.

    Its ``SamplerOutput`` is what PyG's ``NeighborSampler`` gives a ``NodeLoader``.
    """

    def __init__(self, sampler: NeighborSampler, seed_of) -> None:
        self.sampler, self.seed_of, self.calls = sampler, seed_of, 0

    def sample_from_nodes(self, inputs, **kwargs) -> SamplerOutput:
        self.sampler.manual_seed(self.seed_of(self.calls))
        self.calls += 1
        b = self.sampler.sample(inputs.node, inputs.input_id)
        return SamplerOutput(
            node=b.node,
            row=b.row,
            col=b.col,
            edge=b.edge,
            batch=b.batch,
            num_sampled_nodes=b.num_sampled_nodes,
            num_sampled_edges=b.num_sampled_edges,
            metadata=(inputs.input_id, inputs.time),
        )

    def sample_from_edges(self, inputs, neg_sampling=None):
        raise NotImplementedError


def pygs_node_loader(ours: NeighborLoader, **kwargs) -> NodeLoader:
    """PyG's ``NodeLoader`` around `OurSampler`, giving epoch 0 of ``ours`` the PyG way."""
    kw = {"replace": ours.replace, "disjoint": ours.disjoint}
    ref_sampler = NeighborSampler(
        ours.graph, list(ours.num_neighbors), subgraph_type=ours.subgraph_type, **kw
    )
    ref = OurSampler(ref_sampler, lambda b: ours._batch_seed(0, b))
    return NodeLoader(ours.data, ref, batch_size=ours.batch_size, **kwargs)


@pytest.mark.parametrize("mode", MODES)
def test_fields_are_exactly_pygs_node_loader_fields(rand_data, rand_table, mode) -> None:
    """PyG's own NodeLoader around the same sampler gives the same Data, key for key."""
    kw = MODES[mode]
    data = rand_data
    for input_nodes in (data.train_mask, torch.arange(10, 200, 3), None):
        ours = NeighborLoader(
            data, [4, 4], input_nodes=input_nodes, batch_size=50, features=rand_table, seed=5, **kw
        )
        theirs = pygs_node_loader(ours, input_nodes=input_nodes)
        pairs = list(zip(ours, theirs, strict=True))
        assert len(pairs) == len(theirs)
        for a, b in pairs:
            assert sorted(a.keys()) == sorted(b.keys()), (a, b)
            assert same_batch(a, b), (a, b)
        if kw.get("disjoint"):
            assert "batch" in pairs[0][0]
        if kw.get("subgraph_type", "directional") != "directional":
            assert "num_sampled_nodes" not in pairs[0][0]


def _rebuilt(out: SamplerOutput) -> SamplerOutput:
    """A new ``SamplerOutput`` with the fields and metadata of ``out``."""
    return SamplerOutput(
        node=out.node,
        row=out.row,
        col=out.col,
        edge=out.edge,
        batch=out.batch,
        num_sampled_nodes=out.num_sampled_nodes,
        num_sampled_edges=out.num_sampled_edges,
        metadata=out.metadata,
    )


def _first_hop_in_place(out: SamplerOutput) -> SamplerOutput:
    k = out.num_sampled_edges[0]
    out.row, out.col, out.edge = out.row[:k], out.col[:k], out.edge[:k]
    return out


def _no_edge_ids(out: SamplerOutput) -> SamplerOutput:
    out.edge = None
    return out


def _with_seed_time(out: SamplerOutput) -> SamplerOutput:
    input_id = out.metadata[0]
    out.metadata = (input_id, torch.full((input_id.numel(),), 7))
    return out


SAMPLER_OUTPUT_TRANSFORMS = {
    "rebuilt": _rebuilt,
    "in-place": _first_hop_in_place,
    "to_bidirectional": lambda out: out.to_bidirectional(),
    "keep-orig-edges": lambda out: out.to_bidirectional(keep_orig_edges=True),
    "no-edge-ids": _no_edge_ids,
    "seed-time": _with_seed_time,
}


@pytest.mark.parametrize("how", SAMPLER_OUTPUT_TRANSFORMS)
def test_transform_sampler_output_gives_pygs_node_loader_fields(rand_data, rand_table, how):
    """The same transform_sampler_output in PyG's NodeLoader and ours: the same Data."""
    fn = SAMPLER_OUTPUT_TRANSFORMS[how]
    mask = rand_data.train_mask
    for kw in ({}, {"disjoint": True}):
        ours = NeighborLoader(
            rand_data,
            [4, 3],
            input_nodes=mask,
            batch_size=50,
            features=rand_table,
            seed=5,
            transform_sampler_output=fn,
            **kw,
        )
        theirs = pygs_node_loader(ours, input_nodes=mask, transform_sampler_output=fn)
        for a, b in zip(ours, theirs, strict=True):
            assert same_batch(a, b), (a, b)
            orig = getattr(b, "_orig_edge_index", None)
            assert (orig is None) == (getattr(a, "_orig_edge_index", None) is None)
            assert orig is None or torch.equal(a._orig_edge_index, orig)
        assert ("e_id" in a) == (how != "no-edge-ids") == ("edge_attr" in a)
        assert ("seed_time" in a) == (how == "seed-time")


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda out: None, "must return a torch_geometric.sampler.SamplerOutput, got 'NoneType'"),
        (lambda out: Data(), "must return a torch_geometric.sampler.SamplerOutput, got 'Data'"),
        (
            lambda out: SamplerOutput(out.node, out.row, out.col, out.edge, metadata=("a", 1)),
            "SamplerOutput.metadata must be (input_id, seed_time) with input_id a tensor, as "
            "PyG's NodeLoader gives it, got (str, int)",
        ),
    ],
    ids=["none", "data", "metadata"],
)
def test_transform_sampler_output_must_return_a_sampler_output(rand_data, fn, match) -> None:
    loader = NeighborLoader(rand_data, [3], batch_size=64, transform_sampler_output=fn)
    with pytest.raises(IBPInputError, match=re.escape(match)):
        next(iter(loader))


def test_without_transform_sampler_output_nothing_is_converted(rand_data, monkeypatch) -> None:
    def fail(sampled):
        raise AssertionError("converted to a SamplerOutput without transform_sampler_output")

    monkeypatch.setattr(pyg_loaders, "_sampler_output", fail)
    assert len(list(NeighborLoader(rand_data, [3], batch_size=100))) == 3


def test_filter_fn_joins_a_sampler_output_as_pyg_and_passes_batches(rand_data, rand_table):
    mask = rand_data.train_mask
    ours = NeighborLoader(rand_data, [4, 3], input_nodes=mask, batch_size=50, features=rand_table)
    theirs = pygs_node_loader(ours, input_nodes=mask, filter_per_worker=False)
    n = len(ours.dataset)
    for b, batch in enumerate(ours):  # epoch 0, in order: PyG's sampler replays its draws
        out = theirs.collate_fn(list(range(b * 50, min(b * 50 + 50, n))))
        assert isinstance(out, SamplerOutput)
        joined = ours.filter_fn(out)
        assert same_batch(joined, theirs.filter_fn(out)) and same_batch(joined, batch)
        assert ours.filter_fn(batch) is batch  # collate_fn's batches are joined already
    with pytest.raises(TypeError, match="filter_fn takes a Data .* got 'int'"):
        ours.filter_fn(3)


def test_explicit_num_nodes_and_transform(rand_data) -> None:
    data = rand_data.clone()
    data.num_nodes = rand_data.num_nodes

    def transform(batch: Data) -> Data:
        batch.seen = True
        return batch

    b = next(iter(NeighborLoader(data, [3], batch_size=16, transform=transform, seed=0)))
    assert b.num_nodes == b.n_id.numel() and b.seen is True
    assert torch.equal(b.graph_attr, data.graph_attr)


def test_data_without_x_gives_batches_without_x(rand_data) -> None:
    data = Data(edge_index=rand_data.edge_index, y=rand_data.y, num_nodes=rand_data.num_nodes)
    loader = NeighborLoader(data, [3], batch_size=64, seed=0)
    b = next(iter(loader))
    assert "x" not in b and torch.equal(b.y, data.y[b.n_id])
    assert loader.stats.rows == 0


def test_empty_input_nodes_give_no_batches(rand_data) -> None:
    loader = NeighborLoader(rand_data, [3], input_nodes=torch.tensor([], dtype=torch.long))
    assert len(loader) == 0 and list(loader) == []


# --------------------------------------------------------------------------------------------
# Seeds, shuffle, drop_last, len
# --------------------------------------------------------------------------------------------


def epoch(loader: NeighborLoader) -> list[Data]:
    return list(loader)


def test_same_seed_same_batches_different_seed_different(rand_data, rand_table) -> None:
    def make(seed: int, prefetch: int = 2) -> NeighborLoader:
        return NeighborLoader(
            rand_data,
            [5, 5],
            batch_size=40,
            shuffle=True,
            features=rand_table,
            seed=seed,
            prefetch=prefetch,
        )

    a, b, c = make(7), make(7, prefetch=0), make(8)
    a1, a2 = epoch(a), epoch(a)
    b1, b2 = epoch(b), epoch(b)
    assert all(same_batch(x, y) for x, y in zip(a1 + a2, b1 + b2, strict=True))
    assert not all(same_batch(x, y) for x, y in zip(a1, epoch(c), strict=True))
    assert not all(same_batch(x, y) for x, y in zip(a1, a2, strict=True))  # reshuffled
    # An epoch cut short does not change the next one.
    d = make(7)
    next(iter(d))
    assert all(same_batch(x, y) for x, y in zip(a2, epoch(d), strict=True))


def test_seed_none_follows_torch_manual_seed(rand_data) -> None:
    torch.manual_seed(123)
    a = epoch(NeighborLoader(rand_data, [4], batch_size=60, shuffle=True))
    torch.manual_seed(123)
    b = epoch(NeighborLoader(rand_data, [4], batch_size=60, shuffle=True))
    assert all(same_batch(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_shuffle_drop_last_and_len_like_torch_dataloader(rand_data, shuffle, drop_last) -> None:
    nodes = torch.tensor([5, 17, 3, 99, 42, 8, 250, 1, 77, 64])
    loader = NeighborLoader(
        rand_data,
        [2],
        input_nodes=nodes,
        batch_size=3,
        shuffle=shuffle,
        drop_last=drop_last,
        seed=0,
    )
    reference = torch.utils.data.DataLoader(range(10), batch_size=3, drop_last=drop_last)
    assert len(loader) == len(reference) == (3 if drop_last else 4)
    batches = epoch(loader)
    assert [b.batch_size for b in batches] == [len(r) for r in reference]
    seeds = torch.cat([b.n_id[: b.batch_size] for b in batches])
    positions = torch.cat([b.input_id for b in batches])
    assert torch.equal(seeds, nodes[positions])
    if shuffle:
        assert not torch.equal(positions, torch.arange(positions.numel()))
        assert positions.unique().numel() == positions.numel()
    else:
        assert torch.equal(positions, torch.arange(9 if drop_last else 10))


# --------------------------------------------------------------------------------------------
# Statistics and progress
# --------------------------------------------------------------------------------------------


def test_stats_count_bytes_rows_and_ratio(rand_data, rand_table) -> None:
    loader = NeighborLoader(rand_data, [5, 5], batch_size=50, features=rand_table, seed=0)
    lengths = np.diff(rand_table.offsets) * rand_table.align
    for _ in range(2):  # reset every epoch
        stored = rows = 0
        for b in loader:
            stored += int(lengths[b.n_id.numpy()].sum())
            rows += b.n_id.numel()
        s = loader.stats
        assert s.batches == len(loader) and s.rows == rows
        assert s.pcie_bytes == stored > 0
        assert s.decoded_bytes == rows * 48 * 4
        assert s.ratio == pytest.approx(s.decoded_bytes / stored)
        assert s.sample_s > 0 and s.fetch_s > 0 and s.wait_s >= s.sample_s
        assert s.gbps > 0
    assert set(s.as_postfix()) == {"sample", "fetch", "wait", "GB/s", "ratio"}
    assert re.match(r"\d+ batches \| sample .* \(ratio \d+\.\d\dx\)", s.summary())


def test_stats_ratio_over_the_whole_table_is_the_tables(rand_data, rand_table) -> None:
    n = rand_data.num_nodes
    loader = NeighborLoader(rand_data, [0], batch_size=n, features=rand_table)
    (b,) = epoch(loader)
    assert b.n_id.numel() == n
    s = loader.stats
    stored = int(rand_table.offsets[-1]) * rand_table.align
    assert s.pcie_bytes == stored and s.ratio == rand_table.raw_bytes / stored
    # The table's ratio also counts the row section's padding to 8 bytes (< 8 bytes here).
    assert rand_table.stored_bytes - stored < 8
    assert s.ratio == pytest.approx(rand_table.ratio, rel=8 / rand_table.stored_bytes)
    assert IBPFeatures(rand_table).ratio == rand_table.ratio


def test_stats_raw_features_move_nothing(rand_data) -> None:
    loader = NeighborLoader(rand_data, [5], batch_size=100, seed=0)
    epoch(loader)
    assert loader.stats.pcie_bytes == 0 and loader.stats.ratio == 1.0
    assert loader.stats.rows > 0


def test_progress_bar_shows_the_stats(rand_data, rand_table, capsys) -> None:
    loader = NeighborLoader(
        rand_data, [3], batch_size=100, features=rand_table, seed=0, progress=True
    )
    epoch(loader)
    err = capsys.readouterr().err
    assert "NeighborLoader" in err and "ratio=" in err and f"{len(loader)}/{len(loader)}" in err


def test_loader_holds_at_most_depth_plus_one_batches(rand_data, rand_table) -> None:
    depth = 2
    loader = NeighborLoader(
        rand_data, [4], batch_size=25, features=rand_table, seed=0, prefetch=depth
    )
    refs: list[weakref.ref] = []
    for _ in range(2):
        for b in loader:
            refs.append(weakref.ref(b))
            del b  # batches hold no reference cycles: freed at once, no gc.collect()
            # Only the prefetched batches are alive (the consumer dropped its own).
            assert sum(r() is not None for r in refs) <= depth + 1
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
    assert len(refs) == 2 * len(loader)


# --------------------------------------------------------------------------------------------
# Training: a standard PyG loop, only the import changed
# --------------------------------------------------------------------------------------------


def make_model(kind: str, in_dim: int, classes: int) -> torch.nn.Module:
    from torch_geometric.nn.models import GAT, GraphSAGE

    if kind == "sage":
        return GraphSAGE(in_dim, 32, num_layers=2, out_channels=classes)
    return GAT(in_dim, 16, num_layers=2, out_channels=classes, heads=2)


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_pyg_training_loop_runs_and_loss_decreases(graph, kind) -> None:
    data, table = graph
    classes = int(data.y.max()) + 1
    torch.manual_seed(0)
    model = make_model(kind, data.x.size(1), classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    train = NeighborLoader(
        data, [10, 5], batch_size=64, shuffle=True, features=table, seed=0, input_nodes=None
    )
    probe = NeighborLoader(data, [10, 5], batch_size=256, features=table, seed=1)
    probe_batch = next(iter(probe))

    def probe_loss() -> float:
        model.eval()
        with torch.no_grad():
            out = model(probe_batch.x, probe_batch.edge_index)[: probe_batch.batch_size]
            return float(F.cross_entropy(out, probe_batch.y[: probe_batch.batch_size]))

    before = probe_loss()
    model.train()
    steps = 0
    while steps < 12:  # the unchanged PyG loop, over as many epochs as 12 steps take
        for batch in train:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])
            loss.backward()
            opt.step()
            steps += 1
            if steps == 12:
                break
    assert probe_loss() < 0.9 * before


def test_module_docstring_example_runs(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    run_docstring_example(pyg_loaders.__doc__, "\n\n`IBPFeatureStore`", "loaders/pyg.py docstring")
    assert "batches |" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# Bad input: every one raises at construction, naming what is wrong
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"input_time": torch.zeros(3)}, "input_time="),
        ({"time_attr": "time"}, "time_attr='time'"),
        ({"weight_attr": "w"}, "weight_attr='w'"),
        ({"input_nodes": ("paper", None)}, "input_nodes="),
        ({"input_nodes": (None, torch.arange(3))}, "node types belong to heterogeneous graphs"),
    ],
)
def test_options_that_would_change_the_batches_raise(rand_data, kwargs, match) -> None:
    with pytest.raises(NotImplementedError, match=re.escape(match)):
        NeighborLoader(rand_data, [3], **kwargs)


def test_hetero_and_store_inputs_are_not_supported(rand_data) -> None:
    hetero = HeteroData()
    hetero["paper"].x = torch.zeros(3, 2)
    with pytest.raises(NotImplementedError, match="HeteroData"):
        NeighborLoader(hetero, [3])
    with pytest.raises(NotImplementedError, match="FeatureStore, GraphStore"):
        NeighborLoader((MyFeatureStore(), object()), [3])
    with pytest.raises(IBPInputError, match="must be a torch_geometric.data.Data"):
        NeighborLoader({"x": rand_data.x}, [3])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_neighbors": {"a": [3]}}, "num_neighbors must be a list of ints, got 'dict'"),
        ({"num_neighbors": [3, "2"]}, "got 'str' at index 1"),
        ({"num_neighbors": [-2]}, "num_neighbors[0] must be >= -1"),
        ({"input_nodes": torch.tensor([1, 2, 300, 400])}, "input_nodes[2] = 300 is out of range"),
        ({"input_nodes": torch.tensor([-1])}, "input_nodes[0] = -1 is out of range"),
        (
            {"input_nodes": torch.ones(299, dtype=torch.bool)},
            "mask of 299 entries, the graph has 300",
        ),
        ({"input_nodes": torch.tensor([0.5])}, "integers or bools"),
        ({"input_nodes": (5, 1.5)}, "input_nodes is a tuple of node ids, got 'float' at index 1"),
        (
            {"input_nodes": (True, False)},
            "got 'bool' at index 0 (a mask must be a boolean tensor)",
        ),
        ({"input_nodes": (3, torch.arange(2))}, "got 'Tensor' at index 1"),
        ({"input_nodes": (5, 300)}, "input_nodes[1] = 300 is out of range"),
        ({"features": torch.zeros(299, 4)}, "features have 299 rows, the graph has 300 nodes"),
        ({"features": "x.ibp"}, "features must be an IBPTable, CudaIBPTable"),
        ({"batch_size": 0}, "batch_size must be a positive int"),
        ({"prefetch": -1}, "prefetch must be an int >= 0"),
        ({"seed": -3}, "seed must be an int >= 0"),
        ({"shuffle": "yes"}, "shuffle must be a bool"),
        ({"transform": 3}, "transform must be callable"),
        ({"transform_sampler_output": 3}, "transform_sampler_output must be callable"),
        ({"neighbor_sampler": object()}, "neighbor_sampler must be an ibp_graph NeighborSampler"),
        ({"subgraph_type": "both"}, "got 'both'"),
        (
            {"subgraph_type": 2},
            "subgraph_type must be one of 'directional', 'bidirectional', 'induced', got 'int'",
        ),
        ({"directed": "no"}, "directed must be a bool"),
        ({"filter_per_worker": 1}, "filter_per_worker must be a bool"),
        ({"input_id": torch.arange(3)}, "input_id has 3 entries, there are 300 input nodes"),
        ({"ddp_seed": 1.5}, "ddp_seed must be an int"),
        ({"ddp_seed": -1}, "ddp_seed must be an int >= 0, got -1"),
        ({"use_ddp": True}, "use_ddp=True shares the seeds between the ranks"),
        ({"generator": 5}, "generator must be a torch.Generator"),
    ],
)
def test_bad_arguments_raise_at_construction(rand_data, kwargs, match) -> None:
    kwargs = {"num_neighbors": [3], **kwargs}
    with pytest.raises(IBPInputError, match=re.escape(match)):
        NeighborLoader(rand_data, **kwargs)


def test_feature_row_count_mismatch_on_cora(cora, tmp_path) -> None:
    short = ibp_graph.compress(cora.x[:-1], tmp_path / "short.ibp", progress=False)
    with pytest.raises(IBPInputError, match="features have 2707 rows, the graph has 2708 nodes"):
        NeighborLoader(cora, [5], features=short)


@no_gpu_here
def test_cuda_device_without_a_gpu_is_a_clear_error(rand_data, rand_table) -> None:
    msg = "device='cuda' but torch.cuda.is_available() is False"
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        NeighborLoader(rand_data, [3], features=rand_table, device="cuda")
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        NeighborLoader(rand_data, [3], device="cuda")
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        as_feature_source(rand_table, "cuda")


def test_missing_torch_geometric_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)
    spec = importlib.util.spec_from_file_location("_pyg_without_pyg", REPO / "loaders" / "pyg.py")
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(ImportError, match=re.escape("pip install 'ibp-graph[pyg]'")):
        spec.loader.exec_module(module)


# --------------------------------------------------------------------------------------------
# Feature sources
# --------------------------------------------------------------------------------------------


def test_feature_sources_gather_and_count(rand_data, rand_table) -> None:
    ids = torch.tensor([4, 0, 4, 299, 17])
    x = rand_data.x
    ibp = as_feature_source(rand_table)
    raw = as_feature_source(None, data=rand_data)
    assert isinstance(ibp, IBPFeatures) and isinstance(raw, TensorFeatures)
    assert isinstance(ibp, FeatureSource) and isinstance(raw, FeatureSource)
    for src in (ibp, raw):
        assert torch.equal(src.gather(ids), x[ids])
        assert src.num_rows == len(src) == 300 and src.row_shape == (48,)
        assert src.dtype == torch.float32 and src.device == torch.device("cpu")
        assert src.row_bytes == 48 * 4
    lengths = np.diff(rand_table.offsets) * rand_table.align
    assert ibp.stored_bytes(ids) == int(lengths[ids.numpy()].sum())
    assert raw.stored_bytes(ids) == 0 and raw.ratio == 1.0
    assert ibp.ratio == rand_table.ratio
    assert as_feature_source(ibp) is ibp
    assert as_feature_source(x, "cpu").device == torch.device("cpu")


def test_as_feature_source_rejects_what_it_does_not_know(rand_table) -> None:
    with pytest.raises(IBPInputError, match="got 'list'"):
        as_feature_source([[0.0, 1.0]])
    with pytest.raises(IBPInputError, match="data has no 'x'"):
        as_feature_source(None, data=Data(edge_index=torch.zeros(2, 0, dtype=torch.long)))
    with pytest.raises(IBPInputError, match="device must be"):
        as_feature_source(rand_table, "not-a-device")


# --------------------------------------------------------------------------------------------
# Prefetcher and LoaderStats
# --------------------------------------------------------------------------------------------


class Box:
    """A weak-referenceable batch."""

    def __init__(self, i: int) -> None:
        self.i = i


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_prefetcher_runs_depth_ahead_in_order(depth) -> None:
    produced: list[int] = []
    total = 7

    def work():
        for i in range(total):
            produced.append(i)
            yield i

    stats = LoaderStats()
    pf = Prefetcher(work(), lambda i, stream: Box(i), depth=depth, stats=stats)
    got = []
    for box in pf:
        # When batch i arrives, batches i+1..i+depth have been prepared already.
        assert len(produced) == min(box.i + 1 + depth, total)
        assert pf.in_flight == min(depth, total - box.i - 1)
        got.append(box.i)
    assert got == list(range(total))
    assert pf.peak_in_flight == min(depth + 1, total)
    assert stats.batches == total and stats.sample_s > 0 and stats.fetch_s > 0


def test_prefetcher_calls_callable_work_and_does_not_leak() -> None:
    depth = 2
    refs: list[weakref.ref] = []
    for _ in range(2):  # two epochs
        pf = Prefetcher([(lambda i=i: i) for i in range(9)], lambda i, s: Box(i), depth=depth)
        for box in pf:
            refs.append(weakref.ref(box))
            del box
            assert sum(r() is not None for r in refs) <= depth + 1
            assert pf.in_flight <= depth
        assert pf.peak_in_flight <= depth + 1
    gc.collect()
    assert all(r() is None for r in refs) and len(refs) == 18


def test_prefetcher_close_drops_everything() -> None:
    closed = []

    def work():
        try:
            yield from range(10)
        finally:
            closed.append(True)

    pf = Prefetcher(work(), lambda i, s: Box(i), depth=3)
    assert next(pf).i == 0 and pf.in_flight == 3
    pf.close()
    assert pf.in_flight == 0 and closed == [True]
    with pytest.raises(StopIteration):
        next(pf)


def test_prefetcher_and_stats_reject_bad_arguments() -> None:
    with pytest.raises(IBPInputError, match="depth must be an int >= 0"):
        Prefetcher([], lambda i, s: i, depth=-1)
    with pytest.raises(IBPInputError, match="fetch_fn must be callable"):
        Prefetcher([], None)
    stages = "'sample', 'fetch', 'wait'"
    with pytest.raises(IBPInputError, match=f"stage must be one of {stages}, got 'decode'"):
        LoaderStats().add_seconds("decode", 1.0)


def test_loader_stats_arithmetic_and_reset() -> None:
    s = LoaderStats()
    assert s.gbps == 0.0 and s.ratio == 1.0
    s.add_seconds("fetch", 0.5)
    s.add_fetch(rows=10, stored=100, decoded=1000)
    s.batches = 2
    assert s.ratio == 10.0 and s.gbps == pytest.approx(2e-6) and s.pcie_gbps == pytest.approx(2e-7)
    assert s.as_postfix()["fetch"] == "250.0ms"
    assert "2 batches" in s.summary() and "10 rows" in s.summary()
    s.reset()
    assert s == LoaderStats() and s.pending == 0
    assert s.timeline is None  # off by default: add_span adds the seconds only
    s.add_span("sample", 1.0, 1.25)
    assert s.sample_s == 0.25 and s.timeline is None


@pytest.mark.parametrize("depth", [0, 2])
def test_a_kept_timeline_holds_each_batchs_stages_in_order(depth) -> None:
    stats = LoaderStats()
    stats.keep_timeline()
    total = 4
    pf = Prefetcher(range(total), lambda i, stream: Box(i), depth=depth, stats=stats)
    assert [box.i for box in pf] == list(range(total))
    timeline = stats.timeline
    stages = [stage for stage, _, _ in timeline]
    assert stages.count("sample") == stages.count("fetch") == stages.count("wait") == total
    for _, t0, t1 in timeline:  # host clocks on the CPU
        assert isinstance(t0, float) and t0 <= t1
    loader = [(t0, t1) for stage, t0, t1 in timeline if stage != "wait"]
    # sample, fetch, sample, ...: one after the other
    assert all(a[1] <= b[0] for a, b in zip(loader, loader[1:], strict=False))
    # Spans sum to the counters.
    for name in ("sample", "fetch", "wait"):
        spans = sum(t1 - t0 for stage, t0, t1 in timeline if stage == name)
        assert spans == pytest.approx(getattr(stats, f"{name}_s"))
    # The first batch is sampled and fetched inside the first next(), within its wait.
    (_, w0, w1) = next(t for t in timeline if t[0] == "wait")
    assert w0 <= loader[0][0] and loader[1][1] <= w1
    stats.reset()
    assert stats.timeline == [] and stats.batches == 0  # still kept, emptied


# --------------------------------------------------------------------------------------------
# IBPFeatureStore
# --------------------------------------------------------------------------------------------


class CountingSource(TensorFeatures):
    """TensorFeatures that counts its gathers."""

    calls = 0

    def gather(self, ids, *, stream=None):
        CountingSource.calls += 1
        return super().gather(ids, stream=stream)


def test_feature_store_matches_pygs_reference_store(rand_data, rand_table) -> None:
    x = rand_data.x
    y = rand_data.y.view(-1, 1)
    store = IBPFeatureStore({("paper", "x"): rand_table, ("paper", "y"): y})
    ref = MyFeatureStore()
    ref.put_tensor(x, group_name="paper", attr_name="x", index=None)
    ref.put_tensor(y, group_name="paper", attr_name="y", index=None)
    idx = torch.tensor([5, 0, 5, 123])
    for attr_name in ("x", "y"):
        want = ref.get_tensor(group_name="paper", attr_name=attr_name, index=idx)
        assert torch.equal(store[("paper", attr_name, idx)], want)
        assert torch.equal(
            store.get_tensor(group_name="paper", attr_name=attr_name, index=idx), want
        )
        assert torch.equal(store["paper"][attr_name][idx], want)  # AttrView, PyG's path
        assert torch.equal(store[("paper", attr_name, None)], ref[("paper", attr_name, None)])
    assert torch.equal(store["paper", "x", 7], x[7])
    assert torch.equal(store["paper", "x", slice(10, 20, 3)], x[10:20:3])
    mask = rand_data.train_mask
    assert torch.equal(store["paper", "x", mask], x[mask])
    assert store.get_tensor_size(group_name="paper", attr_name="x") == (300, 48)
    assert store.get_tensor_size(group_name="paper", attr_name="nope") is None
    assert sorted((a.group_name, a.attr_name) for a in store.get_all_tensor_attrs()) == [
        ("paper", "x"),
        ("paper", "y"),
    ]
    with pytest.raises(KeyError, match="attr_name='nope'"):
        store["paper", "nope", idx]
    with pytest.raises(IndexError, match=r"row index 300 \(at position 1\) is out of range"):
        store["paper", "x", torch.tensor([0, 300])]


def test_feature_store_default_key_and_read_only(rand_table, rand_data) -> None:
    store = IBPFeatureStore(rand_table)
    idx = torch.tensor([3, 1])
    assert torch.equal(
        store.get_tensor(group_name=None, attr_name="x", index=idx), rand_data.x[idx]
    )
    with pytest.raises(NotImplementedError, match="read-only"):
        store.put_tensor(torch.zeros(2, 48), group_name=None, attr_name="z", index=None)
    with pytest.raises(NotImplementedError, match="read-only"):
        store.remove_tensor(group_name=None, attr_name="x", index=None)
    with pytest.raises(IBPInputError, match="feature keys must be"):
        IBPFeatureStore({3: rand_table})


def test_feature_store_multi_get_fetches_once_per_source(rand_data) -> None:
    x, y = rand_data.x, rand_data.y.view(-1, 1).float()
    store = IBPFeatureStore({"x": CountingSource(x), "y": CountingSource(y)})
    a, b = torch.tensor([1, 2, 3]), torch.tensor([9, 1])
    CountingSource.calls = 0
    out = store.multi_get_tensor(
        [(None, "x", a), (None, "y", b), (None, "x", b), (None, "x", 4), (None, "y", None)]
    )
    assert CountingSource.calls == 2
    for got, want in zip(out, [x[a], y[b], x[b], x[4], y], strict=True):
        assert torch.equal(got, want)


# --------------------------------------------------------------------------------------------
# GPU (skipped without CUDA)
# --------------------------------------------------------------------------------------------


@gpu
@needs_gpu
@pytest.mark.parametrize("kind", ["ibp", "ibp-from-cpu-table", "pinned-raw", "tensor"])
def test_gpu_loader_batches_match_the_cpu_rows(rand_data, rand_table, kind) -> None:
    pytest.importorskip("cupy")
    from ibp_graph.cuda_table import PinnedRawTable

    if kind == "ibp":
        features = ibp_graph.open(rand_table.path, device="cuda")
    elif kind == "ibp-from-cpu-table":
        features = rand_table
    elif kind == "pinned-raw":
        features = PinnedRawTable(rand_data.x)
    else:
        features = rand_data.x
    loader = NeighborLoader(
        rand_data, [5, 3], batch_size=64, shuffle=True, features=features, device="cuda", seed=0
    )
    assert loader.device.type == "cuda" and loader.graph.device.type == "cuda"
    for _ in range(2):
        for b in loader:
            assert b.x.is_cuda and b.n_id.is_cuda and b.edge_index.is_cuda and b.y.is_cuda
            check_batch(b, rand_data, torch.arange(rand_data.num_nodes), False, hops=2)
        s = loader.stats
        assert s.batches == len(loader) and s.pending == 0 and s.fetch_s > 0
        if kind.startswith("ibp"):
            assert s.pcie_bytes > 0 and s.ratio > 1.0
        elif kind == "tensor":
            assert s.pcie_bytes == s.decoded_bytes  # CPU tensor copied to the GPU


@gpu
@needs_gpu
def test_gpu_orig_edge_index_is_recorded_on_the_consumer_stream(rand_data, monkeypatch) -> None:
    """``_orig_edge_index`` lives outside the Data store the prefetcher records."""
    recorded = []
    real = torch.Tensor.record_stream

    def spy(self, stream):
        recorded.append((self.data_ptr(), stream))
        return real(self, stream)

    monkeypatch.setattr(torch.Tensor, "record_stream", spy)
    loader = NeighborLoader(
        rand_data,
        [3, 2],
        batch_size=64,
        device="cuda",
        transform_sampler_output=lambda o: o.to_bidirectional(keep_orig_edges=True),
    )
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the consumer's stream, not the default one
        for batch in loader:
            assert batch._orig_edge_index.is_cuda
            assert (batch._orig_edge_index.data_ptr(), side) in recorded
            assert (batch.edge_index.data_ptr(), side) in recorded


@gpu
@needs_gpu
def test_gpu_prefetcher_orders_streams_and_does_not_leak() -> None:
    dev = torch.device("cuda")
    src = torch.arange(1 << 20, device=dev, dtype=torch.float32)
    depth = 2
    refs: list[weakref.ref] = []
    stats = LoaderStats()

    def fetch(i: int, stream) -> dict:
        assert torch.cuda.current_stream(dev) == stream
        torch.cuda._sleep(20_000_000)  # the write lands late: a consumer that did not wait fails
        return {"v": src * i, "i": i}

    for _ in range(2):
        stats.reset()
        pf = Prefetcher(range(6), fetch, depth=depth, device=dev, stats=stats)
        for item in pf:
            assert torch.equal(item["v"], src * item["i"])  # the consumer sees finished work
            refs.append(weakref.ref(item["v"]))
            del item
            gc.collect()
            assert pf.peak_in_flight <= depth + 1
        stats.resolve(block=True)
        assert stats.batches == 6 and stats.fetch_s > 0 and stats.pending == 0
    gc.collect()
    assert all(r() is None for r in refs)


# --------------------------------------------------------------------------------------------
# graph_memory: the graph on the device, or in pinned host memory read over UVA
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("graph_memory", "got"),
    [("gpu", "'gpu'"), ("UVA", "'UVA'"), ("", "''"), (None, "'NoneType'"), (1, "'int'")],
)
def test_unknown_graph_memory_names_the_argument_and_the_choices(
    rand_data, graph_memory, got
) -> None:
    msg = f"graph_memory must be one of 'device', 'uva', got {got}"
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        NeighborLoader(rand_data, [3], graph_memory=graph_memory)


@pytest.mark.parametrize("device", [None, "cpu"])
def test_uva_graph_needs_a_cuda_device(rand_data, device) -> None:
    msg = "so it needs device='cuda', got device='cpu'"
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        NeighborLoader(rand_data, [3], device=device, graph_memory="uva")


def test_device_graph_memory_is_the_default(rand_data) -> None:
    a = NeighborLoader(rand_data, [3], batch_size=64, shuffle=True, seed=0)
    b = NeighborLoader(rand_data, [3], batch_size=64, shuffle=True, seed=0, graph_memory="device")
    assert a.graph_memory == b.graph_memory == "device" and b.graph.device.type == "cpu"
    assert all(same_batch(x, y) for x, y in zip(epoch(a), epoch(b), strict=True))


@no_gpu_here
def test_uva_graph_without_a_gpu_is_a_clear_error(rand_data) -> None:
    from ibp_graph.errors import IBPDeviceError
    from ibp_graph.graph import CSRGraph
    from ibp_graph.loading import place_graph

    msg = "device='cuda' but torch.cuda.is_available() is False"
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        NeighborLoader(rand_data, [3], device="cuda", graph_memory="uva")
    graph = CSRGraph.from_data(rand_data)
    with pytest.raises(IBPDeviceError, match="CSRGraph.to_uva needs a CUDA GPU"):
        place_graph(graph, torch.device("cuda", 0), "uva")


def _memory_type(t: torch.Tensor) -> int:
    """CUDA's memory type of a tensor's storage (cupy.cuda.runtime.memoryType*)."""
    import cupy

    return cupy.cuda.runtime.pointerGetAttributes(t.data_ptr()).type


def test_sampler_backend_is_checked_at_construction(rand_data) -> None:
    from ibp_graph.errors import IBPDeviceError

    loader = NeighborLoader(rand_data, [3], batch_size=8, sampler_backend="torch")
    assert loader.sampler_backend == loader.node_sampler.backend == "torch"
    # The default on the CPU: torch ops (no sampler_backend, as an upstream script passes).
    default = NeighborLoader(rand_data, [3], batch_size=8, sampler_backend=None)
    assert default.sampler_backend == default.node_sampler.backend == "torch"
    assert NeighborLoader(rand_data, [3], batch_size=8).sampler_backend == "torch"
    with pytest.raises(IBPInputError, match="backend must be one of 'torch', 'kernel', got 'cuda'"):
        NeighborLoader(rand_data, [3], sampler_backend="cuda")
    with pytest.raises(IBPDeviceError, match="backend='kernel' .* needs a graph on a CUDA"):
        NeighborLoader(rand_data, [3], sampler_backend="kernel")


def test_sampler_backend_none_is_decided_by_where_the_graph_is(rand_data, monkeypatch) -> None:
    from ibp_graph import loading

    calls = []

    def says_torch(device: torch.device) -> str:
        calls.append(device)
        return "torch"

    monkeypatch.setattr(loading, "default_sampler_backend", says_torch)
    loader = NeighborLoader(rand_data, [3], batch_size=8)
    assert calls == [loader.graph.device] and loader.sampler_backend == "torch"
    NeighborLoader(rand_data, [3], batch_size=8, sampler_backend="torch")
    assert len(calls) == 1  # an explicit value is used as it is


def test_a_given_neighbor_sampler_keeps_its_backend(rand_data, monkeypatch) -> None:
    from ibp_graph import loading
    from ibp_graph.graph import CSRGraph
    from ibp_graph.loading import ArgumentIgnoredWarning

    monkeypatch.setattr(loading, "_WARNED", set())
    mine = NeighborSampler(CSRGraph.from_data(rand_data), [3], backend="torch")
    loader = NeighborLoader(rand_data, [3], batch_size=8, neighbor_sampler=mine)
    assert loader.node_sampler is mine and loader.sampler_backend == "torch"
    with pytest.warns(ArgumentIgnoredWarning, match="sampler_backend='kernel': neighbor_sampler"):
        loader = NeighborLoader(
            rand_data, [3], batch_size=8, neighbor_sampler=mine, sampler_backend="kernel"
        )
    assert loader.node_sampler is mine and loader.sampler_backend == "torch"


@gpu
@needs_gpu
@pytest.mark.parametrize("graph_memory", ["device", "uva"])
def test_kernel_sampler_backend_batches_are_valid(rand_data, rand_table, graph_memory) -> None:
    features = ibp_graph.open(rand_table.path, device="cuda")
    kwargs = {"batch_size": 64, "shuffle": True, "features": features, "seed": 3}
    kwargs |= {"device": "cuda", "graph_memory": graph_memory, "sampler_backend": "kernel"}
    loader = NeighborLoader(rand_data, [5, 3], **kwargs)
    assert loader.node_sampler.backend == "kernel"
    first = epoch(loader)
    train = torch.arange(rand_data.num_nodes)
    for b in first:
        check_batch(b, rand_data, train, mask_input=False, hops=2)
    again = NeighborLoader(rand_data, [5, 3], **kwargs)
    for x, y in zip(first, epoch(again), strict=True):
        assert same_batch(x, y)  # reproducible for a seed


@gpu
@needs_gpu
@pytest.mark.parametrize("graph_memory", ["device", "uva"])
def test_a_cuda_loader_samples_with_the_kernels_by_default(
    rand_data, rand_table, graph_memory
) -> None:
    pytest.importorskip("cupy")
    features = ibp_graph.open(rand_table.path, device="cuda")
    kwargs = {"batch_size": 64, "shuffle": True, "features": features, "seed": 3}
    kwargs |= {"device": "cuda", "graph_memory": graph_memory}
    loader = NeighborLoader(rand_data, [5, 3], **kwargs)  # no sampler_backend, as upstream
    assert loader.sampler_backend == loader.node_sampler.backend == "kernel"
    # replayed from CUDA graphs, 8 batches a call
    assert loader.sampler_cuda_graph and loader.sample_group == 8
    epochs = [epoch(loader), epoch(loader)]  # the second replays the shapes captured
    train = torch.arange(rand_data.num_nodes)
    for b in epochs[0]:
        check_batch(b, rand_data, train, mask_input=False, hops=2)
    assert loader.node_sampler._replay.graphs  # captured where the epoch started
    chosen = NeighborLoader(rand_data, [5, 3], sampler_backend="kernel", **kwargs)
    for x, y in zip(epochs[0], epoch(chosen), strict=True):
        assert same_batch(x, y)  # the default is the kernel backend, draw for draw
    eager = NeighborLoader(rand_data, [5, 3], sampler_cuda_graph=False, sample_group=1, **kwargs)
    assert not eager.sampler_cuda_graph and eager.sample_group == 1
    for got in epochs:  # replayed groups are the eager batches one by one
        for x, y in zip(got, epoch(eager), strict=True):
            assert same_batch(x, y)


@gpu
@needs_gpu
@pytest.mark.parametrize("backend", [None, "torch"])  # None: the kernels, the default
def test_uva_graph_keeps_its_edges_in_host_memory_and_gives_the_same_batches(
    rand_data, rand_table, backend
) -> None:
    cupy = pytest.importorskip("cupy")
    from ibp_graph.graph import CSRGraph
    from ibp_graph.loading import place_graph

    host, device = cupy.cuda.runtime.memoryTypeHost, cupy.cuda.runtime.memoryTypeDevice
    features = ibp_graph.open(rand_table.path, device="cuda")
    kwargs = {"batch_size": 64, "shuffle": True, "features": features, "seed": 0}
    kwargs["sampler_backend"] = backend
    on_device = NeighborLoader(rand_data, [5, 3], device="cuda", **kwargs)
    uva = NeighborLoader(rand_data, [5, 3], device="cuda", graph_memory="uva", **kwargs)
    assert uva.graph_memory == "uva"
    for name in ("indptr", "indices", "edge_ids"):
        t, d = getattr(uva.graph, name), getattr(on_device.graph, name)
        assert t.is_cuda and t.device == d.device
        # indptr, read once a sampled node, goes to GPU memory (to_uva's default)
        assert _memory_type(t) == (device if name == "indptr" else host)
        assert _memory_type(d) == device
        assert torch.equal(t, d)
    for _ in range(2):  # two epochs: the same draws, epoch by epoch
        a, b = epoch(on_device), epoch(uva)
        assert len(a) == len(b) == len(uva)
        for x, y in zip(a, b, strict=True):
            assert y.n_id.is_cuda and y.edge_index.is_cuda and y.x.is_cuda
            assert torch.equal(x.n_id, y.n_id) and torch.equal(x.edge_index, y.edge_index)
            assert torch.equal(bits(x.x), bits(y.x)) and same_batch(x, y)

    # Placing the graph over UVA takes GPU memory for indptr alone; copying it takes at least
    # its size.
    graph = CSRGraph.from_data(rand_data)
    nbytes = sum(
        t.numel() * t.element_size() for t in (graph.indptr, graph.indices, graph.edge_ids)
    )
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.synchronize()
    # memory_allocated falls when the collector frees a CUDA tensor held by a reference
    # cycle, or when pinning releases the deferred buffers (and what they hold, such as a
    # dropped table's device metadata): do both first, so that only the placements below
    # move it.
    gc.collect()
    release_deferred()
    before = torch.cuda.memory_allocated(dev)
    mapped = place_graph(graph, dev, "uva")
    indptr_bytes = graph.indptr.numel() * graph.indptr.element_size()
    grew = torch.cuda.memory_allocated(dev) - before  # in blocks of 512 bytes
    assert indptr_bytes <= grew < indptr_bytes + 512 and grew < nbytes
    copied = place_graph(graph, dev, "device")
    assert torch.cuda.memory_allocated(dev) - before >= nbytes
    assert mapped.indptr.is_cuda and copied.indptr.is_cuda
