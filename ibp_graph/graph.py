"""Graphs in the layout the neighbor sampler reads: in-neighbors of every node as CSR.

For every node ``v``, ``indices[indptr[v]:indptr[v + 1]]`` are the sources ``u`` of the edges
``u -> v`` (what PyG's ``NeighborLoader`` samples with ``flow="source_to_target"``), in the order
in which those edges appear in the original ``edge_index``. ``edge_ids`` gives, for every CSR
entry, the position of its edge in that ``edge_index`` (PyG's ``e_id``).
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from .errors import IBPInputError, check_bool, check_int

__all__ = ["CSRGraph"]

_INDEX_DTYPES = (torch.int64, torch.int32)
_INT32_MAX = 2**31 - 1
#: The pinned buffer behind every live UVA tensor made by `CSRGraph.to_uva`, by its address.
_UVA_BUFFERS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def _uva_tensor(buf: Any, ptr: int, like: torch.Tensor, index: int) -> torch.Tensor:
    """A CUDA tensor of ``like``'s shape and dtype at device address ``ptr`` in ``buf``.

    ``buf`` is the pinned `ibp_graph.pinned.PinnedBuffer` that holds the address, with
    device ``index`` current. The CuPy array owns ``buf`` (``UnownedMemory``'s owner) and
    the tensor owns the array (DLPack deleter): the memory is unpinned when the last tensor
    over it dies.
    """
    from .kernels.runtime import cupy

    cp = cupy()
    _UVA_BUFFERS[ptr] = buf
    nbytes = like.numel() * like.element_size()
    mem = cp.cuda.UnownedMemory(ptr, nbytes, buf, index)
    arr = cp.ndarray(
        tuple(like.shape),
        dtype=np.dtype(str(like.dtype).removeprefix("torch.")),
        memptr=cp.cuda.MemoryPointer(mem, 0),
    )
    return torch.from_dlpack(arr)


def _uva_buffer(t: torch.Tensor) -> Any:
    """The pinned buffer of a UVA tensor made by `CSRGraph.to_uva` (or a view of one), or None."""
    if t.device.type != "cuda":
        return None
    return _UVA_BUFFERS.get(t.untyped_storage().data_ptr())


def _uva_host_copy(t: torch.Tensor) -> torch.Tensor | None:
    """A contiguous CPU copy of a UVA tensor made by `CSRGraph.to_uva`, read from host memory.

    None when ``t`` is not such a tensor (or a view of one). Reading the pinned pages on the
    host is a memcpy; ``t.cpu()`` would be a device-to-host copy of memory that is already on
    the host.
    """
    buf = _uva_buffer(t)
    base = t.untyped_storage().data_ptr()
    if buf is None or buf.device_ptr != base:
        return None
    nbytes = t.untyped_storage().nbytes()
    host = torch.from_numpy(buf.array[:nbytes]).view(t.dtype)
    return host.as_strided(t.shape, t.stride(), t.storage_offset()).clone(
        memory_format=torch.contiguous_format
    )


def _is_pairs(indices: torch.Tensor, edge_ids: torch.Tensor) -> bool:
    """Whether ``indices`` and ``edge_ids`` are the two columns of one ``(E, 2)`` int64 array.

    That is `CSRGraph.pairs`: entry ``p``'s source and edge id are one 16-byte word, 16-byte
    aligned, which the hop kernels read with one load.
    """
    if indices.dtype != torch.int64 or edge_ids.dtype != torch.int64:
        return False
    if indices.device != edge_ids.device or indices.numel() != edge_ids.numel():
        return False
    if indices.untyped_storage().data_ptr() != edge_ids.untyped_storage().data_ptr():
        return False
    strided = indices.numel() <= 1 or indices.stride() == edge_ids.stride() == (2,)
    return (
        strided and edge_ids.data_ptr() == indices.data_ptr() + 8 and indices.data_ptr() % 16 == 0
    )


def check_pairs_dtype(indices_dtype: torch.dtype, what: str) -> None:
    """Refuse the pairs layout (`CSRGraph.pairs`) for ``indices_dtype`` other than int64.

    ``what`` names the call that would make it (``"to_uva(pairs=True)"``, ...).

    Raises:
        IBPInputError: the indices are not int64.
    """
    if indices_dtype != torch.int64:
        raise IBPInputError(
            f"{what} interleaves 8-byte indices with their edge ids; this graph's indices are "
            f"{indices_dtype} (pass pairs=False, or build it with indices_dtype=torch.int64)"
        )


def _in_gpu_memory(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` in ``device``'s own memory (a UVA tensor is copied there from host memory)."""
    host = _uva_host_copy(t)
    if host is not None:
        return host.to(device)
    moved = t.to(device)
    return moved.clone() if _uva_buffer(moved) is not None else moved


def _type_name(x: object) -> str:
    return type(x).__name__


def _as_edge_index(edge_index: object) -> torch.Tensor:
    """A 2 x E integer tensor sharing memory with ``edge_index`` (tensor or array), never copied."""
    if isinstance(edge_index, np.ndarray):
        if edge_index.dtype.kind not in "iu":
            raise IBPInputError(
                f"edge_index must be an integer array, got dtype {edge_index.dtype}"
            )
        if edge_index.dtype == np.uint64:
            edge_index = edge_index.astype(np.int64)  # torch has no uint64 indexing
        with warnings.catch_warnings():  # read-only arrays (memmaps) are fine: never written
            warnings.simplefilter("ignore", UserWarning)
            edge_index = torch.from_numpy(edge_index)
    if not isinstance(edge_index, torch.Tensor):
        raise IBPInputError(
            f"edge_index must be a torch.Tensor or numpy.ndarray, got '{_type_name(edge_index)}'"
        )
    if (
        edge_index.dtype.is_floating_point
        or edge_index.dtype.is_complex
        or (edge_index.dtype == torch.bool)
    ):
        raise IBPInputError(f"edge_index must hold integers, got dtype {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise IBPInputError(
            f"edge_index must have shape (2, num_edges), got {tuple(edge_index.shape)}"
        )
    return edge_index


def _check_num_nodes(num_nodes: object) -> int:
    if isinstance(num_nodes, torch.Tensor) and num_nodes.numel() == 1:
        num_nodes = num_nodes.item()
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)):
        raise IBPInputError(f"num_nodes must be an int, got '{_type_name(num_nodes)}'")
    if num_nodes < 1:
        raise IBPInputError(f"num_nodes must be >= 1, got {int(num_nodes)}")
    return int(num_nodes)


