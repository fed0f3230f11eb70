"""A compressed feature table opened from an ``.ibp`` file, decoded on the CPU."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .codec import ALIGNMENTS, MAX_CODE_BITS, CodecError, CodecParams, decode
from .container import ChunkCheck, IBPHeader, load_section, read_elements, read_header, read_section
from .dtypes import SUPPORTED_DTYPES, WORD_DTYPES, storage_dtype, torch_dtype, words_to_rows
from .errors import IBPFormatError, IBPInputError, check_bool
from .indexing import RowIndex, normalize_index

#: Words decoded per batch: small enough for the temporaries to stay in cache.
DECODE_BATCH_WORDS = 1 << 16


def _fail(path: str, what: str) -> IBPFormatError:
    return IBPFormatError(f"{path}: {what}")


def _meta_int(header: IBPHeader, key: str, lo: int, hi: int) -> int:
    value = header.meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise _fail(
            header.path, f"header field '{key}' must be an integer in {lo}..{hi}, got {value!r}"
        )
    return value


def _check_section(header: IBPHeader, name: str, dtypes: tuple[str, ...], shape: tuple) -> None:
    info = header.sections.get(name)
    if info is None:
        raise _fail(header.path, f"missing section '{name}'")
    if info.dtype.str not in dtypes:
        raise _fail(
            header.path,
            f"section '{name}' has dtype {info.dtype.str}, expected {' or '.join(dtypes)}",
        )
    if info.shape != shape:
        raise _fail(
            header.path, f"section '{name}' has shape {list(info.shape)}, expected {list(shape)}"
        )


def _check_rows_span(header: IBPHeader, n: int, align: int, raw_len: int) -> None:
    """O(1) checks of the row section's size against N, and of the first and last offsets.

    They run before any section is read, so a file claiming far more rows than it holds (a
    sparse file, say) is refused before anything proportional to N is read or allocated.
    """
    p, nbytes = header.path, header.sections["rows"].nbytes
    lo, hi = -(-n * align // 8) * 8, -(-n * raw_len // 8) * 8
    if not lo <= nbytes <= hi:
        raise _fail(
            p,
            f"section 'rows' has {nbytes} bytes, but {n} rows of {align}..{raw_len} bytes "
            f"each need {lo}..{hi}",
        )
    first, last = (int(x) for x in read_elements(header, "offsets", [0, n]))
    if first != 0 or -(-last * align // 8) * 8 != nbytes:
        raise _fail(
            p,
            f"section 'offsets' spans bytes {first * align}..{last * align}, section 'rows' "
            f"has {nbytes} (rows padded to 8 bytes)",
        )


def _bounded(path: str, name: str, lo: int, hi: int) -> Callable[[], ChunkCheck]:
    """A chunk check refusing any value of section ``name`` outside ``lo..hi``."""

    def check(values: np.ndarray, start: int) -> None:
        bad = (values < lo) | (values > hi)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _fail(
                path,
                f"section '{name}' entry {start + i} is {int(values[i])}, expected {lo}..{hi}",
            )

    return lambda: check


def _offsets_check(path: str, align: int, raw_len: int) -> Callable[[], ChunkCheck]:
    """A chunk check of the offsets: they start at 0 and each row is align..raw_len bytes."""

    def fresh() -> ChunkCheck:
        prev: list[int] = []

        def check(values: np.ndarray, start: int) -> None:
            v = values.view(np.int64) if values.dtype.itemsize == 8 else values.astype(np.int64)
            if start == 0:
                if v[0] != 0:
                    raise _fail(path, f"section 'offsets' starts at {int(v[0])}, expected 0")
                units, first_row = np.diff(v), 0
            else:
                units, first_row = np.diff(v, prepend=prev[0]), start - 1
            bad = (units < 1) | (units > raw_len // align)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise _fail(
                    path,
                    f"section 'offsets' gives row {first_row + i} a stored length of "
                    f"{int(units[i]) * align} bytes, expected {align}..{raw_len}",
                )
            prev[:] = [int(v[-1])]

        return check

    return fresh


class IBPTable:
    """A read-only, losslessly compressed 2-D feature table.

    ``table[ids]`` decodes the selected rows on the CPU and returns a torch tensor with the
    original dtype, bit for bit. Open one with :func:`ibp_graph.open`.

    Example:
        >>> table = ibp_graph.open("cora.ibp")                      # doctest: +SKIP
        >>> x = table[torch.tensor([0, 5, 5, 2])]                   # doctest: +SKIP
        >>> table.ratio, table.shape                                # doctest: +SKIP

    Args:
        path: the ``.ibp`` file.
        mmap: map the row section instead of reading it into memory (default: True).
        verify: also check the checksum of the row section while opening, which reads the
            whole file (default: True). The header, the structure, every other section's
            checksum and every row offset are checked in either case, so ``verify=False``
            skips only the CRC-32 of the stored row bytes: damage there may then decode to
            wrong values (or raise `IBPFormatError` when it breaks a row's fields).

    Raises:
        IBPFormatError: The file is missing, not an ``.ibp`` file, malformed, truncated or
            corrupt; the message starts with the path and names what is wrong.
        IBPInputError: ``path`` is not a str, an ``os.PathLike`` or bytes, or ``mmap`` or
            ``verify`` is not a bool (a NumPy bool counts).
    """

    def __init__(self, path: str | os.PathLike[str], *, mmap: bool = True, verify: bool = True):
        mmap = check_bool("mmap", mmap)
        verify = check_bool("verify", verify)
        header = read_header(path)
        p = header.path
        meta = header.meta
        shape = meta.get("shape")
        if (
            not isinstance(shape, list)
            or len(shape) != 2
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape)
        ):
            raise _fail(p, f"header field 'shape' must be [rows, cols] >= 1, got {shape!r}")
        dtype_name = meta.get("dtype")
        if dtype_name not in SUPPORTED_DTYPES:
            raise _fail(p, f"header field 'dtype' {dtype_name!r} is not supported")
        word_bytes = _meta_int(header, "word_bytes", 4, 8)
        if word_bytes not in WORD_DTYPES:
            raise _fail(p, f"header field 'word_bytes' must be 4 or 8, got {word_bytes}")
        align = _meta_int(header, "align", min(ALIGNMENTS), max(ALIGNMENTS))
        if align not in ALIGNMENTS:
            raise _fail(p, f"header field 'align' must be one of {ALIGNMENTS}, got {align}")
        k = _meta_int(header, "num_clusters", 1, 255)
        n, d = shape
        row_bytes = d * SUPPORTED_DTYPES[dtype_name].itemsize
        v = -(-row_bytes // word_bytes)
        wd = WORD_DTYPES[word_bytes].str
        _check_section(header, "masks", (wd,), (k, v))
        _check_section(header, "code_bits", ("|u1",), (k, v))
        bv = header.sections.get("bitvals")
        e = bv.shape[2] if bv is not None and len(bv.shape) == 3 else 0
        if e not in [(1 << b) - 1 for b in range(1, MAX_CODE_BITS + 1)]:
            raise _fail(p, f"section 'bitvals' has {e} entries per column, expected 2**b - 1")
        _check_section(header, "bitvals", (wd,), (k, v, e))
        _check_section(header, "offsets", ("<u4", "<u8"), (n + 1,))
        if k > 1:
            _check_section(header, "cluster_ids", ("|u1",), (n,))
        rows_info = header.sections.get("rows")
        if rows_info is None:
            raise _fail(p, "missing section 'rows'")
        _check_section(header, "rows", ("|u1",), (rows_info.nbytes,))
        raw_len = -(-v * word_bytes // align) * align
        _check_rows_span(header, n, align, raw_len)

        # Everything but the row payload is always checked (checksums included), in bounded
        # chunks, before anything derived from it is allocated.
        max_bits = (e + 1).bit_length() - 1
        code_bits = read_section(header, "code_bits", check=_bounded(p, "code_bits", 1, max_bits))
        try:
            params = CodecParams(
                word_bytes=word_bytes,
                masks=read_section(header, "masks"),
                code_bits=code_bits,
                bitvals=read_section(header, "bitvals"),
            )
        except CodecError as exc:
            raise _fail(p, f"invalid codec parameters: {exc}") from None
        offsets = read_section(header, "offsets", check=_offsets_check(p, align, raw_len)).astype(
            np.int64
        )
        used = int(offsets[-1]) * align
        if -(-used // 8) * 8 != rows_info.nbytes:
            raise _fail(
                p,
                f"section 'offsets' spans bytes 0..{used}, section 'rows' has "
                f"{rows_info.nbytes} (rows padded to 8 bytes)",
            )
        cluster_ids = None
        if k > 1:
            cluster_ids = read_section(
                header, "cluster_ids", check=_bounded(p, "cluster_ids", 0, k - 1)
            )
        rows = load_section(header, "rows", mmap=mmap, verify=verify)
        self._header = header
        self._params = params
        self._offsets = offsets
        self._cluster_ids = cluster_ids
        self._rows = rows.view(np.uint64) if rows.size else np.zeros(1, dtype=np.uint64)
        self._rows_nbytes = rows_info.nbytes
        self._shape = (n, d)
        self._dtype_name = dtype_name
        self._align = align
        self._closed = False

    # -- description -------------------------------------------------------------------
    @property
    def path(self) -> str:
        """Path of the ``.ibp`` file."""
        return self._header.path

    @property
    def header(self) -> IBPHeader:
        """The validated file header."""
        return self._header

    @property
    def params(self) -> CodecParams:
        """The codec parameters (masks, code widths, dictionaries) per cluster."""
        return self._params

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)`` of the original table."""
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        """The original element type, as a torch dtype."""
        return torch_dtype(self._dtype_name)

    @property
    def dtype_name(self) -> str:
        """The original element type by name (``"float32"``, ``"bfloat16"``, ...)."""
        return self._dtype_name

    @property
    def word_bytes(self) -> int:
        """T, bytes per codec word."""
        return self._params.word_bytes

    @property
    def align(self) -> int:
        """Row alignment in bytes."""
        return self._align

    @property
    def num_clusters(self) -> int:
        """k, the number of mask clusters."""
        return self._params.num_clusters

    @property
    def offsets(self) -> np.ndarray:
        """Row ``i`` is stored at bytes ``offsets[i] * align`` up to ``offsets[i+1] * align``."""
        return self._offsets

    @property
    def cluster_ids(self) -> np.ndarray | None:
        """Cluster of each row (None when there is one cluster)."""
        return self._cluster_ids

    @property
    def rows_section(self) -> np.ndarray:
        """The stored rows as a read-only uint64 array (memory-mapped by default)."""
        return self._rows

    @property
    def stored_bytes(self) -> int:
        """Bytes of the row section (what host memory holds and the GPU reads)."""
        return self._rows_nbytes

    @functools.cached_property
    def stored_row_range(self) -> tuple[int, int]:
        """The shortest and the longest stored row, in bytes (every table has at least one row).

        Computed once from the offsets (a pass over them), then kept.
        """
        units = np.diff(self._offsets)
        if units.size == 0:
            return (0, 0)
        return (int(units.min()) * self._align, int(units.max()) * self._align)

    @property
    def raw_bytes(self) -> int:
        """Bytes of the original table."""
        n, d = self._shape
        return n * d * storage_dtype(self._dtype_name).itemsize

    @property
    def ratio(self) -> float:
        """Raw row bytes over stored row bytes (alignment included)."""
        return self.raw_bytes / max(self._rows_nbytes, 1)

    @property
    def stats(self) -> dict[str, Any]:
        """Compression statistics recorded when the file was written."""
        stats = self._header.meta.get("stats")
        return dict(stats) if isinstance(stats, dict) else {}

    def __len__(self) -> int:
        return self._shape[0]

    def __repr__(self) -> str:
        n, d = self._shape
        return (
            f"IBPTable('{self.path}', shape=({n}, {d}), dtype={self._dtype_name}, "
            f"ratio={self.ratio:.3f}, clusters={self.num_clusters})"
        )

    # -- decoding ----------------------------------------------------------------------
    def decode_words(self, ids: np.ndarray) -> np.ndarray:
        """Decode checked row ids to ``(n, V)`` codec words (the GPU kernels' reference).

        With Numba (a dependency) the rows are decoded by `ibp_graph.decode_cpu` in one
        compiled pass each, without the GIL, a large request's rows shared between
        ``torch.get_num_threads()`` threads; without it by the NumPy reference,
        `ibp_graph.codec.decode`, in batches of about `DECODE_BATCH_WORDS` words. Both give the
        same words, bit for bit.
        """
        if self._closed:
            raise IBPInputError(f"{self.path}: the table is closed")
        # Imported on first use, as the sampler's compiled hops are: importing Numba takes a
        # fraction of a second that `import ibp_graph` and GPU-only runs need not pay.
        from . import decode_cpu
        from .jit import compiled_call

        def decode_rows(run: Callable, part: np.ndarray) -> np.ndarray:
            starts = self._offsets[part] * self._align
            lengths = self._offsets[part + 1] * self._align - starts
            cl = None if self._cluster_ids is None else self._cluster_ids[part]
            try:
                return run(self._rows, starts, lengths, self._params, cl)
            except CodecError as exc:
                raise _fail(self.path, f"corrupt row data: {exc}") from None

        if decode_cpu.available():  # the whole request at once, into the array returned
            threads = torch.get_num_threads()
            ok, out = compiled_call(
                decode_rows, functools.partial(decode_cpu.decode, threads=threads), ids
            )
            if ok:
                return out
            # Numba could not compile the decoder: the reference below
        v = self._params.num_words
        per_batch = max(1, DECODE_BATCH_WORDS // v)
        out = np.empty((ids.shape[0], v), dtype=self._params.word_dtype)
        for s in range(0, ids.shape[0], per_batch):
            out[s : s + per_batch] = decode_rows(decode, ids[s : s + per_batch])
        return out

    def read(self, index: RowIndex = None) -> np.ndarray:
        """Decode rows to a NumPy array (``bfloat16`` comes back as its uint16 bits).

        Args:
            index: rows to decode, with torch's rules for the first dimension of a 2-D
                tensor, but for None: an int (negative counts from the end), a slice, a
                range, a list, an integer array (an ``np.matrix`` as the 2-D array it holds)
                or dense tensor of any shape (the result has its shape plus the column
                dimension) or a 1-D boolean mask. None (the default) reads every row, like
                ``:``, where torch and NumPy would add a dimension instead. A
                ``torch.uint8`` tensor is refused as ambiguous (torch reads it as a
                deprecated mask): pass ``index.bool()`` or ``index.long()``; so are
                floating-point, sparse and meta tensors and masked arrays.

        Raises:
            IBPIndexError: the index is not a row selection or an id is out of range.
            IBPFormatError: a stored row is corrupt (possible only with ``verify=False``).
        """
        ids, shape = normalize_index(index, self._shape[0])
        rows = words_to_rows(self.decode_words(ids), self._shape[1], self._dtype_name)
        return rows.reshape(*shape, self._shape[1])

    def __getitem__(self, index: RowIndex) -> torch.Tensor:
        """Decode rows to a CPU torch tensor of the original dtype.

        The index rules of :meth:`read`: ``table[None]`` is every row, and a ``torch.uint8``
        tensor is refused as ambiguous.
        """
        arr = self.read(index)
        tensor = torch.from_numpy(np.ascontiguousarray(arr))
        if self._dtype_name == "bfloat16":
            tensor = tensor.view(torch.int16).view(torch.bfloat16)
        return tensor

    # -- interchange -------------------------------------------------------------------
    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """The whole table, decoded in one pass: ``np.asarray(table)`` (`read` with no index).

        Without it NumPy would read the table as a sequence, decoding one row per call.

        Raises:
            ValueError: ``copy=False``: decoding always makes new memory, there is none to
                share.
            IBPInputError: a ``bfloat16`` table (NumPy has no such dtype: ``table[:]`` gives a
                bfloat16 tensor, `read` its uint16 bits), or the table is closed.
        """
        if copy is False:
            raise ValueError(
                f"{self.path}: an IBPTable holds compressed rows: converting it decodes them "
                "into new memory, which copy=False forbids"
            )
        if self._dtype_name == "bfloat16":
            raise IBPInputError(
                f"{self.path}: NumPy has no bfloat16; use table[:] for a bfloat16 tensor or "
                "table.read() for the values' uint16 bits"
            )
        rows = self.read()
        return rows if dtype is None else rows.astype(dtype, copy=False)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[Any, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """The whole table, decoded, as a DLPack capsule: ``torch.as_tensor(table)`` works.

        ``torch.as_tensor``, ``torch.tensor`` and ``torch.from_dlpack`` read an object that is
        not a tensor or an ndarray through this method (torch ignores ``__array__``; through
        ``len`` and ``table[i]`` they would fail on the row tensors). Every call decodes all
        the rows in one pass into a new CPU tensor of the original dtype, ``table[:]`` bit
        for bit, which the capsule hands over: nothing is shared with the table.

        Raises:
            BufferError: ``copy=False``: decoding always makes new memory, there is none to
                share.
            IBPInputError: the table is closed.
        """
        if copy is False:
            raise BufferError(
                f"{self.path}: an IBPTable holds compressed rows: exporting it decodes them "
                "into new memory, which copy=False forbids"
            )
        return self[:].__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(1, 0)``: DLPack's CPU device (``kDLCPU``), where `__dlpack__` decodes the rows."""
        return (1, 0)

    # -- lifetime ----------------------------------------------------------------------
    def close(self) -> None:
        """Drop the mapping of the file; the table cannot be read afterwards."""
        self._rows = np.zeros(1, dtype=np.uint64)
        self._closed = True

    def __enter__(self) -> IBPTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
