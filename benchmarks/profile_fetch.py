"""Nsight Compute driver: the fetch kernels, one launch each, for ``ncu`` to profile.

Usage (``benchmarks/gpu_session.sh profile`` runs the first two on a GPU machine)::

    ncu --clock-control none --profile-from-start off --target-processes all \\
        --kernel-name regex:'ibp_(fetch_decode|raw_gather)' --section SpeedOfLight ... \\
        --export OUT/ncu-fetch python3 benchmarks/profile_fetch.py --manifest OUT/m.json
    ncu --import OUT/ncu-fetch.ncu-rep --csv --page details > OUT/ncu-fetch.csv
    python3 benchmarks/profile_fetch.py --summarise OUT/ncu-fetch.csv OUT/m.json --out OUT/p.md
    .venv/bin/python benchmarks/profile_fetch.py --dry-run --manifest /tmp/m.json  # no GPU

Cases (``--cases``, default all four): 512-byte rows of three of `benchmarks.fetch`'s
synthetic kinds (dense normal float32, sparse float32 with 5% non-zeros, float32 holding
bfloat16 values; `benchmarks.fetch.synthetic_block`), and ``bag-of-words-5732B``: rows of
1,433 float32 columns (Cora's width, 5,732 bytes) of which about 1.3% are ones, the rest
zeros, like a bag-of-words feature table. Each case compresses ``--block-rows`` distinct rows
and tiles them in pinned memory to a table of ``--table-gb`` GiB of raw rows, and further
until its stored rows reach four times the L2, as `benchmarks.fetch` does
(`benchmarks.fetch.table_tiles`: a sparse table's rows would otherwise be reread from L2 within
the launch); one random batch of ``--batch`` ids (uniform over the table's rows, drawn on the
CPU from ``--seed``) is then fetched five ways:

- ``raw``: the raw zero-copy gather of as many raw rows, from a pinned raw buffer of
  ``--table-gb`` GiB (`benchmarks.fetch.Bench`); where the tiled table has more rows than
  that buffer, the batch's ids are folded onto it (``id % raw rows``);
- ``ibp`` and ``ibp_db``: the fused fetch + decode from the pinned compressed rows, with one
  staging buffer per warp and double-buffered (``double_buffer=True``);
- ``decode`` and ``decode_db``: the same two from a copy of the compressed rows in GPU memory
  (no PCIe: decoding alone).

Every kernel is launched once untimed first (a warm-up: CuPy compiles it on its first call);
then each of the five is launched once more inside a ``cudaProfilerStart`` /
``cudaProfilerStop`` window (``torch.cuda.profiler.start`` / ``stop``), one window per
launch. Under ``ncu --profile-from-start off`` only launches inside such a window are
profiled, so the warm-ups are not (and ``--kernel-name`` leaves out every other kernel: the
zeroing and checking between launches run outside the windows anyway). Outside ncu the
windows do nothing. Each output is checked bit for bit against the original rows
(``torch.equal`` on the GPU). A double-buffered launch refused because its rows are too wide
for two staging buffers is recorded as skipped, and the run goes on.

The manifest (``--manifest``, JSON) lists the launches in the order they are profiled: case,
``what`` (raw / ibp / ibp_db / decode / decode_db), the kernel's entry point, rows, row bytes,
the stored bytes the batch reads, ``status`` (planned, profiled or skipped), bit-identical and
the error slots; ncu's results (one per profiled launch, in launch order) are matched to it
by order, and their kernel names checked against it. It is rewritten after every case, so a
run cut short keeps the cases it finished. ``--dry-run`` (CPU only) builds every case, checks
its tiled layout with the CPU decoder, and writes the manifest with the planned launches.

``--summarise CSV MANIFEST`` reads ncu's ``--csv --page details`` output and the manifest and
writes a markdown table (``--out``, default ``profile.md`` beside the CSV): per profiled
launch its duration, delivered and stored GB/s over that duration, the Speed Of Light
memory, DRAM and compute (SM) throughput (% of peak), PCIe reads (GB/s and % of peak, when
the run collected ``pcie__read_bytes``), achieved occupancy, registers per thread, the three
stall reasons taking the largest share of active warp cycles (from the
``smsp__warp_issue_stalled_*_per_warp_active.pct`` metrics, else the Warp State section's
"Stall ..." rows), and warp instructions executed per row. A metric missing from the CSV reads
n/a. Where ``ncu-source.csv`` lies beside the CSV (``ncu --import REPORT --csv --page source
--print-source cuda``, of a run with the SourceCounters section and kernels built with
``IBP_GRAPH_LINEINFO=1``), the page ends with where each ``decode`` launch's instructions go:
the source lines that executed the most, with their shares of its instructions and stall
samples.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ibp_graph  # noqa: E402
from benchmarks import fetch  # noqa: E402
from benchmarks._env import RESULTS, blocks_per_sm, environment  # noqa: E402
from ibp_graph.pinned import PAGE_KINDS  # noqa: E402

#: Cora's bag-of-words width: 1,433 float32 columns, 5,732 bytes a row.
BOW_COLUMNS = 1433
#: The share of ones in a bag-of-words row.
BOW_DENSITY = 0.013
#: The five launches of a case, in the order they are profiled.
WHATS = ("raw", "ibp", "ibp_db", "decode", "decode_db")
DEFAULT_MANIFEST = RESULTS / "profile-manifest.json"
PROG = "profile_fetch.py"


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


def bag_of_words(rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` float32 rows of `BOW_COLUMNS` columns: each 1 with probability `BOW_DENSITY`."""
    hits = rng.random((rows, BOW_COLUMNS), dtype=np.float32) < BOW_DENSITY
    return hits.astype(np.float32)


