"""The training entry point: `train` a GraphSAGE / GAT node classifier with our loader.

`train` loads the dataset, compresses its node features into an ``.ibp`` file under the
config's ``workdir`` when ``ibp`` is on (reusing a file that still matches) and drops the raw
features (`ibp_graph.datasets.GraphDataset.without`), then trains
with the loader of the config's ``backend`` (`ibp_graph.train.backends`):
`ibp_graph.loaders.pyg.NeighborLoader` and PyG's models (``pyg``), or
`ibp_graph.loaders.dgl.DataLoader` and DGL's ``SAGEConv`` / ``GATConv`` (``dgl``). The
loader's features are the compressed table (IBP on) or the raw tensor (IBP off). One loop,
shared by the backends, trains and evaluates on the valid and test nodes after every epoch.
It returns a `RunResult` with per-epoch losses, accuracies, times, per-stage times and
bytes, and a `RunResult.summary` block:

.. code-block:: python

    from ibp_graph.train.config import load_config
    from ibp_graph.train.run import train

    result = train(load_config("cora-sage", ["epochs=10"]))
    print(result.summary())
    result.final_test_acc, result.losses
    dgl_result = train(load_config("cora-sage-dgl"))  # the same run with DGL

Reproducibility: the seed fixes the model's initialisation, dropout, the shuffle order and
the neighbor draws; on the CPU, ``torch.use_deterministic_algorithms(True, warn_only=True)``
is on during the run. As IBP is lossless, IBP on and off then give bit-identical losses on
the CPU, with either backend. On a GPU, scatter reductions are not deterministic. DGL's
PyPI build runs on the CPU only: ``device: auto`` then means the CPU for ``backend: dgl``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import ibp_graph
from ibp_graph.errors import IBPDeviceError, IBPFormatError
from ibp_graph.loading import place_graph

from .backends import Backend, PyGBackend, get_backend
from .config import TrainConfig, check_device_keys, default_workdir

__all__ = ["EpochResult", "RunResult", "TableInfo", "resolve_device", "table_path", "train"]

#: Rows compared bit for bit before a cached ``.ibp`` file is reused.
SPOT_CHECK_ROWS = 256

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass
class EpochResult:
    """One epoch: training loss and accuracy, evaluation, times and bytes.

    Attributes:
        epoch: 1-based epoch number.
        loss: mean cross-entropy over the training seeds of the epoch.
        train_acc: accuracy on the training batches as they were trained (dropout on,
            weights changing), as PyG's OGB examples report it.
        val_acc: accuracy on the valid nodes after the epoch.
        test_acc: accuracy on the test nodes after the epoch.
        time_s: wall time of the training pass (evaluation excluded).
        eval_s: wall time of the evaluation.
        sample_s: seconds the training loader spent sampling.
        fetch_s: seconds it spent fetching features and assembling batches.
        wait_s: seconds the training loop waited inside the loader's ``next()``.
        train_s: ``time_s - wait_s``: forward, backward and optimiser steps.
        batches: training batches.
        rows: feature rows fetched for training.
        pcie_bytes: bytes those fetches read from host memory (the stored, compressed bytes
            with IBP; raw bytes for a CPU tensor copied to a GPU; 0 for a tensor already
            where the batch lands).
        raw_bytes: bytes of the decoded rows: what crosses PCIe without IBP.
    """

    epoch: int
    loss: float
    train_acc: float
    val_acc: float
    test_acc: float
    time_s: float
    eval_s: float
    sample_s: float
    fetch_s: float
    wait_s: float
    train_s: float
    batches: int
    rows: int
    pcie_bytes: int
    raw_bytes: int


@dataclass
class TableInfo:
    """The compressed feature table of a run.

    Attributes:
        path: the ``.ibp`` file.
        ratio: raw bytes over stored bytes of the whole table.
        reused: an existing file was reused (no compression this run).
        compress_s: seconds spent compressing (0.0 when reused).
    """

    path: str
    ratio: float
    reused: bool
    compress_s: float


@dataclass
class RunResult:
    """What a training run measured; `summary` formats it.

    Attributes:
        config: the config of the run.
        device: where the model trained.
        dataset: the dataset's name.
        num_nodes: nodes of the graph.
        num_edges: edges the loaders sample from (after ``undirected``).
        eval_fanouts: neighbors per hop used to evaluate (``-1``: all).
        epochs: one `EpochResult` per epoch.
        table: the compressed table (None with IBP off).
        setup_s: seconds spent loading the dataset and preparing the table.
        world_size: ranks that trained together (1: a single process).
        distributed: for a data-parallel run, how it ran: ``backend``, ``nodes``,
            ``ranks_per_node``, ``segments`` (the shared segments, per rank) and
            ``param_digests`` (SHA-256 of every rank's trained parameters, in rank order:
            equal when the replicas are identical); None in a single process.
        sampler_backend: how the training loader drew neighbors, ``"torch"`` or ``"kernel"``
            (its resolved ``sampler_backend``; None before it is built).
        sampler_cuda_graph: whether it replayed the hop kernels from CUDA graphs (its
            resolved ``sampler_cuda_graph``; None before it is built).
        sample_group: batches per sampler call (its resolved ``sample_group``; None before
            it is built).
    """

    config: TrainConfig
    device: str
    dataset: str
    num_nodes: int
    num_edges: int
    eval_fanouts: list[int]
    epochs: list[EpochResult] = field(default_factory=list)
    table: TableInfo | None = None
    setup_s: float = 0.0
    world_size: int = 1
    distributed: dict[str, Any] | None = None
    sampler_backend: str | None = None
    sampler_cuda_graph: bool | None = None
    sample_group: int | None = None

    # -- derived ------------------------------------------------------------------------
    @property
    def losses(self) -> list[float]:
        """Training loss per epoch."""
        return [e.loss for e in self.epochs]

    @property
    def final_test_acc(self) -> float:
        """Test accuracy after the last epoch."""
        return self.epochs[-1].test_acc

    @property
    def best_epoch(self) -> EpochResult:
        """The epoch with the best valid accuracy (the first of ties)."""
        return max(self.epochs, key=lambda e: (e.val_acc, -e.epoch))

    @property
    def epoch_time_s(self) -> float:
        """Median training time of an epoch (evaluation excluded)."""
        return statistics.median(e.time_s for e in self.epochs)

    @property
    def eval_mode(self) -> str:
        """How evaluation sampled: full neighborhood, or which fanouts."""
        if all(k == -1 for k in self.eval_fanouts):
            return "full neighborhood"
        return f"fanouts {self.eval_fanouts}"

    @property
    def pcie_bytes(self) -> int:
        """Bytes read from host memory by the training fetches, all epochs."""
        return sum(e.pcie_bytes for e in self.epochs)

    @property
    def raw_bytes(self) -> int:
        """Bytes of the rows the training fetches delivered, all epochs (= without IBP)."""
        return sum(e.raw_bytes for e in self.epochs)

    @property
    def ratio(self) -> float | None:
        """``raw_bytes / pcie_bytes`` over the fetched rows (None with IBP off)."""
        if not self.config.ibp or not self.pcie_bytes:
            return None
        return self.raw_bytes / self.pcie_bytes

    def _mean(self, key: str) -> float:
        return statistics.fmean(getattr(e, key) for e in self.epochs)

    def _sampling_text(self) -> str:
        """How the fused hop kernels ran: batches a sampler call, replayed or eager."""
        if self.sampler_backend != "kernel" or self.sample_group is None:
            return ""
        how = "replayed from CUDA graphs" if self.sampler_cuda_graph else "launched eagerly"
        per = "batch" if self.sample_group == 1 else "batches"
        return f", {self.sample_group} {per} a call, {how}"

    # -- output -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready data, derived values included."""
        out = dataclasses.asdict(self)
        out.update(
            losses=self.losses,
            final_test_acc=self.final_test_acc,
            best_epoch=self.best_epoch.epoch,
            best_val_acc=self.best_epoch.val_acc,
            test_acc_at_best_val=self.best_epoch.test_acc,
            epoch_time_s=self.epoch_time_s,
            eval_mode=self.eval_mode,
            pcie_bytes=self.pcie_bytes,
            raw_bytes=self.raw_bytes,
            ratio=self.ratio,
        )
        return out

    def summary(self) -> str:
        """The end-of-run block: accuracy, epoch time, per-stage time, bytes, ratio."""
        cfg, n = self.config, len(self.epochs)
        best, last = self.best_epoch, self.epochs[-1]
        ibp = "IBP on" if cfg.ibp else "IBP off"
        model = cfg.model if cfg.backend == "pyg" else f"{cfg.model} ({cfg.backend})"
        world = f", world size {self.world_size}" if self.distributed is not None else ""
        head = f"== ibp-graph train: {self.dataset}, {model}, {ibp}, {self.device}{world} =="
        per = f"per epoch (mean of {n})"
        lines = [
            head,
            f"accuracy     test {last.test_acc:.4f} after epoch {last.epoch}; best valid "
            f"{best.val_acc:.4f} (epoch {best.epoch}) -> test {best.test_acc:.4f}; "
            f"train {last.train_acc:.4f} (on its batches)",
            f"evaluation   {self.eval_mode} on the valid and test nodes after every epoch, "
            f"{self._mean('eval_s'):.3f} s each",
            f"epoch time   {self.epoch_time_s:.3f} s median over {n} epochs "
            f"(first {self.epochs[0].time_s:.3f} s; evaluation excluded)",
            f"stages       {per}: sample {self._mean('sample_s'):.3f} s, fetch "
            f"{self._mean('fetch_s'):.3f} s, train {self._mean('train_s'):.3f} s "
            f"(waiting on the loader {self._mean('wait_s'):.3f} s)"
            + (f"; sampler backend {self.sampler_backend}" if self.sampler_backend else "")
            + self._sampling_text(),
        ]
        raw = self.raw_bytes / n
        if cfg.ibp:
            ratio = self.ratio
            ratio_text = f"ratio {ratio:.2f}x" if ratio else "ratio n/a"
            lines.append(
                f"PCIe bytes   {per}: {_fmt_bytes(self.pcie_bytes / n)} with IBP, "
                f"{_fmt_bytes(raw)} without (the raw rows); {ratio_text}"
            )
        else:
            lines.append(
                f"PCIe bytes   {per}: {_fmt_bytes(raw)} without IBP (the raw rows; IBP off)"
            )
        if self.table is not None:
            how = "reused" if self.table.reused else f"compressed in {self.table.compress_s:.1f} s"
            lines.append(f"table        {self.table.path}: ratio {self.table.ratio:.2f}x ({how})")
        if self.distributed is not None:
            d = self.distributed
            same = len(set(d["param_digests"])) == 1
            lines.append(
                f"distributed  world size {self.world_size} ({d['nodes']} node(s) x "
                f"{d['ranks_per_node']} rank(s), {d['backend']}); loss, accuracy, bytes and "
                f"batches summed over ranks, stage times averaged; replicas "
                f"{'identical' if same else 'DIFFER'} after training"
            )
        if torch.device(self.device).type == "cpu":
            lines.append(
                "note         a CPU run: the bytes are what the fetches read from host memory;"
                " nothing crossed PCIe"
            )
        return "\n".join(lines)