def _first_bad(edge_index: torch.Tensor, bad: torch.Tensor, what: str) -> IBPInputError:
    """The error naming the first edge (by position) with a bad endpoint."""
    cols = bad.any(dim=0).nonzero()
    e = int(cols[0, 0])
    r = 0 if bool(bad[0, e]) else 1
    value = int(edge_index[r, e])
    return IBPInputError(
        f"edge_index[{r}, {e}] = {value} {what} (edge {e} is "
        f"{int(edge_index[0, e])} -> {int(edge_index[1, e])})"
    )


@dataclass(frozen=True)
class CSRGraph:
    """In-neighbor CSR of a directed graph, built once and read by `NeighborSampler`.

    Build it with `from_edge_index`, `from_data` (a PyG ``Data``) or `from_ogb` (an OGB graph
    dict) rather than by hand.

    Attributes:
        indptr: ``(num_nodes + 1,)`` int64; the in-neighbors of ``v`` are
            ``indices[indptr[v]:indptr[v + 1]]``.
        indices: ``(num_edges,)`` int64 or int32 source node of every entry, grouped by target,
            in edge order within a target.
        edge_ids: ``(num_edges,)`` int64 position of every entry's edge in the original
            ``edge_index``.
        num_nodes: number of nodes.

    Every array is contiguous, except in the pairs layout (`pairs`), which `to_uva` makes by
    default: int64 ``indices`` and ``edge_ids`` are then the two columns of one
    ``(num_edges, 2)`` array.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    edge_ids: torch.Tensor
    num_nodes: int
    _entries: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = check_int("num_nodes", self.num_nodes, 1)
        object.__setattr__(self, "num_nodes", n)
        for name in ("indptr", "indices", "edge_ids"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dim() != 1:
                raise IBPInputError(f"{name} must be a 1-D torch.Tensor, got {t!r:.80}")
        pairs = _is_pairs(self.indices, self.edge_ids)
        for name in ("indptr",) if pairs else ("indptr", "indices", "edge_ids"):
            t = getattr(self, name)
            if not t.is_contiguous():  # the kernels read them as flat arrays
                object.__setattr__(self, name, t.contiguous())
        entries = self.indices
        if pairs:
            entries = entries.as_strided((entries.numel(), 2), (2, 1))
        object.__setattr__(self, "_entries", entries)
        if self.indptr.dtype != torch.int64 or self.indptr.numel() != n + 1:
            raise IBPInputError(
                f"indptr must be int64 of length num_nodes + 1 = {n + 1}, got "
                f"{self.indptr.dtype} of length {self.indptr.numel()}"
            )
        if self.indices.dtype not in _INDEX_DTYPES:
            raise IBPInputError(f"indices must be int64 or int32, got {self.indices.dtype}")
        if self.edge_ids.dtype != torch.int64 or self.edge_ids.numel() != self.indices.numel():
            raise IBPInputError(
                f"edge_ids must be int64 with one entry per index ({self.indices.numel()}), "
                f"got {self.edge_ids.dtype} of length {self.edge_ids.numel()}"
            )
        devices = {self.indptr.device, self.indices.device, self.edge_ids.device}
        if len(devices) != 1:
            raise IBPInputError(f"indptr, indices and edge_ids are on different devices: {devices}")

    # ----------------------------------------------------------------------------------------
    # Constructors
    # ----------------------------------------------------------------------------------------

    @classmethod
    def from_edge_index(
        cls,
        edge_index: torch.Tensor | np.ndarray,
        num_nodes: int | None = None,
        *,
        add_reverse: bool = False,
        indices_dtype: torch.dtype = torch.int64,
    ) -> CSRGraph:
        """Build the in-neighbor CSR of ``edge_index`` (one stable sort, no Python loop).

        Example:
            >>> g = CSRGraph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 1]]))
            >>> g.indices[g.indptr[1] : g.indptr[2]].tolist()  # sources of edges into 1
            [0, 2]

        Args:
            edge_index: ``(2, E)`` integer tensor or NumPy array, row 0 the sources and row 1
                the targets (PyG's convention). It is never modified; the CSR lives on its
                device.
            num_nodes: number of nodes (default: ``edge_index.max() + 1``).
            add_reverse: also add ``v -> u`` for every edge ``u -> v`` (nothing is
                deduplicated; a self-loop is then stored twice). Edge ``e`` reversed gets
                edge id ``E + e``, i.e. ids index ``cat([edge_index, edge_index.flip(0)], 1)``
                (default: False).
            indices_dtype: ``torch.int64`` or ``torch.int32`` (half the memory; needs
                ``num_nodes < 2**31``) (default: ``torch.int64``).

        Raises:
            IBPInputError: ``edge_index`` is not a ``2 x E`` integer tensor/array, holds a
                negative id or one ``>= num_nodes`` (naming the first such edge), or
                ``num_nodes < 1``.
        """
        ei = _as_edge_index(edge_index)
        add_reverse = check_bool("add_reverse", add_reverse)
        if indices_dtype not in _INDEX_DTYPES:
            raise IBPInputError(
                f"indices_dtype must be torch.int64 or torch.int32, got {indices_dtype!r}"
            )
        num_edges = ei.size(1)
        if num_edges:
            neg = ei < 0
            if bool(neg.any()):
                raise _first_bad(ei, neg, "is negative")
        if num_nodes is None:
            if num_edges == 0:
                raise IBPInputError(
                    "num_nodes must be >= 1, got 0 (edge_index is empty: pass num_nodes)"
                )
            num_nodes = int(ei.max()) + 1
        n = _check_num_nodes(num_nodes)
        if num_edges:
            too_big = ei >= n
            if bool(too_big.any()):
                raise _first_bad(ei, too_big, f"is out of range for num_nodes={n}")
        if indices_dtype == torch.int32 and n > _INT32_MAX:
            raise IBPInputError(f"indices_dtype=torch.int32 needs num_nodes < 2**31, got {n}")

        src, dst = ei[0], ei[1]
        if add_reverse:
            src, dst = torch.cat([src, dst]), torch.cat([dst, src])
        dst = dst.long()
        order = torch.sort(dst, stable=True).indices  # the edge ids, grouped by target
        counts = torch.bincount(dst, minlength=n)
        del dst
        indptr = torch.zeros(n + 1, dtype=torch.int64, device=ei.device)
        torch.cumsum(counts, 0, out=indptr[1:])
        indices = src[order].to(indices_dtype)
        return cls(indptr=indptr, indices=indices, edge_ids=order, num_nodes=n)

    @classmethod
    def from_data(cls, data: Any, **kwargs: Any) -> CSRGraph:
        """Build from a PyG ``Data`` (or any object with ``edge_index`` and ``num_nodes``).

        Args:
            data: object with an ``edge_index`` attribute and optionally ``num_nodes``
                (``None`` or missing: inferred from ``edge_index``).
            **kwargs: ``add_reverse`` and ``indices_dtype`` of `from_edge_index`.
        """
        edge_index = getattr(data, "edge_index", None)
        if edge_index is None:
            raise IBPInputError(f"data must have an 'edge_index', got '{_type_name(data)}'")
        num_nodes = getattr(data, "num_nodes", None)
        return cls.from_edge_index(edge_index, num_nodes, **kwargs)

    @classmethod
    def from_ogb(cls, graph: dict, **kwargs: Any) -> CSRGraph:
        """Build from OGB's library-agnostic graph dict (``NodePropPredDataset()[0][0]``).

        Args:
            graph: dict with ``"edge_index"`` (NumPy ``(2, E)``) and ``"num_nodes"``.
            **kwargs: ``add_reverse`` and ``indices_dtype`` of `from_edge_index`.
        """
        if not isinstance(graph, dict):
            raise IBPInputError(f"graph must be an OGB graph dict, got '{_type_name(graph)}'")
        missing = [k for k in ("edge_index", "num_nodes") if k not in graph]
        if missing:
            raise IBPInputError(f"OGB graph dict is missing {missing}, has {sorted(graph)}")
        return cls.from_edge_index(graph["edge_index"], graph["num_nodes"], **kwargs)

    # ----------------------------------------------------------------------------------------
    # Placement and queries
    # ----------------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """Where the arrays live."""
        return self.indptr.device

    @property
    def pairs(self) -> bool:
        """Whether every entry's source and edge id are one 16-byte word (the pairs layout).

        Int64 ``indices`` and ``edge_ids`` are then the columns of one ``(num_edges, 2)``
        array, so that the hop kernels read a sampled edge's source and id with one load:
        over UVA, one PCIe read where separate arrays take two (`to_uva`).
        """
        return self._entries.dim() == 2

    @property
    def entries(self) -> torch.Tensor:
        """What the hop kernels read at a CSR position.

        ``indices``, or with `pairs` the ``(num_edges, 2)`` int64 array of sources and edge
        ids behind it.
        """
        return self._entries

    @property
    def num_edges(self) -> int:
        """Number of CSR entries (edges, reversed ones included)."""
        return self.indices.numel()

    def in_degree(self) -> torch.Tensor:
        """``(num_nodes,)`` int64 number of in-neighbors of every node."""
        return self.indptr[1:] - self.indptr[:-1]

    def to(self, device: str | torch.device, non_blocking: bool = False) -> CSRGraph:
        """The same graph on ``device`` (``self`` where it is there already).

        A UVA graph (`to_uva`) counts as being on its GPU: ``to`` that GPU returns it
        unchanged, still in host memory; ``to("cpu")`` copies its arrays on the host (no
        device-to-host transfer of memory that never left the host).

        Args:
            device: where the arrays go.
            non_blocking: passed to ``torch.Tensor.to`` (default: False).
        """
        device = torch.device(device)

        def move(t: torch.Tensor) -> torch.Tensor:
            if device.type == "cpu":
                host = _uva_host_copy(t)
                if host is not None:
                    return host
            return t.to(device, non_blocking=non_blocking)

        moved = replace(
            self, indptr=move(self.indptr), indices=move(self.indices), edge_ids=move(self.edge_ids)
        )
        return self if moved.indptr is self.indptr else moved

    def as_pairs(self, pairs: bool = True) -> CSRGraph:
        """The same graph, on the same device, in the pairs layout (`pairs`) or out of it.

        ``self`` when it is in that layout already. For a graph over UVA, `to_uva` makes the
        layout in pinned memory instead.

        Args:
            pairs: True: int64 ``indices`` and ``edge_ids`` interleaved in one new
                ``(num_edges, 2)`` array; False: each in its own contiguous array
                (default: True).

        Raises:
            IBPInputError: ``pairs`` is not a bool, ``pairs=True`` with int32 indices, or a
                UVA graph (`is_uva`).
        """
        pairs = check_bool("pairs", pairs)
        if pairs == self.pairs:
            return self
        if self.is_uva():
            raise IBPInputError(
                f"as_pairs would copy this UVA graph to GPU memory; use to_uva(pairs={pairs})"
            )
        if not pairs:
            return replace(self, indices=self.indices.clone(), edge_ids=self.edge_ids.clone())
        check_pairs_dtype(self.indices.dtype, "as_pairs")
        both = torch.stack([self.indices, self.edge_ids], 1)
        return replace(self, indices=both[:, 0], edge_ids=both[:, 1])

    def pin_memory(self) -> CSRGraph:
        """A copy in page-locked host memory (faster, asynchronous copies to the GPU).

        Without a CUDA device nothing can be pinned: like ``torch.utils.data.DataLoader``, this
        warns and returns ``self`` unchanged.
        """
        if self.device.type != "cpu":
            raise IBPInputError(f"pin_memory needs a CPU graph, this one is on {self.device}")
        if not torch.cuda.is_available():
            warnings.warn(
                "CSRGraph.pin_memory: no CUDA device, the graph is left in pageable memory",
                stacklevel=2,
            )
            return self
        return replace(
            self,
            indptr=self.indptr.pin_memory(),
            indices=self.indices.pin_memory(),
            edge_ids=self.edge_ids.pin_memory(),
        )

    def to_uva(
        self,
        device: str | torch.device = "cuda",
        *,
        indptr_in_gpu: bool | None = None,
        pairs: bool | None = None,
    ) -> CSRGraph:
        """The graph in pinned host memory, as CUDA tensors the GPU reads over UVA.

        For graphs larger than the GPU: the in-neighbor arrays stay in host memory
        (page-locked and mapped), yet they are CUDA tensors, so the sampler runs on the GPU
        and reads them over PCIe (zero-copy). The memory is released after the last tensor
        that uses it is dropped, at the next safe point (`ibp_graph.pinned.release_deferred`:
        when new memory is pinned, when a prefetching loader ends an epoch, at exit), never
        with a device-wide synchronise in the middle of an epoch. ``to("cpu")`` copies it
        back on the host.

        Every sector the GPU reads over PCIe is a round trip, so by default the layout keeps
        them few (`benchmarks/uva_reads.py` counts them): ``indptr``, 8 bytes a node and read
        once for every sampled node, goes to GPU memory; and int64 ``indices`` and
        ``edge_ids`` are interleaved (`pairs`), so that one read gets a sampled edge's source
        and id. A graph already over UVA on that GPU (`is_uva`, also `uva_in_place`'s) is
        returned as it is, unless an argument asks for another layout.

        Example:
            >>> uva = graph.to_uva("cuda")  # doctest: +SKIP
            >>> uva.is_uva(), uva.pairs, uva.indptr.is_cuda  # doctest: +SKIP
            (True, True, True)

        Args:
            device: the GPU that reads the graph (default: ``"cuda"``).
            indptr_in_gpu: copy ``indptr`` to the GPU's memory (``(num_nodes + 1) * 8``
                bytes); False keeps it in pinned host memory too. None: True, or as it is in
                a UVA graph (default: None).
            pairs: interleave ``indices`` and ``edge_ids`` in one ``(num_edges, 2)`` int64
                array (`pairs`); needs int64 indices (an int32 graph, chosen for its 4-byte
                indices, would grow to 16 bytes an edge). None: when the indices are int64,
                or as it is in a UVA graph (default: None).

        Raises:
            IBPInputError: ``pairs=True`` with int32 indices, or an argument of the wrong
                type.
            IBPDeviceError: without a CUDA GPU.
        """
        from .kernels.runtime import cupy, device_index, require_cuda
        from .pinned import PinnedBuffer

        uva = self.is_uva()
        if indptr_in_gpu is None:
            indptr_in_gpu = not uva or _uva_buffer(self.indptr) is None
        indptr_in_gpu = check_bool("indptr_in_gpu", indptr_in_gpu)
        if pairs is None:
            pairs = self.pairs if uva else self.indices.dtype == torch.int64
        pairs = check_bool("pairs", pairs)
        if pairs:
            check_pairs_dtype(self.indices.dtype, "to_uva(pairs=True)")
        require_cuda("CSRGraph.to_uva")
        dev = torch.device(device)
        index = device_index(dev)
        cuda = torch.device("cuda", index)
        cp = cupy()

        if (
            uva
            and device_index(self.device) == index
            and self.pairs == pairs
            and (_uva_buffer(self.indptr) is None) == indptr_in_gpu
        ):
            return self

        def host(t: torch.Tensor) -> torch.Tensor:
            copy = _uva_host_copy(t)  # a UVA graph of another GPU: read on the host
            return copy if copy is not None else t.detach().cpu().contiguous()

        def mapped(like: torch.Tensor, fill) -> torch.Tensor:
            nbytes = like.numel() * like.element_size()
            # Pinned, mapped and wrapped with `index` current: the registration, the device
            # address and the DLPack exchange all belong to that device.
            with torch.cuda.device(index), cp.cuda.Device(index):
                buf = PinnedBuffer(max(nbytes, 1), "CSRGraph.to_uva", cp.cuda)
                view = torch.from_numpy(buf.array[:nbytes]).view(like.dtype).view(like.shape)
                fill(view)
                return _uva_tensor(buf, buf.pin(), like, index)

        def flat(t: torch.Tensor) -> torch.Tensor:
            src = host(t)
            return mapped(src, lambda view: view.copy_(src))

        indptr = _in_gpu_memory(self.indptr, cuda) if indptr_in_gpu else flat(self.indptr)
        if not pairs:
            return replace(
                self, indptr=indptr, indices=flat(self.indices), edge_ids=flat(self.edge_ids)
            )

        def interleave(view: torch.Tensor) -> None:
            view[:, 0].copy_(host(self.indices))
            view[:, 1].copy_(host(self.edge_ids))

        shape = torch.empty((self.num_edges, 2), dtype=torch.int64, device="meta")
        both = mapped(shape, interleave)
        return replace(self, indptr=indptr, indices=both[:, 0], edge_ids=both[:, 1])

    def uva_in_place(
        self,
        region: np.ndarray,
        device: str | torch.device = "cuda",
        what: str = "graph",
        *,
        indptr_in_gpu: bool = True,
    ) -> CSRGraph:
        """The graph as CUDA tensors over its own host memory, pinned in place: nothing copied.

        `to_uva` for a CPU graph whose arrays all lie in ``region``, memory the caller owns
        (a shared-memory segment: every local rank pins the same pages for its own GPU,
        `ibp_graph.distributed.host.share_host_graph`). ``region`` is pinned as a whole and
        the arrays become CUDA tensors at their places in it; it is unpinned, never freed,
        when the last of them is dropped, and this graph (whose arrays keep the memory
        mapped) is held until then. A graph in the pairs layout (`pairs`) keeps it.

        Args:
            region: a writable, C-contiguous 1-D ``uint8`` array that starts on a page and
                spans whole pages, whose last `ibp_graph.pinned.TAIL_PAD` bytes no array
                uses.
            device: the GPU that reads the graph (default: ``"cuda"``).
            what: the memory's name in error messages (default: ``"graph"``).
            indptr_in_gpu: copy ``indptr`` to the GPU's memory, as `to_uva` does (default:
                True); False reads it in ``region`` too.

        Raises:
            ValueError: ``region`` is not such an array, or an array of the graph is not a
                contiguous CPU tensor inside it (the two columns of one, with pairs).
            IBPInputError: ``indptr_in_gpu`` is not a bool.
            IBPDeviceError: without a CUDA GPU.
            PinningError: CUDA refused to pin ``region``.
        """
        from .kernels.runtime import cupy, device_index, require_cuda
        from .pinned import TAIL_PAD, PinnedBuffer, check_backing

        check_backing(region, region.size if isinstance(region, np.ndarray) else 0, what)
        indptr_in_gpu = check_bool("indptr_in_gpu", indptr_in_gpu)
        base, usable = region.ctypes.data, region.size - TAIL_PAD
        if self.pairs:  # the (E, 2) array behind indices and edge_ids is mapped as one
            arrays = {"indptr": self.indptr, "indices and edge_ids": self.entries}
        else:
            arrays = {"indptr": self.indptr, "indices": self.indices, "edge_ids": self.edge_ids}
        for name, t in arrays.items():
            at = t.data_ptr() - base
            inside = 0 <= at and at + t.numel() * t.element_size() <= usable
            if t.numel() and not (t.device.type == "cpu" and t.is_contiguous() and inside):
                raise ValueError(
                    f"{what}: {name} must be a contiguous CPU tensor in the first {usable} "
                    f"bytes of the region, got {t.device} tensor at offset {at}"
                )
        require_cuda("CSRGraph.uva_in_place")
        index = device_index(torch.device(device))
        cuda = torch.device("cuda", index)
        cp = cupy()
        with torch.cuda.device(index), cp.cuda.Device(index):
            buf = PinnedBuffer(usable, what, cp.cuda, backing=region)
            ptr = buf.pin()
            buf.hold(self)  # its arrays keep the region mapped while it is pinned

            def mapped(t: torch.Tensor) -> torch.Tensor:
                if not t.numel():
                    return torch.empty(t.shape, dtype=t.dtype, device=cuda)
                return _uva_tensor(buf, ptr + t.data_ptr() - base, t, index)

            indptr = self.indptr.to(cuda) if indptr_in_gpu else mapped(self.indptr)
            if self.pairs:
                both = mapped(self.entries)
                return replace(self, indptr=indptr, indices=both[:, 0], edge_ids=both[:, 1])
            return replace(
                self, indptr=indptr, indices=mapped(self.indices), edge_ids=mapped(self.edge_ids)
            )

    def is_uva(self) -> bool:
        """Whether the in-neighbor arrays are CUDA tensors over pinned host memory (`to_uva`).

        ``indices`` and ``edge_ids`` are; ``indptr`` is too, or is in the same GPU's memory.
        """
        return (
            _uva_buffer(self.indices) is not None
            and _uva_buffer(self.edge_ids) is not None
            and self.indptr.device == self.indices.device
        )

    def is_pinned(self) -> bool:
        """Whether all arrays are in page-locked host memory."""
        return all(t.is_pinned() for t in (self.indptr, self.indices, self.edge_ids))

    def __repr__(self) -> str:
        layout = ", pairs=True" if self.pairs else ""
        if self.is_uva():
            where = "GPU" if _uva_buffer(self.indptr) is None else "host"
            layout = f", uva=True, indptr_in={where}{layout}"
        return (
            f"CSRGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"indices_dtype={self.indices.dtype}, device={self.device}{layout})"
        )
