"""The DGL drop-ins (DataLoader, NeighborSampler) and the dgl.graphbolt placeholder.

Skipped as a whole when ``ibp_graph.loaders.dgl`` cannot be imported (DGL, the ``dgl`` extra,
not installed). Checked on a small random graph and on Cora (``ibp_graph.datasets``); the
blocks are compared with the ones DGL's own loader builds where they must be equal (all
neighbors). GPU variants are marked ``gpu`` and skip without CUDA.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import homophilous_graph, run_docstring_example

try:
    from ibp_graph.loaders import dgl as dgl_loaders
except ImportError as exc:  # DGL (the 'dgl' extra) not installed, or not importable
    pytest.skip(f"DGL cannot be imported: {exc}", allow_module_level=True)

import dgl  # noqa: E402

import ibp_graph  # noqa: E402
from ibp_graph.errors import IBPInputError  # noqa: E402
from ibp_graph.features import IBPFeatures  # noqa: E402
from ibp_graph.graph import CSRGraph  # noqa: E402
from ibp_graph.loaders.dgl import DataLoader, NeighborSampler, to_csr  # noqa: E402
from ibp_graph.loading import ArgumentIgnoredWarning  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch) -> None:
    """One-time warnings show again in every test."""
    import ibp_graph.loading

    monkeypatch.setattr(ibp_graph.loading, "_WARNED", set())


gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
no_gpu_here = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")

NUM_CLASSES = 4

# --------------------------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------------------------


def random_graph(seed: int = 0, n: int = 300, e: int = 2400, d: int = 48) -> dgl.DGLGraph:
    """A random homophilous multigraph with sparse 0/1 features and learnable labels.

    Every edge's source has its target's label; the last 5 nodes are isolated.
    """
    x, y, src, dst, gen = homophilous_graph(seed, n, e, d, NUM_CLASSES)
    g = dgl.graph((src, dst), num_nodes=n)
    g.ndata["feat"] = x
    g.ndata["label"] = y
    g.ndata["train_mask"] = torch.rand(n, generator=gen) < 0.4
    g.edata["w"] = torch.randn(e, 3, generator=gen)
    return g


@pytest.fixture(scope="module")
def rand_graph() -> dgl.DGLGraph:
    return random_graph()


@pytest.fixture(scope="module")
def rand_table(rand_graph, tmp_path_factory) -> ibp_graph.IBPTable:
    path = tmp_path_factory.mktemp("rand") / "x.ibp"
    return ibp_graph.compress(rand_graph.ndata["feat"], path, progress=False)


@pytest.fixture(scope="module")
def cora() -> dgl.DGLGraph:
    try:
        from ibp_graph.datasets import load_dataset
    except ImportError:  # pragma: no cover - before ibp_graph.datasets existed
        pytest.skip("ibp_graph.datasets is not there to load Cora")
    ds = load_dataset("cora")
    g = dgl.graph(tuple(ds.edge_index), num_nodes=ds.num_nodes)
    g.ndata["feat"] = ds.x
    g.ndata["label"] = ds.y
    g.ndata["train_mask"] = ds.train_mask
    return g


@pytest.fixture(scope="module")
def cora_table(cora, tmp_path_factory) -> ibp_graph.IBPTable:
    path = tmp_path_factory.mktemp("cora") / "x.ibp"
    return ibp_graph.compress(cora.ndata["feat"], path, progress=False)


@pytest.fixture(params=["random", "cora"])
def graph(request) -> tuple[dgl.DGLGraph, ibp_graph.IBPTable]:
    if request.param == "random":
        return request.getfixturevalue("rand_graph"), request.getfixturevalue("rand_table")
    return request.getfixturevalue("cora"), request.getfixturevalue("cora_table")


# --------------------------------------------------------------------------------------------
# Batch checks
# --------------------------------------------------------------------------------------------


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32) if t.dtype == torch.float32 else t


def check_blocks(g, fanouts, input_nodes, output_nodes, blocks, draw="per_hop") -> None:
    """The structure of one batch against the graph (everything but the features)."""
    assert len(blocks) == len(fanouts)
    assert torch.equal(blocks[0].srcdata[dgl.NID], input_nodes)
    assert torch.equal(blocks[-1].dstdata[dgl.NID], output_nodes)
    assert input_nodes.unique().numel() == input_nodes.numel()
    in_deg = g.in_degrees()
    for i, block in enumerate(blocks):
        assert block.is_block
        src_ids, dst_ids = block.srcdata[dgl.NID], block.dstdata[dgl.NID]
        assert block.num_src_nodes() == src_ids.numel() >= block.num_dst_nodes()
        assert torch.equal(src_ids[: block.num_dst_nodes()], dst_ids)  # dst: a prefix of src
        if i + 1 < len(blocks):
            assert torch.equal(blocks[i + 1].srcdata[dgl.NID], dst_ids)
        # Every block edge is the graph edge EID, between the right global nodes.
        u, v = block.edges()
        eid = block.edata[dgl.EID]
        gu, gv = g.find_edges(eid)
        assert torch.equal(src_ids[u], gu) and torch.equal(dst_ids[v], gv)
        assert eid.unique().numel() == eid.numel()  # no edge twice
        deg = block.in_degrees()
        if draw == "per_hop":  # DGL: every destination node draws min(in_degree, fanout)
            expected = in_deg[dst_ids]
            if fanouts[i] >= 0:
                expected = expected.clamp(max=fanouts[i])
            assert torch.equal(deg, expected)
            continue
        # draw="once": those first expanded in this block have min(in_degree, fanout)
        # edges; the earlier ones reuse the next block's draw.
        inner = blocks[i + 1].num_dst_nodes() if i + 1 < len(blocks) else 0
        expected = in_deg[dst_ids[inner:]]
        if fanouts[i] >= 0:
            expected = expected.clamp(max=fanouts[i])
        assert torch.equal(deg[inner:], expected)
        if i + 1 < len(blocks):
            assert torch.equal(deg[:inner], blocks[i + 1].in_degrees())
            prefix = blocks[i + 1].edata[dgl.EID]
            assert torch.equal(eid[: prefix.numel()], prefix)


def batches(loader) -> list[tuple]:
    out = []
    for input_nodes, output_nodes, blocks in loader:
        out.append(
            (
                input_nodes.clone(),
                output_nodes.clone(),
                [(b.edges(), b.srcdata[dgl.NID], b.edata[dgl.EID]) for b in blocks],
                blocks[0].srcdata.get("feat"),
            )
        )
    return out


def same_batches(a: list[tuple], b: list[tuple]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if not (torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])):
            return False
        for (ex, nx, ix), (ey, ny, iy) in zip(x[2], y[2], strict=True):
            if not all(
                torch.equal(p, q) for p, q in zip((*ex, nx, ix), (*ey, ny, iy), strict=True)
            ):
                return False
        if (x[3] is None) != (y[3] is None) or (x[3] is not None and not torch.equal(x[3], y[3])):
            return False
    return True


# --------------------------------------------------------------------------------------------
# Importing DGL
# --------------------------------------------------------------------------------------------


def test_dgl_imports_through_the_graphbolt_placeholder() -> None:
    assert dgl.__version__ == "2.1.0"
    assert dgl.backend.backend_name == "pytorch"
    gb = sys.modules["dgl.graphbolt"]
    if not dgl_loaders.GRAPHBOLT_PLACEHOLDER:
        pytest.skip("this DGL's GraphBolt loads for this torch: no placeholder was needed")
    with pytest.raises(AttributeError, match="GraphBolt is not available with torch"):
        gb.FusedCSCSamplingGraph  # noqa: B018
    assert not hasattr(gb, "__file__")  # inspect and hasattr() see a plain module


def test_missing_dgl_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "dgl", None)
    monkeypatch.delitem(sys.modules, "ibp_graph.loaders.dgl")
    with pytest.raises(ImportError, match=re.escape("pip install 'ibp-graph[dgl]'")):
        importlib.import_module("ibp_graph.loaders.dgl")


# --------------------------------------------------------------------------------------------
# Blocks, rows, labels
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("draw", ["per_hop", "once"])
@pytest.mark.parametrize("ibp", [True, False], ids=["ibp", "raw"])
def test_blocks_rows_and_labels_are_right(graph, ibp, draw) -> None:
    g, table = graph
    fanouts = [4, 3, 5]
    indices = torch.arange(0, g.num_nodes(), 7)
    sampler = NeighborSampler(
        fanouts, prefetch_node_feats=["feat"], prefetch_labels=["label"], draw=draw
    )
    loader = DataLoader(g, indices, sampler, batch_size=64, features=table if ibp else None, seed=3)
    seen = []
    for input_nodes, output_nodes, blocks in loader:
        check_blocks(g, fanouts, input_nodes, output_nodes, blocks, draw)
        feat = blocks[0].srcdata["feat"]
        assert feat.dtype == torch.float32
        assert torch.equal(bits(feat), bits(g.ndata["feat"][input_nodes]))  # bit for bit
        assert torch.equal(blocks[-1].dstdata["label"], g.ndata["label"][output_nodes])
        seen.append(output_nodes)
    assert torch.equal(torch.cat(seen), indices)  # every seed once, in order
    assert loader.stats.batches == len(loader) == len(seen)


def test_blocks_equal_dgls_own_with_all_neighbors(rand_graph) -> None:
    """With fanout -1 DGL's sampler is deterministic: the same nodes, edges and rows."""
    g = rand_graph
    indices = torch.arange(0, 300, 3)
    ours = DataLoader(g, indices, NeighborSampler([-1, -1]), batch_size=25)
    theirs = dgl.dataloading.DataLoader(
        g,
        indices,
        dgl.dataloading.MultiLayerFullNeighborSampler(
            2, prefetch_node_feats=["feat"], prefetch_labels=["label"]
        ),
        batch_size=25,
    )
    with pytest.warns(UserWarning, match="CPU affinity"):  # DGL's advice on every epoch
        pairs = list(zip(ours, theirs, strict=True))
    assert len(pairs) == 4
    for (in_a, out_a, blocks_a), (in_b, out_b, blocks_b) in pairs:
        assert torch.equal(out_a, out_b)
        assert set(in_a.tolist()) == set(in_b.tolist())
        for a, b in zip(blocks_a, blocks_b, strict=True):
            assert torch.equal(a.dstdata[dgl.NID].sort().values, b.dstdata[dgl.NID].sort().values)
            assert set(a.srcdata[dgl.NID].tolist()) == set(b.srcdata[dgl.NID].tolist())

            def triples(blk) -> set:
                u, v = blk.edges()
                gu, gv = blk.srcdata[dgl.NID][u], blk.dstdata[dgl.NID][v]
                return set(zip(gu.tolist(), gv.tolist(), blk.edata[dgl.EID].tolist(), strict=True))

            assert triples(a) == triples(b)
        order = blocks_b[0].srcdata[dgl.NID].argsort()
        rows_b = blocks_b[0].srcdata["feat"][order]
        rows_a = blocks_a[0].srcdata["feat"][blocks_a[0].srcdata[dgl.NID].argsort()]
        assert torch.equal(rows_a, rows_b)
        assert torch.equal(blocks_a[-1].dstdata["label"], blocks_b[-1].dstdata["label"])


