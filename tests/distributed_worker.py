"""One rank of the multi-process tests (tests/test_distributed_*.py); writes rank-N.json.

Started by torchrun, or directly with RANK / WORLD_SIZE / ... set:

    python tests/distributed_worker.py loader OUT_DIR TABLE.ibp GRAPH.pt [TABLE GRAPH ...]
    python tests/distributed_worker.py train OUT_DIR [--fail raise|kill] [--set key=value ...]
    python tests/distributed_worker.py dataset OUT_DIR [--omit-sets SET ...]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import torch


def _segment_memory(name: str) -> dict[str, int]:
    """Rss and Pss (bytes) of this process's mappings of the shared segment ``name``."""
    out = {"rss": 0, "pss": 0}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split(maxsplit=1)[0]
        if "-" in first and not first.endswith(":"):
            inside = name in line
        elif inside and first in ("Rss:", "Pss:"):
            out[first[:-1].lower()] += int(line.split()[1]) * 1024
    return out


def loader(args: argparse.Namespace) -> dict:
    """The PyG loader over each (table, graph) pair of ``args.paths``, one after the other."""
    from ibp_graph.distributed.ddp import init_from_env

    if not args.paths or len(args.paths) % 2:
        raise ValueError(f"loader: pairs of TABLE GRAPH, got {args.paths}")
    ctx = init_from_env("cpu", timeout_s=60)
    pairs = zip(args.paths[::2], args.paths[1::2], strict=True)
    out = {"graphs": [_shared_loader(ctx, table, graph) for table, graph in pairs]}
    ctx.close()
    return out


def _shared_loader(ctx, table: str, graph_file: str) -> dict:
    """Two epochs of the PyG loader over ``table``'s shared segment and ``graph_file``'s
    shared CSR graph, checked against the table read from its file."""
    from torch_geometric.data import Data

    import ibp_graph
    from ibp_graph.distributed.host import open_shared_table, share_host_graph
    from ibp_graph.graph import CSRGraph
    from ibp_graph.loaders.pyg import NeighborLoader

    graph = torch.load(graph_file)
    shared = open_shared_table(ctx, table)
    reference = ibp_graph.open(table)  # the single-process table, from the file
    data = Data(edge_index=graph["edge_index"], num_nodes=graph["num_nodes"])
    csr = share_host_graph(ctx, lambda: CSRGraph.from_data(data))
    loader = NeighborLoader(
        data,
        [5, 3],
        input_nodes=graph["train"],
        batch_size=16,
        shuffle=True,
        seed=11,
        features=shared,
        use_ddp=True,
        ddp_seed=11,
        csr=csr,
    )
    epochs, same = [], True
    for _ in range(2):
        seeds, batches = [], 0
        for batch in loader:
            seeds.append(batch.n_id[: batch.batch_size])
            want = reference[batch.n_id]
            same &= torch.equal(batch.x.view(torch.int32), want.view(torch.int32))
            batches += 1
        epochs.append({"seeds": torch.cat(seeds).tolist(), "batches": batches})
    shared[:]  # touch every row of the segment
    ctx.barrier()  # every rank has touched it: proportional shares are final
    memory = _segment_memory(shared.segment.name)
    graph_name = ctx.segment_name("graph")
    graph_memory = _segment_memory(graph_name)
    ctx.barrier()
    out = {
        "epochs": epochs,
        "features_identical": bool(same),
        "segment": shared.segment.name,
        "segment_bytes": shared.segment.nbytes,
        "memory": memory,
        "graph_segment": graph_name,
        "graph_memory": graph_memory,
        "graph_csr_bytes": sum(
            t.numel() * t.element_size() for t in (csr.indptr, csr.indices, csr.edge_ids)
        ),
    }
    shared.close()
    reference.close()
    # The graph's views are the last references to its segment: unmapped before the next.
    del loader, csr
    gc.collect()
    ctx.barrier()
    return out


def dataset(args: argparse.Namespace) -> dict:
    """`share_host_dataset` of Cora, once per omit set: who loaded it, what each rank holds.

    ``--omit-sets`` names each set's tensors joined by commas ("-" for none); the sets are
    shared one after the other, each dropped before the next.
    """
    from ibp_graph.datasets import load_dataset
    from ibp_graph.distributed.ddp import init_from_env

    ctx = init_from_env("cpu", timeout_s=60)
    want = load_dataset("cora")
    sets = [[n for n in s.split(",") if n not in ("", "-")] for s in args.omit_sets or ["-"]]
    out = {"variants": [_shared_dataset(ctx, want, omit) for omit in sets]}
    ctx.close()
    return out


def _shared_dataset(ctx, want, omit: list[str]) -> dict:
    """One `share_host_dataset` of Cora leaving out ``omit``, checked against ``want``."""
    from ibp_graph.datasets import TENSORS, load_dataset
    from ibp_graph.distributed.host import share_host_dataset

    calls = []

    def load():
        calls.append(1)
        return load_dataset("cora")

    ds = share_host_dataset(ctx, load, omit=omit)
    for name in TENSORS:
        if not getattr(ds, name).is_meta:
            getattr(ds, name).sum()  # touch every page
    ctx.barrier()  # every rank has touched them: proportional shares are final
    memory = _segment_memory(ctx.segment_name("dataset"))
    ctx.barrier()
    tensors = {}
    for name in TENSORS:
        have, ref = getattr(ds, name), getattr(want, name)
        tensors[name] = {
            "meta": have.is_meta,
            "same_shape": have.shape == ref.shape and have.dtype == ref.dtype,
            "equal": None if have.is_meta else torch.equal(have, ref),
            "bytes": ref.numel() * ref.element_size(),
        }
    out = {
        "omit": omit,
        "loaded": len(calls),
        "repr_equal": repr(ds) == repr(want),
        "tensors": tensors,
        "scalars_equal": (ds.name, ds.num_nodes, ds.num_classes, ds.source)
        == (want.name, want.num_nodes, want.num_classes, want.source),
        "memory": memory,
    }
    del ds  # its views are the segment's last references: unmapped before the next set
    gc.collect()
    ctx.barrier()
    return out


def train(args: argparse.Namespace) -> dict:
    from ibp_graph.train import run as run_module
    from ibp_graph.train.config import load_config

    cfg = load_config(args.config, args.overrides)
    rank = int(os.environ["RANK"])
    if args.fail and rank == 1:

        def failing(*a, **kw):
            if args.fail == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("injected failure in rank 1")

        run_module.train_epoch = failing
    result = run_module.train(cfg, log=None)
    return {
        "losses": result.losses,
        "world_size": result.world_size,
        "distributed": result.distributed,
        "summary": result.summary(),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["loader", "train", "dataset"])
    parser.add_argument("out", type=Path)
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--config", default="cora-sage")
    parser.add_argument("--fail", choices=["raise", "kill"], default=None)
    parser.add_argument("--omit-sets", nargs="*", default=[])
    parser.add_argument("--set", dest="overrides", nargs="+", default=[])
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    start = time.monotonic()
    try:
        out = {"loader": loader, "train": train, "dataset": dataset}[args.mode](args)
        code = 0
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out = {"error": str(exc), "type": type(exc).__name__, "trace": traceback.format_exc()}
        code = 1
    out["elapsed_s"] = time.monotonic() - start
    (args.out / f"rank-{rank}.json").write_text(json.dumps(out))
    return code


if __name__ == "__main__":
    sys.exit(main())
