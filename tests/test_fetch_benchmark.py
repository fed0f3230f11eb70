"""The GPU benchmarks' pure-Python parts, on the CPU: benchmarks/fetch.py and benchmarks/e2e.py.

fetch.py's GPU run is exercised end to end with a stand-in for CuPy's ``cuda`` module (pinning
is a no-op, the device address is the host address) and the two kernel launchers replaced by
NumPy versions that read the "device" memory at those addresses: the case list, tiling,
offsets, codec tensors, timing loops, checks, targets and result files all run as on a GPU.
"""

from __future__ import annotations

import ctypes
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from cuda_runtime_stub import CudaRuntimeStub

import ibp_graph
from benchmarks import _env, e2e, fetch
from benchmarks._targets import verdict
from ibp_graph import cuda_table, decode_cpu
from ibp_graph.codec import CodecParams
from ibp_graph.kernels import fetch_decode as fused
from ibp_graph.kernels import raw_gather as gather
from ibp_graph.kernels.fetch_decode import check_error, check_launch, check_out_pos
from ibp_graph.pinned import transparent_huge_pages

REPO = Path(__file__).resolve().parents[1]

SMALL = [
    "--table-gb", "0.002", "--batch", "300,5000", "--max-batch-gb", "0.0005", "--repeats", "2",
    "--torch-repeats", "1", "--widths", "256,512", "--block-rows", "64", "--no-real",
]  # fmt: skip


# --------------------------------------------------------------------------------------------
# Arguments, cases, geometry
# --------------------------------------------------------------------------------------------


def test_defaults_follow_the_spec() -> None:
    args = fetch.parse_args([])
    assert args.widths == [256, 512, 1024, 4096]
    assert args.kinds == list(fetch.KINDS) and "random-bits" in args.kinds
    assert args.table_gb >= 2 and args.table_bytes == int(args.table_gb * 2**30)
    assert args.batch == [100_000, 1_000_000]
    assert args.real and not args.dry_run and args.out == _env.RESULTS
    assert not args.sort_ids and not args.double_buffer
    assert fetch.settings(args)["double_buffer"] is False
    assert fetch.parse_args(["--double-buffer"]).double_buffer
    assert fetch.settings(fetch.parse_args(["--double-buffer"]))["double_buffer"] is True
    assert args.time_budget < 540  # a case started before the budget ends in the stage limit


def test_block_warps_default_to_the_librarys_and_reach_every_launch(
    numpy_kernels, tmp_path: Path
) -> None:
    assert fetch.parse_args([]).block_warps is None
    assert fetch.settings(fetch.parse_args(["--block-warps", "32"]))["block_warps"] == [32]
    assert fetch.parse_args(["--block-warps", "8,32,8"]).block_warps == [8, 32]
    one = [*SMALL, "--widths", "256", "--kinds", "sparse-5pct", "--max-blocks", "0.25"]
    doc = fake_gpu_run([*one, "--block-warps", "32"], tmp_path)
    assert doc["cases"] and all(r["bit_identical"] for r in doc["cases"])
    # raw, ibp and decode-only: every launch in blocks of 32 warps (decode capacity: none,
    # one block of 32 warps of 64 registers fills the stand-in's one SM).
    assert LAUNCHED_WARPS and set(LAUNCHED_WARPS) == {32}
    assert {r["decode_capacity_note"] for r in doc["cases"]} == {fetch.CAPACITY_FULL}
    assert {r["block_warps"] for r in doc["cases"]} == {32}
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "; blocks of 32 warps;" in md and "| sparse-5pct-256B (32-warp blocks) |" in md
    # Two sizes: each batch at both in turn, side by side.
    LAUNCHED_WARPS.clear()
    doc = fake_gpu_run([*one, "--block-warps", "8,32"], tmp_path)
    got = [(r["batch"], r["block_warps"]) for r in doc["cases"]]
    batches = sorted({b for b, _ in got})
    assert got == [(b, w) for b in batches for w in (8, 32)] and len(batches) == 2
    assert all(r["bit_identical"] for r in doc["cases"])
    assert set(LAUNCHED_WARPS) == {8, 32}
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "blocks of 8 and 32 warps, each batch at each in turn on the same ids" in md
    LAUNCHED_WARPS.clear()
    doc = fake_gpu_run(one, tmp_path)  # decode capacity on 4 blocks of 8 warps, as the rest
    assert LAUNCHED_WARPS and set(LAUNCHED_WARPS) == {None}
    assert all(r["decode_capacity_blocks"] == 4 for r in doc["cases"])
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "; blocks of 8 warps (the library's default);" in md


