"""Helpers shared by the ``ibp-graph`` commands: error reporting, option types, output files.

Usage (what the helpers produce)::

    $ ibp-graph decompress missing.ibp -o x.npy
    ibp-graph: error: missing.ibp: no such file
    $ IBP_GRAPH_DEBUG=1 ibp-graph decompress missing.ibp -o x.npy   # full traceback
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import math
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from ..codec import ALIGNMENTS
from ..container import named_os_error, resolve_output
from ..errors import IBPError, IBPInputError, Terminated

#: Environment variable that makes runtime errors raise with their traceback.
DEBUG_ENV = "IBP_GRAPH_DEBUG"
#: Exceptions reported as one line and exit status 1; anything else is a bug and propagates.
RUNTIME_ERRORS: tuple[type[BaseException], ...] = (IBPError, OSError, MemoryError, ImportError)
#: Exit status of a successful run, of a data or runtime error, and of a usage error.
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
#: Exit status after Ctrl-C (SIGINT), after SIGTERM, and when stdout's reader has gone
#: (SIGPIPE): 128 + the signal number, as a shell reports a program the signal ended.
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
PROG = "ibp-graph"


class UsageError(Exception):
    """A usage problem found after parsing (e.g. conflicting options); exits with status 2.

    The message names the option and says how to fix it.
    """


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated`, as Ctrl-C raises ``KeyboardInterrupt``.

    The previous handler is put back when the block exits, and already when the first SIGTERM
    arrives, so a second one takes the previous action (by default: end at once). Signal
    handlers can only be set from the main thread; elsewhere the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:  # installed outside Python: it cannot be put back, use the default
        previous = signal.SIG_DFL

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, previous)
        raise Terminated

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def debug_enabled() -> bool:
    """Whether ``IBP_GRAPH_DEBUG`` asks for tracebacks (set and not ``0``/``false``/``no``)."""
    value = os.environ.get(DEBUG_ENV, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def error_message(exc: BaseException) -> str:
    """One line describing a runtime error; the library's messages already name the file."""
    if isinstance(exc, OSError) and exc.strerror:
        names = [os.fspath(f) for f in (exc.filename, exc.filename2) if f is not None]
        message = f"{' -> '.join(map(str, names))}: {exc.strerror}" if names else exc.strerror
    elif isinstance(exc, MemoryError):
        message = f"out of memory{f' ({exc})' if str(exc) else ''}"
    else:
        message = str(exc) or type(exc).__name__
    return " ".join(message.split())


def report_error(exc: BaseException, *, who: str = "") -> None:
    """Print ``ibp-graph: error: <message>`` to stderr (plus the debug hint on a terminal).

    ``who`` (e.g. ``"rank 1 of 2"``) starts the message unless it starts with it already.
    """
    message = error_message(exc)
    if who and not message.startswith(who):
        message = f"{who}: {message}"
    # One write: the ranks of a data-parallel run share stderr, and print() writes the line
    # and its end apart, so two ranks' lines could run into each other.
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    if sys.stderr.isatty():
        print(f"(set {DEBUG_ENV}=1 for the traceback)", file=sys.stderr)


def json_ready(value: Any) -> Any:
    """``value`` with NaN and infinities as None, in dicts, lists and tuples too.

    The JSON written from it is then strict (the CLI's ``--json``, the benchmarks' results).
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def human_bytes(n: int | float) -> str:
    """Format a byte count with decimal units: ``999 B``, ``15.5 MB``, ``1.2 TB``."""
    value = float(n)
    if abs(value) < 1000:
        return f"{int(value)} B"
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1000
        if abs(value) < 999.95 or unit == "TB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def say(message: str) -> None:
    """Print a log line to stderr (stdout carries only data)."""
    print(message, file=sys.stderr)


# -- option types: a bad value is a usage error naming the option --------------------------
def positive_int_arg(text: str) -> int:
    """An integer option that must be at least 1 (argparse type)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return n


