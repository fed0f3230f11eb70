"""Command lines of the benchmark scripts and of ``ibp-graph train``: names, checks and help."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # benchmarks/, under any runner
BENCHMARKS = REPO / "benchmarks"
#: Every benchmark script with a command line.
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if "ArgumentParser(" in p.read_text())
COMMITTED = "folder for the results (default: benchmarks/results/, the committed results)"
#: The scripts whose ``--out`` is not the results folder, and what their help says instead.
OTHER_OUT = {
    "bundle_planetoid.py": "--out OUT folder for the .npz files (default: ibp_graph/data/",
    "profile_fetch.py": "--out OUT --summarise: the markdown page (default: profile.md",
    "sass_walk.py": "writes no file",
    "scoreboard.py": "--out OUT where targets.md/json go (default: the --results folder)",
}


def script_help(name: str, monkeypatch: pytest.MonkeyPatch, capsys) -> str:
    """``benchmarks/NAME --help`` run as a script, in this process; its words on one line."""
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the scripts put folders in front
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(BENCHMARKS / name), run_name="__main__")
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    return " ".join(out.split())


def test_the_scripts_with_a_command_line_are_found() -> None:
    assert {"sampling.py", "overlap.py", "bundle_planetoid.py", "e2e.py"} <= set(SCRIPTS)
    assert len(SCRIPTS) >= 15


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_benchmark_help_names_the_default_out_folder(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    if name == "overlap.py":
        pytest.importorskip("torch_geometric", reason="overlap.py trains PyG's GraphSAGE")
    text = script_help(name, monkeypatch, capsys)
    assert f"--out OUT {COMMITTED}" in text or OTHER_OUT.get(name, "-") in text, text
    if name not in OTHER_OUT:  # one helper adds it (benchmarks._env.add_out)
        source = (BENCHMARKS / name).read_text()
        assert "add_out(" in source and "default=RESULTS" not in source


def test_bundle_planetoid_runs_as_a_script(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = BENCHMARKS / "bundle_planetoid.py"
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository root: only the script's own folder is on the path
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "--src SRC" in done.stdout and "default: ibp_graph/data/" in done.stdout


# -- benchmarks/sampling.py: a plain CPU run leaves --compare-dgl's results alone -----------
def test_a_plain_cpu_sampling_run_is_not_named_as_the_dgl_comparison(monkeypatch) -> None:
    from benchmarks import sampling

    cpu = torch.device("cpu")
    assert sampling.results_name(cpu, compare_dgl=True) == "sampling-cpu"  # README, scoreboard
    assert sampling.results_name(cpu) == "sampling-cpu-alone"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _d=None: "NVIDIA H100 80GB HBM3")
    gpu = sampling.results_name(torch.device("cuda", 0))
    assert gpu == "sampling-nvidia-h100-80gb-hbm3"
    # What benchmarks/scoreboard.py reads for the DGL target.
    assert '"sampling-cpu.json"' in (BENCHMARKS / "scoreboard.py").read_text()


# -- benchmarks/overlap.py: enough nodes for its distinct batches, checked up front ----------
def test_overlap_refuses_too_few_nodes_with_a_usage_error(capsys) -> None:
    pytest.importorskip("torch_geometric", reason="overlap.py trains PyG's GraphSAGE")
    from benchmarks import overlap

    argv = ["--device", "cpu", "--nodes", "2000", "--steps", "2", "--rounds", "1"]
    with pytest.raises(SystemExit) as done:
        overlap.parse_args(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [line for line in err if "error:" in line] == [err[-1]]
    assert err[-1].endswith(
        "error: --nodes must be at least (--fetch-batches + 1) x --batch-size = (8 + 1) x "
        "1024 = 9216, got 2000"
    )
    assert overlap.parse_args([*argv[:2], "--nodes", "9216"]).nodes == 9216
    small = ["--fetch-batches", "2", "--batch-size", "32", "--nodes"]
    with pytest.raises(SystemExit):
        overlap.parse_args([*small, "95"])
    assert "(2 + 1) x 32 = 96, got 95" in capsys.readouterr().err
    assert overlap.parse_args([*small, "96"]).nodes == 96
    with pytest.raises(SystemExit):
        overlap.parse_args(["--batch-size", "0"])
    assert "--batch-size must be at least 1" in " ".join(capsys.readouterr().err.split())


# -- ibp-graph train -------------------------------------------------------------------------
def run_cli(capsys, *argv: object) -> tuple[int, str, str]:
    from ibp_graph.cli.main import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("extra", [["device=cpu"], ["device=cpu", "--nproc-per-node", "2"]])
def test_train_sampler_backend_kernel_on_the_cpu_is_a_config_error(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str]
) -> None:
    pytest.importorskip("torch_geometric")
    import ibp_graph.datasets

    loaded = []
    monkeypatch.setattr(ibp_graph.datasets, "load_dataset", lambda *a, **k: loaded.append(a))
    argv = ["train", "--config", "cora-sage", "--set", "epochs=1", "sampler_backend=kernel"]
    code, out, err = run_cli(capsys, *argv, f"workdir={tmp_path}", *extra)
    assert code == 2 and out == "" and loaded == []  # before the dataset loads
    assert "Traceback" not in err and "dataset:" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("ibp-graph train: error: sampler_backend: kernel runs the fused hop")
    assert "this run's device is cpu;" in last and "use sampler_backend: torch (or auto" in last
    assert "backend='torch'" not in last


@pytest.mark.skipif(torch.cuda.is_available(), reason="device: auto is the CPU without a GPU")
def test_train_sampler_backend_kernel_with_device_auto_names_it(capsys, tmp_path: Path) -> None:
    pytest.importorskip("torch_geometric")
    argv = ["train", "--config", "cora-sage", "--set", "epochs=1", "sampler_backend=kernel"]
    code, out, err = run_cli(capsys, *argv, f"workdir={tmp_path}")
    assert code == 2 and out == ""
    assert "this run's device is cpu (device: auto); use sampler_backend: torch" in err


def test_check_device_keys() -> None:
    from ibp_graph.train.config import ConfigError, TrainConfig, check_device_keys

    kernel = TrainConfig(dataset="cora", sampler_backend="kernel")
    uva = TrainConfig(dataset="cora", graph_memory="uva")
    for cfg in (kernel, uva):
        check_device_keys(cfg, torch.device("cuda", 0))  # a GPU: fine
    for backend in ("auto", "torch"):
        cfg = TrainConfig(dataset="cora", sampler_backend=backend, graph_memory="device")
        check_device_keys(cfg, torch.device("cpu"))
    with pytest.raises(ConfigError, match=r"device is cpu \(device: auto\); use sampler_backend"):
        check_device_keys(kernel, torch.device("cpu"))
    with pytest.raises(ConfigError, match=r"^graph_memory: uva keeps the graph in pinned host "):
        check_device_keys(uva, torch.device("cpu"))


def test_train_graph_memory_uva_on_the_cpu_is_a_config_error_before_loading(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch_geometric")
    import ibp_graph.datasets

    loaded = []
    monkeypatch.setattr(ibp_graph.datasets, "load_dataset", lambda *a, **k: loaded.append(a))
    argv = ["train", "--config", "cora-sage", "--set", "graph_memory=uva", "device=cpu"]
    code, out, err = run_cli(capsys, *argv, f"workdir={tmp_path}")
    assert code == 2 and out == "" and loaded == []
    last = err.strip().splitlines()[-1]
    assert last.startswith("ibp-graph train: error: graph_memory: uva keeps the graph in pinned")
    assert "this run's device is cpu; use graph_memory: device, or device: cuda" in last


def test_config_errors_name_a_packaged_config_as_given(monkeypatch, tmp_path: Path) -> None:
    from ibp_graph.train.config import ConfigError, load_config, resolve_config

    monkeypatch.chdir(tmp_path)  # no config files here: the packaged ones
    assert resolve_config("cora-sage")[0] == "the packaged config cora-sage"
    assert resolve_config("configs/cora-sage.yaml")[0] == "the packaged config cora-sage"
    with pytest.raises(ConfigError) as info:
        load_config("cora-sage", ["epochs=0"])
    message = str(info.value)
    assert message.startswith("the packaged config cora-sage with --set epochs=0: epochs must")
    assert "ibp_graph/configs" not in message
    path = tmp_path / "mine.yaml"
    path.write_text("dataset: cora\nepochs: 0\n")
    with pytest.raises(ConfigError, match=r"^mine.yaml: epochs must be an integer >= 1"):
        load_config("mine.yaml")


def test_train_help_keeps_the_torchrun_example_on_two_lines(capsys) -> None:
    code, out, _ = run_cli(capsys, "train", "--help")
    assert code == 0
    lines = out.splitlines()
    (i,) = [n for n, line in enumerate(lines) if "--rdzv-endpoint HOST:29400" in line]
    assert lines[i].endswith("HOST:29400 \\")
    assert lines[i + 1].strip().startswith("-m ibp_graph train --config cora-sage")
