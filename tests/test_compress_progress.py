"""The progress bar of the parameter fit, in ``ibp_graph.compress`` and ``ibp-graph compress``.

The fit (bit census, threshold sweep, clusters, exact scoring) shows a bar on stderr before
the encoding's bar, under the same ``progress`` argument; it changes no byte of the file.
"""

from __future__ import annotations

import importlib
import io
import sys
from pathlib import Path

import numpy as np
import pytest

import ibp_graph
from ibp_graph.cli.main import main
from ibp_graph.preprocess import fit, fit_work
from ibp_graph.progress import work_bar

compress_module = importlib.import_module("ibp_graph.compress")


def table(rows: int = 1500, cols: int = 12, seed: int = 0) -> np.ndarray:
    """Float32 rows of a few scales, rounded: invariant high bits, noisy low bits."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * rng.uniform(0.01, 3.0, cols)
    return np.round(x, 2).astype(np.float32)


class RecordingBar:
    """Stands in for a tqdm: checks that the count never passes the total."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.n = 0
        self.updates = 0

    def update(self, n: int = 1) -> None:
        assert n > 0
        self.n += n
        self.updates += 1
        assert self.n <= self.total, (self.n, self.total)

    def refresh(self) -> None:
        assert self.n <= self.total, (self.n, self.total)


def test_progress_true_shows_the_fit_bar_then_the_encode_bar(capsys, tmp_path: Path) -> None:
    ibp_graph.compress(table(), tmp_path / "t.ibp", clusters=2, progress=True).close()
    err = capsys.readouterr().err
    assert "fit t.ibp (1,500-row sample)" in err, err
    assert "compress t.ibp" in err, err
    assert err.index("fit t.ibp") < err.index("compress t.ibp")
    assert "row/s" in err


@pytest.mark.parametrize("progress", [False, None])
def test_no_fit_bar_when_progress_is_off_or_the_table_small(
    capsys, tmp_path: Path, progress: bool | None
) -> None:
    # None shows bars only for tables of PROGRESS_MIN_BYTES or more (and on a terminal).
    ibp_graph.compress(table(), tmp_path / "t.ibp", clusters=2, progress=progress).close()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"clusters": 3, "seed": 5},
        {"clusters": 4, "threshold": 0.8, "word_bytes": 8, "align": 16},
    ],
)
def test_the_bar_changes_no_byte(capsys, tmp_path: Path, options: dict) -> None:
    x = table(seed=1)
    ibp_graph.compress(x, tmp_path / "quiet.ibp", progress=False, **options).close()
    ibp_graph.compress(x, tmp_path / "shown.ibp", progress=True, **options).close()
    assert "fit shown.ibp" in capsys.readouterr().err
    assert (tmp_path / "quiet.ibp").read_bytes() == (tmp_path / "shown.ibp").read_bytes()


def test_the_fit_bar_reaches_its_total(monkeypatch, capsys, tmp_path: Path) -> None:
    bars = []

    def recording(total: int, desc: str, **kw):
        bar = work_bar(total, desc, **kw)
        bars.append((bar, total))
        return bar

    monkeypatch.setattr(compress_module, "work_bar", recording)
    ibp_graph.compress(table(), tmp_path / "t.ibp", clusters=3, progress=True).close()
    capsys.readouterr()
    (fit_bar, planned), (encode_bar, _) = bars
    assert fit_bar.desc.startswith("fit t.ibp")
    assert 0 < fit_bar.n == fit_bar.total <= planned
    assert encode_bar.n == encode_bar.total == 1500


@pytest.mark.parametrize("clusters", [1, 3, 6])
@pytest.mark.parametrize("threshold", ["auto", 0.85])
def test_fit_counts_its_work_and_computes_the_same(clusters: int, threshold) -> None:
    words = table(800, 10, seed=clusters).view(np.uint32)
    planned = fit_work(len(words), 4, clusters=clusters, threshold=threshold)
    bar = RecordingBar(planned)
    kw = {"clusters": clusters, "threshold": threshold, "align": 1, "seed": 2, "num_rows": 8000}
    with_bar = fit(words, "float32", bar=bar, **kw)
    without = fit(words, "float32", **kw)
    # Work not needed (Lloyd iterations after convergence, narrower caps) leaves the total.
    assert 0 < bar.n == bar.total <= planned
    assert bar.updates > clusters  # advances step by step, not in one jump at the end
    for name in ("masks", "code_bits", "bitvals"):
        assert np.array_equal(getattr(with_bar.params, name), getattr(without.params, name))
    assert with_bar.expected_bytes == without.expected_bytes
    assert with_bar.threshold == without.threshold


def test_fit_work_is_known_before_the_fit() -> None:
    one = fit_work(1000, 4)
    assert one > 0 and fit_work(1000, 4, threshold=0.9) < one
    assert fit_work(1000, 4, clusters=4) > one  # k clusters, then the single-cluster fit
    assert fit_work(3, 4, clusters=200) == fit_work(3, 4, clusters=3)  # k <= sample rows
    with pytest.raises(ValueError, match="threshold"):
        fit_work(1000, 4, threshold=0.3)


class Terminal(io.StringIO):
    """A stderr that says it is a terminal (tqdm shows ``disable=None`` bars only there)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("flags", "shown"), [((), True), (("--no-progress",), False), (("--quiet",), False)]
)
def test_cli_fit_bar_follows_its_flags(
    monkeypatch, capsys, tmp_path: Path, flags: tuple[str, ...], shown: bool
) -> None:
    src, out = tmp_path / "x.npy", tmp_path / "x.ibp"
    np.save(src, table())
    monkeypatch.setattr(compress_module, "PROGRESS_MIN_BYTES", 0)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = main(["compress", str(src), "-o", str(out), "--clusters", "2", *flags])
    assert code == 0, terminal.getvalue()
    assert capsys.readouterr().out == f"{out}\n"
    assert ("fit x.ibp" in terminal.getvalue()) is shown, terminal.getvalue()


@pytest.mark.parametrize(
    ("show", "size", "shown"),
    [(True, 1, True), (False, 1000, False), (None, 99, False), (None, 100, True)],
)
def test_a_work_bar_follows_its_flag_and_on_its_own_skips_a_small_job(
    monkeypatch, show: bool | None, size: int, shown: bool
) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with work_bar(7, "job", unit="row", show=show, size=size, min_size=100) as bar:
        assert bar.disable is not shown
        bar.update(7)
    assert ("job" in terminal.getvalue()) is shown
    with work_bar(100, "all", unit="B", show=None, min_size=100) as bar:  # size: the total
        assert not bar.disable
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal: None shows nothing
    with work_bar(100, "all", unit="B", show=None) as bar:
        assert bar.disable
