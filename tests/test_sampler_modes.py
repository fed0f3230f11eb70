"""The sampler's modes, each against its definition: replace, disjoint, subgraph_type, draw."""

from __future__ import annotations

import enum
import pickle
from collections import Counter

import pytest
import torch
from conftest import in_lists, random_graph, reference_sample

from ibp_graph.errors import IBPInputError
from ibp_graph.graph import CSRGraph
from ibp_graph.sample_index import UNSEEN, KeyIndex
from ibp_graph.sampler import NeighborSampler, SampledBatch

# Every test runs with the compiled CPU hop (Numba) and with the torch-ops hop.
pytestmark = pytest.mark.usefixtures("hop_path")


def assert_batch(batch: SampledBatch, node, row, col, edge, nsn, nse) -> None:
    assert batch.node.tolist() == node
    assert batch.row.tolist() == row
    assert batch.col.tolist() == col
    assert batch.edge.tolist() == edge
    assert batch.num_sampled_nodes == nsn and batch.num_sampled_edges == nse


def same(a: SampledBatch, b: SampledBatch) -> bool:
    fields = ("node", "row", "col", "edge")
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in fields)


# --------------------------------------------------------------------------------------------
# replace=True
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_replace_gives_exactly_fanout_per_node_with_neighbors(seed):
    ei = random_graph(seed, n=50, e=120)  # many nodes with fewer than 4 in-neighbors
    g = CSRGraph.from_edge_index(ei, 50)
    deg = g.in_degree()
    seeds = torch.randperm(50, generator=torch.Generator().manual_seed(seed))[:12]
    batch = NeighborSampler(g, [4, 3], seed=seed, replace=True).sample(seeds)
    pairs = set(map(tuple, ei.t().tolist()))
    e0, begin = 0, 0
    for h, fanout in enumerate([4, 3]):
        end = begin + batch.num_sampled_nodes[h]
        hcol = batch.col[e0 : e0 + batch.num_sampled_edges[h]]
        per_target = Counter(hcol.tolist())
        for t in range(begin, end):
            want = fanout if int(deg[batch.node[t]]) > 0 else 0
            assert per_target.get(t, 0) == want
        assert hcol.tolist() == sorted(hcol.tolist())
        e0 += batch.num_sampled_edges[h]
        begin = end
    for r, c, e in zip(
        batch.global_row.tolist(), batch.global_col.tolist(), batch.edge.tolist(), strict=True
    ):
        assert (r, c) in pairs and tuple(ei[:, e].tolist()) == (r, c)
    # -1 still takes every in-neighbor once.
    full = NeighborSampler(g, [-1, -1], seed=0, replace=True).sample(seeds)
    node, _, row, col, edge, nsn, nse = reference_sample(ei, 50, seeds.tolist(), 2)
    assert_batch(full, node, row, col, edge, nsn, nse)


def test_replace_draws_are_independent_and_uniform():
    """Node 0 has 3 in-neighbors; fanout 5 with replacement: multinomial(5, 1/3 each)."""
    stats = pytest.importorskip("scipy.stats", reason="the chi-square checks need SciPy")
    ei = torch.tensor([[1, 2, 3], [0, 0, 0]])
    g = CSRGraph.from_edge_index(ei, 4)
    draws = 4000
    batch = NeighborSampler(g, [5], seed=0, replace=True).sample(torch.zeros(draws, dtype=int))
    assert batch.num_sampled_edges == [5 * draws]
    picked = batch.global_row.view(draws, 5)
    observed = torch.bincount(picked.view(-1), minlength=4)[1:].tolist()
    assert stats.chisquare(observed).pvalue > 1e-4
    # How often node 1 appears in a row of 5: binomial(5, 1/3).
    hits = (picked == 1).sum(dim=1)
    observed = torch.bincount(hits, minlength=6).tolist()
    expected = [draws * stats.binom.pmf(i, 5, 1 / 3) for i in range(6)]
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    assert (hits >= 2).any()  # repeats happen


