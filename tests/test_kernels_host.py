"""The CUDA kernels' own source, run on the host (tests/simt), against the NumPy decoder.

`cuda/fetch_decode.cu` and `cuda/raw_gather.cu` are compiled with g++ together with a small
harness that runs every lane of a warp as a fiber (warp shuffles become barriers), and
launched with the shared-memory plan the real launcher uses. This checks the kernels' logic
(row staging, header, codes, payloads, raw rows, output positions, errors) on machines
without a GPU; `tests/simt/sanitize.py` runs them with out-of-bounds and race checks
(tests/test_kernels_sanitized.py). GPU timing is only measured by the `gpu` tests.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph.codec import row_layout
from ibp_graph.cuda_table import raw_bypass
from ibp_graph.dtypes import row_bytes, rows_to_words
from ibp_graph.kernels.fetch_decode import (
    HALF_ROW_BYTES,
    LAYOUT_THREE_RUNS,
    LAYOUT_TWO_RUNS,
    NO_FREE_HALF_ROW_BYTES,
    WARP,
    codec_prefixes,
    column_layouts,
    column_runs,
    smem_plan,
)
from ibp_graph.kernels.raw_gather import vector_bytes
from ibp_graph.pinned import TAIL_PAD

SMEM = 48 * 1024


def _ptr(a: np.ndarray | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(0 if a is None else a.ctypes.data)


def fetch_on_host(
    lib: ctypes.CDLL,
    table: ibp_graph.IBPTable,
    ids: np.ndarray,
    grid: int = 3,
    offsets_dtype: str | None = None,
    warps: int = 2,
    out_pos: np.ndarray | None = None,
    double_buffer: bool = False,
    longest_row: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the fused kernel over ``ids``: ``(out bytes (n, row_bytes), error slots)``.

    The staging buffers are sized as `CudaIBPTable` sizes them, for the table's longest stored
    row, or for ``longest_row`` bytes when given (shorter: rows the buffers cannot hold).

    ``offsets_dtype`` forces the offsets' width (``"<u8"``: the 8-byte-offset entry points);
    ``grid`` blocks of at most ``warps`` warps run; ``out_pos`` (None: identity) says where
    each row goes in the output; ``double_buffer`` runs the ``ibp_fetch_decode_db_*`` entry
    points (their copies as `copy_mode` sets them).
    """
    params = table.params
    rows = np.zeros(table.stored_bytes + TAIL_PAD, dtype=np.uint8)
    rows[: table.stored_bytes] = np.asarray(table.rows_section).view(np.uint8)
    offsets = np.ascontiguousarray(
        table.offsets.astype(offsets_dtype or table.header.sections["offsets"].dtype)
    )
    width = row_bytes(table.shape[1], table.dtype_name)
    code_prefix, free_prefix = codec_prefixes(params.masks, params.code_bits, params.word_bytes)
    plan = smem_plan(
        params.num_words,
        params.word_bytes,
        table.align,
        SMEM,
        2 if double_buffer else 1,
        table.stored_row_range[1] if longest_row is None else longest_row,
        warps=warps,
        no_free=bool(free_prefix[0, -1] == 0),
    )
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if out_pos is not None:
        out_pos = np.ascontiguousarray(out_pos, dtype=np.int64)
        assert out_pos.shape == ids.shape
    layouts = column_layouts(params.masks, params.code_bits, params.word_bytes)
    runs = column_runs(params.masks, params.word_bytes)
    out = np.full((ids.size, width), 0xEE, dtype=np.uint8)
    error = np.zeros(2, dtype=np.int32)
    lib.simt_fetch_decode(
        ctypes.c_int(plan.buffers),
        ctypes.c_int(params.word_bytes),
        ctypes.c_int(offsets.itemsize),
        _ptr(rows),
        _ptr(offsets),
        _ptr(table.cluster_ids),
        _ptr(params.masks),
        _ptr(params.code_bits),
        _ptr(params.match_values),
        _ptr(code_prefix),
        _ptr(free_prefix),
        _ptr(layouts),
        _ptr(ids),
        _ptr(out_pos),
        _ptr(out),
        error.ctypes.data_as(ctypes.POINTER(ctypes.c_int)),
        ctypes.c_longlong(ids.size),
        ctypes.c_longlong(table.shape[0]),
        ctypes.c_int(params.num_words),
        ctypes.c_int(params.max_entries),
        ctypes.c_int(table.align),
        ctypes.c_int(width),
        ctypes.c_int(plan.buf_words),
        _ptr(runs),
        ctypes.c_uint(grid),
        ctypes.c_uint(WARP * plan.warps_per_block),
        ctypes.c_ulonglong(plan.bytes_per_block),
    )
    return out, error


def _tables(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    bits = rng.integers(0, 256, (300, 200), dtype=np.uint8)
    sparse = np.where(rng.random((300, 50)) < 0.05, rng.standard_normal((300, 50)), 0)
    return [
        ("sparse float32", sparse.astype(np.float32)),
        ("dense float32", rng.standard_normal((300, 37)).astype(np.float32)),
        ("bow 0/1 wide", (rng.random((120, 700)) < 0.02).astype(np.float32)),
        ("random bits int32", bits[:, :160].copy().view(np.int32)),
        ("float16 odd width", rng.standard_normal((300, 7)).astype(np.float16)),
        ("float64", np.where(rng.random((300, 9)) < 0.5, 0.0, rng.standard_normal((300, 9)))),
        ("int8", (rng.random((300, 13)) < 0.2).astype(np.int8) * 3),
        ("uint8 bits", bits[:, :31].copy()),
    ]


@pytest.mark.parametrize(
    "word_bytes,align,clusters,double_buffer",
    [
        (4, "auto", 1, False),
        (4, 16, 2, False),
        (8, 4, 1, False),
        (8, 16, 3, False),
        (4, 1, 1, False),
        (4, 32, 1, False),
        (4, 16, 2, True),
        (8, 16, 3, True),
    ],
)
def test_fused_kernel_matches_the_numpy_decoder(
    lib, tmp_path, word_bytes, align, clusters, double_buffer
):
    """Every table kind, one buffer and double-buffered; several clusters: each row's cluster
    read ahead of its decoding (one request ahead in both)."""
    rng = np.random.default_rng(11)
    mixed = 0  # tables whose requests mix rows of several clusters
    for name, x in _tables(rng):
        table = ibp_graph.compress(
            x, tmp_path / "t.ibp", word_bytes=word_bytes, align=align, clusters=clusters
        )
        ids = rng.integers(0, x.shape[0], 257)
        ids[:3] = [0, x.shape[0] - 1, 0]  # ends and a repeat
        if table.cluster_ids is not None:
            mixed += len(np.unique(np.asarray(table.cluster_ids)[ids])) > 1
        out, error = fetch_on_host(lib, table, ids, double_buffer=double_buffer)
        assert error.tolist() == [0, 0], name
        want = np.ascontiguousarray(x[ids]).view(np.uint8).reshape(ids.size, -1)
        assert np.array_equal(out, want), f"{name}: rows differ from the table"
        table.close()
    if clusters > 1 and word_bytes == 4:  # (these tables in 8-byte words keep one cluster)
        assert mixed >= 1


def _runs_table(rng: np.random.Generator, word_bytes: int, rows: int = 400) -> np.ndarray:
    """Words whose free bits lie in one run (low, middle, top), two (a float's mantissa and
    sign), three, four, or none, and random words: each deposit path of the fused kernel."""
    bits = 8 * word_bytes
    dtype = {4: np.int32, 8: np.int64}[word_bytes]

    def varying(free: int) -> np.ndarray:  # words equal to a base outside ``free``'s bits
        words = np.frombuffer(rng.bytes(8 * rows), dtype=np.uint64)
        base = np.uint64(0x5A5A5A5A5A5A5A5A & ((1 << bits) - 1))
        return ((words & np.uint64(free)) | (base & ~np.uint64(free))).view(np.int64).astype(dtype)

    top = 1 << (bits - 1)
    frees = [0xFF, 0xFF0, top, (1 << 23) - 1 | top, 0b1110000110000111, 0x0F0F0F0F, 0]
    columns = [varying(f) for f in frees] + [varying((1 << bits) - 1)]
    return np.stack(columns, axis=1)


@pytest.mark.parametrize("word_bytes", [4, 8])
@pytest.mark.parametrize("double_buffer", [False, True])
def test_free_bits_in_any_number_of_runs_decode(lib, tmp_path, word_bytes, double_buffer) -> None:
    rng = np.random.default_rng(5 + word_bytes)
    x = _runs_table(rng, word_bytes)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", word_bytes=word_bytes)
    params = table.params
    layouts = column_layouts(params.masks, params.code_bits, params.word_bytes)
    two = (layouts & LAYOUT_TWO_RUNS) != 0
    three = (layouts & LAYOUT_THREE_RUNS) != 0
    assert two.any() and three.any() and (~two & ~three).any()  # every deposit runs
    ids = rng.integers(0, x.shape[0], 300)
    out, error = fetch_on_host(lib, table, ids, double_buffer=double_buffer)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))
    table.close()