def test_decode_capacity_is_on_by_default_and_can_be_turned_off() -> None:
    args = fetch.parse_args([])
    assert args.decode_capacity is True and fetch.settings(args)["decode_capacity"] is True
    off = fetch.parse_args(["--no-decode-capacity", "--max-blocks", "0.25", "--double-buffer"])
    assert off.decode_capacity is False and fetch.settings(off)["decode_capacity"] is False
    assert off.max_blocks == 0.25 and off.double_buffer  # the other options unchanged
    with pytest.raises(SystemExit):  # a flag, no value
        fetch.parse_args(["--no-decode-capacity=yes"])
    with pytest.raises(SystemExit):  # there is no --decode-capacity to turn it on: it is on
        fetch.parse_args(["--decode-capacity"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--widths", "250"], "multiples of 4"),
        (["--kinds", "dense-normal,zipf"], "unknown kinds"),
        (["--batch", "0"], "positive integers"),
        (["--batch", "ten"], "expected integers"),
        (["--repeats", "0"], "--repeats"),
        (["--table-gb", "0"], "--table-gb"),
        (["--max-blocks", "0"], "--max-blocks"),
        (["--block-warps", "0"], "block_warps must be between 1 and 32, got 0"),
        (["--block-warps", "33"], "block_warps must be between 1 and 32, got 33"),
        (["--block-warps", "8.5"], "--block-warps"),
        (["--block-warps", "8,0"], "block_warps must be between 1 and 32, got 0"),
    ],
)
def test_bad_arguments_are_refused(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        fetch.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_synthetic_cases_have_the_asked_widths_kinds_and_ratios(tmp_path: Path) -> None:
    cases = fetch.synthetic_cases([256, 1024], fetch.KINDS, rows=256, seed=0)
    assert [c.name for c in cases] == [f"{k}-{w}B" for w in (256, 1024) for k in fetch.KINDS]
    ratios = {}
    for c in cases:
        assert c.rows.dtype == np.float32 and c.rows.shape == (256, c.row_bytes // 4)
        assert c.source == "synthetic" and c.row_bytes in (256, 1024)
        with ibp_graph.compress(c.rows, tmp_path / "c.ibp", progress=False) as t:
            ratios[c.name] = t.ratio
    assert ratios["random-bits-256B"] == pytest.approx(1.0, abs=0.01)
    assert 1.05 < ratios["dense-normal-1024B"] < 1.4
    assert 2.0 < ratios["bf16-in-fp32-1024B"] < 3.5
    assert ratios["sparse-5pct-1024B"] > 5
    with pytest.raises(ValueError, match="unknown kind"):
        fetch.synthetic_block("zipf", 256, 4, np.random.default_rng(0))


def test_real_cases_skip_narrow_tables_and_say_why(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fetch.real_tables, "SHARED_DATASETS", tmp_path / "missing")
    cases, note = fetch.real_cases()
    assert cases == [] and "no datasets folder" in note

    tables = [
        ("wide", np.zeros((3, 32), np.float32), "n1"),
        ("narrow", np.zeros((3, 10), np.float32), "n2"),
        ("half", np.zeros((3, 40), np.float16), "n3"),
        ("ints", np.zeros((3, 64), np.int64), "n4"),
    ]
    monkeypatch.setattr(fetch.real_tables, "available", lambda: True)
    monkeypatch.setattr(fetch.real_tables, "load_all", lambda: tables)
    cases, note = fetch.real_cases()
    assert [(c.name, c.row_bytes, c.source) for c in cases] == [
        ("wide", 128, "real"),
        ("half", 80, "real"),
    ]

    def no_scipy():
        raise ImportError("No module named 'scipy'")

    monkeypatch.setattr(fetch.real_tables, "load_all", no_scipy)
    cases, note = fetch.real_cases()
    assert cases == [] and "scipy" in note.lower()


def test_geometry() -> None:
    assert fetch.tiles(4 * 2**30, 2**15, 512) == 256
    assert fetch.tiles(100, 2**15, 512) == 1  # at least one copy
    assert fetch.batch_rows(1_000_000, 4096, 2**30, 10**9) == 2**18  # capped at 1 GiB
    assert fetch.batch_rows(1_000_000, 256, 2**30, 5000) == 5000  # capped at the table
    assert fetch.batch_sizes([100, 1000, 5000], 512, 2**20, 10**6) == [(100, 100), (1000, 1000),
                                                                       (2048, 5000)]  # fmt: skip
    assert fetch.batch_sizes([5000, 9000], 512, 2**20, 10**6) == [(2048, 5000)]  # deduplicated


def test_table_tiles_reach_four_l2s_of_stored_rows() -> None:
    l2 = 50_000_000  # an H100's L2
    # Dense 512 B rows (ratio ~1.17): 4 GiB of raw rows store ~3.7 GB, past 4x L2 already.
    assert fetch.table_tiles(4 * 2**30, 2**15, 512, 14_300_000, l2) == 256
    assert fetch.table_tiles(4 * 2**30, 2**15, 512, 14_300_000, l2) == fetch.tiles(
        4 * 2**30, 2**15, 512
    )
    # Sparse 512 B rows (ratio ~15): 256 copies store 285 MB, past 200 MB: unchanged.
    assert fetch.table_tiles(4 * 2**30, 2**15, 512, 1_114_112, l2) == 256
    # Cora's 2,708 rows of 5,732 B at ratio 123 (126 KB a copy): 4 GiB of raw rows, 276
    # copies, store 35 MB, under one L2; 1,585 copies store 200 MB (4x L2).
    assert fetch.tiles(4 * 2**30, 2708, 5732) == 276
    times = fetch.table_tiles(4 * 2**30, 2708, 5732, 126_200, l2)
    assert times == 1585 and times * 126_200 >= 4 * l2 > (times - 1) * 126_200
    # Exactly 4x L2: no copy more; at least one copy, whatever the sizes.
    assert fetch.table_tiles(100, 10, 1, 25, 100) == 16
    assert fetch.table_tiles(1000, 10, 1, 25, 100) == 100
    assert fetch.table_tiles(0, 10, 1, 10**9, 100) == 1
    assert fetch.table_tiles(0, 10, 1, 0, 1) == 4  # an empty block: no division by zero


def test_tiled_offsets_values_and_width() -> None:
    off = np.array([0, 3, 5, 9], dtype=np.int64)
    got = fetch.tiled_offsets(off, 3)
    assert got.dtype == np.uint32
    assert got.tolist() == [0, 3, 5, 9, 12, 14, 18, 21, 23, 27]
    big = np.array([0, 2**31], dtype=np.int64)
    assert fetch.tiled_offsets(big, 1).dtype == np.uint32
    wide = fetch.tiled_offsets(big, 2)  # 2**32 units: 8-byte offsets, as the container does
    assert wide.dtype == np.uint64 and wide.tolist() == [0, 2**31, 2**32]


def test_fill_tiled() -> None:
    dst = np.full(11, 255, dtype=np.uint8)
    fetch.fill_tiled(dst, np.array([1, 2, 3], dtype=np.uint8), 3)
    assert dst.tolist() == [1, 2, 3] * 3 + [255, 255]
    with pytest.raises(ValueError, match="do not fit"):
        fetch.fill_tiled(dst, np.array([1, 2, 3], dtype=np.uint8), 4)


def test_id_batches_reach_four_l2s_of_stored_rows_within_the_caps() -> None:
    l2 = 1000  # a pool's stored rows reach 4000 bytes
    assert fetch.id_batches([], 100, l2) == 1  # nothing drawn yet: one at least
    assert fetch.id_batches([1500, 1500], 100, l2) == 3  # 3000 bytes: one more
    assert fetch.id_batches([1500, 1500, 1500], 100, l2) == 3  # 4500 bytes
    assert fetch.id_batches([4000, 1], 100, l2) == 1  # exactly 4x L2 in one batch
    assert fetch.id_batches([900, 3100, 5], 100, l2) == 2  # the fewest, in draw order
    assert fetch.id_batches([10] * 15, 100, l2) == 16  # short: one more, up to the cap
    assert fetch.id_batches([200] * 40, 100, l2) == 16  # 3200 B >= 2x L2 at the cap: 16
    # Past the cap, a pool still under 2x L2 (2000 B: it may stay in L2) grows on.
    assert fetch.id_batches([100] * 40, 100, l2) == 20  # 2000 B in 20 batches
    assert fetch.id_batches([10] * 40, 100, l2) == 41  # short: one more
    # At most 256 MiB of int64 ids: 2**25 ids.
    assert fetch.id_budget(100_000) == 335 and fetch.id_budget(2**26) == 1  # one at least
    assert fetch.id_batch_cap(10**6) == 16 and fetch.id_batch_cap(2**22) == 8
    assert fetch.id_batch_cap(2**25) == 1 and fetch.id_batch_cap(2**26) == 1  # one at least
    assert fetch.id_batches([10] * 3, 2**23, l2) == 4 and fetch.id_batches([10] * 9, 2**23, l2) == 4
    # Sparse 512 B rows stored at about 34 B each (ratio ~15), an L2 of 50 MB (an H100's):
    # 16 batches of 100k rows hold 54 MB (1.1x L2), 30 reach 2x L2.
    l2 = 50_000_000
    assert fetch.id_batches([3_400_000] * 40, 100_000, l2) == 30
    assert fetch.id_batches([34_000_000] * 20, 1_000_000, l2) == 6  # 204 MB >= 200 MB
    # Sparse 256 B rows (about 17 B stored): 16 batches hold 0.5x L2; 59 reach 2x.
    assert fetch.id_batches([1_700_000] * 80, 100_000, l2) == 59


def test_stored_rows_fit_in_l2_under_two_l2s() -> None:
    assert fetch.stored_fits_l2(99, 50) and not fetch.stored_fits_l2(100, 50)
    assert fetch.stored_fits_l2(50_000_000, 50_000_000)  # a small pool, one L2
    assert not fetch.stored_fits_l2(4 * 2**30, 50_000_000)  # a big one


def test_draw_pool_starts_with_the_one_batch_ids_and_reaches_four_l2s() -> None:
    sizes = torch.full((64,), 10, dtype=torch.int64)  # stored bytes of the block's rows
    pool, stored = fetch.draw_pool(6400, 30, 7, sizes, 1000)  # 300 B a batch, 4000 B wanted
    assert len(pool) == 14 and stored == 14 * 300
    one = torch.randint(0, 6400, (30,), generator=torch.Generator().manual_seed(7))
    assert torch.equal(pool[0], one)  # the ids a one-batch run drew
    assert all(b.dtype == torch.int64 and b.shape == (30,) for b in pool)
    assert all(int(b.min()) >= 0 and int(b.max()) < 6400 for b in pool)
    assert len({tuple(b.tolist()) for b in pool}) == len(pool)  # distinct batches


def test_a_pool_that_fits_in_l2_is_flagged(monkeypatch) -> None:
    """Past 16 batches the pool grows until 2x L2; when its ids' memory runs out first, its
    stored rows may stay in L2 and it is flagged."""
    sizes = torch.full((64,), 10, dtype=torch.int64)
    pool, stored = fetch.draw_pool(6400, 30, 7, sizes, 1000)  # 4000 B reached in 14 batches
    assert not fetch.stored_fits_l2(stored, 1000)
    pool, stored = fetch.draw_pool(6400, 30, 7, sizes, 500)  # 2000 B: 7 batches
    assert len(pool) == 7 and not fetch.stored_fits_l2(stored, 500)
    pool, stored = fetch.draw_pool(6400, 30, 7, sizes, 250 * 30)  # 16 batches: 4800 B < 2x L2
    assert len(pool) == 50 and stored == 15_000  # grown on to 2x L2 (15,000 B)
    assert not fetch.stored_fits_l2(stored, 250 * 30)
    monkeypatch.setattr(fetch, "MAX_POOL_ID_BYTES", 20 * 30 * 8)  # 20 batches of ids at most
    pool, stored = fetch.draw_pool(6400, 30, 7, sizes, 250 * 30)
    assert len(pool) == 20 and stored == 6000 and fetch.stored_fits_l2(stored, 250 * 30)


def test_rotating_takes_the_pool_in_turn_and_check_pool_ends_on_the_first() -> None:
    seen: list[str] = []
    run = fetch.rotating(seen.append, ["a", "b", "c"])
    for _ in range(7):
        run()
    assert seen == ["a", "b", "c", "a", "b", "c", "a"]
    pool = [torch.tensor([3]), torch.tensor([5]), torch.tensor([7])]
    out = torch.zeros(1, dtype=torch.int64)
    checked: list[tuple[int, int]] = []

    def matches(i: int) -> bool:
        checked.append((i, int(out)))
        return int(out) == int(pool[i]) and i != 2

    assert not fetch.check_pool(out.copy_, pool, out, matches)  # batch 2 did not match
    assert checked == [(1, 5), (2, 7), (0, 3)] and int(out) == 3  # the first batch last
    assert fetch.check_pool(out.copy_, pool, out, lambda i: int(out) == int(pool[i]))


@pytest.mark.parametrize("sort_ids", [False, True])
@pytest.mark.parametrize("kind", ["dense-normal", "sparse-5pct", "random-bits"])
def test_tiled_table_decodes_to_the_tiled_rows(kind: str, sort_ids: bool, tmp_path: Path) -> None:
    rows = fetch.synthetic_block(kind, 512, 300, np.random.default_rng(1))
    with ibp_graph.compress(rows, tmp_path / "t.ibp", progress=False) as table:
        assert fetch.check_tiled_on_cpu(table, rows, 7, seed=0, sort_ids=sort_ids) > 0
        # The tiles' longest stored row is the block's: the kernel's buffers are sized for it.
        codec = fetch.tiled_codec(table, 7, 0x1000, torch.device("cpu"))
        lengths = np.diff(fetch.tiled_offsets(table.offsets, 7).astype(np.int64)) * table.align
        assert codec.longest_row == int(lengths.max()) == table.stored_row_range[1]


# --------------------------------------------------------------------------------------------
# Rates, targets, result files
# --------------------------------------------------------------------------------------------


def fake_row(**kw) -> dict:
    r = {
        "case": "c",
        "row_bytes": 512,
        "ratio": 2.0,
        "bypass": False,
        "batch": 1000,
        "memcpy_gbps": 50.0,
        "torch_gbps": 8.0,
        "raw_gbps": 44.0,
        "ibp_gbps": 80.0,
        "decode_only_gbps": 600.0,
        "ibp_vs_bound": 80.0 / 88.0,
        "zero_fraction": 0.0,
        "bit_identical": True,
    }
    r.update(kw)
    r["targets"] = fetch.targets(r)
    return r


def test_gbps() -> None:
    assert fetch.gbps(2e9, 0.5) == pytest.approx(4.0)
    assert math.isnan(fetch.gbps(1e9, 0.0))


def test_targets_met() -> None:
    t = fake_row()["targets"]
    assert t["raw_vs_memcpy"] == pytest.approx(
        {"applies": True, "value": 0.88, "goal": 0.85, "comparison": ">=", "met": True,
         "gap": 0.0, "rule": "512 B rows"}
    )  # fmt: skip
    assert t["ibp_vs_ideal"]["value"] == pytest.approx(80 / 88) and t["ibp_vs_ideal"]["met"]
    assert t["ibp_vs_ideal"]["bound_gbps"] == pytest.approx(88.0)
    dec = t["decode_vs_pcie"]
    assert dec["value"] == 600.0 and dec["goal"] == 400.0 and dec["met"]
    assert dec["table_class"] == "dense" and dec["zero_fraction"] == 0.0
    assert not t["no_compress_slowdown"]["applies"]
    assert t["no_compress_slowdown"]["value"] == pytest.approx(44 / 80)  # a ratio, no verdict


def test_targets_missed_say_by_how_much() -> None:
    t = fake_row(raw_gbps=30.0, ibp_gbps=30.0, decode_only_gbps=250.0)["targets"]
    assert t["raw_vs_memcpy"]["met"] is False
    assert t["raw_vs_memcpy"]["gap"] == pytest.approx(1 - 0.6 / 0.85)
    # ibp / min(2 x 30, 250) = 0.5: 44% short of 0.9
    assert t["ibp_vs_ideal"]["met"] is False
    assert t["ibp_vs_ideal"]["gap"] == pytest.approx(1 - 0.5 / 0.9)
    assert t["decode_vs_pcie"]["met"] is False
    assert t["decode_vs_pcie"]["gap"] == pytest.approx(1 - 250 / 400)
    assert fetch._cell(t["ibp_vs_ideal"]) == "0.50 **gap 44.4%**"


def test_raw_target_at_512_bytes_is_085_of_memcpy() -> None:
    t = fake_row(raw_gbps=41.0)["targets"]["raw_vs_memcpy"]  # 0.82 x memcpy: a gap
    assert t["applies"] and t["goal"] == 0.85 and t["met"] is False
    assert t["gap"] == pytest.approx(1 - 0.82 / 0.85)
    assert fake_row(raw_gbps=42.5)["targets"]["raw_vs_memcpy"]["met"]  # 0.85 exactly


def test_raw_target_for_rows_only_4_byte_aligned_is_07_of_memcpy() -> None:
    t = fake_row(row_bytes=5732, raw_gbps=36.0)["targets"]["raw_vs_memcpy"]  # Cora's rows, 0.72
    assert t["applies"] and t["goal"] == 0.7 and t["met"] is True
    assert "not a multiple of 16 B" in t["rule"]
    t = fake_row(row_bytes=5732, raw_gbps=32.5)["targets"]["raw_vs_memcpy"]  # 0.65: a gap
    assert t["applies"] and t["met"] is False and t["gap"] == pytest.approx(1 - 0.65 / 0.7)
    for width in (260, 1028, 6):  # the lanes stage's widths; fp16 rows of 3 elements
        assert fetch.raw_goal(width)[0] == 0.7
    assert fetch.raw_goal(512)[0] == 0.85


def test_raw_target_as_raw_tables_fetch_by_default_is_judged_on_sorted_ids() -> None:
    # Without --sort-ids it was not measured, so it does not apply.
    t = fake_row()["targets"]["raw_default_vs_memcpy"]
    assert t["applies"] is False and t["met"] is None
    t = fake_row(raw_gbps=20.0, raw_sorted_gbps=45.0)["targets"]
    assert t["raw_vs_memcpy"]["met"] is False  # the kernel alone, ids in batch order: 0.4
    sorted_ = t["raw_default_vs_memcpy"]
    assert sorted_["applies"] and sorted_["value"] == pytest.approx(0.9) and sorted_["met"]
    assert sorted_["goal"] == 0.85 and sorted_["rule"] == "512 B rows"
    t = fake_row(row_bytes=5732, raw_sorted_gbps=30.0)["targets"]["raw_default_vs_memcpy"]
    assert t["goal"] == 0.7 and t["met"] is False and t["gap"] == pytest.approx(1 - 0.6 / 0.7)
    t = fake_row(row_bytes=1024, raw_sorted_gbps=30.0)["targets"]["raw_default_vs_memcpy"]
    assert t["applies"] is False  # no goal at this width


def test_raw_target_does_not_apply_to_other_widths() -> None:
    for width in (256, 1024, 4096, 80):
        t = fake_row(row_bytes=width, raw_gbps=10.0)["targets"]["raw_vs_memcpy"]
        assert not t["applies"] and t["met"] is None and t["goal"] is None
        assert t["value"] == pytest.approx(0.2)  # the ratio, no verdict
    r = fake_row(row_bytes=256, raw_gbps=10.0)
    assert fetch.summary([r])["raw_vs_memcpy"] == {
        "cases": 0, "met": 0, "missed": [], "not_measured": []
    }  # fmt: skip


def test_decode_target_is_400_gbps_dense_and_1000_sparse() -> None:
    dense = fake_row(decode_only_gbps=450.0, zero_fraction=0.1)["targets"]["decode_vs_pcie"]
    assert dense["met"] is True and dense["goal"] == 400.0 and dense["table_class"] == "dense"
    sparse = fake_row(decode_only_gbps=700.0, zero_fraction=0.95)["targets"]["decode_vs_pcie"]
    assert sparse["met"] is False and sparse["goal"] == 1000.0
    assert sparse["table_class"] == "sparse" and sparse["gap"] == pytest.approx(0.3)
    assert fake_row(decode_only_gbps=1000.0, zero_fraction=0.5)["targets"]["decode_vs_pcie"]["met"]
    assert fetch.table_class(0.5) == "sparse" and fetch.table_class(0.49) == "dense"
    text = fetch._decode_cell(sparse)
    assert text == "700.0 **gap 30.0%** [sparse, 95% zeros: goal 1000]"


def test_decode_target_of_a_sparse_table_is_judged() -> None:
    """Every table is tiled past 4x the L2 (`table_tiles`): no rate is left unjudged as L2's."""
    r = fake_row(decode_only_gbps=1200.0, zero_fraction=0.95)
    dec = r["targets"]["decode_vs_pcie"]
    assert dec["applies"] and dec["met"] is True and "from_l2" not in dec
    assert fetch._decode_cell(dec) == "1200.0 met [sparse, 95% zeros: goal 1000]"
    assert fetch.summary([r])["decode_vs_pcie"]["cases"] == 1
    assert "L2" not in fetch.TARGET_TITLES["decode_vs_pcie"]


def test_decode_target_is_judged_on_decode_capacity_where_it_was_measured() -> None:
    """Decode-only at the fetch grid misses 400; the same decoder on the full grid meets it."""
    r = fake_row(decode_only_gbps=300.0, decode_capacity_gbps=450.0, decode_capacity_blocks=528)
    dec = r["targets"]["decode_vs_pcie"]
    assert dec["value"] == 450.0 and dec["met"] is True and dec["rate"] == "decode capacity"
    assert fetch._decode_cell(dec) == "450.0 met [dense, 0% zeros: goal 400; on decode capacity]"
    # Not measured (skipped: None, or a rate that is not finite): decode-only is judged.
    for missing in ({}, {"decode_capacity_gbps": None}, {"decode_capacity_gbps": math.nan}):
        dec = fake_row(decode_only_gbps=300.0, **missing)["targets"]["decode_vs_pcie"]
        assert dec["value"] == 300.0 and dec["met"] is False and dec["rate"] == "decode-only"
        assert dec["gap"] == pytest.approx(0.25)
        assert fetch._decode_cell(dec) == "300.0 **gap 25.0%** [dense, 0% zeros: goal 400]"
    # A sparse table: capacity judged against 1000, a miss there too.
    dec = fake_row(decode_only_gbps=350.0, decode_capacity_gbps=900.0, zero_fraction=0.95)[
        "targets"
    ]["decode_vs_pcie"]
    assert dec["goal"] == 1000.0 and dec["met"] is False and dec["gap"] == pytest.approx(0.1)
    assert fetch.decode_alone({"decode_only_gbps": 1.0, "decode_capacity_gbps": 2.0}) == (
        2.0,
        "decode capacity",
    )
    # A table stored raw: no decoder goal, whichever rate.
    flat = fake_row(ratio=1.0, bypass=True, decode_capacity_gbps=900.0)["targets"]
    assert not flat["decode_vs_pcie"]["applies"]


def test_fused_fetch_bound_keeps_decode_only_at_the_fetch_grid() -> None:
    """The bound min(ratio x raw, decode-only) is the fetch's own grid, not the full grid's."""
    r = fake_row(ratio=15.1, raw_gbps=43.5, decode_only_gbps=300.0, decode_capacity_gbps=900.0,
                 ibp_gbps=280.0, zero_fraction=0.95)  # fmt: skip
    t = r["targets"]["ibp_vs_ideal"]
    assert t["bound_gbps"] == 300.0 and t["value"] == pytest.approx(280 / 300) and t["met"]
    assert r["targets"]["decode_vs_pcie"]["value"] == 900.0  # the decoder's goal: capacity


def test_zero_fraction_classifies_the_synthetic_kinds() -> None:
    assert fetch.zero_fraction(np.array([[0.0, -0.0, 1.0, 2.0]], np.float32)) == 0.5
    assert fetch.zero_fraction(np.zeros((0, 4), np.float32)) == 0.0
    rng = np.random.default_rng(0)
    got = {
        kind: fetch.table_class(fetch.zero_fraction(fetch.synthetic_block(kind, 512, 256, rng)))
        for kind in fetch.KINDS
    }
    assert got == {"dense-normal": "dense", "bf16-in-fp32": "dense", "sparse-5pct": "sparse",
                   "random-bits": "dense"}  # fmt: skip
    rows = np.zeros((70_000, 3), np.float16)
    rows[::4, 0] = 1  # chunked: every chunk counted
    assert fetch.zero_fraction(rows, chunk_rows=1000) == pytest.approx(1 - 17_500 / 210_000)


def test_fused_fetch_target_is_against_the_decode_bound() -> None:
    """Sparse, decode-bound: 470 >= 0.9 x min(15.1 x 43.5, 500) = 450, although < 0.9 x 657."""
    r = fake_row(ratio=15.1, raw_gbps=43.5, decode_only_gbps=500.0, ibp_gbps=470.0,
                 zero_fraction=0.95)  # fmt: skip
    t = r["targets"]["ibp_vs_ideal"]
    assert t["met"] is True and t["value"] == pytest.approx(0.94) and t["bound_gbps"] == 500.0
    # Transfer-bound: the bound is ratio x raw.
    t = fake_row(ratio=2.0, raw_gbps=44.0, ibp_gbps=70.0)["targets"]["ibp_vs_ideal"]
    assert t["bound_gbps"] == 88.0 and t["met"] is False
    assert fetch.ibp_bound(15.1, 43.5, 500.0) == 500.0 and math.isnan(
        fetch.ibp_bound(2, math.nan, 1)
    )


def test_a_missing_measurement_is_not_measured_not_missed() -> None:
    t = fake_row(decode_only_gbps=math.nan)["targets"]
    for key in ("decode_vs_pcie", "ibp_vs_ideal"):  # the bound needs decode-only too
        assert t[key]["applies"] and t[key]["met"] is None and t[key]["gap"] is None
        assert fetch._cell(t[key]) == "n/a not measured"
    assert t["raw_vs_memcpy"]["met"] is True
    t = fake_row(memcpy_gbps=math.nan)["targets"]["raw_vs_memcpy"]
    assert (
        t["met"] is None
        and "not measured" in fetch._raw_cell(t)
        and "gap" not in (fetch._raw_cell(t))
    )
    flat = fake_row(ratio=1.0, bypass=True, ibp_gbps=math.nan)["targets"]["no_compress_slowdown"]
    assert flat["applies"] and flat["met"] is None and flat["gap"] is None
    assert fetch._slowdown_cell(flat) == "n/a not measured"
    rows = [fake_row(case="ok"), fake_row(case="nan", decode_only_gbps=math.nan),
            fake_row(case="slow", decode_only_gbps=300.0)]  # fmt: skip
    s = fetch.summary(rows)["decode_vs_pcie"]
    assert s == {"cases": 2, "met": 1, "missed": ["slow @ 1,000"], "not_measured": ["nan @ 1,000"]}


def test_table_that_does_not_compress() -> None:
    ok = fake_row(ratio=1.0, bypass=True, raw_gbps=40.0, ibp_gbps=39.5)["targets"]
    slow = ok["no_compress_slowdown"]
    assert slow["applies"] and slow["met"] is True and slow["gap"] == 0.0
    assert slow["value"] == pytest.approx(40 / 39.5) and slow["goal"] == 1.02
    assert slow["comparison"] == "<="
    assert not ok["ibp_vs_ideal"]["applies"] and not ok["decode_vs_pcie"]["applies"]
    bad = fake_row(ratio=1.0, bypass=True, raw_gbps=40.0, ibp_gbps=38.0)["targets"]
    slow = bad["no_compress_slowdown"]
    assert slow["met"] is False
    assert slow["gap"] == pytest.approx((40 / 38 - 1.02) / 1.02)
    assert fetch._slowdown_cell(slow) == "1.053 **gap 3.2%**"
    # Not bypassed but no smaller than raw: still a table that does not compress.
    assert fake_row(ratio=0.99)["targets"]["no_compress_slowdown"]["applies"]


def test_no_compress_slowdown_at_the_boundary() -> None:
    """raw / ibp = 1.02 (the fetch 2% slower than the raw gather) is met; 1.03 is not."""
    at = fetch.no_compress_slowdown(51.0, 50.0, True)  # 51 / 50 == 1.02 exactly
    assert at["value"] == 1.02 and at["met"] is True and at["gap"] == 0.0
    assert verdict(at) == "met" and fetch._slowdown_cell(at) == "1.020 met"
    over = fetch.no_compress_slowdown(103.0, 100.0, True)
    assert over["value"] == pytest.approx(1.03) and over["met"] is False
    assert over["gap"] == pytest.approx(0.01 / 1.02)  # about 0.98% of the goal
    assert verdict(over) == "gap 1.0%"
    assert fetch._slowdown_cell(over) == "1.030 **gap 1.0%**"
    faster = fetch.no_compress_slowdown(40.0, 44.0, True)  # the fetch faster than raw: met
    assert faster["met"] is True and faster["value"] == pytest.approx(40 / 44)
    # Where it does not apply: the ratio in parentheses, the verdict kept out of the summary.
    assert fetch._slowdown_cell(fetch.no_compress_slowdown(103.0, 100.0, False)) == "(1.030)"


def test_no_compress_slowdown_of_a_zero_ibp_rate_is_a_miss_not_an_error() -> None:
    t = fetch.no_compress_slowdown(40.0, 0.0, True)  # the fetch measured at 0 GB/s
    assert t["met"] is False and t["value"] == math.inf and t["gap"] == math.inf
    assert fetch._slowdown_cell(t) == "inf **gap inf%**"
    r = fake_row(case="stalled", ratio=1.0, bypass=True, raw_gbps=40.0, ibp_gbps=0.0)
    assert r["targets"]["no_compress_slowdown"]["met"] is False
    s = fetch.summary([r])["no_compress_slowdown"]
    assert s == {"cases": 1, "met": 0, "missed": ["stalled @ 1,000"], "not_measured": []}
    # A rate missing or not finite is not measured, never an exception.
    for raw, ibp in ((math.nan, 0.0), (40.0, math.nan), (40.0, math.inf), (math.inf, 40.0)):
        t = fetch.no_compress_slowdown(raw, ibp, True)
        assert t["met"] is None and t["gap"] is None and verdict(t) == "not measured"


def fake_payload(rows: list[dict]) -> dict:
    args = fetch.parse_args(["--table-gb", "1"])
    env = {
        "device": "CPU: test",
        "git_commit": "abc",
        "date": "2026-01-01 00:00 UTC",
        "command": "python benchmarks/fetch.py",
    }
    payload = fetch.new_payload(env, args, "NVIDIA H100 80GB HBM3", "skipped (--no-real)")
    payload["settings"]["queue_guard"] = True
    payload["cases"] = rows
    return payload


def test_results_files(tmp_path: Path) -> None:
    rows = [
        fake_row(case="dense-normal-512B"),
        fake_row(case="random-bits-512B", ratio=1.0, bypass=True, ibp_gbps=41.8, raw_gbps=44.0),
        fake_row(case="slow-256B", row_bytes=256, raw_gbps=30.0, ibp_gbps=30.0, ibp_vs_bound=0.5),
        fake_row(case="nan", decode_only_gbps=math.nan),
    ]
    payload = fake_payload(rows)
    assert fetch.slug(payload["device"]) == "nvidia-h100-80gb-hbm3"
    js, md = fetch.write_results(payload, tmp_path, "fetch-test")
    doc = json.loads(js.read_text())
    for key in ("device", "date", "command", "host", "settings", "cases", "summary"):
        assert key in doc
    assert doc["device"] == "NVIDIA H100 80GB HBM3" and doc["host"] == "CPU: test"
    for case in doc["cases"]:
        for key in (
            "row_bytes",
            "ratio",
            "memcpy_gbps",
            "torch_gbps",
            "raw_gbps",
            "ibp_gbps",
            "decode_only_gbps",
            "targets",
        ):
            assert key in case
    assert doc["cases"][3]["decode_only_gbps"] is None  # NaN is not JSON
    s = doc["summary"]
    assert s["raw_vs_memcpy"] == {"cases": 3, "met": 3, "missed": [], "not_measured": []}
    assert s["no_compress_slowdown"]["missed"] == ["random-bits-512B @ 1,000"]
    assert s["ibp_vs_ideal"]["missed"] == ["slow-256B @ 1,000"]
    # Not measured: neither met nor missed.
    assert s["decode_vs_pcie"] == {"cases": 2, "met": 2, "missed": [],
                                   "not_measured": ["nan @ 1,000"]}  # fmt: skip
    assert s["ibp_vs_ideal"]["not_measured"] == ["nan @ 1,000"]  # its bound needs decode-only
    assert doc["cases"][3]["targets"]["decode_vs_pcie"]["met"] is None
    text = md.read_text()
    assert text.startswith("# GPU fetch throughput")
    assert "NVIDIA H100 80GB HBM3" in text and "`python benchmarks/fetch.py`" in text
    assert "Incomplete run" in text  # new_payload says so until the last case is done
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert len(lines) == 1 + len(rows)
    assert all(ln.count("|") == lines[0].count("|") for ln in lines)
    assert "| random-bits-512B (raw) |" in text
    assert "1.053 **gap 3.2%**" in text  # 44 / 41.8: (1.0526 - 1.02) / 1.02
    assert "0.60 **gap 25.0%**" not in text  # 256 B rows: the raw target does not apply
    assert "(0.60)" in text and "0.88 met [goal 0.85]" in text
    assert "600.0 met [dense, 0% zeros: goal 400]" in text
    assert "n/a not measured" in text and "nan%" not in text
    assert (
        "met in 3 of 3 cases" in text and "met in 2 of 2 cases; not measured: nan @ 1,000" in text
    )
    assert "raw / memcpy >= 0.85 (512 B rows), >= 0.7 (rows not a multiple of 16 B)" in text
    assert "ibp / min(ratio x raw, decode-only) >= 0.9" in text
    assert (
        "decoder alone GB/s (decode capacity, else decode-only) >= 400 (dense), >= 1000 "
        "(sparse: >= 50% zeros)" in text
    )
    assert "raw / ibp <= 1.02 (table that does not compress)" in text
    flat = doc["cases"][1]["targets"]["no_compress_slowdown"]
    assert flat["value"] == pytest.approx(44 / 41.8) and flat["met"] is False
    assert flat["gap"] == pytest.approx((44 / 41.8 - 1.02) / 1.02)
    assert "ibp db" not in text and "Db:" not in text  # no --double-buffer


def test_results_files_show_double_buffered_rates_beside_one_buffer(tmp_path: Path) -> None:
    rows = [
        fake_row(case="dense-normal-512B", ibp_db_gbps=88.0, decode_only_db_gbps=540.0),
        fake_row(case="wide-4096B", ibp_db_gbps=math.nan, decode_only_db_gbps=math.nan,
                 double_buffer_note="rows need ...; use the raw gather or one buffer"),
        fake_row(case="random-bits-512B", ratio=1.0, bypass=True, ibp_gbps=40.0,
                 ibp_db_gbps=40.0, decode_only_db_gbps=600.0),
    ]  # fmt: skip
    payload = fake_payload(rows)
    payload["settings"]["double_buffer"] = True
    js, md = fetch.write_results(payload, tmp_path, "fetch-db")
    doc = json.loads(js.read_text())
    assert doc["settings"]["double_buffer"] is True
    assert doc["cases"][0]["ibp_db_gbps"] == 88.0
    assert doc["cases"][1]["ibp_db_gbps"] is None  # NaN is not JSON
    assert "one buffer" in doc["cases"][1]["double_buffer_note"]
    text = md.read_text()
    assert "| decode only | decode capacity | ibp db | decode only db | ibp / bound |" in text
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert len(lines) == 2 + len(rows)
    assert all(ln.count("|") == lines[0].count("|") for ln in lines)
    assert "| 600.0 | n/a | 88.0 (1.10x) | 540.0 (0.90x) |" in text  # no capacity measured
    assert "| 600.0 | n/a | n/a | n/a |" in text
    assert "| random-bits-512B (raw) |" in text and "| 40.0 (1.00x) | 600.0 (1.00x) |" in text
    assert "Db: the double-buffered fused kernel" in text
    assert "- not double-buffered (rows too wide for two staging buffers): wide-4096B" in text


def test_results_files_show_decode_capacity_in_one_column(tmp_path: Path) -> None:
    rows = [
        fake_row(case="dense-normal-512B", decode_only_gbps=300.0, decode_capacity_gbps=450.0,
                 decode_only_blocks=33, decode_capacity_blocks=528),
        fake_row(case="small-512B", batch=100, decode_only_gbps=200.0, decode_capacity_gbps=None,
                 decode_only_blocks=13, decode_capacity_blocks=None,
                 decode_capacity_note=fetch.CAPACITY_FULL),
        fake_row(case="random-bits-512B", ratio=1.0, bypass=True, ibp_gbps=41.8,
                 decode_capacity_gbps=None, decode_capacity_note=fetch.CAPACITY_RAW),
    ]  # fmt: skip
    payload = fake_payload(rows)
    js, md = fetch.write_results(payload, tmp_path, "fetch-capacity")
    doc = json.loads(js.read_text())
    assert doc["settings"]["decode_capacity"] is True
    assert doc["cases"][0]["decode_capacity_blocks"] == 528
    assert doc["cases"][1]["decode_capacity_gbps"] is None
    assert doc["cases"][1]["decode_capacity_note"] == fetch.CAPACITY_FULL
    text = md.read_text()
    assert "| decode only | decode capacity | ibp / bound |" in text
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert len(lines) == 2 + len(rows) and lines[1].count("---") == lines[0].count("|") - 1
    assert all(ln.count("|") == lines[0].count("|") for ln in lines)
    assert "| 300.0 | 450.0 (1.50x) |" in text  # decode only, then capacity and its ratio
    assert "| 200.0 | n/a |" in text
    assert "450.0 met [dense, 0% zeros: goal 400; on decode capacity]" in text
    assert "200.0 **gap 50.0%** [dense, 0% zeros: goal 400]" in text
    # The paragraph: what each decode rate is, and which target takes which.
    assert "Decode capacity: the same launch on the largest grid the device holds" in text
    assert "decode only at the fetch grid cap (the grid of the fetch it bounds)" in text
    assert "The decoder alone (decode capacity where measured, else decode only): 400" in text
    assert (
        "- decode capacity not measured, the fetch grid is already the full grid (decode only "
        "is the decoder's capacity): small-512B @ 100" in text
    )
    # Every case with a decoder at the full grid already: said once, not listed.
    text = fetch.markdown(fake_payload(rows[1:]) | {"summary": fetch.summary(rows[1:])})
    assert "full grid (decode only is the decoder's capacity): every case with a decoder" in text
    # Turned off: no column, and the decoder alone is decode only.
    payload = fake_payload([fake_row(case="dense-normal-512B")])
    payload["settings"]["decode_capacity"] = False
    text = fetch.markdown(payload | {"summary": fetch.summary(payload["cases"])})
    assert "decode capacity |" not in text and "Decode capacity:" not in text
    assert "| decode only | ibp / bound |" in text
    assert "The decoder alone (decode only): 400" in text
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert all(ln.count("|") == lines[0].count("|") for ln in lines)


def test_results_files_mark_id_batches_that_fit_in_l2(tmp_path: Path) -> None:
    rows = [
        fake_row(case="tiny-512B", id_batches=16, pool_fits_l2=False),
        fake_row(case="big-512B", id_batches=6, pool_fits_l2=False),
        fake_row(case="raw-512B", ratio=1.0, bypass=True),
        fake_row(case="small-256B", id_batches=20, pool_fits_l2=True,
                 pool_stored_bytes=30_000_000),
    ]  # fmt: skip
    payload = fake_payload(rows)
    payload["l2_bytes"] = 50 * 2**20
    js, md = fetch.write_results(payload, tmp_path, "fetch-l2")
    doc = json.loads(js.read_text())
    assert doc["l2_bytes"] == 50 * 2**20 and [r["id_batches"] for r in doc["cases"][:2]] == [16, 6]
    text = md.read_text()
    assert "| tiny-512B |" in text and "| big-512B |" in text and "| raw-512B (raw) |" in text
    assert "stored table fits" not in text
    assert "| small-256B (id batches fit in L2) |" in text
    assert (
        doc["cases"][3]["pool_fits_l2"] is True and "(id batches" not in text.split("big")[1][:30]
    )
    assert "the L2 of 52.4 MB" in text and "at most 16 batches, or more while under 2x L2" in text
    assert "256 MiB of ids" in text
    assert (
        "Tables of 1 GiB of raw rows (compressed blocks tiled in pinned memory), or more where "
        "the stored rows would be under 4x the L2, so that no table is read from L2 (the raw "
        "gather's ids then folded onto its 1 GiB raw buffer);" in text
    )
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert all(ln.count("|") == lines[0].count("|") for ln in lines)


def test_double_buffered_timing_notes_rows_too_wide_and_raises_other_errors() -> None:
    bench = SimpleNamespace(args=SimpleNamespace(repeats=2), guard=None, device=torch.device("cpu"))
    want = torch.arange(8, dtype=torch.uint8)
    out = torch.zeros(8, dtype=torch.uint8)
    pool = [torch.arange(8), torch.arange(8) + 1]
    same_rows = lambda i: torch.equal(out, want)  # noqa: E731

    def too_wide(ids: torch.Tensor) -> None:
        raise ValueError("double-buffered rows ... use the raw gather or one buffer")

    seconds, same, note = fetch.double_buffered(too_wide, pool, out, same_rows, bench)
    assert math.isnan(seconds) and same and "one buffer" in note
    assert math.isnan(fetch.gbps(1e9, seconds))

    def bad_tensor(ids: torch.Tensor) -> None:
        raise ValueError("idx must be int64")

    with pytest.raises(ValueError, match="int64"):
        fetch.double_buffered(bad_tensor, pool, out, same_rows, bench)
    copy = lambda ids: out.copy_(want)  # noqa: E731
    seconds, same, note = fetch.double_buffered(copy, pool, out, same_rows, bench)
    assert seconds > 0 and same and note == ""
    seconds, same, note = fetch.double_buffered(
        lambda ids: out.fill_(1), pool, out, same_rows, bench
    )
    assert not same and note == ""
    # Each batch is checked: a launch wrong on the second batch only is caught.
    wrong_later = lambda ids: out.copy_(want if ids[0] == 0 else want + 1)  # noqa: E731
    matches = lambda i: torch.equal(out, want)  # noqa: E731
    assert not fetch.double_buffered(wrong_later, pool, out, matches, bench)[1]


# --------------------------------------------------------------------------------------------
# The GPU run, with a stand-in for CuPy's cuda module and NumPy kernels
# --------------------------------------------------------------------------------------------


class FakeDevice:
    def __init__(self, index: int) -> None:
        self.index = index

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class FakeCuda:
    def __init__(self) -> None:
        self.runtime = CudaRuntimeStub()
        self.Device = FakeDevice


def memory(ptr: int, nbytes: int) -> np.ndarray:
    """The bytes at a host address (the stand-in's device address)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


def _positions(idx: torch.Tensor, out_pos: torch.Tensor | None) -> np.ndarray:
    """Where each requested row goes: ``out_pos`` (checked to be a permutation) or in order."""
    if out_pos is None:
        return np.arange(idx.numel())
    pos = out_pos.numpy()
    assert np.array_equal(np.sort(pos), np.arange(idx.numel())), "out_pos is no permutation"
    return pos


def numpy_raw_gather(table_ptr, num_rows, row_bytes, idx, out, error, *, out_pos=None,
                     stream=None, max_blocks=None, line_aligned=False,
                     chunk_rows=None, block_warps=None) -> None:  # fmt: skip
    assert chunk_rows is None, "the benchmark fetches in one launch"
    LAUNCHED_WARPS.append(block_warps)
    gather.entry_point(row_bytes, table_ptr, out.data_ptr(), line_aligned)  # its checks
    check_launch(idx, out, row_bytes, error.device)
    check_out_pos(out_pos, idx, error.device)
    check_error(error, error.device)
    ids = idx.numpy()
    pos = _positions(idx, out_pos)
    bad = np.flatnonzero(ids >= num_rows)
    if bad.size:
        error[0] = int(pos[bad].min()) + 1
        return
    table = memory(table_ptr, num_rows * row_bytes).reshape(num_rows, row_bytes)
    out.view(torch.uint8).reshape(ids.size, row_bytes).numpy()[pos] = table[ids]


def numpy_fetch_decode(codec, idx, out, error, *, out_pos=None, stream=None, max_blocks=None,
                       double_buffer=False, chunk_rows=None, block_warps=None) -> None:  # fmt: skip
    assert chunk_rows is None, "the benchmark fetches in one launch"
    LAUNCHED_WARPS.append(block_warps)
    check_launch(idx, out, codec.row_bytes, error.device)
    check_out_pos(out_pos, idx, error.device)
    check_error(error, error.device)
    assert codec.rows_ptr % 16 == 0 and codec.cluster_ids is None
    assert codec.offsets.dtype in (torch.int32, torch.int64)
    assert codec.offsets.numel() == codec.num_rows + 1
    unsigned = {torch.int32: np.uint32, torch.int64: np.uint64}
    words = unsigned[codec.masks.dtype]
    offsets = codec.offsets.numpy().view(unsigned[codec.offsets.dtype]).astype(np.int64)
    code_bits = codec.code_bits.numpy().view(np.uint8)
    # The device's dictionaries are code-major with unused entries repeating entry 0.
    by_column = codec.bitvals.numpy().view(words).transpose(0, 2, 1)
    unused = np.arange(by_column.shape[2]) >= (1 << code_bits.astype(np.int64))[..., None] - 1
    params = CodecParams(
        word_bytes=codec.word_bytes,
        masks=codec.masks.numpy().view(words),
        code_bits=code_bits,
        bitvals=np.ascontiguousarray(np.where(unused, 0, by_column).astype(words)),
    )
    assert params.num_words == codec.num_words
    ids = idx.numpy()
    used = int(offsets[-1]) * codec.align
    rows = memory(codec.rows_ptr, -(-(used + 16) // 8) * 8).view(np.uint64)
    starts = offsets[ids] * codec.align
    lengths = offsets[ids + 1] * codec.align - starts
    got = decode_cpu.decode(rows, starts, lengths, params)  # the codec's words, compiled
    raw = got.view(np.uint8).reshape(ids.size, -1)[:, : codec.row_bytes]
    out.view(torch.uint8).reshape(ids.size, codec.row_bytes).numpy()[_positions(idx, out_pos)] = raw


#: The ``block_warps`` of every stand-in launch, in order (cleared by `numpy_kernels`).
LAUNCHED_WARPS: list[int | None] = []


@pytest.fixture
def numpy_kernels(monkeypatch):
    LAUNCHED_WARPS.clear()
    monkeypatch.setattr(gather, "raw_gather", numpy_raw_gather)
    monkeypatch.setattr(fused, "fetch_decode", numpy_fetch_decode)
    monkeypatch.setattr(cuda_table, "raw_gather", numpy_raw_gather)
    monkeypatch.setattr(cuda_table, "fetch_decode", numpy_fetch_decode)


def fake_gpu_run(argv: list[str], tmp_path: Path, start: float | None = None) -> dict:
    """`fetch.run_cases` over the cases of ``argv`` with the stand-in CUDA: the JSON written."""
    args = fetch.parse_args([*argv, "--out", str(tmp_path)])
    cases, note = fetch.build_cases(args)
    bench = fetch.Bench(args, torch.device("cpu"), FakeCuda())
    payload = fetch.new_payload({"device": "h", "git_commit": "x", "date": "d", "command": "c"},
                                args, "Fake GPU", note)  # fmt: skip
    try:
        fetch.run_cases(bench, cases, payload, "fetch-fake", start=start)
    finally:
        bench.close()
    return json.loads((tmp_path / "fetch-fake.json").read_text())


def stored_block_bytes(case: fetch.Case, tmp_path: Path) -> int:
    """The stored bytes of ``case``'s compressed block, compressed here as the benchmark does."""
    with ibp_graph.compress(case.rows, tmp_path / "block.ibp", progress=False) as table:
        return int(fetch.stored_block(table).size)


def test_gpu_run_with_stand_ins(numpy_kernels, tmp_path: Path) -> None:
    args = fetch.parse_args([*SMALL, "--out", str(tmp_path)])
    cases, note = fetch.build_cases(args)
    cuda = FakeCuda()
    bench = fetch.Bench(args, torch.device("cpu"), cuda)
    assert not bench.guard.on
    payload = fetch.new_payload({"device": "CPU: test", "git_commit": "x", "date": "d",
                                 "command": "c"}, args, "Fake GPU", note)  # fmt: skip
    try:
        fetch.run_cases(bench, cases, payload, "fetch-fake")
    finally:
        bench.close()
    assert cuda.runtime.registered == {}  # every pinned buffer was released
    doc = json.loads((tmp_path / "fetch-fake.json").read_text())
    assert doc["complete"] and doc["skipped"] == [] and doc["stopped"] == ""
    names = [c.name for c in cases]
    # 2 widths x 4 kinds; batches of 300 and 5000 rows capped at 0.0005 GiB (1048/2097 rows)
    assert [r["case"] for r in doc["cases"]] == [n for n in names for _ in range(2)]
    block = {c.name: stored_block_bytes(c, tmp_path) for c in cases}
    l2 = fetch.CPU_L2_BYTES
    for r in doc["cases"]:
        assert r["bit_identical"] and r["raw_gather_correct"] and r["errors"] == [0, 0]
        assert r["batch"] in (300, int(0.0005 * 2**30) // r["row_bytes"])
        # Tiled to 2 MiB of raw rows, or past 4x L2 of stored rows (sparse, bf16 here).
        times = fetch.table_tiles(args.table_bytes, 64, r["row_bytes"], block[r["case"]], l2)
        assert r["rows"] == times * 64 and r["table_gb"] == r["rows"] * r["row_bytes"] / 1e9
        assert r["stored_gb"] == times * block[r["case"]] / 1e9
        assert r["stored_gb"] * 1e9 >= fetch.L2_POOL_FACTOR * l2  # no table read from L2
        assert r["raw_rows"] == args.table_bytes // r["row_bytes"]
        assert "stored_fits_l2" not in r
        for key in ("memcpy_gbps", "torch_gbps", "raw_gbps", "ibp_gbps", "decode_only_gbps"):
            assert r[key] > 0
        assert r["bypass"] == r["case"].startswith("random-bits")
        assert r["batch_ratio"] > 0 and set(r["targets"]) == set(fetch.TARGET_TITLES)
        assert "raw_sorted_gbps" not in r and "ibp_sorted_gbps" not in r  # no --sort-ids
        assert "ibp_db_gbps" not in r and "decode_only_db_gbps" not in r  # no --double-buffer
        assert r["id_batches"] >= 1 and r["pool_stored_bytes"] > 0
        # Past 16 batches only while the pool is under 2x L2; none is left under it here.
        two_l2 = 2 * fetch.CPU_L2_BYTES
        assert r["id_batches"] <= fetch.MAX_ID_BATCHES or r["pool_stored_bytes"] >= two_l2
        assert r["pool_fits_l2"] is False
        assert r["batch_ratio"] == pytest.approx(
            r["id_batches"] * r["batch"] * r["row_bytes"] / r["pool_stored_bytes"]
        )
        sparse = r["case"].startswith("sparse")
        assert r["table_class"] == ("sparse" if sparse else "dense")
        assert (r["zero_fraction"] > 0.9) == sparse
        assert r["targets"]["decode_vs_pcie"]["goal"] == (1000.0 if sparse else 400.0)
        # Every table with a decoder has its decoder judged: none is left as L2's rate.
        dec = r["targets"]["decode_vs_pcie"]
        assert dec["applies"] is not r["bypass"] and "from_l2" not in dec
        assert dec["met"] is not None and dec["value"] == r["decode_only_gbps"]
        if sparse:
            # 2 MiB of raw rows store under 4x L2: tiled further, so the table has more rows
            # than the raw buffer, and the raw gather's ids were folded onto it (checked above:
            # raw_gather_correct, and the IBP rows bit for bit).
            assert times > fetch.tiles(args.table_bytes, 64, r["row_bytes"])
            assert r["rows"] > r["raw_rows"] and r["table_gb"] > args.table_gb
        if r["case"].startswith(("dense", "random")):
            assert times == fetch.tiles(args.table_bytes, 64, r["row_bytes"])  # unchanged
            assert r["rows"] <= r["raw_rows"]
    assert doc["l2_bytes"] == fetch.CPU_L2_BYTES
    assert all(r["id_batches"] > 1 for r in doc["cases"])  # the stand-in's small L2
    assert any(r["id_batches"] > fetch.MAX_ID_BATCHES for r in doc["cases"])  # grown on
    assert doc["settings"]["double_buffer"] is False
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "Incomplete" not in md and "| sparse-5pct-512B |" in md and "stored table fits" not in md
    assert "| dense-normal-512B |" in md and "| random-bits-512B (raw) |" in md
    assert "sorted" not in md and "ibp db" not in md
    # What backed the pinned memory: the kind asked for and the huge-page shares found.
    shares = [doc["raw_huge_page_share"], *(r["huge_page_share"] for r in doc["cases"])]
    assert all(v is None or 0 <= v <= 1 for v in shares)
    assert doc["transparent_huge_pages"] == transparent_huge_pages()
    assert "Pinned memory: huge pages asked for; in transparent huge pages: " in md


def test_gpu_run_flags_id_batches_that_fit_in_l2(numpy_kernels, monkeypatch, tmp_path) -> None:
    """Ids' memory for 24 batches: the sparse pool stays under 2x L2 (512 KiB), and is flagged.

    (Stored bytes per row: dense about 222, bf16 95, random bits 256, sparse about 17.)
    """
    monkeypatch.setattr(fetch, "MAX_POOL_ID_BYTES", 24 * 300 * 8)
    doc = fake_gpu_run([*SMALL, "--widths", "256", "--batch", "300"], tmp_path)
    flagged = {r["case"]: r["pool_fits_l2"] for r in doc["cases"]}
    assert flagged == {"dense-normal-256B": False, "bf16-in-fp32-256B": False,
                       "sparse-5pct-256B": True, "random-bits-256B": False}  # fmt: skip
    for r in doc["cases"]:
        assert r["id_batches"] <= 24
        assert r["pool_fits_l2"] is (r["pool_stored_bytes"] < 2 * doc["l2_bytes"])
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "| sparse-5pct-256B (id batches fit in L2) |" in md
    assert "| dense-normal-256B |" in md


def test_gpu_run_with_sorted_ids_beside_the_unsorted(numpy_kernels, monkeypatch, tmp_path) -> None:
    calls: list[tuple[str, bool, bool]] = []  # (kernel, out_pos given, ids ascending)

    def recording(fn, idx_at: int):
        def launch(*args, out_pos=None, **kw):
            idx = args[idx_at]
            ascending = bool((idx[1:] >= idx[:-1]).all())
            calls.append((fn.__name__, out_pos is not None, ascending))
            return fn(*args, out_pos=out_pos, **kw)

        return launch

    monkeypatch.setattr(gather, "raw_gather", recording(numpy_raw_gather, 3))
    monkeypatch.setattr(cuda_table, "raw_gather", recording(numpy_raw_gather, 3))
    monkeypatch.setattr(cuda_table, "fetch_decode", recording(numpy_fetch_decode, 1))
    doc = fake_gpu_run([*SMALL, "--kinds", "sparse-5pct,random-bits", "--sort-ids"], tmp_path)
    assert doc["complete"] and doc["settings"]["sort_ids"] is True
    assert len(doc["cases"]) == 2 * 2 * 2  # 2 widths x 2 kinds x 2 batches, one run
    for r in doc["cases"]:
        assert r["bit_identical"] and r["raw_gather_correct"] and r["errors"] == [0, 0]
        for key in ("raw_gbps", "raw_sorted_gbps", "ibp_gbps", "ibp_sorted_gbps", "sort_ms"):
            assert r[key] > 0, key
    # Both kernels ran both ways; every launch with output positions had its ids sorted.
    assert {(name, pos) for name, pos, _ in calls} == {
        ("numpy_raw_gather", False),
        ("numpy_raw_gather", True),
        ("numpy_fetch_decode", False),
        ("numpy_fetch_decode", True),
    }
    assert all(ascending for _, pos, ascending in calls if pos)
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "| decode only | decode capacity | raw sorted | ibp sorted | sort ms |" in md
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert len(lines) == 2 + len(doc["cases"])
    assert all(ln.count("|") == lines[0].count("|") for ln in lines)
    assert re.search(r"\| \d+\.\d \(\d+\.\d\dx\) \|", md)  # a sorted rate and its ratio
    assert "Sorted: the ids sorted on the GPU" in md
    # The raw gather as raw tables run it by default, judged beside the kernel alone.
    title = fetch.TARGET_TITLES["raw_default_vs_memcpy"]
    assert f"| {title} |" in md and f"- {title}: met in " in md
    for r in doc["cases"]:
        t = r["targets"]["raw_default_vs_memcpy"]
        assert t["applies"] == (r["row_bytes"] == 512)
        assert t["value"] == pytest.approx(r["raw_sorted_gbps"] / r["memcpy_gbps"])


def test_gpu_run_with_double_buffer_beside_one_buffer(numpy_kernels, monkeypatch, tmp_path):
    """Db launches follow the one-buffer ones; rows too wide for two buffers give no db rate."""
    calls: list[tuple[int, int, bool]] = []  # (row bytes, rows address, double-buffered)

    def staged(codec, idx, out, error, *, double_buffer=False, **kw):
        calls.append((codec.row_bytes, codec.rows_ptr, double_buffer))
        if double_buffer and codec.row_bytes > 256:
            raise ValueError("double-buffered rows ... use the raw gather or one buffer")
        return numpy_fetch_decode(codec, idx, out, error, double_buffer=double_buffer, **kw)

    monkeypatch.setattr(cuda_table, "fetch_decode", staged)
    argv = [*SMALL, "--kinds", "sparse-5pct,random-bits", "--sort-ids", "--double-buffer"]
    doc = fake_gpu_run(argv, tmp_path)
    assert doc["settings"]["sort_ids"] is True
    assert doc["complete"] and doc["settings"]["double_buffer"] is True
    assert len(doc["cases"]) == 2 * 2 * 2  # 2 widths x 2 kinds x 2 batches, one run
    for r in doc["cases"]:
        assert r["bit_identical"] and r["raw_gather_correct"] and r["errors"] == [0, 0]
        assert r["ibp_sorted_gbps"] > 0  # beside --sort-ids
        wide = r["row_bytes"] > 256 and not r["bypass"]
        for key in ("ibp_db_gbps", "decode_only_db_gbps"):
            assert (r[key] is None) if wide else (r[key] > 0), (r["case"], key)
        assert ("one buffer" in r.get("double_buffer_note", "")) == wide
    # The fused kernel ran double-buffered from both the pinned rows and the GPU copy.
    for width in (256, 512):
        one = {ptr for w, ptr, db in calls if w == width and not db}
        assert len(one) == 2 and {ptr for w, ptr, db in calls if w == width and db} == one
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "| sort ms | ibp db | decode only db | ibp / bound |" in md
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert len(lines) == 2 + len(doc["cases"])
    assert all(ln.count("|") == lines[0].count("|") for ln in lines)
    assert "| n/a | n/a |" in md
    assert "not double-buffered (rows too wide for two staging buffers): sparse-5pct-512B" in md


def test_gpu_run_double_buffered_output_is_checked(numpy_kernels, monkeypatch, tmp_path) -> None:
    def wrong_when_staged(codec, idx, out, error, *, double_buffer=False, **kw):
        numpy_fetch_decode(codec, idx, out, error, **kw)
        if double_buffer:
            out.view(torch.uint8).view(-1)[0] ^= 1

    monkeypatch.setattr(cuda_table, "fetch_decode", wrong_when_staged)
    argv = [*SMALL, "--widths", "256", "--kinds", "sparse-5pct", "--double-buffer"]
    doc = fake_gpu_run(argv, tmp_path)
    assert doc["cases"] and not any(r["bit_identical"] for r in doc["cases"])


def grid_codec(warps: int, smem: int) -> SimpleNamespace:
    """A codec stand-in for `fetch.decode_grids`: its shared-memory plan and entry point."""
    plan = fused.SmemPlan(buf_words=4, bytes_per_warp=smem // warps, warps_per_block=warps)
    return SimpleNamespace(
        plan=lambda max_smem, buffers=1, warps=8: plan,
        offsets=torch.zeros(2, dtype=torch.int32),
        word_bytes=4,
    )


def test_decode_grids_off_cuda_one_sm_of_resident_blocks() -> None:
    cpu = torch.device("cpu")
    # 8 warps of 64 registers: the register file holds 4 blocks (65,536 / (8 x 2,048)).
    codec = grid_codec(8, 8 * 1024)
    assert fetch.decode_grids(codec, 10_000, cpu, None) == (4, 4)  # the cap is the full grid
    assert fetch.decode_grids(codec, 10_000, cpu, 1) == (1, 4)
    assert fetch.decode_grids(codec, 10_000, cpu, 8) == (4, 4)  # never more than it holds
    assert fetch.decode_grids(codec, 20, cpu, 1) == (1, 3)  # 20 rows: 3 blocks of 8 warps
    assert fetch.decode_grids(codec, 5, cpu, 1) == (1, 1)
    # Shared memory limits it: 100 KiB a block, 2 blocks in 228 KiB.
    assert fetch.decode_grids(grid_codec(8, 100 * 1024), 10_000, cpu, 1) == (1, 2)


def test_decode_grids_on_cuda_size_as_the_fetch_launcher(monkeypatch) -> None:
    """Through `runtime.grid_size`: the fetch's default on the current stream, and the whole
    device (occupancy x SMs), on 132 SMs of 4 resident blocks."""
    from contextlib import nullcontext

    from ibp_graph.kernels import runtime

    props = SimpleNamespace(multi_processor_count=132, shared_memory_per_block_optin=227 * 1024)
    taken: list[tuple[str, str, int, int | None]] = []

    def kernel(source, entry, device, *, max_smem=None):
        taken.append((source, entry, device, max_smem))
        return SimpleNamespace(num_regs=64)  # no driver handle: the occupancy calculator

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    monkeypatch.setattr(runtime, "kernel", kernel)
    monkeypatch.setattr(runtime, "cupy_stream", lambda stream, device: nullcontext())
    gpu = torch.device("cuda", 0)
    codec = grid_codec(8, 8 * 1024)
    assert fetch.decode_grids(codec, 10**6, gpu, 33) == (33, 4 * 132)
    assert taken == [(fused.SOURCE, "ibp_fetch_decode_w4_o4", 0, None)]  # one buffer
    # The library's default on the current stream is every block the SMs hold: no gap.
    assert runtime.fetch_blocks_per_sm(None) is None
    assert fetch.decode_grids(codec, 10**6, gpu, None) == (4 * 132, 4 * 132)
    assert fetch.decode_grids(codec, 1000, gpu, 33) == (33, 125)  # 125 blocks cover the rows
    # Wide blocks: the kernel allowed the device's shared memory, as the launcher does.
    assert fetch.decode_grids(grid_codec(8, 100 * 1024), 10**6, gpu, 33) == (33, 2 * 132)
    assert taken[-1][3] == 227 * 1024


def capacity_run(argv: list[str], tmp_path: Path, monkeypatch, flip_at_full: bool = False):
    """`fake_gpu_run` recording the fused launches' (rows address, grid cap); with
    ``flip_at_full``, launches given a cap above one block get a byte wrong."""
    caps: list[tuple[int, int | None]] = []

    def launch(codec, idx, out, error, *, max_blocks=None, **kw):
        caps.append((codec.rows_ptr, max_blocks))
        numpy_fetch_decode(codec, idx, out, error, max_blocks=max_blocks, **kw)
        if flip_at_full and max_blocks is not None and max_blocks > 1:
            out.view(torch.uint8).view(-1)[0] ^= 1

    monkeypatch.setattr(cuda_table, "fetch_decode", launch)
    return fake_gpu_run(argv, tmp_path), caps


def test_gpu_run_times_decode_capacity_below_the_full_grid(numpy_kernels, monkeypatch, tmp_path):
    """A quarter of the SMs (one block on the stand-in's one SM): decode capacity is timed on
    the full grid, from the GPU copy of the rows, and judged by the decoder's goal."""
    argv = [*SMALL, "--kinds", "dense-normal,sparse-5pct,random-bits", "--max-blocks", "0.25"]
    doc, caps = capacity_run(argv, tmp_path, monkeypatch)
    assert doc["complete"] and doc["settings"]["decode_capacity"] is True
    assert len(doc["cases"]) == 2 * 3 * 2
    full_caps = {cap for _, cap in caps if cap != 1}
    for r in doc["cases"]:
        assert r["bit_identical"] and r["errors"] == [0, 0]
        dec = r["targets"]["decode_vs_pcie"]
        if r["bypass"]:
            assert r["decode_capacity_note"] == fetch.CAPACITY_RAW
            assert r["decode_capacity_gbps"] is None and r["decode_only_blocks"] is None
            continue
        assert r["decode_only_blocks"] == 1 < r["decode_capacity_blocks"]
        assert r["decode_capacity_gbps"] > 0 and "decode_capacity_note" not in r
        assert r["decode_capacity_blocks"] in full_caps  # the launch's cap was that grid
        assert dec["rate"] == "decode capacity" and dec["value"] == r["decode_capacity_gbps"]
        # The fused fetch's bound stays on decode-only at the fetch grid.
        assert r["ibp_bound_gbps"] == pytest.approx(
            min(r["ratio"] * r["raw_gbps"], r["decode_only_gbps"])
        )
    # The full grid was given to launches from the GPU copy only, never to the pinned fetch.
    pinned = {ptr for ptr, cap in caps if cap == 1}
    at_full = {ptr for ptr, cap in caps if cap != 1}
    assert at_full and at_full < pinned  # the GPU copies also ran decode-only at the cap
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "| decode only | decode capacity | ibp / bound |" in md
    assert re.search(r"\| \d+\.\d \| \d+\.\d \(\d+\.\d\dx\) \| ", md)  # rate, ratio
    assert "decode capacity not measured" not in md


def test_gpu_run_skips_decode_capacity_at_the_full_grid(numpy_kernels, monkeypatch, tmp_path):
    """The default grid cap (None) already is the full grid: nothing more is timed."""
    doc, caps = capacity_run([*SMALL, "--kinds", "sparse-5pct"], tmp_path, monkeypatch)
    assert {cap for _, cap in caps} == {None}
    for r in doc["cases"]:
        assert r["decode_capacity_note"] == fetch.CAPACITY_FULL
        assert r["decode_capacity_gbps"] is None and r["decode_capacity_blocks"] is None
        assert r["decode_only_blocks"] >= 1
        assert r["targets"]["decode_vs_pcie"]["rate"] == "decode-only"
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "(decode only is the decoder's capacity): every case with a decoder" in md
    # Turned off: no grid asked, no column.
    doc, caps = capacity_run(
        [*SMALL, "--kinds", "sparse-5pct", "--max-blocks", "0.25", "--no-decode-capacity"],
        tmp_path,
        monkeypatch,
    )
    assert {cap for _, cap in caps} == {1} and doc["settings"]["decode_capacity"] is False
    for r in doc["cases"]:
        assert r["decode_capacity_note"] == fetch.CAPACITY_OFF
        assert r["decode_only_blocks"] is None and r["decode_capacity_gbps"] is None
    md = (tmp_path / "fetch-fake.md").read_text()
    assert "| decode only | ibp / bound |" in md and "| decode capacity |" not in md
    assert "Decode capacity:" not in md and "decode capacity not measured" not in md


def test_gpu_run_checks_the_decode_capacity_output(numpy_kernels, monkeypatch, tmp_path) -> None:
    argv = [*SMALL, "--widths", "256", "--kinds", "sparse-5pct", "--max-blocks", "0.25"]
    doc, _ = capacity_run(argv, tmp_path, monkeypatch, flip_at_full=True)
    assert doc["cases"] and all(r["decode_capacity_gbps"] > 0 for r in doc["cases"])
    assert not any(r["bit_identical"] for r in doc["cases"])


def nth_batch(num_rows: int, n: int, k: int, seed: int = 0) -> torch.Tensor:
    """Batch ``k`` of a pool, drawn here as the benchmark draws it (batch 0: the checked ids)."""
    gen = torch.Generator().manual_seed(seed)
    batches = [torch.randint(0, num_rows, (n,), generator=gen) for _ in range(k + 1)]
    return batches[k]


def test_gpu_run_times_every_path_over_the_pool_in_turn(numpy_kernels, monkeypatch, tmp_path):
    """Each timing's launches take the pool's batches in turn; every batch is a valid id set."""
    pools: list[tuple[int, int, list[torch.Tensor]]] = []  # (table rows, batch rows, pool)
    # (pool, its table's rows, (ids launched, the launch's table rows) of each launch)
    timings: list[tuple[list[torch.Tensor], int, list[tuple[torch.Tensor, int]]]] = []
    timing: list[list[tuple[torch.Tensor, int]]] = []  # the launches of the timing under way
    real_draw, real_seconds = fetch.draw_pool, fetch.gpu_seconds

    def draw_pool(num_rows, n, seed, sizes, l2):
        pool, stored = real_draw(num_rows, n, seed, sizes, l2)
        pools.append((num_rows, n, pool))
        return pool, stored

    def gpu_seconds(fn, *args, **kw):
        timings.append((pools[-1][2], pools[-1][0], []))
        timing.append(timings[-1][2])
        try:
            return real_seconds(fn, *args, **kw)
        finally:
            timing.clear()

    def recording(fn, idx_at: int, table_rows):
        def launch(*args, out_pos=None, **kw):
            if timing:  # the batch launched: the ids, or the sorted ones put back in place
                batch = args[idx_at].clone()
                if out_pos is not None:
                    batch[out_pos] = args[idx_at]
                timing[0].append((batch, table_rows(args)))
            return fn(*args, out_pos=out_pos, **kw)

        return launch

    gather_rows = lambda args: args[1]  # noqa: E731  (raw gather: the table's num_rows)
    fused_rows = lambda args: args[0].num_rows  # noqa: E731  (fused: its codec's)
    monkeypatch.setattr(fetch, "draw_pool", draw_pool)
    monkeypatch.setattr(fetch, "gpu_seconds", gpu_seconds)
    monkeypatch.setattr(gather, "raw_gather", recording(numpy_raw_gather, 3, gather_rows))
    monkeypatch.setattr(cuda_table, "raw_gather", recording(numpy_raw_gather, 3, gather_rows))
    monkeypatch.setattr(cuda_table, "fetch_decode", recording(numpy_fetch_decode, 1, fused_rows))
    argv = [*SMALL, "--kinds", "sparse-5pct,random-bits", "--sort-ids", "--double-buffer"]
    doc = fake_gpu_run(argv, tmp_path)
    assert [len(pool) for _, _, pool in pools] == [r["id_batches"] for r in doc["cases"]]
    for (num_rows, n, pool), r in zip(pools, doc["cases"], strict=True):
        assert num_rows == r["rows"] and n == r["batch"] and len(pool) > 1
        assert torch.equal(pool[0], nth_batch(num_rows, n, 0))  # the checked ids
        for b in pool:  # a valid id set over the table
            assert b.dtype == torch.int64 and b.shape == (n,)
            assert int(b.min()) >= 0 and int(b.max()) < num_rows
        assert len({tuple(b.tolist()) for b in pool}) == len(pool)
    timed = [t for t in timings if t[2]]  # not memcpy, not the sort alone
    # raw, raw sorted, ibp, ibp db, ibp sorted, decode-only, decode-only db per case and batch
    assert len(timed) == 7 * len(doc["cases"])
    raw_rows = {r["raw_rows"] for r in doc["cases"]}
    folded = 0
    for pool, num_rows, launched in timed:
        assert len(launched) >= 4  # warm-up, the host's timing, 2 samples
        rows = {r for _, r in launched}
        assert len(rows) == 1  # one table a timing: the IBP table's, or the raw buffer
        (rows,) = rows
        assert rows == num_rows or rows in raw_rows
        # The pool's batches in turn; the raw gather's folded onto the raw buffer's rows
        # where the table has more (the sparse cases, tiled past 4x L2).
        assert all(
            torch.equal(got, pool[k % len(pool)] % rows) for k, (got, _) in enumerate(launched)
        )
        got = {tuple(b.tolist()) for b, _ in launched}
        assert len(got) == min(len(launched), len(pool)) > 1
        folded += rows < num_rows
    sparse = [r for r in doc["cases"] if r["case"].startswith("sparse")]
    assert sparse and all(r["rows"] > r["raw_rows"] for r in sparse)
    assert folded == 2 * len(sparse)  # raw and raw sorted of each sparse case and batch


@pytest.mark.parametrize("wrong_batch", [0, 1, 5])
def test_gpu_run_checks_every_id_batch(numpy_kernels, monkeypatch, tmp_path, wrong_batch) -> None:
    """A fetch wrong on one batch of the pool only, the first or a later one, is caught."""

    def wrong_on_one(codec, idx, out, error, **kw):
        numpy_fetch_decode(codec, idx, out, error, **kw)
        if torch.equal(idx, nth_batch(codec.num_rows, idx.numel(), wrong_batch)):
            out.view(torch.uint8).view(-1)[0] ^= 1

    monkeypatch.setattr(cuda_table, "fetch_decode", wrong_on_one)
    argv = [*SMALL, "--widths", "256", "--kinds", "sparse-5pct"]
    doc = fake_gpu_run(argv, tmp_path)
    assert doc["cases"] and all(r["id_batches"] > 5 for r in doc["cases"])
    assert not any(r["bit_identical"] for r in doc["cases"])
    assert all(r["raw_gather_correct"] for r in doc["cases"])


@pytest.mark.parametrize("wrong_batch", [0, 3])
def test_gpu_run_checks_the_raw_gather_on_every_id_batch(
    numpy_kernels, monkeypatch, tmp_path, wrong_batch
) -> None:
    argv = [*SMALL, "--widths", "256", "--kinds", "sparse-5pct"]
    args = fetch.parse_args(argv)
    (case,) = fetch.build_cases(args)[0]
    block = stored_block_bytes(case, tmp_path)
    table_rows = fetch.table_tiles(args.table_bytes, 64, 256, block, fetch.CPU_L2_BYTES) * 64
    raw_rows = args.table_bytes // 256
    assert table_rows > raw_rows  # tiled past 4x L2: the raw gather's ids are folded

    def wrong_on_one(table_ptr, num_rows, row_bytes, idx, out, error, **kw):
        numpy_raw_gather(table_ptr, num_rows, row_bytes, idx, out, error, **kw)
        assert num_rows == raw_rows
        if torch.equal(idx, nth_batch(table_rows, idx.numel(), wrong_batch) % raw_rows):
            out.view(torch.uint8).view(-1)[0] ^= 1

    monkeypatch.setattr(gather, "raw_gather", wrong_on_one)
    doc = fake_gpu_run(argv, tmp_path)
    assert doc["cases"] and all(r["rows"] == table_rows for r in doc["cases"])
    assert all(r["raw_rows"] == raw_rows for r in doc["cases"])
    assert not any(r["raw_gather_correct"] for r in doc["cases"])
    assert all(r["bit_identical"] for r in doc["cases"])


def test_time_budget_stops_before_a_case(numpy_kernels, tmp_path: Path) -> None:
    doc = fake_gpu_run([*SMALL, "--time-budget", "0"], tmp_path, start=0.0)
    cases, _ = fetch.build_cases(fetch.parse_args(SMALL))
    assert not doc["complete"] and doc["cases"] == []
    assert doc["skipped"] == [c.name for c in cases] and "time budget" in doc["stopped"]
    assert "not run (time budget)" in (tmp_path / "fetch-fake.md").read_text()


def test_main_without_a_gpu(monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU.*--dry-run"):
        fetch.main(SMALL)
    plan = fetch.main([*SMALL, "--dry-run", "--kinds", "dense-normal,random-bits"])
    assert [p["case"] for p in plan] == [
        "dense-normal-256B",
        "random-bits-256B",
        "dense-normal-512B",
        "random-bits-512B",
    ]
    assert all(p["rows_checked"] > 0 for p in plan)
    assert [p["bypass"] for p in plan] == [False, True, False, True]
    assert not any(p["sort_ids"] or p["double_buffer"] for p in plan)
    # The library's default grid (no --max-blocks) already is the full grid: none planned.
    assert not any(p["decode_capacity"] for p in plan)
    out = capsys.readouterr().out
    assert "The measurements need a CUDA GPU" in out and "decode capacity" not in out
    quarter = [*SMALL, "--dry-run", "--kinds", "dense-normal,random-bits", "--max-blocks", "0.25"]
    plan = fetch.main(quarter)
    assert [p["decode_capacity"] for p in plan] == [True, False, True, False]  # raw: no decoder
    assert capsys.readouterr().out.count("decode capacity planned") == 2
    plan = fetch.main([*quarter, "--no-decode-capacity"])
    assert len(plan) == 4 and not any(p["decode_capacity"] for p in plan)
    assert "decode capacity planned" not in capsys.readouterr().out
    plan = fetch.main([*SMALL, "--dry-run", "--kinds", "sparse-5pct", "--sort-ids"])
    assert [p["case"] for p in plan] == ["sparse-5pct-256B", "sparse-5pct-512B"]
    assert all(p["sort_ids"] and p["rows_checked"] > 0 for p in plan)
    # 2 MiB of raw rows store under 4x the stand-in's L2: tiled further, past it.
    for p in plan:
        assert p["stored_gb"] * 1e9 >= fetch.L2_POOL_FACTOR * fetch.CPU_L2_BYTES
        assert p["rows"] > fetch.tiles(int(0.002 * 2**30), 64, p["row_bytes"]) * 64
        assert p["table_gb"] == p["rows"] * p["row_bytes"] / 1e9
    out = capsys.readouterr().out
    assert "(sorted, written back)" in out
    assert "a GPU tiles a table further where they are under 4x its own L2" in out
    plan = fetch.main([*SMALL, "--dry-run", "--kinds", "sparse-5pct", "--double-buffer"])
    assert all(p["double_buffer"] and not p["sort_ids"] and p["rows_checked"] > 0 for p in plan)
    assert "double-buffered timings planned" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# e2e on a GPU: the table is compressed there, or on the CPU when the GPU encoder fails
# --------------------------------------------------------------------------------------------


def test_e2e_features_table_compresses_on_the_gpu(monkeypatch, tmp_path: Path) -> None:
    x = torch.randn(300, 24)
    opts = SimpleNamespace(clusters=1, align="auto", progress=False)
    asked = []
    real_compress = ibp_graph.compress

    def fake_gpu_compress(data, path, **kw):
        asked.append(kw.get("device"))
        return real_compress(data, path, **{**kw, "device": "cpu"})

    monkeypatch.setattr(ibp_graph, "compress", fake_gpu_compress)
    table, info, encoder = e2e.features_table(x, "g", opts, tmp_path, torch.device("cuda", 0))
    table.close()
    assert asked[0] == "cuda:0" and encoder == "cuda"
    assert not info.reused and info.compress_s > 0
    # The next run finds the file in the cache.
    table, info, encoder = e2e.features_table(x, "g", opts, tmp_path, torch.device("cuda", 0))
    table.close()
    assert encoder == "cache" and info.reused


def test_e2e_features_table_falls_back_to_the_cpu(monkeypatch, tmp_path: Path) -> None:
    x = torch.randn(300, 24)
    opts = SimpleNamespace(clusters=1, align="auto", progress=False)
    real_compress = ibp_graph.compress

    def broken_gpu(data, path, **kw):
        if kw.get("device", "cpu") != "cpu":
            raise RuntimeError("no GPU encoder here")
        return real_compress(data, path, **kw)

    monkeypatch.setattr(ibp_graph, "compress", broken_gpu)
    table, info, encoder = e2e.features_table(x, "h", opts, tmp_path, torch.device("cuda", 0))
    assert encoder == "cpu" and not info.reused
    assert torch.equal(table[[0, 299]], x[[0, 299]])
    table.close()


def test_e2e_features_table_checks_what_the_gpu_wrote(monkeypatch, tmp_path: Path) -> None:
    x = torch.randn(300, 24)
    opts = SimpleNamespace(clusters=1, align="auto", progress=False)
    real_compress = ibp_graph.compress

    def wrong_rows(data, path, **kw):
        if kw.get("device", "cpu") != "cpu":
            return real_compress(torch.zeros_like(data), path, **{**kw, "device": "cpu"})
        return real_compress(data, path, **kw)

    monkeypatch.setattr(ibp_graph, "compress", wrong_rows)
    table, info, encoder = e2e.features_table(x, "w", opts, tmp_path, torch.device("cuda", 0))
    assert encoder == "cpu" and torch.equal(table[:], x)
    table.close()
