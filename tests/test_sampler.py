"""CSRGraph construction and the uniform neighbor sampler (PyG NeighborLoader semantics)."""

from __future__ import annotations

import gc
import itertools
import pickle
import warnings
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import in_lists, random_graph, reference_sample

from ibp_graph import sampler as sampler_mod
from ibp_graph.errors import IBPInputError
from ibp_graph.graph import CSRGraph
from ibp_graph.sample_draw import RANDOM_BITS
from ibp_graph.sampler import (
    NeighborSampler,
    SampledBatch,
    floyd_sample,
    random_keys_sample,
)

# Every test runs with the compiled CPU hop (Numba) and with the torch-ops hop.
pytestmark = pytest.mark.usefixtures("hop_path")


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def check_batch(
    batch: SampledBatch, edge_index: torch.Tensor, n: int, seeds: torch.Tensor, fanouts
) -> None:
    """Every invariant of a batch that does not depend on the random choices."""
    adj = in_lists(edge_index, n)
    deg = [len(a) for a in adj]
    node = batch.node.tolist()
    row, col, edge = batch.row.tolist(), batch.col.tolist(), batch.edge.tolist()
    assert batch.batch_size == seeds.numel()
    assert node[: batch.batch_size] == seeds.tolist()
    assert torch.equal(batch.seed_node.cpu(), seeds.cpu())
    assert sum(batch.num_sampled_nodes) == len(node)
    assert sum(batch.num_sampled_edges) == len(row) == len(col) == len(edge)
    assert len(batch.num_sampled_nodes) == len(batch.num_sampled_edges) + 1 == len(fanouts) + 1
    for t in (batch.node, batch.row, batch.col, batch.edge):
        assert t.dtype == torch.int64
    if len(set(seeds.tolist())) == seeds.numel():
        assert len(set(node)) == len(node)
    # Local ids: a node's first position.
    first = {}
    for i, v in enumerate(node):
        first.setdefault(v, i)
    pairs = set(map(tuple, edge_index.t().tolist()))
    ei = edge_index.tolist()
    e0 = 0
    n_begin, n_end = 0, batch.batch_size
    known = set(node[:n_end])
    for h, fanout in enumerate(fanouts):
        ne = batch.num_sampled_edges[h]
        hrow, hcol, hedge = row[e0 : e0 + ne], col[e0 : e0 + ne], edge[e0 : e0 + ne]
        # Targets are the frontier, in order, grouped.
        assert all(n_begin <= c < n_end for c in hcol)
        assert hcol == sorted(hcol)
        per_target = Counter(hcol)
        for t in range(n_begin, n_end):
            want = deg[node[t]] if fanout < 0 else min(deg[node[t]], fanout)
            assert per_target.get(t, 0) == want
        # Sampled edges exist, ids point at them, no edge twice for a target, CSR order.
        for r, c, e in zip(hrow, hcol, hedge, strict=True):
            src, dst = node[r], node[c]
            assert (src, dst) in pairs
            assert ei[0][e] == src and ei[1][e] == dst
            assert r == first[src]
        by_target: dict[int, list[int]] = {}
        for c, e in zip(hcol, hedge, strict=True):
            by_target.setdefault(c, []).append(e)
        for es in by_target.values():
            assert es == sorted(set(es))
        # New nodes of this hop: sources not seen before, in order of first appearance.
        new = []
        for r in hrow:
            v = node[r]
            if v not in known:
                known.add(v)
                new.append(v)
        assert node[n_end : n_end + batch.num_sampled_nodes[h + 1]] == new
        e0 += ne
        n_begin, n_end = n_end, n_end + len(new)
    assert n_end == len(node)
    # Derived properties.
    assert torch.equal(batch.edge_index, torch.stack([batch.row, batch.col]))
    assert torch.equal(batch.global_row, batch.node[batch.row])
    assert torch.equal(batch.global_col, batch.node[batch.col])
    assert batch.num_nodes == len(node) and batch.num_edges == len(row)


def same_batch(a: SampledBatch, b: SampledBatch) -> bool:
    return (
        all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("node", "row", "col", "edge"))
        and a.num_sampled_nodes == b.num_sampled_nodes
        and a.num_sampled_edges == b.num_sampled_edges
    )


# A hand-made graph: edges (position: src -> dst).
#   0: 0->1  1: 1->2  2: 2->1  3: 3->1  4: 4->0  5: 1->0  6: 5->3
HAND = torch.tensor([[0, 1, 2, 3, 4, 1, 5], [1, 2, 1, 1, 0, 0, 3]])


# --------------------------------------------------------------------------------------------
# CSRGraph
# --------------------------------------------------------------------------------------------


def test_csr_hand_made():
    g = CSRGraph.from_edge_index(HAND, 7)
    assert g.num_nodes == 7 and g.num_edges == 7
    assert g.indptr.tolist() == [0, 2, 5, 6, 7, 7, 7, 7]
    assert g.indices.tolist() == [4, 1, 0, 2, 3, 1, 5]
    assert g.edge_ids.tolist() == [4, 5, 0, 2, 3, 1, 6]
    assert g.in_degree().tolist() == [2, 3, 1, 1, 0, 0, 0]
    assert g.indptr.dtype == torch.int64 and g.edge_ids.dtype == torch.int64
    assert "num_nodes=7" in repr(g) and "num_edges=7" in repr(g)


