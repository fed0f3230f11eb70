"""``ibp-graph inspect``: describe an ``.ibp`` file (shape, ratio, codec choices, sections).

Usage::

    ibp-graph inspect features.ibp
    ibp-graph inspect features.ibp --json
    ibp-graph inspect features.ibp --json | jq .ratio

The file is validated first (header, structure and every section's checksum), so a corrupt
file is reported as an error rather than described. ``--json`` prints the same facts as one
JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .. import open as open_table
from ..table import IBPTable
from ._common import human_bytes

EXAMPLES = """\
examples:
  ibp-graph inspect features.ibp
  ibp-graph inspect features.ibp --json
  ibp-graph inspect features.ibp --json | jq .ratio
  ibp-graph inspect broken.ibp; echo $?        # 1: the message names what is wrong
"""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``inspect`` command to the ``ibp-graph`` parser."""
    p = subparsers.add_parser(
        "inspect",
        help="describe an .ibp file: shape, dtype, ratio, codec choices, sections",
        description="Validate an .ibp file and describe it.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", metavar="IN.ibp", help="the .ibp file")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run, parser=p)
    return p


def describe(table: IBPTable) -> dict[str, Any]:
    """The facts ``inspect`` reports, as a JSON-serializable dict.

    Statistics recorded at compress time (``rows_raw``, ``threshold``, ...) are None when the
    file does not carry them, or carries a value of an unexpected type (the statistics are
    free-form and not needed to decode, so odd values are shown as missing, never trusted).
    """
    header = table.header
    stats = _clean_stats(table.stats)
    source = header.meta.get("source")
    return {
        "path": table.path,
        "format_version": header.format_version,
        "shape": list(table.shape),
        "dtype": table.dtype_name,
        "word_bytes": table.word_bytes,
        "align": table.align,
        "num_clusters": table.num_clusters,
        "ratio": table.ratio,
        "raw_bytes": table.raw_bytes,
        "stored_bytes": table.stored_bytes,
        "file_size": header.file_size,
        "rows_raw": stats.get("rows_raw"),
        "metadata_bytes": stats.get("metadata_bytes"),
        "threshold": stats.get("threshold"),
        "threshold_sweep": stats.get("threshold_sweep"),
        "sample_rows": stats.get("sample_rows"),
        "source": source if isinstance(source, str) else None,
        "column_kinds": stats.get("column_kinds"),
        "code_bits": stats.get("code_bits"),
        "clusters": stats.get("clusters"),
        "sections": [
            {
                "name": s.name,
                "offset": s.offset,
                "nbytes": s.nbytes,
                "dtype": s.dtype.str,
                "shape": list(s.shape),
                "crc32": s.crc32,
            }
            for s in header.sections.values()
        ],
    }


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_cluster(c: Any) -> bool:
    return isinstance(c, dict) and all(_is_int(c.get(k, 0)) for k in _CLUSTER_KEYS)


_CLUSTER_KEYS = ("rows", "stored_bytes", "rows_raw")
#: The type each statistic must have to be reported; anything else reads as missing.
_STAT_CHECKS = {
    "rows_raw": _is_int,
    "metadata_bytes": _is_int,
    "threshold": _is_number,
    "threshold_sweep": lambda v: isinstance(v, list) and all(map(_is_number, v)),
    "sample_rows": _is_int,
    "column_kinds": lambda v: isinstance(v, dict),
    "code_bits": lambda v: isinstance(v, dict) and all(map(_is_int, v.values())),
    "clusters": lambda v: isinstance(v, list) and all(map(_is_cluster, v)),
}


def _clean_stats(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if k not in _STAT_CHECKS or _STAT_CHECKS[k](v)}


def _bytes(n: Any) -> str:
    if not isinstance(n, int):
        return "-"
    return f"{human_bytes(n)} ({n:,} B)" if n >= 1000 else f"{n} B"


def _pct(part: Any, whole: int) -> str:
    if not isinstance(part, int):
        return "-"
    return f"{part:,} of {whole:,} ({100 * part / max(whole, 1):.2f}%)"


