"""Opening damaged or hostile ``.ibp`` files: bounded work, only `IBPFormatError`, no wrong rows.

Covers files that claim far more rows than they hold (sparse files of terabytes apparent
size), what ``verify=False`` still checks, and the indexing-independent table surface.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import set_header_stats

import ibp_graph
from ibp_graph.container import SECTION_ALIGN, read_header
from ibp_graph.errors import IBPFormatError

#: Traced allocations allowed while refusing a huge claim (the scan uses 4 MiB chunks).
MAX_TRACED_BYTES = 64 << 20


def _forge(src: Path, dst: Path, shape: list[int], holes: dict[str, list[int]], last=None) -> None:
    """Write a sparse copy of ``src`` that claims ``shape``, with some sections left as holes.

    Sections named in ``holes`` get the given shape (same dtype) and are never written, so
    they read as zeros; the others are copied. ``last``, if given, is written as the last
    element of the ``offsets`` hole, which gets past the O(1) size checks.
    """
    hdr = read_header(src)
    raw = src.read_bytes()
    entries, blobs = [], {}
    for name, info in hdr.sections.items():
        dtype = info.dtype
        if name in holes:
            dims = holes[name]
            if name == "offsets" and dims[0] > 2**32:
                dtype = np.dtype("<u8")
            nbytes, crc = int(np.prod(dims)) * dtype.itemsize, 0
        else:
            dims, nbytes = list(info.shape), info.nbytes
            blobs[name] = raw[info.offset : info.offset + nbytes]
            crc = zlib.crc32(blobs[name])
        entries.append(
            {
                "name": name,
                "offset": 0,
                "nbytes": nbytes,
                "dtype": dtype.str,
                "shape": dims,
                "crc32": crc,
            }
        )
    pos = SECTION_ALIGN
    for e in entries:
        e["offset"] = -(-pos // SECTION_ALIGN) * SECTION_ALIGN
        pos = e["offset"] + e["nbytes"]
    meta = dict(hdr.meta, shape=shape)
    text = json.dumps({"format_version": 1, "meta": meta, "sections": entries}).encode()
    text += b" " * (SECTION_ALIGN - 24 - len(text))
    with open(dst, "wb") as f:
        f.write(struct.pack("<8sIIQ", b"IBPGRAPH", 1, zlib.crc32(text), len(text)) + text)
        for e in entries:
            if e["name"] in blobs:
                f.seek(e["offset"])
                f.write(blobs[e["name"]])
            if e["name"] == "offsets" and last is not None:
                f.seek(e["offset"] + e["nbytes"] - np.dtype(e["dtype"]).itemsize)
                f.write(np.array([last], dtype=e["dtype"]).tobytes())
    try:
        os.truncate(dst, pos)
    except OSError as exc:
        pytest.skip(f"this file system cannot hold a sparse file of {pos} bytes ({exc})")


def _forge_claim(src: Path, dst: Path, rows: int, *, forge_last: bool) -> None:
    """A sparse file claiming ``rows`` rows of one byte each (align 1): offsets and rows holes."""
    cols = read_header(src).meta["shape"][1]
    nbytes = -(-rows // 8) * 8
    holes = {"offsets": [rows + 1], "rows": [nbytes]}
    _forge(src, dst, [rows, cols], holes, last=rows if forge_last else None)


@pytest.fixture(scope="module")
def small_ibp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("claim") / "small.ibp"
    x = np.random.default_rng(4).integers(0, 3, (50, 8)).astype(np.float32)
    ibp_graph.compress(x, path, align=1).close()
    return path


@pytest.mark.parametrize("rows", [10**9, 10**12], ids=["1e9", "1e12"])
@pytest.mark.parametrize("forge_last", [False, True], ids=["zero-tail", "forged-tail"])
def test_sparse_file_claiming_many_rows_is_refused_quickly(
    tmp_path: Path, small_ibp: Path, rows: int, forge_last: bool
) -> None:
    path = tmp_path / "claim.ibp"
    _forge_claim(small_ibp, path, rows, forge_last=forge_last)
    assert path.stat().st_size > rows  # gigabytes to terabytes apparent
    for verify in (True, False):
        tracemalloc.start()
        t0 = time.perf_counter()
        try:
            with pytest.raises(IBPFormatError) as info:
                ibp_graph.open(path, verify=verify)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert str(info.value).startswith(f"{path}: ")
        assert "'offsets'" in str(info.value)
        assert peak < MAX_TRACED_BYTES, peak
        assert time.perf_counter() - t0 < 10  # a hang guard: the real cost is milliseconds


def test_sparse_file_claiming_many_columns_is_refused_quickly(
    tmp_path: Path, small_ibp: Path
) -> None:
    """10^11 columns: the codec parameter sections are terabytes of holes."""
    hdr = read_header(small_ibp)
    n = hdr.meta["shape"][0]
    cols = 10**11
    v = cols * 4 // hdr.meta["word_bytes"]
    e = hdr.sections["bitvals"].shape[2]
    holes = {"masks": [1, v], "code_bits": [1, v], "bitvals": [1, v, e]}
    path = tmp_path / "wide.ibp"
    _forge(small_ibp, path, [n, cols], holes)
    assert path.stat().st_size > 10**11
    for verify in (True, False):
        tracemalloc.start()
        try:
            with pytest.raises(IBPFormatError, match="section 'code_bits' entry 0 is 0"):
                ibp_graph.open(path, verify=verify)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < MAX_TRACED_BYTES, peak


_RSS_SCRIPT = """
import resource, sys
import ibp_graph
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for verify in (True, False):
    try:
        ibp_graph.open(sys.argv[1], verify=verify)
    except ibp_graph.IBPFormatError:
        pass
    else:
        raise SystemExit("opened")
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_sparse_claim_does_not_grow_rss(tmp_path: Path, small_ibp: Path) -> None:
    """The peak resident set of a fresh process barely moves while refusing 10^9 rows."""
    path = tmp_path / "claim.ibp"
    _forge_claim(small_ibp, path, 10**9, forge_last=True)
    done = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    growth_kib = int(done.stdout.split()[-1])
    assert growth_kib < 128 * 1024, f"peak RSS grew by {growth_kib} KiB"


