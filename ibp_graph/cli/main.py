"""``ibp-graph``: the command-line entry point (``compress | decompress | inspect``).

Usage::

    ibp-graph compress features.npy -o features.ibp
    ibp-graph inspect features.ibp --json
    ibp-graph decompress features.ibp -o roundtrip.npy
    python -m ibp_graph --version

Exit status: 0 on success, 1 for a data or runtime error (one line on stderr,
``ibp-graph: error: <file>: <what>``; set ``IBP_GRAPH_DEBUG=1`` for the traceback), 2 for a
usage error, 130 after Ctrl-C and 143 after SIGTERM (``compress`` and ``decompress`` remove
their temporary files first), 141, quietly, when whoever reads stdout has gone (``| head``).
stdout carries only data (output paths, reports); logs and bars go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext

from .. import __version__
from ..errors import Terminated
from . import compress, decompress, inspect, train
from ._common import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    PROG,
    RUNTIME_ERRORS,
    UsageError,
    debug_enabled,
    report_error,
    sigterm_raises,
)

COMMANDS = (compress, decompress, inspect, train)
#: Commands that SIGTERM stops as Ctrl-C does, removing their temporary files: those that
#: write through temporaries. ``train`` keeps the default action, so that a data-parallel
#: rank waiting in a collective (where no Python code runs) still ends at once.
SIGTERM_CLEANS_UP = ("compress", "decompress")

EXAMPLES = """\
examples:
  ibp-graph compress features.npy -o features.ibp
  ibp-graph compress ogb:ogbn-arxiv --root dataset -o arxiv.ibp --clusters 4
  ibp-graph inspect features.ibp --json
  ibp-graph decompress features.ibp -o roundtrip.npy

Run 'ibp-graph COMMAND --help' for a command's options. Exit status: 0 ok, 1 data or runtime
error (set IBP_GRAPH_DEBUG=1 for the traceback), 2 usage error.
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``ibp-graph`` argument parser with every command registered."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Lossless Invariant-Bit-Packing compression of GNN node-feature tables.",
        epilog=EXAMPLES,
        formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(
            prog, max_help_position=28
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def _status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    """Run ``ibp-graph`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit status.

    Known runtime errors (:class:`~ibp_graph.errors.IBPError`, ``OSError``, ``MemoryError``,
    ``ImportError`` of an optional extra)
    print one line to stderr and return 1, or re-raise when ``IBP_GRAPH_DEBUG=1``; usage
    errors return 2; Ctrl-C returns 130 and, during the commands of `SIGTERM_CLEANS_UP`,
    SIGTERM returns 143, each after one line to stderr (or re-raise under the same setting);
    a reader of stdout that has gone returns 141 without a word; any other exception is a
    bug and propagates with its traceback.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return _status(exc)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    on_sigterm = sigterm_raises() if args.command in SIGTERM_CLEANS_UP else nullcontext()
    try:
        with on_sigterm:
            status = int(args.run(args))
        sys.stdout.flush()  # a reader of stdout that has gone shows here, not at exit
        return status
    except UsageError as exc:
        try:
            args.parser.error(str(exc))
        except SystemExit as usage:
            return _status(usage)
        return EXIT_USAGE  # pragma: no cover - error() always exits
    except (KeyboardInterrupt, Terminated) as exc:
        if debug_enabled():
            raise
        terminated = isinstance(exc, Terminated)
        print(f"{PROG}: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except BrokenPipeError:
        # Whoever read stdout has gone (`ibp-graph inspect f.ibp | head -2`): stop quietly,
        # as a program ended by SIGPIPE does.
        _drop_stdout()
        return EXIT_BROKEN_PIPE
    except RUNTIME_ERRORS as exc:
        _stop_if_launcher_gone()
        if debug_enabled():
            raise
        report_error(exc, who=_rank())
        return int(getattr(exc, "exit_status", EXIT_ERROR))


def _rank() -> str:
    """``"rank R of W"`` in a rank of a data-parallel run, else ``""``.

    torch's launcher sets ``RANK`` and ``WORLD_SIZE`` in every rank.
    """
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None or world == "1":
        return ""
    return f"rank {rank} of {world}"


def _stop_if_launcher_gone() -> None:
    """In a rank whose launcher is gone, say that (not the error it caused) and exit.

    A rank may see another rank stop before its own watch sees the launcher gone
    (`ibp_graph.distributed.orphan`); the launcher is what failed.
    """
    orphan = sys.modules.get("ibp_graph.distributed.orphan")  # loaded when a watch started
    if orphan is not None:
        orphan.stop_if_launcher_gone()


def _drop_stdout() -> None:
    """Point stdout at ``/dev/null``, so that flushing it at exit does not fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