def _table(rows: list[list[str]], align: str, indent: str = "  ") -> list[str]:
    """Text columns; ``align`` has one ``l`` (left) or ``r`` (right) per column."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [
            c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(r, widths, align, strict=True)
        ]
        lines.append(indent + "  ".join(cells).rstrip())
    return lines


def format_report(info: dict[str, Any]) -> str:
    """Render :func:`describe`'s dict as the human-readable ``inspect`` report."""
    n, d = info["shape"]
    threshold = info["threshold"]
    if threshold is None:
        threshold_text = "-"
    else:
        threshold_text = str(threshold)
        sweep = info["threshold_sweep"]
        if isinstance(sweep, list) and len(sweep) > 1:
            threshold_text += f" (auto, swept {min(sweep)}..{max(sweep)})"
        if isinstance(info["sample_rows"], int):
            threshold_text += f", fitted on {info['sample_rows']:,} sample rows"
    kinds = info["column_kinds"]
    kinds_text = (
        ", ".join(f"{k} {v}" for k, v in kinds.items()) + " (word columns, over all clusters)"
        if isinstance(kinds, dict)
        else "-"
    )
    fields = [
        ("path", info["path"]),
        ("format version", str(info["format_version"])),
        ("shape", f"{n:,} x {d:,}"),
        ("dtype", info["dtype"]),
        ("word bytes", str(info["word_bytes"])),
        ("alignment", f"{info['align']} B per stored row"),
        ("clusters", str(info["num_clusters"])),
        ("ratio", f"{info['ratio']:.3f}x (raw row bytes / stored row bytes incl. alignment)"),
        ("raw bytes", _bytes(info["raw_bytes"])),
        ("stored bytes", _bytes(info["stored_bytes"])),
        ("rows stored raw", _pct(info["rows_raw"], n)),
        ("metadata bytes", _bytes(info["metadata_bytes"])),
        ("file size", _bytes(info["file_size"])),
        ("threshold", threshold_text),
        ("column kinds", kinds_text),
    ]
    if info["source"] is not None:
        fields.insert(1, ("source", _printable(str(info["source"]))))
    width = max(len(k) for k, _ in fields)
    lines = [f"{k.ljust(width)}  {v}" for k, v in fields]

    hist = info["code_bits"]
    if isinstance(hist, dict) and any(hist.values()):
        lines += ["", "code bits (dictionary index width) per word column, over all clusters"]
        top = max(hist.values())
        rows = [["bits", "columns", ""]]
        for bits, count in hist.items():
            if count:
                rows.append([str(bits), f"{count:,}", "#" * max(1, round(30 * count / top))])
        lines += _table(rows, "rrl")

    clusters = info["clusters"]
    if isinstance(clusters, list) and clusters:
        lines += ["", "clusters"]
        rows = [["#", "rows", "stored bytes", "rows raw"]]
        for i, c in enumerate(clusters):
            rows.append(
                [
                    str(i),
                    f"{c.get('rows', 0):,}",
                    f"{c.get('stored_bytes', 0):,}",
                    f"{c.get('rows_raw', 0):,}",
                ]
            )
        lines += _table(rows, "rrrr")

    lines += ["", "sections"]
    rows = [["name", "offset", "bytes", "dtype", "shape"]]
    for s in info["sections"]:
        shape = " x ".join(map(str, s["shape"])) or "scalar"
        rows.append([s["name"], f"{s['offset']:,}", f"{s['nbytes']:,}", s["dtype"], shape])
    lines += _table(rows, "lrrll")
    return "\n".join(lines)


def _printable(text: str) -> str:
    """``text`` with each character that is not printable written as its escape sequence.

    A newline or a terminal escape in a file's metadata must not drive the terminal.
    """
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def run(args: argparse.Namespace) -> int:
    """Print the report of ``args.input`` to stdout."""
    table = open_table(Path(args.input))
    try:
        info = describe(table)
    finally:
        table.close()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(format_report(info))
    return 0
