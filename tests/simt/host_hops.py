"""The sampler's hop kernels run by the host harness of the CUDA kernels (`simt.harness`).

`HostHopKernels` launches its hop kernels on CPU tensors for `ibp_graph.sample_hop.fused_hop`,
as `CudaHopKernels` does on a GPU, in a harness built by `simt.harness.build`. Used by the
tests and by ``benchmarks/sampling_ops.py``.
"""

from __future__ import annotations

import contextlib
import ctypes

import torch

from ibp_graph.kernels.sample_neighbors import capacity

#: Grid and block of the host launches (blocks run one after another, a fiber per lane).
GRID, BLOCK = 3, 64


def _entry_bytes(indices: torch.Tensor) -> int:
    """Bytes of a CSR entry as the kernels read it (`CSRGraph.entries`).

    16 for the ``(E, 2)`` sources and edge ids of the pairs layout.
    """
    return 16 if indices.dim() == 2 else indices.element_size()


def _p(t: torch.Tensor | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(0 if t is None else t.data_ptr())


class HostHopKernels:
    """`ibp_graph.sample_hop.HopKernels` on the host: the kernel source run by the harness."""

    def __init__(self, lib: ctypes.CDLL, grid: int = GRID, block: int = BLOCK) -> None:
        self.lib, self.grid, self.block = lib, ctypes.c_uint(grid), ctypes.c_uint(block)
        self.launches: list[str] = []

    def launching(self):
        return contextlib.nullcontext()

    def draw(self, indptr, indices, frontier, rows_at, key, local, nbr, pos, *, rows, k,
             replace):  # fmt: skip
        self.launches.append("draw")
        self.lib.simt_hop_draw(
            ctypes.c_int(capacity(k)), ctypes.c_int(_entry_bytes(indices)),
            *map(_p, (indptr, indices, frontier, rows_at, key, local, nbr, pos)),
            ctypes.c_longlong(rows), ctypes.c_int(k), ctypes.c_int(int(replace)),
            self.grid, self.block,
        )  # fmt: skip

    def take_all(self, indptr, indices, frontier, slot_start, local, nbr, pos, slots):
        self.launches.append("take_all")
        self.lib.simt_hop_all(
            ctypes.c_int(_entry_bytes(indices)),
            *map(_p, (indptr, indices, frontier, slot_start, local, nbr, pos)),
            ctypes.c_longlong(frontier.numel()), self.grid, self.block,
        )  # fmt: skip

    def flags(self, nbr, local, flags):
        self.launches.append("flags")
        self.lib.simt_hop_flags(
            *map(_p, (nbr, local, flags)), ctypes.c_longlong(nbr.numel()), self.grid, self.block
        )

    def clear(self, nodes, counts, at, local):
        self.launches.append("clear")
        self.lib.simt_hop_clear(
            *map(_p, (nodes, counts)), ctypes.c_int(at), _p(local),
            ctypes.c_longlong(nodes.numel()), self.grid, self.block,
        )  # fmt: skip

    def pack(self, parts, counts, out, *, n_parts, rows):
        self.launches.append("pack")
        self.lib.simt_hop_pack(
            _p(parts), ctypes.c_int(n_parts), _p(counts), ctypes.c_int(rows), _p(out),
            ctypes.c_longlong(out.shape[-1]), self.grid, self.block,
        )  # fmt: skip

    def emit(self, nbr, pos, edge_ids, cum, slot_start, local, fresh, row, col, edge, counts,
             *, rows, k, begin, end, hop, hops):  # fmt: skip
        self.launches.append("emit")
        ptrs = (nbr, pos, edge_ids, cum, slot_start, local, fresh, row, col, edge, counts)
        self.lib.simt_hop_emit(
            *map(_p, ptrs), ctypes.c_longlong(nbr.numel()), ctypes.c_longlong(rows),
            ctypes.c_int(k), ctypes.c_longlong(begin), ctypes.c_longlong(end),
            ctypes.c_int(hop), ctypes.c_int(hops), self.grid, self.block,
        )  # fmt: skip
