"""Build hooks: the CUDA sources and the start-up hook that lets ``import dgl`` work.

``cuda/`` is deliberately not a Python package: a ``cuda/__init__.py`` at the top of a checkout
would shadow NVIDIA's ``cuda`` namespace package (``cuda.pathfinder``, which CuPy imports)
whenever the checkout is on ``sys.path``. Its sources are copied into the built
``ibp_graph/cuda/``.

``ibp_graph_dgl_hook.pth`` goes to the top of site-packages, where Python's ``site`` runs it
at start-up (see ``ibp_graph_dgl_hook.py``), by ``pip install .`` (it is in the wheel) and by
``pip install -e .`` (it is written next to setuptools' own editable ``.pth``).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

ROOT = Path(__file__).resolve().parent
DGL_HOOK_PTH = "ibp_graph_dgl_hook.pth"


class BuildPyWithCuda(build_py):
    """Copy ``cuda/*.cu`` and ``cuda/*.cuh`` into the built ``ibp_graph/cuda/``, and the hook."""

    def run(self) -> None:  # noqa: D102
        super().run()
        target = Path(self.build_lib) / "ibp_graph" / "cuda"
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted(ROOT.joinpath("cuda").glob("*.cu*")):
            shutil.copy2(source, target / source.name)
        shutil.copy2(ROOT / DGL_HOOK_PTH, Path(self.build_lib) / DGL_HOOK_PTH)


class EditableWheelWithHook(editable_wheel):
    """Also put the start-up hook's ``.pth`` into the editable wheel."""

    def _install_namespaces(self, installation_dir, pth_prefix):  # noqa: D102
        super()._install_namespaces(installation_dir, pth_prefix)
        shutil.copy2(ROOT / DGL_HOOK_PTH, Path(installation_dir) / DGL_HOOK_PTH)


setup(cmdclass={"build_py": BuildPyWithCuda, "editable_wheel": EditableWheelWithHook})
