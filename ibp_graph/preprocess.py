"""Preprocessing: from a sample of rows to codec parameters.

For each column (word position) the candidates are: the invariant-bit mask at each
threshold of the sweep (bits equal to their majority value in at least that fraction of the
rows), the sign+exponent field mask (floating types), and the full-word mask; each with a
dictionary of its 1, 3, 7 or 15 most frequent masked values (code widths 1..4). A column
takes the candidate with the fewest expected bits. Whole-table options (one threshold for all
columns, or the best candidate per column) are then scored by the exact encoded size of the
sample, alignment and headers included, and the smallest wins. With k clusters, rows are
seeded by k-means++ on Hamming distance and refined Lloyd-style by exact encoded size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .bitops import popcount
from .codec import (
    MAX_CODE_BITS,
    MAX_ENTRIES,
    CodecParams,
    code_presence,
    stored_sizes,
)
from .dtypes import WORD_DTYPES, field_mask_word

THRESHOLDS: tuple[float, ...] = (0.70, 0.75, 0.80, 0.85, 0.90, 0.95)
#: Default number of sample rows, and the cap on sample words (rows x V).
DEFAULT_SAMPLE_ROWS = 65536
SAMPLE_WORD_CAP = 1 << 21
LLOYD_ITERATIONS = 4


def bit_census(words: np.ndarray) -> np.ndarray:
    """Count of set bits per column and bit position, ``(V, T*8)`` int64."""
    nbits = words.dtype.itemsize * 8
    ones = np.empty((words.shape[1], nbits), dtype=np.int64)
    for p in range(nbits):
        ones[:, p] = np.count_nonzero((words >> words.dtype.type(p)) & words.dtype.type(1), axis=0)
    return ones


def threshold_mask(ones: np.ndarray, rows: int, threshold: float, wdtype: np.dtype) -> np.ndarray:
    """Mask of the bits equal to their majority value in at least ``threshold`` of the rows."""
    nbits = ones.shape[1]
    majority = np.maximum(ones, rows - ones)
    invariant = majority >= threshold * rows
    weights = (np.ones(1, dtype=np.uint64) << np.arange(nbits, dtype=np.uint64)).astype(wdtype)
    return (invariant.astype(wdtype) * weights).sum(axis=1, dtype=wdtype)


def top_values(words: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 15 most frequent values of ``words & mask`` per column, with their counts.

    Ties go to the smaller value. Columns with fewer distinct values are zero-padded.
    Returns ``(values (V, 15) words, counts (V, 15) int64)``.
    """
    s, v = words.shape
    vals = np.zeros((v, MAX_ENTRIES), dtype=words.dtype)
    counts = np.zeros((v, MAX_ENTRIES), dtype=np.int64)
    if s == 0:
        return vals, counts
    col_sorted = np.sort((words & mask).T, axis=1)  # (V, s)
    new_run = np.ones((v, s), dtype=bool)
    new_run[:, 1:] = col_sorted[:, 1:] != col_sorted[:, :-1]
    starts = np.flatnonzero(new_run.ravel())
    lengths = np.diff(np.append(starts, v * s))
    run_col = starts // s
    run_val = col_sorted.ravel()[starts]
    order = np.lexsort((-lengths, run_col))
    run_col = run_col[order]
    first = np.searchsorted(run_col, np.arange(v))
    rank = np.arange(order.size) - first[run_col]
    keep = rank < MAX_ENTRIES
    vals[run_col[keep], rank[keep]] = run_val[order][keep]
    counts[run_col[keep], rank[keep]] = lengths[order][keep]
    return vals, counts


@dataclass
class _Candidate:
    """Top values of one mask per column."""

    mask: np.ndarray  # (V,)
    vals: np.ndarray  # (V, 15)
    counts: np.ndarray  # (V, 15)
    kind: int


KIND_NAMES = ("threshold", "sign_exponent", "full_word")


@dataclass
class _Census:
    """Everything the column choice needs from one set of sample rows."""

    rows: int
    by_threshold: dict[float, _Candidate]
    fixed: list[_Candidate] = field(default_factory=list)


