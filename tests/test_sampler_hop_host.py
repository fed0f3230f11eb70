"""The fused sampling hop (`ibp_graph.sample_hop`, the hop kernels of
``cuda/sample_neighbors.cu``), run on the host (tests/simt).

The kernel source is built with g++ and the SIMT harness (the `lib` fixture of conftest) and
driven by the same `fused_hop` the GPU runs, on CPU tensors. Each hop is checked bit for bit
against a plain-Python hop over the same draws (`reference_row`, the transcription of the
kernel's random stream), and whole batches of a `NeighborSampler` using the hop kernels against
a plain-Python multi-hop sampler. The `gpu` tests check that the real launches give the same
bits as the host runs.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import random_graph
from simt.host_hops import HostHopKernels
from test_sampler_kernel_host import GAMMA, M64, _mix, reference_row

from ibp_graph.graph import CSRGraph
from ibp_graph.kernels.sample_neighbors import MAX_K
from ibp_graph.sample_draw import randint
from ibp_graph.sample_hop import fused_hop
from ibp_graph.sample_index import KNOWN, UNSEEN
from ibp_graph.sampler import NeighborSampler


def replace_row(key: int, row: int, n: int, k: int) -> list[int]:
    """The kernel's ``k`` offsets with replacement for row ``row`` of population ``n``."""
    state = _mix((key & M64) ^ _mix(row))
    out = []
    for _ in range(k):
        state = (state + GAMMA) & M64
        out.append((_mix(state) * n) >> 64)
    return sorted(out)


def reference_hop(graph, local: dict[int, int], frontier, begin, end, fanout, replace, key):
    """Plain-Python hop: ``(row, col, edge, fresh)`` lists; enters new nodes in ``local``."""
    indptr, indices = graph.indptr.tolist(), graph.indices.tolist()
    edge_ids = graph.edge_ids.tolist()
    row, col, edge, fresh = [], [], [], []
    for i, v in enumerate(frontier):
        start, n = indptr[v], indptr[v + 1] - indptr[v]
        if fanout < 0 or (n <= fanout and not replace):
            picks = list(range(n))
        elif n == 0:
            picks = []
        elif replace:
            picks = replace_row(key, i, n, fanout)
        else:
            picks = reference_row(key, i, n, fanout)
        for p in picks:
            u = indices[start + p]
            if u not in local:
                local[u] = end + len(fresh)
                fresh.append(u)
            row.append(local[u])
            col.append(begin + i)
            edge.append(edge_ids[start + p])
    return row, col, edge, fresh


def power_graph(seed: int, n: int = 300, index_dtype=torch.int64) -> CSRGraph:
    """A graph with hubs (degrees far above the fanouts), leaves and isolated nodes."""
    gen = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n - 9) ** 1.2
    src = gen.integers(0, n, 6000)
    dst = gen.choice(n - 10, 6000, p=weights / weights.sum())  # the last 10 have no in-edges
    ei = torch.from_numpy(np.stack([src, dst]))
    return CSRGraph.from_edge_index(ei, num_nodes=n, indices_dtype=index_dtype)


