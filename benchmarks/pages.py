"""Raw zero-copy gather by page kind and by the span of the ids: what limits small rows.

Usage (on a machine with a CUDA GPU and CuPy)::

    python benchmarks/pages.py [--table-gb 4] [--widths 256,512,1024,4096] [--batch 100000]
    .venv/bin/python benchmarks/pages.py --dry-run     # no GPU: print the plan

On an H100 the raw gather of random rows from a 4 GiB pinned table delivered 45 million rows
a second at 256 bytes a row, 38 million at 512 B (0.37x the pinned memcpy) and 35 million at
1 KiB, and sorting the ids made it up to 2.6x faster
(benchmarks/results/fetch-nvidia-h100-80gb-hbm3.md). Under Nsight Compute the same kernel
gathered 512 B rows at 44.6 GB/s from a 1 GiB table, replaying one batch of ids
(profile-nvidia-h100-80gb-hbm3.md). A cost mostly per row, not per byte, that falls when
neighbouring ids are read together, when the table is smaller or when the same rows are read
again points at address translation (a GPU TLB miss per row) rather than at the link. This
benchmark puts that to the test, side by side in one process:

- page kinds (``--kinds``, `ibp_graph.pinned.PAGE_KINDS`): one pinned buffer of
  ``--table-gb`` GiB of each kind ("huge": private memory advised to use transparent huge
  pages, the library's default; "small": 4 KiB pages; "cuda": cudaHostAlloc), filled with the
  same bytes. The share of each that transparent huge pages back is read from
  /proc/self/smaps after the fill, with the kernel's THP settings: "huge" only advises.
- spans (``--spans-mb``): each batch's ids are uniform over the first ``span`` bytes of the
  buffer, from a few L2s up to the whole buffer. A rate that falls as the span grows is
  reaching past what the TLBs cover; a rate that does not fall is not limited by translation.
  Spans under twice the L2 are flagged: their rows may be read from L2.
- sorted: the whole buffer with the ids sorted on the GPU first (the sort included, rows
  written back by the permutation), as the tables' ``sort_ids`` does.

Per row width and span, the same ``--id-batches`` batches of ``--batch`` ids are gathered
from every kind (each timed launch takes the next batch); every repeat times each kind once,
in an order that rotates from one repeat to the next, and each rate is the median over
``--repeats``. Timing: CUDA events around back-to-back launches queued behind a GPU sleep
(`benchmarks.fetch.gpu_seconds`). ``memcpy`` is a pinned host-to-device copy of one batch's
bytes, the link's rate. Every kind's gather of the whole span and of the sorted ids is
checked against the host's rows. Results go to ``pages-<device>.{json,md}`` after each
width, so a run cut short keeps what it measured; no width starts after ``--time-budget``
seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._env import (  # noqa: E402
    add_out,
    environment,
    header_lines,
    result_name,
    write_json_md,
)
from benchmarks.fetch import (  # noqa: E402
    GIB,
    L2_FIT_FACTOR,
    RAW_CHECK_ROWS,
    QueueGuard,
    check_pool,
    fill_noise,
    gbps,
    gpu_seconds,
    int_list,
    l2_bytes,
    log,
    names_in,
    raw_rows_match,
    rotating,
    share_text,
    sorted_launch,
    sync,
    thp_text,
)
from ibp_graph.pinned import PAGE_KINDS, transparent_huge_pages  # noqa: E402

WIDTHS = (256, 512, 1024, 4096)
SPANS_MB = (32, 128, 512, 1024, 2048)
MIB = 1 << 20


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--table-gb", type=float, default=4.0, help="GiB pinned per page kind")
    p.add_argument(
        "--kinds",
        type=names_in(PAGE_KINDS, "page kinds"),
        default=list(PAGE_KINDS),
        help=f"page kinds to compare (default: {','.join(PAGE_KINDS)})",
    )
    p.add_argument(
        "--widths",
        type=int_list,
        default=list(WIDTHS),
        help="row bytes",
    )
    p.add_argument(
        "--spans-mb",
        type=int_list,
        default=list(SPANS_MB),
        help="MiB the ids range over, besides the whole buffer",
    )
    p.add_argument("--batch", type=int, default=100_000, help="ids per batch")
    p.add_argument("--id-batches", type=int, default=4, help="id batches per width and span")
    p.add_argument("--repeats", type=int, default=5, help="timed samples per kind and cell")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--time-budget", type=float, default=150.0, help="seconds; no width starts after"
    )
    add_out(p)
    p.add_argument("--dry-run", action="store_true", help="no GPU: print the plan")
    args = p.parse_args(argv)
    if args.table_gb <= 0:
        p.error(f"--table-gb must be positive, got {args.table_gb}")
    if len(set(args.kinds)) != len(args.kinds):
        p.error(f"--kinds names a kind twice: {','.join(args.kinds)}")
    for flag in ("batch", "id_batches", "repeats"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    args.table_bytes = int(args.table_gb * GIB)
    if any(w > args.table_bytes for w in args.widths):
        p.error(f"--widths: a row of {max(args.widths)} B is wider than the table")
    return args


def spans(args: argparse.Namespace) -> list[int]:
    """The spans in bytes, ascending: ``--spans-mb`` below the buffer's size, then the buffer."""
    below = sorted({s * MIB for s in args.spans_mb if s * MIB < args.table_bytes})
    return [*below, args.table_bytes]


