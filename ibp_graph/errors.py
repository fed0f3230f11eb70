"""Exceptions raised by ibp-graph.

Every exception raised on purpose by the package derives from :class:`IBPError`, so callers can
catch all of them at once. The two concrete kinds also derive from :class:`ValueError`, which keeps
``except ValueError`` working for code that does not know about ibp-graph. `check_bool` and
`check_choice` are the one check of a flag argument and of a named choice that every layer
shares, so each kind of mistake is reported in one format; `as_int` is the one reading of an
integer argument (a NumPy integer or a 0-d integer tensor counts).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np
import torch

__all__ = [
    "IBPDeviceError",
    "IBPError",
    "IBPFormatError",
    "IBPIndexError",
    "IBPInputError",
    "Terminated",
    "as_int",
    "check_bool",
    "check_choice",
]


class IBPError(Exception):
    """Base class of all errors raised by ibp-graph."""


class IBPFormatError(IBPError, ValueError):
    """An ``.ibp`` file is missing, malformed, truncated, corrupt or from a newer version.

    The message always starts with the file path followed by ``": "``, then names the field or
    section that is wrong, e.g. ``"x.ibp: section 'rows' ends at byte 9120, file has 8192 bytes"``.
    """


class IBPInputError(IBPError, ValueError):
    """A caller passed an invalid argument (wrong dtype, shape, index, section name, ...)."""


class IBPIndexError(IBPInputError, IndexError):
    """A row index is not a valid selection, or a row id is out of range.

    Also an ``IndexError``, as torch raises for the same mistakes, so ``for row in table``
    stops at the end of the table.
    """


class IBPDeviceError(IBPError, RuntimeError):
    """The GPU path cannot run here (no CUDA device, or the device cannot do what is asked)."""


class Terminated(BaseException):
    """SIGTERM arrived (``kill``, ``timeout``, a batch scheduler) while a command ran.

    Raised in the main thread where SIGTERM is turned into an exception (the CLI's
    ``compress`` and ``decompress``, and a data-parallel launcher). Like ``KeyboardInterrupt``
    it is not an ``Exception``, so only ``finally`` blocks and context managers see it on the
    way out: they remove temporary files and shared segments.
    """


def check_bool(name: str, value: object) -> bool:
    """``value`` as a plain bool if it is a bool or a ``numpy.bool_``.

    Raises:
        IBPInputError: it is neither, e.g. ``"replace must be a bool, got 'int'"``.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise IBPInputError(f"{name} must be a bool, got '{type(value).__name__}'")
    return bool(value)


def as_int(value: object) -> int | None:
    """``value`` as a Python int, or None if it is not an integer.

    Integers are ints, NumPy integers and 0-d integer tensors or arrays (as DGL takes them);
    bools are not.
    """
    if isinstance(value, (torch.Tensor, np.ndarray)):
        if value.ndim != 0 or value.dtype in (torch.bool, np.bool_):
            return None
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as a Python int if it is an integer (`as_int`) of at least ``minimum``.

    Raises:
        IBPInputError: it is not, e.g. ``"prefetch must be an int >= 0, got -1"``.
    """
    n = as_int(value)
    if n is None or n < minimum:
        raise IBPInputError(f"{name} must be an int >= {minimum}, got {value!r}")
    return n


def check_fanouts(name: str, fanouts: object) -> tuple[int, ...]:
    """``fanouts``, neighbors to draw per hop (``-1``: all of them, ``0``: none), as ints.

    A sequence (a list, a tuple) or a 1-D tensor or array of integers (`as_int`).

    Raises:
        IBPInputError: it is not, naming ``name`` and the index, e.g. ``"num_neighbors must
            be a list of ints, got 'float' at index 1"`` or ``"fanouts[1] must be >= -1 (-1:
            all neighbors, 0: none), got -2"``.
    """
    if isinstance(fanouts, (torch.Tensor, np.ndarray)) and fanouts.ndim == 1:
        fanouts = list(fanouts)
    if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, Sequence):
        raise IBPInputError(f"{name} must be a list of ints, got '{type(fanouts).__name__}'")
    out = []
    for i, value in enumerate(fanouts):
        k = as_int(value)
        if k is None:
            raise IBPInputError(
                f"{name} must be a list of ints, got '{type(value).__name__}' at index {i}"
            )
        if k < -1:
            raise IBPInputError(f"{name}[{i}] must be >= -1 (-1: all neighbors, 0: none), got {k}")
        out.append(k)
    return tuple(out)


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``allowed``.

    An enum member whose value is a string (such as PyG's ``SubgraphType``) counts as that
    string, which is what is returned.

    Raises:
        IBPInputError: it is not, listing ``allowed`` and naming a string given by its repr
            and anything else by its type, e.g. ``"draw must be one of 'once', 'per_hop',
            got 'block'"`` or ``"draw must be one of 'once', 'per_hop', got 'int'"``.
    """
    if isinstance(value, enum.Enum) and isinstance(value.value, str):
        value = value.value
    if not isinstance(value, str) or value not in allowed:
        got = repr(value) if isinstance(value, str) else f"'{type(value).__name__}'"
        names = ", ".join(repr(a) for a in allowed)
        raise IBPInputError(f"{name} must be one of {names}, got {got}")
    return value
