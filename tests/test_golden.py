"""Golden bytes: the committed version-1 files and hand-computed row bitstreams."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ibp_graph
from ibp_graph.codec import CodecParams, decode, encode
from ibp_graph.container import read_header

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.mark.parametrize("name", ["v1-mixed-float32-k2", "v1-int16-t8"])
def test_golden_file_decodes_to_its_array(name: str) -> None:
    expected = np.load(GOLDEN / f"{name}.npy")
    table = ibp_graph.open(GOLDEN / f"{name}.ibp")
    assert table.header.format_version == 1
    assert table.shape == expected.shape
    got = table.read()
    assert got.dtype == expected.dtype
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))
    ids = np.array([len(expected) - 1, 0, 3, 3])
    assert np.array_equal(table.read(ids).view(np.uint8), expected[ids].view(np.uint8))


def test_golden_file_layout() -> None:
    path = GOLDEN / "v1-mixed-float32-k2.ibp"
    raw = path.read_bytes()
    assert raw[:8] == b"IBPGRAPH"
    assert int.from_bytes(raw[8:12], "little") == 1
    header = read_header(path)
    assert list(header.sections) == [
        "masks",
        "code_bits",
        "bitvals",
        "offsets",
        "cluster_ids",
        "rows",
    ]
    assert all(s.offset % 4096 == 0 for s in header.sections.values())
    meta = header.meta
    assert (meta["shape"], meta["dtype"], meta["num_clusters"], meta["align"]) == (
        [400, 37],
        "float32",
        2,
        4,
    )
    table = ibp_graph.open(path)
    # both forms and raw rows occur in this file
    lengths = np.diff(table.offsets) * table.align
    assert (lengths >= 37 * 4).any() and (lengths < 37 * 4).any()


def _params(masks, code_bits, bitvals) -> CodecParams:
    return CodecParams(
        word_bytes=4,
        masks=np.array([masks], dtype=np.uint32),
        code_bits=np.array([code_bits], dtype=np.uint8),
        bitvals=np.array([bitvals], dtype=np.uint32),
    )


def _roundtrip(words: np.ndarray, params: CodecParams, align: int = 1) -> tuple[list, np.ndarray]:
    chunk = encode(words, params, align)
    starts = np.concatenate([[0], np.cumsum(chunk.sizes)[:-1]])
    padded = np.zeros(-(-chunk.data.size // 8) * 8 + 8, dtype=np.uint8)
    padded[: chunk.data.size] = chunk.data
    rows = [bytes(chunk.data[s : s + n]) for s, n in zip(starts, chunk.sizes, strict=True)]
    back = decode(padded.view(np.uint64), starts, chunk.sizes, params)
    return rows, back


def test_flat_rows_hand_computed() -> None:
    # column 0: b=1, one entry 0 under a full mask; column 1: b=2, entries 1.0f and 2.0f
    # under the top 16 bits.
    params = _params([0xFFFFFFFF, 0xFFFF0000], [1, 2], [[0, 0, 0], [0x3F800000, 0x40000000, 0]])
    words = np.array([[0, 0x40001234], [5, 0x3F80FFFF]], dtype=np.uint32)
    rows, back = _roundtrip(words, params)
    # row 0: G=0 | code0=0 | code1=1 (2 bits) | payload1 = 0x1234 (16 bits) -> 20 bits
    assert rows[0] == (0x12344).to_bytes(3, "little")
    # row 1: G=0 | code0=1 (escape) | code1=0 | payload0 = 5 (32 bits) | payload1 = 0xFFFF
    assert rows[1] == (0b0010 | 5 << 4 | 0xFFFF << 36).to_bytes(7, "little")
    assert np.array_equal(back, words)


def test_grouped_row_hand_computed() -> None:
    params = _params([0xFFFFFFFF] * 9, [1] * 9, [[0]] * 9)
    words = np.zeros((1, 9), dtype=np.uint32)
    words[0, 8] = 7
    rows, back = _roundtrip(words, params)
    # G=1 | chunk0=1 | subgroups: 0 then 1 | code of word 8 = 1 | payload 7 (32 bits)
    assert rows[0] == (1 | 1 << 1 | 0 << 2 | 1 << 3 | 1 << 4 | 7 << 5).to_bytes(5, "little")
    assert np.array_equal(back, words)


def test_raw_row_and_alignment_hand_computed() -> None:
    params = _params([0xFFFFFFFF, 0xFFFFFFFF], [1, 1], [[0], [0]])
    words = np.array([[0xDEADBEEF, 0x01234567]], dtype=np.uint32)
    rows, back = _roundtrip(words, params, align=16)
    # 1 + 2 + 64 bits encoded = 9 bytes -> 16 aligned, not smaller than the raw row's 16
    assert rows[0] == words.tobytes() + bytes(8)
    assert np.array_equal(back, words)
