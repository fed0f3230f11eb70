"""A host stand-in for CUDA graph capture, for `ibp_graph.sample_replay.BatchReplay`.

`HostCapture` captures a call the way ``torch.cuda.graph`` does, as far as a test can see: it
records every torch op and every hop-kernel launch the call makes, together with the tensors
they use, refuses a host read of a size meanwhile (`ibp_graph.sample_hop.read_counts`, as a
stream that is capturing refuses a synchronising copy), and then undoes what the call wrote
into tensors that existed before it (a capture runs nothing). It also refuses a tensor made
from a Python value (``t[i] = n``), which on a GPU is a synchronising copy from the host.
`HostGraph.replay` runs the recorded steps again on the same tensors: a step that made a new
tensor (``empty``, ``zeros``) writes the new values into the recorded one, as a graph reuses
its buffers from replay to replay, so an ``empty`` buffer holds whatever was there. A driver
whose results depend on anything but its recorded tensors' contents (a size read into Python,
a new allocation each batch) then replays wrongly.
"""

from __future__ import annotations

from collections.abc import Callable
from unittest import mock

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from ibp_graph import sample_hop
from ibp_graph.sample_replay import MAX_GRAPHS, BatchReplay

Step = Callable[[], None]


class HostGraph:
    """The recorded steps of one capture."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.replays = 0

    def replay(self) -> None:
        """Run the steps; one call, as a graph launch is (no torch op is dispatched)."""
        self.replays += 1
        with _disable_current_modes():
            for step in self.steps:
                step()


def _tensors(x: object) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


class _Recording(TorchDispatchMode):
    def __init__(self, capture: HostCapture, graph: HostGraph) -> None:
        super().__init__()
        self.capture, self.graph = capture, graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            raise RuntimeError("a host read of a tensor's value while capturing")
        if func is torch.ops.aten.lift_fresh.default:
            # A tensor made from a Python value (`t[i] = n`, `torch.tensor(...)`): on a GPU, a
            # copy from pageable host memory, which waits for the stream and which a capture
            # refuses. A fill takes the value as a kernel argument instead.
            raise RuntimeError("a copy of a host value into a tensor while capturing")
        written = [
            args[i] if i < len(args) else kwargs.get(arg.name)
            for i, arg in enumerate(func._schema.arguments)
            if arg.alias_info is not None and arg.alias_info.is_write
        ]
        self.capture.before_write(_tensors(written))
        out = func(*args, **kwargs)
        outs = _tensors(out)
        inputs = {t.untyped_storage().data_ptr() for t in _tensors([args, kwargs])}
        self.capture.made([t for t in outs if t.untyped_storage().data_ptr() not in inputs])

        def step() -> None:
            for old, new in zip(outs, _tensors(func(*args, **kwargs)), strict=True):
                if new.data_ptr() != old.data_ptr():  # a new tensor: into the recorded one
                    old.copy_(new)

        self.graph.steps.append(step)
        return out


class HostCapture:
    """`ibp_graph.sample_replay.Capture` on the host; wrap the hop kernels with `kernels`."""

    def __init__(self) -> None:
        self._graph: HostGraph | None = None
        self._made: set[int] = set()  # storages made while capturing
        self._saved: dict[int, tuple[torch.UntypedStorage, torch.UntypedStorage]] = {}
        self.graphs: list[HostGraph] = []

    def made(self, tensors: list[torch.Tensor]) -> None:
        self._made.update(t.untyped_storage().data_ptr() for t in tensors)

    def before_write(self, tensors: list[torch.Tensor]) -> None:
        """Keep the contents of tensors from before the capture, to restore at its end."""
        for t in tensors:
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key not in self._made and key not in self._saved:
                with _disable_current_modes():  # the copy is not part of the record
                    self._saved[key] = (storage, storage.clone())

    def kernels(self, inner) -> _RecordingKernels:
        """``inner`` (`simt.host_hops.HostHopKernels`), its launches recorded while capturing."""
        return _RecordingKernels(inner, self)

    def launched(self, run: Step, tensors: list[torch.Tensor]) -> None:
        """Run a kernel launch, recording it while capturing (any tensor it gets may be written)."""
        if self._graph is not None:
            self.before_write(tensors)
            self._graph.steps.append(run)
        run()

    def __call__(self, fn, device: torch.device):
        def refuse(t):
            raise RuntimeError("a host read of the batch's sizes while capturing")

        graph = HostGraph()
        self._graph, self._made, self._saved = graph, set(), {}
        try:
            with _Recording(self, graph), mock.patch.object(sample_hop, "read_counts", refuse):
                out = fn()
        finally:
            for storage, copy in self._saved.values():
                storage.copy_(copy)
            self._graph = None
        self.graphs.append(graph)
        return graph, out


class _RecordingKernels:
    """Hop kernels whose launches `HostCapture` records while it captures."""

    def __init__(self, inner, capture: HostCapture) -> None:
        self.inner, self.capture = inner, capture
        self.launches = inner.launches

    def launching(self):
        return self.inner.launching()

    def __getattr__(self, name: str):
        """A launch (``draw``, ``take_all``, ``flags``, ``emit``), recorded."""
        method = getattr(self.inner, name)

        def launch(*args, **kwargs) -> None:
            self.capture.launched(lambda: method(*args, **kwargs), _tensors([args, kwargs]))

        return launch


def host_replay(sampler, kernels, max_graphs: int = MAX_GRAPHS) -> HostCapture:
    """Give ``sampler`` ``cuda_graph=True`` on the host: the hop ``kernels`` of the harness
    (`simt.host_hops.HostHopKernels`), their launches recorded, and a `BatchReplay` that
    captures with a new `HostCapture`, which is returned."""
    capture = HostCapture()
    sampler._hop_kernels = capture.kernels(kernels)
    sampler.cuda_graph = True
    sampler._replay = BatchReplay(capture, max_graphs=max_graphs)
    return capture
