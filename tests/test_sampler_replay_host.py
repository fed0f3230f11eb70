"""Replayed sampling batches (`ibp_graph.sample_replay`, ``NeighborSampler(cuda_graph=True)``).

On the host the hop kernels run in the SIMT harness (`simt.host_hops`) and the capture is
`simt.host_graph.HostCapture`: it records a batch's torch ops and launches, undoes what they
wrote into tensors from before the capture, refuses host reads meanwhile, and replays the
record on the same tensors, as a CUDA graph does. A replayed batch must be the batch that the
same sampler computes eagerly, bit for bit. The `gpu` tests replay real CUDA graphs.
"""

from __future__ import annotations

import pickle
import re
import threading
import warnings

import pytest
import torch
from simt.host_graph import host_replay
from simt.host_hops import HostHopKernels
from test_sampler_hop_host import power_graph
from torch_geometric.data import Data

from ibp_graph import sample_hop, sample_replay
from ibp_graph.errors import IBPInputError
from ibp_graph.graph import CSRGraph
from ibp_graph.kernels.sample_neighbors import MAX_K
from ibp_graph.loaders.pyg import NeighborLoader
from ibp_graph.sample_index import dense_clear
from ibp_graph.sample_replay import (
    PER_CAPTURE_RNG_TORCH,
    BatchReplay,
    CaptureRefused,
    cuda_capture,
    torch_release,
)
from ibp_graph.sampler import NeighborSampler


def host_sampler(lib, graph, fanouts, *, replay: bool, max_graphs: int = 4, **kw):
    """A sampler with the host hop kernels; with ``replay``, its batches go through a
    `BatchReplay` capturing with `HostCapture` (returned as the second value)."""
    sampler = NeighborSampler(graph, fanouts, seed=5, **kw)
    sampler._hop_kernels = HostHopKernels(lib)
    capture = host_replay(sampler, sampler._hop_kernels, max_graphs) if replay else None
    return sampler, capture


def fields(batch) -> list:
    return [batch.node, batch.row, batch.col, batch.edge, batch.num_sampled_nodes,
            batch.num_sampled_edges]  # fmt: skip


def assert_same(a, b) -> None:
    for x, y in zip(fields(a), fields(b), strict=True):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)
        else:
            assert x == y


