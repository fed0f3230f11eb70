"""Work shared between threads: the process's pool, contiguous spans, tasks claimed in order.

The compiled CPU loops (the sampler's hops in `ibp_graph.sample_cpu`, the decoder in
`ibp_graph.decode_cpu`) release the GIL, so the pieces of one call run side by side on as
many threads as ``torch.get_num_threads()`` says. Each caller cuts its work into contiguous
`spans` and hands them to a `Shared`: the calling thread and pool threads take them in
order, and the results come back in span order, so a call's output never depends on which
thread did what. One pool serves every caller of the process; a forked child (a loader's
worker process) starts its own.

Locks shared between threads (a sampler's, a GPU table's) are taken with `hold`. On a
thread with a stop flag (`set_stop_flag`: a background producer's,
`ibp_graph.producer.BackgroundProducer`), `hold` gives up waiting once the flag is set, so
closing a producer never waits forever on a thread that waits for a lock the closing thread
holds: the garbage collector can finalise an abandoned iterator (and close its producer) on
any thread, including one in the middle of a batch, holding the lock the abandoned thread
waits for.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_all

__all__ = ["Shared", "Stopped", "executor", "hold", "set_stop_flag", "spans"]

#: Seconds between two looks at the thread's stop flag while `hold` waits on a thread that
#: has one.
LOCK_POLL_S = 0.01

#: ``stop``: the stop flag (a ``threading.Event``) of this thread, if it has one.
_THREAD = threading.local()


class Stopped(BaseException):
    """Raised by `hold` on a thread whose stop flag was set while it waited for the lock.

    Not an ``Exception``: code between `hold` and the thread's own loop must not catch it.
    """


def set_stop_flag(stop: threading.Event | None) -> None:
    """Give the calling thread a stop flag (None: none): `hold` stops waiting once it is set."""
    _THREAD.stop = stop


@contextlib.contextmanager
def hold(lock: threading.Lock) -> Iterator[None]:
    """Hold ``lock`` for the ``with`` block.

    On a thread without a stop flag it simply waits. On one with a stop flag it waits until
    the lock is free or the flag is set, and raises `Stopped` in the second case.
    """
    stop = getattr(_THREAD, "stop", None)
    if stop is None:
        lock.acquire()
    else:
        while not lock.acquire(timeout=LOCK_POLL_S):
            if stop.is_set():
                raise Stopped
    try:
        yield
    finally:
        lock.release()


def spans(n: int, threads: int, min_span: int, per_thread: int = 1) -> list[tuple[int, int]]:
    """``[0, n)`` in contiguous spans for ``threads`` threads.

    One span for one thread; otherwise ``per_thread`` spans a thread, each of ``min_span`` or
    more (at least one span).
    """
    parts = 1 if threads <= 1 else max(1, min(per_thread * threads, n // max(1, min_span)))
    cuts = [n * t // parts for t in range(parts + 1)]
    return list(itertools.pairwise(cuts))


_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    """Drop the parent's pool in a forked child (a loader's worker process).

    The pool's threads do not exist there, and one of them may have held its lock at the fork:
    the child starts a pool and a lock of its own.
    """
    global _pool, _pool_size, _pool_lock
    _pool, _pool_size, _pool_lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def executor(workers: int) -> ThreadPoolExecutor:
    """The process's pool, with at least ``workers`` threads (grown, never shrunk)."""
    global _pool, _pool_size
    with hold(_pool_lock):
        if _pool is None or _pool_size < workers:
            if _pool is not None:
                _pool.shutdown(wait=False)  # its threads finish what they run, then exit
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ibp-graph-cpu")
            _pool_size = workers
        return _pool


class Shared:
    """``fn(*task)`` for every task, each claimed in order by this thread or a pool thread.

    Up to ``threads - 1`` pool threads take tasks from the start; this thread takes one
    whenever it waits (`wait`) for a task not done yet, so that it never idles while tasks are
    left (and a busy pool only slows the work down). Once a task fails no other starts. Leaving
    the ``with`` block lets no thread start another task and waits for those running: they
    write into the caller's buffers.
    """

    def __init__(self, fn: Callable, tasks: Sequence[tuple], threads: int) -> None:
        self.fn, self.tasks = fn, tasks
        self.results: list = [None] * len(tasks)
        self.done = [threading.Event() for _ in tasks]
        self.errors: list[BaseException] = []
        self._next = 0
        self._lock = threading.Lock()
        helpers = min(threads, len(tasks)) - 1
        self._futures = (
            [executor(threads - 1).submit(self._work) for _ in range(helpers)] if helpers else []
        )

    def __enter__(self) -> Shared:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._next = len(self.tasks)
        # A helper still queued behind other work is cancelled, not waited for.
        wait_all([future for future in self._futures if not future.cancel()])

    def _take(self) -> int:
        """The next task to do: its index, or the task count when none is left."""
        with self._lock:
            i = self._next
            self._next = min(i + 1, len(self.tasks))
            return i

    def _do(self, i: int) -> None:
        try:
            self.results[i] = self.fn(*self.tasks[i])
        except BaseException as exc:  # raised on the caller's thread by `wait`
            with self._lock:  # no task starts any more, and none is waited for in vain
                self.errors.append(exc)
                for k in range(self._next, len(self.tasks)):
                    self.done[k].set()
                self._next = len(self.tasks)
        finally:
            self.done[i].set()

    def _work(self) -> None:
        while (i := self._take()) < len(self.tasks):
            self._do(i)

    def wait(self, i: int):
        """Task ``i``'s result, once done: this thread does unclaimed tasks meanwhile.

        Raises:
            BaseException: what a task raised.
        """
        while not self.done[i].is_set():
            j = self._take()
            if j < len(self.tasks):
                self._do(j)
            else:
                self.done[i].wait()
        if self.errors:
            raise self.errors[0]
        return self.results[i]

    def all(self) -> list:
        """Every task's result, in order."""
        return [self.wait(i) for i in range(len(self.tasks))]
