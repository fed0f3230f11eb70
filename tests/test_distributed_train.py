"""Data-parallel training on gloo with several processes on this host (and two "hosts").

Each test starts real ranks: through torch's launcher (``torchrun``, ``ibp-graph train
--nproc-per-node``) or, to see what a rank does by itself when a peer dies, as plain
processes with the launcher's environment. Ranks write what they saw to ``rank-N.json``
(tests/distributed_worker.py).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph.distributed import shm
from ibp_graph.distributed.ddp import PEER_EXIT
from ibp_graph.errors import IBPInputError

pytest.importorskip("torch_geometric")
pytestmark = [
    pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="no /dev/shm on this system"),
    pytest.mark.skipif(
        not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
        reason="torch.distributed with gloo is not available",
    ),
]

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(Path(__file__).with_name("distributed_worker.py"))
#: A tiny run: Cora, one epoch, small fanouts and batches.
TINY = ["epochs=1", "fanouts=[5,5]", "eval_fanouts=[5,5]", "batch_size=35", "device=cpu"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(run_id: str, **extra: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(IBP_GRAPH_RUN_ID=run_id, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _leftovers(run_id: str) -> list[str]:
    return sorted(p.name for p in shm.SHM_DIR.glob(f"ibp-graph-{run_id}-*"))


def _ranks(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(world)]


def _torchrun(nproc: int, *args: str, env: dict[str, str], timeout: float = 120):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={nproc}", "--max-restarts=0", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


# -- the seeds and features of every rank ---------------------------------------------------------
@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> dict[str, tuple[Path, Path, int]]:
    """Cora and a synthetic graph: (table file, graph file, training nodes) of each."""
    from ibp_graph.datasets import load_dataset

    folder = tmp_path_factory.mktemp("dist")
    cora = load_dataset("cora")
    gen = torch.Generator().manual_seed(5)
    n = 3000
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, 700)).astype(np.float32)  # 8.4 MB, does not compress
    synthetic = {
        "x": x,
        "edge_index": torch.randint(0, n, (2, 20_000), generator=gen),
        "num_nodes": n,
        "train": torch.randperm(n, generator=gen)[:1001],
    }
    out = {}
    for name, x, edge_index, num_nodes, train in (
        ("cora", cora.x, cora.edge_index, cora.num_nodes, cora.train_mask.nonzero().view(-1)),
        ("synthetic", *(synthetic[k] for k in ("x", "edge_index", "num_nodes", "train"))),
    ):
        table = folder / f"{name}.ibp"
        ibp_graph.compress(x, table, seed=0).close()
        graph = folder / f"{name}.pt"
        torch.save({"edge_index": edge_index, "num_nodes": num_nodes, "train": train}, graph)
        out[name] = (table, graph, int(train.numel()))
    return out


@pytest.mark.slow
def test_ranks_split_the_seeds_share_one_table_and_get_identical_features(graphs, tmp_path) -> None:
    # One launch of three ranks runs the loader over Cora, then over the synthetic graph.
    world, names = 3, ["cora", "synthetic"]
    run_id = f"t{secrets.token_hex(3)}"
    paths = [str(p) for name in names for p in graphs[name][:2]]
    proc = _torchrun(world, WORKER, "loader", str(tmp_path), *paths, env=_env(run_id))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = _ranks(tmp_path, world)
    for i, name in enumerate(names):
        _, graph, num_train = graphs[name]
        _check_shares([r["graphs"][i] for r in ranks], graph, num_train, name)
    assert _leftovers(run_id) == []


def _check_shares(ranks: list[dict], graph: Path, num_train: int, name: str) -> None:
    """What `test_ranks_split_the_seeds_share_one_table_and_get_identical_features` asserts
    of the ranks' reports over one graph."""
    world = len(ranks)
    train = torch.load(graph)["train"].tolist()
    for epoch in range(2):
        shares = [r["epochs"][epoch]["seeds"] for r in ranks]
        batches = {r["epochs"][epoch]["batches"] for r in ranks}
        assert len(batches) == 1, f"{name}, epoch {epoch}: unequal batch counts {batches}"
        per_rank = -(-num_train // world)  # DistributedSampler: padded to equal shares
        assert all(len(s) == per_rank for s in shares), name
        everything = [v for s in shares for v in s]
        assert set(everything) == set(train), f"{name}: the shares miss training nodes"
        padding = world * per_rank - num_train
        assert len(everything) - len(set(everything)) == padding, f"{name}: shares overlap"
    # Shuffled anew every epoch, and reproducible: the same order on every rank.
    assert ranks[0]["epochs"][0]["seeds"] != ranks[0]["epochs"][1]["seeds"], name
    assert all(r["features_identical"] for r in ranks), name
    # One table per host: every rank maps all of the segment, and their proportional
    # shares (PSS) add up to one copy, not `world` copies.
    assert len({r["segment"] for r in ranks}) == 1, name
    size = ranks[0]["segment_bytes"]
    rss = [r["memory"]["rss"] for r in ranks]
    pss = sum(r["memory"]["pss"] for r in ranks)
    assert all(v >= 0.95 * size for v in rss), (name, rss, size)
    assert 0.95 * size <= pss <= 1.05 * size, (name, pss, size)
    # The CSR graph too: one copy per host, whatever each rank read of it (and the graph
    # before it unmapped: its shares would count here too). Each rank's share is in whole
    # KiB, rounded down.
    csr_bytes = ranks[0]["graph_csr_bytes"]
    graph_pss = sum(r["graph_memory"]["pss"] for r in ranks)
    assert csr_bytes - 1024 * world <= graph_pss <= csr_bytes + 8192, (name, graph_pss, csr_bytes)


@pytest.mark.slow
def test_only_local_rank_0_loads_the_dataset_the_others_attach(tmp_path) -> None:
    # One launch shares Cora three times, leaving out nothing, x, then x and edge_index.
    sets = [(), ("x",), ("x", "edge_index")]
    run_id = f"t{secrets.token_hex(3)}"
    extra = ["--omit-sets", *(",".join(omit) or "-" for omit in sets)]
    proc = _torchrun(2, WORKER, "dataset", str(tmp_path), *extra, env=_env(run_id))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = _ranks(tmp_path, 2)
    for i, omit in enumerate(sets):
        first, other = (r["variants"][i] for r in ranks)
        assert first["omit"] == other["omit"] == list(omit)
        assert [first["loaded"], other["loaded"]] == [1, 0], omit
        for r in (first, other):
            assert r["scalars_equal"] and r["repr_equal"], omit
            assert all(t["same_shape"] for t in r["tensors"].values()), omit
        # Local rank 0 keeps what it loaded of the omitted tensors (to compress the rows,
        # build the graph); the other ranks get them as meta tensors, and views of the segment
        # for the rest.
        for name, t in first["tensors"].items():
            assert not t["meta"] and t["equal"], (omit, name)
        for name, t in other["tensors"].items():
            assert t["meta"] is (name in omit), (omit, name)
            assert t["equal"] is (None if name in omit else True), (omit, name)
        # One copy per host: the two ranks' proportional shares add up to one dataset (and
        # the sets before it are unmapped: their shares would count here too).
        stored = sum(t["bytes"] for name, t in first["tensors"].items() if name not in omit)
        pss = first["memory"]["pss"] + other["memory"]["pss"]
        assert stored <= pss <= stored + 4 * 8192, (omit, pss, stored)
    assert _leftovers(run_id) == []


# -- training ---------------------------------------------------------------------------------
def test_world_size_one_reproduces_the_single_process_losses(tmp_path, monkeypatch) -> None:
    from ibp_graph.train.config import load_config
    from ibp_graph.train.run import train

    cfg = load_config("cora-sage", [*TINY, "epochs=2", f"workdir={tmp_path}"])
    single = train(cfg, log=None)
    run_id = f"t{secrets.token_hex(3)}"
    for key, value in _env(
        run_id,
        RANK=0,
        WORLD_SIZE=1,
        LOCAL_RANK=0,
        LOCAL_WORLD_SIZE=1,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=_free_port(),
    ).items():
        monkeypatch.setenv(key, value)
    one = train(cfg, log=None)
    assert one.world_size == 1 and one.distributed is not None
    assert one.losses == single.losses
    assert [e.val_acc for e in one.epochs] == [e.val_acc for e in single.epochs]
    assert "world size 1" in one.summary().splitlines()[0]
    assert not torch.distributed.is_initialized()  # the group it created is gone
    assert _leftovers(run_id) == []


@pytest.mark.slow
def test_cli_trains_two_ranks_with_identical_replicas(tmp_path) -> None:
    run_id = f"t{secrets.token_hex(3)}"
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "ibp_graph", "train", "--config", "cora-sage"]
    cmd += ["--nproc-per-node", "2", "--json", str(out), "--set", *TINY, f"workdir={tmp_path}"]
    proc = subprocess.run(
        cmd, env=_env(run_id), capture_output=True, text=True, timeout=180, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Only rank 0 prints the summary, and it names the world size.
    assert proc.stdout.count("== ibp-graph train:") == 1
    assert proc.stdout.startswith("== ibp-graph train: cora, sage, IBP on, cpu, world size 2 ==")
    assert "replicas identical" in proc.stdout
    assert proc.stderr.count("epoch   1/1") == 1
    result = json.loads(out.read_text())
    digests = result["distributed"]["param_digests"]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert result["world_size"] == 2 and result["distributed"]["nodes"] == 1
    # One segment per host, the same on both ranks.
    names = [f"ibp-graph-{run_id}-node0-{what}" for what in ("rows", "dataset", "graph")]
    assert [sorted(s) for s in result["distributed"]["segments"]] == [sorted(names)] * 2
    # Loader stats are summed over ranks: the batches of both shares.
    assert result["epochs"][0]["batches"] == 2 * -(-70 // 35)
    assert _leftovers(run_id) == []


def _plain_ranks(world: int, out: Path, run_id: str, *args: str) -> list[subprocess.Popen]:
    """``world`` ranks started without torch's agent (nobody stops the others for them)."""
    port = _free_port()
    procs = []
    for rank in range(world):
        env = _env(
            run_id,
            RANK=rank,
            WORLD_SIZE=world,
            LOCAL_RANK=rank,
            LOCAL_WORLD_SIZE=world,
            GROUP_RANK=0,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, "train", str(out), *args],
                env=env,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


@pytest.mark.slow
@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failed_rank_stops_the_others_with_a_clear_error(tmp_path, how) -> None:
    run_id = f"t{secrets.token_hex(3)}"
    timeout = 20
    overrides = [*TINY, f"workdir={tmp_path}", f"dist_timeout={timeout}"]
    procs = _plain_ranks(2, tmp_path, run_id, "--fail", how, "--set", *overrides)
    start = time.monotonic()
    codes = [p.wait(timeout=120) for p in procs]
    waited = time.monotonic() - start
    errors = [p.stderr.read() for p in procs]
    assert codes[0] == 1, errors[0][-2000:]
    assert codes[1] == (-9 if how == "kill" else 1)
    rank0 = json.loads((tmp_path / "rank-0.json").read_text())
    assert rank0["type"] == "PeerFailed", rank0  # a DistributedError
    assert rank0["error"].startswith("rank 0 of 2: another rank failed")
    assert waited < 100, f"rank 0 took {waited:.0f} s to stop"
    assert _leftovers(run_id) == []


def _context():
    from ibp_graph.distributed.ddp import DistContext

    return DistContext(0, 2, 0, 2, 0, "gloo", torch.device("cpu"), "r", 20.0, owns_group=False)


class _Model:
    """Stands for a DDP model, whose reducer holds the process group."""


def test_what_holds_the_group_outlives_a_failed_collective_until_exit() -> None:
    import gc
    import weakref

    from ibp_graph.distributed import ddp

    ctx, model = _context(), _Model()
    ctx.hold(model)
    alive = weakref.ref(model)
    with pytest.raises(ddp.DistributedError, match="rank 0 of 2: another rank failed"):
        with ctx.guard():
            raise RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer")
    assert ctx.failed
    ctx.close()
    del model
    gc.collect()
    # Freeing the group right after the failure can deadlock with gloo's worker thread.
    assert alive() is not None and alive() in ddp._KEPT_AFTER_FAILURE
    ddp._KEPT_AFTER_FAILURE.remove(alive())
    # Without a failure, close lets it go.
    ctx, model = _context(), _Model()
    ctx.hold(model)
    alive = weakref.ref(model)
    with ctx.guard():
        pass
    ctx.close()
    del model
    gc.collect()
    assert alive() is None and not ctx.failed


@pytest.mark.slow
def test_two_hosts_on_loopback_train_together_each_with_its_own_segment(tmp_path) -> None:
    run_id = f"t{secrets.token_hex(3)}"
    port = _free_port()
    procs = []
    for node in (0, 1):
        out = tmp_path / f"node{node}.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1"]
        cmd += [f"--node-rank={node}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"]
        cmd += [f"--rdzv-conf=is_host={int(node == 0)}", "--max-restarts=0", "--rdzv-id=two"]
        cmd += ["-m", "ibp_graph", "train", "--config", "cora-sage", "--json", str(out)]
        cmd += ["--set", *TINY, f"workdir={tmp_path / f'work{node}'}"]
        procs.append(
            subprocess.Popen(
                cmd,
                env=_env(run_id),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = [p.communicate(timeout=180) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err[-3000:]
    # The global rank 0 prints and writes; the other host stays quiet.
    printed = [out for out, _ in results if "== ibp-graph train:" in out]
    assert len(printed) == 1 and "world size 2" in printed[0]
    written = [tmp_path / f"node{n}.json" for n in (0, 1) if (tmp_path / f"node{n}.json").exists()]
    assert len(written) == 1
    result = json.loads(written[0].read_text())
    assert result["distributed"]["nodes"] == 2 and result["distributed"]["ranks_per_node"] == 1
    segments = sorted(s for per_rank in result["distributed"]["segments"] for s in per_rank)
    assert segments == sorted(
        f"ibp-graph-{run_id}-node{n}-{what}"
        for n in (0, 1)
        for what in ("rows", "dataset", "graph")
    )
    digests = result["distributed"]["param_digests"]
    assert digests[0] == digests[1]
    assert _leftovers(run_id) == []


# -- the launcher's command line ----------------------------------------------------------------
def test_nproc_per_node_usage_errors_start_nothing(monkeypatch, capsys) -> None:
    from ibp_graph.cli.main import main

    assert main(["train", "--config", "cora-sage", "--nproc-per-node", "0"]) == 2
    assert "--nproc-per-node: must be an integer >= 1, got '0'" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train", "--config", "cora-sage", "--nproc-per-node", "2"]) == 2
    assert "under torchrun, leave it out" in capsys.readouterr().err
    monkeypatch.delenv("WORLD_SIZE")
    # A bad config is reported before any rank starts.
    assert main(["train", "--config", "cora-sage", "--nproc-per-node", "2", "--set", "x=1"]) == 2
    assert "unknown key 'x'" in capsys.readouterr().err
    # So is a backend the ranks could not use (ranks check it too, under torchrun).
    nccl = ["--set", "dist_backend=nccl", "device=cpu"]
    assert main(["train", "--config", "cora-sage", "--nproc-per-node", "2", *nccl]) == 2
    assert "dist_backend: nccl connects GPUs, and this run trains on cpu" in (
        capsys.readouterr().err
    )
    from ibp_graph.distributed.ddp import check_backend

    check_backend("gloo", torch.device("cpu"))  # no error
    with pytest.raises(IBPInputError, match="nccl connects GPUs"):
        check_backend("nccl", torch.device("cpu"))


@pytest.mark.slow
def test_launcher_reports_a_failed_rank_in_one_line(tmp_path) -> None:
    run_id = f"t{secrets.token_hex(3)}"
    cmd = [sys.executable, "-m", "ibp_graph", "train", "--config", "ogbn-arxiv-sage"]
    cmd += ["--nproc-per-node", "2", "--set", f"root={tmp_path / 'missing'}", "device=cpu"]
    proc = subprocess.run(
        cmd, env=_env(run_id), capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ibp-graph: error: rank ")
    assert last.endswith(" of 2 failed (exit code 1; its error is above)")
    # above it, the failed rank's own line, naming it (ranks share stderr: torch's own log
    # lines may come in between)
    blamed = last.removeprefix("ibp-graph: error: ").split(" failed")[0]
    assert f"ibp-graph: error: {blamed}: ogbn-arxiv: " in proc.stderr, proc.stderr
    assert proc.stdout == ""
    assert _leftovers(run_id) == []


def _failure(exitcode: int, timestamp: int):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    failure = ProcessFailure(0, 1, exitcode, "/nonexistent")
    failure.timestamp = timestamp
    return failure


@pytest.mark.parametrize(
    ("failures", "blamed"),
    [
        # rank 0 saw rank 1 fail and stopped first, in the same second: rank 1 is named
        ({0: (PEER_EXIT, 5), 1: (1, 5)}, "rank 1 of 2 failed (exit code 1; its error is above)"),
        ({0: (PEER_EXIT, 5), 1: (-9, 6)}, "rank 1 of 2 failed (killed by SIGKILL)"),
        ({0: (1, 6), 1: (1, 5)}, "rank 1 of 2 failed (exit code 1; its error is above)"),
        # every rank timed out: the first of them
        (
            {0: (PEER_EXIT, 5), 1: (PEER_EXIT, 5)},
            "rank 0 of 2 failed (exit code 3; its error is above)",
        ),
    ],
)
def test_the_launcher_names_the_rank_that_failed_first_of_its_own_accord(
    monkeypatch, capsys, failures, blamed
) -> None:
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from ibp_graph.cli.main import main

    def run(config):
        raise ChildFailedError("ibp_graph", {r: _failure(*f) for r, f in failures.items()})

    monkeypatch.setattr(torch_run, "run", run)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["train", "--config", "cora-sage", "--nproc-per-node", "2"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == f"ibp-graph: error: {blamed}"


@pytest.mark.parametrize(
    ("signum", "code", "said"), [(2, 130, "interrupted"), (15, 143, "terminated")]
)
def test_ctrl_c_or_sigterm_to_the_launcher_is_one_line(monkeypatch, capsys, signum, code, said):
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from ibp_graph.cli.main import main

    def run(config):
        raise SignalException(f"Process 1 got signal: {signum}", sigval=signal.Signals(signum))

    monkeypatch.setattr(torch_run, "run", run)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["train", "--config", "cora-sage", "--nproc-per-node", "2"]) == code
    assert capsys.readouterr().err == f"ibp-graph: {said}\n"


def test_a_ranks_own_error_line_names_it(monkeypatch, capsys) -> None:
    from ibp_graph.cli.main import main

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["inspect", "/nonexistent/x.ibp"]) == 1
    assert capsys.readouterr().err.startswith("ibp-graph: error: rank 1 of 2: /nonexistent/x.ibp")


def test_too_small_dev_shm_stops_a_run_with_one_line(tmp_path, monkeypatch, capsys) -> None:
    from ibp_graph.cli.main import main

    run_id = f"t{secrets.token_hex(3)}"
    env = _env(run_id, RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(shm, "shm_available", lambda shm_dir=shm.SHM_DIR: 4096)
    argv = ["train", "--config", "cora-sage", "--set", *TINY, f"workdir={tmp_path}"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ibp-graph: error: /dev/shm: the shared")
    assert "only 0.00 GiB (4096 bytes) is available" in err and "--shm-size" in err
    assert not torch.distributed.is_initialized()
    assert _leftovers(run_id) == []