#: name -> (generator of ``rows`` rows from ``rng``, description).
CASES: dict[str, tuple[Callable[[int, np.random.Generator], np.ndarray], str]] = {
    "dense-normal-512B": (
        partial(fetch.synthetic_block, "dense-normal", 512),
        "synthetic dense-normal, 512 B rows",
    ),
    "sparse-5pct-512B": (
        partial(fetch.synthetic_block, "sparse-5pct", 512),
        "synthetic sparse-5pct, 512 B rows",
    ),
    "bf16-in-fp32-512B": (
        partial(fetch.synthetic_block, "bf16-in-fp32", 512),
        "synthetic bf16-in-fp32, 512 B rows",
    ),
    "bag-of-words-5732B": (
        bag_of_words,
        f"bag of words: {BOW_COLUMNS:,} float32 columns, about {BOW_DENSITY:.1%} ones",
    ),
}


def build_cases(names: Sequence[str], rows: int, seed: int) -> list[fetch.Case]:
    """The named cases, in order, each with ``rows`` distinct rows."""
    rng = np.random.default_rng(seed)
    out = []
    for name in names:
        make, note = CASES[name]
        out.append(
            fetch.Case(name, "synthetic", make(rows, rng), f"{note}, {rows:,} distinct rows")
        )
    return out


@dataclasses.dataclass
class Prepared:
    """A case compressed, its tiled table's geometry and its batch (ids on the CPU)."""

    case: fetch.Case
    table: ibp_graph.IBPTable
    times: int  # copies of the block in the tiled table
    num_rows: int  # rows of the tiled table
    bypass: bool  # stored raw: every fetch is the raw gather
    ids: torch.Tensor  # the batch, int64 on the CPU
    stored_batch: int  # stored bytes of the batch's rows
    raw_rows: int  # rows of the raw buffer at this width
    l2: int  # the L2 bytes the table was tiled past

    @property
    def raw_ids(self) -> torch.Tensor:
        """The batch for the raw gather: ``ids``, folded onto the raw buffer's rows."""
        return fetch.fold_ids(self.ids, self.num_rows, self.raw_rows)

    @property
    def block(self) -> np.ndarray:
        return fetch.stored_block(self.table)

    @property
    def stored_table(self) -> int:
        return self.times * self.block.size

    def summary(self) -> dict:
        """The case's entry in the manifest."""
        rb, n = self.case.row_bytes, self.ids.numel()
        return {
            "case": self.case.name,
            "row_bytes": rb,
            "ratio": float(self.table.ratio),
            "bypass": self.bypass,
            "align": self.table.align,
            "block_rows": self.case.rows.shape[0],
            "times": self.times,
            "table_rows": self.num_rows,
            "stored_gb": self.stored_table / 1e9,
            "l2_bytes": self.l2,
            "raw_rows": self.raw_rows,
            "raw_ids_folded": self.num_rows > self.raw_rows,
            "batch": n,
            "batch_stored_bytes": self.stored_batch,
            "batch_ratio": n * rb / self.stored_batch if self.stored_batch else math.nan,
            "note": self.case.note,
        }


def prepare(case: fetch.Case, tmp: Path, args: argparse.Namespace, l2: int) -> Prepared:
    """Compress ``case``'s block, size its tiled table (`fetch.table_tiles`: stored rows past
    `fetch.L2_POOL_FACTOR` x ``l2`` bytes) and draw its batch."""
    from ibp_graph.cuda_table import raw_bypass

    table = ibp_graph.compress(case.rows, tmp / f"{case.name}.ibp", progress=False)
    nb, rb = case.rows.shape[0], case.row_bytes
    block_stored = fetch.stored_block(table).size
    times = fetch.table_tiles(args.table_bytes, nb, rb, block_stored, l2)
    num_rows = times * nb
    n = fetch.batch_rows(args.batch, rb, args.table_bytes, num_rows)
    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, num_rows, (n,), generator=gen, dtype=torch.int64)
    sizes = np.diff(np.asarray(table.offsets, dtype=np.int64)) * table.align
    stored = int(sizes[ids.numpy() % nb].sum())
    raw_rows = fetch.raw_buffer_rows(args.table_bytes, rb)
    return Prepared(case, table, times, num_rows, raw_bypass(table), ids, stored, raw_rows, l2)


def make_codec(prepared: Prepared, rows_ptr: int, device: torch.device) -> Any:
    """The `DeviceCodec` of ``prepared``'s tiled table at ``rows_ptr``, tensors on ``device``."""
    return fetch.tiled_codec(prepared.table, prepared.times, rows_ptr, device)


