"""The loader base: a torch DataLoader, worker processes, per-batch seeds, DDP shares, warnings.

A framework-free subclass (`TinyLoader`) exercises `ibp_graph.loading.BaseNodeLoader`
directly; its batches are dictionaries of the sampled tensors plus the id of the process that
prepared them.
"""

from __future__ import annotations

import os
import pickle
import re
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.utils.data
from conftest import homophilous_graph

from ibp_graph import loading
from ibp_graph.errors import IBPInputError
from ibp_graph.graph import CSRGraph
from ibp_graph.loading import ArgumentIgnoredWarning, BaseNodeLoader, input_nodes
from ibp_graph.sampler import NeighborSampler
from ibp_graph.workers import BatchTask, SeedPositions, WorkerResult

N = 400


class TinyLoader(BaseNodeLoader):
    """The smallest loader: batches are the sampled tensors, as a dict."""

    def __init__(
        self,
        graph: CSRGraph,
        num_neighbors: list[int],
        seeds=None,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        prefetch: int = 2,
        seed: int | None = None,
        use_ddp: bool = False,
        ddp_seed: int = 0,
        device: str = "cpu",
        prefetch_thread: bool | None = None,
        **kwargs,
    ) -> None:
        self._set_loop_args(
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
            prefetch=prefetch,
            seed=seed,
            progress=False,
            use_ddp=use_ddp,
            ddp_seed=ddp_seed,
            loader_kwargs=kwargs,
            prefetch_thread=prefetch_thread,
        )
        self.input_nodes, self._input_id = input_nodes(seeds, graph.num_nodes)
        self.device = torch.device(device)
        self._start_pipeline(NeighborSampler(graph, num_neighbors, seed=self.seed))

    def _fetch(self, sampled, stream):
        n = sampled.node.numel()
        self.stats.add_fetch(n, 4 * n, 8 * n)
        return {
            "node": sampled.node,
            "edge": sampled.edge,
            "input_id": sampled.input_id,
            "pid": os.getpid(),
        }


