"""Tables the GPU reads itself: IBP rows or raw rows in pinned host memory, zero-copy."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import torch

from .dtypes import as_table, row_bytes, storage_dtype, torch_dtype
from .errors import IBPFormatError, IBPIndexError, IBPInputError, check_bool
from .indexing import normalize_ids
from .kernels.fetch_decode import DeviceCodec, check_idx, check_launch, fetch_decode
from .kernels.raw_gather import raw_gather
from .kernels.runtime import check_block_warps, check_chunk_rows, cupy, require_cuda
from .pinned import PinnedBuffer
from .progress import work_bar
from .table import IBPTable
from .threads import hold

#: Bytes copied into pinned memory per step of the progress bar.
COPY_CHUNK = 64 << 20
PROGRESS_MIN_BYTES = 256 << 20


def _device(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type != "cuda":
        raise IBPInputError(f"device must be a CUDA device, got {device!r}")
    require_cuda("a CUDA table")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.index >= torch.cuda.device_count():
        raise IBPInputError(f"device {dev} does not exist ({torch.cuda.device_count()} GPUs)")
    return dev


def _fill_pinned(buffer: PinnedBuffer, source: np.ndarray, desc: str, progress) -> None:
    """Copy ``source``'s bytes as they are into ``buffer`` (chunk by chunk, with a bar)."""
    flat = source.reshape(-1).view(np.uint8)
    with work_bar(flat.size, desc, unit="B", show=progress, min_size=PROGRESS_MIN_BYTES) as bar:
        for s in range(0, flat.size, COPY_CHUNK):
            part = flat[s : s + COPY_CHUNK]
            buffer.array[s : s + part.size] = part
            bar.update(part.size)


def _fill_pinned_rows(
    buffer: PinnedBuffer, rows: np.ndarray, storage: np.dtype, desc: str, progress
) -> None:
    """Copy a 2-D table into ``buffer`` as little-endian ``storage`` elements, row-major.

    Works chunk by chunk of rows, so a strided or byte-swapped (big-endian) input, or a memmap
    larger than memory, is converted without a full copy.
    """
    n, d = rows.shape
    width = d * storage.itemsize
    step = max(1, COPY_CHUNK // max(width, 1))
    with work_bar(n * width, desc, unit="B", show=progress, min_size=PROGRESS_MIN_BYTES) as bar:
        for r in range(0, n, step):
            part = np.ascontiguousarray(rows[r : r + step], dtype=storage)
            flat = part.reshape(-1).view(np.uint8)
            buffer.array[r * width : r * width + flat.size] = flat
            bar.update(flat.size)


def as_signed_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """Copy an unsigned NumPy array to ``device`` as the signed type of its width (same bits)."""
    signed = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}[array.dtype.itemsize]
    return torch.from_numpy(np.ascontiguousarray(array).view(signed)).to(device)


def _raise_errors(error: torch.Tensor, stream, path: str, idx: torch.Tensor, num_rows: int):
    """Read a launch's (2,) error slots on its stream (synchronising) and raise if set."""
    with torch.cuda.stream(stream):
        bad_id, bad_row = (int(v) for v in error.tolist())
    if bad_id:
        pos = bad_id - 1
        raise IBPIndexError(
            f"row index {int(idx[pos])} (at position {pos}) is out of range for a table "
            f"of {num_rows} rows"
        )
    if bad_row:
        pos = bad_row - 1
        raise IBPFormatError(f"{path}: corrupt row {int(idx[pos])}: its fields run past it")


