"""Neighbor-sampling throughput of `ibp_graph.sampler.NeighborSampler` on a power-law graph.

Usage::

    .venv/bin/python benchmarks/sampling.py                  # CPU, and CUDA when available
    .venv/bin/python benchmarks/sampling.py --device cuda    # one device only
    .venv/bin/python benchmarks/sampling.py --device cuda --backend kernel

writes benchmarks/results/sampling-<device>.{json,md}.

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
index width and per sampler backend (``NeighborSampler(backend=...)``: ``torch`` draws with torch
ops, ``kernel`` with the CUDA kernel of ``cuda/sample_neighbors.cu``), 50 batches of 1,024
distinct random seeds with fanouts [15, 10, 5] after 3 warm-up batches. Every backend samples the
same seed batches. ``--backend`` lists the backends (default: ``torch`` on CPU, both on CUDA;
``kernel`` needs CUDA). On CUDA each case also runs with the graph in pinned host memory read
over UVA (``CSRGraph.to_uva``, the loaders' ``graph_memory="uva"``) beside the graph in GPU
memory (``--graph-memory``, default both). Reported, one row per index width, graph memory and
backend: the median batch time, the median of per-batch sampled edges per second and the total
edges / total time. Threads: torch's default (all visible cores).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._env import RESULTS, environment, header_lines, write_json  # noqa: E402
from ibp_graph.graph import CSRGraph  # noqa: E402
from ibp_graph.sampler import BACKENDS, NeighborSampler  # noqa: E402

GAMMA = 2.5
CHUNK = 5_000_000


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


def measure(
    graph: CSRGraph, args: argparse.Namespace, label: str, backend: str, memory: str
) -> dict:
    device = graph.device
    sampler = NeighborSampler(graph, args.fanouts, seed=args.seed, backend=backend)
    total = args.warmup + args.batches
    perm = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(args.seed + 1))
    seeds = perm[: total * args.batch_size].view(total, args.batch_size).to(device)
    times, edges, nodes = [], [], []
    for i in range(total):
        sync(device)
        t0 = time.perf_counter()
        batch = sampler.sample(seeds[i])
        sync(device)
        dt = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(dt)
            edges.append(batch.num_edges)
            nodes.append(batch.num_nodes)
    rates = [e / t for e, t in zip(edges, times, strict=True)]
    return {
        "indices": label,
        "graph_memory": memory,
        "backend": backend,
        "batches": args.batches,
        "median_batch_s": statistics.median(times),
        "median_edges_per_s": statistics.median(rates),
        "total_edges_per_s": sum(edges) / sum(times),
        "mean_sampled_edges": sum(edges) / len(edges),
        "mean_sampled_nodes": sum(nodes) / len(nodes),
        "median_batches_per_s": 1.0 / statistics.median(times),
    }


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
        "| median edges/s | total edges/s | edges/batch | nodes/batch |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["results"]:
        lines.append(
            f"| {r['indices']} | {r['graph_memory']} | {r['backend']} | {r['csr_build_s']:.2f} "
            f"| {1e3 * r['median_batch_s']:.1f} "
            f"| {r['median_edges_per_s'] / 1e6:.2f} M | {r['total_edges_per_s'] / 1e6:.2f} M "
            f"| {r['mean_sampled_edges']:,.0f} | {r['mean_sampled_nodes']:,.0f} |"
        )
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
        placed = {"host" if device.type == "cpu" else "device": graph}
        if device.type == "cuda" and "uva" in args.graph_memory:
            placed["uva"] = graph.to_uva(device)
        if device.type == "cuda" and "device" not in args.graph_memory:
            del placed["device"]
        for memory, g in placed.items():
            for backend in backends:
                row = {"csr_build_s": build, **measure(g, args, label, backend, memory)}
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
    payload["peak_rss_gib"] = peak_rss_gib()
    name = f"sampling-{device.type}"
    write_json(name, payload, args.out)
    (args.out / f"{name}.md").write_text(markdown(env, payload))
    print((args.out / f"{name}.md").read_text())


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=2_000_000)
    p.add_argument("--edges", type=int, default=50_000_000)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
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
        help="on CUDA: the graph in GPU memory, in pinned host memory over UVA, or both",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    args = p.parse_args()
    if not args.graph_memory or set(args.graph_memory) - {"device", "uva"}:
        p.error(f"--graph-memory: expected device, uva or device,uva, got {args.graph_memory}")
    devices = {"auto": ["cpu"] + (["cuda"] if torch.cuda.is_available() else []), "cpu": ["cpu"]}
    devices["cuda"] = ["cuda"]
    if args.device == "cpu" and args.backend == ["kernel"]:
        p.error("--backend kernel needs --device cuda (or auto on a machine with a GPU)")
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
    for name in devices[args.device]:
        backends = backends_for(name, args.backend)
        if backends:
            run(edge_index, torch.device(name), backends, args, env, graph_info)


if __name__ == "__main__":
    main()