def clusters_arg(text: str) -> int:
    """``--clusters``: an integer in 1..255."""
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer in 1..255, got {text!r}") from None
    if not 1 <= k <= 255:
        raise argparse.ArgumentTypeError(f"must be an integer in 1..255, got {k}")
    return k


def threshold_arg(text: str) -> float | str:
    """``--threshold``: ``auto`` or a number in (0.5, 1]."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        th = float(text)
    except ValueError:
        th = float("nan")
    if not 0.5 < th <= 1.0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be 'auto' or a number in (0.5, 1], got {text!r}")
    return th


def align_arg(text: str) -> int | str:
    """``--align``: ``auto`` or one of 1, 2, 4, 8, 16, 32."""
    choices = ", ".join(map(str, ALIGNMENTS))
    if text.strip().lower() == "auto":
        return "auto"
    try:
        a = int(text)
    except ValueError:
        a = -1
    if a not in ALIGNMENTS:
        raise argparse.ArgumentTypeError(f"must be 'auto' or one of {choices}, got {text!r}")
    return a


def count_arg(text: str) -> int:
    """A non-negative integer (``--sample``, ``--seed``)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return n


def device_arg(text: str) -> str:
    """``--device``: ``cpu``, ``cuda`` or ``cuda:N``."""
    device = text.strip()
    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", device):
        raise argparse.ArgumentTypeError(f"must be 'cpu', 'cuda' or 'cuda:N', got {text!r}")
    return device


def output_arg(text: str) -> str:
    """An output file option (``-o``, ``--json``): any path but an empty one or a folder's.

    A folder's path (ending in a separator, ``.`` or ``..``) is refused as given: a `Path`
    would drop the trailing separator and write a file named like the folder.
    """
    if not text:
        raise argparse.ArgumentTypeError("must name the file to write, got an empty path")
    if os.path.basename(text) in ("", ".", ".."):
        raise argparse.ArgumentTypeError(f"must name the file to write, got a folder: {text!r}")
    return text


def add_no_progress(parser: argparse.ArgumentParser) -> None:
    """Add ``--no-progress`` (bars are shown on a terminal otherwise, on stderr)."""
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="never show a progress bar (bars go to stderr, and only on a terminal)",
    )


# -- files -----------------------------------------------------------------------------------
def add_force(parser: argparse.ArgumentParser) -> None:
    """Add ``-f/--force``: replace an existing output file (never the input, never a device)."""
    parser.add_argument(
        "-f",
        "--force",
        action="store_true",
        help="replace OUT if it already exists (only a regular file is ever replaced)",
    )


def check_output_dir(path: Path, *, force: bool = False) -> None:
    """Check that ``path`` can be written before any long work starts.

    Args:
        path: the output file.
        force: allow replacing an existing regular file (default: False).

    Raises:
        IBPInputError: the folder that would hold ``path`` does not exist or is a file,
            something other than a regular file (a directory, a device, a FIFO) is at
            ``path``, or a file is there and ``force`` is False.
    """
    resolve_output(path)
    if path.exists() and not force:
        raise IBPInputError(f"{path}: already exists; pass --force to replace it")


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name the same file (False when either does not exist)."""
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """Yield a hidden temporary path beside ``path``; rename it onto ``path`` on success.

    A symbolic link at ``path`` is kept and its target replaced; anything but a regular file
    there is refused (see :func:`~ibp_graph.container.resolve_output`). On any error the
    temporary file is removed and ``path`` is left as it was, so a failed run never leaves a
    partial output, and an ``OSError`` names ``path``, not the temporary file.
    """
    target = Path(resolve_output(path))
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        yield tmp
        resolve_output(path)  # still nothing but a regular file (or nothing) there
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        if isinstance(exc, OSError):
            raise named_os_error(exc, os.fspath(path)) from None
        raise


def preallocate(path: Path, nbytes: int) -> None:
    """Reserve disk space so that a full disk is an ``OSError`` now, not a crash mid-write."""
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None or nbytes <= 0:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
        # other errors (e.g. a file system without fallocate): write without reserving
    finally:
        os.close(fd)
