"""Preprocessing: from a sample of rows to codec parameters.

For each column (word position) the candidates are: the invariant-bit mask at each
threshold of the sweep (bits equal to their majority value in at least that fraction of the
rows), the sign+exponent field mask (floating types), and the full-word mask; each with a
dictionary of its 1, 3, 7 or 15 most frequent masked values (code widths 1..4). A column
takes the candidate with the fewest expected bits. Whole-table options (one threshold for all
columns, or the best candidate per column) are then scored by the exact encoded size of the
sample, alignment and headers included, and the smallest wins. With k clusters, rows are
seeded by k-means++ on Hamming distance and refined Lloyd-style by exact encoded size.

The fit can advance a progress bar (a ``tqdm``) over its work, counted in sample rows passed
through a step: a bit census or a candidate's dictionary over a cluster's rows, a distance to
a k-means++ seed, the exact encoding of the sample with one cluster's parameters. `fit_work`
gives the most it can be; work that turns out not to be needed (Lloyd iterations after
convergence, narrower dictionary caps than the widest code) is taken off the bar's total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .bitops import popcount
from .codec import MAX_CODE_BITS, CodecParams, code_presence, encoded_bits, stored_sizes
from .dtypes import field_mask_word

THRESHOLDS: tuple[float, ...] = (0.70, 0.75, 0.80, 0.85, 0.90, 0.95)
#: Default number of sample rows, and the cap on sample words (rows x V).
DEFAULT_SAMPLE_ROWS = 65536
SAMPLE_WORD_CAP = 1 << 21
LLOYD_ITERATIONS = 4
#: Dictionary entries considered per column (code widths up to 8 bits; 4 for 8-byte words).
MAX_ENTRIES = 255


def max_code_bits(word_bytes: int) -> int:
    """Widest code the fit considers: 8 bits for 4-byte words, 4 for 8-byte words."""
    return MAX_CODE_BITS if word_bytes == 4 else 4


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


KIND_NAMES = ("threshold", "exponent_field", "full_word")


@dataclass
class _Census:
    """Everything the column choice needs from one set of sample rows."""

    rows: int
    by_threshold: dict[float, _Candidate]
    fixed: list[_Candidate] = field(default_factory=list)


class _Work:
    """Reports the fit's work, in sample rows passed through a step, to an optional bar."""

    def __init__(self, bar: Any | None) -> None:
        self.bar = bar

    def done(self, rows: int) -> None:
        if self.bar is not None and rows:
            self.bar.update(rows)

    def skip(self, rows: int) -> None:
        """Take planned work that turned out not to be needed off the bar's total."""
        if self.bar is not None and rows:
            self.bar.total -= rows
            self.bar.refresh()


#: Steps of a census besides one per threshold of the grid: the bit census, the two
#: exponent-field candidates and the full-word candidate.
_CENSUS_FIXED_STEPS = 4


def _census(words: np.ndarray, dtype_name: str, grid: tuple[float, ...], work: _Work) -> _Census:
    """Candidates of ``words``; reports ``len(grid) + 4`` steps of ``len(words)`` rows."""
    s, v = words.shape
    wd = words.dtype
    ones = bit_census(words)
    work.done(s)
    by_th: dict[float, _Candidate] = {}
    seen: dict[bytes, _Candidate] = {}
    for th in grid:
        m = threshold_mask(ones, s, th, wd)
        key = m.tobytes()
        if key not in seen:
            seen[key] = _Candidate(m, *top_values(words, m), kind=0)
        by_th[th] = seen[key]
        work.done(s)
    fixed = []
    for with_sign in (True, False):
        fmask = field_mask_word(dtype_name, wd.itemsize, np.arange(v), with_sign=with_sign)
        if fmask.any():
            fixed.append(_Candidate(fmask, *top_values(words, fmask), kind=1))
        work.done(s)
    full = np.full(v, np.iinfo(wd).max, dtype=wd)
    fixed.append(_Candidate(full, *top_values(words, full), kind=2))
    work.done(s)
    return _Census(rows=s, by_threshold=by_th, fixed=fixed)


@dataclass
class ColumnChoice:
    """One cluster's chosen parameters: ``mask``, ``code_bits``, ``bitvals`` and kinds."""

    mask: np.ndarray
    code_bits: np.ndarray
    bitvals: np.ndarray
    kind: np.ndarray


