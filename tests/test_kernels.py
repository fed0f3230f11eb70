"""CUDA kernels: every source compiles (CPU, NVRTC), launch planning, and GPU behaviour."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import mmap
import re
import sys
import threading
import types

import numpy as np
import pytest
import torch
from cuda_runtime_stub import CudaRuntimeStub

import ibp_graph
from ibp_graph.bitops import bit_runs, pdep, popcount
from ibp_graph.errors import IBPInputError
from ibp_graph.kernels import ptx, runtime
from ibp_graph.kernels.fetch_decode import (
    HALF_ROW_BYTES,
    LAYOUT_THREE_RUNS,
    LAYOUT_TWO_RUNS,
    NO_FREE_HALF_ROW_BYTES,
    RUN_WORDS,
    check_launch,
    column_layouts,
    column_runs,
    smem_plan,
)
from ibp_graph.kernels.raw_gather import vector_bytes
from ibp_graph.kernels.runtime import NVRTC_OPTIONS, cuda_dir, source_files
from ibp_graph.pinned import PinnedBuffer, PinningError

ARCHS = ("sm_80", "sm_90")


def test_sources_are_found() -> None:
    names = {p.name for p in source_files()}
    assert {"fetch_decode.cu", "raw_gather.cu"} <= names
    assert cuda_dir().is_dir()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", [p.name for p in source_files()])
def test_every_kernel_compiles(source: str, arch: str, nvrtc) -> None:
    text = (cuda_dir() / source).read_text()
    try:
        code, log = ptx.compile_ptx(text, source, arch, NVRTC_OPTIONS)
    except ptx.PTXCompileError as exc:
        pytest.fail(f"{exc}\n{exc.log}")
    assert "warning" not in log.lower(), f"{source} ({arch}) compiles with warnings:\n{log}"
    assert ptx.entry_points(code), f"{source} defines no kernels"


def test_ptx_entry_points_keep_types_and_array_lengths_less_the_names() -> None:
    code = """
.visible .entry ibp_a(
\t.param .u64 .ptr .global .align 1 ibp_a_param_0,
\t.param .align 8 .b8 ibp_a_param_1[16],
\t.param .u32 ibp_a_param_2
)
{ ret; }
.visible .entry ibp_b()
{ ret; }
"""
    assert ptx.entry_points(code) == {
        "ibp_a": (".param .u64 .ptr .global .align 1", ".param .align 8 .b8[16]", ".param .u32"),
        "ibp_b": (),
    }
    assert ptx.entry_points("// no kernels") == {}


def test_a_source_that_does_not_compile_is_named_with_its_first_error(nvrtc) -> None:
    text = 'extern "C" __global__ void k(int* x) { x[0] = undeclared; }\n'
    with pytest.raises(ptx.PTXCompileError, match=r"^bad\.cu does not compile for sm_80: ") as e:
        ptx.compile_ptx(text, "bad.cu", "sm_80")
    assert "undeclared" in str(e.value) and "\n" not in str(e.value)
    assert "undeclared" in e.value.log


def test_nvrtc_that_cannot_load_is_one_line(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy.cuda", None)  # importing it fails
    with pytest.raises(RuntimeError, match=r"^NVRTC is not loadable here \(\w*Error: .*extra"):
        ptx.nvrtc()


@pytest.mark.parametrize("source", sorted(runtime.BUILT_PER_ENTRY))
def test_an_entry_point_built_alone_is_the_same_kernel(source: str, nvrtc) -> None:
    """`entry_source` keeps one entry point's definition: that kernel, with its parameters."""
    text = (cuda_dir() / source).read_text()
    whole = ptx.entry_points(ptx.compile_ptx(text, source, "sm_80")[0])
    assert len(whole) > 1
    for entry, params in whole.items():
        alone = ptx.compile_ptx(runtime.entry_source(text, entry), source, "sm_80")[0]
        assert ptx.entry_points(alone) == {entry: params}
    with pytest.raises(ValueError, match="defines the entry point 'ibp_nothing'"):
        runtime.entry_source(text, "ibp_nothing")


def test_kernels_of_sources_built_per_entry_are_built_alone(monkeypatch) -> None:
    built: list[tuple[str, str | None]] = []

    class Module:
        def __init__(self, name: str, entry: str | None) -> None:
            built.append((name, entry))

        def get_function(self, entry: str) -> str:
            return entry

    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(Device=lambda i: contextlib.nullcontext())
    )
    monkeypatch.setattr(runtime, "cupy", lambda: fake)
    monkeypatch.setattr(runtime, "_module", Module)
    monkeypatch.setattr(runtime, "_kernel", runtime._kernel.__wrapped__)
    assert (
        runtime._kernel("fetch_decode.cu", "ibp_fetch_decode_w8_o4", 0) == "ibp_fetch_decode_w8_o4"
    )
    runtime._kernel("/elsewhere/fetch_decode.cu", "ibp_fetch_decode_w4_o4", 0)  # a baseline's
    runtime._kernel("sample_neighbors.cu", "ibp_hop_emit", 0)
    assert built == [
        ("fetch_decode.cu", "ibp_fetch_decode_w8_o4"),
        ("/elsewhere/fetch_decode.cu", "ibp_fetch_decode_w4_o4"),
        ("sample_neighbors.cu", None),
    ]


def _deposit(p: int, layout: int, run: np.ndarray, bits: int) -> int:
    """The fused kernel's deposit of payload ``p``: by its layout word's two shifts, else by
    its entry ``run`` of `column_runs`: three shifted and masked runs, or (more runs) a bit by
    bit deposit into the free bits of its first word."""
    n1, lo1, lo2 = (layout >> 7) & 63, (layout >> 14) & 63, (layout >> 20) & 63
    if layout & LAYOUT_TWO_RUNS:
        return ((p & ((1 << n1) - 1)) << lo1) | ((p >> n1) << lo2)
    top = (1 << bits) - 1
    if layout & LAYOUT_THREE_RUNS:
        shifts = int(run[3])
        return sum(
            (p << ((shifts >> (8 * r)) & (bits - 1))) & int(run[r]) & top for r in range(3)
        )  # (disjoint runs: the sum is their OR)
    out, free = 0, int(run[0])
    for bit in range(bits):
        if free >> bit & 1:
            out, p = out | (p & 1) << bit, p >> 1
    return out