@pytest.mark.parametrize("double_buffer", [False, True])
@pytest.mark.parametrize(
    "table,word_bytes",
    [
        ("dense 100", 4),
        ("dense 128", 4),
        ("dense 130", 4),
        ("dense 259", 4),
        ("dense 130", 8),
        ("dense 259", 8),
        ("runs 24x", 4),
        ("runs 24x", 8),
        ("8-bit codes 100", 4),
        ("float16 301", 4),
        ("dense 33", 4),
        ("dense 45", 4),
        ("dense 64", 4),
        ("runs 6x", 4),
        ("8-bit codes 40", 4),
        ("float16 100", 4),
        ("dense 100", 8),
    ],
)
def test_flat_rows_of_more_than_two_chunks_decode_at_every_output_alignment(
    lib, tmp_path, table, word_bytes, double_buffer
) -> None:
    """A flat row of more than 64 words written to a 16-byte aligned output row is decoded 16
    bytes of neighbouring words a lane (one code field, a scan of the lanes' payload bits,
    one 16-byte store); a flat row of 4-byte words that is not, of more than 32 words,
    written to an 8-byte aligned output row, 8 bytes a lane (64 columns a step); other rows
    a chunk at a time: every row at each output position modulo 16 bytes. Dense normal rows
    (escapes in most chunks, free bits in two runs), words whose free bits lie in any number
    of runs (the runs table's columns repeated), 8-bit codes, float16 pairs; widths whose
    word count is and is not a multiple of a lane's words (the last lane word by word, and a
    last 8-byte word half outside); 8-byte words of 33-64 columns (a chunk at a time)."""
    rng = np.random.default_rng(65)
    kind, width = table.rsplit(" ", 1)
    if kind == "dense":
        x = rng.standard_normal((200, int(width))).astype(np.float32)
    elif kind == "runs":
        x = np.tile(_runs_table(rng, word_bytes, 200), (1, 24))
    elif kind == "8-bit codes":
        values = rng.standard_normal(250).astype(np.float32)
        x = values[rng.integers(0, 200, (3000, int(width)))]
    else:
        x = rng.standard_normal((200, int(width))).astype(np.float16)
    table_ = ibp_graph.compress(x, tmp_path / "t.ibp", word_bytes=word_bytes, align=4)
    assert table_.params.num_words > 32
    if kind == "8-bit codes":
        assert int(table_.params.code_bits.max()) == 8
    first = rng.choice(x.shape[0], 12, replace=False)
    ids = np.concatenate([np.repeat(first, 16), rng.integers(0, x.shape[0], 80)])
    assert "flat" in _row_kinds(table_, first)
    out, error = fetch_on_host(lib, table_, ids, grid=2, warps=2, double_buffer=double_buffer)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))
    table_.close()


@pytest.mark.parametrize("word_bytes", [4, 8])
def test_8_byte_offset_variants_decode_like_the_4_byte_ones(lib, tmp_path, word_bytes) -> None:
    rng = np.random.default_rng(word_bytes)
    x = np.where(rng.random((200, 45)) < 0.1, rng.standard_normal((200, 45)), 0)
    x = x.astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", word_bytes=word_bytes)
    assert table.header.sections["offsets"].dtype.itemsize == 4
    ids = rng.integers(0, 200, 100)
    out, error = fetch_on_host(lib, table, ids, offsets_dtype="<u8")
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))


@pytest.mark.parametrize("align", [2, 4, 8, 16, 32])
def test_every_alignment_with_8_bit_codes(lib, tmp_path, align) -> None:
    rng = np.random.default_rng(align)
    values = rng.standard_normal(250).astype(np.float32)
    x = values[rng.integers(0, 200, (3000, 24))]  # 200 values a column: 8-bit codes
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=align)
    assert table.align == align and int(table.params.code_bits.max()) == 8
    ids = rng.integers(0, 3000, 120)
    out, error = fetch_on_host(lib, table, ids)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))


def test_255_clusters(lib, tmp_path) -> None:
    rng = np.random.default_rng(255)
    n = 2040
    c = (np.arange(n) % 255).astype(np.int64)
    x = ((c[:, None] * 0x01010101) ^ (np.arange(8)[None, :] * 0x10203)) & 0x7FFFFF00
    x = (x | rng.integers(0, 256, (n, 8))).astype(np.int32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", clusters=255)
    assert table.params.masks.shape[0] == 255 and int(table.cluster_ids.max()) >= 250
    ids = rng.integers(0, n, 150)
    out, error = fetch_on_host(lib, table, ids)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))


def test_one_warp_covers_far_more_rows_than_threads(lib, tmp_path) -> None:
    rng = np.random.default_rng(12)
    x = np.where(rng.random((500, 20)) < 0.2, rng.standard_normal((500, 20)), 0)
    x = x.astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    ids = rng.integers(0, 500, 700)
    out, error = fetch_on_host(lib, table, ids, grid=1, warps=1)  # 700 rows, 32 threads
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))


def test_out_of_range_ids_set_the_first_position_and_zero_their_rows(lib, tmp_path) -> None:
    x = (np.random.default_rng(3).random((50, 40)) < 0.1).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    ids = np.array([1, 50, 2, -7, 3])
    for grid in (1, 3):
        out, error = fetch_on_host(lib, table, ids, grid=grid)
        assert error.tolist() == [2, 0]  # 1 + the FIRST bad position, whichever warp saw it
        ok = [0, 2, 4]
        want = x[ids[ok]].view(np.uint8).reshape(len(ok), -1)
        assert np.array_equal(out[ok], want)
        assert (out[[1, 3]] == 0).all()  # written (zeros), never left uninitialised


