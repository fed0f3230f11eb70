"""Finding the CUDA sources, importing CuPy lazily, and building kernel modules."""

from __future__ import annotations

import functools
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
def _module(name: str, device: int) -> Any:
    cp = cupy()
    with cp.cuda.Device(device):
        return cp.RawModule(code=read_source(name), options=NVRTC_OPTIONS, backend="nvrtc")


def kernel(source: str, entry: str, device: int) -> Any:
    """The ``entry`` kernel of ``cuda/<source>`` built for ``device`` (cached)."""
    return _module(source, device).get_function(entry)


def cupy_stream(stream: torch.cuda.Stream | None, device: torch.device) -> Any:
    """CuPy's view of a torch stream (the current one when None), for launches on it."""
    cp = cupy()
    torch_stream = stream if stream is not None else torch.cuda.current_stream(device)
    if hasattr(cp.cuda.Stream, "from_external") and hasattr(torch_stream, "__cuda_stream__"):
        return cp.cuda.Stream.from_external(torch_stream)
    return cp.cuda.ExternalStream(torch_stream.cuda_stream, device_id=device.index)


def as_cupy(tensor: torch.Tensor) -> Any:
    """A zero-copy CuPy view of a CUDA tensor (DLPack)."""
    return cupy().from_dlpack(tensor)


#: Default cap on a fetch grid, in blocks per SM, to leave SMs to training.
BLOCKS_PER_SM = 4


def grid_size(blocks: int, device: torch.device, max_blocks: int | None) -> int:
    """``blocks`` capped at ``max_blocks`` (default: `BLOCKS_PER_SM` per SM), at least 1."""
    if max_blocks is None:
        max_blocks = BLOCKS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(int(blocks), int(max_blocks)))