def cells(args: argparse.Namespace) -> list[tuple[int, int, bool]]:
    """Every (row width, span bytes, sorted) measured, in order: per width, the spans, then
    the whole buffer with its ids sorted."""
    out = []
    for width in args.widths:
        out += [(width, span, False) for span in spans(args)]
        out.append((width, args.table_bytes, True))
    return out


def order(kinds: Sequence[str], repeat: int) -> list[str]:
    """The kinds in the order timed at ``repeat``: rotated by one place per repeat."""
    k = repeat % len(kinds)
    return [*kinds[k:], *kinds[:k]]


class Buffers:
    """One pinned buffer of each page kind, filled with the same bytes.

    Args:
        args: the parsed arguments.
        device: the CUDA device (tests: the CPU, with ``cuda`` a stand-in).
        cuda: CuPy's ``cuda`` module (what `ibp_graph.pinned.PinnedBuffer` pins with).
    """

    def __init__(self, args: argparse.Namespace, device: torch.device, cuda: Any) -> None:
        from ibp_graph.pinned import PinnedBuffer, PinningError

        self.device = device
        self.buffers: dict[str, Any] = {}
        self.ptrs: dict[str, int] = {}
        self.info: dict[str, dict] = {}
        try:
            for kind in args.kinds:
                t0 = time.perf_counter()
                try:
                    buf = PinnedBuffer(args.table_bytes, f"{kind} pages", cuda, pages=kind)
                    self.buffers[kind] = buf
                    fill_noise(buf.array, args.table_bytes, args.seed)
                    share = buf.huge_page_share()  # after the first touch, before pinning
                    with cuda.Device(device.index or 0):
                        self.ptrs[kind] = buf.pin()
                except PinningError as exc:  # the other kinds are still worth measuring
                    self.buffers.pop(kind, None)
                    self.info[kind] = {"error": str(exc)}
                    log(f"pages: {kind}: not measured: {exc}")
                    continue
                self.info[kind] = {"huge_page_share": share, "pin_s": time.perf_counter() - t0}
                log(
                    f"pages: {kind}: {args.table_gb:g} GiB filled and pinned in "
                    f"{self.info[kind]['pin_s']:.1f} s, {share_text(share)} in huge pages"
                )
        except BaseException:
            self.close()
            raise

    def host_rows(self, kind: str, width: int, rows: int) -> torch.Tensor:
        """The first ``rows`` rows of ``width`` bytes of ``kind``'s buffer, a CPU tensor."""
        return torch.from_numpy(self.buffers[kind].array[: rows * width]).view(rows, width)

    def close(self) -> None:
        sync(self.device)
        for buf in self.buffers.values():
            buf.close()
        self.buffers = {}


