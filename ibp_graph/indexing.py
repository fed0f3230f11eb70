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


def _short(index: object) -> str:
    """The repr of an index on one line, cut to 40 characters."""
    text = " ".join(repr(index).split())
    return text if len(text) <= 40 else text[:37] + "..."


def _describe(index: object) -> str:
    """A one-line, short description of an index for an error message."""
    return f"{type(index).__name__} {_short(index)}"


def _out_of_range(value: int, pos: int | None, num_rows: int) -> IBPIndexError:
    where = "" if pos is None else f" (at position {pos})"
    return IBPIndexError(f"row index {value}{where} is out of range for a table of {num_rows} rows")


def _not_integers(dtype: object) -> IBPIndexError:
    name = str(dtype).removeprefix("torch.")
    return IBPIndexError(f"row indices must be integers or booleans, got dtype {name}")


def _check_mask(shape: tuple[int, ...], num_rows: int) -> None:
    """Refuse a boolean mask that is not 1-D with one entry per row."""
    if len(shape) != 1:
        raise IBPIndexError(
            f"a boolean row mask must be 1-D with one entry per row, got shape {shape}"
        )
    if shape[0] != num_rows:
        raise IBPIndexError(
            f"boolean row mask has {shape[0]} entries, the table has {num_rows} rows"
        )


# Tensor dtypes that are row ids or masks; uint8 is refused on its own (ambiguous).
_TENSOR_DTYPES = frozenset(
    {torch.bool, torch.int8, torch.int16, torch.int32, torch.int64}
    | {getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name)}
)


def _check_tensor(index: torch.Tensor) -> None:
    """Refuse a tensor that holds no readable integer or boolean values."""
    if index.layout != torch.strided or index.is_nested:
        layout = "nested" if index.is_nested else str(index.layout).removeprefix("torch.")
        raise IBPIndexError(
            f"row indices must be a dense tensor, got layout {layout}; pass index.to_dense()"
        )
    if index.device.type == "meta":
        raise IBPIndexError("row indices on device meta hold no values; pass a CPU or CUDA tensor")
    if index.dtype == torch.uint8:
        raise IBPIndexError(
            "a torch.uint8 index is ambiguous (torch reads it as a deprecated mask): pass "
            "index.bool() for a row mask or index.long() for row ids"
        )
    if index.dtype not in _TENSOR_DTYPES:
        raise _not_integers(index.dtype)


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
        f"tuple index {_short(index)} selects along more than the row dimension; a table is "
        "indexed by rows only: pass a list for several rows (table[[1, 2]]), then index "
        "the result for columns (table[[1, 2]][:, 3])"
    )


def _as_array(index: Any, num_rows: int) -> np.ndarray:
    """A plain NumPy array of a list, array or tensor index (CUDA tensors copied to the host).

    NumPy subclasses become plain arrays of their own shape (an ``np.matrix`` is 2-D); a
    masked array is refused, as its mask would be ignored.
    """
    if isinstance(index, torch.Tensor):
        _check_tensor(index)
        return np.asarray(index.detach().cpu().numpy())
    if isinstance(index, np.ma.MaskedArray):
        raise IBPIndexError(
            "a masked array's mask would be ignored as a row index; pass index.compressed() "
            "for the unmasked ids or index.filled(value)"
        )
    if isinstance(index, np.ndarray):
        return np.asarray(index)
    try:
        arr = np.asarray(index)
    except (ValueError, TypeError) as exc:
        text = " ".join(str(exc).split())
        raise IBPIndexError(
            f"row indices must form a rectangular array of integers, got {_describe(index)} "
            f"({text})"
        ) from None
    if arr.dtype == object:
        _refuse_huge_ints(arr, num_rows)
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise IBPIndexError(f"row indices must be integers or booleans, got {_describe(index)}")
    if arr.dtype.kind == "f" and arr.size == 0:
        arr = arr.astype(np.int64)  # an empty list selects no rows
    return arr


def _refuse_huge_ints(arr: np.ndarray, num_rows: int) -> None:
    """Report the first of the Python ints too large for int64 in an object array."""
    try:
        np.asarray(arr, dtype=np.int64)
    except OverflowError:
        pass
    except (TypeError, ValueError):
        return  # not all integers: refused by the caller
    else:
        return
    flat = arr.reshape(-1)
    info = np.iinfo(np.int64)
    try:
        bad = np.asarray((flat > info.max) | (flat < info.min), dtype=bool)
    except TypeError:
        return
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise _out_of_range(int(flat[pos]), pos, num_rows)


def _check_range(ids: np.ndarray, num_rows: int) -> np.ndarray:
    """Wrap negative ids once and refuse those still out of range."""
    if ids.size == 0:
        return ids
    wrapped = np.where(ids < 0, ids + num_rows, ids)
    bad = (wrapped < 0) | (wrapped >= num_rows)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise _out_of_range(int(ids[pos]), pos, num_rows)
    return wrapped


def _integer_ids(arr: np.ndarray, num_rows: int) -> np.ndarray:
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size:
        too_big = arr.reshape(-1) > np.iinfo(np.int64).max
        if too_big.any():
            pos = int(np.flatnonzero(too_big)[0])
            raise _out_of_range(int(arr.reshape(-1)[pos]), pos, num_rows)
    return _check_range(arr.reshape(-1).astype(np.int64), num_rows)