# -- set-up -------------------------------------------------------------------------------------
def resolve_device(spec: str) -> torch.device:
    """``auto`` -> ``cuda`` when a GPU is usable, else ``cpu``; others as given.

    Raises:
        IBPDeviceError: a CUDA device is asked for and none is usable.
    """
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(spec)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise IBPDeviceError(
                f"device: {spec} but torch.cuda.is_available() is False; use device: auto or cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise IBPDeviceError(
                f"device: {spec} but only {torch.cuda.device_count()} GPU(s) are visible"
            )
    return dev


def _same_rows(table: ibp_graph.IBPTable, x: torch.Tensor, seed: int = 0) -> bool:
    """Whether a seeded sample of rows (and the first and last) decode to ``x``'s bits."""
    n = x.shape[0]
    if n == 0:
        return True
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randperm(n, generator=gen)[:SPOT_CHECK_ROWS]
    ids = torch.cat([torch.tensor([0, n - 1]), ids])
    got = table[ids].contiguous().view(torch.uint8)
    want = x[ids].contiguous().view(torch.uint8)
    return torch.equal(got, want)


def _open_cached(path: Path, x: torch.Tensor) -> tuple[ibp_graph.IBPTable | None, str]:
    """The table at ``path`` when it opens cleanly and holds ``x``; else None and why."""
    if not path.is_file():
        return None, "no cached table"
    try:
        table = ibp_graph.open(path)
    except (IBPFormatError, OSError) as exc:
        return None, f"the cached table does not open ({exc})"
    if table.shape != tuple(x.shape) or table.dtype != x.dtype:
        what = f"{table.shape} {table.dtype}, need {tuple(x.shape)} {x.dtype}"
        table.close()
        return None, f"the cached table holds {what}"
    if not _same_rows(table, x):
        table.close()
        return None, "the cached table holds other rows"
    return table, "reused"