def seed_batches(graph: CSRGraph, sizes: list[int], seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for size in sizes:
        s = torch.randint(0, graph.num_nodes, (size,), generator=gen)
        s[size // 2] = s[0]  # a repeated seed
        out.append(s)
    return out


@pytest.mark.parametrize("fanouts", [[15, 10, 5], [4, 0, 3], [MAX_K], [2, 2, 2, 2]])
def test_replayed_batches_are_the_eager_ones(lib, fanouts) -> None:
    g = power_graph(3, n=400)
    eager, _ = host_sampler(lib, g, fanouts, replay=False)
    replayed, capture = host_sampler(lib, g, fanouts, replay=True)
    sizes = [64, 64, 37, 64, 64, 37, 37, 64]
    for seeds in seed_batches(g, sizes):
        want, got = eager.sample(seeds), replayed.sample(seeds)
        assert_same(got, want)
        assert got.num_edges > 0 or 0 in fanouts[:1]
    # Each size ran eagerly once, was captured the second time, then only replayed.
    assert replayed._replay.sizes() == [37, 64]
    assert len(capture.graphs) == 2
    assert sorted(gr.replays for gr in capture.graphs) == [2, 4]


def test_outputs_are_copies_not_the_graphs_buffers(lib) -> None:
    g = power_graph(4, n=400)
    replayed, capture = host_sampler(lib, g, [10, 5], replay=True)
    eager, _ = host_sampler(lib, g, [10, 5], replay=False)
    batches = seed_batches(g, [50] * 4, seed=1)
    outs = []
    for seeds in batches:
        outs.append(replayed.sample(seeds))
        eager.sample(seeds)
    # The earlier outputs did not change under later replays.
    again, _ = host_sampler(lib, g, [10, 5], replay=False)
    for seeds, out in zip(batches, outs, strict=True):
        assert_same(out, again.sample(seeds))
    buffers = {t.untyped_storage().data_ptr() for t in capture_buffers(replayed)}
    for out in outs:
        for t in fields(out)[:4]:
            assert t.untyped_storage().data_ptr() not in buffers


def capture_buffers(sampler) -> list[torch.Tensor]:
    (captured,) = sampler._replay.graphs.values()
    group = captured.group
    return [t for b in group.batches for t in (*b.nodes, *b.edges)] + [group.counts]


@pytest.mark.parametrize(
    ("fanouts", "kw"),
    [([-1, 3], {}), ([MAX_K + 1], {}), ([5, 3], {"draw": "per_hop"})],
)
def test_batches_that_read_sizes_are_never_captured(lib, fanouts, kw) -> None:
    g = power_graph(5, n=400)
    eager, _ = host_sampler(lib, g, fanouts, replay=False, **kw)
    replayed, capture = host_sampler(lib, g, fanouts, replay=True, **kw)
    for seeds in seed_batches(g, [20] * 4, seed=2):
        assert_same(replayed.sample(seeds), eager.sample(seeds))
    assert replayed._replay.graphs == {} and capture.graphs == []


def test_at_most_max_graphs_sizes_are_captured(lib) -> None:
    g = power_graph(6, n=400)
    eager, _ = host_sampler(lib, g, [6, 4], replay=False)
    replayed, capture = host_sampler(lib, g, [6, 4], replay=True, max_graphs=2)
    sizes = [10, 11, 12] * 3
    for seeds in seed_batches(g, sizes, seed=3):
        assert_same(replayed.sample(seeds), eager.sample(seeds))
    assert replayed._replay.sizes() == [10, 11] and len(capture.graphs) == 2


def test_a_capture_that_fails_warns_once_and_runs_eagerly(lib) -> None:
    g = power_graph(7, n=400)

    def broken(fn, device):
        raise RuntimeError("operation not permitted when stream is capturing")

    eager, _ = host_sampler(lib, g, [6, 4], replay=False)
    replayed, _ = host_sampler(lib, g, [6, 4], replay=True)
    replayed._replay = BatchReplay(broken)
    batches = seed_batches(g, [30, 30, 30, 20, 20, 20, 30], seed=4)
    assert_same(replayed.sample(batches[0]), eager.sample(batches[0]))
    with pytest.warns(RuntimeWarning, match="batches of 30 seeds could not be captured") as rec:
        assert_same(replayed.sample(batches[1]), eager.sample(batches[1]))
    assert "run it again without cuda_graph=True" in str(rec[0].message)
    # No second warning and no second try, for any size: a capture that failed part-way can
    # leave torch's allocator counting it as under way.
    for seeds in batches[2:]:
        assert_same(replayed.sample(seeds), eager.sample(seeds))
    assert replayed._replay.graphs == {}
    assert "operation not permitted" in replayed._replay.failed


def test_the_host_capture_refuses_a_size_read_into_python(lib) -> None:
    # A launch that reads a value of the batch while capturing is refused, as a capturing
    # CUDA stream refuses the synchronising copy: the batch then runs eagerly, with a warning.
    g = power_graph(8, n=400)
    sampler, capture = host_sampler(lib, g, [6, 4], replay=True)
    eager, _ = host_sampler(lib, g, [6, 4], replay=False)
    replay = BatchReplay(capture)
    seeds = seed_batches(g, [16], seed=5)[0]
    keys = torch.tensor([11, -12])

    def launch(inputs):
        sample_hop.read_counts(inputs[:1])
        return launch_of(sampler, inputs[:16].view(1, 16), inputs[16:].view(1, 2))

    replay._ready.add((16, 1))  # as if seen before: captured now
    with pytest.warns(RuntimeWarning, match="host read"):
        (got,) = replay.sample(
            launch, torch.cat([seeds, keys]), (16, 1), g.device, sampler._hop_kernels
        )
    assert replay.graphs == {}
    dense_clear(sampler._scratch(), got[0])
    (want,) = sample_hop.finish_group(
        launch_of(eager, seeds.view(1, 16), keys.view(1, 2)), eager._hop_kernels
    )
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y


def launch_of(sampler, seeds, keys):
    """`launch_group` of ``sampler``'s hop kernels (``seeds`` ``(K, B)``, ``keys`` ``(K, H)``)."""
    return sample_hop.launch_group(
        sampler._hop_kernels, sampler.graph, sampler._scratch(), seeds, sampler.num_neighbors,
        replace=False, per_hop=False, keys=keys, torch_hop=None,
        iota=torch.arange(seeds.shape[1]),
    )  # fmt: skip


def test_a_failed_batch_drops_the_graphs(lib) -> None:
    g = power_graph(9, n=400)
    replayed, _ = host_sampler(lib, g, [6, 4], replay=True)
    batches = seed_batches(g, [12] * 3, seed=6)
    for seeds in batches[:2]:
        replayed.sample(seeds)
    assert replayed._replay.sizes() == [12]
    kernels = replayed._hop_kernels

    class Broken:
        def launching(self):
            return kernels.launching()

        def __getattr__(self, name):
            raise RuntimeError("a launch failed")

    replayed._hop_kernels = Broken()
    replayed._replay.graphs.clear()  # the size runs eagerly, and fails
    replayed._replay._ready.clear()
    with pytest.raises(RuntimeError, match="a launch failed"):
        replayed.sample(batches[2])
    assert replayed._map is None and replayed._replay is None


def test_cuda_graph_argument_is_checked() -> None:
    g = power_graph(10, n=50)
    with pytest.raises(IBPInputError, match="cuda_graph=True .* needs backend='kernel'"):
        NeighborSampler(g, [3], cuda_graph=True)
    with pytest.raises(IBPInputError, match="cuda_graph"):
        NeighborSampler(g, [3], cuda_graph="yes")
    s = NeighborSampler(g, [3])
    assert s.cuda_graph is False and "cuda_graph" not in repr(s)


def test_a_replaying_sampler_pickles_without_its_graphs(lib) -> None:
    g = power_graph(11, n=400)
    replayed, _ = host_sampler(lib, g, [6, 4], replay=True)
    for seeds in seed_batches(g, [9] * 2, seed=7):
        replayed.sample(seeds)
    assert "cuda_graph=True" in repr(replayed)
    copy = pickle.loads(pickle.dumps(replayed))
    assert copy.cuda_graph is True and copy._replay is None


def test_a_replayed_batch_costs_a_few_ops_and_launches_only_its_packs(lib) -> None:
    from benchmarks.sampling_ops import count

    g = power_graph(13, n=2000)
    seeds = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(0))[:200]
    eager, _ = host_sampler(lib, g, [15, 10, 5], replay=False)
    replayed, _ = host_sampler(lib, g, [15, 10, 5], replay=True)
    base, got = count(eager, seeds), count(replayed, seeds)
    # the hops' 9 launches are in the graph; the two packs copy the outputs out of it
    assert base["kernel_launches"] == 9 + 2 and got["kernel_launches"] == 2
    assert got["host_reads"] == base["host_reads"] == 2  # the seeds' range, the sizes
    assert got["torch_ops"] < base["torch_ops"] / 2, (got["top_ops"], base["top_ops"])
    assert got["sampled_edges"] > 0 and base["sampled_edges"] > 0  # (other draws: 2 warm-ups)


def test_torch_release_reads_major_and_minor() -> None:
    assert torch_release("2.11.0+cu130") == (2, 11)
    assert torch_release("2.13.0") == (2, 13)
    assert torch_release("3.0.0a0+git1234") == (3, 0)
    assert torch_release() == torch_release(torch.__version__)


def _on_a_thread(fn) -> list[BaseException]:
    """Run ``fn`` on a thread of its own (not the main one); what it raised."""
    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return errors


def test_a_capture_off_the_main_thread_needs_per_capture_random_state(lib, monkeypatch) -> None:
    # Before torch 2.12 a capture marks the default CUDA generator as capturing for every
    # thread, and a training loop's dropout on another thread then fails: refused first.
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    device = torch.device("cuda", 0)
    (error,) = _on_a_thread(lambda: cuda_capture(lambda: pytest.fail("captured"), device))
    assert isinstance(error, RuntimeError)
    assert "torch 2.11.0+cu130 marks the default CUDA generator" in str(error)
    assert f"{PER_CAPTURE_RNG_TORCH[0]}.{PER_CAPTURE_RNG_TORCH[1]} or later" in str(error)
    # A sampler's replay then warns once and runs that size eagerly.
    replay = BatchReplay(capture=sample_replay.cuda_capture)
    replay._ready.add((3, 1))  # seen once: captured the next time
    launched: list[torch.Tensor] = []

    def launch(inputs):
        seeds = inputs[:3]
        launched.append(seeds)
        batch = sample_hop.LaunchedBatch(seeds, 1)
        batch.add(seeds.new_empty((3, 0)), seeds[:0], 0, 0)  # one hop, no edges
        return sample_hop.LaunchedGroup([batch], batch.counts.view(1, -1))

    def sample() -> None:
        with pytest.warns(RuntimeWarning, match="could not be captured as a CUDA graph") as rec:
            inputs = torch.cat([torch.arange(3), torch.zeros(1, dtype=torch.int64)])
            replay.sample(launch, inputs, (3, 1), torch.device("cpu"), HostHopKernels(lib))
        # Refused before capturing: nothing of torch's to worry about.
        assert "without cuda_graph=True" not in str(rec[0].message)

    assert _on_a_thread(sample) == []
    assert not replay.graphs and "torch 2.11.0+cu130" in replay.failed and len(launched) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("side_stream", [False, True])
def test_gpu_replayed_batches_are_the_eager_ones(side_stream: bool) -> None:
    g = power_graph(22, n=5000)
    gd = CSRGraph(g.indptr.cuda(), g.indices.cuda(), g.edge_ids.cuda(), g.num_nodes)
    eager = NeighborSampler(gd, [15, 10, 5], seed=3, backend="kernel")
    replayed = NeighborSampler(gd, [15, 10, 5], seed=3, backend="kernel", cuda_graph=True)
    stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        for seeds in seed_batches(g, [256, 256, 100, 256, 100, 256, 256], seed=8):
            seeds = seeds.cuda()
            want, got = eager.sample(seeds), replayed.sample(seeds)
            assert_same(got, want)
    assert replayed._replay.sizes() == [100, 256]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_replay_captured_on_a_thread_beside_training_work() -> None:
    # As in a loader's prefetch thread: the capture is the thread's own, while the main
    # thread keeps launching and allocating on its stream.
    import threading

    g = power_graph(23, n=5000)
    gd = CSRGraph(g.indptr.cuda(), g.indices.cuda(), g.edge_ids.cuda(), g.num_nodes)
    eager = NeighborSampler(gd, [10, 5], seed=4, backend="kernel")
    replayed = NeighborSampler(gd, [10, 5], seed=4, backend="kernel", cuda_graph=True)
    batches = seed_batches(g, [128] * 6, seed=9)
    got, errors = [], []

    def produce() -> None:
        try:
            with torch.cuda.stream(torch.cuda.Stream()):
                for seeds in batches:
                    got.append(replayed.sample(seeds))
                torch.cuda.current_stream().synchronize()
        except BaseException as e:  # raised again below
            errors.append(e)

    thread = threading.Thread(target=produce)
    x = torch.randn(1024, 1024, device="cuda")
    thread.start()
    while thread.is_alive():
        x = torch.nn.functional.normalize(x @ x.T + torch.randn_like(x), dim=1)
    thread.join()
    assert not errors, errors
    # Before torch 2.12 a capture off the main thread would break the main thread's random
    # ops (randn_like above), so the sampler refuses it and runs the batches eagerly.
    captures = torch_release() >= PER_CAPTURE_RNG_TORCH
    assert replayed._replay.sizes() == ([128] if captures else [])
    for seeds, batch in zip(batches, got, strict=True):
        assert_same(batch, eager.sample(seeds))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    ("fanouts", "index_dtype", "kw"),
    [([15, 10, 5], torch.int32, {}), ([4, 0, 3], torch.int64, {"replace": True}),
     ([MAX_K, 2], torch.int32, {"replace": True})],
)  # fmt: skip
def test_gpu_replayed_batches_are_the_eager_ones_in_other_modes(fanouts, index_dtype, kw) -> None:
    # int32 indices, draws with replacement, a hop of fanout 0, the widest draw; a repeated
    # seed in every batch (seed_batches).
    g = power_graph(24, n=5000, index_dtype=index_dtype)
    gd = CSRGraph(g.indptr.cuda(), g.indices.cuda(), g.edge_ids.cuda(), g.num_nodes)
    eager = NeighborSampler(gd, fanouts, seed=6, backend="kernel", **kw)
    replayed = NeighborSampler(gd, fanouts, seed=6, backend="kernel", cuda_graph=True, **kw)
    for seeds in seed_batches(g, [200, 200, 77, 200, 77, 200], seed=10):
        seeds = seeds.cuda()
        assert_same(replayed.sample(seeds), eager.sample(seeds))
    assert replayed._replay.sizes() == [77, 200]


