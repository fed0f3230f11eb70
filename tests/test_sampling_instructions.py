"""The callgrind count of the sampling benchmark (benchmarks/sampling_instructions.py)."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def load():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(
            "sampling_instructions", REPO / "benchmarks" / "sampling_instructions.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


si = load()


def dump(path: Path, trigger: str, total: int) -> None:
    path.write_text(
        f"version: 1\ncreator: callgrind-3.19.0\npart: 1\ndesc: I1 cache: \n{trigger}\n"
        f"events: Ir\nsummary: 0\nfn=(1) f\n3 {total}\ntotals: {total}\n"
    )


def test_the_measured_dump_is_found_among_the_others(tmp_path: Path) -> None:
    dump(tmp_path / "callgrind.0", "desc: Trigger: Program termination", 12)
    dump(tmp_path / "callgrind.0.1", si.DUMP_TRIGGER, 35_594_009)
    dump(tmp_path / "callgrind.1.1", si.DUMP_TRIGGER, 7)  # another contender's
    assert si.measured_instructions(tmp_path / "callgrind.0") == 35_594_009
    with pytest.raises(ValueError, match="no callgrind dump of the measured batches"):
        si.measured_instructions(tmp_path / "callgrind.2")
    (tmp_path / "callgrind.3").write_text("desc: Trigger: Program termination\ntotals: 5\n")
    with pytest.raises(ValueError, match="callgrind.3"):
        si.measured_instructions(tmp_path / "callgrind.3")


@pytest.mark.skipif(
    not (shutil.which("cc") or shutil.which("gcc")) or not Path("/usr/include/valgrind").is_dir(),
    reason="needs a C compiler and valgrind's headers",
)
def test_the_helper_builds_and_does_nothing_outside_valgrind(tmp_path: Path) -> None:
    lib = ctypes.CDLL(str(si.build_helper(tmp_path)))
    lib.ibp_count_start()
    lib.ibp_count_stop()  # no valgrind: the client requests are no-ops
    assert not list(tmp_path.glob("callgrind.*"))


def test_a_compiler_that_fails_is_named(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CC", "false")
    with pytest.raises(SystemExit, match="false could not build the callgrind helper"):
        si.build_helper(tmp_path)


def test_the_page_sets_every_contender_beside_dgl() -> None:
    payload = {
        "graph": "g", "nodes": 10, "edges": 20, "batch_size": 4, "fanouts": [3, 2],
        "batches": 5, "warmup": 2, "dgl_version": "2.1.0",
        "results": [
            {"contender": "dgl", "instructions": 3_800, "sampled_edges": 10,
             "instructions_per_edge": 380.0},
            {"contender": "ibp-graph once", "instructions": 1_620, "sampled_edges": 10,
             "instructions_per_edge": 162.0},
        ],
    }  # fmt: skip
    env = {"device": "CPU", "date": "d", "git_commit": "c", "command": "x"}
    page = si.markdown(env, payload)
    assert "| dgl | 3,800 | 10 | 380 | 1.00x |" in page
    assert "| ibp-graph once | 1,620 | 10 | 162 | 2.35x |" in page
    assert "(DGL: [2, 3])" in page


@pytest.mark.parametrize("argv", [["--batches", "0"], ["--warmup", "0"]])
def test_bad_counts_are_refused(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit):
        si.parse_args(argv)
    assert "must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_one_contender_is_counted_under_callgrind(tmp_path: Path) -> None:
    """A tiny graph under valgrind (most of the time goes to imports): the count comes back."""
    lib = si.build_helper(tmp_path)
    data = tmp_path / "graph.pt"
    seeds = si.torch.randperm(2000, generator=si.torch.Generator().manual_seed(0))
    si.torch.save(
        {"edge_index": si.power_law_edges(2000, 20_000, 0), "seeds": seeds[:96].view(3, 32)}, data
    )
    args = si.parse_args(
        ["--nodes", "2000", "--batch-size", "32", "--warmup", "2", "--batches", "1"]
    )
    got = si.count("ibp-graph once", args, tmp_path, data, lib)
    assert got["contender"] == "ibp-graph once" and 0 < got["sampled_edges"] <= 32 * (
        15 + 150 + 750
    )
    # One batch of at most 24,000 edges: far more than nothing, far less than the setup.
    assert 10_000 < got["instructions"] < 200_000_000
    assert got["instructions_per_edge"] == got["instructions"] / got["sampled_edges"]
