"""A batch's hop launches captured once per batch size as a CUDA graph, then replayed.

With the ``"kernel"`` backend a batch whose hops all draw (``1 <= fanout <= MAX_K``, one draw
per node) is launched without the host reading a size until its end
(`ibp_graph.sample_hop.launch_batch`): the kernels read every size from the batch's ``counts``,
so its launches, and the buffers they write, depend on the number of seeds alone. Replaying
them is then exact for any seeds of that number. `BatchReplay` captures, per batch size, the
seeding of the sampler's dense map and every hop's launches into one CUDA graph that reads the
seeds and the hops' random keys from two tensors of its own. A later batch of that size copies
its seeds and keys there and replays the graph: one launch from Python instead of the hops'
9 launches and 29 of the batch's torch ops (fanouts [15, 10, 5], counted on the CPU), with the
same draws, so the same batch. `finish_batch` then reads the
sizes (the batch's one host read) and copies the outputs out of the graph's buffers.

A size is captured the second time it comes (the first batch runs eagerly: it loads the kernels
and shows whether the launches read a size), and at most `MAX_GRAPHS` sizes are kept (a loader
has two: its batch size and the last batch's). A batch that reads sizes on the way (a fanout of
``-1`` or above ``MAX_K``, ``draw="per_hop"``, or a frontier bound of more than a few million
slots) is never captured. Once a capture fails (one warning names why), no size is captured
any more, since a capture that fails part-way can leave torch's allocator counting it as
under way; with torch before 2.12 every capture on a thread other than the main one is
refused that way (`cuda_capture`). `ibp_graph.sampler.NeighborSampler.capture_sizes`
captures given sizes at once, on the calling thread: the loaders call it where an epoch
starts, so that a prefetch thread replays sizes it could not capture.
Each graph keeps its buffers, at most 56 bytes a slot (a hop's frontier bound times its
fanout), in GPU memory of its own for as long as the sampler holds it.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from .sample_hop import LaunchedBatch, finish_batch

__all__ = ["MAX_GRAPHS", "BatchReplay", "CaptureRefused", "cuda_capture"]

#: Most batch sizes a sampler keeps a captured graph for.
MAX_GRAPHS = 4

#: The launches of one batch into the given seeds and keys (the sampler's dense map seeded,
#: then `ibp_graph.sample_hop.launch_batch`).
Launch = Callable[[torch.Tensor, torch.Tensor], LaunchedBatch]


class Graph(Protocol):
    """A captured sequence of launches (``torch.cuda.CUDAGraph``)."""

    def replay(self) -> None:
        """Run the captured launches again, on the current stream."""


#: Captures the launches that a call makes on a device, without running them:
#: ``capture(fn, device) -> (graph, fn())``, ``fn()``'s tensors being filled by each replay.
Capture = Callable[[Callable[[], LaunchedBatch], torch.device], tuple[Graph, LaunchedBatch]]


#: The first torch release that keeps a graph capture's random-number state per capture.
#: Before it, a capture marks the device's default generator as capturing for every thread,
#: and a random op that another thread runs meanwhile (a training loop's dropout) fails with
#: "Offset increment outside graph capture encountered unexpectedly".
PER_CAPTURE_RNG_TORCH = (2, 12)


def torch_release(version: str | None = None) -> tuple[int, int]:
    """``(major, minor)`` of a torch version such as ``"2.11.0+cu130"`` (None: this torch's)."""
    text = str(torch.__version__ if version is None else version)
    major, minor = (int(re.match(r"\d+", part)[0]) for part in text.split(".")[:2])
    return major, minor


def thread_captures_need() -> str | None:
    """``"2.12"`` where this torch is too old to capture off the main thread, else None.

    See `PER_CAPTURE_RNG_TORCH`.
    """
    if torch_release() >= PER_CAPTURE_RNG_TORCH:
        return None
    return ".".join(map(str, PER_CAPTURE_RNG_TORCH))


class CaptureRefused(RuntimeError):
    """`cuda_capture` refused before capturing anything (torch's state is as it was)."""


def cuda_capture(
    fn: Callable[[], LaunchedBatch], device: torch.device
) -> tuple[Graph, LaunchedBatch]:
    """Capture ``fn``'s launches on ``device`` into a ``torch.cuda.CUDAGraph``.

    The capture runs on a stream of its own and is local to the calling thread
    (``capture_error_mode="thread_local"``), so that a training loop launching from another
    thread meanwhile is not disturbed. ``torch.cuda.graph`` first waits for the device to be
    idle. The calling thread's current stream is the same after, whether the capture worked
    or not.

    Raises:
        CaptureRefused: it would run on a thread other than the main one with a torch
            older than `PER_CAPTURE_RNG_TORCH`, where it would break the random ops of the
            other threads (nothing is captured).
        RuntimeError: the capture failed.
    """
    need = thread_captures_need()
    if need and threading.current_thread() is not threading.main_thread():
        raise CaptureRefused(
            f"torch {torch.__version__} marks the default CUDA generator as capturing for "
            "every thread while a graph is captured, so random ops on other threads (a "
            f"training loop's dropout) would fail; captures off the main thread need torch "
            f"{need} or later"
        )
    with torch.cuda.device(device):
        before = torch.cuda.current_stream(device)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device)
        try:
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                batch = fn()
        finally:
            # torch.cuda.graph leaves its stream current when ending the capture raises
            torch.cuda.set_stream(before)
    return _CudaGraph(graph, device), batch


