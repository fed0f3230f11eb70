"""Turning user row selections into checked int64 row ids, following torch's indexing rules.

A table behaves like a 2-D tensor indexed on its first dimension: ``table[i]`` is one row,
``table[ids]`` with an integer array or tensor of any shape gives ``ids.shape + (cols,)``, a
1-D boolean mask of one entry per row selects rows, negative ids count from the end, and an
id out of range raises :class:`~ibp_graph.errors.IBPIndexError` (an ``IndexError``). Anything
that would index the columns too (a tuple such as ``(1, 2)``, a 2-D boolean mask) or that is
not an index at all (a float, a string) is refused with a message saying what to pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .errors import IBPIndexError

RowIndex = int | slice | np.ndarray | torch.Tensor | list[int] | range | tuple[Any, ...] | None

_ACCEPTED = "an int, a slice, a range, a list, or an integer or boolean array or tensor"


def _describe(index: object) -> str:
    text = repr(index)
    return f"{type(index).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _full(index: object) -> bool:
    return index is Ellipsis or (isinstance(index, slice) and index == slice(None, None, None))


def _untuple(index: tuple[Any, ...]) -> Any:
    """The row part of a tuple index, whose other entries may only be ``:`` or ``...``."""
    rest = list(index)
    while len(rest) > 1 and _full(rest[-1]):
        rest.pop()
    if len(rest) == 1 and not isinstance(rest[0], tuple):
        return rest[0]
    if not rest:
        return Ellipsis
    raise IBPIndexError(
        f"tuple index {index!r} selects along more than the row dimension; a table is "
        "indexed by rows only: pass a list for several rows (table[[1, 2]]), then index "
        "the result for columns (table[[1, 2]][:, 3])"
    )


def _as_array(index: Any) -> np.ndarray:
    """A NumPy view of a list, array or tensor index (CUDA tensors are copied to the host)."""
    if isinstance(index, torch.Tensor):
        if index.dtype == torch.uint8:
            raise IBPIndexError(
                "a torch.uint8 index is ambiguous (torch reads it as a deprecated mask): pass "
                "index.bool() for a row mask or index.long() for row ids"
            )
        return index.detach().cpu().numpy()
    if isinstance(index, np.ndarray):
        return index
    try:
        arr = np.asarray(index)
    except (ValueError, TypeError) as exc:
        raise IBPIndexError(
            f"row indices must form a rectangular array of integers, got {_describe(index)} ({exc})"
        ) from None
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise IBPIndexError(f"row indices must be integers or booleans, got {_describe(index)}")
    if arr.dtype.kind == "f" and arr.size == 0:
        arr = arr.astype(np.int64)  # an empty list selects no rows
    return arr


def _check_range(ids: np.ndarray, num_rows: int) -> np.ndarray:
    """Wrap negative ids once and refuse those still out of range."""
    if ids.size == 0:
        return ids
    wrapped = np.where(ids < 0, ids + num_rows, ids)
    bad = (wrapped < 0) | (wrapped >= num_rows)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise IBPIndexError(
            f"row index {int(ids[pos])} (at position {pos}) is out of range for a table of "
            f"{num_rows} rows"
        )
    return wrapped


def _integer_ids(arr: np.ndarray, num_rows: int) -> np.ndarray:
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size:
        too_big = arr > np.iinfo(np.int64).max
        if too_big.any():
            pos = int(np.flatnonzero(too_big)[0])
            raise IBPIndexError(
                f"row index {int(arr[pos])} (at position {pos}) is out of range for a table "
                f"of {num_rows} rows"
            )
    return _check_range(arr.reshape(-1).astype(np.int64), num_rows)


def normalize_index(index: Any, num_rows: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """Return ``(ids, shape)``: flat checked int64 row ids and the leading shape of the result.

    ``shape`` is ``()`` for a single row, ``(n,)`` for a slice, a range, a 1-D list or array
    or a boolean mask, and the index's own shape for an N-D integer array or tensor; the
    decoded rows are ``ids`` reshaped to ``shape + (cols,)``.

    Args:
        index: the selection: an int (negative counts from the end), a slice (any step but
            0), a range, ``...``, a (nested) list, an integer NumPy array or CPU/CUDA tensor
            of any shape, a 1-D boolean mask with one entry per row, a tuple whose entries
            after the first are ``:`` or ``...``, or None for every row.
        num_rows: the table's number of rows.

    Raises:
        IBPIndexError: the index is not one of the above, or an id is out of range; the
            message names the offending value and its position.
    """
    if index is None or index is Ellipsis:
        return np.arange(num_rows, dtype=np.int64), (num_rows,)
    if isinstance(index, tuple):
        return normalize_index(_untuple(index), num_rows)
    if isinstance(index, (bool, np.bool_)):
        raise IBPIndexError(
            f"a bool ({index}) is not a row index; pass a boolean mask with one entry per row"
        )
    if isinstance(index, (int, np.integer)):
        i = int(index)
        j = i + num_rows if i < 0 else i
        if not 0 <= j < num_rows:
            raise IBPIndexError(f"row index {i} is out of range for a table of {num_rows} rows")
        return np.array([j], dtype=np.int64), ()
    if isinstance(index, slice):
        try:
            bounds = index.indices(num_rows)
        except (TypeError, ValueError) as exc:
            raise IBPIndexError(f"bad slice {index!r} ({exc})") from None
        ids = np.arange(*bounds, dtype=np.int64)
        return ids, ids.shape
    if isinstance(index, range):
        ids = _check_range(np.asarray(index, dtype=np.int64), num_rows)
        return ids, ids.shape
    if not isinstance(index, (list, np.ndarray, torch.Tensor)):
        raise IBPIndexError(f"a row index must be {_ACCEPTED}; got {_describe(index)}")
    arr = _as_array(index)
    if arr.dtype == np.bool_:
        if arr.ndim != 1:
            raise IBPIndexError(
                f"a boolean row mask must be 1-D with one entry per row, got shape "
                f"{tuple(arr.shape)}"
            )
        if arr.shape[0] != num_rows:
            raise IBPIndexError(
                f"boolean row mask has {arr.shape[0]} entries, the table has {num_rows} rows"
            )
        ids = np.flatnonzero(arr).astype(np.int64)
        return ids, ids.shape
    if arr.dtype.kind not in "iu":
        raise IBPIndexError(f"row indices must be integers or booleans, got dtype {arr.dtype}")
    ids = _integer_ids(arr, num_rows)
    return ids, tuple(arr.shape)


def normalize_ids(index: Any, num_rows: int) -> tuple[np.ndarray, bool]:
    """Return ``(ids, scalar)``: flat checked int64 row ids and whether one row was selected.

    The same rules as :func:`normalize_index`, for callers that return rows as a 2-D block:
    an index of two or more dimensions is refused.

    Args:
        index: the selection (see :func:`normalize_index`).
        num_rows: the table's number of rows.

    Raises:
        IBPIndexError: as :func:`normalize_index`, or the index has two or more dimensions.
    """
    ids, shape = normalize_index(index, num_rows)
    if len(shape) > 1:
        raise IBPIndexError(f"row indices must be 1-D here, got shape {shape}")
    return ids, shape == ()