# --------------------------------------------------------------------------------------------
# disjoint=True
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("per_hop", [False, True])
def test_disjoint_full_matches_reference(seed, per_hop):
    ei = random_graph(seed, n=40, e=120)
    g = CSRGraph.from_edge_index(ei, 40)
    seeds = torch.randint(0, 40, (6,), generator=torch.Generator().manual_seed(seed))
    seeds[3] = seeds[1]  # a repeated seed grows its own tree
    draw = "per_hop" if per_hop else "once"
    batch = NeighborSampler(g, [-1, -1], seed=0, disjoint=True, draw=draw).sample(seeds)
    node, b, row, col, edge, nsn, nse = reference_sample(
        ei, 40, seeds.tolist(), 2, disjoint=True, per_hop=per_hop
    )
    assert_batch(batch, node, row, col, edge, nsn, nse)
    assert batch.batch.tolist() == b
    assert batch.batch.dtype == torch.int64
    # Edges never cross trees.
    assert torch.equal(batch.batch[batch.row], batch.batch[batch.col])


@pytest.mark.parametrize("seed", range(3))
def test_disjoint_random_fanouts(seed):
    ei = random_graph(seed, n=30, e=300)
    g = CSRGraph.from_edge_index(ei, 30)
    deg = g.in_degree()
    seeds = torch.tensor([3, 7, 3, 11])
    batch = NeighborSampler(g, [3, 2], seed=seed, disjoint=True).sample(seeds)
    assert batch.batch[:4].tolist() == [0, 1, 2, 3]
    keys = list(zip(batch.batch.tolist(), batch.node.tolist(), strict=True))
    assert len(set(keys)) == len(keys)  # (tree, node) pairs are unique
    assert torch.equal(batch.batch[batch.row], batch.batch[batch.col])
    per_target = Counter(batch.col.tolist())
    begin = 0
    for h, fanout in enumerate([3, 2]):
        end = begin + batch.num_sampled_nodes[h]
        for t in range(begin, end):
            assert per_target.get(t, 0) == min(fanout, int(deg[batch.node[t]]))
        begin = end
    # Without disjoint, the same seeds share nodes: fewer of them.
    shared = NeighborSampler(g, [3, 2], seed=seed).sample(seeds)
    assert shared.batch is None
    assert len(set(shared.node[3:].tolist())) == shared.num_nodes - 3  # seed 3 twice
    assert shared.num_nodes < batch.num_nodes


def test_key_index_assigns_ids_in_order_of_discovery():
    index = KeyIndex(torch.tensor([50, 10, 30]))
    local, fresh = index.insert(torch.tensor([30, 7, 99, 7, 10, 99, 5]))
    assert local.tolist() == [2, 3, 4, 3, 1, 4, 5]
    assert fresh.tolist() == [7, 99, 5]
    local, fresh = index.insert(torch.tensor([5, 6]))
    assert local.tolist() == [5, 6] and fresh.tolist() == [6]
    local, fresh = index.insert(torch.empty(0, dtype=torch.long))
    assert local.numel() == 0 and fresh.numel() == 0


# --------------------------------------------------------------------------------------------
# subgraph_type
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("disjoint", [False, True])
def test_bidirectional_is_pyg_to_bidirectional(seed, disjoint):
    ei = random_graph(seed, n=40, e=300)
    g = CSRGraph.from_edge_index(ei, 40)
    seeds = torch.tensor([1, 5, 9, 5])
    kw = {"seed": seed, "disjoint": disjoint}
    plain = NeighborSampler(g, [3, 2], **kw).sample(seeds)
    bi = NeighborSampler(g, [3, 2], subgraph_type="bidirectional", **kw).sample(seeds)
    assert torch.equal(bi.node, plain.node)  # same draws, same nodes
    assert bi.num_sampled_nodes is None and bi.num_sampled_edges is None
    # The definition: every sampled pair in both directions, once, sorted by (col, row).
    pairs = {}
    both = list(zip(plain.row.tolist(), plain.col.tolist(), plain.edge.tolist(), strict=True))
    both += [(c, r, e) for r, c, e in both]
    for r, c, e in both:
        pairs.setdefault((r, c), e)
    want = sorted(pairs, key=lambda rc: (rc[1], rc[0]))
    assert list(zip(bi.row.tolist(), bi.col.tolist(), strict=True)) == want
    assert bi.edge.tolist() == [pairs[rc] for rc in want]
    # PyG's own conversion gives the same pairs in the same order.
    utils = pytest.importorskip("torch_geometric.sampler.utils")
    row, col, edge = utils.to_bidirectional(
        plain.row, plain.col, plain.row, plain.col, plain.edge, plain.edge
    )
    assert torch.equal(row, bi.row) and torch.equal(col, bi.col)
    for r, c, e in zip(row.tolist(), col.tolist(), edge.tolist(), strict=True):
        # PyG keeps one of the merged ids: one of an edge sampled between the two nodes.
        assert e in {pe for pr, pc, pe in both if (pr, pc) == (r, c)}