def dense_map(graph: CSRGraph, known: dict[int, int]) -> torch.Tensor:
    local = torch.full((graph.num_nodes,), UNSEEN, dtype=torch.int64)
    for v, i in known.items():
        local[v] = i - KNOWN
    return local


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize(
    ("fanout", "replace"),
    [(1, False), (3, False), (32, False), (33, False), (MAX_K, False), (5, True), (40, True),
     (-1, False)],
)  # fmt: skip
def test_one_hop_matches_the_python_hop(lib, index_dtype, fanout: int, replace: bool) -> None:
    g = power_graph(fanout + 8, index_dtype=index_dtype)
    gen = np.random.default_rng(fanout + 1)
    deg = (g.indptr[1:] - g.indptr[:-1]).numpy()
    hubs = np.argsort(deg, kind="stable")[-2:].tolist()  # degrees far above every fanout
    special = [*hubs, g.num_nodes - 1]  # and a node with no in-neighbor
    others = gen.choice(np.setdiff1d(np.arange(g.num_nodes), special), 37, replace=False)
    known_nodes = [*others[:25].tolist(), *special, *others[25:].tolist()]
    known = {v: i for i, v in enumerate(known_nodes)}
    begin, end = 25, 40  # the frontier: the last 15 known nodes, hubs and the isolated node
    assert deg[hubs].min() > max(fanout, 0) and deg[-1] == 0
    frontier = known_nodes[begin:end]
    local = dense_map(g, known)
    key = -(2**50) + 17 * fanout
    kernels = HostHopKernels(lib)
    row, col, edge, fresh = fused_hop(
        kernels, g, local, torch.tensor(frontier), begin=begin, end=end, fanout=fanout,
        replace=replace, key=torch.tensor([key]),
    )  # fmt: skip
    want = reference_hop(g, dict(known), frontier, begin, end, fanout, replace, key)
    assert [row.tolist(), col.tolist(), edge.tolist(), fresh.tolist()] == list(want)
    assert len(want[0]) > 0 and len(want[3]) > 0
    # The map now holds every node of the batch, the new ones numbered from `end`.
    for v, i in itertools.chain(known.items(), zip(want[3], itertools.count(end))):
        assert int(local[v]) == i - KNOWN
    assert int((local != UNSEEN).sum()) == len(known) + len(want[3])
    first = "take_all" if fanout < 0 else "draw"
    assert kernels.launches == [first, "flags", "emit"]


def test_grid_and_block_do_not_change_the_hop(lib) -> None:
    g = power_graph(3)
    frontier = torch.arange(0, 120, 2)
    runs = []
    for grid, block in [(1, 32), (2, 64), (5, 96)]:
        local = dense_map(g, {v: i for i, v in enumerate(frontier.tolist())})
        out = fused_hop(
            HostHopKernels(lib, grid, block), g, local, frontier, begin=0, end=60, fanout=4,
            replace=False, key=torch.tensor([99]),
        )  # fmt: skip
        runs.append([t.tolist() for t in out])
    assert runs[0] == runs[1] == runs[2]


def test_a_hop_too_large_to_count_is_a_clear_error_before_any_launch(lib, monkeypatch) -> None:
    from ibp_graph import sample_hop

    g = power_graph(5)
    frontier = torch.arange(0, 40)
    kernels = HostHopKernels(lib)
    # The real bound keeps the scan's last word, every slot used and fresh, in an int64.
    most = sample_hop._MAX_SLOTS - 1
    assert most * (1 << 32) + most < 2**63 and most < 1 << 32
    monkeypatch.setattr(sample_hop, "_MAX_SLOTS", 40 * 4)  # stands in for 2^31 slots
    with pytest.raises(ValueError, match=r"sampling hop of 160 slots .*fewer than 160"):
        fused_hop(
            kernels, g, dense_map(g, {}), frontier, begin=0, end=40, fanout=4, replace=False,
            key=torch.tensor([7]),
        )  # fmt: skip
    assert kernels.launches == []
    # One slot fewer: the hop runs.
    out = fused_hop(
        kernels, g, dense_map(g, {}), frontier[:39], begin=0, end=39, fanout=4, replace=False,
        key=torch.tensor([7]),
    )  # fmt: skip
    assert kernels.launches == ["draw", "flags", "emit"] and out[0].numel() > 0


