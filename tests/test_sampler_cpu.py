"""The compiled CPU hop (`ibp_graph.sample_cpu`): its draws, and agreement with torch ops."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter

import numpy as np
import pytest
import torch

from ibp_graph import sample_cpu, threads
from ibp_graph import sampler as sampler_mod
from ibp_graph.graph import CSRGraph
from ibp_graph.sampler import NeighborSampler

pytestmark = pytest.mark.skipif(not sample_cpu.available(), reason="needs Numba")


def draw(deg: int, k: int, replace: bool, rows: int, seed: int = 0) -> np.ndarray:
    """``rows`` draws of ``_draw`` with independent states: ``(rows, k)``."""
    out = np.empty((rows, k), np.int64)
    picks = np.empty(k, np.int64)
    for r in range(rows):
        state = np.uint64(sample_cpu._mix(np.uint64(seed * 1_000_003 + r)))
        sample_cpu._draw(deg, k, replace, state, picks)
        out[r] = picks
    return out


def test_below_is_the_high_word_of_the_product():
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 2**64, size=200, dtype=np.uint64, endpoint=False)
    for n in (1, 2, 7, 1000, 2**31 + 5, 2**32 - 1):
        for x in xs[:50]:
            assert sample_cpu._below(x, n) == (int(x) * n) >> 64
    for x in xs[:20]:  # ranges of 2**32 and more take the remainder
        assert sample_cpu._below(x, 2**33 + 1) == int(x) % (2**33 + 1)


@pytest.mark.parametrize(("deg", "k"), [(10, 3), (6, 5), (9, 1)])
def test_floyd_draw_is_uniform_over_subsets(deg, k):
    stats = pytest.importorskip("scipy.stats", reason="the chi-square checks need SciPy")
    chosen = draw(deg, k, False, 6000)
    assert (np.diff(chosen, axis=1) > 0).all() and chosen.min() >= 0 and chosen.max() < deg
    counts = Counter(map(tuple, chosen.tolist()))
    observed = [counts.get(s, 0) for s in itertools.combinations(range(deg), k)]
    assert sum(observed) == 6000
    assert stats.chisquare(observed).pvalue > 1e-4


def test_selection_sampling_for_large_fanouts():
    """Fanouts above FLOYD_MAX_K: distinct, ascending, each offset with probability k / deg."""
    stats = pytest.importorskip("scipy.stats", reason="the chi-square checks need SciPy")
    k, deg, rows = sample_cpu.FLOYD_MAX_K + 6, 100, 3000
    chosen = draw(deg, k, False, rows)
    assert (np.diff(chosen, axis=1) > 0).all() and chosen.min() >= 0 and chosen.max() < deg
    hits = np.bincount(chosen.ravel(), minlength=deg)
    assert stats.chisquare(hits).pvalue > 1e-4
    # The complement (30 left out of 100) is uniform too: check pairs left out together.
    left = np.ones((rows, deg), bool)
    np.put_along_axis(left, chosen, False, axis=1)
    both = (left[:, 0] & left[:, 99]).mean()
    assert abs(both - (30 / 100) * (29 / 99)) < 0.03


def test_replace_draw_is_independent_uniform():
    stats = pytest.importorskip("scipy.stats", reason="the chi-square checks need SciPy")
    chosen = draw(3, 5, True, 4000)
    assert (np.diff(chosen, axis=1) >= 0).all()
    assert stats.chisquare(np.bincount(chosen.ravel(), minlength=3)).pvalue > 1e-4
    ones = (chosen == 1).sum(axis=1)
    expected = [4000 * stats.binom.pmf(i, 5, 1 / 3) for i in range(6)]
    assert stats.chisquare(np.bincount(ones, minlength=6), expected).pvalue > 1e-4


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"draw": "per_hop"}, {"subgraph_type": "induced"}, {"subgraph_type": "bidirectional"}],
)
@pytest.mark.parametrize("indices_dtype", [torch.int64, torch.int32])
def test_full_fanout_same_as_torch_ops(monkeypatch, kwargs, indices_dtype):
    """Where nothing is random (fanout -1 or above every degree), both paths agree exactly."""
    ei = torch.randint(0, 90, (2, 600), generator=torch.Generator().manual_seed(3))
    g = CSRGraph.from_edge_index(ei, 100, indices_dtype=indices_dtype)
    seeds = torch.tensor([5, 17, 5, 99, 42])
    for fanouts in ([-1, -1], [1000, 1000, 1000]):
        compiled = NeighborSampler(g, fanouts, seed=0, **kwargs).sample(seeds)
        monkeypatch.setattr(sampler_mod, "_COMPILED", False)
        ops = NeighborSampler(g, fanouts, seed=0, **kwargs).sample(seeds)
        monkeypatch.setattr(sampler_mod, "_COMPILED", True)
        for f in ("node", "row", "col", "edge"):
            assert torch.equal(getattr(compiled, f), getattr(ops, f)), f
        assert compiled.num_sampled_nodes == ops.num_sampled_nodes
        assert compiled.num_sampled_edges == ops.num_sampled_edges


def test_workspace_is_reused_and_not_pickled():
    ei = torch.randint(0, 200, (2, 3000), generator=torch.Generator().manual_seed(0))
    s = NeighborSampler(CSRGraph.from_edge_index(ei, 200), [5, 5], seed=1)
    first = s.sample(torch.arange(0, 200, 3))
    buffers = {k: v.ctypes.data for k, v in s._work.buffers.items()}
    second = s.sample(torch.arange(0, 200, 3))
    assert {k: v.ctypes.data for k, v in s._work.buffers.items()} == buffers
    # Outputs own their memory: the next batch does not overwrite them.
    assert not np.shares_memory(first.row.numpy(), second.row.numpy())
    assert first.num_edges > 0 and (s._map == sampler_mod.UNSEEN).all()
    clone = pickle.loads(pickle.dumps(s))
    assert clone._work is None
    assert torch.equal(clone.sample(torch.tensor([1, 2])).node, s.sample(torch.tensor([1, 2])).node)


@pytest.mark.parametrize("draw", ["once", "per_hop"])
def test_disjoint_hash_table_grows_and_is_reset(monkeypatch, draw):
    """Many trees (the table grows during the batch), two batches in a row: as torch ops."""
    ei = torch.randint(0, 400, (2, 4000), generator=torch.Generator().manual_seed(1))
    g = CSRGraph.from_edge_index(ei, 400)
    compiled = NeighborSampler(g, [-1, -1], seed=0, disjoint=True, draw=draw)
    monkeypatch.setattr(sampler_mod, "_COMPILED", False)
    ops = NeighborSampler(g, [-1, -1], seed=0, disjoint=True, draw=draw)
    for seeds in (torch.arange(0, 400, 2), torch.arange(1, 400, 5).flip(0)):
        monkeypatch.setattr(sampler_mod, "_COMPILED", True)
        a = compiled.sample(seeds)
        monkeypatch.setattr(sampler_mod, "_COMPILED", False)
        b = ops.sample(seeds)
        assert a.num_nodes > 4096  # more keys than the first table holds
        for f in ("node", "row", "col", "edge", "batch"):
            assert torch.equal(getattr(a, f), getattr(b, f)), f
        assert a.num_sampled_nodes == b.num_sampled_nodes
    assert compiled._map is None  # disjoint trees do not use the dense map


FIELDS = ("node", "row", "col", "edge", "batch", "num_sampled_nodes", "num_sampled_edges")


def same_batches(a, b) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y, f


@pytest.fixture
def small_spans(monkeypatch):
    """Spans of 16 frontier nodes, so that a small graph's hops are shared between threads."""
    monkeypatch.setattr(sample_cpu, "MIN_SPAN", 16)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"draw": "per_hop"},
        {"replace": True},
        {"disjoint": True},
        {"disjoint": True, "draw": "per_hop"},
        {"subgraph_type": "induced"},
        {"num_neighbors": [-1, 0, 3]},
        {"num_neighbors": [70, 2]},  # selection sampling above FLOYD_MAX_K
    ],
)
def test_threads_draw_the_same_batches(small_spans, kwargs):
    """Any thread count gives the same batch, bit for bit, as one thread."""
    gen = torch.Generator().manual_seed(5)
    ei = torch.cat([torch.randint(0, 3000, (2, 30000), generator=gen), torch.zeros(2, 0).long()], 1)
    ei[1, :2000] = 7  # a node with 2,000 in-neighbors and more
    g = CSRGraph.from_edge_index(ei, 3000)
    kwargs = {"num_neighbors": [8, 5, 4], **kwargs}
    seeds = torch.randperm(3000, generator=gen)[:300]
    ref = NeighborSampler(g, seed=3, **kwargs)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        expected = [ref.sample(seeds), ref.sample(seeds.flip(0))]
        for count in (2, 3, 8):
            torch.set_num_threads(count)
            s = NeighborSampler(g, seed=3, **kwargs)
            for want, ids in zip(expected, (seeds, seeds.flip(0)), strict=True):
                same_batches(s.sample(ids), want)
            if not kwargs.get("disjoint"):
                assert (s._map == sampler_mod.UNSEEN).all()
    finally:
        torch.set_num_threads(before)
    assert expected[0].num_edges > 1000


def _sample_in_child(queue, graph, seeds):
    torch.set_num_threads(2)
    queue.put(NeighborSampler(graph, [6, 4], seed=1).sample(seeds).row.tolist())


def test_a_forked_child_samples_on_a_pool_of_its_own(small_spans):
    """A forked child starts a pool (and a lock) of its own: the parent's do not carry over."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the fork start method")
    ei = torch.randint(0, 500, (2, 8000), generator=torch.Generator().manual_seed(2))
    g = CSRGraph.from_edge_index(ei, 500)
    seeds = torch.arange(0, 500, 2)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        want = NeighborSampler(g, [6, 4], seed=1).sample(seeds).row  # the parent's pool starts
        assert threads._pool is not None
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_sample_in_child, args=(queue, g, seeds))
        with threads._pool_lock:  # as if a parent thread were setting the pool up
            child.start()
        got = queue.get(timeout=60)
        child.join(timeout=60)
    finally:
        torch.set_num_threads(before)
    assert child.exitcode == 0
    assert got == want.tolist()
