"""Page-locked host memory the GPU reads directly (zero-copy over UVA)."""

from __future__ import annotations

import mmap
import resource
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .errors import IBPError

#: Registered with CUDA in pieces of this size, so one huge request is not all or nothing.
REGISTER_CHUNK = 1 << 30
#: Extra zero bytes after the data: kernels load whole 16-byte chunks.
TAIL_PAD = 64
#: cudaHostRegisterMapped: mapped into the device address space (read over UVA).
_HOST_REGISTER_FLAGS = 0x02
_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91  # cudaDevAttrCanUseHostPointerForRegisteredMem


class PinningError(IBPError, RuntimeError):
    """Host memory could not be pinned; the message says what to change."""


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where there is no such file)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def memlock_limit() -> str:
    """The soft RLIMIT_MEMLOCK, readable."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else _gib(soft)


def pinning_advice(nbytes: int, what: str, cause: str) -> str:
    """The message for a failed pin: what failed, the limits in force, and what to change."""
    avail = available_memory()
    return (
        f"{what}: could not pin {_gib(nbytes)} of host memory ({cause}); locked-memory limit "
        f"(ulimit -l) is {memlock_limit()}, available memory "
        f"{_gib(avail) if avail is not None else 'unknown'}. Raise the limit (ulimit -l "
        f"unlimited; in Docker --ulimit memlock=-1), free host memory, or compress the table "
        f"further (more clusters) so that it needs less."
    )


class PinnedBuffer:
    """Anonymous page-aligned host memory, filled by the caller, then pinned for the GPU.

    Args:
        nbytes: bytes of data; ``TAIL_PAD`` zero bytes follow them.
        what: name used in error messages (the file).
        cuda: the CuPy ``cuda`` module (injected so the pinning logic is testable).
    """

    def __init__(self, nbytes: int, what: str, cuda: object):
        self.nbytes = int(nbytes)
        self.what = what
        self._cuda = cuda
        self._registered: list[int] = []
        self._device = 0
        avail = available_memory()
        total = self.nbytes + TAIL_PAD
        if avail is not None and total > avail:
            raise PinningError(
                pinning_advice(total, what, f"only {_gib(avail)} of memory is available")
            )
        try:
            self._map = mmap.mmap(-1, total)
        except (OSError, MemoryError) as exc:
            raise PinningError(pinning_advice(total, what, f"allocation failed: {exc}")) from None
        self.array = np.frombuffer(self._map, dtype=np.uint8)
        self.host_ptr = self.array.ctypes.data
        self.device_ptr = 0

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

    def close(self) -> None:
        """Unregister and free the memory (idempotent).

        Waits for the registering device first (a kernel may still be reading the memory, e.g.
        when the last tensor over it is dropped right after a launch), and unregisters with
        that device current, as it was registered.
        """
        runtime = getattr(self._cuda, "runtime", None)
        if self._registered and runtime is not None:
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
        self.device_ptr = 0
        if getattr(self, "_map", None) is not None:
            self.array = np.zeros(0, dtype=np.uint8)
            try:
                self._map.close()
            except BufferError:  # a view is still alive; the mapping goes with it
                pass
            self._map = None

    def __del__(self) -> None:
        self.close()