def _cuda_ids(index: Any, num_rows: int, device: torch.device) -> tuple[torch.Tensor, bool]:
    """Row ids as a contiguous int64 tensor on ``device``, and whether one row was selected.

    The CPU table's rules (`normalize_ids`): CPU selections are checked here, a CUDA tensor's
    ids by the kernel, negative ones counting from the end.
    """
    if isinstance(index, torch.Tensor) and index.device.type == "cuda":
        if index.dtype == torch.bool:
            if index.shape != (num_rows,):
                raise IBPInputError(
                    f"boolean row mask has {tuple(index.shape)} entries, the table has "
                    f"{num_rows} rows"
                )
            return torch.nonzero(index).reshape(-1).to(device), False
        if index.dtype not in (torch.int64, torch.int32) or index.dim() > 1:
            raise IBPInputError(
                f"CUDA row indices must be a 0-D or 1-D int64 or int32 tensor, got "
                f"{index.dtype} {tuple(index.shape)}"
            )
        ids = index.reshape(-1).to(device=device, dtype=torch.int64)
        # -num_rows..-1 count from the end; ids below stay negative, and out of range.
        ids = torch.where((ids < 0) & (ids >= -num_rows), ids + num_rows, ids).contiguous()
        return ids, index.dim() == 0
    ids, scalar = normalize_ids(index, num_rows)
    return torch.from_numpy(ids).to(device), scalar


def launch_fetch(
    codec: DeviceCodec,
    bypass: bool,
    idx: torch.Tensor,
    out: torch.Tensor,
    error: torch.Tensor,
    *,
    out_pos: torch.Tensor | None = None,
    stream: torch.cuda.Stream | None = None,
    max_blocks: int | None = None,
    double_buffer: bool = False,
    chunk_rows: int | None = None,
    block_warps: int | None = None,
) -> None:
    """Launch one fetch of rows ``idx`` into ``out``; does not synchronise.

    The fused fetch + decode kernel (double-buffered with ``double_buffer``), or the raw
    gather when ``bypass`` (see `raw_bypass`), in chunks of ``chunk_rows`` rows when given,
    in blocks of ``block_warps`` warps.
    Row ``idx[r]`` goes to row ``out_pos[r]`` of ``out`` (``r`` when ``out_pos`` is None).
    """
    where = {
        "out_pos": out_pos,
        "stream": stream,
        "max_blocks": max_blocks,
        "chunk_rows": chunk_rows,
        "block_warps": block_warps,
    }
    if bypass:
        raw_gather(codec.rows_ptr, codec.num_rows, codec.row_bytes, idx, out, error, **where)
    else:
        fetch_decode(codec, idx, out, error, double_buffer=double_buffer, **where)


def raw_bypass(table: IBPTable) -> bool:
    """Whether a table can be fetched by the raw gather instead of the decoder.

    True when every row is stored raw and rows sit back to back at exactly their own width
    (no padding), so the row section is the original table: a table that does not compress
    then costs what a raw table costs.
    """
    width = row_bytes(table.shape[1], table.dtype_name)
    return table.stored_row_range == (width, width)


#: Below this compression ratio a fetch is bound by the link, not by decoding, and sorting its
#: ids pays: measured on an H100 (benchmarks/results/fetch-nvidia-h100-80gb-hbm3.md), sorted
#: ids made the raw gather 1.0x-4.5x faster (most on rows of 1 KiB and less), tables of ratio
#: 1.1-2.7 1.4x-4.5x on rows of 1 KiB and less (0.96x-1.03x on 4 KiB rows), and cost tables
#: of ratio 8 and more, whose fetch is decode-bound, up to 21%.
SORT_BELOW_RATIO = 4.0


def default_sort_ids(sort_ids: bool | None, ratio: float, bypass: bool) -> bool:
    """Whether a table sorts each fetch's ids.

    ``sort_ids`` itself, or when it is None, whether the fetch reads raw rows (``bypass``) or
    rows compressed less than `SORT_BELOW_RATIO`.

    Raises:
        IBPInputError: ``sort_ids`` is neither None nor a bool.
    """
    if sort_ids is not None:
        return check_bool("sort_ids", sort_ids)
    return bool(bypass or ratio < SORT_BELOW_RATIO)


