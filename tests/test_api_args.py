"""Argument checks of ``ibp_graph.compress`` and ``ibp_graph.open``: flags, devices, paths,
integer and threshold options, each refused with one line before any work."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph import IBPDeviceError, IBPFormatError, IBPInputError
from ibp_graph.container import read_header
from ibp_graph.dtypes import as_table

NO_GPU = not torch.cuda.is_available()


@pytest.fixture
def x() -> np.ndarray:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 9)).astype(np.float32)
    a[rng.random(a.shape) < 0.6] = 0
    return a


@pytest.fixture
def ibp(tmp_path: Path, x: np.ndarray) -> Path:
    path = tmp_path / "a.ibp"
    ibp_graph.compress(x, path, progress=False).close()
    return path


@pytest.fixture
def flipped(ibp: Path) -> Path:
    """The file with one bit of its row payload flipped: only the rows' checksum catches it."""
    rows = read_header(ibp).sections["rows"]
    b = bytearray(ibp.read_bytes())
    b[rows.offset + rows.nbytes - 1] ^= 0x80
    ibp.write_bytes(bytes(b))
    return ibp


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# --------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"verify": None}, "verify must be a bool, got 'NoneType'"),
        ({"verify": 0}, "verify must be a bool, got 'int'"),
        ({"verify": "no"}, "verify must be a bool, got 'str'"),
        ({"mmap": "no"}, "mmap must be a bool, got 'str'"),
        ({"mmap": 1}, "mmap must be a bool, got 'int'"),
    ],
)
def test_open_takes_bool_flags_only(flipped: Path, kwargs: dict, message: str) -> None:
    # verify=None used to skip the checksum and open the damaged file silently.
    with pytest.raises(IBPInputError) as info:
        ibp_graph.open(flipped, **kwargs)
    assert one_line(info) == message
    with pytest.raises(IBPInputError) as info:
        ibp_graph.IBPTable(flipped, **kwargs)
    assert one_line(info) == message


def test_open_flags_as_bools_and_numpy_bools(flipped: Path, x: np.ndarray) -> None:
    with pytest.raises(IBPFormatError, match="checksum"):
        ibp_graph.open(flipped, verify=True)
    with pytest.raises(IBPFormatError, match="checksum"):
        ibp_graph.open(flipped, verify=np.True_)
    for mmap in (True, False, np.True_, np.False_):
        with ibp_graph.open(flipped, verify=np.False_, mmap=mmap) as table:
            assert np.array_equal(table.read(np.arange(100)), x[:100])


@pytest.mark.parametrize(
    ("progress", "got"), [(0, "int"), (1, "int"), ("no", "str"), (0.0, "float")]
)
def test_compress_progress_takes_true_false_none(
    tmp_path: Path, capsys, x: np.ndarray, progress: object, got: str
) -> None:
    with pytest.raises(IBPInputError) as info:
        ibp_graph.compress(x, tmp_path / "p.ibp", progress=progress)
    assert one_line(info) == f"progress must be a bool, got '{got}'"
    assert os.listdir(tmp_path) == []
    assert capsys.readouterr().err == ""  # no bar was shown


def test_compress_progress_values_write_the_same_file(tmp_path: Path, x: np.ndarray) -> None:
    files = []
    for i, progress in enumerate((None, False, True, np.False_)):
        path = tmp_path / f"p{i}.ibp"
        ibp_graph.compress(x, path, progress=progress).close()
        files.append(path.read_bytes())
    assert all(f == files[0] for f in files)


def test_cuda_tables_check_progress_first(ibp: Path, x: np.ndarray) -> None:
    from ibp_graph.cuda_table import CudaIBPTable, PinnedRawTable

    with pytest.raises(IBPInputError, match=r"^progress must be a bool, got 'int'$"):
        CudaIBPTable(ibp, progress=0)
    with pytest.raises(IBPInputError, match=r"^progress must be a bool, got 'str'$"):
        PinnedRawTable(x, progress="no")


# --------------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------------


def test_meta_tensor_is_refused(tmp_path: Path) -> None:
    for shape in ((3, 3), (0, 3)):
        data = torch.empty(*shape, device="meta")
        with pytest.raises(IBPInputError) as info:
            ibp_graph.compress(data, tmp_path / "e.ibp")
        assert one_line(info).startswith("input: a tensor on device 'meta' has no data")
        with pytest.raises(IBPInputError, match="device 'meta'"):
            as_table(data)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("device", ["tpu", "blah", "meta", None, 3.5])
def test_open_checks_device_as_compress_does(
    tmp_path: Path, ibp: Path, x: np.ndarray, device: object
) -> None:
    with pytest.raises(IBPInputError) as opened:
        ibp_graph.open(ibp, device=device)
    with pytest.raises(IBPInputError) as compressed:
        ibp_graph.compress(x, tmp_path / "d.ibp", device=device)
    assert one_line(opened) == one_line(compressed)
    assert one_line(opened) == f"device must be 'cpu' or 'cuda[:N]', got {device!r}"


