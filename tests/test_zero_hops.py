"""No hops: ``num_neighbors=[]`` (PyG) and ``fanouts=[]`` (DGL), against what upstream gives.

What PyG 2.8.1 gives (its ``NeighborLoader`` run with pyg-lib's neighbor sampler, and with
torch-sparse's for ``"induced"``): a batch of the seeds, repeats kept, without edges;
``num_sampled_nodes == [batch_size]``, ``num_sampled_edges == []`` (both dropped for
``"bidirectional"`` and ``"induced"``), ``batch`` the seed positions with ``disjoint=True``,
and for ``"induced"`` every graph edge between the seeds. pyg-lib and torch-sparse are not
installed here, so the batches are checked against the ones recorded from that run
(`UPSTREAM`), against PyG's own ``NodeLoader`` joining the sampler output that upstream gives
(`UpstreamSampler`), and against PyG's ``NeighborLoader`` itself where pyg-lib is importable.

What DGL 2.1.0 gives (installed here): ``NeighborSampler([]).sample_blocks(g, seeds)`` is
``(seeds, seeds, [])``; its ``sample`` and so its ``DataLoader`` fail on ``blocks[0]``
(``IndexError``) at the first batch. A fanout of ``0`` gives one block without edges whose
source nodes are the seeds, with DGL's unfused sampler (the fused one, DGL's default on a CPU
with more than one thread, gives that block no source nodes: not followed).

Every CPU hop path runs each test (the ``hop_path`` fixture: compiled and torch ops); the
``"kernel"`` backend's dispatch runs here with hop kernels that fail if called. The ``gpu``
tests run the CUDA paths and compare them with the CPU batches.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import homophilous_graph, in_lists

import ibp_graph
from ibp_graph import sample_cpu
from ibp_graph import sampler as sampler_mod
from ibp_graph.errors import IBPInputError
from ibp_graph.graph import CSRGraph
from ibp_graph.sample_replay import BatchReplay
from ibp_graph.sampler import NeighborSampler, SampledBatch

pytestmark = pytest.mark.usefixtures("hop_path")

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

N = 120

MODES = {
    "default": {},
    "replace": {"replace": True},
    "disjoint": {"disjoint": True},
    "bidirectional": {"subgraph_type": "bidirectional"},
    "induced": {"subgraph_type": "induced"},
    "disjoint-bidirectional": {"disjoint": True, "subgraph_type": "bidirectional"},
}


def edge_index(seed: int = 3, n: int = N, e: int = 900) -> torch.Tensor:
    """A random multigraph (self-loops and parallel edges included); the last 5 nodes isolated."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, n - 5, (2, e), generator=gen)


def seeds_with_repeats(seed: int = 4, size: int = 40, n: int = N) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    s = torch.randint(0, n, (size,), generator=gen)
    s[7] = s[3] = s[0]  # a seed three times
    s[-1] = n - 1  # an isolated one
    return s


def induced_among(ei: torch.Tensor, n: int, node: list[int]) -> tuple[list, list, list]:
    """Every edge between ``node``'s entries, as torch-sparse gives it: per position of
    ``node`` (a repeated node is a target at each of its positions) its in-edges in edge
    order, the source by its first position."""
    first: dict[int, int] = {}
    for i, v in enumerate(node):
        first.setdefault(v, i)
    adj = in_lists(ei, n)
    row, col, edge = [], [], []
    for i, v in enumerate(node):
        for u, e in adj[v]:
            if u in first:
                row.append(first[u])
                col.append(i)
                edge.append(e)
    return row, col, edge


def check_seeds_only(batch: SampledBatch, seeds: torch.Tensor, kw: dict, ei, n) -> None:
    """``batch`` is the upstream batch of no hops over ``seeds`` in mode ``kw``."""
    b = seeds.numel()
    assert torch.equal(batch.node, seeds) and batch.node.dtype == torch.int64
    assert batch.batch_size == b
    plain = kw.get("subgraph_type", "directional") == "directional"
    assert batch.num_sampled_nodes == ([b] if plain else None)
    assert batch.num_sampled_edges == ([] if plain else None)
    if kw.get("disjoint"):
        assert torch.equal(batch.batch, torch.arange(b))
    else:
        assert batch.batch is None
    want = ([], [], [])
    if kw.get("subgraph_type") == "induced":
        want = induced_among(ei, n, seeds.tolist())
        assert want[0] or seeds.numel() < 2, "the test graph has edges between the seeds"
    got = (batch.row.tolist(), batch.col.tolist(), batch.edge.tolist())
    assert got == want
    for t in (batch.row, batch.col, batch.edge):
        assert t.dtype == torch.int64