def test_dgls_own_neighbor_sampler_is_accepted(rand_graph, rand_table) -> None:
    kwargs = {"batch_size": 50, "features": rand_table, "seed": 5, "shuffle": True}
    theirs = dgl.dataloading.NeighborSampler(
        [3, 2], prefetch_node_feats=["feat"], prefetch_labels=["label"]
    )
    a = batches(DataLoader(rand_graph, torch.arange(300), theirs, **kwargs))
    b = batches(DataLoader(rand_graph, torch.arange(300), NeighborSampler([3, 2]), **kwargs))
    assert same_batches(a, b)


def test_sample_group_gives_the_same_blocks(rand_graph, rand_table) -> None:
    kwargs = {"batch_size": 40, "features": rand_table, "seed": 5, "shuffle": True}
    grouped = DataLoader(rand_graph, torch.arange(300), NeighborSampler([3, 2]), sample_group=3,
                         **kwargs)  # fmt: skip
    assert grouped.sample_group == 3
    plain = DataLoader(rand_graph, torch.arange(300), NeighborSampler([3, 2]), **kwargs)
    # on the CPU the sampler runs torch ops: one batch a call, nothing replayed
    assert plain.sample_group == 1 and plain.sampler_cuda_graph is False
    assert same_batches(batches(grouped), batches(plain))
    with pytest.raises(IBPInputError, match="sample_group must be an int >= 1, got 0"):
        DataLoader(rand_graph, torch.arange(300), NeighborSampler([3, 2]), sample_group=0)
    with pytest.raises(IBPInputError, match=r"sampler_cuda_graph=True replays .* runs 'torch'"):
        DataLoader(rand_graph, torch.arange(300), NeighborSampler([3, 2]), sampler_cuda_graph=True)


