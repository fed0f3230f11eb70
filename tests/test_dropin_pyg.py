"""PyG drop-in: what upstream example scripts use, and every mode PyG offers, by definition.

``examples/reddit.py`` (workers, ``del subgraph_loader.data.x``, layer-wise inference over
``batch.n_id``), ``examples/hierarchical_sampling.py`` (``num_sampled_nodes`` /
``num_sampled_edges`` for trimming) and ``examples/ogbn_train.py`` (``disjoint=True`` and
``batch.batch``) each rely on a handful of arguments, attributes and batch fields; each is
tested here. PyG's own sampler cannot run here (no pyg-lib or torch-sparse), so the modes
are checked against their definitions, and the fields against PyG's ``NodeLoader`` in
``test_loader_pyg.py``.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

pytest.importorskip("torch_geometric", reason="the pyg extra is not installed")

from conftest import homophilous_graph  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.nn.models import GraphSAGE  # noqa: E402
from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler  # noqa: E402
from torch_geometric.sampler import NodeSamplerInput  # noqa: E402

import ibp_graph  # noqa: E402
from ibp_graph import loading  # noqa: E402
from ibp_graph.loaders.pyg import NeighborLoader  # noqa: E402
from ibp_graph.loading import ArgumentIgnoredWarning  # noqa: E402
from ibp_graph.sampler import NeighborSampler  # noqa: E402

N = 300


@pytest.fixture(scope="module")
def data() -> Data:
    x, y, src, dst, gen = homophilous_graph(11, N, 3000, 24, 5)
    out = Data(x=x, y=y, edge_index=torch.stack([src, dst]))
    out.train_mask = torch.rand(N, generator=gen) < 0.5
    out.edge_attr = torch.randn(src.numel(), 2, generator=gen)
    return out


@pytest.fixture(scope="module")
def table(data, tmp_path_factory) -> ibp_graph.IBPTable:
    return ibp_graph.compress(data.x, tmp_path_factory.mktemp("t") / "x.ibp", progress=False)


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(loading, "_WARNED", set())


def pairs(batch: Data) -> list[tuple[int, int]]:
    """The batch's edges as (global source, global target)."""
    g = batch.n_id[batch.edge_index]
    return list(zip(g[0].tolist(), g[1].tolist(), strict=True))


def check_edges_are_graph_edges(batch: Data, data: Data, *, either_way: bool = False) -> None:
    src, dst = data.edge_index[:, batch.e_id]
    gsrc, gdst = batch.n_id[batch.edge_index]
    fwd = (src == gsrc) & (dst == gdst)
    if either_way:
        fwd |= (src == gdst) & (dst == gsrc)
    assert bool(fwd.all())


# --------------------------------------------------------------------------------------------
# The loader's surface: a DataLoader, PyG's attributes
# --------------------------------------------------------------------------------------------