@pytest.mark.parametrize("seed", range(3))
def test_csr_random_matches_edges(seed):
    ei = random_graph(seed)
    g = CSRGraph.from_edge_index(ei)
    assert g.num_nodes == int(ei.max()) + 1
    for v, entries in enumerate(in_lists(ei, g.num_nodes)):
        s, t = int(g.indptr[v]), int(g.indptr[v + 1])
        assert g.indices[s:t].tolist() == [u for u, _ in entries]
        assert g.edge_ids[s:t].tolist() == [e for _, e in entries]


def test_csr_inputs_not_modified_and_numpy():
    ei = random_graph(1)
    before = ei.clone()
    CSRGraph.from_edge_index(ei, 60, add_reverse=True, indices_dtype=torch.int32)
    assert torch.equal(ei, before)
    arr = ei.numpy().astype(np.int32)
    arr.flags.writeable = False
    g_np = CSRGraph.from_edge_index(arr, 60)
    g_t = CSRGraph.from_edge_index(ei, 60)
    assert torch.equal(g_np.indices, g_t.indices) and torch.equal(g_np.edge_ids, g_t.edge_ids)


def test_csr_int32_indices():
    ei = random_graph(2)
    g = CSRGraph.from_edge_index(ei, 60, indices_dtype=torch.int32)
    g64 = CSRGraph.from_edge_index(ei, 60)
    assert g.indices.dtype == torch.int32
    assert torch.equal(g.indices.long(), g64.indices)
    seeds = torch.tensor([0, 5, 9, 31, 58])
    a = NeighborSampler(g, [4, 3], seed=3).sample(seeds)
    b = NeighborSampler(g64, [4, 3], seed=3).sample(seeds)
    assert same_batch(a, b)
    check_batch(a, ei, 60, seeds, [4, 3])


def test_csr_add_reverse():
    g = CSRGraph.from_edge_index(HAND, 7, add_reverse=True)
    assert g.num_edges == 2 * HAND.size(1)
    e = HAND.size(1)
    both = torch.cat([HAND, HAND.flip(0)], dim=1)
    for v in range(7):
        s, t = int(g.indptr[v]), int(g.indptr[v + 1])
        ids = g.edge_ids[s:t].tolist()
        assert ids == sorted(ids)
        assert set(ids) == {i for i in range(2 * e) if int(both[1, i]) == v}
        assert g.indices[s:t].tolist() == [int(both[0, i]) for i in ids]
    # Sampled edge ids index cat([edge_index, edge_index.flip(0)]).
    batch = NeighborSampler(g, [-1, -1], seed=0).sample(torch.tensor([2]))
    check_batch(batch, both, 7, torch.tensor([2]), [-1, -1])


def test_csr_from_data_and_ogb():
    data = SimpleNamespace(edge_index=HAND, num_nodes=9)
    g = CSRGraph.from_data(data)
    assert g.num_nodes == 9 and g.num_edges == 7
    g2 = CSRGraph.from_data(SimpleNamespace(edge_index=HAND))  # num_nodes inferred
    assert g2.num_nodes == 6
    g3 = CSRGraph.from_ogb({"edge_index": HAND.numpy(), "num_nodes": np.int64(7)})
    ref = CSRGraph.from_edge_index(HAND, 7)
    assert torch.equal(g3.indptr, ref.indptr) and torch.equal(g3.indices, ref.indices)
    g4 = CSRGraph.from_ogb({"edge_index": HAND.numpy(), "num_nodes": 7}, add_reverse=True)
    assert g4.num_edges == 14


def test_csr_to_and_pin_memory_keep_data():
    g = CSRGraph.from_edge_index(random_graph(0), 60)
    moved = g.to("cpu")
    assert torch.equal(moved.indptr, g.indptr) and torch.equal(moved.indices, g.indices)
    assert moved.device.type == "cpu"
    if torch.cuda.is_available():
        pinned = g.pin_memory()
        assert pinned.is_pinned()
    else:
        with pytest.warns(UserWarning, match="no CUDA device"):
            pinned = g.pin_memory()
    for f in ("indptr", "indices", "edge_ids"):
        assert torch.equal(getattr(pinned, f), getattr(g, f))
    assert pinned.num_nodes == g.num_nodes


@pytest.mark.parametrize(
    ("edge_index", "kwargs", "match"),
    [
        ([[0, 1], [1, 0]], {}, "must be a torch.Tensor or numpy.ndarray, got 'list'"),
        (torch.zeros(3, 4, dtype=torch.long), {}, r"shape \(2, num_edges\), got \(3, 4\)"),
        (torch.zeros(8, dtype=torch.long), {}, r"shape \(2, num_edges\), got \(8,\)"),
        (torch.zeros(2, 4), {}, "must hold integers, got dtype torch.float32"),
        (torch.zeros(2, 4, dtype=torch.bool), {}, "must hold integers"),
        (np.zeros((2, 4)), {}, "must be an integer array, got dtype float64"),
        (torch.tensor([[0, 1, 2], [1, -4, 0]]), {}, r"edge_index\[1, 1\] = -4 is negative"),
        (
            torch.tensor([[0, 1, 9, 7], [1, 2, 0, 0]]),
            {"num_nodes": 5},
            r"edge_index\[0, 2\] = 9 is out of range for num_nodes=5",
        ),
        (torch.tensor([[0], [1]]), {"num_nodes": 0}, "num_nodes must be >= 1, got 0"),
        (torch.tensor([[0], [1]]), {"num_nodes": 2.0}, "num_nodes must be an int, got 'float'"),
        (torch.zeros(2, 0, dtype=torch.long), {}, "edge_index is empty: pass num_nodes"),
        (torch.tensor([[0], [1]]), {"indices_dtype": torch.int16}, "indices_dtype must be"),
        (torch.tensor([[0], [1]]), {"add_reverse": 1}, "add_reverse must be a bool"),
    ],
)
def test_csr_bad_inputs(edge_index, kwargs, match):
    with pytest.raises(IBPInputError, match=match):
        CSRGraph.from_edge_index(edge_index, **kwargs)


