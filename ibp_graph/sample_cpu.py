"""The sampler's hops on CPU graphs, compiled with Numba: few passes, reused buffers.

`NeighborSampler` hands all hops of a batch to `sample` when the graph is on the CPU and Numba
imports (`available`); otherwise it runs them with torch ops. Each hop is two compiled calls:
one reads the frontier's degrees and sizes the output, the other draws every target's
neighbors and writes ``row``, ``col``, ``edge`` and the new nodes, looking each neighbor up in
the dense map of `ibp_graph.sample_index` (a new node gets the next local id). That call makes
three passes (CSR positions; sources and edge ids; local ids), each with independent random
loads that the memory system overlaps. Intermediate buffers live in a `Workspace` reused from
batch to batch. The calls release the GIL.

Threads: with ``threads`` above 1 (the sampler passes ``torch.get_num_threads()``, which
torch's own ops and DGL's sampler follow too), a large frontier is cut into contiguous spans
(`SPANS_PER_THREAD` a thread), and the first two passes of each span run on whichever thread
takes it: the calling thread or the process's pool (`ibp_graph.threads`). The local ids
are given on the calling thread, in entry order, span by span as their draws finish. A
target's draws depend only on its place in the frontier, so a batch is the same, bit for bit,
whatever the thread count.

Random numbers: every hop takes one 62-bit key from the sampler's torch generator; target ``i``
of the hop draws from a SplitMix64 stream seeded with ``mix(key ^ mix(i))`` (as the CUDA kernel
of ``cuda/sample_neighbors.cu`` does), each draw ``x`` mapped to ``floor(x * range / 2**64)``
(bias below ``range / 2**64``). Without replacement a target with more than ``fanout``
in-neighbors gets ``fanout`` distinct ones by Floyd's algorithm (``fanout <= 64``) or by
selection sampling (Knuth's algorithm S, larger fanouts); both draw every subset with equal
probability. Offsets are sorted, so a target's edges come in CSR order as on the torch path.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from .jit import available as _numba_available
from .jit import jit as _jit
from .jit import numba
from .sample_index import KNOWN, UNSEEN
from .threads import Shared, spans

__all__ = ["Workspace", "available", "clear", "sample"]

#: Largest fanout drawn by Floyd's algorithm (quadratic in the fanout); selection sampling above.
FLOYD_MAX_K = 64

#: Fewest frontier nodes in a span of a hop shared between threads.
MIN_SPAN = 1024
#: Spans a thread's share of a hop is cut into, so that threads that finish early take more and
#: the local ids of the first spans are given while the later ones are drawn.
SPANS_PER_THREAD = 4


def available() -> bool:
    """Whether the compiled hop can run (Numba imported; without it torch ops do the work)."""
    return _numba_available()


if numba is not None:
    _M1 = np.uint64(0xBF58476D1CE4E5B9)
    _M2 = np.uint64(0x94D049BB133111EB)
    _GAMMA = np.uint64(0x9E3779B97F4A7C15)
    _UNSEEN = np.int64(UNSEEN)
    _KNOWN = np.int64(KNOWN)

    @_jit(inline="always")
    def _mix(z):  # pragma: no cover - compiled
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))

    @_jit(inline="always")
    def _below(x, n):  # pragma: no cover - compiled
        """``floor(x * n / 2**64)``: ``x`` uniform in ``[0, 2**64)`` -> uniform in ``[0, n)``."""
        r = np.uint64(n)
        if r >> np.uint64(32):
            return np.int64(x % r)
        lo = ((x & np.uint64(0xFFFFFFFF)) * r) >> np.uint64(32)
        return np.int64(((x >> np.uint64(32)) * r + lo) >> np.uint64(32))

    @_jit()
    def _draw(deg, k, replace, state, picks):  # pragma: no cover - compiled
        """``k`` offsets in ``[0, deg)`` into ``picks[:k]``, ascending."""
        if replace:
            for s in range(k):
                state += _GAMMA
                picks[s] = _below(_mix(state), deg)
        elif k <= FLOYD_MAX_K:
            for s in range(k):
                j = deg - k + s
                state += _GAMMA
                t = _below(_mix(state), j + 1)
                for q in range(s):
                    if picks[q] == t:
                        t = j
                        break
                picks[s] = t
        else:  # selection sampling: entry i is taken with probability (needed / left)
            taken = 0
            for i in range(deg):
                state += _GAMMA
                if _below(_mix(state), deg - i) < k - taken:
                    picks[taken] = i
                    taken += 1
                    if taken == k:
                        break
            return
        for s in range(1, k):  # insertion sort, k is small
            v = picks[s]
            q = s - 1
            while q >= 0 and picks[q] > v:
                picks[q + 1] = picks[q]
                q -= 1
            picks[q + 1] = v

    @_jit()
    def _seed(local, seeds):  # pragma: no cover - compiled
        for i in range(seeds.shape[0]):
            if local[seeds[i]] == _UNSEEN:
                local[seeds[i]] = i - _KNOWN

    @_jit()
    def _count(indptr, node, f0, f1, fanout, replace, start, deg):  # pragma: no cover
        """Entries sampled into ``node[f0:f1]``; their CSR starts and degrees into the buffers."""
        total = 0
        for i in range(f1 - f0):
            v = node[f0 + i]
            s = indptr[v]
            d = indptr[v + 1] - s
            start[i] = s
            deg[i] = d
            if fanout < 0 or (d <= fanout and not replace):
                total += d
            elif d > 0:
                total += fanout
        return total

    @_jit()
    def _entries(
        indices, edge_ids, f0, f1, i0, fanout, replace, key, start, deg, row, col, edge, e0, pos
    ):  # pragma: no cover - compiled
        """Sample into ``node[f0:f1]``: global sources, targets, edge ids at ``[e0:]``.

        ``f0`` is target ``i0`` of the hop (its draws follow from ``key`` and ``i0 + i``).
        Two passes, each with independent random loads (the memory system overlaps them): CSR
        positions, then sources and edge ids. Returns the number of entries.
        """
        picks = np.empty(max(fanout, 1), np.int64)
        mixed_key = np.uint64(key)
        p = 0
        for i in range(f1 - f0):
            s = start[i]
            d = deg[i]
            if d == 0:
                continue
            target = f0 + i
            if fanout < 0 or (d <= fanout and not replace):
                for j in range(d):
                    pos[p] = s + j
                    col[e0 + p] = target
                    p += 1
            else:
                _draw(d, fanout, replace, _mix(mixed_key ^ _mix(np.uint64(i0 + i))), picks)
                for j in range(fanout):
                    pos[p] = s + picks[j]
                    col[e0 + p] = target
                    p += 1
        for q in range(p):
            row[e0 + q] = indices[pos[q]]
            edge[e0 + q] = edge_ids[pos[q]]
        return p

    @_jit()
    def _dedup_dense(row, e0, e1, local, node, end):  # pragma: no cover - compiled
        """Global sources in ``row[e0:e1]`` -> local ids (dense map); returns the new count."""
        nf = 0
        for q in range(e0, e1):
            u = row[q]
            lv = local[u]
            if lv == _UNSEEN:
                lv = end + nf - _KNOWN
                local[u] = lv
                node[end + nf] = u
                nf += 1
            row[q] = lv + _KNOWN
        return nf

    @_jit(inline="always")
    def _slot(table, bits, k):  # pragma: no cover - compiled
        """The slot of key ``k`` in the open-addressing ``table`` (linear probing)."""
        h = np.int64((np.uint64(k) * _GAMMA) >> np.uint64(64 - bits))
        size_mask = table.shape[0] - 1
        while table[h] != -1 and table[h] != k:
            h = (h + 1) & size_mask
        return h

    @_jit()
    def _hash_build(node, batch, end, n, table, ids, bits):  # pragma: no cover - compiled
        """Enter the keys ``batch * n + node`` of ``[0, end)`` into an empty ``table``."""
        for i in range(end):
            k = batch[i] * n + node[i]
            h = _slot(table, bits, k)
            table[h] = k
            ids[h] = i

    @_jit()
    def _dedup_hash(row, col, e0, e1, n, table, ids, bits, node, batch, end):
        # pragma: no cover - compiled
        """As `_dedup_dense`, keyed by ``(tree of the target, source)``; new trees in ``batch``."""
        nf = 0
        for q in range(e0, e1):
            u = row[q]
            b = batch[col[q]]
            k = b * n + u
            h = _slot(table, bits, k)
            if table[h] == -1:
                table[h] = k
                ids[h] = end + nf
                node[end + nf] = u
                batch[end + nf] = b
                nf += 1
            row[q] = ids[h]
        return nf

    @_jit()
    def _clear(local, node):  # pragma: no cover - compiled
        for i in range(node.shape[0]):
            local[node[i]] = _UNSEEN


class Workspace:
    """Buffers reused from batch to batch (grown as needed, never shrunk, not pickled)."""

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, keep: int = 0) -> np.ndarray:
        """Buffer ``name`` with room for ``size`` int64, its first ``keep`` entries kept."""
        buf = self.buffers.get(name)
        if buf is None or buf.size < size:
            grown = np.empty(max(size, 2 * (0 if buf is None else buf.size), 4096), np.int64)
            if keep:
                grown[:keep] = buf[:keep]
            self.buffers[name] = buf = grown
        return buf


def sample(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    edge_ids: torch.Tensor,
    seeds: torch.Tensor,
    num_neighbors: tuple[int, ...],
    keys: list[int],
    *,
    replace: bool,
    per_hop: bool,
    disjoint: bool = False,
    local: torch.Tensor | None,
    work: Workspace,
    threads: int = 1,
) -> tuple[
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    list[int],
    list[int],
    torch.Tensor | None,
]:
    """All hops of `NeighborSampler` on CPU tensors (see the module docstring).

    Without ``disjoint`` the sampled nodes stay in ``local`` (the dense map of
    `ibp_graph.sample_index`): clear it with `clear` once done with it. With ``disjoint`` every
    seed grows its own tree, told apart by an open-addressing hash table of
    ``(seed index, node)`` keys kept in ``work``; ``local`` is not used.

    Args:
        indptr: the graph's CSR ``indptr`` (int64).
        indices: the graph's CSR ``indices`` (int64 or int32).
        edge_ids: the graph's CSR ``edge_ids`` (int64).
        seeds: int64 global ids of the seeds.
        num_neighbors: fanout of every hop (``-1``: all, ``0``: none).
        keys: one random key per hop, each in ``[0, 2**63)``.
        replace: draw with replacement.
        per_hop: draw for every node known before the hop (``draw="per_hop"``), not only the
            nodes of the previous hop.
        disjoint: one tree per seed (default: False).
        local: the dense map, `UNSEEN` everywhere; updated in place (None with ``disjoint``).
        work: buffers to reuse.
        threads: threads to draw a large frontier on (default: 1); the batch is the same for
            any count.

    Returns:
        ``(node, row, col, edge, num_sampled_nodes, num_sampled_edges, batch)``, the tensors new;
        ``batch`` (the seed index of every node) is None without ``disjoint``.
    """
    indptr_np, indices_np, edge_ids_np = indptr.numpy(), indices.numpy(), edge_ids.numpy()
    local_np = None if disjoint else local.numpy()
    seeds_np = np.ascontiguousarray(seeds.numpy())
    batch_size = seeds_np.size
    node = work.get("node", batch_size)
    node[:batch_size] = seeds_np
    n = indptr_np.size - 1
    if disjoint:
        batch = work.get("batch", batch_size)
        batch[:batch_size] = np.arange(batch_size)
        table, ids, bits = _hash_table(work, batch_size, node, batch, batch_size, n, fresh=True)
    else:
        _seed(local_np, seeds_np)
    num_nodes, num_edges = [batch_size], []
    begin, end, e0 = 0, batch_size, 0
    for fanout, key in zip(num_neighbors, keys, strict=True):
        f0 = 0 if per_hop else begin
        total = 0
        if fanout != 0 and end > f0:
            cuts = spans(end - f0, threads, MIN_SPAN, SPANS_PER_THREAD)
            start = work.get("start", end - f0)
            deg = work.get("deg", end - f0)
            count_tasks = [
                (indptr_np, node, f0 + a, f0 + b, fanout, replace, start[a:b], deg[a:b])
                for a, b in cuts
            ]
            with Shared(_count, count_tasks, threads) as counting:
                counts = counting.all()
            total = sum(counts)
            node = work.get("node", end + total, keep=end)
            row = work.get("row", e0 + total, keep=e0)
            col = work.get("col", e0 + total, keep=e0)
            edge = work.get("edge", e0 + total, keep=e0)
            pos = work.get("pos", total)
            firsts = list(itertools.accumulate(counts, initial=0))
            draw_tasks = [
                (indices_np, edge_ids_np, f0 + a, f0 + b, a, fanout, replace, key, start[a:b],
                 deg[a:b], row, col, edge, e0 + p, pos[p:])
                for (a, b), p in zip(cuts, firsts[:-1], strict=True)
            ]  # fmt: skip
            if disjoint:
                batch = work.get("batch", end + total, keep=end)
                table, ids, bits = _hash_table(work, end + total, node, batch, end, n)
            # Local ids in entry order, span by span as their draws finish (on any thread).
            new = 0
            with Shared(_entries, draw_tasks, threads) as drawing:
                for i in range(len(cuts)):
                    drawing.wait(i)
                    q0, q1 = e0 + firsts[i], e0 + firsts[i + 1]
                    if disjoint:
                        new += _dedup_hash(
                            row, col, q0, q1, n, table, ids, bits, node, batch, end + new
                        )
                    else:
                        new += _dedup_dense(row, q0, q1, local_np, node, end + new)
        else:
            new = 0
        num_nodes.append(new)
        num_edges.append(total)
        begin, end, e0 = end, end + new, e0 + total
    out = [torch.from_numpy(node[:end].copy())]
    for name in ("row", "col", "edge"):
        buf = work.buffers.get(name)
        out.append(torch.from_numpy(buf[:e0].copy() if e0 else np.empty(0, np.int64)))
    tree = torch.from_numpy(work.buffers["batch"][:end].copy()) if disjoint else None
    return (*out, num_nodes, num_edges, tree)


def _hash_table(
    work: Workspace,
    keys: int,
    node: np.ndarray,
    batch: np.ndarray,
    end: int,
    n: int,
    fresh: bool = False,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The workspace's hash table, room for ``keys`` keys at half load, with those of ``[0, end)``.

    It is emptied and refilled when ``fresh`` or when it has to grow.
    """
    table = work.buffers.get("table")
    if table is None or table.size < 2 * keys:
        bits = max(12, int(2 * keys - 1).bit_length())
        work.buffers["table"] = table = np.empty(1 << bits, np.int64)
        work.buffers["ids"] = np.empty(1 << bits, np.int64)
        fresh = True
    bits = table.size.bit_length() - 1
    ids = work.buffers["ids"]
    if fresh:
        table.fill(-1)
        _hash_build(node, batch, end, n, table, ids, bits)
    return table, ids, bits


def clear(local: torch.Tensor, node: torch.Tensor) -> None:
    """Reset the dense map's entries of ``node`` (CPU int64 tensors) to `UNSEEN`."""
    _clear(local.numpy(), node.numpy())
