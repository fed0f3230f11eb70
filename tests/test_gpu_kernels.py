"""The GPU paths that no CPU test can reach, each against the NumPy reference, bit for bit.

Kernel variants (8-byte offsets, wide rows with more than 48 KB of shared memory, every
alignment, 8-bit codes, 255 clusters), grids far smaller than the work, error slots (the
first bad position, zero-filled rows), sorted ids written back to the caller's positions
(``sort_ids``), the double-buffered kernel (``double_buffer``), rows in device memory, the
ends of mapped memory, streams (two at once, ``record_stream`` under allocator reuse,
overlap with training), UVA graphs, pinned page kinds and outputs over 2 GiB.
`benchmarks/gpu_session.sh` runs them in its ``tests`` stage, and the ones not marked
``slow`` under compute-sanitizer (``sanitize``).
Skipped without a GPU.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import mmap
import os

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph.errors import IBPFormatError, IBPInputError

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CUDA = "cuda"
# Under compute-sanitizer (the GPU session's sanitize stage sets this), launches run one to
# two orders of magnitude slower: the largest batches shrink, every case still runs.
SANITIZED = bool(os.environ.get("IBP_GRAPH_SANITIZER"))


# racecheck checks shared-memory accesses, and of the kernels only the fused fetch has shared
# memory: under racecheck the tests that launch no fused fetch kernel skip.
no_shared_memory = pytest.mark.skipif(
    os.environ.get("IBP_GRAPH_SANITIZER") == "racecheck",
    reason="launches no kernel with shared memory, all that racecheck checks",
)


def _n(full: int) -> int:
    """A batch size: ``full``, or a tenth of it under compute-sanitizer."""
    return full // 10 if SANITIZED else full


def _sparse(rng: np.random.Generator, n: int, d: int, p: float = 0.05) -> np.ndarray:
    x = np.where(rng.random((n, d)) < p, rng.standard_normal((n, d)), 0)
    return x.astype(np.float32)


def _dense(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Normal float32 rows: stored at about 0.85 of their width."""
    return rng.standard_normal((n, d)).astype(np.float32)


def _bits_equal(got: torch.Tensor, want: np.ndarray) -> bool:
    g = got.detach().cpu().contiguous().view(torch.uint8).numpy().reshape(len(want), -1)
    w = np.ascontiguousarray(want).view(np.uint8).reshape(len(want), -1)
    return np.array_equal(g, w)


def _table(x: np.ndarray, tmp_path, name: str = "t.ibp", **kw):
    from ibp_graph.cuda_table import CudaIBPTable

    max_blocks = kw.pop("max_blocks", None)
    double_buffer = kw.pop("double_buffer", False)
    ibp_graph.compress(x, tmp_path / name, progress=False, **kw)
    return CudaIBPTable(
        tmp_path / name, device=CUDA, max_blocks=max_blocks, double_buffer=double_buffer
    )


def _ids(rng: np.random.Generator, num_rows: int, n: int) -> torch.Tensor:
    ids = rng.integers(0, num_rows, n)
    ids[:2] = [0, num_rows - 1]
    return torch.from_numpy(ids).to(CUDA)


def _launch(codec, idx: torch.Tensor, *, max_blocks=None, double_buffer=False):
    """Launch the fused kernel directly: (out bytes, error slots) after a synchronise."""
    from ibp_graph.kernels.fetch_decode import fetch_decode

    out = torch.full((idx.numel(), codec.row_bytes), 0xEE, dtype=torch.uint8, device=CUDA)
    error = torch.zeros(2, dtype=torch.int32, device=CUDA)
    fetch_decode(codec, idx, out, error, max_blocks=max_blocks, double_buffer=double_buffer)
    torch.cuda.synchronize()
    return out, error.tolist()


# --------------------------------------------------------------------------------------------
# Kernel variants
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("word_bytes", [4, 8])
def test_8_byte_offset_variants_decode_like_the_4_byte_ones(tmp_path, word_bytes) -> None:
    rng = np.random.default_rng(word_bytes)
    x = _sparse(rng, 700, 61)
    with _table(x, tmp_path, word_bytes=word_bytes) as table:
        assert table.codec.offsets.dtype == torch.int32
        wide = dataclasses.replace(table.codec, offsets=table.codec.offsets.to(torch.int64))
        idx = _ids(rng, 700, 3000)
        out4, err4 = _launch(table.codec, idx)
        out8, err8 = _launch(wide, idx)
        assert err4 == err8 == [0, 0]
        assert torch.equal(out4, out8) and _bits_equal(out8, x[idx.cpu().numpy()])


def test_rows_wider_than_48_kb_of_shared_memory_per_block(tmp_path) -> None:
    from ibp_graph.kernels.fetch_decode import DEFAULT_SMEM

    rng = np.random.default_rng(2)
    # 16 KiB rows, half of them dense (some stored raw): buffers for the longest stored row
    # make 8 warps need about 165 KB a block.
    x = np.concatenate([_sparse(rng, 32, 4096, p=0.02), _dense(rng, 32, 4096)])
    with _table(x, tmp_path) as table:
        props = torch.cuda.get_device_properties(0)
        plan = table.codec.plan(props.shared_memory_per_block_optin)
        assert plan.bytes_per_block > DEFAULT_SMEM
        idx = _ids(rng, 64, 500)
        assert _bits_equal(table.fetch(idx), x[idx.cpu().numpy()])


