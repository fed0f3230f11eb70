"""Global loads of the fused decoder per row: load instructions and 32-byte sectors, counted.

Usage::

    .venv/bin/python benchmarks/decode_loads.py [--rows 2000] [--out benchmarks/results]

writes ``decode-loads-cpu.{json,md}``. No GPU is needed: for real rows of each table it counts
the warp-wide global loads of table metadata that ``decode_row`` in ``cuda/fetch_decode.cu``
issues (code widths, code and free-bit prefix sums, masks, column layouts, dictionaries), and
the distinct 32-byte sectors each one touches (the unit an L1 request is served in), in five
versions of the kernel:

- ``before``: dictionaries column-major ``(k, V, E)``, and every chunk of 32 columns read
  through codes, masks and prefix sums;
- ``after``: dictionaries code-major ``(k, E, V)``; a chunk of a grouped row that holds no
  code and whose columns have no free bit written from its code-0 entries alone; a flat
  row's codes read in the payloads' pass (one load of the code widths, not two);
- ``one_pass``: as ``after``, except for a grouped row whose cluster has no free bit in any
  column (``decode_grouped_no_free``). Its codes' total width comes
  from the code-width prefix sums at the two ends of each subgroup that holds codes (read
  before its chunks), and each chunk is then decoded in a single pass: a chunk with no
  code is its code-0 entries; a chunk with codes loads its code widths once and the
  entries of the words that do not escape, with no masks and no free-bit prefix sums;
- ``layouts`` (the previous kernel): as ``one_pass``, except in the chunks decoded through
  the free-bit prefix sums or a warp scan of the payload widths (every chunk of a flat row;
  of a grouped row whose cluster has free bits, every chunk but those with neither a code
  nor a free bit). There a lane loads its column's layout word (``layouts``, ``(k, V)``
  uint32: code width, free-bit count, and where the free bits lie when they form at most
  two runs) instead of its code width and its mask. The mask is loaded only to deposit a
  payload into free bits that form three runs or more: by the lanes whose word does not
  escape and whose column's free bits do, and only in chunks that have such a lane.
- ``spans`` (the current kernel): as ``layouts``, except for rows whose output row is 16-byte
  aligned (rows are taken as written at positions 0, 1, ... of an output array) and that are
  either decoded in one pass with at least half their chunks holding codes, or flat and of
  more than 64 words. Those are decoded 16 bytes of neighbouring words a lane; so are flat
  rows of more than 32 four-byte words at an 8-byte aligned output row, 8 bytes (two words)
  a lane. One-pass rows (`span_pass`): per 32 lanes, one 16-byte load of code-0 entries a
  lane, one load of a lane's code widths where its subgroup holds codes, and the entries of
  words of another code than 0 that do not escape. Flat rows (`flat_span_pass`): per 32
  lanes, a lane's layout words in one load, its first column's code prefix, and each word's
  entry (and mask, for free bits in three runs or more); no free-bit prefix sums.

The kernel now reads, where the masks were read (free bits in three runs or more), its
column's 16-byte entry of the runs table (`column_runs`) instead; the counts here still take
those loads as the masks' 4-byte ones.

For the flat rows of more than 64 4-byte words it also counts the shared-memory reads of
their fields (codes and payloads, two warp loads of the staged row a field) in the
chunk-at-a-time pass and in the 16-byte pass, and the wavefronts they take: a bank serves one
distinct word a wavefront (`flat_shared_reads`).

The counts follow the kernel's loads one by one, on the codes the reference codec gives each
word; they are a model of the access pattern, not a GPU measurement. What they leave out: the
staging of the row itself (the same in all), shared-memory traffic, and the output stores.
Array bases are taken as 256-byte aligned (CUDA allocations are). Raw rows load no metadata.

Tables: the synthetic kinds of ``benchmarks/fetch.py`` (512-byte float32 rows) and the real
tables of ``../shared/datasets`` (when present), each compressed with ``ibp_graph.compress``
defaults; up to ``--rows`` rows of each are counted (a seeded sample).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ibp_graph  # noqa: E402
from benchmarks import real_tables  # noqa: E402
from benchmarks._env import add_out, environment, header_lines, write_json_md  # noqa: E402
from benchmarks.fetch import KINDS, synthetic_block  # noqa: E402
from ibp_graph.codec import row_layout  # noqa: E402
from ibp_graph.dtypes import row_bytes, rows_to_words  # noqa: E402
from ibp_graph.kernels.fetch_decode import LAYOUT_TWO_RUNS, column_layouts  # noqa: E402

WARP = 32
SECTOR = 32
SYNTHETIC_ROW_BYTES = 512
SYNTHETIC_ROWS = 4096
VERSIONS = ("before", "after", "one_pass", "layouts", "spans")
LABELS = {
    "before": "before",
    "after": "after",
    "one_pass": "one pass",
    "layouts": "layouts",
    "spans": "spans",
}
LANE_BYTES = 16  # bytes of neighbouring words a lane takes in the spans pass
SUBS = 4  # 8-column subgroups of a 32-column chunk


@dataclass
class Loads:
    """Warp load instructions and sectors, summed over rows, per metadata array."""

    instructions: dict[str, int]
    sectors: dict[str, int]

    @classmethod
    def empty(cls) -> Loads:
        return cls({}, {})

    def add(self, name: str, instructions: int, sectors: int) -> None:
        self.instructions[name] = self.instructions.get(name, 0) + int(instructions)
        self.sectors[name] = self.sectors.get(name, 0) + int(sectors)


def sectors(addr: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Distinct 32-byte sectors of each warp load: ``addr`` ``(..., 32)`` byte addresses of its
    lanes, ``active`` which lanes load. Returns ``(...)`` counts."""
    s = np.where(active, addr // SECTOR, -1)
    s.sort(axis=-1)
    new = (s[..., 1:] != s[..., :-1]) & (s[..., 1:] >= 0)
    return new.sum(axis=-1) + (s[..., 0] >= 0)


@dataclass
class Rows:
    """The encoded rows of a table, lane by lane: ``(n, C, 32)`` arrays (j = 32 q + lane)."""

    v: int
    e: int
    word_bytes: int
    row_bytes: int  # output bytes of a row
    bit0: np.ndarray  # (n,) bit of a row's first field in its staging buffer (8 x start % 16)
    cluster: np.ndarray  # (n, 1, 1) cluster of each row
    col: np.ndarray  # (1, C, 32) column of each lane
    valid: np.ndarray  # (1, C, 32) lane < V
    code: np.ndarray  # (n, C, 32)
    escaped: np.ndarray  # (n, C, 32) code == escape
    two_runs: np.ndarray  # (n, C, 32) the column's free bits form at most two runs
    in_subgroup: np.ndarray  # (n, C, 32) the column's subgroup holds a code (grouped rows)
    grouped: np.ndarray  # (n, 1)
    empty: np.ndarray  # (n, C) grouped and the chunk holds no code
    free: np.ndarray  # (n, C) the chunk's columns have free bits (in the row's cluster)
    cluster_free: np.ndarray  # (n, 1) some column of the row's cluster has free bits

    @property
    def shape(self) -> tuple[int, int]:
        return self.code.shape[:2]


def lanes(table: ibp_graph.IBPTable, x: np.ndarray, ids: np.ndarray) -> Rows:
    """The `Rows` of rows ``ids`` of ``table`` (whose values are ``x``), raw rows left out."""
    params = table.params
    v, t = params.num_words, params.word_bytes
    offsets = table.offsets.astype(np.int64)
    raw = (offsets[ids + 1] - offsets[ids]) * table.align >= v * t
    ids = ids[~raw]
    # intp: the stored uint8 ids would wrap in the address arithmetic below.
    cluster = (
        np.zeros(ids.size, np.intp)
        if table.cluster_ids is None
        else table.cluster_ids[ids].astype(np.intp)
    )
    words = rows_to_words(x[ids], table.dtype_name, t)
    lay = row_layout(words, params, None if params.num_clusters == 1 else cluster)
    c = -(-v // WARP)
    pad = c * WARP - v

    def by_lane(a: np.ndarray) -> np.ndarray:
        return np.pad(a, ((0, 0), (0, pad))).reshape(a.shape[0], c, WARP)

    col = np.arange(c * WARP).reshape(1, c, WARP)
    escape = params.escape[cluster]  # (n, V)
    layouts = column_layouts(params.masks, params.code_bits, t)[cluster]
    free_bits = params.free_bits[cluster]
    grouped = lay.grouped[:, None]
    return Rows(
        v=v,
        e=params.max_entries,
        word_bytes=t,
        row_bytes=row_bytes(table.shape[1], table.dtype_name),
        bit0=8 * (offsets[ids] * table.align % 16),
        cluster=cluster.reshape(-1, 1, 1),
        col=col,
        valid=col < v,
        code=by_lane(lay.code.astype(np.int64)),
        escaped=by_lane(lay.code == escape),
        two_runs=by_lane((layouts & LAYOUT_TWO_RUNS) != 0),
        in_subgroup=by_lane(lay.code_w_grouped > 0),
        grouped=grouped,
        empty=grouped & ~lay.chunk,
        free=by_lane(free_bits).sum(axis=-1) > 0,
        cluster_free=free_bits.sum(axis=1, keepdims=True) > 0,
    )


def one_pass_rows(r: Rows) -> np.ndarray:
    """``(n, 1)``: rows that kernels ``one_pass`` and later decode in one pass (grouped,
    no free bit in the row's cluster)."""
    return r.grouped & ~r.cluster_free


def count(r: Rows, version: str) -> Loads:
    """The metadata loads ``decode_row`` issues for rows ``r`` in kernel ``version``."""
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
    n, c = r.shape
    code_major = version != "before"
    in_one_pass = version in ("one_pass", "layouts", "spans")
    # Rows decoded by decode_grouped_no_free ("one_pass" and later); the others take the
    # path of "after" (or "before").
    one = one_pass_rows(r) if in_one_pass else np.zeros((n, 1), bool)
    # Flat rows decoded 16 or 8 bytes of words a lane ("spans"; `flat_span_pass`).
    none = np.zeros((n, 1), bool)
    flat_lanes = flat_span_rows(r) if version == "spans" else none
    flat_lanes8 = flat_span8_rows(r) if version == "spans" else none
    two = ~one & ~flat_lanes & ~flat_lanes8
    grouped = np.broadcast_to(r.grouped, (n, c))
    shortcut = r.empty & ~r.free & two if code_major else np.zeros((n, c), bool)
    full = ~shortcut & two
    col0 = r.cluster * r.v + r.col  # column index into (k, V) arrays
    pre = r.cluster * (r.v + 1)  # row of the (k, V + 1) prefix sums
    t = r.word_bytes
    out = Loads.empty()

    def load(name: str, issued: np.ndarray, addr: np.ndarray, active: np.ndarray) -> None:
        """One warp load where ``issued`` (``(n, chunks)``): its lanes ``active`` read
        ``addr`` (both broadcast to ``(n, chunks, 32)``)."""
        got = sectors(np.broadcast_to(addr, (*issued.shape, WARP)), active & issued[..., None])
        out.add(name, issued.sum(), got[issued].sum())

    # Codes: a flat row loads every column's code prefix, and its width in a pass of its own
    # ("before") or with the payloads (below); a grouped row loads the widths of the columns
    # of subgroups with codes, in chunks that hold a code ("after") or in every chunk
    # ("before").
    flat = ~grouped & ~flat_lanes & ~flat_lanes8
    load("code_prefix", flat, 4 * (pre + r.col), r.valid)
    if version == "before":
        load("code_bits", flat, col0, r.valid)
    coded_pass = grouped & ~r.empty & two if code_major else grouped
    load("code_bits", coded_pass, col0, r.valid & r.in_subgroup)
    # Payloads and words.
    if code_major:
        # A grouped row: the cluster's free-bit total (the same word in every lane); where it
        # is not 0, an empty chunk's prefix sums at its two ends. Then, with no free bit, one
        # code-0 entry a lane.
        every = np.ones((1, 1, WARP), bool)
        once = np.zeros((n, c), bool)  # counted with the row's first chunk
        once[:, 0] = r.grouped[:, 0]
        load("free_prefix", once, 4 * (pre + r.v), every)
        j0 = r.col[..., :1]
        for at in (np.minimum(j0 + WARP, r.v), j0):
            load("free_prefix", r.empty & r.cluster_free, 4 * (pre + at), every)
        load("bitvals", shortcut, t * (r.cluster * r.e * r.v + r.col), r.valid)
    if version in ("layouts", "spans"):
        # A layout word a lane; the mask only where a payload is deposited into free bits in
        # three runs or more (a warp load when some lane does, those lanes active).
        load("layouts", full, 4 * col0, r.valid)
        looped = r.valid & ~r.escaped & ~r.two_runs
        load("masks", full & looped.any(axis=-1), t * col0, looped)
    else:
        load("code_bits", full, col0, r.valid)
        load("masks", full, t * col0, r.valid)
    no_escape = ~(r.escaped & r.valid).any(axis=-1)
    load("free_prefix", full & no_escape, 4 * (pre + np.minimum(r.col + 1, r.v)), r.valid)
    if code_major:
        entry = (r.cluster * r.e + r.code) * r.v + r.col
    else:
        entry = col0 * r.e + r.code
    load("bitvals", full, t * entry, r.valid & ~r.escaped)
    if in_one_pass:
        # Before the chunks, lane q on chunk q (32 chunks an iteration): for each subgroup g that
        # holds codes, the code-width prefix sums at its two ends. The warp issues the pair
        # for g when any lane has subgroup bit g, those lanes active.
        h = -(-c // WARP)
        sub = r.in_subgroup.reshape(n, c, SUBS, WARP // SUBS).any(axis=-1)  # (n, C, 4)
        sub = np.pad(sub & one[..., None], ((0, 0), (0, h * WARP - c), (0, 0)))
        sub = sub.reshape(n, h, WARP, SUBS)
        q = np.arange(h * WARP).reshape(1, h, WARP)
        for g in range(SUBS):
            bit = sub[..., g]
            lo = WARP * q + (WARP // SUBS) * g
            for at in (np.minimum(lo + WARP // SUBS, r.v), lo):
                load("code_prefix", bit.any(axis=-1), 4 * (pre + at), bit)
        # Chunk pass: a chunk with no code is its code-0 entries; one with codes loads the
        # widths of its subgroups' columns, then the entries of the words that do not escape.
        # "spans": so for rows with fewer than half their chunks holding codes; the others
        # take the spans pass.
        chunked = one
        if version == "spans":
            spanned = span_rows(r)
            span_pass(r, spanned, load)
            chunked = one & ~spanned
        load("bitvals", r.empty & chunked, t * (r.cluster * r.e * r.v + r.col), r.valid)
        coded = ~r.empty & chunked
        load("code_bits", coded, col0, r.valid & r.in_subgroup)
        load("bitvals", coded, t * entry, r.valid & ~r.escaped)
    if version == "spans":
        flat_span_pass(r, flat_lanes, load)
        flat_span_pass(r, flat_lanes8, load, 8)
    return out


def _aligned_rows(r: Rows, size: int = LANE_BYTES) -> np.ndarray:
    """``(n, 1)``: row i's output, written at position i, starts ``size``-byte aligned."""
    return (np.arange(r.shape[0]) * r.row_bytes % size == 0)[:, None]


def flat_span_rows(r: Rows) -> np.ndarray:
    """``(n, 1)``: rows that kernel ``spans`` decodes 16 bytes of words a lane in decode_row:
    flat, of more than 64 words, the output row 16-byte aligned (row i taken as written at
    position i)."""
    return ~r.grouped & (r.v > 2 * WARP) & _aligned_rows(r)


def flat_span8_rows(r: Rows) -> np.ndarray:
    """``(n, 1)``: rows that kernel ``spans`` decodes 8 bytes of words a lane in decode_row:
    flat, of more than 32 four-byte words, the output row 8-byte aligned, and not taken by the
    16-byte pass (`flat_span_rows`)."""
    if r.word_bytes != 4:
        return np.zeros((r.shape[0], 1), bool)
    return ~r.grouped & (r.v > WARP) & _aligned_rows(r, 8) & ~flat_span_rows(r)


def _lane_words(
    r: Rows, lane_bytes: int = LANE_BYTES
) -> tuple[int, int, np.ndarray, np.ndarray, Callable]:
    """The columns of lanes of ``lane_bytes`` (16 or 8) of words: ``(K, S, j, in_row, at)``,
    K words a lane and S steps of 32 lanes, ``j`` ``(1, S, 32, K)`` the column of word i of
    lane l of step s, ``in_row`` where it is below V, and ``at(a)`` an ``(n, C, 32)``
    per-column array taken at ``j`` (0 outside the row)."""
    k = lane_bytes // r.word_bytes
    n, c = r.shape
    steps = -(-r.v // (WARP * k))
    j = (
        WARP * k * np.arange(steps)[None, :, None, None]
        + k * np.arange(WARP)[None, None, :, None]
        + np.arange(k)[None, None, None, :]
    )
    in_row = j < r.v
    jc = np.minimum(j, c * WARP - 1)
    rows_n = np.arange(n)[:, None, None, None]

    def at(a: np.ndarray) -> np.ndarray:
        flat = np.broadcast_to(a, (n, c, WARP)).reshape(n, c * WARP)
        return np.where(in_row, flat[rows_n, jc], 0).astype(a.dtype)

    return k, steps, j, in_row, at


def _lane_loads(
    load, name: str, step: np.ndarray, vec: np.ndarray, words: np.ndarray, addr: np.ndarray
) -> None:
    """A lane's loads of ``name`` in a step of the 16-byte passes (issued where ``step``,
    ``(n, S)``): the lanes ``vec`` (``(n, S, 32)``) load their K words in one warp load, the
    others each word i they need (``words`` ``(n, S, 32, K)``) in a warp load of its own.
    ``addr`` ``(n, S, 32, K)``: each word's byte address. ``load``: `count`'s."""
    lanes = words.any(axis=-1)
    whole = vec & lanes
    load(name, step & whole.any(axis=-1), addr[..., 0], whole)
    rest = ~vec & lanes
    for i in range(addr.shape[-1]):
        load(name, step & rest.any(axis=-1), addr[..., i], rest & words[..., i])


def flat_span_pass(r: Rows, rows: np.ndarray, load, lane_bytes: int = LANE_BYTES) -> None:
    """The flat rows ``rows`` (``(n, 1)`` bool) of kernel "spans", ``lane_bytes`` (16 or 8) of
    words a lane: per step of 32 lanes, each lane's K layout words (one load for a lane whose
    K columns are
    all in the row where the cluster's layout words are aligned, else one a word), its first
    column's code prefix (its codes are one field), then for each word i the entry of the
    words that do not escape and the mask of those deposited into free bits of three runs or
    more (a warp load where some lane has one). No free-bit prefix sums: a warp scan of the
    lanes' payload bits places them. ``load``: `count`'s."""
    t = r.word_bytes
    n, c = r.shape
    v = r.v
    k, steps, j, in_row, at = _lane_words(r, lane_bytes)
    cluster = r.cluster.reshape(-1, 1, 1, 1)
    step = np.broadcast_to(rows, (n, steps)) & in_row.any(axis=(-2, -1))
    whole = np.broadcast_to(in_row.all(axis=-1), (n, steps, WARP))
    lane_in = np.broadcast_to(in_row.any(axis=-1), (n, steps, WARP))
    col = cluster * v + j  # index into (k, V) arrays
    vec = whole & (4 * col[..., :1, :1, 0] % (4 * k) == 0)
    words = np.broadcast_to(in_row, (n, *in_row.shape[1:]))
    _lane_loads(load, "layouts", step, vec, words, 4 * col)
    pre = r.cluster * (v + 1)  # (n, 1, 1)
    load("code_prefix", step, 4 * (pre + j[..., 0]), lane_in)
    escaped = at(r.escaped & r.valid) & in_row
    looped = at(r.valid & ~r.escaped & ~r.two_runs) & in_row
    entry = t * ((cluster * r.e + at(r.code)) * v + j)
    for i in range(k):
        load("bitvals", step, entry[..., i], in_row[..., i] & ~escaped[..., i])
        load("masks", step & looped[..., i].any(axis=-1), t * col[..., i], looped[..., i])


def span_rows(r: Rows) -> np.ndarray:
    """``(n, 1)``: rows that kernel ``spans`` decodes 16 bytes of words a lane: decoded in one
    pass, at least half their chunks holding codes, the output row 16-byte aligned (row i
    taken as written at position i)."""
    c = r.shape[1]
    dense = 2 * (~r.empty).sum(axis=1, keepdims=True) >= c
    return one_pass_rows(r) & _aligned_rows(r) & dense


def span_pass(r: Rows, rows: np.ndarray, load) -> None:
    """The spans pass of kernel "spans" over rows ``rows`` (``(n, 1)`` bool; their output is
    16-byte aligned): each lane takes K = `LANE_BYTES` / T neighbouring columns, j = 32 K s +
    K l + i (lane l of step s, word i). Every step loads the lanes' code-0 entries: one
    16-byte load for the lanes whose K columns are all in the row, one load a word for the
    lane that has fewer. A step where some lane's columns have codes loads those lanes' code
    widths (likewise one load, or one a word), then, where some lane has a word of another
    code than 0 that does not escape, word i's entry for i = 0..K-1. ``load``: `count`'s."""
    t = r.word_bytes
    n, c = r.shape
    v = r.v
    k, steps, j, in_row, at = _lane_words(r)
    coded = at(r.in_subgroup & r.valid) & in_row
    escaped = at(r.escaped & r.valid) & in_row
    other = (at(r.code) != 0) & ~escaped & coded
    cluster = r.cluster.reshape(-1, 1, 1, 1)
    step = np.broadcast_to(rows, (n, steps)) & in_row.any(axis=(-2, -1))
    whole = np.broadcast_to(in_row.all(axis=-1), (n, steps, WARP))
    code0 = t * (cluster * r.e * v + j)  # byte address of the column's code-0 entry
    widths = cluster * v + j  # byte address of its code width
    # Whole lanes load K entries (K widths) at once where the row's cluster's dictionaries
    # (code widths) start 16-byte (K-byte) aligned.
    vec_in = whole & (code0[..., :1, :1, 0] % 16 == 0)
    vec_w = whole & (widths[..., :1, :1, 0] % k == 0)
    has_code = step & coded.any(axis=(-2, -1))
    # Code-0 entries, then code widths where some lane's columns have codes.
    words = np.broadcast_to(in_row, (n, *in_row.shape[1:]))
    _lane_loads(load, "bitvals", step, vec_in, words, code0)
    _lane_loads(load, "code_bits", has_code, vec_w, coded, widths)
    entries = t * ((cluster * r.e + at(r.code)) * v + j)
    voted = has_code & other.any(axis=(-2, -1))
    for i in range(k):
        load("bitvals", voted, entries[..., i], other[..., i])


def wavefronts(words: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Shared-memory wavefronts of each warp load of 4-byte words: ``words`` ``(..., 32)``
    the word each lane reads, ``active`` which lanes read. Lanes reading one word share it; a
    bank (word % 32) serves one word a wavefront. Returns ``(...)`` counts (0: no lane)."""
    w = np.sort(np.where(active, words, -1), axis=-1)
    new = np.ones(w.shape, bool)
    new[..., 1:] = w[..., 1:] != w[..., :-1]
    banks = np.where(new & (w >= 0), w % WARP, WARP)
    per_bank = (banks[..., None] == np.arange(WARP)).sum(axis=-2)
    return per_bank.max(axis=-1)


def flat_shared_reads(r: Rows, params) -> dict:
    """The shared-memory reads of the fields of flat rows of more than 64 words, in the
    chunk-at-a-time pass and in the 16-byte pass (``flat_span_pass``), on the same rows:
    ``{"rows", "chunk_loads", "chunk_wavefronts", "span_loads", "span_wavefronts"}`` (totals).
    Each field read (`read_bits`, `read_word` of 4-byte words) is two warp loads of the
    staged words at the field's bit and 32 bits on. A chunk reads each lane's code (at the
    column's code prefix) and payload; a step of the 16-byte pass reads each lane's codes as
    one field (at its first column's code prefix) and its K payloads one after another. The
    payloads follow the codes, each its column's free bits wide, or T x 8 escaped."""
    rows = np.flatnonzero(~r.grouped[:, 0]) if r.v > 2 * WARP else np.zeros(0, int)
    out = dict.fromkeys(("chunk_loads", "chunk_wavefronts", "span_loads", "span_wavefronts"), 0)
    out["rows"] = int(rows.size)
    if rows.size == 0 or r.word_bytes != 4:
        return out
    v, n = r.v, rows.size
    k = LANE_BYTES // r.word_bytes
    cluster = r.cluster[rows, 0, 0]
    code_w = params.code_bits[cluster].astype(np.int64)  # (n, V)
    escaped = r.escaped[rows].reshape(n, -1)[:, :v]
    width = np.where(escaped, 32, params.free_bits[cluster].astype(np.int64))
    code_at = (r.bit0[rows] + 1)[:, None]  # the flat row's codes follow its grouped bit
    code_pos = code_at + np.cumsum(code_w, axis=1) - code_w
    payload_pos = code_at + code_w.sum(axis=1, keepdims=True) + np.cumsum(width, axis=1) - width

    def reads(pos: np.ndarray, active: np.ndarray) -> tuple[int, int]:
        """Loads and wavefronts of field reads at bit ``pos`` ``(n, L, 32)``."""
        word = pos // 32
        issued = active.any(axis=-1)
        waves = wavefronts(word, active) + wavefronts(word + 1, active)
        return int(2 * issued.sum()), int(waves.sum())

    c = -(-v // WARP)
    col = np.arange(c * WARP).reshape(c, WARP)
    act = np.broadcast_to(col < v, (n, c, WARP))
    colc = np.minimum(col, v - 1)
    totals = [reads(code_pos[:, colc], act), reads(payload_pos[:, colc], act)]
    out["chunk_loads"] = sum(t[0] for t in totals)
    out["chunk_wavefronts"] = sum(t[1] for t in totals)
    steps = -(-v // (WARP * k))
    first = (WARP * k * np.arange(steps))[:, None] + k * np.arange(WARP)  # (S, 32)
    lane_in = np.broadcast_to(first < v, (n, steps, WARP))
    totals = [reads(code_pos[:, np.minimum(first, v - 1)], lane_in)]
    for i in range(k):
        coli = first + i
        totals.append(
            reads(payload_pos[:, np.minimum(coli, v - 1)], np.broadcast_to(coli < v, lane_in.shape))
        )
    out["span_loads"] = sum(t[0] for t in totals)
    out["span_wavefronts"] = sum(t[1] for t in totals)
    return out


def measure(name: str, x: np.ndarray, tmp: Path, rows: int, seed: int) -> dict:
    """Counts of every version for up to ``rows`` rows of table ``x`` (compressed here)."""
    table = ibp_graph.compress(x, tmp / "t.ibp", progress=False)
    params = table.params
    layouts = column_layouts(params.masks, params.code_bits, params.word_bytes)
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    ids = np.sort(rng.choice(n, min(rows, n), replace=False))
    r = lanes(table, x, ids)
    encoded, c = r.shape
    result = {
        "table": name,
        "shape": list(x.shape),
        "dtype": x.dtype.name,
        "ratio": table.ratio,
        "rows_counted": int(ids.size),
        "rows_raw": int(ids.size - encoded),
        "rows_grouped": int(r.grouped.sum()),
        "rows_one_pass": int(one_pass_rows(r).sum()),
        "rows_spans": int(span_rows(r).sum() + flat_span_rows(r).sum() + flat_span8_rows(r).sum()),
        "columns": int(params.masks.size),
        "columns_many_runs": int((layouts & LAYOUT_TWO_RUNS == 0).sum()),
        "chunks_per_row": c,
        "chunks_empty_no_free": int((r.empty & ~r.free).sum()),
        "chunks_empty_free": int((r.empty & r.free).sum()),
        "dictionary_entries": r.e,
    }
    for version in VERSIONS:
        loads = count(r, version) if encoded else Loads.empty()
        result[version] = {"instructions": loads.instructions, "sectors": loads.sectors}
    result["flat_shared_reads"] = flat_shared_reads(r, params)
    table.close()
    return result


def tables(real: bool) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    width = SYNTHETIC_ROW_BYTES
    out = [(f"{k}-{width}B", synthetic_block(k, width, SYNTHETIC_ROWS, rng)) for k in KINDS]
    if real and real_tables.available():
        out += [(name, x) for name, x, _ in real_tables.load_all()]
    return out


def per_row(r: dict, version: str, what: str) -> float:
    encoded = r["rows_counted"] - r["rows_raw"]
    total = sum(r[version][what].values())
    return total / encoded if encoded else 0.0


def _fewer(base: float, new: float) -> str:
    """``new`` against ``base``: " (1.22x fewer)", " (1.04x more)", " (same)"; nothing for 0."""
    if not new:
        return ""
    if new == base:
        return " (same)"
    if new < base:
        return f" ({base / new:.2f}x fewer)"
    return f" ({new / base:.2f}x more)"


def _compared(values: list[float]) -> str:
    """The versions' values, ``|``-separated, each after the first against the one before it:
    "22 | 18 (1.22x fewer) | 18 (same) | 16 (1.12x fewer)"."""
    cells = [f"{values[0]:.0f}"]
    cells += [
        f"{new:.0f}{_fewer(base, new)}" for base, new in zip(values[:-1], values[1:], strict=True)
    ]
    return " | ".join(cells)


def markdown(env: dict, rows: list[dict]) -> str:
    versions = [LABELS[v] for v in VERSIONS]
    cols = " | ".join(
        f"{what} {versions[0]} | {' | '.join(versions[1:])}"
        for what in ("loads/row", "sectors/row", "dictionary sectors/row")
    )
    lines = [
        *header_lines("Fused decoder: metadata loads per row (counted, no GPU)", env),
        "Warp-wide global loads of table metadata that `decode_row` (`cuda/fetch_decode.cu`)",
        "issues per encoded row, and the 32-byte sectors they touch, on the codes the",
        "reference codec gives each word of real rows, in five versions of the kernel.",
        "`before`: dictionaries column-major and every chunk decoded in full. `after`:",
        "dictionaries code-major, chunks of grouped rows with no code and no free bit written",
        "from their code-0 entries, and a flat row's codes read in the payloads' pass.",
        "`one pass`: as `after`, except that a grouped row whose cluster",
        "has no free bit is decoded in a single pass over its chunks (`decode_grouped_no_free`):",
        "its codes' total width from code-width prefix sums read before its chunks, then per",
        "chunk with codes one load of code widths and one of entries, no masks and no free-bit",
        "prefix sums. `layouts`: as `one pass`, except in the chunks",
        "decoded through free-bit prefix sums or a warp scan of the payload widths (every chunk",
        "of a flat row; of a grouped row whose cluster has free bits, every chunk but those with",
        "neither a code nor a free bit). There a lane loads its column's layout word (code",
        "width, free-bit count, and where the free bits lie when they form at most two runs)",
        "instead of its code width and its mask, and a mask is loaded only for words that do",
        "not escape and whose column's free bits form three runs or more (a word of two float16",
        "values, for one: mask `0x7c007c00`); such a table still loads its masks, and its",
        "layout words (4 bytes a column, not 1) touch more sectors than its code widths.",
        "`spans` (the current kernel): as `layouts`, except for rows whose output row is",
        "16-byte aligned (the rows counted taken as written at positions 0, 1, ...) and that",
        "are decoded in one pass with at least half their chunks holding codes, or flat and of",
        "more than 64 words: there each lane takes 16 bytes of neighbouring words. Per 32",
        "lanes, a one-pass row loads a lane's code-0 entries in one 16-byte load, its code",
        "widths in one load where its subgroup holds codes, and the entries of its words of",
        "another code than 0 that do not escape (one warp load a word); a flat row loads a",
        "lane's layout words in one load, its first column's code prefix, and each word's",
        "entry (and mask, for free bits in three runs or more), and no free-bit prefix sums.",
        "In parentheses: each version against the one before it.",
        "A model of the kernel's access pattern, not a GPU measurement; the `profile` stage of",
        "`benchmarks/gpu_session.sh` measures instructions and sectors per row on a GPU.",
        "",
        f"| table | ratio | chunks/row | empty chunks, no free bit | rows in one pass "
        f"| rows 16 bytes a lane (`spans`) | {cols} |",
        "|---|---|---|---|---|---|" + "---|" * (3 * len(VERSIONS)),
    ]
    for r in rows:
        encoded = r["rows_counted"] - r["rows_raw"]
        chunks = encoded * r["chunks_per_row"]
        share = r["chunks_empty_no_free"] / chunks if chunks else 0.0
        one = r["rows_one_pass"] / encoded if encoded else 0.0
        spans = r["rows_spans"] / encoded if encoded else 0.0
        ins = [per_row(r, v, "instructions") for v in VERSIONS]
        sec = [per_row(r, v, "sectors") for v in VERSIONS]
        dic = [r[v]["sectors"].get("bitvals", 0) / encoded if encoded else 0.0 for v in VERSIONS]
        lines.append(
            f"| {r['table']} | {r['ratio']:.1f} | {r['chunks_per_row']} | {share:.0%} "
            f"| {one:.0%} | {spans:.0%} | {_compared(ins)} | {_compared(sec)} "
            f"| {' | '.join(f'{d:.0f}' for d in dic)} |"
        )
    many = [
        f"`{r['table']}` ({r['columns_many_runs']} of {r['columns']})"
        for r in rows
        if r["columns_many_runs"]
    ]
    if many:
        lines += ["", f"Columns whose free bits form three runs or more: {', '.join(many)}."]
    flat = [r for r in rows if r.get("flat_shared_reads", {}).get("rows")]
    flat = [r for r in flat if r["flat_shared_reads"]["chunk_loads"]]
    if flat:
        lines += [
            "",
            "Shared-memory reads of the fields (codes and payloads) of flat rows of more than 64",
            "4-byte words, per row, in the chunk-at-a-time pass and in the 16-byte pass on the",
            "same rows: warp loads of the staged row, and their wavefronts (the distinct words a",
            "bank serves; lanes reading one word share it), counted on the rows' fields.",
            "",
            "| table | flat rows | loads/row chunks | 16 bytes a lane | wavefronts/row chunks "
            "| 16 bytes a lane |",
            "|---|---|---|---|---|---|",
        ]
        for r in flat:
            f = r["flat_shared_reads"]
            m = f["rows"]
            lines.append(
                f"| {r['table']} | {m} | {f['chunk_loads'] / m:.1f} | {f['span_loads'] / m:.1f} "
                f"| {f['chunk_wavefronts'] / m:.1f} | {f['span_wavefronts'] / m:.1f} |"
            )
    lines += [
        "",
        "Rows counted per table, rows stored raw (no metadata loads; left out of the per-row",
        "figures), dictionary entries per column, and the columns (of all clusters) whose free",
        "bits form three runs or more are in the JSON file; there, loads and sectors are totals",
        "over the counted rows, per metadata array.",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2000, help="rows counted per table (a sample)")
    add_out(p)
    p.add_argument("--no-real", action="store_true", help="synthetic tables only")
    args = p.parse_args(argv)
    if args.rows < 1:
        p.error(f"--rows must be at least 1, got {args.rows}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    env = environment()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, x) in enumerate(tables(not args.no_real)):
            print(f"{name} ...", file=sys.stderr, flush=True)
            rows.append(measure(name, x, Path(tmp), args.rows, seed=i))
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {**env, "results": rows}
    print(
        write_json_md(
            "decode-loads-cpu", payload, lambda: markdown(env, rows), args.out
        ).read_text()
    )


if __name__ == "__main__":
    main()