def forbid_hops(monkeypatch, *, induced: bool = False) -> None:
    """Make every hop (compiled, torch ops, hop kernels) and every draw fail if it runs."""

    def ran(*args, **kwargs):
        raise AssertionError("a hop or a draw ran for a batch of no hops")

    monkeypatch.setattr(sample_cpu, "sample", ran)
    monkeypatch.setattr(sampler_mod, "launch_group", ran)
    monkeypatch.setattr(sampler_mod, "randint", ran)
    for name in ("_torch_hop", "_hops_with_ops", "_sample_compiled", "_draw_without_replacement",
                 "_sample_group"):  # fmt: skip
        monkeypatch.setattr(NeighborSampler, name, ran)
    if not induced:  # induced reads the seeds' in-edges (fanout -1), once, and draws nothing
        monkeypatch.setattr(NeighborSampler, "_hop_entries", ran)


class NoKernels:
    """Hop kernels that fail if anything is launched (or looked up)."""

    def __getattr__(self, name):
        raise AssertionError(f"hop kernel {name!r} used for a batch of no hops")


# --------------------------------------------------------------------------------------------
# The sampler
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_no_hops_give_the_seeds_as_upstream_in_every_mode(mode, monkeypatch) -> None:
    kw = MODES[mode]
    ei = edge_index()
    g = CSRGraph.from_edge_index(ei, N)
    sampler = NeighborSampler(g, [], seed=0, **kw)
    assert sampler.num_neighbors == ()
    forbid_hops(monkeypatch, induced=kw.get("subgraph_type") == "induced")
    state = sampler.generator.get_state()
    for seeds in (seeds_with_repeats(), torch.tensor([N - 1]), torch.arange(N)):
        batch = sampler.sample(seeds, input_id=torch.arange(seeds.numel()))
        check_seeds_only(batch, seeds, kw, ei, N)
        assert torch.equal(batch.input_id, torch.arange(seeds.numel()))
    assert torch.equal(sampler.generator.get_state(), state)  # nothing drawn
    # the dense map is left empty: a batch with hops afterwards is unaffected
    assert sampler._map is None or bool((sampler._map == sampler_mod.UNSEEN).all())


def test_per_hop_draw_and_no_seeds() -> None:
    g = CSRGraph.from_edge_index(edge_index(), N)
    per_hop = NeighborSampler(g, [], draw="per_hop", seed=0).sample(seeds_with_repeats())
    check_seeds_only(per_hop, seeds_with_repeats(), {}, None, N)
    empty = NeighborSampler(g, [], seed=0).sample(torch.empty(0, dtype=torch.int64))
    assert empty.node.numel() == 0 and empty.num_sampled_nodes == [0]
    assert empty.num_sampled_edges == []


def test_the_seeds_are_checked_and_the_batch_owns_its_node_tensor() -> None:
    g = CSRGraph.from_edge_index(edge_index(), N)
    sampler = NeighborSampler(g, [])
    with pytest.raises(IBPInputError, match=rf"seeds\[1\] = {N} is out of range"):
        sampler.sample(torch.tensor([0, N]))
    seeds = torch.tensor([4, 2, 4])
    batch = sampler.sample(seeds)
    seeds[0] = 9
    assert batch.node.tolist() == [4, 2, 4]
    small = sampler.sample(torch.tensor([1, 3], dtype=torch.int32))
    assert small.node.dtype == torch.int64 and small.node.tolist() == [1, 3]


@pytest.mark.parametrize("mode", ["default", "disjoint", "induced", "bidirectional"])
def test_no_hops_are_a_zero_fanout_without_its_empty_hop(mode) -> None:
    """``[]`` and ``[0]`` (which we already gave as PyG does) differ only by that hop."""
    kw = MODES[mode]
    g = CSRGraph.from_edge_index(edge_index(), N)
    seeds = seeds_with_repeats()
    none = NeighborSampler(g, [], seed=1, **kw).sample(seeds)
    zero = NeighborSampler(g, [0], seed=1, **kw).sample(seeds)
    for name in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(none, name), getattr(zero, name)), name
    if mode in ("default", "disjoint"):
        assert zero.num_sampled_nodes == [*none.num_sampled_nodes, 0]
        assert zero.num_sampled_edges == [*none.num_sampled_edges, 0]