@pytest.mark.parametrize("double_buffer", [False, True])
def test_rows_longer_than_the_codec_says_are_refused_not_staged(tmp_path, double_buffer) -> None:
    """Buffers sized for a longest row shorter than the table's: the rows that do not fit are
    zeroed and reported in error[1] (the first position), the others decode exactly."""
    rng = np.random.default_rng(6)
    density = rng.random((2000, 1)) * 0.6  # stored lengths spread over a wide range
    x = np.where(rng.random((2000, 90)) < density, rng.standard_normal((2000, 90)), 0)
    x = x.astype(np.float32)
    with _table(x, tmp_path, align=1) as table:
        lengths = np.diff(table.cpu_table.offsets).astype(np.int64)
        starts = table.cpu_table.offsets[:-1].astype(np.int64)
        told = dataclasses.replace(table.codec, longest_row=int(np.median(lengths)))
        props = torch.cuda.get_device_properties(0)
        plan = told.plan(props.shared_memory_per_block_optin, 2 if double_buffer else 1)
        fits = ((starts & 15) + lengths + 15) // 16 * 4 + 2 <= plan.buf_words
        assert 0 < fits.sum() < fits.size
        ids = _ids(rng, 2000, _n(8000))
        first = [int(np.flatnonzero(fits)[0]), int(np.flatnonzero(~fits)[0])]
        ids[:2] = torch.tensor(first, device=CUDA)
        out, error = _launch(told, ids, double_buffer=double_buffer)
        assert error == [0, 2]
        ok = torch.from_numpy(fits).to(CUDA)[ids]
        assert (out[~ok] == 0).all()
        assert _bits_equal(out[ok], x[ids[ok].cpu().numpy()])
        out, error = _launch(table.codec, ids, double_buffer=double_buffer)  # told the truth
        assert error == [0, 0] and _bits_equal(out, x[ids.cpu().numpy()])


def test_rows_too_wide_for_shared_memory_are_a_clear_error(tmp_path) -> None:
    rng = np.random.default_rng(3)
    x = _dense(rng, 4, 64_000)  # 250 KiB rows stored in about 190 KB: with the codes, more
    # shared memory than a block gets
    with _table(x, tmp_path) as table:
        assert not table.bypass
        with pytest.raises(ValueError, match="shared memory per warp"):
            table.fetch(torch.zeros(1, dtype=torch.int64, device=CUDA))


def test_a_bag_of_words_as_wide_decodes_its_short_stored_rows(tmp_path) -> None:
    """The same width, 1% of it non-zero: rows stored in about 4 KB, staged in buffers sized
    for them (a raw-sized buffer would not fit a block)."""
    rng = np.random.default_rng(4)
    x = _sparse(rng, 6, 64_000, p=0.01)
    with _table(x, tmp_path) as table:
        longest = table.cpu_table.stored_row_range[1]
        assert table.codec.longest_row == longest < 64_000 * 4 // 20
        idx = torch.tensor([5, 0, 3, 3, 1], device=CUDA)
        assert _bits_equal(table.fetch(idx), x[[5, 0, 3, 3, 1]])


@pytest.mark.parametrize("align", [2, 4, 8, 16, 32])
def test_every_alignment_with_8_bit_codes(tmp_path, align) -> None:
    rng = np.random.default_rng(align)
    values = rng.standard_normal(250).astype(np.float32)
    x = values[rng.integers(0, 200, (3000, 24))]  # 200 values a column: 8-bit codes
    with _table(x, tmp_path, align=align) as table:
        assert table.cpu_table.align == align
        assert int(table.cpu_table.params.code_bits.max()) == 8
        idx = _ids(rng, 3000, 5000)
        assert _bits_equal(table.fetch(idx), x[idx.cpu().numpy()])


def _many_clusters(n: int = 2040) -> np.ndarray:
    rng = np.random.default_rng(255)
    c = (np.arange(n) % 255).astype(np.int64)
    j = np.arange(8)
    x = ((c[:, None] * 0x01010101) ^ (j[None, :] * 0x10203)) & 0x7FFFFF00
    return (x | rng.integers(0, 256, (n, 8))).astype(np.int32)


@pytest.mark.slow
def test_255_clusters(tmp_path) -> None:
    x = _many_clusters()
    with _table(x, tmp_path, clusters=255) as table:
        assert table.codec.masks.shape[0] == 255
        assert int(table.codec.cluster_ids.max()) >= 250
        idx = _ids(np.random.default_rng(0), x.shape[0], 4000)
        assert _bits_equal(table.fetch(idx), x[idx.cpu().numpy()])


# --------------------------------------------------------------------------------------------
# Double buffering: the next row staged with cp.async while the current one decodes
# --------------------------------------------------------------------------------------------


def _stored_bytes(table) -> np.ndarray:
    cpu = table.cpu_table
    return np.asarray(cpu.rows_section).view(np.uint8)[: cpu.stored_bytes]


def _rows_in_gpu_memory(table) -> torch.Tensor:
    """A copy of ``table``'s stored rows in GPU memory, with the 16 readable bytes past them."""
    stored = _stored_bytes(table)
    on_gpu = torch.zeros(stored.size + 16, dtype=torch.uint8, device=CUDA)
    on_gpu[: stored.size] = torch.from_numpy(stored.copy()).to(CUDA)
    return on_gpu