def test_csr_bad_containers():
    with pytest.raises(IBPInputError, match="data must have an 'edge_index'"):
        CSRGraph.from_data(SimpleNamespace(x=1))
    with pytest.raises(IBPInputError, match="missing"):
        CSRGraph.from_ogb({"edge_index": HAND.numpy()})
    with pytest.raises(IBPInputError, match="OGB graph dict"):
        CSRGraph.from_ogb([HAND])
    with pytest.raises(IBPInputError, match="indptr must be int64"):
        CSRGraph(torch.zeros(3, dtype=torch.int32), torch.zeros(0), torch.zeros(0), 2)


def _pairs_of(g: CSRGraph) -> tuple[torch.Tensor, torch.Tensor]:
    both = torch.stack([g.indices.long(), g.edge_ids], 1)
    return both[:, 0], both[:, 1]


def test_csr_pairs_layout_is_kept_and_samples_alike():
    g = CSRGraph.from_edge_index(random_graph(4), 60)
    assert not g.pairs
    indices, edge_ids = _pairs_of(g)
    p = CSRGraph(g.indptr, indices, edge_ids, g.num_nodes)
    assert p.pairs and p.indices.data_ptr() == indices.data_ptr()  # kept, not copied
    assert repr(p).endswith("device=cpu, pairs=True)") and "pairs" not in repr(g)
    # What the hop kernels read: the (E, 2) sources and edge ids, or the indices alone.
    assert p.entries.shape == (g.num_edges, 2) and torch.equal(p.entries[:, 1], g.edge_ids)
    assert p.entries.data_ptr() == indices.data_ptr() and g.entries is g.indices
    assert p.to("cpu") is p
    back = p.to("cpu", non_blocking=False)
    assert back.pairs
    seeds = torch.tensor([0, 5, 9, 33])
    for fanouts in ([3, 2], [-1]):
        got = NeighborSampler(p, fanouts, seed=1).sample(seeds)
        want = NeighborSampler(g, fanouts, seed=1).sample(seeds)
        assert torch.equal(got.node, want.node) and torch.equal(got.edge, want.edge)
        assert torch.equal(got.row, want.row) and torch.equal(got.col, want.col)


def test_csr_as_pairs_and_back():
    g = CSRGraph.from_edge_index(random_graph(7), 60)
    p = g.as_pairs()
    assert p.pairs and p.as_pairs() is p and g.as_pairs(False) is g
    back = p.as_pairs(False)
    assert not back.pairs and back.indices.is_contiguous() and back.edge_ids.is_contiguous()
    for name in ("indptr", "indices", "edge_ids"):
        assert torch.equal(getattr(p, name), getattr(g, name))
        assert torch.equal(getattr(back, name), getattr(g, name))
    assert g.indices.stride() == (1,)  # the original is left as it was
    with pytest.raises(IBPInputError, match="this graph's indices are torch.int32"):
        CSRGraph.from_edge_index(random_graph(7), 60, indices_dtype=torch.int32).as_pairs()
    with pytest.raises(IBPInputError, match="pairs must be a bool"):
        g.as_pairs(1)


def test_csr_strided_arrays_that_are_not_pairs_are_made_contiguous():
    g = CSRGraph.from_edge_index(random_graph(5), 60)
    e = g.num_edges
    buf = torch.zeros((e + 1) * 2, dtype=torch.int64)
    # The right stride, but one word off 16-byte alignment: not pairs, each array copied.
    src, ids = buf[1 : 2 * e + 1 : 2], buf[2 : 2 * e + 2 : 2]
    src.copy_(g.indices)
    ids.copy_(g.edge_ids)
    shifted = CSRGraph(g.indptr, src, ids, g.num_nodes)
    assert not shifted.pairs
    assert shifted.indices.is_contiguous() and shifted.edge_ids.is_contiguous()
    assert torch.equal(shifted.indices, g.indices) and torch.equal(shifted.edge_ids, g.edge_ids)
    # Edge ids before their sources (the other order): not pairs either.
    indices, edge_ids = _pairs_of(g)
    swapped = CSRGraph(g.indptr, edge_ids.clone(), indices.clone(), g.num_nodes)
    assert not swapped.pairs


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pairs": True}, r"to_uva\(pairs=True\) interleaves 8-byte indices .* torch.int32"),
        ({"pairs": 1}, "pairs must be a bool"),
        ({"indptr_in_gpu": "yes"}, "indptr_in_gpu must be a bool"),
    ],
)
def test_uva_layout_arguments_are_checked_before_the_gpu(kwargs, match):
    g = CSRGraph.from_edge_index(random_graph(6), 60, indices_dtype=torch.int32)
    with pytest.raises(IBPInputError, match=match):
        g.to_uva("cuda", **kwargs)


def test_empty_graph_with_nodes():
    g = CSRGraph.from_edge_index(torch.zeros(2, 0, dtype=torch.long), 4)
    assert g.indptr.tolist() == [0] * 5
    batch = NeighborSampler(g, [3, -1]).sample(torch.tensor([1, 2]))
    assert batch.node.tolist() == [1, 2]
    assert batch.num_sampled_nodes == [2, 0, 0] and batch.num_sampled_edges == [0, 0]


