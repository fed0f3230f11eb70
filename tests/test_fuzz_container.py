"""A seeded, bounded corruption fuzz of ``.ibp`` files, opened with and without ``verify``.

Each case mutates a valid file (bit flips, truncations, overwrites, header edits, duplicated
sections), opens it with ``verify=True`` and ``verify=False`` and reads every row. What must
hold, case by case:

- the only exception is `IBPFormatError`, and its message starts with the path;
- the rows read are the original rows, bit for bit, unless the case forged consistent
  checksums (an edited header whose CRC was recomputed), or ``verify=False`` and the damage
  touches the row section's bytes (the one checksum that mode skips);
- memory (traced NumPy and Python allocations) and time per open stay small.
"""

from __future__ import annotations

import json
import struct
import time
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import ibp_graph
from ibp_graph.container import SECTION_ALIGN, read_header
from ibp_graph.errors import IBPFormatError

SEED = 14
#: Cases per mutation kind and per file; 2 files x 5 kinds x this x 2 modes opens in all.
CASES_PER_KIND = 400
#: Generous bounds: a small file must never cost more, whatever the damage.
MAX_TRACED_BYTES = 32 << 20
MAX_SECONDS_PER_OPEN = 5.0


@dataclass
class Case:
    kind: str
    what: str
    data: bytes
    forged: bool = False
    rows_touched: bool = False


@dataclass
class Source:
    """A valid file and the byte ranges the mutations aim at."""

    raw: bytes
    x: np.ndarray
    rows: tuple[int, int]
    meta_ranges: list[tuple[int, int]]
    header: dict
    data_start: int


def _make_source(directory: Path, name: str, x: np.ndarray, **kw) -> Source:
    path = directory / f"{name}.ibp"
    ibp_graph.compress(x, path, **kw).close()
    raw = path.read_bytes()
    hdr = read_header(path)
    rows = hdr.sections["rows"]
    meta_ranges = [(0, hdr.data_start)] + [
        (s.offset, s.offset + s.nbytes) for s in hdr.sections.values() if s.name != "rows"
    ]
    header = json.loads(raw[24 : hdr.data_start].decode().rstrip(" "))
    return Source(
        raw, x, (rows.offset, rows.offset + rows.nbytes), meta_ranges, header, hdr.data_start
    )


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Source]:
    rng = np.random.default_rng(SEED)
    d = tmp_path_factory.mktemp("fuzz-src")
    sparse = (rng.random((60, 37)) < 0.1) * rng.integers(1, 4, (60, 37))
    dense = rng.standard_normal((60, 37)) * 1e30
    mixed = np.concatenate([sparse, dense]).astype(np.float32)[rng.permutation(120)]
    ints = rng.integers(-40, 40, (90, 13)).astype(np.int16)
    return [
        _make_source(d, "mixed", mixed, clusters=2, align=4),
        _make_source(d, "ints", ints, word_bytes=8, align=16),
    ]


def _touches(span: tuple[int, int], lo: int, hi: int) -> bool:
    return lo < span[1] and span[0] < hi


def _position(rng: np.random.Generator, src: Source) -> int:
    """Anywhere in the file half the time, else in the header or a metadata section."""
    if rng.random() < 0.5:
        return int(rng.integers(len(src.raw)))
    lo, hi = src.meta_ranges[int(rng.integers(len(src.meta_ranges)))]
    return int(rng.integers(lo, max(hi, lo + 1)))


def _flip(rng: np.random.Generator, src: Source) -> Case:
    b = bytearray(src.raw)
    spots = [_position(rng, src) for _ in range(int(rng.integers(1, 4)))]
    for at in spots:
        b[at] ^= 1 << int(rng.integers(8))
    touched = any(_touches(src.rows, at, at + 1) for at in spots)
    return Case("flip", f"bits at {spots}", bytes(b), rows_touched=touched)


def _truncate(rng: np.random.Generator, src: Source) -> Case:
    ends = [e for r in src.meta_ranges for e in r] + list(src.rows)
    keep = int(rng.choice(ends)) - int(rng.integers(0, 2)) if rng.random() < 0.3 else None
    if keep is None:
        keep = int(rng.integers(0, len(src.raw)))
    keep = max(0, min(keep, len(src.raw) - 1))
    return Case("truncate", f"keep {keep} bytes", src.raw[:keep])


