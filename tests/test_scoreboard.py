"""benchmarks/scoreboard.py: every target's verdict, from results files (no GPU needed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import scoreboard
from benchmarks._targets import check

GPU = "NVIDIA Test GPU 80GB"
SLUG = "nvidia-test-gpu-80gb"


def _write(folder: Path, name: str, payload: dict) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    about = {"gpu": GPU, "pcie": "gen 5 x16", "git_commit": "abc1234", "date": "2026-01-01"}
    path.write_text(json.dumps(about | payload))
    return path


def _fetch_case(name: str, raw: float, *, applies: bool = True) -> dict:
    return {
        "case": name,
        "batch": 1000,
        "targets": {"raw_vs_memcpy": check(raw, 0.85, applies=applies)},
    }


def _rows(board: dict) -> dict[tuple[str, str], dict]:
    return {(r["target"], r["scope"]): r for r in board["gpus"][SLUG]["rows"]}


def _row(board: dict, target_start: str, scope: str) -> dict:
    found = [r for (t, s), r in _rows(board).items() if t.startswith(target_start) and s == scope]
    assert len(found) == 1, (target_start, scope)
    return found[0]


def test_a_missed_case_gives_the_largest_gap_and_names_its_case(tmp_path: Path) -> None:
    cases = [_fetch_case("a", 0.9), _fetch_case("b", 0.5), _fetch_case("c", 0.8)]
    cases.append(_fetch_case("ignored", 0.01, applies=False))  # does not apply: not judged
    _write(tmp_path, f"fetch-{SLUG}.json", {"cases": cases})
    r = _row(
        scoreboard.scoreboard(tmp_path), "raw zero-copy", "the gather kernel, ids in batch order"
    )
    assert r["verdict"] == f"gap {(0.85 - 0.5) / 0.85:.1%}"
    assert r["detail"].startswith("met in 1 of 3; furthest: b x 1,000 0.5 (goal >= 0.85)")
    assert r["source"] == f"[fetch-{SLUG}.json](fetch-{SLUG}.json), abc1234, 2026-01-01"


def test_every_case_met_is_met_and_absent_results_are_not_measured(tmp_path: Path) -> None:
    _write(tmp_path, f"fetch-{SLUG}.json", {"cases": [_fetch_case("a", 0.9), _fetch_case("b", 1)]})
    board = scoreboard.scoreboard(tmp_path)
    r = _row(board, "raw zero-copy", "the gather kernel, ids in batch order")
    assert r["verdict"] == "met" and "closest: a x 1,000 0.9" in r["detail"]
    # the same file without the default-fetch target (older results): nothing measured
    r = _row(board, "raw zero-copy", "as raw tables fetch by default (ids sorted, the sort timed)")
    assert r["verdict"] == "not measured" and r["detail"] == "no case measured"
    # no overlap, e2e or sampling file for this GPU
    r = _row(board, "a GraphSAGE step", "the loaders' fetch settings")
    assert r == {
        "target": r["target"], "scope": "the loaders' fetch settings",
        "verdict": "not measured", "detail": "no results file", "source": "",
    }  # fmt: skip
    assert len(board["gpus"][SLUG]["rows"]) == len(scoreboard.GPU_TARGETS)


def test_kinds_come_from_the_gpu_slug_suffix_and_folder(tmp_path: Path) -> None:
    _write(tmp_path, f"fetch-{SLUG}-grid.json", {"cases": []})
    _write(tmp_path, f"corasu/e2e-{SLUG}.json", {"graphs": []})
    _write(tmp_path, "fetch-other-name.json", {"cases": []})  # its slug is not its gpu's
    (tmp_path / "broken-x.json").write_text("{not json")
    found = scoreboard.gpu_results(tmp_path)
    assert sorted(found[SLUG]) == ["corasu/e2e", "fetch/grid"]


def test_decode_targets_split_dense_from_sparse(tmp_path: Path) -> None:
    def case(name, rate, table_class):
        goal = 400.0 if table_class == "dense" else 1000.0
        return {"case": name, "decode_target": check(rate, goal, table_class=table_class)}

    cases = [case("d", 450, "dense"), case("s1", 1200, "sparse"), case("s2", 700, "sparse")]
    _write(tmp_path, f"decode-ab-{SLUG}.json", {"cases": cases})
    board = scoreboard.scoreboard(tmp_path)
    scope = "current decoder, rows in GPU memory"
    assert _row(board, "decode alone, GB/s of output: >= 400", scope)["verdict"] == "met"
    sparse = _row(board, "decode alone, GB/s of output: >= 1,000", scope)
    assert sparse["verdict"] == "gap 30.0%" and "s2 700" in sparse["detail"]


def test_overlap_default_scope_keeps_the_loaders_settings_only(tmp_path: Path) -> None:
    def case(slowdown, **over):
        c = {"table": "dense", "fetch": "ibp", "grid_cap": "default (0.25/SM)",
             "chunk_rows": None, "block_warps": None, "train_stream": "default"}  # fmt: skip
        return c | over | {"slowdown": slowdown}

    cases = [case(1.2), case(1.05, chunk_rows=4096), case(1.01, train_stream="high priority")]
    _write(tmp_path, f"overlap-{SLUG}.json", {"cases": cases, "plot": "overlap.png"})
    board = scoreboard.scoreboard(tmp_path)
    target = "a GraphSAGE step"
    loaders = _row(board, target, "the loaders' fetch settings")
    assert loaders["verdict"] == "gap 9.1%" and loaders["detail"].startswith("met in 0 of 1")
    assert _row(board, target, "every setting timed")["detail"].startswith("met in 2 of 3")
    chart = _row(board, target, "CUDA event timelines and chart")
    assert (chart["verdict"], chart["detail"]) == ("met", "chart: overlap.png")


def test_e2e_targets_respect_where_they_apply(tmp_path: Path) -> None:
    def graph(name, t_ibp, goal, applies):
        analysis = {"target_check": check(t_ibp, goal, at_least=False), "target_applies": applies}
        analysis["speedup_target_check"] = check(1.9, 1.74)
        analysis["speedup_target_applies"] = applies
        modes = [
            {"mode": "ibp", "pipeline_check": check(1.5, 1.1, at_least=False)},
            {"mode": "ibp-thread", "pipeline_check": check(1.05, 1.1, at_least=False),
             "prefetch_thread": True},
        ]  # fmt: skip
        return {"name": name, "modes": modes, "analysis": analysis}

    small = graph("corasu-small", 5.0, 3.0, False)  # a scaled-down graph: not the target's
    _write(
        tmp_path, f"corasu/e2e-{SLUG}.json", {"graphs": [small, graph("corasu", 2.0, 3.0, True)]}
    )
    board = scoreboard.scoreboard(tmp_path)
    assert _row(board, "epochs at 90%", "CoraSU")["detail"] == (
        "met in 1 of 1; closest: corasu 2 (goal <= 3)"
    )
    assert _row(board, "CoraSU epochs", "CoraSU (ogbn-products-sized)")["verdict"] == "met"
    pipeline = _row(board, "prefetching loader", "CoraSU")  # judged with the prefetch thread
    assert pipeline["verdict"] == "met" and pipeline["detail"].startswith("met in 2 of 2")
    assert (
        "(every configuration: met in 2 of 4; furthest: corasu-small ibp 1.5"
        in (pipeline["detail"])
    )
    assert _row(board, "epoch breakdown chart", "CoraSU")["verdict"] == "not measured"
    small["modes"] = small["modes"][:1]  # no mode with the prefetch thread
    _write(tmp_path, f"corasu/e2e-{SLUG}.json", {"graphs": [small]})
    pipeline = _row(scoreboard.scoreboard(tmp_path), "prefetching loader", "CoraSU")
    assert pipeline["verdict"] == "not measured"
    assert pipeline["detail"].startswith("none in the loaders' default configuration (every")


def test_sampling_verdict_is_the_loaders_configuration_with_every_one_in_the_detail(
    tmp_path: Path,
) -> None:
    def target(applies, value):
        return {"name": "GPU / 1-thread CPU edges/s", "applies": applies} | check(value, 10.0)

    default = "int64, device, kernel, CUDA graph, seeds from the host, groups of 8"
    targets = [target("int64, device, kernel", 5.0), target("int64, device, torch", 7.0),
               target("int64, device, kernel, CUDA graph", 4.0),
               target("int64, device, kernel, seeds from the host, groups of 8", 6.0),
               target(default, 30.0),
               target(default.replace("device", "uva") + ", 32 blocks/SM", 3.0)]  # fmt: skip
    _write(tmp_path, f"sampling-{SLUG}.json", {"targets": targets})
    r = _row(
        scoreboard.scoreboard(tmp_path), "GPU sampler / 1-thread", "hop kernels (loaders' default)"
    )
    # the loaders' default: replayed groups of 8 seeds given from the host, at their grid;
    # the other configurations are in the detail only
    assert r["verdict"] == "met"
    assert f"met in 1 of 1; closest: {default} 30" in r["detail"]
    assert (
        "(every configuration: met in 1 of 6; furthest: int64, uva, kernel, CUDA graph"
        in (r["detail"])
    )


def test_cli_writes_both_pages_and_json_has_no_nan(tmp_path: Path, capsys) -> None:
    _write(tmp_path, f"fetch-{SLUG}.json", {"cases": [_fetch_case("a", math.inf)]})
    out = tmp_path / "out"
    assert scoreboard.main(["--results", str(tmp_path), "--out", str(out)]) == 0
    board = json.loads((out / "targets.json").read_text())  # strict JSON: no NaN / Infinity
    assert board["gpus"][SLUG]["device"] == f"{GPU}, PCIe gen 5 x16"
    page = (out / "targets.md").read_text()
    assert f"## {GPU}, PCIe gen 5 x16" in page and "## CPU" in page
    assert "1 GPU(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        scoreboard.main(["--results", str(tmp_path / "missing")])
    assert exc.value.code == 2 and "not a folder" in capsys.readouterr().err


def test_no_gpu_results_say_so(tmp_path: Path) -> None:
    page = scoreboard.markdown(scoreboard.scoreboard(tmp_path))
    assert "No GPU results are present" in page
    assert "| CPU sampler / DGL 2.1.0's" in page and "no results file" in page


def test_the_committed_scoreboard_matches_the_committed_results(tmp_path: Path) -> None:
    results = scoreboard.RESULTS
    if not (results / "targets.md").exists():
        pytest.skip("no committed targets.md")
    assert scoreboard.main(["--out", str(tmp_path)]) == 0
    for name in ("targets.md", "targets.json"):
        assert (tmp_path / name).read_text() == (results / name).read_text(), (
            f"benchmarks/results/{name} is stale: run python benchmarks/scoreboard.py"
        )


def test_freshness_lists_absent_results_first_then_the_oldest(tmp_path: Path) -> None:
    _write(tmp_path, f"fetch-{SLUG}.json", {"cases": [], "date": "2026-01-02 10:00 UTC"})
    _write(tmp_path, f"overlap-{SLUG}.json", {"cases": [], "date": "2026-01-01 09:00 UTC"})
    board = scoreboard.scoreboard(tmp_path)
    fresh = board["gpus"][SLUG]["results"]
    kinds = [e["kind"] for e in fresh]
    assert kinds[-2:] == ["overlap", "fetch"]  # present, oldest first, after every absent kind
    assert set(kinds) == set(scoreboard.SESSION_STAGES) and len(kinds) == len(set(kinds))
    assert fresh[-1] == {"kind": "fetch", "stage": "fetch", "file": f"fetch-{SLUG}.json",
                         "commit": "abc1234", "date": "2026-01-02 10:00 UTC"}  # fmt: skip
    page = scoreboard.markdown(board)
    assert "| corasu/e2e: none | - | - | `corasu` |" in page


def test_every_session_stage_named_is_one_of_the_script() -> None:
    script = (Path(scoreboard.__file__).parent / "gpu_session.sh").read_text()
    stages = script.split("\nALL_STAGES=(", 1)[1].split(")", 1)[0].split()
    assert set(scoreboard.SESSION_STAGES.values()) <= set(stages)
    kinds = {k for _, _, k, _ in scoreboard.GPU_TARGETS}
    assert kinds == set(scoreboard.SESSION_STAGES)
