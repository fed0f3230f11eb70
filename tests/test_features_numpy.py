"""NumPy feature tables (`NumpyFeatures`) and ``torch.as_tensor`` of an `IBPTable`.

A 2-D NumPy array, in memory or a read-only memmap of a ``.npy`` file, is a ``features=``
source like a CPU tensor: the same rows, dtype, device and errors, while only the rows asked
for are read. Checked through ``as_feature_source`` and through both loaders on Cora (the DGL
part skips when DGL cannot be imported). GPU variants are marked ``gpu`` and skip without
CUDA.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph.errors import IBPInputError
from ibp_graph.features import FeatureSource, NumpyFeatures, TensorFeatures, as_feature_source

try:  # DGL (the 'dgl' extra) may be missing or not importable: its tests skip then
    from ibp_graph.loaders import dgl as dgl_loaders
except ImportError as exc:
    dgl_loaders, DGL_MISSING = None, str(exc)
try:  # PyG (the 'pyg' extra) may be missing: its tests skip then
    from ibp_graph.loaders import pyg as pyg_loaders
except ImportError as exc:
    pyg_loaders, PYG_MISSING = None, str(exc)

# Any warning fails a test: torch.from_numpy on a read-only array warns, and must not happen.
# (PyG and DGL are imported above, at collection: what they warn while importing is theirs.)
pytestmark = pytest.mark.filterwarnings("error")

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = ["float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8"]
IDS = torch.tensor([4, 0, 4, 36, 17, 36])


def table(dtype: str, n: int = 37, d: int = 5, seed: int = 0) -> np.ndarray:
    """An ``(n, d)`` array of ``dtype`` with distinct-looking values."""
    values = np.random.default_rng(seed).standard_normal((n, d)) * 50
    return values.astype(dtype)


def saved(tmp_path: Path, x: np.ndarray, name: str = "x.npy") -> np.memmap:
    """``x`` saved as a ``.npy`` and opened read-only as a memmap."""
    path = tmp_path / name
    np.save(path, x)
    mm = np.load(path, mmap_mode="r")
    assert isinstance(mm, np.memmap) and not mm.flags.writeable
    return mm


def file_state(path: str | os.PathLike[str]) -> tuple[int, str]:
    """The file's modification time and the SHA-256 of its bytes."""
    return os.stat(path).st_mtime_ns, hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_like_tensor(src: FeatureSource, x: np.ndarray, ids: torch.Tensor) -> None:
    """``src`` over ``x`` gathers and describes itself as a CPU tensor of ``x`` does."""
    ref = TensorFeatures(torch.from_numpy(np.ascontiguousarray(x)))
    rows, want = src.gather(ids), ref.gather(ids)
    assert rows.dtype == want.dtype and rows.device == want.device
    assert rows.shape == want.shape and rows.is_contiguous()
    assert torch.equal(rows, want)
    assert (src.num_rows, len(src), src.row_shape) == (ref.num_rows, len(ref), ref.row_shape)
    assert (src.dtype, src.device, src.index_device) == (ref.dtype, ref.device, ref.index_device)
    assert (src.row_bytes, src.ratio) == (ref.row_bytes, ref.ratio)
    assert src.stored_bytes(ids) == ref.stored_bytes(ids) == 0


# --------------------------------------------------------------------------------------------
# Gathering
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["memory", "memmap"])
def test_numpy_gathers_as_a_cpu_tensor_does(tmp_path, dtype: str, kind: str) -> None:
    x = table(dtype)
    arr = x if kind == "memory" else saved(tmp_path, x)
    src = as_feature_source(arr)
    assert isinstance(src, NumpyFeatures) and src.array is arr
    check_like_tensor(src, x, IDS)
    check_like_tensor(as_feature_source(arr, "cpu"), x, IDS)
    check_like_tensor(src, x, torch.tensor([], dtype=torch.int64))
    # The rows are a new tensor: writing them leaves the array alone.
    src.gather(IDS).zero_()
    assert np.array_equal(arr, x)


