"""One copy per host of a dataset's tensors (those the ranks read) in a shared segment.

Layout of the segment: a 64-byte header (magic, then the length of a JSON description), the
JSON (name, nodes, classes, source, and per tensor its dtype, shape and whether it is
stored), then each stored tensor's bytes, in a fixed order, each on a 64-byte boundary.
`share_dataset` writes it (one process per host); `attach_dataset` returns a `GraphDataset`
whose tensors are views of the segment, so every local rank reads the same pages.

Tensors the ranks never read are left out (``omit``): ``x`` where they read the rows from a
compressed table, ``edge_index`` where they sample a CSR graph shared apart. They come back
as meta tensors, with their shape and dtype and no data (any read of their values fails at
once), as `ibp_graph.datasets.GraphDataset.without` makes them.

.. code-block:: python

    seg = SharedSegment.create(name, dataset_segment_size(ds, omit=("x",)))
    share_dataset(ds, seg, omit=("x",))                   # local rank 0
    ds = attach_dataset(SharedSegment.attach(name))       # every rank; ds.x.is_meta
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..datasets import TENSORS, GraphDataset
from ..errors import IBPFormatError, IBPInputError
from .shm import SharedSegment, round_up

__all__ = ["attach_dataset", "check_omit", "dataset_segment_size", "share_dataset"]

_MAGIC = b"IBPGDS01"
_HEADER = 64
_ALIGN = 64
_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64)
    + (torch.int32, torch.bool, torch.uint8)
}


def _dtype_name(t: torch.Tensor, what: str) -> str:
    name = str(t.dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise IBPInputError(f"dataset {what} has dtype {t.dtype}, which cannot be shared")
    return name


def check_omit(omit: object) -> tuple[str, ...]:
    """``omit`` as a tuple of tensor names of a `GraphDataset`.

    Raises:
        IBPInputError: a name is not one of them.
    """
    names = (omit,) if isinstance(omit, str) else tuple(omit)  # type: ignore[arg-type]
    unknown = [n for n in names if n not in TENSORS]
    if unknown:
        raise IBPInputError(f"omit names no dataset tensor: {unknown}; they are {TENSORS}")
    return names


def _describe(ds: GraphDataset, omit: tuple[str, ...]) -> tuple[bytes, int]:
    """The JSON description of ``ds``'s segment, and the end of its data."""
    tensors: dict[str, Any] = {}
    for name in TENSORS:
        t = getattr(ds, name)
        stored = name not in omit
        if stored and t.device.type != "cpu":
            raise IBPInputError(f"dataset {name} must be on the CPU to share, got {t.device}")
        tensors[name] = {"dtype": _dtype_name(t, name), "shape": list(t.shape), "stored": stored}
    meta = {
        "name": ds.name,
        "num_nodes": int(ds.num_nodes),
        "num_classes": int(ds.num_classes),
        "source": ds.source,
        "tensors": tensors,
    }
    text = json.dumps(meta).encode()
    return text, _offsets(len(text), tensors)[1]


def _offsets(length: int, tensors: dict[str, Any]) -> tuple[dict[str, int], int]:
    """Where each stored tensor starts, and where the last one ends.

    The stored tensors follow the JSON of ``length`` bytes in the order of
    `ibp_graph.datasets.TENSORS`, each on a 64-byte boundary.
    """
    start, offsets = round_up(_HEADER + length, _ALIGN), {}
    for name in TENSORS:
        entry = tensors[name]
        if entry["stored"]:
            offsets[name] = start
            count = int(np.prod(entry["shape"], dtype=np.int64))
            start = round_up(start + count * _DTYPES[entry["dtype"]].itemsize, _ALIGN)
    return offsets, start


def dataset_segment_size(ds: GraphDataset, *, omit: Iterable[str] = ()) -> int:
    """Bytes of the segment that holds ``ds`` but its tensors ``omit`` (whole pages)."""
    return round_up(_describe(ds, check_omit(omit))[1], mmap.PAGESIZE)


def share_dataset(
    ds: GraphDataset, segment: SharedSegment, *, omit: Iterable[str] = ()
) -> GraphDataset:
    """Write ``ds`` (on the CPU) into ``segment``; return the copy that reads it there.

    Args:
        ds: the dataset.
        segment: a segment of at least `dataset_segment_size` bytes.
        omit: names of tensors not to store (``"x"``, ``"edge_index"``, ...): the returned
            copy has them as meta tensors (default: none).

    Raises:
        IBPInputError: a stored tensor is not on the CPU or of a dtype that cannot be shared,
            ``omit`` names no tensor, or the segment is closed or too small.
    """
    text, end = _describe(ds, check_omit(omit))
    need = round_up(end, mmap.PAGESIZE)
    if segment.closed or segment.nbytes < need:
        have = "closed" if segment.closed else f"{segment.nbytes} bytes"
        raise IBPInputError(f"segment {segment.name} is {have}, the dataset needs {need} bytes")
    header = np.zeros(_HEADER, dtype=np.uint8)
    header[:8] = np.frombuffer(_MAGIC, dtype=np.uint8)
    header[8:16] = np.array([len(text)], dtype="<i8").view(np.uint8)
    segment.array[:_HEADER] = header
    segment.array[_HEADER : _HEADER + len(text)] = np.frombuffer(text, dtype=np.uint8)
    out = attach_dataset(segment)
    for name in TENSORS:
        view = getattr(out, name)
        if not view.is_meta:
            view.copy_(getattr(ds, name))
    return out


def attach_dataset(segment: SharedSegment) -> GraphDataset:
    """The `GraphDataset` held in ``segment`` (written by `share_dataset`), as views of it.

    Tensors left out when it was written are meta tensors (shape and dtype only). The others
    keep the mapping alive while they are used.

    Raises:
        IBPFormatError: the segment does not hold a dataset written by `share_dataset`.
    """
    bad = f"{segment.path}: not a shared dataset"
    head = segment.array[:_HEADER]
    if segment.nbytes < _HEADER or head[:8].tobytes() != _MAGIC:
        raise IBPFormatError(f"{bad} (bad magic)")
    length = int(head[8:16].view("<i8")[0])
    if not 0 < length <= segment.nbytes - _HEADER:
        raise IBPFormatError(f"{bad} (description of {length} bytes)")
    try:
        meta = json.loads(segment.array[_HEADER : _HEADER + length].tobytes())
        tensors = {name: meta["tensors"][name] for name in TENSORS}
        offsets, end = _offsets(length, tensors)
        if end > segment.nbytes:
            raise ValueError(f"it needs {end} bytes, the segment has {segment.nbytes}")
        out = {name: _tensor(segment, tensors[name], offsets.get(name)) for name in TENSORS}
        return GraphDataset(
            name=str(meta["name"]),
            num_nodes=int(meta["num_nodes"]),
            num_classes=int(meta["num_classes"]),
            source=str(meta["source"]),
            **out,
        )
    except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        why = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise IBPFormatError(f"{bad} ({why})") from None


def _tensor(segment: SharedSegment, entry: dict[str, Any], offset: int | None) -> torch.Tensor:
    dtype = _DTYPES[entry["dtype"]]
    shape = [int(n) for n in entry["shape"]]
    if min(shape, default=0) < 0:
        raise ValueError(f"a tensor of shape {shape}")
    if offset is None:
        return torch.empty(shape, dtype=dtype, device="meta")
    count = int(np.prod(shape, dtype=np.int64))
    return segment.tensor(offset, count, dtype).view(shape)