@dataclass
class _CudaGraph:
    graph: torch.cuda.CUDAGraph
    device: torch.device

    def replay(self) -> None:
        """Replay on the current stream of the graph's device (whichever device is current)."""
        with torch.cuda.device(self.device):
            self.graph.replay()


@dataclass
class _Captured:
    graph: Graph
    batch: LaunchedBatch  # the graph's buffers (whole: `finish_batch` copies out of them)
    seeds: torch.Tensor  # where a replay reads the seeds
    keys: torch.Tensor  # and the hops' random keys
    launch: Launch  # keeps alive what the graph reads (the map, the graph, the iota)
    #: On a GPU, recorded after the last batch's outputs were copied out: the next batch,
    #: whatever its stream, overwrites the seeds and the buffers only after it.
    done: torch.cuda.Event | None = None


class BatchReplay:
    """Per batch size, the hop launches of a batch captured once and replayed.

    Args:
        capture: how launches are captured (default: `cuda_capture`; the tests pass a host
            stand-in).
        max_graphs: most batch sizes to keep a graph for (default: `MAX_GRAPHS`).
    """

    def __init__(self, capture: Capture = cuda_capture, max_graphs: int = MAX_GRAPHS) -> None:
        self._capture = capture
        self.max_graphs = max_graphs
        #: The captured sizes.
        self.graphs: dict[int, _Captured] = {}
        #: Sizes seen once whose launches read no size: captured when they come again.
        self._ready: set[int] = set()
        #: Sizes never to capture (their launches read a size).
        self._refused: set[int] = set()
        #: Why a capture failed, after which no size is captured: a capture that fails part-way
        #: can leave torch's allocator counting it as under way.
        self.failed: str | None = None

    def wants(self, size: int) -> bool:
        """Whether a batch of ``size`` seeds would bring a capture of that size closer.

        True while the size has no graph and is not known to read sizes, no capture failed and
        fewer than ``max_graphs`` sizes have one.
        """
        return (
            size not in self.graphs
            and size not in self._refused
            and self.failed is None
            and len(self.graphs) < self.max_graphs
        )

    def sample(
        self, launch: Launch, seeds: torch.Tensor, keys: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[int]]:
        """The batch of ``seeds`` with ``keys``: `finish_batch` of ``launch(seeds, keys)``.

        Replayed from a graph where the batch's size has one, otherwise launched eagerly.
        """
        size = seeds.numel()
        captured = self.graphs.get(size)
        if (
            captured is None
            and self.failed is None
            and size in self._ready
            and len(self.graphs) < self.max_graphs
        ):
            captured = self._capture_size(launch, seeds, keys)
        if captured is None:
            batch = launch(seeds, keys)
            if not batch.launched_only:  # its launches read a size: so will the next ones
                self._refused.add(size)
            elif size not in self._refused:
                self._ready.add(size)
            return finish_batch(batch)
        stream = torch.cuda.current_stream(seeds.device) if seeds.is_cuda else None
        if captured.done is not None:
            captured.done.wait(stream)  # after the last batch's copies, whatever its stream
        captured.seeds.copy_(seeds)
        captured.keys.copy_(keys)
        captured.graph.replay()  # on the current stream, after the copies
        out = finish_batch(captured.batch)
        if stream is not None:
            captured.done = stream.record_event()
        return out

    def _capture_size(
        self, launch: Launch, seeds: torch.Tensor, keys: torch.Tensor
    ) -> _Captured | None:
        size = seeds.numel()
        self._ready.discard(size)
        static_seeds, static_keys = seeds.clone(), keys.clone()
        try:
            graph, batch = self._capture(lambda: launch(static_seeds, static_keys), seeds.device)
        except RuntimeError as e:
            self.failed = str(e)
            after = ""
            if not isinstance(e, CaptureRefused):
                after = (
                    " (torch may still count the failed capture as under way in this process: "
                    "if CUDA errors follow, run it again without cuda_graph=True)"
                )
            warnings.warn(
                f"the sampler's launches for batches of {size} seeds could not be captured "
                f"as a CUDA graph, so its batches run eagerly from now on: {e}{after}",
                RuntimeWarning,
                stacklevel=4,
            )
            return None
        if not batch.launched_only:  # a size read while capturing: not replayable
            self._refused.add(size)
            return None
        captured = _Captured(graph, batch, static_seeds, static_keys, launch)
        self.graphs[size] = captured
        return captured
