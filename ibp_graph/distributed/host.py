"""One copy per host: local rank 0 fills a segment, the other local ranks attach to it.

Every rank calls the same function; they meet at two barriers:

1. local rank 0 creates the segment (its size checked against ``/dev/shm`` first, one clear
   error when it does not fit) and fills it; the others wait;
2. the other local ranks map it; local rank 0 waits, then removes its name, so nothing is
   left in ``/dev/shm`` whatever happens to the ranks afterwards (the memory is freed with
   the last mapping). Before that point the creator's watchdog removes it if it dies.

.. code-block:: python

    table = open_shared_table(ctx, "cora.ibp")          # a SharedIBPTable on every rank
    gpu = pin_shared_table(ctx, table)                  # a CudaIBPTable pinning the segment
    graph = share_host_graph(ctx, lambda: CSRGraph.from_data(data))
    ds = share_host_dataset(ctx, lambda: load_dataset("cora"), omit=("x",))
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable

from ..datasets import GraphDataset
from ..graph import CSRGraph
from ..table import IBPTable
from .ddp import DistContext
from .shared_dataset import attach_dataset, check_omit, dataset_segment_size, share_dataset
from .shared_graph import attach_graph, graph_segment_size, share_graph
from .shared_table import SharedIBPTable, fill_rows, segment_size
from .shm import SharedSegment, check_memlock

__all__ = ["open_shared_table", "pin_shared_table", "share_host_dataset", "share_host_graph"]


def _one_per_host(
    ctx: DistContext, name: str, create: Callable[[], SharedSegment]
) -> SharedSegment:
    """The two-barrier protocol: ``create`` on local rank 0, attach elsewhere, then unlink."""
    seg = create() if ctx.is_local_main else None
    try:
        ctx.barrier()
        if seg is None:
            seg = SharedSegment.attach(name)
        ctx.barrier()
    except BaseException:
        if seg is not None:
            seg.close()
        raise
    seg.unlink()
    return seg


def _filled(name: str, nbytes: int, fill: Callable[[SharedSegment], None]) -> SharedSegment:
    """A new segment of ``nbytes`` passed to ``fill`` (closed and removed if that fails)."""
    seg = SharedSegment.create(name, nbytes)
    try:
        fill(seg)
    except BaseException:
        seg.close()
        raise
    return seg


def open_shared_table(
    ctx: DistContext,
    path: str | os.PathLike[str],
    source: Callable[[], IBPTable] | None = None,
) -> SharedIBPTable:
    """The table at ``path`` with its rows in this host's one shared segment.

    Local rank 0 copies the rows of ``source()``, a table it opens (or writes) at ``path``
    (default: ``IBPTable(path)``, every check and checksum included); the other local ranks
    call nothing until it has.

    Raises:
        SharedMemoryError: ``/dev/shm`` is too small (on local rank 0; the message names the
            sizes and how to raise it).
        DistributedError: another rank failed meanwhile.
        IBPFormatError: the file is not a valid ``.ibp`` file.
    """
    name = ctx.segment_name("rows")

    def create() -> SharedSegment:
        with source() if source is not None else IBPTable(path, verify=True) as src:
            return _filled(name, segment_size(src), lambda seg: fill_rows(src, seg))

    seg = _one_per_host(ctx, name, create)
    try:
        return SharedIBPTable(path, seg)
    except BaseException:
        seg.close()
        raise


def pin_shared_table(ctx: DistContext, table: SharedIBPTable, *, progress: bool | None = None):
    """A `CudaIBPTable` on ``ctx.device`` that pins ``table``'s segment in place.

    Every local rank pins the same host pages for its own GPU; nothing is copied. Keep
    ``table`` open while the GPU table is used, and close the GPU table first.

    Raises:
        SharedMemoryError: pinning failed and the locked-memory limit is below the segment's
            size (the message names both and how to raise the limit). The limit is not
            checked beforehand: CUDA's pinning is often not charged to it.
        PinningError: CUDA refused to pin the memory for another reason.
    """
    from .. import cuda_table
    from ..pinned import PinningError

    try:
        return cuda_table.CudaIBPTable(
            table.path,
            device=ctx.device,
            verify=False,
            progress=progress,
            host_rows=table.host_rows,
        )
    except PinningError:
        check_memlock(table.segment.nbytes, table.path)
        raise


def share_host_graph(
    ctx: DistContext, build: Callable[[], CSRGraph], *, uva: bool = False
) -> CSRGraph:
    """A `CSRGraph` held once per host: local rank 0 calls ``build`` and shares the result.

    The returned graph's tensors are views of the segment (kept mapped while they live).
    With ``uva``, they are instead CUDA tensors that ``ctx.device`` reads over UVA from the
    segment, which this rank pins in place for its GPU (`CSRGraph.uva_in_place`): one copy
    of the graph per host, where `CSRGraph.to_uva` would pin a copy per rank. The layout is
    `to_uva`'s: int64 sources and edge ids interleaved in the segment (`CSRGraph.pairs`),
    ``indptr`` copied to each rank's GPU.

    Raises:
        SharedMemoryError: ``/dev/shm`` is too small for the graph, or with ``uva``, pinning
            failed and the locked-memory limit is below the segment's size.
        PinningError: with ``uva``, CUDA refused to pin the segment for another reason.
        DistributedError: another rank failed meanwhile.
    """
    from ..pinned import PinningError

    name = ctx.segment_name("graph")

    def create() -> SharedSegment:
        graph = build().to("cpu")
        pairs = uva and graph.indices.element_size() == 8  # int64: pairs, as to_uva
        size = graph_segment_size(graph, pairs)
        return _filled(name, size, lambda seg: share_graph(graph, seg, pairs))

    segment = _one_per_host(ctx, name, create)
    graph = attach_graph(segment)
    if not uva:
        return graph
    try:
        return graph.uva_in_place(segment.array, ctx.device, name)
    except PinningError:
        check_memlock(segment.nbytes, name)
        raise


def share_host_dataset(
    ctx: DistContext, load: Callable[[], GraphDataset], *, omit: Iterable[str] = ()
) -> GraphDataset:
    """A `GraphDataset` held once per host: local rank 0 calls ``load`` and shares the result.

    The other local ranks never load the dataset: its tensors are views of one segment of
    the host, but for those named in ``omit`` (``"x"`` for ranks that read the rows from a
    compressed table, ``"edge_index"`` for ranks that sample a CSR graph shared apart),
    which they get as meta tensors: shape and dtype, no data. Local rank 0 keeps the omitted
    tensors it loaded, to compress the rows or build the graph from them.

    Raises:
        SharedMemoryError: ``/dev/shm`` is too small for the dataset.
        DistributedError: another rank failed meanwhile.
        IBPInputError: ``omit`` names no tensor of a dataset.
    """
    name = ctx.segment_name("dataset")
    omit = check_omit(omit)  # on every rank, before the first barrier
    loaded: list[GraphDataset] = []

    def create() -> SharedSegment:
        ds = load()
        loaded.append(ds)
        size = dataset_segment_size(ds, omit=omit)
        return _filled(name, size, lambda seg: share_dataset(ds, seg, omit=omit))

    seg = _one_per_host(ctx, name, create)
    try:
        shared = attach_dataset(seg)
    except BaseException:
        seg.close()
        raise
    if loaded:
        return dataclasses.replace(shared, **{n: getattr(loaded[0], n) for n in omit})
    return shared
