"""What a `CudaIBPTable` dropped without ``close`` leaves for the launches still running.

A fetch on a side stream reads the pinned rows and the device codec's tensors by address. A
table dropped in the middle of such a fetch must release neither before the device is
synchronised: its pinned buffer goes to the deferred buffers (`release_deferred`), and the
codec with it. Runs on the CPU: CuPy's runtime is a recorder and the codec's tensors live
on the CPU.
"""

from __future__ import annotations

import contextlib
import gc
import types
import weakref

import numpy as np
import pytest
import torch
from conftest import close_while_its_thread_waits
from cuda_runtime_stub import CudaRuntimeStub

import ibp_graph
from ibp_graph import cuda_table
from ibp_graph.pinned import deferred_count, release_deferred


@pytest.fixture
def cpu_table(tmp_path, monkeypatch):
    """``(open_table, runtime)``: ``open_table()`` makes a `CudaIBPTable` on the CPU."""
    runtime = CudaRuntimeStub()
    cuda = types.SimpleNamespace(runtime=runtime, Device=lambda index: contextlib.nullcontext())
    monkeypatch.setattr(cuda_table, "cupy", lambda: types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(cuda_table, "_device", lambda device: torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: runtime.deviceSynchronize())
    rng = np.random.default_rng(3)
    x = (rng.random((64, 24)) < 0.1).astype(np.float32)
    ibp_graph.compress(x, tmp_path / "t.ibp", progress=False)
    # Earlier tests' garbage first: nothing of theirs in the deferred buffers counted below.
    gc.collect()
    release_deferred()
    yield (lambda: cuda_table.CudaIBPTable(tmp_path / "t.ibp", pages="small")), runtime
    release_deferred()


def _codec_tensors(codec) -> list[torch.Tensor]:
    """Every tensor a launch reads by address (`DeviceCodec.const_args`, `runs_tensor`)."""
    named = [codec.offsets, codec.cluster_ids, codec.masks, codec.code_bits, codec.bitvals]
    derived = [*codec.prefix_tensors, codec.layout_tensor, codec.runs_tensor]
    return [t for t in named if t is not None] + derived


def test_a_table_dropped_without_close_defers_its_codec_with_its_pinned_rows(cpu_table) -> None:
    open_table, runtime = cpu_table
    table = open_table()
    assert not table.bypass  # the fused decoder reads the codec's tensors
    codec = table.codec
    tensors = [weakref.ref(t) for t in _codec_tensors(codec)]
    addresses = [*(int(a) for a in codec.const_args if a), codec.runs_tensor.data_ptr()]
    assert addresses == [r().data_ptr() for r in tensors]
    weakref.finalize(codec, runtime.note, "codec freed")
    del table, codec
    gc.collect()
    # Dropped while a fetch may still run: nothing synchronised, nothing released.
    assert deferred_count() == 1
    assert "codec freed" not in runtime.calls() and all(r() is not None for r in tensors)
    assert release_deferred() == 1
    # Released with the rows, after the device synchronise.
    assert runtime.calls()[-3:] == ["sync", "unregister", "codec freed"]
    assert all(r() is None for r in tensors) and deferred_count() == 0


def test_a_closed_table_defers_nothing_and_keeps_its_codec_until_dropped(cpu_table) -> None:
    open_table, runtime = cpu_table
    table = open_table()
    weakref.finalize(table.codec, runtime.note, "codec freed")
    table.close()
    assert runtime.calls()[-2:] == ["sync", "unregister"]  # close synchronises first, as before
    assert "codec freed" not in runtime.calls()  # the table still holds it
    del table
    gc.collect()
    assert runtime.calls()[-1] == "codec freed" and deferred_count() == 0


def test_closing_a_prefetch_thread_that_waits_for_the_table_lock_ends_it(
    cpu_table, monkeypatch
) -> None:
    """The garbage collector may close an abandoned loader's prefetch thread on a thread that
    holds a table's launch lock (in the middle of its own fetch): the close must not wait for
    a thread that waits for that lock."""
    open_table, _ = cpu_table
    table = open_table()
    table.sort_ids = False
    launched = []
    monkeypatch.setattr(cuda_table, "check_idx", lambda idx, device: None)
    monkeypatch.setattr(cuda_table, "check_launch", lambda *args: None)
    monkeypatch.setattr(table, "_launch", lambda *args: launched.append(args))
    close_while_its_thread_waits(table._lock, lambda: table.fetch(torch.arange(3), check=False))
    assert not launched
    table.close()