@pytest.mark.parametrize("seed", range(3))
def test_induced_is_every_edge_between_sampled_nodes(seed):
    ei = random_graph(seed, n=50, e=400)
    g = CSRGraph.from_edge_index(ei, 50)
    seeds = torch.tensor([2, 8, 2, 30])
    plain = NeighborSampler(g, [2, 2], seed=seed).sample(seeds)
    ind = NeighborSampler(g, [2, 2], seed=seed, subgraph_type="induced").sample(seeds)
    assert torch.equal(ind.node, plain.node)
    assert ind.num_sampled_nodes is None and ind.num_sampled_edges is None
    node = ind.node.tolist()
    first = {}
    for i, v in enumerate(node):
        first.setdefault(v, i)
    adj = in_lists(ei, 50)
    row, col, edge = [], [], []
    for t, v in enumerate(node):  # torch-sparse's order: targets in node order, CSR within
        for u, e in adj[v]:
            if u in first:
                row.append(first[u])
                col.append(t)
                edge.append(e)
    assert ind.row.tolist() == row and ind.col.tolist() == col and ind.edge.tolist() == edge
    # The induced subgraph contains every sampled edge.
    assert set(plain.edge.tolist()) <= set(edge)


def test_subgraph_type_accepts_enum_members():
    class SubgraphType(enum.Enum):
        induced = "induced"

    g = CSRGraph.from_edge_index(random_graph(0), 60)
    s = NeighborSampler(g, [2], subgraph_type=SubgraphType.induced)
    assert s.subgraph_type == "induced"


# --------------------------------------------------------------------------------------------
# draw="per_hop"
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_per_hop_full_matches_reference(seed):
    ei = random_graph(seed, n=50, e=200)
    g = CSRGraph.from_edge_index(ei, 50)
    seeds = torch.tensor([4, 9, 4, 17])
    batch = NeighborSampler(g, [-1, -1, -1], seed=0, draw="per_hop").sample(seeds)
    node, _, row, col, edge, nsn, nse = reference_sample(ei, 50, seeds.tolist(), 3, per_hop=True)
    assert_batch(batch, node, row, col, edge, nsn, nse)
    assert batch.batch is None


@pytest.mark.parametrize("seed", range(4))
def test_per_hop_blocks(seed):
    """Hop h draws for every node known before it; its edges form one block."""
    ei = random_graph(seed, n=80, e=700)
    g = CSRGraph.from_edge_index(ei, 80)
    deg = g.in_degree()
    seeds = torch.randperm(80, generator=torch.Generator().manual_seed(seed))[:6]
    fanouts = [3, 2, 4]
    batch = NeighborSampler(g, fanouts, seed=seed, draw="per_hop").sample(seeds)
    pairs = set(map(tuple, ei.t().tolist()))
    nsn, nse = batch.num_sampled_nodes, batch.num_sampled_edges
    e0 = 0
    for h, fanout in enumerate(fanouts):
        num_dst, num_src = sum(nsn[: h + 1]), sum(nsn[: h + 2])
        row = batch.row[e0 : e0 + nse[h]]
        col = batch.col[e0 : e0 + nse[h]]
        edge = batch.edge[e0 : e0 + nse[h]]
        assert col.tolist() == sorted(col.tolist())
        counts = torch.bincount(col, minlength=num_dst)
        assert counts.numel() == num_dst  # every target is a destination node of the block
        want = deg[batch.node[:num_dst]].clamp(max=fanout)
        assert torch.equal(counts, want)
        assert bool((row < num_src).all())
        # New nodes of this hop: first occurrences among the block's sources, in order.
        new = []
        known = set(batch.node[:num_dst].tolist())
        for v in batch.node[row].tolist():
            if v not in known:
                known.add(v)
                new.append(v)
        assert batch.node[num_dst:num_src].tolist() == new
        for r, c, e in zip(row.tolist(), col.tolist(), edge.tolist(), strict=True):
            u, v = int(batch.node[r]), int(batch.node[c])
            assert (u, v) in pairs and tuple(ei[:, e].tolist()) == (u, v)
        e0 += nse[h]
    # "once" draws only for the new nodes: fewer edges than per-hop.
    once = NeighborSampler(g, fanouts, seed=seed).sample(seeds)
    assert once.num_edges < batch.num_edges