def gather_launch(
    ptr: int, rows: int, width: int, out: torch.Tensor, error: torch.Tensor, *, sort: bool
) -> Callable[[torch.Tensor], None]:
    """``launch(ids)``: the library's raw gather of rows ``ids`` (``sort``: ids sorted first)."""
    from ibp_graph.kernels import raw_gather as launcher

    def gather(idx: torch.Tensor, out_pos: torch.Tensor | None = None) -> None:
        launcher.raw_gather(ptr, rows, width, idx, out, error, out_pos=out_pos)

    return sorted_launch(gather) if sort else gather


def measure_cell(
    args: argparse.Namespace,
    bufs: Buffers,
    guard: QueueGuard,
    width: int,
    span: int,
    is_sorted: bool,
    out: torch.Tensor,
    error: torch.Tensor,
) -> dict:
    """Time every kind's gather of one (width, span, sorted) cell, kinds in rotating order."""
    device = bufs.device
    rows = span // width
    gen = torch.Generator(device=device).manual_seed(args.seed + width)
    pool = [
        torch.randint(0, rows, (args.batch,), device=device, generator=gen)
        for _ in range(args.id_batches)
    ]
    launches = {
        k: gather_launch(bufs.ptrs[k], rows, width, out, error, sort=is_sorted) for k in bufs.ptrs
    }
    samples: dict[str, list[float]] = {k: [] for k in launches}
    for repeat in range(args.repeats):
        for kind in order(list(launches), repeat):
            samples[kind].append(gpu_seconds(rotating(launches[kind], pool), 1, guard, device))
    nbytes = args.batch * width
    rates = {}
    for kind, secs in samples.items():
        seconds = statistics.median(secs)
        rates[kind] = {
            "seconds": seconds,
            "gbps": gbps(nbytes, seconds),
            "mrows_per_s": args.batch / seconds / 1e6 if seconds > 0 else float("nan"),
        }
    checked = {}
    if span == args.table_bytes:  # the whole buffer: every kind's rows checked
        k = min(args.batch, RAW_CHECK_ROWS)
        for kind, launch in launches.items():
            host = bufs.host_rows(kind, width, rows)
            checked[kind] = check_pool(launch, pool, out, raw_rows_match(out, host, pool, k))
    return {
        "width": width,
        "span_bytes": span,
        "sorted": is_sorted,
        "rows": rows,
        "span_fits_l2": span < L2_FIT_FACTOR * l2_bytes(device),
        "rates": rates,
        "correct": checked,
        "errors": [int(v) for v in error.tolist()],
    }


def memcpy_gbps(args: argparse.Namespace, width: int, guard: QueueGuard, device) -> float:
    """One pinned host-to-device copy of a batch's bytes (cudaMemcpyAsync), in GB/s."""
    nbytes = args.batch * width
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=device.type == "cuda")
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    seconds = gpu_seconds(lambda: dst.copy_(src, non_blocking=True), args.repeats, guard, device)
    return gbps(nbytes, seconds)


def span_label(cell: dict, table_bytes: int) -> str:
    """A cell's span for a results page: its size, whether it is the whole buffer, sorted ids,
    and whether it fits in L2."""
    size = cell["span_bytes"]
    text = f"{size / GIB:g} GiB" if size >= GIB else f"{size / MIB:g} MiB"
    text += " (whole buffer)" if size == table_bytes else ""
    text += ", ids sorted" if cell["sorted"] else ""
    return text + (" (fits in L2)" if cell.get("span_fits_l2") else "")


