"""One copy per host of a compressed table's rows, in a shared-memory segment.

The row section of an ``.ibp`` file (the bytes that dominate its size) is copied once per
host into a `SharedSegment`, followed by the zero tail the GPU kernels read past the last
row. Every local rank then reads rows from that one copy:

- on the CPU, through a `SharedIBPTable`, an `IBPTable` whose row section is the segment;
- on a GPU, through a `CudaIBPTable` that pins the segment itself (``host_rows=``), so N
  ranks pin the same pages for their N GPUs instead of N private copies.

.. code-block:: python

    seg = SharedSegment.create("ibp-graph-run1-node0-rows", segment_size(table))
    fill_rows(table, seg)                                   # local rank 0
    shared = SharedIBPTable(table.path, SharedSegment.attach(seg.name))   # every rank
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from ..errors import IBPInputError
from ..pinned import TAIL_PAD
from ..table import IBPTable
from .shm import SharedSegment, round_up

__all__ = ["SharedIBPTable", "fill_rows", "segment_size"]


def segment_size(table: IBPTable) -> int:
    """Bytes of the segment that holds ``table``'s rows: the rows, the tail, whole pages."""
    need = table.stored_bytes + TAIL_PAD
    return round_up(need, mmap.PAGESIZE)


def _check_fits(table: IBPTable, segment: SharedSegment) -> None:
    need = segment_size(table)
    if segment.closed or segment.nbytes < need:
        have = "closed" if segment.closed else f"{segment.nbytes} bytes"
        raise IBPInputError(
            f"{table.path}: segment {segment.name} is {have}, the rows need {need} bytes"
        )


def fill_rows(table: IBPTable, segment: SharedSegment) -> None:
    """Copy ``table``'s row section into ``segment`` (then zeros up to its end).

    Raises:
        IBPInputError: the segment is closed or smaller than `segment_size`.
    """
    _check_fits(table, segment)
    src = table.rows_section.view(np.uint8)[: table.stored_bytes]
    dst = segment.array
    dst[: src.size] = src  # page by page from the mapped file: no staging copy
    dst[src.size :] = 0


class SharedIBPTable(IBPTable):
    """An `IBPTable` whose rows are read from a shared segment instead of the file.

    Decoding works as for `IBPTable` (rows come back bit for bit); only the row section
    differs: it is ``segment``'s memory, shared by every process of the host that maps it.
    The file still supplies the header and the small sections (offsets, masks).

    Args:
        path: the ``.ibp`` file whose rows the segment holds (see `fill_rows`).
        segment: the segment (this table closes it on `close`).
        verify: check the file's section checksums while opening (default: False: the
            process that filled the segment opened the file with checks).

    Raises:
        IBPFormatError: the file is not a valid ``.ibp`` file.
        IBPInputError: the segment is closed or too small for the rows.
    """

    def __init__(
        self, path: str | os.PathLike[str], segment: SharedSegment, *, verify: bool = False
    ):
        super().__init__(path, mmap=True, verify=verify)
        _check_fits(self, segment)
        self.segment = segment
        nbytes = self.stored_bytes
        if nbytes:
            # The file's mapping is dropped here: rows are read from the segment only.
            self._rows = segment.array[:nbytes].view(np.uint64)

    @property
    def host_rows(self) -> np.ndarray:
        """The whole segment (rows, zero tail, whole pages): what a GPU table pins."""
        return self.segment.array

    def close(self) -> None:
        """Drop the rows and unmap the segment (idempotent)."""
        super().close()
        self.segment.close()

    def __repr__(self) -> str:
        return super().__repr__().replace("IBPTable(", "SharedIBPTable(", 1)
