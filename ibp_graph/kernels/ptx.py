"""Compiling a CUDA source to PTX with NVRTC, and reading the entry points the PTX declares.

This checks the sources where no GPU is at hand (every ``.cu`` compiles, its kernels'
parameters are what the launchers pass) and compares two versions of a kernel file; the
modules that run are built by `runtime`. NVRTC comes with the ``dev`` extra.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .runtime import SIGNATURE_OPTIONS

_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(([^)]*)\)")
_PARAM_NAME = re.compile(r"\s+\w+_param_\d+")


class PTXCompileError(ValueError):
    """A source NVRTC does not compile; ``log`` holds NVRTC's whole log."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


def nvrtc() -> Any:
    """CuPy's NVRTC module, loaded; RuntimeError in one line where it cannot be."""
    try:
        from cupy.cuda import nvrtc as module

        module.getVersion()
    except Exception as exc:  # ImportError, or a CuPy without its NVRTC library
        raise RuntimeError(
            f"NVRTC is not loadable here ({type(exc).__name__}: {exc}); "
            "install the dev extra (nvidia-cuda-nvrtc)"
        ) from None
    return module


def compile_ptx(
    text: str, name: str, arch: str, options: Sequence[str] = SIGNATURE_OPTIONS
) -> tuple[str, str]:
    """The PTX of CUDA source ``text`` (called ``name``) for ``arch``, and NVRTC's log.

    ``options`` defaults to `runtime.SIGNATURE_OPTIONS`, a quick build that is read for its
    entry points. An ``sm_XX`` architecture builds the machine code too (what the GPU would
    load), a ``compute_XX`` one only the PTX. Raises `PTXCompileError` naming ``name``,
    ``arch`` and the log's first line where the source does not compile, RuntimeError where
    NVRTC cannot be loaded.
    """
    lib = nvrtc()
    prog = lib.createProgram(text, name, [], [])
    try:
        lib.compileProgram(prog, [f"--gpu-architecture={arch}", *options])
    except lib.NVRTCError:
        log = lib.getProgramLog(prog).strip()
        first = log.splitlines()[0] if log else "no log"
        raise PTXCompileError(f"{name} does not compile for {arch}: {first}", log) from None
    ptx = lib.getPTX(prog)
    return (ptx.decode() if isinstance(ptx, bytes) else ptx), lib.getProgramLog(prog)


def entry_points(ptx: str) -> dict[str, tuple[str, ...]]:
    """The kernels ``ptx`` declares: entry name -> its parameters' declarations.

    Each declaration is PTX's less the parameter's name, an array's length kept: for example
    ``.param .u64 .ptr .global .align 1`` or ``.param .align 8 .b8[16]``.
    """
    return {
        entry: tuple(
            " ".join(_PARAM_NAME.sub("", p).split()) for p in params.split(",") if p.strip()
        )
        for entry, params in _ENTRY.findall(ptx)
    }
