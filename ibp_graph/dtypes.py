"""Supported element types and the byte/word views of feature rows.

A table is stored as raw little-endian bytes; its element type is kept by name so that
``bfloat16`` (which NumPy lacks) round-trips through a ``uint16`` bit view.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch

from .errors import IBPInputError

if sys.byteorder != "little":  # pragma: no cover - every supported host is little-endian
    raise ImportError("ibp_graph needs a little-endian host")

#: Element types a table may have, with the NumPy type that holds their bits.
SUPPORTED_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype("<u2"),
    "float64": np.dtype("<f8"),
    "int8": np.dtype("i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "uint8": np.dtype("u1"),
}

_TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
}
_TORCH_TO_NAME = {v: k for k, v in _TORCH_DTYPES.items()}

#: Bits of each element that hold the sign and exponent, per floating type.
SIGN_EXPONENT_MASKS: dict[str, int] = {
    "float16": 0xFC00,
    "bfloat16": 0xFF80,
    "float32": 0xFF800000,
    "float64": 0xFFF0000000000000,
}

WORD_DTYPES: dict[int, np.dtype] = {4: np.dtype("<u4"), 8: np.dtype("<u8")}


def _supported_list() -> str:
    return ", ".join(SUPPORTED_DTYPES)


def dtype_name(dtype: Any) -> str:
    """Return our name for a NumPy or torch dtype, or raise `IBPInputError`."""
    if isinstance(dtype, torch.dtype):
        if dtype in _TORCH_TO_NAME:
            return _TORCH_TO_NAME[dtype]
        raise IBPInputError(f"unsupported dtype {dtype}; supported: {_supported_list()}")
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as exc:
        raise IBPInputError(f"unsupported dtype {dtype!r}; supported: {_supported_list()}") from exc
    if np_dtype.kind == "O":
        raise IBPInputError("object arrays cannot be compressed; convert to a numeric dtype first")
    name = np_dtype.name
    if name not in SUPPORTED_DTYPES or name == "bfloat16":
        raise IBPInputError(f"unsupported dtype {np_dtype}; supported: {_supported_list()}")
    return name


def _named(dtype: Any, what: str) -> str:
    try:
        return dtype_name(dtype)
    except IBPInputError as exc:
        raise IBPInputError(f"{what}: {exc}") from None


def torch_dtype(name: str) -> torch.dtype:
    """Return the torch dtype for one of our dtype names."""
    return _TORCH_DTYPES[name]


def storage_dtype(name: str) -> np.dtype:
    """Return the little-endian NumPy dtype that holds an element's bits."""
    return SUPPORTED_DTYPES[name]


def as_table(data: Any, *, what: str = "input") -> tuple[np.ndarray, str]:
    """Return ``(array, dtype_name)``: a 2-D NumPy view of a table and its element type.

    Accepts NumPy arrays (memmaps included) and dense torch tensors. Nothing is copied unless
    the tensor lives on a GPU or its bits need a byte-order swap (done chunk by chunk later).

    Raises:
        IBPInputError: ``data`` (named ``what``) is not a non-empty 2-D table of a supported
            dtype, is a sparse tensor, or is a tensor whose data cannot be copied to the host
            (one on the ``meta`` device).
    """
    if isinstance(data, torch.Tensor):
        if data.layout != torch.strided:
            raise IBPInputError(
                f"{what}: holds a {data.layout} tensor; only dense tables are supported: pass "
                f"x.to_dense() (or save that)"
            )
        name = _named(data.dtype, what)
        tensor = data.detach()
        if tensor.device.type != "cpu":
            try:
                tensor = tensor.cpu()
            except NotImplementedError:  # a meta tensor has no data to copy
                raise IBPInputError(
                    f"{what}: a tensor on device '{tensor.device}' has no data the host can "
                    f"read; pass a CPU or CUDA tensor"
                ) from None
        if name == "bfloat16":
            tensor = tensor.view(torch.int16)
        array = tensor.numpy()
        if name == "bfloat16":
            array = array.view(np.uint16)
    elif isinstance(data, np.ndarray):
        array = data
        name = _named(array.dtype, what)
    else:
        raise IBPInputError(
            f"{what}: expected a NumPy array or torch tensor, got {type(data).__name__}"
        )
    if array.ndim != 2:
        raise IBPInputError(
            f"{what}: expected a 2-D table (rows x features), got shape {tuple(array.shape)}"
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise IBPInputError(f"{what}: the table is empty (shape {tuple(array.shape)})")
    return array, name


def row_bytes(num_cols: int, name: str) -> int:
    """Return the unpadded byte width of one row."""
    return num_cols * SUPPORTED_DTYPES[name].itemsize


def words_per_row(num_cols: int, name: str, word_bytes: int) -> int:
    """Return V, the number of T-byte words a row occupies after zero padding."""
    return -(-row_bytes(num_cols, name) // word_bytes)


def rows_to_words(rows: np.ndarray, name: str, word_bytes: int) -> np.ndarray:
    """View (or copy, when padding or a byte swap is needed) rows as ``(n, V)`` words.

    The input is never modified.
    """
    target = SUPPORTED_DTYPES[name]
    if rows.dtype != target:
        rows = rows.astype(target)
    rows = np.ascontiguousarray(rows)
    n = rows.shape[0]
    nbytes = rows.shape[1] * target.itemsize
    v = -(-nbytes // word_bytes)
    raw = rows.view(np.uint8).reshape(n, nbytes)
    if v * word_bytes != nbytes:
        padded = np.zeros((n, v * word_bytes), dtype=np.uint8)
        padded[:, :nbytes] = raw
        raw = padded
    return raw.view(WORD_DTYPES[word_bytes]).reshape(n, v)


def words_to_rows(words: np.ndarray, num_cols: int, name: str) -> np.ndarray:
    """Turn decoded ``(n, V)`` words back into ``(n, num_cols)`` elements (storage dtype)."""
    target = SUPPORTED_DTYPES[name]
    n = words.shape[0]
    nbytes = num_cols * target.itemsize
    raw = np.ascontiguousarray(words).view(np.uint8).reshape(n, words.shape[1] * words.itemsize)
    raw = raw[:, :nbytes]
    return np.ascontiguousarray(raw).view(target).reshape(n, num_cols)


def field_mask_word(
    name: str, word_bytes: int, word_index: np.ndarray, *, with_sign: bool = True
) -> np.ndarray:
    """Return, per word column, the mask of the exponent (and sign) bits of its elements.

    The sign bits are included when ``with_sign``. Zero for integer types, and for words of
    a float64 row that hold only mantissa bits.
    """
    wdtype = WORD_DTYPES[word_bytes]
    out = np.zeros(word_index.shape, dtype=wdtype)
    if name not in SIGN_EXPONENT_MASKS:
        return out
    item = SUPPORTED_DTYPES[name].itemsize
    field = SIGN_EXPONENT_MASKS[name]
    if not with_sign:
        field &= ~(1 << (8 * item - 1))
    if item <= word_bytes:
        m = 0
        for k in range(word_bytes // item):
            m |= field << (8 * item * k)
        out[:] = m
        return out
    # float64 in 4-byte words: the odd word of each element holds the high half.
    high = wdtype.type(field >> 32)
    out[word_index % 2 == 1] = high
    return out