def test_first_bad_position_wins_whatever_the_order_warps_report_it(lib, tmp_path) -> None:
    # Many bad ids spread over warps and blocks: warps that run later report smaller
    # positions only if the kernel keeps the minimum rather than the first report.
    x = (np.random.default_rng(5).random((30, 8)) < 0.3).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    ids = np.zeros(40, dtype=np.int64)
    ids[[7, 12, 33, 39]] = [30, -1, 99, 1 << 40]
    out, error = fetch_on_host(lib, table, ids, grid=2)
    assert error.tolist() == [8, 0]
    assert (out[[7, 12, 33, 39]] == 0).all()


def test_corrupt_row_sets_the_error_slot_and_is_zero_filled(lib, tmp_path) -> None:
    x = (np.random.default_rng(4).random((40, 64)) < 0.1).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    lengths = np.diff(table.offsets) * table.align
    row = int(np.argmax((lengths > 4) & (lengths < 64 * 4)))
    good = (row + 1) % 40
    # shorten the row's stored length: its fields now run past it
    table._offsets = table.offsets.copy()
    table._offsets[row + 1 :] -= 2
    out, error = fetch_on_host(lib, table, np.array([good, row, row]), grid=1)
    assert error.tolist() == [0, 2]
    assert (out[1:] == 0).all()  # no half-decoded row


@pytest.mark.parametrize("cut", ["payloads", "codes"])
def test_a_narrow_flat_row_cut_short_is_corrupt_beside_a_good_one(lib, tmp_path, cut) -> None:
    """Rows of at most HALF_ROW_BYTES bytes of words decode two a warp, one a half-warp: a
    flat row whose payloads (2 bytes cut) or codes (1 byte left) run past its stored length is
    zero-filled and reported, in either half, while the other half's row decodes."""
    x = np.random.default_rng(12).standard_normal((40, 100)).astype(np.float16)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    params = table.params
    assert params.num_words * params.word_bytes <= HALF_ROW_BYTES
    flat = [i for i in range(40) if _row_kinds(table, np.array([i])) == {"flat"}]
    first, second, row = flat[:3]  # rows before `row` keep their bytes
    length = int(table.offsets[row + 1] - table.offsets[row]) * table.align
    table._offsets = table.offsets.copy()
    table._offsets[row + 1 :] -= 2 if cut == "payloads" else length - 1
    # flat rows two a warp: the cut row in the second half, then in the first
    ids = np.array([first, row, row, second, second, first])
    for warps in (1, 2):
        out, error = fetch_on_host(lib, table, ids, grid=1, warps=warps)
        assert error.tolist() == [0, 2]
        assert (out[[1, 2]] == 0).all()  # no half-decoded row
        good = [0, 3, 4, 5]
        assert np.array_equal(out[good], x[ids[good]].view(np.uint8).reshape(len(good), -1))


@pytest.mark.parametrize("double_buffer", [False, True])
@pytest.mark.parametrize("word_bytes,align", [(4, 1), (8, 16)])
def test_a_row_longer_than_the_staging_buffer_is_refused_not_staged(
    lib, tmp_path, word_bytes, align, double_buffer
) -> None:
    """Buffers sized for a shorter longest row than the table has (offsets that do not match
    what the host was told): the rows that do not fit are zeroed and reported in error[1], the
    others decode exactly, and nothing is written past a buffer (the sanitized harness)."""
    rng = np.random.default_rng(7 + word_bytes)
    density = rng.random((300, 1)) * 0.6  # stored lengths spread over a wide range
    x = np.where(rng.random((300, 90)) < density, rng.standard_normal((300, 90)), 0)
    x = x.astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", word_bytes=word_bytes, align=align)
    starts = table.offsets[:-1].astype(np.int64) * table.align
    lengths = np.diff(table.offsets).astype(np.int64) * table.align
    told = int(np.median(lengths))
    plan = smem_plan(
        table.params.num_words, word_bytes, align, SMEM, 2 if double_buffer else 1, told
    )
    fits = ((starts & 15) + lengths + 15) // 16 * 4 + 2 <= plan.buf_words
    assert 0 < fits.sum() < fits.size
    ids = rng.integers(0, x.shape[0], 400)
    ids[:2] = [int(np.flatnonzero(fits)[0]), int(np.flatnonzero(~fits)[0])]
    out, error = fetch_on_host(
        lib, table, ids, longest_row=told, double_buffer=double_buffer, grid=2
    )
    assert error.tolist() == [0, 2]  # the first refused row's position, plus one
    ok = fits[ids]
    assert (out[~ok] == 0).all()
    want = x[ids[ok]].view(np.uint8).reshape(int(ok.sum()), -1)
    assert np.array_equal(out[ok], want)
    # Told the truth, the same rows all decode.
    out, error = fetch_on_host(lib, table, ids, double_buffer=double_buffer, grid=2)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))
    table.close()


