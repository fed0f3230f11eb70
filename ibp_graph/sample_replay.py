"""A group of batches' hop launches captured once per group shape as a CUDA graph, then replayed.

With the ``"kernel"`` backend a batch whose hops all draw (``1 <= fanout <= MAX_K``, one draw
per node) is launched without the host reading a size until its end
(`ibp_graph.sample_hop.launch_batch`): the kernels read every size from the batch's ``counts``,
so its launches, and the buffers they write, depend on the number of seeds alone. A group of
such batches of one size, launched one after the other (`ibp_graph.sample_hop.launch_group`,
each batch but the last cleared from the dense map on the device), depends on its shape
``(batch size, batches)`` alone. Replaying it is then exact for any seeds of that shape.
`BatchReplay` captures, per shape, the seeding of the sampler's dense map, every batch's hop
launches and the clearing between batches into one CUDA graph that reads the seeds and the
hops' random keys from one tensor of its own. A later group of that shape copies its seeds and
keys there (one copy) and replays the graph: one launch from Python instead of, per batch,
the hops' launches (9 for fanouts [15, 10, 5]) and most of their torch ops, with the same
draws, so the same batches. `ibp_graph.sample_hop.finish_group` then reads the sizes
of every batch (the group's one host read) and copies the outputs out of the graph's buffers.
A single batch (`ibp_graph.sampler.NeighborSampler.sample`) is a group of one.

A shape is captured the second time it comes (the first group runs eagerly: it loads the
kernels and shows whether the launches read a size), and at most `MAX_GRAPHS` shapes are kept
(a loader has two: its batch size and the last batch's; with ``sample_group``, three at most: a
whole group, the batches left at the end of the epoch, and the last batch). A group that reads
sizes on the way (a fanout of ``-1`` or above ``MAX_K``, ``draw="per_hop"``, or a frontier
bound of more than a few million slots) is never captured. Once a capture fails (one warning
names why), no shape is captured any more, since a capture that fails part-way can leave
torch's allocator counting it as under way; with torch before 2.12 every capture on a thread
other than the main one is refused that way (`cuda_capture`).
`ibp_graph.sampler.NeighborSampler.capture_sizes` captures given sizes at once, on the calling
thread: the loaders call it where an epoch starts, so that a prefetch thread replays sizes it
could not capture.
Each graph keeps its buffers, at most 56 bytes a slot (a hop's frontier bound times its
fanout) for every batch of the group, in GPU memory of its own for as long as the sampler holds
it.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from .sample_hop import Finished, HopKernels, LaunchedGroup, finish_group

__all__ = ["MAX_GRAPHS", "BatchReplay", "CaptureRefused", "cuda_capture"]

#: Most batch sizes a sampler keeps a captured graph for.
MAX_GRAPHS = 4

#: The launches of a group of batches of one size from its inputs (the group's seeds, then its
#: hops' random keys, int64 on the device): `ibp_graph.sample_hop.launch_group` after the
#: sampler split them.
Launch = Callable[[torch.Tensor], LaunchedGroup]


class Graph(Protocol):
    """A captured sequence of launches (``torch.cuda.CUDAGraph``)."""

    def replay(self) -> None:
        """Run the captured launches again, on the current stream."""


#: Captures the launches that a call makes on a device, without running them:
#: ``capture(fn, device) -> (graph, fn())``, ``fn()``'s tensors being filled by each replay.
Capture = Callable[[Callable[[], LaunchedGroup], torch.device], tuple[Graph, LaunchedGroup]]


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
    fn: Callable[[], LaunchedGroup], device: torch.device
) -> tuple[Graph, LaunchedGroup]:
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
    group: LaunchedGroup  # the graph's buffers (whole: `finish_group` copies out of them)
    inputs: torch.Tensor  # where a replay reads the seeds and keys
    launch: Launch  # keeps alive what the graph reads (the map, the graph, the iota)
    #: On a GPU, recorded after the last group's outputs were copied out: the next group,
    #: whatever its stream, overwrites the inputs and the buffers only after it.
    done: torch.cuda.Event | None = None


#: A group's shape: ``(batch size, batches)``.
Shape = tuple[int, int]


class BatchReplay:
    """Per group shape, the hop launches of a group of batches captured once and replayed.

    A group is ``K`` batches of ``B`` seeds each, launched one after the other
    (`ibp_graph.sample_hop.launch_group`); one batch is a group of one. Its shape ``(B, K)``
    keys the graphs.

    Args:
        capture: how launches are captured (default: `cuda_capture`; the tests pass a host
            stand-in).
        max_graphs: most group shapes to keep a graph for (default: `MAX_GRAPHS`).
    """

    def __init__(self, capture: Capture = cuda_capture, max_graphs: int = MAX_GRAPHS) -> None:
        self._capture = capture
        self.max_graphs = max_graphs
        #: The captured shapes.
        self.graphs: dict[Shape, _Captured] = {}
        #: Shapes seen once whose launches read no size: captured when they come again.
        self._ready: set[Shape] = set()
        #: Shapes never to capture (their launches read a size).
        self._refused: set[Shape] = set()
        #: Why a capture failed, after which no shape is captured: a capture that fails
        #: part-way can leave torch's allocator counting it as under way.
        self.failed: str | None = None

    def sizes(self) -> list[int]:
        """The batch sizes with a graph, ascending (each once, whatever its groups)."""
        return sorted({size for size, _ in self.graphs})

    def wants(self, shape: Shape) -> bool:
        """Whether a group of ``shape`` would bring a capture of that shape closer.

        True while the shape has no graph and is not known to read sizes, no capture failed
        and fewer than ``max_graphs`` shapes have one.
        """
        return (
            shape not in self.graphs
            and shape not in self._refused
            and self.failed is None
            and len(self.graphs) < self.max_graphs
        )

    def sample(
        self,
        launch: Launch,
        inputs: torch.Tensor,
        shape: Shape,
        device: torch.device,
        kernels: HopKernels,
    ) -> list[Finished]:
        """The batches of a group: `finish_group` of ``launch`` of its ``inputs``.

        Replayed from a graph where the group's shape has one, otherwise launched eagerly.

        Args:
            launch: the group's launches.
            inputs: the group's seeds, then its keys (int64; on the host, pinned where
                ``device`` is a GPU, or on ``device``).
            shape: ``(B, K)``.
            device: the graph's device.
            kernels: the hop kernels ``launch`` uses (`finish_group` packs with them).
        """
        captured = self.graphs.get(shape)
        if (
            captured is None
            and self.failed is None
            and shape in self._ready
            and len(self.graphs) < self.max_graphs
        ):
            captured = self._capture_shape(launch, inputs, shape, device)
        if captured is None:
            group = launch(inputs.to(device, non_blocking=True))  # pinned: no wait
            if not group.launched_only:  # its launches read a size: so will the next ones
                self._refused.add(shape)
            elif shape not in self._refused:
                self._ready.add(shape)
            return finish_group(group, kernels)
        stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
        if captured.done is not None:
            captured.done.wait(stream)  # after the last group's copies, whatever its stream
        captured.inputs.copy_(inputs, non_blocking=True)
        captured.graph.replay()  # on the current stream, after the copy
        out = finish_group(captured.group, kernels)
        if stream is not None:
            captured.done = stream.record_event()
        return out

    def _capture_shape(
        self, launch: Launch, inputs: torch.Tensor, shape: Shape, device: torch.device
    ) -> _Captured | None:
        self._ready.discard(shape)
        static = torch.empty(inputs.shape, dtype=inputs.dtype, device=device)
        static.copy_(inputs, non_blocking=True)
        try:
            graph, group = self._capture(lambda: launch(static), device)
        except RuntimeError as e:
            self.failed = str(e)
            after = ""
            if not isinstance(e, CaptureRefused):
                after = (
                    " (torch may still count the failed capture as under way in this process: "
                    "if CUDA errors follow, run it again without cuda_graph=True)"
                )
            size, count = shape
            what = f"batches of {size} seeds" if count == 1 else f"{count} batches of {size} seeds"
            warnings.warn(
                f"the sampler's launches for {what} could not be captured "
                f"as a CUDA graph, so its batches run eagerly from now on: {e}{after}",
                RuntimeWarning,
                stacklevel=5,
            )
            return None
        if not group.launched_only:  # a size read while capturing: not replayable
            self._refused.add(shape)
            return None
        captured = _Captured(graph, group, static, launch)
        self.graphs[shape] = captured
        return captured
