"""What a second Python thread costs a training loop of short ops: sharing the GIL.

A training step on a small graph is launch-bound: hundreds of short torch ops (on a GPU, a
kernel launch each), and every op releases the GIL while its C++ part runs and takes it back
after. While another thread of the process wants the GIL (a loader's prefetch thread running
Python between its own ops), each of those releases and takes becomes a hand-over between
threads, and the step pays for it op by op, even where the other thread's work is small.

The step here is ``--ops`` short ops in a row (``a = a + 1`` on 16 elements of the device;
on a GPU, one launch each, then one synchronisation), timed on the main thread:

- alone;
- beside a thread running work in C++ without the GIL (``index_select`` of an 8 MiB table on
  the CPU, over and over): a busy core, and no GIL wanted;
- beside a thread running the same short ops back to back;
- beside a thread running pure Python for 100 us at a time, the GIL given up between;
- with a real loader: ibp-graph's PyG ``NeighborLoader`` over Cora (raw features and the
  IBP table, the loaders' default sampler: on a GPU, its hops' launches replayed from CUDA
  graphs, 8 batches a sampler call; on a GPU also the IBP table with the hops launched
  eagerly, one batch a call, ``sampler_cuda_graph=False, sample_group=1``: more ops on the
  thread), one step a batch, its
  batches prepared on the prefetch thread (``prefetch_thread=True``) or in the training
  loop's thread (``False``, where nothing runs beside the step).

The threads' cells are run at each ``--switch-intervals`` (``sys.setswitchinterval``, the
longest a thread keeps the GIL while another waits for it; Python's default is 5 ms). Rounds
run every cell in turn, in an order rotated each round; a cell's figure is the median over
the rounds of its median step. ``extra us / op`` = (step - step alone) / ops.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._env import (  # noqa: E402
    add_out,
    environment,
    header_lines,
    result_name,
    write_json_md,
)

#: What runs beside the step on a thread of its own (the loader's cells are apart).
BESIDE = ("C++ work", "short ops", "Python")
#: Seconds of pure Python a stretch of the "Python" thread.
PYTHON_STRETCH_S = 1e-4


def step_fn(device: torch.device, ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A step of ``ops`` short ops on ``a`` (then a synchronisation on a GPU)."""

    def step(a: torch.Tensor) -> torch.Tensor:
        for _ in range(ops):
            a = a + 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return a

    return step


def beside_fn(kind: str, device: torch.device) -> Callable[[threading.Event], None]:
    """The body of the thread that runs ``kind`` (one of `BESIDE`) until its event is set."""
    if kind == "C++ work":
        table = torch.randn(2048, 1024)
        ids = torch.randint(0, 2048, (1024,))

        def run(stop: threading.Event) -> None:
            while not stop.is_set():
                table.index_select(0, ids)

    elif kind == "short ops":

        def run(stop: threading.Event) -> None:
            b = torch.zeros(16, device=device)
            while not stop.is_set():
                b = b + 1

    elif kind == "Python":

        def run(stop: threading.Event) -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < PYTHON_STRETCH_S:
                    pass
                time.sleep(0)

    else:
        raise ValueError(f"unknown thread kind {kind!r}; known: {', '.join(BESIDE)}")
    return run


def time_steps(step: Callable, a: torch.Tensor, n: int) -> list[float]:
    """``n`` step times in seconds."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        a = step(a)
        out.append(time.perf_counter() - t0)
    return out


@contextlib.contextmanager
def switch_interval(seconds: float) -> Iterator[None]:
    """``sys.setswitchinterval(seconds)`` for the ``with`` block, the previous one after."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def warm_operand(step: Callable, device: torch.device) -> torch.Tensor:
    """The tensor a step starts from, after one untimed step."""
    a = torch.zeros(16, device=device)
    step(a)
    return a


def run_beside(
    kind: str | None, interval: float, step: Callable, device: torch.device, steps: int
) -> float:
    """Median step time beside a thread running ``kind`` (None: alone) at ``interval``."""
    a = warm_operand(step, device)
    stop = threading.Event()
    thread = None
    with switch_interval(interval):
        try:
            if kind is not None:
                run = beside_fn(kind, device)
                thread = threading.Thread(target=run, args=(stop,), daemon=True)
                thread.start()
                time.sleep(0.01)  # the thread is running
            return statistics.median(time_steps(step, a, steps))
        finally:
            stop.set()
            if thread is not None:
                thread.join()


