"""What `pip install .` ships: every subpackage and every data file the code reads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info < (3, 11):  # pragma: no cover
    pytest.skip("tomllib needs Python 3.11", allow_module_level=True)

import tomllib  # noqa: E402


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_subpackage_is_listed() -> None:
    cfg = _setuptools()
    listed = set(cfg["packages"])
    dirs = cfg["package-dir"]
    found = set()
    for name, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found <= listed, f"not shipped by pip install .: {sorted(found - listed)}"


def test_package_data_covers_what_the_code_reads() -> None:
    data = _setuptools()["package-data"]
    assert any("npz" in p for p in data["ibp_graph"]), "bundled datasets"
    assert any("yaml" in p for p in data["ibp_graph.configs"]), "run configs"
    assert list((ROOT / "ibp_graph" / "data").glob("*.npz"))
    assert list((ROOT / "configs").glob("*.yaml"))
    # the CUDA sources are copied in by setup.py's build hook
    assert "cuda" in (ROOT / "setup.py").read_text() and list((ROOT / "cuda").glob("*.cu"))