def _normalize(index: Any, num_rows: int) -> tuple[np.ndarray, tuple[int, ...]]:
    if index is None or index is Ellipsis:
        return np.arange(num_rows, dtype=np.int64), (num_rows,)
    if isinstance(index, tuple):
        return _normalize(_untuple(index), num_rows)
    if isinstance(index, (bool, np.bool_)):
        raise IBPIndexError(
            f"a bool ({index}) is not a row index; pass a boolean mask with one entry per row"
        )
    if isinstance(index, (int, np.integer)):
        i = int(index)
        j = i + num_rows if i < 0 else i
        if not 0 <= j < num_rows:
            raise _out_of_range(i, None, num_rows)
        return np.array([j], dtype=np.int64), ()
    if isinstance(index, slice):
        try:
            bounds = index.indices(num_rows)
        except (TypeError, ValueError) as exc:
            raise IBPIndexError(f"bad slice {_short(index)} ({exc})") from None
        ids = np.arange(*bounds, dtype=np.int64)
        return ids, ids.shape
    if isinstance(index, range):
        ids = _check_range(np.asarray(index, dtype=np.int64), num_rows)
        return ids, ids.shape
    if not isinstance(index, (list, np.ndarray, torch.Tensor)):
        raise IBPIndexError(f"a row index must be {_ACCEPTED}; got {_describe(index)}")
    arr = _as_array(index, num_rows)
    if arr.dtype == np.bool_:
        _check_mask(tuple(arr.shape), num_rows)
        ids = np.flatnonzero(arr).astype(np.int64)
        return ids, ids.shape
    if arr.dtype.kind not in "iu":
        raise _not_integers(arr.dtype)
    if arr.ndim == 0:  # one row, as an int
        return _normalize(int(arr), num_rows)
    ids = _integer_ids(arr, num_rows)
    return ids, tuple(arr.shape)


def normalize_index(index: Any, num_rows: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """Return ``(ids, shape)``: flat checked int64 row ids and the leading shape of the result.

    ``shape`` is ``()`` for a single row (an int or a 0-d integer array or tensor), ``(n,)``
    for a slice, a range, a 1-D list or array or a boolean mask, ``(num_rows,)`` for None,
    and the index's own shape for an N-D integer array or tensor; the decoded rows are
    ``ids`` reshaped to ``shape + (cols,)``. ``ids`` is always a plain, contiguous, 1-D
    int64 ``np.ndarray`` of ids in ``[0, num_rows)``, whatever the index's type.

    Args:
        index: the selection: an int (negative counts from the end), a slice (any step but
            0), a range, ``...``, a (nested) list, an integer NumPy array (an ``np.matrix``
            counts as the 2-D array it holds) or a dense CPU/CUDA tensor of any shape, a
            1-D boolean mask with one entry per row, a tuple whose entries after the first
            are ``:`` or ``...``, or None for every row (unlike torch, where None adds a
            dimension).
        num_rows: the table's number of rows.

    Raises:
        IBPIndexError: the index is not one of the above (a masked array, a torch.uint8,
            floating-point, sparse or meta tensor, ...), or an id is out of range; the
            message names the offending value and its position.
    """
    ids, shape = _normalize(index, num_rows)
    return np.ascontiguousarray(ids, dtype=np.int64).reshape(-1), shape


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


def normalize_index_tensor(
    index: Any, num_rows: int, device: torch.device | str
) -> tuple[torch.Tensor, tuple[int, ...]]:
    """:func:`normalize_index` with the ids as a 1-D int64 tensor on ``device``.

    The same rules and messages; a CUDA tensor index is checked where it lives, so its ids
    never make a trip through host memory (an id out of range costs one synchronisation to
    report it, as torch's own check does). Any other index is checked by
    :func:`normalize_index` and its ids copied to ``device``.

    Args:
        index: the selection (see :func:`normalize_index`).
        num_rows: the number of rows.
        device: where the ids go.

    Raises:
        IBPIndexError: as :func:`normalize_index`.
    """
    device = torch.device(device)
    if isinstance(index, torch.Tensor) and index.device.type == "cuda":
        _check_tensor(index)
        if index.dtype not in (torch.bool, torch.int8, torch.int16, torch.int32, torch.int64):
            ids, shape = normalize_index(index, num_rows)  # unsigned: checked on the host
            return torch.from_numpy(ids).to(device), shape
        index = index.detach()
        if index.dtype == torch.bool:
            _check_mask(tuple(index.shape), num_rows)
            ids = torch.nonzero(index).reshape(-1)
            return ids.to(device), tuple(ids.shape)
        flat = index.reshape(-1).to(torch.int64)
        ids = torch.where(flat < 0, flat + num_rows, flat)
        if ids.numel():
            bad = (ids < 0) | (ids >= num_rows)
            if bool(bad.any()):
                pos = int(torch.nonzero(bad)[0, 0])
                raise _out_of_range(int(flat[pos]), pos, num_rows)
        return ids.contiguous().to(device), tuple(index.shape)
    ids, shape = normalize_index(index, num_rows)
    return torch.from_numpy(ids).to(device), shape