def test_memmap_file_is_not_modified(tmp_path) -> None:
    mm = saved(tmp_path, table("float32"))
    before = file_state(tmp_path / "x.npy")
    src = as_feature_source(mm)
    for _ in range(3):
        src.gather(IDS).fill_(7.0)
    assert file_state(tmp_path / "x.npy") == before


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.astype(x.dtype.newbyteorder(">")),  # big-endian
        lambda x: np.asfortranarray(x),
        lambda x: x[:, ::2],
        lambda x: x[::-1],
        lambda x: x.T.copy().T,
    ],
    ids=["big-endian", "fortran", "column-step", "reversed", "transposed"],
)
def test_any_byte_order_and_strides(view) -> None:
    x = view(table("float32"))
    src = as_feature_source(x)
    rows = src.gather(IDS)
    assert rows.dtype == torch.float32 and rows.is_contiguous()
    assert np.array_equal(rows.numpy(), x[IDS.numpy()])


def test_ids_from_any_int_dtype_and_view() -> None:
    x = table("int64")
    src = as_feature_source(x)
    for ids in (IDS.to(torch.int32), IDS.to(torch.uint8), torch.arange(37)[::3]):
        assert torch.equal(src.gather(ids), torch.from_numpy(x)[ids.long()])


def test_zero_columns_and_zero_rows() -> None:
    narrow = np.zeros((6, 0), np.float32)
    check_like_tensor(as_feature_source(narrow), narrow, IDS[:2])
    empty = as_feature_source(np.zeros((0, 3), np.uint8))
    assert empty.num_rows == 0
    assert empty.gather(torch.tensor([], dtype=torch.int64)).shape == (0, 3)


# --------------------------------------------------------------------------------------------
# Only the rows asked for are read
# --------------------------------------------------------------------------------------------


class RowSpy(np.ndarray):
    """An ndarray that records every row selection made through ``take`` and ``[]``."""

    reads: list[np.ndarray]

    def take(self, indices, *args, **kwargs):  # type: ignore[override]
        RowSpy.reads.append(np.asarray(indices).copy())
        return super().take(indices, *args, **kwargs)

    def __getitem__(self, key):  # type: ignore[override]
        RowSpy.reads.append(np.asarray(key if isinstance(key, tuple) else (key,), dtype=object))
        return super().__getitem__(key)


def test_gather_selects_only_the_rows_asked_for() -> None:
    x = table("float16")
    spy = x.view(RowSpy)
    RowSpy.reads = []
    src = as_feature_source(spy)
    RowSpy.reads = []
    rows = src.gather(IDS)
    assert torch.equal(rows, torch.from_numpy(x)[IDS])
    assert len(RowSpy.reads) == 1, RowSpy.reads
    assert RowSpy.reads[0].tolist() == IDS.tolist()