def _overwrite(rng: np.random.Generator, src: Source) -> Case:
    at = _position(rng, src)
    n = int(rng.integers(1, 65))
    fill = rng.choice(["random", "zeros", "ones"])
    junk = {
        "random": rng.integers(0, 256, n, dtype=np.uint8).tobytes(),
        "zeros": bytes(n),
        "ones": b"\xff" * n,
    }[fill]
    b = bytearray(src.raw)
    b[at : at + n] = junk
    data = bytes(b[: len(src.raw)])
    return Case(
        "overwrite", f"{n} {fill} bytes at {at}", data, rows_touched=_touches(src.rows, at, at + n)
    )


def _with_header(src: Source, header: dict, *, fix_crc: bool, tail: bytes = b"") -> bytes:
    """The file with a new JSON header (same padded length when it fits) and extra bytes."""
    text = json.dumps(header, separators=(",", ":")).encode()
    length = src.data_start - 24
    if len(text) > length:
        text = text[:length]  # cut: invalid JSON, to be refused
    padded = text + b" " * (length - len(text))
    magic, version, crc, hlen = struct.unpack("<8sIIQ", src.raw[:24])
    crc = zlib.crc32(padded) if fix_crc else crc
    return (
        struct.pack("<8sIIQ", magic, version, crc, hlen) + padded + src.raw[src.data_start :] + tail
    )


_META_EDITS: list[tuple[str, object]] = [
    ("shape", "rows+1"),
    ("shape", "cols+1"),
    ("shape", "cols-1"),
    ("shape", [1, 1]),
    ("shape", [10**12, 3]),
    ("dtype", "int32"),
    ("dtype", "float16"),
    ("dtype", "complex64"),
    ("word_bytes", 8),
    ("word_bytes", 4),
    ("align", 1),
    ("align", 32),
    ("num_clusters", 1),
    ("num_clusters", 2),
    ("num_clusters", 0),
    ("stats", 5),
    ("stats", {"code_bits": 3, "clusters": [1, "a"], "threshold_sweep": ["a", 1]}),
    ("source", None),
]
_SECTION_EDITS = ["offset+4096", "nbytes+1", "shape*2", "dtype", "crc32", "name", "delete"]


def _header_edit(rng: np.random.Generator, src: Source) -> Case:
    header = json.loads(json.dumps(src.header))
    fix_crc = bool(rng.random() < 0.8)
    if rng.random() < 0.5:
        key, value = _META_EDITS[int(rng.integers(len(_META_EDITS)))]
        n, d = header["meta"]["shape"]
        value = {"rows+1": [n + 1, d], "cols+1": [n, d + 1], "cols-1": [n, d - 1]}.get(
            value if isinstance(value, str) else "", value
        )
        header["meta"][key] = value
        what = f"meta {key} = {value!r}"
    else:
        sections = header["sections"]
        i = int(rng.integers(len(sections)))
        edit = _SECTION_EDITS[int(rng.integers(len(_SECTION_EDITS)))]
        s = sections[i]
        if edit == "offset+4096":
            s["offset"] += SECTION_ALIGN
        elif edit == "nbytes+1":
            s["nbytes"] += 1
        elif edit == "shape*2":
            s["shape"] = [2 * x for x in s["shape"]]
            s["nbytes"] *= 2
        elif edit == "dtype":
            s["dtype"] = {"|u1": "|i1", "<u4": "<i4", "<u8": "<i8"}.get(s["dtype"], "|u1")
        elif edit == "crc32":
            s["crc32"] = (s["crc32"] + 1) % 2**32
        elif edit == "name":
            s["name"] = s["name"] + "x"
        else:
            del sections[i]
        what = f"section {s['name']!r} {edit}"
    return Case("header", what, _with_header(src, header, fix_crc=fix_crc), forged=fix_crc)


