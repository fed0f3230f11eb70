"""The loaders' prefetch thread: errors on it, live iterators sharing a sampler, exit.

With ``prefetch_thread=True`` each iterator of a loader prepares its batches on a thread of
its own (`ibp_graph.producer.BackgroundProducer`). These tests check that an error on the
thread reaches ``next()``, that iterators open at the same time (of one loader, or of two
loaders sharing a sampler) give the batches of their epochs, that closing an iterator never
waits on its thread while holding the sampler's lock, and that an iterator still open at
interpreter exit lets the process exit cleanly.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import close_while_its_thread_waits, homophilous_graph
from test_loader_base import TinyLoader, same

from ibp_graph.graph import CSRGraph
from ibp_graph.producer import EXIT_WAIT_S, BackgroundProducer
from ibp_graph.threads import hold

N = 400
#: Seconds a test waits for ``take()`` before it counts as hung.
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def graph() -> CSRGraph:
    _, _, src, dst, _ = homophilous_graph(7, N, 4000, 8, 4)
    return CSRGraph.from_edge_index(torch.stack([src, dst]), num_nodes=N)


def _take_within(producer: BackgroundProducer, timeout: float) -> BaseException | None:
    """What ``producer.take()`` raised, waiting at most ``timeout`` seconds for it."""
    raised: list[BaseException | None] = []

    def take() -> None:
        try:
            producer.take()
            raised.append(None)
        except BaseException as exc:
            raised.append(exc)

    waiter = threading.Thread(target=take, daemon=True)
    waiter.start()
    waiter.join(timeout)
    if not raised:
        pytest.fail(f"take() did not return within {timeout} s")
    return raised[0]


class Refused(RuntimeError):
    pass


def test_an_error_entering_the_threads_context_is_raised_by_take() -> None:
    def context():
        raise Refused("no device")

    producer = BackgroundProducer(lambda: (True, 1), 1, context=context)
    error = _take_within(producer, TIMEOUT_S)
    assert isinstance(error, Refused) and str(error) == "no device"
    with pytest.raises(StopIteration):
        producer.take()
    producer.close()


def _loader(graph: CSRGraph, *, slow_seeding: bool = False) -> TinyLoader:
    """A loader with the thread; with ``slow_seeding``, each reseeding of its sampler waits.

    The wait widens the window between a batch's seeding and its sampling, where anything
    else using the sampler would change the batch's draws.
    """
    loader = TinyLoader(graph, [5, 5], batch_size=16, shuffle=True, seed=4, prefetch_thread=True)
    if slow_seeding:
        sampler = loader.node_sampler
        seed_now = sampler.manual_seed

        def manual_seed(seed):
            seed_now(seed)
            time.sleep(0.002)

        sampler.manual_seed = manual_seed
    return loader


def test_live_iterators_give_the_batches_of_their_epochs(graph) -> None:
    ref = _loader(graph)
    first, second = list(ref), list(ref)
    loader = _loader(graph, slow_seeding=True)
    got_first, got_second = [], []
    for a, b in zip(loader, loader, strict=True):  # epochs 0 and 1 side by side
        got_first.append(a)
        got_second.append(b)
    assert not same(first, second)
    assert same(got_first, first) and same(got_second, second)


def test_collate_fn_during_an_epoch_leaves_its_batches_as_they_are(graph) -> None:
    ref = list(_loader(graph))
    loader = _loader(graph, slow_seeding=True)
    got = []
    for batch in loader:
        got.append(batch)
        for _ in range(3):
            loader.collate_fn(torch.arange(16))
    assert same(got, ref)


def test_two_loaders_sharing_a_sampler_give_the_batches_of_their_epochs(graph) -> None:
    ref = list(_loader(graph))
    first, second = _loader(graph, slow_seeding=True), _loader(graph)
    second.node_sampler = first.node_sampler  # as NeighborLoader(neighbor_sampler=...) does
    got_first, got_second = [], []
    for a, b in zip(first, second, strict=True):
        got_first.append(a)
        got_second.append(b)
    assert same(got_first, ref) and same(got_second, ref)


def test_closing_a_producer_while_holding_the_lock_its_thread_waits_for() -> None:
    """As when the garbage collector finalises an abandoned iterator mid-batch."""
    lock, produced = threading.Lock(), []

    def take_the_lock():
        with hold(lock):
            produced.append(1)

    producer = close_while_its_thread_waits(lock, take_the_lock, TIMEOUT_S)
    assert not produced
    with pytest.raises(StopIteration):
        producer.take()


def test_hold_off_a_producers_thread_waits_for_the_lock() -> None:
    lock, held = threading.Lock(), []

    def holder():
        with hold(lock):
            held.append(1)

    lock.acquire()
    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    time.sleep(0.05)
    assert not held and thread.is_alive()
    lock.release()
    thread.join(TIMEOUT_S)
    assert held == [1] and not lock.locked()


_OPEN_AT_EXIT = """
import itertools, time, torch
from ibp_graph.prefetch import Prefetcher

def work():  # each batch spends its time in torch, the GIL released
    for _ in itertools.count():
        yield lambda: torch.randn(600, 600) @ torch.randn(600, 600)

it = Prefetcher(work(), lambda x, stream: x.sum(), depth=64, thread=True)
next(it)
time.sleep(0.2)
print(time.monotonic(), flush=True)
"""


@pytest.mark.slow
def test_an_iterator_open_at_exit_lets_the_process_exit() -> None:
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_OPEN_AT_EXIT)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    ended = time.monotonic()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ended - float(proc.stdout.split()[-1]) < EXIT_WAIT_S
