"""PyG's and DGL's own example scripts, run with one line changed: the loader's import.

"Drop-in" means that a script written for PyG's ``NeighborLoader`` or DGL's ``DataLoader``
runs on ours with only its import changed. This runs upstream scripts that way, read from a
PyG checkout (``--pyg``) and a DGL one (``--dgl``): each a folder holding ``examples/``, or a
git repository read at ``--pyg-rev`` / ``--dgl-rev`` with ``git show``.

- PyG ``examples/reddit.py``: workers (``num_workers=6``, persistent), ``del
  subgraph_loader.data.x``, a layer-wise ``inference`` over ``batch.n_id``, 10 epochs;
- PyG ``examples/hierarchical_sampling.py``: ``num_sampled_nodes`` / ``num_sampled_edges``
  for trimming, one epoch each way;
- PyG ``examples/infomax_inductive.py``: ``data.edge_index`` on the device too (on a GPU),
  every node as a seed, ``DeepGraphInfomax``, 30 epochs (several minutes on a small CPU);
- PyG ``examples/ogbn_train.py``: ``PygNodePropPredDataset``, ``to_undirected``, its
  ``--model sage`` and ``--model sgformer`` (``disjoint=True`` and ``batch.batch``; with
  ``--batch_size 256 --fan_out 5``, since its disjoint trees at the defaults hold 1.1M nodes a
  batch), each with ``--dataset ogbn-arxiv --dataset_dir ../data --epochs 2
  --num_workers 2``;
- PyG ``examples/multi_gpu/distributed_sampling.py`` (on a GPU only: one process per GPU,
  NCCL, ``DistributedDataParallel``): ``x`` and ``y`` moved to the GPU, ``edge_index`` left on
  the host, a loader per split with ``num_workers=4``, persistent workers and
  ``drop_last=True``, 20 epochs. At the default 3,000 nodes its validation and test splits
  (about 600 nodes each) are smaller than its batch of 1,024, which it drops, so it prints
  their accuracies as nan (0 / 0), as it would with PyG's loader; the training accuracy is
  the check;
- DGL ``examples/pytorch/graphsage/node_classification.py --mode cpu``:
  ``DglNodePropPredDataset("ogbn-products")``, ``NeighborSampler`` with
  ``prefetch_node_feats`` / ``prefetch_labels``, 10 epochs, then a layer-wise inference with
  ``MultiLayerFullNeighborSampler(1)`` (it needs ``torchmetrics``).

Nothing is downloaded: the datasets are synthetic graphs written in the raw formats these
scripts' loaders read (``Reddit``'s ``reddit_data.npz`` / ``reddit_graph.npz``, ogbn-arxiv and
ogbn-products in OGB's layout), sized by ``--nodes``, where features carry the class (its
centroid plus noise) and most edges join nodes of one class, so accuracy shows that training
works. ``ogbn_train.py`` runs with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` in its environment:
ogb 1.3.6 reads its processed file with ``torch.load``, which torch 2.6 and later refuse
otherwise, with PyG's loader as with ours. The import line of each framework (`SWAPS`) must
appear exactly once in a script; it becomes ours and nothing else changes. A script whose
modules do not import here (ogb, DGL, ...), or that needs a CUDA device where there is none,
is skipped and reported as such. Reported per run:
the exit status, the wall time and the script's last lines. ``--export DIR`` writes the
scripts as they are upstream to ``DIR/<framework>/examples/`` instead (``--pyg DIR/pyg`` then
runs them on a machine without the checkout: benchmarks/gpu_session.sh's ``examples`` stage).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._env import (  # noqa: E402
    add_out,
    environment,
    header_lines,
    result_name,
    write_json_md,
)

ROOT = Path(__file__).resolve().parent.parent
NAME = "upstream-examples-cpu"
#: Per framework, the import line of its scripts and ours.
SWAPS = {
    "pyg": (
        "from torch_geometric.loader import NeighborLoader",
        "from ibp_graph.loaders.pyg import NeighborLoader",
    ),
    "dgl": ("from dgl.dataloading import (", "from ibp_graph.loaders.dgl import ("),
}
#: ogb 1.3.6 reads its processed file with ``torch.load``, which torch 2.6 and later refuse
#: without this (``weights_only``), whatever the loader: set for ``ogbn_train.py``.
OGB_ENV = (("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1"),)
_OGB_NEEDS = ("ogb", "psutil", "tqdm")
_OGB_ARGS = (
    *("--dataset", "ogbn-arxiv", "--dataset_dir", "../data"),
    *("--epochs", "2", "--num_workers", "2"),
)


@dataclass(frozen=True)
class Example:
    """One run: a framework's script under ``examples/``, its arguments and environment."""

    framework: str  # a key of SWAPS
    script: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: Modules the script imports that may be missing (it is skipped where one is).
    needs: tuple[str, ...] = ()
    #: It runs on CUDA devices only, with NCCL (skipped where either is missing).
    cuda: bool = False

    @property
    def label(self) -> str:
        return " ".join([f"{self.framework}: {self.script}", *self.args])


