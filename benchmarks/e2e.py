r"""End to end: GraphSAGE training epochs with node features IBP on, IBP off, and on the GPU.

Usage::

    .venv/bin/python benchmarks/e2e.py                             # Cora, CiteSeer; GPU if any
    .venv/bin/python benchmarks/e2e.py --device cpu --epochs 6 --threads 1   # CPU: no PCIe
    python benchmarks/e2e.py --device cuda --epochs 4 --synthetic-nodes 20000000  # GPU machine
    python benchmarks/e2e.py --graphs "" --synthetic-nodes 2000000 --synthetic-features cora
    python benchmarks/e2e.py --device cuda --epochs 3 --graphs "" --setting corasu  # GPU

writes ``benchmarks/results/e2e-<device>.json`` and ``.md`` (device, date, commit, command)
and, when matplotlib imports, ``e2e-<device>.png``, a stacked bar chart of the stages per graph
and mode (``--out DIR`` writes them elsewhere; they are rewritten after every graph, and while
a graph's epochs run at most every 30 s with its results so far, marked incomplete, so a run
cut short keeps the graphs it finished and the epochs of the one it was on). ``.ibp`` tables
are cached in ``--workdir`` (default: ``ibp-graph train``'s cache, ``~/.cache/ibp-graph``); on
a GPU a table not in the cache is compressed there (``compress(device="cuda")``, the same
bytes; the CPU encoder is the fallback), and the synthetic graph's edges are drawn there. On a
machine without SciPy or the datasets folder, make the facebook table here and pass the file::

    .venv/bin/python -c "import numpy as np; from benchmarks import real_tables as r; \
        np.save('facebook-svd100-float32.npy', r.load_facebook_svd()[1])"
    python benchmarks/e2e.py --synthetic-nodes 20000000 \
        --synthetic-features facebook-svd100-float32.npy

``--sampler-backend torch`` or ``kernel`` (CUDA) picks how the loaders sample (their
``sampler_backend``; without it, their default: the fused hop kernels on a GPU when CuPy
imports, torch ops on the CPU) and ``--prefetch-thread`` prepares the batches on a background
thread (the loaders' option of the same name; without it the loaders get
``prefetch_thread=False``, also on a GPU where their default is the thread); the settings,
with the sampler backend used, are recorded in the results. ``--profile-epoch`` says where an
epoch's time goes (`benchmarks.time_split`): after the measured epochs and the evaluation, each
mode trains one more epoch under the torch profiler (the longest GPU kernels and copies, torch
ops by their own host time) and one under ``cProfile`` (the training loop's Python functions
by their own time, waits for the loader included), a table per mode.

For every graph, the same seeded training run (model initialisation, dropout, shuffle order
and neighbor draws all from ``--seed``, so every mode trains on the same batches) is repeated
with three feature sources, each through `ibp_graph.loaders.pyg.NeighborLoader`. The modes
take turns epoch by epoch, in an order rotated each epoch, so that a drift in the machine's
speed falls on all of them alike; each keeps its own state of torch's generators, so that it
trains as it would alone:

- ``ibp`` (IBP on): the ``.ibp`` table: a `CudaIBPTable` on a GPU (rows pinned in host memory,
  fetched and decoded by the GPU over UVA), an `IBPTable` on the CPU (NumPy decoder);
- ``raw`` (IBP off): the raw rows: a `PinnedRawTable` on a GPU (zero-copy gather over UVA),
  the plain CPU tensor on the CPU;
- ``gpu``: the whole table in GPU memory (a CUDA tensor; nothing crosses PCIe); skipped on
  the CPU.

Per mode: the epoch time (median of the epochs after one warm-up epoch, evaluation
excluded), the stage breakdown (``sample``, ``fetch``, ``wait`` = time the training loop
spent inside the loader's ``next()``, ``train`` = epoch time - wait; medians over the same
epochs), the training steps' own time (``step``: CUDA events around each step on its stream,
recorded after the batch's hand-over, so waiting for the batch is not in it; the host clock on
the CPU), which with ``sample + fetch`` bounds a prefetching epoch: the pipeline ratio is
epoch / max(sample + fetch, step), target at most 1.1), bytes read from host memory per
epoch (what crosses PCIe on a GPU) and the ratio, the per-epoch losses, and for labelled
graphs the valid / test accuracy after the last epoch (full neighborhood). On a GPU,
sampling and fetching run on a side stream while the previous batch trains, so ``sample +
fetch`` overlaps ``train``; on the CPU nothing overlaps and ``wait`` contains them, unless
the batches are prepared on the loaders' prefetch thread (``--prefetch-thread``, or the
``ibp-thread`` mode of ``--thread-mode``: IBP on with the thread, beside the other modes).
Every mode samples with the loaders' default sampler settings: on a GPU, the fused hop
kernels, their launches replayed from CUDA graphs (``sampler_cuda_graph``), 8 batches a
sampler call where no hop reads its sizes (``sample_group``; the configs' fanouts). Two
modes (GPU) run ``ibp-thread`` with other settings, on the same batches: ``--replay-mode``
adds ``ibp-replay``, replayed one batch a call (``sample_group=1``), and ``--eager-mode``
adds ``ibp-eager``, launched eagerly one batch a call (``sampler_cuda_graph=False,
sample_group=1``: the loaders' default before they replayed groups).
The last epoch of every mode also keeps its timeline (`benchmarks.epoch_timeline`: each
batch's sample and fetch intervals, from the side stream's CUDA events on a GPU, each step's,
and the loop's waits in ``next()``, on one clock from the epoch's start): the results say how
long the loader sampled or fetched while a step ran, and the chart draws the timelines under
the stage bars.

IBP is lossless, so IBP on and off must give identical losses: the training steps run with
``torch.use_deterministic_algorithms(True, warn_only=True)`` (and, on a GPU,
``CUBLAS_WORKSPACE_CONFIG=:4096:8``; ``--no-deterministic`` turns both off; the loader's
sampling, seeded, is deterministic anyway and keeps torch's default kernels) and the benchmark
compares the losses and a fingerprint of the sampled node ids of every epoch; it records the
comparison, writes the results, and then exits with an error if the losses differ.

The end-to-end target (DESIGN.md): with ``T_off`` the IBP-off epoch time, ``s`` the
measured transfer share (IBP-off fetch time / ``T_off``) and ``r`` the ratio on the fetched
rows, the ideal IBP epoch time is ``T_ideal = T_off * ((1 - s) + s / r)`` and the target is
``T_ibp <= T_off / (1 + 0.9 * (G - 1))`` with ``G = T_off / T_ideal`` the ideal speed-up: at
least 90% of the ideal gain. The fetch time overlaps training on a GPU, so ``s`` can overstate
what IBP can save; with features on the GPU measured too, the analysis also gives the share
``(T_off - T_gpu) / T_off`` that PCIe costs the epoch and the ideal that follows from it.
It is computed everywhere but applies to a GPU only: on the CPU nothing crosses PCIe and the
decoder is NumPy.

Each target's verdict is a `benchmarks._targets.check` dict in the JSON (value, goal,
comparison, ``met``, ``gap`` as a fraction of the goal): ``pipeline_check`` per mode,
``target_check`` and, with ``--setting corasu``, ``speedup_target_check`` in ``analysis``;
the markdown prints each with `benchmarks._targets.verdict` (met, ``gap 1.4%``, not measured).

Graphs: the bundled Cora and CiteSeer (`ibp_graph.datasets.load_dataset`; hyper-parameters
of the packaged ``cora-sage`` / ``citeseer-sage`` configs), and, with ``--synthetic-nodes N``,
a directed Chung-Lu power-law graph from ``benchmarks/sampling.py`` (``--synthetic-edges``,
default 15 per node) whose feature rows are drawn uniformly with replacement from a real
table (``--synthetic-features``: ``auto`` takes the DERIVED facebook-svd100-float32 table of
``benchmarks/real_tables.py`` when the datasets folder and SciPy are there, else the bundled
Cora rows), with random labels (47 classes; accuracy is not meaningful there and is not
measured) and ``--synthetic-train`` random training seeds; hyper-parameters of the packaged
``ogbn-products-sage`` config. ``--batch-size``, ``--fanouts`` and ``--hidden`` override the
configs for every graph.

``--setting`` sizes the synthetic graph after a named one (``--synthetic-nodes`` /
``--synthetic-edges`` scale it down, and the result states the setting and the scale run):

- ``corasu``: the IBP paper's "CoraSU" setting, Cora's bag-of-words rows over a graph the
  size of ogbn-products (2,449,029 nodes, 123,718,280 directed edges), where the paper
  reports its average GNN speed-up, 1.74x over uncompressed zero-copy features; the result
  says whether IBP on was at least that much faster than IBP off (on a GPU);
- ``papers100m``: a graph the size of ogbn-papers100M (111,059,956 nodes, 1,615,685,872
  edges) with rows drawn from ``--synthetic-features`` (a real-derived dense table).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ibp_graph  # noqa: E402
from benchmarks import epoch_timeline, real_tables, time_split  # noqa: E402
from benchmarks._env import (  # noqa: E402
    add_out,
    block_label,
    block_warps_arg,
    environment,
    finite,
    header_lines,
    result_name,
    write_json_md,
)
from benchmarks._targets import check, verdict  # noqa: E402
from benchmarks.sampling import GAMMA, power_law_edges  # noqa: E402
from ibp_graph.cli._common import positive_int_arg  # noqa: E402
from ibp_graph.loading import default_sampler_backend  # noqa: E402
from ibp_graph.pinned import HOST_MEMORY_ENV, host_memory  # noqa: E402
from ibp_graph.train.config import default_workdir, load_config  # noqa: E402
from ibp_graph.train.models import graphsage  # noqa: E402
from ibp_graph.train.run import (  # noqa: E402
    TableInfo,
    _evaluate,
    _open_cached,
    deterministic,
    prepare_table,
    train_epoch,
)

MODES = ("ibp", "raw", "gpu")
#: The mode ``--thread-mode`` adds: IBP on, with the loaders' prefetch thread.
THREAD_MODE = "ibp-thread"
#: The mode ``--replay-mode`` adds: `THREAD_MODE` sampling one batch a sampler call, its
#: launches replayed from CUDA graphs (GPU only).
REPLAY_MODE = "ibp-replay"
#: The mode ``--eager-mode`` adds: `THREAD_MODE` sampling one batch a call, the hop kernels
#: launched eagerly (GPU only).
EAGER_MODE = "ibp-eager"
#: The loader arguments of the modes that sample otherwise than by the loaders' default.
SAMPLER_SETTINGS = {
    REPLAY_MODE: {"sample_group": 1},
    EAGER_MODE: {"sampler_cuda_graph": False, "sample_group": 1},
}
#: The mode ``--chunk-mode ROWS`` adds: `THREAD_MODE` with IBP on's fetches launched as kernels
#: of at most ROWS rows (the GPU table's ``chunk_rows``; GPU only), so that their blocks leave
#: the SMs to training between kernels.
CHUNK_MODE = "ibp-chunked"
#: Entries per list of ``--profile-epoch``'s tables.
PROFILE_TOP = 8
MODE_TITLES = {
    "ibp": "IBP on",
    "raw": "IBP off (raw)",
    "gpu": "features on the GPU",
    THREAD_MODE: "IBP on, prefetch thread",
    REPLAY_MODE: "IBP on, prefetch thread, replayed sampler, one batch a call",
    EAGER_MODE: "IBP on, prefetch thread, eager sampler, one batch a call",
    CHUNK_MODE: "IBP on, prefetch thread, chunked fetches",
}
#: The modes that are ``ibp`` run another way (all on the loaders' prefetch thread), on the
#: same batches: the prefix of their
#: checks' keys (``<prefix>_losses_identical``, ``<prefix>_batches_identical``), and how the
#: results name them.
IBP_VARIANTS = {
    THREAD_MODE: ("thread", "IBP on with the prefetch thread"),
    REPLAY_MODE: ("replay", "IBP on with the replayed sampler, one batch a call"),
    EAGER_MODE: ("eager", "IBP on with the eager sampler, one batch a call"),
    CHUNK_MODE: ("chunked", "IBP on with chunked fetches"),
}
CONFIGS = {"cora": "cora-sage", "citeseer": "citeseer-sage", "synthetic": "ogbn-products-sage"}
SYNTH_CLASSES = 47
SYNTH_EDGES_PER_NODE = 15

WARMUP_EPOCHS = 1
#: The target: IBP gains at least TARGET_FRACTION of the ideal gain (speed-up - 1).
TARGET_FRACTION = 0.9
#: A prefetching epoch takes at most this times max(sample + fetch, train) (GPU only).
PIPELINE_TARGET = 1.1
#: The synthetic table, its pinned raw copy and its pinned compressed rows (about as large at
#: most: a row is stored raw when coding would not shrink it) coexist in host memory while the
#: modes take turns: a table larger than physical memory / HOST_COPIES is refused up front.
HOST_COPIES = 3.0


@dataclass(frozen=True)
class Setting:
    """A named size of the synthetic graph (``--setting``), and what its result checks."""

    name: str
    note: str
    nodes: int
    edges: int  # directed: an undirected graph's edges in both directions
    features: str | None = None  # the rows it draws (None: --synthetic-features)
    speedup: float | None = None  # IBP on over IBP off to reach, if the setting has one


SETTINGS = {
    "corasu": Setting(
        "CoraSU",
        "the IBP paper's setting: Cora's rows over an ogbn-products-sized graph, where the "
        "paper reports its average GNN speed-up over uncompressed zero-copy features",
        nodes=2_449_029,
        edges=123_718_280,
        features="cora",
        speedup=1.74,
    ),
    "papers100m": Setting(
        "ogbn-papers100M-sized",
        "a graph the size of ogbn-papers100M, rows drawn from a real-derived table",
        nodes=111_059_956,
        edges=1_615_685_872,
    ),
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------------------------


@dataclass
class Graph:
    """One benchmark graph: PyG data (no ``x``), the feature table and the training set."""

    name: str
    data: Any
    x: torch.Tensor
    train_ids: torch.Tensor
    eval_ids: torch.Tensor | None
    num_classes: int
    labelled: bool
    info: dict = field(default_factory=dict)


def bundled_graph(name: str) -> Graph:
    from ibp_graph.datasets import load_dataset

    ds = load_dataset(name)
    data = ds.to_pyg()
    x = data.x
    del data.x  # features come only through the loader's features=
    data.num_nodes = ds.num_nodes
    info = {
        "kind": "bundled (Planetoid public split)",
        "source": ds.source,
        "features": f"{name}'s own bag-of-words rows (real, not derived)",
        "labels": "real",
    }
    return Graph(
        name=ds.name,
        data=data,
        x=x,
        train_ids=ds.train_mask.nonzero().view(-1),
        eval_ids=(ds.val_mask | ds.test_mask).nonzero().view(-1),
        num_classes=ds.num_classes,
        labelled=True,
        info=info,
    )


def feature_rows(spec: str) -> tuple[str, torch.Tensor, str]:
    """(name, rows, note) of the table the synthetic graph's features are drawn from."""
    fb = real_tables.SHARED_DATASETS / "musae" / "facebook" / "features.json"
    if spec == "auto":
        try:
            import scipy  # noqa: F401 - the SVD table needs it

            spec = "facebook-svd100-float32" if fb.is_file() else "cora"
        except ImportError:
            spec = "cora"
    if spec == "facebook-svd100-float32":
        if not fb.is_file():
            raise SystemExit(
                f"e2e: --synthetic-features {spec} needs {fb} (set IBP_GRAPH_DATASETS to the "
                "datasets folder, or pass a .npy saved from real_tables.load_facebook_svd)"
            )
        name, array, note = real_tables.load_facebook_svd(np.float32)
        return name, torch.from_numpy(np.array(array)), note
    if spec in ("cora", "citeseer"):
        from ibp_graph.datasets import load_dataset

        ds = load_dataset(spec)
        return f"{spec}-bow", ds.x, f"the bundled {spec} x ({ds.source}); real, not derived"
    path = Path(spec)
    if path.suffix == ".npy" and path.is_file():
        array = np.load(path, allow_pickle=False)
        if array.ndim != 2:
            raise SystemExit(f"e2e: {path}: expected a 2-D table, got shape {array.shape}")
        note = f"the rows of {path}"
        if path.stem.startswith("facebook-svd"):
            note += " (presumably saved from benchmarks/real_tables.load_facebook_svd: DERIVED)"
        return path.stem, torch.from_numpy(np.ascontiguousarray(array)), note
    raise SystemExit(
        f"e2e: --synthetic-features {spec!r}: expected auto, facebook-svd100-float32, cora, "
        "citeseer or an existing .npy file"
    )