def choose_columns(
    census: _Census,
    word_bytes: int,
    thresholds: tuple[float, ...],
    presence: np.ndarray,
    *,
    max_bits: int,
    entry_cost: float,
) -> ColumnChoice:
    """Pick per column the candidate (mask, code width) with the fewest expected bits.

    Costs are bits over the sample rows; each dictionary entry adds ``entry_cost`` bits (its
    share of the table's metadata, scaled to the sample).
    """
    cands = [census.by_threshold[t] for t in thresholds] + census.fixed
    s = census.rows
    tbits = word_bytes * 8
    best_cost = None
    for cand in cands:
        free = tbits - popcount(cand.mask)
        hits_cum = np.cumsum(cand.counts, axis=1)
        for b in range(1, max_bits + 1):
            hits = hits_cum[:, (1 << b) - 2]
            cost = presence * b * s + hits * free + (s - hits) * tbits
            cost = cost + ((1 << b) - 1) * entry_cost
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
    code_bits = np.stack([c.code_bits for c in choices])
    e = (1 << int(code_bits.max())) - 1
    return CodecParams(
        word_bytes=word_bytes,
        masks=np.stack([c.mask for c in choices]),
        code_bits=code_bits,
        bitvals=np.ascontiguousarray(np.stack([c.bitvals[:, :e] for c in choices])),
    )


@dataclass
class FitResult:
    """Parameters chosen by `fit`, with what the choice was based on."""

    params: CodecParams
    threshold: float | str
    expected_bytes: float
    sample_rows: int
    sample_stored_bytes: int
    column_kinds: dict[str, int]
    code_bits_hist: dict[str, int]


def _kmeanspp(words: np.ndarray, k: int, rng: np.random.Generator, work: _Work) -> np.ndarray:
    """k-means++ seeding on Hamming distance; returns the nearest seed of each row.

    Reports ``2 k`` steps of ``len(words)`` rows (a distance to each seed, twice).
    """
    s = words.shape[0]
    seeds = [int(rng.integers(s))]
    dist = popcount(words ^ words[seeds[0]]).sum(axis=1).astype(np.float64)
    work.done(s)
    for _ in range(1, k):
        total = dist.sum()
        nxt = int(rng.choice(s, p=dist / total)) if total > 0 else int(rng.integers(s))
        seeds.append(nxt)
        dist = np.minimum(dist, popcount(words ^ words[nxt]).sum(axis=1))
        work.done(s)
    rows = []
    for i in seeds:
        rows.append(popcount(words ^ words[i]).sum(axis=1))
        work.done(s)
    return np.argmin(np.stack(rows), axis=0)


class _Fitter:
    """Census, column choice and exact scoring of one sample, with scores memoised.

    A score is the table's expected stored bytes: the sample's exact stored row bytes scaled
    to all ``num_rows`` rows, plus the bytes of the codec parameters.
    """

    def __init__(
        self,
        sample: np.ndarray,
        dtype_name: str,
        k: int,
        grid: tuple[float, ...],
        align: int,
        num_rows: int,
        work: _Work,
    ):
        self.sample = sample
        self.work = work
        self.dtype_name = dtype_name
        self.k = k
        self.grid = grid
        self.align = align
        self.word_bytes = sample.dtype.itemsize
        self.scale = num_rows / sample.shape[0]
        self.max_bits = max_code_bits(self.word_bytes)
        self._scores: dict[bytes, tuple[float, int, np.ndarray, CodecParams]] = {}

    def census(self, assign: np.ndarray) -> list[_Census | None]:
        out: list[_Census | None] = []
        for c in range(self.k):
            rows = self.sample[assign == c]
            out.append(
                _census(rows, self.dtype_name, self.grid, self.work) if rows.shape[0] else None
            )
        return out

    def choose(
        self,
        censuses: list[_Census | None],
        thresholds: tuple[float, ...],
        presence: list[np.ndarray] | None = None,
        fallback: list[ColumnChoice] | None = None,
    ) -> list[ColumnChoice]:
        out: list[ColumnChoice] = []
        for c, census in enumerate(censuses):
            if census is None:  # an empty cluster keeps its last (or cluster 0's) choice
                out.append(fallback[c] if fallback else out[0])
                continue
            q = presence[c] if presence is not None else np.ones(self.sample.shape[1])
            out.append(
                choose_columns(
                    census,
                    self.word_bytes,
                    thresholds,
                    q,
                    max_bits=self.max_bits,
                    entry_cost=self.word_bytes * 8 / self.scale,
                )
            )
        return out

    def score(self, choices: list[ColumnChoice]) -> tuple[float, int, np.ndarray, CodecParams]:
        """``(expected table bytes, sample row bytes, best cluster per row, params)``.

        Reports ``k`` steps of the sample's rows (at once when the score is memoised).
        """
        params = _params(choices, self.word_bytes)
        key = params.masks.tobytes() + params.code_bits.tobytes() + params.bitvals.tobytes()
        s, v = self.sample.shape
        if key in self._scores:
            self.work.done(self.k * s)
        else:
            per_cluster = []
            for c in range(self.k):
                per_cluster.append(encoded_bits(self.sample, params, np.full(s, c)))
                self.work.done(s)
            bits = np.stack(per_cluster)
            best = np.argmin(bits, axis=0)
            sizes, _ = stored_sizes(bits.min(axis=0), v, self.word_bytes, self.align)
            rows = int(sizes.sum())
            meta = params.masks.nbytes + params.code_bits.nbytes + params.bitvals.nbytes
            self._scores[key] = (rows * self.scale + meta, rows, best, params)
        return self._scores[key]