#: What runs, in order (a framework's runs are skipped where its checkout is not given).
EXAMPLES: tuple[Example, ...] = (
    Example("pyg", "reddit.py", needs=("scipy", "tqdm")),
    Example("pyg", "hierarchical_sampling.py", needs=("scipy", "tqdm")),
    Example("pyg", "infomax_inductive.py", needs=("scipy", "tqdm", "sklearn")),
    Example("pyg", "multi_gpu/distributed_sampling.py", needs=("scipy", "tqdm"), cuda=True),
    Example("pyg", "ogbn_train.py", ("--model", "sage", *_OGB_ARGS), OGB_ENV, _OGB_NEEDS),
    # disjoint trees: 1 + 5 + 25 nodes per seed (the defaults give 1,111 per seed, 1.1M nodes
    # a batch, which a transformer over the batch does not fit on a small CPU machine)
    Example(
        "pyg",
        "ogbn_train.py",
        ("--model", "sgformer", "--batch_size", "256", "--fan_out", "5", *_OGB_ARGS),
        OGB_ENV,
        _OGB_NEEDS,
    ),
    Example(
        "dgl",
        "pytorch/graphsage/node_classification.py",
        ("--mode", "cpu"),
        needs=("dgl", "ogb", "torchmetrics", "tqdm"),
    ),
)


@dataclass
class Graph:
    """A node-classification graph: features, labels, edges (source, target), a split."""

    x: np.ndarray
    y: np.ndarray
    edges: np.ndarray
    split: np.ndarray  # 1 train, 2 valid, 3 test (Reddit's node_types)


def learnable_graph(nodes: int, features: int, classes: int, seed: int = 0) -> Graph:
    """Features = the class's centroid plus noise; 8 in-edges per node, 80% within its class."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=nodes)
    centroids = rng.standard_normal((classes, features)).astype(np.float32)
    x = centroids[y] + 2.0 * rng.standard_normal((nodes, features)).astype(np.float32)
    # Multiples of 1/8 print exactly: OGB's CSV round trip gives back the same float32.
    x = (np.round(x * 8) / 8).astype(np.float32)
    members = [np.flatnonzero(y == c) for c in range(classes)]
    target = np.repeat(np.arange(nodes), 8)
    same = rng.random(target.size) < 0.8
    source = rng.integers(0, nodes, size=target.size)
    for c, nodes_c in enumerate(members):
        pick = same & (y[target] == c)
        source[pick] = nodes_c[rng.integers(0, nodes_c.size, size=int(pick.sum()))]
    split = rng.choice([1, 2, 3], size=nodes, p=[0.6, 0.2, 0.2])
    return Graph(x, y, np.stack([source, target]), split)


def write_reddit_raw(raw: Path, g: Graph) -> None:
    """``raw/reddit_data.npz`` and ``raw/reddit_graph.npz`` as PyG's ``Reddit`` reads them."""
    import scipy.sparse as sp

    raw.mkdir(parents=True, exist_ok=True)
    np.savez(raw / "reddit_data.npz", feature=g.x, label=g.y, node_types=g.split)
    n = g.x.shape[0]
    adj = sp.coo_matrix((np.ones(g.edges.shape[1]), (g.edges[0], g.edges[1])), shape=(n, n))
    sp.save_npz(raw / "reddit_graph.npz", adj)


