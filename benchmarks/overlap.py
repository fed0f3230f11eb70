"""A fetch on a side stream beside GraphSAGE training steps: how much it slows the steps.

Usage::

    python benchmarks/overlap.py --device cuda                        # on a GPU machine
    .venv/bin/python benchmarks/overlap.py --device cpu --nodes 20000  # CPU: checks the script

writes ``benchmarks/results/overlap-<device>.{json,md}`` and, when matplotlib imports,
``overlap-<device>.png`` (one timeline per case: training steps and fetches, in ms).

The training step: GraphSAGE (3 ``SAGEConv`` layers, hidden ``--hidden``) forward, backward and
an Adam step on one batch sampled from a power-law graph (`benchmarks.sampling.power_law_edges`,
``--nodes`` nodes, 25 edges per node; fanouts [15, 10, 5], ``--batch-size`` seeds) whose
feature rows are already in GPU memory: compute only, on the training stream.

The fetches: the feature rows of other sampled batches of the same graph, read from a table in
pinned host memory, on a side stream (torch's default priority, the lowest): ``raw``
(`PinnedRawTable`, the zero-copy gather) and ``ibp`` (`CudaIBPTable`, fused fetch and
decode), for two synthetic float32 tables of ``--nodes`` rows: ``dense`` (128 normal values,
512-byte rows) and ``sparse`` (500 values, 1.3% of them 1.0, the rest 0.0, like a
bag-of-words). Each fetch case runs with the default grid of a side-stream fetch
(`SIDE_STREAM_BLOCKS_PER_SM`: a block on a quarter of the SMs), with every ``--max-blocks``
cap (blocks per SM; the default 0.001 is one block in all on a GPU of under 1,500 SMs, as
`benchmarks._env.grid_cap` keeps at least one: "one block in all (1)"), and at the default
grid launched in chunks of each ``--chunk-rows`` rows (the tables' ``chunk_rows``: a fetch
runs as several kernels, so its blocks leave the SMs between chunks; "-" in the "chunk rows"
column where unchunked; a table without the attribute runs no chunked cases, with a note),
and at the default grid in blocks of each ``--block-warps`` warps (the tables' ``block_warps``:
the same SMs, more rows in flight on them; "-" in the "block warps" column for the default,
8; none by default), each with the training stream at default and at high priority. By
default that is (1 default grid + 4 caps + 3 chunk sizes) x 2 training streams = 16 cases per
table and fetch, 64 in all (32 before the one-block and chunked cases); on the CPU only the
default grid runs (4 cases): grid caps, chunks and block sizes are GPU launches.

A round records an origin event on the training stream; the side stream waits for it and then
queues its fetches (enough to outlast the steps) while the training stream queues ``--steps``
steps. Every step and every fetch is bracketed by CUDA events: the timeline, in ms from the
origin. Per case, over ``--rounds`` rounds: the median time of the steps that ran entirely
while fetches were running, against the median step time of rounds without fetches (the
slowdown; target at most 1.10, judged by `benchmarks._targets`: met, the gap in percent of the
goal, or not measured where no step ran entirely beside fetches), and the median fetch time
alone against beside the steps (fetched GB/s, decoded). A round of fetches alone queues
``--fetches-alone`` fetches, or fewer where a fetch is slow (enough for about
`FETCH_ALONE_ROUND_MS`, at least 2: a fetch in one block is expected to be slow), after one
fetch that warms the case up and sets that count. On the CPU there are no streams: steps and
fetches run one after the other, so the slowdown says nothing and is reported as not applying.

Kernels (``--profile-case TABLE/FETCH[/CAP]``, default ``dense/ibp``: the dense table, the
IBP fetch, the default grid, unchunked, default training stream; CAP is ``default`` or one of
the ``--max-blocks`` values; ``none``: off): after that case's measured rounds, torch.profiler
(CUDA activities) records one more round of steps alone and one beside fetches (the same
round functions; the profiler is never on during a measured round). The training stream is
the stream that ran the most kernel time in the round alone; its kernels and copies are
grouped by name (calls and ms per step, alone and beside, the ms added beside the fetches,
the grids in blocks, the blocks' threads, and what a block holds: its registers and shared
memory, from the trace's "registers per thread" and "shared memory"), the 8 that gained the
most are listed, the rest summed; every other stream's kernels in the round beside are the
fetch's (count, total ms and what their blocks hold): whether a training kernel's block and
a fetch block fit on one SM together. JSON: ``profile``; a table under the main one. On the
CPU it is skipped, with a note.

JSON, besides the settings and environment: ``cases`` (per case its labels, ``grid_blocks``
(None: the default grid), ``chunk_rows`` (None: unchunked), ``block_warps`` (None: the
default), the summary and
``fetches_alone_per_round``), ``profile``, ``notes`` (cases not run, and why), ``timelines``,
``complete`` and ``elapsed_s`` (the run's wall time: benchmarks/gpu_session.sh gives it 450
s). The JSON and Markdown are written after every case (``complete`` false, the Markdown
saying so) and once more at the end with the chart, so a run cut off leaves what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ibp_graph  # noqa: E402
from benchmarks._env import (  # noqa: E402
    add_out,
    block_warps_arg,
    blocks_per_sm,
    environment,
    grid_cap,
    header_lines,
    result_name,
    write_json_md,
)
from benchmarks._targets import check, verdict  # noqa: E402
from benchmarks.epoch_timeline import union  # noqa: E402
from benchmarks.sampling import power_law_edges  # noqa: E402
from ibp_graph.cli._common import positive_int_arg  # noqa: E402
from ibp_graph.graph import CSRGraph  # noqa: E402
from ibp_graph.kernels.runtime import SIDE_STREAM_BLOCKS_PER_SM  # noqa: E402
from ibp_graph.sampler import NeighborSampler  # noqa: E402
from ibp_graph.train.models import graphsage  # noqa: E402

#: A step is slowed by a fetch beside it by at most this factor (the target).
TARGET_SLOWDOWN = 1.10
EDGES_PER_NODE = 25
#: A round of fetches alone lasts about this long (ms) at most, or ``--fetches-alone`` fetches.
FETCH_ALONE_ROUND_MS = 300.0
#: Training-stream kernels listed by the profile: those that gained the most beside fetches.
PROFILE_TOP = 8
FANOUTS = [15, 10, 5]
CLASSES = 47


# --------------------------------------------------------------------------------------------
# Timing marks: CUDA events on a GPU, host clock readings on the CPU
# --------------------------------------------------------------------------------------------


class Clock:
    """Marks on a stream (CUDA events) or on the host clock (CPU), read in ms from an origin."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self, stream: Any = None) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def ms(self, origin: Any, mark: Any) -> float:
        if not self.cuda:
            return (mark - origin) * 1e3
        return origin.elapsed_time(mark)

    def on(self, stream: Any) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------