def test_empty_hops_launch_nothing(lib) -> None:
    g = power_graph(4)
    isolated = torch.arange(g.num_nodes - 10, g.num_nodes)
    kernels = HostHopKernels(lib)
    for fanout in (3, -1):
        local = dense_map(g, {})
        out = fused_hop(
            kernels, g, local, isolated[:0], begin=0, end=0, fanout=fanout, replace=False,
            key=torch.tensor([1]),
        )  # fmt: skip
        assert all(t.numel() == 0 for t in out)
    # Isolated nodes: slots exist but none is used.
    local = dense_map(g, {})
    out = fused_hop(
        kernels, g, local, isolated, begin=0, end=10, fanout=3, replace=True,
        key=torch.tensor([1]),
    )  # fmt: skip
    assert all(t.numel() == 0 for t in out)
    assert kernels.launches == ["draw", "flags", "emit"]
    assert bool((local == UNSEEN).all())


def reference_batch(graph, seeds, fanouts, keys, *, replace=False, per_hop=False):
    """Plain-Python multi-hop sampling over the kernels' draws (PyG/DGL layout)."""
    local: dict[int, int] = {}
    for i, s in enumerate(seeds):
        local.setdefault(s, i)
    node = list(seeds)
    rows, cols, edges, nsn, nse = [], [], [], [len(seeds)], []
    begin, end = 0, len(seeds)
    for fanout, key in zip(fanouts, keys, strict=True):
        lo = 0 if per_hop else begin
        if fanout == 0:
            r, c, e, f = [], [], [], []
        else:
            r, c, e, f = reference_hop(graph, local, node[lo:end], lo, end, fanout, replace, key)
        rows += r
        cols += c
        edges += e
        node += f
        nsn.append(len(f))
        nse.append(len(r))
        begin, end = end, len(node)
    return node, rows, cols, edges, nsn, nse


@pytest.mark.parametrize(
    ("fanouts", "replace", "draw"),
    [
        ([5, 3, 2], False, "once"),
        ([40, -1], False, "once"),
        ([4, 0, 3], True, "once"),
        ([3, 2], False, "per_hop"),
    ],
)
def test_sampler_batches_match_the_python_sampler(lib, fanouts, replace, draw) -> None:
    g = power_graph(11, index_dtype=torch.int32)
    sampler = NeighborSampler(g, fanouts, seed=5, replace=replace, draw=draw)
    sampler._hop_kernels = HostHopKernels(lib)
    gen = torch.Generator().manual_seed(5)
    for b in range(3):
        seeds = torch.randint(0, g.num_nodes, (12,), generator=torch.Generator().manual_seed(b))
        seeds[3] = seeds[0]  # a repeated seed keeps its first position
        keys = randint(len(fanouts), 1, gen, torch.device("cpu")).view(-1).tolist()
        out = sampler.sample(seeds)
        node, row, col, edge, nsn, nse = reference_batch(
            g, seeds.tolist(), fanouts, keys, replace=replace, per_hop=draw == "per_hop"
        )
        assert out.node.tolist() == node
        assert out.row.tolist() == row
        assert out.col.tolist() == col
        assert out.edge.tolist() == edge
        assert out.num_sampled_nodes == nsn
        assert out.num_sampled_edges == nse
        assert bool((sampler._map == UNSEEN).all()), "the map is left empty for the next batch"


