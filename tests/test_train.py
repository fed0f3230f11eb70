"""Training runs: configs, models, `train` (IBP on vs off, accuracy on Cora) and the CLI.

Everything runs on the CPU with the bundled Cora graph; the GPU variant is marked ``gpu``
and skips without CUDA. OGB datasets are never downloaded: a missing folder must be a
one-line error.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import threading
from pathlib import Path

import pytest
import torch

pytest.importorskip("torch_geometric")

import ibp_graph  # noqa: E402
from ibp_graph.cli.main import main  # noqa: E402
from ibp_graph.errors import IBPInputError  # noqa: E402
from ibp_graph.train.backends import _undirected, get_backend  # noqa: E402
from ibp_graph.train.config import (  # noqa: E402
    ConfigError,
    TrainConfig,
    default_workdir,
    load_config,
    packaged_configs,
    parse_override,
)
from ibp_graph.train.models import build_model  # noqa: E402
from ibp_graph.train.run import RunResult, prepare_table, train  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PACKAGED = (
    "citeseer-sage",
    "cora-gat",
    "cora-sage",
    "cora-sage-dgl",
    "ogbn-arxiv-sage",
    "ogbn-papers100M-sage",
    "ogbn-products-sage",
)

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
no_gpu_here = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def last_error_line(err: str) -> str:
    lines = err.strip("\n").splitlines()
    assert "Traceback" not in err
    return lines[-1]


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------


def test_packaged_configs_load_and_match_the_repository_files() -> None:
    assert set(PACKAGED) <= set(packaged_configs())
    for name in PACKAGED:
        by_name = load_config(name)
        by_path = load_config(REPO / "configs" / f"{name}.yaml")
        assert by_name == by_path
        assert len(by_name.fanouts) == by_name.layers
    assert load_config("cora-sage.yaml") == load_config("configs/cora-sage.yaml")


def test_valid_config_file_is_typed(tmp_path: Path) -> None:
    path = write(
        tmp_path / "run.yaml",
        "dataset: citeseer\nmodel: gat\nhidden: 32\nheads: 4\nlayers: 3\n"
        "fanouts: [5, 5, -1]\nlr: 1e-3\nweight_decay: 0\nibp: false\nalign: 16\n",
    )
    cfg = load_config(path)
    assert cfg.dataset == "citeseer" and cfg.model == "gat" and cfg.heads == 4
    assert cfg.fanouts == [5, 5, -1] and cfg.eval_fanouts is None
    assert cfg.lr == 1e-3 and isinstance(cfg.lr, float)  # YAML reads 1e-3 as a string
    assert cfg.weight_decay == 0.0 and isinstance(cfg.weight_decay, float)
    assert cfg.ibp is False and cfg.align == 16
    assert cfg.device == "auto" and cfg.workdir is None  # defaults


def test_unknown_key_is_named_with_the_valid_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.yaml", "dataset: cora\nfanout: [10, 5]\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert str(path) in msg and "unknown key 'fanout'" in msg and "did you mean 'fanouts'" in msg
    assert "valid keys: dataset, root, model" in msg
    with pytest.raises(ConfigError, match="--set 'epoch=3': unknown key 'epoch'"):
        load_config("cora-sage", ["epoch=3"])


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("epochs=abc", "epochs must be an integer, got 'abc'"),
        ("batch_size=1.5", "batch_size must be an integer, got 1.5"),
        ("lr=fast", "lr must be a number, got 'fast'"),
        ("ibp=maybe", "ibp must be true/false, got 'maybe'"),
        ("fanouts=ten", "fanouts must be a list of integers"),
        ("fanouts=[10,x]", "fanouts must be a list of integers"),
        ("align=3", "align must be 'auto' or one of 1, 2, 4, 8, 16, 32, got 3"),
        ("device=gpu", "device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
        ("model=gcn", "model must be one of 'sage', 'gat', got 'gcn'"),
        ("backend=jax", "backend must be one of 'pyg', 'dgl', got 'jax'"),
        ("backend=PyG", "backend must be one of 'pyg', 'dgl', got 'PyG'"),
        ("graph_memory=gpu", "graph_memory must be one of 'device', 'uva', got 'gpu'"),
        (
            "sampler_backend=cuda",
            "sampler_backend must be one of 'auto', 'torch', 'kernel', got 'cuda'",
        ),
        ("sample_group=0", "sample_group must be auto or an integer >= 1, got 0"),
        ("sample_group=many", "sample_group must be auto or an integer >= 1, got 'many'"),
        ("sampler_cuda_graph=maybe", "sampler_cuda_graph must be auto, true or false, got 'maybe'"),
        ("sampler_cuda_graph=1.5", "sampler_cuda_graph must be auto, true or false, got '1.5'"),
        ("dropout=1", "dropout must be in [0, 1), got 1.0"),
        ("epochs=0", "epochs must be an integer >= 1, got 0"),
        ("dataset=imagenet", "unknown dataset 'imagenet'; known: cora, citeseer"),
        ("epochs", "expected key=value"),
    ],
)
def test_bad_override_names_key_and_value(item: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config("cora-sage", [item])
    assert needle in str(info.value)
    assert isinstance(info.value, IBPInputError)


def test_overrides_are_parsed_by_type_and_later_ones_win() -> None:
    cfg = load_config(
        "cora-sage",
        [
            "fanouts=[15,5]",
            "eval_fanouts=[20, 20]",
            "epochs=7",
            "lr=1e-3",
            "ibp=false",
            "root=/data/planetoid",
            "align=8",
            "epochs=3",
        ],
    )
    assert cfg.fanouts == [15, 5] and cfg.eval_fanouts == [20, 20]
    assert cfg.epochs == 3 and cfg.lr == 0.001 and cfg.ibp is False
    assert cfg.root == "/data/planetoid" and cfg.align == 8
    assert parse_override("fanouts=10,5") == ("fanouts", [10, 5])
    assert parse_override("eval_fanouts=null") == ("eval_fanouts", None)
    assert parse_override("workdir=123") == ("workdir", "123")  # strings stay strings
    assert parse_override("progress=yes") == ("progress", True)


def test_cross_field_checks() -> None:
    with pytest.raises(ConfigError, match="fanouts has 3 hops .* but layers is 2"):
        load_config("cora-sage", ["fanouts=[10,10,10]"])
    with pytest.raises(ConfigError, match=r"hidden \(60\) must be a multiple of heads \(8\)"):
        load_config("cora-gat", ["hidden=60"])
    with pytest.raises(ConfigError, match="positive integers or -1"):
        load_config("cora-sage", ["fanouts=[10,0]"])


def test_backend_key_defaults_to_pyg_and_is_checked_in_files(tmp_path: Path) -> None:
    assert load_config("cora-sage").backend == "pyg"
    assert TrainConfig(dataset="cora").backend == "pyg"
    dgl_cfg = load_config("cora-sage-dgl")
    assert dgl_cfg.backend == "dgl"
    # cora-sage-dgl is cora-sage with backend dgl, nothing else
    assert dataclasses.replace(dgl_cfg, backend="pyg") == load_config("cora-sage")
    path = write(tmp_path / "b.yaml", "dataset: cora\nbackend: tensorflow\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: backend must be one of 'pyg', 'dgl', got 'tensorflow'"
    with pytest.raises(ConfigError, match="backend must be a string, got 3"):
        load_config(write(tmp_path / "c.yaml", "dataset: cora\nbackend: 3\n"))
    with pytest.raises(IBPInputError, match="backend must be one of 'pyg', 'dgl', got 'mxnet'"):
        get_backend("mxnet")


def test_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file.*packaged: citeseer-sage"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path / "a.yaml", "dataset: [cora\n"))
    with pytest.raises(ConfigError, match="a config is a mapping"):
        load_config(write(tmp_path / "b.yaml", "- cora\n"))
    with pytest.raises(ConfigError, match="missing required key 'dataset'"):
        load_config(write(tmp_path / "c.yaml", "epochs: 3\n"))
    with pytest.raises(ConfigError, match="c.yaml: epochs must be an integer, got 'x'"):
        load_config(write(tmp_path / "c.yaml", "dataset: cora\nepochs: x\n"))


def test_dataclass_checks_direct_construction() -> None:
    cfg = TrainConfig(dataset="cora", fanouts=(5, 5), lr=1)
    assert cfg.fanouts == [5, 5] and cfg.lr == 1.0 and isinstance(cfg.lr, float)
    with pytest.raises(ConfigError, match="hidden must be an integer"):
        TrainConfig(dataset="cora", hidden="big")
    text = cfg.to_yaml()
    assert "fanouts: [5, 5]\n" in text and "root: null\n" in text


def test_default_workdir_is_under_the_cache_dir(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_workdir() == tmp_path / "ibp-graph"


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sage", "gat"])
def test_build_model_gives_logits(name: str) -> None:
    cfg = TrainConfig(dataset="cora", model=name, hidden=16, heads=4, layers=2)
    model = build_model(cfg, 12, 5)
    x = torch.randn(6, 12)
    edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    assert model(x, edge_index).shape == (6, 5)
    kind = {"sage": "GraphSAGE", "gat": "GAT"}[name]
    assert type(model).__name__ == kind


def test_build_model_rejects_bad_specs() -> None:
    cfg = TrainConfig(dataset="cora")
    cfg.model = "gcn"
    with pytest.raises(IBPInputError, match="model must be one of 'sage', 'gat', got 'gcn'"):
        build_model(cfg, 8, 2)
    cfg.model, cfg.hidden, cfg.heads = "gat", 10, 4
    with pytest.raises(IBPInputError, match="multiple of heads"):
        build_model(cfg, 8, 2)


# --------------------------------------------------------------------------------------------
# The compressed table in workdir
# --------------------------------------------------------------------------------------------


def test_prepare_table_reuses_only_a_matching_file(tmp_path: Path) -> None:
    cfg = TrainConfig(dataset="cora", workdir=str(tmp_path))
    x = (torch.rand(300, 40, generator=torch.Generator().manual_seed(0)) < 0.1).float()
    logs: list[str] = []
    table, info = prepare_table(x, "toy", cfg, tmp_path, logs.append)
    assert not info.reused and Path(info.path).parent == tmp_path
    assert torch.equal(table[torch.arange(300)], x)
    table.close()

    table, info = prepare_table(x, "toy", cfg, tmp_path, logs.append)
    assert info.reused and info.compress_s == 0.0
    table.close()

    y = x.clone()
    y[7, 3] = 5.0  # same shape and dtype, other rows
    table, info = prepare_table(y, "toy", cfg, tmp_path, logs.append)
    assert not info.reused and torch.equal(table[torch.arange(300)], y)
    table.close()
    assert "other rows" in logs[-2]

    path = Path(info.path)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF  # corrupt a section: its checksum fails
    path.write_bytes(bytes(raw))
    table, info = prepare_table(y, "toy", cfg, tmp_path, logs.append)
    assert not info.reused and "does not open" in logs[-2]
    assert torch.equal(table[torch.arange(300)], y)
    table.close()

    table, info = prepare_table(y[:, :20].contiguous(), "toy", cfg, tmp_path, logs.append)
    assert not info.reused and "holds (300, 40)" in logs[-2]
    table.close()


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", ["cora-sage", "cora-gat"])
def test_ibp_on_and_off_give_bit_identical_losses_on_cpu(tmp_path: Path, config: str) -> None:
    common = ["epochs=3", "device=cpu", f"workdir={tmp_path}"]
    on = train(load_config(config, [*common, "ibp=true"]), log=None)
    off = train(load_config(config, [*common, "ibp=false"]), log=None)
    assert len(on.losses) == 3 and all(math.isfinite(v) for v in on.losses)
    assert on.losses == off.losses  # exact float equality, epoch by epoch
    for a, b in zip(on.epochs, off.epochs, strict=True):
        assert (a.train_acc, a.val_acc, a.test_acc) == (b.train_acc, b.val_acc, b.test_acc)
        assert a.rows == b.rows and a.raw_bytes == b.raw_bytes > 0
        assert 0 < a.pcie_bytes < a.raw_bytes  # Cora's 0/1 rows compress well
        assert b.pcie_bytes == 0  # IBP off on the CPU: the tensor is already there
    assert on.ratio is not None and on.ratio > 10 and off.ratio is None
    assert on.table is not None and off.table is None
    # The run leaves the global determinism setting as it found it.
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.utils.deterministic.fill_uninitialized_memory


def test_deterministic_steps_leave_new_tensors_unfilled_on_every_thread() -> None:
    from ibp_graph.train.run import deterministic

    seen = []

    def loader_thread() -> None:  # e.g. a prefetch thread allocating during a step
        seen.append((torch.are_deterministic_algorithms_enabled(), torch.empty(1 << 16)))

    with deterministic(True):
        thread = threading.Thread(target=loader_thread)
        thread.start()
        thread.join()
        assert torch.are_deterministic_algorithms_enabled()
    on, fresh = seen[0]
    assert on and not torch.isnan(fresh).all()  # filled tensors would read as NaN
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.utils.deterministic.fill_uninitialized_memory


def test_same_seed_same_run_other_seed_other_run(tmp_path: Path) -> None:
    args = ["epochs=2", "device=cpu", "ibp=false", f"workdir={tmp_path}"]
    a = train(load_config("cora-sage", args), log=None)
    b = train(load_config("cora-sage", args), log=None)
    c = train(load_config("cora-sage", [*args, "seed=1"]), log=None)
    assert a.losses == b.losses and a.losses != c.losses


@pytest.mark.slow
def test_graphsage_reaches_078_on_cora_within_the_configured_epochs(tmp_path: Path) -> None:
    cfg = load_config("cora-sage", [f"workdir={tmp_path}", "device=cpu"])
    result = train(cfg, log=None)
    assert len(result.epochs) == cfg.epochs
    assert result.final_test_acc >= 0.78, result.summary()
    assert result.best_epoch.test_acc >= 0.78, result.summary()
    summary = result.summary()
    for needle in ("accuracy", "epoch time", "stages", "sample", "fetch", "train", "ratio"):
        assert needle in summary
    json.dumps(result.to_dict())  # JSON-ready


def test_undirected_matches_pyg() -> None:
    from torch_geometric.utils import to_undirected

    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 50, (2, 400), generator=gen)  # duplicates, self-loops
    assert torch.equal(_undirected(edge_index, 50), to_undirected(edge_index, num_nodes=50))


def hide_dgl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import dgl`` fail as it does when DGL is not installed."""
    monkeypatch.setitem(sys.modules, "dgl", None)
    monkeypatch.delitem(sys.modules, "ibp_graph.loaders.dgl", raising=False)