def test_capture_sizes_captures_now_without_drawing_from_the_generator(lib) -> None:
    g = power_graph(10, n=400)
    eager, _ = host_sampler(lib, g, [6, 4], replay=False)
    replayed, capture = host_sampler(lib, g, [6, 4], replay=True)
    assert replayed.capture_sizes([37, 64, 37, 401, 0]) == [37, 64]  # 401 > nodes, 0: none
    assert replayed._replay.sizes() == [37, 64] and len(capture.graphs) == 2
    assert replayed.capture_sizes([64]) == [64] and len(capture.graphs) == 2  # kept
    # Every later batch replays, and is the batch of a sampler that never captured.
    batches = seed_batches(g, [64, 37, 64, 37], seed=7)
    for seeds in batches:
        assert_same(replayed.sample(seeds), eager.sample(seeds))
    # each graph ran once for its capture (a capture runs nothing), then for each batch
    assert sorted(gr.replays for gr in capture.graphs) == [3, 3]


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        (64, "sizes must be an iterable of ints, got 'int'"),
        ("64", "sizes must be an iterable of ints, got 'str'"),
        ([64, -1], "sizes must hold ints >= 0, got -1"),
        ([64.0], "sizes must hold ints >= 0, got 64.0"),
        ([True], "sizes must hold ints >= 0, got True"),
    ],
)
def test_capture_sizes_refuses_what_is_not_a_list_of_sizes(lib, sizes, message) -> None:
    sampler, capture = host_sampler(lib, power_graph(10, n=400), [6, 4], replay=True)
    with pytest.raises(IBPInputError, match=re.escape(message)):
        sampler.capture_sizes(sizes)
    assert capture.graphs == [] and sampler._replay.graphs == {}


