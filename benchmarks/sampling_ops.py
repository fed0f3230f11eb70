"""Host work per sampled batch: torch ops, kernel launches and host reads, per sampler path.

Usage::

    .venv/bin/python benchmarks/sampling_ops.py              # CPU (kernels run by the harness)
    .venv/bin/python benchmarks/sampling_ops.py --device cuda

writes benchmarks/results/sampling-ops-<device>.{json,md}.

On a GPU every torch op of the sampler is a launch (or an allocation, or a view) queued by the
Python thread that also drives training, and every host read of a size waits for the stream.
This counts them, which needs no GPU: the torch ops the sampler dispatches (torch's dispatcher,
``TorchDispatchMode``), split into allocations, views and the rest; the hop kernels launched;
and the host reads (ops that copy a value to the host: ``item``, ``nonzero``, ``tolist``, and
indexing with a boolean mask, whose size the host needs); and the host values copied in (a
Python number made a tensor, as ``t[i] = n`` does: on a GPU a copy from pageable memory,
which waits for the stream too, and which a CUDA graph capture refuses).
Two paths sample the same seeds of a power-law graph (`benchmarks/sampling.py`'s generator,
smaller), fanouts [15, 10, 5], batch 1,024:

- ``torch ops``: the hops as torch ops (what ``backend="torch"`` runs on a CUDA graph; on the
  CPU the compiled Numba hop is switched off to count them);
- ``fused hops``: `ibp_graph.sample_hop.launch_batch` (``backend="kernel"``). On the CPU its
  kernels are the ``.cu`` source built for the host (tests/simt, needs g++); on CUDA the real
  launches;
- ``fused hops, CUDA graph``: the same with ``cuda_graph=True`` (`ibp_graph.sample_replay`),
  counted on a replayed batch (after two warm-ups: the eager batch, then the capture). On the
  CPU the capture is the tests' host stand-in (`simt.host_graph.HostCapture`), whose replay,
  like a graph launch, dispatches no torch op from the sampler;
- ``..., groups of K`` (``--group``, default 8): the two fused paths sampling K batches in one
  `ibp_graph.sampler.NeighborSampler.sample_batches` call (one group: its sizes read once, one
  copy of its seeds and keys, with ``cuda_graph=True`` one replay), counted per batch.

Each op is also put down to the innermost ``ibp_graph`` function that dispatched it ("Ops by
the ibp_graph function"), which says where to look for fewer. Counts are per batch, after
one warm-up batch (two with a CUDA graph); they do not depend on timing, so one batch is
enough. Times are not measured here (benchmarks/sampling.py does that on a GPU).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import ibp_graph.sample_hop as sample_hop  # noqa: E402
import ibp_graph.sampler as sampler_module  # noqa: E402
from benchmarks._env import (  # noqa: E402
    add_out,
    environment,
    header_lines,
    result_name,
    write_json_md,
)
from benchmarks.sampling import power_law_edges  # noqa: E402
from ibp_graph.graph import CSRGraph  # noqa: E402
from ibp_graph.sampler import NeighborSampler  # noqa: E402

#: Ops that make an empty tensor (no kernel on a GPU, the caching allocator only).
ALLOCATIONS = {"empty.memory_format", "empty_strided.default", "new_empty.default"}
#: Ops that copy a value to the host, and so wait for the stream.
HOST_READS = {"_local_scalar_dense.default", "nonzero.default", "masked_select.default"}
#: Ops that read a value back when an index is a boolean mask (``x[mask]``: its size).
MASK_INDEXING = {"index.Tensor"}
#: The op that makes a tensor of a Python value (``t[i] = n``, ``torch.tensor(n)``): on a
#: GPU, that value is then copied from pageable host memory, which waits for the stream.
HOST_VALUES = {"lift_fresh.default"}


def _has_mask(indices) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


def caller() -> str:
    """The innermost ``ibp_graph`` function on the stack, as ``module.function``."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("ibp_graph"):
            return f"{module.removeprefix('ibp_graph.')}.{frame.f_code.co_name}"
        frame = frame.f_back
    return "-"