def test_more_prefetch_names_and_edge_data(rand_graph) -> None:
    """The names asked for are there; so is every other field, as in DGL's CPU loader."""
    g = rand_graph
    sampler = NeighborSampler(
        [3, 3],
        prefetch_node_feats=["feat", "train_mask"],
        prefetch_labels=["label", "train_mask"],
        prefetch_edge_feats=["w"],
    )
    for input_nodes, output_nodes, blocks in DataLoader(
        g, torch.arange(40), sampler, batch_size=16
    ):
        assert torch.equal(blocks[0].srcdata["train_mask"], g.ndata["train_mask"][input_nodes])
        assert torch.equal(blocks[-1].dstdata["train_mask"], g.ndata["train_mask"][output_nodes])
        for block in blocks:
            assert torch.equal(block.edata["w"], g.edata["w"][block.edata[dgl.EID]])
        assert torch.equal(blocks[0].srcdata["label"], g.ndata["label"][input_nodes])
        assert torch.equal(blocks[-1].dstdata["feat"], g.ndata["feat"][output_nodes])


def test_other_names_and_no_features(rand_graph) -> None:
    g = dgl.graph(rand_graph.edges(), num_nodes=rand_graph.num_nodes())
    g.ndata["x"] = rand_graph.ndata["feat"]
    g.ndata["y"] = rand_graph.ndata["label"]
    sampler = NeighborSampler([2], prefetch_node_feats=["x"], prefetch_labels=["y"])
    _, output_nodes, blocks = next(iter(DataLoader(g, [1, 2, 3], sampler, batch_size=3)))
    assert torch.equal(blocks[0].srcdata["x"], g.ndata["x"][blocks[0].srcdata[dgl.NID]])
    assert torch.equal(blocks[-1].dstdata["y"], g.ndata["y"][output_nodes])
    bare = dgl.graph(rand_graph.edges(), num_nodes=rand_graph.num_nodes())
    loader = DataLoader(bare, [1, 2, 3], NeighborSampler([2]), batch_size=3)
    _, _, blocks = next(iter(loader))
    assert set(blocks[0].srcdata.keys()) == {dgl.NID}  # nothing to fetch, nothing fetched
    assert loader.features is None and loader.labels is None