def table_path(name: str, cfg: TrainConfig, workdir: Path) -> Path:
    """Where `prepare_table` keeps the compressed features of dataset ``name``."""
    return workdir / f"{name}-x-k{cfg.clusters}-align{cfg.align}.ibp"


def prepare_table(
    x: torch.Tensor, name: str, cfg: TrainConfig, workdir: Path, log: Log
) -> tuple[ibp_graph.IBPTable, TableInfo]:
    """Compress ``x`` into ``workdir``, or reuse the file there when it matches.

    The file is ``{name}-x-k{clusters}-align{align}.ibp``. It is reused when it opens
    cleanly (checksums verified), has ``x``'s shape and dtype, and a seeded sample of rows
    decodes to ``x`` bit for bit; otherwise it is rewritten (atomically).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    path = table_path(name, cfg, workdir)
    table, why = _open_cached(path, x)
    if table is not None:
        log(f"features: reusing {path} (ratio {table.ratio:.2f}x)")
        return table, TableInfo(str(path), float(table.ratio), True, 0.0)
    log(f"features: compressing {tuple(x.shape)} {x.dtype} into {path} ({why})")
    start = time.perf_counter()
    table = ibp_graph.compress(
        x, path, clusters=cfg.clusters, align=cfg.align, seed=0, progress=cfg.progress
    )
    elapsed = time.perf_counter() - start
    log(f"features: ratio {table.ratio:.2f}x in {elapsed:.1f} s")
    return table, TableInfo(str(path), float(table.ratio), False, elapsed)


@contextlib.contextmanager
def deterministic(on: bool | None) -> Iterator[None]:
    """Deterministic algorithms (warn only) on or off for the block, restored after.

    ``None`` leaves the setting as it is. New tensors are not filled
    (``torch.utils.deterministic.fill_uninitialized_memory``): nothing here reads memory it
    did not write, and the setting is process-wide, so a loader's prefetch thread allocating
    during a step would pay a fill kernel for each tensor.
    """
    if on is None:
        yield
        return
    was_on = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(on, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


# -- the loop -----------------------------------------------------------------------------------
_PYG = PyGBackend()


def train_epoch(
    model: torch.nn.Module,
    loader: Any,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    *,
    step_context: Callable[[], contextlib.AbstractContextManager] | None = None,
    backend: Backend | None = None,
) -> tuple[float, float, int, int]:
    """One pass over the training seeds.

    Args:
        model: the model, for ``backend``.
        loader: the training loader, for ``backend``.
        optimizer: steps ``model``'s parameters.
        device: where the batches land.
        step_context: wraps each training step (e.g. deterministic algorithms for the step
            only) (default: None).
        backend: runs the model on a batch (default: None, PyG).

    Returns:
        ``(mean loss, accuracy on the batches, seeds seen, fingerprint)``; the fingerprint
        ``sum_b (b + 1) * sum(node ids of batch b)`` (kept on the device until the end)
        shows whether two runs saw the same batches.
    """
    backend = backend if backend is not None else _PYG
    model.train()
    total = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    fingerprint = torch.zeros((), dtype=torch.int64, device=device)
    seen = 0
    for b, batch in enumerate(loader):
        with step_context() if step_context is not None else contextlib.nullcontext():
            optimizer.zero_grad(set_to_none=True)
            step = backend.forward(model, batch)
            loss = F.cross_entropy(step.out, step.y)
            loss.backward()
            optimizer.step()
        bs = step.batch_size
        total += loss.detach().double() * bs
        correct += (step.out.detach().argmax(dim=-1) == step.y).sum()
        fingerprint += step.nodes.sum() * (b + 1)
        seen += bs
    if seen == 0:
        return float("nan"), float("nan"), 0, 0
    return float(total) / seen, int(correct) / seen, seen, int(fingerprint)


def _evaluate(
    model: torch.nn.Module, loader: Any, device: torch.device, backend: Backend | None = None
) -> tuple[float, float]:
    """Accuracy on the valid and on the test seeds of ``loader`` (``backend``: PyG)."""
    (val_hits, test_hits), (val_n, test_n) = _evaluate_counts(model, loader, device, backend)
    return _ratio(val_hits, val_n), _ratio(test_hits, test_n)


@torch.no_grad()
def _evaluate_counts(
    model: torch.nn.Module, loader: Any, device: torch.device, backend: Backend | None = None
) -> tuple[list[int], list[int]]:
    """``([valid hits, test hits], [valid seeds, test seeds])`` over ``loader``'s batches."""
    backend = backend if backend is not None else _PYG
    model.eval()
    hits = torch.zeros(2, dtype=torch.int64, device=device)
    counts = torch.zeros(2, dtype=torch.int64, device=device)
    for batch in loader:
        step = backend.forward(model, batch)
        ok = step.out.argmax(dim=-1) == step.y
        masks = torch.stack(backend.split_masks(batch))
        hits += (masks & ok).sum(dim=1)
        counts += masks.sum(dim=1)
    return hits.tolist(), counts.tolist()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(cfg: TrainConfig, *, log: Log | None = _stderr) -> RunResult:
    """Train ``cfg.model`` on ``cfg.dataset`` and evaluate it after every epoch.

    The framework is ``cfg.backend`` (`ibp_graph.train.backends`); it is imported first, so
    a missing one fails before the dataset is loaded. Evaluation runs on the valid and test
    nodes with ``cfg.eval_fanouts`` (None: the full neighborhood, ``-1`` per hop), in eval
    mode, through the same kind of features as training. Per-stage times and bytes come
    from the training loader's ``stats``.

    Started by ``torchrun`` (``WORLD_SIZE`` set), it trains data-parallel: it joins the
    process group (`ibp_graph.distributed.ddp`), wraps the model in
    ``DistributedDataParallel``, gives each rank its share of the training seeds every epoch
    (the loaders' ``use_ddp``), and holds one copy per host in shared segments: the dataset
    (the tensors the ranks read: labels and split, the edges where the loaders build their
    own graph (DGL), the raw features where IBP is off; the other local ranks do not load
    it, `ibp_graph.distributed.host.share_host_dataset`), the CSR graph (PyG) and the
    compressed rows (each rank reads them on the CPU or pins them for its own GPU). It
    evaluates a disjoint share of the valid and test nodes per rank and reduces accuracy,
    loss and loader stats over the ranks. Only rank 0 logs. A world size of 1 gives the
    losses of a single process.

    Whatever the world size, the PyG loaders sample one CSR graph, built once and placed on
    the device once for both (training and evaluation), and what no loader reads is freed
    after set-up: the raw features with IBP on, the edge list once the CSR is built
    (`ibp_graph.datasets.GraphDataset.without`).

    Args:
        cfg: the run's config (checked when it was built).
        log: receives the config echo, set-up and one line per epoch (default: stderr;
            None: silent).

    Returns:
        The per-epoch results, the table and the derived summary (the same on every rank).

    Raises:
        IBPInputError: the dataset cannot be loaded (unknown name, missing OGB files).
        IBPDeviceError: a CUDA device is asked for and none is usable (or the backend's
            build cannot use it: DGL's PyPI build).
        ConfigError: ``sampler_backend: kernel`` or ``sampler_cuda_graph: true`` and the run's
            device is not a GPU.
        ImportError: the backend's framework (torch_geometric or DGL), or ogb for OGB
            datasets, is not installed.
        SharedMemoryError: (data-parallel) ``/dev/shm`` or the locked-memory limit is too
            small for the shared table; the message names the sizes and how to raise them.
        DistributedError: (data-parallel) another rank failed, or did not answer within
            ``cfg.dist_timeout`` seconds.
    """
    from ibp_graph.datasets import load_dataset

    backend = get_backend(cfg.backend)
    device = _backend_device(backend, cfg.device, log if log is not None else (lambda _m: None))
    check_device_keys(cfg, device)  # before the dataset loads
    ctx = _join(cfg, device)
    quiet = log is None or (ctx is not None and not ctx.is_main)
    say: Log = (lambda _m: None) if quiet else log  # type: ignore[assignment]
    device = ctx.device if ctx is not None else device
    workdir = Path(cfg.workdir) if cfg.workdir is not None else default_workdir()
    eval_fanouts = list(cfg.eval_fanouts) if cfg.eval_fanouts is not None else [-1] * cfg.layers
    say("config:\n" + "".join(f"  {line}\n" for line in cfg.to_yaml().splitlines()).rstrip())
    say(f"device: {device}; workdir: {workdir}")
    if ctx is not None:
        say(
            f"distributed: world size {ctx.world_size}, {ctx.num_nodes} node(s), backend "
            f"{ctx.backend}, run {ctx.run_id}"
        )

    opened: list[Any] = []
    try:
        start = time.perf_counter()
        # What the loaders never read: the raw rows with IBP on, the edge list where they
        # sample a CSR graph built once.
        unread = (("x",) if cfg.ibp else ()) + (("edge_index",) if backend.takes_csr else ())
        if ctx is not None:  # one copy per host of what the ranks read
            from ibp_graph.distributed.host import share_host_dataset

            ds = share_host_dataset(
                ctx, lambda: load_dataset(cfg.dataset, root=cfg.root), omit=unread
            )
        else:
            ds = load_dataset(cfg.dataset, root=cfg.root)
        say(f"dataset: {ds!r}")
        features: Any = None  # the loader's default: the graph's raw features
        info = csr = None
        if cfg.ibp and ctx is not None:
            features, info = _shared_features(ds, cfg, workdir, ctx, opened, say)
        elif cfg.ibp:
            table, info = prepare_table(ds.x, ds.name, cfg, workdir, say)
            opened.append(table)
            if device.type == "cuda":  # pinned once, shared by both loaders
                features = ibp_graph.open(table.path, device=device, progress=cfg.progress)
                opened.append(features)
            else:
                features = table
        if backend.takes_csr:  # one CSR for both loaders (and, data-parallel, per host)
            csr = _shared_csr(backend, ds, cfg, ctx)
        ds = ds.without(*unread)  # freed from here on
        graph = backend.graph(ds, undirected=cfg.undirected, csr=csr)
        if csr is not None:  # placed once: both loaders sample the same copy
            csr = place_graph(csr, device, cfg.graph_memory)
        setup_s = time.perf_counter() - start
        segments = [t.segment.name for t in opened if hasattr(t, "segment")]
        if ctx is not None:
            segments.append(ctx.segment_name("dataset"))
            if csr is not None:
                segments.append(ctx.segment_name("graph"))
        return _run(
            cfg,
            backend,
            graph,
            ds,
            features,
            device,
            eval_fanouts,
            info,
            setup_s,
            say,
            ctx,
            segments,
            csr,
        )
    finally:
        for t in reversed(opened):
            t.close()
        if ctx is not None:
            ctx.close()