#: The loaders' names (their features, the loaders' default sampler), and on a GPU the one
#: whose sampler launches its hops eagerly, one batch a call (more ops on the thread).
LOADERS = ("raw", "IBP")
EAGER = "IBP, eager sampler, one batch a call"


def make_loaders(device: torch.device, folder: Path) -> dict[tuple[str, bool], object]:
    """Cora loaders by (name, prefetch thread): raw and IBP features (on a GPU, IBP with the
    hop kernels launched eagerly, one batch a call, too), each with its batches prepared on
    the prefetch thread (True) or in the loop's thread (False), each run for one epoch (warm).
    On a GPU the features are e2e.py's: a `PinnedRawTable` and a `CudaIBPTable`, shared by the
    loaders."""
    from torch_geometric.data import Data

    import ibp_graph
    from ibp_graph.datasets import load_dataset
    from ibp_graph.loaders.pyg import NeighborLoader

    ds = load_dataset("cora")
    data = Data(x=ds.x, y=ds.y, edge_index=ds.edge_index)
    table = ibp_graph.compress(ds.x, folder / "cora.ibp")
    raw, ibp = ds.x, table
    if device.type == "cuda":  # as e2e.py's IBP off and on: rows pinned, read over UVA
        from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable

        raw = PinnedRawTable(ds.x, device=device, progress=False)
        ibp = CudaIBPTable(table.path, device=device, progress=False)
    kinds: list[tuple[str, object, bool]] = [("raw", raw, False), ("IBP", ibp, False)]
    if device.type == "cuda":
        kinds.append((EAGER, ibp, True))
    loaders = {}
    for name, features, eager in kinds:
        for thread in (False, True):
            extra = {"sampler_cuda_graph": False, "sample_group": 1} if eager else {}
            loaders[name, thread] = NeighborLoader(
                data,
                num_neighbors=[10, 10],
                batch_size=32,
                shuffle=True,
                features=features,
                device=device,
                seed=0,
                prefetch_thread=thread,
                **extra,
            )
            for _batch in loaders[name, thread]:  # warm: compiled code, buffers
                pass
    return loaders


def run_loader(loader: object, interval: float, step, device: torch.device) -> tuple[float, float]:
    """(median step, epoch seconds) of one epoch of ``loader`` with a step a batch."""
    a = warm_operand(step, device)
    with switch_interval(interval):
        times = []
        t0 = time.perf_counter()
        for _batch in loader:
            s0 = time.perf_counter()
            a = step(a)
            times.append(time.perf_counter() - s0)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return statistics.median(times), time.perf_counter() - t0


