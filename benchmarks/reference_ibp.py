"""Exact size model of the REFERENCE one-mask Invariant Bit Packing design (the baseline).

This is what we compare ``ibp_graph`` against, not our codec. The model:

- a table of N rows is viewed as rows of V little-endian unsigned words of T bytes
  (T = 4 or 8); each row's bytes are zero-padded to a multiple of T (the input is not
  modified);
- a bit census over all rows: for every word column j and bit b, how many rows have the
  bit set (int64);
- for each threshold th in 0.70, 0.75, ..., 0.95: bit b of column j is *invariant* if the
  fraction of rows in which it equals its majority value is >= th (compared exactly, in
  integers); ``mask[j]`` holds the invariant bits, ``bitval[j]`` their majority values
  (a tie counts as majority 0); a word matches iff ``(w & mask[j]) == bitval[j]``;
- encoded row size in bits = V (one flag bit per word) + sum over matched words of
  (8T - popcount(mask[j])) + sum over unmatched words of 8T; a row takes
  ``ceil(bits / 8)`` bytes and is stored as ``min(that, V * T)`` bytes. This is generous to
  the reference: no alignment, no offsets table, no header, and a free raw fallback;
- the threshold with the smallest total wins (ties: the lowest threshold).

``ratio = N * (unpadded row bytes) / (total stored bytes)``.

Everything is vectorised with NumPy: the only Python loops run over the 6 thresholds and
the 8T bit positions, never over rows or words. Peak memory is a few times the table.
"""

from __future__ import annotations

import numpy as np

#: Thresholds in percent (compared exactly: 100 * agree >= pct * N).
THRESHOLDS_PCT = (70, 75, 80, 85, 90, 95)
#: The same thresholds as fractions.
THRESHOLDS = tuple(p / 100 for p in THRESHOLDS_PCT)

_WORD_DTYPES = {4: np.dtype("<u4"), 8: np.dtype("<u8")}


