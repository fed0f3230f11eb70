"""Reads of a UVA graph per sampled batch: 32-byte sectors the hop kernels ask of host memory.

Usage::

    .venv/bin/python benchmarks/uva_reads.py            # the sampling benchmark's graph
    .venv/bin/python benchmarks/uva_reads.py --nodes 200000 --edges 5000000

writes benchmarks/results/uva-reads-cpu.{json,md}.

Over UVA (``graph_memory="uva"``, `ibp_graph.graph.CSRGraph.to_uva`) every 32-byte sector a
warp's load instruction touches in the graph's arrays is a read over PCIe, and on the GPU the
sampler's hops took 7x the time they take with the graph in GPU memory
(benchmarks/results/sampling-nvidia-h200.md). This counts those sectors, which needs no GPU: it
samples batches with the hop kernels' own source run on the host (the tests' SIMT harness,
``tests/simt``, needs g++), records each launch's frontier and the CSR position of every slot
(what the draw leaves in ``pos``), and replays the kernels' load instructions warp by warp:

- ``indptr``: a lane per frontier row reads ``indptr[v]`` and ``indptr[v + 1]``, the sectors of
  both counted once per warp;
- ``indices``, a lane per row: the draw before commit 5ac28d6, each lane reading its row's
  slots one after the other, so that load ``t`` of a warp reads slot ``t`` of 32 rows;
- ``indices``, the warp's slots: the draw since, the warp's lanes taking its 32 rows' slots in
  order, so that a load reads 32 consecutive slots;
- ``edge_ids``: the emit, a lane per slot, 32 consecutive slots a load;
- pairs: the warp's slots in the pairs layout (`CSRGraph.pairs`, `to_uva`'s default for int64
  indices), where one 16-byte load reads a slot's source and edge id, and the emit reads none.

Then, per batch, the layouts: every array over UVA, before and since the warp's slots; then
``indptr`` in GPU memory; then (int64 indices) pairs as well, `to_uva`'s default.

A load's sectors are counted within one warp instruction only: sectors that a cache might
still hold from an earlier instruction are counted again. Counts do not depend on timing; a
GPU run (the ``sampling`` stage of benchmarks/gpu_session.sh) says what they cost.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

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

#: Bytes of a sector, the unit in which a load instruction's addresses are served.
SECTOR = 32
#: Lanes of a warp.
WARP = 32
#: The counted arrays and load patterns, in the order of the tables.
PATTERNS = ("indptr", "indices_lane_per_row", "indices_warp_slots", "edge_ids", "pairs")


def sectors_per_load(addresses: np.ndarray) -> int:
    """Distinct sectors summed over the rows of ``addresses``, each row one warp's load.

    Args:
        addresses: ``(loads, lanes)`` int64 byte addresses; a negative entry is a lane that
            reads nothing.
    """
    if addresses.size == 0:
        return 0
    s = np.where(addresses >= 0, addresses // SECTOR, -1)
    s.sort(axis=1)
    new = np.ones(s.shape, dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    return int((new & (s >= 0)).sum())


def _warps(values: np.ndarray, lanes: int = WARP) -> np.ndarray:
    """``values`` cut along its first axis into ``(-1, lanes, ...)``, padded with -1."""
    pad = np.full((-len(values) % lanes, *values.shape[1:]), -1, values.dtype)
    return np.concatenate([values, pad]).reshape(-1, lanes, *values.shape[1:])


def draw_sectors(
    indptr_rows: np.ndarray, pos: np.ndarray, k: int, index_bytes: int
) -> dict[str, int]:
    """The sectors of one draw launch and its emit, per `PATTERNS`.

    Args:
        indptr_rows: ``(rows,)`` the node of every expanded frontier row (-1: not expanded).
        pos: ``(rows * k,)`` the CSR position of every slot after the draw (-1: unused).
        k: the fanout (slots a row).
        index_bytes: bytes of an entry of ``indices`` (4 or 8).
    """
    rows = len(indptr_rows)
    v = _warps(indptr_rows)
    by_warp = _warps(pos.reshape(rows, k), WARP)  # (warps, 32 rows, k), past the end -1
    # A lane per row: load t of a warp reads slot t of each of its 32 rows.
    per_row = by_warp.transpose(0, 2, 1).reshape(-1, WARP)
    # The warp's slots: its rows' 32 * k slots in order, 32 consecutive ones a load.
    in_order = by_warp.reshape(-1, WARP)
    flat = _warps(pos)  # the emit: slot e at lane e % 32 of load e // 32

    def at(entries: np.ndarray, width: int) -> np.ndarray:  # byte addresses, -1 kept
        return np.where(entries >= 0, width * entries, -1)

    return {
        "indptr": sectors_per_load(
            np.concatenate([at(v, 8), at(np.where(v >= 0, v + 1, -1), 8)], 1)
        ),
        "indices_lane_per_row": sectors_per_load(at(per_row, index_bytes)),
        "indices_warp_slots": sectors_per_load(at(in_order, index_bytes)),
        "edge_ids": sectors_per_load(at(flat, 8)),
        "pairs": sectors_per_load(at(in_order, 16)),
    }


class RecordingKernels:
    """Host hop kernels that keep what each draw launch expanded and where its slots read."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.draws: list[tuple[np.ndarray, np.ndarray, int]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def draw(self, indptr, indices, frontier, rows_at, key, local, nbr, pos, *, rows, k,
             replace):  # fmt: skip
        self.inner.draw(
            indptr, indices, frontier, rows_at, key, local, nbr, pos, rows=rows, k=k,
            replace=replace,
        )  # fmt: skip
        used = rows if rows_at is None else min(int(rows_at[0]), rows)
        nodes = np.full(rows, -1, dtype=np.int64)
        nodes[:used] = frontier[:used].numpy()
        self.draws.append((nodes, pos[: rows * k].numpy().copy(), k))


