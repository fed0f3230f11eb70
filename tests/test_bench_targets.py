"""The verdict rule every benchmark's targets share (benchmarks/_targets.py)."""

from __future__ import annotations

import math

import pytest

from benchmarks._targets import check, verdict


def test_at_least_met_missed_and_gap() -> None:
    assert check(0.9, 0.85) == {
        "value": 0.9, "goal": 0.85, "comparison": ">=", "met": True, "gap": 0.0,
    }  # fmt: skip
    t = check(0.6, 0.8)
    assert t["met"] is False and t["gap"] == pytest.approx(0.25)
    assert verdict(t) == "gap 25.0%"
    assert check(0.8, 0.8)["met"] is True  # the goal itself is met


def test_at_most_met_missed_and_gap() -> None:
    t = check(1.32, 1.1, at_least=False)
    assert t["comparison"] == "<=" and t["met"] is False
    assert t["gap"] == pytest.approx(0.2)
    assert verdict(t) == "gap 20.0%"
    assert verdict(check(1.05, 1.1, at_least=False)) == "met"


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf])
def test_a_value_not_measured_is_neither_met_nor_missed(value) -> None:
    t = check(value, 2.0)
    assert t["met"] is None and t["gap"] is None
    assert verdict(t) == "not measured"


def test_no_goal_gives_no_verdict_and_info_is_kept() -> None:
    t = check(3.0, None, applies=False, rule="none")
    assert t["met"] is None and t["applies"] is False and t["rule"] == "none"
    assert verdict(t) == "not measured"


def test_a_zero_goal() -> None:
    assert check(0.0, 0.0, at_least=False)["gap"] == 0.0
    assert check(0.5, 0.0, at_least=False)["gap"] == math.inf


def test_results_files_are_named_for_the_device_they_ran_on(monkeypatch) -> None:
    import torch

    from benchmarks._env import result_name, slug

    assert result_name("e2e", torch.device("cpu")) == "e2e-cpu"
    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H200"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: names[device.index])
    assert result_name("overlap", torch.device("cuda", 0)) == "overlap-nvidia-h100-80gb-hbm3"
    assert result_name("sampling-ops", torch.device("cuda", 1)) == "sampling-ops-nvidia-h200"
    assert slug("  ") == "gpu"


def test_grid_caps_are_given_in_blocks_per_sm(monkeypatch) -> None:
    import types

    import torch

    from benchmarks import fetch
    from benchmarks._env import grid_cap

    props = types.SimpleNamespace(multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    cuda = torch.device("cuda", 0)
    assert grid_cap(None, cuda) is None  # the library's default
    assert grid_cap(0.25, cuda) == 33 and grid_cap(4, cuda) == 528
    assert grid_cap(0.001, cuda) == 1  # at least one block
    assert grid_cap(0.25, torch.device("cpu")) == 1  # one SM off CUDA
    assert fetch.parse_args(["--max-blocks", "0.25"]).max_blocks == 0.25
    assert "0.25 blocks per SM" in fetch.grid_label(0.25)
    assert "default" in fetch.grid_label(None)


@pytest.mark.parametrize("bad", ["0", "-1", "x", "nan", "inf"])
def test_every_benchmark_refuses_a_grid_cap_that_is_not_a_positive_number(bad, capsys) -> None:
    from benchmarks import fetch, overlap, profile_fetch

    for parse in (fetch.parse_args, profile_fetch.parse_args, overlap.parse_args):
        with pytest.raises(SystemExit) as exc:
            parse(["--max-blocks", bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--max-blocks: must be a positive number of blocks per SM" in err
        assert repr(bad) in err