def _census(words: np.ndarray, dtype_name: str) -> _Census:
    s, v = words.shape
    wd = words.dtype
    ones = bit_census(words)
    by_th: dict[float, _Candidate] = {}
    seen: dict[bytes, _Candidate] = {}
    for th in THRESHOLDS:
        m = threshold_mask(ones, s, th, wd)
        key = m.tobytes()
        if key not in seen:
            seen[key] = _Candidate(m, *top_values(words, m), kind=0)
        by_th[th] = seen[key]
    fixed = []
    fmask = field_mask_word(dtype_name, wd.itemsize, np.arange(v))
    if fmask.any():
        fixed.append(_Candidate(fmask, *top_values(words, fmask), kind=1))
    full = np.full(v, np.iinfo(wd).max, dtype=wd)
    fixed.append(_Candidate(full, *top_values(words, full), kind=2))
    return _Census(rows=s, by_threshold=by_th, fixed=fixed)


@dataclass
class ColumnChoice:
    """One cluster's chosen parameters: ``mask``, ``code_bits``, ``bitvals`` and kinds."""

    mask: np.ndarray
    code_bits: np.ndarray
    bitvals: np.ndarray
    kind: np.ndarray


def choose_columns(
    census: _Census, word_bytes: int, thresholds: tuple[float, ...], presence: np.ndarray
) -> ColumnChoice:
    """Pick per column the candidate (mask, code width) with the fewest expected bits."""
    cands = [census.by_threshold[t] for t in thresholds] + census.fixed
    s = census.rows
    tbits = word_bytes * 8
    best_cost = None
    for cand in cands:
        free = tbits - popcount(cand.mask)
        hits_cum = np.cumsum(cand.counts, axis=1)
        for b in range(1, MAX_CODE_BITS + 1):
            hits = hits_cum[:, (1 << b) - 2]
            cost = presence * b * s + hits * free + (s - hits) * tbits
            if best_cost is None:
                best_cost = cost.astype(np.float64)
                v = cost.shape[0]
                pick_mask = cand.mask.copy()
                pick_b = np.full(v, b, dtype=np.uint8)
                pick_vals = np.zeros((v, MAX_ENTRIES), dtype=cand.vals.dtype)
                pick_vals[:, : (1 << b) - 1] = cand.vals[:, : (1 << b) - 1]
                pick_kind = np.full(v, cand.kind, dtype=np.uint8)
                continue
            better = cost < best_cost
            if not better.any():
                continue
            best_cost[better] = cost[better]
            pick_mask[better] = cand.mask[better]
            pick_b[better] = b
            vals = np.zeros_like(pick_vals[better])
            vals[:, : (1 << b) - 1] = cand.vals[better, : (1 << b) - 1]
            pick_vals[better] = vals
            pick_kind[better] = cand.kind
    return ColumnChoice(pick_mask, pick_b, pick_vals, pick_kind)


def _params(choices: list[ColumnChoice], word_bytes: int) -> CodecParams:
    return CodecParams(
        word_bytes=word_bytes,
        masks=np.stack([c.mask for c in choices]),
        code_bits=np.stack([c.code_bits for c in choices]),
        bitvals=np.stack([c.bitvals for c in choices]),
    )


@dataclass
class FitResult:
    """Parameters chosen by `fit`, with what the choice was based on."""

    params: CodecParams
    threshold: float | str
    sample_rows: int
    sample_stored_bytes: int
    column_kinds: dict[str, int]
    code_bits_hist: dict[str, int]


