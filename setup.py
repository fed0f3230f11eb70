"""Build hook: ship the CUDA sources of ``cuda/`` inside the package as ``ibp_graph/cuda/``.

``cuda/`` is deliberately not a Python package: a ``cuda/__init__.py`` at the top of a checkout
would shadow NVIDIA's ``cuda`` namespace package (``cuda.pathfinder``, which CuPy imports)
whenever the checkout is on ``sys.path``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithCuda(build_py):
    """Copy ``cuda/*.cu`` and ``cuda/*.cuh`` into the built ``ibp_graph/cuda/``."""

    def run(self) -> None:  # noqa: D102
        super().run()
        target = Path(self.build_lib) / "ibp_graph" / "cuda"
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted(Path(__file__).resolve().parent.joinpath("cuda").glob("*.cu*")):
            shutil.copy2(source, target / source.name)


setup(cmdclass={"build_py": BuildPyWithCuda})
