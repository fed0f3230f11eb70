"""Smoke test of the sampling benchmark (benchmarks/sampling.py) on a tiny graph, on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