def test_sizes_read_early_or_at_the_end_give_the_same_batches(lib, monkeypatch) -> None:
    # Buffers sized from the bounds, the sizes read once at the end, or read before every hop
    # (every bound too loose): the same batch, and the outputs are cut to size (not views of
    # the buffers sized for the bounds).
    from ibp_graph import sample_hop

    g = power_graph(14, n=1500, index_dtype=torch.int32)
    seeds = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(2))[:64]
    seeds[5] = seeds[1]
    runs, reads = [], []
    real_read = sample_hop.read_counts
    monkeypatch.setattr(sample_hop, "read_counts", lambda t: reads.append(t) or real_read(t))
    for bound in (sample_hop._BOUND_SLOTS, 0):
        monkeypatch.setattr(sample_hop, "_BOUND_SLOTS", bound)
        sampler = NeighborSampler(g, [6, 4, 3], seed=9)
        kernels = sampler._hop_kernels = HostHopKernels(lib)
        reads.clear()
        out = sampler.sample(seeds)
        runs.append(out)
        # Once at the end; or before hops 2 and 3 (their bounds too loose), and at the end.
        assert len(reads) == (1 if bound else 3)
        assert kernels.launches == ["draw", "flags", "emit"] * 3 + ["pack", "pack"]
        assert out.node.untyped_storage().nbytes() == out.node.numel() * 8
        for t in (out.row, out.col, out.edge):  # rows of one (3, edges) tensor
            assert t.untyped_storage().nbytes() == 3 * out.row.numel() * 8
    a, b = runs
    for name in ("node", "row", "col", "edge", "num_sampled_nodes", "num_sampled_edges"):
        assert torch.equal(*(torch.as_tensor(getattr(x, name)) for x in runs)), name
    keys = randint(3, 1, torch.Generator().manual_seed(9), torch.device("cpu")).view(-1).tolist()
    want = reference_batch(g, seeds.tolist(), [6, 4, 3], keys)
    assert [a.node.tolist(), a.row.tolist(), a.col.tolist(), a.edge.tolist()] == list(want[:4])
    assert a.num_sampled_nodes == want[4] and a.num_sampled_edges == want[5]


def test_a_kernel_hop_after_a_torch_hop_finds_its_sizes(lib) -> None:
    # The torch hop stores its sizes on the device for the kernel hop after it, which reads
    # them there: the batch is whole (every edge real, its ends where the ids say).
    g = power_graph(15, n=800)
    sampler = NeighborSampler(g, [MAX_K + 1, 3, 0, 2], seed=4)
    kernels = sampler._hop_kernels = HostHopKernels(lib)
    out = sampler.sample(torch.tensor([3, 9, 3, 700]))
    # hop 2 (hop 3 takes none), then the packs of the nodes and the edges
    assert kernels.launches == ["draw", "flags", "emit", "pack", "pack"]
    assert out.num_sampled_edges[2:] == [0, 0] and out.num_sampled_nodes[3:] == [0, 0]
    assert sum(out.num_sampled_nodes) == out.node.numel() == out.node.unique().numel() + 1
    assert sum(out.num_sampled_edges) == out.row.numel() > out.num_sampled_edges[0] > 0
    at = torch.empty_like(g.edge_ids)
    at[g.edge_ids] = torch.arange(g.edge_ids.numel())
    pos = at[out.edge]
    dst = torch.repeat_interleave(torch.arange(g.num_nodes), g.indptr[1:] - g.indptr[:-1])
    assert torch.equal(out.node[out.row], g.indices[pos].long())
    assert torch.equal(out.node[out.col], dst[pos])
    assert bool((sampler._map == UNSEEN).all())


def test_fanouts_above_the_kernels_use_torch_ops(lib) -> None:
    g = power_graph(12)
    sampler = NeighborSampler(g, [MAX_K + 1, 2], seed=1)
    kernels = sampler._hop_kernels = HostHopKernels(lib)
    out = sampler.sample(torch.tensor([0, 1, 2]))
    # the second hop only, then the packs of the nodes and the edges
    assert kernels.launches == ["draw", "flags", "emit", "pack", "pack"]
    assert out.num_sampled_edges[0] == int(
        (g.indptr[1:4] - g.indptr[:3]).clamp(max=MAX_K + 1).sum()
    )


def test_modes_after_the_hops_use_the_kernel_batch(lib) -> None:
    g = CSRGraph.from_edge_index(random_graph(8), num_nodes=60)
    for subgraph_type in ("bidirectional", "induced"):
        sampler = NeighborSampler(g, [3, 3], seed=2, subgraph_type=subgraph_type)
        sampler._hop_kernels = HostHopKernels(lib)
        out = sampler.sample(torch.tensor([1, 2, 3]))
        edges = set(zip(*random_graph(8).tolist(), strict=True))
        for r, c in zip(out.row.tolist(), out.col.tolist(), strict=True):
            u, v = out.node[r].item(), out.node[c].item()
            assert (u, v) in edges or (subgraph_type == "bidirectional" and (v, u) in edges)


