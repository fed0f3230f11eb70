"""Neighbor-sampling throughput of `ibp_graph.sampler.NeighborSampler` on a power-law graph.

Usage::

    .venv/bin/python benchmarks/sampling.py                  # CPU, and CUDA when available
    .venv/bin/python benchmarks/sampling.py --device cuda    # one device only
    .venv/bin/python benchmarks/sampling.py --device cuda --backend kernel
    .venv/bin/python benchmarks/sampling.py --compare-dgl    # CPU: against DGL, 1 and 2 threads

writes ``sampling-cpu-alone.{json,md}`` for the CPU and ``sampling-<GPU>.{json,md}`` for a GPU
(``sampling-nvidia-h100-80gb-hbm3``) into ``--out`` (default: benchmarks/results/); the CPU's
name is not that of ``--compare-dgl`` (`results_name`), so a plain CPU run leaves the committed
comparison with DGL in place.

Graph: a directed Chung-Lu multigraph with 2,000,000 nodes and 50,000,000 edges (the size of
ogbn-products). The source and the target of every edge are drawn independently (inverse-CDF
sampling of float64 uniforms) from the power-law density ``x ** (-1 / (gamma - 1))`` on
``[1, N + 1)`` with ``gamma = 2.5``, and ``floor(x) - 1`` is the node: node ``i`` has weight
``integral of x ** (-2/3) over [i + 1, i + 2)``, about ``(i + 1) ** (-2/3)``, so in- and
out-degrees both follow a power law with exponent 2.5 (largest in-degree about 100,000;
self-loops and parallel edges are kept). Node ids are then shuffled with a random permutation so
that hubs are spread over the id range. Everything is seeded (``torch.Generator().manual_seed(0)``
for the graph, seed 1 for the seed nodes, seed 0 for the sampler).

Measured: the time to build the in-neighbor `CSRGraph` (int64 and int32 indices), then, per
index width and per sampler backend (``NeighborSampler(backend=...)``: ``torch`` draws with
torch ops, ``kernel`` with the CUDA kernel of ``cuda/sample_neighbors.cu``), 50 batches of 1,024
distinct random seeds with fanouts [15, 10, 5] after 3 warm-up batches. Every backend samples
the same seed batches. ``--backend`` lists the backends (default: ``torch`` on CPU, both on
CUDA; ``kernel`` needs CUDA). On CUDA each case also runs with the graph in pinned host memory
read over UVA (``CSRGraph.to_uva``, the loaders' ``graph_memory="uva"``: ``indptr`` in GPU
memory, int64 sources and edge ids interleaved) beside the graph in GPU memory
(``--graph-memory``, default both); ``uva-separate`` in ``--graph-memory`` adds rows with every
array in pinned host memory, each on its own (``to_uva(indptr_in_gpu=False, pairs=False)``, the
layout before), and ``device-pairs`` rows with the graph in GPU memory in the pairs layout
(``CSRGraph.as_pairs``, int64 indices only), both for the ``kernel`` backend's last variant only
(with ``--group`` and ``--cuda-graph``, the loaders' default). Reported, one row per index
width, graph memory and backend: the median batch time, the median of per-batch sampled edges
per second and the total edges / total time; also the sampling thread's CPU time per batch
(``time.thread_time`` inside ``sample()``) and, on CUDA, the GPU's busy time per batch (the
summed durations of the kernels and copies of 5 profiled batches) and the ratio of the two: host
time per batch against the batch's GPU time; and the torch ops, hop-kernel launches and host
reads of one more batch (`benchmarks/sampling_ops.py`). The ``kernel`` backend runs every hop
with fanout up to 256 as three launches and one host read (`ibp_graph.sample_hop`);
``--hop-grids`` runs it at each of several grid caps (``default``: the library's one block per
SM; a number: blocks per SM, cut to what the SMs hold), a row each; ``--cuda-graph`` adds a row
of the ``kernel`` backend at its default grid with ``cuda_graph=True``
(`ibp_graph.sample_replay`: a batch's launches captured once per batch size and replayed; the
warm-up batches run it eagerly, capture it, then replay it). Every row gives the sampler its
seeds on the graph's device, where a seed range check reads two values back; ``--host-seeds``
adds ``kernel`` rows (default grid, and replayed with ``--cuda-graph``) whose seeds come from
the CPU, as the loaders give them: checked there, then copied over without a wait; ``--group K``
adds such rows (eager, and replayed with ``--cuda-graph``) that sample K batches per
`NeighborSampler.sample_batches` call, one group whose sizes are read once (and replayed from
one CUDA graph), every figure per batch (the call's divided by K). Threads: torch's default (all
visible cores).

Where a batch's time goes, per row (`benchmarks.time_split`, 5 of the measured seed batches
again): the GPU kernels and copies by time, the torch ops by their own host time, and the
Python functions by their own time (``cProfile``), each the longest 6, per batch. The GPU busy
time above is the sum of the first list, all entries. Profilers slow the host: read the shares,
not the sums.

``--compare-dgl`` (CPU only) times our sampler against DGL's C++ sampler side by side in one
process instead: DGL's multi-layer sampling as ``dgl.dataloading.NeighborSampler.sample_blocks``
does it (``dgl.sampling.sample_neighbors`` then ``dgl.to_block`` per layer, fanouts given
innermost first, so the seeds get the first of ours), on a ``DGLGraph`` of the same edges (CSC
built before timing). Contenders: DGL; ours with ``draw="once"`` (PyG's semantics, the default)
and ``draw="per_hop"`` (DGL's semantics: the same expected edge count as DGL); and ours with
``draw="once"`` on torch ops (the path of the torch backend on a GPU, and CPU graphs where Numba is
missing). For each ``torch.set_num_threads`` value of ``--threads`` (default 1 and 2), every
batch of seeds is sampled by every contender in turn, the order rotating from batch to batch
(A/B alternation), so load changes hit all of them alike. Reported per contender: median wall
time and median process CPU time per batch, sampled edges per batch, median edges/s, and the
ratio to DGL both of the median edges/s and as the median of per-batch ratios. Writes
``sampling-cpu.{json,md}``, with the 1-minute load average before and after each thread count
(the machine may be shared).

CUDA runs also time a 1-thread CPU baseline in the same process: the int64 CSR copied to the
host, the CPU's default hop (compiled, `ibp_graph.sample_cpu`, where Numba imports; torch ops
otherwise, recorded as ``compiled_hop``) under ``torch.set_num_threads(1)`` (restored after), on
the first ``min(--batches, 10)`` of the GPU's measured seed batches after up to 2 of its warm-up
batches (`cpu_baseline`).

Targets (``"targets"`` in the JSON, a "Targets" section in the markdown; `gpu_targets`,
`dgl_targets`), each built by `benchmarks._targets.check` with its measured value, goal and
verdict (`benchmarks._targets.verdict`: met, the gap - ``gap`` in the JSON, a fraction of the
goal, printed as a percentage - or not measured): on CUDA, per row with the graph in GPU
memory, median edges/s at least 10x the 1-thread CPU baseline's; per index width and backend,
the UVA graph's median edges/s at least 0.5x the device graph's; per row, host CPU time per
batch at most 0.2x the GPU busy time.
With ``--compare-dgl``, ``ibp-graph once`` (the default sampler) at least 1x DGL's median edges/s
at 1 and 2 threads (the goal names DGL 2.1.0: ``dgl_is_2_1_0`` records whether it ran).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import time_split  # noqa: E402
from benchmarks._env import (  # noqa: E402
    add_out,
    blocks_per_sm,
    environment,
    grid_cap,
    header_lines,
    result_name,
    write_json_md,
)
from benchmarks._targets import check, verdict  # noqa: E402
from ibp_graph import sample_cpu  # noqa: E402
from ibp_graph import sampler as sampler_module  # noqa: E402
from ibp_graph.graph import CSRGraph  # noqa: E402
from ibp_graph.kernels.sample_neighbors import CudaHopKernels  # noqa: E402
from ibp_graph.sampler import BACKENDS, NeighborSampler  # noqa: E402

GAMMA = 2.5
CHUNK = 5_000_000
#: Batches of a row profiled to say where their time goes (`benchmarks.time_split`).
PROFILED_BATCHES = 5
#: Seed batches the 1-thread CPU baseline of a CUDA run times at most (after its warm-ups).
CPU1_BATCHES = 10
#: Warm-up batches of the 1-thread CPU baseline at most.
CPU1_WARMUP = 2
#: The targets' goals: GPU over 1-thread CPU, UVA over device, host over GPU busy, ours over DGL.
GOAL_GPU_OVER_CPU1 = 10.0
GOAL_UVA_OVER_DEVICE = 0.5
GOAL_HOST_OVER_GPU = 0.2
GOAL_OVER_DGL = 1.0
#: The DGL version and thread counts the DGL target names, and our contender it judges.
DGL_TARGET_VERSION = "2.1.0"
DGL_TARGET_THREADS = (1, 2)
DGL_TARGET_CONTENDER = "ibp-graph once"
#: Where ``--graph-memory`` may put the graph on CUDA (see its help).
GRAPH_MEMORY_CHOICES = ("device", "uva", "uva-separate", "device-pairs")
#: The results of ``--compare-dgl`` (README and benchmarks/scoreboard.py read them).
COMPARE_DGL_NAME = "sampling-cpu"
#: The results of a plain CPU run: a name of their own, not `COMPARE_DGL_NAME`.
CPU_ALONE_NAME = "sampling-cpu-alone"


def power_law_edges(
    num_nodes: int, num_edges: int, seed: int, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """``(2, num_edges)`` int64 Chung-Lu edges (see the module docstring), on ``device``.

    Drawn there with that device's generator: a CUDA graph is as seeded as a CPU one, but not
    the same graph (and takes a second where 300M edges take about a minute on the CPU).
    """
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    a = 1.0 - 1.0 / (GAMMA - 1.0)  # 1 - exponent of the density
    top = (num_nodes + 1.0) ** a - 1.0
    relabel = torch.randperm(num_nodes, generator=gen, device=device)
    edge_index = torch.empty((2, num_edges), dtype=torch.int64, device=device)
    for side in range(2):
        for s in range(0, num_edges, CHUNK):
            n = min(CHUNK, num_edges - s)
            u = torch.rand(n, dtype=torch.float64, generator=gen, device=device)
            x = u.mul_(top).add_(1.0).pow_(1.0 / a)  # inverse CDF of x ** (a - 1) on [1, N + 1)
            idx = x.long().sub_(1).clamp_(0, num_nodes - 1)
            edge_index[side, s : s + idx.numel()] = relabel[idx]
    return edge_index


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seed_batches(
    num_nodes: int, args: argparse.Namespace, total: int | None = None
) -> torch.Tensor:
    """``(total, batch_size)`` CPU int64: every case's seed batches, warm-ups first (default
    ``total``: ``warmup + batches``; every case's batches start with the same ones)."""
    total = args.warmup + args.batches if total is None else total
    perm = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(args.seed + 1))
    return perm[: total * args.batch_size].view(total, args.batch_size)


