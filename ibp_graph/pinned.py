"""Page-locked host memory the GPU reads directly (zero-copy over UVA)."""

from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import re
import resource
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from .errors import IBPError

#: Registered with CUDA in pieces of this size, so one huge request is not all or nothing.
REGISTER_CHUNK = 1 << 30
#: Extra zero bytes after the data: kernels load whole 16-byte chunks.
TAIL_PAD = 64
#: cudaHostRegisterMapped: mapped into the device address space (read over UVA).
_HOST_REGISTER_FLAGS = 0x02
_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91  # cudaDevAttrCanUseHostPointerForRegisteredMem
#: cudaHostAllocPortable | cudaHostAllocMapped, for ``pages="cuda"``.
_HOST_ALLOC_FLAGS = 0x01 | 0x02
#: How a buffer's pages are allocated: "huge" (private anonymous memory advised to use
#: transparent huge pages before first touch, so that the GPU may translate 2 MiB at a time
#: rather than 4 KiB; benchmarks/pages.py measures whether it does),
#: "small" (shared anonymous 4 KiB pages), "cuda" (cudaHostAlloc, pinned at allocation).
PAGE_KINDS = ("huge", "small", "cuda")
#: Environment variable choosing the default page kind (default: "huge").
PAGES_ENV = "IBP_GRAPH_PINNED_PAGES"
#: Environment variable giving the host memory where MemTotal understates it (`host_memory`).
HOST_MEMORY_ENV = "IBP_GRAPH_HOST_MEMORY"
HUGE_PAGE = 2 << 20


class PinningError(IBPError, RuntimeError):
    """Host memory could not be pinned; the message says what to change."""


def gib(n: int) -> str:
    """``n`` bytes in GiB, for messages: ``"1.50 GiB"``."""
    return f"{n / 2**30:.2f} GiB"