@pytest.mark.parametrize("word_bytes,offsets", [(4, torch.int32), (8, torch.int64)])
def test_double_buffered_kernel_gives_the_one_buffer_bits(tmp_path, word_bytes, offsets) -> None:
    rng = np.random.default_rng(20 + word_bytes)
    dense = rng.standard_normal((1500, 64)).astype(np.float32)
    for name, x in [
        ("sparse", _sparse(rng, 3000, 61)),
        ("dense and sparse", np.concatenate([_sparse(rng, 1500, 64), dense])),
        ("wide bag of words", (rng.random((400, 3000)) < 0.02).astype(np.float32)),
    ]:
        with _table(x, tmp_path, word_bytes=word_bytes) as table:
            codec = dataclasses.replace(table.codec, offsets=table.codec.offsets.to(offsets))
            on_gpu = _rows_in_gpu_memory(table)
            n = _n(6000)
            ids = _ids(rng, x.shape[0], n)
            bad = ids.clone()
            bad_at = [0, n // 8, n - 1]
            bad[bad_at] = torch.tensor([-1, x.shape[0], 1 << 40], device=CUDA)
            for rows_ptr in (codec.rows_ptr, on_gpu.data_ptr()):  # pinned, device memory
                where = dataclasses.replace(codec, rows_ptr=rows_ptr)
                for max_blocks in (None, 1, 2):  # 1 and 2: hundreds of rows a warp
                    for idx in (ids, bad):
                        want = _launch(where, idx, max_blocks=max_blocks)
                        got = _launch(where, idx, max_blocks=max_blocks, double_buffer=True)
                        assert got[1] == want[1], (name, max_blocks)
                        assert torch.equal(got[0], want[0]), (name, max_blocks)
                assert got[1] == [1, 0] and (got[0][bad_at] == 0).all()
                want = x[ids.cpu().numpy()]
                assert _bits_equal(_launch(where, ids, double_buffer=True)[0], want)


def _two_a_warp_match_one_a_warp(table, x: np.ndarray, ids: torch.Tensor) -> None:
    """Rows ``ids`` of ``table`` (holding ``x``) decode to their bits in the one-buffer kernel,
    from pinned and device memory, at tiny and full grids; with three bad ids among them
    (positions 1, the middle and the last) the one-buffer kernel writes what the
    double-buffered one (a row a warp) writes, and both report position 1."""
    codec, n = table.codec, ids.numel()
    on_gpu = _rows_in_gpu_memory(table)
    bad = ids.clone()
    bad[[1, n // 2, n - 1]] = torch.tensor([-1, x.shape[0], 1 << 40], device=CUDA)
    for rows_ptr in (codec.rows_ptr, on_gpu.data_ptr()):
        where = dataclasses.replace(codec, rows_ptr=rows_ptr)
        for max_blocks in (None, 1):
            out, error = _launch(where, ids, max_blocks=max_blocks)
            assert error == [0, 0] and _bits_equal(out, x[ids.cpu().numpy()])
            got, error = _launch(where, bad, max_blocks=max_blocks)
            want = _launch(where, bad, max_blocks=max_blocks, double_buffer=True)
            assert error == want[1] == [2, 0] and torch.equal(got, want[0])


def test_narrow_rows_two_a_warp_give_the_one_row_a_warp_bits(tmp_path) -> None:
    """Rows of at most HALF_ROW_BYTES bytes of words decode two a warp in the one-buffer
    kernel (flat pairs a half-warp each, other pairs one row after the other), one a warp in
    the double-buffered one: float16 pairs (free bits in three runs), flat and grouped rows,
    bad ids, an odd count, from pinned and device memory, at tiny and full grids."""
    from ibp_graph.kernels.fetch_decode import HALF_ROW_BYTES

    rng = np.random.default_rng(31)
    half = rng.standard_normal((3000, 100)).astype(np.float16)
    half[::3, 40:] = 0  # grouped rows among the flat ones
    with _table(half, tmp_path) as table:
        assert table.codec.num_words * table.codec.word_bytes <= HALF_ROW_BYTES
        _two_a_warp_match_one_a_warp(table, half, _ids(rng, half.shape[0], _n(6001)))


def test_bag_of_words_rows_two_a_warp_give_the_one_row_a_warp_bits(tmp_path) -> None:
    """A table whose columns have no free bit decodes rows of up to NO_FREE_HALF_ROW_BYTES
    bytes of words two a warp in the one-buffer kernel (grouped pairs a half-warp each, 32
    bytes of words a lane), one a warp in the double-buffered one: 5%-sparse values (1-bit
    codes) and word counts (wider codes), flat and raw rows among them, bad ids, an odd count,
    from pinned and device memory, at tiny and full grids."""
    from ibp_graph.kernels.fetch_decode import NO_FREE_HALF_ROW_BYTES

    rng = np.random.default_rng(32)
    sparse = np.where(rng.random((3000, 128)) < 0.05, rng.standard_normal((3000, 128)), 0)
    hit = rng.random((3000, 100)) < 0.08
    counts = hit * np.where(rng.random((3000, 100)) < 0.3, rng.integers(2, 40, (3000, 100)), 1)
    for x in (sparse.astype(np.float32), counts.astype(np.float32)):
        x[:5] = rng.standard_normal((5, x.shape[1]))  # flat or raw rows among them
        with _table(x, tmp_path) as table:
            codec = table.codec
            assert codec.first_cluster_no_free
            assert codec.num_words * codec.word_bytes <= NO_FREE_HALF_ROW_BYTES
            ids = _ids(rng, x.shape[0], _n(6001))
            ids[:5] = torch.arange(5, device=CUDA)
            _two_a_warp_match_one_a_warp(table, x, ids)


def test_double_buffered_tables_fetch_the_same_rows_and_errors(tmp_path) -> None:
    rng = np.random.default_rng(23)
    # 16 KiB rows, half of them dense: two buffers a warp, well over 48 KB a block.
    x = np.concatenate([_sparse(rng, 32, 4096, p=0.02), _dense(rng, 32, 4096)])
    with _table(x, tmp_path, double_buffer=True) as table:
        assert table.double_buffer
        props = torch.cuda.get_device_properties(0)
        assert table.codec.plan(props.shared_memory_per_block_optin, 2).bytes_per_block > (
            48 * 1024
        )
        idx = _ids(rng, 64, 500)
        assert _bits_equal(table.fetch(idx), x[idx.cpu().numpy()])
        idx[300] = 64
        with pytest.raises(IBPInputError, match=r"row index 64 \(at position 300\)"):
            table.fetch(idx)
    wide = _dense(rng, 4, 36_000)  # 141 KB rows stored in about 108 KB: one buffer fits, not two
    with _table(wide, tmp_path, name="w.ibp", double_buffer=True) as table:
        with pytest.raises(ValueError, match="double-buffered rows .* one buffer"):
            table.fetch(torch.zeros(1, dtype=torch.int64, device=CUDA))
        table.double_buffer = False
        idx = torch.tensor([3, 0, 2], device=CUDA)
        assert _bits_equal(table.fetch(idx), wide[[3, 0, 2]])


# --------------------------------------------------------------------------------------------
# Grids smaller than the work
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_blocks", [1, 2])
def test_tiny_grids_cover_far_more_rows_than_threads(tmp_path, max_blocks) -> None:
    from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable
    from ibp_graph.kernels.sample_neighbors import kernel_sample

    rng = np.random.default_rng(max_blocks)
    x = _sparse(rng, 5000, 40)
    ibp_graph.compress(x, tmp_path / "t.ibp", progress=False)
    idx = _ids(rng, 5000, _n(40_000))  # 40k rows (4k sanitized) for at most 2 x 8 warps
    want = x[idx.cpu().numpy()]
    with CudaIBPTable(tmp_path / "t.ibp", device=CUDA, max_blocks=max_blocks) as table:
        assert _bits_equal(table.fetch(idx), want)
    with PinnedRawTable(x, device=CUDA, max_blocks=max_blocks) as raw:
        assert _bits_equal(raw.fetch(idx), want)
    deg = torch.from_numpy(rng.integers(0, 60, 100_000)).to(CUDA)
    key = torch.tensor([12345], device=CUDA)
    out = kernel_sample(deg, 10, key, max_blocks=max_blocks).cpu()
    deg = deg.cpu()
    full = deg > 10
    picks = out[full]
    assert (picks >= 0).all() and (picks < deg[full][:, None]).all()
    assert (picks[:, 1:] > picks[:, :-1]).all()  # distinct, ascending
    short = out[~full]
    want_short = torch.arange(10).expand(short.shape[0], 10)
    want_short = torch.where(want_short < deg[~full][:, None], want_short, -1)
    assert torch.equal(short, want_short)


# --------------------------------------------------------------------------------------------
# Errors: the first bad position, and rows that are always written
# --------------------------------------------------------------------------------------------


def test_several_bad_ids_name_the_first_and_zero_their_rows(tmp_path) -> None:
    rng = np.random.default_rng(5)
    x = _sparse(rng, 30, 16, p=0.3)
    with _table(x, tmp_path) as table:
        ids = torch.zeros(4000, dtype=torch.int64)
        bad = [7, 12, 33, 2500, 3999]
        ids[bad] = torch.tensor([30, -1, 99, 1 << 40, 31])
        ids = ids.to(CUDA)
        with pytest.raises(IBPInputError, match=r"row index 30 \(at position 7\)"):
            table.fetch(ids)
        out = table.fetch(ids, check=False).cpu()
        assert (out[bad] == 0).all()
        good = np.setdiff1d(np.arange(4000), bad)
        assert _bits_equal(out[good], x[ids.cpu().numpy()[good]])


def test_indexing_with_cuda_ids_follows_the_cpu_tables_rules(tmp_path) -> None:
    from ibp_graph.errors import IBPIndexError

    rng = np.random.default_rng(8)
    x = _sparse(rng, 40, 16, p=0.3)
    with _table(x, tmp_path) as table:
        cpu = ibp_graph.open(tmp_path / "t.ibp")
        for index in (3, -1, [5, -40, 39]):
            want = cpu[index]  # NumPy's rules: negatives count from the end, ints give a row
            for cuda_index in (torch.tensor(index, device=CUDA), torch.tensor(index)):
                got = table[cuda_index]
                assert got.shape == want.shape
                assert _bits_equal(got.reshape(-1, 16), want.reshape(-1, 16).numpy())
        for index in ([2, -41], [40]):
            with pytest.raises(IBPIndexError, match=rf"row index {index[-1]} \(at position"):
                table[torch.tensor(index, device=CUDA)]
        with pytest.raises(IBPInputError, match="0-D or 1-D int64 or int32"):
            table[torch.zeros(2, 2, dtype=torch.int64, device=CUDA)]


@no_shared_memory
def test_bad_ids_on_pinned_raw_tables_and_the_raw_bypass(tmp_path) -> None:
    from ibp_graph.cuda_table import PinnedRawTable

    rng = np.random.default_rng(6)
    noise = rng.integers(0, 2**32, (50, 32), dtype=np.uint64).astype(np.uint32).view(np.int32)
    bypassed = _table(noise.view(np.float32), tmp_path, align=16)
    assert bypassed.bypass
    for table in (PinnedRawTable(noise, device=CUDA), bypassed):
        with table:
            ids = torch.tensor([3, 50, 4, -2, 5], device=CUDA)
            with pytest.raises(IBPInputError, match=r"\(at position 1\)"):
                table.fetch(ids)
            out = table.fetch(ids, check=False).cpu()
            assert (out[[1, 3]].view(torch.int32) == 0).all()
            assert _bits_equal(out[[0, 2, 4]], noise[[3, 4, 5]])


def test_sorted_ids_give_the_same_bits_and_name_the_callers_position(tmp_path) -> None:
    from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable

    rng = np.random.default_rng(15)
    x = np.concatenate([_sparse(rng, 3000, 48), rng.standard_normal((1000, 48))]).astype(
        np.float32
    )  # sparse and dense rows
    noise = rng.integers(0, 2**32, (500, 40), dtype=np.uint64).astype(np.uint32).view(np.int32)
    ibp_graph.compress(x, tmp_path / "x.ibp", progress=False)
    ibp_graph.compress(noise.view(np.float32), tmp_path / "n.ibp", align=16, progress=False)
    side = torch.cuda.Stream()
    for make, rows in (
        (lambda **kw: CudaIBPTable(tmp_path / "x.ibp", device=CUDA, **kw), x),
        (lambda **kw: CudaIBPTable(tmp_path / "n.ibp", device=CUDA, **kw), noise),  # bypass
        (lambda **kw: PinnedRawTable(x, device=CUDA, **kw), x),
        (lambda **kw: PinnedRawTable(noise, device=CUDA, max_blocks=1, **kw), noise),
    ):
        with make(sort_ids=False) as plain, make(sort_ids=True) as ordered:
            assert ordered.sort_ids and not plain.sort_ids
            ids = _ids(rng, rows.shape[0], 20_000)
            got = ordered.fetch(ids)
            assert torch.equal(got.view(torch.uint8), plain.fetch(ids).view(torch.uint8))
            assert _bits_equal(got, rows[ids.cpu().numpy()])
            torch.cuda.synchronize()
            on_side = ordered.fetch(ids, stream=side)  # ids made on the current stream
            torch.cuda.synchronize()
            assert torch.equal(on_side.view(torch.uint8), got.view(torch.uint8))
            # Sorted, -1 (position 15000) comes first and n (position 9000) last: the error
            # names the caller's first bad position, not the first in sorted order.
            bad = ids.clone()
            bad[[9000, 15000]] = torch.tensor([rows.shape[0], -1], device=CUDA)
            n = rows.shape[0]
            with pytest.raises(IBPInputError, match=rf"row index {n} \(at position 9000\)"):
                ordered.fetch(bad)
            out = ordered.fetch(bad, check=False)
            want = plain.fetch(bad, check=False)
            assert torch.equal(out.view(torch.uint8), want.view(torch.uint8))
            assert (out[[9000, 15000]].view(torch.uint8) == 0).all()


def test_a_corrupt_row_sets_its_slot_and_is_zero_filled(tmp_path) -> None:
    rng = np.random.default_rng(4)
    x = (rng.random((40, 64)) < 0.1).astype(np.float32)
    with _table(x, tmp_path, align=1) as table:
        lengths = np.diff(table.cpu_table.offsets) * table.cpu_table.align
        # The last row that is encoded and short: moving the offsets after it 2 bytes back
        # makes its fields run past its stored length, and leaves the rows before it whole.
        row = int(np.flatnonzero((lengths > 4) & (lengths < 64 * 4))[-1])
        good = 0
        assert row > good
        offsets = table.codec.offsets.clone()
        offsets[row + 1 :] -= 2
        broken = dataclasses.replace(table.codec, offsets=offsets)
        idx = torch.tensor([good, row, row], device=CUDA)
        out, error = _launch(broken, idx)
        assert error == [0, 2]
        assert (out[1:] == 0).all() and _bits_equal(out[:1], x[[good]])
        # Through the table: a format error naming the file and the row.
        table.codec = broken
        with pytest.raises(IBPFormatError, match=f"corrupt row {row}"):
            table.fetch(idx)


# --------------------------------------------------------------------------------------------
# Where the rows are: device memory, the ends of mapped host memory, page kinds
# --------------------------------------------------------------------------------------------


def test_decoding_rows_that_sit_in_device_memory(tmp_path) -> None:
    rng = np.random.default_rng(7)
    x = _sparse(rng, 900, 77)
    with _table(x, tmp_path, word_bytes=8, align=16) as table:
        on_gpu = _rows_in_gpu_memory(table)
        codec = dataclasses.replace(table.codec, rows_ptr=on_gpu.data_ptr())
        idx = _ids(rng, 900, 3000)
        out, error = _launch(codec, idx)
        assert error == [0, 0] and _bits_equal(out, x[idx.cpu().numpy()])


class _Mapped:
    """``size`` bytes of page-aligned host memory, registered whole; nothing mapped past it."""

    def __init__(self, size: int) -> None:
        import cupy

        self.runtime = cupy.cuda.runtime
        self.map = mmap.mmap(-1, size)
        self.array = np.frombuffer(self.map, dtype=np.uint8)
        self.host = self.array.ctypes.data
        self.runtime.hostRegister(self.host, size, 2)  # cudaHostRegisterMapped
        self.device = int(self.runtime.pointerGetAttributes(self.host).devicePointer)

    def close(self) -> None:
        torch.cuda.synchronize()
        self.runtime.hostUnregister(self.host)
        self.array = None
        try:
            self.map.close()
        except BufferError:  # a view is still alive: the mapping goes with it
            pass


@no_shared_memory
def test_raw_gather_of_a_last_row_ending_exactly_on_a_page_boundary() -> None:
    from ibp_graph.kernels.raw_gather import raw_gather

    page = mmap.PAGESIZE
    mapped = _Mapped(page)
    try:
        rows = mapped.array.reshape(-1, 512)  # the last row's last byte is the page's last
        rows[:] = np.random.default_rng(8).integers(0, 256, rows.shape, dtype=np.uint8)
        idx = torch.tensor([rows.shape[0] - 1, 0, rows.shape[0] - 1], device=CUDA)
        out = torch.empty((3, 512), dtype=torch.uint8, device=CUDA)
        error = torch.zeros(2, dtype=torch.int32, device=CUDA)
        raw_gather(mapped.device, rows.shape[0], 512, idx, out, error)
        torch.cuda.synchronize()
        assert error.tolist() == [0, 0]
        assert np.array_equal(out.cpu().numpy(), rows[idx.cpu().numpy()])
    finally:
        mapped.close()


@no_shared_memory
def test_whole_16_byte_loads_gather_the_bits_the_vectors_do() -> None:
    from ibp_graph.kernels.raw_gather import raw_gather

    count, width = 64, 5732  # Cora's rows: 4 mod 16, vectors of 4 bytes by default
    page = mmap.PAGESIZE
    mapped = _Mapped(-(-(count * width + 16) // page) * page)  # 15 bytes read past a row fit
    try:
        rows = mapped.array[: count * width].reshape(count, width)
        rows[:] = np.random.default_rng(16).integers(0, 256, rows.shape, dtype=np.uint8)
        idx = torch.tensor([count - 1, 0, 5, count - 1, 17, 5], device=CUDA)
        outs = []
        for lines in (False, True):
            out = torch.empty((idx.numel(), width), dtype=torch.uint8, device=CUDA)
            error = torch.zeros(2, dtype=torch.int32, device=CUDA)
            raw_gather(mapped.device, count, width, idx, out, error, line_aligned=lines)
            torch.cuda.synchronize()
            assert error.tolist() == [0, 0]
            outs.append(out)
        assert torch.equal(outs[0], outs[1])
        assert np.array_equal(outs[1].cpu().numpy(), rows[idx.cpu().numpy()])
    finally:
        mapped.close()


def test_fused_fetch_of_rows_ending_16_bytes_before_the_end_of_mapped_memory(tmp_path) -> None:
    rng = np.random.default_rng(9)
    x = _sparse(rng, 300, 50)
    with _table(x, tmp_path, align=16) as table:
        stored = _stored_bytes(table)
        page = mmap.PAGESIZE
        size = -(-(stored.size + 16) // page) * page
        mapped = _Mapped(size)
        try:
            at = size - 16 - stored.size  # a multiple of 16: the rows stay aligned
            mapped.array[at : at + stored.size] = stored
            codec = dataclasses.replace(table.codec, rows_ptr=mapped.device + at)
            last = int(np.flatnonzero(np.diff(table.cpu_table.offsets))[-1])
            idx = torch.tensor([last, 0, last, 299], device=CUDA)
            out, error = _launch(codec, idx)
            assert error == [0, 0] and _bits_equal(out, x[idx.cpu().numpy()])
        finally:
            mapped.close()


@pytest.mark.parametrize("pages", ["huge", "small", "cuda"])
def test_every_page_kind_serves_the_same_rows(tmp_path, pages) -> None:
    from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable

    rng = np.random.default_rng(10)
    x = _sparse(rng, 2000, 64)
    ibp_graph.compress(x, tmp_path / "t.ibp", progress=False)
    idx = _ids(rng, 2000, _n(10_000))
    with CudaIBPTable(tmp_path / "t.ibp", device=CUDA, pages=pages) as table:
        assert table._pinned.pages == pages
        assert _bits_equal(table.fetch(idx), x[idx.cpu().numpy()])
    with PinnedRawTable(x, device=CUDA, pages=pages) as raw:
        assert _bits_equal(raw.fetch(idx), x[idx.cpu().numpy()])


# --------------------------------------------------------------------------------------------
# Streams
# --------------------------------------------------------------------------------------------


def test_two_streams_fetch_from_one_table_at_once(tmp_path) -> None:
    rng = np.random.default_rng(11)
    x = _sparse(rng, 4000, 128)
    with _table(x, tmp_path) as table:
        a, b = _ids(rng, 4000, _n(200_000)), _ids(rng, 4000, _n(150_000))
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        torch.cuda.synchronize()
        out1 = table.fetch(a, stream=s1, check=False)
        out2 = table.fetch(b, stream=s2, check=False)
        torch.cuda.synchronize()
        assert _bits_equal(out1, x[a.cpu().numpy()]) and _bits_equal(out2, x[b.cpu().numpy()])
        # Each launch has its own error slots: a bad id on one stream is not seen on the other.
        bad = b.clone()
        bad[10] = 4000
        with pytest.raises(IBPInputError, match=r"\(at position 10\)"):
            table.fetch(bad, stream=s2)
        assert _bits_equal(table.fetch(a, stream=s1), x[a.cpu().numpy()])


def test_record_stream_keeps_a_batch_alive_under_allocator_reuse(tmp_path) -> None:
    from ibp_graph.prefetch import Prefetcher

    rng = np.random.default_rng(12)
    x = _sparse(rng, 3000, 256)
    with _table(x, tmp_path) as table:
        batches = [_ids(rng, 3000, _n(20_000)) for _ in range(6)]
        torch.cuda.synchronize()
        pf = Prefetcher(
            iter(batches),
            lambda ids, s: table.fetch(ids, stream=s, check=False),
            depth=2,
            device=CUDA,
        )
        copies = []
        for batch in pf:
            torch.cuda._sleep(20_000_000)  # the consumer's stream is busy for a while ...
            copies.append(batch.clone())  # ... before it reads the batch
            del batch  # freed while the read is still queued: the side stream fetches on
        pf.close()
        torch.cuda.synchronize()
        for ids, got in zip(batches, copies, strict=True):
            assert _bits_equal(got, x[ids.cpu().numpy()])


@pytest.mark.slow
@pytest.mark.timing
def test_a_side_stream_fetch_overlaps_a_training_step_in_time(tmp_path) -> None:
    from ibp_graph.cuda_table import PinnedRawTable

    rng = np.random.default_rng(13)
    rows = rng.integers(0, 256, (1 << 19, 512), dtype=np.uint8)  # 256 MiB, pinned
    with PinnedRawTable(rows, device=CUDA) as table:
        idx = torch.from_numpy(rng.integers(0, rows.shape[0], 1 << 20)).to(CUDA)
        # The "training step": four elementwise kernels over 256 MiB, each a grid of many short
        # blocks. A 4096 x 4096 float32 GEMM is no such step on an
        # H100: measured there, it ended only after a fetch holding a quarter of the SMs did
        # (first step done at 9.6 and 15.8 ms, the fetch at 9.3 and 9.4 ms), although the
        # benchmark's GraphSAGE steps beside the same fetches ran 1.14x their time alone
        # (benchmarks/results/overlap-nvidia-h100-80gb-hbm3.md).
        x = torch.randn(1 << 26, device=CUDA)
        side = torch.cuda.Stream()
        table.fetch(idx, stream=side)  # warm-up: compile, first touch
        torch.tanh(x).sum().item()
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        steps = [torch.cuda.Event(enable_timing=True) for _ in range(31)]
        ev[0].record()  # the reference
        side.wait_event(ev[0])
        with torch.cuda.stream(side):
            ev[1].record(side)
            table.fetch(idx, stream=side, check=False)  # 512 MiB over PCIe: several ms
            ev[2].record(side)
        steps[0].record()
        for end in steps[1:]:
            for _ in range(4):
                x = torch.tanh(x)
            end.record()
        torch.cuda.synchronize()
        fetch = (ev[0].elapsed_time(ev[1]), ev[0].elapsed_time(ev[2]))
        times = [ev[0].elapsed_time(e) for e in steps]
        inside = [
            (start, end)
            for start, end in itertools.pairwise(times)
            if fetch[0] < start and end < fetch[1]
        ]
        # Whole steps ran while the fetch was still running: the default fetch grid (a block
        # on a quarter of the SMs) left the other SMs to training. With a block on every SM
        # (commit bda9369, H100) a GEMM step could not start on any SM until the fetch ended.
        assert len(inside) >= 2, (fetch, times)


# --------------------------------------------------------------------------------------------
# UVA graphs
# --------------------------------------------------------------------------------------------


@no_shared_memory
def test_uva_graph_lifetime_and_to() -> None:
    from ibp_graph.datasets import load_dataset
    from ibp_graph.graph import CSRGraph
    from ibp_graph.pinned import deferred_count, release_deferred
    from ibp_graph.sampler import NeighborSampler

    cora = load_dataset("cora")
    cpu = CSRGraph.from_edge_index(cora.edge_index, cora.num_nodes)
    # Earlier tests' garbage first: a prefetcher collected later would release our buffers
    # (closing it calls `release_deferred`) between the drop and the count below.
    gc.collect()
    release_deferred()
    # The default layout (indptr in GPU memory, sources and edge ids in one pinned buffer),
    # then every array in a pinned buffer of its own.
    layouts = ({}, {"indptr_in_gpu": False, "pairs": False})
    uvas = [cpu.to_uva(CUDA, **kwargs) for kwargs in layouts]
    assert uvas[0].pairs and uvas[0].indptr.is_cuda and not uvas[1].pairs
    assert "uva=True, indptr_in=GPU, pairs=True)" in repr(uvas[0])
    assert "uva=True, indptr_in=host)" in repr(uvas[1])
    seeds = torch.arange(512, device=CUDA)
    dev = cpu.to(CUDA)
    want = NeighborSampler(dev, [10, 5], seed=3).sample(seeds)
    for uva, kwargs in zip(uvas, layouts, strict=True):
        assert uva.is_uva() and uva.device.type == "cuda" and not cpu.to(CUDA).is_uva()
        assert uva.to(CUDA) is uva  # already on that GPU: stays in host memory
        assert uva.to_uva(CUDA, **kwargs) is uva  # nothing pinned twice
        back = uva.to("cpu")  # read on the host, no device-to-host copy
        for name in ("indptr", "indices", "edge_ids"):
            assert torch.equal(getattr(back, name), getattr(cpu, name))
            assert getattr(back, name).is_contiguous()
        got = NeighborSampler(uva, [10, 5], seed=3).sample(seeds)
        assert torch.equal(got.node, want.node) and torch.equal(got.edge, want.edge)
    # Another layout of a UVA graph: built anew from its host memory.
    other = uvas[0].to_uva(CUDA, pairs=False)
    assert other.is_uva() and not other.pairs and torch.equal(other.edge_ids.cpu(), cpu.edge_ids)
    del other
    if SANITIZED:
        # Under compute-sanitizer (H100: memcheck, synccheck) the CuPy memory over the graph
        # outlives a sample from it: after the drop, a synchronise and gc.collect() no buffer
        # was deferred, where the same steps without the tool defer all three. The lifetime
        # is checked in the plain GPU run; the reads above are what the tools check.
        return
    # Dropped mid-epoch: no synchronise, the memory is released at the next safe point: the
    # pairs buffer of the first layout, the three arrays of the second.
    gc.collect()
    release_deferred()
    del uva, uvas, got
    gc.collect()
    assert deferred_count() == 4
    assert release_deferred() == 4 and deferred_count() == 0


# --------------------------------------------------------------------------------------------
# Outputs over 2 GiB
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_outputs_over_2_gib(tmp_path) -> None:
    from ibp_graph.cuda_table import PinnedRawTable
    from ibp_graph.datasets import load_dataset

    rng = np.random.default_rng(14)
    x = load_dataset("cora").x  # 5,732-byte rows
    n = (2**31 // (x.shape[1] * 4)) + 1000
    idx = torch.from_numpy(rng.integers(0, x.shape[0], n)).to(CUDA)
    idx[-1] = x.shape[0] - 1
    want = x.to(CUDA).index_select(0, idx)
    ibp_graph.compress(x.numpy(), tmp_path / "cora.ibp", progress=False)
    with ibp_graph.open(tmp_path / "cora.ibp", device=CUDA) as table:
        got = table.fetch(idx)
        assert got.numel() * 4 > 2**31 and torch.equal(
            got.view(torch.int32), want.view(torch.int32)
        )
        del got
    with PinnedRawTable(x, device=CUDA) as raw:
        got = raw.fetch(idx)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))


# --------------------------------------------------------------------------------------------
# Launched in chunks or in other block sizes (last: the newest launch options)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{"chunk_rows": 777}, {"block_warps": 32}, {"block_warps": 1, "chunk_rows": 4096}],
    ids=["chunks", "32-warp-blocks", "1-warp-blocks-in-chunks"],
)
@pytest.mark.parametrize("sort_ids", [False, True])
def test_chunks_and_block_sizes_give_the_same_rows_and_errors(tmp_path, sort_ids, options) -> None:
    # Launched in chunks (several kernels on the fetch's stream) or in blocks of other sizes:
    # the same bits, and a bad id is named at its caller's position, also in a later chunk.
    from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable

    rng = np.random.default_rng(17)
    x = _sparse(rng, 3000, 40)
    ibp_graph.compress(x, tmp_path / "t.ibp", progress=False)
    n = _n(10_000)
    idx = _ids(rng, 3000, n)
    want = x[idx.cpu().numpy()]
    bad = idx.clone()
    first = 9 * n // 10 - 99  # in a later chunk of 777 rows, at either size
    bad[[first, n - 1]] = torch.tensor([3000, -2], device=CUDA)
    side = torch.cuda.Stream()
    for table in (
        CudaIBPTable(tmp_path / "t.ibp", device=CUDA, sort_ids=sort_ids, **options),
        PinnedRawTable(x, device=CUDA, sort_ids=sort_ids, **options),
    ):
        with table:
            assert _bits_equal(table.fetch(idx), want)
            side.wait_stream(torch.cuda.current_stream())
            got = table.fetch(idx, stream=side)
            torch.cuda.current_stream().wait_stream(side)
            assert _bits_equal(got, want)
            with pytest.raises(IBPInputError, match=rf"row index 3000 \(at position {first}\)"):
                table.fetch(bad)