def test_the_kernel_backend_launches_nothing_and_captures_nothing(monkeypatch) -> None:
    """The ``"kernel"`` backend's path (hop kernels set, CUDA graph replay on), on the host:
    no launch, no capture, the CPU batch."""
    ei = edge_index()
    g = CSRGraph.from_edge_index(ei, N)
    seeds = seeds_with_repeats()
    for kw in ({}, {"subgraph_type": "induced"}, {"disjoint": True}):
        want = NeighborSampler(g, [], seed=2, **kw).sample(seeds)
        sampler = NeighborSampler(g, [], seed=2, **kw)
        sampler._hop_kernels, sampler.backend, sampler.cuda_graph = NoKernels(), "kernel", True

        def capture(*args, **kwargs):
            raise AssertionError("a batch of no hops was captured")

        sampler._replay = BatchReplay(capture)
        forbid_hops(monkeypatch, induced="subgraph_type" in kw)
        for _ in range(3):  # a size seen twice is where a capture would happen
            got = sampler.sample(seeds)
            for name in ("node", "row", "col", "edge", "batch"):
                a, b = getattr(got, name), getattr(want, name)
                assert (a is None and b is None) or torch.equal(a, b), name
            assert got.num_sampled_nodes == want.num_sampled_nodes
        assert sampler.capture_sizes([seeds.numel(), 8]) == []
        assert sampler._replay.graphs == {} and not sampler._replay._ready
        monkeypatch.undo()


def test_batches_with_hops_draw_as_before_after_batches_without() -> None:
    """A sampler without hops leaves nothing behind that a sampler with hops would see."""
    g = CSRGraph.from_edge_index(edge_index(), N)
    seeds = seeds_with_repeats()
    a = NeighborSampler(g, [4, 3], seed=7).sample(seeds)
    none = NeighborSampler(g, [], seed=7)
    none.sample(seeds)
    b = NeighborSampler(g, [4, 3], seed=7).sample(seeds)
    for name in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(a, name), getattr(b, name))


# --------------------------------------------------------------------------------------------
# PyG
# --------------------------------------------------------------------------------------------