def _meminfo(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where there is no such file)."""
    return _meminfo("MemAvailable")


def total_memory() -> int | None:
    """MemTotal from /proc/meminfo in bytes (None where there is no such file)."""
    return _meminfo("MemTotal")


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _host_memory_setting() -> str:
    """``$IBP_GRAPH_HOST_MEMORY`` stripped ("" when unset)."""
    return os.environ.get(HOST_MEMORY_ENV, "").strip()


def host_memory() -> int | None:
    """The most host memory a request may take: ``$IBP_GRAPH_HOST_MEMORY``, else MemTotal.

    The pinning precheck compares requests with this, not with MemAvailable: page cache is
    reclaimed, so a request above MemAvailable can succeed. On most machines one above
    MemTotal cannot; but a virtual machine whose memory grows on demand starts with a
    MemTotal below what it can get, and there the variable says how much that is: bytes, or
    a number with K, M, G or T (powers of 1024), e.g. ``128G``. None: no bound is known.

    Raises:
        ValueError: the variable is set to something else.
    """
    text = _host_memory_setting()
    if not text:
        return total_memory()
    unit = text[-1].upper() if text[-1].isalpha() else ""
    number = text[: len(text) - len(unit)].strip()
    if unit not in _UNITS or not number.isdigit() or int(number) == 0:
        raise ValueError(
            f"{HOST_MEMORY_ENV} must be a positive number of bytes, or one with K, M, G or T "
            f"(e.g. 128G), got {text!r}"
        )
    return int(number) * _UNITS[unit]


#: Where the kernel says how it uses transparent huge pages.
_THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")
#: The kernel's per-mapping memory accounting of this process.
_SMAPS = Path("/proc/self/smaps")


def transparent_huge_pages() -> dict[str, str]:
    """The kernel's transparent-huge-page settings in force.

    The bracketed choice of each file of /sys/kernel/mm/transparent_hugepage, e.g.
    ``{"enabled": "madvise", "defrag": "madvise"}``. A setting that cannot be read is left out
    (empty off Linux).
    """
    settings = {}
    for name in ("enabled", "defrag"):
        try:
            text = (_THP_DIR / name).read_text()
        except OSError:
            continue
        chosen = re.search(r"\[([^\]]+)\]", text)
        if chosen:
            settings[name] = chosen.group(1)
    return settings


def huge_page_bytes(array: np.ndarray, smaps: str | None = None) -> int | None:
    """Bytes of ``array``'s memory that transparent huge pages back, at most its size.

    From /proc/self/smaps: each mapping that overlaps the array counts its ``AnonHugePages``,
    up to the bytes of the overlap (a mapping that the kernel merged with a neighbour may
    count a little of the neighbour's). Memory that a driver maps itself (cudaHostAlloc) is
    not the kernel's anonymous memory and counts 0 whatever its pages. None where smaps cannot
    be read.

    Args:
        array: a NumPy array over the memory.
        smaps: the text of an smaps file (default: None, this process's).
    """
    if smaps is None:
        try:
            smaps = _SMAPS.read_text()
        except OSError:
            return None
    start = int(array.ctypes.data)
    end = start + int(array.nbytes)
    total = 0
    overlap = 0
    for line in smaps.splitlines():
        head = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            lo, hi = int(head.group(1), 16), int(head.group(2), 16)
            overlap = max(0, min(hi, end) - max(lo, start))
        elif overlap and line.startswith("AnonHugePages:"):
            total += min(overlap, int(line.split()[1]) * 1024)
    return min(total, int(array.nbytes))


def default_pages() -> str:
    """The page kind of new buffers: ``$IBP_GRAPH_PINNED_PAGES`` or "huge".

    Raises:
        ValueError: the variable names no kind of `PAGE_KINDS`.
    """
    kind = os.environ.get(PAGES_ENV, "huge").strip().lower() or "huge"
    if kind not in PAGE_KINDS:
        raise ValueError(f"{PAGES_ENV}={kind!r}: must be one of {', '.join(PAGE_KINDS)}")
    return kind


def memlock_limit() -> str:
    """The soft RLIMIT_MEMLOCK, readable."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else gib(soft)


def pinning_advice(nbytes: int, what: str, cause: str) -> str:
    """The message for a failed pin: what failed, the limits in force, and what to change."""
    avail = available_memory()
    return (
        f"{what}: could not pin {gib(nbytes)} of host memory ({cause}); locked-memory limit "
        f"(ulimit -l) is {memlock_limit()}, available memory "
        f"{gib(avail) if avail is not None else 'unknown'}. Raise the limit (ulimit -l "
        f"unlimited; in Docker --ulimit memlock=-1), free host memory, or compress the table "
        f"further (more clusters) so that it needs less."
    )


def check_backing(backing: object, total: int, what: str) -> None:
    """Raise `ValueError` unless ``backing`` can be pinned as a buffer of ``total`` bytes."""
    if not isinstance(backing, np.ndarray) or backing.dtype != np.uint8 or backing.ndim != 1:
        raise ValueError(
            f"{what}: backing must be a 1-D uint8 NumPy array, got "
            f"{getattr(backing, 'dtype', type(backing).__name__)} "
            f"{getattr(backing, 'shape', '')}"
        )
    if not (backing.flags.c_contiguous and backing.flags.writeable):
        raise ValueError(f"{what}: backing must be C-contiguous and writable")
    if backing.size < total:
        raise ValueError(
            f"{what}: backing has {backing.size} bytes, needs {total} (data and a "
            f"{TAIL_PAD}-byte tail)"
        )
    if backing.ctypes.data % mmap.PAGESIZE or backing.size % mmap.PAGESIZE:
        raise ValueError(
            f"{what}: backing must start on a page and span whole pages of {mmap.PAGESIZE} bytes"
        )


class PinnedBuffer:
    """Anonymous page-aligned host memory, filled by the caller, then pinned for the GPU.

    Release it with `close` (waits for the device, then unpins). A buffer dropped while
    pinned is not released by its destructor, which may run in the middle of an epoch: it
    is released by the next `release_deferred` (called before new memory is pinned, at the
    end of a prefetching loader's epoch, and at exit), with no device-wide synchronise before.
    What the same kernels read beside the rows (`hold`) is let go with it.

    Args:
        nbytes: bytes of data; ``TAIL_PAD`` zero bytes follow them.
        what: name used in error messages (the file).
        cuda: the CuPy ``cuda`` module (injected so the pinning logic is testable).
        backing: caller-owned host memory to pin instead of allocating: a writable, C-contiguous
            ``uint8`` array of at least ``nbytes + TAIL_PAD`` bytes starting on a page, its size
            a whole number of pages (e.g. a shared-memory segment that several processes pin
            for their own GPUs). It is pinned and unpinned, never freed (default: None).
        pages: how the memory is allocated, one of `PAGE_KINDS` (default: None, `default_pages`;
            ignored with ``backing``).

    Raises:
        PinningError: more than the machine's memory (`host_memory`) is asked for, or the
            allocation failed.
        ValueError: ``backing`` is not such an array, ``pages`` (or
            ``$IBP_GRAPH_PINNED_PAGES``) names no kind of `PAGE_KINDS`, or
            ``$IBP_GRAPH_HOST_MEMORY`` is malformed.
    """

    def __init__(
        self,
        nbytes: int,
        what: str,
        cuda: object,
        *,
        backing: np.ndarray | None = None,
        pages: str | None = None,
    ):
        self.nbytes = int(nbytes)
        self.what = what
        self._cuda = cuda
        self._registered: list[int] = []
        self._device = 0
        self._host_alloc = 0  # the cudaHostAlloc pointer (pages="cuda")
        self._map = None
        self._held: list[object] = []  # see `hold`
        total = self.nbytes + TAIL_PAD
        if backing is not None:
            check_backing(backing, total, what)
            self._map = None
            self.array = backing
            self.host_ptr = backing.ctypes.data
            self.device_ptr = 0
            self.pages = "backing"
            return
        self.pages = default_pages() if pages is None else pages
        if self.pages not in PAGE_KINDS:
            raise ValueError(f"pages must be one of {', '.join(PAGE_KINDS)}, got {pages!r}")
        limit = host_memory()
        if limit is not None and total > limit:
            source = (
                HOST_MEMORY_ENV
                if _host_memory_setting()
                else f"MemTotal; set {HOST_MEMORY_ENV} where memory grows on demand"
            )
            cause = f"the machine has only {gib(limit)} of memory ({source})"
            raise PinningError(pinning_advice(total, what, cause))
        release_deferred()  # buffers dropped earlier: unpin them before pinning more
        try:
            self.array = self._allocate(total)
        except (OSError, MemoryError) as exc:
            raise PinningError(pinning_advice(total, what, f"allocation failed: {exc}")) from None
        except getattr(getattr(cuda, "runtime", None), "CUDARuntimeError", ()) as exc:
            raise PinningError(pinning_advice(total, what, f"cudaHostAlloc: {exc}")) from None
        self.host_ptr = self.array.ctypes.data
        self.device_ptr = 0

    def _allocate(self, total: int) -> np.ndarray:
        """Zeroed memory of ``total`` bytes of the buffer's page kind."""
        if self.pages == "cuda":
            size = -(-total // mmap.PAGESIZE) * mmap.PAGESIZE
            self._host_alloc = int(self._cuda.runtime.hostAlloc(size, _HOST_ALLOC_FLAGS))
            ctypes.memset(self._host_alloc, 0, size)
            raw = (ctypes.c_uint8 * size).from_address(self._host_alloc)
            return np.frombuffer(raw, dtype=np.uint8)[:total]
        if self.pages == "small":
            self._map = mmap.mmap(-1, total)
            return np.frombuffer(self._map, dtype=np.uint8)
        # Huge pages: private anonymous memory, 2 MiB-aligned, advised before any page is
        # touched (the kernel backs it with huge pages where transparent huge pages allow).
        size = -(-total // HUGE_PAGE) * HUGE_PAGE
        self._map = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        advice = getattr(mmap, "MADV_HUGEPAGE", None)
        if advice is not None:
            try:
                self._map.madvise(advice)
            except OSError:  # transparent huge pages disabled: small pages it is
                pass
        whole = np.frombuffer(self._map, dtype=np.uint8)
        skip = -whole.ctypes.data % HUGE_PAGE
        return whole[skip : skip + total]

    def huge_page_share(self) -> float | None:
        """The share of the buffer that transparent huge pages back, from 0 to 1.

        `huge_page_bytes` over the buffer's size; None where /proc/self/smaps cannot be read
        or the buffer is closed. Pages are backed at first touch: ask after the buffer is
        filled. ``pages="huge"`` only advises the kernel, which may still give 4 KiB pages
        (huge pages disabled or none free): this says what it gave.
        """
        if self.array.size == 0:
            return None
        held = huge_page_bytes(self.array)
        return None if held is None else held / self.array.size

    def pin(self, progress: Callable[[int], None] | None = None) -> int:
        """Register the memory with CUDA in chunks; return the device-visible address.

        Registers with the current CUDA device, which must be the one that reads it.

        Raises:
            PinningError: CUDA refused to pin the memory, or mapped it at addresses that are
                not contiguous for the device.
        """
        if self.device_ptr:
            return self.device_ptr
        runtime = self._cuda.runtime
        if self._host_alloc:  # cudaHostAlloc memory is pinned and mapped already
            self._device = runtime.getDevice()
            try:
                base = int(runtime.pointerGetAttributes(self.host_ptr).devicePointer)
            except runtime.CUDARuntimeError as exc:
                raise PinningError(
                    pinning_advice(self.array.size, self.what, f"cudaPointerGetAttributes: {exc}")
                ) from None
            self.device_ptr = base
            return base
        # Whole pages (the mapping has them): the same pages, and no partial-page request.
        total = -(-self.array.size // mmap.PAGESIZE) * mmap.PAGESIZE
        device = runtime.getDevice()
        self._device = device
        single = not runtime.deviceGetAttribute(_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, device)
        step = total if single else REGISTER_CHUNK
        try:
            for start in range(0, total, step):
                size = min(step, total - start)
                runtime.hostRegister(self.host_ptr + start, size, _HOST_REGISTER_FLAGS)
                self._registered.append(self.host_ptr + start)
                if progress is not None:
                    progress(size)
            # CuPy's runtime module has no cudaHostGetDevicePointer: the pointer attributes
            # hold the address under which the current device sees the memory.
            addresses = [
                int(runtime.pointerGetAttributes(ptr).devicePointer) for ptr in self._registered
            ]
        except runtime.CUDARuntimeError as exc:
            self.close()
            raise PinningError(
                pinning_advice(total, self.what, f"cudaHostRegister: {exc}")
            ) from None
        base = addresses[0]
        if base == 0 or any(
            a != base + (p - self.host_ptr)
            for a, p in zip(addresses, self._registered, strict=True)
        ):
            self.close()
            raise PinningError(
                f"{self.what}: CUDA mapped the pinned memory at device addresses "
                f"{[hex(a) for a in addresses]}, not one contiguous range"
            )
        self.device_ptr = base
        return base

    def hold(self, obj: object) -> None:
        """Keep ``obj`` alive until this memory is released.

        For what the kernels reading the rows also read by address, such as a table's device
        metadata (`ibp_graph.kernels.fetch_decode.DeviceCodec`): freed on its own, its device
        memory could be handed to a new tensor while a launch still reads it. Held here, it
        is let go by `close` after the device synchronise, and a buffer dropped while pinned
        takes it to the deferred buffers (`release_deferred`).
        """
        self._held.append(obj)

    def close(self) -> None:
        """Unregister and free the memory (idempotent), and let go of what it holds (`hold`).

        Waits for the registering device first (a kernel may still be reading the memory, e.g.
        when the last tensor over it is dropped right after a launch), and unregisters with
        that device current, as it was registered.
        """
        runtime = getattr(self._cuda, "runtime", None)
        if (self._registered or self._host_alloc) and runtime is not None:
            previous = None
            try:
                previous = runtime.getDevice()
                runtime.setDevice(self._device)
                runtime.deviceSynchronize()
            except Exception:  # noqa: BLE001 - best effort while releasing (e.g. at exit)
                pass
            for ptr in self._registered:
                try:
                    runtime.hostUnregister(ptr)
                except Exception:  # noqa: BLE001 - best effort while releasing
                    pass
            if previous is not None and previous != self._device:
                try:
                    runtime.setDevice(previous)
                except Exception:  # noqa: BLE001 - best effort while releasing
                    pass
        self._registered = []
        self._held = []
        self.device_ptr = 0
        self.array = np.zeros(0, dtype=np.uint8)  # a caller-owned backing is only let go
        if self._host_alloc and runtime is not None:
            try:
                runtime.freeHost(self._host_alloc)
            except Exception:  # noqa: BLE001 - best effort while releasing
                pass
        self._host_alloc = 0
        if getattr(self, "_map", None) is not None:
            try:
                self._map.close()
            except BufferError:  # a view is still alive; the mapping goes with it
                pass
            self._map = None

    def __del__(self) -> None:
        # Dropped without close(), e.g. with the last tensor over a UVA graph, possibly in the
        # middle of an epoch: no device-wide synchronise here. What the GPU may still read,
        # the memory and what it holds (`hold`), moves to a holder released at the next safe
        # point (`release_deferred`).
        if getattr(self, "_registered", None) or getattr(self, "_host_alloc", 0):
            deferred, lock = _DEFERRED, _DEFERRED_LOCK
            if deferred is None or lock is None:
                # The interpreter is shutting down (module globals cleared): the process
                # exit frees the memory and the CUDA context with it.
                return
            held = PinnedBuffer.__new__(PinnedBuffer)
            held.__dict__.update(self.__dict__)
            self._registered, self._host_alloc, self._map, self._held = [], 0, None, []
            with lock:
                deferred.append(held)
            return
        if getattr(self, "_map", None) is not None or getattr(self, "array", None) is not None:
            self.close()


#: Buffers dropped while pinned, waiting for `release_deferred`.
_DEFERRED: list[PinnedBuffer] = []
#: Reentrant: a buffer in a reference cycle can be dropped by the garbage collector on the
#: thread that holds it (any allocation may start a collection), and defers itself then.
_DEFERRED_LOCK = threading.RLock()


def deferred_count() -> int:
    """Buffers dropped while pinned and not yet released."""
    return len(_DEFERRED)


def release_deferred() -> int:
    """Release the buffers dropped while pinned; return how many there were.

    Each is released as `PinnedBuffer.close` does: its device is synchronised, then the memory
    unpinned and freed. Called where waiting is harmless: before new memory is pinned, when a
    prefetching loader finishes an epoch, and at exit.
    """
    with _DEFERRED_LOCK:
        held = _DEFERRED[:]
        _DEFERRED.clear()
    for buf in held:
        buf.close()
    return len(held)


atexit.register(release_deferred)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor.to(device)``, without waiting for the work queued on the device.

    torch copies pageable host memory to a GPU synchronously: the copy waits for the current
    stream, and so for the kernels queued on it. A CPU tensor is copied to a CUDA ``device``
    through pinned memory instead, asynchronously, in the current stream's order. The copy
    reads a pinned buffer of its own, never ``tensor``'s memory after this returns (a pinned
    ``tensor`` is copied first), so the caller may refill ``tensor`` at once.
    """
    if tensor.device.type != "cpu" or torch.device(device).type != "cuda":
        return tensor.to(device)
    staged = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True).copy_(tensor)
    return staged.to(device, non_blocking=True)