def test_strided_seeds_give_the_batch_of_their_values(lib) -> None:
    # The kernels read the seeds by address: a strided view must not be read as if packed.
    g = power_graph(3, n=400)
    packed = torch.randperm(400, generator=torch.Generator().manual_seed(1))[:128]
    strided = packed.repeat_interleave(2)[::2]
    assert torch.equal(strided, packed) and not strided.is_contiguous()
    batches = []
    for seeds in (packed, strided):
        sampler = NeighborSampler(g, [5, 3], seed=7)
        sampler._hop_kernels = HostHopKernels(lib)
        batches.append(sampler.sample(seeds))
    want, got = batches
    for name in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert got.num_sampled_nodes == want.num_sampled_nodes


# --------------------------------------------------------------------------------------------
# On a GPU: the real launches give the host run's bits
# --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize(("fanout", "replace"), [(1, False), (15, False), (MAX_K, False),
                                                 (7, True), (-1, False)])  # fmt: skip
def test_gpu_hop_matches_the_host_run(lib, index_dtype, fanout: int, replace: bool) -> None:
    from ibp_graph.kernels.sample_neighbors import CudaHopKernels

    g = power_graph(21, n=3000, index_dtype=index_dtype)
    frontier = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(1))[:700]
    known = {v: i for i, v in enumerate(frontier.tolist())}
    key = torch.tensor([-(2**40) - fanout])
    host_map = dense_map(g, known)
    host = fused_hop(HostHopKernels(lib), g, host_map, frontier, begin=0, end=700,
                     fanout=fanout, replace=replace, key=key)  # fmt: skip
    gd = CSRGraph(g.indptr.cuda(), g.indices.cuda(), g.edge_ids.cuda(), g.num_nodes)
    dev_map = host_map.new_full(host_map.shape, UNSEEN)
    dev_map[frontier] = torch.arange(700) - KNOWN
    dev_map = dev_map.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kernels = CudaHopKernels(gd.device, max_blocks=2)
        with kernels.launching():
            dev = fused_hop(kernels, gd, dev_map, frontier.cuda(), begin=0, end=700,
                            fanout=fanout, replace=replace, key=key.cuda())  # fmt: skip
    torch.cuda.current_stream().wait_stream(side)
    for a, b in zip(host, dev, strict=True):
        assert torch.equal(a, b.cpu())
    assert torch.equal(host_map, dev_map.cpu())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_sampler_kernel_backend_is_reproducible_and_valid() -> None:
    g = power_graph(22, n=5000)
    gd = CSRGraph(g.indptr.cuda(), g.indices.cuda(), g.edge_ids.cuda(), g.num_nodes)
    seeds = torch.randperm(g.num_nodes)[:256].cuda()
    a = NeighborSampler(gd, [15, 10, 5], seed=3, backend="kernel").sample(seeds)
    b = NeighborSampler(gd, [15, 10, 5], seed=3, backend="kernel").sample(seeds)
    assert torch.equal(a.node, b.node) and torch.equal(a.row, b.row)
    assert torch.equal(a.edge, b.edge) and torch.equal(a.col, b.col)
    # Every edge is a real in-edge, and the local ids point at its endpoints.
    at = torch.empty_like(g.edge_ids)
    at[g.edge_ids] = torch.arange(g.edge_ids.numel())  # CSR position of every edge id
    pos = at[a.edge.cpu()]
    dst = torch.repeat_interleave(torch.arange(g.num_nodes), g.indptr[1:] - g.indptr[:-1])
    assert torch.equal(a.node[a.row].cpu(), g.indices[pos].long())
    assert torch.equal(a.node[a.col].cpu(), dst[pos])
    assert a.node.unique().numel() == a.node.numel()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fanouts", [[15, 10, 5], [4, -1, 3]])
