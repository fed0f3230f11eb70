"""Public API tests: ``ibp_graph.compress`` and ``ibp_graph.open`` through files on disk."""

from __future__ import annotations

import enum
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import DTYPE_NAMES, make_table, same_bits, to_torch, torch_bits

import ibp_graph
from ibp_graph import IBPError, IBPFormatError, IBPInputError
from ibp_graph.container import FORMAT_VERSION, read_header
from ibp_graph.dtypes import storage_dtype, torch_dtype
from ibp_graph.errors import check_bool, check_choice

STAT_KEYS = {
    "raw_bytes",
    "stored_bytes",
    "ratio",
    "rows_raw",
    "metadata_bytes",
    "threshold",
    "threshold_sweep",
    "sample_rows",
    "column_kinds",
    "code_bits",
    "clusters",
}


def check_table(table: ibp_graph.IBPTable, x: np.ndarray, name: str) -> None:
    """Every way of reading the whole table gives ``x`` (storage dtype) bit for bit."""
    assert table.shape == x.shape and len(table) == x.shape[0]
    assert table.dtype == torch_dtype(name) and table.dtype_name == name
    arr = table.read()
    assert arr.dtype == storage_dtype(name)
    assert same_bits(arr, x)
    t = table[:]
    assert isinstance(t, torch.Tensor) and t.dtype == torch_dtype(name)
    assert t.shape == x.shape
    assert same_bits(torch_bits(t), x)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# --------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------

INPUTS = [(n, kind) for n in DTYPE_NAMES for kind in ("numpy", "torch")]


@pytest.mark.parametrize(
    "name,kind",
    [(n, k) for n, k in INPUTS if not (n == "bfloat16" and k == "numpy")],  # numpy: no bf16
)
def test_round_trip_every_dtype(tmp_path: Path, rng: np.random.Generator, name: str, kind: str):
    x = make_table(rng, name, 64, 7, "mixed")
    x[:4] = make_table(rng, name, 4, 7, "specials")
    data = x.copy() if kind == "numpy" else to_torch(x, name)
    path = tmp_path / f"{name}.ibp"
    table = ibp_graph.compress(data, path)
    check_table(table, x, name)
    ids = [5, 0, 5, 63, 2]
    got = table[ids]
    assert got.dtype == torch_dtype(name)
    assert same_bits(torch_bits(got), x[ids])
    if name == "bfloat16":
        assert torch.equal(got.view(torch.int16), data[ids].view(torch.int16))
    # The file on its own gives the same rows.
    with ibp_graph.open(path) as again:
        check_table(again, x, name)


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_word_bytes_8(tmp_path: Path, rng: np.random.Generator, name: str) -> None:
    x = make_table(rng, name, 40, 5, "mixed")
    table = ibp_graph.compress(to_torch(x, name), tmp_path / "t8.ibp", word_bytes=8)
    assert table.word_bytes == 8
    assert table.header.meta["word_bytes"] == 8
    check_table(table, x, name)


def test_sparse_table_compresses_well(tmp_path: Path, sparse_table: np.ndarray) -> None:
    table = ibp_graph.compress(sparse_table, tmp_path / "cora.ibp")
    assert table.ratio > 30
    assert table.stats["rows_raw"] == 0
    check_table(table, sparse_table, "float32")


def test_incompressible_table_is_stored_raw(tmp_path: Path, rng: np.random.Generator) -> None:
    x = rng.integers(-(2**31), 2**31, size=(3000, 16), dtype=np.int64).astype(np.int32)
    table = ibp_graph.compress(x, tmp_path / "noise.ibp")
    assert table.stats["rows_raw"] == 3000
    assert 0.95 <= table.ratio <= 1.0
    check_table(table, x, "int32")


