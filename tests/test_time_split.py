"""benchmarks/time_split.py: where repeated work spends its time, on the CPU."""

from __future__ import annotations

import pytest
import torch

from benchmarks import time_split


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::(anonymous namespace)::indexSelectLargeIndex<long, long, unsigned "
            "int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<long, unsigned int>, long)",
            "indexSelectLargeIndex",
        ),
        (
            "void at_cuda_detail::cub::DeviceScanKernel<Policy<int>, long*>(long*)",
            "DeviceScanKernel",
        ),
        ("Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pinned)"),
        ("ibp_hop_draw_k32_i64", "ibp_hop_draw_k32_i64"),
        ("void plain_kernel(int*)", "plain_kernel"),
    ],
)
def test_short_kernel_names(name: str, short: str) -> None:
    assert time_split.short_kernel_name(name) == short


def helper(n: int) -> int:
    return sum(range(n))


def work() -> torch.Tensor:
    for _ in range(3):
        helper(20_000)
    return torch.arange(50_000).cumsum(0)


def test_split_names_the_ops_and_functions_of_each_call() -> None:
    out = time_split.split(work, 4, cuda=False)
    assert out["calls"] == 4 and out["gpu_busy_s"] is None and out["kernels"] == []
    host = {e["name"]: e for e in out["host_ops"]}
    assert "aten::cumsum" in host and host["aten::cumsum"]["calls"] == 1.0
    python = {e["name"]: e for e in out["python"]}
    mine = [name for name in python if name.endswith("(helper)")]
    assert len(mine) == 1 and python[mine[0]]["calls"] == 3.0  # per call of work
    assert mine[0].startswith("tests/test_time_split.py:")
    for entries in (out["host_ops"], out["python"]):
        assert 0 < len(entries) <= time_split.TOP
        times = [e["ms"] for e in entries]
        assert times == sorted(times, reverse=True) and all(t > 0 for t in times)
    # The profiler's own disable() is not one of the work's functions.
    assert not any("_lsprof" in e["name"] for e in out["python"])
    assert len(time_split.split(work, 1, cuda=False, top=2)["python"]) == 2


def test_a_profiler_that_fails_leaves_the_measurement_alone(capsys) -> None:
    def broken() -> None:
        raise RuntimeError("no such op")

    out = time_split.split(broken, 2, cuda=False)
    assert out == {
        "calls": 2, "gpu_busy_s": None, "kernels": [], "host_ops": [], "python": [],
        "python_threads": time_split.PYTHON_THREADS,
    }  # fmt: skip
    err = capsys.readouterr().err
    assert "torch profiler: RuntimeError: no such op" in err and "cProfile: RuntimeError" in err
    with pytest.raises(ValueError, match="calls must be at least 1, got 0"):
        time_split.split(work, 0, cuda=False)


def test_markdown_puts_the_three_lists_side_by_side() -> None:
    result = {
        "calls": 5,
        "kernels": [{"name": "emit", "ms": 0.25, "calls": 3.0}],
        "host_ops": [
            {"name": "aten::index_select", "ms": 1.5, "calls": 12.0},
            {"name": "aten::cat", "ms": 0.5, "calls": 2.0},
        ],
        "python": [{"name": "a|b.py:3(f)", "ms": 2.0, "calls": 1.0}],
    }
    lines = time_split.markdown("int64, device, kernel", result)
    assert lines[0].startswith("int64, device, kernel (per call, 5 calls profiled")
    assert lines[2] == (
        "| # | GPU kernel or copy | torch op, own host time | Python function, own time |"
    )
    assert lines[4] == (
        "| 1 | `emit` 0.250 ms (3) | `aten::index_select` 1.500 ms (12) "
        "| `a\\|b.py:3(f)` 2.000 ms (1) |"
    )
    assert lines[5] == "| 2 |  | `aten::cat` 0.500 ms (2) |  |"
    # Whose Python calls were counted (cProfile sees every thread from Python 3.12).
    lines = time_split.markdown("x", result | {"python_threads": "every thread"})
    assert lines[2].endswith("| Python function, own time, every thread |")
    empty = {"calls": 1, "kernels": [], "host_ops": [], "python": []}
    assert (
        time_split.markdown("x", empty)[-1] == "| - | not measured | not measured | not measured |"
    )


def test_python_threads_says_whose_calls_cprofile_counts() -> None:
    import threading

    def elsewhere() -> None:
        thread = threading.Thread(target=_on_another_thread)
        thread.start()
        thread.join()

    names = [e["name"] for e in time_split.python_functions(elsewhere, 1, top=50)]
    seen = any("_on_another_thread" in name for name in names)
    assert seen == (time_split.PYTHON_THREADS == "every thread")


def _on_another_thread() -> None:
    sum(range(1000))
