"""PyG drop-in: what upstream example scripts use, and every mode PyG offers, by definition.

``examples/reddit.py`` (workers, ``del subgraph_loader.data.x``, layer-wise inference over
``batch.n_id``), ``examples/hierarchical_sampling.py`` (``num_sampled_nodes`` /
``num_sampled_edges`` for trimming) and ``examples/ogbn_train.py`` (``disjoint=True`` and
``batch.batch``) each rely on a handful of arguments, attributes and batch fields; each is
tested here, as are PyG's helpers that take a ``NeighborLoader`` (``BasicGNN.inference``,
``ZipLoader``, ``enable_cpu_affinity`` and the other worker helpers). PyG's own sampler
cannot run here (no pyg-lib or torch-sparse), so the modes are checked against their
definitions, and the fields against PyG's ``NodeLoader`` in ``test_loader_pyg.py``.
"""

from __future__ import annotations

import copy
import json
import logging
import multiprocessing
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric", reason="the pyg extra is not installed")

from conftest import homophilous_graph  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader  # noqa: E402
from torch_geometric.loader import NodeLoader, ZipLoader  # noqa: E402
from torch_geometric.loader.base import DataLoaderIterator  # noqa: E402
from torch_geometric.loader.utils import get_input_nodes  # noqa: E402
from torch_geometric.nn.models import GraphSAGE  # noqa: E402
from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler  # noqa: E402
from torch_geometric.sampler import NodeSamplerInput, SamplerOutput  # noqa: E402

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


def test_it_is_a_pyg_neighbor_loader_that_runs_our_methods(data) -> None:
    loader = NeighborLoader(data, [3], batch_size=64)
    assert isinstance(loader, PyGNeighborLoader) and isinstance(loader, NodeLoader)
    for name in ("__init__", "__call__", "__iter__", "__len__", "__repr__", "filter_fn"):
        owner = next(c for c in type(loader).__mro__ if name in vars(c))
        assert owner.__module__.startswith("ibp_graph"), (name, owner)
    assert "collate_fn" in vars(loader)  # ours, not NodeLoader's method
    # PyG's NodeLoader wraps torch's iterator to call filter_fn on every result; ours is torch's
    assert not isinstance(loader._get_iterator(), DataLoaderIterator)
    assert repr(loader).startswith("NeighborLoader(num_nodes=300, num_neighbors=[3]")


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"cache": True}, {"num_workers": 2}],
    ids=["plain", "cache", "workers"],
)
def test_basic_gnn_layerwise_inference_equals_the_full_graph_forward(data, kwargs) -> None:
    """PyG's BasicGNN.inference(loader) takes our loader, as reddit.py's layer-wise eval does."""
    torch.manual_seed(0)
    model = GraphSAGE(24, hidden_channels=16, out_channels=5, num_layers=2).eval()
    loader_kw = {k: v for k, v in kwargs.items() if k != "cache"}
    loader = NeighborLoader(data, [-1], batch_size=64, **loader_kw)
    out = model.inference(loader, cache=kwargs.get("cache", False))
    with torch.no_grad():
        torch.testing.assert_close(out, model(data.x, data.edge_index))


