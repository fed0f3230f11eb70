"""ibp-graph: GNN mini-batch loading with losslessly compressed node features.

Feature tables are compressed offline with Invariant Bit Packing into ``.ibp`` files;
``ibp_graph.open`` gives a table whose ``table[ids]`` decodes rows bit for bit.
"""

from __future__ import annotations

import os

from .compress import compress
from .errors import IBPError, IBPFormatError, IBPInputError
from .table import IBPTable

__version__ = "0.1.0"


def open(path: str | os.PathLike[str], *, mmap: bool = True, verify: bool = True) -> IBPTable:  # noqa: A001
    """Open an ``.ibp`` file as a read-only table (CPU decode).

    Args:
        path: the ``.ibp`` file.
        mmap: map the row section rather than read it into memory (default: True).
        verify: check the checksums of every section first (default: True).
    """
    return IBPTable(path, mmap=mmap, verify=verify)


__all__ = [
    "IBPError",
    "IBPFormatError",
    "IBPInputError",
    "IBPTable",
    "__version__",
    "compress",
    "open",
]