def test_capture_sizes_stops_at_max_graphs_and_at_what_cannot_be_captured(lib, monkeypatch) -> None:
    g = power_graph(11, n=400)
    two, capture = host_sampler(lib, g, [6, 4], replay=True, max_graphs=2)
    assert two.capture_sizes([10, 11, 12]) == [10, 11] and len(capture.graphs) == 2
    # a hop whose frontier bound is too loose reads its sizes on the way: only running a
    # group shows it (here with the bound lowered to 100 slots)
    monkeypatch.setattr(sample_hop, "_BOUND_SLOTS", 100)
    reads, capture = host_sampler(lib, g, [6, 4], replay=True)
    calls = []
    run = reads._run_group
    reads._run_group = lambda *a: calls.append(1) or run(*a)
    assert reads.capture_sizes([20]) == [] and calls == [1]  # one eager batch shows it
    assert reads.capture_sizes([20]) == [] and calls == [1]  # and it is remembered
    assert capture.graphs == []
    monkeypatch.undo()
    plain, _ = host_sampler(lib, g, [6, 4], replay=False)
    assert plain.capture_sizes([20]) == [] and plain._replay is None
    for fanouts, kw in (
        ([6, 4], {"disjoint": True}),
        ([6, 4], {"draw": "per_hop"}),
        ([-1, 3], {}),  # reads its sizes first
        ([MAX_K + 1, 3], {}),  # a hop of torch ops
    ):  # never captured: nothing sampled
        never, capture = host_sampler(lib, g, fanouts, replay=True, **kw)
        calls.clear()
        run = never._run_group
        never._run_group = lambda *a, run=run: calls.append(1) or run(*a)
        assert never.capture_sizes([20]) == [] and capture.graphs == [] and calls == []