def test_loader_attributes_scripts_read(data) -> None:
    loader = NeighborLoader(
        data, [4, 3], input_nodes=data.train_mask, batch_size=32, shuffle=True, seed=0
    )
    n = int(data.train_mask.sum())
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert loader.data is data
    assert len(loader.dataset) == n and loader.dataset == range(n)
    assert len(loader) == -(-n // 32) and loader.batch_size == 32
    assert isinstance(loader.node_sampler, NeighborSampler)
    assert loader.num_neighbors == [4, 3]
    assert isinstance(loader.input_data, NodeSamplerInput)
    assert torch.equal(loader.input_data.node, data.train_mask.nonzero().view(-1))
    sub = loader.input_data[torch.tensor([0, 2])]
    assert torch.equal(sub.node, loader.input_data.node[[0, 2]])
    batch = loader.collate_fn([0, 2])  # PyG's collate_fn: positions -> a batch
    assert isinstance(batch, Data) and batch.batch_size == 2
    assert torch.equal(batch.n_id[:2], sub.node) and torch.equal(batch.input_id, sub.input_id)
    assert batch.num_sampled_nodes[0] == batch.batch_size  # ogbn_train.py's test() reads it
    again = loader(torch.tensor([0, 2]))  # PyG's __call__, with a tensor of positions
    assert torch.equal(again.n_id[:2], sub.node)


def test_explicit_input_id(data) -> None:
    ids = torch.arange(100, 110)
    loader = NeighborLoader(data, [2], input_nodes=torch.arange(10), input_id=ids, batch_size=4)
    assert torch.cat([b.input_id for b in loader]).tolist() == ids.tolist()


def test_reddit_subgraph_loader_after_deleting_x_and_y(data) -> None:
    """reddit.py: workers, attributes deleted and added after construction, layer-wise."""
    kwargs = {"batch_size": 64, "num_workers": 2, "persistent_workers": True}
    loader = NeighborLoader(
        copy.copy(data), input_nodes=None, num_neighbors=[-1], shuffle=False, **kwargs
    )
    del loader.data.x, loader.data.y
    loader.data.num_nodes = data.num_nodes
    loader.data.n_id = torch.arange(data.num_nodes)
    assert "x" in data and "y" in data  # the user's data is untouched
    for _ in range(2):  # layer by layer, as SAGE.inference does
        seen = []
        for batch in loader:
            assert "x" not in batch and "y" not in batch
            assert batch.num_nodes == batch.n_id.numel()
            seen.append(batch.n_id[: batch.batch_size])
            check_edges_are_graph_edges(batch, data)
        assert torch.equal(torch.cat(seen), torch.arange(N))
    assert len(loader.dataset) == N


def test_replaced_attributes_are_read_when_an_epoch_starts(data, table) -> None:
    mine = copy.copy(data)
    loader = NeighborLoader(mine, [3], batch_size=50, seed=1)
    first = next(iter(loader))
    mine.y = data.y + 100
    mine.x = data.x * 2
    mine.mark = torch.arange(N) * 10  # a new node-level attribute
    batch = next(iter(loader))
    assert torch.equal(batch.y, data.y[batch.n_id] + 100)
    assert torch.equal(batch.x, data.x[batch.n_id] * 2)
    assert torch.equal(batch.mark, batch.n_id * 10)
    assert torch.equal(first.y, data.y[first.n_id])
    # explicit features stay what they were: data.x is not read
    loader = NeighborLoader(mine, [3], batch_size=50, seed=1, features=table)
    del mine.x
    batch = next(iter(loader))
    assert torch.equal(batch.x, data.x[batch.n_id])


def test_hierarchical_sampling_trim_gives_the_same_seed_outputs(data) -> None:
    """hierarchical_sampling.py: GraphSAGE trimmed by num_sampled_nodes/edges per hop."""
    torch.manual_seed(0)
    model = GraphSAGE(24, hidden_channels=16, out_channels=5, num_layers=3).eval()
    loader = NeighborLoader(data, [5, 4, 3], input_nodes=data.train_mask, batch_size=40, seed=3)
    for batch in loader:
        full = model(batch.x, batch.edge_index)[: batch.batch_size]
        trim = model(
            batch.x,
            batch.edge_index,
            num_sampled_nodes_per_hop=batch.num_sampled_nodes,
            num_sampled_edges_per_hop=batch.num_sampled_edges,
        )[: batch.batch_size]
        torch.testing.assert_close(full, trim)


# --------------------------------------------------------------------------------------------
# Modes PyG has, by definition
# --------------------------------------------------------------------------------------------


def test_disjoint_gives_each_seed_its_own_tree(data) -> None:
    loader = NeighborLoader(data, [6, 6], batch_size=30, disjoint=True, seed=2)
    shared = 0
    for batch in loader:
        tree, bs = batch.batch, batch.batch_size
        assert tree.numel() == batch.n_id.numel()
        assert torch.equal(tree[:bs], torch.arange(bs))
        assert bool((tree[batch.edge_index[0]] == tree[batch.edge_index[1]]).all())
        check_edges_are_graph_edges(batch, data)
        for s in range(bs):
            nodes = batch.n_id[tree == s]
            assert nodes.unique().numel() == nodes.numel()  # no node twice within a tree
        shared += batch.n_id.numel() - batch.n_id.unique().numel()
    assert shared > 0  # nodes reached from several seeds appear once per tree


def test_bidirectional_is_the_directional_sample_plus_its_reverses(data) -> None:
    kw = {"input_nodes": data.train_mask, "batch_size": 25, "seed": 4}
    directional = list(NeighborLoader(data, [4, 3], **kw))
    bidirectional = list(NeighborLoader(data, [4, 3], subgraph_type="bidirectional", **kw))
    for a, b in zip(directional, bidirectional, strict=True):
        assert torch.equal(a.n_id, b.n_id)
        want = set(pairs(a)) | {(t, s) for s, t in pairs(a)}
        got = pairs(b)
        assert len(got) == len(set(got)) and set(got) == want
        check_edges_are_graph_edges(b, data, either_way=True)
        assert "num_sampled_nodes" not in b and "num_sampled_edges" not in b


@pytest.mark.parametrize("how", [{"subgraph_type": "induced"}, {"directed": False}])
def test_induced_holds_every_graph_edge_between_sampled_nodes(data, how) -> None:
    kw = {"input_nodes": data.train_mask, "batch_size": 25, "seed": 4}
    directional = list(NeighborLoader(data, [3, 2], **kw))
    induced = list(NeighborLoader(data, [3, 2], **how, **kw))
    src, dst = data.edge_index
    for a, b in zip(directional, induced, strict=True):
        assert torch.equal(a.n_id, b.n_id)
        inside = torch.zeros(N, dtype=torch.bool)
        inside[b.n_id] = True
        want = (inside[src] & inside[dst]).nonzero().view(-1)
        assert sorted(b.e_id.tolist()) == want.tolist()
        check_edges_are_graph_edges(b, data)
        assert torch.equal(b.edge_attr, data.edge_attr[b.e_id])


def test_replace_draws_exactly_fanout_neighbors(data) -> None:
    deg = torch.bincount(data.edge_index[1], minlength=N)
    fanout = 12  # more than most nodes have: repeats are certain
    loader = NeighborLoader(data, [fanout], batch_size=N, replace=True, seed=6)
    batch = next(iter(loader))
    targets = batch.n_id[batch.edge_index[1]]
    per_target = torch.bincount(targets, minlength=N)
    assert torch.equal(per_target, torch.where(deg > 0, fanout, 0))
    check_edges_are_graph_edges(batch, data)
    assert batch.e_id.unique().numel() < batch.e_id.numel()  # some edges drawn twice


def test_use_ddp_on_a_world_of_one_is_the_plain_loader(data, tmp_path) -> None:
    dist = torch.distributed
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed is unavailable or already initialised")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 's'}", rank=0, world_size=1)
    try:
        kw = {"input_nodes": data.train_mask, "batch_size": 30, "shuffle": True, "seed": 8}
        plain = list(NeighborLoader(data, [3, 3], **kw))
        ddp = list(NeighborLoader(data, [3, 3], use_ddp=True, ddp_seed=8, **kw))
    finally:
        dist.destroy_process_group()
    assert len(plain) == len(ddp)
    for a, b in zip(plain, ddp, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": 2},
        {"num_workers": 2, "persistent_workers": True, "disjoint": True},
        {"num_workers": 1, "filter_per_worker": False, "subgraph_type": "bidirectional"},
        # the default start method on Linux from Python 3.14: the loader and its memory-mapped
        # table are pickled into the worker instead of shared by fork
        {"num_workers": 1, "multiprocessing_context": "forkserver"},
    ],
    ids=["workers", "persistent-disjoint", "main-join-bidirectional", "forkserver"],
)
def test_workers_give_the_same_batches_with_an_ibp_table(data, table, kwargs) -> None:
    kw = {"input_nodes": data.train_mask, "batch_size": 32, "shuffle": True, "seed": 3}
    mode = {k: v for k, v in kwargs.items() if k in ("disjoint", "subgraph_type")}
    ref = NeighborLoader(data, [5, 3], features=table, **mode, **kw)
    loader = NeighborLoader(data, [5, 3], features=table, **kwargs, **kw)
    for _ in range(2):
        want, got = list(ref), list(loader)
        assert len(want) == len(got) == len(loader)
        for a, b in zip(want, got, strict=True):
            assert sorted(a.keys()) == sorted(b.keys())
            for key in a.keys():  # noqa: SIM118 - Data.keys() is a method
                va, vb = a[key], b[key]
                assert torch.equal(va, vb) if isinstance(va, torch.Tensor) else va == vb
        assert loader.stats.pcie_bytes == ref.stats.pcie_bytes > 0