def mapped_kib(path: str | os.PathLike[str]) -> int:
    """KiB of ``path``'s pages mapped into this process (``Rss`` in /proc/self/smaps)."""
    target = os.path.realpath(path)
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
            inside = line.split(maxsplit=5)[-1] == target
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/self/smaps")
def test_memmap_pages_of_other_rows_are_never_read(tmp_path) -> None:
    """Gathering 3 rows maps a few pages around each, not the file (read-ahead aside)."""
    n, d = 8192, 2048  # 64 MiB of float32, 8 KiB per row
    file_kib = n * d * 4 // 1024
    path = tmp_path / "big.npy"
    np.save(path, np.repeat(np.arange(n, dtype=np.float32)[:, None], d, axis=1))
    before_file = file_state(path)
    mm = np.load(path, mmap_mode="r")
    src = as_feature_source(mm)
    start = mapped_kib(path)
    ids = torch.tensor([5, 8000, 4123])
    rows = src.gather(ids)
    after_gather = mapped_kib(path)
    assert torch.equal(rows[:, 0], ids.float()) and torch.equal(rows[:, -1], ids.float())
    float(mm.sum())  # the control: reading every row maps the whole file
    after_all = mapped_kib(path)
    del src, mm
    if after_all - start < 0.9 * file_kib:
        pytest.skip("this kernel does not count the mapped pages of the file in Rss")
    assert after_gather - start < file_kib // 4, f"{after_gather - start} KiB mapped for 3 rows"
    assert file_state(path) == before_file


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros(4, np.float32), "must be 2-D (rows x features), got shape (4,)"),
        (np.zeros((2, 3, 4), np.float32), "must be 2-D (rows x features), got shape (2, 3, 4)"),
        (np.array([[1, "a"]], dtype=object), "dtype object holds Python objects"),
        (np.zeros((2, 2), "<U3"), "dtype <U3 holds strings, bytes or records"),
        (np.zeros((2, 2), "S4"), "dtype |S4 holds strings, bytes or records"),
        (np.zeros((2, 2), np.complex64), "complex dtype complex64 is not supported"),
        (np.zeros((2, 2), bool), "unsupported NumPy dtype bool"),
        (np.zeros((2, 2), np.uint16), "unsupported NumPy dtype uint16"),
        (np.zeros((2, 2), "datetime64[s]"), "unsupported NumPy dtype datetime64[s]"),
        (np.ma.zeros((2, 2)), "masked NumPy array's mask would be ignored"),
    ],
    ids=["1-D", "3-D", "object", "str", "bytes", "complex", "bool", "uint16", "datetime", "mask"],
)
def test_bad_arrays_are_one_line_input_errors(array: np.ndarray, message: str) -> None:
    with pytest.raises(IBPInputError, match=re.escape(message)) as info:
        as_feature_source(array)
    text = str(info.value)
    assert "\n" not in text and text.startswith("features: ")
    if array.ndim == 2 and array.dtype.kind != "O" and not np.ma.isMaskedArray(array):
        assert "float32, float16, float64, int8, int16, int32, int64, uint8" in text


def test_numpy_features_takes_only_arrays() -> None:
    with pytest.raises(IBPInputError, match="array must be a NumPy array, got 'list'"):
        NumpyFeatures([[1.0]])  # type: ignore[arg-type]


def raised(fn) -> tuple[type, str]:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is compared
        return type(exc), str(exc)
    raise AssertionError("no error")


@pytest.mark.parametrize("shape", [(37, 5), (37, 0), (0, 5)])
@pytest.mark.parametrize("ids", [[37], [-1], [0, 99], [[0, 1]]], ids=["n", "-1", "99", "2-D"])
def test_bad_ids_raise_exactly_as_for_a_tensor(tmp_path, shape, ids) -> None:
    x = np.zeros(shape, np.float32)
    ids_t = torch.tensor(ids)
    mine = raised(lambda: as_feature_source(x).gather(ids_t))
    theirs = raised(lambda: as_feature_source(torch.from_numpy(x)).gather(ids_t))
    assert mine == theirs
    if shape[0]:
        mm = saved(tmp_path, x)
        assert raised(lambda: as_feature_source(mm).gather(ids_t)) == theirs


def test_repr_names_the_array() -> None:
    assert repr(as_feature_source(np.zeros((3, 2), np.int8))) == (
        "NumpyFeatures(ndarray, shape=(3, 2), dtype=int8, device=cpu)"
    )


# --------------------------------------------------------------------------------------------
# Through the loaders, on Cora
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cora():
    from ibp_graph.datasets import load_dataset

    return load_dataset("cora")


@pytest.fixture(scope="module")
def cora_npy(cora, tmp_path_factory) -> tuple[np.ndarray, Path]:
    """Cora's features and the ``.npy`` file holding them."""
    x = cora.x.numpy()
    path = tmp_path_factory.mktemp("cora") / "x.npy"
    np.save(path, x)
    return x, path


def pyg():
    """``ibp_graph.loaders.pyg``, or a skip without PyG."""
    if pyg_loaders is None:
        pytest.skip(f"PyG cannot be imported: {PYG_MISSING}")
    return pyg_loaders


def pyg_data(cora):
    from torch_geometric.data import Data

    return Data(edge_index=cora.edge_index, num_nodes=cora.num_nodes)


