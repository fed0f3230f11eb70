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
    argv += ["--workdir", str(tmp_path / "w"), "--out", str(tmp_path)]
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
    # On the CPU the target does not apply: no verdict. Where it applies, each case's
    # slowdown against at most 1.1: met, its gap in percent of 1.1, or not measured.
    assert "| met |" not in md and "gap" not in md
    redo = json.loads(json.dumps(payload))
    redo["applies"] = True
    for case, slow in zip(redo["cases"], (1.05, 1.1, 1.32, None), strict=True):
        case["slowdown"] = slow
    rows = overlap.markdown(redo, redo).splitlines()
    verdicts = [line.split(" | ")[7] for line in rows if line.startswith(("| dense", "| sparse"))]
    assert verdicts == ["met", "met", "gap 20.0%", "not measured"]
    with pytest.raises(SystemExit):
        overlap.parse_args(["--device", "cpu", "--steps", "0"])
