"""Exceptions raised by ibp-graph.

Every exception raised on purpose by the package derives from :class:`IBPError`, so callers can
catch all of them at once. The two concrete kinds also derive from :class:`ValueError`, which keeps
``except ValueError`` working for code that does not know about ibp-graph. `check_bool` is the
one check of a flag argument that every layer shares.
"""

from __future__ import annotations

__all__ = [
    "IBPDeviceError",
    "IBPError",
    "IBPFormatError",
    "IBPIndexError",
    "IBPInputError",
    "check_bool",
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


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool.

    Raises:
        IBPInputError: it is not (naming ``name`` and the type given).
    """
    if not isinstance(value, bool):
        raise IBPInputError(f"{name} must be a bool, got '{type(value).__name__}'")
    return value