@pytest.mark.parametrize("filter_per_worker", [None, False])
def test_pygs_zip_loader_zips_our_loaders(data, filter_per_worker) -> None:
    a = NeighborLoader(data, [3], input_nodes=data.train_mask, seed=0)
    b = NeighborLoader(data, [2, 2], input_nodes=torch.arange(100, 200), seed=1)
    zipped = ZipLoader([a, b], batch_size=16, filter_per_worker=filter_per_worker)
    n = min(len(a.dataset), len(b.dataset))
    batches = list(zipped)
    assert len(batches) == len(zipped) == -(-n // 16)
    for i, pair in enumerate(batches):
        positions = torch.arange(i * 16, min(i * 16 + 16, n))
        for loader, batch in zip((a, b), pair, strict=True):
            assert isinstance(batch, Data) and batch.batch_size == positions.numel()
            assert torch.equal(batch.n_id[: batch.batch_size], loader.input_nodes[positions])
            assert torch.equal(batch.x, data.x[batch.n_id])
            check_edges_are_graph_edges(batch, data)


def _record_worker(folder):
    """A worker_init_fn writing the worker's CPU affinity and torch threads to a file."""
    import psutil

    def record(worker_id: int) -> None:
        state = {"cores": psutil.Process().cpu_affinity(), "threads": torch.get_num_threads()}
        (folder / f"worker{worker_id}.json").write_text(json.dumps(state))

    return record


def _worker_states(folder, n: int) -> list[dict]:
    return [json.loads((folder / f"worker{i}.json").read_text()) for i in range(n)]


def test_pygs_enable_cpu_affinity_pins_our_workers(data, tmp_path) -> None:
    import psutil

    cores = sorted(psutil.Process().cpu_affinity())[:2]
    if len(cores) < 2:
        pytest.skip("needs two CPU cores")
    kw = {"input_nodes": data.train_mask, "batch_size": 32, "shuffle": True, "seed": 3}
    want = list(NeighborLoader(data, [3, 2], **kw))
    loader = NeighborLoader(
        data, [3, 2], num_workers=2, worker_init_fn=_record_worker(tmp_path), **kw
    )
    with loader.enable_cpu_affinity(cores):
        got = list(loader)
    assert [s["cores"] for s in _worker_states(tmp_path, 2)] == [[c] for c in cores]
    for a, b in zip(want, got, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    with pytest.raises(ValueError, match="number of loader cores"):  # PyG's own check
        with loader.enable_cpu_affinity([0]):
            pass


def test_pygs_enable_multithreading_sets_our_workers_threads(data, tmp_path, monkeypatch):
    if torch.get_num_threads() < 2:
        pytest.skip("needs two torch threads")
    loader = NeighborLoader(
        data, [3], batch_size=100, num_workers=1, worker_init_fn=_record_worker(tmp_path)
    )
    if torch.multiprocessing.get_context()._name != "spawn":
        with pytest.raises(ValueError, match="'spawn' multiprocessing context"):  # PyG's check
            with loader.enable_multithreading(2):
                pass
    # PyG checks the default start method; the workers here fork, which is quicker
    spawn = multiprocessing.get_context("spawn")
    monkeypatch.setattr(torch.multiprocessing, "get_context", lambda method=None: spawn)
    with loader.enable_multithreading(2):
        assert len(list(loader)) == 3
    assert _worker_states(tmp_path, 1)[0]["threads"] == 2  # torch's workers start with 1


def test_pygs_enable_memory_log_logs_from_our_workers(data, tmp_path) -> None:
    log = tmp_path / "memory.log"
    handler = logging.FileHandler(log)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        loader = NeighborLoader(
            data, [3], batch_size=100, num_workers=2, worker_init_fn=_record_worker(tmp_path)
        )
        with loader.enable_memory_log():
            assert len(list(loader)) == 3
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
    text = log.read_text()
    assert "Worker 0 @ PID" in text and "Worker 1 @ PID" in text
    assert len(_worker_states(tmp_path, 2)) == 2  # the user's worker_init_fn still runs


def test_pygs_worker_helpers_without_workers_warn_once(data, fresh_warnings, monkeypatch):
    loader = NeighborLoader(data, [3], batch_size=100)
    with pytest.raises(ValueError, match="at least one worker"):  # PyG's own check
        with loader.enable_cpu_affinity():
            pass
    with pytest.warns(ArgumentIgnoredWarning, match="no worker processes run .num_workers=0"):
        with loader.enable_memory_log():
            assert len(list(loader)) == 3
    # num_workers > 0 where no workers start (a CUDA device): every helper warns, once
    monkeypatch.setattr(loading, "uses_workers", lambda device, num_workers: False)
    with pytest.warns(ArgumentIgnoredWarning, match="num_workers=2: workers are not used"):
        loader = NeighborLoader(data, [3], batch_size=100, num_workers=2)
    for helper in ("enable_cpu_affinity", "enable_multithreading", "enable_memory_log"):
        with pytest.warns(ArgumentIgnoredWarning, match=f"loader.{helper}.. has no effect") as rec:
            with getattr(loader, helper)():
                assert len(list(loader)) == 3
        assert rec[0].filename == __file__
        assert loader.worker_init_fn is None
        with warnings.catch_warnings():
            warnings.simplefilter("error", ArgumentIgnoredWarning)
            with getattr(loader, helper)():
                pass


def test_input_nodes_tuple_of_ints_is_an_index_as_in_pyg(data) -> None:
    ids = (5, 7, 9, 11)
    _, nodes, input_id = get_input_nodes(data, ids)  # PyG's reading of it
    assert input_id is None
    mixed = (5, np.int64(7), torch.tensor(9), 11)
    loader = NeighborLoader(data, [2], input_nodes=mixed, batch_size=2, seed=0)
    assert torch.equal(loader.input_nodes, nodes)
    as_index = NeighborLoader(data, [2], input_nodes=nodes, batch_size=2, seed=0)
    for a, b in zip(loader, as_index, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.input_id, b.input_id)
    assert torch.cat([b.input_id for b in loader]).tolist() == [0, 1, 2, 3]
    assert len(NeighborLoader(data, [2], input_nodes=())) == 0


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


def test_transform_sampler_output_gets_and_returns_pygs_sampler_output(data) -> None:
    """PyG-style callbacks: read metadata, build a new SamplerOutput, to_bidirectional()."""
    kw = {"input_nodes": data.train_mask, "batch_size": 40, "seed": 2}
    plain = list(NeighborLoader(data, [3, 3], **kw))
    seen = []

    def rebuild(o):
        assert type(o) is SamplerOutput
        seen.append(o.metadata)
        return SamplerOutput(  # no metadata: the batch keeps its input_id
            node=o.node,
            row=o.row,
            col=o.col,
            edge=o.edge,
            batch=o.batch,
            num_sampled_nodes=o.num_sampled_nodes,
            num_sampled_edges=o.num_sampled_edges,
        )

    rebuilt = list(NeighborLoader(data, [3, 3], transform_sampler_output=rebuild, **kw))
    for a, b, (input_id, seed_time) in zip(plain, rebuilt, seen, strict=True):
        assert sorted(a.keys()) == sorted(b.keys())
        for key in a.keys():  # noqa: SIM118 - Data.keys() is a method
            va, vb = a[key], b[key]
            assert torch.equal(va, vb) if isinstance(va, torch.Tensor) else va == vb
        assert torch.equal(input_id, a.input_id) and seed_time is None
    bidirectional = NeighborLoader(
        data, [3, 3], transform_sampler_output=lambda o: o.to_bidirectional(), **kw
    )
    for a, b in zip(plain, bidirectional, strict=True):
        assert set(pairs(b)) == set(pairs(a)) | {(t, s) for s, t in pairs(a)}
        check_edges_are_graph_edges(b, data, either_way=True)
        assert "num_sampled_nodes" not in b


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
