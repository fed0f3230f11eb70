"""Smoke test of the sampling benchmark (benchmarks/sampling.py) on a tiny graph, on the CPU."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

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
    payload = json.loads((tmp_path / "sampling-cpu.json").read_text())
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
    md = (tmp_path / "sampling-cpu.md").read_text()
    assert "| int64 | host | torch |" in md


def test_sampling_benchmark_rejects_bad_options() -> None:
    done = run("--graph-memory", "gpu")
    assert done.returncode == 2 and "--graph-memory: expected device, uva" in done.stderr
    done = run("--device", "cpu", "--backend", "kernel")
    assert done.returncode == 2 and "--backend kernel needs --device cuda" in done.stderr
    done = run("--backend", "numba")
    assert (
        done.returncode == 2 and "expected a comma-separated list of torch, kernel" in done.stderr
    )


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


def test_compare_dgl_rejects_gpu_options() -> None:
    done = run("--compare-dgl", "--device", "cuda")
    assert done.returncode == 2 and "--compare-dgl times CPU samplers" in done.stderr


def test_thread_counts_are_parsed() -> None:
    spec = importlib.util.spec_from_file_location("sampling_bench", REPO / "benchmarks/sampling.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.parse_threads("1,2") == [1, 2] and bench.parse_threads("4") == [4]
    for bad in ("0", "1,x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="expected thread counts like 1,2"):
            bench.parse_threads(bad)
