"""benchmarks/upstream_examples.py: the import swap, the synthetic datasets, the harness."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import upstream_examples as ux

PYG_THEIRS, PYG_OURS = ux.SWAPS["pyg"]


@pytest.mark.parametrize("framework", sorted(ux.SWAPS))
def test_the_import_is_swapped_once_and_nothing_else_changes(framework) -> None:
    theirs, ours = ux.SWAPS[framework]
    source = f"import torch\n{theirs}\n\nloader = DataLoader(data)\n"
    out = ux.swap_import(source, framework, "x.py")
    assert out == f"import torch\n{ours}\n\nloader = DataLoader(data)\n"
    for bad, found in (("import torch\n", 0), (f"{theirs}\n{theirs}\n", 2)):
        with pytest.raises(SystemExit, match=f"examples/x.py: expected .* once, found {found}"):
            ux.swap_import(bad, framework, "x.py")


def test_every_example_names_a_known_framework_and_ours_exports_what_they_import() -> None:
    assert {e.framework for e in ux.EXAMPLES} == set(ux.SWAPS)
    for framework, (theirs, ours) in ux.SWAPS.items():
        assert theirs.split()[1] in ("torch_geometric.loader", "dgl.dataloading")
        assert ours.split()[1] == f"ibp_graph.loaders.{framework}"
    # ogbn_train.py reads the dataset where it is written (its default is ./data, which is
    # not there: OGB would then try to download it)
    for e in ux.EXAMPLES:
        if e.script == "ogbn_train.py":
            at = e.args.index("--dataset_dir")
            assert e.args[at + 1 : at + 2] == ("../data",), e.args


def test_the_graph_carries_its_classes() -> None:
    g = ux.learnable_graph(2000, 16, 4, seed=3)
    assert g.x.shape == (2000, 16) and g.x.dtype == np.float32
    assert np.array_equal(g.x * 8, np.round(g.x * 8))  # exact in OGB's CSV
    assert g.edges.shape == (2, 16000) and set(np.unique(g.split)) == {1, 2, 3}
    assert np.array_equal(np.bincount(g.edges[1]), np.full(2000, 8))
    same = (g.y[g.edges[0]] == g.y[g.edges[1]]).mean()
    assert 0.8 < same < 0.9  # 80% drawn within the class, the rest at random (1/4 of it)
    # most nodes are closer to their class's mean than to any other's (chance: 1 in 4)
    means = np.stack([g.x[g.y == c].mean(0) for c in range(4)])
    nearest = ((g.x[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
    assert (nearest == g.y).mean() > 0.6


def test_the_reddit_files_load_through_pygs_reddit(tmp_path) -> None:
    pytest.importorskip("scipy")
    datasets = pytest.importorskip("torch_geometric.datasets")
    g = ux.learnable_graph(300, 8, 3)
    ux.write_reddit_raw(tmp_path / "Reddit" / "raw", g)
    data = datasets.Reddit(str(tmp_path / "Reddit"))[0]  # no download: the raw files are there
    assert torch.equal(data.x, torch.from_numpy(g.x)) and torch.equal(data.y, torch.from_numpy(g.y))
    for mask, code in ((data.train_mask, 1), (data.val_mask, 2), (data.test_mask, 3)):
        assert torch.equal(mask, torch.from_numpy(g.split == code))
    got = set(map(tuple, data.edge_index.t().tolist()))
    assert got == set(map(tuple, g.edges.T.tolist()))  # coalesced: duplicates merged


def test_the_harness_runs_a_checkouts_script_on_our_loader(tmp_path, monkeypatch) -> None:
    pytest.importorskip("scipy")
    pytest.importorskip("torch_geometric")
    examples = tmp_path / "pyg" / "examples"
    examples.mkdir(parents=True)
    (examples / "reddit.py").write_text(
        textwrap.dedent(f"""\
            import os.path as osp
            from torch_geometric.datasets import Reddit
            {PYG_THEIRS}
            path = osp.join(osp.dirname(osp.realpath(__file__)), '..', 'data', 'Reddit')
            data = Reddit(path)[0]
            loader = NeighborLoader(data, [5], input_nodes=data.train_mask, batch_size=64)
            print(NeighborLoader.__module__, len(loader), sum(1 for _ in loader))
            """)
    )
    monkeypatch.setattr(ux, "EXAMPLES", (ux.Example("pyg", "reddit.py"),))
    out = tmp_path / "out"
    argv = ["upstream_examples.py", "--pyg", str(tmp_path / "pyg"), "--nodes", "500"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    ux.main()
    result = json.loads((out / f"{ux.NAME}.json").read_text())
    [run] = result["runs"]
    assert run["status"] == 0 and result["checkouts"]["pyg"]["commit"] is None
    module, batches, seen = run["stdout_tail"][-1].split()
    assert module == "ibp_graph.loaders.pyg" and batches == seen != "0"
    page = (out / f"{ux.NAME}.md").read_text()
    assert f"`{PYG_THEIRS}` -> `{PYG_OURS}`" in page and "| pyg | reddit.py | `-` | - | 0 |" in page
    # A script that fails makes the run fail (exit status 1), after writing its results.
    (examples / "reddit.py").write_text(f"{PYG_THEIRS}\nraise SystemExit(3)\n")
    with pytest.raises(SystemExit) as stop:
        ux.main()
    assert stop.value.code == 1
    assert json.loads((out / f"{ux.NAME}.json").read_text())["runs"][0]["status"] == 3


def test_a_script_without_the_import_stops_before_running(tmp_path, monkeypatch) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "reddit.py").write_text("print('no loader')\n")
    monkeypatch.setattr(ux, "EXAMPLES", (ux.Example("pyg", "reddit.py"),))
    monkeypatch.setattr(sys, "argv", ["x", "--pyg", str(tmp_path), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="examples/reddit.py: expected"):
        ux.main()
    assert not (tmp_path / "o").exists()
    missing = Path(tmp_path / "nowhere")
    monkeypatch.setattr(sys, "argv", ["x", "--pyg", str(missing), "--pyg-rev", "HEAD"])
    with pytest.raises(SystemExit, match="cannot read examples/reddit.py at HEAD"):
        ux.main()


def test_without_a_checkout_it_is_a_usage_error(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["x"])
    with pytest.raises(SystemExit) as stop:
        ux.main()
    assert stop.value.code == 2 and "give --pyg and/or --dgl" in capsys.readouterr().err


def test_the_ogb_layouts_load_through_ogb(tmp_path) -> None:
    pytest.importorskip("ogb.nodeproppred")
    from ibp_graph.datasets import load_dataset

    g = ux.learnable_graph(200, 4, 3)
    for name in ("ogbn-arxiv", "ogbn-products"):
        ux.write_ogbn(tmp_path, name, g)
        ds = load_dataset(name, root=tmp_path)
        assert np.array_equal(ds.x.numpy(), g.x) and np.array_equal(ds.y.numpy(), g.y)
        assert np.array_equal(ds.train_mask.numpy(), g.split == 1)
        assert np.array_equal(ds.test_mask.numpy(), g.split == 3)


def test_a_script_whose_modules_are_missing_is_skipped_not_failed(tmp_path, monkeypatch) -> None:
    (tmp_path / "pyg" / "examples").mkdir(parents=True)
    (tmp_path / "pyg" / "examples" / "a.py").write_text(f"{PYG_THEIRS}\nprint('ran')\n")
    (tmp_path / "pyg" / "examples" / "b.py").write_text(f"{PYG_THEIRS}\nprint('ran')\n")
    examples = (
        ux.Example("pyg", "a.py", needs=("no_such_module_here",)),
        ux.Example("pyg", "b.py", needs=("numpy",)),
    )
    monkeypatch.setattr(ux, "EXAMPLES", examples)
    out = tmp_path / "out"
    ux.main(["--pyg", str(tmp_path / "pyg"), "--nodes", "200", "--out", str(out)])
    skipped, ran = json.loads((out / f"{ux.NAME}.json").read_text())["runs"]
    assert skipped["skipped"] == ["no_such_module_here"] and skipped["status"] is None
    assert ran["status"] == 0 and ran["stdout_tail"] == ["ran"] and "skipped" not in ran
    page = (out / f"{ux.NAME}.md").read_text()
    assert "| skipped: needs no_such_module_here |" in page
    # Nothing ran at all: an error, not a pass.
    monkeypatch.setattr(ux, "EXAMPLES", examples[:1])
    with pytest.raises(SystemExit, match="every script was skipped"):
        ux.main(["--pyg", str(tmp_path / "pyg"), "--nodes", "200", "--out", str(out)])


def test_a_script_for_cuda_devices_is_skipped_without_one_or_without_nccl(monkeypatch) -> None:
    example = ux.Example("pyg", "multi.py", needs=("numpy", "no_such_module_here"), cuda=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ux.missing(example) == ["no_such_module_here", "a CUDA device"]
    assert ux.missing(ux.Example("pyg", "a.py", needs=("numpy",))) == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: False)
    assert ux.missing(example) == ["no_such_module_here", "NCCL"]
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    assert ux.missing(example) == ["no_such_module_here"]
    # the multi-GPU example is one of these: it spawns a process per CUDA device
    (multi,) = [e for e in ux.EXAMPLES if e.script.startswith("multi_gpu/")]
    assert multi.cuda and not any(e.cuda for e in ux.EXAMPLES if e is not multi)


def test_export_writes_the_upstream_scripts_unchanged_for_a_later_run(tmp_path, monkeypatch):
    (tmp_path / "pyg" / "examples").mkdir(parents=True)
    text = f"# upstream\n{PYG_THEIRS}\nprint('ran')\n"
    (tmp_path / "pyg" / "examples" / "a.py").write_text(text)
    monkeypatch.setattr(ux, "EXAMPLES", (ux.Example("pyg", "a.py"),))
    export = tmp_path / "carried"
    ux.main(["--pyg", str(tmp_path / "pyg"), "--export", str(export), "--out", str(tmp_path)])
    assert (export / "pyg" / "examples" / "a.py").read_text() == text  # as upstream has it
    assert not (tmp_path / f"{ux.NAME}.json").exists()  # nothing ran
    ux.main(["--pyg", str(export / "pyg"), "--nodes", "200", "--out", str(tmp_path / "o")])
    assert json.loads((tmp_path / "o" / f"{ux.NAME}.json").read_text())["runs"][0]["status"] == 0
