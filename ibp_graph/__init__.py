"""ibp-graph: GNN mini-batch loading with losslessly compressed node features.

Feature tables are compressed offline with Invariant Bit Packing into ``.ibp`` files;
``ibp_graph.open`` gives a table whose ``table[ids]`` decodes rows bit for bit.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from .compress import compress
from .errors import IBPDeviceError, IBPError, IBPFormatError, IBPIndexError, IBPInputError
from .table import IBPTable

if TYPE_CHECKING:
    from .cuda_table import CudaIBPTable

__version__ = "0.1.0"


def open(  # noqa: A001
    path: str | os.PathLike[str],
    *,
    device: str | torch.device = "cpu",
    mmap: bool = True,
    verify: bool = True,
    **kwargs: Any,
) -> IBPTable | CudaIBPTable:
    """Open an ``.ibp`` file as a read-only table.

    Args:
        path: the ``.ibp`` file.
        device: ``"cpu"`` decodes with NumPy (rows memory-mapped); ``"cuda"`` / ``"cuda:N"``
            pins the rows in host memory and decodes on that GPU (default: ``"cpu"``).
        mmap: CPU tables: map the row section rather than read it (default: True).
        verify: check the checksums of every section first (default: True).
        **kwargs: CUDA tables: the keywords of `CudaIBPTable` (``max_blocks``, ``progress``,
            ``host_rows``, ``pages``, ``sort_ids``, ``double_buffer``).
    """
    if torch.device(device).type == "cpu":
        if kwargs:
            raise TypeError(f"unexpected arguments for a CPU table: {', '.join(kwargs)}")
        return IBPTable(path, mmap=mmap, verify=verify)
    from .cuda_table import CudaIBPTable

    return CudaIBPTable(path, device=device, verify=verify, **kwargs)


__all__ = [
    "IBPDeviceError",
    "IBPError",
    "IBPFormatError",
    "IBPIndexError",
    "IBPInputError",
    "IBPTable",
    "__version__",
    "compress",
    "open",
]
