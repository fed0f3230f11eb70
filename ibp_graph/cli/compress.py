"""``ibp-graph compress``: compress a feature table into an ``.ibp`` file.

Usage::

    ibp-graph compress features.npy -o features.ibp
    ibp-graph compress data.pt --key feat -o feat.ibp --clusters 4
    ibp-graph compress ogb:ogbn-arxiv --root dataset -o arxiv.ibp --word 8
    ibp-graph compress big.npy -o big.ibp --device cuda
    OUT=$(ibp-graph compress x.npy -o x.ibp --quiet)

The input is a 2-D table: a ``.npy`` file (memory-mapped and encoded in streamed chunks, so
it may be larger than RAM), a ``.pt`` file holding a tensor or a dict of tensors, or
``ogb:NAME`` read from OGB's on-disk layout under ``--root`` (nothing is downloaded). stdout
gets only the output path; a one-line summary goes to stderr unless ``--quiet``: the table's
size -> the size of its encoded rows (their ratio), and the file's size on disk, which also
holds the header and the parameters, each section aligned to 4 KiB. On a terminal, a table
of 64 MiB or more shows progress bars on stderr, one while the parameters are fitted on the
sample and one while the rows are encoded, unless ``--quiet`` or ``--no-progress``. An
existing output file is replaced only with ``--force``, and only if it is a regular file.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..compress import compress
from ..errors import IBPInputError
from ..sources import PT_KEYS, open_source
from ._common import (
    UsageError,
    add_force,
    add_no_progress,
    align_arg,
    check_output_dir,
    clusters_arg,
    count_arg,
    device_arg,
    human_bytes,
    output_arg,
    same_file,
    say,
    threshold_arg,
)

EXAMPLES = """\
examples:
  ibp-graph compress features.npy -o features.ibp
  ibp-graph compress data.pt --key feat -o feat.ibp --clusters 4
  ibp-graph compress ogb:ogbn-arxiv --root dataset -o arxiv.ibp --word 8
  OUT=$(ibp-graph compress x.npy -o x.ibp --quiet)   # stdout is only the path
  ibp-graph compress x.npy -o x.ibp --force          # replace an existing x.ibp
"""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``compress`` command to the ``ibp-graph`` parser."""
    p = subparsers.add_parser(
        "compress",
        help="compress a .npy / .pt / OGB feature table into an .ibp file",
        description="Compress a 2-D feature table losslessly into an .ibp file.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "input",
        metavar="INPUT",
        help="a .npy file (memory-mapped), a .pt file, or ogb:NAME (e.g. ogb:ogbn-arxiv)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=output_arg,
        required=True,
        metavar="OUT.ibp",
        help="the .ibp file to write",
    )
    p.add_argument(
        "--clusters",
        type=clusters_arg,
        default=1,
        metavar="K",
        help="at most K mask clusters, 1..255; each row uses its smallest; one is kept when "
        "more do not pay for their own masks (default: 1)",
    )
    p.add_argument(
        "--threshold",
        type=threshold_arg,
        default="auto",
        metavar="auto|X",
        help="invariance threshold in (0.5, 1], or auto to sweep 0.70..0.95 (default: auto)",
    )
    p.add_argument(
        "--word",
        type=int,
        choices=(4, 8),
        default=4,
        help="codec word size in bytes (default: 4)",
    )
    p.add_argument(
        "--sample",
        type=count_arg,
        default=None,
        metavar="N",
        help="rows used to fit the parameters, 0 = all (default: up to 65,536 random rows)",
    )
    p.add_argument(
        "--align",
        type=align_arg,
        default="auto",
        metavar="auto|1|2|4|8|16|32",
        help="byte alignment of each stored row (default: auto, the largest of 16..1 that "
        "costs at most 1%% more space than 1)",
    )
    p.add_argument(
        "--root",
        metavar="DIR",
        default=None,
        help="folder holding OGB datasets in OGB's layout, for ogb:NAME (default: dataset)",
    )
    p.add_argument(
        "--key",
        default=None,
        help=f"dict key of the tensor in a .pt file (default: the first of {', '.join(PT_KEYS)})",
    )
    p.add_argument(
        "--seed",
        type=count_arg,
        default=0,
        metavar="N",
        help="seed of the sample and of clustering, an integer >= 0 (default: 0)",
    )
    p.add_argument(
        "--device",
        type=device_arg,
        default="cpu",
        metavar="cpu|cuda[:N]",
        help="encode the rows on 'cpu' (NumPy) or 'cuda[:N]' (CuPy, same bytes) (default: cpu)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the output path (no summary, no progress bars)",
    )
    add_force(p)
    add_no_progress(p)
    p.set_defaults(run=run, parser=p)
    return p


def run(args: argparse.Namespace) -> int:
    """Compress ``args.input`` into ``args.output``; print the output path to stdout."""
    spec: str = args.input
    is_ogb = spec.startswith("ogb:")
    if args.root is not None and not is_ogb:
        raise UsageError(f"--root applies only to ogb:NAME inputs, not {spec!r}; drop --root")
    if args.key is not None and Path(spec).suffix.lower() not in (".pt", ".pth"):
        raise UsageError(f"--key applies only to .pt inputs, not {spec!r}; drop --key")
    out = Path(args.output)
    if not is_ogb and same_file(out, Path(spec)):
        raise IBPInputError(f"{out}: the output would overwrite the input; pick another -o")
    check_output_dir(out, force=args.force)  # before a possibly long read of the input
    source = open_source(spec, root=args.root, key=args.key)
    table = compress(
        source,
        out,
        clusters=args.clusters,
        threshold=args.threshold,
        word_bytes=args.word,
        sample=args.sample,
        align=args.align,
        seed=args.seed,
        device=args.device,
        progress=False if (args.quiet or args.no_progress) else None,
    )
    if not args.quiet:
        n, d = table.shape
        rows_raw = table.stats.get("rows_raw", "?")
        say(
            f"wrote {out}: {n} x {d} {table.dtype_name}, {human_bytes(table.raw_bytes)} -> "
            f"{human_bytes(table.stored_bytes)} (ratio {table.ratio:.2f}x, align {table.align}, "
            f"{rows_raw} rows raw), file {human_bytes(table.header.file_size)}"
        )
    table.close()
    print(out)
    return 0