@pytest.mark.parametrize("kind", ["memmap", "memory"])
def test_pyg_neighbor_loader_with_numpy_features(cora, cora_npy, kind: str) -> None:
    NeighborLoader = pyg().NeighborLoader

    x, path = cora_npy
    features = np.load(path, mmap_mode="r") if kind == "memmap" else x.copy()
    before = file_state(path)
    loader = NeighborLoader(
        pyg_data(cora), [5, 5], batch_size=512, shuffle=True, features=features, seed=0
    )
    assert isinstance(loader.features, NumpyFeatures)
    ref = torch.from_numpy(x)
    batches = 0
    for batch in loader:
        assert batch.x.dtype == torch.float32 and batch.x.device == torch.device("cpu")
        assert torch.equal(batch.x, ref[batch.n_id])
        batches += 1
    assert batches == -(-cora.num_nodes // 512)
    assert file_state(path) == before


def test_pyg_row_count_mismatch(cora, cora_npy) -> None:
    NeighborLoader = pyg().NeighborLoader

    short = np.load(cora_npy[1], mmap_mode="r")[:-1]
    with pytest.raises(IBPInputError, match="features have 2707 rows, the graph has 2708 nodes"):
        NeighborLoader(pyg_data(cora), [5], features=short)


def test_pyg_feature_store_serves_numpy(cora_npy) -> None:
    IBPFeatureStore = pyg().IBPFeatureStore

    x, path = cora_npy
    store = IBPFeatureStore(np.load(path, mmap_mode="r"))
    got = store.get_tensor(group_name=None, attr_name="x", index=IDS)
    assert torch.equal(got, torch.from_numpy(x)[IDS])


def dgl_loaders_or_skip():
    """``ibp_graph.loaders.dgl``, or a skip without DGL."""
    if dgl_loaders is None:
        pytest.skip(f"DGL cannot be imported: {DGL_MISSING}")
    return dgl_loaders


def test_dgl_loader_with_numpy_features(cora, cora_npy) -> None:
    loaders = dgl_loaders_or_skip()
    import dgl

    x, path = cora_npy
    g = dgl.graph(tuple(cora.edge_index), num_nodes=cora.num_nodes)
    before = file_state(path)
    loader = loaders.DataLoader(
        g,
        torch.arange(cora.num_nodes),
        loaders.NeighborSampler([5, 5]),
        batch_size=512,
        shuffle=True,
        features=np.load(path, mmap_mode="r"),
        seed=0,
    )
    assert isinstance(loader.features, NumpyFeatures)
    ref = torch.from_numpy(x)
    batches = 0
    for input_nodes, _output_nodes, blocks in loader:
        feat = blocks[0].srcdata["feat"]
        assert feat.dtype == torch.float32 and torch.equal(feat, ref[input_nodes])
        batches += 1
    assert batches == -(-cora.num_nodes // 512)
    assert file_state(path) == before


def test_dgl_row_count_mismatch(cora, cora_npy) -> None:
    loaders = dgl_loaders_or_skip()
    import dgl

    g = dgl.graph(tuple(cora.edge_index), num_nodes=cora.num_nodes)
    short = np.load(cora_npy[1], mmap_mode="r")[:-1]
    with pytest.raises(IBPInputError, match="features have 2707 rows, the graph has 2708 nodes"):
        loaders.DataLoader(g, [0], loaders.NeighborSampler([5]), features=short)


# --------------------------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------------------------


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "uint8"])
def test_cuda_device_gathers_on_the_cpu_then_copies(tmp_path, dtype: str) -> None:
    x = table(dtype)
    mm = saved(tmp_path, x)
    src = as_feature_source(mm, "cuda")
    ref = as_feature_source(torch.from_numpy(x), "cuda")
    assert src.device == ref.device and src.device.type == "cuda"
    assert src.index_device == ref.index_device == torch.device("cpu")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        rows = src.gather(IDS, stream=stream)
    stream.synchronize()
    want = ref.gather(IDS)
    assert rows.device == want.device and rows.dtype == want.dtype and rows.is_contiguous()
    assert torch.equal(rows, want)
    assert torch.equal(src.gather(IDS.cuda()), want)
    assert src.stored_bytes(IDS) == ref.stored_bytes(IDS) == IDS.numel() * src.row_bytes