@pytest.mark.parametrize("word_bytes", [4, 8])
def test_column_layouts_and_runs_deposit_as_the_codec_does(word_bytes) -> None:
    bits = 8 * word_bytes
    top = (1 << bits) - 1
    rng = np.random.default_rng(word_bytes)
    # Free bits (~mask): none, all, one run at 0, one in the middle, the top bit, a float's
    # mantissa and sign (two runs), three runs (two float16 values among them), four, every
    # other bit; then random masks.
    free = [0, top, 0xFF, 0xFF0, 1 << (bits - 1), (1 << 23) - 1 | 1 << (bits - 1)]
    free += [0b1110000110000111, 0x83FF83FF, 0x0F0F0F0F, int("01" * (bits // 2), 2)]
    free += [(1 << (bits - 1)) | 0xF0 | 1, 0x7 << (bits - 5) | 0x3C | 0x1]
    free += [int(v) for v in rng.integers(0, top, 40, dtype=np.uint64, endpoint=True)]
    dtype = {4: np.uint32, 8: np.uint64}[word_bytes]
    masks = (~np.array(free, dtype=np.uint64) & np.uint64(top)).astype(dtype).reshape(2, -1)
    code_bits = rng.integers(1, 9, masks.shape).astype(np.uint8)
    signed = masks.view({4: np.int32, 8: np.int64}[word_bytes])  # as the device tensors hold them
    layouts = column_layouts(signed, code_bits, word_bytes)
    assert layouts.dtype == np.uint32 and layouts.shape == masks.shape
    runs = bit_runs(~masks, bits)
    count = popcount(~masks)
    assert np.array_equal(layouts & 127, count)  # free bits
    assert np.array_equal(layouts >> 27, code_bits)
    two = (layouts & LAYOUT_TWO_RUNS) != 0
    three = (layouts & LAYOUT_THREE_RUNS) != 0
    run_count = (runs.mask != 0).sum(axis=0)
    assert np.array_equal(two, run_count <= 2)
    assert np.array_equal(three, run_count == 3)
    assert two.any() and three.any() and (run_count > 3).any()
    table = column_runs(signed, word_bytes)  # the entries deposit reads beyond two runs
    assert table.dtype == dtype and table.shape == (*masks.shape, RUN_WORDS)
    at_most_two = column_runs(signed[:1, :6], word_bytes)  # (none, all, one or two runs)
    assert at_most_two.shape == (1, 1, RUN_WORDS) and not at_most_two.any()
    assert not table[two].any()  # not read
    assert np.array_equal(table[run_count > 3][:, 0], ~masks[run_count > 3])
    for c, j in np.ndindex(masks.shape):
        f = int(count[c, j])
        payloads = [int.from_bytes(rng.bytes(8), "little") >> (64 - f) for _ in range(8)]
        for p in [0, (1 << f) - 1, *payloads] if f else [0]:
            want = int(pdep(np.array([p], dtype=dtype), runs.take((c, j)))[0])
            layout = int(layouts[c, j])
            got = _deposit(p, layout, table[c, j], bits)
            assert got == want, (hex(int(~masks[c, j]) & top), p)
            assert (layout >> 7) & 63 < bits  # no shift reaches the word's width


def test_smem_plan_fits_the_largest_row() -> None:
    plan = smem_plan(num_words=1433, word_bytes=4, align=16, max_smem=48 * 1024)
    raw = -(-1433 * 4 // 16) * 16
    # the staging buffer covers a row starting at any offset in its 16-byte chunk, + slack
    assert plan.buf_words * 4 >= 15 + raw + 8
    assert plan.bytes_per_warp % 16 == 0
    assert plan.bytes_per_block <= 48 * 1024
    assert 1 <= plan.warps_per_block <= 8


def test_the_launchers_constants_are_the_kernels() -> None:
    """HALF_ROW_BYTES and the layout word's flags are defined in cuda/fetch_decode.cu and again
    for the host (its plan and column_layouts): the two must agree."""
    from ibp_graph.kernels.runtime import read_source

    defines = dict(re.findall(r"^#define (\w+) (.+)$", read_source("fetch_decode.cu"), re.M))
    assert int(defines["HALF_ROW_BYTES"]) == HALF_ROW_BYTES
    assert int(defines["NO_FREE_HALF_ROW_BYTES"]) == NO_FREE_HALF_ROW_BYTES
    for name, value in (
        ("LAYOUT_TWO_RUNS", LAYOUT_TWO_RUNS),
        ("LAYOUT_THREE_RUNS", LAYOUT_THREE_RUNS),
    ):
        shift = re.fullmatch(r"\(1u << (\d+)\)", defines[name])
        assert shift and 1 << int(shift.group(1)) == value, name


def test_smem_plan_stages_two_narrow_rows_a_warp() -> None:
    """The one-buffer kernel decodes rows of at most HALF_ROW_BYTES bytes of words two a warp,
    each staged in a buffer of its own; the double-buffered kernel keeps one row a warp."""
    for words, word_bytes in ((64, 4), (32, 8), (1, 4)):
        plan = smem_plan(words, word_bytes, 4, 48 * 1024)
        assert words * word_bytes <= HALF_ROW_BYTES and plan.halves and plan.buffers == 1
        two = smem_plan(words, word_bytes, 4, 48 * 1024, buffers=2)
        assert not two.halves and two.bytes_per_warp == plan.bytes_per_warp
    for words, word_bytes in ((65, 4), (33, 8)):
        plan = smem_plan(words, word_bytes, 4, 48 * 1024)
        assert not plan.halves
        assert plan.bytes_per_warp < smem_plan(words, word_bytes, 4, 48 * 1024, 2).bytes_per_warp


def test_smem_plan_stages_two_bag_of_words_rows_a_warp() -> None:
    """In a table whose first cluster has no free bit, rows of up to NO_FREE_HALF_ROW_BYTES
    bytes of words are staged two a warp too (as the kernel decodes them); wider ones, the
    double-buffered kernel's, and other tables' keep one row a warp."""
    for words, word_bytes in ((128, 4), (64, 8), (65, 4), (1, 4)):
        assert words * word_bytes <= NO_FREE_HALF_ROW_BYTES
        plan = smem_plan(words, word_bytes, 4, 48 * 1024, no_free=True)
        assert plan.halves and plan.buffers == 1
        assert not smem_plan(words, word_bytes, 4, 48 * 1024, buffers=2, no_free=True).halves
        one = smem_plan(words, word_bytes, 4, 48 * 1024)
        assert one.halves == (words * word_bytes <= HALF_ROW_BYTES)
    for words, word_bytes in ((129, 4), (65, 8)):
        assert not smem_plan(words, word_bytes, 4, 48 * 1024, no_free=True).halves


def test_smem_plan_sized_for_the_longest_stored_row() -> None:
    """Cora's rows: 1,433 words, stored in at most 80 bytes."""
    full = smem_plan(num_words=1433, word_bytes=4, align=1, max_smem=48 * 1024)
    tight = smem_plan(num_words=1433, word_bytes=4, align=1, max_smem=48 * 1024, longest_row=80)
    assert tight.buf_words == 4 * -(-(15 + 80) // 16) + 4  # its chunks and the slack
    codes = 4 * -(-(1433 + 45) // 4)  # the code bytes and subgroup bytes stay
    assert tight.bytes_per_warp == -(-(4 * tight.buf_words + codes) // 16) * 16
    assert full.bytes_per_warp > 4 * tight.bytes_per_warp
    assert (full.warps_per_block, tight.warps_per_block) == (6, 8)
    # Never more than the raw width, whatever it is told; 0 rows: one chunk.
    assert smem_plan(1433, 4, 1, 48 * 1024, longest_row=10**9) == full
    assert smem_plan(8, 4, 1, 48 * 1024, longest_row=0).buf_words == 8
    with pytest.raises(ValueError, match="longest_row must be >= 0 bytes, got -1"):
        smem_plan(1433, 4, 1, 48 * 1024, longest_row=-1)
    # A bag of words too wide for a raw-sized buffer fits when its rows are short.
    with pytest.raises(ValueError, match="shared memory"):
        smem_plan(num_words=64_000, word_bytes=4, align=4, max_smem=227 * 1024)
    wide = smem_plan(num_words=64_000, word_bytes=4, align=4, max_smem=227 * 1024, longest_row=400)
    assert wide.warps_per_block == 3


def test_stored_row_range_and_the_raw_bypass(tmp_path) -> None:
    from ibp_graph.cuda_table import raw_bypass

    rng = np.random.default_rng(5)
    x = np.where(rng.random((200, 40)) < 0.1, rng.standard_normal((200, 40)), 0)
    table = ibp_graph.compress(x.astype(np.float32), tmp_path / "s.ibp", align=4)
    lengths = np.diff(table.offsets).astype(np.int64) * 4
    assert table.stored_row_range == (int(lengths.min()), int(lengths.max()))
    assert table.stored_row_range is table.stored_row_range  # computed once
    assert not raw_bypass(table)
    noise = rng.integers(0, 2**32, (100, 64), dtype=np.uint64).astype(np.uint32)
    flat = ibp_graph.compress(noise.view(np.float32), tmp_path / "r.ibp", align=16)
    assert flat.stored_row_range == (256, 256) and raw_bypass(flat)  # every row stored raw


def test_smem_plan_rejects_rows_too_wide() -> None:
    with pytest.raises(ValueError, match="shared memory"):
        smem_plan(num_words=100_000, word_bytes=4, align=16, max_smem=48 * 1024)


def test_smem_plan_takes_the_asked_warps_where_shared_memory_holds_them() -> None:
    # Cora's rows, stored in at most 80 bytes: 32 warps fit; at full width fewer do.
    tight = smem_plan(1433, 4, 1, 227 * 1024, longest_row=80, warps=32)
    assert tight.warps_per_block == 32
    assert tight == dataclasses.replace(
        smem_plan(1433, 4, 1, 227 * 1024, longest_row=80), warps_per_block=32
    )
    wide = smem_plan(4000, 4, 16, 227 * 1024, warps=32)  # 19.7 KiB a warp: 11 fit
    assert wide.warps_per_block == 227 * 1024 // wide.bytes_per_warp == 11
    assert smem_plan(4000, 4, 16, 227 * 1024, warps=1).warps_per_block == 1
    codec_plans = {w: smem_plan(100, 4, 4, 227 * 1024, warps=w).bytes_per_block for w in (8, 32)}
    assert codec_plans[32] == 4 * codec_plans[8]


def test_smem_plan_double_buffering_stages_two_rows_a_warp() -> None:
    one = smem_plan(num_words=1433, word_bytes=4, align=16, max_smem=227 * 1024)
    two = smem_plan(num_words=1433, word_bytes=4, align=16, max_smem=227 * 1024, buffers=2)
    assert (one.buffers, two.buffers) == (1, 2) and two.buf_words == one.buf_words
    # a second buffer of the same size, the codes and subgroup bytes once
    assert two.bytes_per_warp - one.bytes_per_warp == 4 * one.buf_words
    assert two.bytes_per_warp % 16 == 0
    assert two.warps_per_block == min(8, 227 * 1024 // two.bytes_per_warp)
    with pytest.raises(ValueError, match="double-buffered rows of 120000 bytes .* one buffer"):
        smem_plan(num_words=30_000, word_bytes=4, align=16, max_smem=227 * 1024, buffers=2)
    smem_plan(num_words=30_000, word_bytes=4, align=16, max_smem=227 * 1024)  # one fits
    with pytest.raises(ValueError, match="buffers must be 1 or 2, got 3"):
        smem_plan(num_words=8, word_bytes=4, align=16, max_smem=48 * 1024, buffers=3)


def test_launch_fetch_passes_double_buffering_to_the_fused_kernel_only(monkeypatch) -> None:
    from ibp_graph import cuda_table

    calls = []
    monkeypatch.setattr(cuda_table, "fetch_decode", lambda *a, **kw: calls.append(("fused", kw)))
    monkeypatch.setattr(cuda_table, "raw_gather", lambda *a, **kw: calls.append(("raw", kw)))
    codec = types.SimpleNamespace(rows_ptr=16, num_rows=4, row_bytes=8)
    for bypass, double_buffer in [(False, True), (False, False), (True, True)]:
        cuda_table.launch_fetch(codec, bypass, None, None, None, double_buffer=double_buffer)
    assert [(kind, kw.get("double_buffer")) for kind, kw in calls] == [
        ("fused", True),
        ("fused", False),
        ("raw", None),  # rows stored raw are gathered, not decoded
    ]


def test_double_buffer_must_be_a_bool(tmp_path) -> None:
    from ibp_graph.cuda_table import CudaIBPTable

    with pytest.raises(IBPInputError, match="double_buffer must be a bool, got 'int'"):
        CudaIBPTable(tmp_path / "t.ibp", double_buffer=1)


def test_launch_fetch_passes_chunk_rows_and_block_warps_to_both_kernels(monkeypatch) -> None:
    from ibp_graph import cuda_table

    calls = []
    monkeypatch.setattr(cuda_table, "fetch_decode", lambda *a, **kw: calls.append(("fused", kw)))
    monkeypatch.setattr(cuda_table, "raw_gather", lambda *a, **kw: calls.append(("raw", kw)))
    codec = types.SimpleNamespace(rows_ptr=16, num_rows=4, row_bytes=8)
    for bypass, chunk_rows, warps in [(False, 512, 32), (True, 64, 16), (False, None, None)]:
        cuda_table.launch_fetch(
            codec, bypass, None, None, None, chunk_rows=chunk_rows, block_warps=warps
        )
    assert [(kind, kw["chunk_rows"], kw["block_warps"]) for kind, kw in calls] == [
        ("fused", 512, 32),
        ("raw", 64, 16),
        ("fused", None, None),
    ]


@pytest.mark.parametrize(
    ("bad", "message"),
    [(0, "at least 1"), (-3, "at least 1"), (1.5, "None or an int"), (False, "None or an int")],
)
def test_chunk_rows_must_be_a_positive_int(tmp_path, bad, message) -> None:
    # Refused before anything needs a GPU (this runs without one).
    from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable

    with pytest.raises(ValueError, match=f"chunk_rows must be {message}"):
        CudaIBPTable(tmp_path / "t.ibp", chunk_rows=bad)
    with pytest.raises(ValueError, match=f"chunk_rows must be {message}"):
        PinnedRawTable(np.zeros((2, 2), np.float32), chunk_rows=bad)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (0, "between 1 and 32, got 0"),
        (64, "between 1 and 32, got 64"),
        (4.0, "None or an int, got 'float'"),
        (True, "None or an int, got 'bool'"),
        ("8", "None or an int, got 'str'"),
    ],
)
def test_block_warps_must_be_an_int_from_1_to_32(tmp_path, bad, message) -> None:
    # Refused before anything needs a GPU (this runs without one).
    from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable

    with pytest.raises(ValueError, match=f"block_warps must be {message}"):
        CudaIBPTable(tmp_path / "t.ibp", block_warps=bad)
    with pytest.raises(ValueError, match=f"block_warps must be {message}"):
        PinnedRawTable(np.zeros((2, 2), np.float32), block_warps=bad)


def test_check_block_warps_defaults_to_the_fetch_block() -> None:
    from ibp_graph.kernels.runtime import FETCH_BLOCK_WARPS, MAX_BLOCK_WARPS, check_block_warps

    assert check_block_warps(None) == FETCH_BLOCK_WARPS == 8
    assert [check_block_warps(w) for w in (1, np.int64(16), MAX_BLOCK_WARPS)] == [1, 16, 32]
    assert type(check_block_warps(np.int32(4))) is int


def test_chunk_spans_cover_every_request_once() -> None:
    from ibp_graph.kernels.runtime import chunk_spans

    assert chunk_spans(10, None) == [(0, 10)]
    assert chunk_spans(10, 10) == chunk_spans(10, 99) == [(0, 10)]
    assert chunk_spans(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_spans(0, 4) == [(0, 0)]


def test_vector_width() -> None:
    assert vector_bytes(512, 4096) == 16
    assert vector_bytes(24, 4096) == 8
    assert vector_bytes(12, 4096) == 4
    assert vector_bytes(6, 4096) == 2  # float16 rows of odd width: the 2-byte path
    assert vector_bytes(7, 4096) == 1
    assert vector_bytes(512, 4100) == 4
    assert vector_bytes(512, 4098) == 2


def test_rows_take_the_widest_vectors_unless_lines_are_asked_for() -> None:
    from ibp_graph.kernels.raw_gather import entry_point

    assert entry_point(5732, 4096, 256) == "ibp_raw_gather_v4"  # Cora's rows
    assert entry_point(24, 4096, 256) == "ibp_raw_gather_v8"
    assert entry_point(512, 4096, 256) == "ibp_raw_gather_v16"
    assert entry_point(24, 4104, 256) == "ibp_raw_gather_v8"
    assert entry_point(6, 4096, 256) == "ibp_raw_gather_v2"
    assert entry_point(5732, 4096, 256, True) == "ibp_raw_gather_lines"
    assert entry_point(24, 4096, 256, True) == "ibp_raw_gather_lines"
    with pytest.raises(ValueError, match="16-byte-aligned table"):
        entry_point(12, 4100, 256, True)


def test_launch_checks_name_the_argument() -> None:
    idx = torch.zeros(3, dtype=torch.int64)
    out = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="idx must be a CUDA tensor"):
        check_launch(idx, out, 16, torch.device("cuda", 0))


def _cuda(runtime: CudaRuntimeStub) -> types.SimpleNamespace:
    return types.SimpleNamespace(runtime=runtime)


def _c_params(doc: str) -> list[str]:
    """Parameter names of a Cython signature line such as ``f(intptr_t ptr, size_t size)``."""
    inside = doc.splitlines()[0].split("(", 1)[1].rsplit(")", 1)[0]
    return [p.split()[-1].split("=")[0] for p in inside.split(",") if p.strip()]


def test_fake_runtime_has_the_api_of_cupys_runtime() -> None:
    """What the pinning code calls exists in CuPy's runtime, with the same parameters."""
    cupy = pytest.importorskip("cupy")
    real = cupy.cuda.runtime
    fake = CudaRuntimeStub()
    assert issubclass(real.CUDARuntimeError, Exception)
    for name in dir(CudaRuntimeStub):  # the methods of CuPy's, not the stub's own helpers
        if name.startswith("_") or name in ("CUDARuntimeError", "calls", "note", "unregistered"):
            continue
        assert hasattr(real, name), f"cupy.cuda.runtime has no {name}"
        want = _c_params(getattr(real, name).__doc__)
        got = list(inspect.signature(getattr(fake, name)).parameters)
        assert got == want, f"{name}: CuPy takes {want}, the fake {got}"
    assert real.cudaDevAttrCanUseHostPointerForRegisteredMem == 91
    assert real.hostAllocMapped == 2  # the value of cudaHostRegisterMapped too
    assert {"devicePointer", "hostPointer"} <= set(dir(real.PointerAttributes))


def test_pinning_failure_says_what_to_change() -> None:
    runtime = CudaRuntimeStub(fail=True)
    buf = PinnedBuffer(1 << 20, "x.ibp", _cuda(runtime))
    with pytest.raises(PinningError) as err:
        buf.pin()
    msg = str(err.value)
    assert msg.startswith("x.ibp: could not pin")
    assert "ulimit -l" in msg and "memlock" in msg and "out of memory" in msg


def test_pinning_registers_and_releases() -> None:
    runtime = CudaRuntimeStub(device_offset=0)
    runtime.current = 1
    buf = PinnedBuffer(3000, "x.ibp", _cuda(runtime))
    buf.array[:3000] = 7
    ptr = buf.pin()
    assert ptr == buf.host_ptr and runtime.registrations[0][1] >= 3000 + 16
    assert runtime.registrations[0][2] & 0x02  # cudaHostRegisterMapped
    assert buf.pin() == ptr and len(runtime.registrations) == 1  # pinned once
    runtime.current = 0  # released from another device's thread
    buf.close()
    # The registering device is waited for, then the memory unregistered with it current.
    assert runtime.log[1:] == [("sync", None, 1), ("unregister", ptr, 1)]
    assert runtime.current == 0
    buf.close()  # idempotent
    assert runtime.unregistered() == [ptr]


def test_dropping_a_pinned_buffer_defers_the_unpinning_to_a_safe_point() -> None:
    from ibp_graph.pinned import deferred_count, release_deferred

    release_deferred()
    runtime = CudaRuntimeStub()
    buf = PinnedBuffer(100, "x.ibp", _cuda(runtime))
    ptr = buf.pin()
    del buf
    gc.collect()
    # No device-wide synchronise from a destructor (it may run in the middle of an epoch).
    assert runtime.calls() == ["register"]
    assert deferred_count() == 1
    assert release_deferred() == 1
    assert runtime.calls() == ["register", "sync", "unregister"]
    assert runtime.unregistered() == [ptr] and deferred_count() == 0
    # A new buffer releases what was dropped before it pins anything.
    buf = PinnedBuffer(100, "y.ibp", _cuda(runtime))
    buf.pin()
    del buf
    gc.collect()
    PinnedBuffer(100, "z.ibp", _cuda(runtime)).close()
    assert deferred_count() == 0 and len(runtime.unregistered()) == 2


def test_a_buffer_collected_while_the_deferred_list_is_locked_defers_itself() -> None:
    # The collector may drop a buffer held in a reference cycle on any thread, also on the one
    # that holds the list's lock (release_deferred allocates while it holds it).
    from ibp_graph import pinned

    pinned.release_deferred()
    runtime = CudaRuntimeStub()
    done = threading.Event()

    def drop_in_cycle() -> None:
        buf = PinnedBuffer(100, "x.ibp", _cuda(runtime))
        buf.pin()
        buf.cycle = buf
        del buf
        with pinned._DEFERRED_LOCK:
            gc.collect()
        done.set()

    threading.Thread(target=drop_in_cycle, daemon=True).start()
    assert done.wait(10), "a buffer dropped under the lock waited for it forever"
    assert pinned.release_deferred() == 1
    assert runtime.calls() == ["register", "sync", "unregister"]


def test_a_buffer_dropped_at_interpreter_shutdown_is_left_to_the_process_exit(
    monkeypatch, capsys
) -> None:
    # At shutdown module globals may already be None: nothing to defer to, and no
    # "Exception ignored in PinnedBuffer.__del__" printed at exit.
    from ibp_graph import pinned

    runtime = CudaRuntimeStub()
    buf = PinnedBuffer(100, "x.ibp", _cuda(runtime))
    buf.pin()
    monkeypatch.setattr(pinned, "_DEFERRED", None)
    buf.__del__()
    assert runtime.calls() == ["register"]
    assert "Exception" not in capsys.readouterr().err
    monkeypatch.undo()
    buf.close()
    assert runtime.calls() == ["register", "sync", "unregister"]


def test_to_device_on_the_cpu_is_tensor_to() -> None:
    from ibp_graph.pinned import to_device

    t = torch.arange(5)
    assert to_device(t, torch.device("cpu")) is t  # as ``t.to("cpu")``: the tensor itself


@pytest.mark.parametrize("pages", ["huge", "small"])
def test_pinned_pages_are_zeroed_and_aligned(pages, monkeypatch) -> None:
    from ibp_graph.pinned import HUGE_PAGE

    buf = PinnedBuffer(5 * 4096 + 3, "x.ibp", _cuda(CudaRuntimeStub()), pages=pages)
    assert buf.pages == pages and buf.array.size >= 5 * 4096 + 3 + 16
    assert not buf.array.any()
    assert buf.host_ptr % (HUGE_PAGE if pages == "huge" else mmap.PAGESIZE) == 0
    buf.array[:] = 1  # writable, private
    buf.close()
    monkeypatch.setenv("IBP_GRAPH_PINNED_PAGES", "small")
    assert PinnedBuffer(10, "x", _cuda(CudaRuntimeStub())).pages == "small"
    monkeypatch.setenv("IBP_GRAPH_PINNED_PAGES", "tiny")
    with pytest.raises(ValueError, match="IBP_GRAPH_PINNED_PAGES='tiny'"):
        PinnedBuffer(10, "x", _cuda(CudaRuntimeStub()))
    with pytest.raises(ValueError, match="pages must be one of"):
        PinnedBuffer(10, "x", _cuda(CudaRuntimeStub()), pages="2M")


def test_pinning_in_chunks_needs_one_device_range(monkeypatch) -> None:
    monkeypatch.setattr("ibp_graph.pinned.REGISTER_CHUNK", 4096)
    runtime = CudaRuntimeStub()
    buf = PinnedBuffer(10_000, "x.ibp", _cuda(runtime))
    assert buf.pin() == buf.host_ptr
    assert [r[0] - buf.host_ptr for r in runtime.registrations] == [0, 4096, 8192]
    buf.close()
    # Chunks that the device sees at scattered addresses cannot be read as one table.
    runtime = CudaRuntimeStub(device_offset=1 << 20)
    buf = PinnedBuffer(10_000, "x.ibp", _cuda(runtime))
    with pytest.raises(PinningError, match="not one contiguous range"):
        buf.pin()
    assert sorted(runtime.unregistered()) == sorted(r[0] for r in runtime.registrations)
    # A device that cannot use host pointers gets one registration (one mapped range).
    runtime = CudaRuntimeStub(can_use_host_pointer=0, device_offset=1 << 20)
    buf = PinnedBuffer(10_000, "x.ibp", _cuda(runtime))
    assert buf.pin() == buf.host_ptr and len(runtime.registrations) == 1
    buf.close()


def test_pinning_refuses_only_more_than_the_machine_has(monkeypatch) -> None:
    # Above MemAvailable is allowed (memory that grows on demand, reclaimable cache) ...
    monkeypatch.setattr("ibp_graph.pinned.available_memory", lambda: 1 << 20)
    buf = PinnedBuffer(8 << 20, "fits.ibp", _cuda(CudaRuntimeStub()))
    buf.close()
    # ... above MemTotal is not.
    monkeypatch.setattr("ibp_graph.pinned.total_memory", lambda: 1 << 20)
    with pytest.raises(PinningError, match=r"has only 0.00 GiB of memory \(MemTotal; set IBP_"):
        PinnedBuffer(1 << 30, "big.ibp", _cuda(CudaRuntimeStub()))
    # Where memory grows on demand, IBP_GRAPH_HOST_MEMORY says how much there is.
    monkeypatch.setenv("IBP_GRAPH_HOST_MEMORY", "2G")
    PinnedBuffer(1 << 30, "grows.ibp", _cuda(CudaRuntimeStub())).close()
    with pytest.raises(PinningError, match=r"only 2.00 GiB of memory \(IBP_GRAPH_HOST_MEMORY"):
        PinnedBuffer(3 << 30, "big.ibp", _cuda(CudaRuntimeStub()))


@pytest.mark.parametrize(
    "value,want", [("4096", 4096), ("64k", 64 << 10), (" 3M ", 3 << 20), ("128G", 128 << 30),
                   ("2T", 2 << 40)]
)  # fmt: skip
def test_host_memory_reads_the_variable(monkeypatch, value, want) -> None:
    from ibp_graph.pinned import host_memory

    monkeypatch.setenv("IBP_GRAPH_HOST_MEMORY", value)
    assert host_memory() == want


@pytest.mark.parametrize("value", ["lots", "-1G", "0", "1.5G", "12GB", "G"])
def test_a_malformed_host_memory_variable_is_named(monkeypatch, value) -> None:
    from ibp_graph.pinned import host_memory

    monkeypatch.setenv("IBP_GRAPH_HOST_MEMORY", value)
    with pytest.raises(ValueError, match=r"IBP_GRAPH_HOST_MEMORY must be a positive number"):
        host_memory()
    with pytest.raises(ValueError, match=r"IBP_GRAPH_HOST_MEMORY must be"):
        PinnedBuffer(1 << 20, "x.ibp", _cuda(CudaRuntimeStub()))


def test_raw_rows_are_pinned_little_endian_and_row_major() -> None:
    from ibp_graph.cuda_table import _fill_pinned_rows

    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 7)).astype(np.float32)
    for source in (x.astype(">f4"), np.asfortranarray(x), x[:, ::-1].copy()[:, ::-1]):
        buf = PinnedBuffer(x.nbytes, "raw", _cuda(CudaRuntimeStub()))
        _fill_pinned_rows(buf, source, np.dtype("<f4"), "pin", progress=False)
        assert buf.array[: x.nbytes].tobytes() == x.tobytes()
        assert not buf.array[x.nbytes :].any()  # the zero tail
        buf.close()


class _RecordingTable:
    """A `_CudaTableBase` on the CPU whose "kernel" writes row ``[id, -id]`` for each id, as
    the kernels do: at ``out_pos[r]`` (or ``r``), zeros and the smallest such position in
    ``error[0]`` for ids out of range."""

    @staticmethod
    def make(num_rows: int = 10, sort_ids: bool = False):
        from ibp_graph.cuda_table import _CudaTableBase

        class Table(_CudaTableBase):
            path = "t.ibp"

            def __init__(self):
                super().__init__(torch.device("cpu"), None, sort_ids)
                self.shape = (num_rows, 2)
                self.dtype = torch.float32
                self._pinned = object()
                self.errors_seen: list[list[int]] = []
                self.launched: list[tuple[torch.Tensor, torch.Tensor | None]] = []

            @property
            def _row_bytes(self) -> int:
                return 8

            def _launch(self, idx, out, error, stream, out_pos=None) -> None:
                self.errors_seen.append(error.tolist())
                self.launched.append((idx.clone(), None if out_pos is None else out_pos.clone()))
                pos = torch.arange(idx.numel()) if out_pos is None else out_pos
                ok = (idx >= 0) & (idx < num_rows)
                if not ok.all():
                    error[0] = int(pos[~ok].min()) + 1
                rows = torch.stack([idx, -idx], 1).float()
                out[pos] = torch.where(ok[:, None], rows, 0.0)

        return Table()


def test_every_fetch_has_its_own_zeroed_error_slots() -> None:
    table = _RecordingTable.make()
    ids = torch.tensor([1, 2, 3])
    bad = torch.tensor([1, 99, 3])
    table.fetch(bad, check=False)  # an unchecked fetch with a bad id ...
    assert table.fetch(ids).shape == (3, 2)  # ... leaves nothing for the next one to report
    with pytest.raises(IBPInputError, match=r"row index 99 \(at position 1\)"):
        table.fetch(bad)
    assert table.fetch(torch.tensor([4, 5])).shape == (2, 2)
    assert table.errors_seen == [[0, 0]] * 4
    assert table.fetch(torch.empty(0, dtype=torch.int64)).shape == (0, 2)
    assert len(table.errors_seen) == 4  # nothing launched for no ids


def test_one_row_selections_give_one_row_as_on_the_cpu_table() -> None:
    table = _RecordingTable.make()
    for index in (3, np.int64(3), np.array(3), torch.tensor(3), -7):
        assert torch.equal(table[index], torch.tensor([3.0, -3.0])), index
    for index in ([3], np.array([3]), torch.tensor([3]), slice(3, 4)):
        assert torch.equal(table[index], torch.tensor([[3.0, -3.0]])), index


def test_fetch_checks_its_arguments_and_that_the_table_is_open() -> None:
    table = _RecordingTable.make()
    with pytest.raises(ValueError, match="idx must be a contiguous 1-D int64"):
        table.fetch(torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match="out holds"):
        table.fetch(torch.tensor([1, 2]), out=torch.empty(2, 3))
    table._pinned = None
    with pytest.raises(IBPInputError, match="closed"):
        table.fetch(torch.tensor([1]))


def test_sort_ids_launches_the_sorted_ids_and_errors_name_the_callers_position() -> None:
    plain, ordered = _RecordingTable.make(), _RecordingTable.make(sort_ids=True)
    assert not plain.sort_ids and ordered.sort_ids
    ids = torch.tensor([7, 2, 9, 2, 0, 5])
    got = ordered.fetch(ids)
    assert torch.equal(got, plain.fetch(ids))  # the same rows, in the caller's order
    assert torch.equal(got[:, 0], ids.float())
    run, out_pos = ordered.launched[-1]
    assert torch.equal(run, torch.tensor([0, 2, 2, 5, 7, 9]))  # one launch, ids ascending
    assert torch.equal(ids[out_pos], run)  # each row goes back to where the caller had it
    assert plain.launched[-1][1] is None  # off by default: no sort, no positions
    bad = torch.tensor([3, 12, 1, -4, 5])  # sorted, -4 (position 3) comes first
    with pytest.raises(IBPInputError, match=r"row index 12 \(at position 1\)"):
        ordered.fetch(bad)
    out = ordered.fetch(bad, check=False)
    assert torch.equal(out, plain.fetch(bad, check=False))
    assert (out[[1, 3]] == 0).all() and torch.equal(out[[0, 2, 4], 0], bad[[0, 2, 4]].float())
    with pytest.raises(IBPInputError, match="sort_ids must be a bool, got 'str'"):
        _RecordingTable.make(sort_ids="yes")


def test_tables_sort_ids_by_default_where_the_fetch_is_bound_by_the_link() -> None:
    from ibp_graph.cuda_table import SORT_BELOW_RATIO, default_sort_ids

    assert default_sort_ids(None, 1.17, False) and default_sort_ids(None, 2.7, False)  # dense
    assert not default_sort_ids(None, 15.1, False) and not default_sort_ids(None, 123.1, False)
    assert not default_sort_ids(None, SORT_BELOW_RATIO, False)  # the bound itself: decode-bound
    assert default_sort_ids(None, 1.0, True)  # raw rows: a raw gather
    assert default_sort_ids(True, 123.1, False) and not default_sort_ids(False, 1.0, True)
    with pytest.raises(IBPInputError, match="sort_ids must be a bool, got 'int'"):
        default_sort_ids(1, 1.0, True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_open_on_cuda_without_a_gpu_is_a_clear_error(tmp_path) -> None:
    ibp_graph.compress(np.ones((4, 3), np.float32), tmp_path / "x.ibp")
    with pytest.raises(ibp_graph.IBPDeviceError, match="needs a CUDA GPU"):
        ibp_graph.open(tmp_path / "x.ibp", device="cuda")
    with pytest.raises(ibp_graph.IBPDeviceError, match="needs a CUDA GPU"):
        ibp_graph.compress(np.ones((4, 3), np.float32), tmp_path / "y.ibp", device="cuda")
    with pytest.raises(IBPInputError, match="device must be"):
        ibp_graph.compress(np.ones((4, 3), np.float32), tmp_path / "y.ibp", device="tpu")
    with pytest.raises(TypeError, match="max_blocks"):
        ibp_graph.open(tmp_path / "x.ibp", max_blocks=4)


# -- on a GPU: bit-identical to the NumPy decoder ------------------------------------------

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8"]


def _table(dtype: str, rng: np.random.Generator, n: int = 3000, d: int = 37) -> torch.Tensor:
    bits = torch.from_numpy(rng.integers(0, 256, (n, d * 8), dtype=np.uint8))
    tdt = getattr(torch, dtype)
    size = torch.empty((), dtype=tdt).element_size()
    x = bits[:, : d * size].contiguous().view(tdt)
    sparse = torch.from_numpy(rng.random((n, d)) < 0.9)
    x[sparse] = 0  # mostly zeros: encoded rows (raw ones only for some 8-bit cases)
    return x


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("word_bytes,align,clusters", [(4, "auto", 1), (8, 16, 3), (4, 1, 2)])
def test_fetch_matches_cpu_decoder(tmp_path, dtype, word_bytes, align, clusters) -> None:
    rng = np.random.default_rng(0)
    x = _table(dtype, rng)
    path = tmp_path / "x.ibp"
    cpu = ibp_graph.compress(x, path, word_bytes=word_bytes, align=align, clusters=clusters)
    with ibp_graph.open(path, device="cuda") as gpu_table:
        ids = torch.from_numpy(rng.integers(0, x.shape[0], 5000)).cuda()
        got = gpu_table[ids]
        assert got.is_cuda and got.dtype == x.dtype
        want = cpu[ids.cpu()]
        assert torch.equal(got.cpu().view(torch.uint8), want.view(torch.uint8))
        assert gpu_table[torch.empty(0, dtype=torch.int64, device="cuda")].shape == (0, 37)


@gpu
@needs_gpu
def test_fetch_rejects_out_of_range_ids_without_a_fault(tmp_path) -> None:
    x = _table("float32", np.random.default_rng(1))
    ibp_graph.compress(x, tmp_path / "x.ibp")
    with ibp_graph.open(tmp_path / "x.ibp", device="cuda") as t:
        for bad in (len(x), -1):
            with pytest.raises(IBPInputError, match="out of range"):
                t.fetch(torch.tensor([0, bad, 2], device="cuda"))
        got = t[[2, 2, 0]].cpu()  # still usable afterwards
        assert torch.equal(got.view(torch.int32), x[[2, 2, 0]].view(torch.int32))


@gpu
@needs_gpu
def test_raw_pinned_table_matches(tmp_path) -> None:
    from ibp_graph.cuda_table import PinnedRawTable

    x = _table("float16", np.random.default_rng(2), d=33)
    with PinnedRawTable(x) as t:
        ids = torch.randint(0, len(x), (777,), device="cuda")
        assert torch.equal(t[ids].cpu().view(torch.int16), x[ids.cpu()].view(torch.int16))


@gpu
@needs_gpu
@pytest.mark.parametrize("clusters,word_bytes", [(1, 4), (3, 4), (2, 8)])
def test_gpu_encoder_writes_the_cpu_encoders_bytes(tmp_path, clusters, word_bytes) -> None:
    x = _table("float32", np.random.default_rng(3), n=5000, d=50)
    cpu = tmp_path / "cpu.ibp"
    gpu_path = tmp_path / "gpu.ibp"
    ibp_graph.compress(x, cpu, clusters=clusters, word_bytes=word_bytes)
    ibp_graph.compress(x, gpu_path, clusters=clusters, word_bytes=word_bytes, device="cuda")
    assert cpu.read_bytes() == gpu_path.read_bytes()


def test_raw_bypass_is_detected_only_for_unpadded_all_raw_tables(tmp_path) -> None:
    from ibp_graph.cuda_table import raw_bypass

    rng = np.random.default_rng(5)
    noise = rng.integers(0, 2**32, (500, 64), dtype=np.uint64).astype(np.uint32)
    table = ibp_graph.compress(noise.view(np.float32), tmp_path / "noise.ibp", align=16)
    assert table.stats["rows_raw"] == 500 and raw_bypass(table)
    odd = noise[:, :63].copy()  # 252-byte rows padded to 256: stored rows are not the table
    padded = ibp_graph.compress(odd.view(np.float32), tmp_path / "odd.ibp", align=16)
    assert padded.stats["rows_raw"] == 500 and not raw_bypass(padded)
    sparse = ibp_graph.compress(np.zeros((500, 64), np.float32), tmp_path / "zeros.ibp")
    assert not raw_bypass(sparse)


@gpu
@needs_gpu
def test_incompressible_table_is_fetched_raw_and_exact(tmp_path) -> None:
    rng = np.random.default_rng(6)
    noise = rng.integers(0, 2**32, (2000, 64), dtype=np.uint64).astype(np.uint32)
    ibp_graph.compress(noise.view(np.float32), tmp_path / "noise.ibp", align=16)
    with ibp_graph.open(tmp_path / "noise.ibp", device="cuda") as t:
        assert t.bypass
        ids = torch.randint(0, 2000, (999,), device="cuda")
        got = t[ids].cpu().view(torch.int32)
        assert torch.equal(got, torch.from_numpy(noise.view(np.int32))[ids.cpu()])


@gpu
@needs_gpu
def test_fetch_matches_cpu_decoder_on_the_real_tables(tmp_path, real_table_rows) -> None:
    rng = np.random.default_rng(2)
    for name, x in real_table_rows:
        for clusters in (1, 3):
            path = tmp_path / f"{name}-{clusters}.ibp"
            cpu = ibp_graph.compress(x, path, clusters=clusters, progress=False)
            with ibp_graph.open(path, device="cuda") as gpu_table:
                ids = torch.from_numpy(rng.integers(0, x.shape[0], 4000)).cuda()
                got = gpu_table[ids].cpu()
                want = cpu[ids.cpu()]
                assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), name


# -- on a GPU: streams, devices, lifetimes ---------------------------------------------------


@gpu
@needs_gpu
def test_a_fetch_on_a_side_stream_does_not_hold_up_the_default_stream(tmp_path) -> None:
    x = _table("float32", np.random.default_rng(8))
    ibp_graph.compress(x, tmp_path / "x.ibp")
    with ibp_graph.open(tmp_path / "x.ibp", device="cuda") as t:
        ids = torch.randint(0, len(x), (4000,), device="cuda")
        t.fetch(ids)  # compiled and warm
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000_000)  # the side stream is busy for about a second
            out = t.fetch(ids, stream=side, check=False)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream())
        # The default stream was given nothing to wait for: its event completes at once.
        done.synchronize()
        assert not side.query(), "the default stream waited for the side stream's work"
        side.synchronize()
        assert torch.equal(out.cpu().view(torch.int32), x[ids.cpu()].view(torch.int32))


@gpu
@needs_gpu
def test_an_unchecked_bad_id_is_not_reported_by_a_later_fetch(tmp_path) -> None:
    x = _table("float32", np.random.default_rng(9))
    ibp_graph.compress(x, tmp_path / "x.ibp")
    with ibp_graph.open(tmp_path / "x.ibp", device="cuda") as t:
        t.fetch(torch.tensor([0, len(x) + 5], device="cuda"), check=False)
        got = t.fetch(torch.tensor([3, 4], device="cuda"))
        assert torch.equal(got.cpu().view(torch.int32), x[[3, 4]].view(torch.int32))


@gpu
@needs_gpu
def test_dropping_a_table_right_after_an_unchecked_fetch_is_safe(tmp_path) -> None:
    x = _table("float16", np.random.default_rng(10), n=20_000, d=64)
    ibp_graph.compress(x, tmp_path / "x.ibp")
    ids = torch.randint(0, len(x), (200_000,), device="cuda")
    t = ibp_graph.open(tmp_path / "x.ibp", device="cuda")
    out = t.fetch(ids, check=False)
    del t  # unpinned while the kernel may still run: must wait for it
    gc.collect()
    torch.cuda.synchronize()
    assert torch.equal(out.cpu().view(torch.int16), x[ids.cpu()].view(torch.int16))


@gpu
@needs_gpu
def test_raw_gather_into_an_output_view_of_any_alignment() -> None:
    from ibp_graph.cuda_table import PinnedRawTable

    x = _table("int8", np.random.default_rng(11), d=64)
    ids = torch.randint(0, len(x), (100,), device="cuda")
    with PinnedRawTable(x) as t:
        buf = torch.zeros(100 * 64 + 16, dtype=torch.int8, device="cuda")
        for offset in (0, 1, 4, 8):
            out = buf[offset : offset + 100 * 64].view(100, 64)
            t.fetch(ids, out=out)
            assert torch.equal(out.cpu(), x[ids.cpu()])


@gpu
@needs_gpu
def test_pinned_raw_table_of_a_big_endian_array_holds_its_values() -> None:
    from ibp_graph.cuda_table import PinnedRawTable

    x = np.random.default_rng(12).standard_normal((500, 9)).astype(">f4")
    with PinnedRawTable(x) as t:
        assert np.array_equal(t[[0, 7, 499]].cpu().numpy(), x[[0, 7, 499]].astype("<f4"))


@gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs"
)
def test_a_table_on_the_second_gpu_works_while_the_first_is_current(tmp_path) -> None:
    x = _table("float32", np.random.default_rng(13))
    ibp_graph.compress(x, tmp_path / "x.ibp")
    torch.cuda.set_device(0)
    with ibp_graph.open(tmp_path / "x.ibp", device="cuda:1") as t:
        ids = torch.randint(0, len(x), (3000,), device="cuda:1")
        assert torch.cuda.current_device() == 0
        got = t.fetch(ids)
        assert got.device == torch.device("cuda", 1)
        assert torch.equal(got.cpu().view(torch.int32), x[ids.cpu()].view(torch.int32))
        assert torch.cuda.current_device() == 0
        side = torch.cuda.Stream(device=0)
        with pytest.raises(ValueError, match="stream must be a CUDA stream on cuda:1"):
            t.fetch(ids, stream=side)


def test_resident_blocks_follow_registers_shared_memory_and_threads() -> None:
    from ibp_graph.kernels.runtime import resident_blocks_per_sm

    h100 = types.SimpleNamespace(
        regs_per_multiprocessor=65536,
        max_threads_per_multi_processor=2048,
        shared_memory_per_multiprocessor=228 * 1024,
    )
    assert resident_blocks_per_sm(64, 256, 0, h100) == 4  # the register file
    assert resident_blocks_per_sm(66, 256, 0, h100) == 3  # 72 registers allocated per thread
    assert resident_blocks_per_sm(32, 256, 0, h100) == 8  # the thread slots
    assert resident_blocks_per_sm(32, 256, 100 * 1024, h100) == 2  # shared memory (+1 KiB each)
    assert resident_blocks_per_sm(255, 1024, 0, h100) == 1  # never 0
    assert resident_blocks_per_sm(64, 256, 0, types.SimpleNamespace()) == 4  # sm_80/90 defaults


def test_the_shared_memory_limit_is_raised_once_per_kernel_and_device(monkeypatch) -> None:
    from ibp_graph.kernels import runtime

    sets: list[tuple[str, int, int]] = []

    class Fn:
        def __init__(self, entry: str, device: int) -> None:
            self.entry, self.device = entry, device

        def __setattr__(self, name: str, value: object) -> None:
            if name == "max_dynamic_shared_size_bytes":
                sets.append((self.entry, self.device, value))
            object.__setattr__(self, name, value)

    made: dict[tuple[str, str, int], Fn] = {}

    def fake_kernel(source: str, entry: str, device: int) -> Fn:
        return made.setdefault((source, entry, device), Fn(entry, device))

    monkeypatch.setattr(runtime, "_kernel", fake_kernel)
    monkeypatch.setattr(runtime, "_KERNELS", {})
    limit = 227 * 1024
    for _ in range(3):
        fn = runtime.kernel("fetch_decode.cu", "a", 0, max_smem=limit)
        assert fn.max_dynamic_shared_size_bytes == limit
    runtime.kernel("fetch_decode.cu", "a", 1, max_smem=limit)  # another device: its own
    runtime.kernel("fetch_decode.cu", "b", 0)  # narrow launches leave the limit alone
    assert sets == [("a", 0, limit), ("a", 1, limit)]


def test_default_grid_is_its_blocks_per_sm_and_never_more_than_fits(monkeypatch) -> None:
    from ibp_graph.kernels import runtime

    props = types.SimpleNamespace(
        multi_processor_count=132,
        regs_per_multiprocessor=65536,
        max_threads_per_multi_processor=2048,
        shared_memory_per_multiprocessor=228 * 1024,
    )
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    fn = types.SimpleNamespace(num_regs=64, shared_size_bytes=0)
    dev = torch.device("cuda", 0)
    assert runtime.grid_size(10_000, dev, None, kernel_fn=fn, threads=256) == 132
    assert runtime.grid_size(5, dev, None, kernel_fn=fn, threads=256) == 5
    assert runtime.grid_size(10_000, dev, 2, kernel_fn=fn, threads=256) == 2
    # An explicit cap above what the SMs hold at once is cut to the resident blocks.
    assert runtime.grid_size(10_000, dev, 10_000, kernel_fn=fn, threads=256) == 4 * 132
    big = types.SimpleNamespace(num_regs=128, shared_size_bytes=0)
    assert runtime.grid_size(10_000, dev, 10_000, kernel_fn=big, threads=256) == 2 * 132
    assert runtime.grid_size(0, dev, None, kernel_fn=fn) == 1
    # A side-stream fetch's default: a block on a quarter of the SMs, at least one block.
    quarter = runtime.SIDE_STREAM_BLOCKS_PER_SM
    assert runtime.grid_size(10_000, dev, None, kernel_fn=fn, per_sm=quarter) == 33
    assert runtime.grid_size(10, dev, None, kernel_fn=fn, per_sm=quarter) == 10
    assert runtime.grid_size(10_000, dev, 200, kernel_fn=fn, per_sm=quarter) == 200
    # per_sm None: every block the SMs hold at once, and no more than the work needs.
    assert runtime.grid_size(10_000, dev, None, kernel_fn=fn, per_sm=None) == 4 * 132
    assert runtime.grid_size(10_000, dev, None, kernel_fn=big, per_sm=None) == 2 * 132
    assert runtime.grid_size(300, dev, None, kernel_fn=fn, per_sm=None) == 300
    assert runtime.grid_size(10_000, dev, 7, kernel_fn=fn, per_sm=None) == 7
    props.multi_processor_count = 2
    assert runtime.grid_size(10_000, dev, None, kernel_fn=fn, per_sm=quarter) == 1


def test_a_fetch_given_a_stream_takes_a_share_of_the_sms_and_one_given_none_all() -> None:
    from ibp_graph.kernels import runtime

    # A prefetch passes its side stream while that stream is also the current one: a given
    # stream, whichever it is, means "beside the caller's work".
    assert runtime.fetch_blocks_per_sm(object()) == runtime.SIDE_STREAM_BLOCKS_PER_SM
    assert runtime.fetch_blocks_per_sm(None) is None
    assert 0 < runtime.SIDE_STREAM_BLOCKS_PER_SM < 1


def test_device_codec_checks_its_constant_tensors_once() -> None:
    import dataclasses

    from ibp_graph.kernels.fetch_decode import DeviceCodec

    k, v, e, n = 2, 5, 3, 10
    codec = DeviceCodec(
        rows_ptr=0x1000,
        offsets=torch.zeros(n + 1, dtype=torch.int32),
        cluster_ids=torch.zeros(n, dtype=torch.uint8),
        masks=torch.zeros((k, v), dtype=torch.int32),
        code_bits=torch.zeros((k, v), dtype=torch.uint8),
        bitvals=torch.zeros((k, e, v), dtype=torch.int32),
        num_rows=n,
        num_words=v,
        word_bytes=4,
        align=16,
        row_bytes=20,
    )
    args = codec.const_args
    assert [int(a) for a in args] == [
        codec.offsets.data_ptr(),
        codec.cluster_ids.data_ptr(),
        codec.masks.data_ptr(),
        codec.code_bits.data_ptr(),
        codec.bitvals.data_ptr(),
        *(t.data_ptr() for t in codec.prefix_tensors),
        codec.layout_tensor.data_ptr(),
    ]
    assert codec.const_args is args  # computed once per table
    bad = {
        "code_bits": torch.zeros((k, v), dtype=torch.int8),
        "masks": torch.zeros((k, v), dtype=torch.int64),  # 8-byte words for word_bytes=4
        "offsets": torch.zeros(n, dtype=torch.int32),
        "bitvals": torch.zeros((k, v, e), dtype=torch.int32).transpose(0, 1),
        "cluster_ids": np.zeros(n, dtype=np.uint8),
    }
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            dataclasses.replace(codec, **{name: value})
    for longest in (-1, 2.5, "80"):
        with pytest.raises(ValueError, match="longest_row must be None or bytes >= 0"):
            dataclasses.replace(codec, longest_row=longest)
    assert codec.longest_row is None  # the default: buffers for the longest a row can be
    short = dataclasses.replace(codec, longest_row=1)  # rows of 20 bytes stored in 1
    assert (short.plan(48 * 1024).buf_words, codec.plan(48 * 1024).buf_words) == (8, 16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("pinned", [False, True])
def test_gpu_to_device_waits_for_no_kernel_and_reads_its_own_copy(pinned: bool) -> None:
    from ibp_graph.pinned import to_device

    t = torch.arange(1000) * 3
    t = t.pin_memory() if pinned else t
    want = t.clone()
    torch.cuda._sleep(200_000_000)  # the current stream is busy for about 0.1 s
    got = to_device(t, torch.device("cuda"))
    assert not torch.cuda.current_stream().query()  # returned before the stream got there
    t.fill_(-1)  # the caller refills its buffer at once
    torch.cuda.synchronize()
    assert got.is_cuda and torch.equal(got.cpu(), want)


def test_line_information_is_asked_for_by_its_variable_and_compiles(nvrtc, monkeypatch) -> None:
    from ibp_graph.kernels.runtime import LINEINFO_ENV, nvrtc_options

    monkeypatch.delenv(LINEINFO_ENV, raising=False)
    assert nvrtc_options() == NVRTC_OPTIONS
    monkeypatch.setenv(LINEINFO_ENV, "0")
    assert nvrtc_options() == NVRTC_OPTIONS
    monkeypatch.setenv(LINEINFO_ENV, "1")
    assert nvrtc_options() == (*NVRTC_OPTIONS, "-lineinfo")
    # One entry point, to PTX only (quicker): every kernel's whole build is
    # test_every_kernel_compiles.
    text = runtime.entry_source(
        (cuda_dir() / "fetch_decode.cu").read_text(), "ibp_fetch_decode_db_w4_o4"
    )
    code = {
        options: ptx.compile_ptx(text, "fetch_decode.cu", "compute_90", options)[0]
        for options in (NVRTC_OPTIONS, nvrtc_options())
    }
    # The PTX of the second names its lines in fetch_decode.cu; the first's does not.
    assert ".loc" not in code[NVRTC_OPTIONS] and ".loc" in code[nvrtc_options()]
    assert "fetch_decode.cu" in code[nvrtc_options()]


def test_a_module_built_with_line_information_names_its_file(nvrtc, monkeypatch) -> None:
    from ibp_graph.kernels.runtime import LINEINFO_ENV, module_source

    monkeypatch.delenv(LINEINFO_ENV, raising=False)
    path = (cuda_dir() / "fetch_decode.cu").resolve()
    whole, options = module_source("fetch_decode.cu")
    assert whole == path.read_text() and options == NVRTC_OPTIONS
    monkeypatch.setenv(LINEINFO_ENV, "1")
    entry = "ibp_fetch_decode_db_w8_o8"  # the last: every other entry's line goes before it
    text, options = module_source("fetch_decode.cu", entry)
    assert text.startswith(f'#line 1 "{path}"\n') and "-lineinfo" in options
    # Compiled under CuPy's name for it (a temporary file), the lines name the source file,
    # and keep their numbers: the entry's own line is where the file has it.
    code = ptx.compile_ptx(text, "/tmp/gone/kern.cu", "compute_90", options)[0]
    files = dict(re.findall(r'\.file\s+(\d+)\s+"([^"]+)"', code))
    assert str(path) in files.values() and "/tmp/gone/kern.cu" not in files.values()
    (number,) = [n for n, f in files.items() if f == str(path)]
    lines = {int(x) for x in re.findall(rf"\.loc\s+{number}\s+(\d+)\s", code)}
    source = path.read_text().splitlines()
    at = next(i for i, line in enumerate(source, 1) if "const u64 first = s.start" in line)
    assert at in lines and max(lines) < len(source)  # a line of stage_row, at its number
    # Every line the code is attributed to holds code: not blank, not a comment.
    marked = [source[n - 1].strip() for n in lines if n > 0]
    assert all(line and not line.startswith("//") for line in marked)