@pytest.mark.parametrize("word_bytes,align,clusters", [(4, 1, 1), (8, 16, 3)])
def test_random_byte_damage_touches_only_the_damaged_rows(
    lib, tmp_path, word_bytes, align, clusters
) -> None:
    """Whatever a damaged row holds, the kernel stays inside its buffers (the sanitized
    harness checks every access: tests/simt/sanitize.py), rows whose bytes are intact decode
    exactly, and a row it reports as corrupt is zero-filled."""
    rng = np.random.default_rng(word_bytes + clusters)
    x = np.where(rng.random((300, 50)) < 0.1, rng.standard_normal((300, 50)), 0)
    x = x.astype(np.float32)
    table = ibp_graph.compress(
        x, tmp_path / "t.ibp", word_bytes=word_bytes, align=align, clusters=clusters
    )
    starts = table.offsets.astype(np.int64) * table.align
    section = np.asarray(table.rows_section).view(np.uint8)
    kept = ("params", "offsets", "header", "shape", "dtype_name", "align", "stored_bytes",
            "stored_row_range")  # fmt: skip
    undamaged = {a: getattr(table, a) for a in (*kept, "cluster_ids")}
    reported = 0
    for trial in range(4):
        damaged = section.copy()
        hit = rng.integers(0, damaged.size, damaged.size // 40)
        damaged[hit] ^= rng.integers(1, 256, hit.size).astype(np.uint8)
        view = SimpleNamespace(**undamaged, rows_section=damaged)
        ids = rng.integers(0, x.shape[0], 150)
        intact = np.ones(x.shape[0], dtype=bool)
        intact[np.searchsorted(starts, hit, side="right") - 1] = False
        for double_buffer in (False, True):
            out, error = fetch_on_host(lib, view, ids, double_buffer=double_buffer)
            assert error[0] == 0
            if error[1]:
                reported += 1
                assert not intact[ids[error[1] - 1]]
                assert (out[error[1] - 1] == 0).all()
            ok = intact[ids]
            assert 0 < ok.sum() < ids.size
            want = x[ids[ok]].view(np.uint8).reshape(int(ok.sum()), -1)
            assert np.array_equal(out[ok], want), f"trial {trial}: an intact row differs"
    assert reported > 0  # damage that makes fields run past a row's end is reported


# --------------------------------------------------------------------------------------------
# Sorted ids written back to the caller's positions (out_pos)
# --------------------------------------------------------------------------------------------


def _orders(rng: np.random.Generator, ids: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``(name, idx, out_pos)`` launches that must write what the identity launch over ``ids``
    writes: a random permutation, and the ids sorted as `CudaIBPTable(sort_ids=True)` does."""
    perm = rng.permutation(ids.size)
    _, order = torch.sort(torch.from_numpy(ids))
    order = order.numpy()
    return [("permutation", ids[perm], perm), ("sorted", ids[order], order)]


def _row_heads(
    table: ibp_graph.IBPTable, ids: np.ndarray, nbits: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(raw, bits)`` of rows ``ids``: stored raw (copied through), and the first ``nbits``
    bits of each stored row (bit 0 is an encoded row's G bit), ``(n, nbits)`` bool."""
    params = table.params
    offsets = table.offsets.astype(np.int64)
    starts = offsets[ids] * table.align
    raw = (offsets[ids + 1] * table.align - starts) >= params.num_words * params.word_bytes
    nbytes = -(-nbits // 8)
    section = np.concatenate(
        [np.asarray(table.rows_section).view(np.uint8), np.zeros(nbytes, np.uint8)]
    )
    head = section[starts[:, None] + np.arange(nbytes)]
    return raw, np.unpackbits(head, axis=1, bitorder="little")[:, :nbits].astype(bool)


def _row_kinds(table: ibp_graph.IBPTable, ids: np.ndarray) -> set[str]:
    """How the kernel meets rows ``ids``: "raw" (copied through), "flat" or "grouped"."""
    raw, bits = _row_heads(table, ids, 1)
    kinds = {"raw"} if raw.any() else set()
    return kinds | {"grouped" if g else "flat" for g in bits[~raw, 0].tolist()}


@pytest.mark.parametrize(
    "word_bytes,clusters,offsets_dtype", [(4, 1, None), (8, 1, None), (4, 2, "<u8"), (8, 3, "<u8")]
)
def test_fused_kernel_with_out_pos_writes_the_identity_order_bits(
    lib, tmp_path, word_bytes, clusters, offsets_dtype
) -> None:
    rng = np.random.default_rng(30 + word_bytes + clusters)
    kinds: set[str] = set()
    for name, x in _tables(rng):
        table = ibp_graph.compress(x, tmp_path / "t.ibp", word_bytes=word_bytes, clusters=clusters)
        ids = rng.integers(0, x.shape[0], 97)
        ids[:4] = [x.shape[0] - 1, 0, 0, 5]  # ends and repeats
        kinds |= _row_kinds(table, ids)
        want, error = fetch_on_host(lib, table, ids, offsets_dtype=offsets_dtype)
        assert error.tolist() == [0, 0], name
        assert np.array_equal(want, x[ids].view(np.uint8).reshape(ids.size, -1)), name
        for how, idx, pos in _orders(rng, ids):
            got, error = fetch_on_host(lib, table, idx, offsets_dtype=offsets_dtype, out_pos=pos)
            assert error.tolist() == [0, 0], f"{name} ({how})"
            assert np.array_equal(got, want), f"{name} ({how}): rows differ from identity order"
        table.close()
    assert kinds == {"raw", "flat", "grouped"}


def test_bad_ids_with_out_pos_report_the_callers_first_position(lib, tmp_path) -> None:
    rng = np.random.default_rng(31)
    x = (rng.random((30, 8)) < 0.3).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    ids = np.arange(40, dtype=np.int64) % 30
    bad = [7, 12, 33, 39]
    ids[bad] = [30, -1, 99, 1 << 40]  # sorted, -1 (position 12) comes first and 30 later
    want, error = fetch_on_host(lib, table, ids, grid=2)
    assert error.tolist() == [8, 0] and (want[bad] == 0).all()
    for how, idx, pos in _orders(rng, ids):
        for grid in (1, 3):
            got, error = fetch_on_host(lib, table, idx, grid=grid, out_pos=pos)
            assert error.tolist() == [8, 0], how  # 1 + the caller's first bad position
            assert np.array_equal(got, want), how  # zeros at the caller's bad positions


def _with_a_corrupt_row(tmp_path, seed: int) -> tuple[ibp_graph.IBPTable, np.ndarray, int]:
    """A table of 40 rows, one of them (not row 0) encoded and cut 2 bytes short, so that its
    fields run past its stored length: ``(table, rows, that row)``. Rows before it keep their
    bytes."""
    rng = np.random.default_rng(seed)
    x = (rng.random((40, 64)) < 0.1).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    lengths = np.diff(table.offsets) * table.align
    encoded = (lengths > 4) & (lengths < 64 * 4)
    encoded[0] = False
    row = int(np.argmax(encoded))
    table._offsets = table.offsets.copy()
    table._offsets[row + 1 :] -= 2
    return table, x, row


def test_a_corrupt_row_with_out_pos_reports_the_callers_position(lib, tmp_path) -> None:
    rng = np.random.default_rng(4)
    table, x, row = _with_a_corrupt_row(tmp_path, 4)
    good = 0
    ids = np.array([good, good, row, good, row])
    reverse = np.arange(ids.size)[::-1].copy()  # the corrupt row at 4 is met first
    for idx, pos in [(ids[reverse], reverse)] + [(i, p) for _, i, p in _orders(rng, ids)]:
        out, error = fetch_on_host(lib, table, idx, grid=1, out_pos=pos)
        assert error.tolist() == [0, 3]
        assert (out[[2, 4]] == 0).all()
        assert np.array_equal(out[[0, 1, 3]], x[[good] * 3].view(np.uint8).reshape(3, -1))


# --------------------------------------------------------------------------------------------
# Chunks of grouped rows that hold no code: code-0 entries, then payloads if there are free bits
# --------------------------------------------------------------------------------------------


def _chunk_bits(table: ibp_graph.IBPTable, ids: np.ndarray) -> np.ndarray:
    """``(n, C)`` bool: chunk q of encoded row ``ids[i]`` is grouped and holds no code."""
    c = -(-table.params.num_words // 32)
    raw, bits = _row_heads(table, ids, 1 + c)
    return ~raw[:, None] & bits[:, :1] & ~bits[:, 1:]


def _mixed_chunks(rng: np.random.Generator, rows: int) -> np.ndarray:
    """float32 rows of three 32-column chunks with no free bits or with some: 0/1 bag-of-words;
    values near 1.5 whose low mantissa bits vary (a few rows far off, with codes); mostly 1.0
    (code 0 is not zero bits)."""
    bow = (rng.random((rows, 64)) < 0.03).astype(np.float32)
    near = np.float32(1.5) + rng.random((rows, 32), dtype=np.float32) * np.float32(2**-12)
    far = rng.random((rows, 32)) < 0.02
    near[far] = rng.standard_normal(int(far.sum())).astype(np.float32) * 100
    return np.ascontiguousarray(np.hstack([bow[:, :32], near, 1 - bow[:, 32:]]))


@pytest.mark.parametrize("double_buffer", [False, True])
def test_chunks_without_codes_decode_with_and_without_free_bits(
    lib, tmp_path, double_buffer
) -> None:
    rng = np.random.default_rng(50)
    x = _mixed_chunks(rng, 400)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", threshold=0.9)
    free = np.add.reduceat(table.params.free_bits[0], [0, 32, 64])
    assert free[0] == 0 and free[1] > 0 and free[2] == 0
    ids = rng.integers(0, x.shape[0], 120)
    empty = _chunk_bits(table, ids)
    # Both kinds of chunk meet empty, and the middle one also holds codes in other rows.
    assert empty[:, 0].any() and empty[:, 1].any() and not empty[:, 1].all()
    want = x[ids].view(np.uint8).reshape(ids.size, -1)
    for grid, warps in [(1, 1), (3, 2)]:  # one warp decodes every row: no stale codes
        out, error = fetch_on_host(
            lib, table, ids, grid=grid, warps=warps, double_buffer=double_buffer
        )
        assert error.tolist() == [0, 0]
        assert np.array_equal(out, want), f"grid {grid} x {warps} warps: rows differ"


@pytest.mark.parametrize("double_buffer", [False, True])
def test_blocks_of_32_warps_decode_the_same_rows(lib, tmp_path, double_buffer) -> None:
    # The largest block a fetch may launch (block_warps=32, the kernels' __launch_bounds__):
    # every warp's staging share inside the block's shared memory, rows and errors as with
    # blocks of one warp.
    rng = np.random.default_rng(52)
    x = np.where(rng.random((500, 40)) < 0.3, rng.standard_normal((500, 40)), 0)
    table = ibp_graph.compress(x.astype(np.float32), tmp_path / "t.ibp")
    ids = rng.integers(0, x.shape[0], 150)
    ids[[3, 140]] = [500, -7]  # out of range: named at their positions, rows zeroed
    want, want_error = fetch_on_host(lib, table, ids, grid=1, warps=1)
    assert want_error.tolist() == [4, 0]
    got, error = fetch_on_host(lib, table, ids, grid=2, warps=32, double_buffer=double_buffer)
    assert error.tolist() == want_error.tolist()
    assert np.array_equal(got, want)


def test_a_row_whose_chunk_bits_run_past_its_length_is_corrupt(lib, tmp_path) -> None:
    """An all-zero row (every chunk empty: no code, no payload) is its header alone; cut short,
    only the header runs past its end, and it must still be reported."""
    rng = np.random.default_rng(51)
    x = (rng.random((20, 320)) < 0.05).astype(np.float32)
    x[-1] = 0
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    last = x.shape[0] - 1
    assert _chunk_bits(table, np.array([last])).all()  # 1 + 10 header bits: 2 bytes
    assert np.diff(table.offsets)[-1] == 2
    table._offsets = table.offsets.copy()
    table._offsets[-1] -= 1
    ids = np.array([0, last, 3, last])
    for double_buffer in (False, True):
        out, error = fetch_on_host(lib, table, ids, grid=1, double_buffer=double_buffer)
        assert error.tolist() == [0, 2]
        assert (out[[1, 3]] == 0).all()
        assert np.array_equal(out[[0, 2]], x[[0, 3]].view(np.uint8).reshape(2, -1))


# --------------------------------------------------------------------------------------------
# Grouped rows of clusters with no free bit: one pass, escapes placed by their rank
# --------------------------------------------------------------------------------------------


def _word_counts(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Bag-of-words counts: mostly 0, some 1, and a long tail (2..39) that the columns'
    dictionaries cannot hold, so those words escape."""
    x = np.zeros((rows, cols), np.float32)
    hit = rng.random((rows, cols)) < 0.08
    x[hit] = 1
    tail = hit & (rng.random((rows, cols)) < 0.3)
    x[tail] = rng.integers(2, 40, int(tail.sum()))
    return x


def _escapes(table: ibp_graph.IBPTable, x: np.ndarray) -> np.ndarray:
    """``(n, V)`` bool: word j of row i of ``x`` is escaped in ``table``'s encoding."""
    params = table.params
    n = x.shape[0]
    cluster = (
        np.zeros(n, np.intp) if table.cluster_ids is None else table.cluster_ids.astype(np.intp)
    )
    words = rows_to_words(x, table.dtype_name, params.word_bytes)
    lay = row_layout(words, params, None if params.num_clusters == 1 else cluster)
    return lay.code == params.escape[cluster]


@pytest.mark.parametrize("word_bytes,align,clusters", [(4, 1, 1), (8, 16, 2), (4, 4, 3)])
@pytest.mark.parametrize("double_buffer", [False, True])
def test_grouped_rows_without_free_bits_decode_their_escapes(
    lib, tmp_path, word_bytes, align, clusters, double_buffer
) -> None:
    rng = np.random.default_rng(60)
    x = _word_counts(rng, 300, 100)  # 4 chunks, the last of 4 columns
    table = ibp_graph.compress(
        x, tmp_path / "t.ibp", word_bytes=word_bytes, align=align, clusters=clusters
    )
    assert (table.params.free_bits == 0).all()
    ids = np.concatenate([np.arange(x.shape[0]), rng.integers(0, x.shape[0], 100)])
    assert "grouped" in _row_kinds(table, ids)  # 8-byte words also make some rows flat
    escaped = _escapes(table, x)
    # Rows with escapes in several chunks, and chunks with several escapes.
    assert ((escaped[:, :32].sum(1) >= 2) & (escaped[:, 32:64].sum(1) >= 1)).any()
    out, error = fetch_on_host(lib, table, ids, grid=2, warps=2, double_buffer=double_buffer)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))


@pytest.mark.parametrize("double_buffer", [False, True])
@pytest.mark.parametrize(
    "word_bytes,cols",
    [(4, 128), (4, 130), (4, 101), (8, 256), (8, 258), (8, 101), (4, 259)],
)
def test_a_lanes_neighbouring_columns_decode_every_mix_of_escapes(
    lib, tmp_path, word_bytes, cols, double_buffer
) -> None:
    """A grouped row without free bits at least half of whose chunks hold codes, written to a
    16-byte aligned output row, is decoded 16 bytes of neighbouring words a lane: rows where
    all of a lane's words escape, where one of them does, where none do, and where a lane's
    subgroup holds codes but the lane's words are all code 0; widths whose word count is and
    is not a multiple of the words a lane takes (the last lane word by word); 101 float32
    columns in 8-byte words leave the last word half outside the row; one span of 32 lanes
    and more than one. Rows written at other alignments, row 0 (no code) and row 5 (one
    chunk of codes) take the chunk-by-chunk pass: each row is decoded at every output
    position modulo 16 bytes."""
    rng = np.random.default_rng(63)
    x = _word_counts(rng, 240, cols)
    per_word = word_bytes // x.itemsize
    lane_cols = 16 // x.itemsize  # float32 columns in a lane's 16 bytes
    x[0] = 0
    x[1, :lane_cols] = [101, 103, 107, 109]  # every word of lane 0 escapes
    x[2:4] = 0
    x[2:4, ::32] = 1  # a code in every chunk
    x[2, 3 * lane_cols + 1] = 113  # one escape, in lane 3
    x[3, 2 * lane_cols + 1] = 1  # codes in the subgroup of lanes 2 and 3, none in lane 3
    x[4, -lane_cols:] = 127  # the last 16 bytes of the row escape
    x[5] = 0
    x[5, 40] = 113  # codes in one chunk
    table = ibp_graph.compress(x, tmp_path / "t.ibp", word_bytes=word_bytes, align=4)
    assert (table.params.free_bits == 0).all()
    V = table.params.num_words
    assert V == -(-cols // per_word)
    # Rows 0..5 at each output position modulo 16 bytes, then every row, then random ones.
    first = np.repeat(np.arange(6), 16)
    ids = np.concatenate([first, np.arange(x.shape[0]), rng.integers(0, x.shape[0], 60)])
    escaped = _escapes(table, x)
    lane_words = 16 // word_bytes
    assert escaped[1, :lane_words].all() and escaped[2].sum() == 1 and not escaped[3].any()
    if word_bytes == 4:  # (8-byte words make some rows flat)
        assert _row_kinds(table, np.arange(6)) == {"grouped"}
        no_code = _chunk_bits(table, np.arange(6))
        assert no_code[0].all() and (no_code[5].sum() == no_code.shape[1] - 1)
        assert (2 * (~no_code[1:5]).sum(axis=1) >= no_code.shape[1]).all()
    out, error = fetch_on_host(lib, table, ids, grid=2, warps=2, double_buffer=double_buffer)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))


@pytest.mark.parametrize("double_buffer", [False, True])
@pytest.mark.parametrize("distinct,code_bits", [(200, 8), (20, 5)])
def test_grouped_rows_with_wide_codes_decode(
    lib, tmp_path, distinct, code_bits, double_buffer
) -> None:
    """Dense rows train dictionaries of up to 255 whole words (8-bit codes, so a lane's four
    codes fill a 32-bit field), which sparse rows, grouped, then read."""
    rng = np.random.default_rng(64)
    values = np.arange(1, distinct + 1, dtype=np.float32)
    x = values[rng.integers(0, distinct, (8000, 130))]
    x[4000:][rng.random((4000, 130)) < 0.95] = 0
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=4)
    assert (table.params.free_bits == 0).all()
    assert int(table.params.code_bits.max()) == code_bits
    ids = np.concatenate([np.arange(3990, 4100), rng.integers(0, x.shape[0], 60)])
    assert "grouped" in _row_kinds(table, ids)
    out, error = fetch_on_host(lib, table, ids, grid=2, warps=2, double_buffer=double_buffer)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))