def synthetic_graph(args: argparse.Namespace, device: torch.device | None = None) -> Graph:
    """The power-law graph of ``--synthetic-nodes``; its edges are drawn on ``device``."""
    from torch_geometric.data import Data

    device = device if device is not None else torch.device("cpu")

    n = args.synthetic_nodes
    e = args.synthetic_edges or SYNTH_EDGES_PER_NODE * n
    src_name, rows, note = feature_rows(args.synthetic_features)
    table_bytes = n * rows.shape[1] * rows.element_size()
    phys = host_memory()
    if phys is not None and table_bytes * HOST_COPIES > phys:
        raise SystemExit(
            f"e2e: a {n:,}-row table of {src_name} rows takes {table_bytes / 2**30:.1f} GiB; "
            f"with its pinned copies that is more than the {phys / 2**30:.0f} GiB of memory "
            f"here: use fewer --synthetic-nodes or narrower --synthetic-features (or set "
            f"{HOST_MEMORY_ENV} where memory grows on demand)"
        )
    t0 = time.perf_counter()
    edge_index = power_law_edges(n, e, args.seed, device)
    sync(device)
    gen_s = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(args.seed + 1)
    pick = torch.randint(0, rows.shape[0], (n,), generator=gen)
    x = rows.index_select(0, pick)
    del pick
    y = torch.randint(0, SYNTH_CLASSES, (n,), generator=gen)
    train = torch.randperm(n, generator=gen)[: min(args.synthetic_train, n)]
    data = Data(edge_index=edge_index, y=y, num_nodes=n)
    name = f"{args.setting or 'synthetic'}-{n}"
    log(
        f"synthetic: {n:,} nodes, {e:,} edges in {gen_s:.1f} s; features: {n:,} rows drawn "
        f"from {src_name} {tuple(rows.shape)} ({table_bytes / 1e9:.2f} GB)"
    )
    info = {
        "kind": f"synthetic: directed Chung-Lu power law (gamma={GAMMA}) from "
        f"benchmarks/sampling.py, seed {args.seed}, drawn on the {device.type.upper()}",
        "generate_s": gen_s,
        "features": f"{n:,} rows drawn uniformly with replacement (seed {args.seed + 1}) from "
        f"{src_name} {tuple(rows.shape)} {rows.dtype}: {note}",
        "feature_table": src_name,
        "labels": f"random, {SYNTH_CLASSES} classes (accuracy not meaningful, not measured)",
    }
    if args.setting:
        st = SETTINGS[args.setting]
        info["setting"] = st.name
        info["setting_note"] = (
            f"{st.note} ({st.nodes:,} nodes, {st.edges:,} edges); this run: "
            f"{n / st.nodes:.3g} x its nodes, {e / st.edges:.3g} x its edges"
        )
        if st.speedup is not None:
            info["speedup_target"] = st.speedup
            info["speedup_target_full_size"] = n == st.nodes and e == st.edges
    return Graph(
        name=name,
        data=data,
        x=x,
        train_ids=train,
        eval_ids=None,
        num_classes=SYNTH_CLASSES,
        labelled=False,
        info=info,
    )


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------


