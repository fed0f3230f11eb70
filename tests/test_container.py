import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ibp_graph.container import (
    FORMAT_VERSION,
    MAGIC,
    SECTION_ALIGN,
    IBPWriter,
    load_section,
    read_header,
    verify_checksums,
    write_ibp,
)
from ibp_graph.errors import IBPError, IBPFormatError, IBPInputError


def _le_bytes(arr: np.ndarray) -> bytes:
    return arr.astype(arr.dtype.newbyteorder("<")).tobytes()


def _small_file(path: Path) -> dict[str, np.ndarray]:
    sections = {
        "masks": np.arange(12, dtype=np.uint32).reshape(3, 4),
        "bitvals": np.linspace(-1, 1, 7, dtype=np.float16),
    }
    write_ibp(path, {"T": 8, "k": 3}, sections, np.arange(100, dtype=np.uint8))
    return sections


def _pad_header(raw: bytes) -> bytes:
    total = -(-(24 + len(raw)) // SECTION_ALIGN) * SECTION_ALIGN
    return raw + b" " * (total - 24 - len(raw))


def _write_raw(
    path: Path,
    header: object,
    data: bytes = b"",
    *,
    magic: bytes = MAGIC,
    version: int = FORMAT_VERSION,
    header_crc: int | None = None,
    header_len: int | None = None,
) -> None:
    """Writes a file by hand; data starts at byte 4096 when the header fits in one page."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    raw = _pad_header(raw)
    length = len(raw) if header_len is None else header_len
    crc = zlib.crc32(raw) if header_crc is None else header_crc
    path.write_bytes(struct.pack("<8sIIQ", magic, version, crc, length) + raw + data)


def _entry(name: str, offset: int, data: bytes, dtype: str = "|u1", shape=None) -> dict:
    itemsize = np.dtype(dtype).itemsize
    return {
        "name": name,
        "offset": offset,
        "nbytes": len(data),
        "dtype": dtype,
        "shape": [len(data) // itemsize] if shape is None else shape,
        "crc32": zlib.crc32(data),
    }


def _header(*entries: dict, meta: object = None) -> dict:
    return {"format_version": 1, "meta": {} if meta is None else meta, "sections": list(entries)}


def _fails(path: Path, *words: str) -> pytest.ExceptionInfo:
    with pytest.raises(IBPFormatError) as info:
        read_header(path)
    _check_message(info, path, *words)
    return info


def _check_message(info: pytest.ExceptionInfo, path: Path, *words: str) -> None:
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    for word in words:
        assert word in message, message


# Round trips and layout


def test_round_trip_sections_and_streamed_rows(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 256, size=5 * 2**20 + 123, dtype=np.uint8)
    sections = {
        "masks": rng.integers(0, 2**32, size=(17, 3), dtype=np.uint32),
        "bitvals": rng.standard_normal(1000).astype(">f2"),
        "empty": np.zeros((0, 5), dtype=np.int64),
        "scalar": np.array(3.5),
        "flags": rng.integers(0, 2, size=33).astype(bool),
        "offsets": np.arange(4097, dtype=np.int64)[::2],
    }
    meta = {"T": 8, "k": 3, "stats": {"ratio": 2.5, "name": "ñ"}, "list": [1, None, True]}
    with IBPWriter(path) as w:
        w.write_rows(rows[:1000].tobytes())
        w.write_rows(bytearray(rows[1000:3000]))
        w.write_rows(memoryview(rows[3000 : 2**20]))
        w.write_rows(rows[2**20 : 2**20 + 4 * 2**20].reshape(1024, -1))
        w.write_rows(rows[2**20 + 4 * 2**20 :])
        w.write_rows(b"")
        assert w.rows_nbytes == rows.size
        w.finish(meta, sections)

    header = read_header(path)
    assert header.path == str(path)
    assert header.format_version == FORMAT_VERSION
    assert header.meta == meta
    assert list(header.sections) == [*sections, "rows"]
    assert header.data_start % SECTION_ALIGN == 0
    assert header.file_size == os.path.getsize(path)
    for info in header.sections.values():
        assert info.offset % SECTION_ALIGN == 0
        assert info.offset >= header.data_start
    last = header.sections["rows"]
    assert last.offset + last.nbytes == header.file_size
    verify_checksums(header)

    for name, expected in [*sections.items(), ("rows", rows)]:
        mapped = load_section(header, name)
        read = load_section(header, name, mmap=False)
        for arr in (mapped, read):
            assert arr.shape == expected.shape
            assert arr.dtype == expected.dtype.newbyteorder("<")
            assert arr.dtype.str[0] in "<|"
            assert arr.tobytes() == _le_bytes(expected)
        assert not mapped.flags.writeable
        assert read.flags.writeable
        if expected.size:
            assert isinstance(mapped, np.memmap)
            assert not isinstance(read, np.memmap)


def test_empty_rows_and_no_sections(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    write_ibp(path, {}, {}, np.zeros(0, dtype=np.uint8))
    header = read_header(path)
    assert list(header.sections) == ["rows"]
    assert header.file_size == header.sections["rows"].offset == SECTION_ALIGN
    rows = load_section(header, "rows")
    assert rows.shape == (0,) and rows.dtype == np.uint8
    assert load_section(header, "rows", mmap=False).shape == (0,)
    verify_checksums(header)


def test_golden_bytes(tmp_path: Path) -> None:
    path = tmp_path / "g.ibp"
    write_ibp(path, {"T": 8}, {"a": np.array([1, 2], dtype="<u2")}, np.array([7, 8, 9], np.uint8))
    data = path.read_bytes()
    assert data[:8] == b"IBPGRAPH"
    assert data[8:12] == b"\x01\x00\x00\x00"
    assert data[12:16] == zlib.crc32(data[24:4096]).to_bytes(4, "little")
    assert data[16:24] == (4096 - 24).to_bytes(8, "little")
    crc_a = zlib.crc32(b"\x01\x00\x02\x00")
    crc_rows = zlib.crc32(b"\x07\x08\x09")
    expected_json = (
        '{"format_version":1,"meta":{"T":8},"sections":['
        f'{{"name":"a","offset":4096,"nbytes":4,"dtype":"<u2","shape":[2],"crc32":{crc_a}}},'
        f'{{"name":"rows","offset":8192,"nbytes":3,"dtype":"|u1","shape":[3],"crc32":{crc_rows}}}'
        "]}"
    ).encode()
    assert data[24:4096] == expected_json + b" " * (4096 - 24 - len(expected_json))
    assert data[4096:8192] == b"\x01\x00\x02\x00" + bytes(4092)
    assert data[8192:] == b"\x07\x08\x09"


def test_large_header_pushes_sections_to_later_pages(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    meta = {"blob": "x" * 10_000}
    write_ibp(path, meta, {"a": np.ones(3, np.int32)}, np.ones(5, np.uint8))
    header = read_header(path)
    assert header.meta == meta
    assert header.data_start == 3 * SECTION_ALIGN
    assert header.sections["a"].offset == 3 * SECTION_ALIGN
    assert int.from_bytes(path.read_bytes()[16:24], "little") == 3 * SECTION_ALIGN - 24


def test_writer_does_not_modify_inputs(tmp_path: Path) -> None:
    big_endian = np.arange(10, dtype=">u4")
    strided = np.arange(40, dtype=np.float64).reshape(5, 8)[:, ::3]
    fortran = np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    rows = np.arange(50, dtype=np.uint8)[::2]
    originals = [a.copy() for a in (big_endian, strided, fortran, rows)]
    meta = {"x": [1, 2]}
    write_ibp(tmp_path / "x.ibp", meta, {"b": big_endian, "s": strided, "f": fortran}, rows)
    for before, after in zip(originals, (big_endian, strided, fortran, rows), strict=True):
        assert after.dtype == before.dtype
        assert np.array_equal(after, before)
    assert big_endian.dtype.byteorder == ">"
    assert not strided.flags.c_contiguous
    assert fortran.flags.f_contiguous
    assert meta == {"x": [1, 2]}
    header = read_header(tmp_path / "x.ibp")
    assert np.array_equal(load_section(header, "s"), strided)
    assert np.array_equal(load_section(header, "f"), fortran)
    assert np.array_equal(load_section(header, "rows"), rows)


def test_temp_files_are_hidden_and_removed_on_success(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    with IBPWriter(path) as w:
        w.write_rows(b"abc")
        temps = os.listdir(tmp_path)
        assert len(temps) == 1
        assert temps[0].startswith(".") and temps[0].endswith(".tmp")
        w.finish({}, {"a": np.zeros(3)})
        assert os.listdir(tmp_path) == ["x.ibp"]
    assert os.listdir(tmp_path) == ["x.ibp"]


def test_temp_files_removed_after_exception_in_with_block(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    with pytest.raises(RuntimeError, match="boom"):
        with IBPWriter(path) as w:
            w.write_rows(b"abc" * 1000)
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_failed_finish_leaves_existing_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _small_file(path)
    before = path.read_bytes()
    with pytest.raises(IBPInputError, match="JSON"):
        with IBPWriter(path) as w:
            w.write_rows(b"new rows")
            w.finish({"bad": object()}, {})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["x.ibp"]


def test_rewrite_replaces_file(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _small_file(path)
    write_ibp(path, {"v": 2}, {}, np.ones(3, np.uint8))
    header = read_header(path)
    assert header.meta == {"v": 2}
    assert list(header.sections) == ["rows"]


def test_exit_without_finish_writes_nothing(tmp_path: Path) -> None:
    with IBPWriter(tmp_path / "x.ibp") as w:
        w.write_rows(b"abc")
    assert os.listdir(tmp_path) == []


# Writer input errors


@pytest.mark.parametrize(
    ("meta", "sections", "word"),
    [
        ({}, {"rows": np.zeros(3, np.uint8)}, "reserved"),
        ({}, {"": np.zeros(3)}, "non-empty"),
        ({}, {"a": np.array([None], dtype=object)}, "dtype"),
        ({}, {"a": np.array(["x"])}, "dtype"),
        ({}, {"a": [1, 2, 3]}, "numpy array"),
        ({"x": object()}, {}, "JSON"),
        ({"x": float("nan")}, {}, "JSON"),
        ([1, 2], {}, "mapping"),
    ],
)
def test_finish_rejects_bad_input(tmp_path: Path, meta, sections, word: str) -> None:
    with IBPWriter(tmp_path / "x.ibp") as w:
        with pytest.raises(IBPInputError, match=word):
            w.finish(meta, sections)
    assert os.listdir(tmp_path) == []


def test_write_rows_rejects_bad_input(tmp_path: Path) -> None:
    with IBPWriter(tmp_path / "x.ibp") as w:
        with pytest.raises(IBPInputError, match="uint8"):
            w.write_rows(np.zeros(3, np.float32))
        with pytest.raises(IBPInputError, match="bytes-like"):
            w.write_rows("text")  # type: ignore[arg-type]
        w.finish({}, {})
        with pytest.raises(IBPInputError, match="finished"):
            w.write_rows(b"x")
        with pytest.raises(IBPInputError, match="finished"):
            w.finish({}, {})


def test_error_hierarchy() -> None:
    assert issubclass(IBPFormatError, IBPError) and issubclass(IBPFormatError, ValueError)
    assert issubclass(IBPInputError, IBPError) and issubclass(IBPInputError, ValueError)


# Reader failures: file level


def test_missing_file(tmp_path: Path) -> None:
    _fails(tmp_path / "nope.ibp", "no such file")


def test_directory(tmp_path: Path) -> None:
    _fails(tmp_path, "regular file")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    path.write_bytes(b"")
    _fails(path, "file is 0 bytes", "too short")


@pytest.mark.parametrize(
    ("cut", "words"),
    [
        (10, ("file is 10 bytes", "too short", "(24 bytes)")),
        (23, ("too short",)),
        (24, ("header length", "past the end")),
        (500, ("header length", "past the end")),
        (4095, ("past the end",)),
        (4096, ("section 'masks' ends at byte", "file has 4096 bytes")),
        (4100, ("section 'masks' ends at byte 4144, file has 4100 bytes",)),
        (8192 + 5, ("section 'bitvals' ends at byte",)),
        (12288, ("section 'rows' ends at byte 12388, file has 12288 bytes",)),
        (12388 - 1, ("section 'rows' ends at byte 12388, file has 12387 bytes",)),
    ],
)
def test_truncated_file(tmp_path: Path, cut: int, words: tuple[str, ...]) -> None:
    path = tmp_path / "x.ibp"
    _small_file(path)
    data = path.read_bytes()
    assert len(data) == 12388
    path.write_bytes(data[:cut])
    _fails(path, *words)


def test_trailing_data(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _small_file(path)
    with open(path, "ab") as f:
        f.write(b"\0")
    _fails(path, "trailing", "'rows'")


def test_wrong_magic(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, _header(), magic=b"SAFETENS")
    _fails(path, "not an .ibp file", "magic b'SAFETENS'")


def test_future_version(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, _header(), version=7)
    _fails(path, "format version 7 is newer", "(1)", "upgrade")


def test_version_zero(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, _header(), version=0)
    _fails(path, "version 0", "invalid")


def test_header_checksum_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    raw = _pad_header(json.dumps(_header()).encode())
    _write_raw(path, _header(), header_crc=zlib.crc32(raw) ^ 1)
    _fails(path, "header checksum")


def test_header_length_beyond_file(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, _header(), header_len=2 * 4096 - 24)
    _fails(path, "header length 8168", "past the end")


def test_header_length_over_cap(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, _header(), header_len=2**64 - 1)
    _fails(path, "header length", "limit")


def test_header_length_not_aligned(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, _header(), header_len=100)
    _fails(path, "header length 100", "multiple of 4096")


def test_header_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, b'{"format_version": 1, "meta": {"x": "\xff"}, "sections": []}')
    _fails(path, "UTF-8", "0xff")


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"", b'{"a": 1} {"b": 2}', b'{"format_version": 1, "meta": {"x": NaN}}'],
)
def test_header_not_json(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, raw)
    _fails(path, "not valid JSON")


def test_header_duplicate_keys(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, b'{"format_version": 1, "meta": {}, "meta": {}, "sections": []}')
    _fails(path, "duplicate", "'meta'")


@pytest.mark.parametrize("header", [[], "x", 1, None])
def test_header_not_object(tmp_path: Path, header: object) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, header)
    _fails(path, "header is a JSON", "expected an object")


@pytest.mark.parametrize("key", ["format_version", "meta", "sections"])
def test_header_missing_key(tmp_path: Path, key: str) -> None:
    path = tmp_path / "x.ibp"
    header = _header()
    del header[key]
    _write_raw(path, header)
    _fails(path, "missing", repr(key))


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("format_version", "1", ("format_version",)),
        ("format_version", True, ("format_version",)),
        ("format_version", 2, ("format_version 2", "does not match")),
        ("meta", [], ("meta", "expected an object")),
        ("sections", {}, ("sections", "expected an array")),
    ],
)
def test_header_bad_types(tmp_path: Path, key: str, value: object, words: tuple[str, ...]) -> None:
    path = tmp_path / "x.ibp"
    header = _header()
    header[key] = value
    _write_raw(path, header)
    _fails(path, *words)


# Reader failures: sections


_DATA = bytes(range(16))


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("name", 3, ("section #0", "name")),
        ("name", "", ("section #0", "name")),
        ("offset", "4096", ("section 'a'", "offset", "integer")),
        ("offset", 4096.0, ("section 'a'", "offset", "integer")),
        ("nbytes", True, ("section 'a'", "nbytes", "integer")),
        ("nbytes", -1, ("section 'a'", "nbytes -1", "negative")),
        ("crc32", -1, ("section 'a'", "crc32")),
        ("crc32", 2**32, ("section 'a'", "crc32")),
        ("crc32", None, ("section 'a'", "crc32")),
        ("dtype", 4, ("section 'a'", "dtype", "string")),
        ("dtype", "nonsense", ("section 'a'", "dtype 'nonsense'", "not a numpy dtype")),
        ("dtype", "|O", ("section 'a'", "dtype '|O'", "not numeric")),
        ("dtype", "<M8[s]", ("section 'a'", "not numeric")),
        ("dtype", "|S4", ("section 'a'", "not numeric")),
        ("dtype", "<i4,<i4", ("section 'a'", "not numeric")),
        ("dtype", "float32", ("section 'a'", "dtype 'float32'", "canonical", "'<f4'")),
        ("dtype", ">u4", ("section 'a'", "dtype '>u4'", "canonical", "'<u4'")),
        ("shape", 16, ("section 'a'", "shape")),
        ("shape", [-16], ("section 'a'", "shape")),
        ("shape", [16.0], ("section 'a'", "shape")),
        ("shape", [0] * 40, ("section 'a'", "dimensions")),
        ("shape", [2**62, 0, 4], ("section 'a'", "too large")),
        ("shape", [4, 2], ("section 'a'", "nbytes 16 does not match shape [4, 2]", "= 8")),
        ("shape", [2**64, 2**64], ("section 'a'", "too large")),
        ("shape", [2**31, 2**31], ("section 'a'", "does not match")),
    ],
)
def test_bad_section_field(
    tmp_path: Path, field: str, value: object, words: tuple[str, ...]
) -> None:
    path = tmp_path / "x.ibp"
    entry = _entry("a", 4096, _DATA)
    entry[field] = value
    _write_raw(path, _header(entry), _DATA)
    _fails(path, *words)


@pytest.mark.parametrize("field", ["name", "offset", "nbytes", "dtype", "shape", "crc32"])
def test_section_missing_key(tmp_path: Path, field: str) -> None:
    path = tmp_path / "x.ibp"
    entry = _entry("a", 4096, _DATA)
    del entry[field]
    _write_raw(path, _header(entry), _DATA)
    _fails(path, "section #0", "missing", repr(field))


def test_section_not_object(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, _header(_entry("a", 4096, _DATA), ["b"]), _DATA)
    _fails(path, "section #1", "expected an object")


def test_misaligned_offset(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, _header(_entry("a", 4100, _DATA)), bytes(4) + _DATA)
    _fails(path, "section 'a' offset 4100", "multiple of 4096")


def test_offset_inside_header(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _write_raw(path, _header(_entry("a", 0, _DATA)), _DATA)
    _fails(path, "section 'a' offset 0", "inside the header")


def test_overlapping_sections(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    data = _DATA + bytes(4096 - 16) + _DATA
    entries = (_entry("a", 4096, data[:4112]), _entry("b", 8192, _DATA))
    _write_raw(path, _header(*entries), data)
    _fails(path, "section 'b' starts at byte 8192", "section 'a' ends at byte 8208", "overlap")


def test_sections_out_of_order(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    data = _DATA + bytes(4096 - 16) + _DATA
    _write_raw(path, _header(_entry("b", 8192, _DATA), _entry("a", 4096, _DATA)), data)
    _fails(path, "section 'a' starts at byte 4096", "out of order")


def test_duplicate_section_names(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    data = _DATA + bytes(4096 - 16) + _DATA
    _write_raw(path, _header(_entry("a", 4096, _DATA), _entry("a", 8192, _DATA)), data)
    _fails(path, "'a'", "more than once")


def test_nbytes_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    entry = _entry("a", 4096, _DATA, dtype="<u4", shape=[3])
    _write_raw(path, _header(entry), _DATA)
    _fails(path, "section 'a' nbytes 16", "does not match", "[3]")


def test_zero_byte_sections_may_share_offset(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    entries = (
        _entry("e1", 4096, b"", dtype="<f8", shape=[0, 3]),
        _entry("e2", 4096, b"", dtype="<i2", shape=[2, 0]),
        _entry("a", 4096, _DATA, dtype="<u4", shape=[2, 2]),
    )
    _write_raw(path, _header(*entries), _DATA)
    header = read_header(path)
    verify_checksums(header)
    for mmap in (True, False):
        assert load_section(header, "e1", mmap=mmap).shape == (0, 3)
        assert load_section(header, "e2", mmap=mmap).dtype == np.int16
    assert load_section(header, "a").tolist() == [
        [0x03020100, 0x07060504],
        [0x0B0A0908, 0x0F0E0D0C],
    ]


# Data-level failures


@pytest.mark.parametrize("name", ["masks", "bitvals", "rows"])
def test_flipped_byte_detected(tmp_path: Path, name: str) -> None:
    path = tmp_path / "x.ibp"
    _small_file(path)
    offset = read_header(path).sections[name].offset
    data = bytearray(path.read_bytes())
    data[offset + 3] ^= 0x10
    path.write_bytes(bytes(data))
    header = read_header(path)
    for mmap in (True, False):
        with pytest.raises(IBPFormatError) as info:
            load_section(header, name, mmap=mmap)
        _check_message(info, path, f"section {name!r}", "checksum mismatch", "corrupt")
    with pytest.raises(IBPFormatError) as info:
        verify_checksums(header)
    _check_message(info, path, f"section {name!r}", "checksum mismatch")
    assert load_section(header, name, verify=False).nbytes == header.sections[name].nbytes
    others = [n for n in header.sections if n != name]
    for other in others:
        load_section(header, other)


def test_unknown_section(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _small_file(path)
    header = read_header(path)
    with pytest.raises(IBPFormatError) as info:
        load_section(header, "nope")
    _check_message(info, path, "no section 'nope'", "'masks', 'bitvals', 'rows'")


def test_file_changed_after_header(tmp_path: Path) -> None:
    path = tmp_path / "x.ibp"
    _small_file(path)
    header = read_header(path)
    with open(path, "ab") as f:
        f.write(b"more")
    with pytest.raises(IBPFormatError) as info:
        load_section(header, "rows")
    _check_message(info, path, "changed")
    path.unlink()
    with pytest.raises(IBPFormatError) as info:
        load_section(header, "rows")
    _check_message(info, path, "no such file")


# Property test


_DTYPES = ["|b1", "|u1", "|i1", "<u2", ">i2", "<u4", "<i4", ">u8", "<i8", "<f2", ">f4", "<f8"]
_DTYPES += ["<c8", ">c16"]


@st.composite
def _sections(draw: st.DrawFn) -> dict[str, np.ndarray]:
    names = draw(
        st.lists(
            st.text(min_size=1, max_size=8).filter(lambda s: s != "rows"),
            max_size=5,
            unique=True,
        )
    )
    out = {}
    for name in names:
        dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))
        out[name] = draw(hnp.arrays(dtype, shape))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sections=_sections(),
    rows=st.binary(max_size=10_000),
    meta=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=4),
)
def test_round_trip_property(
    tmp_path_factory: pytest.TempPathFactory,
    sections: dict[str, np.ndarray],
    rows: bytes,
    meta: dict,
) -> None:
    directory = tmp_path_factory.mktemp("prop")
    path = directory / "p.ibp"
    write_ibp(path, meta, sections, np.frombuffer(rows, dtype=np.uint8))
    assert os.listdir(directory) == ["p.ibp"]
    header = read_header(path)
    assert header.meta == meta
    assert list(header.sections) == [*sections, "rows"]
    assert header.sections["rows"].offset + len(rows) == header.file_size == path.stat().st_size
    verify_checksums(header)
    for name, expected in [*sections.items(), ("rows", np.frombuffer(rows, np.uint8))]:
        info = header.sections[name]
        assert info.offset % SECTION_ALIGN == 0
        for mmap in (True, False):
            got = load_section(header, name, mmap=mmap)
            assert got.shape == expected.shape
            assert got.dtype.str == expected.dtype.newbyteorder("<").str
            assert got.tobytes() == _le_bytes(expected)
