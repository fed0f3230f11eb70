"""Launcher of ``cuda/raw_gather.cu``: zero-copy gather of uncompressed rows."""

from __future__ import annotations

import numpy as np
import torch

from .fetch_decode import WARP, check_error, check_launch, check_out_pos
from .runtime import (
    as_cupy,
    check_block_warps,
    check_chunk_rows,
    chunk_positions,
    chunk_requests,
    chunk_spans,
    cupy_stream,
    fetch_blocks_per_sm,
    grid_size,
    kernel,
    note_launch,
)

SOURCE = "raw_gather.cu"


def vector_bytes(row_bytes: int, *addresses: int) -> int:
    """The widest vector (16, 8, 4, 2 or 1 bytes) dividing the row width and every address.

    The kernel moves rows as vectors of that width from the table to the output, so both
    base addresses (and the row width) must be multiples of it.
    """
    for v in (16, 8, 4, 2):
        if row_bytes % v == 0 and all(a % v == 0 for a in addresses):
            return v
    return 1


def entry_point(row_bytes: int, table_ptr: int, out_ptr: int, line_aligned: bool = False) -> str:
    """The kernel that gathers rows of ``row_bytes`` bytes from ``table_ptr`` into ``out_ptr``.

    ``ibp_raw_gather_v<vector_bytes>`` (the widest vector dividing the row and both
    addresses), or with ``line_aligned`` ``ibp_raw_gather_lines`` (whole aligned 16-byte
    loads, for rows of a multiple of 4 bytes from a 16-byte-aligned table into a 4-byte-aligned
    output). Vectors are the default: on an H100 they gathered Cora-width rows (5,732 B)
    5-9% faster than whole 16-byte loads, 260 B and 1,028 B rows 2% slower
    (benchmarks/results/fetch-nvidia-h100-80gb-hbm3-lanes.md against -lines-raw-lanes.md).

    Raises:
        ValueError: ``line_aligned=True`` where the lines kernel cannot run (says why).
    """
    fits = row_bytes % 4 == 0 and table_ptr % 16 == 0 and out_ptr % 4 == 0
    if line_aligned and not fits:
        raise ValueError(
            f"line_aligned=True needs rows of a multiple of 4 bytes (got {row_bytes}), a "
            f"16-byte-aligned table (got {table_ptr:#x}) and a 4-byte-aligned output "
            f"(got {out_ptr:#x})"
        )
    if line_aligned:
        return "ibp_raw_gather_lines"
    return f"ibp_raw_gather_v{vector_bytes(row_bytes, table_ptr, out_ptr)}"


def raw_gather(
    table_ptr: int,
    num_rows: int,
    row_bytes: int,
    idx: torch.Tensor,
    out: torch.Tensor,
    error: torch.Tensor,
    *,
    out_pos: torch.Tensor | None = None,
    stream: torch.cuda.Stream | None = None,
    max_blocks: int | None = None,
    line_aligned: bool = False,
    chunk_rows: int | None = None,
    block_warps: int | None = None,
) -> None:
    """Copy rows ``idx`` of a ``(num_rows, row_bytes)`` table at ``table_ptr`` into ``out``.

    Row ``idx[r]`` goes to row ``out_pos[r]`` of ``out`` (row ``r`` when ``out_pos`` is None).
    ``table_ptr`` is an address the device of ``error`` can read (pinned host memory over
    UVA, or its own memory); ``idx``, ``out`` and ``out_pos`` live on that device too.
    ``error[0]`` receives 1 + the smallest output position of an out-of-range id, whose output
    row is zero-filled (``error`` zeroed on ``stream``, one per launch). Does not synchronise;
    ``stream`` waits for torch's current stream first.

    Args:
        table_ptr: device-visible address of the table's first row.
        num_rows: rows in the table.
        row_bytes: bytes per row.
        idx: row ids, a contiguous 1-D int64 tensor.
        out: contiguous output of ``len(idx)`` rows of ``row_bytes`` bytes.
        error: the launch's zeroed ``(2,)`` int32 error slots.
        out_pos: where each row goes in ``out``, a contiguous 1-D int64 tensor holding a
            permutation of ``0 .. len(idx) - 1`` (not checked), e.g. the permutation of
            ``torch.sort(ids)`` with ``idx`` the sorted ids (default: None, row ``r`` to
            ``r``).
        stream: the torch stream to launch on (default: None, the current one).
        max_blocks: cap on the grid (default: None, `runtime.fetch_blocks_per_sm`: a block on
            a quarter of the SMs when ``stream`` is given, every block the SMs hold when it is
            None).
        line_aligned: load whole aligned 16-byte chunks (see `entry_point`), reading up to 15
            bytes past a row: the table must then be readable 16 bytes past its end (pinned
            buffers are) (default: False, the widest vectors).
        chunk_rows: launch the gather as kernels of at most this many rows each, one after
            another on ``stream`` (`runtime.chunk_spans`), so that its blocks leave the SMs
            between them (default: None, one launch).
        block_warps: warps per block, 1 to 32 (default: None, `runtime.FETCH_BLOCK_WARPS`,
            8). The grid cap counts blocks, so more warps a block keep more rows in flight
            on the same SMs.

    Raises:
        ValueError: a tensor has the wrong device, type, shape or size (named), or
            ``line_aligned=True`` cannot apply.
    """
    device = error.device
    check_launch(idx, out, row_bytes, device)
    check_out_pos(out_pos, idx, device)
    check_error(error, device)
    spans = chunk_spans(idx.shape[0], check_chunk_rows(chunk_rows))
    warps = check_block_warps(block_warps)
    if idx.shape[0] == 0:
        return
    name = entry_point(row_bytes, table_ptr, out.data_ptr(), line_aligned)
    threads = WARP * warps
    out_pos = chunk_positions(out_pos, idx.shape[0], spans, stream, device)
    with cupy_stream(stream, device):
        fn = kernel(SOURCE, name, device.index)
        grid = grid_size(
            -(-spans[0][1] // warps),
            device,
            max_blocks,
            kernel_fn=fn,
            threads=threads,
            per_sm=fetch_blocks_per_sm(stream),
        )
        out_arg, error_arg = as_cupy(out.view(torch.uint8).reshape(-1)), as_cupy(error)
        # Every DLPack view before the launch mark: making one may queue a wait on the stream.
        views = (as_cupy(idx), None if out_pos is None else as_cupy(out_pos))
        requests = chunk_requests(idx, out_pos, spans, views)
        table, rows, width = np.uint64(table_ptr), np.int64(num_rows), np.int64(row_bytes)
        note_launch(stream)
        for (r0, r1), (idx_arg, pos_arg) in zip(spans, requests, strict=True):
            args = (table, idx_arg, pos_arg, out_arg, error_arg, np.int64(r1 - r0), rows, width)
            fn((grid,), (threads,), args)