def test_gpu_batch_matches_the_host_run(lib, fanouts) -> None:
    # A whole batch, its sizes kept on the device between hops: the GPU's bits are the host's.
    from ibp_graph.kernels.sample_neighbors import CudaHopKernels
    from ibp_graph.sample_hop import finish_batch, launch_batch
    from ibp_graph.sample_index import dense_seed

    g = power_graph(23, n=600, index_dtype=torch.int32)
    seeds = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(3))[:300]
    seeds[7] = seeds[2]
    keys = torch.tensor([-(2**33) + h for h in range(len(fanouts))])
    gd = CSRGraph(g.indptr.cuda(), g.indices.cuda(), g.edge_ids.cuda(), g.num_nodes)
    runs = []
    for graph, kernels in ((g, HostHopKernels(lib)), (gd, CudaHopKernels(gd.device))):
        device = graph.indptr.device
        local = torch.full((g.num_nodes,), UNSEEN, dtype=torch.int64, device=device)
        s = seeds.to(device)
        dense_seed(local, s, torch.arange(s.numel(), device=device))
        with kernels.launching():
            launched = launch_batch(
                kernels, graph, local, s, fanouts, replace=False, per_hop=False,
                keys=keys.to(device), torch_hop=None,
            )  # fmt: skip
            out = finish_batch(launched, kernels)
        runs.append([torch.as_tensor(x).cpu() for x in out])
    host, dev = runs
    assert host[4][0] == 300 and host[1].numel() > 1000
    for a, b in zip(host, dev, strict=True):
        assert torch.equal(a, b)


def test_a_fused_batch_costs_few_ops_and_reads_its_sizes_once(lib) -> None:
    from benchmarks.sampling_ops import count

    g = power_graph(13, n=2000)
    seeds = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(0))[:200]
    fused = NeighborSampler(g, [15, 10, 5], seed=0)
    fused._hop_kernels = HostHopKernels(lib)
    got = count(fused, seeds)
    assert got["kernel_launches"] == 9 + 2  # draw, flags, emit per hop; the outputs' packs
    assert got["host_reads"] == 2  # the seeds' range, then the batch's sizes once
    assert got["host_values_in"] == 0  # no `t[i] = n`: a synchronising copy on a GPU
    assert got["other_ops"] <= 20, got["top_ops"]
    assert got["sampled_edges"] > 0
    # Against the torch-ops hops on the same graph (the compiled CPU hop switched off).
    ops = NeighborSampler(g, [15, 10, 5], seed=0)
    ops._compiled_hop = lambda: False
    base = count(ops, seeds)
    assert base["kernel_launches"] == 0
    assert base["other_ops"] > 5 * got["other_ops"] and base["host_reads"] > got["host_reads"]
    # Every op is put down to the ibp_graph function that dispatched it.
    for counted in (got, base):
        assert sum(counted["ops_by_function"].values()) == counted["torch_ops"]
    assert next(iter(got["ops_by_function"])) == "sample_hop._launch_hop"
    assert next(iter(base["ops_by_function"])) == "sample_draw.floyd_sample"


def test_read_counts_waits_on_the_tensors_own_device(monkeypatch) -> None:
    # A tensor on cuda:1 read while cuda:0 is current: the event that the host waits on must
    # follow the copy, on cuda:1's current stream (run on any machine, with fakes).
    from ibp_graph import sample_hop

    log = []

    class Host:
        def copy_(self, src, non_blocking=False):
            log.append(("copy", src.device, non_blocking))

        def tolist(self):
            log.append(("read",))
            return [4, 7]

    class Event:
        def __init__(self, blocking=False):
            assert blocking  # the host thread sleeps rather than spins

        def record(self, stream=None):
            log.append(("record", stream))

        def synchronize(self):
            log.append(("wait",))

    monkeypatch.setattr(torch, "empty", lambda *a, **k: Host())
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")
    t = type("T", (), {"device": torch.device("cuda", 1), "shape": (2,), "dtype": torch.int64})
    assert sample_hop.read_counts(t()) == [4, 7]
    cuda1 = torch.device("cuda", 1)
    assert log == [("copy", cuda1, True), ("record", f"stream of {cuda1}"), ("wait",), ("read",)]