def measure(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """Every cell over ``args.rounds`` rounds, the order rotated each round."""
    step = step_fn(device, args.ops)
    cells: list[tuple[str, str | None, float, bool | None]] = [("thread", None, 0.005, None)]
    for kind in BESIDE:
        cells += [("thread", kind, s, None) for s in args.switch_intervals]
    loaders = {}
    tmp = tempfile.TemporaryDirectory()
    if not args.no_loader:
        loaders = make_loaders(device, Path(tmp.name))
        for name in dict.fromkeys(name for name, _ in loaders):
            cells.append(("loader", name, 0.005, False))
            cells += [("loader", name, s, True) for s in args.switch_intervals]
    samples: dict[int, list[tuple[float, float | None]]] = {i: [] for i in range(len(cells))}
    try:
        for r in range(args.rounds):
            order = list(range(len(cells)))
            order = order[r % len(order) :] + order[: r % len(order)]
            for i in order:
                what, kind, interval, thread = cells[i]
                if what == "thread":
                    samples[i].append((run_beside(kind, interval, step, device, args.steps), None))
                else:
                    samples[i].append(run_loader(loaders[kind, thread], interval, step, device))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        tmp.cleanup()
    rows = []
    for i, (what, kind, interval, thread) in enumerate(cells):
        steps = [s for s, _ in samples[i]]
        epochs = [e for _, e in samples[i] if e is not None]
        rows.append(
            {
                "what": what,
                "beside": kind,
                "switch_interval_s": interval,
                "prefetch_thread": thread,
                "step_s": statistics.median(steps),
                "step_range_s": [min(steps), max(steps)],
                "epoch_s": statistics.median(epochs) if epochs else None,
            }
        )
    return rows


def analyse(rows: list[dict], ops: int) -> list[dict]:
    """Each row with ``extra_us_per_op`` against the step alone, and the loader rows' step
    and epoch against the same loader without the thread (``vs_serial``)."""
    alone = next(r["step_s"] for r in rows if r["what"] == "thread" and r["beside"] is None)
    serial = {
        r["beside"]: r for r in rows if r["what"] == "loader" and r["prefetch_thread"] is False
    }
    out = []
    for r in rows:
        r = dict(r, extra_us_per_op=(r["step_s"] - alone) / ops * 1e6)
        base = serial.get(r["beside"]) if r["what"] == "loader" else None
        if base is not None and r["prefetch_thread"]:
            r["step_vs_serial"] = r["step_s"] / base["step_s"]
            r["epoch_vs_serial"] = r["epoch_s"] / base["epoch_s"]
        out.append(r)
    return out


def markdown(env: dict, payload: dict) -> str:
    lines = header_lines("A second thread beside a training loop of short ops (the GIL)", env)
    lines += [
        f"Step: {payload['ops']} short ops (`a = a + 1` on 16 elements of the {payload['device']}"
        f"{', then a synchronisation' if payload['device'] == 'cuda' else ''}); "
        f"{payload['rounds']} rounds, every cell in each, the order rotated; a thread cell's "
        f"step is the median of {payload['steps']} steps, a loader cell's the median over its "
        "epoch's batches (Cora, batch 32, fanouts [10, 10], every node a seed); figures: the "
        "median over the rounds, [lowest, highest] round. extra us / op: (step - step alone) "
        "/ ops. Loader cells: ibp-graph's PyG NeighborLoader, one step a batch, batches "
        "prepared on the prefetch thread or (serial) in the loop's thread; vs serial: the "
        "same loader's step and epoch without the thread.",
        "",
        "| beside the step | switch interval | step (ms) | range (ms) | extra us / op | epoch (s) "
        "| step vs serial | epoch vs serial |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["rows"]:
        if r["what"] == "thread":
            who = "nothing" if r["beside"] is None else f"a thread: {r['beside']}"
        else:
            how = "prefetch thread" if r["prefetch_thread"] else "serial"
            who = f"loader ({r['beside']}), {how}"
        lo, hi = (v * 1e3 for v in r["step_range_s"])
        epoch = "-" if r["epoch_s"] is None else f"{r['epoch_s']:.4f}"
        sv = f"{r['step_vs_serial']:.2f}x" if "step_vs_serial" in r else "-"
        ev = f"{r['epoch_vs_serial']:.2f}x" if "epoch_vs_serial" in r else "-"
        lines.append(
            f"| {who} | {r['switch_interval_s'] * 1e3:g} ms | {r['step_s'] * 1e3:.3f} | "
            f"[{lo:.3f}, {hi:.3f}] | {r['extra_us_per_op']:.1f} | {epoch} | {sv} | {ev} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``argv``: default ``sys.argv[1:]``); bad values exit with a message."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--ops", type=int, default=300, help="short ops a step (default 300)")
    p.add_argument("--steps", type=int, default=30, help="steps a thread cell (default 30)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--switch-intervals",
        type=float,
        nargs="+",
        default=[0.005, 0.0001],
        help="sys.setswitchinterval values for the cells with a thread, seconds",
    )
    p.add_argument("--no-loader", action="store_true", help="leave out the loader cells")
    add_out(p)
    args = p.parse_args(argv)
    for name in ("ops", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if any(not 0 < s < 1 for s in args.switch_intervals):
        p.error(f"--switch-intervals must lie between 0 and 1 s, got {args.switch_intervals}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gil_handoff.py: --device cuda, but no CUDA device is available")
    torch.set_num_threads(1)
    rows = analyse(measure(args, device), args.ops)
    env = environment()
    payload = {
        "device": device.type,
        "ops": args.ops,
        "steps": args.steps,
        "rounds": args.rounds,
        "rows": rows,
        "environment": env,
    }
    name = result_name("gil-handoff", device)
    print(write_json_md(name, payload, lambda: markdown(env, payload), args.out).read_text())


if __name__ == "__main__":
    main()
