"""Finding the CUDA sources, importing CuPy lazily, and building kernel modules."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..errors import IBPDeviceError

#: NVRTC options every kernel is built with (the tests compile with the same ones).
NVRTC_OPTIONS: tuple[str, ...] = ("-std=c++17",)


def cuda_dir() -> Path:
    """The folder of the ``.cu`` sources.

    That is ``ibp_graph/cuda`` in an installed package, else the checkout's ``cuda/``.
    """
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "cuda", here.parent / "cuda"):
        if any(candidate.glob("*.cu")):
            return candidate
    raise FileNotFoundError(f"no CUDA sources in {here / 'cuda'} or {here.parent / 'cuda'}")


def source_files() -> list[Path]:
    """Every ``.cu`` source, sorted by name."""
    return sorted(cuda_dir().glob("*.cu"))


def read_source(name: str) -> str:
    """The text of ``cuda/<name>``."""
    path = cuda_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"CUDA source {path} is missing")
    return path.read_text()


def cupy() -> Any:
    """Import CuPy, or raise an ImportError that names the extra to install."""
    try:
        import cupy as cp
    except ImportError as exc:
        raise ImportError(
            "the GPU path needs CuPy: pip install 'ibp-graph[gpu]' (cupy-cuda13x)"
        ) from exc
    return cp


def require_cuda(what: str) -> None:
    """Raise a clear error when no CUDA device is usable."""
    if not torch.cuda.is_available():
        raise IBPDeviceError(
            f"{what} needs a CUDA GPU, but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda})"
        )


@functools.cache
def _module(name: str) -> Any:
    # Compiled and loaded lazily, once per device, when a kernel is first taken from it.
    return cupy().RawModule(code=read_source(name), options=NVRTC_OPTIONS, backend="nvrtc")


@functools.cache
def _kernel(source: str, entry: str, device: int) -> Any:
    cp = cupy()
    with cp.cuda.Device(device):
        return _module(source).get_function(entry)


def kernel(source: str, entry: str, device: int) -> Any:
    """The ``entry`` kernel of ``cuda/<source>`` built for ``device`` (cached).

    A CuPy kernel runs in the context of the device that is current when it is called (or
    when an attribute is set), so call it inside `cupy_stream` for the same device.
    """
    return _kernel(source, entry, int(device))


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


@contextlib.contextmanager
def cupy_stream(stream: torch.cuda.Stream | None, device: torch.device) -> Iterator[Any]:
    """Make ``device`` current (for torch and CuPy) and ``stream`` CuPy's current stream.

    ``stream`` is a torch stream on ``device`` (None: torch's current stream there). Inside,
    kernels launch on that stream in ``device``'s context, and `as_cupy` hands the stream to
    torch, which makes it wait for the work queued on torch's current stream.

    Raises:
        ValueError: ``stream`` belongs to another device.
    """
    cp = cupy()
    index = _device_index(device)
    with torch.cuda.device(index), cp.cuda.Device(index):
        torch_stream = stream if stream is not None else torch.cuda.current_stream(index)
        where = torch.device(torch_stream.device)
        if where.type != "cuda" or _device_index(where) != index:
            raise ValueError(f"stream must be a CUDA stream on cuda:{index}, got one on {where}")
        # Stream.from_external takes the device from the current one: create it in here.
        if hasattr(cp.cuda.Stream, "from_external") and hasattr(torch_stream, "__cuda_stream__"):
            cupy_view = cp.cuda.Stream.from_external(torch_stream)
        else:  # CuPy < 14 or a stream object without the CUDA stream protocol
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                cupy_view = cp.cuda.ExternalStream(torch_stream.cuda_stream, device_id=index)
        with cupy_view:
            yield cupy_view


def as_cupy(tensor: torch.Tensor) -> Any:
    """A zero-copy CuPy view of a CUDA tensor (DLPack).

    Call it inside `cupy_stream`: CuPy hands its current stream to torch's exporter, which
    makes that stream wait for torch's current one (outside, CuPy's default stream would be
    made to wait, serialising whatever runs there with the caller's stream). The view keeps
    the tensor alive.
    """
    return cupy().from_dlpack(tensor.detach())


#: Default cap on a fetch grid, in blocks per SM, to leave SMs to training.
BLOCKS_PER_SM = 4


def grid_size(blocks: int, device: torch.device, max_blocks: int | None) -> int:
    """``blocks`` capped at ``max_blocks`` (default: `BLOCKS_PER_SM` per SM), at least 1."""
    if max_blocks is None:
        max_blocks = BLOCKS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(int(blocks), int(max_blocks)))


def describe(x: object) -> str:
    """What ``x`` is, for an error message: ``a tensor on <device>`` or its type's name."""
    return f"a tensor on {x.device}" if isinstance(x, torch.Tensor) else type(x).__name__
