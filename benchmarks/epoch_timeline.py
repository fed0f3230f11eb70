"""An epoch's timeline: the loader's stages and the training steps on one clock, and how much
of them ran at once.

A loader whose `ibp_graph.prefetch.LoaderStats.keep_timeline` was called keeps each stage
interval of an epoch: CUDA events for the stages timed on the side stream (``sample``,
``fetch``), host clock readings for the rest (``wait``, and every stage on the CPU). The
training steps are timed the same way (`benchmarks.e2e.StepTimes`). `Clock` puts both on the
seconds since the epoch's start: on a GPU, an event recorded on the current stream at the
start (after a synchronisation) is the device's zero, and the host clock read right then the
host's, so host intervals line up with device ones to within a launch's latency.

`overlap` is the evidence that the loader works beside training: the time both ran at once,
over the shorter of the two. `draw` charts the lanes of one or more runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch

#: The lanes of a run, top to bottom, and the stages drawn in each.
LANES = (("loader", ("sample", "fetch")), ("step", ("step",)), ("wait", ("wait",)))
COLORS = {"sample": "#55a868", "fetch": "#c44e52", "step": "#4c72b0", "wait": "#dd8452"}


class Clock:
    """The zero of an epoch, on the device (``device`` a GPU) and on the host.

    Create it at the epoch's start, after synchronising the device.
    """

    def __init__(self, device: torch.device) -> None:
        self.ref = None
        if device.type == "cuda":
            self.ref = torch.cuda.Event(enable_timing=True)
            self.ref.record()
        self.host0 = time.perf_counter()

    def at(self, mark: Any) -> float:
        """Seconds from the zero to ``mark``: a completed CUDA event, or a host clock reading."""
        if isinstance(mark, float | int):
            return float(mark) - self.host0
        if self.ref is None:
            raise ValueError("a CUDA event on a clock made without a GPU")
        return self.ref.elapsed_time(mark) / 1e3


def spans(
    clock: Clock, loader: Iterable[tuple[str, Any, Any]], steps: Iterable[tuple[Any, Any]]
) -> list[list]:
    """``[[stage, start_s, end_s], ...]`` of an epoch, by start: the loader's kept timeline
    (``(stage, start, end)``) and the steps (``(start, end)``) on ``clock`` (call it after the
    device finished the epoch)."""
    out = [[stage, clock.at(a), clock.at(b)] for stage, a, b in loader]
    out += [["step", clock.at(a), clock.at(b)] for a, b in steps]
    return sorted(out, key=lambda s: (s[1], s[2]))


def union(intervals: Iterable[Sequence[float]], join: float = 0.0) -> list[tuple[float, float]]:
    """The intervals merged where they overlap or lie at most ``join`` apart, in order."""
    merged: list[tuple[float, float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in intervals):
        if merged and a <= merged[-1][1] + join:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def length(intervals: Iterable[Sequence[float]]) -> float:
    """Seconds covered by the intervals (overlaps counted once)."""
    return sum(b - a for a, b in union(intervals))


def intersection(x: Sequence[tuple[float, float]], y: Sequence[tuple[float, float]]) -> float:
    """Seconds covered by both of two merged interval lists (`union`'s output)."""
    i = j = 0
    both = 0.0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        both += max(0.0, hi - lo)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return both


def overlap(timeline: Sequence[Sequence]) -> dict:
    """How much of an epoch's loader work ran beside its training steps.

    Returns ``loader_s`` (time the loader sampled or fetched), ``step_s`` (time in steps),
    ``both_s`` (time both did), ``hidden`` (``both_s`` over the smaller of the two: 1.0 when
    the shorter one ran entirely beside the other, 0.0 when they took turns; None when one is
    empty), ``span_s`` (first start to last end) and ``lead_s`` (from the epoch's start to the
    first step's: the first batch's preparation, which no step can hide; None without steps).
    """
    loader = union((a, b) for stage, a, b in timeline if stage in ("sample", "fetch"))
    steps = union((a, b) for stage, a, b in timeline if stage == "step")
    loader_s, step_s = length(loader), length(steps)
    both = intersection(loader, steps)
    shorter = min(loader_s, step_s)
    starts = [s[1] for s in timeline]
    ends = [s[2] for s in timeline]
    return {
        "lead_s": steps[0][0] if steps else None,
        "loader_s": loader_s,
        "step_s": step_s,
        "both_s": both,
        "hidden": both / shorter if shorter > 0 else None,
        "span_s": (max(ends) - min(starts)) if timeline else 0.0,
    }


def draw(ax: Any, runs: Sequence[tuple[str, Sequence[Sequence]]], title: str) -> None:
    """Draw the lanes (loader, step, wait) of each ``(name, timeline)`` run on ``ax``."""
    labels: list[str] = []
    y = 0
    for name, timeline in runs:
        for lane, stages in LANES:
            for stage in stages:
                bars = [(a, b - a) for s, a, b in timeline if s == stage]
                if bars:
                    ax.broken_barh(bars, (y - 0.4, 0.8), color=COLORS[stage])
            labels.append(f"{name}: {lane}")
            y += 1
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the epoch's start")
    ax.set_title(title, fontsize=9)