@pytest.mark.parametrize("double_buffer", [False, True])
@pytest.mark.parametrize("word_bytes,cols", [(4, 2100), (8, 2100), (8, 2101)])
def test_wide_grouped_rows_without_free_bits_decode_past_32_chunks(
    lib, tmp_path, word_bytes, cols, double_buffer
) -> None:
    """Rows of more than 32 chunks of 32 words (the chunks that hold codes are found 32 at a
    time), most chunks without a code, escapes past the 32nd chunk; 2,101 float32 columns in
    8-byte words leave the last word half outside the row. Row 0 has no chunk with a code,
    row 1 no chunk without one. The double-buffered kernel stores fewer chunks at a time."""
    rng = np.random.default_rng(62)
    x = _word_counts(rng, 200, cols)
    x[rng.random(x.shape) < 0.95] = 0  # about 0.4% of the words set
    x[0] = 0
    per_word = word_bytes // x.itemsize
    x[1, :: 32 * per_word] = 1  # one value in each chunk of 32 words
    table = ibp_graph.compress(x, tmp_path / "t.ibp", word_bytes=word_bytes, align=4)
    assert (table.params.free_bits == 0).all()
    V = table.params.num_words
    assert V > 32 * 32
    ids = np.concatenate([np.arange(x.shape[0]), rng.integers(0, x.shape[0], 60)])
    assert _row_kinds(table, ids) == {"grouped"}
    escaped = _escapes(table, x)
    assert escaped[:, 32 * 32 :].any() and escaped[:, : 32 * 32].any()
    chunk_bytes = 32 * word_bytes
    raw = x.view(np.uint8).reshape(x.shape[0], -1)
    raw = np.pad(raw, ((0, 0), (0, -raw.shape[1] % chunk_bytes)))
    chunk_set = (raw.reshape(x.shape[0], -1, chunk_bytes) != 0).any(-1)
    assert (~chunk_set).mean() > 0.5  # most chunks are their code-0 entries
    assert not chunk_set[0].any() and chunk_set[1].all()
    out, error = fetch_on_host(lib, table, ids, grid=2, warps=2, double_buffer=double_buffer)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))