def hyper_parameters(graph: Graph, args: argparse.Namespace) -> dict:
    """The packaged config's model and sampling settings, with the command-line overrides."""
    kind = "synthetic" if not graph.labelled else graph.name
    cfg = load_config(CONFIGS[kind])
    fanouts = args.fanouts if args.fanouts is not None else list(cfg.fanouts)
    return {
        "config": CONFIGS[kind],
        "model": "GraphSAGE (PyG, mean aggregation)",
        "hidden": args.hidden if args.hidden is not None else cfg.hidden,
        "layers": len(fanouts),
        "fanouts": fanouts,
        "batch_size": args.batch_size if args.batch_size is not None else cfg.batch_size,
        "dropout": cfg.dropout,
        "lr": cfg.lr,
        "weight_decay": cfg.weight_decay,
        "eval_batch_size": cfg.eval_batch_size,
    }


def fetch_blocks_text(block_warps: int | None, chunk_rows: int | None = None) -> str:
    """The GPU tables' fetch blocks, for the results' notes (`benchmarks._env.block_label`),
    and their chunks where ``chunk_rows`` is set."""
    text = "GPU fetches in " + block_label(None if block_warps is None else [block_warps])
    if chunk_rows is not None:
        text += f", launched as kernels of at most {chunk_rows:,} rows (chunk_rows)"
    return text


def open_features(
    mode: str,
    graph: Graph,
    table: Any,
    device: torch.device,
    block_warps: int | None = None,
    chunk_rows: int | None = None,
) -> Any:
    """The ``features=`` of the feature source ``mode``: ``ibp``, ``raw`` or (GPU) ``gpu``.

    ``block_warps``, ``chunk_rows``: the GPU tables' (None: the library's defaults).
    """
    from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable

    if device.type == "cpu":
        return {"ibp": table, "raw": graph.x}[mode]
    fetch = {"progress": False, "block_warps": block_warps, "chunk_rows": chunk_rows}
    if mode == "ibp":
        return CudaIBPTable(table.path, device=device, **fetch)
    if mode == "raw":
        return PinnedRawTable(graph.x, device=device, **fetch)
    return graph.x.to(device)


def features_table(
    x: torch.Tensor, name: str, opts: SimpleNamespace, workdir: Path, device: torch.device
) -> tuple[Any, TableInfo, str]:
    """`prepare_table`, except that on a GPU a table not in the cache is compressed there.

    The GPU encoder writes the same bytes as the CPU one in seconds where one CPU core takes
    minutes (about 70 MB/s: the 8 GB of the 20M-node synthetic table would take two). The
    file is named as `prepare_table` names it and checked as it checks a cached one (it
    opens, checksums verified, and a seeded sample of rows decodes to ``x``); when the GPU
    encoder fails, or its file fails that check, `prepare_table` compresses on the CPU.
    Returns the table, its info and where it was compressed ("cuda", "cpu" or "cache").
    """
    if device.type != "cuda":
        table, info = prepare_table(x, name, opts, workdir, log)
        return table, info, "cache" if info.reused else "cpu"
    path = workdir / f"{name}-x-k{opts.clusters}-align{opts.align}.ibp"
    cached, why = _open_cached(path, x)
    if cached is not None:
        log(f"features: reusing {path} (ratio {cached.ratio:.2f}x)")
        return cached, TableInfo(str(path), float(cached.ratio), True, 0.0), "cache"
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"features: compressing {tuple(x.shape)} {x.dtype} on {device} into {path} ({why})")
    start = time.perf_counter()
    try:
        ibp_graph.compress(
            x,
            path,
            clusters=opts.clusters,
            align=opts.align,
            seed=0,
            progress=opts.progress,
            device=str(device),
        ).close()
    except Exception as exc:  # noqa: BLE001 - the CPU encoder is the fallback
        log(f"features: the GPU encoder failed ({type(exc).__name__}: {exc}); using the CPU")
        table, info = prepare_table(x, name, opts, workdir, log)
        return table, info, "cpu"
    elapsed = time.perf_counter() - start
    table, why = _open_cached(path, x)
    if table is None:
        log(f"features: the table compressed on {device} fails its check ({why}); using the CPU")
        table, info = prepare_table(x, name, opts, workdir, log)
        return table, info, "cpu"
    log(f"features: ratio {table.ratio:.2f}x in {elapsed:.1f} s on {device}")
    return table, TableInfo(str(path), float(table.ratio), False, elapsed), "cuda"


def cpu_decoder() -> str:
    """Which decoder an `IBPTable` read on the CPU uses here."""
    from ibp_graph import decode_cpu

    if decode_cpu.available():
        return "the compiled decoder, `ibp_graph.decode_cpu`"
    return "the NumPy reference, `ibp_graph.codec.decode`: Numba did not load"


def median(values: list[float]) -> float:
    return statistics.median(values)


STAGE_KEYS = ("sample", "fetch", "wait", "train")


class StepTimes:
    """Wraps each training step: its time, from CUDA events on the step's stream on a GPU.

    The start is recorded after the loader's ``next()`` returned, so after the batch's
    hand-over (its event is waited for on the stream first): the wait for the batch is not
    in the step. On the CPU: the host clock around the step. On a GPU the host clock around
    each step is kept too (`host_s`): the time the training loop took to queue it, which
    bounds the step's GPU time from below when the loop's launches are slower than the GPU.
    """

    def __init__(self, device: torch.device, inner: Any) -> None:
        self.cuda = device.type == "cuda"
        self.inner = inner
        #: Each step's (start, end): CUDA events on a GPU, host clock readings on the CPU.
        self.spans: list[tuple[Any, Any]] = []
        #: Each step's host clock readings (start, end), on either device.
        self.host: list[tuple[float, float]] = []

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self.inner():
            if self.cuda:
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                t0 = time.perf_counter()
                try:
                    yield
                finally:
                    t1 = time.perf_counter()
                    end.record()
                    self.spans.append((start, end))
                    self.host.append((t0, t1))
            else:
                t0 = time.perf_counter()
                try:
                    yield
                finally:
                    self.spans.append((t0, time.perf_counter()))
                    self.host.append(self.spans[-1])

    def total_s(self) -> float:
        """Seconds in steps so far (after the device is synchronised)."""
        if self.cuda:
            return sum(a.elapsed_time(b) for a, b in self.spans) / 1e3
        return sum(b - a for a, b in self.spans)

    def host_s(self) -> float:
        """Seconds the training loop spent queueing its steps so far (host clock)."""
        return sum(b - a for a, b in self.host)


def replayed_shapes(sampler: Any) -> list[list[int]]:
    """The ``[batch size, batches]`` of the sampler calls whose launches ``sampler`` replays
    from a CUDA graph, smallest first (none where every call ran eagerly: the sampler warned
    why)."""
    replay = getattr(sampler, "_replay", None)
    return [list(shape) for shape in sorted(replay.graphs)] if replay is not None else []


def skip_reason(mode: str, device: torch.device) -> str | None:
    """Why ``mode`` does not run on ``device`` (None: it runs)."""
    if mode in ("gpu", CHUNK_MODE, *SAMPLER_SETTINGS) and device.type != "cuda":
        return "needs a CUDA GPU"
    return None


def rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """torch's global generators' states: the CPU's, and ``device``'s on a GPU."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    """Restore what `rng_state` returned."""
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


@dataclass
class ModeRun:
    """One mode's seeded training run, which takes turns with the other modes' epoch by epoch.

    Each run keeps its own state of torch's global generators (dropout draws from them), set
    for its turn and saved after it, so that every mode trains as if it ran alone: the same
    batches and, IBP being lossless, bit-identical losses.
    """

    mode: str
    features: Any
    open_s: float
    thread: bool
    model: Any = None
    optimizer: Any = None
    loader: Any = None
    rng: tuple | None = None
    rows: list[dict] = field(default_factory=list)
    #: Attributes of ``features`` (a GPU table shared with other modes) set for this run's
    #: turns and set back after them: `CHUNK_MODE`'s ``chunk_rows``.
    table_settings: dict = field(default_factory=dict)

    @contextlib.contextmanager
    def turn(self, device: torch.device) -> Iterator[None]:
        """Inside: this run's generator states (saved again on the way out) and table
        settings."""
        saved = {k: getattr(self.features, k) for k in self.table_settings}
        for k, v in self.table_settings.items():
            setattr(self.features, k, v)
        set_rng_state(self.rng, device)
        try:
            yield
        finally:
            self.rng = rng_state(device)
            for k, v in saved.items():
                setattr(self.features, k, v)


def start_run(
    run: ModeRun, graph: Graph, hp: dict, device: torch.device, args: argparse.Namespace
) -> ModeRun:
    """Seed, build the model, its optimizer and the training loader of ``run``'s mode.

    The modes of `SAMPLER_SETTINGS` pass theirs to the loader.
    """
    from ibp_graph.loaders.pyg import NeighborLoader

    torch.manual_seed(args.seed)
    with deterministic(args.deterministic):
        run.model = graphsage(
            graph.x.shape[1],
            hp["hidden"],
            graph.num_classes,
            layers=hp["layers"],
            dropout=hp["dropout"],
        ).to(device)
    run.optimizer = torch.optim.Adam(
        run.model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"]
    )
    run.loader = NeighborLoader(
        graph.data,
        hp["fanouts"],
        input_nodes=graph.train_ids,
        batch_size=hp["batch_size"],
        shuffle=True,
        seed=args.seed,
        **loader_options(run, device, args),
        **SAMPLER_SETTINGS.get(run.mode, {}),
    )
    run.loader.stats.keep_timeline()
    run.rng = rng_state(device)
    return run


def loader_options(run: ModeRun, device: torch.device, args: argparse.Namespace) -> dict:
    """The loader arguments a mode's training and evaluation loaders share."""
    return {
        "features": run.features,
        "device": device,
        "prefetch": args.prefetch,
        "sampler_backend": args.sampler_backend,
        "prefetch_thread": run.thread,
    }


def train_turn(
    run: ModeRun, graph: Graph, epoch: int, device: torch.device, args: argparse.Namespace
) -> None:
    """Train epoch ``epoch`` of ``run`` and keep its measurements (`ModeRun.rows`)."""
    det = args.deterministic
    with run.turn(device):
        steps = StepTimes(device, lambda: deterministic(det))
        sync(device)
        clock = epoch_timeline.Clock(device)
        start = time.perf_counter()
        loss, train_acc, _, fingerprint = train_epoch(
            run.model, run.loader, run.optimizer, device, step_context=steps
        )
        sync(device)
        elapsed = time.perf_counter() - start
    st = run.loader.stats
    timeline = None
    if epoch == args.epochs:  # the last epoch's, for the chart and the overlap
        timeline = epoch_timeline.spans(clock, st.timeline, steps.spans)
    run.rows.append(
        {
            "epoch": epoch,
            "time_s": elapsed,
            "sample_s": st.sample_s,
            "fetch_s": st.fetch_s,
            "wait_s": st.wait_s,
            "train_s": max(0.0, elapsed - st.wait_s),
            "step_s": steps.total_s(),
            "step_host_s": steps.host_s(),
            "batches": st.batches,
            "rows": st.rows,
            "pcie_bytes": st.pcie_bytes,
            "raw_bytes": st.decoded_bytes,
            "loss": loss,
            "train_acc": train_acc,
            "fingerprint": fingerprint,
            **({"timeline": timeline} if timeline is not None else {}),
        }
    )
    log(
        f"  {graph.name} {run.mode:>3} epoch {epoch}/{args.epochs}: loss {loss:.6f}, "
        f"{elapsed:.3f} s (sample {st.sample_s:.3f}, fetch {st.fetch_s:.3f}, wait "
        f"{st.wait_s:.3f}), {st.pcie_bytes / 1e6:.1f} MB read"
    )


def turn_order(modes: list[str], epoch: int) -> list[str]:
    """The order the modes train epoch ``epoch`` (from 1) in: rotated by one each epoch, so
    that every mode takes every place in turn."""
    k = (epoch - 1) % len(modes) if modes else 0
    return modes[k:] + modes[:k]


def evaluate_run(
    run: ModeRun, graph: Graph, hp: dict, device: torch.device, args: argparse.Namespace
) -> tuple[float | None, float | None, float | None]:
    """(valid, test, eval seconds) after the last epoch (Nones for unlabelled graphs)."""
    from ibp_graph.loaders.pyg import NeighborLoader

    if not graph.labelled or graph.eval_ids is None:
        return None, None, None
    with run.turn(device):
        start = time.perf_counter()
        eval_loader = NeighborLoader(
            graph.data,
            [-1] * hp["layers"],
            input_nodes=graph.eval_ids,
            batch_size=hp["eval_batch_size"],
            shuffle=False,
            seed=args.seed + 1,
            **loader_options(run, device, args),
        )
        with deterministic(args.deterministic):
            val_acc, test_acc = _evaluate(run.model, eval_loader, device)
        sync(device)
        del eval_loader
    return val_acc, test_acc, time.perf_counter() - start


def profile_epoch(run: ModeRun, device: torch.device, args: argparse.Namespace) -> dict | None:
    """With ``--profile-epoch``: where a training epoch's time goes, else None.

    Two more epochs after the measured ones and the evaluation, so that nothing reported
    changes: one under the torch profiler (GPU kernels and copies, torch ops by their own host
    time), one under ``cProfile`` (the training loop's Python functions by their own time,
    waits for the loader included; the prefetch thread's functions are not in it).
    """
    if not args.profile_epoch:
        return None
    det = args.deterministic

    def epoch() -> None:
        train_epoch(
            run.model,
            run.loader,
            run.optimizer,
            device,
            step_context=lambda: deterministic(det),
        )
        sync(device)

    with run.turn(device):
        return time_split.split(epoch, 1, device.type == "cuda", top=PROFILE_TOP)


def finish_run(
    run: ModeRun, graph: Graph, hp: dict, device: torch.device, args: argparse.Namespace
) -> dict:
    """Evaluate (and with ``--profile-epoch`` profile) ``run``; its measurements."""
    if run.loader.sampler_cuda_graph:
        run.rows[-1]["replayed_shapes"] = replayed_shapes(run.loader.node_sampler)
    scores = evaluate_run(run, graph, hp, device, args)
    return summarise(run, scores, profile_epoch(run, device, args))


def loaders_default(run: ModeRun) -> bool:
    """Whether ``run``'s loader prepared its batches as the loaders do by default on its device:
    the prefetch thread as `ibp_graph.loading.default_prefetch_thread` says, the default
    sampler settings (`SAMPLER_SETTINGS` and ``--sampler-backend`` change them) and the table's
    own settings (`CHUNK_MODE` changes them)."""
    from ibp_graph.loading import default_prefetch_thread, default_sampler_backend

    loader = run.loader
    return (
        run.thread == default_prefetch_thread(loader.device)
        and run.mode not in SAMPLER_SETTINGS
        and not run.table_settings
        and loader.sampler_backend == default_sampler_backend(loader.graph.device)
    )


def summarise(
    run: ModeRun,
    scores: tuple[float | None, float | None, float | None] = (None, None, None),
    where: dict | None = None,
) -> dict:
    """``run``'s measurements over the epochs it trained so far (at least one timed):
    ``scores`` are (valid, test, eval seconds), ``where`` `profile_epoch`'s."""
    val_acc, test_acc, eval_s = scores
    rows = [{k: v for k, v in r.items() if k != "timeline"} for r in run.rows]
    timeline = run.rows[-1].get("timeline")
    timed = rows[WARMUP_EPOCHS:]
    pcie = sum(r["pcie_bytes"] for r in timed)
    raw = sum(r["raw_bytes"] for r in timed)
    stages = {k: median([r[f"{k}_s"] for r in timed]) for k in STAGE_KEYS}
    epoch_time = median([r["time_s"] for r in timed])
    step = median([r["step_s"] for r in timed])
    step_host = median([r["step_host_s"] for r in timed])
    # The prefetch pipeline's bound: the loader (sample + fetch) and the training steps
    # overlap, so an epoch takes at least the longer of the two.
    bound = max(stages["sample"] + stages["fetch"], step)
    ratio = epoch_time / bound if bound > 0 else None
    mode = run.mode
    return {
        "mode": mode,
        "title": MODE_TITLES[mode],
        "prefetch_thread": run.thread,
        "sampler_backend": run.loader.sampler_backend,
        "sample_group": run.loader.sample_group,
        "sampler_cuda_graph": run.loader.sampler_cuda_graph,
        "loaders_default": loaders_default(run),
        **run.table_settings,
        "features": repr(run.loader.features),
        "open_s": run.open_s,
        "epoch_time_s": epoch_time,
        "stages_s": stages,
        "step_s": step,
        "step_host_s": step_host,
        "pipeline_bound_s": bound,
        "pipeline_ratio": ratio,
        "pipeline_check": pipeline_target(ratio),
        "timeline": timeline,
        "overlap": epoch_timeline.overlap(timeline) if timeline else None,
        "batches_per_epoch": median([r["batches"] for r in timed]),
        "rows_per_epoch": median([r["rows"] for r in timed]),
        "pcie_bytes_per_epoch": median([r["pcie_bytes"] for r in timed]),
        "raw_bytes_per_epoch": median([r["raw_bytes"] for r in timed]),
        "ratio": raw / pcie if pcie else None,
        "losses": [r["loss"] for r in rows],
        "fingerprints": [r["fingerprint"] for r in rows],
        "final_loss": rows[-1]["loss"],
        "final_train_acc": rows[-1]["train_acc"],
        "val_acc": val_acc,
        "test_acc": test_acc,
        "eval_s": eval_s,
        "time_split": where,
        "epochs": rows,
        **(
            {"replayed_shapes": rows[-1]["replayed_shapes"]}
            if "replayed_shapes" in rows[-1]
            else {}
        ),
    }