def timed_batches(
    sampler: NeighborSampler, seeds: torch.Tensor, warmup: int, group: int = 1
) -> dict:
    """Sample the rows of ``seeds`` in turn, ``group`` at a time; per batch after the first
    ``warmup`` calls: wall time, the thread's CPU time, sampled edges and nodes, and on CUDA
    the GPU span (events).

    With ``group > 1`` each call is one `NeighborSampler.sample_batches` of ``group`` rows
    (batch ``i`` seeded ``i``, as the loaders seed each batch) and every figure is per batch:
    the call's divided by ``group``, edges and nodes the group's mean.
    """
    device = sampler.graph.device
    cuda = device.type == "cuda"
    out: dict[str, list[float]] = {"times": [], "host": [], "edges": [], "nodes": [], "spans": []}
    for i, first in enumerate(range(0, seeds.shape[0] - group + 1, group)):
        sync(device)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        c0, t0 = time.thread_time(), time.perf_counter()
        if group == 1:
            batches = [sampler.sample(seeds[first])]
        else:
            rows = list(seeds[first : first + group])
            batches = sampler.sample_batches(rows, batch_seeds=list(range(first, first + group)))
        cpu = time.thread_time() - c0
        if cuda:
            end.record()
        sync(device)
        dt = time.perf_counter() - t0
        if i >= warmup:
            out["times"].append(dt / group)
            out["host"].append(cpu / group)
            out["edges"].append(sum(b.num_edges for b in batches) / group)
            out["nodes"].append(sum(b.num_nodes for b in batches) / group)
            if cuda:
                out["spans"].append(start.elapsed_time(end) / 1e3 / group)
    return out


