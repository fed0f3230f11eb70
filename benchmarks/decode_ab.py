"""Versions of the fused decoder side by side: decode-only GB/s, the order rotating.

Usage::

    python benchmarks/decode_ab.py --baseline DIR [--baseline DIR2 ...]   # on a GPU
    .venv/bin/python benchmarks/decode_ab.py --baseline DIR --dry-run     # no GPU

``current`` is the package's ``cuda/fetch_decode.cu``; each baseline is a ``DIR/fetch_decode.cu``,
an earlier version of it (``benchmarks/gpu_session.sh prepare`` writes the two newest
committed versions whose code differs from the working tree's), labelled by ``DIR/COMMIT``,
else by the folder's name (``--baseline-label``, once per baseline, names them instead).
Every version is launched by the package's launcher, a baseline inside
`ibp_graph.kernels.runtime.kernel_sources`, so each must declare the same entry points with
the same parameters as the current one, or with its first ones (a kernel reads the
parameters it declares: the launcher's last arguments, past a baseline's, are not read by
it). That is checked first, on the CPU: the sources are compiled with NVRTC and their PTX
entry points compared, and a baseline that differs is refused before anything is launched.

Cases: synthetic float32 rows of ``--widths`` bytes of the ``--kinds`` of
``benchmarks/fetch.py``, then the real float32 / float16 tables of `benchmarks.real_tables`
(``--no-real`` leaves them out; ``--cases`` keeps the named ones). Each case's compressed rows
are tiled in GPU memory until they stand for ``--table-gb`` GiB of raw rows, and further
until the stored rows reach `fetch.L2_POOL_FACTOR` times the L2 (a sparse table's rows
would otherwise fit in L2 and be decoded at L2's rate, not from GPU memory), so the decoder
reads no PCIe (decode only); a table stored raw has no decoder to compare and is skipped.
Batches of ``--batch`` random ids (uniform, duplicates allowed, drawn as ``fetch.py`` draws
them: enough batches that their stored rows reach four times the L2), taken in turn. A case
whose pool of batches still fits in L2 (`fetch.stored_fits_l2`) says so.

For ``--rounds`` rounds, each version is timed as ``fetch.py`` times a launch (CUDA events
around back-to-back launches queued behind a GPU sleep, the median of ``--repeats``
samples), the order rotating from round to round (current first in round 0, then each
version first in turn; with one baseline, the order alternates). The results give each
version's median GB/s of decoded output over the rounds and, for each baseline, the ratio of
the two medians (current / baseline: above 1, the current kernel is faster) and the median,
lowest and highest of the per-round ratios, and whether each version's output matched the
rows bit for bit (every batch of the pool, after the timing). The launches are the library's:
the current stream, its grid (``--max-blocks`` caps it, in blocks per SM) and its blocks
(``--block-warps``). At the full grid (no ``--max-blocks``) the current kernel's rate is also
judged against the decode-only goal of its table's class (`fetch.decode_goal`).

``--double-buffer`` adds the current source's double-buffered entry points as one more version
(`DB_LABEL`): each warp stages its next row while it decodes the current one, which is what a
table's ``double_buffer=True`` launches. Timed and checked like a baseline (current / db above
1: the one-buffer kernel is faster); where a case's rows are too wide for two staging buffers
it is left out of that case, with the reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ibp_graph  # noqa: E402
from benchmarks import fetch  # noqa: E402
from benchmarks._env import (  # noqa: E402
    add_out,
    block_warps_arg,
    blocks_per_sm,
    environment,
    finite,
    grid_cap,
    header_lines,
    result_name,
    write_json_md,
)

SOURCE = "fetch_decode.cu"
GIB = 1 << 30
#: The architecture the entry points are compared at (their parameters do not depend on it).
PTX_ARCH = "compute_80"


# --------------------------------------------------------------------------------------------
# The two sources
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def entry_points(text: str, name: str) -> dict[str, tuple[str, ...]]:
    """The PTX entry points of CUDA source ``text`` (called ``name``): name -> parameter types.

    Compiled with NVRTC (the dev extra) for `PTX_ARCH` by `ibp_graph.kernels.ptx`, once per
    text and name. Raises SystemExit in one line when NVRTC is missing, or naming ``name`` when
    the source does not compile.
    """
    from ibp_graph.kernels import ptx

    try:
        return ptx.entry_points(ptx.compile_ptx(text, name, PTX_ARCH)[0])
    except (RuntimeError, ptx.PTXCompileError) as exc:
        raise SystemExit(f"decode_ab: {exc}") from None


def check_sources(baseline: Path) -> dict[str, Any]:
    """Refuse (SystemExit, one line) a baseline the package's launcher cannot launch as is.

    ``baseline``: the folder holding a baseline's ``fetch_decode.cu``. It must declare the
    same entry points as the current source, each with the same parameter types, in order, or
    with the current one's first parameters (the launcher's arguments past them are then not
    read by the baseline).
    Returns the entry points' names and whether the two sources are the same text.
    """
    from ibp_graph.kernels.runtime import read_source

    path = baseline / SOURCE
    if not path.is_file():
        raise SystemExit(f"decode_ab: no baseline kernel: {path} is missing")
    current_text, baseline_text = read_source(SOURCE), path.read_text()
    current = entry_points(current_text, f"cuda/{SOURCE}")
    other = entry_points(baseline_text, str(path))
    if sorted(current) != sorted(other):
        missing = sorted(set(current) - set(other))
        extra = sorted(set(other) - set(current))
        raise SystemExit(
            f"decode_ab: {path} declares other entry points than cuda/{SOURCE} "
            f"(missing: {', '.join(missing) or 'none'}; extra: {', '.join(extra) or 'none'})"
        )
    for entry, params in current.items():
        if other[entry] != params[: len(other[entry])]:
            raise SystemExit(
                f"decode_ab: {entry} takes other parameters in {path} ({len(other[entry])}) "
                f"than in cuda/{SOURCE} ({len(params)}): the package's launcher cannot launch it"
            )
    return {"entry_points": sorted(current), "same_text": current_text == baseline_text}


# --------------------------------------------------------------------------------------------
# Cases and measurement
# --------------------------------------------------------------------------------------------


def build_cases(args: argparse.Namespace) -> tuple[list[fetch.Case], str]:
    """The synthetic cases, then the real tables (unless ``--no-real``); ``--cases`` filters."""
    cases = fetch.synthetic_cases(args.widths, args.kinds, args.block_rows, args.seed)
    note = "left out (--no-real)"
    if args.real:
        real, note = fetch.real_cases()
        cases += real
    if args.cases:
        known = {c.name for c in cases}
        unknown = [name for name in args.cases if name not in known]
        if unknown:
            raise SystemExit(
                f"decode_ab: no case named {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        cases = [c for c in cases if c.name in args.cases]
    return cases, note


@dataclasses.dataclass
class Tiled:
    """A case's compressed rows tiled on ``device``: what both versions decode."""

    case: fetch.Case
    times: int
    rows: torch.Tensor  # the stored rows, tiled, and 64 zero bytes
    codec: Any
    sizes: torch.Tensor  # stored bytes of each row of the block

    @property
    def num_rows(self) -> int:
        return self.times * self.case.rows.shape[0]