#: Seconds between two provisional writes of a graph's results while its epochs run: a run
#: cut off (a device command's time limit) keeps the epochs it finished.
PARTIAL_EVERY_S = 30.0


def run_modes(
    names: list[str],
    graph: Graph,
    table: Any,
    hp: dict,
    device: torch.device,
    args: argparse.Namespace,
    on_partial: Any = None,
) -> dict[str, dict]:
    """Train every mode of ``names`` ``args.epochs`` epochs, taking turns; their results.

    Epoch by epoch the modes train one after another, in an order that rotates each epoch
    (`turn_order`), so that a change in the machine's speed during the run falls on every mode
    alike and each epoch of IBP on has epochs of the other modes beside it. Each feature
    source is opened once, up front: the IBP variants (`IBP_VARIANTS`) share IBP on's table.
    Then each mode is evaluated and closed in turn.

    ``on_partial(epochs, modes)``, when given, is called after a round of epochs (one timed
    at least, not the last) once `PARTIAL_EVERY_S` have passed since the modes started or
    since its last call, with the modes' results so far (`summarise`).
    """
    results: dict[str, dict] = {}
    runs: dict[str, ModeRun] = {}
    opened: dict[str, tuple[Any, float]] = {}
    try:
        for mode in names:
            why = skip_reason(mode, device)
            if why is not None:
                results[mode] = {"mode": mode, "title": MODE_TITLES[mode], "skipped": why}
                continue
            source = "ibp" if mode in IBP_VARIANTS else mode
            if source not in opened:
                t0 = time.perf_counter()
                features = open_features(
                    source, graph, table, device, args.block_warps, args.chunk_rows
                )
                opened[source] = (features, time.perf_counter() - t0)
            features, open_s = opened[source]
            # Always a bool, passed to the loaders: the plain modes run without the thread
            # even on a GPU, where the loaders' default (prefetch_thread=None) would turn it on.
            thread = bool(args.prefetch_thread or mode in IBP_VARIANTS)
            run = ModeRun(mode, features, open_s, thread)
            if mode == CHUNK_MODE:
                run.table_settings = {"chunk_rows": args.chunk_mode}
            runs[mode] = start_run(run, graph, hp, device, args)
        last = time.perf_counter()
        for epoch in range(1, args.epochs + 1):
            for mode in turn_order(list(runs), epoch):
                train_turn(runs[mode], graph, epoch, device, args)
            due = time.perf_counter() - last >= PARTIAL_EVERY_S
            if on_partial is not None and WARMUP_EPOCHS < epoch < args.epochs and due:
                so_far = results | {mode: summarise(run) for mode, run in runs.items()}
                on_partial(epoch, {mode: so_far[mode] for mode in names})
                last = time.perf_counter()
        for mode, run in runs.items():
            results[mode] = finish_run(run, graph, hp, device, args)
    finally:
        runs.clear()
        for source, (features, _) in opened.items():
            if source != "ibp" or device.type != "cpu":  # the CPU table belongs to the caller
                close = getattr(features, "close", None)
                if callable(close):
                    close()
        opened.clear()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {mode: results[mode] for mode in names}


def pipeline_target(ratio: float | None) -> dict:
    """The pipeline target's verdict: ``ratio`` (epoch / bound) at most `PIPELINE_TARGET`."""
    return check(ratio, PIPELINE_TARGET, at_least=False)


def ideal_epoch(t_off: float, share: float, ratio: float) -> tuple[float, float]:
    """``(s, T_ideal)``: the transfer share clipped to [0, 1], and the IBP epoch time if the
    transfer shrank by ``ratio`` and nothing else changed, ``T_off * ((1 - s) + s / r)``."""
    s = min(max(share, 0.0), 1.0)
    return s, t_off * ((1.0 - s) + s / ratio)


def analyse(modes: dict[str, dict], device: torch.device) -> dict:
    """Transfer share, ideal IBP epoch time, the gap to it, and the target check."""
    ibp, raw = modes["ibp"], modes["raw"]
    t_off, t_ibp = raw["epoch_time_s"], ibp["epoch_time_s"]
    share = raw["stages_s"]["fetch"] / t_off
    r = ibp["ratio"] or 1.0
    s, t_ideal = ideal_epoch(t_off, share, r)
    ideal_speedup = t_off / t_ideal
    target_t = t_off / (1.0 + TARGET_FRACTION * (ideal_speedup - 1.0))
    out = {
        "t_off_s": t_off,
        "t_ibp_s": t_ibp,
        "transfer_share_measured": share,
        "transfer_share": s,
        "ratio": r,
        "t_ideal_s": t_ideal,
        "ideal_speedup": ideal_speedup,
        "measured_speedup": t_off / t_ibp,
        **paired_speedups(raw, ibp),
        "gap_to_ideal": t_ibp / t_ideal - 1.0,
        "target_t_ibp_s": target_t,
        "target_check": check(t_ibp, target_t, at_least=False),
        "target_applies": device.type == "cuda",
    }
    gpu = modes.get("gpu", {})
    if "epoch_time_s" in gpu:
        out["t_gpu_s"] = gpu["epoch_time_s"]
        out["gpu_speedup_over_off"] = t_off / gpu["epoch_time_s"]
        # What PCIe costs the epoch, overlap included: IBP off against features on the GPU.
        s_gpu, t_ideal_gpu = ideal_epoch(t_off, (t_off - gpu["epoch_time_s"]) / t_off, r)
        out["transfer_share_from_gpu"] = s_gpu
        out["t_ideal_from_gpu_s"] = t_ideal_gpu
    return out


def paired_speedups(raw: dict, ibp: dict) -> dict:
    """IBP off's epoch time over IBP on's, epoch by epoch (the modes take turns, so each pair
    ran side by side): ``paired_speedup`` (their median) and ``paired_speedup_range`` (least,
    most), over the timed epochs; empty when either mode has no epochs."""
    a, b = raw.get("epochs"), ibp.get("epochs")
    if not a or not b:
        return {}
    pairs = [r["time_s"] / i["time_s"] for r, i in zip(a, b, strict=True)][WARMUP_EPOCHS:]
    if not pairs:
        return {}
    return {"paired_speedup": median(pairs), "paired_speedup_range": [min(pairs), max(pairs)]}


def compare(modes: dict[str, dict]) -> dict:
    ibp, raw = modes["ibp"], modes["raw"]
    diff = max(abs(a - b) for a, b in zip(ibp["losses"], raw["losses"], strict=True))
    out = {
        "losses_identical": ibp["losses"] == raw["losses"],
        "max_abs_loss_diff": diff,
        "batches_identical": ibp["fingerprints"] == raw["fingerprints"],
        "test_acc_identical": ibp["test_acc"] == raw["test_acc"],
    }
    gpu = modes.get("gpu", {})
    if "losses" in gpu:
        out["gpu_losses_identical"] = gpu["losses"] == raw["losses"]
        out["gpu_batches_identical"] = gpu["fingerprints"] == raw["fingerprints"]
    for mode, (key, _) in IBP_VARIANTS.items():
        variant = modes.get(mode, {})
        if "losses" in variant:
            out[f"{key}_losses_identical"] = variant["losses"] == ibp["losses"]
            out[f"{key}_batches_identical"] = variant["fingerprints"] == ibp["fingerprints"]
    return out


def run_graph(
    graph: Graph, args: argparse.Namespace, device: torch.device, on_partial: Any = None
) -> dict:
    """Compress ``graph``'s table, run the modes on it; the graph's results.

    ``on_partial(result)``, when given, receives provisional results while the epochs run
    (`run_modes`), marked ``incomplete`` with the epochs done so far.
    """
    hp = hyper_parameters(graph, args)
    x = graph.x
    log(
        f"{graph.name}: {graph.data.num_nodes:,} nodes, {graph.data.edge_index.shape[1]:,} "
        f"edges, x {tuple(x.shape)} {x.dtype}, {graph.train_ids.numel():,} training seeds; "
        f"{hp}"
    )
    if device.type == "cuda":  # the loaders then build their CSR on the GPU (not timed)
        graph.data.edge_index = graph.data.edge_index.to(device)
    opts = SimpleNamespace(clusters=1, align="auto", progress=False)
    table, info, encoder = features_table(x, graph.name, opts, Path(args.workdir), device)
    try:
        names = (
            *MODES,
            *([THREAD_MODE] if args.thread_mode else []),
            *([REPLAY_MODE] if args.replay_mode else []),
            *([EAGER_MODE] if args.eager_mode else []),
            *([CHUNK_MODE] if args.chunk_mode else []),
        )
        partial = None
        if on_partial is not None:

            def partial(epochs: int, modes: dict[str, dict]) -> None:
                result = graph_result(graph, hp, info, encoder, modes, device)
                result["incomplete"] = {"epochs": epochs, "of": args.epochs}
                on_partial(result)

        modes = run_modes(list(names), graph, table, hp, device, args, partial)
    finally:
        table.close()
    return graph_result(graph, hp, info, encoder, modes, device)


