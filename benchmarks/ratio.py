"""Compression ratio on the real tables of ../shared/datasets, ours vs reference one-mask IBP.

Usage::

    .venv/bin/python benchmarks/ratio.py            # writes benchmarks/results/ratio.{json,md}

For every table: the reference design's one-mask IBP (`benchmarks/reference_ibp.py`: one flag bit
per word, byte-granular rows, best threshold), and ibp-graph with byte-granular rows (the like
for like comparison), with its defaults (T=4, align auto), with 16-byte rows (GPU vector loads),
with k=4 clusters, and with T=8 (byte-granular). Ratios are raw row bytes
over stored row bytes (alignment included, metadata excluded; metadata bytes are listed).
Every compressed table is decoded and checked bit for bit.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ibp_graph  # noqa: E402
from benchmarks import real_tables, reference_ibp  # noqa: E402
from benchmarks._env import add_out, environment, header_lines, write_json_md  # noqa: E402

VARIANTS = {
    "align1": {"align": 1},
    "default": {},
    "align16": {"align": 16},
    "k4": {"clusters": 4},
    "t8_align1": {"word_bytes": 8, "align": 1},
}


def measure(name: str, array: np.ndarray, workdir: Path) -> dict:
    row: dict = {"table": name, "shape": list(array.shape), "dtype": str(array.dtype)}
    for t in (4, 8):
        ref = reference_ibp.reference_ratio(array, word_bytes=t)
        row[f"reference_t{t}"] = ref["ratio"]
        row[f"reference_t{t}_threshold"] = ref["threshold"]
    for variant, kwargs in VARIANTS.items():
        path = workdir / f"{name}-{variant}.ibp"
        t0 = time.perf_counter()
        table = ibp_graph.compress(array, path, **kwargs)
        seconds = time.perf_counter() - t0
        back = table.read()
        if not np.array_equal(back.view(np.uint8), array.view(np.uint8)):
            raise SystemExit(f"{name} ({variant}): round trip is not bit-identical")
        stats = table.stats
        row[variant] = {
            "ratio": table.ratio,
            "align": table.align,
            "rows_raw": stats["rows_raw"],
            "metadata_bytes": stats["metadata_bytes"],
            "threshold": stats["threshold"],
            "column_kinds": stats["column_kinds"],
            "seconds": seconds,
        }
        table.close()
        path.unlink()
    return row


def markdown(env: dict, rows: list[dict], notes: dict[str, str]) -> str:
    lines = [
        *header_lines("Compression ratio on real tables", env),
        "Ratio = raw row bytes / stored row bytes (row alignment included, metadata excluded).",
        "*reference*: one-mask IBP as in the reference design (one flag bit per word, rows "
        "byte-granular, best threshold of 0.70..0.95), `benchmarks/reference_ibp.py`.",
        "*ours, align 1*: `ibp_graph.compress(x, path, align=1)`, byte-granular rows like the "
        "reference; *default*: T=4, align auto (the largest of 16..1 within 1% of align 1; the "
        "chosen alignment in brackets); *align 16*: 16-byte rows; *k=4*: four mask clusters "
        "(align auto); *T=8*: 8-byte words, align 1. All round trips checked bit for bit.",
        "",
        "| table | shape | dtype | reference T=4 | ours, align 1 | ours / ref | default [align] "
        "| align 16 | k=4 | reference T=8 | ours T=8 | metadata bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a1, d = r["align1"], r["default"]
        gain = a1["ratio"] / r["reference_t4"]
        lines.append(
            f"| {r['table']} | {r['shape'][0]} x {r['shape'][1]} | {r['dtype']} "
            f"| {r['reference_t4']:.3f} | {a1['ratio']:.3f} | {gain:.2f}x "
            f"| {d['ratio']:.3f} [{d['align']}] | {r['align16']['ratio']:.3f} "
            f"| {r['k4']['ratio']:.3f} | {r['reference_t8']:.3f} | {r['t8_align1']['ratio']:.3f} "
            f"| {d['metadata_bytes']} |"
        )
    lines += ["", "Where the tables come from:", ""]
    lines += [f"- **{name}**: {note}" for name, note in notes.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_out(p)
    args = p.parse_args(argv)
    if not real_tables.available():
        raise SystemExit(f"datasets not found under {real_tables.SHARED_DATASETS}")
    env = environment()
    rows, notes = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, array, note in real_tables.load_all():
            print(f"{name} {array.shape} ...", file=sys.stderr, flush=True)
            rows.append(measure(name, array, Path(tmp)))
            notes[name] = note
    payload = {**env, "tables": rows, "notes": notes}
    print(write_json_md("ratio", payload, lambda: markdown(env, rows, notes), args.out).read_text())


if __name__ == "__main__":
    main()