def tile(case: fetch.Case, table: ibp_graph.IBPTable, table_bytes: int, l2: int, device) -> Tiled:
    """``case``'s compressed rows (``table``) tiled in ``device`` memory up to ``table_bytes``
    of raw rows, and at least to `fetch.L2_POOL_FACTOR` x ``l2`` stored bytes (so that they
    do not fit in the L2 of ``l2`` bytes: `fetch.table_tiles`), and the codec that reads
    them there."""
    stored = fetch.stored_block(table)
    times = fetch.table_tiles(table_bytes, case.rows.shape[0], case.row_bytes, stored.size, l2)
    block = torch.from_numpy(stored.copy()).to(device)  # writable
    rows = torch.zeros(times * block.numel() + 64, dtype=torch.uint8, device=device)
    rows[: times * block.numel()].view(times, -1).copy_(block.expand(times, -1))
    codec = fetch.tiled_codec(table, times, rows.data_ptr(), device)
    sizes = torch.from_numpy(np.diff(table.offsets).astype(np.int64) * table.align).to(device)
    return Tiled(case, times, rows, codec, sizes)


#: The label of the current source's double-buffered kernel (``--double-buffer``).
DB_LABEL = "current-db"


def versions(
    launch: Callable[[torch.Tensor], None], baselines: dict[str, Path]
) -> dict[str, Callable[[torch.Tensor], None]]:
    """``launch`` as the current kernel and, inside `kernel_sources`, as each baseline
    (``baselines``: label -> folder), in that order."""
    from ibp_graph.kernels.runtime import kernel_sources

    def baseline_launch(folder: Path) -> Callable[[torch.Tensor], None]:
        def run(ids: torch.Tensor) -> None:
            with kernel_sources(folder):
                launch(ids)

        return run

    return {"current": launch} | {label: baseline_launch(d) for label, d in baselines.items()}