def kernel_names(prepared: Prepared, codec: Any, raw_ptr: int, out_ptr: int) -> dict[str, str]:
    """The entry point each launch of a case runs (as the launchers choose them).

    ``raw_ptr`` is the raw buffer's address and ``out_ptr`` the output's (0 in a dry run: the
    pinned buffers start on a page and torch's allocations on 512 bytes, so 0 stands for an
    aligned address). A table stored raw is fetched by the raw gather in every form.
    """
    from ibp_graph.kernels import fetch_decode, raw_gather

    rb = prepared.case.row_bytes
    raw = raw_gather.entry_point(rb, raw_ptr, out_ptr, None)
    if prepared.bypass:
        fused = raw_gather.entry_point(rb, codec.rows_ptr, out_ptr, None)
        one = two = fused
    else:
        one = fetch_decode._entry(codec, False)
        two = fetch_decode._entry(codec, True)
    return {"raw": raw, "ibp": one, "ibp_db": two, "decode": one, "decode_db": two}


def plan_launches(prepared: Prepared, names: dict[str, str]) -> list[dict]:
    """The five planned launches of a case, in profiling order (manifest entries)."""
    rb, n = prepared.case.row_bytes, prepared.ids.numel()
    return [
        {
            "case": prepared.case.name,
            "what": what,
            "kernel": names[what],
            "source": "pinned" if what in ("raw", "ibp", "ibp_db") else "gpu",
            "double_buffer": what.endswith("_db"),
            "rows": n,
            "row_bytes": rb,
            "stored_bytes": n * rb if what == "raw" else prepared.stored_batch,
            "status": "planned",
            "bit_identical": None,
            "errors": None,
            "note": "",
        }
        for what in WHATS
    ]


# --------------------------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------------------------


def new_manifest(args: argparse.Namespace, device: str | None) -> dict:
    """The manifest before any case: machine, settings, how the warm-ups are kept out."""
    return {
        **environment(),
        "tool": "benchmarks/profile_fetch.py",
        "dry_run": bool(args.dry_run),
        "gpu_device": device,
        "settings": {
            "cases": list(args.cases),
            "table_gb": args.table_gb,
            "batch": args.batch,
            "block_rows": args.block_rows,
            "seed": args.seed,
            "pages": args.pages,
            "max_blocks": args.max_blocks,
        },
        "window": "cudaProfilerStart/Stop (torch.cuda.profiler.start/stop) around each "
        "profiled launch, after one warm-up launch of each; profile with ncu "
        "--profile-from-start off",
        "complete": False,
        "cases": [],
        "launches": [],
    }


def write_manifest(manifest: dict, path: Path) -> None:
    """Number the launches in order and write the manifest as JSON."""
    for i, launch in enumerate(manifest["launches"]):
        launch["index"] = i
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2, default=float) + "\n")


# --------------------------------------------------------------------------------------------
# Dry run (CPU)
# --------------------------------------------------------------------------------------------


def dry_run(args: argparse.Namespace) -> dict:
    """Build every case and check its tiled layout on the CPU; write the planned manifest."""
    manifest = new_manifest(args, None)
    cpu = torch.device("cpu")
    l2 = fetch.l2_bytes(cpu)
    with tempfile.TemporaryDirectory() as tmp:
        for case in build_cases(args.cases, args.block_rows, args.seed):
            prepared = prepare(case, Path(tmp), args, l2)
            try:
                checked = fetch.check_tiled_on_cpu(
                    prepared.table, case.rows, min(prepared.times, 3), args.seed
                )
                codec = make_codec(prepared, 0, cpu)
                launches = plan_launches(prepared, kernel_names(prepared, codec, 0, 0))
                manifest["cases"].append(prepared.summary())
                manifest["launches"] += launches
                kernels = sorted({x["kernel"] for x in launches})
                print(
                    f"{case.name:20s} {case.row_bytes:6,} B  ratio {prepared.table.ratio:8.3f}"
                    f"{' (stored raw)' if prepared.bypass else ''}, {prepared.num_rows:,} rows "
                    f"({prepared.stored_table / 1e6:,.1f} MB pinned; tiled past "
                    f"{fetch.L2_POOL_FACTOR} x an L2 of "
                    f"{l2 / 2**20:g} MiB, the CPU's stand-in), batch "
                    f"{prepared.ids.numel():,} rows ({prepared.stored_batch:,} B stored); "
                    f"{len(launches)} launches ({', '.join(kernels)}); tiled layout checked on "
                    f"{checked} rows",
                    flush=True,
                )
            finally:
                prepared.table.close()
    manifest["complete"] = True
    write_manifest(manifest, args.manifest)
    print(
        f"dry run: {len(manifest['launches'])} launches planned over {len(manifest['cases'])} "
        f"cases, each after a warm-up; manifest {args.manifest}. Profiling needs a CUDA GPU.",
        flush=True,
    )
    return manifest


# --------------------------------------------------------------------------------------------
# The GPU run
# --------------------------------------------------------------------------------------------


