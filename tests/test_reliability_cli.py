"""The command line under abuse: nothing the user owns is clobbered, every error is one line."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import set_header_stats
from test_cli import assert_one_line_error, run_cli, sha256, sparse_table

import ibp_graph
from ibp_graph.container import IBPWriter
from ibp_graph.dtypes import as_table
from ibp_graph.errors import IBPInputError

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def table(tmp_path: Path) -> tuple[Path, Path, np.ndarray]:
    """``features.npy`` and its ``features.ibp``, as in the README."""
    arr = sparse_table(200, 24)
    npy, ibp = tmp_path / "features.npy", tmp_path / "features.ibp"
    np.save(npy, arr)
    ibp_graph.compress(npy, ibp).close()
    return npy, ibp, arr


def _no_temporaries(directory: Path) -> None:
    left = [p.name for p in directory.iterdir() if p.name.startswith(".")]
    assert left == [], left


# -- 1. only a regular file (or nothing) is ever replaced ---------------------------------------
def _special_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    link = tmp_path / "link.npy"
    link.symlink_to(fifo)
    folder = tmp_path / "dir.npy"
    folder.mkdir()
    out = {"fifo": fifo, "symlink to fifo": link, "directory": folder}
    if IS_ROOT:  # a private character device, the same kind as /dev/full
        dev = tmp_path / "full.npy"
        try:
            os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 7))
            out["character device"] = dev
        except OSError:  # a container without CAP_MKNOD
            pass
    return out


def _kinds(paths: dict[str, Path]) -> dict[str, int]:
    return {k: stat.S_IFMT(os.lstat(p).st_mode) for k, p in paths.items()}


@pytest.mark.parametrize("command", ["compress", "decompress"])
@pytest.mark.parametrize("force", [False, True])
def test_output_onto_a_special_file_is_refused(capsys, tmp_path, table, command, force) -> None:
    npy, ibp, _ = table
    specials = _special_files(tmp_path)
    before = _kinds(specials)
    for name, target in specials.items():
        src = npy if command == "compress" else ibp
        extra = ["--force"] if force else []
        code, out, err = run_cli(capsys, command, src, "-o", target, *extra)
        assert_one_line_error(code, err, 1, str(target))
        assert out == ""
        assert "regular file" in err or "directory" in err, (name, err)
    assert _kinds(specials) == before
    _no_temporaries(tmp_path)


def test_library_refuses_special_files(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.ibp"
    os.mkfifo(fifo)
    with pytest.raises(IBPInputError, match=r"pipe\.ibp: exists and is a FIFO"):
        ibp_graph.compress(np.eye(4, dtype=np.float32), fifo)
    with pytest.raises(IBPInputError, match="FIFO"):
        IBPWriter(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _no_temporaries(tmp_path)


def test_symlinked_output_keeps_the_link(capsys, tmp_path: Path, table) -> None:
    npy, ibp, arr = table
    real = tmp_path / "real.npy"
    real.write_bytes(b"old")
    link = tmp_path / "link.npy"
    link.symlink_to(real)
    code, _, err = run_cli(capsys, "decompress", ibp, "-o", link, "--force")
    assert code == 0, err
    assert link.is_symlink() and np.array_equal(np.load(real), arr)


# -- 2. overwriting is opt-in -------------------------------------------------------------------
def test_readme_sequence_keeps_the_original(capsys, table) -> None:
    npy, ibp, arr = table
    before = sha256(npy)
    code, out, err = run_cli(capsys, "decompress", ibp, "-o", npy)
    assert_one_line_error(code, err, 1, str(npy), "already exists", "--force")
    assert out == "" and sha256(npy) == before


@pytest.mark.parametrize("command", ["compress", "decompress"])
def test_force_replaces_a_regular_file(capsys, tmp_path: Path, table, command: str) -> None:
    npy, ibp, arr = table
    target = tmp_path / ("old.ibp" if command == "compress" else "old.npy")
    target.write_bytes(b"precious")
    src = npy if command == "compress" else ibp
    code, _, err = run_cli(capsys, command, src, "-o", target)
    assert_one_line_error(code, err, 1, str(target), "already exists")
    assert target.read_bytes() == b"precious"
    code, out, err = run_cli(capsys, command, src, "-o", target, "--force")
    assert code == 0 and out == f"{target}\n", err
    if command == "decompress":
        assert np.array_equal(np.load(target), arr)
    else:
        assert np.array_equal(ibp_graph.open(target).read(), arr)
    _no_temporaries(tmp_path)


def test_force_never_overwrites_the_input(capsys, table) -> None:
    npy, _, _ = table
    before = sha256(npy)
    code, _, err = run_cli(capsys, "compress", npy, "-o", npy, "--force")
    assert_one_line_error(code, err, 1, "overwrite the input")
    assert sha256(npy) == before


class _FakeResult:
    """What ``train`` returns, without training."""

    def summary(self) -> str:
        return "== summary =="

    def to_dict(self) -> dict[str, object]:
        return {"losses": [1.0]}


def test_train_json_is_replaced_only_with_force(capsys, monkeypatch, tmp_path: Path) -> None:
    runs: list[object] = []
    monkeypatch.setattr(
        "ibp_graph.train.run.train", lambda cfg, log: runs.append(cfg) or _FakeResult()
    )
    keep = tmp_path / "keep.json"
    keep.write_text("precious")
    argv = ["train", "--config", "cora-sage", "--set", "epochs=1", "--json", keep]
    code, out, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, 1, str(keep), "already exists", "pass --force")
    assert out == "" and keep.read_text() == "precious" and runs == []  # before training
    code, out, err = run_cli(capsys, *argv, "--force")
    assert code == 0 and out == "== summary ==\n", err
    assert json.loads(keep.read_text()) == {"losses": [1.0]} and len(runs) == 1
    folder = tmp_path / "dir.json"
    folder.mkdir()
    code, _, err = run_cli(capsys, *argv[:-1], folder, "-f")
    assert_one_line_error(code, err, 1, str(folder), "directory")
    assert folder.is_dir() and len(runs) == 1
    _no_temporaries(tmp_path)


def test_train_passes_force_to_its_ranks(capsys, monkeypatch, tmp_path: Path) -> None:
    launched: list[list[str]] = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(
        "ibp_graph.distributed.launch.launch_local", lambda argv, n: launched.append(argv)
    )
    keep = tmp_path / "keep.json"
    keep.write_text("old")
    argv = ["train", "--config", "cora-sage", "--json", keep, "--nproc-per-node", "2"]
    code, _, err = run_cli(capsys, *argv, "--force")
    assert code == 0, err
    assert launched == [["train", "--config", "cora-sage", "--json", str(keep), "--force"]]


# -- 3. a run stopped by SIGTERM (kill, timeout, a batch scheduler) leaves nothing behind -------
_SLOW_CLI = """
import sys, time
import ibp_graph.cli.decompress, ibp_graph.compress
from ibp_graph.cli.main import main
from ibp_graph.container import IBPWriter
from ibp_graph.table import IBPTable