# --------------------------------------------------------------------------------------------
# The pairs layout (`CSRGraph.pairs`: sources and edge ids interleaved, as `to_uva` places them)
# --------------------------------------------------------------------------------------------


def as_pairs(g: CSRGraph) -> CSRGraph:
    """``g`` with its int64 sources and edge ids interleaved in one ``(E, 2)`` array."""
    both = torch.stack([g.indices.long(), g.edge_ids], 1)
    out = CSRGraph(indptr=g.indptr, indices=both[:, 0], edge_ids=both[:, 1], num_nodes=g.num_nodes)
    assert out.pairs and out.indices.stride(0) == 2
    return out


class EmitRecorder(HostHopKernels):
    """Host hop kernels that keep the ``edge_ids`` every emit was given."""

    def __init__(self, lib) -> None:
        super().__init__(lib)
        self.edge_ids: list[torch.Tensor | None] = []

    def emit(self, nbr, pos, edge_ids, *args, **kwargs):
        self.edge_ids.append(edge_ids)
        return super().emit(nbr, pos, edge_ids, *args, **kwargs)


@pytest.mark.parametrize(
    ("fanouts", "replace", "draw"),
    [
        ([5, 3, 2], False, "once"),  # draws of 32 at most
        ([40, -1], False, "once"),  # above 32, then every in-neighbor
        ([4, 0, 3], True, "once"),
        ([3, 2], False, "per_hop"),
        ([MAX_K + 1, 3], False, "once"),  # torch ops, then a kernel hop
    ],
)
def test_a_pairs_graph_samples_the_batches_of_separate_arrays(lib, fanouts, replace, draw) -> None:
    g = power_graph(16)
    pairs = as_pairs(g)
    kernels = EmitRecorder(lib)
    got_sampler = NeighborSampler(pairs, fanouts, seed=3, replace=replace, draw=draw)
    got_sampler._hop_kernels = kernels
    want_sampler = NeighborSampler(g, fanouts, seed=3, replace=replace, draw=draw)
    want_sampler._hop_kernels = HostHopKernels(lib)
    for b in range(3):
        seeds = torch.randint(0, g.num_nodes, (20,), generator=torch.Generator().manual_seed(b))
        got, want = got_sampler.sample(seeds), want_sampler.sample(seeds)
        for name in ("node", "row", "col", "edge"):
            assert torch.equal(getattr(got, name), getattr(want, name)), name
        assert got.num_sampled_edges == want.num_sampled_edges
        assert sum(want.num_sampled_edges) > 0
    # The draw left each edge id in pos: no emit read edge_ids.
    assert kernels.edge_ids and all(e is None for e in kernels.edge_ids)


def test_a_pairs_graph_samples_the_groups_of_separate_arrays(lib) -> None:
    g = power_graph(17, n=600)
    batches = [
        torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(b))[:25]
        for b in range(4)
    ]
    outs = []
    for graph in (g, as_pairs(g)):
        sampler = NeighborSampler(graph, [6, 4], seed=2)
        sampler._hop_kernels = HostHopKernels(lib)
        outs.append(sampler.sample_batches(batches, batch_seeds=[7, 8, 9, 10]))
    for got, want in zip(*reversed(outs), strict=True):
        for name in ("node", "row", "col", "edge"):
            assert torch.equal(getattr(got, name), getattr(want, name)), name
