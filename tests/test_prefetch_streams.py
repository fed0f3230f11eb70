"""Stream discipline of the prefetcher, error order, and the pinned staging of CPU features.

Most checks run on the CPU: the CUDA path of `Prefetcher` is driven through a stand-in for
``torch.cuda`` that logs every stream and event call, so the order of waits, records and
``record_stream`` calls is checked without a GPU. The ``gpu`` tests check the same on a GPU.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from ibp_graph import features as features_mod
from ibp_graph import prefetch as prefetch_mod
from ibp_graph.errors import IBPInputError
from ibp_graph.features import TensorFeatures
from ibp_graph.prefetch import LoaderStats, Prefetcher

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# --------------------------------------------------------------------------------------------
# A logging stand-in for torch.cuda
# --------------------------------------------------------------------------------------------


@dataclass
class FakeCuda:
    """Streams and events that append what is done with them to ``log``.

    The current stream is per thread, as CUDA's: ``consumer`` on the thread that made the
    stand-in, a ``default`` stream of its own on any other thread.
    """

    device_index: int = 0
    log: list[tuple] = field(default_factory=list)
    ids: Any = field(default_factory=itertools.count)
    local: Any = field(default_factory=threading.local)
    owner: Any = field(default_factory=threading.get_ident)

    def __post_init__(self) -> None:
        self.consumer = self.stream_on("consumer")

    @property
    def current(self) -> FakeStream:
        if not hasattr(self.local, "stream"):
            mine = threading.get_ident() == self.owner
            self.local.stream = self.consumer if mine else self.stream_on("default")
        return self.local.stream

    @current.setter
    def current(self, stream: FakeStream) -> None:
        self.local.stream = stream

    def stream_on(self, name: str, device: Any = None) -> FakeStream:
        dev = torch.device("cuda", self.device_index) if device is None else torch.device(device)
        return FakeStream(self, name, dev)

    def position(self, entry: tuple) -> int:
        return next(i for i, e in enumerate(self.log) if e is entry)


class FakeEvent:
    def __init__(self, cuda: FakeCuda, **_: Any) -> None:
        self.cuda = cuda
        self.id = next(cuda.ids)
        self.stream: FakeStream | None = None
        self.at = -1  # position of its record in the log

    def record(self, stream: FakeStream | None = None) -> None:
        self.stream = stream if stream is not None else self.cuda.current
        self.cuda.log.append(("record", self, self.stream))
        self.at = len(self.cuda.log) - 1

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: FakeEvent) -> float:
        return 1.0

    def __repr__(self) -> str:
        return f"Event{self.id}@{self.stream}"


class FakeStream:
    def __init__(self, cuda: FakeCuda, name: str, device: torch.device) -> None:
        self.cuda, self.name, self.device = cuda, name, device

    def wait_stream(self, other: FakeStream) -> None:
        self.cuda.log.append(("wait_stream", self, other))

    def wait_event(self, event: FakeEvent) -> None:
        self.cuda.log.append(("wait_event", self, event))

    def record_event(self, event: FakeEvent | None = None) -> FakeEvent:
        event = event if event is not None else FakeEvent(self.cuda)
        event.record(self)
        return event

    def __repr__(self) -> str:
        return self.name


@pytest.fixture
def fake_cuda(monkeypatch) -> FakeCuda:
    cuda = FakeCuda()

    @contextlib.contextmanager
    def stream(s):
        before, cuda.current = cuda.current, s
        try:
            yield
        finally:
            cuda.current = before

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: cuda.device_index)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: cuda.stream_on("side", device))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: cuda.current)
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "Event", lambda **kw: FakeEvent(cuda, **kw))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(
        prefetch_mod, "record_stream", lambda obj, s: cuda.log.append(("record_stream", obj, s))
    )
    return cuda


@dataclass
class Batch:
    i: int


def _fetch_logging(cuda: FakeCuda):
    def fetch(i: int, stream: FakeStream) -> Batch:
        assert cuda.current is stream and stream.name == "side"
        cuda.log.append(("fetch", i))
        return Batch(i)

    return fetch


# --------------------------------------------------------------------------------------------
# Stream order (through the stand-in)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_side_stream_waits_for_the_consumer_once_then_only_up_to_the_last_handover(
    fake_cuda, depth
) -> None:
    log = fake_cuda.log
    pf = Prefetcher(range(8), _fetch_logging(fake_cuda), depth=depth, device="cuda")
    got = []
    for batch in pf:
        got.append(batch.i)
        log.append(("train", batch.i))  # the training step queued on the consumer stream
    assert got == list(range(8))

    # One full join, before the first batch is prepared.
    joins = [e for e in log if e[0] == "wait_stream"]
    assert len(joins) == 1 and joins[0][1].name == "side" and joins[0][2].name == "consumer"
    fetches = [i for i, e in enumerate(log) if e[0] == "fetch"]
    assert log.index(joins[0]) < fetches[0]

    # Every later batch waits at most for the consumer's work up to the previous handover:
    # never for the training step queued just before (the host would stall on it).
    for f in fetches[depth + 1 :]:
        last_train = max(i for i in range(f) if log[i][0] == "train")
        waits = [log[i] for i in range(f) if log[i][0] == "wait_event" and log[i][1].name == "side"]
        assert waits, "the side stream must be ordered after the consumer's earlier work"
        event = waits[-1][2]
        assert event.stream.name == "consumer" and event.at < last_train


def test_fetch_time_starts_at_the_first_kernel_not_at_the_python_before_it(
    fake_cuda, monkeypatch
) -> None:
    from ibp_graph.kernels.runtime import note_launch

    monkeypatch.setattr(prefetch_mod, "release_deferred", lambda: fake_cuda.log.append("release"))

    def fetch(i: int, stream: FakeStream) -> Batch:
        fake_cuda.log.append(("python", i))  # host work before the first kernel
        if i % 2 == 0:
            note_launch(stream)  # what every launcher does right before its kernel
            note_launch(stream)  # later launches do not move the start
        return Batch(i)

    stats = LoaderStats()
    stats.keep_timeline()
    pf = Prefetcher(range(4), fetch, depth=1, device="cuda", stats=stats)
    assert [batch.i for batch in pf] == [0, 1, 2, 3]
    log = fake_cuda.log
    fetch_intervals = [(end, start) for end, stage, start in stats._pending if stage == "fetch"]
    assert len(fetch_intervals) == 4
    # The kept timeline holds the same events, start first, and the waits' host clocks.
    kept = [(end, start) for stage, start, end in stats.timeline if stage == "fetch"]
    assert all(a[0] is b[0] and a[1] is b[1] for a, b in zip(kept, fetch_intervals, strict=True))
    waits = [(t0, t1) for stage, t0, t1 in stats.timeline if stage == "wait"]
    assert len(waits) == 4 and all(isinstance(t0, float) and t0 <= t1 for t0, t1 in waits)
    for i, (end, start) in enumerate(fetch_intervals):
        python_at = log.index(("python", i))
        if i % 2 == 0:  # starts at the launch, after the host work
            assert start.at > python_at and start.stream.name == "side"
            assert sum(1 for e in log if e[0] == "record" and e[1] is start) == 1
        else:  # no kernel of ours: from the end of sampling, before the host work
            assert start.at < python_at
        assert end.at > start.at
    assert log[-1] == "release"  # buffers dropped during the epoch are released at its end


def test_batch_is_recorded_on_the_stream_current_at_its_handover(fake_cuda) -> None:
    log = fake_cuda.log
    pf = Prefetcher(range(5), _fetch_logging(fake_cuda), depth=3, device="cuda")
    first = next(pf)  # prepares batches 0..3 while the consumer stream is current
    user = fake_cuda.stream_on("user")
    fake_cuda.current = user  # the consumer moves to its own stream
    rest = list(pf)
    assert [first.i] + [b.i for b in rest] == list(range(5))

    records = [e for e in log if e[0] == "record_stream"]
    assert [(e[1].i, e[2].name) for e in records] == [
        (0, "consumer"),
        (1, "user"),
        (2, "user"),
        (3, "user"),
        (4, "user"),
    ]
    # Each batch's stream waited for the batch's end event before the record.
    for entry in records:
        stream = entry[2]
        before = log[: fake_cuda.position(entry)]
        waits = [e for e in before if e[0] == "wait_event" and e[1] is stream]
        assert waits and waits[-1][2].stream.name == "side"


def test_batches_dropped_before_their_handover_are_not_recorded(fake_cuda) -> None:
    pf = Prefetcher(range(10), _fetch_logging(fake_cuda), depth=3, device="cuda")
    assert next(pf).i == 0 and pf.in_flight == 3
    pf.close()
    records = [e for e in fake_cuda.log if e[0] == "record_stream"]
    assert [e[1].i for e in records] == [0]
    with pytest.raises(StopIteration):
        next(pf)


def test_cuda_device_is_pinned_and_the_stream_must_be_on_it(fake_cuda) -> None:
    fake_cuda.device_index = 1
    pf = Prefetcher([], lambda s, st: s, device="cuda")
    assert pf.device == torch.device("cuda", 1) and pf.stream.device == torch.device("cuda", 1)
    other = fake_cuda.stream_on("side", "cuda:0")
    with pytest.raises(IBPInputError, match="stream is on cuda:0, the prefetcher works on cuda:1"):
        Prefetcher([], lambda s, st: s, device="cuda:1", stream=other)


# --------------------------------------------------------------------------------------------
# Errors are raised in order
# --------------------------------------------------------------------------------------------


class Boom(RuntimeError):
    pass


@pytest.mark.parametrize("thread", [False, True])
@pytest.mark.parametrize("where", ["sample", "fetch"])
@pytest.mark.parametrize("depth", [0, 1, 3])
def test_an_error_is_raised_after_the_batches_prepared_before_it(where, depth, thread) -> None:
    closed, sampled = [], []

    def work():
        try:
            for i in range(10):
                if where == "sample" and i == 4:
                    raise Boom(f"sampling batch {i}")
                sampled.append(i)
                yield i
        finally:
            closed.append(True)

    def fetch(i: int, stream: Any) -> Batch:
        if where == "fetch" and i == 4:
            raise Boom(f"fetching batch {i}")
        return Batch(i)

    stats = LoaderStats()
    pf = Prefetcher(work(), fetch, depth=depth, stats=stats, thread=thread)
    got = []
    with pytest.raises(Boom, match="batch 4"):
        for batch in pf:
            got.append(batch.i)
    assert got == [0, 1, 2, 3] and stats.batches == 4
    assert closed == [True] and max(sampled) == 4 - (where == "sample")
    with pytest.raises(StopIteration):  # it stays finished
        next(pf)


@pytest.mark.parametrize("thread", [False, True])
def test_close_forgets_a_pending_error(thread) -> None:
    def fetch(i: int, stream: Any) -> Batch:
        if i == 2:
            raise Boom("never seen")
        return Batch(i)

    pf = Prefetcher(range(5), fetch, depth=3, thread=thread)
    assert next(pf).i == 0  # batch 2 failed while batches 1 and 2 were being prepared
    pf.close()
    with pytest.raises(StopIteration):
        next(pf)


# --------------------------------------------------------------------------------------------
# thread=True: the batches are prepared on a background thread
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_a_thread_prepares_the_same_batches_in_order_never_more_than_depth_ahead(depth) -> None:
    main = threading.get_ident()
    where, held = set(), []
    pf: Prefetcher | None = None

    def fetch(i: int, stream: Any) -> Batch:
        where.add(threading.get_ident())
        return Batch(i)

    pf = Prefetcher(range(12), fetch, depth=depth, thread=True)
    got = []
    for batch in pf:
        time.sleep(0.002)  # a slow consumer: the thread runs ahead as far as it may
        held.append(pf.in_flight)
        got.append(batch.i)
    assert got == list(range(12))
    assert where and main not in where, "batches are prepared on the thread"
    assert max(held) <= depth + 1 and pf.peak_in_flight <= depth + 1
    assert pf.stats.batches == 12 and pf.stats.sample_s > 0
    assert not any(t.name == "ibp-graph-prefetch" for t in threading.enumerate())


def test_closing_a_threaded_prefetcher_stops_the_thread_and_the_source() -> None:
    closed, made = [], []

    def work():
        try:
            for i in itertools.count():
                made.append(i)
                yield i
        finally:
            closed.append(True)

    pf = Prefetcher(work(), lambda i, s: Batch(i), depth=2, thread=True)
    assert [next(pf).i for _ in range(3)] == [0, 1, 2]
    pf.close()
    assert closed == [True] and len(made) <= 3 + 3
    assert not any(t.name == "ibp-graph-prefetch" for t in threading.enumerate())
    with pytest.raises(StopIteration):
        next(pf)


def test_a_device_error_on_the_thread_is_raised_at_once(monkeypatch) -> None:
    class DeviceDown(RuntimeError):
        pass

    monkeypatch.setattr(prefetch_mod, "_DEVICE_ERRORS", (DeviceDown,))

    first_taken = threading.Event()

    def fetch(i: int, stream: Any) -> Batch:
        if i == 2:
            first_taken.wait(10)
            raise DeviceDown("sticky")
        return Batch(i)

    pf = Prefetcher(range(6), fetch, depth=3, thread=True)
    assert next(pf).i == 0
    first_taken.set()
    deadline = time.monotonic() + 10
    while pf._producer._fatal is None and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(DeviceDown):  # batch 1 is ready, but the device error comes first
        next(pf)
    with pytest.raises(StopIteration):
        next(pf)


def test_thread_must_be_a_bool() -> None:
    with pytest.raises(IBPInputError, match="thread must be a bool, got 'int'"):
        Prefetcher(range(3), lambda i, s: i, thread=1)


@pytest.mark.parametrize("depth", [0, 2])
def test_a_thread_keeps_the_stream_discipline(fake_cuda, depth) -> None:
    log = fake_cuda.log
    pf = Prefetcher(range(8), _fetch_logging(fake_cuda), depth=depth, device="cuda", thread=True)
    got = []
    for batch in pf:
        got.append(batch.i)
        log.append(("train", batch.i))
    assert got == list(range(8))
    # One join, with the stream current at the first next() (not the thread's own stream),
    # before the first batch is prepared.
    joins = [e for e in log if e[0] == "wait_stream"]
    assert len(joins) == 1 and joins[0][1].name == "side" and joins[0][2].name == "consumer"
    fetches = [i for i, e in enumerate(log) if e[0] == "fetch"]
    assert log.index(joins[0]) < fetches[0]
    # Batch j > depth is prepared after the side stream waited for the handover of batch
    # j - depth - 1 or a later one (events on the consumer stream, one per handover).
    handovers = [e[1] for e in log if e[0] == "record" and e[2].name == "consumer"]
    assert len(handovers) == 8
    for j, f in enumerate(fetches):
        if j <= depth:
            continue
        waits = [log[i] for i in range(f) if log[i][0] == "wait_event" and log[i][1].name == "side"]
        assert waits and handovers.index(waits[-1][2]) >= j - depth - 1
    # Every batch was made ready for the consumer stream, on the consumer's thread.
    hands = [e for e in log if e[0] == "wait_event" and e[1].name == "consumer"]
    assert len(hands) == 8 and all(e[2].stream.name == "side" for e in hands)


def test_pyg_loader_hands_over_the_batches_before_a_failing_one() -> None:
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    from ibp_graph.loaders.pyg import NeighborLoader

    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(60, 4, generator=gen), edge_index=torch.randint(0, 60, (2, 300)))
    loader = NeighborLoader(data, [3, 2], batch_size=10, prefetch=2, seed=0)
    good = [b.n_id.clone() for b in loader]
    real = loader.node_sampler.sample
    calls = []

    def sample(seeds, input_id=None):
        calls.append(1)
        if len(calls) == 4:
            raise Boom("sampling batch 3")
        return real(seeds, input_id)

    loader.node_sampler.sample = sample
    loader._epoch = 0  # the same epoch again
    got = []
    with pytest.raises(Boom, match="batch 3"):
        for b in loader:
            got.append(b.n_id.clone())
    assert len(got) == 3 and all(torch.equal(a, b) for a, b in zip(got, good[:3], strict=True))
    assert loader.stats.batches == 3 and len(calls) == 4


# --------------------------------------------------------------------------------------------
# A CPU tensor delivered to a GPU: gathered into pinned memory, copied without blocking
# --------------------------------------------------------------------------------------------


class Staging(torch.Tensor):
    """Stands in for a pinned buffer; ``to`` records its arguments instead of copying."""

    calls: list[tuple] = []

    def to(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        Staging.calls.append((args, kwargs))
        return self.as_subclass(torch.Tensor).clone()


def test_cpu_tensor_for_a_gpu_is_gathered_into_pinned_memory(monkeypatch) -> None:
    table = torch.arange(40, dtype=torch.float32).view(10, 4)
    made = []

    def pinned_empty(shape, dtype):
        buf = torch.full(shape, -1.0, dtype=dtype).as_subclass(Staging)
        made.append(buf)
        return buf

    monkeypatch.setattr(features_mod, "_pinned_empty", pinned_empty)
    Staging.calls = []
    src = TensorFeatures(table)
    src._device = torch.device("cuda", 1)  # as built with device="cuda:1" on a GPU machine
    ids = torch.tensor([7, 2, 7, 0])
    rows = src.gather(ids)
    assert len(made) == 1 and made[0].shape == (4, 4) and made[0].dtype == torch.float32
    assert torch.equal(rows, table[ids])  # gathered straight into the staging buffer
    assert Staging.calls == [((torch.device("cuda", 1),), {"non_blocking": True})]
    assert src.stored_bytes(ids) == 4 * 4 * 4


def test_cpu_tensor_that_needs_gradients_is_not_staged(monkeypatch) -> None:
    table = torch.randn(6, 3, requires_grad=True)
    monkeypatch.setattr(features_mod, "_pinned_empty", lambda *a: pytest.fail("staged"))
    rows = TensorFeatures(table).gather(torch.tensor([1, 1, 5]))  # CPU -> CPU: never staged
    assert rows.requires_grad and torch.equal(rows, table[[1, 1, 5]])


# --------------------------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------------------------

_CYCLES = 200_000_000  # torch.cuda._sleep: about 0.1 s on current GPUs


@gpu
@needs_gpu
def test_gpu_staged_copies_survive_a_busy_stream() -> None:
    dev = torch.device("cuda", torch.cuda.current_device())
    table = torch.randn(4096, 64)
    src = TensorFeatures(table, dev)
    side = torch.cuda.Stream(dev)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 4096, (2048,), generator=gen) for _ in range(16)]
    with torch.cuda.stream(side):
        torch.cuda._sleep(_CYCLES)  # every copy below is queued behind this
    outs = [src.gather(ids, stream=side) for ids in batches]
    side.synchronize()
    for ids, out in zip(batches, outs, strict=True):
        assert out.device == dev and torch.equal(out.cpu(), table[ids])


@gpu
@needs_gpu
def test_gpu_preparing_a_batch_does_not_wait_for_the_step_just_queued() -> None:
    dev = torch.device("cuda", torch.cuda.current_device())
    consumer = torch.cuda.current_stream(dev)
    busy_while_fetching = []

    def fetch(i: int, stream: torch.cuda.Stream) -> dict:
        stream.synchronize()  # the sampler reads sizes back to the host, as here
        busy_while_fetching.append(not consumer.query())
        return {"v": torch.full((1024,), float(i), device=dev)}

    pf = Prefetcher(range(8), fetch, depth=1, device=dev)
    seen = []
    for batch in pf:
        seen.append(float(batch["v"][0]))  # a host read on the consumer stream
        torch.cuda._sleep(_CYCLES)  # the training step, queued on the consumer stream
    assert seen == [float(i) for i in range(8)]
    # Batches after the first ones were prepared while a training step still ran.
    assert any(busy_while_fetching[2:])


@gpu
@needs_gpu
def test_gpu_a_prefetch_thread_hands_over_batches_written_on_its_side_stream() -> None:
    dev = torch.device("cuda", torch.cuda.current_device())
    main, threads = threading.get_ident(), set()

    def fetch(i: int, stream: torch.cuda.Stream) -> dict:
        threads.add(threading.get_ident())
        assert torch.cuda.current_stream(dev) == stream
        stream.synchronize()  # the sampler's host reads: on the thread, not in next()
        # Then a wait longer than a training step before the write: a batch handed over
        # without its event (or its record_stream) would read as unwritten.
        torch.cuda._sleep(_CYCLES // 2)
        out = torch.full((1 << 16,), float(i), device=dev)
        return {"v": out}

    pf = Prefetcher(range(10), fetch, depth=2, device=dev, thread=True)
    seen = []
    for batch in pf:
        torch.cuda._sleep(_CYCLES // 10)  # the training step on the consumer stream
        seen.append(batch["v"].sum().item() / (1 << 16))
    assert seen == [float(i) for i in range(10)]
    assert threads and main not in threads


@gpu
@needs_gpu
@pytest.mark.timing
def test_gpu_a_kept_timeline_shows_the_fetches_beside_the_steps() -> None:
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.synchronize(dev)
    ref = torch.cuda.Event(enable_timing=True)
    ref.record()

    def fetch(i: int, stream: torch.cuda.Stream) -> dict:
        torch.cuda._sleep(_CYCLES // 4)  # the fetch's kernel, on the side stream
        return {"v": torch.full((16,), float(i), device=dev)}

    stats = LoaderStats()
    stats.keep_timeline()
    pf = Prefetcher(range(6), fetch, depth=2, device=dev, stats=stats)
    steps = []
    for batch in pf:
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        torch.cuda._sleep(_CYCLES // 4)  # the training step, on the consumer stream
        end.record()
        steps.append((start, end))
        assert float(batch["v"][0]) == len(steps) - 1
    torch.cuda.synchronize(dev)

    def span(a: torch.cuda.Event, b: torch.cuda.Event) -> tuple[float, float]:
        return ref.elapsed_time(a), ref.elapsed_time(b)

    fetches = [span(a, b) for stage, a, b in stats.timeline if stage == "fetch"]
    samples = [span(a, b) for stage, a, b in stats.timeline if stage == "sample"]
    assert len(fetches) == len(samples) == 6 and all(0 <= a <= b for a, b in fetches)
    step_spans = [span(a, b) for a, b in steps]
    both = sum(max(0.0, min(f1, s1) - max(f0, s0)) for f0, f1 in fetches for s0, s1 in step_spans)
    # A fetch ran on the side stream while a step ran on the consumer stream.
    assert both > 0


@pytest.mark.skipif(not hasattr(torch, "AcceleratorError"), reason="torch < 2.8")
def test_a_device_error_is_raised_at_once() -> None:
    closed = []

    def work():
        try:
            yield from range(10)
        finally:
            closed.append(True)

    def fetch(i: int, stream: Any) -> Batch:
        if i == 2:
            raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")
        return Batch(i)

    pf = Prefetcher(work(), fetch, depth=3)
    with pytest.raises(torch.AcceleratorError, match="illegal memory access"):
        next(pf)
    assert closed == [True] and pf.in_flight == 0
    with pytest.raises(StopIteration):
        next(pf)


def test_loaders_with_a_prefetch_thread_yield_the_same_batches() -> None:
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    from ibp_graph.loaders.pyg import NeighborLoader

    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(80, 4, generator=gen), edge_index=torch.randint(0, 80, (2, 400)))
    runs = []
    for thread in (False, True):
        loader = NeighborLoader(
            data, [3, 2], batch_size=16, shuffle=True, seed=1, prefetch_thread=thread
        )
        runs.append([(b.n_id.tolist(), b.edge_index.tolist(), b.x.sum().item()) for b in loader])
    assert runs[0] == runs[1] and len(runs[0]) == 5
    with pytest.raises(IBPInputError, match="prefetch_thread must be a bool, got 'str'"):
        NeighborLoader(data, [3], batch_size=4, prefetch_thread="yes")


def test_the_prefetch_thread_is_on_by_default_on_a_cuda_device_without_workers() -> None:
    from ibp_graph.loading import default_prefetch_thread, uses_workers

    # A CUDA device never runs worker processes (num_workers is ignored there).
    for device in ("cuda", torch.device("cuda", 1), "cuda:0"):
        assert default_prefetch_thread(device) is True
        for workers in (0, 4):
            assert uses_workers(device, workers) is False
    # The CPU keeps the old default: off, with or without workers.
    assert default_prefetch_thread(torch.device("cpu")) is False
    assert default_prefetch_thread("cpu") is False and default_prefetch_thread("cuda") is True
    assert uses_workers("cpu", 4) and not uses_workers("cpu", 0)
    assert uses_workers("cpu", "2")  # not an int: left to torch's DataLoader to refuse


def test_loaders_resolve_prefetch_thread_none_once_the_device_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    from ibp_graph import loading
    from ibp_graph.loaders.pyg import NeighborLoader

    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(40, 4, generator=gen), edge_index=torch.randint(0, 40, (2, 200)))
    # On the CPU the default (None, given or not) stays off, with or without workers.
    assert NeighborLoader(data, [3], batch_size=8).prefetch_thread is False
    assert NeighborLoader(data, [3], batch_size=8, prefetch_thread=None).prefetch_thread is False
    assert NeighborLoader(data, [3], batch_size=8, num_workers=2).prefetch_thread is False
    for value in (True, False):
        loader = NeighborLoader(data, [3], batch_size=8, prefetch_thread=value)
        assert loader.prefetch_thread is value
    # None is decided by default_prefetch_thread(device), as on a GPU where it
    # says True; a bool given is kept as it is.
    calls = []

    def says_on(device: torch.device) -> bool:
        calls.append(device.type)
        return True

    monkeypatch.setattr(loading, "default_prefetch_thread", says_on)
    loader = NeighborLoader(data, [3], batch_size=8, seed=0)
    assert loader.prefetch_thread is True and calls == ["cpu"]
    runs = [[b.n_id.tolist() for b in loader]]
    loader = NeighborLoader(data, [3], batch_size=8, seed=0, prefetch_thread=False)
    assert loader.prefetch_thread is False and len(calls) == 1
    runs.append([b.n_id.tolist() for b in loader])
    assert runs[0] == runs[1] and len(runs[0]) == 5


@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_a_bad_prefetch_thread_is_refused_in_one_line(value: object) -> None:
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    from ibp_graph.loaders.pyg import NeighborLoader

    data = Data(x=torch.randn(10, 2), edge_index=torch.randint(0, 10, (2, 30)))
    with pytest.raises(IBPInputError) as info:
        NeighborLoader(data, [3], batch_size=4, prefetch_thread=value)
    message = str(info.value)
    assert message == f"prefetch_thread must be a bool, got '{type(value).__name__}'"
    assert "\n" not in message


@gpu
@needs_gpu
def test_gpu_loaders_prepare_batches_on_the_thread_by_default() -> None:
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    from ibp_graph.loaders.pyg import NeighborLoader
    from ibp_graph.loading import ArgumentIgnoredWarning

    data = Data(x=torch.randn(40, 4), edge_index=torch.randint(0, 40, (2, 200)))
    runs = []
    for value in (None, False):
        loader = NeighborLoader(data, [3], batch_size=8, seed=0, device="cuda",
                                prefetch_thread=value)  # fmt: skip
        assert loader.prefetch_thread is (value is None)
        runs.append([b.n_id.tolist() for b in loader])
    assert runs[0] == runs[1]
    with warnings.catch_warnings():  # num_workers ignored on a GPU (warned once)
        warnings.simplefilter("ignore", ArgumentIgnoredWarning)
        loader = NeighborLoader(data, [3], batch_size=8, device="cuda", num_workers=2)
    assert loader.prefetch_thread is True  # no workers on a GPU