def test_csr_graph_with_explicit_features_and_labels(rand_graph, rand_table) -> None:
    g = rand_graph
    csr = to_csr(g)
    assert isinstance(csr, CSRGraph) and csr.num_edges == g.num_edges()
    assert to_csr(csr) is csr
    kwargs = {"batch_size": 64, "seed": 1, "features": rand_table}
    a = batches(DataLoader(g, torch.arange(200), NeighborSampler([4, 4]), **kwargs))
    labels = g.ndata["label"]
    b_loader = DataLoader(csr, torch.arange(200), NeighborSampler([4, 4]), labels=labels, **kwargs)
    assert same_batches(a, batches(b_loader))
    _, output_nodes, blocks = next(iter(b_loader))
    assert torch.equal(blocks[-1].dstdata["label"], labels[output_nodes])


class FakeOGBDataset:
    """The interface of ogb.nodeproppred.DglNodePropPredDataset."""

    def __init__(self, g: dgl.DGLGraph) -> None:
        self.graph = dgl.graph(g.edges(), num_nodes=g.num_nodes())
        self.graph.ndata["feat"] = g.ndata["feat"]
        self.labels = g.ndata["label"].view(-1, 1)  # OGB: (num_nodes, 1)

    def __getitem__(self, idx: int):
        assert idx == 0
        return self.graph, self.labels

    def __len__(self) -> int:
        return 1

    def get_idx_split(self) -> dict[str, torch.Tensor]:
        perm = torch.randperm(self.graph.num_nodes(), generator=torch.Generator().manual_seed(0))
        return {"train": perm[:150], "valid": perm[150:200], "test": perm[200:]}


def test_from_ogb_dataset(rand_graph, rand_table) -> None:
    ds = FakeOGBDataset(rand_graph)
    loader = DataLoader.from_ogb(ds, NeighborSampler([3, 2]), "valid", batch_size=16, seed=0)
    assert torch.equal(loader.input_nodes, ds.get_idx_split()["valid"])
    seen = []
    for input_nodes, output_nodes, blocks in loader:
        check_blocks(rand_graph, [3, 2], input_nodes, output_nodes, blocks)
        assert torch.equal(blocks[-1].dstdata["label"], ds.labels[output_nodes, 0])
        assert torch.equal(blocks[0].srcdata["feat"], rand_graph.ndata["feat"][input_nodes])
        seen.append(output_nodes)
    assert torch.equal(torch.cat(seen), ds.get_idx_split()["valid"])
    ibp = DataLoader.from_ogb(ds, NeighborSampler([3]), features=rand_table, seed=0)
    assert len(ibp) == 150 and isinstance(ibp.features, IBPFeatures)
    with pytest.raises(IBPInputError, match=re.escape("no split 'val' in get_idx_split()")):
        DataLoader.from_ogb(ds, NeighborSampler([3]), "val")
    with pytest.raises(IBPInputError, match="must be an OGB DglNodePropPredDataset"):
        DataLoader.from_ogb(rand_graph, NeighborSampler([3]))


# --------------------------------------------------------------------------------------------
# Seeds, epochs, length, statistics
# --------------------------------------------------------------------------------------------


def test_same_seed_same_batches_different_seed_different(rand_graph, rand_table) -> None:
    def run(seed: int, prefetch: int) -> list:
        loader = DataLoader(
            rand_graph,
            torch.arange(300),
            NeighborSampler([3, 2]),
            batch_size=40,
            shuffle=True,
            features=rand_table,
            seed=seed,
            prefetch=prefetch,
        )
        return [batches(loader), batches(loader)]  # two epochs

    first, again, deeper = run(7, 2), run(7, 2), run(7, 0)
    assert same_batches(first[0], again[0]) and same_batches(first[1], again[1])
    assert same_batches(first[0], deeper[0]) and same_batches(first[1], deeper[1])
    assert not same_batches(first[0], first[1])  # epochs differ
    assert not same_batches(first[0], run(8, 2)[0])


