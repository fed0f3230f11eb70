"""Smoke test of the sampling benchmark (benchmarks/sampling.py) on a tiny graph, on the CPU."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def run(*argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "benchmarks" / "sampling.py"), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)


def test_sampling_benchmark_writes_its_results(tmp_path: Path) -> None:
    done = run(
        "--nodes", "5000", "--edges", "60000", "--batch-size", "256", "--batches", "2",
        "--warmup", "1", "--device", "cpu", "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Not sampling-cpu.*: those are --compare-dgl's results.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sampling-cpu-alone.json", "sampling-cpu-alone.md",
    ]  # fmt: skip
    payload = json.loads((tmp_path / "sampling-cpu-alone.json").read_text())
    assert payload["graph"]["num_nodes"] == 5000 and payload["graph"]["num_edges"] == 60000
    assert payload["backends"] == ["torch"] and payload["graph_memory"] == ["host"]
    rows = payload["results"]
    assert [r["indices"] for r in rows] == ["int64", "int32"]
    for r in rows:
        assert r["backend"] == "torch" and r["graph_memory"] == "host"
        assert r["batches"] == 2 and r["median_edges_per_s"] > 0
        # fanouts [15, 10, 5] from 256 seeds: at most 256 * (15 + 150 + 750) edges
        assert 0 < r["mean_sampled_edges"] <= 256 * (15 + 15 * 10 + 15 * 10 * 5)
    # Both index widths sample the same batches.
    assert rows[0]["mean_sampled_edges"] == rows[1]["mean_sampled_edges"]
    md = (tmp_path / "sampling-cpu-alone.md").read_text()
    assert "| int64 | host | torch |" in md
    # A CPU run measures no target: every one reads "not measured", none met or missed.
    assert payload["targets"] and all(t["met"] is None for t in payload["targets"])
    assert "## Targets" in md and "| not measured |" in md
    assert "| met |" not in md and "gap" not in md
    # Where each row's time goes: host ops and Python functions (no GPU here), in a table each.
    for r in rows:
        split = r["time_split"]
        assert split["calls"] == 2 and split["gpu_busy_s"] is None and split["kernels"] == []
        assert split["host_ops"] and split["python"] and r["hop_grid"] is None
    assert "## Where a batch's time goes" in md
    assert md.count("| # | GPU kernel or copy | torch op, own host time |") == 2
    assert "int64, host, torch (per call, 2 calls profiled" in md


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--graph-memory", "gpu"], "--graph-memory: expected device, uva"),
        (["--device", "cpu", "--backend", "kernel"], "--backend kernel needs --device cuda"),
        (
            ["--hop-grids", "default,0"],
            "each grid is 'default' or a positive number of blocks per SM, got '0'",
        ),
        (["--backend", "numba"], "expected a comma-separated list of torch, kernel"),
        (["--compare-dgl", "--device", "cuda"], "--compare-dgl times CPU samplers"),
    ],
)
def test_sampling_benchmark_rejects_bad_options(bench, capsys, argv, said) -> None:
    with pytest.raises(SystemExit) as done:
        bench.parse_args(argv)
    assert done.value.code == 2 and said in capsys.readouterr().err


def test_a_usage_error_exits_2_from_the_command_line() -> None:
    done = run("--graph-memory", "gpu")
    assert done.returncode == 2 and "--graph-memory: expected device, uva" in done.stderr


def test_sampling_benchmark_compares_with_dgl(tmp_path: Path) -> None:
    try:
        importlib.import_module("ibp_graph.loaders.dgl")  # first: it makes dgl importable
        importlib.import_module("dgl")
    except ImportError:
        pytest.skip("--compare-dgl needs DGL")
    done = run(
        "--compare-dgl", "--nodes", "3000", "--edges", "40000", "--batch-size", "64",
        "--batches", "2", "--warmup", "1", "--threads", "1,2", "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads((tmp_path / "sampling-cpu.json").read_text())
    assert payload["mode"] == "compare-dgl" and payload["dgl_version"]
    assert [r["threads"] for r in payload["runs"]] == [1, 2]
    for run_ in payload["runs"]:
        rows = {r["contender"]: r for r in run_["results"]}
        assert list(rows) == [
            "dgl", "ibp-graph once", "ibp-graph per_hop", "ibp-graph once, torch ops",
        ]  # fmt: skip
        assert rows["dgl"]["ratio_to_dgl"] == 1.0
        for r in rows.values():
            assert r["median_edges_per_s"] > 0 and r["mean_sampled_edges"] > 0
        # Per-hop draws (DGL's semantics) sample more edges than draws once per node.
        assert (
            rows["ibp-graph per_hop"]["mean_sampled_edges"]
            > (rows["ibp-graph once"]["mean_sampled_edges"])
        )
    md = (tmp_path / "sampling-cpu.md").read_text()
    assert "torch.set_num_threads(2)" in md and "| ibp-graph per_hop |" in md
    assert payload["dgl_is_2_1_0"] == payload["dgl_version"].startswith("2.1.0")
    targets = payload["targets"]
    assert [t["threads"] for t in targets] == [1, 2]
    for t, run_ in zip(targets, payload["runs"], strict=True):
        ours = next(r for r in run_["results"] if r["contender"] == "ibp-graph once")
        assert t["value"] == ours["ratio_to_dgl"] and t["met"] == (ours["ratio_to_dgl"] >= 1)
    assert "## Targets" in md and "| ibp-graph once / DGL edges/s | 2 thread(s) |" in md


@pytest.fixture(scope="module")
def bench():
    """benchmarks/sampling.py as a module."""
    spec = importlib.util.spec_from_file_location("sampling_bench", REPO / "benchmarks/sampling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hop_grids_are_parsed(bench) -> None:
    assert bench.parse_hop_grids("default") == [None]
    assert bench.parse_hop_grids("default, 32") == [None, 32.0]
    assert bench.parse_hop_grids("0.5,4") == [0.5, 4.0]
    for bad, message in (
        ("x", "got 'x'"),
        ("-1", "got '-1'"),
        ("", "got ''"),
        ("4,default,4", "each grid once"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            bench.parse_hop_grids(bad)


def test_a_hop_grid_reaches_the_hop_kernels(bench, lib, monkeypatch) -> None:
    import torch
    from simt.host_hops import HostHopKernels

    from ibp_graph.graph import CSRGraph

    made = []

    def kernels(device, max_blocks=None):
        made.append((device, max_blocks))
        return HostHopKernels(lib)

    monkeypatch.setattr(bench, "CudaHopKernels", kernels)
    args = argparse.Namespace(
        nodes=3000, batch_size=64, batches=2, warmup=1, seed=0, fanouts=[4, 3]
    )
    graph = CSRGraph.from_edge_index(bench.power_law_edges(args.nodes, 30000, seed=0), args.nodes)
    default = bench.measure(graph, args, "int64", "torch", "host")
    assert made == [] and default["hop_grid"] is None and default["host_seeds"] is False
    row = bench.measure(graph, args, "int64", "torch", "host", hop_grid=3.0)
    # grid_cap: 3 blocks per SM of a device with one SM (off CUDA).
    assert made == [(torch.device("cpu"), 3)] and row["hop_grid"] == 3.0
    # draw, flags, emit per hop; the packs of the outputs (nodes, edges)
    assert row["kernel_launches_per_batch"] == 6 + 2
    python = [e["name"] for e in row["time_split"]["python"]]
    assert row["median_edges_per_s"] > 0 and python
    assert bench.backend_label(row) == "torch, 3 blocks/SM"
    assert bench.backend_label(default) == "torch"


def test_cuda_graph_adds_one_kernel_row_and_host_seeds_two_more(bench) -> None:
    argv = ["--device", "cuda", "--hop-grids", "default,32", "--cuda-graph"]
    args = bench.parse_args(argv)
    eager, grid, replay = (None, False, False, 1), (32.0, False, False, 1), (None, True, False, 1)
    assert bench.variants("kernel", args) == [eager, grid, replay]
    assert bench.variants("torch", args) == [eager]
    plain = bench.parse_args(["--device", "cuda"])
    assert plain.cuda_graph is False and plain.host_seeds is False
    assert bench.variants("kernel", plain) == [eager]
    # --host-seeds: the default grid again, eager and replayed, with the seeds on the host
    both = bench.parse_args([*argv, "--host-seeds"])
    host = [(None, False, True, 1), (None, True, True, 1)]
    assert bench.variants("kernel", both) == [eager, grid, replay, *host]
    assert bench.variants("torch", both) == [eager]
    alone = bench.parse_args(["--device", "cuda", "--host-seeds"])
    assert bench.variants("kernel", alone) == [eager, (None, False, True, 1)]
    # --group K: the seeds from the host again, K batches a call
    groups = bench.parse_args([*argv, "--group", "8"])
    grouped = [(None, False, True, 8), (None, True, True, 8)]
    assert bench.variants("kernel", groups) == [eager, grid, replay, *grouped]
    assert bench.variants("torch", groups) == [eager]
    assert bench.parse_args(["--device", "cuda"]).group == 1
    with pytest.raises(SystemExit):
        bench.parse_args(["--device", "cuda", "--group", "0"])
    row = {"backend": "kernel", "hop_grid": None, "cuda_graph": True}
    assert bench.backend_label(row) == "kernel, CUDA graph"
    # The old UVA layout runs beside the default, at the loaders' default variant only.
    session = bench.parse_args(
        [*argv, "--host-seeds", "--group", "8", "--graph-memory", "device,uva,uva-separate"]
    )
    assert session.graph_memory == ["device", "uva", "uva-separate"]
    for memory in ("device", "uva"):
        assert bench.placed_variants(memory, "kernel", session) == bench.variants("kernel", session)
    assert bench.placed_variants("uva-separate", "kernel", session) == [(None, True, True, 8)]
    assert bench.placed_variants("uva-separate", "torch", session) == []
    assert bench.placed_variants("device-pairs", "kernel", session) == [(None, True, True, 8)]
    assert bench.backend_label({**row, "cuda_graph": False}) == "kernel"
    label = bench.backend_label({**row, "host_seeds": True})
    assert label == "kernel, CUDA graph, seeds from the host"
    label = bench.backend_label({**row, "host_seeds": True, "group": 8})
    assert label == "kernel, CUDA graph, seeds from the host, groups of 8"


def test_a_group_call_is_timed_per_batch(bench, monkeypatch) -> None:
    """A call of ``group`` batches counts as ``group`` batches of a ``group``-th of its time,
    CPU time and the group's mean edges and nodes (a clock ticking 1 s a reading, CPU time
    0.5 s)."""

    class Batch:
        def __init__(self, edges: int) -> None:
            self.num_edges, self.num_nodes = edges, edges + 1

    class Sampler:
        graph = argparse.Namespace(device=torch.device("cpu"))

        def sample(self, seeds):
            return Batch(10)

        def sample_batches(self, rows, batch_seeds):
            assert len(rows) == len(batch_seeds)
            return [Batch(10 * s) for s in batch_seeds]

    def ticking(step: float):
        readings = iter(range(10**6))
        return lambda: step * next(readings)

    for group, want in ((1, [1.0] * 6), (3, [1 / 3])):
        clock = argparse.Namespace(perf_counter=ticking(1.0), thread_time=ticking(0.5))
        monkeypatch.setattr(bench, "time", clock)
        out = bench.timed_batches(Sampler(), torch.arange(7).view(7, 1), warmup=1, group=group)
        assert out["times"] == pytest.approx(want)
        assert out["host"] == pytest.approx([0.5 / group] * len(want))
        # group 3: the measured call is batches 3, 4 and 5 (30, 40 and 50 edges): 40 a batch
        assert out["edges"] == pytest.approx([10.0] * 6 if group == 1 else [40.0])
        assert out["nodes"] == pytest.approx([e + 1 for e in out["edges"]])


def test_a_group_row_is_per_batch(bench, lib, monkeypatch) -> None:
    from simt.host_hops import HostHopKernels

    from ibp_graph.graph import CSRGraph

    monkeypatch.setattr(
        bench, "CudaHopKernels", lambda device, max_blocks=None: HostHopKernels(lib)
    )
    args = argparse.Namespace(
        nodes=3000, batch_size=64, batches=5, warmup=1, seed=0, fanouts=[4, 3]
    )
    graph = CSRGraph.from_edge_index(bench.power_law_edges(args.nodes, 30000, seed=0), args.nodes)
    one = bench.measure(graph, args, "int64", "torch", "host", 3.0, host_seeds=True)
    row = bench.measure(graph, args, "int64", "torch", "host", 3.0, host_seeds=True, group=3)
    assert row["group"] == 3 and one["group"] == 1
    # draw, flags, emit per hop; the packs of the outputs (nodes, edges)
    assert one["kernel_launches_per_batch"] == 6 + 2
    # and, for 2 batches of each 3, a clear of each of their 3 node buffers; two packs a call
    assert row["kernel_launches_per_batch"] == round(6 + 3 * 2 / 3 + 2 / 3, 2)
    assert row["host_reads_per_batch"] == round(2 / 3, 2) and one["host_reads_per_batch"] == 2
    # 5 batches, in whole groups: two calls of 3 after the warm-up call, figures per batch
    assert row["batches"] == 6 and one["batches"] == 5
    assert row["median_batch_s"] > 0 and one["median_batch_s"] > 0  # per batch: the next test
    assert row["mean_sampled_edges"] == pytest.approx(one["mean_sampled_edges"], rel=0.3)
    assert row["time_split"]["calls"] == 1 and row["time_split"]["python"]
    assert bench.backend_label(row) == "torch, 3 blocks/SM, seeds from the host, groups of 3"
    graph_info = {"kind": "power law", "num_nodes": 3000, "num_edges": 30000,
                  "max_in_degree": 1, "isolated_in": 0, "generate_s": 0.1}  # fmt: skip
    payload = {
        "graph": graph_info, "load_average_before_after": [0.0, 0.0], "sample_device": "cuda",
        "batch_size": 64, "fanouts": [4, 3], "batches": 5, "warmup": 1, "torch_threads": 1,
        "peak_rss_gib": 0.1, "cpu_baseline": None, "targets": [],
        "results": [{"csr_build_s": 0.0, **one}, {"csr_build_s": 0.0, **row}],
    }  # fmt: skip
    md = bench.markdown(bench.environment(), payload)
    assert "| torch, 3 blocks/SM, seeds from the host, groups of 3 |" in md
    assert "Groups of K: each call of `NeighborSampler.sample_batches` samples K batches" in md


def test_thread_counts_are_parsed(bench) -> None:
    assert bench.parse_threads("1,2") == [1, 2] and bench.parse_threads("4") == [4]
    for bad in ("0", "1,x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="expected thread counts like 1,2"):
            bench.parse_threads(bad)


def row(
    indices: str, memory: str, backend: str, edges_per_s: float, host_over_gpu=None, grid=None
) -> dict:
    """A made-up result row: only the keys the targets read."""
    return {
        "indices": indices,
        "graph_memory": memory,
        "backend": backend,
        "hop_grid": grid,
        "median_edges_per_s": edges_per_s,
        "host_over_gpu_busy": host_over_gpu,
    }


def by_target(targets: list[dict]) -> dict:
    return {(t["name"], t["applies"]): t for t in targets}


def test_gpu_targets_verdicts(bench) -> None:
    rows = [
        row("int64", "device", "torch", 30e6, 0.1),
        row("int64", "device", "kernel", 20e6, 0.2),
        row("int64", "uva", "torch", 15e6, 0.25),
        row("int64", "uva", "kernel", 9e6, None),
        row("int32", "uva", "kernel", 8e6, 0.05),  # no int32 device row: no UVA/device pair
    ]
    targets = bench.gpu_targets(rows, {"median_edges_per_s": 2.5e6})
    t = by_target(targets)
    cpu = "GPU / 1-thread CPU edges/s"
    assert [k[1] for k in t if k[0] == cpu] == ["int64, device, torch", "int64, device, kernel"]
    met = t[cpu, "int64, device, torch"]
    assert met["value"] == pytest.approx(12.0) and met["met"] is True and met["gap"] == 0.0
    assert met["cpu1_edges_per_s"] == 2.5e6 and met["gpu_edges_per_s"] == 30e6
    gap = t[cpu, "int64, device, kernel"]
    assert gap["value"] == pytest.approx(8.0) and gap["met"] is False
    assert gap["gap"] == pytest.approx(0.2) and gap["comparison"] == ">="
    uva = "UVA / device graph edges/s"
    assert [k for k in t if k[0] == uva] == [(uva, "int64, torch"), (uva, "int64, kernel")]
    assert t[uva, "int64, torch"]["value"] == pytest.approx(0.5) and t[uva, "int64, torch"]["met"]
    slow = t[uva, "int64, kernel"]
    assert slow["value"] == pytest.approx(0.45) and slow["met"] is False
    assert slow["gap"] == pytest.approx(0.1)
    host = "host CPU / GPU busy time per batch"
    assert t[host, "int64, device, torch"]["met"] is True
    assert t[host, "int64, device, kernel"]["met"] is True  # 0.2: at the goal
    over = t[host, "int64, uva, torch"]
    assert over["met"] is False and over["gap"] == pytest.approx(0.25)
    assert over["comparison"] == "<="
    unmeasured = t[host, "int64, uva, kernel"]
    assert unmeasured["value"] is None and unmeasured["met"] is None
    assert unmeasured["gap"] is None
    for target in targets:
        assert {"name", "applies", "value", "goal", "comparison", "met", "gap"} <= set(target)
        assert "gap_pct" not in target
    md = "\n".join(bench.targets_markdown(targets))
    assert "| GPU / 1-thread CPU edges/s | int64, device, torch | 12.00x | >= 10x | met |" in md
    assert "| int64, device, kernel | 8.00x | >= 10x | gap 20.0% |" in md
    assert "| UVA / device graph edges/s | int64, kernel | 0.45x | >= 0.5x | gap 10.0% |" in md
    assert "| int64, uva, torch | 0.25x | <= 0.2x | gap 25.0% |" in md
    assert "| int64, uva, kernel | - | <= 0.2x | not measured |" in md


def test_gpu_targets_pair_rows_of_the_same_hop_grid(bench) -> None:
    rows = [
        row("int64", "device", "kernel", 40e6, 0.1),
        row("int64", "device", "kernel", 80e6, 0.1, grid=32.0),
        row("int64", "uva", "kernel", 30e6, 0.1),
        row("int64", "uva", "kernel", 20e6, 0.1, grid=32.0),
    ]
    t = by_target(bench.gpu_targets(rows, {"median_edges_per_s": 5e6}))
    cpu = "GPU / 1-thread CPU edges/s"
    assert t[cpu, "int64, device, kernel"]["value"] == pytest.approx(8.0)
    assert t[cpu, "int64, device, kernel, 32 blocks/SM"]["value"] == pytest.approx(16.0)
    uva = "UVA / device graph edges/s"
    assert t[uva, "int64, kernel"]["value"] == pytest.approx(0.75)
    assert t[uva, "int64, kernel, 32 blocks/SM"]["value"] == pytest.approx(0.25)


def test_gpu_targets_without_measurements_read_not_measured(bench) -> None:
    rows = [row("int64", "device", "torch", 30e6, 0.1)]
    for cpu1 in (None, {"threads": 1, "error": "RuntimeError()"}):
        t = by_target(bench.gpu_targets(rows, cpu1))
        ratio = t["GPU / 1-thread CPU edges/s", "int64, device, torch"]
        assert ratio["value"] is None and ratio["met"] is None and ratio["gap"] is None
        assert bench.verdict(ratio) == "not measured"
    # No rows at all (or only host rows): one not-measured entry per target.
    for rows in ([], [row("int64", "host", "torch", 5e6)]):
        targets = bench.gpu_targets(rows, {"median_edges_per_s": 2.5e6})
        assert len(targets) == 3 and all(t["met"] is None for t in targets)
        assert all(bench.verdict(t) == "not measured" for t in targets)


def test_dgl_targets(bench) -> None:
    def run_(threads: int, ratio: float) -> dict:
        results = [
            {"contender": "dgl", "ratio_to_dgl": 1.0},
            {"contender": "ibp-graph once", "ratio_to_dgl": ratio},
            {"contender": "ibp-graph per_hop", "ratio_to_dgl": 9.0},
        ]
        return {"threads": threads, "results": results}

    targets = bench.dgl_targets([run_(1, 1.25), run_(2, 0.8)], "2.1.0+cu121")
    assert [(t["threads"], t["met"]) for t in targets] == [(1, True), (2, False)]
    assert targets[0]["gap"] == 0.0 and targets[1]["gap"] == pytest.approx(0.2)
    assert bench.verdict(targets[1]) == "gap 20.0%"
    assert all(t["dgl_version"] == "2.1.0+cu121" and t["dgl_is_2_1_0"] for t in targets)
    # Only 4 threads ran: 1 and 2 read not measured; another DGL is recorded as such.
    targets = bench.dgl_targets([run_(4, 1.5)], "2.2.1")
    assert [(t["threads"], t["met"]) for t in targets] == [(1, None), (2, None), (4, True)]
    assert not any(t["dgl_is_2_1_0"] for t in targets)
    assert bench.dgl_target_version("2.1.0") and not bench.dgl_target_version(None)


def test_cpu_baseline_runs_on_one_thread(bench) -> None:
    import torch

    from ibp_graph import sample_cpu
    from ibp_graph.graph import CSRGraph

    args = argparse.Namespace(
        nodes=2000, batch_size=64, batches=12, warmup=3, seed=0, fanouts=[15, 10, 5]
    )
    edge_index = bench.power_law_edges(args.nodes, 20000, seed=0)
    graph = CSRGraph.from_edge_index(edge_index, args.nodes)
    threads = torch.get_num_threads()
    result = bench.run_cpu_baseline(graph, args)
    assert torch.get_num_threads() == threads  # restored
    assert "error" not in result, result
    assert result["threads"] == 1 and result["indices"] == "int64"
    assert result["batches"] == 10 and result["warmup"] == 2  # min(batches, 10), min(warmup, 2)
    assert result["compiled_hop"] == sample_cpu.available()
    assert result["median_edges_per_s"] > 0 and result["mean_sampled_edges"] > 0
    # The same seed batches as the GPU rows' first measured ones, and set_num_threads(1) inside.
    seen = []
    seeds = bench.seed_batches(args.nodes, args)

    class Spy(bench.NeighborSampler):
        def sample(self, s, input_id=None):
            seen.append((s.clone(), torch.get_num_threads()))
            return super().sample(s, input_id)

    original = bench.NeighborSampler
    bench.NeighborSampler = Spy
    try:
        bench.run_cpu_baseline(graph, args)
    finally:
        bench.NeighborSampler = original
    assert len(seen) == 12 and all(n == 1 for _, n in seen)
    assert all(torch.equal(s, seeds[1 + i]) for i, (s, _) in enumerate(seen))


def test_contenders_are_built_by_name(bench) -> None:
    """Only the named samplers are built (DGL imported for ``"dgl"`` alone), in that order."""
    args = argparse.Namespace(nodes=500, fanouts=[3, 2], seed=0)
    edge_index = bench.power_law_edges(500, 4000, seed=0)
    names = ["ibp-graph once, torch ops", "ibp-graph once"]
    built = bench.contenders(edge_index, args, names)
    assert list(built) == names
    seeds = torch.arange(16)
    assert all(0 < sample(seeds) <= 16 * (3 + 3 * 2) for sample in built.values())
    assert list(bench.CONTENDERS)[0] == "dgl"
    with pytest.raises(ValueError, match="no contender 'numba'; they are dgl, "):
        bench.contenders(edge_index, args, ["numba"])