# --------------------------------------------------------------------------------------------
# Other PyG arguments
# --------------------------------------------------------------------------------------------


def test_transform_sampler_output_sees_the_sampled_subgraph(data) -> None:
    seen = []

    def keep_first_hop(out):
        seen.append(out.num_sampled_edges)
        k = out.num_sampled_edges[0]
        out.row, out.col, out.edge = out.row[:k], out.col[:k], out.edge[:k]
        return out

    loader = NeighborLoader(
        data, [3, 3], batch_size=64, prefetch=0, transform_sampler_output=keep_first_hop
    )
    for batch in loader:
        assert batch.edge_index.size(1) == seen[-1][0]


def test_neighbor_samplers_ours_or_pygs(data, fresh_warnings) -> None:
    ours = NeighborLoader(data, [2], batch_size=64, seed=1)
    mine = NeighborSampler(ours.graph, [2])
    loader = NeighborLoader(data, [9], batch_size=64, seed=1, neighbor_sampler=mine)
    assert loader.node_sampler is mine
    for a, b in zip(ours, loader, strict=True):
        assert torch.equal(a.edge_index, b.edge_index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's own warning about pyg-lib
        theirs = PyGNeighborSampler(data, [2, 2], subgraph_type="bidirectional")
    with pytest.warns(ArgumentIgnoredWarning, match="neighbor_sampler='NeighborSampler'") as rec:
        loader = NeighborLoader(data, [9], batch_size=64, neighbor_sampler=theirs)
    assert rec[0].filename == __file__
    assert loader.node_sampler.num_neighbors == (2, 2)
    assert loader.node_sampler.subgraph_type == "bidirectional"


def test_arguments_that_cannot_apply_warn_once_and_run(data, fresh_warnings) -> None:
    with pytest.warns(ArgumentIgnoredWarning) as rec:
        loader = NeighborLoader(
            data, [2], batch_size=100, temporal_strategy="last", custom_cls=Data, is_sorted=True
        )
    msgs = sorted(str(w.message) for w in rec)
    assert msgs[0].startswith("custom_cls=") and "batches are torch_geometric.data.Data" in msgs[0]
    assert msgs[1] == "temporal_strategy='last': it applies to temporal sampling only"
    assert all(w.filename == __file__ for w in rec)
    assert len(list(loader)) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", ArgumentIgnoredWarning)
        NeighborLoader(data, [2], temporal_strategy="last")  # shown once per process
