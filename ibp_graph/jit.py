"""Numba where it loads: how the package compiles its CPU loops, and whether it can.

The sampler's hops (`ibp_graph.sample_cpu`) and the decoder (`ibp_graph.decode_cpu`) are
compiled this way. Numba is a dependency; where it is missing or fails to load, `available`
is False and the callers run their NumPy or torch versions instead. Where it loads but
cannot compile a loop (a Numba error at its first call), the caller hands the error to
`compile_failed`, which warns once and makes `available` False for the rest of the process.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

try:
    import numba
except Exception:  # pragma: no cover - depends on the environment
    numba = None

__all__ = ["available", "compile_failed", "jit", "numba"]

#: The Numba error that turned the compiled loops off, once one did (`compile_failed`).
_FAILED: list[BaseException] = []


def available() -> bool:
    """Whether compiled loops can run: Numba imported and has not failed to compile one."""
    return numba is not None and not _FAILED


def compile_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is Numba failing to compile a loop; then the loops are off from now on.

    The first such failure warns (`RuntimeWarning`) that the NumPy and torch versions run
    instead; the caller then runs its own, as where Numba does not load. Any other exception
    (the loops' own errors, such as a corrupt row) is not Numba's: False, and the caller
    raises it.
    """
    if numba is None or not isinstance(exc, numba.core.errors.NumbaError):
        return False
    if not _FAILED:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        warnings.warn(
            f"Numba {numba.__version__} could not compile ibp-graph's CPU loops "
            f"({type(exc).__name__}: {first}); the decoder and sampler run their NumPy and "
            "torch versions instead, which are slower",
            RuntimeWarning,
            stacklevel=3,
        )
    _FAILED.append(exc)
    return True


def jit(**options: Any) -> Callable[[Callable], Callable]:
    """``numba.njit(nogil=True, cache=True, **options)``.

    Uncached where Numba finds no writable cache folder: then each process compiles once.
    """

    def wrap(fn: Callable) -> Callable:
        try:
            return numba.njit(nogil=True, cache=True, **options)(fn)
        except RuntimeError:  # no writable cache location
            return numba.njit(nogil=True, **options)(fn)

    return wrap
