r"""``ibp-graph train``: train GraphSAGE / GAT from a YAML config, IBP on or off, PyG or DGL.

Usage::

    ibp-graph train --config cora-sage
    ibp-graph train --config configs/cora-sage.yaml --set epochs=5 --set ibp=false
    ibp-graph train --config cora-sage-dgl
    ibp-graph train --config cora-gat --set backend=dgl
    ibp-graph train --config ogbn-products-sage --set root=/data/ogb fanouts=[10,10,5]
    ibp-graph train --config my-run.yaml --json result.json
    ibp-graph train --config my-run.yaml --json result.json --force
    ibp-graph train --config cora-sage --nproc-per-node 2
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \
        -m ibp_graph train --config ogbn-products-sage

``--config`` takes a YAML file, or the name of a packaged config (``cora-sage``,
``cora-sage-dgl``, ``cora-gat``, ``citeseer-sage``, ``ogbn-arxiv-sage``,
``ogbn-products-sage``, ``ogbn-papers100M-sage``). ``--set key=value`` overrides a key,
parsed by its type (``epochs=5``, ``lr=1e-3``, ``ibp=false``, ``fanouts=[10,5]``,
``root=null``, ``backend=dgl``). ``backend`` picks the framework: ``pyg`` (PyG's models and
ibp-graph's ``NeighborLoader``, the default) or ``dgl`` (DGL's ``SAGEConv`` / ``GATConv`` and
ibp-graph's DGL ``DataLoader``; the ``dgl`` extra, on the CPU with DGL's PyPI build). The
config is echoed, then one line per epoch, on stderr; the summary block (accuracy, epoch
time, per-stage time, bytes over PCIe with and without IBP, ratio) goes to stdout. An
existing ``--json`` file is checked before training and replaced only with ``--force``, and
only if it is a regular file; it is written whole or not at all.

Data-parallel: ``--nproc-per-node N`` starts N ranks on this host through torch's launcher
(``torch.distributed.run``); under ``torchrun`` every rank runs this command. The model is
wrapped in ``DistributedDataParallel``, each rank takes its share of the training seeds
every epoch, the compressed rows sit once per host in shared memory, and only rank 0 prints
and writes ``--json``; the summary names the world size. A rank that torch's launcher
started stops when the launcher is gone, even killed with SIGKILL (``ibp-graph: error: rank R
of W: the launcher (pid P) is gone; stopping``, exit status 1), and the host's shared
segments of the run are removed.

Exit status: 0 ok; 1 a data or runtime error (missing dataset files, an unusable GPU, the
backend's framework not installed); 2 a bad config (unknown key, wrong type or value, no
such config) or bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ._common import (
    UsageError,
    add_force,
    atomic_output,
    check_output_dir,
    json_ready,
    output_arg,
    positive_int_arg,
    say,
)

EXAMPLES = """\
examples:
  ibp-graph train --config cora-sage
  ibp-graph train --config configs/cora-gat.yaml --set epochs=5 ibp=false
  ibp-graph train --config cora-sage-dgl        # DGL models and loader (the dgl extra)
  ibp-graph train --config ogbn-products-sage --set root=/data/ogb device=cuda
  ibp-graph train --config cora-sage --json cora.json   # the full result as JSON
  ibp-graph train --config cora-sage --json cora.json --force   # replace cora.json
  ibp-graph train --config cora-sage --nproc-per-node 2  # 2 data-parallel ranks (gloo on CPU)
  torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \\
      -m ibp_graph train --config cora-sage               # on each of 2 hosts

--config: a YAML file, or a packaged config by name (cora-sage, cora-sage-dgl, cora-gat,
citeseer-sage, ogbn-arxiv-sage, ogbn-products-sage, ogbn-papers100M-sage). --set backend=dgl
trains with DGL instead of PyG. Exit status: 0 ok, 1 data or runtime error (e.g. missing
dataset files, DGL not installed), 2 bad config or usage.
"""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``train`` command to the ``ibp-graph`` parser."""
    p = subparsers.add_parser(
        "train",
        help="train GraphSAGE / GAT from a YAML config (IBP on or off, PyG or DGL) and report",
        description="Train a GNN node classifier with ibp-graph's loader from a YAML config.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config",
        required=True,
        metavar="CONFIG",
        help="a YAML config file, or a packaged config name such as cora-sage",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="override config keys, parsed by type (epochs=5 lr=1e-3 ibp=false "
        "fanouts=[10,5]); repeatable, later ones win",
    )
    p.add_argument(
        "--json",
        type=output_arg,
        metavar="OUT.json",
        default=None,
        help="also write the full result (config, per-epoch rows, summary values) as JSON",
    )
    add_force(p)
    p.add_argument(
        "--nproc-per-node",
        type=positive_int_arg,
        default=None,
        metavar="N",
        help="train data-parallel with N ranks on this host, started by torch's launcher "
        "(gloo on the CPU, one GPU per rank with NCCL)",
    )
    p.set_defaults(run=run, parser=p)
    return p


def _is_rank0() -> bool:
    """Whether this process prints results: not a launched rank, or rank 0."""
    return os.environ.get("RANK", "0").strip() in ("0", "")


def _launch(args: argparse.Namespace) -> int:
    """Start ``--nproc-per-node`` ranks of this command through torch's launcher."""
    from ..distributed.launch import launch_local

    if "WORLD_SIZE" in os.environ:
        raise UsageError(
            "--nproc-per-node starts its own ranks; under torchrun, leave it out "
            "(torchrun's --nproc-per-node sets the ranks)"
        )
    child = ["train", "--config", args.config]
    if args.overrides:
        child += ["--set", *args.overrides]
    if args.json is not None:
        child += ["--json", args.json]
    if args.force:
        child += ["--force"]
    launch_local(child, args.nproc_per_node)
    return 0


def _check_backend(cfg: Any) -> None:
    """A usage error for a process-group or sampler backend the ranks' device cannot use."""
    from ..distributed.ddp import check_backend
    from ..errors import IBPInputError
    from ..train.config import check_device_keys
    from ..train.run import resolve_device

    device = resolve_device(cfg.device)
    try:
        check_backend(cfg.dist_backend, device)
        check_device_keys(cfg, device)
    except IBPInputError as exc:
        raise UsageError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    """Load the config, train, print the summary to stdout (and write ``--json``)."""
    if args.nproc_per_node is None:
        from ..distributed.orphan import watch_launcher

        watch_launcher()  # a rank of torch's launcher stops if the launcher is killed
    from ..train.config import ConfigError, load_config

    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.json) if args.json is not None else None
    if out is not None:
        check_output_dir(out, force=args.force)  # before a possibly long run
    if args.nproc_per_node is not None:
        _check_backend(cfg)  # before any rank starts
        return _launch(args)
    from ..train.run import train

    try:
        result = train(cfg, log=say)
    except ConfigError as exc:  # a conflict with the machine found before loading, e.g.
        raise UsageError(str(exc)) from None  # sampler_backend: kernel without a GPU
    if not _is_rank0():
        return 0
    print(result.summary(), flush=True)
    if out is not None:
        with atomic_output(out) as tmp:
            tmp.write_text(json.dumps(json_ready(result.to_dict()), indent=2) + "\n")
        say(f"wrote {out}")
    return 0