@gpu
@needs_gpu
def test_pyg_loader_on_cuda_with_a_memmap(cora, cora_npy) -> None:
    NeighborLoader = pyg().NeighborLoader

    x, path = cora_npy
    loader = NeighborLoader(
        pyg_data(cora),
        [5, 5],
        batch_size=512,
        features=np.load(path, mmap_mode="r"),
        device="cuda",
        seed=0,
    )
    ref = torch.from_numpy(x)
    for batch in loader:
        assert batch.x.is_cuda and torch.equal(batch.x.cpu(), ref[batch.n_id.cpu()])


# --------------------------------------------------------------------------------------------
# torch.as_tensor of an IBPTable
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "uint8"])
def test_torch_as_tensor_of_an_ibp_table_is_the_decoded_table(tmp_path, dtype: str) -> None:
    x = table(dtype, n=60, d=9)
    t = ibp_graph.compress(x, tmp_path / "x.ibp", progress=False)
    want = torch.from_numpy(np.asarray(t))
    assert torch.equal(want, torch.from_numpy(x))
    for convert in (torch.as_tensor, torch.tensor, torch.from_dlpack, torch.asarray):
        got = convert(t)
        assert got.dtype == want.dtype and got.device == torch.device("cpu")
        assert torch.equal(got, want), convert
    assert torch.as_tensor(t, dtype=torch.float64).dtype == torch.float64
    first, second = torch.as_tensor(t), torch.as_tensor(t)
    assert first.data_ptr() != second.data_ptr()  # each call decodes into its own memory
    first.zero_()
    assert torch.equal(t[:], want)


def test_torch_as_tensor_of_a_bfloat16_table(tmp_path) -> None:
    x = torch.randn(40, 6).to(torch.bfloat16)
    t = ibp_graph.compress(x, tmp_path / "b.ibp", progress=False)
    got = torch.as_tensor(t)
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), x.view(torch.int16))


def test_dlpack_export_refuses_copy_false_and_a_closed_table(tmp_path) -> None:
    t = ibp_graph.compress(table("float32"), tmp_path / "x.ibp", progress=False)
    assert t.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError, match="copy=False forbids"):
        t.__dlpack__(copy=False)
    t.close()
    with pytest.raises(IBPInputError, match="the table is closed"):
        torch.as_tensor(t)


# --------------------------------------------------------------------------------------------
# np.asarray of an IBPTable
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "uint8"])
def test_np_asarray_of_an_ibp_table_decodes_it_in_one_pass(tmp_path, monkeypatch, dtype) -> None:
    x = table(dtype, n=300, d=9)
    t = ibp_graph.compress(x, tmp_path / "x.ibp", progress=False)
    calls = []
    decode_words = t.decode_words
    monkeypatch.setattr(t, "decode_words", lambda ids: calls.append(len(ids)) or decode_words(ids))
    got = np.asarray(t)
    assert calls == [300]  # one request for every row, not one per row
    assert got.dtype == x.dtype and np.array_equal(got.view(np.uint8), x.view(np.uint8))
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.array(t).flags.writeable and np.array(t, copy=True).shape == x.shape


def test_np_asarray_of_an_ibp_table_refuses_copy_false_bfloat16_and_a_closed_table(
    tmp_path,
) -> None:
    t = ibp_graph.compress(table("float32"), tmp_path / "x.ibp", progress=False)
    with pytest.raises(ValueError, match="copy=False forbids"):
        np.asarray(t, copy=False)
    t.close()
    with pytest.raises(IBPInputError, match="the table is closed"):
        np.asarray(t)
    b = ibp_graph.compress(torch.randn(8, 4).bfloat16(), tmp_path / "b.ibp", progress=False)
    with pytest.raises(IBPInputError, match="NumPy has no bfloat16"):
        np.asarray(b)
