"""A background thread that produces items ahead of a consumer, a bounded number at a time.

`BackgroundProducer` calls ``produce()`` on a daemon thread and queues what it returns; the
consumer `take`s them in order and calls `release` once it is done with one, which lets the
thread produce one more (at most ``capacity`` items produced and not yet released). An
exception raised by ``produce`` is raised by the `take` that would have returned the item, after
the items before it; an exception of a ``fatal`` type is raised by the next `take` at once.
`close` stops the thread after the item it is producing and joins it.

Code that ``produce`` runs takes shared locks with `ibp_graph.threads.hold`. The producer's
thread has its stop flag set by `close`, where `hold` gives up waiting, so a `close` never
waits forever on a thread that waits for a lock the closing thread holds.

At interpreter exit every producer still running is closed (an ``atexit`` hook, with a
bounded wait): a daemon thread still inside a torch call when the interpreter tears its
threads down aborts the process, e.g. when a script ends with a loader's iterator still open.

The prefetcher (`ibp_graph.prefetch.Prefetcher`, ``thread=True``) uses it so that sampling,
its host reads of sizes and the feature fetch launches run beside the training loop instead of
inside its ``next()``: torch ops and waits for the GPU release the GIL.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .threads import Stopped, set_stop_flag

__all__ = ["BackgroundProducer"]

T = TypeVar("T")

_ITEM, _END, _ERROR = "item", "end", "error"

#: Seconds `_close_live` waits at interpreter exit for all the threads to stop, together.
EXIT_WAIT_S = 10.0

#: The producers of this process, closed at interpreter exit by `_close_live`.
_LIVE: weakref.WeakSet[BackgroundProducer] = weakref.WeakSet()


def _close_live() -> None:
    """Close every producer of this process, waiting at most `EXIT_WAIT_S` in all."""
    deadline = time.monotonic() + EXIT_WAIT_S
    for producer in list(_LIVE):
        try:
            producer.close(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - at exit, one failure must not skip the others
            pass


atexit.register(_close_live)
# A forked child has none of its parent's threads to stop.
os.register_at_fork(after_in_child=_LIVE.clear)


class BackgroundProducer(Generic[T]):
    """Run ``produce`` on a daemon thread, keeping at most ``capacity`` items unreleased.

    Args:
        produce: returns ``(True, item)``, or ``(False, None)`` when there is nothing more.
        capacity: items produced and not yet released, ``>= 1``.
        context: a context manager factory entered once on the thread around all the calls
            (e.g. the CUDA device); default: none.
        fatal: exception types raised by the next `take` at once, before queued items.
        name: the thread's name.
    """

    def __init__(
        self,
        produce: Callable[[], tuple[bool, T | None]],
        capacity: int,
        *,
        context: Callable[[], contextlib.AbstractContextManager] | None = None,
        fatal: tuple[type[BaseException], ...] = (),
        name: str = "ibp-graph-producer",
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._produce = produce
        self._context = context or contextlib.nullcontext
        self._fatal_types = fatal
        self._fatal: BaseException | None = None
        self._free = threading.Semaphore(capacity)
        self._items: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        _LIVE.add(self)  # only a started thread is joined at exit

    def _run(self) -> None:
        # Entering or leaving the context may fail too: the consumer must hear of it, or its
        # `take` would wait forever.
        set_stop_flag(self._stop)
        try:
            with self._context():
                while True:
                    self._free.acquire()
                    if self._stop.is_set():
                        return
                    ok, item = self._produce()
                    if not ok:
                        self._items.put((_END, None))
                        return
                    self._items.put((_ITEM, item))
        except Stopped:  # closed while waiting in `hold`: nobody takes what follows
            return
        except BaseException as exc:  # handed to the consumer, in order
            if isinstance(exc, self._fatal_types):
                self._fatal = exc
            self._items.put((_ERROR, exc))

    @property
    def pending(self) -> int:
        """Items produced and not yet taken."""
        return self._items.qsize()

    def take(self) -> T:
        """The next item, waiting for it.

        Raises:
            StopIteration: nothing more (also after an error was raised).
            BaseException: what ``produce`` raised.
        """
        if self._finished:
            raise StopIteration
        kind, payload = self._items.get() if self._fatal is None else (_ERROR, self._fatal)
        if self._fatal is not None:
            self._finished = True
            raise self._fatal
        if kind == _ITEM:
            return payload
        self._finished = True
        if kind == _END:
            raise StopIteration
        raise payload

    def release(self) -> None:
        """The consumer is done with one item: the thread may produce one more."""
        self._free.release()

    def close(self, timeout: float | None = None) -> None:
        """Stop after the item being produced, join the thread and drop queued items.

        Args:
            timeout: seconds to wait for the thread (default: None, until it stops).
        """
        self._stop.set()
        self._free.release()  # wake the thread if it waits for room
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._finished = True
        while True:
            try:
                self._items.get_nowait()
            except queue.Empty:
                return