@pytest.mark.parametrize(("shuffle", "drop_last"), [(False, False), (True, True)])
def test_shuffle_drop_last_and_len(rand_graph, shuffle, drop_last) -> None:
    indices = torch.arange(10, 110)
    loader = DataLoader(
        rand_graph,
        indices,
        NeighborSampler([1]),
        batch_size=30,
        shuffle=shuffle,
        drop_last=drop_last,
        seed=0,
    )
    sizes = [out.numel() for _, out, _ in loader]
    assert len(loader) == len(sizes) == (3 if drop_last else 4)
    assert sizes == ([30] * 3 if drop_last else [30, 30, 30, 10])
    seeds = torch.cat([out for _, out, _ in loader])
    if shuffle:
        assert not torch.equal(seeds, indices[: seeds.numel()])
        assert set(seeds.tolist()) <= set(indices.tolist())
    else:
        assert torch.equal(seeds, indices)
    mask = torch.zeros(300, dtype=torch.bool)
    mask[indices] = True
    by_mask = DataLoader(rand_graph, mask, NeighborSampler([1]), batch_size=30, seed=0)
    assert torch.equal(torch.cat([out for _, out, _ in by_mask]), indices)


def test_stats_and_progress_bar(rand_graph, rand_table, capsys) -> None:
    loader = DataLoader(
        rand_graph,
        torch.arange(120),
        NeighborSampler([3, 2]),
        batch_size=40,
        features=rand_table,
        progress=True,
        seed=0,
    )
    rows = sum(inp.numel() for inp, _, _ in loader)
    stats = loader.stats
    assert stats.batches == 3 and stats.rows == rows
    assert stats.decoded_bytes == rows * 48 * 4
    assert 0 < stats.pcie_bytes < stats.decoded_bytes
    assert "ratio" in capsys.readouterr().err
    assert "DataLoader(num_nodes=300" in repr(loader)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


class SAGE(torch.nn.Module):
    def __init__(self, in_dim: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [dgl.nn.SAGEConv(in_dim, hidden, "mean"), dgl.nn.SAGEConv(hidden, classes, "mean")]
        )

    def forward(self, blocks: list, h: torch.Tensor) -> torch.Tensor:
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = F.relu(h)
        return h