def graph_result(
    graph: Graph, hp: dict, info: TableInfo, encoder: str, modes: dict, device: torch.device
) -> dict:
    """A graph's results: what it is, its table, its modes' results, checks and analysis."""
    x = graph.x
    about = dict(graph.info)
    target = about.pop("speedup_target", None)  # a speed-up over IBP off to reach
    full_size = about.pop("speedup_target_full_size", False)  # ... on the setting's graph
    ran = {k: v for k, v in modes.items() if "skipped" not in v}
    result = {
        "name": graph.name,
        **about,
        "num_nodes": int(graph.data.num_nodes),
        "num_edges": int(graph.data.edge_index.shape[1]),
        "num_features": int(x.shape[1]),
        "dtype": str(x.dtype).removeprefix("torch."),
        "row_bytes": int(x.shape[1] * x.element_size()),
        "train_seeds": int(graph.train_ids.numel()),
        "num_classes": graph.num_classes,
        "accuracy_meaningful": graph.labelled,
        "hyper_parameters": hp,
        "table": {
            "file": Path(info.path).name,
            "ratio": info.ratio,
            "reused": info.reused,
            "compress_s": info.compress_s,
            "encoder": encoder,
        },
        "modes": list(modes.values()),
        "checks": compare(ran),
        "analysis": analyse(ran, device),
    }
    if target is not None:
        a = result["analysis"]
        a["speedup_target"] = target
        a["speedup_target_check"] = check(a["measured_speedup"], target, at_least=True)
        a["speedup_target_applies"] = a["target_applies"] and full_size
    return result


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def _mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB"


