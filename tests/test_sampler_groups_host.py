"""Batches sampled in groups (`NeighborSampler.sample_batches`, `sample_hop.launch_group`).

A group is the batches of one size launched one after the other, their sizes read once at its
end, replayed from one CUDA graph with ``cuda_graph=True``. Whatever the grouping, batch ``k``
must be the batch that ``manual_seed(batch_seeds[k])`` then ``sample(batches[k])`` gives, bit
for bit. On the host the hop kernels run in the SIMT harness and the capture is
`simt.host_graph.HostCapture`; the `gpu` tests run real launches and graphs.
"""

from __future__ import annotations

import pickle
import re

import pytest
import torch
from simt.host_hops import HostHopKernels
from test_sampler_hop_host import power_graph
from test_sampler_replay_host import assert_same, fields, host_sampler, seed_batches

from ibp_graph import loading, sample_hop
from ibp_graph.errors import IBPInputError
from ibp_graph.graph import CSRGraph
from ibp_graph.kernels.sample_neighbors import MAX_K
from ibp_graph.sample_index import UNSEEN
from ibp_graph.sampler import NeighborSampler

MODES = [
    ([15, 10, 5], {}),
    ([4, 0, 3], {}),
    ([6, 4], {"replace": True}),
    ([-1, 3], {}),  # reads the first hop's sizes on the way
    ([MAX_K + 2, 3], {}),  # a hop of torch ops: groups of one
    ([5, 3], {"draw": "per_hop"}),
    ([6, 4], {"subgraph_type": "bidirectional"}),
    ([6, 4], {"subgraph_type": "induced"}),  # groups of one batch
]


def one_by_one(sampler, batches, seeds, input_ids=None):
    out = []
    for k, batch in enumerate(batches):
        if seeds is not None and seeds[k] is not None:
            sampler.manual_seed(seeds[k])
        out.append(sampler.sample(batch, None if input_ids is None else input_ids[k]))
    return out


@pytest.mark.parametrize("replay", [False, True])
@pytest.mark.parametrize(("fanouts", "kw"), MODES)
def test_groups_are_the_batches_sampled_one_by_one(lib, replay, fanouts, kw) -> None:
    g = power_graph(31, n=400)
    # runs of equal sizes: groups of 3, 1 and 5 batches
    sizes = [40, 40, 40, 17, 40, 40, 40, 40, 40]
    batches = seed_batches(g, sizes, seed=4)
    seeds = [100 + k for k in range(len(sizes))]
    seeds[4] = None  # no reseeding: the generator goes on
    ids = [torch.arange(size) + 1000 * k for k, size in enumerate(sizes)]
    single, _ = host_sampler(lib, g, fanouts, replay=False, **kw)
    grouped, capture = host_sampler(lib, g, fanouts, replay=replay, **kw)
    for _ in range(2):  # a shape is captured the second time it comes
        want = one_by_one(single, batches, seeds, ids)
        got = grouped.sample_batches(batches, batch_seeds=seeds, input_ids=ids)
        assert len(got) == len(want)
        for a, b, input_id in zip(got, want, ids, strict=True):
            assert_same(a, b)
            assert a.input_id is input_id and a.batch_size == b.batch_size
        # the generators are where the calls one by one left them
        assert torch.equal(grouped.generator.get_state(), single.generator.get_state())
        assert torch.equal(grouped._key_generator.get_state(), single._key_generator.get_state())
        assert bool((grouped._map == UNSEEN).all())  # every batch cleared from the map
    reads_sizes = fanouts[0] == -1 or fanouts[0] > MAX_K or kw.get("draw") == "per_hop"
    if replay and not reads_sizes:
        induced = kw.get("subgraph_type") == "induced"
        shapes = {(40, 1), (17, 1)} if induced else {(40, 3), (17, 1), (40, 5)}
        assert set(grouped._replay.graphs) == shapes and len(capture.graphs) == len(shapes)
    elif replay:
        assert grouped._replay.graphs == {} and capture.graphs == []


@pytest.mark.parametrize("replay", [False, True])
def test_groups_with_int32_indices(lib, replay) -> None:
    g = power_graph(43, n=400, index_dtype=torch.int32)
    batches = seed_batches(g, [32] * 4, seed=9)
    single, _ = host_sampler(lib, g, [8, 4, 2], replay=False)
    grouped, _ = host_sampler(lib, g, [8, 4, 2], replay=replay)
    for _ in range(3):
        got = grouped.sample_batches(batches, batch_seeds=[4, 3, 2, 1])
        for a, b in zip(got, one_by_one(single, batches, [4, 3, 2, 1]), strict=True):
            assert_same(a, b)
    assert grouped._replay is None or set(grouped._replay.graphs) == {(32, 4)}