#: PyG 2.8.1's NeighborLoader on `UPSTREAM_EDGES` (6 nodes, x = arange(12).view(6, 2)),
#: input_nodes [0, 2, 0, 4, 5], batch_size 4: the batches it gave, without x (x[n_id]), with
#: pyg-lib's sampler (torch-sparse's for "induced", which pyg-lib does not do).
UPSTREAM_EDGES = [[1, 2, 3, 0, 4, 2, 2, 0], [0, 0, 1, 3, 0, 4, 0, 2]]
_PLAIN = [
    {"n_id": [0, 2, 0, 4], "num_sampled_nodes": [4], "num_sampled_edges": [],
     "input_id": [0, 1, 2, 3], "batch_size": 4},
    {"n_id": [5], "num_sampled_nodes": [1], "num_sampled_edges": [], "input_id": [4],
     "batch_size": 1},
]  # fmt: skip
_NO_EDGES = {"edge_index": [[], []], "e_id": []}
UPSTREAM = {
    "default": [{**_NO_EDGES, **b} for b in _PLAIN],
    "replace": [{**_NO_EDGES, **b} for b in _PLAIN],
    "disjoint": [
        {**_NO_EDGES, **_PLAIN[0], "batch": [0, 1, 2, 3]},
        {**_NO_EDGES, **_PLAIN[1], "batch": [0]},
    ],
    "bidirectional": [
        {**_NO_EDGES, "n_id": [0, 2, 0, 4], "input_id": [0, 1, 2, 3], "batch_size": 4},
        {**_NO_EDGES, "n_id": [5], "input_id": [4], "batch_size": 1},
    ],
    "induced": [
        {"edge_index": [[1, 3, 1, 0, 1, 3, 1, 1], [0, 0, 0, 1, 2, 2, 2, 3]],
         "e_id": [1, 4, 6, 7, 1, 4, 6, 5], "n_id": [0, 2, 0, 4], "input_id": [0, 1, 2, 3],
         "batch_size": 4},
        {**_NO_EDGES, "n_id": [5], "input_id": [4], "batch_size": 1},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def pyg():
    tg = pytest.importorskip("torch_geometric", reason="the pyg extra is not installed")
    from torch_geometric.data import Data
    from torch_geometric.loader import NodeLoader
    from torch_geometric.sampler import BaseSampler, SamplerOutput

    from ibp_graph.loaders.pyg import NeighborLoader

    class UpstreamSampler(BaseSampler):
        """The sampler output that PyG's NeighborSampler gives for ``hops`` zero fanouts
        (``[]`` for none), as pyg-lib and torch-sparse build it (see the module docstring)."""

        def __init__(self, data, hops: int, kw: dict) -> None:
            self.data, self.hops, self.kw = data, hops, kw

        def sample_from_nodes(self, inputs, **kwargs):
            node = inputs.node.clone()
            b = node.numel()
            empty = torch.empty(0, dtype=torch.int64)
            row = col = edge = empty
            induced = self.kw.get("subgraph_type") == "induced"
            if induced:
                lists = induced_among(self.data.edge_index, self.data.num_nodes, node.tolist())
                row, col, edge = (torch.tensor(x, dtype=torch.int64) for x in lists)
            out = SamplerOutput(
                node=node,
                row=row,
                col=col,
                edge=edge,
                batch=torch.arange(b) if self.kw.get("disjoint") else None,
                num_sampled_nodes=None if induced else [b] + [0] * self.hops,
                num_sampled_edges=None if induced else [0] * self.hops,
                metadata=(inputs.input_id, inputs.time),
            )
            if self.kw.get("subgraph_type") == "bidirectional":
                out = out.to_bidirectional()  # PyG's NeighborSampler does this
            return out

        def sample_from_edges(self, inputs, neg_sampling=None):
            raise NotImplementedError

    return tg, Data, NodeLoader, UpstreamSampler, NeighborLoader


def pyg_data(Data):
    x, y, src, dst, gen = homophilous_graph(7, N, 900, 6, 3)
    data = Data(x=x, y=y, edge_index=torch.stack([src, dst]))
    data.edge_attr = torch.randn(src.numel(), 2, generator=gen)
    data.train_mask = torch.rand(N, generator=gen) < 0.5
    return data


def same_data(a, b) -> None:
    """Two PyG batches hold the same keys and values (tensors of the same dtype)."""
    assert sorted(a.keys()) == sorted(b.keys()), (a, b)
    for key in a.keys():  # noqa: SIM118 - Data.keys() is a method
        va, vb = a[key], b[key]
        if isinstance(va, torch.Tensor):
            assert va.dtype == vb.dtype and torch.equal(va, vb), key
        else:
            assert va == vb, key


@pytest.mark.parametrize("mode", list(UPSTREAM))
def test_pyg_batches_are_the_ones_pyg_gave(pyg, mode) -> None:
    _, Data, _, _, NeighborLoader = pyg
    data = Data(
        x=torch.arange(12.0).view(6, 2), edge_index=torch.tensor(UPSTREAM_EDGES), num_nodes=6
    )
    loader = NeighborLoader(
        data, [], input_nodes=torch.tensor([0, 2, 0, 4, 5]), batch_size=4, seed=0, **MODES[mode]
    )
    batches = list(loader)
    assert len(batches) == len(loader) == 2
    for got, want in zip(batches, UPSTREAM[mode], strict=True):
        assert sorted(got.keys()) == sorted([*want, "x", "num_nodes"])
        for key, value in want.items():
            have = got[key]
            assert (have.tolist() if isinstance(have, torch.Tensor) else have) == value, key
        assert got.edge_index.dtype == got.e_id.dtype == got.n_id.dtype == torch.int64
        assert torch.equal(got.x, data.x[got.n_id]) and got.num_nodes == len(want["n_id"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fanouts", [[], [0]], ids=["no-hops", "zero-fanout"])
def test_pyg_batches_equal_pygs_node_loader_batch_by_batch(pyg, mode, fanouts) -> None:
    """Shuffled, repeated seeds: every batch is what PyG's NodeLoader joins from the upstream
    sampler output for the same seed positions (x, y, edge attributes, ids, counts)."""
    _, Data, NodeLoader, UpstreamSampler, NeighborLoader = pyg
    kw = MODES[mode]
    data = pyg_data(Data)
    for input_nodes in (seeds_with_repeats(), None):
        ours = NeighborLoader(
            data, fanouts, input_nodes=input_nodes, batch_size=16, shuffle=True, seed=3, **kw
        )
        theirs = NodeLoader(data, UpstreamSampler(data, len(fanouts), kw), input_nodes=input_nodes)
        batches = list(ours)
        assert len(batches) == len(ours)
        seen = []
        for batch in batches:
            same_data(batch, theirs(batch.input_id))
            assert torch.equal(batch.x, data.x[batch.n_id])
            seen.append(batch.input_id)
        positions = torch.cat(seen)
        assert sorted(positions.tolist()) == list(range(len(ours.dataset)))
        assert positions.tolist() != sorted(positions.tolist())  # shuffled


def test_pyg_features_from_an_ibp_table_are_the_seeds_rows(pyg, tmp_path) -> None:
    _, Data, _, _, NeighborLoader = pyg
    data = pyg_data(Data)
    table = ibp_graph.compress(data.x, tmp_path / "x.ibp", progress=False)
    seeds = seeds_with_repeats()
    loader = NeighborLoader(data, [], input_nodes=seeds, batch_size=16, features=table, seed=0)
    for batch in loader:
        assert torch.equal(batch.n_id, seeds[batch.input_id])
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])
        assert batch.edge_index.shape == (2, 0) and batch.edge_attr.shape == (0, 2)
    assert loader.stats.rows == seeds.numel()
    assert repr(loader).startswith("NeighborLoader(num_nodes=120, num_neighbors=[]")


def test_pyg_neighbor_sampler_argument_with_no_hops(pyg, monkeypatch) -> None:
    tg, Data, _, _, NeighborLoader = pyg
    from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler

    from ibp_graph import loading
    from ibp_graph.loading import ArgumentIgnoredWarning

    monkeypatch.setattr(loading, "_WARNED", set())  # the one-time warning shows again
    data = pyg_data(Data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyG's advice to install pyg-lib
        theirs = PyGNeighborSampler(data, [])
    with pytest.warns(ArgumentIgnoredWarning, match="neighbor_sampler"):
        loader = NeighborLoader(data, [3], batch_size=32, neighbor_sampler=theirs)
    assert loader.num_neighbors == []
    for batch in loader:
        assert batch.num_nodes == batch.batch_size and batch.num_sampled_edges == []


@pytest.mark.parametrize("mode", MODES)
def test_pyg_batches_equal_pygs_own_neighbor_loader(pyg, mode) -> None:
    """Where pyg-lib (and torch-sparse, for induced) are importable: PyG's NeighborLoader
    itself, batch by batch."""
    tg, Data, _, _, NeighborLoader = pyg
    kw = MODES[mode]
    if not tg.typing.WITH_PYG_LIB:
        pytest.skip("PyG's neighbor sampler needs pyg-lib, which is not installed")
    if mode == "induced" and not tg.typing.WITH_TORCH_SPARSE:
        pytest.skip("PyG samples induced subgraphs with torch-sparse, which is not installed")
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader

    data = pyg_data(Data)
    seeds = seeds_with_repeats()
    ours = NeighborLoader(data, [], input_nodes=seeds, batch_size=16, shuffle=True, seed=1, **kw)
    theirs = PyGNeighborLoader(data, [], input_nodes=seeds, batch_size=16, **kw)
    for batch in ours:
        want = theirs(batch.input_id)
        if mode == "induced":  # PyG's CSC sort leaves the order within a target unspecified
            key = batch.edge_index[1] * 10**6 + batch.e_id
            order = torch.argsort(key)
            their_key = want.edge_index[1] * 10**6 + want.e_id
            their_order = torch.argsort(their_key)
            for name in ("edge_index", "e_id", "edge_attr"):
                dim = -1 if name == "edge_index" else 0
                batch[name] = batch[name].index_select(dim, order)
                want[name] = want[name].index_select(dim, their_order)
        same_data(batch, want)


# --------------------------------------------------------------------------------------------
# DGL
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dgl_mods():
    try:
        from ibp_graph.loaders import dgl as ours
    except ImportError as exc:  # DGL (the 'dgl' extra) not installed, or not importable
        pytest.skip(f"DGL cannot be imported: {exc}")
    import dgl

    return dgl, ours


def dgl_graph(dgl, idtype=torch.int64):
    ei = edge_index()
    g = dgl.graph((ei[0], ei[1]), num_nodes=N, idtype=idtype)
    gen = torch.Generator().manual_seed(1)
    g.ndata["feat"] = torch.randn(N, 5, generator=gen)
    g.ndata["label"] = torch.randint(0, 3, (N,), generator=gen)
    g.edata["w"] = torch.randn(ei.shape[1], generator=gen)
    return g


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DGL's loader advises on CPU affinity every epoch
        return fn(*args, **kwargs)


@pytest.mark.parametrize("idtype", [torch.int64, torch.int32])
def test_dgl_sample_blocks_gives_dgls_triple(dgl_mods, idtype) -> None:
    dgl, ours = dgl_mods
    g = dgl_graph(dgl, idtype)
    for seeds in (seeds_with_repeats().to(idtype), torch.tensor([3, 3], dtype=torch.int64)):
        theirs = dgl.dataloading.NeighborSampler([]).sample_blocks(g, seeds)
        got = ours.NeighborSampler([]).sample_blocks(g, seeds)
        assert theirs[2] == [] and got[2] == []
        for a, b in zip(got[:2], theirs[:2], strict=True):
            assert a.dtype == b.dtype == seeds.dtype and torch.equal(a, b)
    with pytest.raises(IBPInputError, match=rf"seeds\[0\] = {N} is out of range"):
        ours.NeighborSampler([]).sample_blocks(g, torch.tensor([N]))


def test_dgl_sample_fails_on_blocks_0_as_dgls_does(dgl_mods) -> None:
    dgl, ours = dgl_mods
    g = dgl_graph(dgl)
    seeds = torch.tensor([1, 2])
    with pytest.raises(IndexError):
        dgl.dataloading.NeighborSampler([]).sample(g, seeds)
    with pytest.raises(IndexError):
        ours.NeighborSampler([]).sample(g, seeds)
    for sampler in (dgl.dataloading.NeighborSampler([]), ours.NeighborSampler([])):
        loader = dgl.dataloading.DataLoader(g, torch.arange(8), sampler, batch_size=4)
        with pytest.raises(IndexError):  # DGL's loader: at the first batch
            quiet(lambda loader=loader: next(iter(loader)))


@pytest.mark.parametrize("make", ["ours", "dgls"])
def test_dgl_loader_refuses_no_fanouts_when_built(dgl_mods, make) -> None:
    dgl, ours = dgl_mods
    g = dgl_graph(dgl)
    sampler = ours.NeighborSampler([]) if make == "ours" else dgl.dataloading.NeighborSampler([])
    with pytest.raises(IBPInputError, match=r"^fanouts=\[\] gives no blocks .*fanouts=\[0\]"):
        ours.DataLoader(g, torch.arange(8), sampler, batch_size=4)


def same_block(a, b) -> None:
    assert a.idtype == b.idtype
    assert (a.num_src_nodes(), a.num_dst_nodes(), a.num_edges()) == (
        b.num_src_nodes(),
        b.num_dst_nodes(),
        b.num_edges(),
    )
    dgl = pytest.importorskip("dgl")
    for x, y in (
        (a.srcdata[dgl.NID], b.srcdata[dgl.NID]),
        (a.dstdata[dgl.NID], b.dstdata[dgl.NID]),
        (a.edata[dgl.EID], b.edata[dgl.EID]),
        *zip(a.edges(), b.edges(), strict=True),
    ):
        assert x.dtype == y.dtype and torch.equal(x, y)
    assert sorted(a.srcdata.keys()) == sorted(b.srcdata.keys())
    assert torch.equal(a.srcdata["feat"], b.srcdata["feat"])


@pytest.mark.parametrize("idtype", [torch.int64, torch.int32])
def test_dgl_zero_fanout_blocks_are_dgls_unfused_blocks(dgl_mods, idtype) -> None:
    """``[0]`` (already given before): DGL's own loader with its unfused sampler, batch by
    batch, and with a shuffle (each batch against DGL's sampler on its seeds)."""
    dgl, ours = dgl_mods
    g = dgl_graph(dgl, idtype)
    indices = seeds_with_repeats().to(idtype)
    dgl_sampler = dgl.dataloading.NeighborSampler([0], fused=False)
    theirs = quiet(list, dgl.dataloading.DataLoader(g, indices, dgl_sampler, batch_size=16))
    mine = list(ours.DataLoader(g, indices, ours.NeighborSampler([0]), batch_size=16, seed=0))
    assert len(mine) == len(theirs) == 3
    for (inp, out, blocks), (t_inp, t_out, t_blocks) in zip(mine, theirs, strict=True):
        for a, b in ((inp, t_inp), (out, t_out)):
            assert a.dtype == b.dtype == idtype and torch.equal(a, b)
        (block,), (their,) = blocks, t_blocks
        same_block(block, their)
        assert torch.equal(block.dstdata["label"], g.ndata["label"][out.long()])
    shuffled = ours.DataLoader(
        g, indices, ours.NeighborSampler([0]), batch_size=16, shuffle=True, seed=4
    )
    outs = []
    for inp, out, blocks in shuffled:
        their = dgl_sampler.sample_blocks(g, out)
        assert torch.equal(inp, their[0])
        same_block(blocks[0], their[2][0])
        assert torch.equal(blocks[0].srcdata["feat"], g.ndata["feat"][inp.long()])
        outs.append(out)
    assert sorted(torch.cat(outs).tolist()) == sorted(indices.tolist())


# --------------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------------


@gpu
@needs_gpu
@pytest.mark.parametrize("mode", ["default", "disjoint", "bidirectional", "induced"])
@pytest.mark.parametrize(
    ("backend", "cuda_graph"), [("torch", False), ("kernel", False), ("kernel", True)]
)
def test_cuda_no_hops_are_the_cpu_batch_without_a_launch(mode, backend, cuda_graph) -> None:
    if backend == "kernel":
        pytest.importorskip("cupy")
    kw = MODES[mode]
    ei = edge_index()
    g = CSRGraph.from_edge_index(ei, N)
    seeds = seeds_with_repeats()
    want = NeighborSampler(g, [], seed=0, **kw).sample(seeds)
    sampler = NeighborSampler(
        g.to("cuda"), [], seed=0, backend=backend, cuda_graph=cuda_graph, **kw
    )
    state = sampler.generator.get_state()
    assert sampler.capture_sizes([seeds.numel()]) == []
    for given in (seeds, seeds.cuda(), seeds, seeds.cuda()):
        got = sampler.sample(given)
        assert got.node.is_cuda and got.row.is_cuda
        check_seeds_only(
            SampledBatch(
                node=got.node.cpu(),
                row=got.row.cpu(),
                col=got.col.cpu(),
                edge=got.edge.cpu(),
                batch_size=got.batch_size,
                num_sampled_nodes=got.num_sampled_nodes,
                num_sampled_edges=got.num_sampled_edges,
                batch=None if got.batch is None else got.batch.cpu(),
            ),
            seeds,
            kw,
            ei,
            N,
        )
        for name in ("node", "row", "col", "edge"):
            assert torch.equal(getattr(got, name).cpu(), getattr(want, name)), name
    assert torch.equal(sampler.generator.get_state(), state)  # nothing drawn
    if backend == "kernel":
        assert sampler._hop_kernels._entries == {}  # no kernel was ever launched
        assert sampler._replay is None or sampler._replay.graphs == {}


@gpu
@needs_gpu
def test_cuda_pyg_loader_with_no_hops_gives_the_cpu_batches(pyg) -> None:
    _, Data, _, _, NeighborLoader = pyg
    data = pyg_data(Data)
    seeds = seeds_with_repeats()
    cpu = list(NeighborLoader(data, [], input_nodes=seeds, batch_size=16, seed=0))
    cuda = NeighborLoader(data, [], input_nodes=seeds, batch_size=16, seed=0, device="cuda")
    for _ in range(2):
        for a, b in zip(cuda, cpu, strict=True):
            assert a.x.is_cuda and a.n_id.is_cuda and a.edge_index.is_cuda
            assert a.num_sampled_nodes == b.num_sampled_nodes and a.num_sampled_edges == []
            for key in ("n_id", "x", "y", "edge_index", "e_id", "input_id"):
                assert torch.equal(a[key].cpu(), b[key]), key