# What the timelines say
# --------------------------------------------------------------------------------------------


#: Fetches closer than this (ms) count as back to back: on an H100 the event recorded between
#: two queued fetches leaves about 2 us between one's end and the next one's start.
JOIN_MS = 0.02


def covered(interval: tuple[float, float], spans: list[tuple[float, float]]) -> bool:
    """Whether ``interval`` lies inside the union of ``spans``: a fetch ran all through it.

    Spans that overlap, or lie at most `JOIN_MS` apart (queued back to back), merge; a longer
    gap between two fetches (the side stream drained) splits them, so a step across the gap
    ran partly alone and does not count.
    """
    for lo, hi in union(spans, join=JOIN_MS):
        if lo <= interval[0] and interval[1] <= hi:
            return True
    return False


def case_summary(alone: list[list], beside: list[dict], fetch_alone: list[list]) -> dict:
    """Slowdown and fetch times of a case from its rounds' timelines (ms intervals).

    Args:
        alone: per round without fetches, the step intervals.
        beside: per round with fetches, ``{"steps": [...], "fetches": [...]}``.
        fetch_alone: per round without steps, the fetch intervals.
    """
    step_alone = [e - s for r in alone for s, e in r]
    steps_beside = [e - s for r in beside for s, e in r["steps"] if covered((s, e), r["fetches"])]
    fetch_beside = [e - s for r in beside for s, e in r["fetches"]]
    fetch_solo = [e - s for r in fetch_alone for s, e in r]
    med = statistics.median
    out = {
        "step_alone_ms": med(step_alone),
        "steps_covered": len(steps_beside),
        "step_beside_ms": med(steps_beside) if steps_beside else None,
        "fetch_alone_ms": med(fetch_solo),
        "fetch_beside_ms": med(fetch_beside) if fetch_beside else None,
    }
    out["slowdown"] = (
        out["step_beside_ms"] / out["step_alone_ms"] if out["step_beside_ms"] else None
    )
    return out


# --------------------------------------------------------------------------------------------
# Set-up
# --------------------------------------------------------------------------------------------


@dataclass
class Work:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    x: torch.Tensor
    edge_index: torch.Tensor
    y: torch.Tensor
    batch_size: int
    fetch_ids: list[torch.Tensor]


def make_tables(kind: str, n: int, device: torch.device, workdir: Path) -> dict:
    """The raw and IBP tables of ``kind`` (``dense`` or ``sparse``), ``n`` rows."""
    gen = torch.Generator().manual_seed(1)
    if kind == "dense":
        data = torch.randn(n, 128, generator=gen).numpy()
    else:
        data = (torch.rand(n, 500, generator=gen) < 0.013).to(torch.float32).numpy()
    path = workdir / f"overlap-{kind}-{n}.ibp"
    cpu_table = None
    if device.type == "cuda":
        try:  # the GPU encoder (the same bytes); the CPU one is the fallback
            cpu_table = ibp_graph.compress(data, path, device="cuda", progress=False)
        except Exception as exc:  # noqa: BLE001 - reported, then the CPU encoder
            print(f"GPU encoder failed ({exc}); compressing on the CPU", file=sys.stderr)
    if cpu_table is None:
        cpu_table = ibp_graph.compress(data, path, progress=False)
    if device.type == "cuda":
        from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable

        raw = PinnedRawTable(data, device=device)
        tables = {"raw": raw, "ibp": CudaIBPTable(path, device=device)}
    else:
        tables = {"raw": torch.from_numpy(data), "ibp": cpu_table}
    return {"tables": tables, "row_bytes": data.shape[1] * 4, "ratio": cpu_table.ratio}