def measure(graph: CSRGraph, fanouts: list[int], seeds: list[torch.Tensor], lib) -> dict:
    """Sectors per batch, by pattern and by hop, of sampling each of ``seeds``.

    ``lib``: the host harness (`simt.harness.build`) whose hop kernels sample.
    """
    from simt.host_hops import HostHopKernels

    if graph.pairs:  # its draws leave edge ids in pos, not the positions counted here
        raise ValueError("measure counts a graph of separate arrays; this one is pairs")
    sampler = NeighborSampler(graph, fanouts, seed=0)
    kernels = RecordingKernels(HostHopKernels(lib, grid=4, block=128))
    sampler._hop_kernels = kernels
    hops = [dict.fromkeys(PATTERNS, 0) | {"rows": 0, "slots_used": 0} for _ in fanouts]
    edges = 0
    for batch_seeds in seeds:
        kernels.draws.clear()
        edges += sampler.sample(batch_seeds).num_edges
        if len(kernels.draws) != len(fanouts):
            raise RuntimeError(f"{len(kernels.draws)} draw launches for {len(fanouts)} hops")
        for hop, (nodes, pos, k) in zip(hops, kernels.draws, strict=True):
            for name, n in draw_sectors(nodes, pos, k, graph.indices.element_size()).items():
                hop[name] += n
            hop["rows"] += int((nodes >= 0).sum())
            hop["slots_used"] += int((pos >= 0).sum())
    n = len(seeds)
    hops = [{name: round(value / n, 1) for name, value in hop.items()} for hop in hops]
    total = {name: round(sum(h[name] for h in hops), 1) for name in hops[0]}
    return {"hops": hops, "total": total, "edges_per_batch": round(edges / n, 1)}


def layouts(total: dict, index_dtype: str) -> list[tuple[str, float | None]]:
    """Sectors per batch of each layout (`layouts` of the module docstring); None: not made."""
    before = total["indptr"] + total["indices_lane_per_row"] + total["edge_ids"]
    warp = total["indices_warp_slots"] + total["edge_ids"]
    return [
        ("every array over UVA, a lane per row's slots (before)", before),
        ("every array over UVA, the warp's slots", total["indptr"] + warp),
        ("indptr in GPU memory", warp),
        ("indptr in GPU memory, pairs (to_uva's default)", total["pairs"])
        if index_dtype == "int64"
        else ("pairs (int64 indices only)", None),
    ]


def markdown(env: dict, payload: dict) -> str:
    lines = header_lines("Reads of a UVA graph per sampled batch (hop kernels)", env)[:-1]
    lines += [
        f"- graph: {payload['graph']}; fanouts {payload['fanouts']}, batch "
        f"{payload['batch_size']}, {payload['batches']} batches (figures per batch)",
        f"- kernels: {payload['kernels']}",
        "",
        "32-byte sectors asked of host memory per batch, each load instruction of a warp "
        "counted on its own (benchmarks/uva_reads.py says how), by array and load pattern:",
        "",
        "| indices | hop | rows | used slots | indptr | indices, a lane per row (before) "
        "| indices, the warp's slots | edge_ids (emit) | pairs, the warp's slots |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in payload["runs"]:
        named = [(str(h + 1), hop) for h, hop in enumerate(run["hops"])] + [("all", run["total"])]
        for label, hop in named:
            lines.append(
                f"| {run['indices']} | {label} | {hop['rows']:,.0f} | {hop['slots_used']:,.0f} | "
                + " | ".join(f"{hop[p]:,.0f}" for p in PATTERNS)
                + " |"
            )
    lines += ["", "Sectors per batch over UVA, all hops, by layout:", ""]
    lines += ["| indices | layout | sectors | / before |", "|---|---|---|---|"]
    for run in payload["runs"]:
        rows = layouts(run["total"], run["indices"])
        before = rows[0][1]
        for name, n in rows:
            if n is None:
                lines.append(f"| {run['indices']} | {name} | - | - |")
            else:
                lines.append(f"| {run['indices']} | {name} | {n:,.0f} | {n / before:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--nodes", type=int, default=2_000_000)
    p.add_argument("--edges", type=int, default=50_000_000)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    add_out(p)
    args = p.parse_args(argv)
    edge_index = power_law_edges(args.nodes, args.edges, 0)
    perm = torch.randperm(args.nodes, generator=torch.Generator().manual_seed(1))
    seeds = [perm[i * args.batch_size : (i + 1) * args.batch_size] for i in range(args.batches)]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        from simt.harness import build

        lib = build(Path(tmp) / "libsimt.so")
        for dtype in (torch.int64, torch.int32):
            graph = CSRGraph.from_edge_index(edge_index, num_nodes=args.nodes, indices_dtype=dtype)
            run = measure(graph, args.fanouts, seeds, lib)
            runs.append({"indices": str(dtype).removeprefix("torch."), **run})
            del graph
    env = environment()
    payload = {
        "graph": f"power law (benchmarks/sampling.py), {args.nodes:,} nodes, {args.edges:,} edges",
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "batches": args.batches,
        "kernels": "cuda/sample_neighbors.cu run on the host (tests/simt harness, g++)",
        "runs": runs,
        "environment": env,
    }
    name = result_name("uva-reads", torch.device("cpu"))
    print(write_json_md(name, payload, lambda: markdown(env, payload), args.out).read_text())


if __name__ == "__main__":
    main()