def _kmeanspp(words: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding on Hamming distance; returns the nearest seed of each row."""
    s = words.shape[0]
    seeds = [int(rng.integers(s))]
    dist = popcount(words ^ words[seeds[0]]).sum(axis=1).astype(np.float64)
    for _ in range(1, k):
        total = dist.sum()
        nxt = int(rng.choice(s, p=dist / total)) if total > 0 else int(rng.integers(s))
        seeds.append(nxt)
        dist = np.minimum(dist, popcount(words ^ words[nxt]).sum(axis=1))
    d = np.stack([popcount(words ^ words[i]).sum(axis=1) for i in seeds])
    return np.argmin(d, axis=0)


def _choose_all(
    words: np.ndarray,
    assign: np.ndarray,
    k: int,
    censuses: list[_Census | None],
    thresholds: tuple[float, ...],
    presence: list[np.ndarray],
    fallback: list[ColumnChoice] | None,
    word_bytes: int,
) -> list[ColumnChoice]:
    out = []
    for c in range(k):
        census = censuses[c]
        if census is None:
            out.append(fallback[c] if fallback else out[0])
            continue
        out.append(choose_columns(census, word_bytes, thresholds, presence[c]))
    return out


def fit(
    sample: np.ndarray,
    dtype_name: str,
    *,
    clusters: int = 1,
    threshold: float | str = "auto",
    align: int = 16,
    seed: int = 0,
) -> FitResult:
    """Choose codec parameters from ``(s, V)`` sample words.

    Args:
        sample: sample rows as words (uint32 or uint64).
        dtype_name: element type of the table (decides the sign+exponent candidate).
        clusters: k, number of clusters (1..255).
        threshold: "auto" for the sweep, or one threshold in (0.5, 1].
        align: row alignment, used in the exact size score.
        seed: seed of the cluster initialisation.
    """
    word_bytes = sample.dtype.itemsize
    if word_bytes not in WORD_DTYPES:
        raise ValueError(f"sample words must be uint32 or uint64, got {sample.dtype}")
    s, v = sample.shape
    k = max(1, min(int(clusters), s))
    if threshold == "auto":
        options: list[tuple[float, ...]] = [(t,) for t in THRESHOLDS] + [THRESHOLDS]
    else:
        options = [(float(threshold),)]
    rng = np.random.default_rng(seed)
    assign = np.zeros(s, dtype=np.intp) if k == 1 else _kmeanspp(sample, k, rng)

    def censuses_for(a: np.ndarray) -> list[_Census | None]:
        out: list[_Census | None] = []
        for c in range(k):
            rows = sample[a == c]
            out.append(_census(rows, dtype_name) if rows.shape[0] else None)
        return out

    def score(choices: list[ColumnChoice]) -> tuple[int, np.ndarray, CodecParams]:
        params = _params(choices, word_bytes)
        if k == 1:
            sizes = stored_sizes(sample, params, align)[None]
        else:
            sizes = np.stack(
                [stored_sizes(sample, params, align, np.full(s, c)) for c in range(k)]
            )
        best = np.argmin(sizes, axis=0)
        return int(sizes.min(axis=0).sum()), best, params

    if threshold != "auto" and float(threshold) not in THRESHOLDS:
        extra = float(threshold)
        if not 0.5 < extra <= 1.0:
            raise ValueError(f"threshold must be 'auto' or a number in (0.5, 1], got {threshold}")

    ones_q = [np.ones(v) for _ in range(k)]
    censuses = censuses_for(assign)
    if threshold != "auto":
        _add_threshold(censuses, sample, assign, float(threshold))

    choices = None
    if k > 1:
        for _ in range(LLOYD_ITERATIONS):
            choices = _choose_all(
                sample, assign, k, censuses, options[-1], ones_q, choices, word_bytes
            )
            _, new_assign, _ = score(choices)
            if np.array_equal(new_assign, assign):
                break
            assign = new_assign
            censuses = censuses_for(assign)
            if threshold != "auto":
                _add_threshold(censuses, sample, assign, float(threshold))

    best: tuple[int, float | str, list[ColumnChoice], CodecParams] | None = None
    for opt in options:
        ch = _choose_all(sample, assign, k, censuses, opt, ones_q, choices, word_bytes)
        total, _, params = score(ch)
        label: float | str = opt[0] if len(opt) == 1 else "per-column"
        if best is None or total < best[0]:
            best = (total, label, ch, params)
    assert best is not None
    # Second pass: weigh code bits by how often codes are actually written.
    presence = [
        code_presence(sample[assign == c], best[3], c) if censuses[c] else ones_q[c]
        for c in range(k)
    ]
    label_opt = options[-1] if best[1] == "per-column" else (float(best[1]),)
    ch = _choose_all(sample, assign, k, censuses, label_opt, presence, best[2], word_bytes)
    total, _, params = score(ch)
    if total < best[0]:
        best = (total, best[1], ch, params)
    total, label, ch, params = best
    kinds = np.concatenate([c.kind for c in ch])
    bits = np.concatenate([c.code_bits for c in ch])
    return FitResult(
        params=params,
        threshold=label,
        sample_rows=s,
        sample_stored_bytes=total,
        column_kinds={n: int(np.count_nonzero(kinds == i)) for i, n in enumerate(KIND_NAMES)},
        code_bits_hist={str(b): int(np.count_nonzero(bits == b)) for b in range(1, 5)},
    )


def _add_threshold(censuses: list[_Census | None], sample, assign, th: float) -> None:
    """Add a user-given threshold that is not on the sweep grid to each census."""
    for c, census in enumerate(censuses):
        if census is None or th in census.by_threshold:
            continue
        rows = sample[assign == c]
        m = threshold_mask(bit_census(rows), rows.shape[0], th, rows.dtype)
        census.by_threshold[th] = _Candidate(m, *top_values(rows, m), kind=0)