def test_backend_dgl_without_dgl_names_the_extra(monkeypatch, tmp_path: Path) -> None:
    hide_dgl(monkeypatch)
    cfg = load_config("cora-sage-dgl", [f"workdir={tmp_path}", "device=cpu"])
    with pytest.raises(
        ImportError, match=r"backend: dgl needs DGL.*pip install 'ibp-graph\[dgl\]'"
    ):
        train(cfg, log=None)
    assert not list(tmp_path.iterdir())  # failed before compressing anything
    with pytest.raises(ImportError, match=r"pip install 'ibp-graph\[dgl\]'"):
        build_model(cfg, 8, 2)


def test_cli_backend_dgl_without_dgl_is_a_runtime_error(capsys, monkeypatch, tmp_path) -> None:
    hide_dgl(monkeypatch)
    code, out, err = run_cli(
        capsys, "train", "--config", "cora-sage-dgl", "--set", f"workdir={tmp_path}"
    )
    assert code == 1 and out == ""
    line = last_error_line(err)
    assert line.startswith("ibp-graph: error: backend: dgl needs DGL")
    assert "pip install 'ibp-graph[dgl]'" in line


def test_result_properties() -> None:
    cfg = TrainConfig(dataset="cora")
    result = RunResult(cfg, "cpu", "cora", 10, 20, [-1, -1])
    assert result.eval_mode == "full neighborhood"
    result.eval_fanouts = [10, 5]
    assert result.eval_mode == "fanouts [10, 5]"


