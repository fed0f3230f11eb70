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
(`SIDE_STREAM_BLOCKS_PER_SM`: a block on a quarter of the SMs) and with every
``--max-blocks`` cap (blocks per SM), and with the training
stream at default and at high priority.

A round records an origin event on the training stream; the side stream waits for it and then
queues its fetches (enough to outlast the steps) while the training stream queues ``--steps``
steps. Every step and every fetch is bracketed by CUDA events: the timeline, in ms from the
origin. Per case, over ``--rounds`` rounds: the median time of the steps that ran entirely
while fetches were running, against the median step time of rounds without fetches (the
slowdown; target at most 1.10, judged by `benchmarks._targets`: met, the gap in percent of the
goal, or not measured where no step ran entirely beside fetches), and the median fetch time
alone against beside the steps (fetched GB/s, decoded). On the CPU there are no streams: steps
and fetches run one after the other, so the slowdown says nothing and is reported as not
applying.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
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
    RESULTS,
    blocks_per_sm,
    environment,
    grid_cap,
    header_lines,
    result_name,
    write_json,
)
from benchmarks._targets import check, verdict  # noqa: E402
from benchmarks.epoch_timeline import union  # noqa: E402
from benchmarks.sampling import power_law_edges  # noqa: E402
from ibp_graph.graph import CSRGraph  # noqa: E402
from ibp_graph.kernels.runtime import SIDE_STREAM_BLOCKS_PER_SM  # noqa: E402
from ibp_graph.sampler import NeighborSampler  # noqa: E402
from ibp_graph.train.models import graphsage  # noqa: E402

#: A step is slowed by a fetch beside it by at most this factor (the target).
TARGET_SLOWDOWN = 1.10
EDGES_PER_NODE = 25
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


def measure_case(clock, w, table, args, main, side) -> tuple[dict, dict]:
    """Rounds alone and together; the summary and one timeline for the chart."""
    alone = [run_round(clock, w, table, args.steps, 0, main, side)["steps"] for _ in range(2)]
    fetch_alone = [
        run_round(clock, w, table, 0, args.fetches_alone, main, side)["fetches"] for _ in range(2)
    ]
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
    return summary, beside[len(beside) // 2]


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
        "| table | fetch | grid cap | training stream | step alone (ms) | step beside (ms) "
        "| slowdown | verdict | fetch alone (ms) | fetch beside (ms) | decoded GB/s alone |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["cases"]:
        slow = r["slowdown"]
        judged = slowdown_verdict(slow, payload["applies"])
        beside = "-" if r["step_beside_ms"] is None else f"{r['step_beside_ms']:.3f}"
        fb = "-" if r["fetch_beside_ms"] is None else f"{r['fetch_beside_ms']:.3f}"
        lines.append(
            f"| {r['table']} | {r['fetch']} | {r['grid_cap']} | {r['train_stream']} "
            f"| {r['step_alone_ms']:.3f} | {beside} | "
            f"{'-' if slow is None else f'{slow:.3f}'} | {judged} | {r['fetch_alone_ms']:.3f} "
            f"| {fb} | {r['decoded_gbps_alone']:.1f} |"
        )
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
        ax.set_title(
            f"{case['table']} {case['fetch']}, cap {case['grid_cap']}, "
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
        default=[0.1, 1, 4],
        help="grid caps besides the default, in blocks per SM (0.25: a block on a quarter of "
        "the SMs)",
    )
    p.add_argument("--tables", nargs="+", choices=["dense", "sparse"], default=["dense", "sparse"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/ibp-graph-overlap"))
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if min(args.steps, args.rounds, args.fetch_batches, args.fetches_alone) < 1:
        p.error("--steps, --rounds, --fetch-batches and --fetches-alone must be at least 1")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("overlap: --device cuda but torch.cuda.is_available() is False")
    device = torch.device(args.device)
    clock = Clock(device)
    args.workdir.mkdir(parents=True, exist_ok=True)
    edges = power_law_edges(args.nodes, args.nodes * EDGES_PER_NODE, args.seed)
    graph = CSRGraph.from_edge_index(edges, num_nodes=args.nodes).to(device)
    del edges
    cases, timelines = [], []
    work = None
    if clock.cuda:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        side = torch.cuda.Stream(device)
        streams = {"default": torch.cuda.current_stream(device),
                   "high priority": torch.cuda.Stream(device, priority=-1)}  # fmt: skip
    else:
        sms, side, streams = 1, None, {"none (CPU)": None}
    for kind in args.tables:
        made = make_tables(kind, args.nodes, device, args.workdir)
        if work is None or kind == "dense":
            work = make_work(graph, made["tables"]["raw"], args, device)
        for name, table in made["tables"].items():
            caps = [None] + [grid_cap(c, device) for c in args.max_blocks]
            caps = caps if clock.cuda else [None]
            for cap in caps:
                if hasattr(table, "max_blocks"):
                    table.max_blocks = cap
                for label, main_stream in streams.items():
                    summary, timeline = measure_case(clock, work, table, args, main_stream, side)
                    rows = statistics.mean(int(i.numel()) for i in work.fetch_ids)
                    decoded = rows * made["row_bytes"] / (summary["fetch_alone_ms"] * 1e-3)
                    case = {
                        "table": kind,
                        "fetch": name,
                        "ratio": made["ratio"] if name == "ibp" else 1.0,
                        "grid_cap": (
                            f"default ({SIDE_STREAM_BLOCKS_PER_SM:g}/SM)"
                            if cap is None
                            else f"{cap / sms:g}/SM ({cap})"
                        ),
                        "train_stream": label,
                        "decoded_gbps_alone": decoded / 1e9,
                        **summary,
                    }
                    print(case, file=sys.stderr, flush=True)
                    cases.append(case)
                    timelines.append(timeline)
        for t in made["tables"].values():
            close = getattr(t, "close", None)
            if callable(close):
                close()
    env = environment()
    payload = {
        **env,
        "device_type": device.type,
        "applies": clock.cuda,
        "target_slowdown": TARGET_SLOWDOWN,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "workdir")},
        "cases": cases,
        "timelines": timelines,
        "plot": None,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = result_name("overlap", device)
    payload["plot"] = plot(payload, timelines, args.out / f"{name}.png")
    write_json(name, payload, args.out)
    (args.out / f"{name}.md").write_text(markdown(env, payload))
    print((args.out / f"{name}.md").read_text())
    return payload


if __name__ == "__main__":
    main()
