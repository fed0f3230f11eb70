"""CUDA kernels: every source compiles (CPU, NVRTC), launch planning, and GPU behaviour."""

from __future__ import annotations

import re
import types

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph.errors import IBPInputError
from ibp_graph.kernels.fetch_decode import check_launch, smem_plan
from ibp_graph.kernels.raw_gather import vector_bytes
from ibp_graph.kernels.runtime import NVRTC_OPTIONS, cuda_dir, source_files
from ibp_graph.pinned import PinnedBuffer, PinningError

ARCHS = ("sm_80", "sm_90")


def _nvrtc():
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - any failure to load NVRTC means: cannot check
        pytest.skip(
            f"NVRTC is not loadable here ({type(exc).__name__}: {exc}); "
            "install the dev extra (nvidia-cuda-nvrtc)"
        )
    return nvrtc


def test_sources_are_found() -> None:
    names = {p.name for p in source_files()}
    assert {"fetch_decode.cu", "raw_gather.cu"} <= names
    assert cuda_dir().is_dir()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", [p.name for p in source_files()])
def test_every_kernel_compiles(source: str, arch: str) -> None:
    nvrtc = _nvrtc()
    text = (cuda_dir() / source).read_text()
    prog = nvrtc.createProgram(text, source, [], [])
    try:
        nvrtc.compileProgram(prog, [f"--gpu-architecture={arch}", *NVRTC_OPTIONS])
    except nvrtc.NVRTCError:
        pytest.fail(f"{source} does not compile for {arch}:\n{nvrtc.getProgramLog(prog)}")
    log = nvrtc.getProgramLog(prog)
    assert "warning" not in log.lower(), f"{source} ({arch}) compiles with warnings:\n{log}"
    ptx = nvrtc.getPTX(prog)
    entries = set(re.findall(r"\.entry\s+(\w+)", ptx.decode() if isinstance(ptx, bytes) else ptx))
    assert entries, f"{source} defines no kernels"


def test_smem_plan_fits_the_largest_row() -> None:
    plan = smem_plan(num_words=1433, word_bytes=4, align=16, max_smem=48 * 1024)
    raw = -(-1433 * 4 // 16) * 16
    # the staging buffer covers a row starting at any offset in its 16-byte chunk, + slack
    assert plan.buf_words * 4 >= 15 + raw + 8
    assert plan.bytes_per_warp % 16 == 0
    assert plan.bytes_per_block <= 48 * 1024
    assert 1 <= plan.warps_per_block <= 8


def test_smem_plan_rejects_rows_too_wide() -> None:
    with pytest.raises(ValueError, match="shared memory"):
        smem_plan(num_words=100_000, word_bytes=4, align=16, max_smem=48 * 1024)


def test_vector_width() -> None:
    assert vector_bytes(512, 4096) == 16
    assert vector_bytes(24, 4096) == 8
    assert vector_bytes(12, 4096) == 4
    assert vector_bytes(6, 4096) == 1
    assert vector_bytes(512, 4100) == 4


def test_launch_checks_name_the_argument() -> None:
    idx = torch.zeros(3, dtype=torch.int64)
    out = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="idx must be a CUDA tensor"):
        check_launch(idx, out, 16, torch.device("cuda", 0))


class _FakeRuntime:
    class CUDARuntimeError(RuntimeError):
        pass

    def __init__(self, fail: bool):
        self.fail = fail
        self.registered: list[tuple[int, int]] = []
        self.unregistered: list[int] = []

    def getDevice(self):  # noqa: N802 - CUDA's name
        return 0

    def deviceGetAttribute(self, attr, device):  # noqa: N802
        return 1

    def hostRegister(self, ptr, size, flags):  # noqa: N802
        if self.fail:
            raise self.CUDARuntimeError("cudaErrorMemoryAllocation: out of memory")
        self.registered.append((ptr, size))

    def hostUnregister(self, ptr):  # noqa: N802
        self.unregistered.append(ptr)

    def hostGetDevicePointer(self, ptr, flags):  # noqa: N802
        return ptr


