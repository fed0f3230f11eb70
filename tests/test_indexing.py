"""Row selection follows torch's rules for a 2-D tensor indexed on its first dimension."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph.errors import IBPIndexError, IBPInputError
from ibp_graph.indexing import normalize_ids, normalize_index

ROWS, COLS = 9, 3


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[ibp_graph.IBPTable, torch.Tensor]:
    x = np.arange(ROWS * COLS, dtype=np.int16).reshape(ROWS, COLS) * 7
    path = tmp_path_factory.mktemp("idx") / "t.ibp"
    ibp_graph.compress(x, path).close()
    return ibp_graph.open(path), torch.from_numpy(x)


MASK = [True, False, True, True, False, False, False, False, True]
SAME_AS_TORCH = {
    "int": 3,
    "negative int": -1,
    "numpy int": np.int64(2),
    "0-d tensor": torch.tensor(4),
    "negative 0-d tensor": torch.tensor(-2),
    "negative in list": [-1],
    "negative in tensor": torch.tensor([-1, 0, -9]),
    "negative in int32 array": np.array([-2, 5], dtype=np.int32),
    "nested list": [[0, 1], [2, -3]],
    "2-D tensor": torch.tensor([[1, 2, 3]]),
    "3-D array": np.array([[[-1], [0]]]),
    "slice": slice(1, 5),
    "negative slice start": slice(-3, None),
    "stepped slice": slice(None, None, 2),
    "ellipsis": ...,
    "empty tuple": (),
    "1-tuple": (3,),
    "tuple with a list": ([1, 2],),
    "rows and all columns": ([1, 2], slice(None)),
    "slice and ellipsis": (slice(2, 4), ...),
    "bool list": MASK,
    "bool tensor": torch.tensor(MASK),
    "bool array": np.array(MASK),
    "range": range(0, 8, 3),
    "empty list": [],
    "empty long tensor": torch.zeros(0, dtype=torch.long),
}


@pytest.mark.parametrize("case", list(SAME_AS_TORCH))
def test_same_result_as_torch(pair, case: str) -> None:
    table, x = pair
    index = SAME_AS_TORCH[case]
    # torch reads a nested list as a tuple (deprecated, to become a tensor index): we read
    # it as the tensor index it will be, x[torch.tensor(seq)].
    want = x[torch.tensor(index)] if case == "nested list" else x[index]
    got = table[index]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got, want)
    assert np.array_equal(table.read(index), want.numpy())


REFUSED = {
    "2-D tuple": ((1, 2), r"tuple index \(1, 2\) selects along more than the row dimension"),
    "string": ("3", r"got str '3'"),
    "float": (1.5, r"got float 1\.5"),
    "ragged list": ([1, [2]], r"rectangular array of integers"),
    "float list": ([1.5], r"integers or booleans, got dtype float64"),
    "None in list": ([None], r"integers or booleans"),
    "uint8 tensor": (torch.tensor([1, 0], dtype=torch.uint8), r"ambiguous.*\.bool\(\)"),
    "2-D bool mask": (np.ones((ROWS, COLS), dtype=bool), r"1-D with one entry per row"),
    "0-d bool tensor": (torch.tensor(True), r"1-D with one entry per row"),
    "bool": (True, r"a bool \(True\) is not a row index"),
    "short mask": ([True, False], r"2 entries, the table has 9 rows"),
    "zero step": (slice(None, None, 0), r"bad slice"),
    "too large": (9, r"row index 9 is out of range for a table of 9 rows"),
    "too negative": (-10, r"row index -10 is out of range"),
    "too negative in list": ([0, -10], r"row index -10 \(at position 1\)"),
    "too large in 2-D": ([[0], [9]], r"row index 9 \(at position 1\)"),
    "dict": ({1: 2}, r"got dict"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_with_a_clear_index_error(pair, case: str) -> None:
    table, _ = pair
    index, match = REFUSED[case]
    for read in (table.__getitem__, table.read):
        with pytest.raises(IBPIndexError, match=match) as info:
            read(index)
        assert isinstance(info.value, IndexError) and isinstance(info.value, IBPInputError)
        assert "\n" not in str(info.value)


def test_iteration_stops_at_the_end(pair) -> None:
    table, x = pair
    rows = list(table)
    assert len(rows) == ROWS and all(torch.equal(r, x[i]) for i, r in enumerate(rows))


def test_none_reads_every_row(pair) -> None:
    table, x = pair
    assert torch.equal(table[None], x) and np.array_equal(table.read(), x.numpy())


def test_normalize_ids_keeps_its_flat_contract() -> None:
    ids, scalar = normalize_ids(-1, 5)
    assert ids.tolist() == [4] and scalar
    ids, scalar = normalize_ids(torch.tensor([-1, 1]), 5)
    assert ids.tolist() == [4, 1] and not scalar and ids.dtype == np.int64
    with pytest.raises(IBPIndexError, match="1-D here"):
        normalize_ids([[1]], 5)
    ids, shape = normalize_index([[1, -1]], 5)
    assert ids.tolist() == [1, 4] and shape == (1, 2)


def test_huge_uint64_is_out_of_range() -> None:
    with pytest.raises(IBPIndexError, match="18446744073709551615"):
        normalize_index(np.array([2**64 - 1], dtype=np.uint64), 5)


def test_tables_written_under_a_path_object(tmp_path: Path) -> None:
    path = tmp_path / "p.ibp"
    ibp_graph.compress(np.eye(3, dtype=np.float32), path).close()
    with ibp_graph.open(path) as table:
        assert torch.equal(table[[-1, 0]], torch.eye(3)[[-1, 0]])
