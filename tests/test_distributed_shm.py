"""Shared-memory segments, the shared table, graph and dataset, and pinning caller-owned memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from cuda_runtime_stub import CudaRuntimeStub

import ibp_graph
from ibp_graph.datasets import GraphDataset, load_dataset
from ibp_graph.distributed import shm
from ibp_graph.distributed.shared_dataset import (
    attach_dataset,
    dataset_segment_size,
    share_dataset,
)
from ibp_graph.distributed.shared_graph import attach_graph, graph_segment_size, share_graph
from ibp_graph.distributed.shared_table import SharedIBPTable, fill_rows, segment_size
from ibp_graph.distributed.shm import SharedMemoryError, SharedSegment
from ibp_graph.graph import CSRGraph
from ibp_graph.pinned import TAIL_PAD, PinnedBuffer

pytestmark = pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="no /dev/shm on this system")


@pytest.fixture
def seg_name(request) -> str:
    name = f"ibp-graph-test-{request.node.name[:40]}-{time.monotonic_ns()}"
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    yield name
    (shm.SHM_DIR / name).unlink(missing_ok=True)


def _gone(path: Path, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not path.exists():
            return True
        time.sleep(0.05)
    return not path.exists()


def test_attach_sees_the_creators_bytes_and_unlink_keeps_mappings(seg_name) -> None:
    seg = SharedSegment.create(seg_name, 10_000)
    assert seg.owner and seg.nbytes == 10_000 and seg.path.exists()
    seg.array[:4] = [1, 2, 3, 4]
    other = SharedSegment.attach(seg_name)
    assert not other.owner and other.array[:4].tolist() == [1, 2, 3, 4]
    seg.unlink()
    assert not seg.path.exists()
    other.array[5] = 9  # still the same memory after the name is gone
    assert seg.array[5] == 9
    with pytest.raises(SharedMemoryError, match="no such shared segment"):
        SharedSegment.attach(seg_name)
    other.close()
    seg.close()
    assert seg.closed and other.closed


def test_bad_names_sizes_and_duplicates_are_one_line_errors(seg_name) -> None:
    with pytest.raises(ibp_graph.IBPInputError, match="segment name"):
        SharedSegment.create("a/b", 10)
    with pytest.raises(ibp_graph.IBPInputError, match="segment size"):
        SharedSegment.create(seg_name, 0)
    with SharedSegment.create(seg_name, 10):
        with pytest.raises(SharedMemoryError, match="exists"):
            SharedSegment.create(seg_name, 10)
    assert not (shm.SHM_DIR / seg_name).exists()  # closing the owner removes it


def test_too_small_dev_shm_names_needed_available_and_the_fix(seg_name, monkeypatch) -> None:
    monkeypatch.setattr(shm, "shm_available", lambda shm_dir=shm.SHM_DIR: 1 << 20)
    with pytest.raises(SharedMemoryError) as err:
        SharedSegment.create(seg_name, 3 << 30)
    msg = str(err.value)
    assert "needs 3.00 GiB" in msg and "only 0.00 GiB (1048576 bytes)" in msg
    assert "--shm-size" in msg and "remount" in msg
    assert not (shm.SHM_DIR / seg_name).exists()


def test_a_real_too_small_tmpfs_fails_before_any_write(tmp_path) -> None:
    # A folder whose free space is known: ask for more than the file system has.
    free = shm.shm_available(tmp_path)
    with pytest.raises(SharedMemoryError, match="is available"):
        SharedSegment.create("big", free + (1 << 30), shm_dir=tmp_path)
    assert not (tmp_path / "big").exists()


def test_memlock_error_names_both_sizes_and_how_to_raise(monkeypatch) -> None:
    monkeypatch.setattr(shm.resource, "getrlimit", lambda _r: (8 << 20, 8 << 20))
    with pytest.raises(SharedMemoryError) as err:
        shm.check_memlock(1 << 30, "x.ibp")
    msg = str(err.value)
    assert msg.startswith("x.ibp: pinning needs 1.00 GiB")
    assert "0.01 GiB (8388608 bytes)" in msg and "ulimit -l unlimited" in msg
    shm.check_memlock(1 << 20, "x.ibp")  # fits


_CHILD = """
import os, signal, sys
from ibp_graph.distributed.shm import SharedSegment
seg = SharedSegment.create(sys.argv[1], 1 << 20)
seg.array[:] = 7
print("created", flush=True)
how = sys.argv[2]
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if how == "raise":
    raise RuntimeError("a rank failed")
