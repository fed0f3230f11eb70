"""The first minutes on a GPU: does each GPU path run at all, and give the right bytes?

``bash benchmarks/gpu_session.sh smoke`` runs this file first (``-x``, about a minute on an
H100): the install, a 4 GiB pinned buffer, one raw gather and one fused fetch compared bit
for bit with the NumPy decoder, one batch of the GPU sampler, and one batch of the
prefetching PyG loader. Each test is small and independent, so the first failure names the
path that is broken. Skipped without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph.datasets import load_dataset

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GIB = 1 << 30


@pytest.fixture(scope="module")
def cora():
    return load_dataset("cora")


@pytest.fixture(scope="module")
def cora_table(cora, tmp_path_factory):
    path = tmp_path_factory.mktemp("smoke") / "cora.ibp"
    ibp_graph.compress(cora.x.numpy(), path, progress=False)
    return path


def test_install_sees_the_gpu_and_builds_every_kernel() -> None:
    import cupy

    from ibp_graph.kernels.runtime import kernel

    assert torch.cuda.is_available() and cupy.cuda.runtime.getDeviceCount() >= 1
    entries = {
        "fetch_decode.cu": [
            f"ibp_fetch_decode_{db}w{w}_o{o}" for db in ("", "db_") for w in (4, 8) for o in (4, 8)
        ],
        "raw_gather.cu": [f"ibp_raw_gather_v{v}" for v in (16, 8, 4, 2, 1)]
        + ["ibp_raw_gather_lines"],
        "sample_neighbors.cu": ["ibp_sample_neighbors_k32", "ibp_sample_neighbors_k256"]
        + [f"ibp_hop_draw_k{k}_{i}" for k in (32, 256) for i in ("i32", "i64", "pairs")]
        + [f"ibp_hop_all_{i}" for i in ("i32", "i64", "pairs")]
        + ["ibp_hop_flags", "ibp_hop_emit", "ibp_hop_clear", "ibp_hop_pack"],
    }
    for source, names in entries.items():
        for name in names:
            fn = kernel(source, name, torch.cuda.current_device())
            assert 0 < fn.num_regs <= 128, (name, fn.num_regs)


def test_pin_4_gib_and_gather_from_it_over_uva() -> None:
    import cupy

    from ibp_graph.kernels.raw_gather import raw_gather
    from ibp_graph.pinned import PinnedBuffer

    buf = PinnedBuffer(4 * GIB, "smoke 4 GiB", cupy.cuda)
    try:
        rows = buf.array[: 4 * GIB].reshape(-1, 512)
        rng = np.random.default_rng(0)
        ids = np.sort(rng.choice(rows.shape[0], 4096, replace=False))
        ids[-1] = rows.shape[0] - 1  # the last row, at the very end of the 4 GiB
        rows[ids] = rng.integers(0, 256, (ids.size, 512), dtype=np.uint8)
        ptr = buf.pin()
        idx = torch.from_numpy(ids).cuda()
        out = torch.empty((ids.size, 512), dtype=torch.uint8, device="cuda")
        error = torch.zeros(2, dtype=torch.int32, device="cuda")
        raw_gather(ptr, rows.shape[0], 512, idx, out, error)
        assert error.tolist() == [0, 0]
        assert np.array_equal(out.cpu().numpy(), rows[ids])
    finally:
        torch.cuda.synchronize()
        buf.close()


def test_fused_fetch_is_bit_identical_to_the_numpy_decoder(cora_table) -> None:
    cpu = ibp_graph.open(cora_table)
    with ibp_graph.open(cora_table, device="cuda") as gpu:
        assert not gpu.bypass  # Cora compresses: this is the fused kernel
        ids = torch.randint(0, gpu.shape[0], (5000,), generator=torch.Generator().manual_seed(1))
        got = gpu.fetch(ids.cuda()).cpu()
        gpu.double_buffer = True  # the double-buffered kernel (cp.async staging)
        got_db = gpu.fetch(ids.cuda()).cpu()
    want = torch.as_tensor(np.asarray(cpu[ids.numpy()]))
    assert got.dtype == want.dtype and torch.equal(got.view(torch.int32), want.view(torch.int32))
    assert torch.equal(got_db.view(torch.int32), want.view(torch.int32))


def test_one_gpu_sampler_batch(cora) -> None:
    from ibp_graph.graph import CSRGraph
    from ibp_graph.sampler import NeighborSampler

    graph = CSRGraph.from_edge_index(cora.edge_index, cora.num_nodes).to("cuda")
    seeds = torch.arange(0, 1024, device="cuda")
    for backend in ("torch", "kernel"):
        batch = NeighborSampler(graph, [15, 10, 5], seed=0, backend=backend).sample(seeds)
        assert batch.node.is_cuda and torch.equal(batch.node[:1024], seeds)
        src, dst = batch.node[batch.edge_index[0]], batch.node[batch.edge_index[1]]
        # every sampled edge is an edge of the graph
        key = cora.edge_index[0].cuda() * cora.num_nodes + cora.edge_index[1].cuda()
        assert torch.isin(src * cora.num_nodes + dst, key).all()


def test_one_prefetched_loader_batch(cora, cora_table) -> None:
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    from ibp_graph.loaders.pyg import NeighborLoader

    data = Data(edge_index=cora.edge_index, y=cora.y, num_nodes=cora.num_nodes)
    with ibp_graph.open(cora_table, device="cuda") as table:
        loader = NeighborLoader(
            data, [10, 5], batch_size=256, features=table, device="cuda", prefetch=2, seed=0
        )
        batch = next(iter(loader))
        torch.cuda.synchronize()
        assert batch.x.is_cuda and batch.x.shape == (batch.n_id.numel(), cora.x.shape[1])
        assert torch.equal(batch.x.cpu(), cora.x[batch.n_id.cpu()])
