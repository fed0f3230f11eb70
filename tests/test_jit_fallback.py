"""Numba that loads but cannot compile: the decoder and the sampler fall back, once, warned."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph import jit
from ibp_graph import sampler as sampler_mod
from ibp_graph.graph import CSRGraph
from ibp_graph.sampler import NeighborSampler

pytestmark = pytest.mark.skipif(jit.numba is None, reason="needs Numba")


@pytest.fixture
def fresh_jit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled loops on, as in a new process, and back as they were after the test."""
    monkeypatch.setattr(jit, "_FAILED", [])


def failing(calls: list) -> object:
    """A stand-in for a compiled loop that Numba cannot compile: counts its calls, raises."""

    def fn(*args: object, **kwargs: object) -> None:
        calls.append(1)
        raise jit.numba.core.errors.TypingError("Failed in nopython mode pipeline (step: x)")

    return fn


def test_table_reads_fall_back_to_the_reference_with_one_warning(
    tmp_path, monkeypatch, fresh_jit
) -> None:
    from ibp_graph import decode_cpu

    x = np.random.default_rng(0).standard_normal((50, 12)).astype(np.float32)
    ibp_graph.compress(x, tmp_path / "t.ibp", progress=False)
    calls: list = []
    monkeypatch.setattr(decode_cpu, "decode", failing(calls))
    with ibp_graph.open(tmp_path / "t.ibp") as table:
        with pytest.warns(RuntimeWarning, match="could not compile.*TypingError"):
            got = table.read(np.array([3, 0, 49, 3]))
        assert got.view(np.uint32).tolist() == x[[3, 0, 49, 3]].view(np.uint32).tolist()
        assert not jit.available() and not decode_cpu.available() and len(calls) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # warned once, and the loop is not tried again
            assert np.array_equal(table.read().view(np.uint32), x.view(np.uint32))
        assert len(calls) == 1


def test_other_errors_of_the_compiled_decoder_are_raised(tmp_path, monkeypatch, fresh_jit) -> None:
    from ibp_graph import decode_cpu

    x = np.ones((4, 3), dtype=np.float32)
    ibp_graph.compress(x, tmp_path / "t.ibp", progress=False)

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("not Numba's")

    monkeypatch.setattr(decode_cpu, "decode", broken)
    with ibp_graph.open(tmp_path / "t.ibp") as table, pytest.raises(ValueError, match="not Numba"):
        table.read()
    assert jit.available()


def _graph() -> CSRGraph:
    ei = torch.randint(0, 90, (2, 600), generator=torch.Generator().manual_seed(3))
    return CSRGraph.from_edge_index(ei, 100)


@pytest.mark.parametrize("kwargs", [{}, {"disjoint": True}])
def test_the_sampler_falls_back_to_torch_ops(monkeypatch, fresh_jit, kwargs) -> None:
    """Fanouts of -1 draw nothing at random, so the fallback's batches are the torch ops'."""
    g, seeds = _graph(), torch.tensor([5, 17, 5, 99, 42])
    monkeypatch.setattr(sampler_mod, "_COMPILED", False)
    ops = NeighborSampler(g, [-1, -1], seed=0, **kwargs).sample(seeds)
    monkeypatch.setattr(sampler_mod, "_COMPILED", True)
    calls: list = []
    monkeypatch.setattr(sampler_mod._cpu_hops(), "sample", failing(calls))
    s = NeighborSampler(g, [-1, -1], seed=0, **kwargs)
    with pytest.warns(RuntimeWarning, match="could not compile"):
        got = s.sample(seeds)
    for f in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(got, f), getattr(ops, f)), f
    assert not jit.available() and len(calls) == 1
    again = s.sample(seeds)  # the torch ops from now on, the map cleared by them
    assert torch.equal(again.node, ops.node) and len(calls) == 1
    if not kwargs:
        assert (s._map == sampler_mod.UNSEEN).all()


def test_a_map_the_compiled_clear_could_not_clear_is_replaced(monkeypatch, fresh_jit) -> None:
    g, seeds = _graph(), torch.tensor([5, 17, 99])
    s = NeighborSampler(g, [-1, -1], seed=0)
    first = s.sample(seeds)  # compiled hops and clear
    calls: list = []
    monkeypatch.setattr(sampler_mod._cpu_hops(), "clear", failing(calls))
    with pytest.warns(RuntimeWarning, match="could not compile"):
        second = s.sample(seeds)  # compiled hops (compiled before), the clear fails
    assert torch.equal(second.node, first.node) and len(calls) == 1
    assert s._map is None  # left holding this batch's nodes: dropped
    third = s.sample(seeds)  # torch ops on a fresh map
    assert torch.equal(third.node, first.node) and (s._map == sampler_mod.UNSEEN).all()