def _counts_ending_with(tmp_path, last: np.ndarray) -> tuple[ibp_graph.IBPTable, np.ndarray]:
    """A word-count table (align 1) whose last row is ``last``, that row cut one byte short."""
    x = np.vstack([_word_counts(np.random.default_rng(61), 300, 100), last[None]])
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    assert (table.params.free_bits == 0).all()
    assert _row_kinds(table, np.array([x.shape[0] - 1])) == {"grouped"}
    table._offsets = table.offsets.copy()
    table._offsets[-1] -= 1
    return table, x


@pytest.mark.parametrize("tail", ["an escaped payload", "a code"])
def test_a_grouped_row_without_free_bits_cut_short_is_corrupt(lib, tmp_path, tail) -> None:
    """The row's last bits are an escaped word's payload (then the codes still fit), or, with
    no escape, a code."""
    last = np.zeros(100, np.float32)
    last[[3, 40, 41]] = 1
    if tail == "an escaped payload":
        last[[5, 70]] = [17, 33]
    table, x = _counts_ending_with(tmp_path, last)
    row = x.shape[0] - 1
    assert _escapes(table, x)[row].any() == (tail == "an escaped payload")
    ids = np.array([0, row, 7, row])
    for double_buffer in (False, True):
        out, error = fetch_on_host(lib, table, ids, grid=1, double_buffer=double_buffer)
        assert error.tolist() == [0, 2]
        assert (out[[1, 3]] == 0).all()  # no half-decoded row
        assert np.array_equal(out[[0, 2]], x[[0, 7]].view(np.uint8).reshape(2, -1))


# --------------------------------------------------------------------------------------------
# Bag-of-words rows of at most NO_FREE_HALF_ROW_BYTES bytes of words: two a warp
# --------------------------------------------------------------------------------------------


