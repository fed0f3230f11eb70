"""The ``ibp-graph`` command line, driven in-process through ``main([...])``."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ibp_graph
from ibp_graph.cli._common import human_bytes
from ibp_graph.cli.main import main
from ibp_graph.errors import IBPInputError


def run_cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_one_line_error(code: int, err: str, expected_code: int, *needles: str) -> None:
    assert code == expected_code, err
    lines = err.strip("\n").splitlines()
    if expected_code == 1:
        assert len(lines) == 1, err
        assert lines[0].startswith("ibp-graph: error: "), err
    else:  # argparse: usage line(s), then one "error:" line
        assert lines[-1].startswith("ibp-graph"), err
        assert "error: " in lines[-1], err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[-1], (needle, err)


def sparse_table(rows: int, cols: int, dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return ((rng.random((rows, cols)) < 0.05) * rng.integers(1, 4, (rows, cols))).astype(dtype)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    )


@pytest.fixture
def npy_table(tmp_path: Path) -> tuple[Path, np.ndarray]:
    arr = sparse_table(300, 40)
    path = tmp_path / "x.npy"
    np.save(path, arr)
    return path, arr


@pytest.fixture
def ibp_file(capsys, tmp_path: Path, npy_table: tuple[Path, np.ndarray]) -> Path:
    out = tmp_path / "x.ibp"
    assert run_cli(capsys, "compress", npy_table[0], "-o", out, "-q") == (0, f"{out}\n", "")
    return out


# -- round trips ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arr",
    [
        pytest.param(sparse_table(257, 33), id="float32"),
        pytest.param(np.asfortranarray(sparse_table(120, 17, np.float64)), id="fortran-float64"),
        pytest.param(
            np.random.default_rng(1).standard_normal((50, 3)).astype(np.float16), id="3xfloat16"
        ),
        pytest.param(np.random.default_rng(2).integers(-5, 5, (64, 7), dtype=np.int8), id="int8"),
    ],
)
def test_npy_round_trip(capsys, tmp_path: Path, arr: np.ndarray) -> None:
    src, ibp, back = tmp_path / "in.npy", tmp_path / "t.ibp", tmp_path / "back.npy"
    np.save(src, arr)
    before = sha256(src)
    code, out, err = run_cli(capsys, "compress", src, "-o", ibp)
    assert code == 0, err
    assert out == f"{ibp}\n"
    n, d = arr.shape
    assert re.fullmatch(
        rf"wrote {re.escape(str(ibp))}: {n} x {d} {arr.dtype.name}, \S+ \S*B -> \S+ \S*B "
        r"\(ratio \d+\.\d\dx, align \d+, \d+ rows raw\), file \S+ \S*B\n",
        err,
    ), err
    assert sha256(src) == before  # the input is never modified

    code, out, err = run_cli(capsys, "decompress", ibp, "-o", back, "--no-progress")
    assert (code, out, err) == (0, f"{back}\n", "")
    got = np.load(back)
    assert got.flags.c_contiguous
    assert same_bits(got, np.ascontiguousarray(arr))
    assert sorted(os.listdir(tmp_path)) == ["back.npy", "in.npy", "t.ibp"]  # no temporaries


def test_options_round_trip(capsys, tmp_path: Path, npy_table) -> None:
    src, arr = npy_table
    ibp, back = tmp_path / "o.ibp", tmp_path / "o.npy"
    code, _, err = run_cli(
        capsys,
        "compress", src, "-o", ibp, "--word", "8", "--clusters", "3", "--align", "16",
        "--threshold", "0.8", "--sample", "0", "--seed", "7", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    table = ibp_graph.open(ibp)
    assert (table.word_bytes, table.align, table.stats["threshold"]) == (8, 16, 0.8)
    assert table.num_clusters <= 3
    assert run_cli(capsys, "decompress", ibp, "-o", back)[0] == 0
    assert same_bits(np.load(back), arr)


def test_summary_gives_the_file_size_on_disk(capsys, tmp_path: Path) -> None:
    # A small table: the payload shrinks, but the 4 KiB-aligned file is larger than the input.
    src, ibp = tmp_path / "a.npy", tmp_path / "a.ibp"
    np.save(src, sparse_table(200, 16))
    code, _, err = run_cli(capsys, "compress", src, "-o", ibp)
    assert code == 0, err
    table = ibp_graph.open(ibp)
    size = ibp.stat().st_size
    assert size > table.raw_bytes > table.stored_bytes
    assert f"-> {human_bytes(table.stored_bytes)} (ratio {table.ratio:.2f}x" in err
    assert err.endswith(f"rows raw), file {human_bytes(size)}\n"), err


def test_quiet_prints_only_the_path(capsys, tmp_path: Path, npy_table) -> None:
    ibp = tmp_path / "q.ibp"
    assert run_cli(capsys, "compress", npy_table[0], "-o", ibp, "--quiet") == (0, f"{ibp}\n", "")


@pytest.mark.parametrize("kind", ["tensor", "dict-x", "dict-key", "bfloat16"])
def test_pt_round_trip(capsys, tmp_path: Path, kind: str) -> None:
    x = torch.from_numpy(sparse_table(90, 21, seed=3))
    if kind == "bfloat16":
        x = torch.randn(90, 21, generator=torch.Generator().manual_seed(0)).bfloat16()
    obj: object = {"x": x, "y": torch.arange(90)} if kind == "dict-x" else x
    extra: list[str] = []
    if kind == "dict-key":
        obj, extra = {"emb": x, "x": "not a tensor"}, ["--key", "emb"]
    src, ibp, back = tmp_path / "in.pt", tmp_path / "t.ibp", tmp_path / "back.pt"
    torch.save(obj, src)
    code, out, err = run_cli(capsys, "compress", src, "-o", ibp, *extra)
    assert (code, out) == (0, f"{ibp}\n"), err
    assert ibp_graph.open(ibp).dtype == x.dtype
    assert run_cli(capsys, "decompress", ibp, "-o", back) == (0, f"{back}\n", "")
    got = torch.load(back, weights_only=True)
    assert got.dtype == x.dtype and got.shape == x.shape
    view = torch.int16 if x.dtype == torch.bfloat16 else x.dtype
    assert torch.equal(got.view(view), x.view(view))


def test_bfloat16_to_npy_is_refused(capsys, tmp_path: Path) -> None:
    src, ibp, back = tmp_path / "b.pt", tmp_path / "b.ibp", tmp_path / "b.npy"
    torch.save(torch.ones(8, 4, dtype=torch.bfloat16), src)
    assert run_cli(capsys, "compress", src, "-o", ibp, "-q")[0] == 0
    code, out, err = run_cli(capsys, "decompress", ibp, "-o", back)
    assert_one_line_error(code, err, 1, str(ibp), "bfloat16", ".pt")
    assert out == "" and not back.exists()


# -- OGB -----------------------------------------------------------------------------------
def test_ogb_layout(capsys, tmp_path: Path) -> None:
    raw = tmp_path / "ogbn_arxiv" / "raw"
    raw.mkdir(parents=True)
    feats = np.random.default_rng(4).standard_normal((60, 8)).astype(np.float32)
    csv = raw / "node-feat.csv.gz"
    with gzip.open(csv, "wt") as f:
        np.savetxt(f, feats, delimiter=",", fmt="%.6f")
    ibp, back = tmp_path / "arxiv.ibp", tmp_path / "arxiv.npy"
    code, out, err = run_cli(
        capsys, "compress", "ogb:ogbn-arxiv", "--root", tmp_path, "-o", ibp, "--clusters", "2"
    )
    assert (code, out) == (0, f"{ibp}\n"), err
    assert run_cli(capsys, "decompress", ibp, "-o", back)[0] == 0
    with gzip.open(csv, "rt") as f:
        expected = np.loadtxt(f, delimiter=",", dtype=np.float32, ndmin=2)
    assert same_bits(np.load(back), expected)


def test_ogb_missing_folder(capsys, tmp_path: Path) -> None:
    code, out, err = run_cli(
        capsys,
        "compress",
        "ogb:ogbn-arxiv",
        "--root",
        tmp_path / "nowhere",
        "-o",
        tmp_path / "a.ibp",
    )
    assert_one_line_error(code, err, 1, str(tmp_path / "nowhere" / "ogbn_arxiv"))
    assert out == "" and not (tmp_path / "a.ibp").exists()


def test_ogb_npz_without_node_features(capsys, tmp_path: Path) -> None:
    raw = tmp_path / "ogbn_papers100M" / "raw"
    raw.mkdir(parents=True)
    np.savez(raw / "data.npz", edge_index=np.zeros((2, 3), np.int64))
    out = tmp_path / "p.ibp"
    code, _, err = run_cli(capsys, "compress", "ogb:ogbn-papers100M", "--root", tmp_path, "-o", out)
    assert_one_line_error(code, err, 1, "has no 'node_feat' array (edge_index)")
    assert "not a readable" not in err and not out.exists()


# -- inspect -------------------------------------------------------------------------------
def test_inspect_text(capsys, ibp_file: Path) -> None:
    code, out, err = run_cli(capsys, "inspect", ibp_file)
    assert (code, err) == (0, "")
    table = ibp_graph.open(ibp_file)
    assert "300 x 40" in out
    assert f"{table.ratio:.3f}x" in out
    for word in ("float32", "format version", "threshold", "code bits", "clusters", "sections"):
        assert word in out
    for name in table.header.sections:
        assert re.search(rf"^\s+{name}\s+[\d,]+\s+[\d,]+", out, re.M), name


def test_inspect_text_escapes_what_would_drive_the_terminal(capsys, tmp_path: Path) -> None:
    odd = tmp_path / "red\x1b[31m\nfake line.npy"  # the source names the input file
    np.save(odd, np.ones((20, 4), dtype=np.float32))
    code, _, err = run_cli(capsys, "compress", odd, "-o", tmp_path / "t.ibp", "--quiet")
    assert code == 0, err
    code, out, err = run_cli(capsys, "inspect", tmp_path / "t.ibp")
    assert (code, err) == (0, "")
    assert "\x1b" not in out and "red\\x1b[31m\\nfake line.npy" in out
    assert not any(line.startswith("fake line") for line in out.splitlines())


def test_inspect_json(capsys, ibp_file: Path) -> None:
    code, out, err = run_cli(capsys, "inspect", ibp_file, "--json")
    assert (code, err) == (0, "")
    info = json.loads(out)
    table = ibp_graph.open(ibp_file)
    stats = table.stats
    assert info["path"] == str(ibp_file)
    assert info["shape"] == list(table.shape) and info["dtype"] == table.dtype_name
    assert info["ratio"] == pytest.approx(table.ratio)
    assert (info["raw_bytes"], info["stored_bytes"]) == (table.raw_bytes, table.stored_bytes)
    assert (info["word_bytes"], info["align"], info["num_clusters"]) == (
        table.word_bytes,
        table.align,
        table.num_clusters,
    )
    assert info["format_version"] == table.header.format_version
    assert info["file_size"] == table.header.file_size == ibp_file.stat().st_size
    for key in ("rows_raw", "metadata_bytes", "threshold", "column_kinds", "code_bits", "clusters"):
        assert info[key] == stats[key], key
    assert [s["name"] for s in info["sections"]] == list(table.header.sections)
    for s in info["sections"]:
        ref = table.header.sections[s["name"]]
        assert (s["offset"], s["nbytes"], s["shape"]) == (ref.offset, ref.nbytes, list(ref.shape))
        assert np.dtype(s["dtype"]) == ref.dtype


# -- bad inputs: exit 1, one line naming the file --------------------------------------------
@pytest.mark.parametrize(
    "name, content, needle",
    [
        ("vec.npy", np.arange(5, dtype=np.float32), "2-D"),
        ("cube.npy", np.zeros((2, 3, 4), np.float32), "2-D"),
        ("empty.npy", np.zeros((0, 5), np.float32), "empty"),
        ("obj.npy", np.array([[1, "a"], [None, 2.0]], dtype=object), "objects"),
        ("cplx.npy", np.ones((3, 2), np.complex64), "complex64"),
        ("feat.txt", "1,2,3\n", "unknown input type"),
        ("missing.npy", None, "no such file"),
    ],
)
def test_bad_inputs(capsys, tmp_path: Path, name: str, content: object, needle: str) -> None:
    src = tmp_path / name
    if isinstance(content, np.ndarray):
        np.save(src, content, allow_pickle=content.dtype == object)
    elif isinstance(content, str):
        src.write_text(content)
    code, out, err = run_cli(capsys, "compress", src, "-o", tmp_path / "o.ibp")
    assert_one_line_error(code, err, 1, str(src), needle)
    assert out == "" and not (tmp_path / "o.ibp").exists()


def _damage(ibp: Path, how: str) -> None:
    data = bytearray(ibp.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "magic":
        data[:8] = b"NOTANIBP"
    elif how == "flipped":
        rows = ibp_graph.open(ibp).header.sections["rows"]
        data[rows.offset + rows.nbytes // 2] ^= 0x10
    ibp.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "how, needle", [("truncated", "bytes"), ("magic", "magic"), ("flipped", "checksum")]
)
@pytest.mark.parametrize("command", ["decompress", "inspect"])
def test_damaged_ibp(capsys, tmp_path: Path, ibp_file: Path, how, needle, command) -> None:
    _damage(ibp_file, how)
    before = sorted(os.listdir(tmp_path))
    extra = ["-o", tmp_path / "out.npy"] if command == "decompress" else ["--json"]
    code, out, err = run_cli(capsys, command, ibp_file, *extra)
    assert_one_line_error(code, err, 1, str(ibp_file), needle)
    assert out == ""
    assert sorted(os.listdir(tmp_path)) == before  # no output, no temporaries


def test_missing_output_dir(capsys, tmp_path: Path, npy_table, ibp_file: Path) -> None:
    missing = tmp_path / "no" / "such"
    code, _, err = run_cli(capsys, "compress", npy_table[0], "-o", missing / "a.ibp")
    assert_one_line_error(code, err, 1, str(missing))
    code, _, err = run_cli(capsys, "decompress", ibp_file, "-o", missing / "a.npy")
    assert_one_line_error(code, err, 1, str(missing))
    assert not (tmp_path / "no").exists()


def test_output_overwriting_input(capsys, npy_table) -> None:
    src = npy_table[0]
    before = sha256(src)
    code, _, err = run_cli(capsys, "compress", src, "-o", src)
    assert_one_line_error(code, err, 1, str(src), "overwrite")
    assert sha256(src) == before


# -- usage errors: exit 2, naming the option -------------------------------------------------
@pytest.mark.parametrize(
    "args, needle",
    [
        (["--word", "5"], "--word"),
        (["--threshold", "0.3"], "--threshold"),
        (["--threshold", "high"], "--threshold"),
        (["--clusters", "0"], "--clusters"),
        (["--clusters", "256"], "--clusters"),
        (["--align", "3"], "--align"),
        (["--sample", "-1"], "--sample"),
        (["--seed", "-5", "--sample", "10"], "--seed"),
        (["--seed", "1.5"], "--seed"),
        (["--device", "gpu"], "--device"),
        (["--device", "cuda:x"], "--device"),
        (["--root", "dataset"], "--root"),
        (["--key", "x"], "--key"),
    ],
)
def test_usage_errors(capsys, tmp_path: Path, npy_table, args: list[str], needle: str) -> None:
    code, out, err = run_cli(capsys, "compress", npy_table[0], "-o", tmp_path / "o.ibp", *args)
    assert_one_line_error(code, err, 2, needle)
    assert out == "" and not (tmp_path / "o.ibp").exists()


@pytest.mark.parametrize("command", ["compress", "decompress", "train"])
def test_empty_output_path_is_a_usage_error(capsys, npy_table, ibp_file, command: str) -> None:
    argv = {
        "compress": ["compress", npy_table[0], "-o", ""],
        "decompress": ["decompress", ibp_file, "-o", ""],
        "train": ["train", "--config", "cora-sage", "--json", ""],
    }[command]
    code, out, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, 2, "-o/--output" if command != "train" else "--json", "empty")
    assert out == ""


@pytest.mark.parametrize("tail", ["/", "/.", "/.."])
@pytest.mark.parametrize("command", ["compress", "train"])
def test_a_folder_as_output_is_a_usage_error(
    capsys, tmp_path: Path, npy_table, command: str, tail: str
) -> None:
    target = f"{tmp_path / 'newdir'}{tail}"
    argv = {
        "compress": ["compress", npy_table[0], "-o", target],
        "train": ["train", "--config", "cora-sage", "--json", target],
    }[command]
    code, out, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, 2, "must name the file to write, got a folder")
    assert out == "" and not (tmp_path / "newdir").exists()


BAD_OPTION_TYPES = {
    "seed -1, sampled": ({"seed": -1, "sample": 10}, "seed must be an integer >= 0, got -1"),
    "seed 1.5": ({"seed": 1.5}, "seed must be an integer >= 0, got 1.5"),
    "seed 'a'": ({"seed": "a"}, "seed must be an integer >= 0, got 'a'"),
    "seed True": ({"seed": True}, "seed must be an integer >= 0, got True"),
    "seed None": ({"seed": None}, "seed must be an integer >= 0, got None"),
    "word_bytes 4.0": ({"word_bytes": 4.0}, "word_bytes must be 4 or 8, got 4.0"),
    "word_bytes True": ({"word_bytes": True}, "word_bytes must be 4 or 8, got True"),
    "threshold True": ({"threshold": True}, "threshold must be 'auto' or a number, got True"),
    "threshold np.True_": ({"threshold": np.True_}, "threshold must be 'auto' or a number"),
    "align 4.0": ({"align": 4.0}, "align must be 'auto' or one of (1, 2, 4, 8, 16, 32), got 4.0"),
    "align True": (
        {"align": True},
        "align must be 'auto' or one of (1, 2, 4, 8, 16, 32), got True",
    ),
}


@pytest.mark.parametrize("case", list(BAD_OPTION_TYPES))
def test_api_checks_option_types_up_front(tmp_path: Path, case: str) -> None:
    # A bad seed used to fail deep in NumPy only when rows were sampled (10 of 100 here) and
    # to pass unchecked otherwise; a float word_bytes crashed mid-encoding.
    kwargs, needle = BAD_OPTION_TYPES[case]
    with pytest.raises(IBPInputError) as info:
        ibp_graph.compress(sparse_table(100, 8), tmp_path / "x.ibp", **kwargs)
    assert str(info.value).startswith(needle)
    assert os.listdir(tmp_path) == []


def test_api_empty_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(IBPInputError, match=r"^path is empty; name the \.ibp file to write$"):
        ibp_graph.compress(sparse_table(10, 4), "")
    assert os.listdir(tmp_path) == []


def test_usage_misc(capsys, tmp_path: Path, npy_table, ibp_file: Path) -> None:
    code, out, err = run_cli(capsys, "decompress", ibp_file, "-o", tmp_path / "x.csv")
    assert_one_line_error(code, err, 2, "--output", ".csv")
    code, out, err = run_cli(capsys, "compress", npy_table[0])  # -o is required
    assert_one_line_error(code, err, 2, "-o")
    code, out, err = run_cli(capsys)
    assert code == 2 and "compress" in err and "decompress" in err and out == ""
    assert run_cli(capsys, "--version") == (0, f"ibp-graph {ibp_graph.__version__}\n", "")
    code, out, _ = run_cli(capsys, "compress", "--help")
    assert code == 0 and "examples:" in out and "ibp-graph compress" in out


# -- error handling ----------------------------------------------------------------------------
def test_debug_env_reraises(capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("IBP_GRAPH_DEBUG", "1")
    with pytest.raises(IBPInputError, match="no such file"):
        main(["compress", str(tmp_path / "missing.npy"), "-o", str(tmp_path / "o.ibp")])


def test_unknown_exceptions_propagate(monkeypatch, tmp_path: Path, npy_table) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("ibp_graph.cli.compress.compress", boom)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["compress", str(npy_table[0]), "-o", str(tmp_path / "o.ibp")])


# -- as a program ------------------------------------------------------------------------------
def _subprocess(*argv: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "IBP_GRAPH_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "ibp_graph", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_subprocess_success(tmp_path: Path, npy_table) -> None:
    ibp = tmp_path / "p.ibp"
    proc = _subprocess("compress", npy_table[0], "-o", ibp)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{ibp}\n"
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(f"wrote {ibp}: ")


@pytest.mark.parametrize("command", ["inspect", "inspect --json"])
def test_a_reader_gone_from_stdout_ends_it_quietly(ibp_file: Path, command: str) -> None:
    """``ibp-graph inspect f.ibp | head -2``: the pipe's reader is gone before the output."""
    read, write = os.pipe()
    os.close(read)  # every write to the pipe now fails (EPIPE), as after head has exited
    env = {k: v for k, v in os.environ.items() if k != "IBP_GRAPH_DEBUG"}
    argv = [sys.executable, "-m", "ibp_graph", *command.split(), str(ibp_file)]
    try:
        proc = subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, env=env, timeout=120)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, b"")


def test_subprocess_error(tmp_path: Path) -> None:
    src = tmp_path / "missing.npy"
    proc = _subprocess("compress", src, "-o", tmp_path / "p.ibp")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [f"ibp-graph: error: {src}: no such file"]
