"""Every call in the project matches its callee's signature, GPU-only branches included.

The CUDA branches of the package, the benchmarks and the GPU tests do not run without a GPU,
so a call with a wrong argument in one of them (a keyword-only parameter passed by position,
an unknown keyword) would only show on a GPU machine. mypy checks every call, executed or
not, against the signature it resolves; this test fails on any such error (mypy's
``call-arg``). Other mypy errors are not checked: the code is not annotated for them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is a dev dependency (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["ibp_graph", "loaders", "train", "benchmarks", "tests"]


#: A call with a wrong argument in a branch that never runs without a GPU.
PROBE = """\
import torch


def never_called(path: str) -> None:
    if torch.cuda.is_available():
        from ibp_graph.cuda_table import CudaIBPTable

        CudaIBPTable(path, "cuda")
"""


def call_arg_errors(targets: list[str], cache: Path) -> list[str]:
    """mypy's ``call-arg`` error lines for ``targets`` (files or folders).

    mypy runs in a process of its own: run in this one (``mypy.api``), it leaves millions of
    objects alive, and every later ``gc.collect()`` in this test process takes seconds.
    """
    argv = [sys.executable, "-m", "mypy", "--check-untyped-defs", "--ignore-missing-imports"]
    argv += ["--follow-imports=silent", "--no-error-summary", "--exclude", "tests/simt/"]
    argv += ["--cache-dir", str(cache)]
    done = subprocess.run(argv + targets, cwd=ROOT, capture_output=True, text=True, timeout=900)
    status, stdout = done.returncode, done.stdout
    assert status in (0, 1), f"mypy did not run (exit {status}): {done.stderr or stdout}"
    return [line for line in stdout.splitlines() if line.endswith("[call-arg]")]


def test_every_call_matches_its_callees_signature(tmp_path: Path) -> None:
    """One mypy run (it takes most of a minute) over the project and a probe beside it.

    The probe shows that a wrong call in a branch that never runs here is found; the project
    must have no such call.
    """
    probe = tmp_path / "probe_dead_branch.py"
    probe.write_text(PROBE)
    errors = call_arg_errors([*CHECKED, str(probe)], tmp_path / "cache")
    found = [e for e in errors if e.startswith(f"{probe}:")]
    assert any("CudaIBPTable" in e for e in found), errors
    wrong = [e for e in errors if e not in found]
    assert not wrong, "calls that do not match their callee:\n" + "\n".join(wrong)
