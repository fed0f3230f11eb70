"""The versioned, checksummed, mmap-able ``.ibp`` container.

Layout (every integer little-endian, every array C order with no strides)::

    bytes 0..7     magic b"IBPGRAPH"
    bytes 8..11    u32 format version (FORMAT_VERSION)
    bytes 12..15   u32 zlib.crc32 of the L header bytes
    bytes 16..23   u64 header length L
    bytes 24..24+L UTF-8 JSON header, padded with spaces so that 24 + L is a multiple of 4096
    sections       raw little-endian array bytes, each starting at a multiple of 4096, in header
                   order, zero padding between them; the file ends exactly where the last one ends

The JSON header is an object::

    {"format_version": 1,
     "meta": {...free-form JSON object supplied by the writer...},
     "sections": [{"name": "masks", "offset": 4096, "nbytes": 64, "dtype": "<u4",
                   "shape": [4, 4], "crc32": 123456789}, ...]}

``dtype`` is a canonical numpy dtype string (``"<u4"``, ``"|u1"``, ``"<f2"``, ...), ``crc32`` the
``zlib.crc32`` of the section bytes. The streamed section ``"rows"`` (``"|u1"``, one dimension) is
written last by :class:`IBPWriter`.

:func:`read_header` validates the whole header against the file size before any section data is
read; :func:`load_section` maps (or reads) one section and checks its checksum. Every problem with
a file raises :class:`~ibp_graph.errors.IBPFormatError` whose message starts with the file path.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import stat
import struct
import tempfile
import warnings
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any, NoReturn

import numpy as np

from .errors import IBPFormatError, IBPInputError

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_HEADER_BYTES",
    "ROWS_SECTION",
    "SECTION_ALIGN",
    "IBPHeader",
    "IBPWriter",
    "SectionInfo",
    "load_section",
    "named_os_error",
    "path_text",
    "read_header",
    "read_section",
    "resolve_output",
    "verify_checksums",
    "write_ibp",
]

MAGIC = b"IBPGRAPH"
"""The first 8 bytes of every ``.ibp`` file."""

FORMAT_VERSION = 1
"""The container format version written by this module and the newest one it reads."""

SECTION_ALIGN = 4096
"""Alignment in bytes of the end of the JSON header and of the start of every section."""

MAX_HEADER_BYTES = 100_000_000
"""Upper bound on the JSON header length L, checked before the header is read."""

ROWS_SECTION = "rows"
"""Name of the streamed section written last by :class:`IBPWriter`."""

_FIXED = struct.Struct("<8sIIQ")
_FIXED_SIZE = _FIXED.size
_CHUNK = 64 << 20
_SCAN_CHUNK = 4 << 20
_COPY_CHUNK = 8 << 20
_NUMERIC_KINDS = frozenset("biufc")
_MAX_NDIM = 32
_MAX_ARRAY_BYTES = 2**63 - 1
_SECTION_KEYS = ("name", "offset", "nbytes", "dtype", "shape", "crc32")


@dataclass(frozen=True)
class SectionInfo:
    """One section as described by the header.

    Attributes:
        name: Section name, unique within the file.
        offset: Byte offset of the section in the file, a multiple of :data:`SECTION_ALIGN`.
        nbytes: Section length in bytes, equal to ``prod(shape) * dtype.itemsize``.
        dtype: Element type, little-endian or byte-order free.
        shape: Array shape, C order.
        crc32: ``zlib.crc32`` of the section bytes.
    """

    name: str
    offset: int
    nbytes: int
    dtype: np.dtype
    shape: tuple[int, ...]
    crc32: int


@dataclass(frozen=True)
class IBPHeader:
    """The validated header of an ``.ibp`` file.

    Attributes:
        path: The file path, as given to :func:`read_header`.
        format_version: Container format version of the file.
        meta: Free-form JSON object stored by the writer; treat it as read-only.
        sections: Section descriptions in file order, keyed by name.
        file_size: File size in bytes when the header was read.
        data_start: First byte after the padded JSON header (``24 + L``).
    """

    path: str
    format_version: int
    meta: dict[str, Any]
    sections: dict[str, SectionInfo]
    file_size: int
    data_start: int


def _align(n: int) -> int:
    return -(-n // SECTION_ALIGN) * SECTION_ALIGN


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _byte_view(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


def _crc32(data: np.ndarray) -> int:
    crc = 0
    for start in range(0, data.size, _CHUNK):
        crc = zlib.crc32(data[start : start + _CHUNK], crc)
    return crc


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    names = {dict: "object", list: "array", str: "string", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _fail(path: str, message: str) -> NoReturn:
    raise IBPFormatError(f"{path}: {message}")


def _parse_dtype(path: str, where: str, value: object) -> np.dtype:
    if not isinstance(value, str):
        _fail(path, f"{where} dtype must be a string, got {type(value).__name__}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dtype = np.dtype(value)
    except Exception:
        _fail(path, f"{where} dtype {value!r} is not a numpy dtype")
    if dtype.kind not in _NUMERIC_KINDS:
        _fail(path, f"{where} dtype {value!r} is not numeric (bool, int, uint, float or complex)")
    if dtype.str != value or dtype.byteorder == ">":
        _fail(
            path,
            f"{where} dtype {value!r} is not a canonical little-endian dtype string "
            f"(expected {dtype.newbyteorder('<').str!r})",
        )
    return dtype


def _parse_section(path: str, index: int, entry: object) -> SectionInfo:
    where = f"section #{index}"
    if not isinstance(entry, dict):
        _fail(path, f"{where} is a JSON {_json_type(entry)}, expected an object")
    for key in _SECTION_KEYS:
        if key not in entry:
            _fail(path, f"{where} is missing required key {key!r}")
    name = entry["name"]
    if not isinstance(name, str) or not name:
        _fail(path, f"{where} name must be a non-empty string, got {name!r}")
    where = f"section {name!r}"
    for key in ("offset", "nbytes", "crc32"):
        if not _is_int(entry[key]):
            _fail(path, f"{where} {key} must be an integer, got {entry[key]!r}")
    offset, nbytes, crc = entry["offset"], entry["nbytes"], entry["crc32"]
    if offset < 0 or offset % SECTION_ALIGN:
        _fail(path, f"{where} offset {offset} is not a multiple of {SECTION_ALIGN}")
    if nbytes < 0:
        _fail(path, f"{where} nbytes {nbytes} is negative")
    if not 0 <= crc < 2**32:
        _fail(path, f"{where} crc32 {crc} is not an unsigned 32-bit integer")
    dtype = _parse_dtype(path, where, entry["dtype"])
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        _fail(path, f"{where} shape must be a list of non-negative integers, got {shape!r}")
    if len(shape) > _MAX_NDIM:
        _fail(path, f"{where} shape has {len(shape)} dimensions, at most {_MAX_NDIM} allowed")
    if math.prod(d for d in shape if d) * dtype.itemsize > _MAX_ARRAY_BYTES:
        _fail(path, f"{where} shape {shape} is too large for an array")
    expected = math.prod(shape) * dtype.itemsize
    if expected != nbytes:
        _fail(
            path,
            f"{where} nbytes {nbytes} does not match shape {shape} x itemsize {dtype.itemsize} "
            f"= {expected}",
        )
    return SectionInfo(name, offset, nbytes, dtype, tuple(shape), crc)


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"non-standard JSON constant {name}")


def _parse_json(path: str, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        _fail(
            path, f"header is not valid UTF-8 (byte 0x{raw[e.start]:02x} at header byte {e.start})"
        )
    try:
        obj = json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except (ValueError, RecursionError) as e:
        _fail(path, f"header is not valid JSON ({e})")
    if not isinstance(obj, dict):
        _fail(path, f"header is a JSON {_json_type(obj)}, expected an object")
    return obj


def path_text(name: str, path: object) -> str:
    """``path`` as a str: a str, an ``os.PathLike`` or bytes (decoded as ``os.fsdecode`` does).

    Raises:
        IBPInputError: it is none of these, e.g. ``"path must be a str, bytes or os.PathLike, got
            'int'"``.
    """
    if isinstance(path, (str, bytes, os.PathLike)):
        return os.fsdecode(path)
    raise IBPInputError(f"{name} must be a str, bytes or os.PathLike, got '{type(path).__name__}'")


def read_header(path: str | os.PathLike[str]) -> IBPHeader:
    """Reads and validates the header of an ``.ibp`` file without reading any section data.

    Checks the magic, format version, header length, JSON structure and every section entry
    (name, offset alignment, dtype, shape against nbytes, order, overlap and bounds), and that the
    last section ends exactly at the end of the file, which detects truncation.

    Args:
        path: The ``.ibp`` file (a str, an ``os.PathLike`` or bytes, see `path_text`).

    Returns:
        The validated header.

    Raises:
        IBPFormatError: The file is missing, not an ``.ibp`` file, from a newer format version,
            malformed or truncated. The message starts with ``path`` and names the bad field.
        IBPInputError: ``path`` is not a path.
    """
    path = path_text("path", path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        _fail(path, "no such file")
    except OSError as e:
        _fail(path, f"cannot access file ({e.strerror})")
    if not stat.S_ISREG(st.st_mode):
        _fail(path, "not a regular file")
    try:
        f = open(path, "rb")
    except OSError as e:
        _fail(path, f"cannot open file ({e.strerror})")
    with f:
        file_size = os.fstat(f.fileno()).st_size
        if file_size < _FIXED_SIZE:
            _fail(
                path,
                f"file is {file_size} bytes, too short for an .ibp header ({_FIXED_SIZE} bytes)",
            )
        magic, version, header_crc, header_len = _FIXED.unpack(f.read(_FIXED_SIZE))
        if magic != MAGIC:
            _fail(path, f"not an .ibp file (magic {magic!r} != {MAGIC!r})")
        if version == 0:
            _fail(path, "format version 0 is invalid")
        if version > FORMAT_VERSION:
            _fail(
                path,
                f"format version {version} is newer than this ibp-graph supports "
                f"({FORMAT_VERSION}); upgrade ibp-graph",
            )
        if header_len > MAX_HEADER_BYTES:
            _fail(path, f"header length {header_len} exceeds the limit of {MAX_HEADER_BYTES} bytes")
        data_start = _FIXED_SIZE + header_len
        if data_start > file_size:
            _fail(
                path,
                f"header length {header_len} runs past the end of the file "
                f"(header ends at byte {data_start}, file has {file_size} bytes)",
            )
        if data_start % SECTION_ALIGN:
            _fail(
                path,
                f"header length {header_len} does not pad the header to a multiple of "
                f"{SECTION_ALIGN} bytes",
            )
        raw = f.read(header_len)
    if len(raw) != header_len:
        _fail(path, f"file shrank while reading the header ({len(raw)} of {header_len} bytes)")
    if zlib.crc32(raw) != header_crc:
        _fail(
            path,
            f"header checksum mismatch (stored 0x{header_crc:08x}, computed "
            f"0x{zlib.crc32(raw):08x}); the file is corrupt",
        )

    obj = _parse_json(path, raw)
    for key in ("format_version", "meta", "sections"):
        if key not in obj:
            _fail(path, f"header is missing required key {key!r}")
    json_version = obj["format_version"]
    if not _is_int(json_version) or json_version != version:
        _fail(
            path,
            f"header format_version {json_version!r} does not match the file's format "
            f"version {version}",
        )
    meta = obj["meta"]
    if not isinstance(meta, dict):
        _fail(path, f"header meta is a JSON {_json_type(meta)}, expected an object")
    entries = obj["sections"]
    if not isinstance(entries, list):
        _fail(path, f"header sections is a JSON {_json_type(entries)}, expected an array")

    sections: dict[str, SectionInfo] = {}
    end, prev = data_start, None
    for index, entry in enumerate(entries):
        info = _parse_section(path, index, entry)
        if info.name in sections:
            _fail(path, f"section name {info.name!r} appears more than once")
        if info.offset < end:
            if prev is None:
                _fail(
                    path,
                    f"section {info.name!r} offset {info.offset} lies inside the header "
                    f"(data starts at byte {data_start})",
                )
            _fail(
                path,
                f"section {info.name!r} starts at byte {info.offset}, before section {prev!r} "
                f"ends at byte {end}; sections overlap or are out of order",
            )
        end = info.offset + info.nbytes
        if end > file_size:
            _fail(path, f"section {info.name!r} ends at byte {end}, file has {file_size} bytes")
        sections[info.name] = info
        prev = info.name
    if end != file_size:
        what = f"the last section {prev!r}" if prev is not None else "the header"
        _fail(
            path,
            f"file has {file_size} bytes but {what} ends at byte {end} "
            f"({file_size - end} bytes of trailing data)",
        )
    return IBPHeader(path, version, meta, sections, file_size, data_start)


def _open_checked(header: IBPHeader) -> IO[bytes]:
    path = header.path
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        _fail(path, "no such file")
    except OSError as e:
        _fail(path, f"cannot open file ({e.strerror})")
    size = os.fstat(f.fileno()).st_size
    if size != header.file_size:
        f.close()
        _fail(
            path,
            f"file changed since its header was read (was {header.file_size} bytes, now {size})",
        )
    return f


def _read_into(path: str, f: IO[bytes], info: SectionInfo) -> np.ndarray:
    out = np.empty(info.nbytes, dtype=np.uint8)
    view = memoryview(out)
    f.seek(info.offset)
    pos = 0
    while pos < info.nbytes:
        n = f.readinto(view[pos : pos + _CHUNK])
        if not n:
            _fail(path, f"section {info.name!r} ended early at byte {info.offset + pos}")
        pos += n
    return out


def _section_info(header: IBPHeader, name: str) -> SectionInfo:
    """The header's entry for section ``name``.

    Raises:
        IBPFormatError: no section has this name.
    """
    info = header.sections.get(name)
    if info is None:
        names = ", ".join(repr(n) for n in header.sections) or "none"
        _fail(header.path, f"no section {name!r} (sections present: {names})")
    return info


def load_section(
    header: IBPHeader, name: str, *, mmap: bool = True, verify: bool = True
) -> np.ndarray:
    """Returns one section of an ``.ibp`` file as an array of its dtype and shape.

    Args:
        header: The header returned by :func:`read_header`.
        name: Section name.
        mmap: If true, return a read-only ``np.memmap`` (a read-only empty array for a zero-byte
            section); otherwise read the section into a fresh writable in-memory array.
        verify: If true, check the section's CRC-32, reading it in 64 MiB chunks.

    Returns:
        The section array, little-endian, C order.

    Raises:
        IBPFormatError: No section has this name, the file changed since the header was read, or
            the checksum does not match.
    """
    path = header.path
    info = _section_info(header, name)
    with _open_checked(header) as f:
        if info.nbytes == 0:
            arr = np.empty(info.shape, dtype=info.dtype)
            arr.flags.writeable = not mmap
            raw = _byte_view(arr)
        elif mmap:
            arr = np.memmap(f, dtype=info.dtype, mode="r", offset=info.offset, shape=info.shape)
            raw = _byte_view(arr)
        else:
            raw = _read_into(path, f, info)
            arr = raw.view(info.dtype).reshape(info.shape)
    if verify:
        _check_crc(path, info, _crc32(raw), verify)
    return arr


ChunkCheck = Callable[[np.ndarray, int], None]
"""Called with each chunk of a section's elements (flat) and the index of its first element."""