# --------------------------------------------------------------------------------------------
# Sampler: exact batches
# --------------------------------------------------------------------------------------------


def test_hand_made_full_batch():
    g = CSRGraph.from_edge_index(HAND, 7)
    batch = NeighborSampler(g, [-1, -1], seed=0).sample(torch.tensor([1, 6]), torch.tensor([4, 2]))
    # Hop 1, into 1: 0 (e0), 2 (e2), 3 (e3); into 6: none. New: 0, 2, 3.
    # Hop 2, into 0: 4 (e4), 1 (e5); into 2: 1 (e1); into 3: 5 (e6). New: 4, 5.
    assert batch.node.tolist() == [1, 6, 0, 2, 3, 4, 5]
    assert batch.row.tolist() == [2, 3, 4, 5, 0, 0, 6]
    assert batch.col.tolist() == [0, 0, 0, 2, 2, 3, 4]
    assert batch.edge.tolist() == [0, 2, 3, 4, 5, 1, 6]
    assert batch.num_sampled_nodes == [2, 3, 2]
    assert batch.num_sampled_edges == [3, 4]
    assert batch.input_id.tolist() == [4, 2]
    assert batch.global_row.tolist() == [0, 2, 3, 4, 1, 1, 5]
    assert batch.global_col.tolist() == [1, 1, 1, 0, 0, 2, 3]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("hops", [1, 2, 3])
def test_full_fanout_matches_reference(seed, hops):
    ei = random_graph(seed, n=80, e=300)
    g = CSRGraph.from_edge_index(ei, 80)
    gen = torch.Generator().manual_seed(seed)
    seeds = torch.randint(0, 80, (7,), generator=gen)  # may repeat, may be isolated
    batch = NeighborSampler(g, [-1] * hops, seed=seed).sample(seeds)
    node, _, row, col, edge, nsn, nse = reference_sample(ei, 80, seeds.tolist(), hops)
    assert batch.node.tolist() == node
    assert batch.row.tolist() == row
    assert batch.col.tolist() == col
    assert batch.edge.tolist() == edge
    assert batch.num_sampled_nodes == nsn and batch.num_sampled_edges == nse
    # A fanout at least the largest degree is the same as -1.
    big = NeighborSampler(g, [1000] * hops, seed=seed).sample(seeds)
    assert same_batch(batch, big)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("fanouts", [[3, 2], [5, -1, 2], [1, 1, 1], [2, 0, 3]])
def test_random_fanout_invariants(seed, fanouts):
    ei = random_graph(seed, n=70, e=500)
    g = CSRGraph.from_edge_index(ei, 70)
    seeds = torch.randperm(70, generator=torch.Generator().manual_seed(seed))[:9]
    batch = NeighborSampler(g, fanouts, seed=seed).sample(seeds)
    check_batch(batch, ei, 70, seeds, fanouts)


def test_zero_fanout_hop_has_no_edges():
    g = CSRGraph.from_edge_index(HAND, 7)
    batch = NeighborSampler(g, [0, -1], seed=0).sample(torch.tensor([1]))
    assert batch.node.tolist() == [1]
    assert batch.num_sampled_nodes == [1, 0, 0] and batch.num_sampled_edges == [0, 0]


def test_duplicate_seeds_are_distinct_positions():
    ei = random_graph(7, n=30, e=200)
    g = CSRGraph.from_edge_index(ei, 30)
    seeds = torch.tensor([4, 9, 4, 4, 12])
    batch = NeighborSampler(g, [3, 2], seed=1).sample(seeds)
    check_batch(batch, ei, 30, seeds, [3, 2])
    hop1 = Counter(batch.col[: batch.num_sampled_edges[0]].tolist())
    assert hop1[0] == hop1[2] == hop1[3] == min(3, int(g.in_degree()[4]))
    assert 2 not in batch.row.tolist() and 3 not in batch.row.tolist()  # first position wins


def test_isolated_seeds_and_zero_degree_frontiers():
    ei = random_graph(3, n=50, e=150, isolated=10)
    g = CSRGraph.from_edge_index(ei, 50)
    isolated = torch.tensor([45, 41, 49])
    batch = NeighborSampler(g, [4, 4], seed=0).sample(isolated)
    assert batch.node.tolist() == [45, 41, 49]
    assert batch.num_sampled_nodes == [3, 0, 0] and batch.num_sampled_edges == [0, 0]
    assert batch.row.numel() == batch.col.numel() == batch.edge.numel() == 0
    # Mixed with nodes whose in-neighbors have no in-neighbors of their own.
    star = torch.tensor([[1, 2, 3], [0, 0, 0]])
    gs = CSRGraph.from_edge_index(star, 5)
    b = NeighborSampler(gs, [2, 3, 3], seed=0).sample(torch.tensor([0, 4]))
    assert b.num_sampled_nodes == [2, 2, 0, 0] and b.num_sampled_edges == [2, 0, 0]
    check_batch(b, star, 5, torch.tensor([0, 4]), [2, 3, 3])


def test_empty_seeds():
    g = CSRGraph.from_edge_index(HAND, 7)
    batch = NeighborSampler(g, [2, 2]).sample(torch.empty(0, dtype=torch.long))
    assert batch.batch_size == 0 and batch.num_nodes == 0 and batch.num_edges == 0


def test_seed_dtypes_and_numpy():
    g = CSRGraph.from_edge_index(HAND, 7)
    a = NeighborSampler(g, [2, 2], seed=5).sample(torch.tensor([1, 0], dtype=torch.int32))
    b = NeighborSampler(g, [2, 2], seed=5).sample(np.array([1, 0]))
    assert same_batch(a, b) and a.node.dtype == torch.int64


