"""Finding the CUDA sources, importing CuPy lazily, and building kernel modules."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import IBPDeviceError
from ..threads import hold

#: NVRTC options every kernel is built with (the tests compile with the same ones).
NVRTC_OPTIONS: tuple[str, ...] = ("-std=c++17",)
#: Options for a compile read only for its entry points and their parameters: `NVRTC_OPTIONS`
#: without the optimiser (``-Ofc=max``), the same signatures in well under a second where the
#: optimised PTX of ``fetch_decode.cu`` takes about 20 s. What runs is always built with
#: `nvrtc_options`.
SIGNATURE_OPTIONS: tuple[str, ...] = (*NVRTC_OPTIONS, "-Ofc=max")
#: Set to 1, kernels are built with ``-lineinfo`` too (`nvrtc_options`).
LINEINFO_ENV = "IBP_GRAPH_LINEINFO"


def nvrtc_options() -> tuple[str, ...]:
    """`NVRTC_OPTIONS`, and ``-lineinfo`` where ``IBP_GRAPH_LINEINFO=1``.

    Line information lets a profiler (Nsight Compute's source counters) attribute each
    machine instruction's executions and stalls to its line of the ``.cu`` source; it does not
    change the code generated. Read when a module is first built, so set it before the first
    launch.
    """
    lineinfo = os.environ.get(LINEINFO_ENV, "") == "1"
    return NVRTC_OPTIONS + (("-lineinfo",) if lineinfo else ())


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


def source_path(name: str) -> Path:
    """The path of ``cuda/<name>``, or ``name`` itself when it is an absolute path."""
    return Path(name) if Path(name).is_absolute() else cuda_dir() / name


def read_source(name: str) -> str:
    """The text of `source_path` ``(name)``."""
    path = source_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"CUDA source {path} is missing")
    return path.read_text()


_SOURCES: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "ibp_graph_kernel_sources", default=None
)


@contextlib.contextmanager
def kernel_sources(folder: str | Path) -> Iterator[Path]:
    """Build the kernels launched inside from the ``.cu`` files of ``folder``, not the package's.

    For comparing two versions of a kernel in one process (``benchmarks/decode_ab.py``): a
    launcher called inside takes its entry point from ``folder/<its source>``, compiled and
    cached apart from the package's. The setting is local to the thread (a context variable),
    and the launch arguments are the package's, so the other version must take the same ones.

    Raises:
        FileNotFoundError: ``folder`` holds no ``.cu`` file (named).
    """
    path = Path(folder).resolve()
    if not path.is_dir() or not any(path.glob("*.cu")):
        raise FileNotFoundError(f"no CUDA sources (*.cu) in {path}")
    token = _SOURCES.set(path)
    try:
        yield path
    finally:
        _SOURCES.reset(token)


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


#: The kernels taken so far: ``(source, entry, device, max_smem)`` -> kernel. Read without a
#: lock (a launch's one lookup); a missing one is made under `_BUILDING`.
_KERNELS: dict[tuple, Any] = {}

#: Held while a kernel is made, so that one thread at a time loads modules: two threads
#: missing the caches at once would each load one, and the shared-memory limit might be raised
#: on the kernel the cache does not keep. Taken with `hold`, as every lock a prefetch thread
#: may wait for.
_BUILDING = threading.Lock()


#: Sources whose entry points are built one at a time (`entry_source`): NVRTC took 3.8-5.3 s
#: to build the eight of fetch_decode.cu for sm_90 and 0.5-0.8 s for one, on a 2-core machine
#: (benchmarks/results/kernel-resources.md), and a process launches one or two of them. The
#: sampler's and the raw gather's sources build whole in under half a second, and a batch
#: launches several of their entry points.
BUILT_PER_ENTRY = frozenset({"fetch_decode.cu"})

#: A line that defines an entry point: a macro ``IBP_<NAME>(entry, ...)`` at its start.
_ENTRY_LINE = re.compile(r"IBP_[A-Z0-9_]+\((\w+)[,)]")


def entry_source(text: str, entry: str) -> str:
    """CUDA source ``text`` without the lines that define entry points other than ``entry``.

    Such a line is a macro call ``IBP_<NAME>(name, ...)`` at the start of a line, as the
    sources define their entry points; every other line is kept.

    Raises:
        ValueError: no line of ``text`` defines ``entry``.
    """
    lines = text.splitlines(keepends=True)
    names = [m.group(1) if (m := _ENTRY_LINE.match(line)) else None for line in lines]
    if entry not in names:
        raise ValueError(f"no line of the CUDA source defines the entry point {entry!r}")
    return "".join(line for line, name in zip(lines, names, strict=True) if name in (None, entry))


def module_source(name: str, entry: str | None = None) -> tuple[str, tuple[str, ...]]:
    """The text and NVRTC options a kernel module of ``cuda/<name>`` is built from.

    The whole source, or only ``entry``'s definition (`entry_source`). With line information
    (`nvrtc_options`), the text starts with a ``#line`` directive naming the ``.cu`` file by
    its absolute path: the compiler otherwise records the temporary file CuPy compiles from,
    gone by the time a profiler looks for the lines.
    """
    text = read_source(name)
    if entry is not None:
        text = entry_source(text, entry)
    options = nvrtc_options()
    if "-lineinfo" in options:
        text = f'#line 1 "{source_path(name).resolve()}"\n' + text
    return text, options


@functools.cache
def _module(name: str, entry: str | None = None) -> Any:
    # Compiled and loaded lazily, once per device, when a kernel is first taken from it.
    text, options = module_source(name, entry)
    return cupy().RawModule(code=text, options=options, backend="nvrtc")


@functools.cache
def _kernel(source: str, entry: str, device: int) -> Any:
    cp = cupy()
    alone = Path(source).name in BUILT_PER_ENTRY
    with cp.cuda.Device(device):
        return _module(source, entry if alone else None).get_function(entry)


def kernel(source: str, entry: str, device: int, *, max_smem: int | None = None) -> Any:
    """The ``entry`` kernel of ``cuda/<source>`` built for ``device`` (cached).

    Inside `kernel_sources`, of ``<its folder>/<source>``.

    ``max_smem``: allow launches of up to that many bytes of dynamic shared memory (above
    the default 48 KiB). Always pass the device's limit: the kernel is shared between tables
    and threads, so the limit is only ever raised, once, to that value.

    A CuPy kernel runs in the context of the device that is current when it is called (or
    when an attribute is set), so call it inside `cupy_stream` for the same device.
    """
    folder = _SOURCES.get()
    if folder is not None:  # inside kernel_sources: that folder's file, cached under its path
        source = str(folder / source)
    key = (source, entry, int(device), None if max_smem is None else int(max_smem))
    fn = _KERNELS.get(key)
    if fn is None:
        with hold(_BUILDING):
            fn = _KERNELS.get(key)
            if fn is None:
                fn = _kernel(source, entry, int(device))
                if max_smem is not None:  # a driver call: once, not at every launch
                    fn.max_dynamic_shared_size_bytes = int(max_smem)
                _KERNELS[key] = fn
    return fn


_LAUNCH_MARKS: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "ibp_graph_launch_marks", default=None
)


@contextlib.contextmanager
def launch_marks() -> Iterator[list]:
    """Collect a timing event recorded just before the first kernel launched inside.

    The list yielded is empty until a launcher calls `note_launch` right before its first
    kernel; then it holds one ``torch.cuda.Event`` recorded on the launch stream there. Timing
    from it, rather than from an event recorded before the Python code that prepares the
    launch, keeps host time out of a GPU interval when the stream is idle (the event would
    complete at once and the interval would count the Python code too).
    """
    marks: list = []
    token = _LAUNCH_MARKS.set(marks)
    try:
        yield marks
    finally:
        _LAUNCH_MARKS.reset(token)


def note_launch(stream: Any) -> None:
    """Record the first-launch event of the enclosing `launch_marks`, if any, on ``stream``.

    Args:
        stream: the torch stream the next kernel is launched on.
    """
    marks = _LAUNCH_MARKS.get()
    if marks is not None and not marks:
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        marks.append(event)


def device_index(device: torch.device) -> int:
    """The index of a CUDA ``device`` (torch's current one for a bare ``cuda``)."""
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
    index = device_index(device)
    with torch.cuda.device(index), cp.cuda.Device(index):
        torch_stream = stream if stream is not None else torch.cuda.current_stream(index)
        where = torch.device(torch_stream.device)
        if where.type != "cuda" or device_index(where) != index:
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


#: Default blocks per SM of a launch (the sampler's kernels): one.
BLOCKS_PER_SM = 1
#: Default grid of a fetch (raw gather, fused fetch and decode) given a stream (a side stream),
#: in blocks per SM: a block on a quarter of the SMs. A fetch block on every SM keeps a large
#: training kernel (a cuBLAS GEMM) off every SM until the fetch ends: measured on an H100, a
#: GraphSAGE step beside back-to-back fetches took 1.3x to 3.9x its time alone with one block
#: per SM, 1.15x to 1.25x with a quarter of the SMs, where the raw gather still ran at the
#: link's speed (benchmarks/results/overlap-nvidia-h100-80gb-hbm3.md). A fetch given no stream
#: runs in order with its caller's work and takes every block the SMs hold
#: (`fetch_blocks_per_sm`).
SIDE_STREAM_BLOCKS_PER_SM = 0.25
#: Default warps per block of a fetch (raw gather, fused fetch and decode): 8, so that a block
#: takes a quarter of an SM's register file and training kernels share the rest.
FETCH_BLOCK_WARPS = 8
#: Most warps per block of a fetch (the kernels' `__launch_bounds__`: 1,024 threads).
MAX_BLOCK_WARPS = 32
#: Hardware limits used when the device properties do not say (sm_80 and sm_90 values).
_REGS_PER_SM = 65536
_THREADS_PER_SM = 2048
_SMEM_PER_SM = 228 * 1024
_MAX_BLOCKS_PER_SM = 32
#: Registers are allocated per warp in units of this many.
_REG_UNIT = 256
#: Shared memory the system reserves per block (sm_80 and later).
_SMEM_RESERVED_PER_BLOCK = 1024


def resident_blocks_per_sm(num_regs: int, threads: int, smem: int, props: Any) -> int:
    """Blocks of ``threads`` threads that one SM holds at once (at least 1).

    The least of what the register file, the shared memory and the thread slots allow,
    computed as CUDA's occupancy calculator does (registers allocated per warp in units of
    256, 1 KiB of shared memory reserved per block).

    Args:
        num_regs: registers per thread of the kernel.
        threads: threads per block.
        smem: dynamic plus static shared memory per block, in bytes.
        props: device properties (torch's); missing fields take sm_80/sm_90 values.
    """
    regs_sm = int(getattr(props, "regs_per_multiprocessor", 0) or _REGS_PER_SM)
    threads_sm = int(getattr(props, "max_threads_per_multi_processor", 0) or _THREADS_PER_SM)
    smem_sm = int(getattr(props, "shared_memory_per_multiprocessor", 0) or _SMEM_PER_SM)
    warps = -(-int(threads) // 32)
    regs_per_warp = -(-max(int(num_regs), 1) * 32 // _REG_UNIT) * _REG_UNIT
    by_regs = regs_sm // (regs_per_warp * warps)
    by_threads = threads_sm // (warps * 32)
    by_smem = smem_sm // (int(smem) + _SMEM_RESERVED_PER_BLOCK)
    return max(1, min(by_regs, by_threads, by_smem, _MAX_BLOCKS_PER_SM))


def occupancy(kernel_fn: Any, threads: int, smem: int, props: Any) -> int:
    """Blocks of ``kernel_fn`` resident per SM: the driver's answer, else `resident_blocks_per_sm`.

    Args:
        kernel_fn: a CuPy kernel (its ``num_regs`` attribute, and the driver's occupancy
            query where the function handle is at hand), or None (64 registers assumed).
        threads: threads per block.
        smem: dynamic shared memory per block, in bytes.
        props: the device's properties.
    """
    if kernel_fn is not None:
        handle = getattr(getattr(kernel_fn, "kernel", kernel_fn), "ptr", None)
        if isinstance(handle, int) and handle:
            try:
                driver = cupy().cuda.driver
                blocks = int(
                    driver.occupancyMaxActiveBlocksPerMultiprocessor(handle, threads, smem)
                )
                if blocks >= 1:
                    return blocks
            except Exception:  # noqa: BLE001 - fall back to the calculation below
                pass
    num_regs = int(getattr(kernel_fn, "num_regs", 64) or 64)
    static = int(getattr(kernel_fn, "shared_size_bytes", 0) or 0)
    return resident_blocks_per_sm(num_regs, threads, smem + static, props)


def fetch_blocks_per_sm(stream: torch.cuda.Stream | None) -> float | None:
    """The default grid of a fetch given ``stream``, in blocks per SM (`grid_size`).

    A fetch given a stream (``stream=``, as the loaders' prefetch passes its side stream) runs
    beside the caller's other work: `SIDE_STREAM_BLOCKS_PER_SM`, and the SMs it leaves train.
    A fetch given none runs on torch's current stream, in order with the caller's own work:
    None, every block the SMs hold at once, since a decoder with more warps in flight hides
    more of its latency (measured on an H100, a sparse table decoded 64 GB/s alone on a
    quarter of the SMs, 251 GB/s with a block on each and 702 GB/s with 4 blocks on each:
    benchmarks/results/overlap-nvidia-h100-80gb-hbm3*.md). Whether a given stream is also the
    current one does not matter: a prefetch launches inside ``torch.cuda.stream(side)``.
    """
    return None if stream is None else SIDE_STREAM_BLOCKS_PER_SM


def grid_size(
    blocks: int,
    device: torch.device,
    max_blocks: int | None,
    *,
    kernel_fn: Any = None,
    threads: int = 256,
    smem: int = 0,
    per_sm: float | None = BLOCKS_PER_SM,
) -> int:
    """The grid of a grid-stride launch needing ``blocks`` blocks.

    At most ``max_blocks`` (default: ``per_sm`` blocks per SM, at least one block), and never
    more than the device holds at once (`occupancy` x SMs: more blocks only queue behind the
    resident ones), at least 1.

    Args:
        blocks: blocks that would cover the work with one item per warp/thread.
        device: the CUDA device.
        max_blocks: the caller's cap, or None for the default.
        kernel_fn: the kernel, for its registers (None: 64 registers per thread assumed).
        threads: threads per block of the launch.
        smem: dynamic shared memory per block of the launch, in bytes.
        per_sm: the default cap in blocks per SM (`BLOCKS_PER_SM`; fetches:
            `fetch_blocks_per_sm`), or None for every block the device holds at once.
    """
    props = torch.cuda.get_device_properties(device)
    sms = int(props.multi_processor_count)
    if max_blocks is not None:
        cap = int(max_blocks)
    elif per_sm is None:
        cap = int(blocks)  # cut to what the SMs hold at once below
    else:
        cap = max(1, round(per_sm * sms))
    grid = min(int(blocks), cap)
    if grid > sms:  # one block per SM always fits; ask the occupancy only beyond that
        grid = min(grid, occupancy(kernel_fn, threads, smem, props) * sms)
    return max(1, grid)


def check_block_warps(block_warps: object) -> int:
    """``block_warps`` of a fetch: None (`FETCH_BLOCK_WARPS`) or an int in 1..`MAX_BLOCK_WARPS`.

    More warps a block put more of a fetch's rows in flight on the SMs its grid takes: the
    grid caps blocks (a quarter of the SMs beside training), not warps. Raises a
    ``ValueError`` naming the value otherwise.
    """
    if block_warps is None:
        return FETCH_BLOCK_WARPS
    if isinstance(block_warps, bool) or not isinstance(block_warps, (int, np.integer)):
        raise ValueError(f"block_warps must be None or an int, got '{type(block_warps).__name__}'")
    if not 1 <= block_warps <= MAX_BLOCK_WARPS:
        raise ValueError(
            f"block_warps must be between 1 and {MAX_BLOCK_WARPS}, got {int(block_warps)}"
        )
    return int(block_warps)


def check_chunk_rows(chunk_rows: object) -> int | None:
    """``chunk_rows`` of a fetch: None, or a positive int (else a ``ValueError`` naming it)."""
    if chunk_rows is None:
        return None
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)):
        raise ValueError(f"chunk_rows must be None or an int, got '{type(chunk_rows).__name__}'")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, got {int(chunk_rows)}")
    return int(chunk_rows)


def chunk_spans(n: int, chunk_rows: int | None) -> list[tuple[int, int]]:
    """The request ranges ``[r0, r1)`` of a fetch of ``n`` rows launched in chunks.

    One launch per ``chunk_rows`` requests (the last one shorter), or one for all of them when
    ``chunk_rows`` is None. A fetch launched in chunks holds SMs only while a chunk runs: its
    blocks leave between chunks, so that kernels queued beside it (training) can take whole
    SMs.
    """
    if chunk_rows is None or n <= chunk_rows:
        return [(0, n)]
    return [(r0, min(r0 + chunk_rows, n)) for r0 in range(0, n, chunk_rows)]


def chunk_positions(
    out_pos: torch.Tensor | None, n: int, spans: list, stream: Any, device: torch.device
) -> torch.Tensor | None:
    """The output positions a chunked fetch passes to its launches.

    ``out_pos``, or ``0 .. n - 1`` (allocated for ``stream``) when it is None and there are
    several chunks: each chunk then writes at its requests' positions, and an error names the
    caller's position.
    """
    if out_pos is not None or len(spans) == 1:
        return out_pos
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        return torch.arange(n, dtype=torch.int64, device=device)


def chunk_requests(
    idx: torch.Tensor, out_pos: torch.Tensor | None, spans: list, views: tuple[Any, Any]
) -> list[tuple[Any, Any]]:
    """The request and output-position arguments of each launch of a fetch over ``spans``.

    ``views`` are the launch's DLPack views of ``idx`` and ``out_pos`` (None for none), made
    once (`as_cupy`, before `note_launch`: a view may make the launch stream wait for torch's
    current one) and kept alive until the last launch is queued. A fetch of one launch passes
    the views; a chunk passes the addresses of its first request and position (a view per
    chunk would queue two such waits a chunk, and cost its host time once per chunk).
    ``idx`` and ``out_pos`` are contiguous.

    Returns:
        per span, its ``(idx, out_pos)`` arguments (``np.uint64(0)`` for no ``out_pos``).
    """
    none = np.uint64(0)
    if len(spans) == 1:
        return [(views[0], none if views[1] is None else views[1])]

    def at(t: torch.Tensor | None, r0: int) -> np.uint64:
        return none if t is None else np.uint64(t.data_ptr() + r0 * t.element_size())

    return [(at(idx, r0), at(out_pos, r0)) for r0, _ in spans]


def describe(x: object) -> str:
    """What ``x`` is, for an error message: ``a tensor on <device>`` or its type's name."""
    return f"a tensor on {x.device}" if isinstance(x, torch.Tensor) else type(x).__name__