def test_the_loader_captures_its_sizes_where_its_thread_could_not(lib) -> None:
    # With torch before 2.12 a capture off the main thread is refused: the loader captures
    # its epoch's sizes on the thread that starts the epoch, so its prefetch thread replays
    # every batch, and the batches are those of a sampler that never replays.
    gen = torch.Generator().manual_seed(12)
    ei = torch.randint(0, 400, (2, 5000), generator=gen)
    data = Data(x=torch.randn(400, 8), edge_index=ei, num_nodes=400)

    def loader(replay: bool, thread: bool):
        csr = CSRGraph.from_data(data)
        sampler, capture = host_sampler(lib, csr, [6, 4], replay=replay)
        if replay:

            def main_only(fn, device):
                if threading.current_thread() is not threading.main_thread():
                    raise CaptureRefused("off the main thread")
                return capture(fn, device)

            sampler._replay = BatchReplay(main_only)
        made = NeighborLoader(data, [6, 4], batch_size=48, seed=3, csr=csr,
                              neighbor_sampler=sampler, prefetch_thread=thread,
                              sample_group=1)  # fmt: skip
        return made, capture

    want = [(b.n_id, b.edge_index, b.e_id) for b in loader(False, False)[0]]
    replayed, capture = loader(True, True)
    got = [(b.n_id, b.edge_index, b.e_id) for b in replayed]
    for x, y in zip(got, want, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(x, y, strict=True))
    assert len(list(replayed)) == len(want)  # a second epoch
    sizes = replayed.node_sampler._replay.sizes()
    assert sizes == [16, 48]  # 400 seeds: 8 batches of 48 and one of 16
    # every batch of both epochs, after the capture's own run
    assert sorted(gr.replays for gr in capture.graphs) == [1 + 2, 1 + 16]
    assert replayed.node_sampler._replay.failed is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_the_loader_replays_every_batch_on_its_prefetch_thread() -> None:
    # Whatever the torch: the loader captures its epoch's sizes where the epoch starts, and
    # its prefetch thread replays them while the training loop runs random ops.
    gen = torch.Generator().manual_seed(13)
    data = Data(
        x=torch.randn(5000, 16),
        edge_index=torch.randint(0, 5000, (2, 60_000), generator=gen),
        num_nodes=5000,
    )

    def make(cuda_graph: bool) -> NeighborLoader:
        csr = CSRGraph.from_data(data).to("cuda")
        sampler = NeighborSampler(csr, [10, 5], backend="kernel", cuda_graph=cuda_graph)
        return NeighborLoader(data, [10, 5], batch_size=512, seed=2, device="cuda", csr=csr,
                              neighbor_sampler=sampler, prefetch_thread=True)  # fmt: skip

    want = [(b.n_id.cpu(), b.edge_index.cpu()) for b in make(False)]
    loader = make(True)
    x = torch.randn(256, 256, device="cuda")
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no capture refused
        for batch in loader:
            x = torch.nn.functional.dropout(torch.tanh(x @ x.T), 0.5)
            got.append((batch.n_id.cpu(), batch.edge_index.cpu()))
    torch.cuda.synchronize()
    assert loader.node_sampler._replay.sizes() == [392, 512]  # 9 x 512, then 392
    assert loader.node_sampler._replay.failed is None
    for (a, b), (c, d) in zip(got, want, strict=True):
        assert torch.equal(a, c) and torch.equal(b, d)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_a_failed_capture_leaves_the_current_stream() -> None:
    # Last in the file: a capture that fails part-way (a sync while capturing).
    before = torch.cuda.current_stream()
    with pytest.raises(RuntimeError):
        cuda_capture(lambda: torch.cuda.current_stream().synchronize(), torch.device("cuda"))
    assert torch.cuda.current_stream() == before
