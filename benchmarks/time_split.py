"""Where a repeated piece of work spends its time: GPU kernels, torch ops on the host, Python.

`split` runs a callable a few times under the torch profiler (host ops, and on CUDA the
kernels and copies, CuPy's launches included), then as many times under `cProfile`, and
returns per call:

- ``gpu_busy_s``: the summed durations of every device activity (idle gaps do not count);
  None off CUDA or where profiling fails;
- ``kernels``: the device activities grouped by a short name, longest first;
- ``host_ops``: the torch ops by their own (self) host time, longest first;
- ``python``: the Python functions by their own time (``cProfile``'s ``tottime``), longest
  first; C functions called from Python (``{built-in method ...}``) count as functions. Whose
  calls: `PYTHON_THREADS` (``python_threads`` in the result).

Each list holds at most ``top`` entries of ``{"name", "ms", "calls"}`` (per call of the
work). Profilers slow the host: the shares between entries are what to read, not the sums.
Used by `benchmarks/sampling.py` to say what limits a sampled batch.
"""

from __future__ import annotations

import collections
import cProfile
import pstats
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

#: Entries kept per list.
TOP = 6

#: Whose Python calls ``cProfile`` counts. From Python 3.12 it hooks ``sys.monitoring``, which
#: sees every thread of the process (a loader's prefetch thread, the CPU pool); before, only
#: the thread that profiles.
PYTHON_THREADS = "every thread" if sys.version_info >= (3, 12) else "the calling thread"


def short_kernel_name(name: str) -> str:
    """A kernel's name without namespaces, template arguments or parameters.

    ``void at::native::(anonymous namespace)::indexSelectLargeIndex<long, 2>(...)`` ->
    ``indexSelectLargeIndex``. Names that are not C++ signatures (no ``::``, no leading
    ``void``), such as ``Memcpy DtoH (Device -> Pinned)`` or a CuPy kernel's, are kept.
    """
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    elif "::" not in text:
        return text
    depth, kept = 0, []
    for ch in text:  # drop <...> and (...) groups, nested ones included
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            kept.append(ch)
    parts = [p for p in "".join(kept).split("::") if p.strip()]
    return parts[-1].strip() if parts else name.strip()


def _python_name(key: tuple[str, int, str]) -> str:
    """``file.py:line(function)`` for a cProfile key, the path cut to its last two parts."""
    file, line, func = key
    if file == "~" or not file:
        return func
    tail = "/".join(Path(file).parts[-2:])
    return f"{tail}:{line}({func})"


def _top(totals: dict[str, float], calls: dict[str, int], n: int, per: int) -> list[dict]:
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return [{"name": k, "ms": 1e3 * v / per, "calls": calls[k] / per} for k, v in ranked]


def profiled_ops(work: Callable[[], Any], calls: int, cuda: bool, top: int = TOP) -> dict:
    """``gpu_busy_s``, ``kernels`` and ``host_ops`` of ``calls`` calls of ``work`` (see above)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        for _ in range(calls):
            work()
        if cuda:
            torch.cuda.synchronize()
    dev_time: dict[str, float] = collections.defaultdict(float)
    dev_calls: collections.Counter = collections.Counter()
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            name = short_kernel_name(e.name)
            dev_time[name] += e.time_range.elapsed_us() / 1e6
            dev_calls[name] += 1
    host_time: dict[str, float] = {}
    host_calls: dict[str, int] = {}
    for avg in prof.key_averages():
        if str(getattr(avg, "device_type", "")).endswith("CUDA"):
            continue
        self_us = float(getattr(avg, "self_cpu_time_total", 0.0) or 0.0)
        if self_us > 0:
            host_time[avg.key] = self_us / 1e6
            host_calls[avg.key] = int(avg.count)
    busy = sum(dev_time.values())
    return {
        "gpu_busy_s": busy / calls if cuda and busy else None,
        "kernels": _top(dev_time, dev_calls, top, calls),
        "host_ops": _top(host_time, host_calls, top, calls),
    }


def python_functions(work: Callable[[], Any], calls: int, top: int = TOP) -> list[dict]:
    """The Python functions of ``calls`` calls of ``work`` by their own time (see above)."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        for _ in range(calls):
            work()
    finally:
        profiler.disable()
    stats = pstats.Stats(profiler).stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    own: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter = collections.Counter()
    for key, (_cc, nc, tt, _ct, _callers) in stats.items():
        name = _python_name(key)
        if "_lsprof.Profiler" in name:  # the profiler's own disable()
            continue
        own[name] += tt
        count[name] += nc
    return _top(own, count, top, calls)


def split(work: Callable[[], Any], calls: int, cuda: bool, top: int = TOP) -> dict:
    """`profiled_ops` and `python_functions` of ``work``; an empty result where they fail.

    Profiling is an extra: a failure is printed and the entries it would fill are left empty
    (``gpu_busy_s`` None), so that the measurement it accompanies is kept.
    """
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    out: dict = {"calls": calls, "gpu_busy_s": None, "kernels": [], "host_ops": [], "python": []}
    out["python_threads"] = PYTHON_THREADS
    try:
        out.update(profiled_ops(work, calls, cuda, top))
    except Exception as exc:  # noqa: BLE001 - reported, the measurement goes on
        print(f"torch profiler: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    try:
        out["python"] = python_functions(work, calls, top)
    except Exception as exc:  # noqa: BLE001 - reported, the measurement goes on
        print(f"cProfile: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    return out


def markdown(title: str, result: dict) -> list[str]:
    """A table of `split`'s three lists side by side, rank by rank, under ``title``."""
    columns = (
        ("kernels", "GPU kernel or copy"),
        ("host_ops", "torch op, own host time"),
        ("python", "Python function, own time"),
    )
    if result.get("python_threads"):
        columns = (*columns[:2], ("python", f"{columns[2][1]}, {result['python_threads']}"))
    lines = [
        f"{title} (per call, {result['calls']} call{'s' if result['calls'] != 1 else ''} "
        "profiled; ms and calls per call):",
        "",
        "| # | " + " | ".join(label for _, label in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    rows = max((len(result.get(key) or []) for key, _ in columns), default=0)
    for i in range(rows):
        cells = []
        for key, _ in columns:
            entries = result.get(key) or []
            if i < len(entries):
                e = entries[i]
                name = e["name"].replace("|", "\\|")
                cells.append(f"`{name}` {e['ms']:.3f} ms ({e['calls']:g})")
            else:
                cells.append("")
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    if not rows:
        lines.append("| - | not measured | not measured | not measured |")
    return lines