def _write_csv_gz(path: Path, rows: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:  # OGB's CSVs: no header, comma-separated
        for row in np.asarray(rows).tolist():
            f.write(",".join(str(v) for v in np.atleast_1d(row).tolist()) + "\n")


#: OGB node-property datasets `write_ogbn` writes: their split folder and extra node files,
#: as OGB's ``master.csv`` gives them (version 1, CSV, no inverse edges stored).
_OGB_LAYOUT = {"ogbn-arxiv": ("time", ("node_year",)), "ogbn-products": ("sales_ranking", ())}


def write_ogbn(root: Path, name: str, g: Graph, year: np.ndarray | None = None) -> Path:
    """``root/ogbn_NAME`` as OGB's zip unpacks it (what ``NodePropPredDataset``,
    ``PygNodePropPredDataset`` and ``DglNodePropPredDataset`` read without downloading).

    ``name``: ``ogbn-arxiv`` (split ``time``, a node file ``node_year``: ``year``, default all
    2020) or ``ogbn-products`` (split ``sales_ranking``).
    """
    split_name, extra = _OGB_LAYOUT[name]
    folder = root / name.replace("-", "_")
    raw = folder / "raw"
    n = g.x.shape[0]
    _write_csv_gz(raw / "edge.csv.gz", g.edges.T)  # one "src,dst" line per edge
    _write_csv_gz(raw / "num-node-list.csv.gz", np.array([n]))
    _write_csv_gz(raw / "num-edge-list.csv.gz", np.array([g.edges.shape[1]]))
    _write_csv_gz(raw / "node-feat.csv.gz", g.x)
    if "node_year" in extra:
        years = np.full(n, 2020) if year is None else year
        _write_csv_gz(raw / "node_year.csv.gz", years[:, None])
    _write_csv_gz(raw / "node-label.csv.gz", g.y[:, None])
    for code, part in ((1, "train"), (2, "valid"), (3, "test")):
        _write_csv_gz(
            folder / "split" / split_name / f"{part}.csv.gz", np.flatnonzero(g.split == code)
        )
    (folder / "processed").mkdir(exist_ok=True)
    (folder / "RELEASE_v1.txt").write_text(f"{name}, synthetic\n")
    return folder


def upstream_source(checkout: Path, rev: str | None, script: str) -> str:
    """The text of ``examples/SCRIPT`` in ``checkout`` (a git repository read at ``rev``)."""
    if rev is None:
        path = checkout / "examples" / script
        if not path.is_file():
            raise SystemExit(f"{checkout}: no examples/{script}")
        return path.read_text()
    out = subprocess.run(
        ["git", "--git-dir", str(checkout), "show", f"{rev}:examples/{script}"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        why = out.stderr.strip().splitlines()[-1:] or ["git failed"]
        raise SystemExit(f"{checkout}: cannot read examples/{script} at {rev}: {why[0]}")
    return out.stdout


def swap_import(source: str, framework: str, script: str) -> str:
    """``source`` with its one import line of ``framework``'s loader made ours.

    Raises:
        SystemExit: the line is not there exactly once (the script changed upstream).
    """
    theirs, ours = SWAPS[framework]
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == theirs]
    if len(hits) != 1:
        raise SystemExit(f"examples/{script}: expected '{theirs}' once, found {len(hits)}")
    lines[hits[0]] = lines[hits[0]].replace(theirs, ours)
    return "".join(lines)


def git_commit(checkout: Path, rev: str | None) -> str | None:
    """The commit of the examples read (None where ``checkout`` is not a git repository)."""
    if rev is None:
        # a folder of a checkout's files, inside another repository (a copy that `prepare`
        # made), is no checkout of its own: its enclosing repository's commit is not its
        top = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
        )
        if top.returncode or Path(top.stdout.strip()).resolve() != checkout.resolve():
            return None
        cmd = ["git", "-C", str(checkout), "rev-parse", "HEAD"]
    else:
        cmd = ["git", "--git-dir", str(checkout), "rev-parse", rev]
    out = subprocess.run(cmd, capture_output=True, text=True)
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def missing(example: Example) -> list[str]:
    """What ``example`` needs that is not here: modules that do not import, a CUDA device."""
    lacking = [name for name in example.needs if importlib.util.find_spec(name) is None]
    if example.cuda:
        if not torch.cuda.is_available():
            lacking.append("a CUDA device")
        elif not torch.distributed.is_nccl_available():
            lacking.append("NCCL")
    return lacking


def run_script(path: Path, example: Example, timeout: float) -> dict:
    """Run the script at ``path`` with the example's arguments, from its folder."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **dict(example.env)}
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, path.name, *example.args],
            cwd=path.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        status, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        status, out, err = None, exc.stdout or "", f"timed out after {timeout:.0f} s"
        out = out.decode() if isinstance(out, bytes) else out
    return {
        **run_record(example),
        "status": status,
        "wall_s": time.perf_counter() - start,
        "stdout_tail": out.strip().splitlines()[-12:],
        "stderr_tail": [line for line in err.strip().splitlines() if "%|" not in line][-12:],
    }


def run_record(example: Example) -> dict:
    """What a run's record says of its example, with nothing run yet."""
    return {
        "framework": example.framework,
        "script": example.script,
        "args": list(example.args),
        "env": dict(example.env),
        "status": None,
        "wall_s": 0.0,
        "stdout_tail": [],
        "stderr_tail": [],
    }


def report(result: dict) -> str:
    lines = header_lines("PyG's and DGL's example scripts on ibp-graph's loaders", result["env"])
    for framework, info in result["checkouts"].items():
        theirs, ours = SWAPS[framework]
        lines.append(
            f"- {framework}: `examples/` at {info['commit'] or info['path']}; one line changed "
            f"in each script: `{theirs}` -> `{ours}`"
        )
    lines += [
        "",
        f"Data: synthetic graphs of {result['nodes']:,} nodes in Reddit's raw format and in "
        "OGB's layout (ogbn-arxiv, ogbn-products), where features carry the class and most "
        f"edges join one class. The scripts pick their device: {result.get('device', 'cpu')}.",
        "",
        "| framework | script | arguments | environment | exit status | wall s | last line |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        last = (r["stdout_tail"] or ["-"])[-1].replace("|", "\\|")
        status = r["status"]
        if r.get("skipped"):
            status = f"skipped: needs {', '.join(r['skipped'])}"
        elif status is None:
            status = "timed out"
        args = " ".join(r["args"]) or "-"
        env = " ".join(f"{k}={v}" for k, v in r["env"].items()) or "-"
        lines.append(
            f"| {r['framework']} | {r['script']} | `{args}` | {env} | {status} "
            f"| {r['wall_s']:.1f} | {last} |"
        )
    lines.append("")
    for r in result["runs"]:
        lines += [f"## {r['framework']}: {r['script']} {' '.join(r['args'])}".rstrip(), ""]
        lines += ["```", *r["stdout_tail"], "```", ""]
        if r["status"] != 0 and not r.get("skipped"):
            lines += ["stderr:", "", "```", *r["stderr_tail"], "```", ""]
    return "\n".join(lines)


def write_data(folder: Path, graph: Graph) -> None:
    """The datasets of every example, where each script looks for them."""
    write_reddit_raw(folder / "pyg" / "data" / "Reddit" / "raw", graph)
    write_ogbn(folder / "pyg" / "data" / "ogbn-arxiv", "ogbn-arxiv", graph)
    # DGL's script: DglNodePropPredDataset's default root, "dataset" under its folder
    write_ogbn(
        folder / "dgl" / "examples" / "pytorch" / "graphsage" / "dataset", "ogbn-products", graph
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for framework in SWAPS:
        parser.add_argument(f"--{framework}", type=Path, help=f"a {framework} checkout or git dir")
        parser.add_argument(f"--{framework}-rev", help="read its scripts at this git revision")
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument(
        "--timeout",
        type=float,
        default=1200,
        help="seconds per script (default 1200: infomax_inductive.py took 289-626 s on two cores)",
    )
    parser.add_argument(
        "--export",
        type=Path,
        help="write the scripts as they are upstream to EXPORT/<framework>/examples/ (a "
        "checkout of them alone, to run elsewhere with --pyg EXPORT/pyg) and stop",
    )
    add_out(parser)
    args = parser.parse_args(argv)
    args.checkouts = {f: getattr(args, f) for f in SWAPS if getattr(args, f) is not None}
    if not args.checkouts:
        parser.error("give --pyg and/or --dgl: the checkouts whose examples run")
    if args.nodes < 100:
        parser.error("--nodes must be at least 100")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    checkouts = args.checkouts
    revs = {f: getattr(args, f"{f}_rev") for f in checkouts}
    examples = [e for e in EXAMPLES if e.framework in checkouts]
    originals = {
        (e.framework, e.script): upstream_source(
            checkouts[e.framework], revs[e.framework], e.script
        )
        for e in examples
    }
    if args.export is not None:
        for (framework, script), text in originals.items():
            path = args.export / framework / "examples" / script
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"{framework}: examples/{script} -> {path}")
        return
    sources = {key: swap_import(text, *key) for key, text in originals.items()}
    runs = []
    with tempfile.TemporaryDirectory(prefix="upstream-examples-") as tmp:
        folder = Path(tmp)
        for (framework, script), text in sources.items():
            path = folder / framework / "examples" / script
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        write_data(folder, learnable_graph(args.nodes, 64, 8))
        for e in examples:
            lacking = missing(e)
            if lacking:
                r = {**run_record(e), "status": None, "skipped": lacking}
            else:
                r = run_script(folder / e.framework / "examples" / e.script, e, args.timeout)
            said = f"skipped, needs {', '.join(lacking)}" if lacking else f"status {r['status']}"
            print(f"{e.label}: {said}, {r['wall_s']:.1f} s")
            runs.append(r)
    result = {
        "env": environment(),
        "checkouts": {
            f: {"path": str(p), "rev": revs[f], "commit": git_commit(p, revs[f])}
            for f, p in checkouts.items()
        },
        "nodes": args.nodes,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "runs": runs,
    }
    name = result_name("upstream-examples", torch.device(result["device"]))  # NAME on a CPU
    write_json_md(name, result, lambda: report(result), args.out)
    print(json.dumps([(r["script"], r["status"]) for r in runs]))
    if any(r["status"] != 0 and not r.get("skipped") for r in runs):
        raise SystemExit(1)
    if all(r.get("skipped") for r in runs):
        raise SystemExit("every script was skipped: what they need is missing here")


if __name__ == "__main__":
    main()