def _join(cfg: TrainConfig, device: torch.device) -> Any:
    """The process group of a data-parallel run (None when not started by a launcher)."""
    from ibp_graph.distributed.ddp import init_from_env, world_from_env

    if world_from_env() is None:
        return None
    spec = "cpu" if device.type == "cpu" else ("cuda" if cfg.device == "auto" else cfg.device)
    return init_from_env(spec, timeout_s=cfg.dist_timeout, backend=cfg.dist_backend)


def _shared_csr(backend: Backend, ds: Any, cfg: TrainConfig, ctx: Any) -> Any:
    """The `CSRGraph` the loaders sample, built from ``ds``'s edges.

    The edges are made undirected where ``cfg`` says. Data-parallel (``ctx``), local rank 0
    of each host builds it into a shared segment and the other local ranks attach to it;
    with ``graph_memory: uva`` each rank pins the segment in place for its GPU, so the host
    holds one pinned copy, not one per rank.
    """

    def build() -> Any:
        return backend.csr(backend.graph(ds, undirected=cfg.undirected))

    if ctx is None:
        return build()
    from ibp_graph.distributed.host import share_host_graph

    return share_host_graph(ctx, build, uva=cfg.graph_memory == "uva")


def _shared_features(
    ds: Any, cfg: TrainConfig, workdir: Path, ctx: Any, opened: list[Any], say: Log
) -> tuple[Any, TableInfo]:
    """The table in this host's shared segment (pinned in place on a GPU), and its info.

    Local rank 0 of each host compresses (or reuses) the file; every rank then reads the
    rows from the host's one segment (`ibp_graph.distributed.host`).
    """
    from ibp_graph.distributed.host import open_shared_table, pin_shared_table

    info = None

    def source() -> ibp_graph.IBPTable:  # local rank 0 only, before the others attach
        nonlocal info
        table, info = prepare_table(ds.x, ds.name, cfg, workdir, say)
        return table

    path = table_path(ds.name, cfg, workdir)
    shared = open_shared_table(ctx, path, source)
    opened.append(shared)
    say(
        f"features: {shared.segment.nbytes} bytes of rows in one shared segment per host "
        f"({shared.segment.name})"
    )
    if info is None:
        info = TableInfo(str(path), float(shared.ratio), True, 0.0)
    if ctx.device.type != "cuda":
        return shared, info
    gpu = pin_shared_table(ctx, shared, progress=cfg.progress)
    opened.append(gpu)
    return gpu, info