def _scan(
    path: str,
    f: IO[bytes],
    info: SectionInfo,
    out: np.ndarray | None,
    check: ChunkCheck | None,
) -> int:
    """Reads a section chunk by chunk into ``out`` (or a small scratch buffer) and checks it.

    Returns the CRC-32 of the bytes read. Memory use is bounded by the chunk size when ``out``
    is None, whatever the section's size.
    """
    step = _SCAN_CHUNK - _SCAN_CHUNK % info.dtype.itemsize
    scratch = np.empty(min(step, info.nbytes), dtype=np.uint8) if out is None else None
    f.seek(info.offset)
    crc, pos = 0, 0
    while pos < info.nbytes:
        n = min(step, info.nbytes - pos)
        chunk = out[pos : pos + n] if out is not None else scratch[:n]
        got = f.readinto(memoryview(chunk))
        while got and got < n:
            more = f.readinto(memoryview(chunk[got:]))
            if not more:
                break
            got += more
        if got != n:
            _fail(path, f"section {info.name!r} ended early at byte {info.offset + pos + got}")
        crc = zlib.crc32(chunk, crc)
        if check is not None:
            check(chunk.view(info.dtype), pos // info.dtype.itemsize)
        pos += n
    return crc


def read_section(
    header: IBPHeader,
    name: str,
    *,
    verify: bool = True,
    check: Callable[[], ChunkCheck] | None = None,
) -> np.ndarray:
    """Reads one section into memory, validating it in bounded chunks before allocating it.

    A section larger than one chunk (4 MiB) is first read through a small scratch buffer, its
    values checked by ``check`` and its checksum computed; only then is the full array
    allocated and read, and checked again. A file that claims a huge section (a sparse file,
    say) is therefore refused at its first bad chunk, without a large allocation.

    Args:
        header: The header returned by :func:`read_header`.
        name: Section name.
        verify: Check the section's CRC-32 (default: True).
        check: A factory returning a fresh :data:`ChunkCheck` for each pass over the section;
            the check raises :class:`~ibp_graph.errors.IBPFormatError` on a bad value
            (default: None, no value check).

    Returns:
        A writable in-memory array of the section's dtype and shape.

    Raises:
        IBPFormatError: No section has this name, the file changed since the header was read,
            a value is refused by ``check``, or the checksum does not match.
    """
    path = header.path
    info = _section_info(header, name)
    with _open_checked(header) as f:
        if info.nbytes > _SCAN_CHUNK:  # a bounded first pass before the big allocation
            crc = _scan(path, f, info, None, check() if check is not None else None)
            _check_crc(path, info, crc, verify)
        out = np.empty(info.nbytes, dtype=np.uint8)
        crc = _scan(path, f, info, out, check() if check is not None else None)
        _check_crc(path, info, crc, verify)
    return out.view(info.dtype).reshape(info.shape)


def read_elements(header: IBPHeader, name: str, indices: list[int]) -> np.ndarray:
    """Reads a few elements of a one-dimensional section, unverified (for early size checks).

    Args:
        header: The header returned by :func:`read_header`.
        name: Section name; the section must be one-dimensional.
        indices: Element positions, each in ``0..len-1``.

    Returns:
        The elements, in the section's dtype.

    Raises:
        IBPFormatError: No such section, or the file changed since the header was read.
        IBPInputError: The section is not one-dimensional or an index is out of range.
    """
    info = _section_info(header, name)
    if len(info.shape) != 1 or not all(0 <= i < info.shape[0] for i in indices):
        raise IBPInputError(f"elements {indices} do not lie in section {name!r} {info.shape}")
    size = info.dtype.itemsize
    out = np.empty(len(indices), dtype=info.dtype)
    with _open_checked(header) as f:
        for j, i in enumerate(indices):
            f.seek(info.offset + i * size)
            data = f.read(size)
            if len(data) != size:
                _fail(header.path, f"section {name!r} ended early at element {i}")
            out[j] = np.frombuffer(data, dtype=info.dtype)[0]
    return out


def _check_crc(path: str, info: SectionInfo, computed: int, verify: bool) -> None:
    if verify and computed != info.crc32:
        _fail(
            path,
            f"section {info.name!r} checksum mismatch (stored 0x{info.crc32:08x}, "
            f"computed 0x{computed:08x}); the file is corrupt",
        )


def verify_checksums(header: IBPHeader) -> None:
    """Checks the CRC-32 of every section of an ``.ibp`` file.

    Args:
        header: The header returned by :func:`read_header`.

    Raises:
        IBPFormatError: A section's checksum does not match; the message names the section.
    """
    for name in header.sections:
        load_section(header, name, mmap=True, verify=True)


def _as_section_array(name: str, arr: object) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise IBPInputError(f"section {name!r} must be a numpy array, got {type(arr).__name__}")
    if arr.dtype.kind not in _NUMERIC_KINDS:
        raise IBPInputError(
            f"section {name!r} has dtype {arr.dtype}, expected bool, int, uint, float or complex"
        )
    if arr.ndim > _MAX_NDIM:
        raise IBPInputError(f"section {name!r} has {arr.ndim} dimensions, at most {_MAX_NDIM}")
    return arr.astype(arr.dtype.newbyteorder("<"), order="C", copy=False)


class IBPWriter:
    """Writes an ``.ibp`` file: a streamed ``"rows"`` section plus small array sections.

    Rows are appended with :meth:`write_rows` to a hidden temporary file beside ``path``;
    :meth:`finish` then writes the complete file to another hidden temporary file and renames
    it onto ``path``, so ``path`` is never left half-written. Temporary files are removed on
    success, on error and when the ``with`` block exits. Leaving the ``with`` block without
    calling :meth:`finish` writes nothing.

    Only a regular file, or nothing, may stand at ``path`` (a symbolic link is followed and its
    target replaced): a device, a FIFO or a directory there is refused with
    :class:`~ibp_graph.errors.IBPInputError` when the writer is created, and checked again
    just before the rename. An ``OSError`` while writing (a full disk) names ``path``, never a
    temporary file.

    Example:
        >>> with IBPWriter("features.ibp") as w:  # doctest: +SKIP
        ...     for chunk in chunks:
        ...         w.write_rows(chunk)
        ...     w.finish({"T": 8}, {"masks": masks, "offsets": offsets})
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._target = resolve_output(self.path)
        directory, base = os.path.split(self._target)
        self._dir, self._base = directory, base
        try:
            fd, self._rows_path = tempfile.mkstemp(
                prefix=f".{base}.", suffix=".rows.tmp", dir=directory
            )
        except OSError as e:
            raise named_os_error(e, self.path) from None
        self._rows: IO[bytes] | None = os.fdopen(fd, "w+b")
        self._rows_crc = 0
        self._rows_nbytes = 0
        self._finished = False

    @property
    def rows_nbytes(self) -> int:
        """Number of row bytes written so far."""
        return self._rows_nbytes

    def __enter__(self) -> IBPWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> IO[bytes]:
        if self._rows is None:
            state = "finished" if self._finished else "closed"
            raise IBPInputError(f"{self.path}: IBPWriter is already {state}")
        return self._rows

    def write_rows(self, buf: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Appends bytes to the ``"rows"`` section.

        Args:
            buf: A bytes-like object or a ``uint8`` numpy array of any shape and size.

        Raises:
            IBPInputError: ``buf`` is a numpy array of another dtype or is not contiguous, or the
                writer is already finished or closed.
        """
        rows = self._check_open()
        if isinstance(buf, np.ndarray):
            if buf.dtype != np.uint8:
                raise IBPInputError(
                    f"write_rows expects uint8 data, got dtype {buf.dtype}; "
                    "pass arr.view(np.uint8) to write raw bytes"
                )
            data = memoryview(_byte_view(buf))
        else:
            try:
                data = memoryview(buf).cast("B")
            except (TypeError, ValueError) as e:
                raise IBPInputError(f"write_rows expects contiguous bytes-like data ({e})") from e
        try:
            rows.write(data)
        except OSError as e:
            raise named_os_error(e, self.path) from None
        self._rows_crc = zlib.crc32(data, self._rows_crc)
        self._rows_nbytes += data.nbytes

    def finish(self, meta: Mapping[str, Any], sections: Mapping[str, np.ndarray]) -> None:
        """Writes the complete file to ``path`` and closes the writer.

        Args:
            meta: Free-form JSON-serializable object stored as the header's ``"meta"``.
            sections: Small sections to store before ``"rows"``, in this order. Arrays are
                stored C-contiguous and little-endian; the inputs are not modified.

        Raises:
            IBPInputError: ``meta`` is not a JSON-serializable mapping, a section name is not a
                non-empty string or is ``"rows"``, or a section is not a numeric numpy array.
            OSError: Writing or renaming the file failed; ``path`` is left untouched.
        """
        rows = self._check_open()
        if not isinstance(meta, Mapping):
            raise IBPInputError(f"meta must be a mapping, got {type(meta).__name__}")
        arrays: dict[str, np.ndarray] = {}
        for name, arr in sections.items():
            if not isinstance(name, str) or not name:
                raise IBPInputError(f"section names must be non-empty strings, got {name!r}")
            if name == ROWS_SECTION:
                raise IBPInputError(f"section name {ROWS_SECTION!r} is reserved for write_rows")
            arrays[name] = _as_section_array(name, arr)

        entries = [
            {
                "name": name,
                "offset": 0,
                "nbytes": arr.nbytes,
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "crc32": _crc32(_byte_view(arr)),
            }
            for name, arr in arrays.items()
        ]
        entries.append(
            {
                "name": ROWS_SECTION,
                "offset": 0,
                "nbytes": self._rows_nbytes,
                "dtype": np.dtype(np.uint8).str,
                "shape": [self._rows_nbytes],
                "crc32": self._rows_crc,
            }
        )
        header, data_start = self._layout(dict(meta), entries)

        partial = os.path.join(self._dir, f".{self._base}.{secrets.token_hex(6)}.partial.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        try:
            rows.flush()
            rows.seek(0)
            fd = os.open(partial, flags, 0o666)  # a data file: rw for whom the umask allows
        except OSError as e:
            raise named_os_error(e, self.path) from None
        try:
            with os.fdopen(fd, "wb") as out:
                fixed = (MAGIC, FORMAT_VERSION, zlib.crc32(header), data_start - _FIXED_SIZE)
                out.write(_FIXED.pack(*fixed))
                out.write(header)
                for entry in entries:
                    out.write(b"\0" * (entry["offset"] - out.tell()))
                    if entry["name"] == ROWS_SECTION:
                        shutil.copyfileobj(rows, out, _COPY_CHUNK)
                    else:
                        out.write(memoryview(_byte_view(arrays[entry["name"]])))
                end = entries[-1]["offset"] + entries[-1]["nbytes"]
                if out.tell() != end:
                    raise OSError(f"{partial}: wrote {out.tell()} bytes, expected {end}")
                out.flush()
                os.fsync(out.fileno())
            resolve_output(self.path)  # still nothing but a regular file (or nothing) there
            os.replace(partial, self._target)
        except OSError as e:
            _remove(partial)
            raise named_os_error(e, self.path) from None
        except BaseException:
            _remove(partial)
            raise
        self._finished = True
        self.close()

    @staticmethod
    def _layout(meta: dict[str, Any], entries: list[dict[str, Any]]) -> tuple[bytes, int]:
        data_start = SECTION_ALIGN
        while True:
            pos = data_start
            for entry in entries:
                entry["offset"] = _align(pos)
                pos = entry["offset"] + entry["nbytes"]
            obj = {"format_version": FORMAT_VERSION, "meta": meta, "sections": entries}
            try:
                text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            except (TypeError, ValueError, RecursionError) as e:
                raise IBPInputError(f"meta is not JSON-serializable ({e})") from e
            raw = text.encode("utf-8")
            needed = _align(_FIXED_SIZE + len(raw))
            if needed - _FIXED_SIZE > MAX_HEADER_BYTES:
                raise IBPInputError(
                    f"header is {len(raw)} bytes, over the limit of {MAX_HEADER_BYTES} bytes"
                )
            if needed <= data_start:
                return raw + b" " * (data_start - _FIXED_SIZE - len(raw)), data_start
            data_start = needed

    def close(self) -> None:
        """Discards the temporary rows file; the writer cannot be used afterwards."""
        if self._rows is not None:
            rows, self._rows = self._rows, None
            try:
                with contextlib.suppress(OSError):  # unflushed bytes of a discarded file
                    rows.close()
            finally:
                _remove(self._rows_path)


def _file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def resolve_output(path: str | os.PathLike[str]) -> str:
    """Returns the absolute path a new file for ``path`` is renamed onto, after checking it.

    A symbolic link is followed, so the link stays and its target is replaced. Only a regular
    file, or nothing, may stand at the final path: replacing a device, a FIFO, a socket or a
    directory with a regular file would destroy something that is not ours.

    Args:
        path: The output path as the user gave it (a str, an ``os.PathLike`` or bytes).

    Returns:
        The absolute, symlink-free path to write.

    Raises:
        IBPInputError: ``path`` is not a path or names a directory (it ends in a separator,
            ``.`` or ``..``), something other than a regular file exists there, or the folder
            that would hold it does not exist or is not a folder. The message names ``path``.
    """
    text = path_text("path", path)
    if os.path.basename(text) in ("", ".", ".."):
        raise IBPInputError(f"{text}: names a directory; give a file name")
    target = os.path.realpath(text)
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        what = "is not a directory" if os.path.exists(parent) else "does not exist"
        raise IBPInputError(f"{text}: {parent} {what}")
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise IBPInputError(f"{text}: cannot check the output path ({e.strerror})") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise IBPInputError(
            f"{text}: exists and is {_file_kind(mode)}; only a regular file may be replaced"
        )
    return target


def named_os_error(exc: OSError, path: str) -> OSError:
    """The same error naming ``path`` (what the user asked for) instead of a temporary file."""
    return OSError(exc.errno, f"cannot write the output ({exc.strerror or exc})", path)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def write_ibp(
    path: str | os.PathLike[str],
    meta: Mapping[str, Any],
    sections: Mapping[str, np.ndarray],
    rows: np.ndarray,
) -> None:
    """Writes a complete ``.ibp`` file in one call.

    Args:
        path: Destination file; replaced atomically.
        meta: Free-form JSON-serializable object stored as the header's ``"meta"``.
        sections: Small sections stored before ``"rows"``, in this order.
        rows: ``uint8`` array stored as the ``"rows"`` section.

    Raises:
        IBPInputError: An argument is invalid (see :meth:`IBPWriter.finish`), or something
            other than a regular file stands at ``path``.
        OSError: Writing the file failed; ``path`` is left untouched.
    """
    with IBPWriter(path) as writer:
        writer.write_rows(rows)
        writer.finish(meta, sections)
