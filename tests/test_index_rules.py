"""One set of row-index rules for `IBPTable` and `IBPFeatureStore` (`ibp_graph.indexing`)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph import decode_cpu
from ibp_graph.errors import IBPIndexError, IBPInputError
from ibp_graph.indexing import normalize_index, normalize_index_tensor

torch_geometric = pytest.importorskip("torch_geometric")

from ibp_graph.loaders.pyg import IBPFeatureStore  # noqa: E402

ROWS, COLS = 50, 7
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[ibp_graph.IBPTable, torch.Tensor]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x[rng.random(x.shape) < 0.5] = 0
    path = tmp_path_factory.mktemp("rules") / "a.ibp"
    ibp_graph.compress(x, path, progress=False).close()
    return ibp_graph.open(path), torch.from_numpy(x)


def matrix(rows: list[list[int]]) -> np.matrix:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        return np.matrix(rows)


def stores(pair) -> list[IBPFeatureStore]:
    table, x = pair
    return [IBPFeatureStore(table), IBPFeatureStore(x.clone())]


def one_line_index_error(info: pytest.ExceptionInfo) -> str:
    assert isinstance(info.value, IBPIndexError) and isinstance(info.value, IndexError)
    text = str(info.value)
    assert "\n" not in text and len(text) < 300
    return text


# -- unchanged: ordinary indexing, table and store alike --------------------------------------

MASK = torch.arange(ROWS) % 3 == 0
ORDINARY = {
    "int": 3,
    "negative int": -1,
    "numpy int": np.int64(4),
    "slice": slice(1, 40, 3),
    "negative step": slice(None, None, -2),
    "slice past the end": slice(45, 100),
    "empty slice": slice(5, 5),
    "list": [3, -1, 3],
    "empty list": [],
    "1-D tensor": torch.tensor([5, 0, 5, 49]),
    "int32 tensor": torch.tensor([1, 2], dtype=torch.int32),
    "negative tensor ids": torch.tensor([-1, 0]),
    "0-d tensor": torch.tensor(3),
    "negative 0-d tensor": torch.tensor(-50),
    "0-d array": np.array(3),
    "2-D array": np.array([[1, 2], [3, -4]]),
    "2-D tensor": torch.tensor([[1, 2], [3, 4]]),
    "3-D array": np.zeros((2, 2, 2), np.int64),
    "bool tensor mask": MASK,
    "bool array mask": MASK.numpy(),
    "non-contiguous tensor": torch.arange(20)[::2],
}


@pytest.mark.parametrize("case", list(ORDINARY))
def test_ordinary_indexing_matches_torch_for_table_and_store(pair, case: str) -> None:
    table, x = pair
    index = ORDINARY[case]
    # torch has no negative slice steps: NumPy's rules, which torch follows otherwise
    want = torch.from_numpy(x.numpy()[index].copy()) if isinstance(index, slice) else x[index]
    got = table[index]
    assert got.shape == want.shape and torch.equal(got, want)
    if isinstance(index, np.ndarray) and index.size > 1:
        index = torch.from_numpy(index)  # PyG's TensorAttr cannot hold such an array
    for store in stores(pair):
        got = store.get_tensor(None, "x", index)
        assert got.shape == want.shape and torch.equal(got, want)
        assert store.get_tensor_size(None, "x", index) == tuple(want.shape)
        (multi,) = store.multi_get_tensor([(None, "x", index)])
        assert torch.equal(multi, want)


def test_store_single_int_keeps_its_row_shape(pair) -> None:
    _, x = pair
    for store in stores(pair):
        assert store.get_tensor(None, "x", 7).shape == (COLS,)
        assert store.get_tensor_size(None, "x", 7) == (COLS,)
        assert store.get_tensor(None, "x", None).shape == (ROWS, COLS)
        out = store.multi_get_tensor([(None, "x", 7), (None, "x", torch.tensor([1, 2]))])
        assert torch.equal(out[0], x[7]) and torch.equal(out[1], x[[1, 2]])


# -- 1: a uint8 tensor is refused by the store as by the table ------------------------------


def test_store_refuses_a_uint8_index_like_the_table(pair) -> None:
    table, _ = pair
    m = (torch.arange(ROWS) % 4 == 0).to(torch.uint8)
    match = r"torch\.uint8 index is ambiguous"
    with pytest.raises(IBPIndexError, match=match):
        table[m]
    for store in stores(pair):
        with pytest.raises(IBPIndexError, match=match):
            store.get_tensor(None, "x", m)
        with pytest.raises(IBPIndexError, match=match):
            store.multi_get_tensor([(None, "x", m)])
        with pytest.raises(IBPIndexError, match=match):
            store.get_tensor_size(None, "x", m)


# -- 2: NumPy subclasses ----------------------------------------------------------------------


def test_np_matrix_reads_the_right_rows_and_keeps_the_compiled_decoder(pair) -> None:
    table, x = pair
    before = decode_cpu.available()
    got = table[matrix([[5]])]
    assert got.shape == (1, 1, COLS) and torch.equal(got, x[torch.tensor([[5]])])
    got = table[matrix([[5], [6]])]
    assert got.shape == (2, 1, COLS) and torch.equal(got, x[torch.tensor([[5], [6]])])
    got = table.read(matrix([[1, 2, 3]]))
    assert got.shape == (1, 3, COLS) and np.array_equal(got, x[torch.tensor([[1, 2, 3]])].numpy())
    assert decode_cpu.available() == before
    assert torch.equal(table[[5, 6]], x[[5, 6]])


def test_ids_are_always_plain_1d_int64_arrays() -> None:
    for index in (
        matrix([[5]]),
        matrix([[1, 2], [3, -4]]),
        np.array([[1, -2]], dtype=">i8"),
        np.array([3, 4], dtype=np.uint16)[::-1],
        torch.tensor([[1, 2]], dtype=torch.int8),
        np.array(4),
        [[1], [2]],
    ):
        ids, _ = normalize_index(index, ROWS)
        assert type(ids) is np.ndarray and ids.ndim == 1 and ids.dtype == np.int64
        assert ids.dtype.isnative and ids.flags.c_contiguous
    ids, shape = normalize_index(matrix([[1, 2], [3, -4]]), ROWS)
    assert ids.tolist() == [1, 2, 3, 46] and shape == (2, 2)


def test_masked_array_is_refused(pair) -> None:
    table, _ = pair
    index = np.ma.array([1, 2], mask=[0, 1])
    for read in (table.__getitem__, table.read):
        with pytest.raises(IBPIndexError, match="masked array's mask would be ignored") as info:
            read(index)
        one_line_index_error(info)


# -- 3: duplicate store keys ------------------------------------------------------------------


def test_store_refuses_a_key_given_twice(pair) -> None:
    table, x = pair
    match = re.escape("duplicate feature key (None, 'x'): given as 'x' and as (None, 'x')")
    with pytest.raises(IBPInputError, match=match):
        IBPFeatureStore({"x": table, (None, "x"): torch.zeros(3, 3)})
    store = IBPFeatureStore({"x": table, ("paper", "x"): x})  # distinct groups are fine
    assert len(store.get_all_tensor_attrs()) == 2


# -- 4: the store follows the table's rules ---------------------------------------------------

REFUSED = {
    "out of range in a tensor": (torch.tensor([0, 50]), r"row index 50 \(at position 1\)"),
    "too negative in a tensor": (torch.tensor([-51]), r"row index -51 \(at position 0\)"),
    "int out of range": (50, r"row index 50 is out of range for a table of 50 rows"),
    "0-d tensor out of range": (torch.tensor(50), r"row index 50 is out of range"),
    "short mask": (torch.ones(49, dtype=torch.bool), r"49 entries, the table has 50 rows"),
    "float slice": (slice(1.5, 3), r"bad slice slice\(1\.5, 3, None\)"),
    "float tensor": (torch.tensor([1.0]), r"integers or booleans, got dtype float32"),
    "bool": (True, r"a bool \(True\) is not a row index"),
    "2-D mask": (torch.ones(ROWS, COLS, dtype=torch.bool), r"1-D with one entry per row"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_store_refuses_what_the_table_refuses_with_the_same_message(pair, case: str) -> None:
    table, _ = pair
    index, match = REFUSED[case]
    with pytest.raises(IBPIndexError, match=match) as info:
        table[index]
    want = one_line_index_error(info)
    for store in stores(pair):
        with pytest.raises(IBPIndexError) as info:
            store.get_tensor(None, "x", index)
        assert one_line_index_error(info) == want
        with pytest.raises(IBPIndexError) as info:
            store.multi_get_tensor([(None, "x", index)])
        assert one_line_index_error(info) == want


def test_normalize_index_tensor_shares_normalize_index() -> None:
    for index in (3, -1, torch.tensor([-1, 0]), slice(None, None, -3), [[1, 2]], MASK, None):
        ids, shape = normalize_index(index, ROWS)
        tids, tshape = normalize_index_tensor(index, ROWS, "cpu")
        assert tshape == shape and tids.dtype == torch.int64 and tids.tolist() == ids.tolist()


@needs_gpu
@pytest.mark.gpu
def test_normalize_index_tensor_checks_a_cuda_index_on_the_gpu() -> None:
    index = torch.tensor([[-1, 0], [2, 49]], device="cuda")
    ids, shape = normalize_index_tensor(index, ROWS, "cuda")
    assert ids.is_cuda and shape == (2, 2) and ids.tolist() == [49, 0, 2, 49]
    ids, shape = normalize_index_tensor(MASK.cuda(), ROWS, "cuda")
    assert ids.tolist() == torch.nonzero(MASK).view(-1).tolist() and shape == (len(ids),)
    for index in (torch.tensor([0, 50]), torch.ones(49, dtype=torch.bool), torch.tensor([1.0])):
        with pytest.raises(IBPIndexError) as info:
            normalize_index(index, ROWS)
        with pytest.raises(IBPIndexError) as cuda_info:
            normalize_index_tensor(index.cuda(), ROWS, "cuda")
        assert str(cuda_info.value) == str(info.value)


# -- 5: dtypes, layouts and devices that hold no readable ids ---------------------------------

UNREADABLE = {
    "bfloat16": (torch.tensor([1.0], dtype=torch.bfloat16), r"got dtype bfloat16$"),
    "float8": (torch.tensor([1.0]).to(torch.float8_e4m3fn), r"got dtype float8_e4m3fn$"),
    "float16": (torch.tensor([1.0], dtype=torch.float16), r"got dtype float16$"),
    "complex": (torch.tensor([1j]), r"got dtype complex64$"),
    "sparse": (torch.tensor([1, 2]).to_sparse(), r"dense tensor, got layout sparse_coo"),
    "meta": (torch.empty(2, dtype=torch.long, device="meta"), r"on device meta"),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_unreadable_tensors_are_one_line_index_errors(pair, case: str) -> None:
    table, _ = pair
    index, match = UNREADABLE[case]
    for read in (table.__getitem__, table.read):
        with pytest.raises(IBPIndexError, match=match) as info:
            read(index)
        one_line_index_error(info)
    for store in stores(pair):
        with pytest.raises(IBPIndexError, match=match) as info:
            store.get_tensor(None, "x", index)
        one_line_index_error(info)


# -- 6: messages ------------------------------------------------------------------------------


def test_tuple_message_is_one_short_line(pair) -> None:
    table, _ = pair
    with pytest.raises(IBPIndexError, match="selects along more than the row dimension") as info:
        table[(torch.ones(ROWS, dtype=torch.bool), 0)]
    assert "..." in one_line_index_error(info)


@pytest.mark.parametrize("index", [[2**70], [[1], [-(2**70)]], [3, 2**64]])
def test_huge_int_in_a_list_is_out_of_range(pair, index) -> None:
    table, _ = pair
    with pytest.raises(IBPIndexError, match=r"row index -?\d+ \(at position \d\) is out of range"):
        table[index]
    with pytest.raises(IBPIndexError, match=r"is out of range for a table of 50 rows"):
        table[2**70]