# --------------------------------------------------------------------------------------------
# Row selections
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A 50 x 6 int16 table (mixed rows) written once for the module."""
    x = make_table(np.random.default_rng(5), "int16", 50, 6, "mixed")
    path = tmp_path_factory.mktemp("api") / "t.ibp"
    ibp_graph.compress(x, path)
    return path, x


@pytest.fixture
def table(written: tuple[Path, np.ndarray]):
    with ibp_graph.open(written[0]) as t:
        yield t


MASK = np.random.default_rng(7).random(50) < 0.3

ID_FORMS = {
    "int": (7, 7),
    "negative int": (-1, 49),
    "numpy int": (np.int32(3), 3),
    "None": (None, slice(None)),
    "slice": (slice(2, 40, 3), slice(2, 40, 3)),
    "reverse slice": (slice(None, None, -7), slice(None, None, -7)),
    "slice past the end": (slice(45, 500), slice(45, 500)),
    "list": ([3, 3, 0, 49], [3, 3, 0, 49]),
    "range": (range(10, 0, -2), list(range(10, 0, -2))),
    "numpy int32": (np.array([4, 1, 4], dtype=np.int32), [4, 1, 4]),
    "numpy int64": (np.array([49, 0], dtype=np.int64), [49, 0]),
    "numpy uint64": (np.array([8, 9], dtype=np.uint64), [8, 9]),
    "numpy uint8": (np.array([8, 9], dtype=np.uint8), [8, 9]),
    "torch int64": (torch.tensor([2, 2, 40]), [2, 2, 40]),
    "torch int32": (torch.tensor([1, 30], dtype=torch.int32), [1, 30]),
    "numpy bool mask": (MASK, MASK),
    "torch bool mask": (torch.from_numpy(MASK), MASK),
}


@pytest.mark.parametrize("form", list(ID_FORMS))
def test_id_forms(table: ibp_graph.IBPTable, written, form: str) -> None:
    x = written[1]
    ids, ref = ID_FORMS[form]
    want = x[ref]
    got = table.read(ids)
    assert got.shape == want.shape and same_bits(got, want)
    t = table[ids]
    assert t.dtype == torch.int16 and same_bits(t.numpy(), want)


EMPTY_FORMS = {
    "empty int64 array": np.zeros(0, dtype=np.int64),
    "empty list": [],
    "empty tensor": torch.zeros(0, dtype=torch.int64),
    "all-false mask": np.zeros(50, dtype=bool),
    "empty slice": slice(5, 5),
}


@pytest.mark.parametrize("form", list(EMPTY_FORMS))
def test_empty_selections(table: ibp_graph.IBPTable, form: str) -> None:
    got = table.read(EMPTY_FORMS[form])
    assert got.shape == (0, 6) and got.dtype == np.int16
    assert table[EMPTY_FORMS[form]].shape == (0, 6)


BAD_IDS = {
    "int too large": (50, r"row index 50 is out of range .* 50 rows"),
    "int too negative": (-51, r"row index -51 is out of range"),
    "bool scalar": (True, r"bool"),
    "array entry too large": (np.array([1, 50, 2]), r"row index 50 \(at position 1\)"),
    "negative array entry": (np.array([0, -51]), r"row index -51 \(at position 1\)"),
    "negative list entry": ([4, 5, -61], r"row index -61 \(at position 2\)"),
    "tensor entry too large": (torch.tensor([1, 2, 99]), r"row index 99 \(at position 2\)"),
    "huge uint64": (np.array([2**64 - 1], dtype=np.uint64), r"18446744073709551615"),
    "float array": (np.array([1.0, 2.0]), r"integers or booleans, got dtype float64"),
    "float tensor": (torch.tensor([1.0]), r"integers or booleans, got dtype float32"),
    "2-D mask": (np.ones((50, 6), dtype=bool), r"1-D with one entry per row"),
    "short bool mask": (np.zeros(49, dtype=bool), r"49 entries, the table has 50 rows"),
    "long torch mask": (torch.ones(51, dtype=torch.bool), r"51 entries"),
    "strings": (["a"], r"integers"),
}


@pytest.mark.parametrize("case", list(BAD_IDS))
def test_bad_ids_raise_input_error(table: ibp_graph.IBPTable, case: str) -> None:
    ids, match = BAD_IDS[case]
    with pytest.raises(IBPInputError, match=match):
        table.read(ids)
    with pytest.raises(IBPInputError, match=match):
        table[ids]


# --------------------------------------------------------------------------------------------
# Bad inputs to compress
# --------------------------------------------------------------------------------------------

BAD_DATA = {
    "1-D": (np.zeros(5, dtype=np.float32), r"2-D table .* shape \(5,\)"),
    "3-D": (np.zeros((2, 3, 4), dtype=np.float32), r"2-D table .* shape \(2, 3, 4\)"),
    "0 rows": (np.zeros((0, 5), dtype=np.float32), r"empty .*\(0, 5\)"),
    "0 columns": (np.zeros((5, 0), dtype=np.float32), r"empty .*\(5, 0\)"),
    "object": (np.array([[1, "a"]], dtype=object), r"object"),
    "complex": (np.zeros((3, 3), dtype=np.complex64), r"unsupported dtype complex64"),
    "bool": (np.zeros((3, 3), dtype=bool), r"unsupported dtype bool"),
    "uint16": (np.zeros((3, 3), dtype=np.uint16), r"unsupported dtype uint16"),
    "torch bool": (torch.zeros(3, 3, dtype=torch.bool), r"unsupported dtype torch.bool"),
    "torch complex": (torch.zeros(3, 3, dtype=torch.complex64), r"unsupported dtype"),
    "torch 1-D": (torch.zeros(4), r"2-D"),
    "list": ([[1.0, 2.0], [3.0, 4.0]], r"expected a NumPy array or torch tensor, got list"),
    "scalar": (3.0, r"got float"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_compress_rejects_bad_data(tmp_path: Path, case: str) -> None:
    data, match = BAD_DATA[case]
    with pytest.raises(IBPInputError, match=match):
        ibp_graph.compress(data, tmp_path / "x.ibp")
    assert _leftovers(tmp_path) == []


BAD_OPTIONS = {
    "clusters 0": ({"clusters": 0}, r"clusters must be an integer in 1\.\.255, got 0"),
    "clusters 256": ({"clusters": 256}, r"clusters .* got 256"),
    "clusters 1.5": ({"clusters": 1.5}, r"clusters .* got 1\.5"),
    "clusters True": ({"clusters": True}, r"clusters .* got True"),
    "threshold 0.3": ({"threshold": 0.3}, r"threshold must be in \(0\.5, 1\], got 0\.3"),
    "threshold 1.5": ({"threshold": 1.5}, r"threshold"),
    "threshold x": ({"threshold": "x"}, r"threshold must be 'auto' or a number, got 'x'"),
    "threshold None": ({"threshold": None}, r"threshold"),
    "word_bytes 5": ({"word_bytes": 5}, r"word_bytes must be 4 or 8, got 5"),
    "align 3": ({"align": 3}, r"align must be 'auto' or one of .* got 3"),
    "align 64": ({"align": 64}, r"align .* got 64"),
    "align word": ({"align": "best"}, r"align .* got 'best'"),
    "sample -1": ({"sample": -1}, r"sample must be a row count >= 0 .* got -1"),
    "sample 2.5": ({"sample": 2.5}, r"sample .* got 2\.5"),
}


@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_compress_rejects_bad_options(tmp_path: Path, case: str) -> None:
    kwargs, match = BAD_OPTIONS[case]
    x = np.ones((10, 4), dtype=np.float32)
    with pytest.raises(IBPInputError, match=match):
        ibp_graph.compress(x, tmp_path / "x.ibp", **kwargs)
    assert _leftovers(tmp_path) == []


def test_compress_missing_output_directory(tmp_path: Path) -> None:
    out = tmp_path / "nope" / "x.ibp"
    with pytest.raises(IBPInputError, match=r"does not exist") as info:
        ibp_graph.compress(np.ones((4, 4), dtype=np.float32), out)
    assert "nope" in str(info.value)
    assert not out.parent.exists()


def test_input_errors_are_ibp_and_value_errors(tmp_path: Path) -> None:
    with pytest.raises(IBPError):
        ibp_graph.compress(np.zeros(3), tmp_path / "x.ibp")
    with pytest.raises(ValueError):
        ibp_graph.compress(np.zeros(3), tmp_path / "x.ibp")


def test_check_bool_takes_bools_and_numpy_bools() -> None:
    assert check_bool("flag", True) is True
    out = check_bool("flag", np.bool_(False))
    assert out is False and type(out) is bool
    for bad, name in ((1, "int"), ("yes", "str"), (None, "NoneType"), (np.int64(1), "int64")):
        with pytest.raises(IBPInputError) as info:
            check_bool("flag", bad)
        assert str(info.value) == f"flag must be a bool, got '{name}'"


def test_check_choice_takes_strings_and_string_enums() -> None:
    class Mode(enum.Enum):
        ONCE = "once"
        BLOCK = "block"

    allowed = ("once", "per_hop", "twice")
    assert check_choice("draw", "per_hop", allowed) == "per_hop"
    out = check_choice("draw", Mode.ONCE, allowed)
    assert out == "once" and type(out) is str
    cases = (("block", "'block'"), (Mode.BLOCK, "'block'"), (3, "'int'"), (None, "'NoneType'"))
    for bad, got in cases:
        with pytest.raises(IBPInputError) as info:
            check_choice("draw", bad, allowed)
        assert str(info.value) == f"draw must be one of 'once', 'per_hop', 'twice', got {got}"


# --------------------------------------------------------------------------------------------
# Inputs are left alone, whatever their layout
# --------------------------------------------------------------------------------------------


def test_numpy_input_is_not_modified(tmp_path: Path, rng: np.random.Generator) -> None:
    x = make_table(rng, "float32", 80, 9, "mixed")
    before = x.copy()
    ibp_graph.compress(x, tmp_path / "x.ibp", clusters=2)
    assert same_bits(x, before) and x.flags.writeable


@pytest.mark.parametrize("name", ["float32", "bfloat16", "int8"])
def test_torch_input_is_not_modified(tmp_path: Path, rng: np.random.Generator, name: str) -> None:
    t = to_torch(make_table(rng, name, 80, 9, "mixed"), name)
    before = t.clone()
    table = ibp_graph.compress(t, tmp_path / "x.ibp")
    assert same_bits(torch_bits(t), torch_bits(before))
    assert same_bits(torch_bits(table[:]), torch_bits(before))


def test_read_only_input(tmp_path: Path, rng: np.random.Generator) -> None:
    x = make_table(rng, "float64", 30, 5, "specials")
    x.flags.writeable = False
    table = ibp_graph.compress(x, tmp_path / "x.ibp")
    assert not x.flags.writeable
    check_table(table, x, "float64")


def test_fortran_order_input(tmp_path: Path, rng: np.random.Generator) -> None:
    x = make_table(rng, "float32", 30, 11, "mixed")
    f = np.asfortranarray(x)
    assert not f.flags.c_contiguous
    check_table(ibp_graph.compress(f, tmp_path / "x.ibp"), x, "float32")


def test_strided_slice_input(tmp_path: Path, rng: np.random.Generator) -> None:
    big = make_table(rng, "int32", 90, 33, "mixed")
    view = big[::3, 1::4]
    assert not view.flags.c_contiguous
    check_table(ibp_graph.compress(view, tmp_path / "x.ibp"), view.copy(), "int32")


def test_non_contiguous_torch_input(tmp_path: Path, rng: np.random.Generator) -> None:
    x = make_table(rng, "bfloat16", 12, 40, "normal")
    t = to_torch(x, "bfloat16").T[::2]  # (20, 12), strided
    assert not t.is_contiguous()
    want = torch_bits(t.contiguous())
    check_table(ibp_graph.compress(t, tmp_path / "x.ibp"), want.view(np.uint16), "bfloat16")


@pytest.mark.parametrize("dt", [">f4", ">i8", ">f2"])
def test_big_endian_input(tmp_path: Path, rng: np.random.Generator, dt: str) -> None:
    x = make_table(rng, np.dtype(dt).newbyteorder("<").name, 25, 6, "specials")
    be = x.astype(dt)
    before = be.copy()
    table = ibp_graph.compress(be, tmp_path / "x.ibp")
    got = table.read()
    assert got.dtype == np.dtype(dt).newbyteorder("<")
    assert same_bits(got, x)  # same values, stored little-endian
    assert same_bits(be, before) and be.dtype == np.dtype(dt)


def test_npy_path_input(tmp_path: Path, rng: np.random.Generator) -> None:
    x = make_table(rng, "float16", 30, 10, "mixed")
    src = tmp_path / "x.npy"
    np.save(src, x)
    check_table(ibp_graph.compress(str(src), tmp_path / "x.ibp"), x, "float16")
    with pytest.raises(IBPInputError, match="overwrite the input"):
        ibp_graph.compress(src, src)


# --------------------------------------------------------------------------------------------
# Options and description
# --------------------------------------------------------------------------------------------


def test_stats_and_description(tmp_path: Path, rng: np.random.Generator) -> None:
    x = make_table(rng, "float32", 120, 20, "mixed")
    path = tmp_path / "desc.ibp"
    table = ibp_graph.compress(x, path, clusters=2)
    stats = table.stats
    assert STAT_KEYS <= set(stats)
    assert stats["raw_bytes"] == x.nbytes == table.raw_bytes
    lengths = np.diff(table.offsets) * table.align
    assert stats["stored_bytes"] == int(lengths.sum())
    assert stats["ratio"] == pytest.approx(x.nbytes / stats["stored_bytes"])
    assert stats["rows_raw"] == int(np.count_nonzero(lengths >= 20 * 4))
    assert stats["metadata_bytes"] > 0
    assert stats["sample_rows"] == 120
    assert len(stats["clusters"]) == table.num_clusters == 2
    assert sum(c["rows"] for c in stats["clusters"]) == 120
    assert sum(c["stored_bytes"] for c in stats["clusters"]) == stats["stored_bytes"]
    # The ratio counts the row section (padded to whole 8-byte words).
    assert table.stored_bytes == -(-stats["stored_bytes"] // 8) * 8
    assert table.ratio == pytest.approx(x.nbytes / table.stored_bytes)
    assert table.shape == (120, 20) and len(table) == 120
    assert table.dtype == torch.float32
    assert table.path == str(path)
    assert np.all(table.offsets * table.align % table.align == 0)
    text = repr(table)
    assert text.startswith("IBPTable(") and str(path) in text
    assert "shape=(120, 20)" in text and "dtype=float32" in text and "clusters=2" in text
    assert re.search(r"ratio=\d+\.\d{3}", text)


def test_fixed_threshold(tmp_path: Path, rng: np.random.Generator) -> None:
    x = make_table(rng, "float32", 60, 10, "normal")
    table = ibp_graph.compress(x, tmp_path / "t.ibp", threshold=0.9)
    assert table.stats["threshold"] == 0.9
    assert table.stats["threshold_sweep"] == [0.9]
    check_table(table, x, "float32")


@pytest.mark.parametrize("sample,want", [(0, 300), (50, 50), (None, 300)])
def test_sample_sizes(tmp_path: Path, rng: np.random.Generator, sample, want: int) -> None:
    x = make_table(rng, "float16", 300, 10, "mixed")
    table = ibp_graph.compress(x, tmp_path / "s.ibp", sample=sample)
    assert table.stats["sample_rows"] == want
    check_table(table, x, "float16")


@pytest.mark.parametrize("align", [1, 2, 4, 8, 16, 32])
def test_explicit_alignment(tmp_path: Path, rng: np.random.Generator, align: int) -> None:
    x = make_table(rng, "float32", 40, 13, "mixed")
    table = ibp_graph.compress(x, tmp_path / "a.ibp", align=align)
    assert table.align == align == table.header.meta["align"]
    check_table(table, x, "float32")


def four_populations(rng: np.random.Generator, n: int = 100) -> np.ndarray:
    """Rows from four populations with little in common bit-wise, shuffled."""
    a = np.zeros((n, 64), dtype=np.float32)
    a[:, :16] = rng.random((n, 16)) < 0.3
    b = np.rint(rng.normal(size=(n, 64)) * 3).astype(np.float32) * np.float32(1e20)
    c = -np.rint(rng.random((n, 64)) * 7).astype(np.float32)
    d = np.zeros((n, 64), dtype=np.float32)
    d[:, 48:] = (rng.random((n, 16)) < 0.3) * np.float32(3.0)
    return np.concatenate([a, b, c, d])[rng.permutation(4 * n)]


def test_clusters_help_on_mixed_populations(tmp_path: Path, rng: np.random.Generator) -> None:
    x = four_populations(rng, n=1500)
    one = ibp_graph.compress(x, tmp_path / "k1.ibp", clusters=1)
    four = ibp_graph.compress(x, tmp_path / "k4.ibp", clusters=4)
    assert four.num_clusters == 4 and four.cluster_ids is not None
    assert four.ratio >= one.ratio

    def total(t: ibp_graph.IBPTable) -> int:
        return t.stored_bytes + t.stats["metadata_bytes"]

    assert total(four) <= total(one)
    check_table(four, x, "float32")
    assert four.cluster_ids.shape == (6000,) and int(four.cluster_ids.max()) < 4


def test_clusters_that_do_not_pay_for_themselves_are_dropped(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    x = rng.normal(size=(30, 64)).astype(np.float32)  # too few rows to amortise 4 masks
    table = ibp_graph.compress(x, tmp_path / "k.ibp", clusters=4)
    assert table.num_clusters == 1 and table.cluster_ids is None
    check_table(table, x, "float32")


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_one_by_one_tables(tmp_path: Path, name: str) -> None:
    for i, kind in enumerate(("specials", "zeros", "bits")):
        x = make_table(np.random.default_rng(i), name, 1, 1, kind)
        table = ibp_graph.compress(to_torch(x, name), tmp_path / f"{kind}.ibp")
        check_table(table, x, name)
        assert same_bits(torch_bits(table[0]), x[0])


def test_more_clusters_than_rows(tmp_path: Path, rng: np.random.Generator) -> None:
    x = make_table(rng, "float32", 2, 9, "bits")
    table = ibp_graph.compress(x, tmp_path / "k.ibp", clusters=4)
    assert 1 <= table.num_clusters <= 2
    check_table(table, x, "float32")


def test_many_batches_with_clusters(tmp_path: Path, rng: np.random.Generator) -> None:
    """Enough words for several encode and decode batches, k = 3, raw rows included."""
    x = make_table(rng, "float32", 3000, 64, "mixed")
    table = ibp_graph.compress(x, tmp_path / "big.ibp", clusters=3, sample=500)
    assert 0 < table.stats["rows_raw"] < 3000
    check_table(table, x, "float32")
    ids = rng.integers(0, 3000, size=5000)
    assert same_bits(table.read(ids), x[ids])


def test_compress_is_deterministic(tmp_path: Path, rng: np.random.Generator) -> None:
    x = make_table(rng, "float16", 200, 30, "mixed")
    a = ibp_graph.compress(x, tmp_path / "a.ibp", clusters=3)
    b = ibp_graph.compress(x, tmp_path / "b.ibp", clusters=3)
    assert (tmp_path / "a.ibp").read_bytes() == (tmp_path / "b.ibp").read_bytes()
    assert a.stats == b.stats


# --------------------------------------------------------------------------------------------
# Opening and closing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("verify", [True, False])
def test_open_options(written, mmap: bool, verify: bool) -> None:
    path, x = written
    table = ibp_graph.open(path, mmap=mmap, verify=verify)
    check_table(table, x, "int16")
    assert isinstance(table.rows_section, np.ndarray)
    table.close()


def test_closed_table_refuses_reads(written) -> None:
    path, _ = written
    with ibp_graph.open(path) as table:
        assert table[0].shape == (6,)
    with pytest.raises(ValueError, match="closed"):
        table.read()
    with pytest.raises(ValueError, match=re.escape(str(path))):
        table[[0, 1]]
    table.close()  # closing twice is harmless


def test_closed_table_error_is_an_ibp_error(written) -> None:
    table = ibp_graph.open(written[0])
    table.close()
    with pytest.raises(IBPError):
        table.read()


def test_open_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.ibp"
    with pytest.raises(IBPFormatError, match=re.escape(str(path)) + ": no such file"):
        ibp_graph.open(path)


# --------------------------------------------------------------------------------------------
# Damaged files
# --------------------------------------------------------------------------------------------


@pytest.fixture
def damaged(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, np.ndarray, bytes]:
    """A fresh float32 file with two clusters (raw, flat and grouped rows)."""
    sparse = make_table(rng, "float32", 200, 37, "mixed")
    dense = rng.standard_normal((200, 37)).astype(np.float32) * np.float32(1e30)
    x = np.concatenate([sparse, dense])[rng.permutation(400)]
    path = tmp_path / "d.ibp"
    assert ibp_graph.compress(x, path, clusters=2, align=4).num_clusters == 2
    return path, x, path.read_bytes()


def _flip(path: Path, raw: bytes, at: int, xor: int = 0xFF) -> None:
    b = bytearray(raw)
    b[at] ^= xor
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_flipped_row_byte_is_detected(damaged, where: str) -> None:
    path, _, raw = damaged
    rows = read_header(path).sections["rows"]
    at = rows.offset + {"first": 0, "middle": rows.nbytes // 2, "last": rows.nbytes - 1}[where]
    _flip(path, raw, at)
    with pytest.raises(IBPFormatError, match=re.escape(str(path)) + r": .*'rows'"):
        ibp_graph.open(path)


def _read_or_format_error(path: Path, x: np.ndarray, **kw) -> str:
    """Open and read everything; return 'exact', 'wrong' or 'refused' (IBPFormatError).

    Anything other than `IBPFormatError` propagates and fails the calling test.
    """
    try:
        with ibp_graph.open(path, **kw) as table:
            got = table.read()
            got1 = table.read(np.arange(x.shape[0])[::-1])
    except IBPFormatError as exc:
        assert str(exc).startswith(f"{path}: ")
        return "refused"
    exact = same_bits(got, x) and same_bits(got1, x[::-1])
    return "exact" if exact else "wrong"


@pytest.mark.parametrize(
    "section", ["rows", "offsets", "cluster_ids", "masks", "code_bits", "bitvals"]
)
def test_every_flipped_byte_is_detected_or_harmless(damaged, section: str) -> None:
    """Single-byte damage anywhere in a section, with and without checksums.

    With ``verify=True`` every flip is refused (the section checksums). ``verify=False``
    skips only the row section's checksum: a flip in any other section is still refused,
    and a flip in the rows may decode to different rows, which is what that mode accepts.
    What must never happen is any other exception (IndexError, a NumPy error, a crash) than
    `IBPFormatError`.
    """
    path, x, raw = damaged
    info = read_header(path).sections[section]
    step = max(1, info.nbytes // 300)
    outcomes: dict[str, int] = {}
    for at in range(info.offset, info.offset + info.nbytes, step):
        for xor in (0xFF, 0x01):
            _flip(path, raw, at, xor)
            assert _read_or_format_error(path, x) == "refused"
            got = _read_or_format_error(path, x, verify=False)
            outcomes[got] = outcomes.get(got, 0) + 1
    assert sum(outcomes.values()) > 0
    if section != "rows":
        assert set(outcomes) == {"refused"}, outcomes


def test_flipped_header_byte_is_refused_or_harmless(damaged) -> None:
    """The fixed header and the JSON text are checksummed: every flip is refused."""
    path, x, raw = damaged
    json_end = 24 + len(raw[24:4096].rstrip(b" "))
    outcomes = set()
    for at in [*range(24), *range(24, json_end + 2, 3)]:
        for xor in (0x01, 0x04, 0x20, 0xFF):
            _flip(path, raw, at, xor)
            outcomes.add(_read_or_format_error(path, x))
    assert outcomes == {"refused"}


def test_flipped_column_count_is_detected(tmp_path: Path) -> None:
    x = np.arange(20 * 38).reshape(20, 38).astype(np.int8)
    path = tmp_path / "cols.ibp"
    ibp_graph.compress(x, path)
    raw = path.read_bytes()
    at = raw.index(b'"shape":[20,38]') + len(b'"shape":[20,3')
    _flip(path, raw, at, 0x01)  # '8' -> '9'
    assert _read_or_format_error(path, x) == "refused"


def test_verify_false_reads_damaged_rows_without_crashing(damaged) -> None:
    path, x, raw = damaged
    rows = read_header(path).sections["rows"]
    _flip(path, raw, rows.offset)
    outcome = _read_or_format_error(path, x, verify=False)
    assert outcome in ("refused", "wrong", "exact")


def test_truncated_file(damaged) -> None:
    path, _, raw = damaged
    for keep in (len(raw) - 1, len(raw) - 100, 4096, 30, 10, 0):
        path.write_bytes(raw[:keep])
        with pytest.raises(IBPFormatError, match=re.escape(str(path))):
            ibp_graph.open(path)


def test_wrong_magic(damaged) -> None:
    path, _, raw = damaged
    path.write_bytes(b"NOTANIBP" + raw[8:])
    with pytest.raises(IBPFormatError, match=re.escape(str(path)) + r": not an \.ibp file"):
        ibp_graph.open(path)


def test_future_version(damaged) -> None:
    path, _, raw = damaged
    path.write_bytes(raw[:8] + (FORMAT_VERSION + 1).to_bytes(4, "little") + raw[12:])
    with pytest.raises(IBPFormatError, match=rf"format version {FORMAT_VERSION + 1} is newer"):
        ibp_graph.open(path)


def test_file_is_not_left_behind_on_bad_input(tmp_path: Path) -> None:
    before = _leftovers(tmp_path)
    with pytest.raises(IBPInputError):
        ibp_graph.compress(np.zeros((3, 3), dtype=bool), tmp_path / "b.ibp")
    assert _leftovers(tmp_path) == before
    assert not os.path.exists(tmp_path / "b.ibp")