def _backend_device(backend: Backend, spec: str, say: Log) -> torch.device:
    """`resolve_device`, then the CPU for ``auto`` where the backend cannot use the GPU.

    Raises:
        IBPDeviceError: the device asked for is not usable, by torch or by the backend.
    """
    device = resolve_device(spec)
    if backend.supports(device):
        return device
    why = f"this {backend.name} build cannot train on {device} (DGL's PyPI build is CPU-only)"
    if spec == "auto":
        say(f"device: auto -> cpu: {why}")
        return torch.device("cpu")
    raise IBPDeviceError(f"device: {spec} but {why}; use device: cpu (or backend: pyg)")


def _eval_seeds(ds: Any, ctx: Any) -> torch.Tensor:
    """Valid and test nodes; a disjoint share per rank (every node once) when data-parallel."""
    mask = ds.val_mask | ds.test_mask
    if ctx is None or ctx.world_size == 1:
        return mask
    return mask.nonzero().view(-1)[ctx.rank :: ctx.world_size]


def _digest(model: torch.nn.Module) -> str:
    """SHA-256 of the model's parameters and buffers, in order (equal replicas, equal digest)."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _run(
    cfg: TrainConfig,
    backend: Backend,
    graph: Any,
    ds: Any,
    features: Any,
    device: torch.device,
    eval_fanouts: list[int],
    info: TableInfo | None,
    setup_s: float,
    say: Log,
    ctx: Any = None,
    segments: list[str] | None = None,
    csr: Any = None,
) -> RunResult:
    """Build the model and the loaders, then train and evaluate every epoch."""
    result = RunResult(
        config=cfg,
        device=str(device),
        dataset=ds.name,
        num_nodes=ds.num_nodes,
        num_edges=backend.num_edges(graph),
        eval_fanouts=eval_fanouts,
        table=info,
        setup_s=setup_s,
        world_size=1 if ctx is None else ctx.world_size,
    )
    guard = ctx.guard if ctx is not None else contextlib.nullcontext
    with deterministic(True if device.type == "cpu" else None):
        torch.manual_seed(cfg.seed)
        model = backend.build_model(cfg, ds.num_features, ds.num_classes).to(device)
        module = model
        if ctx is not None:
            from torch.nn.parallel import DistributedDataParallel

            with guard():  # broadcasts rank 0's initial weights
                model = DistributedDataParallel(
                    model, device_ids=[device.index] if device.type == "cuda" else None
                )
            ctx.hold(model)  # its reducer holds the process group: freed safely by ctx.close
            if ctx.rank:  # other dropout draws per rank; rank 0 keeps the single-process ones
                torch.manual_seed(cfg.seed + ctx.rank)
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        common = dict(
            features=features,
            device=device,
            prefetch=cfg.prefetch,
            graph_memory=cfg.graph_memory,
            sampler_backend=None if cfg.sampler_backend == "auto" else cfg.sampler_backend,
            sampler_cuda_graph=None if cfg.sampler_cuda_graph == "auto" else cfg.sampler_cuda_graph,
            sample_group=None if cfg.sample_group == "auto" else cfg.sample_group,
            **({"csr": csr} if csr is not None else {}),
        )
        train_loader = backend.loader(
            graph,
            list(cfg.fanouts),
            ds.train_mask,
            batch_size=cfg.batch_size,
            shuffle=True,
            seed=cfg.seed,
            progress=cfg.progress and (ctx is None or ctx.is_main),
            use_ddp=ctx is not None,
            **common,
        )
        result.sampler_backend = train_loader.sampler_backend
        result.sampler_cuda_graph = train_loader.sampler_cuda_graph
        result.sample_group = train_loader.sample_group
        eval_loader = backend.loader(
            graph,
            eval_fanouts,
            _eval_seeds(ds, ctx),
            batch_size=cfg.eval_batch_size,
            shuffle=False,
            seed=cfg.seed + 1,
            evaluation=True,
            **common,
        )
        for epoch in range(1, cfg.epochs + 1):
            _sync(device)
            t0 = time.perf_counter()
            with guard():
                loss, train_acc, seen, _ = train_epoch(
                    model, train_loader, optimizer, device, backend=backend
                )
            _sync(device)
            t1 = time.perf_counter()
            stats = train_loader.stats
            hits, counts = _evaluate_counts(module, eval_loader, device, backend)
            _sync(device)
            t2 = time.perf_counter()
            row = EpochResult(
                epoch=epoch,
                loss=loss,
                train_acc=train_acc,
                val_acc=_ratio(hits[0], counts[0]),
                test_acc=_ratio(hits[1], counts[1]),
                time_s=t1 - t0,
                eval_s=t2 - t1,
                sample_s=stats.sample_s,
                fetch_s=stats.fetch_s,
                wait_s=stats.wait_s,
                train_s=max(0.0, t1 - t0 - stats.wait_s),
                batches=stats.batches,
                rows=stats.rows,
                pcie_bytes=stats.pcie_bytes,
                raw_bytes=stats.decoded_bytes,
            )
            if ctx is not None and ctx.world_size > 1:
                row = _reduce_epoch(ctx, row, seen, hits, counts)
            result.epochs.append(row)
            say(
                f"epoch {epoch:>3}/{cfg.epochs}  loss {row.loss:.4f}  train {row.train_acc:.4f}  "
                f"valid {row.val_acc:.4f}  test {row.test_acc:.4f}  {row.time_s:.3f} s "
                f"(eval {row.eval_s:.3f} s)"
            )
    if ctx is not None:
        result.distributed = {
            "backend": ctx.backend,
            "nodes": ctx.num_nodes,
            "ranks_per_node": ctx.local_world_size,
            "segments": ctx.gather(segments or []),
            "param_digests": ctx.gather(_digest(module)),
        }
    return result


def _ratio(hits: int, count: int) -> float:
    return hits / count if count else float("nan")


def _reduce_epoch(
    ctx: Any, row: EpochResult, seen: int, hits: list[int], counts: list[int]
) -> EpochResult:
    """One epoch's results over all ranks: sums of counts, averages of stage times."""
    correct = round(row.train_acc * seen) if seen else 0
    loss_sum = row.loss * seen if seen else 0.0
    sums = ctx.sum(
        [
            loss_sum,
            correct,
            seen,
            *hits,
            *counts,
            row.batches,
            row.rows,
            row.pcie_bytes,
            row.raw_bytes,
            row.sample_s,
            row.fetch_s,
            row.wait_s,
            row.train_s,
        ]
    )
    loss_sum, correct, seen_all, vh, th, vn, tn, batches, rows, pcie, raw = sums[:11]
    sample_s, fetch_s, wait_s, train_s = (v / ctx.world_size for v in sums[11:])
    time_s, eval_s = ctx.max([row.time_s, row.eval_s])
    return dataclasses.replace(
        row,
        loss=loss_sum / seen_all if seen_all else float("nan"),
        train_acc=correct / seen_all if seen_all else float("nan"),
        val_acc=_ratio(int(vh), int(vn)),
        test_acc=_ratio(int(th), int(tn)),
        time_s=time_s,
        eval_s=eval_s,
        sample_s=sample_s,
        fetch_s=fetch_s,
        wait_s=wait_s,
        train_s=train_s,
        batches=int(batches),
        rows=int(rows),
        pcie_bytes=int(pcie),
        raw_bytes=int(raw),
    )
