"""GPU fetch throughput: pinned memcpy, torch gather, raw zero-copy gather, IBP fetch, decode.

Usage (on a machine with a CUDA GPU and CuPy; the datasets folder is optional)::

    python benchmarks/fetch.py [--table-gb 4] [--batch 100000,1000000] [--repeats 10]
    .venv/bin/python benchmarks/fetch.py --dry-run     # no GPU: build and check every case

Cases: synthetic rows of 256 B, 512 B, 1 KiB and 4 KiB (``--widths``) of four kinds
(``--kinds``: dense normal float32, about 1.17x; float32 holding bfloat16 values, about
2.7x; sparse float32 with 5% non-zeros, about 15x; random bits, 1.0x: a table that does not
compress), then every real float32 / float16 table of `benchmarks.real_tables` with rows of
at least 64 bytes, at its own width and ratio, when the datasets folder is there
(``IBP_GRAPH_DATASETS``; SciPy reads the Planetoid pickles and builds the SVD tables).

Each case compresses a block of distinct rows once on the CPU (``--block-rows`` synthetic
rows, or the whole real table: at most about 0.4 GB, seconds) and tiles the compressed rows
``times`` over in pinned host memory (`table_tiles`), so the table stands for ``--table-gb``
GiB of raw rows, or more where the stored rows would be under 4x the L2 (a sparse table's:
it compresses 15-390x), so that no table is read from L2; its rows: ``times x`` the block's
(``rows``, ``table_gb``, ``stored_gb`` in the JSON), without compressing GBs; random ids then
touch all of it. The raw baselines read one pinned raw buffer of ``--table-gb`` GiB
(``raw_rows`` rows), viewed as rows of each width (the gather's speed does not depend on the
values); where the table has more rows, their ids are the table's folded onto it (``id %
raw_rows``). Per case and per batch size (``--batch``, capped at ``--max-batch-gb`` of rows),
with random ids (uniform over the table's rows, duplicates allowed, as a GNN batch's input
nodes; see "Id batches" below), it measures the delivered (decoded) GB/s = batch rows x row
bytes / time of:

- ``memcpy``: one pinned host -> device copy (``copy_(non_blocking=True)`` from a torch
  pinned tensor, cudaMemcpyAsync) of the same number of bytes: the PCIe rate;
- ``torch``: ``index_select`` on the pinned CPU table then ``.to(cuda, non_blocking=True)``
  (wall clock, synchronised; ``--torch-repeats`` runs: it is the slow one);
- ``raw``: our raw zero-copy gather from pinned memory (IBP off);
- ``ibp``: our fetch from the pinned compressed rows, launched as `CudaIBPTable` launches it
  (the fused fetch + decode kernel, or the raw gather when the table is stored raw);
- ``decode_only``: the same launch with the compressed rows in GPU memory (no PCIe), on the
  fetch grid cap like every launch: how fast the decoder runs at the fetch's grid;
- ``decode_capacity``: that launch again on the largest grid the device holds at once for the
  kernel (occupancy x SMs, as `ibp_graph.kernels.runtime.grid_size` counts it with
  ``per_sm=None``; never more blocks than the batch needs): what the decoder does with the
  GPU to itself. Measured after decode-only (and its db form) on the same id batches, its
  output checked as decode-only's (in ``bit_identical``); its grid is
  ``decode_capacity_blocks``, the fetch grid's ``decode_only_blocks``. Not measured (null,
  n/a, with a ``decode_capacity_note``) where the fetch grid already is that grid (a run at
  the library's default grid cap on the current stream: every block the SMs hold), for a
  table stored raw (the raw gather: no decoder), or with ``--no-decode-capacity``. One
  buffer only (``--double-buffer`` adds no capacity form). A dry run's plan says, per case,
  whether a GPU run may time it (``decode_capacity``, `capacity_planned`: on, not stored raw,
  and a ``--max-blocks`` cap; whether that cap is below the full grid is known on the GPU
  only).

``--sort-ids`` adds, in the same run, the sorted-order fetch that the tables' ``sort_ids``
option does, each measured right after its unsorted counterpart on the same id batches: ``raw
sorted`` and ``ibp sorted`` (one ``torch.sort`` of the ids on the device, then the launch on
the sorted ids with the permutation as output positions, so pinned rows are read in address
order and written back in the batch's order; the sort's time is included), and ``sort`` (the
``torch.sort`` alone, in ms). Their outputs are checked against the unsorted ones (in
``bit_identical`` / ``raw_gather_correct``); the markdown shows each sorted rate with its
ratio to the unsorted one. A dry run with ``--sort-ids`` also decodes the tiled rows in
sorted order and writes them back by the permutation.

``--double-buffer`` adds, in the same run, the double-buffered fused kernel (the tables'
``double_buffer`` option: each warp stages its next row with ``cp.async`` while it decodes
the current one), each measured right after its one-buffer counterpart on the same id
batches: ``ibp db`` (from the pinned rows) and ``decode_only db`` (from the GPU-memory
copy). Their outputs are checked bit for bit against the original rows (in
``bit_identical``); the markdown shows each with its ratio to the one-buffer rate. A table
stored raw is fetched by the raw gather, which has one form only: its db columns time that
same gather again and are reported as such (a ratio near 1.00x). Rows too wide for two
staging buffers per warp get no db rates (null in the JSON, n/a in the markdown) and a
``double_buffer_note`` saying why; the run goes on. A dry run records the flag in its plan
(the CPU decoder has one path).

Pinned memory is allocated as ``--pages`` says (`ibp_graph.pinned.PAGE_KINDS`): "huge"
(the library's default) or "small" 4 KiB pages, whose GPU TLB misses on random rows over
GiBs this measures, or "cuda" (cudaHostAlloc); a run with other than "huge" writes
``fetch-<device>-<pages>-pages``. ``--raw-kernel lines`` makes the ``raw`` column use the
whole-16-byte-load gather for rows that are not a multiple of 16 bytes (where the library
takes the widest vectors): two runs of such widths, with and without it, compare the two
kernels (``fetch-<device>-lines-raw``; ``--tag`` names a run apart).

GPU timings are CUDA events around ``inner`` back-to-back launches (enough for 20 ms), the
median of ``--repeats`` samples, after an untimed warm-up call (which compiles the kernel).
A short GPU sleep queued before the start event keeps the stream busy while the host queues
the launches, so the events time the GPU work, not the host's launch overhead (the loaders
launch asynchronously too).

Id batches: a loader never fetches the same batch twice in a row, and the GPU's L2
(``l2_bytes`` in the JSON) may keep the rows one launch read for the next, so that a batch
whose stored rows fit in L2 would be timed at L2's rate, not at PCIe's or HBM's. So per case
and batch size, one seeded generator draws a pool of ``id_batches`` random batches
(`draw_pool`; the first is the batch a one-batch run drew, which the torch baseline gathers)
until their stored rows reach 4x L2, in at most 16 batches, or more while their stored rows
are under 2x L2, within 256 MiB of ids (`id_batches`); every timed launch (warm-up included)
of raw, ibp, decode-only, their sorted and db forms, decode capacity and the sort takes the
next batch in turn (`rotating`); ``batch_ratio`` and ``ibp_pcie_gbps`` count the pool's
stored bytes; the raw gather takes the same batches, folded onto its raw buffer where the
table has more rows. memcpy copies the same number of bytes. (A whole stored table is never
under 4x L2: see above.) A case whose pool's stored rows (``pool_stored_bytes``) stay under
2x L2 all the same (the 256 MiB of ids reached first) is marked "(id batches fit in L2)"
(``pool_fits_l2``). After timing, each path runs once more on every batch of the pool, the
first last, and its output is checked: every IBP row bit for bit, the raw gather's first
4096 rows of each batch.

Targets, evaluated per case (``targets`` in the JSON), each built by `benchmarks._targets.check`
as every benchmark's are: ``value`` is the ratio or rate, ``goal`` the goal that applied,
``comparison`` ">=" or "<="; ``met`` is True or False, or None, "not measured", when a rate
is missing or not finite (such a case counts neither as met nor as missed) or no goal applies;
``gap`` is how far a missed value lies from the goal, as a fraction of the goal (0.0 when met,
None when not measured; the JSON writes NaN and infinities as null); ``applies`` says whether
the target holds for the case (its value is shown in parentheses where it does not):

- ``raw_vs_memcpy``: raw >= 0.85 x memcpy for 512 B rows, >= 0.7 x memcpy for rows that are
  not a multiple of 16 bytes (only 4-byte aligned, as Cora's 5,732 B); other widths: the
  ratio, no verdict;
- ``raw_default_vs_memcpy`` (with ``--sort-ids``): the same goals for ``raw sorted``, the
  raw gather as raw tables run it by default (`ibp_graph.cuda_table.default_sort_ids`: ids
  sorted on the GPU first, the sort's time included); ``raw_vs_memcpy`` judges the kernel
  alone on ids in batch order;
- ``ibp_vs_ideal``: ibp >= 0.9 x min(ratio x raw, decode-only), with decode-only at the
  fetch grid cap: the grid of the fetch it bounds (not decode capacity);
- ``decode_vs_pcie``: the decoder alone (rows in GPU memory) >= 400 GB/s on a dense table,
  >= 1000 GB/s on a sparse (bag-of-words) one: ``table_class``, sparse when at least 50% of
  the elements of the case's distinct rows are zero (``zero_fraction``). Judged on decode
  capacity where it was measured, else on decode-only (``rate`` says which), on stored rows
  tiled past 4x the L2 (as ``benchmarks/decode_ab.py`` tiles them), so not at L2's rate;
- ``no_compress_slowdown``: a table that does not compress (stored raw): raw / ibp, the IBP
  fetch's time over the raw gather's, <= 1.02 (within 2% of the raw gather). A measured ibp
  rate of 0 (raw finite) is a miss with value and gap infinite; a missing or non-finite rate
  is "not measured".

Writes ``benchmarks/results/fetch-<device>.json`` and ``.md`` (``--out``), rewritten after
every case, so a run cut short keeps the cases it finished; ``--time-budget`` seconds after
the start no new case begins.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ibp_graph  # noqa: E402
from benchmarks import real_tables  # noqa: E402
from benchmarks._env import (  # noqa: E402
    add_out,
    block_label,
    block_warps_arg,
    blocks_per_sm,
    environment,
    finite,
    grid_cap,
    header_lines,
    slug,
    write_json_md,
)
from benchmarks._targets import check, measured, verdict  # noqa: E402
from ibp_graph.codec import decode  # noqa: E402
from ibp_graph.dtypes import row_bytes as dtype_row_bytes  # noqa: E402
from ibp_graph.dtypes import rows_to_words  # noqa: E402
from ibp_graph.pinned import PAGE_KINDS, transparent_huge_pages  # noqa: E402

WIDTHS = (256, 512, 1024, 4096)
KINDS = ("dense-normal", "bf16-in-fp32", "sparse-5pct", "random-bits")
BLOCK_ROWS = 1 << 15
GIB = 1 << 30
#: Real tables narrower than this are not fetch workloads (tolokers: 40 B, minesweeper: 28 B).
MIN_REAL_ROW_BYTES = 64
#: A GPU timing sample lasts at least this long (several launches when one is shorter).
MIN_SAMPLE_S = 0.02
MAX_INNER = 50
# The goals.
RAW_GOAL = 0.85  # raw gather / memcpy, at RAW_GOAL_ROW_BYTES
RAW_GOAL_ROW_BYTES = 512
RAW_UNALIGNED_GOAL = 0.7  # raw gather / memcpy, rows not a multiple of RAW_LINE_BYTES
RAW_LINE_BYTES = 16  # rows of a multiple of this many bytes are not "only 4-byte aligned"
IBP_GOAL = 0.9  # ibp / min(ratio x raw, decode-only)
DECODE_DENSE_GOAL = 400.0  # decoder alone GB/s (decode capacity, else decode-only), dense
DECODE_SPARSE_GOAL = 1000.0  # the same, sparse (bag-of-words) tables
SPARSE_ZEROS = 0.5  # a table whose rows hold at least this fraction of zeros is sparse
NO_COMPRESS_SLOWDOWN = 1.02  # raw / ibp (ibp time / raw time) at most, a table stored raw
#: Why a case has no decode capacity (``decode_capacity_note``).
CAPACITY_OFF = "turned off: --no-decode-capacity"
CAPACITY_RAW = "table stored raw (the raw gather: no decoder)"
CAPACITY_FULL = "the fetch grid is already the full grid"
# Id batches (see the module docstring).
L2_POOL_FACTOR = 4  # a pool's stored rows reach this many L2s ...
MAX_ID_BATCHES = 16  # ... in at most this many batches (more while under L2_FIT_FACTOR) ...
MAX_POOL_ID_BYTES = 256 << 20  # ... and this many bytes of int64 ids
L2_FIT_FACTOR = 2  # stored bytes under this many L2s may stay in L2 (a table, a pool)
#: The L2 size assumed off CUDA (the tests' stand-in): small, so that pools hold several batches.
CPU_L2_BYTES = 256 << 10
RAW_CHECK_ROWS = 4096  # rows of each raw batch checked (on the CPU)


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """One table: its distinct rows (tiled to the table's size) and where they come from."""

    name: str
    source: str  # "synthetic" or "real"
    rows: np.ndarray
    note: str

    @property
    def dtype_name(self) -> str:
        return self.rows.dtype.name

    @property
    def row_bytes(self) -> int:
        return dtype_row_bytes(self.rows.shape[1], self.dtype_name)


def synthetic_block(kind: str, row_bytes: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` float32 rows of ``row_bytes`` bytes of one kind (see the module docstring)."""
    if row_bytes % 4:
        raise ValueError(
            f"synthetic rows are float32: row_bytes must be a multiple of 4, got {row_bytes}"
        )
    d = row_bytes // 4
    if kind == "dense-normal":
        return rng.standard_normal((rows, d), dtype=np.float32)
    if kind == "bf16-in-fp32":
        x = rng.standard_normal((rows, d), dtype=np.float32)
        return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    if kind == "sparse-5pct":
        x = rng.standard_normal((rows, d), dtype=np.float32)
        return np.where(rng.random((rows, d)) < 0.05, x, np.float32(0))
    if kind == "random-bits":
        return rng.integers(0, 2**32, (rows, d), dtype=np.uint32).view(np.float32)
    raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")


def synthetic_cases(
    widths: Sequence[int], kinds: Sequence[str], rows: int, seed: int = 0
) -> list[Case]:
    """The synthetic cases, width by width, in the order of ``kinds``."""
    rng = np.random.default_rng(seed)
    return [
        Case(
            f"{kind}-{w}B",
            "synthetic",
            synthetic_block(kind, w, rows, rng),
            f"synthetic {kind}, {rows:,} distinct rows of {w} B",
        )
        for w in widths
        for kind in kinds
    ]


def real_cases(min_row_bytes: int = MIN_REAL_ROW_BYTES) -> tuple[list[Case], str]:
    """The real float32 / float16 tables with rows of at least ``min_row_bytes``; and a note."""
    if not real_tables.available():
        return [], f"skipped: no datasets folder at {real_tables.SHARED_DATASETS}"
    try:
        tables = real_tables.load_all()
    except ImportError as exc:
        return [], f"skipped: {exc} (SciPy reads the Planetoid files and builds the SVD tables)"
    cases = []
    for name, array, note in tables:
        if array.dtype not in (np.float32, np.float16):
            continue
        case = Case(name, "real", np.array(array, order="C"), note)  # writable: torch views it
        if case.row_bytes >= min_row_bytes:
            cases.append(case)
    return cases, f"{len(cases)} tables from {real_tables.SHARED_DATASETS}"


# --------------------------------------------------------------------------------------------
# Geometry of the tiled tables
# --------------------------------------------------------------------------------------------


def tiles(table_bytes: int, block_rows: int, row_bytes: int) -> int:
    """Copies of a block of ``block_rows`` rows that make at most ``table_bytes`` of raw rows.

    At least one.
    """
    return max(1, table_bytes // (block_rows * row_bytes))


def table_tiles(
    table_bytes: int, block_rows: int, row_bytes: int, stored_bytes: int, l2: int
) -> int:
    """Copies of a block that make a case's table: `tiles` of ``table_bytes`` of raw rows, or
    more where their stored rows (``stored_bytes`` a copy) would be under `L2_POOL_FACTOR` x
    ``l2`` (a sparse table's), so that no table is read from an L2 of ``l2`` bytes.

    At least one.
    """
    past_l2 = -(-L2_POOL_FACTOR * l2 // max(1, stored_bytes))
    return max(tiles(table_bytes, block_rows, row_bytes), past_l2)


def raw_buffer_rows(table_bytes: int, row_bytes: int) -> int:
    """Rows of ``row_bytes`` in the raw baselines' buffer of ``table_bytes`` (`Bench.raw_rows`)."""
    return table_bytes // row_bytes


def fold_ids(ids: torch.Tensor, num_rows: int, raw_rows: int) -> torch.Tensor:
    """The raw baselines' batch for ``ids`` of a table of ``num_rows`` rows: ``ids`` folded
    onto a raw buffer of ``raw_rows`` rows where the table has more (``id % raw_rows``),
    else ``ids`` itself."""
    return ids % raw_rows if num_rows > raw_rows else ids


def batch_rows(batch: int, row_bytes: int, max_batch_bytes: int, num_rows: int) -> int:
    """The rows of a batch: ``batch``, capped at ``max_batch_bytes`` of rows and the table."""
    return max(1, min(batch, max_batch_bytes // row_bytes, num_rows))


def batch_sizes(batches: Sequence[int], row_bytes: int, max_batch_bytes: int, num_rows: int):
    """The distinct `batch_rows` of ``batches``, in order: ``[(rows, asked), ...]``."""
    out: dict[int, int] = {}
    for b in batches:
        out.setdefault(batch_rows(b, row_bytes, max_batch_bytes, num_rows), b)
    return list(out.items())


def tiled_codec(table: ibp_graph.IBPTable, times: int, rows_ptr: int, device: torch.device) -> Any:
    """The `DeviceCodec` of ``times`` copies of ``table``'s rows at ``rows_ptr`` (one cluster).

    Its tensors live on ``device``; `tiled_offsets` gives the tiled table's offsets.
    """
    from ibp_graph.cuda_table import as_signed_tensor
    from ibp_graph.kernels.fetch_decode import DeviceCodec

    params = table.params
    return DeviceCodec(
        rows_ptr=rows_ptr,
        offsets=as_signed_tensor(tiled_offsets(table.offsets, times), device),
        cluster_ids=None,  # compress() makes one cluster by default
        masks=as_signed_tensor(params.masks, device),
        code_bits=as_signed_tensor(params.code_bits, device),
        bitvals=as_signed_tensor(params.match_values, device),
        num_rows=times * table.shape[0],
        num_words=params.num_words,
        word_bytes=params.word_bytes,
        align=table.align,
        row_bytes=dtype_row_bytes(table.shape[1], table.dtype_name),
        longest_row=table.stored_row_range[1],  # the tiles' rows are the block's
    )


def tiled_offsets(offsets: np.ndarray, times: int) -> np.ndarray:
    """Row offsets (units of the alignment) of ``times`` copies of a row section back to back.

    ``offsets`` are a block's ``(n + 1,)`` offsets (``offsets[-1]`` units in all). Returns
    ``(times * n + 1,)`` offsets as the container stores them: uint32 while they fit, else
    uint64 (the kernel then reads 8-byte offsets).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    unit = int(offsets[-1])
    total = unit * times
    dtype = np.uint32 if total < 2**32 else np.uint64
    out = np.empty(times * (offsets.size - 1) + 1, dtype=dtype)
    body = out[:-1].reshape(times, offsets.size - 1)
    body[:] = offsets[:-1][None, :] + unit * np.arange(times, dtype=np.int64)[:, None]
    out[-1] = total
    return out


def fill_tiled(dst: np.ndarray, block: np.ndarray, times: int) -> None:
    """Write ``times`` copies of the bytes ``block`` at the start of ``dst`` (both uint8)."""
    per = block.size
    if times * per > dst.size:
        raise ValueError(f"{times} copies of {per} bytes do not fit in {dst.size} bytes")
    if times == 0 or per == 0:
        return
    dst[:per] = block
    done = 1
    while done < times:  # doubling: few, large copies
        step = min(done, times - done)
        dst[done * per : (done + step) * per] = dst[: step * per]
        done += step


def fill_noise(dst: np.ndarray, nbytes: int, seed: int) -> None:
    """Random bytes in the first ``nbytes`` of ``dst``: 64 MiB of them (seeded), tiled.

    The raw gather does not look at the bytes; what matters is that every page is touched
    (backed, and with huge pages advised, backed by huge pages) before it is pinned.
    """
    size = min(64 << 20, nbytes)
    noise = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    reps = nbytes // size if size else 0
    fill_tiled(dst, noise, reps)
    dst[reps * size : nbytes] = noise[: nbytes - reps * size]


def stored_block(table: ibp_graph.IBPTable) -> np.ndarray:
    """The bytes of a table's row section that its rows use (no trailing padding)."""
    used = int(table.offsets[-1]) * table.align
    return np.asarray(table.rows_section).view(np.uint8)[:used]


def incompressible(ratio: float, bypass: bool) -> bool:
    """A table that does not compress: stored raw (bypassed), or no smaller than raw."""
    return bool(bypass or ratio <= 1.0)


def id_budget(ids_per_batch: int) -> int:
    """The most batches `MAX_POOL_ID_BYTES` of int64 ids hold. At least one."""
    return max(1, MAX_POOL_ID_BYTES // (8 * max(1, ids_per_batch)))


def id_batch_cap(ids_per_batch: int) -> int:
    """The most batches a pool holds on the way to 4x L2: `MAX_ID_BATCHES`, within `id_budget`.

    At least one. (A pool still under `L2_FIT_FACTOR` x L2 there grows on: `id_batches`.)
    """
    return min(MAX_ID_BATCHES, id_budget(ids_per_batch))


def _first_reaching(total: np.ndarray, target: int, limit: int) -> int | None:
    """The fewest leading batches whose cumulative stored bytes ``total`` reach ``target``."""
    reached = total[:limit] >= target
    return int(np.argmax(reached)) + 1 if reached.any() else None


def id_batches(stored: Sequence[int], ids_per_batch: int, l2: int) -> int:
    """The batches a pool needs, knowing the stored bytes of the batches drawn so far.

    ``stored``: those batches' stored row bytes, in draw order. The fewest of them whose
    stored bytes add up to `L2_POOL_FACTOR` x ``l2``, within `id_batch_cap`. A pool that
    falls short at the cap while its stored bytes are still under `L2_FIT_FACTOR` x ``l2``
    (small stored rows: it would be timed at L2's rate) grows on until they reach that,
    within `id_budget` (its ids' memory). While the batches fall short, one more than drawn
    (within those limits). At least one.
    """
    cap = id_batch_cap(ids_per_batch)
    total = np.cumsum(np.asarray(stored, dtype=np.int64))
    four = _first_reaching(total, L2_POOL_FACTOR * l2, cap)
    if four is not None:
        return four
    if len(stored) < cap:
        return len(stored) + 1
    budget = id_budget(ids_per_batch)
    out = _first_reaching(total, L2_FIT_FACTOR * l2, budget)
    if out is not None:
        return max(cap, out)
    return min(budget, len(stored) + 1)


def stored_fits_l2(stored_bytes: int, l2: int) -> bool:
    """Whether stored rows (a pool's batches) are under `L2_FIT_FACTOR` x ``l2``.

    Such rows may stay in L2 from one timed launch to the next.
    """
    return bool(stored_bytes < L2_FIT_FACTOR * l2)


def zero_fraction(rows: np.ndarray, chunk_rows: int = 1 << 16) -> float:
    """The fraction of the elements of ``rows`` that are zero (+0.0 or -0.0)."""
    if rows.size == 0:
        return 0.0
    zeros = sum(
        int(np.count_nonzero(rows[i : i + chunk_rows] == 0))
        for i in range(0, rows.shape[0], chunk_rows)
    )
    return zeros / rows.size


def table_class(zeros: float) -> str:
    """Sparse (a bag-of-words table) when at least `SPARSE_ZEROS` of its elements are zero."""
    return "sparse" if zeros >= SPARSE_ZEROS else "dense"


# --------------------------------------------------------------------------------------------
# Rates and targets
# --------------------------------------------------------------------------------------------


def gbps(nbytes: float, seconds: float) -> float:
    """GB/s (10^9 bytes a second); NaN when the time is not positive."""
    return nbytes / seconds / 1e9 if seconds > 0 else math.nan


def _div(a: float, b: float) -> float:
    """``a / b``; NaN unless both are finite and ``b`` is positive (a missing measurement)."""
    if not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return math.nan
    return a / b


def ibp_bound(ratio: float, raw: float, decode_only: float) -> float:
    """min(ratio x raw, decode-only): the most a fetch can deliver; NaN when one is missing."""
    if not all(math.isfinite(v) for v in (ratio, raw, decode_only)):
        return math.nan
    return min(ratio * raw, decode_only)


def no_compress_slowdown(raw: float, ibp: float, applies: bool) -> dict:
    """The target raw / ibp <= `NO_COMPRESS_SLOWDOWN` (the IBP fetch's time over the raw's).

    Not measured when a rate is missing or not finite; a measured ibp rate of 0 (raw finite)
    is a miss with an infinite value and gap (`check` alone would call it not measured).
    """
    if ibp == 0 and math.isfinite(raw):
        return check(math.inf, NO_COMPRESS_SLOWDOWN, at_least=False, applies=applies) | {
            "met": False,
            "gap": math.inf,
        }
    return check(_div(raw, ibp), NO_COMPRESS_SLOWDOWN, at_least=False, applies=applies)


def raw_goal(row_bytes: int) -> tuple[float | None, str]:
    """The raw gather's goal (x memcpy) for rows of ``row_bytes`` bytes, and which rule gave it.

    (None, "") for widths with no goal.
    """
    if row_bytes == RAW_GOAL_ROW_BYTES:
        return RAW_GOAL, f"{RAW_GOAL_ROW_BYTES} B rows"
    if row_bytes % RAW_LINE_BYTES:
        return RAW_UNALIGNED_GOAL, f"rows not a multiple of {RAW_LINE_BYTES} B"
    return None, ""


def decode_goal(zeros: float) -> tuple[float, str]:
    """The decode-only goal (GB/s) of a table with this fraction of zeros; its class."""
    kind = table_class(zeros)
    return (DECODE_SPARSE_GOAL if kind == "sparse" else DECODE_DENSE_GOAL), kind


def decode_alone(r: dict) -> tuple[float, str]:
    """The decoder's rate with the GPU to itself, and which rate it is.

    ``r["decode_capacity_gbps"]`` ("decode capacity": the largest grid the device holds) where
    it was measured (a finite rate), else ``r["decode_only_gbps"]`` ("decode-only": the fetch
    grid cap, which then is the full grid, or no capacity was timed).
    """
    capacity = r.get("decode_capacity_gbps")
    if measured(capacity):
        return float(capacity), "decode capacity"
    return r["decode_only_gbps"], "decode-only"


def decode_target(rate: float | None, zeros: float, *, applies: bool, rate_name: str) -> dict:
    """The decoder's goal (`decode_goal`, by the table's fraction of zeros) against ``rate``,
    its GB/s with the GPU to itself; ``rate_name`` says which rate that is (`decode_alone`)."""
    goal, kind = decode_goal(zeros)
    return check(rate, goal, applies=applies, table_class=kind, zero_fraction=zeros, rate=rate_name)


def targets(r: dict) -> dict:
    """The targets of a measured case (``applies`` says which hold for it).

    ``r["zero_fraction"]``: the fraction of zeros of the case's rows (its `table_class`). The
    raw gather is judged twice: as the kernel alone (``raw_vs_memcpy``, ids in batch order) and
    as raw tables fetch by default (``raw_default_vs_memcpy``: ids sorted first, the sort
    included; `cuda_table.default_sort_ids`), where ``--sort-ids`` measured it. The fused
    fetch's bound takes decode-only at the fetch grid cap (the grid of the fetch it bounds);
    the decoder's own goal takes `decode_alone` (decode capacity where measured).
    """
    memcpy, raw, ibp, dec = r["memcpy_gbps"], r["raw_gbps"], r["ibp_gbps"], r["decode_only_gbps"]
    flat = incompressible(r["ratio"], r["bypass"])
    bound = ibp_bound(r["ratio"], raw, dec)
    raw_at, raw_rule = raw_goal(r["row_bytes"])
    alone, rate = decode_alone(r)
    raw_sorted = r.get("raw_sorted_gbps")
    return {
        "raw_vs_memcpy": check(
            _div(raw, memcpy), raw_at, applies=raw_at is not None, rule=raw_rule
        ),
        "raw_default_vs_memcpy": check(
            _div(math.nan if raw_sorted is None else raw_sorted, memcpy),
            raw_at,
            applies=raw_at is not None and raw_sorted is not None,
            rule=raw_rule,
        ),
        "ibp_vs_ideal": check(_div(ibp, bound), IBP_GOAL, applies=not flat, bound_gbps=bound),
        "decode_vs_pcie": decode_target(
            alone, r["zero_fraction"], applies=not flat, rate_name=rate
        ),
        "no_compress_slowdown": no_compress_slowdown(raw, ibp, flat),
    }


TARGET_TITLES = {
    "raw_vs_memcpy": f"raw / memcpy >= {RAW_GOAL} ({RAW_GOAL_ROW_BYTES} B rows), "
    f">= {RAW_UNALIGNED_GOAL} (rows not a multiple of {RAW_LINE_BYTES} B)",
    "raw_default_vs_memcpy": "raw sorted (raw tables' default) / memcpy, the same goals",
    "ibp_vs_ideal": f"ibp / min(ratio x raw, decode-only) >= {IBP_GOAL}",
    "decode_vs_pcie": "decoder alone GB/s (decode capacity, else decode-only) >= "
    f"{DECODE_DENSE_GOAL:g} (dense), >= {DECODE_SPARSE_GOAL:g} "
    f"(sparse: >= {SPARSE_ZEROS:.0%} zeros)",
    "no_compress_slowdown": f"raw / ibp <= {NO_COMPRESS_SLOWDOWN} (table that does not compress)",
}


def _cell(t: dict, digits: int = 2, note: str = "") -> str:
    """A target's cell: the value, then its `verdict` (a miss in bold), or in parentheses where
    the target does not apply; ``note`` (the goal that applied, the table's class) in brackets
    after it."""
    v = t["value"]
    text = "n/a" if v is None or math.isnan(v) else f"{v:.{digits}f}"  # inf: "inf"
    if not t["applies"]:
        return f"({text})"
    note = f" [{note}]" if note else ""
    judged = verdict(t)
    return f"{text} {judged if t['met'] is not False else f'**{judged}**'}{note}"


def _raw_cell(t: dict) -> str:
    return _cell(t, note=f"goal {t['goal']:g}" if t["applies"] else "")


def _decode_cell(t: dict) -> str:
    """The decoder's goal: its rate, the table's class and goal, and "on decode capacity" where
    that rate was judged (decode-only otherwise)."""
    zeros = t["zero_fraction"]
    on = "; on decode capacity" if t.get("rate") == "decode capacity" else ""
    return _cell(t, digits=1, note=f"{t['table_class']}, {zeros:.0%} zeros: goal {t['goal']:g}{on}")


def _slowdown_cell(t: dict) -> str:
    """raw / ibp to 3 digits (the goal is 2% above 1)."""
    return _cell(t, digits=3)


def _case_batch(r: dict) -> str:
    return f"{r['case']} @ {r['batch']:,}{warps_text(r.get('block_warps'))}"


def warps_text(warps: int | None) -> str:
    """A measurement's block size after its batch: nothing for the library's default."""
    return "" if warps is None else f" ({warps}-warp blocks)"


def summary(rows: list[dict]) -> dict:
    """Per target: cases it applies to and that were measured, met, missed, not measured.

    ``cases`` = ``met`` + len(``missed``); a case with a missing rate is listed under
    ``not_measured`` only.
    """
    out = {}
    for key in TARGET_TITLES:
        applied = [r for r in rows if r["targets"][key]["applies"]]
        missed = [_case_batch(r) for r in applied if r["targets"][key]["met"] is False]
        unmeasured = [_case_batch(r) for r in applied if r["targets"][key]["met"] is None]
        met = sum(r["targets"][key]["met"] is True for r in applied)
        out[key] = {
            "cases": met + len(missed),
            "met": met,
            "missed": missed,
            "not_measured": unmeasured,
        }
    return out


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 1) -> str:
    """A rate or time for a table cell ("n/a" when missing or not finite)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _vs(value: float | None, base: float) -> str:
    """A sorted-order rate and its ratio to the unsorted one: "45.1 (1.07x)"."""
    if value is None or not math.isfinite(value) or not base > 0:
        return _num(value)
    return f"{value:.1f} ({value / base:.2f}x)"


def _mb(nbytes: int | None) -> str:
    """Bytes as MB ("unknown size" when missing)."""
    return "unknown size" if nbytes is None else f"{nbytes / 1e6:.1f} MB"


def _case_cell(r: dict) -> str:
    """A case's name, marked when its table is stored raw or its id batches' stored rows may
    stay in L2 ("(id batches fit in L2)")."""
    raw = " (raw)" if r["bypass"] else ""
    pool = " (id batches fit in L2)" if r.get("pool_fits_l2") else ""
    return f"{r['case']}{warps_text(r.get('block_warps'))}{raw}{pool}"


def grid_label(per_sm: float | None) -> str:
    """The fetch grid cap of a run, as its page says it."""
    if per_sm is None:
        return "the library's default (every block the SMs hold, on the current stream)"
    return f"{per_sm:g} blocks per SM"


def share_text(share: float | None) -> str:
    """A huge-page share for a results page: ``"100%"``, or ``"unknown"`` for None."""
    return "unknown" if share is None else f"{share:.0%}"


def thp_text(settings: dict[str, str] | None) -> str:
    """The kernel's transparent-huge-page settings for a results page."""
    if not settings:
        return "THP settings unknown"
    return "THP " + ", ".join(f"{k}={v}" for k, v in settings.items())


def pages_sentence(payload: dict) -> str:
    """What backed the pinned memory: the page kind asked for and the huge-page shares found."""
    shares = [r.get("huge_page_share") for r in payload["cases"]]
    known = [v for v in shares if v is not None]
    tables = (
        f"{share_text(min(known))} to {share_text(max(known))} of the tiled tables"
        if known
        else "tiled tables unknown"
    )
    return (
        f"Pinned memory: {payload['settings']['pages']} pages asked for; in transparent huge "
        f"pages: {share_text(payload.get('raw_huge_page_share'))} of the raw rows, {tables} "
        f"({thp_text(payload.get('transparent_huge_pages'))})."
    )


def markdown(payload: dict) -> str:
    rows = payload["cases"]
    s = payload["settings"]
    sort = bool(s.get("sort_ids"))
    db = bool(s.get("double_buffer"))
    cap = bool(s.get("decode_capacity"))
    # The raw tables' default (ids sorted) is judged where --sort-ids measured it.
    titles = {k: v for k, v in TARGET_TITLES.items() if sort or k != "raw_default_vs_memcpy"}
    lines = [
        *header_lines("GPU fetch throughput", payload),
        f"Tables of {s['table_gb']:g} GiB of raw rows (compressed blocks tiled in pinned "
        f"memory), or more where the stored rows would be under {L2_POOL_FACTOR}x the L2, so "
        f"that no table is read from L2 (the raw gather's ids then folded onto its "
        f"{s['table_gb']:g} GiB raw buffer); random ids uniform over the table's rows; GPU "
        f"rates: CUDA events, median of {s['repeats']} samples after a warm-up; torch: wall "
        f"clock, median of {s['torch_repeats']}; fetch grid cap: {grid_label(s['max_blocks'])}; "
        f"{block_label(s.get('block_warps'))}; "
        f"queue guard {'on' if s['queue_guard'] else 'off'}; each timed launch takes the "
        f"next of its case's id batches (drawn until their stored rows reach {L2_POOL_FACTOR}x "
        f"the L2 of {_mb(payload.get('l2_bytes'))}, at most {MAX_ID_BATCHES} batches, or more "
        f"while under {L2_FIT_FACTOR}x L2, and {MAX_POOL_ID_BYTES >> 20} MiB of ids); "
        f"(id batches fit in L2): the id batches' stored rows are under {L2_FIT_FACTOR}x "
        "L2 (the ids' memory ran out first), so they may be read from L2. "
        f"Real tables: {payload['real_tables']}. {pages_sentence(payload)}"
        + ("" if payload["complete"] else " **Incomplete run: " + payload["stopped"] + "**"),
        "",
        "Delivered (decoded) GB/s. Target cells: value, met or **gap** (how far from the goal, "
        "a fraction of it), or not measured (a rate missing); in parentheses where the "
        "target does not apply; in brackets, the goal that applied. "
        f"Raw: {RAW_GOAL} x memcpy for {RAW_GOAL_ROW_BYTES} B rows, {RAW_UNALIGNED_GOAL} x for "
        f"rows not a multiple of {RAW_LINE_BYTES} B (only 4-byte aligned), no goal for other "
        "widths. Decode only: the fetch's launch with the rows in GPU memory (no PCIe), on "
        "the fetch grid cap. "
        + (
            "Decode capacity: the same launch on the largest grid the device holds at once for "
            "it (occupancy x SMs); in parentheses, the ratio to decode only; n/a where not "
            "measured: the fetch grid is already that grid (decode only then is the decoder's "
            "capacity), or the table is stored raw (no decoder). "
            if cap
            else ""
        )
        + "ibp bound = min(ratio x raw, decode-only), decode only at the fetch grid cap (the "
        "grid of the fetch it bounds): the most the fetch can deliver; the fused fetch's goal "
        f"is {IBP_GOAL} x it. The decoder alone ("
        + ("decode capacity where measured, else decode only" if cap else "decode only")
        + f"): {DECODE_DENSE_GOAL:g} GB/s on a dense table, {DECODE_SPARSE_GOAL:g} GB/s on a "
        f"sparse (bag-of-words) one: at least {SPARSE_ZEROS:.0%} of the elements of its rows "
        "zero. "
        "A table that does not compress (stored raw): raw / ibp, the fetch's time over the "
        f"raw gather's, at most {NO_COMPRESS_SLOWDOWN} (within "
        f"{NO_COMPRESS_SLOWDOWN - 1:.0%} of the raw gather)."
        + (
            " Sorted: the ids sorted on the GPU (the sort included), rows written back by the "
            "permutation; in parentheses, the ratio to the unsorted rate."
            if sort
            else ""
        )
        + (
            " Db: the double-buffered fused kernel (each warp stages its next row while it "
            "decodes the current one); in parentheses, the ratio to the one-buffer rate; for a "
            "table stored raw, its raw gather timed again; n/a: rows too wide for two staging "
            "buffers."
            if db
            else ""
        ),
        "",
        "| case | row B | ratio | batch rows | memcpy | torch | raw | ibp | decode only "
        + ("| decode capacity " if cap else "")
        + ("| raw sorted | ibp sorted | sort ms " if sort else "")
        + ("| ibp db | decode only db " if db else "")
        + "| ibp / bound | "
        + " | ".join(titles.values())
        + " | bit-identical |",
        "|---|" + "---|" * (14 + cap + 4 * sort + 2 * db),
    ]
    for r in rows:
        t = r["targets"]
        ordered = (
            f"| {_vs(r.get('raw_sorted_gbps'), r['raw_gbps'])} "
            f"| {_vs(r.get('ibp_sorted_gbps'), r['ibp_gbps'])} | {_num(r.get('sort_ms'), 3)} "
            if sort
            else ""
        )
        buffered = (
            f"| {_vs(r.get('ibp_db_gbps'), r['ibp_gbps'])} "
            f"| {_vs(r.get('decode_only_db_gbps'), r['decode_only_gbps'])} "
            if db
            else ""
        )
        capacity = f"| {_vs(r.get('decode_capacity_gbps'), r['decode_only_gbps'])} " if cap else ""
        by_default = f"| {_raw_cell(t['raw_default_vs_memcpy'])} " if sort else ""
        lines.append(
            f"| {_case_cell(r)} | {r['row_bytes']:,} "
            f"| {r['ratio']:.3f} | {r['batch']:,} | {_num(r['memcpy_gbps'])} "
            f"| {_num(r['torch_gbps'])} | {_num(r['raw_gbps'])} | {_num(r['ibp_gbps'])} "
            f"| {_num(r['decode_only_gbps'])} {capacity}{ordered}"
            f"{buffered}"
            f"| {_num(r['ibp_vs_bound'], 2)} | {_raw_cell(t['raw_vs_memcpy'])} "
            f"{by_default}"
            f"| {_cell(t['ibp_vs_ideal'])} | {_decode_cell(t['decode_vs_pcie'])} "
            f"| {_slowdown_cell(t['no_compress_slowdown'])} "
            f"| {r['bit_identical']} |"
        )
    lines += ["", "Summary:", ""]
    for key, v in payload["summary"].items():
        if key not in titles:
            continue
        missed = f"; missed: {', '.join(v['missed'])}" if v["missed"] else ""
        unmeasured = v.get("not_measured")
        missed += f"; not measured: {', '.join(unmeasured)}" if unmeasured else ""
        lines.append(f"- {TARGET_TITLES[key]}: met in {v['met']} of {v['cases']} cases{missed}")
    lines += capacity_lines(rows)
    unbuffered = sorted({r["case"] for r in rows if r.get("double_buffer_note")})
    if unbuffered:
        lines.append(
            f"- not double-buffered (rows too wide for two staging buffers): "
            f"{', '.join(unbuffered)}"
        )
    if payload.get("skipped"):
        lines.append(f"- not run (time budget): {', '.join(payload['skipped'])}")
    return "\n".join(lines) + "\n"


def capacity_lines(rows: list[dict]) -> list[str]:
    """The summary's line on the cases whose fetch grid already was the full grid.

    They have no decode capacity (`CAPACITY_FULL`): decode only is the decoder's capacity
    there. "every case with a decoder" when that is all of them (tables stored raw aside).
    """
    full = [r for r in rows if r.get("decode_capacity_note") == CAPACITY_FULL]
    if not full:
        return []
    decoded = [r for r in rows if r.get("decode_capacity_note") != CAPACITY_RAW]
    which = (
        "every case with a decoder"
        if len(full) == len(decoded)
        else ", ".join(_case_batch(r) for r in full)
    )
    return [
        f"- decode capacity not measured, {CAPACITY_FULL} (decode only is the decoder's "
        f"capacity): {which}"
    ]


def write_results(payload: dict, out: Path, name: str) -> tuple[Path, Path]:
    """Write ``out/<name>.json`` and ``.md``; returns their paths."""
    payload["summary"] = summary(payload["cases"])
    md = write_json_md(name, finite(payload), lambda: markdown(payload), out)
    return out / f"{name}.json", md


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    """Positive integers like ``256,512`` (argparse type)."""
    try:
        values = [int(float(v)) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 256,512, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def names_in(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names, each one of ``choices`` (``what`` they are)."""

    def parse(text: str) -> list[str]:
        names = [k.strip() for k in text.split(",") if k.strip()]
        bad = [k for k in names if k not in choices]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {bad}; expected some of {', '.join(choices)}"
            )
        return names

    return parse


def block_warps_list(text: str) -> list[int]:
    """``--block-warps``: distinct block sizes in warps, comma-separated (argparse type)."""
    sizes = [block_warps_arg(part) for part in text.split(",")]
    return list(dict.fromkeys(sizes))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--table-gb", type=float, default=4.0, help="GiB of raw rows per table")
    p.add_argument(
        "--batch",
        type=int_list,
        default=[100_000, 1_000_000],
        help="rows per batch, e.g. 100000,1000000",
    )
    p.add_argument("--max-batch-gb", type=float, default=1.0, help="cap on a batch's GiB of rows")
    p.add_argument("--repeats", type=int, default=10, help="timed samples per GPU measurement")
    p.add_argument("--torch-repeats", type=int, default=3, help="timed runs of the torch path")
    p.add_argument("--widths", type=int_list, default=list(WIDTHS), help="synthetic row bytes")
    p.add_argument(
        "--kinds", type=names_in(KINDS, "kinds"), default=list(KINDS), help="synthetic kinds"
    )
    p.add_argument("--block-rows", type=int, default=BLOCK_ROWS, help="distinct synthetic rows")
    p.add_argument("--no-real", dest="real", action="store_false", help="skip the real tables")
    p.add_argument(
        "--max-blocks",
        type=blocks_per_sm,
        default=None,
        help="fetch grid cap in blocks per SM, e.g. 0.25 for a block on a quarter of the SMs "
        "(default: the library's, every block the SMs hold for a fetch on the current stream)",
    )
    p.add_argument(
        "--pages",
        choices=PAGE_KINDS,
        default="huge",
        help="pinned memory: huge (THP-advised), small (4 KiB pages) or cuda (cudaHostAlloc)",
    )
    p.add_argument(
        "--raw-kernel",
        choices=["auto", "lines"],
        default="auto",
        help="raw gather: auto (the library's: the widest vector dividing the row) or lines "
        "(whole 16-byte loads, for rows of a multiple of 4 bytes)",
    )
    p.add_argument(
        "--sort-ids",
        action="store_true",
        help="also measure raw and ibp with the ids sorted on the GPU and rows written back by "
        "the permutation (the tables' sort_ids), beside the unsorted ones",
    )
    p.add_argument(
        "--double-buffer",
        action="store_true",
        help="also measure ibp and decode-only with the double-buffered fused kernel (the "
        "tables' double_buffer), beside the one-buffer ones",
    )
    p.add_argument(
        "--block-warps",
        type=block_warps_list,
        default=None,
        help="warps per block of every fetch launch, 1-32 (the tables' block_warps; default: "
        "the library's, 8); several (e.g. 8,32): each batch measured at each, in turn",
    )
    p.add_argument(
        "--no-decode-capacity",
        dest="decode_capacity",
        action="store_false",
        help="do not time decode capacity (decode-only again on the largest grid the device "
        "holds, where the fetch grid cap is smaller; on by default)",
    )
    p.add_argument(
        "--tag", default="", help="appended to the results' name (fetch-<device>[-...]-<tag>)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-budget", type=float, default=400.0, help="seconds; no case starts after")
    add_out(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU: build every case, check its tiled layout on the CPU, print the plan",
    )
    args = p.parse_args(argv)
    if args.table_gb <= 0 or args.max_batch_gb <= 0:
        p.error("--table-gb and --max-batch-gb must be positive")
    if args.repeats < 1 or args.torch_repeats < 1:
        p.error("--repeats and --torch-repeats must be >= 1")
    if args.block_rows < 1:
        p.error("--block-rows must be >= 1")
    if any(w % 4 for w in args.widths):
        p.error(
            f"--widths: synthetic rows are float32, widths must be multiples of 4: {args.widths}"
        )
    args.table_bytes = int(args.table_gb * GIB)
    args.max_batch_bytes = int(args.max_batch_gb * GIB)
    return args


def settings(args: argparse.Namespace) -> dict:
    return {
        "pages": args.pages,
        "raw_kernel": args.raw_kernel,
        "table_gb": args.table_gb,
        "batches": args.batch,
        "max_batch_gb": args.max_batch_gb,
        "repeats": args.repeats,
        "torch_repeats": args.torch_repeats,
        "widths": args.widths,
        "kinds": args.kinds,
        "block_rows": args.block_rows,
        "max_blocks": args.max_blocks,
        "block_warps": args.block_warps,
        "sort_ids": args.sort_ids,
        "double_buffer": args.double_buffer,
        "decode_capacity": args.decode_capacity,
        "seed": args.seed,
        "min_sample_s": MIN_SAMPLE_S,
    }


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_cases(args: argparse.Namespace) -> tuple[list[Case], str]:
    cases = synthetic_cases(args.widths, args.kinds, args.block_rows, args.seed)
    if not args.real:
        return cases, "skipped (--no-real)"
    real, note = real_cases()
    return cases + real, note


# --------------------------------------------------------------------------------------------
# Dry run (CPU)
# --------------------------------------------------------------------------------------------


def check_tiled_on_cpu(
    table: ibp_graph.IBPTable, rows: np.ndarray, times: int, seed: int, sort_ids: bool = False
) -> int:
    """Decode random rows of ``times`` tiled copies of ``table`` with the CPU decoder.

    With ``sort_ids``, as the sorted columns fetch them: in ascending id order, each row then
    written back to its position by the sort's permutation. Returns the rows checked; raises
    AssertionError when one differs from ``rows``.
    """
    block = stored_block(table)
    offsets = tiled_offsets(table.offsets, times).astype(np.int64)
    buf = np.zeros(-(-(times * block.size + 64) // 8) * 8, dtype=np.uint8)
    fill_tiled(buf, block, times)
    n = offsets.size - 1
    ids = np.random.default_rng(seed).integers(0, n, min(n, 2048))
    ids = np.concatenate([ids, [0, n - 1]])
    order = np.argsort(ids, kind="stable") if sort_ids else np.arange(ids.size)
    starts = offsets[ids[order]] * table.align
    lengths = offsets[ids[order] + 1] * table.align - starts
    got = np.empty((ids.size, table.params.num_words), dtype=table.params.masks.dtype)
    got[order] = decode(buf.view(np.uint64), starts, lengths, table.params, None)
    want = rows_to_words(rows[ids % rows.shape[0]], table.dtype_name, table.word_bytes)
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero((got != want).any(axis=1))[0])
        raise AssertionError(f"tiled row {int(ids[bad])} decodes wrong")
    return int(ids.size)


def capacity_planned(args: argparse.Namespace, bypass: bool) -> bool:
    """Whether a GPU run may time a case's decode capacity: on, a decoder (not stored raw), and
    a fetch grid that may be below the full grid.

    With no ``--max-blocks`` the fetch takes the library's default grid on the current stream
    (`runtime.fetch_blocks_per_sm`), every block the SMs hold: never. With a cap, whether it
    is below the full grid is known on the GPU only (occupancy, SMs, the batch's blocks).
    """
    from ibp_graph.kernels.runtime import fetch_blocks_per_sm

    capped = args.max_blocks is not None or fetch_blocks_per_sm(None) is not None
    return bool(args.decode_capacity and not bypass and capped)


def dry_run(args: argparse.Namespace, cases: list[Case], real_note: str) -> list[dict]:
    """Compress every case, check its tiled layout on the CPU; the plan of the GPU run.

    The stored rows are tiled past `L2_POOL_FACTOR` x the CPU stand-in's L2 (`CPU_L2_BYTES`);
    a GPU tiles a table further where they are under that many of its own L2 (`table_tiles`:
    sparse tables).
    """
    from ibp_graph.cuda_table import raw_bypass

    plan = []
    peak = 0
    l2 = l2_bytes(torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            t0 = time.perf_counter()
            table = ibp_graph.compress(case.rows, Path(tmp) / "block.ibp", progress=False)
            compress_s = time.perf_counter() - t0
            block = stored_block(table).size
            times = table_tiles(args.table_bytes, case.rows.shape[0], case.row_bytes, block, l2)
            bypass = raw_bypass(table)
            checked = check_tiled_on_cpu(
                table, case.rows, min(times, 3), args.seed, sort_ids=args.sort_ids
            )
            stored = times * block
            peak = max(peak, stored)
            item = {
                "case": case.name,
                "row_bytes": case.row_bytes,
                "ratio": float(table.ratio),
                "zero_fraction": zero_fraction(case.rows),
                "bypass": bypass,
                "rows": times * case.rows.shape[0],
                "table_gb": times * case.rows.shape[0] * case.row_bytes / 1e9,
                "stored_gb": stored / 1e9,
                "batches": [
                    n
                    for n, _ in batch_sizes(
                        args.batch, case.row_bytes, args.max_batch_bytes, times * case.rows.shape[0]
                    )
                ],
                "compress_s": compress_s,
                "rows_checked": checked,
                "sort_ids": args.sort_ids,
                "double_buffer": args.double_buffer,
                "decode_capacity": capacity_planned(args, bypass),
            }
            item["table_class"] = table_class(item["zero_fraction"])
            plan.append(item)
            print(
                f"{case.name:26s} {case.row_bytes:6,} B  ratio {item['ratio']:8.3f}"
                f"{' (stored raw)' if item['bypass'] else '':13s} {item['table_class']:6s} "
                f"{item['rows']:>12,} rows, "
                f"{item['stored_gb']:6.2f} GB pinned, batches {item['batches']}, compressed in "
                f"{compress_s:.1f} s; tiled layout checked on {checked} rows"
                f"{' (sorted, written back)' if args.sort_ids else ''}"
                f"{'; double-buffered timings planned' if args.double_buffer else ''}"
                f"{'; decode capacity planned' if item['decode_capacity'] else ''}",
                flush=True,
            )
            table.close()
    host = args.table_bytes + peak + args.max_batch_bytes
    print(
        f"dry run: {len(plan)} cases built and checked on the CPU (real tables: {real_note}); "
        f"the GPU run pins about {host / 1e9:.1f} GB of host memory at most. Stored rows tiled "
        f"past {L2_POOL_FACTOR}x the CPU stand-in's L2 of {_mb(l2)}; a GPU tiles a table further "
        f"where they are under {L2_POOL_FACTOR}x its own L2 (sparse tables). The measurements "
        "need a CUDA GPU.",
        flush=True,
    )
    return plan


# --------------------------------------------------------------------------------------------
# Timing (GPU)
# --------------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class QueueGuard:
    """Keeps a stream busy (a GPU sleep) while the host queues the launches to be timed.

    Off without a GPU sleep (``torch.cuda._sleep``) or off a CUDA device.
    """

    def __init__(self, device: torch.device) -> None:
        self._sleep = getattr(torch.cuda, "_sleep", None) if device.type == "cuda" else None
        self.cycles_per_s = 0.0
        if self._sleep is None:
            return
        try:
            ms = 0.0
            cycles = 0
            for cycles in (1_000_000, 20_000_000):  # the first call also loads the kernel
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                self._sleep(cycles)
                end.record()
                end.synchronize()
                ms = start.elapsed_time(end)
            self.cycles_per_s = cycles / (ms / 1e3) if ms > 0 else 0.0
        except (RuntimeError, AttributeError) as exc:
            log(f"fetch: no GPU sleep to queue launches behind ({exc}); launch overhead is timed")
            self._sleep = None

    @property
    def on(self) -> bool:
        return self._sleep is not None and self.cycles_per_s > 0

    def __call__(self, seconds: float) -> None:
        if self.on:
            self._sleep(max(1, int(seconds * self.cycles_per_s)))  # type: ignore[misc]


def gpu_seconds(
    fn: Callable[[], Any], repeats: int, guard: QueueGuard, device: torch.device
) -> float:
    """Median device seconds of one ``fn()``; the warm-up call (kernel compile) is not timed.

    On a CUDA device: CUDA events around ``inner`` back-to-back calls queued behind ``guard``
    (samples of at least `MIN_SAMPLE_S`). Elsewhere (tests): synchronised wall clock.
    """
    fn()  # warm-up: compiles the kernel, allocates
    sync(device)
    t0 = time.perf_counter()
    fn()
    host_s = time.perf_counter() - t0  # the host's cost of queuing one call
    sync(device)
    one_s = time.perf_counter() - t0
    inner = int(min(MAX_INNER, max(1, math.ceil(MIN_SAMPLE_S / max(one_s, 1e-6)))))
    samples = []
    for _ in range(repeats):
        sync(device)
        if device.type != "cuda":
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter() - t0) / inner)
            continue
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        guard(2.0 * inner * host_s + 1e-3)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / inner)
    return statistics.median(samples)


def wall_seconds(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    """Median wall-clock seconds of ``fn()`` (synchronised; warm-up call not timed)."""
    fn()
    sync(device)
    samples = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


# --------------------------------------------------------------------------------------------
# The GPU run
# --------------------------------------------------------------------------------------------


class Bench:
    """What the cases share: the device, the raw buffer, staging memory, cached baselines.

    Args:
        args: the parsed arguments.
        device: the CUDA device (tests: the CPU, with ``cuda`` a stand-in).
        cuda: CuPy's ``cuda`` module (what `ibp_graph.pinned.PinnedBuffer` pins with).
    """

    def __init__(self, args: argparse.Namespace, device: torch.device, cuda: Any):
        from ibp_graph.pinned import PinnedBuffer

        self.args = args
        self.device = device
        self.cuda = cuda
        self.guard = QueueGuard(device)
        t0 = time.perf_counter()
        self.raw = PinnedBuffer(args.table_bytes, "raw rows", cuda, pages=args.pages)
        fill_noise(self.raw.array, args.table_bytes, args.seed)
        #: The share of the raw rows in transparent huge pages (None: not known).
        self.huge_page_share = self.raw.huge_page_share()
        self.raw_ptr = self.pin(self.raw)
        log(
            f"raw buffer: {args.table_bytes / GIB:.2f} GiB pinned in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        cuda_dev = device.type == "cuda"
        self.staging = torch.empty(args.max_batch_bytes, dtype=torch.uint8, pin_memory=cuda_dev)
        self.dst = torch.empty(args.max_batch_bytes, dtype=torch.uint8, device=device)
        self.error = torch.zeros(2, dtype=torch.int32, device=device)
        #: The grid cap of every fetch launch (None: the library's default).
        self.max_blocks = grid_cap(args.max_blocks, device)
        #: The block sizes each batch is measured at, in warps (None: the library's default).
        self.block_warps: list[int | None] = list(args.block_warps or [None])
        self._baselines: dict[tuple[int, int], tuple[float, float]] = {}
        self.l2_bytes = l2_bytes(device)

    def pin(self, buffer: Any) -> int:
        """Pin ``buffer`` for this device; its device address."""
        with self.cuda.Device(self.device.index or 0):
            return buffer.pin()

    def close(self) -> None:
        sync(self.device)
        self.raw.close()

    def raw_rows(self, row_bytes: int) -> tuple[int, torch.Tensor]:
        """The raw buffer as ``(rows, row_bytes)``: row count and a CPU tensor (float32 view)."""
        n = raw_buffer_rows(self.args.table_bytes, row_bytes)
        host = torch.from_numpy(self.raw.array[: n * row_bytes]).view(n, row_bytes)
        return n, host.view(torch.float32) if row_bytes % 4 == 0 else host

    def baselines(
        self, row_bytes: int, ids: torch.Tensor, ids_cpu: torch.Tensor
    ) -> tuple[float, float]:
        """(memcpy GB/s, torch GB/s) for batches of ``len(ids)`` rows of ``row_bytes`` (cached)."""
        key = (row_bytes, ids.numel())
        if key in self._baselines:
            return self._baselines[key]
        args, device = self.args, self.device
        nbytes = ids.numel() * row_bytes
        src, dst = self.staging[:nbytes], self.dst[:nbytes]
        memcpy_s = gpu_seconds(
            lambda: dst.copy_(src, non_blocking=True), args.repeats, self.guard, device
        )
        _, host = self.raw_rows(row_bytes)

        def torch_path() -> torch.Tensor:
            return host.index_select(0, ids_cpu).to(device, non_blocking=True)

        torch_s = wall_seconds(torch_path, args.torch_repeats, device)
        self._baselines[key] = (gbps(nbytes, memcpy_s), gbps(nbytes, torch_s))
        return self._baselines[key]

    def raw_launch(
        self,
        row_bytes: int,
        out: torch.Tensor,
        *,
        sort: bool = False,
        block_warps: int | None = None,
    ) -> Callable[[torch.Tensor], None]:
        """``launch(ids)``: one raw gather of rows ``ids`` of the raw buffer at ``row_bytes``.

        With ``sort``, as `sort_ids` tables gather: the ids sorted first (see `sorted_launch`);
        in blocks of ``block_warps`` warps (None: the library's default).
        """
        from ibp_graph.kernels import raw_gather as launcher

        n = raw_buffer_rows(self.args.table_bytes, row_bytes)
        ptr, err, cap = self.raw_ptr, self.error, self.max_blocks
        lines = self.args.raw_kernel == "lines" and row_bytes % 4 == 0 and row_bytes % 16 != 0

        def gather(idx: torch.Tensor, out_pos: torch.Tensor | None = None) -> None:
            launcher.raw_gather(
                ptr,
                n,
                row_bytes,
                idx,
                out,
                err,
                out_pos=out_pos,
                max_blocks=cap,
                line_aligned=lines,
                block_warps=block_warps,
            )

        return sorted_launch(gather) if sort else gather


def l2_bytes(device: torch.device) -> int:
    """The device's L2 cache bytes; `CPU_L2_BYTES` off CUDA (the tests' stand-in)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    return CPU_L2_BYTES


def fused_launch(
    codec: Any,
    bypass: bool,
    out: torch.Tensor,
    error: torch.Tensor,
    max_blocks: int | None,
    *,
    double_buffer: bool = False,
    block_warps: int | None = None,
) -> Callable[..., None]:
    """``launch(idx, out_pos=None)``: `ibp_graph.cuda_table.launch_fetch` of rows ``idx``.

    Into ``out`` at ``out_pos``, from the rows ``codec`` points at; the double-buffered
    kernel with ``double_buffer``, blocks of ``block_warps`` warps.
    """
    from ibp_graph.cuda_table import launch_fetch

    def launch(idx: torch.Tensor, out_pos: torch.Tensor | None = None) -> None:
        launch_fetch(
            codec,
            bypass,
            idx,
            out,
            error,
            out_pos=out_pos,
            max_blocks=max_blocks,
            double_buffer=double_buffer,
            block_warps=block_warps,
        )

    return launch


def sorted_launch(launch: Callable[..., None]) -> Callable[[torch.Tensor], None]:
    """``launch(idx, out_pos)`` as the tables' ``sort_ids`` runs it: ``run(ids)``.

    ``torch.sort(ids)`` on the current stream, then the launch on the sorted ids with the
    sort's permutation as the output positions: rows read in ascending id order, written
    where the batch has them.
    """

    def run(ids: torch.Tensor) -> None:
        ordered, perm = torch.sort(ids)
        launch(ordered, perm)

    return run


def rotating(
    launch: Callable[[torch.Tensor], Any], pool: Sequence[torch.Tensor]
) -> Callable[[], Any]:
    """``launch`` as one call to time: each call takes the next batch of ``pool`` in turn."""
    turns = itertools.count()

    def run() -> Any:
        return launch(pool[next(turns) % len(pool)])

    return run


def draw_pool(
    num_rows: int, n: int, seed: int, sizes: torch.Tensor, l2: int
) -> tuple[list[torch.Tensor], int]:
    """The id batches of one case and batch size, and their stored bytes in all.

    Batches of ``n`` ids uniform over ``num_rows``, drawn in turn from one generator seeded
    with ``seed`` on ``sizes``' device (the first: the ids a one-batch run draws), as many
    as `id_batches` asks for ``l2``. ``sizes``: the stored bytes of each row of the block
    the table tiles (row ``i`` of the table is row ``i % len(sizes)`` of the block).
    """
    gen = torch.Generator(device=sizes.device).manual_seed(seed)
    pool: list[torch.Tensor] = []
    stored: list[int] = []
    while len(pool) < id_batches(stored, n, l2):
        ids = torch.randint(0, num_rows, (n,), device=sizes.device, generator=gen)
        pool.append(ids)
        stored.append(int(sizes[ids % sizes.numel()].sum()))
    return pool, sum(stored)


def rows_match(out: torch.Tensor, ref: torch.Tensor, pool: Sequence[torch.Tensor]):
    """``matches(i)``: whether ``out`` holds bit for bit the block ``ref``'s rows of batch ``i``."""
    return lambda i: torch.equal(out, ref.index_select(0, pool[i] % ref.shape[0]))


def raw_rows_match(out: torch.Tensor, host: torch.Tensor, pool: Sequence[torch.Tensor], k: int):
    """``matches(i)``: whether ``out``'s first ``k`` rows are batch ``i``'s rows of ``host``.

    Checked on the CPU (``host``: the raw rows, a CPU tensor).
    """

    def matches(i: int) -> bool:
        want = host[pool[i][:k].cpu()].view(torch.uint8).reshape(k, out.shape[1])
        return torch.equal(out[:k].cpu(), want)

    return matches


def check_pool(
    launch: Callable[[torch.Tensor], Any],
    pool: Sequence[torch.Tensor],
    out: torch.Tensor,
    matches: Callable[[int], bool],
) -> bool:
    """Run ``launch`` once on each batch of ``pool`` into ``out``; whether each matched.

    ``out`` is zeroed before each launch; ``matches(i)`` checks it after batch ``i``. The
    first batch runs last, so ``out`` ends holding its rows.
    """
    ok = True
    for i in [*range(1, len(pool)), 0]:
        out.zero_()
        launch(pool[i])
        ok = matches(i) and ok
    return ok


def timed(
    launch: Callable[[torch.Tensor], Any],
    pool: Sequence[torch.Tensor],
    out: torch.Tensor,
    matches: Callable[[int], bool],
    bench: Bench,
) -> tuple[float, bool]:
    """`gpu_seconds` of ``launch`` taking the batches of ``pool`` in turn, then `check_pool`.

    Returns (seconds, every batch matched).
    """
    seconds = gpu_seconds(rotating(launch, pool), bench.args.repeats, bench.guard, bench.device)
    return seconds, check_pool(launch, pool, out, matches)


def double_buffered(
    launch: Callable[[torch.Tensor], Any],
    pool: Sequence[torch.Tensor],
    out: torch.Tensor,
    matches: Callable[[int], bool],
    bench: Bench,
) -> tuple[float, bool, str]:
    """`timed` for a double-buffered ``launch``: (seconds, bit-identical, note).

    Rows too wide for two staging buffers per warp (the launch raises ValueError naming
    "one buffer") give NaN seconds, True (nothing to check) and the reason as the note.
    """
    try:
        seconds, same = timed(launch, pool, out, matches, bench)
    except ValueError as exc:
        if "one buffer" not in str(exc):
            raise
        return math.nan, True, str(exc)
    return seconds, same, ""


def decode_grids(
    codec: Any,
    n: int,
    device: torch.device,
    max_blocks: int | None,
    block_warps: int | None = None,
) -> tuple[int, int]:
    """The grids (blocks) of a one-buffer fused launch of ``n`` rows on the current stream.

    ``(at the fetch grid cap max_blocks, the largest the device holds at once)``, each as
    `ibp_graph.kernels.fetch_decode.fetch_decode` sizes its grid with `runtime.grid_size`:
    the second with no cap and ``per_sm=None`` (occupancy x SMs, and no more blocks than the
    rows need), in blocks of ``block_warps`` warps (None: the library's default) as the
    launcher plans them. Off CUDA (the tests' stand-in): one SM (as `benchmarks._env.grid_cap`
    counts there) holding the occupancy calculator's blocks for 64 registers a thread.
    """
    from ibp_graph.kernels import fetch_decode as fused
    from ibp_graph.kernels import runtime

    cuda = device.type == "cuda"
    props = torch.cuda.get_device_properties(device) if cuda else None
    max_smem = int(getattr(props, "shared_memory_per_block_optin", fused.DEFAULT_SMEM))
    plan = codec.plan(max_smem, 1, runtime.check_block_warps(block_warps))
    threads = fused.WARP * plan.warps_per_block
    needed = -(-n // plan.warps_per_block)
    if not cuda:
        resident = runtime.resident_blocks_per_sm(64, threads, plan.bytes_per_block, None)
        full = max(1, min(needed, resident))
        return (full if max_blocks is None else max(1, min(full, max_blocks))), full
    index = runtime.device_index(device)
    with runtime.cupy_stream(None, device):  # the kernel and its attribute in device's context
        wide = plan.bytes_per_block > fused.DEFAULT_SMEM
        entry = fused._entry(codec, False)
        fn = runtime.kernel(fused.SOURCE, entry, index, max_smem=max_smem if wide else None)
        grid = partial(
            runtime.grid_size,
            needed,
            device,
            kernel_fn=fn,
            threads=threads,
            smem=plan.bytes_per_block,
        )
        return grid(max_blocks, per_sm=runtime.fetch_blocks_per_sm(None)), grid(None, per_sm=None)


def decode_capacity(
    bench: Bench,
    codec: Any,
    bypass: bool,
    out: torch.Tensor,
    pool: Sequence[torch.Tensor],
    matches: Callable[[int], bool],
    block_warps: int | None = None,
) -> tuple[dict, bool]:
    """Decode capacity: the decode-only launch on the largest grid the device holds.

    In blocks of ``block_warps`` warps (None: the library's default), as the fetch it goes with.

    ``codec``: the rows in GPU memory. Timed and checked as `timed` does, on the grid
    `decode_grids` gives, passed as the launch's cap. Returns the result's fields and whether
    every batch matched: ``decode_only_blocks`` (the fetch grid's; None when off or stored
    raw), ``decode_capacity_blocks`` and ``decode_capacity_gbps``, both None where not
    measured, and then ``decode_capacity_note`` saying why (`CAPACITY_OFF`, `CAPACITY_RAW`,
    `CAPACITY_FULL`).
    """
    fields: dict[str, Any] = dict.fromkeys(
        ("decode_only_blocks", "decode_capacity_blocks", "decode_capacity_gbps")
    )
    if not bench.args.decode_capacity:
        return fields | {"decode_capacity_note": CAPACITY_OFF}, True
    if bypass:
        return fields | {"decode_capacity_note": CAPACITY_RAW}, True
    n = pool[0].numel()
    at_cap, full = decode_grids(codec, n, bench.device, bench.max_blocks, block_warps)
    fields["decode_only_blocks"] = at_cap
    if full <= at_cap:
        return fields | {"decode_capacity_note": CAPACITY_FULL}, True
    launch = fused_launch(codec, bypass, out, bench.error, full, block_warps=block_warps)
    seconds, same = timed(launch, pool, out, matches, bench)
    rate = gbps(n * codec.row_bytes, seconds)
    return fields | {"decode_capacity_blocks": full, "decode_capacity_gbps": rate}, same


def capacity_text(fields: dict) -> str:
    """Decode capacity for the log: its rate and grid, or why it was not measured."""
    if fields["decode_capacity_blocks"] is None:
        return f"decode capacity not measured ({fields['decode_capacity_note']})"
    return (
        f"decode capacity {_num(fields['decode_capacity_gbps'])} GB/s on "
        f"{fields['decode_capacity_blocks']:,} blocks (fetch grid "
        f"{fields['decode_only_blocks']:,})"
    )


def device_copy(dst: torch.Tensor, pinned: Any, src_ptr: int, nbytes: int) -> None:
    """Copy the first ``nbytes`` of ``pinned`` (device address ``src_ptr``) into ``dst``.

    On the CPU (the stand-ins of the tests) ``dst`` takes the host bytes themselves.

    The tiled table spans several registrations (`PinnedBuffer` registers 1 GiB pieces).
    Copied as one range, ``torch``'s ``copy_`` and ``cudaMemcpy`` both answered "invalid
    argument" on an H100 (CUDA 13), while kernels read across the pieces over UVA: an
    elementwise kernel copies it.
    """
    if dst.device.type != "cuda":
        dst[:nbytes].copy_(torch.from_numpy(pinned.array[:nbytes]))
        return
    from ibp_graph.kernels.runtime import cupy

    cp = cupy()
    mem = cp.cuda.UnownedMemory(src_ptr, nbytes, None)
    src = cp.ndarray((nbytes,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))
    torch.cuda.synchronize(dst.device)
    cp.add(src, cp.uint8(0), out=cp.from_dlpack(dst[:nbytes]))  # a kernel, straight into dst
    cp.cuda.Device().synchronize()


def measure_case(bench: Bench, case: Case, tmp: Path) -> list[dict]:
    """Compress, tile, pin, measure every batch size of one case; one result per batch."""
    from ibp_graph.cuda_table import raw_bypass
    from ibp_graph.pinned import PinnedBuffer

    args, device = bench.args, bench.device
    t0 = time.perf_counter()
    table = ibp_graph.compress(case.rows, tmp / "block.ibp", progress=False)
    compress_s = time.perf_counter() - t0
    rb = case.row_bytes
    nb = case.rows.shape[0]
    block = stored_block(table)
    times = table_tiles(args.table_bytes, nb, rb, block.size, bench.l2_bytes)
    num_rows = times * nb
    stored = times * block.size
    bypass = raw_bypass(table)
    ratio = float(table.ratio)
    zeros = zero_fraction(case.rows)
    t0 = time.perf_counter()
    pinned = PinnedBuffer(stored, f"tiled {case.name}", bench.cuda, pages=args.pages)
    on_gpu = None
    try:
        fill_tiled(pinned.array, block, times)
        huge_share = pinned.huge_page_share()
        ptr = bench.pin(pinned)
        pin_s = time.perf_counter() - t0
        codec = tiled_codec(table, times, ptr, device)
        # The same rows in GPU memory (64 zero bytes after them, as after the pinned ones).
        on_gpu = torch.zeros(stored + 64, dtype=torch.uint8, device=device)
        device_copy(on_gpu, pinned, ptr, stored)
        gpu_codec = dataclasses.replace(codec, rows_ptr=on_gpu.data_ptr())
        sizes = np.diff(table.offsets).astype(np.int64) * table.align
        sizes_dev = torch.from_numpy(sizes).to(device)
        rows_u8 = np.ascontiguousarray(case.rows).view(np.uint8).reshape(nb, rb)
        ref = torch.from_numpy(rows_u8).to(device)
        n_raw, host = bench.raw_rows(rb)
        results = []
        for n, asked in batch_sizes(args.batch, rb, args.max_batch_bytes, num_rows):
            pool, pool_stored = draw_pool(num_rows, n, args.seed, sizes_dev, bench.l2_bytes)
            # The raw gather's and torch's batches: the same ids, folded onto the raw buffer
            # where the table (tiled past the L2) has more rows than it.
            raw_pool = [fold_ids(b, num_rows, n_raw) for b in pool]
            ids = raw_pool[0]  # the batch the baselines use
            nbytes = n * rb
            # Each block size in turn on the same id batches: the sizes side by side.
            for warps in bench.block_warps:
                out = torch.empty((n, rb), dtype=torch.uint8, device=device)
                err, cap, reps, guard = bench.error, bench.max_blocks, args.repeats, bench.guard
                memcpy, torch_rate = bench.baselines(rb, ids, ids.cpu())
                raw_match = raw_rows_match(out, host, raw_pool, min(n, RAW_CHECK_ROWS))
                raw_s, raw_ok = timed(
                    bench.raw_launch(rb, out, block_warps=warps), raw_pool, out, raw_match, bench
                )
                raw = gbps(nbytes, raw_s)
                sorted_rates: dict[str, float] = {}
                if args.sort_ids:  # B right after A, on the same id batches
                    raw_sorted_s, ok = timed(
                        bench.raw_launch(rb, out, sort=True, block_warps=warps),
                        raw_pool,
                        out,
                        raw_match,
                        bench,
                    )
                    raw_ok = raw_ok and ok
                    sorted_rates["raw_sorted_gbps"] = gbps(nbytes, raw_sorted_s)
                err.zero_()
                match = rows_match(out, ref, pool)
                pinned_launch = partial(
                    fused_launch, codec, bypass, out, err, cap, block_warps=warps
                )
                ibp_s, same = timed(pinned_launch(), pool, out, match, bench)
                buffered: dict[str, float] = {}
                db_note = ""
                if args.double_buffer:  # right after the one-buffer fetch, on the same id batches
                    db_s, db_same, db_note = double_buffered(
                        pinned_launch(double_buffer=True), pool, out, match, bench
                    )
                    same = same and db_same
                    buffered["ibp_db_gbps"] = gbps(nbytes, db_s)
                if args.sort_ids:
                    ibp_sorted_s, ok = timed(
                        sorted_launch(pinned_launch()), pool, out, match, bench
                    )
                    same = same and ok
                    sorted_rates["ibp_sorted_gbps"] = gbps(nbytes, ibp_sorted_s)
                    sort_s = gpu_seconds(rotating(torch.sort, pool), reps, guard, device)
                    sorted_rates["sort_ms"] = sort_s * 1e3
                gpu_launch = partial(
                    fused_launch, gpu_codec, bypass, out, err, cap, block_warps=warps
                )
                dec_s, same_on_gpu = timed(gpu_launch(), pool, out, match, bench)
                if args.double_buffer:
                    db_s, db_same, gpu_note = double_buffered(
                        gpu_launch(double_buffer=True), pool, out, match, bench
                    )
                    db_note = db_note or gpu_note
                    same_on_gpu = same_on_gpu and db_same
                    buffered["decode_only_db_gbps"] = gbps(nbytes, db_s)
                capacity, same_at_capacity = decode_capacity(
                    bench, gpu_codec, bypass, out, pool, match, warps
                )
                same_on_gpu = same_on_gpu and same_at_capacity
                errors = [int(v) for v in err.tolist()]
                pool_bytes = len(pool) * nbytes  # decoded bytes of the pool's batches
                ibp, dec = gbps(nbytes, ibp_s), gbps(nbytes, dec_s)
                bound = ibp_bound(ratio, raw, dec)
                pool_fits = stored_fits_l2(pool_stored, bench.l2_bytes)
                r = {
                    "case": case.name,
                    "source": case.source,
                    "dtype": case.dtype_name,
                    "row_bytes": rb,
                    "ratio": ratio,
                    "batch_ratio": pool_bytes / pool_stored,
                    "bypass": bypass,
                    "align": table.align,
                    "rows": num_rows,
                    "table_gb": num_rows * rb / 1e9,
                    "stored_gb": stored / 1e9,
                    "raw_rows": n_raw,
                    "zero_fraction": zeros,
                    "table_class": table_class(zeros),
                    "batch": n,
                    "batch_asked": asked,
                    "block_warps": warps,
                    "id_batches": len(pool),
                    "pool_stored_bytes": pool_stored,
                    "pool_fits_l2": pool_fits,
                    "memcpy_gbps": memcpy,
                    "torch_gbps": torch_rate,
                    "raw_gbps": raw,
                    "ibp_gbps": ibp,
                    "ibp_pcie_gbps": ibp * pool_stored / pool_bytes,
                    "decode_only_gbps": dec,
                    **capacity,
                    **sorted_rates,
                    **buffered,
                    "ibp_bound_gbps": bound,
                    "ibp_vs_bound": _div(ibp, bound),
                    "bit_identical": bool(same and same_on_gpu),
                    "raw_gather_correct": bool(raw_ok),
                    "errors": errors,
                    "compress_s": compress_s,
                    "pin_s": pin_s,
                    "huge_page_share": huge_share,
                    "note": case.note,
                }
                if db_note:
                    r["double_buffer_note"] = db_note
                r["targets"] = targets(r)
                results.append(r)
                ordered = (
                    " sorted: raw {raw_sorted_gbps:.1f}, ibp {ibp_sorted_gbps:.1f} GB/s, sort "
                    "{sort_ms:.3f} ms;".format(**sorted_rates)
                    if args.sort_ids
                    else ""
                )
                db = (
                    f" double-buffered: ibp {_num(buffered['ibp_db_gbps'])}, decode-only "
                    f"{_num(buffered['decode_only_db_gbps'])} GB/s"
                    f"{' (' + db_note + ')' if db_note else ''};"
                    if args.double_buffer
                    else ""
                )
                log(
                    f"  {case.name} batch {n:,}{warps_text(warps)} ({len(pool)} id batches"
                    f"{'; raw ids folded' if num_rows > n_raw else ''}"
                    f"{'; id batches fit in L2' if pool_fits else ''}; {table_class(zeros)}, "
                    f"{zeros:.0%} zeros): memcpy {memcpy:.1f}, torch "
                    f"{torch_rate:.1f}, raw {raw:.1f}, ibp {ibp:.1f}, decode-only {dec:.1f} GB/s; "
                    f"{capacity_text(capacity)};"
                    f"{ordered}{db} ratio {ratio:.3f}; bit-identical {same} (pinned), "
                    f"{same_on_gpu} (GPU memory)"
                )
                del out
            del pool, raw_pool
        return results
    finally:
        sync(device)
        del on_gpu
        pinned.close()
        table.close()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def new_payload(env: dict, args: argparse.Namespace, device_name: str, real_note: str) -> dict:
    """The results document before any case: machine, settings, no cases yet."""
    return {
        **env,
        "device": device_name,
        "host": env["device"],
        "settings": settings(args),
        "real_tables": real_note,
        "complete": False,
        "stopped": "the run was cut short (or is still running)",
        "skipped": [],
        "cases": [],
    }


def run_cases(
    bench: Bench, cases: list[Case], payload: dict, name: str, start: float | None = None
) -> dict:
    """Measure the cases in order, rewriting the results after each, within the time budget."""
    args = bench.args
    start = time.perf_counter() if start is None else start
    payload["settings"]["queue_guard"] = bench.guard.on
    payload["l2_bytes"] = bench.l2_bytes
    payload["transparent_huge_pages"] = transparent_huge_pages()
    payload["raw_huge_page_share"] = bench.huge_page_share
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            spent = time.perf_counter() - start
            if spent > args.time_budget:
                payload["skipped"] = [c.name for c in cases[i:]]
                payload["stopped"] = f"time budget of {args.time_budget:.0f} s spent"
                log(f"fetch: {payload['stopped']}; not run: {', '.join(payload['skipped'])}")
                break
            log(f"{case.name} ({case.row_bytes:,} B rows) at {spent:.0f} s ...")
            payload["cases"] += measure_case(bench, case, Path(tmp))
            write_results(payload, args.out, name)
        else:
            payload["complete"] = True
            payload["stopped"] = ""
    payload["elapsed_s"] = time.perf_counter() - start
    write_results(payload, args.out, name)
    return payload


def run_gpu(args: argparse.Namespace, cases: list[Case], real_note: str, env: dict) -> dict:
    from ibp_graph.kernels.runtime import cupy

    start = time.perf_counter()
    cp = cupy()
    device = torch.device("cuda", torch.cuda.current_device())
    gpu = torch.cuda.get_device_name(device)
    payload = new_payload(env, args, gpu, real_note)
    payload["cuda"] = torch.version.cuda
    payload["cupy"] = cp.__version__
    name = f"fetch-{slug(gpu)}" + ("" if args.pages == "huge" else f"-{args.pages}-pages")
    name += "" if args.raw_kernel == "auto" else f"-{args.raw_kernel}-raw"
    name += f"-{slug(args.tag)}" if args.tag else ""
    bench = Bench(args, device, cp.cuda)
    try:
        run_cases(bench, cases, payload, name, start)
    finally:
        bench.close()
    print((args.out / f"{name}.md").read_text())
    return payload


def main(argv: Sequence[str] | None = None) -> dict | list[dict]:
    args = parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit(
            "benchmarks/fetch.py needs a CUDA GPU (torch.cuda.is_available() is False); "
            "--dry-run builds and checks the cases on the CPU"
        )
    env = environment()
    if argv is not None:
        env["command"] = " ".join(["python", "benchmarks/fetch.py", *argv])
    cases, real_note = build_cases(args)
    if args.dry_run:
        return dry_run(args, cases, real_note)
    return run_gpu(args, cases, real_note, env)


if __name__ == "__main__":
    main()
