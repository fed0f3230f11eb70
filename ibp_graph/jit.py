"""Numba where it loads: how the package compiles its CPU loops, and whether it can.

The sampler's hops (`ibp_graph.sample_cpu`) and the decoder (`ibp_graph.decode_cpu`) are
compiled this way. Numba is a dependency; where it is missing or fails to load, `available`
is False and the callers run their NumPy or torch versions instead. Where it loads but
cannot compile a loop (a Numba error at its first call), `compiled_call` warns once, makes
`available` False for the rest of the process and tells its caller to run its own version.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeVar

try:
    import numba
except Exception:  # pragma: no cover - depends on the environment
    numba = None

__all__ = ["available", "compiled_call", "jit", "numba"]

R = TypeVar("R")

#: The Numba error that turned the compiled loops off, once one did (`compiled_call`).
_FAILED: list[BaseException] = []


def available() -> bool:
    """Whether compiled loops can run: Numba imported and has not failed to compile one."""
    return numba is not None and not _FAILED


def compiled_call(fn: Callable[..., R], *args: Any, **kwargs: Any) -> tuple[bool, R | None]:
    """``(True, fn(*args, **kwargs))``, or ``(False, None)`` where Numba cannot compile.

    That is, where Numba cannot compile a loop that ``fn`` calls. Such a failure turns the
    compiled loops off from now on (`available` is False), and the first one warns
    (`RuntimeWarning`) that the NumPy and torch versions run instead; the caller then runs its
    own, as where Numba does not load. Any other exception (the loops' own errors, such as a
    corrupt row) is raised.
    """
    try:
        return True, fn(*args, **kwargs)
    except Exception as exc:
        if numba is None or not isinstance(exc, numba.core.errors.NumbaError):
            raise
        _compile_failed(exc)
        return False, None


def _compile_failed(exc: BaseException) -> None:
    """Turn the compiled loops off after ``exc``, warning the first time (`compiled_call`)."""
    if not _FAILED:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        warnings.warn(
            f"Numba {numba.__version__} could not compile ibp-graph's CPU loops "
            f"({type(exc).__name__}: {first}); the decoder and sampler run their NumPy and "
            "torch versions instead, which are slower",
            RuntimeWarning,
            stacklevel=4,
        )
    _FAILED.append(exc)


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