def _sweep(threshold: float | str) -> tuple[tuple[float, ...], list[tuple[float, ...]]]:
    """The thresholds to census, and the whole-table options to score."""
    if threshold == "auto":
        return THRESHOLDS, [(t,) for t in THRESHOLDS] + [THRESHOLDS]
    th = float(threshold)
    if not 0.5 < th <= 1.0:
        raise ValueError(f"threshold must be 'auto' or a number in (0.5, 1], got {threshold}")
    return (th,), [(th,)]


def _cluster_work(s: int, k: int, grid_size: int, num_options: int, max_bits: int) -> int:
    """The most work of `_fit_clusters`, in sample rows passed through a step."""
    census = (grid_size + _CENSUS_FIXED_STEPS) * s
    work = census  # the first census
    if k > 1:
        work += 2 * k * s  # k-means++ seeding
        work += LLOYD_ITERATIONS * (k * s + census)  # score, then census again
    work += num_options * k * s  # one score per option
    work += s  # code presence, over each cluster's rows
    work += max_bits * k * s  # the presence-weighted score, then one per narrower cap
    return work


def fit_work(
    sample_rows: int, word_bytes: int, *, clusters: int = 1, threshold: float | str = "auto"
) -> int:
    """The most work `fit` reports to its ``bar``, in sample rows passed through a step.

    The total of a bar given to `fit` should include it; `fit` takes off what it does not need.
    """
    grid, options = _sweep(threshold)
    s = sample_rows
    k = max(1, min(int(clusters), s))
    max_bits = max_code_bits(word_bytes)
    work = _cluster_work(s, k, len(grid), len(options), max_bits)
    if k > 1:
        work += _cluster_work(s, 1, len(grid), len(options), max_bits)
    return work


def fit(
    sample: np.ndarray,
    dtype_name: str,
    *,
    clusters: int = 1,
    threshold: float | str = "auto",
    align: int = 16,
    seed: int = 0,
    num_rows: int | None = None,
    bar: Any | None = None,
) -> FitResult:
    """Choose codec parameters from ``(s, V)`` sample words.

    Example, with a progress bar on stderr:
        >>> total = fit_work(len(words), 4, clusters=4)             # doctest: +SKIP
        >>> with tqdm(total=total, unit="row", unit_scale=True) as bar:  # doctest: +SKIP
        ...     fitted = fit(words, "float32", clusters=4, bar=bar)

    Args:
        sample: sample rows as words (uint32 or uint64).
        dtype_name: element type of the table (decides the exponent-field candidates).
        clusters: k, the most clusters to use (1..255; at most the number of sample rows); a
            single cluster is kept instead when it stores the table in fewer bytes.
        threshold: "auto" for the sweep, or one threshold in (0.5, 1].
        align: row alignment, used in the exact size score.
        seed: seed of the cluster initialisation.
        num_rows: rows of the whole table (default: the sample's), to weigh the parameters'
            own bytes against the rows'.
        bar: a progress bar (a ``tqdm``, or anything with ``update(n)``, ``total`` and
            ``refresh()``) advanced over the fit's work, in sample rows passed through a step
            (see `fit_work`); work that turns out not to be needed is taken off its total. It
            changes nothing that is computed (default: None, no bar).
    """
    if sample.dtype not in (np.dtype("<u4"), np.dtype("<u8")) or sample.ndim != 2:
        raise ValueError(f"sample must be 2-D uint32 or uint64 words, got {sample.dtype}")
    s, v = sample.shape
    if s == 0:
        raise ValueError("the sample has no rows")
    k = max(1, min(int(clusters), s))
    grid, options = _sweep(threshold)
    work = _Work(bar)
    best = _fit_clusters(sample, dtype_name, k, grid, options, align, seed, num_rows, work)
    if k > 1:
        # Clusters must pay for their own parameters: keep one if that stores less.
        single = _fit_clusters(sample, dtype_name, 1, grid, options, align, seed, num_rows, work)
        if single.expected_bytes <= best.expected_bytes:
            best = single
    return best