def test_dgl_graphsage_trains_an_epoch_on_cora(cora, cora_table) -> None:
    torch.manual_seed(0)
    classes = int(cora.ndata["label"].max()) + 1
    model = SAGE(cora.ndata["feat"].size(1), 16, classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sampler = NeighborSampler([5, 5], prefetch_node_feats=["feat"], prefetch_labels=["label"])
    seeds = torch.arange(640)  # Planetoid's train and validation nodes
    train = DataLoader(
        cora, seeds, sampler, batch_size=64, shuffle=True, features=cora_table, seed=0
    )
    probe = DataLoader(cora, torch.arange(1708, 2708, 4), sampler, batch_size=250, seed=1)
    _, _, probe_blocks = next(iter(probe))

    def probe_loss() -> float:
        model.eval()
        with torch.no_grad():
            out = model(probe_blocks, probe_blocks[0].srcdata["feat"])
            return F.cross_entropy(out, probe_blocks[-1].dstdata["label"]).item()

    before = probe_loss()
    model.train()
    losses = []
    for _, _, blocks in train:  # the unchanged DGL training loop, one epoch
        out = model(blocks, blocks[0].srcdata["feat"])
        loss = F.cross_entropy(out, blocks[-1].dstdata["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert len(losses) == 10
    assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3])
    assert probe_loss() < 0.8 * before  # on held-out test nodes


def test_module_docstring_example_runs(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    run_docstring_example(dgl_loaders.__doc__, "\n\nThe blocks:", "loaders/dgl.py docstring")
    assert "batches |" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# Bad input: every one raises at construction, naming what is wrong
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"fanouts": {"a": [3]}}, IBPInputError, "fanouts must be a list of ints, got 'dict'"),
        ({"fanouts": [3, "2"]}, IBPInputError, "got 'str' at index 1"),
        ({"fanouts": [3, 2.0]}, IBPInputError, "got 'float' at index 1"),
        ({"fanouts": [True]}, IBPInputError, "got 'bool' at index 0"),
        ({"fanouts": [-2]}, IBPInputError, "fanouts[0] must be >= -1"),
        ({"fanouts": [{("a", "r", "b"): 3}]}, NotImplementedError, "heterogeneous"),
        ({"edge_dir": "out"}, NotImplementedError, "edge_dir='out'"),
        ({"prob": "p"}, NotImplementedError, "prob='p'"),
        ({"mask": "m"}, NotImplementedError, "mask='m'"),
        ({"replace": 1}, IBPInputError, "replace must be a bool, got 'int'"),
        ({"draw": "per_block"}, IBPInputError, "draw must be one of 'per_hop', 'once'"),
        ({"prefetch_node_feats": "feat"}, IBPInputError, "a list of names, got the string"),
        ({"prefetch_labels": [1]}, IBPInputError, "prefetch_labels must be a list of str"),
        ({"prefetch_node_feats": {"_N": ["feat"]}}, NotImplementedError, "heterogeneous"),
    ],
)
def test_bad_sampler_arguments(kwargs, error, match) -> None:
    kwargs = {"fanouts": [3], **kwargs}
    with pytest.raises(error, match=re.escape(match)):
        NeighborSampler(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"indices": torch.tensor([1, 2, 300, 400])}, "indices[2] = 300 is out of range"),
        ({"indices": [-1]}, "indices[0] = -1 is out of range"),
        ({"indices": torch.ones(299, dtype=torch.bool)}, "mask of 299 entries, the graph has 300"),
        ({"indices": torch.tensor([0.5])}, "integers or bools"),
        ({"indices": torch.zeros(2, 2, dtype=torch.long)}, "indices must be 1-D"),
        ({"features": torch.zeros(299, 4)}, "features have 299 rows, the graph has 300 nodes"),
        ({"features": "x.ibp"}, "features must be an IBPTable, CudaIBPTable"),
        ({"labels": torch.zeros(299)}, "labels has 299 rows, the graph has 300 nodes"),
        ({"labels": [0, 1]}, "labels must be a torch.Tensor, got 'list'"),
        ({"batch_size": 0}, "batch_size must be a positive int"),
        ({"prefetch": -1}, "prefetch must be an int >= 0"),
        ({"seed": -3}, "seed must be an int >= 0"),
        ({"shuffle": "yes"}, "shuffle must be a bool"),
        ({"progress": 1}, "progress must be a bool"),
        ({"graph": {"edges": 1}}, "graph must be a dgl.DGLGraph or an ibp_graph CSRGraph"),
        (
            {"graph_sampler": NeighborSampler([2], prefetch_node_feats=["feat", "nope"])},
            "g.ndata has no 'nope' to prefetch",
        ),
        (
            {"graph_sampler": NeighborSampler([2], prefetch_labels=["y"])},
            "g.ndata has no 'y' to prefetch; pass labels=",
        ),
        (
            {"graph_sampler": NeighborSampler([2], prefetch_edge_feats=["nope"])},
            "g.edata has no 'nope' to prefetch",
        ),
    ],
)
def test_bad_loader_arguments(rand_graph, kwargs, match) -> None:
    kwargs = {
        "graph": rand_graph,
        "indices": torch.arange(10),
        "graph_sampler": NeighborSampler([3]),
        **kwargs,
    }
    with pytest.raises(IBPInputError, match=re.escape(match)):
        DataLoader(**kwargs)


def test_unsupported_loader_options(rand_graph) -> None:
    with pytest.raises(NotImplementedError, match=re.escape("indices='train'")):
        DataLoader(rand_graph, "train", graph_sampler=NeighborSampler([3]))
    # {ntype: ids} names the graph's one node type (as DGL takes it), or is an error
    loader = DataLoader(rand_graph, {"_N": torch.arange(3)}, NeighborSampler([3]), batch_size=3)
    assert torch.equal(next(iter(loader))[1]["_N"], torch.arange(3))
    with pytest.raises(IBPInputError, match=re.escape("node types ['_N', 'a'], the graph")):
        DataLoader(rand_graph, {"_N": torch.arange(3), "a": 0}, NeighborSampler([3]))


def test_unsupported_graphs_and_samplers(rand_graph) -> None:
    hetero = dgl.heterograph({("a", "r", "b"): ([0], [1]), ("b", "s", "a"): ([1], [0])})
    with pytest.raises(NotImplementedError, match="heterogeneous"):
        DataLoader(hetero, [0], NeighborSampler([2]))
    block = dgl.create_block(([0], [0]), num_src_nodes=2, num_dst_nodes=1)
    with pytest.raises(NotImplementedError, match="is a DGL block"):
        DataLoader(block, [0], NeighborSampler([2]))
    with pytest.raises(NotImplementedError, match="graph_sampler=ShaDowKHopSampler"):
        DataLoader(rand_graph, [0], dgl.dataloading.ShaDowKHopSampler([2]))
    with pytest.raises(NotImplementedError, match=re.escape("prob (or mask)='w'")):
        DataLoader(rand_graph, [0], dgl.dataloading.NeighborSampler([2], prob="w"))


