"""A plain ``import dgl`` works in a user's script, whatever is imported first.

DGL 2.1.0 cannot import its GraphBolt with torch 2.13; ibp-graph's start-up hook
(``ibp_graph_dgl_hook``, run by the ``.pth`` that ``pip install`` puts into site-packages)
stands in for it. Checked in fresh interpreters, and in the wheels ``pip install .`` and
``pip install -e .`` build.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ibp_graph_dgl_hook

ROOT = Path(__file__).resolve().parents[1]

needs_dgl = pytest.mark.skipif(
    importlib.util.find_spec("dgl") is None, reason="DGL (the 'dgl' extra) is not installed"
)


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter of this environment."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )


def graphbolt_loads() -> bool:
    spec = importlib.util.find_spec("dgl")
    return ibp_graph_dgl_hook.graphbolt_loadable(
        Path(next(iter(spec.submodule_search_locations))) / "graphbolt"
    )


@pytest.mark.slow
@needs_dgl
@pytest.mark.parametrize(
    "first", ["import dgl", "import torch_geometric, dgl"], ids=["dgl-first", "pyg-first"]
)
def test_a_plain_import_dgl_works_in_a_fresh_interpreter(first) -> None:
    out = python(
        f"{first}; from dgl.dataloading import DataLoader, NeighborSampler; import sys; "
        "import ibp_graph_dgl_hook as h; "
        "print(dgl.__version__, 'ibp_graph' in sys.modules, "
        "h.is_placeholder(sys.modules['dgl.graphbolt']))"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    version, ours_imported, placeholder = out.stdout.split()
    assert version == "2.1.0"
    assert ours_imported == "False"  # the hook imports nothing of ibp-graph
    assert placeholder == str(not graphbolt_loads())


@pytest.mark.slow
@needs_dgl
def test_the_hook_is_what_makes_it_work() -> None:
    if graphbolt_loads():
        pytest.skip("DGL's GraphBolt loads with this torch: no placeholder is needed")
    out = python("import dgl", IBP_GRAPH_NO_DGL_HOOK="1")
    assert out.returncode != 0 and "graphbolt" in out.stderr


@needs_dgl
def test_the_placeholder_says_why(monkeypatch) -> None:
    import dgl  # noqa: F401 - through the hook (installed at start-up or by the loaders)

    gb = sys.modules["dgl.graphbolt"]
    if not ibp_graph_dgl_hook.is_placeholder(gb):
        pytest.skip("DGL's GraphBolt loads with this torch: no placeholder is needed")
    with pytest.raises(AttributeError, match="dgl.graphbolt.ItemSet: DGL's GraphBolt is not"):
        gb.ItemSet  # noqa: B018


def test_the_finder_answers_only_for_graphbolt() -> None:
    finder = ibp_graph_dgl_hook.GraphboltFinder()
    assert finder.find_spec("dgl", None) is None
    assert finder.find_spec("dgl.graphbolt", None) is None  # no parent path: not DGL's
    assert finder.find_spec("torch.nn", ["/nowhere"]) is None
    assert not ibp_graph_dgl_hook.is_placeholder(sys)


def test_install_is_idempotent_and_can_be_turned_off(monkeypatch) -> None:
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    assert ibp_graph_dgl_hook.install() and ibp_graph_dgl_hook.install()
    assert sum(isinstance(f, ibp_graph_dgl_hook.GraphboltFinder) for f in sys.meta_path) == 1
    monkeypatch.setattr(sys, "meta_path", [])
    monkeypatch.setenv("IBP_GRAPH_NO_DGL_HOOK", "1")
    assert not ibp_graph_dgl_hook.install() and sys.meta_path == []


# --------------------------------------------------------------------------------------------
# The wheels ship the hook
# --------------------------------------------------------------------------------------------

SOURCES = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "ibp_graph_dgl_hook.py",
    "ibp_graph_dgl_hook.pth",
    "ibp_graph",
    "loaders",
    "train",
    "configs",
    "cuda",
)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project's sources (builds write into the project folder)."""
    dest = tmp_path_factory.mktemp("project")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.ibp")
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def build(project: Path, hook: str) -> zipfile.ZipFile:
    """Build a wheel with setuptools' PEP 517 ``hook`` (no isolation: this environment)."""
    out = project / f"dist-{hook}"
    code = f"from setuptools import build_meta as b; print(b.{hook}({str(out)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return zipfile.ZipFile(out / done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("hook", ["build_wheel", "build_editable"])
def test_wheels_put_the_hook_into_site_packages(project, hook) -> None:
    with build(project, hook) as wheel:
        names = set(wheel.namelist())
        assert "ibp_graph_dgl_hook.pth" in names  # at the top: site-packages runs it
        pth = wheel.read("ibp_graph_dgl_hook.pth").decode()
        assert pth.startswith("import ibp_graph_dgl_hook")
        if hook == "build_wheel":
            assert "ibp_graph_dgl_hook.py" in names
            assert "ibp_graph/loaders/dgl_import.py" in names
        else:  # the editable finder maps the module to the checkout
            finder = next(n for n in names if n.endswith("_finder.py"))
            assert "'ibp_graph_dgl_hook'" in wheel.read(finder).decode()