def effects(payload: dict) -> list[str]:
    """Per width and kind: the smallest span's rate and the sorted ids' rate over the whole
    buffer's, the two ratios that say whether translation limits the gather."""
    lines = []
    table = payload["settings"]["table_bytes"]
    for width in sorted({c["width"] for c in payload["cells"]}):
        mine = [c for c in payload["cells"] if c["width"] == width]
        whole = next((c for c in mine if c["span_bytes"] == table and not c["sorted"]), None)
        if whole is None:
            continue
        small = min((c for c in mine if not c["sorted"]), key=lambda c: c["span_bytes"])
        ordered = next((c for c in mine if c["sorted"]), None)
        parts = []
        for kind, rate in whole["rates"].items():
            base = rate["gbps"]
            near = small["rates"][kind]["gbps"] / base if base else float("nan")
            text = f"{kind}: smallest span {near:.2f}x"
            if ordered is not None:
                text += f", sorted {ordered['rates'][kind]['gbps'] / base:.2f}x" if base else ""
            parts.append(text)
        lines.append(f"- {width:,} B rows, against the whole buffer unsorted: " + "; ".join(parts))
    return lines


def markdown(payload: dict) -> str:
    s = payload["settings"]
    kinds = [k for k in s["kinds"] if "error" not in payload["kinds"].get(k, {})]
    lines = [
        *header_lines("Raw zero-copy gather by page kind and span of the ids", payload),
        f"Buffers of {s['table_gb']:g} GiB pinned per page kind; batches of {s['batch']:,} ids "
        f"uniform over the span's rows ({s['id_batches']} batches per cell, each timed launch "
        f"takes the next); GPU rates: CUDA events, median of {s['repeats']} samples per kind, "
        "the kinds timed in turn in a rotating order; the library's raw gather at its default "
        "grid (a fetch on the current stream). GB/s, then millions of rows per second, then "
        "the ratio to memcpy (a pinned host-to-device copy of one batch's bytes). (fits in "
        f"L2): a span under {L2_FIT_FACTOR}x the L2 of {payload['l2_bytes'] / MIB:.1f} MiB, "
        "whose rows may be read from L2. "
        + ("" if payload["complete"] else f"**Incomplete run: {payload['stopped']}**"),
        "",
        f"Page kinds ({thp_text(payload.get('transparent_huge_pages'))}):",
        "",
        "| kind | allocation | in transparent huge pages | filled and pinned (s) |",
        "|---|---|---|---|",
    ]
    alloc = {
        "huge": "private anonymous, MADV_HUGEPAGE before the first touch",
        "small": "shared anonymous, 4 KiB pages",
        "cuda": "cudaHostAlloc (the driver's pages: smaps cannot see their size)",
    }
    for kind in s["kinds"]:
        info = payload["kinds"].get(kind, {})
        if "error" in info:
            lines.append(f"| {kind} | {alloc[kind]} | not measured: {info['error']} | - |")
            continue
        lines.append(
            f"| {kind} | {alloc[kind]} | {share_text(info.get('huge_page_share'))} "
            f"| {info.get('pin_s', float('nan')):.1f} |"
        )
    for width in sorted({c["width"] for c in payload["cells"]}):
        memcpy = payload["memcpy_gbps"].get(str(width), float("nan"))
        lines += [
            "",
            f"## {width:,} B rows (memcpy {memcpy:.1f} GB/s)",
            "",
            "| span | rows | " + " | ".join(kinds) + " | checked |",
            "|---|---|" + "---|" * len(kinds) + "---|",
        ]
        for cell in payload["cells"]:
            if cell["width"] != width:
                continue
            rates = []
            for kind in kinds:
                r = cell["rates"][kind]
                rates.append(
                    f"{r['gbps']:.1f} ({r['mrows_per_s']:.1f} M, {r['gbps'] / memcpy:.2f}x)"
                )
            checked = cell["correct"]
            lines.append(
                f"| {span_label(cell, s['table_bytes'])} "
                f"| {cell['rows']:,} | "
                + " | ".join(rates)
                + " | "
                + (
                    ("bit-identical" if all(checked.values()) else "**wrong rows**")
                    if checked
                    else "-"
                )
                + " |"
            )
    lines += ["", "Ratios:", "", *effects(payload), ""]
    return "\n".join(lines)


