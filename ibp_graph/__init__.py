"""ibp-graph: GNN mini-batch loading with losslessly compressed node features.

Feature tables are compressed offline with Invariant Bit Packing into ``.ibp`` files;
``ibp_graph.open`` gives a table whose ``table[ids]`` decodes rows bit for bit.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from .compress import check_device, compress
from .errors import (
    IBPDeviceError,
    IBPError,
    IBPFormatError,
    IBPIndexError,
    IBPInputError,
    check_bool,
)
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
        path: the ``.ibp`` file: a str, an ``os.PathLike`` or bytes (decoded as
            ``os.fsdecode`` does).
        device: ``"cpu"`` decodes with NumPy (rows memory-mapped); ``"cuda"`` / ``"cuda:N"``
            pins the rows in host memory and decodes on that GPU (default: ``"cpu"``).
        mmap: CPU tables: map the row section rather than read it; a bool (default: True).
        verify: check the checksums of every section first; a bool (default: True).
        **kwargs: CUDA tables: the keywords of `CudaIBPTable` (``max_blocks``, ``progress``,
            ``host_rows``, ``pages``, ``sort_ids``, ``double_buffer``).

    Returns:
        An :class:`~ibp_graph.table.IBPTable` for ``"cpu"``, a `CudaIBPTable` for a GPU.

    Raises:
        IBPFormatError: the file is missing, not an ``.ibp`` file, malformed, truncated or
            corrupt; the message starts with the path and names what is wrong.
        IBPInputError: an argument is invalid, checked before the file is read: ``path`` is
            not a str, an ``os.PathLike`` or bytes, ``device`` is not ``"cpu"`` or
            ``"cuda[:N]"``, ``mmap`` or ``verify`` is not a bool (a NumPy bool counts), or a
            keyword of `CudaIBPTable` has a wrong value or names a GPU that does not exist.
        IBPDeviceError: ``device`` is a CUDA device and no GPU is usable.
        TypeError: keywords were given for a CPU table (they apply to CUDA tables only), or
            a keyword that `CudaIBPTable` does not take.
        ImportError: ``device`` is a CUDA device and CuPy is not installed.
    """
    dev = check_device(device)
    mmap = check_bool("mmap", mmap)
    verify = check_bool("verify", verify)
    if dev.type == "cpu":
        if kwargs:
            raise TypeError(f"unexpected arguments for a CPU table: {', '.join(kwargs)}")
        return IBPTable(path, mmap=mmap, verify=verify)
    from .cuda_table import CudaIBPTable

    return CudaIBPTable(path, device=dev, verify=verify, **kwargs)


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