def test_a_group_reads_its_sizes_once(lib, monkeypatch) -> None:
    g = power_graph(32, n=400)
    sampler, _ = host_sampler(lib, g, [6, 4, 2], replay=False)
    reads = []
    real = sample_hop.read_counts
    monkeypatch.setattr(sample_hop, "read_counts", lambda t: reads.append(t.shape) or real(t))
    sampler.sample_batches(seed_batches(g, [30] * 5, seed=1))
    assert reads == [(5, 7)]  # one read of every batch's 7 counts
    launches = sampler._hop_kernels.launches
    assert launches.count("draw") == 15 and launches.count("emit") == 15


def test_replayed_groups_copy_their_outputs_out(lib) -> None:
    g = power_graph(33, n=400)
    sampler, capture = host_sampler(lib, g, [10, 5], replay=True)
    single, _ = host_sampler(lib, g, [10, 5], replay=False)
    groups = [seed_batches(g, [50] * 4, seed=s) for s in range(4)]
    outs = [sampler.sample_batches(batches, batch_seeds=[1, 2, 3, 4]) for batches in groups]
    (graph,) = capture.graphs
    assert graph.replays == 3  # run eagerly, then captured and replayed, then replayed twice
    (captured,) = sampler._replay.graphs.values()
    group = captured.group
    buffers = {t.untyped_storage().data_ptr() for b in group.batches for t in b.nodes + b.edges}
    for batches, out in zip(groups, outs, strict=True):  # not changed by the later replays
        for a, b in zip(out, one_by_one(single, batches, [1, 2, 3, 4]), strict=True):
            assert_same(a, b)
            assert a.node.untyped_storage().data_ptr() not in buffers
            assert a.row.untyped_storage().data_ptr() not in buffers


def test_capture_sizes_captures_groups(lib) -> None:
    g = power_graph(34, n=400)
    sampler, capture = host_sampler(lib, g, [6, 4], replay=True)
    assert sampler.capture_sizes([32, 20], group=4) == [32, 20]
    assert set(sampler._replay.graphs) == {(32, 4), (20, 4)} and len(capture.graphs) == 2
    single, _ = host_sampler(lib, g, [6, 4], replay=False)
    batches = seed_batches(g, [32] * 4, seed=2)
    got = sampler.sample_batches(batches, batch_seeds=[5, 6, 7, 8])
    for a, b in zip(got, one_by_one(single, batches, [5, 6, 7, 8]), strict=True):
        assert_same(a, b)
    # each shape replayed where it was captured, and (32, 4) again
    assert sorted(gr.replays for gr in capture.graphs) == [1, 2]
    with pytest.raises(IBPInputError, match=r"group must be an int >= 1, got 0"):
        sampler.capture_sizes([8], group=0)


def test_launch_group_clears_every_batch_but_the_last(lib) -> None:
    g = power_graph(35, n=400)
    kernels = HostHopKernels(lib)
    fanouts = [8, 4]
    seeds = torch.stack(seed_batches(g, [24] * 3, seed=3))
    local = torch.full((g.num_nodes,), UNSEEN, dtype=torch.int64)
    iota = torch.arange(24)
    keys = torch.arange(6).view(3, 2) - 7
    group = sample_hop.launch_group(
        kernels, g, local, seeds, fanouts, replace=False, per_hop=False, keys=keys,
        torch_hop=None, iota=iota,
    )  # fmt: skip
    assert group.launched_only and group.counts.shape == (3, 5)
    # the first two batches cleared: one launch per node buffer (seeds, two hops) each
    assert kernels.launches.count("clear") == 6
    *_, last = sample_hop.finish_group(group, kernels)
    node = last[0]
    # only the last batch is in the map, each node at its local id
    held = (local != UNSEEN).nonzero().view(-1)
    assert torch.equal(held.sort().values, node.unique().sort().values)
    first = {}
    for i, v in enumerate(node.tolist()):
        first.setdefault(v, i)
    from ibp_graph.sample_index import KNOWN

    assert all(int(local[v]) + KNOWN == i for v, i in first.items())


