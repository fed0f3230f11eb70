"""Training with ``backend: dgl``: DGL models on the blocks of ibp-graph's DGL loader.

Skipped as a whole when ``ibp_graph.loaders.dgl`` cannot be imported (DGL, the ``dgl`` extra,
not installed). Everything runs on the CPU with the bundled Cora graph (DGL's PyPI build is
CPU-only). What needs no DGL (the config key, the error without DGL) is in test_train.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

try:
    from ibp_graph.loaders import dgl as dgl_loaders
except ImportError as exc:  # DGL (the 'dgl' extra) not installed, or not importable
    pytest.skip(f"DGL cannot be imported: {exc}", allow_module_level=True)

dgl = dgl_loaders.dgl

from ibp_graph.cli.main import main  # noqa: E402
from ibp_graph.errors import IBPDeviceError, IBPInputError  # noqa: E402
from ibp_graph.train import run as run_module  # noqa: E402
from ibp_graph.train.backends import DGLBackend, get_backend  # noqa: E402
from ibp_graph.train.config import TrainConfig, load_config  # noqa: E402
from ibp_graph.train.models import DGLGAT, DGLGraphSAGE, build_model, dgl_gat  # noqa: E402
from ibp_graph.train.run import train  # noqa: E402


def two_blocks() -> list:
    """Blocks of a 2-hop sample: 6 -> 3 -> 2 nodes; dst node 1 of the last has no in-edge."""
    b0 = dgl.create_block(([3, 4, 5, 0, 1], [0, 1, 2, 2, 0]), num_src_nodes=6, num_dst_nodes=3)
    b1 = dgl.create_block(([2, 0], [0, 0]), num_src_nodes=3, num_dst_nodes=2)
    return [b0, b1]


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kind"), [("sage", DGLGraphSAGE), ("gat", DGLGAT)])
def test_dgl_models_give_the_seeds_logits(name: str, kind: type) -> None:
    cfg = TrainConfig(dataset="cora", model=name, backend="dgl", hidden=16, heads=4, layers=2)
    model = build_model(cfg, 12, 5)
    assert isinstance(model, kind)
    out = model(two_blocks(), torch.randn(6, 12))
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    with pytest.raises(IBPInputError, match="2 layers but got 1 blocks"):
        model(two_blocks()[:1], torch.randn(6, 12))


def test_dgl_models_mirror_the_pyg_hyper_parameters() -> None:
    three = {"layers": 3, "fanouts": [5, 5, 5]}
    cfg = TrainConfig(dataset="cora", model="gat", hidden=64, heads=8, dropout=0.6, **three)
    gat = build_model(cfg, 1433, 7, backend="dgl")
    convs = list(gat.convs)
    assert [c._num_heads for c in convs] == [8, 8, 8]
    assert [c._out_feats for c in convs] == [8, 8, 7]  # hidden // heads, then the classes
    assert all(c.attn_drop.p == 0.6 for c in convs) and gat.dropout.p == 0.6
    sage = build_model(TrainConfig(dataset="cora", hidden=32, **three), 1433, 7, backend="dgl")
    assert [(c._in_src_feats, c._out_feats) for c in sage.convs] == [(1433, 32), (32, 32), (32, 7)]
    assert all(c._aggre_type == "mean" for c in sage.convs)
    with pytest.raises(IBPInputError, match="multiple of heads"):
        dgl_gat(8, 10, 2, heads=4)


def test_dgl_gat_attends_to_each_node_once_itself() -> None:
    gat = build_model(
        TrainConfig(dataset="cora", model="gat", hidden=8, heads=2), 4, 3, backend="dgl"
    )
    block = dgl.create_block(([0, 0, 2], [0, 0, 1]), num_src_nodes=3, num_dst_nodes=2)
    looped = gat._self_loops(block)
    src, dst = looped.edges()
    pairs = sorted(zip(src.tolist(), dst.tolist(), strict=True))
    assert pairs == [(0, 0), (1, 1), (2, 1)]  # the two 0->0 edges became one self-loop


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cora_sage_dgl_reaches_075_within_the_configured_epochs(tmp_path: Path) -> None:
    cfg = load_config("cora-sage-dgl", [f"workdir={tmp_path}", "device=cpu"])
    assert cfg.backend == "dgl"
    result = train(cfg, log=None)
    assert len(result.epochs) == cfg.epochs
    assert result.final_test_acc >= 0.75, result.summary()
    assert result.best_epoch.test_acc >= 0.75, result.summary()
    assert result.num_edges == 10556 and result.eval_mode == "full neighborhood"
    summary = result.summary()
    assert summary.startswith("== ibp-graph train: cora, sage (dgl), IBP on, cpu ==")
    for needle in ("accuracy", "epoch time", "stages", "sample", "fetch", "train", "ratio"):
        assert needle in summary
    last = result.epochs[-1]
    assert last.batches == 5 and last.rows > 140  # 140 training seeds in batches of 32
    assert 0 < last.pcie_bytes < last.raw_bytes
    json.dumps(result.to_dict())  # JSON-ready


def test_dgl_ibp_on_and_off_give_bit_identical_losses_on_cpu(tmp_path: Path) -> None:
    common = ["epochs=3", "device=cpu", f"workdir={tmp_path}"]
    on = train(load_config("cora-sage-dgl", [*common, "ibp=true"]), log=None)
    off = train(load_config("cora-sage-dgl", [*common, "ibp=false"]), log=None)
    again = train(load_config("cora-sage-dgl", [*common, "ibp=true"]), log=None)
    assert len(on.losses) == 3 and all(math.isfinite(v) for v in on.losses)
    assert on.losses == off.losses == again.losses  # exact float equality, epoch by epoch
    for a, b in zip(on.epochs, off.epochs, strict=True):
        assert (a.train_acc, a.val_acc, a.test_acc) == (b.train_acc, b.val_acc, b.test_acc)
        assert a.rows == b.rows and a.raw_bytes == b.raw_bytes > 0
        assert 0 < a.pcie_bytes < a.raw_bytes  # Cora's 0/1 rows compress well
        assert b.pcie_bytes == 0  # IBP off on the CPU: the tensor is already there
    assert on.ratio is not None and on.ratio > 10 and off.ratio is None
    assert on.table is not None and off.table is None
    other = train(load_config("cora-sage-dgl", [*common, "seed=1"]), log=None)
    assert other.losses != on.losses
    # The run leaves the global determinism setting as it found it.
    assert not torch.are_deterministic_algorithms_enabled()


def test_dgl_gat_runs_an_epoch(tmp_path: Path) -> None:
    cfg = load_config("cora-gat", ["backend=dgl", "epochs=1", "device=cpu", f"workdir={tmp_path}"])
    result = train(cfg, log=None)
    (epoch,) = result.epochs
    assert math.isfinite(epoch.loss) and 0.0 <= epoch.test_acc <= 1.0
    assert epoch.val_acc > 1 / 7  # better than chance after one epoch
    assert "gat (dgl)" in result.summary()


# --------------------------------------------------------------------------------------------
# Devices and the CLI
# --------------------------------------------------------------------------------------------


def test_a_gpu_this_dgl_build_cannot_use(monkeypatch) -> None:
    backend = get_backend("dgl")
    assert isinstance(backend, DGLBackend) and backend.supports(torch.device("cpu"))
    if backend.supports(torch.device("cuda")):
        pytest.skip("this DGL build has CUDA")
    monkeypatch.setattr(run_module, "resolve_device", lambda spec: torch.device("cuda"))
    logs: list[str] = []
    assert run_module._backend_device(backend, "auto", logs.append) == torch.device("cpu")
    assert logs and "auto -> cpu" in logs[0]
    with pytest.raises(IBPDeviceError, match="device: cuda but this dgl build cannot train"):
        run_module._backend_device(backend, "cuda", logs.append)


def test_cli_trains_with_dgl(capsys, tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    code = main(
        ["train", "--config", "cora-sage-dgl", "--set", "epochs=1", f"workdir={tmp_path}"]
        + ["--json", str(out_json)]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("== ibp-graph train: cora, sage (dgl), IBP on, cpu ==")
    assert "  backend: dgl\n" in err and "epoch   1/1" in err
    assert json.loads(out_json.read_text())["config"]["backend"] == "dgl"
