"""The overlap benchmark (benchmarks/overlap.py): its timeline arithmetic, and a tiny CPU run."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

pytest.importorskip("torch_geometric", reason="the benchmark trains PyG's GraphSAGE")

from benchmarks import overlap  # noqa: E402


def test_only_steps_inside_the_fetches_count_as_beside() -> None:
    fetches = [(0.0, 2.0), (2.0, 4.0), (4.0, 6.0)]
    assert overlap.covered((1.0, 3.0), fetches) and overlap.covered((0.0, 6.0), fetches)
    assert not overlap.covered((5.0, 7.0), fetches) and not overlap.covered((1.0, 2.0), [])
    # Fetches with a gap between them: a step across the gap ran partly alone.
    gappy = [(0.0, 1.0), (7.0, 8.0)]
    assert not overlap.covered((0.0, 4.0), gappy) and not overlap.covered((4.0, 8.0), gappy)
    assert overlap.covered((7.2, 7.9), gappy) and overlap.covered((0.0, 2.0), [(1, 3), (0, 2)])
    # Fetches queued back to back, an event apart (a few microseconds): one span.
    queued = [(0.05, 4.2651), (4.2667, 7.6587), (7.6607, 11.5986)]
    assert overlap.covered((4.348, 11.0), queued) and not overlap.covered((0.0, 5.0), queued)
    alone = [[(0, 2), (2, 4)], [(0, 2), (2, 4.5)]]  # step alone: median of 2, 2, 2, 2.5 = 2
    beside = [
        {"steps": [(0, 2.2), (2.2, 4.4), (4.4, 9.0)], "fetches": [(0, 3), (3, 6)]},
        {"steps": [(0, 2.4)], "fetches": [(0, 3)]},
    ]
    got = overlap.case_summary(alone, beside, [[(0, 3), (3, 5)]])
    assert got["steps_covered"] == 3  # the step ending at 9.0 ran partly alone
    assert got["step_alone_ms"] == 2.0 and got["step_beside_ms"] == pytest.approx(2.2)
    assert got["slowdown"] == pytest.approx(1.1)
    assert got["fetch_alone_ms"] == 2.5 and got["fetch_beside_ms"] == 3.0
    none = overlap.case_summary(alone, [{"steps": [(5, 7)], "fetches": [(0, 1)]}], [[(0, 1)]])
    assert none["steps_covered"] == 0 and none["slowdown"] is None


def test_a_case_verdict_is_its_slowdown_against_the_target() -> None:
    assert overlap.slowdown_verdict(1.32, True) == "gap 20.0%"  # 1.32 / 1.1 - 1
    assert overlap.slowdown_verdict(1.155, True) == "gap 5.0%"
    assert overlap.slowdown_verdict(1.1, True) == "met"  # the goal itself is met
    assert overlap.slowdown_verdict(0.95, True) == "met"
    assert overlap.slowdown_verdict(None, True) == "not measured"
    assert overlap.slowdown_verdict(1.32, False) == "-"  # on the CPU: does not apply


def test_the_gpu_tables_are_built_with_their_real_signatures(tmp_path: Path, monkeypatch) -> None:
    # The CUDA branch of make_tables, on any machine: each table class is replaced by a
    # recorder that binds the call to the real constructor's signature (a wrong call raises).
    import torch

    from ibp_graph import cuda_table

    calls = []

    def recorder(real):
        def make(*args, **kwargs):
            calls.append((real.__name__, inspect.signature(real).bind(*args, **kwargs)))
            return real.__name__

        return make

    for name in ("CudaIBPTable", "PinnedRawTable"):
        monkeypatch.setattr(cuda_table, name, recorder(getattr(cuda_table, name)))
    made = overlap.make_tables("sparse", 200, torch.device("cuda", 0), tmp_path)
    assert made["tables"] == {"raw": "PinnedRawTable", "ibp": "CudaIBPTable"}
    bound = dict(calls)
    assert bound["CudaIBPTable"].arguments["path"] == tmp_path / "overlap-sparse-200.ibp"
    assert bound["CudaIBPTable"].arguments["device"] == torch.device("cuda", 0)
    assert bound["PinnedRawTable"].arguments["data"].shape == (200, 500)
    assert made["row_bytes"] == 2000 and made["ratio"] > 5


def test_a_tiny_cpu_run_writes_its_results(tmp_path: Path) -> None:
    argv = ["--device", "cpu", "--nodes", "3000", "--steps", "2", "--rounds", "1"]
    argv += ["--fetch-batches", "2", "--fetches-alone", "2", "--max-fetches", "3"]
    argv += ["--batch-size", "32", "--hidden", "8", "--tables", "dense", "sparse"]
    argv += ["--workdir", str(tmp_path / "w"), "--out", str(tmp_path), "--block-warps", "32"]
    payload = overlap.main(argv)
    assert json.loads((tmp_path / "overlap-cpu.json").read_text()) == payload
    assert payload["applies"] is False and payload["target_slowdown"] == 1.1
    cases = payload["cases"]
    assert [(c["table"], c["fetch"]) for c in cases] == [
        ("dense", "raw"), ("dense", "ibp"), ("sparse", "raw"), ("sparse", "ibp"),
    ]  # fmt: skip
    assert cases[3]["ratio"] > 5 and cases[0]["ratio"] == 1.0
    for case, timeline in zip(cases, payload["timelines"], strict=True):
        assert case["step_alone_ms"] > 0 and case["fetch_alone_ms"] > 0
        assert len(timeline["steps"]) == 2 and 1 <= len(timeline["fetches"]) <= 3
        assert all(s <= e for s, e in timeline["steps"] + timeline["fetches"])
    md = (tmp_path / "overlap-cpu.md").read_text()
    assert "does not apply on the CPU" in md and md.count("| none (CPU) |") == 4
    # The chunk rows and block warps columns: "-" for every case (the CPU tables have no
    # chunk_rows and no block_warps).
    assert "| grid cap | chunk rows | block warps | training stream |" in md
    assert md.count("| default (0.25/SM) | - | - | none (CPU) |") == 4
    assert all(c["chunk_rows"] is None and c["grid_blocks"] is None for c in cases)
    assert all(c["block_warps"] is None for c in cases)
    assert sum("has no block_warps" in n for n in payload["notes"]) == 4
    assert "- sparse ibp: no block-size cases, its table (IBPTable) has no block_warps." in md
    assert sum("has no chunk_rows" in n for n in payload["notes"]) == 4
    assert "- dense raw: no chunked cases, its table (Tensor) has no chunk_rows." in md
    # The kernel profile (dense/ibp by default) is skipped on the CPU, with its note.
    skipped = "not run on the CPU: torch.profiler's CUDA kernels need --device cuda"
    assert payload["profile"] == {"case": "dense/ibp", "skipped": skipped}
    assert f"Kernels of the training stream (dense/ibp): skipped ({skipped})." in md
    assert payload["elapsed_s"] > 0
    # On the CPU the target does not apply: no verdict. Where it applies, each case's
    # slowdown against at most 1.1: met, its gap in percent of 1.1, or not measured.
    assert "| met |" not in md and "gap" not in md
    redo = json.loads(json.dumps(payload))
    redo["applies"] = True
    for case, slow in zip(redo["cases"], (1.05, 1.1, 1.32, None), strict=True):
        case["slowdown"] = slow
    rows = overlap.markdown(redo, redo).splitlines()
    verdicts = [line.split(" | ")[9] for line in rows if line.startswith(("| dense", "| sparse"))]
    assert verdicts == ["met", "met", "gap 20.0%", "not measured"]
    with pytest.raises(SystemExit):
        overlap.parse_args(["--device", "cpu", "--steps", "0"])


def test_the_options_of_the_one_block_chunked_and_profiled_cases(monkeypatch, capsys) -> None:
    import torch

    args = overlap.parse_args(["--device", "cpu"])
    assert args.max_blocks == [0.001, 0.1, 1, 4]  # the one-block cap, then the earlier ones
    assert args.chunk_rows == [4096, 16384, 32768] and args.profile_case == "dense/ibp"
    args = overlap.parse_args(["--chunk-rows", "--profile-case", "none", "--max-blocks", "2"])
    assert args.chunk_rows == [] and args.profile_case is None and args.max_blocks == [2.0]
    args = overlap.parse_args(["--chunk-rows", "100", "--profile-case", "sparse/raw/0.001"])
    assert args.chunk_rows == [100] and args.profile_case == "sparse/raw/0.001"
    assert args.block_warps == []  # no block-size cases unless asked for
    assert overlap.parse_args(["--block-warps", "16", "32"]).block_warps == [16, 32]
    for bad, why in (("0", "between 1 and 32, got 0"), ("64", "got 64"), ("x", "'x'")):
        with pytest.raises(SystemExit):
            overlap.parse_args(["--block-warps", bad])
        assert why in capsys.readouterr().err
    for bad in (["--chunk-rows", "0"], ["--chunk-rows", "x"], ["--chunk-rows", "1.5"]):
        with pytest.raises(SystemExit):
            overlap.parse_args(bad)
        assert "must be an integer >= 1" in capsys.readouterr().err
    for bad in ("dense", "dense/foo", "tall/ibp", "dense/ibp/0", "dense/ibp/x", "a/b/c/d"):
        with pytest.raises(SystemExit):
            overlap.parse_args(["--profile-case", bad])
        assert "must be TABLE/FETCH[/CAP]" in capsys.readouterr().err
    # On an H100 (132 SMs) the default caps are 1, 13, 132 and 528 blocks.
    props = type("Props", (), {"multi_processor_count": 132})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    gpu = torch.device("cuda", 0)
    caps = [overlap.grid_cap(c, gpu) for c in overlap.parse_args([]).max_blocks]
    assert caps == [1, 13, 132, 528]
    labels = [overlap.grid_label(c, 132) for c in [None, *caps]]
    assert labels == [
        "default (0.25/SM)", "one block in all (1)", "0.0984848/SM (13)", "1/SM (132)",
        "4/SM (528)",
    ]  # fmt: skip
    assert overlap.profile_target("dense/ibp", gpu) == ("dense", "ibp", None)
    assert overlap.profile_target("dense/ibp/default", gpu) == ("dense", "ibp", None)
    assert overlap.profile_target("sparse/raw/0.001", gpu) == ("sparse", "raw", 1)
    assert overlap.profile_target(None, gpu) is None


def test_the_cases_of_a_table_and_how_many_fetches_a_round_alone_queues() -> None:
    plan = overlap.plan_cases([None, 1, 13, 132, 528], [4096, 32768])
    assert plan == [
        (None, None, None), (1, None, None), (13, None, None), (132, None, None),
        (528, None, None), (None, 4096, None), (None, 32768, None),
    ]  # fmt: skip
    # Caps that round to the same grid (a small GPU) run once; no chunks: no chunked cases.
    assert overlap.plan_cases([None, 1, 1, 4], []) == [
        (None, None, None), (1, None, None), (4, None, None),
    ]  # fmt: skip
    assert overlap.plan_cases([None], [64, 64]) == [(None, None, None), (None, 64, None)]
    # Block sizes: the default grid in blocks of each size, after the rest.
    assert overlap.plan_cases([None], [], [16, 32, 32]) == [
        (None, None, None), (None, None, 16), (None, None, 32),
    ]  # fmt: skip
    assert overlap.fetches_alone(3.5, 10) == 10  # fast fetches: --fetches-alone of them
    assert overlap.fetches_alone(100.0, 10) == 3  # 300 ms of them
    assert overlap.fetches_alone(250.0, 10) == 2 and overlap.fetches_alone(0.0, 10) == 10
    assert overlap.fetches_alone(250.0, 1) == 1  # never more than asked for


def test_a_table_is_configured_for_a_case_and_set_back_after_it() -> None:
    import torch

    class Table:
        max_blocks = None
        chunk_rows = None
        block_warps = 8

    class Old:  # a table from before chunk_rows
        max_blocks = 7

    t = Table()
    with overlap.configured(t, 13, 4096) as given:
        assert (t.max_blocks, t.chunk_rows) == (13, 4096)
        assert given == {"max_blocks": 13, "chunk_rows": 4096}
    assert t.max_blocks is None and t.chunk_rows is None
    with overlap.configured(t, None, None, 32) as given:
        assert (t.max_blocks, t.chunk_rows, t.block_warps) == (None, None, 32)
        assert given == {"max_blocks": None, "chunk_rows": None, "block_warps": 32}
    assert t.block_warps == 8
    t.chunk_rows = 99
    with pytest.raises(RuntimeError), overlap.configured(t, None, 64):
        assert t.chunk_rows == 64
        raise RuntimeError("a failed case")
    assert t.chunk_rows == 99 and t.max_blocks is None  # set back after a failure too
    old = Old()
    with overlap.configured(old, 1, 4096) as given:
        assert old.max_blocks == 1 and not hasattr(old, "chunk_rows")
        assert given == {"max_blocks": 1}
    assert old.max_blocks == 7 and not hasattr(old, "chunk_rows")
    plain = torch.zeros(3)  # a CPU table: neither attribute, none added
    with overlap.configured(plain, 1, 64) as given:
        assert given == {} and not hasattr(plain, "max_blocks")
    assert not hasattr(plain, "chunk_rows")


def _kernel(
    name: str, stream: int, us: float, grid=(132, 1, 1), block=(384, 1, 1), regs=None, smem=None
) -> dict:
    args = {"stream": stream, "grid": list(grid), "block": list(block)}
    if regs is not None:  # as kineto names them
        args |= {"registers per thread": regs, "shared memory": smem}
    return {
        "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": 0.0, "dur": us,
        "args": args,
    }  # fmt: skip


def test_the_kernel_profile_groups_the_training_streams_kernels_by_name() -> None:
    steps, gemm, relu = 2, "void sm90_xmma_gemm<float|tf32>", "elementwise_relu"
    alone = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 50.0},
        *[_kernel(gemm, 7, 1000.0, regs=168, smem=98304) for _ in range(4)],
        *[_kernel(relu, 7, 100.0, grid=(4096, 1, 1), block=(128, 1, 1)) for _ in range(6)],
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 0, "dur": 4.0,
         "args": {"stream": 7}},
    ]}  # fmt: skip
    beside = {"traceEvents": [
        *[_kernel(gemm, 7, 1750.0, regs=168, smem=98304) for _ in range(4)],  # +3 ms a step
        *[_kernel(relu, 7, 110.0, grid=(2048, 1, 1), block=(128, 1, 1)) for _ in range(6)],
        _kernel("ibp_fetch_decode", 13, 3000.0, grid=(33, 1, 1), block=(256, 1, 1), regs=64,
                smem=13312),
        _kernel("ibp_fetch_decode", 13, 3200.0, grid=(33, 1, 1), block=(256, 1, 1), regs=64,
                smem=13312),
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 0, "dur": 4.0,
         "args": {"stream": 7}},
    ]}  # fmt: skip
    a, b = overlap.gpu_activities(alone), overlap.gpu_activities(beside)
    assert len(a) == 11 and len(b) == 13  # the CPU op is no GPU activity
    got = overlap.kernel_summary(a, b, steps, fetches=2, top=2)
    assert got["train_stream"] == 7 and got["fetch_streams"] == [13]
    assert [k["name"] for k in got["kernels"]] == [gemm, relu]  # by added time
    g, r = got["kernels"]
    assert g["calls_per_step_alone"] == 2 and g["calls_per_step_beside"] == 2
    assert g["ms_per_step_alone"] == pytest.approx(2.0)
    assert g["ms_per_step_beside"] == pytest.approx(3.5)
    assert g["added_ms_per_step"] == pytest.approx(1.5)
    assert g["grid_blocks"] == [132] and g["block_threads"] == 384
    assert g["registers_per_thread"] == 168 and g["smem_per_block"] == 98304
    assert r["registers_per_thread"] is None and r["smem_per_block"] is None  # not in its trace
    assert r["added_ms_per_step"] == pytest.approx(0.03) and r["grid_blocks"] == [2048, 4096]
    assert got["kernel_names"] == 3 and got["others"]["names"] == 1  # the memset
    assert got["others"]["added_ms_per_step"] == pytest.approx(0.0)
    assert got["others"]["ms_per_step_alone"] == pytest.approx(0.002)
    assert got["train_ms_per_step"]["alone"] == pytest.approx(2.302)
    assert got["train_ms_per_step"]["beside"] == pytest.approx(3.832)
    fetch = got["fetch_kernels"]
    assert fetch["launches"] == 2 and fetch["ms"] == pytest.approx(6.2)
    assert fetch["ms_per_fetch"] == pytest.approx(3.1) and fetch["names"] == ["ibp_fetch_decode"]
    assert fetch["blocks"] == {"ibp_fetch_decode": "16,384 regs, 13,312 B smem"}
    with pytest.raises(ValueError, match="no GPU kernels"):
        overlap.kernel_summary([], b, steps, 2)
    # Its table under the main one: names shortened, a name's "|" escaped, the others summed.
    prof = {"case": "dense/ibp", "label": "dense ibp, grid default", **got}
    prof |= {"step_ms": {"alone": 2.5, "beside": 4.0}, "steps_covered": 2}
    lines = overlap.profile_markdown(prof)
    assert lines[1].startswith("Kernels of the training stream (dense/ibp): torch.profiler")
    assert "one round of 2 steps alone and one beside 2 fetches" in lines[1]
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    holds = "64,512 regs, 98,304 B smem"  # 384 threads x 168 registers
    assert rows[0] == (
        f"| sm90_xmma_gemm<float\\|tf32> | 132 | 384 | {holds} | 2 | 2.000 | 3.500 | +1.500 |"
    )
    assert rows[1] == "| elementwise_relu | 2048, 4096 | 128 | - | 3 | 0.300 | 0.330 | +0.030 |"
    assert rows[2].startswith("| (1 others) | - | - | - | 0.5 | 0.002 | 0.002 |")
    assert "2.302 ms per step alone, 3.832 beside (+1.530)" in lines[-1]
    assert (
        "2 launches on other streams, 6.200 ms in all (3.100 per fetch); a block holds: "
        in (lines[-1])
    )
    assert lines[-1].endswith("ibp_fetch_decode 16,384 regs, 13,312 B smem.")
    assert overlap.profile_markdown(None) == []
    assert overlap.profile_markdown({"case": "dense/raw", "skipped": "why"}) == [
        "", "Kernels of the training stream (dense/raw): skipped (why).",
    ]  # fmt: skip


def test_a_cpu_run_with_chunkable_stand_in_tables_runs_the_chunked_cases(
    tmp_path: Path, monkeypatch
) -> None:
    seen = []

    class StandIn:  # a table with chunk_rows and max_blocks, fetching on the CPU
        def __init__(self, inner) -> None:
            self.inner, self.max_blocks, self.chunk_rows = inner, None, None

        def __getitem__(self, ids):
            seen.append((id(self), self.max_blocks, self.chunk_rows))
            return overlap.fetch(self.inner, ids)

    real = overlap.make_tables
    made_tables = []

    def make_tables(*args, **kwargs):
        made = real(*args, **kwargs)
        made["tables"] = {k: StandIn(t) for k, t in made["tables"].items()}
        made_tables.extend(made["tables"].values())
        return made

    monkeypatch.setattr(overlap, "make_tables", make_tables)
    argv = ["--device", "cpu", "--nodes", "2000", "--steps", "2", "--rounds", "1"]
    argv += ["--fetch-batches", "2", "--fetches-alone", "2", "--max-fetches", "2"]
    argv += ["--batch-size", "16", "--hidden", "8", "--tables", "dense"]
    argv += ["--chunk-rows", "64", "4096", "--profile-case", "none"]
    argv += ["--workdir", str(tmp_path / "w"), "--out", str(tmp_path)]
    payload = overlap.main(argv)
    got = [(c["table"], c["fetch"], c["chunk_rows"]) for c in payload["cases"]]
    assert got == [
        ("dense", "raw", None), ("dense", "raw", 64), ("dense", "raw", 4096),
        ("dense", "ibp", None), ("dense", "ibp", 64), ("dense", "ibp", 4096),
    ]  # fmt: skip
    assert all(c["grid_cap"] == "default (0.25/SM)" for c in payload["cases"])
    # Each case's fetches ran with its chunk_rows set; the tables were set back after.
    raw, ibp = made_tables
    for table in (raw, ibp):
        chunks = [chunk for who, _, chunk in seen if who == id(table)]
        assert set(chunks) == {None, 64, 4096} and chunks[-1] == 4096
        assert table.chunk_rows is None and table.max_blocks is None
    assert all(blocks is None for _, blocks, _ in seen)
    assert not any("chunk_rows" in n for n in payload["notes"])
    assert payload["profile"] is None and payload["settings"]["chunk_rows"] == [64, 4096]
    md = (tmp_path / "overlap-cpu.md").read_text()
    assert md.count("| default (0.25/SM) | - |") == 2
    assert md.count("| default (0.25/SM) | 64 |") == 2
    assert md.count("| default (0.25/SM) | 4,096 |") == 2
    assert "Kernels of the training stream" not in md


def test_a_profiled_case_runs_its_two_rounds_under_the_profiler(tmp_path: Path, monkeypatch):
    # The plumbing of profile_case on the CPU: the profiler records CPU ops there, counted
    # here as if they were kernels (the thread as their stream); on a GPU, CUDA kernels.
    import torch

    from benchmarks.sampling import power_law_edges
    from ibp_graph.graph import CSRGraph

    argv = ["--device", "cpu", "--nodes", "1000", "--steps", "2", "--fetch-batches", "2"]
    args = overlap.parse_args([*argv, "--batch-size", "16", "--hidden", "8"])
    cpu = torch.device("cpu")
    edges = power_law_edges(1000, 1000 * overlap.EDGES_PER_NODE, 0)
    graph = CSRGraph.from_edge_index(edges, num_nodes=1000)
    made = overlap.make_tables("dense", 1000, cpu, tmp_path)
    work = overlap.make_work(graph, made["tables"]["raw"], args, cpu)
    clock = overlap.Clock(cpu)
    monkeypatch.setattr(overlap, "GPU_CATEGORIES", {"cpu_op"})
    got = overlap.profile_case(clock, work, made["tables"]["raw"], args, None, None, 3, tmp_path)
    assert got["steps"] == 2 and got["fetches"] == 3 and got["steps_covered"] == 0
    assert got["step_ms"]["alone"] > 0 and got["step_ms"]["beside"] > 0
    assert got["train_ms_per_step"]["alone"] > 0 and got["kernel_names"] > 5
    assert any(k["name"].startswith("aten::") for k in got["kernels"])
    assert len(got["kernels"]) == overlap.PROFILE_TOP
    assert not list(tmp_path.glob("overlap-profile-*"))  # the traces are read, then removed

    # A profile that fails is noted in the results; the run goes on without it.
    def broken(*a, **k):
        raise RuntimeError("CUPTI busy")

    monkeypatch.setattr(overlap, "profile_case", broken)
    case = {"table": "dense", "fetch": "ibp", "grid_cap": "default (0.25/SM)"}
    case["train_stream"] = "default"
    out = overlap.run_profile(clock, work, None, args, None, None, {"fetches_per_round": 3}, case)
    assert out == {
        "case": "dense/ibp",
        "label": "dense ibp, grid default (0.25/SM), default training stream",
        "skipped": "the profiler failed: RuntimeError('CUPTI busy')",
    }


def test_a_run_cut_off_leaves_the_cases_it_measured(tmp_path: Path, monkeypatch) -> None:
    argv = ["--device", "cpu", "--nodes", "3000", "--steps", "2", "--rounds", "1"]
    argv += ["--fetch-batches", "2", "--fetches-alone", "2", "--max-fetches", "3"]
    argv += ["--batch-size", "32", "--hidden", "8", "--tables", "dense"]
    argv += ["--workdir", str(tmp_path / "w"), "--out", str(tmp_path)]
    real = overlap.measure_case
    calls = []

    def cut_off_at_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what the stage's time limit (SIGINT) raises
        return real(*args, **kwargs)

    monkeypatch.setattr(overlap, "measure_case", cut_off_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        overlap.main(argv)
    doc = json.loads((tmp_path / "overlap-cpu.json").read_text())
    assert doc["complete"] is False and [c["fetch"] for c in doc["cases"]] == ["raw"]
    assert doc["plot"] is None and len(doc["timelines"]) == 1
    md = (tmp_path / "overlap-cpu.md").read_text()
    assert "**Incomplete run: cut short after 1 cases (or still running).**" in md
    assert md.count("| none (CPU) |") == 1
    monkeypatch.setattr(overlap, "measure_case", real)
    done = overlap.main(argv)
    assert (
        done["complete"] is True and "Incomplete" not in (tmp_path / "overlap-cpu.md").read_text()
    )
