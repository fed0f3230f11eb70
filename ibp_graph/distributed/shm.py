"""POSIX shared-memory segments: one copy of a host's data, mapped by every local rank.

A segment is a file under ``/dev/shm`` (what ``shm_open`` creates), mapped shared and
writable, so that every process of the host that maps it sees the same physical pages, and
each can pin those pages for its own GPU (``cudaHostRegister`` works on such mappings).

Lifetime: the creator starts a small watchdog process that removes the file as soon as the
creator exits for any reason (a normal exit, an exception, a SIGKILL), so a crash never
leaves a segment behind. Once every local rank has mapped it, the creator unlinks it
early: the mappings stay valid and the memory is freed when the last one is closed.

.. code-block:: python

    seg = SharedSegment.create("ibp-graph-demo-rows", 1 << 20)   # local rank 0
    seg.array[:5] = 1
    other = SharedSegment.attach("ibp-graph-demo-rows")           # the other local ranks
    seg.unlink()                                                  # all attached: remove
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import re
import resource
import subprocess
import warnings
from pathlib import Path

import numpy as np
import torch

from ..errors import IBPError, IBPInputError, check_int
from ..pinned import gib

__all__ = [
    "SHM_DIR",
    "SharedMemoryError",
    "SharedSegment",
    "check_memlock",
    "check_shm_space",
    "round_up",
    "shm_available",
]

#: Where POSIX shared memory lives on Linux.
SHM_DIR = Path("/dev/shm")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
#: Removes "$1" once its standard input closes, i.e. once the creator has exited.
_WATCHDOG = 'cat >/dev/null; rm -f -- "$1"'


class SharedMemoryError(IBPError, RuntimeError):
    """A shared-memory segment cannot be created or mapped; the message says what to change."""


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise IBPInputError(
            f"segment name must be letters, digits, '.', '_' or '-' (no '/'), got {name!r}"
        )
    return name


def round_up(n: int, align: int) -> int:
    """``n`` rounded up to a multiple of ``align`` (offsets and sizes in a segment)."""
    return -(-n // align) * align


def shm_available(shm_dir: str | os.PathLike[str] = SHM_DIR) -> int:
    """Bytes an unprivileged process can still write to ``shm_dir``.

    Raises:
        SharedMemoryError: ``shm_dir`` does not exist (no POSIX shared memory here).
    """
    try:
        st = os.statvfs(shm_dir)
    except OSError as exc:
        raise SharedMemoryError(
            f"{shm_dir}: cannot use POSIX shared memory ({exc.strerror}); mount a tmpfs there"
        ) from None
    return st.f_bavail * st.f_frsize


def check_shm_space(nbytes: int, shm_dir: str | os.PathLike[str] = SHM_DIR) -> None:
    """Raise one clear error unless ``shm_dir`` can hold ``nbytes`` more.

    Raises:
        SharedMemoryError: too little space; the message names the size needed, the size
            available and how to raise it.
    """
    avail = shm_available(shm_dir)
    if nbytes > avail:
        raise SharedMemoryError(
            f"{shm_dir}: the shared table needs {gib(nbytes)} ({nbytes} bytes), only "
            f"{gib(avail)} ({avail} bytes) is available; raise it (sudo mount -o "
            f"remount,size={-(-nbytes // 2**30) + 1}G {shm_dir}; in Docker --shm-size="
            f"{-(-nbytes // 2**30) + 1}g) or free space there"
        )


def check_memlock(nbytes: int, what: str) -> None:
    """Raise one clear error unless the locked-memory limit allows pinning ``nbytes``.

    Args:
        nbytes: bytes about to be pinned.
        what: what is pinned, for the message.

    Raises:
        SharedMemoryError: RLIMIT_MEMLOCK is lower; the message names both sizes and how to
            raise the limit.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY and nbytes > soft:
        raise SharedMemoryError(
            f"{what}: pinning needs {gib(nbytes)} ({nbytes} bytes) of locked memory, the "
            f"limit (ulimit -l) is {gib(soft)} ({soft} bytes); raise it (ulimit -l unlimited; "
            f"in Docker --ulimit memlock=-1; for a service LimitMEMLOCK=infinity)"
        )