def _duplicate(rng: np.random.Generator, src: Source) -> Case:
    header = json.loads(json.dumps(src.header))
    sections = header["sections"]
    i = int(rng.integers(len(sections)))
    s = sections[i]
    how = rng.choice(["same name", "new name at end", "bytes over another"])
    if how == "bytes over another":
        j = int(rng.integers(len(sections)))
        t = sections[j]
        n = min(s["nbytes"], t["nbytes"])
        b = bytearray(src.raw)
        b[t["offset"] : t["offset"] + n] = src.raw[s["offset"] : s["offset"] + n]
        touched = _touches(src.rows, t["offset"], t["offset"] + n) and n > 0
        same = b == bytearray(src.raw)
        what = f"bytes of {s['name']!r} over {t['name']!r}" + (" (no change)" if same else "")
        return Case("duplicate", what, bytes(b), rows_touched=touched)
    copy = dict(s)
    end = len(src.raw)
    copy["offset"] = -(-end // SECTION_ALIGN) * SECTION_ALIGN
    if how == "new name at end":
        copy["name"] = s["name"] + "_copy"
    sections.append(copy)
    body = src.raw[s["offset"] : s["offset"] + s["nbytes"]]
    tail = bytes(copy["offset"] - end) + body
    data = _with_header(src, header, fix_crc=True, tail=tail)
    return Case("duplicate", f"section {s['name']!r} {how}", data, forged=True)


KINDS: dict[str, Callable[[np.random.Generator, Source], Case]] = {
    "flip": _flip,
    "truncate": _truncate,
    "overwrite": _overwrite,
    "header": _header_edit,
    "duplicate": _duplicate,
}


def _outcome(path: Path, x: np.ndarray, verify: bool) -> str:
    """'exact', 'wrong' or 'refused'; any exception but IBPFormatError propagates."""
    ids = np.arange(x.shape[0])[::-1]
    try:
        with ibp_graph.open(path, verify=verify) as table:
            got = table.read()
            back = table.read(ids)
    except IBPFormatError as exc:
        assert str(exc).startswith(f"{path}: "), str(exc)
        return "refused"
    same = (
        got.dtype == x.dtype
        and got.shape == x.shape
        and np.array_equal(got.view(np.uint8), x.view(np.uint8))
        and np.array_equal(back.view(np.uint8), x[ids].view(np.uint8))
    )
    return "exact" if same else "wrong"


@pytest.mark.slow
def test_corruption_fuzz(tmp_path: Path, sources: list[Source]) -> None:
    rng = np.random.default_rng(SEED)
    path = tmp_path / "m.ibp"
    tally: Counter[tuple[str, bool, str]] = Counter()
    tracemalloc.start()
    try:
        for src in sources:
            for kind, mutate in KINDS.items():
                for _ in range(CASES_PER_KIND):
                    case = mutate(rng, src)
                    path.write_bytes(case.data)
                    for verify in (True, False):
                        tracemalloc.reset_peak()
                        t0 = time.perf_counter()
                        try:
                            got = _outcome(path, src.x, verify)
                        except Exception as exc:  # anything but IBPFormatError is a bug
                            pytest.fail(f"{kind} ({case.what}), verify={verify}: {exc!r}")
                        seconds = time.perf_counter() - t0
                        peak = tracemalloc.get_traced_memory()[1]
                        where = f"{kind} ({case.what}), verify={verify}"
                        assert peak < MAX_TRACED_BYTES, f"{where}: traced {peak} bytes"
                        assert seconds < MAX_SECONDS_PER_OPEN, f"{where}: {seconds:.1f} s"
                        may_differ = case.forged or (case.rows_touched and not verify)
                        assert got != "wrong" or may_differ, f"{where}: wrong rows"
                        tally[kind, verify, got] += 1
    finally:
        tracemalloc.stop()
    for kind in KINDS:
        for verify in (True, False):
            assert tally[kind, verify, "refused"] > 0, (kind, verify, tally)
    # Unforged damage outside the rows is always caught, in both modes; in the rows it is
    # caught with verify=True.
    assert tally["flip", True, "refused"] > tally["flip", False, "wrong"]