def test_the_clear_kernel_resets_the_counted_nodes_only(lib) -> None:
    kernels = HostHopKernels(lib)
    local = torch.arange(10, dtype=torch.int64) - 100
    nodes = torch.tensor([5, 9, 2, 7])
    kernels.clear(nodes, torch.tensor([0, 3]), 1, local)  # counts[1] = 3 of the 4
    cleared = [5, 9, 2]
    assert [int(v) for v in (local == UNSEEN).nonzero().view(-1)] == sorted(cleared)
    assert int(local[7]) == 7 - 100
    kernels.clear(nodes, torch.tensor([50]), 0, local)  # a count above the buffer: all of it
    assert int(local[7]) == UNSEEN
    before = local.clone()
    kernels.clear(nodes, torch.tensor([0]), 0, local)  # none
    assert torch.equal(local, before)


def test_the_pack_kernel_copies_the_counted_entries_one_part_after_the_other(lib) -> None:
    kernels = HostHopKernels(lib)

    def table(*parts):  # (tensor, position of its count) per part
        rows = [(t.data_ptr(), t.shape[-1], at, t.stride(0)) for t, at in parts]
        return torch.tensor([v for row in rows for v in row], dtype=torch.int64)

    a, b, c = torch.arange(10, 16), torch.arange(20, 24), torch.arange(30, 33)
    counts = torch.tensor([4, 9, 0, 2])  # a: 4 of 6; b: 9, capped at its 4; c: none
    out = torch.full((8,), -1, dtype=torch.int64)
    kernels.pack(table((a, 0), (b, 1), (c, 2)), counts, out, n_parts=3, rows=1)
    assert out.tolist() == [10, 11, 12, 13, 20, 21, 22, 23]
    # rows of edges: a (3, 5) buffer cut to (3, 4) on the way keeps its rows 5 apart
    whole = torch.arange(15).view(3, 5)
    cut, other = whole[:, :4], torch.arange(100, 106).view(3, 2)
    edges = torch.full((3, 4), -1, dtype=torch.int64)  # 3 of cut, 1 of other
    kernels.pack(table((cut, 3), (other, 0)), torch.tensor([1, 0, 0, 3]), edges, n_parts=2,
                 rows=3)  # fmt: skip
    assert torch.equal(edges, torch.cat([cut[:, :3], other[:, :1]], dim=1))
    assert kernels.launches == ["pack", "pack"]


def test_other_backends_sample_one_by_one(lib) -> None:
    g = power_graph(36, n=400)
    batches = seed_batches(g, [30, 30, 12], seed=5)
    for kw in ({}, {"disjoint": True}):
        a = NeighborSampler(g, [5, 3], seed=1, **kw)
        b = NeighborSampler(g, [5, 3], seed=1, **kw)
        got = a.sample_batches(batches, batch_seeds=[7, None, 9])
        for x, y in zip(got, one_by_one(b, batches, [7, None, 9]), strict=True):
            assert_same(x, y)
            assert torch.equal(x.batch, y.batch) if kw else x.batch is None
    kernel, _ = host_sampler(lib, g, [5, 3], replay=False, disjoint=True)
    again, _ = host_sampler(lib, g, [5, 3], replay=False, disjoint=True)
    for x, y in zip(kernel.sample_batches(batches), one_by_one(again, batches, None), strict=True):
        assert_same(x, y)


def test_no_batches_and_empty_batches(lib) -> None:
    g = power_graph(37, n=400)
    sampler, _ = host_sampler(lib, g, [5, 3], replay=True)
    assert sampler.sample_batches([]) == []
    empty = torch.empty(0, dtype=torch.int64)
    out = sampler.sample_batches([empty, empty])
    assert [b.num_nodes for b in out] == [0, 0] and [b.num_edges for b in out] == [0, 0]
    assert out[0].num_sampled_nodes == [0, 0, 0]