# --------------------------------------------------------------------------------------------
# The CLI
# --------------------------------------------------------------------------------------------


def test_cli_train_prints_the_config_and_the_summary(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the default workdir
    code, out, err = run_cli(capsys, "train", "--config", "cora-sage", "--set", "epochs=1")
    assert code == 0, err
    assert out.startswith("== ibp-graph train: cora, sage, IBP on, cpu ==")
    for needle in ("accuracy", "epoch time", "stages", "PCIe bytes", "with IBP", "ratio"):
        assert needle in out
    assert "config:\n  dataset: cora\n" in err and "  epochs: 1\n" in err
    assert "epoch   1/1" in err
    assert list((tmp_path / "ibp-graph").glob("cora-*.ibp"))  # compressed into the cache


def test_cli_train_json_and_repeated_sets(capsys, tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    code, out, err = run_cli(
        capsys,
        "train",
        "--config",
        REPO / "configs" / "cora-sage.yaml",
        "--set",
        "epochs=1",
        f"workdir={tmp_path}",
        "--set",
        "ibp=false",
        "--json",
        out_json,
    )
    assert code == 0, err
    assert "IBP off" in out and "without IBP" in out
    data = json.loads(out_json.read_text())
    assert data["config"]["ibp"] is False and len(data["losses"]) == 1
    assert data["eval_mode"] == "full neighborhood"
    # sampler_backend: auto, the loaders' default; the run records the backend used.
    assert data["config"]["sampler_backend"] == "auto" and data["sampler_backend"] == "torch"
    assert "sampler backend torch" in out


def test_sampler_replay_keys_reach_the_loaders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ibp_graph.train.backends as backends_module
    from ibp_graph.train.config import check_device_keys

    cfg = TrainConfig(dataset="cora")
    assert cfg.sampler_cuda_graph == "auto" and cfg.sample_group == "auto"
    cfg = load_config("cora-sage", ["sampler_cuda_graph=False", "sample_group=4"])
    assert cfg.sampler_cuda_graph is False and cfg.sample_group == 4
    assert load_config("cora-sage", ["sample_group=AUTO"]).sample_group == "auto"
    with pytest.raises(ConfigError, match="sampler_cuda_graph: true replays .* sampler_backend is"):
        load_config("cora-sage", ["sampler_cuda_graph=true", "sampler_backend=torch"])
    kernel = load_config("cora-sage", ["sampler_cuda_graph=true"])
    with pytest.raises(ConfigError, match="but this run's device is cpu"):
        check_device_keys(kernel, torch.device("cpu"))
    check_device_keys(kernel, torch.device("cuda"))  # resolved to a GPU: nothing to refuse
    given = []
    real = backends_module.PyGBackend.loader

    def loader(self, *args, **kwargs):
        given.append((kwargs["sampler_cuda_graph"], kwargs["sample_group"]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(backends_module.PyGBackend, "loader", loader)
    common = ["epochs=1", "device=cpu", "ibp=false", f"workdir={tmp_path}"]
    result = train(load_config("cora-sage", common), log=None)
    # auto: the loaders' defaults, for torch ops on the CPU
    assert given == [(None, None)] * 2
    assert result.sampler_cuda_graph is False and result.sample_group == 1
    given.clear()
    result = train(load_config("cora-sage", [*common, "sample_group=3"]), log=None)
    assert given == [(None, 3)] * 2 and result.sample_group == 3
    assert result.to_dict()["sample_group"] == 3


def test_sampler_backend_key_defaults_to_the_loaders_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ibp_graph.train.backends as backends_module

    assert TrainConfig(dataset="cora").sampler_backend == "auto"
    assert load_config("cora-sage", ["sampler_backend=torch"]).sampler_backend == "torch"
    path = write(tmp_path / "k.yaml", "dataset: cora\nsampler_backend: kernel\n")
    assert load_config(path).sampler_backend == "kernel"  # explicit values keep working
    given = []
    real = backends_module.PyGBackend.loader

    def loader(self, *args, **kwargs):
        given.append(kwargs["sampler_backend"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(backends_module.PyGBackend, "loader", loader)
    common = ["epochs=1", "device=cpu", "ibp=false", f"workdir={tmp_path}"]
    result = train(load_config("cora-sage", common), log=None)
    assert given == [None, None] and result.sampler_backend == "torch"  # auto: the loaders'
    given.clear()
    result = train(load_config("cora-sage", [*common, "sampler_backend=torch"]), log=None)
    assert given == ["torch", "torch"] and result.sampler_backend == "torch"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--config", "no-such-config"], "no such config file"),
        (["--config", "cora-sage", "--set", "fanout=[10,5]"], "unknown key 'fanout'"),
        (["--config", "cora-sage", "--set", "epochs=abc"], "epochs must be an integer"),
        (["--config", "cora-sage", "--set", "dataset=mnist"], "unknown dataset 'mnist'"),
        (["--set", "epochs=1"], "the following arguments are required: --config"),
    ],
)
def test_cli_bad_configs_are_usage_errors(capsys, args: list[str], needle: str) -> None:
    code, _, err = run_cli(capsys, "train", *args)
    assert code == 2, err
    line = last_error_line(err)
    assert line.startswith("ibp-graph train: error: ") and needle in line


def test_cli_missing_ogb_files_is_a_data_error(capsys, tmp_path: Path) -> None:
    code, out, err = run_cli(
        capsys,
        "train",
        "--config",
        "ogbn-arxiv-sage",
        "--set",
        f"root={tmp_path / 'ogb'}",
        f"workdir={tmp_path}",
        "device=cpu",
    )
    assert code == 1 and out == ""
    line = last_error_line(err)
    assert line.startswith("ibp-graph: error: ogbn-arxiv: ")
    assert "does not exist" in line and "nothing is downloaded" in line

    (tmp_path / "ogb" / "ogbn_arxiv").mkdir(parents=True)  # a folder without OGB's files
    code, _, err = run_cli(
        capsys, "train", "--config", "ogbn-arxiv-sage", "--set", f"root={tmp_path / 'ogb'}"
    )
    assert code == 1 and "RELEASE_v1.txt is missing" in last_error_line(err)


@no_gpu_here
def test_cli_cuda_without_a_gpu_is_a_runtime_error(capsys, tmp_path: Path) -> None:
    code, _, err = run_cli(
        capsys, "train", "--config", "cora-sage", "--set", "device=cuda", f"workdir={tmp_path}"
    )
    assert code == 1
    assert "torch.cuda.is_available() is False" in last_error_line(err)


def test_cli_help_lists_train(capsys) -> None:
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "train" in out
    code, out, _ = run_cli(capsys, "train", "--help")
    assert code == 0 and "--config" in out and "--set" in out and "cora-sage" in out


# --------------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------------


@gpu
@needs_gpu
def test_gpu_training_ibp_on_and_off(tmp_path: Path) -> None:
    common = ["epochs=3", "device=cuda", f"workdir={tmp_path}"]
    on = train(load_config("cora-sage", [*common, "ibp=true"]), log=None)
    off = train(load_config("cora-sage", [*common, "ibp=false"]), log=None)
    assert on.device.startswith("cuda") and off.device.startswith("cuda")
    for a, b in zip(on.epochs, off.epochs, strict=True):
        assert a.rows == b.rows and a.raw_bytes == b.raw_bytes
        assert b.pcie_bytes == b.raw_bytes  # IBP off: the raw rows are copied to the GPU
        assert 0 < a.pcie_bytes < a.raw_bytes
    # Same batches and the same features bit for bit; GPU scatter sums may differ slightly.
    assert on.losses[0] == pytest.approx(off.losses[0], rel=1e-4)
    assert on.final_test_acc > 0.5 and off.final_test_acc > 0.5
    assert "cuda" in on.summary() and ibp_graph.open(on.table.path).shape == (2708, 1433)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only errors")
def test_cli_gpu_only_loader_options_with_device_auto_on_the_cpu_are_usage_errors(
    capsys, tmp_path: Path
) -> None:
    argv = ["train", "--config", "cora-sage", "--set", "epochs=1", "graph_memory=uva"]
    code, out, err = run_cli(capsys, *argv, f"workdir={tmp_path}")
    assert code == 2 and out == "" and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("ibp-graph train: error: graph_memory: uva keeps the graph in pinned")
    assert "this run's device is cpu (device: auto); use graph_memory: device" in last
    assert not list(tmp_path.iterdir())  # nothing loaded or compressed


def test_both_loaders_sample_one_csr_and_nothing_reads_the_dropped_tensors(
    tmp_path: Path, monkeypatch
) -> None:
    from ibp_graph.datasets import load_dataset
    from ibp_graph.graph import CSRGraph
    from ibp_graph.train.backends import PyGBackend

    seen: list[tuple[object, object]] = []
    make = PyGBackend.loader

    def loader(self, graph, *args, **kwargs):
        seen.append((graph, kwargs.get("csr")))
        return make(self, graph, *args, **kwargs)

    monkeypatch.setattr(PyGBackend, "loader", loader)
    for undirected, ibp in ((False, True), (True, False)):
        seen.clear()
        cfg = TrainConfig(
            dataset="cora", epochs=1, fanouts=[5, 5], eval_fanouts=[5, 5], batch_size=70,
            device="cpu", workdir=str(tmp_path), undirected=undirected, ibp=ibp,
        )  # fmt: skip
        result = train(cfg, log=None)
        (train_graph, train_csr), (eval_graph, eval_csr) = seen
        assert train_graph is eval_graph and isinstance(train_csr, CSRGraph)
        assert train_csr is eval_csr  # built (and placed) once for both loaders
        # the loaders sample the CSR: the edge list is dropped, its count kept
        assert train_graph.edge_index.is_meta
        assert train_graph.edge_index.shape == (2, train_csr.num_edges)
        assert result.num_edges == train_csr.num_edges
        assert train_graph.x.is_meta is ibp  # IBP on: the rows come from the table
        edges = load_dataset("cora").edge_index
        want = CSRGraph.from_edge_index(_undirected(edges, 2708) if undirected else edges, 2708)
        assert torch.equal(train_csr.indptr, want.indptr)
        assert torch.equal(train_csr.indices, want.indices)


@pytest.mark.parametrize(("memory", "uva"), [("uva", True), ("device", False)])
def test_data_parallel_uva_pins_the_hosts_graph_in_place(monkeypatch, memory, uva) -> None:
    # Data-parallel with graph_memory: uva, every rank pins the host's one shared CSR in
    # place for its GPU (CSRGraph.uva_in_place), instead of a pinned copy per rank.
    from ibp_graph.distributed import host
    from ibp_graph.train import run

    calls = []
    monkeypatch.setattr(
        host, "share_host_graph", lambda ctx, build, **kw: calls.append((ctx, kw)) or "csr"
    )
    cfg = dataclasses.replace(load_config("cora-sage"), graph_memory=memory)
    ctx = object()
    assert run._shared_csr(get_backend("pyg"), None, cfg, ctx) == "csr"
    assert calls == [(ctx, {"uva": uva})]