def test_pinning_failure_says_what_to_change() -> None:
    fake = types.SimpleNamespace(runtime=_FakeRuntime(fail=True))
    buf = PinnedBuffer(1 << 20, "x.ibp", fake)
    with pytest.raises(PinningError) as err:
        buf.pin()
    msg = str(err.value)
    assert msg.startswith("x.ibp: could not pin")
    assert "ulimit -l" in msg and "memlock" in msg and "out of memory" in msg


def test_pinning_registers_and_releases() -> None:
    runtime = _FakeRuntime(fail=False)
    buf = PinnedBuffer(3000, "x.ibp", types.SimpleNamespace(runtime=runtime))
    buf.array[:3000] = 7
    ptr = buf.pin()
    assert ptr == buf.host_ptr and runtime.registered[0][1] >= 3000 + 16
    buf.close()
    assert runtime.unregistered == [ptr]
    buf.close()  # idempotent


def test_pinning_refuses_more_than_available_memory(monkeypatch) -> None:
    monkeypatch.setattr("ibp_graph.pinned.available_memory", lambda: 1 << 20)
    with pytest.raises(PinningError, match="only 0.00 GiB of memory is available"):
        PinnedBuffer(1 << 30, "big.ibp", types.SimpleNamespace(runtime=_FakeRuntime(False)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_open_on_cuda_without_a_gpu_is_a_clear_error(tmp_path) -> None:
    ibp_graph.compress(np.ones((4, 3), np.float32), tmp_path / "x.ibp")
    with pytest.raises(ibp_graph.IBPDeviceError, match="needs a CUDA GPU"):
        ibp_graph.open(tmp_path / "x.ibp", device="cuda")
    with pytest.raises(ibp_graph.IBPDeviceError, match="needs a CUDA GPU"):
        ibp_graph.compress(np.ones((4, 3), np.float32), tmp_path / "y.ibp", device="cuda")
    with pytest.raises(IBPInputError, match="device must be"):
        ibp_graph.compress(np.ones((4, 3), np.float32), tmp_path / "y.ibp", device="tpu")
    with pytest.raises(TypeError, match="max_blocks"):
        ibp_graph.open(tmp_path / "x.ibp", max_blocks=4)


# -- on a GPU: bit-identical to the NumPy decoder ------------------------------------------

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8"]


def _table(dtype: str, rng: np.random.Generator, n: int = 3000, d: int = 37) -> torch.Tensor:
    bits = torch.from_numpy(rng.integers(0, 256, (n, d * 8), dtype=np.uint8))
    tdt = getattr(torch, dtype)
    size = torch.empty((), dtype=tdt).element_size()
    x = bits[:, : d * size].contiguous().view(tdt)
    sparse = torch.from_numpy(rng.random((n, d)) < 0.9)
    x[sparse] = 0  # mostly zeros: encoded (grouped and flat) rows among raw ones
    return x


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("word_bytes,align,clusters", [(4, "auto", 1), (8, 16, 3), (4, 1, 2)])
def test_fetch_matches_cpu_decoder(tmp_path, dtype, word_bytes, align, clusters) -> None:
    rng = np.random.default_rng(0)
    x = _table(dtype, rng)
    path = tmp_path / "x.ibp"
    cpu = ibp_graph.compress(x, path, word_bytes=word_bytes, align=align, clusters=clusters)
    with ibp_graph.open(path, device="cuda") as gpu_table:
        ids = torch.from_numpy(rng.integers(0, x.shape[0], 5000)).cuda()
        got = gpu_table[ids]
        assert got.is_cuda and got.dtype == x.dtype
        want = cpu[ids.cpu()]
        assert torch.equal(got.cpu().view(torch.uint8), want.view(torch.uint8))
        assert gpu_table[torch.empty(0, dtype=torch.int64, device="cuda")].shape == (0, 37)


@gpu
@needs_gpu
def test_fetch_rejects_out_of_range_ids_without_a_fault(tmp_path) -> None:
    x = _table("float32", np.random.default_rng(1))
    ibp_graph.compress(x, tmp_path / "x.ibp")
    with ibp_graph.open(tmp_path / "x.ibp", device="cuda") as t:
        for bad in (len(x), -1):
            with pytest.raises(IBPInputError, match="out of range"):
                t.fetch(torch.tensor([0, bad, 2], device="cuda"))
        got = t[[2, 2, 0]].cpu()  # still usable afterwards
        assert torch.equal(got.view(torch.int32), x[[2, 2, 0]].view(torch.int32))


@gpu
@needs_gpu
def test_raw_pinned_table_matches(tmp_path) -> None:
    from ibp_graph.cuda_table import PinnedRawTable

    x = _table("float16", np.random.default_rng(2), d=33)
    with PinnedRawTable(x) as t:
        ids = torch.randint(0, len(x), (777,), device="cuda")
        assert torch.equal(t[ids].cpu().view(torch.int16), x[ids.cpu()].view(torch.int16))


@gpu
@needs_gpu
@pytest.mark.parametrize("clusters,word_bytes", [(1, 4), (3, 4), (2, 8)])
def test_gpu_encoder_writes_the_cpu_encoders_bytes(tmp_path, clusters, word_bytes) -> None:
    x = _table("float32", np.random.default_rng(3), n=5000, d=50)
    cpu = tmp_path / "cpu.ibp"
    gpu_path = tmp_path / "gpu.ibp"
    ibp_graph.compress(x, cpu, clusters=clusters, word_bytes=word_bytes)
    ibp_graph.compress(x, gpu_path, clusters=clusters, word_bytes=word_bytes, device="cuda")
    assert cpu.read_bytes() == gpu_path.read_bytes()


def test_raw_bypass_is_detected_only_for_unpadded_all_raw_tables(tmp_path) -> None:
    from ibp_graph.cuda_table import raw_bypass

    rng = np.random.default_rng(5)
    noise = rng.integers(0, 2**32, (500, 64), dtype=np.uint64).astype(np.uint32)
    table = ibp_graph.compress(noise.view(np.float32), tmp_path / "noise.ibp", align=16)
    assert table.stats["rows_raw"] == 500 and raw_bypass(table)
    odd = noise[:, :63].copy()  # 252-byte rows padded to 256: stored rows are not the table
    padded = ibp_graph.compress(odd.view(np.float32), tmp_path / "odd.ibp", align=16)
    assert padded.stats["rows_raw"] == 500 and not raw_bypass(padded)
    sparse = ibp_graph.compress(np.zeros((500, 64), np.float32), tmp_path / "zeros.ibp")
    assert not raw_bypass(sparse)


@gpu
@needs_gpu
def test_incompressible_table_is_fetched_raw_and_exact(tmp_path) -> None:
    rng = np.random.default_rng(6)
    noise = rng.integers(0, 2**32, (2000, 64), dtype=np.uint64).astype(np.uint32)
    ibp_graph.compress(noise.view(np.float32), tmp_path / "noise.ibp", align=16)
    with ibp_graph.open(tmp_path / "noise.ibp", device="cuda") as t:
        assert t.bypass
        ids = torch.randint(0, 2000, (999,), device="cuda")
        got = t[ids].cpu().view(torch.int32)
        assert torch.equal(got, torch.from_numpy(noise.view(np.int32))[ids.cpu()])


@gpu
@needs_gpu
def test_fetch_matches_cpu_decoder_on_the_real_tables(tmp_path, real_table_rows) -> None:
    rng = np.random.default_rng(2)
    for name, x in real_table_rows:
        for clusters in (1, 3):
            path = tmp_path / f"{name}-{clusters}.ibp"
            cpu = ibp_graph.compress(x, path, clusters=clusters, progress=False)
            with ibp_graph.open(path, device="cuda") as gpu_table:
                ids = torch.from_numpy(rng.integers(0, x.shape[0], 4000)).cuda()
                got = gpu_table[ids].cpu()
                want = cpu[ids.cpu()]
                assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), name
