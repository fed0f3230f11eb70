"""Building the host harness of the CUDA kernels: g++, the SIMT emulation and the sanitizers.

`build` compiles ``cuda/*.cu`` with g++ and the SIMT emulation (``simt_host.h``, the
``simt_*.cpp`` wrappers) into a shared library, with the sanitizers that
``$IBP_GRAPH_SIMT_SANITIZE`` names (`simt.sanitize`). It imports neither torch nor the package,
so that a process under a sanitizer's runtime (tests/test_kernels_sanitized.py) starts in a
fraction of a second. Used by the tests (the ``lib`` fixture) and the sampling benchmarks.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from simt.sanitize import sanitizer_flags, without_runtimes

HERE = Path(__file__).resolve().parent


class HarnessBuildError(RuntimeError):
    """g++ is missing or cannot build the harness (``unsupported``: no C++20 here)."""

    def __init__(self, message: str, unsupported: bool) -> None:
        super().__init__(message)
        self.unsupported = unsupported


#: Environment variable naming a folder where `build` keeps what it compiles, keyed by the
#: command and every source it reads, for any process to reuse (tests/conftest.py sets it
#: for a test run and its subprocesses); unset, every build compiles.
CACHE_ENV = "IBP_GRAPH_SIMT_CACHE"


def build(
    out: Path, sources: list[Path] | None = None, defines: tuple[str, ...] = ()
) -> ctypes.CDLL:
    """Compile the harness into the shared library ``out`` and load it.

    ``sources``: the ``simt_*.cpp`` files to compile (default: all); ``defines``: macros to
    define (``-D``). Warnings are errors, unless ``$IBP_GRAPH_SIMT_WERROR`` is ``0``: the GPU
    session sets it, since another g++ may warn where this one does not, and there the harness
    is only a reference for the GPU's results. Where ``$IBP_GRAPH_SIMT_CACHE`` names a folder,
    a library built there before with the same command from the same sources is linked to
    ``out`` instead (one process builds it while the others wait).

    Raises:
        HarnessBuildError: no g++, or the sources do not build.
    """
    cxx = shutil.which("g++")
    if cxx is None:
        raise HarnessBuildError("no g++ to build the host harness of the CUDA kernels", True)
    flags = ["-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-Wall"]
    if os.environ.get("IBP_GRAPH_SIMT_WERROR", "1") != "0":
        flags.append("-Werror")
    flags += sanitizer_flags()
    flags += [f"-D{name}" for name in defines]
    files = [str(p) for p in (sources or sorted(HERE.glob("simt_*.cpp")))]
    cmd = [cxx, *flags, "-Wno-unknown-pragmas", *files]
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        _compile(cmd, out)
        return ctypes.CDLL(str(out))
    cached = Path(folder) / f"libsimt-{_key(cmd)}.so"
    cached.parent.mkdir(parents=True, exist_ok=True)
    with open(cached.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cached.exists():
            part = cached.with_name(f"{cached.name}.{os.getpid()}.part")
            _compile(cmd, part)
            os.replace(part, cached)
    out.unlink(missing_ok=True)
    try:
        os.link(cached, out)
    except OSError:  # another file system
        shutil.copyfile(cached, out)
    return ctypes.CDLL(str(out))


def _compile(cmd: list[str], out: Path) -> None:
    done = subprocess.run(
        [*cmd, "-o", str(out)], capture_output=True, text=True, env=without_runtimes()
    )
    if done.returncode != 0:
        old = "c++20" in done.stderr or "atomic_ref" in done.stderr
        raise HarnessBuildError(f"the kernels do not build on the host:\n{done.stderr}", old)


def _key(cmd: list[str]) -> str:
    """What a build depends on: the command, the compiler's file and every source it reads."""
    digest = hashlib.sha256("\0".join(cmd).encode())
    compiler = os.stat(cmd[0])
    digest.update(f"{compiler.st_size}:{compiler.st_mtime_ns}".encode())
    read = sorted([*HERE.glob("simt_*"), *(HERE.parents[1] / "cuda").glob("*.cu")])
    for path in read:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:24]