def test_the_keys_travel_with_the_seeds_and_pickle(lib) -> None:
    g = power_graph(38, n=400)
    sampler, _ = host_sampler(lib, g, [6, 4], replay=False)
    sampler.sample(seed_batches(g, [20], seed=6)[0])  # the key generator moved on
    copy = pickle.loads(pickle.dumps(sampler))
    copy._hop_kernels = HostHopKernels(lib)
    batch = seed_batches(g, [20], seed=7)[0]
    assert_same(copy.sample(batch), sampler.sample(batch))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s, b: s.sample_batches(b[0]), "batches must be a list or tuple of tensors, got"),
        (lambda s, b: s.sample_batches([b[0], [1, 2]]), "batches[1] must be a torch.Tensor"),
        (
            lambda s, b: s.sample_batches([b[0], b[1].float()]),
            "batches[1] must hold integers, got dtype torch.float32",
        ),
        (
            lambda s, b: s.sample_batches([b[0].view(2, -1)]),
            "batches[0] must be 1-D, got shape (2, 5)",
        ),
        (
            lambda s, b: s.sample_batches(b, batch_seeds=[1]),
            "batch_seeds must be a list or tuple of one entry per batch (2), got 1",
        ),
        (
            lambda s, b: s.sample_batches(b, batch_seeds=[1, 2.5]),
            "batch_seeds must hold ints or None, got 'float'",
        ),
        (
            lambda s, b: s.sample_batches(b, input_ids=[None, torch.arange(3)]),
            "input_ids[1] must be a tensor of the seeds' shape (10,), got torch.Size([3])",
        ),
        (
            lambda s, b: s.sample_batches([b[0], b[1].index_fill(0, torch.tensor([6]), 400)]),
            "batches[1][6] = 400 is out of range for a graph of 400 nodes",
        ),
        (
            lambda s, b: s.sample_batches([b[0], b[1].index_fill(0, torch.tensor([2]), -3)]),
            "batches[1][2] = -3 is out of range for a graph of 400 nodes",
        ),
    ],
)
@pytest.mark.parametrize("kernel", [True, False])
def test_bad_batches_are_named(lib, call, message, kernel) -> None:
    g = power_graph(39, n=400)
    if kernel:
        sampler, _ = host_sampler(lib, g, [4, 2], replay=True)
    else:
        sampler = NeighborSampler(g, [4, 2], seed=0)
    before = sampler.generator.get_state()
    with pytest.raises(IBPInputError, match=re.escape(message)):
        call(sampler, seed_batches(g, [10, 10], seed=8))
    assert torch.equal(sampler.generator.get_state(), before)
    if sampler._map is not None:
        assert bool((sampler._map == UNSEEN).all())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cuda_graph", [False, True])
@pytest.mark.parametrize("side_stream", [False, True])
def test_gpu_groups_are_the_host_batches(lib, cuda_graph, side_stream) -> None:
    # The keys come from the host: a GPU group gives, bit for bit, the batches that the
    # kernel source run on the host gives for the same seeds.
    g = power_graph(40, n=5000)
    gd = CSRGraph(g.indptr.cuda(), g.indices.cuda(), g.edge_ids.cuda(), g.num_nodes)
    host, _ = host_sampler(lib, g, [15, 10, 5], replay=False)
    gpu = NeighborSampler(gd, [15, 10, 5], seed=5, backend="kernel", cuda_graph=cuda_graph)
    sizes = [256, 256, 256, 100, 256, 256, 256]
    seeds = list(range(len(sizes)))
    stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        for round_ in range(3):
            batches = seed_batches(g, sizes, seed=round_)
            want = one_by_one(host, batches, seeds)
            got = gpu.sample_batches(batches, batch_seeds=seeds)
            for a, b in zip(got, want, strict=True):
                assert a.node.is_cuda
                for x, y in zip(fields(a), fields(b), strict=True):
                    assert torch.equal(x.cpu(), y) if torch.is_tensor(x) else x == y
            again = one_by_one(gpu, [batches[3]], [seeds[3]])[0]
            assert torch.equal(again.node.cpu(), want[3].node)
    if cuda_graph:
        assert set(gpu._replay.graphs) >= {(256, 3)}
    torch.cuda.synchronize()  # the last clear was queued on the side stream
    assert bool((gpu._map == UNSEEN).all())


def test_a_replayed_group_costs_fewer_ops_a_batch(lib) -> None:
    from benchmarks.sampling_ops import count

    g = power_graph(41, n=2000)
    seeds = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(0))[:200]
    eager, _ = host_sampler(lib, g, [15, 10, 5], replay=False)
    replayed, _ = host_sampler(lib, g, [15, 10, 5], replay=True)
    single, grouped = count(replayed, seeds), count(replayed, seeds, group=8)
    eager_group = count(eager, seeds, group=8)
    # the hops' 9, a clear of each of the 4 node buffers of every batch but the last, and
    # two packs of the group's outputs (its nodes, its edges)
    assert eager_group["kernel_launches"] == 9 + 4 * 7 / 8 + 2 / 8
    assert grouped["kernel_launches"] == 2 / 8
    # one read for the group's seeds' range and one for its sizes
    assert grouped["host_reads"] == eager_group["host_reads"] == 2 / 8
    assert single["host_reads"] == 2
    # two packs copy the outputs out, so what is left a batch is a few ops: its part of the
    # group's inputs (its keys), and views split out of the packed outputs
    assert grouped["views"] <= 1, grouped
    assert grouped["torch_ops"] < single["torch_ops"] / 3, (grouped, single)
    assert grouped["sampled_edges"] > 0


