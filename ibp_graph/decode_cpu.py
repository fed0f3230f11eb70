"""The codec's decoder compiled with Numba: one pass a row, for tables read on the CPU.

`ibp_graph.codec.decode` is the reference that defines the format: NumPy, vectorised over the
rows and words of a request, in a dozen passes over ``(rows, words)`` arrays. `decode` here
walks each stored row once instead (its header bits, the codes, then the payloads, in the
order docs/FORMAT.md gives them) and writes each word where it belongs: a grouped row starts as
its columns' code-0 entries, so that its subgroups that store no bits (no codes, no free bits:
most of a bag-of-words row) are left as they are, and its chunks of such subgroups without
codes are not even visited; the other words are written one by one, a subgroup's codes read
in one piece. It returns the same
words, bit for bit, and refuses a row whose fields run past its stored length with the same
`CodecError`. `ibp_graph.table.IBPTable` decodes with it whenever Numba imports
(`available`), and with the reference otherwise. The compiled loop releases the GIL, and with
``threads`` above 1 a large request's rows are cut into contiguous spans decoded side by side
on the process's pool (`ibp_graph.threads`): each row is decoded alone, so the words are the
same for any thread count, and an error names the request's first bad row as on one thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .codec import CHUNK_WORDS, SUB_WORDS, CodecError, CodecParams, subgroups_per_chunk
from .jit import available as _numba_available
from .jit import jit as _jit
from .jit import numba
from .threads import Shared, spans

__all__ = ["available", "decode"]

#: Fewest decoded words in a span of rows shared between threads (a quarter MiB of 4-byte
#: words): a smaller request, or a smaller share of one, stays on fewer threads.
MIN_SPAN_WORDS = 65536


def available() -> bool:
    """Whether the compiled decoder can run (Numba imported; else the NumPy reference does)."""
    return _numba_available()


@dataclass(frozen=True)
class _Compiled:
    """A table's codec parameters in the flat arrays the compiled loop reads.

    Columns are numbered ``cluster * V + column``; subgroups ``cluster * S + subgroup`` with
    ``S = 4 * ceil(V / 32)`` (four 8-word subgroups a chunk, the last chunk's padded).
    """

    code_bits: np.ndarray  # (k * V,) int64: b
    escape: np.ndarray  # (k * V,) int64: 2**b - 1
    free_bits: np.ndarray  # (k * V,) int64: bits a matching word stores
    bitvals: np.ndarray  # (k * V * E,) uint64: the dictionaries
    run_lo: np.ndarray  # (k * V, R) uint64: first bit of each run of free bits
    run_mask: np.ndarray  # (k * V, R) uint64: its width as a low mask
    run_dst: np.ndarray  # (k * V, R) uint64: where it lands among the payload's bits
    run_count: np.ndarray  # (k * V,) int64: runs of free bits of each column
    sub_code_bits: np.ndarray  # (k * S,) int64: code bits of each subgroup's words
    flat_code_bits: np.ndarray  # (k,) int64: code bits of a flat row
    sub_count: np.ndarray  # (C,) int64: 8-word subgroups of each 32-word chunk
    code0: np.ndarray  # (k * V,) words: each column's code-0 entry
    plain_sub: np.ndarray  # (k * S,) bool: a subgroup whose uncoded words are their code0
    plain_chunk: np.ndarray  # (k * C,) bool: a chunk whose four subgroups are plain


def _compiled(params: CodecParams) -> _Compiled:
    """The flat arrays of ``params``, made once and kept on it."""
    key = "_decode_cpu_arrays"
    if key not in params.__dict__:
        runs = params.free_runs
        r = runs.count
        k, v = params.num_clusters, params.num_words
        c = -(-v // CHUNK_WORDS)

        def by_column(a: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(a.astype(np.uint64).reshape(r, k * v).T)

        bits = params.code_bits.astype(np.int64)
        padded = np.zeros((k, c * CHUNK_WORDS), dtype=np.int64)
        padded[:, :v] = bits
        mask = by_column(runs.mask)
        # Code 0 is never an escape (b >= 1), so a word of code 0 with no free bits is its
        # code-0 entry: so is every word of a subgroup without codes whose columns all are.
        plain = np.ones((k, c * CHUNK_WORDS), dtype=bool)  # the last chunk's padding too
        plain[:, :v] = params.free_bits == 0
        params.__dict__[key] = _Compiled(
            code_bits=bits.reshape(-1),
            escape=params.escape.reshape(-1).copy(),
            free_bits=params.free_bits.reshape(-1).copy(),
            bitvals=params.bitvals.astype(np.uint64).reshape(-1),
            run_lo=by_column(runs.lo),
            run_mask=mask,
            run_dst=by_column(runs.dst),
            run_count=(mask != 0).sum(axis=1).astype(np.int64),
            sub_code_bits=padded.reshape(k, -1, SUB_WORDS).sum(axis=2).reshape(-1),
            flat_code_bits=bits.sum(axis=1),
            sub_count=subgroups_per_chunk(v).astype(np.int64),
            code0=np.ascontiguousarray(params.bitvals[:, :, 0]).reshape(-1),
            plain_sub=plain.reshape(k, -1, SUB_WORDS).all(axis=2).reshape(-1),
            plain_chunk=plain.reshape(k, -1, CHUNK_WORDS).all(axis=2).reshape(-1),
        )
    return params.__dict__[key]


def decode(
    rows: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    params: CodecParams,
    cluster: np.ndarray | None = None,
    *,
    threads: int = 1,
) -> np.ndarray:
    """`ibp_graph.codec.decode`, compiled: the same arguments, words and `CodecError`.

    Also raises `CodecError` where a row stored raw runs past the end of ``rows`` (the
    reference would fail to index it). ``threads``: how many threads may share the rows of a
    large request (default: 1); the words and errors are the same for any count.
    """
    if numba is None:  # pragma: no cover - depends on the environment
        raise RuntimeError("ibp_graph.decode_cpu needs Numba")
    n = starts.shape[0]
    v = params.num_words
    out = np.empty((n, v), dtype=params.word_dtype)
    if n == 0:
        return out
    a = _compiled(params)
    if cluster is None or params.num_clusters == 1:
        cl = np.zeros(n, dtype=np.int64)
    else:
        cl = np.ascontiguousarray(cluster, dtype=np.int64)
    stream = np.asarray(rows).view(np.ndarray)  # a memmap is read as the array it maps
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    out_bytes = out.view(np.uint8).reshape(n, v * params.word_bytes)

    def decode_span(lo: int, hi: int) -> np.ndarray:
        return _decode(
            stream,
            stream.view(np.uint8),
            starts[lo:hi],
            lengths[lo:hi],
            cl[lo:hi],
            v,
            params.word_bytes,
            params.max_entries,
            a.code_bits,
            a.escape,
            a.free_bits,
            a.bitvals,
            a.run_lo,
            a.run_mask,
            a.run_dst,
            a.run_count,
            a.sub_code_bits,
            a.flat_code_bits,
            a.sub_count,
            a.code0,
            a.plain_sub,
            a.plain_chunk,
            out_bytes[lo:hi],
            out[lo:hi],
        )

    cuts = spans(n, threads, -(-MIN_SPAN_WORDS // v))
    with Shared(decode_span, cuts, threads) as decoding:
        found = decoding.all()
    for (lo, _), bad in zip(cuts, found, strict=True):
        if bad[0] < 0:
            continue
        if bad[1] < 0:
            raise CodecError(
                f"raw row {lo + int(bad[0])} of the request runs past the end of the row "
                f"section ({stream.nbytes} bytes)"
            )
        # Encoded rows are numbered among the request's encoded rows, as the reference does.
        before = int(np.count_nonzero(lengths[:lo] < v * params.word_bytes))
        raise CodecError(
            f"encoded row {before + int(bad[0])} of the request needs {int(bad[1])} bits but "
            f"stores {int(bad[2])}"
        )
    return out


if numba is not None:
    _ONES = np.uint64(0xFFFFFFFFFFFFFFFF)

    @_jit(inline="always")
    def _read(stream, pos, width):  # pragma: no cover - compiled
        """`ibp_graph.bitops.read_bits` of one field of 1 to 64 bits.

        Its words are clamped to the stream, so a read never faults; a row's length is checked
        once its fields are read.
        """
        word = pos >> 6
        sh = np.uint64(pos & 63)
        last = stream.shape[0] - 1
        if word < last:
            lo = stream[word]
            hi = stream[word + 1]
        else:
            lo = stream[last]
            hi = lo
        value = lo >> sh
        if sh:
            value |= hi << (np.uint64(64) - sh)
        return value & (_ONES >> np.uint64(64 - width))

    @_jit()
    def _decode(
        stream, stream_bytes, starts, lengths, cluster, v, tb, e, code_bits, escape, free_bits,
        bitvals, run_lo, run_mask, run_dst, run_count, sub_code_bits, flat_code_bits, sub_count,
        code0, plain_sub, plain_chunk, out_bytes, out,
    ):  # pragma: no cover - compiled  # fmt: skip
        n = starts.shape[0]
        c = sub_count.shape[0]
        subs_per_row = c * 4
        row_bytes = v * tb
        word_bits = tb * 8
        bad = np.full(3, -1, dtype=np.int64)
        encoded = 0
        for i in range(n):
            start = starts[i]
            if lengths[i] >= row_bytes:  # stored raw: its words as they are
                if start + row_bytes > stream_bytes.shape[0]:
                    bad[0] = i
                    return bad
                out_bytes[i, :] = stream_bytes[start : start + row_bytes]
                continue
            base = start * 8
            row = out[i]
            cl = cluster[i]
            col0 = cl * v
            grouped = _read(stream, base, 1) != 0
            at = base + 1 + c  # a grouped row's subgroup bits
            if grouped:
                # Where its codes end and its payloads start: past the subgroup bits of the
                # marked chunks and the codes of the marked subgroups.
                code_bits_total = 0
                for ch in range(c):
                    if _read(stream, base + 1 + ch, 1):
                        subs = _read(stream, at, sub_count[ch])
                        at += sub_count[ch]
                        for s in range(sub_count[ch]):
                            if (subs >> np.uint64(s)) & np.uint64(1):
                                code_bits_total += sub_code_bits[cl * subs_per_row + ch * 4 + s]
                code_at = at
                pay_at = at + code_bits_total
                # Every word its code-0 entry first: a plain subgroup without codes (most
                # of a bag-of-words row) is then left as it is, a plain chunk without
                # codes not even visited.
                row[:] = code0[col0 : col0 + v]
            else:  # flat: every word's code, then the payloads
                code_at = base + 1
                pay_at = code_at + flat_code_bits[cl]
            # Words in spans of 8 (a grouped row's subgroups) or 32 (a flat row's chunks),
            # indexed from the span's first (loops Numba vectorises).
            span = 8 if grouped else 32
            at = base + 1 + c
            for ch in range(c):
                subs = np.uint64(1)  # a flat row: its one span of the chunk has codes
                if grouped:
                    subs = np.uint64(0)
                    if _read(stream, base + 1 + ch, 1):
                        subs = _read(stream, at, sub_count[ch])
                        at += sub_count[ch]
                    elif plain_chunk[cl * c + ch]:
                        continue  # no bits stored: its code-0 entries, written above
                for s in range(sub_count[ch] if grouped else 1):
                    j0 = ch * 32 + s * span
                    n_j = min(v, j0 + span) - j0
                    coded = ((subs >> np.uint64(s)) & np.uint64(1)) != 0
                    if not coded and plain_sub[cl * subs_per_row + ch * 4 + s]:
                        continue  # no bits stored: its code-0 entries, written above
                    codes = np.uint64(0)
                    if coded and grouped:  # a subgroup's codes, 64 bits at most, in one read
                        nb = sub_code_bits[cl * subs_per_row + ch * 4 + s]
                        codes = _read(stream, code_at, nb)
                        code_at += nb
                    for t in range(n_j):
                        col = col0 + j0 + t
                        code = 0
                        if coded:
                            b = code_bits[col]
                            if grouped:
                                code = np.int64(codes & (_ONES >> np.uint64(64 - b)))
                                codes >>= np.uint64(b)
                            else:
                                code = np.int64(_read(stream, code_at, b))
                                code_at += b
                        if code == escape[col]:  # stored whole
                            row[j0 + t] = _read(stream, pay_at, word_bits)
                            pay_at += word_bits
                            continue
                        word = bitvals[col * e + code]
                        fb = free_bits[col]
                        if fb:  # the free bits, deposited run by run
                            payload = _read(stream, pay_at, fb)
                            pay_at += fb
                            nr = run_count[col]
                            word |= ((payload >> run_dst[col, 0]) & run_mask[col, 0]) << (
                                run_lo[col, 0]
                            )
                            for q in range(1, nr):
                                word |= ((payload >> run_dst[col, q]) & run_mask[col, q]) << (
                                    run_lo[col, q]
                                )
                        row[j0 + t] = word
            end = pay_at - base
            if end > lengths[i] * 8:  # the words read past the row: refused, not returned
                bad[0] = encoded
                bad[1] = end
                bad[2] = lengths[i] * 8
                return bad
            encoded += 1
        return bad