def alternate(timers: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each of ``timers`` once a round, for ``rounds`` rounds, the order rotating (round r
    starts with the r-th named, modulo their number; two alternate): their seconds, round by
    round."""
    names = list(timers)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            seconds[name].append(timers[name]())
    return seconds


def compare(nbytes: int, seconds: dict[str, list[float]]) -> dict[str, Any]:
    """GB/s of each version (median over the rounds) and the current / baseline ratios.

    ``seconds``: ``current``'s round by round, then each baseline's under its label. Returns
    the current kernel's GB/s and, in ``baselines`` (in their order), each baseline's label,
    GB/s and ratios.
    """
    rates = {k: [fetch.gbps(nbytes, s) for s in v] for k, v in seconds.items()}
    current = statistics.median(rates["current"])
    baselines = []
    for label, theirs in rates.items():
        if label == "current":
            continue
        per_round = [c / b for c, b in zip(rates["current"], theirs, strict=True)]
        gbps = statistics.median(theirs)
        baselines.append(
            {
                "label": label,
                "gbps": gbps,
                "current_over": current / gbps,
                "round_ratio_median": statistics.median(per_round),
                "round_ratio_min": min(per_round),
                "round_ratio_max": max(per_round),
                "gbps_rounds": theirs,
            }
        )
    return {
        "current_gbps": current,
        "current_gbps_rounds": rates["current"],
        "baselines": baselines,
    }


def measure_case(args, case: fetch.Case, tmp: Path, device, guard) -> dict[str, Any]:
    """Compress and tile one case, time both versions round by round, check both."""
    from ibp_graph.cuda_table import raw_bypass

    table = ibp_graph.compress(case.rows, tmp / "block.ibp", progress=False)
    head = {
        "case": case.name,
        "source": case.source,
        "row_bytes": case.row_bytes,
        "ratio": float(table.ratio),
        "zeros": fetch.zero_fraction(case.rows),
    }
    if raw_bypass(table):
        return head | {"skipped": "stored raw: the raw gather, no decoder to compare"}
    l2 = fetch.l2_bytes(device)
    t = tile(case, table, args.table_bytes, l2, device)
    n = fetch.batch_rows(args.batch, case.row_bytes, args.max_batch_bytes, t.num_rows)
    pool, pool_stored = fetch.draw_pool(t.num_rows, n, args.seed, t.sizes, l2)
    out = torch.empty((n, case.row_bytes), dtype=torch.uint8, device=device)
    error = torch.zeros(2, dtype=torch.int32, device=device)
    cap = grid_cap(args.max_blocks, device)
    launch = fetch.fused_launch(t.codec, False, out, error, cap, block_warps=args.block_warps)
    launches = versions(launch, dict(zip(args.baseline_labels, args.baselines, strict=True)))
    db_note = ""
    if args.double_buffer:
        db = fetch.fused_launch(
            t.codec, False, out, error, cap, double_buffer=True, block_warps=args.block_warps
        )
        try:
            db(pool[0])  # rows too wide for two staging buffers are refused before launching
            launches[DB_LABEL] = db
        except ValueError as exc:
            if "one buffer" not in str(exc):
                raise
            db_note = str(exc)
    timers = {
        name: (lambda fn=fn: fetch.gpu_seconds(
            fetch.rotating(fn, pool), args.repeats, guard, device
        ))
        for name, fn in launches.items()
    }  # fmt: skip
    result = head | compare(n * case.row_bytes, alternate(timers, args.rounds))
    result["decode_target"] = decode_target(result["current_gbps"], head["zeros"], args.max_blocks)
    ref = torch.from_numpy(
        np.ascontiguousarray(case.rows).view(np.uint8).reshape(case.rows.shape[0], -1)
    ).to(device)
    identical = {}
    for name, fn in launches.items():
        error.zero_()
        same = fetch.check_pool(fn, pool, out, fetch.rows_match(out, ref, pool))
        identical[name] = same and not bool(error.any())
    result["current_bit_identical"] = identical["current"]
    for b in result["baselines"]:
        b["bit_identical"] = identical[b["label"]]
    if db_note:
        result["double_buffer_note"] = db_note
    return result | {
        "batch_rows": n,
        "id_batches": len(pool),
        "pool_stored_bytes": pool_stored,
        "pool_fits_l2": fetch.stored_fits_l2(pool_stored, l2),
        "table_rows": t.num_rows,
        "stored_bytes": t.rows.numel() - 64,
        "l2_bytes": l2,
    }


def decode_target(gbps: float, zeros: float, max_blocks: float | None) -> dict[str, Any]:
    """The current kernel's decode-only rate against the decoder's goal for its table's class
    (`fetch.decode_target`). The goal is for the decoder with the GPU to itself, so it applies
    only at the library's full grid (no ``--max-blocks``)."""
    return fetch.decode_target(gbps, zeros, applies=max_blocks is None, rate_name="decode-only")


def target_summary(cases: list[dict]) -> str:
    """How many measured cases meet the decode-only goal, and which miss it."""
    judged = [r for r in cases if r.get("decode_target") and r["decode_target"]["applies"]]
    judged = [r for r in judged if r["decode_target"]["met"] is not None]
    if not judged:
        return "Decode-only goal: no case measured at the full grid."
    missed = [r["case"] for r in judged if not r["decode_target"]["met"]]
    text = f"Decode-only goal (the current kernel): met in {len(judged) - len(missed)} of "
    text += f"{len(judged)} cases"
    return text + (f"; missed: {', '.join(missed)}." if missed else ".")


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


def markdown(payload: dict) -> str:
    """The results page: the settings, then one row a case."""
    s = payload["settings"]
    labels = s["baseline_labels"] + ([DB_LABEL] if s.get("double_buffer") else [])
    lines = header_lines("Fused decoder, versions side by side (decode only)", payload)
    sources = s["baseline_labels"]
    same = [label for label, same in zip(sources, s["same_text"], strict=True) if same]
    db_text = (
        f" {DB_LABEL}: the current source's double-buffered entry points (each warp stages its "
        "next row while it decodes the current one; above 1, current / it says the one-buffer "
        "kernel is faster)."
        if s.get("double_buffer")
        else ""
    )
    lines += [
        f"current: `cuda/{SOURCE}` at commit {payload['git_commit']}; "
        f"baseline{'s' if len(sources) > 1 else ''}: `{SOURCE}` at {', '.join(sources)} (the "
        "same entry points and parameters, checked on their PTX"
        f"{'; the same text: ' + ', '.join(same) if same else ''}).{db_text}",
        "",
        f"Compressed rows tiled in GPU memory to stand for {s['table_gb']:g} GiB of raw rows, "
        f"and at least to {fetch.L2_POOL_FACTOR} x L2 of stored rows (decoded from GPU "
        'memory, not from L2; "(id batches fit in L2)": a case whose batches do not reach '
        f"{fetch.L2_FIT_FACTOR} x L2 all the same); "
        f"batches of {s['batch']:,} random ids (fewer where {s['max_batch_gb']:g} GiB of rows "
        f"or the table is less), taken in turn; {s['rounds']} rounds, each timing every "
        f"version (CUDA events, median of {s['repeats']} samples), the order rotating; "
        f"grid: {s['grid']}; {s['blocks']}. Compression: the table's ratio; zeros: the share "
        "of its elements that are 0. GB/s of decoded output, the median over the "
        "rounds; M rows/s: the current kernel's GB/s over the row width (rows of a few "
        "hundred bytes decode at about the same rows per second whatever their width, so a "
        "row's fixed cost sets their rate); current / a baseline (above 1: the current "
        "kernel is faster): the ratio of "
        "the medians, then the median [lowest, highest] of the per-round ratios. "
        "Bit-identical: every version's output against the rows, every batch. Decode-only "
        "goal: the current "
        f"kernel's rate against {fetch.DECODE_DENSE_GOAL:g} GB/s on a dense table and "
        f"{fetch.DECODE_SPARSE_GOAL:g} GB/s on a sparse one (at least "
        f"{fetch.SPARSE_ZEROS:.0%} zeros), met or the gap, then the table's class and goal; it "
        "is for the decoder with the GPU to itself, so on a capped grid the rate stands in "
        "parentheses, not judged.",
        "",
        "| case | row B | compression | zeros | batch rows | current GB/s | M rows/s | "
        + "".join(f"{b} GB/s | current / {b} | per round | " for b in labels)
        + "bit-identical | decode-only goal (current) |",
        "|---|---|---|---|---|---|---|" + "---|---|---|" * len(labels) + "---|---|",
    ]
    for r in payload["cases"]:
        fits = " (id batches fit in L2)" if r.get("pool_fits_l2") else ""
        lead = (
            f"| {r['case']}{fits} | {r['row_bytes']:,} | {fetch._num(r['ratio'], 3)}x "
            f"| {r['zeros']:.0%} "
        )
        if r.get("skipped"):
            lines.append(f"{lead}| {r['skipped']} |" + " |" * (4 + 3 * len(labels)))
            continue
        same = r["current_bit_identical"] and all(b["bit_identical"] for b in r["baselines"])
        by_label = {b["label"]: b for b in r["baselines"]}
        cells = "".join(
            f"| {fetch._num(b['gbps'])} | {b['current_over']:.3f}x "
            f"| {b['round_ratio_median']:.3f}x [{b['round_ratio_min']:.3f}, "
            f"{b['round_ratio_max']:.3f}] "
            if (b := by_label.get(label))
            else "| n/a | n/a | n/a "  # not launched: rows too wide for two staging buffers
            for label in labels
        )
        mrows = r["current_gbps"] * 1e3 / r["row_bytes"]  # GB/s / bytes = G rows/s
        lines.append(
            f"{lead}| {r['batch_rows']:,} | {fetch._num(r['current_gbps'])} "
            f"| {fetch._num(mrows)} {cells}"
            f"| {same} | {fetch._decode_cell(r['decode_target'])} |"
        )
    lines += ["", target_summary(payload["cases"])]
    unbuffered = [r["case"] for r in payload["cases"] if r.get("double_buffer_note")]
    if unbuffered:
        lines += [
            "",
            "Not double-buffered (rows too wide for two staging buffers): "
            f"{', '.join(unbuffered)}.",
        ]
    lines += ["", f"Real tables: {s['real_note']}.", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Versions of the fused decoder side by side (decode-only GB/s).",
    )
    p.add_argument(
        "--baseline",
        dest="baselines",
        type=Path,
        action="append",
        required=True,
        help=f"folder holding a baseline's {SOURCE} (once per baseline)",
    )
    p.add_argument(
        "--baseline-label",
        dest="baseline_labels",
        action="append",
        default=None,
        help="what a baseline is, for the results, once per --baseline in their order "
        "(default: the folder's COMMIT file, else its name)",
    )
    p.add_argument("--table-gb", type=float, default=1.0, help="GiB of raw rows per table")
    p.add_argument("--batch", type=int, default=100_000, help="rows per batch")
    p.add_argument("--max-batch-gb", type=float, default=1.0, help="cap on a batch's GiB of rows")
    p.add_argument("--rounds", type=int, default=6, help="rounds, each timing every version")
    p.add_argument("--repeats", type=int, default=5, help="timed samples per version per round")
    p.add_argument("--widths", type=fetch.int_list, default=[512], help="synthetic row bytes")
    p.add_argument(
        "--kinds",
        type=fetch.names_in(fetch.KINDS, "kind"),
        default=["dense-normal", "sparse-5pct"],
        help=f"synthetic kinds, comma-separated ({', '.join(fetch.KINDS)})",
    )
    p.add_argument("--block-rows", type=int, default=fetch.BLOCK_ROWS, help="distinct rows")
    p.add_argument("--no-real", dest="real", action="store_false", help="skip the real tables")
    p.add_argument(
        "--cases", type=lambda t: [c for c in t.split(",") if c], default=None,
        help="only these cases, comma-separated names",
    )  # fmt: skip
    p.add_argument(
        "--max-blocks",
        type=blocks_per_sm,
        default=None,
        help="grid cap in blocks per SM (default: the library's)",
    )
    p.add_argument(
        "--block-warps", type=block_warps_arg, default=None,
        help="warps per block (default: the library's)",
    )  # fmt: skip
    p.add_argument(
        "--double-buffer", action="store_true",
        help=f"also time the current source's double-buffered kernel (as {DB_LABEL})",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-budget", type=float, default=300.0, help="seconds; no case starts after")
    add_out(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU: compare the sources and build every case",
    )
    args = p.parse_args(argv)
    for name in ("table_gb", "max_batch_gb", "time_budget"):
        if not getattr(args, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    for name in ("batch", "rounds", "repeats", "block_rows"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    for folder in args.baselines:
        if not folder.is_dir():
            p.error(f"--baseline {folder} is not a folder")
    args.baselines = [folder.resolve() for folder in args.baselines]
    if args.baseline_labels is None:
        args.baseline_labels = [_label(folder) for folder in args.baselines]
    elif len(args.baseline_labels) != len(args.baselines):
        p.error(
            f"--baseline-label given {len(args.baseline_labels)} times for "
            f"{len(args.baselines)} --baseline folders: once per baseline, or not at all"
        )
    if len(set(args.baseline_labels)) != len(args.baseline_labels) or (
        {"current", DB_LABEL} & set(args.baseline_labels)
    ):
        p.error(
            f"the baselines' labels ({', '.join(args.baseline_labels)}) must differ from "
            f"each other and from 'current' and '{DB_LABEL}' (name them with --baseline-label)"
        )
    args.table_bytes = int(args.table_gb * GIB)
    args.max_batch_bytes = int(args.max_batch_gb * GIB)
    return args


def _label(folder: Path) -> str:
    """A baseline's label: its folder's COMMIT file, else the folder's name."""
    stamp = folder / "COMMIT"
    return stamp.read_text().strip() if stamp.is_file() else folder.name


def settings(args: argparse.Namespace, sources: list[dict], real_note: str) -> dict:
    from benchmarks._env import block_label

    return {
        "baselines": [str(folder) for folder in args.baselines],
        "baseline_labels": args.baseline_labels,
        "same_text": [checked["same_text"] for checked in sources],
        "entry_points": sources[0]["entry_points"],
        "table_gb": args.table_gb,
        "batch": args.batch,
        "max_batch_gb": args.max_batch_gb,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "grid": "the library's default"
        if args.max_blocks is None
        else f"{args.max_blocks:g} blocks per SM",
        "blocks": block_label(None if args.block_warps is None else [args.block_warps]),
        "double_buffer": args.double_buffer,
        "real_note": real_note,
    }


def run(args: argparse.Namespace, device: torch.device, env: dict) -> dict:
    """Compare the sources, then measure every case on ``device`` (a dry run: build them)."""
    sources = [check_sources(folder) for folder in args.baselines]
    cases, real_note = build_cases(args)
    payload = env | {"settings": settings(args, sources, real_note), "cases": []}
    name = result_name("decode-ab", device)
    guard = fetch.QueueGuard(device)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            if args.dry_run:
                table = ibp_graph.compress(case.rows, Path(tmp) / "block.ibp", progress=False)
                fetch.log(f"{case.name}: ratio {table.ratio:.3f} (dry run: not timed)")
                continue
            if time.perf_counter() - start > args.time_budget:
                r = {"case": case.name, "skipped": "not started: --time-budget spent"} | {
                    "source": case.source,
                    "row_bytes": case.row_bytes,
                    "ratio": float("nan"),
                    "zeros": fetch.zero_fraction(case.rows),
                }
            else:
                r = measure_case(args, case, Path(tmp), device, guard)
            payload["cases"].append(r)
            fetch.log(f"{case.name}: {summary_text(r)}")
            # After every case, so that a run cut off keeps what it measured.
            write_json_md(name, finite(payload), lambda: markdown(payload), args.out)
    return payload


def summary_text(r: dict) -> str:
    """One case's result for the log."""
    if r.get("skipped"):
        return r["skipped"]
    return (
        f"current {r['current_gbps']:.1f} GB/s, bit-identical {r['current_bit_identical']}; "
        + "".join(
            f"{b['label']} {b['gbps']:.1f} GB/s ({b['current_over']:.3f}x), bit-identical "
            f"{b['bit_identical']}; "
            for b in r["baselines"]
        )
        + "decode-only goal: "
        f"{fetch._decode_cell(r['decode_target'])}"
    )


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit(
            "benchmarks/decode_ab.py needs a CUDA GPU (torch.cuda.is_available() is False); "
            "--dry-run compares the sources and builds the cases on the CPU"
        )
    env = environment()
    if argv is not None:
        env["command"] = " ".join(["python", "benchmarks/decode_ab.py", *argv])
    device = torch.device("cuda") if not args.dry_run else torch.device("cpu")
    return run(args, device, env)


if __name__ == "__main__":
    main()
