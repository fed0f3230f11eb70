"""A stand-in for ``cupy.cuda.runtime``: the CUDA runtime calls that pinning makes, on the CPU.

`ibp_graph.pinned.PinnedBuffer` and what builds on it (`CudaIBPTable`, the benchmarks) reach
CUDA only through ``cuda.runtime``; the tests hand them `CudaRuntimeStub`, which records
those calls. tests/test_kernels.py checks that each of its CuPy methods exists in CuPy's
runtime with the same parameter names.
"""

from __future__ import annotations

import types


class CudaRuntimeStub:
    """``cupy.cuda.runtime`` on the CPU: the device sees host memory, pinning is recorded.

    Registering a pointer that is registered already, or unregistering one that is not,
    fails the test (an `AssertionError`).

    Args:
        fail: ``hostRegister`` raises `CUDARuntimeError` (out of memory), as under a small
            memlock limit.
        can_use_host_pointer: what the device answers for
            cudaDevAttrCanUseHostPointerForRegisteredMem (0: pinning is one registration).
        device_offset: device address - host address, added once per registration below the
            pointer asked about (nonzero: chunks the device sees at scattered addresses).

    Attributes:
        current: the current device (``getDevice``, ``setDevice``).
        registered: the memory registered now, pointer -> size.
        registrations: every ``hostRegister``, in order: ``(ptr, size, flags)``.
        log: ``(call, argument, current device)`` of each ``deviceSynchronize`` (``"sync"``),
            ``hostRegister`` (``"register"``) and ``hostUnregister`` (``"unregister"``), and
            of the test's own events (`note`), in order.
    """

    class CUDARuntimeError(RuntimeError):
        pass

    def __init__(
        self,
        *,
        fail: bool = False,
        can_use_host_pointer: int = 1,
        device_offset: int = 0,
    ) -> None:
        self.fail = fail
        self.can_use_host_pointer = can_use_host_pointer
        self.device_offset = device_offset
        self.current = 0
        self.registered: dict[int, int] = {}
        self.registrations: list[tuple[int, int, int]] = []
        self.log: list[tuple] = []

    # CuPy's runtime: the names and parameter names are CuPy's.

    def getDevice(self) -> int:  # noqa: N802 - CuPy's names
        return self.current

    def setDevice(self, device: int) -> None:  # noqa: N802
        self.current = device

    def deviceSynchronize(self) -> None:  # noqa: N802
        self.log.append(("sync", None, self.current))

    def deviceGetAttribute(self, attrib: int, device: int) -> int:  # noqa: N802
        assert attrib == 91  # cudaDevAttrCanUseHostPointerForRegisteredMem
        return self.can_use_host_pointer

    def hostRegister(self, ptr: int, size: int, flags: int) -> None:  # noqa: N802
        if self.fail:
            raise self.CUDARuntimeError("cudaErrorMemoryAllocation: out of memory")
        assert ptr not in self.registered, f"{ptr:#x} is registered already"
        self.registered[ptr] = size
        self.registrations.append((ptr, size, flags))
        self.log.append(("register", ptr, self.current))

    def hostUnregister(self, ptr: int) -> None:  # noqa: N802
        self.log.append(("unregister", ptr, self.current))
        assert ptr in self.registered, f"{ptr:#x} is not registered"
        del self.registered[ptr]

    def pointerGetAttributes(self, ptr: int) -> types.SimpleNamespace:  # noqa: N802
        offset = self.device_offset * sum(p < ptr for p, _, _ in self.registrations)
        return types.SimpleNamespace(
            device=self.current, devicePointer=ptr + offset, hostPointer=ptr, type=1
        )

    # The tests' own.

    def note(self, event: str) -> None:
        """Log an event of the test's own (e.g. an object freed) among the calls."""
        self.log.append((event, None, self.current))

    def calls(self) -> list[str]:
        """The logged calls and events, by name."""
        return [call for call, _, _ in self.log]

    def unregistered(self) -> list[int]:
        """The pointers unregistered, in order."""
        return [arg for call, arg, _ in self.log if call == "unregister"]
