"""Where node features come from: one interface over tensors, arrays, IBP and pinned tables.

A loader asks a `FeatureSource` for the rows of the sampled nodes and never cares how they
are stored. `as_feature_source` picks the implementation, and where the rows land:

============================  ===============  ===========================================
``features``                  ``device``       rows are
============================  ===============  ===========================================
tensor (CPU or CUDA)          None             gathered where the tensor is
CPU tensor                    ``"cuda"``       gathered on the CPU, then copied to the GPU
2-D NumPy array (or memmap)   None / ``"cpu"`` gathered on the CPU (only those rows read)
2-D NumPy array (or memmap)   ``"cuda"``       gathered on the CPU, then copied to the GPU
`IBPTable` (CPU)              None / ``"cpu"`` decoded on the CPU (NumPy)
`IBPTable` (CPU)              ``"cuda"``       the file is opened as a `CudaIBPTable`
`CudaIBPTable`                None / its GPU   fetched and decoded by the GPU over UVA
`PinnedRawTable`              None / its GPU   gathered by the GPU over UVA (IBP off)
============================  ===============  ===========================================

Example:
    >>> source = as_feature_source(ibp_graph.open("x.ibp"))     # doctest: +SKIP
    >>> rows = source.gather(torch.tensor([4, 2, 4]))            # doctest: +SKIP
    >>> source.stored_bytes(torch.tensor([4, 2, 4]))             # doctest: +SKIP
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np
import torch

from .cuda_table import CudaIBPTable, PinnedRawTable
from .dtypes import SUPPORTED_DTYPES, torch_dtype
from .errors import IBPInputError
from .table import IBPTable

__all__ = [
    "FeatureSource",
    "IBPFeatures",
    "NumpyFeatures",
    "RawPinnedFeatures",
    "TensorFeatures",
    "as_feature_source",
    "resolve_device",
]


def resolve_device(device: str | torch.device | None) -> torch.device | None:
    """``device`` as a `torch.device` with an explicit CUDA index (None stays None).

    Raises:
        IBPInputError: ``device`` is not a device, or is a CUDA device and no GPU is usable.
    """
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise IBPInputError(f"device must be a torch.device or a string, got {device!r}") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise IBPInputError(f"device='{dev}' but torch.cuda.is_available() is False")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _stream_context(stream: torch.cuda.Stream | None) -> Any:
    """``torch.cuda.stream(stream)``; a no-op context for None."""
    return torch.cuda.stream(stream)


def _pinned_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor in pinned memory from torch's caching host allocator."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)


class FeatureSource(abc.ABC):
    """A read-only table of node features that returns any set of rows.

    Subclasses say how many rows there are, their shape and dtype, where gathered rows land
    (`device`), and how many bytes reading some rows moves from host memory (`stored_bytes`).
    """

    @property
    @abc.abstractmethod
    def num_rows(self) -> int:
        """Number of rows (nodes)."""

    @property
    @abc.abstractmethod
    def row_shape(self) -> tuple[int, ...]:
        """Shape of one row (``(num_features,)`` for a 2-D table)."""

    @property
    @abc.abstractmethod
    def dtype(self) -> torch.dtype:
        """Element type of the rows."""

    @property
    @abc.abstractmethod
    def device(self) -> torch.device:
        """Where `gather` puts its results."""

    @property
    def index_device(self) -> torch.device:
        """Where `gather` wants its ids (it moves them otherwise): `device` unless overridden."""
        return self.device

    @property
    def ratio(self) -> float:
        """Raw bytes over stored bytes of the whole table (1.0 when stored as is)."""
        return 1.0

    @property
    def row_bytes(self) -> int:
        """Bytes of one decoded row."""
        return math.prod(self.row_shape) * self.dtype.itemsize

    @abc.abstractmethod
    def gather(self, ids: torch.Tensor, *, stream: torch.cuda.Stream | None = None) -> torch.Tensor:
        """Rows ``ids`` (1-D int64, any order, repeats allowed) as a tensor on `device`.

        Args:
            ids: row ids, best already on `index_device`.
            stream: CUDA sources: the stream to work on (default: the current one).
        """

    @abc.abstractmethod
    def stored_bytes(self, ids: torch.Tensor) -> int | torch.Tensor:
        """Bytes that reading rows ``ids`` moves over PCIe.

        An int, or a 0-d int64 tensor on `index_device` where counting them on the host
        would synchronise.
        """

    def __len__(self) -> int:
        return self.num_rows


class TensorFeatures(FeatureSource):
    """A plain tensor, on the CPU or a GPU, gathered with ``index_select``.

    Args:
        tensor: the table, at least 1-D, one row per node.
        device: where results land (default: the tensor's device). A CPU tensor with a CUDA
            device is gathered on the CPU and copied to the GPU.
    """

    def __init__(self, tensor: torch.Tensor, device: str | torch.device | None = None) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise IBPInputError(f"tensor must be a torch.Tensor, got '{type(tensor).__name__}'")
        if tensor.dim() < 1:
            raise IBPInputError("a feature tensor must have at least one dimension (rows)")
        self.tensor = tensor
        self._device = resolve_device(device) or tensor.device

    @property
    def num_rows(self) -> int:
        """Number of rows."""
        return self.tensor.size(0)

    @property
    def row_shape(self) -> tuple[int, ...]:
        """Shape of one row."""
        return tuple(self.tensor.shape[1:])

    @property
    def dtype(self) -> torch.dtype:
        """Element type."""
        return self.tensor.dtype

    @property
    def device(self) -> torch.device:
        """Where results land."""
        return self._device

    @property
    def index_device(self) -> torch.device:
        """The tensor's device."""
        return self.tensor.device

    def gather(self, ids: torch.Tensor, *, stream: torch.cuda.Stream | None = None) -> torch.Tensor:
        """``tensor[ids]`` on `device`.

        A CPU tensor bound for a GPU is gathered into pinned memory and copied on ``stream``
        without blocking the host. The pinned buffer comes from torch's caching host
        allocator, which records the copy on ``stream`` and does not reuse the buffer before
        the copy has finished. (From pageable memory the copy would make the host wait for
        everything queued on ``stream`` first.)
        """
        with _stream_context(stream):
            idx = ids.to(self.tensor.device, torch.int64)
            pinned = self.tensor.device.type == "cpu" and self._device.type == "cuda"
            if pinned and not self.tensor.requires_grad:  # out= does not record gradients
                staging = _pinned_empty((idx.numel(), *self.row_shape), self.dtype)
                torch.index_select(self.tensor, 0, idx, out=staging)
                return staging.to(self._device, non_blocking=True)
            rows = self.tensor.index_select(0, idx)
            # Asynchronous only towards a GPU: a CPU result must be complete when returned.
            return rows.to(self._device, non_blocking=self._device.type == "cuda")

    def stored_bytes(self, ids: torch.Tensor) -> int:
        """0 when the tensor is on `device` already, else the raw bytes of the rows."""
        return 0 if self.tensor.device == self._device else ids.numel() * self.row_bytes

    def __repr__(self) -> str:
        return (
            f"TensorFeatures(shape={tuple(self.tensor.shape)}, dtype={self.dtype}, "
            f"on={self.tensor.device}, device={self._device})"
        )


#: NumPy element types a feature array may have (NumPy has no bfloat16).
_NUMPY_DTYPES = tuple(name for name in SUPPORTED_DTYPES if name != "bfloat16")


def _numpy_dtype(array: np.ndarray) -> torch.dtype:
    """The torch dtype of a NumPy feature table, checking its type, shape and dtype.

    Raises:
        IBPInputError: ``array`` is masked, not 2-D, or of a dtype `NumpyFeatures` does not
            take (the message names the shape or dtype).
    """
    if isinstance(array, np.ma.MaskedArray):
        raise IBPInputError(
            "features: a masked NumPy array's mask would be ignored; pass array.filled(value)"
        )
    if array.ndim != 2:
        raise IBPInputError(
            f"features: a NumPy array must be 2-D (rows x features), got shape {array.shape}"
        )
    dt = array.dtype
    supported = ", ".join(_NUMPY_DTYPES)
    if dt.kind == "O":
        raise IBPInputError(
            "features: a NumPy array of dtype object holds Python objects, not numbers; "
            f"convert it to one of {supported}"
        )
    if dt.kind in "USV":
        raise IBPInputError(
            f"features: a NumPy array of dtype {dt} holds strings, bytes or records, not "
            f"numbers; supported: {supported}"
        )
    if dt.kind == "c":
        raise IBPInputError(
            f"features: complex dtype {dt} is not supported (supported: {supported}); store "
            "the real and imaginary parts as separate columns"
        )
    if dt.name not in _NUMPY_DTYPES:
        hint = "; for bfloat16 pass a torch tensor" if dt.name == "bfloat16" else ""
        raise IBPInputError(
            f"features: unsupported NumPy dtype {dt} (supported: {supported}){hint}"
        )
    return torch_dtype(dt.name)


class NumpyFeatures(FeatureSource):
    """A 2-D NumPy array, in memory or memory-mapped, of which only the rows asked for are read.

    A table in a ``.npy`` file larger than host memory works as
    ``np.load(path, mmap_mode="r")``: `gather` reads the rows of the ids with ``np.take`` and
    nothing copies, loads or writes the whole array (read-only arrays are fine, and no torch
    tensor ever aliases the array). Rows come back as `TensorFeatures` gives them for a CPU
    tensor: a new contiguous tensor of the matching torch dtype (in native byte order), and
    out-of-range ids raise torch's ``IndexError``.

    Args:
        array: the table, ``(rows, features)``, of dtype float32, float16, float64, int8,
            int16, int32, int64 or uint8 (any byte order and strides).
        device: where results land (default: the CPU). With a CUDA device the rows are
            gathered on the CPU into pinned memory, then copied to the GPU.

    Raises:
        IBPInputError: ``array`` is not a NumPy array, is masked, is not 2-D or has a dtype
            not listed above; the message names the type, shape or dtype. ``device`` is a
            CUDA device and no GPU is usable.
    """

    def __init__(self, array: np.ndarray, device: str | torch.device | None = None) -> None:
        if not isinstance(array, np.ndarray):
            raise IBPInputError(f"array must be a NumPy array, got '{type(array).__name__}'")
        self._dtype = _numpy_dtype(array)
        self.array = array
        self._device = resolve_device(device) or torch.device("cpu")
        # A stand-in with the table's rows and no memory (stride 0), on which index_select
        # checks ids with the checks and errors of a tensor of the table's shape.
        n, d = array.shape
        self._ids_check = torch.zeros((), dtype=torch.uint8).expand(n, min(d, 1))

    @property
    def num_rows(self) -> int:
        """Number of rows."""
        return self.array.shape[0]

    @property
    def row_shape(self) -> tuple[int, ...]:
        """``(num_features,)``."""
        return (self.array.shape[1],)

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype matching the array's."""
        return self._dtype

    @property
    def device(self) -> torch.device:
        """Where results land."""
        return self._device

    @property
    def index_device(self) -> torch.device:
        """The CPU, where the rows are read."""
        return torch.device("cpu")

    def gather(self, ids: torch.Tensor, *, stream: torch.cuda.Stream | None = None) -> torch.Tensor:
        """``array[ids]`` as a tensor on `device`, reading only those rows.

        The rows are written by ``np.take`` straight into the tensor returned or, bound for a
        GPU, into a pinned buffer copied on ``stream`` without blocking the host (see
        `TensorFeatures.gather`).

        Raises:
            IndexError: ``ids`` is not 1-D, or an id is out of range (torch's errors).
        """
        with _stream_context(stream):
            idx = ids.to("cpu", torch.int64)
            self._ids_check.index_select(0, idx)
            to_gpu = self._device.type == "cuda"
            shape = (idx.numel(), *self.row_shape)
            out = (
                _pinned_empty(shape, self._dtype)
                if to_gpu
                else torch.empty(shape, dtype=self._dtype)
            )
            # mode="clip" writes into ``out`` directly (mode="raise" goes through a buffer);
            # the ids are in range, checked above, so nothing is clipped.
            np.take(self.array, idx.numpy(), axis=0, out=out.numpy(), mode="clip")
            # Asynchronous only towards a GPU: a CPU result must be complete when returned.
            return out.to(self._device, non_blocking=to_gpu)

    def stored_bytes(self, ids: torch.Tensor) -> int:
        """0 when rows land on the CPU, else the raw bytes of the rows (as `TensorFeatures`)."""
        return 0 if self._device.type == "cpu" else ids.numel() * self.row_bytes

    def __repr__(self) -> str:
        kind = "memmap" if isinstance(self.array, np.memmap) else "ndarray"
        return (
            f"NumpyFeatures({kind}, shape={self.array.shape}, dtype={self.array.dtype}, "
            f"device={self._device})"
        )


class _TableFeatures(FeatureSource):
    """A source backed by a 2-D table object with ``.shape`` and ``.dtype``."""

    table: Any

    @property
    def num_rows(self) -> int:
        """Number of rows."""
        return self.table.shape[0]

    @property
    def row_shape(self) -> tuple[int, ...]:
        """``(num_features,)``."""
        return (self.table.shape[1],)

    @property
    def dtype(self) -> torch.dtype:
        """The original element type."""
        return self.table.dtype


class IBPFeatures(_TableFeatures):
    """An IBP-compressed table, decoded bit for bit.

    An `IBPTable` is decoded on the CPU; a `CudaIBPTable` is fetched and decoded by the GPU
    straight from pinned host memory.

    Args:
        table: the table.
        check: CUDA tables: synchronise after every `gather` and raise on out-of-range ids.
            Loaders pass False because sampled ids are in range by construction
            (default: True).
    """

    def __init__(self, table: IBPTable | CudaIBPTable, *, check: bool = True) -> None:
        if isinstance(table, IBPTable):
            cpu, device = table, torch.device("cpu")
        elif isinstance(table, CudaIBPTable):
            cpu, device = table.cpu_table, table.device
        else:
            raise IBPInputError(
                f"table must be an IBPTable or CudaIBPTable, got '{type(table).__name__}'"
            )
        self.table = table
        self.check = check
        self._device = device
        # Stored length of every row; int32 is enough (at most one aligned raw row).
        lengths = np.diff(cpu.offsets).astype(np.int32) * np.int32(cpu.align)
        self._lengths = torch.from_numpy(lengths).to(device)

    @property
    def device(self) -> torch.device:
        """CPU for an `IBPTable`, the table's GPU for a `CudaIBPTable`."""
        return self._device

    @property
    def ratio(self) -> float:
        """The table's compression ratio."""
        return float(self.table.ratio)

    def gather(self, ids: torch.Tensor, *, stream: torch.cuda.Stream | None = None) -> torch.Tensor:
        """Decoded rows ``ids``, bit for bit."""
        if self._device.type == "cpu":
            return self.table[ids.to("cpu")]
        ids = ids.to(self._device, torch.int64).contiguous()
        return self.table.fetch(ids, stream=stream, check=self.check)

    def stored_bytes(self, ids: torch.Tensor) -> int | torch.Tensor:
        """Sum of the rows' stored lengths (an int on the CPU, a 0-d tensor on a GPU)."""
        total = self._lengths[ids.to(self._device)].sum()
        return int(total) if self._device.type == "cpu" else total

    def __repr__(self) -> str:
        return f"IBPFeatures({self.table!r})"


class RawPinnedFeatures(_TableFeatures):
    """An uncompressed `PinnedRawTable` gathered by the GPU over UVA (the IBP-off baseline).

    Args:
        table: the table.
        check: synchronise after every `gather` and raise on out-of-range ids
            (default: True).
    """

    def __init__(self, table: PinnedRawTable, *, check: bool = True) -> None:
        if not isinstance(table, PinnedRawTable):
            raise IBPInputError(f"table must be a PinnedRawTable, got '{type(table).__name__}'")
        self.table = table
        self.check = check

    @property
    def device(self) -> torch.device:
        """The table's GPU."""
        return self.table.device

    def gather(self, ids: torch.Tensor, *, stream: torch.cuda.Stream | None = None) -> torch.Tensor:
        """Rows ``ids`` read by the GPU from pinned memory."""
        ids = ids.to(self.table.device, torch.int64).contiguous()
        return self.table.fetch(ids, stream=stream, check=self.check)

    def stored_bytes(self, ids: torch.Tensor) -> int:
        """``len(ids) * row_bytes``."""
        return ids.numel() * self.row_bytes

    def __repr__(self) -> str:
        return f"RawPinnedFeatures({self.table!r})"


def as_feature_source(
    obj: Any,
    device: str | torch.device | None = None,
    *,
    data: Any = None,
    check: bool = True,
) -> FeatureSource:
    """The `FeatureSource` for ``obj``, delivering rows on ``device`` (see the module table).

    Args:
        obj: an `IBPTable`, `CudaIBPTable`, `PinnedRawTable`, tensor, 2-D NumPy array
            (memory-mapped ones included, see `NumpyFeatures`) or `FeatureSource`; None
            takes ``data.x``.
        device: where rows must land (default: where ``obj`` delivers them).
        data: the graph whose ``x`` is used when ``obj`` is None.
        check: CUDA tables: check ids on every gather (see `IBPFeatures`).

    Raises:
        IBPInputError: ``obj`` is none of the above, ``obj`` is None and ``data`` has no
            ``x``, ``obj`` is a NumPy array that is not 2-D or of an unsupported dtype,
            ``device`` is a CUDA device and no GPU is usable, or ``obj`` is a GPU table and
            ``device`` another device.
    """
    dev = resolve_device(device)
    if obj is None:
        obj = getattr(data, "x", None)
        if obj is None:
            raise IBPInputError("features is None and data has no 'x' to use instead")
        if not isinstance(obj, torch.Tensor):
            raise IBPInputError(f"data.x must be a torch.Tensor, got '{type(obj).__name__}'")
    if isinstance(obj, torch.Tensor):
        return TensorFeatures(obj, dev)
    if isinstance(obj, np.ndarray):
        return NumpyFeatures(obj, dev)
    if isinstance(obj, FeatureSource):
        if dev is not None and obj.device != dev:
            raise IBPInputError(f"the feature source delivers rows on {obj.device}, not {dev}")
        return obj
    if isinstance(obj, IBPTable):
        if dev is None or dev.type == "cpu":
            return IBPFeatures(obj, check=check)
        if dev.type != "cuda":
            raise IBPInputError(f"an IBPTable decodes on the CPU or a CUDA GPU, not on {dev}")
        return IBPFeatures(CudaIBPTable(obj.path, device=dev), check=check)
    if isinstance(obj, (CudaIBPTable, PinnedRawTable)):
        if dev is not None and dev != obj.device:
            raise IBPInputError(
                f"a {type(obj).__name__} delivers rows on {obj.device}, not on {dev}; open the "
                "file with ibp_graph.open(path) for CPU decoding"
            )
        if isinstance(obj, CudaIBPTable):
            return IBPFeatures(obj, check=check)
        return RawPinnedFeatures(obj, check=check)
    raise IBPInputError(
        "features must be an IBPTable, CudaIBPTable, PinnedRawTable, torch.Tensor, 2-D NumPy "
        f"array or FeatureSource, got '{type(obj).__name__}'"
    )