def test_per_hop_draws_again_for_known_nodes():
    """A seed gets fresh neighbors in every hop, uniformly: its two draws are independent."""
    ei = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 0]])
    g = CSRGraph.from_edge_index(ei, 5)
    s = NeighborSampler(g, [1, 1], seed=0, draw="per_hop")
    differ = 0
    for _ in range(200):
        batch = s.sample(torch.tensor([0]))
        assert batch.num_sampled_edges == [1, 1 + 0]  # hop 2: the seed again, the new leaf none
        a, b = batch.global_row.tolist()
        differ += a != b
    assert 120 < differ < 180  # P(differ) = 3/4


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"subgraph_type": "undirected"},
            "subgraph_type must be one of 'directional', 'bidirectional', 'induced', "
            "got 'undirected'",
        ),
        ({"subgraph_type": 3}, "subgraph_type must be .* got 'int'"),
        ({"draw": "block"}, "draw must be one of 'once', 'per_hop', got 'block'"),
        ({"replace": 1}, "replace must be a bool, got 'int'"),
        ({"disjoint": "yes"}, "disjoint must be a bool, got 'str'"),
        ({"backend": "cuda"}, "backend must be one of 'torch', 'kernel', got 'cuda'"),
        (
            {"disjoint": True, "subgraph_type": "induced"},
            "disjoint=True does not combine with subgraph_type='induced'",
        ),
        (
            {"draw": "per_hop", "subgraph_type": "bidirectional"},
            "draw='per_hop' needs subgraph_type='directional', got subgraph_type='bidirectional'",
        ),
        ({"draw": "per_hop", "subgraph_type": "induced"}, "draw='per_hop' needs subgraph_type"),
    ],
)
def test_bad_mode_arguments(kwargs, match):
    g = CSRGraph.from_edge_index(random_graph(0), 60)
    with pytest.raises(IBPInputError, match=match):
        NeighborSampler(g, [2], **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"replace": True},
        {"disjoint": True},
        {"subgraph_type": "bidirectional"},
        {"subgraph_type": "induced"},
        {"draw": "per_hop"},
        {"disjoint": True, "draw": "per_hop", "replace": True},
    ],
)
def test_modes_pickle_and_repr(kwargs):
    ei = random_graph(1)
    g = CSRGraph.from_edge_index(ei, 60)
    s = NeighborSampler(g, [3, 2], seed=4, **kwargs)
    for name, value in kwargs.items():
        assert f"{name}={value!r}" in repr(s)
    seeds = torch.arange(0, 60, 9)
    s.sample(seeds)
    clone = pickle.loads(pickle.dumps(s))
    for name, value in kwargs.items():
        assert getattr(clone, name) == value
    a, b = clone.sample(seeds), s.sample(seeds)
    assert same(a, b)
    assert (a.batch is None) == (not kwargs.get("disjoint", False))
    if a.batch is not None:
        assert torch.equal(a.batch, b.batch)
    assert (s._map is None) or bool((s._map == UNSEEN).all())


def test_old_pickles_get_default_modes():
    g = CSRGraph.from_edge_index(random_graph(1), 60)
    s = NeighborSampler(g, [3], seed=1)
    state = s.__getstate__()
    for name in ("replace", "disjoint", "subgraph_type", "draw"):
        del state[name]
    clone = NeighborSampler.__new__(NeighborSampler)
    clone.__setstate__(state)
    assert (clone.replace, clone.disjoint, clone.subgraph_type, clone.draw) == (
        False,
        False,
        "directional",
        "once",
    )
    assert same(clone.sample(torch.tensor([1, 2])), s.sample(torch.tensor([1, 2])))


def test_sampled_batch_batch_field_defaults_to_none():
    t = torch.zeros(0, dtype=torch.long)
    b = SampledBatch(t, t, t, t, 0, [0], [])
    assert b.batch is None and b.input_id is None