def _metadata_spans(path: Path) -> dict[str, tuple[int, int]]:
    hdr = read_header(path)
    return {n: (s.offset, s.nbytes) for n, s in hdr.sections.items() if n != "rows"}


def test_verify_false_still_checks_every_metadata_section(tmp_path: Path) -> None:
    """A flip in masks, code_bits, bitvals, offsets or cluster_ids is refused in both modes."""
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [
            ((rng.random((40, 21)) < 0.1) * 3).astype(np.float32),
            rng.standard_normal((40, 21)).astype(np.float32),
        ]
    )
    path = tmp_path / "m.ibp"
    assert ibp_graph.compress(x, path, clusters=2).num_clusters == 2
    raw = path.read_bytes()
    spans = _metadata_spans(path)
    assert set(spans) == {"masks", "code_bits", "bitvals", "offsets", "cluster_ids"}
    for name, (offset, nbytes) in spans.items():
        for at in sorted({offset, offset + nbytes // 2, offset + nbytes - 1}):
            b = bytearray(raw)
            b[at] ^= 0x01
            path.write_bytes(bytes(b))
            for verify in (True, False):
                with pytest.raises(IBPFormatError, match=rf"'{name}'"):
                    ibp_graph.open(path, verify=verify)


def test_verify_false_skips_only_the_row_checksum(tmp_path: Path) -> None:
    x = np.arange(64 * 5, dtype=np.int32).reshape(64, 5)
    path = tmp_path / "r.ibp"
    ibp_graph.compress(x, path).close()
    rows = read_header(path).sections["rows"]
    b = bytearray(path.read_bytes())
    b[rows.offset + rows.nbytes - 1] ^= 0x80  # inside the last row's bytes
    path.write_bytes(bytes(b))
    with pytest.raises(IBPFormatError, match="section 'rows' checksum mismatch"):
        ibp_graph.open(path)
    with ibp_graph.open(path, verify=False) as table:  # opens: the payload is not checked
        assert np.array_equal(table.read(np.arange(32)), x[:32])


@pytest.mark.parametrize(
    "stats",
    [5, "text", [1, 2], None, {"clusters": 7}, {"code_bits": [1]}, {"threshold_sweep": 3}],
)
def test_odd_stats_do_not_break_the_table(tmp_path: Path, stats: object) -> None:
    x = np.eye(6, dtype=np.float32)
    path = tmp_path / "s.ibp"
    ibp_graph.compress(x, path).close()
    set_header_stats(path, stats)
    with ibp_graph.open(path) as table:
        assert isinstance(table.stats, dict)
        assert np.array_equal(table.read(), x)
