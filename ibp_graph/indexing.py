"""Turning user row selections into checked int64 row ids."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .errors import IBPInputError

RowIndex = int | slice | np.ndarray | torch.Tensor | list[int] | range | None


def normalize_ids(index: Any, num_rows: int) -> tuple[np.ndarray, bool]:
    """Return ``(ids, scalar)``: checked int64 row ids and whether a single int was given.

    Accepts an int, a slice, a range, a list, a 1-D integer or boolean NumPy array or torch
    tensor (CPU), or None for all rows. Negative ints wrap like Python sequences; negative or
    too large entries of arrays raise `IBPInputError` naming the first bad entry.
    """
    if index is None:
        return np.arange(num_rows, dtype=np.int64), False
    if isinstance(index, bool):
        raise IBPInputError("a bool is not a row index")
    if isinstance(index, (int, np.integer)):
        i = int(index)
        j = i + num_rows if i < 0 else i
        if not 0 <= j < num_rows:
            raise IBPInputError(f"row index {i} is out of range for a table of {num_rows} rows")
        return np.array([j], dtype=np.int64), True
    if isinstance(index, slice):
        return np.arange(*index.indices(num_rows), dtype=np.int64), False
    if isinstance(index, range):
        index = np.arange(index.start, index.stop, index.step, dtype=np.int64)
    if isinstance(index, torch.Tensor):
        if index.device.type != "cpu":
            index = index.cpu()
        index = index.numpy()
    arr = np.asarray(index)
    if arr.dtype == object:
        raise IBPInputError("row indices must be integers, got objects")
    if arr.ndim != 1:
        raise IBPInputError(f"row indices must be 1-D, got shape {tuple(arr.shape)}")
    if arr.dtype == bool:
        if arr.shape[0] != num_rows:
            raise IBPInputError(
                f"boolean row mask has {arr.shape[0]} entries, the table has {num_rows} rows"
            )
        return np.flatnonzero(arr).astype(np.int64), False
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64), False
    if arr.dtype.kind not in "iu":
        raise IBPInputError(f"row indices must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.max() > np.iinfo(np.int64).max:
        bad = int(arr[np.argmax(arr > np.iinfo(np.int64).max)])
        raise IBPInputError(f"row index {bad} is out of range for a table of {num_rows} rows")
    ids = arr.astype(np.int64, copy=False)
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= num_rows:
        pos = int(np.flatnonzero((ids < 0) | (ids >= num_rows))[0])
        raise IBPInputError(
            f"row index {int(ids[pos])} (at position {pos}) is out of range for a table of "
            f"{num_rows} rows"
        )
    return ids, False