# --------------------------------------------------------------------------------------------
# Sampler: randomness
# --------------------------------------------------------------------------------------------


def test_deterministic_per_seed():
    ei = random_graph(4, n=200, e=3000)
    g = CSRGraph.from_edge_index(ei, 200)
    seeds = torch.arange(0, 200, 7)
    a = NeighborSampler(g, [5, 3], seed=11).sample(seeds)
    b = NeighborSampler(g, [5, 3], seed=11).sample(seeds)
    c = NeighborSampler(g, [5, 3], seed=12).sample(seeds)
    assert same_batch(a, b)
    assert not same_batch(a, c)
    # The stream moves on between calls, and reseeding restarts it.
    s = NeighborSampler(g, [5, 3], seed=11)
    first, second = s.sample(seeds), s.sample(seeds)
    assert same_batch(first, a) and not same_batch(first, second)
    s.manual_seed(11)
    assert same_batch(s.sample(seeds), a)
    # Pickling keeps the generator state (and drops the scratch map).
    s.manual_seed(11)
    s.sample(seeds)
    clone = pickle.loads(pickle.dumps(s))
    assert clone._map is None
    assert same_batch(clone.sample(seeds), s.sample(seeds))


def _subset_counts(chosen: torch.Tensor) -> Counter:
    return Counter(tuple(r) for r in chosen.tolist())


def _scipy_stats():
    """``scipy.stats`` for the chi-square checks; the test skips where SciPy is missing."""
    return pytest.importorskip("scipy.stats", reason="the chi-square checks need SciPy")


@pytest.mark.parametrize("fn", [floyd_sample, random_keys_sample])
@pytest.mark.parametrize(("deg", "k"), [(10, 3), (6, 5), (7, 1), (40, 3)])
def test_selection_exactly_uniform(fn, deg, k):
    stats = _scipy_stats()
    rows = 6000
    gen = torch.Generator().manual_seed(deg * 100 + k)
    chosen = fn(torch.full((rows,), deg, dtype=torch.int64), k, gen)
    assert chosen.shape == (rows, k)
    assert (chosen.diff(dim=1) > 0).all()  # distinct and ascending
    assert chosen.min() >= 0 and chosen.max() < deg
    counts = _subset_counts(chosen)
    subsets = list(itertools.combinations(range(deg), k))
    assert set(counts) <= set(subsets)
    observed = [counts.get(s, 0) for s in subsets]
    assert stats.chisquare(observed).pvalue > 1e-4


def test_floyd_sample_is_floyds_algorithm_on_its_draws():
    """Row by row, step by step, on the same draws: the same offsets."""
    deg = torch.tensor([16, 17, 100, 1000, 2**40, 16, 31])
    for k in (1, 2, 5, 15):
        gen = torch.Generator().manual_seed(k)
        state = gen.get_state()
        chosen = floyd_sample(deg, k, gen)
        draws = torch.randint(
            0, 2**RANDOM_BITS, (k, deg.numel()), generator=gen.set_state(state), dtype=torch.int64
        )
        for r, d in enumerate(deg.tolist()):
            taken: list[int] = []
            for s in range(k):
                j = d - k + s
                t = int(draws[s, r]) % (j + 1)
                taken.append(j if t in taken else t)
            assert chosen[r].tolist() == sorted(taken), (k, r)


def test_selection_mixed_degrees():
    deg = torch.tensor([4, 100, 5, 17, 1000])
    for fn in (floyd_sample, random_keys_sample):
        chosen = fn(deg, 3, torch.Generator().manual_seed(0))
        assert ((chosen >= 0) & (chosen < deg.unsqueeze(1))).all()
        assert (chosen.diff(dim=1) > 0).all()


@pytest.mark.parametrize("sort_cost", [0, 10**9], ids=["random-keys", "floyd"])
def test_neighbor_frequencies_uniform(monkeypatch, sort_cost):
    """A node with 10 in-neighbors, fanout 3, 3000 draws: each neighbor with frequency 0.3."""
    stats = _scipy_stats()
    monkeypatch.setattr(sampler_mod, "_SORT_COST_PER_ENTRY", sort_cost)
    ei = torch.tensor([list(range(1, 11)), [0] * 10])
    g = CSRGraph.from_edge_index(ei, 11)
    draws = 3000
    batch = NeighborSampler(g, [3], seed=0).sample(torch.zeros(draws, dtype=torch.long))
    assert batch.num_sampled_edges == [3 * draws]
    picked = batch.global_row.view(draws, 3)
    assert (picked.sort(dim=1).values.diff(dim=1) > 0).all()  # without replacement
    freq = torch.bincount(batch.global_row, minlength=11)[1:].double() / draws
    assert torch.allclose(freq, torch.full((10,), 0.3, dtype=torch.double), atol=0.04)
    observed = torch.bincount(batch.global_row, minlength=11)[1:].tolist()
    assert stats.chisquare(observed).pvalue > 1e-4
    # Every 3-subset about equally often (120 subsets, 25 expected each).
    counts = _subset_counts(picked.sort(dim=1).values)
    observed = [counts.get(s, 0) for s in itertools.combinations(range(1, 11), 3)]
    assert stats.chisquare(observed).pvalue > 1e-4