def _fit_clusters(
    sample: np.ndarray,
    dtype_name: str,
    k: int,
    grid: tuple[float, ...],
    options: list[tuple[float, ...]],
    align: int,
    seed: int,
    num_rows: int | None,
    work: _Work,
) -> FitResult:
    """Fit ``k`` clusters; reports at most `_cluster_work`, and takes off the rest."""
    s, v = sample.shape
    fitter = _Fitter(sample, dtype_name, k, grid, align, max(num_rows or s, s), work)
    census_work = (len(grid) + _CENSUS_FIXED_STEPS) * s
    assign = np.zeros(s, dtype=np.intp)
    if k > 1:
        assign = _kmeanspp(sample, k, np.random.default_rng(seed), work)
    censuses = fitter.census(assign)

    choices: list[ColumnChoice] | None = None
    if k > 1:
        for it in range(LLOYD_ITERATIONS):
            choices = fitter.choose(censuses, grid, fallback=choices)
            new_assign = fitter.score(choices)[2]
            if np.array_equal(new_assign, assign):
                # Converged: no census this iteration, and no further iterations.
                work.skip(census_work + (LLOYD_ITERATIONS - 1 - it) * (k * s + census_work))
                break
            assign = new_assign
            censuses = fitter.census(assign)

    def better(ch: list[ColumnChoice]) -> None:
        nonlocal best, best_choice
        scored = fitter.score(ch)
        if best is None or scored[0] < best[0]:
            best, best_choice = scored, ch

    best: tuple[float, int, np.ndarray, CodecParams] | None = None
    best_choice: list[ColumnChoice] = []
    best_opt = options[0]
    for opt in options:
        before = best
        better(fitter.choose(censuses, opt, fallback=choices))
        if best is not before:
            best_opt = opt
    # Weigh code bits by how often codes are actually written.
    presence = []
    for c in range(k):
        rows = sample[assign == c]
        presence.append(code_presence(rows, best[3], c) if censuses[c] else np.ones(v))
        work.done(rows.shape[0])
    better(fitter.choose(censuses, best_opt, presence, fallback=best_choice))
    # Dictionaries are stored (k, V, 2**max(b) - 1): try narrower caps on the widest code.
    widest = int(best[3].code_bits.max())
    work.skip((fitter.max_bits - widest) * k * s)
    for cap in range(widest - 1, 0, -1):
        fitter.max_bits = cap
        better(fitter.choose(censuses, best_opt, presence, fallback=best_choice))
    fitter.max_bits = max_code_bits(sample.dtype.itemsize)
    _, rows_bytes, _, params = best
    kinds = np.concatenate([c.kind for c in best_choice])
    bits = np.concatenate([c.code_bits for c in best_choice])
    label: float | str = best_opt[0] if len(best_opt) == 1 else "per-column"
    return FitResult(
        expected_bytes=float(best[0]),
        params=params,
        threshold=label,
        sample_rows=s,
        sample_stored_bytes=rows_bytes,
        column_kinds={n: int(np.count_nonzero(kinds == i)) for i, n in enumerate(KIND_NAMES)},
        code_bits_hist={
            str(b): int(np.count_nonzero(bits == b)) for b in range(1, MAX_CODE_BITS + 1)
        },
    )