def group_loader(lib, data, csr, *, replay: bool, group: int, thread: bool):
    from ibp_graph.loaders.pyg import NeighborLoader

    sampler, capture = host_sampler(lib, csr, [6, 4], replay=replay)
    loader = NeighborLoader(data, [6, 4], batch_size=48, seed=3, csr=csr, shuffle=True,
                            neighbor_sampler=sampler, prefetch_thread=thread,
                            sample_group=group)  # fmt: skip
    return loader, capture


def group_data():
    """A 400-node graph (seeds: 8 batches of 48 and one of 16) and its CSR."""
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(12)
    ei = torch.randint(0, 400, (2, 5000), generator=gen)
    data = Data(x=torch.randn(400, 8), edge_index=ei, num_nodes=400)
    return data, CSRGraph.from_data(data)


def two_epochs(loader) -> list:
    return [[(b.n_id, b.edge_index, b.e_id, b.input_id) for b in loader] for _ in range(2)]


def assert_same_epochs(got: list, want: list) -> None:
    for epoch_got, epoch_want in zip(got, want, strict=True):
        assert len(epoch_got) == len(epoch_want) == 9  # 400 seeds: 8 batches of 48, one of 16
        for x, y in zip(epoch_got, epoch_want, strict=True):
            assert all(torch.equal(a, b) for a, b in zip(x, y, strict=True))


@pytest.mark.parametrize("thread", [False, True])
@pytest.mark.parametrize("replay", [False, True])
def test_the_loader_samples_groups_of_the_same_batches(lib, replay, thread) -> None:
    data, csr = group_data()
    want = two_epochs(group_loader(lib, data, csr, replay=False, group=1, thread=False)[0])
    loader, capture = group_loader(lib, data, csr, replay=replay, group=3, thread=thread)
    assert loader.sample_group == 3
    assert_same_epochs(two_epochs(loader), want)
    if replay:
        # calls of 3 batches: (48, 3) twice an epoch, then (48, 2) and (16, 1), captured
        # where each epoch starts
        graphs = loader.node_sampler._replay.graphs
        assert set(graphs) == {(48, 3), (48, 2), (16, 1)} and len(capture.graphs) == 3
        assert sorted(g.replays for g in capture.graphs) == [1 + 2, 1 + 2, 1 + 4]


def test_the_loaders_refuse_a_bad_sample_group(lib) -> None:
    from torch_geometric.data import Data

    from ibp_graph.loaders.pyg import NeighborLoader

    data = Data(x=torch.randn(50, 4), edge_index=torch.randint(0, 50, (2, 200)), num_nodes=50)
    for bad in (0, -2, True, 2.0, "3"):
        with pytest.raises(
            IBPInputError, match=re.escape(f"sample_group must be an int >= 1, got {bad!r}")
        ):
            NeighborLoader(data, [3], batch_size=8, sample_group=bad)
    loader = NeighborLoader(data, [3], batch_size=8, sample_group=4, seed=1)
    plain = NeighborLoader(data, [3], batch_size=8, seed=1)
    for a, b in zip(loader, plain, strict=True):  # the torch backend samples one by one
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)