# --------------------------------------------------------------------------------------------
# Sampler: validation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_neighbors", "match"),
    [
        ("15,10", "num_neighbors must be a list of ints, got 'str'"),
        (5, "num_neighbors must be a list of ints, got 'int'"),
        ({"a": [1]}, "got 'dict'"),
        ([3, 1.5], "got 'float' at index 1"),
        ([True], "got 'bool' at index 0"),
        ([3, -2], r"num_neighbors\[1\] must be >= -1 \(-1: all neighbors, 0: none\), got -2"),
        (np.array([[1, 2]]), "num_neighbors must be a list of ints, got 'ndarray'"),
        (torch.tensor([1.0]), "got 'Tensor' at index 0"),
    ],
)
def test_bad_num_neighbors(num_neighbors, match):
    g = CSRGraph.from_edge_index(HAND, 7)
    with pytest.raises(IBPInputError, match=match):
        NeighborSampler(g, num_neighbors)


@pytest.mark.parametrize(
    "num_neighbors", [[2, -1, 0], (2, -1, 0), torch.tensor([2, -1, 0]), np.array([2, -1, 0])]
)
def test_num_neighbors_of_any_integer_sequence(num_neighbors):
    g = CSRGraph.from_edge_index(HAND, 7)
    assert NeighborSampler(g, num_neighbors).num_neighbors == (2, -1, 0)


def test_bad_sampler_args():
    with pytest.raises(IBPInputError, match="graph must be a CSRGraph, got 'Tensor'"):
        NeighborSampler(HAND, [2])
    g = CSRGraph.from_edge_index(HAND, 7)
    with pytest.raises(IBPInputError, match="seed must be an int or None, got 'str'"):
        NeighborSampler(g, [2], seed="1")
    assert NeighborSampler(g, (2, 0, -1)).num_neighbors == (2, 0, -1)


@pytest.mark.parametrize(
    ("seeds", "match"),
    [
        ([0, 1], "seeds must be a torch.Tensor, got 'list'"),
        (torch.tensor([0.0, 1.0]), "seeds must hold integers, got dtype torch.float32"),
        (torch.tensor([[0, 1]]), r"seeds must be 1-D, got shape \(1, 2\)"),
        (torch.tensor([0, 3, 7, 9]), r"seeds\[2\] = 7 is out of range for a graph of 7 nodes"),
        (torch.tensor([0, -1]), r"seeds\[1\] = -1 is out of range"),
    ],
)
def test_bad_seeds(seeds, match):
    s = NeighborSampler(CSRGraph.from_edge_index(HAND, 7), [2])
    with pytest.raises(IBPInputError, match=match):
        s.sample(seeds)
    # A failed call leaves the sampler usable.
    assert s.sample(torch.tensor([1])).node[0] == 1


def test_bad_input_id():
    s = NeighborSampler(CSRGraph.from_edge_index(HAND, 7), [2])
    with pytest.raises(IBPInputError, match="input_id must be a tensor"):
        s.sample(torch.tensor([1, 2]), torch.tensor([0]))


def test_scratch_map_cleared_between_batches():
    ei = random_graph(9, n=100, e=800)
    g = CSRGraph.from_edge_index(ei, 100)
    s = NeighborSampler(g, [4, 4], seed=0)
    for i in range(5):
        seeds = torch.arange(i, 100, 13)
        check_batch(s.sample(seeds), ei, 100, seeds, [4, 4])
        assert (s._map == sampler_mod.UNSEEN).all()


def test_a_longer_arange_keeps_the_one_it_replaces() -> None:
    # A batch on another stream may still read the old one when a longer batch replaces it:
    # its memory must not go back to the allocator while the sampler lives.
    import weakref

    ei = random_graph(7, n=3000, e=20000, isolated=0)
    s = NeighborSampler(CSRGraph.from_edge_index(ei, 3000), [5, 5], seed=0)
    first = weakref.ref(s._iota(10))
    assert torch.equal(s._iota(5000)[:5000], torch.arange(5000))
    gc.collect()
    assert first() is not None and first() is not s._arange
    assert sum(t.numel() for t in s._old_aranges) < s._arange.numel()
    assert pickle.loads(pickle.dumps(s))._old_aranges == []


# --------------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sampler_on_cuda():
    ei = random_graph(5, n=300, e=4000, isolated=20)
    g = CSRGraph.from_edge_index(ei.cuda(), 300)
    assert g.device.type == "cuda"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pinned = CSRGraph.from_edge_index(ei, 300).pin_memory()
    assert pinned.is_pinned()
    assert torch.equal(pinned.to("cuda").indices, g.indices)
    for fanouts in ([5, 3], [-1, 2], [2, 0, 4]):
        seeds = torch.randperm(300, device="cuda")[:40]
        a = NeighborSampler(g, fanouts, seed=3).sample(seeds)
        b = NeighborSampler(g, fanouts, seed=3).sample(seeds)
        assert a.node.is_cuda and a.row.is_cuda and a.edge.is_cuda
        assert same_batch(a, b)
        cpu = SampledBatch(
            a.node.cpu(), a.row.cpu(), a.col.cpu(), a.edge.cpu(), a.batch_size,
            a.num_sampled_nodes, a.num_sampled_edges,
        )  # fmt: skip
        check_batch(cpu, ei, 300, seeds.cpu(), fanouts)
    full_gpu = NeighborSampler(g, [-1, -1], seed=0).sample(torch.tensor([1, 2], device="cuda"))
    full_cpu = NeighborSampler(g.to("cpu"), [-1, -1], seed=0).sample(torch.tensor([1, 2]))
    assert torch.equal(full_gpu.node.cpu(), full_cpu.node)
    assert torch.equal(full_gpu.edge.cpu(), full_cpu.edge)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for fn in (floyd_sample, random_keys_sample):
        chosen = fn(torch.full((6000,), 10, device="cuda"), 3, gen)
        freq = torch.bincount(chosen.view(-1), minlength=10).double().cpu() / 6000
        assert torch.allclose(freq, torch.full((10,), 0.3, dtype=torch.double), atol=0.04)


