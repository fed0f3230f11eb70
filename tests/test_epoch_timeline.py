"""benchmarks/epoch_timeline.py: an epoch's stages on one clock, and how much ran at once."""

from __future__ import annotations

import pytest
import torch

from benchmarks import epoch_timeline as et


def test_union_length_and_intersection() -> None:
    assert et.union([(2, 3), (0, 1), (0.5, 1.5), (1.5, 1.75)]) == [(0, 1.75), (2, 3)]
    assert et.union([]) == []
    # Within `join` of each other they merge too (overlap.py's back-to-back fetches).
    assert et.union([(0, 1), (1.5, 2)], join=0.5) == [(0, 2)]
    assert et.union([(0, 1), (1.5, 2)], join=0.25) == [(0, 1), (1.5, 2)]
    assert et.length([(0, 1), (0.5, 2), (3, 3.5)]) == pytest.approx(2.5)
    x, y = [(0.0, 1.0), (2.0, 3.0)], [(0.5, 2.5)]
    assert et.intersection(x, y) == pytest.approx(1.0)
    assert et.intersection(y, x) == pytest.approx(1.0)
    assert et.intersection(x, []) == 0.0


def test_overlap_of_a_timeline() -> None:
    timeline = [
        ["sample", 0.0, 0.25],
        ["fetch", 0.25, 1.0],
        ["step", 0.5, 2.5],
        ["sample", 2.0, 2.5],
        ["fetch", 2.5, 3.0],
        ["wait", 0.0, 0.5],  # waits are neither loader nor step time
    ]
    o = et.overlap(timeline)
    assert o["loader_s"] == pytest.approx(2.0) and o["step_s"] == pytest.approx(2.0)
    assert o["both_s"] == pytest.approx(1.0) and o["hidden"] == pytest.approx(0.5)
    assert o["span_s"] == pytest.approx(3.0) and o["lead_s"] == pytest.approx(0.5)
    # Taking turns: nothing at once; no steps at all: nothing to hide under.
    turns = et.overlap([["fetch", 0.0, 1.0], ["step", 1.0, 2.0]])
    assert turns["both_s"] == 0.0 and turns["hidden"] == 0.0
    alone = et.overlap([["fetch", 0.0, 1.0]])
    assert alone["hidden"] is None and alone["lead_s"] is None
    assert et.overlap([])["span_s"] == 0.0


def test_clock_and_spans_on_the_host() -> None:
    clock = et.Clock(torch.device("cpu"))
    t0 = clock.host0
    loader = [("fetch", t0 + 0.5, t0 + 1.0), ("sample", t0 + 0.25, t0 + 0.5)]
    spans = et.spans(clock, loader, [(t0 + 0.75, t0 + 2.0)])
    assert spans == [
        ["sample", pytest.approx(0.25), pytest.approx(0.5)],
        ["fetch", pytest.approx(0.5), pytest.approx(1.0)],
        ["step", pytest.approx(0.75), pytest.approx(2.0)],
    ]
    with pytest.raises(ValueError, match="a CUDA event on a clock made without a GPU"):
        clock.at(object())


def test_draw_names_three_lanes_per_run() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    runs = [("ibp", [["sample", 0.0, 0.1], ["fetch", 0.1, 0.3], ["step", 0.2, 0.5]]),
            ("raw", [["wait", 0.0, 0.2], ["step", 0.2, 0.4]])]  # fmt: skip
    et.draw(ax, runs, "cora")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [
        "ibp: loader", "ibp: step", "ibp: wait", "raw: loader", "raw: step", "raw: wait",
    ]  # fmt: skip
    assert len(ax.collections) == 5  # one set of bars per stage present in a lane
    assert ax.get_title() == "cora"
    plt.close(fig)