@pytest.mark.skipif(not NO_GPU, reason="device=0 is the first GPU where there is one")
def test_open_device_int_without_gpu(ibp: Path) -> None:
    with pytest.raises(IBPInputError) as info:
        ibp_graph.open(ibp, device=0)
    assert one_line(info) == "device must be 'cpu' or 'cuda[:N]', got 0"


@pytest.mark.skipif(not NO_GPU, reason="needs a machine without a usable GPU")
def test_open_cuda_without_gpu_is_a_device_error(ibp: Path) -> None:
    for device in ("cuda", "cuda:0", torch.device("cuda")):
        with pytest.raises(IBPDeviceError, match="needs a CUDA GPU"):
            ibp_graph.open(ibp, device=device)


def test_open_cpu_device_forms(ibp: Path, x: np.ndarray) -> None:
    for device in ("cpu", torch.device("cpu")):
        with ibp_graph.open(ibp, device=device) as table:
            assert np.array_equal(table.read(), x)
    with pytest.raises(TypeError, match="unexpected arguments for a CPU table: max_blocks"):
        ibp_graph.open(ibp, max_blocks=3)


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "got"), [(None, "NoneType"), (3, "int"), (["a.ibp"], "list")])
def test_path_types_are_checked(
    tmp_path: Path, ibp: Path, x: np.ndarray, path: object, got: str
) -> None:
    message = f"path must be a str, bytes or os.PathLike, got '{got}'"
    with pytest.raises(IBPInputError) as info:
        ibp_graph.compress(x, path)
    assert one_line(info) == message
    with pytest.raises(IBPInputError) as info:
        ibp_graph.open(path)
    assert one_line(info) == message
    assert os.listdir(tmp_path) == ["a.ibp"]


def test_bytes_paths_in_both_directions(tmp_path: Path, x: np.ndarray) -> None:
    out = tmp_path / "o.ibp"
    with ibp_graph.compress(x, os.fsencode(out), progress=False) as table:
        assert table.path == str(out)
    with ibp_graph.open(os.fsencode(out)) as table:
        assert table.path == str(out)
        assert repr(table).startswith(f"IBPTable({str(out)!r}, ")
        assert np.array_equal(table.read(), x)


@pytest.mark.parametrize("tail", [os.sep, os.sep + ".", os.sep + ".."])
def test_output_naming_a_directory_is_refused(tmp_path: Path, x: np.ndarray, tail: str) -> None:
    # "newdir/" used to write a file named newdir.
    path = str(tmp_path / "newdir") + tail
    with pytest.raises(IBPInputError) as info:
        ibp_graph.compress(x, path)
    assert one_line(info) == f"{path}: names a directory; give a file name"
    with pytest.raises(IBPInputError, match="names a directory"):
        ibp_graph.compress(x, os.fsencode(path))
    assert os.listdir(tmp_path) == []


def test_str_and_pathlike_outputs_unchanged(tmp_path: Path, x: np.ndarray) -> None:
    a, b = tmp_path / "a.ibp", tmp_path / "b.ibp"
    ibp_graph.compress(x, a, progress=False).close()
    ibp_graph.compress(x, str(b), progress=False).close()
    assert a.read_bytes() == b.read_bytes()
    with pytest.raises(IBPInputError, match="path is empty"):
        ibp_graph.compress(x, "")


# --------------------------------------------------------------------------------------------
# Integer and threshold options
# --------------------------------------------------------------------------------------------

INT_FORMS = {
    "numpy": lambda v: np.int64(v),
    "numpy int32": lambda v: np.int32(v),
    "0-d array": lambda v: np.array(v),
    "0-d tensor": lambda v: torch.tensor(v),
}


@pytest.mark.parametrize("form", list(INT_FORMS))
def test_integer_options_take_numpy_and_0d_integers(
    tmp_path: Path, x: np.ndarray, form: str
) -> None:
    plain = {"clusters": 2, "seed": 3, "word_bytes": 8, "sample": 100, "align": 4}
    wrap = INT_FORMS[form]
    ibp_graph.compress(x, tmp_path / "int.ibp", progress=False, **plain).close()
    kwargs = {k: wrap(v) for k, v in plain.items()}
    with ibp_graph.compress(x, tmp_path / "np.ibp", progress=False, **kwargs) as table:
        meta = table.header.meta
        assert all(type(meta[k]) is int for k in ("word_bytes", "align", "num_clusters"))
        assert np.array_equal(table.read(), x)
    assert (tmp_path / "np.ibp").read_bytes() == (tmp_path / "int.ibp").read_bytes()


