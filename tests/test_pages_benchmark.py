"""benchmarks/pages.py on the CPU, and the huge-page accounting of `ibp_graph.pinned`.

The benchmark's GPU run goes end to end with the stand-ins of tests/test_fetch_benchmark.py
(pinning a no-op, device addresses the host's, the raw gather in NumPy) plus a stand-in
cudaHostAlloc: buffers, rotation, timing, checks and result files run as on a GPU.
"""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import numpy as np
import pytest
import torch
from cuda_runtime_stub import CudaRuntimeStub
from test_fetch_benchmark import FakeCuda, numpy_kernels  # noqa: F401

from benchmarks import pages
from ibp_graph.pinned import PinnedBuffer, huge_page_bytes, transparent_huge_pages

SMALL = ["--table-gb", "0.00390625", "--widths", "256,4096", "--spans-mb", "1,2", "--batch", "300",
         "--id-batches", "2", "--repeats", "2"]  # fmt: skip


class HostAllocRuntime(CudaRuntimeStub):
    """The tests' CUDA runtime stand-in with cudaHostAlloc and cudaFreeHost (anonymous mappings)."""

    def __init__(self) -> None:
        super().__init__()
        self.allocated: dict[int, mmap.mmap] = {}

    def hostAlloc(self, size: int, flags: int) -> int:  # noqa: N802 - CuPy's names
        assert flags & 0x02  # cudaHostAllocMapped
        buf = mmap.mmap(-1, size)
        ptr = np.frombuffer(buf, dtype=np.uint8).ctypes.data
        self.allocated[ptr] = buf
        return ptr

    def freeHost(self, ptr: int) -> None:  # noqa: N802
        self.allocated.pop(ptr)  # the mapping stays open while views of it live


class HostAllocCuda(FakeCuda):
    def __init__(self) -> None:
        super().__init__()
        self.runtime = HostAllocRuntime()


# --------------------------------------------------------------------------------------------
# Huge-page accounting
# --------------------------------------------------------------------------------------------


def _smaps(*vmas: tuple[int, int, int]) -> str:
    """smaps text of mappings (start, end, AnonHugePages in kB), with the fields around it."""
    out = []
    for lo, hi, huge_kb in vmas:
        out += [
            f"{lo:x}-{hi:x} rw-p 00000000 00:00 0",
            f"Size:           {(hi - lo) >> 10} kB",
            "Rss:            0 kB",
            f"AnonHugePages:  {huge_kb} kB",
            "VmFlags: rd wr mr mw me ac hg",
        ]
    return "\n".join(out) + "\n"


def test_huge_page_bytes_counts_the_mappings_over_the_array_up_to_their_overlap() -> None:
    backing = np.zeros(16 << 20, dtype=np.uint8)
    base = backing.ctypes.data
    array = backing[4 << 20 : 12 << 20]  # 8 MiB at base + 4 MiB
    start = base + (4 << 20)
    # Three mappings: one ending inside the array, one inside it, one starting inside it.
    text = _smaps(
        (base, start + (2 << 20), 6 << 10),  # overlaps 2 MiB, holds 6 MiB of huge pages: 2
        (start + (2 << 20), start + (6 << 20), 4 << 10),  # all 4 MiB inside
        (start + (6 << 20), base + (32 << 20), 0),  # none
        (base + (64 << 20), base + (80 << 20), 16 << 10),  # elsewhere
    )
    assert huge_page_bytes(array, text) == 6 << 20
    # Never more than the array, and 0 where no mapping covers it.
    assert huge_page_bytes(array, _smaps((base, base + (64 << 20), 64 << 10))) == 8 << 20
    assert huge_page_bytes(array, _smaps((base + (64 << 20), base + (66 << 20), 2048))) == 0