def write_results(payload: dict, out: Path, name: str) -> Path:
    return write_json_md(name, payload, lambda: markdown(payload), out)


def run(args: argparse.Namespace, device: torch.device, cuda: Any, env: dict, name: str) -> dict:
    """Pin the buffers, measure every cell, rewrite the results after each width."""
    start = time.perf_counter()
    payload = {
        **env,
        "settings": {
            **{k: v for k, v in vars(args).items() if k not in ("out", "dry_run")},
            "table_bytes": args.table_bytes,
        },
        "transparent_huge_pages": transparent_huge_pages(),
        "l2_bytes": l2_bytes(device),
        "kinds": {},
        "memcpy_gbps": {},
        "cells": [],
        "complete": False,
        "stopped": "the run was cut short (or is still running)",
    }
    guard = QueueGuard(device)
    payload["settings"]["queue_guard"] = guard.on
    bufs = Buffers(args, device, cuda)
    payload["kinds"] = bufs.info
    widths_done = set()
    try:
        if not bufs.ptrs:
            raise SystemExit(f"pages: no page kind could be pinned: {bufs.info}")
        out = torch.empty(args.batch * max(args.widths), dtype=torch.uint8, device=device)
        error = torch.zeros(2, dtype=torch.int32, device=device)
        for width, span, is_sorted in cells(args):
            if width not in widths_done:
                spent = time.perf_counter() - start
                if spent > args.time_budget:
                    payload["stopped"] = (
                        f"time budget of {args.time_budget:.0f} s spent; not run: widths "
                        + ", ".join(str(w) for w in args.widths if w not in widths_done)
                    )
                    log(f"pages: {payload['stopped']}")
                    break
                if widths_done:
                    write_results(payload, args.out, name)
                widths_done.add(width)
                payload["memcpy_gbps"][str(width)] = memcpy_gbps(args, width, guard, device)
            view = out[: args.batch * width].view(args.batch, width)
            cell = measure_cell(args, bufs, guard, width, span, is_sorted, view, error)
            payload["cells"].append(cell)
            log(
                f"pages: {width} B, span {span / MIB:g} MiB{' sorted' if is_sorted else ''}: "
                + ", ".join(f"{k} {r['gbps']:.1f} GB/s" for k, r in cell["rates"].items())
            )
        else:
            payload["complete"] = True
            payload["stopped"] = ""
    finally:
        bufs.close()
    payload["elapsed_s"] = time.perf_counter() - start
    write_results(payload, args.out, name)
    return payload


def main(argv: Sequence[str] | None = None) -> dict | list:
    args = parse_args(argv)
    if args.dry_run:
        plan = cells(args)
        print(
            f"pages: {len(args.kinds)} buffers of {args.table_gb:g} GiB "
            f"({', '.join(args.kinds)}), {len(plan)} cells x {args.repeats} repeats x "
            f"{len(args.kinds)} kinds; needs a CUDA GPU to measure"
        )
        for width, span, is_sorted in plan:
            print(f"  {width} B rows, span {span / MIB:g} MiB{', sorted' if is_sorted else ''}")
        return plan
    if not torch.cuda.is_available():
        raise SystemExit(
            "benchmarks/pages.py needs a CUDA GPU (torch.cuda.is_available() is False); "
            "--dry-run prints the plan"
        )
    from ibp_graph.kernels.runtime import cupy

    cp = cupy()
    device = torch.device("cuda", torch.cuda.current_device())
    env = environment()
    if argv is not None:
        env["command"] = " ".join(["python", "benchmarks/pages.py", *argv])
    env["host"], env["device"] = env["device"], torch.cuda.get_device_name(device)
    env["cupy"] = cp.__version__
    name = result_name("pages", device)
    payload = run(args, device, cp.cuda, env, name)
    print((args.out / f"{name}.md").read_text())
    return payload


if __name__ == "__main__":
    main()