@pytest.fixture(scope="module")
def graph() -> CSRGraph:
    _, _, src, dst, _ = homophilous_graph(7, N, 4000, 8, 4)
    return CSRGraph.from_edge_index(torch.stack([src, dst]), num_nodes=N)


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Every one-time warning shows again in this test."""
    monkeypatch.setattr(loading, "_WARNED", set())


def batches(loader) -> list[dict]:
    return list(loader)


def same(a: list[dict], b: list[dict]) -> bool:
    keys = ("node", "edge", "input_id")
    return len(a) == len(b) and all(
        torch.equal(x[k], y[k]) for x, y in zip(a, b, strict=True) for k in keys
    )


# --------------------------------------------------------------------------------------------
# A torch DataLoader
# --------------------------------------------------------------------------------------------


def test_loader_is_a_torch_dataloader_with_pygs_dataset_and_collate_fn(graph) -> None:
    seeds = torch.arange(10, 60)
    loader = TinyLoader(graph, [3, 2], seeds, batch_size=16, seed=0)
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert isinstance(loader.dataset, SeedPositions)
    assert loader.dataset == range(50) and len(loader.dataset) == 50
    assert list(loader.dataset)[:3] == [0, 1, 2] and loader.dataset[-1] == 49
    assert loader.batch_size == 16 and loader.drop_last is False and len(loader) == 4
    out = loader.collate_fn([4, 0, 7])
    assert out["node"][:3].tolist() == [14, 10, 17]
    assert out["input_id"].tolist() == [4, 0, 7]
    with pytest.raises(IBPInputError, match="index gave position 50, the loader has 50 seed"):
        loader.collate_fn([50])
    # torch forbids changing these after construction, as for any DataLoader
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        loader.batch_size = 3


def test_the_loader_names_its_sampler_backend(graph) -> None:
    loader = TinyLoader(graph, [3], batch_size=16, seed=0)
    assert loader.sampler_backend == loader.node_sampler.backend == "torch"


def test_default_sampler_backend_follows_the_graphs_device_and_cupy(monkeypatch) -> None:
    from ibp_graph.kernels import runtime

    def no_cupy():
        raise ImportError("the GPU path needs CuPy")

    for cupy in (lambda: object(), no_cupy):  # whether CuPy imports or not
        monkeypatch.setattr(runtime, "cupy", cupy)
        assert loading.default_sampler_backend("cpu") == "torch"
        assert loading.default_sampler_backend(torch.device("cpu")) == "torch"
    # A CUDA device value needs no GPU to be asked about.
    for device in ("cuda", "cuda:1", torch.device("cuda"), torch.device("cuda", 0)):
        monkeypatch.setattr(runtime, "cupy", lambda: object())
        assert loading.default_sampler_backend(device) == "kernel"
        monkeypatch.setattr(runtime, "cupy", no_cupy)
        assert loading.default_sampler_backend(device) == "torch"


def test_unknown_keyword_is_a_type_error_and_torch_rules_hold(graph) -> None:
    with pytest.raises(
        TypeError, match="TinyLoader\\(\\) got an unexpected keyword argument 'bogus'"
    ):
        TinyLoader(graph, [2], bogus=1)
    with pytest.raises(ValueError, match="persistent_workers option needs num_workers > 0"):
        TinyLoader(graph, [2], persistent_workers=True)
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        TinyLoader(graph, [2], shuffle=True, sampler=range(3))
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        TinyLoader(graph, [2], batch_size=4, batch_sampler=[[0, 1]])


def test_dataset_and_collate_fn_are_replaced_with_a_warning(graph, fresh_warnings) -> None:
    with pytest.warns(ArgumentIgnoredWarning) as rec:
        loader = TinyLoader(graph, [2], torch.arange(5), dataset=[1, 2], collate_fn=len)
    assert [str(w.message).split(":")[0] for w in rec] == ["dataset", "collate_fn"]
    assert "the loader has its own (the positions of its seed nodes)" in str(rec[0].message)
    assert rec[0].filename == __file__  # the warning names the user's line
    assert loader.dataset == range(5) and len(batches(loader)) == 5


def test_sampler_and_batch_sampler_give_the_positions(graph) -> None:
    seeds = torch.arange(100, 120)
    loader = TinyLoader(graph, [2], seeds, batch_size=3, sampler=[5, 1, 19, 0], seed=0)
    got = [b["input_id"].tolist() for b in loader]
    assert got == [[5, 1, 19], [0]] and len(loader) == 2
    loader = TinyLoader(graph, [2], seeds, batch_sampler=[[2, 3], [9]], seed=0)
    got = [b["node"][: len(b["input_id"])].tolist() for b in loader]
    assert got == [[102, 103], [109]] and len(loader) == 2
    with pytest.raises(IBPInputError, match="sampler gave position 20, the loader has 20"):
        list(TinyLoader(graph, [2], seeds, sampler=[20]))


def test_seed_none_draws_from_the_generator(graph) -> None:
    a = TinyLoader(graph, [2], generator=torch.Generator().manual_seed(3))
    b = TinyLoader(graph, [2], generator=torch.Generator().manual_seed(3))
    c = TinyLoader(graph, [2], generator=torch.Generator().manual_seed(4))
    assert a.seed == b.seed != c.seed


def test_set_epoch_replays_an_epoch(graph) -> None:
    loader = TinyLoader(graph, [4, 3], batch_size=64, shuffle=True, seed=1)
    first, second = batches(loader), batches(loader)
    assert not same(first, second)
    loader.set_epoch(0)
    assert same(batches(loader), first)
    with pytest.raises(IBPInputError, match="epoch must be an int >= 0"):
        loader.set_epoch(-1)


# --------------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": 1},
        {"num_workers": 2},
        {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 3},
        {"num_workers": 2, "timeout": 60, "pin_memory": False},
    ],
    ids=["1", "2", "persistent", "timeout"],
)
def test_workers_give_the_batches_of_the_loading_process(graph, kwargs) -> None:
    args = ([5, 5], torch.arange(0, N, 2))
    ref = TinyLoader(graph, *args, batch_size=32, shuffle=True, seed=9)
    loader = TinyLoader(graph, *args, batch_size=32, shuffle=True, seed=9, **kwargs)
    for _ in range(2):  # persistent workers keep going into the next epoch
        want, got = batches(ref), batches(loader)
        assert same(want, got)
        assert {b["pid"] for b in want} == {os.getpid()}
        assert os.getpid() not in {b["pid"] for b in got}  # prepared in other processes
        assert loader.stats.batches == len(got) == len(loader)
        assert loader.stats.rows == ref.stats.rows > 0
        assert loader.stats.decoded_bytes == ref.stats.decoded_bytes
        assert loader.stats.sample_s > 0 and loader.stats.fetch_s > 0


def test_workers_out_of_order_still_give_each_batch_its_own_draws(graph) -> None:
    ref = batches(TinyLoader(graph, [6, 4], batch_size=20, seed=2))
    got = batches(TinyLoader(graph, [6, 4], batch_size=20, seed=2, num_workers=2, in_order=False))
    key = lambda b: int(b["input_id"][0])  # noqa: E731
    assert same(sorted(ref, key=key), sorted(got, key=key))


def _init_worker(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert info is not None and info.id == worker_id
    os.environ["IBP_TEST_WORKER"] = str(worker_id)


class PidLoader(TinyLoader):
    def _fetch(self, sampled, stream):
        out = super()._fetch(sampled, stream)
        out["worker"] = os.environ.get("IBP_TEST_WORKER")
        return out


def test_worker_init_fn_runs_in_every_worker(graph) -> None:
    loader = PidLoader(graph, [2], batch_size=50, num_workers=2, worker_init_fn=_init_worker)
    assert {b["worker"] for b in loader} == {"0", "1"}


def test_features_joined_in_the_loading_process_when_asked(graph) -> None:
    class MainJoin(TinyLoader):
        _fetch_in_worker = False

    ref = batches(TinyLoader(graph, [3, 3], batch_size=40, seed=4))
    loader = MainJoin(graph, [3, 3], batch_size=40, seed=4, num_workers=2)
    got = batches(loader)
    assert same(ref, got) and {b["pid"] for b in got} == {os.getpid()}
    assert loader.stats.rows == sum(b["node"].numel() for b in got)


def test_a_worker_task_round_trips_through_pickle(graph) -> None:
    loader = TinyLoader(graph, [3, 2], batch_size=8, seed=6, num_workers=1)
    copy = pickle.loads(pickle.dumps(loader))
    task = BatchTask(epoch=0, index=1, positions=torch.arange(8, 16).numpy())
    a, b = loader.collate_fn(task), copy.collate_fn(task)
    assert isinstance(a, WorkerResult) and a.fetched
    assert torch.equal(a.batch["node"], b.batch["node"])
    assert torch.equal(
        a.batch["node"], batches(TinyLoader(graph, [3, 2], batch_size=8, seed=6))[1]["node"]
    )
    assert a.counts["rows"] == a.batch["node"].numel()
    assert loader.dataset.__getitems__(task) is task


def test_no_workers_on_a_gpu_device_is_a_one_time_warning(graph, fresh_warnings) -> None:
    # A device that is not the CPU takes the same branch as a GPU (nothing is iterated here).
    with pytest.warns(ArgumentIgnoredWarning) as rec:
        loader = TinyLoader(graph, [2], device="meta", num_workers=6, persistent_workers=True)
        TinyLoader(graph, [2], device="meta", num_workers=6, persistent_workers=True)
    msgs = [str(w.message) for w in rec]
    assert msgs == ["num_workers=6: workers are not used: sampling and fetching run on the GPU"]
    assert rec[0].filename == __file__
    assert loader.num_workers == 6 and not loader._use_workers


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_pin_memory_without_a_gpu_warns_and_runs(graph, fresh_warnings) -> None:
    with pytest.warns(ArgumentIgnoredWarning, match="pin_memory=True: no GPU is usable"):
        loader = TinyLoader(graph, [2], torch.arange(4), pin_memory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ArgumentIgnoredWarning)
        TinyLoader(graph, [2], torch.arange(4), pin_memory=True)  # once per process
    assert len(batches(loader)) == 4


# --------------------------------------------------------------------------------------------
# use_ddp
# --------------------------------------------------------------------------------------------


def fake_world(monkeypatch, rank: int, world: int) -> None:
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: rank)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: world)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_ddp_ranks_share_the_seeds(graph, monkeypatch, shuffle, drop_last) -> None:
    seeds, world, bs = torch.arange(3, 3 + 103), 4, 10
    per_rank = []
    for rank in range(world):
        fake_world(monkeypatch, rank, world)
        loader = TinyLoader(
            graph,
            [2],
            seeds,
            batch_size=bs,
            shuffle=shuffle,
            drop_last=drop_last,
            use_ddp=True,
            ddp_seed=11,
            seed=rank,  # per-rank seeds: the order stays shared
        )
        got = [b["input_id"] for b in loader]
        assert len(got) == len(loader)
        per_rank.append(torch.cat(got) if got else torch.empty(0, dtype=torch.long))
    share = 103 // world if drop_last else -(-103 // world)
    want_len = (share // bs) * bs if drop_last else share
    assert all(p.numel() == want_len for p in per_rank)
    together = torch.cat(per_rank)
    if drop_last:
        assert together.unique().numel() == together.numel()  # disjoint
    else:
        assert set(together.tolist()) == set(range(103))  # everything, a few twice
        assert together.numel() - together.unique().numel() == share * world - 103
    ordered = torch.stack([p[:8] for p in per_rank], 1).reshape(-1)
    if not shuffle:
        assert ordered.tolist() == list(range(32))  # rank r takes every world-th position


def test_ddp_needs_torch_distributed(graph) -> None:
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialised")
    with pytest.raises(
        IBPInputError, match=re.escape("call torch.distributed.init_process_group()")
    ):
        TinyLoader(graph, [2], use_ddp=True)


@pytest.fixture
def gloo_world_of_one(tmp_path):
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed is unavailable or already initialised")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_world_of_one_is_the_plain_loader(graph, gloo_world_of_one) -> None:
    kw = {"batch_size": 50, "shuffle": True, "seed": 5}
    plain = TinyLoader(graph, [4, 4], **kw)
    ddp = TinyLoader(graph, [4, 4], use_ddp=True, ddp_seed=5, **kw)
    assert len(ddp) == len(plain) == 8
    assert same(batches(plain), batches(ddp))


@pytest.mark.slow
def test_spawned_workers_get_the_loader_by_pickle(graph) -> None:
    kw = {"batch_size": 100, "shuffle": True, "seed": 12}
    ref = batches(TinyLoader(graph, [3, 3], **kw))
    loader = TinyLoader(graph, [3, 3], num_workers=1, multiprocessing_context="spawn", **kw)
    got = batches(loader)
    assert same(ref, got) and os.getpid() not in {b["pid"] for b in got}