def test_feature_row_count_mismatch_on_cora(cora, tmp_path) -> None:
    short = ibp_graph.compress(cora.ndata["feat"][:-1], tmp_path / "short.ibp", progress=False)
    with pytest.raises(IBPInputError, match="features have 2707 rows, the graph has 2708 nodes"):
        DataLoader(cora, [0], NeighborSampler([5]), features=short)


@no_gpu_here
def test_cuda_device_without_a_gpu_is_a_clear_error(rand_graph, rand_table) -> None:
    msg = "device='cuda' but torch.cuda.is_available() is False"
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        DataLoader(rand_graph, [0], NeighborSampler([3]), "cuda", features=rand_table)
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        DataLoader(rand_graph, [0], NeighborSampler([3], output_device="cuda"))


# --------------------------------------------------------------------------------------------
# GPU (skipped without CUDA)
# --------------------------------------------------------------------------------------------


@gpu
@needs_gpu
def test_gpu_loader_matches_cpu_rows_or_refuses_a_cpu_only_dgl(rand_graph, rand_table) -> None:
    pytest.importorskip("cupy")
    if not dgl_loaders._dgl_supports(torch.device("cuda", torch.cuda.current_device())):
        with pytest.raises(IBPInputError, match="this DGL build .* cannot put graphs there"):
            DataLoader(rand_graph, [0], NeighborSampler([3]), "cuda", features=rand_table)
        return
    loader = DataLoader(
        rand_graph, torch.arange(200), NeighborSampler([3, 2]), "cuda", batch_size=64,
        features=rand_table, seed=0,
    )  # fmt: skip
    g = rand_graph
    for input_nodes, output_nodes, blocks in loader:
        assert blocks[0].device.type == "cuda"
        feat = blocks[0].srcdata["feat"].cpu()
        assert torch.equal(bits(feat), bits(g.ndata["feat"][input_nodes.cpu()]))
        labels = blocks[-1].dstdata["label"].cpu()
        assert torch.equal(labels, g.ndata["label"][output_nodes.cpu()])
        check_blocks(
            g, [3, 2], input_nodes.cpu(), output_nodes.cpu(), [b.to("cpu") for b in blocks]
        )


# --------------------------------------------------------------------------------------------
# graph_memory: the graph on the device, or in pinned host memory read over UVA
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("graph_memory", "got"),
    [("gpu", "'gpu'"), ("UVA", "'UVA'"), ("", "''"), (None, "'NoneType'"), (1, "'int'")],
)
def test_unknown_graph_memory_names_the_argument_and_the_choices(
    rand_graph, graph_memory, got
) -> None:
    msg = f"graph_memory must be one of 'device', 'uva', got {got}"
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        DataLoader(rand_graph, [0], NeighborSampler([3]), graph_memory=graph_memory)


@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.parametrize("as_csr", [False, True], ids=["dgl-graph", "csr-graph"])
def test_uva_graph_needs_a_cuda_device(rand_graph, device, as_csr) -> None:
    graph = to_csr(rand_graph) if as_csr else rand_graph
    msg = "so it needs device='cuda', got device='cpu'"
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        DataLoader(
            graph,
            [0],
            NeighborSampler([3]),
            device,
            features=rand_graph.ndata["feat"],
            graph_memory="uva",
        )


def test_device_graph_memory_is_the_default(rand_graph) -> None:
    def make(**kwargs) -> DataLoader:
        return DataLoader(
            rand_graph, torch.arange(200), NeighborSampler([3, 2]), batch_size=64, shuffle=True,
            seed=0, **kwargs,
        )  # fmt: skip

    a, b = make(), make(graph_memory="device")
    assert a.graph_memory == b.graph_memory == "device" and b.csr.device.type == "cpu"
    assert same_batches(batches(a), batches(b))


@no_gpu_here
def test_use_uva_on_the_cpu_warns_once_and_samples_in_host_memory(rand_graph) -> None:
    kwargs = {"batch_size": 50, "seed": 1}
    plain = DataLoader(rand_graph, torch.arange(100), NeighborSampler([3]), **kwargs)
    with pytest.warns(ArgumentIgnoredWarning, match="use_uva=True: UVA needs a CUDA device"):
        uva = DataLoader(
            rand_graph, torch.arange(100), NeighborSampler([3]), use_uva=True, **kwargs
        )
    assert uva.use_uva is True and uva.graph_memory == "device" and uva.csr.device.type == "cpu"
    assert same_batches(batches(plain), batches(uva))


@no_gpu_here
def test_uva_graph_without_a_gpu_is_a_clear_error(rand_graph) -> None:
    msg = "device='cuda' but torch.cuda.is_available() is False"
    with pytest.raises(IBPInputError, match=re.escape(msg)):
        DataLoader(rand_graph, [0], NeighborSampler([3]), "cuda", graph_memory="uva")


