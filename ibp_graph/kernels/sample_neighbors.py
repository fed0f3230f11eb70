"""Launchers of ``cuda/sample_neighbors.cu``: the neighbor draw, and the fused hop kernels.

`kernel_sample` draws ``k`` distinct uniform offsets per row; `CudaHopKernels` launches the
three kernels of one sampling hop (`ibp_graph.sample_hop` drives them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

from .runtime import as_cupy, cupy_stream, describe, device_index, grid_size, kernel, note_launch

SOURCE = "sample_neighbors.cu"
#: The largest sample size each entry point draws, smallest first (the first keeps its picks in
#: a per-thread array, the second in the row's output slots; see the kernel source).
CAPACITIES = (32, 256)
#: The largest sample size the kernel draws (callers fall back to torch ops above it).
MAX_K = CAPACITIES[-1]
THREADS_PER_BLOCK = 256


def capacity(k: int) -> int:
    """The smallest entry point capacity that holds ``k``, i.e. which entry point draws it.

    Raises:
        ValueError: ``k`` is not in ``[1, MAX_K]``.
    """
    for cap in CAPACITIES:
        if 1 <= k <= cap:
            return cap
    raise ValueError(f"k must be in [1, {MAX_K}], got {k}")


def entry_point(k: int) -> str:
    """The name of the kernel that draws samples of size ``k`` (see `capacity`)."""
    return f"ibp_sample_neighbors_k{capacity(k)}"


def _check_int64(name: str, t: object, device: torch.device | None) -> torch.device:
    if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
        raise ValueError(f"{name} must be a CUDA tensor, got {describe(t)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device}, got {describe(t)}")
    if t.dtype != torch.int64 or t.dim() != 1 or not t.is_contiguous():
        raise ValueError(
            f"{name} must be a contiguous 1-D int64 tensor, got {t.dtype} {tuple(t.shape)}"
        )
    return t.device


def kernel_sample(
    deg: torch.Tensor,
    k: int,
    key: torch.Tensor,
    *,
    stream: torch.cuda.Stream | None = None,
    max_blocks: int | None = None,
) -> torch.Tensor:
    """``k`` distinct offsets in ``[0, deg[i])`` per row, uniformly, drawn by the CUDA kernel.

    Same contract as `ibp_graph.sampler.floyd_sample`; the random stream is the kernel's own
    (a function of ``key[0]`` and the row), so the offsets differ from the torch path's. Runs on
    ``stream`` (the current one if None) and does not synchronise.

    Args:
        deg: ``(rows,)`` contiguous int64 CUDA tensor of population sizes, each ``> k`` (a row
            with ``deg[i] <= k`` gets ``0 .. deg[i]-1`` padded with ``-1``).
        k: sample size, in ``[1, MAX_K]``.
        key: ``(1,)`` int64 tensor on ``deg``'s device, the launch's random key.
        stream: torch stream to launch on (default: None, the current one).
        max_blocks: cap on the grid (default: None, `runtime.BLOCKS_PER_SM` per SM).

    Returns:
        ``(rows, k)`` int64 offsets on ``deg``'s device, ascending within each row.

    Raises:
        ValueError: an argument has the wrong type, device, dtype, shape or value (named).
    """
    device = _check_int64("deg", deg, None)
    _check_int64("key", key, device)
    if key.numel() != 1:
        raise ValueError(f"key must hold one value, got shape {tuple(key.shape)}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an int, got '{type(k).__name__}'")
    fn_name = entry_point(int(k))
    rows = deg.shape[0]
    with torch.cuda.stream(stream):  # allocated for the stream that writes it
        out = torch.empty((rows, int(k)), dtype=torch.int64, device=device)
    if rows == 0:
        return out
    with cupy_stream(stream, device):
        fn = kernel(SOURCE, fn_name, device.index)
        grid = grid_size(
            -(-rows // THREADS_PER_BLOCK),
            device,
            max_blocks,
            kernel_fn=fn,
            threads=THREADS_PER_BLOCK,
        )
        args = (as_cupy(deg), as_cupy(key), as_cupy(out), np.int64(rows), np.int32(k))
        note_launch(stream)
        fn((grid,), (THREADS_PER_BLOCK,), args)
    return out


def _address(t: torch.Tensor | None) -> np.uint64:
    """The device address of ``t`` as a kernel pointer argument (0 for None)."""
    return np.uint64(0 if t is None else t.data_ptr())


class CudaHopKernels:
    """The hop kernels of ``cuda/sample_neighbors.cu`` on one CUDA device.

    Launches for `ibp_graph.sample_hop.fused_hop`, on torch's current stream, never
    synchronising. The driver allocates every buffer (contiguous int64, on this device) and
    the graph is checked once by `ibp_graph.graph.CSRGraph`, so the launches pass raw device
    addresses instead of exchanging a DLPack view of each tensor. Call them inside
    `launching`.

    Args:
        device: the CUDA device of the graph.
        max_blocks: cap on every grid (default: None, `runtime.BLOCKS_PER_SM` per SM).
    """

    def __init__(self, device: torch.device, max_blocks: int | None = None) -> None:
        self.device = torch.device(device)
        self.max_blocks = max_blocks
        self._open = 0
        self._entries: dict[str, tuple[object, int]] = {}  # entry -> (kernel, most blocks)

    @contextlib.contextmanager
    def launching(self) -> Iterator[None]:
        """Make the device and torch's current stream current for CuPy (once per batch)."""
        with cupy_stream(None, self.device):
            self._open += 1
            try:
                yield
            finally:
                self._open -= 1

    def _launch(self, entry: str, work: int, args: tuple) -> None:
        if not self._open:
            raise RuntimeError(f"{entry} launched outside CudaHopKernels.launching()")
        found = self._entries.get(entry)
        if found is None:  # the kernel and its grid cap, looked up once per entry point
            fn = kernel(SOURCE, entry, device_index(self.device))
            most = grid_size(
                1 << 62, self.device, self.max_blocks, kernel_fn=fn, threads=THREADS_PER_BLOCK
            )
            found = self._entries[entry] = (fn, most)
        fn, most = found
        grid = max(1, min(-(-work // THREADS_PER_BLOCK), most))  # = grid_size(blocks, ...)
        fn((grid,), (THREADS_PER_BLOCK,), args)

    @staticmethod
    def _suffix(indices: torch.Tensor) -> str:
        """The entry points' suffix for a graph's `ibp_graph.graph.CSRGraph.entries`.

        i32 or i64 for 1-D indices; pairs for the ``(E, 2)`` int64 sources and edge ids of
        `ibp_graph.graph.CSRGraph.pairs`, whose kernels read an entry with one 16-byte load.
        """
        if indices.dim() == 2:
            return "pairs"
        return "i32" if indices.dtype == torch.int32 else "i64"

    def draw(self, indptr, indices, frontier, rows_at, key, local, nbr, pos, *, rows: int,
             k: int, replace: bool):  # fmt: skip
        """``ibp_hop_draw_*``: ``k`` slots per frontier row (``k`` in ``[1, MAX_K]``)."""
        entry = f"ibp_hop_draw_k{capacity(k)}_{self._suffix(indices)}"
        args = (
            *map(_address, (indptr, indices, frontier, rows_at, key, local, nbr, pos)),
            np.int64(rows),
            np.int32(k),
            np.int32(bool(replace)),
        )
        self._launch(entry, rows, args)

    def take_all(self, indptr, indices, frontier, slot_start, local, nbr, pos, slots: int):
        """``ibp_hop_all_*``: every in-neighbor of the frontier rows, ``slots`` in all."""
        entry = f"ibp_hop_all_{self._suffix(indices)}"
        args = (
            *map(_address, (indptr, indices, frontier, slot_start, local, nbr, pos)),
            np.int64(frontier.numel()),
        )
        self._launch(entry, slots, args)

    def flags(self, nbr, local, flags):
        """``ibp_hop_flags``: fresh and used flags of every slot."""
        slots = nbr.numel()
        self._launch("ibp_hop_flags", slots, (*map(_address, (nbr, local, flags)), np.int64(slots)))

    def clear(self, nodes, counts, at: int, local):
        """``ibp_hop_clear``: the map's entries of the first ``counts[at]`` of ``nodes``."""
        cap = nodes.numel()
        args = (_address(nodes), _address(counts), np.int32(at), _address(local), np.int64(cap))
        self._launch("ibp_hop_clear", cap, args)

    def pack(self, parts, counts, out, *, n_parts: int, rows: int):
        """``ibp_hop_pack``: the counted entries of ``n_parts`` buffers into ``out``."""
        width = out.shape[-1]
        args = (
            _address(parts), np.int32(n_parts), _address(counts), np.int32(rows), _address(out),
            np.int64(width),
        )  # fmt: skip
        self._launch("ibp_hop_pack", width, args)

    def emit(self, nbr, pos, edge_ids, cum, slot_start, local, fresh, row, col, edge, counts,
             *, rows: int, k: int, begin: int, end: int, hop: int, hops: int):  # fmt: skip
        """``ibp_hop_emit``: the hop's edges and new nodes (``k = 0`` with ``slot_start``)."""
        slots = nbr.numel()
        ptrs = (nbr, pos, edge_ids, cum, slot_start, local, fresh, row, col, edge, counts)
        args = (
            *map(_address, ptrs),
            np.int64(slots),
            np.int64(rows),
            np.int32(k),
            np.int64(begin),
            np.int64(end),
            np.int32(hop),
            np.int32(hops),
        )
        self._launch("ibp_hop_emit", slots, args)
