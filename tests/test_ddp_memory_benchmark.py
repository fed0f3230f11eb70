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


def _ranks(*ranks: int, mib: int = 0) -> list[dict]:
    """Reports of ``ranks``: rank r's peaks are 90 + r + mib, 60 + r + mib, 50 + r + mib MiB."""
    return [
        {
            "rank": r,
            "status": 0,
            "peak_rss_bytes": (90 + r + mib) << 20,
            "peak_pss_bytes": (60 + r + mib) << 20,
            "epoch_pss_bytes": (50 + r + mib) << 20,
        }
        for r in ranks
    ]


def _earlier(commit: str) -> dict:
    """An earlier results file's content: each rank of both runs with its own peaks."""
    return {"env": {"git_commit": commit}, "runs": {"IBP": _ranks(0, 1), "raw": _ranks(0)}}


@pytest.mark.slow
@pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="no /dev/shm on this system")
def test_a_small_run_reports_every_rank_beside_a_baseline(tmp_path) -> None:
    """One run (``--runs IBP``: every process imports torch and PyG, the time this takes)."""
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(_earlier("0123abc")))
    small = ["--nodes", "3000", "--features", "40", "--density", "0.1", "--train", "600"]
    cmd = [sys.executable, SCRIPT, *small, "--runs", "IBP", "--out", str(tmp_path / "b")]
    cmd += ["--baseline", str(earlier)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "b" / f"{ddp_memory.NAME}.json").read_text())
    assert result["x_bytes"] == 3000 * 40 * 4 and result["args"]["ranks"] == 2
    assert result["args"]["runs"] == ["IBP"] and result["baseline"] == _earlier("0123abc")
    (ranks,) = result["runs"].values()
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["status"] == 0 for r in ranks)
    for r in ranks:
        assert 0 < r["epoch_pss_bytes"] <= r["peak_pss_bytes"] <= r["peak_rss_bytes"]
    page = (tmp_path / "b" / f"{ddp_memory.NAME}.md").read_text()
    assert page.startswith("# Host memory of a data-parallel run, per rank")
    assert "commit" in page and "command: `" in page and "--runs IBP" in page
    assert "before (0123abc): peak RSS | peak PSS | PSS after the epoch |" in page
    rows = [line for line in page.splitlines() if line.startswith(("| IBP |", "| raw |"))]
    assert [row.split(" | ")[:2] for row in rows] == [["| IBP", "0"], ["| IBP", "1"]]
    assert rows[1].endswith("| 91 | 61 | 51 |")  # the earlier peaks, beside this run's


def test_the_report_matches_the_baselines_ranks_by_rank() -> None:
    result = {
        "env": {"device": "cpu", "date": "2026-11-29", "git_commit": "4567def", "command": "x"},
        "args": {"nodes": 3000, "features": 40, "density": 0.1, "degree": 4, "ranks": 2},
        "x_bytes": 3000 * 40 * 4,
        "runs": {"IBP": _ranks(0, 1, mib=100), "raw": _ranks(1, 0, mib=200)},
    }
    baseline = _earlier("0123abc")
    baseline["runs"]["raw"] = _ranks(1)  # rank 1 alone, first
    rows = [
        line.split(" | ")
        for line in ddp_memory.report(result, baseline).splitlines()
        if line.startswith(("| IBP |", "| raw |"))
    ]
    assert [row[:2] for row in rows] == [
        ["| IBP", "0"],
        ["| IBP", "1"],
        ["| raw", "1"],
        ["| raw", "0"],
    ]
    assert [row[2:5] for row in rows] == [["190", "160", "150"], ["191", "161", "151"],
                                          ["291", "261", "251"], ["290", "260", "250"]]  # fmt: skip
    # the earlier peaks stand beside this run's, by rank; a rank it lacks gets dashes
    assert [row[5:] for row in rows] == [
        ["90", "60", "50 |"],
        ["91", "61", "51 |"],
        ["91", "61", "51 |"],
        ["-", "-", "- |"],
    ]
    assert "before (0123abc)" in ddp_memory.report(result, baseline)
    assert "before" not in ddp_memory.report(result, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "100"], "--nodes must exceed --train + 1000"),
        (["--ranks", "0"], "--features, --degree, --ranks >= 1"),
        (["--runs", "both"], "argument --runs: invalid choice: 'both' (choose from 'IBP', 'raw')"),
    ],
)
def test_bad_options_are_usage_errors(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        ddp_memory.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_defaults_run_both_in_order() -> None:
    args = ddp_memory.parse_args([])
    assert args.runs == ["IBP", "raw"] and args.ranks == 2 and args.baseline is None
    assert ddp_memory.parse_args(["--runs", "raw", "IBP"]).runs == ["raw", "IBP"]