def test_sample_zero_and_align_auto_forms(tmp_path: Path, x: np.ndarray) -> None:
    ibp_graph.compress(x, tmp_path / "a.ibp", sample=0, align="auto").close()
    ibp_graph.compress(x, tmp_path / "b.ibp", sample=np.uint8(0), align=np.str_("auto")).close()
    assert (tmp_path / "a.ibp").read_bytes() == (tmp_path / "b.ibp").read_bytes()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clusters": np.int64(0)}, "clusters must be an integer in 1..255, got 0"),
        ({"clusters": torch.tensor(256)}, "clusters must be an integer in 1..255, got 256"),
        ({"clusters": np.True_}, "clusters must be an integer in 1..255, got np.True_"),
        ({"clusters": torch.tensor(True)}, "clusters must be an integer in 1..255, got 'Tensor'"),
        ({"clusters": np.ones((40, 40))}, "clusters must be an integer in 1..255, got 'ndarray'"),
        ({"clusters": torch.tensor([2])}, "clusters must be an integer in 1..255, got 'Tensor'"),
        ({"seed": np.int64(-1)}, "seed must be an integer >= 0, got -1"),
        ({"seed": np.float64(3)}, "seed must be an integer >= 0, got np.float64(3.0)"),
        ({"word_bytes": np.int64(5)}, "word_bytes must be 4 or 8, got 5"),
        ({"sample": np.int64(-2)}, "sample must be a row count >= 0 (0 = all rows), got -2"),
        ({"align": np.int64(3)}, "align must be 'auto' or one of (1, 2, 4, 8, 16, 32), got 3"),
        ({"threshold": torch.tensor(0.9)}, "threshold must be 'auto' or a number, got 'Tensor'"),
        ({"threshold": np.array(0.9)}, "threshold must be 'auto' or a number, got 'ndarray'"),
        ({"threshold": np.True_}, "threshold must be 'auto' or a number, got np.True_"),
        ({"threshold": False}, "threshold must be 'auto' or a number, got False"),
        ({"threshold": "0.9"}, "threshold must be 'auto' or a number, got '0.9'"),
        ({"threshold": np.float64(0.4)}, "threshold must be in (0.5, 1], got 0.4"),
    ],
)
def test_bad_option_values_one_line(
    tmp_path: Path, x: np.ndarray, kwargs: dict, message: str
) -> None:
    with pytest.raises(IBPInputError) as info:
        ibp_graph.compress(x, tmp_path / "o.ibp", **kwargs)
    assert one_line(info) == message
    assert os.listdir(tmp_path) == []


def test_threshold_takes_real_numbers(tmp_path: Path, x: np.ndarray) -> None:
    ibp_graph.compress(x, tmp_path / "a.ibp", threshold=0.9, progress=False).close()
    ibp_graph.compress(x, tmp_path / "b.ibp", threshold=np.float64(0.9), progress=False).close()
    assert (tmp_path / "a.ibp").read_bytes() == (tmp_path / "b.ibp").read_bytes()
    for th in (np.float32(0.9), 1, np.int64(1), np.float16(0.75)):
        with ibp_graph.compress(x, tmp_path / "c.ibp", threshold=th) as table:
            assert table.stats["threshold"] == float(th)
            assert type(table.stats["threshold_sweep"][0]) is float


def test_as_int_is_shared_by_the_loaders() -> None:
    from ibp_graph import errors, loading

    assert loading.as_int is errors.as_int
    assert errors.as_int(np.int16(4)) == 4 and errors.as_int(torch.tensor(5)) == 5
    assert errors.as_int(True) is None and errors.as_int(np.array([1])) is None


# --------------------------------------------------------------------------------------------
# Documentation
# --------------------------------------------------------------------------------------------


def test_docstrings_name_the_errors() -> None:
    raises = ibp_graph.open.__doc__.split("Raises:")[1]
    for name in ("IBPFormatError", "IBPInputError", "IBPDeviceError", "TypeError"):
        assert f"{name}:" in raises
    assert "the table is empty" in ibp_graph.compress.__doc__.split("Raises:")[1]
    assert "(0, 0)" not in ibp_graph.IBPTable.stored_row_range.__doc__


@pytest.mark.parametrize(
    ("value", "want"),
    [(3, 3), (np.int64(2), 2), (torch.tensor(1), 1), (0, None), (-1, None), (True, None),
     (2.0, None), ("3", None), (np.array([1]), None)],
)  # fmt: skip
def test_check_int_takes_integers_from_the_minimum(value, want) -> None:
    from ibp_graph import errors

    if want is None:
        with pytest.raises(IBPInputError, match=r"^depth must be an int >= 1, got "):
            errors.check_int("depth", value, 1)
    else:
        got = errors.check_int("depth", value, 1)
        assert got == want and type(got) is int


def test_int_arguments_share_one_check() -> None:
    # num_nodes, world_size, a loader's epoch: one rule, one message shape.
    from ibp_graph.distributed.shard import rank_share
    from ibp_graph.graph import CSRGraph

    g = CSRGraph(torch.zeros(3, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                 torch.zeros(0, dtype=torch.long), np.int64(2))  # fmt: skip
    assert g.num_nodes == 2 and type(g.num_nodes) is int
    with pytest.raises(IBPInputError, match="num_nodes must be an int >= 1, got True"):
        CSRGraph(g.indptr, g.indices, g.edge_ids, True)
    with pytest.raises(IBPInputError, match=r"world_size must be an int >= 1, got 0"):
        rank_share(torch.arange(4), rank=0, world_size=0)