def _sparse_values(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """float32 rows with 5% of their words set to random values: every code 1 bit wide (the
    value 0, or escaped)."""
    return np.where(rng.random((rows, cols)) < 0.05, rng.standard_normal((rows, cols)), 0).astype(
        np.float32
    )


def _plant_lanes(x: np.ndarray, lane_cols: int) -> None:
    """Rows 0..4 of ``x``: no value; every word of lane 0 and of the last lane set (every
    word escapes); two, three and one words of neighbouring lanes; values in the row's last
    column only."""
    x[:5] = 0
    x[1, :lane_cols] = np.arange(101, 101 + lane_cols)
    x[1, -lane_cols:] = np.arange(201, 201 + lane_cols)
    x[2, [1, 2, lane_cols + 3, lane_cols + 4, lane_cols + 5]] = [7.5, 9.5, 11, 13, 17]
    x[3, 2 * lane_cols] = 19
    x[4, -1] = 23


@pytest.mark.parametrize("values", ["sparse", "counts"])
@pytest.mark.parametrize(
    "word_bytes,cols",
    [(4, 128), (4, 127), (4, 126), (4, 100), (4, 40), (4, 20), (8, 128), (8, 101), (8, 30)],
)
def test_bag_of_words_rows_decode_two_a_warp(lib, tmp_path, values, word_bytes, cols) -> None:
    """A table whose columns have no free bit, of at most NO_FREE_HALF_ROW_BYTES bytes of words
    a row, decodes its grouped rows two a warp, one a half-warp of lanes of 32 bytes of words:
    codes all 1 bit wide ("sparse": the escape test is one bit a word) or wider with a
    second dictionary entry ("counts"); a lane whose every word escapes (its escape count
    needs every bit of the vote), lanes with two and three, a row with none, and values in
    the row's last column; widths whose last lane is partly or wholly outside the row; rows
    written at every output alignment the width gives (127 and 126 float32 columns: 4- and
    8-byte aligned rows); odd request counts (the last pair's second half has no request),
    out-of-range ids in either half, and other orders (out_pos)."""
    rng = np.random.default_rng(70 + cols + word_bytes)
    x = _sparse_values(rng, 300, cols) if values == "sparse" else _word_counts(rng, 300, cols)
    lane_cols = 32 // x.itemsize  # float32 columns of a lane's 32 bytes
    _plant_lanes(x, min(lane_cols, cols))
    table = ibp_graph.compress(x, tmp_path / "t.ibp", word_bytes=word_bytes, align=4)
    params = table.params
    assert (params.free_bits == 0).all()
    assert params.num_words * word_bytes <= NO_FREE_HALF_ROW_BYTES
    assert (params.code_bits.max() == 1) == (values == "sparse")
    ids = np.concatenate([np.arange(x.shape[0]), rng.integers(0, x.shape[0], 61)])
    assert "grouped" in _row_kinds(table, ids)
    if word_bytes == 4:
        assert _escapes(table, x)[1].sum() == 2 * min(lane_cols, cols) or cols < 2 * lane_cols
    want = x[ids].view(np.uint8).reshape(ids.size, -1)
    for grid, warps in [(1, 1), (2, 3)]:
        out, error = fetch_on_host(lib, table, ids, grid=grid, warps=warps)
        assert error.tolist() == [0, 0]
        assert np.array_equal(out, want), f"grid {grid} x {warps} warps: rows differ"
    bad = ids.copy()
    bad[[6, 9]] = [x.shape[0], -3]  # the first half of a pair, then the second
    out, error = fetch_on_host(lib, table, bad, grid=2, warps=2)
    assert error.tolist() == [7, 0]
    good = np.setdiff1d(np.arange(ids.size), [6, 9])
    assert (out[[6, 9]] == 0).all() and np.array_equal(out[good], want[good])
    for how, idx, pos in _orders(rng, ids):
        out, error = fetch_on_host(lib, table, idx, out_pos=pos, grid=2, warps=2)
        assert error.tolist() == [0, 0], how
        assert np.array_equal(out, want), how


def test_bag_of_words_pairs_with_other_rows_decode_one_after_the_other(lib, tmp_path) -> None:
    """A pair of a bag-of-words table's rows that are not both grouped rows of clusters
    without free bits (a flat row, a row stored raw, a row of a cluster with free bits) is
    decoded by the whole warp, one row after the other, beside pairs taken two a warp."""
    rng = np.random.default_rng(75)
    x = _sparse_values(rng, 400, 128)
    x[:40] = rng.standard_normal((40, 128)).astype(np.float32)  # dense: flat or raw
    x[40:80, :64] = np.float32(1.5) + rng.random((40, 64), dtype=np.float32) * np.float32(
        2**-12
    )  # free bits in another cluster
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=4, clusters=3)
    params = table.params
    cluster = np.asarray(table.cluster_ids).astype(np.intp)
    no_free = params.free_bits.sum(axis=1) == 0
    assert no_free[0] and not no_free.all()
    ids = rng.integers(0, x.shape[0], 301)
    assert {"grouped", "flat"} <= _row_kinds(table, ids) and not no_free[cluster[ids]].all()
    out, error = fetch_on_host(lib, table, ids, grid=2, warps=2)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, x[ids].view(np.uint8).reshape(ids.size, -1))


@pytest.mark.parametrize("tail", ["an escaped payload", "a code"])
def test_a_bag_of_words_row_cut_short_is_corrupt_in_either_half(lib, tmp_path, tail) -> None:
    """A grouped row of 128 words (two a warp) whose last payload or last code runs past its
    stored length is zero-filled and reported, in the first half of a pair and in the second,
    while the other half's row decodes."""
    rng = np.random.default_rng(76)
    last = np.zeros(128, np.float32)
    last[[3, 40, 90]] = 1
    if tail == "an escaped payload":
        last[[5, 127]] = [17, 33]
    x = np.vstack([_word_counts(rng, 300, 128), last[None]])
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    assert (table.params.free_bits == 0).all()
    row = x.shape[0] - 1
    assert _row_kinds(table, np.array([row])) == {"grouped"}
    assert _escapes(table, x)[row].any() == (tail == "an escaped payload")
    table._offsets = table.offsets.copy()
    table._offsets[-1] -= 1
    ids = np.array([row, 0, 7, row, 9])
    out, error = fetch_on_host(lib, table, ids, grid=1)
    assert error.tolist() == [0, 1]
    assert (out[[0, 3]] == 0).all()  # no half-decoded row
    assert np.array_equal(out[[1, 2, 4]], x[[0, 7, 9]].view(np.uint8).reshape(3, -1))


# --------------------------------------------------------------------------------------------
# Double buffering (ibp_fetch_decode_db_*): the next row staged while the current one decodes
# --------------------------------------------------------------------------------------------


@pytest.fixture(params=["copies at wait", "copies at issue"])
def copy_mode(request, lib):
    """Run the asynchronous copies when their group is waited for (a read before the wait
    sees stale bytes), or at once (a buffer overwritten while lanes read it can show)."""
    lib.simt_set_copy_at_issue(ctypes.c_int(request.param == "copies at issue"))
    yield request.param
    lib.simt_set_copy_at_issue(ctypes.c_int(0))


@pytest.mark.parametrize(
    "word_bytes,align,clusters,offsets_dtype",
    [(4, "auto", 1, None), (8, 16, 3, None), (4, 1, 2, "<u8"), (8, 4, 1, "<u8")],
)
def test_double_buffered_kernel_matches_the_numpy_decoder(
    lib, tmp_path, copy_mode, word_bytes, align, clusters, offsets_dtype
) -> None:
    rng = np.random.default_rng(40 + word_bytes + clusters)
    kinds: set[str] = set()
    for name, x in _tables(rng):
        table = ibp_graph.compress(
            x, tmp_path / "t.ibp", word_bytes=word_bytes, align=align, clusters=clusters
        )
        ids = rng.integers(0, x.shape[0], 90)
        ids[:3] = [0, x.shape[0] - 1, 0]  # ends and a repeat
        kinds |= _row_kinds(table, ids)
        # One block of two warps: 45 rows a warp, each staged while the one before decodes.
        out, error = fetch_on_host(
            lib, table, ids, grid=1, offsets_dtype=offsets_dtype, double_buffer=True
        )
        assert error.tolist() == [0, 0], name
        want = np.ascontiguousarray(x[ids]).view(np.uint8).reshape(ids.size, -1)
        assert np.array_equal(out, want), f"{name} ({copy_mode}): rows differ from the table"
        table.close()
    assert kinds == {"raw", "flat", "grouped"}


def test_double_buffered_kernel_writes_what_the_one_buffer_kernel_writes(
    lib, tmp_path, copy_mode
) -> None:
    """Bad ids, a corrupt row, output positions, warps with 0, 1 or many rows: same bytes."""
    rng = np.random.default_rng(41)
    table, x, corrupt = _with_a_corrupt_row(tmp_path, 41)
    ids = rng.integers(0, corrupt, 70)  # rows before `corrupt` keep their bytes
    ids[[0, 9, 33, 69]] = [40, -1, corrupt, 1 << 40]  # bad first and last, a corrupt row
    seen = set()
    for n in (1, 2, 3, 5, 70):  # 4 warps: some with no row, one row, or many
        part = ids[:n]
        for how, idx, pos in [("identity", part, None), *_orders(rng, part)]:
            want, want_err = fetch_on_host(lib, table, idx, grid=2, out_pos=pos)
            got, err = fetch_on_host(lib, table, idx, grid=2, out_pos=pos, double_buffer=True)
            assert err.tolist() == want_err.tolist(), f"{n} ids, {how}"
            assert np.array_equal(got, want), f"{n} ids, {how}: rows differ"
            seen.add(tuple(err.tolist()))
    assert {(1, 0), (1, 34)} <= seen  # a bad id first; then a corrupt row as well
    got, err = fetch_on_host(lib, table, ids, grid=1, warps=1, double_buffer=True)
    assert err.tolist() == [1, 34] and (got[[0, 9, 33, 69]] == 0).all()
    good = np.setdiff1d(np.arange(70), [0, 9, 33, 69])
    assert np.array_equal(got[good], x[ids[good]].view(np.uint8).reshape(good.size, -1))