def bench_args(args: argparse.Namespace, cases: Sequence[fetch.Case]) -> argparse.Namespace:
    """What `benchmarks.fetch.Bench` reads: the raw buffer's size, staging for one batch."""
    largest = max(min(args.batch, args.table_bytes // c.row_bytes) * c.row_bytes for c in cases)
    return argparse.Namespace(
        table_bytes=args.table_bytes,
        max_batch_bytes=max(1, largest),
        seed=args.seed,
        pages=args.pages,
        raw_kernel="auto",
        max_blocks=args.max_blocks,
        block_warps=None,  # the library's default block
    )


@contextlib.contextmanager
def profiler_window(device: torch.device) -> Iterator[None]:
    """``cudaProfilerStart`` / ``Stop`` around the block on a CUDA device (elsewhere: nothing).

    Under ``ncu --profile-from-start off`` only the kernels launched inside are profiled.
    """
    if device.type != "cuda":
        yield
        return
    torch.cuda.profiler.start()
    try:
        yield
    finally:
        torch.cuda.profiler.stop()


def warm_up(
    launches: dict[str, Callable[[], None]], entries: list[dict], device: torch.device
) -> None:
    """Launch each once, unprofiled; a double-buffered launch refused for wide rows is skipped."""
    for entry in entries:
        try:
            launches[entry["what"]]()
        except ValueError as exc:
            if not entry["double_buffer"] or "one buffer" not in str(exc):
                raise
            entry.update(status="skipped", note=str(exc))
    fetch.sync(device)


def profile_one(
    launch: Callable[[], None],
    entry: dict,
    out: torch.Tensor,
    want: torch.Tensor,
    error: torch.Tensor,
) -> None:
    """One launch alone inside a profiler window; then its output checked bit for bit."""
    device = out.device
    out.zero_()
    error.zero_()
    fetch.sync(device)
    with profiler_window(device):
        launch()
        fetch.sync(device)
    errors = [int(v) for v in error.tolist()]
    entry.update(status="profiled", bit_identical=bool(torch.equal(out, want)), errors=errors)


def profile_case(bench: fetch.Bench, case: fetch.Case, tmp: Path, args) -> tuple[dict, list]:
    """Tile and pin one case, warm up its five launches, profile each once.

    Returns the case's manifest summary and its launches (manifest entries, in order).
    """
    from ibp_graph.pinned import PinnedBuffer

    device = bench.device
    prepared = prepare(case, tmp, args, fetch.l2_bytes(device))
    rb, nb = case.row_bytes, case.rows.shape[0]
    pinned = PinnedBuffer(prepared.stored_table, f"tiled {case.name}", bench.cuda, pages=args.pages)
    on_gpu = None
    try:
        fetch.fill_tiled(pinned.array, prepared.block, prepared.times)
        ptr = bench.pin(pinned)
        codec = make_codec(prepared, ptr, device)
        # The same rows in GPU memory (64 zero bytes after them, as after the pinned ones).
        stored = prepared.stored_table
        on_gpu = torch.zeros(stored + 64, dtype=torch.uint8, device=device)
        fetch.device_copy(on_gpu, pinned, ptr, stored)
        gpu_codec = dataclasses.replace(codec, rows_ptr=on_gpu.data_ptr())
        ids = prepared.ids.to(device)
        n = ids.numel()
        out = torch.empty((n, rb), dtype=torch.uint8, device=device)
        rows_u8 = np.ascontiguousarray(case.rows).view(np.uint8).reshape(nb, rb)
        want = torch.from_numpy(rows_u8).to(device).index_select(0, ids % nb)
        _, host = bench.raw_rows(rb)
        raw_ids = prepared.raw_ids
        raw_want = host.index_select(0, raw_ids).view(torch.uint8).reshape(n, rb).to(device)
        err, bypass, cap = bench.error, prepared.bypass, bench.max_blocks
        fused = partial(fetch.fused_launch, bypass=bypass, out=out, error=err, max_blocks=cap)
        launches = {
            what: partial(launch, raw_ids.to(device) if what == "raw" else ids)
            for what, launch in {
                "raw": bench.raw_launch(rb, out),
                "ibp": fused(codec),
                "ibp_db": fused(codec, double_buffer=True),
                "decode": fused(gpu_codec),
                "decode_db": fused(gpu_codec, double_buffer=True),
            }.items()
        }
        entries = plan_launches(
            prepared, kernel_names(prepared, codec, bench.raw_ptr, out.data_ptr())
        )
        warm_up(launches, entries, device)
        for entry in entries:
            if entry["status"] != "skipped":
                expected = raw_want if entry["what"] == "raw" else want
                profile_one(launches[entry["what"]], entry, out, expected, err)
        return prepared.summary(), entries
    finally:
        fetch.sync(device)
        del on_gpu
        pinned.close()
        prepared.table.close()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def profile_cases(bench: fetch.Bench, args: argparse.Namespace, manifest: dict) -> dict:
    """Profile every case in order, rewriting the manifest after each; the manifest."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for case in build_cases(args.cases, args.block_rows, args.seed):
            fetch.log(f"{case.name} at {time.perf_counter() - start:.0f} s ...")
            summary, entries = profile_case(bench, case, Path(tmp), args)
            manifest["cases"].append(summary)
            manifest["launches"] += entries
            write_manifest(manifest, args.manifest)
            for e in entries:
                same = e["bit_identical"]
                checked = "" if same is None else f", bit-identical {same}, errors {e['errors']}"
                fetch.log(f"  {e['what']:9s} {e['kernel']:28s} {e['status']}{checked}")
    manifest["complete"] = True
    manifest["elapsed_s"] = time.perf_counter() - start
    write_manifest(manifest, args.manifest)
    return manifest


def run_gpu(args: argparse.Namespace) -> dict:
    """Profile every case's launches on the GPU (see the module docstring); the manifest."""
    from ibp_graph.kernels.runtime import cupy

    cp = cupy()
    device = torch.device("cuda", torch.cuda.current_device())
    manifest = new_manifest(args, torch.cuda.get_device_name(device))
    manifest.update(cuda=torch.version.cuda, cupy=cp.__version__)
    cases = build_cases(args.cases, 1, args.seed)  # only their row widths, for the staging
    bench = fetch.Bench(bench_args(args, cases), device, cp.cuda)
    try:
        return profile_cases(bench, args, manifest)
    finally:
        bench.close()


# --------------------------------------------------------------------------------------------
# Summary of ncu's CSV
# --------------------------------------------------------------------------------------------

TIME_TO_US = {
    "ns": 1e-3,
    "nsecond": 1e-3,
    "us": 1.0,
    "usecond": 1.0,
    "ms": 1e3,
    "msecond": 1e3,
    "s": 1e6,
    "second": 1e6,
}
PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
STALL_METRIC = re.compile(r"^smsp__warp_issue_stalled_(\w+?)_per_warp_active\.pct$")


@dataclasses.dataclass
class Result:
    """One profiled kernel of ncu's CSV: its id, kernel name and metrics."""

    id: int
    kernel: str
    #: (section key, metric name) -> (value text, unit), first occurrence.
    metrics: dict[tuple[str, str], tuple[str, str]]


def section_key(name: str) -> str:
    """A section's display name or identifier, lower case, letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def read_ncu_csv(path: Path) -> list[Result]:
    """ncu's ``--csv --page details`` rows, grouped by result ID, in ID order.

    Lines before the header (``"ID",...``: the tool's own messages) are skipped.
    """
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    results: dict[int, Result] = {}
    for row in csv.DictReader(lines[start:]):
        try:
            rid = int(str(row.get("ID", "")).replace(",", ""))
        except ValueError:
            continue  # a stray line that is not a result row
        name = row.get("Metric Name") or ""
        res = results.setdefault(rid, Result(rid, row.get("Kernel Name") or "", {}))
        if name:
            key = (section_key(row.get("Section Name") or ""), name)
            res.metrics.setdefault(
                key, (row.get("Metric Value") or "", row.get("Metric Unit") or "")
            )
    return [results[k] for k in sorted(results)]


def number(text: str) -> float | None:
    """A metric value ("1,234.5" -> 1234.5); None when it is not a number (n/a, empty)."""
    try:
        value = float(text.replace(",", "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def metric(res: Result, name: str, section: str = "") -> tuple[float, str] | None:
    """``(value, unit)`` of metric ``name`` (in a section whose key contains ``section``)."""
    for (sec, metric_name), (text, unit) in res.metrics.items():
        if metric_name == name and section in sec:
            value = number(text)
            if value is not None:
                return value, unit
    return None


def duration_us(res: Result) -> float | None:
    """The kernel's duration in microseconds (Speed Of Light "Duration", any time unit)."""
    for name in ("Duration", "gpu__time_duration.sum"):
        found = metric(res, name)
        if found and found[1].strip() in TIME_TO_US:
            return found[0] * TIME_TO_US[found[1].strip()]
    return None


def rate_gbps(value_unit: tuple[float, str] | None) -> float | None:
    """A byte rate ("byte/second", "Gbyte/s", ...) in GB/s; None when missing or not a rate."""
    if value_unit is None:
        return None
    value, unit = value_unit
    m = re.fullmatch(r"([KMGTP]?)(?:byte|B)/(?:second|s)", unit.strip())
    return value * PREFIX[m.group(1)] / 1e9 if m else None


def percent(res: Result, name: str, section: str = "") -> float | None:
    """A metric in percent (None when missing or in another unit)."""
    found = metric(res, name, section)
    return found[0] if found and found[1].strip() in ("%", "pct", "percent") else None


def top_stalls(res: Result, k: int = 3) -> list[tuple[str, float, str]]:
    """The ``k`` stall reasons with the largest share of active warp cycles, largest first.

    From ``smsp__warp_issue_stalled_<reason>_per_warp_active.pct`` (``selected``, a warp being
    issued, is no stall), else from the Warp State section's "Stall <Reason>" rows (in their
    own unit). Returns ``(reason, value, unit)``.
    """
    found = []
    for (_, name), (text, _unit) in res.metrics.items():
        m = STALL_METRIC.match(name)
        value = number(text)
        if m and m.group(1) != "selected" and value is not None:
            found.append((m.group(1), value, "%"))
    if not found:
        for (sec, name), (text, unit) in res.metrics.items():
            value = number(text)
            if "warpstate" in sec and name.startswith("Stall ") and value is not None:
                if name != "Stall Selected":
                    found.append((name[len("Stall ") :], value, unit))
    return sorted(found, key=lambda x: -x[1])[:k]


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def base_name(kernel: str) -> str:
    """A kernel name without its parameter list."""
    return kernel.split("(", 1)[0].strip()


def summary_row(res: Result | None, launch: dict | None) -> dict:
    """The summary of one profiled launch (None where ncu or the manifest has no entry)."""
    rows = launch["rows"] if launch else None
    us = duration_us(res) if res else None
    seconds = us * 1e-6 if us else None
    delivered = rows * launch["row_bytes"] / seconds / 1e9 if launch and seconds else None
    stored = launch["stored_bytes"] / seconds / 1e9 if launch and seconds else None
    get = partial(percent, res) if res else (lambda *a: None)
    pcie_pct = get("pcie__read_bytes.avg.pct_of_peak_sustained_elapsed")
    units = {
        "memory": get("Memory Throughput", "speedoflight"),
        "compute": get("Compute (SM) Throughput", "speedoflight"),
        "PCIe": pcie_pct,
    }
    known = {k: v for k, v in units.items() if v is not None}
    busiest = max(known, key=known.get) if known else None

    def per_row(*names: tuple[str, str]) -> float | None:
        """The first of the (metric, section) ``names`` in the result, per row."""
        found = next((m for n in names if res and (m := metric(res, *n))), None)
        return found[0] / rows if found and rows else None

    regs = metric(res, "Registers Per Thread", "launch") if res else None
    return {
        "id": res.id if res else None,
        "kernel": base_name(res.kernel) if res else None,
        "launch": launch,
        "duration_us": us,
        "delivered_gbps": delivered,
        "stored_gbps": stored,
        "memory_pct": units["memory"],
        "dram_pct": get("DRAM Throughput", "speedoflight"),
        "l2_hit_pct": get("L2 Hit Rate", "memoryworkload"),
        "l1_hit_pct": get("L1/TEX Hit Rate", "memoryworkload"),
        "compute_pct": units["compute"],
        "pcie_gbps": rate_gbps(metric(res, "pcie__read_bytes.sum.per_second")) if res else None,
        "pcie_pct": pcie_pct,
        "busiest": f"{busiest} {known[busiest]:.0f}%" if busiest else None,
        "occupancy_pct": get("Achieved Occupancy", "occupancy"),
        "registers": regs[0] if regs else None,
        "stalls": top_stalls(res) if res else [],
        "inst_per_row": per_row(
            ("Executed Instructions", "instruction"), ("smsp__inst_executed.sum", "")
        ),
        "ld_requests_per_row": per_row(("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "")),
        "ld_sectors_per_row": per_row(("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "")),
    }


def match(results: list[Result], launches: list[dict]) -> tuple[list[dict], list[str]]:
    """Pair ncu's results with the manifest's launches in order; rows and notes on mismatches."""
    profiled = [x for x in launches if x.get("status") != "skipped"]
    notes = []
    if len(results) != len(profiled):
        notes.append(
            f"ncu has {len(results)} results and the manifest {len(profiled)} profiled "
            "launches: paired in order as far as both go"
        )
    rows = []
    for i in range(max(len(results), len(profiled))):
        res = results[i] if i < len(results) else None
        launch = profiled[i] if i < len(profiled) else None
        row = summary_row(res, launch)
        if res and launch and row["kernel"] != launch["kernel"]:
            notes.append(
                f"result {res.id}: ncu profiled {row['kernel']}, the manifest launched "
                f"{launch['kernel']} ({launch['case']} {launch['what']})"
            )
        rows.append(row)
    skipped = [x for x in launches if x.get("status") == "skipped"]
    notes += [f"skipped: {x['case']} {x['what']} ({x.get('note', '')})" for x in skipped]
    return rows, notes


SUMMARY_COLUMNS = (
    "# | case | what | kernel | rows | row B | duration µs | delivered GB/s | stored GB/s "
    "| memory % | DRAM % | compute % | PCIe read GB/s | PCIe read % | busiest | L1 hit % "
    "| L2 hit % | achieved occupancy % | registers | top stalls (% of active warp cycles) "
    "| warp inst / row | global loads / row | load sectors / row | bit-identical"
)


def _stalls(stalls: list[tuple[str, float, str]]) -> str:
    if not stalls:
        return "n/a"
    return ", ".join(f"{r} {v:.1f}{'%' if u == '%' else ' ' + u}" for r, v, u in stalls)


def summary_markdown(rows: list[dict], notes: list[str], csv_path: Path, manifest: dict) -> str:
    """The markdown page of `summarise`."""
    device = manifest.get("gpu_device") or "unknown device"
    lines = [
        "# Nsight Compute: the fetch kernels",
        "",
        f"- device: {device}; commit {manifest.get('git_commit', '?')}; "
        f"date {manifest.get('date', '?')}",
        f"- command: `{manifest.get('command', '?')}`, under ncu (`benchmarks/gpu_session.sh`, "
        "stage `profile`, has the ncu command line)",
        f"- from `{csv_path.name}` and the manifest: {len(rows)} launches, one each after a "
        "warm-up, inside cudaProfilerStart/Stop windows (ncu --profile-from-start off, "
        "--clock-control none)",
        "- duration: ncu's (kernel replay, caches flushed before each pass); delivered GB/s = "
        "rows x row bytes / duration, stored GB/s = the batch's stored bytes / duration; "
        "memory, DRAM and compute %: Speed Of Light, of peak; busiest: the highest of memory, "
        "compute and PCIe read %; stalls: share of active warp cycles (selected excluded); "
        "global loads and load sectors: warp-level global load requests at L1 and their "
        "32-byte sectors, per row (the row's staging included; decode-loads-cpu.md counts the "
        "metadata's alone); n/a: not in the CSV",
        "",
        "| " + SUMMARY_COLUMNS + " |",
        "|" + "---|" * (SUMMARY_COLUMNS.count("|") + 1),
    ]
    for i, r in enumerate(rows):
        launch = r["launch"] or {}
        kernel = r["kernel"] or launch.get("kernel", "n/a")
        same = launch.get("bit_identical")
        lines.append(
            f"| {i} | {launch.get('case', '?')} | {launch.get('what', '?')} | {kernel} "
            f"| {_fmt(launch.get('rows'), 0)} | {_fmt(launch.get('row_bytes'), 0)} "
            f"| {_fmt(r['duration_us'])} | {_fmt(r['delivered_gbps'])} "
            f"| {_fmt(r['stored_gbps'])} | {_fmt(r['memory_pct'])} | {_fmt(r['dram_pct'])} "
            f"| {_fmt(r['compute_pct'])} | {_fmt(r['pcie_gbps'])} | {_fmt(r['pcie_pct'])} "
            f"| {r['busiest'] or 'n/a'} | {_fmt(r['l1_hit_pct'])} | {_fmt(r['l2_hit_pct'])} "
            f"| {_fmt(r['occupancy_pct'])} | {_fmt(r['registers'], 0)} | {_stalls(r['stalls'])} "
            f"| {_fmt(r['inst_per_row'])} | {_fmt(r['ld_requests_per_row'])} "
            f"| {_fmt(r['ld_sectors_per_row'])} | {'n/a' if same is None else same} |"
        )
    if notes:
        lines += ["", "Notes:", "", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


#: Source lines listed per launch in the source-page summary.
SOURCE_TOP = 12
#: The source page's metrics, as ncu names its columns: instructions, and stall samples.
SOURCE_INSTRUCTIONS = "Instructions Executed"
SOURCE_SAMPLES = "Warp Stall Sampling (All Samples)"
#: The source page's file, beside the details CSV (benchmarks/gpu_session.sh writes it).
SOURCE_CSV = "ncu-source.csv"


@dataclasses.dataclass
class SourceTable:
    """One kernel's table of ncu's source page: per source line, its metrics."""

    kernel: str
    #: (line number or None, source text, instructions executed, stall samples)
    lines: list[tuple[int | None, str, float, float]]


def read_source_csv(path: Path) -> list[SourceTable]:
    """ncu's ``--page source --csv --print-source cuda`` output: one table per result, in order.

    A table starts at a ``"Kernel Name",NAME`` row; its header is the next row with a
    ``Source`` column and the `SOURCE_INSTRUCTIONS` column; its line numbers are the ``#``
    (or ``Line``) column's, where it has one. Anything else (the tool's messages) is skipped.
    """
    tables: list[SourceTable] = []
    header: list[str] | None = None
    with path.open(newline="", errors="replace") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0].strip() == "Kernel Name":
                tables.append(SourceTable(row[1].strip() if len(row) > 1 else "", []))
                header = None
                continue
            if "Source" in row and SOURCE_INSTRUCTIONS in row:
                header = row
                continue
            if header is None or not tables or len(row) != len(header):
                continue
            cells = dict(zip(header, row, strict=True))
            where = next((cells[k] for k in ("#", "Line", "Line #") if k in cells), "")
            line = number(where)
            tables[-1].lines.append(
                (
                    int(line) if line is not None else None,
                    cells["Source"],
                    number(cells[SOURCE_INSTRUCTIONS]) or 0.0,
                    number(cells.get(SOURCE_SAMPLES, "")) or 0.0,
                )
            )
    return tables


def source_markdown(tables: list[SourceTable], launches: list[dict], path: Path) -> list[str]:
    """Per profiled ``decode`` launch (rows in GPU memory: decoding alone), the source lines
    that executed the most instructions: their share of the launch's instructions and of its
    stall samples, and their text (the ``.cu`` file's line where the page has none)."""
    profiled = [x for x in launches if x.get("status") != "skipped"]
    lines = [
        "",
        f"## Where the decoder's instructions go (`{path.name}`)",
        "",
        "Per `decode` launch (decoding alone), the source lines that executed the most warp "
        f"instructions (top {SOURCE_TOP}): their share of the launch's instructions executed "
        "and of its warp stall samples (ncu's source counters; line numbers of the kernel's "
        "`.cu` file, whose text is shown where the page has none, from this checkout). A page "
        "of machine instructions instead (no line numbers: the kernels were built without line "
        "information) lists the instructions that executed the most, line `?`.",
    ]
    if not tables:
        return [*lines, "", f"- {path.name} holds no per-line table (see profile.log)."]
    shown = 0
    for i, launch in enumerate(profiled[: len(tables)]):
        table = tables[i]
        if launch.get("what") != "decode" or not table.lines:
            continue
        total = sum(x[2] for x in table.lines) or 1.0
        samples = sum(x[3] for x in table.lines) or 1.0
        source = _source_lines(launch.get("kernel", ""))
        lines += [
            "",
            f"### {launch.get('case', '?')}: {base_name(table.kernel) or launch.get('kernel')}"
            + (
                f" (the manifest launched {launch.get('kernel')})"
                if base_name(table.kernel) not in ("", launch.get("kernel"))
                else ""
            ),
            "",
            f"{total:,.0f} warp instructions executed in all"
            + (f", {total / launch['rows']:,.1f} a row." if launch.get("rows") else "."),
            "",
            "| line | instructions % | stall samples % | source |",
            "|---|---|---|---|",
        ]
        for line, text, inst, stall in sorted(table.lines, key=lambda x: -x[2])[:SOURCE_TOP]:
            if not text.strip() and line is not None and 0 < line <= len(source):
                text = source[line - 1]
            text = " ".join(text.split()).replace("|", "\\|")
            lines.append(
                f"| {'?' if line is None else line} | {100 * inst / total:.1f} "
                f"| {100 * stall / samples:.1f} | `{text}` |"
            )
        shown += 1
    if not shown:
        lines += ["", f"- {path.name}: no `decode` launch among its {len(tables)} tables."]
    return lines


def _source_lines(kernel: str) -> list[str]:
    """The lines of the ``.cu`` file that defines ``kernel`` (none when not found)."""
    from ibp_graph.kernels.runtime import cuda_dir

    name = "raw_gather.cu" if kernel.startswith("ibp_raw_gather") else "fetch_decode.cu"
    path = cuda_dir() / name
    return path.read_text().splitlines() if path.is_file() else []


def summarise(csv_path: Path, manifest_path: Path, out: Path) -> list[dict]:
    """Write the markdown summary of ncu's CSV and the manifest to ``out``; its rows.

    With ``ncu-source.csv`` beside ``csv_path`` (the report's source page), the summary ends
    with where the decoder's instructions go (`source_markdown`).
    """
    manifest = json.loads(manifest_path.read_text())
    results = read_ncu_csv(csv_path)
    rows, notes = match(results, manifest.get("launches", []))
    if results and not any(r.metrics for r in results):
        notes.append(
            f"{csv_path.name} holds kernels but no metric rows: it must be ncu's "
            "`--csv --page details` (one row per metric), not `--page raw`"
        )
    if manifest.get("dry_run"):
        notes.append("the manifest is a dry run's plan: no output was checked bit for bit")
    elif not manifest.get("complete", False):
        notes.append("the profiled run did not finish: the manifest holds the cases it reached")
    text = summary_markdown(rows, notes, csv_path, manifest)
    source_csv = csv_path.parent / SOURCE_CSV
    if source_csv.is_file():
        launches = manifest.get("launches", [])
        text += "\n".join(source_markdown(read_source_csv(source_csv), launches, source_csv))
        text += "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text, end="")
    return rows


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------


def _case_list(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n")[0])
    p.add_argument(
        "--cases",
        type=_case_list,
        default=list(CASES),
        help=f"comma-separated, some of {', '.join(CASES)} (default: all)",
    )
    p.add_argument("--table-gb", type=float, default=1.0, help="GiB of raw rows per table")
    p.add_argument("--batch", type=int, default=100_000, help="ids in the batch")
    p.add_argument("--block-rows", type=int, default=fetch.BLOCK_ROWS, help="distinct rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-blocks", type=blocks_per_sm, default=None, help="fetch grid cap in blocks per SM"
    )
    p.add_argument("--pages", choices=PAGE_KINDS, default="huge")
    p.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="the launches, JSON")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU: build the cases and write the manifest of the planned launches",
    )
    p.add_argument(
        "--summarise",
        nargs=2,
        type=Path,
        metavar=("CSV", "MANIFEST"),
        help="summarise ncu's --csv --page details output against a manifest (markdown)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="--summarise: the markdown page (default: profile.md beside the CSV)",
    )
    args = p.parse_args(argv)
    bad = [c for c in args.cases if c not in CASES]
    if bad or not args.cases:
        what = f"unknown case {bad[0]!r}" if bad else "no case given"
        p.exit(2, f"{PROG}: error: --cases: {what}; expected some of {', '.join(CASES)}\n")
    if args.table_gb <= 0:
        p.exit(2, f"{PROG}: error: --table-gb must be positive, got {args.table_gb}\n")
    for name in ("batch", "block_rows"):
        value = getattr(args, name)
        if value < 1:
            flag = "--" + name.replace("_", "-")
            p.exit(2, f"{PROG}: error: {flag} must be >= 1, got {value}\n")
    args.table_bytes = int(args.table_gb * fetch.GIB)
    if args.summarise and args.out is None:
        args.out = args.summarise[0].parent / "profile.md"
    return args


def main(argv: Sequence[str] | None = None) -> Any:
    args = parse_args(argv)
    if args.summarise:
        return summarise(args.summarise[0], args.summarise[1], args.out)
    if args.dry_run:
        return dry_run(args)
    if not torch.cuda.is_available():
        raise SystemExit(
            f"{PROG} needs a CUDA GPU (torch.cuda.is_available() is False); --dry-run plans "
            "the launches on the CPU"
        )
    return run_gpu(args)


if __name__ == "__main__":
    main()
