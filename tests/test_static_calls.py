"""Every call in the project matches its callee's signature, GPU-only branches included.

The CUDA branches of the package, the benchmarks and the GPU tests do not run without a GPU,
so a call with a wrong argument in one of them (a keyword-only parameter passed by position,
an unknown keyword) would only show on a GPU machine. mypy checks every call, executed or
not, against the signature it resolves; this test fails on any such error (mypy's
``call-arg``). Other mypy errors are not checked: the code is not annotated for them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api", reason="mypy is a dev dependency (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["ibp_graph", "loaders", "train", "benchmarks", "tests"]


def mypy_errors(targets: list[str], cache: Path) -> list[str]:
    """mypy's error lines for ``targets`` (paths relative to the project root, or -c CODE)."""
    argv = ["--check-untyped-defs", "--ignore-missing-imports", "--follow-imports=silent"]
    argv += ["--no-error-summary", "--exclude", "tests/simt/", "--cache-dir", str(cache)]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        stdout, stderr, status = api.run(argv + targets)
    assert status in (0, 1), f"mypy did not run (exit {status}): {stderr or stdout}"
    return [line for line in stdout.splitlines() if ": error: " in line]


def test_every_call_matches_its_callees_signature(tmp_path: Path) -> None:
    wrong = [line for line in mypy_errors(CHECKED, tmp_path) if line.endswith("[call-arg]")]
    assert not wrong, "calls that do not match their callee:\n" + "\n".join(wrong)


def test_a_wrong_call_in_a_branch_that_never_runs_is_found(tmp_path: Path) -> None:
    probe = (
        "import torch\n"
        "def never_called(path: str) -> None:\n"
        "    if torch.cuda.is_available():\n"
        "        from ibp_graph.cuda_table import CudaIBPTable\n"
        "        CudaIBPTable(path, 'cuda')\n"
    )
    errors = mypy_errors(["-c", probe], tmp_path)
    assert any("CudaIBPTable" in e and e.endswith("[call-arg]") for e in errors), errors
