"""Vectorised bit operations: popcount, bit extract / deposit, and bitstream packing.

Bit extract (``pext``) gathers the bits of a word selected by a mask into the low bits of
the result, in ascending bit order; deposit (``pdep``) is its inverse. A mask is split into
runs of contiguous set bits, so both cost one shift/and/or per run, vectorised over all
words (real masks have few runs).

A bitstream is little-endian: bit ``i`` is bit ``i % 8`` of byte ``i // 8``, so a field
read from a little-endian 64-bit word at any byte offset comes out in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_U64 = np.uint64


def popcount(x: np.ndarray) -> np.ndarray:
    """Number of set bits of each element, as int64."""
    return np.bitwise_count(x).astype(np.int64)


_LOW_MASKS = np.array([(1 << w) - 1 for w in range(65)], dtype=_U64)


def low_mask(width: np.ndarray) -> np.ndarray:
    """``(1 << width) - 1`` as uint64, for widths 0..64."""
    return _LOW_MASKS[np.asarray(width)]


@dataclass(frozen=True)
class BitRuns:
    """Runs of contiguous set bits of an array of masks, padded to a common count.

    ``lo[r]``: first bit of run r; ``mask[r]``: its width as a low mask (0 when absent);
    ``dst[r]``: where run r lands in the packed result. Each has shape ``(R, *masks.shape)``.
    """

    lo: np.ndarray
    mask: np.ndarray
    dst: np.ndarray

    @property
    def count(self) -> int:
        """Number of runs R (the padded maximum)."""
        return int(self.lo.shape[0])

    def take(self, index: tuple) -> BitRuns:
        """Select the runs of ``masks[index]``."""
        full = (slice(None),) + index
        return BitRuns(self.lo[full], self.mask[full], self.dst[full])


def bit_runs(masks: np.ndarray, nbits: int) -> BitRuns:
    """Split each mask into runs of set bits (vectorised over masks, a pass a run).

    Each pass peels every mask's lowest run: ``low = m & -m`` is its lowest set bit and
    ``m & ~(m + low)`` the run it starts (the carry clears it). The run arrays have the masks'
    dtype, so `pext` / `pdep` work in that width; bits at or above ``nbits`` are ignored.
    """
    m = np.asarray(masks)
    dt = m.dtype
    shape = m.shape
    rest = m.reshape(-1).astype(_U64) & _LOW_MASKS[nbits]
    lo, mask, dst = [], [], []
    packed = np.zeros(rest.shape, dtype=_U64)  # bits of the runs peeled so far
    while rest.any():
        low = rest & (~rest + _U64(1))
        run = rest & ~(rest + low)
        present = run != 0
        start = np.where(present, popcount(low - _U64(1)), 0).astype(_U64)
        lo.append(start)
        mask.append(run >> start)
        dst.append(np.where(present, packed, _U64(0)))
        packed += popcount(run).astype(_U64)
        rest ^= run
    full = (len(lo),) + shape

    def stack(parts: list[np.ndarray]) -> np.ndarray:
        out = np.stack(parts) if parts else np.zeros((0, rest.size), dtype=_U64)
        return out.reshape(full).astype(dt)

    return BitRuns(lo=stack(lo), mask=stack(mask), dst=stack(dst))


def pext(words: np.ndarray, runs: BitRuns) -> np.ndarray:
    """Extract the bits selected by the runs' masks into low bits (runs' dtype).

    Works on NumPy and CuPy arrays alike.
    """
    w = words.astype(runs.lo.dtype, copy=False)
    shape = np.broadcast_shapes(w.shape, runs.lo.shape[1:])
    out = _zeros_like_module(w, shape, runs.lo.dtype)
    for r in range(runs.count):
        out |= ((w >> runs.lo[r]) & runs.mask[r]) << runs.dst[r]
    return out


def _zeros_like_module(x: np.ndarray, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Zeros of ``shape`` in the array module (NumPy or CuPy) that holds ``x``."""
    if type(x).__module__.startswith("cupy"):
        import cupy

        return cupy.zeros(shape, dtype=dtype)
    return np.zeros(shape, dtype=dtype)


def pdep(packed: np.ndarray, runs: BitRuns) -> np.ndarray:
    """Deposit low bits into the positions of the runs' masks (inverse of `pext`)."""
    p = packed.astype(runs.lo.dtype, copy=False)
    out = np.zeros(np.broadcast_shapes(p.shape, runs.lo.shape[1:]), dtype=runs.lo.dtype)
    for r in range(runs.count):
        out |= ((p >> runs.dst[r]) & runs.mask[r]) << runs.lo[r]
    return out


def exclusive_cumsum(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Exclusive prefix sum along an axis, int64 (NumPy or CuPy)."""
    return x.cumsum(axis=axis, dtype=np.int64) - x.astype(np.int64)


def or_bits(out: np.ndarray, values: np.ndarray, widths: np.ndarray, positions: np.ndarray) -> None:
    """OR fields into a little-endian uint64 bitstream ``out``, in place.

    ``values`` (each less than ``2**width``), ``widths`` (0..64) and absolute bit
    ``positions`` are equal-shaped; fields must not overlap and, flattened in C order, must be
    in non-decreasing position order. Zero-width fields contribute nothing. On CuPy arrays
    the fields are added with atomics (the same as OR, since no two fields share a bit).
    """
    if values.size == 0:
        return
    if type(out).__module__.startswith("cupy"):
        import cupy

        # cupy.add.at: CuPy 14 deprecates cupyx.scatter_add, the same atomic adds
        add_bits(out, values, widths, positions, cupy.add.at, cupy)
        return
    v = values.reshape(-1).astype(_U64, copy=False)
    w = widths.reshape(-1)
    pos = positions.reshape(-1)
    word = pos >> 6
    sh = (pos & 63).astype(_U64)
    first = np.flatnonzero(np.concatenate(([True], word[1:] != word[:-1])))
    out[word[first]] |= np.bitwise_or.reduceat(v << sh, first)
    spill = np.flatnonzero((pos & 63) + w > 64)
    if spill.size:
        out[word[spill] + 1] |= v[spill] >> (_U64(64) - sh[spill])


def read_bits(stream: np.ndarray, positions: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Read fields of ``widths`` bits at absolute bit ``positions`` from a uint64 stream.

    Word indices are clamped to the stream, so a read never faults: bits past the end read
    as whatever the last word holds and callers check lengths. Width 0 reads 0.
    """
    pos = positions.astype(np.int64, copy=False)
    last = stream.shape[0] - 1
    word = np.minimum(pos >> 6, last)
    sh = (pos & 63).astype(_U64)
    lo = stream[word] >> sh
    hi = stream[np.minimum(word + 1, last)] << (_U64(64) - sh)  # a shift by 64 gives 0
    return (lo | hi) & low_mask(widths)


def add_bits(out, values, widths, positions, scatter_add, xp) -> None:
    """`or_bits` by scatter-adding each field's two word parts (for GPUs: atomic adds).

    Adding equals OR-ing because no two fields share a bit. ``scatter_add(out, index, v)``
    must accumulate repeated indices (``cupy.add.at``, ``np.add.at``).
    """
    v = values.reshape(-1).astype(xp.uint64, copy=False)
    w = widths.reshape(-1)
    pos = positions.reshape(-1)
    word = pos >> 6
    sh = (pos & 63).astype(xp.uint64)
    scatter_add(out, word, v << sh)
    spill = xp.flatnonzero((pos & 63) + w > 64)
    if spill.size:
        scatter_add(out, word[spill] + 1, v[spill] >> (xp.uint64(64) - sh[spill]))
