"""Launcher of ``cuda/raw_gather.cu``: zero-copy gather of uncompressed rows."""

from __future__ import annotations

import numpy as np
import torch

from .fetch_decode import WARP, check_error, check_launch
from .runtime import as_cupy, cupy_stream, grid_size, kernel

SOURCE = "raw_gather.cu"
WARPS_PER_BLOCK = 8


def vector_bytes(row_bytes: int, *addresses: int) -> int:
    """The widest vector (16, 8, 4 or 1 bytes) dividing the row width and every address.

    The kernel moves rows as vectors of that width from the table to the output, so both
    base addresses (and the row width) must be multiples of it.
    """
    for v in (16, 8, 4):
        if row_bytes % v == 0 and all(a % v == 0 for a in addresses):
            return v
    return 1


def raw_gather(
    table_ptr: int,
    num_rows: int,
    row_bytes: int,
    idx: torch.Tensor,
    out: torch.Tensor,
    error: torch.Tensor,
    *,
    stream: torch.cuda.Stream | None = None,
    max_blocks: int | None = None,
) -> None:
    """Copy rows ``idx`` of a ``(num_rows, row_bytes)`` table at ``table_ptr`` into ``out``.

    ``table_ptr`` is an address the device of ``error`` can read (pinned host memory over
    UVA, or its own memory); ``idx`` and ``out`` live on that device too. ``error[0]``
    receives 1 + the position of an out-of-range id (``error`` zeroed on ``stream``, one per
    launch). Does not synchronise; ``stream`` waits for torch's current stream first.
    """
    device = error.device
    check_launch(idx, out, row_bytes, device)
    check_error(error, device)
    n = idx.shape[0]
    if n == 0:
        return
    vec = vector_bytes(row_bytes, table_ptr, out.data_ptr())
    grid = grid_size(-(-n // WARPS_PER_BLOCK), device, max_blocks)
    with cupy_stream(stream, device):
        fn = kernel(SOURCE, f"ibp_raw_gather_v{vec}", device.index)
        args = (
            np.uint64(table_ptr),
            as_cupy(idx),
            as_cupy(out.view(torch.uint8).reshape(-1)),
            as_cupy(error),
            np.int64(n),
            np.int64(num_rows),
            np.int64(row_bytes),
        )
        fn((grid,), (WARP * WARPS_PER_BLOCK,), args)
