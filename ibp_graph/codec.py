"""The IBP row codec: the CPU reference that defines the format (see docs/FORMAT.md).

A row of V words of T bytes is encoded against one cluster's per-column parameters:
``mask[j]`` (the bits a dictionary entry fixes), ``code_bits[j]`` (b, 1..8) and
``2**b - 1`` entries ``bitvals[j, e]`` (values of the masked bits). Word j gets code e, the
lowest entry with ``(w & mask[j]) == bitvals[j, e]``, and then stores only its free bits
(``~mask[j]``); otherwise it gets the escape code ``2**b - 1`` and is stored whole. With
b = 1 this is classic invariant bit packing: one flag bit, one mask, one bitval.

Row bitstream (little-endian bit order), fields in this order:

1. one bit G: 1 = grouped, 0 = flat;
2. if G: C = ceil(V / 32) chunk bits, 1 where the chunk holds a non-zero code; then, for each
   such chunk, one bit per 8-word subgroup of it, 1 where the subgroup holds a non-zero code;
3. codes (b bits each) of every word, or if G only of the words of marked subgroups (words
   of unmarked subgroups have code 0);
4. payloads: the free bits of each word (ascending bit order), or all T*8 bits if escaped.

The encoder picks the smaller of flat and grouped (flat on ties). A row is stored encoded
only if its aligned size is strictly smaller than the aligned raw row; otherwise its padded
words are stored as they are, and its stored length alone says so (encoded rows are always
shorter than V*T bytes). Rows start at multiples of the alignment. Everything is vectorised
over rows and words.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .bitops import BitRuns, bit_runs, exclusive_cumsum, or_bits, pdep, pext, popcount, read_bits
from .dtypes import WORD_DTYPES

MAX_CODE_BITS = 8
#: Masks that are one run of at most this many bits get a direct code lookup table.
LUT_BITS = 12
#: Dictionaries this large or smaller are matched by a broadcast compare, larger by search.
SMALL_DICT = 15
CHUNK_WORDS = 32
SUB_WORDS = 8
SUBS_PER_CHUNK = CHUNK_WORDS // SUB_WORDS
ALIGNMENTS = (1, 2, 4, 8, 16, 32)


class CodecError(ValueError):
    """Inconsistent codec parameters or encoded data."""


def array_module(x: object) -> Any:
    """NumPy, or CuPy for a CuPy array: the encoder runs unchanged on either."""
    if type(x).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


@dataclass(frozen=True)
class _Arrays:
    """The parameters' arrays as one array module holds them (NumPy or CuPy)."""

    masks: Any
    code_bits: Any
    bitvals: Any
    escape: Any
    free_bits: Any
    match_values: Any
    runs: BitRuns
    sorted_keys: tuple[Any, Any] | None
    field_lut: tuple[Any, Any, Any] | None