# "exit": a normal exit without closing the segment
"""


@pytest.mark.parametrize("how", ["exit", "raise", "kill"])
def test_no_segment_is_left_when_the_creator_exits_raises_or_is_killed(seg_name, how) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD), seg_name, how],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "created" in proc.stdout, proc.stderr
    assert (proc.returncode == 0) == (how == "exit")
    assert _gone(shm.SHM_DIR / seg_name), f"{seg_name} left in /dev/shm after '{how}'"


@pytest.fixture(scope="module")
def table_file(tmp_path_factory) -> Path:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 24)).astype(np.float32)
    x[:, :12] = np.round(x[:, :12])  # some columns compress
    path = tmp_path_factory.mktemp("shared") / "x.ibp"
    ibp_graph.compress(x, path, seed=0).close()
    return path


def test_shared_table_reads_the_segment_bit_for_bit(table_file, seg_name) -> None:
    with ibp_graph.open(table_file) as src:
        seg = SharedSegment.create(seg_name, segment_size(src))
        fill_rows(src, seg)
        want = src[:].view(torch.int32)
        assert seg.nbytes % 4096 == 0 and seg.nbytes >= src.stored_bytes + TAIL_PAD
    shared = SharedIBPTable(table_file, SharedSegment.attach(seg_name))
    seg.unlink()
    assert torch.equal(shared[:].view(torch.int32), want)
    ids = torch.tensor([299, 0, 7, 7])
    assert torch.equal(shared[ids].view(torch.int32), want[ids])
    # The rows really come from the segment, not from the file.
    assert np.shares_memory(shared.rows_section, shared.segment.array)
    shared.segment.array[:] = 0xFF  # rows read afterwards change, or are found corrupt
    try:
        assert not torch.equal(shared[:].view(torch.int32), want)
    except ibp_graph.IBPFormatError:
        pass
    shared.close()
    seg.close()


def test_shared_table_refuses_a_segment_too_small(table_file, seg_name) -> None:
    with SharedSegment.create(seg_name, 4096) as seg:
        with pytest.raises(ibp_graph.IBPInputError, match="the rows need"):
            SharedIBPTable(table_file, seg)


def test_shared_graph_is_the_same_csr_over_the_segment(seg_name) -> None:
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 50, (2, 400), generator=gen)
    for dtype in (torch.int64, torch.int32):
        graph = CSRGraph.from_edge_index(edge_index, 50, indices_dtype=dtype)
        name = f"{seg_name}-{dtype}".replace("torch.", "")
        with SharedSegment.create(name, graph_segment_size(graph)) as seg:
            share_graph(graph, seg)
            other = SharedSegment.attach(name)
            got = attach_graph(other)
            for key in ("indptr", "indices", "edge_ids"):
                assert torch.equal(getattr(got, key), getattr(graph, key)), key
            assert got.indices.dtype == dtype and got.num_nodes == 50
            assert np.shares_memory(got.indptr.numpy(), other.array)
            del got
            other.close()
    with SharedSegment.create(seg_name, 4096) as seg:
        with pytest.raises(ibp_graph.IBPFormatError, match="not a shared CSR graph"):
            attach_graph(seg)


_DATASET_TENSORS = ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")


@pytest.mark.parametrize("omit", [(), ("x",), ("x", "edge_index")])
def test_shared_dataset_is_the_same_dataset_over_the_segment(seg_name, omit) -> None:
    ds = load_dataset("cora")
    size = dataset_segment_size(ds, omit=omit)
    x_bytes = ds.x.numel() * 4
    assert (size > x_bytes) is ("x" not in omit)  # the features take room only when stored
    with SharedSegment.create(seg_name, size) as seg:
        written = share_dataset(ds, seg, omit=omit)
        other = SharedSegment.attach(seg_name)
        for got in (written, attach_dataset(other)):
            assert (got.name, got.num_nodes, got.num_classes, got.source) == (
                ds.name, ds.num_nodes, ds.num_classes, ds.source,
            )  # fmt: skip
            assert repr(got) == repr(ds)
            for key in _DATASET_TENSORS:
                want, have = getattr(ds, key), getattr(got, key)
                assert have.shape == want.shape and have.dtype == want.dtype, key
                if key in omit:
                    assert have.is_meta  # shape and dtype only: reading it fails at once
                    with pytest.raises(NotImplementedError):
                        have.tolist()
                else:
                    assert torch.equal(have, want), key
        got = attach_dataset(other)
        assert np.shares_memory(got.y.numpy(), other.array)
        got.y[0] += 1  # one copy: a write shows in every mapping
        assert int(written.y[0]) == int(ds.y[0]) + 1
        del got, written
        other.close()


def _tiny_dataset(**change) -> GraphDataset:
    n = 6
    fields = {
        "name": "tiny",
        "x": torch.arange(n * 3, dtype=torch.float32).view(n, 3),
        "y": torch.arange(n),
        "edge_index": torch.tensor([[0, 1, 2], [1, 2, 3]]),
        "train_mask": torch.tensor([True, False] * 3),
        "val_mask": torch.zeros(n, dtype=torch.bool),
        "test_mask": torch.ones(n, dtype=torch.bool),
        "num_nodes": n,
        "num_classes": 6,
        "source": "made up",
    }
    return GraphDataset(**{**fields, **change})


def test_shared_dataset_bad_inputs_and_segments_are_one_line_errors(seg_name) -> None:
    ds = _tiny_dataset()
    with SharedSegment.create(seg_name, 64) as seg:
        with pytest.raises(ibp_graph.IBPInputError, match="the dataset needs 4096 bytes"):
            share_dataset(ds, seg)
        with pytest.raises(ibp_graph.IBPFormatError, match="not a shared dataset .bad magic"):
            attach_dataset(seg)
    with SharedSegment.create(seg_name, 4096) as seg:
        with pytest.raises(ibp_graph.IBPInputError, match="dataset y has dtype torch.complex64"):
            share_dataset(_tiny_dataset(y=torch.zeros(6, dtype=torch.complex64)), seg)
        meta = torch.empty((6, 3), device="meta")
        with pytest.raises(ibp_graph.IBPInputError, match="dataset x must be on the CPU"):
            share_dataset(_tiny_dataset(x=meta), seg)
        share_dataset(_tiny_dataset(x=meta), seg, omit=("x",))  # not stored: not read
        with pytest.raises(ibp_graph.IBPInputError, match="omit names no dataset tensor: .'z'"):
            share_dataset(ds, seg, omit=("x", "z"))
        share_dataset(ds, seg)
        seg.array[64:70] = np.frombuffer(b"{oops ", dtype=np.uint8)  # the description
        with pytest.raises(ibp_graph.IBPFormatError, match="not a shared dataset .Expecting"):
            attach_dataset(seg)
        share_dataset(ds, seg)
        seg.array[8:16] = np.array([1 << 40], dtype="<i8").view(np.uint8)
        with pytest.raises(ibp_graph.IBPFormatError, match="description of 1099511627776 bytes"):
            attach_dataset(seg)


def test_without_keeps_shape_and_dtype_and_drops_the_data() -> None:
    ds = _tiny_dataset()
    bare = ds.without("x")
    assert bare.x.is_meta and bare.x.shape == (6, 3) and bare.num_features == 3
    assert bare.y is ds.y and bare.edge_index is ds.edge_index and not ds.x.is_meta
    assert repr(bare) == repr(ds)
    both = bare.without("x", "edge_index")  # meta again is meta
    assert both.x.is_meta and both.edge_index.is_meta and both.num_edges == 3
    assert both.edge_index.dtype == torch.int64 and repr(both) == repr(ds)
    with pytest.raises(ibp_graph.IBPInputError, match="GraphDataset has no tensor 'features'"):
        ds.without("features")


def test_two_buffers_pin_the_same_segment_in_place_and_leave_it_mapped(seg_name) -> None:
    seg = SharedSegment.create(seg_name, 3 * 4096)
    seg.array[:100] = 5
    other = SharedSegment.attach(seg_name)
    runtimes = [CudaRuntimeStub(), CudaRuntimeStub()]
    bufs = [
        PinnedBuffer(1000, "x.ibp", types.SimpleNamespace(runtime=rt), backing=s.array)
        for rt, s in zip(runtimes, (seg, other), strict=True)
    ]
    for buf, s, rt in zip(bufs, (seg, other), runtimes, strict=True):
        assert buf.pin() == s.address  # the segment itself, not a copy
        assert [(ptr, size) for ptr, size, _ in rt.registrations] == [(s.address, s.nbytes)]
        buf.close()
        assert rt.unregistered() == [s.address] and rt.registered == {}
    assert seg.array[:100].tolist() == [5] * 100  # unpinning does not free caller memory
    other.close()
    seg.close()


def test_pinned_buffer_refuses_unusable_backing() -> None:
    cuda = types.SimpleNamespace(runtime=CudaRuntimeStub())
    with pytest.raises(ValueError, match="needs 1064"):
        PinnedBuffer(1000, "x.ibp", cuda, backing=np.zeros(1000, dtype=np.uint8))
    with pytest.raises(ValueError, match="1-D uint8"):
        PinnedBuffer(10, "x.ibp", cuda, backing=np.zeros(4096, dtype=np.int32))
    ro = np.zeros(4096, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        PinnedBuffer(10, "x.ibp", cuda, backing=ro)


def test_a_failed_pin_under_a_small_memlock_limit_names_it(table_file, seg_name, monkeypatch):
    from ibp_graph import cuda_table
    from ibp_graph.distributed.host import pin_shared_table
    from ibp_graph.pinned import PinningError

    with ibp_graph.open(table_file) as src:
        seg = SharedSegment.create(seg_name, segment_size(src))
        fill_rows(src, seg)
    shared = SharedIBPTable(table_file, seg)
    pinned: list[np.ndarray] = []

    def fake_table(path, *, host_rows, **kwargs):
        pinned.append(host_rows)
        raise PinningError("x.ibp: could not pin")

    monkeypatch.setattr(cuda_table, "CudaIBPTable", fake_table)
    ctx = types.SimpleNamespace(device=torch.device("cuda", 0))
    monkeypatch.setattr(shm.resource, "getrlimit", lambda _r: (4096, 4096))
    with pytest.raises(SharedMemoryError, match="ulimit -l unlimited"):
        pin_shared_table(ctx, shared)
    assert pinned[0] is shared.segment.array  # the segment itself is what gets pinned
    monkeypatch.setattr(shm.resource, "getrlimit", lambda _r: (-1, -1))  # unlimited
    with pytest.raises(PinningError):
        pin_shared_table(ctx, shared)
    shared.close()


def _csr(seed: int = 0, dtype: torch.dtype = torch.int64) -> CSRGraph:
    gen = torch.Generator().manual_seed(seed)
    return CSRGraph.from_edge_index(torch.randint(0, 50, (2, 400), generator=gen), 50,
                                    indices_dtype=dtype)  # fmt: skip


def test_the_graph_segment_leaves_a_tail_to_pin_in_place() -> None:
    from ibp_graph.distributed.shared_graph import _layout

    for dtype, pairs in ((torch.int64, False), (torch.int32, False), (torch.int64, True)):
        graph = _csr(dtype=dtype)
        index_bytes = 16 if pairs else graph.indices.element_size()
        end = _layout(graph.num_nodes, graph.num_edges, index_bytes)[3]
        size = graph_segment_size(graph, pairs)
        assert size % 4096 == 0 and size - end >= TAIL_PAD


def test_a_shared_graph_in_the_pairs_layout_samples_alike(seg_name) -> None:
    from ibp_graph.sampler import NeighborSampler

    graph = _csr(5)
    with SharedSegment.create(seg_name, graph_segment_size(graph, True)) as seg:
        share_graph(graph, seg, pairs=True)
        got = attach_graph(seg)
        assert got.pairs and np.shares_memory(got.indices.numpy(), seg.array)
        for key in ("indptr", "indices", "edge_ids"):
            assert torch.equal(getattr(got, key), getattr(graph, key)), key
        seeds = torch.arange(0, 50, 4)
        a = NeighborSampler(graph, [4, 3], seed=2).sample(seeds)
        b = NeighborSampler(got, [4, 3], seed=2).sample(seeds)
        assert torch.equal(a.node, b.node) and torch.equal(a.edge, b.edge)
        del got, b
    with pytest.raises(ibp_graph.IBPInputError, match="this graph's indices are torch.int32"):
        graph_segment_size(_csr(dtype=torch.int32), pairs=True)
    with pytest.raises(ibp_graph.IBPInputError, match="pairs must be a bool"):
        graph_segment_size(graph, pairs="yes")


@pytest.mark.parametrize(
    ("dtype", "pairs"), [(torch.int64, False), (torch.int32, False), (torch.int64, True)]
)
def test_uva_in_place_pins_the_segment_once_and_maps_each_array_at_its_place(
    seg_name, monkeypatch, dtype, pairs
) -> None:
    # No GPU here: CUDA's runtime is the stub and the CUDA tensors are stand-ins that name
    # the address they would read; the GPU test below reads through real ones.
    import contextlib

    from ibp_graph import graph as graph_module
    from ibp_graph.kernels import runtime

    rt = CudaRuntimeStub()
    cp = types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=rt, Device=lambda i: contextlib.nullcontext())
    )
    made = []

    def tensor(buf, ptr, like, index):
        made.append((buf, ptr, like, index))
        return torch.full(like.shape, ptr, dtype=torch.int64)

    monkeypatch.setattr(runtime, "require_cuda", lambda what: None)
    monkeypatch.setattr(runtime, "cupy", lambda: cp)
    monkeypatch.setattr(torch.cuda, "device", lambda i: contextlib.nullcontext())
    monkeypatch.setattr(graph_module, "_uva_tensor", tensor)
    graph = _csr(dtype=dtype)
    with SharedSegment.create(seg_name, graph_segment_size(graph, pairs)) as seg:
        shared = share_graph(graph, seg, pairs)
        assert shared.pairs == pairs
        got = shared.uva_in_place(
            seg.array, torch.device("cuda", 1), "graph-seg", indptr_in_gpu=False
        )
        # one registration: the whole segment, where it is
        assert [(ptr, size) for ptr, size, _ in rt.registrations] == [(seg.address, seg.nbytes)]
        (buf,) = {id(m[0]): m[0] for m in made}.values()
        assert buf.array is seg.array and buf.pages == "backing"
        # Each array mapped at its place; with pairs, indptr and the (E, 2) block.
        names = ("indptr", "indices") if pairs else ("indptr", "indices", "edge_ids")
        for name, (_, ptr, like, index) in zip(names, made, strict=True):
            assert ptr == getattr(shared, name).data_ptr()  # the stub maps host = device
            assert like.dtype == getattr(graph, name).dtype and index == 1
            assert int(getattr(got, name)[0]) == ptr
        if pairs:
            assert made[1][2].shape == (graph.num_edges, 2) and got.pairs
            assert int(got.edge_ids[0]) == made[1][1]  # the same block's second column
        assert got.num_nodes == graph.num_nodes
        buf.close()
        assert rt.unregistered() == [seg.address]
        assert torch.equal(attach_graph(seg).indices, graph.indices)  # nothing was freed
        del shared, got, buf


def test_uva_in_place_refuses_arrays_outside_the_region(seg_name) -> None:
    graph = _csr()
    with SharedSegment.create(seg_name, graph_segment_size(graph)) as seg:
        with pytest.raises(ValueError, match="indptr must be a contiguous CPU tensor in the"):
            graph.uva_in_place(seg.array)  # the graph's own memory, not the segment's
        with pytest.raises(ValueError, match="start on a page"):
            share_graph(graph, seg).uva_in_place(seg.array[64:])
        with pytest.raises(ValueError, match="1-D uint8"):
            graph.uva_in_place([1, 2, 3])
        shared = share_graph(graph, seg)
        with pytest.raises(ibp_graph.IBPInputError, match="indptr_in_gpu must be a bool"):
            shared.uva_in_place(seg.array, indptr_in_gpu="yes")
        if not torch.cuda.is_available():
            with pytest.raises(ibp_graph.IBPDeviceError, match="needs a CUDA GPU"):
                shared.uva_in_place(seg.array)
        del shared


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("pairs", [False, True])
def test_gpu_a_shared_graph_is_read_over_uva_in_place(seg_name, pairs) -> None:
    from ibp_graph.graph import _uva_buffer
    from ibp_graph.loading import place_graph
    from ibp_graph.sampler import NeighborSampler

    graph = _csr(3)
    with SharedSegment.create(seg_name, graph_segment_size(graph, pairs)) as seg:
        shared = share_graph(graph, seg, pairs)
        uva = shared.uva_in_place(seg.array, torch.device("cuda"))
        assert uva.is_uva() and uva.indices.is_cuda and uva.indptr.is_cuda
        assert _uva_buffer(uva.indptr) is None and uva.pairs == pairs  # indptr in GPU memory
        assert place_graph(uva, torch.device("cuda"), "uva") is uva  # not pinned again
        for name in ("indptr", "indices", "edge_ids"):
            assert torch.equal(getattr(uva, name).cpu(), getattr(graph, name))
        seeds = torch.arange(0, 50, 3)
        on_device = NeighborSampler(graph.to("cuda"), [4, 3], seed=2, backend="kernel")
        over_uva = NeighborSampler(uva, [4, 3], seed=2, backend="kernel")
        a, b = on_device.sample(seeds), over_uva.sample(seeds)
        assert torch.equal(a.node, b.node) and torch.equal(a.row, b.row)
        shared.indices[0] = (int(graph.indices[0]) + 1) % 50  # the same pages: seen at once
        assert int(uva.indices[0]) == int(shared.indices[0])
        del uva, a, b, over_uva
        torch.cuda.synchronize()
