"""benchmarks/ddp_memory.py on the CPU: its dataset, a small real run, its report, bad input."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import ddp_memory
from ibp_graph.datasets import load_dataset
from ibp_graph.distributed import shm

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "benchmarks" / "ddp_memory.py")


def _args(**change) -> argparse.Namespace:
    base = {"nodes": 3000, "features": 40, "density": 0.1, "degree": 4, "train": 600, "ranks": 2}
    return argparse.Namespace(**{**base, **change})


def test_the_synthetic_dataset_loads_as_a_bundled_one(tmp_path) -> None:
    args = _args()
    x_bytes = ddp_memory.write_dataset(tmp_path / "cora.npz", args)
    ds = load_dataset("cora", root=tmp_path)
    assert x_bytes == ds.x.numel() * 4 and tuple(ds.x.shape) == (3000, 40)
    assert ds.num_edges == 3000 * 4 and ds.num_classes == 10
    # in-edges: every node has `degree` of them
    assert torch.equal(torch.bincount(ds.edge_index[1], minlength=3000), torch.full((3000,), 4))
    counts = [int(m.sum()) for m in (ds.train_mask, ds.val_mask, ds.test_mask)]
    assert counts == [600, 500, 500] and not (ds.train_mask & ds.val_mask).any()
    ones = ds.x.sum(1)
    assert set(ds.x.unique().tolist()) == {0.0, 1.0} and 1 <= ones.min() and ones.max() <= 4
    # seeded: the same dataset twice
    (tmp_path / "again").mkdir()
    ddp_memory.write_dataset(tmp_path / "again" / "cora.npz", args)
    again = load_dataset("cora", root=tmp_path / "again")
    assert torch.equal(again.x, ds.x) and torch.equal(again.edge_index, ds.edge_index)


def _earlier(commit: str) -> dict:
    """An earlier results file's content: each rank of both runs with its own peaks."""
    ranks = [
        {
            "rank": r,
            "peak_rss_bytes": (90 + r) << 20,
            "peak_pss_bytes": (60 + r) << 20,
            "epoch_pss_bytes": (50 + r) << 20,
        }
        for r in (0, 1)
    ]
    return {"env": {"git_commit": commit}, "runs": {"IBP": ranks, "raw": ranks[:1]}}


@pytest.mark.slow
@pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="no /dev/shm on this system")
def test_a_small_run_reports_every_rank_of_both_runs_beside_a_baseline(tmp_path) -> None:
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(_earlier("0123abc")))
    small = ["--nodes", "3000", "--features", "40", "--density", "0.1", "--train", "600"]
    cmd = [sys.executable, SCRIPT, *small, "--out", str(tmp_path / "b"), "--baseline", str(earlier)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "b" / f"{ddp_memory.NAME}.json").read_text())
    assert result["x_bytes"] == 3000 * 40 * 4 and result["args"]["ranks"] == 2
    assert result["baseline"] == _earlier("0123abc")
    assert set(result["runs"]) == {"IBP", "raw"}
    for ranks in result["runs"].values():
        assert [r["rank"] for r in ranks] == [0, 1] and all(r["status"] == 0 for r in ranks)
        for r in ranks:
            assert 0 < r["epoch_pss_bytes"] <= r["peak_pss_bytes"] <= r["peak_rss_bytes"]
    page = (tmp_path / "b" / f"{ddp_memory.NAME}.md").read_text()
    assert page.startswith("# Host memory of a data-parallel run, per rank")
    assert "commit" in page and "command: `" in page
    assert "before (0123abc): peak RSS | peak PSS | PSS after the epoch |" in page
    rows = [line for line in page.splitlines() if line.startswith(("| IBP |", "| raw |"))]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| IBP", "0"],
        ["| IBP", "1"],
        ["| raw", "0"],
        ["| raw", "1"],
    ]
    # the earlier peaks stand beside this run's, by rank; a rank it lacks gets dashes
    assert rows[1].endswith("| 91 | 61 | 51 |") and rows[2].endswith("| 90 | 60 | 50 |")
    assert rows[3].endswith("| - | - | - |")
    assert "PSS after the epoch" in page


def test_bad_sizes_are_usage_errors() -> None:
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--nodes", "100"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "--nodes must exceed --train + 1000" in proc.stderr