class SharedSegment:
    """A named POSIX shared-memory segment mapped read-write into this process.

    Use `create` (one process per host) or `attach` (the others), not the constructor.

    Attributes:
        name: the segment's name (the file ``shm_dir / name``).
        path: the file.
        nbytes: the segment's size in bytes.
        array: the whole mapping as a writable ``uint8`` array.
        owner: whether this process created it (and so removes it).
    """

    def __init__(self, path: Path, mapping: mmap.mmap, nbytes: int, owner: bool):
        self.path = path
        self.name = path.name
        self.nbytes = nbytes
        self.owner = owner
        self._map: mmap.mmap | None = mapping
        self.array = np.frombuffer(mapping, dtype=np.uint8)
        self._watchdog: subprocess.Popen | None = None

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def create(
        cls, name: str, nbytes: int, *, shm_dir: str | os.PathLike[str] = SHM_DIR
    ) -> SharedSegment:
        """Create the segment ``name`` of ``nbytes`` zero bytes and map it.

        A watchdog process removes the file when this process exits, however it exits.

        Args:
            name: letters, digits, ``.``, ``_``, ``-``; unique on the host (include a run id
                and the node's rank).
            nbytes: size in bytes (>= 1).
            shm_dir: the shared-memory folder (default: ``/dev/shm``).

        Raises:
            IBPInputError: a bad name or size.
            SharedMemoryError: a segment of that name exists, or ``shm_dir`` is too small
                (naming the sizes and how to raise it).
        """
        name = _check_name(name)
        nbytes = check_int("segment size", nbytes, 1)
        path = Path(shm_dir) / name
        check_shm_space(nbytes, shm_dir)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise SharedMemoryError(f"{path}: a shared segment of that name exists") from None
        except OSError as exc:
            raise SharedMemoryError(f"{path}: cannot create ({exc.strerror})") from None
        seg = watchdog = None
        try:
            watchdog = subprocess.Popen(
                ["sh", "-c", _WATCHDOG, "sh", str(path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C to the job does not stop it first
            )
            try:
                # Reserve the pages now: a full tmpfs fails here, not with SIGBUS later.
                os.posix_fallocate(fd, 0, nbytes)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EFBIG):
                    raise
                raise SharedMemoryError(
                    f"{path}: could not reserve {gib(nbytes)} ({exc.strerror}); "
                    f"{gib(shm_available(shm_dir))} is available"
                ) from None
            mapping = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            seg = cls(path, mapping, nbytes, owner=True)
            seg._watchdog = watchdog
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            if watchdog is not None:
                _stop(watchdog)
            raise
        finally:
            os.close(fd)
        return seg

    @classmethod
    def attach(cls, name: str, *, shm_dir: str | os.PathLike[str] = SHM_DIR) -> SharedSegment:
        """Map the existing segment ``name`` (read-write, shared).

        Raises:
            IBPInputError: a bad name.
            SharedMemoryError: no such segment (e.g. its creator has exited or unlinked it).
        """
        name = _check_name(name)
        path = Path(shm_dir) / name
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise SharedMemoryError(
                f"{path}: no such shared segment (its creator exited or removed it)"
            ) from None
        except OSError as exc:
            raise SharedMemoryError(f"{path}: cannot open ({exc.strerror})") from None
        try:
            nbytes = os.fstat(fd).st_size
            if nbytes < 1:
                raise SharedMemoryError(f"{path}: the shared segment is empty")
            mapping = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        return cls(path, mapping, nbytes, owner=False)

    # -- lifetime -------------------------------------------------------------------------
    @property
    def address(self) -> int:
        """Host address of the first byte (for pinning)."""
        if self._map is None:
            raise IBPInputError(f"{self.path}: the segment is closed")
        return int(self.array.ctypes.data)

    def tensor(self, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        """A 1-D tensor of ``count`` ``dtype`` items that are the segment's bytes at ``offset``.

        The tensor keeps the mapping alive after `close`, until it is dropped.
        """
        if count == 0:
            return torch.empty(0, dtype=dtype)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        with warnings.catch_warnings():  # the segment is writable; the warning is about that
            warnings.simplefilter("ignore", UserWarning)
            return torch.frombuffer(self.array[offset : offset + count * itemsize], dtype=dtype)

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._map is None

    def unlink(self) -> None:
        """Remove the segment's name (owner only; idempotent); mappings stay valid.

        Call it once every local rank has attached: the memory is then freed when the last
        mapping is closed, even if a process is killed.
        """
        if not self.owner:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        if self._watchdog is not None:
            _stop(self._watchdog)
            self._watchdog = None

    def close(self) -> None:
        """Unmap (and, for the owner, remove) the segment (idempotent).

        Views of `array` that are still alive keep the mapping until they are dropped.
        """
        self.unlink()
        if self._map is not None:
            self.array = np.zeros(0, dtype=np.uint8)
            try:
                self._map.close()
            except BufferError:  # a view is alive; the mapping goes with it
                pass
            self._map = None

    def __enter__(self) -> SharedSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.nbytes} bytes"
        return f"SharedSegment('{self.path}', {state}, owner={self.owner})"


def _stop(watchdog: subprocess.Popen) -> None:
    """Close the watchdog's input (it removes the file, if still there) and reap it."""
    with contextlib.suppress(OSError):
        if watchdog.stdin is not None:
            watchdog.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=10)