def _acc(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def sampler_lines(modes: list[dict]) -> list[str]:
    """How each mode sampled with the fused hop kernels: batches a sampler call, and the shapes
    of the calls captured as CUDA graphs, or none (results from before the modes recorded it:
    `REPLAY_MODE`'s batch sizes)."""
    lines = []
    for m in modes:
        if m.get("sampler_backend") == "torch":
            continue  # torch ops: nothing to replay, and a group's batches run one by one
        if "sample_group" in m:
            how = "replayed from CUDA graphs" if m.get("sampler_cuda_graph") else "launched eagerly"
            text = f"{m['sample_group']} batch{'es' if m['sample_group'] > 1 else ''} a call"
            text += f", {how}" if m.get("sampler_cuda_graph") is not None else ""
            shapes = m.get("replayed_shapes")
            if shapes:
                calls = ", ".join(f"{count} x {size:,}" for size, count in shapes)
                text += f" (calls captured, batches x seeds: {calls})"
            elif shapes is not None:
                text += (
                    " (no call was captured, every call ran eagerly: the log has the "
                    "sampler's warning)"
                )
            lines.append(f"- {m['title']}: sampled {text}.")
            continue
        if m["mode"] != REPLAY_MODE or "replayed_sizes" not in m:
            continue
        sizes = m["replayed_sizes"]
        if sizes:
            lines.append(
                f"- {MODE_TITLES[REPLAY_MODE]}: CUDA graphs for batches of "
                f"{', '.join(f'{n:,}' for n in sizes)} seeds."
            )
            continue
        lines.append(
            f"- {MODE_TITLES[REPLAY_MODE]}: no batch size was captured, every batch ran "
            "eagerly (the log has the sampler's warning)."
        )
    return lines


def markdown(payload: dict) -> str:
    on_gpu = payload["device_type"] == "cuda"
    title = "End to end: GraphSAGE epochs, IBP on vs off" + ("" if on_gpu else " (CPU)")
    lines = [*header_lines(title, payload), *payload_notes(payload), ""]
    for g in payload["graphs"]:
        hp, a, c = g["hyper_parameters"], g["analysis"], g["checks"]
        lines += [
            f"## {g['name']}",
            "",
            *(
                [
                    f"**Incomplete: provisional results after {g['incomplete']['epochs']} of "
                    f"{g['incomplete']['of']} epochs a mode (the run was cut short or is still "
                    "going); no evaluation or profile.**",
                    "",
                ]
                if "incomplete" in g
                else []
            ),
            *([f"Setting: {g['setting']}, {g['setting_note']}.", ""] if "setting" in g else []),
            f"{g['kind']}; {g['num_nodes']:,} nodes, {g['num_edges']:,} edges, "
            f"{g['num_features']} x {g['dtype']} features ({g['row_bytes']:,} B a row): "
            f"{g['features']}. Labels: {g['labels']}. {g['train_seeds']:,} training seeds, "
            f"batch size {hp['batch_size']}, fanouts {hp['fanouts']}, hidden {hp['hidden']}, "
            f"lr {hp['lr']}, weight decay {hp['weight_decay']}, dropout {hp['dropout']} "
            f"(config `{hp['config']}`"
            + (" with command-line overrides)" if payload["overrides"] else ")")
            + f". Table: ratio {g['table']['ratio']:.3f}x over the whole table, "
            + (
                "reused from the cache."
                if g["table"]["reused"]
                else f"compressed in {g['table']['compress_s']:.1f} s"
                + (" on the GPU." if g["table"].get("encoder") == "cuda" else ".")
            ),
            "",
            "| mode | epoch (s) | sample | fetch | wait | train | batches | read from host "
            "/ epoch | decoded / epoch | ratio | final loss | valid acc | test acc |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for m in g["modes"]:
            if "skipped" in m:
                lines.append(f"| {m['title']} | skipped: {m['skipped']} |" + " |" * 11)
                continue
            st = m["stages_s"]
            ratio = f"{m['ratio']:.3f}x" if m["ratio"] else "-"
            lines.append(
                f"| {m['title']} | {m['epoch_time_s']:.4f} | {st['sample']:.4f} | "
                f"{st['fetch']:.4f} | {st['wait']:.4f} | {st['train']:.4f} | "
                f"{m['batches_per_epoch']:g} | {_mb(m['pcie_bytes_per_epoch'])} | "
                f"{_mb(m['raw_bytes_per_epoch'])} | {ratio} | {m['final_loss']:.6f} | "
                f"{_acc(m['val_acc'])} | {_acc(m['test_acc'])} |"
            )
        pipe = [
            f"{m['mode']} {m['pipeline_ratio']:.2f} "
            f"({verdict(m['pipeline_check'])}; steps {m['step_s']:.4f} s"
            + (
                f", queued in {m['step_host_s']:.4f} s of host time)"
                if m.get("step_host_s") is not None and on_gpu
                else ")"
            )
            for m in g["modes"]
            if m.get("pipeline_ratio") is not None
        ]
        lines += [
            "",
            "- Prefetch pipeline: epoch / max(sample + fetch, training steps) = "
            + ", ".join(pipe)
            + f"; target <= {PIPELINE_TARGET:.2f}"
            + (" (GPU)." if a["target_applies"] else " (judged on a GPU only)."),
        ]
        beside = [
            f"{m['mode']} {m['overlap']['both_s']:.4f} s of {m['overlap']['loader_s']:.4f} s "
            f"loader and {m['overlap']['step_s']:.4f} s steps"
            + (
                f" ({100 * m['overlap']['hidden']:.0f}% of the shorter)"
                if m["overlap"]["hidden"] is not None
                else ""
            )
            + (
                f", first step at {m['overlap']['lead_s']:.4f} s"
                if m["overlap"].get("lead_s") is not None
                else ""
            )
            for m in g["modes"]
            if m.get("overlap")
        ]
        if beside:
            clocks = "CUDA events" if on_gpu else "the host clock"
            lines.append(
                f"- Last epoch's timeline ({clocks}; chart below): the loader sampling or "
                "fetching while a training step ran, and when the first step started (the "
                "first batch's preparation, which no step hides): " + "; ".join(beside) + "."
            )
        applies = "" if a["target_applies"] else " (does not apply on the CPU: no PCIe)"
        lines += [
            "",
            f"- IBP on vs off: losses {'identical' if c['losses_identical'] else 'DIFFER'} "
            f"over {len(g['modes'][0]['losses'])} epochs (largest difference "
            f"{c['max_abs_loss_diff']:.3g}), batches "
            f"{'identical' if c['batches_identical'] else 'DIFFER'} (sampled-id fingerprints)"
            + (
                f"; features on the GPU: losses "
                f"{'identical' if c['gpu_losses_identical'] else 'differ'}"
                if "gpu_losses_identical" in c
                else ""
            )
            + "".join(
                f"; {title}: losses "
                f"{'identical' if c[f'{key}_losses_identical'] else 'DIFFER'}, batches "
                f"{'identical' if c[f'{key}_batches_identical'] else 'DIFFER'}"
                for key, title in IBP_VARIANTS.values()
                if f"{key}_losses_identical" in c
            )
            + ".",
            *sampler_lines(g["modes"]),
            f"- Transfer share s = fetch / epoch with IBP off = {a['transfer_share']:.3f}; "
            f"ratio on the fetched rows r = {a['ratio']:.3f}x; ideal IBP epoch "
            f"T_off * ((1 - s) + s / r) = {a['t_ideal_s']:.4f} s (ideal speed-up "
            f"{a['ideal_speedup']:.3f}x); measured {a['t_ibp_s']:.4f} s (speed-up "
            f"{a['measured_speedup']:.3f}x"
            + (
                f"; epoch by epoch {a['paired_speedup']:.3f}x, "
                f"{a['paired_speedup_range'][0]:.3f}-{a['paired_speedup_range'][1]:.3f}x"
                if "paired_speedup" in a
                else ""
            )
            + f"), {100 * a['gap_to_ideal']:+.1f}% from the ideal.",
            f"- Target T_ibp <= T_off / (1 + 0.9 x (ideal speed-up - 1)) = "
            f"{a['target_t_ibp_s']:.4f} s (90% of the ideal gain): "
            f"{verdict(a['target_check'])}{applies}."
            + (
                f" {g['setting']} target: IBP on at least "
                f"{a['speedup_target']:.2f}x faster than IBP off (the paper's average GNN "
                f"speed-up): {verdict(a['speedup_target_check'])}"
                + (
                    applies
                    if a["speedup_target_applies"] or not a["target_applies"]
                    else " (does not apply: not the setting's full size)"
                )
                + "."
                if "speedup_target" in a
                else ""
            )
            + (
                f" Features in GPU memory: {a['t_gpu_s']:.4f} s an epoch "
                f"({a['gpu_speedup_over_off']:.3f}x over IBP off): PCIe costs IBP off "
                f"{a['transfer_share_from_gpu']:.3f} of its epoch, overlap included, for an "
                f"ideal of {a['t_ideal_from_gpu_s']:.4f} s at this ratio."
                if "t_gpu_s" in a
                else ""
            ),
            "",
        ]
        for m in g["modes"]:
            if m.get("time_split"):
                title = f"Where an epoch's time goes, {m['title']}"
                lines += [*time_split.markdown(title, m["time_split"]), ""]
    if payload.get("plot"):
        lines += [f"![stage breakdown]({payload['plot']})", ""]
    return "\n".join(lines)


def sampler_text(s: dict, gpu: bool) -> str:
    """The sampler backend of the settings ``s``, and whether it was the loaders' default."""
    backend, default = s["sampler_backend"], s.get("sampler_backend_default")
    if default is None:  # results from before the default was recorded
        return f"sampler backend {backend}"
    if not default:
        return f"sampler backend {backend} (--sampler-backend {backend})"
    where = "on a GPU" if gpu else "on the CPU"
    if gpu and backend == "torch":
        where += " without CuPy"
    return f"sampler backend {backend} (the loaders' default {where})"


def payload_notes(payload: dict) -> list[str]:
    s = payload["settings"]
    gpu = payload.get("device_type") == "cuda"  # the GPU tables' blocks: only a GPU has them
    blocks = f"{fetch_blocks_text(s.get('block_warps'), s.get('chunk_rows'))}; " if gpu else ""
    notes = [
        f"Epoch time: median of {s['epochs'] - WARMUP_EPOCHS} epochs after {WARMUP_EPOCHS} "
        "warm-up epoch (training pass only; evaluation after the last epoch, full "
        "neighborhood, not timed)"
        + (
            ", the modes taking turns epoch by epoch in an order rotated each epoch"
            if s.get("turns")
            else ""
        )
        + ". Stages: medians over the same epochs; `wait` = time the "
        "training loop spent inside the loader's `next()`, `train` = epoch - wait; "
        f"prefetch depth {s['prefetch']}; seed {s['seed']} for every mode (same batches); "
        f"deterministic algorithms {'on' if s['deterministic'] else 'off'}; torch threads "
        f"{s['torch_threads']}; {sampler_text(s, gpu)}; {blocks}batches prepared "
        + (
            "on the loaders' prefetch thread."
            if s["prefetch_thread"]
            else "in the training loop's thread"
            + (
                f" (`{THREAD_MODE}`: on the loaders' prefetch thread)."
                if s.get("thread_mode")
                else "."
            )
        )
        + (
            f" `{CHUNK_MODE}`: IBP on, on the prefetch thread, its fetches launched as kernels "
            f"of at most {s['chunk_mode']:,} rows (`chunk_rows`)."
            if s.get("chunk_mode")
            else ""
        ),
    ]
    if payload["device_type"] == "cuda":
        notes.append(
            f"\nGPU: {payload.get('gpu')} (CUDA {payload.get('cuda')}, CuPy "
            f"{payload.get('cupy')}). IBP on = `CudaIBPTable` (compressed rows pinned, fetched "
            "and decoded by the GPU over UVA), IBP off = `PinnedRawTable` (raw rows pinned, "
            "zero-copy gather), features on the GPU = a CUDA tensor. Sampling and fetching run "
            "on a side stream, overlapping training; `read from host` is what crossed PCIe."
        )
    else:
        notes.append(
            "\n**CPU run: these numbers show the pipeline, not PCIe.** IBP on = `IBPTable` "
            f"decoded on the CPU ({cpu_decoder()}), IBP off = the plain CPU tensor "
            "(`index_select`); nothing "
            "overlaps (`wait` contains sampling and fetching) and nothing crosses PCIe: "
            "`read from host` is the compressed bytes the decoder read (0 for the tensor). "
            "The end-to-end target applies on a GPU only."
        )
    return notes


def plot(payload: dict, path: Path) -> Path | None:
    """A stacked bar chart of the stage breakdown per graph and mode, and under it the last
    epoch's timeline of every mode that kept one (None: no matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    graphs = payload["graphs"]
    timelines = [
        [(m["mode"], m["timeline"]) for m in g["modes"] if m.get("timeline")] for g in graphs
    ]
    rows = 2 if any(timelines) else 1
    lanes = max((len(t) for t in timelines), default=0) * len(epoch_timeline.LANES)
    heights = [4.6] + ([max(2.0, 0.28 * lanes + 1.2)] if rows == 2 else [])
    # A graph's panel widens with its modes (their names under the bars); the figure is wide
    # enough for the title and the legend.
    shown = [[m for m in g["modes"] if "skipped" not in m] for g in graphs]
    panel = max(4.6, 1.45 * max(len(modes) for modes in shown))
    fig, axes = plt.subplots(
        rows,
        len(graphs),
        figsize=(max(7.2, panel * len(graphs) + 0.6 + 0.8 * (rows - 1)), sum(heights)),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    width = 0.36
    colors = {"train": "#4c72b0", "wait": "#dd8452", "sample": "#55a868", "fetch": "#c44e52"}
    for ax, g, modes in zip(axes[0], graphs, shown, strict=True):
        pos = np.arange(len(modes))
        st = {k: np.array([m["stages_s"][k] for m in modes]) for k in STAGE_KEYS}
        left, right = pos - width / 2, pos + width / 2
        ax.bar(left, st["train"], width, color=colors["train"], label="train (loop)")
        ax.bar(left, st["wait"], width, bottom=st["train"], color=colors["wait"], label="wait")
        ax.bar(right, st["sample"], width, color=colors["sample"], label="sample (loader)")
        ax.bar(
            right,
            st["fetch"],
            width,
            bottom=st["sample"],
            color=colors["fetch"],
            label="fetch (loader)",
        )
        epoch = [m["epoch_time_s"] for m in modes]
        ax.scatter(left, epoch, marker="_", s=500, color="black", zorder=3, label="epoch time")
        a = g["analysis"]
        ibp_at = [i for i, m in enumerate(modes) if m["mode"] == "ibp"]
        if ibp_at:
            ax.scatter(
                [left[ibp_at[0]]],
                [a["t_ideal_s"]],
                marker="v",
                s=60,
                color="#8172b2",
                zorder=4,
                label="ideal IBP epoch",
            )
        names = [textwrap.fill(m["title"], 16) for m in modes]
        ax.set_xticks(pos, names, fontsize=8)
        ax.set_ylabel("seconds per epoch")
        ax.set_title(f"{g['name']} ({g['row_bytes']:,} B rows, r={a['ratio']:.2f}x)", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if rows == 2:
        for ax, g, runs in zip(axes[1], graphs, timelines, strict=True):
            if runs:
                epoch_timeline.draw(ax, runs, f"{g['name']}: the last epoch's timeline")
            else:
                ax.axis("off")
    # The timeline's colours are the bars' (its lanes are named on the axis).
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    where = "GPU" if payload["device_type"] == "cuda" else "CPU (pipeline only, no PCIe)"
    fig.suptitle(
        f"GraphSAGE epoch, stage breakdown: {where}\nleft bar: the training loop "
        "(train + wait = epoch); right bar: the loader (overlaps training on a GPU)",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.11 if rows == 1 else 0.07, 1, 0.92 if rows == 1 else 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 15,10,5, got {text!r}") from None
    if not values or any(v == 0 or v < -1 for v in values):
        raise argparse.ArgumentTypeError(f"fanouts must be positive or -1, got {text!r}")
    return values


def write_results(payload: dict, out: Path, name: str) -> dict:
    """Write ``out/<name>.{png,json,md}``; returns the payload as written (JSON-ready)."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        png = plot(payload, out / f"{name}.png")
    except Exception as exc:  # noqa: BLE001 - a failed chart must not lose the measurements
        log(f"e2e: the chart failed ({type(exc).__name__}: {exc}); writing the results")
        png = None
    payload["plot"] = png.name if png is not None else None
    payload = finite(payload)
    write_json_md(name, payload, lambda: markdown(payload), out)
    return payload


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--epochs", type=int, default=10, help="epochs per mode, the first a warm-up")
    p.add_argument("--graphs", default="cora,citeseer", help="bundled graphs, comma-separated")
    p.add_argument("--synthetic-nodes", type=int, default=0, help="0: no synthetic graph")
    p.add_argument(
        "--synthetic-edges", type=int, default=0, help=f"0: {SYNTH_EDGES_PER_NODE} per node"
    )
    p.add_argument("--synthetic-train", type=int, default=100_000, help="training seeds")
    p.add_argument(
        "--setting",
        choices=sorted(SETTINGS),
        default=None,
        help="size the synthetic graph after a named one (--synthetic-nodes / "
        "--synthetic-edges scale it): corasu (the IBP paper's CoraSU: Cora's rows, "
        "ogbn-products' size, checks its 1.74x speed-up) or papers100m (ogbn-papers100M's size)",
    )
    p.add_argument(
        "--synthetic-features",
        default="auto",
        help="auto, facebook-svd100-float32, cora, citeseer or a .npy table",
    )
    p.add_argument("--batch-size", type=int, default=None, help="default: the graph's config")
    p.add_argument("--fanouts", type=_ints, default=None, help="e.g. 15,10,5 (default: config)")
    p.add_argument("--hidden", type=int, default=None, help="default: the graph's config")
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument(
        "--sampler-backend",
        choices=["torch", "kernel"],
        default=None,
        help="the loaders' sampler_backend (torch: torch-op hops; kernel: the fused hop "
        "kernels, needs CUDA; default: the loaders' default, kernel on a GPU with CuPy, "
        "else torch)",
    )
    p.add_argument(
        "--block-warps",
        type=block_warps_arg,
        default=None,
        help="warps per block of the GPU tables' fetches, 1-32 (their block_warps; default: "
        "the library's, 8)",
    )
    p.add_argument(
        "--chunk-rows",
        type=positive_int_arg,
        default=None,
        help="launch each GPU fetch as kernels of at most this many rows (the GPU tables' "
        "chunk_rows; default: one launch a fetch): a side-stream fetch's blocks then leave "
        "the SMs between chunks, to training",
    )
    p.add_argument(
        "--prefetch-thread",
        action="store_true",
        help="prepare batches on a background thread (the loaders' prefetch_thread=True; "
        "without it: prefetch_thread=False, also on a GPU)",
    )
    p.add_argument(
        "--thread-mode",
        action="store_true",
        help=f"also run IBP on with the prefetch thread ({THREAD_MODE!r}), beside the other "
        "modes, same seed and batches",
    )
    p.add_argument(
        "--replay-mode",
        action="store_true",
        help=f"also run IBP on with the prefetch thread, one batch a sampler call, its "
        f"launches replayed from CUDA graphs ({REPLAY_MODE!r}; GPU only, fused hop kernels), "
        "same seed and batches",
    )
    p.add_argument(
        "--eager-mode",
        action="store_true",
        help=f"also run IBP on with the prefetch thread, one batch a sampler call, its "
        f"launches eager ({EAGER_MODE!r}; GPU only, fused hop kernels), same seed and batches",
    )
    p.add_argument(
        "--chunk-mode",
        type=positive_int_arg,
        default=None,
        metavar="ROWS",
        help=f"also run IBP on with the prefetch thread and its fetches launched as kernels of "
        f"at most ROWS rows ({CHUNK_MODE!r}; GPU only), same seed and batches: whether "
        "chunked fetches pay on whole epochs",
    )
    p.add_argument(
        "--profile-epoch",
        action="store_true",
        help="after the evaluation, one more epoch per mode under the torch profiler and one "
        "under cProfile: the longest kernels, torch ops and Python functions of an epoch",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's; 1 is steadier on a busy machine)",
    )
    p.add_argument(
        "--no-deterministic",
        dest="deterministic",
        action="store_false",
        help="leave torch's deterministic algorithms off (losses are then compared only)",
    )
    p.add_argument("--workdir", default=None, help="where .ibp tables are cached")
    add_out(p)
    args = p.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        p.error("--threads must be >= 1")
    if args.epochs < WARMUP_EPOCHS + 1:
        p.error(f"--epochs must be at least {WARMUP_EPOCHS + 1} (one warm-up, one timed)")
    for name in ("batch_size", "hidden"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.setting:
        st = SETTINGS[args.setting]
        if st.features is not None:
            if args.synthetic_features not in ("auto", st.features):
                p.error(
                    f"--setting {args.setting} draws {st.features}'s rows: drop "
                    f"--synthetic-features {args.synthetic_features}"
                )
            args.synthetic_features = st.features
        args.synthetic_nodes = args.synthetic_nodes or st.nodes
        args.synthetic_edges = args.synthetic_edges or st.edges
    args.graph_list = [g.strip().lower() for g in args.graphs.split(",") if g.strip()]
    for g in args.graph_list:
        if g not in ("cora", "citeseer"):
            p.error(f"--graphs: unknown graph {g!r} (cora, citeseer)")
    if not args.graph_list and args.synthetic_nodes <= 0:
        p.error("nothing to run: give --graphs or --synthetic-nodes")
    if args.thread_mode and args.prefetch_thread:
        p.error("--thread-mode adds a mode with the prefetch thread: drop --prefetch-thread")
    if args.replay_mode and args.sampler_backend == "torch":
        p.error("--replay-mode replays the fused hop kernels: drop --sampler-backend torch")
    if args.eager_mode and args.sampler_backend == "torch":
        p.error("--eager-mode launches the fused hop kernels: drop --sampler-backend torch")
    if args.sampler_backend == "kernel" and args.device == "cpu":
        p.error("--sampler-backend kernel needs --device cuda (or auto on a machine with a GPU)")
    if args.workdir is None:
        args.workdir = str(default_workdir())
    return args


def resolve(spec: str) -> torch.device:
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("e2e: --device cuda but torch.cuda.is_available() is False")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; returns the payload written to ``e2e-<device>.json``."""
    args = parse_args(argv)
    threads = torch.get_num_threads()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        return _main(args, argv)
    finally:
        torch.set_num_threads(threads)


def _main(args: argparse.Namespace, argv: list[str] | None) -> dict:
    if args.deterministic and args.device != "cpu":  # before cuBLAS starts
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    device = resolve(args.device)
    env = environment()
    if argv is not None:
        env["command"] = " ".join(["python", "benchmarks/e2e.py", *argv])
    payload: dict[str, Any] = {**env, "device_type": device.type}
    if device.type == "cuda":
        payload["gpu"] = torch.cuda.get_device_name(device)
        payload["cuda"] = torch.version.cuda
        try:
            import cupy

            payload["cupy"] = cupy.__version__
        except ImportError:
            payload["cupy"] = None
        payload["device"] = f"GPU: {payload['gpu']}; host {env['device']}"
    # The loaders' default, resolved here for the report and then passed to them as chosen:
    # the graph is on ``device``, where the loaders would resolve it too.
    default_backend = args.sampler_backend is None
    if default_backend:
        args.sampler_backend = default_sampler_backend(device)
    payload["settings"] = {
        "epochs": args.epochs,
        "warmup_epochs": WARMUP_EPOCHS,
        "turns": True,
        "prefetch": args.prefetch,
        "sampler_backend": args.sampler_backend,
        "sampler_backend_default": default_backend,
        "block_warps": args.block_warps,
        "chunk_rows": args.chunk_rows,
        "prefetch_thread": args.prefetch_thread,
        "thread_mode": args.thread_mode,
        "replay_mode": args.replay_mode,
        "eager_mode": args.eager_mode,
        "chunk_mode": args.chunk_mode,
        "seed": args.seed,
        "deterministic": args.deterministic,
        "torch_threads": torch.get_num_threads(),
    }
    payload["overrides"] = {
        k: getattr(args, k)
        for k in ("batch_size", "fanouts", "hidden")
        if getattr(args, k) is not None
    }
    payload["graphs"] = []
    name = result_name("e2e", device)
    graphs: list[Any] = [lambda g=g: bundled_graph(g) for g in args.graph_list]
    if args.synthetic_nodes > 0:
        graphs.append(lambda: synthetic_graph(args, device))

    def provisional(result: dict) -> None:  # the graphs done, and this one so far
        write_results({**payload, "graphs": [*payload["graphs"], result]}, args.out, name)

    for build in graphs:
        graph = build()
        payload["graphs"].append(run_graph(graph, args, device, provisional))
        del graph
        if device.type == "cuda":
            torch.cuda.empty_cache()
        payload = write_results(payload, args.out, name)  # after every graph
    print((args.out / f"{name}.md").read_text())
    bad = [g["name"] for g in payload["graphs"] if not g["checks"]["losses_identical"]]
    if bad and args.deterministic:
        raise SystemExit(
            f"e2e: IBP on and off gave different losses on {', '.join(bad)} (results written "
            f"to {args.out / name}.json)"
        )
    return payload


if __name__ == "__main__":
    main()
