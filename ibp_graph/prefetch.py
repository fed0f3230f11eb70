"""The prefetch pipeline: batches sampled and fetched ahead of training, and its statistics.

`Prefetcher` keeps ``depth`` batches in flight: when the consumer receives batch ``i``,
batches ``i + 1 .. i + depth`` have been sampled and fetched (on a GPU: queued on a side
stream). `LoaderStats` counts per-stage seconds, rows, bytes over PCIe and decoded bytes.

Stream discipline on a GPU (as DGL GraphBolt's feature reads):

1. the side stream waits for the consumer's stream once, before the first batch of the
   iteration (``wait_stream``), so it sees everything written before (the graph, the features
   and the attributes copied to the GPU); after that, before preparing more batches, it
   waits only for the consumer's work up to the previous handover (an event recorded then),
   never for the training step just queued: the sampler reads sizes back to the host, so
   waiting for the latest step would stall the host until that step finished and leave the
   GPU idle while it samples. The inputs a batch is prepared from must not be changed in
   place during an iteration;
2. sampling and fetching run on the side stream, bracketed by timing events;
3. one event marks the end of each batch; when the batch is handed over, the stream current
   at that ``next()`` waits on it (``wait_event``: no host synchronisation), and every CUDA
   tensor of the batch is ``record_stream``-ed on that stream, so the caching allocator does
   not reuse its memory while the consumer may still read it; the prefetcher then drops its
   references to the batch and its event. Batches dropped before their handover (``close``,
   ``break``) are never read by the consumer and need no record.

An exception raised while preparing a batch is raised by the ``next()`` that would have
returned that batch: the batches prepared before it are handed over first, no later batch is
prepared, and the work source is closed. A CUDA error of the device itself
(``torch.AcceleratorError``) is raised at once: it is sticky, so the batches before it could
not be used anyway.

CUDA timings are read lazily (`LoaderStats.resolve`): only events that already completed
are read during an epoch, the rest at its end. The fetch interval of a batch starts at an
event recorded just before its first kernel launch (`ibp_graph.kernels.runtime.launch_marks`),
not before the Python code of ``fetch_fn``: on an idle side stream an event recorded early
completes at once, and the interval would count host time as fetch time.

When an iteration ends (or is closed), pinned buffers dropped during it, such as those of
a UVA graph freed mid-epoch, are released (`ibp_graph.pinned.release_deferred`).

With ``thread=True`` the batches are prepared by a background thread
(`ibp_graph.producer.BackgroundProducer`) instead of inside ``next()``: the host work of
sampling and fetching, and its waits for sizes read back from the GPU, then overlap the
training loop (torch ops and CUDA waits release the GIL). The thread's Python does not:
while the thread wants the GIL, each op of the training loop hands it over, so a step made of
many short launches runs longer beside it (``benchmarks/gil_handoff.py``). Nothing else
changes: the same streams, events, order, depth (``depth + 1`` batches at most held), errors
and statistics.
The first batch's side stream waits for the stream current at the first ``next()``. The
thread alone uses the work source (and the sampler behind it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from .errors import IBPInputError, check_bool, check_choice, check_int
from .kernels.runtime import launch_marks
from .pinned import release_deferred
from .producer import BackgroundProducer

__all__ = ["STAGES", "LoaderStats", "Prefetcher"]

S = TypeVar("S")
T = TypeVar("T")

#: Timed stages: sampling, fetching features (and assembling the batch), and the time the
#: consumer spent inside ``next()``.
STAGES = ("sample", "fetch", "wait")
#: Errors of the device itself (torch >= 2.8), raised at once instead of in order.
_DEVICE_ERRORS: tuple[type[BaseException], ...] = tuple(
    e for e in (getattr(torch, "AcceleratorError", None),) if e is not None
)
#: Pending CUDA entries above which `Prefetcher` reads the completed ones mid-epoch.
_RESOLVE_EVERY = 64


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} GB"  # pragma: no cover


@dataclass
class LoaderStats:
    """Counters of one epoch of a loader (reset by the loader at the start of each epoch).

    Attributes:
        batches: batches handed to the consumer.
        sample_s: seconds spent sampling.
        fetch_s: seconds spent fetching features and assembling batches.
        wait_s: host seconds the consumer spent inside ``next()``; on the CPU, where nothing
            runs in the background, this includes the sampling and fetching done there.
        rows: feature rows fetched.
        pcie_bytes: bytes the fetches read from host memory (stored, compressed bytes for IBP
            tables, raw bytes for raw ones, 0 for features already on the target device).
        decoded_bytes: bytes of the rows delivered (``rows * row_bytes``).
        timeline: None, or after `keep_timeline` the epoch's stage intervals in the order
            they were counted: ``(stage, start, end)``, two ``torch.cuda.Event`` for a stage
            timed on a GPU stream, two ``time.perf_counter()`` readings for one timed on the
            host (``wait`` always; everything on the CPU). Intervals counted in worker
            processes are not in it.
    """

    batches: int = 0
    sample_s: float = 0.0
    fetch_s: float = 0.0
    wait_s: float = 0.0
    rows: int = 0
    pcie_bytes: int = 0
    decoded_bytes: int = 0
    timeline: list | None = field(default=None, repr=False, compare=False)
    _pending: deque = field(default_factory=deque, repr=False, compare=False)

    # -- counting ----------------------------------------------------------------------
    def keep_timeline(self) -> None:
        """Keep every stage interval counted from now on in `timeline` (emptied by `reset`).

        For charts of how the stages overlap, e.g. ``benchmarks/e2e.py``'s epoch timelines;
        off by default, since an epoch's CUDA events then stay alive until the next reset.
        """
        if self.timeline is None:
            self.timeline = []

    def add_seconds(self, stage: str, seconds: float) -> None:
        """Add host-measured seconds to ``stage`` (one of `STAGES`)."""
        stage = check_choice("stage", stage, STAGES)
        setattr(self, f"{stage}_s", getattr(self, f"{stage}_s") + seconds)

    def add_span(self, stage: str, t0: float, t1: float) -> None:
        """Add the host interval from ``t0`` to ``t1`` (``time.perf_counter()``) to ``stage``."""
        self.add_seconds(stage, t1 - t0)
        if self.timeline is not None:
            self.timeline.append((stage, t0, t1))

    def add_interval(self, stage: str, start: torch.cuda.Event, end: torch.cuda.Event) -> None:
        """Add the time between two recorded timing events to ``stage``, read lazily."""
        stage = check_choice("stage", stage, STAGES)
        self._pending.append((end, stage, start))
        if self.timeline is not None:
            self.timeline.append((stage, start, end))

    def add_fetch(self, rows: int, stored: int | torch.Tensor, decoded: int) -> None:
        """Count one fetch of ``rows`` rows.

        Args:
            rows: rows fetched.
            stored: bytes read from host memory; a 0-d CUDA tensor is copied to pinned host
                memory on the current stream and read once that copy completed.
            decoded: bytes delivered.
        """
        self.rows += int(rows)
        self.decoded_bytes += int(decoded)
        if isinstance(stored, torch.Tensor) and stored.device.type == "cuda":
            host = torch.empty((), dtype=torch.int64, pin_memory=True)
            host.copy_(stored, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            self._pending.append((done, "bytes", host))
        else:
            self.pcie_bytes += int(stored)

    def resolve(self, block: bool = True) -> None:
        """Fold pending CUDA timings and byte counts into the counters.

        Args:
            block: wait for all of them; with False, read only those already completed
                (never synchronises).
        """
        while self._pending:
            end, what, payload = self._pending[0]
            if block:
                end.synchronize()
            elif not end.query():
                return
            self._pending.popleft()
            if what == "bytes":
                self.pcie_bytes += int(payload)
            else:
                self.add_seconds(what, payload.elapsed_time(end) / 1000.0)

    @property
    def pending(self) -> int:
        """CUDA timings and byte counts not yet read."""
        return len(self._pending)

    def reset(self) -> None:
        """Zero every counter, drop pending CUDA entries and empty a kept `timeline`."""
        for f in dataclasses.fields(self):
            if f.name not in ("_pending", "timeline"):
                setattr(self, f.name, f.default)
        self._pending.clear()
        if self.timeline is not None:
            self.timeline = []

    # -- derived -----------------------------------------------------------------------
    @property
    def gbps(self) -> float:
        """Decoded GB delivered per second of fetching (0.0 before any fetch time)."""
        return self.decoded_bytes / self.fetch_s / 1e9 if self.fetch_s > 0 else 0.0

    @property
    def pcie_gbps(self) -> float:
        """GB read from host memory per second of fetching."""
        return self.pcie_bytes / self.fetch_s / 1e9 if self.fetch_s > 0 else 0.0

    @property
    def ratio(self) -> float:
        """Decoded bytes over bytes read (1.0 when nothing crossed)."""
        return self.decoded_bytes / self.pcie_bytes if self.pcie_bytes else 1.0

    def as_postfix(self) -> dict[str, str]:
        """A short dict for ``tqdm.set_postfix`` (reads completed CUDA entries only)."""
        self.resolve(block=False)
        per = 1000.0 / max(self.batches, 1)
        return {
            "sample": f"{self.sample_s * per:.1f}ms",
            "fetch": f"{self.fetch_s * per:.1f}ms",
            "wait": f"{self.wait_s * per:.1f}ms",
            "GB/s": f"{self.gbps:.2f}",
            "ratio": f"{self.ratio:.2f}x",
        }

    def summary(self) -> str:
        """One readable line (waits for pending CUDA entries)."""
        self.resolve(block=True)
        return (
            f"{self.batches} batches | sample {self.sample_s:.3f} s, fetch {self.fetch_s:.3f} s, "
            f"wait {self.wait_s:.3f} s | {self.rows:,} rows, {_fmt_bytes(self.pcie_bytes)} read, "
            f"{_fmt_bytes(self.decoded_bytes)} decoded (ratio {self.ratio:.2f}x), "
            f"{self.gbps:.2f} GB/s"
        )


def record_stream(obj: Any, stream: torch.cuda.Stream) -> None:
    """``record_stream(stream)`` on every CUDA tensor in ``obj``.

    Walks tensors, mappings, lists, tuples, dataclasses and objects with ``to_dict()``
    (PyG ``Data``).
    """
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif isinstance(obj, Mapping):
        for value in obj.values():
            record_stream(value, stream)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            record_stream(value, stream)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            record_stream(getattr(obj, f.name), stream)
    elif callable(getattr(obj, "to_dict", None)):
        record_stream(obj.to_dict(), stream)


@dataclass
class _Slot(Generic[T]):
    out: T
    ready: torch.cuda.Event | None


class Prefetcher(Generic[S, T]):
    """Iterate over fetched batches while the next ``depth`` are prepared ahead.

    On a GPU a batch is ready on the stream that is current at the ``next()`` returning it
    (that stream waits for it, and the allocator keeps its memory until that stream's work on
    it is done): read the batch on that stream, or make another stream wait for it first.

    Example:
        >>> work = (sampler.sample(seeds) for seeds in chunks)         # doctest: +SKIP
        >>> for batch in Prefetcher(work, fetch, depth=2, device="cuda"):  # doctest: +SKIP
        ...     train_step(batch)

    Args:
        batches: the work: each ``next()`` samples one batch (e.g. a generator of
            ``sampler.sample(...)``); an item that is callable is called to produce it.
            Both count as the ``sample`` stage.
        fetch_fn: ``fetch_fn(sampled, stream)`` returns the batch handed to the consumer
            (``stream`` is the side stream on a GPU, None on the CPU); the ``fetch`` stage.
        depth: batches prepared ahead of the one being consumed, ``>= 0`` (default: 2).
        device: where the work runs; a CUDA device runs it on a side stream (default: CPU).
        stats: counters to add to (default: a fresh `LoaderStats`).
        stream: the side stream to use on a GPU (default: a new one).
        thread: prepare the batches on a background thread (default: False).
    """

    def __init__(
        self,
        batches: Iterable[S | Callable[[], S]],
        fetch_fn: Callable[[S, torch.cuda.Stream | None], T],
        *,
        depth: int = 2,
        device: str | torch.device = "cpu",
        stats: LoaderStats | None = None,
        stream: torch.cuda.Stream | None = None,
        thread: bool = False,
    ) -> None:
        thread = check_bool("thread", thread)
        depth = check_int("depth", depth, 0)
        if not callable(fetch_fn):
            raise IBPInputError(f"fetch_fn must be callable, got '{type(fetch_fn).__name__}'")
        self.device = torch.device(device)
        self.depth = depth
        self.stats = stats if stats is not None else LoaderStats()
        self._cuda = self.device.type == "cuda"
        if self._cuda:
            if not torch.cuda.is_available():
                raise IBPInputError(f"device='{device}' but torch.cuda.is_available() is False")
            if self.device.index is None:  # pin the GPU: the current device may change later
                self.device = torch.device("cuda", torch.cuda.current_device())
            if stream is None:
                stream = torch.cuda.Stream(self.device)
            elif torch.device(stream.device) != self.device:
                raise IBPInputError(
                    f"stream is on {stream.device}, the prefetcher works on {self.device}"
                )
            self.stream = stream
        else:
            self.stream = None
        self._source: Iterator[Any] | None = iter(batches)
        self._fetch = fetch_fn
        self._queue: deque[_Slot[T]] = deque()
        #: An exception raised while preparing a batch, raised once the batches before it
        #: have been handed over.
        self._error: Exception | None = None
        #: Whether the side stream has waited for the consumer's stream (the first batch).
        self._joined = False
        #: The consumer's stream at the last handover, for the side stream to wait on.
        self._handover: torch.cuda.Event | None = None
        #: Most batches held at once (at most ``depth + 1``).
        self.peak_in_flight = 0
        #: The consumer's stream at the first ``next()``, which the first batch waits for.
        self._consumer: torch.cuda.Stream | None = None
        self._thread = thread
        self._producer: BackgroundProducer[_Slot[T]] | None = None
        self._lock = threading.Lock()  # guards _handover and the in-flight count
        self._produced = self._handed = 0

    @property
    def in_flight(self) -> int:
        """Batches prepared and not yet handed over."""
        if self._producer is not None:
            return self._producer.pending
        return len(self._queue)

    def __iter__(self) -> Prefetcher[S, T]:
        return self

    def __next__(self) -> T:
        t0 = time.perf_counter()
        if self._cuda and self._consumer is None:
            self._consumer = torch.cuda.current_stream(self.device)
        slot = self._take_threaded() if self._thread else self._take()
        out = slot.out
        if slot.ready is not None:
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_event(slot.ready)
            # The stream that waited is the one that reads the batch: the allocator must not
            # hand its memory to the side stream before that stream's work on it is done.
            record_stream(out, consumer)
            with self._lock:
                self._handover = consumer.record_event()
        del slot  # the prefetcher keeps no reference to a handed-over batch
        if self._producer is not None:
            with self._lock:
                self._handed += 1
            self._producer.release()
        self.stats.batches += 1
        self.stats.add_span("wait", t0, time.perf_counter())
        if self.stats.pending > _RESOLVE_EVERY:
            self.stats.resolve(block=False)
        return out

    def _take(self) -> _Slot[T]:
        self._fill()
        if not self._queue:
            error, self._error = self._error, None
            self.close()
            if error is not None:
                raise error
            raise StopIteration
        return self._queue.popleft()

    def _take_threaded(self) -> _Slot[T]:
        if self._producer is None:
            if self._source is None:
                raise StopIteration
            self._producer = BackgroundProducer(
                self._produce_one,
                self.depth + 1,
                context=self._thread_context,
                fatal=_DEVICE_ERRORS,
                name="ibp-graph-prefetch",
            )
        try:
            return self._producer.take()
        except BaseException:
            self.close()
            raise

    def _thread_context(self) -> contextlib.AbstractContextManager:
        return torch.cuda.device(self.device) if self._cuda else contextlib.nullcontext()

    def _produce_one(self) -> tuple[bool, _Slot[T] | None]:
        slot = self._produce_cuda() if self._cuda else self._produce_cpu()
        if slot is None:
            return False, None
        with self._lock:
            self._produced += 1
            self.peak_in_flight = max(self.peak_in_flight, self._produced - self._handed)
        return True, slot

    def close(self) -> None:
        """Drop prepared batches and stop (also closes a generator source).

        On a GPU, pinned buffers dropped while batches were in flight are released now.
        """
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.close()  # the thread stops before the source is closed
        self._queue.clear()
        self._error = None
        self._close_source()
        if self._cuda:
            release_deferred()

    # ----------------------------------------------------------------------------------
    def _close_source(self) -> None:
        source, self._source = self._source, None
        close = getattr(source, "close", None)
        if callable(close):
            close()

    def _fill(self) -> None:
        while self._source is not None and len(self._queue) <= self.depth:
            try:
                slot = self._produce_cuda() if self._cuda else self._produce_cpu()
            except _DEVICE_ERRORS:
                # A CUDA error is sticky: every later CUDA call fails too, so say it now.
                self.close()
                raise
            except Exception as exc:  # raised in order, after the batches prepared before
                self._error = exc
                self._close_source()
                return
            if slot is None:
                self._source = None
                return
            self._queue.append(slot)
            self.peak_in_flight = max(self.peak_in_flight, len(self._queue))

    def _next_sampled(self) -> tuple[bool, Any]:
        try:
            item = next(self._source)
        except StopIteration:
            return False, None
        return True, item() if callable(item) else item

    def _produce_cpu(self) -> _Slot[T] | None:
        t0 = time.perf_counter()
        ok, sampled = self._next_sampled()
        if not ok:
            return None
        t1 = time.perf_counter()
        out = self._fetch(sampled, None)
        self.stats.add_span("sample", t0, t1)
        self.stats.add_span("fetch", t1, time.perf_counter())
        return _Slot(out, None)

    def _produce_cuda(self) -> _Slot[T] | None:
        side = self.stream
        with self._lock:
            handover, self._handover = self._handover, None
        if not self._joined:
            side.wait_stream(self._consumer)
            self._joined = True
        elif handover is not None:
            side.wait_event(handover)
        with torch.cuda.stream(side):
            start = torch.cuda.Event(enable_timing=True)
            start.record(side)
            ok, sampled = self._next_sampled()
            if not ok:
                return None
            sampled_at = torch.cuda.Event(enable_timing=True)
            sampled_at.record(side)
            with launch_marks() as marks:
                out = self._fetch(sampled, side)
            ready = torch.cuda.Event(enable_timing=True)
            ready.record(side)
        self.stats.add_interval("sample", start, sampled_at)
        # From the first fetch kernel (sampled_at when fetch_fn launched none of ours).
        self.stats.add_interval("fetch", marks[0] if marks else sampled_at, ready)
        return _Slot(out, ready)