def as_words(array: np.ndarray, word_bytes: int = 4) -> np.ndarray:
    """View a 2-D table as ``(N, V)`` little-endian unsigned words of ``word_bytes`` bytes.

    Each row's bytes are zero-padded to a multiple of ``word_bytes``. The result is a
    read-only view when no padding or copy is needed, otherwise a new array; the input is
    never modified.
    """
    if word_bytes not in _WORD_DTYPES:
        raise ValueError(f"word_bytes must be 4 or 8, got {word_bytes}")
    a = np.asarray(array)
    if a.ndim != 2:
        raise ValueError(f"expected a 2-D table, got shape {a.shape}")
    if a.dtype.kind not in "biuf":
        raise ValueError(f"expected a numeric (bool/int/uint/float) table, got dtype {a.dtype}")
    n = a.shape[0]
    row_bytes = a.shape[1] * a.dtype.itemsize
    if n == 0 or row_bytes == 0:
        raise ValueError(f"empty table of shape {a.shape}")
    v = -(-row_bytes // word_bytes)
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(n, row_bytes)
    if v * word_bytes == row_bytes:
        words = raw.view(_WORD_DTYPES[word_bytes])
        if np.may_share_memory(words, a):
            words = words.view()
            words.flags.writeable = False
        return words
    buf = np.zeros((n, v * word_bytes), dtype=np.uint8)
    buf[:, :row_bytes] = raw
    return buf.view(_WORD_DTYPES[word_bytes])


def bit_census(words: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """Ones count per bit per word column: int64 array ``(8T, V)``, row b = bit b.

    Loops over the 8 bit positions of a byte only: every byte of a word is a lane of a
    SIMD-within-a-register sum (``(w >> b) & 0x0101..01`` summed over blocks of 255 rows
    cannot carry from one byte lane into the next). ``scratch`` (same shape and dtype as
    ``words``) is reused as the work buffer when given.
    """
    n, v = words.shape
    t = words.dtype.itemsize
    wt = words.dtype.type
    lane_dtype = np.dtype(f"<u{t}")
    lane_ones = wt(int.from_bytes(b"\x01" * t, "little"))
    plane = np.empty_like(words) if scratch is None else scratch
    full = (n // 255) * 255
    counts = np.zeros((8, v, t), dtype=np.int64)  # [bit in byte, word column, byte in word]
    for b in range(8):
        np.right_shift(words, wt(b), out=plane)
        np.bitwise_and(plane, lane_ones, out=plane)
        if full:
            blocks = np.add.reduce(plane[:full].reshape(-1, 255, v), axis=1, dtype=words.dtype)
            lanes = blocks.astype(lane_dtype, copy=False).view(np.uint8).reshape(-1, v, t)
            counts[b] += lanes.sum(axis=0, dtype=np.int64)
        if n > full:
            tail = np.add.reduce(plane[full:], axis=0, dtype=words.dtype)
            counts[b] += tail.astype(lane_dtype, copy=False).view(np.uint8).reshape(v, t)
    # Byte k of a little-endian word holds word bits 8k .. 8k+7.
    return np.ascontiguousarray(counts.transpose(2, 0, 1).reshape(8 * t, v))


def masks_for_threshold(
    ones: np.ndarray, n_rows: int, pct: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mask, bitval, popcount(mask))`` per word column for a threshold in percent."""
    word_bits = ones.shape[0]
    agree = np.maximum(ones, n_rows - ones)
    invariant = agree * 100 >= pct * n_rows  # exact integer comparison
    majority_one = ones * 2 > n_rows  # ties -> majority 0
    weights = np.left_shift(np.uint64(1), np.arange(word_bits, dtype=np.uint64))[:, None]
    mask = (invariant * weights).sum(axis=0, dtype=np.uint64).astype(dtype)
    bitval = ((invariant & majority_one) * weights).sum(axis=0, dtype=np.uint64).astype(dtype)
    return mask, bitval, invariant.sum(axis=0, dtype=np.int64)


def stored_row_bytes(
    words: np.ndarray,
    mask: np.ndarray,
    bitval: np.ndarray,
    popcount: np.ndarray,
    scratch: np.ndarray | None = None,
    matched: np.ndarray | None = None,
) -> np.ndarray:
    """Stored bytes of every row (int64 ``(N,)``) under one mask/bitval pair.

    ``popcount[j]`` is ``popcount(mask[j])``. ``scratch`` (like ``words``) and ``matched``
    (float32 or float64, shape of ``words``) are reused as work buffers when given.
    """
    n, v = words.shape
    word_bits = words.dtype.itemsize * 8
    # Bits saved per row = sum of popcount(mask[j]) over the matched words; the float
    # matmul is exact while every row's sum stays below 2**24 (float32) or 2**53.
    ftype = np.float32 if v * word_bits < 2**24 else np.float64
    if scratch is None:
        scratch = np.empty_like(words)
    if matched is None or matched.dtype != ftype:
        matched = np.empty(words.shape, dtype=ftype)
    np.bitwise_and(words, mask, out=scratch)
    np.equal(scratch, bitval, out=matched)  # 1.0 where the word matches
    saved = np.rint(matched @ popcount.astype(ftype)).astype(np.int64)
    bits = v + v * word_bits - saved
    return np.minimum((bits + 7) // 8, v * words.dtype.itemsize)


def reference_ratio(array: np.ndarray, word_bytes: int = 4) -> dict:
    """Compression ratio of the reference one-mask IBP on ``array`` (see module docstring).

    Returns a dict with ``ratio`` (raw bytes / stored bytes), ``threshold`` (the winning
    one, as a fraction), ``stored_bytes``, ``raw_bytes`` (N times the unpadded row bytes),
    plus ``word_bytes``, ``words_per_row`` and ``per_threshold`` (stored bytes per threshold).
    """
    words = as_words(array, word_bytes)
    n, v = words.shape
    a = np.asarray(array)
    raw_bytes = n * a.shape[1] * a.dtype.itemsize
    scratch = np.empty_like(words)  # work buffers, reused by every pass
    matched = np.empty(words.shape, dtype=np.float32 if v * 8 * word_bytes < 2**24 else np.float64)
    ones = bit_census(words, scratch)
    per_threshold: dict[float, int] = {}
    for pct in THRESHOLDS_PCT:
        mask, bitval, popcount = masks_for_threshold(ones, n, pct, words.dtype)
        rows = stored_row_bytes(words, mask, bitval, popcount, scratch, matched)
        per_threshold[pct / 100] = int(rows.sum())
    best = min(per_threshold, key=lambda th: (per_threshold[th], th))
    stored = per_threshold[best]
    return {
        "ratio": raw_bytes / stored,
        "threshold": best,
        "stored_bytes": stored,
        "raw_bytes": raw_bytes,
        "word_bytes": word_bytes,
        "words_per_row": v,
        "per_threshold": per_threshold,
    }