@gpu
@needs_gpu
@pytest.mark.parametrize("backend", [None, "torch"])  # None: the kernels, the default
def test_uva_graph_keeps_its_edges_in_host_memory_and_gives_the_same_batches(
    rand_graph, rand_table, backend
) -> None:
    cupy = pytest.importorskip("cupy")
    if not dgl_loaders._dgl_supports(torch.device("cuda", torch.cuda.current_device())):
        with pytest.raises(IBPInputError, match="this DGL build .* cannot put graphs there"):
            DataLoader(rand_graph, [0], NeighborSampler([3]), "cuda", graph_memory="uva")
        pytest.skip("this DGL build cannot hold graphs on a GPU (PyPI's dgl is CPU-only)")
    features = ibp_graph.open(rand_table.path, device="cuda")

    def make(graph_memory: str) -> DataLoader:
        return DataLoader(
            rand_graph, torch.arange(200), NeighborSampler([3, 2]), "cuda", batch_size=64,
            shuffle=True, features=features, seed=0, graph_memory=graph_memory,
            sampler_backend=backend,
        )  # fmt: skip

    on_device, uva = make("device"), make("uva")
    runtime = cupy.cuda.runtime
    for name in ("indptr", "indices", "edge_ids"):
        t, d = getattr(uva.csr, name), getattr(on_device.csr, name)
        assert t.is_cuda and t.device == d.device and torch.equal(t, d)
        # indptr, read once a sampled node, goes to GPU memory (to_uva's default)
        want = runtime.memoryTypeDevice if name == "indptr" else runtime.memoryTypeHost
        assert runtime.pointerGetAttributes(t.data_ptr()).type == want
        assert runtime.pointerGetAttributes(d.data_ptr()).type == runtime.memoryTypeDevice
    for _ in range(2):  # two epochs: the same draws, epoch by epoch
        a, b = batches(on_device), batches(uva)
        assert len(a) == len(b) == len(uva) and same_batches(a, b)


def test_sampler_backend_is_checked_at_construction(rand_graph) -> None:
    from ibp_graph.errors import IBPDeviceError

    loader = DataLoader(rand_graph, [0], NeighborSampler([3]), sampler_backend="torch")
    assert loader.sampler_backend == loader.node_sampler.backend == "torch"
    # The default on the CPU: torch ops (no sampler_backend, as an upstream script passes).
    default = DataLoader(rand_graph, [0], NeighborSampler([3]), sampler_backend=None)
    assert default.sampler_backend == default.node_sampler.backend == "torch"
    assert DataLoader(rand_graph, [0], NeighborSampler([3])).sampler_backend == "torch"
    with pytest.raises(IBPInputError, match="backend must be one of 'torch', 'kernel', got 'gpu'"):
        DataLoader(rand_graph, [0], NeighborSampler([3]), sampler_backend="gpu")
    with pytest.raises(IBPDeviceError, match="backend='kernel' .* needs a graph on a CUDA"):
        DataLoader(rand_graph, [0], NeighborSampler([3]), sampler_backend="kernel")


def test_sampler_backend_none_is_decided_by_where_the_graph_is(rand_graph, monkeypatch) -> None:
    calls = []

    def says_torch(device: torch.device) -> str:
        calls.append(device)
        return "torch"

    monkeypatch.setattr(dgl_loaders, "default_sampler_backend", says_torch)
    loader = DataLoader(rand_graph, [0], NeighborSampler([3]))
    assert calls == [loader.csr.device] and loader.sampler_backend == "torch"
    DataLoader(rand_graph, [0], NeighborSampler([3]), sampler_backend="torch")
    assert len(calls) == 1  # an explicit value is used as it is


@gpu
@needs_gpu
@pytest.mark.parametrize("graph_memory", ["device", "uva"])
def test_a_cuda_loader_samples_with_the_kernels_by_default(
    rand_graph, rand_table, graph_memory
) -> None:
    pytest.importorskip("cupy")
    if not dgl_loaders._dgl_supports(torch.device("cuda", torch.cuda.current_device())):
        pytest.skip("this DGL build cannot hold graphs on a GPU (PyPI's dgl is CPU-only)")
    # No sampler_backend, as an upstream script.
    loader = DataLoader(
        rand_graph, torch.arange(200), NeighborSampler([3, 2]), "cuda", batch_size=64,
        features=rand_table, seed=0, graph_memory=graph_memory,
    )  # fmt: skip
    assert loader.sampler_backend == loader.node_sampler.backend == "kernel"
    g = rand_graph
    for input_nodes, output_nodes, blocks in loader:
        assert blocks[0].device.type == "cuda"
        feat = blocks[0].srcdata["feat"].cpu()
        assert torch.equal(bits(feat), bits(g.ndata["feat"][input_nodes.cpu()]))
        check_blocks(
            g, [3, 2], input_nodes.cpu(), output_nodes.cpu(), [b.to("cpu") for b in blocks]
        )