def test_huge_page_bytes_without_smaps_is_unknown(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr("ibp_graph.pinned._SMAPS", tmp_path / "missing")
    assert huge_page_bytes(np.zeros(10, dtype=np.uint8)) is None


def test_transparent_huge_pages_reads_the_bracketed_choices(monkeypatch, tmp_path: Path) -> None:
    (tmp_path / "enabled").write_text("always [madvise] never\n")
    (tmp_path / "defrag").write_text("always defer defer+madvise [madvise] never\n")
    monkeypatch.setattr("ibp_graph.pinned._THP_DIR", tmp_path)
    assert transparent_huge_pages() == {"enabled": "madvise", "defrag": "madvise"}
    (tmp_path / "defrag").unlink()
    assert transparent_huge_pages() == {"enabled": "madvise"}


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/self/smaps")
def test_huge_page_share_of_real_buffers() -> None:
    """Small pages are never huge; advised huge pages are, once touched, where THP allows."""
    cuda = HostAllocCuda()
    small = PinnedBuffer(8 << 20, "small", cuda, pages="small")
    small.array[:] = 1
    assert small.huge_page_share() == 0.0
    small.close()
    assert small.huge_page_share() is None  # closed
    huge = PinnedBuffer(8 << 20, "huge", cuda, pages="huge")
    assert huge.huge_page_share() == 0.0  # nothing touched yet
    huge.array[:] = 1
    share = huge.huge_page_share()
    assert share is not None and 0.0 <= share <= 1.0
    if transparent_huge_pages().get("enabled") in ("always", "madvise"):
        assert share > 0.5, f"THP {transparent_huge_pages()}: only {share:.0%} in huge pages"
    huge.close()


# --------------------------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------------------------


def test_plan_spans_and_rotation() -> None:
    args = pages.parse_args(["--table-gb", "1", "--spans-mb", "2048,128,32,128"])
    assert pages.spans(args) == [32 << 20, 128 << 20, 1 << 30]  # above the buffer: dropped
    plan = pages.cells(args)
    assert plan[:4] == [(256, 32 << 20, False), (256, 128 << 20, False), (256, 1 << 30, False),
                        (256, 1 << 30, True)]  # fmt: skip
    assert len(plan) == 4 * len(pages.WIDTHS)
    assert [pages.order(["a", "b", "c"], r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]  # fmt: skip


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["--kinds", "huge,tiny"],
            "unknown page kinds ['tiny']; expected some of huge, small, cuda",
        ),
        (["--kinds", "huge,huge"], "names a kind twice"),
        (["--widths", "0"], "argument --widths: expected positive integers, got '0'"),
        (["--spans-mb", "64,-1"], "argument --spans-mb: expected positive integers"),
        (["--spans-mb", "x"], "argument --spans-mb: expected integers like 256,512, got 'x'"),
        (["--batch", "0"], "--batch must be >= 1"),
        (["--id-batches", "0"], "--id-batches must be >= 1"),
        (["--table-gb", "0"], "--table-gb must be positive"),
        (["--table-gb", "0.000001", "--widths", "4096"], "wider than the table"),
    ],
)
def test_bad_arguments_are_refused(argv, message, capsys) -> None:
    with pytest.raises(SystemExit):
        pages.parse_args(argv)
    assert message in capsys.readouterr().err