class _CudaTableBase:
    """Shared fetch logic: id handling, output allocation, error checks, lifetime.

    With ``sort_ids`` a fetch sorts its ids on its stream (``torch.sort``) and launches on the
    sorted ids with the sort's permutation as the kernel's output positions, so rows are read
    from pinned memory in address order and written back in the caller's order.
    """

    path: str
    shape: tuple[int, int]
    dtype: torch.dtype
    device: torch.device

    def __init__(
        self,
        device: torch.device,
        max_blocks: int | None,
        sort_ids: bool = False,
        chunk_rows: int | None = None,
        block_warps: int | None = None,
    ):
        self.device = device
        self.max_blocks = max_blocks
        #: Launch each fetch as kernels of at most this many rows (None: one launch); checked
        #: by the subclasses before anything is pinned, and by the launchers at each fetch.
        self.chunk_rows = chunk_rows
        #: Warps per block of each fetch's kernels (None: 8); checked as ``chunk_rows`` is.
        self.block_warps = block_warps
        self.sort_ids = check_bool("sort_ids", sort_ids)
        self._pinned: PinnedBuffer | None = None
        # Held while a launch reads the pinned memory, so that `close` cannot free it between
        # the check that the table is open and the launch.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def _row_bytes(self) -> int:
        raise NotImplementedError

    def _launch(
        self,
        idx: torch.Tensor,
        out: torch.Tensor,
        error: torch.Tensor,
        stream,
        out_pos: torch.Tensor | None = None,
    ) -> None:
        raise NotImplementedError

    def _sorted(self, idx: torch.Tensor, stream) -> tuple[torch.Tensor, torch.Tensor]:
        """``torch.sort(idx)`` on ``stream``, after the work queued on the current stream."""
        if stream is not None:
            current = torch.cuda.current_stream(self.device)
            if stream != current:
                stream.wait_stream(current)  # idx was presumably made on the current stream
        with torch.cuda.stream(stream):
            ids, perm = torch.sort(idx)
        return ids, perm

    def fetch(
        self,
        idx: torch.Tensor,
        out: torch.Tensor | None = None,
        *,
        stream: torch.cuda.Stream | None = None,
        check: bool = True,
    ) -> torch.Tensor:
        """Rows ``idx`` (a CUDA int64 tensor) as a CUDA tensor, launched on ``stream``.

        ``stream`` first waits for the work queued on torch's current stream (where ``idx``
        was presumably made); ``out`` is allocated for ``stream``. With ``sort_ids`` (see the
        table's constructor) the ids are sorted on ``stream`` first; ``out`` and the errors
        are the same, bit for bit, and errors name positions in ``idx``. When ``stream`` is not
        the current stream, keep ``idx`` (and a given ``out``) alive until ``stream`` is done
        with them, or call their ``record_stream(stream)``, as for any tensor used on a side
        stream.

        Args:
            idx: row ids, a contiguous 1-D int64 tensor on this table's device.
            out: where to write (allocated on ``stream`` when None).
            stream: the stream to launch on (default: the current stream). Given one, the
                fetch runs beside the caller's work and its default grid leaves three
                quarters of the SMs free (see ``max_blocks`` of the constructor).
            check: synchronise ``stream`` and raise on the first out-of-range id (and the
                first corrupt row). With False nothing syncs and nothing is raised: the output
                row of an out-of-range id (or a corrupt row) reads as zeros, never as
                uninitialised memory; use it for ids known to be valid (e.g. from a sampler
                over this graph).

        Raises:
            IBPInputError: the table is closed, or (``check``) an id is out of range
                (`IBPIndexError`, an ``IndexError`` too, as the CPU table's).
            IBPFormatError: (``check``) a stored row is corrupt.
            ValueError: ``idx`` or ``out`` has the wrong device, type, shape or size.
        """
        if self._pinned is None:
            raise IBPInputError(f"{self.path}: the table is closed")
        if out is None:
            check_idx(idx, self.device)
            with torch.cuda.stream(stream):
                out = torch.empty(
                    (idx.shape[0], self.shape[1]), dtype=self.dtype, device=self.device
                )
        check_launch(idx, out, self._row_bytes, self.device)
        if idx.shape[0] == 0:
            return out
        # Slots of this launch only, zeroed on its stream: no stale error from an earlier
        # (unchecked) fetch, no race with a fetch on another stream.
        with torch.cuda.stream(stream):
            error = torch.zeros(2, dtype=torch.int32, device=self.device)
        # Sorted ids read the pinned rows in address order; the permutation writes each row
        # at its position in idx, and the kernel reports that position in the error slots.
        run, out_pos = self._sorted(idx, stream) if self.sort_ids else (idx, None)
        with hold(self._lock):  # on a prefetch thread, given up once its loader is closed
            if self._pinned is None:
                raise IBPInputError(f"{self.path}: the table is closed")
            self._launch(run, out, error, stream, out_pos)
        if check:
            _raise_errors(error, stream, self.path, idx, self.shape[0])
        return out

    def __getitem__(self, index: Any) -> torch.Tensor:
        """Rows as a CUDA tensor of the original dtype (checked, synchronising)."""
        idx, scalar = _cuda_ids(index, self.shape[0], self.device)
        out = self.fetch(idx)
        return out[0] if scalar else out

    def close(self) -> None:
        """Unpin the host memory; the table cannot be read afterwards.

        Waits for the device first: a fetch may still be reading the memory.
        """
        with self._lock:
            pinned, self._pinned = self._pinned, None
        if pinned is not None:
            torch.cuda.synchronize(self.device)
            pinned.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CudaIBPTable(_CudaTableBase):
    """An ``.ibp`` table whose rows sit in pinned host memory and are decoded by the GPU.

    ``table[ids]`` returns a CUDA tensor; ``table.fetch(idx, stream=...)`` is the asynchronous
    form. The file is validated (and its checksums verified) exactly as by
    :func:`ibp_graph.open` on the CPU before anything is pinned.

    Args:
        path: the ``.ibp`` file.
        device: the CUDA device (default: the current one).
        verify: check the section checksums first (default: True).
        max_blocks: cap on the fetch grid (default: None: a block on a quarter of the SMs
            for a fetch given a ``stream=`` (the loaders' prefetch), which leaves the rest to
            training, and every block the SMs hold for one on the current stream (``table[ids]``,
            ``fetch`` without ``stream=``): see `ibp_graph.kernels.runtime.fetch_blocks_per_sm`;
            never more than the kernel's occupancy allows).
        progress: show a progress bar while pinning (None: for rows of 256 MiB or more).
        pages: how the pinned rows are allocated, one of `ibp_graph.pinned.PAGE_KINDS`
            (default: None, ``$IBP_GRAPH_PINNED_PAGES`` or "huge").
        host_rows: caller-owned host memory that already holds the file's row section,
            pinned in place instead of a private copy (see `PinnedBuffer`'s ``backing``):
            e.g. one shared-memory segment that every rank of a host pins for its own GPU.
            Its bytes must equal the row section followed by zeros; they are not copied,
            checked or freed (default: None).
        sort_ids: sort each fetch's ids on the device (one ``torch.sort`` on the fetch's
            stream) and have the kernel write every row back to its caller's position, so
            the GPU reads the pinned rows in address order (GPU TLB and host page locality)
            rather than at random. Rows and errors are the same, bit for bit; the sort costs
            one more operation per fetch (0.1-0.2 ms for 10^5-10^6 ids on an H100). Default
            None: on for tables whose fetch is bound by the link, raw rows (`bypass`) or a
            ratio under `SORT_BELOW_RATIO`, off for the rest (`default_sort_ids`).
        double_buffer: decode with the double-buffered kernel, in which each warp stages
            its next row with asynchronous copies while it decodes the current one, so reads
            over PCIe overlap decoding (twice the staging shared memory; rows too wide for
            that raise ``ValueError`` at the first fetch). Rows and errors are the same, bit
            for bit. Off until measured on a GPU (``benchmarks/fetch.py --double-buffer``)
            (default: False).
        chunk_rows: launch each fetch as kernels of at most this many rows, one after another
            on its stream, so that the fetch's blocks leave the SMs between them and kernels
            beside it (training) can take whole SMs. Rows and errors are the same. Off until
            measured on a GPU (``benchmarks/overlap.py --chunk-rows``) (default: None, one
            launch per fetch).
        block_warps: warps per block of each fetch's kernels, 1 to 32 (default: None, 8).
            The grid cap (``max_blocks``) counts blocks, so more warps a block put more rows
            in flight on the same SMs: a fetch beside training keeps to a quarter of the
            SMs but fills them. Rows and errors are the same. 8 until measured on a GPU
            (``benchmarks/fetch.py --block-warps``, ``benchmarks/overlap.py
            --block-warps``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        device: str | torch.device = "cuda",
        verify: bool = True,
        max_blocks: int | None = None,
        progress: bool | None = None,
        host_rows: np.ndarray | None = None,
        pages: str | None = None,
        sort_ids: bool | None = None,
        double_buffer: bool = False,
        chunk_rows: int | None = None,
        block_warps: int | None = None,
    ):
        self.double_buffer = check_bool("double_buffer", double_buffer)
        progress = None if progress is None else check_bool("progress", progress)
        chunk_rows = check_chunk_rows(chunk_rows)
        block_warps = check_block_warps(block_warps)
        dev = _device(device)
        cp = cupy()
        cpu = IBPTable(path, mmap=True, verify=verify)
        bypass = raw_bypass(cpu)
        sort_ids = default_sort_ids(sort_ids, cpu.ratio, bypass)
        super().__init__(dev, max_blocks, sort_ids, chunk_rows, block_warps)
        self.path = cpu.path
        self.shape = cpu.shape
        self.dtype = cpu.dtype
        self.cpu_table = cpu
        with cp.cuda.Device(dev.index):
            pinned = PinnedBuffer(
                cpu.stored_bytes, cpu.path, cp.cuda, backing=host_rows, pages=pages
            )
            if host_rows is None:
                desc = f"pin {os.path.basename(cpu.path)}"
                _fill_pinned(pinned, cpu.rows_section, desc, progress)
            rows_ptr = pinned.pin()
        self._pinned = pinned
        params = cpu.params
        self.codec = DeviceCodec(
            rows_ptr=rows_ptr,
            offsets=as_signed_tensor(cpu.offsets.astype(cpu.header.sections["offsets"].dtype), dev),
            cluster_ids=None if cpu.cluster_ids is None else as_signed_tensor(cpu.cluster_ids, dev),
            masks=as_signed_tensor(params.masks, dev),
            code_bits=as_signed_tensor(params.code_bits, dev),
            bitvals=as_signed_tensor(params.match_values, dev),
            num_rows=cpu.shape[0],
            num_words=params.num_words,
            word_bytes=params.word_bytes,
            align=cpu.align,
            row_bytes=row_bytes(cpu.shape[1], cpu.dtype_name),
            longest_row=cpu.stored_row_range[1],
        )
        # Launches read the codec's tensors by address, beside the pinned rows: a table
        # dropped without `close` while a fetch runs on a side stream must not hand their
        # memory back to torch's allocator before the rows are released (see
        # `PinnedBuffer.hold`).
        pinned.hold(self.codec)
        self._bypass = bypass
        # The constant tensors (and the prefix sums derived from them) are read by address
        # on whatever stream fetches: let their copies complete once, here.
        torch.cuda.synchronize(dev)

    @property
    def ratio(self) -> float:
        """Raw row bytes over stored row bytes."""
        return self.cpu_table.ratio

    @property
    def bypass(self) -> bool:
        """Whether fetches skip decoding: see `raw_bypass`."""
        return self._bypass

    @property
    def stored_bytes(self) -> int:
        """Bytes of pinned row data."""
        return self.cpu_table.stored_bytes

    @property
    def _row_bytes(self) -> int:
        return self.codec.row_bytes

    def _launch(
        self,
        idx: torch.Tensor,
        out: torch.Tensor,
        error: torch.Tensor,
        stream,
        out_pos: torch.Tensor | None = None,
    ) -> None:
        launch_fetch(
            self.codec,
            self.bypass,
            idx,
            out,
            error,
            out_pos=out_pos,
            stream=stream,
            max_blocks=self.max_blocks,
            double_buffer=self.double_buffer,
            chunk_rows=self.chunk_rows,
            block_warps=self.block_warps,
        )

    def __repr__(self) -> str:
        n, d = self.shape
        return (
            f"CudaIBPTable('{self.path}', shape=({n}, {d}), dtype={self.dtype}, "
            f"ratio={self.ratio:.3f}, device={self.device})"
        )


class PinnedRawTable(_CudaTableBase):
    """An uncompressed table in pinned host memory, gathered by the GPU over UVA.

    The IBP-off baseline, with the same interface as :class:`CudaIBPTable`.

    Args:
        data: a 2-D NumPy array or torch tensor (copied into pinned memory; not modified).
        device: the CUDA device (default: the current one).
        max_blocks: cap on the gather grid (default: None, as `CudaIBPTable`'s: a quarter
            of the SMs for a fetch given a ``stream=``, all of them otherwise).
        progress: show a progress bar while pinning.
        pages: how the pinned rows are allocated, one of `ibp_graph.pinned.PAGE_KINDS`
            (default: None, ``$IBP_GRAPH_PINNED_PAGES`` or "huge").
        sort_ids: gather each fetch's rows in ascending id order and write them back to the
            caller's positions, as :class:`CudaIBPTable`'s ``sort_ids`` (default: None, on:
            a raw gather is bound by the link).
        chunk_rows: launch each fetch as kernels of at most this many rows, as
            :class:`CudaIBPTable`'s ``chunk_rows`` (default: None, one launch per fetch).
        block_warps: warps per block of each fetch's kernels, as :class:`CudaIBPTable`'s
            ``block_warps`` (default: None, 8).
    """

    def __init__(
        self,
        data: Any,
        *,
        device: str | torch.device = "cuda",
        max_blocks: int | None = None,
        progress: bool | None = None,
        pages: str | None = None,
        sort_ids: bool | None = None,
        chunk_rows: int | None = None,
        block_warps: int | None = None,
    ):
        progress = None if progress is None else check_bool("progress", progress)
        chunk_rows = check_chunk_rows(chunk_rows)
        block_warps = check_block_warps(block_warps)
        dev = _device(device)
        cp = cupy()
        array, name = as_table(data)
        sort_ids = default_sort_ids(sort_ids, 1.0, True)
        super().__init__(dev, max_blocks, sort_ids, chunk_rows, block_warps)
        self.path = f"<raw {name} table>"
        self.shape = (int(array.shape[0]), int(array.shape[1]))
        self.dtype = torch_dtype(name)
        self.row_bytes = row_bytes(self.shape[1], name)
        with cp.cuda.Device(dev.index):
            pinned = PinnedBuffer(self.shape[0] * self.row_bytes, self.path, cp.cuda, pages=pages)
            _fill_pinned_rows(pinned, array, storage_dtype(name), "pin raw table", progress)
            self.rows_ptr = pinned.pin()
        self._pinned = pinned

    @property
    def ratio(self) -> float:
        """Always 1.0: rows are stored as they are."""
        return 1.0

    @property
    def _row_bytes(self) -> int:
        return self.row_bytes

    def _launch(
        self,
        idx: torch.Tensor,
        out: torch.Tensor,
        error: torch.Tensor,
        stream,
        out_pos: torch.Tensor | None = None,
    ) -> None:
        raw_gather(
            self.rows_ptr,
            self.shape[0],
            self.row_bytes,
            idx,
            out,
            error,
            out_pos=out_pos,
            stream=stream,
            max_blocks=self.max_blocks,
            chunk_rows=self.chunk_rows,
            block_warps=self.block_warps,
        )

    def __repr__(self) -> str:
        n, d = self.shape
        return f"PinnedRawTable(shape=({n}, {d}), dtype={self.dtype}, device={self.device})"
