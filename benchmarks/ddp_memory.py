"""Host memory of a data-parallel run: each rank's peak resident set, IBP on and off.

A data-parallel ``ibp-graph train`` starts one process per GPU on a host. What each of them
holds in host memory decides how many fit: the dataset (labels, split, edges and raw node
features), the CSR graph the samplers read and the compressed rows. This benchmark builds a
synthetic bag-of-words dataset in the bundled ``.npz`` format (``--nodes`` x ``--features``,
a share ``--density`` of ones per row, ``--degree`` random in-edges per node, 10 classes;
seeded), then runs ``torch.distributed.run --standalone --nproc-per-node R`` on this host
with the CPU (gloo) and the ``cora-sage`` config pointed at it (``root=``): one epoch over
``--train`` seeds, fanouts [5, 5], batches of 512, evaluation on 1,000 nodes. It runs IBP on
(``ibp=true``: rows from the host's shared compressed table) and off (``ibp=false``: raw
features), one after the other; ``--runs IBP`` or ``--runs raw`` runs one of them alone.

Each rank runs the CLI in this file's ``--rank`` mode, which writes its peak resident set
size (``getrusage``'s ``ru_maxrss``, which counts pages it touched in shared segments too)
when ``train`` returns. Reported per run: the raw features' size, and each local rank's peak.
``--baseline FILE`` adds the ranks' peaks of an earlier results file (another commit's, run
with the same arguments) beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._env import add_out, environment, header_lines, write_json_md  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NAME = "ddp-memory-cpu"
#: The runs, by name: whether each reads the host's compressed table (``ibp=``).
RUNS = {"IBP": True, "raw": False}
#: Seconds between two samples of a rank's PSS.
PSS_EVERY_S = 0.05


def pss_bytes() -> int:
    """This process's proportional set size: its private pages plus its share of shared ones."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def rank_main(out: Path, argv: list[str]) -> int:
    """One rank: ``ibp-graph train ARGV``, then its peaks into ``out/rank-N.json``.

    Its PSS is sampled every `PSS_EVERY_S` on a thread (the largest sample is its peak), and
    once more as each training epoch ends (what it holds while it trains, set-up done).
    """
    from ibp_graph.cli.main import main
    from ibp_graph.train import run as train_run

    status, samples, done, after_epoch = 1, [], threading.Event(), []
    epoch = train_run.train_epoch

    def train_epoch(*args, **kwargs):
        out = epoch(*args, **kwargs)
        after_epoch.append(pss_bytes())
        return out

    train_run.train_epoch = train_epoch

    def sample() -> None:
        while not done.wait(PSS_EVERY_S):
            samples.append(pss_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        status = main(["train", *argv])
    finally:
        done.set()
        sampler.join()
        rank = int(os.environ.get("RANK", "0"))
        (out / f"rank-{rank}.json").write_text(
            json.dumps(
                {
                    "rank": rank,
                    "local_rank": int(os.environ.get("LOCAL_RANK", rank)),
                    "status": status,
                    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                    "peak_pss_bytes": max(samples + after_epoch, default=0),
                    "epoch_pss_bytes": after_epoch[-1] if after_epoch else None,
                }
            )
        )
    return status


def write_dataset(path: Path, args: argparse.Namespace) -> int:
    """A seeded bag-of-words graph in the bundled format at ``path``; its raw ``x``'s bytes."""
    rng = np.random.default_rng(0)
    n, d = args.nodes, args.features
    per_row = max(1, round(args.density * d))
    indices = np.sort(rng.integers(0, d, size=(n, per_row), dtype=np.int64), axis=1)
    keep = np.ones_like(indices, dtype=bool)
    keep[:, 1:] = indices[:, 1:] != indices[:, :-1]  # distinct columns per row
    counts = keep.sum(1)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    edges = np.stack(
        [rng.integers(0, n, size=n * args.degree), np.repeat(np.arange(n), args.degree)]
    )
    order = rng.permutation(n)
    masks = {k: np.zeros(n, dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][order[: args.train]] = True
    masks["val_mask"][order[args.train : args.train + 500]] = True
    masks["test_mask"][order[args.train + 500 : args.train + 1000]] = True
    meta = {"name": "synthetic bag of words", "num_classes": 10}
    np.savez(
        path,
        x_indptr=indptr,
        x_indices=indices[keep],
        x_shape=np.array([n, d]),
        y=rng.integers(0, 10, size=n),
        edge_index=edges,
        meta=np.array(json.dumps(meta)),
        **masks,
    )
    return n * d * 4


def run(ibp: bool, folder: Path, args: argparse.Namespace) -> list[dict]:
    """One data-parallel run; each rank's report, by rank."""
    out = folder / f"ranks-{'on' if ibp else 'off'}"
    out.mkdir()
    overrides = [
        f"root={folder}",
        f"workdir={folder / 'work'}",
        f"ibp={str(ibp).lower()}",
        "epochs=1",
        "fanouts=[5,5]",
        "eval_fanouts=[5,5]",
        "batch_size=512",
        "device=cpu",
        "progress=false",
    ]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={args.ranks}", "--max-restarts=0", __file__, "--rank", str(out)]
    cmd += ["--", "--config", "cora-sage", "--set", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the {'IBP' if ibp else 'raw'} run failed:\n{proc.stderr[-3000:]}")
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(args.ranks)]


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def report(result: dict, baseline: dict | None) -> str:
    lines = header_lines("Host memory of a data-parallel run, per rank", result["env"])
    a = result["args"]
    lines += [
        f"Synthetic bag of words in the bundled format: {a['nodes']:,} nodes x "
        f"{a['features']} features (density {a['density']}), {a['degree']} in-edges per "
        f"node; raw features {mib(result['x_bytes'])} MiB. {a['ranks']} ranks on this host "
        "(gloo, CPU), one epoch of `cora-sage` over it. Per rank, in MiB: the peak RSS "
        "(`ru_maxrss`: pages of shared segments count in full in every rank that touched "
        "them), the peak PSS (sampled every 50 ms; a shared page counts 1/k in each of the k "
        "processes that map it, so the ranks' PSS add up to the host's memory) and the PSS "
        "as the training epoch ends (what the rank holds while it trains).",
        "",
    ]
    before = f" ({baseline['env']['git_commit']})" if baseline else ""
    head = "| features | rank | peak RSS | peak PSS | PSS after the epoch |"
    rule = "|---|---|---|---|---|"
    if baseline:
        head += f" before{before}: peak RSS | peak PSS | PSS after the epoch |"
        rule += "---|---|---|"
    lines += [head, rule]
    for run_name, ranks in result["runs"].items():
        old = {w["rank"]: w for w in baseline["runs"].get(run_name, [])} if baseline else {}
        for r in ranks:
            row = f"| {run_name} | {r['rank']} | {mib(r['peak_rss_bytes'])} "
            row += f"| {mib(r['peak_pss_bytes'])} | {mib(r['epoch_pss_bytes'])} |"
            was = old.get(r["rank"])
            if was:
                row += f" {mib(was['peak_rss_bytes'])} | {mib(was['peak_pss_bytes'])} |"
                row += f" {mib(was['epoch_pss_bytes'])} |"
            elif baseline:
                row += " - | - | - |"
            lines.append(row)
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of `main` (``argv``: None for ``sys.argv[1:]``), checked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=1000)
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--degree", type=int, default=10)
    parser.add_argument("--train", type=int, default=4096)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=RUNS,
        default=list(RUNS),
        help="which runs, in this order (default: both)",
    )
    parser.add_argument("--baseline", type=Path, help="an earlier results file to compare")
    add_out(parser)
    args = parser.parse_args(argv)
    if args.nodes < args.train + 1000 or min(args.features, args.degree, args.ranks) < 1:
        parser.error("--nodes must exceed --train + 1000; --features, --degree, --ranks >= 1")
    return args


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--rank":
        rest = sys.argv[3:]
        raise SystemExit(rank_main(Path(sys.argv[2]), rest[1:] if rest[:1] == ["--"] else rest))
    args = parse_args()
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    with tempfile.TemporaryDirectory(prefix="ddp-memory-") as tmp:
        folder = Path(tmp)
        x_bytes = write_dataset(folder / "cora.npz", args)
        runs = {name: run(RUNS[name], folder, args) for name in dict.fromkeys(args.runs)}
    result = {
        "env": environment(),
        "args": {k: v for k, v in vars(args).items() if k not in ("out", "baseline")},
        "x_bytes": x_bytes,
        "runs": runs,
        "baseline": baseline,
    }
    print(write_json_md(NAME, result, lambda: report(result, baseline), args.out).read_text())


if __name__ == "__main__":
    main()