class OpCounter(TorchDispatchMode):
    """Counts the torch ops dispatched inside it, by name and by the ``ibp_graph`` function
    that called them (``by_function``), and the boolean-mask indexing among them
    (``mask_reads``: a host read on a GPU, though no op of `HOST_READS`)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.by_function: collections.Counter = collections.Counter()
        self.mask_reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__ if hasattr(func, "__name__") else str(func)
        self.ops[name] += 1
        self.by_function[caller()] += 1
        if name in MASK_INDEXING and len(args) > 1 and _has_mask(args[1]):
            self.mask_reads += 1
        return func(*args, **(kwargs or {}))


class CountingKernels:
    """Wraps hop kernels, counting their launches."""

    def __init__(self, inner) -> None:
        self.inner, self.launches = inner, 0

    def launching(self):
        return self.inner.launching()

    def __getattr__(self, name):
        fn = getattr(self.inner, name)

        def launch(*args, **kwargs):
            self.launches += 1
            return fn(*args, **kwargs)

        return launch


def host_kernels(workdir: Path):
    from simt.harness import build
    from simt.host_hops import HostHopKernels

    return HostHopKernels(build(workdir / "libsimt.so"), grid=4, block=128)


def count(sampler: NeighborSampler, seeds: torch.Tensor, group: int = 1) -> dict:
    """Ops, launches and host reads of sampling ``seeds`` once (after a warm-up batch).

    With ``group > 1``: of one `NeighborSampler.sample_batches` call of ``group`` batches of
    ``seeds`` (each with its own seed, as the loaders give), per batch.
    """
    reads = [0]
    real = sample_hop.read_counts

    def counted_read(t):
        reads[0] += 1
        return real(t)

    def run():
        if group == 1:
            return sampler.sample(seeds)
        return sampler.sample_batches([seeds] * group, batch_seeds=list(range(group)))[0]

    for _ in range(2 if sampler.cuda_graph else 1):  # with a graph: eager, then captured
        run()  # warm-up: scratch map, arange, compiled kernels
    kernels = sampler._hop_kernels
    if kernels is not None:
        sampler._hop_kernels = kernels = CountingKernels(kernels)
    with contextlib.ExitStack() as stack:
        for module in (sample_hop, sampler_module):
            stack.callback(setattr, module, "read_counts", real)
            module.read_counts = counted_read
        with OpCounter() as counter:
            batch = run()
    if kernels is not None:
        sampler._hop_kernels = kernels.inner
    ops = counter.ops
    alloc = sum(n for name, n in ops.items() if name in ALLOCATIONS)
    views = sum(
        n
        for name, n in ops.items()
        if name.split(".")[0] in {"select", "slice", "view", "unsqueeze", "squeeze", "unbind"}
    )
    dispatched_reads = sum(n for name, n in ops.items() if name in HOST_READS)

    def per_batch(n: int) -> float | int:
        return n if group == 1 else round(n / group, 2)

    return {
        "group": group,
        "torch_ops": per_batch(sum(ops.values())),
        "allocations": per_batch(alloc),
        "views": per_batch(views),
        "other_ops": per_batch(sum(ops.values()) - alloc - views),
        "kernel_launches": per_batch(0 if kernels is None else kernels.launches),
        "host_reads": per_batch(dispatched_reads + counter.mask_reads + reads[0]),
        "host_values_in": per_batch(sum(n for name, n in ops.items() if name in HOST_VALUES)),
        "sampled_edges": batch.num_edges,
        "top_ops": dict(ops.most_common(12)),
        "ops_by_function": dict(counter.by_function.most_common()),
    }


def markdown(env: dict, payload: dict) -> str:
    lines = header_lines(f"Host work per sampled batch ({payload['device']})", env)[:-1]
    lines += [
        f"- graph: {payload['graph']}; fanouts {payload['fanouts']}, batch {payload['batch_size']}",
        f"- hop kernels: {payload['kernels']}",
        "",
        "| path | torch ops | of which allocations | of which views | other ops "
        "| kernel launches | host reads | host values copied in | sampled edges |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in payload["rows"]:
        lines.append(
            f"| {r['path']} | {r['torch_ops']} | {r['allocations']} | {r['views']} "
            f"| {r['other_ops']} | {r['kernel_launches']} | {r['host_reads']} "
            f"| {r['host_values_in']} | {r['sampled_edges']:,} |"
        )
    if any(r.get("group", 1) > 1 for r in payload["rows"]):
        lines += [
            "",
            "Groups of K: one `NeighborSampler.sample_batches` call of K batches of these "
            "seeds, each with its own seed, as one group (`ibp_graph.sample_hop."
            "launch_group`); counts per batch (the call's divided by K). The op lists below "
            "are the call's.",
        ]
    lines += ["", "Most frequent ops per path:", ""]
    for r in payload["rows"]:
        shown = ", ".join(f"{k} x{v}" for k, v in r["top_ops"].items())
        lines.append(f"- {r['path']}: {shown}")
    lines += ["", "Ops by the ibp_graph function that dispatched them:", ""]
    for r in payload["rows"]:
        shown = ", ".join(f"{k} {v}" for k, v in r["ops_by_function"].items())
        lines.append(f"- {r['path']}: {shown}")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--edges", type=int, default=5_000_000)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument(
        "--group",
        type=int,
        default=8,
        help="batches per sample_batches call for the group rows (default: 8; 1: no rows)",
    )
    add_out(p)
    args = p.parse_args()
    device = torch.device(args.device)
    graph = CSRGraph.from_edge_index(
        power_law_edges(args.nodes, args.edges, 0), num_nodes=args.nodes
    ).to(device)
    seeds = torch.randperm(args.nodes, generator=torch.Generator().manual_seed(1))
    seeds = seeds[: args.batch_size].to(device)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sampler_module._COMPILED = False  # count the torch-ops hop on the CPU too
        torch_path = NeighborSampler(graph, args.fanouts, seed=0)
        rows.append({"path": "torch ops", **count(torch_path, seeds)})
        if device.type == "cuda":
            fused = NeighborSampler(graph, args.fanouts, seed=0, backend="kernel")
            replayed = NeighborSampler(
                graph, args.fanouts, seed=0, backend="kernel", cuda_graph=True
            )
            kernels = "CUDA launches (cuda/sample_neighbors.cu), CUDA graphs"
        else:
            fused = NeighborSampler(graph, args.fanouts, seed=0)
            fused._hop_kernels = host_kernels(Path(tmp))
            from simt.host_graph import host_replay

            replayed = NeighborSampler(graph, args.fanouts, seed=0)
            host_replay(replayed, fused._hop_kernels)
            kernels = (
                "the .cu source run on the host (tests/simt harness, g++); CUDA graphs: the "
                "tests' host capture (simt.host_graph)"
            )
        rows.append({"path": "fused hops", **count(fused, seeds)})
        rows.append({"path": "fused hops, CUDA graph", **count(replayed, seeds)})
        if args.group > 1:
            for path, sampler in (("fused hops", fused), ("fused hops, CUDA graph", replayed)):
                row = count(sampler, seeds, args.group)
                rows.append({"path": f"{path}, groups of {args.group}", **row})
    env = environment()
    payload = {
        "device": device.type,
        "graph": f"power law, {args.nodes:,} nodes, {args.edges:,} edges",
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "kernels": kernels,
        "rows": rows,
        "environment": env,
    }
    name = result_name("sampling-ops", device)
    print(write_json_md(name, payload, lambda: markdown(env, payload), args.out).read_text())


if __name__ == "__main__":
    main()