def fetch(table: Any, ids: torch.Tensor) -> torch.Tensor:
    if isinstance(table, torch.Tensor):
        return table.index_select(0, ids)
    if hasattr(table, "fetch"):
        # The side stream (also the current one here), given as a prefetch gives it: the
        # default grid of a fetch beside training.
        return table.fetch(ids, stream=torch.cuda.current_stream(), check=False)
    return table[ids]


def make_work(graph: CSRGraph, dense: Any, args: argparse.Namespace, device) -> Work:
    sampler = NeighborSampler(graph, FANOUTS, seed=args.seed)
    order = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(2))
    batches = order[: (args.fetch_batches + 1) * args.batch_size].view(-1, args.batch_size)
    first = sampler.sample(batches[0].to(device))
    x = fetch(dense, first.node).to(device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    ids = [sampler.sample(b.to(device)).node for b in batches[1:]]
    torch.manual_seed(args.seed)
    model = graphsage(x.shape[1], args.hidden, CLASSES, layers=len(FANOUTS)).to(device)
    y = torch.randint(0, CLASSES, (args.batch_size,), device=device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return Work(model, opt, x, first.edge_index.to(device), y, args.batch_size, ids)


def train_step(w: Work) -> None:
    w.optimizer.zero_grad(set_to_none=True)
    out = w.model(w.x, w.edge_index)[: w.batch_size]
    F.cross_entropy(out, w.y).backward()
    w.optimizer.step()


# --------------------------------------------------------------------------------------------
# Rounds
# --------------------------------------------------------------------------------------------


def run_round(
    clock: Clock, w: Work, table: Any, steps: int, fetches: int, main: Any, side: Any
) -> dict:
    """One round: ``steps`` steps on ``main`` and ``fetches`` fetches on ``side``.

    The fetches are queued in chunks before each step (the rest after the last one), so the
    host keeps both streams fed; on a GPU they run together from the origin on.
    """
    marks_f, marks_s = [], []

    def queue_fetches(count: int) -> None:
        with clock.on(side):
            for _ in range(count):
                a = clock.mark(side)
                fetch(table, w.fetch_ids[len(marks_f) % len(w.fetch_ids)])
                marks_f.append((a, clock.mark(side)))

    chunk = -(-fetches // max(steps, 1))
    with clock.on(main):
        origin = clock.mark(main)
        if clock.cuda and fetches:
            side.wait_event(origin)
        for _ in range(steps):
            queue_fetches(min(chunk, fetches - len(marks_f)))
            a = clock.mark(main)
            train_step(w)
            marks_s.append((a, clock.mark(main)))
        queue_fetches(fetches - len(marks_f))
    clock.sync()
    return {  # [start, end] lists, as they read back from JSON
        "steps": [[clock.ms(origin, a), clock.ms(origin, b)] for a, b in marks_s],
        "fetches": [[clock.ms(origin, a), clock.ms(origin, b)] for a, b in marks_f],
    }


def fetches_alone(fetch_ms: float, most: int) -> int:
    """Fetches in a round alone: ``most``, or fewer (at least 2) where that many fetches of
    ``fetch_ms`` would take longer than `FETCH_ALONE_ROUND_MS`."""
    return min(most, max(2, int(FETCH_ALONE_ROUND_MS // max(fetch_ms, 1e-6))))


def measure_case(clock, w, table, args, main, side) -> tuple[dict, dict]:
    """Rounds alone and together; the summary and one timeline for the chart."""
    alone = [run_round(clock, w, table, args.steps, 0, main, side)["steps"] for _ in range(2)]
    # One fetch first: it warms the case up (its grid, its chunks), and sets how many fetches
    # a round alone can queue (a fetch in a single block is expected to be slow).
    (probe,) = run_round(clock, w, table, 0, 1, main, side)["fetches"]
    n_alone = fetches_alone(probe[1] - probe[0], args.fetches_alone)
    fetch_alone = [run_round(clock, w, table, 0, n_alone, main, side)["fetches"] for _ in range(2)]
    step_ms = statistics.median(e - s for r in alone for s, e in r)
    fetch_ms = statistics.median(e - s for r in fetch_alone for s, e in r)
    # Enough fetches to outlast the steps (they start together), at most --max-fetches.
    count = min(args.max_fetches, int(np.ceil(1.5 * args.steps * step_ms / max(fetch_ms, 1e-6))))
    beside = [
        run_round(clock, w, table, args.steps, max(count, 1), main, side)
        for _ in range(args.rounds)
    ]
    summary = case_summary(alone, beside, fetch_alone)
    summary["fetches_per_round"] = max(count, 1)
    summary["fetches_alone_per_round"] = n_alone
    return summary, beside[len(beside) // 2]


# --------------------------------------------------------------------------------------------
# Cases: grid caps and chunks
# --------------------------------------------------------------------------------------------


def grid_label(cap: int | None, sms: int) -> str:
    """A case's grid in the tables: the default, one block in all, or blocks per SM."""
    if cap is None:
        return f"default ({SIDE_STREAM_BLOCKS_PER_SM:g}/SM)"
    if cap == 1:
        return "one block in all (1)"
    return f"{cap / sms:g}/SM ({cap})"


def plan_cases(
    caps: list[int | None], chunks: list[int], warps: list[int] | tuple = ()
) -> list[tuple[int | None, int | None, int | None]]:
    """A table's (grid cap, chunk rows, block warps) cases: every distinct cap unchunked in
    default blocks (None: the default grid), then the default grid in chunks of each of
    ``chunks`` rows, then the default grid in blocks of each of ``warps`` warps."""
    out: list[tuple[int | None, int | None, int | None]] = []
    wanted = [(cap, None, None) for cap in caps]
    wanted += [(None, rows, None) for rows in chunks]
    wanted += [(None, None, w) for w in warps]
    for case in wanted:
        if case not in out:
            out.append(case)
    return out


@contextlib.contextmanager
def configured(
    table: Any, max_blocks: int | None, chunk_rows: int | None, block_warps: int | None = None
) -> Iterator[dict]:
    """``table`` with its ``max_blocks``, ``chunk_rows`` and ``block_warps`` set, those it has
    (a table without one is left without it; ``block_warps`` only when given); their values
    before are set back on leaving. Yields the attributes set."""
    saved, given = {}, {}
    asked = [("max_blocks", max_blocks), ("chunk_rows", chunk_rows)]
    if block_warps is not None:
        asked.append(("block_warps", block_warps))
    for attr, value in asked:
        if hasattr(table, attr):
            saved[attr] = getattr(table, attr)
            setattr(table, attr, value)
            given[attr] = value
    try:
        yield given
    finally:
        for attr, value in saved.items():
            setattr(table, attr, value)


# --------------------------------------------------------------------------------------------
# Kernels of one case: torch.profiler over a round alone and a round beside fetches
# --------------------------------------------------------------------------------------------

#: Chrome-trace categories of GPU work (kineto's names, older spellings too).
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


def gpu_activities(trace: dict) -> list[dict]:
    """The GPU kernels, copies and sets of a torch.profiler chrome trace: name, stream, ms,
    grid and block, and a kernel's registers per thread and shared memory per block (bytes,
    static and dynamic), where the trace has them."""
    out = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() not in GPU_CATEGORIES:
            continue
        info = e.get("args") or {}
        out.append(
            {
                "name": str(e.get("name", "?")),
                "stream": info.get("stream", e.get("tid")),
                "ms": float(e.get("dur", 0.0)) / 1e3,
                "grid": info.get("grid"),
                "block": info.get("block"),
                "registers": info.get("registers per thread"),
                "smem": info.get("shared memory"),
            }
        )
    return out


def _count(dims: Any) -> int | None:
    """Blocks in a grid (or threads in a block) from its ``[x, y, z]``."""
    if not isinstance(dims, (list, tuple)) or not dims:
        return None
    return int(np.prod([int(d) for d in dims]))


def _new_group() -> dict:
    return {"calls": 0, "ms": 0.0, "grids": set(), "threads": None, "registers": None, "smem": None}


def _group(events: list[dict]) -> dict[str, dict]:
    groups: dict[str, dict] = {}
    for e in events:
        g = groups.setdefault(e["name"], _new_group())
        g["calls"] += 1
        g["ms"] += e["ms"]
        if _count(e["grid"]) is not None:
            g["grids"].add(_count(e["grid"]))
        g["threads"] = g["threads"] or _count(e["block"])
        for key in ("registers", "smem"):  # the first launch's that has them
            if g[key] is None and isinstance(e.get(key), (int, float)):
                g[key] = int(e[key])
    return groups


def block_share(threads: int | None, regs: int | None, smem: int | None) -> str:
    """A block's registers (threads x registers a thread) and shared memory, for the table."""
    if not threads or regs is None:
        return "-"
    text = f"{threads * regs:,} regs"
    return text + (f", {smem:,} B smem" if smem is not None else "")


def kernel_summary(
    alone: list[dict], beside: list[dict], steps: int, fetches: int, top: int = PROFILE_TOP
) -> dict:
    """The training stream's kernels alone and beside fetches, per step, and the fetch's.

    Args:
        alone: `gpu_activities` of a round of ``steps`` steps without fetches.
        beside: those of a round of ``steps`` steps beside ``fetches`` fetches.

    The training stream is the one with the most GPU time in ``alone`` (the only one busy
    there); in ``beside`` every other stream's work is the fetches'. Kernels are grouped by
    name: ``top`` by added ms per step, then the rest summed in ``others``.
    """
    per_stream: dict[Any, float] = {}
    for e in alone:
        per_stream[e["stream"]] = per_stream.get(e["stream"], 0.0) + e["ms"]
    if not per_stream:
        raise ValueError("the profiled round alone recorded no GPU kernels")
    train = max(per_stream, key=lambda k: per_stream[k])
    a = _group([e for e in alone if e["stream"] == train])
    b = _group([e for e in beside if e["stream"] == train])
    fetch_events = [e for e in beside if e["stream"] != train]
    rows = []
    for name in sorted(a.keys() | b.keys()):
        ga, gb = a.get(name, _new_group()), b.get(name, _new_group())
        rows.append(
            {
                "name": name,
                "calls_per_step_alone": ga["calls"] / steps,
                "calls_per_step_beside": gb["calls"] / steps,
                "ms_per_step_alone": ga["ms"] / steps,
                "ms_per_step_beside": gb["ms"] / steps,
                "added_ms_per_step": (gb["ms"] - ga["ms"]) / steps,
                "grid_blocks": sorted(ga["grids"] | gb["grids"]),
                "block_threads": ga["threads"] or gb["threads"],
                "registers_per_thread": (
                    ga["registers"] if ga["registers"] is not None else gb["registers"]
                ),
                "smem_per_block": ga["smem"] if ga["smem"] is not None else gb["smem"],
            }
        )
    rows.sort(key=lambda r: -r["added_ms_per_step"])
    rest = rows[top:]
    keys = ("calls_per_step_alone", "calls_per_step_beside", "ms_per_step_alone")
    keys += ("ms_per_step_beside", "added_ms_per_step")
    return {
        "train_stream": train,
        "fetch_streams": sorted({e["stream"] for e in fetch_events}, key=str),
        "steps": steps,
        "fetches": fetches,
        "train_ms_per_step": {
            "alone": sum(g["ms"] for g in a.values()) / steps,
            "beside": sum(g["ms"] for g in b.values()) / steps,
        },
        "kernel_names": len(rows),
        "kernels": rows[:top],
        "others": {"names": len(rest)} | {k: sum(r[k] for r in rest) for k in keys},
        "fetch_kernels": {
            "launches": len(fetch_events),
            "ms": sum(e["ms"] for e in fetch_events),
            "ms_per_fetch": sum(e["ms"] for e in fetch_events) / max(fetches, 1),
            "names": sorted({e["name"] for e in fetch_events}),
            "blocks": {
                name: block_share(g["threads"], g["registers"], g["smem"])
                for name, g in sorted(_group(fetch_events).items())
            },
        },
    }


def parse_profile_case(text: str) -> str | None:
    """``--profile-case``: ``TABLE/FETCH[/CAP]`` (CAP: ``default`` or blocks per SM), or
    ``none``; returned in that form (argparse type)."""
    if text.strip().lower() == "none":
        return None
    parts = text.strip().split("/")
    ok = len(parts) in (2, 3) and parts[0] in ("dense", "sparse") and parts[1] in ("raw", "ibp")
    if ok and len(parts) == 3 and parts[2] != "default":
        try:
            blocks_per_sm(parts[2])
        except argparse.ArgumentTypeError:
            ok = False
    if not ok:
        raise argparse.ArgumentTypeError(
            "must be TABLE/FETCH[/CAP] (TABLE dense or sparse, FETCH raw or ibp, CAP default "
            f"or blocks per SM, e.g. dense/ibp or dense/ibp/0.001) or none, got {text!r}"
        )
    return "/".join(parts)


def profile_target(text: str | None, device: torch.device) -> tuple | None:
    """The case ``--profile-case`` names: ``(table, fetch, grid cap)``, or None."""
    if text is None:
        return None
    table, name, *cap = text.split("/")
    per_sm = None if not cap or cap[0] == "default" else blocks_per_sm(cap[0])
    return table, name, grid_cap(per_sm, device)


def profile_round(clock, w, table, steps, fetches, main, side, trace: Path) -> tuple:
    """One round (`run_round`) under torch.profiler (CUDA activities): its GPU activities and
    its timeline. (Off CUDA it records CPU activities, which only tests read.)"""
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if clock.cuda else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        timeline = run_round(clock, w, table, steps, fetches, main, side)
    prof.export_chrome_trace(str(trace))
    try:
        events = gpu_activities(json.loads(trace.read_text()))
    finally:
        trace.unlink(missing_ok=True)
    return events, timeline


def profile_case(clock, w, table, args, main, side, fetches: int, workdir: Path) -> dict:
    """The kernels of a case (`kernel_summary`), from one round alone and one beside
    ``fetches`` fetches, and the step times of those two rounds (CUDA events)."""
    alone, tl_alone = profile_round(
        clock, w, table, args.steps, 0, main, side, workdir / "overlap-profile-alone.json"
    )
    beside, tl_beside = profile_round(
        clock, w, table, args.steps, fetches, main, side, workdir / "overlap-profile-beside.json"
    )
    out = kernel_summary(alone, beside, args.steps, fetches)
    out["step_ms"] = {
        "alone": statistics.mean(e - s for s, e in tl_alone["steps"]),
        "beside": statistics.mean(e - s for s, e in tl_beside["steps"]),
    }
    out["steps_covered"] = sum(covered((s, e), tl_beside["fetches"]) for s, e in tl_beside["steps"])
    return out


def _short(name: str, width: int = 72) -> str:
    name = name.removeprefix("void ").replace("|", "\\|")
    return name if len(name) <= width else name[: width - 3] + "..."


def profile_markdown(prof: dict | None) -> list[str]:
    """The lines of the kernel profile under the main table (none without a profile)."""
    if not prof:
        return []
    title = f"Kernels of the training stream ({prof['case']})"
    if prof.get("skipped"):
        return ["", f"{title}: skipped ({prof['skipped']})."]
    lines = [
        "",
        f"{title}: torch.profiler (CUDA activities) over one round of {prof['steps']} steps "
        f"alone and one beside {prof['fetches']} fetches, run after the case's measured rounds "
        f"(its label: {prof['label']}). Per step, the training stream's kernels grouped by "
        f"name, the {len(prof['kernels'])} of {prof['kernel_names']} that gained the most time "
        "beside the fetches; blocks: the grids seen, in blocks; threads: a block's; a block "
        "holds: its registers (threads x registers a thread) and shared memory, of an SM's "
        "65,536 registers and its shared memory (228 KiB on sm_80 and sm_90).",
        "",
        "| kernel | blocks | threads | a block holds | calls/step | alone (ms/step) "
        "| beside (ms/step) | added (ms/step) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k in prof["kernels"] + [prof["others"] | {"name": f"({prof['others']['names']} others)"}]:
        grids = ", ".join(str(g) for g in k.get("grid_blocks", [])[:4]) or "-"
        holds = block_share(
            k.get("block_threads"), k.get("registers_per_thread"), k.get("smem_per_block")
        )
        lines.append(
            f"| {_short(k['name'])} | {grids} | {k.get('block_threads') or '-'} | {holds} "
            f"| {k['calls_per_step_alone']:g} | {k['ms_per_step_alone']:.3f} "
            f"| {k['ms_per_step_beside']:.3f} | {k['added_ms_per_step']:+.3f} |"
        )
    t, f, st = prof["train_ms_per_step"], prof["fetch_kernels"], prof["step_ms"]
    held = [f"{_short(n)} {h}" for n, h in f.get("blocks", {}).items() if h != "-"]
    lines += [
        "",
        f"All of the training stream's kernels: {t['alone']:.3f} ms per step alone, "
        f"{t['beside']:.3f} beside ({t['beside'] - t['alone']:+.3f}); the profiled steps took "
        f"{st['alone']:.3f} and {st['beside']:.3f} ms ({prof['steps_covered']} of "
        f"{prof['steps']} entirely beside fetches). The fetches' kernels: {f['launches']} "
        f"launches on other streams, {f['ms']:.3f} ms in all ({f['ms_per_fetch']:.3f} per "
        "fetch)" + (f"; a block holds: {'; '.join(held)}" if held else "") + ".",
    ]
    return lines


def slowdown_verdict(slowdown: float | None, applies: bool) -> str:
    """A case's verdict: ``slowdown`` at most `TARGET_SLOWDOWN` (`benchmarks._targets`), or
    ``-`` where the target does not apply (on the CPU)."""
    return verdict(check(slowdown, TARGET_SLOWDOWN, at_least=False)) if applies else "-"


def markdown(env: dict, payload: dict) -> str:
    lines = header_lines(f"A fetch beside training steps ({payload['device_type']})", env)
    s = payload["settings"]
    lines += [
        f"Graph: power law, {s['nodes']:,} nodes, {s['nodes'] * EDGES_PER_NODE:,} edges; "
        f"GraphSAGE {len(FANOUTS)} layers, hidden {s['hidden']}, batch {s['batch_size']}, "
        f"fanouts {FANOUTS}; {s['steps']} steps per round, {s['rounds']} rounds with fetches "
        f"per case. Target: a step beside a fetch at most {TARGET_SLOWDOWN:.2f}x its time alone"
        + ("." if payload["applies"] else " (does not apply on the CPU: nothing overlaps)."),
        "",
        "| table | fetch | grid cap | chunk rows | block warps | training stream "
        "| step alone (ms) | step beside (ms) | slowdown | verdict | fetch alone (ms) "
        "| fetch beside (ms) | decoded GB/s alone |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["cases"]:
        slow = r["slowdown"]
        judged = slowdown_verdict(slow, payload["applies"])
        beside = "-" if r["step_beside_ms"] is None else f"{r['step_beside_ms']:.3f}"
        fb = "-" if r["fetch_beside_ms"] is None else f"{r['fetch_beside_ms']:.3f}"
        chunk = "-" if r.get("chunk_rows") is None else f"{r['chunk_rows']:,}"
        warps = "-" if r.get("block_warps") is None else str(r["block_warps"])
        lines.append(
            f"| {r['table']} | {r['fetch']} | {r['grid_cap']} | {chunk} | {warps} "
            f"| {r['train_stream']} "
            f"| {r['step_alone_ms']:.3f} | {beside} | "
            f"{'-' if slow is None else f'{slow:.3f}'} | {judged} | {r['fetch_alone_ms']:.3f} "
            f"| {fb} | {r['decoded_gbps_alone']:.1f} |"
        )
    if not payload.get("complete", True):
        lines += [
            "",
            f"**Incomplete run: cut short after {len(payload['cases'])} cases (or still "
            "running).**",
        ]
    lines += profile_markdown(payload.get("profile"))
    if payload.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {n}" for n in payload["notes"]]
    if payload.get("plot"):
        lines += ["", f"![timelines]({payload['plot']})"]
    return "\n".join(lines) + "\n"


def plot(payload: dict, timelines: list[dict], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    n = len(timelines)
    fig, axes = plt.subplots(n, 1, figsize=(10, 1.2 * n + 1), squeeze=False)
    for ax, (case, tl) in zip(
        axes[:, 0], zip(payload["cases"], timelines, strict=True), strict=True
    ):
        for lane, (key, color) in enumerate((("steps", "tab:blue"), ("fetches", "tab:orange"))):
            ax.broken_barh([(s, e - s) for s, e in tl[key]], (lane, 0.8), color=color)
        ax.set_yticks([0.4, 1.4], ["train", "fetch"])
        chunks = "" if case.get("chunk_rows") is None else f", chunks of {case['chunk_rows']} rows"
        if case.get("block_warps") is not None:
            chunks += f", blocks of {case['block_warps']} warps"
        ax.set_title(
            f"{case['table']} {case['fetch']}, cap {case['grid_cap']}{chunks}, "
            f"{case['train_stream']} training stream",
            fontsize=8,
        )
    axes[-1, 0].set_xlabel("ms from the round's start")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--steps", type=int, default=10, help="training steps per round")
    p.add_argument("--rounds", type=int, default=5, help="rounds with fetches per case")
    p.add_argument("--fetch-batches", type=int, default=8, help="distinct batches fetched")
    p.add_argument("--fetches-alone", type=int, default=10)
    p.add_argument("--max-fetches", type=int, default=400)
    p.add_argument(
        "--max-blocks",
        type=blocks_per_sm,
        nargs="*",
        default=[0.001, 0.1, 1, 4],
        help="grid caps besides the default, in blocks per SM (0.25: a block on a quarter of "
        "the SMs; 0.001: one block in all, the least a grid keeps)",
    )
    p.add_argument(
        "--chunk-rows",
        type=positive_int_arg,
        nargs="*",
        default=[4096, 16384, 32768],
        help="chunked cases: the default grid, each fetch launched in kernels of at most this "
        "many rows (the tables' chunk_rows); none given: no chunked cases",
    )
    p.add_argument(
        "--block-warps",
        type=block_warps_arg,
        nargs="*",
        default=[],
        help="block-size cases: the default grid in blocks of this many warps, 1-32 (the "
        "tables' block_warps; the default is 8); none given (the default): none",
    )
    p.add_argument(
        "--profile-case",
        type=parse_profile_case,
        default="dense/ibp",
        help="the case whose kernels torch.profiler records after its measured rounds: "
        "TABLE/FETCH[/CAP] (CAP: default or blocks per SM; default training stream, "
        "unchunked), or none",
    )
    p.add_argument("--tables", nargs="+", choices=["dense", "sparse"], default=["dense", "sparse"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/ibp-graph-overlap"))
    add_out(p)
    args = p.parse_args(argv)
    if min(args.steps, args.rounds, args.fetch_batches, args.fetches_alone, args.batch_size) < 1:
        p.error(
            "--steps, --rounds, --fetch-batches, --fetches-alone and --batch-size must be at "
            "least 1"
        )
    least = (args.fetch_batches + 1) * args.batch_size  # distinct seeds (`make_work`)
    if args.nodes < least:
        p.error(
            f"--nodes must be at least (--fetch-batches + 1) x --batch-size = "
            f"({args.fetch_batches} + 1) x {args.batch_size} = {least}, got {args.nodes}"
        )
    return args


def run_profile(clock, w, table, args, main, side, summary: dict, case: dict) -> dict:
    """`profile_case` of a measured case, labelled; a failure is noted, not raised (the
    measured cases stand without it)."""
    label = f"{case['table']} {case['fetch']}, grid {case['grid_cap']}, "
    label += f"{case['train_stream']} training stream"
    out = {"case": args.profile_case, "label": label}
    try:
        fetches = summary["fetches_per_round"]
        return out | profile_case(clock, w, table, args, main, side, fetches, args.workdir)
    except Exception as exc:  # noqa: BLE001 - reported in the results, the run goes on
        print(f"overlap: the kernel profile failed: {exc!r}", file=sys.stderr)
        return out | {"skipped": f"the profiler failed: {exc!r}"}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("overlap: --device cuda but torch.cuda.is_available() is False")
    device = torch.device(args.device)
    clock = Clock(device)
    args.workdir.mkdir(parents=True, exist_ok=True)
    edges = power_law_edges(args.nodes, args.nodes * EDGES_PER_NODE, args.seed)
    graph = CSRGraph.from_edge_index(edges, num_nodes=args.nodes).to(device)
    del edges
    cases, timelines, notes = [], [], []
    env = environment()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = result_name("overlap", device)

    def save(complete: bool) -> dict:
        """Write the results so far (JSON and Markdown; the chart when ``complete``)."""
        payload = {
            **env,
            "device_type": device.type,
            "applies": clock.cuda,
            "target_slowdown": TARGET_SLOWDOWN,
            "settings": {k: v for k, v in vars(args).items() if k not in ("out", "workdir")},
            "cases": cases,
            "profile": profile,
            "notes": notes,
            "timelines": timelines,
            "complete": complete,
            "plot": None,
        }
        if complete:
            payload["plot"] = plot(payload, timelines, args.out / f"{stem}.png")
        payload["elapsed_s"] = time.perf_counter() - started
        write_json_md(stem, payload, lambda: markdown(env, payload), args.out)
        return payload

    work = None
    target = profile_target(args.profile_case, device)
    profile: dict | None = None
    if target is not None:
        profile = {"case": args.profile_case, "skipped": "no such case in this run"}
        if not clock.cuda:
            profile["skipped"] = (
                "not run on the CPU: torch.profiler's CUDA kernels need --device cuda"
            )
    if clock.cuda:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        side = torch.cuda.Stream(device)
        streams = {"default": torch.cuda.current_stream(device),
                   "high priority": torch.cuda.Stream(device, priority=-1)}  # fmt: skip
    else:
        sms, side, streams = 1, None, {"none (CPU)": None}
        notes.append("on the CPU only the default grid runs: grid caps are GPU grids.")
    for kind in args.tables:
        made = make_tables(kind, args.nodes, device, args.workdir)
        if work is None or kind == "dense":
            work = make_work(graph, made["tables"]["raw"], args, device)
        for name, table in made["tables"].items():
            caps = [None] + [grid_cap(c, device) for c in args.max_blocks]
            caps = caps if clock.cuda else [None]
            chunks = args.chunk_rows if hasattr(table, "chunk_rows") else []
            if args.chunk_rows and not chunks:
                notes.append(
                    f"{kind} {name}: no chunked cases, its table ({type(table).__name__}) has "
                    "no chunk_rows."
                )
            warps = args.block_warps if hasattr(table, "block_warps") else []
            if args.block_warps and not warps:
                notes.append(
                    f"{kind} {name}: no block-size cases, its table ({type(table).__name__}) "
                    "has no block_warps."
                )
            for cap, chunk, block_warps in plan_cases(caps, chunks, warps):
                with configured(table, cap, chunk, block_warps):
                    for label, main_stream in streams.items():
                        summary, timeline = measure_case(
                            clock, work, table, args, main_stream, side
                        )
                        rows = statistics.mean(int(i.numel()) for i in work.fetch_ids)
                        decoded = rows * made["row_bytes"] / (summary["fetch_alone_ms"] * 1e-3)
                        case = {
                            "table": kind,
                            "fetch": name,
                            "ratio": made["ratio"] if name == "ibp" else 1.0,
                            "grid_cap": grid_label(cap, sms),
                            "grid_blocks": cap,
                            "chunk_rows": chunk,
                            "block_warps": block_warps,
                            "train_stream": label,
                            "decoded_gbps_alone": decoded / 1e9,
                            **summary,
                        }
                        print(case, file=sys.stderr, flush=True)
                        cases.append(case)
                        timelines.append(timeline)
                        save(False)  # a run cut off still leaves what it measured
                        wanted = clock.cuda and profile is not None and "label" not in profile
                        plain = chunk is None and block_warps is None
                        if wanted and (kind, name, cap) == target and plain:
                            if label == "default":
                                profile = run_profile(
                                    clock, work, table, args, main_stream, side, summary, case
                                )
        for t in made["tables"].values():
            close = getattr(t, "close", None)
            if callable(close):
                close()
    payload = save(True)
    print((args.out / f"{stem}.md").read_text())
    return payload


if __name__ == "__main__":
    main()