def _raw_gather_on_host(
    lib, table: np.ndarray, ids: np.ndarray, out: np.ndarray, vec: int, out_pos=None, threads=64
):
    error = np.zeros(2, dtype=np.int32)
    n, width = out.shape
    if out_pos is not None:
        out_pos = np.ascontiguousarray(out_pos, dtype=np.int64)
    lib.simt_raw_gather(
        ctypes.c_int(vec),
        _ptr(table),
        _ptr(ids),
        _ptr(out_pos),
        _ptr(out),
        error.ctypes.data_as(ctypes.POINTER(ctypes.c_int)),
        ctypes.c_longlong(n),
        ctypes.c_longlong(table.shape[0]),
        ctypes.c_longlong(width),
        ctypes.c_uint(2),
        ctypes.c_uint(threads),
    )
    return error


@pytest.mark.parametrize("width", [512, 24, 12, 6, 7])
def test_raw_gather_matches(lib, width: int) -> None:
    rng = np.random.default_rng(width)
    table = rng.integers(0, 256, (100, width), dtype=np.uint8)
    ids = rng.integers(0, 100, 77).astype(np.int64)
    out = np.zeros((77, width), dtype=np.uint8)
    vec = vector_bytes(width, table.ctypes.data, out.ctypes.data)
    assert vec == {512: 16, 24: 8, 12: 4, 6: 2, 7: 1}[width]
    error = _raw_gather_on_host(lib, table, ids, out, vec)
    assert error.tolist() == [0, 0]
    assert np.array_equal(out, table[ids])


def _aligned_table(rng: np.random.Generator, rows: int, width: int) -> np.ndarray:
    """A ``(rows, width)`` uint8 table at a 16-byte-aligned address, 16 bytes readable after."""
    raw = np.zeros(rows * width + 48, dtype=np.uint8)
    at = -raw.ctypes.data % 16
    table = raw[at : at + rows * width].reshape(rows, width)
    table[:] = rng.integers(0, 256, table.shape, dtype=np.uint8)
    return table


@pytest.mark.parametrize("width", [12, 20, 36, 5732])
def test_lines_kernel_gathers_rows_of_any_multiple_of_4_bytes(lib, width: int) -> None:
    rng = np.random.default_rng(width)
    table = _aligned_table(rng, 50, width)
    ids = rng.integers(0, 50, 90).astype(np.int64)
    ids[:3] = [49, 0, 49]
    ids[[10, 60]] = [50, -1]
    out = np.full((90, width), 0xEE, dtype=np.uint8)
    error = _raw_gather_on_host(lib, table, ids, out, 0)  # 0: ibp_raw_gather_lines
    assert error.tolist() == [11, 0]
    assert (out[[10, 60]] == 0).all()
    ok = np.setdiff1d(np.arange(90), [10, 60])
    assert np.array_equal(out[ok], table[ids[ok]])


@pytest.mark.parametrize("width", [512, 5732])
def test_raw_gather_in_blocks_of_32_warps(lib, width: int) -> None:
    # The largest block a fetch may launch (block_warps=32): 64 warps over 2 blocks.
    rng = np.random.default_rng(width + 32)
    table = _aligned_table(rng, 60, width)
    ids = rng.integers(0, 60, 100).astype(np.int64)
    ids[77] = 60
    out = np.full((100, width), 0xEE, dtype=np.uint8)
    vec = 16 if width == 512 else 0  # 0: ibp_raw_gather_lines
    error = _raw_gather_on_host(lib, table, ids, out, vec, threads=1024)
    assert error.tolist() == [78, 0] and (out[77] == 0).all()
    ok = np.setdiff1d(np.arange(100), [77])
    assert np.array_equal(out[ok], table[ids[ok]])


def test_raw_gather_bad_ids_first_position_and_zero_rows(lib) -> None:
    rng = np.random.default_rng(1)
    table = rng.integers(0, 256, (20, 48), dtype=np.uint8)
    ids = rng.integers(0, 20, 70).astype(np.int64)
    ids[[5, 40, 69]] = [-3, 20, 1 << 50]
    out = np.full((70, 48), 0xEE, dtype=np.uint8)
    error = _raw_gather_on_host(lib, table, ids, out, vector_bytes(48, table.ctypes.data))
    assert error.tolist() == [6, 0]
    assert (out[[5, 40, 69]] == 0).all()
    ok = np.setdiff1d(np.arange(70), [5, 40, 69])
    assert np.array_equal(out[ok], table[ids[ok]])


@pytest.mark.parametrize(
    "width,vec", [(512, 16), (24, 8), (12, 4), (6, 2), (7, 1), (20, 0), (5732, 0)]
)
def test_raw_gather_with_out_pos_writes_the_identity_order_bytes(lib, width, vec) -> None:
    rng = np.random.default_rng(width)
    table = _aligned_table(rng, 100, width)
    n = 24 if width > 1000 else 77  # each lane is a thread here
    ids = rng.integers(0, 100, n).astype(np.int64)
    ids[:3] = [99, 0, 99]
    bad = [3, n - 5]
    ids[bad] = [100, -5]  # sorted, -5 (the later position) comes first
    ok = np.setdiff1d(np.arange(n), bad)
    want = np.full((n, width), 0xEE, dtype=np.uint8)
    if vec:
        assert vector_bytes(width, table.ctypes.data, want.ctypes.data) == vec
    assert _raw_gather_on_host(lib, table, ids, want, vec).tolist() == [4, 0]
    assert (want[bad] == 0).all() and np.array_equal(want[ok], table[ids[ok]])
    for how, idx, pos in _orders(rng, ids):
        got = np.full((n, width), 0xEE, dtype=np.uint8)
        error = _raw_gather_on_host(lib, table, idx, got, vec, out_pos=pos)
        assert error.tolist() == [4, 0], how  # 1 + the caller's first bad position
        assert np.array_equal(got, want), how


def test_incompressible_file_rows_are_the_table(lib, tmp_path) -> None:
    """The raw bypass reads the row section as the table: check that premise on real bytes."""
    rng = np.random.default_rng(8)
    x = rng.integers(0, 2**32, (64, 32), dtype=np.uint64).astype(np.uint32)
    table = ibp_graph.compress(x.view(np.float32), tmp_path / "n.ibp", align=16)
    assert raw_bypass(table)
    rows = np.asarray(table.rows_section).view(np.uint8)[: x.nbytes].reshape(64, -1)
    assert np.array_equal(rows, x.view(np.uint8).reshape(64, -1))


def test_fused_kernel_decodes_the_real_tables(lib, tmp_path, real_table_rows) -> None:
    rng = np.random.default_rng(5)
    for name, x in real_table_rows:
        for clusters in (1, 2) if x.shape[1] <= 1000 else (1,):  # fitting k=2 on wide rows is slow
            path = tmp_path / f"{name}-{clusters}.ibp"
            table = ibp_graph.compress(x, path, clusters=clusters, progress=False)
            ids = rng.integers(0, x.shape[0], 24)  # each lane is a thread here: keep it short
            out, error = fetch_on_host(lib, table, ids)
            assert error.tolist() == [0, 0], name
            want = x[ids].view(np.uint8).reshape(ids.size, -1)
            assert np.array_equal(out, want), f"{name} (k={clusters}): rows differ"
            table.close()