def align_up(x: np.ndarray | int, align: int) -> np.ndarray | int:
    """Round byte counts up to a multiple of ``align``."""
    return -(-x // align) * align


@dataclass(frozen=True)
class CodecParams:
    """Per-cluster, per-column parameters of the codec.

    Attributes:
        word_bytes: T, bytes per word (4 or 8).
        masks: ``(k, V)`` words, the bits fixed by a dictionary entry.
        code_bits: ``(k, V)`` uint8, code width b (1..8) per column.
        bitvals: ``(k, V, E)`` words, the dictionaries, ``E = 2**max(b) - 1``; entries
            ``e >= 2**b - 1`` of a column are zero.
    """

    word_bytes: int
    masks: np.ndarray
    code_bits: np.ndarray
    bitvals: np.ndarray

    def __post_init__(self) -> None:
        if self.word_bytes not in WORD_DTYPES:
            raise CodecError(f"word_bytes must be 4 or 8, got {self.word_bytes}")
        wd = WORD_DTYPES[self.word_bytes]
        if self.masks.ndim != 2 or self.masks.dtype != wd:
            raise CodecError(f"masks must be a (k, V) {wd} array, got {self.masks.dtype}")
        k, v = self.masks.shape
        if k < 1 or k > 255 or v < 1:
            raise CodecError(f"masks shape {self.masks.shape}: need 1..255 clusters, V >= 1")
        if self.code_bits.shape != (k, v) or self.code_bits.dtype != np.uint8:
            raise CodecError(f"code_bits must be a ({k}, {v}) uint8 array")
        if self.code_bits.min() < 1 or self.code_bits.max() > MAX_CODE_BITS:
            raise CodecError(f"code_bits must lie in 1..{MAX_CODE_BITS}")
        e = (1 << int(self.code_bits.max())) - 1
        if self.bitvals.shape != (k, v, e) or self.bitvals.dtype != wd:
            raise CodecError(f"bitvals must be a ({k}, {v}, {e}) {wd} array")
        if np.any(self.bitvals & ~self.masks[:, :, None]):
            raise CodecError("bitvals have bits outside their column's mask")
        if np.any(self.bitvals[self._unused]):
            raise CodecError("bitvals entries past 2**code_bits - 1 must be zero")

    @property
    def _unused(self) -> np.ndarray:
        return np.arange(self.max_entries)[None, None, :] >= self.escape[:, :, None]

    @property
    def num_clusters(self) -> int:
        """k, the number of clusters."""
        return int(self.masks.shape[0])

    @property
    def num_words(self) -> int:
        """V, words per row."""
        return int(self.masks.shape[1])

    @property
    def max_entries(self) -> int:
        """E, dictionary entries per column (``2**max(b) - 1``)."""
        return int(self.bitvals.shape[2])

    @property
    def word_dtype(self) -> np.dtype:
        """NumPy dtype of a word."""
        return WORD_DTYPES[self.word_bytes]

    @cached_property
    def escape(self) -> np.ndarray:
        """``(k, V)`` escape code ``2**b - 1`` (int64)."""
        return (1 << self.code_bits.astype(np.int64)) - 1

    @cached_property
    def free_bits(self) -> np.ndarray:
        """``(k, V)`` number of bits a matching word stores (int64)."""
        return self.word_bytes * 8 - popcount(self.masks)

    @cached_property
    def free_runs(self) -> BitRuns:
        """Runs of the free bits ``~mask`` per cluster and column."""
        return bit_runs(~self.masks, self.word_bytes * 8)

    @cached_property
    def match_values(self) -> np.ndarray:
        """``(k, E, V)`` dictionary by entry; unused entries repeat entry 0.

        Repeating entry 0 keeps the first match canonical (the lowest code).
        """
        vals = np.where(self._unused, self.bitvals[:, :, :1], self.bitvals)
        return np.ascontiguousarray(vals.transpose(0, 2, 1))

    def arrays(self, xp: Any = np) -> _Arrays:
        """The encoder's arrays, on NumPy or (copied once, cached) on CuPy's current device."""
        key = f"_arrays_{xp.__name__}"
        if xp is not np:  # CuPy: a copy per device, since kernels read only the current one
            key += f"_{xp.cuda.Device().id}"
        if key not in self.__dict__:
            keys = self.sorted_keys if self.word_bytes == 4 else None
            lut = self.field_lut
            runs = self.free_runs
            self.__dict__[key] = _Arrays(
                masks=xp.asarray(self.masks),
                code_bits=xp.asarray(self.code_bits),
                bitvals=xp.asarray(self.bitvals),
                escape=xp.asarray(self.escape),
                free_bits=xp.asarray(self.free_bits),
                match_values=xp.asarray(self.match_values),
                runs=BitRuns(xp.asarray(runs.lo), xp.asarray(runs.mask), xp.asarray(runs.dst)),
                sorted_keys=None if keys is None else (xp.asarray(keys[0]), xp.asarray(keys[1])),
                field_lut=None if lut is None else tuple(xp.asarray(a) for a in lut),
            )
        return self.__dict__[key]

    @cached_property
    def field_lut(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Code lookup for tables whose masks are each one run of at most `LUT_BITS` bits.

        Returns ``(shift, width_mask, table)``: a word's code is
        ``table[(cluster * V + column) << L | (w >> shift) & width_mask]`` with
        ``L = LUT_BITS``; None when some mask is wider or not contiguous.
        """
        m = self.masks.astype(np.uint64)
        if not m.all():
            return None
        lo = np.zeros(m.shape, dtype=np.uint64)
        rest = m.copy()
        while True:  # shift every mask down to bit 0 (at most T*8 steps, over all columns)
            even = (rest & np.uint64(1)) == 0
            if not even.any():
                break
            lo += even
            rest = np.where(even, rest >> np.uint64(1), rest)
        if np.any(rest & (rest + np.uint64(1))) or np.any(rest >= np.uint64(1 << LUT_BITS)):
            return None  # not one run, or too wide
        k, v = m.shape
        table = np.broadcast_to(self.escape.astype(np.uint8)[:, :, None], (k, v, 1 << LUT_BITS))
        table = np.array(table)
        col = np.arange(k * v).reshape(k, v)
        for e in range(self.max_entries - 1, -1, -1):  # lowest entry wins
            used = self.escape > e
            key = (self.bitvals[:, :, e].astype(np.uint64) >> lo).astype(np.int64)
            table.reshape(k * v, -1)[col[used], key[used]] = e
        dt = self.word_dtype
        return lo.astype(dt), rest.astype(dt), table.reshape(-1)

    @cached_property
    def sorted_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """Sorted search keys of every entry, and their codes (4-byte words only).

        A key is ``(cluster * V + column) << 32 | value``; equal keys keep the lowest code.
        """
        k, v, e = self.bitvals.shape
        col = np.broadcast_to(np.arange(k * v, dtype=np.uint64).reshape(k, v, 1), (k, v, e))
        code = np.broadcast_to(np.arange(e, dtype=np.int64), (k, v, e))
        used = ~self._unused
        keys = (col[used] << np.uint64(32)) | self.bitvals[used].astype(np.uint64)
        codes = code[used]
        order = np.lexsort((codes, keys))
        keys, codes = keys[order], codes[order]
        first = np.ones(keys.size, dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        return keys[first], codes[first]


@dataclass
class _Rows:
    """Per-row parameter views (leading axis 1 when every row uses cluster 0)."""

    cluster: np.ndarray | None
    mask: np.ndarray
    match_by_entry: np.ndarray
    bitvals: np.ndarray
    code_bits: np.ndarray
    escape: np.ndarray
    free_bits: np.ndarray
    runs: BitRuns


def _row_params(params: CodecParams, cluster: Any | None, xp: Any = np) -> _Rows:
    a = params.arrays(xp)
    if cluster is None or params.num_clusters == 1:
        idx: tuple = (slice(0, 1),)
        cluster = None
    else:
        idx = (xp.asarray(cluster, dtype=xp.intp),)
    return _Rows(
        cluster=cluster,
        mask=a.masks[idx],
        match_by_entry=a.match_values[idx],
        bitvals=a.bitvals[idx],
        code_bits=a.code_bits[idx],
        escape=a.escape[idx],
        free_bits=a.free_bits[idx],
        runs=a.runs.take(idx),
    )


def _codes(words: Any, rp: _Rows, params: CodecParams) -> Any:
    """Code of every word: lowest matching entry, else the escape code."""
    xp = array_module(words)
    lut = params.arrays(xp).field_lut
    if lut is not None and params.max_entries > 3:
        shift, width, table = lut
        idx = (slice(0, 1),) if rp.cluster is None else (xp.asarray(rp.cluster, dtype=xp.intp),)
        key = ((words >> shift[idx]) & width[idx]).astype(xp.intp)
        n, v = words.shape
        col = xp.arange(v, dtype=xp.intp)[None, :]
        if rp.cluster is not None:
            col = col + (xp.asarray(rp.cluster, dtype=xp.intp) * v)[:, None]
        return table[(col << LUT_BITS) | key]
    masked = words & rp.mask
    if params.max_entries <= SMALL_DICT or params.word_bytes == 8:
        code = xp.broadcast_to(rp.escape.astype(xp.uint8), masked.shape)
        for e in range(params.max_entries - 1, -1, -1):
            code = xp.where(masked == rp.match_by_entry[:, e], xp.uint8(e), code)
        return code
    keys, codes = params.arrays(xp).sorted_keys
    n, v = words.shape
    col = xp.arange(v, dtype=xp.uint64)[None, :]
    if rp.cluster is not None:
        col = col + (xp.asarray(rp.cluster, dtype=xp.uint64) * xp.uint64(v))[:, None]
    query = (col << xp.uint64(32)) | masked.astype(xp.uint64)
    pos = xp.minimum(xp.searchsorted(keys, query), keys.size - 1)
    return xp.where(keys[pos] == query, codes[pos], rp.escape)


@dataclass
class RowLayout:
    """Fields of a batch of rows (`row_layout`): codes, chunk and subgroup bits, widths."""

    code: np.ndarray  # (n, V) int64
    pay_w: np.ndarray  # (n, V) int64
    code_w_flat: np.ndarray  # (n|1, V) int64
    code_w_grouped: np.ndarray  # (n, V) int64
    chunk: np.ndarray  # (n, C) bool
    sub_value: np.ndarray  # (n, C) int64, subgroup bits of each chunk
    l1_w: np.ndarray  # (n, C) int64
    bits_flat: np.ndarray  # (n,) int64
    bits_grouped: np.ndarray  # (n,) int64

    @property
    def grouped(self) -> np.ndarray:
        """Rows that use the grouped form."""
        return self.bits_grouped < self.bits_flat

    @property
    def bits(self) -> np.ndarray:
        """Encoded bits per row."""
        return array_module(self.bits_flat).minimum(self.bits_flat, self.bits_grouped)


def subgroups_per_chunk(num_words: int) -> np.ndarray:
    """Number of 8-word subgroups of each 32-word chunk of a row."""
    c = -(-num_words // CHUNK_WORDS)
    in_chunk = np.minimum(CHUNK_WORDS, num_words - CHUNK_WORDS * np.arange(c))
    return -(-in_chunk // SUB_WORDS)


def _layout(words: Any, rp: _Rows, params: CodecParams) -> RowLayout:
    xp = array_module(words)
    n, v = words.shape
    code = _codes(words, rp, params)
    pay_w = xp.where(code == rp.escape, params.word_bytes * 8, rp.free_bits)
    c = -(-v // CHUNK_WORDS)
    nz = xp.zeros((n, c * CHUNK_WORDS), dtype=bool)
    nz[:, :v] = code != 0
    sub = nz.reshape(n, c, SUBS_PER_CHUNK, SUB_WORDS).any(axis=3)
    chunk = sub.any(axis=2)
    sub_value = (sub.astype(xp.int64) << xp.arange(SUBS_PER_CHUNK)).sum(axis=2)
    l1_w = chunk * xp.asarray(subgroups_per_chunk(v))
    present = xp.repeat(sub, SUB_WORDS, axis=2).reshape(n, c * CHUNK_WORDS)[:, :v]
    b = rp.code_bits.astype(xp.int64)
    code_w_grouped = present * b
    pay_total = pay_w.sum(axis=1)
    bits_flat = 1 + b.sum(axis=1) + pay_total
    bits_grouped = 1 + c + l1_w.sum(axis=1) + code_w_grouped.sum(axis=1) + pay_total
    return RowLayout(
        code=code,
        pay_w=pay_w,
        code_w_flat=b,
        code_w_grouped=code_w_grouped,
        chunk=chunk,
        sub_value=sub_value,
        l1_w=l1_w,
        bits_flat=xp.broadcast_to(bits_flat, (n,)),
        bits_grouped=bits_grouped,
    )


def row_layout(words: Any, params: CodecParams, cluster: Any | None = None) -> RowLayout:
    """The fields of rows of ``words`` ``(n, V)``, each row in its ``cluster`` (None: 0)."""
    return _layout(words, _row_params(params, cluster, array_module(words)), params)


def encoded_bits(words: Any, params: CodecParams, cluster: Any | None = None) -> Any:
    """Bits of each row's encoded form (before alignment and the raw fallback), int64."""
    return row_layout(words, params, cluster).bits


def stored_sizes(bits: Any, num_words: int, word_bytes: int, align: int) -> tuple[Any, Any]:
    """Aligned stored bytes of rows with ``bits`` encoded bits, and which are stored raw."""
    xp = array_module(bits)
    raw_size = align_up(num_words * word_bytes, align)
    enc_size = align_up(-(-bits // 8), align)
    raw = enc_size >= raw_size
    return xp.where(raw, raw_size, enc_size).astype(xp.int64), raw


def best_clusters(words: Any, params: CodecParams) -> tuple[Any, Any]:
    """Each row's cluster with the fewest encoded bits (lowest id on ties), and those bits."""
    xp = array_module(words)
    n = words.shape[0]
    if params.num_clusters == 1:
        return xp.zeros(n, dtype=xp.uint8), encoded_bits(words, params)
    bits = xp.stack(
        [
            encoded_bits(words, params, xp.full(n, c, dtype=xp.intp))
            for c in range(params.num_clusters)
        ]
    )
    best = xp.argmin(bits, axis=0)
    return best.astype(xp.uint8), xp.take_along_axis(bits, best[None], axis=0)[0]


@dataclass
class EncodedChunk:
    """Encoded rows of one chunk: stored sizes and their concatenated aligned bytes."""

    sizes: np.ndarray  # (n,) int64 aligned bytes
    data: np.ndarray  # (sum(sizes),) uint8
    raw: np.ndarray  # (n,) bool


def encode(words: Any, params: CodecParams, align: int, cluster: Any | None = None) -> EncodedChunk:
    """Encode ``(n, V)`` words; ``cluster`` gives each row's cluster (None: all cluster 0).

    ``words`` may be a NumPy or a CuPy array: the result lives where the words do, and its
    bytes are identical either way.
    """
    if align not in ALIGNMENTS:
        raise CodecError(f"align must be one of {ALIGNMENTS}, got {align}")
    n, v = words.shape
    if v != params.num_words or words.dtype != params.word_dtype:
        raise CodecError(
            f"words shape/dtype {words.shape}/{words.dtype} do not match the parameters "
            f"(V={params.num_words}, {params.word_dtype})"
        )
    xp = array_module(words)
    if params.num_clusters == 1:
        cluster = None
    elif cluster is not None:
        cluster = xp.asarray(cluster)  # where the words are: it indexes device arrays below
    lay = _layout(words, _row_params(params, cluster, xp), params)
    sizes, raw = stored_sizes(lay.bits, v, params.word_bytes, align)
    starts = exclusive_cumsum(sizes)
    total = int(sizes.sum())
    # One spare word: zero-width fields at the very end address it.
    out = xp.zeros(-(-total // 8) + 1, dtype=xp.uint64)
    if raw.any():
        # Raw rows are their padded words, copied as bytes.
        src = xp.ascontiguousarray(words[raw]).view(xp.uint8).reshape(-1, v * params.word_bytes)
        out.view(xp.uint8)[starts[raw, None] + xp.arange(src.shape[1])] = src
    enc = xp.flatnonzero(~raw)
    if enc.size == n:
        _pack_encoded(out, starts * 8, words, lay, params, cluster)
    elif enc.size:
        sub = cluster[enc] if cluster is not None else None
        _pack_encoded(out, starts[enc] * 8, words[enc], _select(lay, enc), params, sub)
    return EncodedChunk(sizes=sizes, data=out.view(xp.uint8)[:total], raw=raw)


def _select(lay: RowLayout, rows: np.ndarray) -> RowLayout:
    b = lay.code_w_flat
    return RowLayout(
        code=lay.code[rows],
        pay_w=lay.pay_w[rows],
        code_w_flat=b if b.shape[0] == 1 else b[rows],
        code_w_grouped=lay.code_w_grouped[rows],
        chunk=lay.chunk[rows],
        sub_value=lay.sub_value[rows],
        l1_w=lay.l1_w[rows],
        bits_flat=lay.bits_flat[rows],
        bits_grouped=lay.bits_grouped[rows],
    )


def _pack_encoded(
    out: np.ndarray,
    start_bits: np.ndarray,
    words: np.ndarray,
    lay: RowLayout,
    params: CodecParams,
    cluster: np.ndarray | None,
) -> None:
    """OR the bitstreams of encoded rows into ``out``, field block by field block."""
    xp = array_module(words)
    rp = _row_params(params, cluster, xp)
    n = words.shape[0]
    c = lay.chunk.shape[1]
    grouped = lay.grouped
    g_col = grouped[:, None]
    hdr_w = xp.ones((n, 1 + c), dtype=xp.int64)
    hdr_w[:, 1:] = g_col
    hdr_v = xp.empty((n, 1 + c), dtype=xp.uint64)
    hdr_v[:, 0] = grouped
    hdr_v[:, 1:] = lay.chunk & g_col
    l1_w = lay.l1_w * g_col
    code_w = xp.where(g_col, lay.code_w_grouped, lay.code_w_flat)
    escaped = lay.code == rp.escape
    pay_v = xp.where(escaped, words, pext(words, rp.runs))

    at = start_bits
    blocks = (
        (hdr_v, hdr_w),
        (lay.sub_value * g_col, l1_w),
        (lay.code, code_w),
        (pay_v, lay.pay_w),
    )
    for values, widths in blocks:
        cum = xp.cumsum(widths, axis=1)
        or_bits(out, values, widths, at[:, None] + cum - widths)
        at = at + cum[:, -1]


def decode(
    rows: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    params: CodecParams,
    cluster: np.ndarray | None = None,
) -> np.ndarray:
    """Decode rows back to ``(n, V)`` words.

    Args:
        rows: the row section as a 1-D uint64 array (memmap allowed), zero-padded to whole
            words.
        starts: first byte of each requested row.
        lengths: stored bytes of each requested row.
        params: the codec parameters.
        cluster: cluster id of each requested row (ignored when k == 1).

    Raises:
        CodecError: when a row's fields run past its stored length.
    """
    n = starts.shape[0]
    v = params.num_words
    tb = params.word_bytes
    out = np.empty((n, v), dtype=params.word_dtype)
    if n == 0:
        return out
    raw = lengths >= v * tb
    if raw.any():
        as_bytes = rows.view(np.uint8)
        block = as_bytes[starts[raw, None] + np.arange(v * tb)]
        out[raw] = block.view(params.word_dtype)
    enc = np.flatnonzero(~raw)
    if enc.size:
        cl = None if (cluster is None or params.num_clusters == 1) else cluster[enc]
        out[enc] = _decode_encoded(rows, starts[enc] * 8, lengths[enc] * 8, params, cl)
    return out


def _decode_encoded(
    stream: np.ndarray,
    start_bits: np.ndarray,
    length_bits: np.ndarray,
    params: CodecParams,
    cluster: np.ndarray | None,
) -> np.ndarray:
    n = start_bits.shape[0]
    v = params.num_words
    base = start_bits[:, None]
    rp = _row_params(params, cluster)
    b = np.broadcast_to(rp.code_bits.astype(np.int64), (n, v))

    grouped = read_bits(stream, start_bits, np.ones(n, dtype=np.int64)).astype(bool)
    code_w = b
    codes_at = np.ones(n, dtype=np.int64)
    if grouped.any():
        c = -(-v // CHUNK_WORDS)
        chunk = read_bits(stream, base + 1 + np.arange(c), np.ones((1, c), dtype=np.int64))
        chunk = chunk.astype(bool) & grouped[:, None]
        l1_w = chunk * subgroups_per_chunk(v)
        l1_cum = np.cumsum(l1_w, axis=1)
        sub_value = read_bits(stream, base + 1 + c + l1_cum - l1_w, l1_w)
        sub = (sub_value[:, :, None] >> np.arange(SUBS_PER_CHUNK, dtype=np.uint64)) & np.uint64(1)
        present = np.repeat(sub.astype(bool), SUB_WORDS, axis=2).reshape(n, -1)[:, :v]
        code_w = np.where(grouped[:, None], present * b, b)
        codes_at = np.where(grouped, 1 + c + l1_cum[:, -1], 1)
    code_cum = np.cumsum(code_w, axis=1)
    code = read_bits(stream, base + (codes_at[:, None] + code_cum - code_w), code_w)
    code = code.astype(np.int64)
    escaped = code == rp.escape
    pay_w = np.where(escaped, params.word_bytes * 8, rp.free_bits)
    pay_cum = np.cumsum(pay_w, axis=1)
    pay_at = codes_at + code_cum[:, -1]
    end_bits = pay_at + pay_cum[:, -1]
    if np.any(end_bits > length_bits):
        bad = int(np.flatnonzero(end_bits > length_bits)[0])
        raise CodecError(
            f"encoded row {bad} of the request needs {int(end_bits[bad])} bits but stores "
            f"{int(length_bits[bad])}"
        )
    payload = read_bits(stream, base + (pay_at[:, None] + pay_cum - pay_w), pay_w)
    e = params.max_entries
    col = np.arange(v)
    if rp.cluster is not None:
        col = col + (np.asarray(rp.cluster, dtype=np.int64) * v)[:, None]
    entry = params.bitvals.reshape(-1)[col * e + np.minimum(code, e - 1)]
    matched = entry | pdep(payload, rp.runs)
    return np.where(escaped, payload.astype(params.word_dtype), matched)


def code_presence(words: np.ndarray, params: CodecParams, cluster: int = 0) -> np.ndarray:
    """Fraction of rows in which each column's code is written, using ``cluster``, (V,)."""
    n = words.shape[0]
    if n == 0:
        return np.ones(params.num_words)
    cl = None if params.num_clusters == 1 else np.full(n, cluster, dtype=np.intp)
    lay = _layout(words, _row_params(params, cl), params)
    present = np.where(lay.grouped[:, None], lay.code_w_grouped > 0, True)
    return present.mean(axis=0)
