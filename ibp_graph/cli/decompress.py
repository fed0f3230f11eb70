"""``ibp-graph decompress``: decode an ``.ibp`` file back to the exact original table.

Usage::

    ibp-graph decompress features.ibp -o roundtrip.npy
    ibp-graph decompress features.ibp -o roundtrip.npy --force
    ibp-graph decompress feat.ibp -o feat.pt
    ibp-graph decompress big.ibp -o big.npy --no-progress

The round trip is bit for bit. A ``.npy`` output is written through a memory map, a chunk of
rows at a time, so the table never has to fit in RAM; a ``.pt`` output holds one tensor of the
original dtype (the only choice for ``bfloat16``, which NumPy lacks). The output appears only
once it is complete: a failed run leaves nothing behind. An existing output file is replaced
only with ``--force``, and only if it is a regular file. stdout gets only the output path.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from .. import open as open_table
from ..dtypes import storage_dtype
from ..errors import IBPInputError
from ..progress import work_bar
from ..table import IBPTable
from ._common import (
    UsageError,
    add_force,
    add_no_progress,
    atomic_output,
    check_output_dir,
    output_arg,
    preallocate,
    same_file,
)

#: Decoded bytes per chunk when streaming into a ``.npy`` file.
CHUNK_BYTES = 32 << 20
OUTPUT_SUFFIXES = (".npy", ".pt")

EXAMPLES = """\
examples:
  ibp-graph decompress features.ibp -o roundtrip.npy
  ibp-graph decompress features.ibp -o roundtrip.npy --force   # replace roundtrip.npy
  ibp-graph decompress feat.ibp -o feat.pt          # needed for bfloat16 tables
  ibp-graph decompress big.ibp -o big.npy --no-progress
"""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``decompress`` command to the ``ibp-graph`` parser."""
    p = subparsers.add_parser(
        "decompress",
        help="decode an .ibp file to a .npy or .pt file (bit for bit)",
        description="Decode an .ibp file back to the exact original table.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", metavar="IN.ibp", help="the .ibp file")
    p.add_argument(
        "-o",
        "--output",
        type=output_arg,
        required=True,
        metavar="OUT.npy|OUT.pt",
        help="the file to write; its suffix picks the format",
    )
    add_force(p)
    add_no_progress(p)
    p.set_defaults(run=run, parser=p)
    return p


def write_npy(table: IBPTable, path: Path, *, progress: bool | None = None) -> None:
    """Decode ``table`` into a new ``.npy`` file at ``path``, streaming chunks of rows.

    Args:
        table: the opened table (not bfloat16: NumPy cannot store it).
        path: the file to create.
        progress: show a tqdm bar on stderr; None shows one only on a terminal.
    """
    n, d = table.shape
    dtype = storage_dtype(table.dtype_name)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n, d))
    try:
        preallocate(path, out.offset + out.nbytes)
        per_chunk = max(1, CHUNK_BYTES // max(1, d * dtype.itemsize))
        desc = f"decompress {Path(table.path).name}"
        with work_bar(n, desc, unit="row", show=progress) as bar:
            for start in range(0, n, per_chunk):
                stop = min(n, start + per_chunk)
                out[start:stop] = table.read(slice(start, stop))
                bar.update(stop - start)
        out.flush()
    finally:
        del out  # unmap before the file is renamed or removed


class _ErrorRecordingFile:
    """A write-only file that remembers the first ``OSError`` of a write.

    ``torch.save`` turns a failed write into a ``RuntimeError`` that says nothing of the
    cause (``unexpected pos ...``); the recorded error (a full disk, say) is what to report.
    """

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self._f.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self._f.flush()


def write_pt(table: IBPTable, path: Path) -> None:
    """Decode ``table`` into a new ``.pt`` file holding one tensor of the original dtype.

    Args:
        table: the opened table.
        path: the file to create (it must not exist yet).

    Raises:
        OSError: the file cannot be created or written (a full disk, a read-only folder).
    """
    rows = table[:]
    with open(path, "xb") as f:
        out = _ErrorRecordingFile(f)
        try:
            torch.save(rows, out)
        except RuntimeError:
            if out.error is not None:
                raise out.error from None
            raise
        f.flush()
        os.fsync(f.fileno())


def run(args: argparse.Namespace) -> int:
    """Decode ``args.input`` into ``args.output``; print the output path to stdout."""
    out = Path(args.output)
    suffix = out.suffix.lower()
    if suffix not in OUTPUT_SUFFIXES:
        raise UsageError(
            f"argument -o/--output: {str(out)!r} has an unknown suffix "
            f"{suffix or '(none)'!r}; use .npy or .pt"
        )
    src = Path(args.input)
    if same_file(out, src):
        raise IBPInputError(f"{out}: the output would overwrite the input; pick another -o")
    check_output_dir(out, force=args.force)
    table = open_table(src)
    try:
        if suffix == ".npy" and table.dtype_name == "bfloat16":
            raise IBPInputError(
                f"{src}: the table is bfloat16, which .npy cannot hold (NumPy has no "
                f"bfloat16); write a .pt instead: -o {out.with_suffix('.pt')}"
            )
        with atomic_output(out) as tmp:
            if suffix == ".npy":
                write_npy(table, tmp, progress=False if args.no_progress else None)
            else:
                write_pt(table, tmp)
    finally:
        table.close()
    print(out)
    return 0