@pytest.mark.parametrize("replay", [False, True])
def test_the_loaders_group_by_default_with_the_hop_kernels(lib, replay) -> None:
    from ibp_graph.loaders.pyg import NeighborLoader

    data, csr = group_data()
    want = two_epochs(group_loader(lib, data, csr, replay=False, group=1, thread=False)[0])
    sampler, capture = host_sampler(lib, csr, [6, 4], replay=replay)
    sampler.backend = "kernel"  # the harness's kernels stand in for the GPU's
    loader = NeighborLoader(data, [6, 4], batch_size=48, seed=3, csr=csr, shuffle=True,
                            neighbor_sampler=sampler)  # fmt: skip
    assert loader.sample_group == loading.DEFAULT_SAMPLE_GROUP == 8
    assert loader.sampler_cuda_graph is replay
    assert_same_epochs(two_epochs(loader), want)
    if replay:  # a call of 8 batches of 48, then one of the last batch, 16 seeds
        assert set(loader.node_sampler._replay.graphs) == {(48, 8), (16, 1)}
        assert sorted(g.replays for g in capture.graphs) == [1 + 2, 1 + 2]
    # the torch backend samples a group's batches one by one: one a call
    plain = NeighborLoader(data, [6, 4], batch_size=48)
    assert plain.sample_group == 1 and plain.sampler_cuda_graph is False
    # hops that read their sizes (whole neighborhoods, per-hop draws): one a call too
    for fanouts, kw in (([-1, 4], {}), ([6, 4], {"draw": "per_hop"})):
        reads, _ = host_sampler(lib, csr, fanouts, replay=replay, **kw)
        assert not reads.replayable
        loader = NeighborLoader(data, fanouts, batch_size=48, csr=csr, neighbor_sampler=reads)
        assert loader.sample_group == 1
    assert sampler.replayable


def test_sampler_cuda_graph_is_checked(monkeypatch) -> None:
    from ibp_graph.loaders.pyg import NeighborLoader

    data, csr = group_data()
    assert loading.default_cuda_graph("kernel") and not loading.default_cuda_graph("torch")
    with pytest.raises(IBPInputError, match=re.escape(
        "sampler_cuda_graph=True replays the fused hop kernels' launches, so it needs "
        "sampler_backend='kernel' (the loader's sampler runs 'torch')"
    )):  # fmt: skip
        NeighborLoader(data, [3], batch_size=8, sampler_cuda_graph=True)
    with pytest.raises(IBPInputError, match="sampler_cuda_graph must be a bool, got 'str'"):
        NeighborLoader(data, [3], batch_size=8, sampler_cuda_graph="yes")
    assert not NeighborLoader(data, [3], batch_size=8, sampler_cuda_graph=False).sampler_cuda_graph
    monkeypatch.setattr(loading, "_WARNED", set())
    ours = NeighborSampler(csr, [3])
    with pytest.warns(
        loading.ArgumentIgnoredWarning,
        match=re.escape("sampler_cuda_graph=True: neighbor_sampler keeps its own cuda_graph=False"),
    ):
        loader = NeighborLoader(data, [3], batch_size=8, neighbor_sampler=ours,
                                sampler_cuda_graph=True)  # fmt: skip
    assert loader.sampler_cuda_graph is False


@pytest.mark.parametrize("replay", [False, True])
def test_a_hop_of_torch_ops_that_draws_samples_one_by_one(lib, replay) -> None:
    # A fanout above MAX_K runs as torch ops, which draw from the sampler's generator: a group
    # would seed it for every batch before launching any, so such batches run one by one.
    n = 2000
    src = torch.randint(0, n, (6000,), generator=torch.Generator().manual_seed(0))
    g = CSRGraph.from_edge_index(torch.stack([src, torch.arange(10).repeat_interleave(600)]), n)
    batches = [torch.randperm(10, generator=torch.Generator().manual_seed(k))[:6] for k in range(3)]
    a, _ = host_sampler(lib, g, [MAX_K + 2, 3], replay=replay)
    b, _ = host_sampler(lib, g, [MAX_K + 2, 3], replay=replay)
    assert b.group_shapes([6, 6, 6]) == [(6, 1)] * 3
    want = one_by_one(a, batches, [11, 12, 13])
    got = b.sample_batches(batches, batch_seeds=[11, 12, 13])
    assert all(w.num_sampled_edges[0] > 6 * (MAX_K + 2) // 2 for w in want)  # rows drawn
    for x, y in zip(got, want, strict=True):
        assert_same(x, y)


def test_group_shapes(lib) -> None:
    g = power_graph(42, n=400)
    kernel, _ = host_sampler(lib, g, [4, 2], replay=False)
    assert kernel.group_shapes([8, 8, 8, 3, 8, 8]) == [(8, 3), (3, 1), (8, 2)]
    assert kernel.group_shapes([]) == []
    induced, _ = host_sampler(lib, g, [4, 2], replay=False, subgraph_type="induced")
    assert induced.group_shapes([8, 8]) == [(8, 1), (8, 1)]
    assert NeighborSampler(g, [4, 2]).group_shapes([8, 8]) == [(8, 1), (8, 1)]
