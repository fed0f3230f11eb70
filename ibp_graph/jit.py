"""Numba where it loads: how the package compiles its CPU loops, and whether it can.

The sampler's hops (`ibp_graph.sample_cpu`) and the decoder (`ibp_graph.decode_cpu`) are
compiled this way. Numba is a dependency; where it is missing or fails to load, `available`
is False and the callers run their NumPy or torch versions instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import numba
except Exception:  # pragma: no cover - depends on the environment
    numba = None

__all__ = ["available", "jit", "numba"]


def available() -> bool:
    """Whether Numba imported, so that compiled loops can run."""
    return numba is not None


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