@pytest.mark.parametrize("pairs", [True, False])
def test_to_uva_lays_out_the_pinned_memory_without_a_gpu(monkeypatch, pairs) -> None:
    # No GPU here: CUDA's runtime is the stub, and each "CUDA tensor" is a CPU view of the
    # pinned buffer it would read, so the bytes to_uva wrote are what the views hold.
    import contextlib

    from cuda_runtime_stub import CudaRuntimeStub

    from ibp_graph import graph as graph_module
    from ibp_graph.kernels import runtime

    rt = CudaRuntimeStub()
    cp = SimpleNamespace(
        cuda=SimpleNamespace(runtime=rt, Device=lambda i: contextlib.nullcontext())
    )
    made = []

    def tensor(buf, ptr, like, index):
        made.append((buf, ptr, like))
        nbytes = like.numel() * like.element_size()
        return torch.from_numpy(buf.array[:nbytes]).view(like.dtype).view(like.shape)

    monkeypatch.setattr(runtime, "require_cuda", lambda what: None)
    monkeypatch.setattr(runtime, "cupy", lambda: cp)
    monkeypatch.setattr(runtime, "device_index", lambda device: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda i: contextlib.nullcontext())
    monkeypatch.setattr(graph_module, "_uva_tensor", tensor)
    g = CSRGraph.from_edge_index(random_graph(8), 60)
    out = g.to_uva("cuda", indptr_in_gpu=False, pairs=pairs)
    assert out.pairs == pairs and [like.shape for _, _, like in made] == (
        [(61,), (g.num_edges, 2)] if pairs else [(61,), (g.num_edges,), (g.num_edges,)]
    )
    for name in ("indptr", "indices", "edge_ids"):
        assert torch.equal(getattr(out, name), getattr(g, name)), name
    if pairs:  # one buffer: each entry's source, then its edge id
        buf = made[1][0]
        words = np.frombuffer(buf.array[: 16 * g.num_edges], dtype=np.int64).reshape(-1, 2)
        assert np.array_equal(words, torch.stack([g.indices, g.edge_ids], 1).numpy())
        assert out.entries.data_ptr() == buf.array.ctypes.data
    # every buffer pinned once
    assert len(rt.registrations) == len(made) and all(b.pages != "backing" for b, _, _ in made)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_uva_graph_needs_a_gpu() -> None:
    from ibp_graph.errors import IBPDeviceError

    graph = CSRGraph.from_edge_index(torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(IBPDeviceError, match="CSRGraph.to_uva needs a CUDA GPU"):
        graph.to_uva()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_uva_graph_samples_like_a_device_graph() -> None:
    edge_index = torch.randint(0, 500, (2, 5000), generator=torch.Generator().manual_seed(0))
    seeds = torch.arange(0, 500, 7, device="cuda")
    layouts = ({}, {"pairs": False}, {"indptr_in_gpu": False})
    for dtype, kwargs in itertools.product((torch.int64, torch.int32), layouts):
        graph = CSRGraph.from_edge_index(edge_index, num_nodes=500, indices_dtype=dtype)
        on_gpu = graph.to("cuda")
        uva = graph.to_uva("cuda", **kwargs)
        assert uva.pairs == (dtype == torch.int64 and kwargs.get("pairs", True))
        assert uva.indptr.is_cuda and torch.equal(uva.indptr.cpu(), graph.indptr)
        assert uva.indices.is_cuda and torch.equal(uva.indices.cpu(), graph.indices)
        # The graph in GPU memory in the pairs layout too (as_pairs; int64 only).
        others = [uva] + ([on_gpu.as_pairs()] if dtype == torch.int64 else [])
        for fanouts, backend in (([5, 3], "kernel"), ([5, -1], "kernel"), ([5, 3], "torch")):
            a = NeighborSampler(on_gpu, fanouts, seed=1, backend=backend).sample(seeds)
            for other in others:
                b = NeighborSampler(other, fanouts, seed=1, backend=backend).sample(seeds)
                assert torch.equal(a.node, b.node) and torch.equal(a.edge, b.edge), (kwargs, dtype)
    assert not uva.pairs  # the last: int32 indices, every array over UVA
    with pytest.raises(IBPInputError, match=r"use to_uva\(pairs=True\)"):
        uva.as_pairs()


# --------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------


def test_kernel_backend_needs_a_cuda_graph():
    from ibp_graph.errors import IBPDeviceError

    g = CSRGraph.from_edge_index(HAND, 7)
    want = r"backend='kernel' .* needs a graph on a CUDA device, and this graph is on cpu"
    with pytest.raises(IBPDeviceError, match=want):
        NeighborSampler(g, [2], backend="kernel")


@pytest.mark.parametrize(
    ("backend", "match"),
    [
        ("cuda", "backend must be one of 'torch', 'kernel', got 'cuda'"),
        ("Kernel", "got 'Kernel'"),
        (None, "got 'NoneType'"),
    ],
)
def test_bad_backend(backend, match):
    g = CSRGraph.from_edge_index(HAND, 7)
    with pytest.raises(IBPInputError, match=match):
        NeighborSampler(g, [2], backend=backend)


def test_backend_in_repr_and_pickle():
    g = CSRGraph.from_edge_index(HAND, 7)
    s = NeighborSampler(g, [2, 1], seed=0)
    assert s.backend == "torch" and "backend='torch'" in repr(s)
    assert pickle.loads(pickle.dumps(s)).backend == "torch"


def _to_cpu(b: SampledBatch) -> SampledBatch:
    return SampledBatch(
        b.node.cpu(), b.row.cpu(), b.col.cpu(), b.edge.cpu(), b.batch_size,
        b.num_sampled_nodes, b.num_sampled_edges,
    )  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernel_backend_on_cuda():
    from ibp_graph.kernels.sample_neighbors import MAX_K

    ei = random_graph(5, n=300, e=4000, isolated=20)
    g = CSRGraph.from_edge_index(ei.cuda(), 300)
    for fanouts in ([5, 3], [-1, 2], [2, 0, 4], [1, 1, 1], [MAX_K + 1, 3]):
        seeds = torch.randperm(300, device="cuda")[:40]
        a = NeighborSampler(g, fanouts, seed=3, backend="kernel").sample(seeds)
        b = NeighborSampler(g, fanouts, seed=3, backend="kernel").sample(seeds)
        c = NeighborSampler(g, fanouts, seed=4, backend="kernel").sample(seeds)
        assert a.node.is_cuda and a.row.is_cuda and a.edge.is_cuda
        assert same_batch(a, b) and not same_batch(a, c)
        check_batch(_to_cpu(a), ei, 300, seeds.cpu(), fanouts)
    # Fanouts above the kernel's MAX_K fall back to the torch path.
    hub = torch.stack([torch.arange(1, 401), torch.zeros(400, dtype=torch.long)])
    fanout = [MAX_K + 44]
    s = NeighborSampler(CSRGraph.from_edge_index(hub.cuda()), fanout, seed=0, backend="kernel")
    batch = _to_cpu(s.sample(torch.tensor([0], device="cuda")))
    check_batch(batch, hub, 401, torch.tensor([0]), fanout)
    # A fanout of -1, or one above every degree, is the exact full neighborhood.
    seeds = torch.tensor([1, 2, 1], device="cuda")
    full_cpu = NeighborSampler(g.to("cpu"), [-1, -1], seed=0).sample(seeds.cpu())
    for fanouts in ([-1, -1], [1000, 1000]):
        full = NeighborSampler(g, fanouts, seed=0, backend="kernel").sample(seeds)
        assert same_batch(_to_cpu(full), full_cpu)
    # Reseeding restarts the stream; pickling keeps the backend and the generator state.
    s = NeighborSampler(g, [5, 3], seed=11, backend="kernel")
    seeds = torch.arange(0, 280, 7, device="cuda")
    first = s.sample(seeds)
    assert not same_batch(first, s.sample(seeds))
    s.manual_seed(11)
    assert same_batch(first, s.sample(seeds))
    clone = pickle.loads(pickle.dumps(s))
    assert clone.backend == "kernel" and "backend='kernel'" in repr(clone)
    assert same_batch(clone.sample(seeds), s.sample(seeds))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernel_backend_neighbor_frequencies_uniform():
    """As `test_neighbor_frequencies_uniform`, with the kernel drawing, on a UVA graph too."""
    stats = _scipy_stats()
    ei = torch.tensor([list(range(1, 11)), [0] * 10])
    draws = 3000
    seeds = torch.zeros(draws, dtype=torch.long, device="cuda")
    for g in (CSRGraph.from_edge_index(ei, 11).to("cuda"), CSRGraph.from_edge_index(ei).to_uva()):
        batch = NeighborSampler(g, [3], seed=0, backend="kernel").sample(seeds)
        assert batch.num_sampled_edges == [3 * draws]
        picked = batch.global_row.view(draws, 3).cpu()
        assert (picked.sort(dim=1).values.diff(dim=1) > 0).all()
        observed = torch.bincount(picked.view(-1), minlength=11)[1:].tolist()
        assert stats.chisquare(observed).pvalue > 1e-4
        counts = _subset_counts(picked.sort(dim=1).values)
        observed = [counts.get(s, 0) for s in itertools.combinations(range(1, 11), 3)]
        assert stats.chisquare(observed).pvalue > 1e-4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend", ["torch", "kernel"])
def test_cpu_seeds_reach_a_cuda_sampler_without_waiting_for_the_gpu(backend) -> None:
    # (Last in the file: it turns torch's sync debug mode to errors.) The loaders' seeds are
    # CPU tensors: they are checked on the CPU and copied through pinned memory, so the
    # sampler's first host wait is its hops' own, not the seeds'.
    ei = random_graph(6, n=300, e=4000, isolated=20)
    g = CSRGraph.from_edge_index(ei.cuda(), 300)
    seeds = torch.randperm(300)[:40]
    sampler = NeighborSampler(g, [5, 3], seed=3, backend=backend)
    torch.cuda.set_sync_debug_mode("error")
    try:
        on_gpu = sampler._check_seeds(seeds)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert on_gpu.is_cuda and torch.equal(on_gpu.cpu(), seeds)
    a = NeighborSampler(g, [5, 3], seed=3, backend=backend).sample(seeds)
    b = NeighborSampler(g, [5, 3], seed=3, backend=backend).sample(seeds.cuda())
    assert same_batch(a, b)
    bad = seeds.clone()
    bad[7] = 300
    with pytest.raises(IBPInputError, match=r"seeds\[7\] = 300 is out of range"):
        sampler.sample(bad)
    with pytest.raises(IBPInputError, match=r"seeds\[7\] = 300 is out of range"):
        sampler.sample(bad.cuda())
