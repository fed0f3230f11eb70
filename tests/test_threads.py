"""Work shared between threads (`ibp_graph.threads`): spans, the pool, tasks in order."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from conftest import close_while_its_thread_waits

from ibp_graph import threads


def test_spans_cover_the_range_in_order():
    assert threads.spans(1000, 1, 10, 4) == [(0, 1000)]  # one thread: never cut
    assert threads.spans(5, 4, 10, 4) == [(0, 5)]  # below the smallest span: one span
    assert threads.spans(0, 4, 10) == [(0, 0)]
    for n, count, per_thread in [(1000, 2, 4), (1000, 3, 1), (37, 4, 4), (10**6, 16, 2)]:
        cuts = threads.spans(n, count, 10, per_thread)
        assert cuts[0][0] == 0 and cuts[-1][1] == n
        assert all(a[1] == b[0] for a, b in itertools.pairwise(cuts))
        assert len(cuts) == min(per_thread * count, n // 10)
        assert min(b - a for a, b in cuts) >= 10


def test_shared_tasks_finish_and_raise_on_the_caller():
    """Results in task order; a task's error reaches the caller, and no task outlives the block."""

    # Tasks 0 and 1 wait for each other, so two threads run them: which thread takes which
    # task is otherwise up to the scheduler (the caller may take them all).
    both_started = threading.Barrier(2, timeout=30)

    def square(i):
        if i < 2:
            both_started.wait()
        time.sleep(0.002 * (i % 3))
        return threading.current_thread().name, i * i

    with threads.Shared(square, [(i,) for i in range(12)], threads=3) as shared:
        names, squares = zip(*shared.all(), strict=True)
    assert list(squares) == [i * i for i in range(12)]
    assert len(set(names)) > 1  # the pool took some

    ran = []

    def task(i):
        time.sleep(0.01)
        ran.append(i)
        if i == 2:
            raise ValueError("task 2 failed")

    with pytest.raises(ValueError, match="task 2 failed"):
        with threads.Shared(task, [(i,) for i in range(40)], threads=3) as shared:
            shared.all()
    count = len(ran)
    assert 2 in ran and count < 40  # the tasks left unclaimed were dropped
    time.sleep(0.05)
    assert len(ran) == count  # leaving the block waited for the tasks that had started

    # A pool kept busy by others: the caller does every task itself, in order, and does not
    # wait for the pool to free up (a regression ends at the timer, failing, not hanging).
    gate = threading.Event()
    timer = threading.Timer(20, gate.set)
    timer.start()
    pool = threads.executor(2)  # every worker it has, which earlier tests may have grown
    blockers = [pool.submit(gate.wait) for _ in range(threads._pool_size)]
    try:
        t0 = time.perf_counter()
        with threads.Shared(lambda i: threading.current_thread().name, [(i,) for i in range(4)],
                                threads=3) as shared:  # fmt: skip
            names = shared.all()
        assert time.perf_counter() - t0 < 10
        assert set(names) == {threading.current_thread().name}
    finally:
        gate.set()
        timer.cancel()
        for f in blockers:
            f.result(timeout=10)


def test_closing_a_producer_that_waits_for_the_pool_ends_it() -> None:
    """The process's pool is taken under a lock that every thread shares: a prefetch thread
    waiting for it is given up when its producer is closed by the thread that holds it."""
    close_while_its_thread_waits(threads._pool_lock, lambda: threads.executor(2))