def test_main_without_a_gpu(monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU.*--dry-run"):
        pages.main(SMALL)
    plan = pages.main([*SMALL, "--dry-run"])
    assert len(plan) == 2 * 4  # 2 widths x (1 MiB, 2 MiB, the whole 4 MiB, sorted)
    assert "needs a CUDA GPU to measure" in capsys.readouterr().out


def fake_run(argv: list[str], tmp_path: Path, cuda: FakeCuda | None = None) -> dict:
    args = pages.parse_args([*argv, "--out", str(tmp_path)])
    env = {"device": "CPU: test", "git_commit": "x", "date": "d", "command": "c"}
    pages.run(args, torch.device("cpu"), cuda or HostAllocCuda(), env, "pages-fake")
    return json.loads((tmp_path / "pages-fake.json").read_text())


def test_run_with_stand_ins(numpy_kernels, monkeypatch, tmp_path: Path) -> None:  # noqa: F811
    timed: list[str] = []  # the kind of each timed launch, in order
    seconds = iter(range(1, 10_000))
    holder: dict = {"timing": False}
    real = pages.gather_launch

    def traced(ptr, rows, width, out, error, *, sort):
        launch = real(ptr, rows, width, out, error, sort=sort)
        kind = next(k for k, p in holder["bufs"].ptrs.items() if p == ptr)

        def run(ids):
            if holder["timing"]:
                timed.append(kind)
            return launch(ids)

        return run

    def fake_seconds(fn, repeats, guard, device):
        holder["timing"] = True
        fn()
        holder["timing"] = False
        return next(seconds)

    class Buffers(pages.Buffers):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            holder["bufs"] = self

    monkeypatch.setattr(pages, "Buffers", Buffers)
    monkeypatch.setattr(pages, "gather_launch", traced)
    monkeypatch.setattr(pages, "gpu_seconds", fake_seconds)
    cuda = HostAllocCuda()
    doc = fake_run(SMALL, tmp_path, cuda)
    assert cuda.runtime.registered == {} and cuda.runtime.allocated == {}  # all released
    assert doc["complete"] and doc["stopped"] == ""
    assert set(doc["kinds"]) == {"huge", "small", "cuda"}
    for info in doc["kinds"].values():
        assert info["huge_page_share"] is None or 0 <= info["huge_page_share"] <= 1
    assert doc["kinds"]["small"]["huge_page_share"] in (0.0, None)
    assert set(doc["memcpy_gbps"]) == {"256", "4096"}
    got = [(c["width"], c["span_bytes"], c["sorted"]) for c in doc["cells"]]
    assert got == pages.cells(pages.parse_args(SMALL))
    # Each repeat times each kind once, the order rotating: 2 repeats x 3 kinds per cell.
    assert timed == ["huge", "small", "cuda", "small", "cuda", "huge"] * len(doc["cells"])
    for cell in doc["cells"]:
        whole = cell["span_bytes"] == doc["settings"]["table_bytes"]
        assert cell["correct"] == ({"huge": True, "small": True, "cuda": True} if whole else {})
        assert cell["rows"] == cell["span_bytes"] // cell["width"] and cell["errors"] == [0, 0]
        for rate in cell["rates"].values():
            assert rate["gbps"] > 0 and rate["mrows_per_s"] > 0
    # Medians of the rotated samples. The stand-in's seconds count up from 1 (memcpy's): the
    # first cell's samples are huge 2, small 3, cuda 4, then small 5, cuda 6, huge 7.
    first = doc["cells"][0]["rates"]
    assert [first[k]["seconds"] for k in ("huge", "small", "cuda")] == [4.5, 4.0, 5.0]
    md = (tmp_path / "pages-fake.md").read_text()
    assert "| huge | private anonymous" in md and "| cuda | cudaHostAlloc" in md
    assert "## 4,096 B rows" in md and "4 MiB (whole buffer), ids sorted" in md
    assert "bit-identical" in md and "wrong rows" not in md and "Incomplete" not in md
    assert "- 256 B rows, against the whole buffer unsorted: huge: smallest span" in md


def test_run_reports_wrong_rows(numpy_kernels, monkeypatch, tmp_path: Path) -> None:  # noqa: F811
    real = pages.gather_launch

    def off_by_one(ptr, rows, width, out, error, *, sort):
        launch = real(ptr, rows, width, out, error, sort=sort)
        return lambda ids: launch((ids + 1) % rows)

    monkeypatch.setattr(pages, "gather_launch", off_by_one)
    doc = fake_run([*SMALL, "--kinds", "small"], tmp_path)
    whole = [c for c in doc["cells"] if c["span_bytes"] == doc["settings"]["table_bytes"]]
    assert whole and all(c["correct"] == {"small": False} for c in whole)
    assert "**wrong rows**" in (tmp_path / "pages-fake.md").read_text()


def test_time_budget_stops_before_a_width(numpy_kernels, tmp_path: Path) -> None:  # noqa: F811
    doc = fake_run([*SMALL, "--kinds", "huge", "--time-budget", "0"], tmp_path)
    assert not doc["complete"] and doc["cells"] == []
    assert "not run: widths 256, 4096" in doc["stopped"]
    assert "Incomplete run" in (tmp_path / "pages-fake.md").read_text()


def test_a_kind_that_cannot_be_pinned_is_reported_and_the_others_measured(
    numpy_kernels,  # noqa: F811
    tmp_path: Path,
) -> None:
    cuda = HostAllocCuda()

    def refuse(size: int, flags: int) -> int:
        raise cuda.runtime.CUDARuntimeError("cudaErrorMemoryAllocation: out of memory")

    cuda.runtime.hostAlloc = refuse
    doc = fake_run([*SMALL, "--widths", "256"], tmp_path, cuda)
    assert doc["complete"] and "cudaErrorMemoryAllocation" in doc["kinds"]["cuda"]["error"]
    assert all(set(c["rates"]) == {"huge", "small"} for c in doc["cells"])
    md = (tmp_path / "pages-fake.md").read_text()
    assert "| cuda | cudaHostAlloc (the driver's pages: smaps cannot see their size) | not " in md
    assert "| span | rows | huge | small | checked |" in md
    with pytest.raises(SystemExit, match="no page kind could be pinned"):
        fake_run([*SMALL, "--kinds", "cuda"], tmp_path, cuda)