def slow(f):
    def wrapper(*args, **kwargs):
        time.sleep(0.05)
        return f(*args, **kwargs)
    return wrapper

# Many small steps, each 50 ms longer: the run is still writing when the signal arrives.
ibp_graph.compress.ENCODE_BATCH_WORDS = 256
ibp_graph.cli.decompress.CHUNK_BYTES = 4096
IBPWriter.write_rows = slow(IBPWriter.write_rows)
IBPTable.read = slow(IBPTable.read)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["compress", "decompress"])
def test_sigterm_removes_the_temporaries(tmp_path: Path, command: str) -> None:
    arr = np.random.default_rng(0).standard_normal((3000, 40)).astype(np.float32)
    if command == "compress":
        src = tmp_path / "in.npy"
        np.save(src, arr)
    else:
        src = tmp_path / "in.ibp"
        ibp_graph.compress(arr, src).close()
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / ("x.ibp" if command == "compress" else "x.npy")
    env = {k: v for k, v in os.environ.items() if k != "IBP_GRAPH_DEBUG"}
    argv = [sys.executable, "-c", _SLOW_CLI, command, str(src), "-o", str(out)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while not any(folder.iterdir()):  # the hidden temporary file is being written
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert (stdout, stderr) == ("", "ibp-graph: terminated\n")
    assert list(folder.iterdir()) == []


def test_sigterm_handler_is_set_only_while_a_command_runs(capsys, monkeypatch, table) -> None:
    npy, _, _ = table
    seen: list[object] = []

    def fake_compress(*args: object, **kwargs: object) -> None:
        seen.append(signal.getsignal(signal.SIGTERM))
        raise IBPInputError("stop here")

    monkeypatch.setattr("ibp_graph.cli.compress.compress", fake_compress)
    before = signal.getsignal(signal.SIGTERM)
    code, _, err = run_cli(capsys, "compress", npy, "-o", npy.with_name("o.ibp"))
    assert_one_line_error(code, err, 1, "stop here")
    assert seen != [before] and callable(seen[0])
    assert signal.getsignal(signal.SIGTERM) is before


# -- 5/6. one line, naming the user's file ------------------------------------------------------
@pytest.mark.parametrize("layout", ["coo", "csr", "dict of coo"])
def test_sparse_pt_is_one_line(capsys, tmp_path: Path, layout: str) -> None:
    x = torch.eye(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sparse CSR is in beta
        obj = {"coo": x.to_sparse, "csr": x.to_sparse_csr, "dict of coo": x.to_sparse}[layout]()
    src = tmp_path / "s.pt"
    torch.save({"x": obj} if layout.startswith("dict") else obj, src)
    code, _, err = run_cli(capsys, "compress", src, "-o", tmp_path / "s.ibp")
    assert_one_line_error(code, err, 1, str(src), "sparse", "to_dense()")
    with pytest.raises(IBPInputError, match="to_dense"):
        ibp_graph.compress(x.to_sparse(), tmp_path / "s.ibp")


def test_every_table_reader_refuses_a_sparse_tensor() -> None:
    # as_table is where tensors become tables: compress, .pt files and PinnedRawTable.
    with pytest.raises(IBPInputError, match=r"^rows: holds a torch.sparse_coo tensor.*to_dense"):
        as_table(torch.eye(4).to_sparse(), what="rows")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_unwritable_folder_is_one_line(capsys, table) -> None:
    _, ibp, _ = table
    for out in ("/proc/ibp-graph-out.pt", "/proc/ibp-graph-out.npy"):
        code, _, err = run_cli(capsys, "decompress", ibp, "-o", out)
        assert_one_line_error(code, err, 1, out, "cannot write the output")
        assert ".tmp" not in err
    code, _, err = run_cli(capsys, "compress", table[0], "-o", "/proc/version.ibp")
    assert_one_line_error(code, err, 1, "/proc/version.ibp", "cannot write the output")
    assert ".tmp" not in err


@pytest.mark.skipif(IS_ROOT, reason="root writes into read-only folders")
def test_read_only_folder_is_one_line(capsys, tmp_path: Path, table) -> None:
    _, ibp, _ = table
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        for name in ("x.pt", "x.npy"):
            code, _, err = run_cli(capsys, "decompress", ibp, "-o", ro / name)
            assert_one_line_error(code, err, 1, str(ro / name), "Permission denied")
    finally:
        ro.chmod(0o755)


_FULL_DISK = """
import contextlib, io, json, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
from ibp_graph.cli.main import main
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
results = []
for argv in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def test_full_disk_is_one_line_naming_the_output(tmp_path: Path) -> None:
    """A file size limit stands in for a full disk: every write past it fails.

    The inputs are only read; every output (about 480 kB) is larger than the limit.
    """
    arr = np.random.default_rng(0).standard_normal((3000, 40)).astype(np.float32)
    npy, ibp = tmp_path / "in.npy", tmp_path / "in.ibp"
    np.save(npy, arr)
    ibp_graph.compress(arr, ibp).close()
    outs = [tmp_path / n for n in ("big.ibp", "big.npy", "big.pt")]
    runs = [["compress", str(npy), "-o", str(outs[0])]]
    runs += [["decompress", str(ibp), "-o", str(o)] for o in outs[1:]]
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, "100000", json.dumps(runs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for out, (code, err) in zip(outs, json.loads(done.stdout), strict=True):
        assert_one_line_error(code, err, 1, str(out), "cannot write the output")
        assert ".tmp" not in err
        assert not out.exists()
    _no_temporaries(tmp_path)


def test_output_under_a_file_is_one_line(capsys, table) -> None:
    npy, ibp, _ = table
    code, _, err = run_cli(capsys, "compress", npy, "-o", ibp / "sub.ibp")
    assert_one_line_error(code, err, 1, f"{ibp} is not a directory")


@pytest.mark.parametrize(
    "name, write, needles",
    [
        ("text.npy", lambda p: p.write_text("1,2,3\n"), ["not a .npy file", "1,2,3"]),
        (
            "pickle.npy",
            lambda p: p.write_bytes(__import__("pickle").dumps(np.eye(2))),
            ["pickle", "for safety", "numpy.save"],
        ),
        (
            "objects.npy",
            lambda p: np.save(p, np.array([[1, None]], dtype=object), allow_pickle=True),
            ["objects", "for safety", "numpy.save"],
        ),
        (
            "objects.pt",
            lambda p: torch.save({"x": torch.eye(2), "f": Path("a")}, p),
            ["pickled Python objects", "for safety", "torch.save"],
        ),
        (
            "legacy.pt",
            lambda p: p.write_bytes(__import__("pickle").dumps({"x": np.eye(2)}, protocol=4)),
            ["pickled Python objects", "for safety"],
        ),
    ],
)
def test_refusals_say_why_and_what_to_save(capsys, tmp_path, name, write, needles) -> None:
    src = tmp_path / name
    write(src)
    code, _, err = run_cli(capsys, "compress", src, "-o", tmp_path / "o.ibp")
    assert_one_line_error(code, err, 1, str(src), *needles)  # one line: no torch warning first
    assert "holds Python objects" not in err or name == "objects.npy"


# -- inspect on odd, header-consistent statistics -----------------------------------------------
ODD_STATS = [
    5,
    "x",
    [1, 2],
    None,
    {"clusters": 3},
    {"clusters": [1, 2]},
    {"clusters": [{"rows": "many"}]},
    {"code_bits": 7},
    {"code_bits": {"1": "a"}},
    {"code_bits": {"1": None, "2": 3}},
    {"column_kinds": [1]},
    {"threshold_sweep": 3},
    {"threshold_sweep": ["a", 1]},
    {"threshold": {"a": 1}, "sample_rows": "all"},
    {"rows_raw": "x", "metadata_bytes": -1.5},
]


@pytest.mark.parametrize("stats", ODD_STATS, ids=[json.dumps(s)[:30] for s in ODD_STATS])
def test_inspect_odd_stats(capsys, table, stats: object) -> None:
    _, ibp, _ = table
    set_header_stats(ibp, stats)
    code, out, err = run_cli(capsys, "inspect", ibp)
    assert code == 0 and err == "" and "shape" in out
    code, out, err = run_cli(capsys, "inspect", ibp, "--json")
    assert code == 0 and json.loads(out)["shape"] == [200, 24]
