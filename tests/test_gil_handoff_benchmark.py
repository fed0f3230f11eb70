"""benchmarks/gil_handoff.py on the CPU: its cells, its arithmetic, its output, its bad input."""

from __future__ import annotations

import json
import sys
import threading

import pytest
import torch

from benchmarks import gil_handoff


def test_a_thread_cell_runs_its_thread_beside_every_step_and_restores_the_interval() -> None:
    seen = []

    def step(a: torch.Tensor) -> torch.Tensor:
        seen.append(threading.active_count())
        return a + 1

    before = sys.getswitchinterval()
    alone = threading.active_count()
    for kind in gil_handoff.BESIDE:
        seen.clear()
        t = gil_handoff.run_beside(kind, 0.0002, step, torch.device("cpu"), 3)
        assert t >= 0
        # the warm-up step runs before the thread starts, the 3 timed ones beside it
        assert seen == [alone] + [alone + 1] * 3, kind
        assert threading.active_count() == alone  # stopped and joined
        assert sys.getswitchinterval() == before
    seen.clear()
    gil_handoff.run_beside(None, 0.0002, step, torch.device("cpu"), 2)
    assert seen == [alone] * 3


def test_an_unknown_thread_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown thread kind 'GPU'"):
        gil_handoff.beside_fn("GPU", torch.device("cpu"))


def test_the_step_runs_its_ops() -> None:
    step = gil_handoff.step_fn(torch.device("cpu"), 7)
    assert step(torch.zeros(16)).tolist() == [7.0] * 16


def _row(what, beside, step_s, thread=None, epoch_s=None, interval=0.005):
    return {
        "what": what,
        "beside": beside,
        "switch_interval_s": interval,
        "prefetch_thread": thread,
        "step_s": step_s,
        "step_range_s": [step_s, step_s],
        "epoch_s": epoch_s,
    }


def test_analysis_per_op_cost_and_the_loader_against_its_serial_run() -> None:
    rows = gil_handoff.analyse(
        [
            _row("thread", None, 0.001),
            _row("thread", "short ops", 0.004),
            _row("loader", "raw", 0.002, thread=False, epoch_s=0.5),
            _row("loader", "raw", 0.003, thread=True, epoch_s=0.4),
            _row("loader", "IBP", 0.001, thread=False, epoch_s=0.2),
            _row("loader", "IBP", 0.0015, thread=True, epoch_s=0.3, interval=0.0001),
        ],
        ops=100,
    )
    assert rows[0]["extra_us_per_op"] == 0
    assert rows[1]["extra_us_per_op"] == pytest.approx(30.0)  # 3 ms over 100 ops
    assert rows[2]["extra_us_per_op"] == pytest.approx(10.0) and "step_vs_serial" not in rows[2]
    assert rows[3]["step_vs_serial"] == pytest.approx(1.5)
    assert rows[3]["epoch_vs_serial"] == pytest.approx(0.8)
    assert rows[5]["step_vs_serial"] == pytest.approx(1.5)  # against IBP's serial run
    assert rows[5]["epoch_vs_serial"] == pytest.approx(1.5)


def test_a_short_run_writes_every_cell(tmp_path) -> None:
    gil_handoff.main(
        ["--ops", "20", "--steps", "2", "--rounds", "2", "--switch-intervals", "0.005",
         "0.001", "--out", str(tmp_path)]
    )  # fmt: skip
    payload = json.loads((tmp_path / "gil-handoff-cpu.json").read_text())
    rows = payload["rows"]
    threads = [(r["beside"], r["switch_interval_s"]) for r in rows if r["what"] == "thread"]
    assert threads == [(None, 0.005)] + [(k, s) for k in gil_handoff.BESIDE for s in (0.005, 0.001)]
    loaders = [
        (r["beside"], r["prefetch_thread"], r["switch_interval_s"])
        for r in rows
        if r["what"] == "loader"
    ]
    assert loaders == [
        (name, thread, s)
        for name in ("raw", "IBP")
        for thread, s in [(False, 0.005), (True, 0.005), (True, 0.001)]
    ]
    for r in rows:
        assert r["step_s"] > 0 and r["step_range_s"][0] <= r["step_s"] <= r["step_range_s"][1]
        assert (r["epoch_s"] is not None) == (r["what"] == "loader")
        assert ("epoch_vs_serial" in r) == bool(r["prefetch_thread"])
    assert payload["environment"]["command"]
    text = (tmp_path / "gil-handoff-cpu.md").read_text()
    assert "| a thread: short ops | 1 ms |" in text
    assert "| loader (IBP), prefetch thread | 5 ms |" in text
    assert sum(line.startswith("|") for line in text.splitlines()) == 2 + len(rows)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ops", "0"], "--ops must be at least 1, got 0"),
        (["--rounds", "-1"], "--rounds must be at least 1, got -1"),
        (["--switch-intervals", "2"], "--switch-intervals must lie between 0 and 1 s"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
    ],
)
def test_bad_arguments_exit_with_a_message(args, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        gil_handoff.parse_args(args)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_cuda_without_a_gpu_is_refused_in_one_line(tmp_path) -> None:
    with pytest.raises(SystemExit, match="--device cuda, but no CUDA device is available"):
        gil_handoff.main(["--device", "cuda", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())