def throughput(timed: dict) -> dict:
    """Median batch time, median and total edges/s, and mean edges of `timed_batches`."""
    times, edges = timed["times"], timed["edges"]
    rates = [e / t for e, t in zip(edges, times, strict=True)]
    return {
        "median_batch_s": statistics.median(times),
        "median_edges_per_s": statistics.median(rates),
        "total_edges_per_s": sum(edges) / sum(times),
        "mean_sampled_edges": sum(edges) / len(edges),
    }


def backend_label(r: dict) -> str:
    """A row's backend, with its hop grid where not the library's default, CUDA graphs,
    seeds given on the host, and groups."""
    grid = r.get("hop_grid")
    label = r["backend"] if grid is None else f"{r['backend']}, {grid:g} blocks/SM"
    label = f"{label}, CUDA graph" if r.get("cuda_graph") else label
    label = f"{label}, seeds from the host" if r.get("host_seeds") else label
    return f"{label}, groups of {r['group']}" if r.get("group", 1) > 1 else label


def measure(
    graph: CSRGraph,
    args: argparse.Namespace,
    label: str,
    backend: str,
    memory: str,
    hop_grid: float | None = None,
    cuda_graph: bool = False,
    host_seeds: bool = False,
    group: int = 1,
) -> dict:
    """One row: `timed_batches` of a sampler, where its time goes, and its op counts.

    ``hop_grid``: the ``kernel`` backend's grid cap in blocks per SM (None: the library's);
    ``cuda_graph``: the sampler's ``cuda_graph``; ``host_seeds``: each batch's seeds given
    on the CPU, as the loaders give them (the sampler checks them there and copies them
    over), not already on the graph's device; ``group``: batches per
    `NeighborSampler.sample_batches` call (`timed_batches`; 1: one `sample` call a batch).
    """
    device = graph.device
    sampler = NeighborSampler(
        graph, args.fanouts, seed=args.seed, backend=backend, cuda_graph=cuda_graph
    )
    if hop_grid is not None:
        sampler._hop_kernels = CudaHopKernels(device, max_blocks=grid_cap(hop_grid, device))
    # groups: as many warm-up calls as batches have (the second call of a shape captures
    # it), then the batches' number rounded up to whole groups
    calls = -(-args.batches // group)
    seeds = seed_batches(graph.num_nodes, args, (args.warmup + calls) * group)
    if not host_seeds:
        seeds = seeds.to(device)
    timed = timed_batches(sampler, seeds, args.warmup, group)
    host, spans = timed["host"], timed["spans"]
    cuda = device.type == "cuda"
    first = args.warmup * group
    profiled = seeds[first : first + max(PROFILED_BATCHES, group)]
    calls = profiled.shape[0] // group
    rows = itertools.cycle(range(calls))  # each call samples the next batch, or group

    def work():
        k = next(rows)
        if group == 1:
            return sampler.sample(profiled[k])
        return sampler.sample_batches(list(profiled[k * group : (k + 1) * group]))

    where = time_split.split(work, calls, cuda)
    gpu = where["gpu_busy_s"] / group if where["gpu_busy_s"] is not None else None
    from benchmarks.sampling_ops import count  # the counts of one more batch, untimed

    ops = count(sampler, seeds[first], group)
    summary = throughput(timed)
    return {
        "torch_ops_per_batch": ops["torch_ops"],
        "kernel_launches_per_batch": ops["kernel_launches"],
        "host_reads_per_batch": ops["host_reads"],
        "median_host_cpu_s": statistics.median(host),
        "median_gpu_span_s": statistics.median(spans) if spans else None,
        "gpu_busy_s": gpu,
        "host_over_gpu_busy": statistics.median(host) / gpu if gpu else None,
        "indices": label,
        "graph_memory": memory,
        "backend": backend,
        "hop_grid": hop_grid,
        "cuda_graph": cuda_graph,
        "host_seeds": host_seeds,
        "group": group,
        "captured_sizes": sampler._replay.sizes() if sampler._replay else [],
        "time_split": where,
        "batches": len(timed["times"]) * group,  # measured (whole groups)
        **summary,
        "mean_sampled_nodes": sum(timed["nodes"]) / len(timed["nodes"]),
        "median_batches_per_s": 1.0 / summary["median_batch_s"],
    }


def cpu_baseline(
    graph: CSRGraph, fanouts: list[int], seed: int, seeds: torch.Tensor, warmup: int
) -> dict:
    """Our CPU sampler on one thread: edges/s of ``seeds`` (rows) after ``warmup`` of them.

    ``graph`` (int64 indices) is copied to the host; the sampler is the CPU default (draw once,
    the compiled hop where Numba imports) under ``torch.set_num_threads(1)``, restored after.
    """
    host = graph.to("cpu")
    sampler = NeighborSampler(host, fanouts, seed=seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        timed = timed_batches(sampler, seeds.cpu(), warmup)
    finally:
        torch.set_num_threads(threads)
    return {
        "threads": 1,
        "indices": str(host.indices.dtype).removeprefix("torch."),
        "compiled_hop": bool(sampler_module._COMPILED and sample_cpu.available()),
        "warmup": warmup,
        "batches": len(timed["times"]),
        **throughput(timed),
    }


def run_cpu_baseline(graph: CSRGraph, args: argparse.Namespace) -> dict:
    """`cpu_baseline` on the first of the GPU cases' measured batches, or the error it raised."""
    warmup = min(CPU1_WARMUP, args.warmup)
    batches = min(args.batches, CPU1_BATCHES)
    seeds = seed_batches(graph.num_nodes, args)[args.warmup - warmup : args.warmup + batches]
    try:
        result = cpu_baseline(graph, args.fanouts, args.seed, seeds, warmup)
    except Exception as exc:  # the GPU rows still count: report and go on
        print(f"1-thread CPU baseline failed: {exc!r}", file=sys.stderr, flush=True)
        return {"threads": 1, "error": repr(exc)}
    print(f"1-thread CPU baseline: {result}", file=sys.stderr, flush=True)
    return result


def target(
    name: str, applies: str, value: float | None, goal: float, at_least: bool, **extra
) -> dict:
    """One verdict, `benchmarks._targets.check` of ``value`` against ``goal`` with the target's
    ``name`` and what it ``applies`` to: ``met`` is None where ``value`` was not measured;
    ``gap`` is how far short of the goal a missed one is, as a fraction of the goal."""
    return {"name": name, "applies": applies} | check(value, goal, at_least=at_least, **extra)


def gpu_targets(results: list[dict], cpu1: dict | None) -> list[dict]:
    """The GPU targets of a run's ``results`` rows and its 1-thread CPU baseline (or None).

    GPU over 1-thread CPU (median edges/s) per row with the graph in GPU memory; UVA over device
    (median edges/s) per index width and backend with both; host CPU over GPU busy time per GPU
    row. Where a run has none to judge, one entry says so, not measured.
    """
    gpu = [r for r in results if r.get("graph_memory") in ("device", "uva")]
    rate = (cpu1 or {}).get("median_edges_per_s")
    out = []

    def where(r: dict) -> str:
        return f"{r['indices']}, {r['graph_memory']}, {backend_label(r)}"

    name = "GPU / 1-thread CPU edges/s"
    device_rows = [r for r in gpu if r["graph_memory"] == "device"]
    for r in device_rows:
        value = r["median_edges_per_s"] / rate if rate else None
        out.append(
            target(
                name,
                where(r),
                value,
                GOAL_GPU_OVER_CPU1,
                True,
                gpu_edges_per_s=r["median_edges_per_s"],
                cpu1_edges_per_s=rate,
            )
        )
    if not device_rows:
        out.append(
            target(name, "no row with the graph in GPU memory", None, GOAL_GPU_OVER_CPU1, True)
        )
    name = "UVA / device graph edges/s"
    pairs = 0
    for r in gpu:
        if r["graph_memory"] != "uva":
            continue
        key = (r["indices"], backend_label(r))
        dev = [d for d in device_rows if (d["indices"], backend_label(d)) == key]
        if dev:
            pairs += 1
            uva, device = r["median_edges_per_s"], dev[0]["median_edges_per_s"]
            out.append(
                target(
                    name,
                    f"{r['indices']}, {backend_label(r)}",
                    uva / device,
                    GOAL_UVA_OVER_DEVICE,
                    True,
                    uva_edges_per_s=uva,
                    device_edges_per_s=device,
                )
            )
    if not pairs:
        out.append(
            target(
                name, "no case with both a device and a UVA row", None, GOAL_UVA_OVER_DEVICE, True
            )
        )
    name = "host CPU / GPU busy time per batch"
    for r in gpu:
        out.append(target(name, where(r), r.get("host_over_gpu_busy"), GOAL_HOST_OVER_GPU, False))
    if not gpu:
        out.append(target(name, "no GPU row", None, GOAL_HOST_OVER_GPU, False))
    return out


def dgl_target_version(version: str | None) -> bool:
    """Whether ``version`` (``dgl.__version__``, maybe ``2.1.0+cu121``) is the target's DGL."""
    return bool(version) and version.split("+")[0] == DGL_TARGET_VERSION


def dgl_targets(runs: list[dict], dgl_version: str | None) -> list[dict]:
    """Ours (`DGL_TARGET_CONTENDER`) over DGL, median edges/s, per thread count of ``runs``
    (those of `DGL_TARGET_THREADS` that did not run: not measured)."""
    by_threads = {run["threads"]: run for run in runs}
    out = []
    for threads in sorted(set(DGL_TARGET_THREADS) | set(by_threads)):
        rows = {r["contender"]: r for r in by_threads.get(threads, {}).get("results", [])}
        value = rows.get(DGL_TARGET_CONTENDER, {}).get("ratio_to_dgl")
        out.append(
            target(
                f"{DGL_TARGET_CONTENDER} / DGL edges/s",
                f"{threads} thread(s)",
                value,
                GOAL_OVER_DGL,
                True,
                threads=threads,
                dgl_version=dgl_version,
                dgl_is_2_1_0=dgl_target_version(dgl_version),
            )
        )
    return out


def not_measured_targets(reason: str) -> list[dict]:
    """Every target, not measured (a CPU run of the throughput benchmark measures none)."""
    rows = gpu_targets([], None) + dgl_targets([], None)
    for row in rows:
        row["applies"] = reason
    return rows


def targets_markdown(targets: list[dict]) -> list[str]:
    """The "Targets" section: one line per target, value, goal and verdict."""
    lines = [
        "## Targets",
        "",
        "| target | applies to | measured | goal | verdict |",
        "|---|---|---|---|---|",
    ]
    for t in targets:
        value = "-" if t["value"] is None else f"{t['value']:.2f}x"
        lines.append(
            f"| {t['name']} | {t['applies']} | {value} | {t['comparison']} {t['goal']:g}x "
            f"| {verdict(t)} |"
        )
    return lines


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def markdown(env: dict, payload: dict) -> str:
    g = payload["graph"]
    load = payload["load_average_before_after"]
    lines = [
        *header_lines(f"Neighbor sampling throughput ({payload['sample_device']})", env),
        f"Graph: {g['kind']}, {g['num_nodes']:,} nodes, {g['num_edges']:,} edges, largest "
        f"in-degree {g['max_in_degree']:,}, {g['isolated_in']:,} nodes without in-edges; "
        f"generated in {g['generate_s']:.1f} s. Batch size {payload['batch_size']}, fanouts "
        f"{payload['fanouts']}, {payload['batches']} batches of distinct random seeds after "
        f"{payload['warmup']} warm-up batches; torch threads: {payload['torch_threads']} "
        f"(1-min load average {load[0]:.2f} before, {load[1]:.2f} after); "
        f"peak RSS {payload['peak_rss_gib']:.2f} GiB.",
        "",
        "| CSR indices | graph in | backend | CSR build (s) | median batch (ms) "
        "| median edges/s | total edges/s | edges/batch | nodes/batch "
        "| host CPU/batch (ms) | GPU busy/batch (ms) | host / GPU busy "
        "| torch ops / hop launches / host reads per batch |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{1e3 * x:.2f}"

    for r in payload["results"]:
        ratio = r.get("host_over_gpu_busy")
        lines.append(
            f"| {r['indices']} | {r['graph_memory']} | {backend_label(r)} "
            f"| {r['csr_build_s']:.2f} "
            f"| {1e3 * r['median_batch_s']:.1f} "
            f"| {r['median_edges_per_s'] / 1e6:.2f} M | {r['total_edges_per_s'] / 1e6:.2f} M "
            f"| {r['mean_sampled_edges']:,.0f} | {r['mean_sampled_nodes']:,.0f} "
            f"| {ms(r.get('median_host_cpu_s'))} | {ms(r.get('gpu_busy_s'))} "
            f"| {'-' if ratio is None else f'{ratio:.2f}'} "
            f"| {r.get('torch_ops_per_batch', '-')} / {r.get('kernel_launches_per_batch', '-')}"
            f" / {r.get('host_reads_per_batch', '-')} |"
        )
    if payload["sample_device"] == "cuda":
        lines += [
            "",
            "Host CPU/batch: the sampling thread's CPU time inside `sample()` (the fused hops "
            "sleep while they wait for a size; torch's own host reads may spin). GPU busy: the "
            "summed durations of the kernels and copies of 5 batches (torch profiler), per batch.",
        ]
        if any(r.get("group", 1) > 1 for r in payload["results"]):
            lines += [
                "",
                "Groups of K: each call of `NeighborSampler.sample_batches` samples K batches "
                "(as many warm-up calls as warm-up batches above, then the batches rounded "
                "up to whole groups); every figure of such a row is per batch, the call's "
                "divided by K (host CPU in `sample_batches()`, GPU busy of one profiled "
                "call); their tables of where the time goes below are per call, K batches.",
            ]
        cpu1 = payload.get("cpu_baseline") or {}
        if "median_edges_per_s" in cpu1:
            hop = "compiled hop (Numba)" if cpu1["compiled_hop"] else "torch ops (no Numba)"
            lines += [
                "",
                f"1-thread CPU baseline: our CPU sampler, {hop}, {cpu1['indices']} CSR on the "
                f"host, torch.set_num_threads(1), the first {cpu1['batches']} measured seed "
                f"batches after {cpu1['warmup']} warm-up batches: median batch "
                f"{1e3 * cpu1['median_batch_s']:.1f} ms, median "
                f"{cpu1['median_edges_per_s'] / 1e6:.2f} M edges/s, total "
                f"{cpu1['total_edges_per_s'] / 1e6:.2f} M edges/s.",
            ]
        else:
            lines += ["", f"1-thread CPU baseline: not measured ({cpu1.get('error', '-')})."]
    lines += ["", "## Where a batch's time goes", ""]
    for r in payload["results"]:
        split = r.get("time_split")
        if split:
            title = f"{r['indices']}, {r['graph_memory']}, {backend_label(r)}"
            lines += [*time_split.markdown(title, split), ""]
    lines.pop()
    if payload.get("targets"):
        lines += ["", *targets_markdown(payload["targets"])]
    return "\n".join(lines) + "\n"


def run(
    edge_index: torch.Tensor,
    device: torch.device,
    backends: list[str],
    args,
    env: dict,
    graph_info: dict,
):
    load_before = os.getloadavg()[0]
    results = []
    cpu1 = None
    for dtype, label in ((torch.int64, "int64"), (torch.int32, "int32")):
        ei = edge_index.to(device)
        sync(device)
        t0 = time.perf_counter()
        graph = CSRGraph.from_edge_index(ei, args.nodes, indices_dtype=dtype)
        sync(device)
        build = time.perf_counter() - t0
        del ei
        if "max_in_degree" not in graph_info:
            deg = graph.in_degree()
            graph_info["max_in_degree"] = int(deg.max())
            graph_info["isolated_in"] = int((deg == 0).sum())
        print(f"{device.type} {label}: CSR built in {build:.2f} s", file=sys.stderr, flush=True)
        if device.type == "cuda" and dtype == torch.int64:
            cpu1 = run_cpu_baseline(graph, args)
        placed = {"host" if device.type == "cpu" else "device": graph}
        if device.type == "cuda" and "uva" in args.graph_memory:
            placed["uva"] = graph.to_uva(device)
        if device.type == "cuda" and "uva-separate" in args.graph_memory:
            placed["uva-separate"] = graph.to_uva(device, indptr_in_gpu=False, pairs=False)
        if device.type == "cuda" and "device-pairs" in args.graph_memory:
            if graph.indices.dtype == torch.int64:  # int32 indices are never interleaved
                placed["device-pairs"] = graph.as_pairs()
        if device.type == "cuda" and "device" not in args.graph_memory:
            del placed["device"]
        for memory, g in placed.items():
            for backend in backends:
                for grid, graphs, host_seeds, group in placed_variants(memory, backend, args):
                    row = measure(g, args, label, backend, memory, grid, graphs, host_seeds, group)
                    row = {"csr_build_s": build, **row}
                    print(f"  {row}", file=sys.stderr, flush=True)
                    results.append(row)
        del graph, placed
    payload = {
        **env,
        "sample_device": device.type,
        "graph": graph_info,
        "batch_size": args.batch_size,
        "fanouts": args.fanouts,
        "batches": args.batches,
        "warmup": args.warmup,
        "backends": backends,
        "graph_memory": ["host"] if device.type == "cpu" else args.graph_memory,
        "torch_threads": torch.get_num_threads(),
        "load_average_before_after": [load_before, os.getloadavg()[0]],
        "results": results,
    }
    if device.type == "cuda":
        payload["gpu"] = torch.cuda.get_device_name(device)
        payload["cuda"] = torch.version.cuda
        payload["cpu_baseline"] = cpu1
        payload["targets"] = gpu_targets(results, cpu1)
    else:
        payload["targets"] = not_measured_targets(
            "not measured on the CPU: GPU targets need --device cuda, DGL's --compare-dgl"
        )
    payload["peak_rss_gib"] = peak_rss_gib()
    name = results_name(device)
    print(write_json_md(name, payload, lambda: markdown(env, payload), args.out).read_text())


def load_dgl():
    """``dgl``, imported the way ibp-graph's DGL loader imports it (GraphBolt placeholder)."""
    try:
        importlib.import_module("ibp_graph.loaders.dgl")  # before dgl: it makes dgl importable
        dgl = importlib.import_module("dgl")
    except ImportError as exc:
        raise SystemExit(f"--compare-dgl needs DGL: pip install 'ibp-graph[dgl]' ({exc})") from exc
    return dgl


#: Our samplers among the contenders: name -> (draw, hops compiled).
OURS = {
    "ibp-graph once": ("once", True),
    "ibp-graph per_hop": ("per_hop", True),
    "ibp-graph once, torch ops": ("once", False),
}
#: The samplers `compare_dgl` times side by side, in its order.
CONTENDERS = ("dgl", *OURS)


def contenders(
    edge_index: torch.Tensor, args: argparse.Namespace, names: Sequence[str] = CONTENDERS
) -> dict:
    """name -> function(seeds) -> sampled edges, for `compare_dgl`: the ``names`` ones.

    DGL is imported, and its graph built, only where ``"dgl"`` is among them.
    """
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        raise ValueError(f"no contender {unknown[0]!r}; they are {', '.join(CONTENDERS)}")
    built = {}
    if "dgl" in names:
        dgl = load_dgl()
        dg = dgl.graph((edge_index[0], edge_index[1]), num_nodes=args.nodes).formats("csc")
        dg.create_formats_()
        dgl_sampler = dgl.dataloading.NeighborSampler(list(reversed(args.fanouts)))

        def dgl_batch(seeds: torch.Tensor) -> int:
            _, _, blocks = dgl_sampler.sample_blocks(dg, seeds)
            return sum(block.num_edges() for block in blocks)

        built["dgl"] = dgl_batch
    ours = [n for n in names if n != "dgl"]
    graph = CSRGraph.from_edge_index(edge_index, args.nodes) if ours else None

    def sampled(draw: str, compiled: bool):
        sampler = NeighborSampler(graph, args.fanouts, seed=args.seed, draw=draw)

        def batch(seeds: torch.Tensor) -> int:
            before = sampler_module._COMPILED
            sampler_module._COMPILED = compiled
            try:
                return sampler.sample(seeds).num_edges
            finally:
                sampler_module._COMPILED = before

        return batch

    built.update((name, sampled(*OURS[name])) for name in ours)
    return {name: built[name] for name in names}


def compare_dgl(edge_index: torch.Tensor, args: argparse.Namespace, env: dict, info: dict):
    """Our sampler and DGL's, alternating batch by batch, at each thread count."""
    t0 = time.perf_counter()
    fns = contenders(edge_index, args)
    info["setup_s"] = time.perf_counter() - t0
    names = list(fns)
    total = args.warmup + args.batches
    perm = torch.randperm(args.nodes, generator=torch.Generator().manual_seed(args.seed + 1))
    seeds = perm[: total * args.batch_size].view(total, args.batch_size)
    runs = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        load_before = os.getloadavg()[0]
        samples = {name: [] for name in names}
        for i in range(total):
            for j in range(len(names)):
                name = names[(i + j) % len(names)]
                w0, c0 = time.perf_counter(), time.process_time()
                edges = fns[name](seeds[i])
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                if i >= args.warmup:
                    samples[name].append((wall, cpu, edges))
        rows = []
        for name in names:
            walls, cpus, edges = zip(*samples[name], strict=True)
            rates = [e / w for e, w in zip(edges, walls, strict=True)]
            paired = [r / (e / w) for r, (w, _, e) in zip(rates, samples["dgl"], strict=True)]
            rows.append(
                {
                    "contender": name,
                    "median_batch_s": statistics.median(walls),
                    "median_cpu_s": statistics.median(cpus),
                    "mean_sampled_edges": statistics.fmean(edges),
                    "median_edges_per_s": statistics.median(rates),
                    "median_paired_ratio_to_dgl": statistics.median(paired),
                }
            )
        base = rows[0]["median_edges_per_s"]
        for row in rows:
            row["ratio_to_dgl"] = row["median_edges_per_s"] / base
        run = {"threads": threads, "load_average_before_after": [load_before, os.getloadavg()[0]]}
        runs.append({**run, "results": rows})
        print(f"threads={threads}: {rows}", file=sys.stderr, flush=True)
    payload = {
        **env,
        "mode": "compare-dgl",
        "graph": info,
        "batch_size": args.batch_size,
        "fanouts": args.fanouts,
        "batches": args.batches,
        "warmup": args.warmup,
        "dgl_version": load_dgl().__version__,
        "numba": sample_cpu.available(),
        "runs": runs,
        "peak_rss_gib": peak_rss_gib(),
    }
    payload["dgl_is_2_1_0"] = dgl_target_version(payload["dgl_version"])
    payload["targets"] = dgl_targets(runs, payload["dgl_version"])
    name = results_name(torch.device("cpu"), compare_dgl=True)
    print(
        write_json_md(name, payload, lambda: compare_markdown(env, payload), args.out).read_text()
    )


def compare_markdown(env: dict, payload: dict) -> str:
    g = payload["graph"]
    commit = str(env.get("git_commit", "unknown"))
    lines = [
        *header_lines("CPU neighbor sampling: ibp-graph against DGL, side by side", env),
        f"Commit: {commit.removesuffix('-dirty')}"
        + (" plus uncommitted changes" if commit.endswith("-dirty") else "")
        + f"; DGL {payload['dgl_version']}; Numba hop: {payload['numba']}.",
        "",
        f"Graph: {g['kind']}, {g['num_nodes']:,} nodes, {g['num_edges']:,} edges (generated in "
        f"{g['generate_s']:.1f} s; CSR and DGL CSC built in {g['setup_s']:.1f} s). Batch size "
        f"{payload['batch_size']}, fanouts {payload['fanouts']} (DGL: "
        f"{list(reversed(payload['fanouts']))}), {payload['batches']} batches of distinct random "
        f"seeds after {payload['warmup']} warm-up batches, every batch sampled by every "
        "contender in rotating order. Edges/s: sampled edges over wall time per batch; ratio: "
        "to DGL's median edges/s, and the median of the per-batch ratios. Target: ratio >= 1 at "
        "1 and 2 threads.",
        "",
    ]
    for run in payload["runs"]:
        load = run["load_average_before_after"]
        lines += [
            f"### torch.set_num_threads({run['threads']}) (1-min load average {load[0]:.2f} "
            f"before, {load[1]:.2f} after)",
            "",
            "| contender | median batch (ms) | median CPU (ms) | edges/batch | median edges/s "
            "| ratio to DGL | per-batch ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in run["results"]:
            lines.append(
                f"| {r['contender']} | {1e3 * r['median_batch_s']:.1f} "
                f"| {1e3 * r['median_cpu_s']:.1f} | {r['mean_sampled_edges']:,.0f} "
                f"| {r['median_edges_per_s'] / 1e6:.2f} M | {r['ratio_to_dgl']:.2f}x "
                f"| {r['median_paired_ratio_to_dgl']:.2f}x |"
            )
        lines.append("")
    if not payload.get("dgl_is_2_1_0", True):
        lines += [f"DGL {payload['dgl_version']} ran, not {DGL_TARGET_VERSION} (the target's).", ""]
    lines += [*targets_markdown(payload.get("targets", [])), ""]
    return "\n".join(lines)


def results_name(device: torch.device, compare_dgl: bool = False) -> str:
    """The results' file name, without ``.json`` / ``.md``: `COMPARE_DGL_NAME` for
    ``--compare-dgl``, `CPU_ALONE_NAME` for a plain CPU run, ``sampling-<GPU>`` on a GPU."""
    if compare_dgl:
        return COMPARE_DGL_NAME
    if device.type != "cuda":
        return CPU_ALONE_NAME
    return result_name("sampling", device)


def parse_threads(text: str) -> list[int]:
    """``"1,2"`` -> ``[1, 2]`` (argparse type of ``--threads``)."""
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected thread counts like 1,2, got {text!r}")
    return values


def variants(backend: str, args: argparse.Namespace) -> list[tuple[float | None, bool, bool, int]]:
    """The rows of one backend: ``(hop grid, cuda_graph, seeds on the host, group)`` each
    (see ``--hop-grids``, ``--cuda-graph``, ``--host-seeds`` and ``--group``)."""
    if backend != "kernel":
        return [(None, False, False, 1)]
    graphs = [False] + [True] * bool(args.cuda_graph)
    rows = [(grid, False, False, 1) for grid in args.hop_grids]
    rows += [(None, True, False, 1)] * bool(args.cuda_graph)
    if args.host_seeds:
        rows += [(None, graph, True, 1) for graph in graphs]
    if args.group > 1:
        rows += [(None, graph, True, args.group) for graph in graphs]
    return rows


def placed_variants(
    memory: str, backend: str, args: argparse.Namespace
) -> list[tuple[float | None, bool, bool, int]]:
    """`variants` for the graph in ``memory``: with ``uva-separate`` (the UVA layout before
    `CSRGraph.to_uva`'s default, beside it) and ``device-pairs`` (the graph in GPU memory in
    the pairs layout, `CSRGraph.as_pairs`), the ``kernel`` backend's last one only."""
    rows = variants(backend, args)
    if memory in ("uva-separate", "device-pairs"):
        return rows[-1:] if backend == "kernel" else []
    return rows


def parse_hop_grids(text: str) -> list[float | None]:
    """``"default,32"`` -> ``[None, 32.0]`` (argparse type of ``--hop-grids``)."""
    grids: list[float | None] = []
    for item in (part.strip() for part in text.split(",")):
        if item == "default":
            grids.append(None)
            continue
        try:
            grids.append(blocks_per_sm(item))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"each grid is 'default' or a positive number of blocks per SM, got {item!r}"
            ) from None
    if len(set(grids)) != len(grids):
        raise argparse.ArgumentTypeError(f"each grid once, got {text!r}")
    return grids


def parse_backends(text: str) -> list[str]:
    """``"torch,kernel"`` -> ``["torch", "kernel"]`` (argparse type of ``--backend``)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in BACKENDS]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(BACKENDS)}, got {text!r}"
        )
    return list(dict.fromkeys(names))


def backends_for(device: str, asked: list[str] | None) -> list[str]:
    """The backends run on ``device``: those asked for that it supports, or its default."""
    if asked is None:
        return ["torch"] if device == "cpu" else list(BACKENDS)
    if device == "cpu" and "kernel" in asked:
        print("cpu: backend 'kernel' needs CUDA, skipped", file=sys.stderr, flush=True)
        return [b for b in asked if b != "kernel"]
    return asked


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of `main` (``argv``: None for ``sys.argv[1:]``), checked."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=2_000_000)
    p.add_argument("--edges", type=int, default=50_000_000)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help=f"auto: the CPU, and CUDA when available (default: auto); the CPU writes "
        f"{CPU_ALONE_NAME}.{{json,md}}, a GPU sampling-<GPU>.{{json,md}}",
    )
    p.add_argument(
        "--backend",
        type=parse_backends,
        default=None,
        metavar="torch,kernel",
        help="sampler backends to compare (default: torch on CPU, torch,kernel on CUDA)",
    )
    p.add_argument(
        "--graph-memory",
        type=lambda text: [m.strip() for m in text.split(",") if m.strip()],
        default=["device", "uva"],
        metavar="device,uva",
        help="on CUDA: the graph in GPU memory, in pinned host memory over UVA (to_uva's "
        "layout), or both; for the kernel backend's last variant also: uva-separate, every "
        "array over UVA on its own (the layout before); device-pairs, the graph in GPU "
        "memory with sources and edge ids interleaved (int64 indices)",
    )
    p.add_argument(
        "--hop-grids",
        type=parse_hop_grids,
        default=[None],
        metavar="default,32",
        help="backend kernel: the hop kernels' grid caps to run, each 'default' (the "
        "library's: one block per SM) or blocks per SM, cut to what the SMs hold "
        "(default: default)",
    )
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="backend kernel: also a row with cuda_graph=True (captured launches replayed, "
        "at the default grid)",
    )
    p.add_argument(
        "--host-seeds",
        action="store_true",
        help="backend kernel: also rows whose seed batches are given on the CPU, as the "
        "loaders give them (at the default grid, and with --cuda-graph replayed too); the "
        "other rows give them on the graph's device",
    )
    p.add_argument(
        "--group",
        type=int,
        default=1,
        metavar="K",
        help="backend kernel: also rows sampling K batches per NeighborSampler.sample_batches "
        "call, seeds from the host (at the default grid, and replayed with --cuda-graph; "
        "figures per batch) (default: 1, no such rows)",
    )
    add_out(p)
    p.add_argument(
        "--compare-dgl",
        action="store_true",
        help=f"CPU: time our sampler and DGL's side by side (writes "
        f"{COMPARE_DGL_NAME}.{{json,md}}, not {CPU_ALONE_NAME})",
    )
    p.add_argument(
        "--threads",
        type=parse_threads,
        default=[1, 2],
        metavar="1,2",
        help="with --compare-dgl: the torch.set_num_threads values to run (default: 1,2)",
    )
    args = p.parse_args(argv)
    if not args.graph_memory or set(args.graph_memory) - set(GRAPH_MEMORY_CHOICES):
        p.error(
            f"--graph-memory: expected {', '.join(GRAPH_MEMORY_CHOICES)}, comma-separated, got "
            f"{args.graph_memory}"
        )
    if args.group < 1:
        p.error(f"--group: expected a number of batches >= 1, got {args.group}")
    if args.device == "cpu" and args.backend == ["kernel"]:
        p.error("--backend kernel needs --device cuda (or auto on a machine with a GPU)")
    if args.compare_dgl and (args.device == "cuda" or args.backend not in (None, ["torch"])):
        p.error("--compare-dgl times CPU samplers: drop --device cuda and --backend kernel")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    devices = {"auto": ["cpu"] + (["cuda"] if torch.cuda.is_available() else []), "cpu": ["cpu"]}
    devices["cuda"] = ["cuda"]
    env = environment()
    t0 = time.perf_counter()
    edge_index = power_law_edges(args.nodes, args.edges, args.seed)
    graph_info = {
        "kind": f"Chung-Lu power law (gamma={GAMMA}), seed {args.seed}",
        "num_nodes": args.nodes,
        "num_edges": args.edges,
        "generate_s": time.perf_counter() - t0,
    }
    print(f"graph generated in {graph_info['generate_s']:.1f} s", file=sys.stderr, flush=True)
    if args.compare_dgl:
        compare_dgl(edge_index, args, env, graph_info)
        return
    for name in devices[args.device]:
        backends = backends_for(name, args.backend)
        if backends:
            run(edge_index, torch.device(name), backends, args, env, graph_info)


if __name__ == "__main__":
    main()
